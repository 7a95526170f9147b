"""Encodings of the target, the exposure and the sensitive features, the intersection cells of the
discrete sensitive features, and which of two class labels is the positive one.
"""

from __future__ import annotations

import logging
from typing import Any, Sequence

import numpy as np
import pandas as pd
import torch

from fairopt.data.frames import (as_number, is_categorical_dtype, level_codes, short_list, spaced_twins,
                                 unique_levels)

__all__ = ["encode_target", "encode_exposure", "encode_sensitive", "intersection_cells", "decode_cell_keys",
           "positive_class", "sorted_labels"]

logger = logging.getLogger("fairopt.data")  # one logger for the whole data layer


def _require_numeric(series: pd.Series, argument: str, purpose: str) -> np.ndarray:
    """Float64 values of a numeric (or bool) column; ValueError for text columns."""
    if not (pd.api.types.is_numeric_dtype(series.dtype) or pd.api.types.is_bool_dtype(series.dtype)):
        examples = short_list(pd.unique(series.to_numpy())[:5].tolist())
        raise ValueError(f"{argument}: column {series.name!r} must be numeric {purpose}; "
                         f"got dtype {series.dtype} with values like {examples}")
    return series.to_numpy(dtype=np.float64)


def encode_target(series: pd.Series, task: str) -> torch.Tensor:
    """The target as float32: 0/1 (binary), non-negative integers (poisson) or any finite number (regression)."""
    values = _require_numeric(series, "target", f"for task={task!r}")
    if task == "binary":
        bad = ~np.isin(values, (0.0, 1.0))
        if bad.any():
            examples = short_list(pd.unique(values[bad])[:5].tolist())
            raise ValueError(
                f"target: column {series.name!r} must hold 0/1 values for task='binary'; "
                f"{int(bad.sum())} rows hold other values, e.g. {examples}"
            )
    elif task == "poisson":
        negative = values < 0
        if negative.any():
            raise ValueError(f"target: column {series.name!r} has {int(negative.sum())} negative counts "
                             f"(e.g. {values[negative][0].item()!r}); task='poisson' needs counts >= 0")
        fractional = values != np.round(values)
        if fractional.any():
            raise ValueError(f"target: column {series.name!r} has {int(fractional.sum())} non-integer counts "
                             f"(e.g. {values[fractional][0].item()!r}); task='poisson' needs integer counts")
    return torch.from_numpy(values.astype(np.float32))


def sorted_labels(labels: Sequence[Any]) -> list[Any]:
    """``labels`` sorted (by their text when they cannot be compared, e.g. mixed types)."""
    try:
        return sorted(labels)
    except TypeError:
        return sorted(labels, key=str)


def _plain(value: Any) -> Any:
    return value.item() if isinstance(value, np.generic) else value


def _truth_value(label: Any) -> float | None:
    """A number for a boolean, a number, or a text spelling one (``"1"``, ``"true"``)."""
    if isinstance(label, (bool, np.bool_)):
        return float(label)
    if isinstance(label, str) and label.strip().lower() in ("true", "false"):
        return float(label.strip().lower() == "true")
    return as_number(label)


def _order_is_obvious(labels: list[Any]) -> bool:
    """Whether the sorted labels are 0/1, -1/1 or False/True (or text spelling them): then the last one is
    the positive class by every convention.
    """
    values = [_truth_value(v) for v in labels]
    return None not in values and values in ([0.0, 1.0], [-1.0, 1.0])


#: What the positive class means to the estimators, in the note of :func:`positive_class`.
CONSTRAINTS_ROLE = ("the constraints count it as the favourable outcome (their group rates are rates of "
                    "predicting {label})")


def positive_class(labels: Sequence[Any], positive: Any = None, *, argument: str = "pos_label",
                   source: str = "y", by_text: bool = False, role: str = CONSTRAINTS_ROLE) -> tuple[Any, str | None]:
    """The positive one of two class labels, and a note when it was taken by default.

    The positive class is the outcome the rate constraints count as favourable and the class whose logit
    the model outputs: the one rule of :class:`fairopt.FairClassifier` (``pos_label``) and
    ``fairopt train --data`` (``--positive``).

    Parameters
    ----------
    labels : sequence of the two distinct labels, in any order.
    positive : optional
        The positive class, one of ``labels``; None: the last of the sorted labels (``classes_[1]``).
    argument : str, default "pos_label"
        How the caller spells the option, in the messages.
    source : str, default "y"
        What holds the labels, in the error message.
    by_text : bool, default False
        Match ``positive`` by its text (a flag's value is text whatever the column holds).
    role : str
        What the positive class means to the caller, in the note (``{label}``: the class taken).

    Returns
    -------
    positive : the element of ``labels`` that is the positive class.
    note : str or None
        With ``positive=None`` and labels whose order says nothing (anything but 0/1, -1/1 and booleans:
        ``"approved"``/``"rejected"`` sort alphabetically), which class was taken and how to choose.
    """
    ordered = sorted_labels(list(labels))
    shown = [_plain(v) for v in ordered]
    if positive is None:
        chosen = ordered[-1]
        if _order_is_obvious(ordered):
            return chosen, None
        other = shown[0]

        def option(label: Any) -> str:
            return f"{argument} {label}" if argument.startswith("-") else f"{argument}={label!r}"

        return chosen, (f"{argument} not given: the positive class is {shown[-1]!r}, the last of the sorted labels "
                        f"{shown}; {role.format(label=repr(shown[-1]))}. Pass {option(other)} to make "
                        f"{other!r} the positive class ({option(shown[-1])} keeps this choice without this warning)")

    def same(label: Any) -> bool:
        if by_text:
            return str(_plain(label)) == str(_plain(positive))
        try:
            return bool(label == positive)
        except (TypeError, ValueError):  # e.g. an array given as the label
            return False

    matches = [v for v in ordered if same(v)]
    if not matches:
        encoded = isinstance(_plain(positive), str) and shown == list(range(len(shown)))
        hint = (f"; labels 0, 1, ... where {_plain(positive)!r} was meant are what a meta-estimator such as "
                "VotingClassifier or StackingClassifier fits its members on (it encodes the labels in sorted "
                "order): give that label's position in the sorted labels, e.g. 0 for the first" if encoded else "")
        spaced = spaced_twins(_plain(positive), shown)
        if spaced and not hint:  # UCI Adult's ' >50K': the labels keep the file's spaces
            hint = (f"; did you mean {spaced[0]!r}? The labels hold spaces around their text (read the file with "
                    "pandas.read_csv(..., skipinitialspace=True), or strip them)")
        raise ValueError(f"{argument}: {_plain(positive)!r} is not a label of {source} (its labels are {shown})"
                         + hint)
    return matches[0], None


def encode_exposure(series: pd.Series) -> torch.Tensor:
    """Exposure (time at risk) as float32; every value must be > 0."""
    values = _require_numeric(series, "exposure", "(time at risk)")
    bad = values <= 0
    if bad.any():
        raise ValueError(f"exposure: column {series.name!r} has {int(bad.sum())} non-positive values "
                         f"(e.g. {values[bad][0].item()!r}); exposure must be > 0")
    return torch.from_numpy(values.astype(np.float32))


def _infer_sensitive_kind(series: pd.Series, declared_categorical: bool) -> str:
    """binary with 2 distinct values, continuous if numeric with more (unless declared categorical), else categorical.
    """
    n_distinct = series.nunique(dropna=True)
    if n_distinct == 2:
        return "binary"
    if not is_categorical_dtype(series) and not declared_categorical:
        return "continuous"
    return "categorical"


def _is_zero_one(series: pd.Series) -> bool:
    """A numeric (non-bool) column whose values are all in {0, 1}."""
    if is_categorical_dtype(series):
        return False
    return bool(np.isin(series.to_numpy(dtype=np.float64), (0.0, 1.0)).all())


def _sensitive_levels(series: pd.Series, kind: str) -> list[Any]:
    """Level label per code: numeric {0,1} binary -> [0, 1]; otherwise the sorted levels."""
    if kind == "continuous":
        return []
    if kind == "binary" and _is_zero_one(series):
        return [0, 1]
    return unique_levels(series)


def encode_sensitive(
    series: pd.Series,
    kind: str | None,
    declared_categorical: bool,
    levels: list[Any] | None = None,
) -> tuple[torch.Tensor, str, list[Any], np.ndarray | None]:
    """Encode one sensitive column: ``(tensor, kind, levels, codes)``.

    The tensor is float32 0/1 (binary), int64 codes (categorical) or float32 raw values (continuous,
    ``codes`` None). ``kind`` None infers it; ``levels`` None learns them from ``series`` (at least 2
    groups), else encodes like an existing FairData.
    """
    name = series.name
    if kind is None:
        kind = _infer_sensitive_kind(series, declared_categorical)
    if kind == "continuous":
        values = _require_numeric(series, "sensitive", "for a continuous sensitive feature")
        if levels is None and series.nunique() < 2:
            raise ValueError(f"sensitive: column {name!r} is constant ({values[0].item()!r}); "
                             "a sensitive feature needs at least 2 groups/values")
        return torch.from_numpy(values.astype(np.float32)), kind, [], None
    if levels is None:
        levels = _sensitive_levels(series, kind)
        if len(levels) < 2:
            raise ValueError(
                f"sensitive: column {name!r} has only {len(levels)} group(s) {short_list(levels)}; "
                "a sensitive feature needs at least 2 non-empty groups"
            )
        if kind == "binary" and len(levels) != 2:
            raise ValueError(f"sensitive_kinds: column {name!r} declared 'binary' but has {len(levels)} "
                             f"levels {short_list(levels)}")
    codes = level_codes(series, levels)
    unknown = codes < 0
    if unknown.any():
        examples = short_list(pd.unique(series[unknown].to_numpy())[:5].tolist())
        raise ValueError(f"sensitive: column {name!r} has values {examples} that are not among the "
                         f"reference levels {short_list(levels)}")
    tensor = torch.from_numpy(codes.astype(np.float32)) if kind == "binary" else torch.from_numpy(codes)
    return tensor, kind, list(levels), codes


def intersection_cells(
    codes: Sequence[np.ndarray],
    radices: Sequence[int],
    n_rows: int,
    reference_keys: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    r"""Intersection cell ids of discrete sensitive features: ``(cells, keys)``.

    Each row gets the mixed-radix key :math:`k = \sum_j c_j \prod_{l > j} K_l` of its codes, compacted to
    ids ``0..n_cells-1`` in increasing key order; no discrete feature puts every row in cell 0. With
    ``reference_keys`` (an existing encoding's keys in id order) known keys keep their id and new
    combinations are appended (logged).
    """
    if not codes:
        return np.zeros(n_rows, dtype=np.int64), np.zeros(1, dtype=np.int64)
    keys = np.zeros(n_rows, dtype=np.int64)
    for code, radix in zip(codes, radices):
        keys = keys * int(radix) + code
    if reference_keys is None:
        unique_keys, cells = np.unique(keys, return_inverse=True)
        return cells.astype(np.int64).reshape(-1), unique_keys.astype(np.int64)
    order = np.argsort(reference_keys, kind="stable")
    sorted_reference = reference_keys[order]
    position = np.clip(np.searchsorted(sorted_reference, keys), 0, len(sorted_reference) - 1)
    found = sorted_reference[position] == keys
    cells = np.where(found, order[position], -1).astype(np.int64)
    if not found.all():
        new_keys, new_ids = np.unique(keys[~found], return_inverse=True)
        cells[~found] = len(reference_keys) + new_ids.reshape(-1)
        logger.warning("%d rows fall in %d intersection cells absent from the reference data; "
                       "new cell ids %d.. appended",
                       int((~found).sum()), len(new_keys), len(reference_keys))
        reference_keys = np.concatenate([reference_keys, new_keys])
    return cells, reference_keys


def decode_cell_keys(keys: np.ndarray, radices: Sequence[int], levels: Sequence[list[Any]]) -> list[tuple]:
    """Level labels (one per discrete feature) of each mixed-radix cell key."""
    labels = []
    for key in keys.tolist():
        digits = []
        for radix in reversed(radices):
            key, digit = divmod(key, int(radix))
            digits.append(digit)
        labels.append(tuple(level[d] for level, d in zip(levels, reversed(digits))))
    return labels
