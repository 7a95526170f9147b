r"""Tables, figure and summary of ``python -m benchmarks.papers dcov-pg15`` ([DC] sec. 5.2), beside the paper's numbers.

The runner (:mod:`benchmarks.papers.dcov_pg15`) produces one row per trained model, part
(``valid``, ``subtrain``, ``test``, ``train``) and version of the predictions (``corrected``:
False for the model's own rates, True after the balance correction of [DC] Remark 5.3).
This module turns those rows into the paper's tables with the gaps, draws the trade-off
figure and writes the summary. It knows nothing about training.

The paper's numbers are copied from [DC] sec. 5.2 and App. H:

- :data:`PAPER_VALIDATION`: Table 5.3, means of 10 runs on the validation part (30% of the
  training data), per regulariser and ``lambda``: RPS, CCdCov, JdCov, JS divergence, UF;
- :data:`PAPER_TEST`, :data:`PAPER_TRAIN`: Tables 5.4 and H.3, the models retrained on the
  80% training part (``lambda`` 40 for CCdCov, 30 for JdCov), evaluated on the 20% test part
  and on the training part: RPS, Poisson deviance, CCdCov, JdCov, JS divergence, UF.

The paper prints no standard deviations, so a gap is judged against our own spread over
seeds (:func:`gap_table`: ``beyond spread`` when ``|gap| > 2 sd``).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np
import pandas as pd

from fairopt.experiments.reporting import markdown_table
from solvers.plotting import finish_axes, panel_axes

__all__ = ["PAPER_VALIDATION", "PAPER_TEST", "PAPER_TRAIN", "PAPER_SELECTED", "VALIDATION_MEASURES",
           "FINAL_MEASURES", "mean_table", "gap_table", "deviance_table", "gaps_beyond_spread", "plot_tradeoff",
           "write_summary"]

#: Table 5.3 columns (validation) and Tables 5.4 / H.3 columns (test, train)
VALIDATION_MEASURES = ("rps", "ccdcov", "jdcov", "js_divergence", "uf")
FINAL_MEASURES = ("rps", "deviance", "ccdcov", "jdcov", "js_divergence", "uf")
LABELS = {"rps": "RPS", "deviance": "Poisson deviance", "ccdcov": "CCdCov", "jdcov": "JdCov",
          "js_divergence": "JS divergence", "uf": "UF", "loss": "eq. 5.2 loss"}
NAMES = {"none": "No regularisation", "ccdcov": "CCdCov", "jdcov": "JdCov"}

# [DC] Table 5.3: (regulariser, lambda) -> (RPS, CCdCov, JdCov, JS divergence, UF), validation means of 10 runs
PAPER_VALIDATION: dict[tuple[str, float], tuple[float, ...]] = {
    ("ccdcov", 0.0): (0.1192, 9.1380e-04, 1.4778e-03, 0.0289, 0.0774),
    ("ccdcov", 10.0): (0.1197, 1.9653e-04, 5.4627e-04, 0.0079, 0.0203),
    ("ccdcov", 20.0): (0.1202, 9.4145e-05, 4.1285e-04, 0.0038, 0.0100),
    ("ccdcov", 40.0): (0.1208, 4.4518e-05, 3.4792e-04, 0.0016, 0.0047),
    ("ccdcov", 80.0): (0.1214, 2.5133e-05, 3.2185e-04, 0.0008, 0.0026),
    ("ccdcov", 120.0): (0.1219, 2.0275e-05, 3.1479e-04, 0.0006, 0.0022),
    ("ccdcov", 150.0): (0.1221, 1.8772e-05, 3.1228e-04, 0.0006, 0.0021),
    ("jdcov", 0.0): (0.1192, 9.1380e-04, 1.4778e-03, 0.0289, 0.0774),
    ("jdcov", 10.0): (0.1199, 1.5219e-04, 4.8335e-04, 0.0061, 0.0159),
    ("jdcov", 20.0): (0.1205, 6.9255e-05, 3.8005e-04, 0.0027, 0.0074),
    ("jdcov", 40.0): (0.1212, 3.3815e-05, 3.3314e-04, 0.0012, 0.0036),
    ("jdcov", 80.0): (0.1220, 2.1168e-05, 3.1529e-04, 0.0007, 0.0024),
    ("jdcov", 120.0): (0.1226, 1.7017e-05, 3.0845e-04, 0.0005, 0.0022),
    ("jdcov", 150.0): (0.1229, 1.4751e-05, 3.0393e-04, 0.0005, 0.0021),
}
# [DC] Table 5.4 (test part) and Table H.3 (training part): model -> FINAL_MEASURES
PAPER_TEST: dict[str, tuple[float, ...]] = {
    "none": (0.1225, 0.5450, 1.0083e-03, 1.3230e-03, 0.0282, 0.0808),
    "ccdcov": (0.1231, 0.5494, 5.8460e-05, 8.4519e-05, 0.0018, 0.0062),
    "jdcov": (0.1237, 0.5538, 5.2875e-05, 7.5221e-05, 0.0015, 0.0057),
}
PAPER_TRAIN: dict[str, tuple[float, ...]] = {
    "none": (0.1185, 0.5106, 9.6276e-04, 1.2568e-03, 0.0478, 0.0752),
    "ccdcov": (0.1198, 0.5207, 4.2713e-05, 6.7472e-05, 0.0029, 0.0041),
    "jdcov": (0.1205, 0.5266, 3.7555e-05, 5.9485e-05, 0.0032, 0.0050),
}
#: [DC] sec. 5.2.4: the lambdas of the final models ("identical JS-divergence in the validation set")
PAPER_SELECTED = {"none": 0.0, "ccdcov": 40.0, "jdcov": 30.0}


# ----------------------------------------------------------------------------- tables
def mean_table(rows: pd.DataFrame, stage: str, split: str, corrected: bool,
               measures: Sequence[str]) -> pd.DataFrame:
    """Mean and sd (ddof 1) over seeds of ``measures`` per (regulariser, lambda) for one
    stage, part and version of the predictions; columns ``<measure>`` and ``<measure>_sd``."""
    part = rows[(rows["stage"] == stage) & (rows["split"] == split) & (rows["corrected"] == corrected)]
    grouped = part.groupby(["regulariser", "lambda"], sort=True)[list(measures)]
    table = grouped.mean().join(grouped.std(ddof=1).add_suffix("_sd"))
    table["seeds"] = grouped.size()
    return _in_model_order(table.reset_index())


def _in_model_order(table: pd.DataFrame) -> pd.DataFrame:
    """Rows sorted as the paper's tables: no regularisation, CCdCov, JdCov; then lambda."""
    order = {name: i for i, name in enumerate(NAMES)}
    rank = table["regulariser"].map(lambda reg: order.get(reg, len(order)))
    return table.assign(_rank=rank).sort_values(["_rank", "lambda"]).drop(columns="_rank").reset_index(drop=True)


def _panels(table: pd.DataFrame, regularisers: Sequence[str]) -> list[tuple[str, pd.DataFrame]]:
    """Per regulariser, its rows plus the shared ``lambda = 0`` baseline (regulariser "none")."""
    base = table[table["regulariser"] == "none"]
    return [(reg, pd.concat([base.assign(regulariser=reg), table[table["regulariser"] == reg]])
             .sort_values("lambda", ignore_index=True)) for reg in regularisers]


def _fmt(value: float, measure: str) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "n/a"
    return f"{value:.4e}" if measure in ("ccdcov", "jdcov") else f"{value:.4f}"


def _gap(ours: float, paper: float, sd: float, measure: str) -> tuple[str, str]:
    """The gap ``ours - paper`` (dCov measures also as a ratio) and whether it exceeds 2 sd."""
    if paper is None or math.isnan(ours):
        return "", ""
    gap = ours - paper
    text = (f"{gap:+.2e} (x{ours / paper:.2f})" if measure in ("ccdcov", "jdcov") and paper > 0
            else f"{gap:+.4f}")
    if sd is None or math.isnan(sd):
        return text, "n/a (1 seed)"
    return text, "yes" if abs(gap) > 2 * sd else "no"


def gap_table(means: pd.DataFrame, paper: Mapping[Any, Sequence[float]], measures: Sequence[str],
              key: Any) -> pd.DataFrame:
    """One row per (row of ``means``, measure): ours ± sd, the paper's, the gap and whether
    it is beyond our 2-sd seed spread. ``key(row)`` gives the row's key in ``paper``
    (None: the paper has no such row)."""
    records = []
    for _, row in means.iterrows():
        values = paper.get(key(row))
        for j, measure in enumerate(measures):
            ours, sd = float(row[measure]), float(row.get(f"{measure}_sd", np.nan))
            theirs = None if values is None else float(values[j])
            gap, beyond = _gap(ours, theirs, sd, measure)
            records.append({
                "model": NAMES.get(row["regulariser"], row["regulariser"]), "lambda": f"{row['lambda']:g}",
                "measure": LABELS[measure],
                "ours": _fmt(ours, measure) + ("" if math.isnan(sd) else f" ± {_fmt(sd, measure)}"),
                "paper": "—" if theirs is None else _fmt(theirs, measure), "gap": gap or "—",
                "beyond 2 sd": beyond or "—"})
    return pd.DataFrame(records)


def wide_table(means: pd.DataFrame, paper: Mapping[Any, Sequence[float]], measures: Sequence[str],
               key: Any) -> pd.DataFrame:
    """Compact view: one row per (model, lambda), each measure as ``ours / paper (gap)``
    (the gap of the dCov measures as the ratio ours / paper)."""
    records = []
    for _, row in means.iterrows():
        values = paper.get(key(row))
        record = {"model": NAMES.get(row["regulariser"], row["regulariser"]), "lambda": f"{row['lambda']:g}",
                  "seeds": int(row["seeds"])}
        for j, measure in enumerate(measures):
            ours = float(row[measure])
            cell = _fmt(ours, measure)
            if values is not None:
                theirs = float(values[j])
                gap = (f"x{ours / theirs:.2f}" if measure in ("ccdcov", "jdcov") and theirs > 0
                       else f"{ours - theirs:+.4f}")
                cell += f" / {_fmt(theirs, measure)} ({gap})"
            record[f"{LABELS[measure]} ours / paper (gap)"] = cell
        records.append(record)
    return pd.DataFrame(records)


def deviance_table(rows: pd.DataFrame, stage: str, splits: Sequence[str]) -> pd.DataFrame:
    """Poisson deviance, RPS and the balance ratio ``sum v mu / sum N`` per (regulariser,
    lambda) and part, without and with the balance correction (means over seeds)."""
    records = []
    part = rows[rows["stage"] == stage]
    keys = _in_model_order(part[["regulariser", "lambda"]].drop_duplicates())
    for reg, lam in keys.itertuples(index=False):
        group = part[(part["regulariser"] == reg) & (part["lambda"] == lam)]
        record = {"model": NAMES.get(reg, reg), "lambda": f"{lam:g}"}
        for split in splits:
            for corrected, tag in ((False, "raw"), (True, "balanced")):
                cell = group[(group["split"] == split) & (group["corrected"] == corrected)]
                record[f"{split} deviance ({tag})"] = f"{cell['deviance'].mean():.4f}"
            raw = group[(group["split"] == split) & (~group["corrected"])]
            record[f"{split} sum v mu / sum N (raw)"] = f"{raw['balance'].mean():.4f}"
        record["factor alpha"] = f"{group['factor'].mean():.4f}"
        records.append(record)
    return pd.DataFrame(records)


def gaps_beyond_spread(tables: Mapping[str, pd.DataFrame]) -> pd.DataFrame:
    """The rows of the gap tables flagged ``beyond 2 sd`` (or all compared rows when a
    table has a single seed), with the table's name."""
    parts = []
    for name, table in tables.items():
        flagged = table[table["beyond 2 sd"].isin(["yes", "n/a (1 seed)"]) & (table["paper"] != "—")]
        if len(flagged):
            parts.append(flagged.assign(table=name))
    if not parts:
        return pd.DataFrame(columns=["table", "model", "lambda", "measure", "ours", "paper", "gap"])
    out = pd.concat(parts, ignore_index=True)
    return out[["table", "model", "lambda", "measure", "ours", "paper", "gap"]]


# ----------------------------------------------------------------------------- figure
def plot_tradeoff(validation: pd.DataFrame, regularisers: Sequence[str], path: str | Path | None,
                  ax: Any = None, jsd_floor: float | None = None) -> Any:
    """Three panels on the validation part: RPS against the model's own regulariser value
    (measure vs dCov over lambda), JS divergence against lambda ([DC] Fig. 5.4 left) and
    JS divergence against RPS (Fig. 5.4 right); ours (solid, mean over seeds) beside the
    paper's Table 5.3 (dashed, hollow). ``jsd_floor`` (our estimator's value at
    independence) is drawn as a dotted line. Returns the three Axes."""
    axes = panel_axes(ax, 3)
    if jsd_floor is not None and math.isfinite(jsd_floor):
        for a in axes[1:]:
            a.axhline(jsd_floor, color="grey", ls=":", lw=1, label="our JSD estimator at independence")
    colours = {"ccdcov": "tab:blue", "jdcov": "tab:red"}
    for reg, table in _panels(validation, regularisers):
        paper = [(lam, PAPER_VALIDATION[(reg, lam)]) for lam in sorted({k[1] for k in PAPER_VALIDATION})
                 if (reg, lam) in PAPER_VALIDATION]
        colour = colours.get(reg, "tab:green")
        name = NAMES[reg]
        p_lam = [lam for lam, _ in paper]
        p_rps = [v[0] for _, v in paper]
        p_own = [v[1 if reg == "ccdcov" else 2] for _, v in paper]
        p_jsd = [v[3] for _, v in paper]
        axes[0].plot(table[reg], table["rps"], "o-", color=colour, label=f"{name}, ours")
        axes[0].plot(p_own, p_rps, "s--", mfc="none", color=colour, label=f"{name}, paper")
        for lam, x, y in zip(table["lambda"], table[reg], table["rps"]):
            axes[0].annotate(f"{lam:g}", (x, y), fontsize=6, textcoords="offset points", xytext=(3, 3))
        axes[1].plot(table["lambda"], table["js_divergence"], "o-", color=colour, label=f"{name}, ours")
        axes[1].plot(p_lam, p_jsd, "s--", mfc="none", color=colour, label=f"{name}, paper")
        axes[2].plot(table["rps"], table["js_divergence"], "o-", color=colour, label=f"{name}, ours")
        axes[2].plot(p_rps, p_jsd, "s--", mfc="none", color=colour, label=f"{name}, paper")
    axes[0].set_xscale("symlog", linthresh=1e-5)
    axes[0].set_xlabel("own regulariser on validation (CCdCov or JdCov)")
    axes[0].set_ylabel("validation RPS")
    axes[1].set_xlabel("lambda")
    axes[1].set_ylabel("validation JS divergence")
    axes[2].set_xlabel("validation RPS")
    axes[2].set_ylabel("validation JS divergence")
    for a in axes:
        a.grid(alpha=0.3)
        a.legend(fontsize=6)
    return finish_axes(axes, path, "pg15training: fairness-accuracy trade-off over lambda", created=ax is None,
                       dpi=110)


# ----------------------------------------------------------------------------- summary
def _lambda_scale_table(scales: pd.DataFrame) -> str:
    if scales.empty:
        return "(no lambda = 0 run)"
    return markdown_table(scales)


def _final_key(row: Mapping[str, Any]) -> str | None:
    """The paper's row of a final model: its regulariser when trained at the paper's lambda."""
    reg = row["regulariser"]
    return reg if reg in PAPER_SELECTED and math.isclose(float(row["lambda"]), PAPER_SELECTED[reg]) else None


def write_summary(path: str | Path, *, rows: pd.DataFrame, floors: pd.DataFrame, scales: pd.DataFrame,
                  header: Sequence[str], choices: str, regularisers: Sequence[str]) -> str:
    """Write ``summary.md`` (the header lines, then every table) and return its text."""
    validation = mean_table(rows, "calibration", "valid", False, VALIDATION_MEASURES + ("deviance",))
    tables: dict[str, pd.DataFrame] = {}
    panels = []
    for reg, table in _panels(validation, regularisers):
        key = (lambda row, reg=reg: (reg, float(row["lambda"])))
        tables[f"Table 5.3 ({NAMES[reg]})"] = gap_table(table, PAPER_VALIDATION, VALIDATION_MEASURES, key)
        panels += ["", f"### Panel: {NAMES[reg]}", "",
                   markdown_table(wide_table(table, PAPER_VALIDATION, VALIDATION_MEASURES, key))]
    lines = list(header) + [
        "", "## Table 5.3: validation part, per lambda (ours = mean over seeds, raw predictions)", "",
        "The paper's Table 5.3 reports the model's own predictions (no balance correction). "
        "The validation part is 30% of the training part; ours is the mean over the seeds. Each cell: "
        "ours / paper (gap = ours - paper; for CCdCov and JdCov the ratio ours / paper). The per-seed standard "
        "deviations are in the list of gaps at the end.",
        *panels, ""]
    final = {}
    for split, paper, label in (("test", PAPER_TEST, "Table 5.4 (test part)"),
                                ("train", PAPER_TRAIN, "Table H.3 (training part)")):
        for corrected in (False, True):
            means = mean_table(rows, "test", split, corrected, FINAL_MEASURES)
            if means.empty:
                continue
            if not corrected:
                tables[label] = gap_table(means, paper, FINAL_MEASURES, _final_key)
            final[(label, corrected)] = markdown_table(wide_table(means, paper, FINAL_MEASURES, _final_key))
    for (label, corrected), text in final.items():
        version = ("with the balance correction (not what the paper reports)" if corrected
                   else "raw predictions (what the paper reports)")
        lines += [f"## {label}, {version}", "", text, ""]
    lines += ["## Poisson deviance with and without the balance correction", "",
              "`balanced`: rates multiplied by alpha = sum N / sum v mu of the rows the model was trained on "
              "(Lindholm and Wüthrich 2024, [DC] Remark 5.3); `sum v mu / sum N`: 1 means balanced.", "",
              "Calibration stage (trained on the sub-training part):", "",
              markdown_table(deviance_table(rows, "calibration", ("subtrain", "valid"))), "",
              "Final models (trained on the 80% training part):", "",
              markdown_table(deviance_table(rows, "test", ("train", "test"))) if (rows["stage"] == "test").any()
              else "(not run)", "",
              "## The lambda scale of [DC] eq. 4.5 (baseline, validation part)", "",
              "`scale` = |mean eq. 5.2 loss| / regulariser of the lambda = 0 model's validation predictions "
              "(means over seeds). The paper's grid is 0..150 (step 10).", "",
              _lambda_scale_table(scales), "",
              "## Estimator floors", "",
              "`JS divergence floor`: the mean JS divergence of the lambda = 0 predictions randomly permuted "
              "across rows (independent of the cells by construction; the histogram estimator's value at "
              "independence). `JdCov floor`: JdCov of a constant prediction, the dependence between gender and "
              "region alone, which no model removes.", "",
              markdown_table(floors) if not floors.empty else "(none)", "",
              "## Gaps beyond our seed spread (or all gaps when one seed was run)", "",
              "The paper prints no standard deviations; a gap is flagged when it exceeds twice our standard "
              "deviation over seeds.", "",
              markdown_table(gaps_beyond_spread(tables)), "",
              "## Choices where the paper is silent, and differences", "", choices]
    text = "\n".join(lines)
    Path(path).write_text(text + "\n")
    return text
