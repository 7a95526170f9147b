"""Tests of independence between predictions and sensitive features [DC sec 4.2.2, App E.1].

Both use the bias-corrected ``dCorr~^2(x, s)`` (:func:`fairopt.measures.dcov.dcorr`):

* ``"chi2"`` (Shen, Panda & Vogelstein 2022): ``p = P(chi2_1 > n dCorr~^2 + 1)``, the hyppo form ([DC eq
  E.2] omits the ``+ 1``, which matters only for tiny n);
* ``"permutation"``: the rows of ``s`` permuted jointly (keeping the dependence among the sensitive
  features, breaking only their link with ``x``), ``p = (1 + #{r : T_r >= T_0}) / (1 + R)`` [DC eq E.3,
  ``>=`` so the p-value is valid for discrete statistics]. dCorr's denominator is permutation
  invariant, so only dCov~^2 is recomputed (O(n K) per resample for K distinct rows of ``s``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Iterator

import numpy as np
from scipy.stats import chi2

from fairopt._validation import check_choice, check_seed, positive_int
from fairopt.measures._dcov_inputs import (
    feature_matrix,
    prediction_input,
    prediction_values,
)
from fairopt.measures._dcov_kernels import UnivariateKernel
from fairopt.measures._dcov_paths import METHODS, distance_kernel

__all__ = ["IndependenceTestResult", "independence_test", "TIE_TOLERANCE"]

TIE_TOLERANCE = 1e-12
"""A resampled dCorr~^2 counts as at least as extreme as the observed one when it is
``>= observed - TIE_TOLERANCE`` (equal statistics computed in a different order differ
by float round-off, ~1e-15)."""


@dataclass(frozen=True)
class IndependenceTestResult:
    """Outcome of :func:`independence_test`: ``statistic`` (dCorr~^2), ``pvalue``, ``method`` and ``n_resamples``
    (None for ``"chi2"``).
    """

    statistic: float
    pvalue: float
    method: str
    n_resamples: int | None = None


def independence_test(
    x: Any,
    s: Any,
    method: str = "chi2",
    n_resamples: int = 999,
    seed: int | None = 0,
    *,
    dcov_method: str = "auto",
) -> IndependenceTestResult:
    """Test ``H0: x independent of s`` with the bias-corrected distance correlation.

    Parameters
    ----------
    x : array-like or torch.Tensor, shape (n,)
        Predictions (detached), n >= 4.
    s : array-like, shape (n,) or (n, q)
        Numeric sensitive features (encode categoricals first,
        :func:`fairopt.measures.dcov.encode_sensitive`); several are tested jointly [DC eq 4.2].
    method : {"chi2", "permutation"}
    n_resamples : int
        Permutations ``R`` for ``method="permutation"``.
    seed : int or None
        Seed of ``numpy.random.default_rng``; resample ``r`` uses ``s[rng.permutation(n)]``.
    dcov_method : str
        Computation path of dCov~^2 (:func:`fairopt.measures.dcov.dcov`).

    Returns
    -------
    IndependenceTestResult
        ``pvalue`` is 1 when a distance variance is <= 0 (e.g. constant predictions).
    """
    check_choice(method, ("chi2", "permutation"), "method")
    check_choice(dcov_method, METHODS, "dcov_method")
    if method == "permutation":
        positive_int(n_resamples, "n_resamples")
    seed = check_seed(seed)
    prediction = prediction_input(x)
    values, n = prediction_values(prediction), prediction.n
    kernel, _ = distance_kernel(feature_matrix(s, n, "s"), dcov_method, seed=seed)
    variance_x = UnivariateKernel(values).self_inner()
    variance_s = kernel.self_inner()
    denominator = math.sqrt(variance_x * variance_s) if variance_x > 0.0 and variance_s > 0.0 else 0.0
    statistic = kernel.value(values) / denominator if denominator > 0.0 else 0.0
    if method == "chi2":
        pvalue = float(chi2.sf(n * statistic + 1.0, 1)) if denominator > 0.0 else 1.0
        return IndependenceTestResult(statistic=statistic, pvalue=pvalue, method="chi2")
    if denominator == 0.0:
        return IndependenceTestResult(statistic=0.0, pvalue=1.0, method="permutation", n_resamples=n_resamples)
    null = kernel.permutation_values(values, _permutations(n, n_resamples, seed)) / denominator
    exceed = int(np.count_nonzero(null >= statistic - TIE_TOLERANCE))
    pvalue = (1.0 + exceed) / (1.0 + n_resamples)
    return IndependenceTestResult(statistic=statistic, pvalue=pvalue, method="permutation", n_resamples=n_resamples)


def _permutations(n: int, count: int, seed: int | None) -> Iterator[np.ndarray]:
    """``count`` row permutations of ``0..n-1`` from ``default_rng(seed)``, lazily."""
    rng = np.random.default_rng(seed)
    for _ in range(count):
        yield rng.permutation(n)
