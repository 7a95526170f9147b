"""One stochastic SQP iteration ([SQP] Alg. 1, [B21]): Hessian estimate, QP subproblem (relaxed when
infeasible), trust regions, merit and ratio parameters, step size, feasibility restoration and the
exact calibration of the working bounds."""

from __future__ import annotations

import math
import statistics
import time
import warnings
from dataclasses import dataclass
from typing import Callable, Protocol

import torch

from solvers.derivatives import Derivatives
from solvers.history import COLUMN_ACTIVE, COLUMN_C, COLUMN_QP_STATUS, QP_NORMAL, QP_RELAXED
from solvers.qp import QPResult, diagonal_qp, least_violation_bounds
from solvers.sqp.state import SQPState

__all__ = ["Direction", "GAUSS_NEWTON_DECAY", "GAUSS_NEWTON_EVERY", "GAUSS_NEWTON_FLOOR_SHIFT", "SQPWarning",
           "StepOptions", "TRUST_GROWTH", "TRUST_MEMORY", "TRUST_RATIO", "adaptive_step", "calibrate", "cap_norm",
           "hessian_diag", "integral_push", "lipschitz", "normal_step", "qp_direction", "recent_radius",
           "RelaxationNotices", "remember_step", "restoration_step", "shift_parameters", "solve_qp", "sqp_step",
           "trust_region", "update_merit_and_ratio"]

#: Trust region of stochastic steps: ``||d|| <= TRUST_RATIO * ||g / h||`` (see :func:`sqp_step`).
TRUST_RATIO = 10.0
#: Trust region of every constrained step (full batch and mini-batch): ``||d|| <= TRUST_GROWTH *
#: median`` of the last ``TRUST_MEMORY`` steps' ``||d||`` (see :func:`recent_radius`).
TRUST_GROWTH = 3.0
TRUST_MEMORY = 10
#: ``hessian="gauss-newton"``: decay ``b`` of the moving average of the Gauss-Newton diagonal (a
#: mini-batch's estimate holds a rare column's rows only now and then; ten batches average them).
GAUSS_NEWTON_DECAY = 0.9
#: ``hessian="gauss-newton"``: iterations between two updates of the Gauss-Newton diagonal.
GAUSS_NEWTON_EVERY = 5
#: ``hessian="gauss-newton"``: the trust region's floor is ``||g|| / sqrt(GAUSS_NEWTON_FLOOR_SHIFT)``,
#: the gradient step under ``h = sqrt(v + mu)`` with the full-batch shift and no history
#: (see :func:`qp_direction`).
GAUSS_NEWTON_FLOOR_SHIFT = 0.3


class SQPWarning(UserWarning):
    """Raised once per fit when an iteration needed a relaxed (infeasible) QP."""


class StepOptions(Protocol):
    """The engine options one iteration reads (:class:`solvers.sqp.StochasticSQP` has them)."""

    hessian_: str
    beta2: float
    hessian_shift_: float
    sigma: float
    epsilon: float
    tau_min: float
    xi_min: float
    eta: float
    theta: float
    step: str
    feasibility_restoration: bool
    seed: int


def sqp_step(params: list[torch.Tensor], der: Derivatives, working: tuple[torch.Tensor, torch.Tensor],
             state: SQPState, options: StepOptions, probe: Callable[[], Derivatives],
             bounds: tuple | None = None, stochastic: bool = False) -> dict:
    """One SQP step on the calibrated ``working = (lower, upper)`` bounds (``bounds``: the user's, for
    the exact violation); updates ``params`` and ``state`` in place and returns the history record.
    ``probe`` evaluates the derivatives at the current parameters (the adaptive step's Lipschitz
    estimates).

    A small or noisy constraint Jacobian puts the linearised feasible set far away and makes
    ``d = -(g + J'y) / h`` explode, hence trust regions: ``stochastic`` steps ``||d|| <= TRUST_RATIO
    ||g / h||``, every constrained step (under a curvature metric every step) ``||d|| <=
    recent_radius(state, floor)`` (:func:`qp_direction`), the restoration
    ``||(1 - alpha) v|| <= alpha ||d||`` after a stochastic or capped step. Such a step keeps ``tau``
    and ``xi``: [B21]'s ``tau <= (1 - sigma) Red / (g'd + d'Hd)`` from a truncated step or estimated
    reductions collapses ``tau`` (``benchmarks/results/solver_notes.md``)."""
    lower, upper = working
    true_lower, true_upper = bounds if bounds is not None else working
    first = state.iteration == 0
    h = hessian_diag(der.g, state.v, first, options, der.curvature,
                     refresh=first or state.iteration % GAUSS_NEWTON_EVERY == 0)
    m = int(der.c.numel())
    g64, h64 = der.g.to(torch.float64), h.to(torch.float64)
    J64 = der.J.to(torch.float64)  # once for the QP, the restoration step and the checks below
    curvature_metric = options.hessian_ == "gauss-newton"
    qp = qp_direction(der, h, (g64, h64, J64), working, state, stochastic, curvature_metric=curvature_metric)
    d, y, capped, radius = qp.d, qp.y, qp.capped, qp.radius
    d64 = d.to(torch.float64)
    lower_list, upper_list = lower.tolist(), upper.tolist()
    V = total_violation(der.c.tolist(), lower_list, upper_list)
    V_lin = total_violation((der.c + J64 @ d64).tolist(), lower_list, upper_list) if m else 0.0
    red = V - V_lin
    gd = float(g64 @ d64)
    dHd = float((h64 * d64 * d64).sum())
    dnorm2 = float(d64 @ d64)
    if capped or stochastic:  # tau and xi are kept: a truncated step, or estimated reductions (docstring)
        tau, xi = state.tau, state.xi
        dl = -tau * gd + red
    else:
        tau, xi, dl = update_merit_and_ratio(state, red, gd, dHd, dnorm2, options)

    beta = state.beta
    if options.step == "fixed":
        alpha = beta
    else:
        if state.L is None:
            state.L, state.Gamma = lipschitz(probe, params, der, options.seed)
        alpha = adaptive_step(state, dl, V, dnorm2, options)

    step = alpha * d
    norm_v = 0.0
    if m and options.feasibility_restoration and V > 0 and alpha < 1.0:
        v_step = restoration_step(h64, J64, qp.qp_bounds, alpha * math.sqrt(dnorm2) / (1.0 - alpha),
                                  stochastic or capped)
        if v_step is not None:
            norm_v = float(v_step.norm())
            step = step + (1.0 - alpha) * v_step.to(d.dtype)
    shift_parameters(params, step, 1.0)
    if m or curvature_metric:
        remember_step(state, math.sqrt(dnorm2), capped)

    kkt = float((g64 + J64.T @ y).abs().max()) if m else float(g64.abs().max())
    state.last_kkt = kkt
    exact_rows = (_row_violations(der.c_exact.tolist(), true_lower.tolist(), true_upper.tolist())
                  if der.c_exact is not None else [])
    # a mini-batch step's exact rows on all rows are not computed (a batch's, where measured, go to V_exact_batch)
    unmeasured = m > 0 and (der.c_exact is None or stochastic)
    return {
        "iteration": state.iteration,
        "f": der.f,
        COLUMN_C: der.c.tolist(),
        "c_exact": der.c_exact.tolist() if der.c_exact is not None and not unmeasured else [],
        "V": V,
        "V_exact": math.nan if unmeasured else sum(exact_rows),
        "V_exact_max": math.nan if unmeasured else max(exact_rows, default=0.0),
        **({"V_exact_batch": sum(exact_rows)} if unmeasured and exact_rows else {}),
        "merit": tau * der.f + V,
        "tau": tau,
        "xi": xi,
        "alpha": alpha,
        "beta": beta,
        "norm_d": math.sqrt(dnorm2),
        "norm_v": norm_v,
        **({"trust_radius": radius} if m or curvature_metric else {}),
        COLUMN_ACTIVE: qp.active,
        COLUMN_QP_STATUS: qp.status,
        "kkt": kkt,
        "t_forward": der.t_forward,
        "t_jacobian": der.t_jacobian,
        "t_qp": qp.seconds,
    }


@dataclass
class Direction:
    """One iteration's direction: ``d`` after its trust regions, the multipliers ``y``, the QP status and
    bounds on ``J d``, the working set (``"u3"``: upper side of row 3), the radius, whether it capped
    ``d``, the seconds spent."""

    d: torch.Tensor
    y: torch.Tensor
    status: str
    qp_bounds: tuple | None
    active: list[str]
    radius: float
    capped: bool
    seconds: float


def qp_direction(der: Derivatives, h: torch.Tensor, metric: tuple[torch.Tensor, torch.Tensor, torch.Tensor],
                 working: tuple[torch.Tensor, torch.Tensor], state: SQPState, stochastic: bool,
                 curvature_metric: bool = False) -> Direction:
    """The QP step of :func:`sqp_step` in its trust regions (``metric``: float64 ``g``, ``h``, ``J``);
    ``-g / h`` without constraint rows (held to the recent-steps region under a curvature metric only).

    The recent-steps region's floor is the plain descent step ``||g / h||``; under a curvature
    metric (``hessian="gauss-newton"``) that is a Newton step, as long as ``1 / mu`` times the
    gradient where the curvature is small (a network's hidden layers at the start), so the floor
    is the gradient step of the "adam" metric's fresh start instead,
    ``||g|| / sqrt(GAUSS_NEWTON_FLOOR_SHIFT)``, and the first step, which has no recent steps,
    is held to it too."""
    g64, h64, J64 = metric
    t0 = time.perf_counter()
    if not der.c.numel():
        d, y, status, qp_bounds, active = -der.g / h, torch.zeros(0, dtype=torch.float64), "unconstrained", None, []
        if not curvature_metric:  # the plain descent step is the region's floor: never capped
            return Direction(d, y, status, qp_bounds, active, math.inf, False, time.perf_counter() - t0)
    else:
        res, status, qp_bounds = solve_qp(g64, h64, J64, der.c, working[0], working[1], state)
        d, y = res.d.to(der.g.dtype), res.multipliers
        active = [("u" if side > 0 else "l") + str(i) for i, side in enumerate(res.active.tolist()) if side]
        if stochastic:
            d = trust_region(d, der.g, h)
    if curvature_metric:
        floor = float(der.g.norm()) / math.sqrt(GAUSS_NEWTON_FLOOR_SHIFT)
        radius = recent_radius(state, floor) if state.recent_steps else floor
    else:
        radius = recent_radius(state, float((der.g / h).norm()))
    capped = float(d.norm()) > radius
    return Direction(cap_norm(d, radius), y, status, qp_bounds, active, radius, capped, time.perf_counter() - t0)


def restoration_step(h64: torch.Tensor, J64: torch.Tensor, qp_bounds: tuple, cap: float,
                     limited: bool) -> torch.Tensor | None:
    """:func:`normal_step`, scaled to ``||v|| <= cap`` when ``limited``; None when its QP fails."""
    v_step = normal_step(h64, J64, qp_bounds)
    if v_step is None:
        return None
    norm_v = float(v_step.norm())
    return v_step * (cap / norm_v) if limited and norm_v > cap else v_step


def _row_violations(c: list[float], lower: list[float], upper: list[float]) -> list[float]:
    """:func:`solvers.problem.row_violations` in Python floats (a few rows: no tensor overhead)."""
    return [max(ci - ui, 0.0) + max(li - ci, 0.0) for ci, li, ui in zip(c, lower, upper)]


def total_violation(c: list[float], lower: list[float], upper: list[float]) -> float:
    """:func:`solvers.problem.violation` in Python floats."""
    return sum(_row_violations(c, lower, upper))


def hessian_diag(g: torch.Tensor, v: torch.Tensor, first: bool, options: StepOptions,
                 curvature: Callable[[], torch.Tensor] | None = None, refresh: bool = True) -> torch.Tensor:
    """The QP's diagonal metric ``h`` after updating ``v`` in place: ``h = sqrt(v + mu)`` with Adam
    ``v <- b2 v + (1 - b2) g^2`` (``(1 - b2) g^2`` at the first step) or AdaGrad ``v += g^2``; or
    ``h = v + mu`` with ``v <- b v + (1 - b) G``, ``b = GAUSS_NEWTON_DECAY`` (``G`` at the first step),
    ``G = curvature()`` the Gauss-Newton diagonal of the objective batch
    (:func:`solvers.curvature.gauss_newton_diagonal`), updated only when ``refresh`` (every
    ``GAUSS_NEWTON_EVERY`` iterations: it costs a forward pass, and the curvature moves slowly): a
    diagonal Newton metric, in the units of the loss's curvature rather than of its gradient."""
    if options.hessian_ == "gauss-newton":
        if not refresh:
            return v + options.hessian_shift_
        if curvature is None:
            raise RuntimeError("hessian='gauss-newton': the derivatives carry no curvature (a model the "
                               "engine did not recognise as a feed-forward network)")
        G = curvature().to(v.dtype)
        if first:
            v.copy_(G)
        else:
            v.mul_(GAUSS_NEWTON_DECAY).add_(G, alpha=1.0 - GAUSS_NEWTON_DECAY)
        return v + options.hessian_shift_
    g = g.detach()
    if options.hessian_ == "adagrad":
        v.addcmul_(g, g)
    elif first:
        torch.mul(g, g, out=v).mul_(1.0 - options.beta2)
    else:
        v.mul_(options.beta2).addcmul_(g, g, value=1.0 - options.beta2)
    return torch.add(v, options.hessian_shift_).sqrt_()


class RelaxationNotices(Protocol):
    """The state :func:`solve_qp` uses to warn once per fit about a relaxed or failed QP."""

    iteration: int
    warned_relaxed: bool
    warned_relaxed_failed: bool


def solve_qp(g64: torch.Tensor, h64: torch.Tensor, J64: torch.Tensor, c: torch.Tensor, lower: torch.Tensor,
             upper: torch.Tensor, state: RelaxationNotices,
             multipliers_only: bool = False) -> tuple[QPResult, str, tuple[torch.Tensor, torch.Tensor]]:
    """``min g'd + 1/2 d'Hd  s.t.  lower <= c + J d <= upper``, the bounds relaxed when infeasible (the
    first time with an :class:`SQPWarning`): the result, "normal" or "relaxed", and ``(lo, hi)``.
    ``multipliers_only``: :func:`solvers.qp.diagonal_qp`'s (its result may then carry no ``d``)."""
    lo, hi = lower - c, upper - c
    res = diagonal_qp(g64, h64, J64, lo, hi, multipliers_only=multipliers_only)
    if res.status == "optimal":
        return res, QP_NORMAL, (lo, hi)
    relax = least_violation_bounds(lo, hi, J64, h64)
    lo, hi = relax.lo, relax.hi
    res = diagonal_qp(g64, h64, J64, lo, hi, multipliers_only=multipliers_only)
    if res.status != "optimal":  # never an exception mid-training: the normal step meets the relaxed bounds
        res = _least_violation_step(res, relax.v, J64, lo, hi, state)
    if not state.warned_relaxed:
        warnings.warn(
            "SQP: the linearised constraints were infeasible; a relaxed step was taken "
            "(least-violation bounds). See history column 'qp_status'.", SQPWarning, stacklevel=3)
        state.warned_relaxed = True
    return res, QP_RELAXED, (lo, hi)


def _least_violation_step(failed: QPResult, v: torch.Tensor, J: torch.Tensor, lo: torch.Tensor, hi: torch.Tensor,
                          state: RelaxationNotices) -> QPResult:
    """The least-violation step ``v``, which meets the relaxed bounds, with zero multipliers, when the
    relaxed QP itself failed (degenerate rows of a small batch); warns once per fit."""
    if not state.warned_relaxed_failed:
        warnings.warn(f"SQP: the relaxed QP subproblem failed ({failed.status!r}) at iteration {state.iteration}; "
                      "the least-violation step was taken instead (no objective decrease in that step). Usually "
                      "a mini-batch too small for the constraint rows: try a larger batch_size.", SQPWarning,
                      stacklevel=4)
        state.warned_relaxed_failed = True
    w = J @ v
    excess = torch.clamp(torch.maximum(w - hi, lo - w), min=0.0)
    m = int(J.shape[0])
    return QPResult(d=v, multipliers=torch.zeros(m, dtype=torch.float64), active=torch.zeros(m, dtype=torch.int8),
                    status="optimal", objective=float("nan"), kkt_residual=float("nan"),
                    max_violation=float(excess.max()) if m else 0.0, degenerate=True, method="least_violation",
                    iterations=0)


def trust_region(d: torch.Tensor, g: torch.Tensor, h: torch.Tensor) -> torch.Tensor:
    """``d`` scaled down to ``||d|| <= TRUST_RATIO * ||g / h||`` (see :func:`sqp_step`)."""
    return cap_norm(d, TRUST_RATIO * float((g / h).norm()))


def cap_norm(d: torch.Tensor, radius: float) -> torch.Tensor:
    """``d`` scaled down to ``||d|| <= radius`` (unchanged when ``radius`` is 0 or infinite)."""
    norm_d = float(d.norm())
    if norm_d > radius > 0:
        d = d * (radius / norm_d)
    return d


def recent_radius(state: SQPState, floor: float = 0.0) -> float:
    """``Delta = max(TRUST_GROWTH * median_high(||d_j||), floor)`` over the last ``TRUST_MEMORY`` steps;
    infinite before any, so a run's first constrained step is never capped.

    ``floor = ||g / h||``: a step no longer than plain descent is no anomaly, and a run whose steps
    have shrunk near a KKT point can still follow moving bounds. The median rather than the largest
    step moves only when half the memory has changed, so one long step does not open the region
    (constants: ``benchmarks/results/solver_notes.md``)."""
    recent = state.recent_steps
    return max(TRUST_GROWTH * statistics.median_high(recent), float(floor)) if recent else math.inf


def remember_step(state: SQPState, norm_d: float, capped: bool = False) -> None:
    """Append ``||d||`` to a new list ``state.recent_steps`` (a checkpoint keeps its own); a capped step
    counts as the median it was capped by, or capped steps would widen the region every iteration."""
    recent = list(state.recent_steps)
    if capped and recent:
        norm_d = statistics.median_high(recent)
    state.recent_steps = (recent + [float(norm_d)])[-TRUST_MEMORY:]


def update_merit_and_ratio(state: SQPState, red: float, gd: float, dHd: float, dnorm2: float,
                           options: StepOptions) -> tuple[float, float, float]:
    """[B21] merit ``tau`` and ratio ``xi`` after a step ``d``, stored in ``state`` and returned with ``Dl``.

    ``tau_trial = (1 - sigma) Red / (g'd + max(d'Hd, 0))``, ``Red = V(c) - V(c + Jd)``;
    ``Dl = -tau g'd + Red``; ``xi_trial = Dl / (tau ||d||^2)``. Each only decreases, by at least the
    factor ``1 - epsilon``, never below ``tau_min``/``xi_min``."""
    den = gd + max(dHd, 0.0)
    tau, xi = state.tau, state.xi
    tau_trial = (1.0 - options.sigma) * red / den if (den > 0 and red > 0) else math.inf
    if tau > tau_trial:
        tau = max(options.tau_min, min((1.0 - options.epsilon) * tau, tau_trial))
    dl = -tau * gd + red
    if dnorm2 > 0:
        xi_trial = dl / (tau * dnorm2) if dl > 0 else options.xi_min
        if xi > xi_trial:
            xi = max(options.xi_min, min((1.0 - options.epsilon) * xi, xi_trial))
    state.tau, state.xi = tau, xi
    return tau, xi, dl


def normal_step(h64: torch.Tensor, J64: torch.Tensor, bounds: tuple) -> torch.Tensor | None:
    """``v = argmin 1/2 v'Hv  s.t.  lo <= J v <= hi`` (float64 ``h``, ``J``): the least-``H``-norm
    step onto the linearised feasible set (``lo = l - c``, ``hi = u - c``, relaxed if they were)."""
    res = diagonal_qp(torch.zeros_like(h64), h64, J64, bounds[0], bounds[1])
    return res.d if res.status == "optimal" else None


def adaptive_step(state: SQPState, dl: float, V: float, dnorm2: float, options: StepOptions) -> float:
    """[B21] Alg. 3.1 step size, capped at 1, from the model reduction ``dl``, the violation ``V``
    and ``||d||^2`` with the state's ``beta``, ``tau``, ``xi`` and Lipschitz estimates ``L``, ``Gamma``."""
    if dnorm2 == 0.0:
        return 0.0
    beta, tau, xi, L, Gamma = state.beta, state.tau, state.xi, state.L, state.Gamma
    lip = tau * L + Gamma
    D = lip * dnorm2
    a_min = 2.0 * (1.0 - options.eta) * beta * xi * tau / lip
    a_max = a_min + options.theta * beta**2
    a_hat = 2.0 * (1.0 - options.eta) * beta * dl / D
    a_tilde = a_hat - 4.0 * V / D
    if a_hat < 1.0:
        alpha = min(max(a_hat, a_min), a_max)
    elif a_tilde <= 1.0 <= a_hat:
        alpha = 1.0
    else:
        alpha = min(max(a_tilde, a_min), a_max)
    return min(alpha, 1.0)


def lipschitz(probe: Callable[[], Derivatives], params: list[torch.Tensor], der: Derivatives, seed: int,
              displacement: float = 1e-4) -> tuple[float, float]:
    """Finite-difference Lipschitz estimates along a random unit ``u`` (from ``seed + 1``):
    ``L = ||g(w + e u) - g(w)|| / e``, ``Gamma = sum_i ||J_i(w + e u) - J_i(w)|| / e``."""
    gen = torch.Generator().manual_seed(int(seed) + 1)
    u = torch.randn(der.g.numel(), generator=gen, dtype=der.g.dtype)
    u = u / u.norm()
    shift_parameters(params, u, displacement)
    try:
        der2 = probe()
    finally:
        shift_parameters(params, u, -displacement)
    L = float((der2.g - der.g).norm()) / displacement
    Gamma = float((der2.J - der.J).norm(dim=1).sum()) / displacement if der.J.numel() else 0.0
    return max(L, 1e-8), max(Gamma, 0.0)


def calibrate(offset: torch.Tensor, gap: torch.Tensor, lower: torch.Tensor, upper: torch.Tensor,
              weight: float) -> torch.Tensor:
    """``b <- (1 - w) b + w (c_exact - c)``: the QP then solves ``l - b <= c + J d <= u - b``, so that the
    exact rows meet the bounds despite the surrogate's slowly changing bias; ``b = 0`` on unbounded
    rows. A fairopt extension of [SQP] Alg. 1."""
    w = weight
    tensors = (offset, gap, lower, upper)
    if all(t.dtype == torch.float64 and t.device.type == "cpu" and t.shape == offset.shape and t.dim() == 1
           for t in tensors):  # a few rows: the same float64 arithmetic in Python floats, without tensor overhead
        return torch.tensor([(1.0 - w) * b + w * (r if (math.isfinite(lo) or math.isfinite(hi)) and math.isfinite(r)
                                                  else 0.0)
                             for b, r, lo, hi in zip(*(t.tolist() for t in tensors))], dtype=torch.float64)
    finite = torch.isfinite(lower) | torch.isfinite(upper)
    gap = torch.where(finite & torch.isfinite(gap), gap, torch.zeros_like(gap))
    return (1.0 - w) * offset + w * gap


def integral_push(push: list[float], exact: list[float], lower: list[float], upper: list[float]) -> list[float]:
    """One update of the integral tightening ``p`` of the working bounds ``l - b - p <= c + J d <= u - b - p``
    from the exact rows ``c_exact``: with the signed excess ``e_i = max(c_i - u_i, 0) - max(l_i - c_i, 0)``,
    ``p <- p + e`` while some row is violated, ``p <- p / 2`` once all hold (integral action without
    wind-up; :func:`solvers.sqp.endgame.polish`, :class:`solvers.boosting.step.WorkingBounds`).
    A few rows: Python floats."""
    excess = [max(c - u, 0.0) - max(lo - c, 0.0) for c, lo, u in zip(exact, lower, upper)]
    if any(e != 0 for e in excess):
        return [p + e for p, e in zip(push, excess)]
    return [0.5 * p for p in push]


def shift_parameters(params: list[torch.Tensor], u: torch.Tensor, scale: float) -> None:
    """``params += scale * u`` in place, ``u`` the flat vector over all of ``params``."""
    with torch.no_grad():
        offset = 0
        for p in params:
            k = p.numel()
            p.add_(u[offset : offset + k].view_as(p), alpha=scale)
            offset += k
