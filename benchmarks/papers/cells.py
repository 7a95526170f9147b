"""Resumable experiment grids: one JSON file per finished cell.

A benchmark that runs many independent cells (a data set x method x bound x seed of
:mod:`benchmarks.papers.peers`, a task x model x fold of
:mod:`benchmarks.papers.gedi_tables`) stores each finished cell's record as one JSON file;
a rerun skips the cells whose file exists, so an interrupted run resumes where it stopped.
:func:`write_cell` writes atomically (a temporary file renamed into place), so an
interruption never leaves a half-written cell that a rerun would take for a finished one.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Iterable, Mapping

import pandas as pd

__all__ = ["write_cell", "read_cells"]


def write_cell(path: str | Path, record: Mapping) -> Path:
    """Write ``record`` as JSON to ``path`` atomically (``path.tmp`` then renamed); returns the path.

    Values that JSON does not know (numpy scalars) are written as floats.
    """
    path = Path(path)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(dict(record), indent=1, default=float))
    tmp.replace(path)  # atomic on POSIX: a reader sees the old state or the whole new file
    return path


def read_cells(paths: Iterable[str | Path]) -> pd.DataFrame:
    """The records of the cell files among ``paths`` that exist, one row each (in order)."""
    rows = [json.loads(Path(p).read_text()) for p in paths if Path(p).is_file()]
    return pd.DataFrame(rows)
