"""Exact and approximate "kernels" of the sensitive side of dCov~^2.

Every statistic of :mod:`fairopt.measures.dcov` is ``T(x) = offset + (1/(n(n-3))) sum_{i != j}
|x_i - x_j| W_ij`` with ``W`` symmetric, zero-diagonal, U-centred and depending on ``s`` only (B~
[DC eq A.7] for dCov~^2). A kernel never stores ``W``; it computes ``G_k = sum_j sign(x_k - x_j) W_kj``
(sign(0) = 0). ``T - offset`` is homogeneous of degree one in ``x``, so by Euler's identity
``T(x) - offset = (2/(n(n-3))) x . G`` and ``dT/dx_k = (2/(n(n-3))) G_k``: one pass gives the value
and the tie-safe gradient (float64, on a centred copy of ``x``).
"""

from __future__ import annotations

from typing import Iterable

import numpy as np
import pandas as pd
from scipy.spatial.distance import cdist
from scipy.special import gammaln

from fairopt.measures._dcov_sorting import TiedOrder, dominance_sums, exclusive_cumsum

__all__ = [
    "DistanceKernel",
    "GroupedKernel",
    "UnivariateKernel",
    "ProjectionKernel",
    "factorize_rows",
    "grouped_u_centre",
    "pairwise_distances",
    "unbiased_scale",
]


def unbiased_scale(n: int) -> float:
    """``2 / (n (n - 3))``: the factor turning ``x . G`` into dCov~^2 (see module notes)."""
    return 2.0 / (n * (n - 3.0))


def pairwise_distances(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Euclidean distances between the rows of ``a`` (r, q) and ``b`` (m, q)."""
    if a.shape[1] == 1:
        return np.abs(a[:, 0][:, None] - b[:, 0][None, :])
    return cdist(a, b)


def factorize_rows(s: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Codes of the distinct rows of ``s`` (n, q), by first appearance, and one representative row per code.

    Hash-based (``pandas.factorize`` per column), O(n q); ``0.0`` and ``-0.0`` may get two codes, at
    distance 0, which keeps every grouped formula exact.
    """
    n, q = s.shape
    codes = np.zeros(n, dtype=np.int64)
    for column in range(q):
        column_codes, uniques = pd.factorize(s[:, column])
        codes, _ = pd.factorize(codes * len(uniques) + column_codes)
        codes = codes.astype(np.int64)
    is_new = np.ones(n, dtype=bool)
    if n > 1:
        np.greater(codes[1:], np.maximum.accumulate(codes)[:-1], out=is_new[1:])
    return codes, s[np.flatnonzero(is_new)]


def grouped_u_centre(matrix: np.ndarray, counts: np.ndarray) -> tuple[np.ndarray, float]:
    """U-centre [DC eq A.7] the n x n matrix ``A(k, l) = matrix[g_k, g_l]`` (``k != l``, zero diagonal) given by groups.

    With ``r_h = sum_h' n_h' matrix[h, h'] - matrix[h, h]`` and ``t = sum_h n_h r_h`` the result is a group
    matrix, ``A~[h, h'] = matrix[h, h'] - (r_h + r_h') / (n - 2) + t / ((n - 1)(n - 2))``; returns it and ``t``.
    """
    n = float(counts.sum())
    rows = matrix @ counts - np.diag(matrix)
    total = float(counts @ rows)
    centred = matrix - rows[:, None] / (n - 2) - rows[None, :] / (n - 2) + total / ((n - 1) * (n - 2))
    return centred, total


class DistanceKernel:
    """Sensitive side ``W`` of ``T(x) = (1/(n(n-3))) sum_{i != j} |x_i - x_j| W_ij``.

    Subclasses implement :meth:`signed_row_sums` (``G_k = sum_j sign(x_k - x_j) W_kj``)
    and, where ``W`` is the U-centred distance matrix of a sample, :meth:`self_inner`.
    """

    n: int

    def signed_row_sums(self, x: np.ndarray) -> np.ndarray:  # pragma: no cover - abstract
        raise NotImplementedError

    def value_and_gradient(self, x: np.ndarray) -> tuple[float, np.ndarray]:
        """``T(x)`` without offset and its gradient ``(2/(n(n-3))) G`` (float64)."""
        centred = np.asarray(x, dtype=np.float64) - float(np.mean(x))
        signed = self.signed_row_sums(centred)
        scale = unbiased_scale(self.n)
        return scale * float(centred @ signed), scale * signed

    def value(self, x: np.ndarray) -> float:
        """``T(x)`` without offset."""
        return self.value_and_gradient(x)[0]

    def self_inner(self) -> float:
        """dVar~^2 of the sample this kernel was built from (only for distance kernels)."""
        raise NotImplementedError(f"{type(self).__name__} does not represent a distance matrix")

    def permutation_values(self, x: np.ndarray, permutations: Iterable[np.ndarray]) -> np.ndarray:
        """``T`` with the sensitive rows permuted by each ``perm``: the statistic of ``x[argsort(perm)]``."""
        return np.array([self.value(x[np.argsort(perm)]) for perm in permutations])


class GroupedKernel(DistanceKernel):
    """``W_kj = matrix[g_k, g_j]`` for samples in K groups: O(n log n + n K) per call.

    With ``x`` sorted once and tie blocks ``[first_k, stop_k)``, for a sample ``k`` of group ``a``:
    ``G_k = P_a[first_k] + P_a[stop_k] - P_a[n]``, ``P_a`` the prefix sums of ``W[a, g_j]`` (one per group).

    Parameters
    ----------
    codes : ndarray of int64, shape (n,)
        Group of every sample, ``0..K-1``.
    matrix : ndarray, shape (K, K)
        Symmetric U-centred group matrix of ``W``.
    raw : ndarray, shape (K, K), optional
        The un-centred distances between the groups, needed by :meth:`self_inner`.
    """

    def __init__(self, codes: np.ndarray, matrix: np.ndarray, raw: np.ndarray | None = None) -> None:
        self.codes = np.asarray(codes, dtype=np.int64)
        self.matrix = np.ascontiguousarray(matrix, dtype=np.float64)
        self.raw = raw
        self.n = int(self.codes.shape[0])
        self.counts = np.bincount(self.codes, minlength=self.matrix.shape[0]).astype(np.float64)

    @classmethod
    def from_rows(cls, codes: np.ndarray, representatives: np.ndarray) -> "GroupedKernel":
        """The U-centred distance kernel B~ of a sample with distinct rows ``representatives``."""
        raw = pairwise_distances(representatives, representatives)
        counts = np.bincount(codes, minlength=raw.shape[0]).astype(np.float64)
        centred, _ = grouped_u_centre(raw, counts)
        return cls(codes, centred, raw=raw)

    def signed_row_sums(self, x: np.ndarray) -> np.ndarray:
        tied = TiedOrder.of(x)
        out = np.empty(self.n)
        out[tied.order] = self._sorted_signed_sums(tied, self.codes[tied.order])
        return out

    def _sorted_signed_sums(self, tied: TiedOrder, codes_sorted: np.ndarray) -> np.ndarray:
        """``G`` in sorted order of ``x`` for the group codes ``codes_sorted`` (same order)."""
        n = tied.n
        n_groups = self.matrix.shape[0]
        code_dtype = np.int16 if n_groups < 2**15 else np.int64
        by_group = np.argsort(codes_sorted.astype(code_dtype), kind="stable")
        bounds = np.concatenate(([0], np.cumsum(np.bincount(codes_sorted, minlength=n_groups))))
        out = np.empty(n)
        for group in range(n_groups):
            members = by_group[bounds[group]:bounds[group + 1]]
            if members.size == 0:
                continue
            prefix = exclusive_cumsum(self.matrix[group][codes_sorted])
            out[members] = prefix[tied.first[members]] + prefix[tied.stop[members]] - prefix[n]
        return out

    def self_inner(self) -> float:
        """dVar~^2(s) = (1/(n(n-3))) sum_{h,h'} n_h n_h' D[h,h'] B~[h,h'] (D[h,h] = 0)."""
        if self.raw is None:
            raise NotImplementedError("GroupedKernel built without its raw distance matrix")
        weighted = self.counts @ (self.raw * self.matrix) @ self.counts
        return float(weighted) / (self.n * (self.n - 3.0))

    def permutation_values(self, x: np.ndarray, permutations: Iterable[np.ndarray]) -> np.ndarray:
        """O(n K) per permutation: ``x`` is sorted once, only the group codes move."""
        centred = np.asarray(x, dtype=np.float64) - float(np.mean(x))
        tied = TiedOrder.of(centred)
        scale = unbiased_scale(self.n)
        return np.array([
            scale * float(tied.values @ self._sorted_signed_sums(tied, self.codes[perm][tied.order]))
            for perm in permutations
        ])


class UnivariateKernel(DistanceKernel):
    """B~ of a univariate sample ``y``: Huo-Szekely (2016), O(n log n) per call.

    With ``b_kj = |y_k - y_j|``, row sums ``b_k.`` and total ``b..`` [DC eq A.7]:
    ``G_k = S_k - (b_k. sigma_k + tau_k) / (n - 2) + b.. sigma_k / ((n - 1)(n - 2))``, where
    ``sigma_k = sum_j sign(x_k - x_j)`` and ``tau_k = sum_j sign(x_k - x_j) b_j.`` are prefix sums over
    sorted ``x`` and ``S_k = sum_j sign(x_k - x_j) |y_k - y_j|`` comes from the dominance sums over
    ``(x, y)``-sorted samples, corrected within ``k``'s tie block in ``x``.
    """

    def __init__(self, y: np.ndarray) -> None:
        y = np.asarray(y, dtype=np.float64)
        self.y = y - float(np.mean(y))
        self.n = int(self.y.shape[0])
        tied = TiedOrder.of(self.y)
        self.rank = np.empty(self.n, dtype=np.int64)
        self.rank[tied.order] = np.arange(self.n)
        self.row_sums = np.empty(self.n)
        self.row_sums[tied.order] = _sorted_row_sums(tied.values)
        self.total = float(self.row_sums.sum())

    def signed_row_sums(self, x: np.ndarray) -> np.ndarray:
        n = self.n
        tied = TiedOrder.of(x, order=np.lexsort((self.y, x)))
        y_sorted = self.y[tied.order]
        count, weighted = dominance_sums(self.rank[tied.order], y_sorted)
        position = np.arange(n, dtype=np.float64)
        prefix_y = exclusive_cumsum(y_sorted)
        earlier = y_sorted * (2.0 * count - position) - (2.0 * weighted - prefix_y[:-1])
        tie_before = y_sorted * (position - tied.first) - (prefix_y[:-1] - prefix_y[tied.first])
        tie_after = (prefix_y[tied.stop] - prefix_y[1:]) - y_sorted * (tied.stop - position - 1.0)
        rows = self.row_sums[tied.order]
        signed_abs = 2.0 * earlier - tie_before + tie_after - rows
        sigma = tied.sign_count()
        tau = tied.signed_sum(rows)
        sorted_out = signed_abs - (rows * sigma + tau) / (n - 2.0) + self.total * sigma / ((n - 1.0) * (n - 2.0))
        out = np.empty(n)
        out[tied.order] = sorted_out
        return out

    def self_inner(self) -> float:
        """dVar~^2(y) = dCov~^2(y, y)."""
        return self.value(self.y)


def _sorted_row_sums(values: np.ndarray) -> np.ndarray:
    """``sum_j |v_p - v_j|`` for an ascending array ``v`` (ties contribute 0 either way)."""
    n = values.shape[0]
    prefix = exclusive_cumsum(values)
    position = np.arange(n, dtype=np.float64)
    return (2.0 * position - n + 1.0) * values + prefix[-1] - prefix[:-1] - prefix[1:]


def _sphere_constant(q: int) -> float:
    """``C_q = sqrt(pi) Gamma((q+1)/2) / Gamma(q/2)``: ``|v| = C_q E_u |u'v|``, u uniform on S^(q-1)."""
    return float(np.exp(0.5 * np.log(np.pi) + gammaln((q + 1) / 2.0) - gammaln(q / 2.0)))


def _unit_directions(rng: np.random.Generator, count: int, q: int) -> np.ndarray:
    directions = rng.standard_normal((count, q))
    return directions / np.linalg.norm(directions, axis=1, keepdims=True)


class ProjectionKernel(DistanceKernel):
    """Random-projection approximation of B~ for multivariate ``s`` (Huang & Huo 2017).

    ``|s_i - s_j| = C_q E_u |u'(s_i - s_j)|`` for ``u`` uniform on the sphere and U-centring is linear, so
    ``dCov~^2(x, s) ~= (C_q / K) sum_k dCov~^2(x, u_k's)``: unbiased over the directions, standard error
    O(1/sqrt(K)), exact when ``q = 1``.

    Parameters
    ----------
    s : ndarray, shape (n, q)
    n_projections : int
        ``K``, the number of directions.
    seed : int
        Seed of the directions.
    """

    def __init__(self, s: np.ndarray, n_projections: int, seed: int | None) -> None:
        self.s = np.asarray(s, dtype=np.float64)
        self.n, q = self.s.shape
        rng = np.random.default_rng(seed)
        self.directions = _unit_directions(rng, n_projections, q)
        self.second_directions = _unit_directions(rng, n_projections, q)
        self.constant = _sphere_constant(q)

    def signed_row_sums(self, x: np.ndarray) -> np.ndarray:
        total = np.zeros(self.n)
        for direction in self.directions:
            total += UnivariateKernel(self.s @ direction).signed_row_sums(x)
        return total * (self.constant / len(self.directions))

    def self_inner(self) -> float:
        """dVar~^2(s) ~= (C_q^2 / K) sum_k dCov~^2(u_k's, v_k's) with independent u_k, v_k."""
        values = [
            UnivariateKernel(self.s @ u).value(self.s @ v)
            for u, v in zip(self.directions, self.second_directions)
        ]
        return self.constant**2 * float(np.mean(values))
