"""Regression under a dependence bound: ``FairRegressor(model="gbm")`` against unconstrained boosters.

Two regression data sets with their protected attribute NOT among the inputs, 70/30 splits
(:meth:`fairopt.FairData.split`, seeds 0-2):

- ``communities``: Communities and Crime, target ``violentPerPop`` (its own units), the
  continuous attribute ``pctBlack`` (the GeDI paper's setting); GeDI of degree 2 (``V^2``);
- ``law``: Law School, target ``zfygpa`` (first-year grade, the admission-time inputs), the
  binary attribute ``race``; GeDI of degree 1 (a binary attribute has no degree 2). With a
  binary attribute GeDI-V1 is the covariance divided by ``sd(s)``, so the two bounds below are
  the same constraint there: their two fits are a consistency check.

Both bounds are relative, ``FRACTION = 0.2`` of the training target's own dependence:

- ``gedi``: ``GeDI(s, yhat; V^k) <= 0.2 GeDI(s, y_train; V^1)``
  (``("gedi", s, 0.2, {"relative": True, "degree": k})``);
- ``covariance``: ``|mean((s - mean s) yhat)| <= 0.2 |mean((s - mean s) y_train)|``
  (``("covariance", s, bound)`` with that bound computed on the training rows).

Methods: ``hgb`` (``HistGradientBoostingRegressor(random_state=seed)``), ``lightgbm``
(``LGBMRegressor(random_state=seed, n_jobs=1)``), ``fairopt-gbm`` (``FairRegressor(model="gbm")``
without a constraint: the same booster as below, for the price of the bound) and
``fairopt-gbm-gedi`` / ``fairopt-gbm-covariance`` (under each bound), and both with ``margin="auto"``
(``-margin``; a margin wider than the bound allows is refused by the estimator and recorded as a
skipped run with its message). Every run reports both
measures, computed here with numpy independently of fairopt, on the training and the test rows,
each divided by the training target's value (so the bound reads 0.2 in both columns):

- GeDI: ``z`` the attribute standardised on the measured rows (population sd), ``F_j = z^j``
  (``j = 1..k``), ``alpha`` the least-squares coefficients of the centred predictions on the
  centred ``F``; ``GeDI = ||alpha||_1``, divided by ``GeDI(s_train, y_train; V^1)``;
- covariance: ``|mean((s - mean s) yhat)|`` divided by ``|mean((s - mean s) y)|`` on the
  training rows;

with test RMSE and R2, training R2 and fit seconds. One JSON cell per (data set, method, seed)
under ``OUT/cells_regression`` (a rerun skips the cells it has), then ``OUT/regression.md``
(means over seeds, the commit) and ``OUT/regression.csv`` (every run).

    python benchmarks/trees_regression.py                       # both data sets, seeds 0-2
    python benchmarks/trees_regression.py --datasets law --seeds 0
"""

from __future__ import annotations

import logging
import sys
import time
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from _common import DEFAULT_OUT, commit, grid_parser

import numpy as np
import pandas as pd

from benchmarks.papers.cells import read_cells, write_cell
from trees import Skip, distinct_notes, in_grid_order, results_lines, run_grid, share, write_results

logger = logging.getLogger("benchmarks.trees_regression")

#: The dependence bound as a fraction of the training target's own value.
FRACTION = 0.2
SEEDS = [0, 1, 2]
TEST_SIZE = 0.3


@dataclass(frozen=True)
class Setup:
    """A regression data set: its loader arguments, the protected attribute and GeDI's degree."""

    load: dict
    sensitive: str
    degree: int


SETUPS: dict[str, Setup] = {
    "communities": Setup({"sensitive": ["pctBlack"]}, "pctBlack", 2),
    "law": Setup({"target": "zfygpa"}, "race", 1),
}


@dataclass
class Split:
    """One seeded split: inputs, targets and the attribute of both parts (numpy, float64)."""

    X: np.ndarray
    y: np.ndarray
    s: np.ndarray
    X_test: np.ndarray
    y_test: np.ndarray
    s_test: np.ndarray


def split(dataset: str, seed: int, data_dir: str) -> Split:
    """The seeded 70/30 split of ``dataset`` (the attribute not among the inputs)."""
    from fairopt import datasets

    setup = SETUPS[dataset]
    data = datasets.load(dataset, data_dir=data_dir, **setup.load)
    train, test = data.split(test_size=TEST_SIZE, seed=seed)
    arrays = [t.double().numpy() for t in (train.X, train.y, train.sensitive[setup.sensitive],
                                             test.X, test.y, test.sensitive[setup.sensitive])]
    return Split(*arrays)


# --------------------------------------------------------------------------------------
# the measures (numpy, independent of fairopt)
# --------------------------------------------------------------------------------------
def gedi(s: np.ndarray, pred: np.ndarray, degree: int) -> float:
    """``||alpha||_1``: least squares of the centred ``pred`` on the centred powers ``z^1..z^k``
    of the standardised attribute ``z = (s - mean s) / sd(s)`` (population sd)."""
    z = (s - s.mean()) / s.std()
    kernel = np.stack([z ** j for j in range(1, degree + 1)], axis=1)
    kernel -= kernel.mean(axis=0)
    alpha = np.linalg.lstsq(kernel, pred - pred.mean(), rcond=None)[0]
    return float(np.abs(alpha).sum())


def covariance(s: np.ndarray, pred: np.ndarray) -> float:
    """``|mean((s - mean s) pred)|``."""
    return float(abs(np.mean((s - s.mean()) * pred)))


def measures(part: Split, train_pred: np.ndarray, test_pred: np.ndarray, degree: int) -> dict:
    """Both measures on both parts relative to the training target's, RMSE and R2."""
    gedi_ref, cov_ref = gedi(part.s, part.y, 1), covariance(part.s, part.y)

    def r2(y: np.ndarray, pred: np.ndarray) -> float:
        return float(1.0 - np.sum((y - pred) ** 2) / np.sum((y - y.mean()) ** 2))

    return {"train GeDI/ref": gedi(part.s, train_pred, degree) / gedi_ref,
            "test GeDI/ref": gedi(part.s_test, test_pred, degree) / gedi_ref,
            "train cov/ref": covariance(part.s, train_pred) / cov_ref,
            "test cov/ref": covariance(part.s_test, test_pred) / cov_ref,
            "test RMSE": float(np.sqrt(np.mean((part.y_test - test_pred) ** 2))),
            "test R2": r2(part.y_test, test_pred), "train R2": r2(part.y, train_pred)}


# --------------------------------------------------------------------------------------
# methods: fit(split, setup, seed) -> (train predictions, test predictions, seconds, note)
# --------------------------------------------------------------------------------------
Fit = Callable[[Split, Setup, int], tuple[np.ndarray, np.ndarray, float, str]]


def _timed_predict(model: Any, part: Split, fit: Callable[[], Any]) -> tuple[np.ndarray, np.ndarray, float, str]:
    start = time.perf_counter()
    fit()
    seconds = time.perf_counter() - start
    return model.predict(part.X), model.predict(part.X_test), seconds, ""


def hgb(part: Split, setup: Setup, seed: int) -> tuple[np.ndarray, np.ndarray, float, str]:
    from sklearn.ensemble import HistGradientBoostingRegressor

    model = HistGradientBoostingRegressor(random_state=seed)
    return _timed_predict(model, part, lambda: model.fit(part.X, part.y))


def lightgbm(part: Split, setup: Setup, seed: int) -> tuple[np.ndarray, np.ndarray, float, str]:
    from lightgbm import LGBMRegressor

    model = LGBMRegressor(random_state=seed, n_jobs=1, verbose=-1)
    return _timed_predict(model, part, lambda: model.fit(part.X, part.y))


def _fairopt(kind: str | None, margin: bool = False) -> Fit:
    """``FairRegressor(model="gbm")`` under the ``kind`` bound (None: unconstrained), with
    ``margin="auto"`` when ``margin``; a margin the estimator refuses (wider than the bound allows)
    is a skipped run with the estimator's message."""
    def fit(part: Split, setup: Setup, seed: int) -> tuple[np.ndarray, np.ndarray, float, str]:
        from fairopt import FairRegressor
        from fairopt.exceptions import FairnessWarning

        if kind == "gedi":
            spec = [("gedi", setup.sensitive, FRACTION, {"relative": True, "degree": setup.degree})]
        elif kind == "covariance":
            spec = [("covariance", setup.sensitive, FRACTION * covariance(part.s, part.y))]
        else:
            spec = None
        model = FairRegressor(spec, model="gbm", seed=seed, margin="auto" if margin else 0.0)
        sensitive = {setup.sensitive: part.s} if spec else None
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            try:
                out = _timed_predict(model, part, lambda: model.fit(part.X, part.y, sensitive_features=sensitive))
            except ValueError as exc:
                if margin and str(exc).startswith("margin:"):
                    raise Skip(f"refused: {exc}") from None
                raise
        messages = sorted({str(w.message).split(":")[0][:80] for w in caught
                           if issubclass(w.category, FairnessWarning)})
        note = "; ".join(messages) + ("" if model.converged_ else ("; " if messages else "") + "not converged")
        return out[0], out[1], out[2], note
    return fit


METHODS: dict[str, Fit] = {"hgb": hgb, "lightgbm": lightgbm, "fairopt-gbm": _fairopt(None),
                           "fairopt-gbm-gedi": _fairopt("gedi"), "fairopt-gbm-covariance": _fairopt("covariance"),
                           "fairopt-gbm-gedi-margin": _fairopt("gedi", margin=True),
                           "fairopt-gbm-covariance-margin": _fairopt("covariance", margin=True)}
#: The measure each bounded method trains under (its training and test columns are checked against ``FRACTION``).
BOUNDED = {"fairopt-gbm-gedi": "GeDI/ref", "fairopt-gbm-covariance": "cov/ref",
           "fairopt-gbm-gedi-margin": "GeDI/ref", "fairopt-gbm-covariance-margin": "cov/ref"}


# --------------------------------------------------------------------------------------
# the grid
# --------------------------------------------------------------------------------------
def run_cell(dataset: str, name: str, seed: int, data_dir: str, cells: Path) -> dict:
    """One (data set, method, seed) run, cached as JSON under ``cells``."""
    path = cells / f"{dataset}__{name}__{seed}.json"
    if path.is_file():
        return read_cells([path]).iloc[0].to_dict()
    setup = SETUPS[dataset]
    part = split(dataset, seed, data_dir)
    record = {"dataset": dataset, "method": name, "seed": seed, "sensitive": setup.sensitive,
              "degree": setup.degree, "commit": commit()}
    try:
        train_pred, test_pred, seconds, note = METHODS[name](part, setup, seed)
    except Skip as exc:  # a refused margin: the same answer at every rerun, so it is cached
        record.update(status="skipped", note=str(exc))
        write_cell(path, record)
        logger.info("%s %s seed %d: skipped (%s)", dataset, name, seed, exc)
        return record
    record.update(status="ok", **measures(part, np.asarray(train_pred, dtype=float),
                                          np.asarray(test_pred, dtype=float), setup.degree),
                  **{"fit s": seconds, "note": note})
    write_cell(path, record)
    logger.info("%s %s seed %d: train GeDI/ref %.3f cov/ref %.3f, test R2 %.4f (%.1f s)", dataset, name, seed,
                record["train GeDI/ref"], record["train cov/ref"], record["test R2"], seconds)
    return record


def summary(runs: pd.DataFrame) -> pd.DataFrame:
    """Means over the seeds that ran per (data set, method); ``bound met on train``: runs whose trained
    measure is within 0.1% of ``FRACTION`` (relative); ``bound met on test``: runs whose test measure is
    at most ``FRACTION``; a skipped run (a refused margin) counts as neither and is named in the note."""
    numbers = ["train GeDI/ref", "test GeDI/ref", "train cov/ref", "test cov/ref", "test RMSE", "test R2",
               "train R2", "fit s"]
    runs = runs.copy()
    runs["status"] = runs["status"].fillna("ok") if "status" in runs else "ok"
    for column in numbers:
        runs[column] = runs[column] if column in runs else np.nan
    groups = runs.groupby(["dataset", "method"], sort=False)
    table = groups[numbers].mean().reset_index()
    table["seeds"] = groups.size().to_numpy()

    def met(rows: pd.DataFrame, part: str, slack: float) -> str:
        column = BOUNDED.get(rows["method"].iloc[0])
        if column is None:
            return ""
        ran = rows["status"] == "ok"
        return share(ran & (rows[f"{part} {column}"] <= FRACTION * (1 + slack)))

    table["bound met on train"] = [met(rows, "train", 1e-3) for _, rows in groups]
    table["bound met on test"] = [met(rows, "test", 0.0) for _, rows in groups]
    def note(rows: pd.DataFrame) -> str:
        notes = distinct_notes(rows.loc[rows["status"] == "ok", "note"])
        refused = int((rows["status"] == "skipped").sum())
        return "; ".join(notes + ([f"margin refused in {refused}/{len(rows)} runs (below)"] if refused else []))

    table["note"] = [note(rows) for _, rows in groups]
    return in_grid_order(table, SETUPS, METHODS)


def refusal_lines(runs: pd.DataFrame) -> list[str]:
    """One line per (data set, method) with a refused margin: the estimator's message of its first seed."""
    if "status" not in runs or not (runs["status"] == "skipped").any():
        return []
    skipped = runs[runs["status"] == "skipped"].sort_values("seed").drop_duplicates(["dataset", "method"])
    return ["Refused margins (the estimator's message, first seed):", ""] + [
        f"- {r.dataset}, {r.method}, seed {r.seed}: {r.note}" for r in skipped.itertuples()] + [""]


def main(argv: list[str] | None = None) -> int:
    parser = grid_parser(__doc__.splitlines()[0], list(SETUPS), SEEDS, DEFAULT_OUT / "trees", list(METHODS))
    args = parser.parse_args(argv)
    grid = run_grid(args, run_cell, "cells_regression", METHODS, logger)
    lines = results_lines(
        f"# Boosted regression under a dependence bound ({FRACTION:g} x the training target's)",
        "trees_regression.py", argv, grid,
        "70/30 splits (FairData.split), the attribute not among the inputs: communities (violentPerPop, "
        "pctBlack continuous, GeDI V^2), law (zfygpa, race binary, GeDI V^1, which on a binary attribute is "
        "the covariance / sd(s): the two bounds coincide there). Columns `GeDI/ref` and `cov/ref`: each "
        "measure of the predictions (numpy, independent of fairopt) divided by the training target's "
        f"(GeDI V^1 and covariance of y_train); the bound is {FRACTION:g} in the bounded method's column. "
        f"Means over seeds; fit seconds with {args.threads} thread(s) per method on a shared 2-core machine.",
        summary(grid.every)) + refusal_lines(grid.every)
    write_results(grid, "regression", lines)
    return 0


if __name__ == "__main__":
    sys.exit(main())
