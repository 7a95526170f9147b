"""FairRegressor's full-batch SQP on few rows: the epochs' budget, the stall at the step's floor, a budget by rows.

``FairRegressor`` (SQP, full batch, every setting at its default but the variant's) on seeded samples of
Communities and Crime (``violentPerPop``, sensitive ``race``) and Law School (``zfygpa``, ``race``) and on a
synthetic low-noise non-linear task, each split 70/30 (``FairData.split``, seeds 0-2), without a bound and
under GeDI <= 0.2 relative to the target's (``("gedi", "race", 0.2, {"relative": True})``). Tasks are
``<data>-<rows>`` (rows before the split; ``all``: every row):

- ``communities-100`` ... ``communities-all`` (1,993 rows, 102 correlated columns);
- ``law-300`` ... ``law-all`` (20,798 rows);
- ``synthetic-150``, ``synthetic-400``: ``y = sin(2 x0) + x1^2 - x2 x3 + 0.5 x4 + 0.3 e`` on 8 normal inputs,
  ``x0`` shifted by 0.8 for the 30% of rows with ``s = 1`` (a signal a network needs many epochs to fit).

Variants (``--variants``): ``default``, the estimator as it is; ``no-stall``, the same without the stop at
the floor of the step (``engine_params={"stall_epochs": None}``: every run to its feasible KKT point or its
10,000 epochs, the default before); ``rows-budget`` (networks only), a candidate measured and not adopted:
``epochs = min(10000, ceil(10000 n / 1395))`` for ``n`` training rows, the budget of Communities' 1,395
training rows in proportion to the rows. The page has per cell the seed means of seconds, iterations, train
and test R2, how many runs converged, stalled and met their bound, and the default's largest paired train
and test R2 differences to ``no-stall`` (same seed)::

    python benchmarks/regressor_small.py --data-dir ../shared/data --jobs 1
"""

from __future__ import annotations

import logging
import math
import statistics
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

from _common import DEFAULT_OUT, commit, data_dir, pooled_runs, task_grid_parser, timed_fit, write_grid

TASKS: tuple[str, ...] = ("communities-100", "communities-300", "communities-1000", "communities-all", "law-300",
                          "law-1000", "law-5000", "law-all", "synthetic-150", "synthetic-400")
VARIANTS: tuple[str, ...] = ("default", "no-stall", "rows-budget")
MODELS: tuple[str, ...] = ("mlp", "linear")
BOUNDS: tuple[str, ...] = ("none", "gedi")
#: ``rows-budget``: the epochs' budget and the training rows it was chosen on (Communities and Crime).
BUDGET_EPOCHS, BUDGET_ROWS = 10000, 1395
SYNTHETIC_ROWS = 5000

logger = logging.getLogger("benchmarks.regressor_small")


def synthetic(seed: int = 100) -> Any:
    """The synthetic task's rows (a fixed draw; the seeds pick samples and splits of it)."""
    import numpy as np

    from fairopt import FairData

    rng = np.random.default_rng(seed)
    s = (rng.random(SYNTHETIC_ROWS) < 0.3).astype(float)
    X = rng.normal(size=(SYNTHETIC_ROWS, 8))
    X[:, 0] += 0.8 * s
    y = np.sin(2 * X[:, 0]) + X[:, 1] ** 2 - X[:, 2] * X[:, 3] + 0.5 * X[:, 4] + 0.3 * rng.normal(size=SYNTHETIC_ROWS)
    return FairData.from_arrays(X, y, {"race": s}, task="regression")


def load_task(task: str, data_root: str, seed: int) -> tuple[Any, Any]:
    """The seeded sample of ``task``'s rows and its seeded 70/30 split."""
    import numpy as np

    from fairopt import datasets

    name, rows = task.split("-")
    if name == "communities":
        data = datasets.load("communities", data_dir=data_root, sensitive=["race"])
    elif name == "law":
        data = datasets.load("law", data_dir=data_root, target="zfygpa")
    else:
        data = synthetic()
    if rows != "all" and int(rows) < len(data):
        data = data.subset(np.sort(np.random.default_rng(seed).permutation(len(data))[:int(rows)]))
    return data.split(test_size=0.3, seed=seed)


def variant_options(variant: str, n_train: int) -> dict:
    """The estimator options of ``variant`` on ``n_train`` training rows."""
    if variant == "no-stall":
        return {"engine_params": {"stall_epochs": None}}
    if variant == "rows-budget":
        return {"epochs": min(BUDGET_EPOCHS, math.ceil(BUDGET_EPOCHS * n_train / BUDGET_ROWS))}
    return {}


def fit_cell(job: dict) -> dict:
    """One fit: seconds, iterations, status and the engine's termination, train and test R2, bound met."""
    import torch

    from fairopt.estimators import FairRegressor

    torch.set_num_threads(1)
    train, test = load_task(job["task"], job["data_dir"], job["seed"])
    spec = ("gedi", "race", 0.2, {"relative": True}) if job["bound"] == "gedi" else None
    reg = FairRegressor(spec, model=job["model"], seed=job["seed"], **variant_options(job["variant"], len(train)))
    seconds, warned = timed_fit(reg, train)
    met = all(entry["met"] for entry in reg.evaluate(train)["bounds"].values()) if spec else True
    return {**{k: job[k] for k in ("task", "bound", "model", "variant", "seed")}, "n_train": len(train),
            "train_r2": float(reg.score(train)), "test_r2": float(reg.score(test)), "met": bool(met),
            "status": str(reg.status_), "termination": str(reg.engine_info_.get("termination")),
            "iterations": int(reg.n_iter_), "warned": warned, "seconds": seconds}


def jobs(tasks: list[str], seeds: list[int], models: list[str], variants: list[str], data_root: str) -> list[dict]:
    """One job per task, bound, model, variant and seed (``rows-budget`` for networks only)."""
    return [{"task": t, "bound": b, "model": m, "variant": v, "seed": s, "data_dir": data_root}
            for t in tasks for b in BOUNDS for m in models for v in variants for s in seeds
            if not (v == "rows-budget" and m != "mlp")]


def cell_means(runs: list[dict]) -> list[dict]:
    """Seed means per (task, bound, model, variant), with each run's paired differences to ``no-stall``."""
    before = {(r["task"], r["bound"], r["model"], r["seed"]): r for r in runs if r["variant"] == "no-stall"}
    cells: dict[tuple, list[dict]] = defaultdict(list)
    for r in runs:
        cells[(r["task"], r["bound"], r["model"], r["variant"])].append(r)
    out = []
    for (task, bound, model, variant), rs in cells.items():
        pairs = [(r, before[(task, bound, model, r["seed"])]) for r in rs
                 if variant != "no-stall" and (task, bound, model, r["seed"]) in before]
        train_d = [r["train_r2"] - b["train_r2"] for r, b in pairs]
        test_d = [r["test_r2"] - b["test_r2"] for r, b in pairs]
        out.append({"task": task, "bound": bound, "model": model, "variant": variant, "runs": len(rs),
                    "n_train": rs[0]["n_train"], "seconds": statistics.mean(r["seconds"] for r in rs),
                    "iterations": statistics.mean(r["iterations"] for r in rs),
                    "train_r2": statistics.mean(r["train_r2"] for r in rs),
                    "test_r2": statistics.mean(r["test_r2"] for r in rs),
                    "converged": sum(r["status"] == "converged" for r in rs),
                    "stalled": sum(r["termination"] == "stalled" for r in rs), "met": sum(r["met"] for r in rs),
                    "train_diff": _extreme(train_d),
                    "test_diff": _extreme(test_d),
                    "warned": sorted({w for r in rs for w in r["warned"]})})
    order = {t: i for i, t in enumerate(TASKS)}
    return sorted(out, key=lambda c: (MODELS.index(c["model"]), order.get(c["task"], 99), BOUNDS.index(c["bound"]),
                                      VARIANTS.index(c["variant"])))


def _extreme(values: list[float]) -> float | None:
    """The value of largest magnitude (None for none)."""
    return max(values, key=abs) if values else None


def report(runs: list[dict], header: list[str]) -> str:
    lines = [*header, "", "| model | task | bound | variant | runs | train rows | seconds | iterations | train R2 | "
             "test R2 | largest train diff | largest test diff | converged | stalled | bound met | warnings |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    signed = lambda v: "-" if v is None else f"{v:+.4f}"  # noqa: E731
    for c in cell_means(runs):
        lines.append(f"| {c['model']} | {c['task']} | {c['bound']} | {c['variant']} | {c['runs']} | {c['n_train']} | "
                     f"{c['seconds']:.2f} | {c['iterations']:.0f} | {c['train_r2']:.4f} | {c['test_r2']:.4f} | "
                     f"{signed(c['train_diff'])} | {signed(c['test_diff'])} | {c['converged']}/{c['runs']} | "
                     f"{c['stalled']}/{c['runs']} | {c['met']}/{c['runs']} | {', '.join(c['warned']) or '-'} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = task_grid_parser(__doc__.splitlines()[0], TASKS, DEFAULT_OUT / "regressor_small")
    ap.add_argument("--models", nargs="+", default=list(MODELS), choices=list(MODELS))
    ap.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=list(VARIANTS))
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    todo = jobs(args.tasks, args.seeds, args.models, args.variants, str(data_dir(args.data_dir)))
    runs = pooled_runs(fit_cell, todo, args.jobs, logger, lambda r: (
        f"{r['model']} {r['task']} {r['bound']} {r['variant']} seed {r['seed']}: {r['iterations']} iterations, "
        f"train R2 {r['train_r2']:.4f} test {r['test_r2']:.4f} {r['status']}/{r['termination']} "
        f"({r['seconds']:.1f} s)"))
    header = ["# FairRegressor (SQP, full batch) on few rows: the stall at the step's floor, and a budget by rows", "",
              f"commit {commit()}; `python benchmarks/regressor_small.py "
              f"{' '.join(sys.argv[1:] if argv is None else argv)}`", "",
              "Seed means (seeds 0-2, seeded samples of `rows` rows split 70/30); 'largest train / test diff': the "
              "paired difference (same seed) to `no-stall` of largest magnitude; 'stalled': runs the stop at the "
              "step's floor ended (`engine_info_['termination']`); 'bound met': the estimator's `evaluate` on the "
              "training rows; seconds of one fit on one thread, one fit at a time on a shared 2-core machine."]
    key = lambda r: (r["model"], r["task"], r["bound"], r["variant"], r["seed"])  # noqa: E731
    write_grid(Path(args.out), runs, key, report(runs, header))
    return 0


if __name__ == "__main__":
    sys.exit(main())
