"""Side-by-side peer benchmark: fairopt's methods and peer libraries under ``DI >= delta``.

Every method is a small adapter ``fit_predict(train, test, delta, seed) -> dict`` that
trains on ``train`` (a :class:`Part`: the numpy feature matrix, the 0/1 target and the
0/1 sensitive attribute) and returns hard 0/1 predictions on both parts and the fit time.
All methods of a cell see the SAME seeded 70/30 split and the SAME feature matrix
(:meth:`fairopt.data.FairData.split`, preprocessor fitted on the training rows).

Registered adapters (:data:`ADAPTERS`):

- ``sqp-linear``, ``sqp-mlp``, ``lagrangian``, ``penalty``, ``moving-targets``:
  :class:`fairopt.FairClassifier` with ``("disparate_impact", s, delta)`` and the
  estimator's DEFAULT settings (whatever they are at run time);
- ``fairlearn-eg``: ``ExponentiatedGradient(LogisticRegression, DemographicParity(
  ratio_bound=sqrt(delta)))``, randomised predictions drawn with ``random_state=seed``;
- ``fairlearn-grid``: ``GridSearch`` with the same constraint (deterministic predictor);
- ``fairlearn-to``: ``ThresholdOptimizer(constraints="demographic_parity")`` over a
  LogisticRegression; it takes no ratio bound (it targets exact parity, so ``delta`` is
  ignored) and it uses ``s`` at prediction time;
- ``cooper``: a plain Lagrangian (simultaneous gradient descent-ascent) on a torch
  logistic model with the two smoothed DI rows ``delta p_b - p_a <= 0`` as inequality
  constraints, through ``cooper`` 1.x;
- ``seldonian``: the Seldonian engine (``seldonian-engine``) with a logistic model and
  the behavioural constraint ``min(PR|[g0]/PR|[g1], PR|[g1]/PR|[g0]) >= delta`` at 95 %
  confidence; it splits candidate/safety data itself and may return no solution ("NSF").

The adapters live in :mod:`benchmarks.papers.peer_adapters`; this module runs them on the
grid. The peers are optional. Install them with::

    pip install "fairopt[peers]"            # fairlearn, cooper-optim
    pip install --no-deps seldonian-engine==0.8.11
    pip install autograd cma graphviz       # what seldonian-engine really needs

(``seldonian-engine`` pins ``matplotlib==3.5.1``, which has no wheel for Python 3.11,
hence ``--no-deps``.) A method whose library cannot be imported is skipped with a logged
message.

The runner (:func:`run_grid`) caches one JSON file per cell ``(dataset, method, delta,
seed)`` under ``OUT/cells/``; a cell whose file exists is not rerun, so an interrupted run
resumes. It then writes ``OUT/peers.md``, ``OUT/peers.csv`` and ``OUT/tradeoff_<d>.png``.
``DI`` is :func:`fairopt.measures.disparate_impact` on hard predictions, accuracy is
``mean(yhat == y)``.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np
import pandas as pd

from benchmarks._common import commit
from benchmarks.papers.cells import read_cells, write_cell
from fairopt.experiments.configs import markdown_table
from benchmarks.papers.peer_adapters import ADAPTERS, Adapter, Part, PeerUnavailable, adapter, available_methods
from fairopt.measures import disparate_impact
from solvers.plotting import panel_axes

logger = logging.getLogger(__name__)

__all__ = [
    "ADAPTERS",
    "DATASETS",
    "DELTAS",
    "SEEDS",
    "QUICK_METHODS",
    "Part",
    "PeerUnavailable",
    "PeersResult",
    "adapter",
    "available_methods",
    "load_binary",
    "prepare",
    "sample_rows",
    "cell_metrics",
    "run_grid",
    "summary_table",
    "plot_tradeoffs",
    "main",
]

DATASETS = ["adult", "dutch", "law", "acsincome", "compas"]
DELTAS = [0.6, 0.7, 0.8, 0.9]
SEEDS = [0, 1, 2]
QUICK_METHODS = ["sqp-linear", "sqp-mlp", "fairlearn-eg", "fairlearn-to", "cooper"]
TEST_SIZE = 0.3
TOLERANCE = 0.005
TABLE_COLUMNS = ["dataset", "method", "delta", "train DI", "test DI", "train acc", "test acc", "time s",
                 "seeds", f"train DI >= delta-{TOLERANCE:g}", "note"]


# --------------------------------------------------------------------------------------
# data
# --------------------------------------------------------------------------------------
def sample_rows(data: Any, max_rows: int | None, seed: int) -> Any:
    """``data`` itself, or with ``max_rows`` below its size a seeded sample of that many of its rows (in
    their order): the quick checks' subsample of every grid that splits after it."""
    if max_rows is None or max_rows >= len(data):
        return data
    import torch

    rows = np.sort(np.random.default_rng(seed).choice(len(data), size=max_rows, replace=False))
    return data.subset(torch.from_numpy(rows))


def load_binary(dataset: str, data_dir: str | None, include_sensitive: bool = False) -> Any:
    """FairData of ``dataset`` with one binary sensitive attribute (a model input only with
    ``include_sensitive``).

    COMPAS' default ``race`` is categorical (4 levels): it is replaced by the binary
    grouping African-American vs other (the grouping of ProPublica's analysis).
    """
    from fairopt import datasets
    from fairopt.data import FairData

    if dataset == "compas":
        frame, spec = datasets.load_frame("compas", data_dir)
        frame = frame.copy()
        frame["race"] = np.where(frame["race"] == "African-American", "African-American", "Other")
        spec["sensitive_kinds"] = {"race": "binary"}
        spec["include_sensitive"] = include_sensitive
        data = FairData.from_frame(frame, **spec)
    else:
        data = datasets.load(dataset, data_dir=data_dir, include_sensitive=include_sensitive)
    name = data.sensitive_names[0]
    if data.sensitive_kinds[name] != "binary":
        raise ValueError(f"{dataset}: the default sensitive attribute {name!r} is {data.sensitive_kinds[name]}, "
                         "not binary")
    return data


@lru_cache(maxsize=4)
def prepare(dataset: str, seed: int, data_dir: str | None = None,
            max_rows: int | None = None, include_sensitive: bool = False,
            stratify: bool = True) -> tuple[Part, Part, dict]:
    """The seeded 70/30 split of ``dataset`` shared by every method of a cell.

    Parameters
    ----------
    dataset : str
        A :func:`fairopt.datasets.available` name with a binary task.
    seed : int
        Seed of the (stratified) split and of the optional row subsample.
    data_dir : str, optional
        Directory of the data files (Adult is embedded).
    max_rows : int, optional
        Seeded subsample of this many rows before the split (quick checks).
    include_sensitive : bool, default False
        Whether the sensitive attribute is a column of X (for every method alike).
    stratify : bool, default True
        Stratify the split by target x sensitive group (:meth:`FairData.split`); False: a
        seeded random split, in which every part's group and target counts vary.

    Returns
    -------
    train, test : Part
    info : dict
        ``sensitive`` (name), ``levels`` (labels of s=0 and s=1), ``n_features``.
    """
    data = sample_rows(load_binary(dataset, data_dir, include_sensitive), max_rows, seed)
    train, test = data.split(test_size=TEST_SIZE, seed=seed, stratify=stratify)
    name = data.sensitive_names[0]

    def part(d: Any) -> Part:
        return Part(d.X.cpu().numpy().astype(np.float32), d.y.cpu().numpy().astype(np.int64),
                    d.sensitive[name].cpu().numpy().astype(np.int64))

    info = {"sensitive": name, "levels": [str(v) for v in data.sensitive_levels[name]],
            "n_features": int(train.X.shape[1])}
    return part(train), part(test), info


def cell_metrics(pred: np.ndarray | None, y: np.ndarray, s: np.ndarray) -> dict:
    """``{"di": DI, "acc": accuracy, "rate": P(yhat=1)}`` of hard predictions (NaN if None)."""
    if pred is None:
        return {"di": float("nan"), "acc": float("nan"), "rate": float("nan")}
    pred = np.asarray(pred).reshape(-1)
    return {"di": float(disparate_impact(pred, s)), "acc": float(np.mean(pred == np.asarray(y))),
            "rate": float(np.mean(pred))}


# --------------------------------------------------------------------------------------
# the grid and its cache
# --------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Cell:
    """One run: a dataset, a method, a bound ``delta`` and a seed."""

    dataset: str
    method: str
    delta: float
    seed: int

    def filename(self, max_rows: int | None = None, include_sensitive: bool = False) -> str:
        rows = "" if max_rows is None else f"__n{max_rows}"
        inputs = "__withs" if include_sensitive else ""
        return f"{self.dataset}__{self.method}__d{self.delta:g}__s{self.seed}{rows}{inputs}.json"


def _run_cell(cell: Cell, cells_dir: Path, data_dir: str | None, max_rows: int | None,
              adapters: Mapping[str, Adapter], include_sensitive: bool = False) -> dict:
    """Run one cell and write its JSON; returns the record (status ``skipped``/``error``
    records are NOT written, so a later run retries them)."""
    fn = adapters[cell.method]
    base = {"dataset": cell.dataset, "method": cell.method, "delta": cell.delta, "seed": cell.seed,
            "max_rows": max_rows, "include_sensitive": include_sensitive}
    try:
        train, test, info = prepare(cell.dataset, cell.seed, data_dir, max_rows, include_sensitive)
        out = fn(train, test, cell.delta, cell.seed)
    except PeerUnavailable as exc:
        logger.warning("skipping %s: %s", cell, exc)
        return {**base, "status": "skipped", "note": str(exc)}
    except Exception as exc:  # one failing cell must not end the grid
        logger.exception("cell %s failed", cell)
        return {**base, "status": "error", "note": f"{type(exc).__name__}: {str(exc).splitlines()[0][:200]}"}
    record = {**base, **{k: info[k] for k in ("sensitive", "levels", "n_features")},
              "n_train": len(train), "n_test": len(test)}
    for split, part in (("train", train), ("test", test)):
        m = cell_metrics(out.get(f"{split}_pred"), part.y, part.s)
        record.update({f"{split}_di": m["di"], f"{split}_acc": m["acc"], f"{split}_rate": m["rate"]})
    record.update(fit_time=float(out.get("fit_time", float("nan"))), status=str(out.get("status", "ok")),
                  note=str(out.get("note", "") or getattr(fn, "note", "")))
    write_cell(cells_dir / cell.filename(max_rows, include_sensitive), record)  # atomic: never a half cell
    return record


@dataclass
class PeersResult:
    """What :func:`run_grid` produced."""

    cells: pd.DataFrame
    table: pd.DataFrame
    markdown: str
    files: list[Path] = field(default_factory=list)
    ran: int = 0
    cached: int = 0
    failed: list[dict] = field(default_factory=list)


def run_grid(datasets: Sequence[str] = tuple(DATASETS), methods: Sequence[str] | None = None,
             deltas: Sequence[float] = tuple(DELTAS), seeds: Sequence[int] = tuple(SEEDS),
             out: str | Path = "benchmarks/results/peers", data_dir: str | None = None, n_jobs: int = 1,
             max_rows: int | None = None, adapters: Mapping[str, Adapter] | None = None,
             command: str | None = None, plots: bool = True, table: str = "cache",
             include_sensitive: bool = False) -> PeersResult:
    """Run (or resume) the grid datasets x methods x deltas x seeds; write table and plots.

    Parameters
    ----------
    datasets, methods, deltas, seeds : sequences
        The grid; ``methods=None``: every registered adapter. Methods whose library cannot
        be imported are skipped (logged).
    out : path
        Output directory; cells are cached in ``out/cells/``.
    data_dir : str, optional
        Data directory (Adult is embedded).
    n_jobs : int
        Parallel cells (joblib); 1 runs in this process.
    max_rows : int, optional
        Seeded row subsample per dataset (cached under distinct cell names).
    adapters : mapping, optional
        name -> adapter; default :data:`ADAPTERS`.
    command : str, optional
        The command line, recorded in ``peers.md``.
    plots : bool
        Write ``tradeoff_<dataset>.png``.
    table : {"cache", "grid"}
        What the table and plots cover: "cache" (default) every cell cached under
        ``out/cells`` with the same ``max_rows``, so several partial runs into one directory
        (e.g. the full grid, then one slow method at one delta) accumulate into one release
        table; "grid" only the cells of this call.
    include_sensitive : bool, default False
        Whether the sensitive attribute is a model input (for every method alike; cached
        under distinct cell names, stated in ``peers.md``).

    Returns
    -------
    PeersResult
    """
    from tqdm.auto import tqdm

    if table not in ("cache", "grid"):
        raise ValueError(f"table: expected 'cache' or 'grid', got {table!r}")
    adapters = ADAPTERS if adapters is None else adapters
    methods = list(adapters) if methods is None else list(methods)
    methods = available_methods(methods, adapters)
    out = Path(out)
    cells_dir = out / "cells"
    cells_dir.mkdir(parents=True, exist_ok=True)
    grid = [Cell(d, m, float(delta), int(seed)) for d in datasets for delta in deltas for seed in seeds
            for m in methods]
    todo = [c for c in grid if not (cells_dir / c.filename(max_rows, include_sensitive)).is_file()]
    logger.info("%d cells, %d cached, %d to run", len(grid), len(grid) - len(todo), len(todo))
    records: list[dict] = []
    if todo:
        bar = tqdm(total=len(todo), desc="peers", unit="cell")
        if n_jobs == 1:
            for cell in todo:
                bar.set_postfix_str(f"{cell.dataset} {cell.method} {cell.delta:g} s{cell.seed}")
                records.append(_run_cell(cell, cells_dir, data_dir, max_rows, adapters, include_sensitive))
                bar.update()
        else:
            from joblib import Parallel, delayed

            # group by (dataset, seed) first so each worker's prepare() cache is reused
            todo.sort(key=lambda c: (c.dataset, c.seed, c.delta))
            jobs = (delayed(_run_cell)(c, cells_dir, data_dir, max_rows, adapters, include_sensitive) for c in todo)
            for record in Parallel(n_jobs=n_jobs, return_as="generator_unordered")(jobs):
                records.append(record)
                bar.update()
        bar.close()
    failed = [r for r in records if r["status"] in ("skipped", "error")]
    if table == "grid":
        cells = read_cells([cells_dir / c.filename(max_rows, include_sensitive) for c in grid])
    else:
        cells = _cached_cells(cells_dir, max_rows, order=(list(datasets), list(adapters)),
                              include_sensitive=include_sensitive)
    summary = summary_table(cells)
    md = _markdown(summary, command, failed, max_rows, covered=None if table == "grid" else len(cells),
                   include_sensitive=include_sensitive)
    files = [out / "peers.md", out / "peers.csv"]
    (out / "peers.md").write_text(md)
    summary.to_csv(out / "peers.csv", index=False)
    if plots and len(cells):
        files += plot_tradeoffs(cells, out, sorted({float(d) for d in cells["delta"]}))
    return PeersResult(cells, summary, md, files, ran=len(records) - len(failed), cached=len(grid) - len(todo),
                       failed=failed)


def _cached_cells(cells_dir: Path, max_rows: int | None, order: tuple[list[str], list[str]],
                  include_sensitive: bool = False) -> pd.DataFrame:
    """Every cached cell under ``cells_dir`` run with ``max_rows`` and ``include_sensitive``
    (a cell without the key was run with the sensitive attribute as an input, the old
    default), sorted by dataset and method (in the given orders, unknown names last), delta
    and seed."""
    cells = read_cells(sorted(cells_dir.glob("*.json")))
    if cells.empty:
        return cells
    same_rows = cells["max_rows"].isna() if max_rows is None else cells["max_rows"] == max_rows
    inputs = cells["include_sensitive"].fillna(True) if "include_sensitive" in cells else True
    cells = cells[same_rows & (inputs == include_sensitive)]

    ranks = {column: {name: i for i, name in enumerate(names)} for column, names in zip(("dataset", "method"), order)}

    def sort_key(col: pd.Series) -> pd.Series:
        rank = ranks.get(col.name)
        return col if rank is None else col.map(lambda v: rank.get(v, len(rank)))

    cells = cells.sort_values(["dataset", "method", "delta", "seed"], kind="stable", key=sort_key)
    return cells.reset_index(drop=True)


def summary_table(cells: pd.DataFrame) -> pd.DataFrame:
    """Means over seeds per (dataset, method, delta) with the columns :data:`TABLE_COLUMNS`.

    The column ``train DI >= delta-0.005`` counts the seeds whose training DI meets the
    bound up to 0.005 (``k/n``). NSF cells count as misses and have NaN measures.
    """
    if cells.empty:
        return pd.DataFrame(columns=TABLE_COLUMNS)
    ok_col = TABLE_COLUMNS[-2]
    rows = []
    for (dataset, method, delta), g in cells.groupby(["dataset", "method", "delta"], sort=False):
        met = int((g["train_di"] >= delta - TOLERANCE).sum())
        notes = sorted({str(n) for n in g["note"] if str(n)} | {f"status {s}" for s in g["status"] if s != "ok"})
        rows.append({"dataset": dataset, "method": method, "delta": float(delta),
                     "train DI": g["train_di"].mean(), "test DI": g["test_di"].mean(),
                     "train acc": g["train_acc"].mean(), "test acc": g["test_acc"].mean(),
                     "time s": g["fit_time"].mean(), "seeds": len(g), ok_col: f"{met}/{len(g)}",
                     "note": "; ".join(notes)})
    return pd.DataFrame(rows, columns=TABLE_COLUMNS)


def _markdown(table: pd.DataFrame, command: str | None, failed: list[dict], max_rows: int | None,
              covered: int | None = None, include_sensitive: bool = False) -> str:
    lines = ["# Peer benchmark: DI >= delta on one binary sensitive attribute", ""]
    if command:
        lines += ["Command (the last run into this directory):", "", f"    {command}", "",
                  f"Commit of that run: {commit()}.", ""]
    if covered is not None:
        lines += [f"The table covers every cell cached under `cells/` ({covered} cells, from one or more runs "
                  "into this directory; one JSON file per dataset, method, delta and seed).", ""]
    lines += [f"Same seeded {1 - TEST_SIZE:.0%}/{TEST_SIZE:.0%} split and feature matrix for every method"
              + (f"; seeded subsample of {max_rows} rows" if max_rows else "") + ". DI = min(P(yhat=1|s=0)/"
              "P(yhat=1|s=1), inverse) on hard predictions; means over seeds (`seeds`). The sensitive attribute "
              + ("IS" if include_sensitive else "is NOT")
              + " a column of the feature matrix (for every method alike).", ""]
    lines += [markdown_table(table, floatfmt=".3f"), ""]
    if failed:
        lines += ["Not run (retried on the next run):", ""]
        lines += [f"- {r['dataset']} {r['method']} delta={r['delta']:g} seed={r['seed']}: {r['status']}: "
                  f"{r['note']}" for r in failed]
        lines.append("")
    return "\n".join(lines)


def plot_tradeoffs(cells: pd.DataFrame, out: str | Path, deltas: Sequence[float]) -> list[Path]:
    """One ``tradeoff_<dataset>.png`` per dataset: test accuracy against test DI per cell,
    one marker and colour per method, each point labelled with the delta it was trained for, dashed
    vertical lines at the requested deltas (labelled too)."""
    import matplotlib

    markers = "osD^vP*Xh<>p"
    methods = list(dict.fromkeys(cells["method"]))
    colours = matplotlib.rcParams["axes.prop_cycle"].by_key()["color"]
    files = []
    for dataset, g in cells.groupby("dataset", sort=False):
        (ax,) = panel_axes(None, 1)
        fig = ax.figure
        fig.set_size_inches(6.4, 4.4)
        for i, method in enumerate(methods):
            m = g[g["method"] == method].dropna(subset=["test_di", "test_acc"])
            if len(m):
                ax.scatter(m["test_di"], m["test_acc"], marker=markers[i % len(markers)],
                           color=colours[i % len(colours)], label=method, alpha=0.8)
                if "delta" in m:
                    for x, y, d in zip(m["test_di"], m["test_acc"], m["delta"]):
                        ax.annotate(f"{d:g}", (x, y), fontsize=6, textcoords="offset points", xytext=(3, 3),
                                    color=colours[i % len(colours)])
        for delta in deltas:
            ax.axvline(delta, color="grey", linestyle="--", linewidth=0.8)
            ax.annotate(f"delta {delta:g}", (delta, 1.0), xycoords=("data", "axes fraction"), fontsize=7,
                        color="grey", rotation=90, va="top", ha="right")
        ax.set_xlabel("test DI (hard predictions)")
        ax.set_ylabel("test accuracy")
        ax.set_title(f"{dataset}: accuracy vs disparate impact")
        ax.legend(fontsize=8, loc="best")
        fig.tight_layout()
        path = Path(out) / f"tradeoff_{dataset}.png"
        fig.savefig(path, dpi=120)
        files.append(path)
    return files


# --------------------------------------------------------------------------------------
# command line (``python -m benchmarks.papers peers`` and benchmarks/peers.py)
# --------------------------------------------------------------------------------------
def add_arguments(parser: Any, prefix_out: bool = True) -> None:
    """The runner's options on an ``argparse`` parser."""
    parser.add_argument("--quick", action="store_true",
                        help=f"delta 0.8, seed 0, methods {', '.join(QUICK_METHODS)}")
    parser.add_argument("--datasets", nargs="+", help=f"default: {' '.join(DATASETS)}")
    parser.add_argument("--methods", nargs="+", help="default: every registered method")
    parser.add_argument("--deltas", nargs="+", type=float, help=f"default: {DELTAS}")
    parser.add_argument("--seeds", nargs="+", type=int, help=f"default: {SEEDS}")
    if prefix_out:
        parser.add_argument("--out", default="benchmarks/results/peers", help="output directory")
    parser.add_argument("--data-dir", dest="data_dir", help="directory with the benchmark data files")
    parser.add_argument("--n-jobs", dest="n_jobs", type=int, default=1, help="parallel cells (joblib)")
    parser.add_argument("--max-rows", dest="max_rows", type=int, help="seeded row subsample per dataset")
    parser.add_argument("--include-sensitive", dest="include_sensitive", action="store_true",
                        help="the sensitive attribute is also a model input (default: it is not)")
    parser.add_argument("--table", choices=("cache", "grid"), default="cache",
                        help="table and plots over every cached cell of --out (default) or only this run's grid")


def run_from_args(args: Any, command: str | None = None) -> PeersResult:
    """:func:`run_grid` from parsed :func:`add_arguments` options (``--quick`` defaults)."""
    quick = bool(getattr(args, "quick", False))
    result = run_grid(
        datasets=args.datasets or DATASETS,
        methods=args.methods or (QUICK_METHODS if quick else None),
        deltas=args.deltas or ([0.8] if quick else DELTAS),
        seeds=args.seeds if args.seeds is not None else ([0] if quick else SEEDS),
        out=args.out, data_dir=args.data_dir, n_jobs=args.n_jobs, max_rows=args.max_rows, command=command,
        table=getattr(args, "table", "cache"), include_sensitive=bool(getattr(args, "include_sensitive", False)))
    return result


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m benchmarks.papers peers [--quick] ...``."""
    import argparse
    import sys

    parser = argparse.ArgumentParser(prog="python -m benchmarks.papers peers", description=__doc__.splitlines()[0])
    add_arguments(parser)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    command = "python -m benchmarks.papers peers " + " ".join(sys.argv[1:] if argv is None else argv)
    result = run_from_args(args, command)
    print(result.markdown)
    print("wrote " + ", ".join(str(f) for f in result.files))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
