"""The normal step and relaxed bounds of an infeasible linearisation: :func:`least_violation_bounds`.

In the m-space, ``M = J H^{-1} J'``:

1. the reachable values ``J v`` are ``range(M)``, spanned by ``w = B z`` (eigenvectors of the
   row-normalised ``M`` above 1e-12 times the largest eigenvalue). The l1 LP ``min sum s`` with
   ``lo_i - s_lo_i <= B_i z <= hi_i + s_up_i``, ``s >= 0`` and a box ``|z| <= R`` is bounded by
   construction; ``R`` is enlarged (up to three times, by 1e3) while a box side binds. This gives
   the least violation ``V*``;
2. LP minimisers are not unique, so a second LP picks among points with
   ``V <= V* + tol * sum_i (1 + max finite |bound_i|)`` the one that moves the values least,
   ``min sum_i |w_i|``;
3. ``v = argmin 1/2 v'Hv  s.t.  min(lo, w*) <= Jv <= max(hi, w*)`` (:func:`diagonal_qp` with
   ``g = 0``), or the LP point's step ``H^{-1} J' y`` (``M y = w*``) if that QP fails or rounding
   left it more violating;
4. ``lo' = min(lo, Jv - e)``, ``hi' = max(hi, Jv + e)`` on the violated sides,
   ``e = PRIMAL_SLACK (1 + |Jv|)``, so that the relaxed QP has room around ``v``.
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
from solvers.qp.solve import PRIMAL_SLACK, check_options, dual_iterations, pick_method, step_from_multipliers
from solvers.qp.space import NUMPY_DTYPES, Inputs, Space, build_space, validate_inputs

__all__ = ["least_violation_bounds"]

logger = logging.getLogger(__name__)


def _cast_outwards(inputs: Inputs, lo: np.ndarray, hi: np.ndarray) -> tuple[torch.Tensor, torch.Tensor]:
    """Bounds in the output dtype, rounded outwards so that the cast box contains ``[lo, hi]`` (to
    nearest for a dtype numpy lacks)."""
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
    """Steps 1-2 (module docstring); :class:`LPFailure` or ``LinAlgError`` when the first LP fails, a
    failed second LP only loses the least move."""
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
    """Step 3 (module docstring): the least ``H``-norm step in the box, or the LP point's step."""
    lp_step = -step_from_multipliers(inputs, target.y)  # g = 0, so J v = M y = w*
    box = build_space(inputs, box_lo, box_hi, space.tol)
    sol = solve_space(box, pick_method("active_set", box), rank_tol, dual_iterations(box))
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
    """``lo' = min(lo, w - e)``, ``hi' = max(hi, w + e)`` on the sides ``w`` violates,
    ``e = PRIMAL_SLACK (1 + |w|)``: relaxing exactly to ``w`` makes ``v`` a degenerate vertex that the
    active-set method computes only to rounding amplified by the conditioning of ``M``."""
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

    When ``lo <= J d <= hi`` has no solution (``lo = l - c``, ``hi = u - c`` in the SQP), take the
    normal step ``v`` minimising

    .. math::  V(Jv; lo, hi) = \\sum_i \\max(J_i v - hi_i, 0) + \\max(lo_i - J_i v, 0)

    and relax the bounds to ``lo' = min(lo, Jv)``, ``hi' = max(hi, Jv)`` (widened by the step
    accuracy), so that the QP is feasible with the least violation any step reaches (the four steps
    of the module docstring). Within the summed row tolerances the bounds are kept and ``v`` is the
    least-norm feasible step. If HiGHS fails on the first LP, the zero step with every row relaxed
    to contain 0 is returned with a :class:`LeastViolationWarning`.

    Parameters
    ----------
    lo, hi : tensor (m,)
        Bounds on ``J v`` (``-inf``/``+inf`` allowed, ``lo <= hi``).
    J : tensor (m, p)
        Constraint Jacobian (rank deficiency, duplicated and zero rows allowed).
    h : tensor (p,)
        Diagonal Hessian (metric of the step), ``> 0``.
    tol, rank_tol : float
        As in :func:`diagonal_qp`.

    Returns
    -------
    RelaxedBounds
        ``v``, ``w = J v``, relaxed ``lo``/``hi`` in the dtype of ``J, h`` (rounded outwards) and the
        violation of ``v``.

    Warns
    -----
    LeastViolationWarning
        The LP failed, or its box still bound after the enlargements.
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
