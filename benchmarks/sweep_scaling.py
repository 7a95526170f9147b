"""Wall time of one compare() sweep with n_jobs=1 and n_jobs=2, side by side in one run.

The sweep: Stochastic SQP with a DisparateImpact("sex") constraint on Dutch census data,
5 deltas x 3 seeds = 15 runs (linear model, few epochs), torch limited to one thread inside
every run. The same sweep is run

- with ``n_jobs=1`` (in-process),
- with ``n_jobs=2`` on joblib's loky backend, twice: "cold" includes starting the worker
  processes, "warm" reuses them (loky keeps its workers between calls),
- on a local Dask cluster (2 workers x 1 thread) through ``joblib.parallel_config(backend=
  "dask")``, only if ``dask.distributed`` is importable (it is not a fairopt dependency),

and the tables are checked to be identical (all columns but the wall-clock ``time``).

    python benchmarks/sweep_scaling.py                    # data in ../shared/data or $FAIROPT_DATA
    python benchmarks/sweep_scaling.py --epochs 100 --data-dir /path/to/data
"""

from __future__ import annotations

import argparse
import time
import warnings

import joblib
import pandas as pd
import torch

from fairopt import datasets
from fairopt.constraints import DisparateImpact
from fairopt.experiments import SQPMethod, compare

from _common import data_dir, markdown

DELTAS = [0.5, 0.6, 0.7, 0.8, 0.9]
SEEDS = [0, 1, 2]


def timed_sweep(data, epochs: int, n_jobs: int) -> tuple[pd.DataFrame, float]:
    """The sweep's table and its wall time in seconds."""
    method = SQPMethod(lambda delta: DisparateImpact("sex", delta=delta), epochs=epochs)
    t0 = time.perf_counter()
    table = compare(method, data, {"sqp": DELTAS}, seeds=SEEDS, n_jobs=n_jobs, torch_threads=1)
    return table, time.perf_counter() - t0


def same_results(a: pd.DataFrame, b: pd.DataFrame) -> bool:
    """Whether two tables agree exactly apart from the wall-clock ``time`` column."""
    try:
        pd.testing.assert_frame_equal(a.drop(columns="time"), b.drop(columns="time"), check_exact=True)
    except AssertionError:
        return False
    return True


def dask_sweep(data, epochs: int) -> tuple[pd.DataFrame, float] | None:
    """The sweep on a local 2-worker Dask cluster, or None (with a message) without dask.distributed."""
    try:
        from dask.distributed import Client, LocalCluster
    except ImportError:
        print("dask: skipped (dask.distributed is not installed)")
        return None
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True) as cluster, Client(cluster):
        with joblib.parallel_config(backend="dask"):
            return timed_sweep(data, epochs, n_jobs=-1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-dir", default=None)
    parser.add_argument("--epochs", type=int, default=30)
    args = parser.parse_args()
    warnings.filterwarnings("ignore", module="solvers")  # relaxed SQP steps of short runs: not the point here
    torch.set_num_threads(1)
    data = datasets.load("dutch", data_dir=data_dir(args.data_dir))
    print(f"Dutch: {len(data)} rows, {data.n_features} features; SQP linear, {args.epochs} epochs, "
          f"{len(DELTAS)} deltas x {len(SEEDS)} seeds = {len(DELTAS) * len(SEEDS)} runs")

    serial, t_serial = timed_sweep(data, args.epochs, n_jobs=1)
    with joblib.parallel_config(backend="loky"):
        parallel_cold, t_cold = timed_sweep(data, args.epochs, n_jobs=2)
        parallel_warm, t_warm = timed_sweep(data, args.epochs, n_jobs=2)
    rows = [{"run": "n_jobs=1", "wall s": t_serial, "speed-up": 1.0, "same table": True},
            {"run": "n_jobs=2 loky (cold)", "wall s": t_cold, "speed-up": t_serial / t_cold,
             "same table": same_results(serial, parallel_cold)},
            {"run": "n_jobs=2 loky (warm)", "wall s": t_warm, "speed-up": t_serial / t_warm,
             "same table": same_results(serial, parallel_warm)}]
    dask = dask_sweep(data, args.epochs)
    if dask is not None:
        rows.append({"run": "dask local 2x1", "wall s": dask[1], "speed-up": t_serial / dask[1],
                     "same table": same_results(serial, dask[0])})
    print(f"training seconds summed over runs (n_jobs=1): {serial['time'].iloc[::2].sum():.2f}")
    print(markdown(pd.DataFrame(rows), floatfmt=".2f"))
    if not all(row["same table"] for row in rows):
        raise SystemExit("the parallel tables differ from the serial one")


if __name__ == "__main__":
    main()
