"""The GeDI paper's performance and preprocessing tests with Moving Targets ([GeDI] sec 5, Tables 4-5, Fig. 3).

A thin wrapper around :mod:`benchmarks.papers.gedi_tables` (the same run as
``python -m benchmarks.papers gedi-tables``), with options to run a part of it: the tasks of [GeDI]
Table 3 (Adult with sex and age, Communities & Crime with race and pctBlack), random
forest, gradient boosting and the paper's MLP, each unconstrained and with Moving Targets
under GeDI <= 20% of GeDI(x, y_train; V^1) (V^1 for a binary attribute, V^5 fine and coarse
for a continuous one), 5-fold cross-validation; the preprocessing experiment (targets
projected under GeDI of order 1..5, binned DIDI). The paper's numbers are written beside
ours. Every (task, model, fold) is cached under OUT/cells/: a rerun resumes.

    python benchmarks/mt_gedi.py --quick --n-jobs 2     # = python -m benchmarks.papers gedi-tables --quick --n-jobs 2
    python benchmarks/mt_gedi.py --n-jobs 2                      # the full protocol (~1 h on 2 cores)
    python benchmarks/mt_gedi.py --tasks adult_sex --learners gb nn --max-folds 1 --no-preprocessing

Writes summary.md, tables.csv, folds.csv, preprocessing.csv, tables.png and
preprocessing.png under --out (default benchmarks/results/gedi_tables).
"""

from __future__ import annotations

import argparse
import logging
import sys

from _common import DEFAULT_OUT, data_dir
from benchmarks.papers import gedi_tables
from benchmarks.papers.gedi_tables_data import LEARNERS, TASKS


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true",
                    help="GB and MLP, Adult 4,000 rows, 2 of 5 folds, 3 MT iterations, 20 epochs")
    ap.add_argument("--tasks", nargs="+", choices=list(TASKS))
    ap.add_argument("--learners", nargs="+", choices=list(LEARNERS))
    ap.add_argument("--folds", type=int, help="K of K-fold cross-validation (paper: 5)")
    ap.add_argument("--max-folds", type=int, help="run only the first folds")
    ap.add_argument("--iterations", type=int, help="Moving Targets iterations (paper: 10)")
    ap.add_argument("--mlp-epochs", type=int, help="MLP epochs per fit (paper: 200)")
    ap.add_argument("--adult-rows", type=int, help="subsample Adult to this many rows")
    ap.add_argument("--backend", choices=["auto", "highs", "osqp", "gurobi"])
    ap.add_argument("--time-limit", type=float, help="seconds per master (paper: Gurobi WorkLimit 60)")
    ap.add_argument("--cold", action="store_true", help="no warm start of the masters")
    ap.add_argument("--no-preprocessing", action="store_true", help="skip the preprocessing experiment (Fig. 3)")
    ap.add_argument("--seed", type=int)
    ap.add_argument("--n-jobs", type=int, default=1, help="cells in parallel (joblib processes)")
    ap.add_argument("--data-dir")
    ap.add_argument("--out", default=str(DEFAULT_OUT / "gedi_tables"))
    args = ap.parse_args()
    logging.basicConfig(level=logging.WARNING)
    base = gedi_tables.QUICK if args.quick else gedi_tables.FULL
    settings = gedi_tables.override(
        base, tasks=args.tasks, learners=args.learners, folds=args.folds, max_folds=args.max_folds,
        iterations=args.iterations, mlp_epochs=args.mlp_epochs, adult_rows=args.adult_rows, backend=args.backend,
        time_limit=args.time_limit, seeds=None if args.seed is None else [args.seed],
        warm_start=False if args.cold else None, preprocessing=() if args.no_preprocessing else None)
    protocol = ("quick" if args.quick else "full ([GeDI] protocol)") + ("" if settings == base else " with overrides")
    command = ("python benchmarks/mt_gedi.py " + " ".join(sys.argv[1:])).strip()
    _, summary, files = gedi_tables.run(args.out, settings, data_dir=data_dir(args.data_dir), command=command,
                                        n_jobs=args.n_jobs, protocol=protocol)
    print(summary)
    print("wrote " + ", ".join(map(str, files)))


if __name__ == "__main__":
    main()
