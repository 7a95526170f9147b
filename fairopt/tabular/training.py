"""Training on a user's table: :func:`train_table` (``fairopt train --data``)."""

from __future__ import annotations

import logging
import re
import shlex
import sys
import time
import warnings
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Iterator, Sequence

import numpy as np
import pandas as pd

from fairopt.constraints.base import set_up_on_other_rows
from fairopt.data import FairData, Preprocessor, coerce_numeric_columns
from fairopt.data.encoding import positive_class, sorted_labels
from fairopt.data.frames import as_number, is_text_dtype, short_list, text_column_looks_like
from fairopt.estimators import FairClassifier, FairRegressor
from fairopt.evaluation import evaluate, met_tolerances
from fairopt.inputs import constraint_sensitive_names
from fairopt.specs import resolve_constraints, saved_spec
from solvers.history import INFO_FEASIBLE
from fairopt.tabular.tables import (LAYOUT, THRESHOLD, VIOLATION_TOL, plain_value, require_columns,
                                    require_complete)

logger = logging.getLogger("fairopt.tabular")

# --------------------------------------------------------------------------------------
# training
# --------------------------------------------------------------------------------------
@dataclass
class TrainedTable:
    """The outcome of :func:`train_table` (what :func:`write_run` writes): the fitted
    estimator, the data it saw and the evaluations of both parts of the rows."""

    estimator: FairClassifier | FairRegressor
    train: FairData
    test: FairData | None
    constraints: list
    test_constraints: list
    specs: list[str]
    metadata: dict
    train_eval: dict
    test_eval: dict | None
    train_frame: pd.DataFrame
    test_frame: pd.DataFrame | None
    warnings: list[str]
    seconds: float
    encoding: dict
    #: Lines the console prints before the outcome (not warnings): the task ``--task auto`` took when it is
    #: not the obvious one (:func:`_regression_notice`).
    notices: list[str] = field(default_factory=list)


@contextmanager
def _progress(method: str, total: int | None, enabled: bool) -> Iterator[Any]:
    """A tqdm bar on stderr (shown after 1 s, only on a terminal) and the engine callback that
    advances it (the estimator is fitted with ``verbose=0``: no bar of its own)."""
    from tqdm.auto import tqdm

    stream = sys.stderr
    unit = "it" if method == "moving_targets" else "epoch"
    bar = tqdm(total=total, desc=f"fairopt train ({method})", unit=unit, file=stream, leave=False, delay=1.0,
               disable=None if enabled else True)
    seen = {"n": 0}

    def callback(engine: Any, record: dict) -> bool:
        step = record.get("iteration") if method == "moving_targets" else record.get("epoch")
        done = int(step) + (0 if method == "moving_targets" else 1) if step is not None else seen["n"] + 1
        if done > seen["n"]:
            bar.update(done - seen["n"])
            seen["n"] = done
        return False

    try:
        yield callback
    finally:
        bar.close()


def _task_and_classes(target: pd.Series, task: str,
                      positive: str | None) -> tuple[str, list | None, str | None]:
    """The task, the classes ``[negative, positive]`` of a binary target (None for a regression) and the note
    that says which class was taken as positive when ``--positive`` was not given and the labels' order says
    nothing (logged here, and kept with the run's warnings)."""
    values = target.dropna()
    labels = [plain_value(v) for v in pd.unique(values.to_numpy(dtype=object))]
    numeric = pd.api.types.is_numeric_dtype(target.dtype) and not pd.api.types.is_bool_dtype(target.dtype)
    if task == "auto":
        task = "regression" if numeric and len(labels) > 2 else "binary"
        logger.info("task: %s (target %r has %d distinct values)", task, target.name, len(labels))
    if task == "regression":
        if positive is not None:
            raise ValueError("--positive: only for a binary target (this is a regression)")
        return task, None, None
    if len(labels) != 2:
        shown = short_list(sorted(map(str, labels))[:12])
        hint = _formatted_numbers_hint(target)
        raise ValueError(f"--target: column {target.name!r} has {len(labels)} distinct values {shown}; a "
                         "classifier needs exactly 2 (" + (hint or "use --task regression for a numeric target")
                         + ")")
    chosen, note = positive_class(labels, positive, argument="--positive", source=f"the target column "
                                  f"{target.name!r}", by_text=True)
    if note:
        logger.warning("%s", note)
    negative = next(v for v in sorted_labels(labels) if v is not chosen)
    return task, [negative, chosen], note


def _formatted_numbers_hint(column: pd.Series) -> str | None:
    """How to read a text column whose every value is a number written with a decimal comma, thousands separators,
    a currency or a percent sign (``'0,26'``, :func:`fairopt.data.frames.text_column_looks_like`): the flags
    that read it, and ``--task regression`` for the numbers then; None for other columns."""
    looks = text_column_looks_like(column)
    if looks is None or looks[0] != "numbers":
        return None
    return (f"its values are numbers written as text, e.g. {looks[1]!r}: read the file with --decimal , (0,26) "
            "or --thousands , (52,300), with --task regression for a numeric target")


def _parse_constraints(specs: Sequence[str]) -> list:
    """The constraint objects of the specs (for the sensitive columns they name), each error
    naming its ``--constraint``."""
    objects = []
    for spec in specs:
        try:
            objects.extend(resolve_constraints([spec]))
        except ValueError as exc:
            text = str(exc)
            text = text[len("spec: "):] if text.startswith("spec: ") else text
            raise ValueError(f"--constraint {spec!r}: {text}") from None
    return objects


def _text_levels(frame: pd.DataFrame, names: Sequence[str]) -> list[str]:
    """Columns read as text (object or string dtype)."""
    return [n for n in names if is_text_dtype(frame[n])]


def train_table(
    frame: pd.DataFrame,
    *,
    target: str,
    sensitive: Sequence[str] = (),
    constraints: Sequence[str] = (),
    method: str = "sqp",
    model: str = "linear",
    hidden: Sequence[int] = (32,),
    epochs: int | None = None,
    lr: float | None = None,
    batch_size: int | None = None,
    iterations: int | None = None,
    alpha: float | None = None,
    margin: float | str = 0.0,
    validation_fraction: float | None = None,
    confidence: float = 0.95,
    test_size: float = 0.0,
    seed: int = 0,
    task: str = "auto",
    positive: str | None = None,
    include_sensitive: bool = False,
    ignore: Sequence[str] = (),
    weights: str | None = None,
    engine_params: dict | None = None,
    categorical: Sequence[str] | None = None,
    sensitive_kinds: dict | None = None,
    progress: bool = True,
    source: str = "the data",
    command: str = "",
) -> TrainedTable:
    """Train a model on the rows of ``frame`` (module docstring); errors name the CLI flags.

    The model is a :class:`fairopt.FairClassifier` (binary target) or
    :class:`fairopt.FairRegressor` fitted on the training part with the options of the same
    names (``alpha=None``: the estimators' default; ``iterations`` and ``engine_params``,
    e.g. ``weight`` of the penalty engine, as its ``engine_params``); what the run reports
    (status, convergence, training violations) is read from its fitted attributes.
    ``margin``, ``validation_fraction`` and ``confidence`` are the estimators' held-out options
    (``--margin``, ``--validation-fraction``, ``--confidence``): the certificates are taken on a part of
    the training part, apart from the held-out part (``test_size``) that the report evaluates.
    ``categorical`` and ``sensitive_kinds`` as in :meth:`fairopt.FairData.from_frame`; ``weights``
    names a column of row weights (``--weights``): the loss and the group rates of the constraints are
    weighted means (:class:`fairopt.FairData` ``weights``), and the column is no model input.
    """
    _check_flags(method, task, test_size, epochs, iterations, batch_size)
    require_columns(frame, [target], "--target", source)
    built = _parse_constraints(constraints)
    if not sensitive:  # the columns come from the constraints: a name missing from the file is their mistake
        require_columns(frame, constraint_sensitive_names(built), "--constraint", source)
    sensitive = _sensitive_columns(sensitive, built)
    features = _input_columns(frame, target, sensitive, ignore, weights, include_sensitive, source,
                              inputs_complete=model != "gbm")
    auto = task == "auto"
    task, classes, positive_note = _task_and_classes(frame[target], task, positive)
    work, converted = _numeric_frame(frame, target, features, task, classes)
    train_data, test_data, data_warnings = _prepared(
        work, test_size, seed, target=target, sensitive=sensitive, features=features, task=task, weights=weights,
        include_sensitive=include_sensitive, categorical=categorical, sensitive_kinds=sensitive_kinds,
        keep_missing=model == "gbm", source=source)
    train_rows = frame.index if test_data is None else train_data.frame.index
    test_rows = None if test_data is None else test_data.frame.index

    params = {**dict(engine_params or {}), **({} if iterations is None else {"iterations": int(iterations)})}
    estimator = (FairClassifier if task == "binary" else FairRegressor)(
        list(constraints), method=method, model=model, hidden=tuple(int(h) for h in hidden), alpha=alpha,
        epochs=None if epochs is None else int(epochs), lr=lr,
        batch_size=None if batch_size is None else int(batch_size), seed=int(seed), engine_params=params,
        margin=margin, validation_fraction=validation_fraction, confidence=confidence,
        violation_tol=VIOLATION_TOL, verbose=0)
    total = epochs if method != "moving_targets" else (iterations or 10)
    fit = _fit(estimator, train_data, test_data, total, progress)
    train_data, test_data, encoding = fit.train, fit.test, _encoding(fit.train, features, converted)  # model inputs

    text_columns = [c for c in _text_levels(frame, [*features, *sensitive]) if c not in converted]
    if classes is not None and isinstance(classes[1], str):
        text_columns.append(target)
    metadata = {
        "layout": LAYOUT, "source": source, "command": command, "fairopt_version": _version(),
        "task": task, "target": target, "classes": None if classes is None else [plain_value(c) for c in classes],
        "threshold": THRESHOLD, "sensitive": sensitive, "include_sensitive": bool(include_sensitive),
        "ignored": list(ignore), "text_columns": text_columns, "numeric_text_columns": converted,
        "method": method, "model": model, "hidden": [int(h) for h in hidden] if model == "mlp" else None,
        "epochs": epochs, "iterations": iterations, "lr": lr, "batch_size": batch_size, "seed": int(seed),
        "alpha": estimator.alpha_value(),
        "test_size": float(test_size), "constraints": list(constraints), "weights": weights,
        "margin": margin, "validation_fraction": validation_fraction, "confidence": float(confidence),
        "engine_params": dict(engine_params or {}), **_outcome(estimator, fit.train_eval),
        "n_train": len(train_data), "n_test": 0 if test_data is None else len(test_data),
        "seconds": round(fit.seconds, 3),
    }
    messages = _logged_once([positive_note] if positive_note else [], data_warnings)
    messages += [text for text in fit.messages if text not in messages]
    return TrainedTable(estimator=estimator, train=train_data, test=test_data, constraints=estimator.constraints_,
                        test_constraints=fit.test_constraints, specs=list(constraints), metadata=metadata,
                        train_eval=fit.train_eval, test_eval=fit.test_eval, train_frame=frame.loc[train_rows],
                        test_frame=None if test_rows is None else frame.loc[test_rows], warnings=messages,
                        seconds=fit.seconds, encoding=encoding,
                        notices=[_regression_notice(frame[target])] if auto and task == "regression" else [])


def _prepared(work: pd.DataFrame, test_size: float, seed: int, **table_options: Any
              ) -> tuple[FairData, FairData | None, list]:
    """The rows as :class:`FairData` (:func:`_table_data` with ``table_options``) split into the training and the
    held-out part (:func:`_split`), with the warnings their preprocessing gave (an identifier column read as an
    input, given by each fit of the preprocessing): the run's warnings, not raw Python ones."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        train_data, test_data = _split(_table_data(work, **table_options), test_size, seed)
    return train_data, test_data, [w.message for w in caught]


def _split(data: FairData, test_size: float, seed: int) -> tuple[FairData, FairData | None]:
    """The training and the held-out part of the rows (``--test-size``; none held out for 0), logged."""
    if float(test_size) > 0:
        train_data, test_data = data.split(test_size=float(test_size), seed=int(seed))
    else:
        train_data, test_data = data, None
    logger.info("rows: %d for training, %d held out", len(train_data), 0 if test_data is None else len(test_data))
    return train_data, test_data


def _regression_notice(target: pd.Series) -> str:
    """The line that says ``--task auto`` made a numeric target of more than two values a regression: a 0/1/2
    label trained a regression unsaid, whose predictions are numbers and whose rate constraints (DI, DP)
    bound the groups' shares of predictions above a threshold."""
    return (f"task: regression (the target {target.name!r} has {target.nunique()} distinct numeric values; the "
            "predictions are numbers, not labels); a classifier needs a target of two labels (--task binary)")


def _table_data(work: pd.DataFrame, *, target: str, sensitive: list[str], features: list[str], task: str,
                include_sensitive: bool, categorical: Sequence[str] | None, sensitive_kinds: dict | None,
                weights: str | None, keep_missing: bool, source: str) -> FairData:
    """The FairData of the numeric frame ``work`` (errors name the file and the flag); ``keep_missing``: boosted
    trees route missing inputs. The kinds of columns that are not sensitive in this run are not used."""
    kinds = {name: kind for name, kind in (sensitive_kinds or {}).items() if name in sensitive}
    try:
        return FairData.from_frame(work, target=target, sensitive=sensitive, features=features, task=task,
                                   include_sensitive=include_sensitive, categorical=categorical,
                                   sensitive_kinds=kinds, weights=weights,
                                   preprocessor=Preprocessor(missing="keep") if keep_missing else None)
    except ValueError as exc:
        text = str(exc)
        raise ValueError(f"{source}: --{text}" if text.startswith("weights") else f"{source}: {text}") from None


def _check_flags(method: str, task: str, test_size: float, epochs: int | None, iterations: int | None,
                 batch_size: int | None) -> None:
    """The values of ``--task``, ``--test-size`` and the positive counts (the estimator checks
    ``--method``, ``--model`` and the other options of its own)."""
    if task not in ("auto", "binary", "regression"):
        raise ValueError(f"--task: expected auto, binary or regression, got {task!r}")
    if not 0.0 <= float(test_size) < 1.0:
        raise ValueError(f"--test-size: expected a fraction in [0, 1), got {test_size!r}")
    if iterations is not None and method != "moving_targets":
        raise ValueError(f"--iterations: only for --method moving_targets (not {method})")
    for flag, value in (("--epochs", epochs), ("--iterations", iterations), ("--batch-size", batch_size)):
        if value is not None and int(value) < 1:
            raise ValueError(f"{flag}: expected a positive integer, got {value!r}")


def _sensitive_columns(sensitive: Sequence[str], built: list) -> list[str]:
    """``--sensitive`` (each column once), or the columns the constraints name when none is
    given; every column a constraint names must be among them."""
    needed = constraint_sensitive_names(built)
    sensitive = list(dict.fromkeys(sensitive))
    if sensitive:
        absent = [n for n in needed if n not in sensitive]
        if absent:
            raise ValueError(f"--constraint: names the sensitive column(s) {short_list(absent)}, not given with "
                             f"--sensitive {' --sensitive '.join(sensitive)}; add --sensitive for each")
    else:
        sensitive = needed
    if not sensitive:
        raise ValueError("--sensitive: give at least one sensitive column (the groups of the constraints and of "
                         "the report)")
    return sensitive


def _input_columns(frame: pd.DataFrame, target: str, sensitive: list[str], ignore: Sequence[str],
                   weights: str | None, include_sensitive: bool, source: str,
                   inputs_complete: bool = True) -> list[str]:
    """The model's input columns: every column but the target, the ignored ones, the weights
    and (unless ``include_sensitive``) the sensitive ones; the columns used must be complete (the
    inputs only with ``inputs_complete``: boosted trees take missing input values)."""
    require_columns(frame, sensitive, "--sensitive", source)
    require_columns(frame, list(ignore), "--ignore", source)
    if target in sensitive:
        raise ValueError(f"--sensitive: {target!r} is the --target column")
    if weights is not None:
        require_columns(frame, [weights], "--weights", source)
        if weights in (target, *sensitive):
            raise ValueError(f"--weights: {weights!r} is the --target or a --sensitive column")
    reserved = {target, *ignore} | (set() if include_sensitive else set(sensitive)) | ({weights} - {None})
    features = [c for c in frame.columns if c not in reserved]
    if not features:
        raise ValueError(f"--ignore: no input columns remain in {source} (target {target!r}, sensitive "
                         f"{sensitive}, ignored {list(ignore)})")
    require_complete(frame, [target, *sensitive], source)
    if inputs_complete:
        require_complete(frame, features, source, "drop or fill them first, or train boosted trees (--model gbm), "
                                                  "which take missing input values")
    named = [c for c in features if c not in sensitive and _looks_protected(c)]
    if named:  # a second protected attribute left among the inputs is disparate treatment, not a bound
        quoted = " ".join(shlex.quote(str(c)) for c in named)
        logger.warning("columns %s are model inputs, and their names suggest protected attributes: the model may "
                       "decide on them directly. If they are, bound them with --sensitive %s (not a model input "
                       "then) or leave them out with --ignore %s", named, quoted, quoted)
    return features


#: Column names (lower case, letters only) that commonly hold a protected attribute (:func:`_looks_protected`).
PROTECTED_NAMES = frozenset({"sex", "gender", "race", "ethnicity", "ethnic", "ethnicgroup", "religion", "nationality",
                             "nationalorigin", "countryofbirth", "maritalstatus", "marital", "disability",
                             "pregnancy", "color", "colour"})


def _looks_protected(column: Any) -> bool:
    """Whether a column's name, lower-cased with everything but letters removed, is one of
    :data:`PROTECTED_NAMES` ("Race", "marital_status", "SEX")."""
    return re.sub(r"[^a-z]", "", str(column).lower()) in PROTECTED_NAMES


def _numeric_frame(frame: pd.DataFrame, target: str, features: list[str], task: str,
                   classes: list | None) -> tuple[pd.DataFrame, list[str]]:
    """``frame`` with the target as numbers (1.0 for the positive class of a binary task) and
    the inputs holding numbers written as text as numbers; also the names of those inputs."""
    work = frame.copy(deep=False)
    if task == "binary":
        work[target] = (frame[target].to_numpy(dtype=object) == classes[1]).astype(np.float64)
    else:
        numbers = [as_number(v) for v in frame[target].to_numpy(dtype=object)]
        bad = [v for v, x in zip(frame[target], numbers) if x is None]
        if bad:
            hint = _formatted_numbers_hint(frame[target])
            raise ValueError(f"--target: column {target!r} holds values that are not numbers, e.g. "
                             f"{short_list(bad[:3])}; a regression needs numbers" + (f" ({hint})" if hint else ""))
        work[target] = np.asarray(numbers, dtype=np.float64)
    # numbers written as text become numbers here (the rule FairData.from_frame applies too) so
    # that the run knows which columns they were: the model file records them for new rows
    work, converted = coerce_numeric_columns(work, features)
    for column in [c for c in _text_levels(frame, features) if c not in converted]:
        levels = frame[column].nunique()
        looks = text_column_looks_like(frame[column])
        if looks is not None and looks[0] == "numbers":
            logger.warning("column %r holds numbers written with a currency sign, separators or a percent sign "
                           "(e.g. %r), read as text: one-hot encoded with %d levels. Write them as plain numbers, "
                           "or read the file with --thousands , (52,300) or --decimal , (0,5)", column, looks[1],
                           levels)
        elif looks is not None:
            logger.warning("column %r holds dates (e.g. %r), read as text: one-hot encoded with %d levels. Leave it "
                           "out with --ignore %s, or turn it into a number (e.g. days since a start) first", column,
                           looks[1], levels, shlex.quote(str(column)))
        elif levels > max(50, len(frame) // 2):
            logger.warning("column %r has %d distinct text values in %d rows: one-hot encoding gives as many "
                           "inputs; if it is an identifier, leave it out with --ignore %s", column, levels,
                           len(frame), shlex.quote(str(column)))
    return work, converted


def _encoding(data: FairData, features: list[str], converted: list[str]) -> dict:
    """How the input columns became model inputs (numeric, one-hot levels), logged."""
    encoding = {"numeric": list(data.preprocessor.numeric_), "one_hot": {c: list(data.preprocessor.levels_[c])
                                                                         for c in data.preprocessor.categorical_},
                "numeric_text": converted, "n_inputs": data.n_features}
    logger.info("inputs: %d columns -> %d model inputs; numeric %s, one-hot %s", len(features), data.n_features,
                encoding["numeric"], list(encoding["one_hot"]))
    if converted:
        logger.info("text columns holding only numbers, used as numbers: %s", converted)
    return encoding


@dataclass
class _Fit:
    """The evaluations of a table fit (:func:`_fit`)."""

    train_eval: dict
    test_constraints: list
    test_eval: dict | None
    messages: list[str]
    seconds: float
    train: FairData
    test: FairData | None


def _fit(estimator: FairClassifier | FairRegressor, train_data: FairData, test_data: FairData | None,
         total: int | None, progress: bool) -> _Fit:
    """Fit ``estimator`` on the training rows with a progress bar, evaluate it on the training
    and held-out rows and log each of its warnings once. Both parts are encoded again with the fitted
    estimator's preprocessor (``_Fit.train``, ``_Fit.test``): a validation part (``--validation-fraction``)
    re-fits it on the rows the model trains on, whose levels and scales the model's inputs are."""
    started = time.perf_counter()
    params = estimator.engine_params
    with _progress(estimator.method, total, progress) as callback, warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        estimator.set_params(engine_params={**params, "callbacks": [callback]})
        try:
            estimator.fit(train_data)
        finally:
            estimator.set_params(engine_params=params)
        train_data = train_data.encoded_with(estimator.preprocessor_)
        test_data = None if test_data is None else test_data.encoded_with(estimator.preprocessor_)
        train_eval = evaluate(estimator.model_, train_data, estimator.constraints_)
        test_constraints, test_eval = _held_out_evaluation(estimator.model_, test_data, estimator.constraints_)
    seconds = time.perf_counter() - started
    messages = _logged_once([], [w.message for w in caught])
    return _Fit(train_eval, test_constraints, test_eval, messages, seconds, train_data, test_data)


def _logged_once(messages: list[str], new: Sequence[Any]) -> list[str]:
    """``messages`` with each of the warnings ``new`` not among them yet, on one line each, logged as it is
    added: the run's warnings, which report.md lists and the console shows once."""
    messages = list(messages)
    for message in new:
        text = " ".join(str(message).split())
        if text not in messages:
            messages.append(text)
            logger.warning("%s", text)
    return messages


def _held_out_evaluation(model: Any, test_data: FairData | None, fitted: list) -> tuple[list, dict | None]:
    """The constraints set up on the held-out rows and the evaluation there (none without them;
    without constraints, with a warning, when they cannot be set up there).

    The constraints are those of the saved model (:func:`_saved_form`): a relative bound (``dcov:race<=0.25x``)
    keeps the absolute bound it took on the training target, as ``fairopt report`` reads it, not one rescaled
    to the held-out target's own measure; so both give the same verdict on the same rows. Its ``"bounds"``
    entry is a share of the training target's measure, as on the training rows (:func:`_as_training_shares`).
    """
    if test_data is None:
        return [], None
    test_constraints = _saved_form(fitted)
    try:
        set_up_on_other_rows(test_constraints, test_data)
        results = evaluate(model, test_data, test_constraints)
    except ValueError as exc:  # e.g. a group without rows in the held-out part
        warnings.warn(f"constraints not evaluated on the held-out rows: {exc}", UserWarning, stacklevel=1)
        return [], evaluate(model, test_data, [])
    return test_constraints, _as_training_shares(results, fitted)


def _saved_form(fitted: list) -> list:
    """Fresh copies (not set up) of the fitted constraints as the saved model holds them
    (:func:`fairopt.specs.saved_spec`, what :func:`fairopt.save` writes): a relative bound resolved to its
    absolute bound on the training target."""
    return resolve_constraints([saved_spec(c) for c in fitted])


def bound_entries(results: dict | None, constraints: Sequence[Any]) -> list[tuple[Any, dict]]:
    """Each constraint with a measure beside its entry of the ``"bounds"`` of :func:`fairopt.evaluate`
    (``results``, evaluated with ``constraints``), in constraint order; none without results."""
    measured = [c for c in constraints if callable(getattr(c, "realised", None))]
    return list(zip(measured, ((results or {}).get("bounds") or {}).values()))


def _as_training_shares(results: dict, fitted: list) -> dict:
    """``results`` with the ``"bounds"`` entry of each relative bound of ``fitted`` read as the relative bound
    reads on the training rows: the value a share of the training target's own measure (its ``reference``),
    beside the bound as given (0.25 of ``<=0.25x``). The saved-form copies evaluated hold absolute values."""
    for c, entry in bound_entries(results, fitted):
        reference = getattr(c, "reference", None)
        if getattr(c, "relative", False) and reference:
            entry.update(value=entry["value"] / reference, bound=float(c.bound))
    return results


def _outcome(estimator: FairClassifier | FairRegressor, train_eval: dict) -> dict:
    """The run's status and its sentence, convergence, feasibility (the engine's, else the exact
    training violation within the tolerance, in total and per constraint in its rows' units:
    :func:`fairopt.evaluation.met_tolerances`) and training violations, from the estimator."""
    feasible = estimator.engine_info_.get(INFO_FEASIBLE)
    if feasible is None and estimator.constraints_:
        tolerances = met_tolerances(estimator.constraints_, VIOLATION_TOL)
        feasible = bool(train_eval.get("violation", 0.0) <= VIOLATION_TOL) and all(
            violation <= tolerances[name] for name, violation in estimator.train_violations_.items())
    return {"status": estimator.status_, "status_message": estimator.status_message_,
            "converged": bool(estimator.converged_), "feasible": feasible,
            "train_violations": {k: float(v) for k, v in estimator.train_violations_.items()}}


def _version() -> str:
    from fairopt import __version__

    return str(__version__)
