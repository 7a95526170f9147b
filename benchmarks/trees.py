"""Tree peers: fairopt's models against gradient-boosted trees and their fairness post-processors.

Five data sets (Adult as a seeded 20,000-row sample, Dutch, Law, ACS-Colorado, COMPAS with the
binary race grouping), the seeded 70/30 stratified splits of ``benchmarks/peers.py``
(:func:`benchmarks.papers.peers.prepare`), seeds 0-2, ``DI >= 0.8`` on hard labels. Every method
sees the same feature matrix, which does NOT contain the sensitive attribute; the methods that
need the attribute to predict get it as a separate argument (column "needs s"). Methods:

========================  ======  ==============================================================
method                    needs s what
========================  ======  ==============================================================
hgb                       no      ``HistGradientBoostingClassifier(random_state=seed)``, unconstrained
lightgbm                  no      ``LGBMClassifier(random_state=seed, n_jobs=1)``, unconstrained
error-parity-hgb          yes     error-parity ``RelaxedThresholdOptimizer`` (demographic parity) on
                                  the HGB scores; its absolute tolerance is bisected to the largest
                                  one whose training DI is >= delta (randomised predictions)
oxonfair-hgb              yes     oxonfair ``FairPredictor`` on HGB, per-group thresholds maximising
                                  accuracy s.t. disparate impact >= delta on the training rows
oxonfair-hgb-inferred     no      the same with the groups inferred by a second HGB that predicts s
fairlearn-to-hgb          yes     fairlearn ``ThresholdOptimizer(demographic_parity)`` on the
                                  prefit HGB (exact parity: delta is not used; randomised)
fairlearn-eg              no      fairlearn ``ExponentiatedGradient`` + LogisticRegression
                                  (``benchmarks.papers.peer_adapters``)
fairopt-linear            no      ``FairClassifier()`` (SQP, linear)
fairopt-mlp               no      ``FairClassifier(model="mlp")``
fairopt-mt-hgb            no      ``FairClassifier(method="moving_targets", model=HGB)``
fairopt-gbm               no      ``FairClassifier(model="gbm")`` (skipped where the estimator
                                  does not know it)
``<fairopt>-margin``      no      each fairopt model with ``margin="auto"``
========================  ======  ==============================================================

FairGBM constrains false-positive and false-negative rates, not demographic parity: its comparison
(equalized odds) is ``benchmarks/trees_odds.py`` (``OUT/odds.md``), on the same splits; the
regression peers (GeDI and covariance bounds) are ``benchmarks/trees_regression.py``
(``OUT/regression.md``).

One JSON file per (data set, method, seed) under ``OUT/cells`` (a rerun skips the cells it has),
then ``OUT/trees.md`` (means over seeds per data set, with the commit and the command),
``OUT/trees.csv`` (every run) and ``OUT/tradeoff_<dataset>.png`` (test accuracy against test DI).
A peer that is not installed is skipped with a note. Install the peers with::

    pip install "fairopt[benchmarks]"    # fairlearn, oxonfair, cvxpy, ecos, seaborn, threadpoolctl
    pip install --no-deps error-parity    # it pins numpy<2 and cvxpy~=1.3: never let pip touch numpy

Examples::

    python benchmarks/trees.py --datasets adult --seeds 0             # one data set, one seed
    nice python benchmarks/trees.py                                    # the full grid (cached cells)

Every method runs with one BLAS/OpenMP/torch thread (``--threads``): on a shared machine
OpenMP's busy-waiting threads otherwise dominate the fit times.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import re
import sys
import time
import warnings
from pathlib import Path
from typing import Any, Callable

from _common import DEFAULT_DATA, DEFAULT_OUT, commit, markdown, out_dir

import numpy as np
import pandas as pd

from benchmarks.papers.cells import read_cells, write_cell
from benchmarks.papers.peer_adapters import ADAPTERS, Part
from benchmarks.papers.peers import cell_metrics, prepare

logger = logging.getLogger("benchmarks.trees")

DATASETS = ["adult", "dutch", "law", "acsincome", "compas"]
#: Seeded row samples (the rest use all rows).
ROWS = {"adult": 20000}
SEEDS = [0, 1, 2]
DELTA = 0.8
INSTALL = 'pip install "fairopt[benchmarks]" && pip install --no-deps error-parity'
SEE_ALSO = ("FairGBM (equalized odds, where its constraint matches): odds.md (benchmarks/trees_odds.py); "
            "regression under GeDI and covariance bounds: regression.md (benchmarks/trees_regression.py).")

Method = Callable[[Part, Part, float, int], dict]
#: name -> (needs the sensitive attribute to predict, required modules, fit_predict)
METHODS: dict[str, tuple[bool, tuple[str, ...], Method]] = {}


class Skip(Exception):
    """A method that cannot run here (a peer not installed, a model the estimator does not know)."""


def method(name: str, needs_s: bool, requires: tuple[str, ...] = ()) -> Callable[[Method], Method]:
    """Register ``fit_predict(train, test, delta, seed) -> {"train_pred", "test_pred", "seconds"}``."""
    def wrap(fn: Method) -> Method:
        METHODS[name] = (needs_s, requires, fn)
        return fn
    return wrap


def _hgb(seed: int) -> Any:
    from sklearn.ensemble import HistGradientBoostingClassifier

    return HistGradientBoostingClassifier(random_state=seed)


def _timed(fit: Callable[[], Any]) -> tuple[Any, float]:
    start = time.perf_counter()
    value = fit()
    return value, time.perf_counter() - start


def _out(train_pred: Any, test_pred: Any, seconds: float, note: str = "") -> dict:
    return {"train_pred": np.asarray(train_pred).reshape(-1).astype(np.int64),
            "test_pred": np.asarray(test_pred).reshape(-1).astype(np.int64), "seconds": float(seconds), "note": note}


# --------------------------------------------------------------------------------------
# unconstrained boosters
# --------------------------------------------------------------------------------------
@method("hgb", needs_s=False, requires=("sklearn",))
def hgb(train: Part, test: Part, delta: float, seed: int) -> dict:
    model, seconds = _timed(lambda: _hgb(seed).fit(train.X, train.y))
    return _out(model.predict(train.X), model.predict(test.X), seconds)


@method("lightgbm", needs_s=False, requires=("lightgbm",))
def lightgbm(train: Part, test: Part, delta: float, seed: int) -> dict:
    from lightgbm import LGBMClassifier

    model, seconds = _timed(lambda: LGBMClassifier(random_state=seed, n_jobs=1, verbose=-1).fit(train.X, train.y))
    return _out(model.predict(train.X), model.predict(test.X), seconds)


# --------------------------------------------------------------------------------------
# post-processors of HGB
# --------------------------------------------------------------------------------------
def _rates_di(pred: np.ndarray, s: np.ndarray) -> float:
    return cell_metrics(pred, np.zeros_like(pred), s)["di"]


@method("error-parity-hgb", needs_s=True, requires=("error_parity", "cvxpy"))
def error_parity_hgb(train: Part, test: Part, delta: float, seed: int, steps: int = 8) -> dict:
    """Bisection on the tolerance ``t`` (absolute difference of the groups' positive rates):
    the largest ``t`` whose fitted optimiser has training DI >= delta."""
    from error_parity import RelaxedThresholdOptimizer

    start = time.perf_counter()
    model = _hgb(seed).fit(train.X, train.y)
    score = lambda X: model.predict_proba(X)[:, 1]  # noqa: E731
    scores = score(train.X)

    def fitted(tolerance: float) -> Any:
        opt = RelaxedThresholdOptimizer(predictor=score, constraint="demographic_parity", tolerance=tolerance,
                                        seed=seed)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return opt.fit(train.X, train.y, group=train.s, y_scores=scores)

    low, high, best = 0.0, 0.5, fitted(0.0)
    for _ in range(steps):
        middle = (low + high) / 2
        candidate = fitted(middle)
        if _rates_di(candidate.predict(train.X, group=train.s), train.s) >= delta:
            low, best = middle, candidate
        else:
            high = middle
    seconds = time.perf_counter() - start
    return _out(best.predict(train.X, group=train.s), best.predict(test.X, group=test.s), seconds,
                note=f"tolerance {low:.4f}")


def _oxonfair(train: Part, test: Part, delta: float, seed: int, inferred: bool) -> dict:
    from oxonfair import DataDict, FairPredictor
    from oxonfair.utils import group_metrics as gm

    start = time.perf_counter()
    model = _hgb(seed).fit(train.X, train.y)
    validation = DataDict(train.y, train.X, train.s)
    if inferred:
        groups = _hgb(seed).fit(train.X, train.s)
        fair = FairPredictor(model, validation, inferred_groups=groups)
    else:
        fair = FairPredictor(model, validation)
    fair.fit(gm.accuracy, gm.disparate_impact, delta)
    seconds = time.perf_counter() - start
    if inferred:  # the attribute is not read at prediction time
        return _out(fair.predict(DataDict(train.y, train.X)), fair.predict(DataDict(test.y, test.X)), seconds)
    return _out(fair.predict(DataDict(train.y, train.X, train.s)), fair.predict(DataDict(test.y, test.X, test.s)),
                seconds)


@method("oxonfair-hgb", needs_s=True, requires=("oxonfair",))
def oxonfair_hgb(train: Part, test: Part, delta: float, seed: int) -> dict:
    return _oxonfair(train, test, delta, seed, inferred=False)


@method("oxonfair-hgb-inferred", needs_s=False, requires=("oxonfair",))
def oxonfair_hgb_inferred(train: Part, test: Part, delta: float, seed: int) -> dict:
    return _oxonfair(train, test, delta, seed, inferred=True)


@method("fairlearn-to-hgb", needs_s=True, requires=("fairlearn",))
def fairlearn_to_hgb(train: Part, test: Part, delta: float, seed: int) -> dict:
    from fairlearn.postprocessing import ThresholdOptimizer

    start = time.perf_counter()
    model = _hgb(seed).fit(train.X, train.y)
    to = ThresholdOptimizer(estimator=model, constraints="demographic_parity", predict_method="predict_proba",
                            prefit=True)
    to.fit(train.X, train.y, sensitive_features=train.s)
    seconds = time.perf_counter() - start
    return _out(to.predict(train.X, sensitive_features=train.s, random_state=seed),
                to.predict(test.X, sensitive_features=test.s, random_state=seed + 1), seconds,
                note="exact parity (delta not used)")


@method("fairlearn-eg", needs_s=False, requires=("fairlearn",))
def fairlearn_eg(train: Part, test: Part, delta: float, seed: int) -> dict:
    result = ADAPTERS["fairlearn-eg"](train, test, delta, seed)
    return _out(result["train_pred"], result["test_pred"], result["fit_time"], note="LogisticRegression")


# --------------------------------------------------------------------------------------
# fairopt
# --------------------------------------------------------------------------------------
def _fairopt(margin: bool, **options: Any) -> Method:
    def fit_predict(train: Part, test: Part, delta: float, seed: int) -> dict:
        from fairopt.estimators import FairClassifier

        if "model" in options and callable(options["model"]):  # a factory of a seeded scikit-learn model
            options_seeded = {**options, "model": options["model"](seed)}
        else:
            options_seeded = dict(options)
        clf = FairClassifier([("disparate_impact", "s", delta)], sensitive_names="s", seed=seed,
                             margin="auto" if margin else 0.0, **options_seeded)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            try:
                _, seconds = _timed(lambda: clf.fit(train.X, train.y, sensitive_features=train.s))
            except ValueError as exc:
                if options.get("model") == "gbm" and "model" in str(exc):
                    raise Skip(f"model='gbm' is not available here ({exc})") from None
                raise
        from fairopt.exceptions import FairnessWarning

        messages = [str(w.message) for w in caught if issubclass(w.category, FairnessWarning)]
        note = "; ".join(sorted({_warning_label(m) for m in messages}))
        return _out(clf.predict(train.X), clf.predict(test.X), seconds, note=note)
    return fit_predict


def _warning_label(message: str) -> str:
    """A short label of an estimator warning: "bound not met on train (warned)" for an unmet
    bound, else its kind (e.g. "inactive constraint", "near-constant classifier")."""
    head, _, rest = message.partition(": ")
    if "violated on the training data" in rest:
        return "bound not met on train (warned)"
    label = rest if "[" in head and rest else head
    return re.split(r" - | \(|[,.;:]", label)[0][:60]


for _name, _options in [("fairopt-linear", {}), ("fairopt-mlp", {"model": "mlp"}),
                        ("fairopt-mt-hgb", {"method": "moving_targets", "model": _hgb}),
                        ("fairopt-gbm", {"model": "gbm"})]:
    method(_name, needs_s=False, requires=("torch",))(_fairopt(False, **_options))
    method(_name + "-margin", needs_s=False, requires=("torch",))(_fairopt(True, **_options))


# --------------------------------------------------------------------------------------
# the grid
# --------------------------------------------------------------------------------------
def _missing(requires: tuple[str, ...]) -> str | None:
    for module in requires:
        try:
            importlib.import_module(module)
        except ImportError as exc:
            return f"{module} not installed ({exc}); install the peers with: {INSTALL}"
    return None


def run_cell(dataset: str, name: str, seed: int, data_dir: str, cells: Path) -> dict:
    """One (data set, method, seed) run, cached as JSON under ``cells``."""
    path = cells / f"{dataset}__{name}__{seed}.json"
    if path.is_file():
        return read_cells([path]).iloc[0].to_dict()
    needs_s, requires, fit_predict = METHODS[name]
    record = {"dataset": dataset, "method": name, "seed": seed, "needs s": "yes" if needs_s else "no",
              "delta": DELTA, "commit": commit()}
    reason = _missing(requires)
    if reason is not None:
        logger.warning("skipping %s: %s", name, reason)
        return {**record, "status": "skipped", "note": reason}  # not cached: installing the peer reruns it
    train, test, _ = prepare(dataset, seed, data_dir, ROWS.get(dataset))
    try:
        out = fit_predict(train, test, DELTA, seed)
    except Skip as exc:
        logger.warning("skipping %s: %s", name, exc)
        return {**record, "status": "skipped", "note": str(exc)}
    tr, te = cell_metrics(out["train_pred"], train.y, train.s), cell_metrics(out["test_pred"], test.y, test.s)
    record.update({"status": "ok", "train DI": tr["di"], "test DI": te["di"], "train acc": tr["acc"],
                   "test acc": te["acc"], "fit s": out["seconds"], "note": out["note"]})
    write_cell(path, record)
    logger.info("%s %s seed %d: train DI %.3f test DI %.3f test acc %.4f (%.1f s)", dataset, name, seed,
                tr["di"], te["di"], te["acc"], out["seconds"])
    return record


def summary(runs: pd.DataFrame) -> pd.DataFrame:
    """Means over seeds per (data set, method), in the order of :data:`METHODS`."""
    ok = runs[runs["status"] == "ok"]
    numbers = ["train DI", "test DI", "train acc", "test acc", "fit s"]
    table = ok.groupby(["dataset", "method", "needs s"], sort=False)[numbers].mean().reset_index()
    counts = ok.groupby(["dataset", "method"], sort=False)
    table["seeds"] = counts.size().to_numpy()
    table[f"train DI >= {DELTA - 0.005:g}"] = counts["train DI"].apply(
        lambda v: f"{int((v >= DELTA - 0.005).sum())}/{len(v)}").to_numpy()
    table[f"test DI >= {DELTA - 0.01:g}"] = counts["test DI"].apply(
        lambda v: f"{int((v >= DELTA - 0.01).sum())}/{len(v)}").to_numpy()
    notes = counts["note"].apply(lambda v: "; ".join(sorted({str(x) for x in v if isinstance(x, str) and x})))
    table["note"] = notes.to_numpy()
    order = {name: i for i, name in enumerate(METHODS)}
    datasets = {name: i for i, name in enumerate(DATASETS)}
    return table.sort_values(["dataset", "method"], key=lambda c: c.map({**order, **datasets})).reset_index(drop=True)


def plot(table: pd.DataFrame, out: Path) -> list[Path]:
    """``tradeoff_<dataset>.png``: mean test accuracy against mean test DI, one point per method
    (hollow: needs the sensitive attribute to predict), the bound as a dashed line."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    files = []
    for dataset, rows in table.groupby("dataset", sort=False):
        fig, ax = plt.subplots(figsize=(7.5, 5))
        for i, row in enumerate(rows.itertuples(index=False)):
            color = plt.cm.tab20(i % 20)
            hollow = row[2] == "yes"
            ax.scatter(row[4], row[6], s=60, marker="o" if not hollow else "s",
                       facecolors="none" if hollow else color, edgecolors=color, label=row[1])
        ax.axvline(DELTA, color="grey", linestyle="--", linewidth=1)
        ax.set_xlabel("test DI (mean over seeds)")
        ax.set_ylabel("test accuracy (mean over seeds)")
        ax.set_title(f"{dataset}: DI >= {DELTA:g} (hollow squares read s to predict)")
        ax.legend(fontsize=7, loc="best")
        fig.tight_layout()
        path = out / f"tradeoff_{dataset}.png"
        fig.savefig(path, dpi=110)
        plt.close(fig)
        files.append(path)
    return files


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
    with threadpool_limits(limits=args.threads):
        return _run(args, argv)


def _run(args: argparse.Namespace, argv: list[str] | None) -> int:
    out = out_dir(args.out)
    cells = out / "cells"
    cells.mkdir(exist_ok=True)
    start = time.perf_counter()
    # seeds outermost: an interrupted grid has every data set at the first seeds
    runs = pd.DataFrame([run_cell(d, m, s, args.data_dir, cells)
                         for s in args.seeds for d in args.datasets for m in args.methods])
    # the table covers every cached run (earlier invocations' data sets and seeds too)
    every = read_cells(sorted(cells.glob("*.json")))
    every = every[every["method"].isin(METHODS)]
    skipped = runs[runs["status"] == "skipped"][["method", "note"]].drop_duplicates("method")
    table = summary(every)
    command = "python benchmarks/trees.py " + " ".join(sys.argv[1:] if argv is None else argv)
    lines = [f"# Tree peers, DI >= {DELTA:g} (means over seeds)", "",
             f"commit {commit()}; last command `{command.strip()}`; runs from commits "
             f"{', '.join(sorted(set(every['commit'])))}.", "",
             "Seeded 70/30 stratified splits (benchmarks.papers.peers.prepare), Adult a seeded 20,000-row sample, "
             "the sensitive attribute not among the inputs; DI = min ratio of the groups' positive rates of hard "
             "labels; 'needs s': the method reads the sensitive attribute to predict. Fit seconds with "
             f"{args.threads} thread(s) per method (BLAS, OpenMP, torch; LightGBM n_jobs=1) on a shared 2-core "
             "machine.", "", markdown(table, floatfmt=".4f"), ""]
    if len(skipped):
        lines += ["Skipped here:", ""] + [f"- {r.method}: {r.note}" for r in skipped.itertuples()] + [""]
    lines += [SEE_ALSO, ""]
    (out / "trees.md").write_text("\n".join(lines))
    every.to_csv(out / "trees.csv", index=False)
    files = plot(table, out)
    print("\n".join(lines))
    print(f"{len(runs)} runs in {time.perf_counter() - start:.0f} s; wrote {out / 'trees.md'}, "
          + ", ".join(str(f) for f in files))
    return 0


if __name__ == "__main__":
    sys.exit(main())
