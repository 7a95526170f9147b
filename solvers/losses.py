"""Mean training losses on a model output ``out`` (one value per row).

A loss is a callable ``loss(out, batch) -> scalar tensor``; the engines accept one or a name
("bce", "mse", "poisson"). With row weights ``w`` (:class:`solvers.problem.Batch`) the built-in
losses are ``L_w = sum_i w_i l_i / sum_i w_i`` (0 when all weights are 0), so that the engines can
add row blocks as ``L_w * sum_i w_i`` (:func:`solvers.problem.weight_total`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from typing import Any, Callable, Sequence

import torch
import torch.nn.functional as F
from torch import nn

from solvers.problem import row_chunks, row_weights, weight_total, weighted_mean

__all__ = ["LossFn", "bce_loss", "mse_loss", "poisson_loss", "get_loss", "check_targets", "ScaledLoss",
           "scaled_mse_loss", "L2Regularised", "linear_weights", "parameter_gradient", "unregularised",
           "value_and_gradient", "best_constant_output", "constant_loss", "loss_name", "TargetBlock", "target_blocks"]

LossFn = Callable[[torch.Tensor, Any], torch.Tensor]


def bce_loss(out: torch.Tensor, batch: Any) -> torch.Tensor:
    """Binary cross-entropy on logits, ``mean(log(1 + e^out) - y * out)`` (weighted: module doc)."""
    weights = row_weights(batch, out)
    if weights is None:
        return F.binary_cross_entropy_with_logits(out, batch.y.to(out.dtype))
    return weighted_mean(F.binary_cross_entropy_with_logits(out, batch.y.to(out.dtype), reduction="none"), weights)


def mse_loss(out: torch.Tensor, batch: Any) -> torch.Tensor:
    """Mean squared error ``mean((out - y)^2)`` (weighted: module doc)."""
    weights = row_weights(batch, out)
    if weights is None:
        return torch.mean((out - batch.y.to(out.dtype)) ** 2)
    return weighted_mean((out - batch.y.to(out.dtype)) ** 2, weights)


def poisson_loss(out: torch.Tensor, batch: Any) -> torch.Tensor:
    """Poisson negative log-likelihood (up to a constant) on a log-rate: ``mean(exp(eta) - y * eta)``,
    ``eta = out + log e`` with exposure ``e`` (``batch.exposure``, or 1); row weights multiply it."""
    eta = out
    exposure = getattr(batch, "exposure", None)
    if exposure is not None:
        eta = out + torch.log(exposure.to(out.dtype))
    weights = row_weights(batch, out)
    if weights is None:
        return torch.mean(torch.exp(eta) - batch.y.to(out.dtype) * eta)
    return weighted_mean(torch.exp(eta) - batch.y.to(out.dtype) * eta, weights)


class ScaledLoss:
    """``factor * loss(out, batch)`` (picklable): the engines' steps and tolerances are tuned for losses
    of order 1, and targets in large units keep their units this way (:func:`scaled_mse_loss`)."""

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
    """``mean((out - y)^2) / scale^2``: with ``out = scale * z + shift`` and ``y_s = (y - shift) / scale``
    the standardised regression's ``mean((z - y_s)^2)``, predictions and constraints in ``y``'s units."""
    scale = float(scale)
    if not (scale > 0 and scale < float("inf")):
        raise ValueError(f"scale: expected a positive finite number, got {scale!r}")
    return ScaledLoss("mse", 1.0 / (scale * scale))


class L2Regularised:
    """``loss(out, batch) + alpha / 2 * sum_k ||W_k||_M^2``: a loss with an L2 penalty on weight tensors.

    ``weights`` are live parameter tensors (:func:`linear_weights`: no biases); the penalty does not
    depend on the rows, so it counts once in any weighted sum of batch means. Autograd engines see
    its gradient through ``__call__``; engines that pull back ``df/d out`` add
    :func:`parameter_gradient`, as the penalty does not pass through the outputs. ``alpha >= 0``.
    ``forms``: per weight tensor ``W_k`` (shape (o, i)) None or a symmetric positive semi-definite
    (i, i) matrix ``M_k``, the penalty ``||W_k||_M^2 = tr(W_k M_k W_k')`` (None: ``M_k = I``, the plain
    ``||W_k||^2``); a linear model fitted in whitened coordinates ``v`` penalises ``v' W' W v``, the ridge
    of its folded coefficients (:meth:`solvers.whitening.Whitening.ridge_form`). Gradient ``alpha W_k M_k``,
    Hessian diagonal ``alpha diag(M_k)`` on each row of ``W_k``.
    """

    def __init__(self, loss: "str | LossFn", weights: Sequence[torch.Tensor], alpha: float,
                 forms: Sequence[torch.Tensor | None] | None = None) -> None:
        alpha = float(alpha)
        if not (alpha >= 0 and math.isfinite(alpha)):
            raise ValueError(f"alpha: expected a finite number >= 0, got {alpha!r}")
        self.loss = loss
        self.alpha = alpha
        self.weights = list(weights)
        self.forms = None if forms is None else [
            _checked_form(form, w) for form, w in zip(forms, self.weights, strict=True)]
        self._fn = get_loss(loss)

    def _form(self, k: int) -> torch.Tensor | None:
        return None if self.forms is None else self.forms[k]

    def penalty(self) -> torch.Tensor:
        """``alpha / 2 * sum_k tr(W_k M_k W_k')`` at the current weights (with their graph)."""
        if not self.weights:
            return torch.zeros(())
        return 0.5 * self.alpha * sum((w * w).sum() if self._form(k) is None
                                      else ((w @ self._form(k).to(w.dtype)) * w).sum()
                                      for k, w in enumerate(self.weights))

    def __call__(self, out: torch.Tensor, batch: Any) -> torch.Tensor:
        value = self._fn(out, batch)
        return value + self.penalty().to(value.dtype)

    def _penalised(self, params: Sequence[torch.Tensor]) -> list[int | None]:
        """For each of ``params``, its position among the penalised weight tensors (None: not penalised)."""
        position = {id(w): k for k, w in enumerate(self.weights)}
        return [position.get(id(p)) for p in params]

    def gradient(self, params: Sequence[torch.Tensor]) -> torch.Tensor:
        """``d penalty / d params`` flat: ``alpha W M`` for a penalised tensor, 0 for the others."""
        parts = []
        for p, k in zip(params, self._penalised(params)):
            if k is None:
                parts.append(torch.zeros_like(p))
            elif self._form(k) is None:
                parts.append(self.alpha * p.detach())
            else:
                parts.append(self.alpha * (p.detach() @ self._form(k).to(p.dtype)))
        return torch.cat([part.reshape(-1) for part in parts])

    def curvature(self, params: Sequence[torch.Tensor]) -> torch.Tensor:
        """The penalty's Hessian diagonal flat: ``alpha diag(M)`` on each row of a penalised tensor (``alpha``
        without a form), 0 for the others."""
        parts = []
        for p, k in zip(params, self._penalised(params)):
            if k is None:
                parts.append(torch.zeros(p.numel(), dtype=p.dtype))
            elif self._form(k) is None:
                parts.append(torch.full((p.numel(),), self.alpha, dtype=p.dtype))
            else:
                parts.append((self.alpha * torch.diagonal(self._form(k)).to(p.dtype)).expand_as(p).reshape(-1))
        return torch.cat(parts)

    def __repr__(self) -> str:
        return f"L2Regularised({self.loss!r}, alpha={self.alpha:g}, {len(self.weights)} weight tensors)"


def _checked_form(form: Any, weight: torch.Tensor) -> torch.Tensor | None:
    """``form`` as a detached float64 (i, i) tensor for a weight of shape (o, i); ValueError unless it is
    finite, symmetric and has a non-negative diagonal."""
    if form is None:
        return None
    form = torch.as_tensor(form, dtype=torch.float64).detach()
    size = weight.shape[-1]
    if form.shape != (size, size):
        raise ValueError(f"forms: expected a ({size}, {size}) matrix for a weight of shape {tuple(weight.shape)}, "
                         f"got {tuple(form.shape)}")
    if not bool(torch.isfinite(form).all()) or bool((torch.diagonal(form) < 0).any()) or not torch.allclose(
            form, form.T, rtol=1e-10, atol=1e-12 * float(form.abs().max().clamp(min=1.0))):
        raise ValueError("forms: expected a finite symmetric matrix with a non-negative diagonal")
    return form


def linear_weights(model: nn.Module) -> list[torch.Tensor]:
    """The weight matrices (not the biases) of ``model``'s ``nn.Linear`` layers: what an L2 penalty shrinks."""
    return [m.weight for m in model.modules() if isinstance(m, nn.Linear) and m.weight.requires_grad]


def unregularised(loss: "str | LossFn") -> "str | LossFn":
    """The loss inside an :class:`L2Regularised` (the loss itself otherwise)."""
    while isinstance(loss, L2Regularised):
        loss = loss.loss
    return loss


def parameter_gradient(loss: "str | LossFn", params: Sequence[torch.Tensor]) -> torch.Tensor | None:
    """The gradient of an :class:`L2Regularised` penalty, flat in the order of ``params``; else None."""
    return loss.gradient(params) if isinstance(loss, L2Regularised) and loss.alpha > 0 else None


def parameter_curvature(loss: "str | LossFn", params: Sequence[torch.Tensor]) -> torch.Tensor | None:
    """The Hessian diagonal of an :class:`L2Regularised` penalty, flat in the order of ``params``; else None."""
    return loss.curvature(params) if isinstance(loss, L2Regularised) and loss.alpha > 0 else None


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
    """``f = loss_fn(out, batch)`` and ``df / d out`` (n,) without a graph.

    Built-in losses (also scaled) in closed form, saving a backward pass: ``df / d out_i = r_i / n``
    or ``w_i r_i / sum_j w_j``, with ``r_i`` = ``sigmoid(out_i) - y_i`` (bce), ``2 (out_i - y_i)``
    (mse), ``exp(eta_i) - y_i`` (poisson); other callables by autograd. An :class:`L2Regularised`
    loss adds its penalty to ``f`` only (:func:`parameter_gradient`).
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
    """Refuse targets a named loss cannot fit (bce: 0/1, poisson: ``>= 0``, all: finite), which would
    otherwise train silently to a meaningless model; a callable is not checked."""
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
    """``min_a L(a 1, data)``, the loss of the best constant output, which a trained model must beat
    (:func:`best_constant_output`'s second value)."""
    return best_constant_output(loss_fn, data, chunk_rows, iterations)[1]


@dataclass(frozen=True)
class TargetBlock:
    """The targets of a block of rows with their weights and exposure: all that a named loss of a constant
    output reads (:func:`best_constant_output`)."""

    y: torch.Tensor
    weights: torch.Tensor | None = None
    exposure: torch.Tensor | None = None

    def __len__(self) -> int:
        return int(self.y.shape[0])


def target_blocks(data: Any, chunk_rows: int | None) -> list[TargetBlock]:
    """``data``'s targets (weights, exposure) in consecutive blocks of ``chunk_rows`` rows (one block when None), as
    views: a memory-mapped data set's inputs stay on disk (its chunks as :func:`solvers.problem.row_chunks` gives
    them copied every input, 330 MB at 2,000,000 x 30 rows)."""
    n = len(data)
    step = n if chunk_rows is None else max(int(chunk_rows), 1)
    y = torch.as_tensor(data.y).reshape(-1)
    weights = row_weights(data)
    exposure = getattr(data, "exposure", None)
    exposure = None if exposure is None else torch.as_tensor(exposure).reshape(-1)
    return [TargetBlock(y[start:start + step], None if weights is None else weights[start:start + step],
                        None if exposure is None else exposure[start:start + step]) for start in range(0, n, step)]


def best_constant_output(loss_fn: LossFn, data: Any, chunk_rows: int | None = None,
                         iterations: int = 30) -> tuple[float, float]:
    """``(a*, L(a* 1, data))`` with ``a* = argmin_a L(a 1, data)``, the best constant output and its loss
    (bce: ``a = logit(mean y)``; mse: ``a = mean y``, the loss the variance of ``y``; poisson:
    ``a = log(sum y / sum e)``).

    Newton steps on ``a`` from 0 (convex for the built-in losses), each halved until it lowers the loss
    (a step is not capped: targets far from 0, e.g. raw amounts under mse, need a long first step), over all
    rows in chunks of ``chunk_rows``; an :class:`L2Regularised` loss without its penalty.
    """
    loss_fn = get_loss(unregularised(loss_fn))
    # a named loss of a constant reads the targets only: views of them, not copies of every row's inputs
    blocks = target_blocks(data, chunk_rows) if loss_name(loss_fn) is not None else list(row_chunks(data, chunk_rows))
    totals = [weight_total(b) for b in blocks]
    denominator = sum(totals)

    def value(a: torch.Tensor) -> torch.Tensor:
        return sum(loss_fn(a.expand(len(b)), b) * (t / denominator) for b, t in zip(blocks, totals))

    a = torch.zeros((), dtype=torch.float64)
    best, best_a = math.inf, 0.0
    for _ in range(int(iterations)):
        a_var = a.clone().requires_grad_(True)
        with torch.enable_grad():
            f = value(a_var)
            (g,) = torch.autograd.grad(f, a_var, create_graph=True)
            (h,) = torch.autograd.grad(g, a_var)
        f_value, g_value, h_value = float(f.detach()), float(g.detach()), float(h)
        if f_value < best:
            best, best_a = f_value, float(a)
        if not math.isfinite(f_value) or abs(g_value) < 1e-10:
            break
        move = -g_value / h_value if h_value > 1e-12 else -g_value
        with torch.no_grad():
            for _ in range(60):  # halve the Newton step until the loss falls (a log-link loss can overshoot)
                trial = float(value(a + move))
                if trial < f_value:
                    break
                move /= 2.0
            else:
                break  # no step lowers it: a minimum to rounding
        a = a + move
        if trial < best:
            best, best_a = trial, float(a)
    return best_a, best
