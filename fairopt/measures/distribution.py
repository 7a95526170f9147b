"""Distribution-level unfairness across intersectional cells: UF and JS divergence.

Lee, Antonio, Avanzi, Marchi, Zhou, "Machine Learning with Multitype Protected
Attributes: Intersectional Fairness through Regularisation" [DC] sec 4.2.

Cells are the intersections of the sensitive features: binary and categorical features
are used as they are; a continuous feature is first cut into ``n_quantiles`` equal-count
bins ([DC] sec 4.2.3 "we discretise the continuous attributes into intervals"; sec 5.1
uses the 33rd and 67th percentiles, i.e. ``n_quantiles = 3``). Only cells that occur in
the data count.

Kinds: ``kinds=`` gives each feature's kind ("binary", "categorical" or "continuous"), as
in ``FairData.sensitive_kinds``. When omitted it is inferred from the data contract's
dtypes (``FairData`` stores binary features as float 0/1, categorical ones as integer
codes and continuous ones as float values): integer, boolean, string and object arrays
are categorical; floating arrays are binary when every value is 0 or 1 and continuous
otherwise. Pass ``kinds`` for float-coded categories.

Finite-sample floor of the JS divergence: :func:`js_divergence` is a plug-in (histogram)
estimate and is positive even for predictions independent of the cells;
:func:`js_divergence_floor` gives that floor by simulation, with its chi-square
approximation ``(B - 1)(C - 1) / (2 n)`` nats.
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
    """Kind of a sensitive feature from its dtype (see the module docstring)."""
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
        One or more sensitive features (or precomputed cell ids).
    kinds : sequence of str, optional
        One of "binary", "categorical", "continuous" per feature; inferred by default
        (module docstring).
    n_quantiles : int
        Number of equal-count bins for a continuous feature (default 3, as [DC] sec 5.1).

    Returns
    -------
    numpy.ndarray of int64, shape (n,)
        Cell ids ``0 .. C-1`` of the occurring combinations, in lexicographic order of the
        per-feature codes.
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

    Both variances are population variances over the rows, so the numerator is the
    between-cell term of the law of total variance: cell means weighted by cell sizes,

    ``Var(E[yhat | S]) = sum_s (n_s / n) (mean_s - mean)^2``,  ``Var(yhat) = (1/n) sum_i (yhat_i - mean)^2``,

    and ``0 <= UF <= 1``: 0 when all cell means are equal, 1 when predictions are constant
    within cells. Constant predictions (``Var(yhat) = 0``) give 0.0 (nothing varies).

    Parameters
    ----------
    pred : array-like of shape (n,)
        Predictions on the response scale (probabilities, predicted rates, ...).
    *sensitive : array-like of shape (n,)
        The cell ids (e.g. ``FairData.cells``) or several sensitive features whose
        intersections form the cells (:func:`intersection_cells`); >= 2 cells.
    kinds, n_quantiles
        As in :func:`intersection_cells`.

    Returns
    -------
    float
        In [0, 1]; lower is fairer.
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

    ``D_JS = sum_s pi_s KL(P(yhat | cell s) || P(yhat))`` with ``pi_s = n_s / n`` the cell
    proportions and ``KL(P || Q) = sum_x P(x) log(P(x) / Q(x))``. The distributions are
    histograms of ``yhat`` on common equal-width bins; ``P(yhat)`` is the pooled histogram,
    which is the ``pi``-mixture of the cell histograms, so this is Lin's (1991) generalised
    JS divergence ``H(P) - sum_s pi_s H(P_s)`` with weights ``pi`` (finite without any
    smoothing: ``P(x) > 0`` wherever some ``P_s(x) > 0``). Terms with ``P_s(x) = 0`` are 0.

    Log base: [DC] writes "log" without a base; the natural log (nats) is the default,
    ``base=2`` gives bits, in which case ``0 <= D_JS <= log2(#cells)``.

    Estimation: a plug-in estimate on histograms, no kernel density. ``pred`` is cut into
    ``bins`` equal-width bins over ``[min pred, max pred]`` (default 10; or the given edges)
    and the cell-conditional and pooled bin frequencies replace the distributions. The
    estimate is then the empirical mutual information ``I(bin; cell)`` between the binned
    prediction and the cell, which is biased upwards.

    Finite-sample floor: for predictions independent of the cells the population value is
    0, but ``2 n D_JS`` (nats) is the likelihood-ratio (G) statistic of the ``B x C``
    contingency table of bins and cells and is approximately chi-square with
    ``(B - 1)(C - 1)`` degrees of freedom, so the reported value is about

        floor(n, B, C) ~= (B - 1)(C - 1) / (2 n)   nats   (divide by ln(base) otherwise),

    ``B`` the occupied bins, ``C`` the occupied cells. It falls as ``1/n`` and grows with
    the bins and cells: 10 bins and 2 cells at n = 1000 give about 0.0045 nats; the 24
    cells of COMPAS (sex x race x age tertiles) at its validation size n = 1482 about 0.07
    nats. Values near the floor cannot be told from independence. The approximation needs
    a few rows per (bin, cell); :func:`js_divergence_floor` simulates the floor for given
    ``n``, bins and cell proportions. For the floor of one's own data, recompute the
    divergence with the predictions permuted (which keeps both marginals and breaks the
    dependence)::

        rng = np.random.default_rng(0)
        floor = np.mean([js_divergence(rng.permutation(pred), *sensitive) for _ in range(200)])

    Parameters
    ----------
    pred : array-like of shape (n,)
        Predictions on the response scale.
    *sensitive : array-like of shape (n,)
        Cell ids or several sensitive features (:func:`intersection_cells`); >= 2 cells.
    bins : int or sequence of float
        Number of equal-width bins of ``yhat`` over ``[min yhat, max yhat]`` (default 10),
        or explicit edges (e.g. ``np.linspace(0, 1, 21)`` for probabilities; values outside
        go to the end bins).
    n_quantiles : int
        Equal-count bins for a continuous sensitive feature (default 3).
    kinds : sequence of str, optional
        Kinds of the sensitive features (:func:`intersection_cells`).
    base : float
        Logarithm base (> 0, != 1); default ``e``.

    Returns
    -------
    float
        ``>= 0`` (rounding below 0 is clipped); 0 when every cell has the pooled
        histogram. Lower is fairer.
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
    """The finite-sample floor of :func:`js_divergence` (see :func:`js_divergence_floor`).

    Attributes
    ----------
    n, bins, n_cells : int
        Sample size, number of bins and number of cells simulated.
    mean, std : float
        Mean and standard deviation (ddof 1) of the simulated divergences: ``mean`` is the
        floor.
    quantile_95 : float
        95% quantile of the simulated divergences (a value above it is unlikely under
        independence).
    approximation : float
        ``(bins - 1)(n_cells - 1) / (2 n ln(base))``, the chi-square approximation.
    n_simulations : int
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

    Each simulation draws ``n`` predictions from ``sampler`` and, independently, ``n`` cell
    labels with the given proportions, and evaluates :func:`js_divergence` with ``bins``
    equal-width bins (the estimator's own code). The population divergence is 0, so the
    mean is the estimator's floor at this ``n``: about ``(bins - 1)(cells - 1) / (2 n)``
    nats (module docstring of :func:`js_divergence`), falling as ``1/n``.

    Parameters
    ----------
    n : int
        Sample size, >= 2.
    bins : int, default 10
        Number of equal-width bins of the predictions (as ``js_divergence(bins=...)``).
    cells : int or sequence of float, default 2
        Number of equally likely cells (>= 2), or the cell proportions (>= 2 positive
        numbers, normalised to sum 1), e.g. the observed cell shares of a data set.
    n_simulations : int, default 200
    seed : int or None, default 0
        Seed of ``numpy.random.default_rng``.
    base : float, default e
        Logarithm base, as in :func:`js_divergence`.
    sampler : {"uniform", "normal"} or callable, default "uniform"
        Distribution of the predictions: ``callable(rng, n) -> array``. The floor depends on
        it only through how evenly the equal-width bins are filled ("normal" leaves the
        outer bins nearly empty, which lowers the effective number of bins).

    Returns
    -------
    JSDivergenceFloor
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
