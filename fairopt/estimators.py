"""scikit-learn estimators trained under fairness constraints.

:class:`FairClassifier` (binary classification, logistic loss) and :class:`FairRegressor`
(least squares) put the library's engines behind the scikit-learn estimator interface::

    clf = FairClassifier(constraints=[("disparate_impact", "sex", 0.8)], epochs=200)
    clf.fit(X, y, sensitive_features=S)
    clf.predict(X_test)

``fit`` builds a :class:`fairopt.FairData` from the arrays (``X`` standardised with the
training means and deviations, sensitive features typed binary / categorical /
continuous), builds the model, trains it with the chosen engine and runs the diagnostics
below. Sensitive features are needed only to train and to evaluate fairness; ``predict``
takes ``X`` alone (put a sensitive column in ``X`` too if the model may use it).

Methods (``method=``), each with the constraint rows of :mod:`fairopt.constraints`:

- ``"sqp"``: hard constraints, :class:`solvers.StochasticSQP`;
- ``"penalty"``: ``loss + weight * V(c)``, the total violation of the surrogate rows as a
  fixed-weight penalty, :class:`solvers.penalty.Penalty` (``engine_params={"weight": w}``);
- ``"lagrangian"``: learned multipliers, :class:`solvers.lagrangian.LagrangianDual`;
- ``"moving_targets"``: projection of the targets onto the constraints and refits of a
  :class:`fairopt.learners.TorchLearner`, :class:`solvers.moving_targets.MovingTargets`
  (constraints with a linear target encoding only: the rate constraints and GeDI).

Diagnostics (:class:`fairopt.FairnessWarning`), after every ``fit``:

- *infeasible or unmet bound*: a constraint whose exact violation on the training data
  exceeds ``violation_tol`` at the end of training (with the number of relaxed SQP steps,
  i.e. iterations whose linearised constraints had no solution);
- *relaxed steps at the end*: relaxed SQP steps among the last 10% of the iterations;
- *inactive constraint*: a constraint that is satisfied and did not restrict the model.
  The rule reads the history. SQP: no row of the constraint in the QP's active set and
  none violated over the last 10% of the iterations (zero multipliers at the end: the
  final point is stationary without the constraint). Penalty and Lagrangian: its
  surrogate violation was 0 at every step (the term never changed a step; a hinge that
  was active earlier and is 0 at the end proves nothing, as the model may sit inside the
  bound only because the term pushed it there). Moving Targets: the unconstrained
  pre-trained learner already satisfies it. With ``check_inactive=True`` an unconstrained
  reference model with the same settings is trained as well and every bound it already
  satisfies is reported (a second fit).

:meth:`check_generalisation` compares the training violation with the violation on
held-out rows and warns when they differ by more than ``tol``.
"""

from __future__ import annotations

import logging
import math
import numbers
import warnings
from collections.abc import Mapping
from typing import Any, Callable

import numpy as np
import pandas as pd
import torch
from scipy.special import expit
from sklearn.base import BaseEstimator, ClassifierMixin, RegressorMixin
from sklearn.utils.multiclass import check_classification_targets
from sklearn.utils.validation import check_is_fitted, validate_data
from torch import nn

from fairopt import models
from fairopt._validation import (check_choice, check_flag, check_interval, check_seed, positive_float, positive_int,
                                 to_numpy)
from fairopt.data import FairData
from fairopt.evaluation import evaluate as evaluate_model
from fairopt.exceptions import FairnessWarning
from fairopt.constraints.rates import GroupRateConstraint
from fairopt.specs import is_constraint_object, resolve_constraints, spec_list
from fairopt.surrogates import Sigmoid
from solvers.lagrangian import LagrangianDual
from solvers.penalty import Penalty
from solvers.problem import row_violations
from solvers.outcome import BoundWarning
from solvers.sqp import SQPWarning, StochasticSQP

__all__ = ["FairClassifier", "FairRegressor", "METHODS", "sensitive_columns"]

logger = logging.getLogger(__name__)

#: Values of ``method=``.
METHODS: tuple[str, ...] = ("sqp", "penalty", "lagrangian", "moving_targets")
#: Named architectures of ``model=``.
MODEL_KINDS: tuple[str, ...] = ("linear", "mlp")
#: Fraction of the final iterations the history diagnostics read.
TAIL_FRACTION = 0.1
_ESTIMATOR_OPTIONS = ("epochs", "lr", "batch_size", "seed", "verbose")


# --------------------------------------------------------------------------------------
# sensitive features
# --------------------------------------------------------------------------------------
def sensitive_columns(sensitive_features: Any, n_rows: int, names: Any = None) -> dict[str, np.ndarray]:
    """The sensitive features as ``{name: 1-D array}``, checked against ``n_rows``.

    Parameters
    ----------
    sensitive_features : None, DataFrame, Series, dict name -> array, or array (n,) / (n, k)
        ``None`` gives ``{}``. Names come from the DataFrame columns, the Series name, the
        dict keys, or for arrays ``"sensitive"`` (1-D) and ``"sensitive_0"`` ..
        ``"sensitive_{k-1}"`` (2-D).
    n_rows : int
        Rows of ``X``; every column must have this length.
    names : str or list of str, optional
        Names that replace the natural ones, in column order (one per column).

    Raises
    ------
    ValueError
        A column of another length, arrays of more than 2 dimensions, names that do not
        match the number of columns, duplicate names.
    """
    if sensitive_features is None:
        return {}
    natural, columns = _named_columns(sensitive_features)
    if names is not None:
        given = [names] if isinstance(names, str) else list(names)
        if len(given) != len(columns) or not all(isinstance(n, str) and n for n in given):
            raise ValueError(f"sensitive_names: expected {len(columns)} non-empty name(s) for the sensitive "
                             f"features {natural}, got {names!r}")
        natural = given
    if len(set(natural)) != len(natural):
        raise ValueError(f"sensitive_features: duplicate names {natural}")
    for name, column in zip(natural, columns):
        if column.ndim != 1 or column.shape[0] != n_rows:
            raise ValueError(f"sensitive_features: {name!r} has shape {column.shape}; expected ({n_rows},), "
                             "one value per row of X")
    return dict(zip(natural, columns))


def _named_columns(sensitive_features: Any) -> tuple[list[str], list[np.ndarray]]:
    """Natural names and 1-D columns of any accepted sensitive-feature container."""
    if isinstance(sensitive_features, pd.DataFrame):
        names = [str(c) for c in sensitive_features.columns]
        return names, [sensitive_features.iloc[:, j].to_numpy() for j in range(sensitive_features.shape[1])]
    if isinstance(sensitive_features, pd.Series):
        name = sensitive_features.name
        return [str(name) if name is not None else "sensitive"], [sensitive_features.to_numpy()]
    if isinstance(sensitive_features, Mapping):
        return [str(k) for k in sensitive_features], [_column(v) for v in sensitive_features.values()]
    array = to_numpy(sensitive_features)
    if array.ndim == 1:
        return ["sensitive"], [array]
    if array.ndim == 2:
        k = array.shape[1]
        names = ["sensitive"] if k == 1 else [f"sensitive_{j}" for j in range(k)]
        return names, [array[:, j] for j in range(k)]
    raise ValueError(f"sensitive_features: expected a 1-D or 2-D array, got shape {array.shape}")


def _column(values: Any) -> np.ndarray:
    """A numpy column; an (n, 1) array is flattened (other shapes are checked later)."""
    array = to_numpy(values)
    return array.reshape(-1) if array.ndim == 2 and array.shape[1] == 1 else array


# --------------------------------------------------------------------------------------
# models
# --------------------------------------------------------------------------------------
# ``OutputScale`` (``out -> scale * out + shift``, fixed buffers) lives in fairopt.learners,
# shared by TorchLearner and FairRegressor (one target-scaling path); re-exported here.
from fairopt.learners import OutputScale, scaled_output, target_statistics  # noqa: E402
from solvers.losses import scaled_mse_loss  # noqa: E402


def _seeded_module(factory: Callable[[int], nn.Module], n_features: int, seed: int) -> nn.Module:
    """``factory(n_features)`` under ``torch.manual_seed(seed)``, global RNG untouched."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(int(seed))
        module = factory(n_features)
    if not isinstance(module, nn.Module):
        raise ValueError(f"model: the factory returned {type(module).__name__}, expected a torch.nn.Module")
    return module


def plain_info(info: Mapping) -> dict:
    """Engine extras that are plain values (scalars, strings, lists of them); arrays such
    as the Moving Targets training targets are dropped (they are training data)."""
    kept = {}
    for key, value in info.items():
        if value is None or isinstance(value, (bool, numbers.Number, str)):
            kept[key] = value.item() if hasattr(value, "item") else value
        elif isinstance(value, (list, tuple)) and all(v is None or isinstance(v, (bool, numbers.Number, str))
                                                      for v in value):
            kept[key] = [v.item() if hasattr(v, "item") else v for v in value]
    return kept


def _tail(history: Any) -> list[dict]:
    """The last ``TAIL_FRACTION`` of the iteration records (at least one); the closing SQP
    record that describes the returned model is not an iteration."""
    records = _steps(history)
    return records[-max(1, math.ceil(TAIL_FRACTION * len(records))):] if records else []


# --------------------------------------------------------------------------------------
# the estimators
# --------------------------------------------------------------------------------------
class _FairEstimator(BaseEstimator):
    """Shared implementation of :class:`FairClassifier` and :class:`FairRegressor`."""

    _task = "binary"
    _loss = "bce"
    # True once fit() has set up constraints_ on the training data (False when loaded)
    _constraints_from_training = False

    def __init__(
        self,
        constraints: Any = None,
        *,
        method: str = "sqp",
        model: str | Callable[[int], nn.Module] = "linear",
        hidden: tuple = (32,),
        activation: str = "leaky_relu",
        epochs: int | None = None,
        lr: float | None = None,
        batch_size: int | None = None,
        seed: int = 0,
        engine_params: dict | None = None,
        sensitive_names: Any = None,
        sensitive_kinds: dict | None = None,
        check_inactive: bool = False,
        violation_tol: float = 1e-3,
        verbose: int = 0,
        margin: float | str = 0.0,
        validation_fraction: float | None = None,
        confidence: float = 0.95,
        on_fail: str = "warn",
        n_candidates: int = 7,
    ) -> None:
        self.constraints = constraints
        self.method = method
        self.model = model
        self.hidden = hidden
        self.activation = activation
        self.epochs = epochs
        self.lr = lr
        self.batch_size = batch_size
        self.seed = seed
        self.engine_params = engine_params
        self.sensitive_names = sensitive_names
        self.sensitive_kinds = sensitive_kinds
        self.check_inactive = check_inactive
        self.violation_tol = violation_tol
        self.verbose = verbose
        self.margin = margin
        self.validation_fraction = validation_fraction
        self.confidence = confidence
        self.on_fail = on_fail
        self.n_candidates = n_candidates

    # ------------------------------------------------------------------ fit
    def fit(self, X: Any, y: Any, *, sensitive_features: Any = None) -> "_FairEstimator":
        """Train the model on ``X``, ``y`` under the constraints.

        Parameters
        ----------
        X : array-like (n, p)
            Numeric inputs (encode categorical columns first, e.g. with a
            ``OneHotEncoder`` in a Pipeline). Standardised with the training statistics.
        y : array-like (n,)
            Two classes (classifier) or numbers (regressor).
        sensitive_features : DataFrame, Series, dict or array, optional
            The sensitive features the constraints name (see :func:`sensitive_columns`);
            kinds are inferred (2 values: binary; more numeric values: continuous; text:
            categorical) unless ``sensitive_kinds`` declares them. ``None`` is allowed only
            without constraints: the fit is then the unconstrained model.

        Returns
        -------
        self

        Raises
        ------
        ValueError
            Bad inputs or parameters (naming them), constraints without sensitive
            features, a sensitive name a constraint needs but that is absent.
        """
        self._check_parameters()
        X, y = validate_data(self, X, y, dtype=np.float64)
        target = self._encode_training_target(y)
        columns = sensitive_columns(sensitive_features, X.shape[0], self.sensitive_names)
        constraints = _with_sqp_surrogates(self, resolve_constraints(self.constraints))
        if constraints and not columns:
            raise ValueError("sensitive_features: required because constraints are given "
                             f"({[c.name for c in constraints]}); pass them to fit(X, y, sensitive_features=...)")
        data = FairData.from_arrays(X, target, columns, task=self._task, feature_names=_internal_names(X.shape[1]),
                                    sensitive_kinds=self.sensitive_kinds)
        data, held_out = _validation_split(self, data)  # (data, None) without validation_fraction
        margins = _margins(self, data, constraints)  # None without margin
        if held_out is not None and self.margin == "auto":  # certified candidates, fixed sequence
            result, relaxed, training, certificates = _certified_sequence(self, data, held_out, constraints, margins)
        else:
            training = _tightened(constraints, margins)  # `constraints` itself without margin
            result, relaxed = self._train(data, training)
            certificates = None if held_out is None else _certificates(self, held_out, result.model, constraints)
            self.candidates_ = None
        self._set_fitted(data, constraints, result)
        _warn_poor_fit(self, data)
        self._diagnose(data, constraints, relaxed)
        _held_out_statements(self, data, constraints, training, certificates)
        _release_batch_caches(constraints)
        _release_batch_caches(training)
        return self

    def _check_parameters(self) -> None:
        check_choice(self.method, METHODS, "method")
        if not (callable(self.model) or self.model in MODEL_KINDS):
            raise ValueError(f"model: expected one of {MODEL_KINDS} or a callable n_features -> nn.Module, "
                             f"got {self.model!r}")
        if self.engine_params is not None and not isinstance(self.engine_params, Mapping):
            raise ValueError(f"engine_params: expected a dict of engine options, got {self.engine_params!r}")
        clash = sorted(set(self.engine_params or {}) & set(_ESTIMATOR_OPTIONS))
        if clash:
            raise ValueError(f"engine_params: {clash} are estimator parameters; set them on the estimator")
        positive_float(self.violation_tol, "violation_tol", allow_zero=True)
        check_flag(self.check_inactive, "check_inactive")
        check_seed(self.seed, allow_none=False, allow_negative=False)
        _check_held_out_parameters(self)

    def _encode_training_target(self, y: np.ndarray) -> np.ndarray:  # pragma: no cover - abstract
        raise NotImplementedError

    # ------------------------------------------------------------------ engines
    def _model_factory(self) -> Callable[[int], nn.Module]:
        """``n_features -> module``, initialised from ``seed``."""
        if self.model == "linear":
            return lambda p: models.linear(p, seed=int(self.seed))
        if self.model == "mlp":
            hidden, activation = tuple(np.atleast_1d(self.hidden).tolist()), self.activation
            return lambda p: models.mlp(p, hidden=hidden, activation=activation, seed=int(self.seed))
        return lambda p: _seeded_module(self.model, p, int(self.seed))

    #: Estimator-level defaults of epochs/lr per engine ("sqp", "first_order",
    #: "moving_targets"), used where the user left the parameter None (else the engine's).
    _engine_defaults: dict = {}

    def _engine_options(self, engine: str = "") -> dict:
        """``epochs``, ``lr``, ``batch_size`` as given; those left None take the estimator's
        defaults for ``engine`` (:attr:`_engine_defaults`), else the engine's own."""
        given = {"epochs": self.epochs, "lr": self.lr, "batch_size": self.batch_size}
        defaults = self._engine_defaults.get(engine, {})
        return {k: (defaults[k] if v is None else v) for k, v in given.items() if v is not None or k in defaults}

    def _training_problem(self, data: FairData) -> tuple[nn.Module, Any]:
        """The module the engines train and its loss (the task's named loss here)."""
        return self._model_factory()(data.n_features), self._loss

    def _engine_param_defaults(self, data: FairData) -> dict:
        """Defaults of further engine options for ``method`` (``engine_params`` override them)."""
        return {}

    def _train(self, data: FairData, constraints: list, reference: bool = False) -> tuple[Any, int]:
        """Run the engine of ``method`` (``reference``: the same training without
        constraints). Returns the FitResult and the number of relaxed SQP steps, whose
        per-fit engine warning is replaced by the estimator's diagnostics."""
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            result = self._run_engine(data, constraints, reference)
        for w in caught:
            # the engine's relaxed-step and unmet-bound warnings become the estimator's
            # FairnessWarnings (the diagnostics), with the constraint names
            if not issubclass(w.category, (SQPWarning, BoundWarning)):
                warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)
        relaxed = sum(r.get("qp_status") == "relaxed" for r in result.history.records)
        return result, relaxed

    def _run_engine(self, data: FairData, constraints: list, reference: bool) -> Any:
        options = {**dict(self.engine_params or {}), "seed": int(self.seed), "verbose": self.verbose}
        if self.method == "moving_targets":
            from solvers.moving_targets import MovingTargets  # loads the MILP/QP back-ends: only when used

            return self._run_moving_targets(data, [] if reference else constraints,
                                            _make(MovingTargets, options))
        model, loss = self._training_problem(data)
        if self.method == "sqp":
            options = {**self._engine_param_defaults(data), **options}
            engine = _make(StochasticSQP, {**self._engine_options("sqp"), **options})
            return engine.fit(model, data, loss=loss, constraints=[] if reference else constraints)
        if self.method == "penalty" or reference:
            if reference:  # the first-order loop without the Lagrangian/penalty term
                options = {k: options[k] for k in ("optimizer", "optimizer_options", "seed", "verbose", "tol")
                           if k in options}
            engine = _make(Penalty, {**self._engine_options("first_order"), **options})
            return engine.fit(model, data, loss=loss, penalties=[] if reference else constraints)
        options = {**self._engine_param_defaults(data), **options}
        engine = _make(LagrangianDual, {**self._engine_options("first_order"), **options})
        return engine.fit(model, data, loss=loss, constraints=constraints)

    def _run_moving_targets(self, data: FairData, constraints: list, engine: Any) -> Any:
        from fairopt.learners import TorchLearner

        task = "classification" if self._task == "binary" else "regression"
        # regression: the learner trains scaled_output(net, sd, mean) with the loss MSE / sd^2,
        # the same standardisation as the other engines (FairRegressor._training_problem)
        options = self._engine_options("moving_targets")
        if "batch_size" in options and options["batch_size"] is None:  # an estimator default: full batch
            options["batch_size"] = len(data)
        learner = TorchLearner(self._model_factory(), task=task, seed=int(self.seed), **options)
        result = engine.fit(learner, data, constraints=constraints, task=task)
        result.model = result.model.module_  # the engine returns the best iteration's learner
        return result

    # ------------------------------------------------------------------ fitted state
    def _set_fitted(self, data: FairData, constraints: list, result: Any) -> None:
        model = result.model
        model.eval()
        self.model_ = model
        self.preprocessor_ = data.preprocessor
        self.constraints_ = constraints
        self._constraints_from_training = True
        self.history_ = result.history
        self.status_ = result.status
        self.converged_ = bool(result.converged)
        self.engine_info_ = plain_info(result.info)
        self.reference_violations_ = None
        records = len(_steps(result.history))
        self.n_iter_ = records - 1 if self.method == "moving_targets" else records
        self.sensitive_names_ = list(data.sensitive_names)
        self.sensitive_kinds_ = dict(data.sensitive_kinds)
        self.sensitive_levels_ = {k: list(v) for k, v in data.sensitive_levels.items()}
        self.train_violations_ = _violations(model, data, constraints)
        self.train_violation_ = float(sum(self.train_violations_.values()))

    # ------------------------------------------------------------------ diagnostics
    def _diagnose(self, data: FairData, constraints: list, relaxed: int) -> None:
        """The FairnessWarnings of the module docstring."""
        if not constraints:
            return
        self.reference_violations_ = self._reference_violations(data, constraints) if self.check_inactive else None
        for index, (name, c, rows) in enumerate(zip(self.train_violations_, constraints, _row_blocks(constraints))):
            message = self._unmet_message(name, relaxed) or self._inactive_message(index, name, rows, c)
            if message:
                warnings.warn(message, FairnessWarning, stacklevel=3)
        tail = _tail(self.history_)
        tail_relaxed = sum(r.get("qp_status") == "relaxed" for r in tail)
        if tail_relaxed:
            warnings.warn(
                f"{tail_relaxed} of the last {len(tail)} SQP iterations needed a relaxed QP step (the linearised "
                "constraints had no solution): the bounds are at the edge of what the model can reach on this "
                "data.", FairnessWarning, stacklevel=3)

    def _unmet_message(self, name: str, relaxed: int) -> str | None:
        """The warning for a constraint violated on the training data at the end, if it is."""
        violation = self.train_violations_[name]
        if violation <= self.violation_tol:
            return None
        steps = (f"; {relaxed} relaxed QP step(s), i.e. iterations whose linearised constraints had no solution"
                 if self.method == "sqp" else "")
        return (f"{name}: violated on the training data at the end of training (exact violation {violation:.3g} > "
                f"violation_tol={self.violation_tol:g}{steps}). The bound may be infeasible for this model and "
                "data, or training needs more epochs; see history_.")

    def _inactive_message(self, index: int, name: str, rows: slice, constraint: Any) -> str | None:
        """The warning for a constraint that did not restrict the model, if it did not."""
        reasons = []
        if self._not_binding(index, rows, constraint):
            reasons.append(self._not_binding_reason())
        reference = self.reference_violations_
        # Moving Targets' reference is its pre-training, already the reason above
        if reference is not None and reference[name] <= self.violation_tol and self.method != "moving_targets":
            reasons.append(f"the unconstrained reference model satisfies it (violation {reference[name]:.3g})")
        if not reasons:
            return None
        return (f"{name}: inactive constraint - " + "; ".join(reasons) +
                ". The requested bound does not restrict the model.")

    def _not_binding(self, index: int, rows: slice, constraint: Any) -> bool:
        """The history rule for an inactive constraint (module docstring): ``index`` is the
        constraint's position, ``rows`` its rows in the concatenated constraint set."""
        lower = constraint.lower.to(torch.float64)
        upper = constraint.upper.to(torch.float64)
        if self.method == "moving_targets":
            values = torch.tensor(self.history_[0]["c_predictions"][rows], dtype=torch.float64)
            return float(row_violations(values, lower, upper).sum()) == 0.0
        tail = _tail(self.history_)
        if self.method == "sqp":
            active_rows = {int(a[1:]) for r in tail for a in r["active"]}
            if any(i in active_rows for i in range(rows.start, rows.stop)):
                return False
            return all(float(row_violations(torch.tensor(r["c"][rows], dtype=torch.float64), lower, upper).sum()) == 0
                       for r in tail)
        # first-order methods: a hinge term that was 0 at every step never changed a step
        records = self.history_.records
        if self.method == "lagrangian":
            return all(max(r["viol"][rows], default=0.0) == 0.0 for r in records)
        return all(r["penalty"][index] == 0.0 for r in records)  # penalty: one term per constraint

    def _not_binding_reason(self) -> str:
        return {
            "sqp": "none of its rows was in the QP active set or violated over the last "
                   f"{TAIL_FRACTION:.0%} of the iterations (zero multipliers at the end of training)",
            "lagrangian": "its rows were never violated during training (the Lagrangian term never acted)",
            "penalty": "its penalty was 0 at every step (it never acted)",
            "moving_targets": "the unconstrained pre-trained learner already satisfies it",
        }[self.method]

    def _reference_violations(self, data: FairData, constraints: list) -> dict[str, float]:
        """Exact training violations of an unconstrained model trained with the same settings."""
        if self.method == "moving_targets":  # iteration 0 is the unconstrained learner
            values = torch.tensor(self.history_[0]["c_predictions"], dtype=torch.float64)
            return {name: float(row_violations(values[rows], c.lower, c.upper).sum())
                    for name, rows, c in zip(self.train_violations_, _row_blocks(constraints), constraints)}
        result, _ = self._train(data, constraints, reference=True)
        result.model.eval()
        return _violations(result.model, data, constraints)

    # ------------------------------------------------------------------ prediction
    def _outputs(self, X: Any) -> np.ndarray:
        """Model outputs (logits or predictions), float64 (n,)."""
        check_is_fitted(self)
        X = validate_data(self, X, reset=False, dtype=np.float64)
        encoded, _ = self.preprocessor_.transform(pd.DataFrame(X, columns=_internal_names(X.shape[1])))
        return _float64_outputs(self.model_, encoded)

    # ------------------------------------------------------------------ held-out rows
    def _held_out(self, X: Any, y: Any, sensitive_features: Any) -> FairData:
        """Rows encoded like the training data (same preprocessing, kinds and levels)."""
        check_is_fitted(self)
        X = validate_data(self, X, reset=False, dtype=np.float64)
        target = self._encode_target(np.asarray(y))
        if target.shape[0] != X.shape[0]:
            raise ValueError(f"y: {target.shape[0]} values for {X.shape[0]} rows of X")
        columns = sensitive_columns(sensitive_features, X.shape[0], self.sensitive_names)
        if sorted(columns) != sorted(self.sensitive_names_):
            raise ValueError(f"sensitive_features: expected the training features {self.sensitive_names_}, "
                             f"got {sorted(columns)}")
        columns = {name: columns[name] for name in self.sensitive_names_}
        data = FairData.from_arrays(X, target, columns, task=self._task, feature_names=_internal_names(X.shape[1]),
                                    sensitive_kinds=self.sensitive_kinds_, preprocessor=self.preprocessor_)
        for name in self.sensitive_names_:
            if list(data.sensitive_levels[name]) != list(self.sensitive_levels_[name]):
                raise ValueError(f"sensitive_features: {name!r} has the groups {data.sensitive_levels[name]} on these "
                                 f"rows but {self.sensitive_levels_[name]} in training; every training group "
                                 "must be present")
        return data

    def _encode_target(self, y: np.ndarray) -> np.ndarray:  # pragma: no cover - abstract
        raise NotImplementedError

    def _constraints_for(self, data: FairData) -> list:
        """The fitted constraints; a loaded estimator's constraints are set up on ``data``."""
        if self._constraints_from_training:
            return self.constraints_
        constraints = resolve_constraints(self.constraints_)
        for c in constraints:
            c.setup(data)
        return constraints

    def evaluate(self, X: Any, y: Any, *, sensitive_features: Any = None) -> dict:
        """:func:`fairopt.evaluate` of the model on these rows: performance, realised
        fairness per sensitive feature and the exact constraint values and violations.

        ``sensitive_features`` must hold the training sensitive features with all their
        training groups (they are encoded like the training data).
        """
        data = self._held_out(X, y, sensitive_features)
        constraints = self._constraints_for(data)
        try:
            return evaluate_model(self.model_, data, constraints)
        finally:
            _release_batch_caches(constraints)

    def check_generalisation(self, X: Any, y: Any, *, sensitive_features: Any, tol: float = 0.02) -> pd.DataFrame:
        """Compare each constraint's exact violation on held-out rows with its training value.

        Warns (:class:`fairopt.FairnessWarning`) for every constraint whose held-out
        violation differs from the training violation by more than ``tol`` (in the units
        of the constraint rows: rate differences for the rate constraints).

        Parameters
        ----------
        X, y : held-out rows.
        sensitive_features : their sensitive features (as in :meth:`fit`).
        tol : float, default 0.02
            Largest accepted ``|held-out violation - training violation|``.

        Returns
        -------
        pandas.DataFrame
            One row per constraint, columns ``train``, ``held_out`` and ``gap``
            (``held_out - train``).
        """
        positive_float(tol, "tol", allow_zero=True)
        data = self._held_out(X, y, sensitive_features)
        _require_all_groups(data, self.sensitive_levels_)
        constraints = self._constraints_for(data)
        held_out = _violations(self.model_, data, constraints)
        _release_batch_caches(constraints)
        table = pd.DataFrame({"train": pd.Series(self.train_violations_, dtype=float),
                              "held_out": pd.Series(held_out, dtype=float)})
        table["gap"] = table["held_out"] - table["train"]
        for name, row in table.iterrows():
            if abs(row["gap"]) > tol:
                warnings.warn(f"{name}: held-out violation {row['held_out']:.3g} differs from the training "
                              f"violation {row['train']:.3g} by more than tol={tol:g}; the fairness guarantee "
                              "holds on the training rows only.", FairnessWarning, stacklevel=2)
        return table


class FairClassifier(ClassifierMixin, _FairEstimator):
    """Binary classifier trained under fairness constraints (scikit-learn estimator).

    The model outputs a logit ``out``; ``predict`` is ``classes_[1]`` where ``out > 0``,
    ``predict_proba`` is ``sigmoid(out)``. Training minimises the mean logistic loss
    subject to the constraints (hard for ``"sqp"``, see the module docstring).

    Parameters
    ----------
    constraints : spec or list of specs, optional
        ``("disparate_impact", "sex", 0.8)``, ``"demographic_parity:sex:0.05"``, a table
        ``{"kind": ..., ...}`` or constraint objects (:mod:`fairopt.specs`). ``None``: no
        constraint (the unconstrained model).
    method : {"sqp", "penalty", "lagrangian", "moving_targets"}, default "sqp"
    model : {"linear", "mlp"} or callable, default "linear"
        :func:`fairopt.models.linear`, :func:`fairopt.models.mlp`, or a factory
        ``n_features -> torch.nn.Module`` (one float32 output per row), called under
        ``torch.manual_seed(seed)``.
    hidden : tuple of int, default (32,)
        Hidden-layer widths of ``model="mlp"``.
    activation : {"leaky_relu", "relu", "tanh"}, default "leaky_relu"
        Activation of ``model="mlp"``.
    epochs : int, optional
        Passes over the training data; ``None``: SQP 500 full-batch epochs (the engine's
        default; a run stops earlier at a feasible KKT point); penalty and Lagrangian 1000
        full-batch Adam epochs (the classifier's default: the engines' own 100 epochs at
        lr 1e-3 stop far from the fit, e.g. Adult 0.67 accuracy instead of 0.83). Moving
        Targets: epochs of each learner refit (default 200).
    lr : float, optional
        Learning rate; ``None``: SQP 0.5; Adam 0.02 for penalty and Lagrangian (the
        classifier's default), 1e-3 for the Moving Targets learner.
    batch_size : int, optional
        Rows per mini-batch; ``None``: full batch (Moving Targets learner: 128).
    seed : int, default 0
        Model initialisation and engine randomness.
    engine_params : dict, optional
        Further arguments of the engine: :class:`solvers.StochasticSQP` (e.g.
        ``lr_schedule``, ``step``), :class:`solvers.penalty.Penalty` (``weight``,
        ``optimizer``), :class:`solvers.lagrangian.LagrangianDual` (``dual_lr``,
        ``dual_update``), :class:`solvers.moving_targets.MovingTargets` (``iterations``,
        ``backend``, ``time_limit``).
    sensitive_names : str or list of str, optional
        Names of the sensitive features given as arrays (default ``"sensitive"``, or
        ``"sensitive_0"``, ... for several columns); they replace DataFrame/dict names too.
    sensitive_kinds : dict name -> {"binary", "categorical", "continuous"}, optional
        Declared kinds (e.g. integer-coded race as ``"categorical"``, else inferred
        continuous).
    check_inactive : bool, default False
        Also train an unconstrained reference model and warn for every bound it already
        satisfies.
    violation_tol : float, default 1e-3
        Exact training violation (in the units of the constraint rows) above which a
        constraint is reported as unmet; lower it for constraints with small bounds
        (distance covariance).
    verbose : int, default 0
    margin : float or "auto", default 0.0
        Train under bounds tightened by this amount on every finite side
        (``upper - margin``, ``lower + margin``, in the units of the constraint rows: rate
        differences for the rate constraints) so that the value on new rows has room to
        move. ``"auto"``: :func:`fairopt.certificate.auto_margin`, per row, from the group
        sizes (rate constraints) or a bootstrap (others), for a new sample the size of the
        held-out part (of a 30% hold-out without ``validation_fraction``). A margin alone
        is a prediction (``predicted_held_out_``), not a guarantee.
    validation_fraction : float in (0, 0.5], optional
        Hold out this fraction of the rows (stratified by target x sensitive cell, seeded
        by ``seed``), train on the rest, and certify the trained model on the held-out rows
        with :func:`fairopt.certificate.certify` (``certificate_``). The model is NOT
        refitted on all rows afterwards: the certificate is about the model you get.
    confidence : float, default 0.95
        Confidence level of the certificates and of ``margin="auto"``.
    on_fail : {"warn", "raise", "ignore"}, default "warn"
        A failed certificate emits a :class:`fairopt.FairnessWarning` naming the
        constraint, realised value, confidence bound and bound; ``"raise"`` raises
        :class:`fairopt.exceptions.CertificateError` (after fitting).
    n_candidates : int, default 7
        With ``validation_fraction`` and ``margin="auto"``: fit up to this many candidates
        under margins of decreasing inflation (2 to 0.5 times the held-out part's
        certificate half-width ``z se``, evenly spaced), certify them in that order and
        return the last one that passes before the first that fails (fixed-sequence
        testing: the order is fixed before any held-out row is seen, so the certificate
        keeps its confidence level). A smaller margin is more accurate when the held-out
        rows allow it; each candidate costs one fit, and the sequence stops at the first
        failure. ``1``: a single fit at inflation 2. Ignored otherwise.

    Attributes
    ----------
    classes_ : ndarray of the two labels; ``classes_[1]`` is the positive class.
    model_ : torch.nn.Module, the trained model (on standardised inputs).
    preprocessor_ : :class:`fairopt.Preprocessor` fitted on the training ``X``.
    constraints_ : list, the constraint objects set up on the training data.
    history_ : :class:`fairopt.History` of the engine's iterations.
    status_ : str; converged_ : bool (the engine's KKT/feasibility test).
    n_iter_ : int, iterations run (Moving Targets: master iterations).
    train_violations_ : dict constraint name -> exact violation on the training data;
        train_violation_ : their sum.
    reference_violations_ : dict or None, the same for the unconstrained reference
        (``check_inactive=True``).
    engine_info_ : dict of the engine's scalar extras (multipliers, final KKT residual).
    sensitive_names_, sensitive_kinds_, sensitive_levels_ : the training sensitive features.
    n_features_in_, feature_names_in_ : as in scikit-learn.
    certificate_ : list of :class:`fairopt.Certificate` (one per constraint) with
        ``validation_fraction``, else None.
    candidates_ : pandas.DataFrame or None. With ``validation_fraction`` and
        ``margin="auto"``: per candidate tried, the margin ``inflation``, whether its
        certificates ``passed``, the held-out value of each measure and its confidence bound, and which one
        was ``chosen``.
    validation_indices_ : ndarray of the rows of ``X`` held out (``validation_fraction``),
        else None; the model, preprocessing and ``train_violations_`` use the other rows.
    predicted_held_out_ : pandas.DataFrame or None. With a margin: per constraint row
        the exact training value, the margin and the range ``train -/+ margin``
        predicted for new rows (a prediction, not a certificate), and whether it lies
        within the bounds.
    """

    _task = "binary"
    _loss = "bce"
    # measured on Adult and ACS-Colorado (DI >= 0.8): 1000 epochs at 0.02 reach SQP's accuracy
    # within 0.5 points; 100 at 1e-3 (the engines' defaults) end at 0.67 / 0.52
    _engine_defaults = {"first_order": {"epochs": 1000, "lr": 2e-2}}

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.classifier_tags.multi_class = False
        return tags

    def _encode_training_target(self, y: np.ndarray) -> np.ndarray:
        check_classification_targets(y)
        classes = np.unique(y)
        if classes.size > 2:
            raise ValueError(f"y: Only binary classification is supported; FairClassifier got {classes.size} "
                             f"classes: {classes[:10].tolist()}")
        if classes.size < 2:
            raise ValueError(f"y: FairClassifier needs 2 classes, got 1 class: {classes.tolist()}")
        self.classes_ = classes
        return (y == classes[1]).astype(np.float64)

    def _encode_target(self, y: np.ndarray) -> np.ndarray:
        y = np.asarray(y).reshape(-1)
        unknown = ~np.isin(y, self.classes_)
        if unknown.any():
            raise ValueError(f"y: labels {np.unique(y[unknown])[:5].tolist()} are not among classes_ "
                             f"{self.classes_.tolist()}")
        return (y == self.classes_[1]).astype(np.float64)

    def decision_function(self, X: Any) -> np.ndarray:
        """The logit ``out`` of every row, shape (n,); positive means ``classes_[1]``."""
        return self._outputs(X)

    def predict_proba(self, X: Any) -> np.ndarray:
        """``[P(classes_[0]), P(classes_[1])]`` per row, shape (n, 2), ``P = sigmoid(out)``."""
        p1 = expit(self._outputs(X))
        return np.column_stack([1.0 - p1, p1])

    def predict(self, X: Any) -> np.ndarray:
        """``classes_[1]`` where the logit is positive, else ``classes_[0]``."""
        positive = self._outputs(X) > 0
        return self.classes_[positive.astype(np.int64)]


class FairRegressor(RegressorMixin, _FairEstimator):
    """Least-squares regressor trained under fairness constraints (scikit-learn estimator).

    The model's output is the prediction; training minimises the mean squared error
    subject to the constraints (typically :class:`~fairopt.constraints.GeDI`,
    :class:`~fairopt.constraints.Covariance` or
    :class:`~fairopt.constraints.DistanceCovariance`, whose bounds are in the units of
    ``y``). Parameters and attributes as in :class:`FairClassifier` (no ``classes_``).
    """

    _task = "regression"
    _loss = "mse"
    # measured on Communities and Crime (benchmarks/regression_fit.py): with these the
    # unconstrained linear fit reaches the least-squares optimum (test R2 of Ridge)
    # SQP: 10000 epochs is a budget, not a cost: a run stops at a feasible KKT point (Communities
    # and Crime, unconstrained: after 3700-7000 epochs, 2-4 s); lr 0.02 keeps the first steps
    # of the standardised least squares (curvature up to the number of correlated inputs) stable
    _engine_defaults = {"sqp": {"epochs": 10000, "lr": 0.02},
                        "first_order": {"epochs": 1000, "lr": 1e-2},
                        # batch_size None: full batch (the learner's own default is 128)
                        "moving_targets": {"epochs": 1000, "lr": 1e-2, "batch_size": None}}

    def _encode_training_target(self, y: np.ndarray) -> np.ndarray:
        return np.asarray(y, dtype=np.float64).reshape(-1)

    def _model_factory(self) -> Callable[[int], nn.Module]:
        """The named architectures start with a zero output layer: with the output scaling
        the initial prediction is the training mean (a user's factory is left as it is)."""
        factory = super()._model_factory()
        if callable(self.model):
            return factory
        return lambda p: _zero_output_layer(factory(p))

    def _training_problem(self, data: FairData) -> tuple[nn.Module, Any]:
        """``scaled_output(net, sd, mean)`` (predictions, hence constraints and bounds, in
        the units of ``y``) with the loss ``MSE / sd^2`` (the standardised problem's loss)."""
        mean, sd = target_statistics(data.y)
        return scaled_output(self._model_factory()(data.n_features), sd, mean), scaled_mse_loss(sd)

    def _engine_param_defaults(self, data: FairData) -> dict:
        """SQP: the engine's own Hessian shift (a smaller one, 1e-3, made the first steps of
        the standardised problem blow up, which the engine's divergence guard answered by
        halving the learning rate three times). Lagrangian with the default
        ``"ascent"`` update: ``dual_lr = 1 / sd^2``, the engine's default step of the
        standardised problem for constraints proportional to the output scale (GeDI,
        covariance), whose multipliers are ``1/sd`` times the standardised ones."""
        params = dict(self.engine_params or {})
        if self.method == "lagrangian" and params.get("dual_update", "ascent") == "ascent":
            _, sd = target_statistics(data.y)
            return {"dual_lr": 1.0 / sd ** 2}
        return {}

    def _encode_target(self, y: np.ndarray) -> np.ndarray:
        y = np.asarray(y, dtype=np.float64).reshape(-1)
        if not np.isfinite(y).all():
            raise ValueError("y: contains NaN or infinite values")
        return y

    def predict(self, X: Any) -> np.ndarray:
        """The model's prediction of every row, shape (n,)."""
        return self._outputs(X)


# --------------------------------------------------------------------------------------
# helpers
# --------------------------------------------------------------------------------------
def _make(engine_class: type, options: dict) -> Any:
    """``engine_class(**options)``; an unknown option is a ValueError naming engine_params."""
    try:
        return engine_class(**options)
    except TypeError as exc:
        raise ValueError(f"engine_params: {engine_class.__name__} does not accept these options ({exc})") from None


def _float64_outputs(model: nn.Module, encoded: np.ndarray) -> np.ndarray:
    """``model(encoded)`` evaluated in float64 with the model's own parameters and buffers.

    A float32 forward pass rounds differently depending on how many rows a matrix product
    sees (BLAS blocking), so a row's prediction could change with the rows around it; in
    float64 the difference is far below any reported digit, and predictions of a row do not
    depend on the batch it comes in.
    """
    state = {name: (t.double() if t.is_floating_point() else t)
             for name, t in [*model.named_parameters(), *model.named_buffers()]}
    x = torch.as_tensor(np.asarray(encoded, dtype=np.float64))
    with torch.no_grad():
        out = torch.func.functional_call(model, state, (x,))
    return out.reshape(-1).double().numpy()


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


#: A training fit is reported as worse than a constant predictor below these margins.
POOR_FIT_R2 = -0.05
POOR_FIT_ACCURACY_MARGIN = 0.02


def poor_fit_message(task: str, y: np.ndarray, out: np.ndarray) -> str | None:
    """The warning text when the training fit is far worse than a constant predictor
    (``None`` otherwise); a pure function of the targets and the model outputs.

    Regression: training R2 below ``POOR_FIT_R2`` (-0.05; R2 0 is the mean predictor).
    Binary: accuracy of ``out > 0`` below the majority-class rate minus
    ``POOR_FIT_ACCURACY_MARGIN`` (0.02).
    """
    y = np.asarray(y, dtype=np.float64).reshape(-1)
    out = np.asarray(out, dtype=np.float64).reshape(-1)
    if y.size == 0:
        return None
    advice = ("Training has not converged or diverged: increase epochs or lr (or see history_); the "
              "constraints cannot cause this, as a constant predictor satisfies them.")
    if task == "regression":
        total = float(np.sum((y - y.mean()) ** 2))
        if total <= 0:
            return None
        r2 = 1.0 - float(np.sum((y - out) ** 2)) / total if np.isfinite(out).all() else -math.inf
        if r2 < POOR_FIT_R2:
            return (f"training fit worse than a constant predictor: training R2 = {r2:.3g} < {POOR_FIT_R2:g} "
                    f"(R2 0 is predicting the training mean). {advice}")
        return None
    if task == "binary":
        majority = float(max(y.mean(), 1.0 - y.mean()))
        accuracy = float(np.mean((out > 0) == (y > 0.5)))
        if accuracy < majority - POOR_FIT_ACCURACY_MARGIN:
            return (f"training fit worse than a constant predictor: training accuracy = {accuracy:.3g} < majority-"
                    f"class rate {majority:.3g} - {POOR_FIT_ACCURACY_MARGIN:g}. {advice}")
    return None


def _warn_poor_fit(estimator: Any, data: FairData) -> None:
    """Warn (FairnessWarning) when the fitted model is worse than a constant on ``data``."""
    out = _float64_outputs(estimator.model_, data.X.detach().cpu().numpy())
    message = poor_fit_message(data.task, data.y.detach().cpu().numpy(), out)
    if message:
        warnings.warn(message, FairnessWarning, stacklevel=3)


#: The smooth rate surrogate ``method="sqp"`` uses for rate constraints given as specs:
#: the mean predicted probability, ``sigmoid(out)``. SQP calibrates the QP's bounds to the
#: exact (hard-label) rates (``StochasticSQP(calibrate_exact=True)``), so the surrogate only
#: gives the direction; a soft one reaches every row, not only the rows at the threshold, and
#: measured on Adult, Dutch, ACS-Colorado and COMPAS (DI >= 0.8, linear, 500 epochs) it gave
#: 0.1-0.5 points more test accuracy and held-out DI closer to the training value than the
#: smoothed step at scale 50 (benchmarks/peers.py).
SQP_RATE_SURROGATE = Sigmoid(scale=1.0)


def _with_sqp_surrogates(estimator: Any, constraints: list) -> list:
    """For ``method="sqp"``: the rate constraints built from specs that name no surrogate
    use :data:`SQP_RATE_SURROGATE`; constraint objects and explicit surrogates are kept."""
    if estimator.method != "sqp":
        return constraints
    for spec, constraint in zip(spec_list(estimator.constraints), constraints):
        named = is_constraint_object(spec) or (isinstance(spec, Mapping) and "surrogate" in spec) or (
            isinstance(spec, (tuple, list)) and any(isinstance(o, Mapping) and "surrogate" in o for o in spec))
        if not named and isinstance(constraint, GroupRateConstraint):
            constraint.surrogate = SQP_RATE_SURROGATE
            if isinstance(getattr(constraint, "_params", None), dict):
                constraint._params["surrogate"] = SQP_RATE_SURROGATE
    return constraints


def _steps(history: Any) -> list[dict]:
    """The iteration records of a history (without a closing ``qp_status == "final"`` one)."""
    return [r for r in history.records if r.get("qp_status") != "final"]


def _internal_names(p: int) -> list[str]:
    """Column names of ``X`` inside the FairData (user names live in ``feature_names_in_``)."""
    return [f"x{j}" for j in range(p)]


def _require_all_groups(data: FairData, levels: dict) -> None:
    """Every training group of every discrete sensitive feature has rows in ``data`` (else a
    group rate, and so a held-out violation, is undefined)."""
    for name, kind in data.sensitive_kinds.items():
        if kind == "continuous":
            continue
        present = set(torch.unique(data.sensitive[name]).long().tolist())
        missing = [level for code, level in enumerate(levels[name]) if code not in present]
        if missing:
            raise ValueError(f"sensitive_features: the groups {missing} of {name!r} have no rows here; every "
                             "training group must be present to compare violations")


def _row_blocks(constraints: list) -> list[slice]:
    """The rows of each constraint in the concatenated constraint set."""
    blocks, start = [], 0
    for c in constraints:
        m = int(torch.as_tensor(c.lower).numel())
        blocks.append(slice(start, start + m))
        start += m
    return blocks


def _violations(model: nn.Module, data: FairData, constraints: list) -> dict[str, float]:
    """Exact total violation of each constraint, ``sum_i max(c_i - u_i, 0) + max(l_i - c_i, 0)``
    on hard predictions, keyed by constraint name (``name#2`` for a repeated name)."""
    with torch.no_grad():
        out = model(data.X).reshape(-1)
    result: dict[str, float] = {}
    for c in constraints:
        values = c.exact(out, data).reshape(-1).to(torch.float64)
        name, k = str(c.name), 2
        while name in result:
            name, k = f"{c.name}#{k}", k + 1
        result[name] = float(row_violations(values, c.lower.to(torch.float64), c.upper.to(torch.float64)).sum())
    return result


def _release_batch_caches(constraints: list) -> None:
    """Drop the per-batch operator caches of the constraints: they hold references to the
    batches (the training data) that would otherwise live, and be pickled, with the
    estimator."""
    for c in constraints:
        cache = getattr(c, "_cache", None)
        if hasattr(cache, "clear"):
            cache.clear()


# --------------------------------------------------------------------------------------
# held-out statements: margin, validation_fraction, certificate_ (fairopt.certificate)
# --------------------------------------------------------------------------------------
ON_FAIL = ("warn", "raise", "ignore")


def _check_held_out_parameters(est: Any) -> None:
    """Validate ``margin``, ``validation_fraction``, ``confidence``, ``on_fail`` and ``n_candidates``."""
    if isinstance(est.margin, str):  # a margin in the units of the constraint rows, or "auto"
        check_choice(est.margin, ("auto",), "margin")
    else:
        positive_float(est.margin, "margin", allow_zero=True)
    if est.validation_fraction is not None:
        check_interval(est.validation_fraction, "validation_fraction", 0.0, 0.5, closed="right")
    check_interval(est.confidence, "confidence", 0.0, 1.0)
    check_choice(est.on_fail, ON_FAIL, "on_fail")
    positive_int(est.n_candidates, "n_candidates")


def _validation_split(est: Any, data: FairData) -> tuple[FairData, FairData | None]:
    """``(train, held_out)``: with ``validation_fraction`` a stratified split (target x
    sensitive cell, seeded by ``seed``, :meth:`FairData.split`, which re-fits the
    preprocessing on the training part); without it ``(data, None)``. Sets
    ``validation_indices_`` (rows of ``X`` held out, or None)."""
    est.validation_indices_ = None
    fraction = est.validation_fraction
    if fraction is None:
        return data, None
    from fairopt.data import stratified_split_indices

    try:
        _, held_out_idx = stratified_split_indices(data._split_strata(), float(fraction), int(est.seed))
        train, held_out = data.split(test_size=float(fraction), seed=int(est.seed))
    except ValueError as exc:
        raise ValueError(f"validation_fraction: cannot hold out {fraction!r} of {len(data)} rows ({exc})") from None
    est.validation_indices_ = held_out_idx
    return train, held_out


#: Largest and smallest inflation of the certified candidates' margins (multiples of the
#: held-out part's own certificate half-width ``z se``; :func:`fairopt.certificate.auto_margin`).
CANDIDATE_INFLATIONS = (2.0, 0.5)


def candidate_inflations(n_candidates: int) -> np.ndarray:
    """The fixed, decreasing sequence of margin inflations of the certified candidates:
    ``n_candidates`` values evenly spaced from 2 to 0.5 (``[2.0]`` for one candidate)."""
    high, low = CANDIDATE_INFLATIONS
    return np.linspace(high, low, n_candidates) if n_candidates > 1 else np.array([high])


def _margins(est: Any, data: FairData, constraints: list) -> list | None:
    """One margin per constraint (a number, or per-row values in the rows' units), or None
    without a margin. ``margin="auto"``: :func:`fairopt.certificate.auto_margin` for a new
    sample the size of the held-out part (of a 30% hold-out without
    ``validation_fraction``); with ``validation_fraction`` at inflation 1 (one held-out
    half-width ``z se``; :func:`_certified_sequence` scales it). The originals are set up
    on ``data`` here (the engine sets up the tightened copies)."""
    if not constraints or (not isinstance(est.margin, str) and float(est.margin) == 0.0):
        return None
    if est.margin != "auto":
        return [float(est.margin)] * len(constraints)
    from fairopt.certificate import DEFAULT_HELD_OUT_FRACTION, auto_margin

    certified = est.validation_fraction is not None
    fraction = est.validation_fraction or DEFAULT_HELD_OUT_FRACTION
    margins = []
    for c in constraints:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", FairnessWarning)  # the engine's set-up of the copy reports them
            c.setup(data)
        margins.append(auto_margin(data, c, float(est.confidence), float(fraction), seed=int(est.seed),
                                   for_certificate=certified, inflation=1.0 if certified else 2.0))
    return margins


def _tightened(constraints: list, margins: list | None, scale: float = 1.0) -> list:
    """The constraints the engine trains under: ``constraints`` itself without margins,
    else copies tightened by ``scale * margin`` (:func:`fairopt.certificate.tighten`)."""
    if margins is None:
        return constraints
    from fairopt.certificate import tighten

    return [tighten(c, m * scale) for c, m in zip(constraints, margins)]


def _certificates(est: Any, held_out: FairData, model: nn.Module, constraints: list) -> list:
    """One :func:`fairopt.certificate.certify` statement per constraint on the held-out rows."""
    from fairopt.certificate import certify

    model.eval()
    try:
        return [certify(model, held_out, c, float(est.confidence), seed=int(est.seed)) for c in constraints]
    finally:
        _release_batch_caches(constraints)


def _certified_sequence(est: Any, data: FairData, held_out: FairData, constraints: list,
                        margins: list) -> tuple[Any, int, list, list]:
    """Fit candidates under margins of decreasing inflation (:func:`candidate_inflations`),
    certify each on the held-out rows in that order and keep the last one whose
    certificates all pass before the first that fails (or the first candidate when it
    fails).

    Fixed-sequence testing: the order is fixed before any held-out row is looked at and
    every candidate is trained on the other rows only, so the returned model's
    certificate keeps its confidence level without a multiplicity correction. A false
    certificate needs a pass of the first candidate in the order that violates the bound
    in the population, which happens with probability at most ``1 - confidence``. A smaller
    margin gives a more accurate model when the held-out rows allow it; the sequence stops
    at the first failure, so a failing candidate costs one fit. Sets ``candidates_``.

    Returns the chosen candidate's FitResult, relaxed-step count, training constraints
    and certificates.
    """
    chosen, chosen_index, rows = None, 0, []
    for inflation in candidate_inflations(int(est.n_candidates)):
        training = _tightened(constraints, margins, float(inflation))
        result, relaxed = est._train(data, training)
        certificates = _certificates(est, held_out, result.model, constraints)
        passed = all(cert.passed for cert in certificates)
        rows.append({"inflation": float(inflation), "passed": passed,
                     **{f"{cert.constraint}: held-out": cert.realised for cert in certificates},
                     **{f"{cert.constraint}: confidence bound": cert.confidence_bound for cert in certificates}})
        if chosen is not None and not passed:
            break
        chosen, chosen_index = (result, relaxed, training, certificates), len(rows) - 1
        if not passed:  # the first candidate fails: it is returned, with its failed certificate
            break
    est.candidates_ = pd.DataFrame(rows).assign(chosen=lambda t: np.arange(len(t)) == chosen_index)
    logger.info("certified candidates: kept inflation %.3g (%d of %d tried)", rows[chosen_index]["inflation"],
                chosen_index + 1, len(rows))
    return chosen


def _held_out_statements(est: Any, data: FairData, constraints: list, training: list,
                         certificates: list | None) -> None:
    """``predicted_held_out_`` (with a margin) and ``certificate_`` (with a held-out part),
    and the ``on_fail`` reaction to a failed certificate."""
    est.predicted_held_out_ = None if training is constraints else _predicted_held_out(est, data, constraints,
                                                                                       training)
    est.certificate_ = certificates
    if certificates is None:
        return
    from fairopt.exceptions import CertificateError

    failed = [cert for cert in certificates if not cert.passed]
    if not failed or est.on_fail == "ignore":
        return
    message = "; ".join(
        f"{cert.constraint}: {cert.measure} {cert.realised:.4g} on {cert.n} held-out rows, {cert.confidence:.0%} "
        f"confidence bound {cert.confidence_bound:.4g}, required {'>=' if cert.bound_side == 'lower' else '<='} "
        f"{cert.bound:g}" for cert in failed)
    message = (f"held-out certificate failed - {message}. The bound is not shown to hold beyond the training rows "
               "at this confidence (see certificate_; a margin, more data or a looser bound may help).")
    if est.on_fail == "raise":
        raise CertificateError(message)
    warnings.warn(message, FairnessWarning, stacklevel=3)


def _predicted_held_out(est: Any, data: FairData, constraints: list, training: list) -> pd.DataFrame:
    """Per constraint row: the exact training value, the margin, and the range
    ``[train - margin, train + margin]`` predicted for new rows (a prediction, not a
    certificate), with whether that range lies within the user's bounds."""
    with torch.no_grad():
        out = est.model_(data.X).reshape(-1)
    frames = []
    for c, t in zip(constraints, training):
        values = c.exact(out, data).reshape(-1).to(torch.float64)
        lower, upper = c.lower.to(torch.float64), c.upper.to(torch.float64)
        margin = torch.where(torch.isfinite(upper), upper - t.upper.to(torch.float64),
                             t.lower.to(torch.float64) - lower)
        margin = torch.nan_to_num(margin, nan=0.0, posinf=0.0, neginf=0.0)
        low, high = values - margin, values + margin
        within = torch.where(torch.isfinite(upper), high <= upper + 1e-12, True) & \
            torch.where(torch.isfinite(lower), low >= lower - 1e-12, True)
        names = list(c.row_names or [f"{c.name}[{i}]" for i in range(values.numel())])
        frames.append(pd.DataFrame({"constraint": c.name, "train": values.numpy(), "margin": margin.numpy(),
                                    "predicted_low": low.numpy(), "predicted_high": high.numpy(),
                                    "bound_lower": lower.numpy(), "bound_upper": upper.numpy(),
                                    "within": within.numpy()}, index=names))
    return pd.concat(frames) if frames else pd.DataFrame()
