"""Compare training methods over hyper-parameter grids, seeds and splits (one tidy table).

:func:`compare` trains every method for every value of its grid, every seed and every split, and
evaluates each model with :func:`fairopt.evaluate` on the training and held-out parts. Runs go
through joblib (``n_jobs``, any backend: ``with joblib.parallel_config(backend="dask"): ...``);
each seeds torch with its training seed (:func:`~fairopt.experiments.sweeps.seeded`), so its
result does not depend on ``n_jobs``, the backend or the finishing order.

Resuming (``results_path``): each run's rows are appended to a CSV with a ``run_key``
(:func:`~fairopt.experiments.sweeps.run_key`: method, value, seed, fold, split settings and a fingerprint of
the data's values) as soon as it finishes; a later call with the same file trains only the missing runs and
reads the table back in grid order, equal to that of an uninterrupted sweep. The key does not cover method
options: use a new file when those change.

The table: one row per (method, value, seed, fold, split) with the :data:`ID_COLUMNS`, ``n``, the
task's performance, the exact fairness measures of :func:`fairopt.evaluate` (FaUCI metrics for a
binary task), ``degenerate``, ``near_constant`` (binary: :func:`solvers.outcome.near_constant` on the
part's rows, 1.0 or 0.0; such a point meets a rate bound by predicting one class), the ``extra_metrics``,
the run's own bounded measure (``measure``, ``sense``, ``realised``: :func:`fairopt.evaluation.realised_measures` of its
constraints or penalties, the one closest to failing when several, named as
:func:`fairopt.status.compared_label` names it, ``disparate_impact[race, each vs rest]`` where a constraint compares
each group with the rest of the rows; ``realised_pairwise``: where such a constraint
compares each group of an attribute of more than two groups with the rest of the rows, the same measure over every
pair of groups, which ``di_ratio[f]`` and the four-fifths rule read, else NaN), ``violation`` (of the
method's own constraints), ``time`` (training seconds; the first fit of a process also pays one-off start-up,
loading torch's kernels and the engine's modules, up to a few seconds: compare times of later runs, or run the
first configuration twice) and ``status``.
"""

from __future__ import annotations

import logging
import math
import os
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Sequence

import numpy as np
import pandas as pd
import torch

from fairopt._validation import check_seeds
from fairopt.evaluation import RealisedMeasure, evaluate, realised_measures
from fairopt.evaluation_fauci import resolve_combined
from fairopt.experiments.methods import PENALTY_HYPERPARAMETERS, Fitted, Method
from fairopt.experiments.sweeps import (KEY_COLUMN, ResultStore, check_n_jobs, check_threads, data_fingerprint, execute,
                                        run_key, seeded)
from solvers.outcome import outputs_near_constant

__all__ = ["compare", "split_data", "realised_vs_requested", "ID_COLUMNS", "PERFORMANCE_COLUMNS"]

logger = logging.getLogger(__name__)

#: Identifier columns of :func:`compare`'s table, in order.
ID_COLUMNS = ("method", "hyperparameter", "value", "seed", "fold", "split")
#: Text columns of the table (read back as text from a results CSV).
TEXT_COLUMNS = ("method", "hyperparameter", "split", "measure", "sense", "status")
#: The columns of a run's bounded measure (:func:`_bounded_measure`), before ``violation``.
MEASURE_COLUMNS = ("measure", "sense", "realised", "realised_pairwise")
#: Performance columns per task.
PERFORMANCE_COLUMNS = {"binary": ("accuracy", "rps"), "regression": ("r2", "mse"), "poisson": ("deviance", "rps")}


def _fold_indices(strata: np.ndarray, folds: int, seed: int) -> list[np.ndarray]:
    """Stratified k-fold test indices: each stratum's rows, shuffled by ``seed``, dealt round-robin."""
    rng = np.random.default_rng(seed)
    assignment = np.empty(len(strata), dtype=np.int64)
    offset = 0
    for value in np.unique(strata):
        rows = rng.permutation(np.flatnonzero(strata == value))
        assignment[rows] = (np.arange(rows.size) + offset) % folds
        offset += rows.size
    return [np.flatnonzero(assignment == k) for k in range(folds)]


def _refit_parts(data: Any, train_idx: np.ndarray, test_idx: np.ndarray) -> tuple[Any, Any]:
    """Rows as two FairData with the preprocessor re-fitted on the training rows only."""
    train = data.subset(torch.from_numpy(train_idx))
    test = data.subset(torch.from_numpy(test_idx))
    preprocessor = getattr(data, "preprocessor", None)
    if preprocessor is None or train.frame is None:
        logger.info("split_data: no raw frame or preprocessor; X is subset without re-fitting")
        return train, test
    fitted = preprocessor.clone().fit(train.frame)
    return train.with_preprocessor(fitted), test.with_preprocessor(fitted)


def split_data(data: Any, folds: int = 1, test_size: float = 0.2, seed: int = 0) -> list[tuple[int, Any, Any]]:
    """``(fold, train, test)`` parts of ``data`` (a FairData), stratified and leak-free.

    ``folds=1``: :meth:`FairData.split`; ``folds=k > 1``: stratified k-fold cross-validation with the
    strata of :meth:`FairData.split`. The preprocessor is re-fitted on each training part, so nothing
    of the held-out rows leaks into ``X``.
    """
    if isinstance(folds, bool) or not isinstance(folds, int) or folds < 1:
        raise ValueError(f"folds: expected a positive integer, got {folds!r}")
    if folds == 1:
        return [(0, *data.split(test_size=test_size, seed=seed))]
    if folds > len(data):
        raise ValueError(f"folds: {folds} folds for {len(data)} rows")
    # the strata FairData.split uses (target x cell, or coarser where a stratum is tiny)
    strata = data.split_strata()
    all_rows = np.arange(len(data))
    return [(k, *_refit_parts(data, np.setdiff1d(all_rows, test_idx), test_idx))
            for k, test_idx in enumerate(_fold_indices(strata, folds, seed))]


def _check_methods(methods: Any) -> list[Method]:
    methods = [methods] if isinstance(methods, Method) else list(methods)
    if not methods:
        raise ValueError("methods: expected at least one method")
    names = []
    for m in methods:
        if not isinstance(m, Method):
            raise ValueError(f"methods: {m!r} does not implement the Method protocol (name, hyperparameter, fit)")
        names.append(m.name)
    duplicates = sorted({n for n in names if names.count(n) > 1})
    if duplicates:
        raise ValueError(f"methods: names must be unique, {duplicates} repeat (pass name=...)")
    return methods


def _grid_values(grid: Mapping[str, Sequence[float]] | None, methods: list[Method]) -> dict[str, list]:
    grid = dict(grid or {})
    unknown = sorted(set(grid) - {m.name for m in methods})
    if unknown:
        raise ValueError(f"grid: no method named {unknown}; methods: {[m.name for m in methods]}")
    values = {}
    for m in methods:
        vals = grid.get(m.name)
        if vals is None:
            values[m.name] = [None]
            continue
        if isinstance(vals, str):
            raise ValueError(f"grid[{m.name!r}]: expected a list of numbers, got the text {vals!r}")
        vals = list(vals) if not isinstance(vals, (int, float)) else [vals]
        for v in vals:
            if v is not None and (isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v)):
                raise ValueError(f"grid[{m.name!r}]: expected finite numbers, got {v!r}")
        if not vals:
            raise ValueError(f"grid[{m.name!r}]: is empty")
        check = getattr(m, "check_value", None)  # an unreachable bound fails here, before any run trains
        for v in vals if callable(check) else ():
            try:
                check(v)
            except ValueError as exc:
                raise ValueError(f"grid[{m.name!r}]: value {v!r}: {exc}") from None
        values[m.name] = vals
    return values


def _scalar_metrics(results: Mapping[str, Any]) -> dict[str, float]:
    """The scalar entries of an evaluate() dict (``degenerate`` as 1.0 or 0.0, total ``violation``)."""
    return {k: float(v) if isinstance(v, bool) else v for k, v in results.items()
            if not isinstance(v, (list, tuple, Mapping)) and not k.endswith(".violation")}


def _near_constant(out: Any, part: Any) -> float:
    """1.0 when a binary classifier's hard predictions on ``part`` are nearly constant
    (:func:`solvers.outcome.near_constant`: accuracy not above the majority rate by two standard errors, or
    the rarer predicted class on under 1% of the rows), else 0.0; NaN for other tasks. Such a point meets
    a rate bound by predicting one class, and its ``violation`` (in the rows' units) reads small."""
    if getattr(part, "task", None) != "binary":
        return float("nan")
    reasons, _ = outputs_near_constant(torch.as_tensor(out).detach().cpu(), torch.as_tensor(part.y).detach().cpu())
    return float(bool(reasons))


def _bounded_measure(measures: Sequence[RealisedMeasure]) -> dict[str, Any]:
    """The ``measure``, ``sense`` and ``realised`` columns of one run on one part.

    Several measures: names joined by " & " and the value closest to failing (smallest for lower
    bounds, largest for upper; NaN for mixed senses, or where one is undefined: a ratio of rates that
    are all 0). None: no name and NaN.
    """
    if not measures:
        return {"measure": None, "sense": None, "realised": np.nan}
    senses = {m.sense for m in measures}
    values = [m.value for m in measures]
    if len(senses) > 1 or any(math.isnan(v) for v in values):
        sense, realised = ("mixed" if len(senses) > 1 else senses.pop()), np.nan
    else:
        sense = senses.pop()
        realised = min(values) if sense == "lower" else max(values)
    return {"measure": " & ".join(m.measure for m in measures), "sense": sense, "realised": float(realised)}


def _pairwise(out: Any, part: Any, measured: Sequence[Any], sense: str | None) -> float:
    """The measure over every pair of groups of the run's constraints that compare each group with the rest
    (:meth:`~fairopt.constraints.rates.GroupRateConstraint.pairwise_realised`), the one closest to failing; NaN
    where none does (their ``realised`` is the pairwise measure already)."""
    values = []
    for c in measured:
        pairwise = getattr(c, "pairwise_realised", None)
        value = pairwise(out, part) if callable(pairwise) else None
        if value is not None and math.isfinite(value):
            values.append(value)
    if not values or sense not in ("lower", "upper"):
        return float("nan")
    return float(min(values) if sense == "lower" else max(values))


def _rows_for(method: Method, value: Any, seed: int, fold: int, fitted: Fitted, parts: dict, threshold: float,
              extra_metrics: Mapping[str, Callable], fauci_combined: Any = None) -> list[dict]:
    """The table rows of one fitted run on each part. With a decision ``threshold`` ``t`` (binary task) the
    bounds are measured on the decisions ``out > t`` too: the constraints' rows, ``violation`` and ``realised``
    on ``out - t`` (the constraints' own threshold is 0), as accuracy and ``di_ratio`` are."""
    rows = []
    for split, part in parts.items():
        out = fitted.outputs(part)
        model = lambda X, out=out: out  # noqa: E731 - the part's outputs, computed once
        metrics = _scalar_metrics(evaluate(model, part, constraints=fitted.constraints, threshold=threshold,
                                           fauci_combined=fauci_combined))
        decided = out - threshold if threshold and getattr(part, "task", None) == "binary" else out
        if decided is not out:
            at_threshold = _scalar_metrics(evaluate(lambda X, d=decided: d, part, constraints=fitted.constraints))
            metrics.update({key: value for key, value in at_threshold.items()
                            if key == "violation" or key.endswith(".violation")})
        metrics.update({name: float(fn(model, part)) for name, fn in extra_metrics.items()})
        bounded = _bounded_measure(realised_measures(decided, part, fitted.measured_objects))
        bounded["realised_pairwise"] = _pairwise(decided, part, fitted.measured_objects, bounded["sense"])
        metrics["near_constant"] = _near_constant(out, part)
        rows.append({"method": method.name, "hyperparameter": method.hyperparameter,
                     "value": np.nan if value is None else float(value), "seed": seed, "fold": fold,
                     "split": split, **metrics, **bounded, "violation": metrics.get("violation", np.nan),
                     "time": fitted.seconds, "status": fitted.status})
    return rows


def compare(
    methods: Method | Sequence[Method],
    data: Any,
    grid: Mapping[str, Sequence[float]] | None = None,
    seeds: Sequence[int] = (0,),
    folds: int = 1,
    *,
    test_size: float = 0.2,
    split_seed: int = 0,
    threshold: float = 0.0,
    histories: dict | None = None,
    extra_metrics: Mapping[str, Callable[[Callable, Any], float]] | None = None,
    n_jobs: int | None = 1,
    results_path: str | os.PathLike | None = None,
    torch_threads: int | None = None,
    fauci_combined: Any = None,
) -> pd.DataFrame:
    """Train and evaluate every method x value x seed x fold; return a tidy table.

    Parameters
    ----------
    methods : Method or sequence of Method
        Objects of the :class:`~fairopt.experiments.Method` protocol, with unique names.
    data : FairData
        All rows; split by :func:`split_data`.
    grid : mapping method name -> sequence of values, optional
        Each method's hyper-parameter values (bounds or weights); a method not in the grid trains
        once with ``value=None``. Values a method's ``check_value`` rejects (an unreachable bound)
        are a ValueError before any run trains.
    seeds : sequence of int, default (0,)
        Training seeds (model initialisation, batch order).
    folds : int, default 1
        1: one stratified train/test split (``test_size``); k > 1: k-fold cross-validation.
    test_size : float, default 0.2
    split_seed : int, default 0
        Seed of the split(s), shared by all methods and training seeds.
    threshold : float, default 0.0
        Decision threshold on the output for the hard predictions that are evaluated (accuracy, the
        fairness measures, the bounded measure and ``violation`` on ``out > threshold``). Training is
        not moved: the methods' constraints bound the decisions at their own threshold 0, so a run that
        meets its bound there can miss it here.
    histories : dict, optional
        Filled with ``(method, value, seed, fold) -> History`` for the runs trained in this call.
    extra_metrics : mapping name -> callable(model, part) -> float, optional
        Further columns; ``model(part.X)`` returns the part's outputs, computed once.
    n_jobs : int or None, default 1
        Runs trained at the same time through :class:`joblib.Parallel` (``-1``: one per CPU). With
        the default loky backend ``methods``, ``data`` and ``extra_metrics`` must be picklable by
        cloudpickle.
    results_path : str or os.PathLike, optional
        A CSV that makes the sweep resumable (module docstring).
    torch_threads : int, optional
        ``torch.set_num_threads`` inside each run; set it (e.g. 1) for bit-identical tables
        whatever ``n_jobs`` (thread counts change the last bits of reductions).
    fauci_combined : None, True, list of names or list of lists of names
        Binary task: also the FaUCI metrics of these combined attributes (:func:`fairopt.evaluate`);
        not part of a run's key.

    Returns
    -------
    pandas.DataFrame
        One row per (method, value, seed, fold, split); columns in the module docstring.
    """
    methods = _check_methods(methods)
    values = _grid_values(grid, methods)
    extra_metrics = dict(extra_metrics or {})
    if not all(callable(fn) for fn in extra_metrics.values()):
        raise ValueError(f"extra_metrics: expected callables (model, data) -> float, got {extra_metrics!r}")
    seeds = list(check_seeds([seeds] if isinstance(seeds, int) else seeds))
    n_jobs, torch_threads = check_n_jobs(n_jobs), check_threads(torch_threads)
    if resolve_combined(fauci_combined, list(getattr(data, "sensitive_kinds", None) or {})) and data.task != "binary":
        raise ValueError(f"fauci_combined: the FaUCI metrics need a binary classifier, the task is {data.task!r}")
    store = (ResultStore(results_path, rows_per_run=2, text_columns=TEXT_COLUMNS, check_numbers=True)
             if results_path is not None else None)
    settings = {"folds": folds, "split_seed": split_seed, "test_size": test_size, "threshold": threshold,
                "data": data_fingerprint(data) if store is not None else None}
    runs = _plan(methods, values, seeds, split_data(data, folds, test_size, split_seed), settings)
    options = (threshold, extra_metrics, torch_threads, fauci_combined)
    return _ordered_columns(_sweep(runs, store, options, n_jobs, histories))


def _sweep(runs: list[_Run], store: ResultStore | None, options: tuple, n_jobs: int | None,
           histories: dict | None) -> pd.DataFrame:
    """Train the runs not already in ``store`` and return every run's rows (read back from ``store``)."""
    finished = store.load() if store is not None else {}
    todo = list({run.key: run for run in runs if run.key not in finished}.values())  # a repeated seed runs once
    if finished:
        logger.info("compare: %d of %d runs already in %s, skipped", len(runs) - len(todo), len(runs), store.path)
    rows_of: dict[str, list[dict]] = {}

    def collect(outcome: _Outcome) -> None:
        rows_of[outcome.key] = outcome.rows
        if store is not None:
            store.append(outcome.key, outcome.rows)
        if histories is not None:
            histories[outcome.ids] = outcome.history

    execute(_execute_run, [(run, *options) for run in todo], n_jobs, collect)
    if store is None:
        return pd.DataFrame([row for run in runs for row in rows_of[run.key]])
    saved = store.load()  # every row read back from the file: a resumed sweep returns what an uninterrupted one does
    return pd.concat([saved[run.key] for run in runs], ignore_index=True).drop(columns=KEY_COLUMN)


@dataclass
class _Run:
    """One run of a sweep: a method, its value, a training seed and a fold's parts."""

    method: Method
    value: float | None
    seed: int
    fold: int
    parts: dict
    key: str


def _plan(methods: list[Method], values: dict[str, list], seeds: list, splits: list, settings: dict) -> list[_Run]:
    """The runs of a sweep in table order: fold, method, value, seed."""
    return [_Run(method, value, int(seed), fold, {"train": train, "test": test},
                 run_key(method.name, method.hyperparameter, value, int(seed), fold, **settings))
            for fold, train, test in splits
            for method in methods for value in values[method.name] for seed in seeds]


@dataclass
class _Outcome:
    """What a run sends back: its key, its table rows and its training history."""

    key: str
    ids: tuple
    rows: list[dict]
    history: Any


def _execute_run(run: _Run, threshold: float, extra_metrics: Mapping[str, Callable],
                 torch_threads: int | None, fauci_combined: Any = None) -> _Outcome:
    """Train and evaluate one run (in a joblib worker or in-process), torch seeded by its seed."""
    with seeded(run.seed, torch_threads):
        fitted = run.method.fit(run.parts["train"], value=run.value, seed=run.seed)
        rows = _rows_for(run.method, run.value, run.seed, run.fold, fitted, run.parts, threshold, extra_metrics,
                         fauci_combined)
    logger.info("%s %s=%s seed %d fold %d: %.1fs (%s)", run.method.name, run.method.hyperparameter,
                run.value, run.seed, run.fold, fitted.seconds, fitted.status)
    return _Outcome(run.key, (run.method.name, run.value, run.seed, run.fold), rows, fitted.history)


def _ordered_columns(table: pd.DataFrame) -> pd.DataFrame:
    """Identifiers first, then the measures, then ``violation``, ``time``, ``status``."""
    leading = list(ID_COLUMNS)
    trailing = [c for c in (*MEASURE_COLUMNS, "violation", "time", "status") if c in table.columns]
    middle = [c for c in table.columns if c not in leading and c not in trailing]
    return table[leading + middle + trailing]


_RATIO_PREFIXES = ("di_ratio", "equal_impact", "ei_ratio")


#: How far a run's realised measure may fall short of its requested bound and still meet it
#: (:func:`realised_vs_requested`, the trade-off plot's crossed-out points).
BOUND_TOL = 0.005


def bound_shortfall(value: Any, realised: Any, sense: Any) -> np.ndarray:
    """How far each run's realised measure falls short of its requested bound ``value``: ``value - realised``
    where ``sense`` is "lower" (``realised >= value`` asked), ``realised - value`` otherwise; NaN where the
    measure is undefined (a constant classifier's 0/0 ratio). ``sense`` is one string or one per run."""
    value, realised = np.asarray(value, dtype=float), np.asarray(realised, dtype=float)
    return np.where(np.asarray(sense) == "lower", value - realised, realised - value)


def meets_bound(shortfall: np.ndarray, tol: float = BOUND_TOL) -> np.ndarray:
    """Whether each :func:`bound_shortfall` is at most ``tol``; an undefined measure (NaN) meets no bound."""
    return np.isfinite(shortfall) & (shortfall <= tol)


def _trend(steps: np.ndarray, tol: float) -> float:
    """The sign most steps larger than ``tol`` share (the sign of the sum on a tie)."""
    votes = float(np.sign(steps[np.abs(steps) > tol]).sum())
    return float(np.sign(votes)) if votes != 0 else float(np.sign(steps.sum()))


def realised_vs_requested(
    results: pd.DataFrame,
    measure: str | None = None,
    split: str = "train",
    *,
    tol: float = BOUND_TOL,
    sense: str | None = None,
) -> pd.DataFrame:
    """How each method's realised measure follows its swept value (one row per method).

    By default each method is read on its own bounded measure (``realised`` of :func:`compare`)
    with its bound's ``sense``; ``measure=<column>`` reads that column for every method instead.
    Per method the trend is read on the measure averaged over seeds and folds per value, values sorted,
    ``d_k`` the changes between adjacent values; the other figures on the single runs (each seed and
    fold), so that one run that misses its bound shows. Columns: ``method``, ``hyperparameter``,
    ``measure``, ``sense``, ``n_values``, ``runs``; ``realised_min``, ``realised_max``, over the runs;
    ``undefined``, runs whose measure is NaN (a ratio of rates that are all 0: a constant classifier);
    ``reversals``, the steps with ``s d_k < -tol`` against the trend ``s`` (sign of the majority of
    steps larger than ``tol``); for bounds (not :data:`PENALTY_HYPERPARAMETERS`) ``runs_met``, the runs
    that meet their value within ``tol`` (``measure >= value - tol`` for a lower bound, ``<= value + tol``
    otherwise; an undefined measure meets nothing), ``bounds_met``, the values every run of which meets
    it, and ``worst_gap``, the largest shortfall of a run.

    Parameters
    ----------
    results : DataFrame of :func:`compare`
    measure : str, optional
        A column to read for every method; default: each method's own ``realised``.
    split : str, default "train"
    tol : float, default 0.005
    sense : {"lower", "upper"}, optional
        Whether the value bounds the measure from below or above. Default: the ``sense`` column,
        or with ``measure`` lower for ratio columns (``di_ratio...``), upper otherwise.
    """
    own = measure is None
    column = "realised" if own else measure
    needed = ["realised", "measure", "sense"] if own else [measure]
    missing = [c for c in needed if c not in results.columns]
    if missing:
        raise ValueError(f"measure: the results have no column(s) {missing}"
                         + (" (a table of compare() has them; pass measure=<column> for another table)" if own else ""))
    if sense is not None and sense not in ("lower", "upper"):
        raise ValueError(f"sense: expected 'lower' or 'upper', got {sense!r}")
    rows = results[(results["split"] == split) & np.isfinite(results["value"].astype(float))]
    out = []
    for name, part in rows.groupby("method", sort=False):
        if own:
            labels = part["measure"].dropna().unique().tolist()
            senses = part["sense"].dropna().unique().tolist()
            if not labels:
                continue
            label = " | ".join(str(x) for x in labels)
            side = sense or (senses[0] if len(senses) == 1 and senses[0] in ("lower", "upper") else None)
        else:
            label = measure
            side = sense or ("lower" if measure.startswith(_RATIO_PREFIXES) else "upper")
        means = part.groupby("value")[column].mean().sort_index()
        steps = np.diff(means.to_numpy(dtype=float))
        direction = _trend(steps, tol)
        hyper = part["hyperparameter"].iloc[0]
        realised = part[column].to_numpy(dtype=float)
        defined = realised[np.isfinite(realised)]
        row = {"method": name, "hyperparameter": hyper, "measure": label, "sense": side, "n_values": len(means),
               "runs": len(part), "realised_min": float(defined.min()) if defined.size else np.nan,
               "realised_max": float(defined.max()) if defined.size else np.nan,
               "undefined": int(realised.size - defined.size), "reversals": int(np.sum(direction * steps < -tol)),
               "runs_met": np.nan, "bounds_met": np.nan, "worst_gap": np.nan}
        if hyper not in PENALTY_HYPERPARAMETERS and side is not None:
            requested = part["value"].to_numpy(dtype=float)
            gap = bound_shortfall(requested, realised, side)
            met = meets_bound(gap, tol)
            row["runs_met"] = int(np.sum(met))
            row["bounds_met"] = int(pd.Series(met).groupby(requested).all().sum())
            row["worst_gap"] = float(np.max(gap[np.isfinite(gap)])) if np.isfinite(gap).any() else np.nan
        out.append(row)
    return pd.DataFrame(out)
