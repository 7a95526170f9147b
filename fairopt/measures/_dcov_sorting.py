"""Sorting primitives behind the O(n log n) distance-covariance paths.

Two building blocks, both vectorised numpy with no Python loop over the n samples:

* :class:`TiedOrder` sorts a sample once and records, for every sorted position, the
  tie block it belongs to. With it, "how many / how much of the sample lies strictly
  below / strictly above x_k" is a lookup into a prefix sum, which is what makes
  ``sign(x_k - x_j)`` with ``sign(0) = 0`` exact under ties.
* :func:`dominance_sums` gives, for every position ``p`` of a sequence, the count and the
  weighted sum of the earlier positions whose rank is smaller: the 2-D dominance sums of
  the Huo-Szekely (2016) algorithm. It is a most-significant-bit-first radix partition
  over the rank bits: one pass of O(n) array operations per bit, ``ceil(log2 n)`` passes.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = ["TiedOrder", "dominance_sums", "exclusive_cumsum"]


def exclusive_cumsum(values: np.ndarray) -> np.ndarray:
    """Prefix sums with a leading zero along axis 0: ``out[p] = sum(values[:p])``.

    The result has ``len(values) + 1`` rows, so ``out[b] - out[a]`` is the sum over
    the half-open range ``[a, b)``.
    """
    out = np.zeros((values.shape[0] + 1,) + values.shape[1:], dtype=np.float64)
    np.cumsum(values, axis=0, out=out[1:])
    return out


@dataclass(frozen=True)
class TiedOrder:
    """A sample sorted ascending, with the tie block of every sorted position.

    Attributes
    ----------
    order : ndarray of int64, shape (n,)
        Permutation that sorts the sample: ``values = sample[order]``.
    values : ndarray of float64, shape (n,)
        The sorted sample.
    first : ndarray of int64, shape (n,)
        ``first[p]`` is the first sorted position holding ``values[p]``; it is also the
        number of sample points strictly below ``values[p]``.
    stop : ndarray of int64, shape (n,)
        One past the last sorted position holding ``values[p]``; ``n - stop[p]`` is the
        number of sample points strictly above ``values[p]``.
    """

    order: np.ndarray
    values: np.ndarray
    first: np.ndarray
    stop: np.ndarray

    @classmethod
    def of(cls, sample: np.ndarray, order: np.ndarray | None = None) -> "TiedOrder":
        """Sort ``sample`` (1-D float64); ``order`` may be supplied if already known.

        A supplied ``order`` must sort ``sample`` ascending (ties in any order), e.g. a
        lexicographic order with a secondary key.
        """
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

    For every position ``p`` of a sequence::

        count[p]    = #{p' < p : rank[p'] < rank[p]}
        weighted[p] = sum_{p' < p, rank[p'] < rank[p]} weight[p']

    Parameters
    ----------
    rank : ndarray of int, shape (n,)
        A permutation of ``0..n-1`` (ordinal ranks, ties already broken).
    weight : ndarray of float64, shape (n,)

    Returns
    -------
    (count, weighted) : two float64 arrays of shape (n,)

    Notes
    -----
    The sequence is padded to ``N = 2^L >= n`` with dummy elements of rank ``n..N-1``
    placed after every real one (they never precede a real element, so they never
    contribute). A pair ``rank[p'] < rank[p]`` has a highest differing rank bit ``l``:
    both ranks lie in the same *group* ``rank >> (l + 1)``, ``p'`` has bit ``l`` equal to
    0 and ``p`` has it equal to 1. Keeping the elements arranged by
    ``(rank >> (l + 1), position)``, group ``g`` fills exactly the slots
    ``[g 2^(l+1), (g+1) 2^(l+1))`` (the ranks are a permutation of ``0..N-1``), so a
    within-group prefix sum of the bit-0 weights, read at the bit-1 members, adds every
    pair of level ``l`` exactly once. A stable partition on bit ``l`` (prefix counts, no
    sort) gives the arrangement of level ``l - 1``; after level 0 slot ``s`` holds rank
    ``s``. Cost: ``L = ceil(log2 n)`` levels of O(N) array operations, all on
    preallocated buffers (a fresh 8 MB allocation per operation would cost more than
    the arithmetic).
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
