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

import argparse
import inspect
import logging
import sys
import time
import warnings
from pathlib import Path
from typing import Any, Callable

from _common import DEFAULT_DATA, DEFAULT_OUT, commit, markdown, out_dir

import numpy as np
import pandas as pd

from benchmarks.papers.cells import read_cells, write_cell
from benchmarks.papers.peer_adapters import Part
from benchmarks.papers.peers import prepare
from trees import DATASETS, ROWS, SEEDS, Skip, _hgb, _missing, _out, _timed, _warning_label

logger = logging.getLogger("benchmarks.trees_odds")

#: FairGBM's tolerance and fairopt's difference bound on both rate gaps.
BOUND = 0.02
#: Slack of the "met on train" count (hard labels of a smooth training problem).
SLACK = 0.005

Method = Callable[[Part, Part, float, int], dict]
#: name -> (needs the sensitive attribute to predict, required modules, fit_predict)
METHODS: dict[str, tuple[bool, tuple[str, ...], Method]] = {}


def method(name: str, needs_s: bool, requires: tuple[str, ...] = ()) -> Callable[[Method], Method]:
    """Register ``fit_predict(train, test, bound, seed) -> {"train_pred", "test_pred", "seconds", "note"}``."""
    def wrap(fn: Method) -> Method:
        METHODS[name] = (needs_s, requires, fn)
        return fn
    return wrap


def rate_gaps(pred: np.ndarray, y: np.ndarray, s: np.ndarray) -> dict:
    """``{"TPR gap": |TPR_0 - TPR_1|, "FPR gap": |FPR_0 - FPR_1|}`` of hard labels, two groups."""
    gaps = {}
    for name, label in (("TPR gap", 1), ("FPR gap", 0)):
        rates = [float(np.mean(pred[(s == g) & (y == label)])) for g in (0, 1)]
        gaps[name] = abs(rates[0] - rates[1])
    return gaps


@method("hgb", needs_s=False, requires=("sklearn",))
def hgb(train: Part, test: Part, bound: float, seed: int) -> dict:
    model, seconds = _timed(lambda: _hgb(seed).fit(train.X, train.y))
    return _out(model.predict(train.X), model.predict(test.X), seconds)


@method("lightgbm", needs_s=False, requires=("lightgbm",))
def lightgbm(train: Part, test: Part, bound: float, seed: int) -> dict:
    from lightgbm import LGBMClassifier

    model, seconds = _timed(lambda: LGBMClassifier(random_state=seed, n_jobs=1, verbose=-1).fit(train.X, train.y))
    return _out(model.predict(train.X), model.predict(test.X), seconds)


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


@method("fairlearn-to-hgb", needs_s=True, requires=("fairlearn",))
def fairlearn_to_hgb(train: Part, test: Part, bound: float, seed: int) -> dict:
    from fairlearn.postprocessing import ThresholdOptimizer

    start = time.perf_counter()
    model = _hgb(seed).fit(train.X, train.y)
    to = ThresholdOptimizer(estimator=model, constraints="equalized_odds", predict_method="predict_proba",
                            prefit=True)
    to.fit(train.X, train.y, sensitive_features=train.s)
    seconds = time.perf_counter() - start
    return _out(to.predict(train.X, sensitive_features=train.s, random_state=seed),
                to.predict(test.X, sensitive_features=test.s, random_state=seed + 1), seconds,
                note="exact parity (bound not used)")


@method("fairopt-gbm", needs_s=False, requires=("torch",))
def fairopt_gbm(train: Part, test: Part, bound: float, seed: int) -> dict:
    from fairopt.estimators import FairClassifier
    from fairopt.exceptions import FairnessWarning

    clf = FairClassifier([("equalized_odds", "s", bound, {"delta": None})], sensitive_names="s", model="gbm",
                         seed=seed)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        _, seconds = _timed(lambda: clf.fit(train.X, train.y, sensitive_features=train.s))
    labels = {_warning_label(str(w.message)) for w in caught if issubclass(w.category, FairnessWarning)}
    return _out(clf.predict(train.X), clf.predict(test.X), seconds, note="; ".join(sorted(labels)))


def run_cell(dataset: str, name: str, seed: int, data_dir: str, cells: Path) -> dict:
    """One (data set, method, seed) run, cached as JSON under ``cells``."""
    path = cells / f"{dataset}__{name}__{seed}.json"
    if path.is_file():
        return read_cells([path]).iloc[0].to_dict()
    needs_s, requires, fit_predict = METHODS[name]
    record = {"dataset": dataset, "method": name, "seed": seed, "needs s": "yes" if needs_s else "no",
              "bound": BOUND, "commit": commit()}
    reason = _missing(requires)
    if reason is not None:
        logger.warning("skipping %s: %s", name, reason)
        return {**record, "status": "skipped", "note": reason}
    train, test, _ = prepare(dataset, seed, data_dir, ROWS.get(dataset))
    try:
        out = fit_predict(train, test, BOUND, seed)
    except Skip as exc:
        return {**record, "status": "skipped", "note": str(exc)}
    tr, te = rate_gaps(out["train_pred"], train.y, train.s), rate_gaps(out["test_pred"], test.y, test.s)
    record.update({"status": "ok", **{f"train {k}": v for k, v in tr.items()},
                   **{f"test {k}": v for k, v in te.items()},
                   "train acc": float(np.mean(out["train_pred"] == train.y)),
                   "test acc": float(np.mean(out["test_pred"] == test.y)), "fit s": out["seconds"],
                   "note": out["note"]})
    write_cell(path, record)
    logger.info("%s %s seed %d: train gaps %.3f/%.3f test gaps %.3f/%.3f test acc %.4f (%.1f s)", dataset, name,
                seed, tr["TPR gap"], tr["FPR gap"], te["TPR gap"], te["FPR gap"], record["test acc"], out["seconds"])
    return record


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
        lambda v: f"{int((v <= BOUND + SLACK).sum())}/{len(v)}").to_numpy()
    table[f"test gaps <= {2 * BOUND:g}"] = groups["test max gap"].apply(
        lambda v: f"{int((v <= 2 * BOUND).sum())}/{len(v)}").to_numpy()
    table["note"] = groups["note"].apply(
        lambda v: "; ".join(sorted({str(x) for x in v if isinstance(x, str) and x}))).to_numpy()
    order = {name: i for i, name in enumerate(METHODS)}
    datasets = {name: i for i, name in enumerate(DATASETS)}
    return table.sort_values(["dataset", "method"], key=lambda c: c.map({**order, **datasets})).reset_index(drop=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--datasets", nargs="+", default=DATASETS, choices=DATASETS)
    parser.add_argument("--seeds", nargs="+", type=int, default=SEEDS)
    parser.add_argument("--methods", nargs="+", default=list(METHODS), choices=list(METHODS))
    parser.add_argument("--data-dir", default=str(DEFAULT_DATA))
    parser.add_argument("--out", default=str(DEFAULT_OUT / "trees"))
    parser.add_argument("--threads", type=int, default=1, help="BLAS/OpenMP/torch threads of every method")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    logger.setLevel(logging.INFO)
    import torch
    from threadpoolctl import threadpool_limits

    torch.set_num_threads(args.threads)
    out = out_dir(args.out)
    cells = out / "cells_odds"
    cells.mkdir(exist_ok=True)
    start = time.perf_counter()
    with threadpool_limits(limits=args.threads):
        runs = pd.DataFrame([run_cell(d, m, s, args.data_dir, cells)
                             for s in args.seeds for d in args.datasets for m in args.methods])
    every = read_cells(sorted(cells.glob("*.json")))
    every = every[every["method"].isin(METHODS)]
    skipped = runs[runs["status"] == "skipped"][["method", "note"]].drop_duplicates("method")
    command = "python benchmarks/trees_odds.py " + " ".join(sys.argv[1:] if argv is None else argv)
    lines = [f"# Equalized odds, |TPR gap| and |FPR gap| <= {BOUND:g} (means over seeds)", "",
             f"commit {commit()}; last command `{command.strip()}`; runs from commits "
             f"{', '.join(sorted(set(every['commit'])))}.", "",
             "The splits of trees.md (benchmarks.papers.peers.prepare; Adult a seeded 20,000-row sample; the "
             "sensitive attribute not among the inputs). Gaps: absolute differences of the two groups' true- and "
             "false-positive rates of hard labels. FairGBM's constraint_type='FPR,FNR' with both tolerances "
             f"{BOUND:g} is the same bound as fairopt's ('equalized_odds', s, {BOUND:g}, {{'delta': None}}). "
             f"Fit seconds with {args.threads} thread(s) per method on a shared 2-core machine.", "",
             markdown(summary(every), floatfmt=".4f"), ""]
    if len(skipped):
        lines += ["Skipped here:", ""] + [f"- {r.method}: {r.note}" for r in skipped.itertuples()] + [""]
    (out / "odds.md").write_text("\n".join(lines))
    every.to_csv(out / "odds.csv", index=False)
    print("\n".join(lines))
    print(f"{len(runs)} runs in {time.perf_counter() - start:.0f} s; wrote {out / 'odds.md'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
