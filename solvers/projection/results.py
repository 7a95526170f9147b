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
        The targets (n,), float64; exactly 0.0/1.0 when binary.
    aux : tuple of numpy.ndarray
        Each encoding's auxiliary variables, in order.
    objective : float
        ``sum_r w_r L(z, r_r)`` recomputed in float64; ``terms``: the unweighted ``L(z, r_r)``.
    status : str
        "optimal" (within ``mip_gap`` or the solver tolerances), "time_limit" (the best feasible
        point found) or "suboptimal".
    gap : float
        The solver's relative MIP gap (0.0 for continuous problems).
    backend, solver_status : str
        The backend that produced ``z`` and its own status text.
    seconds : float
        Wall time of the solve, model construction included.
    max_violation : float
        Largest encoding-row violation at ``(z, aux)``, after rounding a binary ``z``.
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
    """The projection problem has no feasible point: ``constraints`` names the encodings infeasible on
    their own, or all of them when only ``jointly`` infeasible; ``status`` is the backend's."""

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
