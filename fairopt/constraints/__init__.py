"""Fairness constraints: each satisfies solvers.problem.Constraint."""
from fairopt.constraints.base import BaseConstraint

__all__ = ["BaseConstraint"]
