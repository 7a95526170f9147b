"""The stochastic SQP engine: :class:`StochasticSQP` (options and their checks, the epoch and
mini-batch loop with its objective and constraint batches, the divergence-guard anchor,
the engine checkpoint) and :class:`DistributedSQP`. One iteration is
:func:`solvers.sqp.steps.sqp_step`; the learning-rate schedules, the end-game and the
checkpoint format have modules of their own."""

from __future__ import annotations

import copy
import logging
import math
import warnings
from functools import partial
from typing import Any, Callable, Iterable, Sequence

import torch
from torch import nn

from solvers.derivatives import JACOBIAN_MODES, Derivatives
from solvers.history import COLUMN_QP_STATUS, COLUMN_REFRESHED, COLUMN_SCREENED, QP_RELAXED, FitResult, History
from solvers.losses import LossFn, check_targets, constant_loss, get_loss
from solvers.outcome import BestIterate, DivergedWarning
from solvers.problem import Constraint, as_constraint_set, check_dataset, flat_parameters, trainable_parameters
from solvers.sampling import BalancedSampler, minibatches
from solvers.sqp.checkpoint import checkpoint, restore_checkpoint, resume_iterates
from solvers.distributed import AllReduceDerivatives, all_reduce_vector, largest_shard
from solvers.sqp.oracles import derivative_oracle
from solvers.sqp.endgame import MAX_RESTARTS, TailAverage, blew_up, finish, polish, polish_last
from solvers.sqp.optimality import evaluate_all, offer_and_test_kkt
from solvers.sqp.schedules import LR_SCHEDULES, end_of_epoch, rsqrt_beta
from solvers.sqp.screening import RowScreen
from solvers.sqp.snapshot import ConstraintSnapshot, refresh_steps
from solvers.sqp.steps import calibrate, sqp_step
from solvers.progress import check_progress, epoch_logs, progress
from solvers.validation import check_choice, check_flag, check_interval, check_seed, positive_float, positive_int

__all__ = ["CONSTRAINT_BATCHES", "DistributedSQP", "FULL_BATCH_EPOCHS", "FULL_BATCH_SHIFT", "MINIBATCH_MIN_EPOCHS",
           "MINIBATCH_SHIFT", "MINIBATCH_STEPS", "StochasticSQP", "auto_epochs"]

#: Values of ``constraint_batch``.
CONSTRAINT_BATCHES: tuple[str, ...] = ("auto", "full", "batch", "balanced", "snapshot")
#: ``epochs="auto"``: full-batch epochs (the paper's experiments), and the mini-batch steps a run
#: takes at least (as many steps as the full-batch run takes iterations), in no fewer than
#: ``MINIBATCH_MIN_EPOCHS`` and no more than ``FULL_BATCH_EPOCHS`` epochs (:func:`auto_epochs`).
FULL_BATCH_EPOCHS = 500
MINIBATCH_STEPS = 500
MINIBATCH_MIN_EPOCHS = 10
#: ``hessian_shift="auto"``: the shift ``mu`` of ``h = sqrt(v + mu)`` in full-batch mode and with
#: mini-batches (see the parameter).
FULL_BATCH_SHIFT = 0.3
MINIBATCH_SHIFT = 0.05


def auto_epochs(steps_per_epoch: int, full_batch: bool) -> int:
    """Epochs of ``epochs="auto"``: ``FULL_BATCH_EPOCHS`` in full-batch mode; with mini-batches
    ``ceil(MINIBATCH_STEPS / K)`` for ``K`` steps per epoch, clipped to
    ``[MINIBATCH_MIN_EPOCHS, FULL_BATCH_EPOCHS]``: a mini-batch step costs a fraction of a
    full-batch iteration, so as many steps as the full batch's iterations make the fit faster
    than the full batch at the same accuracy (``benchmarks/results/estimator_minibatch.txt``),
    and a small data set (few steps per epoch) gets the epochs it needs."""
    if full_batch:
        return FULL_BATCH_EPOCHS
    return min(FULL_BATCH_EPOCHS, max(MINIBATCH_MIN_EPOCHS, math.ceil(MINIBATCH_STEPS / max(1, steps_per_epoch))))

logger = logging.getLogger("solvers.sqp")  # one logger for the whole engine package


class StochasticSQP:
    """Stochastic sequential quadratic programming with hard inequality constraints.

    Parameters
    ----------
    epochs : int or "auto", default "auto"
        Passes over the training data. "auto": 500 full-batch epochs (the paper's
        experiments); with mini-batches enough epochs for 500 steps, at least 10 and at
        most 500 (:func:`auto_epochs`; e.g. 21 epochs of batches of 1,024 rows on 24,000
        rows). The resolved number is ``epochs_`` after :meth:`fit`.
    lr : float, default 0.5
        Initial learning rate ``beta_0`` (the paper's experiments: 0.5).
    batch_size : int or None, default None
        Rows per objective mini-batch; None means full-batch gradients.
    constraint_batch : {"auto", "full", "snapshot", "batch", "balanced"}, default "auto"
        Where constraint values and Jacobians come from in each iteration:

        - "full": all training rows (one extra forward and pull-back pass over all rows per
          mini-batch step: slower than full-batch training);
        - "snapshot": the rows and Jacobian on ALL training rows at a snapshot ``w_s``,
          refreshed ``constraint_refresh`` times per epoch, and their first-order model
          ``c_s + J_s (w - w_s)``, ``J_s`` in between (:mod:`solvers.sqp.snapshot`). No
          sampling noise reaches the QP (the [SQP] theory takes the constraints as exact and
          only the objective as stochastic); each step pulls back the objective only, and
          each refresh is a full-data candidate for the returned model and updates the exact
          calibration;
        - "batch": the objective's own mini-batch (one forward and one batched pull-back
          per step). The rows are then estimates from ``batch_size`` rows: group rates are
          ratios of batch means over the few rows of each group near the threshold, noisy in
          value and direction, and steps that follow that noise through ``J'y`` lose the
          objective (the training loss can grow many-fold and the accuracy fall below the
          majority class's); the distance-covariance family is made of U-statistics,
          unbiased on every batch;
        - "balanced": a balanced batch with ``constraint_batch_size // n_strata`` rows per
          stratum, drawn at every step ([SQP] Thm 3.1: unbiased group means);
        - "auto": "full" in full-batch mode; with mini-batches "snapshot", or "batch" when a
          constraint's rows cost more than linear time on all rows
          (``cost_on_all_rows = "quadratic"``: the distance covariance). "snapshot" ends
          nearest the full batch's accuracy on the grid of data sets, models and batch sizes
          of ``benchmarks/sqp_stochastic.py --grid`` (``benchmarks/results/sqp_stochastic/``).
    constraint_refresh : int, default 2
        Full-data refreshes per epoch of ``constraint_batch="snapshot"`` (at fixed steps of
        every epoch, so a resumed run refreshes where the uninterrupted one does). One
        refresh costs about one full-batch iteration. Two rather than one: between refreshes
        the first-order model drifts, most on small, tightly constrained problems (many
        groups, small batches), where one refresh per epoch can end below the majority
        class's accuracy (``benchmarks/results/solver_notes.md``).
    step : {"fixed", "adaptive"}, default "fixed"
        ``alpha_k = beta_k`` or the adaptive rule of [B21] Alg. 3.1.
    feasibility_restoration : bool, default True
        With a step size ``alpha < 1`` the linearised constraints are only partly followed,
        so an infeasible iterate approaches the feasible set at rate ``alpha`` per iteration
        (slowly once the learning-rate schedule has reduced ``beta``: hundreds of epochs can
        end still infeasible). With True the
        remaining fraction of the normal step
        ``v = argmin 1/2 v'Hv  s.t.  l <= c + Jv <= u`` is added:
        ``w <- w + alpha d + (1 - alpha) v``, so ``c`` meets the linearised bounds after every
        step whatever ``alpha``. Feasible iterates have ``v = 0`` (nothing changes); the
        merit, ratio and step-size rules still use ``d``. An extension of [SQP] Alg. 1 in
        the spirit of composite-step SQP (Byrd-Omojokun); False gives the paper's step.
    lr_schedule : {"auto", "plateau", "rsqrt", "paper", "none"}, default "auto"
        Learning-rate control. "auto": "plateau" in full-batch mode, "rsqrt" with
        mini-batches. "rsqrt": the diminishing step ``beta_k = lr / sqrt(1 + k / (4 K))``
        with ``K`` the steps per epoch (the stochastic regime of [SQP] Thm 3.1, whose
        convergence in expectation asks for steps that shrink; halved after 12 epochs,
        :data:`solvers.sqp.schedules.RSQRT_EPOCHS`). "plateau": multiply ``beta`` by
        ``lr_decay`` when the merit ``tau f + V`` (epoch means, compared at the current
        ``tau``) has reached no new best for ``lr_patience`` epochs, never below
        ``lr_floor * lr``, so a run that still improves keeps its step and training never
        freezes. "paper": the adjustment of [SQP] Alg. 2 (``lr_kmin``, ``lr_interval``,
        ``lr_factor``, ``lr_weight``, ``lr_min``), which measured here cuts ``beta`` to about
        5e-8 around epoch 210 in most full-batch runs. ``True``/``False`` mean "paper"/"none".
    polish_iterations : int, default 50
        End-game of a mini-batch run: after the last epoch, up to this many full-batch SQP
        iterations on ALL training rows (with exact calibration and feasibility
        restoration), and no more than the epochs trained (resumed parts included: the
        end-game takes no more passes over the data than the training), started from the
        average of the last epoch's iterates (a Polyak tail average: it removes most of the
        mini-batch noise); an iterate still infeasible and still approaching the bounds
        goes on, up to four times this many. Every polish iterate is a
        candidate for the returned model, so the returned model is checked on all rows
        with the exact measure; the polish stops early at a feasible KKT point. It works on
        copies of the engine state, so :meth:`state_dict` and ``resume`` continue the
        stochastic phase as if no polish had run. 0 turns it off. A full-batch run polishes
        only when it ends outside the bounds with no feasible iterate or with a feasible one
        much worse than its last (:func:`solvers.sqp.endgame.polish_last`): at most
        ``polish_iterations`` iterations, and no more than the epochs trained (resumed parts
        included), from the last iterate.
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
    hessian_shift : float or "auto", default "auto"
        ``mu`` in ``h = sqrt(v + mu)``; "auto": 0.3 in full-batch mode, 0.05 with
        mini-batches (:data:`FULL_BATCH_SHIFT`, :data:`MINIBATCH_SHIFT`; the resolved value
        is ``hessian_shift_`` after :meth:`fit`). With mini-batches the second moment ``v``
        also holds the gradient's sampling variance, and a smaller shift lets it scale the
        steps: on the grid of ``constraint_batch`` 0.05 ended nearer the full batch than 0.3,
        with no data set's mean accuracy lower. The authors' reference code uses 100 (``h`` close
        to 10, ``d`` close to ``-g/10``: plain gradient descent at a tenth of ``lr``). With a
        large shift ``h`` is nearly constant and training under-optimises (a higher loss and
        a lower test accuracy at the same surrogate); 0.1-0.3 keep the second-moment scaling effective
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

    Mini-batch step control
    -----------------------
    What keeps a mini-batch run from drifting to a regime where the objective is ignored:
    the QP sees exact (snapshot) constraint information, so its multipliers answer the
    constraints, not their sampling noise; the merit and ratio parameters ``tau``, ``xi``
    are updated from full-batch iterations only (a mini-batch step's reductions are
    estimates, and [B21]'s rule only ever decreases ``tau``: updated from them it fell from
    0.1 to its floor within 12 steps and stayed there); the step size is ``beta_k`` of the
    "rsqrt" schedule (``step="fixed"``), never raised by the merit; and every step lies in a
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
        backward calls on the retained graph ("loop"). "auto": for group-rate rows (DI, EI,
        EO, ...) and a row-wise model (every network of ``fairopt.models``; any
        ``nn.Sequential`` of linear layers and activations), the stratified pullback of
        :mod:`solvers.strata` - the model runs on each stratum of rows (rows in the same
        groups) and two backward passes in all give the gradient and every Jacobian row,
        whatever ``m``. It costs one model pass per stratum, which a linear model's cheap
        backward pass does not repay, so "auto" takes it for models with a hidden layer and
        constraint batches of at least ``solvers.strata.MIN_ROWS`` (4,096) rows only.
        Otherwise "loop", the faster of the other two on CPU
        (``benchmarks/sqp_speed.py``). Row screening does not apply to the stratified pullback.
        Under "auto" a plain feed-forward network (``fairopt.models`` networks without active
        dropout, the linear model) is pulled back in closed form instead of through autograd
        (:mod:`solvers.feedforward`: one pass of activation derivatives, then one product per
        layer and row); "loop" and "batched" always use autograd.
    seed : int, default 0
        Seed of the samplers and of the Lipschitz probe direction.
    verbose : int or "auto", default "auto"
        ``"auto"``: a progress bar once training has run a few seconds; 0 silent; 1 the bar from
        the start and per-epoch INFO logs (:mod:`solvers.progress`).
    callbacks : sequence of callables
        ``cb(engine, record) -> bool | None`` after every iteration; True stops training.
    distributed : bool or None, default None
        Data-parallel full-batch SQP over the ranks of a ``torch.distributed`` process
        group, each rank fitting on its own row shard (:mod:`solvers.distributed`). None:
        when ``torch.distributed`` is initialised; False: never.
    chunk_rows : int or None, default None
        Rows per chunk of the full-data passes (epoch-end candidates, the polish, the
        final check) of a data set with more rows: forward and pull-backs run chunk by
        chunk and add up (:class:`solvers.sums.ChunkedDerivatives`), so their memory is
        bounded by the chunk, not by ``n`` - with memory-mapped rows
        (:func:`fairopt.data.load_memmap`) and mini-batches, training never holds all rows.
        Needs constraints whose rows are functions of per-group sums (the rate
        constraints); with others the passes are not chunked. None: one pass over all rows.
    screen_rows : bool, default True
        Full-batch iterations skip the Jacobian rows of constraint rows far inside their
        bounds (slack beyond 10 times their recent per-iteration movement), which are
        inactive in the QP and cost one backward pass each; every 10th iteration, near a
        KKT point and after a relaxed QP all rows are computed (:mod:`solvers.sqp.screening`).
        False: every row at every iteration.
        Values equal the unchunked ones up to floating-point summation order.
    """

    def __init__(
        self,
        epochs: int | str = "auto",
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
        hessian_shift: float | str = "auto",
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
        verbose: int | str = "auto",
        callbacks: Sequence[Callable] = (),
        distributed: bool | None = None,
        chunk_rows: int | None = None,
        screen_rows: bool = True,
        constraint_refresh: int = 2,
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
        self.chunk_rows = chunk_rows
        self.screen_rows = screen_rows
        self.constraint_refresh = constraint_refresh
        self._validate_options()

    # ------------------------------------------------------------------ validation
    def _validate_options(self) -> None:
        # loop counts and batch sizes also accept integral floats such as 10.0 (they are used as int(...))
        if self.epochs != "auto":
            positive_int(self.epochs, "epochs", allow_integral_float=True)
        for name in ("lr_patience", "lr_kmin", "lr_interval"):
            positive_int(getattr(self, name), name, allow_integral_float=True)
        for name in ("lr_min", "tol", "feasibility_tol"):
            positive_float(getattr(self, name), name)
        if not isinstance(self.lr_schedule, bool):  # True for "paper", False for "none"
            check_choice(self.lr_schedule, LR_SCHEDULES, "lr_schedule")
        positive_int(self.polish_iterations, "polish_iterations", allow_zero=True)
        for name in ("feasibility_restoration", "calibrate_exact", "screen_rows"):
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
        if self.hessian_shift != "auto":
            positive_float(self.hessian_shift, "hessian_shift")
        for name in ("tau0", "xi0", "tau_min", "xi_min", "theta", "lr_factor"):
            positive_float(getattr(self, name), name)
        for name in ("sigma", "epsilon", "eta", "lr_weight", "lr_decay", "lr_floor", "calibration_weight"):
            check_interval(getattr(self, name), name, 0.0, 1.0)
        check_flag(self.distributed, "distributed", allow_none=True)
        if self.chunk_rows is not None:
            positive_int(self.chunk_rows, "chunk_rows")
        positive_int(self.constraint_refresh, "constraint_refresh", allow_integral_float=True)
        check_seed(self.seed, allow_none=False, allow_negative=False)
        check_progress(self.verbose)
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
            Maps ``data.X`` (n, p) to one output per row, (n,) or (n, 1) (a single-output
            module such as ``torch.nn.Linear(p, 1)``; squeezed to (n,)).
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
            (bit for bit on CPU). The model's parameters are not part of it: pass the
            model as it was at the checkpoint.

        Returns
        -------
        FitResult
        """
        params = trainable_parameters(model)
        self._oracle = derivative_oracle(self, params, constraints)
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
        # data-parallel: every rank sizes its epochs by the largest shard (same number of steps)
        self._reduce = all_reduce_vector if isinstance(self._oracle, AllReduceDerivatives) else None
        n_epoch = largest_shard(n) if self._reduce is not None else n
        full_batch = self.batch_size is None or self.batch_size >= n_epoch
        mode = self.constraint_mode(full_batch, cons) if m else "full"
        sampler = self._balanced_sampler(data, strata, n, gen) if mode == "balanced" else None
        steps_per_epoch = 1 if full_batch else math.ceil(n_epoch / int(self.batch_size))
        steps = steps_per_epoch if self._reduce is not None and not full_batch else None
        schedule = self.schedule_for(full_batch)

        dtype = params[0].dtype
        p_total = sum(p.numel() for p in params)
        v = torch.zeros(p_total, dtype=dtype)
        state = dict(tau=float(self.tau0), xi=float(self.xi0), beta=float(self.lr), L=None, Gamma=None,
                     merit_avg=None, since_change=0, iteration=0, warned_relaxed=False, epochs_done=0, restarts=0)
        if resume is not None:
            state = restore_checkpoint(resume, v, gen, m)
        history = History(row_names=cons.row_names)
        self.state_ = state
        self._v, self._generator, self._n_rows = v, gen, m  # live objects behind state_dict()
        status = "max_epochs"
        use_bar = self.verbose != 0
        self.epochs_ = auto_epochs(steps_per_epoch, full_batch) if self.epochs == "auto" else int(self.epochs)
        self._minibatch = not full_batch  # resolves hessian_shift_
        epochs = range(state["epochs_done"], state["epochs_done"] + self.epochs_)
        epochs = progress(epochs, self.verbose, "SQP", "epoch")

        model.train()
        stop = False
        tracker = BestIterate(lower, upper, self.feasibility_tol)
        if resume is not None:
            resume_iterates(resume, params, tracker)
        self._tracker = tracker
        offset = torch.as_tensor(state.get("offset", [0.0] * m), dtype=torch.float64).reshape(m)
        self._anchor = None  # mini-batch: the last sane epoch-end iterate (divergence guard)
        self._start_iteration = state["iteration"]
        snapshot = (ConstraintSnapshot(refresh_steps(steps_per_epoch, self.constraint_refresh))
                    if mode == "snapshot" and not full_batch else None)
        if not full_batch and snapshot is None:
            # the starting point is a candidate (a run that fails early returns it); refreshes offer theirs
            self._offer_all_rows(model, params, loss_fn, cons, data, tracker, state)
        tail = None
        screen = RowScreen(state) if self.screen_rows and full_batch and m > 1 else None
        drawn = self._drawn_rows_hook(cons, data, full_batch, mode, m)
        for epoch in epochs:
            epoch_merits, epoch_f, epoch_V = [], [], []
            tail = TailAverage(params) if not full_batch else None
            for step_in_epoch, idx in enumerate(minibatches(n, self.batch_size, gen, steps)):
                obj_batch = data if idx is None else data.subset(idx)
                if m == 0:
                    con_batch = None
                elif sampler is not None:
                    sample = sampler.sample()
                    con_batch = data.subset(sample)
                    if drawn is not None:
                        drawn(con_batch, sample)
                elif mode == "batch":
                    con_batch = obj_batch
                    if drawn is not None and idx is not None:
                        drawn(con_batch, idx)
                else:  # "full", or "snapshot" (whose rows come from the snapshot below)
                    con_batch = data
                if schedule == "rsqrt":
                    state["beta"] = rsqrt_beta(state, self.lr, steps_per_epoch)
                on_all_rows = obj_batch is data and (m == 0 or con_batch is data)
                rows = None
                if screen is not None and on_all_rows and state.get("last_kkt", math.inf) > 10.0 * self.tol:
                    rows = screen.rows(lower - offset, upper - offset)
                refreshed = snapshot is not None and snapshot.due(step_in_epoch)
                if refreshed:
                    offset = self._refresh(snapshot, model, params, loss_fn, cons, data, tracker, state, offset,
                                           (lower, upper))
                if snapshot is not None:
                    der = self._linearised(snapshot, model, params, loss_fn, cons, obj_batch)
                else:
                    der = self._derivatives(model, params, loss_fn, cons, obj_batch, con_batch, rows)
                if not math.isfinite(der.f) or not bool(torch.isfinite(der.g).all()):
                    logger.info("SQP: non-finite objective or gradient at iteration %d; stopping", state["iteration"])
                    status, stop = "diverged", True
                    break
                if blew_up(der.f, state, tracker, params, self._anchor, on_all_rows):
                    if state.get("restarts", 0) > MAX_RESTARTS:
                        status, stop = "diverged", True
                        break
                    if screen is not None:
                        screen.reset()
                    continue
                # every full-batch iterate is a candidate for the returned model
                if on_all_rows and offer_and_test_kkt(der, params, lower, upper, offset, tracker, state, self.tol):
                    status, stop = "converged", True  # feasible on the exact measure and stationary
                    break
                if m and self.calibrate_exact and der.c_exact is not None and (con_batch is data or mode == "batch"):
                    offset = calibrate(offset, der.c_exact - der.c, lower, upper, self.calibration_weight)
                probe = (partial(self._derivatives, model, params, loss_fn, cons, obj_batch, con_batch)
                         if snapshot is None else partial(self._linearised, snapshot, model, params, loss_fn, cons,
                                                          obj_batch))
                record = sqp_step(params, der, v, lower - offset, upper - offset, state, self, probe,
                                  bounds=(lower, upper), stochastic=not on_all_rows)
                record["epoch"] = epoch
                record[COLUMN_SCREENED] = der.skipped
                if snapshot is not None:
                    record[COLUMN_REFRESHED] = refreshed
                if screen is not None and record[COLUMN_QP_STATUS] == QP_RELAXED:
                    screen.reset()
                elif screen is not None:
                    screen.observe(der.c)
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
            if not full_batch and snapshot is None:
                # mini-batch: one candidate per epoch, checked on all rows (with a snapshot, the next
                # epoch's first refresh is this iterate)
                self._offer_all_rows(model, params, loss_fn, cons, data, tracker, state)
            if epoch_merits and schedule in ("plateau", "paper"):
                end_of_epoch(state, sum(epoch_merits) / len(epoch_merits), sum(epoch_f) / len(epoch_f),
                             sum(epoch_V) / len(epoch_V), epoch, schedule, self)
            state["epochs_done"] = epoch + 1
            if use_bar:
                epochs.set_postfix(f=f"{history[-1]['f']:.4f}", V=f"{history[-1]['V']:.2e}", beta=f"{state['beta']:.1e}",
                                   refresh=False)
            if epoch_logs(self.verbose):
                logger.info("epoch %d: f=%.5f V=%.3e tau=%.3e beta=%.2e", epoch, history[-1]["f"], history[-1]["V"], state["tau"], state["beta"])

        state["offset"] = offset.tolist()
        self._last_params = flat_parameters(params)  # where training stands (resume continues here)
        polished = 0
        if status == "diverged":
            warnings.warn(f"SQP: training diverged at iteration {state['iteration']} (non-finite or exploding "
                          "objective); the best iterate seen before is returned", DivergedWarning, stacklevel=2)
        elif m and self.polish_iterations and status == "max_epochs":
            # full batch: only a run that ends outside the bounds, from its last iterate
            limit = None if not full_batch else 0 if mode == "balanced" else polish_last(
                tracker, evaluate_all(model, loss_fn, cons, data, self.chunk_rows, self._reduce), history, self,
                state["epochs_done"])
            if limit != 0:
                self._tracker = copy.copy(tracker)  # the checkpoint keeps the training phase's best iterate
                offset, status, polished = polish(self._derivatives, self, model, params, loss_fn, cons, data, lower,
                                                  upper, offset, state, v, tracker, history, tail, limit)
        # called from here, so that a BoundWarning points at the caller of fit
        return finish(self._derivatives, self, model, params, loss_fn, cons, data, lower, upper, offset, state,
                      tracker, history, status, last=state["iteration"] + polished,
                      start_iteration=self._start_iteration,
                      f_constant=constant_loss(loss_fn, data, self.chunk_rows) if self._reduce is None else None)

    def constraint_mode(self, full_batch: bool, cons: Iterable[Constraint] = ()) -> str:
        """``constraint_batch`` resolved: "auto" is "full" in full-batch mode; with mini-batches
        "snapshot", or "batch" when a constraint's pass over all rows costs more than linear time
        (``cost_on_all_rows == "quadratic"``: the distance-covariance U-statistics, which are
        unbiased on every batch)."""
        if self.constraint_batch != "auto":
            return self.constraint_batch
        if full_batch:
            return "full"
        quadratic = any(getattr(c, "cost_on_all_rows", "linear") == "quadratic" for c in cons)
        return "batch" if quadratic else "snapshot"

    def _refresh(self, snapshot: ConstraintSnapshot, model: nn.Module, params: list[torch.Tensor], loss_fn: LossFn,
                 cons: Any, data: Any, tracker: BestIterate, state: dict, offset: torch.Tensor,
                 bounds: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
        """Refresh ``snapshot`` on all rows (:mod:`solvers.sqp.snapshot`): the full-data pass is also
        a candidate for the returned model and updates the exact calibration towards the user's
        ``bounds``; returns the calibration offset."""
        full = self._derivatives(model, params, loss_fn, cons, data, data)
        snapshot.refresh(params, full)
        self._offer(params, full.f, full.c_exact, tracker, state)
        if self.calibrate_exact and full.c_exact is not None:
            offset = calibrate(offset, full.c_exact - full.c, *bounds, self.calibration_weight)
        return offset

    def _linearised(self, snapshot: ConstraintSnapshot, model: nn.Module, params: list[torch.Tensor],
                    loss_fn: LossFn, cons: Any, batch: Any) -> Derivatives:
        """The objective on ``batch`` with the snapshot's first-order constraint rows."""
        return snapshot.linearised(params, self._derivatives(model, params, loss_fn, cons, batch, None))

    def schedule_for(self, full_batch: bool) -> str:
        """``lr_schedule`` resolved: "auto" is "plateau" in full-batch mode, else "rsqrt"."""
        kind = self.schedule_
        if kind != "auto":
            return kind
        return "plateau" if full_batch else "rsqrt"

    @property
    def hessian_shift_(self) -> float:
        """``hessian_shift`` resolved: "auto" is :data:`MINIBATCH_SHIFT` in a mini-batch fit,
        else :data:`FULL_BATCH_SHIFT`."""
        if self.hessian_shift != "auto":
            return float(self.hessian_shift)
        return MINIBATCH_SHIFT if getattr(self, "_minibatch", False) else FULL_BATCH_SHIFT

    @property
    def schedule_(self) -> str:
        """``lr_schedule`` as one of :data:`LR_SCHEDULES` (True is "paper", False "none")."""
        if isinstance(self.lr_schedule, bool):
            return "paper" if self.lr_schedule else "none"
        return self.lr_schedule

    def _offer_all_rows(self, model, params, loss_fn, cons, data, tracker, state) -> None:
        """Mini-batch candidate (:func:`solvers.sqp.optimality.evaluate_all` on all rows) for the
        returned model; a sane one (finite objective within ``10 |f_0|``, ``f_0`` the start's)
        becomes the divergence guard's anchor."""
        f_all, c_all = evaluate_all(model, loss_fn, cons, data, self.chunk_rows, self._reduce)
        self._offer(params, f_all, c_all, tracker, state)

    def _offer(self, params, f_all: float, c_all: torch.Tensor | None, tracker: BestIterate, state: dict) -> None:
        """Offer an iterate measured on all rows (objective ``f_all``, exact rows ``c_all``) to the
        tracker; a sane one becomes the divergence guard's anchor (:meth:`_offer_all_rows`)."""
        tracker.offer(params, f_all, c_all, state["iteration"])
        first = state.setdefault("f_first", f_all)
        if math.isfinite(f_all) and f_all <= 10.0 * abs(first) + 1e-8:
            self._anchor = (state["iteration"], flat_parameters(params))

    def state_dict(self) -> dict:
        """The engine's state after :meth:`fit`, to continue training with ``fit(..., resume=)``.

        Returns
        -------
        dict
            ``format`` (1), ``state`` (a copy of :attr:`state_`: ``tau``, ``xi``, ``beta``,
            ``L``, ``Gamma``, ``merit_avg``, ``since_change``, ``iteration``,
            ``warned_relaxed``, ``epochs_done``; full batch: ``recent_steps``, the memory of
            the trust region), ``hessian_v`` (a copy of the second-moment
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
        return checkpoint(self.state_, self._v, self._generator, self._n_rows, self._last_params, self._tracker)

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
        know = getattr(self._oracle, "know_strata", None)
        if full_batch or mode in ("full", "snapshot") or not m or not callable(know) or not know(cons, data):
            return None
        return self._oracle.rows_drawn

    def _derivatives(self, model, params, loss_fn, cons, obj_batch, con_batch, rows=None) -> Derivatives:
        """f, g on the objective batch; c, J (and exact c) on the constraint batch, from the
        oracle :meth:`fit` picked (``rows``: the Jacobian rows needed, None for all)."""
        return self._oracle(model, params, loss_fn, cons, obj_batch, con_batch, rows)
