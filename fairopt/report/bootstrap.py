"""Per-group statistics and their stratified percentile bootstrap (vectorised numpy).

Every statistic of :func:`fairopt.group_report` is a group mean of row values over some rows,
optionally rooted: ``m_g = mean{ v_i : codes_i = g, r_i }`` (``sqrt(m_g)`` for RMSE), with ``r``
all rows, ``y = 1`` (TPR) or ``y = 0`` (FPR). The bootstrap is
:func:`fairopt.measures.bootstrap.resample_chunks` with the groups as strata: group sizes are
fixed, the rows with ``y = 1`` inside a group are not (a replicate without any gives NaN, left out
of the quantiles). Each statistic of a chunk is one ``numpy.add.reduceat`` over the groups' draws.

With row weights ``w`` every mean is the weighted one, ``m_g = sum w_i v_i / sum w_i`` over the same rows,
and a replicate's rows carry their weights with them.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from fairopt.measures.bootstrap import resample_chunks, stratum_starts
from fairopt.measures.group import group_means

__all__ = ["RowStatistic", "point_estimates", "bootstrap_replicates"]


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
        What ``rows`` selects, for messages (e.g. ``"y = 1"``).
    indicator : bool
        ``values`` are 0/1 outcomes (a classifier's rates and accuracy), so ``m_g`` is a binomial proportion.
    """

    name: str
    values: np.ndarray
    rows: np.ndarray | None = None
    root: bool = False
    condition: str = ""
    indicator: bool = False

    def counts(self, codes: np.ndarray, n_groups: int) -> np.ndarray:
        """Rows the statistic averages over, per group."""
        chosen = codes if self.rows is None else codes[self.rows]
        return np.bincount(chosen, minlength=n_groups)


def _finish(means: np.ndarray, root: bool) -> np.ndarray:
    return np.sqrt(means) if root else means


def point_estimates(stat: RowStatistic, codes: np.ndarray, n_groups: int,
                    weights: np.ndarray | None = None) -> tuple[np.ndarray, float]:
    """``(m_g per group, overall value)`` on the data itself (weighted by ``weights`` when given); NaN for a
    group (or all) without selected rows or weight."""
    rows = slice(None) if stat.rows is None else stat.rows
    values, chosen = stat.values[rows], codes[rows]
    w = None if weights is None else weights[rows]
    per_group = np.full(n_groups, np.nan)
    if values.size:
        for g, mean in group_means(values, chosen, w).items():
            per_group[int(g)] = mean
    if w is None:
        overall = float(values.mean()) if values.size else float("nan")
    else:
        overall = float(np.dot(w, values) / w.sum()) if w.sum() > 0 else float("nan")
    return _finish(per_group, stat.root), float(_finish(np.asarray(overall), stat.root))


def bootstrap_replicates(stats: list[RowStatistic], codes: np.ndarray, n_groups: int, n_bootstrap: int,
                         seed: int | None,
                         weights: np.ndarray | None = None) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Stratified bootstrap replicates of every statistic: ``name -> (per_group, overall)`` of shapes
    ``(n_bootstrap, n_groups)`` and ``(n_bootstrap,)``, NaN where a replicate selects no row (or weight) of a
    group; weighted means with ``weights``.
    """
    sizes, starts = stratum_starts(codes, n_groups)
    result = {s.name: (np.empty((n_bootstrap, n_groups)), np.empty(n_bootstrap)) for s in stats}
    masses = {s.name: _mass(s, weights, codes.shape[0]) for s in stats}  # once, not per chunk of replicates
    for b0, b1, rows in resample_chunks(codes, n_groups, n_bootstrap, seed):
        for s in stats:
            mass = masses[s.name]
            if mass is None:
                sums = np.add.reduceat(s.values[rows], starts, axis=1)
                counts = np.broadcast_to(sizes.astype(np.float64), sums.shape)
            else:
                sums = np.add.reduceat(mass[1][rows], starts, axis=1)
                counts = np.add.reduceat(mass[0][rows], starts, axis=1)
            with np.errstate(invalid="ignore", divide="ignore"):
                group = np.where(counts > 0, sums / counts, np.nan)
                total = np.where(counts.sum(axis=1) > 0, sums.sum(axis=1) / counts.sum(axis=1), np.nan)
            result[s.name][0][b0:b1] = _finish(group, s.root)
            result[s.name][1][b0:b1] = _finish(total, s.root)
    return result


def _mass(stat: RowStatistic, weights: np.ndarray | None, n: int) -> tuple[np.ndarray, np.ndarray] | None:
    """``(m, m * values)`` with ``m_i`` the weight row ``i`` carries into ``stat``'s means (its weight, 0 for a
    row the statistic does not select), None when every row counts once (a plain mean)."""
    if stat.rows is None and weights is None:
        return None
    mass = np.ones(n) if weights is None else weights
    if stat.rows is not None:
        mass = np.where(stat.rows, mass, 0.0)
    return mass, mass * stat.values
