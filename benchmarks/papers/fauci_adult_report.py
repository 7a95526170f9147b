"""Tables, figure and summary of the [FU] Fig. 1 experiment (:mod:`benchmarks.papers.fauci_adult`).

The paper's numbers are the ones its text states for Fig. 1 ([FU] sec. 4.2-4.4; the figure
itself is an image in the available text, so curves cannot be copied) and the x-axis ranges of
its panels. The paper reports means over 5 folds without a spread; the one spread it gives is
that of the vanilla network's accuracy across the panels it is quoted for (86.4% to 86.8%:
0.4 points), used as the paper's tolerance on accuracies.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping, Sequence

import numpy as np
import pandas as pd

from solvers.plotting import finish_axes, panel_axes

__all__ = ["METRICS", "ATTRIBUTES", "PAPER_CLAIMS", "PAPER_AXES", "PAPER_ACCURACY_SPREAD", "EO_FIGURE_SCALE", "Claim",
           "curve_table", "claims_table", "plot_fig1", "write_summary"]

#: The rows of [FU] Fig. 1 (metric families) and its columns (sensitive attributes).
METRICS = ("dp", "di", "eo")
ATTRIBUTES = ("sex", "race", "age")
LABELS = {"dp": "DP", "di": "DI", "eo": "EO"}
#: The spread of the paper's own vanilla accuracy across the panels it is quoted for (86.4-86.8%).
PAPER_ACCURACY_SPREAD = 0.4
#: Our WEO/GEO ([FU] eq. 10-11, the sum over the two classes) times this is the scale of the
#: EO axis of Fig. 1 (the authors' code averages the two classes).
EO_FIGURE_SCALE = 0.5
#: x-axis ranges of the panels of [FU] Fig. 1 (a)-(i) (figure scale).
PAPER_AXES: dict[tuple[str, str], tuple[float, float]] = {
    ("dp", "sex"): (0.0, 0.10), ("dp", "race"): (0.0, 0.10), ("dp", "age"): (0.02, 0.12),
    ("di", "sex"): (0.4, 1.0), ("di", "race"): (0.60, 1.00), ("di", "age"): (0.48, 0.58),
    ("eo", "sex"): (0.02, 0.07), ("eo", "race"): (0.04, 0.16), ("eo", "age"): (0.03, 0.07),
}


@dataclass(frozen=True)
class Claim:
    """One number the paper states about Fig. 1.

    ``what``: ``"vanilla accuracy"``, ``"vanilla metric"``, ``"accuracy at bound"`` (the best
    FaUCI accuracy whose metric meets ``bound``: ``<=`` for DP/EO, ``>=`` for DI; a lower bound
    to meet), ``"best metric"`` (the fairest FaUCI point) or ``"accuracy at best metric"``.
    Accuracies in %, metrics on the figure scale. :attr:`rounding` is half a unit of the last
    digit the paper prints (86.7: 0.05; 85.27 and 0.34: 0.005), the precision of the number.
    """

    panel: tuple[str, str]
    what: str
    paper: float
    source: str
    bound: float | None = None

    @property
    def rounding(self) -> float:
        decimals = len(f"{self.paper:g}".partition(".")[2])
        return 0.5 * 10.0 ** -decimals


PAPER_CLAIMS: tuple[Claim, ...] = (
    Claim(("dp", "sex"), "vanilla accuracy", 86.7, "sec. 4.2: the vanilla model (86.7%), Fig. 1a"),
    Claim(("dp", "sex"), "accuracy at bound", 85.27, "sec. 4.2: 85.27% with DP <= 0.01", 0.01),
    Claim(("di", "sex"), "vanilla accuracy", 86.7, "sec. 4.3: vanilla 86.7% with DI = 0.34, Fig. 1d"),
    Claim(("di", "sex"), "vanilla metric", 0.34, "sec. 4.3, Fig. 1d"),
    Claim(("di", "sex"), "accuracy at bound", 85.6, "sec. 4.3: DI >= 0.8 preserving 85.6%", 0.8),
    Claim(("di", "race"), "vanilla accuracy", 86.8, "sec. 4.3: vanilla DI 0.47, accuracy 86.8%, Fig. 1e"),
    Claim(("di", "race"), "vanilla metric", 0.47, "sec. 4.3, Fig. 1e"),
    Claim(("di", "race"), "accuracy at bound", 86.8, "sec. 4.3: the vanilla accuracy kept with DI >= 0.8", 0.8),
    Claim(("di", "age"), "vanilla accuracy", 86.4, "sec. 4.3: vanilla 86.4% with DI = 0.47, Fig. 1f"),
    Claim(("di", "age"), "vanilla metric", 0.47, "sec. 4.3, Fig. 1f"),
    Claim(("di", "age"), "best metric", 0.58, "sec. 4.3: improves until DI = 0.58"),
    Claim(("di", "age"), "accuracy at best metric", 85.5, "sec. 4.3: ... with an accuracy of 85.5%"),
    Claim(("eo", "sex"), "accuracy at bound", 85.9, "sec. 4.4: accuracy >= 85.9% with EO <= 0.02, Fig. 1g", 0.02),
)


def _scale(metric: str) -> float:
    return EO_FIGURE_SCALE if metric == "eo" else 1.0


def _fairer(metric: str, a: float, b: float) -> bool:
    """Whether metric value ``a`` is fairer than ``b`` (DI: higher; DP, EO: lower)."""
    return a > b if metric == "di" else a < b


def _points(rows: pd.DataFrame, panel: tuple[str, str], key: str, method: str) -> pd.DataFrame:
    """Mean and sd over folds and seeds of accuracy and the panel metric (figure scale) per value."""
    if method == "vanilla":
        part = rows[rows["method"] == "vanilla"]
    else:
        part = rows[(rows["method"] == method) & (rows["metric"] == panel[0]) & (rows["attribute"] == panel[1])]
    if part.empty or key not in part.columns:
        return pd.DataFrame(columns=["value", "runs", "acc", "acc_sd", "metric", "metric_sd", "epochs"])
    frame = part.assign(_m=part[key].astype(float) * _scale(panel[0]))
    grouped = frame.groupby("value", sort=True)
    return pd.DataFrame({"runs": grouped.size(), "acc": grouped["accuracy"].mean(), "acc_sd": grouped["accuracy"].std(),
                         "metric": grouped["_m"].mean(), "metric_sd": grouped["_m"].std(),
                         "epochs": grouped["epochs_run"].mean()}).reset_index()


def _pm(mean: float, sd: float, digits: int) -> str:
    if mean is None or not np.isfinite(mean):
        return "n/a"
    return f"{mean:.{digits}f}" + (f" ± {sd:.{digits}f}" if sd is not None and np.isfinite(sd) else "")


def curve_table(rows: pd.DataFrame, keys: Mapping[tuple[str, str], str]) -> pd.DataFrame:
    """Every point of Fig. 1: per panel the vanilla network, the FaUCI lambdas and the SQP bounds,
    test accuracy (%) and the panel's metric (its evaluate() key; EO also on the figure scale),
    mean ± sd over folds and seeds."""
    records = []
    for panel, key in keys.items():
        lo, hi = PAPER_AXES.get(panel, (math.nan, math.nan))
        for method in ("vanilla", "fauci", "sqp"):
            for p in _points(rows, panel, key, method).itertuples(index=False):
                raw, raw_sd = p.metric / _scale(panel[0]), p.metric_sd / _scale(panel[0])
                records.append({
                    "panel": f"{LABELS[panel[0]]} / {panel[1]}", "metric": key, "method": method,
                    "lambda or bound": "-" if method == "vanilla" else f"{p.value:g}", "runs": int(p.runs),
                    "test accuracy (%)": _pm(p.acc, p.acc_sd, 2),
                    "metric (eq.)": _pm(raw, raw_sd, 4),
                    "metric (figure scale)": _pm(p.metric, p.metric_sd, 4),
                    "paper Fig. 1 x-range": f"{lo:g}-{hi:g}", "epochs": f"{p.epochs:.0f}"})
    return pd.DataFrame(records)


def _claim_value(claim: Claim, rows: pd.DataFrame, key: str) -> tuple[float, float, str]:
    """(ours, our sd, note) of one claim."""
    metric = claim.panel[0]
    vanilla = _points(rows, claim.panel, key, "vanilla")
    fauci = _points(rows, claim.panel, key, "fauci")
    if claim.what in ("vanilla accuracy", "vanilla metric"):
        if vanilla.empty:
            return math.nan, math.nan, "no vanilla run"
        column = "acc" if claim.what == "vanilla accuracy" else "metric"
        return float(vanilla[column].iloc[0]), float(vanilla[f"{column}_sd"].iloc[0]), ""
    curve = pd.concat([vanilla.assign(value=0.0), fauci], ignore_index=True)  # lambda = 0 is the vanilla point
    curve = curve[np.isfinite(curve["metric"].astype(float))]  # NaN: e.g. DI of a model without positives
    if curve.empty:
        return math.nan, math.nan, "no run of this panel with a defined metric"
    if claim.what == "accuracy at bound":
        meets = curve[curve["metric"] >= claim.bound] if metric == "di" else curve[curve["metric"] <= claim.bound]
        if meets.empty:
            best = curve["metric"].max() if metric == "di" else curve["metric"].min()
            return math.nan, math.nan, f"bound not reached (fairest mean {best:.4f})"
        top = meets.loc[meets["acc"].idxmax()]
        return float(top["acc"]), float(top["acc_sd"]), f"lambda {top['value']:g}, metric {top['metric']:.4f}"
    best = curve.loc[curve["metric"].idxmax() if metric == "di" else curve["metric"].idxmin()]
    if claim.what == "best metric":
        return float(best["metric"]), float(best["metric_sd"]), f"lambda {best['value']:g}"
    return float(best["acc"]), float(best["acc_sd"]), f"lambda {best['value']:g}, metric {best['metric']:.4f}"


def claims_table(rows: pd.DataFrame, keys: Mapping[tuple[str, str], str]) -> pd.DataFrame:
    """The paper's stated numbers (:data:`PAPER_CLAIMS`) beside ours, with the gap.

    ``beyond spread``: ``|gap|`` (for "accuracy at bound", a lower bound to meet: the
    shortfall) larger than the paper's spread (:data:`PAPER_ACCURACY_SPREAD` for accuracies,
    none reported for metrics), the rounding of the paper's number (:attr:`Claim.rounding`)
    and our sd over folds and seeds. ``net of vanilla``: for the accuracies of FaUCI points,
    the gap minus the gap of the vanilla networks (ours minus the paper's vanilla accuracy of
    the same attribute), i.e. the difference in the accuracy the regulariser costs.
    """
    vanilla_gap = {}
    for claim in PAPER_CLAIMS:
        if claim.what == "vanilla accuracy" and claim.panel in keys:
            vanilla_gap.setdefault(claim.panel[1], _claim_value(claim, rows, keys[claim.panel])[0] - claim.paper)
    records = []
    for claim in PAPER_CLAIMS:
        if claim.panel not in keys:
            continue
        ours, sd, note = _claim_value(claim, rows, keys[claim.panel])
        accuracy = "accuracy" in claim.what
        gap = ours - claim.paper
        tolerance = max(PAPER_ACCURACY_SPREAD if accuracy else 0.0, claim.rounding, sd if np.isfinite(sd) else 0.0)
        excess = max(-gap, 0.0) if claim.what == "accuracy at bound" else abs(gap)
        beyond = "n/a" if not np.isfinite(gap) else ("yes" if excess > tolerance + 1e-12 else "no")
        digits = 2 if accuracy else 4
        what = claim.what + (f" ({'>=' if claim.panel[0] == 'di' else '<='} {claim.bound:g})" if claim.bound else "")
        net = gap - vanilla_gap.get(claim.panel[1], math.nan) if accuracy and "vanilla" not in claim.what else math.nan
        records.append({"panel": f"{LABELS[claim.panel[0]]} / {claim.panel[1]}", "metric": keys[claim.panel],
                        "claim": what, "paper": f"{claim.paper:.{digits}f}", "ours": _pm(ours, sd, digits),
                        "gap": "n/a" if not np.isfinite(gap) else f"{gap:+.{digits}f}", "beyond spread": beyond,
                        "net of vanilla": f"{net:+.2f}" if np.isfinite(net) else "", "note": note,
                        "source": claim.source})
    return pd.DataFrame(records)


def plot_fig1(rows: pd.DataFrame, keys: Mapping[tuple[str, str], str], path: str | Path) -> Path:
    """[FU] Fig. 1: test accuracy against the panel's metric (figure scale), one panel per
    (metric, attribute): the FaUCI curve (mean ± sd over folds, labelled by lambda), the
    vanilla network, the SQP points and the paper's stated points; the paper's x-range shaded."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=(13.5, 11.0))
    grid = fig.subplots(len(METRICS), len(ATTRIBUTES), squeeze=False)
    axes = panel_axes(grid, len(METRICS) * len(ATTRIBUTES), "grid")
    claims = {(c.panel, c.what): c for c in PAPER_CLAIMS}
    for i, metric in enumerate(METRICS):
        for j, attribute in enumerate(ATTRIBUTES):
            ax = axes[i * len(ATTRIBUTES) + j]
            panel = (metric, attribute)
            if panel not in keys:
                ax.set_visible(False)
                continue
            key = keys[panel]
            fauci = _points(rows, panel, key, "fauci")
            if len(fauci):
                ax.errorbar(fauci["metric"], fauci["acc"], xerr=fauci["metric_sd"].fillna(0.0),
                            yerr=fauci["acc_sd"].fillna(0.0), fmt="r*-", ms=8, capsize=2, lw=0.8, label="FaUCI (ours)")
                for p in fauci.itertuples(index=False):
                    ax.annotate(f"{p.value:g}", (p.metric, p.acc), fontsize=6, xytext=(3, 3),
                                textcoords="offset points")
            vanilla = _points(rows, panel, key, "vanilla")
            if len(vanilla):
                ax.plot(vanilla["metric"], vanilla["acc"], "kx", ms=10, mew=2, label="vanilla (ours)")
            sqp = _points(rows, panel, key, "sqp")
            if len(sqp):
                ax.plot(sqp["metric"], sqp["acc"], "bD", ms=7, label="SQP hard constraint (ours)")
                for p in sqp.itertuples(index=False):
                    ax.annotate(f"bound {p.value:g}", (p.metric, p.acc), fontsize=6, color="b", xytext=(3, -8),
                                textcoords="offset points")
            _paper_marks(ax, panel, claims)
            lo, hi = PAPER_AXES[panel]
            ax.axvspan(lo, hi, color="orange", alpha=0.08, label="paper's x-range")
            name = key.split("[")[0].upper()
            ax.set_xlabel(f"{name} ({attribute})" + (" x 0.5 (figure scale)" if metric == "eo" else ""))
            ax.set_ylabel("test accuracy (%)")
            ax.set_title(f"({'abcdefghi'[i * len(ATTRIBUTES) + j]}) {LABELS[metric]}, {attribute}")
            ax.grid(alpha=0.3)
            ax.legend(fontsize=6)
    finish_axes(axes, path, "[FU] Fig. 1 on UCI Adult: FaUCI (ours) against the vanilla network and SQP", created=True,
                dpi=110)
    return Path(path)


def _paper_marks(ax: object, panel: tuple[str, str], claims: Mapping) -> None:
    """The paper's stated points (vanilla point, accuracy at a bound, fairest point) on one panel."""
    vanilla_acc, vanilla_metric = claims.get((panel, "vanilla accuracy")), claims.get((panel, "vanilla metric"))
    if vanilla_acc and vanilla_metric:
        ax.plot([vanilla_metric.paper], [vanilla_acc.paper], "ks", mfc="none", ms=9, label="paper: vanilla")
    at_bound = claims.get((panel, "accuracy at bound"))
    if at_bound:
        ax.axvline(at_bound.bound, color="g", ls=":", lw=1)
        ax.axhline(at_bound.paper, color="g", ls=":", lw=1,
                   label=f"paper: {at_bound.paper:g}% at bound {at_bound.bound:g}")
    best, best_acc = claims.get((panel, "best metric")), claims.get((panel, "accuracy at best metric"))
    if best and best_acc:
        ax.plot([best.paper], [best_acc.paper], "g^", mfc="none", ms=9, label="paper: fairest FaUCI point")


def write_summary(path: str | Path, *, rows: pd.DataFrame, keys: Mapping[tuple[str, str], str], header: Sequence[str],
                  choices: str) -> str:
    """Write the markdown summary: header, the paper's numbers beside ours, every point, the
    protocol choices, the intersectional metrics of the vanilla network; returns it."""
    from fairopt.experiments.reporting import markdown_table

    claims = claims_table(rows, keys)
    curves = curve_table(rows, keys)
    beyond = claims[claims["beyond spread"] == "yes"] if len(claims) else claims
    lines = [*header, "",
             "## The paper's numbers beside ours", "",
             "Paper: the numbers [FU] sec. 4.2-4.4 states about Fig. 1 (means of 5 folds; the figure is an image in "
             "the available text). Ours: mean ± sd over folds and seeds on the test set, metrics on the figure "
             "scale (EO: half of eq. 10, see below). `accuracy at bound`: our most accurate point (lambda = 0 "
             "included) whose mean metric meets the bound - a lower bound to meet, so only a shortfall is a gap. "
             f"`beyond spread`: the gap exceeds the paper's own spread ({PAPER_ACCURACY_SPREAD} points on accuracies: "
             "its vanilla accuracy is quoted as 86.4-86.8%; none reported on metrics), the rounding of its number "
             "and our sd. `net of vanilla`: the accuracy gap of a FaUCI point minus that of the vanilla network "
             "(same attribute), the part of the gap that is the regulariser's cost rather than the baseline's.", "",
             markdown_table(claims) if len(claims) else "(no panel of the paper in this run)", "",
             f"Gaps beyond the spread: {len(beyond)} of {len(claims)}.", "",
             "## Fig. 1: every point (test set)", "",
             "`metric (eq.)`: [FU] eq. 5-11 as `fairopt.evaluate` reports it; `metric (figure scale)`: the same, EO "
             "halved. `paper Fig. 1 x-range`: the x-axis of the paper's panel. Figure: `fig1_tradeoffs.png`.", "",
             markdown_table(curves), "",
             "## Combined attribute (sex & race)", "",
             "[FU] sec. 3.4: the groups are the occurring cells of the cartesian product of sex and race, W* "
             "metrics with uniform weights, on the test predictions of the vanilla network and the SQP models "
             "(means over folds).", "",
             markdown_table(_combined_table(rows)), "",
             "## Differences from the paper and choices where it is silent", "", choices]
    text = "\n".join(lines)
    Path(path).write_text(text + "\n")
    return text


def _combined_table(rows: pd.DataFrame) -> pd.DataFrame:
    columns = [c for c in rows.columns if "&" in c]
    if not columns:
        return pd.DataFrame({"note": ["no combined attribute in this run"]})
    part = rows[rows["method"].isin(["vanilla", "sqp"])]
    means = part.groupby(["method", "metric", "attribute", "value"], sort=False)[["accuracy", *columns]].mean()
    return means.reset_index().round(4)
