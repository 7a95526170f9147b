"""Mean training losses on a model output ``out`` (one value per row).

A loss is a callable ``loss(out, batch) -> scalar tensor``; the engines accept a name
(``"bce"``, ``"mse"``, ``"poisson"``) or such a callable.
"""

from __future__ import annotations

from typing import Any, Callable

import torch
import torch.nn.functional as F

__all__ = ["LossFn", "bce_loss", "mse_loss", "poisson_loss", "get_loss"]

LossFn = Callable[[torch.Tensor, Any], torch.Tensor]


def bce_loss(out: torch.Tensor, batch: Any) -> torch.Tensor:
    """Binary cross-entropy on logits: ``mean(log(1 + e^out) - y * out)``."""
    return F.binary_cross_entropy_with_logits(out, batch.y.to(out.dtype))


def mse_loss(out: torch.Tensor, batch: Any) -> torch.Tensor:
    """Mean squared error ``mean((out - y)^2)``."""
    return torch.mean((out - batch.y.to(out.dtype)) ** 2)


def poisson_loss(out: torch.Tensor, batch: Any) -> torch.Tensor:
    """Poisson negative log-likelihood (up to a constant) on a log-rate ``out``.

    With exposure ``e`` (``batch.exposure``, or 1) as an offset, ``eta = out + log e`` and
    ``loss = mean(exp(eta) - y * eta)``.
    """
    eta = out
    exposure = getattr(batch, "exposure", None)
    if exposure is not None:
        eta = out + torch.log(exposure.to(out.dtype))
    return torch.mean(torch.exp(eta) - batch.y.to(out.dtype) * eta)


_LOSSES: dict[str, LossFn] = {"bce": bce_loss, "mse": mse_loss, "poisson": poisson_loss}


def get_loss(loss: str | LossFn) -> LossFn:
    """Resolve a loss name (``"bce"``, ``"mse"``, ``"poisson"``) or pass a callable through."""
    if callable(loss):
        return loss
    if isinstance(loss, str) and loss in _LOSSES:
        return _LOSSES[loss]
    raise ValueError(f"loss: expected one of {sorted(_LOSSES)} or a callable(out, batch), got {loss!r}")
