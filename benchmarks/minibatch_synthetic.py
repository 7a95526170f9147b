"""FairClassifier's mini-batches on random synthetic data sets that no default was chosen on.

Each seed draws a data set (:func:`make_dataset`): 3,000, 8,000 or 20,000 rows; 4-40 correlated
Gaussian inputs, some made binary or skewed; a binary sensitive attribute held by 10-50% of the rows
that shifts the inputs; a logistic target of 8-50% positives, sometimes with a non-linear term and a
direct dependence on the attribute; a bound DI >= 0.8 or 0.9. A stratified 70/30 split (target x
attribute); ``FairClassifier`` at every default but ``batch_size`` (full batch, 256 and 1,024 rows),
linear and MLP. The page counts the mini-batch runs within one point of their full batch's training
accuracy, meeting the bound on the training rows (DI >= delta - 0.005, measured from ``predict``), and
below the majority rate without a warning; it gives the mean and worst gaps, test accuracy and the time
against the full batch's::

    python benchmarks/minibatch_synthetic.py --seeds $(seq 0 39) --jobs 2
"""

from __future__ import annotations

import argparse
import logging
import statistics
import sys
import time
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import DEFAULT_OUT, commit, markdown, pooled_runs, write_grid  # noqa: E402

logger = logging.getLogger("minibatch_synthetic")

MODELS = ("linear", "mlp")
BATCHES: tuple[int | None, ...] = (None, 256, 1024)
#: A mini-batch run "keeps its accuracy" within this much training accuracy of its full batch.
WITHIN = 0.01
#: Training DI below ``delta - DI_TOL`` counts as a missed bound.
DI_TOL = 0.005


def make_dataset(seed: int) -> tuple[pd.DataFrame, np.ndarray, np.ndarray, float, dict]:
    """``(X, y, s, delta, description)`` of the data set drawn with ``seed`` (module docstring)."""
    rng = np.random.default_rng(seed)
    n, d = int(rng.choice([3000, 8000, 20000])), int(rng.integers(4, 41))
    s = (rng.random(n) < rng.uniform(0.1, 0.5)).astype(int)
    factor = rng.normal(size=(d, d)) * rng.uniform(0.1, 0.8)
    X = rng.normal(size=(n, d)) @ np.linalg.cholesky(factor @ factor.T + np.eye(d)).T
    X += np.outer(s, rng.normal(size=d) * rng.uniform(0.0, 1.0))
    for j in range(min(int(rng.integers(0, 4)), d)):  # a few binary or skewed columns
        X[:, j] = (X[:, j] > rng.normal()).astype(float) if j % 2 == 0 else np.exp(X[:, j] / 2)
    w = rng.normal(size=d) * (rng.random(d) < 0.6) * rng.uniform(0.3, 1.5)
    z = X @ w / max(1e-6, float(np.std(X @ w))) * rng.uniform(0.8, 3.0)
    if rng.random() < 0.5:
        z = z + rng.uniform(0.3, 1.0) * np.sin(2 * X[:, -1]) * (rng.random() < 0.5)
    z = z + rng.uniform(0.0, 1.0) * s
    threshold = np.quantile(z, 1 - rng.uniform(0.08, 0.5))
    y = (rng.random(n) < 1 / (1 + np.exp(-(z - threshold)))).astype(int)
    delta = float(rng.choice([0.8, 0.9]))
    described = {"n": n, "d": d, "share_s": round(float(s.mean()), 3), "positives": round(float(y.mean()), 3),
                 "delta": delta}
    return pd.DataFrame(X, columns=[f"x{j}" for j in range(d)]), y, s, delta, described


def fit_cell(job: dict) -> dict:
    """One fit: training accuracy, DI from ``predict`` on the training rows, test accuracy, seconds,
    the warnings of fairopt and solvers."""
    import torch
    from sklearn.model_selection import train_test_split

    from fairopt import FairClassifier

    torch.set_num_threads(1)
    X, y, s, delta, described = make_dataset(job["seed"])
    train, test = train_test_split(np.arange(len(y)), test_size=0.3, random_state=job["seed"],
                                   stratify=2 * y + s)
    clf = FairClassifier([("disparate_impact", "s", delta)], model=job["model"], batch_size=job["batch"],
                         seed=job["seed"])
    start = time.perf_counter()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        clf.fit(X.iloc[train], y[train], sensitive_features=pd.Series(s[train], name="s"))
    seconds = time.perf_counter() - start
    predicted = clf.predict(X.iloc[train])
    rates = [float(predicted[s[train] == g].mean()) for g in (0, 1)]
    di = min(rates) / max(rates) if max(rates) > 0 else float("nan")
    warned = sorted({w.category.__name__ for w in caught if w.category.__module__.split(".")[0] in ("fairopt",
                                                                                                  "solvers")})
    return {**{k: job[k] for k in ("seed", "model", "batch")}, **described,
            "majority": float(max(y[train].mean(), 1 - y[train].mean())),
            "train_acc": float((predicted == y[train]).mean()), "test_acc": float(clf.score(X.iloc[test], y[test])),
            "train_di": di, "seconds": seconds, "warned": warned}


def cell_summary(runs: list[dict]) -> list[dict]:
    """Per (model, batch size): the mini-batch runs against the full batch of the same seed and model."""
    full = {(r["seed"], r["model"]): r for r in runs if r["batch"] is None}
    cells = []
    for model in MODELS:
        for batch in BATCHES[1:]:
            pairs = [(r, full[(r["seed"], model)]) for r in runs
                     if r["model"] == model and r["batch"] == batch and (r["seed"], model) in full]
            if not pairs:
                continue
            gaps = [r["train_acc"] - f["train_acc"] for r, f in pairs]
            cells.append({
                "model": model, "batch": batch, "runs": len(pairs),
                "within": sum(g >= -WITHIN for g in gaps),
                "bound_met": sum(r["train_di"] >= r["delta"] - DI_TOL for r, _ in pairs),
                "below_majority_unwarned": sum(r["train_acc"] < r["majority"] and not r["warned"] for r, _ in pairs),
                "mean_gap": statistics.mean(gaps), "worst_gap": min(gaps),
                "mean_test_gap": statistics.mean(r["test_acc"] - f["test_acc"] for r, f in pairs),
                "time_ratio": statistics.median(r["seconds"] / f["seconds"] for r, f in pairs),
                "full_bound_met": sum(f["train_di"] >= f["delta"] - DI_TOL for _, f in pairs)})
    return cells


def report(runs: list[dict], header: list[str]) -> str:
    """``header`` and the table of :func:`cell_summary` (:func:`_common.markdown`)."""
    table = pd.DataFrame([{
        "model": c["model"], "batch": c["batch"], "runs": c["runs"],
        "within a point of the full batch": f"{c['within']}/{c['runs']}",
        "bound met (train)": f"{c['bound_met']}/{c['runs']}",
        "below majority, unwarned": c["below_majority_unwarned"],
        "mean train gap": f"{c['mean_gap']:+.4f}", "worst train gap": f"{c['worst_gap']:+.4f}",
        "mean test gap": f"{c['mean_test_gap']:+.4f}", "time / full batch (median)": f"{c['time_ratio']:.2f}",
        "full batch bound met": f"{c['full_bound_met']}/{c['runs']}"} for c in cell_summary(runs)])
    return "\n".join([*header, "", markdown(table)]) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", nargs="+", type=int, default=list(range(40)))
    ap.add_argument("--jobs", type=int, default=1)
    ap.add_argument("--out", default=str(DEFAULT_OUT / "minibatch_synthetic"))
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    todo: list[dict[str, Any]] = [{"seed": seed, "model": model, "batch": batch}
                                  for seed in args.seeds for model in MODELS for batch in BATCHES]
    runs = pooled_runs(fit_cell, todo, args.jobs, logger, lambda r: (
        f"seed {r['seed']} {r['model']} batch {r['batch'] or 'full'}: train {r['train_acc']:.4f} DI "
        f"{r['train_di']:.3f} test {r['test_acc']:.4f} ({r['seconds']:.1f} s)"))
    header = ["# FairClassifier mini-batches on random synthetic data sets", "",
              f"commit {commit()}; `python benchmarks/minibatch_synthetic.py "
              f"{' '.join(sys.argv[1:] if argv is None else argv)}`", "",
              f"{len(args.seeds)} data sets drawn by `make_dataset(seed)` (3,000-20,000 rows, 4-40 inputs, a binary "
              "attribute, DI >= 0.8 or 0.9); stratified 70/30 splits; every estimator setting at its default but "
              "`batch_size`. 'within a point': training accuracy at most 0.01 below the full batch of the same data "
              "set and model; 'bound met': DI >= delta - 0.005 on the training rows from `predict`; gaps are "
              "mini-batch minus full batch; seconds of one fit on one thread, two fits at a time on a shared 2-core "
              "machine."]
    key = lambda r: (r["seed"], r["model"], str(r["batch"]))  # noqa: E731
    write_grid(Path(args.out), runs, key, report(runs, header))
    return 0


if __name__ == "__main__":
    sys.exit(main())
