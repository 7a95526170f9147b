r"""One round's direction in function space: the SQP subproblem of the step a shrunk tree takes.

At the scores ``F`` with per-row gradient ``g``, curvature ``h``, smooth rows ``c`` and Jacobian
``J = dc/dF``, a tree fitted to ``(G, h)`` moves the scores by about ``eta d`` with
``d = -G / h`` (its leaf values, shrunk by the learning rate ``eta``). The subproblem is therefore
posed for that step, asking it to close the share ``rho`` (``correction``) of each row's current
violation:

.. math:: \min_d\; g^\top d + \tfrac12 d^\top \operatorname{diag}(h)\, d
          \quad\text{s.t.}\quad lo - (1 - \rho)(lo - c)_+ \le c + \eta J d
          \le hi + (1 - \rho)(c - hi)_+,

so a row inside its bounds must stay inside them and a violated one moves ``rho`` of the way back;
solved by the SQP engine's QP (:func:`solvers.sqp.steps.solve_qp`: exact, with the
least-violation relaxation of an infeasible linearisation). After a round whose bounds did not bind,
the unconstrained minimiser ``d = -g / h`` is tried first: when it meets every row it is the
solution, with ``y = 0`` (one product with ``J``); after a binding round the QP is solved directly
(its first candidate, the empty active set, is the same test). The round needs ``y`` only (the
tree, not ``d``, takes the step), so the QP stops at the multipliers (``multipliers_only``), which
with tens of thousands of rows saves most of its work. With its multipliers ``y``,
stationarity reads ``g + h d + \eta J^\top y = 0``, so the tree gets the gradient of the
Lagrangian ``G = g + \eta J^\top y`` and the curvature ``h``. Without shrinkage (``eta = 1``)
and with ``rho = 1`` this is the SQP step of :class:`solvers.StochasticSQP`.

A fit starts at ``rho = correction`` (default 1: the whole linearised violation in one round); the
engine halves it each time it takes a round back (:class:`solvers.boosting.BoostedSQP`: a round whose tree leaves
the training loss above the starting constant's). A tree follows the group-wise direction only
where its inputs separate the groups: under a strict bound (disparate impact 0.9-0.95 on Adult,
0.8 on small data with many correlated inputs) rounds that close the whole violation overshoot,
the multipliers grow by orders of magnitude and the scores leave for the corner where every row
is negative (both rates 0, which a ratio bound counts as met), a constant predictor; a smaller
share leaves the rest of the correction to the integral term ``p`` below.

:class:`WorkingBounds` keeps the bounds ``lo, hi`` the subproblem is solved for: the user's
bounds less the exact calibration ``b`` of the SQP engine (:func:`solvers.sqp.steps.calibrate`)
and an integral term ``p``, the running sum of the exact rows' violations, halved at every
feasible round (the end-game of :func:`solvers.sqp.endgame.polish` does the same): a tree sees
the inputs only, not the groups, so it follows the group-wise direction ``J'y`` in part and a
fixed bias would otherwise remain.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, NamedTuple

import torch

from solvers.qp import QPResult
from solvers.sqp.steps import calibrate, integral_push, solve_qp

__all__ = ["CORRECTION", "HESSIAN_FLOOR", "MAX_TAKE_BACKS", "RoundState", "RoundStep", "WorkingBounds", "round_step"]

#: Smallest per-row curvature the subproblem sees (tree learner's units): the QP needs ``h > 0``,
#: and a logistic row far from the threshold has ``sigmoid' ~ 0``. The tree learner gets the
#: unfloored curvature (LightGBM's own ``hess``).
HESSIAN_FLOOR = 1e-6
#: Share ``rho`` of a row's current violation that a fit's first rounds ask to close (module docstring).
CORRECTION = 1.0
#: The most rounds a fit takes back (each halves ``rho``: at most down to ``correction / 128``).
MAX_TAKE_BACKS = 7


@dataclass
class RoundState:
    """What the rounds of one boosted fit change: the round ``iteration``, the once-per-fit notices
    of :func:`solvers.sqp.steps.solve_qp` (``warned_relaxed``, ``warned_relaxed_failed``), ``stop``
    (a callback asked to stop), the ``scores`` the last tree was fitted at, the
    :class:`solvers.boosting.validation.ValidationLoss` of the fit's validation rows (None without),
    ``stale``, the feasible rounds offered since the best candidate (early stopping), ``trees``, the
    trees kept so far, ``correction``, the current share ``rho`` (module docstring),
    ``taken_back``, the rounds whose tree was removed, ``retry``, whether the next round starts at
    the scores of a round taken back (offered already), ``start_loss``, the training loss of the
    starting constant when it meets every bound, else of the best constant score that does (None where none
    does: no round is taken back), ``init``, the
    starting constant (the scores are ``init`` plus the trees' raw sum), ``best_raw``, the trees and
    the running raw scores of the last round that became the best candidate (``(-1, None)`` before),
    ``targets``, the training targets as float64 (converted once for
    :func:`solvers.boosting.objective.row_derivatives`), ``unbound``, whether the last round's QP left every
    bound inactive (:func:`round_step` then tries the unconstrained step first), and ``no_input``, whether
    LightGBM found no input column to split on (the fit is the starting constant, and says so once)."""

    iteration: int = 0
    warned_relaxed: bool = False
    warned_relaxed_failed: bool = False
    stop: bool = False
    scores: torch.Tensor | None = None
    validation: Any = None
    stale: int = 0
    trees: int = 0
    correction: float = CORRECTION
    taken_back: int = 0
    retry: bool = False
    start_loss: float | None = None
    init: float = 0.0
    best_raw: tuple = (-1, None)
    targets: torch.Tensor | None = None
    unbound: bool = True
    no_input: bool = False


class RoundStep(NamedTuple):
    """The gradient ``G = g + eta J'y`` (n,) handed to the tree learner, the subproblem's
    :class:`solvers.qp.QPResult` (its multipliers and active set; its ``d``, the step before shrinkage,
    None where the QP's scalar path stopped at the multipliers), ``"normal"`` or ``"relaxed"``."""

    gradient: torch.Tensor
    qp: QPResult
    status: str


def round_step(grad: torch.Tensor, hess: torch.Tensor, c: torch.Tensor, J: torch.Tensor, lo: torch.Tensor,
               hi: torch.Tensor, learning_rate: float, state: RoundState,
               correction: float = CORRECTION) -> RoundStep:
    """The direction of one round (module docstring), float64.

    Parameters
    ----------
    grad, hess : tensor (n,)
        Per-row gradient and curvature of the loss (``hess`` floored at :data:`HESSIAN_FLOOR`).
    c : tensor (m,)
        Smooth constraint rows at the current scores.
    J : tensor (m, n)
        ``dc/dF``.
    lo, hi : tensor (m,)
        Working bounds on ``c + eta J d``.
    learning_rate : float
        ``eta``.
    state : RoundState
        The fit's round state (:func:`solvers.sqp.steps.solve_qp` reads ``iteration`` and warns once
        per fit about a relaxed step; ``unbound`` is read and set here).
    correction : float in (0, 1], default :data:`CORRECTION`
        ``rho``: the share of each row's violation of ``[lo, hi]`` the step is asked to close
        (the engine passes its :class:`RoundState`'s).
    """
    shrunk = float(learning_rate) * J.to(torch.float64)
    h = hess.to(torch.float64).clamp(min=HESSIAN_FLOOR)
    g = grad.to(torch.float64)
    c, lo, hi = c.to(torch.float64), lo.to(torch.float64), hi.to(torch.float64)
    kept = 1.0 - float(correction)  # the share of a violation left for the later rounds
    if kept:
        lo, hi = lo - kept * (lo - c).clamp(min=0.0), hi + kept * (c - hi).clamp(min=0.0)
    if state.unbound:  # the last round's bounds did not bind: most likely neither do this round's
        free = -g / h  # the unconstrained minimiser: the QP's solution (y = 0) when it meets every row
        reached = c + shrunk @ free
        if bool(((reached >= lo) & (reached <= hi)).all()):
            m = int(c.numel())
            qp = QPResult(d=free, multipliers=torch.zeros(m, dtype=torch.float64),
                          active=torch.zeros(m, dtype=torch.int8), status="optimal",
                          objective=float(g @ free + 0.5 * h @ (free * free)), kkt_residual=0.0, max_violation=0.0,
                          degenerate=False, method="unconstrained", iterations=0)
            return RoundStep(g, qp, "normal")
    qp, status, _ = solve_qp(g, h, shrunk, c, lo, hi, state, multipliers_only=True)
    state.unbound = not bool(qp.active.any())
    return RoundStep(g + shrunk.T @ qp.multipliers.to(torch.float64), qp, status)


class WorkingBounds:
    """The bounds of the subproblem: ``l - b - p <= c + eta J d <= u - b - p`` (module docstring).

    Parameters
    ----------
    lower, upper : tensor (m,)
        The user's bounds.
    calibrate_exact : bool
        Keep the exact calibration ``b`` (else ``b = 0``).
    calibration_weight : float
        ``w`` in ``b <- (1 - w) b + w (c_exact - c)``.
    """

    def __init__(self, lower: torch.Tensor, upper: torch.Tensor, calibrate_exact: bool,
                 calibration_weight: float) -> None:
        self.lower, self.upper = lower.to(torch.float64), upper.to(torch.float64)
        self.calibrate_exact, self.weight = bool(calibrate_exact), float(calibration_weight)
        self.offset = torch.zeros_like(self.lower)
        self.push = torch.zeros_like(self.lower)
        self._bounds = (self.lower.tolist(), self.upper.tolist())

    def snapshot(self) -> tuple[torch.Tensor, torch.Tensor]:
        """``(b, p)`` as they are now (:meth:`restore` puts them back when a round is taken back)."""
        return self.offset.clone(), torch.as_tensor(self.push).clone()

    def restore(self, snapshot: tuple[torch.Tensor, torch.Tensor]) -> None:
        """Set ``(b, p)`` to a :meth:`snapshot`."""
        self.offset, self.push = snapshot[0].clone(), snapshot[1].clone()

    def update(self, c: torch.Tensor, c_exact: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Take the rows of a round into ``b`` and ``p``; returns the new ``(lo, hi)`` for ``c + eta J d``
        (a few rows: ``p`` and the bounds in Python floats, the same float64 arithmetic)."""
        if self.calibrate_exact:
            self.offset = calibrate(self.offset, c_exact - c, self.lower, self.upper, self.weight)
        lower, upper = self._bounds
        push = integral_push(self.push.tolist(), c_exact.tolist(), lower, upper)
        self.push = torch.tensor(push, dtype=torch.float64)
        shift = [b + p for b, p in zip(self.offset.tolist(), push)]
        return (torch.tensor([l - s for l, s in zip(lower, shift)], dtype=torch.float64),
                torch.tensor([u - s for u, s in zip(upper, shift)], dtype=torch.float64))
