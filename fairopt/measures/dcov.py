"""Distance covariance family: dCov~^2, dCorr~^2, JdCov~^2 and CCdCov [DC sec 3, App A-C].

All statistics are unbiased / bias-corrected U-statistics of the prediction ``x`` (one
value per sample) against sensitive features ``s``:

* :func:`dcov`: ``dCov~^2(x, s) = (1/(n(n-3))) sum_{i != j} A~_ij B~_ij`` [DC eq A.6],
  A~, B~ the U-centred distance matrices [DC eq A.7] (Szekely & Rizzo 2014);
* :func:`dcorr`: ``dCov~^2(x, s) / sqrt(dVar~^2(x) dVar~^2(s))``, 0 if a variance is <= 0
  [DC eq E.1];
* :func:`jdcov`: the bias-corrected joint distance covariance of Chakraborty & Zhang (2019)
  [DC eq 3.4, B.5];
* :func:`ccdcov`: dCov~^2 of ``x`` with the concatenated sensitive features, categoricals
  one-hot encoded [DC eq 3.6].

Inputs are numpy arrays (result: a Python float) or torch tensors (result: a 0-dim tensor
in the dtype of ``x``, differentiable in ``x``; the sensitive side is data and carries no
gradient). The statistics can be slightly negative; nothing is clamped.

Computation. Because U-centring is a projection and the rows of B~ sum
to zero, ``dCov~^2(x, s) = (1/(n(n-3))) sum_{i != j} |x_i - x_j| B~_ij`` and
``d dCov~^2 / d x_k = (2/(n(n-3))) sum_j sign(x_k - x_j) B~_kj``; every path computes
the sums ``G_k = sum_j sign(x_k - x_j) B~_kj`` (sign(0) = 0, so ties are safe), the
gradient is ``(2/(n(n-3))) G`` and, by Euler's identity for this degree-one homogeneous
function, the value is ``(2/(n(n-3))) x . G``. Arithmetic is float64 on a centred copy of
``x``. Paths (``method=``):

``"grouped"``
    ``s`` has K distinct rows (binary, categorical, one-hot cells, integer ages):
    ``B~_ij = W[g_i, g_j]`` with a K x K matrix; O(n log n + n K) time, O(n + K^2) memory.
``"univariate"``
    univariate ``s``: Huo & Szekely (2016), O(n log n) (dominance sums by a radix
    partition, see :mod:`fairopt.measures._dcov_sorting`).
``"blocked"``
    anything else, exact: O(n^2 q) time, streaming blocks of rows (at most 2^22 entries,
    set by ``block_size``) with the row sums of the distance matrix precomputed; never an
    n x n matrix for n > 2048.
``"projection"``
    approximate (Huang & Huo 2017): average of ``n_projections`` univariate paths on
    random one-dimensional projections of ``s`` (seeded); never chosen by ``"auto"``.
``"auto"``
    univariate ``s``: ``"grouped"`` if it has at most ``max(16, 8 ceil(log2 n))`` distinct
    values, else ``"univariate"``. The grouped path costs two array passes per group, the
    univariate one about 25 per bit of ``n``; the measured crossover lies between K = 128 and
    256 for n = 1e4..1e6 (K ~ 50 at n = 1e3), the rule stays below it.
    Multivariate ``s``: ``"grouped"`` if it has at most ``min(GROUPED_MAX_GROUPS, n/2)``
    distinct rows (K x K matrices of at most 32 MB; n K work against the n^2 of the only
    exact alternative; rows that are almost all distinct have no group structure to use),
    else ``"blocked"``. An explicit ``method="grouped"`` accepts up
    to :data:`GROUPED_HARD_MAX` distinct rows.
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
    """The computation path :func:`dcov` takes for the sensitive features ``s``.

    Parameters
    ----------
    s : array-like, shape (n,) or (n, q)
        Numeric sensitive features (as passed to :func:`dcov`).
    method : str
        ``"auto"`` or an explicit path (returned unchanged after validation).

    Returns
    -------
    str
        One of ``"grouped"``, ``"univariate"``, ``"blocked"``, ``"projection"``; see the
        module docstring for the rule that ``"auto"`` applies.
    """
    check_choice(method, METHODS, "method")
    features = feature_matrix(s, len(s), "s")  # rows checked against themselves
    if method != "auto":
        return method
    _, representatives = factorize_rows(features)
    return auto_method(features.shape[0], features.shape[1], representatives.shape[0])


KernelFactory = Callable[[np.ndarray], DistanceKernel]


class _DistanceLinearForm(torch.autograd.Function):
    """``offset + T(x)``, ``T(x) = (1/(n(n-3))) sum_{i != j} |x_i - x_j| W_ij``, ``W = kernel_for(x)``.

    ``kernel_for`` returns the sensitive-side kernel (a fixed one for dCov~^2, or the
    U-centred distances of ``x`` itself for dVar~^2(x)); it is called here, on the plain
    tensor, so that nothing reads tensor data outside the Function. Returns
    ``(offset + T(x), gradient)`` (the sum in float64, then cast to the dtype of ``x``):
    the gradient ``grad_scale * (2/(n(n-3))) G``
    (``G_k = sum_j sign(x_k - x_j) W_kj``, sign(0) = 0) comes out of the same pass, is
    marked non-differentiable and is what the backward pass multiplies. ``grad_scale = 2``
    is the derivative of ``dVar~^2(x)``, in which ``x`` appears on both sides. Written in
    the ``setup_context`` style so that batched vector-Jacobian products
    (``is_grads_batched``, ``torch.func.vjp`` + ``vmap`` over cotangents) work. T is
    piecewise linear, so a second derivative through this backward is the correct
    (almost everywhere zero) Hessian.
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

    ``dCov~^2(x, s) = (1/(n(n-3))) sum_{i != j} A~_ij B~_ij`` with A~, B~ the U-centred
    Euclidean distance matrices of ``x`` and ``s`` (Szekely & Rizzo 2014), computed as
    ``(1/(n(n-3))) sum_{i != j} |x_i - x_j| B~_ij``.

    Parameters
    ----------
    x : array-like or torch.Tensor, shape (n,)
        Predictions, n >= 4. A torch tensor gives a 0-dim tensor differentiable in ``x``.
    s : array-like, shape (n,) or (n, q)
        Numeric sensitive features, used as given (Euclidean distance between rows).
        Encode nominal features first (:func:`ccdcov` does it).
    method : {"auto", "grouped", "univariate", "blocked", "projection"}
        Computation path (module docstring); all but ``"projection"`` are exact.
    n_projections, seed : int
        Number of random directions and their seed, for ``method="projection"``.
    block_size : int, optional
        Rows per block for ``method="blocked"`` (default: blocks of at most 2^22 entries).

    Returns
    -------
    float or 0-dim torch.Tensor
        The statistic; it can be slightly negative (never clamped).
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
    """Bias-corrected squared distance correlation [DC eq E.1].

    ``dCorr~^2(x, s) = dCov~^2(x, s) / sqrt(dVar~^2(x) dVar~^2(s))``, and 0 when
    ``dVar~^2(x) <= 0`` or ``dVar~^2(s) <= 0``; it lies in [-1, 1]. ``dVar~^2(x)`` uses
    the univariate path on ``x`` (its gradient is twice the one-sided one); ``dVar~^2(s)``
    uses the path of ``method`` (random projections for ``"projection"``).

    Parameters and return value as in :func:`dcov`; with torch input the result is
    differentiable in ``x`` (a zero with zero gradient in the degenerate case).
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
    """Concatenated distance covariance CCdCov(x, (s_1, ..., s_d)) [DC eq 3.6, Thm 3.2.1].

    ``CCdCov = dCov~^2(x, [s_1 | ... | s_d])``: the sensitive features are encoded by
    :func:`encode_sensitive` (categoricals one-hot, see ``categorical``) and concatenated
    column-wise; the joint cells of categorical features give the grouped path.

    Parameters
    ----------
    x : array-like or torch.Tensor, shape (n,)
    *s : array-like
        One or more sensitive features, each (n,) or (n, q_i).
    categorical : bool or sequence of (bool or None), optional
        Which features to one-hot encode; ``None`` infers from the dtype (integers,
        strings, booleans and pandas categoricals are categorical).
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

    Chakraborty & Zhang (2019), sec 3.2, with their sign convention
    ``U_i(k, l) = -(U-centred distance matrix of variable i)(k, l)``::

        JdCov~^2 = (1/(n(n-3))) sum_{k != l} prod_{i=0..d} (U_i(k, l) + c) - c^(d+1) (n-1)/(n-3)

    over the d + 1 variables ``x, s_1, ..., s_d`` (the sum over all ``k, l`` of their R
    package, minus ``c^(d+1) n/(n-3)``, is the same number). Expanding the product, it is
    the sum over all subsets of at least two variables of ``c^(d+1-|S|)`` times the
    U-statistic of ``prod_{i in S} U_i``: pairs give dCov~^2 terms [DC eq 3.5], odd-size
    subsets carry the sign of the convention. The paper's eq (B.5) prints ``+ 1`` with the
    U-centred matrices without the minus sign and a constant ``1/(n(n-3))``; the authors' R
    package (``jdcov``) and the expansion above fix both as used here.

    Computation: with ``P(k, l) = prod_{i>=1} (c + U_i(k, l))`` (off-diagonal) and P~ its
    U-centring, ``JdCov~^2 = c sum_{k != l} P/(n(n-3)) - c^(d+1)(n-1)/(n-3)
    + (1/(n(n-3))) sum_{k != l} |x_k - x_l| (-P~)_kl``: the dCov form above with
    ``W = -P~``, grouped when the joint sensitive rows take few values, else blocked.
    With one sensitive feature it equals dCov~^2(x, s_1) exactly (and is computed so).

    Floor: for a constant ``x`` (``U_0 = 0``) the statistic is ``c JdCov~^2(s_1, ..., s_d)``,
    the dependence among the sensitive features alone, which no prediction removes
    [DC sec 3.2.2]. On the COMPAS validation part of ``benchmarks/dcov_compas.py`` (sex
    0/1, race one-hot, age min-max scaled, ``c = 1``) it is 0.0028, against the 0.0060 at
    which [DC] Table 5.1 levels off; no variant the paper documents (V- instead of
    U-statistic, the sign of its eq B.5, other age scalings, encodings) reproduces 0.0060.
    The comparison is in the distance-covariance page of the documentation
    (``docs/methods/dcov.md``, "The JdCov floor on COMPAS").

    Parameters
    ----------
    x : array-like or torch.Tensor, shape (n,)
    *s : array-like
        Sensitive features s_1..s_d, each (n,) or (n, q_i).
    c : float
        The positive constant of Chakraborty & Zhang; 1 in their package and in [DC].
    categorical : bool or sequence of (bool or None), optional
        As in :func:`ccdcov` (categoricals are one-hot encoded, [DC App B.1]).
    method : {"auto", "grouped", "blocked"}
        ``"auto"``: grouped if the concatenated features have at most
        :data:`GROUPED_MAX_GROUPS` distinct rows, else blocked (O(n^2 d)).
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


