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
``solver="enumeration"``, the paper's algorithm, used to cross-check. Nothing forms a
``(p+m) x (p+m)`` KKT matrix or a ``p x p`` matrix: cost O(p m^2) to form ``M``, then
O(m^2) per working-set change of the dual method (typically O(m) changes) and O(3^m m^3)
for enumeration; memory O(p m).

The infeasible-linearisation case of the SQP is handled by :func:`least_violation_bounds`.
"""

from __future__ import annotations

import itertools
import logging
import math
import warnings
from dataclasses import dataclass
from functools import cached_property, lru_cache
from typing import Any, Literal

import numpy as np
import torch
from scipy.linalg.lapack import dtrtrs
from scipy.optimize import linprog

from solvers.problem import split_rows
from solvers.validation import check_choice, positive_float, positive_int

__all__ = [
    "QPResult",
    "RelaxedBounds",
    "diagonal_qp",
    "least_violation_bounds",
    "LeastViolationWarning",
    "ENUMERATION_MAX_ROWS",
]

logger = logging.getLogger(__name__)

#: Largest number of constrained rows for which ``solver="active_set"`` enumerates active
#: sets (beyond it the dual active-set method is used). Chosen by timing both paths on
#: random problems (mean solve time in the m-space, 2-core CPU, numpy): for m = 1, 2, 4, 8
#: enumeration took 137, 163, 214, 494 us and the dual method 77, 108, 158, 291 us, so the
#: dual method is the default for every m >= 1 (enumeration: ``solver="enumeration"``).
ENUMERATION_MAX_ROWS = 0
#: Largest number of constrained rows accepted by ``solver="enumeration"`` (3^10 sets).
_ENUMERATION_HARD_LIMIT = 10

Solver = Literal["active_set", "enumeration", "dual", "osqp"]
_SOLVERS = ("active_set", "enumeration", "dual", "osqp")


# --------------------------------------------------------------------------------------
# Results
# --------------------------------------------------------------------------------------
@dataclass(frozen=True)
class QPResult:
    """Solution of :func:`diagonal_qp`.

    Attributes
    ----------
    d : torch.Tensor or None
        The step, shape ``(p,)``, dtype of the inputs. ``None`` unless ``status`` is
        ``"optimal"``.
    multipliers : torch.Tensor or None
        Signed multipliers ``y`` (m,): ``> 0`` upper side active, ``< 0`` lower side active,
        ``0`` inactive, so that ``g + h * d + J' y = 0``. ``None`` unless optimal.
    active : torch.Tensor
        int8 (m,): ``+1`` upper side in the final working set, ``-1`` lower side, ``0`` not
        in it. Equality rows are ``+-1`` by the sign of their multiplier (``+1`` if zero).
        All zeros when not optimal.
    status : str
        ``"optimal"``; ``"infeasible"`` (no ``d`` satisfies ``lo <= J d <= hi``, confirmed by
        a least-violation LP); or ``"numerical"`` (the method stopped without a solution
        that passes the KKT check within ``tol``: never returned as a step).
    objective : float
        ``g'd + 1/2 d' diag(h) d`` (NaN unless optimal).
    kkt_residual : float
        ``||g + h * d + J' y||_inf`` in float64, before casting ``d`` to the output dtype
        (NaN unless optimal).
    max_violation : float
        ``max_i max(J_i d - hi_i, lo_i - J_i d, 0)`` of the float64 step (NaN unless optimal).
    degenerate : bool
        The rows binding at the solution are linearly dependent in the ``H^{-1}`` metric
        (LICQ fails; includes zero rows of ``J`` at a zero bound). ``d`` is still unique;
        the multipliers are one valid choice among many.
    method : str
        ``"enumeration"``, ``"dual"`` or ``"osqp"``: the method that produced the answer.
    iterations : int
        Candidates examined (enumeration), working-set changes (dual), or OSQP iterations.
    """

    d: torch.Tensor | None
    multipliers: torch.Tensor | None
    active: torch.Tensor
    status: str
    objective: float
    kkt_residual: float
    max_violation: float
    degenerate: bool
    method: str
    iterations: int


@dataclass(frozen=True)
class RelaxedBounds:
    """Result of :func:`least_violation_bounds`.

    Attributes
    ----------
    v : torch.Tensor
        Normal step (p,) of least total violation (the least ``H``-norm one within the
        relaxed box, see :func:`least_violation_bounds`).
    w : torch.Tensor
        ``J v`` (m,).
    lo, hi : torch.Tensor
        Relaxed bounds ``min(lo, J v)`` and ``max(hi, J v)`` (m,); rounded outwards when
        the output dtype is narrower than float64, so that ``v`` stays feasible for them.
    violation : float
        The minimal total violation ``V(J v; lo, hi)``; 0 up to rounding when the system is
        feasible.
    """

    v: torch.Tensor
    w: torch.Tensor
    lo: torch.Tensor
    hi: torch.Tensor
    violation: float


# --------------------------------------------------------------------------------------
# Validation and conversion (all internal algebra is float64 numpy on the host)
# --------------------------------------------------------------------------------------
_NUMPY_DTYPES = {torch.float64: np.float64, torch.float32: np.float32, torch.float16: np.float16}


@dataclass(frozen=True)
class _Array:
    """A validated input as a float64 host array, with its torch dtype/device (if a tensor)."""

    values: np.ndarray
    dtype: torch.dtype | None
    device: torch.device | None


def _as_array(name: str, value: Any, ndim: int) -> _Array:
    """``value`` (tensor or array-like) as float64 numpy with ``ndim`` dims and no NaN."""
    dtype = device = None
    if isinstance(value, torch.Tensor):
        t = value.detach()
        if t.is_complex() or t.dtype == torch.bool:
            raise ValueError(f"{name}: expected a real floating tensor, got dtype {t.dtype}")
        dtype = t.dtype if t.is_floating_point() else None
        device = t.device
        t = t.cpu()
        arr = np.asarray((t.float() if t.dtype == torch.bfloat16 else t).numpy(), dtype=np.float64)
    else:
        try:
            arr = np.asarray(value, dtype=np.float64)
        except (TypeError, ValueError) as exc:
            raise ValueError(f"{name}: cannot be converted to a float array ({exc})") from None
    if arr.ndim != ndim:
        raise ValueError(f"{name}: expected {ndim} dimension(s), got shape {arr.shape}")
    if np.isnan(arr).any():
        idx = tuple(int(i) for i in np.argwhere(np.isnan(arr))[0])
        raise ValueError(f"{name}: contains NaN (first at index {idx})")
    return _Array(arr, dtype, device)


def _require_finite(name: str, arr: np.ndarray) -> None:
    if not np.isfinite(arr).all():
        idx = tuple(int(i) for i in np.argwhere(~np.isfinite(arr))[0])
        raise ValueError(f"{name}: contains an infinite value {arr[idx]} at index {idx}")


@dataclass(frozen=True)
class _Inputs:
    """Validated float64 host copies of the inputs, with the output dtype and device."""

    g: np.ndarray
    h: np.ndarray
    J: np.ndarray
    lo: np.ndarray
    hi: np.ndarray
    dtype: torch.dtype
    device: torch.device

    def to_torch(self, x: np.ndarray) -> torch.Tensor:
        """``x`` as a tensor of the output dtype and device (cast in numpy: no torch threads)."""
        np_dtype = _NUMPY_DTYPES.get(self.dtype)
        if np_dtype is not None:
            t = torch.from_numpy(np.ascontiguousarray(x, dtype=np_dtype))
        else:
            t = torch.from_numpy(np.ascontiguousarray(x)).to(self.dtype)
        return t if self.device.type == "cpu" else t.to(self.device)


def _validate(g: Any, h: Any, J: Any, lo: Any, hi: Any) -> _Inputs:
    """Check shapes, NaN/inf, ``h > 0`` and ``lo <= hi``; raise ValueError naming the argument.

    ``g = None`` stands for a zero linear term. The output dtype is the promoted floating
    dtype of the tensors among ``g, h, J`` (float64 if none is a floating tensor); the output
    device is that of the first tensor among them.
    """
    J_a = _as_array("J", J, 2)
    m, p = J_a.values.shape
    g_a = _as_array("g", np.zeros(p) if g is None else g, 1)
    h_a = _as_array("h", h, 1)
    lo_a = _as_array("lo", lo, 1)
    hi_a = _as_array("hi", hi, 1)
    if g_a.values.shape != (p,):
        raise ValueError(f"g: expected shape ({p},) (one entry per column of J), got {g_a.values.shape}")
    if h_a.values.shape != (p,):
        raise ValueError(f"h: expected shape ({p},) (one entry per column of J), got {h_a.values.shape}")
    for name, a in (("lo", lo_a), ("hi", hi_a)):
        if a.values.shape != (m,):
            raise ValueError(f"{name}: expected shape ({m},) (one entry per row of J), got {a.values.shape}")
    for name, a in (("g", g_a), ("h", h_a), ("J", J_a)):
        _require_finite(name, a.values)
    if (h_a.values <= 0).any():
        i = int(np.flatnonzero(h_a.values <= 0)[0])
        raise ValueError(f"h: must be > 0, got h[{i}] = {h_a.values[i]}")
    lo_v, hi_v = lo_a.values, hi_a.values
    if np.any(lo_v == np.inf):
        i = int(np.flatnonzero(lo_v == np.inf)[0])
        raise ValueError(f"lo: lo[{i}] = +inf (a lower bound must be finite or -inf)")
    if np.any(hi_v == -np.inf):
        i = int(np.flatnonzero(hi_v == -np.inf)[0])
        raise ValueError(f"hi: hi[{i}] = -inf (an upper bound must be finite or +inf)")
    if np.any(lo_v > hi_v):
        i = int(np.flatnonzero(lo_v > hi_v)[0])
        raise ValueError(f"lo/hi: lo[{i}] = {lo_v[i]} > hi[{i}] = {hi_v[i]} at row {i}")
    tensors = [a for a in (g_a, h_a, J_a) if a.device is not None]
    dtype = torch.float64
    floats = [a.dtype for a in tensors if a.dtype is not None]
    if floats:
        dtype = floats[0]
        for dt in floats[1:]:
            dtype = torch.promote_types(dtype, dt)
    device = tensors[0].device if tensors else torch.device("cpu")
    return _Inputs(g_a.values, h_a.values, J_a.values, lo_v, hi_v, dtype, device)


# --------------------------------------------------------------------------------------
# The m-space problem
# --------------------------------------------------------------------------------------
@dataclass(frozen=True)
class _Space:
    """The QP in the constraint space: ``w(y) = -q - M y`` must satisfy ``lo <= w <= hi``.

    ``row_tol(y)`` is the per-row feasibility tolerance at multipliers ``y``:
    ``tol * (1 + |q_i| + max finite |bound_i| + sum_j |M_ij| |y_j|)``, i.e. relative to the
    terms summed in ``w_i = -q_i - sum_j M_ij y_j`` (its rounding error grows with them).
    ``base_tol`` is its value at ``y = 0``.
    Row classes (computed once): ``zero`` (``J_i = 0``), ``eq`` (non-zero, ``lo == hi``),
    ``inequality_rows`` (non-zero, one or two finite sides); the remaining rows are free.
    """

    M: np.ndarray
    q: np.ndarray
    lo: np.ndarray
    hi: np.ndarray
    base_tol: np.ndarray
    tol: float
    zero: np.ndarray

    @property
    def m(self) -> int:
        return self.q.shape[0]

    @cached_property
    def has_lo(self) -> np.ndarray:
        return np.isfinite(self.lo)

    @cached_property
    def has_hi(self) -> np.ndarray:
        return np.isfinite(self.hi)

    @cached_property
    def eq(self) -> np.ndarray:
        """Non-zero equality rows (``lo == hi``)."""
        return (self.lo == self.hi) & ~self.zero

    @cached_property
    def inequality_rows(self) -> np.ndarray:
        """Non-zero, non-equality rows with at least one finite side."""
        return np.flatnonzero((self.has_lo | self.has_hi) & ~(self.lo == self.hi) & ~self.zero)

    def w(self, y: np.ndarray) -> np.ndarray:
        """``J d(y) = -q - M y`` (works on a batch ``y`` of shape (B, m) too)."""
        return -self.q - y @ self.M

    def row_tol(self, y: np.ndarray) -> np.ndarray:
        """Feasibility tolerance per row at multipliers ``y`` (m,) or (B, m)."""
        return self.base_tol + self.tol * (np.abs(y) @ self.abs_M)

    @cached_property
    def abs_M(self) -> np.ndarray:
        return np.abs(self.M)


def _build_space(inputs: _Inputs, lo: np.ndarray, hi: np.ndarray, tol: float) -> _Space:
    """Form ``M = J H^{-1} J'`` and ``q = J H^{-1} g`` once (O(p m^2)), with row tolerances."""
    JH = inputs.J / inputs.h
    M = JH @ inputs.J.T
    M = 0.5 * (M + M.T)
    q = JH @ inputs.g
    zero = np.diag(M) == 0  # J_i H^{-1} J_i' = 0 iff J_i = 0 (h > 0): exact, no rounding
    bound_mag = np.maximum(np.where(np.isfinite(lo), np.abs(lo), 0.0), np.where(np.isfinite(hi), np.abs(hi), 0.0))
    return _Space(M=M, q=q, lo=lo, hi=hi, base_tol=tol * (1.0 + np.abs(q) + bound_mag), tol=tol, zero=zero)


def _zero_rows_feasible(space: _Space) -> bool:
    """A zero row of J gives ``J_i d = 0`` for every d: feasible iff ``lo_i <= 0 <= hi_i``."""
    z = space.zero
    return bool(np.all((space.lo[z] <= space.base_tol[z]) & (space.hi[z] >= -space.base_tol[z])))


def _kkt_satisfied(space: _Space, Y: np.ndarray, W: np.ndarray) -> np.ndarray:
    """Which of a batch of candidates ``(Y, W = w(Y))`` (B, m) satisfy the KKT conditions.

    Primal feasibility ``lo - t <= w <= hi + t`` on every row, and sign + complementarity:
    ``y_i > ty`` only where the upper side binds (``|w_i - hi_i| <= t_i``), ``y_i < -ty``
    only where the lower side binds, with ``t = row_tol(y)`` and ``ty = tol * (1 + max|y|)``.
    """
    t = space.row_tol(Y)
    feasible = np.all((W <= space.hi + t) & (W >= space.lo - t), axis=1)
    ty = space.tol * (1.0 + np.abs(Y).max(axis=1, initial=0.0))[:, None]
    with np.errstate(invalid="ignore"):
        upper_binds = space.has_hi & (np.abs(W - space.hi) <= t)
        lower_binds = space.has_lo & (np.abs(W - space.lo) <= t)
    signs_ok = np.all(((Y <= ty) | upper_binds) & ((Y >= -ty) | lower_binds), axis=1)
    return feasible & signs_ok


def _scaled_min_eig(M_sub: np.ndarray) -> float:
    """Smallest eigenvalue of ``D^{-1/2} M_sub D^{-1/2}`` (unit diagonal): 0 iff rows dependent."""
    if M_sub.shape[0] == 0:
        return 1.0
    s = 1.0 / np.sqrt(np.diag(M_sub))
    return float(np.linalg.eigvalsh(M_sub * s[:, None] * s[None, :])[0])


def _is_degenerate(space: _Space, y: np.ndarray, rank_tol: float) -> bool:
    """Are the rows binding at ``w(y)`` linearly dependent (LICQ fails)?"""
    W = space.w(y)
    t = space.row_tol(y)
    with np.errstate(invalid="ignore"):
        binding = (space.has_hi & (np.abs(W - space.hi) <= t)) | (space.has_lo & (np.abs(W - space.lo) <= t))
    if np.any(binding & space.zero):
        return True
    rows = np.flatnonzero(binding)
    return _scaled_min_eig(space.M[np.ix_(rows, rows)]) <= rank_tol


# --------------------------------------------------------------------------------------
# Method 1: enumeration of active sets ([SQP] Algorithm 1, any m)
# --------------------------------------------------------------------------------------
@lru_cache(maxsize=32)
def _side_table(n: int) -> tuple[np.ndarray, np.ndarray]:
    """All ``3^n`` side choices for ``n`` rows (+1 upper, -1 lower, 0 inactive), by active-set size.

    Returns the table (3^n, n) sorted by the number of active rows (stable, so the paper's
    order within a size is kept) and the sizes.
    """
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


def _enumerate(space: _Space, rank_tol: float) -> tuple[np.ndarray | None, np.ndarray | None, int]:
    """Active sets by increasing size, all side choices; the first KKT point found is optimal.

    [SQP] Algorithm 1 for any m. Equality rows are in every active set (free-sign
    multipliers). With the rows ``R = (equality rows, inequality rows)``, a candidate is a
    side per inequality row (+1, -1 or inactive); its system is ``M_RR`` with inactive rows
    and columns replaced by the identity and a zero right-hand side there, so that
    ``y_A = M_AA^{-1}(-q_A - b_A)`` for all candidates comes from one batched solve. A
    candidate with ``w = -q - M y`` is accepted by :func:`_kkt_satisfied`; as the QP is
    strictly convex a KKT point is the unique minimiser. Sizes are examined in increasing
    order (whole sizes per batch of about ``_ENUMERATION_CHUNK`` candidates); among accepted
    candidates the smallest size, then the smallest ``y'My`` (objective
    ``1/2 y'My - 1/2 g'H^{-1}g``), wins. Returns ``(y, sides, candidates examined)`` with
    ``sides`` the winner's working set (int8 per row); ``y`` and ``sides`` are None when no
    candidate passes (infeasible or degenerate systems: the caller then runs the dual method).
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
        accepted = np.flatnonzero(ok & _kkt_satisfied(space, Y, space.w(Y)))
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


def _add_equalities(space: _Space, ws: _WorkingSet, rank_tol: float) -> bool:
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


def _most_violated_side(space: _Space, ws: _WorkingSet, w: np.ndarray) -> tuple[int, float] | None:
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


def _dual_active_set(space: _Space, rank_tol: float, max_iter: int) -> _DualOutcome:
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
# Least-violation LP (also used to confirm infeasibility)
# --------------------------------------------------------------------------------------
def _row_violation(w: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """``max(w - hi, 0) + max(lo - w, 0)`` per row."""
    return np.maximum(w - hi, 0.0) + np.maximum(lo - w, 0.0)


class LeastViolationWarning(RuntimeWarning):
    """The least-violation LP did not give a least-violation step; a safe but possibly larger
    relaxation was used instead (see :func:`least_violation_bounds`)."""


class _LPFailure(RuntimeError):
    """The least-violation LP stopped without an optimum (HiGHS status in the message)."""


#: Initial box radius of the least-violation LP as a multiple of the size of ``z`` one row
#: needs to reach its bound (see :func:`_initial_box_radius`), the factor by which the box
#: grows while it binds, and how many times it may grow.
_BOX_SCALE = 1e3
_BOX_GROWTH = 1e3
_MAX_BOX_ENLARGEMENTS = 3
#: A box side counts as binding when its reduced cost exceeds this fraction of the column's
#: l1 norm (the largest reduced cost a unit move of that coordinate can have).
_BOX_BINDING_RTOL = 1e-8
#: Eigen-directions of the row-normalised ``M`` with an eigenvalue at most this fraction of
#: the largest are left out of the reachable values (rounding noise of dependent rows sits
#: near 1e-16; genuine directions of ill-conditioned SQP steps were seen near 1e-11).
_RANGE_RTOL = 1e-12
_LP_OPTIONS = {"primal_feasibility_tolerance": 1e-10, "dual_feasibility_tolerance": 1e-10}


@dataclass(frozen=True)
class _RangeBasis:
    """An explicit basis of the reachable constraint values ``w = J v``.

    ``w = basis @ z`` (``z`` in ``R^r``) spans ``range(M) = range(J)`` and ``M @ (y_map @ z)
    = basis @ z``. Built from the eigenvectors of the row-normalised ``M`` (unit diagonal,
    so rows of very different norms are treated alike); directions whose eigenvalue is at
    most ``_RANGE_RTOL`` times the largest are dropped: they are rounding noise of linearly
    dependent rows (free multipliers along them made an LP in ``y`` numerically unbounded).
    Zero rows of ``J`` have zero rows in both matrices (their value is always 0).
    """

    basis: np.ndarray  # (m, r)
    y_map: np.ndarray  # (m, r)


def _range_basis(M: np.ndarray) -> _RangeBasis:
    """The basis of ``range(M)`` described in :class:`_RangeBasis` (one m x m eigh)."""
    m = M.shape[0]
    diag = np.diag(M)
    nz = np.flatnonzero(diag > 0)
    if nz.size == 0:
        return _RangeBasis(np.zeros((m, 0)), np.zeros((m, 0)))
    norms = np.sqrt(diag[nz])
    corr = M[np.ix_(nz, nz)] / np.outer(norms, norms)
    lam, vecs = np.linalg.eigh(0.5 * (corr + corr.T))
    keep = lam > _RANGE_RTOL * lam.max()
    lam, vecs = lam[keep], vecs[:, keep]
    basis = np.zeros((m, lam.size))
    y_map = np.zeros((m, lam.size))
    basis[nz] = norms[:, None] * vecs
    y_map[nz] = vecs / lam[None, :] / norms[:, None]
    return _RangeBasis(basis, y_map)


def _initial_box_radius(basis: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> float:
    """``_BOX_SCALE * (1 + max_i |finite bound_i| / max_j |basis_ij|)`` over non-zero rows.

    Moving the largest coordinate of row ``i`` alone, ``|z_j| = |bound_i| / max_j |basis_ij|``
    reaches the bound: the ratio is the size of ``z`` a row needs; the box is
    ``_BOX_SCALE`` times larger and grows while it binds (:func:`_solve_boxed_lp`).
    """
    scale = np.abs(basis).max(axis=1, initial=0.0)
    bounds = np.maximum(np.where(np.isfinite(lo), np.abs(lo), 0.0), np.where(np.isfinite(hi), np.abs(hi), 0.0))
    nz = scale > 0
    ratio = float((bounds[nz] / scale[nz]).max(initial=0.0))
    return _BOX_SCALE * (1.0 + ratio)


def _lp_tables(
    basis: np.ndarray, lo: np.ndarray, hi: np.ndarray, violation_cap: float | None
) -> tuple[np.ndarray, np.ndarray, np.ndarray, int]:
    """Cost, inequality matrix and right-hand side of the least-violation LPs.

    Variables ``(z, s_up, s_lo[, a])``: ``basis_i z - s_up_i <= hi_i`` and
    ``-basis_i z - s_lo_i <= -lo_i`` for the finite sides, ``s >= 0``. Without a cap the
    cost is ``sum s`` (the total violation); with one, ``sum a`` with ``a >= +-basis z``
    (``sum_i |w_i|``) subject to ``sum s <= violation_cap``. Returns the number of slacks too.
    """
    m, r = basis.shape
    up, dn = np.flatnonzero(np.isfinite(hi)), np.flatnonzero(np.isfinite(lo))
    ns = up.size + dn.size
    eye = np.eye(ns)
    rows = [np.hstack([basis[up], -eye[: up.size]]), np.hstack([-basis[dn], -eye[up.size :]])]
    rhs = [hi[up], -lo[dn]]
    cost = np.concatenate([np.zeros(r), np.ones(ns)])
    if violation_cap is not None:
        rows = [np.hstack([block, np.zeros((block.shape[0], m))]) for block in rows]
        rows += [np.hstack([basis, np.zeros((m, ns)), -np.eye(m)]), np.hstack([-basis, np.zeros((m, ns)), -np.eye(m)])]
        rows.append(np.concatenate([np.zeros(r), np.ones(ns), np.zeros(m)])[None, :])
        rhs += [np.zeros(m), np.zeros(m), np.array([violation_cap])]
        cost = np.concatenate([np.zeros(r + ns), np.ones(m)])
    return cost, np.vstack(rows), np.concatenate(rhs), ns


def _box_binding(res: Any, columns: np.ndarray, radius: float) -> bool:
    """Whether a side of the box ``|z| <= radius`` is active with a non-zero reduced cost
    (then a larger box could lower the objective; otherwise the box changes nothing)."""
    r = columns.shape[1]
    z = res.x[:r]
    on_box = np.abs(z) >= radius * (1.0 - 1e-9)
    reduced = np.abs(res.lower.marginals[:r]) + np.abs(res.upper.marginals[:r])
    return bool(np.any(on_box & (reduced > _BOX_BINDING_RTOL * np.abs(columns).sum(axis=0))))


def _solve_boxed_lp(
    basis: np.ndarray, lo: np.ndarray, hi: np.ndarray, violation_cap: float | None = None
) -> tuple[np.ndarray, bool]:
    """``z`` of a least-violation LP (see :func:`_lp_tables`) inside the box ``|z| <= R``.

    Bounded by construction: ``z`` is boxed and every other variable is ``>= 0`` with a
    cost of 0 or 1, so the LP (always feasible: ``z = 0`` with large slacks) has a finite
    optimum. If a box side binds (non-zero reduced cost) the box is enlarged by
    ``_BOX_GROWTH`` up to ``_MAX_BOX_ENLARGEMENTS`` times; an optimum with no binding side
    is an optimum of the LP without the box. Returns ``(z, still_binding)``.

    Raises
    ------
    _LPFailure
        HiGHS stopped without an optimum (status and message in the text).
    """
    r = basis.shape[1]
    cost, A, b, ns = _lp_tables(basis, lo, hi, violation_cap)
    if ns == 0 or r == 0:  # nothing to violate, or only w = 0 reachable
        return np.zeros(r), False
    z_columns = A[:, :r]
    radius = _initial_box_radius(basis, lo, hi)
    for attempt in range(_MAX_BOX_ENLARGEMENTS + 1):
        bounds = [(-radius, radius)] * r + [(0, None)] * (cost.size - r)
        res = linprog(cost, A_ub=A, b_ub=b, bounds=bounds, method="highs", options=_LP_OPTIONS)
        if res.status != 0:
            raise _LPFailure(f"HiGHS status {res.status} ({res.message})")
        binding = _box_binding(res, z_columns, radius)
        if not binding:
            return res.x[:r], False
        if attempt < _MAX_BOX_ENLARGEMENTS:
            logger.debug("least-violation LP: box |z| <= %g binds; enlarging it", radius)
            radius *= _BOX_GROWTH
    return res.x[:r], True


def _least_violation_point(
    basis: _RangeBasis, lo: np.ndarray, hi: np.ndarray, violation_cap: float | None = None
) -> tuple[np.ndarray, np.ndarray, bool]:
    """A least-violation point ``w = basis z`` and multipliers ``y`` with ``M y = w``.

    ``violation_cap is None``: minimise the total violation ``V(w)``; otherwise minimise
    ``sum_i |w_i|`` among points with ``V(w) <= violation_cap`` (least-violation points
    are not unique, e.g. duplicated rows with disjoint bounds). Returns
    ``(w, y, box_binding)``; raises :class:`_LPFailure` when HiGHS fails.
    """
    z, binding = _solve_boxed_lp(basis.basis, lo, hi, violation_cap)
    return basis.basis @ z, basis.y_map @ z, binding


def _confirm_infeasible(space: _Space) -> bool:
    """True when the least total violation exceeds the summed row tolerances (False, with a
    log message, when the LP fails: the caller then reports a numerical failure)."""
    try:
        w, _, _ = _least_violation_point(_range_basis(space.M), space.lo, space.hi)
    except (_LPFailure, np.linalg.LinAlgError) as exc:
        logger.warning("least-violation LP failed while confirming infeasibility: %s", exc)
        return False
    return float(_row_violation(w, space.lo, space.hi).sum()) > float(space.base_tol.sum())


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


def _active_from_multipliers(y: np.ndarray, eq: np.ndarray, tol: float) -> np.ndarray:
    """Sides from multiplier signs beyond ``tol * (1 + max|y|)`` (for OSQP's duals)."""
    ty = tol * (1.0 + np.abs(y).max(initial=0.0))
    active = np.where(y > ty, 1, np.where(y < -ty, -1, 0)).astype(np.int8)
    active[eq] = np.where(y[eq] < 0, -1, 1)
    return active


def _solve_space(space: _Space, method: str, rank_tol: float, max_iter: int) -> _SpaceSolution:
    """Solve the m-space QP with enumeration or the dual method; verify; confirm infeasibility."""
    m = space.m
    none = np.zeros(m, dtype=np.int8)
    if not _zero_rows_feasible(space):
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
        if not _kkt_satisfied(space, y[None, :], space.w(y)[None, :])[0]:
            logger.warning("dual active-set result fails the KKT check within tol=%g", space.tol)
            return _SpaceSolution(None, "numerical", "dual", iterations, none)
        return _SpaceSolution(y, "optimal", "dual", iterations, _active_from_working(outcome.working, y, space.eq))
    if outcome.status == "infeasible" and not _confirm_infeasible(space):
        logger.warning("dual method reported infeasibility that the least-violation LP does not confirm")
        return _SpaceSolution(None, "numerical", "dual", iterations, none)
    return _SpaceSolution(None, outcome.status, "dual", iterations, none)


# --------------------------------------------------------------------------------------
# OSQP cross-check
# --------------------------------------------------------------------------------------
@dataclass
class _OSQPOutcome:
    x: np.ndarray | None
    y: np.ndarray | None
    status: str
    iterations: int


def _solve_with_osqp(inputs: _Inputs, tol: float, max_iter: int) -> _OSQPOutcome:
    """The same QP through ``qpsolvers`` / OSQP.

    ``G d <= h_G`` holds the finite sides of the non-equality rows (``J_i`` for an upper
    side, ``-J_i`` for a lower side) and ``A d = b`` the equality rows. qpsolvers' Lagrangian
    is ``... + z'(G d - h_G) + y_eq'(A d - b)`` with ``z >= 0``, so this module's signed
    multipliers are ``y_i = z_upper_i - z_lower_i`` (inequalities) and ``y_i = y_eq_i``.
    """
    import qpsolvers
    import scipy.sparse as sp

    lo = inputs.lo
    G, h_G, A, b, up, dn, eq = split_rows(inputs.J, inputs.lo, inputs.hi)
    if G is None and A is None:  # qpsolvers rejects unconstrained problems with sparse P
        return _OSQPOutcome(-inputs.g / inputs.h, np.zeros(lo.size), "optimal", 0)
    problem = qpsolvers.Problem(sp.diags(inputs.h, format="csc"), inputs.g, G, h_G, A, b)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        sol = qpsolvers.solve_problem(
            problem, solver="osqp", eps_abs=tol, eps_rel=tol, polish=True, max_iter=max_iter, verbose=False
        )
    info = (sol.extras or {}).get("info")
    osqp_status = str(getattr(info, "status", "unknown"))
    iterations = int(getattr(info, "iter", 0))
    if not sol.found:
        logger.debug("OSQP status %r", osqp_status)
        status = "infeasible" if "primal infeasible" in osqp_status else "numerical"
        return _OSQPOutcome(None, None, status, iterations)
    y = np.zeros(lo.size)
    z = np.asarray(sol.z, dtype=float)
    n_up = int(up.sum())
    y[up] += z[:n_up]
    y[dn] -= z[n_up:]
    if eq.any():
        y[eq] = np.asarray(sol.y, dtype=float)
    return _OSQPOutcome(np.asarray(sol.x, dtype=float), y, "optimal", iterations)


# --------------------------------------------------------------------------------------
# Public API
# --------------------------------------------------------------------------------------
def _step(inputs: _Inputs, y: np.ndarray) -> np.ndarray:
    """``d(y) = -H^{-1} (g + J' y)`` (O(p m))."""
    return -(inputs.g + inputs.J.T @ y) / inputs.h


def _failed(inputs: _Inputs, status: str, method: str, iterations: int) -> QPResult:
    nan = float("nan")
    active = torch.zeros(inputs.lo.size, dtype=torch.int8, device=inputs.device)
    return QPResult(None, None, active, status, nan, nan, nan, False, method, iterations)


def _assemble(
    inputs: _Inputs,
    space: _Space,
    d: np.ndarray,
    y: np.ndarray,
    active: np.ndarray,
    method: str,
    iterations: int,
    rank_tol: float,
) -> QPResult:
    """Objective, KKT residual, violation and degeneracy of ``(d, y)``; cast to the output dtype."""
    g, h, J = inputs.g, inputs.h, inputs.J
    residual = g + h * d + J.T @ y
    return QPResult(
        d=inputs.to_torch(d),
        multipliers=inputs.to_torch(y),
        active=torch.as_tensor(active, dtype=torch.int8, device=inputs.device),
        status="optimal",
        objective=float(g @ d + 0.5 * h @ (d * d)),
        kkt_residual=float(np.max(np.abs(residual), initial=0.0)),
        max_violation=float(np.max(_row_violation(J @ d, inputs.lo, inputs.hi), initial=0.0)),
        degenerate=_is_degenerate(space, y, rank_tol),
        method=method,
        iterations=iterations,
    )


def _pick_method(solver: str, space: _Space) -> str:
    """Resolve ``"active_set"`` by the number of constrained (non-free, non-zero) rows."""
    constrained = int(np.count_nonzero((space.has_lo | space.has_hi) & ~space.zero))
    if solver == "active_set":
        return "enumeration" if constrained <= ENUMERATION_MAX_ROWS else "dual"
    if solver == "enumeration" and constrained > _ENUMERATION_HARD_LIMIT:
        raise ValueError(
            f"solver: 'enumeration' is limited to {_ENUMERATION_HARD_LIMIT} constrained rows, "
            f"got {constrained}; use 'dual' or 'active_set'"
        )
    return solver


def _check_options(solver: str, tol: float, rank_tol: float, max_iter: int | None) -> tuple[float, float]:
    check_choice(solver, _SOLVERS, "solver")
    try:
        if max_iter is not None:
            positive_int(max_iter, "max_iter")
        return positive_float(tol, "tol"), positive_float(rank_tol, "rank_tol")
    except ValueError as exc:  # diagonal_qp has always said "<name>: must be ..." (tests match it)
        raise ValueError(str(exc).replace(": expected ", ": must be ", 1)) from None


def diagonal_qp(
    g: Any,
    h: Any,
    J: Any,
    lo: Any,
    hi: Any,
    *,
    solver: Solver = "active_set",
    tol: float = 1e-9,
    rank_tol: float = 1e-10,
    max_iter: int | None = None,
) -> QPResult:
    """Exact solution of ``min_d g'd + 1/2 d' diag(h) d  s.t.  lo <= J d <= hi``.

    The step subproblem of the SQP (with the bounds already shifted by the
    constraint values: pass ``lo = l - c``, ``hi = u - c``). All algebra is in the
    m-dimensional constraint space: ``M = J H^{-1} J'`` and ``q = J H^{-1} g`` are formed
    once, then an active set ``A`` with sides ``b_A`` costs the ``|A| x |A|`` solve
    ``M_AA y_A = -q_A - b_A``, and ``d = -H^{-1}(g + J' y)``; see the module docstring for
    the derivation and the sign convention: ``y_i > 0`` upper side active, ``y_i < 0``
    lower side active, ``g + h * d + J' y = 0``.

    Parameters
    ----------
    g : tensor (p,)
        Gradient (linear term).
    h : tensor (p,)
        Diagonal of the Hessian, every entry ``> 0``.
    J : tensor (m, p)
        Constraint Jacobian; ``m = 0`` is allowed (then ``d = -g / h``).
    lo, hi : tensor (m,)
        Bounds on ``J d``: ``-inf``/``+inf`` for a missing side, ``lo == hi`` for an equality.
    solver : {"active_set", "enumeration", "dual", "osqp"}
        ``"active_set"`` (default): enumeration ([SQP] Alg 1) when the number of constrained
        rows is at most :data:`ENUMERATION_MAX_ROWS`, else the dual active-set method
        (Goldfarb-Idnani). ``"enumeration"`` / ``"dual"`` force one of them (enumeration takes
        at most 10 constrained rows, 3^10 sets, and hands over to the dual method when no set
        passes, i.e. on infeasible or degenerate systems). ``"osqp"`` solves the same problem
        through ``qpsolvers`` with OSQP (``eps_abs = eps_rel = tol``, polishing on) for
        cross-checking: ``d`` is OSQP's primal solution and the multipliers its duals.
    tol : float
        Feasibility/complementarity tolerance: row ``i`` counts as feasible (or binding) when
        it violates (or misses) its bound by at most
        ``tol * (1 + |q_i| + max finite |bound_i| + sum_j |M_ij| |y_j|)``, relative to the
        terms of ``J_i d = -q_i - sum_j M_ij y_j``; a multiplier may have the wrong sign by at
        most ``tol * (1 + max|y|)``. Also OSQP's ``eps_abs``/``eps_rel``.
    rank_tol : float
        A row counts as a linear combination of others when the squared sine of its angle to
        their span (in the ``H^{-1}`` metric) is at most ``rank_tol``.
    max_iter : int, optional
        Iteration cap of the dual method (default ``50 + 20 m``) or of OSQP (default 200000).

    Returns
    -------
    QPResult
        ``d`` and ``multipliers`` in the promoted dtype of the tensors among ``g, h, J`` on
        their device (computed in float64 on the host: inputs on another device are copied
        once, O(p m)). They are ``None`` unless ``status == "optimal"``: ``"infeasible"``
        means no ``d`` satisfies the bounds (confirmed by a least-violation LP; see
        :func:`least_violation_bounds`), ``"numerical"`` that no solution passed the KKT
        check (never returned as a step).

    Raises
    ------
    ValueError
        Bad shapes, NaN, infinite ``g``/``h``/``J``, ``h <= 0``, ``lo = +inf``,
        ``hi = -inf``, ``lo > hi`` (naming the row), unknown ``solver``, bad tolerances.

    Notes
    -----
    Accuracy. Every returned solution passed the KKT check above. Rows at an angle below
    ``asin(sqrt(rank_tol))`` to the span of others are treated as dependent: the answer is
    then exact for bounds perturbed within ``tol`` and ``degenerate`` is set (float32
    Jacobians with exactly dependent rows land here). Nearly parallel active rows with
    conflicting bounds force large multipliers; since ``d`` is recovered from ``y``, its
    constraint values then carry a rounding error of about ``eps * sum_j |M_ij y_j|``, which
    the tolerance allows for (measured: objective within ~5e-7 relative of Clarabel for
    rows 1e-4 rad apart with multipliers ~1e8).
    """
    tol, rank_tol = _check_options(solver, tol, rank_tol, max_iter)
    inputs = _validate(g, h, J, lo, hi)
    space = _build_space(inputs, inputs.lo, inputs.hi, tol)
    if solver == "osqp":
        out = _solve_with_osqp(inputs, tol, max_iter or 200_000)
        if out.status != "optimal":
            return _failed(inputs, out.status, "osqp", out.iterations)
        active = _active_from_multipliers(out.y, space.eq, tol)
        return _assemble(inputs, space, out.x, out.y, active, "osqp", out.iterations, rank_tol)
    sol = _solve_space(space, _pick_method(solver, space), rank_tol, max_iter or 50 + 20 * space.m)
    if sol.y is None:
        return _failed(inputs, sol.status, sol.method, sol.iterations)
    return _assemble(inputs, space, _step(inputs, sol.y), sol.y, sol.active, sol.method, sol.iterations, rank_tol)


def _cast_outwards(inputs: _Inputs, lo: np.ndarray, hi: np.ndarray) -> tuple[torch.Tensor, torch.Tensor]:
    """Bounds in the output dtype, rounded outwards so that the cast box contains ``[lo, hi]``.

    (A dtype numpy lacks, e.g. bfloat16, is cast to nearest.)
    """
    np_dtype = _NUMPY_DTYPES.get(inputs.dtype)
    if np_dtype is None:
        return inputs.to_torch(lo), inputs.to_torch(hi)
    lo_c, hi_c = lo.astype(np_dtype), hi.astype(np_dtype)
    lo_c = np.where(lo_c > lo, np.nextafter(lo_c, np_dtype(-np.inf)), lo_c)
    hi_c = np.where(hi_c < hi, np.nextafter(hi_c, np_dtype(np.inf)), hi_c)
    return inputs.to_torch(lo_c), inputs.to_torch(hi_c)


@dataclass(frozen=True)
class _Target:
    """The least-violation point ``w = M y`` the relaxed box is built around."""

    w: np.ndarray
    y: np.ndarray
    feasible: bool  # the least violation is within the summed row tolerances
    box_binding: bool  # the LP's box still bound after its enlargements


def _least_violation_target(space: _Space) -> _Target:
    """Steps 1-2 of :func:`least_violation_bounds`: least violation, then least move.

    Raises :class:`_LPFailure` (or ``LinAlgError``) when the first LP cannot be solved; a
    failure of the second LP only loses the least-move choice (logged).
    """
    basis = _range_basis(space.M)
    feasibility_tol = float(space.base_tol.sum())
    w, y, binding = _least_violation_point(basis, space.lo, space.hi)
    least = float(_row_violation(w, space.lo, space.hi).sum())
    if least <= feasibility_tol:
        return _Target(w, y, True, binding)
    try:
        w2, y2, binding2 = _least_violation_point(basis, space.lo, space.hi, violation_cap=least + feasibility_tol)
    except _LPFailure as exc:
        logger.warning("least-move LP failed (%s); using the first least-violation point", exc)
        return _Target(w, y, False, binding)
    return _Target(w2, y2, False, binding or binding2)


def _least_norm_step(
    inputs: _Inputs, space: _Space, target: _Target, box_lo: np.ndarray, box_hi: np.ndarray, rank_tol: float
) -> np.ndarray:
    """Step 3 of :func:`least_violation_bounds`: the least ``H``-norm step in the box.

    Falls back to the LP point's step ``H^{-1} J' y`` (``J v = M y = w*``) when the QP has
    no solution, or when rounding in an ill-conditioned QP left its step with a larger
    violation than the LP point's (by more than the summed row tolerances).
    """
    lp_step = -_step(inputs, target.y)  # g = 0, so J v = M y = w*
    box = _build_space(inputs, box_lo, box_hi, space.tol)
    sol = _solve_space(box, _pick_method("active_set", box), rank_tol, 50 + 20 * box.m)
    if sol.y is None:
        logger.warning("least-norm step in the relaxed box failed (%s); using the LP point", sol.status)
        return lp_step
    qp_step = _step(inputs, sol.y)
    qp_violation = float(_row_violation(inputs.J @ qp_step, space.lo, space.hi).sum())
    lp_violation = float(_row_violation(inputs.J @ lp_step, space.lo, space.hi).sum())
    if qp_violation > lp_violation + float(space.base_tol.sum()):
        logger.debug("least-norm step violates %g > %g of the LP point; using the LP point", qp_violation,
                     lp_violation)
        return lp_step
    return qp_step


def _zero_step_relaxation(inputs: _Inputs, reason: str) -> RelaxedBounds:
    """The safe fallback: ``v = 0`` and every row relaxed to contain 0, with a warning."""
    warnings.warn(
        f"least_violation_bounds: the least-violation LP failed ({reason}); falling back to the zero step "
        "with every row relaxed to contain 0 (lo' = min(lo, 0), hi' = max(hi, 0)). The relaxed QP is "
        "feasible, but the relaxation may be larger than the least one.",
        LeastViolationWarning,
        stacklevel=3,
    )
    m, p = inputs.J.shape
    zero_w = np.zeros(m)
    lo_r, hi_r = _cast_outwards(inputs, np.minimum(inputs.lo, 0.0), np.maximum(inputs.hi, 0.0))
    return RelaxedBounds(
        v=inputs.to_torch(np.zeros(p)),
        w=inputs.to_torch(zero_w),
        lo=lo_r,
        hi=hi_r,
        violation=float(_row_violation(zero_w, inputs.lo, inputs.hi).sum()),
    )


def least_violation_bounds(
    lo: Any, hi: Any, J: Any, h: Any, *, tol: float = 1e-9, rank_tol: float = 1e-10
) -> RelaxedBounds:
    """Least-violation normal step and relaxed bounds for an infeasible linearisation.

    When ``lo <= J d <= hi`` has no solution (``lo = l - c``,
    ``hi = u - c`` in the SQP), take a normal step ``v`` minimising the total violation

    .. math::  V(Jv; lo, hi) = \\sum_i \\max(J_i v - hi_i, 0) + \\max(lo_i - J_i v, 0)

    and relax the bounds to ``lo' = min(lo, Jv)``, ``hi' = max(hi, Jv)``. The QP with
    ``(lo', hi')`` is feasible (``v`` satisfies it), and
    ``V(Jv) = sum_i (lo_i - lo'_i) + (hi'_i - hi_i)`` is the least violation any step reaches.

    Computation (all in the m-space, ``M = J H^{-1} J'``):

    1. the reachable values ``J v`` are ``range(M)``, spanned by an explicit basis
       ``w = B z`` (eigenvectors of the row-normalised ``M``; directions with an eigenvalue
       at most 1e-12 times the largest are dropped: rounding noise of dependent rows).
       The l1 LP ``min sum s`` over ``(z, s_up, s_lo)`` with ``B_i z - s_up_i <= hi_i``,
       ``lo_i - B_i z <= s_lo_i``, ``s >= 0`` and a box ``|z| <= R`` is bounded by
       construction (every variable is boxed or nonnegative with a nonnegative cost), so
       HiGHS always has a finite optimum. ``R`` is a thousand times the size a single row
       needs to reach its bound and is enlarged (up to three times, by 1e3) while a box
       side binds with a non-zero reduced cost; an optimum with no binding side is an
       optimum without the box. This gives the least violation ``V*``;
    2. LP minimisers are not unique (e.g. duplicated rows with disjoint bounds: any value
       between them is optimal), so a second LP of the same form picks, among points with
       ``V <= V* + tol * sum_i (1 + max finite |bound_i|)``, the point ``w*``
       that moves the constraint values least, ``min sum_i |w_i|``;
    3. the least ``H``-norm step in the box relaxed to ``w*``,
       ``v = argmin 1/2 v'Hv  s.t.  min(lo, w*) <= Jv <= max(hi, w*)`` (an exact
       :func:`diagonal_qp` with ``g = 0``), has the same violation; the relaxed bounds are
       recomputed from ``Jv`` (they can only tighten). If that QP fails, or rounding left
       its step more violating than the LP point's step ``H^{-1} J' y`` (``M y = w*``),
       the LP point's step is used.

    When the least violation is within the summed row tolerances the system counts as
    feasible: the bounds are returned unchanged and ``v`` is the least-norm feasible step.

    Fallback: if HiGHS still fails on the first LP (a numerical failure: the LP always
    has an optimum), nothing is raised; a :class:`LeastViolationWarning` is emitted and the
    zero step is returned with every row relaxed to contain 0,
    ``lo' = min(lo, 0)``, ``hi' = max(hi, 0)`` (``v = w = 0``, ``violation = V(0)``), which
    keeps the relaxed QP feasible but may relax more than the least.

    Parameters
    ----------
    lo, hi : tensor (m,)
        Bounds on ``J v`` (``-inf``/``+inf`` allowed, ``lo <= hi``).
    J : tensor (m, p)
        Constraint Jacobian (rank deficiency, duplicated and zero rows allowed).
    h : tensor (p,)
        Diagonal Hessian (metric of the step), ``> 0``.
    tol, rank_tol : float
        As in :func:`diagonal_qp` (``tol`` for the feasibility test and step 2, both for
        the QP of step 3).

    Returns
    -------
    RelaxedBounds
        ``v``, ``w = J v``, relaxed ``lo``/``hi`` (dtype of ``J, h``; rounded outwards when it
        is not float64, so ``lo' <= lo`` and ``hi' >= hi`` always) and the violation of ``v``
        (0 and unchanged bounds when feasible).

    Raises
    ------
    ValueError
        As :func:`diagonal_qp` for bad inputs.

    Warns
    -----
    LeastViolationWarning
        The LP failed (zero-step fallback above), or its box still bound after the
        enlargements (the relaxation is then the least within that box).
    """
    tol, rank_tol = _check_options("active_set", tol, rank_tol, None)
    inputs = _validate(None, h, J, lo, hi)
    space = _build_space(inputs, inputs.lo, inputs.hi, tol)
    try:
        target = _least_violation_target(space)
    except (_LPFailure, np.linalg.LinAlgError) as exc:
        return _zero_step_relaxation(inputs, str(exc))
    if target.box_binding and not target.feasible:
        warnings.warn("least_violation_bounds: the box of the least-violation LP still bound after "
                      f"{_MAX_BOX_ENLARGEMENTS} enlargements; the relaxation is the least within that box and "
                      "may be larger than the least one.", LeastViolationWarning, stacklevel=2)
    if target.feasible:  # keep the bounds; v is the least-norm feasible step
        box_lo, box_hi = inputs.lo, inputs.hi
    else:
        box_lo, box_hi = np.minimum(inputs.lo, target.w), np.maximum(inputs.hi, target.w)
    v = _least_norm_step(inputs, space, target, box_lo, box_hi, rank_tol)
    w = inputs.J @ v
    if target.feasible:
        lo_r, hi_r = inputs.lo, inputs.hi
    else:
        lo_r, hi_r = np.minimum(inputs.lo, w), np.maximum(inputs.hi, w)
    lo_r, hi_r = _cast_outwards(inputs, lo_r, hi_r)
    return RelaxedBounds(
        v=inputs.to_torch(v),
        w=inputs.to_torch(w),
        lo=lo_r,
        hi=hi_r,
        violation=float(_row_violation(w, inputs.lo, inputs.hi).sum()),
    )
