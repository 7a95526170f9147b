r"""Row screening: which constraint rows need their Jacobian in the next SQP iteration.

A row far inside its bounds has a zero multiplier, so its Jacobian row, one backward pass each,
changes neither the step nor the merit (e.g. of disparate impact's two rows one is always far
inside). With ``s_i <- max(decay * s_i, |c_i^k - c_i^{k-1}|)`` the row's movement scale, row ``i`` is
screened at iteration ``k + 1`` when

``min(c_i^k - l_i, u_i - c_i^k) > ratio * s_i``  (and ``s_i > 0``).

All rows are pulled back every ``refresh``-th iteration, in the first two, after a relaxed QP and
when the engine asks (near a KKT point, mini-batch modes). A screened row's zero Jacobian row is a
free row in the QP.
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
    """The screening of one fit, kept in ``state.screen`` so that a resumed fit screens exactly as an
    uninterrupted one (a fresh state when ``state`` is None)."""

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
        """The rows to pull back next (bool (m,)) against the QP's working bounds, or None for all."""
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
