"""Per-group statistics and their stratified percentile bootstrap (vectorised numpy).

Every statistic of :func:`fairopt.group_report` is a group mean of a per-row value over
a subset of the rows, optionally followed by a square root:

``m_g = mean{ v_i : codes_i = g, r_i }``  (``sqrt(m_g)`` for a root statistic: RMSE),

with ``v`` the row values (a hard prediction, ``1[pred = y]``, ``|y - pred|``, ...) and
``r`` the rows it is taken over (all rows; ``y = 1`` for the TPR; ``y = 0`` for the FPR).
The overall value is the same mean over all groups' rows.

The bootstrap (*stratified by group*): replicate ``b`` draws, for every group ``g`` with
``n_g`` rows, ``n_g`` of that group's rows uniformly with replacement, independently of the
other groups, and recomputes every statistic on those rows. Group sizes are therefore
fixed, as in the data; the number of rows with ``y = 1`` inside a group is not (a
replicate where a group draws none has an undefined TPR for that group: NaN, left out of
the quantiles). The ``(1 - confidence) / 2`` and ``(1 + confidence) / 2`` sample quantiles
of the replicates (numpy's default linear interpolation) are the percentile interval.

Implementation: the rows are sorted by group once; a replicate is an ``(n,)`` vector of
positions, position ``j`` of group ``g(j)`` drawing ``start_g + floor(u_j n_g)`` with
``u_j ~ U[0, 1)``, so that each group's draws stay contiguous and the group sums of a
whole chunk of replicates are one ``numpy.add.reduceat`` along the rows. Replicates are
drawn in chunks of about :data:`CHUNK_ELEMENTS` positions (memory stays bounded for large
``n``), from one ``numpy.random.default_rng(seed)`` in a fixed order: the same seed gives
the same intervals.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass

import numpy as np

from fairopt.measures.group import group_means

__all__ = ["RowStatistic", "CHUNK_ELEMENTS", "point_estimates", "bootstrap_replicates", "percentile_interval",
           "ratio_and_difference"]

#: Bootstrap positions drawn at once (replicates x rows), about 16 MB of int64 per chunk.
CHUNK_ELEMENTS = 2_000_000


@dataclass(frozen=True)
class RowStatistic:
    """A statistic ``m_g = mean{values_i : group g, rows_i}`` (``sqrt`` of it if ``root``).

    Attributes
    ----------
    name : str
    values : numpy.ndarray of float64, shape (n,)
    rows : numpy.ndarray of bool, shape (n,), or None
        The rows the mean is taken over; None: all rows.
    root : bool
        Report ``sqrt(m_g)`` (RMSE from the mean squared error).
    condition : str
        What ``rows`` selects, for messages (e.g. ``"y = 1"``); empty for all rows.
    """

    name: str
    values: np.ndarray
    rows: np.ndarray | None = None
    root: bool = False
    condition: str = ""

    def counts(self, codes: np.ndarray, n_groups: int) -> np.ndarray:
        """Rows the statistic averages over, per group."""
        chosen = codes if self.rows is None else codes[self.rows]
        return np.bincount(chosen, minlength=n_groups)


def _finish(means: np.ndarray, root: bool) -> np.ndarray:
    return np.sqrt(means) if root else means


def point_estimates(stat: RowStatistic, codes: np.ndarray, n_groups: int) -> tuple[np.ndarray, float]:
    """``(m_g per group, overall value)`` on the data itself.

    The group means are :func:`fairopt.measures.group_means` of the selected rows; a group
    with no selected row gets NaN (e.g. the TPR of a group without ``y = 1`` rows), as
    does the overall value when no row is selected.
    """
    values, chosen = (stat.values, codes) if stat.rows is None else (stat.values[stat.rows], codes[stat.rows])
    per_group = np.full(n_groups, np.nan)
    if values.size:
        for g, mean in group_means(values, chosen).items():
            per_group[int(g)] = mean
    overall = float(values.mean()) if values.size else float("nan")
    return _finish(per_group, stat.root), float(_finish(np.asarray(overall), stat.root))


def bootstrap_replicates(stats: list[RowStatistic], codes: np.ndarray, n_groups: int, n_bootstrap: int,
                         seed: int | None) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Stratified bootstrap replicates of every statistic (module docstring).

    Returns
    -------
    dict
        ``name -> (per_group, overall)`` with ``per_group`` of shape ``(n_bootstrap,
        n_groups)`` and ``overall`` of shape ``(n_bootstrap,)``; NaN where a replicate
        selects no row of a group.
    """
    n = codes.size
    sizes = np.bincount(codes, minlength=n_groups)
    if (sizes == 0).any():
        raise ValueError("bootstrap: every group needs at least one row")
    order = np.argsort(codes, kind="stable")
    starts = np.concatenate([[0], np.cumsum(sizes)[:-1]])
    group_of_position = np.repeat(np.arange(n_groups), sizes)
    first, size = starts[group_of_position], sizes[group_of_position]
    rng = np.random.default_rng(seed)
    result = {s.name: (np.empty((n_bootstrap, n_groups)), np.empty(n_bootstrap)) for s in stats}
    per_chunk = max(1, CHUNK_ELEMENTS // max(n, 1))
    for b0 in range(0, n_bootstrap, per_chunk):
        b1 = min(n_bootstrap, b0 + per_chunk)
        draws = np.minimum((rng.random((b1 - b0, n)) * size).astype(np.int64), size - 1)
        rows = order[first + draws]  # (chunk, n): the drawn rows, grouped by position
        for s in stats:
            if s.rows is None:
                sums = np.add.reduceat(s.values[rows], starts, axis=1)
                counts = np.broadcast_to(sizes.astype(np.float64), sums.shape)
            else:
                sums = np.add.reduceat(np.where(s.rows, s.values, 0.0)[rows], starts, axis=1)
                counts = np.add.reduceat(s.rows.astype(np.float64)[rows], starts, axis=1)
            with np.errstate(invalid="ignore", divide="ignore"):
                group = np.where(counts > 0, sums / counts, np.nan)
                total = np.where(counts.sum(axis=1) > 0, sums.sum(axis=1) / counts.sum(axis=1), np.nan)
            result[s.name][0][b0:b1] = _finish(group, s.root)
            result[s.name][1][b0:b1] = _finish(total, s.root)
    return result


def percentile_interval(replicates: np.ndarray, confidence: float) -> tuple[np.ndarray, np.ndarray]:
    """Percentile interval ``[q_{(1-c)/2}, q_{(1+c)/2}]`` of the replicates along axis 0
    (NaN replicates left out; NaN when none is finite)."""
    replicates = np.asarray(replicates, dtype=float)
    if replicates.shape[0] == 0:
        shape = replicates.shape[1:]
        return np.full(shape, np.nan), np.full(shape, np.nan)
    alpha = 1.0 - confidence
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # all-NaN columns: NaN, no warning
        low, high = np.nanquantile(replicates, [alpha / 2, 1 - alpha / 2], axis=0)
    return low, high


def ratio_and_difference(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``min_g / max_g`` and ``max_g - min_g`` along the last axis (groups).

    Any NaN group value gives NaN for both. The ratio is NaN when a value is negative (a
    ratio of signed quantities means nothing) and when every value is 0 (0/0: undefined,
    not "perfectly fair"); a 0 next to a positive value gives 0.
    """
    values = np.asarray(values, dtype=float)
    lo, hi = values.min(axis=-1), values.max(axis=-1)
    with np.errstate(invalid="ignore", divide="ignore"):
        ratio = np.where((lo >= 0) & (hi > 0), lo / np.where(hi > 0, hi, 1.0), np.nan)
    return ratio, hi - lo
