"""The cells of ``python -m benchmarks.papers gedi-tables``: one model on one fold, one preprocessing projection.

A :class:`ModelCell` ``(task, model, fold)`` trains one of the [GeDI] sec. 5 models
(RF, GB, NN, unconstrained or with Moving Targets) on one training fold and measures it on
both splits; a :class:`PreprocessingCell` ``(task, form, degree)`` projects a task's targets
under one GeDI constraint ([GeDI] Fig. 3) and trains a model on them. Each returns one
record (a flat dict) and is cached by :func:`run_cell` as one JSON file
(:mod:`benchmarks.papers.cells`).

Measures (``x`` the protected attribute, standardised when continuous, 0/1 when binary):

* score: accuracy of hard labels (Adult) or ``R^2`` (Communities) against the true ``y``;
* relative GeDI ("GeDI %", [GeDI] sec. 5): ``GeDI(x, yhat; V^k) / GeDI(x, y; V^1)`` on the
  same split (:func:`fairopt.measures.gedi.gedi`), ``k`` the task's kernel order;
* relative binned DIDI (DIDI-n %, [GeDI] sec. 5 and Fig. 3):
  ``DIDI(bins_n(x), yhat) / DIDI(bins_n(x), y)`` with ``n`` quantile bins
  (:func:`fairopt.measures.gedi.binned_didi`; the classification DIDI for Adult).
"""

from __future__ import annotations

import logging
import time
import warnings
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np
import torch

from benchmarks.papers.cells import write_cell
from benchmarks.papers.gedi_tables_data import TASKS, Settings, Task, protocol_tag
from fairopt.measures import accuracy, r2
from fairopt.measures.gedi import binned_didi, gedi

__all__ = ["ModelCell", "PreprocessingCell", "run_cell", "task_folds", "make_learner", "relative_gedi",
           "relative_didi", "load_task"]

logger = logging.getLogger(__name__)


# ----------------------------------------------------------------------------- data
@lru_cache(maxsize=4)
def load_task(name: str, data_dir: str | None, adult_rows: int | None, include_sensitive: bool) -> Any:
    """The FairData of task ``name`` (Adult subsampled to ``adult_rows`` rows, seed 0)."""
    from fairopt import datasets

    task = TASKS[name]
    data = datasets.load(task.dataset, data_dir=data_dir, sensitive=[task.sensitive],
                         include_sensitive=include_sensitive)
    if task.dataset == "adult" and adult_rows is not None and adult_rows < len(data):
        rows = np.sort(np.random.default_rng(0).choice(len(data), size=adult_rows, replace=False))
        data = data.subset(torch.from_numpy(rows))
    return data


@lru_cache(maxsize=4)
def task_folds(name: str, settings: Settings, data_dir: str | None) -> tuple[Any, list[tuple[int, Any, Any]]]:
    """``(data, [(fold, train, val), ...])``: the ``settings.folds``-fold split shuffled with
    ``settings.seed`` (:func:`fairopt.experiments.compare.split_data`: stratified, the
    preprocessor re-fitted on each training part)."""
    from fairopt.experiments.compare import split_data

    data = load_task(name, data_dir, settings.adult_rows, settings.include_sensitive)
    return data, split_data(data, folds=settings.folds, seed=settings.seed)


# ----------------------------------------------------------------------------- learners and measures
def make_learner(kind: str, task: Task, settings: Settings) -> Any:
    """A fresh learner with the paper's settings ([GeDI] App. B.2): scikit-learn's random
    forest / gradient boosting with default parameters, or the paper's ReLU MLP (Adam,
    batch 128, ``settings.mlp_epochs`` epochs per fit, continuing from its weights at every
    refit with ``settings.mlp_warm_start``) through :class:`fairopt.learners.TorchLearner`."""
    from sklearn.ensemble import (GradientBoostingClassifier, GradientBoostingRegressor, RandomForestClassifier,
                                  RandomForestRegressor)

    from fairopt import models
    from fairopt.learners import TorchLearner

    if kind == "rf":
        return (RandomForestClassifier if task.classification else RandomForestRegressor)(random_state=settings.seed)
    if kind == "gb":
        cls = GradientBoostingClassifier if task.classification else GradientBoostingRegressor
        return cls(random_state=settings.seed)
    if kind != "nn":
        raise ValueError(f"kind: expected 'rf', 'gb' or 'nn', got {kind!r}")
    hidden = task.hidden

    def factory(p: int) -> torch.nn.Module:
        return models.mlp(p, hidden=hidden, activation="relu")

    return TorchLearner(factory, task="classification" if task.classification else "regression",
                        epochs=settings.mlp_epochs, batch_size=128, seed=settings.seed,
                        warm_start=settings.mlp_warm_start)


def _arrays(split: Any, task: Task) -> tuple[np.ndarray, np.ndarray, bool]:
    """``(x, y, binary)``: the protected attribute and the target of a split as float64."""
    x = split.sensitive[task.sensitive].numpy().astype(np.float64)
    binary = split.sensitive_kinds[task.sensitive] == "binary"
    return x, split.y.numpy().astype(np.float64), binary


def relative_gedi(x: np.ndarray, values: np.ndarray, y: np.ndarray, degree: int, binary: bool) -> float:
    """``GeDI(x, values; V^degree) / GeDI(x, y; V^1)`` ([GeDI] sec. 5 "GeDI %"); ``x`` is
    standardised unless ``binary`` (then GeDI(V^1) is the DIDI, [GeDI] App. A.4)."""
    return gedi(x, values, degree, standardize=not binary) / gedi(x, y, 1, standardize=not binary)


def relative_didi(x: np.ndarray, values: np.ndarray, y: np.ndarray, bins: int, classification: bool) -> float:
    """``DIDI-bins(values) / DIDI-bins(y)`` on the quantile bins of ``x`` ([GeDI] Fig. 3)."""
    return float(binned_didi(values, x, bins, classification)) / float(binned_didi(y, x, bins, classification))


def _score(y: np.ndarray, pred: np.ndarray, classification: bool) -> float:
    return float(accuracy(y, pred)) if classification else float(r2(y, pred))


def _measure(pred: np.ndarray, split: Any, task: Task, prefix: str, bins: tuple[int, ...] = ()) -> dict:
    """Score, relative GeDI (and binned DIDI for a continuous attribute) of ``pred`` on a split."""
    x, y, binary = _arrays(split, task)
    out = {f"{prefix}_score": _score(y, pred, task.classification),
           f"{prefix}_gedi": relative_gedi(x, pred, y, task.degree, binary)}
    if not binary:
        out.update({f"{prefix}_didi{b}": relative_didi(x, pred, y, b, task.classification) for b in bins})
    return out


def _predict(learner: Any, split: Any) -> np.ndarray:
    return np.asarray(learner.predict(split.X.numpy()), dtype=np.float64).reshape(-1)


def _target(split: Any, task: Task) -> np.ndarray:
    y = split.y.numpy()
    return y.astype(np.int64) if task.classification else y.astype(np.float64)


# ----------------------------------------------------------------------------- cells
@dataclass(frozen=True)
class ModelCell:
    """One model of [GeDI] Tables 4/5 (``"GB"``, ``"GB+MT"``, ``"NN+MT-Fine"``, ...) on one fold."""

    task: str
    model: str
    fold: int

    def filename(self, settings: Settings) -> str:
        return f"{self.task}__{self.model}__fold{self.fold}__{protocol_tag(settings)}.json"

    def run(self, settings: Settings, data_dir: str | None) -> dict:
        """Train on the fold's training part (timed: the whole fit, MT iterations included) and
        measure on both parts. A Moving Targets model is the learner after the LAST iteration,
        as in the authors' code (not :class:`solvers.MovingTargets`' best iterate)."""
        from fairopt.constraints.gedi import GeDI
        from solvers.moving_targets import MovingTargets

        task = TASKS[self.task]
        _, parts = task_folds(self.task, settings, data_dir)
        _, train, val = parts[self.fold]
        kind, _, variant = self.model.partition("+")
        learner = make_learner(kind.lower(), task, settings)
        record = {"task": self.task, "model": self.model, "fold": self.fold, "protocol": protocol_tag(settings),
                  "n_train": len(train), "n_val": len(val)}
        start = time.perf_counter()
        if not variant:
            learner.fit(train.X.numpy(), _target(train, task))
        else:
            constraint = GeDI(task.sensitive, task.degree, bound=settings.relative_bound, relative=True,
                              fine=task.variants[variant])
            engine = MovingTargets(iterations=settings.iterations, backend=settings.backend,
                                   time_limit=settings.time_limit, seed=settings.seed, warm_start=settings.warm_start)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # BoundWarning of the best iterate: the columns say it
                result = engine.fit(learner, train, constraints=[constraint])
            history = result.history
            record.update({
                "master_s": result.info["master_seconds"], "learner_s": result.info["learner_seconds"],
                "master_status": "/".join(sorted({str(history[t]["master_status"]) for t in range(1, len(history))})),
                "backend": str(history[-1]["master_backend"]),
                "targets_V": float(np.nanmax(history.column("V_targets")[1:])),
                "predictions_V": float(history[-1]["V_predictions"]),
            })
        record["time_s"] = time.perf_counter() - start
        for name, part in (("train", train), ("val", val)):
            record.update(_measure(_predict(learner, part), part, task, name))
        return record


@dataclass(frozen=True)
class PreprocessingCell:
    """[GeDI] Fig. 3: the targets of ``task`` projected under GeDI-``form`` of kernel order ``degree``."""

    task: str
    form: str  # "coarse" | "fine"
    degree: int

    def filename(self, settings: Settings) -> str:
        rows = "all" if settings.adult_rows is None else f"n{settings.adult_rows}"
        tag = (f"{rows}-s{settings.seed}-k{settings.folds}-b{settings.relative_bound:g}-"
               f"{settings.preprocessing_learner}{'' if settings.include_sensitive else '-nosens'}")
        return f"preprocessing__{self.task}__{self.form}__k{self.degree}__{tag}.json"

    def run(self, settings: Settings, data_dir: str | None) -> dict:
        """Project ALL rows' targets (the paper's preprocessing, no model) onto
        ``GeDI(x, z; V^degree) <= 0.2 GeDI(x, y; V^1)`` (coarse) or its fine form, closest in
        Hamming distance (Adult) or squared error (Communities); measure the projected
        targets, then train ``settings.preprocessing_learner`` on the projected targets of
        fold 0's training rows and measure it on both parts against the TRUE targets."""
        from fairopt.constraints.gedi import GeDI
        from solvers.projection import project_targets

        task = TASKS[self.task]
        data, parts = task_folds(self.task, settings, data_dir)
        constraint = GeDI(task.sensitive, self.degree, bound=settings.relative_bound, relative=True,
                          fine=self.form == "fine")
        constraint.setup(data)
        y = data.y.numpy().astype(np.float64)
        start = time.perf_counter()
        result = project_targets(y, encodings=[constraint.target_encoding(data)],
                                 loss="hamming" if task.classification else "squared", binary=task.classification,
                                 backend=settings.backend, time_limit=settings.time_limit, seed=settings.seed)
        seconds = time.perf_counter() - start
        z = result.z
        x, _, binary = _arrays(data, task)
        record = {"task": self.task, "form": self.form, "degree": self.degree, "n": len(data),
                  "status": result.status, "backend": result.backend, "projection_s": seconds,
                  "max_violation": result.max_violation, "targets_score": _score(y, z, task.classification),
                  "targets_gedi_k": relative_gedi(x, z, y, self.degree, binary),
                  "targets_gedi5": relative_gedi(x, z, y, 5, binary),
                  **{f"targets_didi{b}": relative_didi(x, z, y, b, task.classification) for b in settings.bins}}
        _, train, val = parts[0]
        learner = make_learner(settings.preprocessing_learner, task, settings)
        rows = data.frame.index.get_indexer(train.frame.index)  # the training rows' positions in data
        z_train = z[rows]
        learner.fit(train.X.numpy(), z_train.astype(np.int64) if task.classification else z_train)
        for name, part in (("train", train), ("val", val)):
            record.update(_measure(_predict(learner, part), part, task, f"model_{name}", settings.bins))
        return record


def run_cell(cell: ModelCell | PreprocessingCell, settings: Settings, data_dir: str | None,
             cells_dir: str | Path) -> dict:
    """Run ``cell`` on one thread and cache its record as ``cells_dir/<cell.filename>``.

    A cell that raises is logged and returned with ``status = "error"`` and the message,
    NOT cached, so a rerun retries it. Records carry ``cell_s`` (wall seconds of the cell)
    and ``cpu_s`` (CPU seconds of its process: on a shared machine the wall time also counts
    the waits for a core, the CPU time does not).
    """
    from threadpoolctl import threadpool_limits

    start, cpu = time.perf_counter(), time.process_time()
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        with threadpool_limits(1):
            record = cell.run(settings, data_dir)
    except Exception as exc:  # one failing cell must not end the grid
        logger.exception("cell %s failed", cell)
        first = str(exc).splitlines()[0][:300] if str(exc) else ""
        return {**vars(cell), "status": "error", "note": f"{type(exc).__name__}: {first}"}
    finally:
        torch.set_num_threads(threads)
    record.setdefault("status", "ok")
    record["cell_s"] = time.perf_counter() - start
    record["cpu_s"] = time.process_time() - cpu
    write_cell(Path(cells_dir) / cell.filename(settings), record)
    return record
