"""HGR maximal correlation estimated by a discretised Gaussian KDE (Mary, Calauzenes and El Karoui 2019).

``HGR(x, y) = sup_{f, g} corr(f(x), g(y))`` is the second largest singular value of
``Q(a, b) = p(a, b) / sqrt(p(a) p(b))`` (Witsenhausen 1975); ``p`` is a Gaussian KDE on a grid.
"""

from __future__ import annotations

import logging
import math
from typing import Any

import torch

from fairopt._validation import as_1d_tensor, check_same_length

__all__ = ["hgr_kde", "kde_bandwidth", "kde_grid_size"]

logger = logging.getLogger(__name__)

_GRID_HALF_WIDTH = 2.5
_MAX_BINS = 50
_DIMENSION = 2


def kde_bandwidth(n: int, d: int = _DIMENSION) -> float:
    """Scott's rule bandwidth ``h = (n (d + 2) / 4) ** (-1 / (d + 4))`` (``n**(-1/6)`` for d=2)."""
    return (n * (d + 2) / 4.0) ** (-1.0 / (d + 4))


def kde_grid_size(bandwidth: float) -> int:
    """Grid points per axis, ``int(min(50, 5 / h))`` (at least 2)."""
    return max(2, int(min(_MAX_BINS, 5.0 / bandwidth)))


def _standardise_unbiased(t: torch.Tensor) -> torch.Tensor:
    """``(t - mean) / sd`` with ``ddof=1`` (as Mary et al.'s code); a constant vector is only centred."""
    centred = t - t.mean()
    sd = t.std(correction=1)
    return centred / sd if float(sd.detach()) > 0.0 else centred


def _gaussian_weights(u: torch.Tensor, grid: torch.Tensor, bandwidth: float) -> torch.Tensor:
    """``K[i, a] = exp(-(u_i - g_a)^2 / (2 h^2))`` (n, bins)."""
    return torch.exp(-0.5 * ((u[:, None] - grid[None, :]) / bandwidth) ** 2)


def hgr_kde(x: Any, y: Any, damping: float = 1e-10) -> Any:
    """HGR coefficient estimated with a Gaussian KDE on a grid [Mary et al. 2019]::

        u, v  = standardised x, y              (mean 0, unbiased sd 1)
        h     = (n (d + 2) / 4) ** (-1 / (d + 4)),   B = int(min(50, 5 / h)),   d = 2
        g     = B equally spaced points on [-2.5, 2.5]
        p(a, b) = 1/(n 2 pi h^2) sum_i exp(-((u_i - g_a)^2 + (v_i - g_b)^2) / (2 h^2)) + damping
        P     = p / sum(p),   Q = P / sqrt(P_x P_y'),   HGR = sigma_2(Q)

    The kernel is separable, so ``p = Kx' Ky / (n 2 pi h^2)``: O(n B). ``damping`` keeps empty cells
    positive (as the authors' code) so that ``Q`` is defined. In [0, 1], deterministic; torch input gives a
    result differentiable in ``x`` and ``y``.

    Parameters
    ----------
    x, y : array-like or torch.Tensor, shape (n,)
        Two numeric samples (n >= 2).
    damping : float
        Added to every grid density value before normalisation (> 0).
    """
    if not (isinstance(damping, (int, float)) and damping > 0 and math.isfinite(damping)):
        raise ValueError(f"damping: expected a positive finite number, got {damping!r}")
    xt = as_1d_tensor(x, "x")
    yt = as_1d_tensor(y, "y")
    n = check_same_length(x=xt, y=yt)
    if n < 2:
        raise ValueError(f"x: need at least 2 rows, got {n}")
    u = _standardise_unbiased(xt.to(torch.float64))
    v = _standardise_unbiased(yt.to(torch.float64))
    h = kde_bandwidth(n)
    bins = kde_grid_size(h)
    grid = torch.linspace(-_GRID_HALF_WIDTH, _GRID_HALF_WIDTH, bins, dtype=torch.float64)
    density = _gaussian_weights(u, grid, h).T @ _gaussian_weights(v, grid, h) / (n * 2.0 * math.pi * h**2)
    joint = density + damping
    joint = joint / joint.sum()
    q = joint / torch.sqrt(joint.sum(dim=1, keepdim=True) * joint.sum(dim=0, keepdim=True))
    value = torch.linalg.svdvals(q)[1]
    logger.debug("hgr_kde: n=%d bandwidth=%.4g bins=%d value=%.6g", n, h, bins, float(value.detach()))
    if isinstance(y, torch.Tensor) or isinstance(x, torch.Tensor):
        ref = y if isinstance(y, torch.Tensor) else x
        return value.to(ref.dtype if ref.is_floating_point() else torch.float64)
    return float(value)
