"""Small score models: one output per row (logit, prediction or log-rate).

The models of the [SQP] experiments (sec 4): linear, and feed-forward with one hidden layer of
32 or 256 Leaky ReLU units. They return the raw score ``out`` of shape ``(n,)``: the paper's
output sigmoid belongs to the loss (``BCEWithLogits``) and the threshold to the constraints.
"""

from __future__ import annotations

import contextlib
import numbers
from collections.abc import Iterator, Sequence

import torch
from torch import nn

from fairopt._validation import check_flag, check_interval, check_seed, positive_int

__all__ = ["linear", "mlp", "ACTIVATIONS"]

ACTIVATIONS: dict[str, type[nn.Module]] = {
    "leaky_relu": nn.LeakyReLU,
    "relu": nn.ReLU,
    "tanh": nn.Tanh,
}


class _SqueezeLast(nn.Module):
    """``(n, 1) -> (n,)``: drops the last dimension of the one-unit output layer."""

    #: Row ``i`` of the output depends on row ``i`` of the input alone (``solvers.strata``).
    rowwise = True
    #: A pure ``(n, 1) -> (n,)`` reshape of the output (``solvers.feedforward``).
    squeeze_output = True

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.squeeze(-1)


@contextlib.contextmanager
def _seeded(seed: int | None) -> Iterator[None]:
    """Initialise from ``seed`` without touching the global RNG; the global RNG if ``None``."""
    if seed is None:
        yield
        return
    seed = check_seed(seed, allow_negative=False)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(int(seed))
        yield


def linear(n_features: int, bias: bool = True, seed: int | None = None) -> nn.Module:
    """A linear score model ``out = X w + b``, shape ``(n,)`` ([SQP] sec 4).

    Parameters
    ----------
    n_features : int
        Number of input columns ``p >= 1``.
    bias : bool, default True
        Learn the intercept ``b``.
    seed : int or None, default None
        Initialise from this seed without changing the global RNG; ``None`` draws from the global RNG.

    Returns
    -------
    torch.nn.Module
    """
    p = positive_int(n_features, "n_features")
    bias = check_flag(bias, "bias")
    with _seeded(seed):
        return nn.Sequential(nn.Linear(p, 1, bias=bias), _SqueezeLast())


def mlp(
    n_features: int,
    hidden: Sequence[int] = (32,),
    activation: str = "leaky_relu",
    bias: bool = True,
    seed: int | None = None,
    dropout: float = 0.0,
) -> nn.Module:
    """A feed-forward network ``Linear -> act -> ... -> Linear(., 1)``, output shape ``(n,)`` ([SQP] sec 4).

    With ``dropout = p > 0`` every hidden activation is followed by ``nn.Dropout(p)`` (the networks
    of [DC] App. G.2/H.3), active in ``train()`` mode only.

    Parameters
    ----------
    n_features : int
        Number of input columns ``p >= 1``.
    hidden : sequence of int, default (32,)
        Widths of the hidden layers (at least one).
    activation : {"leaky_relu", "relu", "tanh"}, default "leaky_relu"
    bias : bool, default True
        Learn the intercepts of every layer.
    seed : int or None, default None
        As in :func:`linear`.
    dropout : float in [0, 1), default 0.0
        Dropout probability after each hidden activation; 0 adds no layer.

    Returns
    -------
    torch.nn.Module
    """
    p = positive_int(n_features, "n_features")
    dropout = check_interval(dropout, "dropout", 0.0, 1.0, closed="left")
    if isinstance(hidden, numbers.Integral) and not isinstance(hidden, bool):
        hidden = (hidden,)
    if isinstance(hidden, (str, bytes)) or not isinstance(hidden, Sequence) or len(hidden) == 0:
        raise ValueError(f"hidden: expected a non-empty sequence of layer widths, got {hidden!r}")
    widths = [positive_int(h, "hidden") for h in hidden]
    if activation not in ACTIVATIONS:
        raise ValueError(f"activation: expected one of {sorted(ACTIVATIONS)}, got {activation!r}")
    bias = check_flag(bias, "bias")
    layers: list[nn.Module] = []
    with _seeded(seed):
        for n_in, n_out in zip([p] + widths[:-1], widths):
            layers += [nn.Linear(n_in, n_out, bias=bias), ACTIVATIONS[activation]()]
            if dropout > 0:
                layers.append(nn.Dropout(dropout))
        layers += [nn.Linear(widths[-1], 1, bias=bias), _SqueezeLast()]
    return nn.Sequential(*layers)
