"""Moving Targets: constrained learning by alternating projection and fitting.

The algorithm of [MT] (Detassis, Lombardi, Milano, AAAI 2021) in the form used by the GeDI
experiments ([GeDI] App. B.3, eq 56-57)::

    pretrain: learner.fit(X, y);  p_0 = learner.predict(X)
    for t = 1..T:
        alpha_t = 1 / t                                               (harmonic schedule)
        z_t = argmin_{z in C}  L(z, p_{t-1}) + alpha_t L(z, y)        (master, eq 56)
        learner.fit(X, z_t);   p_t = learner.predict(X)               (learner, eq 57)

``C`` is the set of targets that meet every constraint's linear :meth:`Constraint.target_encoding`.
Classification: ``z`` binary, ``p`` hard labels, ``L`` the Hamming distance, a mixed-integer linear
master, with ``1 <= sum z <= n - 1`` so that the learner sees both classes. Regression: ``z`` real,
``L`` the mean squared error, a convex QP. :func:`solvers.projection.project_targets` solves the
masters (group rates of unweighted hard labels by the exact count search, else HiGHS/OSQP/Gurobi).

The learner is any object with ``fit(X, y)`` and ``predict(X)`` (or ``predict_proba``), trained in
place. With row weights (``data.weights``) the learner's fits, the constraints and the score that
picks the returned iteration are weighted; the master's distances stay unweighted, as they only
have to find feasible targets near the predictions. Hard labels ``l`` reach
:meth:`Constraint.exact` as the outputs ``2 l - 1``, so a threshold anywhere in ``(-1, 1)`` reads them.
"""

from __future__ import annotations

import copy
import inspect
import logging
import time
from typing import Any, Callable, Iterable, Sequence

import numpy as np
import torch

from solvers.history import COLUMN_C_PREDICTIONS, INFO_C_EXACT, FitResult, History
from solvers.outcome import BestIterate, warn_unmet
from solvers.problem import Constraint, ConstraintSet, LinearEncoding, row_violations, row_weights
from solvers.projection import BACKENDS, ProjectionResult, project_targets
from solvers.progress import check_progress, epoch_logs, progress
from solvers.validation import (as_float_array, check_choice, check_flag, check_seed, positive_float,
                                positive_int)
from solvers.problem import as_constraint_set

__all__ = ["MovingTargets", "MT_TASKS"]

logger = logging.getLogger(__name__)

#: Accepted values of ``task``.
MT_TASKS: tuple[str, ...] = ("classification", "regression")
# data.task (the shared data contract) -> Moving Targets task
_DATA_TASKS = {"binary": "classification", "regression": "regression"}
CLASS_BALANCE = "class_balance"
# history keys that come from the master (NaN, or None for the text ones, at iteration 0)
_MASTER_FIELDS = ("alpha", "master_objective", "master_loss_predictions", "master_loss_targets", "master_status",
                  "master_solver_status", "master_gap", "master_backend", "master_seconds", "master_max_violation")
_MASTER_TEXT_FIELDS = ("master_status", "master_solver_status", "master_backend")


class MovingTargets:
    """Moving Targets engine ([MT]; [GeDI] App. B.3 eq 56-57).

    Parameters
    ----------
    iterations : int, default 10
        Number ``T >= 1`` of master/learner iterations after pretraining (none without constraint rows).
    backend : {"auto", "topk", "highs", "osqp", "gurobi"}, default "auto"
        Projection backend (:func:`solvers.projection.project_targets`).
    time_limit : float, default 60.0
        Seconds per master solve ([GeDI]: Gurobi ``WorkLimit = 60``); a stopped master returns its
        best feasible targets (``master_status = "time_limit"``).
    seed : int, default 0
        Seed of the master solver, and ``random_state`` of a scikit-learn learner that has None.
    verbose : int or "auto", default "auto"
        ``"auto"``: a progress bar once training has run a few seconds; 0 silent; 1 the bar from
        the start and one INFO log line per iteration (:mod:`solvers.progress`).
    mip_gap : float, default 1e-4
        Relative gap at which a classification master is optimal (0 proves optimality).
    feasibility_tol : float, default 1e-9
        Total violation below which the final predictions count as feasible (``converged``).
    warm_start : bool, default False
        Start every master from the previous one's solution, a feasible incumbent since the
        constraints do not change. The optimum is the same, but among tied optima (frequent with
        the Hamming loss) another may be returned.
    callbacks : sequence of callables
        ``cb(engine, record) -> bool | None`` after every iteration; True stops training.

    Attributes
    ----------
    targets_ : numpy.ndarray
        The last master's targets ``z_T`` (after :meth:`fit`).

    History
    -------
    One record per iteration ``t`` (0 = pretraining, where master fields are NaN/None):

    * ``iteration``, ``alpha`` (``1/t``), ``master_objective`` (``master_loss_predictions
      + alpha * master_loss_targets``, i.e. ``L(z_t, p_{t-1}) + alpha L(z_t, y)``), ``master_status``
      ("optimal", "time_limit", "suboptimal"), ``master_solver_status``, ``master_gap``,
      ``master_backend``, ``master_seconds``, ``master_max_violation``;
    * ``targets_change``: mean ``|z_t - z_{t-1}|`` with ``z_0 = y``;
    * ``c_targets``/``V_targets`` and ``c_predictions``/``V_predictions``: exact rows and total
      violation on ``z_t`` (``y`` at ``t = 0``) and on ``p_t``;
    * ``score``: training accuracy or ``R^2`` of ``p_t``; ``learner_seconds``; ``seconds``.
    """

    def __init__(
        self,
        iterations: int = 10,
        backend: str = "auto",
        time_limit: float = 60.0,
        seed: int = 0,
        verbose: int | str = "auto",
        *,
        mip_gap: float = 1e-4,
        feasibility_tol: float = 1e-9,
        warm_start: bool = False,
        callbacks: Sequence[Callable] = (),
    ) -> None:
        self.iterations = iterations
        self.backend = backend
        self.time_limit = time_limit
        self.seed = seed
        self.verbose = verbose
        self.mip_gap = mip_gap
        self.feasibility_tol = feasibility_tol
        self.warm_start = warm_start
        self.callbacks = tuple(callbacks)
        self._validate_options()

    def _validate_options(self) -> None:
        positive_int(self.iterations, "iterations")
        check_choice(self.backend, BACKENDS, "backend")
        positive_float(self.time_limit, "time_limit")
        positive_float(self.mip_gap, "mip_gap", allow_zero=True)
        positive_float(self.feasibility_tol, "feasibility_tol", allow_zero=True)
        check_flag(self.warm_start, "warm_start")
        check_seed(self.seed, allow_none=False, allow_negative=False)
        check_progress(self.verbose)
        if not all(callable(cb) for cb in self.callbacks):
            raise ValueError(f"callbacks: expected callables, got {self.callbacks!r}")

    # ------------------------------------------------------------------ public API
    def fit(
        self,
        learner: Any,
        data: Any,
        *,
        constraints: Constraint | Iterable[Constraint],
        task: str | None = None,
    ) -> FitResult:
        """Train ``learner`` in place on ``data`` with Moving Targets.

        Parameters
        ----------
        learner : object
            ``fit(X, y)`` and ``predict(X)`` or ``predict_proba`` (labels ``P(y = 1) > 0.5``); ``X``
            float32, targets int64 0/1 or float64; with row weights ``fit`` takes ``sample_weight``.
        data : Batch
            ``X`` (n, p), ``y`` (n,) and whatever the constraints read.
        constraints : Constraint or iterable of Constraint
            Each with a linear :meth:`target_encoding`; an empty list trains without fairness rows.
        task : {"classification", "regression"}, optional
            Default: from ``data.task`` ("binary" or "regression").

        Returns
        -------
        FitResult
            ``model``: a copy of ``learner`` after the best iteration (pretraining included) by
            :class:`solvers.outcome.BestIterate`, with a :class:`solvers.outcome.BoundWarning` if it
            violates a row; ``learner`` itself is left after the last. ``status``: "max_iterations"
            or "stopped_by_callback"; "converged" without constraint rows, where the pretrained learner is the
            fit (no master/learner iterations); ``info``: ``targets``, ``violation``, ``returned_iteration``,
            ``feasible``, ``unmet_rows``, ``row_names``, ``master_seconds``, ``learner_seconds``.

        Raises
        ------
        ValueError
            Invalid learner, data, task or targets; a constraint without target encoding.
        solvers.projection.ProjectionInfeasibleError
            A master has no feasible targets (the message names the constraints).
        RuntimeError
            A master solver failed (with its status).
        """
        _check_learner(learner)
        task = _resolve_task(task, data)
        classification = self._classification = task == "classification"
        X, y = _training_arrays(data, classification)
        weights = _training_weights(learner, data)
        cons = as_constraint_set(constraints)
        cons.setup(data)
        encodings = cons.target_encoding(data)
        if classification:
            encodings.append(_class_balance_encoding(len(y)))
        _seed_learner(learner, int(self.seed))

        history = History(row_names=cons.row_names)
        use_bar = self.verbose != 0
        # without constraint rows a master's targets are the learner's own predictions (the nearest targets that
        # keep both classes): refitting on them changes nothing worth the iterations, so pretraining is the fit
        steps: Iterable[int] = range(1, int(self.iterations) + 1) if cons.n_rows else range(0)
        steps = progress(steps, self.verbose, "Moving Targets", "it")
        start = time.perf_counter()
        predictions, learner_seconds = _fit_predict(learner, X, y, classification, weights)
        record = _iteration_record(0, None, None, y, predictions, learner_seconds, cons, data, classification,
                                   start, weights)
        history.append(record)
        tracker = BestIterate(cons.lower, cons.upper, self.feasibility_tol)
        tracker.offer_copy(lambda: copy.deepcopy(learner), -record["score"], record[COLUMN_C_PREDICTIONS], 0)

        targets, status, master = y, "max_iterations" if cons.n_rows else "converged", None
        for t in steps:
            master = self._master(learner, X, (predictions, y), encodings, t, master)
            previous, targets = targets, master.z
            predictions, learner_seconds = _fit_predict(learner, X, targets, classification, weights)
            record = _iteration_record(t, master, previous, y, predictions, learner_seconds, cons, data,
                                       classification, start, weights)
            history.append(record)
            tracker.offer_copy(lambda: copy.deepcopy(learner), -record["score"], record[COLUMN_C_PREDICTIONS], t)
            self._report(steps if use_bar else None, t, master, record)
            if any(cb(self, record) for cb in self.callbacks):
                status = "stopped_by_callback"
                break

        self.targets_ = targets
        return self._result(tracker, cons, history, status, task)

    def _master(self, learner: Any, X: np.ndarray, references: tuple[np.ndarray, np.ndarray], encodings: list,
                t: int, previous: ProjectionResult | None) -> ProjectionResult:
        """Iteration ``t``'s master: the targets nearest the learner's ``predictions`` and, with weight
        ``1 / t``, the true ``y`` (``references = (predictions, y)``) that meet every encoding."""
        classification = self._classification
        return project_targets(
            list(references), weights=[1.0, 1.0 / t], encodings=encodings,
            loss="hamming" if classification else "squared", binary=classification,
            backend=self.backend, time_limit=float(self.time_limit), mip_gap=float(self.mip_gap),
            seed=int(self.seed), initial=previous if self.warm_start else None,
            priority=_scores(learner, X) if classification else None,
        )

    def _report(self, bar: Any, t: int, master: ProjectionResult, record: dict) -> None:
        """The progress bar's figures and, with ``verbose=1``, one log line per iteration."""
        if bar is not None:
            bar.set_postfix(score=f"{record['score']:.4f}", V=f"{record['V_predictions']:.2e}", refresh=False)
        if epoch_logs(self.verbose):
            logger.info("MT iteration %d: master %s (%s, %.2f s) objective %.5g, V(z)=%.2e; learner score "
                        "%.4f, V(p)=%.2e", t, master.status, master.backend, master.seconds,
                        master.objective, record["V_targets"], record["score"], record["V_predictions"])

    def _result(self, tracker: BestIterate, cons: ConstraintSet, history: History, status: str,
                task: str) -> FitResult:
        """The best iterate as a :class:`FitResult` (warns naming any row it violates)."""
        best = tracker.best
        feasible = tracker.feasible(best.row_violations)
        unmet = warn_unmet("MovingTargets", best.c_exact, cons.lower, cons.upper, cons.row_names,
                           self.feasibility_tol, stacklevel=4)
        return FitResult(
            model=best.params, history=history, status=status, converged=bool(feasible),
            info={
                "targets": self.targets_, "violation": best.violation, "row_names": cons.row_names,
                INFO_C_EXACT: torch.as_tensor(best.c_exact, dtype=torch.float64).reshape(-1).tolist(),
                "returned_iteration": best.iteration, "feasible": bool(feasible), "unmet_rows": unmet,
                "task": task, "master_seconds": float(np.nansum(history.column("master_seconds"))),
                "learner_seconds": float(np.nansum(history.column("learner_seconds"))),
            },
        )


# --------------------------------------------------------------------------------------
# helpers
# --------------------------------------------------------------------------------------
def _iteration_record(t: int, master: ProjectionResult | None, previous: np.ndarray | None, y: np.ndarray,
                      predictions: np.ndarray, learner_seconds: float, cons: ConstraintSet, data: Any,
                      classification: bool, start: float, weights: np.ndarray | None = None) -> dict:
    """The history record of iteration ``t`` (keys in the :class:`MovingTargets` docstring)."""
    targets = y if master is None else master.z
    c_targets, v_targets = _constraint_values(cons, data, targets, classification)
    c_pred, v_pred = _constraint_values(cons, data, predictions, classification)
    nan = float("nan")
    if master is None:
        master_fields = {key: (None if key in _MASTER_TEXT_FIELDS else nan) for key in _MASTER_FIELDS}
    else:
        master_fields = {
            "alpha": 1.0 / t,
            "master_objective": master.objective,
            "master_loss_predictions": master.terms[0],
            "master_loss_targets": master.terms[1],
            "master_status": master.status,
            "master_solver_status": master.solver_status,
            "master_gap": master.gap,
            "master_backend": master.backend,
            "master_seconds": master.seconds,
            "master_max_violation": master.max_violation,
        }
    return {
        "iteration": t,
        **master_fields,
        "targets_change": nan if previous is None else float(np.mean(np.abs(targets - previous))),
        "c_targets": c_targets,
        "V_targets": v_targets,
        COLUMN_C_PREDICTIONS: c_pred,
        "V_predictions": v_pred,
        "score": _score(predictions, y, classification, weights),
        "learner_seconds": learner_seconds,
        "seconds": time.perf_counter() - start,
    }


def _check_learner(learner: Any) -> None:
    if not callable(getattr(learner, "fit", None)):
        raise ValueError(f"learner: expected an object with fit(X, y), got {type(learner).__name__}")
    if not (callable(getattr(learner, "predict", None)) or callable(getattr(learner, "predict_proba", None))):
        raise ValueError(f"learner: {type(learner).__name__} has neither predict(X) nor predict_proba(X)")


def _resolve_task(task: str | None, data: Any) -> str:
    """``task`` validated against (or inferred from) ``data.task``."""
    data_task = getattr(data, "task", None)
    implied = _DATA_TASKS.get(data_task) if isinstance(data_task, str) else None
    if task is None:
        if implied is None:
            raise ValueError(f"task: cannot infer it from data.task={data_task!r}; pass task='classification' "
                             "or task='regression'")
        return implied
    check_choice(task, MT_TASKS, "task")
    if isinstance(data_task, str) and implied != task:
        raise ValueError(f"task: {task!r} does not match data.task={data_task!r} (constraints read data.task)")
    return task


def _training_arrays(data: Any, classification: bool) -> tuple[np.ndarray, np.ndarray]:
    """``(X float32 (n, p), y float64 (n,))`` checked: no infinite value, ``y`` finite, matching lengths,
    0/1 labels. Missing inputs (NaN in ``X``) are the learner's to take or refuse (scikit-learn's
    histogram boosters route them; the others raise their own error)."""
    for attr in ("X", "y"):
        if not hasattr(data, attr):
            raise ValueError(f"data: expected a dataset with X and y, missing {attr!r}")
    X = as_float_array(data.X, "data.X").astype(np.float32)
    y = as_float_array(data.y, "data.y").reshape(-1)
    if X.ndim != 2 or X.shape[0] == 0:
        raise ValueError(f"data.X: expected a non-empty 2-D array (n, p), got shape {X.shape}")
    if y.shape[0] != X.shape[0]:
        raise ValueError(f"data.y: {y.shape[0]} values for {X.shape[0]} rows of data.X")
    if np.isinf(X).any() or not np.isfinite(y).all():
        raise ValueError("data: X contains infinite values or y NaN or infinite values")
    if classification:
        bad = (y != 0) & (y != 1)
        if bad.any():
            raise ValueError(f"data.y: classification needs 0/1 targets, got {y[bad][0]!r}")
        if y.size < 2:
            raise ValueError(f"data: classification needs at least 2 rows, got {y.size}")
    return X, y


def _training_weights(learner: Any, data: Any) -> np.ndarray | None:
    """``data``'s row weights as float64 (n,), or None; refused for a learner whose ``fit`` takes no
    ``sample_weight``, which would fit another loss than the weighted constraints are stated for."""
    weights = row_weights(data)
    if weights is None:
        return None
    try:
        parameters = inspect.signature(learner.fit).parameters
    except (TypeError, ValueError):  # pragma: no cover - builtins without a signature
        parameters = {}
    takes = "sample_weight" in parameters or any(p.kind is inspect.Parameter.VAR_KEYWORD
                                                 for p in parameters.values())
    if not takes:
        raise ValueError(f"learner: {type(learner).__name__}.fit does not take sample_weight, but data has row "
                         "weights (data.weights); use a learner whose fit(X, y, sample_weight=...) weighs the loss")
    return weights.detach().cpu().double().numpy()


def _class_balance_encoding(n: int) -> LinearEncoding:
    """``1 <= sum z <= n - 1``: both classes stay present in the targets."""
    return LinearEncoding(name=CLASS_BALANCE, A_z=np.ones((1, n)), lb=[1.0], ub=[n - 1.0],
                          meta={"row_names": [f"{CLASS_BALANCE}:1<=sum(z)<=n-1"]})


def _seed_learner(learner: Any, seed: int) -> None:
    """Give a scikit-learn style learner with ``random_state=None`` the engine's seed."""
    get_params = getattr(learner, "get_params", None)
    set_params = getattr(learner, "set_params", None)
    if not (callable(get_params) and callable(set_params)):
        return
    try:
        params = get_params(deep=False)
    except TypeError:
        params = get_params()
    if "random_state" in params and params["random_state"] is None:
        set_params(random_state=seed)
        logger.debug("learner %s: random_state set to %d", type(learner).__name__, seed)


def _fit_predict(learner: Any, X: np.ndarray, targets: np.ndarray, classification: bool,
                 weights: np.ndarray | None = None) -> tuple[np.ndarray, float]:
    """Fit on ``targets`` (weighted by ``weights`` when given) and return the training
    predictions (labels for classification)."""
    start = time.perf_counter()
    targets = targets.astype(np.int64) if classification else targets
    if weights is None:
        learner.fit(X, targets)
    else:
        learner.fit(X, targets, sample_weight=weights)
    predictions = _predict(learner, X, classification)
    return predictions, time.perf_counter() - start


def _predict(learner: Any, X: np.ndarray, classification: bool) -> np.ndarray:
    """The learner's predictions (n,) as float64; hard 0/1 labels for classification."""
    name = type(learner).__name__
    if callable(getattr(learner, "predict", None)):
        values = as_float_array(learner.predict(X), f"{name}.predict(X)").reshape(-1)
    else:
        proba = as_float_array(learner.predict_proba(X), f"{name}.predict_proba(X)")
        proba = proba[:, -1] if proba.ndim == 2 else proba.reshape(-1)
        values = (proba > 0.5).astype(np.float64)
    if values.shape[0] != X.shape[0] or not np.isfinite(values).all():
        raise ValueError(f"learner: {name} returned {values.shape[0]} predictions (or non-finite ones) "
                         f"for {X.shape[0]} rows")
    if classification and ((values != 0) & (values != 1)).any():
        raise ValueError(f"learner: {name}.predict must return 0/1 labels for classification, got "
                         f"{values[(values != 0) & (values != 1)][0]!r}")
    return values


def _scores(learner: Any, X: np.ndarray) -> np.ndarray | None:
    """The positive-class score (``predict_proba[:, -1]`` or ``decision_function``), or None: the count
    search's tie-break among targets of equal cost."""
    for method in ("predict_proba", "decision_function"):
        function = getattr(learner, method, None)
        if not callable(function):
            continue
        values = np.asarray(function(X), dtype=float)
        values = values[:, -1] if values.ndim == 2 else values.reshape(-1)
        return values if values.shape[0] == X.shape[0] and np.isfinite(values).all() else None
    return None


def _constraint_values(cons: ConstraintSet, data: Any, values: np.ndarray,
                       classification: bool) -> tuple[list[float], float]:
    """Exact constraint rows on targets/predictions and their total violation (module doc)."""
    out = torch.as_tensor(2.0 * values - 1.0 if classification else values, dtype=torch.float64)
    c = cons.exact(out, data).to(torch.float64)
    violation = row_violations(c, cons.lower, cons.upper).sum()
    return c.tolist(), float(violation)


def _score(predictions: np.ndarray, y: np.ndarray, classification: bool,
           weights: np.ndarray | None = None) -> float:
    """Accuracy or ``R^2 = 1 - SSE / SST`` against ``y``, weighted with ``weights``."""
    if weights is not None:
        if classification:
            return float(np.average(predictions == y, weights=weights))
        mean = float(np.average(y, weights=weights))
        sst = float(np.sum(weights * (y - mean) ** 2))
        sse = float(np.sum(weights * (y - predictions) ** 2))
        return 1.0 - sse / sst if sst > 0 else float("nan")
    if classification:
        return float(np.mean(predictions == y))
    sst = float(np.sum((y - y.mean()) ** 2))
    sse = float(np.sum((y - predictions) ** 2))
    return 1.0 - sse / sst if sst > 0 else float("nan")
