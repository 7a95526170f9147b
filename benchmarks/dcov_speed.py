"""Seconds for dCov~^2 value + gradient (fairopt) against dcor's fastest value-only methods,
side by side on the same data in one run.

    python benchmarks/dcov_speed.py                         # n = 1e3 .. 1e6
    python benchmarks/dcov_speed.py --sizes 1000 100000 --dcor-max-n 100000 --json

Paths timed: "grouped" (s with K distinct values; integer codes, so that dcor's
univariate O(n log n) methods apply to the same s) and "univariate" (continuous s).
fairopt: ``dcov(x, s, method=path)`` on a float64 tensor followed by ``backward()``;
dcor: ``u_distance_covariance_sqr(x, s, method="mergesort" | "avl")`` (numba-compiled,
value only, compiled before timing). Every time is the best of ``--repeats`` runs.
``rel_diff`` compares the two values. Target: grouped at n = 1e6 faster than dcor.
"""

from __future__ import annotations

import argparse
import json
import time
from typing import Callable

import numpy as np
import pandas as pd
import torch

from _common import markdown
from fairopt.measures.dcov import dcov

DCOR_METHODS = ("mergesort", "avl")


def best_time(fn: Callable[[], object], repeats: int) -> tuple[float, object]:
    """Minimum wall time over ``repeats`` calls and the last result."""
    best, result = float("inf"), None
    for _ in range(repeats):
        start = time.perf_counter()
        result = fn()
        best = min(best, time.perf_counter() - start)
    return best, result


def fairopt_value_and_gradient(x: np.ndarray, s: np.ndarray, path: str) -> Callable[[], float]:
    def run() -> float:
        xt = torch.tensor(x, requires_grad=True)
        value = dcov(xt, s, method=path)
        value.backward()
        return float(value.detach())

    return run


def sample(n: int, path: str, groups: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    s = rng.integers(0, groups, size=n).astype(float) if path == "grouped" else rng.normal(size=n)
    x = rng.normal(size=n) + 0.3 * s / max(float(s.std()), 1e-12)
    return x, s


def benchmark(sizes: list[int], groups: list[int], repeats: int, dcor_max_n: int, seed: int) -> pd.DataFrame:
    import dcor

    for method in DCOR_METHODS:  # numba compilation outside the timings
        dcor.u_distance_covariance_sqr(np.arange(10.0), np.arange(10.0) ** 2, method=method)
    rng = np.random.default_rng(seed)
    cases = [("grouped", k) for k in groups] + [("univariate", None)]
    rows = []
    for n in sizes:
        for path, k in cases:
            x, s = sample(n, path, k or 0, rng)
            ours, value = best_time(fairopt_value_and_gradient(x, s, path), repeats)
            row = {"path": path, "K": k if k else "-", "n": n, "fairopt_value+grad_s": ours}
            reference = None
            for method in DCOR_METHODS:
                if n > dcor_max_n:
                    row[f"dcor_{method}_s"] = float("nan")
                    continue
                elapsed, reference = best_time(
                    lambda method=method: dcor.u_distance_covariance_sqr(x, s, method=method), repeats
                )
                row[f"dcor_{method}_s"] = elapsed
            fastest = min(row[f"dcor_{m}_s"] for m in DCOR_METHODS)
            row["speedup_vs_dcor"] = fastest / ours if np.isfinite(fastest) else float("nan")
            row["rel_diff"] = abs(value - reference) / abs(reference) if reference else float("nan")
            rows.append(row)
            print(f"  done: {path} K={k} n={n}", flush=True)
    return pd.DataFrame(rows)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", type=int, nargs="+", default=[1_000, 10_000, 100_000, 1_000_000])
    ap.add_argument("--groups", type=int, nargs="+", default=[2, 10], help="K of the grouped cases")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--dcor-max-n", type=int, default=1_000_000, help="skip dcor above this n")
    ap.add_argument("--threads", type=int, default=None, help="torch threads")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", action="store_true", help="print the table as JSON")
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    table = benchmark(args.sizes, args.groups, args.repeats, args.dcor_max_n, args.seed)
    if args.json:
        print(json.dumps(table.to_dict(orient="records"), indent=1))
    else:
        print(markdown(table, floatfmt=".4g"))


if __name__ == "__main__":
    main()
