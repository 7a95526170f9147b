"""The covariance constraint: ``|cov(out, s)|`` bounded, linear in the outputs."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from fairopt._validation import nonnegative_float
from fairopt.constraints.rows import FLOAT64, LinearRowsConstraint, Partition
from fairopt.surrogates import Linear
from solvers.problem import row_weights

__all__ = ["Covariance"]


class Covariance(LinearRowsConstraint):
    r"""Decision-boundary covariance (Zafar et al.; [SQP] sec 2.3): ``|c| <= bound`` per row.

    ``c = sum_i w_i (s_i - s_bar_w) out_i / sum_i w_i`` with ``s_bar_w`` the batch's weighted mean
    (``w_i = 1`` without ``batch.weights``); linear in ``out`` and the threshold cancels, so :meth:`exact`
    equals the smooth value. ``s`` is a binary attribute's 0/1 values (by [SQP] Thm 2.2 the row is
    ``n_0 n_1 / n^2 * (mean_1 out - mean_0 out)``), a continuous attribute's raw values, one indicator
    ``1{s = k}`` per level of a categorical one, or the indicators of intersection cells (with
    ``groups="marginal"``: each attribute's rows in turn).

    Parameters
    ----------
    sensitive : str or list of str
    bound : float
        ``>= 0``.
    groups : {"one_vs_rest", "marginal"}, default "one_vs_rest"
    """

    _prefix = "covariance"
    _allow_continuous = True

    def __init__(self, sensitive: str | Sequence[str], bound: float, groups: str = "one_vs_rest") -> None:
        self.bound = nonnegative_float(bound, "bound")
        super().__init__(sensitive, surrogate=Linear(), threshold=0.0, groups=groups,
                         groupings=("one_vs_rest", "marginal"))
        self._params = {"sensitive": sensitive, "bound": self.bound, "groups": groups}

    def _transform(self, t: torch.Tensor, exact: bool) -> torch.Tensor:
        return t  # linear: the exact value is the smooth value

    def _transform_and_slope(self, t: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return t.detach(), torch.ones_like(t)

    def realised(self, out: torch.Tensor, batch: Any) -> float:
        """The bounded measure on ``batch``: the largest absolute covariance of a row."""
        return float(self.exact(out, batch).abs().max())

    @staticmethod
    def _indicator_groups(part: Partition) -> list[int]:
        return [1] if part.n_groups == 2 else list(range(part.n_groups))

    def _build_rows(self) -> None:
        labels = []
        for part in self._partitions:
            labels += part.labels if part.continuous else [part.labels[g] for g in self._indicator_groups(part)]
        m = len(labels)
        self._set_bounds([-self.bound] * m, [self.bound] * m, [f"{self.name}:cov({lb},out)" for lb in labels])
        self._D = torch.eye(m, dtype=FLOAT64)

    def _build_operator(self, batch: Any) -> tuple[torch.Tensor, torch.Tensor]:
        blocks = [
            part.values(batch)[None, :] if part.continuous else part.indicators(batch)[self._indicator_groups(part)]
            for part in self._partitions
        ]
        values = torch.cat(blocks)
        weights = row_weights(batch)
        if weights is None:
            W = (values - values.mean(dim=1, keepdim=True)) / max(len(batch), 1)
            return W, self._D
        w = weights.to(device=values.device, dtype=FLOAT64)
        total = w.sum()
        total = torch.where(total > 0, total, torch.ones_like(total))
        centre = (values * w).sum(dim=1, keepdim=True) / total  # the weighted mean s_bar_w
        return (values - centre) * (w / total), self._D
