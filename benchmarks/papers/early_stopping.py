"""Early stopping for the engines' per-step callbacks: stop when a held-out objective has
stopped improving, and restore the best epoch's weights (the paper experiments' networks)."""

from __future__ import annotations

import copy
import math
from collections.abc import Mapping
from typing import Any, Callable

import torch

from solvers.problem import eval_mode

__all__ = ["EarlyStopping"]


class EarlyStopping:
    """Engine callback: stop when a held-out objective has not improved for ``patience`` epochs.

    Called after every optimiser step (``cb(engine, record)``); at the end of each epoch
    (every ``steps_per_epoch`` steps) it evaluates ``objective()`` with the model in eval
    mode (dropout off), keeps a copy of the weights of the best epoch and returns True
    (stop) after ``patience`` epochs without a strict improvement. :meth:`restore` loads the
    best weights back.
    """

    def __init__(self, model: torch.nn.Module, objective: Callable[[], float], steps_per_epoch: int,
                 patience: int) -> None:
        if steps_per_epoch < 1 or patience < 1:
            raise ValueError(f"steps_per_epoch, patience: expected positive integers, got {steps_per_epoch}, "
                             f"{patience}")
        self.model, self.objective = model, objective
        self.steps_per_epoch, self.patience = int(steps_per_epoch), int(patience)
        self.best, self.best_epoch, self.wait = math.inf, 0, 0
        self.values: list[float] = []
        self._state: dict | None = None

    def __call__(self, engine: Any, record: Mapping[str, Any]) -> bool:
        if (int(record["iteration"]) + 1) % self.steps_per_epoch:
            return False
        with eval_mode(self.model):
            value = float(self.objective())
        self.values.append(value)
        if value < self.best:
            self.best, self.best_epoch, self.wait = value, len(self.values), 0
            self._state = copy.deepcopy(self.model.state_dict())
        else:
            self.wait += 1
        return self.wait >= self.patience

    def restore(self) -> None:
        """Load the best epoch's weights (nothing to do before the first epoch ended)."""
        if self._state is not None:
            self.model.load_state_dict(self._state)
