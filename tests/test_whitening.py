"""Whitened inputs (solvers.whitening) and the linear regressor's SQP fit on them (fairopt.training).

References: numpy's covariance and least squares, and the closed-form constrained least squares of a
linear model under one covariance row (a single active linear constraint: the projection of the
least-squares solution in the metric of the inputs' covariance).
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch

from fairopt.data import FairData
from fairopt.estimators import FairRegressor
from fairopt.training import TrainingOptions, whitened_inputs
from solvers.losses import L2Regularised
from solvers.whitening import RANK_RTOL, Whitening


def _collinear_inputs(n: int, seed: int) -> np.ndarray:
    """Ten inputs from four latent factors (strongly correlated), the last an exact sum of two others."""
    rng = np.random.default_rng(seed)
    latent = rng.normal(size=(n, 4))
    X = latent @ rng.normal(size=(4, 9)) + 0.05 * rng.normal(size=(n, 9))
    return np.column_stack([X, X[:, 0] + X[:, 1]])


def test_whitening_decorrelates_drops_the_exact_combination_and_folds_back():
    X = _collinear_inputs(400, 0)
    white = Whitening().fit(X)
    assert white.rank == 9  # the tenth column is a combination of two others
    Z = white.transform(X)
    np.testing.assert_allclose(Z.mean(axis=0), 0.0, atol=1e-10)
    np.testing.assert_allclose(Z.T @ Z / len(Z), np.eye(9), atol=1e-8)
    form = white.ridge_form()
    np.testing.assert_allclose(form, form.T, atol=1e-12)
    assert np.linalg.eigvalsh(form).min() > 0
    v, b = np.random.default_rng(1).normal(size=9), 0.7
    coef, intercept = white.fold(v, b)
    np.testing.assert_allclose(X @ coef + intercept, Z @ v + b, rtol=1e-10, atol=1e-10)
    assert np.all(white.variances > RANK_RTOL * white.variances.max())


def test_the_rank_and_the_whitened_span_do_not_depend_on_column_units():
    """Dollars beside shares: the rank is decided on the correlations, and ``Z Z'`` (the projection onto
    the centred inputs' span, times n) is the same whatever the columns' units."""
    X = _collinear_inputs(300, 4)[:, :6]
    units = np.array([5e4, 0.1, 1.0, 1e-3, 2e5, 1.0])
    plain, scaled = Whitening(correlation=True).fit(X), Whitening(correlation=True).fit(X * units)
    assert plain.rank == scaled.rank == 6
    assert Whitening().fit(X * units).rank < 6  # on the covariance the millesimal column falls below the cut
    Zp, Zs = plain.transform(X), scaled.transform(X * units)
    np.testing.assert_allclose(Zs @ Zs.T, Zp @ Zp.T, atol=1e-6)


def test_weighted_whitening_is_whitening_of_repeated_rows():
    X = _collinear_inputs(120, 2)[:, :6]
    counts = np.random.default_rng(3).integers(1, 4, size=len(X))
    weighted = Whitening().fit(X, weights=counts.astype(float))
    repeated = Whitening().fit(np.repeat(X, counts, axis=0))
    np.testing.assert_allclose(weighted.mean, repeated.mean, rtol=1e-12)
    np.testing.assert_allclose(weighted.variances, repeated.variances, rtol=1e-9)
    # the same map up to the sign of each eigenvector
    Zw, Zr = weighted.transform(X), repeated.transform(X)
    np.testing.assert_allclose(np.abs(Zw), np.abs(Zr), rtol=1e-7, atol=1e-9)


def test_whitening_of_constant_inputs_has_rank_zero_and_bad_weights_are_refused():
    assert Whitening().fit(np.ones((5, 3))).rank == 0
    with pytest.raises(ValueError, match="weights"):
        Whitening().fit(np.eye(3), weights=np.zeros(3))


def test_l2_penalty_with_a_form_matches_autograd():
    w = torch.randn(2, 4, dtype=torch.float64, requires_grad=True)
    bias = torch.zeros(1, dtype=torch.float64, requires_grad=True)
    root = torch.randn(4, 4, dtype=torch.float64)
    form = root @ root.T
    loss = L2Regularised("mse", [w], alpha=0.3, forms=[form])
    (grad,) = torch.autograd.grad(loss.penalty(), [w])
    np.testing.assert_allclose(loss.gradient([w, bias]).numpy(), np.r_[grad.reshape(-1).numpy(), 0.0], rtol=1e-12)
    hessian_diagonal = np.tile(0.3 * torch.diagonal(form).numpy(), 2)
    np.testing.assert_allclose(loss.curvature([w, bias]).numpy(), np.r_[hessian_diagonal, 0.0], rtol=1e-12)
    assert float(loss.penalty()) == pytest.approx(0.15 * float(torch.trace(w.detach() @ form @ w.detach().T)))
    plain = L2Regularised("mse", [w], alpha=0.3)
    assert float(plain.penalty()) == pytest.approx(0.15 * float((w.detach() ** 2).sum()), rel=1e-12)
    with pytest.raises(ValueError, match="forms"):
        L2Regularised("mse", [w], alpha=0.3, forms=[root])  # not symmetric
    with pytest.raises(ValueError, match="forms"):
        L2Regularised("mse", [w], alpha=0.3, forms=[torch.eye(3)])  # wrong size


def _regression_rows(n: int = 600, seed: int = 0) -> tuple[FairData, np.ndarray, np.ndarray, np.ndarray]:
    """Correlated inputs, a binary attribute the target depends on, as FairData and arrays."""
    rng = np.random.default_rng(seed)
    X = _collinear_inputs(n, seed)
    s = (X[:, 0] + rng.normal(size=n) > 0).astype(float)
    y = X @ rng.normal(size=X.shape[1]) + 2.0 * s + rng.normal(size=n)
    data = FairData.from_arrays(X, y, {"s": s}, task="regression")
    return data, data.X.double().numpy(), data.y.double().numpy(), s


def _constrained_least_squares(X: np.ndarray, y: np.ndarray, s: np.ndarray, bound: float) -> np.ndarray:
    """Predictions of ``min mean((X w + b - y)^2)`` s.t. ``|mean((s - s_bar) pred)| <= bound``: the least
    squares fit, projected in the metric ``X_c' X_c`` onto the active side when it violates the row. The
    rank convention is the code base's (singular values below ``sqrt(RANK_RTOL)`` of the largest are zero:
    the float32 rounding of the exact combination is not fitted)."""
    rcond = float(np.sqrt(RANK_RTOL))
    Xc, yc, sc = X - X.mean(axis=0), y - y.mean(), s - s.mean()
    w_ls = np.linalg.lstsq(Xc, yc, rcond=rcond)[0]
    a = Xc.T @ sc / len(X)  # the row: a' w
    value = float(a @ w_ls)
    if abs(value) <= bound:
        return Xc @ w_ls + y.mean()
    H = Xc.T @ Xc / len(X)
    Ha = np.linalg.lstsq(H, a, rcond=RANK_RTOL)[0]
    w = w_ls - Ha * (value - np.sign(value) * bound) / float(a @ Ha)
    return Xc @ w + y.mean()


def _r2(y: np.ndarray, pred: np.ndarray) -> float:
    return 1.0 - float(np.mean((y - pred) ** 2) / np.var(y))


@pytest.mark.parametrize("batch_size", [None, 128])
def test_linear_regressor_reaches_the_constrained_least_squares_optimum_on_correlated_inputs(batch_size):
    data, X, y, s = _regression_rows()
    unconstrained = _constrained_least_squares(X, y, s, np.inf)
    bound = 0.3 * abs(float(np.mean((s - s.mean()) * unconstrained)))
    reference = _constrained_least_squares(X, y, s, bound)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        reg = FairRegressor(("covariance", "s", bound), batch_size=batch_size, seed=0).fit(data)
    pred = reg.predict(data)
    realised = abs(float(np.mean((s - s.mean()) * pred)))
    assert realised <= bound * (1 + 1e-4)
    # within a thousandth of R2 of the exact optimum (never above it by more than rounding)
    assert _r2(y, reference) - 1e-3 <= _r2(y, pred) <= _r2(y, reference) + 1e-5


def test_linear_regressor_ridge_is_the_ridge_of_the_original_coefficients():
    """``alpha`` penalises the folded coefficients (in standardised units), not the whitened ones: the fit
    with an inactive bound equals the closed-form ridge ``(2 H + alpha I) u = 2 X_c' y_c / n`` of the
    standardised problem (inputs as the estimator encodes them, target over its sd)."""
    data, X, y, s = _regression_rows(seed=1)
    alpha = 0.05
    Xc, yc = X - X.mean(axis=0), (y - y.mean()) / y.std()
    u = np.linalg.solve(2 * Xc.T @ Xc / len(X) + alpha * np.eye(X.shape[1]), 2 * Xc.T @ yc / len(X))
    reference = (Xc @ u) * y.std() + y.mean()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        reg = FairRegressor(("covariance", "s", 1e6), alpha=alpha, seed=0).fit(data)
    np.testing.assert_allclose(reg.predict(data), reference, atol=2e-3 * y.std())


def test_linear_regressor_on_unstandardised_inputs_in_different_units_reaches_least_squares():
    """Inputs left in their units (``standardize=False``): an income in dollars beside a share. Whitening on
    the covariance itself would drop the share's direction (its variance 1e-11 of the income's)."""
    from fairopt.data.preprocessing import Preprocessor

    rng = np.random.default_rng(5)
    n = 400
    income = rng.normal(5e4, 5e4, size=n)
    share = rng.uniform(0, 0.4, size=n) + 1e-6 * income
    s = (rng.random(n) < 0.4).astype(float)
    y = 2e-5 * income + 8.0 * share + 0.5 * s + rng.normal(scale=0.3, size=n)
    X = np.column_stack([income, share])
    data = FairData.from_arrays(X, y, {"s": s}, task="regression", preprocessor=Preprocessor(standardize=False))
    Xd = data.X.double().numpy()
    ols = np.linalg.lstsq(np.c_[Xd, np.ones(n)], y, rcond=None)[0]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        reg = FairRegressor(("covariance", "s", 1e9), seed=0).fit(data)
    assert _r2(y, reg.predict(data)) >= _r2(y, np.c_[Xd, np.ones(n)] @ ols) - 1e-3


def test_whitening_applies_to_linear_sqp_regressors_only():
    data, *_ = _regression_rows(n=50)
    base = dict(task="regression", model="linear", method="sqp")
    assert whitened_inputs(TrainingOptions(**base), data).rank == 9
    assert whitened_inputs(TrainingOptions(**{**base, "task": "binary"}), data) is None
    assert whitened_inputs(TrainingOptions(**{**base, "model": "mlp"}), data) is None
    assert whitened_inputs(TrainingOptions(**{**base, "method": "penalty"}), data) is None
    assert whitened_inputs(TrainingOptions(**base, engine_params={"chunk_rows": 10}), data) is None
