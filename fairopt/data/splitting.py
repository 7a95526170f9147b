"""Seeded stratified train/test splits (:func:`stratified_split_indices`)."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from fairopt._validation import check_seed

__all__ = ["check_test_size", "stratified_split_indices"]


def check_test_size(test_size: Any) -> float:
    """``test_size`` must be a number strictly between 0 and 1."""
    if isinstance(test_size, bool) or not isinstance(test_size, (int, float, np.integer, np.floating)):
        raise ValueError(f"test_size: expected a fraction in (0, 1), got {test_size!r}")
    value = float(test_size)
    if not 0.0 < value < 1.0:
        raise ValueError(f"test_size: expected a fraction in (0, 1), got {test_size!r}")
    return value


def stratified_split_indices(strata: np.ndarray, test_size: float, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    r"""Deterministic stratified train/test row indices.

    The test part has :math:`n_{test} = \lceil \text{test\_size} \cdot n \rceil` rows (the
    scikit-learn convention). Stratum :math:`s` with :math:`n_s` rows contributes
    :math:`\lfloor n_{test} n_s / n \rfloor` test rows plus one for the strata with the
    largest fractional remainders until the total is :math:`n_{test}` (largest-remainder
    apportionment), so every stratum's test share is within one row of proportional. The
    rows chosen inside each stratum come from one permutation drawn with
    ``numpy.random.default_rng(seed)``.

    Returns
    -------
    train, test : sorted int64 index arrays; disjoint, covering ``0..n-1``.
    """
    test_size = check_test_size(test_size)
    seed = check_seed(seed, allow_none=False)
    strata = np.asarray(strata)
    n = len(strata)
    n_test = math.ceil(test_size * n - 1e-9)
    if n_test < 1 or n_test >= n:
        raise ValueError(f"test_size: {test_size!r} of {n} rows leaves an empty train or test part")
    _, stratum, counts = np.unique(strata, return_inverse=True, return_counts=True)
    stratum = stratum.reshape(-1)
    exact = counts * (n_test / n)
    quota = np.floor(exact).astype(np.int64)
    remaining = n_test - int(quota.sum())
    if remaining > 0:
        by_remainder = np.argsort(-(exact - quota), kind="stable")
        quota[by_remainder[:remaining]] += 1
    rng = np.random.default_rng(seed)
    permutation = rng.permutation(n)
    order = permutation[np.argsort(stratum[permutation], kind="stable")]
    ordered_stratum = stratum[order]
    starts = np.concatenate([[0], np.cumsum(counts)[:-1]])
    rank = np.arange(n) - starts[ordered_stratum]
    is_test = rank < quota[ordered_stratum]
    return np.sort(order[~is_test]), np.sort(order[is_test])
