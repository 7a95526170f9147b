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

- ``"sqp"``: hard constraints, :class:`solvers.StochasticSQP` (DESIGN.md sec 7);
- ``"penalty"``: ``loss + weight * V(c)``, the total violation of the surrogate rows as a
  fixed-weight penalty, :class:`solvers.penalty.Penalty` (``engine_params={"weight": w}``);
- ``"lagrangian"``: learned multipliers, :class:`solvers.lagrangian.LagrangianDual`;
- ``"moving_targets"``: projection of the targets onto the constraints and refits of a
  :class:`fairopt.learners.TorchLearner`, :class:`solvers.moving_targets.MovingTargets`
  (constraints with a linear target encoding only: the rate constraints and GeDI).

Diagnostics (:class:`fairopt.FairnessWarning`, DESIGN.md sec 11), after every ``fit``:

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
from fairopt._validation import to_numpy
from fairopt.data import FairData
from fairopt.evaluation import evaluate as evaluate_model
from fairopt.exceptions import FairnessWarning
from fairopt.specs import resolve_constraints
from solvers.lagrangian import LagrangianDual
from solvers.penalty import Penalty
from solvers.problem import row_violations
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
class OutputScale(nn.Module):
    """``out -> scale * out + shift`` with fixed buffers: maps the standardised output of a
    Moving Targets regression learner back to the units of ``y``."""

    def __init__(self, scale: float = 1.0, shift: float = 0.0) -> None:
        super().__init__()
        self.register_buffer("scale", torch.tensor(float(scale)))
        self.register_buffer("shift", torch.tensor(float(shift)))

    def forward(self, out: torch.Tensor) -> torch.Tensor:
        return out * self.scale + self.shift


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
    """The last ``TAIL_FRACTION`` of the records (at least one)."""
    records = list(history.records)
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
        constraints = resolve_constraints(self.constraints)
        if constraints and not columns:
            raise ValueError("sensitive_features: required because constraints are given "
                             f"({[c.name for c in constraints]}); pass them to fit(X, y, sensitive_features=...)")
        data = FairData.from_arrays(X, target, columns, task=self._task, feature_names=_internal_names(X.shape[1]),
                                    sensitive_kinds=self.sensitive_kinds)
        result, relaxed = self._train(data, constraints)
        self._set_fitted(data, constraints, result)
        self._diagnose(data, constraints, relaxed)
        _release_batch_caches(constraints)
        return self

    def _check_parameters(self) -> None:
        if self.method not in METHODS:
            raise ValueError(f"method: expected one of {METHODS}, got {self.method!r}")
        if not (callable(self.model) or self.model in MODEL_KINDS):
            raise ValueError(f"model: expected one of {MODEL_KINDS} or a callable n_features -> nn.Module, "
                             f"got {self.model!r}")
        if self.engine_params is not None and not isinstance(self.engine_params, Mapping):
            raise ValueError(f"engine_params: expected a dict of engine options, got {self.engine_params!r}")
        clash = sorted(set(self.engine_params or {}) & set(_ESTIMATOR_OPTIONS))
        if clash:
            raise ValueError(f"engine_params: {clash} are estimator parameters; set them on the estimator")
        tol = self.violation_tol
        if isinstance(tol, bool) or not isinstance(tol, numbers.Real) or not (math.isfinite(tol) and tol >= 0):
            raise ValueError(f"violation_tol: expected a finite number >= 0, got {tol!r}")
        if not isinstance(self.check_inactive, bool):
            raise ValueError(f"check_inactive: expected True or False, got {self.check_inactive!r}")
        if isinstance(self.seed, bool) or not isinstance(self.seed, numbers.Integral) or self.seed < 0:
            raise ValueError(f"seed: expected a non-negative integer, got {self.seed!r}")

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

    def _engine_options(self) -> dict:
        options = {"epochs": self.epochs, "lr": self.lr, "batch_size": self.batch_size}
        return {k: v for k, v in options.items() if v is not None}

    def _train(self, data: FairData, constraints: list, reference: bool = False) -> tuple[Any, int]:
        """Run the engine of ``method`` (``reference``: the same training without
        constraints). Returns the FitResult and the number of relaxed SQP steps, whose
        per-fit engine warning is replaced by the estimator's diagnostics."""
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            result = self._run_engine(data, constraints, reference)
        for w in caught:
            if not issubclass(w.category, SQPWarning):
                warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)
        relaxed = sum(r.get("qp_status") == "relaxed" for r in result.history.records)
        return result, relaxed

    def _run_engine(self, data: FairData, constraints: list, reference: bool) -> Any:
        options = {**dict(self.engine_params or {}), "seed": int(self.seed), "verbose": self.verbose}
        if self.method == "moving_targets":
            from solvers.moving_targets import MovingTargets  # loads the MILP/QP back-ends: only when used

            return self._run_moving_targets(data, [] if reference else constraints,
                                            _make(MovingTargets, options))
        model = self._model_factory()(data.n_features)
        if self.method == "sqp":
            engine = _make(StochasticSQP, {**self._engine_options(), **options})
            return engine.fit(model, data, loss=self._loss, constraints=[] if reference else constraints)
        if self.method == "penalty" or reference:
            if reference:  # the first-order loop without the Lagrangian/penalty term
                options = {k: options[k] for k in ("optimizer", "optimizer_options", "seed", "verbose", "tol")
                           if k in options}
            engine = _make(Penalty, {**self._engine_options(), **options})
            return engine.fit(model, data, loss=self._loss, penalties=[] if reference else constraints)
        engine = _make(LagrangianDual, {**self._engine_options(), **options})
        return engine.fit(model, data, loss=self._loss, constraints=constraints)

    def _run_moving_targets(self, data: FairData, constraints: list, engine: Any) -> Any:
        from fairopt.learners import TorchLearner

        task = "classification" if self._task == "binary" else "regression"
        learner = TorchLearner(self._model_factory(), task=task, seed=int(self.seed), **self._engine_options())
        result = engine.fit(learner, data, constraints=constraints, task=task)
        module = learner.module_
        if task == "regression" and learner.scale_target:
            module = nn.Sequential(module, OutputScale(learner.target_scale_, learner.target_shift_))
        result.model = module
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
        records = len(result.history)
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
        with torch.no_grad():
            out = self.model_(torch.from_numpy(encoded))
        return out.reshape(-1).double().numpy()

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
        if isinstance(tol, bool) or not isinstance(tol, numbers.Real) or not (math.isfinite(tol) and tol >= 0):
            raise ValueError(f"tol: expected a finite number >= 0, got {tol!r}")
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
        Passes over the training data; ``None`` keeps the engine's default (SQP 500
        full-batch epochs; penalty and Lagrangian 100). Moving Targets: epochs of each
        learner refit (default 200).
    lr : float, optional
        Learning rate; ``None`` keeps the engine's default (SQP 0.5; Adam 1e-3 for the
        penalty, Lagrangian and Moving Targets learners).
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
    """

    _task = "binary"
    _loss = "bce"

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

    def _encode_training_target(self, y: np.ndarray) -> np.ndarray:
        return np.asarray(y, dtype=np.float64).reshape(-1)

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
