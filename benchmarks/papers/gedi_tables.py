r"""[GeDI] Tables 4/5 and Fig. 3: Moving Targets under relative GeDI bounds, and target preprocessing.

The performance and preprocessing experiments of Giuliani et al., "Generalized Disparate
Impact for Configurable Fairness Solutions in ML" ([GeDI], sec. 5 and App. B):

- tasks ([GeDI] Table 3; :data:`~benchmarks.papers.gedi_tables_data.TASKS`): Adult
  (30,162 rows, income) with ``sex`` (binary, Table 4) and ``age`` (continuous, Table 5);
  Communities & Crime (1,993 rows, violentPerPop, regression) with ``race`` (binary,
  Table 4) and ``pctBlack`` (continuous, Table 5);
- models: scikit-learn random forest and gradient boosting (defaults) and the paper's MLP,
  each unconstrained and trained with Moving Targets (:class:`solvers.MovingTargets`,
  alpha_t = 1/t, Hamming / squared-error masters through
  :func:`solvers.projection.project_targets`) under ``GeDI(x, z; V^k) <= 0.2 GeDI(x, y;
  V^1)`` (k = 1 for a binary attribute; k = 5, GeDI-Fine and GeDI-Coarse, for a continuous
  one);
- protocol: 5-fold cross-validation; train and validation score (accuracy or R^2) and
  relative GeDI (``GeDI %``), fit time;
- preprocessing ([GeDI] Fig. 3): the targets of the continuous-attribute tasks projected
  under GeDI-Coarse and GeDI-Fine of order 1..5, their binned DIDI (2, 3, 5, 10 quantile
  bins) relative to the original targets', and a model trained on them.

Every cell ``(task, model, fold)`` and ``(task, form, order)`` is cached as one JSON file
under ``OUT/cells/`` (:mod:`benchmarks.papers.cells`): a rerun skips the finished cells,
so an interrupted run resumes. Cells run in parallel with ``n_jobs`` (joblib processes,
one thread each). :func:`run` writes ``summary.md`` (ours beside the paper's numbers with
the gaps, the protocol and the command line), ``folds.csv`` (one row per model and fold),
``tables.csv``, ``preprocessing.csv``, ``tables.png`` and ``preprocessing.png``.
``python -m benchmarks.papers gedi-tables`` and ``benchmarks/mt_gedi.py`` call it.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import Sequence

import numpy as np
import pandas as pd

from benchmarks.papers.cells import read_cells
from benchmarks.papers.gedi_tables_data import (FULL, PAPER, PAPER_PREPROCESSING, QUICK, TASKS, Settings,
                                                  model_names, override, protocol_tag)
from benchmarks.papers.gedi_tables_runs import ModelCell, PreprocessingCell, run_cell
from solvers.plotting import finish_axes

__all__ = ["Settings", "FULL", "QUICK", "override", "grid", "run", "summarise", "gaps_beyond_spread",
           "preprocessing_table", "preprocessing_claims", "time_table", "write_report"]

logger = logging.getLogger(__name__)

#: metric columns of a model cell -> (label, index of the paper's mean in PAPER rows)
METRICS = {"train_score": ("train score", 0), "val_score": ("val score", 2), "train_gedi": ("train GeDI %", 4),
           "val_gedi": ("val GeDI %", 6)}
_COST = {"NN": 3, "RF": 1, "GB": 1}  # rough relative cost, to start the long cells first


def grid(settings: Settings) -> tuple[list[ModelCell], list[PreprocessingCell]]:
    """The cells of ``settings``: every model of every task on every fold that runs, and
    every (task, form, kernel order) of the preprocessing experiment."""
    models = [ModelCell(t, m, f) for t in settings.tasks for f in settings.run_folds()
              for m in model_names(TASKS[t], settings.learners)]
    pre = [PreprocessingCell(t, form, k) for t in settings.preprocessing for form in ("coarse", "fine")
           for k in settings.degrees]
    return models, pre


def _run_cells(cells: list, settings: Settings, data_dir: str | None, cells_dir: Path, n_jobs: int,
               progress: bool) -> list[dict]:
    """Run the cells not cached yet (long ones first); returns the records of this call."""
    from tqdm.auto import tqdm

    todo = [c for c in cells if not (cells_dir / c.filename(settings)).is_file()]
    logger.info("%d cells, %d cached, %d to run", len(cells), len(cells) - len(todo), len(todo))
    todo.sort(key=lambda c: -(_COST.get(getattr(c, "model", "GB").split("+")[0], 1)
                              * (4 if "+" in getattr(c, "model", "") else 1)))
    records: list[dict] = []
    bar = tqdm(total=len(todo), desc="gedi-tables", unit="cell", disable=not progress)
    if n_jobs == 1:
        for cell in todo:
            records.append(run_cell(cell, settings, data_dir, cells_dir))
            bar.update()
    elif todo:
        from joblib import Parallel, delayed

        jobs = (delayed(run_cell)(c, settings, data_dir, cells_dir) for c in todo)
        for record in Parallel(n_jobs=n_jobs, return_as="generator_unordered")(jobs):
            records.append(record)
            bar.update()
    bar.close()
    return records


# ----------------------------------------------------------------------------- tables
def _stats(values: pd.Series) -> tuple[float, float]:
    values = values.astype(float)
    return float(values.mean()), float(values.std(ddof=1)) if len(values) > 1 else float("nan")


def _pm(mean: float, sd: float) -> str:
    return f"{mean:.2f}" + ("" if np.isnan(sd) else f" ± {sd:.2f}")


def summarise(folds: pd.DataFrame) -> pd.DataFrame:
    """[GeDI] Tables 4/5: per task and model, ours (mean ± sd over the folds) beside the
    paper's (mean ± sd over 5 folds) and the gap ours - paper, for each metric and the time."""
    records = []
    for (task, model), group in folds.groupby(["task", "model"], sort=False):
        paper = PAPER[task].get(model)
        row = {"task": task, "model": model, "folds": len(group)}
        for column, (label, i) in METRICS.items():
            mean, sd = _stats(group[column])
            row[f"{label} ours"] = _pm(mean, sd)
            row[f"{label} paper"] = "-" if paper is None else _pm(paper[i], paper[i + 1])
            row[f"{label} gap"] = "-" if paper is None else f"{mean - paper[i]:+.2f}"
        row["time s ours"] = f"{group['time_s'].mean():.1f}"
        row["time s paper"] = "-" if paper is None else f"{paper[8]:.2f}"
        records.append(row)
    return pd.DataFrame(records)


def gaps_beyond_spread(folds: pd.DataFrame) -> pd.DataFrame:
    """Every (task, model, metric) whose gap to the paper exceeds the paper's own spread:
    ``|ours - paper| > max(paper sd, 0.005)`` (0.005: the paper prints two decimals)."""
    records = []
    for (task, model), group in folds.groupby(["task", "model"], sort=False):
        paper = PAPER[task].get(model)
        if paper is None:
            continue
        for column, (label, i) in METRICS.items():
            mean, sd = _stats(group[column])
            gap = mean - paper[i]
            if abs(gap) > max(paper[i + 1], 0.005):
                records.append({"task": task, "model": model, "metric": label, "ours": _pm(mean, sd),
                                "paper": _pm(paper[i], paper[i + 1]), "gap": f"{gap:+.2f}",
                                "gap / paper sd": "inf" if paper[i + 1] == 0 else f"{abs(gap) / paper[i + 1]:.1f}"})
    return pd.DataFrame(records)


def preprocessing_table(pre: pd.DataFrame, bins: Sequence[int]) -> pd.DataFrame:
    """[GeDI] Fig. 3 as numbers: per task, form and kernel order, the projected targets'
    relative GeDI and binned DIDI (%: over the original targets'), and the model trained on
    them (validation score against the true targets, validation DIDI-n %)."""
    out = pre.sort_values(["task", "form", "degree"]).copy()
    table = pd.DataFrame({"task": out["task"], "form": out["form"], "k": out["degree"], "status": out["status"],
                          "targets score": out["targets_score"].map("{:.3f}".format),
                          "targets GeDI-Vk %": out["targets_gedi_k"].map("{:.3f}".format),
                          "targets GeDI-V5 %": out["targets_gedi5"].map("{:.3f}".format)})
    for b in bins:
        table[f"targets DIDI-{b} %"] = out[f"targets_didi{b}"].map("{:.3f}".format)
    table["model val score"] = out["model_val_score"].map("{:.3f}".format)
    table["model val GeDI-V5 %"] = out["model_val_gedi"].map("{:.3f}".format)
    for b in bins:
        table[f"model val DIDI-{b} %"] = out[f"model_val_didi{b}"].map("{:.3f}".format)
    return table.reset_index(drop=True)


def _trend(part: pd.DataFrame, bins: Sequence[int]) -> tuple[int, list[str]]:
    """Bins whose DIDI-n % at the largest order is below the smallest order's, and the
    order steps where DIDI-n % rises."""
    part = part.sort_values("degree")
    lower, rises = 0, []
    for b in bins:
        values = part[f"targets_didi{b}"].to_numpy()
        lower += int(values[-1] < values[0])
        rises += [f"DIDI-{b} k{a}->k{c}" for a, c, u, v in zip(part["degree"], part["degree"].iloc[1:], values,
                                                               values[1:]) if v > u + 1e-9]
    return lower, rises


def preprocessing_claims(pre: pd.DataFrame, settings: Settings) -> pd.DataFrame:
    """The paper's statements about Fig. 3 (sec. 5), checked on our projections."""
    bins = settings.bins
    records = []
    for task, part in pre.groupby("task", sort=False):
        coarse, fine = part[part["form"] == "coarse"], part[part["form"] == "fine"]
        k_max = fine["targets_gedi_k"].max() if len(fine) else float("nan")
        ok = int((part["status"] == "optimal").sum())
        text = {
            "satisfied": f"{ok}/{len(part)} projections optimal; largest targets GeDI-Vk %: coarse "
                         f"{coarse['targets_gedi_k'].max():.3f}, fine {k_max:.3f} (bound {settings.relative_bound:g}; "
                         "the fine rows of a binary target allow (1 + tol) x bound on GeDI-Vk)",
        }
        for key, form in (("fine_trend", fine), ("coarse_trend", coarse)):
            lower, rises = _trend(form, bins)
            text[key] = (f"DIDI-n % at k={form['degree'].max()} below k={form['degree'].min()} for {lower}/{len(bins)} "
                         f"bin counts; rises: {', '.join(rises) if rises else 'none'}")
        columns = [f"targets_didi{b}" for b in bins]
        k_top = part["degree"].max()
        ranges = {}
        for form in ("fine", "coarse"):
            values = part[(part["form"] == form) & (part["degree"] == k_top)][columns].to_numpy()
            ranges[form] = f"[{values.min():.3f}, {values.max():.3f}]"
        text["fine_similar"] = (f"DIDI-n % over n = {list(bins)} at k = {k_top}: fine {ranges['fine']}, coarse "
                                f"{ranges['coarse']} (threshold {settings.relative_bound:g})")
        for key, claim in PAPER_PREPROCESSING.items():
            records.append({"task": task, "paper (sec. 5)": claim, "ours": text[key]})
    return pd.DataFrame(records)


def time_table(folds: pd.DataFrame, settings: Settings) -> pd.DataFrame:
    """Mean seconds per fold of every model: the fit (wall), the whole cell (wall and CPU),
    and the CPU estimate for all ``settings.folds`` folds on one core."""
    grouped = folds.groupby(["task", "model"], sort=False).agg(
        fit=("time_s", "mean"), cell=("cell_s", "mean"), cpu=("cpu_s", "mean"), runs=("fold", "count")).reset_index()
    grouped["fit s / fold"] = grouped.pop("fit").map("{:.1f}".format)
    grouped["cell s / fold"] = grouped.pop("cell").map("{:.1f}".format)
    grouped["all folds, 1 core (CPU min)"] = (grouped["cpu"] * settings.folds / 60).map("{:.1f}".format)
    grouped["CPU s / fold"] = grouped.pop("cpu").map("{:.1f}".format)
    return grouped


# ----------------------------------------------------------------------------- figures
def plot_tables(folds: pd.DataFrame, path: str | Path) -> Path:
    """Validation score against validation GeDI %, one panel per task: ours (filled, ± sd
    over folds) beside the paper's (hollow), one colour per model."""
    from matplotlib.figure import Figure

    tasks = list(dict.fromkeys(folds["task"]))
    fig = Figure(figsize=(4.4 * len(tasks), 4.0))
    axes = fig.subplots(1, len(tasks), squeeze=False)[0]
    for ax, task in zip(axes, tasks):
        part = folds[folds["task"] == task]
        for j, (model, group) in enumerate(part.groupby("model", sort=False)):
            colour = f"C{j % 10}"
            ax.errorbar(group["val_gedi"].mean(), group["val_score"].mean(), xerr=group["val_gedi"].std(ddof=1),
                        yerr=group["val_score"].std(ddof=1), fmt="o", color=colour, capsize=3, label=f"{model} ours")
            paper = PAPER[task].get(model)
            if paper is not None:
                ax.errorbar(paper[6], paper[2], xerr=paper[7], yerr=paper[3], fmt="o", mfc="none", color=colour,
                            capsize=3, alpha=0.7)
        ax.axvline(0.2, color="grey", ls=":", lw=1, label="bound (train)")
        ax.set_title(f"{task} ({TASKS[task].table})")
        ax.set_xlabel(f"validation GeDI-V{TASKS[task].degree} %")
        ax.set_ylabel(f"validation {TASKS[task].score}")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=6, title="hollow: paper", title_fontsize=6)
    finish_axes(list(axes), path, None, created=True, dpi=110)
    return Path(path)


def plot_preprocessing(pre: pd.DataFrame, bins: Sequence[int], path: str | Path) -> Path:
    """[GeDI] Fig. 3: DIDI-n % of the projected targets against the bin count n, one bar per
    kernel order; rows coarse (a) and fine (b), one column per task."""
    from matplotlib.figure import Figure

    tasks = list(dict.fromkeys(pre["task"]))
    fig = Figure(figsize=(4.6 * len(tasks), 6.4))
    axes = fig.subplots(2, len(tasks), squeeze=False)
    width = 0.8 / max(pre["degree"].nunique(), 1)
    for i, form in enumerate(("coarse", "fine")):
        for j, task in enumerate(tasks):
            ax = axes[i][j]
            part = pre[(pre["task"] == task) & (pre["form"] == form)].sort_values("degree")
            for m, (_, row) in enumerate(part.iterrows()):
                ax.bar(np.arange(len(bins)) + m * width, [row[f"targets_didi{b}"] for b in bins], width,
                       color=f"C{m}", label=f"k = {row['degree']}")
            ax.set_xticks(np.arange(len(bins)) + width * (len(part) - 1) / 2, [str(b) for b in bins])
            top = float(part[[f"targets_didi{b}" for b in bins]].to_numpy().max(initial=0.0))
            ax.set_ylim(0, max(1.0, 1.05 * top))
            ax.set_title(f"{task}, GeDI-{form.capitalize()} ({'ab'[i]})")
            ax.set_xlabel("bins")
            ax.set_ylabel("DIDI % of the projected targets")
            ax.grid(alpha=0.3, axis="y")
            ax.legend(fontsize=6)
    finish_axes([a for row in axes for a in row], path, None, created=True, dpi=110)
    return Path(path)


# ----------------------------------------------------------------------------- report
DIFFERENCES = """\
- **Solver**: HiGHS (binary masters) and OSQP (continuous ones) with feasibility tolerance
  1e-9 and 60 s per master; the paper used Gurobi 10 (default tolerances, WorkLimit 60).
  Later masters start from the previous master's targets (`warm_start`); the HiGHS masters
  of these tasks take well under a second either way, the learners dominate the time.
- **GeDI-Fine on Adult/age**: the paper's fine master imposes `k - 1` covariance
  EQUALITIES on 0/1 targets; no 0/1 vector meets them within 1e-9 (HiGHS and Gurobi find no
  feasible point), so for binary targets the fine rows bound the higher-order coefficients
  by `tol x bound / (k - 1)` (fairopt's fine constraint, `tol = 0.1`) instead of 0. The
  paper's Gurobi met its equalities only up to its default 1e-6 tolerance.
- **Returned model**: the learner after the last MT iteration (as the authors' code), not
  fairopt's best feasible iterate. The MLP keeps its weights from one refit to the next (the
  authors' learner trains one network and one Adam state throughout; ours starts a new Adam
  at each refit).
- **Data**: Adult is UCI's adult.data without missing values (30,162 rows, as the paper),
  inputs one-hot/standardised without `education` and `native-country`, the protected
  attribute among the inputs (as in the authors' code); Communities & Crime is the
  authors' copy (1,993 rows), violentPerPop unscaled (R^2 and GeDI % are scale-free).
- **Folds**: stratified 5-fold split of fairopt (target x group strata for Adult), shuffled
  with the seed; the authors used scikit-learn's StratifiedKFold / KFold with seed 0, so the
  folds differ.
- **Not run**: the NN+SBR rows (a Lagrangian penalty engine, not Moving Targets).
- **Time**: ours on 2 shared cores, one thread per cell; the paper's on an Intel i9-10920X.
"""


def _protocol_line(settings: Settings) -> str:
    folds = settings.run_folds()
    rows = "all 30,162" if settings.adult_rows is None else f"{settings.adult_rows:,} (seeded subsample)"
    return (f"tasks {list(settings.tasks)}, learners {list(settings.learners)}; {settings.folds}-fold CV "
            f"(seed {settings.seed}), folds run: {folds}; Moving Targets {settings.iterations} iterations, "
            f"backend {settings.backend}, {settings.time_limit:g} s per master, warm start {settings.warm_start}; "
            f"MLP {settings.mlp_epochs} epochs (batch 128), warm refits {settings.mlp_warm_start}; Adult rows: {rows}; "
            f"bound {settings.relative_bound:g} x GeDI(x, y_train; V^1); protected attribute as input: "
            f"{settings.include_sensitive}; preprocessing {list(settings.preprocessing)}, orders "
            f"{list(settings.degrees)}, bins {list(settings.bins)}, model {settings.preprocessing_learner.upper()}")


def write_report(folds: pd.DataFrame, pre: pd.DataFrame, out: str | Path, settings: Settings, command: str,
                 protocol: str, seconds: float, ran: int, cached: int, failed: list[dict],
                 n_jobs: int = 1, cpu_seconds: float = float("nan")) -> tuple[str, list[Path]]:
    """Write ``summary.md``, the CSV tables and the figures for the cells ``folds`` (model
    cells) and ``pre`` (preprocessing cells); returns the summary and the files."""
    from fairopt.experiments.reporting import markdown_table

    out = Path(out)
    files: list[Path] = []
    lines = ["# gedi-tables: [GeDI] Tables 4/5 and Fig. 3", "",
             "Giuliani et al., *Generalized Disparate Impact for Configurable Fairness Solutions in ML*: Moving "
             "Targets under relative GeDI bounds (20% of GeDI(x, y; V^1)) and target preprocessing.", "",
             f"Command: `{command}`", "", f"Protocol: **{protocol}** ({protocol_tag(settings)}): "
             + _protocol_line(settings) + ".", "",
             f"Wall time: {seconds:.0f} s with {n_jobs} job(s) ({cpu_seconds:.0f} CPU seconds in the cells); {ran} "
             f"cells run now, {cached} read from `cells/`.", ""]
    if len(folds):
        table = summarise(folds)
        table.to_csv(out / "tables.csv", index=False)
        folds.to_csv(out / "folds.csv", index=False)
        files += [out / "tables.csv", out / "folds.csv", plot_tables(folds, out / "tables.png")]
        lines += ["## Tables 4 and 5 (ours: mean ± sd over the folds run; paper: over 5 folds)", "",
                  "GeDI %: GeDI(x, yhat; V^k) / GeDI(x, y; V^1) on the same split (k = 1 for sex and race, 5 for "
                  "age and pctBlack); score: accuracy (Adult) or R^2 (Communities); gap = ours - paper.", ""]
        for task, part in table.groupby("task", sort=False):
            lines += [f"### {task} ([GeDI] {TASKS[task].table})", "", markdown_table(part.drop(columns="task")), ""]
        gaps = gaps_beyond_spread(folds)
        lines += ["## Gaps larger than the paper's spread", "",
                  "|ours - paper| > max(paper sd, 0.005); the causes are discussed in the results README.", "",
                  markdown_table(gaps) if len(gaps) else "(none)", "",
                  "## Time", "", markdown_table(time_table(folds, settings)), "",
                  "Wall seconds count the waits for a core on a shared machine; CPU seconds do not. One core for "
                  f"all {settings.folds} folds of these models (sum of the CPU means x folds): "
                  f"{time_table(folds, settings)['all folds, 1 core (CPU min)'].astype(float).sum():.0f} min.", ""]
    if len(pre):
        ptable = preprocessing_table(pre, settings.bins)
        ptable.to_csv(out / "preprocessing.csv", index=False)
        files += [out / "preprocessing.csv", plot_preprocessing(pre, settings.bins, out / "preprocessing.png")]
        lines += ["## Preprocessing ([GeDI] Fig. 3)", "",
                  "All rows' targets projected under GeDI-Coarse / GeDI-Fine of order k (bound 20% of GeDI(x, y; "
                  "V^1)), closest in Hamming distance (Adult) or squared error (Communities). `%`: over the original "
                  "targets' value; `targets score`: accuracy / R^2 of the projected against the original targets; "
                  f"the model ({settings.preprocessing_learner.upper()}) is trained on fold 0's projected training "
                  "targets and measured against the TRUE validation targets.", "", markdown_table(ptable), "",
                  "Fig. 3 is an image in the paper: its text gives statements, not numbers. Checked on ours:", "",
                  markdown_table(preprocessing_claims(pre, settings)), ""]
    if failed:
        lines += ["## Failed cells (not cached; a rerun retries them)", "", markdown_table(pd.DataFrame(failed)), ""]
    lines += ["## Differences from the paper", "", DIFFERENCES]
    summary = "\n".join(lines)
    (out / "summary.md").write_text(summary + "\n")
    return summary, [out / "summary.md", *files]


def run(out: str | Path, settings: Settings = FULL, data_dir: str | Path | None = None,
        command: str = "python -m benchmarks.papers gedi-tables", progress: bool = True, n_jobs: int = 1,
        protocol: str = "full") -> tuple[pd.DataFrame, str, list[Path]]:
    """Run (or resume) every cell of ``settings`` into ``out``; write the report.

    ``n_jobs`` cells run in parallel (joblib processes, one thread each); cells already
    cached under ``out/cells/`` are read back, not rerun. ``protocol`` names the settings in
    the summary ("quick", "full", or with overrides). Returns the per-fold table of the
    model cells, the markdown summary and the files written.
    """
    if isinstance(n_jobs, bool) or not isinstance(n_jobs, int) or n_jobs == 0 or n_jobs < -1:
        raise ValueError(f"n_jobs: expected a positive integer or -1 (all cores), got {n_jobs!r}")
    out = Path(out)
    cells_dir = out / "cells"
    cells_dir.mkdir(parents=True, exist_ok=True)
    data = None if data_dir is None else str(data_dir)
    models, pre = grid(settings)
    start = time.perf_counter()
    records = _run_cells(models + pre, settings, data, cells_dir, n_jobs, progress)
    seconds = time.perf_counter() - start
    failed = [r for r in records if r.get("status") == "error"]
    folds = read_cells([cells_dir / c.filename(settings) for c in models])
    pre_cells = read_cells([cells_dir / c.filename(settings) for c in pre])
    summary, files = write_report(folds, pre_cells, out, settings, command, protocol, seconds,
                                  ran=len(records) - len(failed), cached=len(models) + len(pre) - len(records),
                                  failed=failed, n_jobs=n_jobs,
                                  cpu_seconds=float(sum(r.get("cpu_s", 0.0) for r in records)))
    return folds, summary, files
