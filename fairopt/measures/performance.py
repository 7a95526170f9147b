"""Predictive-performance measures: accuracy, MSE, R^2, Poisson deviance, RPS.

Inputs may be numpy, torch (detached), pandas or lists; results are floats. NaN/inf, empty inputs,
length mismatches and out-of-domain values raise ``ValueError`` naming the argument. The RPS follows
[DC] App. E.2 (eq. E.4-E.5); the Poisson deviance is the accuracy metric of [DC] sec 5.2.
"""

from __future__ import annotations

import logging
from typing import Any

import numpy as np
import torch
from scipy.special import pdtr, xlogy
from scipy.stats import poisson
from sklearn.metrics import accuracy_score, mean_squared_error, r2_score

from fairopt._validation import as_1d_tensor, as_tensor, check_same_length, check_sample_weight, to_numpy

__all__ = ["accuracy", "mse", "r2", "poisson_deviance", "rps", "poisson_rps"]

logger = logging.getLogger(__name__)

#: Tail probability below which the automatic truncation point of :func:`poisson_rps` stops.
POISSON_RPS_TAIL = 1e-12


def float_vector(x: Any, name: str) -> np.ndarray:
    """``x`` as a finite, non-empty, 1-D float64 array (``ValueError`` naming ``name``)."""
    arr = to_numpy(as_1d_tensor(x, name, torch.float64))
    if arr.size == 0:
        raise ValueError(f"{name}: is empty (0 rows)")
    return arr


def _paired(y_true: Any, pred: Any, names: tuple[str, str] = ("y_true", "pred")) -> tuple[np.ndarray, np.ndarray]:
    """Two validated float vectors of the same length."""
    a = float_vector(y_true, names[0])
    b = float_vector(pred, names[1])
    check_same_length(**{names[0]: a, names[1]: b})
    return a, b


def _require(condition: np.ndarray, values: np.ndarray, name: str, what: str) -> None:
    """Raise ``ValueError`` naming ``name`` and the first value that breaks ``condition``."""
    bad = ~condition
    if bool(bad.any()):
        raise ValueError(f"{name}: {what}, got {values[bad][0]!r}")


def accuracy(y_true: Any, pred: Any, sample_weight: Any = None) -> float:
    """Share of rows whose hard label equals the true label (the weighted share ``sum_i w_i 1[y_i = p_i] /
    sum_i w_i`` with ``sample_weight``); probabilities or logits are rejected."""
    y, p = _paired(y_true, pred)
    _require(y == np.round(y), y, "y_true", "expected hard (integer-valued) labels")
    _require(p == np.round(p), p, "pred", "expected hard (integer-valued) labels")
    return float(accuracy_score(y, p, sample_weight=check_sample_weight(sample_weight, y.size)))


def mse(y_true: Any, pred: Any, sample_weight: Any = None) -> float:
    """Mean squared error ``(1/n) sum_i (y_i - pred_i)^2`` (``sum_i w_i (y_i - pred_i)^2 / sum_i w_i`` with
    ``sample_weight``)."""
    y, p = _paired(y_true, pred)
    return float(mean_squared_error(y, p, sample_weight=check_sample_weight(sample_weight, y.size)))


def r2(y_true: Any, pred: Any, sample_weight: Any = None) -> float:
    """Coefficient of determination ``R^2 = 1 - SS_res / SS_tot`` (both sums weighted by ``sample_weight``,
    around the weighted mean of ``y_true``, when given).

    For a constant ``y_true`` (``SS_tot = 0``) it is 1.0 for a perfect prediction and 0.0 otherwise, as
    scikit-learn's ``r2_score``.
    """
    y, p = _paired(y_true, pred)
    # force_finite: 1.0 / 0.0 for a constant y_true, as documented
    return float(r2_score(y, p, sample_weight=check_sample_weight(sample_weight, y.size)))


def _expected_counts(mu: Any, exposure: Any, n: int, mu_name: str) -> np.ndarray:
    """``exposure * mu`` with ``mu >= 0`` and ``exposure > 0`` validated (``exposure=None`` is 1)."""
    m = float_vector(mu, mu_name)
    check_same_length(y=np.empty(n), **{mu_name: m})
    if exposure is None:
        return m
    e = float_vector(exposure, "exposure")
    check_same_length(**{mu_name: m, "exposure": e})
    _require(e > 0, e, "exposure", "expected positive values")
    return e * m


def _counts(y: Any, name: str = "y", integer: bool = False) -> np.ndarray:
    """Non-negative (optionally integer-valued) observed counts."""
    arr = float_vector(y, name)
    _require(arr >= 0, arr, name, "expected non-negative counts")
    if integer:
        _require(arr == np.round(arr), arr, name, "expected integer counts")
    return arr


def poisson_deviance(y: Any, mu: Any, exposure: Any = None) -> float:
    """Mean Poisson unit deviance ``(1/n) sum_i 2 (y_i log(y_i / m_i) - (y_i - m_i))`` ([DC] sec 5.2, Table 5.4).

    ``y log y = 0`` at ``y = 0`` and ``m_i = exposure_i * mu_i`` is the expected count.

    Parameters
    ----------
    y : array-like of shape (n,)
        Observed counts (non-negative; need not be integers).
    mu : array-like of shape (n,)
        Predicted mean count, or rate per unit of ``exposure``; positive (zero only where ``y`` is zero).
    exposure : array-like of shape (n,), optional
        Positive exposures.
    """
    yy = _counts(y)
    m = _expected_counts(mu, exposure, yy.size, "mu")
    _require((m > 0) | ((m == 0) & (yy == 0)), m, "mu", "expected positive means (zero only where y = 0)")
    with np.errstate(divide="ignore", invalid="ignore"):
        unit = 2.0 * (xlogy(yy, yy) - xlogy(yy, m) - (yy - m))
    return float(np.mean(unit))


def _squared_cdf_error(cdf_k: np.ndarray, y: np.ndarray, k: float) -> np.ndarray:
    """One RPS term per row: ``(F_i(k) - 1[y_i <= k])^2`` ([DC] eq. E.4)."""
    return (cdf_k - (y <= k)) ** 2


def rps(y: Any, prob: Any) -> float:
    """Mean ranked probability score for ordered classes ([DC] App. E.2, eq. E.4-E.5); lower is better.

    ``RPS_i = sum_{k=0}^{C-2} (F_ik - 1[y_i <= k])^2`` with ``F_ik`` the predicted cumulative probability
    (the term ``k = C - 1`` is always 0).

    Parameters
    ----------
    y : array-like of shape (n,)
        Observed class in ``0 .. C-1``.
    prob : array-like of shape (n,) or (n, C)
        Probability of class 1 (binary: the Brier score ``(prob_i - y_i)^2``), or rows of ordered class
        probabilities summing to 1.
    """
    p = to_numpy(as_tensor(prob, "prob", torch.float64))
    if p.ndim == 2 and p.shape[1] > 1:
        return _rps_matrix(y, p)
    pv = float_vector(p, "prob")
    yy = _counts(y, integer=True)
    check_same_length(y=yy, prob=pv)
    _require(yy <= 1, yy, "y", "expected 0/1 outcomes for a vector of probabilities")
    _require((pv >= 0) & (pv <= 1), pv, "prob", "expected probabilities in [0, 1]")
    return float(np.mean(_squared_cdf_error(1.0 - pv, yy, 0)))


def _rps_matrix(y: Any, prob: np.ndarray) -> float:
    """:func:`rps` for an (n, C) matrix of ordered class probabilities (already finite)."""
    n, n_classes = prob.shape
    yy = _counts(y, integer=True)
    check_same_length(y=yy, prob=prob)
    _require(yy < n_classes, yy, "y", f"expected classes in 0..{n_classes - 1}")
    flat = prob.reshape(-1)
    _require(flat >= 0, flat, "prob", "expected non-negative class probabilities")
    sums = prob.sum(axis=1)
    _require(np.abs(sums - 1.0) <= 1e-6, sums, "prob", "expected rows summing to 1")
    cdf = np.cumsum(prob, axis=1)
    score = np.zeros(n)
    for k in range(n_classes - 1):
        score += _squared_cdf_error(cdf[:, k], yy, k)
    return float(np.mean(score))


def _poisson_truncation(y: np.ndarray, mean: np.ndarray, tail: float = POISSON_RPS_TAIL) -> int:
    """Smallest ``K >= max(y)`` with ``P(N_i > K) <= tail`` for every row, ``N_i ~ Poisson(mean_i)``."""
    k_tail = int(poisson.isf(tail, float(mean.max()))) if mean.max() > 0 else 0
    return max(int(y.max()), k_tail, 1)


def poisson_rps(y: Any, rate: Any, K: int | None = None, exposure: Any = None) -> float:
    """Mean ranked probability score of Poisson forecasts ``N_i ~ Poisson(exposure_i rate_i)`` truncated at ``K``.

    Categories ``0..K``, the last meaning "K or more" (the tail mass is lumped into it and larger counts
    recorded there), so with ``F_i`` the Poisson CDF eq. E.4 of [DC] App. E.2 reads
    ``RPS_i = sum_{k=0}^{K-1} (F_i(k) - 1[y_i <= k])^2``: the untruncated score without its terms
    ``k >= K``, which vanish as ``K`` grows.

    Parameters
    ----------
    y : array-like of shape (n,)
        Observed counts (non-negative integers).
    rate : array-like of shape (n,)
        Predicted Poisson mean (per unit of ``exposure`` when given), >= 0.
    K : int, optional
        Largest category (>= 1); default the smallest ``K >= max(y)`` with every tail ``P(N_i > K)``
        at most :data:`POISSON_RPS_TAIL`.
    exposure : array-like of shape (n,), optional
        Positive exposures.
    """
    yy = _counts(y, integer=True)
    m = _expected_counts(rate, exposure, yy.size, "rate")
    _require(m >= 0, m, "rate", "expected non-negative rates")
    if K is None:
        K = _poisson_truncation(yy, m)
    elif isinstance(K, bool) or not isinstance(K, (int, np.integer)) or K < 1:
        raise ValueError(f"K: expected an integer >= 1, got {K!r}")
    if K > 10_000_000:
        raise ValueError(f"K: truncation point {K} is unreasonably large (huge predicted means?)")
    score = np.zeros(yy.size)
    for k in range(int(K)):
        score += _squared_cdf_error(pdtr(k, m), yy, k)
    logger.debug("poisson_rps: truncated at K=%d", K)
    return float(np.mean(score))
