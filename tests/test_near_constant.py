"""The useless-model warning (issue 31, point 5): one rule, solvers.outcome.near_constant, for
the estimators' diagnostics and the SQP engine: training accuracy not above the majority-class
rate by two binomial standard errors, or one class on (almost) every row."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest

import fairopt
from fairopt.diagnostics import poor_fit_message
from fairopt.exceptions import DegenerateModelWarning, FairnessWarning
from solvers.outcome import (NEAR_CONSTANT_SHARE, NEAR_CONSTANT_Z, ConstantPredictorWarning, NearConstantWarning,
                             near_constant, warn_if_constant)
from conftest import require_shared_file


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
