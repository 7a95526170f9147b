"""Target projection: the master step of Moving Targets ([GeDI] eq 56).

Problem
-------
Given references ``r_1, ..., r_R`` (each of shape ``(n,)``), non-negative weights
``w_1, ..., w_R`` and linear encodings of the constraints (:class:`~solvers.problem.LinearEncoding`:
``lb <= A_z z + A_a a <= ub`` with auxiliary variables ``aux_lb <= a <= aux_ub``),
:func:`project_targets` solves

.. math::

    \\min_{z, a}\\; \\sum_{r} w_r\\, L(z, r_r)
    \\quad\\text{s.t.}\\quad lb_e \\le A_{z,e} z + A_{a,e} a_e \\le ub_e \\;\\; \\forall e,

with the mean losses

* ``loss="squared"``: ``L(z, r) = (1/n) sum_i (z_i - r_i)^2`` (mean squared error);
* ``loss="hamming"``: ``L(z, r) = (1/n) sum_i |z_i - r_i|`` (for binary ``z`` and ``r`` the
  fraction of disagreeing rows; ``r`` may be a probability in ``[0, 1]``, giving the
  expected disagreement).

``binary=True`` restricts ``z`` to ``{0, 1}^n``. Since ``z_i^2 = z_i`` there, both losses are
LINEAR in ``z``: ``(z_i - r_i)^2 = r_i^2 + (1 - 2 r_i) z_i`` and, for ``r_i`` in ``[0, 1]``,
``|z_i - r_i| = r_i + (1 - 2 r_i) z_i``, so the master is a mixed-integer LINEAR program
(binary ``z``, continuous ``a``). ``binary=False`` with the squared loss is a convex QP
(Hessian ``2 W / n`` on ``z``, ``W = sum_r w_r``, zero on ``a``). Nothing else is
offered: the Hamming loss of a continuous ``z`` is not what a master minimises.

Backends
--------
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

The pip wheel of ``gurobipy`` carries a size-limited licence (2000 variables and 2000
linear constraints, :data:`GUROBI_SIZE_LIMIT`; only 200 variables when the objective is
quadratic, :data:`GUROBI_QP_SIZE_LIMIT` - measured with gurobipy 13.0.3: a 254-variable QP
failed with error 10010): ``"auto"`` catches the licence errors
(no licence, size limit exceeded), logs the reason and falls back to the open-source
backend; an explicit ``backend="gurobi"`` raises :class:`RuntimeError` instead. Once a
size-limited licence has been seen, ``"auto"`` skips Gurobi for larger problems without
trying it again.

Every backend gets the same time limit, relative MIP gap, seed and tight feasibility
tolerances (:data:`FEASIBILITY_TOL`), and the same optional start (``initial``: a previous
projection's result, as Moving Targets passes with ``warm_start=True``): a MIP start for
HiGHS and Gurobi, OSQP's warm start. A backend that stops at its time (or work) limit
with a feasible incumbent returns it (status ``"time_limit"``, with the gap it reached);
one that stops without any feasible point raises :class:`RuntimeError` with its status.
An infeasible problem raises :class:`ProjectionInfeasibleError`, whose message names the
encodings that are infeasible on their own, or, if each is feasible alone, the set that is
jointly infeasible.

Modules (one job each)
----------------------
``results``: :class:`ProjectionResult`, :class:`ProjectionInfeasibleError` and what a backend
returns. ``program``: validation of the references, weights and encodings, and the
solver-neutral program they assemble into. ``backends``: one function per backend behind one
table, and Gurobi's availability and licence. ``topk``: the count search for binary programs whose
rows read counts of cells (group rates of hard labels). ``project``: :func:`project_targets` (backend
choice, run, infeasibility diagnosis, result).
"""

from __future__ import annotations

# OSQP_TOL and OSQP_MAX_ITER were public attributes of the single module: still reachable here.
from solvers.projection.backends import (
    FEASIBILITY_TOL,
    GUROBI_QP_SIZE_LIMIT,
    GUROBI_SIZE_LIMIT,
    OSQP_MAX_ITER,
    OSQP_TOL,
    gurobi_available,
)
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
