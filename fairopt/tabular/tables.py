"""Reading a user's table (CSV, TSV or parquet) and the saved-model file layout of
:mod:`fairopt.tabular`."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

import numpy as np
import pandas as pd

from fairopt.data.frames import close_names, short_list
from fairopt.persistence import SavedModel, load
from fairopt.status import MET_TOL

logger = logging.getLogger("fairopt.tabular")

#: ``metadata["layout"]`` of a model written by :func:`fairopt.tabular.write_run`.
LAYOUT = "fairopt-table/1"
#: Probability of the positive class above which a row gets it (the constraints were
#: enforced for this decision: a positive logit).
THRESHOLD = 0.5
#: Exact violation above which a constraint is reported unmet (the estimators' default).
VIOLATION_TOL = MET_TOL
_CSV_SUFFIXES = (".csv", ".txt")
_TSV_SUFFIXES = (".tsv", ".tab")
_PARQUET_SUFFIXES = (".parquet", ".pq")
_COMPRESSION = (".gz", ".bz2", ".zip", ".xz", ".zst")



# --------------------------------------------------------------------------------------
# reading tables
# --------------------------------------------------------------------------------------
def _file_kind(path: Path) -> str:
    suffixes = [s.lower() for s in path.suffixes]
    if suffixes and suffixes[-1] in _COMPRESSION:
        suffixes = suffixes[:-1]
    last = suffixes[-1] if suffixes else ""
    if last in _CSV_SUFFIXES:
        return "csv"
    if last in _TSV_SUFFIXES:
        return "tsv"
    if last in _PARQUET_SUFFIXES:
        return "parquet"
    raise ValueError(f"{path}: unknown file type {last or '(no suffix)'!r}; expected .csv, .tsv or .parquet")


def read_table(path: str | Path, *, text_columns: Sequence[str] = (), flag: str = "--data", sep: str | None = None,
               decimal: str = ".", thousands: str | None = None) -> pd.DataFrame:
    """The rows of a CSV (``.csv``, ``.tsv``, optionally compressed) or parquet file.

    ``text_columns`` are read as text from a CSV (a categorical column whose levels look
    like numbers, e.g. ``"007"``, keeps them). ``sep`` (default: tab for ``.tsv``, else ``,``, or
    ``;`` when the header holds semicolons and no comma: a spreadsheet's CSV in a locale with a decimal
    comma), ``decimal`` and ``thousands`` are pandas' (``--sep``, ``--decimal``, ``--thousands``:
    ``--decimal , --thousands .`` reads ``1.234,5`` as 1234.5). Errors name ``flag`` and the file.
    """
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"{flag}: no such file {str(path)!r}")
    if path.is_dir():
        raise ValueError(f"{flag}: {str(path)!r} is a directory; expected a .csv or .parquet file")
    try:
        kind = _file_kind(path)
    except ValueError as exc:
        raise ValueError(f"{flag}: {exc}") from None
    try:
        if kind == "parquet":
            try:
                frame = pd.read_parquet(path)
            except ImportError:
                raise ImportError(f"{flag}: reading {path.name} needs pyarrow (pip install pyarrow), or give a "
                                  "CSV file") from None
        else:
            sep, header = _separator_and_header(path, sep, "\t" if kind == "tsv" else ",")
            dtype = {c: str for c in text_columns if c in header}
            frame = pd.read_csv(path, sep=sep, dtype=dtype or None, decimal=decimal, thousands=thousands)
    except (pd.errors.EmptyDataError, pd.errors.ParserError, UnicodeDecodeError) as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise ValueError(f"{flag}: cannot read {str(path)!r} as {kind}: {first}") from None
    if len(frame) == 0:
        raise ValueError(f"{flag}: {str(path)!r} has no rows")
    frame.columns = [str(c) for c in frame.columns]
    if frame.columns.has_duplicates:
        duplicated = frame.columns[frame.columns.duplicated()].tolist()
        raise ValueError(f"{flag}: {str(path)!r} has duplicate column names {short_list(duplicated)}")
    logger.info("read %s: %d rows, %d columns", path, len(frame), frame.shape[1])
    return frame


def _separator_and_header(path: Path, sep: str | None, default: str) -> tuple[str, pd.Index]:
    """The CSV's separator and column names: ``sep`` when given, else ``default``, or ``;`` where a
    comma-separated header holds semicolons and no comma (one column named ``a;b;c`` otherwise; logged)."""
    header = pd.read_csv(path, sep=sep or default, nrows=0).columns
    if sep is None and default == "," and len(header) == 1 and ";" in str(header[0]):
        logger.info("%s: the header holds semicolons and no comma: read with --sep ';'", path.name)
        return ";", pd.read_csv(path, sep=";", nrows=0).columns
    return sep or default, header


def require_columns(frame: pd.DataFrame, names: Sequence[str], flag: str, source: str) -> None:
    """A ValueError starting ``<flag>:`` naming the ``names`` that ``frame`` (read from ``source``) lacks, with
    the columns it has and, where one is close (:func:`fairopt.data.frames.close_names`: another case, spaces
    around the name, a typo), "did you mean" it: the list of columns is cut after a dozen names."""
    missing = [n for n in names if n not in frame.columns]
    if missing:
        hint = _did_you_mean(missing, frame.columns.tolist())
        raise ValueError(f"{flag}: column(s) {short_list(missing)} not found in {source}; "
                         + (f"{hint} Its columns are " if hint else "its columns are ")
                         + short_list(frame.columns.tolist()))


def _did_you_mean(missing: Sequence[str], columns: list[str]) -> str:
    """``did you mean 'Age'?`` for the missing names with close columns (each named when several are
    missing), with a sentence when a column differs only by spaces around its name; empty without one."""
    hints, spaced = [], False
    for name in missing:
        close = close_names(name, columns)
        if close:
            hints.append(" or ".join(repr(c) for c in close) + (f" for {name!r}" if len(missing) > 1 else ""))
            spaced = spaced or any(c != c.strip() and c.strip() == str(name).strip() for c in close)
    if not hints:
        return ""
    note = " The file's column name holds spaces around it: quote it, spaces included." if spaced else ""
    return "did you mean " + ", ".join(hints) + "?" + note


def require_complete(frame: pd.DataFrame, names: Sequence[str], source: str,
                     advice: str = "drop or fill them first") -> None:
    """One error naming every used column with missing values, and ``advice``."""
    holes = {}
    for name in names:
        missing = frame[name].isna().to_numpy()
        if missing.any():
            holes[name] = (int(missing.sum()), int(np.flatnonzero(missing)[0]) + 1)
    if holes:
        listed = ", ".join(f"{name!r} ({count} rows, first data row {row}: line {row + 1} of a file with a header)"
                           for name, (count, row) in holes.items())
        raise ValueError(f"{source}: missing values in {listed}; {advice}")


def plain_value(value: Any) -> Any:
    return value.item() if hasattr(value, "item") else value


# --------------------------------------------------------------------------------------
# the saved model's description
# --------------------------------------------------------------------------------------
@dataclass
class TableModel:
    """What reading a table for a saved model needs (``metadata`` of :func:`write_run`).

    Attributes
    ----------
    saved : SavedModel
    target : str; task : {"binary", "regression"}
    classes : list or None (binary: negative label first)
    sensitive : list of str; include_sensitive : bool
    features : list of str, the raw input columns (the preprocessor's)
    ignored : list of str, columns left out at training (``--ignore``)
    text_columns : list of str, columns to read as text from a CSV
    """

    saved: SavedModel
    target: str
    task: str
    classes: list | None
    sensitive: list[str]
    include_sensitive: bool
    features: list[str]
    ignored: list[str] = field(default_factory=list)
    text_columns: list[str] = field(default_factory=list)

    @property
    def metadata(self) -> dict:
        return self.saved.metadata

    @property
    def positive(self) -> Any:
        return None if self.classes is None else self.classes[1]

    @property
    def discrete_sensitive(self) -> list[str]:
        """The sensitive columns with groups (binary or categorical, not continuous)."""
        kinds = (self.saved.schema or {}).get("sensitive_kinds") or {}
        return [name for name in self.sensitive if kinds.get(name, "categorical") != "continuous"]


def load_table_model(path: str | Path) -> TableModel:
    """:func:`fairopt.load` of a model written by ``fairopt train --data`` (ValueError for
    another kind of fairopt file)."""
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"MODEL: no such file {str(path)!r} (the model.fairopt that fairopt train wrote)")
    if path.is_dir():
        candidate = path / "model.fairopt"
        if not candidate.exists():
            raise ValueError(f"MODEL: {str(path)!r} is a directory without model.fairopt")
        path = candidate
    saved = load(path)
    meta = getattr(saved, "metadata", None) or {}
    if not isinstance(saved, SavedModel) or meta.get("layout") != LAYOUT or saved.preprocessor is None:
        advice = (" A fitted estimator saved with fairopt.save predicts in Python: fairopt.load(path).predict(X) "
                  "with a DataFrame of the columns it was fitted on" if type(saved).__name__ in ("FairClassifier",
                                                                                                 "FairRegressor")
                  else "")
        raise ValueError(f"MODEL: {str(path)!r} is a fairopt file but not a model written by fairopt train --data "
                         f"(it holds a {type(saved).__name__}); predict and report read the table layout that "
                         f"fairopt train writes.{advice}")
    return TableModel(saved=saved, target=meta["target"], task=meta["task"], classes=meta.get("classes"),
                      sensitive=list(meta["sensitive"]), include_sensitive=bool(meta["include_sensitive"]),
                      features=list(saved.preprocessor.columns_), ignored=list(meta.get("ignored", [])),
                      text_columns=list(meta.get("text_columns", [])))


