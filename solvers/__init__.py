"""Fairness-agnostic optimisation engines (they see only the protocols in solvers.problem)."""

from solvers.derivatives import DerivativeOracle, Derivatives, LocalDerivatives
from solvers.history import FitResult, History
from solvers.outcome import (BoundWarning, ConstantPredictorWarning, DivergedWarning, NoProgressWarning,
                             NoUsableInputWarning, TrainingInstabilityWarning)
from solvers.lagrangian import LagrangianDual
from solvers.moving_targets import MovingTargets
from solvers.optimizers import AdaHessian
from solvers.penalty import Penalty, penalised_loss
from solvers.projection import ProjectionInfeasibleError, ProjectionResult, gurobi_available, project_targets
from solvers.problem import (
    Batch,
    Constraint,
    ConstraintSet,
    Dataset,
    LinearEncoding,
    row_violations,
    violation,
)
from solvers.qp import LeastViolationWarning, QPResult, diagonal_qp, least_violation_bounds
from solvers.sqp import DistributedSQP, SQPWarning, StochasticSQP

__all__ = [
    "AdaHessian",
    "BoundWarning",
    "ConstantPredictorWarning",
    "DivergedWarning",
    "Batch",
    "Constraint",
    "ConstraintSet",
    "Dataset",
    "DerivativeOracle",
    "Derivatives",
    "DistributedSQP",
    "FitResult",
    "History",
    "LocalDerivatives",
    "NoProgressWarning",
    "NoUsableInputWarning",
    "TrainingInstabilityWarning",
    "LagrangianDual",
    "LeastViolationWarning",
    "LinearEncoding",
    "MovingTargets",
    "Penalty",
    "ProjectionInfeasibleError",
    "ProjectionResult",
    "QPResult",
    "SQPWarning",
    "StochasticSQP",
    "diagonal_qp",
    "gurobi_available",
    "least_violation_bounds",
    "penalised_loss",
    "project_targets",
    "row_violations",
    "violation",
]
