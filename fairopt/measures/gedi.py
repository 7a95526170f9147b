"""Generalized Disparate Impact (GeDI) and the Disparate Impact Discrimination Index (DIDI).

GeDI [GeDI sec 3-4] measures how well functions of the protected attribute ``x`` explain ``y``. With
a kernel ``F`` (n, k) of the standardised ``x``, ``Ft = F - mean(F)`` and ``yt = y - mean(y)``::

    alpha = argmin_a ||Ft a - yt||^2        [GeDI eq 15-16]
    GeDI(x, y; F) = ||alpha||_1             [GeDI eq 17]

Conventions (they reproduce the published numbers, ``tests/test_gedi.py``): ``x`` is standardised
with the population sd (``ddof=0``, as the authors' ``StandardScaler``); ``y`` is used as given (GeDI
is deliberately scale-sensitive); ``V^k`` has columns ``z^j``, the Fourier kernel ``sin z, cos z,
sin 2z, ...``; ``alpha`` comes from the thin-SVD pseudo-inverse of ``Ft`` in float64, which avoids
squaring the condition number in ``Ft'Ft``. ``GeDI(x, y; V^1) = |cov(z, y) / var(z)|`` [GeDI eq 13];
for a 0/1 ``x`` with ``standardize=False`` it is the regression DIDI [GeDI App. A.4, eq 47, 49].
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from fairopt._validation import as_1d_tensor, check_same_length
from fairopt.measures.group import bin_quantiles, encode_groups, group_sums

__all__ = [
    "KERNELS",
    "KernelBasis",
    "standardization",
    "check_degree",
    "check_kernel",
    "gedi",
    "didi",
    "binned_didi",
]

logger = logging.getLogger(__name__)

KERNELS: tuple[str, ...] = ("poly", "fourier")


# ----------------------------------------------------------------------------------------
# argument checks shared with fairopt.constraints.gedi
# ----------------------------------------------------------------------------------------
def check_degree(degree: Any) -> int:
    """Require an integer kernel order ``k >= 1``."""
    if isinstance(degree, bool) or not isinstance(degree, (int, np.integer)) or degree < 1:
        raise ValueError(f"degree: expected an integer >= 1, got {degree!r}")
    return int(degree)


def check_kernel(kernel: Any) -> str:
    """Require one of :data:`KERNELS`; returns it."""
    if kernel not in KERNELS:
        raise ValueError(f"kernel: expected one of {KERNELS}, got {kernel!r}")
    return kernel


# ----------------------------------------------------------------------------------------
# kernel construction and the least-squares operator
# ----------------------------------------------------------------------------------------
def standardization(x: torch.Tensor, standardize: bool = True, name: str = "x") -> tuple[float, float]:
    """``(shift, scale)`` with ``z = (x - shift) / scale``: the mean and population sd, or ``(0, 1)``.

    ``ValueError`` for a constant ``x`` (no kernel can be fitted).
    """
    xd = x.detach().to(torch.float64)
    scale = float(xd.std(correction=0)) if xd.numel() > 1 else 0.0
    if not scale > 0.0:
        shown = float(xd.reshape(-1)[0]) if xd.numel() else "no rows"
        raise ValueError(f"{name}: is constant ({shown}); GeDI needs a varying protected attribute")
    if not standardize:
        return 0.0, 1.0
    return float(xd.mean()), scale


def _kernel_matrix(z: torch.Tensor, degree: int, kernel: str) -> torch.Tensor:
    """Basis functions of the (standardised) attribute ``z``: the (n, k) matrix ``F``."""
    j = torch.arange(1, degree + 1, dtype=z.dtype)
    if kernel == "poly":
        return z[:, None] ** j[None, :]
    freq = torch.ceil(j / 2)
    angle = z[:, None] * freq[None, :]
    odd = (j % 2 == 1)[None, :]
    return torch.where(odd, torch.sin(angle), torch.cos(angle))


@dataclass(frozen=True)
class KernelBasis:
    """The centred kernel of one sample of ``x`` and its least-squares operator.

    ``centred`` is ``Ft`` (n, k, float64), ``pinv`` is ``Ft^+`` (minimum-norm ``alpha = Ft^+ yt``
    [GeDI eq 16]), ``gram`` is ``Ft'Ft / n`` and ``rank`` the numerical rank of ``Ft``.
    """

    centred: torch.Tensor
    pinv: torch.Tensor
    gram: torch.Tensor
    rank: int

    @property
    def degree(self) -> int:
        return int(self.centred.shape[1])

    @property
    def full_rank(self) -> bool:
        return self.rank == self.degree

    @classmethod
    def build(cls, x: torch.Tensor, degree: int, kernel: str, shift: float, scale: float) -> "KernelBasis":
        """Kernel of ``z = (x - shift) / scale`` centred on this sample: a batch gets the training
        standardisation and its own centring.
        """
        z = (x.detach().to(torch.float64).reshape(-1) - shift) / scale
        centred = _kernel_matrix(z, degree, kernel)
        centred = centred - centred.mean(dim=0, keepdim=True)
        u, s, vh = torch.linalg.svd(centred, full_matrices=False)
        s_max = float(s.max()) if s.numel() else 0.0
        keep = s > s_max * max(centred.shape) * torch.finfo(torch.float64).eps
        inv_s = torch.where(keep, 1.0 / torch.where(keep, s, torch.ones_like(s)), torch.zeros_like(s))
        pinv = (vh.T * inv_s[None, :]) @ u.T
        gram = centred.T @ centred / centred.shape[0]
        return cls(centred=centred, pinv=pinv, gram=gram, rank=int(keep.sum()))

    def coefficients(self, y: torch.Tensor) -> torch.Tensor:
        """``alpha = Ft^+ (y - mean y)`` in float64, differentiable in ``y``."""
        y64 = y.reshape(-1).to(torch.float64)
        return self.pinv @ (y64 - y64.mean())


# ----------------------------------------------------------------------------------------
# public measures
# ----------------------------------------------------------------------------------------
def _as_result(value: torch.Tensor, reference: Any) -> Any:
    """A torch scalar/vector in ``reference``'s float dtype for torch input, else numpy/float."""
    if isinstance(reference, torch.Tensor):
        dtype = reference.dtype if reference.is_floating_point() else torch.float64
        return value.to(dtype)
    value = value.detach().cpu().numpy()
    return float(value) if value.ndim == 0 else value


def gedi(
    x: Any,
    y: Any,
    degree: int = 1,
    kernel: str = "poly",
    return_coefficients: bool = False,
    standardize: bool = True,
) -> Any:
    """Generalized Disparate Impact ``GeDI(x, y; F) = ||alpha||_1`` [GeDI eq 8, 15-17]::

        z = (x - mean x) / sd(x),  Ft = F(z) - mean F(z),  Ft'Ft alpha = Ft' (y - mean y)

    Parameters
    ----------
    x : array-like or torch.Tensor, shape (n,)
        Numeric protected attribute (continuous, or a 0/1 indicator).
    y : array-like or torch.Tensor, shape (n,)
        Target or predictions; torch input gives a result differentiable in ``y``.
    degree : int
        Kernel order ``k``.
    kernel : {"poly", "fourier"}
    return_coefficients : bool
        Also return ``alpha`` (k,).
    standardize : bool
        Standardise ``x`` first; False for a 0/1 indicator whose GeDI(V^1) reads as a DIDI.

    Raises
    ------
    ValueError
        Bad shapes, non-finite values, a constant ``x`` or a rank-deficient kernel (e.g. ``degree >= 2``
        for a binary ``x``).
    """
    degree = check_degree(degree)
    kernel = check_kernel(kernel)
    xt = as_1d_tensor(x, "x")
    yt = as_1d_tensor(y, "y")
    check_same_length(x=xt, y=yt)
    shift, scale = standardization(xt, standardize, "x")
    basis = KernelBasis.build(xt, degree, kernel, shift, scale)
    if not basis.full_rank:
        n_distinct = int(torch.unique(xt.detach()).numel())
        raise ValueError(
            f"degree: the {kernel} kernel of order {degree} on x ({n_distinct} distinct values) "
            f"has rank {basis.rank} < {degree}; use a lower degree"
        )
    alpha = basis.coefficients(yt)
    value = alpha.abs().sum()
    if return_coefficients:
        return _as_result(value, y), _as_result(alpha, y)
    return _as_result(value, y)


def _class_columns(pred: torch.Tensor, classification: bool) -> torch.Tensor:
    """Columns whose group means are compared: ``[pred]`` or ``[1 - p, p]`` (two classes)."""
    p = pred.to(torch.float64)
    if not classification:
        return p[:, None]
    detached = p.detach()
    bad = (detached < 0) | (detached > 1)
    if bool(bad.any()):
        raise ValueError(
            "pred: classification DIDI needs 0/1 labels or probabilities of class 1 in [0, 1], "
            f"got {detached[bad][0].item()!r}"
        )
    return torch.stack([1.0 - p, p], dim=1)


def _didi_from_codes(pred: Any, codes: np.ndarray, classification: bool) -> Any:
    """DIDI of ``pred`` over the non-empty groups of ``codes`` (integer codes >= 0)."""
    p = as_1d_tensor(pred, "pred")
    check_same_length(pred=p, sensitive=codes)
    columns = _class_columns(p, classification)
    codes_t = torch.as_tensor(codes, dtype=torch.long)
    n_groups = int(codes_t.max()) + 1
    value = columns.new_zeros(())
    for column in columns.T:
        sums, counts = group_sums(column, codes_t, n_groups)
        present = counts > 0  # quantile bins between interpolated edges may be empty
        value = value + (sums[present] / counts[present] - column.mean()).abs().sum()
    return _as_result(value, pred)


def didi(pred: Any, sensitive: Any, classification: bool = False) -> Any:
    """Disparate Impact Discrimination Index [GeDI eq 1-2, Aghaei et al. 2019].

    ``DIDI_r = sum_v |mean(pred | x = v) - mean(pred)|``;
    ``DIDI_c = sum_u sum_v |P(pred = u | x = v) - P(pred = u)|`` over the classes ``u in {0, 1}``, equal to
    ``2 DIDI_r`` for a binary target [GeDI App. A.4, eq 49]. Probabilities of class 1 give the expected,
    smooth DIDI.

    Parameters
    ----------
    pred : array-like or torch.Tensor, shape (n,)
        Predictions, or 0/1 labels / class-1 probabilities for ``classification``.
    sensitive : array-like or torch.Tensor, shape (n,)
        Discrete protected attribute; each distinct value is a group.
    classification : bool
        ``DIDI_c`` instead of ``DIDI_r``.
    """
    codes, _ = encode_groups(sensitive, "sensitive")
    return _didi_from_codes(pred, codes, classification)


def binned_didi(pred: Any, x: Any, bins: int, classification: bool = False) -> Any:
    """:func:`didi` over ``bins`` quantile bins of a continuous ``x`` (DIDI-``bins`` in [GeDI sec 5]; bins of
    :func:`fairopt.measures.group.bin_quantiles`).
    """
    if isinstance(bins, bool) or not isinstance(bins, (int, np.integer)) or bins < 1:
        raise ValueError(f"bins: expected an integer >= 1, got {bins!r}")
    codes = bin_quantiles(x, int(bins), "x")
    return _didi_from_codes(pred, codes, classification)
