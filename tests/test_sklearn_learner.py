"""Tests of ``model=<scikit-learn estimator>`` with ``method="moving_targets"`` (fairopt.sklearn_learner)
and of Moving Targets' default master (the count search) against HiGHS.

References: the engine run directly (solvers.moving_targets.MovingTargets on the estimator's own
training FairData, with a clone of the same learner), the scikit-learn estimator's own
``predict``, and HiGHS proving optimality of the first master.
"""

from __future__ import annotations

import pickle
import warnings

import numpy as np
import pytest
from sklearn.base import clone
from sklearn.ensemble import RandomForestClassifier
from sklearn.linear_model import LinearRegression, LogisticRegression
from sklearn.tree import DecisionTreeClassifier

from fairopt.constraints import DisparateImpact
from fairopt.estimators import FairClassifier, FairRegressor
from fairopt.exceptions import FairnessWarning
from fairopt.measures import disparate_impact
from fairopt.models import linear
from fairopt.persistence.writing import save
from fairopt.sklearn_learner import FittedEstimator, is_sklearn_model, routes_missing_values
from solvers.moving_targets import MovingTargets
from solvers.problem import LinearEncoding
from solvers.projection import project_targets


def make_arrays(n: int, seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Inputs that carry the attribute (column 0 shifted by s) and a target that depends on them."""
    rng = np.random.default_rng(seed)
    s = (rng.random(n) < 0.4).astype(int)
    X = rng.normal(size=(n, 3))
    X[:, 0] += 1.5 * s
    y = (X[:, 0] + X[:, 1] + 0.5 * rng.normal(size=n) > 0.8).astype(int)
    return X, y, s


def fit_quietly(estimator, *args, **kwargs):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        estimator.fit(*args, **kwargs)
    return [w for w in caught if issubclass(w.category, FairnessWarning)]


def test_classifier_matches_the_engine_and_meets_or_warns():
    X, y, s = make_arrays(600, 0)
    learner = LogisticRegression(max_iter=500)
    clf = FairClassifier([("disparate_impact", "s", 0.8)], method="moving_targets", model=learner,
                         sensitive_names="s", engine_params={"iterations": 4})
    warned = fit_quietly(clf, X, y, sensitive_features=s)
    assert not hasattr(learner, "coef_")  # the given estimator is cloned, never fitted
    assert isinstance(clf.model_, FittedEstimator) and clf.model_.estimator is not learner
    # the same engine on the estimator's own training data, with another clone
    data = clf._training_data(X, y, s, None)[0]
    direct = MovingTargets(iterations=4).fit(clone(learner), data, constraints=[DisparateImpact("s", 0.8)])
    encoded = data.X.numpy()
    np.testing.assert_array_equal(clf.predict(X), direct.model.predict(encoded))
    # out > 0 exactly where the fitted estimator predicts class 1
    np.testing.assert_array_equal(clf.decision_function(X) > 0, clf.model_.estimator.predict(encoded) == 1)
    di = disparate_impact(clf.predict(X), s)
    assert clf.converged_ == (di >= 0.8 - 1e-9)
    assert di >= 0.8 - 1e-9 or warned  # the bound on the training rows, or a warning
    assert disparate_impact(LogisticRegression(max_iter=500).fit(X, y).predict(X), s) < 0.8  # the bound binds


def test_tree_learner_clone_and_pickle(tmp_path):
    X, y, s = make_arrays(400, 1)
    clf = FairClassifier([("disparate_impact", "s", 0.8)], method="moving_targets",
                         model=DecisionTreeClassifier(max_depth=None), sensitive_names="s",
                         engine_params={"iterations": 3})
    fit_quietly(clf, X, y, sensitive_features=s)
    # a deep tree memorises its targets: the returned model meets the bound on the training rows
    assert clf.converged_ and disparate_impact(clf.predict(X), s) >= 0.8
    assert [r["master_backend"] for r in clf.history_.records][1:] == ["topk"] * 3
    twin = clone(clf)
    assert twin.model.get_params()["max_depth"] is None and not hasattr(twin, "model_")
    assert clone(clf).set_params(model__max_depth=3).model.max_depth == 3
    restored = pickle.loads(pickle.dumps(clf))
    np.testing.assert_array_equal(restored.predict(X), clf.predict(X))
    with pytest.raises(ValueError, match="pickle"):  # fairopt.save stores torch state dicts only
        save(clf, tmp_path / "model.pt")


def test_probability_only_classifier_outputs_are_logits():
    X, y, s = make_arrays(300, 2)
    forest = RandomForestClassifier(n_estimators=5, random_state=0).fit(X.astype(np.float32), y)
    assert not hasattr(forest, "decision_function")
    module = FittedEstimator(forest, "binary")
    import torch

    out = module(torch.as_tensor(X)).numpy()
    np.testing.assert_array_equal(out > 0, forest.predict(X.astype(np.float32)) == 1)
    p = forest.predict_proba(X.astype(np.float32))[:, 1]
    inside = (p > 0) & (p < 1)
    np.testing.assert_allclose(out[inside], np.log(p[inside] / (1 - p[inside])), rtol=1e-9)
    assert np.isfinite(out).all()


def test_regressor_with_a_scikit_learn_model():
    rng = np.random.default_rng(3)
    n = 300
    s = (rng.random(n) < 0.5).astype(int)
    X = rng.normal(size=(n, 2)) + s[:, None]
    y = X @ np.array([1.0, 0.5]) + 2.0 * s + 0.1 * rng.normal(size=n)
    reg = FairRegressor([("gedi", "s", 0.05)], method="moving_targets", model=LinearRegression(),
                        sensitive_names="s", engine_params={"iterations": 3})
    fit_quietly(reg, X, y, sensitive_features=s)
    plain = LinearRegression().fit(X, y).predict(X)
    gap = lambda p: abs(p[s == 1].mean() - p[s == 0].mean())  # noqa: E731
    assert gap(reg.predict(X)) < 0.5 * gap(plain)  # the constraint moved the fit towards equal means


@pytest.mark.parametrize("kwargs, match", [
    (dict(method="sqp", model=LogisticRegression()), "moving_targets"),
    (dict(method="moving_targets", model=LinearRegression()), "regressor"),
    (dict(method="moving_targets", model=LogisticRegression(), epochs=10), "epochs"),
])
def test_unsupported_combinations(kwargs, match):
    X, y, s = make_arrays(100, 4)
    with pytest.raises(ValueError, match=match):
        FairClassifier([("disparate_impact", "s", 0.8)], sensitive_names="s", **kwargs).fit(X, y, sensitive_features=s)


class _Untagged:
    """A duck-typed classifier with get_params/fit/predict that does not derive from BaseEstimator (no tags)."""

    def __init__(self, threshold=0.0):
        self.threshold = threshold

    def get_params(self, deep=True):
        return {"threshold": self.threshold}

    def set_params(self, **params):
        self.threshold = params.get("threshold", self.threshold)
        return self

    def fit(self, X, y, sample_weight=None):
        return self

    def predict(self, X):
        return (np.asarray(X)[:, 0] > self.threshold).astype(int)


def test_a_torch_learner_or_an_untagged_estimator_is_a_clear_value_error_or_trains():
    """fairopt.TorchLearner as model= (and any estimator without scikit-learn's tags) raised scikit-learn's
    AttributeError from is_regressor; the learner is refused with advice, an untagged clonable one trains."""
    from fairopt.learners import TorchLearner

    X, y, s = make_arrays(200, 5)
    learner = TorchLearner(lambda p: linear(p), epochs=2)
    with pytest.raises(ValueError, match=r"model: a fairopt.TorchLearner is the learner method='moving_targets'"):
        FairClassifier([("disparate_impact", "s", 0.8)], method="moving_targets", model=learner,
                       sensitive_names="s").fit(X, y, sensitive_features=s)
    clf = FairClassifier([("disparate_impact", "s", 0.8)], method="moving_targets", model=_Untagged(),
                         sensitive_names="s", engine_params={"iterations": 2})
    fit_quietly(clf, X, y, sensitive_features=s)
    assert set(np.unique(clf.predict(X))) <= {0, 1}


def test_is_sklearn_model():
    assert is_sklearn_model(LogisticRegression())
    assert not is_sklearn_model(LogisticRegression) and not is_sklearn_model("linear")
    assert not is_sklearn_model(lambda p: None)


def test_first_master_is_optimal():
    """Moving Targets' default master (the count search) reaches HiGHS' optimal cost on the
    pretrained learner's predictions."""
    X, y, s = make_arrays(500, 5)
    clf = FairClassifier([("disparate_impact", "s", 0.8)], method="moving_targets", model=LogisticRegression(),
                         sensitive_names="s", engine_params={"iterations": 1})
    fit_quietly(clf, X, y, sensitive_features=s)
    data = clf._training_data(X, y, s, None)[0]
    encoded, labels = data.X.numpy().astype(np.float32), data.y.numpy().astype(float)
    predictions = LogisticRegression().fit(encoded, labels.astype(int)).predict(encoded).astype(float)
    constraint = DisparateImpact("s", 0.8)
    constraint.setup(data)
    encodings = [constraint.target_encoding(data), LinearEncoding("cb", np.ones((1, 500)), [1.0], [499.0])]
    exact = project_targets([predictions, labels], weights=[1.0, 1.0], encodings=encodings, loss="hamming",
                            binary=True, backend="highs", mip_gap=0.0)
    record = clf.history_.records[1]
    assert record["master_backend"] == "topk"
    assert abs(record["master_objective"] - exact.objective) <= 1e-9


def test_a_learner_that_takes_missing_values_gets_them():
    """A learner with scikit-learn's ``allow_nan`` tag (HistGradientBoosting) trains and predicts on rows
    with missing inputs, as the learner alone does; one without it (LogisticRegression) is refused
    before training with the column named."""
    from sklearn.ensemble import HistGradientBoostingClassifier

    X, y, s = make_arrays(800, 2)
    X[np.random.default_rng(3).random(X.shape) < 0.2] = np.nan
    booster = HistGradientBoostingClassifier(max_iter=20, random_state=0)
    assert routes_missing_values(booster) and not routes_missing_values(LogisticRegression())
    clf = FairClassifier(method="moving_targets", model=booster).fit(X, y, sensitive_features=s)
    assert clf.__sklearn_tags__().input_tags.allow_nan
    alone = clone(booster).fit(X, y)  # unconstrained: Moving Targets' learner on the rows as they are
    assert (clf.predict(X) == alone.predict(X)).mean() > 0.95
    with pytest.raises(ValueError, match=r"Input X contains NaN: 'column 0'"):
        FairClassifier(("disparate_impact", "s", 0.8), method="moving_targets",
                       model=LogisticRegression()).fit(X, y, sensitive_features=s)
