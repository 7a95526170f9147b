"""FairRegressor on targets in large units: every method fits, bounds stay in y's units,
predictions come back in y's units, and a broken fit is reported (FairnessWarning)."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch
from sklearn.linear_model import Ridge
from sklearn.metrics import r2_score

from fairopt import FairRegressor, FairnessWarning
from fairopt.constraints import Covariance
from fairopt.diagnostics import poor_fit_message
from fairopt.learners import OutputScale, TorchLearner, scaled_output, target_statistics
from solvers.losses import scaled_mse_loss

METHODS = ("sqp", "penalty", "lagrangian", "moving_targets")
FAST = {"moving_targets": {"iterations": 1}}  # one master step is enough for a fit check


@pytest.fixture(scope="module")
def problem():
    """y with mean ~600 and sd ~600, linear in X plus noise; a binary s correlated with y."""
    rng = np.random.default_rng(0)
    n, p = 300, 5
    X = rng.normal(size=(n, p))
    s = (X[:, 0] + 0.5 * rng.normal(size=n) > 0).astype(float)
    signal = X @ np.array([1.0, -0.7, 0.5, 0.3, 0.0]) + 0.8 * s
    y = 600.0 + 600.0 * (signal + 0.5 * rng.normal(size=n)) / np.std(signal + 0.5 * rng.normal(size=n))
    return X, y, s


def _fit(method, X, y, s=None, constraints=None, **kw):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return FairRegressor(constraints=constraints, method=method, engine_params=FAST.get(method), **kw).fit(
            X, y, sensitive_features=None if s is None else {"s": s})


@pytest.mark.parametrize("method", METHODS)
def test_unconstrained_fit_matches_ridge_in_y_units(problem, method):
    X, y, _ = problem
    assert 400 < y.mean() < 800 and 450 < y.std() < 750
    ridge = r2_score(y, Ridge(alpha=1.0).fit(X, y).predict(X))
    if method == "lagrangian":  # LagrangianDual needs a constraint: one that never binds
        est = _fit(method, X, y, s=problem[2], constraints=[("covariance", "s", 1e9)])
    else:
        est = _fit(method, X, y)
    pred = est.predict(X)
    assert r2_score(y, pred) >= ridge - 0.01
    # predictions in y's units; the model ends in the output scaling by the training sd and mean
    assert abs(pred.mean() - y.mean()) < 0.05 * y.std()
    scale = est.model_[-1]
    assert isinstance(scale, OutputScale)
    # (Moving Targets: the statistics of its last training targets, close to y's)
    rel = 0.1 if method == "moving_targets" else 1e-5
    assert float(scale.shift) == pytest.approx(y.mean(), rel=rel)
    assert float(scale.scale) == pytest.approx(y.std(), rel=rel)


@pytest.mark.parametrize("method", ["sqp", "lagrangian", "penalty"])
def test_covariance_bound_is_in_y_units(problem, method):
    X, y, s = problem
    free = float(np.mean((s - s.mean()) * y))
    bound = 0.3 * abs(free)  # in units of y (s is 0/1): tens, not a standardised number
    assert bound > 10
    extra = {"engine_params": {"weight": 1e-2}} if method == "penalty" else {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        est = FairRegressor(constraints=[("covariance", "s", bound)], method=method, **extra).fit(
            X, y, sensitive_features={"s": s})
    pred = est.predict(X)
    realised = abs(float(np.mean((s - s.mean()) * pred)))  # the exact measure, on the predictions in y's units
    # SQP meets hard bounds; the first-order methods approach them from outside (a few %)
    assert realised <= bound * (1.01 if method == "sqp" else 1.05)
    # the bound binds where it should: read in y's units, not standardised ones (a standardised
    # reading would leave the model unconstrained, or force the covariance to about 0)
    assert realised >= 0.5 * bound and realised < 0.5 * abs(free)
    assert r2_score(y, pred) > 0.3
    assert float(est.constraints_[0].upper.reshape(-1)[0]) == pytest.approx(bound)
    c = Covariance("s", bound)
    assert c.bound == pytest.approx(bound)


def test_poor_fit_warning_fires_on_a_broken_fit_only(problem):
    X, y, _ = problem
    shifted = y + 5000.0  # a broken fit: one tiny step from a model that predicts around 0
    bad = FairRegressor(method="penalty", epochs=1, lr=1e-8, model=lambda p: torch.nn.Sequential(
        torch.nn.Linear(p, 1), torch.nn.Flatten(0)))
    with pytest.warns(FairnessWarning, match=r"training R2 = .* < -0.05"):
        bad.fit(X, shifted)
    with warnings.catch_warnings():
        warnings.simplefilter("error", FairnessWarning)
        FairRegressor(method="sqp").fit(X, y)


def test_poor_fit_message_rules():
    y = np.array([0.0, 1.0, 2.0, 3.0])
    assert poor_fit_message("regression", y, y) is None
    assert poor_fit_message("regression", y, np.full(4, y.mean())) is None
    assert "R2" in poor_fit_message("regression", y, -y)
    labels = np.array([1.0, 1.0, 1.0, 0.0] * 25)
    assert poor_fit_message("binary", labels, labels - 0.5) is None
    assert "accuracy" in poor_fit_message("binary", labels, -np.ones(labels.size))
    assert "one class is predicted for 100.00%" in poor_fit_message("binary", labels, np.ones(labels.size))


def test_scaled_loss_is_the_standardised_mse():
    y = torch.tensor([100.0, 700.0, 1300.0])
    mean, sd = target_statistics(y.numpy())
    net = torch.nn.Sequential(torch.nn.Linear(1, 1), torch.nn.Flatten(0))
    model = scaled_output(net, sd, mean)
    x = torch.tensor([[0.1], [0.2], [0.3]])

    class Batch:
        pass

    batch = Batch()
    batch.y = y
    z = net(x)
    expected = torch.mean((z - (y - mean) / sd) ** 2)
    assert float(scaled_mse_loss(sd)(model(x), batch)) == pytest.approx(float(expected), rel=1e-5)
    assert target_statistics(np.ones(5)) == (1.0, 1.0)


def test_torch_learner_uses_the_same_scaling():
    rng = np.random.default_rng(1)
    X = rng.normal(size=(200, 3)).astype(np.float32)
    y = 3000.0 + 800.0 * (X @ np.array([1.0, 0.5, -0.5]))
    learner = TorchLearner(lambda p: torch.nn.Sequential(torch.nn.Linear(p, 1), torch.nn.Flatten(0)),
                           task="regression", epochs=100, batch_size=50, lr=1e-2).fit(X, y)
    assert isinstance(learner.module_[-1], OutputScale)
    assert r2_score(y, learner.predict(X)) > 0.95
