"""The step of the Gauss-Newton metric against how much the inputs move together (``lr="auto"``).

A full-batch SQP fit of a linear model takes the diagonal Gauss-Newton metric, whose steps
``-beta M^{-1} g`` overshoot along directions where several inputs move together by about
``beta * lambda`` Newton steps, ``lambda`` the metric's spread
(:func:`solvers.curvature.metric_spread`). The grid: the binary groupings of
``benchmarks/gbm_bounds_grid.py`` (Adult's sex, Dutch's sex, COMPAS's sex, ACS-Colorado's race, Law's sex,
Communities and Crime above its median, whose 100 inputs are strongly correlated), each as the loader gives
it (``copies`` -1) and as a plain matrix through ``FairData.from_arrays`` (every column standardised)
with 0, 1, 3 or 7 noisy copies of every column appended (noise of standard deviation :data:`NOISE`):
``lambda`` from 2 to about 90. ``FairClassifier()`` (linear, full batch, 500 epochs) without a bound and
under disparate impact >= 0.8, seeds 0-1, with ``lr`` 0.5, 0.35, 0.25, 0.15 and "auto" (the rule of
:data:`solvers.sqp.engine.STABLE_STEP_SPREAD`). Per run: the step taken, the training loss's largest
rise over its start (``max f / f_0``), whether the fit warned :class:`solvers.outcome.TrainingInstabilityWarning`,
train and test accuracy. With ``--batch-size`` the fits take mini-batches (the gradient metric, then
the polish under the Gauss-Newton one), ``lambda`` is the spread of the gradient metric's first steps
(``StochasticSQP.start_spread_``) and each run is set beside the full batch's train accuracy::

    python benchmarks/curvature_step.py --data-dir ../shared/data --jobs 2
    python benchmarks/curvature_step.py --batch-size 256 --steps auto 0.5 --out results/curvature_step/batch256 \
        --data-dir ../shared/data --jobs 2
    python benchmarks/curvature_step.py --datasets communities-race --copies -1 --steps auto 0.5 --seeds 0
"""

from __future__ import annotations

import logging
import statistics
import sys
import time
import warnings
from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from _common import DEFAULT_OUT, commit, data_dir, grid_parser, markdown, pooled, write_grid

#: The binary groupings of ``benchmarks/gbm_bounds_grid.py`` the grid reads.
TASKS = ("adult-sex", "dutch-sex", "compas-sex", "acsincome-race", "law-male", "communities-race")
#: Noisy copies of every column appended (-1: the loader's own FairData, no copies).
COPIES = (-1, 0, 1, 3, 7)
#: The steps compared: "auto" and fixed ``lr``.
STEPS: tuple[Any, ...] = ("auto", 0.5, 0.35, 0.25, 0.15)
#: Standard deviation of the noise of a copy (the columns are standardised: correlation about 0.98).
NOISE = 0.2
#: ``beta * lambda`` bands of the summary.
BANDS = (0.0, 3.0, 3.7, 4.0, 5.0, 7.0, float("inf"))

logger = logging.getLogger("benchmarks.curvature_step")


def with_copies(data: Any, copies: int, attribute: str, seed: int) -> Any:
    """``data`` (copies -1), or its inputs through ``FairData.from_arrays`` with ``copies`` noisy copies of every
    column appended (noise :data:`NOISE`, seeded)."""
    if copies < 0:
        return data
    from fairopt.data import FairData

    X = data.X.numpy().astype(np.float64)
    rng = np.random.default_rng(seed)
    inputs = np.hstack([X] + [X + NOISE * rng.standard_normal(X.shape) for _ in range(copies)])
    return FairData.from_arrays(inputs, data.y.numpy().reshape(-1), {attribute: data.sensitive[attribute].numpy()},
                                sensitive_kinds={attribute: "binary"})


def fit_cell(job: dict) -> dict:
    """One fit of ``job`` (task, copies, step, delta, seed, data_dir): the step and spread of the engine, the loss's
    rise, warnings, accuracies, seconds."""
    import torch

    from fairopt.estimators import FairClassifier
    from gbm_bounds_grid import load_task

    torch.set_num_threads(job.get("threads", 1))
    train, test, attributes = load_task(job["task"], job["data_dir"], job["seed"])
    attribute = attributes[0]
    train = with_copies(train, job["copies"], attribute, 100 + job["seed"])
    test = with_copies(test, job["copies"], attribute, 200 + job["seed"])
    bounds = [("disparate_impact", attribute, job["delta"])] if job["delta"] else []
    batch = job.get("batch_size")
    clf = FairClassifier(bounds, seed=job["seed"], lr=None if job["step"] == "auto" else job["step"], verbose=0,
                         batch_size=batch)
    start = time.perf_counter()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        clf.fit(train)
    seconds = time.perf_counter() - start
    f = clf.history_.column("f")
    f = f[np.isfinite(f)]
    run = {**{k: job[k] for k in ("task", "copies", "step", "delta", "seed")}, "batch_size": batch,
           "n_features": int(train.X.shape[1]), "lr": float(clf.engine_info_["lr"]),
           "spread": clf.engine_info_["start_spread" if batch else "metric_spread"],
           "rise": float(f.max() / f[0]), "unstable": any(w.category.__name__ == "TrainingInstabilityWarning"
                                                          for w in caught),
           "train_acc": float(clf.score(train)), "test_acc": float(clf.score(test)),
           "train_violation": float(clf.train_violation_), "seconds": seconds}
    if batch:  # the full batch's fit of the same data, for the accuracy a mini-batch run should keep
        full = FairClassifier(bounds, seed=job["seed"], verbose=0)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            full.fit(train)
        run["full_train_acc"] = float(full.score(train))
    return run


def with_spread(runs: list[dict]) -> list[dict]:
    """The runs with ``spread`` filled in from the "auto" run of the same data (task, copies, seed: the spread is
    computed at the starting parameters, which do not depend on the step or the bound) and ``beta_spread``
    (``lr * spread``); runs without such a run are left out."""
    spreads = {(r["task"], r["copies"], r["seed"]): r["spread"] for r in runs
               if r["step"] == "auto" and r["spread"] is not None}
    out = []
    for r in runs:
        spread = spreads.get((r["task"], r["copies"], r["seed"]))
        if spread is not None:
            out.append({**r, "spread": spread, "beta_spread": r["lr"] * spread})
    return out


def bands(runs: list[dict]) -> list[dict]:
    """Runs, unstable runs (warned) and the largest loss rise per ``beta * lambda`` band (:data:`BANDS`), for the
    default step 0.5, the smaller fixed steps and "auto"."""
    rows = []
    for kind, keep in (("lr 0.5", lambda r: r["step"] == 0.5), ("lr < 0.5", lambda r: r["step"] not in ("auto", 0.5)),
                       ("auto", lambda r: r["step"] == "auto")):
        chosen = [r for r in runs if keep(r)]
        for low, high in zip(BANDS[:-1], BANDS[1:]):
            part = [r for r in chosen if low < r["beta_spread"] <= high]
            if part:
                rows.append({"step": kind, "band": f"({low:g}, {high:g}]", "runs": len(part),
                             "unstable": sum(r["unstable"] for r in part),
                             "largest rise": max(r["rise"] for r in part)})
    return rows


def cells(runs: list[dict]) -> list[dict]:
    """Per (task, copies): inputs, mean spread, and per step the unstable runs and the mean test accuracy."""
    grouped: dict[tuple, list[dict]] = defaultdict(list)
    for r in runs:
        grouped[(r["task"], r["copies"])].append(r)
    order = {t: i for i, t in enumerate(TASKS)}
    out = []
    for (task, copies), rs in sorted(grouped.items(), key=lambda kv: (order.get(kv[0][0], 99), kv[0][1])):
        row = {"task": task, "copies": copies, "inputs": rs[0]["n_features"],
               "spread": statistics.mean(r["spread"] for r in rs)}
        for step in STEPS:
            part = [r for r in rs if r["step"] == step]
            if part:
                row[f"{step}: unstable"] = f"{sum(r['unstable'] for r in part)}/{len(part)}"
                row[f"{step}: test acc"] = statistics.mean(r["test_acc"] for r in part)
        auto = [r for r in rs if r["step"] == "auto"]
        if auto:
            row["auto lr"] = statistics.mean(r["lr"] for r in auto)
        if all("full_train_acc" in r for r in rs):  # mini-batches: train accuracy against the full batch's
            for step in STEPS:
                part = [r for r in rs if r["step"] == step]
                if part:
                    row[f"{step}: train - full"] = statistics.mean(r["train_acc"] - r["full_train_acc"] for r in part)
        out.append(row)
    return out


def report(runs: list[dict], header: list[str]) -> str:
    """The results page: the bands, the "auto" summary and the cell table."""
    runs = with_spread(runs)
    lines = list(header)
    lines += ["", "## Unstable runs by beta * lambda (TrainingInstabilityWarning; rise: largest max f / f_0)", "",
              markdown(pd.DataFrame(bands(runs)), floatfmt=".2f")]
    auto = [r for r in runs if r["step"] == "auto"]
    fixed = [r for r in runs if r["step"] == 0.5]
    if auto and fixed:
        capped = [r for r in auto if r["lr"] < 0.5]
        kept = {(r["task"], r["copies"], r["delta"], r["seed"]): r for r in fixed}
        same = [r for r in auto if r["lr"] == 0.5 and (r["task"], r["copies"], r["delta"], r["seed"]) in kept]
        identical = sum(r["train_acc"] == kept[(r["task"], r["copies"], r["delta"], r["seed"])]["train_acc"]
                        and r["rise"] == kept[(r["task"], r["copies"], r["delta"], r["seed"])]["rise"] for r in same)
        lines += ["", f"lr='auto': {len(capped)} of {len(auto)} runs take a smaller step than 0.5, "
                      f"{sum(r['unstable'] for r in auto)} unstable (lr 0.5: "
                      f"{sum(r['unstable'] for r in fixed)} of {len(fixed)}); the {len(same)} runs it leaves at 0.5 "
                      f"end as the fixed 0.5 does in {identical}."]
    table = pd.DataFrame(cells(runs))
    lines += ["", "## Per data set and copies (unstable runs, mean test accuracy; seeds and bounds pooled)", "",
              markdown(table)]
    return "\n".join(lines).rstrip("\n") + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = grid_parser(__doc__.splitlines()[0], list(TASKS), [0, 1], DEFAULT_OUT / "curvature_step")
    parser.add_argument("--copies", nargs="+", type=int, default=list(COPIES))
    parser.add_argument("--steps", nargs="+", default=[str(s) for s in STEPS], help='"auto" or a fixed lr')
    parser.add_argument("--deltas", nargs="+", type=float, default=[0.0, 0.8], help="0: no bound")
    parser.add_argument("--batch-size", type=int, default=None, help="mini-batches of so many rows (default: full)")
    parser.add_argument("--jobs", type=int, default=1, help="fits at a time (processes)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    steps = [s if s == "auto" else float(s) for s in args.steps]
    root = str(data_dir(args.data_dir))
    todo = [{"task": t, "copies": k, "step": s, "delta": d, "seed": seed, "data_dir": root, "threads": args.threads,
             "batch_size": args.batch_size}
            for t in args.datasets for k in args.copies for s in steps for d in args.deltas for seed in args.seeds]
    runs = []
    for i, run in pooled(fit_cell, todo, args.jobs):
        runs.append(run)
        logger.info("[%d/%d] %s copies %d lr %s delta %s seed %d: lr %.3g, rise %.2f, unstable %s (%.1f s)", i,
                    len(todo), run["task"], run["copies"], run["step"], run["delta"], run["seed"], run["lr"],
                    run["rise"], run["unstable"], run["seconds"])
    header = ["# The step of the Gauss-Newton metric against how much the inputs move together", "",
              f"commit {commit()}; `python benchmarks/curvature_step.py "
              f"{' '.join(sys.argv[1:] if argv is None else argv)}`", "",
              ("FairClassifier() (linear, full batch, 500 epochs)" if args.batch_size is None else
               f"FairClassifier(batch_size={args.batch_size}) (linear, epochs 'auto', the polish on all rows)")
              + ", no bound and DI >= 0.8; the loader's data (copies -1) and its inputs as a plain matrix with 0, 1, "
              f"3 or 7 noisy copies (noise sd {NOISE}) of every column; lambda: "
              + ("the Gauss-Newton metric's spread at the start (solvers.curvature.metric_spread)"
                 if args.batch_size is None else "the spread of the gradient metric's first steps "
                 "(StochasticSQP.start_spread_, lambda_max(G) / sqrt(mu))")
              + ", beta: the step taken (lr)."]
    write_grid(Path(args.out), runs, lambda r: (r["task"], r["copies"], str(r["step"]), r["delta"], r["seed"]),
               report(runs, header))
    return 0


if __name__ == "__main__":
    sys.exit(main())
