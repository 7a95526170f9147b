"""Pieces shared by the fair linear models ([FR] sec 2-3): input validation, :class:`Decorrelation`
([FR] eq (1)), :func:`r2_sensitive` ([FR] eq (4)), :func:`solve_decreasing` and the estimator bases;
:class:`~solvers.whitening.Whitening` and :data:`~solvers.whitening.RANK_RTOL`, the one rank convention
of the code base, come from :mod:`solvers.whitening` (the SQP regressor whitens its inputs too).

Variances are population moments (divisor ``n``); every ratio used here is invariant to that choice.
"""

from __future__ import annotations

import logging
import math
from typing import Any, Callable

import numpy as np

from scipy.optimize import brentq
from sklearn.base import BaseEstimator, RegressorMixin
from sklearn.metrics import r2_score
from sklearn.utils.validation import check_is_fitted

from fairopt._validation import check_interval
from solvers.whitening import RANK_RTOL, Whitening

__all__ = [
    "as_matrix",
    "least_squares",
    "as_vector",
    "check_fraction",
    "check_rows",
    "check_fit_arrays",
    "Decorrelation",
    "Whitening",
    "r2_sensitive",
    "variance_share",
    "regression_score",
    "solve_decreasing",
    "DecorrelatedLinearModel",
    "DecorrelatedRegressor",
]

logger = logging.getLogger(__name__)


# ----------------------------------------------------------------------------- validation


def _to_array(value: Any, name: str) -> np.ndarray:
    """``value`` (numpy, torch, pandas, list) as a float64 numpy array; ValueError otherwise."""
    if value is None:
        raise ValueError(f"{name}: expected an array, got None")
    if hasattr(value, "detach"):  # torch tensor
        value = value.detach().cpu().numpy()
    elif hasattr(value, "to_numpy"):  # pandas
        value = value.to_numpy()
    try:
        array = np.asarray(value, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{name}: expected numeric values, got {type(value).__name__} ({exc})") from None
    if array.size and not np.isfinite(array).all():
        bad = array[~np.isfinite(array)].reshape(-1)[0]
        raise ValueError(f"{name}: contains non-finite values (e.g. {bad}); drop or impute them first")
    return array


def as_matrix(value: Any, name: str) -> np.ndarray:
    """A finite 2-D float64 array ``(n, k)``, ``n, k >= 1``; a 1-D input is one column."""
    array = _to_array(value, name)
    if array.ndim == 1:
        array = array[:, None]
    if array.ndim != 2:
        raise ValueError(f"{name}: expected a 2-D array (n, k), got shape {array.shape}")
    if array.shape[0] == 0 or array.shape[1] == 0:
        raise ValueError(f"{name}: expected at least one row and one column, got shape {array.shape}")
    return array


def as_vector(value: Any, name: str) -> np.ndarray:
    """A 1-D float64 array (a column ``(n, 1)`` is flattened); ValueError otherwise."""
    array = _to_array(value, name)
    if array.ndim == 2 and array.shape[1] == 1:
        array = array[:, 0]
    if array.ndim != 1 or array.shape[0] == 0:
        raise ValueError(f"{name}: expected a non-empty 1-D array, got shape {array.shape}")
    return array


def least_squares(A: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Minimum-norm least squares ``A^+ b``, singular values below ``sqrt(RANK_RTOL)`` of the largest dropped."""
    return np.linalg.lstsq(A, b, rcond=math.sqrt(RANK_RTOL))[0]


def check_rows(**arrays: np.ndarray) -> int:
    """Require the same number of rows in every array; returns it."""
    rows = {name: int(array.shape[0]) for name, array in arrays.items()}
    if len(set(rows.values())) > 1:
        described = ", ".join(f"{name} has {n}" for name, n in rows.items())
        raise ValueError(f"shape mismatch: {described} rows")
    return next(iter(rows.values()))


def check_fit_arrays(X: Any, y: Any, sensitive: Any, model: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The training ``X`` (n, p), ``y`` (n,) and ``S`` (n, q) as float64; ``ValueError`` for a missing
    ``sensitive``, bad values or shapes, fewer than 2 rows or a constant sensitive column.
    """
    if sensitive is None:
        raise ValueError(f"sensitive: {model} needs the sensitive attributes; pass sensitive=S")
    X = as_matrix(X, "X")
    S = as_matrix(sensitive, "sensitive")
    y = as_vector(y, "y")
    n = check_rows(X=X, y=y, sensitive=S)
    if n < 2:
        raise ValueError(f"X: expected at least 2 rows, got {n}")
    constant = np.flatnonzero(np.ptp(S, axis=0) == 0)
    if constant.size:
        raise ValueError(f"sensitive: column {int(constant[0])} is constant; a sensitive attribute must vary")
    return X, y, S


def check_columns(array: np.ndarray, expected: int, name: str) -> None:
    """Require ``expected`` columns (the number seen in fit)."""
    if array.shape[1] != expected:
        raise ValueError(f"{name}: expected {expected} columns as in fit, got {array.shape[1]}")


def check_fraction(value: Any, name: str = "r") -> float:
    """A bound on a proportion of explained variance/deviance: a number in ``[0, 1]``."""
    return check_interval(value, name, 0.0, 1.0, closed="both")


# ----------------------------------------------------------------------------- linear algebra


class Decorrelation:
    r"""The auxiliary OLS model ``X = B_0 + S B + U`` of [FR] eq (1) (Komiyama et al. 2018).

    ``B = S_c^+ X_c`` (minimum-norm) and ``B_0 = mean(X) - mean(S) B``; the residuals ``U`` have mean zero
    and ``S_c' U = 0`` on the training data. A predictor that ``S`` explains completely
    (``VAR(U_j) <= RANK_RTOL * VAR(X_j)``) gets ``U_j = 0`` exactly instead of rounding noise
    (``explained``). Attributes after :meth:`fit`: ``x_mean``, ``s_mean``, ``coef`` (``B``), ``explained``.
    """

    def fit(self, X: np.ndarray, S: np.ndarray) -> "Decorrelation":
        self.x_mean = X.mean(axis=0)
        self.s_mean = S.mean(axis=0)
        X_c = X - self.x_mean
        self.coef = least_squares(S - self.s_mean, X_c)
        residual = X_c - (S - self.s_mean) @ self.coef
        self.explained = np.mean(residual**2, axis=0) <= RANK_RTOL * np.mean(X_c**2, axis=0)
        return self

    @property
    def intercept(self) -> np.ndarray:
        """``B_0 = mean(X) - mean(S) B``, shape (p,)."""
        return self.x_mean - self.s_mean @ self.coef

    def transform(self, X: np.ndarray, S: np.ndarray) -> np.ndarray:
        """``U = X - B_0 - S B`` for any rows (training statistics; ``explained`` columns 0)."""
        U = (X - self.x_mean) - (S - self.s_mean) @ self.coef
        U[:, self.explained] = 0.0
        return U


def r2_sensitive(alpha: Any, beta: Any, S: Any, U: Any) -> float:
    r"""Fraction of the explained variance attributable to ``S``, [FR] eq (4).

    ``R^2_S = alpha' VAR(S) alpha / (alpha' VAR(S) alpha + beta' VAR(U) beta)`` on the rows given (equal to
    ``VAR(S alpha) / VAR(y_hat)`` on the training data, where ``S`` and ``U`` are orthogonal); 0 when
    nothing is explained.

    Parameters
    ----------
    alpha : array (q,)
        Coefficients of the sensitive attributes.
    beta : array (p,)
        Coefficients of the de-correlated predictors.
    S : array (n, q)
    U : array (n, p)
        De-correlated predictors (e.g. ``model.decorrelate(X, sensitive)``).
    """
    alpha = as_vector(alpha, "alpha")
    beta = as_vector(beta, "beta")
    S = as_matrix(S, "S")
    U = as_matrix(U, "U")
    check_rows(S=S, U=U)
    check_columns(S, alpha.shape[0], "S")
    check_columns(U, beta.shape[0], "U")
    return variance_share(S @ alpha, U @ beta)


def variance_share(s_part: np.ndarray, u_part: np.ndarray) -> float:
    """``VAR(S alpha) / (VAR(S alpha) + VAR(U beta))`` from the two linear parts (0 if both are 0), eq (4)."""
    var_s = float(np.mean((s_part - s_part.mean()) ** 2))
    var_u = float(np.mean((u_part - u_part.mean()) ** 2))
    total = var_s + var_u
    return var_s / total if total > 0.0 else 0.0


def solve_decreasing(func: Callable[[float], float], lo: float, hi: float, *, what: str) -> float:
    """A root of a decreasing ``func`` in ``[lo, hi]``, on the feasible side (``func <= 0``).

    Brent's method to full precision, then moved up by a few ulps until ``func <= 0``: ``func`` is a
    realised fairness measure minus its bound, so the result always meets the bound. ``func(lo) <= 0``
    returns ``lo``. ``RuntimeError`` (naming ``what``) when the bracket has no sign change.
    """
    if func(lo) <= 0.0:
        return lo
    upper = _feasible_above(func, hi)
    if upper is None:
        raise RuntimeError(f"{what}: root finding needs func(hi) <= 0 on the bracket [{lo:.6g}, {hi:.6g}]")
    hi = upper
    root = brentq(func, lo, hi, xtol=1e-300, rtol=4 * np.finfo(float).eps, maxiter=500)
    found = _feasible_above(func, root)
    return found if found is not None and found <= hi else hi


def _feasible_above(func: Callable[[float], float], x: float, attempts: int = 60) -> float | None:
    """The first of ``x, x + d, x + 3d, x + 7d, ...`` (``d`` a few ulps of ``x``) where
    ``func <= 0``; None if none of ``attempts`` tries is."""
    step = max(abs(x), 1e-300) * 4 * np.finfo(float).eps
    for _ in range(attempts):
        if func(x) <= 0.0:
            return x
        x, step = x + step, 2.0 * step
    return None


# ----------------------------------------------------------------------------- estimator base


class DecorrelatedLinearModel(BaseEstimator):
    r"""Base of the models ``eta = intercept_ + S alpha_ + U beta_`` on ``S`` and the de-correlated ``U``."""

    def _prepare(self, X: Any, y: Any, sensitive: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Validate the fit inputs and fit the :class:`Decorrelation`; return ``S_c``, ``U`` and ``y``."""
        X, y, S = check_fit_arrays(X, y, sensitive, type(self).__name__)
        self.n_features_in_ = X.shape[1]
        self.n_sensitive_in_ = S.shape[1]
        self.decorrelation_ = Decorrelation().fit(X, S)
        U = self.decorrelation_.transform(X, S)
        return S - self.decorrelation_.s_mean, U, y

    def _inputs(self, X: Any, sensitive: Any) -> tuple[np.ndarray, np.ndarray]:
        """Validated ``X`` and ``S`` for prediction (same column counts as in fit)."""
        check_is_fitted(self)
        if sensitive is None:
            raise ValueError("sensitive: the model uses the sensitive attributes; pass sensitive=S")
        X = as_matrix(X, "X")
        S = as_matrix(sensitive, "sensitive")
        check_rows(X=X, sensitive=S)
        check_columns(X, self.n_features_in_, "X")
        check_columns(S, self.n_sensitive_in_, "sensitive")
        return X, S

    def decorrelate(self, X: Any, sensitive: Any) -> np.ndarray:
        """The de-correlated predictors ``U = X - B_0 - S B`` of [FR] eq (1), shape (n, p)."""
        X, S = self._inputs(X, sensitive)
        return self.decorrelation_.transform(X, S)

    def _linear_parts(self, X: Any, sensitive: Any) -> tuple[np.ndarray, np.ndarray]:
        """``S alpha`` and ``U beta`` (the intercept is separate)."""
        X, S = self._inputs(X, sensitive)
        return S @ self.alpha_, self.decorrelation_.transform(X, S) @ self.beta_

    def decision_function(self, X: Any, sensitive: Any = None) -> np.ndarray:
        """The linear predictor ``intercept_ + S alpha_ + U beta_``, shape (n,)."""
        s_part, u_part = self._linear_parts(X, sensitive)
        return self.intercept_ + s_part + u_part

    def r2_sensitive(self, X: Any, sensitive: Any = None) -> float:
        """[FR] eq (4) on the rows given: the share of ``VAR(S alpha) + VAR(U beta)`` due to ``S``."""
        s_part, u_part = self._linear_parts(X, sensitive)
        return variance_share(s_part, u_part)


class DecorrelatedRegressor(RegressorMixin, DecorrelatedLinearModel):
    """A least-squares :class:`DecorrelatedLinearModel` (FRRM, NCLM): predictions and ``R^2``."""

    def predict(self, X: Any, sensitive: Any = None) -> np.ndarray:
        """Predictions ``intercept_ + S alpha_ + U beta_``, shape (n,)."""
        return self.decision_function(X, sensitive)

    def score(self, X: Any, y: Any, sensitive: Any = None, sample_weight: Any = None) -> float:
        """Coefficient of determination ``R^2`` of :meth:`predict` on ``(X, S, y)``."""
        return regression_score(y, self.predict(X, sensitive), sample_weight)


def regression_score(y: Any, prediction: np.ndarray, sample_weight: Any = None) -> float:
    """``R^2`` of ``prediction`` for ``y`` (validated to the same length)."""
    y = as_vector(y, "y")
    check_rows(X=prediction, y=y)
    return float(r2_score(y, prediction, sample_weight=sample_weight))
