"""The SQP paper's experiment ([SQP] sec 4, Tables 2 and 4, Fig. 7) with fairopt.

A thin wrapper around :mod:`benchmarks.papers.sqp_table2` (the same run as
``python -m benchmarks.papers sqp-table2``), with options to run a part of it: Dutch (MLP 32), Law
(linear), ACSIncome (Colorado extract; MLP 256) with the sensitive attribute as an input,
80/20 split, BCE, 500 full-batch SQP epochs, initial learning rate 0.5, smoothed-step
surrogate (alpha = 50); DI >= delta for delta in 0.5..0.9, and at 0.8 / 0.9 also EI and
DI+EI; the paper's numbers beside ours.

    python benchmarks/sqp_paper.py --quick                       # = python -m benchmarks.papers sqp-table2 --quick
    python benchmarks/sqp_paper.py                               # the full protocol (5 seeds)
    python benchmarks/sqp_paper.py --datasets dutch --seeds 0 --epochs 100 --deltas 0.8

Writes results.csv, summary.md and fig7_realised_di.png under --out (default
benchmarks/results/sqp_table2).
"""

from __future__ import annotations

import argparse
import logging
import sys

import torch

from _common import DEFAULT_OUT, data_dir
from benchmarks.papers import sqp_table2


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="Dutch, delta 0.8 and 0.9, seed 0, 100 epochs")
    ap.add_argument("--datasets", nargs="+", choices=list(sqp_table2.MODELS))
    ap.add_argument("--deltas", nargs="+", type=float, help="DI sweep (the table deltas 0.8/0.9 always run)")
    ap.add_argument("--seeds", nargs="+", type=int)
    ap.add_argument("--epochs", type=int)
    ap.add_argument("--subsample", type=int)
    ap.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's choice)")
    ap.add_argument("--data-dir")
    ap.add_argument("--out", default=str(DEFAULT_OUT / "sqp_table2"))
    args = ap.parse_args()
    logging.basicConfig(level=logging.WARNING)
    if args.threads:
        torch.set_num_threads(args.threads)
    settings = sqp_table2.override(sqp_table2.QUICK if args.quick else sqp_table2.FULL, epochs=args.epochs,
                                   seeds=args.seeds, subsample=args.subsample, datasets=args.datasets,
                                   deltas=args.deltas)
    ddir = data_dir(args.data_dir)
    command = ("python benchmarks/sqp_paper.py " + " ".join(sys.argv[1:])).strip()
    _, summary, files = sqp_table2.run(args.out, settings, data_dir=ddir, command=command)
    print(summary)
    print("wrote " + ", ".join(map(str, files)))


if __name__ == "__main__":
    main()
