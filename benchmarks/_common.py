"""Helpers shared by the benchmark scripts: data lookup, output folders, tables."""

from __future__ import annotations

import argparse
import json
import logging
import os
import subprocess
import sys
import time
import warnings
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator

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


def provenance(script: str, argv: list[str] | None, commits: Iterable[str]) -> str:
    """The results file's provenance line: this checkout's commit, the command that wrote the file
    (``python benchmarks/<script> <argv>``, ``sys.argv`` when ``argv`` is None) and the commits of
    the cached runs it summarises."""
    command = f"python benchmarks/{script} " + " ".join(sys.argv[1:] if argv is None else argv)
    return (f"commit {commit()}; last command `{command.strip()}`; runs from commits "
            f"{', '.join(sorted(set(commits)))}.")


def grid_parser(description: str, datasets: list[str], seeds: list[int], out: Path,
                methods: list[str] | None = None) -> argparse.ArgumentParser:
    """The options of a grid of cached runs: ``--datasets`` (choices and default ``datasets``),
    ``--seeds``, ``--methods`` (when ``methods`` is given), ``--data-dir``, ``--out`` and
    ``--threads``; a script adds its own options to the parser it gets."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--datasets", nargs="+", default=list(datasets), choices=list(datasets))
    parser.add_argument("--seeds", nargs="+", type=int, default=list(seeds))
    if methods is not None:
        parser.add_argument("--methods", nargs="+", default=list(methods), choices=list(methods))
    parser.add_argument("--data-dir", default=str(DEFAULT_DATA))
    parser.add_argument("--out", default=str(out))
    parser.add_argument("--threads", type=int, default=1, help="BLAS/OpenMP/torch threads of every method")
    return parser


def task_grid_parser(description: str, tasks: Iterable[str], out: Path) -> argparse.ArgumentParser:
    """The options of a grid of estimator fits per task run in worker processes: ``--data-dir`` (None:
    :func:`data_dir`'s default), ``--tasks`` (choices and default ``tasks``), ``--seeds`` (0 1 2), ``--jobs``
    and ``--out``; a script adds its own options to the parser it gets."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--data-dir", default=None)
    parser.add_argument("--tasks", nargs="+", default=list(tasks), choices=list(tasks))
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    parser.add_argument("--jobs", type=int, default=1)
    parser.add_argument("--out", default=str(out))
    return parser


def write_grid(out: Path, runs: list[dict], order: Callable[[dict], tuple], page: str) -> None:
    """A grid's results in ``out`` (created): ``runs.json`` (every run, sorted by ``order``) and
    ``grid.md`` (``page``, also printed)."""
    out.mkdir(parents=True, exist_ok=True)
    (out / "runs.json").write_text(json.dumps(sorted(runs, key=order), indent=1))
    (out / "grid.md").write_text(page)
    print(page)


def pooled(work: Callable[[dict], dict], jobs: list[dict], processes: int) -> Iterator[tuple[int, dict]]:
    """``(i, work(job))`` for every job, in the order they finish, from ``processes`` spawned worker
    processes (each imports its own torch: no fork of a process with threads)."""
    from multiprocessing import get_context

    with get_context("spawn").Pool(processes) as pool:
        yield from enumerate(pool.imap_unordered(work, jobs), 1)


def pooled_runs(work: Callable[[dict], dict], jobs: list[dict], processes: int, logger: logging.Logger,
                describe: Callable[[dict], str]) -> list[dict]:
    """Every job's ``work(job)`` (:func:`pooled`) with the checkout's ``commit``, each logged as it finishes
    (``[i/n] describe(run)``)."""
    runs = []
    for i, run in pooled(work, jobs, processes):
        runs.append({**run, "commit": commit()})
        logger.info("[%d/%d] %s", i, len(jobs), describe(run))
    return runs


@contextmanager
def limited_threads(threads: int, logger: logging.Logger) -> Iterator[None]:
    """Run a grid with ``threads`` torch and BLAS/OpenMP threads (on a shared machine OpenMP's
    busy-waiting threads otherwise dominate fit times), ``logger`` at INFO and the rest at WARNING."""
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    logger.setLevel(logging.INFO)
    import torch
    from threadpoolctl import threadpool_limits

    torch.set_num_threads(threads)
    with threadpool_limits(limits=threads):
        yield


def library_warnings(caught: Iterable[warnings.WarningMessage]) -> list[str]:
    """The sorted class names of the fairopt and solvers warnings among ``caught`` (what a grid's row lists)."""
    return sorted({w.category.__name__ for w in caught if w.category.__name__.endswith("Warning")
                   and w.category.__module__.split(".")[0] in ("fairopt", "solvers")})


def timed_fit(estimator: Any, data: Any) -> tuple[float, list[str]]:
    """``estimator.fit(data)`` with every warning recorded: its wall seconds and :func:`library_warnings`."""
    start = time.perf_counter()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        estimator.fit(data)
    return time.perf_counter() - start, library_warnings(caught)
