"""Base class for fairness constraints (the :class:`solvers.problem.Constraint` protocol)."""

from __future__ import annotations

from typing import Any

import torch

from solvers.problem import LinearEncoding, row_violations

__all__ = ["BaseConstraint"]


class BaseConstraint:
    """Common machinery: bounds as float64 tensors, row names, violation, repr.

    Subclasses set ``self.lower``/``self.upper`` (shape (m,)) in ``__init__`` or in
    :meth:`setup` (when the number of rows depends on the data, e.g. categories), and
    implement ``__call__`` (smooth surrogate rows) and :meth:`exact` (hard-prediction rows).
    """

    name: str = "constraint"
    lower: torch.Tensor
    upper: torch.Tensor
    row_names: list[str] | None = None

    def setup(self, data: Any) -> None:
        """Prepare data-dependent quantities from the training data (no-op by default)."""

    def __call__(self, out: torch.Tensor, batch: Any) -> torch.Tensor:  # pragma: no cover
        raise NotImplementedError

    def exact(self, out: torch.Tensor, batch: Any) -> torch.Tensor:  # pragma: no cover
        raise NotImplementedError

    def target_encoding(self, batch: Any) -> LinearEncoding | None:
        """No linear target encoding unless a subclass provides one."""
        return None

    @property
    def n_rows(self) -> int:
        return int(self.lower.numel())

    def _set_bounds(self, lower: Any, upper: Any, row_names: list[str] | None = None) -> None:
        self.lower = torch.as_tensor(lower, dtype=torch.float64).reshape(-1)
        self.upper = torch.as_tensor(upper, dtype=torch.float64).reshape(-1)
        if self.lower.shape != self.upper.shape:
            raise ValueError(f"lower/upper: shapes differ ({self.lower.shape} vs {self.upper.shape})")
        self.row_names = row_names

    def violation(self, out: torch.Tensor, batch: Any, exact: bool = True) -> torch.Tensor:
        """Per-row violation of the exact (default) or surrogate values."""
        c = self.exact(out, batch) if exact else self(out, batch)
        return row_violations(c, self.lower, self.upper)

    def __repr__(self) -> str:
        params = ", ".join(f"{k}={v!r}" for k, v in self.get_params().items())
        return f"{type(self).__name__}({params})"

    def get_params(self) -> dict:
        """Constructor parameters (for repr, specs and persistence)."""
        return dict(getattr(self, "_params", {}))
