"""The normal step and relaxed bounds of an infeasible linearisation:
:func:`least_violation_bounds`.

Computation (all in the m-space, ``M = J H^{-1} J'``):

1. the reachable values ``J v`` are ``range(M)``, spanned by an explicit basis
   ``w = B z`` (eigenvectors of the row-normalised ``M``; directions with an eigenvalue
   at most 1e-12 times the largest are dropped: rounding noise of dependent rows).
   The l1 LP ``min sum s`` over ``(z, s_up, s_lo)`` with ``B_i z - s_up_i <= hi_i``,
   ``lo_i - B_i z <= s_lo_i``, ``s >= 0`` and a box ``|z| <= R`` is bounded by
   construction (every variable is boxed or nonnegative with a nonnegative cost), so
   HiGHS always has a finite optimum. ``R`` is a thousand times the size a single row
   needs to reach its bound and is enlarged (up to three times, by 1e3) while a box
   side binds with a non-zero reduced cost; an optimum with no binding side is an
   optimum without the box. This gives the least violation ``V*``;
2. LP minimisers are not unique (e.g. duplicated rows with disjoint bounds: any value
   between them is optimal), so a second LP of the same form picks, among points with
   ``V <= V* + tol * sum_i (1 + max finite |bound_i|)``, the point ``w*``
   that moves the constraint values least, ``min sum_i |w_i|``;
3. the least ``H``-norm step in the box relaxed to ``w*``,
   ``v = argmin 1/2 v'Hv  s.t.  min(lo, w*) <= Jv <= max(hi, w*)`` (an exact
   :func:`diagonal_qp` with ``g = 0``), has the same violation; the relaxed bounds are
   recomputed from ``Jv`` (they can only tighten). If that QP fails, or rounding left
   its step more violating than the LP point's step ``H^{-1} J' y`` (``M y = w*``),
   the LP point's step is used.
4. the relaxed bounds ``lo' = min(lo, Jv - e)``, ``hi' = max(hi, Jv + e)`` on the violated
   sides, ``e = PRIMAL_SLACK (1 + |Jv|)`` (1e-7 relative: the step accuracy
   :func:`diagonal_qp` states), so the relaxed QP has room around ``v`` instead of a
   degenerate vertex at it.
"""

from __future__ import annotations

import logging
import warnings
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from solvers.qp.active_set import solve_space
from solvers.qp.lp import (LeastViolationWarning, LPFailure, box_still_binding_message, least_violation_point,
                           range_basis, row_violation)
from solvers.qp.results import RelaxedBounds
from solvers.qp.solve import PRIMAL_SLACK, check_options, pick_method, step_from_multipliers
from solvers.qp.space import NUMPY_DTYPES, Inputs, Space, build_space, validate_inputs

__all__ = ["least_violation_bounds"]

logger = logging.getLogger(__name__)


def _cast_outwards(inputs: Inputs, lo: np.ndarray, hi: np.ndarray) -> tuple[torch.Tensor, torch.Tensor]:
    """Bounds in the output dtype, rounded outwards so that the cast box contains ``[lo, hi]``.

    (A dtype numpy lacks, e.g. bfloat16, is cast to nearest.)
    """
    np_dtype = NUMPY_DTYPES.get(inputs.dtype)
    if np_dtype is None:
        return inputs.to_torch(lo), inputs.to_torch(hi)
    lo_c, hi_c = lo.astype(np_dtype), hi.astype(np_dtype)
    lo_c = np.where(lo_c > lo, np.nextafter(lo_c, np_dtype(-np.inf)), lo_c)
    hi_c = np.where(hi_c < hi, np.nextafter(hi_c, np_dtype(np.inf)), hi_c)
    return inputs.to_torch(lo_c), inputs.to_torch(hi_c)


@dataclass(frozen=True)
class _Target:
    """The least-violation point ``w = M y`` the relaxed box is built around."""

    w: np.ndarray
    y: np.ndarray
    feasible: bool  # the least violation is within the summed row tolerances
    box_binding: bool  # the LP's box still bound after its enlargements


def _least_violation_target(space: Space) -> _Target:
    """Steps 1-2 of :func:`least_violation_bounds`: least violation, then least move.

    Raises :class:`LPFailure` (or ``LinAlgError``) when the first LP cannot be solved; a
    failure of the second LP only loses the least-move choice (logged).
    """
    basis = range_basis(space.M)
    feasibility_tol = float(space.base_tol.sum())
    w, y, binding = least_violation_point(basis, space.lo, space.hi)
    least = float(row_violation(w, space.lo, space.hi).sum())
    if least <= feasibility_tol:
        return _Target(w, y, True, binding)
    try:
        w2, y2, binding2 = least_violation_point(basis, space.lo, space.hi, violation_cap=least + feasibility_tol)
    except LPFailure as exc:
        logger.debug("least-move LP failed (%s); using the first least-violation point", exc)
        return _Target(w, y, False, binding)
    return _Target(w2, y2, False, binding or binding2)


def _least_norm_step(
    inputs: Inputs, space: Space, target: _Target, box_lo: np.ndarray, box_hi: np.ndarray, rank_tol: float
) -> np.ndarray:
    """Step 3 of :func:`least_violation_bounds`: the least ``H``-norm step in the box.

    Falls back to the LP point's step ``H^{-1} J' y`` (``J v = M y = w*``) when the QP has
    no solution, or when rounding in an ill-conditioned QP left its step with a larger
    violation than the LP point's (by more than the summed row tolerances).
    """
    lp_step = -step_from_multipliers(inputs, target.y)  # g = 0, so J v = M y = w*
    box = build_space(inputs, box_lo, box_hi, space.tol)
    sol = solve_space(box, pick_method("active_set", box), rank_tol, 50 + 20 * box.m)
    if sol.y is None:
        logger.debug("least-norm step in the relaxed box failed (%s); using the LP point", sol.status)
        return lp_step
    qp_step = step_from_multipliers(inputs, sol.y)
    qp_violation = float(row_violation(inputs.J @ qp_step, space.lo, space.hi).sum())
    lp_violation = float(row_violation(inputs.J @ lp_step, space.lo, space.hi).sum())
    if qp_violation > lp_violation + float(space.base_tol.sum()):
        logger.debug("least-norm step violates %g > %g of the LP point; using the LP point", qp_violation,
                     lp_violation)
        return lp_step
    return qp_step


def _relaxed_box(lo: np.ndarray, hi: np.ndarray, w: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``lo' = min(lo, w - e)``, ``hi' = max(hi, w + e)`` on the sides ``w`` violates, with
    ``e = PRIMAL_SLACK (1 + |w|)``; other sides unchanged.

    Relaxing exactly to ``w`` makes ``v`` a degenerate vertex where more rows touch than
    there are free directions (inconsistent equalities: the relaxed set may be the single
    point ``v``); the active-set method then computes its vertex only to rounding amplified
    by the conditioning of ``M``, and the step can miss the other touching rows by more
    than ``diagonal_qp`` allows (soak: 1.6x its stated accuracy, 10 rows in 5 variables).
    The margin is that stated accuracy, so the relaxed QP keeps room around ``v``.
    """
    margin = PRIMAL_SLACK * (1.0 + np.abs(w))
    lo_r = np.where(w < lo, w - margin, lo)
    hi_r = np.where(w > hi, w + margin, hi)
    return lo_r, hi_r


def _zero_step_relaxation(inputs: Inputs, reason: str) -> RelaxedBounds:
    """The safe fallback: ``v = 0`` and every row relaxed to contain 0, with a warning."""
    warnings.warn(
        f"least_violation_bounds: the least-violation LP failed ({reason}); falling back to the zero step "
        "with every row relaxed to contain 0 (lo' = min(lo, 0), hi' = max(hi, 0)). The relaxed QP is "
        "feasible, but the relaxation may be larger than the least one.",
        LeastViolationWarning,
        stacklevel=3,
    )
    m, p = inputs.J.shape
    zero_w = np.zeros(m)
    lo_r, hi_r = _cast_outwards(inputs, np.minimum(inputs.lo, 0.0), np.maximum(inputs.hi, 0.0))
    return RelaxedBounds(
        v=inputs.to_torch(np.zeros(p)),
        w=inputs.to_torch(zero_w),
        lo=lo_r,
        hi=hi_r,
        violation=float(row_violation(zero_w, inputs.lo, inputs.hi).sum()),
    )


def least_violation_bounds(
    lo: Any, hi: Any, J: Any, h: Any, *, tol: float = 1e-9, rank_tol: float = 1e-10
) -> RelaxedBounds:
    """Least-violation normal step and relaxed bounds for an infeasible linearisation.

    When ``lo <= J d <= hi`` has no solution (``lo = l - c``,
    ``hi = u - c`` in the SQP), take a normal step ``v`` minimising the total violation

    .. math::  V(Jv; lo, hi) = \\sum_i \\max(J_i v - hi_i, 0) + \\max(lo_i - J_i v, 0)

    and relax the bounds to ``lo' = min(lo, Jv)``, ``hi' = max(hi, Jv)`` (widened by the step
    accuracy, step 4 below). The QP with ``(lo', hi')`` is feasible (``v`` satisfies it), and
    ``V(Jv) = sum_i (lo_i - lo'_i) + (hi'_i - hi_i)`` (up to that widening) is the least
    violation any step reaches.

    Computation: the four steps of the module docstring (an l1 LP for the least violation,
    a second LP for the least move, the least ``H``-norm step, the widened relaxed bounds).

    When the least violation is within the summed row tolerances the system counts as
    feasible: the bounds are returned unchanged and ``v`` is the least-norm feasible step.

    Fallback: if HiGHS still fails on the first LP (a numerical failure: the LP always
    has an optimum), nothing is raised; a :class:`LeastViolationWarning` is emitted and the
    zero step is returned with every row relaxed to contain 0,
    ``lo' = min(lo, 0)``, ``hi' = max(hi, 0)`` (``v = w = 0``, ``violation = V(0)``), which
    keeps the relaxed QP feasible but may relax more than the least.

    Parameters
    ----------
    lo, hi : tensor (m,)
        Bounds on ``J v`` (``-inf``/``+inf`` allowed, ``lo <= hi``).
    J : tensor (m, p)
        Constraint Jacobian (rank deficiency, duplicated and zero rows allowed).
    h : tensor (p,)
        Diagonal Hessian (metric of the step), ``> 0``.
    tol, rank_tol : float
        As in :func:`diagonal_qp` (``tol`` for the feasibility test and step 2, both for
        the QP of step 3).

    Returns
    -------
    RelaxedBounds
        ``v``, ``w = J v``, relaxed ``lo``/``hi`` (dtype of ``J, h``; rounded outwards when it
        is not float64, so ``lo' <= lo`` and ``hi' >= hi`` always) and the violation of ``v``
        (0 and unchanged bounds when feasible).

    Raises
    ------
    ValueError
        As :func:`diagonal_qp` for bad inputs.

    Warns
    -----
    LeastViolationWarning
        The LP failed (zero-step fallback above), or its box still bound after the
        enlargements (the relaxation is then the least within that box).
    """
    tol, rank_tol = check_options("active_set", tol, rank_tol, None)
    inputs = validate_inputs(None, h, J, lo, hi)
    space = build_space(inputs, inputs.lo, inputs.hi, tol)
    try:
        target = _least_violation_target(space)
    except (LPFailure, np.linalg.LinAlgError) as exc:
        return _zero_step_relaxation(inputs, str(exc))
    if target.box_binding and not target.feasible:
        warnings.warn(box_still_binding_message("least_violation_bounds"), LeastViolationWarning, stacklevel=2)
    if target.feasible:  # keep the bounds; v is the least-norm feasible step
        box_lo, box_hi = inputs.lo, inputs.hi
    else:
        box_lo, box_hi = np.minimum(inputs.lo, target.w), np.maximum(inputs.hi, target.w)
    v = _least_norm_step(inputs, space, target, box_lo, box_hi, rank_tol)
    w = inputs.J @ v
    if target.feasible:
        lo_r, hi_r = inputs.lo, inputs.hi
    else:
        lo_r, hi_r = _relaxed_box(inputs.lo, inputs.hi, w)
    lo_r, hi_r = _cast_outwards(inputs, lo_r, hi_r)
    return RelaxedBounds(
        v=inputs.to_torch(v),
        w=inputs.to_torch(w),
        lo=lo_r,
        hi=hi_r,
        violation=float(row_violation(w, inputs.lo, inputs.hi).sum()),
    )
