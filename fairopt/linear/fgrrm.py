r"""Fair generalised ridge regression, FGRRM ([FR] sec 4.4).

A canonical-link GLM ``eta = theta_0 + S_c alpha + U beta`` (``S_c = S - mean_train(S)``, ``U`` the
OLS-de-correlated predictors of [FR] eq (1), ``log(exposure)`` as a Poisson offset), fitted by
penalised maximum likelihood ([FR] eq (16))::

    (theta_0, alpha, beta) = argmin D(theta_0, alpha, beta) + lambda(r) ||alpha||^2,

``D`` the deviance, with ``lambda(r)`` chosen so that [FR] eq (17) holds:

``DR(alpha, beta) = (D(0, beta) - D(alpha, beta)) / (D(0, 0) - D(alpha, beta)) <= r``,

every ``D(a, b)`` taken at the fitted intercept (no refit, as the authors' ``fairml``). Where the
paper leaves it open: ``S`` enters centred, so zeroing ``alpha`` removes the deviation of ``S alpha``
from its mean as ``VAR(S alpha)`` does in eq (4) and the ratio does not depend on the coding of ``S``
(``fairml`` zeroes ``alpha`` on the raw design, so its values can differ).

[FR] sec 4.4 says that for a Gaussian GLM eq (17) reduces to ``R^2_S``; that holds at ``lambda = 0``
only (the ridge normal equations add ``2 lambda ||a||^2`` to numerator and denominator).
:func:`deviance_ratio` accepts ``family="gaussian"`` to check it; Gaussian models are fitted by
:class:`~fairopt.linear.FRRM`.

Estimation: penalised Newton-Raphson with step halving, warm-started along the search;
``lambda(r)`` by Brent's method on ``log lambda`` in a bracket found by factors of 10 from the
curvature scale ``trace(S_c' W S_c) / q``. The returned ``lambda`` always meets the bound.
"""

from __future__ import annotations

import logging
import math
import warnings
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np
from scipy.special import expit, xlogy
from sklearn.exceptions import ConvergenceWarning
from sklearn.metrics import accuracy_score, d2_tweedie_score

from fairopt.exceptions import FairnessWarning
from fairopt._validation import check_choice, nonnegative_float, positive_int
from fairopt.linear._common import (
    RANK_RTOL,
    DecorrelatedLinearModel,
    as_vector,
    check_fraction,
    check_rows,
    solve_decreasing,
)

__all__ = ["FGRRM", "deviance_ratio"]

logger = logging.getLogger(__name__)

FAMILIES = ("binomial", "poisson")
_BRACKET_STEPS = 40


# ----------------------------------------------------------------------------- families


@dataclass(frozen=True)
class _Family:
    """A GLM family with its canonical link, as functions of ``eta``: the deviance's gradient in ``eta`` is
    ``-2 (y - mean(eta))`` and its curvature ``2 weight(eta)``.
    """

    name: str
    mean: Callable[[np.ndarray], np.ndarray]
    weight: Callable[[np.ndarray], np.ndarray]
    deviance: Callable[[np.ndarray, np.ndarray], float]


def _binomial_deviance(y: np.ndarray, eta: np.ndarray) -> float:
    """``-2 sum [y log p + (1 - y) log(1 - p)]`` with ``p = expit(eta)``, as ``2 sum [log(1 + e^eta) - y eta]``."""
    return float(2.0 * np.sum(np.logaddexp(0.0, eta) - y * eta))


def _poisson_deviance(y: np.ndarray, eta: np.ndarray) -> float:
    """``2 sum [y log(y / mu) - (y - mu)]`` with ``mu = exp(eta)`` (``0 log 0 = 0``)."""
    return float(2.0 * np.sum(xlogy(y, y) - y * eta - y + np.exp(eta)))


def _gaussian_deviance(y: np.ndarray, eta: np.ndarray) -> float:
    """The residual sum of squares."""
    return float(np.sum((y - eta) ** 2))


_FAMILY_TABLE = {
    "binomial": _Family("binomial", expit, lambda eta: expit(eta) * expit(-eta), _binomial_deviance),
    "poisson": _Family("poisson", np.exp, np.exp, _poisson_deviance),
    "gaussian": _Family("gaussian", lambda eta: eta, np.ones_like, _gaussian_deviance),
}


def _check_response(y: np.ndarray, family: str) -> None:
    if family == "binomial":
        bad = ~np.isin(y, (0.0, 1.0))
        if bad.any():
            raise ValueError(f"y: family='binomial' needs 0/1 values, got {y[bad][0]!r}")
    elif family == "poisson" and (y < 0).any():
        raise ValueError(f"y: family='poisson' needs non-negative counts, got {y[y < 0][0]!r}")


def _log_exposure(exposure: Any, n: int, family: str) -> np.ndarray:
    """``log(exposure)`` (zeros when None); exposure only for Poisson, every value > 0."""
    if exposure is None:
        return np.zeros(n)
    if family != "poisson":
        raise ValueError(f"exposure: only family='poisson' takes an exposure, got family={family!r}")
    values = as_vector(exposure, "exposure")
    if values.shape[0] != n:
        raise ValueError(f"shape mismatch: exposure has {values.shape[0]} rows, X has {n}")
    if (values <= 0).any():
        raise ValueError(f"exposure: expected values > 0, got {values[values <= 0][0]!r}")
    return np.log(values)


def deviance_ratio(
    y: Any, intercept: Any, s_part: Any, u_part: Any, family: str = "binomial"
) -> float:
    r"""Share of explained deviance due to ``S``, [FR] eq (17).

    ``DR = (D(0, beta) - D(alpha, beta)) / (D(0, 0) - D(alpha, beta))`` with
    ``D(a, b) = deviance(y, intercept + [S_c a] + [U b])``, all at the same ``intercept``; 0 when the
    model explains no deviance.

    Parameters
    ----------
    y : array (n,)
    intercept : float or array (n,)
        Fitted intercept (an array to include an offset such as ``log(exposure)``).
    s_part : array (n,)
        ``S_c alpha``, the sensitive attributes centred at their training mean.
    u_part : array (n,)
        ``U beta``.
    family : {"binomial", "poisson", "gaussian"}
        ``"gaussian"`` (residual sum of squares) checks [FR] sec 4.4 (module doc).
    """
    family = check_choice(family, tuple(_FAMILY_TABLE), "family")
    y = as_vector(y, "y")
    s_part = as_vector(s_part, "s_part")
    u_part = as_vector(u_part, "u_part")
    check_rows(y=y, s_part=s_part, u_part=u_part)
    base = as_vector(np.broadcast_to(intercept, y.shape) if np.ndim(intercept) == 0 else intercept, "intercept")
    check_rows(y=y, intercept=base)
    _check_response(y, family)
    return _deviance_ratio(_FAMILY_TABLE[family], y, base, s_part, u_part)


def _deviance_ratio(fam: _Family, y: np.ndarray, base: np.ndarray, s_part: np.ndarray, u_part: np.ndarray) -> float:
    d_full = fam.deviance(y, base + s_part + u_part)
    d_no_s = fam.deviance(y, base + u_part)
    d_none = fam.deviance(y, base)
    explained = d_none - d_full
    return (d_no_s - d_full) / explained if explained > 0.0 else 0.0


# ----------------------------------------------------------------------------- penalised IRLS


@dataclass
class _GLMFit:
    theta: np.ndarray
    converged: bool
    iterations: int


def _penalised_newton(
    Z: np.ndarray, y: np.ndarray, offset: np.ndarray, fam: _Family, penalty: np.ndarray,
    theta: np.ndarray, tol: float, max_iter: int,
) -> _GLMFit:
    r"""Minimise ``D(Z theta + offset) + sum_j penalty_j theta_j^2`` by damped Newton steps.

    The step solves ``(Z'WZ + diag(penalty)) delta = Z'(y - mu) - penalty * theta`` (minimum-norm if
    singular) and is halved until an Armijo decrease (1e-4); once the Newton decrement is at most
    ``tol * (1 + |objective|)`` the full step is taken and the fit returned.
    """
    theta = theta.copy()

    def objective(t: np.ndarray) -> float:
        return fam.deviance(y, Z @ t + offset) + float(np.sum(penalty * t * t))

    current = objective(theta)
    for iteration in range(1, max_iter + 1):
        eta = Z @ theta + offset
        score = Z.T @ (y - fam.mean(eta)) - penalty * theta
        hessian = (Z * fam.weight(eta)[:, None]).T @ Z + np.diag(penalty)
        # minimum-norm step: with collinear columns (e.g. a one-hot S with every level) the
        # coefficients stay free of components along the null space of Z
        step = np.linalg.lstsq(hessian, score, rcond=RANK_RTOL)[0]
        decrement = float(step @ score)
        if decrement <= tol * (1.0 + abs(current)):
            # inside the region of quadratic convergence: the full step squares the error
            return _GLMFit(theta + step, True, iteration)
        size = 1.0
        while size > 1e-12:
            trial = theta + size * step
            value = objective(trial)
            if value <= current - 1e-4 * size * decrement:
                break
            size *= 0.5
        else:  # no decrease possible: at the optimum up to rounding
            return _GLMFit(theta, decrement <= 1e-6 * (1.0 + abs(current)), iteration)
        theta, current = trial, value
    return _GLMFit(theta, False, max_iter)


# ----------------------------------------------------------------------------- estimator


class FGRRM(DecorrelatedLinearModel):
    r"""Fair generalised ridge regression ([FR] sec 4.4): a ridge on ``S`` with the deviance ratio ``DR <= r``.

    Logistic (``"binomial"``) or log-linear (``"poisson"``) regression on ``S`` and the de-correlated ``U``;
    the penalty ``lambda_`` makes [FR] eq (17) equal ``r`` when the bound is active (module doc).

    Parameters
    ----------
    r : float, default 0.0
        Bound on the deviance ratio in ``[0, 1]``; 0 drops ``S`` (``lambda_ = inf``), 1 is the plain GLM.
    family : {"binomial", "poisson"}, default "binomial"
    tol : float, default 1e-12
        Newton decrement tolerance (relative to the penalised deviance).
    max_iter : int, default 100
        Newton iterations per penalised fit.

    Attributes
    ----------
    alpha_ : ndarray (q,)
        Coefficients of the sensitive attributes.
    beta_ : ndarray (p,)
        Coefficients of the de-correlated predictors (they change with ``r``, [FR] Example 2).
    intercept_ : float
        For the raw ``S``: ``eta = intercept_ + S alpha_ + U beta_ (+ log exposure)``.
    lambda_ : float
        The ridge penalty of eq (16) on the deviance scale.
    deviance_ratio_, deviance_ratio_unpenalised_ : float
        Eq (17) of the fit and of the unpenalised fit; the bound is active iff the latter exceeds ``r``.
    active_, converged_ : bool
    classes_ : ndarray ``[0, 1]`` (binomial only)
    decorrelation_, n_features_in_, n_sensitive_in_ : as in FRRM.
    """

    def __init__(self, r: float = 0.0, family: str = "binomial", tol: float = 1e-12, max_iter: int = 100) -> None:
        self.r = r
        self.family = family
        self.tol = tol
        self.max_iter = max_iter

    # -- fitting --------------------------------------------------------------------
    def fit(self, X: Any, y: Any, sensitive: Any = None, exposure: Any = None) -> "FGRRM":
        """Fit on ``X`` (n, p), ``y`` (n,), ``sensitive`` (n, q) and, for Poisson, ``exposure`` (an offset).

        Raises
        ------
        ValueError
            Invalid ``r``, ``family``, response, exposure or shapes.
        RuntimeError
            No ``lambda`` up to ``1e40`` times the curvature scale meets the bound.
        """
        r = check_fraction(self.r, "r")
        family = check_choice(self.family, FAMILIES, "family")
        tol = nonnegative_float(self.tol, "tol")
        max_iter = positive_int(self.max_iter, "max_iter")
        S_c, U, y = self._prepare(X, y, sensitive)
        _check_response(y, family)
        offset = _log_exposure(exposure, len(y), family)
        search = _PenaltySearch(S_c, U, y, offset, _FAMILY_TABLE[family], tol, max_iter)

        unpenalised = search.fit(0.0)
        self.deviance_ratio_unpenalised_ = search.ratio(unpenalised.theta)
        self.active_ = self.deviance_ratio_unpenalised_ > r
        if not self.active_:
            self.lambda_, final = 0.0, unpenalised
            if 0.0 < r < 1.0:
                warnings.warn(f"FGRRM: the bound r={r:g} is inactive (deviance ratio of the unpenalised fit is "
                              f"{self.deviance_ratio_unpenalised_:.4g})", FairnessWarning, stacklevel=2)
        elif r == 0.0:
            self.lambda_, final = math.inf, search.fit(math.inf)
        else:
            self.lambda_ = search.solve(r, unpenalised)
            final = search.fit(self.lambda_)
        if not final.converged:
            warnings.warn(f"FGRRM: Newton-Raphson did not converge in {self.max_iter} iterations "
                          f"(lambda={self.lambda_:g}); the data may be separable", ConvergenceWarning, stacklevel=2)
        q = S_c.shape[1]
        theta = final.theta
        self.alpha_ = theta[1 : 1 + q].copy()
        self.beta_ = theta[1 + q :].copy()
        self.intercept_ = float(theta[0] - self.decorrelation_.s_mean @ self.alpha_)
        self.deviance_ratio_ = search.ratio(theta)
        self.converged_ = final.converged
        if family == "binomial":
            self.classes_ = np.array([0, 1])
        logger.debug("FGRRM(%s): r=%g lambda=%g DR=%g (unpenalised %g)", family, r, self.lambda_,
                     self.deviance_ratio_, self.deviance_ratio_unpenalised_)
        return self

    # -- prediction -----------------------------------------------------------------
    def _eta(self, X: Any, sensitive: Any, exposure: Any) -> np.ndarray:
        eta = self.decision_function(X, sensitive)
        return eta + _log_exposure(exposure, eta.shape[0], self.family)

    def predict_mean(self, X: Any, sensitive: Any = None, exposure: Any = None) -> np.ndarray:
        """The mean response: probability of 1 (binomial) or ``exposure * exp(eta)`` (Poisson)."""
        return _FAMILY_TABLE[self.family].mean(self._eta(X, sensitive, exposure))

    def predict_proba(self, X: Any, sensitive: Any = None) -> np.ndarray:
        """Class probabilities ``[P(y=0), P(y=1)]``, shape (n, 2) (binomial only)."""
        if self.family != "binomial":
            raise ValueError(f"predict_proba: only for family='binomial', got family={self.family!r}")
        p = self.predict_mean(X, sensitive)
        return np.column_stack([1.0 - p, p])

    def predict(self, X: Any, sensitive: Any = None, exposure: Any = None) -> np.ndarray:
        """Binomial: class labels ``1{eta > 0}``; Poisson: the expected counts."""
        if self.family == "binomial":
            return (self._eta(X, sensitive, exposure) > 0).astype(np.int64)
        return self.predict_mean(X, sensitive, exposure)

    def score(self, X: Any, y: Any, sensitive: Any = None, exposure: Any = None, sample_weight: Any = None) -> float:
        """Binomial: accuracy; Poisson: fraction of Poisson deviance explained (D^2)."""
        y = as_vector(y, "y")
        prediction = self.predict(X, sensitive, exposure)
        check_rows(X=prediction, y=y)
        if self.family == "binomial":
            return float(accuracy_score(y, prediction, sample_weight=sample_weight))
        return float(d2_tweedie_score(y, prediction, sample_weight=sample_weight, power=1))

    def deviance_ratio(self, X: Any, y: Any, sensitive: Any = None, exposure: Any = None) -> float:
        """[FR] eq (17) on the rows given (fitted intercept, ``S`` centred at the training mean)."""
        s_part, u_part = self._linear_parts(X, sensitive)
        y = as_vector(y, "y")
        check_rows(X=s_part, y=y)
        _check_response(y, self.family)
        base = self.intercept_ + self.decorrelation_.s_mean @ self.alpha_ + _log_exposure(exposure, len(y), self.family)
        s_centred = s_part - self.decorrelation_.s_mean @ self.alpha_
        return _deviance_ratio(_FAMILY_TABLE[self.family], y, base, s_centred, u_part)


class _PenaltySearch:
    """Penalised fits along ``lambda`` (warm-started) and the search for ``DR(lambda) = r``."""

    def __init__(self, S_c, U, y, offset, fam: _Family, tol: float, max_iter: int) -> None:
        self.y, self.offset, self.fam, self.tol, self.max_iter = y, offset, fam, tol, max_iter
        self.q = S_c.shape[1]
        self.Z = np.hstack([np.ones((len(y), 1)), S_c, U])
        self.warm = np.zeros(self.Z.shape[1])
        self.warm[0] = self._start_intercept()
        self.cache: dict[float, _GLMFit] = {}

    def _start_intercept(self) -> float:
        """Intercept of the intercept-only model (the usual IRLS start)."""
        mean = float(np.mean(self.y))
        if self.fam.name == "binomial":
            mean = min(max(mean, 1e-6), 1 - 1e-6)
            return math.log(mean / (1 - mean))
        return math.log(max(mean, 1e-12)) - float(np.mean(self.offset))

    def fit(self, lam: float) -> _GLMFit:
        """The penalised fit at ``lam`` (``inf``: ``S`` dropped), cached so the final fit is the one accepted."""
        if lam not in self.cache:
            self.cache[lam] = self._fit(lam)
        return self.cache[lam]

    def _fit(self, lam: float) -> _GLMFit:
        if math.isinf(lam):
            keep = np.r_[0, np.arange(1 + self.q, self.Z.shape[1])]
            sub = _penalised_newton(self.Z[:, keep], self.y, self.offset, self.fam, np.zeros(keep.size),
                                    self.warm[keep], self.tol, self.max_iter)
            theta = np.zeros(self.Z.shape[1])
            theta[keep] = sub.theta
            return _GLMFit(theta, sub.converged, sub.iterations)
        penalty = np.zeros(self.Z.shape[1])
        penalty[1 : 1 + self.q] = lam
        result = _penalised_newton(self.Z, self.y, self.offset, self.fam, penalty, self.warm, self.tol, self.max_iter)
        if result.converged:
            self.warm = result.theta
        return result

    def ratio(self, theta: np.ndarray) -> float:
        """Eq (17) at ``theta`` on the training rows."""
        base = theta[0] + self.offset
        s_part = self.Z[:, 1 : 1 + self.q] @ theta[1 : 1 + self.q]
        u_part = self.Z[:, 1 + self.q :] @ theta[1 + self.q :]
        return _deviance_ratio(self.fam, self.y, base, s_part, u_part)

    def solve(self, r: float, unpenalised: _GLMFit) -> float:
        """``lambda`` with ``DR(lambda) = r`` (on the feasible side), given ``DR(0) > r``."""
        excess = lambda log_lam: self.ratio(self.fit(math.exp(log_lam)).theta) - r  # noqa: E731
        eta = self.Z @ unpenalised.theta + self.offset
        S_c = self.Z[:, 1 : 1 + self.q]
        scale = float(np.sum(self.fam.weight(eta)[:, None] * S_c**2)) / self.q
        hi = math.log(max(scale, 1e-300))
        for _ in range(_BRACKET_STEPS):
            if excess(hi) <= 0.0:
                break
            hi += math.log(10.0)
        else:
            raise RuntimeError(f"FGRRM: no lambda up to {math.exp(hi):.3g} meets r={r:g}")
        lo = hi - math.log(10.0)
        for _ in range(_BRACKET_STEPS):
            if excess(lo) > 0.0:
                break
            lo -= math.log(10.0)
        else:
            return math.exp(lo)  # the bound holds for every tiny penalty tried
        return math.exp(solve_decreasing(excess, lo, hi, what="FGRRM lambda(r)"))
