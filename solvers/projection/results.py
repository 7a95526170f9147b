"""Results of a target projection: :class:`ProjectionResult`, :class:`ProjectionInfeasibleError`
and :class:`BackendResult`, what one backend returns to :func:`~solvers.projection.project_targets`."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

__all__ = ["BackendResult", "ProjectionInfeasibleError", "ProjectionResult"]


@dataclass(frozen=True)
class ProjectionResult:
    """Solution of :func:`project_targets`.

    Attributes
    ----------
    z : numpy.ndarray
        The projected targets ``(n,)``, float64; exactly 0.0/1.0 when ``binary``.
    aux : tuple of numpy.ndarray
        Auxiliary variables of each encoding, in the order of ``encodings`` (empty arrays
        for encodings without auxiliary variables).
    objective : float
        ``sum_r w_r L(z, r_r)`` evaluated at ``z`` in float64 (not the solver's number).
    terms : tuple of float
        The unweighted losses ``L(z, r_r)``, one per reference.
    status : str
        ``"optimal"`` (optimal within the relative gap ``mip_gap`` for MILPs, within the
        solver tolerances for QPs), ``"time_limit"`` (the best feasible point found before
        the time/work limit) or ``"suboptimal"`` (another limit, or an OSQP solution that
        is only accurate to its looser internal check).
    gap : float
        Relative MIP gap ``|primal - bound| / |primal|`` reported by the solver (0.0 for
        continuous problems).
    backend : str
        ``"highs"``, ``"osqp"`` or ``"gurobi"``: the backend that produced ``z``.
    seconds : float
        Wall time of the solve (model construction included).
    solver_status : str
        The backend's own status text (e.g. HiGHS ``"Optimal"``, OSQP ``"solved"``,
        Gurobi ``"OPTIMAL"``), with OSQP's polishing outcome.
    max_violation : float
        Largest row violation ``max(row - ub, lb - row, 0)`` over all encodings at
        ``(z, aux)``, after rounding a binary ``z``.
    """

    z: np.ndarray
    aux: tuple[np.ndarray, ...]
    objective: float
    terms: tuple[float, ...]
    status: str
    gap: float
    backend: str
    seconds: float
    solver_status: str
    max_violation: float

    @property
    def optimal(self) -> bool:
        """Whether the solver proved optimality (within its gap/tolerances)."""
        return self.status == "optimal"


class ProjectionInfeasibleError(RuntimeError):
    """The projection problem has no feasible point.

    Attributes
    ----------
    constraints : tuple of str
        Names of the encodings that are infeasible on their own, or, when each one is
        feasible alone, of all encodings (jointly infeasible).
    jointly : bool
        True when no single encoding is infeasible on its own.
    status : str
        The backend status that reported infeasibility.
    """

    def __init__(self, message: str, constraints: Sequence[str], jointly: bool, status: str) -> None:
        super().__init__(message)
        self.constraints = tuple(constraints)
        self.jointly = jointly
        self.status = status


@dataclass(frozen=True)
class BackendResult:
    """What a backend returns: the variables (None if no feasible point) and its status."""

    x: np.ndarray | None
    status: str  # "optimal" | "time_limit" | "suboptimal" | "infeasible" | "failed"
    solver_status: str
    gap: float
