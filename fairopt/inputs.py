"""The estimators' inputs: sensitive features in every accepted form (DataFrame, Series, dict,
array, column names of ``X``), named and checked against the rows of ``X``; a FairData's rows as
the estimators' arrays; missing-value checks that name the column.

An unnamed column (1-D array, list, Series without a name, one-column 2-D array) takes
``names=`` when given, else the one sensitive name the constraints use, so
``fit(X, y, sensitive_features=s)`` with ``("disparate_impact", "gender", 0.8)`` binds ``s`` to
``"gender"`` (a ValueError when they use several), else ``"sensitive"``.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

import numpy as np
import pandas as pd
from scipy import sparse

from fairopt._validation import sensitive_names, to_numpy
from fairopt.data import FairData
from fairopt.data.assembly import coerce_inputs
from fairopt.data.frames import short_list
from fairopt.exceptions import warn_at_caller
from fairopt.measures.group import python_scalar

logger = logging.getLogger(__name__)

__all__ = ["DENSE_LIMIT_BYTES", "check_input_finite", "check_missing", "columns_of_x", "constraint_sensitive_names",
           "dense_inputs", "encoded_inputs", "fair_data_rows", "has_text_columns", "held_out_rows", "internal_names",
           "log_encoded_columns", "names_columns_of_x", "sensitive_columns", "sensitive_columns_of_x",
           "warn_reordered_index", "without_columns"]

#: The name of one unnamed sensitive column when nothing else names it.
UNNAMED = "sensitive"


def sensitive_columns(sensitive_features: Any, n_rows: int, names: Any = None, *,
                      wanted: Any = None) -> dict[str, np.ndarray]:
    """The sensitive features as ``{name: 1-D array}``, checked against ``n_rows``.

    Parameters
    ----------
    sensitive_features : None, DataFrame, Series, dict name -> array, or array (n,) / (n, k)
        ``None`` gives ``{}``. Arrays are named ``"sensitive"`` (1-D) or ``"sensitive_0"`` ... (2-D).
    n_rows : int
        Rows of ``X``; every column must have this length.
    names : str or list of str, optional
        Names that replace the natural ones, one per column.
    wanted : list of str, optional
        The sensitive names the constraints use: a single unnamed column takes the one name of
        ``wanted`` (ValueError when it holds several).

    Raises
    ------
    ValueError
        A column of another length, arrays of more than 2 dimensions, names that do not match the
        columns, duplicate names, one unnamed column for several wanted names.
    """
    if sensitive_features is None:
        return {}
    natural, columns = _named_columns(sensitive_features)
    if names is None and natural == [UNNAMED] and not _is_named(sensitive_features):
        natural = [_unnamed_column_name(list(wanted or []))]
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


def warn_reordered_index(X: Any, **others: Any) -> None:
    """A :class:`~fairopt.exceptions.FairnessWarning` for each pandas argument of ``others`` (e.g.
    ``sensitive_features``, ``y``) whose index holds the labels of the DataFrame ``X``'s index in another
    order. Rows are paired by position, as scikit-learn pairs them; a reordered index (``s.sample(frac=1)``,
    a ``sort_values``) then pairs each row with another row's values without an error. Where ``X`` has no
    index (an array, as a ColumnTransformer inside a Pipeline hands on), a pandas ``y`` is the reference."""
    reference, called = X, "X"
    if not isinstance(X, pd.DataFrame):  # e.g. a ColumnTransformer's array inside a Pipeline: y keeps its index
        reference, called = others.get("y"), "y"
        others = {name: value for name, value in others.items() if name != "y"}
        if not isinstance(reference, (pd.Series, pd.DataFrame)):
            return
    warn_reordered_against(reference, called, **others)


def warn_reordered_against(reference: Any, called: str, **others: Any) -> None:
    """:func:`warn_reordered_index` against the pandas object ``reference`` (named ``called`` in the message):
    one warning for each pandas argument of ``others`` whose index holds its labels in another order."""
    if not isinstance(reference, (pd.Series, pd.DataFrame)):
        return
    for name, value in others.items():
        index = getattr(value, "index", None)
        if (not isinstance(value, (pd.Series, pd.DataFrame)) or len(index) != len(reference.index)
                or index.equals(reference.index) or not index.is_unique or not reference.index.is_unique
                or not index.sort_values().equals(reference.index.sort_values())):
            continue
        warn_at_caller(f"{name}: its index holds the labels of {called}'s index in another order; rows are paired "
                       f"by position, not by index label (as in scikit-learn), so row i of {called} gets row i of "
                       f"{name}. Align them first ({name}.loc[{called}.index]) if the index is what pairs them")


def _is_named(sensitive_features: Any) -> bool:
    """Whether a container names its columns itself (DataFrame, named Series, dict)."""
    if isinstance(sensitive_features, pd.Series):
        return sensitive_features.name is not None
    return isinstance(sensitive_features, (pd.DataFrame, Mapping))


def _unnamed_column_name(wanted: list[str]) -> str:
    """The name of one unnamed sensitive column: the one name the constraints use."""
    if len(wanted) <= 1:
        return wanted[0] if wanted else UNNAMED
    example = ", ".join(f"{name!r}: ..." for name in wanted)
    raise ValueError(f"sensitive_features: one unnamed column (an array, a list or a Series without a name) but "
                     f"{len(wanted)} sensitive features are needed, {wanted} (the constraints name them), so which "
                     f"one it is cannot be told; pass named columns: a DataFrame with the columns {wanted} or a "
                     f"dict {{{example}}} (or name the column with sensitive_names=)")


def constraint_sensitive_names(constraints: list) -> list[str]:
    """The sensitive names the constraints use (their ``sensitive`` attribute), in order, each once."""
    found: list[str] = []
    for constraint in constraints:
        named = getattr(constraint, "sensitive", None)
        try:
            names = sensitive_names(named)
        except ValueError:  # a custom constraint without (or with another kind of) ``sensitive``
            continue
        found.extend(name for name in names if name not in found)
    return found


def _named_columns(sensitive_features: Any) -> tuple[list[str], list[np.ndarray]]:
    """Natural names and 1-D columns of any accepted sensitive-feature container."""
    if isinstance(sensitive_features, pd.DataFrame):
        names = [str(c) for c in sensitive_features.columns]
        return names, [_series_values(sensitive_features.iloc[:, j]) for j in range(sensitive_features.shape[1])]
    if isinstance(sensitive_features, pd.Series):
        name = sensitive_features.name
        return [str(name) if name is not None else "sensitive"], [_series_values(sensitive_features)]
    if isinstance(sensitive_features, Mapping):
        return [str(k) for k in sensitive_features], [_column(v) for v in sensitive_features.values()]
    array = to_numpy(sensitive_features)
    if array.ndim == 1:
        return ["sensitive"], [array]
    if array.ndim == 2:
        k = array.shape[1]
        names = ["sensitive"] if k == 1 else [f"sensitive_{j}" for j in range(k)]
        return names, [array[:, j] for j in range(k)]
    if array.ndim == 0:
        raise ValueError(f"sensitive_features: got the single value {sensitive_features!r}, not one value per row; "
                         "a column of X is named by a string (a DataFrame whose column names are numbers: pass the "
                         "values, e.g. X[3], or name its columns with text)")
    raise ValueError(f"sensitive_features: expected a 1-D or 2-D array, got shape {array.shape}")


def _series_values(series: pd.Series) -> np.ndarray:
    """A Series' values; a pandas ``category`` column's as objects, so that its values are read as group
    labels whatever their type (``to_numpy`` of integer categories gives integers, which would read as a
    continuous attribute when there are more than two)."""
    if isinstance(series.dtype, pd.CategoricalDtype):
        return series.astype(object).to_numpy()
    return series.to_numpy()


def _column(values: Any) -> np.ndarray:
    """A numpy column; an (n, 1) array is flattened (other shapes are checked later)."""
    array = _series_values(values) if isinstance(values, pd.Series) else to_numpy(values)
    return array.reshape(-1) if array.ndim == 2 and array.shape[1] == 1 else array


def names_columns_of_x(sensitive_features: Any, X: Any) -> bool:
    """Whether ``sensitive_features`` names columns of ``X``: a string, or a list of strings that are
    all columns of the DataFrame ``X`` or whose length is not its number of rows.
    """
    if isinstance(sensitive_features, str):
        return True
    if not isinstance(X, pd.DataFrame) or not isinstance(sensitive_features, (list, tuple)) or not sensitive_features:
        return False
    if not all(isinstance(s, str) for s in sensitive_features):
        return False
    return len(sensitive_features) != X.shape[0] or all(s in X.columns for s in sensitive_features)


def columns_of_x(names: list[str], X: Any) -> pd.DataFrame:
    """The named columns of the DataFrame ``X`` (ValueError naming the columns of ``X`` for an unknown name)."""
    if not isinstance(X, pd.DataFrame):
        raise ValueError(f"sensitive_features: column name(s) {short_list(names)} need X to be a pandas DataFrame, "
                         f"got X of type {type(X).__name__}; pass the values instead")
    unknown = [s for s in names if s not in X.columns]
    if unknown:
        shown = list(X.columns[:20])  # as they are: the column 3 is not the name '3'
        hint = (f" (a list of labels, one per row, needs {X.shape[0]} values, not {len(names)})"
                if len(names) > 1 else "")
        raise ValueError(f"sensitive_features: unknown column(s) {short_list(unknown)} of X; X has the columns {shown}"
                         + (" ..." if X.shape[1] > 20 else "") + hint)
    if len(set(names)) != len(names):
        raise ValueError(f"sensitive_features: duplicate column names {names}")
    return X.loc[:, names].copy()


def sensitive_columns_of_x(X: Any, sensitive_features: Any) -> tuple[Any, Any, list[str]]:
    """``(X without the columns, those columns, their names)`` when ``sensitive_features`` names columns
    of ``X``, else ``(X, sensitive_features, [])``.
    """
    if not names_columns_of_x(sensitive_features, X):
        return X, sensitive_features, []
    names = [sensitive_features] if isinstance(sensitive_features, str) else list(sensitive_features)
    columns = columns_of_x(names, X)
    if X.shape[1] == len(names):
        raise ValueError(f"sensitive_features: {short_list(names)} are all the columns of X; taken out as "
                         "sensitive features, they leave the model no input")
    return X.drop(columns=names), columns, names


def without_columns(X: Any, names: list[str]) -> Any:
    """``X`` without those of the columns ``names`` it holds (a DataFrame; anything else as it is)."""
    present = [c for c in names if isinstance(X, pd.DataFrame) and c in X.columns]
    return X.drop(columns=present) if present else X


def check_missing(columns: Mapping[str, Any]) -> None:
    """ValueError naming the first sensitive column with missing values: they belong to no group."""
    for name, values in columns.items():
        missing = np.asarray(pd.isna(values), dtype=bool).reshape(-1)
        if missing.any():
            raise ValueError(f"sensitive_features: {name!r} has {int(missing.sum())} missing value(s) (NaN/None) of "
                             f"{missing.size}, e.g. at row {int(np.flatnonzero(missing)[0])}; drop or recode those "
                             "rows (they form no group)")


#: The largest dense copy, in bytes, that :func:`dense_inputs` makes of a sparse ``X``.
DENSE_LIMIT_BYTES = 2 ** 31


def dense_inputs(X: Any) -> Any:
    """``X`` as a dense array when it is a SciPy sparse matrix or array (a ``OneHotEncoder``'s default
    output in a pipeline), as the models take dense inputs; anything else as it is. ValueError when the
    dense float64 copy would exceed :data:`DENSE_LIMIT_BYTES` (2 GiB)."""
    if not sparse.issparse(X):
        return X
    size = 8 * int(X.shape[0]) * int(X.shape[1])
    if size > DENSE_LIMIT_BYTES:
        raise ValueError(f"X: a sparse {X.shape[0]} x {X.shape[1]} matrix would take {size / 2 ** 30:.1f} GiB dense; "
                         "the models take dense inputs: reduce the columns (e.g. OneHotEncoder(max_categories=...) "
                         "or min_frequency=...) or train on rows memory-mapped from disk (fairopt.data.save_memmap)")
    return X.toarray()


def check_input_finite(X: Any, allow_missing: bool = False) -> None:
    """ValueError naming the first input column with missing values (unless ``allow_missing``: a model
    that routes them itself, ``model="gbm"``), then the first with infinite ones, before scikit-learn's
    check (whose message names no column, and which a frame with text columns passes to the
    preprocessor unchecked).
    """
    if isinstance(X, pd.DataFrame):
        names, missing = [str(c) for c in X.columns], X.isna().to_numpy()
        numeric = np.array([pd.api.types.is_numeric_dtype(t) and not pd.api.types.is_bool_dtype(t) for t in X.dtypes],
                           dtype=bool)
        infinite = np.zeros(X.shape, dtype=bool)
        if numeric.any():
            infinite[:, numeric] = np.isinf(X.iloc[:, numeric].to_numpy(dtype=np.float64, na_value=np.nan))
    else:
        array = np.asarray(X)
        if array.ndim != 2 or array.dtype.kind not in "fcO":
            return
        names, missing = [f"column {j}" for j in range(array.shape[1])], np.asarray(pd.isna(array), dtype=bool)
        infinite = np.isinf(array) if array.dtype.kind in "fc" else np.zeros(array.shape, dtype=bool)
    if not allow_missing:
        _name_bad_column(missing, names, "NaN", "missing", "impute them (e.g. sklearn.impute.SimpleImputer in a "
                         "Pipeline), drop those rows, or train boosted trees (model='gbm'), which route missing values")
    _name_bad_column(infinite, names, "infinity", "infinite", "replace them (clip to a finite value, or treat them as "
                     "missing and impute) or drop those rows")


def _name_bad_column(bad: np.ndarray, names: list[str], contains: str, kind: str, advice: str) -> None:
    """The ValueError of :func:`check_input_finite` for the first column with a ``bad`` entry, if any."""
    counts = bad.sum(axis=0)
    if not counts.any():
        return
    j = int(np.flatnonzero(counts)[0])
    others = int((counts > 0).sum()) - 1
    raise ValueError(f"Input X contains {contains}: {names[j]!r} has {int(counts[j])} {kind} value(s), e.g. at row "
                     f"{int(np.flatnonzero(bad[:, j])[0])}" + (f", and {others} more column(s) have some" if others
                                                               else "") + f"; {advice}")


def fair_data_rows(data: FairData) -> tuple[pd.DataFrame, np.ndarray, pd.DataFrame, np.ndarray | None]:
    """A FairData's raw rows as the estimators' arguments: input columns, target (0/1 for a binary
    task), sensitive columns and weights (None when unweighted); ValueError without a raw frame.
    """
    frame = data.frame
    if frame is None:
        raise ValueError("X: this FairData has no raw frame (it was built with the FairData constructor, not "
                         "from_frame/from_arrays); pass its inputs as an array instead")
    weights = None if data.weights is None else data.weights.detach().cpu().numpy()
    return (frame.loc[:, list(data.feature_columns)], data.y.detach().cpu().numpy().astype(np.float64),
            frame.loc[:, list(data.sensitive_names)], weights)


def category_positions(X: Any) -> list[int]:
    """Positions of the pandas ``category`` columns of a DataFrame ``X`` (none for an array): their values
    are levels to one-hot encode whatever their type, integer codes included, which the array the
    inputs pass through as would otherwise make numbers."""
    if not isinstance(X, pd.DataFrame):
        return []
    return [j for j, dtype in enumerate(X.dtypes) if isinstance(dtype, pd.CategoricalDtype)]


def has_text_columns(X: Any) -> bool:
    """Whether ``X`` is a DataFrame with text or categorical columns, which the preprocessor encodes
    instead of a cast to float.
    """
    if not isinstance(X, pd.DataFrame):
        return False
    return any(pd.api.types.is_object_dtype(t) or pd.api.types.is_string_dtype(t)
               or isinstance(t, pd.CategoricalDtype) for t in X.dtypes)


def log_encoded_columns(preprocessor: Any, user_names: Any) -> None:
    """Log, by the user's column names, which input columns the fitted ``preprocessor`` one-hot encodes."""
    if not preprocessor.categorical_:
        return
    names = list(user_names) if user_names is not None else None
    def user(internal: str) -> str:
        return str(names[int(internal[1:])]) if names is not None else internal
    logger.info("text columns one-hot encoded: %s", [f"{user(c)} ({len(preprocessor.levels_[c])} levels)"
                                                     for c in preprocessor.categorical_])


def internal_names(p: int) -> list[str]:
    """Column names of an estimator's ``X`` inside its FairData, ``x0 .. x{p-1}``."""
    return [f"x{j}" for j in range(p)]


def encoded_inputs(X: np.ndarray, preprocessor: Any, names: Any = None) -> np.ndarray:
    """The model inputs of validated rows ``X`` by the fitted ``preprocessor``: numbers held as text
    converted as at fit, then standardised / one-hot encoded. The messages of the encoding name the
    argument ``X`` and the columns by ``names``, the user's column names (``feature_names_in_``), or
    for an array without them by the preprocessor's own (``x0``, ``x1``, ... for ``X[:, 0]``, ...).
    """
    argument = "X"
    if names is not None:
        preprocessor = preprocessor.renamed(names)
    frame = pd.DataFrame(X, columns=list(preprocessor.columns_))
    inputs = coerce_inputs(frame, list(frame.columns), [], [], preprocessor, argument)
    encoded, _ = preprocessor.transform(inputs, argument)
    return encoded


def _refuse_new_groups(name: str, values: np.ndarray, kind: str | None, levels: list) -> None:
    """ValueError naming the groups of a binary or categorical sensitive column that training did not have:
    the constraints compare the training groups, and a new group has no row of its own in them."""
    if kind == "continuous" or not levels:
        return
    values = np.asarray(values).reshape(-1)
    codes = pd.Index(levels).get_indexer(pd.Series(values).to_numpy())
    if (codes >= 0).all():
        return
    new = pd.unique(values[codes < 0])
    raise ValueError(f"sensitive_features: {name!r} has the group(s) {[python_scalar(v) for v in new[:5]]} "
                     f"({int((codes < 0).sum())} rows) that training did not have (training groups "
                     f"{[python_scalar(v) for v in levels]}); the constraints compare the training groups: evaluate "
                     "the rows of those groups (drop the others), or refit with every group in the training rows")


def held_out_rows(X: np.ndarray, target: np.ndarray, columns: dict, *, task: str, names: list, kinds: dict,
                  levels: dict, preprocessor: Any, weights: np.ndarray | None = None) -> Any:
    """A FairData of new rows encoded like the training data (same sensitive features, kinds, groups
    and preprocessor), with row ``weights`` if given; ValueError otherwise.
    """
    if target.shape[0] != X.shape[0]:
        raise ValueError(f"y: {target.shape[0]} values for {X.shape[0]} rows of X")
    if sorted(columns) != sorted(names):
        raise ValueError(f"sensitive_features: expected the training features {names}, got {sorted(columns)}")
    columns = {name: columns[name] for name in names}
    for name in names:
        _refuse_new_groups(name, columns[name], kinds.get(name), list(levels.get(name) or []))
    data = FairData.from_arrays(X, target, columns, task=task, feature_names=list(preprocessor.columns_),
                                sensitive_kinds=kinds, preprocessor=preprocessor, sample_weight=weights)
    for name in names:
        if list(data.sensitive_levels[name]) != list(levels[name]):
            raise ValueError(f"sensitive_features: {name!r} has the groups {data.sensitive_levels[name]} on these "
                             f"rows but {levels[name]} in training; every training group must be present")
        data.sensitive_levels[name] = list(levels[name])  # equal values keep the training labels: 1.0 is 1
    return data
