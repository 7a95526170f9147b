"""Target projection: the master step of Moving Targets ([GeDI] eq 56).

Given references ``r_1, ..., r_R`` (n,), weights ``w_r >= 0`` and the constraints' linear
encodings (:class:`~solvers.problem.LinearEncoding`), :func:`project_targets` solves

.. math::

    \\min_{z, a}\\; \\sum_{r} w_r\\, L(z, r_r)
    \\quad\\text{s.t.}\\quad lb_e \\le A_{z,e} z + A_{a,e} a_e \\le ub_e \\;\\; \\forall e,

with ``L(z, r) = (1/n) sum_i (z_i - r_i)^2`` ("squared") or ``(1/n) sum_i |z_i - r_i|`` ("hamming";
``r`` may be a probability). With ``binary=True`` (``z_i^2 = z_i``) both are linear in ``z``,
``r_i^2 + (1 - 2 r_i) z_i`` and ``r_i + (1 - 2 r_i) z_i``, a MILP; ``binary=False`` with the squared
loss is a convex QP (Hessian ``2 W / n`` on ``z``, ``W = sum_r w_r``).

========  ==========================  ====================================================
name      problems                     through
========  ==========================  ====================================================
topk      binary, rows on cell counts  the count search of :mod:`solvers.projection.topk` (exact,
                                       top-k by cost within each cell; no solver)
highs     MILP (binary) and convex QP  ``highspy`` (HiGHS branch-and-cut; its QP solver)
osqp      convex QP                    ``qpsolvers`` with OSQP (tight tolerances, polishing)
gurobi    MILP and convex QP           ``gurobipy`` (optional extra ``fairopt[gurobi]``)
auto      both                         the count search when it applies, else Gurobi if
                                       importable and licensed for the size, else HiGHS
                                       (MILP) / OSQP (QP); the choice is logged
========  ==========================  ====================================================

The pip wheel of ``gurobipy`` has a size-limited licence (:data:`GUROBI_SIZE_LIMIT`,
:data:`GUROBI_QP_SIZE_LIMIT`): "auto" falls back to the open-source backend on licence errors, and
skips Gurobi for larger problems once a limit was seen; ``backend="gurobi"`` raises instead. Every
backend gets the same time limit, MIP gap, seed, :data:`FEASIBILITY_TOL` and optional start
(``initial``). A backend stopped by its limit returns its incumbent ("time_limit"), or raises
:class:`RuntimeError` without one; an infeasible problem raises :class:`ProjectionInfeasibleError`
naming the encodings infeasible alone or together.
"""

from __future__ import annotations

from solvers.projection.backends import FEASIBILITY_TOL, GUROBI_QP_SIZE_LIMIT, GUROBI_SIZE_LIMIT, gurobi_available
from solvers.projection.project import BACKENDS, LOSSES, project_targets
from solvers.projection.results import ProjectionInfeasibleError, ProjectionResult

__all__ = [
    "BACKENDS",
    "LOSSES",
    "FEASIBILITY_TOL",
    "GUROBI_SIZE_LIMIT",
    "GUROBI_QP_SIZE_LIMIT",
    "ProjectionInfeasibleError",
    "ProjectionResult",
    "gurobi_available",
    "project_targets",
]
