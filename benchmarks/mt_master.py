"""Moving Targets' master: the count search (``backend="topk"``, the default "auto" choice for
group rates) against the HiGHS MILP, with a linear learner on a seeded Adult sample.

``FairClassifier(model=LogisticRegression(max_iter=1000), method="moving_targets")`` with
``DI >= 0.8`` (sex, not an input), 10 iterations, on the 70/30 stratified split of a seeded
20,000-row sample of Adult (the split of ``benchmarks/trees.py`` and ``benchmarks/peers.py``).
Prints and appends a section to ``results/mt_master.md``: fit seconds, seconds in the masters, train/test DI
and accuracy per backend, and whether the returned model meets the bound on the training rows.

    python benchmarks/mt_master.py                       # seed 0, both backends
    python benchmarks/mt_master.py --backends topk --seeds 0 1 2 --warm-start
    python benchmarks/mt_master.py --dataset dutch --rows 0
"""

from __future__ import annotations

import argparse
import sys
import time
import warnings

from _common import DEFAULT_DATA, DEFAULT_OUT, commit, markdown, out_dir

import pandas as pd
from sklearn.linear_model import LogisticRegression

from benchmarks.papers.peers import cell_metrics, prepare
from fairopt.estimators import FairClassifier
from fairopt.exceptions import FairnessWarning


def run(backend: str, seed: int, dataset: str, rows: int | None, data_dir: str, warm_start: bool) -> dict:
    """One fit; the row of the table."""
    train, test, _ = prepare(dataset, seed, data_dir, rows)
    learner = LogisticRegression(max_iter=1000, warm_start=warm_start)
    clf = FairClassifier([("disparate_impact", "s", 0.8)], method="moving_targets", sensitive_names="s",
                         model=learner, engine_params={"backend": backend})
    start = time.perf_counter()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        clf.fit(train.X, train.y, sensitive_features=train.s)
    seconds = time.perf_counter() - start
    tr, te = cell_metrics(clf.predict(train.X), train.y, train.s), cell_metrics(clf.predict(test.X), test.y, test.s)
    return {"dataset": dataset, "backend": backend, "warm start": warm_start, "seed": seed, "fit s": seconds,
            "master s": clf.engine_info_["master_seconds"],
            "learner s": clf.engine_info_["learner_seconds"], "train DI": tr["di"], "test DI": te["di"],
            "train acc": tr["acc"], "test acc": te["acc"], "bound met on train": bool(clf.converged_),
            "warned": any(issubclass(w.category, FairnessWarning) for w in caught)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backends", nargs="+", default=["topk", "highs"])
    parser.add_argument("--seeds", nargs="+", type=int, default=[0])
    parser.add_argument("--dataset", default="adult")
    parser.add_argument("--rows", type=int, default=20000, help="seeded row sample (0: all rows)")
    parser.add_argument("--warm-start", action="store_true", help="LogisticRegression(warm_start=True)")
    parser.add_argument("--data-dir", default=str(DEFAULT_DATA))
    parser.add_argument("--out", default=None)
    args = parser.parse_args(argv)
    from threadpoolctl import threadpool_limits

    with threadpool_limits(limits=1):  # one BLAS thread: the machine is shared (as benchmarks/trees.py)
        rows = [run(b, s, args.dataset, args.rows or None, args.data_dir, args.warm_start)
                for s in args.seeds for b in args.backends]
    table = markdown(pd.DataFrame(rows), floatfmt=".3f")
    command = "python benchmarks/mt_master.py " + " ".join(sys.argv[1:] if argv is None else argv)
    text = (f"## {args.dataset} ({args.rows or 'all'} rows), DI >= 0.8, LogisticRegression learner "
            f"(one BLAS thread)\n\n"
            f"commit {commit()}; `{command.strip()}`\n\n{table}\n")
    print(text)
    path = out_dir(args.out or str(DEFAULT_OUT)) / "mt_master.md"
    head = "# Moving Targets master: count search vs HiGHS\n\n"
    old = path.read_text() if path.is_file() else head
    path.write_text(old + "\n" + text)  # one section per run
    return 0


if __name__ == "__main__":
    sys.exit(main())
