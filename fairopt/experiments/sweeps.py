"""Parallel, resumable sweeps: the machinery behind ``compare(n_jobs=..., results_path=...)``.

A sweep is a list of independent runs, each with a stable text key (:func:`run_key`).
:func:`seeded` makes a run's result depend on its seed only (not on the worker, ``n_jobs`` or
the order); :class:`ResultStore` is an append-only CSV of finished runs read back to skip them
after a restart; :func:`execute` runs tasks through :class:`joblib.Parallel` (the backend of the
caller's ``joblib.parallel_config``) and hands each result over as soon as it finishes, so a kill
loses only the runs in flight. Fairness-agnostic.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Sequence

import joblib
import pandas as pd
import torch

__all__ = ["KEY_COLUMN", "data_fingerprint", "run_key", "seeded", "ResultStore", "execute", "check_n_jobs",
           "check_threads"]

logger = logging.getLogger(__name__)

# pandas < 3 parses floats exactly only when asked (pandas 3 always does, and deprecates the option)
_ROUND_TRIP = {"float_precision": "round_trip"} if int(pd.__version__.split(".")[0]) < 3 else {}

#: Name of the run-key column of a results CSV.
KEY_COLUMN = "run_key"


def _format_value(value: float | None) -> str:
    """A hyper-parameter value as text that round-trips (``repr`` of the float; ``None``)."""
    return "None" if value is None else repr(float(value))


def run_key(method: str, hyperparameter: str | None, value: float | None, seed: int, fold: int, *,
            folds: int, split_seed: int, test_size: float, threshold: float, data: str | None = None) -> str:
    """The stable key of one run of a sweep.

    ``"<method>|<hyperparameter>=<value>|seed=<seed>|fold=<fold>/<folds>|split_seed=<s>|
    test_size=<t>|threshold=<thr>"`` with floats written by ``repr``, so it is the same in every
    process, and ``"|data=<fingerprint>"`` where ``data`` is given (:func:`data_fingerprint`). The split
    settings and the data are part of it, so a file reused with other splits or other rows does not pass
    off old rows as new runs; method options are not.
    """
    test = "na" if folds > 1 else repr(float(test_size))
    key = (f"{method}|{hyperparameter}={_format_value(value)}|seed={int(seed)}|fold={int(fold)}/{int(folds)}"
           f"|split_seed={int(split_seed)}|test_size={test}|threshold={float(threshold)!r}")
    return key if data is None else f"{key}|data={data}"


def data_fingerprint(data: Any) -> str:
    """The first 12 hex digits of a SHA-1 over the bytes of the rows a sweep trains on: ``X``, ``y``, the
    row weights and every sensitive column (by name). Two data sets of the same shape but other values get
    other fingerprints, so a resumed sweep (:func:`run_key`) never returns another data set's rows."""
    digest = hashlib.sha1()
    tensors = [("X", data.X), ("y", data.y), ("weights", getattr(data, "weights", None))]
    sensitive = getattr(data, "sensitive", None) or {}
    tensors += sorted((f"sensitive:{name}", column) for name, column in sensitive.items())
    for name, tensor in tensors:
        if tensor is None:
            continue
        values = torch.as_tensor(tensor).detach()
        digest.update(f"{name}:{values.dtype}:{tuple(values.shape)}".encode())
        values = values.reshape(1) if values.dim() == 0 else values
        for start in range(0, values.shape[0], _FINGERPRINT_ROWS):  # memory-mapped rows are never read whole
            digest.update(values[start:start + _FINGERPRINT_ROWS].cpu().contiguous().numpy().tobytes())
    return digest.hexdigest()[:12]


#: Rows hashed at a time by :func:`data_fingerprint` (a memory-mapped ``X`` is never read whole).
_FINGERPRINT_ROWS = 65_536


@contextlib.contextmanager
def seeded(seed: int, threads: int | None = None) -> Iterator[None]:
    """Run the body with torch's CPU generator seeded by ``seed`` inside
    :func:`torch.random.fork_rng`, the caller's state unchanged on exit.

    ``threads`` sets ``torch.set_num_threads`` for the body: the last bits of multi-threaded
    reductions depend on the thread count, which differs between a parent and joblib workers.
    """
    before = torch.get_num_threads()
    try:
        if threads is not None:
            torch.set_num_threads(threads)
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(int(seed))
            yield
    finally:
        if threads is not None:
            torch.set_num_threads(before)


def check_n_jobs(n_jobs: Any) -> int | None:
    """Validate joblib's ``n_jobs`` (a non-zero integer, negative counts from the CPU count, or None)."""
    if n_jobs is None:
        return None
    if isinstance(n_jobs, bool) or not isinstance(n_jobs, int) or n_jobs == 0:
        raise ValueError(f"n_jobs: expected a non-zero integer or None, got {n_jobs!r}")
    return n_jobs


def check_threads(threads: Any) -> int | None:
    """Validate a torch thread count for :func:`seeded` (a positive integer or None)."""
    if threads is not None and (isinstance(threads, bool) or not isinstance(threads, int) or threads < 1):
        raise ValueError(f"torch_threads: expected a positive integer or None, got {threads!r}")
    return threads


class ResultStore:
    """An append-only CSV of finished runs, keyed by :data:`KEY_COLUMN` (the last column).

    Each run's ``rows_per_run`` rows are appended in one write; :meth:`load` drops what an
    interrupted write leaves (a partial last line, an incomplete run) so those runs run again. One
    writer at a time. Floats read back exactly (``float_precision="round_trip"`` before pandas 3); with
    ``check_numbers`` a non-number in a number column is a ValueError naming file, line, run and
    column, so a sweep never resumes from a damaged row.

    Parameters
    ----------
    path : str or os.PathLike
        The CSV file (created on the first append; its folder must exist).
    rows_per_run : int
        Rows that make up one complete run.
    text_columns : sequence of str
        Text columns that may be None throughout (read back as None, not NaN).
    check_numbers : bool, default False
        Whether all other columns but the key must hold numbers.
    """

    def __init__(self, path: str | os.PathLike, rows_per_run: int, text_columns: Sequence[str] = (),
                 check_numbers: bool = False) -> None:
        path = Path(path)
        if not path.parent.is_dir():
            raise ValueError(f"results_path: folder {str(path.parent)!r} of {str(path)!r} does not exist")
        if path.exists() and not path.is_file():
            raise ValueError(f"results_path: {str(path)!r} exists and is not a file")
        if rows_per_run < 1:
            raise ValueError(f"rows_per_run: expected a positive integer, got {rows_per_run!r}")
        self.path = path
        self.rows_per_run = rows_per_run
        self.text_columns = tuple(text_columns)
        self.check_numbers = bool(check_numbers)

    def _read(self) -> pd.DataFrame:
        if not self.path.exists() or self.path.stat().st_size == 0:
            return pd.DataFrame(columns=[KEY_COLUMN])
        text = self.path.read_bytes()
        if not text.endswith(b"\n"):  # an interrupted append: drop the partial line
            logger.warning("%s: dropping an incomplete last line", self.path)
            self.path.write_bytes(text[: text.rfind(b"\n") + 1])
            if self.path.stat().st_size == 0:
                return pd.DataFrame(columns=[KEY_COLUMN])
        # only an empty field is missing (to_csv writes NaN and None so): a method named "None" stays text
        frame = pd.read_csv(self.path, keep_default_na=False, na_values=[""], **_ROUND_TRIP)
        if KEY_COLUMN not in frame.columns:
            raise ValueError(f"results_path: {str(self.path)!r} has no {KEY_COLUMN!r} column; "
                             "it was not written by a resumable sweep")
        for column in self.text_columns:  # a text column with no text (all None) is not a float column
            if column in frame.columns and frame[column].isna().all():
                frame[column] = pd.Series([None] * len(frame), index=frame.index, dtype=object)
        if self.check_numbers:
            self._require_numbers(frame)
        return frame

    def _require_numbers(self, frame: pd.DataFrame) -> None:
        """Refuse a file whose number columns hold text; make a column of numbers written as text float."""
        for column in frame.columns:
            if column == KEY_COLUMN or column in self.text_columns or pd.api.types.is_numeric_dtype(frame[column]):
                continue
            cells = frame[column]
            for position, cell in enumerate(cells.tolist()):
                if pd.isna(cell) or isinstance(cell, (int, float)):
                    continue
                try:
                    float(str(cell))
                except ValueError:
                    key = frame[KEY_COLUMN].iloc[position]
                    raise ValueError(
                        f"results_path: {str(self.path)!r} line {position + 2} (run {key!r}) has the value "
                        f"{cell!r} in column {column!r}, which holds numbers; the file is damaged or was not "
                        "written by this sweep. Correct or delete that run's rows (or use a new file)"
                    ) from None
            frame[column] = pd.Series([float(v) if not pd.isna(v) else float("nan") for v in cells.tolist()],
                                      index=frame.index, dtype=float)

    def load(self) -> dict[str, pd.DataFrame]:
        """The complete runs in the file, ``key -> its rows`` (in file order); repairs the file."""
        frame = self._read()
        counts = frame[KEY_COLUMN].value_counts()
        complete = set(counts.index[counts == self.rows_per_run])
        if len(complete) < len(counts):
            logger.warning("%s: dropping %d incomplete or duplicated run(s); they will run again",
                           self.path, len(counts) - len(complete))
            frame = frame[frame[KEY_COLUMN].isin(complete)]
            self._write(frame, mode="w")
        return {key: rows.reset_index(drop=True) for key, rows in frame.groupby(KEY_COLUMN, sort=False)}

    def _header(self) -> list[str] | None:
        if not self.path.exists() or self.path.stat().st_size == 0:
            return None
        return list(pd.read_csv(self.path, nrows=0).columns)

    def _write(self, frame: pd.DataFrame, mode: str) -> None:
        """Write ``frame`` (key column last) in one call: ``mode`` "w" (atomic, with header) or "a"."""
        columns = [c for c in frame.columns if c != KEY_COLUMN] + [KEY_COLUMN]
        text = frame[columns].to_csv(index=False, header=(mode == "w"))
        if mode == "w":
            tmp = self.path.with_name(self.path.name + ".tmp")
            tmp.write_text(text)
            os.replace(tmp, self.path)
        else:
            with open(self.path, "a") as handle:
                handle.write(text)
                handle.flush()
                os.fsync(handle.fileno())

    def append(self, key: str, rows: list[dict]) -> None:
        """Append the rows of the finished run ``key`` (a new column rewrites the file with it)."""
        if len(rows) != self.rows_per_run:
            raise ValueError(f"rows: run {key!r} has {len(rows)} rows, expected {self.rows_per_run}")
        new = pd.DataFrame(rows).assign(**{KEY_COLUMN: key})
        header = self._header()
        if header is None:
            self._write(new, mode="w")
        elif set(new.columns) <= set(header):
            self._write(new.reindex(columns=header), mode="a")
        else:  # rows with a column the file lacks: rewrite it with the union of the columns
            old = self._read()
            self._write(pd.concat([old, new], ignore_index=True), mode="w")


def execute(function: Callable[..., Any], tasks: Iterable[tuple], n_jobs: int | None,
            on_result: Callable[[Any], None]) -> None:
    """Run ``function(*task)`` for every task through joblib, calling ``on_result`` on each result as
    it finishes (``return_as="generator_unordered"``, ``batch_size=1``; a backend that cannot stream
    hands them over at the end). A run's exception propagates after the earlier results were handed over.
    """
    tasks = list(tasks)
    if not tasks:
        return
    delayed = (joblib.delayed(function)(*task) for task in tasks)
    try:
        parallel = joblib.Parallel(n_jobs=n_jobs, return_as="generator_unordered", batch_size=1)
    except ValueError as exc:  # the backend cannot stream results
        logger.warning("joblib backend cannot stream results (%s); results are saved when all runs end", exc)
        parallel = joblib.Parallel(n_jobs=n_jobs, return_as="list", batch_size=1)
    for result in parallel(delayed):
        on_result(result)

