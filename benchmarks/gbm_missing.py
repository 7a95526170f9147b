"""Boosted trees on rows with missing input values: ``model="gbm"`` against HistGradientBoosting and its post-processors.

The splits and feature matrices of ``benchmarks/trees.py`` (:func:`benchmarks.papers.peers.prepare`: seeded
70/30 stratified splits, Adult a seeded 20,000-row sample, the sensitive attribute not an input), seeds 0-2,
``DI >= 0.8`` on hard labels, with a seeded share (``--missing``, default 0.2) of every numeric input column's
values removed (missing completely at random, or with ``--mechanism label`` more often in the positive rows, in the
training and the test rows alike; the one-hot columns stay complete). Methods:

=========================  ======  ==========================================================================
method                     needs s what
=========================  ======  ==========================================================================
hgb                        no      ``HistGradientBoostingClassifier``, unconstrained (takes NaN itself)
error-parity-hgb           yes     ``benchmarks/trees.py``'s, on that HGB
oxonfair-hgb-inferred      no      ``benchmarks/trees.py``'s, on that HGB (groups inferred by a second HGB)
fairopt-gbm                no      ``FairClassifier(model="gbm")`` on the rows as they are (NaN kept)
fairopt-gbm-imputed        no      the same on rows whose missing values are the training mean of their column
fairopt-linear-imputed     no      ``FairClassifier()`` on the mean-imputed rows (it refuses NaN)
=========================  ======  ==========================================================================

Writes ``OUT/gbm_missing.md`` (means over seeds per data set and method, with the commit and the command) and
``OUT/gbm_missing.csv`` (every run)::

    python benchmarks/gbm_missing.py --data-dir ../shared/data --jobs 2
    python benchmarks/gbm_missing.py --datasets adult --seeds 0 --missing 0.4
    python benchmarks/gbm_missing.py --data-dir ../shared/data --jobs 2 --mechanism label --out DIR
"""

from __future__ import annotations

import logging
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from _common import DEFAULT_OUT, commit, grid_parser, limited_threads, markdown, pooled, provenance
from trees import DATASETS, DELTA, METHODS, ROWS, SEEDS, Skip, _missing, _fairopt, di_measure, skipped_lines, summary

logger = logging.getLogger("benchmarks.gbm_missing")

#: method -> (needs the sensitive attribute to predict, the rows it sees: "missing" or "imputed", fit_predict)
MISSING_METHODS: dict[str, tuple[bool, str, Any]] = {
    "hgb": (False, "missing", METHODS["hgb"]),
    "error-parity-hgb": (True, "missing", METHODS["error-parity-hgb"]),
    "oxonfair-hgb-inferred": (False, "missing", METHODS["oxonfair-hgb-inferred"]),
    "fairopt-gbm": (False, "missing", (False, ("torch", "lightgbm"), _fairopt(False, model="gbm"))),
    "fairopt-gbm-imputed": (False, "imputed", (False, ("torch", "lightgbm"), _fairopt(False, model="gbm"))),
    "fairopt-linear-imputed": (False, "imputed", (False, ("torch",), _fairopt(False))),
}
#: Default share of each numeric input column's values removed.
MISSING_SHARE = 0.2


def numeric_columns(X: np.ndarray) -> np.ndarray:
    """The columns of an encoded matrix that are not one-hot indicators (values other than 0 and 1)."""
    return ~np.isin(X, (0.0, 1.0)).all(axis=0)


def with_holes(X: np.ndarray, columns: np.ndarray, share: float, rng: np.random.Generator,
               y: np.ndarray | None = None) -> np.ndarray:
    """A copy of ``X`` with a share ``share`` of the values of ``columns`` replaced by NaN, each value
    independently (missing completely at random); with ``y`` (the "label" mechanism) a value of a positive
    row is missing with probability ``1.5 share`` and one of a negative row with ``0.5 share``, so that
    missingness says something about the target."""
    X = X.copy()
    chance = np.full(X.shape[0], share) if y is None else np.where(y > 0, 1.5 * share, 0.5 * share)
    holes = (rng.random(X.shape) < chance[:, None]) & columns[None, :]
    X[holes] = np.nan
    return X


def mean_imputed(train_X: np.ndarray, X: np.ndarray) -> np.ndarray:
    """``X`` with each NaN replaced by the mean of its column over the training rows' values present."""
    means = np.nanmean(train_X, axis=0)
    return np.where(np.isnan(X), np.nan_to_num(means, nan=0.0)[None, :], X).astype(np.float32)


def run_cell(job: dict) -> dict:
    """One (data set, method, seed) fit on the seeded split with holes (module docstring), in a worker
    process with ``job["threads"]`` torch and BLAS/OpenMP threads (HistGradientBoosting's OpenMP threads
    would otherwise take every core in each worker)."""
    with limited_threads(job["threads"], logger):
        return _cell(job)


def _cell(job: dict) -> dict:
    """:func:`run_cell`'s fit."""
    from benchmarks.papers.peer_adapters import Part
    from benchmarks.papers.peers import prepare

    dataset, name, seed = job["dataset"], job["method"], job["seed"]
    needs_s, rows, (_, requires, fit_predict) = MISSING_METHODS[name]
    record = {"dataset": dataset, "method": name, "seed": seed, "needs s": "yes" if needs_s else "no",
              "missing": job["share"], "mechanism": job.get("mechanism", "random"), "commit": commit()}
    reason = _missing(requires)
    if reason is not None:
        return {**record, "status": "skipped", "note": reason}
    train, test, _ = prepare(dataset, seed, job["data_dir"], ROWS.get(dataset))
    columns = numeric_columns(train.X)
    rng = np.random.default_rng(10_000 + seed)
    by_label = job.get("mechanism") == "label"
    train_X = with_holes(train.X, columns, job["share"], rng, train.y if by_label else None)
    test_X = with_holes(test.X, columns, job["share"], rng, test.y if by_label else None)
    if rows == "imputed":
        train_X, test_X = mean_imputed(train_X, train_X), mean_imputed(train_X, test_X)
    train, test = Part(train_X, train.y, train.s), Part(test_X, test.y, test.s)
    try:
        out = fit_predict(train, test, DELTA, seed)
    except Skip as exc:
        return {**record, "status": "skipped", "note": str(exc)}
    numbers = di_measure(out, train, test)
    logger.info("%s %s seed %d: %s (%.1f s)", dataset, name, seed,
                ", ".join(f"{k} {v:.4f}" for k, v in numbers.items()), out["seconds"])
    return {**record, "status": "ok", "numeric columns": int(columns.sum()), **numbers, "fit s": out["seconds"],
            "note": out["note"]}


def main(argv: list[str] | None = None) -> int:
    parser = grid_parser(__doc__.splitlines()[0], DATASETS, SEEDS, DEFAULT_OUT / "gbm_missing", list(MISSING_METHODS))
    parser.add_argument("--missing", type=float, default=MISSING_SHARE,
                        help="share of each numeric input column's values removed (default 0.2)")
    parser.add_argument("--mechanism", choices=["random", "label"], default="random",
                        help="random: every value missing with the same chance; label: 1.5 times that chance in "
                             "the positive rows and half of it in the others (missingness tells of the target)")
    parser.add_argument("--jobs", type=int, default=1, help="fits at a time (processes)")
    args = parser.parse_args(argv)
    if not 0.0 < args.missing < 1.0:
        parser.error(f"--missing: expected a share in (0, 1), got {args.missing}")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    jobs = [{"dataset": d, "method": m, "seed": s, "share": args.missing, "mechanism": args.mechanism,
             "data_dir": args.data_dir, "threads": args.threads}
            for d in args.datasets for s in args.seeds for m in args.methods]
    records = [record for _, record in pooled(run_cell, jobs, max(1, args.jobs))]
    runs = pd.DataFrame(records)
    table = summary(runs, MISSING_METHODS)
    lines = [f"# Boosted trees on rows with missing input values, DI >= {DELTA} (means over seeds)", "",
             provenance("gbm_missing.py", argv, runs["commit"].unique()), "",
             f"The splits of `benchmarks/trees.py` with {args.missing:.0%} of every numeric input column's values "
             "removed " + ("at random" if args.mechanism == "random" else
                           f"more often in the positive rows ({1.5 * args.missing:.0%}) than in the others "
                           f"({0.5 * args.missing:.0%})") +
             " (training and test rows); 'needs s': the method reads the sensitive attribute "
             "to predict; '-imputed': the missing values replaced by the training mean of their column.", "",
             markdown(table, floatfmt=".4f"), ""] + skipped_lines(runs)
    (out / "gbm_missing.md").write_text("\n".join(lines) + "\n")
    runs.to_csv(out / "gbm_missing.csv", index=False)
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
