"""The useless-model warning (issue 31, point 5): one rule, solvers.outcome.near_constant, for
the estimators' diagnostics and the SQP engine: training accuracy not above the majority-class
rate by two binomial standard errors, or one class on (almost) every row."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest
import torch

import fairopt
from fairopt.diagnostics import poor_fit_message
from fairopt.exceptions import DegenerateModelWarning, FairnessWarning
from solvers import StochasticSQP
from solvers.outcome import (NEAR_CONSTANT_SHARE, NEAR_CONSTANT_Z, ConstantPredictorWarning, NearConstantWarning,
                             near_constant, training_remedies, warn_if_constant)
from conftest import TensorRows, require_shared_file


def test_the_rule_against_its_formula():
    m, n = 0.75, 2000
    margin = NEAR_CONSTANT_Z * math.sqrt(m * (1 - m) / n)  # 0.0194
    assert near_constant(m + 0.9 * margin, m, n)  # within two standard errors: not measurably better
    assert near_constant(m, m, n)
    assert not near_constant(m + 1.1 * margin, m, n)
    assert not near_constant(m + 0.001, m)  # no row count: strictly above the rate is enough
    # the share of the less often predicted class
    assert not near_constant(0.9, m, n, positive_share=0.3)
    assert near_constant(0.9, m, n, positive_share=1 - 0.5 * NEAR_CONSTANT_SHARE)
    assert near_constant(0.9, m, 100, positive_share=1.0) and not near_constant(0.9, m, 100, positive_share=0.99)


def test_the_engine_warning_tells_a_failed_fit_from_a_near_constant_one():
    with pytest.warns(ConstantPredictorWarning, match="training failed") as caught:
        assert warn_if_constant("E", 0.6, 0.56, accuracy=0.80, majority=0.75, n_rows=1000)
    assert not any(issubclass(w.category, NearConstantWarning) for w in caught)
    with pytest.warns(NearConstantWarning, match="Bounds that only such a model meets"):
        assert warn_if_constant("E", 0.5, 0.56, accuracy=0.76, majority=0.75, n_rows=1000)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert not warn_if_constant("E", 0.5, 0.56, accuracy=0.80, majority=0.75, n_rows=1000)


def test_the_warning_blames_training_only_where_the_best_constant_meets_the_bounds():
    with pytest.warns(ConstantPredictorWarning, match="the best constant output meets them"):
        warn_if_constant("E", 0.6, 0.56, constant_meets_bounds=True)
    with pytest.warns(ConstantPredictorWarning, match="violates the bounds, so they may force this") as caught:
        warn_if_constant("E", 0.6, 0.56, constant_meets_bounds=False)
    assert "training failed" not in str(caught[0].message)
    with pytest.warns(ConstantPredictorWarning, match="Bounds that a constant model meets do not force this"):
        warn_if_constant("E", 0.6, 0.56, constant_meets_bounds=None)


class _MeanAtLeast:
    """A user constraint ``mean(out) >= level``: unlike the library's bounds, a constant output can violate it."""

    name = "mean_out"

    def __init__(self, level):
        self.lower = torch.tensor([float(level)], dtype=torch.float64)
        self.upper = torch.tensor([math.inf], dtype=torch.float64)

    def __call__(self, out, batch):
        return out.reshape(-1).mean().reshape(1)

    exact = __call__


@pytest.mark.parametrize("level", [3.0, -3.0])
def test_the_engine_checks_the_best_constant_against_a_user_constraint(level):
    """The engine's loss-above-constant warning said "a constant model meets the bounds" for any
    constraint; ``mean(out) >= 3`` on targets of mean 0 forces every feasible model's mse above the
    variance, so the warning must say the bound may force it, and a bound the constant meets
    (``>= -3``) gives a fit better than the constant with no warning."""
    g = torch.Generator().manual_seed(0)
    X = torch.randn(400, 1, generator=g, dtype=torch.float64)
    y = 0.5 * X.reshape(-1) + torch.randn(400, generator=g, dtype=torch.float64)
    model = torch.nn.Linear(1, 1).double()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = StochasticSQP(epochs=60).fit(model, TensorRows(X, y), loss="mse", constraints=[_MeanAtLeast(level)])
    constant = [str(w.message) for w in caught if issubclass(w.category, ConstantPredictorWarning)]
    if level > 0:
        assert result.info["max_row_violation"] <= 1e-6
        assert len(constant) == 1 and "violates the bounds" in constant[0] and "training failed" not in constant[0]
    else:
        assert constant == []


def group_only_sample(n: int = 800, seed: int = 0):
    """The input is a noisy copy of the group and the label follows the group: every model
    that uses its input predicts the groups differently, so DI >= 0.98 leaves only (nearly)
    constant models."""
    rng = np.random.default_rng(seed)
    s = (rng.random(n) < 0.5).astype(int)
    X = (s + rng.normal(scale=0.3, size=n)).reshape(-1, 1)
    y = np.where(rng.random(n) < 0.85, s, 1 - s)
    return X, y, s


def test_a_bound_only_a_constant_model_meets_fires():
    X, y, s = group_only_sample()
    with pytest.warns(FairnessWarning, match="near-constant classifier") as caught:
        clf = fairopt.FairClassifier([("di", "s", 0.98)]).fit(X, y, sensitive_features=s)
    message = next(str(w.message) for w in caught if "near-constant" in str(w.message))
    assert "majority-class rate" in message and "Loosen the bound" in message
    assert clf.score(X, y) < max(y.mean(), 1 - y.mean()) + 0.05
    # the same data without the bound: a useful model, no such warning
    with warnings.catch_warnings():
        warnings.simplefilter("error", FairnessWarning)
        assert fairopt.FairClassifier().fit(X, y).score(X, y) > 0.8


def test_one_class_everywhere_is_a_degenerate_model():
    labels = np.array([1.0] * 90 + [0.0] * 10)
    out = np.ones(100)
    message = poor_fit_message("binary", labels, out, constrained=True)
    assert "one class is predicted for 100.00%" in message and "Loosen the bound" in message
    assert "No bound was given" in poor_fit_message("binary", labels, out)
    X, y, s = group_only_sample(300)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        fairopt.FairClassifier([("dp", "s", 0.0)]).fit(X, y, sensitive_features=s)
    near = [w for w in caught if "near-constant" in str(w.message)]
    assert len(near) == 1  # one warning, not one per rule
    if "100.00%" in str(near[0].message):
        assert issubclass(near[0].category, DegenerateModelWarning)


def test_a_near_constant_fit_is_a_degenerate_model_whatever_its_exact_outputs():
    """One category for the fits whose status is "degenerate": a classifier no better than a constant one
    is a DegenerateModelWarning whether or not every row gets the same class."""
    X, y, s = group_only_sample()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        clf = fairopt.FairClassifier([("di", "s", 0.98)]).fit(X, y, sensitive_features=s)
    near = [w for w in caught if "near-constant classifier" in str(w.message)]
    assert clf.status_ == "degenerate" and len(near) == 1
    assert issubclass(near[0].category, DegenerateModelWarning)


@pytest.mark.parametrize("kind, advised", [("linear", True), ("mlp", False), ("gbm", False), (None, False)])
def test_the_advice_names_a_more_flexible_model_only_to_a_linear_one(kind, advised):
    labels = np.array([1.0] * 90 + [0.0] * 10)
    message = poor_fit_message("binary", labels, np.ones(100), constrained=True, model_kind=kind)
    assert ("model='mlp'" in message) == advised and "informative inputs" in message


def test_full_batches_are_advised_only_to_a_run_of_mini_batches():
    with pytest.warns(ConstantPredictorWarning) as caught:
        warn_if_constant("E", 0.6, 0.56, remedies=training_remedies(mini_batch=False))
    assert "full batches" not in str(caught[0].message) and "more epochs" in str(caught[0].message)
    with pytest.warns(ConstantPredictorWarning, match="full batches"):
        warn_if_constant("E", 0.6, 0.56, remedies=training_remedies(mini_batch=True))


def test_law_school_under_di_08_is_not_called_near_constant():
    """Law school: majority-class rate 0.89; under DI >= 0.8 the model reaches about 0.90 on
    14,558 training rows, five standard errors above it: a useful model, no warning."""
    path = require_shared_file("law_school.csv.gz")
    data = fairopt.datasets.load("law", data_dir=str(path.parent))
    train, _ = data.split(test_size=0.3, seed=0)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        clf = fairopt.FairClassifier([("di", data.sensitive_names[0], 0.8)]).fit(train)
    assert not [w for w in caught if "near-constant" in str(w.message)]
    y = train.y.numpy()
    accuracy = clf.score(train)
    assert accuracy > max(y.mean(), 1 - y.mean()) + 0.005


def _model_warnings(caught) -> list:
    """The estimator's warnings about the fitted model itself (constant or near-constant), engine ones included."""
    return [w for w in caught if issubclass(w.category, ConstantPredictorWarning)
            or "constant predictor" in str(w.message) or "near-constant" in str(w.message)]


def test_a_failed_fit_gets_one_warning_with_the_engines_finding_at_the_callers_line():
    """Three SQP epochs on 60 rows: the engine finds the training loss not below the best constant's
    (training failed, the bounds cannot force it); the estimator says so once, in its own category, and
    does not also blame the bound; the warning names this file, not a library module."""
    rng = np.random.default_rng(1)
    n = 60
    X = rng.normal(size=(n, 1))
    s = (rng.random(n) < 0.3).astype(float)
    y = (X[:, 0] + 1.5 * (s - 0.5) + 0.7 * rng.normal(size=n) > 0.5).astype(int)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        clf = fairopt.FairClassifier(model="linear", epochs=3, constraints=("disparate_impact", "s", 0.8), seed=0)
        clf.fit(X, y, sensitive_features={"s": s})
    about_model = _model_warnings(caught)
    assert len(about_model) == 1, [str(w.message) for w in about_model]
    warning = about_model[0]
    assert issubclass(warning.category, FairnessWarning)
    if "training failed" in str(warning.message):  # the engine's finding, kept by fairopt.training.train
        assert "Loosen the bound" not in str(warning.message)
        assert "training failed" in clf.engine_info_["constant_predictor_note"]
    assert all(w.filename == __file__ for w in caught if issubclass(w.category, FairnessWarning))


def test_near_constant_advice_does_not_blame_bounds_that_never_acted():
    """A loose bound (DI >= 0.5) that the penalty never paid, on an under-trained model: the advice is that
    of an unconstrained fit, consistent with the inactive-constraint warning of the same fit."""
    rng = np.random.default_rng(1)
    n = 200
    X = rng.normal(size=(n, 2))
    s = (rng.random(n) < 0.5).astype(float)
    y = (X[:, 0] + 0.5 * (s - 0.5) + 0.7 * rng.normal(size=n) > 0.3).astype(int)
    labels, out = y.astype(float), np.full(n, -1.0)  # the rule alone: a constant model
    assert "No bound acted" in poor_fit_message("binary", labels, out, constrained=True, acted=False)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        fairopt.FairClassifier(method="lagrangian", model="linear", epochs=2, seed=0,
                               constraints=("disparate_impact", "s", 0.5)).fit(X, y, sensitive_features={"s": s})
    texts = [str(w.message) for w in caught]
    assert any("inactive constraint" in t for t in texts)
    assert not any("Loosen the bound" in t for t in texts)


def test_boosted_trees_without_a_usable_input_warn_once_through_the_estimator():
    """Every input constant: LightGBM grows no tree; the estimator's one warning about the model gives the
    engine's reason (no column to split on), not the generic advice to train longer."""
    rng = np.random.default_rng(0)
    n = 80
    X = np.full((n, 2), 3.0)
    s, y = rng.integers(0, 2, n), (rng.random(n) < 0.4).astype(int)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        fairopt.FairClassifier(model="gbm", constraints=("disparate_impact", "s", 0.8)).fit(
            X, y, sensitive_features={"s": s})
    about_model = _model_warnings(caught)
    assert len(about_model) == 1 and issubclass(about_model[0].category, DegenerateModelWarning)
    assert "no input column can split" in str(about_model[0].message)
    assert "train longer" not in str(about_model[0].message)


def test_an_unmet_bound_of_a_model_with_dropout_names_its_noise():
    from fairopt.diagnostics import unmet_message

    plain = unmet_message("disparate_impact[s]", 0.002, 0.001, 0, "sqp")
    noisy = unmet_message("disparate_impact[s]", 0.002, 0.001, 0, "sqp", noisy_model=True)
    assert "dropout" not in plain and "dropout" in noisy and "batch_size=1024" in noisy
    assert noisy.startswith(plain)  # the same warning, the noise named after it
    assert unmet_message("disparate_impact[s]", 0.0005, 0.001, 0, "sqp", noisy_model=True) is None
