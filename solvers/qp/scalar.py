"""The QP of an SQP step with one or two constrained rows, in scalar arithmetic.

Most SQP steps carry one or two constraint rows (a disparate-impact pair, one distance
covariance bound), and there the general path of :func:`solvers.qp.diagonal_qp` spends its
time on the overhead of many small array operations, not on arithmetic: 0.31 ms per QP
with ``p = 1,441`` parameters, against a mini-batch SQP step of about 2.6 ms. This module
solves the same problem, ``min g'd + 1/2 d' diag(h) d  s.t.  lo <= J d <= hi``, by the same
method as ``solver="enumeration"`` ([SQP] Algorithm 1): every active set with every choice
of sides, by increasing size, ``y_A = M_AA^{-1} (-q_A - b_A)`` with ``M = J H^{-1} J'`` and
``q = J H^{-1} g``, accepted by the KKT test of :func:`solvers.qp.space.kkt_satisfied` with
the same tolerances; among the accepted candidates of the smallest size the one of least
``y'My`` wins. The 2 x 2 algebra is written out in Python floats; only ``M``, ``q``, the
step ``d = -H^{-1}(g + J'y)`` and the checks of the answer touch the ``p``-vectors.

:func:`solve_scalar` answers only the plain case and returns None otherwise, so that the
general path decides (and raises its errors): more than :data:`SCALAR_MAX_ROWS` rows, any
input that is not a CPU float32/float64 tensor of the right shape, a non-finite ``g``,
``h`` or ``J``, ``h <= 0``, NaN bounds, an equality row or ``lo > hi``, a zero row of
``J``, two rows nearly parallel (scaled pivot ``1 - r^2 < NEAR_DEPENDENT``), no candidate
passing the KKT test (infeasible or degenerate), or a step that misses a row by more than
the general path allows (:data:`solvers.qp.solve.PRIMAL_SLACK`). Its answers are those of
the general enumeration (``tests/test_qp.py`` compares them on random problems).
"""

from __future__ import annotations

import math

import numpy as np
import torch

from solvers.qp.lp import row_violation
from solvers.qp.results import QPResult

__all__ = ["NEAR_DEPENDENT", "SCALAR_MAX_ROWS", "solve_scalar"]

#: Most constrained rows this path takes (3^2 = 9 candidate active sets).
SCALAR_MAX_ROWS = 2
#: Two rows whose scaled pivot ``1 - r^2`` (``r`` their cosine in the ``H^{-1}`` metric) is
#: below this are left to the general path, which handles dependent rows.
NEAR_DEPENDENT = 1e-6

_FLOATS = (torch.float32, torch.float64)
_SIDES_BY_SIZE = {  # (sides per row) for m = 1, 2: by active-set size, then in the order of the enumeration
    1: (((0,),), ((1,), (-1,))),
    2: (((0, 0),), ((0, 1), (0, -1), (1, 0), (-1, 0)), ((1, 1), (1, -1), (-1, 1), (-1, -1))),
}


def _host(t: torch.Tensor) -> np.ndarray:
    return t.detach().numpy().astype(np.float64, copy=False)


def _plain_inputs(g, h, J, lo, hi) -> tuple | None:
    """Host float64 copies of plain inputs (module docstring), or None."""
    tensors = (g, h, J, lo, hi)
    if not all(isinstance(t, torch.Tensor) and t.device.type == "cpu" and t.dtype in _FLOATS for t in tensors):
        return None
    if J.dim() != 2 or not 1 <= J.shape[0] <= SCALAR_MAX_ROWS:
        return None
    m, p = J.shape
    if g.shape != (p,) or h.shape != (p,) or lo.shape != (m,) or hi.shape != (m,):
        return None
    gn, hn, Jn, lon, hin = (_host(t) for t in tensors)
    if not (np.isfinite(gn).all() and np.isfinite(hn).all() and np.isfinite(Jn).all()) or (hn <= 0).any():
        return None
    if np.isnan(lon).any() or np.isnan(hin).any() or (lon == math.inf).any() or (hin == -math.inf).any():
        return None
    if (lon >= hin).any():  # equalities (and lo > hi) are the general path's
        return None
    dtype = torch.promote_types(torch.promote_types(g.dtype, h.dtype), J.dtype)
    return gn, hn, Jn, lon, hin, dtype


def _candidate_y(sides: tuple[int, ...], M: list, q: list, lo: list, hi: list) -> list | None:
    """``y`` of one candidate (inactive rows 0), or None when a chosen side is infinite."""
    bounds = []
    for i, s in enumerate(sides):
        b = hi[i] if s > 0 else (lo[i] if s < 0 else 0.0)
        if s and not math.isfinite(b):
            return None
        bounds.append(b)
    active = [i for i, s in enumerate(sides) if s]
    y = [0.0] * len(sides)
    if len(active) == 1:
        i = active[0]
        y[i] = (-q[i] - bounds[i]) / M[i][i]
    elif len(active) == 2:  # Cramer's rule on M y = -q - b (the pivot was checked by the caller)
        r0, r1 = -q[0] - bounds[0], -q[1] - bounds[1]
        det = M[0][0] * M[1][1] - M[0][1] * M[1][0]
        y = [(r0 * M[1][1] - M[0][1] * r1) / det, (M[0][0] * r1 - M[1][0] * r0) / det]
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


def solve_scalar(g, h, J, lo, hi, tol: float, rank_tol: float, primal_slack: float) -> QPResult | None:
    """The QP by enumeration in scalar arithmetic, or None for the general path (module doc).

    Parameters are those of :func:`solvers.qp.diagonal_qp` (already checked ``tol`` and
    ``rank_tol``); ``primal_slack`` is its ``PRIMAL_SLACK``. The result has ``method =
    "enumeration"`` and ``iterations`` = the candidates examined.
    """
    plain = _plain_inputs(g, h, J, lo, hi)
    if plain is None:
        return None
    gn, hn, Jn, lon, hin, dtype = plain
    m = Jn.shape[0]
    JH = Jn / hn
    M_np = JH @ Jn.T
    M = (0.5 * (M_np + M_np.T)).tolist()
    q = (JH @ gn).tolist()
    lo, hi = lon.tolist(), hin.tolist()
    if any(M[i][i] == 0 for i in range(m)):  # a zero row of J: the general path's
        return None
    if m == 2 and 1.0 - M[0][1] ** 2 / (M[0][0] * M[1][1]) < NEAR_DEPENDENT:
        return None
    bound_mag = [max(abs(lo[i]) if math.isfinite(lo[i]) else 0.0, abs(hi[i]) if math.isfinite(hi[i]) else 0.0)
                 for i in range(m)]
    base_tol = [tol * (1.0 + abs(q[i]) + bound_mag[i]) for i in range(m)]
    candidates = [[(sides, _candidate_y(sides, M, q, lo, hi)) for sides in group] for group in _SIDES_BY_SIZE[m]]
    examined = sum(y is not None for group in candidates for _, y in group)  # as the general enumeration counts
    chosen = None
    for group in candidates:
        accepted = []
        for sides, y in group:
            if y is None:
                continue
            ok, _, _ = _kkt(y, M, q, lo, hi, base_tol, tol)
            if ok:
                energy = sum(y[i] * M[i][j] * y[j] for i in range(m) for j in range(m))
                accepted.append((energy, sides, y))
        if accepted:
            chosen = min(accepted, key=lambda a: a[0])
            break
    if chosen is None:
        return None
    _, sides, y_list = chosen
    y = np.asarray(y_list)
    d = -(gn + Jn.T @ y) / hn
    Jd_np = Jn @ d
    Jd = Jd_np.tolist()
    for i in range(m):  # the step itself meets every row (as the general path checks it)
        if math.isfinite(lo[i]) and lo[i] - Jd[i] - primal_slack * (1.0 + abs(lo[i])) > base_tol[i]:
            return None
        if math.isfinite(hi[i]) and Jd[i] - hi[i] - primal_slack * (1.0 + abs(hi[i])) > base_tol[i]:
            return None
    _, w, t = _kkt(y_list, M, q, lo, hi, base_tol, tol)
    binding = [i for i in range(m) if (math.isfinite(hi[i]) and abs(w[i] - hi[i]) <= t[i])
               or (math.isfinite(lo[i]) and abs(w[i] - lo[i]) <= t[i])]
    # smallest eigenvalue of the binding rows' unit-diagonal Gram matrix: 1 for one row, 1 - |r| for two
    min_eig = 1.0 - abs(M[0][1]) / math.sqrt(M[0][0] * M[1][1]) if len(binding) == 2 else 1.0
    residual = gn + hn * d + Jn.T @ y
    np_dtype = np.float64 if dtype == torch.float64 else np.float32
    return QPResult(
        d=torch.from_numpy(np.ascontiguousarray(d, dtype=np_dtype)),
        multipliers=torch.from_numpy(np.ascontiguousarray(y, dtype=np_dtype)),
        active=torch.tensor(sides, dtype=torch.int8),
        status="optimal",
        objective=float(gn @ d + 0.5 * hn @ (d * d)),
        kkt_residual=float(np.max(np.abs(residual), initial=0.0)),
        max_violation=float(np.max(row_violation(Jd_np, lon, hin), initial=0.0)),
        degenerate=min_eig <= rank_tol,
        method="enumeration",
        iterations=examined,
    )
