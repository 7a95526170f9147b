"""Sensitive features in every accepted form, as one group code per row.

Shared by :func:`fairopt.group_report` and the scorers of :mod:`fairopt.metrics` (outside
:mod:`fairopt.report`, so a metric does not load the report and the models it reads).
``sensitive_features`` is a 1-D array, list, tensor or Series (one attribute), a 2-D array,
DataFrame or dict of 1-D arrays (several), or column name(s) of a DataFrame ``X``. Several
attributes give their occurring intersections, labelled ``"sex=Male|race=White"`` and sorted as
:func:`fairopt.measures.intersection_cells`; one attribute's groups are its sorted values.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from fairopt.inputs import check_missing, columns_of_x, names_columns_of_x, sensitive_columns
from fairopt.measures.group import encode_groups, python_scalar

logger = logging.getLogger(__name__)

__all__ = ["Groups", "sensitive_frame", "intersection_groups", "row_count"]


@dataclass(frozen=True)
class Groups:
    """Group coding of the rows.

    Attributes
    ----------
    codes : numpy.ndarray of int64, shape (n,)
        ``codes[i] = g`` when row ``i`` is in group ``labels[g]``.
    labels : list of str
        One label per group, in group order.
    names : list of str
        The sensitive attributes.
    values : pandas.DataFrame
        One row per group (index ``labels``), one column per attribute: the group's value.
    """

    codes: np.ndarray
    labels: list[str]
    names: list[str]
    values: pd.DataFrame

    @property
    def sizes(self) -> np.ndarray:
        """Rows per group, ``n_g``."""
        return np.bincount(self.codes, minlength=len(self.labels))

    @property
    def name(self) -> str:
        """The attribute names joined by ``"|"`` (the index name of per-group tables)."""
        return "|".join(self.names)


def row_count(x: Any) -> int:
    """Number of rows of an array-like, a DataFrame or a tensor."""
    shape = getattr(x, "shape", None)
    if shape is not None and len(shape) > 0:
        return int(shape[0])
    return len(x)


def sensitive_frame(sensitive_features: Any, n_rows: int, X: Any = None) -> pd.DataFrame:
    """The sensitive attributes as a DataFrame (one column each, ``n_rows`` rows), checked.

    Parameters
    ----------
    sensitive_features : see the module docstring
    n_rows : int
        Rows of ``X`` (and ``y``).
    X : pandas.DataFrame, optional
        Looked up when ``sensitive_features`` are column names.

    Raises
    ------
    ValueError
        An unknown column name, another length, missing values, a category without rows, or no
        attribute at all.
    """
    if sensitive_features is None:
        raise ValueError("sensitive_features: required (an array, a DataFrame or column name(s) of X)")
    if names_columns_of_x(sensitive_features, X):
        names = [sensitive_features] if isinstance(sensitive_features, str) else list(sensitive_features)
        frame = columns_of_x(names, X)
    else:
        if isinstance(sensitive_features, pd.DataFrame) and sensitive_features.shape[1] == 0:
            raise ValueError("sensitive_features: the DataFrame has no column")
        given = row_count(sensitive_features) if not isinstance(sensitive_features, dict) else None
        if given is not None and given != n_rows:
            raise ValueError(f"length mismatch: sensitive_features has {given} rows, X and y have {n_rows}")
        try:
            columns = sensitive_columns(sensitive_features, n_rows)
        except ValueError as exc:
            raise ValueError(f"length mismatch: {exc}") if "expected (" in str(exc) else exc from None
        categorical = {}
        if isinstance(sensitive_features, (pd.DataFrame, pd.Series)):  # keep the categories of categoricals
            source = sensitive_features.to_frame() if isinstance(sensitive_features, pd.Series) else sensitive_features
            categorical = {str(c): source[c] for c in source.columns if isinstance(source[c].dtype, pd.CategoricalDtype)}
        frame = pd.DataFrame({name: categorical[name].to_numpy() if name in categorical else values
                              for name, values in columns.items()})
        for name, series in categorical.items():
            frame[name] = pd.Categorical(series.to_numpy(), categories=series.cat.categories)
    frame.index = pd.RangeIndex(n_rows)
    _check_values(frame)
    return frame


def _check_values(frame: pd.DataFrame) -> None:
    """No missing value in any column; a category without rows (a code list's unused level) is dropped, with a
    logged warning, as the estimators drop it: a group of 0 rows has no rate to report."""
    check_missing({name: frame[name] for name in frame.columns})
    for name in frame.columns:
        column = frame[name]
        if isinstance(column.dtype, pd.CategoricalDtype):
            empty = [python_scalar(c) for c in column.cat.categories if not (column == c).any()]
            if empty:
                logger.warning("sensitive_features: group(s) %s of %r have 0 rows (unused categories): left out",
                               empty, name)
                frame[name] = column.cat.remove_unused_categories()


def _label(value: Any) -> str:
    """A group value as text (numpy scalars as Python scalars: ``1`` not ``np.int64(1)``)."""
    return str(python_scalar(value))


def intersection_groups(sensitive_features: Any, n_rows: int, X: Any = None) -> Groups:
    """The groups of the rows: one per value of one attribute, one per occurring combination of several
    (parameters and errors as :func:`sensitive_frame`).
    """
    frame = sensitive_frame(sensitive_features, n_rows, X)
    names = [str(c) for c in frame.columns]
    encoded = []
    for name in frame.columns:
        column = frame[name]
        values = column.astype(object).to_numpy() if isinstance(column.dtype, pd.CategoricalDtype) else column.to_numpy()
        encoded.append(encode_groups(values, f"sensitive_features[{name!r}]"))
    if len(encoded) == 1:
        codes, levels = encoded[0]
        labels = [_label(v) for v in levels]
        values = pd.DataFrame({names[0]: list(levels)}, index=labels)
    else:
        key = np.zeros(n_rows, dtype=np.int64)
        for codes_k, levels_k in encoded:  # mixed radix: lexicographic in the per-attribute codes
            key = key * len(levels_k) + codes_k
        cells, first, codes = np.unique(key, return_index=True, return_inverse=True)
        per_attribute = [levels_k[codes_k[first]] for codes_k, levels_k in encoded]
        labels = ["|".join(f"{name}={_label(v[g])}" for name, v in zip(names, per_attribute)) for g in range(cells.size)]
        values = pd.DataFrame({name: list(v) for name, v in zip(names, per_attribute)}, index=labels)
    values.index.name = "|".join(names)
    return Groups(codes=np.asarray(codes, dtype=np.int64).reshape(-1), labels=labels, names=names, values=values)
