"""The estimators' first-order methods (method="penalty", "lagrangian") on mini-batches against their full batch.

FairClassifier under disparate impact >= 0.8 on the data set's default binary attribute (Adult's sex on a seeded
20,000-row sample, Dutch, COMPAS's African-American against the rest, Law, ACS-Colorado), seeded stratified 70/30
splits (:func:`estimator_minibatch_grid.load_split`), a linear model and ``model="mlp"``, batches of 256 and 1,024
rows. Variants of a mini-batch fit:

- ``default``: the estimator as it is (every option but ``batch_size`` left to it);
- ``legacy``: the defaults before the mini-batch rule, ``--legacy-epochs`` epochs (1,000 was the default; a smaller
  number is stated on the page) at a constant ``lr`` 0.02, the Lagrangian's hinge ascent on its surrogate rows and the
  Penalty's plain batch hinge;
- ``steps``, ``cosine``, ``cosine2x``: the candidate rules the default was chosen from, through explicit options:
  a budget of ``S`` steps (``epochs = ceil(S / K)`` for ``K`` batches an epoch; 1,000 steps, the full batch's
  count, or 2,000 for ``cosine2x``) and the Lagrangian's signed dual update (``steps``), with the step decayed
  ``lr_t = 0.02 (1 + cos(pi t / T)) / 2`` and the Penalty's hinge switched by a running mean of the rows
  (``cosine``, ``cosine2x``); the Lagrangian's rows of these three are its surrogate's (``calibrate_exact=False``,
  before the default took the exact rows' level and the calibrated form's gradient).

Reports per method, model and variant the runs within one point of the full batch's train accuracy, the runs
feasible on all training rows where the full batch is, the runs faster than it, and per cell the seed means::

    python benchmarks/first_order_minibatch.py --data-dir ../shared/data
    python benchmarks/first_order_minibatch.py --variants legacy --seeds 0 --legacy-epochs 20 --merge
    python benchmarks/first_order_minibatch.py --tasks adult compas --seeds 0 --variants steps cosine --out /tmp/x
"""

from __future__ import annotations

import functools
import json
import logging
import math
import statistics
import sys
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

from _common import DEFAULT_OUT, commit, data_dir, pooled_runs, task_grid_parser, timed_fit, write_grid

TASKS: tuple[str, ...] = ("adult", "dutch", "compas", "law", "acsincome")
METHODS: tuple[str, ...] = ("penalty", "lagrangian")
MODELS: tuple[str, ...] = ("linear", "mlp")
BATCHES: tuple[int, ...] = (256, 1024)
VARIANTS: tuple[str, ...] = ("default", "legacy", "steps", "cosine", "cosine2x")
#: Adult: a seeded sample of this many rows before the split (the other data sets whole).
ADULT_ROWS = 20000
DELTA = 0.8
#: "Keeps its accuracy": within this much train accuracy of the full batch.
WITHIN = 0.01
#: The first-order defaults before the mini-batch rule: lr and the full-batch epochs.
LEGACY_LR, LEGACY_EPOCHS = 0.02, 1000

logger = logging.getLogger("benchmarks.first_order_minibatch")


@functools.lru_cache(maxsize=4)
def split(task: str, seed: int, data_root: str) -> tuple[Any, Any, list[str]]:
    """The seeded 70/30 split of ``task`` (cached per worker process)."""
    from estimator_minibatch_grid import load_split

    return load_split(task, seed, data_root, ADULT_ROWS if task == "adult" else None)


def variant_options(variant: str, method: str, n_rows: int, batch: int | None, legacy_epochs: int) -> dict:
    """The estimator options of a mini-batch ``variant`` (module docstring) on ``n_rows`` training rows."""
    if batch is None or variant == "default":
        return {}
    if variant == "legacy":
        params = {"dual_update": "ascent", "calibrate_exact": False} if method == "lagrangian" else {
            "row_smoothing": None}
        return {"epochs": legacy_epochs, "lr": LEGACY_LR, "engine_params": {**params, "lr_schedule": "none"}}
    steps = 2000 if variant == "cosine2x" else 1000
    epochs = min(LEGACY_EPOCHS, math.ceil(steps / math.ceil(n_rows / batch)))
    smooth = variant != "steps"
    if method == "lagrangian":
        params = {"dual_update": "signed", "lr_schedule": "cosine" if smooth else "none", "calibrate_exact": False}
    else:
        params = {"row_smoothing": 0.05 if smooth else None, "lr_schedule": "cosine" if smooth else "none"}
    return {"epochs": epochs, "engine_params": params}


def fit_cell(job: dict) -> dict:
    """One fit of ``job``: train and test accuracy, the exact violation on the training rows (rate units),
    status, epochs run, warnings and seconds (one thread; Adam's first construction, which imports
    ``torch._dynamo``, is done before the clock starts)."""
    import torch

    from fairopt.estimators import FairClassifier

    torch.set_num_threads(1)
    torch.optim.Adam([torch.zeros(1, requires_grad=True)])  # the one-off import out of the timed fit
    train, test, attributes = split(job["task"], job["seed"], job["data_dir"])
    options = variant_options(job["variant"], job["method"], len(train), job["batch"], job["legacy_epochs"])
    clf = FairClassifier([("disparate_impact", attributes[0], DELTA)], method=job["method"], model=job["model"],
                         batch_size=job["batch"], seed=job["seed"], **options)
    seconds, warned = timed_fit(clf, train)
    epochs = int(max(r["epoch"] for r in clf.history_)) + 1 if len(clf.history_) else 0
    return {**{k: job[k] for k in ("task", "seed", "method", "model", "batch", "variant")}, "n_train": len(train),
            "train_acc": float(clf.score(train)), "test_acc": float(clf.score(test)),
            "train_violation": float(clf.train_violation_), "status": str(clf.status_), "epochs": epochs,
            "steps": len(clf.history_), "warned": warned, "seconds": seconds}


def jobs(args: Any, data_root: str) -> list[dict]:
    """Per (task, seed, method, model) the full batch and each (batch, variant); the largest data sets first."""
    out = []
    for task in args.tasks:
        for seed in args.seeds:
            for method in args.methods:
                for model in args.models:
                    common = {"task": task, "seed": seed, "method": method, "model": model, "data_dir": data_root,
                              "legacy_epochs": args.legacy_epochs}
                    out.append({**common, "batch": None, "variant": "full"})
                    out += [{**common, "batch": b, "variant": v} for b in args.batches for v in args.variants]
    return out


def with_full_batch(runs: list[dict]) -> list[dict]:
    """Each mini-batch run with its full batch's figures (``gap``: train accuracy minus the full batch's,
    ``full_feasible``, ``full_seconds``); runs without their full batch are left out."""
    full = {(r["task"], r["seed"], r["method"], r["model"]): r for r in runs if r["batch"] is None}
    out = []
    for r in runs:
        f = full.get((r["task"], r["seed"], r["method"], r["model"]))
        if r["batch"] is not None and f is not None:
            out.append({**r, "gap": r["train_acc"] - f["train_acc"], "full_feasible": f["train_violation"] <= 1e-9,
                        "full_seconds": f["seconds"]})
    return out


def summary(runs: list[dict]) -> list[str]:
    """Per (method, model, variant): runs within WITHIN, feasible where the full batch is (or warned), no slower
    than the full batch, the mean and worst gap, mean seconds against the full batch's, and the runs below."""
    groups: dict[tuple, list[dict]] = defaultdict(list)
    for r in with_full_batch(runs):
        groups[(r["method"], r["model"], r["variant"])].append(r)
    lines = ["| method | model | variant | runs | within 1 pt | feasible or warned | no slower | mean gap (pts) | "
             "worst gap (pts) | seconds (full) | below 1 pt |", "|---|---|---|---|---|---|---|---|---|---|---|"]
    for (method, model, variant), rs in sorted(groups.items()):
        within = sum(r["gap"] >= -WITHIN - 1e-12 for r in rs)
        ok = sum(r["train_violation"] <= 1e-9 or not r["full_feasible"] or bool(r["warned"]) for r in rs)
        fast = sum(r["seconds"] <= r["full_seconds"] for r in rs)
        misses = "; ".join(f"{r['task']}/{r['batch']}/{r['seed']}: {100 * r['gap']:+.2f}" for r in rs
                           if r["gap"] < -WITHIN - 1e-12) or "-"
        lines.append(f"| {method} | {model} | {variant} | {len(rs)} | {within} | {ok} | {fast} | "
                     f"{100 * statistics.mean(r['gap'] for r in rs):+.2f} | {100 * min(r['gap'] for r in rs):+.2f} | "
                     f"{statistics.mean(r['seconds'] for r in rs):.1f} "
                     f"({statistics.mean(r['full_seconds'] for r in rs):.1f}) | {misses} |")
    return lines


def cells(runs: list[dict]) -> list[str]:
    """Seed means per (task, method, model, batch, variant): accuracies, feasible runs, warned runs, epochs, steps
    and seconds."""
    groups: dict[tuple, list[dict]] = defaultdict(list)
    for r in runs:
        batch = "full" if r["batch"] is None else r["batch"]
        groups[(r["task"], r["method"], r["model"], batch, r["variant"])].append(r)
    order = {t: i for i, t in enumerate(TASKS)}
    lines = ["| task | method | model | batch | variant | runs | train acc | test acc | feasible | warned | epochs | "
             "steps | seconds |", "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for key in sorted(groups, key=lambda k: (order.get(k[0], 99), k[1], k[2], str(k[3]), k[4])):
        rs = groups[key]
        mean = lambda field: statistics.mean(r[field] for r in rs)  # noqa: E731
        lines.append(f"| {' | '.join(str(k) for k in key)} | {len(rs)} | {mean('train_acc'):.4f} | "
                     f"{mean('test_acc'):.4f} | {sum(r['train_violation'] <= 1e-9 for r in rs)}/{len(rs)} | "
                     f"{sum(bool(r['warned']) for r in rs)}/{len(rs)} | {mean('epochs'):.0f} | {mean('steps'):.0f} | "
                     f"{mean('seconds'):.2f} |")
    return lines


def main(argv: list[str] | None = None) -> int:
    ap = task_grid_parser(__doc__.splitlines()[0], TASKS, DEFAULT_OUT / "first_order_minibatch")
    ap.set_defaults(seeds=[0, 1])
    ap.add_argument("--methods", nargs="+", default=list(METHODS), choices=list(METHODS))
    ap.add_argument("--models", nargs="+", default=list(MODELS), choices=list(MODELS))
    ap.add_argument("--batches", nargs="+", type=int, default=list(BATCHES))
    ap.add_argument("--variants", nargs="+", default=["default", "legacy"], choices=list(VARIANTS))
    ap.add_argument("--legacy-epochs", type=int, default=LEGACY_EPOCHS,
                    help="epochs of the 'legacy' variant (the default before the rule: 1,000)")
    ap.add_argument("--merge", action="store_true",
                    help="keep the runs of --out's runs.json and run only the fits it lacks")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    key = lambda r: (r["task"], r["seed"], r["method"], r["model"], str(r["batch"]), r["variant"])  # noqa: E731
    earlier = json.loads((Path(args.out) / "runs.json").read_text()) if args.merge and (
        Path(args.out) / "runs.json").exists() else []
    done = {key(r) for r in earlier}
    todo = [j for j in jobs(args, str(data_dir(args.data_dir))) if key(j) not in done]
    runs = earlier + pooled_runs(fit_cell, todo, args.jobs, logger, lambda r: (
        f"{r['task']} seed {r['seed']} {r['method']} {r['model']} batch {r['batch'] or 'full'} {r['variant']}: "
        f"train {r['train_acc']:.4f} violation {r['train_violation']:.4f} {r['epochs']} epochs "
        f"({r['seconds']:.1f} s)"))
    header = ["# First-order methods: mini-batches against the full batch", "",
              f"commit {commit()}; `python benchmarks/first_order_minibatch.py "
              f"{' '.join(sys.argv[1:] if argv is None else argv)}`; runs by commit: "
              + ", ".join(f"{n} at {c}" for c, n in sorted(Counter(r["commit"] for r in runs).items())), "",
              f"Disparate impact >= {DELTA} on the default binary attribute; seeded stratified 70/30 splits (Adult: "
              f"a {ADULT_ROWS:,}-row sample); 'legacy': the defaults before the mini-batch rule at "
              f"{args.legacy_epochs} epochs" + (" (the default was 1,000: its seconds are a fraction of a legacy "
                                               "fit's, its accuracy that of a fit cut short)"
                                               if args.legacy_epochs != LEGACY_EPOCHS else "")
              + "; 'feasible': zero exact violation on all training rows; 'feasible or warned': feasible, or the "
              "full batch is not, or the fit warned; seconds of one fit on one thread on a shared 2-core machine.",
              "", "## Summary (mini-batch runs against their full batch)", "", *summary(runs), "",
              "## Seed means", "", *cells(runs)]
    write_grid(Path(args.out), runs, key, "\n".join(header) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
