"""Sorting primitives behind the O(n log n) distance-covariance paths.

:class:`TiedOrder` sorts a sample once and records each position's tie block, so counts and sums
strictly below / above ``x_k`` are prefix-sum lookups (``sign(0) = 0`` exact under ties).
:func:`dominance_sums` gives the 2-D dominance sums of Huo-Szekely (2016) by a radix partition over
the rank bits: ``ceil(log2 n)`` passes of O(n) array operations.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = ["TiedOrder", "dominance_sums", "exclusive_cumsum"]


def exclusive_cumsum(values: np.ndarray) -> np.ndarray:
    """Prefix sums with a leading zero along axis 0: ``out[b] - out[a]`` is the sum over ``[a, b)``."""
    out = np.zeros((values.shape[0] + 1,) + values.shape[1:], dtype=np.float64)
    np.cumsum(values, axis=0, out=out[1:])
    return out


@dataclass(frozen=True)
class TiedOrder:
    """A sample sorted ascending (``values = sample[order]``) with the tie block ``[first[p], stop[p])`` of
    every sorted position: ``first[p]`` points lie strictly below ``values[p]``, ``n - stop[p]`` above.
    """

    order: np.ndarray
    values: np.ndarray
    first: np.ndarray
    stop: np.ndarray

    @classmethod
    def of(cls, sample: np.ndarray, order: np.ndarray | None = None) -> "TiedOrder":
        """Sort ``sample`` (1-D float64); a supplied ``order`` must sort it ascending (ties in any order)."""
        if order is None:
            order = np.argsort(sample)
        order = np.asarray(order, dtype=np.int64)
        values = sample[order]
        n = values.shape[0]
        starts_block = np.empty(n, dtype=bool)
        starts_block[:1] = True
        np.not_equal(values[1:], values[:-1], out=starts_block[1:])
        block_first = np.flatnonzero(starts_block)
        block_stop = np.append(block_first[1:], n)
        block_of = np.cumsum(starts_block) - 1
        return cls(order=order, values=values, first=block_first[block_of], stop=block_stop[block_of])

    @property
    def n(self) -> int:
        return int(self.values.shape[0])

    def sign_count(self) -> np.ndarray:
        """``sum_j sign(x_k - x_j)`` at every sorted position: (#below) - (#above)."""
        return (self.first + self.stop - self.n).astype(np.float64)

    def signed_sum(self, weights_sorted: np.ndarray) -> np.ndarray:
        """``sum_j sign(x_k - x_j) w_j`` at every sorted position (``w`` in sorted order)."""
        prefix = exclusive_cumsum(weights_sorted)
        return prefix[self.first] - (prefix[-1] - prefix[self.stop])


def dominance_sums(rank: np.ndarray, weight: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Counts and weighted sums over dominated predecessors (Huo-Szekely 2016, sec 3).

    ``count[p] = #{p' < p : rank[p'] < rank[p]}`` and ``weighted[p]`` the sum of ``weight[p']`` over the
    same set, ``rank`` a permutation of ``0..n-1``; returns two float64 arrays.

    Padded to ``N = 2^L`` with dummy ranks after every real element, each pair ``rank[p'] < rank[p]`` has
    a highest differing bit ``l``, within the group ``rank >> (l + 1)``. Arranged by
    ``(rank >> (l + 1), position)`` the groups fill contiguous slots, so a within-group prefix sum of the
    bit-0 weights read at the bit-1 members adds every level-``l`` pair once; a stable partition on bit
    ``l`` gives the next level's arrangement. All buffers are preallocated.
    """
    rank = np.asarray(rank, dtype=np.int64)
    n = rank.shape[0]
    if n < 2:
        return np.zeros(n), np.zeros(n)
    levels = int(n - 1).bit_length()
    size_total = 1 << levels
    slot = np.arange(size_total, dtype=np.int64)
    ranks = slot.copy()
    ranks[:n] = rank
    weights = np.zeros(size_total)
    weights[:n] = weight
    count = np.zeros(size_total)
    weighted = np.zeros(size_total)
    spare = {name: np.empty_like(arr) for name, arr in
             (("ranks", ranks), ("weights", weights), ("count", count), ("weighted", weighted))}
    is_one = np.empty(size_total, dtype=np.int64)
    is_zero = np.empty(size_total, dtype=np.int64)
    zero_mask = np.empty(size_total, dtype=bool)
    zeros_before = np.empty(size_total, dtype=np.int64)
    target = np.empty(size_total, dtype=np.int64)
    target_zero = np.empty(size_total, dtype=np.int64)
    prefix_count = np.zeros(size_total + 1, dtype=np.int64)
    prefix_weight = np.zeros(size_total + 1)
    weight_zero = np.empty(size_total)
    weight_before = np.empty(size_total)
    for level in range(levels - 1, -1, -1):
        group = (size_total >> (level + 1), 1 << (level + 1))
        np.right_shift(ranks, level, out=is_one)
        np.bitwise_and(is_one, 1, out=is_one)
        np.bitwise_xor(is_one, 1, out=is_zero)
        # within-group exclusive prefix sums of the bit-0 members (count and weight)
        np.cumsum(is_zero, out=prefix_count[1:])
        by_group = prefix_count[:-1].reshape(group)
        np.subtract(by_group, by_group[:, :1], out=zeros_before.reshape(group))
        np.multiply(weights, is_zero, out=weight_zero)
        np.cumsum(weight_zero, out=prefix_weight[1:])
        by_group_w = prefix_weight[:-1].reshape(group)
        np.subtract(by_group_w, by_group_w[:, :1], out=weight_before.reshape(group))
        np.multiply(zeros_before, is_one, out=target)
        np.add(count, target, out=count)
        np.multiply(weight_before, is_one, out=weight_before)
        np.add(weighted, weight_before, out=weighted)
        # stable partition: bit-0 members to the first half of the group, bit-1 to the second
        np.bitwise_and(slot, ~np.int64(group[1] - 1), out=target_zero)
        np.add(target_zero, zeros_before, out=target_zero)
        np.add(slot, 1 << level, out=target)
        np.subtract(target, zeros_before, out=target)
        np.equal(is_zero, 1, out=zero_mask)
        np.copyto(target, target_zero, where=zero_mask)
        spare["ranks"][target] = ranks
        spare["weights"][target] = weights
        spare["count"][target] = count
        spare["weighted"][target] = weighted
        ranks, spare["ranks"] = spare["ranks"], ranks
        weights, spare["weights"] = spare["weights"], weights
        count, spare["count"] = spare["count"], count
        weighted, spare["weighted"] = spare["weighted"], weighted
    return count[rank], weighted[rank]
