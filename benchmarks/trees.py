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

import importlib
import logging
import re
import sys
import time
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable

from _common import DEFAULT_OUT, commit, grid_parser, limited_threads, markdown, out_dir, provenance

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

#: ``fit_predict(train, test, bound, seed) -> {"train_pred", "test_pred", "seconds", "note"}``; the bound
#: is this grid's (``DELTA`` here, the rate-gap bound of ``trees_odds.py``).
Method = Callable[[Part, Part, float, int], dict]
#: name -> (needs the sensitive attribute to predict, required modules, fit_predict)
Methods = dict[str, tuple[bool, tuple[str, ...], Method]]
METHODS: Methods = {}


class Skip(Exception):
    """A method that cannot run here (a peer not installed, a model the estimator does not know)."""


def registrar(methods: Methods) -> Callable[..., Callable[[Method], Method]]:
    """The decorator ``method(name, needs_s, requires=())`` that registers a ``fit_predict`` in
    ``methods`` (each grid script keeps its own table)."""
    def method(name: str, needs_s: bool, requires: tuple[str, ...] = ()) -> Callable[[Method], Method]:
        def wrap(fn: Method) -> Method:
            methods[name] = (needs_s, requires, fn)
            return fn
        return wrap
    return method


method = registrar(METHODS)


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


def threshold_optimizer(constraints: str, note: str) -> Method:
    """fairlearn's ``ThresholdOptimizer(constraints=constraints)`` on the prefit HGB: exact parity
    of ``constraints`` with randomised predictions (seeded ``seed`` on the training rows, ``seed + 1``
    on the test rows), so the grid's bound is not used; ``note`` says so in the table."""
    def fit_predict(train: Part, test: Part, bound: float, seed: int) -> dict:
        from fairlearn.postprocessing import ThresholdOptimizer

        start = time.perf_counter()
        model = _hgb(seed).fit(train.X, train.y)
        to = ThresholdOptimizer(estimator=model, constraints=constraints, predict_method="predict_proba",
                                prefit=True)
        to.fit(train.X, train.y, sensitive_features=train.s)
        seconds = time.perf_counter() - start
        return _out(to.predict(train.X, sensitive_features=train.s, random_state=seed),
                    to.predict(test.X, sensitive_features=test.s, random_state=seed + 1), seconds, note=note)
    return fit_predict


method("fairlearn-to-hgb", needs_s=True, requires=("fairlearn",))(
    threshold_optimizer("demographic_parity", "exact parity (delta not used)"))


@method("fairlearn-eg", needs_s=False, requires=("fairlearn",))
def fairlearn_eg(train: Part, test: Part, delta: float, seed: int) -> dict:
    result = ADAPTERS["fairlearn-eg"](train, test, delta, seed)
    return _out(result["train_pred"], result["test_pred"], result["fit_time"], note="LogisticRegression")


# --------------------------------------------------------------------------------------
# fairopt
# --------------------------------------------------------------------------------------
def disparate_impact_spec(bound: float) -> list:
    """The constraint of this grid: disparate impact of ``s`` at least ``bound``."""
    return [("disparate_impact", "s", bound)]


def _fairopt(margin: bool, constraint: Callable[[float], list] = disparate_impact_spec, **options: Any) -> Method:
    """A fairopt ``FairClassifier`` method under ``constraint(bound)``; a margin the estimator refuses
    (wider than the bound) is recorded as a skipped method with the estimator's message."""
    def fit_predict(train: Part, test: Part, bound: float, seed: int) -> dict:
        from fairopt.estimators import FairClassifier

        if "model" in options and callable(options["model"]):  # a factory of a seeded scikit-learn model
            options_seeded = {**options, "model": options["model"](seed)}
        else:
            options_seeded = dict(options)
        clf = FairClassifier(constraint(bound), sensitive_names="s", seed=seed,
                             margin="auto" if margin else 0.0, **options_seeded)
        try:
            seconds, note = fit_noting_warnings(clf, train)
        except ValueError as exc:
            if options.get("model") == "gbm" and "model" in str(exc):
                raise Skip(f"model='gbm' is not available here ({exc})") from None
            if margin and str(exc).startswith("margin:"):
                raise Skip(f"refused: {exc}") from None
            raise
        return _out(clf.predict(train.X), clf.predict(test.X), seconds, note=note)
    return fit_predict


def fit_noting_warnings(clf: Any, train: Part) -> tuple[float, str]:
    """Fit a fairopt classifier on ``train``; its fit seconds and a note of the fairness warnings
    it raised (their :func:`_warning_label`, sorted, without repeats)."""
    from fairopt.exceptions import FairnessWarning

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        _, seconds = _timed(lambda: clf.fit(train.X, train.y, sensitive_features=train.s))
    labels = {_warning_label(str(w.message)) for w in caught if issubclass(w.category, FairnessWarning)}
    return seconds, "; ".join(sorted(labels))


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


#: ``measure(out, train, test)``: a cell's numbers from a method's output (before "fit s" and "note").
Measure = Callable[[dict, Part, Part], dict]


def classifier_cell(dataset: str, name: str, seed: int, data_dir: str, cells: Path, *, methods: Methods,
                    bound: tuple[str, float], measure: Measure, log: logging.Logger) -> dict:
    """One (data set, method, seed) run of a classifier grid, cached as
    ``<cells>/<data set>__<method>__<seed>.json`` (a cached run is read back, not rerun).

    The method ``methods[name]`` is fitted on the seeded split of :func:`benchmarks.papers.peers.prepare`
    under ``bound = (column, value)``; the record holds the bound's column, ``measure``'s numbers, fit
    seconds and the method's note. A method whose modules are missing or that raises :class:`Skip`
    gives a "skipped" record that is not cached (installing the peer reruns it)."""
    path = cells / f"{dataset}__{name}__{seed}.json"
    if path.is_file():
        return read_cells([path]).iloc[0].to_dict()
    needs_s, requires, fit_predict = methods[name]
    record = {"dataset": dataset, "method": name, "seed": seed, "needs s": "yes" if needs_s else "no",
              bound[0]: bound[1], "commit": commit()}
    reason = _missing(requires)
    if reason is not None:
        log.warning("skipping %s: %s", name, reason)
        return {**record, "status": "skipped", "note": reason}
    train, test, _ = prepare(dataset, seed, data_dir, ROWS.get(dataset))
    try:
        out = fit_predict(train, test, bound[1], seed)
    except Skip as exc:
        log.warning("skipping %s: %s", name, exc)
        return {**record, "status": "skipped", "note": str(exc)}
    numbers = measure(out, train, test)
    record.update({"status": "ok", **numbers, "fit s": out["seconds"], "note": out["note"]})
    write_cell(path, record)
    log.info("%s %s seed %d: %s (%.1f s)", dataset, name, seed,
             ", ".join(f"{k} {v:.4f}" for k, v in numbers.items()), out["seconds"])
    return record


def di_measure(out: dict, train: Part, test: Part) -> dict:
    """DI and accuracy of the hard labels on the training and the test rows."""
    tr, te = cell_metrics(out["train_pred"], train.y, train.s), cell_metrics(out["test_pred"], test.y, test.s)
    return {"train DI": tr["di"], "test DI": te["di"], "train acc": tr["acc"], "test acc": te["acc"]}


def run_cell(dataset: str, name: str, seed: int, data_dir: str, cells: Path) -> dict:
    """One (data set, method, seed) run under ``DI >= DELTA``, cached as JSON under ``cells``."""
    return classifier_cell(dataset, name, seed, data_dir, cells, methods=METHODS, bound=("delta", DELTA),
                           measure=di_measure, log=logger)


def summary(runs: pd.DataFrame, methods: Iterable[str] = METHODS) -> pd.DataFrame:
    """Means over seeds per (data set, method), in the order of ``methods`` (:data:`METHODS`)."""
    ok = runs[runs["status"] == "ok"]
    numbers = ["train DI", "test DI", "train acc", "test acc", "fit s"]
    table = ok.groupby(["dataset", "method", "needs s"], sort=False)[numbers].mean().reset_index()
    counts = ok.groupby(["dataset", "method"], sort=False)
    table["seeds"] = counts.size().to_numpy()
    table[f"train DI >= {DELTA - 0.005:g}"] = counts["train DI"].apply(lambda v: share(v >= DELTA - 0.005)).to_numpy()
    table[f"test DI >= {DELTA - 0.01:g}"] = counts["test DI"].apply(lambda v: share(v >= DELTA - 0.01)).to_numpy()
    table["note"] = joined_notes(counts)
    return in_grid_order(table, DATASETS, methods)


def share(passed: pd.Series) -> str:
    """``"k/n"``: how many of a group's ``n`` runs passed a check."""
    return f"{int(passed.sum())}/{len(passed)}"


def distinct_notes(notes: Iterable[Any]) -> list[str]:
    """The distinct non-empty notes among ``notes`` (missing ones are NaN), sorted."""
    return sorted({str(x) for x in notes if isinstance(x, str) and x})


def joined_notes(groups: Any) -> np.ndarray:
    """Per group of runs, their distinct non-empty notes, sorted and joined with "; "."""
    return groups["note"].apply(lambda v: "; ".join(distinct_notes(v))).to_numpy()


def in_grid_order(table: pd.DataFrame, datasets: Iterable[str], methods: Iterable[str]) -> pd.DataFrame:
    """``table``'s rows sorted by data set, then method, each in the order the grid lists them."""
    rank = {**{name: i for i, name in enumerate(methods)}, **{name: i for i, name in enumerate(datasets)}}
    return table.sort_values(["dataset", "method"], key=lambda c: c.map(rank)).reset_index(drop=True)


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


@dataclass
class Grid:
    """What :func:`run_grid` ran: the output folder, this invocation's records, every cached run of
    a known method (earlier invocations' data sets and seeds too) and the start time."""

    out: Path
    runs: pd.DataFrame
    every: pd.DataFrame
    started: float


def run_grid(args: Any, cell: Callable[[str, str, int, str, Path], dict], cells_name: str,
             methods: Iterable[str], log: logging.Logger) -> Grid:
    """``cell(data set, method, seed, data dir, cells folder)`` for every combination of ``args``
    (:func:`_common.grid_parser`'s options), seeds outermost so that an interrupted grid has every
    data set at the first seeds, with ``args.threads`` threads; the cells folder is
    ``<args.out>/<cells_name>``."""
    out = out_dir(args.out)
    cells = out / cells_name
    cells.mkdir(exist_ok=True)
    started = time.perf_counter()
    with limited_threads(args.threads, log):
        runs = pd.DataFrame([cell(d, m, s, args.data_dir, cells)
                             for s in args.seeds for d in args.datasets for m in args.methods])
    every = read_cells(sorted(cells.glob("*.json")))
    return Grid(out, runs, every[every["method"].isin(list(methods))], started)


def results_lines(title: str, script: str, argv: list[str] | None, grid: Grid, description: str,
                  table: pd.DataFrame) -> list[str]:
    """The opening of a results file: ``title``, the provenance of ``script`` run with ``argv`` over
    ``grid``'s runs, ``description`` and ``table`` in markdown (4 decimals), each followed by a blank line."""
    return [title, "", provenance(script, argv, grid.every["commit"]), "", description, "",
            markdown(table, floatfmt=".4f"), ""]


def write_results(grid: Grid, stem: str, lines: list[str], figures: Iterable[Path] = ()) -> None:
    """``<out>/<stem>.md`` (``lines``) and ``<out>/<stem>.csv`` (every cached run), echoed with the
    number of runs of this invocation, its seconds and the files written (``figures`` too)."""
    (grid.out / f"{stem}.md").write_text("\n".join(lines))
    grid.every.to_csv(grid.out / f"{stem}.csv", index=False)
    print("\n".join(lines))
    print(f"{len(grid.runs)} runs in {time.perf_counter() - grid.started:.0f} s; wrote {grid.out / f'{stem}.md'}"
          + "".join(f", {f}" for f in figures))


def skipped_lines(runs: pd.DataFrame) -> list[str]:
    """The "Skipped here:" list of a results file (one line per skipped method), empty when none was."""
    if "status" not in runs:
        return []
    skipped = runs[runs["status"] == "skipped"][["method", "note"]].drop_duplicates("method")
    if not len(skipped):
        return []
    return ["Skipped here:", ""] + [f"- {r.method}: {r.note}" for r in skipped.itertuples()] + [""]


def main(argv: list[str] | None = None) -> int:
    parser = grid_parser(__doc__.splitlines()[0], DATASETS, SEEDS, DEFAULT_OUT / "trees", list(METHODS))
    args = parser.parse_args(argv)
    grid = run_grid(args, run_cell, "cells", METHODS, logger)
    table = summary(grid.every)
    lines = results_lines(
        f"# Tree peers, DI >= {DELTA:g} (means over seeds)", "trees.py", argv, grid,
        "Seeded 70/30 stratified splits (benchmarks.papers.peers.prepare), Adult a seeded 20,000-row sample, "
        "the sensitive attribute not among the inputs; DI = min ratio of the groups' positive rates of hard "
        "labels; 'needs s': the method reads the sensitive attribute to predict. Fit seconds with "
        f"{args.threads} thread(s) per method (BLAS, OpenMP, torch; LightGBM n_jobs=1) on a shared 2-core "
        "machine.", table)
    lines += skipped_lines(grid.runs) + [SEE_ALSO, ""]
    write_results(grid, "trees", lines, plot(table, grid.out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
