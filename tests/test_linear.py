"""Tests of fairopt.linear: FRRM, FGRRM, NCLM, ZLM, ZLRM ([FR] Scutari, Panero, Proissl).

Every estimate is checked against an independent reference: the Frisch-Waugh-Lovell OLS
coefficients (sklearn), the full penalised normal equations of [FR] eq (10), the
closed-form projection that solves NCLM's problem (6) in whitened coordinates, SLSQP on the
non-convex problem (6), sklearn's unpenalised logistic regression, scipy minimisation of
the penalised deviance, Clarabel's exact QP, and scipy's trust-constr on the constrained
logistic likelihood.
"""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest
from scipy.optimize import LinearConstraint, minimize
from scipy.special import expit
from sklearn.base import clone
from sklearn.exceptions import NotFittedError
from sklearn.linear_model import LinearRegression, LogisticRegression

from fairopt.exceptions import FairnessWarning
from fairopt.linear import FGRRM, FRRM, NCLM, ZLM, ZLRM, deviance_ratio, r2_sensitive
from solvers import StochasticSQP

R_GRID = [0.0, 0.001, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5]


# ----------------------------------------------------------------------------- data


def _correlated_normal(n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """[FR] Example 1: (X1, X2, X3, S1, S2, S3) ~ N(0, Sigma), unit variances, correlations 0.3."""
    sigma = np.full((6, 6), 0.3)
    np.fill_diagonal(sigma, 1.0)
    Z = np.random.default_rng(seed).multivariate_normal(np.zeros(6), sigma, size=n)
    return Z[:, :3], Z[:, 3:]


@pytest.fixture(scope="module")
def example1():
    """[FR] Example 1: y = 2 X1 + 3 X2 + 4 X3 + 5 S1 + 6 S2 + 7 S3 + N(0, 100)."""
    X, S = _correlated_normal(2000, seed=1)
    noise = np.random.default_rng(2).normal(0.0, 10.0, size=2000)
    y = X @ [2.0, 3.0, 4.0] + S @ [5.0, 6.0, 7.0] + noise
    return X, S, y


@pytest.fixture(scope="module")
def example2():
    """[FR] Example 2: logistic with eta = 1 + 0.5 X1 + 0.6 X2 + 0.7 X3 + 0.8 S1 + 0.9 S2 + S3."""
    X, S = _correlated_normal(2000, seed=3)
    eta = 1.0 + X @ [0.5, 0.6, 0.7] + S @ [0.8, 0.9, 1.0]
    y = (np.random.default_rng(4).random(2000) < expit(eta)).astype(float)
    return X, S, y


@pytest.fixture(scope="module")
def orthonormal_example():
    """Example 1's X with S replaced by exactly independent unit-variance columns
    (centred, S_c'S_c = n I), the premise of [FR] sec 3.2."""
    n = 1500
    X, _ = _correlated_normal(n, seed=5)
    rng = np.random.default_rng(6)
    raw = rng.normal(size=(n, 3))
    q, _ = np.linalg.qr(raw - raw.mean(axis=0))
    S = math.sqrt(n) * q + np.array([1.0, -2.0, 0.5])  # any means: only the centred S matters
    y = X @ [2.0, 3.0, 4.0] + S @ [5.0, 6.0, 7.0] + rng.normal(0.0, 10.0, size=n)
    return X, S, y


def _fit(model, *args, **kwargs):
    """Fit while ignoring the expected 'inactive bound' FairnessWarning."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FairnessWarning)
        return model.fit(*args, **kwargs)


def _direct_r2_s(model, X, S) -> float:
    """VAR(S alpha) / VAR(y_hat) from the predictions (training rows, where S and U are orthogonal)."""
    s_part = S @ model.alpha_
    y_hat = model.predict(X, sensitive=S)
    return float(np.var(s_part) / np.var(y_hat))


# ----------------------------------------------------------------------------- FRRM


def test_frrm_beta_is_ols_on_u_and_does_not_change_with_r(example1):
    X, S, y = example1
    # Frisch-Waugh-Lovell: the OLS coefficients of y on U are those of X in y ~ 1 + X + S
    reference = LinearRegression().fit(np.hstack([X, S]), y).coef_[:3]
    betas = np.array([_fit(FRRM(r=r), X, y, sensitive=S).beta_ for r in R_GRID + [1.0]])
    np.testing.assert_allclose(betas, np.broadcast_to(reference, betas.shape), rtol=1e-10, atol=1e-10)


def test_frrm_alpha_shrinks_to_zero_as_r_goes_to_zero(example1):
    X, S, y = example1
    ols_alpha = LinearRegression().fit(S, y).coef_  # S is orthogonal to U: alpha_OLS is the regression on S alone
    grid = [1e-8, 1e-6, 1e-4, 1e-2, 0.1, 0.3, 1.0]
    norms = [np.linalg.norm(_fit(FRRM(r=r), X, y, sensitive=S).alpha_) for r in grid]
    assert all(a < b for a, b in zip(norms, norms[1:]))
    assert norms[0] < 1e-3 * np.linalg.norm(ols_alpha)
    np.testing.assert_allclose(_fit(FRRM(r=1.0), X, y, sensitive=S).alpha_, ols_alpha, rtol=1e-9)
    zero = FRRM(r=0.0).fit(X, y, sensitive=S)
    assert zero.lambda_ == math.inf and np.all(zero.alpha_ == 0.0)
    # r = 0: predictions uncorrelated with every sensitive attribute on the training rows
    cov = (S - S.mean(axis=0)).T @ zero.predict(X, sensitive=S) / len(y)
    np.testing.assert_allclose(cov, 0.0, atol=1e-10 * np.std(y))


def test_frrm_realised_r2_s_equals_r_when_active(example1):
    X, S, y = example1
    ols = FRRM(r=1.0).fit(X, y, sensitive=S)
    assert 0.5 < ols.r2_sensitive_ols_ < 1.0  # Example 1: S explains most of the fitted variance
    for r in [0.001, 0.01, 0.05, 0.1, 0.2, 0.5]:
        model = FRRM(r=r).fit(X, y, sensitive=S)
        assert model.active_ and model.method_ == "root"
        assert model.r2_sensitive_ <= r + 1e-12
        assert model.r2_sensitive_ == pytest.approx(r, rel=1e-10)
        assert _direct_r2_s(model, X, S) == pytest.approx(r, rel=1e-9)
        lo, hi = model.lambda_bracket_
        assert lo <= model.lambda_ <= hi


def test_frrm_inactive_bound_returns_ols_and_warns(example1):
    X, S, y = example1
    r_ols = FRRM(r=1.0).fit(X, y, sensitive=S).r2_sensitive_ols_
    r = 0.5 * (r_ols + 1.0)
    with pytest.warns(FairnessWarning, match="inactive"):
        model = FRRM(r=r).fit(X, y, sensitive=S)
    assert not model.active_ and model.lambda_ == 0.0
    assert model.r2_sensitive_ == pytest.approx(r_ols, rel=1e-12) and model.r2_sensitive_ < r
    reference = LinearRegression().fit(np.hstack([X, S]), y)
    np.testing.assert_allclose(model.predict(X, sensitive=S), reference.predict(np.hstack([X, S])), rtol=1e-9, atol=1e-9)


def test_frrm_solves_the_penalised_problem_eq10(example1):
    """alpha_, beta_ solve (10) jointly: ([S_c U]'[S_c U] + diag(lambda I, 0)) theta = [S_c U]' y."""
    X, S, y = example1
    model = FRRM(r=0.05).fit(X, y, sensitive=S)
    U = model.decorrelate(X, S)
    S_c = S - S.mean(axis=0)
    Z = np.hstack([S_c, U])
    penalty = np.diag(np.r_[np.full(3, model.lambda_), np.zeros(3)])
    theta = np.linalg.solve(Z.T @ Z + penalty, Z.T @ (y - y.mean()))
    np.testing.assert_allclose(np.r_[model.alpha_, model.beta_], theta, rtol=1e-9)
    # U is the residual of the auxiliary OLS: uncorrelated with S, mean zero
    np.testing.assert_allclose(S_c.T @ U / len(y), 0.0, atol=1e-10)
    # predictions = intercept + S alpha + U beta, with the intercept for the raw S
    np.testing.assert_allclose(model.predict(X, sensitive=S), model.intercept_ + S @ model.alpha_ + U @ model.beta_)
    assert model.predict(X, sensitive=S).mean() == pytest.approx(y.mean(), abs=1e-9)


def test_r2_sensitive_matches_its_definition(example1):
    """[FR] eq (4) against alpha' VAR(S) alpha / (alpha' VAR(S) alpha + beta' VAR(U) beta) (np.cov)."""
    X, S, y = example1
    model = FRRM(r=0.1).fit(X, y, sensitive=S)
    U = model.decorrelate(X, S)
    a = model.alpha_ @ np.cov(S, rowvar=False) @ model.alpha_
    b = model.beta_ @ np.cov(U, rowvar=False) @ model.beta_
    assert r2_sensitive(model.alpha_, model.beta_, S, U) == pytest.approx(a / (a + b), rel=1e-12)
    assert model.r2_sensitive(X, S) == pytest.approx(a / (a + b), rel=1e-12)
    # on held-out rows eq (4) uses that data's covariances
    X_new, S_new = _correlated_normal(500, seed=9)
    U_new = model.decorrelate(X_new, S_new)
    a = model.alpha_ @ np.cov(S_new, rowvar=False) @ model.alpha_
    b = model.beta_ @ np.cov(U_new, rowvar=False) @ model.beta_
    assert model.r2_sensitive(X_new, S_new) == pytest.approx(a / (a + b), rel=1e-12)


def test_frrm_closed_form_matches_root_finding(orthonormal_example):
    X, S, y = orthonormal_example
    for r in [0.001, 0.01, 0.05, 0.2]:
        closed = FRRM(r=r, method="closed_form").fit(X, y, sensitive=S)
        root = FRRM(r=r, method="root").fit(X, y, sensitive=S)
        auto = FRRM(r=r).fit(X, y, sensitive=S)
        assert closed.method_ == "closed_form" and root.method_ == "root" and auto.method_ == "closed_form"
        assert closed.lambda_ == pytest.approx(root.lambda_, rel=1e-9)
        np.testing.assert_allclose(closed.alpha_, root.alpha_, rtol=1e-9)
        assert closed.r2_sensitive_ == pytest.approx(r, rel=1e-10)
        # eq (13)-(14) by hand (unsquared norm): lambda = ||S'y|| / (c k) - n, alpha = c k S'y / ||S'y||
        n, S_c = len(y), S - S.mean(axis=0)
        cross = S_c.T @ (y - y.mean())
        c = np.std(closed.decorrelate(X, S) @ closed.beta_)
        k = math.sqrt(r / (1 - r))
        assert closed.lambda_ == pytest.approx(np.linalg.norm(cross) / (c * k) - n, rel=1e-12)
        np.testing.assert_allclose(closed.alpha_, c * k * cross / np.linalg.norm(cross), rtol=1e-12)
        # the eigenvalue bracket collapses when all eigenvalues of S_c'S_c are equal
        lo, hi = root.lambda_bracket_
        assert lo == pytest.approx(hi, rel=1e-9)


def test_frrm_closed_form_requires_independent_unit_variance_s(example1):
    X, S, y = example1
    with pytest.raises(ValueError, match="closed_form"):
        FRRM(r=0.05, method="closed_form").fit(X, y, sensitive=S)
    assert FRRM(r=0.05).fit(X, y, sensitive=S).method_ == "root"


# ----------------------------------------------------------------------------- NCLM


def _nclm_projection(X, S, y, r):
    """Independent closed form of problem (6): in whitened coordinates (VAR(S~) = VAR(U~) = I)
    the optimum keeps the directions of the OLS coefficients a, c and projects (|a|, |c|) onto
    the cone |alpha~| <= k |beta~|, k = sqrt(r / (1 - r))."""
    S_c = S - S.mean(axis=0)
    U = (X - X.mean(axis=0)) - S_c @ np.linalg.lstsq(S_c, X - X.mean(axis=0), rcond=None)[0]
    y_c = y - y.mean()

    def whiten(Z):
        values, vectors = np.linalg.eigh(np.cov(Z, rowvar=False, bias=True))
        return vectors / np.sqrt(values)

    Ws, Wu = whiten(S_c), whiten(U)
    a = (S_c @ Ws).T @ y_c / len(y)
    c = (U @ Wu).T @ y_c / len(y)
    na, nc, k = np.linalg.norm(a), np.linalg.norm(c), math.sqrt(r / (1 - r))
    if na > k * nc:
        m = (na * k + nc) / (1 + k * k)
        a, c = a * (m * k / na), c * (m / nc)
    return Ws @ a, Wu @ c


def test_nclm_matches_closed_form_projection(example1):
    X, S, y = example1
    for r in [0.01, 0.05, 0.2, 0.5]:
        model = NCLM(r=r).fit(X, y, sensitive=S)
        alpha, beta = _nclm_projection(X, S, y, r)
        assert model.solver_status_ == "Solved"
        # Clarabel's point (about 1e-6 relative) after the KKT polish: rounding error
        np.testing.assert_allclose(model.alpha_, alpha, rtol=1e-9)
        np.testing.assert_allclose(model.beta_, beta, rtol=1e-9)
        assert model.r2_sensitive_ <= r * (1 + 1e-12)
        assert model.r2_sensitive_ == pytest.approx(r, rel=1e-10)
        assert _direct_r2_s(model, X, S) == pytest.approx(r, rel=1e-9)


def test_nclm_against_slsqp_and_frrm(example1):
    """NCLM solves (6) exactly: no point found by SLSQP on the non-convex problem is better,
    and FRRM (a restriction of (6), beta fixed at OLS) cannot have a lower training error."""
    X, S, y = example1
    r = 0.05
    nclm = NCLM(r=r).fit(X, y, sensitive=S)
    frrm = FRRM(r=r).fit(X, y, sensitive=S)
    U = nclm.decorrelate(X, S)
    S_c, y_c = S - S.mean(axis=0), y - y.mean()
    V_s, V_u = np.cov(S_c, rowvar=False, bias=True), np.cov(U, rowvar=False, bias=True)

    def mse(theta):
        return np.mean((y_c - S_c @ theta[:3] - U @ theta[3:]) ** 2)

    def margin(theta):  # >= 0 iff R^2_S <= r, eq (6)
        return r * theta[3:] @ V_u @ theta[3:] - (1 - r) * theta[:3] @ V_s @ theta[:3]

    best = min(
        (minimize(mse, start, method="SLSQP", constraints=[{"type": "ineq", "fun": margin}],
                  options={"ftol": 1e-14, "maxiter": 1000}) for start in (np.r_[frrm.alpha_, frrm.beta_], np.ones(6))),
        key=lambda res: res.fun if margin(res.x) >= -1e-9 else np.inf,
    )
    nclm_mse = mse(np.r_[nclm.alpha_, nclm.beta_])
    assert nclm_mse <= best.fun * (1 + 1e-7)
    assert nclm_mse <= mse(np.r_[frrm.alpha_, frrm.beta_])
    assert nclm.r2_sensitive_ <= r * (1 + 1e-12)


def test_nclm_limits(example1):
    X, S, y = example1
    zero = NCLM(r=0.0).fit(X, y, sensitive=S)
    frrm_zero = FRRM(r=0.0).fit(X, y, sensitive=S)
    assert zero.solver_status_ == "zero" and np.all(zero.alpha_ == 0.0)
    np.testing.assert_allclose(zero.beta_, frrm_zero.beta_, rtol=1e-10)
    # [FR] sec 5.1: at r = 0 both estimate the same model, also with collinear predictors
    collinear = np.c_[X, X[:, 0] + X[:, 1]]
    predictions = [m(r=0.0).fit(collinear, y, sensitive=S).predict(collinear, sensitive=S) for m in (NCLM, FRRM)]
    np.testing.assert_allclose(predictions[0], predictions[1], rtol=1e-10, atol=1e-10 * np.std(y))
    full = NCLM(r=1.0).fit(X, y, sensitive=S)
    reference = LinearRegression().fit(np.hstack([X, S]), y)
    np.testing.assert_allclose(full.predict(X, sensitive=S), reference.predict(np.hstack([X, S])), rtol=1e-9, atol=1e-9)


# ----------------------------------------------------------------------------- FGRRM


def _binomial_deviance(y, eta):
    p = expit(eta)
    return -2.0 * np.sum(y * np.log(p) + (1 - y) * np.log(1 - p))


def _direct_deviance_ratio(model, X, S, y):
    """[FR] eq (17) from the model's linear predictor: drop S_c alpha, then also U beta."""
    eta = model.decision_function(X, sensitive=S)
    s_part = (S - S.mean(axis=0)) @ model.alpha_
    u_part = model.decorrelate(X, S) @ model.beta_
    d_ab = _binomial_deviance(y, eta)
    d_0b = _binomial_deviance(y, eta - s_part)
    d_00 = _binomial_deviance(y, eta - s_part - u_part)
    return (d_0b - d_ab) / (d_00 - d_ab)


def test_fgrrm_respects_deviance_ratio_bound_example2(example2):
    X, S, y = example2
    unpenalised = _fit(FGRRM(r=1.0), X, y, sensitive=S)
    assert unpenalised.deviance_ratio_unpenalised_ > 0.5
    for r in [0.001, 0.01, 0.05, 0.1, 0.2, 0.5]:
        model = FGRRM(r=r).fit(X, y, sensitive=S)
        assert model.active_ and model.converged_
        direct = _direct_deviance_ratio(model, X, S, y)
        assert direct <= r + 1e-9
        assert direct == pytest.approx(r, rel=1e-7)
        assert model.deviance_ratio_ == pytest.approx(direct, rel=1e-9)
        assert model.deviance_ratio(X, y, S) == pytest.approx(direct, rel=1e-9)
    zero = FGRRM(r=0.0).fit(X, y, sensitive=S)
    assert zero.lambda_ == math.inf and np.all(zero.alpha_ == 0.0) and zero.deviance_ratio_ == 0.0
    # [FR] Example 2: unlike FRRM, the beta rescale with r in a logistic model (fixed scale)
    assert np.linalg.norm(unpenalised.beta_) > 1.1 * np.linalg.norm(zero.beta_)


def test_fgrrm_unpenalised_matches_sklearn_logistic_regression(example2):
    X, S, y = example2
    model = _fit(FGRRM(r=1.0), X, y, sensitive=S)
    U = model.decorrelate(X, S)
    reference = LogisticRegression(C=np.inf, solver="newton-cholesky", tol=1e-12, max_iter=1000)
    reference.fit(np.hstack([S, U]), y)
    np.testing.assert_allclose(np.r_[model.alpha_, model.beta_], reference.coef_[0], rtol=1e-6, atol=1e-8)
    assert model.intercept_ == pytest.approx(reference.intercept_[0], rel=1e-6)
    np.testing.assert_allclose(model.predict_proba(X, sensitive=S), reference.predict_proba(np.hstack([S, U])), atol=1e-8)
    assert model.score(X, y, sensitive=S) == pytest.approx(reference.score(np.hstack([S, U]), y))


def test_fgrrm_penalised_fit_matches_scipy(example2):
    """At the chosen lambda, the coefficients minimise D + lambda ||alpha||^2 ([FR] eq (16))."""
    X, S, y = example2
    model = FGRRM(r=0.2).fit(X, y, sensitive=S)
    Z = np.hstack([np.ones((len(y), 1)), S - S.mean(axis=0), model.decorrelate(X, S)])
    lam = model.lambda_

    def objective(theta):
        eta = Z @ theta
        return 2 * np.sum(np.logaddexp(0, eta) - y * eta) + lam * theta[1:4] @ theta[1:4]

    def gradient(theta):
        grad = -2 * Z.T @ (y - expit(Z @ theta))
        grad[1:4] += 2 * lam * theta[1:4]
        return grad

    res = minimize(objective, np.zeros(7), jac=gradient, method="BFGS", options={"gtol": 1e-9, "maxiter": 10000})
    theta0 = model.intercept_ + S.mean(axis=0) @ model.alpha_
    np.testing.assert_allclose(np.r_[theta0, model.alpha_, model.beta_], res.x, rtol=1e-5, atol=1e-7)


def test_fgrrm_poisson_with_exposure(example1):
    X, S, _ = example1
    rng = np.random.default_rng(11)
    exposure = rng.uniform(0.5, 2.0, size=len(X))
    rate = np.exp(0.2 + X @ [0.2, 0.1, 0.1] + S @ [0.3, 0.2, 0.25])
    y = rng.poisson(exposure * rate).astype(float)
    model = FGRRM(r=0.05, family="poisson").fit(X, y, sensitive=S, exposure=exposure)
    assert model.active_ and model.deviance_ratio_ <= 0.05 + 1e-12
    assert model.deviance_ratio_ == pytest.approx(0.05, rel=1e-7)
    Z = np.hstack([np.ones((len(y), 1)), S - S.mean(axis=0), model.decorrelate(X, S)])
    offset = np.log(exposure)

    def objective(theta):
        eta = Z @ theta + offset
        return 2 * np.sum(np.exp(eta) - y * eta) + model.lambda_ * theta[1:4] @ theta[1:4]

    def gradient(theta):
        grad = -2 * Z.T @ (y - np.exp(Z @ theta + offset))
        grad[1:4] += 2 * model.lambda_ * theta[1:4]
        return grad

    res = minimize(objective, np.zeros(7), jac=gradient, method="BFGS", options={"gtol": 1e-8, "maxiter": 10000})
    theta0 = model.intercept_ + S.mean(axis=0) @ model.alpha_
    np.testing.assert_allclose(np.r_[theta0, model.alpha_, model.beta_], res.x, rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(model.predict(X, sensitive=S, exposure=exposure),
                               exposure * np.exp(model.decision_function(X, sensitive=S)), rtol=1e-12)
    # deviance of the fit, computed directly
    mu = model.predict(X, sensitive=S, exposure=exposure)
    direct = 2 * np.sum(np.where(y > 0, y * np.log(np.where(y > 0, y, 1) / mu), 0) - (y - mu))
    eta = model.decision_function(X, sensitive=S) + offset
    assert direct == pytest.approx(2 * np.sum(np.where(y > 0, y * np.log(np.where(y > 0, y, 1)), 0)
                                              - y * eta - y + np.exp(eta)), rel=1e-12)


def test_gaussian_deviance_ratio_equals_r2_s_only_without_penalty(example1):
    """[FR] sec 4.4 says eq (17) reduces to R^2_S for a Gaussian GLM; with the ridge normal
    equations it equals (||S a||^2 + 2 lambda ||a||^2) / (||S a||^2 + ||U b||^2 + 2 lambda ||a||^2)."""
    X, S, y = example1
    for r in [0.05, 1.0]:
        model = FRRM(r=r).fit(X, y, sensitive=S)
        s_part = (S - S.mean(axis=0)) @ model.alpha_
        u_part = model.decorrelate(X, S) @ model.beta_
        ratio = deviance_ratio(y, y.mean(), s_part, u_part, family="gaussian")
        extra = 2 * model.lambda_ * model.alpha_ @ model.alpha_
        expected = (s_part @ s_part + extra) / (s_part @ s_part + u_part @ u_part + extra)
        assert ratio == pytest.approx(expected, rel=1e-9)
        if r == 1.0:
            assert ratio == pytest.approx(model.r2_sensitive_, rel=1e-9)
        else:
            assert ratio > model.r2_sensitive_ + 0.01


# ----------------------------------------------------------------------------- ZLM / ZLRM


@pytest.fixture(scope="module")
def small_example1(example1):
    X, S, y = example1
    return X[:400], S[:400], y[:400]


def _max_abs_cov(S, eta):
    return float(np.max(np.abs((S - S.mean(axis=0)).T @ eta / len(eta))))


def test_zlm_sqp_matches_exact_qp(small_example1):
    X, S, y = small_example1
    unconstrained = _max_abs_cov(S, LinearRegression().fit(X, y).predict(X))
    engines = [None, StochasticSQP(epochs=60, lr=0.5, hessian_shift=1.0, lr_schedule="paper", tol=1e-7,
                                   seed=1)]  # default and a custom engine
    for bound, engine in zip([0.0, 0.3 * unconstrained], engines):
        sqp = ZLM(bound=bound, engine=engine).fit(X, y, sensitive=S)
        qp = ZLM(bound=bound, solver="qp").fit(X, y, sensitive=S)
        assert sqp.fit_result_.converged and qp.fit_result_ is None
        # at most the epochs, then the closing record (a run stops early at a feasible KKT point)
        assert len(sqp.fit_result_.history) <= (100 if engine is None else 60) + 1
        scale = np.std(y)
        np.testing.assert_allclose(sqp.coef_, qp.coef_, atol=1e-4 * scale)
        assert sqp.intercept_ == pytest.approx(qp.intercept_, abs=1e-4 * scale)
        for model in (sqp, qp):
            assert _max_abs_cov(S, model.predict(X)) <= bound + 1e-6 * scale
            np.testing.assert_allclose(model.covariances_, (S - S.mean(0)).T @ model.predict(X) / len(y), atol=1e-12)
        assert np.max(np.abs(qp.covariances_)) == pytest.approx(bound, abs=1e-8 * scale)  # active
        mse_sqp, mse_qp = np.mean((y - sqp.predict(X)) ** 2), np.mean((y - qp.predict(X)) ** 2)
        assert mse_sqp == pytest.approx(mse_qp, rel=1e-6)


def test_zlm_inactive_bound_is_ols(small_example1):
    X, S, y = small_example1
    reference = LinearRegression().fit(X, y)
    bound = 2 * _max_abs_cov(S, reference.predict(X))
    model = ZLM(bound=bound, solver="qp").fit(X, y, sensitive=S)
    np.testing.assert_allclose(model.coef_, reference.coef_, rtol=1e-7)
    assert model.score(X, y) == pytest.approx(reference.score(X, y), rel=1e-9)


def test_zlrm_meets_covariance_bounds_and_matches_trust_constr(example2):
    X, S, y = example2
    X, S, y = X[:600], S[:600], y[:600]
    bound = 0.05
    model = ZLRM(bound=bound).fit(X, y, sensitive=S)
    eta = model.decision_function(X)
    assert _max_abs_cov(S, eta) <= bound + 1e-6
    assert np.max(np.abs(model.covariances_)) == pytest.approx(bound, rel=1e-4)  # the bound binds
    n = len(y)
    A = np.hstack([np.zeros((3, 1)), (S - S.mean(axis=0)).T @ X / n])

    def loss(w):
        e = w[0] + X @ w[1:]
        return np.mean(np.logaddexp(0, e) - y * e)

    def grad(w):
        residual = expit(w[0] + X @ w[1:]) - y
        return np.r_[residual.mean(), X.T @ residual / n]

    res = minimize(loss, np.zeros(4), jac=grad, method="trust-constr", constraints=[LinearConstraint(A, -bound, bound)],
                   options={"gtol": 1e-12, "xtol": 1e-14, "maxiter": 5000})
    np.testing.assert_allclose(np.r_[model.intercept_, model.coef_], res.x, atol=1e-4)
    assert loss(np.r_[model.intercept_, model.coef_]) == pytest.approx(res.fun, abs=1e-6)
    np.testing.assert_allclose(model.predict_proba(X)[:, 1], expit(eta))
    assert set(np.unique(model.predict(X))) <= {0, 1}


# ----------------------------------------------------------------------------- conventions and validation


@pytest.mark.parametrize("estimator", [FRRM(), NCLM(), FGRRM(), ZLM(), ZLRM()])
def test_scikit_learn_conventions(estimator):
    params = estimator.get_params()
    copy = clone(estimator)
    assert copy.get_params().keys() == params.keys()
    with pytest.raises(NotFittedError):
        estimator.predict(np.zeros((2, 3)), sensitive=np.zeros((2, 3)))


@pytest.mark.parametrize("bad_r", [-0.1, 1.5, float("nan"), "0.1", True])
@pytest.mark.parametrize("cls", [FRRM, NCLM, FGRRM])
def test_r_outside_unit_interval_is_rejected(cls, bad_r, example2):
    X, S, y = example2
    with pytest.raises(ValueError, match="r"):
        cls(r=bad_r).fit(X, y, sensitive=S)


@pytest.mark.parametrize("cls", [FRRM, NCLM, FGRRM, ZLM, ZLRM])
def test_bad_inputs_are_rejected(cls, example2):
    X, S, y = example2
    with pytest.raises(ValueError, match="shape mismatch"):
        cls().fit(X[:-1], y, sensitive=S)
    with pytest.raises(ValueError, match="shape mismatch"):
        cls().fit(X, y, sensitive=S[:-1])
    X_nan = X.copy()
    X_nan[3, 1] = np.nan
    with pytest.raises(ValueError, match="X: contains non-finite"):
        cls().fit(X_nan, y, sensitive=S)
    S_inf = S.copy()
    S_inf[0, 0] = np.inf
    with pytest.raises(ValueError, match="sensitive: contains non-finite"):
        cls().fit(X, y, sensitive=S_inf)
    with pytest.raises(ValueError, match="sensitive"):
        cls().fit(X, y)
    with pytest.raises(ValueError, match="constant"):
        cls().fit(X, y, sensitive=np.c_[S[:, 0], np.ones(len(y))])


def test_prediction_inputs_are_validated(example1):
    X, S, y = example1
    model = FRRM(r=0.1).fit(X, y, sensitive=S)
    with pytest.raises(ValueError, match="X: expected 3 columns"):
        model.predict(X[:, :2], sensitive=S)
    with pytest.raises(ValueError, match="sensitive: expected 3 columns"):
        model.predict(X, sensitive=S[:, :2])
    with pytest.raises(ValueError, match="sensitive"):
        model.predict(X)
    with pytest.raises(ValueError, match="method"):
        FRRM(r=0.1, method="newton").fit(X, y, sensitive=S)


def test_model_specific_arguments_are_validated(example2):
    X, S, y = example2
    with pytest.raises(ValueError, match="family"):
        FGRRM(family="gamma").fit(X, y, sensitive=S)
    with pytest.raises(ValueError, match="y: family='binomial' needs 0/1"):
        FGRRM(r=0.1).fit(X, 2 * y, sensitive=S)
    with pytest.raises(ValueError, match="exposure"):
        FGRRM(r=0.1).fit(X, y, sensitive=S, exposure=np.ones(len(y)))
    with pytest.raises(ValueError, match="exposure: expected values > 0"):
        FGRRM(r=0.1, family="poisson").fit(X, y, sensitive=S, exposure=np.zeros(len(y)))
    with pytest.raises(ValueError, match="bound"):
        ZLM(bound=-1.0).fit(X, y, sensitive=S)
    with pytest.raises(ValueError, match="solver"):
        ZLM(solver="cvxpy").fit(X, y, sensitive=S)
    with pytest.raises(ValueError, match="engine"):
        ZLRM(engine="sqp").fit(X, y, sensitive=S)
    with pytest.raises(ValueError, match="y: expected 0/1"):
        ZLRM(bound=0.1).fit(X, y + 0.5, sensitive=S)


def test_accepts_torch_pandas_and_one_dimensional_sensitive(example1):
    import pandas as pd
    import torch

    X, S, y = example1
    reference = FRRM(r=0.05).fit(X, y, sensitive=S[:, 0])
    model = FRRM(r=0.05).fit(torch.tensor(X), pd.Series(y), sensitive=pd.DataFrame(S[:, :1]))
    np.testing.assert_allclose(model.alpha_, reference.alpha_, rtol=1e-12)
    assert model.alpha_.shape == (1,)


def test_rank_deficient_one_hot_sensitive_attribute(example1):
    """A categorical S one-hot encoded with every level (S_c'S_c singular): FRRM and FGRRM
    still meet the bound exactly; NCLM depends only on the span of S, so dropping a level
    gives the same predictions."""
    X, S, y = example1
    level = np.digitize(S[:, 0], [-0.5, 0.5])  # 3 levels
    one_hot = np.eye(3)[level]
    frrm = FRRM(r=0.02).fit(X, y, sensitive=one_hot)
    assert frrm.r2_sensitive_ == pytest.approx(0.02, rel=1e-10)
    assert _direct_r2_s(frrm, X, one_hot) == pytest.approx(0.02, rel=1e-9)
    full = NCLM(r=0.02).fit(X, y, sensitive=one_hot)
    dropped = NCLM(r=0.02).fit(X, y, sensitive=one_hot[:, 1:])
    np.testing.assert_allclose(full.predict(X, sensitive=one_hot), dropped.predict(X, sensitive=one_hot[:, 1:]),
                               rtol=1e-6, atol=1e-6 * np.std(y))
    labels = (y > np.median(y)).astype(float)
    fgrrm = FGRRM(r=0.05).fit(X, labels, sensitive=one_hot)
    assert fgrrm.converged_ and fgrrm.deviance_ratio_ == pytest.approx(0.05, rel=1e-7)


def test_predictor_explained_by_s_gets_zero_weight(example1):
    """A predictor that is a linear function of S has U_j = 0 exactly (not rounding noise);
    when no predictor variance is left, any alpha != 0 has R^2_S = 1, so alpha = 0 for r < 1."""
    X, S, y = example1
    copy = S @ [1.0, -2.0, 0.5] + 3.0
    for cls in (FRRM, NCLM):
        model = cls(r=0.05).fit(np.c_[X, copy], y, sensitive=S)
        assert model.beta_[3] == 0.0 and model.r2_sensitive_ == pytest.approx(0.05, rel=1e-9)
        only_s = cls(r=0.3).fit(copy, y, sensitive=S)
        assert np.all(only_s.alpha_ == 0.0) and np.all(only_s.beta_ == 0.0) and only_s.r2_sensitive_ == 0.0
    with pytest.raises(ValueError, match="X: every column is constant"):
        ZLM().fit(np.ones((len(y), 2)), y, sensitive=S)


# ----------------------------------------------------------------------------- real data


def test_frrm_and_nclm_on_law_school(shared_data):
    from fairopt.datasets import load

    data = load("law", data_dir=shared_data, target="zfygpa", task="regression",
                sensitive=["race", "male"], include_sensitive=False)
    X = data.X.double().numpy()
    S = np.column_stack([data.sensitive["race"].double().numpy(), data.sensitive["male"].double().numpy()])
    y = data.y.double().numpy()
    r = 0.02
    frrm = FRRM(r=r).fit(X, y, sensitive=S)
    nclm = NCLM(r=r).fit(X, y, sensitive=S)
    assert frrm.r2_sensitive_ols_ > r and frrm.r2_sensitive_ == pytest.approx(r, rel=1e-10)
    assert nclm.r2_sensitive_ <= r * (1 + 1e-12) and nclm.r2_sensitive_ == pytest.approx(r, rel=1e-10)
    mse = lambda m: np.mean((y - m.predict(X, sensitive=S)) ** 2)  # noqa: E731
    assert mse(nclm) <= mse(frrm) * (1 + 1e-9)
    assert mse(frrm) < np.var(y)
