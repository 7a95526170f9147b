"""Distribution-level unfairness across intersectional cells: UF and JS divergence ([DC] sec 4.2).

Cells are the occurring intersections of the sensitive features; a continuous feature is first cut
into ``n_quantiles`` equal-count bins ([DC] sec 4.2.3; sec 5.1 uses tertiles). Without ``kinds`` a
feature's kind follows ``FairData``'s dtypes: integer, boolean, string and object arrays are
categorical, floating ones binary when all values are 0/1 and continuous otherwise (pass ``kinds`` for
float-coded categories).
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass
from typing import Any, Callable, Sequence

import numpy as np

from fairopt._validation import check_same_length, check_seed, positive_int, to_numpy
from fairopt.measures.group import bin_equal_width, bin_quantiles, encode_groups, require_groups
from fairopt.measures.performance import float_vector

__all__ = ["intersection_cells", "uf", "js_divergence", "js_divergence_floor", "JSDivergenceFloor"]

logger = logging.getLogger(__name__)

KINDS = ("binary", "categorical", "continuous")


def _infer_kind(values: Any) -> str:
    """Kind of a sensitive feature from its dtype (module doc)."""
    arr = to_numpy(values)
    if arr.dtype.kind != "f":
        return "categorical"
    finite = arr[np.isfinite(arr)]
    return "binary" if np.isin(finite, (0.0, 1.0)).all() else "continuous"


def _feature_codes(values: Any, kind: str, n_quantiles: int, name: str) -> np.ndarray:
    """Group codes of one sensitive feature (quantile bins for a continuous one)."""
    if kind == "continuous":
        return bin_quantiles(values, n_quantiles, name)
    return encode_groups(values, name)[0]


def intersection_cells(*sensitive: Any, kinds: Sequence[str] | None = None, n_quantiles: int = 3) -> np.ndarray:
    """Intersection cell of every row across one or more sensitive features.

    Parameters
    ----------
    *sensitive : array-like of shape (n,)
        Sensitive features (or precomputed cell ids).
    kinds : sequence of str, optional
        "binary", "categorical" or "continuous" per feature; inferred by default (module doc).
    n_quantiles : int
        Equal-count bins for a continuous feature.

    Returns
    -------
    numpy.ndarray of int64, shape (n,)
        Cell ids ``0 .. C-1`` of the occurring combinations, in lexicographic order of the codes.
    """
    if not sensitive:
        raise ValueError("sensitive: at least one sensitive feature is required")
    if kinds is None:
        kinds = [_infer_kind(s) for s in sensitive]
    elif isinstance(kinds, str) or len(kinds) != len(sensitive):
        raise ValueError(f"kinds: expected one kind per sensitive feature ({len(sensitive)}), got {kinds!r}")
    bad = [k for k in kinds if k not in KINDS]
    if bad:
        raise ValueError(f"kinds: expected values in {KINDS}, got {bad[0]!r}")
    names = ["sensitive" if len(sensitive) == 1 else f"sensitive[{j}]" for j in range(len(sensitive))]
    codes = [_feature_codes(s, k, n_quantiles, nm) for s, k, nm in zip(sensitive, kinds, names)]
    check_same_length(**dict(zip(names, codes)))
    _, cells = np.unique(np.stack(codes, axis=1), axis=0, return_inverse=True)
    return cells.reshape(-1).astype(np.int64)


def _pred_and_cells(pred: Any, sensitive: tuple, kinds: Sequence[str] | None, n_quantiles: int) -> tuple[np.ndarray, np.ndarray, int]:
    """Validated predictions, cell ids (>= 2 cells) and the number of cells."""
    values = float_vector(pred, "pred")
    cells = intersection_cells(*sensitive, kinds=kinds, n_quantiles=n_quantiles)
    check_same_length(pred=values, sensitive=cells)
    n_cells = int(cells.max()) + 1
    require_groups(np.arange(n_cells), "sensitive")
    return values, cells, n_cells


def uf(pred: Any, *sensitive: Any, kinds: Sequence[str] | None = None, n_quantiles: int = 3) -> float:
    """Demographic unfairness ``UF = Var(E[yhat | cell]) / Var(yhat)`` ([DC] eq. 4.1).

    With population variances the numerator is the between-cell term of the law of total variance,
    ``sum_s (n_s / n) (mean_s - mean)^2``, so ``0 <= UF <= 1``; constant predictions give 0.0.

    Parameters
    ----------
    pred : array-like of shape (n,)
        Predictions on the response scale.
    *sensitive : array-like of shape (n,)
        Cell ids or several sensitive features (:func:`intersection_cells`); >= 2 cells.
    kinds, n_quantiles
        As in :func:`intersection_cells`.
    """
    values, cells, n_cells = _pred_and_cells(pred, sensitive, kinds, n_quantiles)
    counts = np.bincount(cells, minlength=n_cells)
    cell_means = np.bincount(cells, weights=values, minlength=n_cells) / counts
    mean = values.mean()
    total = float(np.mean((values - mean) ** 2))
    if total == 0.0:
        return 0.0
    between = float(np.sum(counts / values.size * (cell_means - mean) ** 2))
    return between / total


def js_divergence(
    pred: Any,
    *sensitive: Any,
    bins: int | Sequence[float] | np.ndarray = 10,
    n_quantiles: int = 3,
    kinds: Sequence[str] | None = None,
    base: float = math.e,
) -> float:
    """Generalised Jensen-Shannon divergence of the prediction distributions across cells ([DC] eq. 4.4).

    ``D_JS = sum_s pi_s KL(P(yhat | s) || P(yhat))`` with ``pi_s = n_s / n``, on histograms of ``yhat``
    over common equal-width bins. The pooled histogram is the ``pi``-mixture of the cell histograms, so
    this is Lin's (1991) ``H(P) - sum_s pi_s H(P_s)``, finite without smoothing; in bits it lies in
    ``[0, log2(#cells)]``. The default natural log is an assumption: [DC] gives no base.

    The plug-in estimate is the empirical mutual information between binned prediction and cell, biased
    upwards: under independence ``2 n D_JS`` (nats) is the G statistic of the ``B x C`` table, about
    chi-square with ``(B - 1)(C - 1)`` degrees of freedom, so the floor is about ``(B - 1)(C - 1) / (2 n)``
    nats (:func:`js_divergence_floor` simulates it; permuting ``pred`` gives the floor of one's own data).

    Parameters
    ----------
    pred : array-like of shape (n,)
        Predictions on the response scale.
    *sensitive : array-like of shape (n,)
        Cell ids or several sensitive features (:func:`intersection_cells`); >= 2 cells.
    bins : int or sequence of float
        Equal-width bins over ``[min yhat, max yhat]``, or explicit edges (outside values go to the end bins).
    n_quantiles : int
        Equal-count bins for a continuous sensitive feature.
    kinds : sequence of str, optional
        Kinds of the sensitive features (:func:`intersection_cells`).
    base : float
        Logarithm base (> 0, != 1).

    Returns
    -------
    float
        ``>= 0`` (rounding below 0 is clipped); lower is fairer.
    """
    if not (isinstance(base, (int, float)) and math.isfinite(base) and base > 0 and base != 1):
        raise ValueError(f"base: expected a positive logarithm base other than 1, got {base!r}")
    values, cells, n_cells = _pred_and_cells(pred, sensitive, kinds, n_quantiles)
    value_bins, edges = bin_equal_width(values, bins, "pred")
    n_bins = edges.size - 1
    joint = np.bincount(cells * n_bins + value_bins, minlength=n_cells * n_bins).reshape(n_cells, n_bins)
    cell_sizes = joint.sum(axis=1, keepdims=True)
    conditional = joint / cell_sizes
    pooled = joint.sum(axis=0) / values.size
    weights = cell_sizes[:, 0] / values.size
    with np.errstate(divide="ignore", invalid="ignore"):
        log_ratio = np.where(joint > 0, np.log(conditional / pooled[None, :]), 0.0)
    kl = np.sum(conditional * log_ratio, axis=1)
    return max(float(np.sum(weights * kl)) / math.log(base), 0.0)


@dataclass(frozen=True)
class JSDivergenceFloor:
    """The finite-sample floor of :func:`js_divergence` (:func:`js_divergence_floor`).

    ``mean`` is the floor, ``std`` (ddof 1) and ``quantile_95`` describe the simulated values, and
    ``approximation`` is ``(bins - 1)(n_cells - 1) / (2 n ln(base))``.
    """

    n: int
    bins: int
    n_cells: int
    mean: float
    std: float
    quantile_95: float
    approximation: float
    n_simulations: int


_SAMPLERS: dict[str, Callable[[np.random.Generator, int], np.ndarray]] = {
    "uniform": lambda rng, n: rng.uniform(size=n),
    "normal": lambda rng, n: rng.standard_normal(n),
}


def js_divergence_floor(
    n: int,
    bins: int = 10,
    cells: int | Sequence[float] = 2,
    *,
    n_simulations: int = 200,
    seed: int | None = 0,
    base: float = math.e,
    sampler: str | Callable[[np.random.Generator, int], np.ndarray] = "uniform",
) -> JSDivergenceFloor:
    """Simulated value of :func:`js_divergence` for predictions independent of the cells.

    Each simulation draws ``n`` predictions from ``sampler`` and, independently, ``n`` cell labels with
    the given proportions, and evaluates :func:`js_divergence`; the population value is 0, so the mean is
    the estimator's floor at this ``n``.

    Parameters
    ----------
    n : int
        Sample size, >= 2.
    bins : int, default 10
        Equal-width bins of the predictions.
    cells : int or sequence of float, default 2
        Number of equally likely cells (>= 2), or cell proportions (normalised to sum 1).
    n_simulations : int, default 200
    seed : int or None, default 0
        Seed of ``numpy.random.default_rng``.
    base : float, default e
        Logarithm base.
    sampler : {"uniform", "normal"} or callable, default "uniform"
        ``callable(rng, n) -> array``; it matters only through how evenly the bins are filled.
    """
    n = positive_int(n, "n")
    if n < 2:
        raise ValueError(f"n: expected at least 2 rows, got {n}")
    bins = positive_int(bins, "bins")
    n_simulations = positive_int(n_simulations, "n_simulations")
    if isinstance(cells, (int, np.integer)) and not isinstance(cells, bool):
        if cells < 2:
            raise ValueError(f"cells: expected at least 2 cells, got {cells}")
        proportions = np.full(int(cells), 1.0 / int(cells))
    else:
        proportions = float_vector(cells, "cells")
        if proportions.size < 2 or (proportions <= 0).any():
            raise ValueError(f"cells: expected >= 2 positive proportions, got {proportions.tolist()}")
        proportions = proportions / proportions.sum()
    draw = _SAMPLERS.get(sampler) if isinstance(sampler, str) else sampler
    if not callable(draw):
        raise ValueError(f"sampler: expected one of {sorted(_SAMPLERS)} or a callable (rng, n) -> array, "
                         f"got {sampler!r}")
    rng = np.random.default_rng(check_seed(seed))
    values = []
    for _ in range(n_simulations):
        pred = float_vector(draw(rng, n), "sampler output")
        labels = rng.choice(proportions.size, size=n, p=proportions)
        if np.unique(labels).size < 2:  # a single occupied cell: the divergence is 0
            values.append(0.0)
            continue
        values.append(js_divergence(pred, labels, bins=bins, kinds=["categorical"], base=base))
    values_array = np.asarray(values)
    approximation = (bins - 1) * (proportions.size - 1) / (2.0 * n * math.log(base))
    return JSDivergenceFloor(
        n=n, bins=bins, n_cells=int(proportions.size), mean=float(values_array.mean()),
        std=float(values_array.std(ddof=1)) if n_simulations > 1 else 0.0,
        quantile_95=float(np.quantile(values_array, 0.95)), approximation=approximation,
        n_simulations=n_simulations,
    )
