"""The one bootstrap of the package: seeded, optionally stratified resamples of row indices and their
percentile intervals.

A replicate draws ``n_g`` rows of each stratum ``g`` uniformly with replacement, so stratum sizes stay
as in the data (one stratum: the ordinary bootstrap). Each stratum's draws are contiguous from
``start_g``, so per-stratum sums over a chunk of replicates are one ``numpy.add.reduceat``. Chunks of
about :data:`CHUNK_ELEMENTS` positions bound memory; one ``default_rng(seed)`` in a fixed order makes
the resamples reproducible. Used by :func:`fairopt.group_report` (strata = groups) and
:mod:`fairopt.certificate` (one stratum).
"""

from __future__ import annotations

import warnings
from typing import Iterator

import numpy as np

__all__ = ["CHUNK_ELEMENTS", "stratum_starts", "resample_chunks", "percentile_interval"]

#: Bootstrap positions drawn at once (replicates x rows), about 16 MB of int64 per chunk.
CHUNK_ELEMENTS = 2_000_000


def stratum_starts(codes: np.ndarray, n_strata: int) -> tuple[np.ndarray, np.ndarray]:
    """``(sizes, starts)``: rows per stratum and each stratum's first position in a replicate (``ValueError``
    for an empty stratum).
    """
    sizes = np.bincount(codes, minlength=n_strata)
    if (sizes == 0).any():
        raise ValueError("bootstrap: every group needs at least one row")
    return sizes, np.concatenate([[0], np.cumsum(sizes)[:-1]])


def resample_chunks(codes: np.ndarray, n_strata: int, n_bootstrap: int,
                    seed: int | None) -> Iterator[tuple[int, int, np.ndarray]]:
    """Stratified bootstrap resamples, chunk by chunk: yields ``(b0, b1, rows)``.

    ``rows`` (``(b1 - b0, n)``) holds the drawn row indices of replicates ``b0 .. b1 - 1``, stratum ``g``'s
    at positions ``starts[g] .. starts[g] + n_g - 1``; ``codes`` (n,) gives every row's stratum
    (all zeros: unstratified).
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
    """Percentile interval ``[q_t, q_{1-t}]``, ``t = (1 - confidence) / sides``, of the replicates along axis 0.

    A certificate of ``k`` finite bounds takes ``sides = k``: each one-sided statement at
    ``1 - (1 - c) / k``, all together at ``c`` (union bound). NaN replicates are left out.
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
