"""Paired comparison of two methods with the Wilcoxon signed-rank test [DC sec 4.1, App D item 1].

With ``d_i = a_i - b_i`` the paired differences (zeros dropped), ``W+`` the sum of the ranks of
``|d_i|`` over the positive ``d_i`` and ``n`` non-zero pairs, [DC] tests ``median(d) > 0`` with

    p = P(Z > (W+ - n(n+1)/4 - 0.5) / sqrt(n(n+1)(2n+1)/24))            [DC eq D.2]

:func:`compare_methods` pairs the rows of a results table that share the ``pair_on`` key (default
seed and fold of :func:`~fairopt.experiments.compare`) and calls :func:`scipy.stats.wilcoxon`. To
pair per observation as the paper does, pass one row per (method, observation) with
``pair_on=("row",)``; ``wilcoxon_options={"method": "approx", "correction": True}`` with
``alternative="greater"`` is then eq (D.2).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

import numpy as np
import pandas as pd
from scipy.stats import wilcoxon

__all__ = ["WilcoxonComparison", "compare_methods", "compare_to_reference", "holm_adjust", "MIN_PAIRS"]

MIN_PAIRS = 5
"""Default minimum number of pairs. With 5 pairs the smallest exact two-sided p-value is
2/32 = 0.0625 (one-sided 1/32); 6 pairs are needed for a two-sided 5% rejection."""

ALTERNATIVES = ("two-sided", "greater", "less")


@dataclass(frozen=True)
class WilcoxonComparison:
    """Outcome of :func:`compare_methods`; differences are ``a - b``.

    Attributes
    ----------
    metric : str
    method_a, method_b : str
        Labels of the two arms.
    n_pairs : int
        Pairs compared (zero differences included).
    n_nonzero : int
        Pairs with a non-zero difference (the ``n`` of the test).
    statistic : float
        scipy's statistic (``min(W+, W-)`` two-sided, ``W+`` one-sided); 0.0 when all differences are 0.
    pvalue : float
        1.0 when every difference is zero.
    median_difference, mean_difference : float
        Median and mean of ``a - b`` over all pairs.
    alternative : str
        ``"greater"`` tests ``median(a - b) > 0``.
    """

    metric: str
    method_a: str
    method_b: str
    n_pairs: int
    n_nonzero: int
    statistic: float
    pvalue: float
    median_difference: float
    mean_difference: float
    alternative: str


def _label(arm: Any) -> str:
    if isinstance(arm, Mapping):
        return ", ".join(f"{k}={v}" for k, v in arm.items())
    if isinstance(arm, tuple):
        return ", ".join(str(v) for v in arm)
    return str(arm)


def _matches(column: pd.Series, value: Any) -> pd.Series:
    """``column == value`` with NaN equal to NaN (a method trained with ``value=None``)."""
    if isinstance(value, float) and math.isnan(value):
        return column.isna()
    return column == value


def _arm_rows(table: pd.DataFrame, arm: Any, by: tuple[str, ...], name: str) -> pd.DataFrame:
    """The rows of one arm: a mapping ``{column: value}``, a tuple of values of the ``by`` columns, or one value."""
    if isinstance(arm, Mapping):
        filters = dict(arm)
    elif isinstance(arm, tuple):
        if len(arm) != len(by):
            raise ValueError(f"{name}: expected {len(by)} values for the columns {list(by)}, got {arm!r}")
        filters = dict(zip(by, arm))
    else:
        if len(by) != 1:
            raise ValueError(f"{name}: with by={list(by)} give a tuple of {len(by)} values or a mapping, got {arm!r}")
        filters = {by[0]: arm}
    missing = sorted(set(filters) - set(table.columns))
    if missing:
        raise ValueError(f"{name}: no column {missing} in the table; columns: {sorted(table.columns)}")
    mask = pd.Series(True, index=table.index)
    for column, value in filters.items():
        mask &= _matches(table[column], value)
    rows = table[mask]
    if rows.empty:
        raise ValueError(f"{name}: no row of the table has {filters}")
    return rows


def _paired_values(table: pd.DataFrame, metric: str, method_a: Any, method_b: Any, pair_on: tuple[str, ...],
                   by: tuple[str, ...], split: str | None, drop_unpaired: bool) -> pd.DataFrame:
    """``a`` and ``b`` columns, one row per common ``pair_on`` key."""
    if not isinstance(table, pd.DataFrame):
        raise ValueError(f"table: expected a pandas DataFrame, got {type(table).__name__}")
    if metric not in table.columns:
        raise ValueError(f"metric: {metric!r} is not a column of the table; columns: {sorted(table.columns)}")
    missing = sorted(set(pair_on) - set(table.columns))
    if missing:
        raise ValueError(f"pair_on: no column {missing} in the table; columns: {sorted(table.columns)}")
    if split is not None and "split" in table.columns:
        table = table[table["split"] == split]
        if table.empty:
            raise ValueError(f"split: no row has split == {split!r}")
    sides = []
    for arm, name in ((method_a, "method_a"), (method_b, "method_b")):
        rows = _arm_rows(table, arm, by, name)
        duplicated = rows.duplicated(list(pair_on), keep=False)
        if duplicated.any():
            example = tuple(rows.loc[duplicated, list(pair_on)].iloc[0])
            raise ValueError(f"{name}: several rows share the pair key {dict(zip(pair_on, example))}; select one "
                             f"hyper-parameter value (e.g. {{'method': ..., 'value': ...}}) or extend pair_on")
        values = pd.to_numeric(rows[metric], errors="coerce")
        if not np.isfinite(values.to_numpy(dtype=float)).all():
            raise ValueError(f"{name}: the metric {metric!r} has missing or non-finite values")
        sides.append(rows[list(pair_on)].assign(**{"__value": values.to_numpy(dtype=float)}))
    merged = sides[0].merge(sides[1], on=list(pair_on), how="outer", suffixes=("_a", "_b"), indicator=True)
    unpaired = merged[merged["_merge"] != "both"]
    if not unpaired.empty and not drop_unpaired:
        keys = [dict(zip(pair_on, row)) for row in unpaired[list(pair_on)].itertuples(index=False)][:5]
        raise ValueError(f"pairs: {len(unpaired)} key(s) appear for only one method, e.g. {keys}; "
                         "run both methods on the same seeds and folds or pass drop_unpaired=True")
    paired = merged[merged["_merge"] == "both"]
    return pd.DataFrame({"a": paired["__value_a"].to_numpy(), "b": paired["__value_b"].to_numpy()})


def compare_methods(
    table: pd.DataFrame,
    metric: str,
    method_a: Any,
    method_b: Any,
    *,
    pair_on: Sequence[str] = ("seed", "fold"),
    alternative: str = "two-sided",
    split: str | None = "test",
    by: str | Sequence[str] = "method",
    min_pairs: int = MIN_PAIRS,
    drop_unpaired: bool = False,
    wilcoxon_options: Mapping[str, Any] | None = None,
) -> WilcoxonComparison:
    """Wilcoxon signed-rank test of ``metric`` between two methods on paired runs [DC App D, eq D.1-D.2].

    Tests ``H0: median(a - b) = 0`` against ``!= 0`` (``"two-sided"``), ``> 0`` (``"greater"``,
    [DC] eq D.1) or ``< 0`` (``"less"``).

    Parameters
    ----------
    table : pandas.DataFrame
        One row per run, e.g. :func:`~fairopt.experiments.compare`'s table.
    metric : str
        The column compared.
    method_a, method_b
        Each arm: a value of the ``by`` column, a tuple of values of the ``by`` columns, or a
        mapping ``{column: value}`` such as ``{"method": "jdcov", "value": 10.0}`` (NaN matches NaN).
    pair_on : sequence of str, default ("seed", "fold")
        Columns identifying a pair; each key must occur once per arm.
    alternative : {"two-sided", "greater", "less"}
    split : str or None, default "test"
        Keep only the rows of this ``split``; None keeps all.
    by : str or sequence of str, default "method"
        The column(s) a non-mapping arm refers to.
    min_pairs : int, default 5
        Fewest pairs accepted (:data:`MIN_PAIRS`).
    drop_unpaired : bool, default False
        Drop keys present for one arm only instead of raising.
    wilcoxon_options : mapping, optional
        Further arguments of :func:`scipy.stats.wilcoxon`.

    Returns
    -------
    WilcoxonComparison

    Raises
    ------
    ValueError
        Unknown columns, an arm without rows or with several per key, non-finite values, unpaired
        keys, fewer than ``min_pairs`` pairs, or an unknown ``alternative``.
    """
    if alternative not in ALTERNATIVES:
        raise ValueError(f"alternative: expected one of {ALTERNATIVES}, got {alternative!r}")
    pair_on = (pair_on,) if isinstance(pair_on, str) else tuple(pair_on)
    by = (by,) if isinstance(by, str) else tuple(by)
    if not pair_on or not by:
        raise ValueError("pair_on, by: expected at least one column each")
    if isinstance(min_pairs, bool) or not isinstance(min_pairs, (int, np.integer)) or min_pairs < 1:
        raise ValueError(f"min_pairs: expected a positive integer, got {min_pairs!r}")
    pairs = _paired_values(table, metric, method_a, method_b, pair_on, by, split, bool(drop_unpaired))
    if len(pairs) < min_pairs:
        raise ValueError(f"pairs: {len(pairs)} paired runs of {_label(method_a)!r} and {_label(method_b)!r}, "
                         f"at least {min_pairs} are needed (more seeds or folds)")
    difference = pairs["a"].to_numpy() - pairs["b"].to_numpy()
    nonzero = int(np.count_nonzero(difference))
    if nonzero == 0:
        statistic, pvalue = 0.0, 1.0
    else:
        options = dict(wilcoxon_options or {})
        result = wilcoxon(pairs["a"].to_numpy(), pairs["b"].to_numpy(), alternative=alternative, **options)
        statistic, pvalue = float(result.statistic), float(result.pvalue)
    return WilcoxonComparison(
        metric=metric, method_a=_label(method_a), method_b=_label(method_b), n_pairs=len(pairs),
        n_nonzero=nonzero, statistic=statistic, pvalue=pvalue,
        median_difference=float(np.median(difference)), mean_difference=float(np.mean(difference)),
        alternative=alternative,
    )


def holm_adjust(pvalues: Sequence[float]) -> np.ndarray:
    """Holm's (1979) step-down adjustment of ``m`` p-values (family-wise error control).

    With ``p_(1) <= ... <= p_(m)`` the adjusted ``j``-th is ``max_{i <= j} min(1, (m - i + 1) p_(i))``,
    in the input order.
    """
    p = np.asarray(pvalues, dtype=float).reshape(-1)
    if p.size and (not np.isfinite(p).all() or (p < 0).any() or (p > 1).any()):
        raise ValueError(f"pvalues: expected numbers in [0, 1], got {p.tolist()}")
    order = np.argsort(p, kind="stable")
    m = p.size
    stepped = np.maximum.accumulate(np.minimum(1.0, (m - np.arange(m)) * p[order]))
    adjusted = np.empty(m)
    adjusted[order] = stepped
    return adjusted


def compare_to_reference(
    table: pd.DataFrame,
    metric: str,
    reference: Any,
    *,
    methods: Sequence[Any] | None = None,
    by: str | Sequence[str] = "method",
    **options: Any,
) -> pd.DataFrame:
    """:func:`compare_methods` of every method against one reference method (one row each).

    Parameters
    ----------
    table, metric
        As in :func:`compare_methods`.
    reference
        The reference arm (``method_b``), e.g. the unregularised model.
    methods : sequence, optional
        The arms compared with it; default every other distinct value of the ``by`` columns.
    by : str or sequence of str, default "method"
        E.g. ``("method", "value")`` to compare every hyper-parameter value separately.
    **options
        Further keywords of :func:`compare_methods`.

    Returns
    -------
    pandas.DataFrame
        ``method``, ``reference``, ``metric``, ``n_pairs``, ``n_nonzero``, ``median_difference``,
        ``mean_difference`` (method minus reference), ``statistic``, ``pvalue`` and ``pvalue_holm``.
    """
    by_columns = (by,) if isinstance(by, str) else tuple(by)
    if methods is None:
        missing = sorted(set(by_columns) - set(table.columns))
        if missing:
            raise ValueError(f"by: no column {missing} in the table; columns: {sorted(table.columns)}")
        split = options.get("split", "test")
        rows = table[table["split"] == split] if split is not None and "split" in table.columns else table
        keys = rows[list(by_columns)].drop_duplicates().itertuples(index=False, name=None)
        if isinstance(reference, Mapping):
            if not set(by_columns) <= set(reference):
                raise ValueError(f"methods: give them explicitly when the reference {dict(reference)} does not "
                                 f"name every column of by={list(by_columns)}")
            reference_key = tuple(reference[column] for column in by_columns)
        else:
            reference_key = reference if isinstance(reference, tuple) else (reference,)
        methods = [key if len(by_columns) > 1 else key[0] for key in keys
                   if not all(_same(k, r) for k, r in zip(key, reference_key))]
    if not methods:
        raise ValueError("methods: nothing to compare with the reference")
    results = [compare_methods(table, metric, arm, reference, by=by, **options) for arm in methods]
    frame = pd.DataFrame([{
        "method": r.method_a, "reference": r.method_b, "metric": r.metric, "n_pairs": r.n_pairs,
        "n_nonzero": r.n_nonzero, "median_difference": r.median_difference, "mean_difference": r.mean_difference,
        "statistic": r.statistic, "pvalue": r.pvalue,
    } for r in results])
    frame["pvalue_holm"] = holm_adjust(frame["pvalue"].to_numpy())
    return frame


def _same(a: Any, b: Any) -> bool:
    """Equality with NaN equal to NaN."""
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    return bool(a == b)
