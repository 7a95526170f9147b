r"""The Gauss-Newton diagonal of the training loss: a curvature metric for the SQP subproblem.

For a loss ``f(w) = L(out(w))`` whose second derivative in each row's output is ``l''_i`` (the
loss separable over rows, as every built-in loss is), the Gauss-Newton matrix is
``G = J_out' diag(l'') J_out`` with ``J_out = d out / d w`` (n, p); its diagonal

``G_jj = sum_i l''_i (d out_i / d w_j)^2``

is the loss curvature along each parameter, without the second derivatives of the network
(positive semi-definite for a convex loss in the outputs). For a linear model and binary
cross-entropy it is ``sum_i p_i (1 - p_i) x_ij^2 / n``: a one-hot column of a rare level has
curvature in proportion to its frequency, so a metric ``h_j = G_jj + mu`` steps each coefficient by
about its own Newton step, where a constant metric moves a rare level's coefficient by a fraction
of its distance per iteration. :func:`gauss_newton_diagonal` computes it for the feed-forward
networks of :mod:`solvers.feedforward` (one forward pass and one product per layer,
:meth:`~solvers.feedforward.FeedForwardTrace.squared_pullback`) in blocks of ``chunk_rows``, and for
such a network followed by a fixed affine output ``out = a * net + b`` (a parameter-free last module
that declares ``affine_output = True`` and holds ``scale`` and ``shift``, as a regressor's output in
the units of ``y``): ``d out / d w = a * d net / d w``, so ``G = a^2 sum_i l''_i (d net_i / d w)^2``
with ``l''`` taken at ``out``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Sequence

import torch
from torch import nn

from solvers.feedforward import FeedForward
from solvers.losses import LossFn, parameter_curvature
from solvers.problem import row_chunks, row_outputs, weight_total

__all__ = ["CurvatureModel", "SPREAD_ITERATIONS", "SPREAD_ROWS", "SPREAD_RTOL", "curvature_model",
           "gauss_newton_diagonal", "metric_spread", "output_curvature"]

#: Most rows :func:`metric_spread` reads (a seeded sample of them on larger data).
SPREAD_ROWS = 20_000
#: Most power iterations of :func:`metric_spread`.
SPREAD_ITERATIONS = 100
#: Relative change of the Rayleigh quotient at which :func:`metric_spread` stops.
SPREAD_RTOL = 1e-4


@dataclass(frozen=True)
class CurvatureModel:
    """A model whose Gauss-Newton diagonal :func:`gauss_newton_diagonal` computes: the feed-forward
    ``network`` and the fixed affine output ``out = scale * network + shift`` after it (1 and 0 for
    none)."""

    network: FeedForward
    scale: float = 1.0
    shift: float = 0.0


def curvature_model(model: nn.Module, params: list[torch.Tensor]) -> CurvatureModel | None:
    """``model`` over ``params`` as a :class:`CurvatureModel` (module docstring), or None."""
    network = FeedForward.recognise(model, params)
    if network is not None:
        return CurvatureModel(network)
    last = model[-1] if isinstance(model, nn.Sequential) and len(model) > 1 else None
    if last is None or getattr(last, "affine_output", False) is not True or any(True for _ in last.parameters()):
        return None
    network = FeedForward.recognise(nn.Sequential(*list(model)[:-1]), params)
    if network is None:
        return None
    return CurvatureModel(network, float(last.scale), float(last.shift))


def output_curvature(loss_fn: LossFn, out: torch.Tensor, batch: Any) -> torch.Tensor:
    """``d^2 loss / d out_i^2`` per row (n,), by autograd (a Hessian-vector product with ones: the
    diagonal itself when the loss is separable over rows), clipped at 0. Binary cross-entropy:
    ``p_i (1 - p_i) / n``; squared error: ``2 / n``; Poisson: ``exp(eta_i) / n`` (weighted losses: the
    row's share of the weights instead of ``1 / n``)."""
    leaf = out.detach().requires_grad_(True)
    with torch.enable_grad():
        value = loss_fn(leaf, batch)
        (first,) = torch.autograd.grad(value, leaf, create_graph=True)
        if not first.requires_grad:  # linear in the outputs: no curvature
            return torch.zeros_like(leaf).detach()
        (second,) = torch.autograd.grad(first.sum(), leaf)
    return second.detach().clamp(min=0.0)


def gauss_newton_diagonal(model: CurvatureModel, loss_fn: LossFn, data: Any,
                          chunk_rows: int | None = None,
                          params: Sequence[torch.Tensor] | None = None) -> torch.Tensor:
    """``G_jj = sum_i l''_i (d out_i / d w_j)^2`` (p,) of the mean loss over ``data`` for a
    :class:`CurvatureModel` (module docstring), in the order of the parameters its network was
    recognised with. Blocks of ``chunk_rows`` rows (all at once for None) each add their curvature
    scaled by their share of the rows (or weights), so the sum is the curvature of the mean over
    ``data``. With ``params`` (those the network was recognised with), a loss with an L2 penalty
    on the weights (:class:`solvers.losses.L2Regularised`) adds the penalty's own curvature, ``alpha``
    on each penalised weight (:func:`solvers.losses.parameter_curvature`)."""
    total = weight_total(data)
    result = None
    for block in row_chunks(data, chunk_rows):
        trace = model.network.trace(block.X)
        out = trace.out * model.scale + model.shift
        share = model.scale ** 2 * weight_total(block) / total
        part = trace.squared_pullback(output_curvature(loss_fn, out, block) * share)
        result = part if result is None else result + part
    penalty = parameter_curvature(loss_fn, params) if params is not None else None
    return result if penalty is None else result + penalty.to(result.dtype)


def metric_spread(model: nn.Module, params: Sequence[torch.Tensor], curvature: CurvatureModel, loss_fn: LossFn,
                  data: Any, shift: float, chunk_rows: int | None = None, seed: int = 0,
                  constant: bool = False) -> float:
    r"""How far the Gauss-Newton matrix reaches beyond its diagonal metric: the largest eigenvalue

    .. math:: \lambda = \lambda_{\max}\big(M^{-1/2} G M^{-1/2}\big), \qquad M = \operatorname{diag}(G) + \mu,

    of ``G = J_out' diag(l'') J_out`` (module docstring; an L2 penalty's curvature included) at the
    current parameters, ``mu = shift``. A step ``-beta M^{-1} g`` of the diagonal metric moves the
    loss's quadratic model along that eigenvector by ``beta * lambda`` times the Newton step there:
    correlated inputs, whose coupling the diagonal leaves out, make ``lambda`` large (about the number
    of inputs that move together), and the steps overshoot and oscillate along their common
    direction. ``lambda >= 1`` whenever ``G`` dominates ``mu`` on some coordinate; an orthogonal
    design gives about 1. With ``constant``, ``M = shift`` on every coordinate instead: the metric
    of a gradient-scaled ("adam") fit at its first steps, ``sqrt(mu)`` before the second moments
    have grown, whose steps are ``beta / M`` times the gradient.

    Power iteration (at most :data:`SPREAD_ITERATIONS`, until the Rayleigh quotient changes by less
    than :data:`SPREAD_RTOL` of itself) from a seeded start, on at most :data:`SPREAD_ROWS` rows
    (a seeded sample beyond; ``G`` is a mean over rows, so a sample estimates it). The products
    ``G v`` go through autograd on ``model``: ``J_out v`` as the derivative of ``c' J_out v`` in
    ``c`` (a double backward), then ``J_out' (l'' * J_out v)``. The result is a lower bound of
    ``lambda`` that converges to it; it reads no random state but its own generator.

    Parameters
    ----------
    model : nn.Module
        ``out = model(X)``, one output per row, over the trained ``params``.
    params : sequence of tensors
        The trained parameters, in the order ``curvature`` was recognised with.
    curvature : CurvatureModel
        ``model`` as :func:`curvature_model` recognised it (for the diagonal).
    loss_fn : LossFn
        The training loss (its ``l''`` per row, :func:`output_curvature`).
    data : Dataset
        The training rows.
    shift : float
        ``mu`` of the metric (with ``constant``, the metric itself).
    chunk_rows : int, optional
        Rows per block of the diagonal's pass (:func:`gauss_newton_diagonal`).
    seed : int
        Seed of the row sample and of the start vector.
    constant : bool, default False
        ``M = shift`` instead of ``diag(G) + shift``.
    """
    generator = torch.Generator().manual_seed(int(seed))
    n = len(data)
    sample = data
    if n > SPREAD_ROWS:  # a seeded sample: G is a mean over rows
        sample = data.subset(torch.randperm(n, generator=generator)[:SPREAD_ROWS].sort().values)
    params = list(params)
    sizes = [p.numel() for p in params]
    host = {"device": "cpu", "dtype": torch.float64}  # the iteration's vectors; the products on the model's device
    if constant:
        metric = torch.full((sum(sizes),), float(shift), **host)
    else:
        metric = gauss_newton_diagonal(curvature, loss_fn, sample, chunk_rows, params).to(**host) + float(shift)
    scale = metric.clamp(min=torch.finfo(torch.float64).tiny).rsqrt()
    penalty = parameter_curvature(loss_fn, params)
    penalty = None if penalty is None else penalty.to(**host)
    with torch.enable_grad():
        X = sample.X
        out = row_outputs(model(X), X.shape[0])
        weight = output_curvature(loss_fn, out.detach(), sample).to(out.dtype)
        probe = torch.zeros_like(out, requires_grad=True)
        pulled = torch.autograd.grad(out, params, grad_outputs=probe, create_graph=True)

        def product(v: torch.Tensor) -> torch.Tensor:
            """``G v`` (float64, flat)."""
            pieces = [part.reshape(p.shape).to(device=p.device, dtype=p.dtype)
                      for part, p in zip(torch.split(v, sizes), params)]
            inner = sum((a * b).sum() for a, b in zip(pulled, pieces))
            (pushed,) = torch.autograd.grad(inner, probe, retain_graph=True)  # J_out v
            back = torch.autograd.grad(out, params, grad_outputs=weight * pushed.detach(), retain_graph=True)
            result = torch.cat([b.reshape(-1) for b in back]).to(**host)
            return result if penalty is None else result + penalty * v

        x = torch.randn(sum(sizes), generator=generator, dtype=torch.float64)
        x = x / x.norm()
        value = 0.0
        for _ in range(SPREAD_ITERATIONS):
            y = scale * product(scale * x)
            new = float(x @ y)
            norm = float(y.norm())
            if norm == 0.0 or not math.isfinite(norm):
                return max(new, 0.0) if math.isfinite(new) else 0.0
            x = y / norm
            if abs(new - value) <= SPREAD_RTOL * abs(new):
                return new
            value = new
    return value
