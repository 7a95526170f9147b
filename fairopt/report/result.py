""":class:`GroupReport`: the tables of :func:`fairopt.group_report`, as Markdown and as a plot."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

__all__ = ["GroupReport", "frame_markdown"]


def _number(value: Any, digits: int) -> str:
    """A number for a table: ``digits`` decimals (``digits`` significant digits from 10^4)."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "NaN"
    value = float(value)
    return f"{value:.{digits}f}" if abs(value) < 1e4 else f"{value:.{digits}g}"


def _with_interval(value: Any, low: Any, high: Any, digits: int) -> str:
    """``"v [low, high]"``, or ``"v"`` when the interval is NaN."""
    text = _number(value, digits)
    if pd.isna(low) or pd.isna(high):
        return text
    return f"{text} [{_number(low, digits)}, {_number(high, digits)}]"


def _label(value: Any) -> str:
    """A group label for a table; ``"n/a"`` when there is none (an undefined metric)."""
    return "n/a" if value is None or (isinstance(value, float) and math.isnan(value)) else str(value)


def _escape(text: Any) -> str:
    """Text for a Markdown table cell (``|`` of intersection labels escaped)."""
    return str(text).replace("|", "\\|").replace("\n", " ")


def _markdown_table(header: list[str], rows: list[list[str]], right: list[bool]) -> str:
    lines = ["| " + " | ".join(_escape(h) for h in header) + " |",
             "| " + " | ".join("---:" if r else ":---" for r in right) + " |"]
    lines += ["| " + " | ".join(_escape(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


def frame_markdown(df: pd.DataFrame, floatfmt: str = ".4g", index: bool = False) -> str:
    """A GitHub Markdown table of ``df`` without an optional dependency: floats in ``floatfmt``,
    numeric columns right-aligned, ``|`` in cells escaped; ``index=True`` adds the index as the first
    column."""
    if index:
        df = df.reset_index()
    right = [pd.api.types.is_numeric_dtype(kind) and not pd.api.types.is_bool_dtype(kind) for kind in df.dtypes]

    def cell(value: Any) -> str:
        return format(value, floatfmt) if isinstance(value, (float, np.floating)) else str(value)

    return _markdown_table([str(c) for c in df.columns], [[cell(v) for v in row] for row in
                                                          df.itertuples(index=False)], right)


@dataclass(frozen=True, repr=False)
class GroupReport:
    """Per-group performance and fairness of one model, with bootstrap confidence intervals.

    Built by :func:`fairopt.group_report` (metrics and bootstrap defined there).

    Attributes
    ----------
    task : {"binary", "regression"}
    metrics : tuple of str
    by_group : pandas.DataFrame
        One row per group: ``n`` and per metric ``m`` the columns ``m``, ``m_low``, ``m_high``
        (NaN interval for a group under ``min_group_size`` rows entering the metric).
    overall : pandas.Series
        The same columns over all rows.
    disparities : pandas.DataFrame
        One row per metric: ``ratio`` (``min_g m_g / max_g m_g``), ``difference``
        (``max_g m_g - min_g m_g``), their ``_low`` / ``_high`` ends, ``group_min``, ``group_max``
        and ``overall``.
    groups : pandas.DataFrame
        The value of every sensitive attribute in each group.
    sensitive_names : list of str
    confidence : float; n_bootstrap : int; seed : int or None; min_group_size : int
    threshold : float or None
        The probability threshold of the hard predictions (None: ``predict``).
    positive : object or None
        The positive class (classification).
    source : str
        The kind of model the predictions came from.
    notes : list of str
        What is NaN and why.
    weighted : bool
        Whether the metrics are weighted by ``sample_weight`` (``by_group["weight"]`` then holds each
        group's total weight).
    """

    task: str
    metrics: tuple[str, ...]
    by_group: pd.DataFrame
    overall: pd.Series
    disparities: pd.DataFrame
    groups: pd.DataFrame
    sensitive_names: list[str]
    confidence: float
    n_bootstrap: int
    seed: int | None
    min_group_size: int
    threshold: float | None = None
    positive: Any = None
    source: str = ""
    notes: list[str] = field(default_factory=list)
    weighted: bool = False

    # ------------------------------------------------------------------ fairlearn-style accessors
    def ratio(self) -> pd.Series:
        """``min_g m_g / max_g m_g`` of every metric (the ``ratio`` column of :attr:`disparities`)."""
        return self.disparities["ratio"].astype(float)

    def difference(self) -> pd.Series:
        """``max_g m_g - min_g m_g`` of every metric (the ``difference`` column of :attr:`disparities`)."""
        return self.disparities["difference"].astype(float)

    def _check_metric(self, metric: str) -> str:
        if metric not in self.metrics:
            raise ValueError(f"metric: expected one of {list(self.metrics)} (task {self.task!r}), got {metric!r}")
        return metric

    # ------------------------------------------------------------------ text
    def _interval_text(self) -> str:
        if self.n_bootstrap == 0:
            return "no confidence intervals (n_bootstrap=0)"
        seed = "unseeded" if self.seed is None else f"seed {self.seed}"
        return (f"{self.confidence:.0%} percentile bootstrap intervals in brackets ({self.n_bootstrap} resamples "
                f"stratified by group, {seed}); none for groups under {self.min_group_size} rows")

    def to_markdown(self, digits: int = 3) -> str:
        """The report as Markdown: a description, the per-group and disparity tables and the notes.

        Parameters
        ----------
        digits : int, default 3
            Decimals (significant digits from 10^4).

        Returns
        -------
        str
        """
        if isinstance(digits, bool) or not isinstance(digits, int) or digits < 0:
            raise ValueError(f"digits: expected an integer >= 0, got {digits!r}")
        what = f"{self.source} " if self.source else ""
        threshold = "" if self.threshold is None else f", positive when p > {self.threshold:g}"
        positive = "" if self.positive is None else f", positive class {self.positive!r}"
        weighted = (f", metrics weighted by sample_weight (total weight {_number(self.overall['weight'], digits)})"
                    if self.weighted else "")
        lines = [f"Group report of {what}({self.task}{positive}{threshold}{weighted}) on "
                 f"{int(self.overall['n'])} rows, "
                 f"{len(self.by_group)} groups of {' x '.join(self.sensitive_names)}; "
                 f"{self._interval_text()}.", ""]
        header = [self.by_group.index.name or "group", "n", *self.metrics]
        rows = []
        for label, row in [*self.by_group.iterrows(), ("overall", self.overall)]:
            rows.append([str(label), str(int(row["n"]))]
                        + [_with_interval(row[m], row[f"{m}_low"], row[f"{m}_high"], digits) for m in self.metrics])
        lines += [_markdown_table(header, rows, [False, True] + [True] * len(self.metrics)), ""]
        header = ["metric", "ratio (min/max)", "difference (max - min)", "lowest group", "highest group", "overall"]
        rows = [[m, _with_interval(d["ratio"], d["ratio_low"], d["ratio_high"], digits),
                 _with_interval(d["difference"], d["difference_low"], d["difference_high"], digits),
                 _label(d["group_min"]), _label(d["group_max"]), _number(d["overall"], digits)]
                for m, d in self.disparities.iterrows()]
        lines.append(_markdown_table(header, rows, [False, True, True, False, False, True]))
        notes = list(self.notes) + self._outside_notes()
        if notes:
            lines += ["", "Notes:", ""] + [f"- {note}" for note in notes]
        return "\n".join(lines) + "\n"

    def _outside_notes(self) -> list[str]:
        """A note where a disparity lies outside its own percentile interval: a ratio or difference of the
        smallest and largest group values is biased towards more disparity in the resamples (each resample's
        minimum and maximum are over noisy values), most where a group is small."""
        outside = []
        for metric, d in self.disparities.iterrows():
            for kind in ("ratio", "difference"):
                value, low, high = (float(d[kind]), float(d[f"{kind}_low"]), float(d[f"{kind}_high"]))
                if all(math.isfinite(v) for v in (value, low, high)) and not low <= value <= high:
                    outside.append(f"{metric} {kind}")
        if not outside:
            return []
        return [f"{', '.join(outside)}: the value lies outside its percentile interval. The smallest and largest "
                "group values of each resample move apart with the resampling noise, so the intervals of a "
                "disparity lean towards more disparity, most with small groups; read them as a range of plausible "
                "disparities, not as centred on the value."]

    def __repr__(self) -> str:
        return (f"GroupReport(task={self.task!r}, groups={len(self.by_group)} of {self.sensitive_names}, "
                f"n={int(self.overall['n'])}, metrics={list(self.metrics)}, confidence={self.confidence:g}, "
                f"n_bootstrap={self.n_bootstrap})")

    # ------------------------------------------------------------------ plot
    def plot(self, ax: Any = None, metric: str = "selection_rate") -> Any:
        """Bars of one metric per group with their intervals as error bars and the overall value as a
        dashed line; long labels are turned 45 degrees.

        Parameters
        ----------
        ax : matplotlib.axes.Axes, optional
            Where to draw; a new figure's axes by default.
        metric : str, default "selection_rate"
            One of :attr:`metrics`.

        Returns
        -------
        matplotlib.axes.Axes
        """
        self._check_metric(metric)
        labels = [str(g) for g in self.by_group.index]
        longest = max((len(s) for s in labels), default=0)
        created = ax is None
        if created:
            import matplotlib.pyplot as plt

            # room under the axes for labels turned 45 degrees (about 0.07 inch per character)
            _, ax = plt.subplots(figsize=(max(4.0, 0.9 * len(self.by_group) + 2.0), 3.5 + 0.05 * longest))
        values = self.by_group[metric].to_numpy(dtype=float)
        low = self.by_group[f"{metric}_low"].to_numpy(dtype=float)
        high = self.by_group[f"{metric}_high"].to_numpy(dtype=float)
        # a percentile interval may exclude the point value; a group without one keeps NaN (drawn hatched)
        errors = np.clip(np.vstack([values - low, high - values]), 0.0, None)
        positions = np.arange(len(values))
        from matplotlib.patches import Patch

        bars = ax.bar(positions, np.nan_to_num(values, nan=0.0), color="tab:blue", alpha=0.8)
        # the legend's handles are drawn here, not taken from the bars (whose first may be hatched below)
        handles = [Patch(facecolor="tab:blue", alpha=0.8, label=metric)]
        known = np.isfinite(errors).all(axis=0) & np.isfinite(values)
        if known.any():
            ax.errorbar(positions[known], values[known], yerr=errors[:, known], fmt="none", ecolor="black",
                        capsize=4)
        if self.n_bootstrap and not known.all():  # no interval (a group below min_group_size): not a zero-width one
            for bar in np.asarray(bars)[~known]:
                bar.set_hatch("//")
                bar.set_alpha(0.4)
            handles.append(Patch(facecolor="tab:blue", alpha=0.4, hatch="//", label="no interval (small group)"))
        handles.append(ax.axhline(float(self.overall[metric]), color="black", linestyle="--", linewidth=1,
                                  label="overall"))
        ax.set_xticks(positions)
        if longest > 8:
            ax.set_xticklabels(labels, rotation=45, ha="right", rotation_mode="anchor")
        else:
            ax.set_xticklabels(labels)
        ax.set_ylabel(metric)
        interval = "" if self.n_bootstrap == 0 else f" ({self.confidence:.0%} bootstrap CI)"
        ax.set_title(f"{metric} by {self.by_group.index.name}{interval}")
        ax.legend(handles=handles, loc="best", fontsize="small")
        if created:
            ax.figure.tight_layout()
        return ax
