"""Fairness-agnostic optimisation engines (they see only the protocols in solvers.problem)."""

from solvers.history import FitResult, History
from solvers.problem import (
    Batch,
    Constraint,
    ConstraintSet,
    Dataset,
    LinearEncoding,
    row_violations,
    violation,
)
from solvers.qp import QPResult, diagonal_qp, least_violation_bounds
from solvers.sqp import SQPWarning, StochasticSQP

__all__ = [
    "Batch",
    "Constraint",
    "ConstraintSet",
    "Dataset",
    "FitResult",
    "History",
    "LinearEncoding",
    "QPResult",
    "SQPWarning",
    "StochasticSQP",
    "diagonal_qp",
    "least_violation_bounds",
    "row_violations",
    "violation",
]
