"""Stochastic SQP for inequality-constrained training.

Problem::

    min_w f(w) = mean loss(model_w(x), y)   s.t.   l <= c(w) <= u

Per iteration ``k`` (notation of [B21] and [SQP] Alg. 1):

1. ``g`` = (stochastic) gradient of ``f``; ``c`` and ``J = dc/dw`` on the constraint batch
   (the full data; with mini-batches the full data at the last snapshot and its first-order
   model in between, :mod:`solvers.sqp.snapshot`; or a balanced batch with equal rows per
   stratum, [SQP] Thm 3.1).
2. ``H = diag(h)``: ``v <- b2 v + (1 - b2) g^2`` (``(1 - b2) g^2`` at the first step),
   ``h = sqrt(v + mu)`` (Adam/RMSProp-type; ``hessian="adagrad"`` accumulates ``v += g^2``).
3. QP ``min_d g'd + 1/2 d'Hd  s.t.  l <= c + Jd <= u`` solved exactly in the m-dimensional
   constraint space (:func:`solvers.qp.diagonal_qp`). An infeasible linearisation is
   relaxed to the bounds reached by the least-violation normal step (reported as
   ``qp_status="relaxed"``), never silently replaced by ``-g/h``.
4. Merit ``phi = tau f + V(c)`` with ``V`` the total violation. ``Red = V(c) - V(c + Jd)``,
   ``tau_trial = (1 - sigma) Red / (g'd + max(d'Hd, 0))``; model reduction
   ``Dl = -tau g'd + Red``; ratio parameter ``xi``.
5. Step ``alpha``: ``beta_k`` (``step="fixed"``, what the paper's experiments ran) or the
   adaptive rule of [B21] Alg. 3.1 with Lipschitz estimates of ``g`` and ``J``.
6. Learning-rate adjustment [SQP] Alg. 2 on the merit's moving average.

Jacobians come from ONE forward pass per batch: ``dc/dout`` (cheap, an (m, n) matrix) and
one batched vector-Jacobian product pulls the ``1 + m`` rows back through the model.

Modules (one job each)
----------------------
``engine``: :class:`StochasticSQP` (options, the epoch and mini-batch loop, checkpoints)
and :class:`DistributedSQP`. ``steps``: one iteration (steps 2-5 above, the trust region,
feasibility restoration, the exact calibration). ``schedules``: the learning-rate
schedules (step 6). ``optimality``: objective, exact rows and KKT residuals on all rows,
the early-stop test. ``endgame``: divergence guard, tail average, full-batch polish and
the returned iterate. ``snapshot``: the full-data constraint snapshots of mini-batch steps.
``checkpoint``: the ``state_dict`` content and ``resume``. ``options``: :class:`SQPOptions`, every
setting, checked once. ``state``: :class:`SQPState` (what the iterations change) and
:class:`~solvers.sqp.state.FitProblem` (what a fit works on), passed between the modules.
"""

from __future__ import annotations

from solvers.sqp.endgame import MAX_RESTARTS, POLISH_EXTENSION
# private names of the module before the split, kept importable from here (imported
# under their public names: no private name crosses a module boundary)
from solvers.sqp.endgame import RESTORING_WINDOW as _RESTORING_WINDOW
from solvers.sqp.endgame import still_restoring as _still_restoring
from solvers.sqp.data_parallel import DistributedSQP
from solvers.sqp.engine import CONSTRAINT_BATCHES, StochasticSQP
from solvers.sqp.options import SQPOptions
from solvers.sqp.state import SQPState
from solvers.sqp.schedules import LR_SCHEDULES, PLATEAU_RTOL
from solvers.sqp.steps import TRUST_RATIO, SQPWarning

__all__ = ["StochasticSQP", "SQPOptions", "SQPState", "SQPWarning", "LR_SCHEDULES"]
