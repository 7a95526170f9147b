"""Stochastic SQP for inequality-constrained training.

Problem::

    min_w f(w) = mean loss(model_w(x), y)   s.t.   l <= c(w) <= u

Per iteration ([B21], [SQP] Alg. 1): the (stochastic) gradient ``g`` and the constraint rows ``c``,
``J = dc/dw`` from one forward pass per batch; ``H = diag(sqrt(v + mu))`` from an Adam-type second
moment; the QP ``min_d g'd + 1/2 d'Hd  s.t.  l <= c + Jd <= u`` solved exactly
(:func:`solvers.qp.diagonal_qp`), relaxed to the least-violation bounds when infeasible; the merit
``phi = tau f + V(c)`` with ``tau_trial = (1 - sigma) Red / (g'd + max(d'Hd, 0))``,
``Red = V(c) - V(c + Jd)``; the step ``alpha`` (fixed ``beta_k`` or [B21] Alg. 3.1); the
learning-rate schedule.

Modules: ``engine`` (:class:`StochasticSQP`, the loop), ``data_parallel`` (:class:`DistributedSQP`),
``steps`` (one iteration), ``schedules``, ``optimality`` (values and KKT residuals on all rows),
``endgame`` (divergence guard, tail average, polish, returned iterate; a nearly constant
classifier's threshold by :mod:`solvers.output_shift`), ``snapshot``, ``screening``,
``checkpoint``, ``options`` (:class:`SQPOptions`), ``state`` (:class:`SQPState`, ``FitProblem``).
"""

from __future__ import annotations

from solvers.sqp.data_parallel import DistributedSQP
from solvers.sqp.engine import StochasticSQP
from solvers.sqp.options import SQPOptions
from solvers.sqp.state import SQPState
from solvers.sqp.schedules import LR_SCHEDULES
from solvers.sqp.steps import SQPWarning

__all__ = ["StochasticSQP", "SQPOptions", "SQPState", "SQPWarning", "LR_SCHEDULES"]
