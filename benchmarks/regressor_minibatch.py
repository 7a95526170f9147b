"""FairRegressor's SQP fit, full batch and mini-batches: linear on whitened inputs, networks' step budgets.

The estimator fits a linear regressor's SQP steps on whitened inputs and folds the model back
(:func:`fairopt.training.whitened_inputs`); this grid measures what that changes. Every setting at the
estimator's default but ``batch_size`` (full batch, batches of 256 and 1,024 rows), on 70/30 splits
(``FairData.split``), seeds 0-2:

- ``communities-gedi``: Communities and Crime (1,395 training rows, 102 correlated columns), race, GeDI <= 0.2
  relative to the target's;
- ``communities-gedi2``: the same under GeDI of degree 2 on the continuous ``pctBlack``;
- ``communities-dcov``: race, distance covariance <= a quarter of the unconstrained fit's;
- ``law-gedi``, ``law-dcov``: Law School's first-year grade ``zfygpa`` (about 14,500 training rows), race;
- ``pg15-gedi``: pg15training's ``Numtppd`` as a regression target, a seeded 20,000-row sample, gender.

Variant ``whitened`` is the estimator as it is; ``inputs`` is the fit on the inputs as they are (the path
before whitening, reached by ``engine_params={"chunk_rows": n}`` with ``n`` the training rows: one chunk,
the same computation as no chunking, and :func:`~fairopt.training.whitened_inputs` leaves such fits
alone)::

    python benchmarks/regressor_minibatch.py --data-dir ../shared/data --jobs 2

With ``--model mlp`` (``FairRegressor(model="mlp")``, one hidden layer of 32) the variants are the
mini-batch step budgets: ``default`` is the estimator as it is (``epochs="auto"``: at the regressor's ``lr``
0.02, 25 times the 500 steps of ``lr`` 0.5, :func:`solvers.sqp.engine.auto_epochs`), ``500-steps`` the
500 steps of the budget before (``epochs`` set to what gives them). Full batches are the same for both
(10,000 epochs at most) and run once, as ``default``::

    python benchmarks/regressor_minibatch.py --model mlp --data-dir ../shared/data --jobs 2 \
        --out results/regressor_minibatch_mlp

``--batches full --merge`` runs the full batches again and keeps the mini-batch runs of ``--out``'s
``runs.json`` (the page counts the runs by commit), as after the full batch's stop at the floor of its step
(:data:`fairopt.training.REGRESSION_STALL`).
"""

from __future__ import annotations

import json
import logging
import math
import statistics
import sys
import warnings
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

from _common import DEFAULT_OUT, commit, data_dir, pooled_runs, task_grid_parser, timed_fit, write_grid

TASKS: tuple[str, ...] = ("communities-gedi", "communities-gedi2", "communities-dcov", "law-gedi", "law-dcov",
                          "pg15-gedi")
BATCHES: tuple[int | None, ...] = (None, 256, 1024)
VARIANTS: tuple[str, ...] = ("whitened", "inputs")
#: ``--model mlp``: the variants (``500-steps``: the budget before ``epochs="auto"`` scaled a network's shorter steps).
NETWORK_VARIANTS: tuple[str, ...] = ("default", "500-steps")
#: A distance-covariance bound: this fraction of the unconstrained linear fit's value on the training rows.
DCOV_SHARE = 0.25
PG15_ROWS = 20000

logger = logging.getLogger("benchmarks.regressor_minibatch")


def load_task(task: str, data_root: str, seed: int) -> tuple[Any, Any, str]:
    """The seeded 70/30 split of ``task`` and its sensitive attribute."""
    import numpy as np

    from fairopt import datasets

    name = task.split("-")[0]
    if name == "communities":
        attribute = "pctBlack" if task.endswith("gedi2") else "race"
        data = datasets.load("communities", data_dir=data_root, sensitive=[attribute])
    elif name == "law":
        attribute, data = "race", datasets.load("law", data_dir=data_root, target="zfygpa")
    else:
        attribute = "Gender"
        data = datasets.load("pg15training", data_dir=data_root, task="regression")
        data = data.subset(np.random.default_rng(0).permutation(len(data))[:PG15_ROWS])
    train, test = data.split(test_size=0.3, seed=seed)
    return train, test, attribute


def constraint(task: str, attribute: str, train: Any, seed: int) -> tuple:
    """The task's bound as an estimator spec (a distance-covariance bound from an unconstrained fit)."""
    if task.endswith("gedi2"):
        return ("gedi", attribute, 0.2, {"relative": True, "degree": 2})
    if task.endswith("gedi"):
        return ("gedi", attribute, 0.2, {"relative": True})
    from fairopt.estimators import FairRegressor

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        free = FairRegressor(("dcov", attribute, 1e12), seed=seed).fit(train)
    (entry,) = free.evaluate(train)["bounds"].values()
    return ("dcov", attribute, DCOV_SHARE * float(entry["value"]))


def variant_options(job: dict, n_train: int) -> dict:
    """The estimator options of ``job``'s variant: ``inputs`` fits the inputs as they are (one chunk of all
    rows, which :func:`~fairopt.training.whitened_inputs` leaves alone); ``500-steps`` the epochs that
    :func:`solvers.sqp.engine.auto_epochs` gives a step of 0.5 or longer (500 steps, in 10 to 500 epochs)."""
    from solvers.sqp.engine import auto_epochs

    options: dict = {"model": job.get("model", "linear"), "engine_params": {}}
    if job["variant"] == "inputs":
        options["engine_params"] = {"chunk_rows": n_train}
    if job["variant"] == "500-steps" and job["batch"] is not None:
        options["epochs"] = auto_epochs(math.ceil(n_train / job["batch"]), full_batch=False)
    return options


def fit_cell(job: dict) -> dict:
    """One fit: train and test R2, the training rows' violation and whether `evaluate` calls every bound met,
    status, iterations, seconds, warnings."""
    import torch

    from fairopt.estimators import FairRegressor

    torch.set_num_threads(1)
    train, test, attribute = load_task(job["task"], job["data_dir"], job["seed"])
    spec = constraint(job["task"], attribute, train, job["seed"])
    reg = FairRegressor(spec, batch_size=job["batch"], seed=job["seed"], **variant_options(job, len(train)))
    seconds, warned = timed_fit(reg, train)
    return {**{k: job[k] for k in ("task", "seed", "batch", "variant")}, "model": job.get("model", "linear"),
            "n_train": len(train),
            "train_r2": float(reg.score(train)), "test_r2": float(reg.score(test)),
            "train_violation": float(reg.train_violation_),
            "met": all(entry["met"] for entry in reg.evaluate(train)["bounds"].values()), "status": str(reg.status_),
            "iterations": len(reg.history_.records), "warned": warned, "seconds": seconds}


def jobs(tasks: list[str], seeds: list[int], batches: list[int | None], variants: list[str],
         data_root: str, model: str = "linear") -> list[dict]:
    """One job per task, seed, batch and variant; a network's full batch once (``default``: its variants
    differ only on mini-batches)."""
    return [{"task": t, "seed": s, "batch": b, "variant": v, "data_dir": data_root, "model": model}
            for t in tasks for s in seeds for b in batches for v in variants
            if not (model == "mlp" and b is None and v != NETWORK_VARIANTS[0])]


def cell_means(runs: list[dict]) -> list[dict]:
    """Seed means per (task, batch, variant), with each mini-batch run's gap to its variant's full batch."""
    full = {(r["task"], r["seed"], r["variant"]): r for r in runs if r["batch"] is None}
    for r in [r for r in runs if r["batch"] is None and r["variant"] == NETWORK_VARIANTS[0]]:
        for other in NETWORK_VARIANTS[1:]:  # a network's variants share its full batch
            full.setdefault((r["task"], r["seed"], other), r)
    cells: dict[tuple, list[dict]] = defaultdict(list)
    for r in runs:
        cells[(r["task"], "full" if r["batch"] is None else r["batch"], r["variant"])].append(r)
    out = []
    for (task, batch, variant), rs in cells.items():
        pairs = [(r, full[(r["task"], r["seed"], r["variant"])]) for r in rs
                 if (r["task"], r["seed"], r["variant"]) in full]
        gaps = [r["train_r2"] - f["train_r2"] for r, f in pairs]
        test_gaps = [r["test_r2"] - f["test_r2"] for r, f in pairs]
        out.append({"task": task, "batch": batch, "variant": variant, "runs": len(rs),
                    "train_r2": statistics.mean(r["train_r2"] for r in rs),
                    "test_r2": statistics.mean(r["test_r2"] for r in rs),
                    "worst_gap": min(gaps) if gaps and batch != "full" else None,
                    "worst_test_gap": min(test_gaps) if test_gaps and batch != "full" else None,
                    "converged": sum(r["status"] == "converged" for r in rs),
                    "met": sum(r["met"] for r in rs),
                    "iterations": statistics.mean(r["iterations"] for r in rs),
                    "seconds": statistics.mean(r["seconds"] for r in rs),
                    "warned": sorted({w for r in rs for w in r["warned"]})})
    order = {t: i for i, t in enumerate(TASKS)}
    sizes = {"full": 0, **{b: i for i, b in enumerate(BATCHES, 1) if b is not None}}
    return sorted(out, key=lambda c: (order.get(c["task"], 99), sizes.get(c["batch"], 99), c["variant"]))


def report(runs: list[dict], header: list[str]) -> str:
    lines = [*header, "", "| task | batch | variant | runs | train R2 | test R2 | worst gap to full batch | "
             "worst test gap | converged | bound met | iterations | seconds | warnings |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    signed = lambda v: "-" if v is None else f"{v:+.4f}"  # noqa: E731
    for c in cell_means(runs):
        lines.append(f"| {c['task']} | {c['batch']} | {c['variant']} | {c['runs']} | {c['train_r2']:.4f} | "
                     f"{c['test_r2']:.4f} | {signed(c['worst_gap'])} | {signed(c['worst_test_gap'])} | "
                     f"{c['converged']}/{c['runs']} | {c['met']}/{c['runs']} | "
                     f"{c['iterations']:.0f} | {c['seconds']:.2f} | {', '.join(c['warned']) or '-'} |")
    return "\n".join(lines) + "\n"


def merged_runs(runs: list[dict], out: Path) -> list[dict]:
    """``runs`` and the runs of ``out``'s ``runs.json`` that they do not run again (same task, seed, batch and
    variant), each with the commit that produced it."""
    if not (out / "runs.json").exists():
        return runs
    rerun = {_key(r) for r in runs}
    return runs + [r for r in json.loads((out / "runs.json").read_text()) if _key(r) not in rerun]


def _key(run: dict) -> tuple:
    return run["task"], run["seed"], str(run["batch"]), run["variant"]


def _at_a_time(jobs: int) -> str:
    return "one fit at a time" if jobs == 1 else f"{jobs} fits at a time"


def main(argv: list[str] | None = None) -> int:
    ap = task_grid_parser(__doc__.splitlines()[0], TASKS, DEFAULT_OUT / "regressor_minibatch")
    ap.add_argument("--model", default="linear", choices=["linear", "mlp"])
    ap.add_argument("--variants", nargs="+", default=None, choices=[*VARIANTS, *NETWORK_VARIANTS],
                    help="default: whitened and inputs (linear), default and 500-steps (mlp)")
    ap.add_argument("--batches", nargs="+", default=["full", *(str(b) for b in BATCHES if b is not None)],
                    help="'full' (a full batch) and batch sizes")
    ap.add_argument("--merge", action="store_true",
                    help="keep the runs of --out's runs.json that this invocation does not run again (the page "
                         "then reports them all and counts the runs by commit)")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    root = str(data_dir(args.data_dir))
    variants = args.variants or list(VARIANTS if args.model == "linear" else NETWORK_VARIANTS)
    batches = [None if b == "full" else int(b) for b in args.batches]
    todo = jobs(args.tasks, args.seeds, batches, variants, root, args.model)
    runs = pooled_runs(fit_cell, todo, args.jobs, logger, lambda r: (
        f"{r['task']} seed {r['seed']} batch {r['batch'] or 'full'} {r['variant']}: train R2 {r['train_r2']:.4f} "
        f"test {r['test_r2']:.4f} {r['status']} ({r['seconds']:.1f} s)"))
    if args.merge:
        runs = merged_runs(runs, Path(args.out))
    by_commit = Counter(r.get("commit", "an earlier commit") for r in runs)
    title = ("whitened inputs against the inputs as they are" if args.model == "linear"
             else "a network's mini-batch step budget, the default against 500 steps")
    header = [f"# FairRegressor ({args.model}, SQP): {title}", "",
              f"commit {commit()}; `python benchmarks/regressor_minibatch.py "
              f"{' '.join(sys.argv[1:] if argv is None else argv)}`"
              + ("; runs by commit: " + ", ".join(f"{n} at {c}" for c, n in sorted(by_commit.items()))
                 if args.merge else ""), "",
              "Every estimator setting at its default but `batch_size` ('full': none); seeded 70/30 splits; "
              "'worst gap' / 'worst test gap': the lowest train / test R2 of a mini-batch run minus its full batch's "
              "(same seed and variant; a network's variants share the full batch); "
              "'bound met': the estimator's `evaluate` on the training rows says every bound is met; seconds of one "
              f"fit on one thread on a shared 2-core machine ({_at_a_time(args.jobs)} in this invocation"
              + (", two in the earlier runs)." if args.merge else ").")]
    write_grid(Path(args.out), runs, _key, report(runs, header))
    return 0


if __name__ == "__main__":
    sys.exit(main())
