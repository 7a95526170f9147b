"""Fairness-agnostic optimisation engines (they see only the protocols in solvers.problem)."""

from solvers.problem import (
    Batch,
    Constraint,
    ConstraintSet,
    Dataset,
    LinearEncoding,
    row_violations,
    violation,
)

__all__ = [
    "Batch",
    "Constraint",
    "ConstraintSet",
    "Dataset",
    "LinearEncoding",
    "row_violations",
    "violation",
]
