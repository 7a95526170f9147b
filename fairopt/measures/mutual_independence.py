"""Permutation test of mutual independence with the joint distance covariance [DC sec 4.2.2, App E.1].

The null hypothesis is [DC] eq (4.3): the prediction and the sensitive features are
*mutually* independent, ``F(yhat, s_1, ..., s_d) = F(yhat) F(s_1) ... F(s_d)``. The
statistic is the bias-corrected joint distance covariance of Chakraborty and Zhang (2019),
``T_0 = JdCov~^2(yhat, s_1, ..., s_d; c)`` [DC eq 3.4, B.5], computed by
:func:`fairopt.measures.dcov.jdcov`.

Permutation scheme ([DC] App E.1, second test; Chakraborty and Zhang 2019, sec 4): the
prediction is kept in place and **every sensitive feature is permuted by its own
independent permutation** (the rows of a multi-column feature, e.g. a one-hot block, move
together). This breaks the link of each feature with the prediction *and* with the other
features, which is what mutual independence requires; the joint-row permutation of
:func:`fairopt.measures.independence_test` (one permutation for all features) tests the
weaker hypothesis (4.2) instead. With ``R`` resamples ``T^(r) = JdCov~^2(yhat,
s_1^(r), ..., s_d^(r))`` and

    p = (1 + #{r : T^(r) >= T_0}) / (1 + R)                               [DC eq E.3]

with ``>=`` (and a round-off tolerance) instead of the paper's ``>``, so that the p-value
stays valid for discrete statistics. As [DC] sec 4.3.1 stresses, dependent sensitive
features violate the null by themselves: the test then rejects whatever the prediction
does.

Because JdCov~^2 is invariant under a common permutation of all its arguments, permuting
each feature independently with ``yhat`` fixed gives the same null distribution as
permuting all ``d + 1`` variables independently. The resamples are computed exactly along
one of three paths (the ``path`` of the result):

``"grouped"``
    every sensitive feature takes few distinct values and their product is at most
    :data:`fairopt.measures.dcov.GROUPED_MAX_GROUPS`: each resample is one call of
    :func:`~fairopt.measures.dcov.jdcov` on the permuted features (its grouped path,
    O(n log n + n K) per resample, K = joint cells).
``"dense"``
    ``n <= DENSE_MAX_N`` and a feature is continuous: the U-centred distance matrices are
    built once (n x n) and a resample costs one gather of each continuous matrix plus one
    gather from the K x K table of the discrete features (at most
    :data:`DENSE_TABLE_MAX_CELLS` cells), so at n = 1000 999 resamples take seconds.
``"blocked"``
    otherwise (large n with a continuous feature): one :func:`~fairopt.measures.dcov.jdcov`
    call per resample on its exact blocked path, O(n^2 d) time and O(block) memory each.
    Slow (a cost per resample growing as n^2): lower ``n_permutations``
    or subsample.
With one sensitive feature JdCov~^2 is dCov~^2 and the test is the usual distance
covariance permutation test (univariate continuous ``s``: ``"univariate"``, the
O(n log n) path of Huo and Szekely per resample).
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
"""Most joint cells of all-discrete features for which each resample is a grouped
:func:`~fairopt.measures.dcov.jdcov` call (O(n K) per resample) rather than the dense path
(O(n^2)); below the measured crossover (near K = 200 at n = 1000)."""

DENSE_TABLE_MAX_CELLS = 1024
"""Most cells of the dense path's table of discrete features (an 8 MB float64 matrix)."""

RELATIVE_TIE_TOLERANCE = 1e-10
"""A resample counts as at least as extreme when ``T^(r) >= T_0 - tol`` with
``tol = RELATIVE_TIE_TOLERANCE * max(1, c^(d+1))``: the statistic is a difference of sums
of order ``c^(d+1)``, so equal statistics computed along different paths differ by
round-off of that order times 1e-15."""

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
        ``(1 + #{r : T^(r) >= T_0}) / (1 + R)`` [DC eq E.3]; ``p_value`` is the same number.
    n_permutations : int
        ``R``.
    c : float
        The JdCov constant used.
    features : tuple of str
        Names of the sensitive features, in the order they entered the statistic.
    path : str
        How the resamples were computed (module docstring): ``"grouped"``, ``"dense"``,
        ``"univariate"`` or ``"blocked"``.
    null_mean, null_std : float
        Mean and standard deviation (ddof 1) of the ``R`` permutation statistics.
    null_quantiles : dict
        ``{q: quantile}`` of the permutation statistics for ``q`` in :data:`NULL_QUANTILES`
        (the 0.95 entry is the critical value of a 5% test).
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

    @property
    def p_value(self) -> float:
        """The same number as :attr:`pvalue`."""
        return self.pvalue


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
    """Permutation statistics on the dense path (see the module docstring).

    ``JdCov~^2 = (1/(n(n-3))) sum_{k != l} (c + U_x(k, l)) prod_i (c + U_i(k, l))
    - c^(d+1) (n-1)/(n-3)`` [DC eq B.5 with the sign convention of :func:`jdcov`]; the
    factor of ``x`` has a zero diagonal so that the sum skips ``k = l``. A feature with
    ``discrete[i] = (codes, representatives)`` enters through its K x K group matrix, all
    such features together through the Kronecker product of theirs, indexed by the joint
    code of the permuted rows; the others (``None``) through their n x n matrices. Every
    n x n buffer is allocated once.
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

    ``H0: F(pred, s_1, ..., s_d) = F(pred) F(s_1) ... F(s_d)`` against any dependence, with
    the statistic ``T_0 = JdCov~^2(pred, s_1, ..., s_d; c)`` [DC eq 3.4, B.5] and the null
    distribution of ``R`` resamples in which every sensitive feature is permuted
    independently while ``pred`` stays fixed ([DC] App E.1; module docstring):
    ``p = (1 + #{r : T^(r) >= T_0}) / (1 + R)``.

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
        Seed of ``numpy.random.default_rng``; resample ``r`` draws ``d`` permutations
        ``rng.permutation(n)``, one per feature in order.
    c : float, default 1.0
        The positive constant of JdCov~^2 (1 in [DC] and the authors' R package).
    categorical : bool, sequence or mapping name -> bool, optional
        Which features to one-hot encode (distance sqrt(2) between levels, [DC App B.1]);
        ``None`` infers from the dtype (integers, strings, booleans, pandas categoricals
        are categorical; floats numeric), as :func:`fairopt.measures.dcov.jdcov` does.

    Returns
    -------
    JdCovTestResult
        The statistic, the p-value and a summary of the permutation distribution.

    Raises
    ------
    ValueError
        For predictions that are not 1-D, not finite or fewer than 4; sensitive features of
        another length, with missing values or none at all; ``n_permutations < 1``;
        ``c <= 0``; an invalid seed.

    Notes
    -----
    With one sensitive feature this is the distance-covariance permutation test of
    Szekely and Rizzo (dCov~^2 statistic, the rows of ``s`` permuted). The p-value is
    only as precise as ``R`` allows: its Monte Carlo standard error is about
    ``sqrt(p (1 - p) / R)``.
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
