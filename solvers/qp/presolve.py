"""Rows that repeat, taken out of a QP before the active-set methods see it: :func:`reduce_rows`.

Two kinds of repetition make the dual active-set method fail on a QP that has a solution; each failure
costs an OSQP call (up to a second at 40 rows) and then a relaxed SQP step:

* **Parallel rows**, ``J_j = sigma J_i`` (``sigma != 0``), exactly or up to rounding. A ratio bound at
  ``delta = 1`` writes each comparison as ``R_r - R_f <= 0`` and ``R_f - R_r <= 0``: mirrored rows whose
  sides together are the equality ``R_f = R_r``. The rows of a class (each within
  ``asin(sqrt(REPEAT_TOL))`` of its first row in the ``H^{-1}`` metric) become one two-sided row
  ``lo <= J_i d <= hi`` with the tightest of the members' sides scaled by ``1 / sigma``; sides that cross
  by rounding meet at their midpoint (an equality).
* **Rows that others fix.** Parity between ``k`` groups written pairwise is ``k (k - 1) / 2`` equalities
  of rank ``k - 1`` (each group against the rest: ``k`` of rank ``k - 1``). Consistent in exact
  arithmetic, but a Jacobian computed in float32 leaves a dependent row off its combination of the
  others by a relative ``1e-7``, and at the step that meets the others it misses its bound by about
  ``1e-8``, beyond the dual method's consistency tolerance (``tol = 1e-9`` relative): it reports the QP
  infeasible. A row within ``asin(sqrt(REPEAT_TOL))`` of the span of rows of fixed value (equalities, and
  merged rows whose sides lie within rounding of each other) is dropped when the value they fix for it
  lies within its bounds up to ``(tol + PRIMAL_SLACK)(1 + |b_i|)`` (:mod:`solvers.qp.solve`); otherwise the
  QP is left whole and its infeasibility found as before. Of a dependent set, the rows dropped are those
  that the others express with the smallest coefficients (:func:`_drop_candidates`).

:func:`reduce_rows` returns None when no row is dropped and no merged rows meet (the QP is then solved as
given, bit for bit as before: parallel rows whose sides stay apart, as a mini-batch with an empty group gives
``0.99 R_rest`` and ``-R_rest``, the dual method takes as they are). Otherwise the reduced problem is
solved and :meth:`Reduction.expand` carries its multipliers back (a class's multiplier goes to the member
whose side binds, as ``y / sigma``; dropped rows get 0). The caller checks the step on every original row
within the accuracy :mod:`solvers.qp.solve` promises, a merged or dropped row ``i`` with
``||r_i||_{H^-1} ||d||_H`` more: with ``r_i`` its part outside the span of the rows kept, the step that
meets them meets row ``i`` up to ``r_i d`` (Cauchy-Schwarz): the rounding of a row,
``||r_i||^2 <= REPEAT_TOL M_ii``. When it misses, the QP is solved as given.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy.linalg import qr, solve_triangular

from solvers.qp.space import Inputs, Space, bound_magnitude

__all__ = ["REPEAT_TOL", "Reduction", "reduce_rows"]

#: Squared sine (``H^{-1}`` metric) up to which a row counts as a repeat of others: ``1e-12``, a sine of
#: ``1e-6``, several times the rounding of a Jacobian computed in float32 (sines of ``1e-7`` to ``6e-7``
#: measured on parity rows), far below what random rows reach. The dual method's ``rank_tol`` (``1e-10``)
#: is larger: a row at a sine of ``1e-5`` is dependent for it, but replacing it by its neighbours could
#: move the solution, so the presolve leaves it alone (the smaller of the two applies).
REPEAT_TOL = 1e-12


@dataclass(frozen=True)
class Reduction:
    """A QP with its parallel rows merged and its dependent equalities dropped.

    Attributes
    ----------
    inputs : Inputs
        The reduced problem (``g``, ``h`` as given; the first row of each kept class).
    label, scale : np.ndarray
        Per original row: its class (int64) and ``sigma`` with ``J_row ~ sigma J_class``.
    position : np.ndarray
        int64 per class: its row in ``inputs``, -1 for a dropped equality.
    lo, hi : np.ndarray
        Per class: the merged bounds on ``J_class d``.
    upper_giver, lower_giver : np.ndarray
        int64 per class: the member whose bound is the class's upper / lower bound (-1 for a missing side).
    outside : np.ndarray
        Per original row: the ``H^{-1}``-norm of its part outside the span of the rows kept (0 for a kept
        class's first row); a step that meets the kept rows meets this row up to that times ``||d||_H``.
    """

    inputs: Inputs
    label: np.ndarray
    scale: np.ndarray
    position: np.ndarray
    lo: np.ndarray
    hi: np.ndarray
    upper_giver: np.ndarray
    lower_giver: np.ndarray
    outside: np.ndarray

    def expand(self, y_reduced: np.ndarray, active_reduced: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``(y, active)`` on the original rows. A class's multiplier ``y_k`` goes, as ``y_k / sigma``, to the
        member that gives its bound on the side that binds (the tightest upper bound when ``y_k > 0``, the
        tightest lower when ``y_k < 0``); that member is active on its own side (for an equality, kept or
        dropped, both givers are); every other row gets ``y = 0`` and no side."""
        y, active = np.zeros(self.label.size), np.zeros(self.label.size, dtype=np.int8)
        for c, k in enumerate(self.position):
            equality = self.lo[c] == self.hi[c]
            side = int(active_reduced[k]) if k >= 0 else 0
            upper, lower = int(self.upper_giver[c]), int(self.lower_giver[c])
            negative = k >= 0 and y_reduced[k] < 0
            if equality:  # both sides bind; one member giving both is signed by its multiplier (+ when 0)
                active[lower] = -np.sign(self.scale[lower])
                if upper != lower or not negative:
                    active[upper] = np.sign(self.scale[upper])
            elif side > 0:
                active[upper] = np.sign(self.scale[upper])
            elif side < 0:
                active[lower] = -np.sign(self.scale[lower])
            if k >= 0 and y_reduced[k] != 0:
                giver = upper if y_reduced[k] > 0 else lower
                y[giver] = y_reduced[k] / self.scale[giver]
        return y, active


def _class_bounds(inputs: Inputs, scale: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Each row's bounds on ``J_class d`` (``J_row = sigma J_class``): ``(hi, lo) / sigma``, the sides swapped
    for ``sigma < 0``."""
    with np.errstate(invalid="ignore"):
        a, b = inputs.hi / scale, inputs.lo / scale
    return np.where(scale > 0, a, b), np.where(scale > 0, b, a)


def _cosines(M: np.ndarray) -> np.ndarray:
    """``M_ij / sqrt(M_ii M_jj)``: the cosines of the rows' angles in the ``H^{-1}`` metric (NaN beside a zero row)."""
    norm = np.sqrt(np.diag(M))
    with np.errstate(invalid="ignore", divide="ignore"):
        return M / np.outer(norm, norm)


def _parallel_classes(M: np.ndarray, cos: np.ndarray,
                      parallel: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(label, sigma, outside)``: rows ``parallel`` to an earlier row (within ``asin(sqrt(rank_tol))``: a cosine
    ``cos`` in the ``H^{-1}`` metric of magnitude at least ``sqrt(1 - rank_tol)``) join its class, numbered by first
    appearance; zero rows keep their own. ``outside``: the ``H^{-1}``-norm of a member's part orthogonal to
    its class's first row, ``sqrt((1 - cos^2) M_jj)``."""
    diag = np.diag(M)
    m = diag.size
    norm = np.sqrt(diag)
    label, scale, outside = np.full(m, -1), np.ones(m), np.zeros(m)
    classes = 0
    for i in range(m):
        if label[i] >= 0:
            continue
        label[i] = classes
        if diag[i] > 0:
            join = np.flatnonzero(parallel[i] & (label < 0))
            label[join] = classes
            scale[join] = np.sign(cos[i, join]) * norm[join] / norm[i]
            outside[join] = np.sqrt(np.maximum(1.0 - cos[i, join] ** 2, 0.0) * diag[join])
        classes += 1
    return label, scale, outside


def _merged_bounds(inputs: Inputs, label: np.ndarray, scale: np.ndarray, slack: np.ndarray) -> tuple | None:
    """``(lo, hi, first row, upper giver, lower giver)`` per class: the tightest of its members' bounds on
    ``J_class d`` and the members that give them (-1 for a missing side). Sides that cross within ``slack``
    (mirrored rows whose scale and bounds carry rounding) meet at their midpoint: an equality; None where
    they cross by more (an infeasible QP, which the caller's path reports)."""
    n = int(label.max()) + 1
    upper, lower = _class_bounds(inputs, scale)
    first, upper_giver, lower_giver = np.full(n, -1), np.full(n, -1), np.full(n, -1)
    hi, lo = np.full(n, np.inf), np.full(n, -np.inf)
    for i in range(label.size):  # in row order: ties go to the first member
        c = label[i]
        if first[c] < 0:
            first[c] = i
        if upper[i] < hi[c]:
            hi[c], upper_giver[c] = upper[i], i
        if lower[i] > lo[c]:
            lo[c], lower_giver[c] = lower[i], i
    if np.any(lo - hi > slack[first]):
        return None
    crossed = lo > hi
    lo[crossed] = hi[crossed] = 0.5 * (lo[crossed] + hi[crossed])
    return lo, hi, first, upper_giver, lower_giver


def _drop_candidates(C: np.ndarray, rows: np.ndarray, rank_tol: float) -> np.ndarray:
    """Among ``rows`` (of fixed value; ``C`` their unit-diagonal Gram matrix), one to drop per null direction
    (eigenvalue at most ``rank_tol``): the rows with the largest weights in the null space, by QR with column
    pivoting of its basis. With one dependency ``sum_i nu_i J_i = 0``, dropping row ``a`` writes it as
    ``sum_k (-nu_k / nu_a) J_k``: the largest ``|nu_a|`` gives the smallest coefficients, so the rounding of
    the other rows' bounds is least amplified in the value they fix for it."""
    values, vectors = np.linalg.eigh(C)
    null = vectors[:, values <= rank_tol]
    if null.shape[1] == 0:
        return np.zeros(0, dtype=np.int64)
    pivots = qr(null.T, mode="r", pivoting=True)[1]
    return rows[pivots[: null.shape[1]]]


def _implied_rows(M: np.ndarray, rows_J: np.ndarray, h: np.ndarray, bounds: tuple[np.ndarray, np.ndarray],
                  eq: np.ndarray, constrained: np.ndarray, rank_tol: float,
                  slack: np.ndarray) -> tuple[np.ndarray, np.ndarray] | None:
    """``(dropped, outside)`` over the class rows (``M`` their Gram matrix ``J H^{-1} J'``, ``rows_J`` the rows,
    ``h`` the curvature, ``bounds`` their ``(lo, hi)``): rows that rows of fixed value determine (module
    docstring), and each one's ``||r_a||_{H^-1}`` with ``r_a = J_a - sum_k alpha_k J_k`` computed from the rows
    themselves (0 for rows kept; the pivot ``1 - l'l`` loses a sine below about ``1e-8`` to cancellation, and
    a float32 row's rounding can lie there); None when a dependent row's bounds exclude the value they fix for
    it by more than its ``slack`` (the QP is then left whole).

    Rows of fixed value: equalities, and rows whose sides lie within ``slack`` of each other (merged mirrored
    rows whose scale carries rounding), taken at their midpoint ``b`` give or take half their width ``w``.
    Greedy Cholesky of the unit-diagonal Gram matrix in the order: rows of fixed value other than the
    :func:`_drop_candidates`, those, then the other constrained rows. The pivot of row ``a`` is the squared
    sine of its angle to the span of the fixed rows kept before it; at most ``rank_tol``,
    ``J_a = sum_k alpha_k J_k + r_a``, and a step that meets the kept rows gives ``J_a d`` within
    ``sum_k alpha_k b_k +- sum_k |alpha_k| w_k / 2`` (plus ``r_a d``): the row is dropped when that range lies
    within its bounds widened by ``slack_a``."""
    lo, hi = bounds
    n = lo.size
    narrow = constrained & ~eq & (hi - lo <= slack)
    fixed = eq | narrow
    dropped, outside = np.zeros(n, dtype=bool), np.zeros(n)
    if np.count_nonzero(fixed) < 2 and not (fixed.any() and constrained.any()):
        return dropped, outside
    b, half = np.zeros(n), np.zeros(n)  # rows of fixed value have both sides finite
    b[fixed], half[narrow] = 0.5 * (lo[fixed] + hi[fixed]), 0.5 * (hi[narrow] - lo[narrow])
    unit = 1.0 / np.sqrt(np.where(constrained, np.diag(M), 1.0))
    rows = np.concatenate([np.flatnonzero(eq), np.flatnonzero(narrow)])
    candidates = _drop_candidates(M[np.ix_(rows, rows)] * np.outer(unit[rows], unit[rows]), rows, rank_tol)
    dropping = set(candidates.tolist())
    first = [a for a in rows if a not in dropping]
    kept: list[int] = []
    L = np.zeros((n, n))
    for a in [*first, *candidates, *np.flatnonzero(constrained & ~fixed)]:
        k = len(kept)
        l = solve_triangular(L[:k, :k], M[kept, a] * unit[kept] * unit[a], lower=True) if k else np.zeros(0)
        pivot = 1.0 - float(l @ l)
        if pivot > rank_tol:
            if fixed[a]:
                L[k, :k], L[k, k] = l, math.sqrt(pivot)
                kept.append(int(a))
            continue
        alpha = solve_triangular(L[:k, :k], l, lower=True, trans="T") * unit[kept] / unit[a]
        value, spread = float(alpha @ b[kept]), float(np.abs(alpha) @ half[kept])
        if value + spread > hi[a] + slack[a] or value - spread < lo[a] - slack[a]:
            return None
        residual = rows_J[a] - alpha @ rows_J[kept] if k else rows_J[a]
        dropped[a], outside[a] = True, math.sqrt(float(residual ** 2 @ (1.0 / h)))
    return dropped, outside


def reduce_rows(inputs: Inputs, space: Space, rank_tol: float, primal_slack: float) -> Reduction | None:
    """The QP with parallel rows merged and the rows others fix dropped (module docstring), or None when no row
    is dropped and no merged rows meet, or the reduction would hide an infeasibility. Rows count as repeats
    within the smaller of ``rank_tol`` and :data:`REPEAT_TOL`."""
    rank_tol = min(rank_tol, REPEAT_TOL)
    if space.m < 2:
        return None
    cos = _cosines(space.M)
    parallel = np.abs(np.nan_to_num(cos)) >= math.sqrt(1.0 - rank_tol)
    if not np.triu(parallel, 1).any() and np.count_nonzero(space.eq) < 2:
        return None  # no parallel rows, at most one equality: the common case, decided without the class loop
    label, scale, outside = _parallel_classes(space.M, cos, parallel)
    n = int(label.max()) + 1
    slack = (space.tol + primal_slack) * (1.0 + bound_magnitude(inputs.lo, inputs.hi))
    merged = _merged_bounds(inputs, label, scale, 2.0 * slack)
    if merged is None:
        return None
    lo, hi, first, upper_giver, lower_giver = merged
    nonzero = ~space.zero[first]
    eq = (lo == hi) & nonzero
    constrained = (np.isfinite(lo) | np.isfinite(hi)) & nonzero
    implied = _implied_rows(space.M[np.ix_(first, first)], inputs.J[first], inputs.h,
                            (lo, hi), eq, constrained, rank_tol,
                            (space.tol + primal_slack) * (1.0 + bound_magnitude(lo, hi)))
    members = np.bincount(label, minlength=n)
    met = (members > 1) & nonzero & (hi - lo <= (space.tol + primal_slack) * (1.0 + bound_magnitude(lo, hi)))
    if implied is None or not (implied[0].any() or met.any()):
        return None  # nothing the dual method cannot take: parallel rows whose sides stay apart it handles
    dropped, outside_class = implied
    keep = np.flatnonzero(~dropped)
    position = np.full(n, -1)
    position[keep] = np.arange(keep.size)
    reduced = Inputs(inputs.g, inputs.h, inputs.J[first[keep]], lo[keep], hi[keep], inputs.dtype, inputs.device)
    # a member of a dropped class: its own part outside the class's first row, and its share of that row's
    return Reduction(inputs=reduced, label=label, scale=scale, position=position, lo=lo, hi=hi,
                     upper_giver=upper_giver, lower_giver=lower_giver,
                     outside=outside + np.abs(scale) * outside_class[label])
