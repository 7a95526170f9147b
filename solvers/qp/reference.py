"""OSQP on the same QP: the cross-check of the exact methods (``solver="osqp"``)."""

from __future__ import annotations

import logging
import warnings
from dataclasses import dataclass

import numpy as np

from solvers.problem import split_rows
from solvers.qp.space import Inputs

__all__ = ["solve_with_osqp"]

logger = logging.getLogger(__name__)


@dataclass
class _OSQPOutcome:
    x: np.ndarray | None
    y: np.ndarray | None
    status: str
    iterations: int


def solve_with_osqp(inputs: Inputs, tol: float, max_iter: int) -> _OSQPOutcome:
    """The same QP through ``qpsolvers`` / OSQP.

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
            problem, solver="osqp", eps_abs=tol, eps_rel=tol, polish=True, max_iter=max_iter, verbose=False
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
