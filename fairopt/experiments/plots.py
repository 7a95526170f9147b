"""Figures of comparison results: requested vs realised bound, trade-off curves, histories.

Every function draws on ``ax=`` or on a new :class:`matplotlib.figure.Figure` (no pyplot state:
:mod:`solvers.plotting`), writes a PNG to ``path`` when given, titles it ``title`` and returns the
Axes (a list for several panels). Inputs are the table of :func:`~fairopt.experiments.compare`,
:class:`~solvers.History` objects or a :class:`~fairopt.experiments.CalibrationResult`.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np
import pandas as pd
from fairopt.experiments.compare import bound_shortfall, meets_bound
from fairopt.experiments.methods import PENALTY_HYPERPARAMETERS
from solvers.plotting import finish_axes, finite_points, panel_axes

__all__ = ["plot_requested_vs_realised", "plot_tradeoff", "plot_histories", "plot_calibration"]

logger = logging.getLogger(__name__)

def _select(results: Any, columns: Sequence[str], split: str | None) -> pd.DataFrame:
    """Rows of ``split``; ValueError naming a missing column or an empty selection."""
    if not isinstance(results, pd.DataFrame):
        raise ValueError(f"results: expected the DataFrame of compare(), got {type(results).__name__}")
    missing = [c for c in ("method", "value", "split", *columns) if c not in results.columns]
    if missing:
        raise ValueError(f"results: missing column(s) {missing}; available: {list(results.columns)}")
    rows = results if split is None else results[results["split"] == split]
    if rows.empty:
        raise ValueError(f"split: no rows with split == {split!r}")
    return rows


def _feature_column(results: pd.DataFrame, measure: str) -> str:
    """``measure[f]`` for a feature-less measure column that has per-feature columns ``measure[f]``: ``f`` the one
    feature that the constraints of every run (the ``measure`` column, ``disparate_impact[race]`` or, qualified by
    :func:`fairopt.status.compared_label`, ``disparate_impact[race, each vs rest]``) name, else
    the first feature (what the feature-less column repeats); ``measure`` itself otherwise."""
    features = [c[len(measure) + 1:-1] for c in results.columns if c.startswith(f"{measure}[") and c.endswith("]")]
    if "[" in measure or not features:
        return measure
    named = results["measure"].dropna().astype(str) if "measure" in results.columns else pd.Series([], dtype=str)

    def feature(inside: str) -> str:  # the label may qualify its feature: disparate_impact[race, each vs rest]
        return next((f for f in features if inside == f or inside.startswith(f + ", ")), inside)

    swept = {feature(name[name.index("[") + 1:-1]) for name in named if "[" in name and name.endswith("]")}
    chosen = next(iter(swept)) if len(swept) == 1 and next(iter(swept)) in features else features[0]
    if len(features) > 1:
        logger.info("plot_tradeoff: %s of the sensitive feature %r (of %s)", measure, chosen, features)
    return f"{measure}[{chosen}]"


def _means(rows: pd.DataFrame, columns: Sequence[str]) -> pd.DataFrame:
    """Mean and min/max over seeds and folds per (method, value), sorted by value."""
    grouped = rows.groupby(["method", "value"], dropna=False)[list(columns)]
    table = grouped.mean().join(grouped.min().add_suffix("_min")).join(grouped.max().add_suffix("_max"))
    return table.reset_index().sort_values(["method", "value"])


def _failed_points(results: pd.DataFrame) -> set[tuple[str, float]]:
    """The ``(method, value)`` points one of whose runs failed on its training rows: a degenerate or nearly
    constant model (the ``degenerate`` / ``near_constant`` flags), or, where the value is a bound (not a
    penalty weight), a realised measure that does not meet it
    (:func:`~fairopt.experiments.compare.meets_bound`: undefined, or short by more than 0.005)."""
    rows = results[results["split"] == "train"] if "split" in results else results
    failed = pd.Series(False, index=rows.index)
    for flag in ("degenerate", "near_constant"):
        if flag in rows:
            failed |= rows[flag].fillna(0).astype(float) > 0
    if {"realised", "sense", "hyperparameter"} <= set(rows.columns):
        value = rows["value"].astype(float)
        met = meets_bound(bound_shortfall(value, rows["realised"], rows["sense"]))
        bound = ~rows["hyperparameter"].isin(PENALTY_HYPERPARAMETERS) & rows["sense"].isin(["lower", "upper"])
        failed |= bound & np.isfinite(value) & ~met
    return {(str(m), float(v)) for m, v in rows.loc[failed, ["method", "value"]].itertuples(index=False)}


def plot_requested_vs_realised(
    results: pd.DataFrame,
    path: str | Path | None = None,
    *,
    measure: str | None = None,
    split: str = "train",
    methods: Sequence[str] | None = None,
    title: str | None = None,
    ax: Any = None,
) -> Any:
    """Realised fairness against the requested bound, one curve per method ([SQP] Fig. 3, 5).

    ``x`` is the swept ``value``, ``y`` the realised measure (mean over seeds and folds, bars from
    min to max): each method's own bounded measure (``realised``) or the column ``measure``. On the
    dotted diagonal ``realised = requested``, a method that enforces its bound lies on or above it
    for a lower bound (DI >= delta), on or below it for an upper bound.

    Parameters
    ----------
    results : DataFrame of :func:`~fairopt.experiments.compare`
    path : str or Path, optional
    measure : str, optional
        A column to plot for every method; default: each method's own ``realised``.
    split : str, default "train"
    methods : sequence of str, optional
        Default: all whose hyper-parameter is a bound, not a penalty strength.
    title : str, optional
    ax : matplotlib Axes, optional

    Returns
    -------
    matplotlib Axes
    """
    own = measure is None
    column = "realised" if own else measure
    rows = _select(results, [column, "measure"] if own else [column], split)
    rows = rows[np.isfinite(rows["value"].astype(float))]
    if methods is None:
        methods = [m for m, part in rows.groupby("method", sort=False)
                   if ("hyperparameter" not in part or not part["hyperparameter"].isin(PENALTY_HYPERPARAMETERS).any())
                   and (not own or part["measure"].notna().any())]
    rows = rows[rows["method"].isin(list(methods))]
    if rows.empty:
        raise ValueError(f"methods: none of {list(methods)} has rows with a requested value in split {split!r}")
    axes = panel_axes(ax, 1)
    panel = axes[0]
    table = _means(rows, [column])
    labels = rows.groupby("method", sort=False)["measure"].agg(lambda m: " | ".join(map(str, m.dropna().unique()))) \
        if own else {}
    for name, part in table.groupby("method", sort=False):
        # the mean of equal values can round a unit in the last place past them: no negative bar
        err = np.clip(np.vstack([part[column] - part[f"{column}_min"], part[f"{column}_max"] - part[column]]), 0, None)
        label = f"{name}: {labels[name]}" if own else str(name)
        panel.errorbar(part["value"], part[column], yerr=err, marker="o", capsize=2, label=label)
    lo = float(min(table["value"].min(), table[column].min()))
    hi = float(max(table["value"].max(), table[column].max()))
    panel.plot([lo, hi], [lo, hi], "k:", lw=1, label="realised = requested")
    panel.set_xlabel("requested bound (value)")
    panel.set_ylabel(f"realised {'bounded measure' if own else measure} ({split})")
    panel.grid(alpha=0.3)
    panel.legend(fontsize=8)
    return finish_axes(axes, path, title, created=ax is None)


def plot_tradeoff(
    results: pd.DataFrame,
    path: str | Path | None = None,
    *,
    performance: str = "accuracy",
    unfairness: str = "dp_difference",
    split: str = "test",
    annotate: bool = True,
    title: str | None = None,
    ax: Any = None,
) -> Any:
    """Performance against unfairness, one curve per method through its grid values (means over seeds
    and folds, labelled with the value when ``annotate``). A point one of whose runs failed on its training
    rows (a degenerate or nearly constant model, or a bound missed by more than 0.005 or undefined) is
    crossed out: its mean is not a point the method reaches.

    Parameters
    ----------
    results : DataFrame of :func:`~fairopt.experiments.compare`
    path : str or Path, optional
    performance : str, default "accuracy"
    unfairness : str, default "dp_difference"
        Any measure column (for ``di_ratio`` higher is fairer). A feature-less ``dp_difference`` or
        ``di_ratio`` of data with several sensitive features is read on the feature the swept constraints
        bound (``dp_difference[race]`` for ``disparate_impact[race]`` runs), else on the first feature, and
        the axis names the feature.
    split : str, default "test"
    annotate : bool, default True
    title : str, optional
    ax : matplotlib Axes, optional

    Returns
    -------
    matplotlib Axes
    """
    _select(results, [performance, unfairness], split)
    unfairness = _feature_column(results, unfairness)
    rows = _select(results, [performance, unfairness], split)
    axes = panel_axes(ax, 1)
    panel = axes[0]
    table = _means(rows, [performance, unfairness])
    failed = _failed_points(results)
    crossed = False
    for name, part in table.groupby("method", sort=False):
        panel.plot(part[unfairness], part[performance], marker="o", label=str(name))
        bad = np.array([(str(name), float(v)) in failed for v in part["value"]], dtype=bool)
        if bad.any():
            panel.scatter(part[unfairness][bad], part[performance][bad], marker="x", s=80, color="red", zorder=3,
                          label=None if crossed else "a run degenerate or short of its bound (train)")
            crossed = True
        if annotate:
            for value, x, y in zip(part["value"], part[unfairness], part[performance]):
                if np.isfinite(value):
                    panel.annotate(f"{value:g}", (x, y), fontsize=6, xytext=(3, 3), textcoords="offset points")
    panel.set_xlabel(f"{unfairness} ({split})")
    panel.set_ylabel(f"{performance} ({split})")
    panel.grid(alpha=0.3)
    panel.legend(fontsize=8)
    return finish_axes(axes, path, title, created=ax is None)


def plot_histories(
    histories: Mapping[str, Any],
    path: str | Path | None = None,
    *,
    keys: Sequence[str] = ("f", "V"),
    x: str = "iteration",
    log_keys: Sequence[str] = ("V", "V_exact", "P"),
    title: str | None = None,
    ax: Any = None,
) -> Any:
    """Training curves of several runs: one panel per history key, one line per run, each run in one colour
    in every panel (the legend on the first panel names them).

    Parameters
    ----------
    histories : mapping label -> History
        A run lacking a key is skipped in that panel (its colour is not given to another run).
    path : str or Path, optional
    keys : sequence of str, default ("f", "V")
        History columns; keys no run recorded are dropped.
    x : str, default "iteration"
    log_keys : sequence of str
        Keys drawn on a symlog scale.
    title : str, optional
    ax : sequence of matplotlib Axes, optional
        One per kept key.

    Returns
    -------
    matplotlib Axes, or a list of them for several keys
    """
    if not isinstance(histories, Mapping) or not histories:
        raise ValueError(f"histories: expected a non-empty mapping label -> History, got {histories!r}")
    for label, h in histories.items():
        if not hasattr(h, "column") or not hasattr(h, "records"):
            raise ValueError(f"histories[{label!r}]: expected a solvers.History, got {type(h).__name__}")
    present = [k for k in keys if any(any(k in r for r in h.records) for h in histories.values())]
    if not present:
        raise ValueError(f"keys: no history recorded any of {list(keys)}")
    axes = panel_axes(ax, len(present))
    from matplotlib import rcParams

    cycle = rcParams["axes.prop_cycle"].by_key().get("color", ["C0"])
    colours = {label: cycle[i % len(cycle)] for i, label in enumerate(histories)}  # one colour per run everywhere
    for panel, key in zip(axes, present):
        for label, h in histories.items():
            if not any(key in r for r in h.records):
                continue
            xs = h.column(x) if any(x in r for r in h.records) else np.arange(len(h))
            panel.plot(*finite_points(xs, h.column(key)), lw=1.1, label=str(label), color=colours[label])
        if key in log_keys:
            panel.set_yscale("symlog", linthresh=1e-4)
        panel.set_xlabel(x)
        panel.set_title(key)
        panel.grid(alpha=0.3)
    # one entry per run, also for a run absent from the first panel (Moving Targets records no ``f``)
    from matplotlib.lines import Line2D

    axes[0].legend(handles=[Line2D([], [], color=colours[label], lw=1.1, label=str(label)) for label in histories
                            if any(any(k in r for r in histories[label].records) for k in present)], fontsize=7)
    return finish_axes(axes, path, title, created=ax is None)


def plot_calibration(result: Any, path: str | Path | None = None, *, title: str | None = None, ax: Any = None) -> Any:
    """The calibration sweep ([DC] Fig. 5.2): validation unfairness vs ``lambda`` and vs accuracy, the
    selected ``lambda`` marked; returns the two Axes.
    """
    for attr in ("summary", "fairness", "accuracy", "selected"):
        if not hasattr(result, attr):
            raise ValueError(f"result: expected a CalibrationResult, missing {attr!r}")
    s = result.summary
    fair, acc = f"{result.fairness}_mean", f"{result.accuracy}_mean"
    axes = panel_axes(ax, 2)
    left, right = axes
    left.plot(s["value"], s[fair], marker="o")
    right.plot(s[acc], s[fair], marker="o")
    chosen = s[s["selected"]]
    for panel, xcol in ((left, "value"), (right, acc)):
        panel.scatter(chosen[xcol], chosen[fair], s=120, facecolors="none", edgecolors="red",
                      label=f"selected lambda = {result.selected:g}")
        panel.set_ylabel(f"{result.fairness} (validation)")
        panel.grid(alpha=0.3)
    left.set_xlabel("lambda")
    right.set_xlabel(f"{result.accuracy} (validation)")
    left.legend(fontsize=8)
    return finish_axes(axes, path, title, created=ax is None)
