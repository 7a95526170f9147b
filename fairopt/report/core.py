""":func:`group_report`: per-group metrics, their disparities and bootstrap intervals.

Disparities of group values ``m_g``: ``ratio = min_g m_g / max_g m_g`` (NaN for a 0/0 or a
negative value; for ``selection_rate`` the disparate impact) and
``difference = max_g m_g - min_g m_g``.

Intervals: percentile bootstrap stratified by group (:mod:`fairopt.report.bootstrap`): each
replicate resamples every group with replacement at its own size and recomputes every value; the
interval is the ``(1 -/+ confidence) / 2`` quantiles. A group with fewer than ``min_group_size``
rows entering a metric gets NaN intervals (and so do that metric's disparities): so few rows would
claim a precision they do not have. A group whose rows all share the outcome of a 0/1 metric (0 of 25
selected) leaves the bootstrap no spread, and its percentile interval would be ``[0, 0]``: such a group
gets the exact (Clopper-Pearson) interval of ``k = 0`` or ``k = n`` in ``n`` rows (with row weights,
``n`` is Kish's effective size ``(sum w)^2 / sum w^2``) and the metric's disparities NaN intervals. The
difference is non-negative by construction, so its interval rarely reaches 0: read a lower end near 0 as "no
detectable difference".
"""

from __future__ import annotations

import logging
import time
from typing import Any

import numpy as np
import pandas as pd

from fairopt._validation import check_interval, check_sample_weight, check_seed, positive_int
from fairopt.inputs import warn_reordered_index
from fairopt.measures.binomial import clopper_pearson
from fairopt.measures.bootstrap import percentile_interval
from fairopt.measures.group import ratio_and_difference
from fairopt.report.bootstrap import RowStatistic, bootstrap_replicates, point_estimates
from fairopt.sensitive_groups import Groups, intersection_groups, row_count
from fairopt.report.responses import Responses, model_responses
from fairopt.report.result import GroupReport

__all__ = ["group_report", "MIN_GROUP_SIZE", "CLASSIFICATION_METRICS", "REGRESSION_METRICS"]

logger = logging.getLogger(__name__)

#: Default of ``min_group_size``: groups with fewer rows get NaN confidence intervals.
MIN_GROUP_SIZE = 10
CLASSIFICATION_METRICS = ("selection_rate", "tpr", "fpr", "accuracy")
REGRESSION_METRICS = ("mean_prediction", "mean_target", "mae", "rmse")


def _statistics(responses: Responses) -> list[RowStatistic]:
    """The metrics as row statistics (:mod:`fairopt.report.bootstrap`)."""
    pred, y = responses.pred, responses.y
    if responses.task == "binary":
        return [RowStatistic("selection_rate", pred, indicator=True),
                RowStatistic("tpr", pred, y == 1, condition="y = 1", indicator=True),
                RowStatistic("fpr", pred, y == 0, condition="y = 0", indicator=True),
                RowStatistic("accuracy", (pred == y).astype(np.float64), indicator=True)]
    error = y - pred
    return [RowStatistic("mean_prediction", pred), RowStatistic("mean_target", y),
            RowStatistic("mae", np.abs(error)), RowStatistic("rmse", error ** 2, root=True)]


def _check_parameters(n_bootstrap: Any, confidence: Any, seed: Any, min_group_size: Any) -> tuple[int, float, int | None, int]:
    return (positive_int(n_bootstrap, "n_bootstrap", allow_zero=True),
            check_interval(confidence, "confidence", 0.0, 1.0),
            check_seed(seed, allow_none=True, allow_negative=False),
            positive_int(min_group_size, "min_group_size"))


def _note(notes: list[str], message: str) -> None:
    notes.append(message)
    logger.warning("group_report: %s", message)


def _describe(groups: Groups, mask: np.ndarray, counts: np.ndarray) -> str:
    return ", ".join(f"{groups.labels[g]!r} ({counts[g]})" for g in np.flatnonzero(mask))


def group_report(
    model_or_estimator: Any,
    X: Any,
    y: Any = None,
    sensitive_features: Any = None,
    *,
    threshold: float | None = None,
    n_bootstrap: int = 1000,
    confidence: float = 0.95,
    seed: int | None = 0,
    task: str | None = None,
    pos_label: Any = None,
    min_group_size: int = MIN_GROUP_SIZE,
    sample_weight: Any = None,
) -> GroupReport:
    """Per-group performance and fairness of a model, with bootstrap confidence intervals.

    The model runs once on ``X``; each metric is computed per group, over all rows, and compared
    between groups. With ``yhat`` the hard prediction and ``G`` a group's rows: classification
    ``selection_rate = mean_G(yhat)``, ``tpr = mean_{G, y=1}(yhat)``, ``fpr = mean_{G, y=0}(yhat)``,
    ``accuracy = mean_G(1[yhat = y])``; regression ``mean_prediction``, ``mean_target``,
    ``mae = mean_G |y - pred|``, ``rmse = sqrt(mean_G (y - pred)^2)``.

    Parameters
    ----------
    model_or_estimator : estimator, fairopt.SavedModel or torch.nn.Module
        A fitted fairopt or scikit-learn-style estimator, a :class:`~fairopt.SavedModel`, or a torch
        module with one output per row (:mod:`fairopt.report.responses`).
    X : array-like, DataFrame or tensor (n, p)
        The rows, given to the model unchanged (a SavedModel encodes a DataFrame first).
    y : array-like (n,)
        The target: two labels (classification) or numbers (regression).
    sensitive_features : array-like, DataFrame, dict, column name or list of column names
        One attribute or several (their intersections, labelled ``"sex=Male|race=White"``), or
        column name(s) of the DataFrame ``X`` (the column stays in ``X``).
    threshold : float in (0, 1), optional
        Classification: positive when the predicted probability exceeds it; None: ``predict``.
    n_bootstrap : int, default 1000
        Bootstrap replicates (0: no intervals).
    confidence : float in (0, 1), default 0.95
    seed : int or None, default 0
        Seed of ``numpy.random.default_rng``.
    task : {"binary", "classification", "regression"}, optional
        Default: the estimator's kind, a SavedModel's schema, else inferred from ``y``.
    pos_label : optional
        The positive class (default: a FairClassifier's ``pos_label_``, else ``classes_[1]``, else
        1 for 0/1 ``y``).
    min_group_size : int, default 10
        Smallest group (rows entering the metric) that gets a confidence interval.
    sample_weight : array-like (n,), optional
        Row weights (as fairlearn's ``MetricFrame``): every metric is then the weighted mean
        ``sum_G w_i v_i / sum_G w_i`` (RMSE the root of the weighted mean square), in the bootstrap too,
        whose resampled rows carry their weights. ``n`` still counts rows; ``by_group["weight"]`` holds
        each group's total weight.

    Returns
    -------
    GroupReport
        ``by_group``, ``overall``, ``disparities``, ``to_markdown()``, ``plot()``.

    Raises
    ------
    ValueError
        Lengths that differ, an unknown column, NaN in the sensitive features or ``y``, an empty
        group, fewer than two groups, non-binary ``y`` for a classifier, an unsupported model, bad
        parameters.

    Examples
    --------
    >>> report = fairopt.group_report(clf, X_test, y_test, S_test)     # doctest: +SKIP
    >>> report.disparities.loc["selection_rate", "ratio"]              # doctest: +SKIP
    """
    if y is None or sensitive_features is None:
        given = "a FairData" if type(X).__name__ == "FairData" else "X"
        missing = [name for name, value in (("y", y), ("sensitive_features", sensitive_features)) if value is None]
        label_free = (" For rows without targets yet, measures of the predictions alone need none: "
                      "fairopt.metrics.disparate_impact(None, model.predict(X), sensitive_features=S)."
                      if y is None and sensitive_features is not None else "")
        raise ValueError(f"{', '.join(missing)}: required (got {given} without {' or '.join(missing)}): pass the rows, "
                         "their targets and their sensitive features as the user sees them; fairopt.evaluate(model, "
                         "data) reports the groups of a FairData." + label_free)
    n_bootstrap, confidence, seed, min_group_size = _check_parameters(n_bootstrap, confidence, seed, min_group_size)
    warn_reordered_index(X, sensitive_features=sensitive_features, y=y, sample_weight=sample_weight)
    groups = _groups(X, sensitive_features)
    weights = check_sample_weight(sample_weight, groups.codes.size)
    responses = model_responses(model_or_estimator, X, y, task=task, threshold=threshold, pos_label=pos_label)
    stats = _statistics(responses)
    replicates = _replicates(stats, groups, n_bootstrap, seed, weights)
    notes: list[str] = []
    by_group, overall, table = _tables(stats, groups, replicates, confidence, min_group_size, notes, weights)
    return GroupReport(task=responses.task, metrics=tuple(s.name for s in stats), by_group=by_group,
                       overall=overall, disparities=table, groups=groups.values,
                       sensitive_names=list(groups.names), confidence=confidence, n_bootstrap=n_bootstrap, seed=seed,
                       min_group_size=min_group_size, threshold=None if threshold is None else float(threshold),
                       positive=responses.positive, source=responses.source, notes=notes,
                       weighted=weights is not None)


def _groups(X: Any, sensitive_features: Any) -> Groups:
    """The groups of the rows of ``X`` (at least two)."""
    try:
        n = row_count(X)
    except TypeError:
        raise ValueError(f"X: expected an array-like of rows, got {type(X).__name__}") from None
    groups = intersection_groups(sensitive_features, n, X)
    if len(groups.labels) < 2:
        raise ValueError(f"sensitive_features: {'|'.join(groups.names)!r} has a single group {groups.labels} in these "
                         "rows; at least two are needed to compare groups")
    return groups


def _replicates(stats: list[RowStatistic], groups: Groups, n_bootstrap: int, seed: int | None,
                weights: np.ndarray | None = None) -> dict | None:
    """:func:`fairopt.report.bootstrap.bootstrap_replicates` of the metrics; None without replicates."""
    if not n_bootstrap:
        return None
    started = time.perf_counter()
    replicates = bootstrap_replicates(stats, groups.codes, len(groups.labels), n_bootstrap, seed, weights)
    logger.debug("group_report: %d bootstrap replicates of %d rows in %.2fs", n_bootstrap, groups.codes.size,
                 time.perf_counter() - started)
    return replicates


def _tables(stats: list[RowStatistic], groups: Groups, replicates: dict | None, confidence: float,
            min_group_size: int, notes: list[str],
            weights: np.ndarray | None = None) -> tuple[pd.DataFrame, pd.Series, pd.DataFrame]:
    """``(by_group, overall, disparities)`` with their intervals; what makes a value NaN goes to ``notes``."""
    sizes = groups.sizes
    small = sizes < min_group_size
    if replicates is not None and small.any():
        _note(notes, f"groups with fewer than {min_group_size} rows have NaN confidence intervals (and so do "
                     f"the disparities): {_describe(groups, small, sizes)}")
    by_group = pd.DataFrame({"n": sizes}, index=pd.Index(groups.labels, name=groups.name))
    overall: dict[str, float] = {"n": float(sizes.sum())}
    if weights is not None:
        by_group["weight"] = np.bincount(groups.codes, weights=weights, minlength=len(groups.labels))
        overall["weight"] = float(weights.sum())
        unweighted = by_group["weight"].to_numpy() == 0
        if unweighted.any():
            _note(notes, f"groups of total weight 0 have NaN values: {_describe(groups, unweighted, sizes)}")
    disparities = {}
    for stat in stats:
        values, total = point_estimates(stat, groups.codes, len(groups.labels), weights)
        low, high, total_low, total_high, ratio_ci, difference_ci = _intervals(
            stat, groups, replicates, confidence, min_group_size, notes, weights)
        by_group[stat.name], by_group[f"{stat.name}_low"], by_group[f"{stat.name}_high"] = values, low, high
        overall.update({stat.name: total, f"{stat.name}_low": total_low, f"{stat.name}_high": total_high})
        disparities[stat.name] = _disparity(stat.name, values, total, ratio_ci, difference_ci, groups, notes)
    table = pd.DataFrame.from_dict(disparities, orient="index")
    table.index.name = "metric"
    return by_group, pd.Series(overall, name="overall"), table


def _intervals(stat: RowStatistic, groups: Groups, replicates: dict | None, confidence: float, min_group_size: int,
               notes: list[str], weights: np.ndarray | None = None) -> tuple:
    """Per-group, overall, ratio and difference intervals of one metric (NaN where not reliable; exact where a
    group's rows all share the outcome, :func:`_exact_where_no_spread`)."""
    n_groups = len(groups.labels)
    counts = stat.counts(groups.codes, n_groups)
    if stat.condition:
        empty = counts == 0
        if empty.any():
            _note(notes, f"{stat.name} is undefined (NaN) for the groups without rows with {stat.condition}: "
                         f"{[groups.labels[g] for g in np.flatnonzero(empty)]}")
    nan2 = (np.nan, np.nan)
    if replicates is None:
        return np.full(n_groups, np.nan), np.full(n_groups, np.nan), np.nan, np.nan, nan2, nan2
    per_group, total = replicates[stat.name]
    low, high = percentile_interval(per_group, confidence)
    reliable = counts >= min_group_size
    few = ~reliable & (groups.sizes >= min_group_size) & (counts > 0)  # the others are noted already
    if stat.condition and few.any():
        _note(notes, f"{stat.name}: groups with fewer than {min_group_size} rows with {stat.condition} have NaN "
                     f"intervals: {_describe(groups, few, counts)}")
    low, high = np.where(reliable, low, np.nan), np.where(reliable, high, np.nan)
    exact = _exact_where_no_spread(stat, groups, counts, reliable, confidence, weights, low, high)
    if exact.any():
        _note(notes, f"{stat.name}: groups whose rows all share the outcome ({_describe(groups, exact, counts)}) "
                     "get the exact Clopper-Pearson interval (a bootstrap of identical rows has no spread), and "
                     "the disparities of this metric no interval")
    total_low, total_high = percentile_interval(total, confidence)
    if counts.sum() < min_group_size:
        total_low = total_high = np.nan
    ratio, difference = ratio_and_difference(per_group)
    if reliable.all() and not exact.any():
        ratio_ci, difference_ci = percentile_interval(ratio, confidence), percentile_interval(difference, confidence)
    else:
        ratio_ci = difference_ci = nan2
    return low, high, float(total_low), float(total_high), tuple(map(float, ratio_ci)), tuple(map(float, difference_ci))


def _exact_where_no_spread(stat: RowStatistic, groups: Groups, counts: np.ndarray, reliable: np.ndarray,
                           confidence: float, weights: np.ndarray | None, low: np.ndarray,
                           high: np.ndarray) -> np.ndarray:
    """Per group, whether a 0/1 statistic (``stat.indicator``) is 0 (or 1) on every one of its ``counts`` rows
    (:meth:`~fairopt.report.bootstrap.RowStatistic.counts`); for those groups ``low`` and ``high`` are set in place
    to the Clopper-Pearson interval of 0 (or ``n``) events in ``n`` rows, ``n`` the rows entering the statistic or,
    with ``weights``, Kish's effective size ``(sum w)^2 / sum w^2``."""
    n_groups = len(groups.labels)
    if not stat.indicator:
        return np.zeros(n_groups, dtype=bool)
    rows = slice(None) if stat.rows is None else stat.rows
    codes = groups.codes[rows]
    counts = counts.astype(np.float64)
    ones = np.bincount(codes, weights=stat.values[rows], minlength=n_groups)
    exact = reliable & (counts > 0) & ((ones == 0) | (ones == counts))
    if exact.any():
        if weights is not None:
            w = weights[rows]
            total, squares = np.bincount(codes, w, n_groups), np.bincount(codes, w * w, n_groups)
            counts = np.divide(total ** 2, squares, out=np.zeros(n_groups), where=squares > 0)
        k = np.where(ones == 0, 0.0, counts)
        exact_low, exact_high = clopper_pearson(k, counts, confidence)
        low[exact], high[exact] = exact_low[exact], exact_high[exact]
    return exact


def _disparity(name: str, values: np.ndarray, overall: float, ratio_ci: tuple, difference_ci: tuple,
               groups: Groups, notes: list[str]) -> dict[str, Any]:
    """One row of the disparity table."""
    ratio, difference = (float(v) for v in ratio_and_difference(values))
    defined = not np.isnan(values).any()
    if defined and np.isnan(ratio) and values.max() == 0:
        _note(notes, f"{name}: every group's value is 0, so the ratio is 0/0: undefined (NaN), not perfectly fair")
    return {"ratio": ratio, "ratio_low": ratio_ci[0], "ratio_high": ratio_ci[1],
            "difference": difference, "difference_low": difference_ci[0], "difference_high": difference_ci[1],
            "group_min": groups.labels[int(np.argmin(values))] if defined else None,
            "group_max": groups.labels[int(np.argmax(values))] if defined else None,
            "overall": overall}
