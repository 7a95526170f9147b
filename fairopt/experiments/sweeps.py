"""Parallel, resumable sweeps: the machinery behind ``compare(n_jobs=..., results_path=...)``.

A sweep is a list of independent *runs* (one method x hyper-parameter value x seed x fold),
each identified by a stable text key (:func:`run_key`). This module
is fairness-agnostic; it provides

- :func:`run_key`: the key of a run, a pure function of its identifiers and of the sweep
  settings that change its result (number of folds, split seed, test share, threshold);
- :func:`seeded`: a context in which a run seeds torch from its own seed (and optionally
  fixes torch's thread count) without touching the caller's global RNG state, so a run's
  result depends on its seed only, not on the worker, ``n_jobs`` or the execution order;
- :class:`ResultStore`: an append-only CSV of finished runs (a ``run_key`` column, all rows
  of a run written at once), read back to skip finished runs after a restart;
- :func:`execute`: run tasks through :class:`joblib.Parallel`, handing each result to a
  callback as soon as its run finishes (so a kill loses only the runs in flight).

Because :func:`execute` goes through joblib, the backend is chosen by the caller's
``joblib.parallel_config`` (``"loky"`` processes by default for ``n_jobs > 1``; ``"dask"``
or ``"ray"`` with their joblib integrations).
"""

from __future__ import annotations

import contextlib
import logging
import os
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Sequence

import joblib
import pandas as pd
import torch

__all__ = ["KEY_COLUMN", "run_key", "seeded", "ResultStore", "execute", "check_n_jobs", "check_threads"]

logger = logging.getLogger(__name__)

# pandas < 3 parses floats exactly only when asked (pandas 3 always does, and deprecates the option)
_ROUND_TRIP = {"float_precision": "round_trip"} if int(pd.__version__.split(".")[0]) < 3 else {}

#: Name of the run-key column of a results CSV.
KEY_COLUMN = "run_key"


def _format_value(value: float | None) -> str:
    """A hyper-parameter value as text that round-trips (``repr`` of the float; ``None``)."""
    return "None" if value is None else repr(float(value))


def run_key(method: str, hyperparameter: str | None, value: float | None, seed: int, fold: int, *,
            folds: int, split_seed: int, test_size: float, threshold: float) -> str:
    """The stable key of one run of a sweep.

    ``"<method>|<hyperparameter>=<value>|seed=<seed>|fold=<fold>/<folds>|split_seed=<s>|
    test_size=<t>|threshold=<thr>"`` with floats written by ``repr`` (shortest round-trip
    text), so the key of a run is the same in every process and Python session. The split
    settings are part of the key: a results file reused with other splits or another decision
    threshold does not pass off old rows as new runs. Method options (epochs, learning rate)
    and the data are *not* part of the key: use a new results file when they change.
    """
    test = "na" if folds > 1 else repr(float(test_size))
    return (f"{method}|{hyperparameter}={_format_value(value)}|seed={int(seed)}|fold={int(fold)}/{int(folds)}"
            f"|split_seed={int(split_seed)}|test_size={test}|threshold={float(threshold)!r}")


@contextlib.contextmanager
def seeded(seed: int, threads: int | None = None) -> Iterator[None]:
    """Run the body with torch's CPU generator seeded by ``seed`` and restored afterwards.

    ``torch.manual_seed(seed)`` inside :func:`torch.random.fork_rng`: whatever the body draws
    from torch's global generator depends on ``seed`` only, and the caller's generator state
    is unchanged on exit. ``threads`` (optional) sets ``torch.set_num_threads`` for the body
    and restores the previous value: results of multi-threaded reductions can differ in the
    last bits with the thread count, which differs between a parent process and joblib
    workers, so a fixed count makes runs bit-identical for every ``n_jobs``.
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

    Each finished run's rows (``rows_per_run`` of them, e.g. its train and test rows) are
    appended in one write. :meth:`load` returns the complete runs; it repairs what an
    interrupted write can leave behind (a last line without newline, a run with fewer than
    ``rows_per_run`` rows) by rewriting the file without it, so those runs are simply run
    again. One writer at a time: the caller (the parent process of a sweep) appends results
    as its workers return them; two sweeps must not share a file concurrently. Floats are
    parsed exactly (``float_precision="round_trip"`` before pandas 3): every value read back
    is the float that was written (only an empty field is missing: a text "None" stays text).
    With ``check_numbers=True`` every column other than the key and ``text_columns`` holds
    numbers: a cell there that is not a number (a hand edit, a file written by another tool)
    is a ValueError naming the file, the line, the run key and the column, so a sweep never
    resumes from a damaged row.

    Parameters
    ----------
    path : str or os.PathLike
        The CSV file (created on the first append; its folder must exist).
    rows_per_run : int
        Rows that make up one complete run.
    text_columns : sequence of str
        Columns of text that may be None throughout (read back as None, not as a float NaN).
    check_numbers : bool, default False
        Whether all the other columns (but the key) must hold numbers (numbers written as
        text, such as ``nan``, are read as floats).
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
        """Refuse a file whose number columns hold text; make such a column float when all
        its cells are numbers written as text (e.g. ``nan``)."""
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
        """Write ``frame`` (the key column last) in one call: ``mode`` "w" (with header) or "a"."""
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
    """Run ``function(*task)`` for every task through joblib; ``on_result`` each result as it comes.

    Results are handed over in completion order (``return_as="generator_unordered"``), one
    run at a time (``batch_size=1``), so the caller can persist each finished run at once;
    a backend without generator support (joblib's ``"multiprocessing"``) hands them over
    when all have finished. The backend is the caller's ``joblib.parallel_config`` (default:
    loky processes for ``n_jobs > 1``, in-process for ``n_jobs=1``). An exception of a run
    propagates after the results delivered before it were handed to ``on_result``.
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

