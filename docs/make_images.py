"""Draw the figures of the documentation into docs/images/ (run from the repository root).

    OMP_NUM_THREADS=1 python docs/make_images.py

- ``tradeoff.png``: a sweep of disparate-impact bounds on 4,000 rows of the embedded UCI
  Adult data (70/30 split): accuracy and realised disparate impact against the requested
  bound, for ``FairClassifier`` with its default settings (linear model, stochastic SQP).
- ``history.png``: the training history of the fit at ``DI >= 0.8`` (loss, surrogate and
  exact violation per iteration), drawn by ``History.plot``.

Everything is seeded; the run takes about half a minute on one CPU thread. The PNGs are
committed, so building the site does not run this script.
"""

from __future__ import annotations

import warnings
from pathlib import Path

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
import torch  # noqa: E402
from sklearn.model_selection import train_test_split  # noqa: E402

import fairopt  # noqa: E402
from fairopt.estimators import FairClassifier  # noqa: E402
from fairopt.metrics import disparate_impact  # noqa: E402

IMAGES = Path(__file__).resolve().parent / "images"
BOUNDS = (0.5, 0.6, 0.7, 0.8, 0.9, 0.95)
SAVE = {"dpi": 110, "bbox_inches": "tight", "pil_kwargs": {"optimize": True}}


def adult_sample():
    """4,000 seeded rows of the embedded Adult data: numeric inputs plus two one-hot columns."""
    frame, _ = fairopt.datasets.load_frame("adult")
    frame = frame.sample(n=4000, random_state=0)
    columns = ["age", "education-num", "hours-per-week", "capital-gain", "capital-loss",
               "marital-status", "relationship"]
    X = pd.get_dummies(frame[columns], dtype=float)
    return train_test_split(X, frame["income"], frame[["sex"]], test_size=0.3,
                            stratify=frame["income"], random_state=0)


def fit(bound, X, y, S):
    constraints = None if bound is None else [("disparate_impact", "sex", bound)]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return FairClassifier(constraints=constraints, seed=0).fit(X, y, sensitive_features=S)


def main() -> None:
    torch.set_num_threads(1)
    IMAGES.mkdir(exist_ok=True)
    X_train, X_test, y_train, y_test, S_train, S_test = adult_sample()

    rows, models = [], {}
    for bound in (None, *BOUNDS):
        clf = fit(bound, X_train, y_train, S_train)
        models[bound] = clf
        row = {"bound": bound}
        for part, X, y, S in (("train", X_train, y_train, S_train), ("test", X_test, y_test, S_test)):
            predictions = clf.predict(X)
            row[f"{part} accuracy"] = float(np.mean(predictions == y.to_numpy()))
            row[f"{part} DI"] = disparate_impact(y, predictions, sensitive_features=S["sex"])
        rows.append(row)
        print({k: (round(v, 4) if isinstance(v, float) else v) for k, v in row.items()}, flush=True)
    table = pd.DataFrame(rows)
    free, swept = table[table["bound"].isna()].iloc[0], table[table["bound"].notna()]

    fig, (left, right) = plt.subplots(1, 2, figsize=(9, 3.4))
    for part, style in (("train", "o-"), ("test", "s--")):
        left.plot(swept["bound"], swept[f"{part} accuracy"], style, label=part)
        right.plot(swept["bound"], swept[f"{part} DI"], style, label=part)
    left.axhline(free["test accuracy"], color="grey", lw=0.8, ls=":", label="unconstrained (test)")
    right.axhline(free["test DI"], color="grey", lw=0.8, ls=":", label="unconstrained (test)")
    right.plot(list(BOUNDS), list(BOUNDS), color="black", lw=0.8, label="requested = realised")
    left.set(xlabel="requested bound: DI >= delta", ylabel="accuracy", title="What the bound costs")
    right.set(xlabel="requested bound: DI >= delta", ylabel="realised disparate impact",
              title="What the bound delivers")
    for ax in (left, right):
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.suptitle("FairClassifier (linear, SQP) on 4,000 rows of UCI Adult, sensitive feature: sex", fontsize=10)
    fig.tight_layout()
    fig.savefig(IMAGES / "tradeoff.png", **SAVE)
    plt.close(fig)

    fig, axes = plt.subplots(1, 3, figsize=(10, 3))
    models[0.8].history_.plot(ax=axes)
    fig.suptitle("history_ of FairClassifier(constraints=[(\"disparate_impact\", \"sex\", 0.8)]), "
                 "4,000 rows of UCI Adult", fontsize=10)
    fig.tight_layout()
    fig.savefig(IMAGES / "history.png", **SAVE)
    plt.close(fig)
    for name in ("tradeoff.png", "history.png"):
        print(IMAGES / name, f"{(IMAGES / name).stat().st_size / 1024:.0f} kB")


if __name__ == "__main__":
    main()
