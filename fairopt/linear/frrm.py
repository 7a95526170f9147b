r"""Fair ridge regression model, FRRM ([FR] sec 3).

With ``S_c`` the centred sensitive attributes and ``U`` the predictors de-correlated from ``S`` by OLS
([FR] eq (1), :class:`~fairopt.linear._common.Decorrelation`), [FR] eq (2), (10)::

    (alpha, beta) = argmin ||y_c - S_c alpha - U beta||^2 + lambda(r) ||alpha||^2

``S_c' U = 0`` separates it ([FR] eq (11)): ``beta = U^+ y`` (OLS, independent of ``r``) and
``alpha(lambda) = (S_c'S_c + lambda I)^{-1} S_c' y``. The bound is [FR] eq (4),
``R^2_S = alpha' VAR(S) alpha / (alpha' VAR(S) alpha + beta' VAR(U) beta) <= r``; when OLS violates it,
``lambda(r)`` solves [FR] eq (12), ``g(lambda) = ||S_c alpha(lambda)||^2 = C = r / (1 - r) ||U beta||^2``.

Bracket: with ``S_c'S_c = A diag(l_i) A'`` and ``z = A' S_c' y``,
``g(lambda) = sum_i (z_i^2 / l_i) (l_i / (l_i + lambda))^2`` lies between ``D_0 (l / (l + lambda))^2``
at ``l_min`` and ``l_max`` (``D_0 = g(0)``), so the root lies in ``[l_min, l_max] * (sqrt(D_0 / C) - 1)``
and Brent's method finds it. The paper's bracket (sec 3.1, after Lipovetsky 2006) bounds the ridge
"explained sum of squares" ``2 alpha'S'y - alpha'S'S alpha`` instead of ``g`` and can miss the root.

Closed form ([FR] sec 3.2): when ``S_c'S_c = n I``, with ``c = sqrt(beta' VAR(U) beta)`` and
``k = sqrt(r / (1 - r))``, ``lambda(r) = ||S_c' y|| / (c k) - n`` and ``alpha = c k S_c' y / ||S_c' y||``
(eq (13)-(14); the printed squared norm is a typo: only the unsquared one gives
``||alpha||^2 = k^2 c^2``). ``lambda`` is on the sum-of-squares scale of (10) (it grows with ``n``).
"""

from __future__ import annotations

import logging
import math
import warnings
from dataclasses import dataclass
from typing import Any

import numpy as np

from fairopt.exceptions import FairnessWarning
from fairopt._validation import check_choice
from fairopt.linear._common import (
    RANK_RTOL,
    DecorrelatedRegressor,
    check_fraction,
    least_squares,
    solve_decreasing,
)

__all__ = ["FRRM"]

logger = logging.getLogger(__name__)

METHODS = ("auto", "root", "closed_form")
#: relative tolerance for "S_c'S_c = n I" (independent unit-variance sensitive attributes)
IDENTITY_RTOL = 1e-10


@dataclass(frozen=True)
class _RidgePath:
    r"""``alpha(lambda) = (S_c'S_c + lambda I)^{-1} S_c' y`` in the eigenbasis of ``S_c'S_c`` (null directions
    dropped: ``S_c'y`` has no component there).
    """

    eigvecs: np.ndarray  # A, (q, k)
    eigvals: np.ndarray  # l, (k,)
    proj: np.ndarray  # z = A' S_c' y, (k,)

    @classmethod
    def from_data(cls, S_c: np.ndarray, y: np.ndarray) -> "_RidgePath":
        eigvals, eigvecs = np.linalg.eigh(S_c.T @ S_c)
        keep = eigvals > RANK_RTOL * max(float(eigvals.max()), 0.0)
        return cls(eigvecs[:, keep], eigvals[keep], eigvecs[:, keep].T @ (S_c.T @ y))

    def alpha(self, lam: float) -> np.ndarray:
        """``alpha(lambda)``; ``lambda = inf`` gives zeros."""
        if math.isinf(lam):
            return np.zeros(self.eigvecs.shape[0])
        return self.eigvecs @ (self.proj / (self.eigvals + lam))

    def explained(self, lam: float) -> float:
        """``g(lambda) = ||S_c alpha(lambda)||^2 = sum_i l_i z_i^2 / (l_i + lambda)^2``."""
        if math.isinf(lam):
            return 0.0
        return float(np.sum(self.eigvals * self.proj**2 / (self.eigvals + lam) ** 2))

    def bracket(self, target: float) -> tuple[float, float]:
        """``[lambda_lo, lambda_hi]`` containing the root of ``g(lambda) = target`` (module doc)."""
        factor = math.sqrt(self.explained(0.0) / target) - 1.0
        return float(self.eigvals.min()) * factor, float(self.eigvals.max()) * factor


class FRRM(DecorrelatedRegressor):
    r"""Fair ridge regression ([FR] sec 3): a ridge penalty on ``S`` chosen so that ``R^2_S <= r``.

    ``y_hat = intercept_ + S alpha_ + U beta_``: ``beta_`` the OLS fit on the de-correlated ``U``,
    ``alpha_`` the ridge fit on ``S`` whose penalty makes ``R^2_S = r`` when the bound is active (module doc).

    Parameters
    ----------
    r : float, default 0.0
        Bound on ``R^2_S`` in ``[0, 1]``; 0 gives ``alpha_ = 0`` (predictions uncorrelated with ``S`` on
        the training data), 1 the OLS fit.
    method : {"auto", "root", "closed_form"}, default "auto"
        Brent's method on the eigenvalue bracket, or [FR] eq (13)-(14), valid only when
        ``S_c'S_c = n I`` (ValueError otherwise); "auto" takes the closed form exactly then.

    Attributes
    ----------
    alpha_ : ndarray (q,)
        Coefficients of the raw sensitive attributes.
    beta_ : ndarray (p,)
        Coefficients of the de-correlated predictors ``U`` (:meth:`decorrelate`).
    intercept_ : float
    lambda_ : float
        The ridge penalty of eq (10) (0 if the bound is inactive, inf if ``r = 0``).
    lambda_bracket_ : tuple of float or None
        The bracket searched.
    r2_sensitive_, r2_sensitive_ols_ : float
        ``R^2_S`` of the fit and of the OLS fit; the bound is active iff the latter exceeds ``r``.
    active_ : bool
    method_ : {"ols", "zero", "root", "closed_form"}
    decorrelation_ : Decorrelation
        The auxiliary model ``X = B_0 + S B + U``.
    n_features_in_, n_sensitive_in_ : int
    """

    def __init__(self, r: float = 0.0, method: str = "auto") -> None:
        self.r = r
        self.method = method

    def fit(self, X: Any, y: Any, sensitive: Any = None) -> "FRRM":
        """Fit on ``X`` (n, p), ``y`` (n,) and ``sensitive`` (n, q); warns when a bound ``0 < r < 1`` is inactive."""
        r = check_fraction(self.r, "r")
        method = check_choice(self.method, METHODS, "method")
        S_c, U, y = self._prepare(X, y, sensitive)
        closed = _is_scaled_identity(S_c)
        if method == "closed_form" and not closed:
            raise ValueError("method: 'closed_form' needs centred sensitive attributes with S_c'S_c = n I "
                             "(independent, unit-variance columns, [FR] sec 3.2); use method='root'")
        y_c = y - y.mean()
        self.beta_ = least_squares(U, y_c)
        explained_u = float(np.sum((U @ self.beta_) ** 2))
        path = _RidgePath.from_data(S_c, y_c)
        self.r2_sensitive_ols_ = _share(path.explained(0.0), explained_u)
        self.active_ = self.r2_sensitive_ols_ > r
        self.lambda_bracket_ = None
        if not self.active_:
            self.lambda_, self.method_ = 0.0, "ols"
            if 0.0 < r < 1.0:
                warnings.warn(f"FRRM: the bound r={r:g} is inactive (R^2_S of the OLS fit is "
                              f"{self.r2_sensitive_ols_:.4g}); returning the OLS fit", FairnessWarning, stacklevel=2)
        elif r == 0.0 or explained_u == 0.0:
            self.lambda_, self.method_ = math.inf, "zero"
        elif method == "closed_form" or (method == "auto" and closed):
            self.lambda_, self.method_ = _closed_form_lambda(S_c, y_c, explained_u / len(y), r), "closed_form"
        else:
            target = r / (1.0 - r) * explained_u  # eq (12): ||S_c alpha||^2 = r / (1 - r) ||U beta||^2
            self.lambda_bracket_ = path.bracket(target)
            self.lambda_ = solve_decreasing(lambda lam: path.explained(lam) - target, *self.lambda_bracket_,
                                            what="FRRM lambda(r)")
            self.method_ = "root"
        if self.method_ == "closed_form":
            self.alpha_ = _closed_form_alpha(S_c, y_c, explained_u / len(y), r)
        else:
            self.alpha_ = path.alpha(self.lambda_)
        self.intercept_ = float(y.mean() - self.decorrelation_.s_mean @ self.alpha_)
        self.r2_sensitive_ = _share(float(np.sum((S_c @ self.alpha_) ** 2)), explained_u)
        logger.debug("FRRM: r=%g lambda=%g method=%s R2_S=%g (OLS %g)", r, self.lambda_, self.method_,
                     self.r2_sensitive_, self.r2_sensitive_ols_)
        return self

def _share(explained_s: float, explained_u: float) -> float:
    """``explained_s / (explained_s + explained_u)``, 0 when both are 0 ([FR] eq (4))."""
    total = explained_s + explained_u
    return explained_s / total if total > 0.0 else 0.0


def _is_scaled_identity(S_c: np.ndarray) -> bool:
    """Whether ``S_c'S_c = n I`` within :data:`IDENTITY_RTOL` (the premise of [FR] sec 3.2)."""
    n, q = S_c.shape
    return bool(np.abs(S_c.T @ S_c / n - np.eye(q)).max() <= IDENTITY_RTOL)


def _closed_form_lambda(S_c: np.ndarray, y_c: np.ndarray, var_u: float, r: float) -> float:
    r"""[FR] eq (13) with the unsquared norm: ``lambda = ||S_c'y|| / (c k) - n``, ``c^2 = var_u``."""
    return float(np.linalg.norm(S_c.T @ y_c)) / math.sqrt(var_u * r / (1.0 - r)) - S_c.shape[0]


def _closed_form_alpha(S_c: np.ndarray, y_c: np.ndarray, var_u: float, r: float) -> np.ndarray:
    r"""[FR] eq (14) with the unsquared norm: ``alpha = c k S_c'y / ||S_c'y||``."""
    cross = S_c.T @ y_c
    return math.sqrt(var_u * r / (1.0 - r)) * cross / float(np.linalg.norm(cross))
