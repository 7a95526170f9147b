"""The stochastic SQP engine: :class:`StochasticSQP` (options and their checks, the epoch and
mini-batch loop with its objective and constraint batches, the divergence-guard anchor,
the engine checkpoint). One iteration is :func:`solvers.sqp.steps.sqp_step`; the
learning-rate schedules, the end-game, the checkpoint format and the data-parallel
:class:`solvers.sqp.data_parallel.DistributedSQP` have modules of their own."""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import logging
import math
import warnings
from dataclasses import dataclass
from functools import partial
from typing import Any, Callable, Iterable

import torch
from torch import nn

from solvers.contract import cost_on_all_rows
from solvers.curvature import curvature_model, gauss_newton_diagonal, metric_spread
from solvers.derivatives import Derivatives
from solvers.history import (COLUMN_DRIFT, COLUMN_QP_STATUS, COLUMN_REFRESHED, COLUMN_SCREENED, QP_RELAXED, FitResult,
                             History)
from solvers.losses import LossFn, best_constant_output, check_targets, get_loss, loss_name
from solvers.outcome import BestIterate, DivergedWarning, learned_classifier
from solvers.problem import (Constraint, as_constraint_set, calibrated_spread, check_dataset,
                             check_outputs_differentiable, eval_mode, flat_parameters, is_network, row_violations,
                             trainable_parameters)
from solvers.sampling import BalancedSampler, covers_all_rows, minibatches
from solvers.sqp.checkpoint import checkpoint, restore_checkpoint, resume_iterates, resume_snapshot, resumed_spreads
from solvers.distributed import AllReduceDerivatives, all_reduce_vector, largest_shard
from solvers.sqp.oracles import derivative_oracle
from solvers.sqp.endgame import (MAX_RESTARTS, Anchor, TailAverage, all_rows_blew_up, blew_up, finish, loss_ceiling,
                                 polish, polish_last)
from solvers.sqp.optimality import evaluate_all, offer_and_test_kkt
from solvers.sqp.options import CONSTRAINT_BATCHES, OPTION_NAMES, SQPOptions
from solvers.sqp.schedules import end_of_epoch, rsqrt_beta, stalled
from solvers.sqp.screening import RowScreen
from solvers.sqp.snapshot import ConstraintSnapshot, drift_tolerances, refresh_steps
from solvers.sqp.state import FitProblem, ResolvedFit, SQPState
from solvers.sqp.steps import calibrate, sqp_step
from solvers.progress import epoch_logs, progress

__all__ = ["CONSTRAINT_BATCHES", "DEFAULT_LR", "FULL_BATCH_EPOCHS", "FULL_BATCH_SHIFT", "GAUSS_NEWTON_SHIFT",
           "LINEAR_MINIBATCH_EPOCHS", "LINEAR_MINIBATCH_LR", "LINEAR_MINIBATCH_STEPS", "MINIBATCH_MIN_EPOCHS",
           "MINIBATCH_NETWORK_LR", "MINIBATCH_NETWORK_MIN_BATCH", "MINIBATCH_SHIFT", "MINIBATCH_STEPS",
           "SAFE_STEP_SPREAD", "SQPOptions", "STABLE_STEP_SPREAD", "StochasticSQP", "auto_epochs", "is_network",
           "network_step",
           "spread_step"]

#: ``epochs="auto"``: full-batch epochs (the paper's experiments), and the mini-batch steps a run
#: takes at least (as many steps as the full-batch run takes iterations), in no fewer than
#: ``MINIBATCH_MIN_EPOCHS`` and no more than ``FULL_BATCH_EPOCHS`` epochs (:func:`auto_epochs`).
FULL_BATCH_EPOCHS = 500
MINIBATCH_STEPS = 500
MINIBATCH_MIN_EPOCHS = 10
#: ``epochs="auto"`` with mini-batches for a model whose polish takes the Gauss-Newton metric (a
#: linear model, :meth:`StochasticSQP.fit`): the steps at ``lr`` ``LINEAR_MINIBATCH_LR`` (as many more
#: as ``lr`` is smaller), in at least so many epochs, only bring the iterate near the optimum, the
#: curvature-metric polish on all rows reaches it (:func:`auto_epochs`).
LINEAR_MINIBATCH_STEPS = 100
LINEAR_MINIBATCH_LR = 0.5
LINEAR_MINIBATCH_EPOCHS = 2
#: ``lr="auto"``: the step of every fit but a network's mini-batch steps (the paper's experiments), and
#: theirs: on batches of at least ``MINIBATCH_NETWORK_MIN_BATCH`` rows the longer step, which fits a network
#: further in the epochs' budget; on a batch of ``B < MINIBATCH_NETWORK_MIN_BATCH`` rows
#: ``DEFAULT_LR * sqrt(B / MINIBATCH_NETWORK_MIN_BATCH)`` (:func:`network_step`). A network's mini-batch steps
#: are reached over the first epoch (:func:`solvers.sqp.schedules.rsqrt_beta`) and its polish starts from the
#: last iterate, whatever the batch. On smaller batches the gradient's noise (variance ``~ 1 / B``) is what a
#: step amplifies, so the step shrinks as its standard deviation grows: at 0.5 on batches of 32-128 rows
#: COMPAS's networks (classes that overlap, outputs at the threshold) ended up to five points of train and test
#: accuracy below the full batch without a warning (``benchmarks/results/solver_notes.md``).
DEFAULT_LR = 0.5
MINIBATCH_NETWORK_LR = 0.75
MINIBATCH_NETWORK_MIN_BATCH = 256
#: ``lr="auto"`` under the Gauss-Newton metric of a linear model: the step ``beta`` times the metric's
#: spread ``lambda`` (:func:`solvers.curvature.metric_spread`, the largest eigenvalue of the Gauss-Newton
#: matrix in its diagonal metric) up to which :data:`DEFAULT_LR` is kept, and the ``beta * lambda`` of
#: the step taken beyond it, ``beta = SAFE_STEP_SPREAD / lambda``. Chosen on the grid of
#: ``benchmarks/curvature_step.py`` (six data sets, inputs made to move together by noisy copies,
#: lambda 2-180, four steps, with and without a bound, two seeds): no run up to ``beta * lambda = 3.7``
#: warned :class:`solvers.outcome.TrainingInstabilityWarning`; at ``beta = 0.5`` none up to 4 (the
#: five benchmark data sets lie at 1.4-3.95) and 55 of 56 from 5 on, the loss rising 1.5-9.7 times
#: above its start before the plateau schedule shrank the step.
STABLE_STEP_SPREAD = 4.0
SAFE_STEP_SPREAD = 3.0
#: ``hessian_shift="auto"``: the shift ``mu`` of ``h = sqrt(v + mu)`` in full-batch mode and with
#: mini-batches (see the parameter).
FULL_BATCH_SHIFT = 0.3
MINIBATCH_SHIFT = 0.05
#: ``hessian_shift="auto"`` with ``hessian="gauss-newton"``: ``mu`` of ``h = v + mu``, in curvature units
#: (a column's curvature is its frequency times ``p (1 - p)``: the shift bounds the step of a column
#: too rare to have curvature).
GAUSS_NEWTON_SHIFT = 0.01


def spread_step(spread: float | None) -> float | None:
    """The step ``lr="auto"`` takes for a linear model at the metric's spread ``lambda``:
    ``SAFE_STEP_SPREAD / lambda`` where ``DEFAULT_LR * lambda > STABLE_STEP_SPREAD``, else None
    (:data:`DEFAULT_LR` stands, as it does without a spread)."""
    if spread is None or DEFAULT_LR * spread <= STABLE_STEP_SPREAD:
        return None
    return SAFE_STEP_SPREAD / spread


def network_step(batch_size: int) -> float:
    """The step ``lr="auto"`` takes for a network's mini-batch steps on batches of ``batch_size`` rows:
    :data:`MINIBATCH_NETWORK_LR` from :data:`MINIBATCH_NETWORK_MIN_BATCH` rows on, below it
    ``DEFAULT_LR * sqrt(B / MINIBATCH_NETWORK_MIN_BATCH)``: a batch's gradient has a standard deviation
    ``~ 1 / sqrt(B)``, and the step shrinks with it (the square-root scaling of the step with the batch)."""
    if batch_size >= MINIBATCH_NETWORK_MIN_BATCH:
        return MINIBATCH_NETWORK_LR
    return DEFAULT_LR * math.sqrt(max(1, int(batch_size)) / MINIBATCH_NETWORK_MIN_BATCH)


def auto_epochs(steps_per_epoch: int, full_batch: bool, curvature_polish: bool = False,
                lr: float = LINEAR_MINIBATCH_LR, network: bool = False) -> int:
    """Epochs of ``epochs="auto"``: ``FULL_BATCH_EPOCHS`` in full-batch mode; with mini-batches
    ``ceil(MINIBATCH_STEPS / K)`` for ``K`` steps per epoch, clipped to
    ``[MINIBATCH_MIN_EPOCHS, FULL_BATCH_EPOCHS]``: a mini-batch step costs a fraction of a
    full-batch iteration, so as many steps as the full batch's iterations make a network's fit
    faster than the full batch at the same accuracy, and a small data set (few steps per epoch)
    gets the epochs it needs. ``curvature_polish`` (a linear model, whose polish takes the
    Gauss-Newton metric, :meth:`StochasticSQP.fit`): enough epochs for
    ``S = min(MINIBATCH_STEPS, ceil(LINEAR_MINIBATCH_STEPS * LINEAR_MINIBATCH_LR / lr))`` steps, at
    least ``LINEAR_MINIBATCH_EPOCHS``. Its loss is convex in the coefficients and a diagonal Newton
    step on all rows converges from near the optimum in tens of iterations, so at ``lr`` 0.5 steps
    past the first hundred or so only add time; with fewer (two epochs of five batches) the polish
    starts far from the optimum and, where a few rows flip a small group's rate, swings across
    the bound. A smaller ``lr`` (the regressor's 0.02) moves each step, the polish's included,
    proportionally less, hence proportionally more steps, up to the networks' budget
    (``benchmarks/results/solver_notes.md``). ``network``, a network's mini-batch steps, whose step
    ``beta = lr`` (:attr:`StochasticSQP.lr_`) is below :data:`DEFAULT_LR`:
    ``S = ceil(MINIBATCH_STEPS * DEFAULT_LR / beta)`` steps, so that the shorter steps cover as much ground
    as the budget's at :data:`DEFAULT_LR`. Under ``lr="auto"`` that is a batch of ``B <
    MINIBATCH_NETWORK_MIN_BATCH`` rows, whose step :func:`network_step` is ``DEFAULT_LR * sqrt(B /
    MINIBATCH_NETWORK_MIN_BATCH)``: ``S = MINIBATCH_STEPS * sqrt(MINIBATCH_NETWORK_MIN_BATCH / B)`` (the rows
    they read, ``S * B``, still fewer than on ``MINIBATCH_NETWORK_MIN_BATCH`` rows). An explicit short step
    takes as many more: the regressor's ``lr`` 0.02 (:class:`fairopt.FairRegressor`), whose 500 steps ended
    its networks 0.01-0.02 test R2 below the full batch on Law School, and whose 12,500 steps meet it
    within 0.002-0.010. The cap of ``FULL_BATCH_EPOCHS`` epochs bounds the steps where an epoch holds few,
    on small data sets, where a network's longer training fits the rows rather than the population."""
    if full_batch:
        return FULL_BATCH_EPOCHS
    per_epoch = max(1, steps_per_epoch)
    if curvature_polish:
        steps = min(MINIBATCH_STEPS, math.ceil(LINEAR_MINIBATCH_STEPS * LINEAR_MINIBATCH_LR / float(lr)))
        return min(FULL_BATCH_EPOCHS, max(LINEAR_MINIBATCH_EPOCHS, math.ceil(steps / per_epoch)))
    steps = MINIBATCH_STEPS
    if network and lr < DEFAULT_LR:  # as many more as they are shorter
        steps = math.ceil(MINIBATCH_STEPS * DEFAULT_LR / float(lr))
    return min(FULL_BATCH_EPOCHS, max(MINIBATCH_MIN_EPOCHS, math.ceil(steps / per_epoch)))

logger = logging.getLogger("solvers.sqp")  # one logger for the whole engine package


def _log_epoch(epoch: int, records: list, state: SQPState) -> None:
    """One log line per epoch: the mean objective of its steps (one step's is a batch's, noisy with
    mini-batches), the last step's surrogate violation and the last exact violation measured on all rows in
    the epoch (none where no step measured it)."""
    f = [r["f"] for r in records if isinstance(r.get("f"), float) and math.isfinite(r["f"])]
    exact = [r["V_exact"] for r in records if isinstance(r.get("V_exact"), float) and math.isfinite(r["V_exact"])]
    logger.info("epoch %d: mean f=%.5f over %d steps, V=%.3e (last step), V_exact=%s, tau=%.3e beta=%.2e", epoch,
                sum(f) / len(f) if f else float("nan"), len(records), records[-1]["V"] if records else float("nan"),
                f"{exact[-1]:.3e}" if exact else "not measured", state.tau, state.beta)


@dataclass
class _Run:
    """The loop context of one :meth:`StochasticSQP.fit`: the problem and state, the returned
    iterate's tracker, the history, the calibration ``offset`` of the working bounds, the batch
    and constraint modes with their samplers, the snapshot, the row screen, the tail average and the
    divergence guard's anchor."""

    problem: FitProblem
    state: SQPState
    tracker: BestIterate
    history: History
    offset: torch.Tensor
    full_batch: bool
    mode: str
    schedule: str
    steps_per_epoch: int
    n: int
    generator: torch.Generator
    steps: int | None
    sampler: BalancedSampler | None
    snapshot: ConstraintSnapshot | None
    screen: RowScreen | None
    drawn: Callable[[Any, torch.Tensor], None] | None
    tail: TailAverage | None = None
    #: mini-batch: the sane all-rows candidate with the lowest objective (divergence guard)
    anchor: Anchor | None = None


class StochasticSQP:
    """Stochastic sequential quadratic programming with hard inequality constraints.

    Parameters
    ----------
    options : SQPOptions, optional
        All settings at once (:class:`solvers.sqp.options.SQPOptions`, which documents each);
        its defaults when omitted.
    **settings
        Any setting of :class:`~solvers.sqp.options.SQPOptions` by name, overriding ``options``:
        ``StochasticSQP(epochs=10, batch_size=256)``. An unknown name is a ``TypeError``, an
        invalid value a ``ValueError`` naming the setting. Each setting reads as an attribute
        (``engine.lr``); assigning one checks it again.

    Attributes
    ----------
    hessian_ : str
        The metric of the last fit, ``hessian`` with "auto" resolved ("gauss-newton" for a
        full-batch fit of a linear model with a named loss, else "adam").
    polish_hessian_ : str
        The metric of the last fit's mini-batch polish: "gauss-newton" when ``hessian="auto"``
        trains a linear model with a named loss on mini-batches in one process (the polish is
        then a full-batch fit of a linear model, the case the "auto" rule gives the curvature
        metric), else ``hessian_``.
    hessian_shift_ : float
        The shift ``mu`` of that metric.
    lr_ : float
        The initial step of the last fit, ``lr`` with "auto" resolved (0.75 for a network's
        mini-batch steps on batches of at least 256 rows, ``0.5 sqrt(B / 256)`` on ``B`` fewer, else 0.5,
        or less under the Gauss-Newton
        metric of a linear model whose inputs move together: see the property).
    metric_spread_ : float or None
        The spread of the Gauss-Newton metric at the start of the last fit (``lr="auto"``, a linear
        model under that metric), :func:`solvers.curvature.metric_spread`.
    start_spread_ : float or None
        The spread of the gradient metric at the first steps of a linear model's mini-batch run
        (``lr="auto"``).
    epochs_ : int
        The epochs of the last fit, ``epochs`` with "auto" resolved.
    state_ : SQPState
        The engine state after the last fit (:meth:`state_dict` for a checkpoint).

    Mini-batch step control
    -----------------------
    What keeps a mini-batch run from drifting to a regime where the objective is ignored:
    the QP sees exact (snapshot) constraint information, so its multipliers answer the
    constraints, not their sampling noise; the merit and ratio parameters ``tau``, ``xi``
    are updated from full-batch iterations only (a mini-batch step's reductions are
    estimates, and [B21]'s rule only ever decreases ``tau``: updated from them it fell from
    0.1 to its floor within 12 steps and stayed there); the step size is ``beta_k`` of the
    "rsqrt" schedule (``step="fixed"``, a network's rising over the first epoch), never raised by
    the merit; and every step lies in a
    trust region, ``||d|| <= min(TRUST_RATIO ||g/h||, max(3 median of the last 10 steps,
    ||g/h||))``, with the restoration step no longer than the step itself
    (:func:`solvers.sqp.steps.sqp_step`); the full-batch polish keeps that memory of steps
    (without it one polish step can be orders of magnitude too long). The divergence guard
    backs up the rest, and a run that backed off, whose loss on all rows rose above its
    start, or whose returned model is no better than a constant predictor warns
    (:class:`solvers.outcome.TrainingInstabilityWarning`,
    :class:`solvers.outcome.ConstantPredictorWarning`).

    Returned model and ``converged``
    --------------------------------
    The model is left at the BEST iterate seen on the full training data: the feasible one
    (every row's exact violation <= ``feasibility_tol``) with the lowest objective, else the
    least-violating one (:class:`solvers.outcome.BestIterate`); a binary classifier's feasible best
    that predicts one class on every row (it meets any parity bound trivially) gives way to the
    least-violating iterate that is not nearly constant, if its loss is below the best constant's
    (:func:`solvers.sqp.endgame.leave_trivial_constant`). In full-batch mode every
    iterate is a candidate; with mini-batches, the iterate at the end of each epoch (one
    extra forward pass on all rows per epoch). ``FitResult.converged`` is True iff that model
    is feasible AND stationary within ``tol``, both measured on all training rows;
    ``status`` is "converged", "infeasible" (a row violated), "not_stationary" (feasible, not
    yet a KKT point), "diverged" or "stopped_by_callback" (``info["termination"]`` says why
    the loop ended: "max_epochs", "converged" when a feasible KKT point stopped it early,
    "stalled" when ``stall_epochs`` did, ...). A returned model that violates a row emits
    :class:`solvers.outcome.BoundWarning` naming the row, its realised value and its bound. The last
    :class:`History` record (``qp_status == "final"``) describes the returned model, and ``info`` holds
    the same numbers: ``stationarity``, ``complementarity``, ``violation`` (exact, total),
    ``violations`` (per row), ``c_exact``, ``feasible``, ``stationary``,
    ``returned_iteration``, ``relaxed_steps``, ``bound_offset`` (the calibration ``b``), ``lr``
    (:attr:`lr_`), ``metric_spread`` and ``start_spread`` (:attr:`metric_spread_`,
    :attr:`start_spread_`).
    """

    def __init__(self, options: SQPOptions | None = None, **settings: Any) -> None:
        base = SQPOptions() if options is None else options
        if not isinstance(base, SQPOptions):
            raise TypeError(f"options: expected an SQPOptions, got {type(base).__name__}")
        object.__setattr__(self, "options", dataclasses.replace(base, **settings) if settings else base)
        self._resolved = ResolvedFit()  # what the last fit decided (the defaults before the first)

    def __getattr__(self, name: str) -> Any:
        # called only when normal lookup fails: the settings read as attributes
        options = self.__dict__.get("options")
        if options is not None and name in OPTION_NAMES:
            return getattr(options, name)
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    def __setattr__(self, name: str, value: Any) -> None:
        if name in OPTION_NAMES:  # a changed, re-checked copy of the settings
            object.__setattr__(self, "options", dataclasses.replace(self.options, **{name: value}))
        else:
            object.__setattr__(self, name, value)

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
            Maps ``data.X`` (n, p) to one output per row, (n,) or (n, 1) (a single-output
            module such as ``torch.nn.Linear(p, 1)``; squeezed to (n,)). A module with dropout or
            batch norm (:func:`solvers.problem.changes_in_eval_mode`) takes its training steps in
            training mode; the measurements on all rows that choose and judge the returned model, and
            the polish, run in eval mode, and it is returned in eval mode.
        data : Dataset
            Training rows (``X``, ``y``, ``__len__``, ``subset``; ``strata`` for balanced
            constraint batches), e.g. a :class:`fairopt.FairData`.
        loss : {"bce", "mse", "poisson"} or callable(out, batch) -> scalar
            Mean training loss (the weighted mean ``sum_i w_i l_i / sum_i w_i`` when
            ``data`` has row weights ``data.weights``; every mini-batch, balanced batch and
            chunk keeps its rows' weights, and the constraints read them too).
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
            (bit for bit on CPU). It holds the last iterate (``last_params``), where training
            continues whatever parameters the model passed in holds (it must have the same
            trainable parameters), and the best iterate so far, which the resumed run still
            returns if nothing better comes. It checks the parameter count, the metric and the
            number of constraint rows, not the data: resuming on other rows is your choice.

        Returns
        -------
        FitResult
        """
        params = trainable_parameters(model)
        resolved = self._resolved = ResolvedFit(oracle=derivative_oracle(self, params, constraints))
        n = check_dataset(data)
        check_outputs_differentiable(model, data)
        # data-parallel: every rank sizes its epochs by the largest shard (same number of steps)
        resolved.reduce = all_reduce_vector if isinstance(resolved.oracle, AllReduceDerivatives) else None
        n_epoch = largest_shard(n) if resolved.reduce is not None else n
        loss_fn = get_loss(loss)
        check_targets(loss_fn, data)
        cons = as_constraint_set(constraints)
        cons.setup(data)
        if self.calibrate_exact:  # the members to differentiate when the rows are calibrated to exact ones
            cons = cons.calibrated(self.calibrated_spread(params, n_epoch))
        lower, upper = cons.lower, cons.upper
        if bool((lower > upper).any()):
            i = int(torch.nonzero(lower > upper)[0])
            raise ValueError(f"constraints: row {cons.row_names[i]!r} has lower {lower[i].item()} "
                             f"> upper {upper[i].item()}")
        problem = FitProblem(model, params, loss_fn, cons, data, lower, upper, self._derivatives)
        run = self._start(problem, n, n_epoch, strata, resume, named_loss=loss_name(loss) is not None)
        epochs = range(run.state.epochs_done, run.state.epochs_done + self.epochs_)
        use_bar = self.verbose != 0
        epochs = progress(epochs, self.verbose, "SQP", "epoch")
        model.train()
        status = "max_epochs"
        for epoch in epochs:
            first = len(run.history)
            stopped = self._epoch(run, epoch)
            if stopped is not None:
                status = stopped
                break
            state, history = run.state, run.history
            if use_bar:
                epochs.set_postfix(f=f"{history[-1]['f']:.4f}", V=f"{history[-1]['V']:.2e}", beta=f"{state.beta:.1e}",
                                   refresh=False)
            if epoch_logs(self.verbose):
                _log_epoch(epoch, history.records[first:], state)
        polished, status = self._end_game(run, status)
        if epoch_logs(self.verbose) and polished:
            logger.info("polish: %d iterations on all rows; objective %.5f, exact violation %.3e", polished,
                        run.history[-1]["f"], run.history[-1].get("V_exact", float("nan")))
        if run.problem.f_constant is None and resolved.reduce is None:  # a mini-batch run's is known from its start
            run.problem.constant_output, run.problem.f_constant = best_constant_output(loss_fn, data,
                                                                                       self.chunk_rows)
        # called from here, so that a BoundWarning points at the caller of fit
        return finish(run.problem, self, run.offset, run.state, run.tracker, run.history, status,
                      last=run.state.iteration + polished)

    def _start(self, problem: FitProblem, n: int, n_epoch: int, strata: Any, resume: dict | None,
               named_loss: bool = True) -> _Run:
        """The fit's loop context: batch and constraint modes, the metric (``hessian_``), the state
        (fresh or from ``resume``), the tracker of the returned iterate, the snapshot and the row
        screen; ``n_epoch`` the rows an epoch is sized by (data-parallel: the largest shard's)."""
        cons, data, m = problem.cons, problem.data, int(problem.lower.numel())
        gen = torch.Generator().manual_seed(int(self.seed))
        full_batch = covers_all_rows(self.batch_size, n_epoch)
        mode = self.constraint_mode(full_batch, cons) if m else "full"
        steps_per_epoch = 1 if full_batch else math.ceil(n_epoch / int(self.batch_size))
        resolved = self._resolved
        resolved.minibatch = not full_batch  # resolves hessian_shift_
        self._resolve_metric(problem, full_batch, named_loss)
        v = torch.zeros(sum(p.numel() for p in problem.params), dtype=problem.params[0].dtype)
        if resume is not None:
            state = restore_checkpoint(resume, v, gen, m, self.hessian_)
            saved = resumed_spreads(resume)
            resolved.spread, resolved.start_spread = saved if saved is not None else self._measure_spreads(problem)
        else:
            resolved.spread, resolved.start_spread = self._measure_spreads(problem)  # before lr_ is read
            state = SQPState(tau=float(self.tau0), xi=float(self.xi0), beta=float(self.lr_), v=v)
        state.start_iteration = state.iteration
        self.state_ = state
        step = spread_step(self._step_spread) if self.lr == "auto" else None
        if step is not None:
            logger.info("SQP: the inputs move together (metric spread %.3g at the start): lr='auto' takes %.3g "
                        "instead of %g", self._step_spread, step, DEFAULT_LR)
        resolved.generator, resolved.n_rows = gen, m  # live objects behind state_dict()
        # a network's shorter mini-batch steps take more of them
        self.epochs_ = (auto_epochs(steps_per_epoch, full_batch, resolved.polish_curvature is not None, self.lr_,
                                    resolved.minibatch and resolved.network) if self.epochs == "auto"
                        else int(self.epochs))
        tracker = BestIterate(problem.lower, problem.upper, self.feasibility_tol,
                              closest_filter=self._closest_filter(problem, m))
        if resume is not None:
            resume_iterates(resume, problem.params, tracker)
        resolved.tracker = tracker
        offset = torch.as_tensor(state.offset if state.offset is not None else [0.0] * m,
                                 dtype=torch.float64).reshape(m)
        run = _Run(problem=problem, state=state, tracker=tracker, history=History(row_names=cons.row_names),
                   offset=offset, full_batch=full_batch, mode=mode, schedule=self.schedule_for(full_batch),
                   steps_per_epoch=steps_per_epoch, n=n, generator=gen,
                   steps=steps_per_epoch if resolved.reduce is not None and not full_batch else None,
                   sampler=self._balanced_sampler(data, strata, n, gen) if mode == "balanced" else None,
                   snapshot=(ConstraintSnapshot(refresh_steps(steps_per_epoch, self.constraint_refresh),
                                                drift_tolerances(self.constraint_drift_tol, cons.row_scales()))
                             if mode == "snapshot" and not full_batch else None),
                   screen=RowScreen(state) if self.screen_rows and full_batch and m > 1 else None,
                   drawn=self._drawn_rows_hook(cons, data, full_batch, mode, m))
        if resume is not None:
            resume_snapshot(resume, run.snapshot, v.numel(), m)
        resolved.snapshot = run.snapshot
        if not full_batch and resolved.reduce is None:  # the all-rows divergence guard's ceiling (_offer)
            problem.constant_output, problem.f_constant = best_constant_output(problem.loss_fn, data,
                                                                               self.chunk_rows)
        if not full_batch and run.snapshot is None:
            # the starting point is a candidate (a run that fails early returns it); refreshes offer theirs
            self._offer_all_rows(run)
        return run

    def _closest_filter(self, problem: FitProblem, m: int) -> Callable[[], bool] | None:
        """What the tracker keeps as its closest infeasible iterate (:attr:`solvers.outcome.BestIterate.closest`),
        the end-game's answer to a best iterate that is feasible only by predicting one class
        (:func:`solvers.sqp.endgame.leave_trivial_constant`): for a binary classifier under constraint rows on
        rows held in this process, the iterates that are not nearly constant
        (:func:`solvers.outcome.learned_classifier`; one pass over the rows, only for an infeasible iterate
        closer than the kept one). A nearly constant one's rates are all near 0, so its violation is small for
        the same reason as the constant's. None (no closest) otherwise."""
        if not m or loss_name(problem.loss_fn) != "bce" or self._resolved.reduce is not None:
            return None
        return partial(learned_classifier, problem.model, problem.data, self.chunk_rows)

    def _epoch(self, run: _Run, epoch: int) -> str | None:
        """One epoch of steps; the status that ends training, or None to go on."""
        state = run.state
        merits, fs, Vs = [], [], []
        # the polish starts from the last epoch's average, a network's from its last iterate (lr_)
        run.tail = TailAverage(run.problem.params) if not (run.full_batch or self._resolved.network) else None
        for step_in_epoch, idx in enumerate(minibatches(run.n, self.batch_size, run.generator, run.steps)):
            outcome = self._step(run, epoch, step_in_epoch, idx)
            if isinstance(outcome, str):
                return outcome
            if outcome is None:  # a divergence-guard restart: no step taken
                continue
            merits.append(outcome["merit"])
            fs.append(outcome["f"])
            Vs.append(outcome["V"])
            if any(cb(self, outcome) for cb in self.callbacks):
                return "stopped_by_callback"
        if not run.full_batch and run.snapshot is None:
            # mini-batch: one candidate per epoch, checked on all rows (with a snapshot, the next
            # epoch's first refresh is this iterate)
            self._offer_all_rows(run)
        if merits and run.schedule in ("plateau", "paper"):
            end_of_epoch(state, sum(merits) / len(merits), sum(fs) / len(fs), sum(Vs) / len(Vs), epoch,
                         run.schedule, self)
        state.epochs_done = epoch + 1
        if run.full_batch and run.schedule == "plateau" and stalled(state, self._feasible_best(run), self):
            return "stalled"
        return None

    @staticmethod
    def _feasible_best(run: _Run) -> float | None:
        """The objective of the best iterate so far if it is feasible (the model the run would return), else None."""
        best = run.tracker.best
        return best.f if best is not None and run.tracker.feasible(best.row_violations) else None

    def _batches(self, run: _Run, idx: torch.Tensor | None) -> tuple[Any, Any]:
        """The objective batch (rows ``idx``, all rows for None) and the constraint batch of one
        step: None without constraints, a balanced sample, the objective's batch ("batch"), or
        all rows ("full"; "snapshot", whose rows come from the snapshot)."""
        data, m = run.problem.data, int(run.problem.lower.numel())
        obj_batch = data if idx is None else data.subset(idx)
        if m == 0:
            return obj_batch, None
        if run.sampler is not None:
            sample = run.sampler.sample()
            con_batch = data.subset(sample)
            if run.drawn is not None:
                run.drawn(con_batch, sample)
            return obj_batch, con_batch
        if run.mode == "batch":
            if run.drawn is not None and idx is not None:
                run.drawn(obj_batch, idx)
            return obj_batch, obj_batch
        return obj_batch, data

    def _step(self, run: _Run, epoch: int, step_in_epoch: int, idx: torch.Tensor | None) -> dict | str | None:
        """One SQP iteration on the batch ``idx``: its history record, a status that ends
        training ("diverged", "converged"), or None after a divergence-guard restart."""
        p, state, snapshot, screen = run.problem, run.state, run.snapshot, run.screen
        data, m = p.data, int(p.lower.numel())
        obj_batch, con_batch = self._batches(run, idx)
        if run.schedule == "rsqrt":
            state.beta = rsqrt_beta(state, self.lr_, run.steps_per_epoch, warmup=self._resolved.network)
        on_all_rows = obj_batch is data and (m == 0 or con_batch is data)
        rows = None
        if screen is not None and on_all_rows and state.last_kkt > 10.0 * self.tol:
            rows = screen.rows(p.lower - run.offset, p.upper - run.offset)
        refreshed = snapshot is not None and snapshot.due(step_in_epoch)
        measured = self._refresh(run) if refreshed else None  # the exact rows on all rows at a refresh
        if snapshot is not None:
            probe = partial(self._linearised, snapshot, p, obj_batch)
            der = probe()
        else:
            der = self._derivatives(p.model, p.params, p.loss_fn, p.cons, obj_batch, con_batch, rows)
            probe = partial(self._derivatives, p.model, p.params, p.loss_fn, p.cons, obj_batch, con_batch)
        if not math.isfinite(der.f) or not bool(torch.isfinite(der.g).all()):
            logger.info("SQP: non-finite objective or gradient at iteration %d; stopping", state.iteration)
            return "diverged"
        if blew_up(der.f, state, run.tracker, p.params, run.anchor, on_all_rows):
            if state.restarts > MAX_RESTARTS:
                return "diverged"
            if screen is not None:
                screen.reset()
            return None
        # every full-batch iterate is a candidate for the returned model
        if on_all_rows and offer_and_test_kkt(der, p.params, p.lower, p.upper, run.offset, run.tracker, state,
                                              self.tol):
            return "converged"  # feasible on the exact measure and stationary
        if m and self.calibrate_exact and der.c_exact is not None and (con_batch is data or run.mode == "batch"):
            run.offset = calibrate(run.offset, der.c_exact - der.c, p.lower, p.upper, self.calibration_weight)
        record = sqp_step(p.params, der, (p.lower - run.offset, p.upper - run.offset), state, self,
                          probe, bounds=(p.lower, p.upper), stochastic=not on_all_rows)
        record["epoch"] = epoch
        record[COLUMN_SCREENED] = der.skipped
        if snapshot is not None:
            record[COLUMN_REFRESHED] = refreshed
            record[COLUMN_DRIFT] = snapshot.drift if refreshed else None
        if measured is not None:  # the refresh measured this iterate's exact rows on all rows
            violations = row_violations(measured, p.lower, p.upper)
            record.update({"c_exact": measured.tolist(), "V_exact": float(violations.sum()),
                           "V_exact_max": float(violations.max())})
        if screen is not None and record[COLUMN_QP_STATUS] == QP_RELAXED:
            screen.reset()
        elif screen is not None:
            screen.observe(der.c)
        run.history.append(record)
        state.iteration += 1
        if run.tail is not None:
            run.tail.add(p.params)
        return record

    def _end_game(self, run: _Run, status: str) -> tuple[int, str]:
        """After the epochs: the divergence warning, or the polish (mini-batch runs; a full-batch
        run that ends outside its bounds); returns the polish iterations and the status."""
        p, state = run.problem, run.state
        state.offset = run.offset.tolist()
        self._resolved.last_params = flat_parameters(p.params)  # where training stands (resume continues here)
        if status == "diverged":
            warnings.warn(f"SQP: training diverged at iteration {state.iteration} (non-finite or exploding "
                          "objective); the best iterate seen before is returned", DivergedWarning, stacklevel=3)
            return 0, status
        # a mini-batch run polishes with or without constraints (its epochs end at a noisy batch iterate);
        # a run stalled at the floor of its step ends as one that used its epochs
        if not ((p.lower.numel() or not run.full_batch) and self.polish_iterations
                and status in ("max_epochs", "stalled")):
            return 0, status
        # full batch: only a run that ends outside the bounds, from its last iterate
        limit = None if not run.full_batch else 0 if run.mode == "balanced" else polish_last(
            run.tracker, evaluate_all(p.model, p.loss_fn, p.cons, p.data, self.chunk_rows, self._resolved.reduce),
            run.history, self, state.epochs_done)
        if limit == 0:
            return 0, status
        self._resolved.tracker = copy.copy(run.tracker)  # the checkpoint keeps the training phase's best iterate
        # the polish refines the model that is returned, in the mode it predicts in (no dropout masks)
        with self._polish_metric(p, state) as start, eval_mode(p.model):
            run.offset, polished_status, polished = polish(p, self, run.offset, start, run.tracker, run.history,
                                                           run.tail, limit)
        return polished, ("converged" if polished_status == "converged" else status)

    @contextlib.contextmanager
    def _polish_metric(self, problem: FitProblem, state: SQPState):
        """The state the polish starts from: ``state`` itself, or, for a mini-batch fit of a linear
        model (``ResolvedFit.polish_curvature``, :meth:`_resolve_metric`), a copy restarted under the
        Gauss-Newton metric (:meth:`_restarted_metric`), which holds until the context ends; the
        training phase's metric is restored after it (``hessian_``, the checkpoint's accumulator and
        a resumed run keep the training phase's)."""
        curvature = self._resolved.polish_curvature
        if curvature is None:
            yield state
            return
        saved = self._resolved.hessian, self._resolved.curvature
        self._resolved.hessian, self._resolved.curvature = "gauss-newton", curvature
        try:
            yield self._restarted_metric(problem, state)
        finally:
            self._resolved.hessian, self._resolved.curvature = saved

    def _restarted_metric(self, problem: FitProblem, state: SQPState) -> SQPState:
        """A copy of ``state`` for a polish under the Gauss-Newton metric after training under
        another: its accumulator starts at the curvature on all rows, ``v = G``
        (:func:`~solvers.sqp.steps.hessian_diag`), and its step at ``lr``, as a full-batch fit's;
        the training's gradient moments and decayed step are in other units."""
        start = state.copy()
        start.beta = float(self.lr_)
        G = gauss_newton_diagonal(self._resolved.curvature, problem.loss_fn, problem.data, self.chunk_rows,
                                  problem.params)
        start.v = G.to(state.v.dtype)
        return start

    def calibrated_spread(self, params: list[torch.Tensor], n: int) -> str:
        """The ``spread`` of the constraints' calibrated form (:class:`solvers.contract.CalibratedForm`) for
        a fit of ``params`` whose epochs hold ``n`` rows (data-parallel: the largest shard's): "wide"
        (``sigmoid(2 t)`` for fairopt's group rates) for the mini-batch steps of a network
        (:func:`is_network`), whose outputs leave the threshold as it fits its rows, else "threshold"
        (``sigmoid(5 t)``)."""
        return calibrated_spread(params, not covers_all_rows(self.batch_size, n))

    def constraint_mode(self, full_batch: bool, cons: Iterable[Constraint] = ()) -> str:
        """``constraint_batch`` resolved: "auto" is "full" in full-batch mode; with mini-batches
        "snapshot", or "batch" when a constraint's pass over all rows costs more than linear time
        (``cost_on_all_rows == "quadratic"``: the distance-covariance U-statistics, which are
        unbiased on every batch)."""
        if self.constraint_batch != "auto":
            return self.constraint_batch
        if full_batch:
            return "full"
        quadratic = any(cost_on_all_rows(c) == "quadratic" for c in cons)
        return "batch" if quadratic else "snapshot"

    def _refresh(self, run: _Run) -> torch.Tensor | None:
        """Refresh the run's snapshot on all rows (:mod:`solvers.sqp.snapshot`): the full-data pass
        is also a candidate for the returned model and updates the exact calibration towards the
        user's bounds. Returns the exact rows it measured on all rows (None where it measured none)."""
        p = run.problem
        full = p.on_all_rows(objective_gradient=False)  # the snapshot and the candidate need no g
        run.snapshot.refresh(p.params, full)
        if self._offer(run, full.f, full.c_exact):  # the guard sent the parameters back: the snapshot is of there
            full = p.on_all_rows(objective_gradient=False)
            run.snapshot.refresh(p.params, full, measure=False)
            self._offer(run, full.f, full.c_exact)
        if self.calibrate_exact and full.c_exact is not None:
            run.offset = calibrate(run.offset, full.c_exact - full.c, p.lower, p.upper, self.calibration_weight)
        return None if full.c_exact is None else full.c_exact.detach().to(torch.float64).reshape(-1)

    def _linearised(self, snapshot: ConstraintSnapshot, problem: FitProblem, batch: Any) -> Derivatives:
        """The objective on ``batch`` with the snapshot's first-order constraint rows."""
        p = problem
        objective = self._derivatives(p.model, p.params, p.loss_fn, p.cons, batch, None)
        der = snapshot.linearised(p.params, objective)
        der.curvature = objective.curvature
        return der

    def schedule_for(self, full_batch: bool) -> str:
        """``lr_schedule`` resolved: "auto" is "plateau" in full-batch mode, else "rsqrt"."""
        kind = self.schedule_
        if kind != "auto":
            return kind
        return "plateau" if full_batch else "rsqrt"

    @property
    def lr_(self) -> float:
        """``lr`` resolved: "auto" is :func:`network_step` for the mini-batch steps of a network
        (more than one weight matrix among the trained tensors; a linear model has one),
        :data:`MINIBATCH_NETWORK_LR` on batches of at least :data:`MINIBATCH_NETWORK_MIN_BATCH` rows and
        ``DEFAULT_LR * sqrt(B / MINIBATCH_NETWORK_MIN_BATCH)`` on smaller ones, else :data:`DEFAULT_LR`; for a linear
        model whose spread ``lambda`` puts ``DEFAULT_LR * lambda`` above :data:`STABLE_STEP_SPREAD`,
        ``SAFE_STEP_SPREAD / lambda``: under the Gauss-Newton metric (a full-batch fit, a mini-batch
        run's polish) the spread of that metric (:attr:`metric_spread_`), in a mini-batch run's
        steps under the gradient metric the spread of its start (:attr:`start_spread_`)."""
        if self.lr != "auto":
            return float(self.lr)
        if self._resolved.minibatch and self._resolved.network:
            return network_step(int(self.batch_size))
        step = spread_step(self._step_spread)
        return DEFAULT_LR if step is None else step

    @property
    def _step_spread(self) -> float | None:
        """The spread that sets ``lr="auto"`` under the current metric: the Gauss-Newton metric's, or
        the gradient metric's at its first steps (:attr:`lr_`)."""
        return self.metric_spread_ if self.hessian_ == "gauss-newton" else self.start_spread_

    @property
    def metric_spread_(self) -> float | None:
        """The spread ``lambda`` of the last fit's Gauss-Newton metric at its starting parameters
        (:func:`solvers.curvature.metric_spread`), which ``lr="auto"`` reads (:attr:`lr_`); None when
        the fit had no such metric for a linear model or ``lr`` was given."""
        return self._resolved.spread

    @property
    def start_spread_(self) -> float | None:
        """The spread of the gradient ("adam") metric at the first steps of the last fit's mini-batch run
        of a linear model, ``lambda_max(G) / sqrt(mu)`` (:func:`solvers.curvature.metric_spread` with
        the constant metric ``sqrt(mu)``: the second moments have not grown, so each step is
        ``beta / sqrt(mu)`` times the gradient), which ``lr="auto"`` reads for those steps
        (:attr:`lr_`); None otherwise."""
        return self._resolved.start_spread

    @property
    def hessian_shift_(self) -> float:
        """``hessian_shift`` resolved: "auto" is :data:`GAUSS_NEWTON_SHIFT` for the Gauss-Newton
        metric, else :data:`MINIBATCH_SHIFT` in a mini-batch fit and :data:`FULL_BATCH_SHIFT`."""
        if self.hessian_shift != "auto":
            return float(self.hessian_shift)
        if self.hessian_ == "gauss-newton":
            return GAUSS_NEWTON_SHIFT
        return MINIBATCH_SHIFT if self._resolved.minibatch else FULL_BATCH_SHIFT

    @property
    def hessian_(self) -> str:
        """``hessian`` resolved: "auto" is the metric the last :meth:`fit` chose
        (:meth:`_resolve_metric`), "adam" before the first."""
        if self.hessian != "auto":
            return self.hessian
        return self._resolved.hessian

    @property
    def polish_hessian_(self) -> str:
        """The metric of the last fit's mini-batch polish (class docstring): "gauss-newton" for a
        linear model's (:meth:`_resolve_metric`), else ``hessian_``."""
        return "gauss-newton" if self._resolved.polish_curvature is not None else self.hessian_

    @property
    def schedule_(self) -> str:
        """``lr_schedule`` as one of :data:`LR_SCHEDULES` (True is "paper", False "none")."""
        if isinstance(self.lr_schedule, bool):
            return "paper" if self.lr_schedule else "none"
        return self.lr_schedule

    def _offer_all_rows(self, run: _Run) -> None:
        """Mini-batch candidate (:func:`solvers.sqp.optimality.evaluate_all` on all rows) for the
        returned model, and the divergence guard on all rows (:meth:`_offer`)."""
        p = run.problem
        f_all, c_all = evaluate_all(p.model, p.loss_fn, p.cons, p.data, self.chunk_rows, self._resolved.reduce)
        self._offer(run, f_all, c_all)

    def _offer(self, run: _Run, f_all: float, c_all: torch.Tensor | None) -> bool:
        """Offer the current iterate, measured on all rows (objective ``f_all``, exact rows
        ``c_all``), to the tracker. A sane one, ``f_all`` at most the loss ceiling
        ``max(|f_0|, f_const)`` (:func:`solvers.sqp.endgame.loss_ceiling`: the start's and the best
        constant's), becomes the divergence guard's anchor when its objective is the lowest so far;
        one far above the ceiling sends the parameters back to the anchor
        (:func:`solvers.sqp.endgame.all_rows_blew_up`). Whether it did."""
        state, params = run.state, run.problem.params
        run.tracker.offer(params, f_all, c_all, state.iteration)
        if state.f_first is None:
            state.f_first = f_all
        ceiling = loss_ceiling(state.f_first, run.problem.f_constant)
        if math.isfinite(f_all) and f_all <= ceiling:
            if run.anchor is None or f_all <= run.anchor.f:
                run.anchor = Anchor.at(state, params, f_all)
            return False
        if not all_rows_blew_up(f_all, ceiling, state, params, run.anchor):
            return False
        if run.tail is not None:  # the polish must not start from an average over the overshooting steps
            run.tail = TailAverage(params)
        return True

    def state_dict(self) -> dict:
        """The engine's state after :meth:`fit`, to continue training with ``fit(..., resume=)``.

        Returns
        -------
        dict
            ``format`` (1), ``state`` (a copy of :attr:`state_`: ``tau``, ``xi``, ``beta``,
            ``L``, ``Gamma``, ``merit_avg``, ``since_change``, ``iteration``,
            ``warned_relaxed``, ``epochs_done``; full batch: ``recent_steps``, the memory of
            the trust region), ``hessian_v`` (a copy of the metric's accumulator ``v``: the
            second moment behind ``H = diag(sqrt(v + mu))`` or the curvature behind
            ``diag(v + mu)``), ``hessian`` (the metric ``hessian_`` it belongs to; resuming
            under another is an error), ``generator`` (the state of the sampling generator),
            ``n_rows`` (constraint rows), ``last_params`` (the last iterate, from which a
            resumed fit continues: the model itself holds the returned, best iterate) and
            ``best`` (that iterate, so that the resumed run still returns the best of both
            parts), ``closest`` (a binary classifier's least-violating learned iterate,
            :func:`~solvers.sqp.endgame.leave_trivial_constant`; None where none was kept), ``snapshot`` (mini-batch
            steps under ``constraint_batch="snapshot"``: the
            constraint snapshot and its drift-adapted spacing,
            :meth:`~solvers.sqp.snapshot.ConstraintSnapshot.state_dict`; None otherwise; a
            checkpoint without it refreshes afresh), ``spreads`` (:attr:`metric_spread_` and
            :attr:`start_spread_` of the fit's start, which ``lr="auto"`` keeps reading when
            resumed; a checkpoint without them measures them at the resumed parameters). Only
            tensors, strings and
            Python scalars: ``torch.save`` it and read it back with
            ``torch.load(path, weights_only=True)``. ``epochs_done`` counts completed
            epochs: after a stop by a callback, resuming continues from the last
            iteration but numbers the interrupted epoch again.

        Raises
        ------
        RuntimeError
            Before the first :meth:`fit`.
        """
        if not hasattr(self, "state_"):
            raise RuntimeError("state_dict: the engine has no state yet; call fit() first")
        resolved = self._resolved
        return checkpoint(self.state_, resolved.generator, resolved.n_rows, resolved.last_params, resolved.tracker,
                          self.hessian_, resolved.snapshot, (self.metric_spread_, self.start_spread_))

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

    def _drawn_rows_hook(self, cons: Any, data: Any, full_batch: bool, mode: str,
                         m: int) -> Callable[[Any, torch.Tensor], None] | None:
        """``rows_drawn(batch, idx)`` of the oracle, to be told which rows of ``data`` each constraint
        batch holds, when it reads per-row strata (``know_strata``: constraint rows of a mini-batch or
        balanced batch from per-stratum sums); None in full-batch mode, for constraints on all rows
        (``mode == "full"``), without constraints, or when the oracle or the constraints do not offer it."""
        know = getattr(self._resolved.oracle, "know_strata", None)
        if full_batch or mode in ("full", "snapshot") or not m or not callable(know) or not know(cons, data):
            return None
        return self._resolved.oracle.rows_drawn

    def _derivatives(self, model, params, loss_fn, cons, obj_batch, con_batch, rows=None, *,
                     objective_gradient: bool = True) -> Derivatives:
        """f, g on the objective batch; c, J (and exact c) on the constraint batch, from the
        oracle :meth:`fit` picked (``rows``: the Jacobian rows needed, None for all; without
        ``objective_gradient`` ``g`` may be None); with ``hessian="gauss-newton"`` also the call
        that gives the objective batch's curvature."""
        der = self._resolved.oracle(model, params, loss_fn, cons, obj_batch, con_batch, rows,
                           objective_gradient=objective_gradient)
        curvature = self._resolved.curvature
        if curvature is not None and obj_batch is not None:
            der.curvature = partial(gauss_newton_diagonal, curvature, loss_fn, obj_batch, self.chunk_rows, params)
        return der

    def _linear_curvature(self, problem: FitProblem, named_loss: bool) -> Any:
        """The recognised model (:func:`solvers.curvature.curvature_model`) behind the Gauss-Newton
        metric of ``hessian="auto"``: a linear model (one ``nn.Linear`` layer) with a named loss in a
        single-process fit; None otherwise (a network gets the gradient metric, ``hessian``; a data-parallel
        fit too, logged: its iterates then differ from one process's on all rows)."""
        if not named_loss:
            return None
        recognised = curvature_model(problem.model, problem.params)
        linear = recognised if recognised is not None and len(recognised.network.layers) == 1 else None
        if linear is not None and isinstance(self._resolved.oracle, AllReduceDerivatives):
            logger.info("hessian='auto': the gradient ('adam') metric in this data-parallel fit, where one process "
                        "on all rows takes 'gauss-newton'; pass hessian='adam' to both for the same iterates")
            return None
        return linear

    def _measure_spreads(self, problem: FitProblem) -> tuple[float | None, float | None]:
        """``(metric_spread_, start_spread_)`` at the starting parameters
        (:func:`solvers.curvature.metric_spread`), which ``lr="auto"`` reads (:attr:`lr_`): for a
        linear model under the Gauss-Newton metric (its fit's or its polish's), the spread of that
        metric, and for a linear model's mini-batch steps under the gradient metric (the model kept
        for the polish, :meth:`_resolve_metric`), the spread of that metric's first steps, the
        constant ``sqrt(mu)``; None where there is no such model or ``lr`` was given (it would not
        change the step)."""
        resolved = self._resolved
        linear = resolved.curvature if resolved.curvature is not None else resolved.polish_curvature
        if linear is None or len(linear.network.layers) != 1 or self.lr != "auto":
            return None, None
        shift = GAUSS_NEWTON_SHIFT if self.hessian_shift == "auto" else float(self.hessian_shift)
        measure = partial(metric_spread, problem.model, problem.params, linear, problem.loss_fn, problem.data,
                          chunk_rows=self.chunk_rows, seed=int(self.seed))
        spread = measure(shift)
        keeps_polish_metric = resolved.polish_curvature is not None
        start = measure(math.sqrt(self.hessian_shift_), constant=True) if keeps_polish_metric else None
        logger.debug("metric spreads at the start: Gauss-Newton %.3g, gradient metric's first steps %s", spread,
                     "none" if start is None else f"{start:.3g}")
        return spread, start

    def _resolve_metric(self, problem: FitProblem, full_batch: bool, named_loss: bool) -> None:
        """Set the fit's metric (``hessian_``) and the model behind the Gauss-Newton one
        (:func:`solvers.curvature.curvature_model`). ``hessian="auto"`` follows the rule, and the
        reasons, given under ``hessian`` in :class:`~solvers.sqp.options.SQPOptions`: "gauss-newton"
        for a full-batch, single-process fit of a linear model (one ``nn.Linear`` layer, its
        activation and a fixed affine output allowed) with a named loss
        (:func:`solvers.losses.loss_name`), else "adam"; with mini-batches such a model is kept for the
        polish instead (``ResolvedFit.polish_curvature``, ``polish_hessian_``). An explicit "gauss-newton" on a
        model the engine does not recognise, or in a data-parallel fit, is a ``ValueError``."""
        resolved = self._resolved
        parallel = isinstance(resolved.oracle, AllReduceDerivatives)
        resolved.network = is_network(problem.params)  # lr_, its warm-up and polish start
        if self.hessian == "auto":
            linear = self._linear_curvature(problem, named_loss)
            resolved.curvature, resolved.polish_curvature = (linear, None) if full_batch else (None, linear)
            resolved.hessian = "adam" if resolved.curvature is None else "gauss-newton"
            return
        resolved.curvature = resolved.polish_curvature = None
        if self.hessian != "gauss-newton":
            return
        if parallel:
            raise ValueError("hessian='gauss-newton' is not available in a data-parallel fit; use 'adam'")
        resolved.curvature = curvature_model(problem.model, problem.params)
        if resolved.curvature is None:
            raise ValueError("hessian='gauss-newton' needs a feed-forward network the engine recognises "
                             "(nn.Linear layers and elementwise activations ending in one output, all of its "
                             "parameters trained, optionally followed by a fixed affine output: "
                             "fairopt.models.linear or mlp as the estimators build them); use 'adam' for other "
                             "models")
