"""Settings of the stochastic SQP engine: :class:`SQPOptions`, one frozen dataclass checked once
at construction, which :class:`solvers.sqp.StochasticSQP` holds and its modules read."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence

from solvers.derivatives import JACOBIAN_MODES
from solvers.sqp.schedules import LR_SCHEDULES
from solvers.progress import check_progress
from solvers.validation import check_choice, check_flag, check_interval, check_seed, positive_float, positive_int

__all__ = ["CONSTRAINT_BATCHES", "OPTION_NAMES", "SQPOptions"]

#: Values of ``constraint_batch``.
CONSTRAINT_BATCHES: tuple[str, ...] = ("auto", "full", "batch", "balanced", "snapshot")


@dataclass(frozen=True)
class SQPOptions:
    """Every setting of :class:`solvers.sqp.StochasticSQP`, checked when created (a ``ValueError``
    names the setting); :func:`dataclasses.replace` makes a changed copy.

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
        Values equal the unchunked ones up to floating-point summation order.
    screen_rows : bool, default True
        Full-batch iterations skip the Jacobian rows of constraint rows far inside their
        bounds (slack beyond 10 times their recent per-iteration movement), which are
        inactive in the QP and cost one backward pass each; every 10th iteration, near a
        KKT point and after a relaxed QP all rows are computed (:mod:`solvers.sqp.screening`).
        False: every row at every iteration.
    """

    epochs: int | str = "auto"
    lr: float = 0.5
    batch_size: int | None = None
    constraint_batch: str = "auto"
    constraint_batch_size: int | None = None
    step: str = "fixed"
    feasibility_restoration: bool = True
    lr_schedule: str | bool = "auto"
    polish_iterations: int = 50
    lr_patience: int = 20
    lr_decay: float = 0.5
    lr_floor: float = 1e-3
    calibrate_exact: bool = True
    calibration_weight: float = 0.2
    hessian: str = "adam"
    beta2: float = 0.999
    hessian_shift: float | str = "auto"
    sigma: float = 0.1
    epsilon: float = 1e-2
    tau0: float = 0.1
    xi0: float = 1.0
    tau_min: float = 1e-12
    xi_min: float = 1e-12
    eta: float = 0.5
    theta: float = 1e4
    lr_min: float = 1e-7
    lr_kmin: int = 200
    lr_interval: int = 5
    lr_factor: float = 10.0
    lr_weight: float = 0.85
    tol: float = 1e-3
    feasibility_tol: float = 1e-6
    jacobian: str = "auto"
    seed: int = 0
    verbose: int | str = "auto"
    callbacks: Sequence[Callable] = ()
    distributed: bool | None = None
    chunk_rows: int | None = None
    screen_rows: bool = True
    constraint_refresh: int = 2

    def __post_init__(self) -> None:
        object.__setattr__(self, "callbacks", tuple(self.callbacks))
        self._validate()

    def _validate(self) -> None:
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


#: The names of the settings (the fields of :class:`SQPOptions`).
OPTION_NAMES: frozenset[str] = frozenset(SQPOptions.__dataclass_fields__)
