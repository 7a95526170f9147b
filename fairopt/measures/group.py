"""Group-rate fairness measures on hard predictions, and the group coding they share.

With ``P_g = P(yhat = 1 | S = g)``: disparate impact ``min_g P_g / max_g P_g``, demographic-parity
difference ``max_g P_g - min_g P_g``, equal impact (DI on the rows with ``y = 1``) and equalised odds
(the largest gap among rows with ``y = 0`` and ``y = 1``). Groups are the sorted unique labels of
``sensitive`` (any sortable hashable labels); arguments come in the order ``(pred, sensitive, ...)``.
The group coding (:func:`encode_groups`, :func:`bin_equal_width`, :func:`bin_quantiles`,
:func:`group_sums`) is shared with :mod:`fairopt.measures.fauci` and :mod:`~fairopt.measures.distribution`.
"""

from __future__ import annotations

import warnings
from typing import Any, Hashable, Sequence

import numpy as np
import pandas as pd
import torch

from fairopt._validation import (as_1d_tensor, check_binary, check_same_length, check_sample_weight, column_1d,
                                 to_numpy)
from fairopt.exceptions import UndefinedMeasureWarning
from fairopt.measures.performance import float_vector

__all__ = [
    "group_rates",
    "group_means",
    "disparate_impact",
    "dp_difference",
    "equal_impact",
    "equalised_odds",
    "ratio_and_difference",
    "encode_groups",
    "bin_equal_width",
    "bin_quantiles",
    "group_sums",
]


# --------------------------------------------------------------------------------------
# group coding shared by the measures modules
# --------------------------------------------------------------------------------------


def encode_groups(sensitive: Any, name: str = "sensitive") -> tuple[np.ndarray, np.ndarray]:
    """Integer group codes of a 1-D array of labels.

    Returns
    -------
    codes : numpy.ndarray of int64, shape (n,)
        ``codes[i] = j`` when row ``i`` has label ``labels[j]``.
    labels : numpy.ndarray of shape (K,)
        The sorted unique labels.

    Raises
    ------
    ValueError
        Naming ``name``: not 1-D, empty, missing or infinite values, or labels that cannot be sorted together.
    """
    arr = column_1d(sensitive, name, "array of group labels", allow_empty=False)
    missing = np.asarray(pd.isna(arr), dtype=bool)
    if missing.any():
        row = int(np.flatnonzero(missing)[0])
        raise ValueError(f"{name}: missing value {arr[row]!r} at row {row}")
    if arr.dtype.kind == "f" and not np.isfinite(arr).all():
        raise ValueError(f"{name}: contains non-finite values (e.g. {arr[~np.isfinite(arr)][0]})")
    try:
        labels, codes = np.unique(arr, return_inverse=True)
    except TypeError as exc:
        raise ValueError(f"{name}: group labels of mixed types cannot be compared ({exc})") from None
    return codes.reshape(-1).astype(np.int64), labels


def require_groups(labels: np.ndarray, name: str = "sensitive", minimum: int = 2) -> None:
    """Raise ``ValueError`` naming ``name`` when there are fewer than ``minimum`` groups."""
    if labels.size < minimum:
        found = ", ".join(repr(python_scalar(v)) for v in labels)
        raise ValueError(
            f"{name}: found {labels.size} group(s) ({found}); at least {minimum} are needed "
            "to compare groups"
        )


def bin_equal_width(values: Any, bins: int | Sequence[float] | np.ndarray, name: str = "sensitive") -> tuple[np.ndarray, np.ndarray]:
    """Equal-width histogram bins of a continuous variable.

    Parameters
    ----------
    values : array-like of shape (n,)
        Finite values.
    bins : int or sequence of float
        Number of bins spanning ``[min, max]``, or strictly increasing edges ``e_0 < ... < e_B``.
    name : str
        Argument name of ``values`` in error messages.

    Returns
    -------
    codes : numpy.ndarray of int64, shape (n,)
        Bin ``[e_j, e_{j+1})`` (the last closed, as ``numpy.histogram``); values outside explicit edges go
        to the end bins.
    edges : numpy.ndarray of shape (B + 1,)
    """
    x = float_vector(values, name)
    edges = _bin_edges(x, bins)
    codes = np.searchsorted(edges[1:-1], x, side="right").astype(np.int64)
    return codes, edges


def _bin_edges(x: np.ndarray, bins: int | Sequence[float] | np.ndarray) -> np.ndarray:
    """Validated edges for :func:`bin_equal_width`."""
    if isinstance(bins, (int, np.integer)) and not isinstance(bins, bool):
        if bins < 1:
            raise ValueError(f"bins: expected a positive number of bins, got {bins}")
        return np.linspace(x.min(), x.max(), int(bins) + 1)
    edges = np.asarray(bins, dtype=float) if not isinstance(bins, bool) else np.asarray([])
    if edges.ndim != 1 or edges.size < 2 or not np.isfinite(edges).all() or np.any(np.diff(edges) <= 0):
        raise ValueError(f"bins: expected an int >= 1 or >= 2 finite, strictly increasing edges, got {bins!r}")
    return edges


def bin_quantiles(values: Any, n_quantiles: int, name: str = "sensitive") -> np.ndarray:
    """Equal-count bins: interior edges at the sample quantiles ``q_{j/Q}``, right-closed as ``pandas.qcut``.

    Tied edges are merged, so tied data can give fewer than ``n_quantiles`` bins; returns codes ``0..Q'-1``.
    ([DC] sec 5.1 bins age at its tertiles, ``Q = 3``.)
    """
    if isinstance(n_quantiles, bool) or not isinstance(n_quantiles, (int, np.integer)) or n_quantiles < 1:
        raise ValueError(f"n_quantiles: expected an integer >= 1, got {n_quantiles!r}")
    x = float_vector(values, name)
    edges = np.unique(np.quantile(x, np.arange(1, n_quantiles) / n_quantiles))
    return np.searchsorted(edges, x, side="left").astype(np.int64)


def group_sums(values: torch.Tensor, codes: torch.Tensor, n_groups: int,
               weights: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-group ``sums[g] = sum_{codes_i = g} values_i`` and ``counts[g]``, differentiable in ``values``; with
    row ``weights`` the weighted ``sum_{codes_i = g} w_i values_i`` and the total weight ``sum_{codes_i = g} w_i``
    (``sums / counts``: the weighted group means)."""
    if weights is not None:
        sums = values.new_zeros(n_groups).index_add(0, codes, values * weights)
        return sums, weights.new_zeros(n_groups).index_add(0, codes, weights).to(values.dtype)
    sums = values.new_zeros(n_groups).index_add(0, codes, values)
    counts = torch.bincount(codes, minlength=n_groups).to(values.dtype)
    return sums, counts


def python_scalar(value: Any) -> Hashable:
    """A numpy scalar label as the matching Python scalar (``np.int64(1) -> 1``); others unchanged."""
    return value.item() if isinstance(value, np.generic) else value


# --------------------------------------------------------------------------------------
# rates on hard predictions
# --------------------------------------------------------------------------------------


def _hard_predictions(pred: Any) -> torch.Tensor:
    """``pred`` as a float64 0/1 vector (``ValueError`` naming ``pred`` otherwise)."""
    t = as_1d_tensor(pred, "pred").detach().to(torch.float64)
    if t.numel() == 0:
        raise ValueError("pred: is empty (0 rows)")
    return check_binary(t, "pred")


def _binary_target(y_true: Any, n: int) -> torch.Tensor:
    """``y_true`` as a float64 0/1 vector of length ``n``."""
    t = check_binary(as_1d_tensor(y_true, "y_true").detach().to(torch.float64), "y_true")
    check_same_length(pred=np.empty(n), y_true=t)
    return t


def _groups_of(sensitive: Any, n: int) -> tuple[torch.Tensor, np.ndarray]:
    """Validated group codes (as a tensor) and labels, at least two groups, ``n`` rows."""
    codes, labels = encode_groups(sensitive)
    check_same_length(pred=np.empty(n), sensitive=codes)
    require_groups(labels)
    return torch.as_tensor(codes), labels


def _rates(values: torch.Tensor, codes: torch.Tensor, labels: np.ndarray, rows: torch.Tensor | None = None,
           condition: str = "", weights: torch.Tensor | None = None) -> torch.Tensor:
    """Mean of ``values`` per group over the rows where ``rows`` is True, weighted by ``weights`` when given
    (``sum_i w_i v_i / sum_i w_i`` over the group's rows); ``ValueError`` for a group without any row (or
    weight)."""
    if rows is not None:
        values, codes = values[rows], codes[rows]
        weights = None if weights is None else weights[rows]
    sums, counts = group_sums(values, codes, labels.size, weights)
    empty = counts == 0
    if bool(empty.any()):
        g = int(torch.nonzero(empty)[0])
        label = python_scalar(labels[g])
        where = f"rows with {condition}" if condition else "rows"
        has_rows = weights is not None and int(torch.bincount(codes, minlength=labels.size)[g]) > 0
        culprit, what = ("sample_weight", f"{where} of positive weight (all its weights are 0)") if has_rows \
            else ("y_true", where if weights is None else f"{where} of positive weight")
        raise ValueError(f"{culprit}: group {label!r} of sensitive has no {what}; the rate is undefined")
    return sums / counts


def _row_weights(sample_weight: Any, n: int) -> torch.Tensor | None:
    """``sample_weight`` (None, a scalar or one non-negative weight per row) as a float64 tensor, or None."""
    weights = check_sample_weight(sample_weight, n)
    return None if weights is None else torch.from_numpy(weights)


def ratio_and_difference(values: Any) -> tuple[np.ndarray, np.ndarray]:
    """``min_g / max_g`` and ``max_g - min_g`` of group values along the last axis: the one computation of the
    group ratio and gap.

    NaN in gives NaN for both. The ratio is NaN for a negative value (a ratio of signed quantities means
    nothing) and when every value is 0 (0/0: undefined, not "perfectly fair"; callers warn with
    :func:`warn_undefined_ratio`).
    """
    values = np.asarray(to_numpy(values), dtype=float)
    lo, hi = values.min(axis=-1), values.max(axis=-1)
    with np.errstate(invalid="ignore", divide="ignore"):
        ratio = np.where((lo >= 0) & (hi > 0), lo / np.where(hi > 0, hi, 1.0), np.nan)
    return ratio, hi - lo


def _ratio(rates: Any) -> float:
    """:func:`ratio_and_difference`'s ratio of one set of group rates, as a float."""
    return float(ratio_and_difference(rates)[0])


def undefined_ratio_reason(what: str = "positive predictions") -> str:
    """Why a ratio measure is NaN when every group rate is 0 (``what``: what no group has)."""
    return f"no group has {what} (every group rate is 0, the ratio is 0/0): undefined, not perfectly fair"


def undefined_ratio_message(measure: str, what: str = "positive predictions") -> str:
    """Text of the :class:`~fairopt.exceptions.UndefinedMeasureWarning` of a 0/0 ratio measure ``measure``."""
    return (f"{measure}: {undefined_ratio_reason(what)}. It is returned as NaN. Check whether the model is "
            "degenerate (the same prediction for every row).")


def warn_undefined_ratio(value: float, measure: str, what: str = "positive predictions",
                         stacklevel: int = 3) -> float:
    """``value``, after an :class:`~fairopt.exceptions.UndefinedMeasureWarning` when it is NaN (0/0)."""
    if value != value:  # NaN
        warnings.warn(undefined_ratio_message(measure, what), UndefinedMeasureWarning, stacklevel=stacklevel)
    return value


def _spread(rates: torch.Tensor) -> float:
    """:func:`ratio_and_difference`'s difference ``max(rates) - min(rates)``, as a float."""
    return float(ratio_and_difference(rates)[1])


def group_means(values: Any, sensitive: Any, sample_weight: Any = None) -> dict[Hashable, float]:
    """Mean of ``values`` per group: ``{label: mean(values_i : S_i = label)}`` (one group is allowed), the
    weighted mean ``sum w_i v_i / sum w_i`` with ``sample_weight`` (NaN for a group of weight 0)."""
    v = torch.as_tensor(float_vector(values, "values"))
    codes, labels = encode_groups(sensitive)
    check_same_length(values=v, sensitive=codes)
    sums, counts = group_sums(v, torch.as_tensor(codes), labels.size, _row_weights(sample_weight, v.numel()))
    return {python_scalar(g): float(m) for g, m in zip(labels, (sums / counts).tolist())}


def group_rates(pred: Any, sensitive: Any, sample_weight: Any = None) -> dict[Hashable, float]:
    """Positive rate per group, ``{label: P(yhat = 1 | S = label)}``, on hard 0/1 predictions (the weighted
    share ``sum_g w_i yhat_i / sum_g w_i`` with ``sample_weight``)."""
    p = _hard_predictions(pred)
    codes, labels = encode_groups(sensitive)
    check_same_length(pred=p, sensitive=codes)
    rates = _rates(p, torch.as_tensor(codes), labels, weights=_row_weights(sample_weight, p.numel()))
    return {python_scalar(g): float(r) for g, r in zip(labels, rates.tolist())}


def disparate_impact(pred: Any, sensitive: Any, sample_weight: Any = None) -> float:
    """Disparate impact ``DI = min_g P(yhat=1 | g) / max_g P(yhat=1 | g)`` ([SQP] eq. 5 on hard predictions).

    In [0, 1], 1 is parity; 0 when some group has rate 0 and another not. When every rate is 0 the ratio
    is 0/0: NaN with an :class:`~fairopt.exceptions.UndefinedMeasureWarning` (a model that never predicts
    the positive class is degenerate, not fair).

    Parameters
    ----------
    pred : array-like of shape (n,)
        Hard predictions in {0, 1}.
    sensitive : array-like of shape (n,)
        Group labels; at least two groups.
    sample_weight : array-like of shape (n,), optional
        Row weights: each rate is then ``sum_g w_i yhat_i / sum_g w_i``.
    """
    p = _hard_predictions(pred)
    codes, labels = _groups_of(sensitive, p.numel())
    rates = _rates(p, codes, labels, weights=_row_weights(sample_weight, p.numel()))
    return warn_undefined_ratio(_ratio(rates), "disparate_impact")


def dp_difference(pred: Any, sensitive: Any, sample_weight: Any = None) -> float:
    """Demographic-parity difference ``max_g P(yhat=1 | g) - min_g P(yhat=1 | g)``, in [0, 1] (rates weighted
    by ``sample_weight`` when given)."""
    p = _hard_predictions(pred)
    codes, labels = _groups_of(sensitive, p.numel())
    return _spread(_rates(p, codes, labels, weights=_row_weights(sample_weight, p.numel())))


def equal_impact(pred: Any, sensitive: Any, y_true: Any, sample_weight: Any = None) -> float:
    """Equal impact: :func:`disparate_impact` on the rows with ``y_true = 1`` (the ratio of true-positive rates).

    Every group needs a row with ``y_true = 1``; NaN with an
    :class:`~fairopt.exceptions.UndefinedMeasureWarning` when no group has a true positive. Rates weighted
    by ``sample_weight`` when given.
    """
    p = _hard_predictions(pred)
    codes, labels = _groups_of(sensitive, p.numel())
    y = _binary_target(y_true, p.numel())
    rates = _rates(p, codes, labels, y == 1, "y_true = 1", _row_weights(sample_weight, p.numel()))
    return warn_undefined_ratio(_ratio(rates), "equal_impact",
                                "positive predictions among its rows with y_true = 1")


def equalised_odds(pred: Any, sensitive: Any, y_true: Any, return_parts: bool = False,
                   sample_weight: Any = None) -> float | tuple[float, dict[int, float]]:
    """Equalised-odds gap ``max_{y in {0,1}} [max_g P(yhat=1 | g, y) - min_g P(yhat=1 | g, y)]`` (Hardt et al. 2016).

    The larger of the false- and true-positive-rate gaps; every group needs rows with both labels.
    ``return_parts`` also returns ``{0: FPR gap, 1: TPR gap}``; rates weighted by ``sample_weight`` when given.
    """
    p = _hard_predictions(pred)
    codes, labels = _groups_of(sensitive, p.numel())
    y = _binary_target(y_true, p.numel())
    weights = _row_weights(sample_weight, p.numel())
    parts = {v: _spread(_rates(p, codes, labels, y == v, f"y_true = {v}", weights)) for v in (0, 1)}
    value = max(parts.values())
    return (value, parts) if return_parts else value
