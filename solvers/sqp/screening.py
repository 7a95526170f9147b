r"""Row screening: which constraint rows need their Jacobian in the next SQP iteration.

A row far inside its bounds is inactive in the QP subproblem and has a zero multiplier,
so its Jacobian row changes neither the step ``d = -(g + J'y) / h`` nor the merit and
ratio updates, unless the step itself would carry the row to a bound. Each Jacobian row
costs one backward pass through the model (:func:`solvers.derivatives.pullback`), the
largest part of an iteration, so skipping rows that cannot bind is the cheapest saving.
With disparate impact on a binary attribute, for instance, the two rows
``delta P_0 - P_1 <= 0`` and ``delta P_1 - P_0 <= 0`` cannot both be near their bounds
when ``delta < 1``: one of them is always far inside.

Rule. With ``c^k`` the smooth rows at iteration ``k`` and ``s_i`` a running scale of how
far row ``i`` moves per iteration, ``s_i <- max(decay * s_i, |c_i^k - c_i^{k-1}|)``, row
``i`` is screened at iteration ``k + 1`` when its slack to the nearest finite bound
exceeds ``ratio * s_i``:

``min(c_i^k - l_i, u_i - c_i^k) > ratio * s_i``  (and ``s_i > 0``).

Every ``refresh``-th iteration pulls back all rows, and nothing is screened before two
iterations have been seen, after a relaxed QP, or while the caller asks for all rows
(the engine does near a KKT point, where the stationarity test needs the full Jacobian,
and in mini-batch modes, whose row values are noisy). Screened rows come back from the
oracle as zero Jacobian rows: ``0 <= u_i - c_i`` holds, so the QP sees a free row.
"""

from __future__ import annotations

import torch

from solvers.sqp.state import ScreenMemory, SQPState

__all__ = ["RowScreen", "SCREEN_DECAY", "SCREEN_RATIO", "SCREEN_REFRESH"]

#: Slack, in multiples of the per-iteration movement, beyond which a row is screened.
SCREEN_RATIO = 10.0
#: Every this many iterations every Jacobian row is computed.
SCREEN_REFRESH = 10
#: Per-iteration decay of the movement scale (the largest recent movement dominates).
SCREEN_DECAY = 0.9


class RowScreen:
    """The screening state of one fit (module docstring), kept in ``state.screen``
    (:class:`solvers.sqp.state.ScreenMemory`) so that the engine's checkpoint carries it (a
    resumed fit screens exactly as an uninterrupted one).

    Parameters
    ----------
    state : SQPState, optional
        The engine's state; an existing ``screen`` memory is continued (a fresh state when
        omitted).
    ratio, refresh, decay : float, int, float
        :data:`SCREEN_RATIO`, :data:`SCREEN_REFRESH`, :data:`SCREEN_DECAY` by default.
    """

    def __init__(self, state: SQPState | None = None, ratio: float = SCREEN_RATIO, refresh: int = SCREEN_REFRESH,
                 decay: float = SCREEN_DECAY) -> None:
        self.ratio, self.refresh, self.decay = float(ratio), int(refresh), float(decay)
        self._state = SQPState(tau=1.0, xi=1.0, beta=1.0) if state is None else state
        if self._state.screen is None:
            self.reset()

    def observe(self, c: torch.Tensor) -> None:
        """Record the smooth rows ``c`` of the iteration just taken."""
        c = c.detach().to(torch.float64)
        memory = self._state.screen
        scale = memory.scale
        if memory.last is not None and len(memory.last) == c.numel():
            move = (c - torch.tensor(memory.last, dtype=torch.float64)).abs()
            scale = move if scale is None else torch.maximum(self.decay * torch.tensor(scale, dtype=torch.float64),
                                                             move)
            scale = scale.tolist()
        self._state.screen = ScreenMemory(last=c.tolist(), scale=scale, seen=memory.seen + 1)

    def reset(self) -> None:
        """Forget the movement history (after a restart or a relaxed QP)."""
        self._state.screen = ScreenMemory()

    def rows(self, lower: torch.Tensor, upper: torch.Tensor) -> torch.Tensor | None:
        """The rows to pull back next (bool (m,)), or None for all of them.

        ``lower``/``upper`` are the working bounds the QP will use."""
        memory = self._state.screen
        seen = memory.seen
        if memory.scale is None or seen < 2 or seen % self.refresh == 0:
            return None
        c = torch.tensor(memory.last, dtype=torch.float64)
        scale = torch.tensor(memory.scale, dtype=torch.float64)
        if c.shape != lower.shape:
            return None
        slack = torch.minimum(c - lower.to(c.dtype), upper.to(c.dtype) - c)  # +inf for a free row
        screened = (slack > self.ratio * scale) & (scale > 0)
        return ~screened if bool(screened.any()) else None
