"""The QP of an SQP step with up to four constrained rows, in scalar arithmetic.

Most SQP steps carry a few rows, where the general path of :func:`solvers.qp.diagonal_qp` spends its
time on the overhead of small array operations. This module solves the same problem by the same
method as ``solver="enumeration"`` ([SQP] Algorithm 1): active sets by increasing size,
``y_A = M_AA^{-1} (-q_A - b_A)``, the KKT test of :func:`solvers.qp.space.kkt_satisfied`, the least
``y'My`` among the accepted candidates of the smallest size, the ``|A| x |A|`` systems in Python
floats. :func:`solve_scalar` returns None, leaving the general path to decide (and raise), for
anything but the plain case: too many rows or candidates, inputs other than finite CPU
float32/float64 tensors, ``h <= 0``, equality or zero rows, nearly dependent rows
(:data:`NEAR_DEPENDENT`), no accepted candidate, or a step missing a row by more than
:data:`solvers.qp.solve.PRIMAL_SLACK`.
"""

from __future__ import annotations

import itertools
import math
from functools import lru_cache

import numpy as np
import torch

from solvers.qp.results import QPResult
from solvers.qp.space import scaled_min_eig

__all__ = ["MAX_CANDIDATES", "NEAR_DEPENDENT", "SCALAR_MAX_ROWS", "solve_scalar"]

#: Most constrained rows this path takes.
SCALAR_MAX_ROWS = 4
#: Most candidate active sets (the product over rows of 1 + the number of finite sides): four
#: one-sided rows give 16, three two-sided rows 27; more go to the general path, whose batched
#: enumeration and dual method cost less than this many candidates in Python.
MAX_CANDIDATES = 27
#: Rows whose unit-diagonal Gram matrix (cosines ``r``) has an eigenvalue below this go to the general
#: path. Every active set is then well conditioned (eigenvalues interlace): a ``2 x 2`` solve loses at
#: most about 8 of float64's 16 digits, and the KKT and primal checks still judge the answer.
NEAR_DEPENDENT = 1e-8

_FLOATS = (torch.float32, torch.float64)


@lru_cache(maxsize=64)
def _candidates(sides: tuple[tuple[int, ...], ...]) -> tuple[tuple[tuple[int, ...], ...], ...]:
    """The side choices (+1, -1, 0) with row ``i`` taking ``sides[i]``, by active-set size, each group in
    the general enumeration's order."""
    choices = list(itertools.product(*sides))
    return tuple(tuple(c for c in choices if sum(1 for s in c if s) == size) for size in range(len(sides) + 1))


def _host(t: torch.Tensor) -> np.ndarray:
    return t.detach().numpy().astype(np.float64, copy=False)


def _plain_inputs(g, h, J, lo, hi) -> tuple | None:
    """Host float64 copies of ``g, h, J``, the bounds as Python floats and the result dtype, or None
    when the inputs are not plain (module docstring). Finite entries are checked where they are
    cheapest: ``0 < h < inf`` here, ``g`` and ``J`` through the finite ``M`` and ``q`` that
    :func:`solve_scalar` computes anyway (a NaN or infinity in them leaves one of those non-finite)."""
    tensors = (g, h, J, lo, hi)
    if not all(isinstance(t, torch.Tensor) and t.device.type == "cpu" and t.dtype in _FLOATS for t in tensors):
        return None
    if J.dim() != 2 or not 1 <= J.shape[0] <= SCALAR_MAX_ROWS:
        return None
    m, p = J.shape
    if g.shape != (p,) or h.shape != (p,) or lo.shape != (m,) or hi.shape != (m,):
        return None
    gn, hn, Jn = _host(g), _host(h), _host(J)
    if not 0 < hn.min() <= hn.max() < math.inf:  # (also a NaN)
        return None
    lo_list, hi_list = lo.tolist(), hi.tolist()  # a few rows: Python floats
    for a, b in zip(lo_list, hi_list):
        if math.isnan(a) or math.isnan(b) or a == math.inf or b == -math.inf or a >= b:  # (equalities: general path)
            return None
    dtype = torch.promote_types(torch.promote_types(g.dtype, h.dtype), J.dtype)
    return gn, hn, Jn, lo_list, hi_list, dtype


def _unit_min_eig(M: list, rows: list[int]) -> float:
    """Smallest eigenvalue of the unit-diagonal Gram matrix of ``rows``: 1 for one row, ``1 - |r|``
    for two at cosine ``r``, :func:`solvers.qp.space.scaled_min_eig` for more."""
    if len(rows) < 2:
        return 1.0
    if len(rows) == 2:
        a, b = rows
        return 1.0 - abs(M[a][b]) / math.sqrt(M[a][a] * M[b][b])
    return scaled_min_eig(np.asarray(M)[np.ix_(rows, rows)])


def _solve_small(M: list, active: list[int], r: list[float]) -> list[float]:
    """``y_A`` with ``M_AA y_A = r`` (``|A| <= 4``, ``M_AA`` symmetric positive definite) by
    Gaussian elimination in Python floats (no pivoting is needed for such a matrix)."""
    k = len(active)
    if k == 1:
        return [r[0] / M[active[0]][active[0]]]
    if k == 2:  # Cramer's rule
        a, b = active
        det = M[a][a] * M[b][b] - M[a][b] * M[b][a]
        return [(r[0] * M[b][b] - M[a][b] * r[1]) / det, (M[a][a] * r[1] - M[b][a] * r[0]) / det]
    A = [[M[i][j] for j in active] + [r[row]] for row, i in enumerate(active)]
    for col in range(k):
        pivot = A[col][col]
        for row in range(col + 1, k):
            factor = A[row][col] / pivot
            if factor:
                for j in range(col, k + 1):
                    A[row][j] -= factor * A[col][j]
    y = [0.0] * k
    for row in range(k - 1, -1, -1):
        y[row] = (A[row][k] - sum(A[row][j] * y[j] for j in range(row + 1, k))) / A[row][row]
    return y


def _candidate_y(sides: tuple[int, ...], M: list, q: list, lo: list, hi: list) -> list:
    """``y`` of one candidate (inactive rows 0; every chosen side finite)."""
    active, rhs = [], []
    for i, s in enumerate(sides):
        if s:
            active.append(i)
            rhs.append(-q[i] - (hi[i] if s > 0 else lo[i]))
    y = [0.0] * len(sides)
    if active:
        for i, value in zip(active, _solve_small(M, active, rhs)):
            y[i] = value
    return y


def _kkt(y: list, M: list, q: list, lo: list, hi: list, base_tol: list, tol: float) -> tuple[bool, list, list]:
    """:func:`solvers.qp.space.kkt_satisfied` for one candidate; also ``w`` and the row tolerances."""
    m = len(y)
    w, t = [], []
    for i in range(m):
        w_i, spread = -q[i], 0.0
        for j in range(m):
            w_i -= M[j][i] * y[j]
            spread += abs(y[j]) * abs(M[j][i])
        w.append(w_i)
        t.append(base_tol[i] + tol * spread)
    ty = tol * (1.0 + max(abs(v) for v in y))
    for i in range(m):
        if not (lo[i] - t[i] <= w[i] <= hi[i] + t[i]):
            return False, w, t
        upper_binds = math.isfinite(hi[i]) and abs(w[i] - hi[i]) <= t[i]
        lower_binds = math.isfinite(lo[i]) and abs(w[i] - lo[i]) <= t[i]
        if (y[i] > ty and not upper_binds) or (y[i] < -ty and not lower_binds):
            return False, w, t
    return True, w, t


def solve_scalar(g: torch.Tensor, h: torch.Tensor, J: torch.Tensor, lo: torch.Tensor, hi: torch.Tensor, tol: float,
                 rank_tol: float, primal_slack: float,
                 multipliers_only: bool = False) -> QPResult | None:
    """The QP by enumeration in scalar arithmetic (:func:`solvers.qp.diagonal_qp`'s arguments, checked),
    or None for the general path. ``multipliers_only``: the multipliers and the active set of the accepted
    candidate (the KKT test in the constraint space is the optimality test), without forming ``d`` and the
    checks of it: ``d`` None, objective, KKT residual and violation NaN."""
    plain = _plain_inputs(g, h, J, lo, hi)
    if plain is None:
        return None
    gn, hn, Jn, lo, hi, dtype = plain
    m = Jn.shape[0]
    JH = Jn / hn
    M_np = JH @ Jn.T
    M = (0.5 * (M_np + M_np.T)).tolist()
    q = (JH @ gn).tolist()
    if not all(math.isfinite(v) for v in itertools.chain(q, *M)):  # a NaN or infinity in g or J
        return None
    if math.prod(1 + math.isfinite(a) + math.isfinite(b) for a, b in zip(lo, hi)) > MAX_CANDIDATES:
        return None
    if any(M[i][i] == 0 for i in range(m)):  # a zero row of J: the general path's
        return None
    if m > 1 and _unit_min_eig(M, list(range(m))) < NEAR_DEPENDENT:
        return None
    bound_mag = [max(abs(lo[i]) if math.isfinite(lo[i]) else 0.0, abs(hi[i]) if math.isfinite(hi[i]) else 0.0)
                 for i in range(m)]
    base_tol = [tol * (1.0 + abs(q[i]) + bound_mag[i]) for i in range(m)]
    groups = _candidates(tuple((0,) + ((1,) if math.isfinite(hi[i]) else ()) + ((-1,) if math.isfinite(lo[i]) else ())
                               for i in range(m)))
    examined = sum(len(group) for group in groups)  # the general enumeration solves them all in one batch
    chosen = None
    for group in groups:
        accepted = []
        for sides in group:
            y = _candidate_y(sides, M, q, lo, hi)
            ok, w, t = _kkt(y, M, q, lo, hi, base_tol, tol)
            if ok:
                energy = sum(y[i] * M[i][j] * y[j] for i in range(m) for j in range(m))
                accepted.append((energy, sides, y, w, t))
        if accepted:
            chosen = min(accepted, key=lambda a: a[0])
            break
    if chosen is None:
        return None
    _, sides, y_list, w, t = chosen
    binding = [i for i in range(m) if (math.isfinite(hi[i]) and abs(w[i] - hi[i]) <= t[i])
               or (math.isfinite(lo[i]) and abs(w[i] - lo[i]) <= t[i])]
    # smallest eigenvalue of the binding rows' unit-diagonal Gram matrix: 1 for one row, 1 - |r| for two
    degenerate = _unit_min_eig(M, binding) <= rank_tol
    np_dtype = np.float64 if dtype == torch.float64 else np.float32
    y = np.asarray(y_list)
    multipliers = torch.from_numpy(np.ascontiguousarray(y, dtype=np_dtype))
    active = torch.from_numpy(np.array(sides, dtype=np.int8))
    if multipliers_only:
        nan = math.nan
        return QPResult(d=None, multipliers=multipliers, active=active, status="optimal", objective=nan,
                        kkt_residual=nan, max_violation=nan, degenerate=degenerate, method="enumeration",
                        iterations=examined)
    # d = -(g + J'y) / h, with J'y kept for the residual; in place: a few passes over p values
    Jy = Jn.T @ y
    d = gn + Jy
    np.divide(d, hn, out=d)
    np.negative(d, out=d)
    Jd_np = Jn @ d
    Jd = Jd_np.tolist()
    for i in range(m):  # the step itself meets every row (as the general path checks it)
        if math.isfinite(lo[i]) and lo[i] - Jd[i] - primal_slack * (1.0 + abs(lo[i])) > base_tol[i]:
            return None
        if math.isfinite(hi[i]) and Jd[i] - hi[i] - primal_slack * (1.0 + abs(hi[i])) > base_tol[i]:
            return None
    residual = hn * d  # g + h d + J'y
    residual += gn
    residual += Jy
    kkt_residual = float(np.abs(residual, out=residual).max()) if residual.size else 0.0
    objective = float(gn @ d + 0.5 * hn @ np.multiply(d, d, out=residual))
    return QPResult(
        d=torch.from_numpy(np.ascontiguousarray(d, dtype=np_dtype)),
        multipliers=multipliers,
        active=active,
        status="optimal",
        objective=objective,
        kkt_residual=kkt_residual,
        max_violation=max((max(lo[i] - Jd[i], Jd[i] - hi[i], 0.0) for i in range(m)), default=0.0),
        degenerate=degenerate,
        method="enumeration",
        iterations=examined,
    )
