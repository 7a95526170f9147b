"""SQP reaches the constrained optimum of an independent solver on a small convex problem.

Logistic regression (a linear model) with a linear rate constraint: demographic parity on
the mean logit, ``|mean(out | s=1) - mean(out | s=0)| <= b`` (the ``"linear"`` surrogate),
which is linear in the weights. The same smooth problem is solved by scipy's trust-constr;
the engine runs with its defaults, except that the exact calibration is off (it would
target the HARD rates, a different problem).
"""

from __future__ import annotations

import warnings

import numpy as np
import pandas as pd
import pytest
import torch
from scipy.optimize import LinearConstraint, minimize
from scipy.special import expit

import fairopt
from fairopt.constraints import DemographicParity
from solvers import StochasticSQP


@pytest.fixture(scope="module")
def problem():
    rng = np.random.default_rng(3)
    n = 600
    s = (rng.random(n) < 0.4).astype(int)
    x = rng.normal(size=(n, 3)) + 0.8 * s[:, None] * np.array([1.0, -0.5, 0.0])
    logit = 1.2 * x[:, 0] - 0.7 * x[:, 1] + 0.4 * x[:, 2] + 1.0 * s - 0.3
    y = (rng.random(n) < expit(logit)).astype(int)
    frame = pd.DataFrame({"x0": x[:, 0], "x1": x[:, 1], "x2": x[:, 2], "s": s, "y": y})
    return fairopt.FairData.from_frame(frame, target="y", sensitive=["s"])


def _scipy_optimum(data, bound):
    X = data.X.numpy().astype(np.float64)
    y = data.y.numpy().astype(np.float64)
    s = data.sensitive["s"].numpy()
    n = len(y)
    Xb = np.hstack([X, np.ones((n, 1))])  # weights then bias, as in fairopt.models.linear

    def loss(w):
        e = Xb @ w
        return np.mean(np.logaddexp(0.0, e) - y * e)

    def grad(w):
        return Xb.T @ (expit(Xb @ w) - y) / n

    row = Xb[s == 1].mean(axis=0) - Xb[s == 0].mean(axis=0)  # mean logit difference, linear in w
    res = minimize(loss, np.zeros(Xb.shape[1]), jac=grad, method="trust-constr",
                   constraints=[LinearConstraint(row.reshape(1, -1), -bound, bound)],
                   options={"gtol": 1e-12, "xtol": 1e-14, "maxiter": 5000})
    return res.fun, abs(row @ res.x)


def test_sqp_reaches_the_trust_constr_optimum(problem):
    bound = 0.25
    f_ref, gap_ref = _scipy_optimum(problem, bound)
    assert gap_ref == pytest.approx(bound, abs=1e-6)  # the bound binds at the optimum
    net = fairopt.models.linear(problem.n_features, seed=0)
    constraint = DemographicParity("s", bound=bound, surrogate="linear")
    engine = StochasticSQP(epochs=1000, calibrate_exact=False, tol=2e-4)  # float32 model: ~1e-4 is the floor
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        result = engine.fit(net, problem, loss="bce", constraints=[constraint])
    with torch.no_grad():
        out = net(problem.X).double()
        f = float(torch.nn.functional.binary_cross_entropy_with_logits(out, problem.y.double()))
        s = problem.sensitive["s"]
        gap = float(out[s == 1].mean() - out[s == 0].mean())
    assert f == pytest.approx(f_ref, abs=1e-4), (f, f_ref, result.info["stationarity"])
    assert abs(gap) <= bound + 1e-5
    assert result.converged and result.status == "converged", result.info
    # the KKT residuals are reported and agree with the closing history record
    assert result.info["stationarity"] == result.history[-1]["kkt"]
    assert result.info["violation"] == result.history[-1]["V_exact"]


def test_default_run_is_feasible_on_the_exact_measure_or_warns(problem):
    """The default engine returns an exactly feasible iterate (hard-label rates), or warns."""
    from fairopt.constraints import DisparateImpact
    from solvers.outcome import BoundWarning

    net = fairopt.models.linear(problem.n_features, seed=0)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = StochasticSQP(epochs=300).fit(net, problem, loss="bce", constraints=[DisparateImpact("s", 0.9)])
    with torch.no_grad():
        positive = (net(problem.X) > 0).double()
    s = problem.sensitive["s"]
    rates = [float(positive[s == g].mean()) for g in (0, 1)]
    di = min(rates[0] / rates[1], rates[1] / rates[0])
    unmet = [w for w in caught if issubclass(w.category, BoundWarning)]
    # converged agrees with a recomputation from the model
    assert result.info["feasible"] == (di >= 0.9 - 1e-9) == (not unmet)
    assert di >= 0.9, (di, result.info)
    assert result.history[-1]["c_exact"] == result.info["c_exact"]
