"""scikit-learn estimators trained under fairness constraints.

:class:`FairClassifier` (logistic loss) and :class:`FairRegressor` (least squares) put the
library's engines behind the scikit-learn estimator interface::

    clf = FairClassifier(constraints=[("disparate_impact", "sex", 0.8)], epochs=200)
    clf.fit(X, y, sensitive_features=S)
    clf.predict(X_test)

``fit`` builds a :class:`fairopt.FairData` (``X`` standardised, sensitive features typed), trains
the model with the engine of ``method`` (:mod:`fairopt.training`) and warns
(:class:`fairopt.FairnessWarning`) on the diagnostics of :mod:`fairopt.diagnostics`. Sensitive
features are needed only to train and to evaluate fairness: ``predict`` takes ``X`` alone.
"""

from __future__ import annotations

import inspect
import math
import warnings
from collections.abc import Mapping
from typing import Any, Callable, NamedTuple

import numpy as np
import pandas as pd
import torch
from scipy.special import expit
from sklearn.base import BaseEstimator, ClassifierMixin, RegressorMixin
from sklearn.utils.multiclass import check_classification_targets
from sklearn.utils.validation import check_is_fitted, validate_data
from torch import nn

from fairopt._validation import check_choice, check_flag, check_sample_weight, check_seed, positive_float
from fairopt.data import FairData, Preprocessor
from fairopt.data.encoding import positive_class
from fairopt.data.frames import short_list
from fairopt.inputs import (category_positions, check_input_finite, check_missing, constraint_sensitive_names,
                            dense_inputs, encoded_inputs, fair_data_rows, has_text_columns, held_out_rows,
                            internal_names, log_encoded_columns, sensitive_columns_of_x, warn_reordered_index,
                            without_columns)
from fairopt.diagnostics import (fit_warnings, iteration_records, near_constant_reason, pretraining_violations,
                                relaxed_steps)
from fairopt.evaluation import evaluate as evaluate_model
from fairopt.evaluation import model_violations
from fairopt.certificate import certify as certify_constraint
from fairopt.held_out import (HeldOutOptions, fit_held_out, generalisation_limit, generalisation_table,
                              raise_or_warn_failed, require_all_groups, training_rows)
from fairopt.exceptions import FairnessWarning, UndefinedMeasureWarning, warn_at_caller
from fairopt.penalty_slack import over_satisfied_rows, penalty_slack_message
from fairopt.estimator_params import constraint_index, nested_constraint_params, with_constraint_params
from fairopt.inputs import sensitive_columns
from fairopt.sklearn_learner import check_sklearn_model, is_sklearn_model, routes_missing_values
from fairopt.constraints.base import release_caches, set_up_on_other_rows
from fairopt.constraints.rates import GroupRateConstraint
from fairopt.specs import pairwise_spec, resolve_constraints
from fairopt.training import (ALPHA_DEFAULTS, ESTIMATOR_OPTIONS, METHODS, MODEL_KINDS, TrainingOptions,
                              float64_outputs, is_mini_batch, train, use_sqp_surrogates)
from solvers.history import FitResult, plain_values
from solvers.problem import is_network, prediction_outputs
from fairopt.evaluation import bound_statuses, constant_predictions, constraint_violations, met_tolerances
from fairopt.measures.group import python_scalar
from fairopt.status import fit_status, format_number, label_of, short_ratios
from solvers.progress import check_progress

__all__ = ["FairClassifier", "FairRegressor", "METHODS"]

# --------------------------------------------------------------------------------------
# the estimators
# --------------------------------------------------------------------------------------
def _alias(value: Any, alias: Any, name: str, alias_name: str, default: Any) -> Any:
    """``alias`` (scikit-learn's spelling of the parameter) when given, else ``value``; both, different: ValueError."""
    if alias is None:
        return value
    if value is not None and value != default and value != alias:
        raise ValueError(f"{alias_name}: {alias_name}={alias!r} and {name}={value!r} name the same parameter; give "
                         "one of them")
    return alias


class _FairEstimator(BaseEstimator):
    """Shared implementation of :class:`FairClassifier` and :class:`FairRegressor`."""

    _task = "binary"
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
        alpha: float | None = None,
        epochs: int | None = None,
        lr: float | None = None,
        batch_size: int | None = None,
        seed: int = 0,
        engine_params: dict | None = None,
        sensitive_names: Any = None,
        sensitive_kinds: dict | None = None,
        check_inactive: bool = False,
        violation_tol: float = 1e-3,
        verbose: int | str = "auto",
        margin: float | str = 0.0,
        validation_fraction: float | None = None,
        confidence: float = 0.95,
        on_fail: str = "warn",
        n_candidates: int = 7,
        random_state: int | np.random.RandomState | np.random.Generator | None = None,
        max_iter: int | None = None,
    ) -> None:
        self.constraints = constraints
        self.method = method
        self.model = model
        self.hidden = hidden
        self.activation = activation
        self.alpha = alpha
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
        self.random_state = random_state
        self.max_iter = max_iter

    # ------------------------------------------------------------------ parameters
    def get_params(self, deep: bool = True) -> dict:
        """The estimator's parameters (scikit-learn protocol).

        With ``deep=True`` also ``constraints__<i>`` and ``constraints__<i>__<name>`` for a list of
        constraint specs, so that a grid search can vary one bound (e.g. ``constraints__0__delta``).
        """
        params = super().get_params(deep=deep)
        if deep:
            params.update(nested_constraint_params(self.constraints))
        return params

    def set_params(self, **params: Any) -> "_FairEstimator":
        """Set parameters (scikit-learn protocol), including ``constraints__<i>`` (replaces element ``i``)
        and ``constraints__<i>__<name>`` (sets a parameter of the constraint object at ``i``); returns ``self``.
        """
        indexed = {k: v for k, v in params.items() if constraint_index(k) is not None}
        rest = {k: v for k, v in params.items() if k not in indexed}
        if "constraints" in rest:
            super().set_params(constraints=rest.pop("constraints"))
        if rest:
            super().set_params(**rest)
        if indexed:
            self.constraints = with_constraint_params(self.constraints, indexed)
        return self

    # ------------------------------------------------------------------ fit
    def fit(self, X: Any, y: Any = None, *, sensitive_features: Any = None,
            sample_weight: Any = None) -> "_FairEstimator":
        """Train the model on ``X``, ``y`` under the constraints.

        Parameters
        ----------
        X : array-like (n, p), DataFrame, or :class:`fairopt.FairData`
            Inputs, standardised with the training statistics (text columns one-hot encoded).
            A ``FairData`` brings its own target, sensitive features, weights and fitted
            preprocessor (``preprocessor_``; ``predict`` then takes its raw input columns).
        y : array-like (n,)
            Two classes (classifier) or numbers (regressor). None with a FairData.
        sensitive_features : DataFrame, Series, dict, array, list, or column name(s) of X, optional
            The sensitive features the constraints name (:func:`fairopt.inputs.sensitive_columns`).
            A single unnamed column takes ``sensitive_names`` or the one name the constraints use.
            Column names of a DataFrame ``X`` are taken out of the model inputs
            (``dropped_columns_``) so the model does not read the sensitive attribute; pass the
            values (``X["sex"]``) to keep it as an input. Kinds are inferred (2 values: binary;
            more numbers: continuous; text: categorical) unless ``sensitive_kinds`` declares
            them. ``None`` only without constraints.
        sample_weight : array-like (n,) or float, optional
            Row weights ``w_i >= 0``: the loss becomes ``sum_i w_i l_i / sum_i w_i`` and each group
            rate ``P_g = sum_{i in g} w_i 1{yhat_i = 1} / sum_{i in g} w_i``, so integer weights
            train as repeated rows. Not supported (ValueError) with GeDI, distance covariance and
            FaUCI constraints, ``validation_fraction`` or ``margin="auto"``, which count rows.

        Returns
        -------
        self

        Raises
        ------
        ValueError
            Bad inputs or parameters, missing or misaligned sensitive features, invalid
            ``sample_weight`` or weights with an option that counts rows, or
            ``y``/``sensitive_features``/``sample_weight`` given with a FairData.
        """
        self._start_seed()
        self._check_parameters()
        data, constraints = self._training_data(X, y, sensitive_features, sample_weight)
        self._check_constraints_fit_the_task(data, constraints)
        options = self._held_out_options()
        # mini-batches or not as the engine will decide: on the rows left after a validation split
        use_sqp_surrogates(self.method, constraints,
                            mini_batch=is_mini_batch(self.batch_size, training_rows(options, data)))
        self._check_weighted_options(data)
        fit = fit_held_out(options, data, constraints, train=self._train)
        self._set_fitted(fit.data, constraints, fit.result)
        if fit.training is not constraints:  # the user's bounds are quoted; the model trained inside them
            self.status_message_ += (f" It trained under the bounds tightened by margin={self.margin!r}, so the "
                                     "realised values sit inside them (predicted_held_out_ gives each row's margin "
                                     "and the range predicted for new rows).")
        self._diagnose(fit.data, constraints, fit.result, fit.relaxed, tightened=fit.training is not constraints)
        self.validation_indices_, self.candidates_ = fit.validation_indices, fit.candidates
        self.certificate_, self.predicted_held_out_ = fit.certificate, fit.predicted
        raise_or_warn_failed(fit.certificate, options.on_fail, options.margin)
        release_caches(constraints)
        release_caches(fit.training)
        return self

    def _check_parameters(self) -> None:
        check_choice(self.method, METHODS, "method")
        if is_sklearn_model(self.model):
            check_sklearn_model(self.model, self.method, self._task)
        elif not (callable(self.model) or self.model in MODEL_KINDS):
            raise ValueError(f"model: expected one of {MODEL_KINDS}, a callable n_features -> nn.Module or a "
                             f"scikit-learn estimator (method='moving_targets'), got {self.model!r}")
        self._warn_unused_architecture()
        if self.engine_params is not None and not isinstance(self.engine_params, Mapping):
            raise ValueError(f"engine_params: expected a dict of engine options, got {self.engine_params!r}")
        clash = sorted(set(self.engine_params or {}) & set(ESTIMATOR_OPTIONS))
        if clash:
            raise ValueError(f"engine_params: {clash} are estimator parameters; set them on the estimator")
        positive_float(self.violation_tol, "violation_tol", allow_zero=True)
        if self.alpha is not None:
            positive_float(self.alpha, "alpha", allow_zero=True)
        check_flag(self.check_inactive, "check_inactive")
        check_progress(self.verbose)
        check_seed(self.seed_value(), allow_none=False, allow_negative=False,
                   name="seed" if self.random_state is None else "random_state")
        self.epochs_value()  # both names of the budget agree
        self._held_out_options()  # checks margin, validation_fraction, confidence, on_fail, n_candidates

    def _warn_unused_architecture(self) -> None:
        """A ``UserWarning`` when ``hidden`` or ``activation`` differ from their defaults while ``model`` is not
        "mlp", the one model they shape (a factory builds its own module; the others have no hidden layers)."""
        if isinstance(self.model, str) and self.model == "mlp":
            return
        defaults = inspect.signature(type(self).__init__).parameters
        given = [name for name in ("hidden", "activation") if name in defaults
                 and np.atleast_1d(getattr(self, name)).tolist() != np.atleast_1d(defaults[name].default).tolist()]
        if given:
            kind = "a factory" if callable(self.model) and not isinstance(self.model, str) else repr(self.model)
            warn_at_caller(f"{' and '.join(given)}: ignored with model={kind}; only model='mlp' uses "
                           f"{'them' if len(given) > 1 else 'it'}", UserWarning)

    def _held_out_options(self) -> HeldOutOptions:
        """The held-out parameters (:mod:`fairopt.held_out`), checked."""
        return HeldOutOptions(margin=self.margin, validation_fraction=self.validation_fraction,
                              confidence=self.confidence, on_fail=self.on_fail, n_candidates=self.n_candidates,
                              seed=self.seed_value())

    def alpha_value(self) -> float:
        """``alpha``, or the task's default (:data:`fairopt.training.ALPHA_DEFAULTS`) when None."""
        return ALPHA_DEFAULTS[self._task] if self.alpha is None else float(self.alpha)

    def seed_value(self) -> int:
        """The seed of the fit: ``seed``, or ``random_state`` when given.

        A ``numpy.random.RandomState`` or ``Generator`` ``random_state`` gives one seed per ``fit``, drawn from it
        once, as scikit-learn's estimators consume theirs: every seeded step of that fit (the validation split,
        the margins and certificates, the model's initialisation and batch order) takes that one seed, and this
        method returns it after the fit. Before the first fit (or after ``set_params`` gave another generator) it
        draws the seed the next ``fit`` will take, once: repeated calls return the same seed and that fit does
        not draw again, so calling this method changes neither the fitted model nor the generator's state after
        the fit.
        """
        state = self.random_state
        if not isinstance(state, (np.random.RandomState, np.random.Generator)):
            return _alias(self.seed, state, "seed", "random_state", default=0)
        draw = getattr(self, "_seed_draw", None)
        if draw is None or draw.source is not state:  # no seed from this generator yet: the next fit's, drawn once
            draw = self._seed_draw = _SeedDraw(state, _drawn_seed(state), unused=True)
        return _alias(self.seed, draw.seed, "seed", "random_state", default=0)

    def _start_seed(self) -> None:
        """At the start of ``fit``: the fit's seed from a RandomState or Generator ``random_state``, the one
        :meth:`seed_value` drew for it before when there is one, else one drawn now (one draw per fit)."""
        state, draw = self.random_state, getattr(self, "_seed_draw", None)
        if not isinstance(state, (np.random.RandomState, np.random.Generator)):
            self._seed_draw = None
        elif draw is not None and draw.unused and draw.source is state:
            self._seed_draw = draw._replace(unused=False)
        else:
            self._seed_draw = _SeedDraw(state, _drawn_seed(state), unused=False)

    def epochs_value(self) -> int | None:
        """``epochs``, or ``max_iter`` when given."""
        return _alias(self.epochs, self.max_iter, "epochs", "max_iter", default=None)

    def _check_weighted_options(self, data: FairData) -> None:
        """ValueError for ``sample_weight`` with ``validation_fraction`` or ``margin="auto"``, which count rows."""
        if data.weights is None:
            return
        if self.validation_fraction is not None:
            raise ValueError("validation_fraction: held-out certificates do not support sample weights yet "
                             "(their intervals count rows); fit with sample_weight and without "
                             "validation_fraction, or without sample_weight")
        if isinstance(self.margin, str) and self.margin == "auto":
            raise ValueError("margin: 'auto' does not support sample weights yet (its standard errors count "
                             "rows); give a numeric margin with sample_weight")

    def _encode_training_target(self, y: np.ndarray) -> np.ndarray:  # pragma: no cover - abstract
        raise NotImplementedError

    def _check_constraints_fit_the_task(self, data: FairData, constraints: list) -> None:
        """A ValueError for a constraint that says nothing on this task's targets (the regressor's rates)."""

    def _training_data(self, X: Any, y: Any, sensitive_features: Any,
                       sample_weight: Any = None) -> tuple[FairData, list]:
        """The training FairData (inputs validated, target encoded, sensitive features named and typed) and
        the constraint objects.
        """
        constraints = resolve_constraints(self.constraints)
        if isinstance(X, FairData):
            return self._given_data(X, y, sensitive_features, sample_weight), constraints
        warn_reordered_index(X, sensitive_features=sensitive_features, y=y, sample_weight=sample_weight)
        original_X = X
        X, sensitive_features, self.dropped_columns_ = sensitive_columns_of_x(dense_inputs(X), sensitive_features)
        categories = category_positions(X)  # a pandas category column is one-hot encoded, whatever its values
        keep = self._routes_missing_inputs()
        check_input_finite(X, allow_missing=keep)
        check_target_present(y)
        X, y = validate_data(self, X, y, dtype=None if has_text_columns(X) else np.float64,
                             ensure_all_finite="allow-nan" if keep else True)
        weights = check_sample_weight(sample_weight, X.shape[0])
        target = self._encode_training_target(y)
        columns = sensitive_columns(sensitive_features, X.shape[0], self.sensitive_names,
                                    wanted=constraint_sensitive_names(constraints))
        if constraints and not columns:
            wanted = constraint_sensitive_names(constraints)
            inside = [name for name in wanted if isinstance(original_X, pd.DataFrame) and name in original_X.columns]
            hint = (f"; {inside} are columns of X: sensitive_features={inside if len(inside) > 1 else inside[0]!r} "
                    "takes them from X (and out of the model inputs)" if inside else "")
            raise ValueError("sensitive_features: required because constraints are given "
                             f"({[c.name for c in constraints]}); pass them to fit(X, y, sensitive_features=...)"
                             + hint)
        check_missing(columns)
        inputs = internal_names(X.shape[1])
        preprocessor = Preprocessor(missing="keep" if keep else "error")
        names = getattr(self, "feature_names_in_", None)
        if names is not None:  # the messages of its encodings (a validation split's rows too) name the user's columns
            preprocessor.display_names = dict(zip(internal_names(len(names)), map(str, names)))
        data = FairData.from_arrays(X, target, columns, task=self._task, feature_names=inputs,
                                    sensitive_kinds=self.sensitive_kinds, sample_weight=weights,
                                    categorical=[inputs[j] for j in categories] or None, preprocessor=preprocessor)
        log_encoded_columns(data.preprocessor, names)
        return data, constraints

    def _given_data(self, data: FairData, y: Any, sensitive_features: Any, sample_weight: Any) -> FairData:
        """A FairData given to ``fit``, used as it is; sets the input attributes and the classifier's labels."""
        for name, value in (("y", y), ("sensitive_features", sensitive_features), ("sample_weight", sample_weight)):
            if value is not None:
                raise ValueError(f"{name}: fit(data) takes it from the FairData (target {data.target_name!r}, "
                                 f"sensitive features {data.sensitive_names}, its weights); leave {name} None")
        if data.task != self._task:
            poisson = (" A Poisson rate with its exposure trains through the engine: "
                       "solvers.StochasticSQP().fit(fairopt.models.linear(data.n_features), data, loss='poisson', "
                       "constraints=[...])." if data.task == "poisson" else "")
            raise ValueError(f"X: a FairData of task {data.task!r}; {type(self).__name__} trains {self._task!r} "
                             "data (FairData.from_frame(..., task=...))." + poisson)
        if data.preprocessor is None or not data.preprocessor.is_fitted:
            raise ValueError("X: this FairData has no fitted preprocessor (it was built with the FairData "
                             "constructor); build it with FairData.from_frame or from_arrays")
        if data.preprocessor.keeps_missing and not self._routes_missing_inputs() and bool(torch.isnan(data.X).any()):
            raise ValueError(f"X: this FairData has missing input values (its preprocessor keeps them); "
                             f"model={self.model!r} needs complete inputs: impute them before building the "
                             "FairData, or train boosted trees (model='gbm'), which route missing values")
        for name, given, own in (("sensitive_names", self.sensitive_names, data.sensitive_names),
                                 ("sensitive_kinds", self.sensitive_kinds, data.sensitive_kinds)):
            if given is not None and not _agrees(given, own):
                raise ValueError(f"{name}: a FairData names and types its sensitive features itself ({own}); "
                                 f"leave {name} None or build the FairData with the names and kinds you want")
        labels = data.y.detach().cpu().numpy()
        target = self._encode_training_target(labels.astype(np.int64) if self._task == "binary" else labels)
        if not np.array_equal(target, labels):  # pos_label=0: the other class is the positive one
            data = data.with_target(torch.as_tensor(target, dtype=torch.float32, device=data.y.device))
        columns = list(data.feature_columns)
        self.n_features_in_ = len(columns)
        if columns != internal_names(len(columns)):
            self.feature_names_in_ = np.asarray(columns, dtype=object)
        elif hasattr(self, "feature_names_in_"):
            del self.feature_names_in_
        self.dropped_columns_ = [name for name in data.sensitive_names if name not in columns]
        return data

    # ------------------------------------------------------------------ engines
    def _training_options(self) -> TrainingOptions:
        """The parameters the engines read (:mod:`fairopt.training`), with the task."""
        return TrainingOptions(method=self.method, task=self._task, model=self.model, hidden=self.hidden,
                               activation=self.activation, epochs=self.epochs_value(), lr=self.lr,
                               batch_size=self.batch_size, seed=self.seed_value(), verbose=self.verbose,
                               engine_params=dict(self.engine_params or {}), alpha=self.alpha_value())

    def _train(self, data: FairData, constraints: list, reference: bool = False) -> tuple[Any, int]:
        """The engine's FitResult (``reference``: trained without constraints) and its relaxed SQP steps."""
        result = train(self._training_options(), data, constraints, reference)
        return result, relaxed_steps(result)

    # ------------------------------------------------------------------ fitted state
    def _set_fitted(self, data: FairData, constraints: list, result: Any) -> None:
        model = result.model
        model.eval()
        self.model_ = model
        self.preprocessor_ = data.preprocessor
        self.constraints_ = constraints
        self._constraints_from_training = True
        self.history_ = result.history
        self.converged_ = bool(result.converged)
        self.engine_info_ = plain_values(result.info)
        self.reference_violations_ = None
        records = len(iteration_records(result.history))
        self.n_iter_ = records - 1 if self.method == "moving_targets" else records
        self.sensitive_names_ = list(data.sensitive_names)
        self.sensitive_kinds_ = dict(data.sensitive_kinds)
        self.sensitive_levels_ = {k: list(v) for k, v in data.sensitive_levels.items()}
        out = prediction_outputs(model, data.X)  # the labels predict gives, which the verdict counts
        self.train_violations_ = constraint_violations(out, data, constraints)
        self.train_violation_ = float(sum(self.train_violations_.values()))
        bounds = bound_statuses(out, data, constraints, self.violation_tol)
        constant = self._constant_reason(out, data.task)
        tolerances = met_tolerances(constraints, self.violation_tol)
        mini_batch = is_mini_batch(self.batch_size, len(data))
        self.status_, self.status_message_ = fit_status(result, self.method, self.train_violations_, tolerances, bounds,
                                                        constant=constant,
                                                        near_constant=near_constant_reason(out, data),
                                                        mini_batch=mini_batch,
                                                        network_full_batch=not mini_batch
                                                        and self._network_sqp_classifier(model, data))
        self._warn_pairwise(bounds, constraints)
        self.status_message_ += _left_out_groups(data, constraints)
        short = short_ratios(bounds, self.train_violations_, tolerances)
        if short and self.status_ == "infeasible":  # rows within the tolerance, so no unmet-rows warning
            warn_at_caller(f"{', '.join(b.label for b in short)}: {self.status_message_}", FairnessWarning)
        trivial = [b.label for b in bounds if b.undefined]
        if trivial and constant is None:  # a constant model has its DegenerateModelWarning already
            warn_at_caller(f"{', '.join(trivial)}: met only trivially on the training rows: no compared group has a "
                           "positive prediction (every rate is 0, the ratio 0/0), so status_ is 'degenerate'. For "
                           "a regressor, the bound's threshold lies above every prediction: lower it, or bound the "
                           "predictions themselves ('gedi', 'covariance', 'dcov')", UndefinedMeasureWarning)
        if self.status_ != "converged":  # the estimator's checks (bounds on their own scale, a constant) decide
            self.converged_ = False

    def _warn_pairwise(self, bounds: list, constraints: list) -> None:
        """A FairnessWarning for each met bound on each group against the rest whose measure over every pair
        of groups misses the same bound (more than ``violation_tol``): "Every bound is met" is then not the
        four-fifths rule that ``fairopt.metrics`` and fairlearn report (the smallest over the largest rate)."""
        for b in bounds:
            if not b.met or b.pairwise is None or b.bound is None or not math.isfinite(b.pairwise):
                continue
            missed = (b.pairwise < b.bound - self.violation_tol if b.sense == "lower"
                      else b.pairwise > b.bound + self.violation_tol)
            if missed:
                op = ">=" if b.sense == "lower" else "<="
                warn_at_caller(f"{b.label}: met on the training rows ({format_number(b.value, b.bound)} {op} "
                               f"{format_number(b.bound)}), but over every pair of groups it is "
                               f"{format_number(b.pairwise, b.bound)}: each group is bounded against the rest of "
                               "the rows, not against each other group, which the four-fifths rule, "
                               "fairopt.metrics and fairlearn compare. groups='pairwise' "
                               f"({_pairwise_advice(b, constraints)}) bounds every pair.", FairnessWarning)

    def _network_sqp_classifier(self, model: nn.Module, data: FairData) -> bool:
        """Whether this is a classifier network's SQP fit (more than one weight matrix,
        :func:`solvers.problem.is_network`), whose full batch's status message may point to mini-batches
        (:func:`fairopt.status.fit_status`)."""
        if data.task != "binary" or self.method != "sqp":
            return False
        params = [p for p in model.parameters() if p.requires_grad] if isinstance(model, nn.Module) else []
        return is_network(params)  # a boosted model has no trained tensors

    def _constant_reason(self, out: torch.Tensor, task: str) -> str | None:
        """Why the training outputs ``out`` are one prediction for every row, in the user's labels; None if
        they are not (:func:`fairopt.evaluation.constant_predictions`)."""
        reason = constant_predictions(out, task)
        if reason is None or task != "binary" or not hasattr(self, "classes_"):
            return reason
        positive = bool((out > 0).all())
        label = self.pos_label_ if positive else next(c for c in self.classes_ if c != self.pos_label_)
        return f"it predicts {python_scalar(label)!r} for all {out.numel()} rows"

    # ------------------------------------------------------------------ diagnostics
    def _diagnose(self, data: FairData, constraints: list, result: FitResult, relaxed: int, *,
                  tightened: bool = False) -> None:
        """Warn on :func:`fairopt.diagnostics.fit_warnings` and, for the penalty method, on over-satisfied rows
        (``tightened``: the model trained under the bounds less a ``margin``)."""
        if constraints and self.check_inactive:
            self.reference_violations_ = self._reference_violations(data, constraints)
        for category, message in fit_warnings(self.model_, data, result, constraints, self.train_violations_,
                                              method=self.method, violation_tol=self.violation_tol, relaxed=relaxed,
                                              reference=self.reference_violations_, tightened=tightened,
                                              model_kind=self.model if isinstance(self.model, str) else None):
            warnings.warn(message, category, stacklevel=3)
        if self.method == "penalty" and constraints:
            weight = (self.engine_params or {}).get("weight", "default 1.0")
            message = penalty_slack_message(over_satisfied_rows(self.model_, data, constraints), weight)
            if message:
                warnings.warn(message, FairnessWarning, stacklevel=3)

    def _reference_violations(self, data: FairData, constraints: list) -> dict[str, float]:
        """Exact training violations of an unconstrained model trained with the same settings."""
        if self.method == "moving_targets":  # iteration 0 is the unconstrained learner
            return pretraining_violations(self.history_, constraints, list(self.train_violations_))
        result, _ = self._train(data, constraints, reference=True)
        result.model.eval()
        return model_violations(result.model, data, constraints)

    # ------------------------------------------------------------------ prediction
    def _affine_map(self) -> tuple[np.ndarray, float]:
        """``(w, b)`` with ``out = x' w + b`` of a linear model, read off its outputs at ``x = 0`` and the unit
        vectors (exact for any affine model, e.g. with the regressor's output scaling). AttributeError for
        other models.
        """
        check_is_fitted(self)
        if self.model != "linear":
            raise AttributeError(f"coef_: only model='linear' has coefficients, this estimator has "
                                 f"model={self.model!r}")
        p = int(self.preprocessor_.n_features)
        probes = np.vstack([np.zeros((1, p)), np.eye(p)])
        out = float64_outputs(self.model_, probes)
        return out[1:] - out[0], float(out[0])

    def get_feature_names_out(self, input_features: Any = None) -> np.ndarray:
        """The names of the encoded model inputs, in the order of ``coef_``'s columns, in the user's column names:
        ``"age"`` for a numeric column, ``"workclass=Private"`` for a level of a one-hot encoded one
        (``preprocessor_.feature_names_`` hold internal names, ``x2=Private``, when ``X`` was a DataFrame).
        ``input_features`` is not used (the names come from the fit)."""
        check_is_fitted(self)
        preprocessor = self.preprocessor_

        def shown(name: str) -> str:
            column, sep, level = name.partition("=")
            return preprocessor.shown(column) + sep + level if column in preprocessor.columns_ else name

        return np.asarray([shown(str(name)) for name in preprocessor.feature_names_], dtype=object)

    def _outputs(self, X: Any) -> np.ndarray:
        """Model outputs (logits or predictions), float64 (n,); ValueError when they or the parameters are not finite.
        """
        check_is_fitted(self)
        bad = [name for name, p in self.model_.named_parameters() if not bool(torch.isfinite(p).all())]
        if bad:
            raise ValueError(f"model_: non-finite parameters {bad[:3]} (training diverged, status "
                             f"{getattr(self, 'status_', '?')!r}); refit with a smaller lr or fewer epochs")
        out = float64_outputs(self.model_, self._model_inputs(X))
        if not np.isfinite(out).all():
            raise ValueError(f"model_: non-finite outputs on {int((~np.isfinite(out)).sum())} row(s) of X")
        return out

    def _model_inputs(self, X: Any) -> np.ndarray:
        """The encoded model inputs of rows ``X`` (a FairData encoded by ``preprocessor_`` as it is)."""
        if isinstance(X, FairData):
            if X.preprocessor is self.preprocessor_:  # encoded by it already (fit's data, its split() parts)
                return X.X.detach().cpu().numpy()
            X = self._fair_data_inputs(X)
        X = self._checked_inputs(X)
        return encoded_inputs(X, self.preprocessor_, getattr(self, "feature_names_in_", None))

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.sparse = True  # SciPy sparse X is taken as dense (inputs.dense_inputs)
        tags.input_tags.allow_nan = self._routes_missing_inputs()  # "gbm", or a learner that takes them
        return tags

    def _checked_inputs(self, X: Any) -> Any:
        """``X`` without the dropped sensitive columns, checked against the training inputs."""
        X = self._without_dropped(dense_inputs(X))
        keep = self.preprocessor_.keeps_missing
        check_input_finite(X, allow_missing=keep)
        return validate_data(self, X, reset=False, dtype=self._input_dtype(),
                             ensure_all_finite="allow-nan" if keep else True)

    def _fair_data_inputs(self, data: FairData) -> Any:
        """The raw input columns of a FairData (an array when fit saw no column names)."""
        inputs = fair_data_rows(data)[0]
        return inputs if hasattr(self, "feature_names_in_") else inputs.to_numpy()

    def _fair_data_arguments(self, data: FairData, y: Any, sensitive_features: Any) -> tuple:
        """``(y, sensitive_features, sample_weight)`` of a FairData given where ``X`` goes."""
        if y is not None or sensitive_features is not None:
            raise ValueError("y, sensitive_features: a FairData carries its target and sensitive features; "
                             "leave them None")
        _, target, columns, weights = fair_data_rows(data)
        return self._labels(target), columns, weights

    def _labels(self, target: np.ndarray) -> np.ndarray:
        """A FairData's target in the labels of ``y`` (the regressor's are its values)."""
        return target

    def _without_dropped(self, X: Any) -> Any:
        """A DataFrame ``X`` without the columns ``dropped_columns_``; an array with them still in it (it has no
        names to drop them by) is a ValueError that says so."""
        dropped = list(getattr(self, "dropped_columns_", []))
        shape = getattr(X, "shape", ())
        if (dropped and not hasattr(X, "columns") and len(shape) == 2
                and shape[1] == getattr(self, "n_features_in_", -1) + len(dropped)):
            raise ValueError(f"X has {shape[1]} columns, {len(dropped)} more than the model's "
                             f"{self.n_features_in_}: fit took {dropped} out of the model inputs (sensitive_features "
                             "named them), and an array has no column names to drop them by. Pass X without "
                             "them, or a DataFrame (they are dropped by name)")
        return without_columns(X, dropped)

    def _routes_missing_inputs(self) -> bool:
        """Whether the model routes missing input values itself, so ``fit`` keeps them
        (:class:`fairopt.data.Preprocessor` with ``missing="keep"``) instead of raising:
        ``model="gbm"`` (LightGBM sends a row without a value down the side of each split that lowers
        the loss more), or a scikit-learn learner that takes them (its ``allow_nan`` tag)."""
        if isinstance(self.model, str):
            return self.model == "gbm"
        return is_sklearn_model(self.model) and routes_missing_values(self.model)

    def _input_dtype(self) -> Any:
        """float64, or None (objects) when ``X`` had text columns at fit."""
        return None if self.preprocessor_.categorical_ else np.float64

    # ------------------------------------------------------------------ held-out rows
    def _held_out(self, X: Any, y: Any, sensitive_features: Any, sample_weight: Any = None) -> FairData:
        """Rows encoded like the training data (same preprocessing, kinds and levels), with ``sample_weight``
        (a FairData's own weights) as their weights."""
        check_is_fitted(self)
        if isinstance(X, FairData):
            if sample_weight is not None:
                raise ValueError("sample_weight: a FairData carries its weights; leave sample_weight None")
            y, sensitive_features, sample_weight = self._fair_data_arguments(X, y, sensitive_features)
            X = self._fair_data_inputs(X)
        elif y is None:
            raise ValueError("y: required (the target of these rows), unless X is a FairData")
        else:
            warn_reordered_index(X, sensitive_features=sensitive_features, y=y)
        X, sensitive_features, _ = sensitive_columns_of_x(X, sensitive_features)
        X = self._checked_inputs(X)
        columns = sensitive_columns(sensitive_features, X.shape[0], self.sensitive_names, wanted=self.sensitive_names_)
        check_missing(columns)
        return held_out_rows(X, self._encode_target(np.asarray(y)), columns, task=self._task,
                             names=self.sensitive_names_, kinds=self.sensitive_kinds_, levels=self.sensitive_levels_,
                             preprocessor=self.preprocessor_,
                             weights=None if sample_weight is None else check_sample_weight(sample_weight, X.shape[0]))

    def _encode_target(self, y: np.ndarray) -> np.ndarray:  # pragma: no cover - abstract
        raise NotImplementedError

    def _constraints_for(self, data: FairData) -> list:
        """The fitted constraints; a loaded estimator's constraints are set up on ``data``."""
        if self._constraints_from_training:
            return self.constraints_
        constraints = resolve_constraints(self.constraints_)
        set_up_on_other_rows(constraints, data)
        return constraints

    def evaluate(self, X: Any, y: Any = None, *, sensitive_features: Any = None, sample_weight: Any = None) -> dict:
        """:func:`fairopt.evaluate` of the model on these rows: performance, realised fairness and the
        exact constraint values and violations.

        The sensitive features (in any form :meth:`fit` takes) must hold all the training groups.
        ``sample_weight`` weighs the constraint rows (``bounds``, the violations) as :meth:`fit` weighs
        them, ``P_g = sum_{i in g} w_i 1{yhat_i = 1} / sum_{i in g} w_i``: a model fitted with weights
        meets its bounds in these terms. The accuracy (R2, MSE) and ``di_ratio`` / ``dp_difference`` are
        weighted too; the distribution and FaUCI measures count rows (:func:`fairopt.evaluate`). A FairData
        ``X`` brings its own weights.
        """
        data = self._held_out(X, y, sensitive_features, sample_weight)
        constraints = self._constraints_for(data)
        try:
            return evaluate_model(self.model_, data, constraints)
        finally:
            release_caches(constraints)

    def certify(self, X: Any, y: Any = None, *, sensitive_features: Any = None, confidence: float | None = None,
                method: str = "normal") -> list:
        """Held-out certificates of the fitted bounds on rows the model never trained on (a later file, a
        monitoring batch): one :func:`fairopt.certify` statement per constraint, each a confidence interval
        of its measure on these rows against the bound (:mod:`fairopt.certificate`).

        Parameters
        ----------
        X, y, sensitive_features : the rows with their targets, as :meth:`evaluate` takes them; every
            training group must be present. Unweighted: the intervals count rows.
        confidence : float in (0, 1), optional
            Level of each statement; default the estimator's ``confidence``.
        method : {"normal", "clopper-pearson"}, default "normal"
            Interval of the group rates (:func:`fairopt.certify`).

        Returns
        -------
        list of Certificate
            ``passed`` says whether the bound holds in the population of these rows at that level.
        """
        level = self.confidence if confidence is None else confidence
        data = self._held_out(X, y, sensitive_features)
        require_all_groups(data, self.sensitive_levels_)
        constraints = self._constraints_for(data)
        self.model_.eval()
        try:
            return [certify_constraint(self.model_, data, c, level, method=method, seed=self.seed_value())
                    for c in constraints]
        finally:
            release_caches(constraints)

    def check_generalisation(self, X: Any, y: Any = None, *, sensitive_features: Any = None,
                             tol: float = 0.02, sample_weight: Any = None) -> pd.DataFrame:
        """Compare each constraint's exact violation on held-out rows with its training value.

        Warns (:class:`fairopt.FairnessWarning`) for each constraint whose violations differ by more
        than ``tol``: in rate units for group-rate constraints (at most half a nonzero difference bound),
        and as a share of the bound for rows in other units (covariance, GeDI, distance covariance:
        ``tol * |bound|``, e.g. 2% of it): :func:`fairopt.held_out.generalisation_limit`.

        Parameters
        ----------
        X, y : held-out rows (``X`` a FairData: its own ``y`` and sensitive features).
        sensitive_features : their sensitive features (as in :meth:`fit`).
        tol : float, default 0.02
            Largest accepted ``|held-out violation - training violation|`` (rates), or share of the bound.
        sample_weight : array (n,), optional
            Weights of the held-out rows' constraint rows, as :meth:`evaluate` takes them (the training
            violations of a weighted fit are weighted).

        Returns
        -------
        pandas.DataFrame
            One row per constraint, columns ``train``, ``held_out`` and ``gap``.
        """
        positive_float(tol, "tol", allow_zero=True)
        data = self._held_out(X, y, sensitive_features, sample_weight)
        require_all_groups(data, self.sensitive_levels_)
        constraints = self._constraints_for(data)
        held_out = model_violations(self.model_, data, constraints)
        release_caches(constraints)
        limits = {name: generalisation_limit(c, tol) for name, c in zip(held_out, constraints)}
        return generalisation_table(self.train_violations_, held_out, limits)


class _SeedDraw(NamedTuple):
    """A seed drawn from the generator ``source`` (an estimator's ``random_state``); ``unused``: drawn by
    ``seed_value`` before a fit, which the next fit takes instead of drawing its own."""

    source: Any
    seed: int
    unused: bool


def _drawn_seed(random_state: Any) -> int | None:
    """An integer seed drawn from a ``numpy.random.RandomState`` or ``Generator`` (scikit-learn's
    ``random_state`` may be one), None for anything else."""
    if isinstance(random_state, np.random.RandomState):
        return int(random_state.randint(np.iinfo(np.int32).max))
    if isinstance(random_state, np.random.Generator):
        return int(random_state.integers(np.iinfo(np.int32).max))
    return None


def _left_out_groups(data: FairData, constraints: list) -> str:
    """A sentence for the status message per group-rate constraint that leaves groups out on the training rows
    (:meth:`~fairopt.constraints.rates.GroupRateConstraint.sides_without_rows`: no women with y = 1 for
    equal opportunity on sex, or a group of total weight 0), whose bound is then met vacuously for them."""
    parts = []
    for c in constraints:
        empty = c.sides_without_rows(data) if callable(getattr(c, "sides_without_rows", None)) else []
        if empty:
            parts.append(f" {label_of(c, data.task)}: no training rows (or no weight) for {', '.join(empty)}, so "
                         "the bound leaves them out and compares the other groups only: it says nothing about them.")
    return "".join(parts)


def _pairwise_advice(bound: Any, constraints: list) -> str:
    """``"'eodds[pairwise]:age_band>=0.8'"``: the spec of ``bound``'s constraint over every pair of groups
    (:func:`fairopt.specs.pairwise_spec`); a DI example where the constraint has no spec (a wrapped one)."""
    constraint = next((c for c in constraints if str(c.name) == bound.name), None)
    try:
        return f"here {pairwise_spec(constraint)!r}" if constraint is not None else "e.g. 'di[pairwise]:race>=0.8'"
    except (ValueError, KeyError, AttributeError):
        return "e.g. 'di[pairwise]:race>=0.8'"


def _agrees(given: Any, own: Any) -> bool:
    """Whether names / kinds set on an estimator agree with a FairData's own."""
    if isinstance(own, Mapping):
        return isinstance(given, Mapping) and all(own.get(k) == v for k, v in given.items())
    return ([given] if isinstance(given, str) else list(given)) == list(own)


class _FairDataScore:
    """``score(data)`` for a :class:`fairopt.FairData`, before scikit-learn's mixins whose ``score`` it calls."""

    def score(self, X: Any, y: Any = None, sample_weight: Any = None) -> float:
        """scikit-learn's score (accuracy, R2); a FairData ``X`` brings its own target and weights."""
        if isinstance(X, FairData):
            if sample_weight is not None:
                raise ValueError("sample_weight: a FairData carries its weights; leave sample_weight None")
            y, _, sample_weight = self._fair_data_arguments(X, y, None)
        return super().score(X, y, sample_weight=sample_weight)


class FairClassifier(_FairDataScore, ClassifierMixin, _FairEstimator):
    """Binary classifier trained under fairness constraints (scikit-learn estimator).

    The model outputs the logit ``out`` of the positive class ``pos_label_``; ``predict`` is that
    class where ``out > 0`` and its probability is ``sigmoid(out)``. Training minimises the mean
    logistic loss subject to the constraints, whose group rates are rates of predicting the
    positive class.

    Parameters
    ----------
    constraints : spec or list of specs, optional
        ``("disparate_impact", "sex", 0.8)``, ``"demographic_parity:sex:0.05"``, a table
        ``{"kind": ..., ...}`` or constraint objects (:mod:`fairopt.specs`). ``None``: the
        unconstrained model, trained by the same ``method`` without fairness terms.
    pos_label : label, optional
        The positive class, one of the labels of ``y``: the outcome whose group rates the rate
        constraints bound and whose logit the model outputs. ``None``: ``classes_[1]``, with a
        :class:`fairopt.FairnessWarning` unless the labels are 0/1, -1/1 or booleans (sorted text
        labels say nothing about which outcome is favourable). ``classes_`` stay sorted, so
        ``predict_proba[:, 1]`` and a positive ``decision_function`` keep meaning ``classes_[1]``
        as scikit-learn's scorers expect; pass the same ``pos_label`` to :mod:`fairopt.metrics`.
    method : {"sqp", "penalty", "lagrangian", "moving_targets"}, default "sqp"
        The engine (:mod:`fairopt.training`); ``"sqp"`` enforces the bounds as hard constraints.
    model : {"linear", "mlp", "gbm"} or callable, default "linear"
        :func:`fairopt.models.linear`, :func:`fairopt.models.mlp`, ``"gbm"`` (gradient-boosted
        trees grown under the hard constraints, :class:`solvers.boosting.BoostedSQP`;
        ``method="sqp"`` without ``batch_size``; at most ``epochs`` rounds, default 300, their
        number chosen on held-out training rows, :mod:`fairopt.boosted`; ``lr`` default 0.1, tree
        options through ``engine_params``; missing input values (NaN/None) are kept, LightGBM
        routing them at every split, where the other models raise), or a factory
        ``n_features -> nn.Module``
        with one float32 output per row, called under ``torch.manual_seed(seed)``.
    hidden : tuple of int, default (32,)
        Hidden-layer widths of ``model="mlp"``.
    activation : {"leaky_relu", "relu", "tanh"}, default "leaky_relu"
        Activation of ``model="mlp"``.
    alpha : float, optional
        L2 penalty: training minimises ``mean loss + alpha / 2 * sum_k ||W_k||^2`` over the weight
        matrices of the ``nn.Linear`` layers (not the biases; Moving Targets: Adam
        ``weight_decay``). ``LogisticRegression(C=C)`` on ``n`` rows is ``alpha = 1 / (C n)``;
        ``Ridge(alpha=a)`` on the standardised target is ``alpha = 2 a / n``. ``None``:
        :data:`fairopt.training.ALPHA_DEFAULTS` (3e-4 for the classifier, 0 for the regressor).
    epochs : int, optional
        Passes over the training data. ``None``: SQP 500 full-batch epochs, or with
        ``batch_size`` enough for 500 steps (an MLP's step ``beta`` below 0.5: ``500 * 0.5 / beta``, so the
        classifier's on ``B < 256`` rows ``500 sqrt(256 / B)`` and the regressor's at 0.02 12,500; at most 500
        epochs), or for a
        linear model, which the full-batch polish
        finishes under the curvature metric, for ``100 * 0.5 / lr`` steps (the classifier's 100, the
        regressor's 500) in at least 2 epochs (:func:`solvers.sqp.engine.auto_epochs`); penalty
        and Lagrangian ``E`` full-batch Adam epochs (1000; the regressor's Lagrangian 3000), or with
        ``batch_size`` ``B`` as many steps, ``ceil(E / ceil(n / B))`` epochs
        (:func:`fairopt.training.first_order_minibatch_epochs`: ``E`` epochs of ``n / B`` steps each took
        up to 20x the full batch's time, less accurately); Moving Targets 200 per learner refit.
    lr : float, optional
        Learning rate; ``None``: SQP 0.5 (an MLP's mini-batch steps on batches of at least 256 rows
        0.75, on ``B`` fewer ``0.5 sqrt(B / 256)``; a linear model whose inputs move together, such as
        many correlated measurements, a shorter step from its curvature, ``engine_info_["lr"]``: ``lr="auto"`` of
        :class:`~solvers.sqp.StochasticSQP`), penalty and Lagrangian 0.02 (the regressor's 0.01), with
        ``batch_size`` decayed over the run's ``T`` steps, ``lr_t = lr (1 + cos(pi t / T)) / 2``, so that the
        returned iterate of noisy batch gradients settles (a mini-batch Penalty also switches its hinge by a
        running mean of the rows, a Lagrangian classifier takes the signed dual update on the batch's exact
        rates with the calibrated form's gradient: :func:`fairopt.training.first_order_minibatch_defaults`);
        Moving Targets 1e-3.
    batch_size : int, optional
        Rows per mini-batch; ``None``: full batch (Moving Targets learner: 128). With SQP,
        mini-batches pay for an MLP on data many batches long or for memory-mapped rows; a
        linear model's full batch is about as fast (``docs/methods/sqp.md``). A network wider than
        the default ``hidden=(32,)`` is best fitted on mini-batches: its full batch's constant step
        can alternate about the optimum, fitting less and leaving the bound with slack (``hidden=(64,
        64)``, DI >= 0.8, 14,000 Adult rows: train DI 0.85-0.86; over five data sets and two seeds
        ``batch_size=1024`` meets the bound with 0.6 points more train accuracy and 0.3 more test
        accuracy in half the time). Rate constraints
        that name no surrogate step under ``sigmoid(out)`` in a full batch
        (:data:`fairopt.training.SQP_RATE_SURROGATE`) and under the engine's own calibrated form on
        mini-batches (``sigmoid(5 out)``, a network's ``sigmoid(2 out)``), the forms the mini-batch
        defaults were chosen with.
    seed : int, default 0
        Model initialisation and engine randomness.
    engine_params : dict, optional
        Further arguments of the engine: :class:`solvers.StochasticSQP`,
        :class:`solvers.penalty.Penalty`, :class:`solvers.lagrangian.LagrangianDual` or
        :class:`solvers.moving_targets.MovingTargets`. E.g. ``{"hessian": "adam"}``: the SQP
        steps scaled by squared gradients also in a full-batch fit, where the default scales them
        by the loss's curvature (``docs/methods/sqp.md``). The classifier's full-batch SQP fit of
        ``model="mlp"`` takes ``{"lr_schedule": "none"}`` (every step at ``lr``) unless
        ``engine_params`` names a schedule (:func:`fairopt.training.engine_param_defaults`).
    sensitive_names : str or list of str, optional
        Names of sensitive features given as arrays (they replace DataFrame/dict names).
        ``None``: a single unnamed column takes the one sensitive name the constraints use, else
        ``"sensitive"``; several are ``"sensitive_0"``, ``"sensitive_1"``, ...
    sensitive_kinds : dict name -> {"binary", "categorical", "continuous"}, optional
        Declared kinds (e.g. integer-coded race as ``"categorical"``); otherwise inferred.
    check_inactive : bool, default False
        Also train an unconstrained reference model and warn for every bound it already meets.
    violation_tol : float, default 1e-3
        Exact training violation above which a constraint is reported unmet: in rate units for
        group-rate constraints (at most half a difference bound: ``DemographicParity(bound=1e-4)`` is
        met within 5e-5), and times ``min(1, B)`` for rows in other units, ``B`` the largest finite
        bound (:func:`fairopt.status.met_tolerance`: a distance covariance bound of 1e-5 is met within
        1e-8).
    verbose : int or "auto", default "auto"
        ``"auto"``: a progress bar once training has run a few seconds; 0: none; 1: the bar and
        one INFO log line per epoch (logger ``solvers.sqp``).
    margin : float or "auto", default 0.0
        Train under bounds tightened by this amount (``upper - margin``, ``lower + margin``) so
        the value on new rows has room to move. ``"auto"``: :func:`fairopt.certificate.auto_margin`
        per row for a new sample the size of the held-out part (30% without
        ``validation_fraction``). A margin is a prediction (``predicted_held_out_``), not a
        guarantee. ``model="gbm"`` raises it by the fit optimism its held-out early-stopping fit
        measures (:func:`fairopt.boosted.fit_optimism`; ``engine_info_["fit_optimism"]``).
    validation_fraction : float in (0, 0.5], optional
        Hold out this fraction of the rows (stratified by target x sensitive cell), train on the
        rest and certify the model on the held-out rows (:func:`fairopt.certificate.certify`,
        ``certificate_``). The model is not refitted on all rows, so the certificate is about it.
    confidence : float, default 0.95
        Confidence level of the certificates and of ``margin="auto"``.
    on_fail : {"warn", "raise", "ignore"}, default "warn"
        A failed certificate warns (:class:`fairopt.FairnessWarning`) or raises
        :class:`fairopt.exceptions.CertificateError` after fitting.
    n_candidates : int, default 7
        With ``validation_fraction`` and ``margin="auto"``: fit candidates under margins of
        inflation 2 down to 0.5 times the certificate half-width ``z se`` and keep the last that
        passes before the first failure (fixed-sequence testing keeps the confidence level).
    random_state : int, numpy.random.RandomState or Generator, optional
        scikit-learn's name for ``seed`` (both, different: ValueError); a RandomState or Generator gives one
        seed per ``fit``, drawn from it once (:meth:`seed_value`).
    max_iter : int, optional
        scikit-learn's name for ``epochs`` (both, different: ValueError).

    Attributes
    ----------
    classes_ : ndarray of the two labels, sorted.
    pos_label_ : the positive class (``pos_label``, else ``classes_[1]``).
    model_ : torch.nn.Module, the trained model (on standardised inputs).
    coef_, intercept_ : ``model="linear"`` only: the coefficients (1, n) and intercept (1,) of
        ``decision_function`` on the encoded inputs, named by :meth:`get_feature_names_out`.
    preprocessor_ : :class:`fairopt.Preprocessor` fitted on the training ``X``.
    constraints_ : list, the constraint objects set up on the training data.
    history_ : :class:`fairopt.History` of the engine's iterations.
    status_ : str (:mod:`fairopt.status`): ``"converged"``, ``"feasible_not_stationary"``,
        ``"infeasible"``, ``"degenerate"`` (bounds met by a model constant on the training rows, or by a
        classifier no better than one: accuracy not above the majority-class rate by two standard errors),
        ``"diverged"`` or ``"stopped_by_callback"``.
    status_message_ : str, each bound beside its realised measure and the distance from stationarity.
    converged_ : bool, True only when ``status_`` is "converged": the engine's own test (feasible and
        stationary) passed, and the estimator's checks of the bounds and of a constant model agree.
    n_iter_ : int, the engine's iterations (history records): one step per full-batch epoch, or per
        mini-batch, plus the end-game's polish and restarts; so not capped by ``max_iter``, which is
        scikit-learn's name for ``epochs`` (Moving Targets: master iterations, whose number ``iterations`` in
        ``engine_params`` sets).
    train_violations_ : dict constraint name -> exact violation on the training data;
        train_violation_ : their sum.
    reference_violations_ : dict or None, the same for the unconstrained reference
        (``check_inactive=True``).
    engine_info_ : dict of the engine's scalar extras (multipliers, final KKT residual).
    sensitive_names_, sensitive_kinds_, sensitive_levels_ : the training sensitive features.
    n_features_in_, feature_names_in_ : the model's input columns, as in scikit-learn.
    dropped_columns_ : list of str, sensitive columns of a DataFrame ``X`` that are not model
        inputs; the prediction methods drop them.
    certificate_ : list of :class:`fairopt.Certificate` with ``validation_fraction``, else None.
    candidates_ : pandas.DataFrame or None, per candidate margin tried: its ``inflation``, whether
        it ``passed``, the held-out values and bounds, and which was ``chosen``.
    validation_indices_ : ndarray of the held-out rows of ``X``, else None.
    predicted_held_out_ : pandas.DataFrame or None, with a margin: per constraint row the training
        value, the margin and the predicted range ``train -/+ margin`` for new rows.
    """

    _task = "binary"  # its engine defaults: fairopt.training.ENGINE_DEFAULTS["binary"]

    # spelled out: scikit-learn reads the parameters from the signature (no **kwargs);
    # tests/test_pos_label.py checks this list is the shared one plus pos_label
    def __init__(
        self,
        constraints: Any = None,
        *,
        pos_label: Any = None,
        method: str = "sqp",
        model: str | Callable[[int], nn.Module] = "linear",
        hidden: tuple = (32,),
        activation: str = "leaky_relu",
        alpha: float | None = None,
        epochs: int | None = None,
        lr: float | None = None,
        batch_size: int | None = None,
        seed: int = 0,
        engine_params: dict | None = None,
        sensitive_names: Any = None,
        sensitive_kinds: dict | None = None,
        check_inactive: bool = False,
        violation_tol: float = 1e-3,
        verbose: int | str = "auto",
        margin: float | str = 0.0,
        validation_fraction: float | None = None,
        confidence: float = 0.95,
        on_fail: str = "warn",
        n_candidates: int = 7,
        random_state: int | np.random.RandomState | np.random.Generator | None = None,
        max_iter: int | None = None,
    ) -> None:
        shared = {k: v for k, v in locals().items() if k not in ("self", "pos_label", "__class__")}
        super().__init__(**shared)
        self.pos_label = pos_label

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.classifier_tags.multi_class = False
        return tags

    def _encode_training_target(self, y: np.ndarray) -> np.ndarray:
        """Set ``classes_`` and ``pos_label_``; warn when the positive class was taken by default."""
        check_classification_targets(y)
        classes = np.unique(y)
        if classes.size > 2:
            raise ValueError(f"y: Only binary classification is supported; FairClassifier got {classes.size} "
                             f"classes: {classes[:10].tolist()}")
        if classes.size < 2:
            raise ValueError(f"y: FairClassifier needs 2 classes, got 1 class: {classes.tolist()}")
        positive, note = positive_class(classes, self.pos_label)
        if note:  # stack: here, _training_data, fit, the caller of fit
            warnings.warn(note, FairnessWarning, stacklevel=4)
        self.classes_ = classes
        self.pos_label_ = positive
        return (y == positive).astype(np.float64)

    def _check_constraints_fit_the_task(self, data: FairData, constraints: list) -> None:
        """A :class:`fairopt.FairnessWarning` for a rate constraint whose ``threshold`` is not 0: it bounds the
        decisions ``out > t`` (probability above ``sigmoid(t)``), while ``predict`` and ``score`` decide at
        ``out > 0`` (probability 0.5), where the bound does not hold in general."""
        for c in constraints:
            t = getattr(c, "threshold", None)
            if not isinstance(c, GroupRateConstraint) or t is None or not math.isfinite(float(t)) or float(t) == 0:
                continue
            p = 1.0 / (1.0 + math.exp(-float(t)))
            warn_at_caller(f"{c.name}: its threshold {float(t):.4g} bounds the decisions out > {float(t):.4g} "
                           f"(probability above {p:.4g}), not those of predict and score (probability above 0.5), "
                           "where the bound does not hold in general; decide at its threshold, e.g. "
                           f"FixedThresholdClassifier(FrozenEstimator(clf), threshold={p:.4g}, "
                           "response_method='predict_proba', pos_label=clf.pos_label_) of scikit-learn "
                           "(docs: Estimators, meta-estimators), or leave the constraint's threshold at 0",
                           FairnessWarning)

    def _encode_target(self, y: np.ndarray) -> np.ndarray:
        y = np.asarray(y).reshape(-1)
        unknown = ~np.isin(y, self.classes_)
        if unknown.any():
            raise ValueError(f"y: labels {np.unique(y[unknown])[:5].tolist()} are not among classes_ "
                             f"{self.classes_.tolist()}")
        return (y == self.pos_label_).astype(np.float64)

    def _labels(self, target: np.ndarray) -> np.ndarray:
        """A FairData's 0/1 target as labels, 1 being ``pos_label_``."""
        if np.array_equal(self.classes_.astype(object), [0, 1]):
            return self.classes_[target.astype(np.int64)]
        positive = 0 if self._positive_first() else 1
        return self.classes_[np.where(target == 1, positive, 1 - positive)]

    def _positive_first(self) -> bool:
        """Whether the positive class is ``classes_[0]``."""
        return bool(self.classes_[0] == self.pos_label_)

    @property
    def coef_(self) -> np.ndarray:
        """``model="linear"``: the coefficients of ``decision_function`` on the encoded, standardised inputs,
        shape (1, n), as a ``LogisticRegression`` after a ``StandardScaler`` reports them.
        """
        w, _ = self._affine_map()
        return (-w if self._positive_first() else w).reshape(1, -1)

    @property
    def intercept_(self) -> np.ndarray:
        """``model="linear"``: the intercept of ``decision_function``, shape (1,)."""
        _, b = self._affine_map()
        return np.array([-b if self._positive_first() else b])

    def decision_function(self, X: Any) -> np.ndarray:
        """The logit of ``classes_[1]`` per row, shape (n,): ``out``, negated when ``pos_label_`` is ``classes_[0]``."""
        out = self._outputs(X)
        return -out if self._positive_first() else out

    def predict_proba(self, X: Any) -> np.ndarray:
        """``[P(classes_[0]), P(classes_[1])]`` per row, shape (n, 2), with ``P(pos_label_) = sigmoid(out)``."""
        p = expit(self._outputs(X))
        return np.column_stack([p, 1.0 - p] if self._positive_first() else [1.0 - p, p])

    def predict(self, X: Any) -> np.ndarray:
        """``pos_label_`` where the model's logit ``out`` is positive, else the other class."""
        positive = (self._outputs(X) > 0).astype(np.int64)
        return self.classes_[1 - positive if self._positive_first() else positive]


class FairRegressor(_FairDataScore, RegressorMixin, _FairEstimator):
    """Least-squares regressor trained under fairness constraints (scikit-learn estimator).

    Training minimises the mean squared error subject to the constraints (typically
    :class:`~fairopt.constraints.GeDI`, :class:`~fairopt.constraints.Covariance` or
    :class:`~fairopt.constraints.DistanceCovariance`, bounds in the units of ``y``). Parameters and
    attributes as in :class:`FairClassifier`, without ``pos_label``, ``classes_`` and ``pos_label_``.
    """

    _task = "regression"  # its engine defaults: fairopt.training.ENGINE_DEFAULTS["regression"]

    @property
    def coef_(self) -> np.ndarray:
        """``model="linear"``: the coefficients of ``predict`` on the encoded, standardised inputs, shape (n,)."""
        return self._affine_map()[0]

    @property
    def intercept_(self) -> float:
        """``model="linear"``: the intercept of ``predict`` (in the units of ``y``)."""
        return self._affine_map()[1]

    def _encode_training_target(self, y: np.ndarray) -> np.ndarray:
        try:
            return np.asarray(y, dtype=np.float64).reshape(-1)
        except (TypeError, ValueError) as exc:
            labels = np.unique(np.asarray(y, dtype=object).astype(str))
            raise ValueError(f"y: FairRegressor needs numbers, got labels such as {short_list(labels.tolist())} "
                             f"({exc}); for classes use FairClassifier, or encode the labels as numbers") from None

    def _check_constraints_fit_the_task(self, data: FairData, constraints: list) -> None:
        """A group-rate constraint on a regressor bounds the groups' shares of predictions above its
        ``threshold`` (in the units of ``y``); with no training target above the threshold, or every one
        (``t`` not in ``[min y, max y)``), every group's share of a good fit is 0 or 1, and the bound says
        nothing: a ValueError that says what to give instead."""
        y = data.y.detach().cpu().numpy()
        low, high = float(np.min(y)), float(np.max(y))
        for c in constraints:
            threshold = getattr(c, "threshold", None)
            if isinstance(c, GroupRateConstraint) and threshold is not None and not low <= threshold < high:
                side = "at or above the largest" if threshold >= high else "below the smallest"
                share = 0 if threshold >= high else 1
                raise ValueError(
                    f"constraints: {c.name} on a regressor bounds the groups' shares of predictions above its "
                    f"threshold ({threshold:g}, in the units of y), which lies {side} training target (range "
                    f"[{low:.4g}, {high:.4g}]): every group's share of targets above it is {share}, and so is that "
                    f"of a good fit. Give a threshold t with {low:.4g} <= t < {high:.4g} for a rate of predictions "
                    "above t (in Python the spec option (kind, column, bound, {'threshold': t}); on the command line a "
                    "--config table {kind = 'di', sensitive = ..., delta = ..., threshold = t}), or bound the "
                    "predictions themselves with 'gedi', 'covariance' or 'dcov'")

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
def check_target_present(y: Any) -> None:
    """A ValueError naming ``y`` and its first missing entry (None, NaN, a missing Categorical value) of a
    one-column target, before scikit-learn's validation sorts the labels (a TypeError for None among text) or
    reports "Input contains NaN" without saying where."""
    values = np.asarray(y, dtype=object) if y is not None else None
    if values is None or values.ndim > 2 or (values.ndim == 2 and values.shape[1] != 1):
        return  # the shape errors of the validation are clearer
    missing = np.flatnonzero(pd.isna(values.reshape(-1)))
    if missing.size:
        raise ValueError(f"y: {missing.size} missing value(s) (None or NaN), e.g. at row {int(missing[0])}; drop "
                         "those rows (with their X, sensitive_features and sample_weight) or fill them")

