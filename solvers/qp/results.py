"""Results of the QP solvers: :class:`QPResult` (of :func:`solvers.qp.diagonal_qp`) and
:class:`RelaxedBounds` (of :func:`solvers.qp.least_violation_bounds`)."""

from __future__ import annotations

from dataclasses import dataclass

import torch

__all__ = ["QPResult", "RelaxedBounds"]


@dataclass(frozen=True)
class QPResult:
    """Solution of :func:`diagonal_qp`.

    Attributes
    ----------
    d, multipliers : torch.Tensor or None
        The step (p,) and signed multipliers ``y`` (m,) with ``g + h * d + J' y = 0`` (``y > 0``:
        upper side active), in the inputs' dtype; None unless optimal (``d`` also None when
        :func:`diagonal_qp`'s ``multipliers_only`` skipped it).
    active : torch.Tensor
        int8 (m,): ``+1``/``-1`` upper/lower side in the final working set (equalities by the sign
        of ``y``), 0 otherwise.
    status : str
        "optimal", "infeasible" (confirmed by a least-violation LP) or "numerical" (no solution
        passed the KKT check; never returned as a step).
    objective, kkt_residual, max_violation : float
        ``g'd + 1/2 d' diag(h) d``, ``||g + h * d + J' y||_inf`` and the largest row violation, in
        float64 (NaN unless optimal, or without ``d``).
    degenerate : bool
        The binding rows are linearly dependent in the ``H^{-1}`` metric: ``d`` is unique, ``y`` one
        valid choice.
    method : str
        "enumeration", "dual" or "osqp".
    iterations : int
        Candidates examined, working-set changes or OSQP iterations.
    """

    d: torch.Tensor | None
    multipliers: torch.Tensor | None
    active: torch.Tensor
    status: str
    objective: float
    kkt_residual: float
    max_violation: float
    degenerate: bool
    method: str
    iterations: int


@dataclass(frozen=True)
class RelaxedBounds:
    """Result of :func:`least_violation_bounds`: the normal step ``v`` (p,), ``w = J v``, the relaxed
    bounds ``lo = min(lo, J v)``, ``hi = max(hi, J v)`` (rounded outwards in a narrower dtype) and the
    least total ``violation`` (0 up to rounding when feasible)."""

    v: torch.Tensor
    w: torch.Tensor
    lo: torch.Tensor
    hi: torch.Tensor
    violation: float
