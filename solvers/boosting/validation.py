"""A boosting fit's criterion on validation rows, round by round: :class:`ValidationLoss`.

A boosting fit can be given rows it does not train on. After every round the booster's own
running scores ``F`` of those rows (LightGBM's validation score updater: the starting constant
plus every tree so far, updated by one tree per round, not recomputed) give the criterion
``f_val(k)`` of the model with ``k`` trees: the loss of :mod:`solvers.boosting.objective`
(``metric="loss"``) or, for the binary cross-entropy, the error rate of the hard labels
``F > 0`` (``metric="error"``: ``sum_i w_i [(F_i > 0) != y_i] / sum_i w_i``), row weights
included. :class:`solvers.boosting.BoostedSQP` offers ``f_val(k)`` instead of the training loss
when it compares its candidate rounds, so the returned round is the one with the lowest
criterion among those that meet every bound on the training rows, and stops once that round
has not changed for ``early_stopping_rounds`` rounds.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from solvers.boosting.objective import row_derivatives
from solvers.problem import row_weights

__all__ = ["VALIDATION_METRICS", "ValidationLoss", "running_scores"]

#: The criteria by name.
VALIDATION_METRICS: tuple[str, ...] = ("loss", "error")


def running_scores(evaluate: Any) -> np.ndarray:
    """The raw scores LightGBM keeps for a data set of a booster (the starting constant plus every
    tree so far, updated tree by tree), read through ``evaluate``, the booster's ``eval_train`` or
    ``eval_valid``: its custom-metric hook receives them. float64 (n,), a copy."""
    seen: list[np.ndarray] = []

    def capture(preds: np.ndarray, _: Any) -> tuple[str, float, bool]:
        seen.append(np.asarray(preds, dtype=np.float64).reshape(-1))
        return "scores", 0.0, False

    evaluate(feval=capture)
    return seen[-1].copy()


class ValidationLoss:
    """``f_val(k)`` for ``k = 0, 1, ...`` trees on the rows of ``data`` (module docstring).

    Parameters
    ----------
    loss : {"bce", "mse"}
        The loss by name.
    data : Dataset
        The validation rows (``X``, ``y``, optional ``weights``).
    init : float
        The fit's starting constant (the scores of ``k = 0`` trees).
    metric : {"loss", "error"}, default "loss"
        The criterion (module docstring).

    Raises
    ------
    ValueError
        An unknown ``metric``, or ``"error"`` with a loss other than the binary cross-entropy.
    """

    NAME = "fairopt_validation"

    def __init__(self, loss: str, data: Any, init: float, metric: str = "loss") -> None:
        if metric not in VALIDATION_METRICS:
            raise ValueError(f"validation_metric: expected one of {list(VALIDATION_METRICS)}, got {metric!r}")
        if metric == "error" and loss != "bce":
            raise ValueError(f"validation_metric: 'error' counts the hard labels of the binary cross-entropy, "
                             f"not of {loss!r}")
        self.loss, self.data, self.init, self.metric = loss, data, float(init), metric
        X = data.X.detach().cpu().numpy() if isinstance(data.X, torch.Tensor) else np.asarray(data.X)
        self.X = np.ascontiguousarray(X, dtype=np.float64)
        self.losses: list[float] = [self._loss(torch.full((self.X.shape[0],), self.init, dtype=torch.float64))]

    def _loss(self, scores: torch.Tensor) -> float:
        if self.metric == "loss":
            return float(row_derivatives(self.loss, scores, self.data).f)
        y = torch.as_tensor(self.data.y).detach().cpu().reshape(-1) > 0.5
        wrong = ((scores > 0) != y).to(torch.float64)
        weights = row_weights(self.data, wrong)
        return float(wrong.mean()) if weights is None else float((weights * wrong).sum() / weights.sum())

    def attach(self, booster: Any, train_set: Any) -> None:
        """Register the rows with ``booster`` (LightGBM keeps their scores from then on)."""
        import lightgbm

        y = torch.as_tensor(self.data.y).detach().cpu().double().numpy().reshape(-1)
        valid = lightgbm.Dataset(self.X, label=y, init_score=np.full(self.X.shape[0], self.init), reference=train_set)
        booster.add_valid(valid, self.NAME)

    def update(self, booster: Any) -> float:
        """Append and return ``f_val`` of the booster's current trees (call once after every round)."""
        self.losses.append(self._loss(torch.from_numpy(running_scores(booster.eval_valid))))
        return self.losses[-1]

    def at(self, trees: int) -> float:
        """``f_val`` of the first ``trees`` trees (a round already :meth:`update` d)."""
        return self.losses[trees]

    def shifted(self, booster: Any, trees: int, shift: float) -> float:
        """``f_val`` of the first ``trees`` trees plus a constant ``shift`` of the scores (the end-game's)."""
        raw = (booster.predict(self.X, raw_score=True, num_iteration=trees) if trees > 0
               else np.zeros(self.X.shape[0]))
        scores = torch.from_numpy(np.asarray(raw + self.init + shift, dtype=np.float64).reshape(-1))
        return self._loss(scores)

    def best(self) -> int:
        """The number of trees with the lowest ``f_val`` so far (the first of ties)."""
        return int(np.argmin(self.losses))
