"""Draw the figures of the documentation into docs/images/ (run from the repository root).

    OMP_NUM_THREADS=1 python docs/make_images.py

- ``tradeoff.png``: a sweep of disparate-impact bounds on 4,000 rows of the embedded UCI
  Adult data (70/30 split): accuracy and realised disparate impact against the requested
  bound, for ``FairClassifier`` with its default settings (linear model, stochastic SQP).
- ``history.png``: the training history of the fit at ``DI >= 0.8`` (loss, surrogate and
  exact violation per iteration), drawn by ``History.plot``.
- ``trees_<dataset>.png``: copies of ``benchmarks/results/trees/tradeoff_<dataset>.png`` (drawn
  by ``benchmarks/trees.py``) for the "Which model?" page, whose table :func:`trees_table`
  prints from ``benchmarks/results/trees/trees.md``. ``python docs/make_images.py trees`` does
  only this part (after a rerun of ``benchmarks/trees.py``; ``tests/test_which_model_page.py``
  fails until the page and the copies match the results again).

Everything is seeded; the run takes about half a minute on one CPU thread. The PNGs are
committed, so building the site does not run this script.
"""

from __future__ import annotations

import shutil
import sys
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
TREES = Path(__file__).resolve().parents[1] / "benchmarks" / "results" / "trees"
TREE_DATASETS = ("adult", "dutch", "law", "acsincome", "compas")
#: The rows of the "Which model?" table: benchmarks/trees.py's method names and the page's labels.
TREE_METHODS = {
    "fairopt-linear": '`model="linear"`',
    "fairopt-mlp": '`model="mlp"`',
    "fairopt-gbm": '`model="gbm"`',
    "fairopt-gbm-margin": '`model="gbm", margin="auto"`',
    "fairopt-mt-hgb": '`method="moving_targets"`, HGB',
    "lightgbm": "LightGBM, unconstrained",
    "fairlearn-eg": "fairlearn ExponentiatedGradient + LR",
    "oxonfair-hgb-inferred": "oxonfair on HGB, inferred groups",
    "error-parity-hgb": "error-parity thresholds on HGB",
}
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


def trees_table(results: Path = TREES, slack: float = 0.005) -> str:
    """The "Which model?" page's table: per method (:data:`TREE_METHODS`) and data set the mean
    test accuracy / test DI over seeds from ``results/trees.md``, ``*`` where the mean training
    DI is below the bound minus ``slack``; the first line names the results' commit."""
    lines = (results / "trees.md").read_text().splitlines()
    commit = next(line for line in lines if line.startswith("commit ")).split(";")[0].split()[1]
    bound = float(lines[0].split(">=")[1].split()[0])
    rows = [[cell.strip() for cell in line.strip("|").split("|")] for line in lines if line.startswith("| ")]
    header, rows = rows[0], rows[1:]
    means = {(row[0], row[1]): dict(zip(header, row)) for row in rows}
    out = [f"From `benchmarks/results/trees/trees.md` at commit {commit}: test accuracy / test DI, means over "
           f"seeds; `*` the mean training DI is below {bound - slack:g}.", "",
           "| model | reads s to predict | " + " | ".join(TREE_DATASETS) + " |",
           "|---" * (len(TREE_DATASETS) + 2) + "|"]
    for method, label in TREE_METHODS.items():
        cells = []
        for dataset in TREE_DATASETS:
            row = means.get((dataset, method))
            if row is None:
                cells.append("-")
                continue
            missed = "*" if float(row["train DI"]) < bound - slack else ""
            cells.append(f"{float(row['test acc']):.3f} / {float(row['test DI']):.2f}{missed}")
        needs = next((means[(d, method)]["needs s"] for d in TREE_DATASETS if (d, method) in means), "-")
        out.append(f"| {label} | {needs} | " + " | ".join(cells) + " |")
    return "\n".join(out)


def tree_plots(results: Path = TREES) -> list[Path]:
    """Copy ``results/tradeoff_<dataset>.png`` to ``docs/images/trees_<dataset>.png``."""
    copies = []
    for dataset in TREE_DATASETS:
        copy = IMAGES / f"trees_{dataset}.png"
        shutil.copyfile(results / f"tradeoff_{dataset}.png", copy)
        copies.append(copy)
    return copies


if __name__ == "__main__":
    if sys.argv[1:] == ["trees"]:
        print("\n".join(str(p) for p in tree_plots()))
        print(trees_table())
    else:
        main()
        tree_plots()
