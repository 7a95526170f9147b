"""FairRegressor(method="lagrangian") reaches the constrained least-squares optimum (issue 31).

Under GeDI degree 1 on a binary sensitive attribute ``s`` the constraint of a linear model
``out = X w + b`` is linear in ``w``: the slope of ``out`` on ``s``,
``a'w = cov(X w, s) / var(s)``, bounded by ``|a'w| <= q``. The reference optimum is computed
here with numpy, independently of fairopt: least squares on the centred data; if the OLS
coefficients violate the bound, the projection ``w = w_ols - G^-1 a (a'w_ols - sign q) / (a'G^-1 a)``
(``G = X_c'X_c``), the closed-form minimiser with one active linear constraint. The bound is
relative (``0.2 x`` the slope of ``y``), so the scale of ``s`` cancels.
"""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import pytest
from sklearn.metrics import r2_score

import fairopt
from fairopt import FairRegressor

DATA_DIR = Path(__file__).resolve().parents[1] / ".." / "shared" / "data"
GEDI = ("gedi", "s", 0.2, {"relative": True})


def slope(values: np.ndarray, s: np.ndarray) -> float:
    z = s - s.mean()
    return float(np.dot(z, values - values.mean()) / np.dot(z, z))


def constrained_least_squares(X: np.ndarray, y: np.ndarray, s: np.ndarray, fraction: float) -> np.ndarray:
    """Predictions of the least-squares linear model with ``|slope on s| <= fraction |slope of y|``."""
    Xc, yc = X - X.mean(0), y - y.mean()
    w = np.linalg.lstsq(Xc, yc, rcond=None)[0]
    z = s - s.mean()
    a = Xc.T @ z / np.dot(z, z)
    q = fraction * abs(slope(y, s))
    value = float(a @ w)
    if abs(value) > q:
        g_a = np.linalg.lstsq(Xc.T @ Xc, a, rcond=None)[0]
        w = w - g_a * (value - np.sign(value) * q) / float(a @ g_a)
    return Xc @ w + y.mean()


def fit_lagrangian(X, y, s, name: str = "s") -> FairRegressor:
    est = FairRegressor(constraints=[(GEDI[0], name, *GEDI[2:])], method="lagrangian")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return est.fit(X, y, sensitive_features={name: s})


def test_synthetic_reaches_the_closed_form_optimum():
    rng = np.random.default_rng(0)
    n = 800
    s = (rng.random(n) < 0.4).astype(float)
    latent = rng.normal(size=(n, 3))
    X = np.column_stack([latent[:, 0] + 1.5 * s, latent[:, 0] + 0.3 * latent[:, 1], latent[:, 1] - s,
                         latent[:, 2], latent[:, 2] + 0.5 * latent[:, 0] + 0.8 * s, rng.normal(size=n)])
    y = 300.0 + 100.0 * (X @ np.array([1.0, 0.5, -0.7, 0.3, 0.8, 0.0])) + rng.normal(scale=80.0, size=n)
    optimum = constrained_least_squares(X, y, s, 0.2)
    ols = (X - X.mean(0)) @ np.linalg.lstsq(X - X.mean(0), y - y.mean(), rcond=None)[0]
    assert abs(slope(ols, s)) > 0.3 * abs(slope(y, s))  # the bound binds
    assert r2_score(y, optimum) < r2_score(y, ols + y.mean()) - 0.02
    est = fit_lagrangian(X, y, s)
    pred = est.predict(X)
    assert r2_score(y, pred) >= r2_score(y, optimum) - 0.005
    assert abs(slope(pred, s)) <= 0.2 * abs(slope(y, s)) * (1 + 1e-3)


@pytest.mark.skipif(not (DATA_DIR / "communities.csv.gz").exists(), reason="shared data absent")
def test_communities_reaches_the_closed_form_optimum():
    data = fairopt.datasets.load("communities", data_dir=DATA_DIR)
    train, _ = data.split(test_size=0.3, seed=0)
    X, y = train.X.double().numpy(), train.y.double().numpy()
    s = train.sensitive["race"].double().numpy()
    optimum = r2_score(y, constrained_least_squares(X, y, s, 0.2))
    est = FairRegressor(constraints=[("gedi", "race", 0.2, {"relative": True})], method="lagrangian")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        est.fit(train)
    pred = est.predict(train)
    assert r2_score(y, pred) >= optimum - 0.005
    assert abs(slope(pred, s)) <= 0.2 * abs(slope(y, s)) * (1 + 1e-3)
