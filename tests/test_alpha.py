"""``alpha``: the estimators' L2 penalty ``alpha / 2 * ||W||^2`` on the weights (not the intercept).

References are independent of fairopt: scikit-learn's ``LogisticRegression(C=1 / (alpha n))``
(objective ``||w||^2 / 2 + C sum_i l_i``, the same minimiser as ``mean l + alpha / 2 ||w||^2``)
and ``Ridge(alpha=n alpha / 2)`` on the regressor's standardised target, both fitted on the
estimator's own encoded inputs; and for the German-credit criterion scikit-learn's default
``LogisticRegression()`` on the same encoded inputs.
"""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
from sklearn.linear_model import LogisticRegression, Ridge
from sklearn.model_selection import train_test_split

from fairopt import FairClassifier, FairRegressor
from fairopt.inputs import encoded_inputs
from fairopt.training import ALPHA_DEFAULTS
from solvers.losses import L2Regularised, linear_weights, value_and_gradient

GERMAN = Path(__file__).parent / "data" / "german_credit.csv.gz"


def _classification(n: int = 400, seed: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, 5)) * np.array([1.0, 2.0, 0.5, 1.0, 3.0]) + 1.0
    y = (X @ np.array([1.0, -0.5, 1.0, 0.0, 0.3]) - 1.3 + rng.logistic(size=n) > 0).astype(int)
    s = (rng.random(n) < 0.5).astype(int)
    return X, y, s


def _quiet_fit(est, X, y, **kw):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return est.fit(X, y, **kw)


def test_regulariser_value_and_gradient_are_those_of_the_formula():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.Tanh(), torch.nn.Linear(4, 1))
    weights = linear_weights(model)
    assert [tuple(w.shape) for w in weights] == [(4, 3), (1, 4)]  # matrices only, no bias
    loss = L2Regularised("mse", weights, alpha=0.3)
    batch = type("B", (), {"y": torch.zeros(5)})()
    out = torch.ones(5)
    expected = 1.0 + 0.15 * sum(float((w ** 2).sum()) for w in weights)
    assert float(loss(out, batch)) == pytest.approx(expected, rel=1e-6)
    f, df = value_and_gradient(loss, out, batch)
    assert float(f) == pytest.approx(expected, rel=1e-6)
    assert torch.allclose(df, torch.full((5,), 2.0 / 5))  # the penalty has no gradient in the outputs
    params = list(model.parameters())
    flat = loss.gradient(params)
    pieces = torch.split(flat, [p.numel() for p in params])
    for p, g in zip(params, pieces):
        want = 0.3 * p.detach().reshape(-1) if p.dim() == 2 else torch.zeros(p.numel())
        assert torch.allclose(g, want)
    with pytest.raises(ValueError, match="alpha"):
        L2Regularised("mse", weights, alpha=-1.0)


def test_alpha_zero_is_the_unregularised_fit():
    """alpha=0 trains the plain mean loss: the same model as a tiny penalty's limit, and the
    linear fit of a separable-free problem reaches the unpenalised maximum likelihood."""
    X, y, _ = _classification()
    est = _quiet_fit(FairClassifier(alpha=0.0, epochs=3000), X, y)
    Xe = encoded_inputs(X, est.preprocessor_)
    ref = LogisticRegression(C=np.inf, tol=1e-10, max_iter=10000).fit(Xe, y)
    assert np.abs(est.coef_ - ref.coef_).max() < 2e-2
    assert abs(est.intercept_[0] - ref.intercept_[0]) < 2e-2


@pytest.mark.parametrize("method", ["sqp", "penalty", "lagrangian"])
def test_linear_fit_matches_logistic_regression(method):
    X, y, _ = _classification()
    alpha = 0.05
    est = _quiet_fit(FairClassifier(alpha=alpha, method=method, epochs=3000), X, y)
    Xe = encoded_inputs(X, est.preprocessor_)
    ref = LogisticRegression(C=1.0 / (alpha * len(y)), tol=1e-10, max_iter=10000).fit(Xe, y)
    assert np.abs(est.coef_ - ref.coef_).max() < 2e-2
    assert abs(est.intercept_[0] - ref.intercept_[0]) < 2e-2
    # and it is not the unpenalised fit: the penalty moved the coefficients by far more than the tolerance
    free = LogisticRegression(C=np.inf, tol=1e-10, max_iter=10000).fit(Xe, y)
    assert np.abs(free.coef_ - ref.coef_).max() > 0.1


def test_regressor_matches_ridge_on_the_standardised_target():
    rng = np.random.default_rng(1)
    X = rng.normal(size=(300, 4))
    y = 50.0 + 20.0 * (X @ np.array([1.0, -1.0, 0.5, 0.0])) + rng.normal(scale=10.0, size=300)
    alpha = 0.1
    est = _quiet_fit(FairRegressor(alpha=alpha), X, y)
    Xe = encoded_inputs(X, est.preprocessor_)
    sd = y.std()
    ref = Ridge(alpha=len(y) * alpha / 2).fit(Xe, (y - y.mean()) / sd)
    assert np.abs(est.coef_ - sd * ref.coef_).max() < 2e-2 * sd


@pytest.mark.parametrize("method", ["sqp", "penalty", "lagrangian", "moving_targets"])
def test_alpha_shrinks_the_weights(method):
    X, y, s = _classification(seed=2)
    # short runs: the first-order engines' weights settle within 300 epochs here; Moving Targets
    # with its learner's default 200 epochs and 2 master iterations
    options = {"sqp": {}, "penalty": {"epochs": 300}, "lagrangian": {"epochs": 300},
               "moving_targets": {"engine_params": {"iterations": 2}}}[method]
    norms = []
    for alpha in (0.0, 0.03, 0.3):
        est = FairClassifier(constraints=[("disparate_impact", "s", 0.8)], method=method, alpha=alpha, **options)
        _quiet_fit(est, X, y, sensitive_features=s)
        norms.append(float(np.linalg.norm(est.coef_)))
    assert norms[0] > norms[1] * 1.05 > norms[2] * 1.05 * 1.05


def test_alpha_validation_and_defaults():
    X, y, _ = _classification(n=60)
    with pytest.raises(ValueError, match="alpha"):
        FairClassifier(alpha=-0.1).fit(X, y)
    assert FairClassifier().alpha_value() == ALPHA_DEFAULTS["binary"] > 0
    assert FairRegressor().alpha_value() == ALPHA_DEFAULTS["regression"]
    assert FairClassifier(alpha=0.2).get_params()["alpha"] == 0.2


@pytest.mark.skipif(not GERMAN.exists(), reason="tests/data/german_credit.csv.gz absent")
def test_german_credit_default_is_within_half_a_point_of_scikit_learn():
    """Issue 31: German credit, 70/30 stratified splits (seeds 0-2: one split's 300 test rows
    move the accuracy by 0.33 points a row), the default FairClassifier under DI >= 0.8 (sex,
    from personal_status) against LogisticRegression() on the same encoded inputs, mean test
    accuracy over the splits."""
    frame = pd.read_csv(GERMAN)
    y = (frame.pop("credit") == 1).astype(int).to_numpy()  # 1: good credit, the favourable outcome
    sex = np.where(frame["personal_status"].isin(["A92", "A95"]), "female", "male")
    ours, theirs = [], []
    for seed in range(3):
        X_tr, X_te, y_tr, y_te, s_tr, _ = train_test_split(frame, y, sex, test_size=0.3, stratify=y,
                                                           random_state=seed)
        est = FairClassifier(constraints=[("disparate_impact", "sex", 0.8)], pos_label=1)
        _quiet_fit(est, X_tr, y_tr, sensitive_features=s_tr)
        ref = LogisticRegression(max_iter=10000).fit(
            encoded_inputs(X_tr.to_numpy(dtype=object), est.preprocessor_), y_tr)
        theirs.append(ref.score(encoded_inputs(X_te.to_numpy(dtype=object), est.preprocessor_), y_te))
        ours.append(est.score(X_te, y_te))
        assert est.train_violation_ <= 1e-3
    assert np.mean(ours) >= np.mean(theirs) - 0.005, (ours, theirs)
