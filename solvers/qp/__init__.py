"""Exact QP subproblems of the stochastic SQP with a diagonal Hessian (the step subproblem of each iteration).

Problem
-------
.. math::

    \\min_d\\; g^\\top d + \\tfrac12 d^\\top \\operatorname{diag}(h)\\, d
    \\quad\\text{s.t.}\\quad lo \\le J d \\le hi,

with ``g, h`` of shape ``(p,)`` (``h > 0``), ``J`` of shape ``(m, p)`` and ``lo, hi`` of
shape ``(m,)``. A row may be two-sided, one-sided (the other side infinite), an equality
(``lo == hi``) or free (both infinite).

One signed multiplier ``y_i`` per row (Lagrangian ``g'd + 1/2 d'Hd + sum_i y_i (J_i d - b_i)``):
``y_i > 0`` upper side active, ``y_i < 0`` lower side active, 0 inactive (equalities either sign).
Stationarity ``g + h * d + J' y = 0`` gives ``d(y) = -H^{-1} (g + J' y)``, so all work is in the
constraint space: ``M = J H^{-1} J'`` and ``q = J H^{-1} g`` are formed once (O(p m^2)),
``w(y) = J d(y) = -q - M y``, and an active set ``A`` with sides ``b_A`` is the system

.. math::  M_{AA}\\, y_A = -q_A - b_A ,

whose solution is the QP's iff every row is feasible and every multiplier has the right sign.
``"enumeration"`` tries all active sets ([SQP] Algorithm 1, from 2 rows to m); ``"dual"`` is the
primal-dual active-set method of Goldfarb & Idnani (Math. Prog. 27, 1983) in the m-space, growing
and shrinking the Cholesky factor of ``M_AA`` (finite, handles dependent rows, detects
infeasibility). The dual method is the default for every ``m``; up to four plain rows are
enumerated in Python floats (:mod:`solvers.qp.scalar`), which removes the array overhead. No
``p x p`` or ``(p+m) x (p+m)`` matrix is formed. Infeasible linearisations go to
:func:`least_violation_bounds`.

Rows that repeat (parallel rows, as ratio bounds at ``delta = 1`` write them, and equalities that depend on
others, as parity between several groups written pairwise is) are taken out before the active-set
methods run and given back in the result (:mod:`solvers.qp.presolve`).

Modules: ``results`` (result types), ``space`` (validation, m-space algebra, KKT tests), ``lp``
(least-violation LP, HiGHS), ``active_set`` (enumeration, dual method), ``scalar``, ``presolve``,
``reference`` (OSQP cross-check), ``solve`` (:func:`diagonal_qp`), ``relaxation``.
"""

from __future__ import annotations

from solvers.qp.lp import LeastViolationWarning
from solvers.qp.relaxation import least_violation_bounds
from solvers.qp.results import QPResult, RelaxedBounds
from solvers.qp.solve import ENUMERATION_MAX_ROWS, diagonal_qp

__all__ = [
    "QPResult",
    "RelaxedBounds",
    "diagonal_qp",
    "least_violation_bounds",
    "LeastViolationWarning",
    "ENUMERATION_MAX_ROWS",
]
