"""Fair linear models of [FR]: Example 1 and FRRM / FGRRM vs NCLM / ZLM / ZLRM on real data.

A thin wrapper around :mod:`benchmarks.papers.fair_ridge` (the same run as
``python -m benchmarks.papers fair-ridge``), with options to run a part of it. Protocol of [FR] sec 5
(k-fold cross-validation repeated over seeds, the same folds for every model and bound,
r in {0, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5}; ZLM / ZLRM get the largest realised
|COV(prediction, S_j)| of FRRM and NCLM / of FGRRM as their bound) on C&C, COMPAS and LSAC
(linear) and ADULT and COMPAS (logistic), plus [FR] Example 1 (synthetic).

    python benchmarks/fair_linear.py --quick                     # = python -m benchmarks.papers fair-ridge --quick
    python benchmarks/fair_linear.py                             # 50 x 10-fold (linear), 2 x 10-fold (logistic)
    python benchmarks/fair_linear.py --linear communities law --logistic --runs 1 --folds 5

BLAS runs single-threaded (the models are small; on a shared machine multi-threaded BLAS
is up to 40x slower for these sizes). Writes summary.md, the per-fold CSV files and the
figures under --out (default benchmarks/results/fair_ridge).
"""

from __future__ import annotations

import argparse
import dataclasses
import logging
import sys

import torch

from _common import DEFAULT_OUT, data_dir
from benchmarks.papers import fair_ridge


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="1 x 10-fold (linear), 1 x 5-fold (logistic)")
    ap.add_argument("--linear", nargs="*", choices=list(fair_ridge.LINEAR_LOADERS), help="linear-model data sets")
    ap.add_argument("--logistic", nargs="*", choices=list(fair_ridge.LOGISTIC_LOADERS),
                    help="logistic-model data sets (none: skip)")
    ap.add_argument("--runs", type=int, help="CV repetitions (both families)")
    ap.add_argument("--folds", type=int, help="CV folds (both families)")
    ap.add_argument("--r", type=float, nargs="+", help="bounds r")
    ap.add_argument("--example-n", type=int, help="Example 1 sample size")
    ap.add_argument("--subsample", type=int)
    ap.add_argument("--threads", type=int, default=1, help="torch threads")
    ap.add_argument("--data-dir")
    ap.add_argument("--out", default=str(DEFAULT_OUT / "fair_ridge"))
    args = ap.parse_args()
    logging.basicConfig(level=logging.WARNING)
    torch.set_num_threads(args.threads)
    settings = fair_ridge.QUICK if args.quick else fair_ridge.FULL
    changes = {"linear_datasets": None if args.linear is None else tuple(args.linear),
               "logistic_datasets": None if args.logistic is None else tuple(args.logistic),
               "runs": args.runs, "logistic_runs": args.runs, "folds": args.folds, "logistic_folds": args.folds,
               "r_grid": None if args.r is None else tuple(args.r), "example_n": args.example_n,
               "subsample": args.subsample}
    settings = dataclasses.replace(settings, **{k: v for k, v in changes.items() if v is not None})
    command = "python benchmarks/fair_linear.py " + " ".join(sys.argv[1:])
    summary, files = fair_ridge.run(args.out, settings, data_dir=data_dir(args.data_dir), command=command.strip())
    print(summary)
    print("wrote " + ", ".join(map(str, files)))


if __name__ == "__main__":
    main()
