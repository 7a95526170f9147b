"""Training for the estimators: the engine behind each ``method=``.

One job: turn an estimator's options (:class:`TrainingOptions`) and a
:class:`fairopt.FairData` into a trained model, a :class:`solvers.history.FitResult`.
:data:`ENGINES` maps each value of ``method=`` to the adapter that builds its engine from
the options and runs it; the module also holds the model factory (:func:`model_factory`),
the model and loss the gradient engines train (:func:`training_problem`), the
estimator-level engine defaults (:data:`ENGINE_DEFAULTS`, :func:`engine_param_defaults`)
and the rate surrogate of ``method="sqp"`` (:data:`SQP_RATE_SURROGATE`).

Methods (``method=``), each with the constraint rows of :mod:`fairopt.constraints`:

- ``"sqp"``: hard constraints, :class:`solvers.StochasticSQP`;
- ``"penalty"``: ``loss + weight * V(c)``, the total violation of the surrogate rows as a
  fixed-weight penalty, :class:`solvers.penalty.Penalty` (``engine_params={"weight": w}``);
- ``"lagrangian"``: learned multipliers, :class:`solvers.lagrangian.LagrangianDual`;
- ``"moving_targets"``: projection of the targets onto the constraints and refits of a
  :class:`fairopt.learners.TorchLearner`, :class:`solvers.moving_targets.MovingTargets`
  (constraints with a linear target encoding only: the rate constraints and GeDI).
"""

from __future__ import annotations

import contextlib
import math
import warnings
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Callable, Protocol

import numpy as np
import torch
from torch import nn

from fairopt import models
from fairopt.boosted import run_gbm
from fairopt.sklearn_learner import is_sklearn_model, run_sklearn_learner
from fairopt.constraints.rates import GroupRateConstraint
from fairopt.data import FairData
from fairopt.exceptions import warn_at_caller
from fairopt.learners import scaled_output, target_statistics
from solvers.history import FitResult
from solvers.label_rounding import settle_rounded_labels
from solvers.lagrangian import LagrangianDual
from solvers.losses import L2Regularised, linear_weights, scaled_mse_loss
from solvers.outcome import BoundWarning, ConstantPredictorWarning, NearConstantWarning
from solvers.penalty import Penalty
from solvers.problem import float64_forward
from solvers.sampling import covers_all_rows
from solvers.sqp import SQPWarning, StochasticSQP
from solvers.whitening import Whitening

__all__ = ["ALPHA_DEFAULTS", "CLASSIFIER_NETWORK_SCHEDULE", "ENGINES", "ENGINE_CLASSES", "ENGINE_CONSTANT_NOTE",
           "ENGINE_DEFAULTS", "ESTIMATOR_OPTIONS", "FIRST_ORDER_MINIBATCH_SCHEDULE", "LAGRANGIAN_CALIBRATE_EXACT",
           "MAX_WHITENED_INPUTS", "METHODS", "MODEL_KINDS", "PENALTY_ROW_SMOOTHING", "REFERENCE_OPTIONS",
           "REGRESSION_DUAL_STEPS", "REGRESSION_STALL", "SQP_RATE_SURROGATE", "WHITENED_LR", "EngineAdapter",
           "TrainingOptions", "engine_class", "engine_options", "engine_param_defaults", "first_order_defaults",
           "first_order_minibatch_defaults", "first_order_minibatch_epochs", "float64_outputs", "fold_whitened",
           "is_mini_batch", "model_factory", "run_engine", "run_lagrangian", "run_moving_targets", "run_penalty",
           "run_sqp", "train", "training_problem", "use_sqp_surrogates", "whitened_inputs"]

#: ``FitResult.info`` key of the engine's constant-predictor warning text, kept by :func:`train` for the
#: estimator's single warning about the fitted model.
ENGINE_CONSTANT_NOTE = "constant_predictor_note"
#: Values of ``method=``.
METHODS: tuple[str, ...] = ("sqp", "penalty", "lagrangian", "moving_targets")
#: Named architectures of ``model=``.
MODEL_KINDS: tuple[str, ...] = ("linear", "mlp", "gbm")
#: Estimator parameters that ``engine_params`` may not repeat.
ESTIMATOR_OPTIONS: tuple[str, ...] = ("epochs", "lr", "batch_size", "seed", "verbose")
#: The options of :class:`solvers.penalty.Penalty` the unconstrained reference training
#: keeps from ``engine_params`` (the first-order loop without the Lagrangian/penalty term).
REFERENCE_OPTIONS: tuple[str, ...] = ("optimizer", "optimizer_options", "seed", "verbose", "tol", "lr_schedule")

#: Estimator-level defaults of epochs/lr per task (``"binary"``: FairClassifier,
#: ``"regression"``: FairRegressor) and engine (``"sqp"``, ``"first_order"``,
#: ``"moving_targets"``), used where the user left the parameter None (else the engine's).
ENGINE_DEFAULTS: dict[str, dict[str, dict[str, Any]]] = {
    # measured on Adult and ACS-Colorado (DI >= 0.8): 1000 epochs at 0.02 reach SQP's accuracy
    # within 0.5 points; 100 at 1e-3 (the engines' defaults) end at 0.67 / 0.52
    "binary": {"first_order": {"epochs": 1000, "lr": 2e-2}},
    # measured on Communities and Crime (benchmarks/regression_fit.py): with these the
    # unconstrained linear fit reaches the least-squares optimum (test R2 of Ridge)
    # SQP: 10000 epochs is a budget, not a cost: a run stops at a feasible KKT point, or stalled at the
    # floor of its step (REGRESSION_STALL, engine_param_defaults); lr 0.02 keeps
    # the first steps of a network's standardised least squares stable (a linear model steps on
    # whitened inputs at WHITENED_LR instead: whitened_inputs)
    "regression": {"sqp": {"epochs": 10000, "lr": 0.02},
                   "first_order": {"epochs": 1000, "lr": 1e-2},
                   # Communities and Crime under GeDI <= 0.2x (seeds 0-2): with the signed dual update
                   # (engine_param_defaults) 3000 epochs end within 0.002 train R2 of the closed-form
                   # constrained least squares; 1000 stop 0.005-0.02 short
                   "lagrangian": {"epochs": 3000, "lr": 1e-2},
                   # batch_size None: full batch (the learner's own default is 128)
                   "moving_targets": {"epochs": 1000, "lr": 1e-2, "batch_size": None}},
}

#: The estimators' default L2 penalty ``alpha`` per task (``alpha=None``), in the scale of the mean
#: loss (see :func:`training_problem`).
ALPHA_DEFAULTS: dict[str, float] = {"binary": 3e-4, "regression": 0.0}

#: The named losses of the tasks (FairRegressor trains ``MSE / sd^2`` instead, see
#: :func:`training_problem`).
TASK_LOSSES: dict[str, str] = {"binary": "bce", "regression": "mse"}

#: The smooth rate surrogate ``method="sqp"`` gives rate constraints that name none (specs and
#: objects, :func:`use_sqp_surrogates`) in a full-batch fit, for every model: the rates' calibrated
#: form for ``spread="group"``, the mean predicted probability ``sigmoid(out)``
#: (:meth:`~fairopt.constraints.rates.GroupRateConstraint.calibrated_form`). SQP calibrates the QP's
#: bounds to the exact (hard-label) rates, so the surrogate only gives the direction; a soft one
#: reaches every row, not only the rows at the threshold. Measured on Adult, Dutch, ACS-Colorado and
#: COMPAS (DI >= 0.8, linear, 500 epochs) it gave 0.1-0.5 points more test accuracy and held-out DI
#: closer to the training value than the smoothed step at scale 50 (benchmarks/peers.py). The
#: engine's own choice for parameter steps, the ``"threshold"`` form ``sigmoid(5 out)``, was chosen
#: on mini-batch grids; in full batch the two are even on average and differ by data set
#: (benchmarks/estimator_surrogate.py), so the estimators keep this one there. Mini-batch fits keep
#: the engine's choice: under ``sigmoid(out)`` a mini-batch fit on a data set whose classes overlap
#: (COMPAS, loss near 0.67) weighs rows far from the threshold, drifts from the full batch's optimum
#: and lands up to several points below it (benchmarks/results/estimator_minibatch_grid/).
SQP_RATE_SURROGATE = GroupRateConstraint.calibrated_surrogates["group"]


@dataclass(frozen=True)
class TrainingOptions:
    """What the engines need of an estimator: its training parameters and its task.

    ``task`` is ``"binary"`` (:class:`fairopt.FairClassifier`) or ``"regression"``
    (:class:`fairopt.FairRegressor`); the other fields are the estimator parameters of the
    same names (``engine_params`` as a dict, ``{}`` for None).
    """

    method: str
    task: str
    model: str | Callable[[int], nn.Module] = "linear"
    hidden: tuple = (32,)
    activation: str = "leaky_relu"
    epochs: int | None = None
    lr: float | None = None
    batch_size: int | None = None
    seed: int = 0
    verbose: int | str = 0
    engine_params: Mapping[str, Any] = field(default_factory=dict)
    alpha: float = 0.0

    def engine_kwargs(self) -> dict:
        """``engine_params`` with the estimator's ``seed`` and ``verbose`` (the options
        every engine gets)."""
        return {**dict(self.engine_params or {}), "seed": int(self.seed), "verbose": self.verbose}


class EngineAdapter(Protocol):
    """Builds the engine of one ``method=`` from the options and runs it (``reference``:
    the same training without constraints); returns the engine's FitResult."""

    def __call__(self, options: TrainingOptions, data: FairData, constraints: list,
                 reference: bool = False) -> FitResult: ...


# --------------------------------------------------------------------------------------
# models and defaults
# --------------------------------------------------------------------------------------
def model_factory(options: TrainingOptions) -> Callable[[int], nn.Module]:
    """``n_features -> module``, initialised from ``seed``.

    Regression: the named architectures start with a zero output layer: with the output
    scaling the initial prediction is the training mean (a user's factory is left as it is).
    """
    seed = int(options.seed)
    if options.model == "linear":
        factory = lambda p: models.linear(p, seed=seed)  # noqa: E731
    elif options.model == "mlp":
        hidden, activation = tuple(np.atleast_1d(options.hidden).tolist()), options.activation
        factory = lambda p: models.mlp(p, hidden=hidden, activation=activation, seed=seed)  # noqa: E731
    else:
        return lambda p: _seeded_module(options.model, p, seed)
    if options.task == "regression":
        return lambda p: _zero_output_layer(factory(p))
    return factory


def training_problem(options: TrainingOptions, data: FairData,
                     whitening: Whitening | None = None) -> tuple[nn.Module, Any]:
    """The module the engines train and its loss (the task's named loss).

    Regression: ``scaled_output(net, sd, mean)`` (predictions, hence constraints and bounds,
    in the units of ``y``) with the loss ``MSE / sd^2`` (the standardised problem's loss);
    with row weights (``data.weights``) the weighted mean and sd, and the weighted MSE
    (:mod:`solvers.losses`).

    ``alpha > 0``: the loss plus ``alpha / 2 * sum_k ||W_k||^2`` over the weight matrices of
    the model's ``nn.Linear`` layers (:class:`solvers.losses.L2Regularised`; biases, hence
    the intercept, are not penalised; for an MLP every layer's matrix, the output layer's
    included). For the regressor the matrices are those of the standardised network, inside
    the output scaling. ``whitening``: ``data`` holds the whitened coordinates ``z`` of a linear
    model's inputs (:func:`whitened_inputs`), and the penalty is that of the folded coefficients,
    ``alpha / 2 * v' W' W v`` (:meth:`solvers.whitening.Whitening.ridge_form`).
    """
    if options.task == "regression":
        mean, sd = target_statistics(data.y, getattr(data, "weights", None))
        model, loss = scaled_output(model_factory(options)(data.n_features), sd, mean), scaled_mse_loss(sd)
    else:
        model, loss = model_factory(options)(data.n_features), TASK_LOSSES[options.task]
    if options.alpha > 0:
        weights = linear_weights(model)
        forms = None if whitening is None else [torch.from_numpy(whitening.ridge_form()) for _ in weights]
        loss = L2Regularised(loss, weights, options.alpha, forms)
    return model, loss


#: The most input columns whose covariance :func:`whitened_inputs` decomposes (``O(p^3)`` once per fit).
MAX_WHITENED_INPUTS = 2000

#: The SQP step of a linear regressor on whitened inputs (:func:`engine_options`), the engine's own
#: default. There the least-squares curvature is the identity, which the Gauss-Newton diagonal holds
#: exactly, so the regressor's ``lr`` 0.02 (chosen for correlated inputs, whose curvature the diagonal
#: misses) only slows the fit. On six tasks (Communities and Crime under GeDI, GeDI of degree 2 and
#: distance covariance, Law under GeDI and distance covariance, a pg15 sample under GeDI), seeds 0-2
#: (``benchmarks/results/regressor_minibatch/``): every full batch converged, in 10-62 iterations on
#: average (0.1-0.4 s), and every mini-batch fit of 256 or 1,024 rows ended within 0.0014 train R2 of
#: it without a warning. Measured beside it on seeds 0-1 (``benchmarks/results/solver_notes.md``): 1.0,
#: the Newton step, the same in full batch and up to 0.00015 lower on batches of 256; 0.02 on whitened
#: inputs 252-334 full-batch iterations, and most mini-batch fits not stationary.
WHITENED_LR = 0.5


def whitened_inputs(options: TrainingOptions, data: FairData) -> Whitening | None:
    """The whitening of the inputs under which ``method="sqp"`` fits a linear regressor
    (:mod:`solvers.whitening`), or None to fit on the inputs as they are.

    Why. The SQP steps scale the gradient by a diagonal metric (the Gauss-Newton diagonal, or
    Adam's on mini-batches). For least squares the full curvature is the inputs' covariance, and
    on many correlated inputs the diagonal misses most of it: on Communities and Crime (1,395
    training rows, 102 columns, two of them exact combinations of others) under GeDI <= 0.2x the
    full batch's 10,000 epochs (43-64 s) ended short of the constrained optimum (train R2 0.5057
    against 0.5130), and mini-batches 0.010-0.048 below that. On whitened inputs the curvature is the
    identity, which the diagonal metric holds exactly: the same fit converges in about 60 iterations
    (0.4 s, :data:`WHITENED_LR`) to the optimum, and mini-batches end within 0.0014 train R2 of it
    (``benchmarks/results/regressor_minibatch/``). The fitted model is folded back to the inputs
    (:func:`fold_whitened`), so what the estimator returns, saves and reports is the same linear
    model on the original columns.

    Not for classifiers (the logistic loss weighs rows by ``p (1 - p)``, and the estimators'
    classification defaults were chosen on the inputs as they are), networks, more than
    :data:`MAX_WHITENED_INPUTS` columns, or a fit whose ``engine_params`` set ``chunk_rows``
    (rows that need not fit in memory: the whitened copy would).
    """
    if options.method != "sqp" or options.task != "regression" or options.model != "linear":
        return None
    if data.n_features > MAX_WHITENED_INPUTS or dict(options.engine_params or {}).get("chunk_rows") is not None:
        return None
    whitening = Whitening(correlation=True).fit(data.X, getattr(data, "weights", None))
    return whitening if whitening.rank > 0 else None


def fold_whitened(options: TrainingOptions, data: FairData, whitening: Whitening, trained: nn.Module) -> nn.Module:
    """The model of :func:`training_problem` on ``data``'s own inputs equal to ``trained`` (the same
    model fitted on the whitened inputs): its linear layer takes ``coef = W v`` and
    ``intercept = b - m' W v`` (:meth:`solvers.whitening.Whitening.fold`)."""
    model, _ = training_problem(options, data)
    (source,) = [m for m in trained.modules() if isinstance(m, nn.Linear)]
    (target,) = [m for m in model.modules() if isinstance(m, nn.Linear)]
    bias = float(source.bias.detach().double()) if source.bias is not None else 0.0
    coef, intercept = whitening.fold(source.weight.detach().double(), bias)
    with torch.no_grad():
        target.weight.copy_(torch.as_tensor(coef, dtype=target.weight.dtype).reshape(target.weight.shape))
        if target.bias is not None:
            target.bias.fill_(intercept)
    model.train(trained.training)
    return model


def first_order_defaults(task: str, engine: str) -> str:
    """The :data:`ENGINE_DEFAULTS` entry of a first-order ``engine`` ("penalty" or "lagrangian") on ``task``:
    the engine's own where the task has one (the regressor's Lagrangian), else ``"first_order"``."""
    return engine if engine in ENGINE_DEFAULTS.get(task, {}) else "first_order"


def engine_options(options: TrainingOptions, engine: str = "", whitened: bool = False,
                   n_rows: int | None = None) -> dict:
    """``epochs``, ``lr``, ``batch_size`` as given; those left None take the estimator's
    defaults for ``engine`` (:data:`ENGINE_DEFAULTS`), else the engine's own. SQP with
    mini-batches keeps the engine's ``epochs="auto"`` (a budget of steps, not the full-batch
    epochs of the defaults); on ``whitened`` inputs (:func:`whitened_inputs`) its default step is
    :data:`WHITENED_LR`. A first-order ``engine`` (:func:`first_order_defaults`) on mini-batches of
    ``n_rows`` rows: the full batch's epochs as a budget of steps (:func:`first_order_minibatch_epochs`)."""
    given = {"epochs": options.epochs, "lr": options.lr, "batch_size": options.batch_size}
    defaults = dict(ENGINE_DEFAULTS.get(options.task, {}).get(engine, {}))
    if engine == "sqp" and options.batch_size is not None:
        defaults.pop("epochs", None)  # mini-batches: the engine's "auto" budget of steps, not full-batch epochs
    if engine == "sqp" and whitened:
        defaults["lr"] = WHITENED_LR
    first_order = engine in ("first_order", "lagrangian")
    if first_order and "epochs" in defaults and n_rows is not None and is_mini_batch(options.batch_size, n_rows):
        defaults["epochs"] = first_order_minibatch_epochs(defaults["epochs"], int(options.batch_size), n_rows)
    return {k: (defaults[k] if v is None else v) for k, v in given.items() if v is not None or k in defaults}


#: The step size of a first-order fit on mini-batches whose ``lr`` the estimator chose
#: (:func:`first_order_minibatch_defaults`): ``lr_t = lr (1 + cos(pi t / T)) / 2`` over its ``T`` steps.
FIRST_ORDER_MINIBATCH_SCHEDULE = "cosine"
#: ``row_smoothing`` of a Penalty fit on mini-batches (:func:`first_order_minibatch_defaults`): the weight
#: ``beta`` of each batch in the running mean of the constraint rows that switches the hinge's gradient.
PENALTY_ROW_SMOOTHING = 0.05
#: ``calibrate_exact`` of a classifier's Lagrangian fit on mini-batches (:func:`first_order_minibatch_defaults`):
#: the batch's exact rows in value, the calibrated form's in gradient.
LAGRANGIAN_CALIBRATE_EXACT = True


def first_order_minibatch_epochs(full_batch_epochs: int, batch_size: int, n_rows: int) -> int:
    """Epochs of a first-order fit on mini-batches whose ``epochs`` the estimator chose: as many steps as the
    full batch's, ``ceil(E / K)`` epochs of ``K = ceil(n / B)`` batches (at most ``E``).

    The full-batch defaults (:data:`ENGINE_DEFAULTS`) count epochs of one step each; kept as epochs, ``K``
    times the steps of the full batch, a mini-batch fit on 14,000 Adult rows and batches of 256 took 20x the
    full batch's time, at a constant step whose noise left it 2.5 points less accurate. ``E`` steps of a
    batch cost less than ``E`` full-batch steps, and with the decayed step of
    :data:`FIRST_ORDER_MINIBATCH_SCHEDULE` end near the full batch's fit
    (``benchmarks/results/first_order_minibatch/``)."""
    per_epoch = max(1, math.ceil(int(n_rows) / int(batch_size)))
    return max(1, min(int(full_batch_epochs), math.ceil(int(full_batch_epochs) / per_epoch)))


def first_order_minibatch_defaults(options: TrainingOptions, data: FairData) -> dict:
    """Engine options of a first-order fit (``method`` "penalty" or "lagrangian") on mini-batches
    (``engine_params`` override them; none in full batch, whose fits stay as they were).

    - ``lr_schedule=`` :data:`FIRST_ORDER_MINIBATCH_SCHEDULE` where ``lr`` is the estimator's: a batch's
      gradient is noisy, and Adam's steps at a constant ``lr`` leave the last iterate, which Penalty returns,
      wandering about the optimum by about ``lr`` per coordinate; decayed to 0 over the run it settles.
    - Penalty: ``row_smoothing=`` :data:`PENALTY_ROW_SMOOTHING`. A batch's hinge ``V(c_B)`` is a biased
      estimate of ``V(c)``: ``E max(c_B - u, 0) > max(E c_B - u, 0)``, so near the bound the batch penalty
      acts where the rows on all data are met and pushes the fit inside the bound, the more the noisier the
      rows (smaller batches, a network's sharper outputs: 1.1-2.8 points on Adult). The gradient is instead
      ``w sum_i 1{m_i > u_i} grad c_B,i`` (and the lower side alike) with the running mean
      ``m <- (1 - beta) m + beta c_B``: the switch of the hinge on an estimate of the rows on all data, the
      direction of the batch (unbiased given the switch).
    - Lagrangian: ``dual_update="signed"``. The hinge updates ``lambda <- lambda + rho V(c_B)`` only
      increase; a batch's rows are violated at times where all rows are met, so the multipliers grow
      with every step (Adult, 1,000 steps of 256 rows: 7.5 and 9.9 against the full batch's 0 and 1.5), the
      fit is pushed ever further inside the bound and the best feasible iterate is an early one. The
      signed excess's mean is the rows' excess on all data, and its multiplier settles where the rows
      are met (:mod:`solvers.lagrangian`).
    - Lagrangian: ``calibrate_exact=True``. The rows are ``c = c~ + sg(e - c~)``: the batch's exact rows ``e``
      (hard rates) in value, the gradient of the constraints' calibrated form ``c~`` (``sigmoid(5 out)``, a
      network's ``sigmoid(2 out)``, as SQP's mini-batch steps; ``sg`` without gradient). The default smoothed
      step (scale 50) has a slope on the few batch rows within a few hundredths of the threshold, so the
      primal term ``lambda grad c_B`` is mostly noise: even at the full batch's optimal multipliers the batch
      steps end far inside the bound, and the multipliers over-shoot in answer. The calibrated slope reaches
      most of a batch's rows; the levels stay the exact rates, whose batch mean is the rate on all rows, so
      the signed update still settles where the exact rows are met (measured in
      ``benchmarks/results/solver_notes.md``, grid in ``benchmarks/results/first_order_minibatch/``).
    """
    if options.method not in ("penalty", "lagrangian") or not is_mini_batch(options.batch_size, len(data)):
        return {}
    out: dict[str, Any] = {} if options.lr is not None else {"lr_schedule": FIRST_ORDER_MINIBATCH_SCHEDULE}
    if options.method == "penalty":
        out["row_smoothing"] = PENALTY_ROW_SMOOTHING
    elif options.task == "binary":  # the regressor's Lagrangian takes the signed update in any batch
        out.update(dual_update="signed", calibrate_exact=LAGRANGIAN_CALIBRATE_EXACT)
    return out


#: The regressor's Lagrangian dual step in the standardised problem, per dual update:
#: ``dual_lr = step / sd^2`` (:func:`engine_param_defaults`).
REGRESSION_DUAL_STEPS: dict[str, float] = {"ascent": 1.0, "signed": 0.01}


#: The regressor's full-batch SQP stop at the floor of its step (:func:`engine_param_defaults`): epochs at the
#: "plateau" schedule's floor ``lr_floor * lr`` without the returned model's standardised loss ``MSE / sd^2``
#: (``1 - R^2`` on the training rows) falling by ``stall_tol`` (:class:`solvers.sqp.options.SQPOptions`).
REGRESSION_STALL: dict[str, Any] = {"stall_epochs": 500, "stall_tol": 1e-3}


#: ``lr_schedule`` of a full-batch SQP fit of ``model="mlp"`` by the classifier (:func:`engine_param_defaults`):
#: the constant step ``beta = lr`` instead of the engine's "plateau".
CLASSIFIER_NETWORK_SCHEDULE = "none"


def engine_param_defaults(options: TrainingOptions, data: FairData, whitened: bool = False) -> dict:
    """Defaults of further engine options for ``method`` (``engine_params`` override them).

    Classification: SQP with ``model="mlp"`` in a full batch takes ``lr_schedule=``
    :data:`CLASSIFIER_NETWORK_SCHEDULE`, the constant step ``beta = lr``. The engine's "plateau"
    halves ``beta`` when the epoch's merit ``tau f + V`` reaches no new best for ``lr_patience``
    epochs; a network's exact rows rarely sit inside the bounds for long, and under several rows of
    groups near their bounds ``V`` moves by more than ``tau`` times the loss's progress, so the
    rule takes the step to its floor while the loss could still fall (the returned model is the best
    feasible iterate either way). Through this estimator the constant step keeps the accuracy on
    binary attributes and raises it on COMPAS and under several groups, every fit feasible
    (``benchmarks/results/solver_notes.md``). Linear models keep "plateau": their full batch
    converges under the curvature metric; so does the engine's own full batch, whose
    ``sigmoid(5 out)`` without the penalty gains little from a constant step.
    Regression: SQP: the engine's own Hessian shift (a smaller one,
    1e-3, made the first steps of the standardised problem blow up, which the engine's
    divergence guard answered by halving the learning rate three times). Lagrangian:
    ``dual_update="signed"`` (projected dual ascent on the signed excess, whose multipliers
    also decrease, :mod:`solvers.lagrangian`) unless ``engine_params`` names another, and
    ``dual_lr = step / sd^2`` with the standardised step of :data:`REGRESSION_DUAL_STEPS`
    (0.01 for ``"signed"``, the engine's 1.0 for ``"ascent"``): constraints proportional to
    the output scale (GeDI, covariance) have multipliers ``1/sd`` times the standardised
    ones. The hinge update with its step 1 overshoots the optimal multiplier in its first
    step (Communities and Crime under GeDI <= 0.2x: train R2 0.473 against the constrained
    optimum's 0.513); the signed update at 0.01 ends within 0.002 of it.
    Regression, SQP in a full batch: :data:`REGRESSION_STALL`, a stop once the step has sat at the "plateau"
    schedule's floor (``lr_floor * lr``, a thousandth of ``lr``) for ``stall_epochs`` epochs in which the
    returned model's ``1 - R^2`` on the training rows fell by no more than ``stall_tol``. The epochs'
    budget (:data:`ENGINE_DEFAULTS`) is an upper bound, and a run ends early at a feasible KKT point; a
    network's exact rows can instead alternate about a bound (GeDI on a binary attribute, where the
    returned model is the best iterate that lands inside it), which the schedule answers by shrinking the
    step to its floor, where the rest of the budget barely moves the fit
    (``benchmarks/results/solver_notes.md``). Runs that still improve at a longer step are not stopped: a
    stop on the loss alone cannot tell their slow progress from the crawl at the floor.
    SQP on ``whitened`` inputs (:func:`whitened_inputs`) with mini-batches: ``hessian="gauss-newton"``,
    whose metric there is the exact curvature (the engine's "auto" takes Adam's second moments for
    mini-batch steps, which at :data:`WHITENED_LR` set off the divergence guard in the first steps of
    most runs, with a ``TrainingInstabilityWarning``, for the same final fit).
    """
    if options.method in ("penalty", "lagrangian") and options.task == "binary":
        return first_order_minibatch_defaults(options, data)
    if options.task == "binary":
        network_full_batch = (options.method == "sqp" and options.model == "mlp"
                              and not is_mini_batch(options.batch_size, len(data)))
        return {"lr_schedule": CLASSIFIER_NETWORK_SCHEDULE} if network_full_batch else {}
    if options.method == "sqp" and whitened and is_mini_batch(options.batch_size, len(data)):
        return {"hessian": "gauss-newton"}
    if options.method == "sqp" and not is_mini_batch(options.batch_size, len(data)):
        return dict(REGRESSION_STALL)
    mini_batch = first_order_minibatch_defaults(options, data)
    if options.method != "lagrangian":
        return mini_batch
    update = dict(options.engine_params or {}).get("dual_update", "signed")
    if update not in REGRESSION_DUAL_STEPS:
        return mini_batch
    _, sd = target_statistics(data.y, getattr(data, "weights", None))
    return {**mini_batch, "dual_update": update, "dual_lr": REGRESSION_DUAL_STEPS[update] / sd ** 2}


def is_mini_batch(batch_size: Any, n_rows: int) -> bool:
    """Whether an SQP fit with this ``batch_size`` steps on mini-batches: a positive whole number of rows
    that does not cover ``n_rows`` (:func:`solvers.sampling.covers_all_rows`, the engine's own rule)."""
    whole = isinstance(batch_size, (int, np.integer)) and not isinstance(batch_size, bool)
    return whole and int(batch_size) > 0 and not covers_all_rows(int(batch_size), int(n_rows))


def use_sqp_surrogates(method: str, constraints: list, mini_batch: bool = False) -> None:
    """For ``method="sqp"`` in a full-batch fit: the rate constraints that name no surrogate
    (``surrogate=None``, from a spec or an object) use :data:`SQP_RATE_SURROGATE`; those that name one
    keep it. With ``mini_batch`` they are left without one, so that the engine takes its own calibrated
    form for parameter steps (``spread="threshold"``, ``sigmoid(5 out)``; a network's ``"wide"``,
    ``sigmoid(2 out)``: :meth:`solvers.StochasticSQP.calibrated_spread`), the forms its mini-batch
    defaults were chosen with.

    ``constraints`` are the estimator's own copies (:func:`fairopt.specs.resolve_constraints`),
    changed in place.
    """
    if method != "sqp" or mini_batch:
        return
    for constraint in constraints:
        if isinstance(constraint, GroupRateConstraint) and constraint.get_params().get("surrogate") is None:
            constraint.set_params(surrogate=SQP_RATE_SURROGATE)


# --------------------------------------------------------------------------------------
# the engine adapters
# --------------------------------------------------------------------------------------
#: ``method=`` -> the class of its engine, for the methods whose engine loads with this module;
#: :func:`engine_class` adds Moving Targets. The one method-to-engine table: the estimators'
#: adapters below and :mod:`fairopt.experiments.methods` both read it.
ENGINE_CLASSES: dict[str, type] = {"sqp": StochasticSQP, "penalty": Penalty, "lagrangian": LagrangianDual}


def engine_class(method: str) -> type:
    """The engine class of ``method`` (:data:`METHODS`): :data:`ENGINE_CLASSES`, or
    :class:`solvers.moving_targets.MovingTargets`, imported on first use (it loads the MILP/QP
    back-ends)."""
    if method == "moving_targets":
        from solvers.moving_targets import MovingTargets

        return MovingTargets
    if method not in ENGINE_CLASSES:
        raise ValueError(f"method: expected one of {list(METHODS)}, got {method!r}")
    return ENGINE_CLASSES[method]


def run_sqp(options: TrainingOptions, data: FairData, constraints: list, reference: bool = False) -> FitResult:
    """:class:`solvers.StochasticSQP` with the hard constraints (none for ``reference``); a linear
    regressor on whitened inputs, folded back after the fit (:func:`whitened_inputs`)."""
    whitening = whitened_inputs(options, data)
    whitened = whitening is not None
    fit_data = data if not whitened else data.with_inputs(
        torch.from_numpy(whitening.transform(data.X, np.float32)).to(data.X.device),
        [f"z{j}" for j in range(whitening.rank)])
    model, loss = training_problem(options, fit_data, whitening)
    kwargs = {**engine_param_defaults(options, data, whitened), **options.engine_kwargs()}
    engine = _make(engine_class("sqp"), {**engine_options(options, "sqp", whitened), **kwargs})
    result = engine.fit(model, fit_data, loss=loss, constraints=[] if reference else constraints)
    if whitened:
        result.model = fold_whitened(options, data, whitening, result.model)
    return result


def run_penalty(options: TrainingOptions, data: FairData, constraints: list, reference: bool = False) -> FitResult:
    """:class:`solvers.penalty.Penalty` with the constraints as fixed-weight penalties;
    ``reference``: the first-order loop without the penalty term (only the
    :data:`REFERENCE_OPTIONS` of ``engine_params``)."""
    model, loss = training_problem(options, data)
    kwargs = {**engine_param_defaults(options, data), **options.engine_kwargs()}
    if reference:  # the first-order loop without the Lagrangian/penalty term
        kwargs = {k: kwargs[k] for k in REFERENCE_OPTIONS if k in kwargs}
    engine = _first_order_engine(options, data, "penalty", kwargs)
    return engine.fit(model, data, loss=loss, penalties=[] if reference else constraints)


def run_lagrangian(options: TrainingOptions, data: FairData, constraints: list,
                   reference: bool = False) -> FitResult:
    """:class:`solvers.lagrangian.LagrangianDual` (learned multipliers; with no constraints
    the engine's plain first-order training of the loss); ``reference``: the first-order
    loop without the Lagrangian term (:func:`run_penalty`'s reference)."""
    if reference:
        return run_penalty(options, data, constraints, reference=True)
    model, loss = training_problem(options, data)
    kwargs = {**engine_param_defaults(options, data), **options.engine_kwargs()}
    engine = _first_order_engine(options, data, "lagrangian", kwargs)
    return engine.fit(model, data, loss=loss, constraints=constraints)


def _first_order_engine(options: TrainingOptions, data: FairData, method: str, kwargs: dict) -> Any:
    """The engine of ``method`` ("penalty" or "lagrangian") with the estimator's epochs and ``lr``
    (:func:`engine_options` for its :func:`first_order_defaults` on ``len(data)`` rows) and ``kwargs`` over them."""
    defaults = engine_options(options, first_order_defaults(options.task, method), n_rows=len(data))
    return _make(engine_class(method), {**defaults, **kwargs})


def run_moving_targets(options: TrainingOptions, data: FairData, constraints: list,
                       reference: bool = False) -> FitResult:
    """:class:`solvers.moving_targets.MovingTargets` refitting a
    :class:`fairopt.learners.TorchLearner` of the estimator's model (no constraints for
    ``reference``); the result's model is the best iteration's torch module."""
    from fairopt.learners import TorchLearner

    engine = _make(engine_class("moving_targets"), options.engine_kwargs())
    task = "classification" if options.task == "binary" else "regression"
    # regression: the learner trains scaled_output(net, sd, mean) with the loss MSE / sd^2,
    # the same standardisation as the other engines (training_problem)
    learner_options = engine_options(options, "moving_targets")
    if "batch_size" in learner_options and learner_options["batch_size"] is None:  # an estimator default: full batch
        learner_options["batch_size"] = len(data)
    if options.alpha > 0:  # Adam's (coupled) weight decay: the gradient of alpha/2 ||w||^2, biases included
        learner_options["weight_decay"] = options.alpha
    learner = TorchLearner(model_factory(options), task=task, seed=int(options.seed), **learner_options)
    result = engine.fit(learner, data, constraints=[] if reference else constraints, task=task)
    result.model = result.model.module_  # the engine returns the best iteration's learner
    return result


#: ``method=`` -> the adapter that builds and runs its engine (whose class is :func:`engine_class`).
ENGINES: dict[str, EngineAdapter] = {
    "sqp": run_sqp,
    "penalty": run_penalty,
    "lagrangian": run_lagrangian,
    "moving_targets": run_moving_targets,
}


def run_engine(options: TrainingOptions, data: FairData, constraints: list, reference: bool = False) -> FitResult:
    """The engine of ``options.method`` (:data:`ENGINES`) trained on ``data`` under
    ``constraints`` (``reference``: the same training without constraints); ``model="gbm"``:
    boosted trees (:func:`fairopt.boosted.run_gbm`); a scikit-learn estimator as ``model``: its clone
    refitted by Moving Targets (:func:`fairopt.sklearn_learner.run_sklearn_learner`)."""
    if is_sklearn_model(options.model):
        return run_sklearn_learner(options, data, constraints, reference)
    if isinstance(options.model, str) and options.model == "gbm":
        return run_gbm(options, data, constraints, reference)
    # the draws a module makes from torch's global RNG while it trains (dropout masks) follow ``seed`` too
    with _seeded_torch_rng(options.seed):
        return ENGINES[options.method](options, data, constraints, reference)


def train(options: TrainingOptions, data: FairData, constraints: list, reference: bool = False) -> FitResult:
    """Run the engine of ``method`` (``reference``: the same training without
    constraints). Returns the FitResult; the engine's per-fit relaxed-step and unmet-bound warnings
    are dropped (the estimator's diagnostics replace them, with the constraint names), the text of
    its constant-predictor warning (:class:`solvers.outcome.ConstantPredictorWarning`: no better
    than a constant; :class:`~solvers.outcome.NoUsableInputWarning`: no input to split on) is kept in
    ``result.info[ENGINE_CONSTANT_NOTE]`` for the diagnostics' one warning about the fitted model
    (:func:`fairopt.diagnostics.fit_quality_warnings`), and any other warning is passed on,
    attributed to the caller's line (:func:`fairopt.exceptions.warn_at_caller`). A classifier's rows
    within float32 rounding of the threshold keep the labels the engine measured in the float64 outputs
    that ``predict`` reads (:func:`solvers.label_rounding.settle_rounded_labels`)."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = run_engine(options, data, constraints, reference)
    for w in caught:
        if issubclass(w.category, NearConstantWarning):
            continue  # the diagnostics' near-constant rule is the same, and knows which bounds acted
        if issubclass(w.category, ConstantPredictorWarning):
            result.info[ENGINE_CONSTANT_NOTE] = str(w.message)
        elif not issubclass(w.category, (SQPWarning, BoundWarning)):
            warn_at_caller(w.message, w.category)
    if options.task == "binary" and constraints and not reference:
        settle_rounded_labels(result.model, data)  # predict's float64 labels = the ones the engine measured
    return result


# --------------------------------------------------------------------------------------
# helpers
# --------------------------------------------------------------------------------------
def float64_outputs(model: nn.Module, encoded: np.ndarray) -> np.ndarray:
    """``model(encoded)`` evaluated in float64 with the model's own parameters and buffers, as a numpy
    array (n,): :func:`solvers.problem.float64_forward`, the path a row's prediction does not depend on
    its batch through."""
    return float64_forward(model, encoded).numpy()


def _make(cls: type, options: dict) -> Any:
    """``cls(**options)``; an unknown option is a ValueError naming engine_params."""
    try:
        return cls(**options)
    except TypeError as exc:
        raise ValueError(f"engine_params: {cls.__name__} does not accept these options ({exc})") from None


@contextlib.contextmanager
def _seeded_torch_rng(seed: int) -> Iterator[None]:
    """Torch's global (CPU) RNG seeded with ``seed`` inside the context, the caller's state restored on exit."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(int(seed))
        yield


def _seeded_module(factory: Callable[[int], nn.Module], n_features: int, seed: int) -> nn.Module:
    """``factory(n_features)`` under ``torch.manual_seed(seed)``, global RNG untouched."""
    with _seeded_torch_rng(seed):
        module = factory(n_features)
    if not isinstance(module, nn.Module):
        raise ValueError(f"model: the factory returned {type(module).__name__}, expected a torch.nn.Module")
    return module


def _zero_output_layer(module: nn.Module) -> nn.Module:
    """``module`` with its last ``nn.Linear`` (the output layer) set to zero."""
    last = None
    for m in module.modules():
        if isinstance(m, nn.Linear):
            last = m
    if last is not None:
        with torch.no_grad():
            last.weight.zero_()
            if last.bias is not None:
                last.bias.zero_()
    return module
