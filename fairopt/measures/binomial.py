"""Exact binomial confidence intervals (Clopper and Pearson 1934): the held-out certificates' rate bounds
(:mod:`fairopt.certificate`) and :func:`fairopt.group_report`'s interval for a group whose rows all share
one outcome, where a percentile bootstrap has no spread to measure."""

from __future__ import annotations

from typing import Any

import numpy as np
from scipy import stats

__all__ = ["clopper_pearson"]


def clopper_pearson(k: Any, n: Any, level: float) -> tuple[np.ndarray, np.ndarray]:
    """Exact two-sided binomial intervals at ``level`` for ``k`` successes in ``n`` trials.

    ``lower = Beta(k, n - k + 1).ppf((1 - level) / 2)`` (0 when ``k = 0``) and
    ``upper = Beta(k + 1, n - k).ppf((1 + level) / 2)`` (1 when ``k = n``); ``n = 0`` gives
    ``[0, 1]``. Arrays broadcast.
    """
    k = np.asarray(k, dtype=np.float64)
    n = np.asarray(n, dtype=np.float64)
    tail = (1.0 - level) / 2.0
    with np.errstate(invalid="ignore", divide="ignore"):
        lower = np.where(k > 0, stats.beta.ppf(tail, np.maximum(k, 1e-300), n - k + 1), 0.0)
        upper = np.where(k < n, stats.beta.ppf(1.0 - tail, k + 1, np.maximum(n - k, 1e-300)), 1.0)
    return np.nan_to_num(lower, nan=0.0), np.nan_to_num(upper, nan=1.0)
