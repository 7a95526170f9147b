"""Regression fit of every FairRegressor method against scikit-learn's Ridge.

Communities and Crime (target ``violentPerPop`` in its own units, mean ~590, sd ~610; the
dataset's default FairData spec, sensitive feature ``race``), 70/30 splits with seeds
0, 1, 2. For each method (sqp, penalty, lagrangian, moving_targets; linear model) the
unconstrained FairRegressor and the one with a GeDI bound ``0.2 x`` the data's GeDI
(``("gedi", "race", 0.2, {"relative": True})``) are fitted on ``data.X``/``data.y`` as the
estimator receives them (the data set's inputs, without the sensitive attribute); the table
has the test R2 (and its gap to Ridge(alpha=1)), the training R2, the training GeDI and its
bound, and the fit time. The first line names the commit.

Penalty weight (the loss is the standardised MSE, the penalty ``weight * max(GeDI - q, 0)``
in the units of y): the smallest weight of ``--weights`` whose training GeDI meets the bound,
refined by ``--refine`` geometric bisection steps (training rows only; the test rows are never
used to choose it).

    .venv/bin/python benchmarks/regression_fit.py [--data-dir ../shared/data] [--seeds 0 1 2]
"""

from __future__ import annotations

import argparse
import sys
import time
import warnings

import numpy as np
import pandas as pd
import torch
from sklearn.linear_model import Ridge
from sklearn.metrics import r2_score

import fairopt
from fairopt import FairRegressor

try:
    from benchmarks._common import commit, data_dir
except ImportError:  # run as a script from benchmarks/
    from _common import commit, data_dir

METHODS = ("sqp", "penalty", "lagrangian", "moving_targets")
GEDI = ("gedi", "race", 0.2, {"relative": True})


def gedi_value(est: FairRegressor, X: np.ndarray, y: np.ndarray, s: dict) -> tuple[float, float]:
    """(GeDI of the predictions on these rows, exact, in the units of y; the fitted bound)."""
    report = est.evaluate(X, y, sensitive_features=s)
    key = next(k for k in report if str(k).startswith("gedi") and not str(k).endswith(".violation"))
    value = report[key]
    value = float(value[0] if isinstance(value, (list, tuple)) else value)
    return value, float(est.constraints_[0].upper.reshape(-1)[0])


def calibrated_penalty(X, y, s, weights, refine: int):
    """The smallest penalty weight whose TRAINING GeDI meets the bound: the first passing
    weight of the grid, then ``refine`` geometric bisection steps between it and the last
    failing one (the fit with the smallest passing weight is returned)."""
    def passes(weight):
        est, seconds = fit("penalty", X, y, s, True, weight)
        g, q = gedi_value(est, X, y, s)
        return g <= q * (1 + 1e-3), est, seconds

    low, best = None, None
    for weight in sorted(weights):
        ok, est, seconds = passes(weight)
        if ok:
            best = (weight, est, seconds)
            break
        low = weight
    if best is None:  # no weight of the grid meets the bound: the largest one, reported as unmet
        return weight, est, seconds
    for _ in range(refine if low is not None else 0):
        middle = (low * best[0]) ** 0.5
        ok, est, seconds = passes(middle)
        if ok:
            best = (middle, est, seconds)
        else:
            low = middle
    return best


def fit(method: str, X, y, s, constrained: bool, weight: float | None = None, **kw) -> tuple[FairRegressor, float]:
    params = {"weight": weight} if weight is not None else None
    constraints = [GEDI] if constrained else None
    est = FairRegressor(constraints=constraints, method=method, engine_params=params, **kw)
    t = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        est.fit(X, y, sensitive_features=s if constrained else None)
    return est, time.perf_counter() - t


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-dir")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--methods", nargs="+", default=list(METHODS))
    parser.add_argument("--weights", type=float, nargs="+", default=[1e-5, 1e-4, 3e-4, 1e-3, 3e-3, 1e-2, 1e-1, 1.0])
    parser.add_argument("--refine", type=int, default=6,
                        help="geometric bisection steps between the last failing and first passing weight")
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    print(f"# commit {commit()}; python benchmarks/regression_fit.py {' '.join(sys.argv[1:])}", flush=True)
    data = fairopt.datasets.load("communities", data_dir=data_dir(args.data_dir))
    rows = []
    for seed in args.seeds:
        train, test = data.split(test_size=0.3, seed=seed)
        Xtr, ytr, Xte, yte = (t.double().numpy() for t in (train.X, train.y, test.X, test.y))
        s_tr = {name: train.sensitive[name].numpy() for name in train.sensitive_names}
        s_te = {name: test.sensitive[name].numpy() for name in test.sensitive_names}
        ridge = Ridge(alpha=1.0).fit(Xtr, ytr)
        r_test, r_train = r2_score(yte, ridge.predict(Xte)), r2_score(ytr, ridge.predict(Xtr))
        rows.append({"seed": seed, "method": "ridge", "bound": "none", "test_r2": r_test, "gap": 0.0,
                     "train_r2": r_train})
        for method in args.methods:
            for constrained in (False, True):
                weight = None
                if constrained and method == "penalty":
                    weight, est, seconds = calibrated_penalty(Xtr, ytr, s_tr, args.weights, args.refine)
                else:
                    est, seconds = fit(method, Xtr, ytr, s_tr, constrained)
                row = {"seed": seed, "method": method, "bound": "gedi<=0.2x" if constrained else "none",
                       "test_r2": r2_score(yte, est.predict(Xte)), "train_r2": r2_score(ytr, est.predict(Xtr)),
                       "seconds": seconds}
                row["gap"] = row["test_r2"] - r_test
                if constrained:
                    row["train_gedi"], row["gedi_bound"] = gedi_value(est, Xtr, ytr, s_tr)
                    row["test_gedi"] = gedi_value(est, Xte, yte, s_te)[0]
                    row["met_on_train"] = row["train_gedi"] <= row["gedi_bound"] * (1 + 1e-3)
                    row["weight"] = weight
                rows.append(row)
                print(pd.DataFrame([row]).to_string(index=False, header=True), flush=True)
    table = pd.DataFrame(rows)
    cols = ["seed", "method", "bound", "test_r2", "gap", "train_r2", "train_gedi", "gedi_bound", "met_on_train",
            "test_gedi", "weight", "seconds"]
    table = table[[c for c in cols if c in table.columns]]
    print()
    print(table.to_string(index=False, float_format=lambda v: f"{v:.4f}"))
    summary = table[table.method != "ridge"].groupby(["method", "bound"])[["test_r2", "gap", "train_r2"]].agg(
        ["mean", "min"])
    print()
    print(summary.to_string(float_format=lambda v: f"{v:.4f}"))


if __name__ == "__main__":
    main()
