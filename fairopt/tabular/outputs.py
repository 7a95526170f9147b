"""What a run writes and what a saved table model answers: the run files and report
(``fairopt train --data``), predictions (``fairopt predict``) and group reports
(``fairopt report``)."""

from __future__ import annotations

import json
import logging
import math
import shlex
from pathlib import Path
from typing import Any, Sequence

import numpy as np
import pandas as pd
import torch

from fairopt.constraints.base import set_up_on_other_rows
from fairopt.data import FairData, coerce_numeric_columns
from fairopt.data.frames import as_number, is_text_dtype, short_list
from fairopt.evaluation import evaluate
from fairopt.persistence import save
from fairopt.report import group_report
from fairopt.report.result import frame_markdown
from fairopt.specs import resolve_constraints
from fairopt.status import BoundStatus, met_tolerance
from solvers.history import History
from solvers.plotting import finite_points
from fairopt.tabular.tables import (VIOLATION_TOL, TableModel, load_table_model, require_columns,
                                    require_complete)
from fairopt.tabular.training import TrainedTable

logger = logging.getLogger("fairopt.tabular")

# --------------------------------------------------------------------------------------
# the files of a run
# --------------------------------------------------------------------------------------
def write_run(trained: TrainedTable, out: str | Path, *, n_bootstrap: int = 200) -> list[Path]:
    """``model.fairopt``, ``report.md``, ``history.png``, ``history.csv``, the per-group
    figures ``groups_train.png`` (and ``groups_test.png`` with held-out rows; none without
    discrete sensitive columns) and ``metrics.json`` in ``out`` (created); ``report.md`` links
    the figures. Returns the paths."""
    out = Path(out)
    if out.exists() and not out.is_dir():
        raise ValueError(f"--out: {str(out)!r} exists and is not a directory")
    out.mkdir(parents=True, exist_ok=True)
    model_path = out / "model.fairopt"
    save(trained.estimator.model_, model_path, data=trained.train, constraints=trained.constraints,
         metadata=trained.metadata)
    table = load_table_model(model_path)
    files = [model_path, out / "report.md"]
    for stale in ("history.png", *GROUP_FIGURES.values()):  # a figure of an earlier run is not this run's
        (out / stale).unlink(missing_ok=True)
    history = trained.estimator.history_
    if history is not None and len(history):
        history.to_pandas().to_csv(out / "history.csv", index=False)
        plot_training(history, trained.metadata["method"], out / "history.png",
                      title=f"{trained.metadata['method']} on {trained.metadata['source']}")
        files += [out / "history.png", out / "history.csv"]
    report_logger = logging.getLogger("fairopt.report")
    level = report_logger.level
    report_logger.setLevel(logging.ERROR)  # its notes are in report.md, under each table
    try:
        report = run_report(trained, table, n_bootstrap=n_bootstrap, figures=out)
    finally:
        report_logger.setLevel(level)
    (out / "report.md").write_text(report)
    files += [out / name for name in GROUP_FIGURES.values() if (out / name).exists()]
    certificates = getattr(trained.estimator, "certificate_", None)
    metrics = {"train": trained.train_eval, "test": trained.test_eval, "status": trained.metadata["status"],
               "converged": trained.metadata["converged"], "feasible": trained.metadata["feasible"],
               "seconds": trained.seconds,
               **({} if certificates is None else {"certificates": [c.to_dict() for c in certificates]})}
    (out / "metrics.json").write_text(json.dumps(metrics, indent=1, default=_json_default))
    files.append(out / "metrics.json")
    return files


def _json_default(value: Any) -> Any:
    if isinstance(value, (np.generic, torch.Tensor, np.ndarray)):
        return value.tolist()
    return str(value)


def _yes_no(value: Any) -> str:
    return "n/a" if value is None else ("yes" if value else "no")


def _number(value: Any) -> str:
    value = float(value)
    if math.isinf(value):
        return "-inf" if value < 0 else "inf"
    return f"{value:.6g}"


def spec_text(spec: Any) -> str:
    """A constraint spec as the user wrote it: the text of ``--constraint`` as it is, a ``--config`` table as a
    TOML inline table (``{kind = "di", sensitive = "race", delta = 0.8, threshold = 35.0}``), not a Python
    dict repr. The run's metadata keeps the specs as given, which a report lists."""
    return spec if isinstance(spec, str) else _toml_value(spec)


def _toml_value(value: Any) -> str:
    """``value`` written as in a TOML file: text quoted, true/false, arrays and inline tables."""
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{key} = {_toml_value(item)}" for key, item in value.items()) + "}"
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_toml_value(item) for item in value) + "]"
    return str(value)


def constraint_table(constraints: Sequence[Any], results: dict, tol: float = VIOLATION_TOL) -> str:
    """A markdown table of every constraint row: exact value, bounds, violation, met."""
    lines = ["| constraint | row | value | lower | upper | violation | met |",
             "|---|---|---:|---:|---:|---:|---|"]
    taken: dict[str, int] = {}
    for c in constraints:
        name = str(c.name)
        taken[name] = taken.get(name, 0) + 1
        key = name if taken[name] == 1 else f"{name}#{taken[name]}"
        values = list(results.get(key, []))
        lower = torch.as_tensor(c.lower, dtype=torch.float64).reshape(-1).tolist()
        upper = torch.as_tensor(c.upper, dtype=torch.float64).reshape(-1).tolist()
        rows = list(getattr(c, "row_names", None) or [name] * len(values))
        met_within = met_tolerance(c, tol)  # in the rows' units
        for i, value in enumerate(values):
            excess = max(value - upper[i], 0.0) + max(lower[i] - value, 0.0)
            row = rows[i] if i < len(rows) else f"{name}[{i}]"
            row = row[len(name) + 1:] if row.startswith(name + ":") else row
            lines.append(f"| {key} | {row} | {_number(value)} | {_number(lower[i])} | {_number(upper[i])} | "
                         f"{_number(excess)} | {'yes' if excess <= met_within else 'NO'} |")
    return "\n".join(lines)


def training_rows_label(trained: TrainedTable) -> str:
    """What the training evaluation covers: the training rows, or with ``--validation-fraction`` the training
    part, whose share held out for the certificates the model did not train on."""
    fraction = trained.metadata.get("validation_fraction")
    return "training rows" if fraction is None else (f"training part (the model trained on {1 - fraction:.0%} "
                                                     f"of it; {fraction:.0%} held out for the certificates)")


def held_out_part(estimator: Any) -> list[str]:
    """The report lines of the estimator's held-out statements (``--margin``, ``--validation-fraction``): the
    range predicted for new rows under the margin, the certified candidates and the certificates; none
    without them."""
    predicted = getattr(estimator, "predicted_held_out_", None)
    candidates = getattr(estimator, "candidates_", None)
    certificates = getattr(estimator, "certificate_", None)
    if predicted is None and certificates is None:
        return []
    lines = ["", "## Held-out statements", ""]
    if predicted is not None:
        lines += [f"The model trained under the bounds tightened by margin={estimator.margin!r}. Each row's margin "
                  "and the range it is predicted to take on new rows (training value plus or minus the margin):",
                  "", frame_markdown(predicted.drop(columns=["constraint"], errors="ignore"), index=True)]
    if candidates is not None:
        lines += ["", "Certified candidates, in their fixed order of decreasing margin (the model is the last that "
                      "passed before the first failure, or the first when it failed):", "",
                  frame_markdown(candidates)]
    if certificates is not None:
        held = getattr(estimator, "validation_indices_", None)
        rows = 0 if held is None else len(held)
        lines += ["", f"Certificates on the {rows} rows held out for them (validation_fraction="
                      f"{estimator.validation_fraction}), at confidence {estimator.confidence}:", ""]
        lines += [f"- {certificate}" for certificate in certificates]
    return lines


def _realised(results: dict, sensitive: Sequence[str], task: str) -> str:
    lines = ["| sensitive | rows | accuracy | DI ratio | DP difference |" if task == "binary" else
             "| sensitive | rows | R2 | mean ratio | mean difference |", "|---|---:|---:|---:|---:|"]
    performance = results.get("accuracy") if task == "binary" else results.get("r2")
    for name in sensitive:
        if f"di_ratio[{name}]" not in results:
            continue
        lines.append(f"| {name} | {results['n']} | {_number(performance)} | {_number(results[f'di_ratio[{name}]'])} "
                     f"| {_number(results[f'dp_difference[{name}]'])} |")
    if len(lines) == 2:
        return f"{'accuracy' if task == 'binary' else 'R2'} {_number(performance)} on {results['n']} rows (no " \
               "sensitive column with groups)"
    table = "\n".join(lines)
    if task != "binary":
        table += ("\n\nThe mean ratio is the smallest group mean prediction over the largest; it is undefined "
                  "(nan) where a group's mean is not positive, and the mean difference then says how far apart "
                  "they are.")
    return table


#: The per-group figure of each part of a run's rows, next to ``report.md``.
GROUP_FIGURES = {"train": "groups_train.png", "test": "groups_test.png"}


def bound_lines(results: dict | None) -> list[str]:
    """``DI[sex] 0.803 (bound >= 0.800)`` per constraint with a measure (the ``"bounds"`` of
    :func:`fairopt.evaluate`), with ``, not met`` where its rows are violated.

    The labels are :func:`fairopt.status.label_of`'s, as in the estimators' ``status_message_``: on a regression
    a group-rate constraint compares the groups' shares of predictions above its threshold, which the label names
    (``DI[race, share of predictions > 0]``); the realised fairness beside it compares the groups' mean
    predictions, another measure."""
    bounds = (results or {}).get("bounds") or {}
    return [str(BoundStatus(**b)) + ("" if b["met"] else ", not met") for b in bounds.values()]


def bound_parts(trained: TrainedTable) -> list[tuple[str, list[str]]]:
    """The bound lines (:func:`bound_lines`) of the training and the held-out rows, each part with the name of
    its rows (the console and ``report.md`` print both); a part without a line is left out."""
    parts = [(training_rows_label(trained), bound_lines(trained.train_eval)),
             ("held-out rows", bound_lines(trained.test_eval))]
    return [(rows, lines) for rows, lines in parts if lines]


def _group_markdown(table: TableModel, frame: pd.DataFrame, n_bootstrap: int, seed: int = 0,
                    figure: Path | None = None) -> str:
    """The per-group report of ``frame`` over the discrete sensitive columns (a note when
    there is none, or when the report cannot be made, e.g. a single group in these rows);
    with ``figure``, its per-group rates are also drawn there (PNG) and linked."""
    columns = table.discrete_sensitive
    if not columns:
        return "No per-group table: the sensitive columns are continuous (see the constraint tables)."
    try:
        inputs = prediction_inputs(table, frame, source="rows", strict=False, log_extra=False)
        groups = frame[columns[0]] if len(columns) == 1 else frame[columns]
        report = group_report(table.saved, inputs, _target_values(table, frame[table.target]),
                              sensitive_features=groups, pos_label=table.positive, n_bootstrap=n_bootstrap,
                              seed=seed)
    except ValueError as exc:
        return f"No per-group table: {exc}"
    markdown = _demote(report.to_markdown())
    if figure is None:
        return markdown
    from solvers.plotting import panel_axes

    metric = "selection_rate" if report.task == "binary" else "mean_prediction"
    ax = report.plot(ax=panel_axes(None, 1)[0], metric=metric)
    ax.figure.set_size_inches(max(4.6, 0.9 * len(report.by_group) + 2.0), 4.2)
    ax.figure.tight_layout()
    ax.figure.savefig(figure, dpi=110, format="png")
    return f"![{metric} by group]({figure.name})\n\n" + markdown


def run_report(trained: TrainedTable, table: TableModel, *, n_bootstrap: int = 200,
               figures: str | Path | None = None) -> str:
    """The ``report.md`` of a run. With ``figures`` (the run's directory) the per-group rates
    are drawn there (:data:`GROUP_FIGURES`) and the report links them and the training
    history ``history.png`` when that file is there."""
    meta = trained.metadata
    lines = [f"# fairopt train: {meta['source']}", "", "```text", meta["command"] or "fairopt train", "```", "",
             "## Run", "", "| | |", "|---|---|"]
    positive = "" if table.classes is None else f" (positive class {table.positive!r}, labels {table.classes})"
    rows = [("method", meta["method"]), ("model", meta["model"] + (f" {meta['hidden']}" if meta["hidden"] else "")),
            ("task", meta["task"] + positive), ("target", meta["target"]),
            ("sensitive", ", ".join(meta["sensitive"])),
            ("constraints", ", ".join(f"`{spec_text(s)}`" for s in meta["constraints"]) or "none"),
            ("status", meta["status"]), ("result", meta.get("status_message", "")),
            ("converged", _yes_no(meta["converged"])),
            ("feasible on the training rows", _yes_no(meta["feasible"]) if meta["constraints"] else "n/a"),
            *([("degenerate", "yes: the model predicts the same for every training row, so its fairness says "
                              "nothing (see the warnings of the run)")]
              if trained.train_eval.get("degenerate") else []),
            ("rows", f"{meta['n_train']} training, {meta['n_test']} held out"),
            ("inputs", f"{len(table.features)} columns -> {trained.encoding['n_inputs']} model inputs"),
            ("seconds", f"{trained.seconds:.1f}")]
    lines += [f"| {k} | {v} |" for k, v in rows]
    lines += ["", "Inputs: numeric " + (", ".join(trained.encoding["numeric"]) or "none") + "; one-hot "
              + (", ".join(f"{c} ({len(v)} levels)" for c, v in trained.encoding["one_hot"].items()) or "none")
              + (f"; text holding numbers, used as numbers: {', '.join(trained.encoding['numeric_text'])}"
                 if trained.encoding["numeric_text"] else "") + "."]
    folder = None if figures is None else Path(figures)
    if folder is not None and (folder / "history.png").exists():
        lines += ["", "## Training history", "", "Loss and constraint violation per iteration:", "",
                  "![training history](history.png)"]
    weighted = meta.get("weights")
    exact_of = "hard predictions" if meta["task"] == "binary" else "the model's predictions"
    if weighted:
        lines += ["", f"Rows weighted by the column `{weighted}`: the bounds and the constraint rows below are the "
                      "weighted measures the constraints hold (group rates sum w yhat / sum w per group, a weighted "
                      "covariance), and so are the realised fairness and the "
                      f"{'accuracy' if meta['task'] == 'binary' else 'R2'} beside it (its rows column counts rows); "
                      "the per-group reports count rows unweighted."]
    if trained.constraints:
        lines += ["", "## Bounds" + (" (weighted)" if weighted else ""), ""]
        lines += [f"- {rows}: " + "; ".join(found) for rows, found in bound_parts(trained)]
        lines += ["", "## Constraints on the training rows" + (" (weighted)" if weighted else ""), "",
                  f"Exact values ({exact_of}) of every constraint row and its bounds; a row is met when its "
                  f"violation is at most {VIOLATION_TOL:g} (rates), or that share of the bound's size for rows in "
                  "other units.", "",
                  constraint_table(trained.constraints, trained.train_eval)]
        if trained.test_eval is not None and trained.test_constraints:
            lines += ["", "## Constraints on the held-out rows" + (" (weighted)" if weighted else ""), "",
                      constraint_table(trained.test_constraints, trained.test_eval)]
    lines += held_out_part(trained.estimator)
    lines += ["", "## Realised fairness" + (" (weighted)" if weighted else ""), "", "Training rows:", "",
              _realised(trained.train_eval, meta["sensitive"], meta["task"])]
    if trained.test_eval is not None:
        lines += ["", "Held-out rows:", "", _realised(trained.test_eval, meta["sensitive"], meta["task"])]
    unweighted = " (unweighted)" if weighted else ""
    lines += ["", f"## Per-group report: training rows{unweighted}", "",
              _group_markdown(table, trained.train_frame, n_bootstrap,
                              figure=None if folder is None else folder / GROUP_FIGURES["train"])]
    if trained.test_frame is not None:
        lines += ["", f"## Per-group report: held-out rows{unweighted}", "",
                  _group_markdown(table, trained.test_frame, n_bootstrap,
                                  figure=None if folder is None else folder / GROUP_FIGURES["test"])]
    if trained.warnings:
        lines += ["", "## Warnings", ""] + [f"- {w}" for w in trained.warnings]
    return "\n".join(lines) + "\n"


def _demote(markdown: str) -> str:
    """Headings of an embedded report one level down."""
    return "\n".join("#" + line if line.startswith("#") else line for line in markdown.splitlines())


# --------------------------------------------------------------------------------------
# predicting and reporting on new rows
# --------------------------------------------------------------------------------------
def prediction_inputs(table: TableModel, frame: pd.DataFrame, *, source: str, strict: bool = False,
                      id_column: str | None = None, log_extra: bool = True) -> pd.DataFrame:
    """The model's input columns of ``frame``, checked (present, complete) and with text
    that spells numbers turned into numbers where the model reads numbers."""
    missing = [c for c in table.features if c not in frame.columns]
    if missing:
        raise ValueError(f"{source}: missing the model's input column(s) {short_list(missing)} (it was trained on "
                         f"{short_list(table.features)})")
    known = {*table.features, table.target, *table.sensitive, *table.ignored}
    if id_column is not None:
        known.add(id_column)
    extra = [c for c in frame.columns if c not in known]
    if extra and strict:
        raise ValueError(f"--strict-columns: {source} has column(s) {short_list(extra)} that the model does not use")
    if extra and log_extra:
        logger.info("%s: ignoring column(s) %s that the model does not use", source, short_list(extra))
    if not table.saved.preprocessor.keeps_missing:  # boosted trees take missing input values
        require_complete(frame, table.features, source)
    inputs = frame[table.features]
    numeric = [c for c in table.saved.preprocessor.numeric_ if is_text_dtype(inputs[c])]
    if numeric:
        inputs, converted = coerce_numeric_columns(inputs, numeric)
        bad = [c for c in numeric if c not in converted]
        if bad:
            examples = {c: [v for v in pd.unique(inputs[c].to_numpy(dtype=object)) if as_number(v) is None][:3]
                        for c in bad}
            raise ValueError(f"{source}: column(s) {short_list(bad)} hold numbers in training but text here, "
                             f"e.g. {examples}")
    return inputs


def _target_values(table: TableModel, column: pd.Series) -> np.ndarray:
    """The target as labels comparable with the model's classes (binary) or numbers."""
    values = column.to_numpy(dtype=object)
    if table.task == "regression":
        numbers = [as_number(v) for v in values]
        if any(x is None for x in numbers):
            raise ValueError(f"--target: column {column.name!r} holds values that are not numbers")
        return np.asarray(numbers, dtype=np.float64)
    matched = [_matching_class(v, table.classes) for v in values]
    labels = np.asarray([v if c is None else c for v, c in zip(values, matched)], dtype=object)
    unknown = sorted({str(v) for v, c in zip(values, matched) if c is None})
    if unknown:
        raise ValueError(f"--target: column {column.name!r} holds label(s) {short_list(unknown[:5])} that are not "
                         f"the model's classes {table.classes}")
    if all(isinstance(c, (bool, np.bool_)) for c in table.classes):
        return labels.astype(bool)
    if all(isinstance(c, (int, float)) and not isinstance(c, bool) for c in table.classes):
        return labels.astype(np.float64)
    return labels.astype(str) if all(isinstance(c, str) for c in table.classes) else labels


def _matching_class(value: Any, classes: Sequence[Any]) -> Any:
    """The model's class that ``value`` spells, or None. Numeric classes (0/1) are compared as numbers, so
    ``1.0``, ``"1.0"`` and ``1`` are the class 1 (a file may write a 0/1 target as floats); other classes
    (text, booleans) by their text, as a CSV reads them."""
    if all(as_number(c) is not None for c in classes):
        number = as_number(value)
        return next((c for c in classes if number is not None and as_number(c) == number), None)
    return next((c for c in classes if str(c) == str(value)), None)


#: The columns :func:`predict_table` writes besides the id column.
PREDICTION_COLUMNS = ("prediction", "score")


def predict_table(table: TableModel, frame: pd.DataFrame, *, source: str, strict: bool = False,
                  id_column: str | None = None) -> pd.DataFrame:
    """One row per row of ``frame``, in order: ``[id_column,] prediction, score``; the score is
    the probability of the positive class (binary) or the prediction (regression)."""
    if id_column is not None:
        require_columns(frame, [id_column], "--id-column", source)
        if id_column in PREDICTION_COLUMNS:
            raise ValueError(f"--id-column: {id_column!r} is also the name of an output column "
                             f"{list(PREDICTION_COLUMNS)}; rename that column of {source} (the output would "
                             "overwrite it)")
    inputs = prediction_inputs(table, frame, source=source, strict=strict, id_column=id_column)
    saved = table.saved
    out = pd.DataFrame(index=range(len(frame)))
    if id_column is not None:
        out[id_column] = frame[id_column].to_numpy()
    encoded = saved.encode(inputs)  # once: an unseen level is logged once
    if table.task == "binary":
        out["prediction"] = saved.predict(encoded)
        out["score"] = saved.predict_proba(encoded)[:, 1]
    else:
        prediction = saved.predict(encoded)
        out["prediction"], out["score"] = prediction, prediction
    return out


def report_table(table: TableModel, frame: pd.DataFrame, *, source: str, target: str | None = None,
                 sensitive: Sequence[str] = (), n_bootstrap: int = 1000, seed: int = 0) -> str:
    """The per-group report of the model on ``frame`` (markdown; a note instead where every sensitive column of
    the model is continuous and none is given) and, when the target and the training sensitive columns are
    there, the constraint rows on these rows."""
    target = target or table.target
    sensitive = list(sensitive) or table.discrete_sensitive
    require_columns(frame, [target], "--target", source)
    require_columns(frame, sensitive, "--sensitive", source)
    require_complete(frame, [target, *sensitive], source)
    inputs = prediction_inputs(table, frame, source=source, strict=False)
    y = _target_values(table, frame[target].rename(target))
    if sensitive:
        groups = frame[sensitive[0]] if len(sensitive) == 1 else frame[sensitive]
        report = group_report(table.saved, inputs, y, sensitive_features=groups, pos_label=table.positive,
                              n_bootstrap=n_bootstrap, seed=seed)
        groups_part = _demote(report.to_markdown())
    else:  # continuous sensitive columns only: their constraint rows below say what holds
        groups_part = (f"No per-group table: the model's sensitive columns {table.sensitive} are continuous (give "
                       "--sensitive with a column of groups for one); the constraint rows are below.")
    specs_text = ", ".join(spec_text(s) for s in table.metadata.get("constraints") or []) or "no constraint"
    weighted = table.metadata.get("weights")
    parts = [f"# fairopt report: {source}", "",
             f"Model: {table.metadata.get('method')} trained on {table.metadata.get('source')} ({specs_text})"
             + (f", its rows weighted by `{weighted}`; the figures here count rows unweighted, so the constraint "
                "rows can differ from the training report's weighted ones." if weighted else "."),
             *_new_levels_notes(table, frame, sensitive), "", groups_part]
    specs = table.saved.constraints
    if specs and target == table.target and set(table.sensitive) <= set(frame.columns):
        try:
            known = _rows_of_training_groups(table, frame)
            rows = _rows_data(table, frame[known], inputs[known], y[known])
            constraints = resolve_constraints(list(specs))  # fresh copies, set up on these rows
            set_up_on_other_rows(constraints, rows)
            results = evaluate(table.saved.model, rows, constraints)
            left_out = ([] if known.all() else
                        [f"On the {int(known.sum())} rows of the training groups; the {int((~known).sum())} rows of "
                         "groups new to the model are left out (the bounds compare the training groups).", ""])
            parts += ["", "## Constraints on these rows", "", *left_out, constraint_table(constraints, results)]
        except ValueError as exc:
            logger.warning("constraints not evaluated on %s: %s", source, exc)
            parts += ["", "## Constraints on these rows", "", f"Not evaluated: {exc}."]
    return "\n".join(parts) + "\n"


def _known_levels(table: TableModel, frame: pd.DataFrame, name: str) -> np.ndarray | None:
    """Whether each row's value of the sensitive column ``name`` is one of the training rows' levels (compared
    as text); None for a column without training levels (continuous, or not the model's)."""
    trained = (table.saved.schema.get("sensitive_levels") or {}).get(name)
    if not trained:
        return None
    return frame[name].astype(str).isin({str(level) for level in trained}).to_numpy()


def _rows_of_training_groups(table: TableModel, frame: pd.DataFrame) -> np.ndarray:
    """Whether each row's groups are all among the training rows' levels (continuous columns: every row)."""
    keep = np.ones(len(frame), dtype=bool)
    for name in table.sensitive:
        known = _known_levels(table, frame, name)
        if known is not None:
            keep &= known
    return keep


def _new_levels_notes(table: TableModel, frame: pd.DataFrame, sensitive: Sequence[str]) -> list[str]:
    """A note per sensitive column of these rows holding levels the model's training rows did not (their
    groups are new to the model: its bounds never saw them)."""
    notes = []
    for name in sensitive:
        known = _known_levels(table, frame, name)
        if known is None:
            continue
        new = sorted({str(v) for v in frame[name][~known].dropna()})
        if new:
            trained = table.saved.schema["sensitive_levels"][name]
            notes += ["", f"Note: `{name}` holds level(s) {new} that the training rows did not (they held "
                          f"{sorted(str(level) for level in trained)}): the model's bounds never saw these groups."]
    return notes


def _rows_data(table: TableModel, frame: pd.DataFrame, inputs: pd.DataFrame, y: np.ndarray) -> FairData:
    """A FairData of these rows encoded with the saved preprocessor."""
    work = inputs.copy()
    for name in table.sensitive:
        work[name] = frame[name].to_numpy()
    target = "__target__"
    work[target] = (y == table.positive).astype(np.float64) if table.task == "binary" else y
    schema = table.saved.schema or {}
    return FairData.from_frame(work, target=target, sensitive=table.sensitive, features=table.features,
                               task=table.task, include_sensitive=table.include_sensitive,
                               sensitive_kinds=schema.get("sensitive_kinds"), preprocessor=table.saved.preprocessor)


# --------------------------------------------------------------------------------------
# the history figure
# --------------------------------------------------------------------------------------
#: History keys of each panel, first present wins the label order.
_LOSS_KEYS = (("f", "loss"), ("master_loss_predictions", "loss of the predictions"), ("score", "learner score"))
_VIOLATION_KEYS = (("V_exact", "exact (hard predictions)"), ("V", "surrogate"), ("V_predictions", "predictions"),
                   ("V_targets", "targets"), ("P", "penalty term"))


def plot_training(history: History, method: str, path: str | Path | None = None, *, ax: Any = None,
                  title: str | None = None) -> Any:
    """Loss and constraint violation against the iteration, two panels (the library's plot
    convention, :mod:`solvers.plotting`: ``ax`` is two Axes, or None for a new figure on the
    Agg canvas, no pyplot state); written as a PNG when ``path`` is given. Returns the two
    Axes."""
    from solvers.plotting import finish_axes, panel_axes

    created = ax is None
    loss_ax, violation_ax = panel_axes(ax, 2)
    records = [r for r in history.records if r.get("qp_status") != "final"] or list(history.records)
    frame = History(history.row_names, records)
    xs = frame.column("iteration") if any("iteration" in r for r in records) else np.arange(len(records))
    for axes, keys, label in ((loss_ax, _LOSS_KEYS, "loss"),
                              (violation_ax, _VIOLATION_KEYS, "constraint violation")):
        drawn = False
        for key, name in keys:
            if any(isinstance(r.get(key), (int, float)) for r in records):
                axes.plot(*finite_points(xs, frame.column(key)), lw=1.2, label=name)
                drawn = True
                if axes is loss_ax:  # one loss curve: the first recorded
                    label = name
                    break
        if axes is violation_ax and drawn:
            axes.set_yscale("symlog", linthresh=1e-4)
            axes.legend(fontsize=7)
        if not drawn:
            axes.text(0.5, 0.5, "not recorded" if axes is loss_ax else "no constraint", ha="center", va="center",
                      transform=axes.transAxes)
        axes.set_xlabel("iteration")
        axes.set_title(label)
        axes.grid(alpha=0.3)
    return finish_axes([loss_ax, violation_ax], path, title, created, dpi=110)


def command_line(argv: Sequence[str]) -> str:
    """``fairopt <argv>`` quoted for a shell."""
    return "fairopt " + shlex.join(list(argv))

