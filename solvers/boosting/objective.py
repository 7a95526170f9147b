"""Per-row derivatives of the boosting losses in the tree learner's units, and the starting constant.

A tree learner fits leaf values ``-sum_leaf grad / sum_leaf hess`` from per-row first and second
derivatives of a per-row loss (LightGBM's ``grad``/``hess``). The engines' losses are weighted
MEANS ``f(F) = sum_i w_i l(F_i, y_i) / W`` (:mod:`solvers.losses`, ``W = sum_i w_i``, or ``n``
unweighted); their derivatives in the scores ``F`` are those of the per-row losses times
``w_i / W``. The tree learner gets them times ``W / kappa``:

- ``"bce"``: ``l = log(1 + e^F) - y F``, ``grad_i = w_i (sigmoid(F_i) - y_i)``,
  ``hess_i = w_i sigmoid(F_i) (1 - sigmoid(F_i))`` (``kappa = 1``);
- ``"mse"``: ``l = (F - y)^2``, ``grad_i = w_i (F_i - y_i)``, ``hess_i = w_i`` (``kappa = 2``: the
  derivatives of ``(F - y)^2 / 2``),

which are exactly LightGBM's ``binary`` and ``regression`` objectives (with row weights ``w_i``),
i.e. :func:`solvers.losses.value_and_gradient`'s ``df/dF`` times ``W / kappa``,
so that an unconstrained fit grows LightGBM's own trees. A common positive factor changes
neither a leaf value nor the step and multipliers' direction of the SQP subproblem.
"""

from __future__ import annotations

import math
from typing import Any, NamedTuple

import torch
import torch.nn.functional as F

from solvers.problem import row_weights, weighted_mean

__all__ = ["BOOSTING_LOSSES", "RowDerivatives", "row_derivatives", "starting_constant"]

#: The named losses a boosting fit takes, with ``kappa`` of the module docstring.
BOOSTING_LOSSES: dict[str, float] = {"bce": 1.0, "mse": 2.0}


class RowDerivatives(NamedTuple):
    """The loss ``f`` (weighted mean), ``grad`` and ``hess`` (n,) float64 in the tree learner's units."""

    f: float
    grad: torch.Tensor
    hess: torch.Tensor


def row_derivatives(loss: str, scores: torch.Tensor, data: Any, targets: torch.Tensor | None = None) -> RowDerivatives:
    """``f``, ``grad`` and ``hess`` of the named ``loss`` at the scores ``scores`` (n,) on ``data``
    (module docstring), in closed form, float64: ``f`` is the weighted mean of ``softplus(F) - y F``
    (``"bce"``) or of ``(F - y)^2`` (``"mse"``), the mean losses of :mod:`solvers.losses`; one pass
    of ``sigmoid`` gives both ``grad`` and ``hess`` (a boosting round evaluates them on every row).
    ``targets``: ``data.y`` as float64 (n,) on the scores' device, when the caller keeps it (a fit's
    rounds convert it once)."""
    scores = scores.detach().to(torch.float64)
    y = (torch.as_tensor(data.y).detach().to(device=scores.device, dtype=torch.float64).reshape(-1)
         if targets is None else targets)
    weights = row_weights(data, scores)
    if loss == "bce":
        p = torch.sigmoid(scores)
        per_row, grad, hess = F.softplus(scores) - y * scores, p - y, p * (1.0 - p)
    elif loss == "mse":
        residual = scores - y
        per_row, grad, hess = residual * residual, residual, torch.ones_like(scores)
    else:
        raise ValueError(f"loss: expected one of {sorted(BOOSTING_LOSSES)}, got {loss!r}")
    if weights is None:
        return RowDerivatives(float(per_row.mean()), grad, hess)
    return RowDerivatives(float(weighted_mean(per_row, weights)), weights * grad, weights * hess)


def starting_constant(loss: str, data: Any) -> float:
    """The best constant score: ``logit`` of the weighted mean of ``y`` for ``"bce"`` (clipped to
    ``[1e-12, 1 - 1e-12]``), the weighted mean of ``y`` for ``"mse"`` (LightGBM's
    ``boost_from_average``)."""
    y = torch.as_tensor(data.y).detach().to(torch.float64).reshape(-1)
    weights = row_weights(data, y)
    mean = float(y.mean()) if weights is None else float((weights * y).sum() / weights.sum())
    if loss == "bce":
        p = min(max(mean, 1e-12), 1.0 - 1e-12)
        return math.log(p / (1.0 - p))
    return mean
