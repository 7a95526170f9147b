"""Independent solvers on the same QP, through qpsolvers: OSQP as ``solver="osqp"`` of
:func:`solvers.qp.diagonal_qp`, and :func:`reference_step` (Clarabel by default), the
reference of the tests, the property tests and the soak script."""

from __future__ import annotations

import logging
import warnings
from dataclasses import dataclass

import numpy as np

from solvers.problem import split_rows
from solvers.qp.space import Inputs

__all__ = ["OSQP_MAX_ITERATIONS", "reference_step", "solve_with_osqp"]

logger = logging.getLogger(__name__)

#: OSQP's iteration cap when none is given (the QP step's OSQP path and the projection masters).
OSQP_MAX_ITERATIONS = 200_000


@dataclass
class _OSQPOutcome:
    x: np.ndarray | None
    y: np.ndarray | None
    status: str
    iterations: int


def solve_with_osqp(inputs: Inputs, tol: float, max_iter: int | None = None) -> _OSQPOutcome:
    """The same QP through ``qpsolvers`` / OSQP, at most ``max_iter`` iterations (None:
    :data:`OSQP_MAX_ITERATIONS`).

    ``G d <= h_G`` holds the finite sides of the non-equality rows (``J_i`` for an upper
    side, ``-J_i`` for a lower side) and ``A d = b`` the equality rows. qpsolvers' Lagrangian
    is ``... + z'(G d - h_G) + y_eq'(A d - b)`` with ``z >= 0``, so this module's signed
    multipliers are ``y_i = z_upper_i - z_lower_i`` (inequalities) and ``y_i = y_eq_i``.
    """
    import qpsolvers
    import scipy.sparse as sp

    lo = inputs.lo
    G, h_G, A, b, up, dn, eq = split_rows(inputs.J, inputs.lo, inputs.hi)
    if G is None and A is None:  # qpsolvers rejects unconstrained problems with sparse P
        return _OSQPOutcome(-inputs.g / inputs.h, np.zeros(lo.size), "optimal", 0)
    problem = qpsolvers.Problem(sp.diags(inputs.h, format="csc"), inputs.g, G, h_G, A, b)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        sol = qpsolvers.solve_problem(
            problem, solver="osqp", eps_abs=tol, eps_rel=tol, polish=True, max_iter=max_iter or OSQP_MAX_ITERATIONS,
            verbose=False,
        )
    info = (sol.extras or {}).get("info")
    osqp_status = str(getattr(info, "status", "unknown"))
    iterations = int(getattr(info, "iter", 0))
    if not sol.found:
        logger.debug("OSQP status %r", osqp_status)
        status = "infeasible" if "primal infeasible" in osqp_status else "numerical"
        return _OSQPOutcome(None, None, status, iterations)
    y = np.zeros(lo.size)
    z = np.asarray(sol.z, dtype=float)
    n_up = int(up.sum())
    y[up] += z[:n_up]
    y[dn] -= z[n_up:]
    if eq.any():
        y[eq] = np.asarray(sol.y, dtype=float)
    return _OSQPOutcome(np.asarray(sol.x, dtype=float), y, "optimal", iterations)


def reference_step(g: np.ndarray, h: np.ndarray, J: np.ndarray, lo: np.ndarray, hi: np.ndarray,
                   solver: str = "clarabel", tol: float = 1e-10) -> np.ndarray | None:
    """``argmin g'd + 1/2 d' diag(h) d  s.t.  lo <= J d <= hi`` by an independent solver
    through ``qpsolvers.solve_qp`` (rows split by kind: finite upper sides, negated finite
    lower sides, equalities ``lo == hi``); None when that solver gives no solution.
    ``tol`` sets Clarabel's feasibility and gap tolerances."""
    import qpsolvers
    import scipy.sparse as sp

    g, h, J, lo, hi = (np.asarray(a, dtype=np.float64) for a in (g, h, J, lo, hi))
    eq = lo == hi
    up, dn = np.isfinite(hi) & ~eq, np.isfinite(lo) & ~eq
    if not (up.any() or dn.any() or eq.any()):
        return -g / h
    G = np.vstack([J[up], -J[dn]])
    h_G = np.concatenate([hi[up], -lo[dn]])
    options = {"tol_feas": tol, "tol_gap_abs": tol, "tol_gap_rel": tol} if solver == "clarabel" else {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            return qpsolvers.solve_qp(
                sp.diags(h, format="csc"), g, sp.csc_matrix(G) if G.size else None, h_G if G.size else None,
                sp.csc_matrix(J[eq]) if eq.any() else None, lo[eq] if eq.any() else None, solver=solver, **options)
        except Exception as exc:  # noqa: BLE001 - a reference that fails gives no reference
            logger.debug("reference %s failed: %s", solver, exc)
            return None
