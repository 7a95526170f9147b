"""Learning-rate schedules of the stochastic SQP: how ``beta`` evolves ("rsqrt" per
iteration; "plateau" and "paper", [SQP] Alg. 2, per epoch), as functions of the engine's
:class:`~solvers.sqp.state.SQPState` and options."""

from __future__ import annotations

import logging
import math
from typing import Protocol

from solvers.sqp.state import SQPState

__all__ = ["LR_SCHEDULES", "PLATEAU_RTOL", "RSQRT_EPOCHS", "RSQRT_WARMUP_EPOCHS", "ScheduleOptions",
           "adjust_learning_rate", "end_of_epoch", "plateau", "rsqrt_beta", "stalled"]

#: Values of ``lr_schedule``.
LR_SCHEDULES: tuple[str, ...] = ("auto", "plateau", "rsqrt", "paper", "none")
#: Relative merit decrease that counts as "plateau" progress: any beyond rounding, so that a slow but
#: steady run keeps its step.
PLATEAU_RTOL = 1e-9
#: Time constant of the "rsqrt" decay in epochs: ``beta_k = lr / sqrt(1 + k / (RSQRT_EPOCHS K))``
#: (``K`` steps per epoch): the step halves after 12 epochs; one epoch decays it before small data sets
#: converge, ten leave more runs above the full batch's loss (``benchmarks/results/solver_notes.md``).
RSQRT_EPOCHS = 4
#: Epochs over which the "rsqrt" step of a network rises linearly to ``lr`` (:func:`rsqrt_beta`).
RSQRT_WARMUP_EPOCHS = 1

logger = logging.getLogger("solvers.sqp")  # one logger for the whole engine package


class ScheduleOptions(Protocol):
    """The engine options the schedules read (:class:`solvers.sqp.StochasticSQP` has them)."""

    lr_: float
    lr_patience: int
    lr_decay: float
    lr_floor: float
    stall_epochs: int | None
    stall_tol: float
    lr_min: float
    lr_kmin: int
    lr_interval: int
    lr_factor: float
    lr_weight: float


def rsqrt_beta(state: SQPState, lr: float, steps_per_epoch: int, warmup: bool = False) -> float:
    """The "rsqrt" step ``beta_k = lr / sqrt(1 + k / (RSQRT_EPOCHS K))`` at iteration
    ``k = state.iteration`` (``K`` the steps per epoch), scaled by the divergence guard's
    ``beta_scale``: the diminishing steps of the stochastic regime of [SQP] Thm 3.1, on a time
    scale of epochs (a resumed run continues the same sequence).

    ``warmup`` (a network's steps) multiplies it by ``min(1, (k + 1) / (RSQRT_WARMUP_EPOCHS K))``:
    the metric's second moment starts from one batch's gradient (``v = (1 - beta2) g_0^2``), so the
    first steps are about ``lr / sqrt(mu)`` times the gradient whatever its scale, and at full length
    a network's overshoot and take epochs to recover (``benchmarks/results/solver_notes.md``)."""
    scale = RSQRT_EPOCHS * steps_per_epoch
    beta = state.beta_scale * float(lr) / math.sqrt(1.0 + state.iteration / scale)
    if warmup:
        beta *= min(1.0, (state.iteration + 1) / (RSQRT_WARMUP_EPOCHS * max(1, steps_per_epoch)))
    return beta


def end_of_epoch(state: SQPState, merit: float, f: float, V: float, epoch: int, kind: str,
                 options: ScheduleOptions) -> None:
    """The per-epoch learning-rate control (``lr_schedule`` "plateau" or "paper")."""
    if kind == "paper":
        adjust_learning_rate(state, merit, epoch, options)
    elif kind == "plateau":
        plateau(state, f, V, epoch, options)


def plateau(state: SQPState, f: float, V: float, epoch: int, options: ScheduleOptions) -> None:
    """``beta *= lr_decay`` (never below ``lr_floor * lr``) when the epoch's mean merit ``tau f + V``, at
    the current ``tau``, has reached no new best for ``lr_patience`` epochs: a run oscillating around
    the boundary gets smaller steps, an improving one keeps its step."""
    tau = state.tau
    best = state.plateau_best
    merit = tau * f + V
    if best is None or merit < (tau * best[0] + best[1]) - PLATEAU_RTOL * abs(tau * best[0] + best[1]):
        state.plateau_best, state.plateau_wait = [f, V], 0
        return
    state.plateau_wait += 1
    floor = options.lr_floor * float(options.lr_)
    if state.plateau_wait >= options.lr_patience and state.beta > floor:
        state.beta = max(floor, state.beta * options.lr_decay)
        state.plateau_wait = 0
        logger.debug("epoch %d: merit plateau, learning rate reduced to %.3e", epoch, state.beta)


def stalled(state: SQPState, best_f: float | None, options: ScheduleOptions) -> bool:
    """Whether a "plateau" run has stalled at its floor (``stall_epochs``, called once per epoch).

    ``best_f`` is the objective ``f*`` of the best feasible iterate so far (None: none is feasible).
    Only epochs whose step is at the floor ``beta <= lr_floor * lr`` count: at the first one the reference
    ``f_r = f*`` is taken, each later one renews it when ``f* < f_r - stall_tol`` and otherwise counts one
    epoch without progress; the run has stalled at the ``stall_epochs``-th such epoch in a row. An epoch
    above the floor or without a feasible iterate starts the count afresh.
    """
    if options.stall_epochs is None:
        return False
    if best_f is None or state.beta > options.lr_floor * float(options.lr_):
        state.stall_best, state.stall_wait = None, 0
        return False
    if state.stall_best is None or best_f < state.stall_best - options.stall_tol:
        state.stall_best, state.stall_wait = float(best_f), 0
        return False
    state.stall_wait += 1
    return state.stall_wait >= int(options.stall_epochs)


def adjust_learning_rate(state: SQPState, merit: float, epoch: int, options: ScheduleOptions) -> None:
    """[SQP] Alg. 2: divide beta by ``lr_factor`` when the merit's moving average stops
    decreasing, after ``lr_kmin`` epochs and at least ``lr_interval`` epochs apart."""
    avg = state.merit_avg
    avg = merit if avg is None else options.lr_weight * merit + (1.0 - options.lr_weight) * avg
    state.merit_avg = avg
    if epoch >= options.lr_kmin and state.beta >= options.lr_min:
        if avg <= merit and state.since_change >= options.lr_interval:
            state.beta /= options.lr_factor
            state.since_change = 0
            logger.debug("epoch %d: learning rate reduced to %.3e", epoch, state.beta)
        state.since_change += 1
