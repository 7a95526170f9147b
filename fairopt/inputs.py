"""The estimators' sensitive features in every accepted form (DataFrame, Series, dict,
array), named and checked against the rows of ``X``: :func:`sensitive_columns`; and which
input tables hold text columns (:func:`has_text_columns`)."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

import numpy as np
import pandas as pd

from fairopt._validation import to_numpy
from fairopt.data import FairData
from fairopt.data.assembly import coerce_inputs

logger = logging.getLogger(__name__)

__all__ = ["encoded_inputs", "has_text_columns", "held_out_rows", "internal_names", "log_encoded_columns",
           "sensitive_columns"]


def sensitive_columns(sensitive_features: Any, n_rows: int, names: Any = None) -> dict[str, np.ndarray]:
    """The sensitive features as ``{name: 1-D array}``, checked against ``n_rows``.

    Parameters
    ----------
    sensitive_features : None, DataFrame, Series, dict name -> array, or array (n,) / (n, k)
        ``None`` gives ``{}``. Names come from the DataFrame columns, the Series name, the
        dict keys, or for arrays ``"sensitive"`` (1-D) and ``"sensitive_0"`` ..
        ``"sensitive_{k-1}"`` (2-D).
    n_rows : int
        Rows of ``X``; every column must have this length.
    names : str or list of str, optional
        Names that replace the natural ones, in column order (one per column).

    Raises
    ------
    ValueError
        A column of another length, arrays of more than 2 dimensions, names that do not
        match the number of columns, duplicate names.
    """
    if sensitive_features is None:
        return {}
    natural, columns = _named_columns(sensitive_features)
    if names is not None:
        given = [names] if isinstance(names, str) else list(names)
        if len(given) != len(columns) or not all(isinstance(n, str) and n for n in given):
            raise ValueError(f"sensitive_names: expected {len(columns)} non-empty name(s) for the sensitive "
                             f"features {natural}, got {names!r}")
        natural = given
    if len(set(natural)) != len(natural):
        raise ValueError(f"sensitive_features: duplicate names {natural}")
    for name, column in zip(natural, columns):
        if column.ndim != 1 or column.shape[0] != n_rows:
            raise ValueError(f"sensitive_features: {name!r} has shape {column.shape}; expected ({n_rows},), "
                             "one value per row of X")
    return dict(zip(natural, columns))


def _named_columns(sensitive_features: Any) -> tuple[list[str], list[np.ndarray]]:
    """Natural names and 1-D columns of any accepted sensitive-feature container."""
    if isinstance(sensitive_features, pd.DataFrame):
        names = [str(c) for c in sensitive_features.columns]
        return names, [sensitive_features.iloc[:, j].to_numpy() for j in range(sensitive_features.shape[1])]
    if isinstance(sensitive_features, pd.Series):
        name = sensitive_features.name
        return [str(name) if name is not None else "sensitive"], [sensitive_features.to_numpy()]
    if isinstance(sensitive_features, Mapping):
        return [str(k) for k in sensitive_features], [_column(v) for v in sensitive_features.values()]
    array = to_numpy(sensitive_features)
    if array.ndim == 1:
        return ["sensitive"], [array]
    if array.ndim == 2:
        k = array.shape[1]
        names = ["sensitive"] if k == 1 else [f"sensitive_{j}" for j in range(k)]
        return names, [array[:, j] for j in range(k)]
    raise ValueError(f"sensitive_features: expected a 1-D or 2-D array, got shape {array.shape}")


def _column(values: Any) -> np.ndarray:
    """A numpy column; an (n, 1) array is flattened (other shapes are checked later)."""
    array = to_numpy(values)
    return array.reshape(-1) if array.ndim == 2 and array.shape[1] == 1 else array


def has_text_columns(X: Any) -> bool:
    """Whether ``X`` is a DataFrame with text or categorical columns (object, string,
    category dtypes), which the estimators encode with the one rule of
    :func:`fairopt.data.frames.coerce_numeric_columns` (numbers held as text become numbers)
    and the preprocessor (other text is one-hot encoded) instead of casting to float."""
    if not isinstance(X, pd.DataFrame):
        return False
    return any(pd.api.types.is_object_dtype(t) or pd.api.types.is_string_dtype(t)
               or isinstance(t, pd.CategoricalDtype) for t in X.dtypes)


def log_encoded_columns(preprocessor: Any, user_names: Any) -> None:
    """Log, by the user's column names, which input columns the fitted ``preprocessor``
    one-hot encodes (the internal names are ``x0, x1, ...``)."""
    if not preprocessor.categorical_:
        return
    names = list(user_names) if user_names is not None else None
    def user(internal: str) -> str:
        return str(names[int(internal[1:])]) if names is not None else internal
    logger.info("text columns one-hot encoded: %s", [f"{user(c)} ({len(preprocessor.levels_[c])} levels)"
                                                     for c in preprocessor.categorical_])


def internal_names(p: int) -> list[str]:
    """Column names of an estimator's ``X`` inside its FairData (``x0 .. x{p-1}``; the user's
    names live in ``feature_names_in_``)."""
    return [f"x{j}" for j in range(p)]


def encoded_inputs(X: np.ndarray, preprocessor: Any) -> np.ndarray:
    """The model inputs of validated rows ``X`` (floats, or objects with text columns), by the
    fitted ``preprocessor``: numbers held as text converted as at fit
    (:func:`fairopt.data.assembly.coerce_inputs`), then standardised / one-hot encoded."""
    frame = pd.DataFrame(X, columns=internal_names(X.shape[1]))
    encoded, _ = preprocessor.transform(coerce_inputs(frame, list(frame.columns), [], [], preprocessor))
    return encoded


def held_out_rows(X: np.ndarray, target: np.ndarray, columns: dict, *, task: str, names: list, kinds: dict,
                  levels: dict, preprocessor: Any) -> Any:
    """A :class:`~fairopt.data.FairData` of new rows encoded like the training data: the
    training sensitive features ``names`` (all of them, with every training group present:
    ``levels``), their ``kinds`` and the fitted ``preprocessor``; ValueError otherwise."""
    if target.shape[0] != X.shape[0]:
        raise ValueError(f"y: {target.shape[0]} values for {X.shape[0]} rows of X")
    if sorted(columns) != sorted(names):
        raise ValueError(f"sensitive_features: expected the training features {names}, got {sorted(columns)}")
    columns = {name: columns[name] for name in names}
    data = FairData.from_arrays(X, target, columns, task=task, feature_names=internal_names(X.shape[1]),
                                sensitive_kinds=kinds, preprocessor=preprocessor)
    for name in names:
        if list(data.sensitive_levels[name]) != list(levels[name]):
            raise ValueError(f"sensitive_features: {name!r} has the groups {data.sensitive_levels[name]} on these "
                             f"rows but {levels[name]} in training; every training group must be present")
    return data
