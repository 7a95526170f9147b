"""Typed state of one stochastic SQP fit, passed between the engine's modules as cooper passes its
``CMPState``: :class:`SQPState` (what the iterations change and a checkpoint carries), its
:class:`ScreenMemory`, :class:`FitProblem` (what the fit works on) and :class:`ResolvedFit` (what the
engine decided at the fit's start and keeps after it)."""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import Any, Callable

import torch

from solvers.derivatives import Derivatives

__all__ = ["CHECKPOINT_FIELDS", "FitProblem", "ResolvedFit", "SQPState", "ScreenMemory"]


@dataclass
class ScreenMemory:
    """Movement history of the row screen (:class:`solvers.sqp.screening.RowScreen`): the smooth
    rows of the last iteration, the running movement scale per row and the iterations seen."""

    last: list[float] | None = None
    scale: list[float] | None = None
    seen: int = 0


#: ``SQPState`` fields that are not part of a checkpoint: the Hessian accumulator (saved on its
#: own as ``hessian_v``) and the first iteration of the current ``fit`` call.
_NOT_SAVED = ("v", "start_iteration")


@dataclass
class SQPState:
    """Everything the iterations of one fit change.

    Merit and ratio parameters ``tau``, ``xi`` ([B21]); the step ``beta`` and its divergence-guard
    scale ``beta_scale``; the Lipschitz estimates ``L``, ``Gamma`` of the adaptive step; the
    schedules' memory (``merit_avg``, ``since_change`` of [SQP] Alg. 2; ``plateau_best``,
    ``plateau_wait`` of "plateau"; ``stall_best``, ``stall_wait`` of ``stall_epochs``); counters
    ``iteration``, ``epochs_done``, ``restarts``; the trust region's ``recent_steps``; the last
    stationarity residual ``last_kkt``; the first all-rows objective ``f_first`` (divergence guard);
    the calibration ``offset`` of the working bounds; the row screen's ``screen``; the Hessian
    accumulator ``v`` of ``H = diag(sqrt(v + mu))`` (``hessian="adahessian"``; the Gauss-Newton
    metric's ``h = v + mu``, ``hessian="gauss-newton"``) and, after the fit, ``final_kkt`` and ``final_violation``.
    """

    tau: float
    xi: float
    beta: float
    L: float | None = None
    Gamma: float | None = None
    merit_avg: float | None = None
    since_change: int = 0
    iteration: int = 0
    epochs_done: int = 0
    restarts: int = 0
    warned_relaxed: bool = False
    warned_relaxed_failed: bool = False
    beta_scale: float = 1.0
    last_kkt: float = math.inf
    recent_steps: list[float] = field(default_factory=list)
    plateau_best: list[float] | None = None
    plateau_wait: int = 0
    stall_best: float | None = None
    stall_wait: int = 0
    f_first: float | None = None
    offset: list[float] | None = None
    screen: ScreenMemory | None = None
    final_kkt: float | None = None
    final_violation: float | None = None
    v: torch.Tensor = field(default_factory=lambda: torch.zeros(0), repr=False, compare=False)
    start_iteration: int = field(default=0, compare=False)

    def copy(self) -> SQPState:
        """An independent copy (lists and the accumulator ``v`` copied too), for a phase that must
        leave this state as it was (the polish)."""
        return dataclasses.replace(self, recent_steps=list(self.recent_steps), v=self.v.clone(),
                                   screen=dataclasses.replace(self.screen) if self.screen is not None else None)

    def to_dict(self) -> dict:
        """The checkpoint form: Python scalars and lists only (``v`` is saved on its own)."""
        out = {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name not in _NOT_SAVED}
        out["recent_steps"] = list(self.recent_steps)
        out["screen"] = dataclasses.asdict(self.screen) if self.screen is not None else None
        return out

    @classmethod
    def from_dict(cls, saved: dict, v: torch.Tensor) -> SQPState:
        """The state of a checkpoint's ``state`` dict (:meth:`to_dict`) with the accumulator ``v``;
        keys it does not know raise ``ValueError``."""
        unknown = sorted(set(saved) - set(CHECKPOINT_FIELDS))
        if unknown:
            raise ValueError(f"unknown entries {unknown}")
        values = dict(saved)
        screen = values.get("screen")
        values["screen"] = ScreenMemory(**screen) if isinstance(screen, dict) else None
        values["recent_steps"] = list(values.get("recent_steps") or ())
        return cls(**values, v=v)


#: Names a checkpoint's ``state`` may hold (every field of :class:`SQPState` but ``v`` and
#: ``start_iteration``).
CHECKPOINT_FIELDS: tuple[str, ...] = tuple(f.name for f in dataclasses.fields(SQPState) if f.name not in _NOT_SAVED)


@dataclass
class FitProblem:
    """What one fit works on.

    ``model`` and its trainable ``params``; the loss ``loss_fn``; the constraint set ``cons`` with
    the user's bounds ``lower <= c <= upper``; the training ``data``; the engine's derivative
    oracle ``oracle(model, params, loss_fn, cons, obj_batch, con_batch, rows=None, *,
    objective_gradient=True)``; and
    ``f_constant``, the training loss of the best constant output (None: not checked), with that output
    ``constant_output`` (:func:`solvers.losses.best_constant_output`)."""

    model: torch.nn.Module
    params: list[torch.Tensor]
    loss_fn: Callable
    cons: Any
    data: Any
    lower: torch.Tensor
    upper: torch.Tensor
    oracle: Callable[..., Derivatives]
    f_constant: float | None = None
    constant_output: float | None = None

    def on_all_rows(self, objective_gradient: bool = True) -> Derivatives:
        """The oracle's derivatives at the current parameters, objective and constraints on all rows
        (``g`` possibly None without ``objective_gradient``)."""
        return self.oracle(self.model, self.params, self.loss_fn, self.cons, self.data, self.data,
                           objective_gradient=objective_gradient)


@dataclass
class ResolvedFit:
    """What :class:`~solvers.sqp.engine.StochasticSQP` decided for its last fit and keeps after it, read by
    its resolved properties (``lr_``, ``hessian_``, ``hessian_shift_``, ``metric_spread_``, ...) and its
    checkpoint (``state_dict``); the defaults hold before the first fit.

    ``oracle``: the derivative oracle (:func:`solvers.sqp.oracles.derivative_oracle`) and ``reduce`` its
    all-reduce of a vector across ranks (None in one process); ``minibatch``: the steps draw batches;
    ``network``: the model has more than one weight matrix (:func:`solvers.problem.is_network`);
    ``hessian``: the metric ``hessian="auto"`` chose; ``curvature``: the recognised model behind the
    Gauss-Newton metric in use (None: the gradient metric), ``polish_curvature`` the one kept for a
    mini-batch run's polish; ``spread`` and ``start_spread``: the metric spreads ``lr="auto"`` reads;
    ``generator``: the sampling generator; ``n_rows``: the constraint rows; ``tracker``: the returned
    iterate's :class:`~solvers.outcome.BestIterate` (a mini-batch run's: its training phase's);
    ``snapshot``: the constraint snapshot of mini-batch steps; ``last_params``: the last iterate (flat),
    where a resumed fit continues."""

    oracle: Any = None
    reduce: Callable | None = None
    minibatch: bool = False
    network: bool = False
    hessian: str = "adam"
    curvature: Any = None
    polish_curvature: Any = None
    spread: float | None = None
    start_spread: float | None = None
    generator: torch.Generator | None = None
    n_rows: int = 0
    tracker: Any = None
    snapshot: Any = None
    last_params: torch.Tensor | None = None
