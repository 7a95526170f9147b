"""The exact methods in the constraint space: enumeration of active sets ([SQP]
Algorithm 1, vectorised) and the dual active-set method of Goldfarb & Idnani (1983)."""

from __future__ import annotations

import itertools
import logging
import math
from dataclasses import dataclass
from functools import lru_cache

import numpy as np
from scipy.linalg.lapack import dtrtrs

from solvers.qp.lp import confirm_infeasible
from solvers.qp.space import Space, kkt_satisfied, zero_rows_feasible

__all__ = ["ENUMERATION_HARD_LIMIT", "active_from_multipliers", "solve_space"]

logger = logging.getLogger(__name__)


#: Largest number of constrained rows accepted by ``solver="enumeration"`` (3^10 sets).
ENUMERATION_HARD_LIMIT = 10


# --------------------------------------------------------------------------------------
# Method 1: enumeration of active sets ([SQP] Algorithm 1, any m)
# --------------------------------------------------------------------------------------
@lru_cache(maxsize=32)
def _side_table(n: int) -> tuple[np.ndarray, np.ndarray]:
    """All ``3^n`` side choices (+1 upper, -1 lower, 0 inactive) for ``n`` rows, (3^n, n), sorted stably
    by active-set size, and the sizes."""
    choices = list(itertools.product((0, 1, -1), repeat=n))
    table = np.array(choices, dtype=np.int8).reshape(len(choices), n)
    sizes = np.count_nonzero(table, axis=1)
    order = np.argsort(sizes, kind="stable")
    return table[order], sizes[order]


def _batched_spd_solve(A: np.ndarray, b: np.ndarray, rank_tol: float) -> tuple[np.ndarray, np.ndarray]:
    """Solve ``A x = b`` for a batch of Gram matrices; ``ok`` is False where A is (near) singular.

    Cholesky factorisation (vectorised over the batch, one column at a time) of the
    unit-diagonal scaling ``C = D^{-1/2} A D^{-1/2}``. Pivot ``j`` of ``C`` is the squared
    sine of the angle between row j and the span of rows ``0..j-1`` (in the ``H^{-1}``
    metric); a pivot at most ``rank_tol`` marks the set as linearly dependent.
    """
    n = A.shape[1]
    s = 1.0 / np.sqrt(np.einsum("bii->bi", A))
    C = A * s[:, :, None] * s[:, None, :]
    L = np.zeros_like(C)
    ok = np.ones(A.shape[0], dtype=bool)
    for j in range(n):
        pivot = C[:, j, j] - np.einsum("bk,bk->b", L[:, j, :j], L[:, j, :j])
        ok &= pivot > rank_tol
        L[:, j, j] = np.sqrt(np.where(ok, pivot, 1.0))
        below = C[:, j + 1 :, j] - np.einsum("bik,bk->bi", L[:, j + 1 :, :j], L[:, j, :j])
        L[:, j + 1 :, j] = below / L[:, j, j, None]
    z = b * s
    for j in range(n):
        z[:, j] = (z[:, j] - np.einsum("bk,bk->b", L[:, j, :j], z[:, :j])) / L[:, j, j]
    for j in reversed(range(n)):
        z[:, j] = (z[:, j] - np.einsum("bk,bk->b", L[:, j + 1 :, j], z[:, j + 1 :])) / L[:, j, j]
    return z * s, ok


_ENUMERATION_CHUNK = 2048  # candidates per batched solve (whole sizes only)


def _enumerate(space: Space, rank_tol: float) -> tuple[np.ndarray | None, np.ndarray | None, int]:
    """Active sets by increasing size, all side choices; the first KKT point found is optimal.

    [SQP] Algorithm 1 for any m, equality rows in every set. Each candidate's system is ``M_RR`` with
    inactive rows and columns replaced by the identity, so ``y_A = M_AA^{-1}(-q_A - b_A)`` for a
    batch of candidates is one batched solve, accepted by :func:`kkt_satisfied` (a KKT point of a
    strictly convex QP is its minimiser). Among accepted candidates the smallest size, then the
    smallest ``y'My``, wins. Returns ``(y, sides, candidates examined)``, ``y`` and ``sides`` None
    when none passes (the caller then runs the dual method).
    """
    ineq = space.inequality_rows
    rows = np.concatenate([np.flatnonzero(space.eq), ineq])
    n_eq = rows.size - ineq.size
    table, sizes = _side_table(ineq.size)
    available = np.all((table == 0) | ((table > 0) & space.has_hi[ineq]) | ((table < 0) & space.has_lo[ineq]), axis=1)
    table, sizes = table[available], sizes[available]
    mask = np.concatenate([np.ones((table.shape[0], n_eq), dtype=bool), table != 0], axis=1)
    bounds = np.concatenate(
        [np.broadcast_to(space.lo[rows[:n_eq]], (table.shape[0], n_eq)),
         np.where(table > 0, space.hi[ineq], np.where(table < 0, space.lo[ineq], 0.0))],
        axis=1,
    )
    M_RR, q_R = space.M[np.ix_(rows, rows)], space.q[rows]
    examined, start = 0, 0
    while start < table.shape[0]:
        stop = int(np.searchsorted(sizes, sizes[min(start + _ENUMERATION_CHUNK, table.shape[0]) - 1], side="right"))
        mk = mask[start:stop]
        A = np.where(mk[:, :, None] & mk[:, None, :], M_RR, 0.0) + np.eye(rows.size) * ~mk[:, None, :]
        y_R, ok = _batched_spd_solve(A, np.where(mk, -q_R - bounds[start:stop], 0.0), rank_tol)
        Y = np.zeros((stop - start, space.m))
        Y[:, rows] = y_R
        accepted = np.flatnonzero(ok & kkt_satisfied(space, Y, space.w(Y)))
        examined += stop - start
        if accepted.size:
            first = accepted[sizes[start + accepted] == sizes[start + accepted[0]]]
            energy = np.einsum("bi,ij,bj->b", Y[first], space.M, Y[first])
            best = first[np.argmin(energy)]
            sides = np.zeros(space.m, dtype=np.int8)
            sides[ineq] = table[start + best]
            return Y[best], sides, examined
        start = stop
    return None, None, examined


# --------------------------------------------------------------------------------------
# Method 2: dual active-set method (Goldfarb-Idnani) in the m-space
# --------------------------------------------------------------------------------------
class _GrowingCholesky:
    """Lower Cholesky factor ``L`` of the active Gram matrix ``G_AA``; O(k^2) append/delete."""

    def __init__(self, capacity: int) -> None:
        self._L = np.zeros((capacity, capacity))
        self.k = 0

    def solve(self, v: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Return ``l = L^{-1} v`` and ``r = G_AA^{-1} v = L^{-T} l``."""
        if self.k == 0:
            return np.zeros(0), np.zeros(0)
        L = self._L[: self.k, : self.k]
        l, _ = dtrtrs(L, v, lower=1)
        r, _ = dtrtrs(L, l, lower=1, trans=1)
        return l, r

    def append(self, l: np.ndarray, schur: float) -> None:
        """Add a row/column whose ``L^{-1} v`` is ``l`` and Schur complement is ``schur > 0``."""
        self._L[self.k, : self.k] = l
        self._L[self.k, self.k] = math.sqrt(schur)
        self.k += 1

    def delete(self, j: int) -> None:
        """Remove row/column ``j``: the trailing block gets the rank-one update ``+ l l'``.

        With ``L = [[L11, 0, 0], [l21', l22, 0], [L31, l32, L33]]`` the Gram matrix without
        index j factors as ``[[L11, 0], [L31, L33~]]`` with ``L33~ L33~' = L33 L33' + l32 l32'``.
        """
        k, L = self.k, self._L
        x = L[j + 1 : k, j].copy()
        T = L[j + 1 : k, j + 1 : k]  # a view: updated in place
        for i in range(x.size):
            r = math.hypot(T[i, i], x[i])
            c, s = r / T[i, i], x[i] / T[i, i]
            T[i, i] = r
            T[i + 1 :, i] = (T[i + 1 :, i] + s * x[i + 1 :]) / c
            x[i + 1 :] = c * x[i + 1 :] - s * T[i + 1 :, i]
        L[j : k - 1, :j] = L[j + 1 : k, :j]
        L[j : k - 1, j : k - 1] = L[j + 1 : k, j + 1 : k]
        L[k - 1, :k] = 0.0
        L[:k, k - 1] = 0.0
        self.k -= 1


class _WorkingSet:
    """Active sides ``(row, sign, u)`` with the Cholesky factor of their Gram matrix.

    A side ``(i, s)`` is the constraint ``s (b_i - J_i d) >= 0`` (``s = +1``: ``J_i d <= hi_i``;
    ``s = -1``: ``J_i d >= lo_i``); its Goldfarb-Idnani normal is ``n = -s J_i'``, so the Gram
    matrix of normals in the ``H^{-1}`` metric is ``G_kl = s_k s_l M[i_k, i_l]`` and the
    signed row multiplier is ``y_i = s u``. ``u >= 0`` except for equality rows (free).
    ``side[i]`` is the sign of row i's side in the set (0 if none).
    """

    def __init__(self, M: np.ndarray) -> None:
        self.M = M
        self.rows = np.zeros(0, dtype=np.int64)
        self.signs = np.zeros(0)
        self.u = np.zeros(0)
        self.is_eq = np.zeros(0, dtype=bool)
        self.side = np.zeros(M.shape[0], dtype=np.int8)
        self.factor = _GrowingCholesky(M.shape[0])

    def y(self) -> np.ndarray:
        y = np.zeros(self.M.shape[0])
        y[self.rows] = self.signs * self.u
        return y

    def project(self, row: int, sign: float) -> tuple[np.ndarray, np.ndarray, float]:
        """For side ``(row, sign)``: ``l = L^{-1} v``, ``r = G^{-1} v`` (``v = G_{A,p}``) and the
        Schur complement ``delta = M_pp - v'r`` (0 iff the row is a combination of the active rows)."""
        v = sign * self.signs * self.M[self.rows, row]
        l, r = self.factor.solve(v)
        return l, r, float(self.M[row, row] - l @ l)

    def add(self, row: int, sign: float, u: float, is_eq: bool, l: np.ndarray, delta: float) -> None:
        self.rows = np.append(self.rows, row)
        self.signs = np.append(self.signs, sign)
        self.u = np.append(self.u, u)
        self.is_eq = np.append(self.is_eq, is_eq)
        self.side[row] = int(sign)
        self.factor.append(l, delta)

    def drop(self, k: int) -> None:
        self.side[self.rows[k]] = 0
        self.rows, self.signs = np.delete(self.rows, k), np.delete(self.signs, k)
        self.u, self.is_eq = np.delete(self.u, k), np.delete(self.is_eq, k)
        self.factor.delete(k)

    def blocking(self, r: np.ndarray) -> tuple[float, int]:
        """Largest dual step ``t1 = min_{k ineq, r_k > 0} u_k / r_k`` and its index (inf, -1 if none)."""
        mask = (r > 0) & ~self.is_eq
        if not mask.any():
            return math.inf, -1
        ratios = np.where(mask, np.maximum(self.u, 0.0) / np.where(mask, r, 1.0), math.inf)
        k = int(np.argmin(ratios))
        return float(ratios[k]), k


@dataclass
class _DualOutcome:
    y: np.ndarray | None
    status: str
    iterations: int
    working: np.ndarray  # int8 side per row (+1 upper, -1 lower, 0 none)


def _add_equalities(space: Space, ws: _WorkingSet, rank_tol: float) -> bool:
    """Goldfarb-Idnani phase 0: add each equality row with a full step (never dropped later).

    A row that is a combination of those already added is skipped when consistent and
    makes the problem infeasible otherwise. Returns False when infeasible.
    """
    for i in np.flatnonzero(space.eq):
        resid = space.w(ws.y())[i] - space.lo[i]
        sign = 1.0 if resid > 0 else -1.0
        l, r, delta = ws.project(i, sign)
        if delta <= rank_tol * space.M[i, i]:
            if abs(resid) > space.row_tol(ws.y())[i]:
                return False
            logger.debug("equality row %d is redundant (dependent and consistent)", i)
            continue
        t = abs(resid) / delta
        ws.u = ws.u - t * r
        ws.add(int(i), sign, t, True, l, delta)
    return True


def _most_violated_side(space: Space, ws: _WorkingSet, w: np.ndarray) -> tuple[int, float] | None:
    """Inequality side not in the working set with the largest violation beyond its row
    tolerance, measured in the ``H^{-1}`` metric (``excess_i / sqrt(M_ii)``, the distance of
    the current step to the row's hyperplane); None when every row is feasible."""
    rows = space.inequality_rows
    if rows.size == 0:
        return None
    t = space.row_tol(ws.y())[rows]
    excess = np.stack([w[rows] - space.hi[rows], space.lo[rows] - w[rows]])  # upper, lower
    taken = np.stack([ws.side[rows] > 0, ws.side[rows] < 0])
    score = np.where((excess > t) & ~taken, excess / np.sqrt(space.M[rows, rows]), 0.0)
    which = int(np.argmax(score))
    if score.flat[which] <= 0.0:
        return None
    side, j = divmod(which, rows.size)
    return int(rows[j]), (1.0 if side == 0 else -1.0)


def _dual_active_set(space: Space, rank_tol: float, max_iter: int) -> _DualOutcome:
    """Goldfarb-Idnani dual active-set method on the m-space problem.

    Starts from the unconstrained minimiser (``y = 0``). Each outer step picks the most
    violated side ``p`` and raises its multiplier ``u_p`` by ``t`` while the active
    multipliers move by ``-t r`` (``r = G_AA^{-1} v``, ``v = G_{A,p}``) and the slack of
    ``p`` grows by ``t delta`` (``delta = M_pp - v'r``). The step is the smaller of the
    full step ``-s_p / delta`` (then ``p`` joins the working set) and the partial step
    ``min u_k / r_k`` over ``r_k > 0`` (then ``k`` leaves). ``delta ~ 0`` means ``p`` is a
    combination of the active rows: only a partial (dual) step is possible, and if no
    multiplier can give way the QP is infeasible.
    """
    ws = _WorkingSet(space.M)
    if not _add_equalities(space, ws, rank_tol):
        return _DualOutcome(None, "infeasible", 0, ws.side.copy())
    iterations = 0
    while True:
        p = _most_violated_side(space, ws, space.w(ws.y()))
        if p is None:
            return _DualOutcome(ws.y(), "optimal", iterations, ws.side.copy())
        row, sign = p
        bound = space.hi[row] if sign > 0 else space.lo[row]
        u_p = 0.0
        while True:
            iterations += 1
            if iterations > max_iter:
                return _DualOutcome(None, "numerical", iterations, ws.side.copy())
            l, r, delta = ws.project(row, sign)
            t1, k_block = ws.blocking(r)
            dependent = delta <= rank_tol * space.M[row, row]
            if dependent:
                if k_block < 0:
                    return _DualOutcome(None, "infeasible", iterations, ws.side.copy())
                t2 = math.inf
            else:
                y = ws.y()
                y[row] += sign * u_p
                slack = sign * (bound - space.w(y)[row])
                t2 = max(-slack / delta, 0.0)
            t = min(t1, t2)
            ws.u = ws.u - t * r
            u_p += t
            if t2 <= t1:
                ws.add(row, sign, u_p, False, l, delta)
                break
            ws.drop(k_block)  # the pending multiplier u_p of p enters y through `y[row]` above


# --------------------------------------------------------------------------------------
# Driver in the m-space
# --------------------------------------------------------------------------------------
@dataclass
class _SpaceSolution:
    y: np.ndarray | None
    status: str
    method: str
    iterations: int
    active: np.ndarray  # int8 (m,)


def _active_from_working(working: np.ndarray, y: np.ndarray, eq: np.ndarray) -> np.ndarray:
    """Working-set sides, with equality rows signed by their multiplier (+1 when zero)."""
    active = working.astype(np.int8)
    active[eq] = np.where(y[eq] < 0, -1, 1)
    return active


def active_from_multipliers(y: np.ndarray, eq: np.ndarray, tol: float) -> np.ndarray:
    """Sides from multiplier signs beyond ``tol * (1 + max|y|)`` (for OSQP's duals)."""
    ty = tol * (1.0 + np.abs(y).max(initial=0.0))
    active = np.where(y > ty, 1, np.where(y < -ty, -1, 0)).astype(np.int8)
    active[eq] = np.where(y[eq] < 0, -1, 1)
    return active


def solve_space(space: Space, method: str, rank_tol: float, max_iter: int) -> _SpaceSolution:
    """Solve the m-space QP with enumeration or the dual method; verify; confirm infeasibility."""
    m = space.m
    none = np.zeros(m, dtype=np.int8)
    if not zero_rows_feasible(space):
        return _SpaceSolution(None, "infeasible", method, 0, none)
    iterations = 0
    if method == "enumeration":
        y, sides, iterations = _enumerate(space, rank_tol)
        if y is not None:
            return _SpaceSolution(y, "optimal", "enumeration", iterations, _active_from_working(sides, y, space.eq))
        logger.debug("enumeration found no KKT point in %d candidates; running the dual method", iterations)
    outcome = _dual_active_set(space, rank_tol, max_iter)
    iterations += outcome.iterations
    if outcome.status == "optimal":
        y = outcome.y
        if not kkt_satisfied(space, y[None, :], space.w(y)[None, :])[0]:
            logger.debug("dual active-set result fails the KKT check within tol=%g", space.tol)
            return _SpaceSolution(None, "numerical", "dual", iterations, none)
        return _SpaceSolution(y, "optimal", "dual", iterations, _active_from_working(outcome.working, y, space.eq))
    if outcome.status == "infeasible" and not confirm_infeasible(space):
        logger.debug("dual method reported infeasibility that the least-violation LP does not confirm")
        return _SpaceSolution(None, "numerical", "dual", iterations, none)
    return _SpaceSolution(None, outcome.status, "dual", iterations, none)
