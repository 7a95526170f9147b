"""Helpers shared by the benchmark scripts: data lookup, output folders, tables."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Iterable

import pandas as pd

from fairopt.experiments.configs import markdown_table

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # scripts run as ``python benchmarks/<script>.py`` import benchmarks.papers
    sys.path.append(str(ROOT))
DEFAULT_DATA = (ROOT / ".." / "shared" / "data").resolve()
DEFAULT_OUT = ROOT / "benchmarks" / "results"


def data_dir(arg: str | None) -> Path:
    """The benchmark data directory: the argument, $FAIROPT_DATA, or ../shared/data."""
    path = Path(arg or os.environ.get("FAIROPT_DATA") or DEFAULT_DATA)
    if not path.is_dir():
        raise SystemExit(f"data directory {path} not found: pass --data-dir or set FAIROPT_DATA")
    return path


def out_dir(arg: str | None) -> Path:
    path = Path(arg) if arg else DEFAULT_OUT
    path.mkdir(parents=True, exist_ok=True)
    return path


def write_table(rows: Iterable[dict], out: Path, stem: str) -> pd.DataFrame:
    """Write rows as CSV and JSON next to each other; return the DataFrame."""
    df = pd.DataFrame(list(rows))
    df.to_csv(out / f"{stem}.csv", index=False)
    (out / f"{stem}.json").write_text(json.dumps(df.to_dict(orient="records"), indent=1, default=str))
    return df


def markdown(df: pd.DataFrame, floatfmt: str = ".4f") -> str:
    """A GitHub markdown table (:func:`fairopt.experiments.configs.markdown_table`)."""
    return markdown_table(df, floatfmt=floatfmt)


def commit() -> str:
    """The checkout's commit (short hash, "+" when tracked files have changes), for results files."""
    head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=ROOT)
    dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], capture_output=True, text=True,
                           cwd=ROOT)
    return (head.stdout.strip() or "unknown") + ("+" if dirty.stdout.strip() else "")
