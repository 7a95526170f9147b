"""FairClassifier's mini-batch fits against its full batch, as a user fits them, over data sets and groupings.

Every setting at the estimator's default except ``batch_size`` (``epochs`` left to the engine's "auto"
budget of steps): disparate impact >= 0.8 on a binary attribute (Adult's sex, Dutch, Law, ACS-Colorado,
COMPAS's race as African-American against the rest) and on several groups (Adult's race, Adult's sex x race
cells, COMPAS's four race groups, ACS-Colorado's RAC1P) and Communities and Crime (above its median, race; 1,395
training rows, about 100 correlated inputs), seeded stratified 70/30 splits, a linear model and ``model="mlp"``.
Each mini-batch fit (batches of 128, 256, 512 and 1,024 rows) runs as the estimator fits it ("default": a rate
constraint that names no surrogate steps under the engine's calibrated form, ``sigmoid(5 out)`` for a linear
model and ``sigmoid(2 out)`` for a network's mini-batch steps), with the full batch's ``sigmoid(out)`` named on
the constraint ("group", what mini-batch fits took before the twenty-second session) and, for a network, with
``sigmoid(5 out)`` named ("threshold", what its mini-batch steps took before the twenty-fifth). Reports, per
model and variant, the runs within one point of the full batch's train accuracy (same split, same seed), the
worst, the cell means and the fits' seconds (one thread each)::

    python benchmarks/estimator_minibatch_grid.py --data-dir ../shared/data --jobs 2
    python benchmarks/estimator_minibatch_grid.py --models mlp --batches 128 --merge   # those runs again, the rest kept
"""

from __future__ import annotations

import json
import re
import logging
import statistics
import sys
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

from _common import DEFAULT_OUT, commit, data_dir, pooled_runs, task_grid_parser, timed_fit, write_grid

#: Task name -> (data set, sensitive attributes); a None attribute list is the binary attribute of the peer
#: benchmarks (:func:`benchmarks.papers.peers.prepare`'s grouping).
TASKS: dict[str, tuple[str, list[str] | None]] = {
    "adult": ("adult", None), "dutch": ("dutch", None), "law": ("law", None), "acsincome": ("acsincome", None),
    "compas": ("compas", None), "adult-race": ("adult", ["race"]), "adult-sex-x-race": ("adult", ["sex", "race"]),
    "compas-race": ("compas", ["race"]), "acsincome-rac1p": ("acsincome", ["RAC1P"]),
    "communities": ("communities", ["race"]),
}
MODELS: tuple[str, ...] = ("linear", "mlp")
BATCHES: tuple[int, ...] = (128, 256, 512, 1024)
#: Mini-batch variants: the estimator as it is, the full batch's rate surrogate named on the constraint, and the
#: threshold form ``sigmoid(5 out)`` named (networks only: a linear model's default).
VARIANTS: tuple[str, ...] = ("default", "group", "threshold")
DELTA = 0.8
TEST_SIZE = 0.3
#: "Keeps its accuracy": within this much train accuracy of the full batch (issue 30's criterion).
WITHIN = 0.01

logger = logging.getLogger("benchmarks.estimator_minibatch_grid")


def load_split(task: str, seed: int, data_root: str, max_rows: int | None = None) -> tuple[Any, Any, list[str]]:
    """The seeded stratified 70/30 split of ``task`` (FairData train and test) and the constrained attributes;
    ``max_rows``: a seeded row sample first (quick checks)."""
    import fairopt
    from benchmarks.papers.peers import load_binary, sample_rows

    name, attributes = TASKS[task]
    if name == "communities":  # its target above the median (benchmarks/gbm_bounds_grid.py)
        from gbm_bounds_grid import load_task

        train, test, attributes = load_task("communities-race", data_root, seed)
        return train, test, attributes
    if attributes is None:
        data = load_binary(name, data_root)
        attributes = [data.sensitive_names[0]]
    else:
        data = fairopt.datasets.load(name, data_dir=data_root, sensitive=attributes)
    train, test = sample_rows(data, max_rows, seed).split(test_size=TEST_SIZE, seed=seed)
    return train, test, attributes


def constraint(attributes: list[str], variant: str) -> Any:
    """DI >= DELTA on ``attributes`` (one attribute, or their intersection cells): a spec for "default" and the
    full batch, an object naming the full batch's surrogate for "group", ``sigmoid(5 out)`` for "threshold"."""
    from fairopt.constraints import DisparateImpact
    from fairopt.training import SQP_RATE_SURROGATE

    on = attributes[0] if len(attributes) == 1 else list(attributes)
    if variant == "group":
        return DisparateImpact(on, DELTA, surrogate=SQP_RATE_SURROGATE)
    if variant == "threshold":
        return DisparateImpact(on, DELTA, surrogate=DisparateImpact.calibrated_surrogates["threshold"])
    return ("disparate_impact", on, DELTA)


def fit_cell(job: dict) -> dict:
    """One fit of ``job`` (task, seed, model, batch, variant, data_dir, max_rows): accuracies, the exact
    violation of the bound (sum over the DI rows, rate units) on the training and the test rows, status,
    warnings and seconds."""
    import torch

    from fairopt.estimators import FairClassifier

    torch.set_num_threads(1)
    train, test, attributes = load_split(job["task"], job["seed"], job["data_dir"], job.get("max_rows"))
    clf = FairClassifier([constraint(attributes, job["variant"])], model=job["model"], batch_size=job["batch"],
                         seed=job["seed"])
    seconds, warned = timed_fit(clf, train)
    return {**{k: job[k] for k in ("task", "seed", "model", "batch", "variant")}, "n_train": len(train),
            "train_acc": float(clf.score(train)), "test_acc": float(clf.score(test)),
            "train_violation": float(clf.train_violation_), "test_violation": float(clf.evaluate(test)["violation"]),
            "status": str(clf.status_), "warned": warned,
            "seconds": seconds}


def jobs(tasks: list[str], seeds: list[int], models: list[str], batches: list[int], variants: list[str],
         data_root: str, max_rows: int | None = None) -> list[dict]:
    """Every fit of the grid: per (task, seed, model) the full batch and each (batch, variant)."""
    out = []
    for task in tasks:
        for seed in seeds:
            for model in models:
                common = {"task": task, "seed": seed, "model": model, "data_dir": data_root, "max_rows": max_rows}
                out.append({**common, "batch": None, "variant": "default"})
                out += [{**common, "batch": b, "variant": v} for b in batches for v in variants
                        if not (v == "threshold" and model == "linear")]  # a linear model's default
    return out


def with_full_batch_gaps(runs: list[dict]) -> list[dict]:
    """Each mini-batch run with ``gap``: its train accuracy minus that of the full batch of its task, seed and
    model (runs without their full batch are left out)."""
    full = {(r["task"], r["seed"], r["model"]): r["train_acc"] for r in runs if r["batch"] is None}
    out = []
    for r in runs:
        key = (r["task"], r["seed"], r["model"])
        if r["batch"] is not None and key in full:
            out.append({**r, "gap": r["train_acc"] - full[key]})
    return out


def counts(runs: list[dict]) -> dict[tuple[str, str], dict]:
    """Per (model, variant): mini-batch runs within WITHIN of their full batch, their number, the worst gap
    and the runs below (task/batch/seed: gap in points)."""
    out: dict[tuple[str, str], dict] = defaultdict(lambda: {"within": 0, "runs": 0, "worst": 0.0, "misses": []})
    for r in with_full_batch_gaps(runs):
        c = out[(r["model"], r["variant"])]
        c["runs"] += 1
        c["worst"] = min(c["worst"], r["gap"])
        if r["gap"] >= -WITHIN - 1e-12:  # exactly one point (in float rounding) is within
            c["within"] += 1
        else:
            c["misses"].append(f"{r['task']}/{r['batch']}/{r['seed']}: {100 * r['gap']:+.2f}")
    return dict(out)


def cell_means(runs: list[dict]) -> list[dict]:
    """Seed means per (task, model, batch, variant): train and test accuracy, the test rows' violation, seconds,
    runs feasible on the training rows (zero exact violation) and runs that warned."""
    cells: dict[tuple, list[dict]] = defaultdict(list)
    for r in runs:
        cells[(r["task"], r["model"], "full" if r["batch"] is None else r["batch"], r["variant"])].append(r)
    out = []
    for (task, model, batch, variant), rs in cells.items():
        out.append({"task": task, "model": model, "batch": batch, "variant": "-" if batch == "full" else variant,
                    "runs": len(rs), "train_acc": statistics.mean(r["train_acc"] for r in rs),
                    "test_acc": statistics.mean(r["test_acc"] for r in rs),
                    "test_violation": statistics.mean(r["test_violation"] for r in rs),
                    "seconds": statistics.mean(r["seconds"] for r in rs),
                    "feasible": sum(r["train_violation"] <= 1e-9 for r in rs),
                    "warned": sum(bool(r["warned"]) for r in rs)})
    order = {t: i for i, t in enumerate(TASKS)}
    return sorted(out, key=lambda c: (order.get(c["task"], 99), c["model"], str(c["batch"]), c["variant"]))


def report(runs: list[dict], header: list[str]) -> str:
    """The results page: the within-a-point counts per model and variant, then the cell table."""
    lines = [*header, "", "## Mini-batch runs within one point of the full batch's train accuracy", "",
             "| model | variant | within | runs | worst (points) | below |", "|---|---|---|---|---|---|"]
    for (model, variant), c in sorted(counts(runs).items()):
        lines.append(f"| {model} | {variant} | {c['within']} | {c['runs']} | {100 * c['worst']:+.2f} | "
                     f"{'; '.join(c['misses']) or '-'} |")
    lines += ["", "## Seed means", "",
              "| task | model | batch | variant | runs | train acc | test acc | test violation | seconds | feasible | "
              "warned |", "|---|---|---|---|---|---|---|---|---|---|---|"]
    for c in cell_means(runs):
        lines.append(f"| {c['task']} | {c['model']} | {c['batch']} | {c['variant']} | {c['runs']} | "
                     f"{c['train_acc']:.4f} | {c['test_acc']:.4f} | {c['test_violation']:.4f} | {c['seconds']:.2f} | "
                     f"{c['feasible']}/{c['runs']} | "
                     f"{c['warned']}/{c['runs']} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = task_grid_parser(__doc__.splitlines()[0], TASKS, DEFAULT_OUT / "estimator_minibatch_grid")
    ap.add_argument("--models", nargs="+", default=list(MODELS), choices=list(MODELS))
    ap.add_argument("--batches", nargs="+", type=int, default=list(BATCHES))
    ap.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=list(VARIANTS))
    ap.add_argument("--max-rows", type=int, default=None, help="a seeded row sample of each data set (quick checks)")
    ap.add_argument("--merge", action="store_true",
                    help="keep the runs of --out's runs.json that this invocation does not run again (the page "
                         "then reports them all, each run with the commit that produced it)")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    root = str(data_dir(args.data_dir))
    todo = jobs(args.tasks, args.seeds, args.models, args.batches, args.variants, root, args.max_rows)
    runs = pooled_runs(fit_cell, todo, args.jobs, logger, lambda r: (
        f"{r['task']} seed {r['seed']} {r['model']} batch {r['batch'] or 'full'} {r['variant']}: train "
        f"{r['train_acc']:.4f} test {r['test_acc']:.4f} ({r['seconds']:.1f} s)"))
    out = Path(args.out)
    key = lambda r: (r["task"], r["seed"], r["model"], str(r["batch"]), r["variant"])  # noqa: E731
    if args.merge and (out / "runs.json").exists():
        rerun = {key(r) for r in runs}
        earlier = re.search(r"commit (\S+?);", (out / "grid.md").read_text()) if (out / "grid.md").exists() else None
        runs += [{"commit": earlier.group(1) if earlier else "an earlier commit", **r}
                 for r in json.loads((out / "runs.json").read_text()) if key(r) not in rerun]
    by_commit = Counter(r.get("commit", "an earlier commit") for r in runs)
    header = ["# FairClassifier: mini-batches against the full batch", "",
              f"commit {commit()}; `python benchmarks/estimator_minibatch_grid.py "
              f"{' '.join(sys.argv[1:] if argv is None else argv)}`; runs by commit: "
              + ", ".join(f"{n} at {c}" for c, n in sorted(by_commit.items())), "",
              f"Disparate impact >= {DELTA}, every estimator setting at its default but `batch_size`; seeded "
              "stratified 70/30 splits; 'default': the estimator as it is, 'group': the full batch's rate surrogate "
              "`sigmoid(out)` named on the constraint, 'threshold' (networks): `sigmoid(5 out)` named, a network's "
              "mini-batch form before `sigmoid(2 out)`; 'feasible': zero exact violation on the training rows; "
              "seconds of one fit on one thread, two fits at a time on a shared 2-core machine."]
    write_grid(out, runs, key, report(runs, header))
    return 0


if __name__ == "__main__":
    sys.exit(main())
