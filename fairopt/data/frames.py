"""Checks and conversions of user tables (pandas DataFrames): column lists, finite values,
levels, and the one rule for numeric-string columns (:func:`coerce_numeric_columns`)."""

from __future__ import annotations

import difflib
import logging
import numbers
import re
from typing import Any, Iterable, Sequence

import numpy as np
import pandas as pd

__all__ = ["short_list", "close_names", "spaced_twins",
           "as_name_list", "check_frame", "check_columns_exist", "is_categorical_dtype",
           "require_finite_columns", "unique_levels", "level_codes", "as_number", "is_text_dtype",
           "coerce_numeric_columns", "text_column_looks_like", "looks_like_row_identifier"]

logger = logging.getLogger("fairopt.data")  # one logger for the whole data layer


_MAX_LISTED = 12  # how many column names / values an error message lists


# --------------------------------------------------------------------------------------
# small validation helpers
# --------------------------------------------------------------------------------------
def short_list(values: Sequence[Any]) -> str:
    """``values`` as a readable list, truncated after ``_MAX_LISTED`` items."""
    values = list(values)
    shown = ", ".join(repr(v) for v in values[:_MAX_LISTED])
    more = f", ... ({len(values) - _MAX_LISTED} more)" if len(values) > _MAX_LISTED else ""
    return f"[{shown}{more}]"


def spaced_twins(value: Any, candidates: Sequence[Any]) -> list[Any]:
    """The text ``candidates`` equal to ``value`` once the spaces around both are stripped (``' >50K'`` for
    ``'>50K'``): a file read with or without ``skipinitialspace`` spells its labels and levels so."""
    key = str(value).strip()
    return [c for c in candidates if isinstance(c, str) and c.strip() == key]


def close_names(name: str, candidates: Sequence[Any]) -> list[str]:
    """The ``candidates`` a mistyped ``name`` likely meant, for a "did you mean" hint: those equal to it once
    case and surrounding spaces are ignored (``'violentperpop'`` for ``'violentPerPop'``, ``'rentQrange'`` for
    ``'rentQrange '``) or, failing that, up to three :func:`difflib.get_close_matches` of it, compared the
    same way. Empty when nothing is close."""
    keys: dict[str, list[str]] = {}
    for candidate in candidates:
        keys.setdefault(str(candidate).strip().casefold(), []).append(str(candidate))
    key = str(name).strip().casefold()
    if key in keys:
        return keys[key]
    return [c for close in difflib.get_close_matches(key, list(keys), n=3, cutoff=0.6) for c in keys[close]]


def as_name_list(value: str | Iterable[str] | None, argument: str) -> list[str]:
    """A column-name argument as a list (a single string is one name); duplicates rejected."""
    if value is None:
        return []
    names = [value] if isinstance(value, str) else list(value)
    seen: set[Any] = set()
    duplicates = []
    for name in names:
        if name in seen:
            duplicates.append(name)
        seen.add(name)
    if duplicates:
        raise ValueError(f"{argument}: duplicate column names {short_list(duplicates)}")
    return names


def check_frame(df: Any, argument: str = "df") -> pd.DataFrame:
    """Require a non-empty DataFrame with unique column names."""
    if not isinstance(df, pd.DataFrame):
        raise ValueError(f"{argument}: expected a pandas DataFrame, got {type(df).__name__}")
    if len(df) == 0:
        raise ValueError(f"{argument}: the frame is empty (0 rows)")
    if df.columns.has_duplicates:
        duplicated = df.columns[df.columns.duplicated()].tolist()
        raise ValueError(f"{argument}: duplicate column names {short_list(duplicated)}")
    return df


def check_columns_exist(df: pd.DataFrame, names: Sequence[str], argument: str) -> None:
    """ValueError naming ``argument`` and the unknown names when a column is missing."""
    missing = [n for n in names if n not in df.columns]
    if missing:
        raise ValueError(
            f"{argument}: column(s) {short_list(missing)} not found in the frame; "
            f"available columns: {short_list(df.columns.tolist())}"
        )


def is_categorical_dtype(series: pd.Series) -> bool:
    """Object, string, category and bool columns are categorical; other numeric ones are not."""
    dtype = series.dtype
    return bool(pd.api.types.is_bool_dtype(dtype) or not pd.api.types.is_numeric_dtype(dtype))


def _nonfinite_mask(series: pd.Series, allow_missing: bool = False) -> np.ndarray:
    """Rows that are missing (NaN/None/NA; unless ``allow_missing``) or, for numeric columns, infinite."""
    if is_categorical_dtype(series):
        return np.zeros(len(series), dtype=bool) if allow_missing else series.isna().to_numpy()
    values = series.to_numpy(dtype=np.float64, na_value=np.nan)
    return np.isinf(values) if allow_missing else ~np.isfinite(values)


def require_finite_columns(df: pd.DataFrame, columns: Sequence[str], argument: str,
                           allow_missing: bool = False) -> None:
    """ValueError naming the column and the number of rows holding NaN/inf values (with
    ``allow_missing``: infinite values only, missing ones being allowed)."""
    for column in columns:
        bad = _nonfinite_mask(df[column], allow_missing)
        count = int(bad.sum())
        if count:
            first = df.index[np.flatnonzero(bad)[0]]
            first = first.item() if hasattr(first, "item") else first
            what = "infinite" if allow_missing else "NaN/inf/missing"
            advice = ("replace them (clip to a finite value, or mark them missing with NaN)" if allow_missing
                      else "drop or impute them")
            raise ValueError(
                f"{argument}: column {column!r} has {count} of {len(df)} rows with {what} "
                f"values (first at index {first!r}); {advice} before building FairData"
            )


def unique_levels(series: pd.Series) -> list[Any]:
    """Distinct values of a column in a deterministic order: a category dtype's order (values present), else
    sorted (mixed types by type name, then text).
    """
    present = series.dropna().unique()
    if isinstance(series.dtype, pd.CategoricalDtype):
        observed = set(present.tolist())
        return [c.item() if hasattr(c, "item") else c for c in series.dtype.categories if c in observed]
    levels = present.tolist()
    try:
        return sorted(levels)
    except TypeError:
        return sorted(levels, key=lambda v: (type(v).__name__, str(v)))


def level_codes(series: pd.Series, levels: Sequence[Any]) -> np.ndarray:
    """Code of each value in ``levels`` (int64), -1 where the value is not a level."""
    return pd.Index(list(levels)).get_indexer(series.to_numpy()).astype(np.int64)


# --------------------------------------------------------------------------------------
# numeric-looking text columns
# --------------------------------------------------------------------------------------
def as_number(value: Any) -> float | None:
    """``value`` as a float if it is a real number (not a bool) or a string ``float()`` accepts, else None."""
    if isinstance(value, (bool, np.bool_)):
        return None
    try:
        if isinstance(value, numbers.Real):
            return float(value)
        if isinstance(value, str):
            return float(value.strip())
    except (ValueError, OverflowError):  # OverflowError: an integer beyond the float range
        return None
    return None


def is_text_dtype(series: pd.Series) -> bool:
    """Object or pandas string columns: the ones :func:`coerce_numeric_columns` considers."""
    return bool(pd.api.types.is_object_dtype(series.dtype) or pd.api.types.is_string_dtype(series.dtype)) and \
        not isinstance(series.dtype, pd.CategoricalDtype)


def _numeric_version(series: pd.Series) -> pd.Series | None:
    """The float64 version of a text column whose non-missing values all parse as numbers, else None."""
    present = series[series.notna()]
    if present.empty:
        return None
    mapping: dict[Any, float] = {}
    for value in pd.unique(present.to_numpy(dtype=object)):
        number = as_number(value)
        if number is None:
            return None
        mapping[value] = number
    converted = np.full(len(series), np.nan)
    mask = series.notna().to_numpy()
    converted[mask] = [mapping[v] for v in present.to_numpy(dtype=object)]
    return pd.Series(converted, index=series.index, name=series.name)


#: A number written with a currency sign, thousands separators, a decimal comma or a percent sign
#: (``"$2,174"``, ``"52.300"``, ``"0,345"``, ``"12 %"``), which :func:`as_number` does not read.
_FORMATTED_NUMBER = re.compile(r"^\s*[-+(]?\s*[$€£¥]?\s*[-+]?\d[\d.,' ]*\s*%?\s*[$€£¥]?\)?\s*$")
#: A calendar date (``2021-03-04``, ``04/03/2021``, ``4.3.21``), optionally with a time.
_DATE = re.compile(r"^\s*\d{1,4}[-/.]\d{1,2}[-/.]\d{1,4}([ T]\d{1,2}:\d{2}(:\d{2}(\.\d+)?)?)?\s*$")


def text_column_looks_like(series: pd.Series) -> tuple[str, Any] | None:
    """``("numbers", example)`` when every present value of a text column is a number written with a
    currency sign, thousands separators, a decimal comma or a percent sign (one that :func:`as_number`
    does not read, so the column would be one-hot encoded), ``("dates", example)`` when every one is a
    calendar date, else None."""
    values = [v for v in pd.unique(series[series.notna()].to_numpy(dtype=object)) if isinstance(v, str)]
    if not values:
        return None
    unread = [v for v in values if as_number(v) is None]
    if unread and all(_DATE.match(v) for v in values):
        return "dates", unread[0]
    if unread and all(_FORMATTED_NUMBER.match(v) for v in values):
        return "numbers", unread[0]
    return None


#: A column name that says "identifier" or "row number": ``id``, ``customer_id``, ``ID``, ``index``,
#: ``Unnamed: 0`` (the index column pandas writes with ``to_csv``).
_IDENTIFIER_NAME = re.compile(r"^(.*[_\s.-])?(id|index|idx|key|row|rownum|row_number)$|^unnamed: ?\d+$",
                              re.IGNORECASE)
#: The fewest rows for which a column of distinct integers reads as an identifier.
_IDENTIFIER_MIN_ROWS = 100


def looks_like_row_identifier(series: pd.Series) -> bool:
    """Whether a numeric column holds a distinct whole number in every row of at least 100 rows, and
    either runs in order (a row number) or has a name that says identifier (``id``, ``customer_id``,
    ``index``, ``Unnamed: 0``): a model input that identifies rows rather than describing them."""
    if len(series) < _IDENTIFIER_MIN_ROWS or not pd.api.types.is_numeric_dtype(series.dtype) or \
            pd.api.types.is_bool_dtype(series.dtype) or isinstance(series.dtype, pd.CategoricalDtype):
        return False
    values = series.to_numpy()
    if values.dtype.kind == "f" and not (np.isfinite(values).all() and (values == np.round(values)).all()):
        return False
    if pd.unique(values).size != values.size:
        return False
    ordered = series.is_monotonic_increasing or series.is_monotonic_decreasing
    return bool(ordered or _IDENTIFIER_NAME.match(str(series.name).strip()))


def coerce_numeric_columns(
    frame: pd.DataFrame, columns: Sequence[Any] | None = None
) -> tuple[pd.DataFrame, list[Any]]:
    """Turn text columns that hold only numbers (e.g. ``"1.5"``, ``"3"``) into float columns.

    The one rule of every entry point that builds model inputs from a frame: an object or string column
    whose non-missing values all parse (:func:`as_number`) becomes float64 (missing values NaN); any other
    column is left as it is (``"1"`` next to ``"a"`` stays categorical). Conversions are logged.

    Parameters
    ----------
    frame : pandas.DataFrame
        Not modified.
    columns : sequence of column names, optional
        The columns to consider (default: all).

    Returns
    -------
    frame : pandas.DataFrame
        ``frame`` itself when nothing was converted, else a shallow copy.
    converted : list
        Names of the converted columns.
    """
    if not isinstance(frame, pd.DataFrame):
        raise ValueError(f"frame: expected a pandas DataFrame, got {type(frame).__name__}")
    names = frame.columns.tolist() if columns is None else list(columns)
    check_columns_exist(frame, names, "columns")
    replacements = {}
    for name in names:
        series = frame[name]
        if is_text_dtype(series):
            numeric = _numeric_version(series)
            if numeric is not None:
                replacements[name] = numeric
    if not replacements:
        return frame, []
    converted = list(replacements)
    texts = [name for name in converted if any(isinstance(v, str) for v in frame[name].dropna().head(1000))]
    if texts:  # not the numbers of an object array (a DataFrame with text columns passed through numpy)
        logger.info("columns holding only numbers as text converted to numeric: %s", short_list(texts))
    out = frame.copy(deep=False)
    for name, values in replacements.items():
        out[name] = values
    return out, converted
