"""The QP of the SQP step, one function over several methods (``solver=``): :func:`diagonal_qp`.

Every returned solution passed its KKT check (``tol``) and its step meets every row within
``base_tol + PRIMAL_SLACK (1 + |bound|)`` (a row the presolve merged or dropped up to its rounding,
:mod:`solvers.qp.presolve`), else the QP is confirmed infeasible or solved again by OSQP. Rows within
``asin(sqrt(rank_tol))`` of the span of others count as dependent (``degenerate``: exact for bounds
perturbed within ``tol``). Nearly parallel active rows with conflicting bounds
force large multipliers, and ``d`` recovered from ``y`` carries a rounding error of about
``eps * sum_j |M_ij y_j|``, which the tolerance allows for.
"""

from __future__ import annotations

import math
from typing import Any, Literal

import numpy as np
import torch

from solvers.qp.active_set import ENUMERATION_HARD_LIMIT, active_from_multipliers, solve_space
from solvers.qp.lp import confirm_infeasible, row_violation
from solvers.qp.presolve import reduce_rows
from solvers.qp.reference import solve_with_osqp
from solvers.qp.results import QPResult
from solvers.qp.scalar import solve_scalar
from solvers.qp.space import Inputs, Space, build_space, is_degenerate, validate_inputs
from solvers.validation import check_choice, positive_float, positive_int

__all__ = ["ENUMERATION_MAX_ROWS", "check_options", "diagonal_qp", "pick_method", "step_from_multipliers"]


#: Most constrained rows for which ``solver="active_set"`` enumerates; 0 as the dual method was
#: faster for every m timed (``benchmarks/results/solver_notes.md``).
ENUMERATION_MAX_ROWS = 0

Solver = Literal["active_set", "enumeration", "dual", "osqp"]
_SOLVERS = ("active_set", "enumeration", "dual", "osqp")


# --------------------------------------------------------------------------------------
# Public API
# --------------------------------------------------------------------------------------
def step_from_multipliers(inputs: Inputs, y: np.ndarray) -> np.ndarray:
    """``d(y) = -H^{-1} (g + J' y)`` (O(p m))."""
    return -(inputs.g + inputs.J.T @ y) / inputs.h


def _failed(inputs: Inputs, status: str, method: str, iterations: int) -> QPResult:
    nan = float("nan")
    active = torch.zeros(inputs.lo.size, dtype=torch.int8, device=inputs.device)
    return QPResult(None, None, active, status, nan, nan, nan, False, method, iterations)


def _assemble(
    inputs: Inputs,
    space: Space,
    d: np.ndarray,
    y: np.ndarray,
    active: np.ndarray,
    method: str,
    iterations: int,
    rank_tol: float,
) -> QPResult:
    """Objective, KKT residual, violation and degeneracy of ``(d, y)``; cast to the output dtype."""
    g, h, J = inputs.g, inputs.h, inputs.J
    residual = g + h * d + J.T @ y
    return QPResult(
        d=inputs.to_torch(d),
        multipliers=inputs.to_torch(y),
        active=torch.as_tensor(active, dtype=torch.int8, device=inputs.device),
        status="optimal",
        objective=float(g @ d + 0.5 * h @ (d * d)),
        kkt_residual=float(np.max(np.abs(residual), initial=0.0)),
        max_violation=float(np.max(row_violation(J @ d, inputs.lo, inputs.hi), initial=0.0)),
        degenerate=is_degenerate(space, y, rank_tol),
        method=method,
        iterations=iterations,
    )


#: The m-space check allows ``eps * sum_j |M_ij y_j|``, but the step itself must meet every row
#: within ``base_tol + PRIMAL_SLACK * (1 + |bound|)``: beyond it large multipliers hid a real
#: violation (then "infeasible", or solved again by OSQP).
PRIMAL_SLACK = 1e-7
#: Factors by which :func:`_checked_step` tightens ``tol`` for its further m-space solves, in turn.
REFINED_TOL_FACTORS = (1e-2, 1e-4)


def dual_iterations(space: Space, max_iter: int | None = None) -> int:
    """The dual method's iteration cap: ``max_iter``, or ``50 + 20 m`` for the ``m`` rows of ``space``."""
    return max_iter or 50 + 20 * space.m


def _primal_step_feasible(inputs: Inputs, space: Space, d: np.ndarray, extra: np.ndarray | float = 0.0) -> bool:
    """The float64 step meets every row within the slack above (and ``extra`` more)."""
    lo, hi = inputs.lo, inputs.hi
    w = inputs.J @ d
    with np.errstate(invalid="ignore"):  # inf - inf on a missing side: no excess there
        below = np.where(np.isfinite(lo), lo - w - PRIMAL_SLACK * (1.0 + np.abs(lo)), -np.inf)
        above = np.where(np.isfinite(hi), w - hi - PRIMAL_SLACK * (1.0 + np.abs(hi)), -np.inf)
    return bool(np.all(np.maximum(below, above) <= space.base_tol + extra))


def pick_method(solver: str, space: Space) -> str:
    """Resolve ``"active_set"`` by the number of constrained (non-free, non-zero) rows."""
    constrained = int(np.count_nonzero((space.has_lo | space.has_hi) & ~space.zero))
    if solver == "active_set":
        return "enumeration" if constrained <= ENUMERATION_MAX_ROWS else "dual"
    if solver == "enumeration" and constrained > ENUMERATION_HARD_LIMIT:
        raise ValueError(
            f"solver: 'enumeration' is limited to {ENUMERATION_HARD_LIMIT} constrained rows, "
            f"got {constrained}; use 'dual' or 'active_set'"
        )
    return solver


def check_options(solver: str, tol: float, rank_tol: float, max_iter: int | None) -> tuple[float, float]:
    """``(tol, rank_tol)`` checked (finite, positive) with ``solver`` one of the methods and ``max_iter`` a positive
    integer or None; a ValueError naming the option otherwise."""
    check_choice(solver, _SOLVERS, "solver")
    try:
        if max_iter is not None:
            positive_int(max_iter, "max_iter")
        return positive_float(tol, "tol"), positive_float(rank_tol, "rank_tol")
    except ValueError as exc:  # diagonal_qp has always said "<name>: must be ..." (tests match it)
        raise ValueError(str(exc).replace(": expected ", ": must be ", 1)) from None


def diagonal_qp(
    g: Any,
    h: Any,
    J: Any,
    lo: Any,
    hi: Any,
    *,
    solver: Solver = "active_set",
    tol: float = 1e-9,
    rank_tol: float = 1e-10,
    max_iter: int | None = None,
    multipliers_only: bool = False,
) -> QPResult:
    """Exact solution of ``min_d g'd + 1/2 d' diag(h) d  s.t.  lo <= J d <= hi``.

    The SQP step subproblem (``lo = l - c``, ``hi = u - c``), solved in the constraint space with
    ``d = -H^{-1}(g + J' y)``, ``y_i > 0`` at an active upper side, ``< 0`` at a lower
    (:mod:`solvers.qp`).

    Parameters
    ----------
    g : tensor (p,)
        Gradient (linear term).
    h : tensor (p,)
        Diagonal of the Hessian, every entry ``> 0``.
    J : tensor (m, p)
        Constraint Jacobian; ``m = 0`` is allowed (then ``d = -g / h``).
    lo, hi : tensor (m,)
        Bounds on ``J d``: ``-inf``/``+inf`` for a missing side, ``lo == hi`` for an equality.
    solver : {"active_set", "enumeration", "dual", "osqp"}
        "active_set": up to four plain rows by :mod:`solvers.qp.scalar`, else enumeration ([SQP]
        Alg 1) up to :data:`ENUMERATION_MAX_ROWS` constrained rows, else the dual method
        (Goldfarb-Idnani). "enumeration" (at most 10 rows; the dual method when no set passes) and
        "dual" force one; "osqp" solves it with OSQP through ``qpsolvers``, for cross-checks.
    tol : float
        Row ``i`` is feasible (binding) within ``tol * (1 + |q_i| + max finite |bound_i| +
        sum_j |M_ij| |y_j|)``; a multiplier may have the wrong sign by ``tol * (1 + max|y|)``.
        Also OSQP's ``eps_abs``/``eps_rel``.
    rank_tol : float
        A row counts as a linear combination of others when the squared sine of its angle to
        their span (in the ``H^{-1}`` metric) is at most ``rank_tol``.
    max_iter : int, optional
        Iteration cap of the dual method (default ``50 + 20 m``) or of OSQP (default 200000).
    multipliers_only : bool, default False
        For a caller that uses ``y`` and the active set but never ``d`` (a boosting round hands its
        tree ``g + J'y``, :mod:`solvers.boosting.step`): the scalar path then stops at the accepted
        active set, whose KKT test in the constraint space is the optimality test, and returns
        ``d = None`` with NaN ``objective``, ``kkt_residual`` and ``max_violation`` (with many
        variables, forming ``d`` and checking it is most of its work); the other paths return
        their full result.

    Returns
    -------
    QPResult
        ``d`` and ``multipliers`` (computed in float64, returned in the inputs' dtype and device),
        None unless ``status == "optimal"``: "infeasible" is confirmed by a least-violation LP,
        "numerical" means no solution passed the KKT check.
    """
    tol, rank_tol = check_options(solver, tol, rank_tol, max_iter)
    if solver == "active_set":  # a few plain rows: the enumeration in scalar arithmetic
        answer = solve_scalar(g, h, J, lo, hi, tol, rank_tol, PRIMAL_SLACK, multipliers_only)
        if answer is not None:
            return answer
    inputs = validate_inputs(g, h, J, lo, hi)
    space = build_space(inputs, inputs.lo, inputs.hi, tol)
    if solver == "osqp":
        out = solve_with_osqp(inputs, tol, max_iter)
        if out.status != "optimal":
            return _failed(inputs, out.status, "osqp", out.iterations)
        active = active_from_multipliers(out.y, space.eq, tol)
        return _assemble(inputs, space, out.x, out.y, active, "osqp", out.iterations, rank_tol)
    reduced = _solve_reduced(inputs, space, solver, rank_tol, max_iter)
    if reduced is not None:
        return reduced
    sol = solve_space(space, pick_method(solver, space), rank_tol, dual_iterations(space, max_iter))
    if sol.y is None and sol.status != "numerical":
        return _failed(inputs, sol.status, sol.method, sol.iterations)
    return _checked_step(inputs, space, sol, (tol, rank_tol), max_iter)


def _solve_reduced(inputs: Inputs, space: Space, solver: str, rank_tol: float,
                   max_iter: int | None) -> QPResult | None:
    """The QP solved without its parallel rows and the rows others fix (:func:`solvers.qp.presolve.reduce_rows`),
    the multipliers carried back and the step checked on every original row (a merged or dropped row up to
    ``||r_i||_{H^-1} ||d||_H``, its rounding); None when nothing repeats, or
    the reduced problem has no checked solution (the caller then solves the QP as given)."""
    reduction = reduce_rows(inputs, space, rank_tol, PRIMAL_SLACK)
    if reduction is None:
        return None
    small = reduction.inputs
    reduced = build_space(small, small.lo, small.hi, space.tol)
    sol = solve_space(reduced, pick_method(solver, reduced), rank_tol, dual_iterations(reduced, max_iter))
    if sol.y is None:
        return None
    d = step_from_multipliers(small, sol.y)
    missed = reduction.outside * math.sqrt(float(inputs.h @ (d * d)))  # ||r_i||_{H^-1} ||d||_H: presolve
    if not (_primal_step_feasible(small, reduced, d) and _primal_step_feasible(inputs, space, d, missed)):
        return None
    y, active = reduction.expand(sol.y, sol.active)
    return _assemble(inputs, space, d, y, active, sol.method, sol.iterations, rank_tol)


def _checked_step(inputs: Inputs, space: Space, sol: Any, tolerances: tuple[float, float],
                  max_iter: int | None) -> QPResult:
    """The step of ``sol`` if it meets every row; else (or when the method found no solution, "numerical") the
    step of the m-space problem solved again at ``f * tol`` for ``f`` in :data:`REFINED_TOL_FACTORS`, the first
    that does; else "infeasible" (confirmed by the LP) or OSQP's.

    Why more solves: the m-space check lets a row exceed its bound by ``tol * sum_j |M_ij y_j|``,
    which large multipliers (an ill-conditioned ``M`` near a vertex) make larger than the primal
    slack. A nearly dependent row then stays outside the working set although the optimum needs it,
    e.g. when the feasible set shrinks to one point, as after a relaxation that leaves several
    equalities and widened sides meeting at the least-violation step. The tighter tolerance makes
    the dual method take that row in; a feasible set that shrinks to a point where rows of very different
    norms meet (a relaxed problem of 12 rows in 5 variables, row norms 0.13 to 62 and curvatures 0.3 to 693)
    can need a second tightening."""
    tol, rank_tol = tolerances
    if sol.y is not None:
        d = step_from_multipliers(inputs, sol.y)
        if _primal_step_feasible(inputs, space, d):
            return _assemble(inputs, space, d, sol.y, sol.active, sol.method, sol.iterations, rank_tol)
    iterations = sol.iterations
    for factor in REFINED_TOL_FACTORS:
        refined = solve_space(build_space(inputs, inputs.lo, inputs.hi, tol * factor), sol.method, rank_tol,
                              dual_iterations(space, max_iter))
        iterations += refined.iterations
        if refined.y is not None:
            d = step_from_multipliers(inputs, refined.y)
            if _primal_step_feasible(inputs, space, d):
                return _assemble(inputs, space, d, refined.y, refined.active, refined.method, iterations, rank_tol)
    if confirm_infeasible(space):  # a failure reports the dual method's iterations of every solve
        return _failed(inputs, "infeasible", sol.method, iterations)
    out = solve_with_osqp(inputs, tol, max_iter)
    if out.status == "optimal" and _primal_step_feasible(inputs, space, out.x):
        active = active_from_multipliers(out.y, space.eq, tol)
        return _assemble(inputs, space, out.x, out.y, active, "osqp", out.iterations, rank_tol)
    return _failed(inputs, "numerical", sol.method, iterations)
