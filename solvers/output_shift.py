r"""Rescue of a nearly constant binary classifier by its decision threshold (:func:`shift_output`), for the
end-game of any engine that keeps a :class:`solvers.outcome.BestIterate` (SQP, Lagrangian dual).

A model whose last layer is affine with one output, ``out(x) = h(x)' w_L + b_L``, moves every output
by the same amount when ``b_L`` moves: ``out_b = out + b`` (:func:`output_bias` finds that parameter by
probing, whatever module holds it). Along that one direction both the
training accuracy ``a(b)`` (hard labels ``out + b > 0`` against ``y``) and the exact rows ``c(b)`` of
hard-label constraints (group rates of ``out + b > 0``) are step functions of ``b`` that jump where a
row's label flips, at ``b = -out_i``; so the exact problem

``max_b a(b)  s.t.  l <= c(b) <= u``

is solved over the flips (:func:`threshold_search`: every threshold ranked by accuracy with one
sort, the exact rows evaluated from the most accurate down, at most :data:`SHIFT_BUDGET` of them).

The engine minimises the training loss, and a threshold chosen for accuracy is not its optimum, so
this runs only where the engine's answer has failed, the returned classifier being nearly constant
(:func:`solvers.outcome.near_constant`: training accuracy not above the majority-class rate plus
two standard errors), and takes only a threshold at which the training loss is no higher than the
returned iterate's: the rescued model is better by the engine's own objective too, so a minimiser of
the loss that is nearly constant because the bounds force it (a constant meets every group-rate
bound) stays as it is. The SQP steps see the rows through smooth surrogates and a calibration
offset; where many rows share one score (few distinct input rows) the exact rows jump by whole
clusters, and a run can end oscillating between iterates that violate a bound and iterates far
inside it (on COMPAS under DI >= 0.8 with the held-out margin, one seed returned DI 0.949 where 0.85
was asked, 0.517 accurate against a majority rate of 0.545). The shifted model is returned when it
meets every bound and is more accurate by more than one standard error ``sqrt(a (1 - a) / n)`` (a
smaller gain is one a new sample would not reproduce); the engine still warns if it stays nearly
constant.
It applies with the binary cross-entropy, constraints on hard labels that cost one pass over the
rows, and data in memory.
"""

from __future__ import annotations

import logging
import math
from typing import Any, Callable, NamedTuple, Protocol

import torch

from solvers.contract import cost_on_all_rows, smooth_is_exact
from solvers.losses import loss_name
from solvers.outcome import BestIterate, near_constant
from solvers.problem import eval_mode, model_outputs

__all__ = ["BISECTIONS", "PROBE_ROWS", "SHIFT_BUDGET", "RescueInputs", "ScoredFit", "no_higher_loss", "output_bias",
           "shift_output", "threshold_search"]

#: Most thresholds whose exact rows :func:`threshold_search` evaluates (one pass over the outputs each).
SHIFT_BUDGET = 4096
#: Rows on which :func:`output_bias` probes that a parameter shifts every output.
PROBE_ROWS = 1024
#: Bisections of :func:`no_higher_loss` for the far end of the interval of no higher loss.
BISECTIONS = 40

logger = logging.getLogger("solvers")


class ScoredFit(Protocol):
    """What :func:`shift_output` reads of a fit (:class:`solvers.sqp.state.FitProblem` has it): the
    ``model`` and its trainable ``params``, the loss ``loss_fn(out, data)``, the constraint set ``cons``
    and the training ``data``."""

    model: torch.nn.Module
    params: list[torch.Tensor]
    loss_fn: Callable
    cons: Any
    data: Any


class RescueInputs(NamedTuple):
    """A :class:`ScoredFit` for engines without a :class:`solvers.sqp.state.FitProblem`."""

    model: torch.nn.Module
    params: list[torch.Tensor]
    loss_fn: Callable
    cons: Any
    data: Any


def output_bias(model: torch.nn.Module, params: list[torch.Tensor], data: Any,
                probe_rows: int = PROBE_ROWS) -> torch.Tensor | None:
    """The trained scalar parameter whose change by ``b`` adds ``b`` to every output (the bias of a last
    affine layer with one output), found by probing rather than by the model's structure: on the first
    ``probe_rows`` rows, adding 1 to it must add 1 to every output (to 1e-5 relative); None if no trained
    scalar does. The parameter is restored bit for bit after each probe."""
    batch = data if len(data) <= probe_rows else data.subset(torch.arange(probe_rows))
    with torch.no_grad():
        before = model_outputs(model, batch).detach().to(torch.float64)
        for p in params:
            if p.numel() != 1 or not p.dtype.is_floating_point:
                continue
            saved = p.detach().clone()
            p.add_(1.0)
            after = model_outputs(model, batch).detach().to(torch.float64)
            p.copy_(saved)
            if torch.allclose(after - before, torch.ones_like(before), rtol=0.0,
                              atol=1e-5 * (1.0 + float(before.abs().max()))):
                return p
    return None


def threshold_search(out: torch.Tensor, y: torch.Tensor, weights: torch.Tensor,
                     feasible: Callable[[torch.Tensor], bool], above: float = -math.inf,
                     budget: int = SHIFT_BUDGET, within: tuple[float, float] = (-math.inf, math.inf)
                     ) -> tuple[float, float | None]:
    """``(b, a(b))``: the most accurate shift ``b`` in the open interval ``within`` whose rows are
    ``feasible(out + b)`` among those more accurate than ``above``; ``(0.0, None)`` when none is found
    within ``budget`` calls of ``feasible``.

    The accuracy of every threshold comes from one sort: with the distinct outputs ``v_1 < ... < v_U``
    and the weighted positives ``P_j`` and negatives ``N_j`` at each, labelling ``v_j, ..., v_U``
    positive is right on ``sum_{i >= j} P_i + sum_{i < j} N_i``; that threshold is the shift
    ``b = -(v_{j-1} + v_j) / 2`` (``v_1 - 1`` and ``v_U + 1`` at the ends). The thresholds are tried from
    the most accurate down, so the first feasible one is the optimum. ``y`` boolean labels."""
    values, inverse = torch.unique(out.detach().to(torch.float64), return_inverse=True)
    w = weights.to(torch.float64)
    positives = torch.zeros(len(values), dtype=torch.float64).index_add_(0, inverse, w * y)
    negatives = torch.zeros(len(values), dtype=torch.float64).index_add_(0, inverse, w * ~y)
    zero = torch.zeros(1, dtype=torch.float64)
    correct = torch.cat([zero, negatives.cumsum(0)]) + positives.sum() - torch.cat([zero, positives.cumsum(0)])
    accuracy = correct / w.sum()
    cuts = torch.cat([values[:1] - 1.0, (values[:-1] + values[1:]) / 2.0, values[-1:] + 1.0])
    accuracy = torch.where((-cuts > within[0]) & (-cuts < within[1]), accuracy, -math.inf)
    order = torch.argsort(accuracy, descending=True, stable=True)
    for j in order[:budget].tolist():
        if not float(accuracy[j]) > above:
            break
        if feasible(out - cuts[j].to(out.dtype)):
            return -float(cuts[j]), float(accuracy[j])
    return 0.0, None


def no_higher_loss(loss_fn: Callable, out: torch.Tensor, data: object, level: float) -> tuple[float, float]:
    """The shifts ``b`` with ``loss_fn(out + b, data) <= level``, an interval with 0 at one end (the loss is
    convex in ``b`` and ``level`` its value at 0): found by doubling a step downhill from 0 until the loss
    exceeds ``level``, then :data:`BISECTIONS` bisections; ``(0, 0)`` when no step downhill stays below."""
    def loss(b: float) -> float:
        value = float(loss_fn(out + torch.as_tensor(b, dtype=out.dtype), data))
        return value if math.isfinite(value) else math.inf

    probe = 1e-6 * (1.0 + float(out.abs().mean()))
    direction = 1.0 if loss(probe) < loss(-probe) else -1.0
    good, bad = 0.0, probe
    while loss(direction * bad) <= level:
        good, bad = bad, 2.0 * bad
        if bad > 1e6 * (1.0 + float(out.abs().max())):
            break
    for _ in range(BISECTIONS):
        middle = 0.5 * (good + bad)
        good, bad = (middle, bad) if loss(direction * middle) <= level else (good, middle)
    return (0.0, direction * good) if direction > 0 else (direction * good, 0.0)


def shift_output(problem: ScoredFit, tracker: BestIterate, iteration: int, in_memory: bool = True) -> bool:
    """Offer a nearly constant best iterate with its decision threshold moved (module docstring) to
    ``tracker``, as preferred; whether it was taken. The model holds the tracker's best parameters on
    entry, and on exit those of the returned candidate. ``in_memory=False`` (data passed in chunks or
    sharded over ranks) skips it: the outputs of all rows are held at once."""
    best, cons, data = tracker.best, problem.cons, problem.data
    if (not in_memory or best is None or not cons.n_rows or not tracker.feasible(best.row_violations)
            or loss_name(problem.loss_fn) != "bce" or smooth_is_exact(cons) or cost_on_all_rows(cons) != "linear"):
        return False
    with torch.no_grad(), eval_mode(problem.model):
        out = model_outputs(problem.model, data).detach().to(torch.float64)
        y = data.y.reshape(-1) > 0.5
        a0 = float(((out > 0) == y).double().mean())
        share = float(y.double().mean())
        majority, n = max(share, 1.0 - share), len(y)
        if not near_constant(a0, majority, n):  # the common case: one pass over the rows, nothing probed
            return False
        bias = output_bias(problem.model, problem.params, data)
        if bias is None:
            return False

        def feasible(shifted: torch.Tensor) -> bool:
            return tracker.meets(cons.exact(shifted.to(bias.dtype), data).reshape(-1).to(torch.float64))

        floor = a0 + math.sqrt(a0 * (1.0 - a0) / n)  # a gain of more than one standard error
        scores = out.to(bias.dtype)  # the outputs in the model's dtype, as the loss sees them
        # the best iterate's objective, or this pass's value at the same parameters if rounding put it higher
        level = max(best.f, float(problem.loss_fn(scores, data)))
        within = no_higher_loss(problem.loss_fn, scores, data, level)
        shift, accuracy = threshold_search(out, y, torch.ones_like(out), feasible, above=floor, within=within)
        if accuracy is None:
            return False
        bias.add_(shift)  # the values offered are the shifted model's own
        moved = model_outputs(problem.model, data)
        f = float(problem.loss_fn(moved, data))
        c = cons.exact(moved, data).reshape(-1).to(torch.float64)
        rescued = float(((moved > 0) == y).double().mean()) > floor and f <= level
    if rescued and tracker.meets(c) and tracker.offer(problem.params, f, c, iteration, prefer=True):
        logger.info("nearly constant classifier: decision threshold moved by %.4g, training accuracy %.4f -> %.4f "
                    "(majority rate %.4f) within every bound", -shift, a0, accuracy, majority)
        return True
    tracker.restore(problem.params)
    return False
