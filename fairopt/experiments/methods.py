"""Training methods behind one interface, for comparisons and calibration.

A :class:`Method` has a ``name``, the ``hyperparameter`` it is swept over (a bound such as
``"delta"``, a penalty ``"weight"``, or None) and ``fit(train, value=..., seed=...) -> Fitted``.
:class:`SQPMethod`, :class:`PenaltyMethod`, :class:`LagrangianMethod` and :class:`MovingTargetsMethod` wrap
the engines of :func:`fairopt.training.engine_class`; another method is one small class whose ``fit`` returns a
:class:`Fitted` holding ``model(X) -> out`` (or ``predict(batch) -> out``).
"""

from __future__ import annotations

import inspect
import math
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Protocol, Sequence, runtime_checkable

import torch
from torch import nn

from fairopt import models
from fairopt.sklearn_learner import is_sklearn_model
from fairopt.training import ENGINE_DEFAULTS, TrainingOptions, engine_class, first_order_defaults, run_engine
from solvers.contract import looks_like_constraint
from solvers.history import History
from solvers.penalty import penalised_loss
from solvers.problem import prediction_outputs

__all__ = [
    "Method",
    "Fitted",
    "ModelFactory",
    "model_factory",
    "default_loss",
    "SQPMethod",
    "PenaltyMethod",
    "LagrangianMethod",
    "MovingTargetsMethod",
    "PENALTY_HYPERPARAMETERS",
]

ModelFactory = Callable[[int, int], nn.Module]
#: Hyper-parameter names that are penalty strengths, not requested bounds.
PENALTY_HYPERPARAMETERS = ("weight", "lambda")
ConstraintBuilder = Callable[[float], Any]

_TASK_LOSSES = {"binary": "bce", "regression": "mse", "poisson": "poisson"}


@dataclass
class Fitted:
    """A trained model as :func:`~fairopt.experiments.compare` evaluates it.

    Attributes
    ----------
    model : callable
        ``model(X) -> out`` (n,): logits, predictions or log-rates.
    predict : callable, optional
        ``predict(batch) -> out`` for models that read more than ``X`` (e.g. the sensitive
        attributes, as the fair ridge models of [FR]); used instead of ``model``.
    history : History or None
        Per-iteration training records.
    constraints : list
        The method's own constraints, set up, whose exact values and violation are reported.
    status : str
        The engine's final status.
    converged : bool
        The engine's own test (feasible and stationary).
    seconds : float
        Training wall time.
    info : dict
        Engine extras (multipliers, ...).
    measured : list or None
        Objects whose measure is reported as realised; None: ``constraints``.
    """

    model: Callable[[torch.Tensor], torch.Tensor]
    history: History | None = None
    constraints: list = field(default_factory=list)
    status: str = "fitted"
    converged: bool = False
    seconds: float = float("nan")
    info: dict = field(default_factory=dict)
    predict: Callable[[Any], torch.Tensor] | None = None
    measured: list | None = None

    @property
    def measured_objects(self) -> list:
        """``measured``, or the reported ``constraints`` when it is None."""
        return list(self.constraints if self.measured is None else self.measured)

    def outputs(self, batch: Any) -> torch.Tensor:
        """The model output on a batch (FairData), without gradient, as a flat tensor: ``predict(batch)`` when
        given, else a module's outputs computed in float64 (:func:`solvers.problem.prediction_outputs`, the
        estimators' predict path, so a row at the threshold takes the label ``predict`` gives it)."""
        with torch.no_grad():
            out = self.predict(batch) if self.predict is not None else prediction_outputs(self.model, batch.X)
        return torch.as_tensor(out).reshape(-1)


@runtime_checkable
class Method(Protocol):
    """What :func:`~fairopt.experiments.compare` and :func:`~fairopt.experiments.calibrate_penalty` run.

    Attributes
    ----------
    name : str
        Label in result tables and plots (unique within a comparison).
    hyperparameter : str or None
        Name of the swept value; None if the method takes none.
    """

    name: str
    hyperparameter: str | None

    def fit(self, train: Any, *, value: float | None, seed: int) -> Fitted:
        """Train on ``train`` (a FairData) with hyper-parameter ``value`` and ``seed``."""
        ...


def model_factory(kind: str = "linear", hidden: Sequence[int] = (32,), activation: str = "leaky_relu") -> ModelFactory:
    """A factory ``(n_features, seed) -> model`` of :func:`fairopt.models.linear` or :func:`fairopt.models.mlp`."""
    if kind == "linear":
        return lambda n_features, seed: models.linear(n_features, seed=seed)
    if kind == "mlp":
        hidden = tuple(hidden)
        return lambda n_features, seed: models.mlp(n_features, hidden=hidden, activation=activation, seed=seed)
    raise ValueError(f"kind: expected 'linear' or 'mlp', got {kind!r}")


def default_loss(task: str) -> str:
    """The engines' loss name for a task: bce (binary), mse (regression), poisson."""
    if task not in _TASK_LOSSES:
        raise ValueError(f"task: expected one of {sorted(_TASK_LOSSES)}, got {task!r}")
    return _TASK_LOSSES[task]


def _as_list(objects: Any) -> list:
    if objects is None:
        return []
    if callable(objects) and not isinstance(objects, (list, tuple)):
        return [objects]
    return list(objects)


class _EngineMethod:
    """Shared adapter: build a model from the factory, run an engine, time it."""

    default_name = "method"
    default_hyperparameter: str | None = None

    def __init__(self, *, model: str | ModelFactory, name: str | None, hyperparameter: str | None,
                 loss: Any, engine_options: dict) -> None:
        self.model = model_factory(model) if isinstance(model, str) else model
        if not callable(self.model):
            raise ValueError(f"model: expected 'linear', 'mlp' or a factory (n_features, seed) -> module, got {model!r}")
        self.name = name or self.default_name
        self.hyperparameter = hyperparameter if hyperparameter is not None else self.default_hyperparameter
        self.loss = loss
        self.engine_options = dict(engine_options)
        try:
            self._engine(None, 0)  # validate the options now, not in the middle of a sweep
        except TypeError as exc:
            raise ValueError(f"engine_options: {sorted(self.engine_options)} are not all arguments of the "
                             f"engine of {type(self).__name__} ({exc})") from None

    def _engine(self, value: float | None, seed: int, task: str | None = None) -> Any:  # pragma: no cover
        raise NotImplementedError

    def _options(self, engine: str, task: str | None) -> dict:
        """``engine_options`` over the estimators' ``epochs`` and ``lr`` for a first-order ``engine`` on ``task``
        (:data:`fairopt.training.ENGINE_DEFAULTS`: a classifier's 1,000 epochs at 0.02), not the engine's own
        (100 at 1e-3, which leave a penalty or Lagrangian baseline near the majority class), so that the
        first-order methods of a comparison take the estimators' budget. Options given here win. The methods
        train the engines on the objects given, without the estimators' L2 penalty (``alpha``) and, for
        :class:`SQPMethod`, with the constraints' own surrogates (the classifier's full-batch SQP fit steps its
        rate constraints under ``sigmoid(out)``, :data:`fairopt.training.SQP_RATE_SURROGATE`): a method and
        ``FairClassifier(method=...)`` on the same rows can end a few tenths of a point apart."""
        defaults: dict = {}
        if task is not None and engine in ("penalty", "lagrangian"):
            entry = ENGINE_DEFAULTS.get(task, {}).get(first_order_defaults(task, engine), {})
            defaults = {k: v for k, v in entry.items() if k in ("epochs", "lr")}
        return {**defaults, **self.engine_options}

    def _run(self, engine: Any, model: nn.Module, train: Any, loss: Any, value: float | None) -> tuple[Any, list]:
        """Run ``engine`` and return ``(FitResult, constraints to report)``."""
        raise NotImplementedError  # pragma: no cover

    def fit(self, train: Any, *, value: float | None, seed: int) -> Fitted:
        """Initialise the model from ``seed``, train it on ``train`` and time the training."""
        model = self.model(train.n_features, seed)
        engine = self._engine(value, seed, getattr(train, "task", None))
        loss = self.loss or default_loss(train.task)
        t0 = time.perf_counter()
        result, constraints = self._run(engine, model, train, loss, value)
        seconds = time.perf_counter() - t0
        return Fitted(model=result.model, history=result.history, constraints=constraints, status=result.status,
                      converged=bool(result.converged), seconds=seconds, info=dict(result.info),
                      measured=self._measured(constraints))

    def _measured(self, constraints: list) -> list:
        """What the run's realised measure is read from: its constraints by default."""
        return constraints

    def __repr__(self) -> str:
        return f"{type(self).__name__}(name={self.name!r}, hyperparameter={self.hyperparameter!r})"


def _takes_one_argument(fn: Any) -> bool:
    """Whether ``fn`` is a plain function of one argument, as a builder ``value -> constraint`` is (a penalty term
    is ``psi(out, data)``)."""
    if not (inspect.isfunction(fn) or inspect.ismethod(fn)):
        return False
    try:
        parameters = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return False
    positional = [p for p in parameters if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    return len(positional) == 1 and not any(p.kind == p.VAR_POSITIONAL for p in parameters)


class _ConstrainedMethod(_EngineMethod):
    """Adapter for engines that take ``constraints=`` built from the swept value."""

    default_hyperparameter = "delta"
    #: The estimators' ``method=`` whose engine this adapter runs (as :class:`PenaltyMethod`'s ``engine``).
    engine = "sqp"

    def __init__(self, constraint: ConstraintBuilder | None, *, model: str | ModelFactory = "linear",
                 name: str | None = None, hyperparameter: str | None = None, loss: Any = None,
                 **engine_options: Any) -> None:
        if constraint is not None and not callable(constraint):
            raise ValueError(f"constraint: expected a callable value -> constraint(s), got {constraint!r}")
        if looks_like_constraint(constraint):  # a constraint is callable too (its rows), but no builder
            raise ValueError(f"constraint: got the constraint {constraint!r}; this method builds its constraints "
                             "from the swept value, so pass a builder such as lambda delta: "
                             "DisparateImpact('sex', delta=delta) (lambda _: the constraint, for a fixed one)")
        self.constraint = constraint
        super().__init__(model=model, name=name, hyperparameter=hyperparameter, loss=loss,
                         engine_options=engine_options)

    def _engine(self, value: float | None, seed: int, task: str | None = None) -> Any:
        """The engine of ``engine`` (:func:`fairopt.training.engine_class`) with the options (:meth:`_options`)
        and ``seed``."""
        return engine_class(self.engine)(**{**self._options(self.engine, task), "seed": seed})

    def constraints_for(self, value: float | None) -> list:
        """The constraints for ``value`` (none when ``value`` or the builder is None)."""
        if value is None or self.constraint is None:
            return []
        return _as_list(self.constraint(value))

    def check_value(self, value: float | None) -> None:
        """Build the constraints of ``value``: their constructors raise for an unreachable bound before any
        run of a sweep trains.
        """
        self.constraints_for(value)

    def _run(self, engine: Any, model: nn.Module, train: Any, loss: Any, value: float | None) -> tuple[Any, list]:
        constraints = self.constraints_for(value)
        return engine.fit(model, train, loss=loss, constraints=constraints), constraints


class SQPMethod(_ConstrainedMethod):
    """Stochastic SQP with hard constraints ``constraint(value)``.

    Parameters
    ----------
    constraint : callable value -> Constraint or list, or None
        E.g. ``lambda delta: DisparateImpact("sex", delta=delta)``; ``value=None`` (or no
        builder) trains unconstrained.
    model : "linear", "mlp" or factory ``(n_features, seed) -> module``
    name : str, default "sqp"
    hyperparameter : str, default "delta"
    loss : str or callable, optional
        Default: the task's loss (:func:`default_loss`).
    **engine_options
        :class:`solvers.StochasticSQP` arguments (``epochs``, ``lr``, ``batch_size``, ...).

    Notes
    -----
    The engine trains the constraints as built, under their own surrogates, and without an L2 penalty;
    ``FairClassifier(method="sqp")`` gives its full-batch rate constraints ``sigmoid(out)``
    (:data:`fairopt.training.SQP_RATE_SURROGATE`) and ``alpha=3e-4``. To train as the estimator does, build
    the constraints with ``surrogate=fairopt.surrogates.Sigmoid(scale=1.0)``.
    """

    default_name = "sqp"
    engine = "sqp"


class LagrangianMethod(_ConstrainedMethod):
    """Lagrangian dual (SBR) training with constraints ``constraint(value)``.

    Parameters as in :class:`SQPMethod` (default name ``"lagrangian"``); ``engine_options`` go to
    :class:`solvers.lagrangian.LagrangianDual`, whose ``epochs`` and ``lr`` left out are the estimators'
    (:meth:`_EngineMethod._options`).
    """

    default_name = "lagrangian"
    engine = "lagrangian"


class MovingTargetsMethod(_ConstrainedMethod):
    """Moving Targets with constraints ``constraint(value)``: a master projects the targets onto them (HiGHS),
    a learner refits the projected targets ([GeDI] eq 56-57), as ``FairClassifier(method="moving_targets")``
    trains (:func:`fairopt.training.run_engine`).

    Parameters
    ----------
    constraint : callable value -> Constraint or list, or None
        As in :class:`SQPMethod`; each constraint needs a linear target encoding (the group-rate, covariance
        and GeDI constraints have one).
    model : "linear", "mlp", factory ``(n_features, seed) -> module``, or a scikit-learn estimator
        The learner: a torch model refitted by :class:`fairopt.learners.TorchLearner`, or a clone of the
        estimator refitted by its own ``fit``.
    name : str, default "moving_targets"
    hyperparameter : str, default "delta"
    loss : None
        The learners fit the task's own loss; another is refused.
    **engine_options
        :class:`solvers.moving_targets.MovingTargets` arguments (``iterations``, ``backend``, ...), and the
        torch learner's ``epochs``, ``lr`` and ``batch_size``.
    """

    default_name = "moving_targets"
    engine = "moving_targets"
    #: Options of the torch learner, not of the engine.
    LEARNER_OPTIONS = ("epochs", "lr", "batch_size")

    def __init__(self, constraint: ConstraintBuilder | None, *, model: Any = "linear", name: str | None = None,
                 hyperparameter: str | None = None, loss: Any = None, **engine_options: Any) -> None:
        if loss is not None:
            raise ValueError(f"loss: Moving Targets' learners fit the task's own loss, got {loss!r}")
        self.learner = model if is_sklearn_model(model) else None
        if self.learner is not None and any(k in engine_options for k in self.LEARNER_OPTIONS):
            raise ValueError(f"engine_options: {list(self.LEARNER_OPTIONS)} are options of the torch learners; a "
                             "scikit-learn model takes its own settings")
        super().__init__(constraint, model="linear" if self.learner is not None else model, name=name,
                         hyperparameter=hyperparameter, loss=None, **engine_options)

    def _split_options(self) -> tuple[dict, dict]:
        """``engine_options`` as the torch learner's (:data:`LEARNER_OPTIONS`) and the engine's own."""
        learner = {k: v for k, v in self.engine_options.items() if k in self.LEARNER_OPTIONS}
        return learner, {k: v for k, v in self.engine_options.items() if k not in learner}

    def _engine(self, value: float | None, seed: int, task: str | None = None) -> Any:
        """The engine with its own options (the learner's are left out), built to check them."""
        return engine_class(self.engine)(**{**self._split_options()[1], "seed": seed})

    def fit(self, train: Any, *, value: float | None, seed: int) -> Fitted:
        """Refit the learner by Moving Targets on ``train`` under ``constraint(value)`` and time it."""
        constraints = self.constraints_for(value)
        learner, engine = self._split_options()
        factory = self.model
        model = self.learner if self.learner is not None else (lambda p: factory(p, seed))
        options = TrainingOptions(method="moving_targets", task=train.task, model=model, seed=int(seed), verbose=0,
                                  engine_params=engine, **learner)
        t0 = time.perf_counter()
        result = run_engine(options, train, constraints)
        seconds = time.perf_counter() - t0
        return Fitted(model=result.model, history=result.history, constraints=constraints, status=result.status,
                      converged=bool(result.converged), seconds=seconds, info=dict(result.info))


class PenaltyMethod(_EngineMethod):
    """Penalty training ``loss + value * P`` with fixed penalty terms.

    Parameters
    ----------
    penalties : penalty, Constraint or list of them
        What :meth:`solvers.penalty.Penalty.fit` accepts (a Constraint is penalised by its
        surrogate violation).
    model, name (default "penalty"), loss
        As in :class:`SQPMethod`.
    hyperparameter : str, default "weight"
    weight_of : callable value -> weight, optional
        Map the swept value to the weight, e.g. ``lambda lam: 1 / lam`` for [SQP] eq. 3,
        ``loss + (1/lambda) r``; default: the value itself.
    engine : {"penalty", "sqp"}, default "penalty"
        :class:`solvers.penalty.Penalty`, or :class:`solvers.StochasticSQP` without constraints on
        the penalised loss: [SQP] sec 4.2's regularisation-only approach trained by the same
        algorithm as the constrained models.
    **engine_options
        Arguments of the engine; ``epochs`` and ``lr`` left out are the estimators' for the task
        (:meth:`_EngineMethod._options`), not the first-order engine's own.
    """

    default_name = "penalty"
    default_hyperparameter = "weight"

    def __init__(self, penalties: Any, *, model: str | ModelFactory = "linear", name: str | None = None,
                 hyperparameter: str | None = None, loss: Any = None,
                 weight_of: Callable[[float], float] | None = None, engine: str = "penalty",
                 **engine_options: Any) -> None:
        self.penalties = _as_list(penalties)
        if not self.penalties:
            raise ValueError("penalties: expected at least one penalty or constraint")
        builders = [p for p in self.penalties if _takes_one_argument(p)]  # a penalty is psi(out, data)
        if builders:
            raise ValueError(f"penalties: got the function {builders[0]!r}; PenaltyMethod takes the penalty terms "
                             "themselves (fairopt.penalties objects or constraints), fixed for the sweep, whose "
                             "swept value is the penalty weight (weight_of maps it)")
        if weight_of is not None and not callable(weight_of):
            raise ValueError(f"weight_of: expected a callable value -> weight, got {weight_of!r}")
        if engine not in ("penalty", "sqp"):
            raise ValueError(f"engine: expected 'penalty' or 'sqp', got {engine!r}")
        self.weight_of = weight_of
        self.engine = engine
        super().__init__(model=model, name=name, hyperparameter=hyperparameter, loss=loss,
                         engine_options=engine_options)

    def weight_for(self, value: float | None) -> float:
        """The penalty weight of ``value`` (0 for None: the unpenalised baseline)."""
        if value is None:
            return 0.0
        return float(self.weight_of(value)) if self.weight_of is not None else float(value)

    def check_value(self, value: float | None) -> None:
        """The penalty weight of ``value`` is a finite number >= 0 (``weight_of`` applied): a negative one fails
        before any run of a sweep trains, not after the runs before it."""
        weight = self.weight_for(value)
        if not math.isfinite(weight) or weight < 0:
            raise ValueError(f"{self.name}: the value {value!r} gives the penalty weight {weight!r}; a weight is a "
                             "finite number >= 0")

    def _engine(self, value: float | None, seed: int, task: str | None = None) -> Any:
        weight = {} if self.engine == "sqp" else {"weight": self.weight_for(value)}
        return engine_class(self.engine)(**{**self._options(self.engine, task), **weight, "seed": seed})

    def _measured(self, constraints: list) -> list:
        """Every penalty (and penalised constraint) with a measure: the penalised values."""
        return [p for p in self.penalties if callable(getattr(p, "realised", None))]

    def _run(self, engine: Any, model: nn.Module, train: Any, loss: Any, value: float | None) -> tuple[Any, list]:
        reported = [p for p in self.penalties if looks_like_constraint(p)]
        if self.engine == "sqp":
            objective = penalised_loss(loss, self.penalties, self.weight_for(value), train)
            return engine.fit(model, train, loss=objective), reported
        return engine.fit(model, train, loss=loss, penalties=self.penalties), reported
