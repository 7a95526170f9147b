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
"""

from __future__ import annotations

import logging
import math
from typing import Any, Sequence

import numpy as np

from fairopt._validation import check_same_length, to_numpy
from fairopt.measures.group import bin_equal_width, bin_quantiles, encode_groups, require_groups
from fairopt.measures.performance import float_vector

__all__ = ["intersection_cells", "uf", "js_divergence"]

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
