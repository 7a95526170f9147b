"""FairClassifier's mini-batches on random synthetic data sets that no default was chosen on.

Each seed draws a data set (:func:`make_dataset`): 3,000, 8,000 or 20,000 rows; 4-40 correlated
Gaussian inputs, some made binary or skewed; a binary sensitive attribute held by 10-50% of the rows
that shifts the inputs; a logistic target of 8-50% positives, sometimes with a non-linear term and a
direct dependence on the attribute. Four constraint families (``--families``, :data:`FAMILIES`):

- ``di``: the binary attribute, ``DI >= 0.8`` or ``0.9``;
- ``groups``: an attribute of 3-5 levels (the smallest may hold 3% of the rows), each level shifting
  the inputs and the target by its own amount, ``DI >= 0.8`` or ``0.9`` for each level against the rest
  of the rows (the constraint's default ``groups="one_vs_rest"``);
- ``eodds``: the binary attribute, equalized odds as a difference, ``|TPR_1 - TPR_0| <= b`` and
  ``|FPR_1 - FPR_0| <= b`` with ``b`` 0.05 or 0.1;
- ``dp``: the binary attribute, demographic parity ``|P_1 - P_0| <= b`` with ``b`` 0.02-0.1.

A family draws the same inputs and target from a seed as ``di`` apart from the attribute's effect
(``groups``), so the families differ by the constraint. A stratified 70/30 split (target x
attribute); ``FairClassifier`` at every default but ``batch_size`` (full batch, 256 and 1,024 rows),
linear and MLP. The page counts the mini-batch runs within one point of their full batch's training
accuracy, meeting the bound on the training rows (measured from ``predict`` with numpy: a ratio at
least ``delta - 0.005``, a difference at most ``b + 0.005``), and below the majority rate without a
warning; it gives the mean and worst gaps, test accuracy and the time against the full batch's::

    python benchmarks/minibatch_synthetic.py --seeds $(seq 0 39) --families di groups eodds dp --jobs 2
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
#: Constraint families (module docstring).
FAMILIES = ("di", "groups", "eodds", "dp")
BATCHES: tuple[int | None, ...] = (None, 256, 1024)
#: A mini-batch run "keeps its accuracy" within this much training accuracy of its full batch.
WITHIN = 0.01
#: A training ratio below ``delta - DI_TOL``, or a difference above ``bound + DI_TOL``, is a missed bound.
DI_TOL = 0.005


def make_dataset(seed: int, family: str = "di") -> tuple[pd.DataFrame, np.ndarray, np.ndarray, Any, dict]:
    """``(X, y, s, constraint, description)`` of the data set drawn with ``seed`` for ``family`` (module
    docstring); ``constraint`` is the spec for ``FairClassifier``: ``(kind, "s", bound)``, or a table
    ``{"kind": ..., "sensitive": "s", "bound": ...}`` for equalized odds' difference form."""
    if family not in FAMILIES:
        raise ValueError(f"family must be one of {FAMILIES}, got {family!r}")
    rng, extra = np.random.default_rng(seed), np.random.default_rng([seed, FAMILIES.index(family)])
    n, d = int(rng.choice([3000, 8000, 20000])), int(rng.integers(4, 41))
    s = (rng.random(n) < rng.uniform(0.1, 0.5)).astype(int)
    effect = np.array([0.0, 1.0])  # the attribute's loading on the shift of the inputs and of the target
    if family == "groups":
        levels = int(extra.integers(3, 6))
        shares = 0.03 + (1 - 0.03 * levels) * extra.dirichlet(np.ones(levels))
        s = extra.choice(levels, size=n, p=shares / shares.sum())
        effect = np.concatenate([[0.0], extra.uniform(-1.0, 1.0, levels - 1)])
    factor = rng.normal(size=(d, d)) * rng.uniform(0.1, 0.8)
    X = rng.normal(size=(n, d)) @ np.linalg.cholesky(factor @ factor.T + np.eye(d)).T
    X += np.outer(effect[s], rng.normal(size=d) * rng.uniform(0.0, 1.0))
    for j in range(min(int(rng.integers(0, 4)), d)):  # a few binary or skewed columns
        X[:, j] = (X[:, j] > rng.normal()).astype(float) if j % 2 == 0 else np.exp(X[:, j] / 2)
    w = rng.normal(size=d) * (rng.random(d) < 0.6) * rng.uniform(0.3, 1.5)
    z = X @ w / max(1e-6, float(np.std(X @ w))) * rng.uniform(0.8, 3.0)
    if rng.random() < 0.5:
        z = z + rng.uniform(0.3, 1.0) * np.sin(2 * X[:, -1]) * (rng.random() < 0.5)
    z = z + rng.uniform(0.0, 1.0) * effect[s]
    threshold = np.quantile(z, 1 - rng.uniform(0.08, 0.5))
    y = (rng.random(n) < 1 / (1 + np.exp(-(z - threshold)))).astype(int)
    delta = float(rng.choice([0.8, 0.9]))
    if family == "eodds":
        constraint: tuple | dict = {"kind": "equalized_odds", "sensitive": "s",
                                    "bound": float(extra.choice([0.05, 0.1]))}
    elif family == "dp":
        constraint = ("demographic_parity", "s", round(float(extra.uniform(0.02, 0.1)), 3))
    else:
        constraint = ("disparate_impact", "s", delta)
    described = {"family": family, "n": n, "d": d, "levels": int(s.max()) + 1,
                 "smallest_share": round(float(np.bincount(s).min() / n), 3),
                 "positives": round(float(y.mean()), 3), "bound": _bound_of(constraint)}
    return pd.DataFrame(X, columns=[f"x{j}" for j in range(d)]), y, s, constraint, described


def _bound_of(constraint: Any) -> float:
    """The number of a spec tuple ``(kind, name, number)`` or table ``{..., "bound": number}``."""
    return float(constraint["bound"] if isinstance(constraint, dict) else constraint[2])


def realised_fairness(predicted: np.ndarray, y: np.ndarray, s: np.ndarray, family: str) -> float:
    """The family's measure of hard predictions, computed here with numpy (not by fairopt): the smallest
    ratio of positive rates (``di``: the two levels; ``groups``: each level against the other rows) or
    the largest absolute difference (``dp``: positive rates; ``eodds``: true- and false-positive rates)."""
    def ratio(a: np.ndarray, b: np.ndarray) -> float:
        pa, pb = float(a.mean()), float(b.mean())
        return min(pa, pb) / max(pa, pb) if max(pa, pb) > 0 else 1.0

    if family == "di":
        return ratio(predicted[s == 0], predicted[s == 1])
    if family == "groups":
        return min(ratio(predicted[s == g], predicted[s != g]) for g in np.unique(s))
    if family == "dp":
        return abs(float(predicted[s == 1].mean()) - float(predicted[s == 0].mean()))
    return max(abs(float(predicted[(s == 1) & (y == label)].mean()) - float(predicted[(s == 0) & (y == label)].mean()))
               for label in (0, 1))


def bound_met(run: dict) -> bool:
    """Whether a run's training measure meets its bound within :data:`DI_TOL` (a ratio from below, a
    difference from above). Runs written before the families existed are ``di`` runs with ``train_di``."""
    family = run.get("family", "di")
    value = run.get("train_fairness", run.get("train_di"))
    bound = run.get("bound", run.get("delta"))
    return value >= bound - DI_TOL if family in ("di", "groups") else value <= bound + DI_TOL


def fit_cell(job: dict) -> dict:
    """One fit: training accuracy, DI from ``predict`` on the training rows, test accuracy, seconds,
    the warnings of fairopt and solvers."""
    import torch
    from sklearn.model_selection import train_test_split

    from fairopt import FairClassifier

    torch.set_num_threads(1)
    family = job.get("family", "di")
    X, y, s, constraint, described = make_dataset(job["seed"], family)
    train, test = train_test_split(np.arange(len(y)), test_size=0.3, random_state=job["seed"],
                                   stratify=(s.max() + 1) * y + s)
    clf = FairClassifier([constraint], model=job["model"], batch_size=job["batch"], seed=job["seed"])
    start = time.perf_counter()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        clf.fit(X.iloc[train], y[train], sensitive_features=pd.Series(s[train], name="s", dtype="category"))
    seconds = time.perf_counter() - start
    predicted = np.asarray(clf.predict(X.iloc[train]))
    warned = sorted({w.category.__name__ for w in caught if w.category.__module__.split(".")[0] in ("fairopt",
                                                                                                  "solvers")})
    return {**{k: job[k] for k in ("seed", "model", "batch")}, **described,
            "majority": float(max(y[train].mean(), 1 - y[train].mean())),
            "train_acc": float((predicted == y[train]).mean()), "test_acc": float(clf.score(X.iloc[test], y[test])),
            "train_fairness": realised_fairness(predicted, y[train], s[train], family), "seconds": seconds,
            "warned": warned}


def cell_summary(runs: list[dict]) -> list[dict]:
    """Per (family, model, batch size): the mini-batch runs against the full batch of the same family,
    seed and model."""
    def family(r: dict) -> str:
        return r.get("family", "di")

    full = {(family(r), r["seed"], r["model"]): r for r in runs if r["batch"] is None}
    cells = []
    for fam in [f for f in FAMILIES if any(family(r) == f for r in runs)]:
        for model in MODELS:
            for batch in BATCHES[1:]:
                pairs = [(r, full[(fam, r["seed"], model)]) for r in runs if family(r) == fam and
                         r["model"] == model and r["batch"] == batch and (fam, r["seed"], model) in full]
                if pairs:
                    cells.append(_cell(fam, model, batch, pairs))
    return cells


def _cell(family: str, model: str, batch: int, pairs: list[tuple[dict, dict]]) -> dict:
    """One row of :func:`cell_summary` from its (mini-batch run, full batch run) pairs."""
    gaps = [r["train_acc"] - f["train_acc"] for r, f in pairs]
    return {
        "family": family, "model": model, "batch": batch, "runs": len(pairs),
        "within": sum(g >= -WITHIN for g in gaps),
        "bound_met": sum(bound_met(r) for r, _ in pairs),
        "below_majority_unwarned": sum(r["train_acc"] < r["majority"] and not r["warned"] for r, _ in pairs),
        "mean_gap": statistics.mean(gaps), "worst_gap": min(gaps),
        "mean_test_gap": statistics.mean(r["test_acc"] - f["test_acc"] for r, f in pairs),
        "time_ratio": statistics.median(r["seconds"] / f["seconds"] for r, f in pairs),
        "full_bound_met": sum(bound_met(f) for _, f in pairs)}


def report(runs: list[dict], header: list[str]) -> str:
    """``header`` and the table of :func:`cell_summary` (:func:`_common.markdown`)."""
    table = pd.DataFrame([{
        "family": c["family"], "model": c["model"], "batch": c["batch"], "runs": c["runs"],
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
    ap.add_argument("--families", nargs="+", choices=FAMILIES, default=["di"])
    ap.add_argument("--jobs", type=int, default=1)
    ap.add_argument("--out", default=str(DEFAULT_OUT / "minibatch_synthetic"))
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    todo: list[dict[str, Any]] = [{"family": family, "seed": seed, "model": model, "batch": batch}
                                  for family in args.families for seed in args.seeds for model in MODELS
                                  for batch in BATCHES]
    runs = pooled_runs(fit_cell, todo, args.jobs, logger, lambda r: (
        f"{r['family']} seed {r['seed']} {r['model']} batch {r['batch'] or 'full'}: train {r['train_acc']:.4f} "
        f"fairness {r['train_fairness']:.3f} (bound {r['bound']}) test {r['test_acc']:.4f} ({r['seconds']:.1f} s)"))
    header = ["# FairClassifier mini-batches on random synthetic data sets", "",
              f"commit {commit()}; `python benchmarks/minibatch_synthetic.py "
              f"{' '.join(sys.argv[1:] if argv is None else argv)}`", "",
              f"{len(args.seeds)} data sets per family drawn by `make_dataset(seed, family)` (3,000-20,000 rows, 4-40 "
              "inputs; `di`: a binary attribute, DI >= 0.8 or 0.9; `groups`: 3-5 levels, DI of each against the "
              "rest >= 0.8 or 0.9; `eodds`: equalized odds difference <= 0.05 or 0.1; `dp`: demographic parity "
              "difference <= 0.02-0.1); stratified 70/30 splits; every estimator setting at its default but "
              "`batch_size`. 'within a point': training accuracy at most 0.01 below the full batch of the same data "
              "set and model; 'bound met': the measure on the training rows from `predict` (numpy) within 0.005 of "
              "its bound; gaps are mini-batch minus full batch; seconds of one fit on one thread, two fits at a "
              "time on a shared 2-core machine."]
    key = lambda r: (r.get("family", "di"), r["seed"], r["model"], str(r["batch"]))  # noqa: E731
    write_grid(Path(args.out), runs, key, report(runs, header))
    return 0


if __name__ == "__main__":
    sys.exit(main())
