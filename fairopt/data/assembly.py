"""Assembly of a :class:`~fairopt.data.FairData` from a DataFrame: argument checks, input
columns, numbers held as text, sensitive encodings, intersection cells and the
preprocessor (the shared body of :meth:`FairData.from_frame` and :meth:`FairData.transform`)."""

from __future__ import annotations

import logging
from typing import Any, Mapping, Sequence

import numpy as np
import pandas as pd
import torch

from fairopt._validation import check_sample_weight
from fairopt.data.encoding import (decode_cell_keys, encode_exposure, encode_sensitive, encode_target,
                                   intersection_cells)
from fairopt.data.frames import (as_name_list, as_number, check_columns_exist, check_frame, coerce_numeric_columns,
                                 is_text_dtype, require_finite_columns, short_list)
from fairopt.data.preprocessing import Preprocessor

__all__ = ["SENSITIVE_KINDS", "TASKS", "build_fair_data", "check_frame_arguments", "coerce_inputs",
           "encode_all_sensitive", "encode_weights", "prepare_preprocessor", "require_numbers",
           "resolve_feature_columns"]

logger = logging.getLogger("fairopt.data")  # one logger for the whole data layer

TASKS: tuple[str, ...] = ("binary", "regression", "poisson")
SENSITIVE_KINDS: tuple[str, ...] = ("binary", "categorical", "continuous")


def resolve_feature_columns(
    df: pd.DataFrame,
    target: str,
    sensitive: list[str],
    exposure: str | None,
    features: Sequence[str] | None,
    include_sensitive: bool,
    weights: str | None = None,
) -> list[str]:
    """Input columns: ``features`` (default: all but target/exposure/weights), with the
    sensitive columns added (include_sensitive) or removed (not include_sensitive)."""
    reserved = [target] + [c for c in (exposure, weights) if c is not None]
    if features is None:
        columns = [c for c in df.columns if c not in reserved]
    else:
        columns = as_name_list(features, "features")
        check_columns_exist(df, columns, "features")
        clash = [c for c in columns if c in reserved]
        if clash:
            raise ValueError(f"features: {short_list(clash)} is the target/exposure/weights column and cannot be "
                             "an input")
    if include_sensitive:
        columns = columns + [s for s in sensitive if s not in columns]
    else:
        dropped = [c for c in columns if c in sensitive]
        if dropped and features is not None:
            logger.info("include_sensitive=False: sensitive columns %s removed from the inputs", dropped)
        columns = [c for c in columns if c not in sensitive]
    if not columns:
        raise ValueError(f"features: no input columns remain (features={features!r}, "
                         f"include_sensitive={include_sensitive})")
    return columns


def check_frame_arguments(
    df: pd.DataFrame,
    target: str,
    sensitive: list[str],
    categorical: list[str],
    task: str,
    exposure: str | None,
    sensitive_kinds: Mapping[str, str],
) -> None:
    """Names and values of the from_frame arguments (not the data)."""
    if task not in TASKS:
        raise ValueError(f"task: expected one of {TASKS}, got {task!r}")
    if isinstance(target, (list, tuple, set, dict)):
        raise ValueError(f"target: expected one column name, got {target!r}")
    check_columns_exist(df, [target], "target")
    check_columns_exist(df, sensitive, "sensitive")
    check_columns_exist(df, categorical, "categorical")
    if exposure is not None:
        check_columns_exist(df, [exposure], "exposure")
        if exposure == target or exposure in sensitive:
            raise ValueError(f"exposure: column {exposure!r} is also the target or a sensitive column")
    if target in sensitive:
        raise ValueError(f"sensitive: the target column {target!r} cannot be a sensitive feature")
    unknown = [k for k in sensitive_kinds if k not in sensitive]
    if unknown:
        raise ValueError(f"sensitive_kinds: {short_list(unknown)} are not among sensitive={short_list(sensitive)}")
    bad_kinds = {k: v for k, v in sensitive_kinds.items() if v not in SENSITIVE_KINDS}
    if bad_kinds:
        raise ValueError(f"sensitive_kinds: unknown kind(s) {bad_kinds!r}; expected one of {SENSITIVE_KINDS}")


def encode_weights(df: pd.DataFrame, weights: Any, target: str, sensitive: list[str],
                   exposure: str | None) -> tuple[np.ndarray | None, str | None]:
    """The ``weights=`` of :meth:`FairData.from_frame` as a float64 array (or None) and the
    name of its column (None for an array): a column of ``df`` that is not the target, a
    sensitive column or the exposure, or an array with one weight per row; checked by
    :func:`fairopt._validation.check_sample_weight` (finite, ``>= 0``, not all 0)."""
    if weights is None:
        return None, None
    if isinstance(weights, str):
        check_columns_exist(df, [weights], "weights")
        if weights == target or weights in sensitive or weights == exposure:
            raise ValueError(f"weights: column {weights!r} is also the target, a sensitive column or the exposure")
        column = df[weights]
        if pd.api.types.is_bool_dtype(column.dtype):
            raise ValueError(f"weights: column {weights!r} must hold numbers, got dtype {column.dtype}")
        if not pd.api.types.is_numeric_dtype(column.dtype):
            try:  # numbers written as text
                column = pd.to_numeric(column)
            except (TypeError, ValueError):
                raise ValueError(f"weights: column {weights!r} must hold numbers, got dtype {column.dtype}") from None
        return check_sample_weight(column.to_numpy(dtype=np.float64, na_value=np.nan), len(df),
                                   f"weights (column {weights!r})"), weights
    return check_sample_weight(weights, len(df), "weights"), None


def prepare_preprocessor(
    preprocessor: Preprocessor | None, df: pd.DataFrame, columns: list[str], categorical: list[str]
) -> Preprocessor:
    """The preprocessor to use: given and fitted (checked), given and unfitted (fitted; without its own
    ``categorical`` it takes the declared one, as a new one does), or new."""
    declared = [c for c in categorical if c in columns]
    if preprocessor is None:
        return Preprocessor(columns, declared).fit(df)
    if not isinstance(preprocessor, Preprocessor):
        raise ValueError(f"preprocessor: expected a Preprocessor, got {type(preprocessor).__name__}")
    if not preprocessor.is_fitted:
        if preprocessor.columns is not None and set(preprocessor.columns) != set(columns):
            raise ValueError(f"preprocessor: configured for columns {short_list(preprocessor.columns)} but the "
                             f"input columns are {short_list(columns)}")
        if preprocessor.columns is None:
            preprocessor.columns = list(columns)
        if preprocessor.categorical is None:
            preprocessor.categorical = declared
        return preprocessor.fit(df)
    if set(preprocessor.columns_) != set(columns):
        raise ValueError(f"preprocessor: fitted on columns {short_list(preprocessor.columns_)} but the input "
                         f"columns are {short_list(columns)}")
    return preprocessor


def encode_all_sensitive(
    df: pd.DataFrame,
    names: list[str],
    kinds_declared: Mapping[str, str],
    categorical: list[str],
    reference: Any,
) -> tuple[dict[str, torch.Tensor], dict[str, str], dict[str, list], dict[str, np.ndarray]]:
    """:func:`encode_sensitive` for every sensitive column (kinds/levels of ``reference``, a
    :class:`~fairopt.data.FairData`, if given).

    Returns tensors, kinds, levels and the int64 codes of the discrete features, by name.
    """
    tensors: dict[str, torch.Tensor] = {}
    kinds: dict[str, str] = {}
    levels: dict[str, list] = {}
    codes: dict[str, np.ndarray] = {}
    for name in names:
        kind = reference.sensitive_kinds[name] if reference is not None else kinds_declared.get(name)
        reference_levels = reference.sensitive_levels[name] if reference is not None else None
        tensors[name], kinds[name], levels[name], code = encode_sensitive(
            df[name], kind, name in categorical, reference_levels
        )
        if code is not None:
            codes[name] = code
    return tensors, kinds, levels, codes


def coerce_inputs(
    df: pd.DataFrame,
    columns: list[str],
    sensitive: list[str],
    categorical: list[str],
    preprocessor: Preprocessor | None,
    argument: str = "df",
) -> pd.DataFrame:
    """``df`` with the input columns that hold numbers as text made numeric
    (:func:`coerce_numeric_columns`); ``argument`` is the name its error messages give ``df``.

    Left as they are: sensitive columns (their groups are read from the raw values),
    columns declared categorical (argument or preprocessor configuration) and, with a
    fitted preprocessor, the columns it one-hot encodes. With a fitted preprocessor a
    column it treats as numeric must convert: ValueError naming it otherwise.
    """
    excluded = set(sensitive) | set(categorical)
    if preprocessor is not None:
        excluded |= set(preprocessor.categorical_ if preprocessor.is_fitted else preprocessor.categorical or [])
    candidates = [c for c in columns if c not in excluded]
    inputs, _ = coerce_numeric_columns(df, candidates)
    if preprocessor is not None and preprocessor.is_fitted:
        for column in preprocessor.numeric_:
            if column in candidates and is_text_dtype(inputs[column]):
                require_numbers(inputs[column], argument)
    return inputs


def require_numbers(series: pd.Series, argument: str = "df") -> None:
    """ValueError naming a column the fitted preprocessor treats as numeric when some of
    its values are not numbers (``argument``: the frame's name in the message)."""
    bad = [v for v in pd.unique(series.dropna().to_numpy(dtype=object)) if as_number(v) is None]
    if bad:
        raise ValueError(f"{argument}: column {series.name!r} was numeric when the preprocessor was fitted but holds "
                         f"values that are not numbers here: {short_list(bad[:5])}")


def build_fair_data(
    cls: type,
    df: pd.DataFrame,
    *,
    target: str,
    sensitive: str | Sequence[str],
    features: Sequence[str] | None,
    categorical: Sequence[str] | None,
    task: str,
    exposure: str | None,
    sensitive_kinds: Mapping[str, str] | None,
    include_sensitive: bool,
    preprocessor: Preprocessor | None,
    reference: Any,
    weights: Any = None,
) -> Any:
    """Shared body of :meth:`FairData.from_frame` and :meth:`FairData.transform`."""
    check_frame(df, "df")
    sensitive_names = as_name_list(sensitive, "sensitive")
    categorical_names = as_name_list(categorical, "categorical")
    kinds_declared = dict(sensitive_kinds or {})
    check_frame_arguments(df, target, sensitive_names, categorical_names, task, exposure, kinds_declared)
    weight_values, weights_name = encode_weights(df, weights, target, sensitive_names, exposure)
    if preprocessor is not None and preprocessor.is_fitted and features is None:
        features = [c for c in preprocessor.columns_ if c not in sensitive_names or include_sensitive]
    columns = resolve_feature_columns(df, target, sensitive_names, exposure, features, include_sensitive,
                                      weights_name)

    require_finite_columns(df, [target], "target")
    require_finite_columns(df, sensitive_names, "sensitive")
    if exposure is not None:
        require_finite_columns(df, [exposure], "exposure")
    inputs = coerce_inputs(df, columns, sensitive_names, categorical_names, preprocessor)
    keeps_missing = preprocessor is not None and preprocessor.keeps_missing
    require_finite_columns(inputs, columns, "features", allow_missing=keeps_missing)

    y = encode_target(df[target], task)
    exposure_tensor = encode_exposure(df[exposure]) if exposure is not None else None

    tensors, kinds, levels, codes = encode_all_sensitive(
        df, sensitive_names, kinds_declared, categorical_names, reference
    )
    discrete = [n for n in sensitive_names if kinds[n] != "continuous"]
    radices = [len(levels[n]) for n in discrete]
    reference_keys = reference._cell_keys if reference is not None else None
    cells, cell_keys = intersection_cells([codes[n] for n in discrete], radices, len(df), reference_keys)
    cell_levels = decode_cell_keys(cell_keys, radices, [levels[n] for n in discrete]) if discrete else [()]

    fitted = prepare_preprocessor(preprocessor, inputs, columns, categorical_names)
    X, feature_names = fitted.transform(inputs)
    return cls(
        torch.from_numpy(X), y, task, tensors, kinds, levels, torch.from_numpy(cells), len(cell_keys),
        exposure_tensor, feature_names,
        preprocessor=fitted, target_name=target, include_sensitive=include_sensitive,
        cell_levels=cell_levels, exposure_name=exposure, feature_columns=fitted.columns_,
        frame=df, cell_keys=cell_keys, weights=weight_values, weights_name=weights_name,
    )
