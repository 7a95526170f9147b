"""Binary projections whose rows read counts of cells: top-k within each cell, a search over counts.

A binary program ``min_z c'z``, ``z`` in ``{0, 1}^n``, ``lower <= A z <= upper``, whose ``A`` has few
distinct columns: rows with the same column ``a_g`` form a cell ``g``, and only its count of ones
``k_g`` enters, ``A z = sum_g a_g k_g``. Group rates on unweighted hard labels have this form (e.g.
disparate impact ``delta k_0 / n_0 - k_1 / n_1 <= 0``; Moving Targets' ``1 <= sum z <= n - 1`` is a
count row). The cheapest ``k`` ones of a cell are its ``k`` smallest costs
``s_{g,(1)} <= ... <= s_{g,(n_g)}``, so the program is

.. math::

    \\min_{k}\\; \\sum_g F_g(k_g), \\qquad F_g(k) = \\sum_{j=1}^{k} s_{g,(j)}, \\qquad
    \\text{s.t.}\\; lower \\le \\sum_g a_g k_g \\le upper,\\; k_g \\in \\{0, \\dots, n_g\\},

with every ``F_g`` convex (non-decreasing increments), minimised over ``[lo, hi]`` by
``clip(m_g, lo, hi)``, ``m_g = #{j : s_{g,(j)} < 0}``.

The search takes a pivot cell ``p`` such that every row involves at most one other cell, except at
most one count row with equal coefficients on its other cells. For every ``k_p = 0..n_p``: a row
``l <= a_p k_p + a_g k_g <= u`` bounds ``k_g`` to ``[ceil((l - a_p k_p) / a_g), floor((u - a_p k_p)
/ a_g)]`` (swapped for ``a_g < 0``, widened by ``FEASIBILITY_TOL``); each other cell takes
``clip(m_g, lo_g, hi_g)``; a missed count row is met at its nearer end by the cheapest increments
(or dearest decrements) of its cells, the optimal greedy exchange for separable convex costs under
one sum. The best feasible ``k_p`` wins: ``O(n log n + n_p m C)``. Programs without a pivot go to
the MIP backends. Ties in cost go to the higher ``priority`` (Moving Targets: the learner's score).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

from solvers.projection.backends import FEASIBILITY_TOL
from solvers.projection.program import Program
from solvers.projection.results import BackendResult

__all__ = ["CountStructure", "MAX_CELLS", "count_structure", "solve_counts"]

#: Most cells (distinct constraint columns) the count search takes; more go to a MIP backend.
MAX_CELLS = 64
# relative tolerance for "equal coefficients" of a count row
_EQUAL_RTOL = 1e-12


@dataclass(frozen=True)
class CountStructure:
    """The cells of a binary program (``cells`` (n,), their columns ``a_g`` (m, C)), its row bounds, the
    pivot cell and the count row coupling several other cells, if any (module doc)."""

    cells: np.ndarray
    columns: np.ndarray
    lower: np.ndarray
    upper: np.ndarray
    pivot: int
    count_row: int | None


def count_structure(prog: Program) -> CountStructure | None:
    """The cells and pivot of ``prog``, or None unless it is binary, linear, without auxiliary variables,
    with at most :data:`MAX_CELLS` cells and a pivot."""
    if not prog.binary or prog.n_vars != prog.n or prog.hessian is not None:
        return None
    A = prog.A.toarray() if sp.issparse(prog.A) else np.asarray(prog.A, dtype=float)
    if A.shape[0] == 0:
        columns, cells = np.zeros((0, 1)), np.zeros(prog.n, dtype=np.int64)
    else:
        unique, cells = np.unique(A.T, axis=0, return_inverse=True)
        if unique.shape[0] > MAX_CELLS:
            return None
        columns, cells = unique.T, cells.reshape(-1).astype(np.int64)
    sizes = np.bincount(cells, minlength=columns.shape[1])
    for pivot in np.argsort(sizes, kind="stable"):
        count_row = _count_row(columns, int(pivot))
        if count_row is not False:
            return CountStructure(cells=cells, columns=columns, lower=prog.row_lower.copy(),
                                  upper=prog.row_upper.copy(), pivot=int(pivot), count_row=count_row)
    return None


def _count_row(columns: np.ndarray, pivot: int) -> int | None | bool:
    """For pivot ``pivot``: the one row coupling several other cells (equal coefficients), None
    when no row does, False when the pivot does not fit (two such rows, or unequal coefficients)."""
    others = np.ones(columns.shape[1], dtype=bool)
    others[pivot] = False
    found: int | None = None
    for r, row in enumerate(columns):
        support = others & (row != 0)
        if support.sum() <= 1:
            continue
        values = row[support]
        if found is not None or not np.allclose(values, values[0], rtol=_EQUAL_RTOL, atol=0.0):
            return False
        found = r
    return found


def solve_counts(prog: Program, structure: CountStructure, priority: np.ndarray | None = None) -> BackendResult:
    """The optimal ``z`` of ``prog`` by the count search, "optimal" (gap 0) or "infeasible" (``x`` None);
    ``priority`` (n,) breaks ties within a cell, higher first to get a one."""
    cost = np.asarray(prog.cost[: prog.n], dtype=float)
    tie = np.zeros(prog.n) if priority is None else -np.asarray(priority, dtype=float)
    cells, columns = structure.cells, structure.columns
    n_cells = columns.shape[1]
    order = [np.flatnonzero(cells == g) for g in range(n_cells)]
    order = [rows[np.lexsort((tie[rows], cost[rows]))] for rows in order]
    sorted_costs = [cost[rows] for rows in order]
    prefix = [np.concatenate([[0.0], np.cumsum(s)]) for s in sorted_costs]
    best_free = [int(np.count_nonzero(s < 0)) for s in sorted_costs]
    counts = _search(structure, sorted_costs, prefix, best_free)
    if counts is None:
        return BackendResult(x=None, status="infeasible", solver_status="count search: no feasible counts", gap=0.0)
    z = np.zeros(prog.n)
    for rows, k in zip(order, counts):
        z[rows[:k]] = 1.0
    pivot = structure.pivot
    text = f"count search: {n_cells} cell(s), pivot of {order[pivot].size} rows"
    return BackendResult(x=z, status="optimal", solver_status=text, gap=0.0)


def _search(structure: CountStructure, sorted_costs: list, prefix: list, best_free: list) -> list[int] | None:
    """The optimal counts per cell, or None when no counts meet the rows."""
    columns, lower, upper, p = structure.columns, structure.lower, structure.upper, structure.pivot
    n_cells = columns.shape[1]
    sizes = [s.size for s in sorted_costs]
    kp = np.arange(sizes[p] + 1, dtype=float)
    valid = np.ones(kp.size, dtype=bool)
    lo = {g: np.zeros(kp.size) for g in range(n_cells) if g != p}
    hi = {g: np.full(kp.size, float(sizes[g])) for g in range(n_cells) if g != p}
    for r in range(columns.shape[0]):
        if r == structure.count_row:
            continue
        others = [g for g in range(n_cells) if g != p and columns[r, g] != 0]
        rest = columns[r, p] * kp
        if not others:
            valid &= (rest >= lower[r] - FEASIBILITY_TOL) & (rest <= upper[r] + FEASIBILITY_TOL)
            continue
        g = others[0]
        low, high = _interval(lower[r] - rest, upper[r] - rest, columns[r, g])
        lo[g], hi[g] = np.maximum(lo[g], low), np.minimum(hi[g], high)
    chosen = {}
    total = prefix[p][kp.astype(np.int64)].copy()
    for g in lo:
        valid &= lo[g] <= hi[g]
        chosen[g] = np.clip(np.clip(best_free[g], lo[g], np.maximum(lo[g], hi[g])), 0, sizes[g]).astype(np.int64)
        total += prefix[g][chosen[g]]
    binding = np.zeros(kp.size, dtype=bool)
    if structure.count_row is not None:
        r = structure.count_row
        members = [g for g in lo if columns[r, g] != 0]
        low, high = _interval(lower[r] - columns[r, p] * kp, upper[r] - columns[r, p] * kp, columns[r, members[0]])
        reach_low = np.sum([lo[g] for g in members], axis=0)
        reach_high = np.sum([hi[g] for g in members], axis=0)
        valid &= (np.maximum(low, reach_low) <= np.minimum(high, reach_high))
        now = np.sum([chosen[g] for g in members], axis=0)
        binding = valid & ((now < low) | (now > high))
        for i in np.flatnonzero(binding):
            target = int(low[i]) if now[i] < low[i] else int(high[i])
            counts_i, extra = _meet_count(target, {g: int(chosen[g][i]) for g in members},
                                          {g: int(lo[g][i]) for g in members}, {g: int(hi[g][i]) for g in members},
                                          sorted_costs)
            total[i] += extra
            for g in members:
                chosen[g][i] = counts_i[g]
    if not valid.any():
        return None
    i = int(np.flatnonzero(valid)[np.argmin(total[valid])])
    return [int(kp[i]) if g == p else int(chosen[g][i]) for g in range(n_cells)]


def _interval(low: np.ndarray, high: np.ndarray, a: float) -> tuple[np.ndarray, np.ndarray]:
    """Integer ``k`` with ``low <= a k <= high`` (widened by the feasibility tolerance): ``[lo, hi]``."""
    low, high = np.asarray(low - FEASIBILITY_TOL, dtype=float), np.asarray(high + FEASIBILITY_TOL, dtype=float)
    if a < 0:
        low, high, a = -high, -low, -a
    with np.errstate(invalid="ignore"):
        k_low = np.where(np.isfinite(low), np.ceil(low / a), -np.inf)
        k_high = np.where(np.isfinite(high), np.floor(high / a), np.inf)
    return k_low, k_high


def _meet_count(target: int, counts: dict, lo: dict, hi: dict, sorted_costs: list) -> tuple[dict, float]:
    """Counts summing to ``target`` by the cheapest increments (or dearest decrements) within ``[lo, hi]``;
    the new counts and the change of cost."""
    now = sum(counts.values())
    grow = target > now
    labels, values = [], []
    for g, k in counts.items():
        piece = sorted_costs[g][k:hi[g]] if grow else sorted_costs[g][lo[g]:k]
        labels.append(np.full(piece.size, g))
        values.append(piece)
    labels, values = np.concatenate(labels), np.concatenate(values)
    d = abs(target - now)
    picked = np.argsort(values if grow else -values, kind="stable")[:d]
    new = dict(counts)
    for g, moved in zip(*np.unique(labels[picked], return_counts=True)):
        new[int(g)] += int(moved) if grow else -int(moved)
    change = float(values[picked].sum())
    return new, change if grow else -change
