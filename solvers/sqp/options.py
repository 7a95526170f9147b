"""Settings of the stochastic SQP engine: :class:`SQPOptions`, one frozen dataclass checked once
at construction, which :class:`solvers.sqp.StochasticSQP` holds and its modules read."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence

from solvers.derivatives import JACOBIAN_MODES
from solvers.sqp.schedules import LR_SCHEDULES
from solvers.progress import check_progress
from solvers.validation import check_choice, check_flag, check_interval, check_seed, positive_float, positive_int

__all__ = ["CONSTRAINT_BATCHES", "HESSIANS", "OPTION_NAMES", "SQPOptions"]

#: Values of ``constraint_batch``.
CONSTRAINT_BATCHES: tuple[str, ...] = ("auto", "full", "batch", "balanced", "snapshot")
#: Values of ``hessian``.
HESSIANS: tuple[str, ...] = ("auto", "adam", "adagrad", "gauss-newton")


@dataclass(frozen=True)
class SQPOptions:
    """Every setting of :class:`solvers.sqp.StochasticSQP`, checked when created (a ``ValueError``
    names the setting); :func:`dataclasses.replace` makes a changed copy.

    Parameters
    ----------
    epochs : int or "auto", default "auto"
        Passes over the training data. "auto": 500 full-batch epochs (the paper's experiments); with
        mini-batches enough epochs for 500 steps (a network's step ``beta`` below 0.5: ``500 * 0.5 / beta``,
        under ``lr="auto"`` on ``B < 256`` rows ``500 sqrt(256 / B)``), between 10 and 500, or for a linear model whose
        polish takes the curvature metric (``hessian``) enough for ``100 * 0.5 / lr`` steps (at most
        500), at least 2 (:func:`auto_epochs`). The
        resolved number is ``epochs_`` after :meth:`fit`.
    lr : float or "auto", default "auto"
        Initial learning rate ``beta_0``. "auto": :data:`~solvers.sqp.engine.DEFAULT_LR` (0.5, the
        paper's experiments), and :data:`~solvers.sqp.engine.MINIBATCH_NETWORK_LR` (0.75) for the
        mini-batch steps of a network (more than one weight matrix among the trained tensors; a
        linear model has one) on batches of at least
        :data:`~solvers.sqp.engine.MINIBATCH_NETWORK_MIN_BATCH` (256) rows, which in the epochs'
        budget fit further with the longer steps; on ``B`` fewer rows ``0.5 sqrt(B / 256)``
        (:func:`~solvers.sqp.engine.network_step`: the step shrinks as the gradient's noise grows);
        the resolved value is ``lr_`` after :meth:`fit`. A network's mini-batch
        steps reach it over the first epoch (``lr_schedule`` "rsqrt"). These values were chosen on
        the binary cross-entropy, whose curvature in the output is at most 1/4; the squared error's
        is 2, and the first steps, taken at the metric's shift before the second moment has grown,
        are ``lr / sqrt(hessian_shift)`` times the gradient: on a standardised regression target the
        divergence guard backs off once in most such runs (and warns). Pass a smaller ``lr`` for
        ``loss="mse"`` (0.02 took no back-off in the runs measured, ``benchmarks/results/solver_notes.md``).
        Under the Gauss-Newton metric of a linear model (``hessian``) the diagonal leaves out how
        the inputs move together: where the metric's spread ``lambda``
        (:func:`solvers.curvature.metric_spread`, the largest eigenvalue of the Gauss-Newton matrix
        in its diagonal metric, about the number of inputs that move together) puts ``0.5 * lambda``
        above :data:`~solvers.sqp.engine.STABLE_STEP_SPREAD` (4), the steps would overshoot along
        their common direction and the loss oscillate, so "auto" takes ``3 / lambda``
        (:data:`~solvers.sqp.engine.SAFE_STEP_SPREAD`; ``metric_spread_`` after :meth:`fit`). A
        linear model's mini-batch steps under the gradient metric take the same rule with the spread
        of that metric's first steps, ``lambda_max(G) / sqrt(mu)`` (``start_spread_``), whose steps
        are ``lr / sqrt(mu)`` times the gradient before the second moments grow.
    batch_size : int or None, default None
        Rows per objective mini-batch; None means full-batch gradients.
    constraint_batch : {"auto", "full", "snapshot", "batch", "balanced"}, default "auto"
        Where each iteration's constraint rows and Jacobian come from:

        - "full": all training rows (one extra pass over all rows per mini-batch step);
        - "snapshot": all rows at a snapshot ``w_s``, refreshed ``constraint_refresh`` times per epoch,
          and the first-order model ``c_s + J_s (w - w_s)`` in between (:mod:`solvers.sqp.snapshot`):
          no sampling noise reaches the QP, as the [SQP] theory takes the constraints as exact;
        - "batch": the objective's mini-batch. Group rates are then ratios of means over the few rows
          of each group near the threshold, and steps that follow their noise can lose the objective;
          the distance-covariance family (U-statistics) is unbiased on every batch;
        - "balanced": ``constraint_batch_size // n_strata`` rows per stratum, drawn at every step
          ([SQP] Thm 3.1: unbiased group means);
        - "auto": "full" in full-batch mode; with mini-batches "snapshot", or "batch" when a
          constraint's rows cost more than linear time on all rows (``cost_on_all_rows``), chosen on
          the grid of ``benchmarks/sqp_stochastic.py --grid``.
    constraint_batch_size : int or None, default None
        Rows of a "balanced" constraint batch; None: ``batch_size``.
    constraint_refresh : int, default 2
        Full-data refreshes per epoch of "snapshot": the fixed spacing, at fixed steps of each epoch,
        which ``constraint_drift_tol`` shortens where the rows drift. Each costs about one full-batch
        iteration; two because the first-order model drifts most on small, tightly constrained problems.
    constraint_drift_tol : float, "auto" or None, default "auto"
        With "snapshot": refresh sooner where the first-order model drifts. At each refresh the
        drift ``|c_i(w) - (c_s + J_s (w - w_s))_i|`` of every row is compared with its tolerance;
        above it on any row the steps between refreshes halve, below a quarter of it on every row
        they double, up to the ``constraint_refresh`` spacing
        (:class:`~solvers.sqp.snapshot.ConstraintSnapshot`). "auto": 0.02 times each constraint's
        declared ``row_scale`` (:data:`~solvers.sqp.snapshot.DEFAULT_DRIFT_TOL`; rate units for
        the group-rate constraints, two points of rate), rows of a constraint without a scale not
        measured; a number: that tolerance on every row, in the rows' own units; None: the fixed
        spacing. Several groups under a network drift most (ten rows near their bounds rather than
        two), and there "auto" refreshes up to every step. A checkpoint (``state_dict``) holds the
        spacing and the snapshot, so a resumed run continues as the uninterrupted one.
    step : {"fixed", "adaptive"}, default "fixed"
        ``alpha_k = beta_k`` or the adaptive rule of [B21] Alg. 3.1.
    feasibility_restoration : bool, default True
        Add the rest of the normal step ``v = argmin 1/2 v'Hv  s.t.  l <= c + Jv <= u``:
        ``w <- w + alpha d + (1 - alpha) v``, so that ``c`` meets the linearised bounds whatever
        ``alpha`` (with ``alpha < 1`` alone an infeasible iterate approaches the feasible set at rate
        ``alpha``); ``v = 0`` at feasible iterates, and the merit and step rules still use ``d``.
        Composite-step SQP (Byrd-Omojokun) on top of [SQP] Alg. 1; False gives the paper's step.
    lr_schedule : {"auto", "plateau", "rsqrt", "paper", "none"}, default "auto"
        "auto": "plateau" in full-batch mode, "rsqrt" with mini-batches. "rsqrt":
        ``beta_k = lr / sqrt(1 + k / (4 K))``, ``K`` steps per epoch (the diminishing steps of [SQP]
        Thm 3.1; :data:`solvers.sqp.schedules.RSQRT_EPOCHS`), for a network times
        ``min(1, (k + 1) / K)`` over the first epoch (:func:`solvers.sqp.schedules.rsqrt_beta`).
        "plateau": ``beta *= lr_decay`` when the merit ``tau f + V`` (epoch means) has reached no new
        best for ``lr_patience`` epochs, never below ``lr_floor * lr``. "paper": [SQP] Alg. 2
        (``lr_kmin``, ``lr_interval``, ``lr_factor``, ``lr_weight``, ``lr_min``), which can freeze
        training. ``True``/``False`` mean "paper"/"none".
    polish_iterations : int, default 50
        End-game of a mini-batch run, with or without constraints: up to this many full-batch SQP
        iterations on all rows (exact
        calibration, feasibility restoration, a diminishing step), from the average of the last
        epoch's iterates (Polyak tail average; a network's from its last iterate); up to four times
        this many while an infeasible iterate still approaches the bounds. Every polish iterate is a
        candidate for the returned model; it stops at a feasible KKT point and leaves
        :meth:`state_dict` untouched.
        A full-batch run polishes its last iterate only when it ends without a good feasible one,
        for at most as many iterations as it trained epochs (:func:`solvers.sqp.endgame.polish_last`).
        0 turns it off.
    lr_patience : int, default 20
        Epochs without merit improvement before a "plateau" decay.
    lr_decay : float, default 0.5
        Factor in (0, 1) of a "plateau" decay.
    lr_floor : float, default 1e-3
        Smallest "plateau" learning rate as a fraction of ``lr``.
    stall_epochs : int or None, default None
        Stop a full-batch "plateau" run that has stalled at the floor: once its step is ``lr_floor * lr``
        (the schedule can shrink it no further), the run stops after ``stall_epochs`` epochs in which the
        objective of the model it would return fell by no more than ``stall_tol``. With ``f*_k`` the
        objective of the best feasible iterate after epoch ``k`` (:class:`solvers.outcome.BestIterate`) and the
        reference ``f_r`` taken at the first epoch at the floor with a feasible iterate, renewed whenever
        ``f*_k < f_r - stall_tol``: stop at the ``stall_epochs``-th epoch without a renewal (a crawl slower than
        ``stall_tol / stall_epochs`` per epoch). The run then ends as one that used its epochs (the
        polish of :func:`solvers.sqp.endgame.polish_last` included), with ``info["termination"]``
        ``"stalled"``; a checkpoint carries the count (:meth:`StochasticSQP.state_dict`). None: never
        (mini-batch runs and the other schedules never stop so).
    stall_tol : float, default 1e-3
        The least fall of that objective, in the loss's units, that counts as progress for ``stall_epochs``.
    calibrate_exact : bool, default True
        Solve the QP for ``l - b <= c + J d <= u - b``, ``b`` a moving average of the gap
        ``c_exact - c`` between the exact rows and their smooth surrogate (updated on full-data
        constraint batches). The surrogate then gives only the direction; the exact measure sets the
        level, so the exact rows meet the user's bounds despite the surrogate's bias. A fairopt
        extension of [SQP] Alg. 1. The engine then differentiates each constraint's
        :class:`solvers.contract.CalibratedForm` for ``spread="threshold"`` where it offers one
        (fairopt's group rates without a named surrogate: ``sigmoid(5 t)`` instead of the smoothed
        step), for ``spread="wide"`` in a network's mini-batch steps (``sigmoid(2 t)``:
        :meth:`StochasticSQP.calibrated_spread`); the history's smooth rows ``c`` are then the form's,
        its exact rows the same. False: the constraints as given.
    calibration_weight : float, default 0.2
        Weight ``w`` in (0, 1) of ``b <- (1 - w) b + w (c_exact - c)``.
    hessian : {"auto", "adam", "adagrad", "gauss-newton"}, default "auto"
        The QP's diagonal metric ``H``. "adam" and "adagrad": ``H = diag(sqrt(v + mu))`` from a
        second-moment estimate ``v`` of the gradients. "gauss-newton": ``H = diag(G + mu)``, ``G``
        a moving average (:data:`~solvers.sqp.steps.GAUSS_NEWTON_DECAY`) of the loss's
        Gauss-Newton diagonal ``G_jj = sum_i l''_i (d out_i / d w_j)^2`` on the objective batch
        (:mod:`solvers.curvature`): each parameter steps by about its own Newton step, so the
        coefficient of a rare one-hot level, whose curvature and gradient are both in proportion
        to its frequency, moves as fast as a common one's. Needs a feed-forward network
        (``nn.Linear`` layers and elementwise activations, e.g. :func:`fairopt.models.linear`,
        :func:`fairopt.models.mlp`, optionally followed by a fixed affine output as the
        regressor's) and no data parallelism; one more forward pass every
        :data:`~solvers.sqp.steps.GAUSS_NEWTON_EVERY` steps. Its steps are held to the recent-steps
        trust region with the "adam" metric's gradient step as the floor, the first one
        included (:func:`~solvers.sqp.steps.qp_direction`): where the curvature is still small, a
        Newton step is out of proportion. "auto" (resolved per fit as ``hessian_``):
        "gauss-newton" for a full-batch fit of a linear model (one ``nn.Linear`` layer, as
        :func:`fairopt.models.linear`) with a named loss ("bce", "mse", "poisson", also scaled or
        L2-penalised), else "adam"; a mini-batch fit of such a model trains under "adam" and
        polishes, a full-batch phase, under "gauss-newton" (``polish_hessian_``), its accumulator
        started from the curvature on all rows and its step from ``lr``. For a linear model the
        diagonal is the loss's own curvature per coefficient; for a network it leaves out the
        coupling of the layers, and the small curvature of hidden units makes its raw steps far
        longer than the trust region, which then sets them; a mini-batch's curvature is a noisy
        estimate of it. The measurements behind the choice: ``benchmarks/results/curvature_metric``
        and ``benchmarks/results/solver_notes.md``.
    beta2 : float, default 0.999
        Decay of the Adam-type second moment.
    hessian_shift : float or "auto", default "auto"
        ``mu`` in ``h = sqrt(v + mu)``; "auto": :data:`FULL_BATCH_SHIFT` (0.3) in full-batch mode,
        :data:`MINIBATCH_SHIFT` (0.05) with mini-batches, whose ``v`` also holds the gradient's
        sampling variance, and :data:`GAUSS_NEWTON_SHIFT` (0.01, in units of curvature) for
        ``h = G + mu`` under the Gauss-Newton metric; the resolved value is ``hessian_shift_``. A
        large shift (the authors' code: 100) makes ``h`` nearly constant, plain gradient descent
        that under-optimises; a small one lets early steps, before ``v`` builds up, reach
        ``lr / sqrt(mu)`` times the gradient.
    sigma, epsilon, tau0, xi0, tau_min, xi_min, eta, theta : float
        Merit/ratio/step parameters of [B21] (defaults 0.1, 1e-2, 0.1, 1.0, 1e-12, 1e-12,
        0.5, 1e4).
    lr_min, lr_kmin, lr_interval, lr_factor, lr_weight : learning-rate adjustment ([SQP]
        Alg. 2: 1e-7, 200 epochs, 5, 10, 0.85).
    tol : float, default 1e-3
        Stationarity tolerance for ``converged``: ``||g + J'y||_inf`` on the full training data at
        the returned iterate, ``y`` the multipliers of the unit-metric QP (zero at a KKT point).
    feasibility_tol : float, default 1e-6
        Largest exact violation of any row (in the row's own units) for a feasible iterate.
    jacobian : {"auto", "batched", "loop"}, default "auto"
        How the ``1 + m`` rows ``[df/dout; dc/dout]`` are pulled back through the model: one batched
        VJP or ``1 + m`` backward calls ("loop"). "auto": for group-rate rows and a row-wise model
        with a hidden layer on at least ``solvers.strata.MIN_ROWS`` rows, the stratified pullback
        (:mod:`solvers.strata`: one model pass per stratum, two backward passes whatever ``m``; no
        row screening); else "loop"; a plain feed-forward network is pulled back in closed form
        (:mod:`solvers.feedforward`). "loop" and "batched" always use autograd.
    seed : int, default 0
        Seed of the samplers and of the Lipschitz probe direction.
    verbose : int or "auto", default "auto"
        ``"auto"``: a progress bar once training has run a few seconds; 0 silent; 1 the bar from
        the start and per-epoch INFO logs (:mod:`solvers.progress`).
    callbacks : sequence of callables
        ``cb(engine, record) -> bool | None`` after every iteration; True stops training.
    distributed : bool or None, default None
        Data-parallel full-batch SQP over the ranks of a ``torch.distributed`` process group, each
        with its own row shard (:mod:`solvers.distributed`). None: when ``torch.distributed`` is
        initialised.
    chunk_rows : int or None, default None
        Rows per chunk of the full-data passes (epoch-end candidates, polish, final check), so that
        their memory is bounded by the chunk (:class:`solvers.sums.ChunkedDerivatives`; with
        memory-mapped rows and mini-batches training never holds all rows). Needs rows that are
        functions of per-group sums; other constraints are not chunked. None: one pass.
    screen_rows : bool, default True
        Full-batch iterations skip the Jacobian rows of constraint rows far inside their bounds
        (inactive in the QP, one backward pass each); every 10th iteration, near a KKT point and
        after a relaxed QP all rows are computed (:mod:`solvers.sqp.screening`).
    """

    epochs: int | str = "auto"
    lr: float | str = "auto"
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
    stall_epochs: int | None = None
    stall_tol: float = 1e-3
    calibrate_exact: bool = True
    calibration_weight: float = 0.2
    hessian: str = "auto"
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
    constraint_drift_tol: float | str | None = "auto"

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
        if self.stall_epochs is not None:
            positive_int(self.stall_epochs, "stall_epochs", allow_integral_float=True)
        positive_float(self.stall_tol, "stall_tol", allow_zero=True)
        if not isinstance(self.lr_schedule, bool):  # True for "paper", False for "none"
            check_choice(self.lr_schedule, LR_SCHEDULES, "lr_schedule")
        positive_int(self.polish_iterations, "polish_iterations", allow_zero=True)
        for name in ("feasibility_restoration", "calibrate_exact", "screen_rows"):
            check_flag(getattr(self, name), name)
        if self.lr != "auto":
            positive_float(self.lr, "lr")
        for name in ("batch_size", "constraint_batch_size"):
            if getattr(self, name) is not None:
                positive_int(getattr(self, name), name, allow_integral_float=True)
        choices = {
            "constraint_batch": CONSTRAINT_BATCHES,
            "step": ("fixed", "adaptive"),
            "hessian": HESSIANS,
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
        if isinstance(self.constraint_drift_tol, str):
            check_choice(self.constraint_drift_tol, ("auto",), "constraint_drift_tol")
        elif self.constraint_drift_tol is not None:
            positive_float(self.constraint_drift_tol, "constraint_drift_tol")
        check_seed(self.seed, allow_none=False, allow_negative=False)
        check_progress(self.verbose)
        if self.constraint_batch == "balanced" and self.batch_size is None and self.constraint_batch_size is None:
            raise ValueError("constraint_batch: 'balanced' needs batch_size or constraint_batch_size")


#: The names of the settings (the fields of :class:`SQPOptions`).
OPTION_NAMES: frozenset[str] = frozenset(SQPOptions.__dataclass_fields__)
