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
    d : torch.Tensor or None
        The step, shape ``(p,)``, dtype of the inputs. ``None`` unless ``status`` is
        ``"optimal"``.
    multipliers : torch.Tensor or None
        Signed multipliers ``y`` (m,): ``> 0`` upper side active, ``< 0`` lower side active,
        ``0`` inactive, so that ``g + h * d + J' y = 0``. ``None`` unless optimal.
    active : torch.Tensor
        int8 (m,): ``+1`` upper side in the final working set, ``-1`` lower side, ``0`` not
        in it. Equality rows are ``+-1`` by the sign of their multiplier (``+1`` if zero).
        All zeros when not optimal.
    status : str
        ``"optimal"``; ``"infeasible"`` (no ``d`` satisfies ``lo <= J d <= hi``, confirmed by
        a least-violation LP); or ``"numerical"`` (the method stopped without a solution
        that passes the KKT check within ``tol``: never returned as a step).
    objective : float
        ``g'd + 1/2 d' diag(h) d`` (NaN unless optimal).
    kkt_residual : float
        ``||g + h * d + J' y||_inf`` in float64, before casting ``d`` to the output dtype
        (NaN unless optimal).
    max_violation : float
        ``max_i max(J_i d - hi_i, lo_i - J_i d, 0)`` of the float64 step (NaN unless optimal).
    degenerate : bool
        The rows binding at the solution are linearly dependent in the ``H^{-1}`` metric
        (LICQ fails; includes zero rows of ``J`` at a zero bound). ``d`` is still unique;
        the multipliers are one valid choice among many.
    method : str
        ``"enumeration"``, ``"dual"`` or ``"osqp"``: the method that produced the answer.
    iterations : int
        Candidates examined (enumeration), working-set changes (dual), or OSQP iterations.
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
    """Result of :func:`least_violation_bounds`.

    Attributes
    ----------
    v : torch.Tensor
        Normal step (p,) of least total violation (the least ``H``-norm one within the
        relaxed box, see :func:`least_violation_bounds`).
    w : torch.Tensor
        ``J v`` (m,).
    lo, hi : torch.Tensor
        Relaxed bounds ``min(lo, J v)`` and ``max(hi, J v)`` (m,); rounded outwards when
        the output dtype is narrower than float64, so that ``v`` stays feasible for them.
    violation : float
        The minimal total violation ``V(J v; lo, hi)``; 0 up to rounding when the system is
        feasible.
    """

    v: torch.Tensor
    w: torch.Tensor
    lo: torch.Tensor
    hi: torch.Tensor
    violation: float
