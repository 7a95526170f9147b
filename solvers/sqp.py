"""Stochastic SQP for inequality-constrained training.

Problem::

    min_w f(w) = mean loss(model_w(x), y)   s.t.   l <= c(w) <= u

Per iteration ``k`` (notation of [B21] and [SQP] Alg. 1):

1. ``g`` = (stochastic) gradient of ``f``; ``c`` and ``J = dc/dw`` on the constraint batch
   (the full data, or a balanced batch with equal rows per stratum, [SQP] Thm 3.1).
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
"""

from __future__ import annotations

import copy
import logging
import math
import sys
import time
import warnings
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Sequence

import torch
import torch.distributed as dist
from torch import nn

from solvers.derivatives import JACOBIAN_MODES, DerivativeOracle, Derivatives, LocalDerivatives
from solvers.distributed import (AllReduceDerivatives, broadcast_parameters, check_data_parallel_options,
                                 distributed_active)
from solvers.history import FitResult, History
from solvers.losses import LossFn, check_targets, get_loss
from solvers.outcome import BestIterate, DivergedWarning, warn_if_start, warn_unmet
from solvers.problem import (Constraint, as_constraint_set, assign_parameters, check_dataset, flat_parameters,
                             row_violations, trainable_parameters, violation)
from solvers.qp import diagonal_qp, least_violation_bounds
from solvers.sampling import BalancedSampler, minibatches
from solvers.validation import (check_choice, check_flag, check_interval, check_seed, check_verbose, finite_float,
                                positive_float, positive_int)

__all__ = ["StochasticSQP", "SQPWarning", "LR_SCHEDULES"]

#: Divergence-guard restarts (:meth:`StochasticSQP._blew_up`) after which a run is "diverged".
MAX_RESTARTS = 10
#: Relative merit decrease that counts as progress for the "plateau" schedule: any decrease
#: beyond rounding. A run that improves slowly but steadily (measured: an ill-conditioned
#: least-squares fit on Communities and Crime gaining 5e-6 per epoch) keeps its step; a run
#: that oscillates around the constraint boundary (no new best merit) gets smaller steps.
PLATEAU_RTOL = 1e-9
#: Trust region of stochastic steps: ``||d|| <= TRUST_RATIO * ||g / h||`` (see ``_iterate``).
TRUST_RATIO = 10.0
#: Values of ``lr_schedule``.
LR_SCHEDULES: tuple[str, ...] = ("auto", "plateau", "rsqrt", "paper", "none")
#: Values of ``constraint_batch``.
CONSTRAINT_BATCHES: tuple[str, ...] = ("auto", "full", "batch", "balanced")

logger = logging.getLogger(__name__)


class SQPWarning(UserWarning):
    """Raised once per fit when an iteration needed a relaxed (infeasible) QP."""


class StochasticSQP:
    """Stochastic sequential quadratic programming with hard inequality constraints.

    Parameters
    ----------
    epochs : int, default 500
        Passes over the training data (the paper's experiments: 500 full-batch epochs).
    lr : float, default 0.5
        Initial learning rate ``beta_0`` (the paper's experiments: 0.5).
    batch_size : int or None, default None
        Rows per objective mini-batch; None means full-batch gradients.
    constraint_batch : {"auto", "full", "batch", "balanced"}, default "auto"
        Where constraint values and Jacobians come from in each iteration:

        - "full": all training rows (one extra forward pass over all rows per mini-batch
          step: slower than full-batch training);
        - "batch": the objective's own mini-batch (one forward and one batched pull-back
          per step, so an epoch costs about an epoch of plain training). The rows are then
          estimates from ``batch_size`` rows: group rates are ratios of batch means
          (consistent, bias O(1/batch)), and a row comparing a group the batch misses is 0
          there (it constrains nothing on that batch); the distance-covariance family is
          made of U-statistics, unbiased on every batch; covariance and GeDI rows are batch
          (regression) estimates, consistent with an O(1/batch) bias. The exact calibration
          offset is updated from the batch, and the full-batch end-game
          (``polish_iterations``) meets the bound on ALL rows with the exact measure;
        - "balanced": a balanced batch with ``constraint_batch_size // n_strata`` rows per
          stratum, drawn at every step ([SQP] Thm 3.1: unbiased group means);
        - "auto": "full" in full-batch mode, "batch" with mini-batches (measured on Dutch,
          MLP 32, batch 1024, 20 epochs: feasible on all rows on 3 of 3 seeds at the
          full-batch accuracy in a third of its time, ``benchmarks/sqp_stochastic.py``).
    constraint_batch_size : int or None
        Total rows of a balanced constraint batch (default: ``batch_size``).
    step : {"fixed", "adaptive"}, default "fixed"
        ``alpha_k = beta_k`` or the adaptive rule of [B21] Alg. 3.1.
    feasibility_restoration : bool, default True
        With a step size ``alpha < 1`` the linearised constraints are only partly followed,
        so an infeasible iterate approaches the feasible set at rate ``alpha`` per iteration
        (slowly once the learning-rate schedule has reduced ``beta``; measured on a 3,000-row
        Adult sample with DI >= 0.8: violation still 4e-3 after 400 epochs). With True the
        remaining fraction of the normal step
        ``v = argmin 1/2 v'Hv  s.t.  l <= c + Jv <= u`` is added:
        ``w <- w + alpha d + (1 - alpha) v``, so ``c`` meets the linearised bounds after every
        step whatever ``alpha``. Feasible iterates have ``v = 0`` (nothing changes); the
        merit, ratio and step-size rules still use ``d``. An extension of [SQP] Alg. 1 in
        the spirit of composite-step SQP (Byrd-Omojokun); False gives the paper's step.
    lr_schedule : {"auto", "plateau", "rsqrt", "paper", "none"}, default "auto"
        Learning-rate control. "auto": "plateau" in full-batch mode, "rsqrt" with
        mini-batches. "rsqrt": the diminishing step ``beta_k = lr / sqrt(1 + k / K)`` with
        ``K`` the steps per epoch (the stochastic regime of [SQP] Thm 3.1, whose
        convergence in expectation asks for steps that shrink), decaying within the first
        epoch already. "plateau": multiply ``beta`` by
        ``lr_decay`` when the merit ``tau f + V`` (epoch means, compared at the current
        ``tau``) has reached no new best for ``lr_patience`` epochs, never below
        ``lr_floor * lr``, so a run that still improves keeps its step and training never
        freezes. "paper": the adjustment of [SQP] Alg. 2 (``lr_kmin``, ``lr_interval``,
        ``lr_factor``, ``lr_weight``, ``lr_min``), which measured here cuts ``beta`` to about
        5e-8 around epoch 210 in most full-batch runs. ``True``/``False`` mean "paper"/"none".
    polish_iterations : int, default 50
        End-game of a mini-batch run: after the last epoch, up to this many full-batch SQP
        iterations on ALL training rows (with exact calibration and feasibility
        restoration), started from the average of the last epoch's iterates (a Polyak
        tail average: it removes most of the mini-batch noise). Every polish iterate is a
        candidate for the returned model, so the returned model is checked on all rows
        with the exact measure; the polish stops early at a feasible KKT point. It works on
        copies of the engine state, so :meth:`state_dict` and ``resume`` continue the
        stochastic phase as if no polish had run. 0 turns it off. Full-batch runs ignore it.
    lr_patience : int, default 20
        Epochs without merit improvement before a "plateau" decay.
    lr_decay : float, default 0.5
        Factor in (0, 1) of a "plateau" decay.
    lr_floor : float, default 1e-3
        Smallest "plateau" learning rate as a fraction of ``lr``.
    calibrate_exact : bool, default True
        Solve the QP for the working bounds ``l - b <= c + J d <= u - b``, with ``b`` a
        moving average of the gap ``c_exact - c`` between the exact rows and their smooth
        surrogate on the constraint batch (updated when that batch is the full data). The
        smooth surrogate then only has to give the DIRECTION of the constraint; its level
        is set by the exact measure, so the exact rows meet the user's bounds (the
        surrogate's bias would otherwise leave e.g. a realised disparate impact of 0.79 at a
        requested 0.8) and soft surrogates, whose gradients reach every row instead of only
        the rows at the threshold, become usable. A fairopt extension of [SQP] Alg. 1.
    calibration_weight : float, default 0.2
        Weight ``w`` in (0, 1) of the newest gap in ``b <- (1 - w) b + w (c_exact - c)``.
    hessian : {"adam", "adagrad"}, default "adam"
        Second-moment estimate behind ``H = diag(sqrt(v + mu))``.
    beta2 : float, default 0.999
        Decay of the Adam-type second moment.
    hessian_shift : float, default 0.3
        ``mu`` in ``h = sqrt(v + mu)``. The authors' reference code uses 100 (``h`` close
        to 10, ``d`` close to ``-g/10``: plain gradient descent at a tenth of ``lr``). With a
        large shift ``h`` is nearly constant and training under-optimises (Adult, linear,
        DI >= 0.8: loss 0.340 at 10 against 0.3446 at 0.1 with the same surrogate, and
        test accuracy 1-2 points lower); 0.1-0.3 keep the second-moment scaling effective
        (below 0.1 the results barely change). 0.3 rather than 0.1: early steps, before the
        second moment has built up, are at most ``lr / sqrt(0.3)`` times the gradient, which
        keeps small MLPs at ``lr = 0.5`` from blowing up (a divergence guard backs up the rest:
        an objective above 10 times the first one returns to the best iterate with half the
        learning rate, at most 10 times).
    sigma, epsilon, tau0, xi0, tau_min, xi_min, eta, theta : float
        Merit/ratio/step parameters of [B21] (defaults 0.1, 1e-2, 0.1, 1.0, 1e-12, 1e-12,
        0.5, 1e4).
    lr_min, lr_kmin, lr_interval, lr_factor, lr_weight : learning-rate adjustment ([SQP]
        Alg. 2: 1e-7, 200 epochs, 5, 10, 0.85).
    tol : float, default 1e-3
        Stationarity tolerance for ``converged``: ``||g + J'y||_inf`` at the returned
        iterate on the full training data, ``y`` the multipliers of the unit-metric QP
        (the projected-gradient residual, zero exactly at a KKT point).
    feasibility_tol : float, default 1e-6
        Largest exact violation of any row (in the row's own units) for a feasible iterate.

    Returned model and ``converged``
    --------------------------------
    The model is left at the BEST iterate seen on the full training data: the feasible one
    (every row's exact violation <= ``feasibility_tol``) with the lowest objective, else the
    least-violating one (:class:`solvers.outcome.BestIterate`). In full-batch mode every
    iterate is a candidate; with mini-batches, the iterate at the end of each epoch (one
    extra forward pass on all rows per epoch). ``FitResult.converged`` is True iff that model
    is feasible AND stationary within ``tol``, both measured on all training rows;
    ``status`` is "converged", "infeasible" (a row violated), "not_stationary" (feasible, not
    yet a KKT point), "diverged" or "stopped_by_callback" (``info["termination"]`` says why
    the loop ended: "max_epochs", "converged" when a feasible KKT point stopped it early,
    ...). A returned model that violates a row emits :class:`solvers.outcome.BoundWarning`
    naming the row, its realised value and its bound. The last :class:`History` record
    (``qp_status == "final"``) describes the returned model, and ``info`` holds the same
    numbers: ``stationarity``, ``complementarity``, ``violation`` (exact, total),
    ``violations`` (per row), ``c_exact``, ``feasible``, ``stationary``,
    ``returned_iteration``, ``relaxed_steps``, ``bound_offset`` (the calibration ``b``).
    jacobian : {"auto", "batched", "loop"}, default "auto"
        How the ``1 + m`` rows ``[df/dout; dc/dout]`` are pulled back through the model from
        its single forward graph: one batched VJP (``is_grads_batched``) or ``1 + m``
        backward calls on the retained graph ("loop"); "auto" is "loop", the faster of
        the two in ``benchmarks/sqp_speed.py`` on CPU.
    seed : int, default 0
        Seed of the samplers and of the Lipschitz probe direction.
    verbose : int, default 0
        0 silent, 1 progress bar and per-epoch INFO logs.
    callbacks : sequence of callables
        ``cb(engine, record) -> bool | None`` after every iteration; True stops training.
    distributed : bool or None, default None
        Data-parallel full-batch SQP over the ranks of a ``torch.distributed`` process
        group, each rank fitting on its own row shard (:mod:`solvers.distributed`). None:
        when ``torch.distributed`` is initialised; False: never.
    """

    def __init__(
        self,
        epochs: int = 500,
        lr: float = 0.5,
        batch_size: int | None = None,
        constraint_batch: str = "auto",
        constraint_batch_size: int | None = None,
        step: str = "fixed",
        feasibility_restoration: bool = True,
        lr_schedule: str | bool = "auto",
        polish_iterations: int = 50,
        lr_patience: int = 20,
        lr_decay: float = 0.5,
        lr_floor: float = 1e-3,
        calibrate_exact: bool = True,
        calibration_weight: float = 0.2,
        hessian: str = "adam",
        beta2: float = 0.999,
        hessian_shift: float = 0.3,
        sigma: float = 0.1,
        epsilon: float = 1e-2,
        tau0: float = 0.1,
        xi0: float = 1.0,
        tau_min: float = 1e-12,
        xi_min: float = 1e-12,
        eta: float = 0.5,
        theta: float = 1e4,
        lr_min: float = 1e-7,
        lr_kmin: int = 200,
        lr_interval: int = 5,
        lr_factor: float = 10.0,
        lr_weight: float = 0.85,
        tol: float = 1e-3,
        feasibility_tol: float = 1e-6,
        jacobian: str = "auto",
        seed: int = 0,
        verbose: int = 0,
        callbacks: Sequence[Callable] = (),
        distributed: bool | None = None,
    ) -> None:
        self.epochs = epochs
        self.lr = lr
        self.batch_size = batch_size
        self.constraint_batch = constraint_batch
        self.constraint_batch_size = constraint_batch_size
        self.step = step
        self.feasibility_restoration = feasibility_restoration
        self.lr_schedule = lr_schedule
        self.polish_iterations = polish_iterations
        self.lr_patience = lr_patience
        self.lr_decay = lr_decay
        self.lr_floor = lr_floor
        self.calibrate_exact = calibrate_exact
        self.calibration_weight = calibration_weight
        self.hessian = hessian
        self.beta2 = beta2
        self.hessian_shift = hessian_shift
        self.sigma = sigma
        self.epsilon = epsilon
        self.tau0 = tau0
        self.xi0 = xi0
        self.tau_min = tau_min
        self.xi_min = xi_min
        self.eta = eta
        self.theta = theta
        self.lr_min = lr_min
        self.lr_kmin = lr_kmin
        self.lr_interval = lr_interval
        self.lr_factor = lr_factor
        self.lr_weight = lr_weight
        self.tol = tol
        self.feasibility_tol = feasibility_tol
        self.jacobian = jacobian
        self.seed = seed
        self.verbose = verbose
        self.callbacks = tuple(callbacks)
        self.distributed = distributed
        self._validate_options()

    # ------------------------------------------------------------------ validation
    def _validate_options(self) -> None:
        # loop counts and batch sizes also accept integral floats such as 10.0 (they are used as int(...))
        for name in ("epochs", "lr_patience", "lr_kmin", "lr_interval"):
            positive_int(getattr(self, name), name, allow_integral_float=True)
        for name in ("lr_min", "tol", "feasibility_tol"):
            positive_float(getattr(self, name), name)
        if not isinstance(self.lr_schedule, bool):  # True for "paper", False for "none"
            check_choice(self.lr_schedule, LR_SCHEDULES, "lr_schedule")
        positive_int(self.polish_iterations, "polish_iterations", allow_zero=True)
        for name in ("feasibility_restoration", "calibrate_exact"):
            check_flag(getattr(self, name), name)
        positive_float(self.lr, "lr")
        for name in ("batch_size", "constraint_batch_size"):
            if getattr(self, name) is not None:
                positive_int(getattr(self, name), name, allow_integral_float=True)
        choices = {
            "constraint_batch": CONSTRAINT_BATCHES,
            "step": ("fixed", "adaptive"),
            "hessian": ("adam", "adagrad"),
            "jacobian": JACOBIAN_MODES,
        }
        for name, allowed in choices.items():
            check_choice(getattr(self, name), allowed, name)
        check_interval(self.beta2, "beta2", 0.0, 1.0, closed="left")
        for name in ("hessian_shift", "tau0", "xi0", "tau_min", "xi_min", "theta", "lr_factor"):
            positive_float(getattr(self, name), name)
        for name in ("sigma", "epsilon", "eta", "lr_weight", "lr_decay", "lr_floor", "calibration_weight"):
            check_interval(getattr(self, name), name, 0.0, 1.0)
        check_flag(self.distributed, "distributed", allow_none=True)
        check_seed(self.seed, allow_none=False, allow_negative=False)
        check_verbose(self.verbose)
        if self.constraint_batch == "balanced" and self.batch_size is None and self.constraint_batch_size is None:
            raise ValueError("constraint_batch: 'balanced' needs batch_size or constraint_batch_size")

    # ------------------------------------------------------------------ public API
    def fit(
        self,
        model: nn.Module,
        data: Any,
        *,
        loss: str | LossFn = "bce",
        constraints: Constraint | Iterable[Constraint] = (),
        strata: torch.Tensor | None = None,
        resume: dict | None = None,
    ) -> FitResult:
        """Train ``model`` in place on ``data`` subject to ``constraints``.

        Parameters
        ----------
        model : torch.nn.Module
            Maps ``data.X`` (n, p) to one output per row (n,).
        data : Dataset
            Training rows (``X``, ``y``, ``__len__``, ``subset``; ``strata`` for balanced
            constraint batches), e.g. a :class:`fairopt.FairData`.
        loss : {"bce", "mse", "poisson"} or callable(out, batch) -> scalar
            Mean training loss.
        constraints : Constraint or iterable of Constraint
            Hard constraints ``lower <= c(out) <= upper``; their rows are concatenated.
        strata : tensor, optional
            Stratum id per row for balanced constraint batches (default ``data.strata``).
        resume : dict, optional
            An engine checkpoint from :meth:`state_dict` (taken after a previous ``fit`` of
            this model on the same data and constraints): the merit, ratio and step
            parameters, the learning-rate schedule, the Hessian accumulator ``v``, the
            sampler's random-number generator and the epoch counter continue from it, so
            ``epochs`` more epochs reproduce the corresponding epochs of one longer run
            (bit for bit on CPU). The model's parameters are not part of it: pass the
            model as it was at the checkpoint.

        Returns
        -------
        FitResult
        """
        params = trainable_parameters(model)
        self._oracle = self._derivative_oracle(params, constraints)
        n = check_dataset(data)
        loss_fn = get_loss(loss)
        check_targets(loss_fn, data)
        cons = as_constraint_set(constraints)
        cons.setup(data)
        lower, upper = cons.lower, cons.upper
        if bool((lower > upper).any()):
            i = int(torch.nonzero(lower > upper)[0])
            raise ValueError(f"constraints: row {cons.row_names[i]!r} has lower {lower[i].item()} > upper {upper[i].item()}")
        m = int(lower.numel())

        gen = torch.Generator().manual_seed(int(self.seed))
        full_batch = self.batch_size is None or self.batch_size >= n
        mode = self.constraint_mode(full_batch) if m else "full"
        sampler = self._balanced_sampler(data, strata, n, gen) if mode == "balanced" else None
        steps_per_epoch = 1 if full_batch else math.ceil(n / int(self.batch_size))
        schedule = self.schedule_for(full_batch)

        dtype = params[0].dtype
        p_total = sum(p.numel() for p in params)
        v = torch.zeros(p_total, dtype=dtype)
        state = dict(tau=float(self.tau0), xi=float(self.xi0), beta=float(self.lr), L=None, Gamma=None,
                     merit_avg=None, since_change=0, iteration=0, warned_relaxed=False, epochs_done=0, restarts=0)
        if resume is not None:
            state = _restore_checkpoint(resume, v, gen, m)
        history = History(row_names=cons.row_names)
        self.state_ = state
        self._v, self._generator, self._n_rows = v, gen, m  # live objects behind state_dict()
        status = "max_epochs"
        use_bar = self.verbose > 0 or sys.stderr.isatty()
        epochs = range(state["epochs_done"], state["epochs_done"] + int(self.epochs))
        if use_bar:
            from tqdm.auto import tqdm

            epochs = tqdm(epochs, desc="SQP", unit="epoch", disable=not use_bar, leave=False)

        model.train()
        stop = False
        tracker = BestIterate(lower, upper, self.feasibility_tol)
        if resume is not None:
            _resume_iterates(resume, params, tracker)
        self._tracker = tracker
        offset = torch.as_tensor(state.get("offset", [0.0] * m), dtype=torch.float64).reshape(m)
        self._anchor = None  # mini-batch: the last sane epoch-end iterate (divergence guard)
        self._start_iteration = state["iteration"]
        if not full_batch:  # the starting point is a candidate (a run that fails early returns it)
            self._offer_all_rows(model, params, loss_fn, cons, data, tracker, state)
        tail = None
        for epoch in epochs:
            epoch_merits, epoch_f, epoch_V = [], [], []
            tail = _TailAverage(params) if not full_batch else None
            for idx in minibatches(n, self.batch_size, gen):
                obj_batch = data if idx is None else data.subset(idx)
                if m == 0:
                    con_batch = None
                elif sampler is not None:
                    con_batch = data.subset(sampler.sample())
                elif mode == "batch":
                    con_batch = obj_batch
                else:
                    con_batch = data
                if schedule == "rsqrt":
                    state["beta"] = state.get("beta_scale", 1.0) * float(self.lr) / math.sqrt(
                        1.0 + state["iteration"] / steps_per_epoch)
                der = self._derivatives(model, params, loss_fn, cons, obj_batch, con_batch)
                if not math.isfinite(der.f) or not bool(torch.isfinite(der.g).all()):
                    logger.warning("SQP: non-finite objective or gradient at iteration %d; stopping", state["iteration"])
                    status, stop = "diverged", True
                    break
                on_all_rows = obj_batch is data and (m == 0 or con_batch is data)
                if self._blew_up(der.f, state, tracker, params, on_all_rows):
                    if state.get("restarts", 0) > MAX_RESTARTS:
                        status, stop = "diverged", True
                        break
                    continue
                # every full-batch iterate is a candidate for the returned model
                if on_all_rows and self._offer_and_test_kkt(der, params, lower, upper, offset, tracker, state):
                    status, stop = "converged", True  # feasible on the exact measure and stationary
                    break
                if m and self.calibrate_exact and der.c_exact is not None and (con_batch is data or mode == "batch"):
                    offset = self._calibrate(offset, der.c_exact - der.c, lower, upper)
                record = self._iterate(params, der, v, lower - offset, upper - offset, state, model, loss_fn, cons,
                                       obj_batch, con_batch, bounds=(lower, upper), stochastic=not on_all_rows)
                record["epoch"] = epoch
                epoch_merits.append(record["merit"])
                epoch_f.append(record["f"])
                epoch_V.append(record["V"])
                history.append(record)
                state["iteration"] += 1
                if tail is not None:
                    tail.add(params)
                if any(cb(self, record) for cb in self.callbacks):
                    status, stop = "stopped_by_callback", True
                    break
            if stop:
                break
            if not full_batch:  # mini-batch: one candidate per epoch, checked on all rows
                self._offer_all_rows(model, params, loss_fn, cons, data, tracker, state)
            if epoch_merits and schedule in ("plateau", "paper"):
                self._schedule(state, sum(epoch_merits) / len(epoch_merits), sum(epoch_f) / len(epoch_f),
                               sum(epoch_V) / len(epoch_V), epoch, schedule)
            state["epochs_done"] = epoch + 1
            if use_bar:
                epochs.set_postfix(f=f"{history[-1]['f']:.4f}", V=f"{history[-1]['V']:.2e}", beta=f"{state['beta']:.1e}")
            if self.verbose:
                logger.info("epoch %d: f=%.5f V=%.3e tau=%.3e beta=%.2e", epoch, history[-1]["f"], history[-1]["V"], state["tau"], state["beta"])

        state["offset"] = offset.tolist()
        self._last_params = flat_parameters(params)  # where training stands (resume continues here)
        polished = 0
        if status == "diverged":
            warnings.warn(f"SQP: training diverged at iteration {state['iteration']} (non-finite or exploding "
                          "objective); the best iterate seen before is returned", DivergedWarning, stacklevel=2)
        elif not full_batch and m and self.polish_iterations and status == "max_epochs":
            offset, status, polished = self._polish(model, params, loss_fn, cons, data, lower, upper, offset, state,
                                                    v, tracker, history, tail)
        return self._finish(model, params, loss_fn, cons, data, lower, upper, offset, state, tracker, history, status,
                            last=state["iteration"] + polished)

    def constraint_mode(self, full_batch: bool) -> str:
        """``constraint_batch`` resolved: "auto" is "full" in full-batch mode, else "batch"."""
        if self.constraint_batch != "auto":
            return self.constraint_batch
        return "full" if full_batch else "batch"

    def schedule_for(self, full_batch: bool) -> str:
        """``lr_schedule`` resolved: "auto" is "plateau" in full-batch mode, else "rsqrt"."""
        kind = self.schedule_
        if kind != "auto":
            return kind
        return "plateau" if full_batch else "rsqrt"

    def _offer_all_rows(self, model, params, loss_fn, cons, data, tracker, state) -> None:
        """Mini-batch candidate (:meth:`_evaluate_all` on all rows) for the returned model; a
        sane one (finite objective within ``10 |f_0|``, ``f_0`` the start's) becomes the
        divergence guard's anchor."""
        f_all, c_all = self._evaluate_all(model, loss_fn, cons, data)
        tracker.offer(params, f_all, c_all, state["iteration"])
        first = state.setdefault("f_first", f_all)
        if math.isfinite(f_all) and f_all <= 10.0 * abs(first) + 1e-8:
            self._anchor = (state["iteration"], flat_parameters(params))

    def _offer_and_test_kkt(self, der, params, lower, upper, offset, tracker, state) -> bool:
        """Offer a full-data iterate to ``tracker``; True (and offered as preferred) when it
        is a feasible KKT point (:meth:`_at_kkt_point`), which ends training."""
        tracker.offer(params, der.f, der.c_exact, state["iteration"])
        if not self._at_kkt_point(der, lower, upper, offset, tracker, state):
            return False
        tracker.offer(params, der.f, der.c_exact, state["iteration"], prefer=True)
        return True

    def _polish(self, model, params, loss_fn, cons, data, lower, upper, offset, state, v, tracker, history,
                tail) -> tuple[torch.Tensor, str, int]:
        """Full-batch end-game of a mini-batch run (``polish_iterations``).

        Starts from the tail average of the last epoch when it is finite, runs full-data SQP
        iterations on copies of the engine state (``tau``, ``xi``, ``beta``, the Hessian
        accumulator), offers every iterate to ``tracker`` and stops at a feasible KKT point.
        The exact rows are step functions of the outputs, so a smooth step that meets the
        calibrated bound can leave a few rows on the wrong side; the polish therefore adds
        the exact violation of every infeasible iterate to a running tightening of the
        working bounds, halved at every feasible one (integral action without wind-up:
        measured on Dutch, MLP 32, batch 256, balanced constraint batches of 1024, seed 2, the
        polish otherwise stalled at a DI row violation of 2.6e-4; without the halving,
        ACS-Colorado runs overshot to DI 0.84 for a bound of 0.8).
        Past ``polish_iterations`` it goes on (up to ``POLISH_EXTENSION`` times as many)
        while the iterate is still infeasible and its exact violation still falls
        (:func:`_still_restoring`): measured on Dutch (MLP 32, batch 256, balanced
        constraint batches of 1024, seed 1), 50 iterations took the largest row violation
        from 0.014 to 1e-4, short of feasible, and the run returned its starting point.
        The checkpoint (:meth:`state_dict`) keeps the stochastic phase's best iterate.
        Returns the calibration offset, the status and the number of polish iterations.
        """
        self._tracker = copy.copy(tracker)  # the checkpoint's best: the stochastic phase's
        st, vv = dict(state), v.clone()
        if tail is not None and tail.count:
            average = tail.mean()
            if bool(torch.isfinite(average).all()):
                assign_parameters(params, average)
        status = "max_epochs"
        violations: list[float] = []  # exact violation of every polish iterate
        push = torch.zeros_like(offset)  # accumulated exact violations (integral action)
        for k in range(POLISH_EXTENSION * int(self.polish_iterations)):
            der = self._derivatives(model, params, loss_fn, cons, data, data)
            if not math.isfinite(der.f) or not bool(torch.isfinite(der.g).all()):
                break
            if self._offer_and_test_kkt(der, params, lower, upper, offset, tracker, st):
                status = "converged"
                break
            violations.append(float(row_violations(der.c_exact, lower, upper).max()) if der.c_exact is not None
                              else 0.0)
            if k >= int(self.polish_iterations) and not _still_restoring(violations, self.feasibility_tol):
                break
            if self.calibrate_exact and der.c_exact is not None:
                offset = self._calibrate(offset, der.c_exact - der.c, lower, upper)
            if der.c_exact is not None:  # integral action: what is still violated tightens the target
                excess = (der.c_exact - upper).clamp(min=0) - (lower - der.c_exact).clamp(min=0)
                push = push + excess if bool((excess != 0).any()) else 0.5 * push  # decays once feasible
            record = self._iterate(params, der, vv, lower - offset - push, upper - offset - push, st, model, loss_fn,
                                   cons, data, data, bounds=(lower, upper))
            record["epoch"] = st["epochs_done"]
            record["phase"] = "polish"
            history.append(record)
            st["iteration"] += 1
        return offset, status, st["iteration"] - state["iteration"]

    def _finish(self, model, params, loss_fn, cons, data, lower, upper, offset, state, tracker, history,
                status, last: int) -> FitResult:
        """Return the best iterate (:class:`solvers.outcome.BestIterate`), measured on all rows.

        The final iterate is a candidate too; the chosen parameters are written back into
        the model, its KKT residuals are measured on the full training data, a closing
        history record describes exactly the returned model, and a
        :class:`solvers.outcome.BoundWarning` names any row it violates.
        """
        m = int(lower.numel())
        kkt = None
        if status != "diverged" or tracker.best is None:
            # full-data derivatives (all-reduced when data-parallel), reused below if this
            # final iterate is the one returned
            der = self._full_derivatives(model, params, loss_fn, cons, data)
            if der is not None and tracker.offer(params, der.f, der.c_exact, last):
                kkt = self._kkt(der, lower - offset, upper - offset)
        chosen = tracker.restore(params)
        if kkt is None:
            kkt = self._final_check(model, params, loss_fn, cons, data, lower - offset, upper - offset, state)
        state["final_kkt"], state["final_violation"] = kkt["stationarity"], kkt["V"]
        c_exact = chosen.c_exact if chosen is not None else None
        row_viol = chosen.row_violations if chosen is not None else torch.zeros(0, dtype=torch.float64)
        feasible = chosen is not None and tracker.feasible(row_viol)
        stationary = kkt["stationarity"] <= self.tol
        converged = bool(feasible and stationary and status != "diverged")
        termination = status
        if status not in ("diverged", "stopped_by_callback"):
            status = "converged" if converged else ("infeasible" if not feasible else "not_stationary")
        unmet = warn_unmet("SQP", c_exact, lower, upper, cons.row_names, self.feasibility_tol, stacklevel=4)
        warn_if_start("SQP", chosen, self._start_iteration, last, self.feasibility_tol, stacklevel=4)
        returned = chosen.iteration if chosen is not None else last
        history.append({
            "iteration": last, "epoch": state["epochs_done"], "returned": returned, "f": kkt["f"],
            "c": kkt["c"], "c_exact": c_exact.tolist() if c_exact is not None else [],
            "V": kkt["V"], "V_exact": float(row_viol.sum()), "V_exact_max": float(row_viol.max()) if m else 0.0,
            "kkt": kkt["stationarity"], "complementarity": kkt["complementarity"], "qp_status": "final",
            "tau": state["tau"], "xi": state["xi"], "beta": state["beta"], "active": kkt["active"],
        })
        info = {"tau": state["tau"], "xi": state["xi"], "beta": state["beta"], "L": state["L"],
                "Gamma": state["Gamma"], "kkt": kkt["stationarity"], "stationarity": kkt["stationarity"],
                "complementarity": kkt["complementarity"], "violation": float(row_viol.sum()),
                "max_row_violation": float(row_viol.max()) if m else 0.0,
                "violations": row_viol.tolist(), "c_exact": c_exact.tolist() if c_exact is not None else [],
                "feasible": bool(feasible), "stationary": bool(stationary), "termination": termination,
                "returned_iteration": returned, "iterations": last, "unmet_rows": unmet,
                "bound_offset": offset.tolist(), "row_names": cons.row_names,
                "restarts": state.get("restarts", 0), "relaxed_steps": sum(r.get("qp_status") == "relaxed" for r in history.records)}
        return FitResult(model=model, history=history, status=status, converged=converged, info=info)

    def state_dict(self) -> dict:
        """The engine's state after :meth:`fit`, to continue training with ``fit(..., resume=)``.

        Returns
        -------
        dict
            ``format`` (1), ``state`` (a copy of :attr:`state_`: ``tau``, ``xi``, ``beta``,
            ``L``, ``Gamma``, ``merit_avg``, ``since_change``, ``iteration``,
            ``warned_relaxed``, ``epochs_done``), ``hessian_v`` (a copy of the second-moment
            accumulator ``v`` behind ``H = diag(sqrt(v + mu))``), ``generator`` (the state of
            the sampling generator), ``n_rows`` (constraint rows), ``last_params`` (the last
            iterate, from which a resumed fit continues: the model itself holds the returned,
            best iterate) and ``best`` (that iterate, so that the resumed run still returns
            the best of both parts). Only tensors and
            Python scalars: ``torch.save`` it and read it back with
            ``torch.load(path, weights_only=True)``. ``epochs_done`` counts completed
            epochs: after a stop by a callback, resuming continues from the last
            iteration but numbers the interrupted epoch again.

        Raises
        ------
        RuntimeError
            Before the first :meth:`fit`.
        """
        if not hasattr(self, "_v"):
            raise RuntimeError("state_dict: the engine has no state yet; call fit() first")
        return {
            "format": _CHECKPOINT_FORMAT,
            "state": dict(self.state_),
            "hessian_v": self._v.detach().clone(),
            "generator": self._generator.get_state(),
            "n_rows": int(self._n_rows),
            "last_params": self._last_params.clone(),
            "best": None if self._tracker.best is None else {
                "params": self._tracker.best.params.clone(), "f": float(self._tracker.best.f),
                "c_exact": self._tracker.best.c_exact.clone(), "iteration": int(self._tracker.best.iteration)},
        }

    # ------------------------------------------------------------------ pieces
    def _balanced_sampler(self, data: Any, strata: Any, n: int, gen: torch.Generator) -> BalancedSampler:
        strata = getattr(data, "strata", None) if strata is None else torch.as_tensor(strata)
        if strata is None:
            raise ValueError("strata: constraint_batch='balanced' needs data.strata or a strata= argument")
        if len(strata) != n:
            raise ValueError(f"strata: expected {n} entries, got {len(strata)}")
        n_strata = int(torch.unique(strata).numel())
        total = self.constraint_batch_size or self.batch_size
        return BalancedSampler(strata, max(1, int(total) // n_strata), gen)

    def _derivative_oracle(self, params: list[torch.Tensor], constraints: Any) -> DerivativeOracle:
        """:class:`solvers.distributed.AllReduceDerivatives` when ``distributed`` resolves to
        True (options checked, parameters broadcast from rank 0), else
        :class:`solvers.derivatives.LocalDerivatives`."""
        if not distributed_active(self.distributed):
            return LocalDerivatives(self.jacobian)
        check_data_parallel_options(self.batch_size, self.constraint_batch, constraints)
        logger.debug("data-parallel SQP: rank %d of %d", dist.get_rank(), dist.get_world_size())
        broadcast_parameters(params)
        return AllReduceDerivatives(self.jacobian)

    def _derivatives(self, model, params, loss_fn, cons, obj_batch, con_batch) -> Derivatives:
        """f, g on the objective batch; c, J (and exact c) on the constraint batch, from the
        oracle :meth:`fit` picked."""
        return self._oracle(model, params, loss_fn, cons, obj_batch, con_batch)

    def _hessian_diag(self, g: torch.Tensor, v: torch.Tensor, first: bool) -> torch.Tensor:
        g2 = g.detach() ** 2
        if self.hessian == "adagrad":
            v.add_(g2)
        elif first:
            v.copy_((1.0 - self.beta2) * g2)
        else:
            v.mul_(self.beta2).add_((1.0 - self.beta2) * g2)
        return torch.sqrt(v + self.hessian_shift)

    def _solve_qp(self, der: Derivatives, h: torch.Tensor, lower: torch.Tensor, upper: torch.Tensor, state: dict):
        """Solve the SQP subproblem; relax the bounds if the linearisation is infeasible."""
        g64, h64, J64 = der.g.to(torch.float64), h.to(torch.float64), der.J.to(torch.float64)
        lo, hi = lower - der.c, upper - der.c
        res = diagonal_qp(g64, h64, J64, lo, hi)
        if res.status == "optimal":
            return res, "normal", (lo, hi)
        relax = least_violation_bounds(lo, hi, J64, h64)
        lo, hi = relax.lo, relax.hi
        res = diagonal_qp(g64, h64, J64, lo, hi)
        if res.status != "optimal":
            raise RuntimeError(f"SQP: relaxed QP subproblem failed with status {res.status!r} at iteration {state['iteration']}")
        if not state["warned_relaxed"]:
            warnings.warn(
                "SQP: the linearised constraints were infeasible; a relaxed step was taken "
                "(least-violation bounds). See history column 'qp_status'.", SQPWarning, stacklevel=3)
            state["warned_relaxed"] = True
        return res, "relaxed", (lo, hi)

    def _iterate(self, params, der, v, lower, upper, state, model, loss_fn, cons, obj_batch, con_batch,
                 bounds=None, stochastic: bool = False) -> dict:
        """One SQP step on the working bounds ``lower``/``upper`` (the user's bounds shifted by
        the exact calibration); ``bounds`` are the user's bounds, for the exact violation.

        ``stochastic`` (derivatives from a mini-batch or a balanced constraint batch): the
        step is kept in a trust region. A small, noisy constraint Jacobian (a sharp
        smoothed step on a balanced batch: few rows near the threshold carry all of it)
        makes the linearised feasible set lie far away, so the QP's multipliers and with
        them ``d = -(g + J'y) / h`` explode (measured on Dutch, MLP 32, balanced batches:
        ``||d||`` 1.3 -> 55 in two steps, outputs saturate, the loss grows by orders of
        magnitude). ``d`` is scaled down to ``||d|| <= TRUST_RATIO * ||g / h||`` (the
        unconstrained step's length) and the restoration step ``v`` to ``||v|| <= ||d||``."""
        true_lower, true_upper = bounds if bounds is not None else (lower, upper)
        first = state["iteration"] == 0
        h = self._hessian_diag(der.g, v, first)
        t0 = time.perf_counter()
        m = int(der.c.numel())
        if m:
            res, qp_status, qp_bounds = self._solve_qp(der, h, lower, upper, state)
            d = res.d.to(der.g.dtype)
            y = res.multipliers
            # "u3" = upper side of row 3 in the working set, "l0" = lower side of row 0
            active = [("u" if int(res.active[i]) > 0 else "l") + str(int(i)) for i in torch.nonzero(res.active).reshape(-1)]
        else:
            d = -der.g / h
            y = torch.zeros(0, dtype=torch.float64)
            qp_status, active = "unconstrained", []
        if stochastic and m:
            radius = TRUST_RATIO * float((der.g / h).norm())
            norm_d = float(d.norm())
            if norm_d > radius > 0:
                d = d * (radius / norm_d)
        t_qp = time.perf_counter() - t0

        d64, g64, h64 = d.to(torch.float64), der.g.to(torch.float64), h.to(torch.float64)
        V = float(violation(der.c, lower, upper)) if m else 0.0
        V_lin = float(violation(der.c + der.J.to(torch.float64) @ d64, lower, upper)) if m else 0.0
        red = V - V_lin
        gd = float(g64 @ d64)
        dHd = float((h64 * d64 * d64).sum())
        dnorm2 = float(d64 @ d64)
        den = gd + max(dHd, 0.0)
        tau, xi = state["tau"], state["xi"]
        tau_trial = (1.0 - self.sigma) * red / den if (den > 0 and red > 0) else math.inf
        if tau > tau_trial:
            tau = max(self.tau_min, min((1.0 - self.epsilon) * tau, tau_trial))
        dl = -tau * gd + red
        if dnorm2 > 0:
            xi_trial = dl / (tau * dnorm2) if dl > 0 else self.xi_min
            if xi > xi_trial:
                xi = max(self.xi_min, min((1.0 - self.epsilon) * xi, xi_trial))
        state["tau"], state["xi"] = tau, xi

        beta = state["beta"]
        if self.step == "fixed":
            alpha = beta
        else:
            if state["L"] is None:
                state["L"], state["Gamma"] = self._lipschitz(model, params, loss_fn, cons, obj_batch, con_batch, der)
            alpha = self._adaptive_step(beta, tau, xi, dl, V, dnorm2, state["L"], state["Gamma"])

        step = alpha * d
        norm_v = 0.0
        if m and self.feasibility_restoration and V > 0 and alpha < 1.0:
            v_step = self._normal_step(h, der.J, qp_bounds)
            if v_step is not None:
                norm_v = float(v_step.norm())
                if stochastic and norm_v > math.sqrt(dnorm2):
                    v_step = v_step * (math.sqrt(dnorm2) / norm_v)
                    norm_v = math.sqrt(dnorm2)
                step = step + (1.0 - alpha) * v_step.to(d.dtype)
        _shift(params, step, 1.0)

        kkt = float((g64 + der.J.to(torch.float64).T @ y).abs().max()) if m else float(g64.abs().max())
        state["last_kkt"] = kkt
        exact_rows = (row_violations(der.c_exact, true_lower, true_upper) if der.c_exact is not None
                      else torch.zeros(0, dtype=torch.float64))
        return {
            "iteration": state["iteration"],
            "f": der.f,
            "c": der.c.tolist(),
            "c_exact": der.c_exact.tolist() if der.c_exact is not None else [],
            "V": V,
            "V_exact": float(exact_rows.sum()),
            "V_exact_max": float(exact_rows.max()) if exact_rows.numel() else 0.0,
            "merit": tau * der.f + V,
            "tau": tau,
            "xi": xi,
            "alpha": alpha,
            "beta": beta,
            "norm_d": math.sqrt(dnorm2),
            "norm_v": norm_v,
            "active": active,
            "qp_status": qp_status,
            "kkt": kkt,
            "t_forward": der.t_forward,
            "t_jacobian": der.t_jacobian,
            "t_qp": t_qp,
        }

    @staticmethod
    def _normal_step(h: torch.Tensor, J: torch.Tensor, bounds: tuple) -> torch.Tensor | None:
        """``v = argmin 1/2 v'Hv  s.t.  lo <= J v <= hi``: the least-``H``-norm step onto the
        linearised feasible set (``lo = l - c``, ``hi = u - c``, relaxed if they were)."""
        h64 = h.to(torch.float64)
        res = diagonal_qp(torch.zeros_like(h64), h64, J.to(torch.float64), bounds[0], bounds[1])
        return res.d if res.status == "optimal" else None

    def _adaptive_step(self, beta, tau, xi, dl, V, dnorm2, L, Gamma) -> float:
        """[B21] Alg. 3.1 step size, capped at 1."""
        if dnorm2 == 0.0:
            return 0.0
        lip = tau * L + Gamma
        D = lip * dnorm2
        a_min = 2.0 * (1.0 - self.eta) * beta * xi * tau / lip
        a_max = a_min + self.theta * beta**2
        a_hat = 2.0 * (1.0 - self.eta) * beta * dl / D
        a_tilde = a_hat - 4.0 * V / D
        if a_hat < 1.0:
            alpha = min(max(a_hat, a_min), a_max)
        elif a_tilde <= 1.0 <= a_hat:
            alpha = 1.0
        else:
            alpha = min(max(a_tilde, a_min), a_max)
        return min(alpha, 1.0)

    def _lipschitz(self, model, params, loss_fn, cons, obj_batch, con_batch, der, displacement: float = 1e-4):
        """Finite-difference estimates of the Lipschitz constants of g and J along a
        random unit direction: ``L = ||g(w + e u) - g(w)|| / e``,
        ``Gamma = sum_i ||J_i(w + e u) - J_i(w)|| / e``."""
        gen = torch.Generator().manual_seed(int(self.seed) + 1)
        u = torch.randn(der.g.numel(), generator=gen, dtype=der.g.dtype)
        u = u / u.norm()
        _shift(params, u, displacement)
        try:
            der2 = self._derivatives(model, params, loss_fn, cons, obj_batch, con_batch)
        finally:
            _shift(params, u, -displacement)
        L = float((der2.g - der.g).norm()) / displacement
        Gamma = float((der2.J - der.J).norm(dim=1).sum()) / displacement if der.J.numel() else 0.0
        return max(L, 1e-8), max(Gamma, 0.0)

    @property
    def schedule_(self) -> str:
        """``lr_schedule`` as one of :data:`LR_SCHEDULES` (True is "paper", False "none")."""
        if isinstance(self.lr_schedule, bool):
            return "paper" if self.lr_schedule else "none"
        return self.lr_schedule

    def _schedule(self, state: dict, merit: float, f: float, V: float, epoch: int, kind: str) -> None:
        """The per-epoch learning-rate control (``lr_schedule`` "plateau" or "paper")."""
        if kind == "paper":
            self._adjust_learning_rate(state, merit, epoch)
        elif kind == "plateau":
            self._plateau(state, f, V, epoch)

    def _plateau(self, state: dict, f: float, V: float, epoch: int) -> None:
        """Halve ``beta`` (``lr_decay``) when the merit stops improving, never below
        ``lr_floor * lr``.

        The merit ``tau f + V`` of the epoch (means over its iterations) is compared, at the
        CURRENT merit parameter ``tau``, with the best epoch so far; no new best (beyond a
        relative :data:`PLATEAU_RTOL`) for ``lr_patience`` consecutive epochs is a plateau. A
        run that is still improving keeps its step; a run that oscillates around the
        constraint boundary gets smaller steps, down to the floor (training never freezes).
        """
        tau = state["tau"]
        best = state.get("plateau_best")
        merit = tau * f + V
        if best is None or merit < (tau * best[0] + best[1]) - PLATEAU_RTOL * abs(tau * best[0] + best[1]):
            state["plateau_best"], state["plateau_wait"] = [f, V], 0
            return
        state["plateau_wait"] = state.get("plateau_wait", 0) + 1
        floor = self.lr_floor * float(self.lr)
        if state["plateau_wait"] >= self.lr_patience and state["beta"] > floor:
            state["beta"] = max(floor, state["beta"] * self.lr_decay)
            state["plateau_wait"] = 0
            logger.debug("epoch %d: merit plateau, learning rate reduced to %.3e", epoch, state["beta"])

    def _adjust_learning_rate(self, state: dict, merit: float, epoch: int) -> None:
        """[SQP] Alg. 2: divide beta by ``lr_factor`` when the merit's moving average stops
        decreasing, after ``lr_kmin`` epochs and at least ``lr_interval`` epochs apart."""
        avg = state["merit_avg"]
        avg = merit if avg is None else self.lr_weight * merit + (1.0 - self.lr_weight) * avg
        state["merit_avg"] = avg
        if epoch >= self.lr_kmin and state["beta"] >= self.lr_min:
            if avg <= merit and state["since_change"] >= self.lr_interval:
                state["beta"] /= self.lr_factor
                state["since_change"] = 0
                logger.debug("epoch %d: learning rate reduced to %.3e", epoch, state["beta"])
            state["since_change"] += 1

    def _blew_up(self, f: float, state: dict, tracker: BestIterate, params, on_all_rows: bool = True) -> bool:
        """Divergence guard: an objective above ``10 |f_0| + 1e-8`` (``f_0`` the first one on
        all rows) sends the parameters back to the best iterate and halves ``beta``. With
        mini-batches ``f`` is the batch objective; its noise is far below a factor of 10
        unless the run is blowing up (the starting point is always a candidate there)."""
        if on_all_rows:
            first = state.setdefault("f_first", f)
        else:
            first = state.get("f_first")
            if first is None:
                return False
        if f <= 10.0 * abs(first) + 1e-8 or tracker.best is None:
            return False
        anchor = self._anchor
        if on_all_rows or anchor is None:
            tracker.restore(params)
            back_to = tracker.best.iteration
        else:  # mini-batch: the last epoch-end iterate (the best one may be the untrained start)
            assign_parameters(params, anchor[1])
            back_to = anchor[0]
        state["beta"] *= 0.5
        state["beta_scale"] = state.get("beta_scale", 1.0) * 0.5
        state["restarts"] = state.get("restarts", 0) + 1
        logger.warning("SQP: objective %.3g at iteration %d exceeds 10x the initial %.3g; back to iteration %d "
                       "with learning rate %.3g", f, state["iteration"], first, back_to, state["beta"])
        return True

    def _at_kkt_point(self, der, lower, upper, offset, tracker, state) -> bool:
        """Early stop test on full-data derivatives: every exact row within
        ``feasibility_tol`` and stationarity (:meth:`_kkt`) within ``tol``. The unit-metric
        QP is solved only once the previous step's residual is within ``10 tol``."""
        if state.get("last_kkt", math.inf) > 10.0 * self.tol and state["iteration"] > 0:
            return False
        if der.c_exact is not None and not tracker.feasible(row_violations(der.c_exact, lower, upper)):
            return False
        return self._kkt(der, lower - offset, upper - offset)["stationarity"] <= self.tol

    def _evaluate_all(self, model, loss_fn, cons, data) -> tuple[float, torch.Tensor | None]:
        """Objective and exact constraint rows of the current model on all training rows
        (one forward pass, no gradients)."""
        with torch.no_grad():
            out = model(data.X).reshape(-1)
            f = float(loss_fn(out, data))
            c = cons.exact(out, data).reshape(-1).to(torch.float64) if cons.n_rows else None
        return f, c

    def _calibrate(self, offset: torch.Tensor, gap: torch.Tensor, lower: torch.Tensor,
                   upper: torch.Tensor) -> torch.Tensor:
        """Exact calibration of the working bounds: ``b <- (1 - w) b + w (c_exact - c)``.

        The smooth rows ``c`` differ from the exact rows by a bias that changes slowly
        with the model; the QP is solved for ``l - b <= c + J d <= u - b``, so that the
        EXACT rows meet ``l <= c_exact <= u``. Rows with no finite bound keep ``b = 0``.
        """
        w = self.calibration_weight
        finite = torch.isfinite(lower) | torch.isfinite(upper)
        gap = torch.where(finite & torch.isfinite(gap), gap, torch.zeros_like(gap))
        return (1.0 - w) * offset + w * gap

    def _final_check(self, model, params, loss_fn, cons, data, lower, upper, state) -> dict:
        """KKT residuals of the returned iterate on the full data, for the working bounds.

        Stationarity is ``||d||_inf`` for ``d`` the step of the unit-metric QP
        ``min g'd + 1/2 d'd  s.t.  l <= c + J d <= u``: at its solution
        ``d = -(g + J'y)``, so it is the projected-gradient residual ``||g + J'y||_inf``, zero
        exactly at a KKT point. Complementarity is ``max_i |y_i| * dist(c_i, active side)``.
        """
        der = self._full_derivatives(model, params, loss_fn, cons, data)
        if der is None:
            return {"stationarity": math.inf, "complementarity": math.inf, "f": math.nan, "c": [], "V": math.nan,
                    "active": []}
        kkt = self._kkt(der, lower, upper)
        state["final_kkt"], state["final_violation"] = kkt["stationarity"], kkt["V"]
        return kkt

    def _full_derivatives(self, model, params, loss_fn, cons, data) -> Derivatives | None:
        """Derivatives on all training rows, None when they are not finite."""
        try:
            der = self._derivatives(model, params, loss_fn, cons, data, data if cons.n_rows else None)
        except RuntimeError:  # pragma: no cover - reported through status
            return None
        return der if math.isfinite(der.f) and bool(torch.isfinite(der.g).all()) else None

    @staticmethod
    def _kkt(der: Derivatives, lower: torch.Tensor, upper: torch.Tensor) -> dict:
        """KKT residuals at the point where ``der`` was taken (see :meth:`_final_check`)."""
        m = int(der.c.numel())
        V = float(violation(der.c, lower, upper)) if m else 0.0
        comp, active = 0.0, []
        if m:
            h = torch.ones_like(der.g, dtype=torch.float64)
            res = diagonal_qp(der.g.double(), h, der.J.double(), lower - der.c, upper - der.c)
            if res.status == "optimal":
                stat = float(res.d.abs().max())
                y = res.multipliers.to(torch.float64)
                slack = torch.where(y > 0, upper - der.c, der.c - lower)
                slack = torch.where(torch.isfinite(slack), slack.abs(), torch.zeros_like(slack))
                comp = float((y.abs() * slack).max())
                active = [("u" if int(res.active[i]) > 0 else "l") + str(int(i))
                          for i in torch.nonzero(res.active).reshape(-1)]
            else:  # the linearisation is infeasible: not a KKT point of this problem
                stat, comp = math.inf, math.inf
        else:
            stat = float(der.g.abs().max())
        return {"stationarity": stat, "complementarity": comp, "f": der.f, "c": der.c.tolist(), "V": V,
                "active": active}


_CHECKPOINT_FORMAT = 1
_STATE_KEYS = ("tau", "xi", "beta", "L", "Gamma", "merit_avg", "since_change", "iteration", "warned_relaxed",
               "epochs_done")


def _restore_checkpoint(resume: Any, v: torch.Tensor, gen: torch.Generator, n_rows: int) -> dict:
    """Check a :meth:`StochasticSQP.state_dict` checkpoint against this problem, load its
    Hessian accumulator into ``v`` and its generator state into ``gen``; return the state."""
    if not isinstance(resume, dict) or resume.get("format") != _CHECKPOINT_FORMAT:
        found = resume.get("format") if isinstance(resume, dict) else type(resume).__name__
        raise ValueError(f"resume: expected a StochasticSQP.state_dict() checkpoint (format {_CHECKPOINT_FORMAT}), "
                         f"got {found!r}")
    state = resume.get("state")
    missing = [k for k in _STATE_KEYS if not isinstance(state, dict) or k not in state]
    if missing:
        raise ValueError(f"resume: the checkpoint's state lacks {missing}")
    _check_resumed_state(state)
    hv = resume.get("hessian_v")
    if not isinstance(hv, torch.Tensor) or hv.numel() != v.numel():
        size = hv.numel() if isinstance(hv, torch.Tensor) else type(hv).__name__
        raise ValueError(f"resume: the checkpoint's Hessian accumulator has {size} entries but the model has "
                         f"{v.numel()} trainable parameters")
    if resume.get("n_rows") != n_rows:
        raise ValueError(f"resume: the checkpoint was taken with {resume.get('n_rows')!r} constraint rows, "
                         f"these constraints have {n_rows}")
    if not bool((torch.isfinite(hv) & (hv >= 0)).all()):
        raise ValueError("resume: the checkpoint's Hessian accumulator has negative or non-finite entries")
    v.copy_(hv.reshape(-1).to(v.dtype))
    gen.set_state(resume["generator"].clone())
    return dict(state)


def _check_resumed_state(state: dict) -> None:
    """The values of a checkpoint's state, checked like the constructor arguments they
    continue: positive finite ``tau``, ``xi``, ``beta``; positive finite or None ``L``,
    ``Gamma``; finite or None ``merit_avg``; non-negative integers ``since_change``,
    ``iteration``, ``epochs_done``; a flag ``warned_relaxed``."""
    try:
        for name in ("tau", "xi", "beta"):
            positive_float(state[name], name)
        for name in ("L", "Gamma"):
            if state[name] is not None:
                positive_float(state[name], name)
        if state["merit_avg"] is not None:
            finite_float(state["merit_avg"], "merit_avg")
        for name in ("since_change", "iteration", "epochs_done"):
            positive_int(state[name], name, allow_zero=True)
        check_flag(state["warned_relaxed"], "warned_relaxed")
    except ValueError as exc:
        raise ValueError(f"resume: invalid checkpoint state, {exc}") from None


def _resume_iterates(resume: dict, params: list[torch.Tensor], tracker: BestIterate) -> None:
    """Continue from a checkpoint's LAST iterate (the model passed in holds the returned, best
    one) and carry its best iterate over into ``tracker``."""
    last = resume.get("last_params")
    total = sum(p.numel() for p in params)
    if last is not None:
        if not isinstance(last, torch.Tensor) or last.numel() != total:
            raise ValueError(f"resume: the checkpoint's last iterate has "
                             f"{last.numel() if isinstance(last, torch.Tensor) else type(last).__name__} entries but "
                             f"the model has {total} trainable parameters")
        if not bool(torch.isfinite(last).all()):
            raise ValueError("resume: the checkpoint's last iterate has non-finite entries")
        assign_parameters(params, last)
    best = resume.get("best")
    if isinstance(best, dict):
        tracker.offer([best["params"]], float(best["f"]), best["c_exact"], int(best["iteration"]))


#: The polish may run this many times ``polish_iterations`` while it still restores feasibility.
POLISH_EXTENSION = 4
#: Iterates over which the polish must reduce the largest exact row violation to go on.
_RESTORING_WINDOW = 10


def _still_restoring(violations: Sequence[float], tol: float) -> bool:
    """True while the last iterate is infeasible (largest row violation above ``tol``) and
    that violation fell by at least 1% over the last ``_RESTORING_WINDOW`` iterates."""
    if not violations or violations[-1] <= tol:
        return False
    if len(violations) <= _RESTORING_WINDOW:
        return True
    return violations[-1] < 0.99 * violations[-1 - _RESTORING_WINDOW]


class _TailAverage:
    """Running mean of the iterates of one epoch (Polyak averaging of the tail)."""

    def __init__(self, params: list[torch.Tensor]) -> None:
        self.total = torch.zeros(sum(p.numel() for p in params), dtype=torch.float64)
        self.count = 0

    def add(self, params: list[torch.Tensor]) -> None:
        self.total += flat_parameters(params).to(torch.float64)
        self.count += 1

    def mean(self) -> torch.Tensor:
        return self.total / max(self.count, 1)


def _shift(params: list[torch.Tensor], u: torch.Tensor, scale: float) -> None:
    with torch.no_grad():
        offset = 0
        for p in params:
            k = p.numel()
            p.add_(u[offset : offset + k].view_as(p), alpha=scale)
            offset += k


class DistributedSQP(StochasticSQP):
    """:class:`StochasticSQP` that insists on data-parallel training over the row shards of
    an initialised ``torch.distributed`` process group (:mod:`solvers.distributed`).

    Same parameters; ``batch_size`` must be None and ``constraint_batch`` "full" (or
    "auto"). Only the derivative oracle differs from a local fit
    (:class:`solvers.distributed.AllReduceDerivatives`): one all-reduce per iteration makes
    ``f``, ``g``, ``c``, ``J`` and the exact ``c`` those of the union of the shards, so the QP,
    merit, step and learning-rate rules run identically on every rank. ``StochasticSQP``
    itself switches to that oracle when the process group is initialised
    (``distributed=None``).
    """

    def fit(self, model: nn.Module, data: Any, **fit_args: Any) -> FitResult:
        """:meth:`StochasticSQP.fit` on this rank's shard; every rank must call it with the
        same options, the same constraints and its own disjoint, non-empty shard.

        Raises
        ------
        ValueError
            ``distributed=False``, no initialised process group, ``batch_size`` set,
            ``constraint_batch`` not "full", or a constraint without
            ``partial_sums``/``from_sums``.
        """
        if self.distributed is False:
            raise ValueError("distributed: DistributedSQP needs distributed=None or True, got False")
        distributed_active(True)
        return super().fit(model, data, **fit_args)
