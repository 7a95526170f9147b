"""Gradient-boosted trees under hard constraints: SQP in function space.

Each boosting round treats the per-row raw scores ``F(x_i)`` as the variables of one SQP
iteration: the loss gradient ``g`` and curvature ``h`` per row, the constraint rows ``c`` and
their Jacobian ``J = dc/dF`` from the same constraint objects the SQP engine uses, the SQP
subproblem ``min g'd + 1/2 d' diag(h) d  s.t.  l - b <= c + J d <= u - b`` solved by the SQP
engine's QP, and one tree fitted to the Lagrangian's gradient ``g + J'y`` and curvature ``h``
through LightGBM's custom objective (:class:`BoostedSQP`).

Modules (one job each)
----------------------
``engine``: :class:`BoostedSQP` (the rounds, the returned round, the final check).
``objective``: per-row ``grad``/``hess`` of the losses in LightGBM's units, the starting
constant. ``shift``: the end-game's smallest feasible constant shift of the logits.
``scores``: :class:`BoostedScores`, the trees as a torch module (``state_dict``, pickling).
"""

from __future__ import annotations

from solvers.boosting.engine import BoostedSQP
from solvers.boosting.scores import BoostedScores

__all__ = ["BoostedSQP", "BoostedScores"]
