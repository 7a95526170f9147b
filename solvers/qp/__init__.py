"""Exact QP subproblems of the stochastic SQP with a diagonal Hessian (the step subproblem of each iteration).

Problem
-------
.. math::

    \\min_d\\; g^\\top d + \\tfrac12 d^\\top \\operatorname{diag}(h)\\, d
    \\quad\\text{s.t.}\\quad lo \\le J d \\le hi,

with ``g, h`` of shape ``(p,)`` (``h > 0``), ``J`` of shape ``(m, p)`` and ``lo, hi`` of
shape ``(m,)``. A row may be two-sided, one-sided (the other side infinite), an equality
(``lo == hi``) or free (both infinite).

Sign convention (used throughout this module)
---------------------------------------------
One signed multiplier ``y_i`` per row, with Lagrangian
``g'd + 1/2 d'Hd + sum_i y_i (J_i d - b_i)``:

* ``y_i > 0``: the upper side is active, ``J_i d = hi_i``;
* ``y_i < 0``: the lower side is active, ``J_i d = lo_i``;
* equality rows carry a multiplier of either sign; inactive rows have ``y_i = 0``.

Stationarity reads ``g + h * d + J' y = 0``, so the step is a function of the
multipliers alone: ``d(y) = -H^{-1} (g + J' y)``.

Work in the constraint space
----------------------------
With ``H^{-1} = diag(1/h)``, ``M = J H^{-1} J'`` (m x m) and ``q = J H^{-1} g`` (m,) are
formed once (O(p m^2)); then ``w(y) := J d(y) = -q - M y``. For an active set ``A`` with
sides ``b_A`` the conditions ``J_A d = b_A`` become the ``|A| x |A|`` system

.. math::  M_{AA}\\, y_A = -q_A - b_A .

The candidate is the QP solution iff every row is feasible (``lo <= w <= hi``) and every
multiplier has the right sign (KKT conditions of a strictly convex QP, which are sufficient).
Two exact methods use this algebra:

* ``"enumeration"``: all active sets by increasing size with every choice of sides
  ([SQP] Algorithm 1, generalised from 2 constraint rows to m), vectorised over candidates.
* ``"dual"``: the primal-dual active-set method of Goldfarb & Idnani (Math. Prog. 27, 1983),
  written in the m-space: the iterate is the multiplier vector, the primal point is
  ``d(y)``; the Cholesky factor of the active Gram matrix ``M_AA`` is grown (O(k^2)) and
  shrunk (rank-one update, O(k^2)). It is finite, handles linearly dependent rows
  (the "dual step" of the method), and detects infeasibility (a violated row that is a
  combination of the active rows with no multiplier able to give way).

``solver="active_set"`` enumerates when there are at most ``ENUMERATION_MAX_ROWS``
constrained rows and uses the dual method beyond; measured, the dual method was faster for
every m >= 1 (see the constant), so the threshold is 0 and enumeration is kept as
``solver="enumeration"``, the paper's algorithm, used to cross-check. The exception is the
common SQP step with up to four plain rows (``scalar``): there the enumeration is written
out in Python floats, which removes the array overhead that dominated (3x faster for two
rows, 1.6x for four). Nothing forms a
``(p+m) x (p+m)`` KKT matrix or a ``p x p`` matrix: cost O(p m^2) to form ``M``, then
O(m^2) per working-set change of the dual method (typically O(m) changes) and O(3^m m^3)
for enumeration; memory O(p m).

The infeasible-linearisation case of the SQP is handled by :func:`least_violation_bounds`.

Modules (one job each)
----------------------
``results``: :class:`QPResult`, :class:`RelaxedBounds`. ``space``: input validation and the
constraint-space algebra (``M``, ``q``, KKT tests). ``lp``: the least-violation LP (HiGHS).
``active_set``: the exact methods (enumeration, dual active set). ``scalar``: the enumeration
for up to four plain rows in Python floats. ``reference``: OSQP, the
cross-check. ``solve``: :func:`diagonal_qp`, one function over the methods (``solver=``).
``relaxation``: :func:`least_violation_bounds`.
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
