"""Inputs and the algebra of the constraint space.

Validation and conversion of ``g, h, J, lo, hi`` (all internal algebra is float64 numpy on
the host), and the m-space quantities ``M = J H^{-1} J'``, ``q = J H^{-1} g`` with the KKT
tests of a candidate (see the package docstring of :mod:`solvers.qp`)."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import Any

import numpy as np
import torch

__all__ = ["NUMPY_DTYPES", "Inputs", "Space", "bound_magnitude", "build_space", "is_degenerate", "kkt_satisfied",
           "scaled_min_eig", "validate_inputs", "zero_rows_feasible"]


NUMPY_DTYPES = {torch.float64: np.float64, torch.float32: np.float32, torch.float16: np.float16}


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
class Inputs:
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
        np_dtype = NUMPY_DTYPES.get(self.dtype)
        if np_dtype is not None:
            t = torch.from_numpy(np.ascontiguousarray(x, dtype=np_dtype))
        else:
            t = torch.from_numpy(np.ascontiguousarray(x)).to(self.dtype)
        return t if self.device.type == "cpu" else t.to(self.device)


def validate_inputs(g: Any, h: Any, J: Any, lo: Any, hi: Any) -> Inputs:
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
    return Inputs(g_a.values, h_a.values, J_a.values, lo_v, hi_v, dtype, device)


# --------------------------------------------------------------------------------------
# The m-space problem
# --------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Space:
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


def build_space(inputs: Inputs, lo: np.ndarray, hi: np.ndarray, tol: float) -> Space:
    """Form ``M = J H^{-1} J'`` and ``q = J H^{-1} g`` once (O(p m^2)), with row tolerances."""
    JH = inputs.J / inputs.h
    M = JH @ inputs.J.T
    M = 0.5 * (M + M.T)
    q = JH @ inputs.g
    zero = np.diag(M) == 0  # J_i H^{-1} J_i' = 0 iff J_i = 0 (h > 0): exact, no rounding
    return Space(M=M, q=q, lo=lo, hi=hi, base_tol=tol * (1.0 + np.abs(q) + bound_magnitude(lo, hi)), tol=tol,
                 zero=zero)


def bound_magnitude(lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """The largest finite ``|bound|`` of each row (0 for a free row): the scale of its tolerances."""
    return np.maximum(np.where(np.isfinite(lo), np.abs(lo), 0.0), np.where(np.isfinite(hi), np.abs(hi), 0.0))


def zero_rows_feasible(space: Space) -> bool:
    """A zero row of J gives ``J_i d = 0`` for every d: feasible iff ``lo_i <= 0 <= hi_i``."""
    z = space.zero
    return bool(np.all((space.lo[z] <= space.base_tol[z]) & (space.hi[z] >= -space.base_tol[z])))


def kkt_satisfied(space: Space, Y: np.ndarray, W: np.ndarray) -> np.ndarray:
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


def scaled_min_eig(M_sub: np.ndarray) -> float:
    """Smallest eigenvalue of ``D^{-1/2} M_sub D^{-1/2}`` (unit diagonal): 0 iff rows dependent."""
    if M_sub.shape[0] == 0:
        return 1.0
    s = 1.0 / np.sqrt(np.diag(M_sub))
    return float(np.linalg.eigvalsh(M_sub * s[:, None] * s[None, :])[0])


def is_degenerate(space: Space, y: np.ndarray, rank_tol: float) -> bool:
    """Are the rows binding at ``w(y)`` linearly dependent (LICQ fails)?"""
    W = space.w(y)
    t = space.row_tol(y)
    with np.errstate(invalid="ignore"):
        binding = (space.has_hi & (np.abs(W - space.hi) <= t)) | (space.has_lo & (np.abs(W - space.lo) <= t))
    if np.any(binding & space.zero):
        return True
    rows = np.flatnonzero(binding)
    return scaled_min_eig(space.M[np.ix_(rows, rows)]) <= rank_tol
