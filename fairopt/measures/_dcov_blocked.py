"""Exact O(n^2) streaming kernels for sensitive features without a fast structure.

The n x n matrices are produced a block of rows at a time and never held whole: a block
has at most ``max_elements`` entries (default 2^22, 32 MB of float64), so for every
``n > 2048`` a block is strictly smaller than the full matrix. U-centring needs the row
sums of the matrix being centred; they are computed by one streaming pass at
construction ("precomputed row means"), after which any block of the
centred matrix is a broadcast away.

Row sources (``rows(a, b)`` returns rows ``a:b`` of a symmetric zero-diagonal matrix):

* :class:`DistanceRows` - Euclidean distances of a sample;
* :class:`CentredRows` - the U-centred version of another source [DC eq A.7];
* :class:`ProductRows` - ``prod_i (c + U_i)`` with Chakraborty-Zhang's sign convention
  ``U_i = -(U-centred matrix i)``, diagonal zero (the JdCov~^2 summand).
"""

from __future__ import annotations

from typing import Iterator, Protocol, Sequence

import numpy as np

from fairopt.measures._dcov_kernels import DistanceKernel, pairwise_distances

__all__ = ["DEFAULT_MAX_BLOCK_ELEMENTS", "block_rows", "row_blocks", "DistanceRows", "CentredRows",
           "ProductRows", "BlockedKernel"]

DEFAULT_MAX_BLOCK_ELEMENTS = 1 << 22


def block_rows(n: int, max_elements: int = DEFAULT_MAX_BLOCK_ELEMENTS) -> int:
    """Rows per block so that a block of an n x n matrix holds at most ``max_elements``."""
    return max(1, min(n, max_elements // max(n, 1)))


def row_blocks(n: int, rows: int) -> Iterator[tuple[int, int]]:
    """Half-open row ranges ``(a, b)`` of at most ``rows`` rows covering ``0..n``."""
    for start in range(0, n, rows):
        yield start, min(n, start + rows)


def _zero_diagonal(block: np.ndarray, start: int) -> np.ndarray:
    local = np.arange(block.shape[0])
    block[local, start + local] = 0.0
    return block


class RowSource(Protocol):
    n: int

    def rows(self, start: int, stop: int) -> np.ndarray: ...


class DistanceRows:
    """Rows of the Euclidean distance matrix ``|s_i - s_j|`` of a sample (n, q)."""

    def __init__(self, s: np.ndarray) -> None:
        self.s = np.asarray(s, dtype=np.float64)
        self.n = int(self.s.shape[0])

    def rows(self, start: int, stop: int) -> np.ndarray:
        return _zero_diagonal(pairwise_distances(self.s[start:stop], self.s), start)


class CentredRows:
    """Rows of the U-centred version of ``source`` [DC eq A.7], row sums precomputed.

    ``A~_kl = A_kl - r_k/(n-2) - r_l/(n-2) + t/((n-1)(n-2))`` off the diagonal, 0 on it,
    with ``r`` the row sums and ``t`` the total of ``A`` (diagonal of ``A`` taken as 0).
    """

    def __init__(self, source: RowSource, rows_per_block: int) -> None:
        self.source = source
        self.n = source.n
        self.rows_per_block = rows_per_block
        self.row_sums = np.empty(self.n)
        for start, stop in row_blocks(self.n, rows_per_block):
            self.row_sums[start:stop] = source.rows(start, stop).sum(axis=1)
        self.total = float(self.row_sums.sum())

    def rows(self, start: int, stop: int) -> np.ndarray:
        return self._centre(self.source.rows(start, stop), start, stop)

    def raw_and_centred_rows(self, start: int, stop: int) -> tuple[np.ndarray, np.ndarray]:
        raw = self.source.rows(start, stop)
        return raw, self._centre(raw.copy(), start, stop)

    def _centre(self, block: np.ndarray, start: int, stop: int) -> np.ndarray:
        n = self.n
        block -= self.row_sums[start:stop, None] / (n - 2.0)
        block -= self.row_sums[None, :] / (n - 2.0)
        block += self.total / ((n - 1.0) * (n - 2.0))
        return _zero_diagonal(block, start)


class ProductRows:
    """Rows of ``P_kl = prod_i (c - A~_i(k, l))`` off the diagonal, 0 on it.

    ``-A~_i`` is Chakraborty and Zhang's ``U_i``, so ``P`` is the summand of their
    bias-corrected JdCov~^2 with the diagonal removed.
    """

    def __init__(self, factors: Sequence[CentredRows], c: float) -> None:
        self.factors = list(factors)
        self.c = float(c)
        self.n = self.factors[0].n

    def rows(self, start: int, stop: int) -> np.ndarray:
        product = self.c - self.factors[0].rows(start, stop)
        for factor in self.factors[1:]:
            product *= self.c - factor.rows(start, stop)
        return _zero_diagonal(product, start)


class BlockedKernel(DistanceKernel):
    """``W = scale * A~`` streamed from a :class:`CentredRows`: O(n^2) time, O(block) memory.

    ``G_k = scale * sum_j sign(x_k - x_j) A~_kj`` is accumulated block by block.
    """

    def __init__(self, centred: CentredRows, scale: float = 1.0) -> None:
        self.centred = centred
        self.scale = float(scale)
        self.n = centred.n

    @classmethod
    def for_sample(cls, s: np.ndarray, rows_per_block: int) -> "BlockedKernel":
        """The U-centred distance kernel B~ of the sample ``s`` (n, q)."""
        return cls(CentredRows(DistanceRows(s), rows_per_block))

    def signed_row_sums(self, x: np.ndarray) -> np.ndarray:
        out = np.empty(self.n)
        for start, stop in row_blocks(self.n, self.centred.rows_per_block):
            signs = np.sign(x[start:stop, None] - x[None, :])
            out[start:stop] = np.einsum("ij,ij->i", signs, self.centred.rows(start, stop))
        return self.scale * out

    def self_inner(self) -> float:
        """dVar~^2(s) = (1/(n(n-3))) sum_{k != l} |s_k - s_l| B~_kl, streamed."""
        total = 0.0
        for start, stop in row_blocks(self.n, self.centred.rows_per_block):
            raw, centred = self.centred.raw_and_centred_rows(start, stop)
            total += float(np.einsum("ij,ij->", raw, centred))
        return self.scale * total / (self.n * (self.n - 3.0))
