"""Rows that repeat, taken out of a QP before the active-set methods see it: :func:`reduce_rows`.

Two kinds of repetition make the dual active-set method fail on a QP that has a solution; each failure
costs an OSQP call (up to a second at 40 rows) and then a relaxed SQP step:

* **Parallel rows**, ``J_j = sigma J_i`` (``sigma != 0``), exactly or up to rounding. A ratio bound at
  ``delta = 1`` writes each comparison as ``R_r - R_f <= 0`` and ``R_f - R_r <= 0``: mirrored rows whose
  sides together are the equality ``R_f = R_r``. The rows of a class (each within
  ``asin(sqrt(rank_tol))`` of its first row in the ``H^{-1}`` metric, the dual method's own test of
  dependence) become one two-sided row ``lo <= J_i d <= hi`` with the tightest of the members' sides
  scaled by ``1 / sigma``; sides that cross by rounding meet at their midpoint (an equality).
* **Rows that others fix.** Parity between ``k`` groups written pairwise is ``k (k - 1) / 2`` equalities
  of rank ``k - 1`` (each group against the rest: ``k`` of rank ``k - 1``). Consistent in exact
  arithmetic, but a Jacobian computed in float32 leaves a dependent row off its combination of the
  others by a relative ``1e-7``, and at the step that meets the others it misses its bound by about
  ``1e-8``, beyond the dual method's consistency tolerance (``tol = 1e-9`` relative): it reports the QP
  infeasible. A row within ``asin(sqrt(rank_tol))`` of the span of rows of fixed value (equalities, and
  merged rows whose sides lie within rounding of each other) is dropped when the value they fix for it,
  ``sum_k a_k b_k`` for ``J_i = sum_k a_k J_k + r_i``, lies within its bounds up to the rounding of the
  bounds carried through the combination, ``(tol + PRIMAL_SLACK)(1 + |b_i| + sum_k |a_k| (1 + |b_k|))``
  (:mod:`solvers.qp.solve`); otherwise the QP is left whole and its infeasibility found as before.

A step ``d`` that meets the rows kept then meets a merged or dropped row ``i`` up to that excess plus
``r_i d``, at most ``||r_i||_{H^-1} ||d||_H`` (Cauchy-Schwarz), ``r_i`` the row's part outside the span of
the rows it was merged into or depends on (:attr:`Reduction.outside`): the part the dual method treats as
dependent anyway; the caller checks the step on every original row so. :func:`reduce_rows` returns None
when no row repeats (the QP is then solved as given, bit for bit as before). Otherwise
:meth:`Reduction.expand` carries the reduced problem's multipliers back: a class's multiplier goes to the
member whose side binds, as ``y / sigma``; dropped rows get 0.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy.linalg import solve_triangular

from solvers.qp.space import Inputs, Space

__all__ = ["Reduction", "reduce_rows"]


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
    outside, excess : np.ndarray
        Per original row: the ``H^{-1}``-norm of its part outside the span of the kept rows it was merged
        into or depends on (0 for a kept class's first row), and how far the value the kept equalities fix
        for it lies outside its bounds (0 unless dropped): a step that meets the kept rows misses the row by
        at most ``excess + outside ||d||_H``.
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
    excess: np.ndarray

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


def class_bounds(inputs: Inputs, scale: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Each row's bounds on ``J_class d`` (``J_row = sigma J_class``): ``(hi, lo) / sigma``, the sides swapped
    for ``sigma < 0``."""
    with np.errstate(invalid="ignore"):
        a, b = inputs.hi / scale, inputs.lo / scale
    return np.where(scale > 0, a, b), np.where(scale > 0, b, a)


def _parallel_classes(space: Space, rank_tol: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(label, sigma, outside)``: rows within ``asin(sqrt(rank_tol))`` of an earlier row (cosine in the
    ``H^{-1}`` metric of magnitude at least ``sqrt(1 - rank_tol)``) join its class, numbered by first
    appearance; zero rows keep their own."""
    M = space.M
    diag = np.diag(M)
    m = diag.size
    norm = np.sqrt(diag)
    with np.errstate(invalid="ignore", divide="ignore"):
        cos = M / np.outer(norm, norm)
    parallel = np.abs(np.nan_to_num(cos)) >= math.sqrt(1.0 - rank_tol)
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
    upper, lower = class_bounds(inputs, scale)
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
    crossed = lo > hi
    if np.any(lo - hi > slack[first]):
        return None
    mid = np.where(crossed, 0.5 * (lo + hi), 0.0)
    return np.where(crossed, mid, lo), np.where(crossed, mid, hi), first, upper_giver, lower_giver


@dataclass(frozen=True)
class _Implied:
    """Rows that other rows fix (:func:`_implied_rows`): which to drop, the ``H^{-1}``-norm of each one's part
    outside the span of the rows kept, how far the value they fix lies outside its bounds, and the class
    bounds after narrow kept rows became equalities."""

    dropped: np.ndarray
    outside: np.ndarray
    excess: np.ndarray
    lo: np.ndarray
    hi: np.ndarray


def _implied_rows(M: np.ndarray, lo: np.ndarray, hi: np.ndarray, eq: np.ndarray, constrained: np.ndarray,
                  rank_tol: float, slack: np.ndarray) -> _Implied | None:
    """The class rows that rows of fixed value determine (module docstring); None when a dependent row's
    bounds exclude the value they fix for it by more than the slack of the combination (the QP is then left
    whole).

    Rows of fixed value: equalities, and rows whose sides lie within ``slack`` of each other (mirrored
    rows whose scale carries rounding), at their midpoint ``b``. Greedy Cholesky of their unit-diagonal
    Gram matrix, equalities first: the pivot of row ``a`` is the squared sine of its angle to the span of
    the rows kept before it. At most ``rank_tol``, ``J_a = sum_k alpha_k J_k + r_a`` with
    ``||r_a||_{H^-1} = sqrt(pivot M_aa)``, and every step that meets the kept rows gives
    ``J_a d = v_a + r_a d``, ``v_a = sum_k alpha_k b_k``. The row is dropped when ``v_a`` lies within its
    bounds widened by ``slack_a + sum_k |alpha_k| slack_k`` (the rounding of the bounds carried through the
    combination); then every other constrained row is tested the same way. Where a row is dropped, the
    narrow rows kept become equalities at their midpoints (their value is what the combination assumed)."""
    n = lo.size
    narrow = constrained & ~eq & (hi - lo <= slack)
    fixed = eq | narrow
    implied = _Implied(np.zeros(n, dtype=bool), np.zeros(n), np.zeros(n), lo.copy(), hi.copy())
    if np.count_nonzero(fixed) < 2 and not (fixed.any() and constrained.any()):
        return implied
    b = np.where(fixed, 0.5 * (lo + hi), 0.0)
    unit = 1.0 / np.sqrt(np.where(constrained, np.diag(M), 1.0))
    kept: list[int] = []
    L = np.zeros((n, n))
    for a in [*np.flatnonzero(eq), *np.flatnonzero(narrow), *np.flatnonzero(constrained & ~fixed)]:
        k = len(kept)
        l = solve_triangular(L[:k, :k], M[kept, a] * unit[kept] * unit[a], lower=True) if k else np.zeros(0)
        pivot = 1.0 - float(l @ l)
        if pivot > rank_tol:
            if fixed[a]:
                L[k, :k], L[k, k] = l, math.sqrt(pivot)
                kept.append(int(a))
            continue
        alpha = solve_triangular(L[:k, :k], l, lower=True, trans="T") * unit[kept] / unit[a]
        value, allowed = float(alpha @ b[kept]), slack[a] + float(np.abs(alpha) @ slack[kept])
        excess = max(value - hi[a], lo[a] - value, 0.0)
        if excess > allowed:
            return None
        implied.dropped[a], implied.excess[a] = True, excess
        implied.outside[a] = math.sqrt(max(pivot, 0.0) * M[a, a])
    if implied.dropped.any():
        settled = np.zeros(n, dtype=bool)
        settled[kept] = True
        implied.lo[settled & narrow] = implied.hi[settled & narrow] = b[settled & narrow]
    return implied


def reduce_rows(inputs: Inputs, space: Space, rank_tol: float, primal_slack: float) -> Reduction | None:
    """The QP with parallel rows merged and dependent equalities dropped (module docstring), or None when
    there is nothing to reduce or the reduction would hide an infeasibility."""
    if space.m < 2:
        return None
    label, scale, outside = _parallel_classes(space, rank_tol)
    n = int(label.max()) + 1
    if n == space.m and np.count_nonzero(space.eq) < 2:
        return None  # no parallel rows, at most one equality: the common case
    magnitude = np.maximum(np.where(np.isfinite(inputs.lo), np.abs(inputs.lo), 0.0),
                           np.where(np.isfinite(inputs.hi), np.abs(inputs.hi), 0.0))
    slack = (space.tol + primal_slack) * (1.0 + magnitude)
    merged = _merged_bounds(inputs, label, scale, 2.0 * slack)
    if merged is None:
        return None
    lo, hi, first, upper_giver, lower_giver = merged
    nonzero = ~space.zero[first]
    eq = (lo == hi) & nonzero
    constrained = (np.isfinite(lo) | np.isfinite(hi)) & nonzero
    bound = np.maximum(np.where(np.isfinite(lo), np.abs(lo), 0.0), np.where(np.isfinite(hi), np.abs(hi), 0.0))
    implied = _implied_rows(space.M[np.ix_(first, first)], lo, hi, eq, constrained, rank_tol,
                            (space.tol + primal_slack) * (1.0 + bound))
    if implied is None or (n == space.m and not implied.dropped.any()):
        return None
    lo, hi = implied.lo, implied.hi
    keep = np.flatnonzero(~implied.dropped)
    position = np.full(n, -1)
    position[keep] = np.arange(keep.size)
    J = inputs.J[first[keep]]
    reduced = Inputs(inputs.g, inputs.h, J, lo[keep], hi[keep], inputs.dtype, inputs.device)
    # a dropped class's members: their own part outside the first row, and their share of the first row's
    return Reduction(inputs=reduced, label=label, scale=scale, position=position, lo=lo, hi=hi,
                     upper_giver=upper_giver, lower_giver=lower_giver,
                     outside=outside + np.abs(scale) * implied.outside[label],
                     excess=np.abs(scale) * implied.excess[label])
