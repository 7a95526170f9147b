"""Distance covariance family: dCov~^2, dCorr~^2, JdCov~^2 and CCdCov [DC sec 3, App A-C].

Unbiased / bias-corrected U-statistics of the prediction ``x`` against sensitive features ``s``:
:func:`dcov` [DC eq A.6-A.7], :func:`dcorr` [DC eq E.1], :func:`jdcov` (Chakraborty & Zhang 2019,
[DC eq 3.4, B.5]) and :func:`ccdcov` (concatenated features, categoricals one-hot, [DC eq 3.6]).
numpy input gives a float; a torch ``x`` gives a 0-dim tensor differentiable in ``x`` (``s`` is
data). Values can be slightly negative and are never clamped.

Computation: U-centring is a projection and the rows of B~ sum to zero, so
``dCov~^2(x, s) = (1/(n(n-3))) sum_{i != j} |x_i - x_j| B~_ij``. Every path computes
``G_k = sum_j sign(x_k - x_j) B~_kj`` (sign(0) = 0: ties are safe); the gradient is
``(2/(n(n-3))) G`` and, the form being homogeneous of degree one, the value ``(2/(n(n-3))) x . G``
(float64, on a centred copy of ``x``). Paths (``method=``):

``"grouped"``
    ``s`` with K distinct rows: ``B~_ij = W[g_i, g_j]``; O(n log n + n K) time, O(n + K^2) memory.
``"univariate"``
    univariate ``s``: Huo & Szekely (2016), O(n log n) (:mod:`fairopt.measures._dcov_sorting`).
``"blocked"``
    anything else, exact: O(n^2 q) time in streamed row blocks, never an n x n matrix for n > 2048.
``"projection"``
    approximate (Huang & Huo 2017): the mean of univariate paths on ``n_projections`` seeded random
    projections of ``s``; never chosen by ``"auto"``.
``"auto"``
    univariate ``s``: ``"grouped"`` up to ``max(16, 8 ceil(log2 n))`` distinct values (two array passes
    per group against about 25 per bit of ``n``), else ``"univariate"``. Multivariate ``s``:
    ``"grouped"`` up to ``min(GROUPED_MAX_GROUPS, n/2)`` distinct rows, else ``"blocked"``. An explicit
    ``"grouped"`` accepts up to :data:`GROUPED_HARD_MAX` rows.
"""

from __future__ import annotations

import math
from typing import Any, Callable, Sequence

import numpy as np
import torch

from fairopt._validation import check_choice, positive_float
from fairopt.measures._dcov_inputs import (
    Prediction,
    encode_sensitive,
    feature_matrix,
    prediction_input,
    tensor_values,
)
from fairopt.measures._dcov_kernels import DistanceKernel, UnivariateKernel, factorize_rows
from fairopt.measures._dcov_paths import (
    GROUPED_HARD_MAX,
    GROUPED_MAX_GROUPS,
    JOINT_METHODS,
    METHODS,
    auto_method,
    distance_kernel,
    joint_kernel,
)

__all__ = [
    "dcov",
    "dcorr",
    "jdcov",
    "ccdcov",
    "select_dcov_method",
    "encode_sensitive",
    "METHODS",
    "JOINT_METHODS",
    "GROUPED_MAX_GROUPS",
    "GROUPED_HARD_MAX",
]


def select_dcov_method(s: Any, method: str = "auto") -> str:
    """The computation path :func:`dcov` takes for the sensitive features ``s`` (``"auto"`` resolved, module doc)."""
    check_choice(method, METHODS, "method")
    features = feature_matrix(s, len(s), "s")  # rows checked against themselves
    if method != "auto":
        return method
    _, representatives = factorize_rows(features)
    return auto_method(features.shape[0], features.shape[1], representatives.shape[0])


KernelFactory = Callable[[np.ndarray], DistanceKernel]


class _DistanceLinearForm(torch.autograd.Function):
    """``offset + T(x)``, ``T(x) = (1/(n(n-3))) sum_{i != j} |x_i - x_j| W_ij``, ``W = kernel_for(x)``.

    The forward pass also returns the gradient ``grad_scale * (2/(n(n-3))) G`` (non-differentiable, used
    by backward); ``grad_scale = 2`` for ``dVar~^2(x)``, where ``x`` is on both sides. The
    ``setup_context`` style lets batched vector-Jacobian products (``torch.func.vjp`` + ``vmap``) work;
    ``T`` is piecewise linear, so the second derivative through backward is the (a.e. zero) Hessian.
    """

    @staticmethod
    def forward(
        x: torch.Tensor, kernel_for: KernelFactory, offset: float, grad_scale: float
    ) -> tuple[torch.Tensor, torch.Tensor]:
        values = tensor_values(x)
        value, gradient = kernel_for(values).value_and_gradient(values)
        gradient = torch.from_numpy(gradient * grad_scale).to(device=x.device, dtype=x.dtype)
        return torch.tensor(offset + value, dtype=x.dtype, device=x.device), gradient

    @staticmethod
    def setup_context(ctx: Any, inputs: tuple, output: tuple) -> None:
        ctx.mark_non_differentiable(output[1])
        ctx.save_for_backward(output[1])

    @staticmethod
    def backward(ctx: Any, grad_value: torch.Tensor, grad_gradient: Any) -> tuple[torch.Tensor, None, None, None]:
        (gradient,) = ctx.saved_tensors
        return grad_value * gradient, None, None, None


def _fixed(kernel: DistanceKernel) -> KernelFactory:
    return lambda values: kernel


def _evaluate(
    prediction: Prediction, kernel_for: KernelFactory, offset: float = 0.0, grad_scale: float = 1.0
) -> torch.Tensor | float:
    """``offset + T(x)``: a differentiable 0-dim tensor for torch input, else a float."""
    if prediction.tensor is None:
        return offset + kernel_for(prediction.array).value(prediction.array)
    result, _ = _DistanceLinearForm.apply(prediction.tensor, kernel_for, offset, grad_scale)
    return result


def dcov(
    x: Any,
    s: Any,
    method: str = "auto",
    *,
    n_projections: int = 50,
    seed: int | None = 0,
    block_size: int | None = None,
) -> torch.Tensor | float:
    """Unbiased squared distance covariance dCov~^2(x, s) [DC eq 3.2, A.6-A.7].

    ``dCov~^2(x, s) = (1/(n(n-3))) sum_{i != j} A~_ij B~_ij`` with A~, B~ the U-centred Euclidean distance
    matrices (Szekely & Rizzo 2014).

    Parameters
    ----------
    x : array-like or torch.Tensor, shape (n,)
        Predictions, n >= 4.
    s : array-like, shape (n,) or (n, q)
        Numeric sensitive features, used as given (encode nominal ones first, as :func:`ccdcov` does).
    method : {"auto", "grouped", "univariate", "blocked", "projection"}
        Computation path (module doc); all but ``"projection"`` are exact.
    n_projections, seed : int
        Random directions and their seed, for ``method="projection"``.
    block_size : int, optional
        Rows per block for ``method="blocked"`` (default: blocks of at most 2^22 entries).
    """
    prediction = prediction_input(x)
    kernel, _ = distance_kernel(feature_matrix(s, prediction.n, "s"), method, n_projections, seed, block_size)
    return _evaluate(prediction, _fixed(kernel))


def dcorr(
    x: Any,
    s: Any,
    method: str = "auto",
    *,
    n_projections: int = 50,
    seed: int | None = 0,
    block_size: int | None = None,
) -> torch.Tensor | float:
    """Bias-corrected squared distance correlation [DC eq E.1], in [-1, 1].

    ``dCorr~^2(x, s) = dCov~^2(x, s) / sqrt(dVar~^2(x) dVar~^2(s))``, and 0 when a variance is <= 0.
    Parameters as in :func:`dcov`.
    """
    prediction = prediction_input(x)
    kernel, _ = distance_kernel(feature_matrix(s, prediction.n, "s"), method, n_projections, seed, block_size)
    covariance = _evaluate(prediction, _fixed(kernel))
    variance_s = kernel.self_inner()
    variance_x = _evaluate(prediction, UnivariateKernel, grad_scale=2.0)
    if prediction.tensor is None:
        if variance_x <= 0.0 or variance_s <= 0.0:
            return 0.0
        return covariance / math.sqrt(variance_x * variance_s)
    if float(variance_x.detach()) <= 0.0 or variance_s <= 0.0:
        return covariance * 0.0
    return covariance / torch.sqrt(variance_x * variance_s)


def ccdcov(
    x: Any,
    *s: Any,
    categorical: bool | Sequence[bool | None] | None = None,
    method: str = "auto",
    n_projections: int = 50,
    seed: int | None = 0,
    block_size: int | None = None,
) -> torch.Tensor | float:
    """Concatenated distance covariance ``CCdCov = dCov~^2(x, [s_1 | ... | s_d])`` [DC eq 3.6, Thm 3.2.1].

    Parameters
    ----------
    x : array-like or torch.Tensor, shape (n,)
    *s : array-like
        One or more sensitive features, each (n,) or (n, q_i).
    categorical : bool or sequence of (bool or None), optional
        Which features to one-hot encode; None infers from the dtype (:func:`encode_sensitive`).
    method, n_projections, seed, block_size
        As in :func:`dcov`.
    """
    if not s:
        raise ValueError("s: at least one sensitive feature is required")
    prediction = prediction_input(x)
    joint = np.hstack(encode_sensitive(s, prediction.n, categorical))
    kernel, _ = distance_kernel(joint, method, n_projections, seed, block_size)
    return _evaluate(prediction, _fixed(kernel))


def jdcov(
    x: Any,
    *s: Any,
    c: float = 1.0,
    categorical: bool | Sequence[bool | None] | None = None,
    method: str = "auto",
    block_size: int | None = None,
) -> torch.Tensor | float:
    """Bias-corrected joint distance covariance JdCov~^2(x, s_1, ..., s_d) [DC eq 3.4].

    Chakraborty & Zhang (2019) sec 3.2, with ``U_i(k, l) = -(U-centred distances of variable i)(k, l)``::

        JdCov~^2 = (1/(n(n-3))) sum_{k != l} prod_{i=0..d} (U_i(k, l) + c) - c^(d+1) (n-1)/(n-3)

    [DC eq B.5] prints another sign and constant; the authors' R package ``jdcov`` fixes them as here.
    With ``P = prod_{i>=1} (c + U_i)`` and P~ its U-centring the statistic is the dCov form with
    ``W = -P~`` plus a constant. One sensitive feature gives dCov~^2(x, s_1). A constant ``x`` gives
    ``c JdCov~^2(s_1, ..., s_d)``, a floor no prediction removes [DC sec 3.2.2] (``docs/methods/dcov.md``).

    Parameters
    ----------
    x : array-like or torch.Tensor, shape (n,)
    *s : array-like
        Sensitive features s_1..s_d, each (n,) or (n, q_i).
    c : float
        The positive constant of Chakraborty & Zhang (1 in [DC]).
    categorical : bool or sequence of (bool or None), optional
        As in :func:`ccdcov`.
    method : {"auto", "grouped", "blocked"}
        ``"auto"``: grouped up to :data:`GROUPED_MAX_GROUPS` distinct joint rows, else blocked (O(n^2 d)).
    block_size : int, optional
        Rows per block of the blocked path.
    """
    if not s:
        raise ValueError("s: at least one sensitive feature is required")
    c = positive_float(c, "c")
    check_choice(method, JOINT_METHODS, "method")
    prediction = prediction_input(x)
    n = prediction.n
    features = encode_sensitive(s, n, categorical)
    if len(features) == 1:
        kernel, _ = distance_kernel(features[0], method, block_size=block_size)
        return _evaluate(prediction, _fixed(kernel))
    kernel, sum_products = joint_kernel(features, c, method, block_size)
    d = len(features)
    offset = c * sum_products / (n * (n - 3.0)) - c ** (d + 1) * (n - 1.0) / (n - 3.0)
    return _evaluate(prediction, _fixed(kernel), offset=offset)


