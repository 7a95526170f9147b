"""Generalized Disparate Impact (GeDI) and the Disparate Impact Discrimination Index (DIDI).

GeDI [GeDI sec 3-4] measures how well a user-chosen function of the
protected attribute ``x`` explains the target ``y``. With a kernel matrix ``F`` (n, k)
of basis functions of ``x``, centred columns ``Ft = F - mean(F)`` and centred target
``yt = y - mean(y)``::

    alpha = argmin_a ||Ft a - yt||^2        [GeDI eq 15-16]
    GeDI(x, y; F) = ||alpha||_1             [GeDI eq 17]

Conventions fixed here (they reproduce the published numbers, see ``tests/test_gedi.py``):

* ``x`` is standardised with its mean and POPULATION standard deviation (``ddof=0``, as
  scikit-learn's ``StandardScaler`` in the GeDI authors' code) before the kernel is built.
  ``y`` is used as given: GeDI is deliberately sensitive to the scale of ``y``
  [GeDI sec 3]; the paper's regression target is min-max scaled to [0, 1] beforehand.
* Polynomial kernel ``V^k``: ``F_j = z^j``, ``j = 1..k``, ``z`` the standardised ``x``.
* Fourier kernel with ``k`` columns: ``F_j = sin(m z)`` for odd ``j`` and ``cos(m z)`` for
  even ``j``, with integer angular frequency ``m = ceil(j / 2)`` on the standardised scale
  (``sin z, cos z, sin 2z, cos 2z, ...``; the base period ``2 pi`` spans about six
  standard deviations, so the first column is close to linear on the bulk of the data).
* ``alpha`` is computed with the pseudo-inverse of ``Ft`` from its thin SVD, which is the
  least-squares solution of the normal equations ``Ft'Ft alpha = Ft' yt`` without forming
  ``Ft'Ft`` (whose condition number is the square of that of ``Ft``: large for high powers).
  The arithmetic is float64 whatever the input precision.

With ``k = 1`` and the polynomial kernel, ``GeDI(x, y; V^1) = |cov(z, y) / var(z)|``
[GeDI eq 13]; with standardised ``z`` this is ``|cov(x, y)| / sd(x)``. For a binary ``x``
coded 0/1 and NOT standardised (``standardize=False``) it is exactly the regression DIDI,
and half of the classification DIDI of a binary target [GeDI App. A.4, eq 47 and 49].
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
    """Require a positive integer kernel order ``k``; returns it as ``int``."""
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
    """Shift and scale that standardise ``x``: ``z = (x - shift) / scale``.

    ``shift = mean(x)`` and ``scale`` the population standard deviation
    ``sqrt(mean((x - mean x)^2))`` (``ddof=0``). With ``standardize=False`` the identity
    ``(0.0, 1.0)`` is returned (``x`` is used as coded, e.g. a 0/1 group indicator).

    Raises
    ------
    ValueError
        If ``x`` is constant (no kernel can be fitted).
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

    Attributes
    ----------
    centred : torch.Tensor
        ``Ft`` (n, k), float64: kernel columns minus their sample means.
    pinv : torch.Tensor
        ``Ft^+`` (k, n): ``alpha = Ft^+ (y - mean y)`` solves ``Ft'Ft alpha = Ft' yt``
        [GeDI eq 16] (minimum-norm solution if ``Ft`` is rank deficient).
    gram : torch.Tensor
        ``Ft'Ft / n`` (k, k): the covariance matrix of the kernel columns.
    rank : int
        Numerical rank of ``Ft`` (singular values above ``s_max * max(n, k) * eps``).
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
        """Kernel of ``z = (x - shift) / scale``, centred on THIS sample.

        ``shift``/``scale`` come from :func:`standardization` of the training sample, so
        a mini-batch gets the training standardisation and its own centring.
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
    """Generalized Disparate Impact ``GeDI(x, y; F) = ||alpha||_1`` [GeDI eq 8, 15-17].

    ``alpha`` is the least-squares fit of the centred target on the centred kernel
    columns of the standardised attribute (see the module docstring for the exact kernel
    bases and the SVD-based solve)::

        z = (x - mean x) / sd(x)                       (population sd; skipped if standardize=False)
        F = [f_1(z), ..., f_k(z)],  Ft = F - mean(F),  yt = y - mean(y)
        Ft'Ft alpha = Ft' yt,       GeDI = sum_j |alpha_j|

    Special cases: ``GeDI(x, y; V^1) = |cov(z, y) / var(z)|`` [GeDI eq 13], and for a
    binary ``x`` coded 0/1 with ``standardize=False`` it equals :func:`didi` (regression)
    and half the classification DIDI of a binary ``y`` [GeDI App. A.4].

    Parameters
    ----------
    x : array-like or torch.Tensor, shape (n,)
        Numeric protected attribute (continuous, or a 0/1 indicator).
    y : array-like or torch.Tensor, shape (n,)
        Target or predictions. Torch input gives a torch result differentiable in ``y``.
    degree : int
        Kernel order ``k`` (number of basis columns).
    kernel : {"poly", "fourier"}
        ``"poly"``: ``z, z^2, ..., z^k`` (``V^k`` in the paper); ``"fourier"``:
        ``sin z, cos z, sin 2z, cos 2z, ...`` (first ``k``).
    return_coefficients : bool
        Also return ``alpha`` (shape (k,)).
    standardize : bool
        Standardise ``x`` first (default, as in the paper's experiments). Use ``False``
        for a 0/1 indicator whose GeDI(V^1) should read as a DIDI.

    Returns
    -------
    float or torch.Tensor, or a tuple (value, alpha)
        Numpy/pandas input gives ``float`` (and a numpy ``alpha``); torch input gives
        tensors in ``y``'s float dtype.

    Raises
    ------
    ValueError
        Bad shapes, non-finite values, a constant ``x``, an unknown kernel or a degree
        whose kernel matrix is rank deficient (e.g. ``degree >= 2`` for a binary ``x``).
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

    Regression::

        DIDI_r = sum_v | mean(pred | x = v) - mean(pred) |

    Classification (binary target, two classes ``u in {0, 1}``)::

        DIDI_c = sum_u sum_v | P(pred = u | x = v) - P(pred = u) |

    For a binary target both class terms are equal, so ``DIDI_c = 2 DIDI_r``
    [GeDI App. A.4, eq 49]. With probabilities ``p`` of class 1 instead of hard labels,
    ``P(pred = 1 | x = v)`` is read as ``mean(p | x = v)`` (the expected DIDI, smooth in
    ``p``).

    Parameters
    ----------
    pred : array-like or torch.Tensor, shape (n,)
        Predictions or targets (regression), or 0/1 labels / class-1 probabilities
        (classification). Torch input gives a differentiable torch scalar.
    sensitive : array-like or torch.Tensor, shape (n,)
        Discrete protected attribute: any labels (numbers, strings, categories); each
        distinct value is a group ``v``.
    classification : bool
        Use ``DIDI_c`` (sum over both classes) instead of ``DIDI_r``.

    Returns
    -------
    float or torch.Tensor
    """
    codes, _ = encode_groups(sensitive, "sensitive")
    return _didi_from_codes(pred, codes, classification)


def binned_didi(pred: Any, x: Any, bins: int, classification: bool = False) -> Any:
    """DIDI over quantile bins of a continuous attribute (DIDI-``bins`` in [GeDI sec 5]).

    ``x`` is discretised with :func:`fairopt.measures.group.bin_quantiles` (edges at the
    ``j / bins`` sample quantiles, right-closed bins as ``pandas.qcut``, tied edges merged)
    and :func:`didi` is computed on the bin codes.

    Parameters
    ----------
    pred : array-like or torch.Tensor, shape (n,)
        Predictions; see :func:`didi`.
    x : array-like or torch.Tensor, shape (n,)
        Continuous protected attribute.
    bins : int
        Number of quantile bins (>= 1).
    classification : bool
        Classification DIDI (see :func:`didi`).
    """
    if isinstance(bins, bool) or not isinstance(bins, (int, np.integer)) or bins < 1:
        raise ValueError(f"bins: expected an integer >= 1, got {bins!r}")
    codes = bin_quantiles(x, int(bins), "x")
    return _didi_from_codes(pred, codes, classification)
