"""Fairness constraints: each satisfies solvers.problem.Constraint."""
from fairopt.constraints.base import BaseConstraint
from fairopt.constraints.dcov import DistanceCovariance
from fairopt.constraints.gedi import GeDI
from fairopt.constraints.covariance import Covariance
from fairopt.constraints.rates import DemographicParity, DisparateImpact, EqualImpact
from fairopt.constraints.conditional import EqualizedOdds, EqualOpportunity, FalsePositiveParity

__all__ = ["BaseConstraint", "DisparateImpact", "EqualImpact", "DemographicParity", "EqualOpportunity",
           "FalsePositiveParity", "EqualizedOdds", "Covariance", "GeDI", "DistanceCovariance"]
