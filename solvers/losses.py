"""Mean training losses on a model output ``out`` (one value per row).

A loss is a callable ``loss(out, batch) -> scalar tensor``; the engines accept a name
(``"bce"``, ``"mse"``, ``"poisson"``) or such a callable.

Weighted rows: when the batch carries per-row weights ``w`` (``batch.weights``, see
:class:`solvers.problem.Batch`), the built-in losses are the weighted means

``L_w = sum_i w_i l_i / sum_i w_i``

of the per-row losses ``l_i`` (0 for a batch whose weights are all 0); with integer weights
this is the plain mean over the data with row ``i`` repeated ``w_i`` times. An unweighted
batch (``weights`` absent or None) takes the plain mean, computed exactly as before. A
loss of the user's own should do the same to be weight-aware; the engines add the pieces of
row blocks as ``L_w * sum_i w_i`` (:func:`solvers.problem.weight_total`).
"""

from __future__ import annotations

import math

from typing import Any, Callable, Sequence

import torch
import torch.nn.functional as F
from torch import nn

from solvers.problem import row_chunks, row_weights, weight_total, weighted_mean

__all__ = ["LossFn", "bce_loss", "mse_loss", "poisson_loss", "get_loss", "check_targets", "ScaledLoss",
           "scaled_mse_loss", "L2Regularised", "linear_weights", "parameter_gradient", "unregularised",
           "value_and_gradient", "constant_loss", "loss_name"]

LossFn = Callable[[torch.Tensor, Any], torch.Tensor]


def bce_loss(out: torch.Tensor, batch: Any) -> torch.Tensor:
    """Binary cross-entropy on logits: ``mean(log(1 + e^out) - y * out)``; with row weights
    ``w`` the weighted mean ``sum_i w_i l_i / sum_i w_i`` (module doc)."""
    weights = row_weights(batch, out)
    if weights is None:
        return F.binary_cross_entropy_with_logits(out, batch.y.to(out.dtype))
    return weighted_mean(F.binary_cross_entropy_with_logits(out, batch.y.to(out.dtype), reduction="none"), weights)


def mse_loss(out: torch.Tensor, batch: Any) -> torch.Tensor:
    """Mean squared error ``mean((out - y)^2)``; with row weights ``w``
    ``sum_i w_i (out_i - y_i)^2 / sum_i w_i``."""
    weights = row_weights(batch, out)
    if weights is None:
        return torch.mean((out - batch.y.to(out.dtype)) ** 2)
    return weighted_mean((out - batch.y.to(out.dtype)) ** 2, weights)


def poisson_loss(out: torch.Tensor, batch: Any) -> torch.Tensor:
    """Poisson negative log-likelihood (up to a constant) on a log-rate ``out``.

    With exposure ``e`` (``batch.exposure``, or 1) as an offset, ``eta = out + log e`` and
    ``loss = mean(exp(eta) - y * eta)``; with row weights ``w`` the weighted mean
    ``sum_i w_i (exp(eta_i) - y_i eta_i) / sum_i w_i`` (the weights multiply the exposure's
    per-row likelihood, they do not replace it).
    """
    eta = out
    exposure = getattr(batch, "exposure", None)
    if exposure is not None:
        eta = out + torch.log(exposure.to(out.dtype))
    weights = row_weights(batch, out)
    if weights is None:
        return torch.mean(torch.exp(eta) - batch.y.to(out.dtype) * eta)
    return weighted_mean(torch.exp(eta) - batch.y.to(out.dtype) * eta, weights)


class ScaledLoss:
    """``factor * loss(out, batch)``: a named loss rescaled by a constant (picklable).

    The engines' step sizes and tolerances are tuned for losses of order 1; a caller that
    trains on targets in large units can divide the loss by the target variance so that the
    engine sees the gradient scale of the standardised problem while the model output, and
    so every constraint on it, stays in the target's units (see :func:`scaled_mse_loss`).
    """

    def __init__(self, loss: "str | LossFn", factor: float) -> None:
        factor = float(factor)
        if not (factor > 0 and factor < float("inf")):
            raise ValueError(f"factor: expected a positive finite number, got {factor!r}")
        self.loss = loss
        self.factor = factor
        self._fn = get_loss(loss)

    def __call__(self, out: torch.Tensor, batch: Any) -> torch.Tensor:
        return self._fn(out, batch) * self.factor

    def __repr__(self) -> str:
        return f"ScaledLoss({self.loss!r}, factor={self.factor:g})"


def scaled_mse_loss(scale: float) -> ScaledLoss:
    """``mean((out - y)^2) / scale^2``, the mean squared error of the standardised output.

    With ``out = scale * z + shift`` (e.g. a model ending in an output scaling) and
    ``y_s = (y - shift) / scale`` this equals ``mean((z - y_s)^2)``: the loss of the
    standardised regression, with predictions and constraint values still in ``y``'s units.
    ``scale`` must be positive and finite (use 1 for a constant target).
    """
    scale = float(scale)
    if not (scale > 0 and scale < float("inf")):
        raise ValueError(f"scale: expected a positive finite number, got {scale!r}")
    return ScaledLoss("mse", 1.0 / (scale * scale))


class L2Regularised:
    """``loss(out, batch) + alpha / 2 * sum_k ||W_k||^2``: a loss with an L2 penalty on weight tensors.

    ``weights`` are live parameter tensors of the model being trained (typically the weight
    matrices of its ``nn.Linear`` layers, :func:`linear_weights`, so that biases and
    intercepts are not shrunk). The penalty does not depend on the rows: added to every
    batch's mean loss it is the penalty of the objective once, also when an engine sums
    chunk means weighted by their share of the rows.

    The engines that differentiate the objective through autograd (the first-order ones)
    see the penalty's gradient ``alpha W_k`` through ``__call__``. Engines that take
    ``df/d out`` from :func:`value_and_gradient` and pull it back through the model (SQP's
    derivative oracles) add :func:`parameter_gradient`, since the penalty does not pass
    through the outputs.

    Parameters
    ----------
    loss : str or callable(out, batch) -> scalar
        The mean loss (a name of :func:`get_loss` or a callable).
    weights : sequence of torch.Tensor
        The tensors whose squared norms are penalised.
    alpha : float
        ``>= 0``; 0 leaves the loss as it is.
    """

    def __init__(self, loss: "str | LossFn", weights: Sequence[torch.Tensor], alpha: float) -> None:
        alpha = float(alpha)
        if not (alpha >= 0 and math.isfinite(alpha)):
            raise ValueError(f"alpha: expected a finite number >= 0, got {alpha!r}")
        self.loss = loss
        self.alpha = alpha
        self.weights = list(weights)
        self._fn = get_loss(loss)

    def penalty(self) -> torch.Tensor:
        """``alpha / 2 * sum_k ||W_k||^2`` at the current weights (with their graph)."""
        if not self.weights:
            return torch.zeros(())
        return 0.5 * self.alpha * sum((w * w).sum() for w in self.weights)

    def __call__(self, out: torch.Tensor, batch: Any) -> torch.Tensor:
        value = self._fn(out, batch)
        return value + self.penalty().to(value.dtype)

    def gradient(self, params: Sequence[torch.Tensor]) -> torch.Tensor:
        """``d penalty / d params`` as one flat vector in the order of ``params``: ``alpha W``
        for a penalised tensor, 0 for the others (biases)."""
        ids = {id(w) for w in self.weights}
        return torch.cat([(self.alpha * p.detach() if id(p) in ids else torch.zeros_like(p)).reshape(-1)
                          for p in params])

    def __repr__(self) -> str:
        return f"L2Regularised({self.loss!r}, alpha={self.alpha:g}, {len(self.weights)} weight tensors)"


def linear_weights(model: nn.Module) -> list[torch.Tensor]:
    """The weight matrices of the ``nn.Linear`` layers of ``model`` (not their biases): the
    tensors an L2 penalty on "the weights" shrinks, for a linear model its coefficients
    and for an MLP every layer's matrix, the output layer's included."""
    return [m.weight for m in model.modules() if isinstance(m, nn.Linear) and m.weight.requires_grad]


def unregularised(loss: "str | LossFn") -> "str | LossFn":
    """The loss inside an :class:`L2Regularised` (the loss itself otherwise)."""
    while isinstance(loss, L2Regularised):
        loss = loss.loss
    return loss


def parameter_gradient(loss: "str | LossFn", params: Sequence[torch.Tensor]) -> torch.Tensor | None:
    """The gradient that a loss has directly in the parameters, not through the outputs: that
    of an :class:`L2Regularised` penalty (flat, in the order of ``params``); None for other losses."""
    return loss.gradient(params) if isinstance(loss, L2Regularised) and loss.alpha > 0 else None


_LOSSES: dict[str, LossFn] = {"bce": bce_loss, "mse": mse_loss, "poisson": poisson_loss}


def get_loss(loss: str | LossFn) -> LossFn:
    """Resolve a loss name (``"bce"``, ``"mse"``, ``"poisson"``) or pass a callable through."""
    if callable(loss):
        return loss
    if isinstance(loss, str) and loss in _LOSSES:
        return _LOSSES[loss]
    raise ValueError(f"loss: expected one of {sorted(_LOSSES)} or a callable(out, batch), got {loss!r}")


def _bce_residual(out: torch.Tensor, batch: Any) -> torch.Tensor:
    return torch.sigmoid(out) - batch.y.to(out.dtype)


def _mse_residual(out: torch.Tensor, batch: Any) -> torch.Tensor:
    return 2.0 * (out - batch.y.to(out.dtype))


def _poisson_residual(out: torch.Tensor, batch: Any) -> torch.Tensor:
    eta = out
    exposure = getattr(batch, "exposure", None)
    if exposure is not None:
        eta = out + torch.log(exposure.to(out.dtype))
    return torch.exp(eta) - batch.y.to(out.dtype)


#: ``dl_i / d out_i`` of the built-in per-row losses.
_RESIDUALS: dict[Any, Callable[[torch.Tensor, Any], torch.Tensor]] = {
    bce_loss: _bce_residual, mse_loss: _mse_residual, poisson_loss: _poisson_residual}


def value_and_gradient(loss_fn: LossFn, out: torch.Tensor, batch: Any) -> tuple[torch.Tensor, torch.Tensor]:
    """The loss ``f = loss_fn(out, batch)`` (0-dim) and ``df / d out`` (n,), without a graph.

    For the built-in losses (also inside :class:`ScaledLoss`, times its factor) in closed form:
    with ``r_i = dl_i / d out_i`` (``sigmoid(out_i) - y_i`` for ``"bce"``, ``2 (out_i - y_i)``
    for ``"mse"``, ``exp(eta_i) - y_i`` for ``"poisson"``), ``df / d out_i = r_i / n``, or
    ``w_i r_i / sum_j w_j`` with row weights (0 when every weight is 0, as the weighted mean). Any
    other callable: one backward pass through the graph of ``loss_fn(out, batch)``. The closed form
    saves that pass (about a third of the gradient's time). An :class:`L2Regularised` loss: the
    value of the loss inside plus the penalty, and the inside loss's ``df / d out`` (the penalty's
    gradient is in the parameters, :func:`parameter_gradient`).
    """
    if isinstance(loss_fn, L2Regularised):  # the penalty has no gradient in out (parameter_gradient)
        f, df = value_and_gradient(loss_fn._fn, out, batch)
        with torch.no_grad():
            return f + loss_fn.penalty().detach().to(f.dtype), df
    factor, base = 1.0, loss_fn
    while isinstance(base, ScaledLoss):
        factor, base = factor * base.factor, base._fn
    residual = _RESIDUALS.get(base)
    if residual is None:
        leaf = out.detach().requires_grad_(True)
        with torch.enable_grad():
            f = loss_fn(leaf, batch)
        (df,) = torch.autograd.grad(f, leaf)
        return f.detach(), df
    with torch.no_grad():
        out = out.detach()
        f = loss_fn(out, batch)
        r = residual(out, batch)
        weights = row_weights(batch, out)
        if weights is None:
            df = r * (factor / out.shape[0])
        else:
            total = float(weights.sum())
            df = weights * r * (factor / total if total > 0 else 0.0)
    return f, df


def loss_name(loss: "str | LossFn") -> str | None:
    """The name behind a named loss (also inside :class:`ScaledLoss` and :class:`L2Regularised`), else None."""
    while isinstance(loss, (ScaledLoss, L2Regularised)):
        loss = loss.loss
    if isinstance(loss, str):
        return loss
    for name, fn in _LOSSES.items():
        if loss is fn:
            return name
    return None


def check_targets(loss: "str | LossFn", data: Any) -> None:
    """Refuse targets that a named loss cannot fit, before any training.

    ``"bce"`` needs 0/1 labels, ``"poisson"`` finite counts (or rates) ``>= 0``, ``"mse"``
    finite numbers; a callable of the user's own is not checked. Without this, ``"bce"`` on
    real-valued targets or ``"poisson"`` on negative ones trains silently to a meaningless
    model.

    Raises
    ------
    ValueError
        Naming the loss, the offending value and the loss that fits such targets.
    """
    name = loss_name(loss)
    if name is None:
        return
    y = torch.as_tensor(data.y).reshape(-1)
    if y.numel() == 0:
        return
    finite = torch.isfinite(y.double()) if y.is_floating_point() else torch.ones_like(y, dtype=torch.bool)
    if not bool(finite.all()):
        raise ValueError(f"loss {name!r}: the targets contain NaN or infinite values")
    if name == "bce":
        bad = (y != 0) & (y != 1)
        if bool(bad.any()):
            raise ValueError(f"loss 'bce': expected 0/1 labels, got {y[bad][0].item()!r} among the targets "
                             "(use loss='mse' for real-valued targets, or encode the classes as 0/1)")
    elif name == "poisson":
        bad = y < 0
        if bool(bad.any()):
            raise ValueError(f"loss 'poisson': expected counts or rates >= 0, got {y[bad][0].item()!r} among "
                             "the targets (use loss='mse' for targets that can be negative)")


def constant_loss(loss_fn: LossFn, data: Any, chunk_rows: int | None = None, iterations: int = 30) -> float:
    """Training loss of the best constant output: ``min_a L(a 1, data)``.

    The reference a trained model must beat (for the binary cross-entropy the loss of
    ``a = logit(mean y)``, for the squared error the variance of ``y``, for the Poisson loss
    with exposure ``e`` the loss of ``a = log(sum y / sum e)``). Found by safeguarded Newton
    steps on the scalar ``a`` (the loss of a constant is convex in ``a`` for these losses;
    any other loss gets the best ``a`` Newton finds from 0) with autograd derivatives, on all
    rows of ``data``, in chunks of ``chunk_rows`` rows when given (the mean is the weighted
    sum of chunk means, :func:`solvers.problem.weight_total`). Non-finite when the loss is.
    An :class:`L2Regularised` loss counts without its penalty: a constant output has zero weights.
    """
    loss_fn = get_loss(unregularised(loss_fn))
    blocks = list(row_chunks(data, chunk_rows))
    totals = [weight_total(b) for b in blocks]
    denominator = sum(totals)

    def value(a: torch.Tensor) -> torch.Tensor:
        return sum(loss_fn(a.expand(len(b)), b) * (t / denominator) for b, t in zip(blocks, totals))

    a = torch.zeros((), dtype=torch.float64)
    best = math.inf
    for _ in range(int(iterations)):
        a_var = a.clone().requires_grad_(True)
        with torch.enable_grad():
            f = value(a_var)
            (g,) = torch.autograd.grad(f, a_var, create_graph=True)
            (h,) = torch.autograd.grad(g, a_var)
        f_value, g_value, h_value = float(f.detach()), float(g.detach()), float(h)
        best = min(best, f_value)
        if not math.isfinite(f_value) or abs(g_value) < 1e-10:
            break
        move = -g_value / h_value if h_value > 1e-12 else -g_value
        a = a + max(-5.0, min(5.0, move))  # Newton, at most 5 units of output per step
    with torch.no_grad():
        best = min(best, float(value(a)))
    return best
