"""Permutation test of mutual independence with the joint distance covariance [DC sec 4.2.2, App E.1].

H0 is [DC] eq (4.3), ``F(yhat, s_1, ..., s_d) = F(yhat) F(s_1) ... F(s_d)``, with the statistic
``T_0 = JdCov~^2(yhat, s_1, ..., s_d; c)`` [DC eq 3.4, B.5]. Each resample keeps ``yhat`` in place and
permutes every sensitive feature by its own permutation (a multi-column feature moves as a block,
[DC] App E.1; Chakraborty and Zhang 2019 sec 4): that breaks each feature's link with the prediction
and with the other features, as mutual independence requires (one joint permutation, as in
:func:`fairopt.measures.independence_test`, tests the weaker eq 4.2). Then

    p = (1 + #{r : T^(r) >= T_0}) / (1 + R)                               [DC eq E.3]

with ``>=`` (up to round-off) instead of the paper's ``>``, valid for discrete statistics. Dependent
sensitive features violate H0 by themselves ([DC] sec 4.3.1). The resamples are exact along one path:

``"grouped"``
    all features discrete with few joint cells: one grouped :func:`~fairopt.measures.dcov.jdcov` call
    per resample, O(n log n + n K).
``"dense"``
    ``n <= DENSE_MAX_N`` with a continuous feature: the U-centred n x n matrices are built once and a
    resample gathers their permuted rows (the discrete features from one K x K table).
``"univariate"``
    one univariate continuous feature: the O(n log n) path of Huo and Szekely per resample.
``"blocked"``
    otherwise: one blocked ``jdcov`` call per resample, O(n^2 d) each (slow: lower ``n_permutations``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Iterator, Mapping, Sequence

import numpy as np
import pandas as pd

from fairopt._validation import check_seed, positive_float, positive_int
from fairopt.measures._dcov_blocked import CentredRows, DistanceRows
from fairopt.measures._dcov_inputs import encode_sensitive, prediction_input, prediction_values
from fairopt.measures._dcov_kernels import UnivariateKernel, factorize_rows, grouped_u_centre, pairwise_distances
from fairopt.measures._dcov_paths import GROUPED_MAX_GROUPS, univariate_grouped_limit
from fairopt.measures.dcov import jdcov

__all__ = ["JdCovTestResult", "jdcov_permutation_test", "DENSE_MAX_N", "GROUPED_PATH_MAX_CELLS",
           "DENSE_TABLE_MAX_CELLS", "RELATIVE_TIE_TOLERANCE", "NULL_QUANTILES"]

DENSE_MAX_N = 2500
"""Largest sample size of the ``"dense"`` path (a few n x n float64 matrices, 50 MB each)."""

GROUPED_PATH_MAX_CELLS = 128
"""Most joint cells of all-discrete features resampled by grouped ``jdcov`` calls (O(n K)) instead of densely."""

DENSE_TABLE_MAX_CELLS = 1024
"""Most cells of the dense path's table of discrete features (an 8 MB float64 matrix)."""

RELATIVE_TIE_TOLERANCE = 1e-10
"""A resample is as extreme when ``T^(r) >= T_0 - tol``, ``tol = RELATIVE_TIE_TOLERANCE * max(1, c^(d+1))``:
the statistic is a difference of sums of order ``c^(d+1)``, so equal values from two paths differ by round-off."""

NULL_QUANTILES = (0.5, 0.9, 0.95, 0.99)
"""Quantiles of the permutation distribution reported in :class:`JdCovTestResult`."""


@dataclass(frozen=True)
class JdCovTestResult:
    """Outcome of :func:`jdcov_permutation_test`.

    Attributes
    ----------
    statistic : float
        ``T_0 = JdCov~^2(pred, s_1, ..., s_d; c)`` (bias-corrected, can be slightly negative).
    pvalue : float
        ``(1 + #{r : T^(r) >= T_0}) / (1 + R)`` [DC eq E.3].
    n_permutations : int
        ``R``.
    c : float
        The JdCov constant used.
    features : tuple of str
        Names of the sensitive features, in the order they entered the statistic.
    path : str
        How the resamples were computed (module doc).
    null_mean, null_std : float
        Mean and standard deviation (ddof 1) of the ``R`` permutation statistics.
    null_quantiles : dict
        ``{q: quantile}`` of the permutation statistics for ``q`` in :data:`NULL_QUANTILES`.
    null_distribution : numpy.ndarray
        The ``R`` permutation statistics, in the order they were drawn.
    """

    statistic: float
    pvalue: float
    n_permutations: int
    c: float
    features: tuple[str, ...]
    path: str
    null_mean: float
    null_std: float
    null_quantiles: dict = field(repr=False)
    null_distribution: np.ndarray = field(repr=False)


def _sensitive_columns(
    sensitive: Any, categorical: Any
) -> tuple[list[str], list[Any], bool | list[bool | None] | None]:
    """Names, columns and per-feature ``categorical`` flags of ``sensitive``."""
    if isinstance(sensitive, pd.DataFrame):
        names = [str(c) for c in sensitive.columns]
        columns = [sensitive[c] for c in sensitive.columns]
    elif isinstance(sensitive, Mapping):
        names = [str(k) for k in sensitive]
        columns = list(sensitive.values())
    elif isinstance(sensitive, (list, tuple)):
        names = [f"s[{i}]" for i in range(len(sensitive))]
        columns = list(sensitive)
    else:
        raise ValueError(
            "sensitive: expected a dict {name: values}, a pandas DataFrame (one feature per column) "
            f"or a list of features, got {type(sensitive).__name__}"
        )
    if not columns:
        raise ValueError("sensitive: at least one sensitive feature is required")
    if isinstance(categorical, Mapping):
        unknown = sorted(set(map(str, categorical)) - set(names))
        if unknown:
            raise ValueError(f"categorical: no sensitive feature named {unknown}; features: {names}")
        flags: Any = [categorical.get(name) for name in names]
    else:
        flags = categorical
    return names, columns, flags


def _permutation_draws(n: int, d: int, count: int, seed: int | None) -> Iterator[list[np.ndarray]]:
    """``count`` lists of ``d`` permutations of ``0..n-1``, drawn in order from ``default_rng(seed)``."""
    rng = np.random.default_rng(seed)
    for _ in range(count):
        yield [rng.permutation(n) for _ in range(d)]


def _centred_factor(feature: np.ndarray, c: float) -> np.ndarray:
    """``c + U`` with Chakraborty and Zhang's ``U = -(U-centred distance matrix)``, n x n."""
    n = feature.shape[0]
    return c - CentredRows(DistanceRows(feature), n).rows(0, n)


def _dense_null(x: np.ndarray, features: list[np.ndarray], c: float, draws: Iterator[list[np.ndarray]],
                discrete: list[tuple[np.ndarray, np.ndarray] | None]) -> np.ndarray:
    """Permutation statistics on the dense path.

    ``JdCov~^2 = (1/(n(n-3))) sum_{k != l} (c + U_x(k, l)) prod_i (c + U_i(k, l)) - c^(d+1) (n-1)/(n-3)``
    (the factor of ``x`` has a zero diagonal so the sum skips ``k = l``). Features with
    ``discrete[i] = (codes, representatives)`` enter through the Kronecker product of their K x K group
    matrices, indexed by the joint code of the permuted rows; the others through their n x n matrices.
    """
    n, d = x.shape[0], len(features)
    x_factor = _centred_factor(x.reshape(-1, 1), c)
    np.fill_diagonal(x_factor, 0.0)
    dense = {i: _centred_factor(f, c) for i, f in enumerate(features) if discrete[i] is None}
    table, strides, codes = np.ones((1, 1)), {}, {}
    for i, item in enumerate(discrete):
        if item is None:
            continue
        feature_codes, representatives = item
        counts = np.bincount(feature_codes, minlength=representatives.shape[0]).astype(np.float64)
        centred, _ = grouped_u_centre(pairwise_distances(representatives, representatives), counts)
        for j in strides:
            strides[j] *= representatives.shape[0]
        strides[i], codes[i] = 1, feature_codes
        table = np.kron(table, c - centred)
    constant = c ** (d + 1) * (n - 1.0) / (n - 3.0)
    scale = 1.0 / (n * (n - 3.0))
    rows, work = np.empty((n, n)), np.empty((n, n))
    gathered = [np.empty((n, n)) for _ in range(len(dense) + bool(codes))]
    values = []
    for perms in draws:
        for buffer, (i, matrix) in zip(gathered, dense.items()):
            np.take(matrix, perms[i], axis=0, out=rows)
            np.take(rows, perms[i], axis=1, out=buffer)
        if codes:
            joint = sum(codes[i][perms[i]] * strides[i] for i in codes)
            np.take(table[joint], joint, axis=1, out=gathered[-1])
        if len(gathered) == 1:
            total = np.einsum("ij,ij->", x_factor, gathered[0])
        else:
            np.multiply(x_factor, gathered[0], out=work)
            for buffer in gathered[1:-1]:
                work *= buffer
            total = np.einsum("ij,ij->", work, gathered[-1])
        values.append(float(total) * scale - constant)
    return np.asarray(values)


def _table_features(
    discrete: list[tuple[np.ndarray, np.ndarray] | None],
) -> list[tuple[np.ndarray, np.ndarray] | None]:
    """The discrete features that share the dense path's Kronecker table: smallest first,
    while the table has at most :data:`DENSE_TABLE_MAX_CELLS` cells; the rest go dense."""
    chosen: list[tuple[np.ndarray, np.ndarray] | None] = [None] * len(discrete)
    cells = 1
    sizes = sorted((item[1].shape[0], i) for i, item in enumerate(discrete) if item is not None)
    for size, i in sizes:
        if cells * size > DENSE_TABLE_MAX_CELLS:
            break
        cells *= size
        chosen[i] = discrete[i]
    return chosen


def _discrete_structure(features: list[np.ndarray], n: int) -> list[tuple[np.ndarray, np.ndarray] | None]:
    """``(codes, representatives)`` of each feature with few distinct rows, else None."""
    limit = univariate_grouped_limit(n)
    out: list[tuple[np.ndarray, np.ndarray] | None] = []
    for feature in features:
        codes, representatives = factorize_rows(feature)
        out.append((codes, representatives) if representatives.shape[0] <= limit else None)
    return out


def jdcov_permutation_test(
    pred: Any,
    sensitive: Mapping[str, Any] | pd.DataFrame | Sequence[Any],
    *,
    n_permutations: int = 999,
    seed: int | None = 0,
    c: float = 1.0,
    categorical: bool | Sequence[bool | None] | Mapping[str, bool | None] | None = None,
) -> JdCovTestResult:
    """Permutation test of mutual independence of ``pred`` and the sensitive features [DC eq 4.3, E.3].

    ``p = (1 + #{r : T^(r) >= T_0}) / (1 + R)`` with ``T = JdCov~^2(pred, s_1, ..., s_d; c)`` and each
    feature permuted on its own in every resample (module doc). With one feature this is the dCov
    permutation test of Szekely and Rizzo. The p-value's Monte Carlo standard error is about
    ``sqrt(p (1 - p) / R)``.

    Parameters
    ----------
    pred : array-like or torch.Tensor, shape (n,)
        Predictions (a tensor is detached), n >= 4, finite.
    sensitive : dict, pandas.DataFrame or list
        The sensitive features ``s_1, ..., s_d`` (d >= 1), each of shape (n,) or, in a dict
        or list, (n, q_i): ``{name: values}``, a DataFrame with one feature per column, or a
        list (named ``s[0]``, ``s[1]``, ...).
    n_permutations : int, default 999
        ``R``. The smallest attainable p-value is ``1 / (R + 1)``.
    seed : int or None, default 0
        Seed of ``numpy.random.default_rng``; resample ``r`` draws one ``rng.permutation(n)`` per feature.
    c : float, default 1.0
        The positive constant of JdCov~^2.
    categorical : bool, sequence or mapping name -> bool, optional
        Which features to one-hot encode ([DC App B.1]); None infers from the dtype, as
        :func:`fairopt.measures.dcov.jdcov` does.

    Returns
    -------
    JdCovTestResult
    """
    n_permutations = positive_int(n_permutations, "n_permutations")
    c = positive_float(c, "c")
    seed = check_seed(seed)
    names, columns, flags = _sensitive_columns(sensitive, categorical)
    prediction = prediction_input(pred, "pred")
    x, n = prediction_values(prediction), prediction.n
    features = encode_sensitive(columns, n, flags)
    d = len(features)
    statistic = float(jdcov(x, *features, c=c, categorical=False))
    draws = _permutation_draws(n, d, n_permutations, seed)
    discrete = _discrete_structure(features, n)
    cells = math.prod(item[1].shape[0] for item in discrete if item is not None)
    all_discrete = all(item is not None for item in discrete)
    if all_discrete and (cells <= GROUPED_PATH_MAX_CELLS or (n > DENSE_MAX_N and cells <= GROUPED_MAX_GROUPS)):
        path = "grouped"
        null = np.array([float(jdcov(x, *[f[p] for f, p in zip(features, perms)], c=c, categorical=False))
                         for perms in draws])
    elif d == 1 and features[0].shape[1] == 1:
        path = "univariate"
        null = UnivariateKernel(features[0][:, 0]).permutation_values(x, (perms[0] for perms in draws))
    elif n <= DENSE_MAX_N:
        path = "dense"
        null = _dense_null(x, features, c, draws, _table_features(discrete))
    else:
        path = "blocked"
        null = np.array([float(jdcov(x, *[f[p] for f, p in zip(features, perms)], c=c, categorical=False,
                                     method="blocked"))
                         for perms in draws])
    tolerance = RELATIVE_TIE_TOLERANCE * max(1.0, c ** (d + 1))
    exceed = int(np.count_nonzero(null >= statistic - tolerance))
    return JdCovTestResult(
        statistic=statistic,
        pvalue=(1.0 + exceed) / (1.0 + n_permutations),
        n_permutations=n_permutations,
        c=c,
        features=tuple(names),
        path=path,
        null_mean=float(np.mean(null)),
        null_std=float(np.std(null, ddof=1)) if n_permutations > 1 else 0.0,
        null_quantiles={q: float(np.quantile(null, q)) for q in NULL_QUANTILES},
        null_distribution=null,
    )
