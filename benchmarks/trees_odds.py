"""Equalized odds with boosted trees: ``FairClassifier(model="gbm")`` against FairGBM.

FairGBM (``pip install fairgbm``) constrains group-wise false-positive and false-negative rates,
not demographic parity, so it has no place in ``benchmarks/trees.py``'s ``DI >= 0.8`` grid; this
is the comparison where a constraint matches. FairGBM's ``constraint_type="FPR,FNR"`` with
tolerance ``t`` asks ``max_g FPR_g - FPR_h <= t`` and the same for FNR for every group ``h``; with
two groups that is ``|FPR_0 - FPR_1| <= t`` and ``|TPR_0 - TPR_1| <= t`` (``FNR = 1 - TPR``),
fairopt's equalized odds in its difference form, ``("equalized_odds", "s", t, {"delta": None})``.

The data sets, seeded 70/30 stratified splits and seeds of ``benchmarks/trees.py``
(:func:`benchmarks.papers.peers.prepare`; the sensitive attribute not among the inputs),
``t = BOUND = 0.02`` (every data set's unconstrained LightGBM has a gap above it on the training
rows). Methods:

=======================  =======  ==========================================================
method                   needs s  what
=======================  =======  ==========================================================
hgb                      no       ``HistGradientBoostingClassifier(random_state=seed)``, unconstrained
lightgbm                 no       ``LGBMClassifier(random_state=seed, n_jobs=1)``, unconstrained
fairgbm                  no       ``FairGBMClassifier(constraint_type="FPR,FNR")``, both tolerances
                                  ``t``, otherwise its defaults (100 rounds, 31 leaves), ``n_jobs=1``
fairlearn-to-hgb         yes      fairlearn ``ThresholdOptimizer(equalized_odds)`` on the prefit HGB
                                  (exact parity, randomised: ``t`` is not used)
fairopt-gbm              no       ``FairClassifier(model="gbm")`` under the equalized odds above
fairopt-gbm-margin       no       the same with ``margin="auto"`` (the bound tightened for new rows)
=======================  =======  ==========================================================

Per run: ``|TPR_0 - TPR_1|`` and ``|FPR_0 - FPR_1|`` of the hard labels on the training and the
test rows (numpy, here), accuracy and fit seconds. One JSON file per (data set, method, seed)
under ``OUT/cells_odds``, then ``OUT/odds.md`` (means over seeds, the commit) and ``OUT/odds.csv``.

FairGBM 0.9.14 calls scikit-learn's ``check_array``/``check_X_y`` with ``force_all_finite=``,
which scikit-learn 1.8 removed (now ``ensure_all_finite=``); :func:`_fairgbm_checks` rebinds the
two names FairGBM's sklearn module imported to wrappers that translate the argument.

    python benchmarks/trees_odds.py                             # 5 data sets x 3 seeds
    python benchmarks/trees_odds.py --datasets adult --seeds 0
"""

from __future__ import annotations

import inspect
import logging
import sys
import warnings
from pathlib import Path
from typing import Any, Callable

from _common import DEFAULT_OUT, grid_parser

import numpy as np
import pandas as pd

from benchmarks.papers.peer_adapters import Part
from trees import METHODS as TREES_METHODS
from trees import (DATASETS, SEEDS, Methods, _fairopt, _out, _timed, classifier_cell, in_grid_order, joined_notes,
                   registrar, results_lines, run_grid, share, skipped_lines, threshold_optimizer,
                   write_results)

logger = logging.getLogger("benchmarks.trees_odds")

#: FairGBM's tolerance and fairopt's difference bound on both rate gaps.
BOUND = 0.02
#: Slack of the "met on train" count (hard labels of a smooth training problem).
SLACK = 0.005

#: name -> (needs the sensitive attribute to predict, required modules, fit_predict), the unconstrained
#: boosters those of ``trees.py``.
METHODS: Methods = {name: TREES_METHODS[name] for name in ("hgb", "lightgbm")}
method = registrar(METHODS)


def rate_gaps(pred: np.ndarray, y: np.ndarray, s: np.ndarray) -> dict:
    """``{"TPR gap": |TPR_0 - TPR_1|, "FPR gap": |FPR_0 - FPR_1|}`` of hard labels, two groups."""
    gaps = {}
    for name, label in (("TPR gap", 1), ("FPR gap", 0)):
        rates = [float(np.mean(pred[(s == g) & (y == label)])) for g in (0, 1)]
        gaps[name] = abs(rates[0] - rates[1])
    return gaps


def _fairgbm_checks() -> None:
    """Let FairGBM's sklearn module call today's ``check_array``/``check_X_y``: its
    ``force_all_finite=`` becomes ``ensure_all_finite=`` (a no-op where sklearn still knows it)."""
    import fairgbm.sklearn as fairgbm_sklearn
    from sklearn.utils.validation import check_array, check_X_y

    if "force_all_finite" in inspect.signature(check_array).parameters:
        return

    def renamed(check: Callable[..., Any]) -> Callable[..., Any]:
        def call(*args: Any, force_all_finite: Any = True, **kwargs: Any) -> Any:
            return check(*args, ensure_all_finite=force_all_finite, **kwargs)
        return call

    fairgbm_sklearn._LGBMCheckXY = renamed(check_X_y)
    fairgbm_sklearn._LGBMCheckArray = renamed(check_array)


@method("fairgbm", needs_s=False, requires=("fairgbm",))
def fairgbm(train: Part, test: Part, bound: float, seed: int) -> dict:
    from fairgbm import FairGBMClassifier

    _fairgbm_checks()
    model = FairGBMClassifier(constraint_type="FPR,FNR", constraint_fpr_tolerance=bound,
                              constraint_fnr_tolerance=bound, random_state=seed, n_jobs=1, verbose=-1)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # its LightGBM 3 fork's deprecation notices
        _, seconds = _timed(lambda: model.fit(train.X, train.y, constraint_group=train.s))
        return _out(model.predict(train.X), model.predict(test.X), seconds)


method("fairlearn-to-hgb", needs_s=True, requires=("fairlearn",))(
    threshold_optimizer("equalized_odds", "exact parity (bound not used)"))


def equalized_odds_spec(bound: float) -> list:
    """The constraint of this grid: both rate gaps of ``s`` at most ``bound`` (difference form)."""
    return [("equalized_odds", "s", bound, {"delta": None})]


for _name, _margin in (("fairopt-gbm", False), ("fairopt-gbm-margin", True)):
    method(_name, needs_s=False, requires=("torch",))(_fairopt(_margin, equalized_odds_spec, model="gbm"))


def gaps_measure(out: dict, train: Part, test: Part) -> dict:
    """Both rate gaps (:func:`rate_gaps`) and the accuracy of the hard labels on both parts."""
    tr, te = rate_gaps(out["train_pred"], train.y, train.s), rate_gaps(out["test_pred"], test.y, test.s)
    return {**{f"train {k}": v for k, v in tr.items()}, **{f"test {k}": v for k, v in te.items()},
            "train acc": float(np.mean(out["train_pred"] == train.y)),
            "test acc": float(np.mean(out["test_pred"] == test.y))}


def run_cell(dataset: str, name: str, seed: int, data_dir: str, cells: Path) -> dict:
    """One (data set, method, seed) run under the rate-gap bound ``BOUND``, cached as JSON under ``cells``."""
    return classifier_cell(dataset, name, seed, data_dir, cells, methods=METHODS, bound=("bound", BOUND),
                           measure=gaps_measure, log=logger)


def summary(runs: pd.DataFrame) -> pd.DataFrame:
    """Means over seeds per (data set, method); counts of runs whose larger training gap is
    within ``BOUND + SLACK`` and whose larger test gap is within ``2 BOUND``."""
    ok = runs[runs["status"] == "ok"].copy()
    ok["train max gap"] = ok[["train TPR gap", "train FPR gap"]].max(axis=1)
    ok["test max gap"] = ok[["test TPR gap", "test FPR gap"]].max(axis=1)
    numbers = ["train TPR gap", "train FPR gap", "test TPR gap", "test FPR gap", "train acc", "test acc", "fit s"]
    groups = ok.groupby(["dataset", "method", "needs s"], sort=False)
    table = groups[numbers].mean().reset_index()
    table["seeds"] = groups.size().to_numpy()
    table[f"train gaps <= {BOUND + SLACK:g}"] = groups["train max gap"].apply(
        lambda v: share(v <= BOUND + SLACK)).to_numpy()
    table[f"test gaps <= {2 * BOUND:g}"] = groups["test max gap"].apply(lambda v: share(v <= 2 * BOUND)).to_numpy()
    table["note"] = joined_notes(groups)
    return in_grid_order(table, DATASETS, METHODS)


def main(argv: list[str] | None = None) -> int:
    parser = grid_parser(__doc__.splitlines()[0], DATASETS, SEEDS, DEFAULT_OUT / "trees", list(METHODS))
    args = parser.parse_args(argv)
    grid = run_grid(args, run_cell, "cells_odds", METHODS, logger)
    lines = results_lines(
        f"# Equalized odds, |TPR gap| and |FPR gap| <= {BOUND:g} (means over seeds)", "trees_odds.py", argv, grid,
        "The splits of trees.md (benchmarks.papers.peers.prepare; Adult a seeded 20,000-row sample; the "
        "sensitive attribute not among the inputs). Gaps: absolute differences of the two groups' true- and "
        "false-positive rates of hard labels. FairGBM's constraint_type='FPR,FNR' with both tolerances "
        f"{BOUND:g} is the same bound as fairopt's ('equalized_odds', s, {BOUND:g}, {{'delta': None}}). "
        f"Fit seconds with {args.threads} thread(s) per method on a shared 2-core machine.", summary(grid.every))
    write_results(grid, "odds", lines + skipped_lines(grid.runs))
    return 0


if __name__ == "__main__":
    sys.exit(main())
