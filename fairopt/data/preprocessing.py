"""The :class:`Preprocessor`: numeric columns standardised with the training statistics,
categorical columns one-hot encoded with the training levels."""

from __future__ import annotations

import logging
from typing import Any, Sequence

import numpy as np
import pandas as pd

from fairopt.data.frames import (as_name_list, check_columns_exist, check_frame, is_categorical_dtype, level_codes,
                                 looks_like_row_identifier, require_finite_columns, short_list, spaced_twins,
                                 unique_levels)
from fairopt.exceptions import warn_at_caller

__all__ = ["MISSING_MODES", "Preprocessor"]

#: What :class:`Preprocessor` does with a missing input value: raise, or keep it (NaN / all-zero one-hot row).
MISSING_MODES: tuple[str, ...] = ("error", "keep")

logger = logging.getLogger("fairopt.data")  # one logger for the whole data layer


def _feature_names(columns: Sequence[str], levels: dict[str, list[Any]]) -> list[str]:
    """The output names: ``columns`` in order, a categorical one (a key of ``levels``) expanded into
    ``"column=level"`` indicators."""
    return [name for c in columns for name in ([f"{c}={level}" for level in levels[c]] if c in levels else [c])]


def _moments(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Mean and population standard deviation of each column of ``values`` (n >= 1 rows, no NaN); a
    constant column gets its value and 1. Squaring 1e300 overflows and squaring 1e-300 underflows, so
    each column is first divided by a power of two near its largest magnitude; the division and the
    product back are exact (no rounding), so ordinary columns get bit for bit the plain figures."""
    _, exponents = np.frexp(np.abs(values).max(axis=0))
    units = np.ldexp(1.0, exponents - 1)  # 2**(e-1) <= max |x| < 2**e: scaled values in (-2, 2)
    unit_values = values / units
    means = unit_values.mean(axis=0) * units
    scales = unit_values.std(axis=0) * units
    constant = (values == values[0]).all(axis=0)
    means[constant] = values[0, constant]  # exact: a constant column maps to 0
    scales[constant] = 1.0
    return means, scales


class Preprocessor:
    r"""Turn a DataFrame into a float32 design matrix with statistics learned on training rows.

    Numeric columns are standardised, :math:`z = (x - \mu_{train}) / \sigma_{train}` (population sd; a
    constant column gets :math:`\sigma = 1`), computed on each column divided by a power of two near its
    largest magnitude so ``1e300`` or ``1e-300`` neither overflow nor underflow. A value whose encoding
    exceeds the float32 range is a ValueError naming column, row and value. Categorical columns are one-hot
    with the levels seen at :meth:`fit` (sorted; a category dtype keeps its order); an unseen level gives
    an all-zero row (logged). Outputs follow ``columns``, a categorical column expanding in place into
    ``"column=level"`` indicators.

    Missing values (NaN/None) are an error by default. With ``missing="keep"`` (for models that route
    missing values themselves, such as boosted trees) a numeric column's missing values stay NaN after
    standardisation, its mean and scale taken over the values present, and a categorical column's
    missing values get an all-zero one-hot row (no level); infinite values remain an error.

    Parameters
    ----------
    columns : list of str, optional
        Input columns; None: every column of the frame passed to :meth:`fit`.
    categorical : list of str, optional
        Columns to one-hot encode besides the non-numeric ones (e.g. integer-coded nominal variables).
    standardize : bool, default True
        If False, numeric columns are passed through unchanged.
    missing : {"error", "keep"}, default "error"
        What a missing input value does: a ValueError naming the column, or kept as above.

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
        missing: str = "error",
    ) -> None:
        self.columns = None if columns is None else as_name_list(columns, "columns")
        self.categorical = None if categorical is None else as_name_list(categorical, "categorical")
        self.standardize = bool(standardize)
        if missing not in MISSING_MODES:
            raise ValueError(f"missing: expected one of {MISSING_MODES}, got {missing!r}")
        self.missing = missing
        self.columns_: list[str] = []
        self.categorical_: list[str] = []
        self.numeric_: list[str] = []
        self.means_: dict[str, float] = {}
        self.scales_: dict[str, float] = {}
        self.levels_: dict[str, list[Any]] = {}
        self.feature_names_: list[str] = []
        #: Column -> the name messages show for it (an estimator's preprocessor holds internal names ``x0``,
        #: ``x1``, ...; it shows the user's), kept by :meth:`clone`.
        self.display_names: dict[str, str] = {}
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
        check_frame(df, "df")
        columns = df.columns.tolist() if self.columns is None else list(self.columns)
        check_columns_exist(df, columns, "columns")
        declared = set(self.categorical or [])
        unknown = [c for c in declared if c not in columns]
        if unknown:
            raise ValueError(f"categorical: column(s) {short_list(unknown)} are not among the input "
                             f"columns {short_list(columns)}")
        require_finite_columns(df, columns, "df", allow_missing=self.keeps_missing)
        self.columns_ = columns
        self.categorical_ = [c for c in columns if c in declared or is_categorical_dtype(df[c])]
        categorical = set(self.categorical_)
        self.numeric_ = [c for c in columns if c not in categorical]
        self.means_, self.scales_ = self._numeric_statistics(df)
        self._warn_identifiers(df)
        self.levels_ = {c: unique_levels(df[c]) for c in self.categorical_}
        self.feature_names_ = _feature_names(columns, self.levels_)
        self._fitted = True
        logger.debug("Preprocessor fitted: %d numeric, %d categorical columns -> %d features",
                     len(self.numeric_), len(self.categorical_), len(self.feature_names_))
        return self

    def _warn_identifiers(self, df: pd.DataFrame) -> None:
        """A warning for each numeric input that looks like a row identifier (:func:`looks_like_row_identifier`):
        standardised as a number it lets the model tell rows apart by their position or key."""
        for column in self.numeric_:
            if looks_like_row_identifier(df[column].rename(self.shown(column))):
                first = [int(v) for v in df[column].head(3).tolist()]
                warn_at_caller(f"column {self.shown(column)!r} holds a different whole number in every row (e.g. "
                               f"{first}): it is read as a numeric model input, which identifies rows rather than "
                               "describing them. If it is an identifier or a row number, leave it out of the inputs "
                               f"(the command line: --ignore {self.shown(column)})", UserWarning)

    @property
    def keeps_missing(self) -> bool:
        """Whether missing input values are kept (``missing="keep"``) rather than an error."""
        return self._missing_mode == "keep"

    @property
    def _missing_mode(self) -> str:
        """``missing``; "error" for a preprocessor pickled before the option existed."""
        return getattr(self, "missing", "error")

    def _numeric_statistics(self, df: pd.DataFrame) -> tuple[dict[str, float], dict[str, float]]:
        """Training mean and scale (population std; 1 for constant columns or no standardising), over the
        values present in a column (``missing="keep"``; a column without any: mean 0, scale 1)."""
        if not self.numeric_:
            return {}, {}
        values = df[self.numeric_].to_numpy(dtype=np.float64, na_value=np.nan)
        if not self.standardize:
            ones = [1.0] * len(self.numeric_)
            return dict(zip(self.numeric_, [0.0] * len(self.numeric_))), dict(zip(self.numeric_, ones))
        present = ~np.isnan(values)
        if present.all():
            return self._checked_statistics(*_moments(values))
        # missing="keep" (fit checks): each column's statistics over the values it has (none: 0 and 1)
        means, scales = np.zeros(values.shape[1]), np.ones(values.shape[1])
        for j in range(values.shape[1]):
            column = values[present[:, j], j]
            if column.size:
                (means[j],), (scales[j],) = _moments(column[:, None])
        return self._checked_statistics(means, scales)

    def _checked_statistics(self, means: np.ndarray, scales: np.ndarray) -> tuple[dict[str, float],
                                                                                  dict[str, float]]:
        """The statistics by column; ValueError naming the first column they cannot standardise."""
        unusable = ~(np.isfinite(means) & np.isfinite(scales) & (scales > 0))
        if unusable.any():
            column = self.numeric_[int(np.flatnonzero(unusable)[0])]
            raise ValueError(f"df: column {self.shown(column)!r} cannot be standardised "
                             f"(mean {float(means[unusable][0])!r}, "
                             f"standard deviation {float(scales[unusable][0])!r}); rescale it before building FairData")
        return dict(zip(self.numeric_, means.tolist())), dict(zip(self.numeric_, scales.tolist()))

    # -- transforming --------------------------------------------------------------------
    def _check_fitted(self) -> None:
        if not self._fitted:
            raise ValueError("preprocessor: not fitted; call fit(df) first (or use fit_transform)")

    def transform(self, df: pd.DataFrame, argument: str = "df") -> tuple[np.ndarray, list[str]]:
        """Encode ``df`` with the fitted statistics (``argument``: the name its error messages give ``df``).

        Returns
        -------
        X : np.ndarray, float32, shape (len(df), n_features)
        feature_names : list of str
        """
        self._check_fitted()
        check_frame(df, argument)
        check_columns_exist(df, self.columns_, argument)
        require_finite_columns(df, self.columns_, argument, allow_missing=self.keeps_missing)
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
            out[:, numeric_positions] = self._standardised(df, argument)
        return out, list(self.feature_names_)

    def _standardised(self, df: pd.DataFrame, argument: str) -> np.ndarray:
        """``(x - mean) / scale`` of the numeric columns (float64), ``ValueError`` beyond the float32 range."""
        values = df[self.numeric_].to_numpy(dtype=np.float64, na_value=np.nan)
        means = np.array([self.means_[c] for c in self.numeric_])
        scales = np.array([self.scales_[c] for c in self.numeric_])
        with np.errstate(over="ignore", invalid="ignore"):
            z = (values - means) / scales
            overflow = ~np.isfinite(z)  # x - mean beyond float64 (e.g. 1.7e308 - (-1.7e308))
            if overflow.any():
                z[overflow] = (values / scales - means / scales)[overflow]
        too_large = ~(np.abs(z) <= np.finfo(np.float32).max) & ~np.isnan(values)  # a missing value stays NaN
        if too_large.any():
            row, j = (int(k[0]) for k in np.nonzero(too_large))
            column, label = self.numeric_[j], df.index[row]
            label = label.item() if hasattr(label, "item") else label
            what = ("standardised with the training mean {:.6g} and standard deviation {:.6g}, it is {:.6g}"
                    .format(means[j], scales[j], z[row, j]) if self.standardize else "passed through unscaled")
            raise ValueError(
                f"{argument}: column {self.shown(column)!r} has the value {float(values[row, j])!r} at index "
                f"{label!r}; {what}, "
                f"beyond the float32 range of the model inputs (about 3.4e38). Rescale the column (e.g. log or "
                f"divide by a constant) or drop the row"
            )
        return z

    def _one_hot_into(self, out: np.ndarray, offset: int, column: str, series: pd.Series) -> None:
        """Write the indicators of ``column`` into ``out[:, offset:offset+K]`` (zeros if unseen or missing)."""
        codes = level_codes(series, self.levels_[column])
        seen = codes >= 0
        rows = np.flatnonzero(seen)
        out[rows, offset + codes[seen]] = 1.0
        n_unseen = int((~seen & ~series.isna().to_numpy()).sum())  # missing values (missing="keep") are no level
        if n_unseen:
            examples = pd.unique(series[~seen].dropna().to_numpy())[:5].tolist()
            logger.warning(
                "column %r: %d rows have levels not seen at fit time (e.g. %s); they get an all-zero one-hot row%s",
                self.shown(column), n_unseen, examples, _spacing_hint(examples, self.levels_[column]),
            )

    def renamed(self, names: Sequence[str]) -> "Preprocessor":
        """A fitted copy whose input columns are called ``names`` (one per column of ``columns_``, in its
        order) with the same statistics and levels: it encodes a frame with those columns as this one
        encodes its own, and its messages name them (an estimator's preprocessor holds internal names)."""
        self._check_fitted()
        names = [str(name) for name in names]
        if len(names) != len(self.columns_) or len(set(names)) != len(names):
            raise ValueError(f"names: expected {len(self.columns_)} distinct names, got {short_list(names)}")
        new = dict(zip(self.columns_, names))
        categorical = [new[c] for c in self.categorical_]
        twin = Preprocessor(columns=names, categorical=categorical, standardize=self.standardize,
                            missing=self._missing_mode)
        twin.columns_ = names
        twin.categorical_ = categorical
        twin.numeric_ = [new[c] for c in self.numeric_]
        twin.means_ = {new[c]: v for c, v in self.means_.items()}
        twin.scales_ = {new[c]: v for c, v in self.scales_.items()}
        twin.levels_ = {new[c]: list(v) for c, v in self.levels_.items()}
        twin.feature_names_ = _feature_names(names, twin.levels_)
        twin._fitted = True
        return twin

    def shown(self, column: str) -> str:
        """The name messages show for ``column`` (:attr:`display_names`, else the column's own)."""
        return getattr(self, "display_names", {}).get(column, column)  # absent in preprocessors saved before it

    def fit_transform(self, df: pd.DataFrame) -> tuple[np.ndarray, list[str]]:
        """:meth:`fit` on ``df``, then :meth:`transform` it."""
        return self.fit(df).transform(df)

    def clone(self) -> "Preprocessor":
        """An unfitted copy with the same configuration (the fitted column roles if fitted)."""
        twin = (Preprocessor(self.columns_, self.categorical_, self.standardize, self._missing_mode) if self._fitted
                else Preprocessor(self.columns, self.categorical, self.standardize, self._missing_mode))
        twin.display_names = dict(getattr(self, "display_names", {}))
        return twin

    def __repr__(self) -> str:
        if not self._fitted:
            return (f"Preprocessor(columns={self.columns!r}, categorical={self.categorical!r}, "
                    f"standardize={self.standardize}" + (", missing='keep')" if self.keeps_missing else ")"))
        return (f"Preprocessor(fitted: {len(self.numeric_)} numeric, {len(self.categorical_)} categorical "
                f"-> {len(self.feature_names_)} features)")


def _spacing_hint(unseen: Sequence[Any], levels: Sequence[Any]) -> str:
    """``; ' Private' was seen: the levels differ by spaces around them`` where an unseen level is a training
    level once spaces around both are ignored (a file written with ``skipinitialspace`` or without it), else
    empty: every row of such a file would otherwise be encoded as unseen."""
    matches = [level for value in unseen for level in spaced_twins(value, levels)]
    if not matches:
        return ""
    return (f"; seen at fit time: {', '.join(repr(m) for m in matches[:3])}, the same values with spaces around "
            "them (strip or add the spaces in one of the files)")

