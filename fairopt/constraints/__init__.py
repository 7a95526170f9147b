"""Fairness constraints: each satisfies solvers.problem.Constraint."""
from fairopt.constraints.base import BaseConstraint
from fairopt.constraints.rates import Covariance, DemographicParity, DisparateImpact, EqualImpact

__all__ = ["BaseConstraint", "DisparateImpact", "EqualImpact", "DemographicParity", "Covariance"]
