"""The one bootstrap of the package: seeded (optionally stratified) resamples of row indices and
their percentile intervals.

A replicate draws, for every stratum ``g`` with ``n_g`` rows, ``n_g`` of that stratum's rows
uniformly with replacement, independently of the other strata, so stratum sizes stay as in the
data (one stratum: the ordinary bootstrap of ``n`` rows out of ``n``). The rows are sorted by
stratum once; replicate ``b`` is an ``(n,)`` vector whose position ``j``, of stratum ``g(j)``,
holds the row ``order[start_g + floor(u_j n_g)]`` with ``u_j ~ U[0, 1)``: each stratum's draws
are contiguous, starting at ``start_g``, so per-stratum sums of a whole chunk of replicates are
one ``numpy.add.reduceat`` along the rows. Replicates come in chunks of about
:data:`CHUNK_ELEMENTS` positions (memory stays bounded for large ``n``), from one
``numpy.random.default_rng(seed)`` in a fixed order: the same seed gives the same resamples.

Users: :func:`fairopt.group_report`'s per-group intervals (strata = groups) and the held-out
certificates and margins of GeDI, distance covariance and covariance bounds
(:mod:`fairopt.certificate`, one stratum).
"""

from __future__ import annotations

import warnings
from typing import Iterator

import numpy as np

__all__ = ["CHUNK_ELEMENTS", "stratum_starts", "resample_chunks", "percentile_interval"]

#: Bootstrap positions drawn at once (replicates x rows), about 16 MB of int64 per chunk.
CHUNK_ELEMENTS = 2_000_000


def stratum_starts(codes: np.ndarray, n_strata: int) -> tuple[np.ndarray, np.ndarray]:
    """``(sizes, starts)``: rows per stratum and the first position of each stratum in a replicate.

    Raises
    ------
    ValueError
        When a stratum has no row (nothing to draw from).
    """
    sizes = np.bincount(codes, minlength=n_strata)
    if (sizes == 0).any():
        raise ValueError("bootstrap: every group needs at least one row")
    return sizes, np.concatenate([[0], np.cumsum(sizes)[:-1]])


def resample_chunks(codes: np.ndarray, n_strata: int, n_bootstrap: int,
                    seed: int | None) -> Iterator[tuple[int, int, np.ndarray]]:
    """Stratified bootstrap resamples, chunk by chunk (module docstring).

    Parameters
    ----------
    codes : numpy.ndarray of int, shape (n,)
        Stratum of every row, in ``0 .. n_strata - 1`` (all zeros: the unstratified bootstrap).
    n_strata : int
    n_bootstrap : int
        Replicates in all.
    seed : int or None
        Seed of ``numpy.random.default_rng``.

    Yields
    ------
    (b0, b1, rows)
        Replicates ``b0 .. b1 - 1``; ``rows`` of shape ``(b1 - b0, n)`` holds the drawn row
        indices, stratum ``g``'s at positions ``starts[g] .. starts[g] + n_g - 1``
        (:func:`stratum_starts`).
    """
    codes = np.asarray(codes, dtype=np.int64)
    n = codes.size
    sizes, starts = stratum_starts(codes, n_strata)
    order = np.argsort(codes, kind="stable")
    stratum_of_position = np.repeat(np.arange(n_strata), sizes)
    first, size = starts[stratum_of_position], sizes[stratum_of_position]
    rng = np.random.default_rng(seed)
    per_chunk = max(1, CHUNK_ELEMENTS // max(n, 1))
    for b0 in range(0, n_bootstrap, per_chunk):
        b1 = min(n_bootstrap, b0 + per_chunk)
        draws = np.minimum((rng.random((b1 - b0, n)) * size).astype(np.int64), size - 1)
        yield b0, b1, order[first + draws]


def percentile_interval(replicates: np.ndarray, confidence: float, sides: int = 2) -> tuple[np.ndarray, np.ndarray]:
    """Percentile interval ``[q_t, q_{1-t}]``, ``t = (1 - confidence) / sides``, of the replicates
    along axis 0.

    ``sides = 2`` is the two-sided interval at ``confidence``; a certificate of ``k`` finite
    bounds takes ``sides = k`` so that each one-sided statement holds at ``1 - (1 - c) / k`` and
    all of them together at ``c`` (union bound). NaN replicates are left out; NaN where none is
    finite.
    """
    replicates = np.asarray(replicates, dtype=float)
    if replicates.shape[0] == 0:
        shape = replicates.shape[1:]
        return np.full(shape, np.nan), np.full(shape, np.nan)
    tail = (1.0 - confidence) / max(int(sides), 1)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # all-NaN columns: NaN, no warning
        low, high = np.nanquantile(replicates, [tail, 1.0 - tail], axis=0)
    return low, high
