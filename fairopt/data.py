"""Tabular data for fair learning: the :class:`Preprocessor` and the :class:`FairData` container.

A :class:`FairData` holds everything an engine, a constraint or a measure needs about a set
of rows (the data contract every engine, constraint and measure relies on):

* ``X`` (n, p) float32 model inputs, produced by a fitted :class:`Preprocessor`
  (numeric columns standardised with training mean and standard deviation, categorical
  columns one-hot encoded with the levels seen in training);
* ``y`` (n,) float32 target (0/1 for ``task="binary"``, counts for ``task="poisson"``);
* ``sensitive``: one tensor per sensitive feature, typed by ``sensitive_kinds``
  (binary float32 0/1, categorical int64 codes, continuous float32 raw values);
* ``cells``: the intersection cell of the binary/categorical sensitive features, a
  compact mixed-radix code (:func:`intersection_cells`);
* ``exposure`` (n,) float32 or ``None`` (Poisson offset ``log(exposure)``).

Sensitive features travel with the rows: :meth:`FairData.subset` indexes every tensor with
the same index (a mini-batch is a subset), so constraints never need globals.
"""

from __future__ import annotations

import logging
import math
import numbers
from typing import Any, Iterable, Mapping, Sequence

import numpy as np
import pandas as pd
import torch

from fairopt._validation import check_same_length, check_seed, to_numpy

__all__ = [
    "Preprocessor", "FairData", "coerce_numeric_columns", "intersection_cells", "stratified_split_indices",
    "TASKS", "SENSITIVE_KINDS",
]

logger = logging.getLogger(__name__)

TASKS: tuple[str, ...] = ("binary", "regression", "poisson")
SENSITIVE_KINDS: tuple[str, ...] = ("binary", "categorical", "continuous")

_MAX_LISTED = 12  # how many column names / values an error message lists


# --------------------------------------------------------------------------------------
# small validation helpers
# --------------------------------------------------------------------------------------
def _short_list(values: Sequence[Any]) -> str:
    """``values`` as a readable list, truncated after ``_MAX_LISTED`` items."""
    values = list(values)
    shown = ", ".join(repr(v) for v in values[:_MAX_LISTED])
    more = f", ... ({len(values) - _MAX_LISTED} more)" if len(values) > _MAX_LISTED else ""
    return f"[{shown}{more}]"


def _as_name_list(value: str | Iterable[str] | None, argument: str) -> list[str]:
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
        raise ValueError(f"{argument}: duplicate column names {_short_list(duplicates)}")
    return names


def _check_frame(df: Any, argument: str = "df") -> pd.DataFrame:
    """Require a non-empty DataFrame with unique column names."""
    if not isinstance(df, pd.DataFrame):
        raise ValueError(f"{argument}: expected a pandas DataFrame, got {type(df).__name__}")
    if len(df) == 0:
        raise ValueError(f"{argument}: the frame is empty (0 rows)")
    if df.columns.has_duplicates:
        duplicated = df.columns[df.columns.duplicated()].tolist()
        raise ValueError(f"{argument}: duplicate column names {_short_list(duplicated)}")
    return df


def _check_columns_exist(df: pd.DataFrame, names: Sequence[str], argument: str) -> None:
    """ValueError naming ``argument`` and the unknown names when a column is missing."""
    missing = [n for n in names if n not in df.columns]
    if missing:
        raise ValueError(
            f"{argument}: column(s) {_short_list(missing)} not found in the frame; "
            f"available columns: {_short_list(df.columns.tolist())}"
        )


def _is_categorical_dtype(series: pd.Series) -> bool:
    """Object, string, category and bool columns are categorical; other numeric ones are not."""
    dtype = series.dtype
    return bool(pd.api.types.is_bool_dtype(dtype) or not pd.api.types.is_numeric_dtype(dtype))


def _nonfinite_mask(series: pd.Series) -> np.ndarray:
    """Rows that are missing (NaN/None/NA) or, for numeric columns, infinite."""
    if _is_categorical_dtype(series):
        return series.isna().to_numpy()
    values = series.to_numpy(dtype=np.float64, na_value=np.nan)
    return ~np.isfinite(values)


def _require_finite(df: pd.DataFrame, columns: Sequence[str], argument: str) -> None:
    """ValueError naming the column and the number of rows holding NaN/inf values."""
    for column in columns:
        bad = _nonfinite_mask(df[column])
        count = int(bad.sum())
        if count:
            first = df.index[np.flatnonzero(bad)[0]]
            first = first.item() if hasattr(first, "item") else first
            raise ValueError(
                f"{argument}: column {column!r} has {count} of {len(df)} rows with NaN/inf/missing "
                f"values (first at index {first!r}); drop or impute them before building FairData"
            )


def _unique_levels(series: pd.Series) -> list[Any]:
    """Distinct values of a column as Python objects, in a deterministic order.

    Category columns keep their category order (restricted to the values present); all
    other columns are sorted (numbers numerically, strings lexicographically; mixed types
    by type name, then text).
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


def _level_codes(series: pd.Series, levels: Sequence[Any]) -> np.ndarray:
    """Code of each value in ``levels`` (int64), -1 where the value is not a level."""
    return pd.Index(list(levels)).get_indexer(series.to_numpy()).astype(np.int64)


# --------------------------------------------------------------------------------------
# numeric-looking text columns
# --------------------------------------------------------------------------------------
def _as_number(value: Any) -> float | None:
    """``value`` as a float if it is a real number (not a bool) or a string spelling one
    (``float(value.strip())`` accepts it), else None."""
    if isinstance(value, (bool, np.bool_)):
        return None
    if isinstance(value, numbers.Real):
        return float(value)
    if isinstance(value, str):
        try:
            return float(value.strip())
        except ValueError:
            return None
    return None


def _is_text_dtype(series: pd.Series) -> bool:
    """Object or pandas string columns: the ones :func:`coerce_numeric_columns` considers."""
    return bool(pd.api.types.is_object_dtype(series.dtype) or pd.api.types.is_string_dtype(series.dtype)) and \
        not isinstance(series.dtype, pd.CategoricalDtype)


def _numeric_version(series: pd.Series) -> pd.Series | None:
    """The float64 version of a text column whose non-missing values all parse as numbers
    (missing values stay NaN); None if a value does not parse or none is present."""
    present = series[series.notna()]
    if present.empty:
        return None
    mapping: dict[Any, float] = {}
    for value in pd.unique(present.to_numpy(dtype=object)):
        number = _as_number(value)
        if number is None:
            return None
        mapping[value] = number
    converted = np.full(len(series), np.nan)
    mask = series.notna().to_numpy()
    converted[mask] = [mapping[v] for v in present.to_numpy(dtype=object)]
    return pd.Series(converted, index=series.index, name=series.name)


def coerce_numeric_columns(
    frame: pd.DataFrame, columns: Sequence[Any] | None = None
) -> tuple[pd.DataFrame, list[Any]]:
    """Turn text columns that hold only numbers (e.g. ``"1.5"``, ``"3"``) into float columns.

    The rule, shared by every fairopt entry point that builds model inputs from a frame
    (:meth:`FairData.from_frame`, :meth:`FairData.from_arrays`): an object or string
    column whose non-missing values ALL parse as numbers (Python/numpy numbers other than
    bools, or strings ``float()`` accepts after stripping blanks) becomes float64, missing
    values becoming NaN. Any other column is left as it is: text columns with at least one
    non-number (``"1"`` next to ``"a"``) stay categorical (one-hot encoded), as do category
    and bool columns and columns holding only missing values. Conversions are logged (INFO,
    this module's logger) with the column names.

    Parameters
    ----------
    frame : pandas.DataFrame
        Not modified.
    columns : sequence of column names, optional
        The columns to consider (default: all).

    Returns
    -------
    frame : pandas.DataFrame
        ``frame`` itself when nothing was converted, else a shallow copy with the converted
        columns replaced.
    converted : list
        Names of the converted columns, in the order of ``columns``.

    Raises
    ------
    ValueError
        ``frame`` is not a DataFrame, or a name in ``columns`` is not one of its columns.
    """
    if not isinstance(frame, pd.DataFrame):
        raise ValueError(f"frame: expected a pandas DataFrame, got {type(frame).__name__}")
    names = frame.columns.tolist() if columns is None else list(columns)
    _check_columns_exist(frame, names, "columns")
    replacements = {}
    for name in names:
        series = frame[name]
        if _is_text_dtype(series):
            numeric = _numeric_version(series)
            if numeric is not None:
                replacements[name] = numeric
    if not replacements:
        return frame, []
    converted = list(replacements)
    logger.info("columns holding only numbers as text converted to numeric: %s", _short_list(converted))
    out = frame.copy(deep=False)
    for name, values in replacements.items():
        out[name] = values
    return out, converted


# --------------------------------------------------------------------------------------
# Preprocessor
# --------------------------------------------------------------------------------------
class Preprocessor:
    r"""Turn a DataFrame into a float32 design matrix with statistics learned on training rows.

    Numeric columns are standardised, :math:`z = (x - \mu_{train}) / \sigma_{train}` with the
    population standard deviation (``ddof=0``); a constant column gets
    :math:`\sigma = 1` (it becomes all zeros). Categorical columns are one-hot encoded with
    one indicator per level seen at :meth:`fit` (levels sorted; category dtype keeps its
    order). A level not seen at fit time is encoded as an all-zero one-hot row and logged
    at WARNING level. Output columns follow the order of ``columns``; a categorical column
    expands in place into ``"column=level"`` indicators.

    Parameters
    ----------
    columns : list of str, optional
        Input columns. ``None``: every column of the frame passed to :meth:`fit`.
    categorical : list of str, optional
        Columns to one-hot encode in addition to the non-numeric ones (object, string,
        category and bool columns are always categorical). Use it for integer-coded
        nominal variables.
    standardize : bool, default True
        If False, numeric columns are passed through unchanged.

    Attributes (after fit)
    ----------------------
    columns_, categorical_, numeric_ : list of str
    means_, scales_ : dict column -> float (numeric columns)
    levels_ : dict column -> list of levels (categorical columns)
    feature_names_ : list of str
    """

    def __init__(
        self,
        columns: Sequence[str] | None = None,
        categorical: Sequence[str] | None = None,
        standardize: bool = True,
    ) -> None:
        self.columns = None if columns is None else _as_name_list(columns, "columns")
        self.categorical = None if categorical is None else _as_name_list(categorical, "categorical")
        self.standardize = bool(standardize)
        self.columns_: list[str] = []
        self.categorical_: list[str] = []
        self.numeric_: list[str] = []
        self.means_: dict[str, float] = {}
        self.scales_: dict[str, float] = {}
        self.levels_: dict[str, list[Any]] = {}
        self.feature_names_: list[str] = []
        self._fitted = False

    # -- fitting -----------------------------------------------------------------------
    @property
    def is_fitted(self) -> bool:
        """Whether :meth:`fit` has been called."""
        return self._fitted

    @property
    def n_features(self) -> int:
        """Number of output columns (after fit)."""
        self._check_fitted()
        return len(self.feature_names_)

    def fit(self, df: pd.DataFrame) -> "Preprocessor":
        """Learn column roles, means/scales and one-hot levels from the training frame ``df``."""
        _check_frame(df, "df")
        columns = df.columns.tolist() if self.columns is None else list(self.columns)
        _check_columns_exist(df, columns, "columns")
        declared = set(self.categorical or [])
        unknown = [c for c in declared if c not in columns]
        if unknown:
            raise ValueError(f"categorical: column(s) {_short_list(unknown)} are not among the input "
                             f"columns {_short_list(columns)}")
        _require_finite(df, columns, "df")
        self.columns_ = columns
        self.categorical_ = [c for c in columns if c in declared or _is_categorical_dtype(df[c])]
        categorical = set(self.categorical_)
        self.numeric_ = [c for c in columns if c not in categorical]
        self.means_, self.scales_ = self._numeric_statistics(df)
        self.levels_ = {c: _unique_levels(df[c]) for c in self.categorical_}
        self.feature_names_ = [
            name
            for c in columns
            for name in ([f"{c}={level}" for level in self.levels_[c]] if c in categorical else [c])
        ]
        self._fitted = True
        logger.debug("Preprocessor fitted: %d numeric, %d categorical columns -> %d features",
                     len(self.numeric_), len(self.categorical_), len(self.feature_names_))
        return self

    def _numeric_statistics(self, df: pd.DataFrame) -> tuple[dict[str, float], dict[str, float]]:
        """Training mean and scale (population std; 1 for constant columns or no standardising)."""
        if not self.numeric_:
            return {}, {}
        values = df[self.numeric_].to_numpy(dtype=np.float64)
        if not self.standardize:
            ones = [1.0] * len(self.numeric_)
            return dict(zip(self.numeric_, [0.0] * len(self.numeric_))), dict(zip(self.numeric_, ones))
        means = values.mean(axis=0)
        scales = values.std(axis=0)
        constant = (values == values[0]).all(axis=0)
        means[constant] = values[0, constant]  # exact: a constant column maps to 0
        scales[constant] = 1.0
        return dict(zip(self.numeric_, means.tolist())), dict(zip(self.numeric_, scales.tolist()))

    # -- transforming --------------------------------------------------------------------
    def _check_fitted(self) -> None:
        if not self._fitted:
            raise ValueError("preprocessor: not fitted; call fit(df) first (or use fit_transform)")

    def transform(self, df: pd.DataFrame) -> tuple[np.ndarray, list[str]]:
        """Encode ``df`` with the fitted statistics.

        Returns
        -------
        X : np.ndarray, float32, shape (len(df), n_features)
        feature_names : list of str
        """
        self._check_fitted()
        _check_frame(df, "df")
        _check_columns_exist(df, self.columns_, "df")
        _require_finite(df, self.columns_, "df")
        out = np.zeros((len(df), len(self.feature_names_)), dtype=np.float32)
        offset = 0
        numeric_positions: list[int] = []
        for column in self.columns_:
            if column in self.levels_:
                self._one_hot_into(out, offset, column, df[column])
                offset += len(self.levels_[column])
            else:
                numeric_positions.append(offset)
                offset += 1
        if numeric_positions:
            values = df[self.numeric_].to_numpy(dtype=np.float64)
            means = np.array([self.means_[c] for c in self.numeric_])
            scales = np.array([self.scales_[c] for c in self.numeric_])
            out[:, numeric_positions] = (values - means) / scales
        return out, list(self.feature_names_)

    def _one_hot_into(self, out: np.ndarray, offset: int, column: str, series: pd.Series) -> None:
        """Write the indicators of ``column`` into ``out[:, offset:offset+K]`` (zeros if unseen)."""
        codes = _level_codes(series, self.levels_[column])
        seen = codes >= 0
        rows = np.flatnonzero(seen)
        out[rows, offset + codes[seen]] = 1.0
        n_unseen = int((~seen).sum())
        if n_unseen:
            examples = pd.unique(series[~seen].to_numpy())[:5].tolist()
            logger.warning(
                "column %r: %d rows have levels not seen at fit time (e.g. %s); they get an all-zero one-hot row",
                column, n_unseen, examples,
            )

    def fit_transform(self, df: pd.DataFrame) -> tuple[np.ndarray, list[str]]:
        """:meth:`fit` on ``df``, then :meth:`transform` it."""
        return self.fit(df).transform(df)

    def clone(self) -> "Preprocessor":
        """An unfitted copy with the same configuration (the fitted column roles if fitted)."""
        if self._fitted:
            return Preprocessor(self.columns_, self.categorical_, self.standardize)
        return Preprocessor(self.columns, self.categorical, self.standardize)

    def __repr__(self) -> str:
        if not self._fitted:
            return (f"Preprocessor(columns={self.columns!r}, categorical={self.categorical!r}, "
                    f"standardize={self.standardize})")
        return (f"Preprocessor(fitted: {len(self.numeric_)} numeric, {len(self.categorical_)} categorical "
                f"-> {len(self.feature_names_)} features)")


# --------------------------------------------------------------------------------------
# target, exposure and sensitive encodings
# --------------------------------------------------------------------------------------
def _require_numeric(series: pd.Series, argument: str, purpose: str) -> np.ndarray:
    """Float64 values of a numeric (or bool) column; ValueError for text columns."""
    if not (pd.api.types.is_numeric_dtype(series.dtype) or pd.api.types.is_bool_dtype(series.dtype)):
        examples = _short_list(pd.unique(series.to_numpy())[:5].tolist())
        raise ValueError(f"{argument}: column {series.name!r} must be numeric {purpose}; "
                         f"got dtype {series.dtype} with values like {examples}")
    return series.to_numpy(dtype=np.float64)


def _encode_target(series: pd.Series, task: str) -> torch.Tensor:
    """The target as float32, checked against the task.

    binary: values in {0, 1} (bool accepted); poisson: non-negative integers;
    regression: any finite number.
    """
    values = _require_numeric(series, "target", f"for task={task!r}")
    if task == "binary":
        bad = ~np.isin(values, (0.0, 1.0))
        if bad.any():
            examples = _short_list(pd.unique(values[bad])[:5].tolist())
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


def _encode_exposure(series: pd.Series) -> torch.Tensor:
    """Exposure (time at risk) as float32; every value must be > 0."""
    values = _require_numeric(series, "exposure", "(time at risk)")
    bad = values <= 0
    if bad.any():
        raise ValueError(f"exposure: column {series.name!r} has {int(bad.sum())} non-positive values "
                         f"(e.g. {values[bad][0].item()!r}); exposure must be > 0")
    return torch.from_numpy(values.astype(np.float32))


def _infer_sensitive_kind(series: pd.Series, declared_categorical: bool) -> str:
    """binary if 2 distinct values; continuous if numeric with more (unless declared
    categorical); categorical otherwise."""
    n_distinct = series.nunique(dropna=True)
    if n_distinct == 2:
        return "binary"
    if not _is_categorical_dtype(series) and not declared_categorical:
        return "continuous"
    return "categorical"


def _is_zero_one(series: pd.Series) -> bool:
    """A numeric (non-bool) column whose values are all in {0, 1}."""
    if _is_categorical_dtype(series):
        return False
    return bool(np.isin(series.to_numpy(dtype=np.float64), (0.0, 1.0)).all())


def _sensitive_levels(series: pd.Series, kind: str) -> list[Any]:
    """Level label per code: numeric {0,1} binary -> [0, 1]; otherwise the sorted levels."""
    if kind == "continuous":
        return []
    if kind == "binary" and _is_zero_one(series):
        return [0, 1]
    return _unique_levels(series)


def _encode_sensitive(
    series: pd.Series,
    kind: str | None,
    declared_categorical: bool,
    levels: list[Any] | None = None,
) -> tuple[torch.Tensor, str, list[Any], np.ndarray | None]:
    """Encode one sensitive column.

    Parameters
    ----------
    series : the raw column.
    kind : declared kind, or None to infer (:func:`_infer_sensitive_kind`).
    declared_categorical : whether the user listed the column in ``categorical``.
    levels : reference levels (encoding new rows like an existing FairData); ``None`` to
        learn them from ``series``, in which case at least 2 groups are required.

    Returns
    -------
    tensor : binary float32 0/1, categorical int64 codes, continuous float32 raw values.
    kind, levels : the resolved kind and level labels.
    codes : int64 codes for binary/categorical features (None for continuous).
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
                f"sensitive: column {name!r} has only {len(levels)} group(s) {_short_list(levels)}; "
                "a sensitive feature needs at least 2 non-empty groups"
            )
        if kind == "binary" and len(levels) != 2:
            raise ValueError(f"sensitive_kinds: column {name!r} declared 'binary' but has {len(levels)} "
                             f"levels {_short_list(levels)}")
    codes = _level_codes(series, levels)
    unknown = codes < 0
    if unknown.any():
        examples = _short_list(pd.unique(series[unknown].to_numpy())[:5].tolist())
        raise ValueError(f"sensitive: column {name!r} has values {examples} that are not among the "
                         f"reference levels {_short_list(levels)}")
    tensor = torch.from_numpy(codes.astype(np.float32)) if kind == "binary" else torch.from_numpy(codes)
    return tensor, kind, list(levels), codes


def intersection_cells(
    codes: Sequence[np.ndarray],
    radices: Sequence[int],
    n_rows: int,
    reference_keys: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    r"""Intersection cell ids of discrete sensitive features.

    Each row gets the mixed-radix key :math:`k = \sum_j c_j \prod_{l > j} K_l` of its codes
    :math:`c_j \in \{0..K_j-1\}` (features in order); keys are then compacted to ids
    ``0..n_cells-1`` in increasing key order over the combinations present. With no
    discrete feature every row is in cell 0.

    Parameters
    ----------
    codes : one int64 code array (n,) per binary/categorical sensitive feature.
    radices : number of levels :math:`K_j` of each feature.
    n_rows : number of rows (needed when there is no discrete feature).
    reference_keys : keys of an existing encoding, in id order. Keys found there keep their
        id; new combinations get ids appended after them (logged).

    Returns
    -------
    cells : int64 (n,) cell ids.
    keys : int64 (n_cells,) the mixed-radix key of each cell id.
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


def _decode_cell_keys(keys: np.ndarray, radices: Sequence[int], levels: Sequence[list[Any]]) -> list[tuple]:
    """Level labels (one per discrete feature) of each mixed-radix cell key."""
    labels = []
    for key in keys.tolist():
        digits = []
        for radix in reversed(radices):
            key, digit = divmod(key, int(radix))
            digits.append(digit)
        labels.append(tuple(level[d] for level, d in zip(levels, reversed(digits))))
    return labels


# --------------------------------------------------------------------------------------
# splitting
# --------------------------------------------------------------------------------------
def _check_test_size(test_size: Any) -> float:
    """``test_size`` must be a number strictly between 0 and 1."""
    if isinstance(test_size, bool) or not isinstance(test_size, (int, float, np.integer, np.floating)):
        raise ValueError(f"test_size: expected a fraction in (0, 1), got {test_size!r}")
    value = float(test_size)
    if not 0.0 < value < 1.0:
        raise ValueError(f"test_size: expected a fraction in (0, 1), got {test_size!r}")
    return value


def stratified_split_indices(strata: np.ndarray, test_size: float, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    r"""Deterministic stratified train/test row indices.

    The test part has :math:`n_{test} = \lceil \text{test\_size} \cdot n \rceil` rows (the
    scikit-learn convention). Stratum :math:`s` with :math:`n_s` rows contributes
    :math:`\lfloor n_{test} n_s / n \rfloor` test rows plus one for the strata with the
    largest fractional remainders until the total is :math:`n_{test}` (largest-remainder
    apportionment), so every stratum's test share is within one row of proportional. The
    rows chosen inside each stratum come from one permutation drawn with
    ``numpy.random.default_rng(seed)``.

    Returns
    -------
    train, test : sorted int64 index arrays; disjoint, covering ``0..n-1``.
    """
    test_size = _check_test_size(test_size)
    seed = check_seed(seed, allow_none=False)
    strata = np.asarray(strata)
    n = len(strata)
    n_test = math.ceil(test_size * n - 1e-9)
    if n_test < 1 or n_test >= n:
        raise ValueError(f"test_size: {test_size!r} of {n} rows leaves an empty train or test part")
    _, stratum, counts = np.unique(strata, return_inverse=True, return_counts=True)
    stratum = stratum.reshape(-1)
    exact = counts * (n_test / n)
    quota = np.floor(exact).astype(np.int64)
    remaining = n_test - int(quota.sum())
    if remaining > 0:
        by_remainder = np.argsort(-(exact - quota), kind="stable")
        quota[by_remainder[:remaining]] += 1
    rng = np.random.default_rng(seed)
    permutation = rng.permutation(n)
    order = permutation[np.argsort(stratum[permutation], kind="stable")]
    ordered_stratum = stratum[order]
    starts = np.concatenate([[0], np.cumsum(counts)[:-1]])
    rank = np.arange(n) - starts[ordered_stratum]
    is_test = rank < quota[ordered_stratum]
    return np.sort(order[~is_test]), np.sort(order[is_test])


# --------------------------------------------------------------------------------------
# FairData
# --------------------------------------------------------------------------------------
class FairData:
    """Rows for fair learning: inputs, target, typed sensitive features, cells, exposure.

    Build it with :meth:`from_frame` (a DataFrame) or :meth:`from_arrays` (numpy/torch
    arrays); the constructor only checks the contract. See the module docstring for
    the fields.

    Attributes
    ----------
    X : torch.Tensor, float32 (n, p)
    y : torch.Tensor, float32 (n,)
    task : {"binary", "regression", "poisson"}
    sensitive : dict name -> tensor (binary float32 0/1, categorical int64 codes,
        continuous float32 raw values)
    sensitive_kinds : dict name -> kind; sensitive_levels : dict name -> level labels
        (binary: [label of 0, label of 1]; continuous: [])
    sensitive_names : list of the sensitive feature names, in order
    cells : torch.Tensor, int64 (n,); n_cells : int; cell_levels : list of tuples, the
        level labels of each cell (one per binary/categorical feature, in order)
    exposure : torch.Tensor, float32 (n,) or None; exposure_name : its column
    feature_names : list of str (columns of X); feature_columns : raw columns feeding X
    preprocessor : the fitted :class:`Preprocessor` that produced X
    target_name : str; include_sensitive : bool
    frame : the raw rows (pandas DataFrame), indexed lazily
    """

    def __init__(
        self,
        X: torch.Tensor,
        y: torch.Tensor,
        task: str,
        sensitive: Mapping[str, torch.Tensor],
        sensitive_kinds: Mapping[str, str],
        sensitive_levels: Mapping[str, list],
        cells: torch.Tensor,
        n_cells: int,
        exposure: torch.Tensor | None = None,
        feature_names: Sequence[str] | None = None,
        *,
        preprocessor: Preprocessor | None = None,
        target_name: str = "y",
        include_sensitive: bool = True,
        cell_levels: Sequence[tuple] | None = None,
        exposure_name: str | None = None,
        feature_columns: Sequence[str] | None = None,
        frame: pd.DataFrame | None = None,
        cell_keys: np.ndarray | None = None,
    ) -> None:
        self.X = X
        self.y = y
        self.task = task
        self.sensitive = dict(sensitive)
        self.sensitive_names = list(sensitive)
        self.sensitive_kinds = dict(sensitive_kinds)
        self.sensitive_levels = {k: list(v) for k, v in sensitive_levels.items()}
        self.cells = cells
        self.n_cells = int(n_cells)
        self.exposure = exposure
        self.feature_names = list(feature_names) if feature_names is not None else [f"x{j}" for j in range(X.shape[1])]
        self.preprocessor = preprocessor
        self.target_name = target_name
        self.include_sensitive = bool(include_sensitive)
        self.cell_levels = list(cell_levels) if cell_levels is not None else [()] * self.n_cells
        self.exposure_name = exposure_name
        self.feature_columns = list(feature_columns) if feature_columns is not None else list(self.feature_names)
        self._source = frame
        self._rows = torch.arange(X.shape[0])  # positions in ``frame``; composed by subset()
        self._frame_cache = frame
        self._cell_keys = cell_keys
        self._check_contract()

    def _check_contract(self) -> None:
        """Shapes and dtypes of the shared data contract."""
        n = self.X.shape[0] if self.X.dim() == 2 else -1
        if self.X.dim() != 2 or self.X.dtype != torch.float32:
            raise ValueError(f"X: expected a float32 tensor (n, p), got {self.X.dtype} of shape {tuple(self.X.shape)}")
        if self.task not in TASKS:
            raise ValueError(f"task: expected one of {TASKS}, got {self.task!r}")
        if self.y.shape != (n,) or self.y.dtype != torch.float32:
            raise ValueError(f"y: expected a float32 tensor of shape ({n},), got {self.y.dtype} {tuple(self.y.shape)}")
        if self.cells.shape != (n,) or self.cells.dtype != torch.int64:
            raise ValueError(f"cells: expected an int64 tensor of shape ({n},), "
                             f"got {self.cells.dtype} {tuple(self.cells.shape)}")
        if self.exposure is not None and self.exposure.shape != (n,):
            raise ValueError(f"exposure: expected shape ({n},), got {tuple(self.exposure.shape)}")
        if len(self.feature_names) != self.X.shape[1]:
            raise ValueError(f"feature_names: {len(self.feature_names)} names for {self.X.shape[1]} columns of X")
        expected_dtype = {"binary": torch.float32, "categorical": torch.int64, "continuous": torch.float32}
        for name, tensor in self.sensitive.items():
            kind = self.sensitive_kinds.get(name)
            if kind not in expected_dtype:
                raise ValueError(f"sensitive_kinds: {name!r} has kind {kind!r}; expected one of {SENSITIVE_KINDS}")
            if tensor.shape != (n,) or tensor.dtype != expected_dtype[kind]:
                raise ValueError(f"sensitive: {name!r} ({kind}) must be {expected_dtype[kind]} of shape ({n},), "
                                 f"got {tensor.dtype} {tuple(tensor.shape)}")

    # -- construction ----------------------------------------------------------------------
    @classmethod
    def from_frame(
        cls,
        df: pd.DataFrame,
        target: str,
        sensitive: str | Sequence[str],
        features: Sequence[str] | None = None,
        categorical: Sequence[str] | None = None,
        task: str = "binary",
        exposure: str | None = None,
        sensitive_kinds: Mapping[str, str] | None = None,
        include_sensitive: bool = True,
        preprocessor: Preprocessor | None = None,
    ) -> "FairData":
        """Build a :class:`FairData` from a DataFrame.

        Parameters
        ----------
        df : pandas.DataFrame
            The raw rows (kept, unmodified, as :attr:`frame`).
        target : str
            Target column. ``task="binary"``: values 0/1 (bool accepted);
            ``"poisson"``: non-negative integer counts; ``"regression"``: numbers.
        sensitive : str or list of str
            Sensitive columns, in order (the order of :attr:`cells`' mixed radix).
        features : list of str, optional
            Input columns. ``None``: every column except the target and the exposure.
            Sensitive columns are added when ``include_sensitive`` and removed otherwise.
        categorical : list of str, optional
            Columns to treat as categorical (one-hot in X; a numeric sensitive column listed
            here is inferred ``"categorical"`` instead of ``"continuous"``). Object, string,
            category and bool columns are always categorical.
        task : {"binary", "regression", "poisson"}
        exposure : str, optional
            Exposure column (time at risk, > 0), never an input.
        sensitive_kinds : dict name -> {"binary", "categorical", "continuous"}, optional
            Declared kinds; the others are inferred: 2 distinct values -> binary
            (numeric {0,1} kept, other levels coded in sorted order, 0 for the first);
            numeric with more values -> continuous; otherwise categorical.
        include_sensitive : bool, default True
            Whether the sensitive columns are model inputs (part of X).
        preprocessor : Preprocessor, optional
            A fitted preprocessor encodes X as it is (e.g. test data with the training
            statistics); an unfitted one is fitted on ``df``. ``None``: a new one, fitted here.

        Raises
        ------
        ValueError
            Unknown column names, NaN/inf values in used columns, a target that does not fit
            the task, non-positive exposure, an unknown task or kind, a sensitive feature with
            fewer than 2 groups, an empty frame - each naming the argument and the value.
        """
        return _build_fair_data(
            cls, df, target=target, sensitive=sensitive, features=features, categorical=categorical,
            task=task, exposure=exposure, sensitive_kinds=sensitive_kinds,
            include_sensitive=include_sensitive, preprocessor=preprocessor, reference=None,
        )

    @classmethod
    def from_arrays(
        cls,
        X: Any,
        y: Any,
        sensitive: Mapping[str, Any],
        task: str = "binary",
        *,
        feature_names: Sequence[str] | None = None,
        exposure: Any = None,
        sensitive_kinds: Mapping[str, str] | None = None,
        include_sensitive: bool = False,
        categorical: Sequence[str] | None = None,
        preprocessor: Preprocessor | None = None,
        target_name: str = "y",
    ) -> "FairData":
        """Build a :class:`FairData` from arrays (numpy, torch or pandas); wraps :meth:`from_frame`.

        Parameters
        ----------
        X : array (n, p)
            Model inputs (standardised by the preprocessor like any numeric column).
        y : array (n,)
        sensitive : dict name -> array (n,)
            Sensitive features, kept apart from ``X``; ``include_sensitive=True`` appends
            them to the inputs (default False: ``X`` is taken to be the full input).
        task, sensitive_kinds, categorical, preprocessor : as in :meth:`from_frame`.
        feature_names : names of the columns of ``X`` (default ``x0 .. x{p-1}``).
        exposure : array (n,), optional
        target_name : name given to the target column (default ``"y"``).
        """
        X_np = to_numpy(X)
        if X_np.ndim != 2:
            raise ValueError(f"X: expected a 2-D array (n, p), got shape {X_np.shape}")
        names = [f"x{j}" for j in range(X_np.shape[1])] if feature_names is None else [str(n) for n in feature_names]
        if len(names) != X_np.shape[1]:
            raise ValueError(f"feature_names: {len(names)} names for {X_np.shape[1]} columns of X")
        if not isinstance(sensitive, Mapping):
            raise ValueError(f"sensitive: expected a dict name -> array, got {type(sensitive).__name__}")
        columns: dict[str, np.ndarray] = {"X": X_np, "y": _flat_column(y, "y")}
        columns.update({f"sensitive[{k}]": _flat_column(v, f"sensitive[{k}]") for k, v in sensitive.items()})
        if exposure is not None:
            columns["exposure"] = _flat_column(exposure, "exposure")
        check_same_length(**columns)
        exposure_name = "exposure" if exposure is not None else None
        all_names = names + [target_name] + [str(k) for k in sensitive] + ([exposure_name] if exposure_name else [])
        _as_name_list(all_names, "feature_names/sensitive/target_name")
        df = pd.DataFrame(X_np, columns=names)
        df[target_name] = columns["y"]
        for key, values in sensitive.items():
            df[str(key)] = columns[f"sensitive[{key}]"]
        if exposure_name:
            df[exposure_name] = columns["exposure"]
        return cls.from_frame(
            df, target=target_name, sensitive=[str(k) for k in sensitive], features=names,
            categorical=categorical, task=task, exposure=exposure_name, sensitive_kinds=sensitive_kinds,
            include_sensitive=include_sensitive, preprocessor=preprocessor,
        )

    def transform(self, df: pd.DataFrame) -> "FairData":
        """Encode new rows (test or user data) exactly like this data.

        Same input columns and fitted :attr:`preprocessor` (training statistics), same
        sensitive codes and kinds, same cell ids (a combination absent here gets a new id
        after the existing ones, logged). A sensitive value outside the known levels is a
        ValueError. ``df`` must contain the target (and exposure) column.
        """
        return _build_fair_data(
            type(self), df, target=self.target_name, sensitive=self.sensitive_names,
            features=self.feature_columns, categorical=None, task=self.task, exposure=self.exposure_name,
            sensitive_kinds=self.sensitive_kinds, include_sensitive=self.include_sensitive,
            preprocessor=self.preprocessor, reference=self,
        )

    def with_preprocessor(self, preprocessor: Preprocessor) -> "FairData":
        """The same rows with ``X`` recomputed from :attr:`frame` by a fitted ``preprocessor``."""
        if not isinstance(preprocessor, Preprocessor) or not preprocessor.is_fitted:
            raise ValueError(f"preprocessor: expected a fitted Preprocessor, got {preprocessor!r}")
        frame = self._require_frame("with_preprocessor")
        X, names = preprocessor.transform(frame)
        return self._replace(X=torch.from_numpy(X), feature_names=names, preprocessor=preprocessor,
                             feature_columns=list(preprocessor.columns_))

    # -- views -------------------------------------------------------------------------
    def __len__(self) -> int:
        return int(self.X.shape[0])

    @property
    def n_features(self) -> int:
        """Number of model inputs (columns of X)."""
        return int(self.X.shape[1])

    @property
    def strata(self) -> torch.Tensor:
        """Groups for balanced sampling: the intersection :attr:`cells`."""
        return self.cells

    @property
    def frame(self) -> pd.DataFrame | None:
        """The raw rows behind this data (computed on first access for subsets)."""
        if self._source is None:
            return None
        if self._frame_cache is None:
            self._frame_cache = self._source.iloc[self._rows.numpy()]
        return self._frame_cache

    def _require_frame(self, operation: str) -> pd.DataFrame:
        frame = self.frame
        if frame is None:
            raise ValueError(f"{operation}: this FairData has no raw frame (build it with from_frame/from_arrays)")
        return frame

    def _replace(self, **changes: Any) -> "FairData":
        """A shallow copy with some attributes replaced (no validation: internal use)."""
        new = object.__new__(type(self))
        new.__dict__.update(self.__dict__)
        new.__dict__.update(changes)
        return new

    def subset(self, idx: Any) -> "FairData":
        """Rows ``idx`` (int tensor/array/list, boolean mask, or slice) as a FairData.

        Pure tensor indexing: the raw frame is only indexed when :attr:`frame` is read.
        Levels, kinds, ``n_cells`` and cell ids are those of the full data; a group or
        cell may be absent from a subset (mini-batches may miss groups).
        """
        return self._take(_as_index(idx, len(self)))

    def _take(self, index: Any, **changes: Any) -> "FairData":
        row_index = index.cpu() if isinstance(index, torch.Tensor) else index
        fields = {
            "X": self.X[index],
            "y": self.y[index],
            "sensitive": {k: v[index] for k, v in self.sensitive.items()},
            "cells": self.cells[index],
            "exposure": None if self.exposure is None else self.exposure[index],
            "_rows": self._rows[row_index],
            "_frame_cache": None,
        }
        fields.update(changes)
        return self._replace(**fields)

    def to(self, device: torch.device | str) -> "FairData":
        """A copy with every tensor on ``device`` (row bookkeeping stays on the CPU)."""
        return self._replace(
            X=self.X.to(device), y=self.y.to(device), cells=self.cells.to(device),
            sensitive={k: v.to(device) for k, v in self.sensitive.items()},
            exposure=None if self.exposure is None else self.exposure.to(device),
        )

    def split(self, test_size: float = 0.2, seed: int = 0, stratify: bool = True) -> tuple["FairData", "FairData"]:
        """Deterministic train/test split with the preprocessor re-fitted on the TRAIN rows.

        Rows are stratified (``stratify=True``) by target x cell for binary tasks, by cell
        otherwise; when some stratum has fewer than 2 rows it falls back to the target
        alone (binary), then to no stratification (logged). See
        :func:`stratified_split_indices` for the apportionment. Both parts are then encoded
        by a fresh clone of :attr:`preprocessor` fitted on the training rows only, so no
        test statistic leaks into X. Sensitive codes, kinds and cell ids are shared.

        Returns
        -------
        train, test : FairData
        """
        test_size = _check_test_size(test_size)
        strata = self._split_strata() if stratify else np.zeros(len(self), dtype=np.int64)
        train_idx, test_idx = stratified_split_indices(strata, test_size, seed)
        if self.preprocessor is None or self._source is None:
            logger.info("split: no raw frame or preprocessor; X is subset without re-fitting")
            return self.subset(torch.from_numpy(train_idx)), self.subset(torch.from_numpy(test_idx))
        frame = self.frame
        preprocessor = self.preprocessor.clone()
        X_train, names = preprocessor.fit_transform(frame.iloc[train_idx])
        X_test, _ = preprocessor.transform(frame.iloc[test_idx])
        common = {"preprocessor": preprocessor, "feature_names": names}
        train = self._take(torch.from_numpy(train_idx), X=torch.from_numpy(X_train).to(self.X.device), **common)
        test = self._take(torch.from_numpy(test_idx), X=torch.from_numpy(X_test).to(self.X.device), **common)
        return train, test

    def _split_strata(self) -> np.ndarray:
        """target x cell (binary) or cell strata; the first candidate whose strata all have >= 2 rows."""
        cells = self.cells.cpu().numpy()
        candidates: list[tuple[str, np.ndarray]] = []
        if self.task == "binary":
            y = self.y.cpu().numpy().astype(np.int64)
            candidates += [("target x cell", y * self.n_cells + cells), ("target", y)]
        else:
            candidates.append(("cell", cells))
        for label, strata in candidates:
            if np.unique(strata, return_counts=True)[1].min() >= 2:
                logger.debug("split: stratified by %s", label)
                return strata
            logger.info("split: some %s strata have fewer than 2 rows; trying a coarser stratification", label)
        return np.zeros(len(self), dtype=np.int64)

    def __repr__(self) -> str:
        kinds = ", ".join(f"{k}: {v}" for k, v in self.sensitive_kinds.items())
        return (f"FairData(n={len(self)}, p={self.n_features}, task={self.task!r}, target={self.target_name!r}, "
                f"sensitive={{{kinds}}}, n_cells={self.n_cells}, exposure={self.exposure_name!r})")


# --------------------------------------------------------------------------------------
# from_frame implementation
# --------------------------------------------------------------------------------------
def _flat_column(values: Any, argument: str) -> np.ndarray:
    """A 1-D numpy column ((n, 1) flattened); ValueError otherwise."""
    array = to_numpy(values)
    if array.ndim == 2 and array.shape[1] == 1:
        array = array.reshape(-1)
    if array.ndim != 1:
        raise ValueError(f"{argument}: expected a 1-D array, got shape {array.shape}")
    return array


def _as_index(idx: Any, n: int) -> Any:
    """A row index usable on tensors: long/bool tensor or slice."""
    if isinstance(idx, slice):
        return idx
    if isinstance(idx, (int, np.integer)) and not isinstance(idx, bool):
        return torch.tensor([int(idx)])
    index = idx if isinstance(idx, torch.Tensor) else torch.as_tensor(np.asarray(idx))
    if index.numel() == 0:
        return torch.zeros(0, dtype=torch.long, device=index.device)
    if index.dtype == torch.bool:
        if index.shape != (n,):
            raise ValueError(f"idx: boolean mask of shape {tuple(index.shape)} for {n} rows")
        return index
    if index.dtype.is_floating_point or index.dtype.is_complex:
        raise ValueError(f"idx: expected integer positions or a boolean mask, got dtype {index.dtype}")
    return index.reshape(-1).long()


def _resolve_feature_columns(
    df: pd.DataFrame,
    target: str,
    sensitive: list[str],
    exposure: str | None,
    features: Sequence[str] | None,
    include_sensitive: bool,
) -> list[str]:
    """Input columns: ``features`` (default: all but target/exposure), with the sensitive
    columns added (include_sensitive) or removed (not include_sensitive)."""
    reserved = [target] + ([exposure] if exposure is not None else [])
    if features is None:
        columns = [c for c in df.columns if c not in reserved]
    else:
        columns = _as_name_list(features, "features")
        _check_columns_exist(df, columns, "features")
        clash = [c for c in columns if c in reserved]
        if clash:
            raise ValueError(f"features: {_short_list(clash)} is the target/exposure column and cannot be an input")
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


def _check_arguments(
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
    _check_columns_exist(df, [target], "target")
    _check_columns_exist(df, sensitive, "sensitive")
    _check_columns_exist(df, categorical, "categorical")
    if exposure is not None:
        _check_columns_exist(df, [exposure], "exposure")
        if exposure == target or exposure in sensitive:
            raise ValueError(f"exposure: column {exposure!r} is also the target or a sensitive column")
    if target in sensitive:
        raise ValueError(f"sensitive: the target column {target!r} cannot be a sensitive feature")
    unknown = [k for k in sensitive_kinds if k not in sensitive]
    if unknown:
        raise ValueError(f"sensitive_kinds: {_short_list(unknown)} are not among sensitive={_short_list(sensitive)}")
    bad_kinds = {k: v for k, v in sensitive_kinds.items() if v not in SENSITIVE_KINDS}
    if bad_kinds:
        raise ValueError(f"sensitive_kinds: unknown kind(s) {bad_kinds!r}; expected one of {SENSITIVE_KINDS}")


def _prepare_preprocessor(
    preprocessor: Preprocessor | None, df: pd.DataFrame, columns: list[str], categorical: list[str]
) -> Preprocessor:
    """The preprocessor to use: given and fitted (checked), given and unfitted (fitted), or new."""
    if preprocessor is None:
        declared = [c for c in categorical if c in columns]
        return Preprocessor(columns, declared).fit(df)
    if not isinstance(preprocessor, Preprocessor):
        raise ValueError(f"preprocessor: expected a Preprocessor, got {type(preprocessor).__name__}")
    if not preprocessor.is_fitted:
        if preprocessor.columns is not None and set(preprocessor.columns) != set(columns):
            raise ValueError(f"preprocessor: configured for columns {_short_list(preprocessor.columns)} but the "
                             f"input columns are {_short_list(columns)}")
        if preprocessor.columns is None:
            preprocessor.columns = list(columns)
        return preprocessor.fit(df)
    if set(preprocessor.columns_) != set(columns):
        raise ValueError(f"preprocessor: fitted on columns {_short_list(preprocessor.columns_)} but the input "
                         f"columns are {_short_list(columns)}")
    return preprocessor


def _encode_all_sensitive(
    df: pd.DataFrame,
    names: list[str],
    kinds_declared: Mapping[str, str],
    categorical: list[str],
    reference: FairData | None,
) -> tuple[dict[str, torch.Tensor], dict[str, str], dict[str, list], dict[str, np.ndarray]]:
    """:func:`_encode_sensitive` for every sensitive column (kinds/levels of ``reference`` if given).

    Returns tensors, kinds, levels and the int64 codes of the discrete features, by name.
    """
    tensors: dict[str, torch.Tensor] = {}
    kinds: dict[str, str] = {}
    levels: dict[str, list] = {}
    codes: dict[str, np.ndarray] = {}
    for name in names:
        kind = reference.sensitive_kinds[name] if reference is not None else kinds_declared.get(name)
        reference_levels = reference.sensitive_levels[name] if reference is not None else None
        tensors[name], kinds[name], levels[name], code = _encode_sensitive(
            df[name], kind, name in categorical, reference_levels
        )
        if code is not None:
            codes[name] = code
    return tensors, kinds, levels, codes


def _coerce_inputs(
    df: pd.DataFrame,
    columns: list[str],
    sensitive: list[str],
    categorical: list[str],
    preprocessor: Preprocessor | None,
) -> pd.DataFrame:
    """``df`` with the input columns that hold numbers as text made numeric
    (:func:`coerce_numeric_columns`).

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
            if column in candidates and _is_text_dtype(inputs[column]):
                _require_numbers(inputs[column])
    return inputs


def _require_numbers(series: pd.Series) -> None:
    """ValueError naming a column the fitted preprocessor treats as numeric when some of
    its values are not numbers."""
    bad = [v for v in pd.unique(series.dropna().to_numpy(dtype=object)) if _as_number(v) is None]
    if bad:
        raise ValueError(f"df: column {series.name!r} was numeric when the preprocessor was fitted but holds values "
                         f"that are not numbers here: {_short_list(bad[:5])}")


def _build_fair_data(
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
    reference: FairData | None,
) -> FairData:
    """Shared body of :meth:`FairData.from_frame` and :meth:`FairData.transform`."""
    _check_frame(df, "df")
    sensitive_names = _as_name_list(sensitive, "sensitive")
    categorical_names = _as_name_list(categorical, "categorical")
    kinds_declared = dict(sensitive_kinds or {})
    _check_arguments(df, target, sensitive_names, categorical_names, task, exposure, kinds_declared)
    if preprocessor is not None and preprocessor.is_fitted and features is None:
        features = [c for c in preprocessor.columns_ if c not in sensitive_names or include_sensitive]
    columns = _resolve_feature_columns(df, target, sensitive_names, exposure, features, include_sensitive)

    _require_finite(df, [target], "target")
    _require_finite(df, sensitive_names, "sensitive")
    if exposure is not None:
        _require_finite(df, [exposure], "exposure")
    inputs = _coerce_inputs(df, columns, sensitive_names, categorical_names, preprocessor)
    _require_finite(inputs, columns, "features")

    y = _encode_target(df[target], task)
    exposure_tensor = _encode_exposure(df[exposure]) if exposure is not None else None

    tensors, kinds, levels, codes = _encode_all_sensitive(
        df, sensitive_names, kinds_declared, categorical_names, reference
    )
    discrete = [n for n in sensitive_names if kinds[n] != "continuous"]
    radices = [len(levels[n]) for n in discrete]
    reference_keys = reference._cell_keys if reference is not None else None
    cells, cell_keys = intersection_cells([codes[n] for n in discrete], radices, len(df), reference_keys)
    cell_levels = _decode_cell_keys(cell_keys, radices, [levels[n] for n in discrete]) if discrete else [()]

    fitted = _prepare_preprocessor(preprocessor, inputs, columns, categorical_names)
    X, feature_names = fitted.transform(inputs)
    return cls(
        torch.from_numpy(X), y, task, tensors, kinds, levels, torch.from_numpy(cells), len(cell_keys),
        exposure_tensor, feature_names,
        preprocessor=fitted, target_name=target, include_sensitive=include_sensitive,
        cell_levels=cell_levels, exposure_name=exposure, feature_columns=fitted.columns_,
        frame=df, cell_keys=cell_keys,
    )
