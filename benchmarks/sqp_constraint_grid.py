"""The mini-batch SQP under constraints its defaults were not chosen on, on the grid's protocol.

The accuracy grid (``sqp_stochastic.py --grid``, :mod:`sqp_grid`) chose the mini-batch defaults under
one ``DisparateImpact`` on one attribute. This grid asks whether they hold for the other constraint
families and for several rows of groups at once, on data and losses none of them was measured on:
each task of :data:`TASKS` (a data set, a loss and its constraints) x {linear, MLP 32} x batches of
{256, 1,024} x seeds 0-2,
``StochasticSQP(batch_size=B, epochs=10, seed=k)`` with every other setting at its default, against
the same engine with 300 full-batch epochs on the same 70/30 split.

The score is what the loss fits: accuracy (hard labels at 0) for the binary cross-entropy, R^2 for
least squares, and for the Poisson loss the deviance explained ``D^2 = 1 - D(y, mu) / D(y, mu_0)``,
``D(y, mu) = 2 sum_i (y_i log(y_i / mu_i) - (y_i - mu_i))`` with ``mu_i = v_i exp(out_i)`` (``v`` the
exposure) and ``mu_0`` the constant rate ``sum y / sum v`` (the Poisson analogue of R^2, 0 for a
constant predictor). A run is "within" when its train score is at least the full batch's minus
:data:`sqp_grid.GRID_POINT`, "feasible" when the engine's exact measure on all training rows meets every
bound (``FitResult.feasible``, the engine's ``feasibility_tol``), and "below constant" when its train
score is that of a constant predictor or worse (the majority-class rate, R^2 or D^2 of 0).

Beside them, where fairlearn has the constraint (:data:`EG_PEER`: equal opportunity, equalized odds,
disparate impact on intersection cells), its ``ExponentiatedGradient`` with a logistic regression on the
same splits, measured the same way (:func:`peer_cell`). It is a full-batch method with randomised
predictions: the comparison is of what each reaches, not of mini-batch against mini-batch (no
stochastic peer handles these constraints).

Distance-covariance bounds are 30% of the value that the same model, trained without constraints for
300 full-batch epochs on the same split, reaches (:data:`DCOV_FRACTION`; the statistic has no natural
unit, and the fraction makes the bound bind for every model and seed).

    python benchmarks/sqp_constraint_grid.py --jobs 2

Writes ``constraints.md`` (the table, the criteria's counts, per (task, model, batch) cell the seed
means against the full batch, the peer beside fairopt) and ``constraints.json`` under ``--out``
(``results/sqp_stochastic/constraints`` by default).
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import sys
import time
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from _common import DEFAULT_DATA, DEFAULT_OUT, commit
from sqp_grid import GRID_BATCHES, GRID_EPOCHS, GRID_FULL_EPOCHS, GRID_MODELS, GRID_POINT, counts_as_failure
from sqp_stochastic import grid_model

#: A distance-covariance bound as a fraction of the unconstrained model's value (module docstring).
DCOV_FRACTION = 0.3


@dataclass(frozen=True)
class Task:
    """Constraints on one data set: ``dataset`` and ``load`` (keywords of
    :func:`fairopt.datasets.load`), the engine's ``loss`` and ``constraint()``, which builds a fresh
    constraint object or a list of them for each fit (None: a distance-covariance bound on ``dcov``
    sized on the training part by :func:`dcov_bound`)."""

    dataset: str
    loss: str
    constraint: Callable[[], Any] | None
    load: dict | None = None
    dcov: tuple[str, ...] = ()


def _rate(kind: str, attribute: str) -> Callable[[], Any]:
    def build():
        import fairopt.constraints as c
        return getattr(c, kind)(attribute, 0.8)
    return build


def _two_attributes():
    from fairopt.constraints import DisparateImpact
    return [DisparateImpact("sex", 0.8), DisparateImpact("race", 0.8)]


def _intersection():
    from fairopt.constraints import DisparateImpact
    return DisparateImpact(["sex", "race"], 0.8)


def _covariance():
    from fairopt.constraints import Covariance
    return Covariance("sex", bound=0.01)


def _gedi(attribute: str, target: str | None) -> Callable[[], Any]:
    def build():
        from fairopt.constraints import GeDI
        return GeDI(attribute, degree=1, bound=0.2, relative=True, **({"target": target} if target else {}))
    return build


#: The grid's tasks: group rates other than disparate impact (equal opportunity, equalized odds),
#: disparate impact on two attributes at once and on their intersection (ten sex x race cells, the
#: smallest a few dozen rows), a covariance bound on the logits, GeDI on a continuous attribute
#: (classification, hard labels) and on a regression target, and distance covariance (classification
#: and Poisson counts with an exposure).
TASKS: dict[str, Task] = {
    "adult-eo": Task("adult", "bce", _rate("EqualOpportunity", "sex")),
    "compas-eo": Task("compas", "bce", _rate("EqualOpportunity", "race")),
    "adult-eodds": Task("adult", "bce", _rate("EqualizedOdds", "sex")),
    "adult-di-sex-and-race": Task("adult", "bce", _two_attributes, load={"sensitive": ["sex", "race"]}),
    "adult-di-sex-x-race": Task("adult", "bce", _intersection, load={"sensitive": ["sex", "race"]}),
    "adult-covariance": Task("adult", "bce", _covariance),
    "adult-gedi-age": Task("adult", "bce", _gedi("age", "labels"), load={"sensitive": ["age"]}),
    "law-gedi": Task("law", "mse", _gedi("race", None),
                     load={"target": "zfygpa", "task": "regression"}),
    "compas-dcov": Task("compas", "bce", None, load={"sensitive": ["sex", "race"]}, dcov=("sex", "race")),
    "pg15-dcov": Task("pg15training", "poisson", None, dcov=("Gender", "Group2")),
}


#: fairlearn's ``ExponentiatedGradient`` (logistic regression, full batch, a randomised classifier) on the
#: tasks whose constraint it has: its constraint class with ``ratio_bound = sqrt(0.8)`` (fairlearn bounds
#: each group's rate against the overall one both ways, so two groups' ratio is at least about 0.8) and
#: the sensitive columns it sees (two columns: their intersection cells).
EG_PEER: dict[str, tuple[str, tuple[str, ...]]] = {
    "adult-eo": ("TruePositiveRateParity", ("sex",)),
    "compas-eo": ("TruePositiveRateParity", ("race",)),
    "adult-eodds": ("EqualizedOdds", ("sex",)),
    "adult-di-sex-x-race": ("DemographicParity", ("sex", "race")),
}
PEER = "fairlearn-eg"


def split(task: Task, seed: int, data_root: str) -> tuple[Any, Any]:
    """The task's data set, loaded with its keywords, as the grid's seeded 70/30 split."""
    import fairopt

    data = fairopt.datasets.load(task.dataset, data_dir=data_root, **(task.load or {}))
    return data.split(test_size=0.3, seed=seed)


def built(task: Task) -> list:
    """A fresh list of the task's constraint objects (``Task.constraint`` may build one or several)."""
    made = task.constraint()
    return made if isinstance(made, list) else [made]


def dcov_bound(task: Task, model_kind: str, train, seed: int) -> float:
    """:data:`DCOV_FRACTION` times the CCdCov of the predictions that ``model_kind``, trained without
    constraints for the full batch's epochs on ``train``, makes against ``task.dcov``."""
    import torch

    from fairopt.constraints import DistanceCovariance
    from solvers import StochasticSQP

    free = grid_model(model_kind, train.n_features, seed)
    StochasticSQP(seed=seed, epochs=GRID_FULL_EPOCHS).fit(free, train, loss=task.loss)
    probe = DistanceCovariance(list(task.dcov), bound=1.0, kind="ccdcov")  # only its measure is read
    probe.setup(train)
    with torch.no_grad():
        return DCOV_FRACTION * float(probe.exact(free(train.X).reshape(-1), train).max())


def score(loss: str, out, part) -> float:
    """The train or test score of the outputs ``out`` on ``part`` (module docstring): accuracy, R^2
    or the Poisson deviance explained."""
    import numpy as np

    from fairopt.measures import accuracy, poisson_deviance, r2

    y, out = part.y.double().reshape(-1).numpy(), out.double().reshape(-1).numpy()
    if loss == "bce":
        return accuracy(y, (out > 0).astype(float))
    if loss == "mse":
        return r2(y, out)
    exposure = part.exposure.double().reshape(-1).numpy()
    constant = np.full_like(y, y.sum() / exposure.sum())  # the rate that fits the counts best
    return 1.0 - poisson_deviance(y, np.exp(out), exposure) / poisson_deviance(y, constant, exposure)


def constant_score(loss: str, part) -> float:
    """The train score of the best constant predictor: the majority-class rate, or 0 (R^2, D^2)."""
    if loss != "bce":
        return 0.0
    rate = float(part.y.double().mean())
    return max(rate, 1.0 - rate)


def cell(job: tuple) -> dict:
    """One fit in a worker process: ``(task, model, batch, seed, data_root)``, ``batch`` None for the
    full batch."""
    import torch

    from fairopt.constraints import DistanceCovariance
    from solvers import StochasticSQP

    name, model_kind, batch, seed, data_root = job
    task = TASKS[name]
    torch.set_num_threads(1)
    train, test = split(task, seed, data_root)
    if task.constraint is None:
        constraints = [DistanceCovariance(list(task.dcov), bound=dcov_bound(task, model_kind, train, seed),
                                          kind="ccdcov")]
    else:
        constraints = built(task)
    torch.manual_seed(seed)
    model = grid_model(model_kind, train.n_features, seed)
    start = time.perf_counter()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        epochs = GRID_FULL_EPOCHS if batch is None else GRID_EPOCHS
        result = StochasticSQP(batch_size=batch, seed=seed, epochs=epochs).fit(
            model, train, loss=task.loss, constraints=constraints)
    seconds = time.perf_counter() - start
    with torch.no_grad():
        out_train, out_test = model(train.X), model(test.X)
    return {"task": name, "model": model_kind, "batch": batch or "full", "seed": seed,
            "constant": constant_score(task.loss, train), "train_score": score(task.loss, out_train, train),
            "test_score": score(task.loss, out_test, test), "feasible": bool(result.feasible),
            "violation": result.violation, "status": result.status, "seconds": seconds,
            "iterations": len(result.history) - 1,  # the last record is the returned model
            "warned": sorted({type(w.message).__name__ for w in caught if counts_as_failure(w.message)})}


def peer_cell(job: tuple) -> dict:
    """:data:`EG_PEER`'s fit of ``(task, seed, data_root)`` on the same split, measured as fairopt's runs:
    accuracy of its (sampled) predictions, and feasibility under the task's own constraint on the
    training rows (its exact rows on those hard labels, within the engine's default tolerance)."""
    import numpy as np
    import torch
    from fairlearn import reductions
    from sklearn.linear_model import LogisticRegression

    from solvers.problem import row_violations
    from solvers.sqp.options import SQPOptions

    name, seed, data_root = job
    task = TASKS[name]
    kind, columns = EG_PEER[name]
    train, test = split(task, seed, data_root)
    sensitive = np.column_stack([train.sensitive[c].numpy() for c in columns])
    eg = reductions.ExponentiatedGradient(LogisticRegression(max_iter=1000, random_state=seed),
                                          getattr(reductions, kind)(ratio_bound=0.8 ** 0.5))
    start = time.perf_counter()
    eg.fit(train.X.numpy().astype(np.float64), train.y.numpy(), sensitive_features=sensitive)
    seconds = time.perf_counter() - start

    def outputs(part, offset):  # +-1 logits of the sampled labels, what the constraint measures
        labels = eg.predict(part.X.numpy().astype(np.float64), random_state=seed + offset)
        return torch.as_tensor(2.0 * labels - 1.0, dtype=torch.float64)

    out_train, out_test = outputs(train, 0), outputs(test, 1)
    rows = []
    for c in built(task):
        c.setup(train)
        rows += row_violations(c.exact(out_train, train), c.lower, c.upper).tolist()
    return {"task": name, "model": "logistic", "batch": PEER, "seed": seed, "method": PEER,
            "constant": constant_score(task.loss, train), "train_score": score(task.loss, out_train, train),
            "test_score": score(task.loss, out_test, test), "feasible": max(rows) <= SQPOptions.feasibility_tol,
            "violation": sum(rows), "status": "randomised", "seconds": seconds, "iterations": None, "warned": []}


def jobs(tasks: list[str], seeds: list[int], batches: list[int], root: str) -> list[tuple]:
    """The full batch per (task, model, seed), then every mini-batch size."""
    full = [(t, m, None, s, root) for t in tasks for m in GRID_MODELS for s in seeds]
    return full + [(t, m, b, s, root) for t in tasks for m in GRID_MODELS for b in batches for s in seeds]


def peer_jobs(tasks: list[str], seeds: list[int], root: str) -> list[tuple]:
    """:func:`peer_cell`'s jobs: the tasks of ``tasks`` that :data:`EG_PEER` covers, every seed."""
    return [(t, s, root) for t in tasks if t in EG_PEER for s in seeds]


def _run(job: tuple) -> dict:
    """A worker's job: :func:`peer_cell` for a three-entry job, else :func:`cell`."""
    return peer_cell(job) if len(job) == 3 else cell(job)


def report(records: list[dict]) -> list[str]:
    """The table (one row per mini-batch run beside its full batch), the criteria's counts and the
    seed means per (task, model, batch) cell."""
    full = {(r["task"], r["model"], r["seed"]): r for r in records if r["batch"] == "full"}
    runs = sorted((r for r in records if r["batch"] != "full" and (r["task"], r["model"], r["seed"]) in full),
                  key=lambda r: (r["task"], r["model"], int(r["batch"]), r["seed"]))
    lines = ["| task | model | batch | seed | constant | full batch (s) | mini-batch (s) | difference | feasible "
             "| test full / mini | status | warned |", "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    within = feasible_or_warned = silent_below = 0
    cells: dict[tuple, list[float]] = {}
    for r in runs:
        ref = full[(r["task"], r["model"], r["seed"])]
        diff = r["train_score"] - ref["train_score"]
        within += diff >= -GRID_POINT
        feasible_or_warned += bool(r["feasible"] or r["warned"])
        silent_below += r["train_score"] <= r["constant"] and not r["warned"]
        cells.setdefault((r["task"], r["model"], r["batch"]), []).append(diff)
        lines.append(f"| {r['task']} | {r['model']} | {r['batch']} | {r['seed']} | {r['constant']:.4f} | "
                     f"{ref['train_score']:.4f} ({ref['seconds']:.1f}) | {r['train_score']:.4f} ({r['seconds']:.1f}) "
                     f"| {diff:+.4f} | {'yes' if r['feasible'] else 'no'} | {ref['test_score']:.4f} / "
                     f"{r['test_score']:.4f} | {r['status']} | {', '.join(r['warned']) or '-'} |")
    lines += ["", f"runs within {GRID_POINT} of the full-batch train score: {within}/{len(runs)}",
              f"runs feasible on all training rows or warned: {feasible_or_warned}/{len(runs)}",
              f"runs at or below a constant predictor's train score without a warning: {silent_below}",
              f"full-batch runs feasible: {sum(bool(r['feasible']) for r in full.values())}/{len(full)}", "",
              "| task | model | batch | mean difference | worst |", "|---|---|---|---|---|"]
    lines += [f"| {t} | {m} | {b} | {sum(d) / len(d):+.4f} | {min(d):+.4f} |"
              for (t, m, b), d in sorted(cells.items(), key=lambda kv: (kv[0][0], kv[0][1], int(kv[0][2])))]
    return lines + peer_lines(records)


def peer_lines(records: list[dict]) -> list[str]:
    """Per task that :data:`EG_PEER` covers, seed means of train / test score and the runs feasible on
    all training rows, for the peer and for fairopt's full batch and mini-batches of each model."""
    peers = [r for r in records if r["batch"] == PEER]
    if not peers:
        return []
    lines = ["", f"Beside {PEER} (logistic regression, full batch, randomised predictions; seed means, train / test "
             "score, runs feasible on all training rows):", "",
             "| task | method | model | batch | train | test | feasible |", "|---|---|---|---|---|---|---|"]
    tasks = {p["task"] for p in peers}
    groups: dict[tuple, list[dict]] = {}
    for r in records:
        if r["task"] in tasks:
            groups.setdefault((r["task"], r["batch"] == PEER, r["model"], str(r["batch"])), []).append(r)
    for (task, is_peer, model, batch), runs in sorted(groups.items(), key=lambda kv: (kv[0][0], not kv[0][1],
                                                                                      kv[0][2], kv[0][3])):
        train = sum(r["train_score"] for r in runs) / len(runs)
        test = sum(r["test_score"] for r in runs) / len(runs)
        lines.append(f"| {task} | {PEER if is_peer else 'fairopt'} | {model} | {'-' if is_peer else batch} | "
                     f"{train:.4f} | {test:.4f} | {sum(bool(r['feasible']) for r in runs)}/{len(runs)} |")
    return lines


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tasks", nargs="+", default=list(TASKS), choices=list(TASKS))
    ap.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    ap.add_argument("--batches", nargs="+", type=int, default=list(GRID_BATCHES))
    ap.add_argument("--jobs", type=int, default=2, help="worker processes")
    ap.add_argument("--data-dir", default=str(DEFAULT_DATA))
    ap.add_argument("--out", default=str(DEFAULT_OUT / "sqp_stochastic" / "constraints"))
    args = ap.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    todo = jobs(args.tasks, args.seeds, args.batches, args.data_dir)
    try:
        import fairlearn.reductions  # noqa: F401
        todo += peer_jobs(args.tasks, args.seeds, args.data_dir)
    except ImportError:
        print(f"skipping the {PEER} peer: pip install fairlearn", flush=True)
    records, now = [], commit()
    with mp.get_context("spawn").Pool(args.jobs, maxtasksperchild=1) as pool:
        for i, r in enumerate(pool.imap_unordered(_run, todo), 1):
            r["commit"] = now
            records.append(r)
            print(f"[{i}/{len(todo)}] {r['task']} {r['model']} {r['batch']} seed {r['seed']}: "
                  f"score {r['train_score']:.4f} feasible {r['feasible']} {r['seconds']:.1f} s {r['warned']}",
                  flush=True)
    lines = [f"# python benchmarks/sqp_constraint_grid.py {' '.join(sys.argv[1:] if argv is None else argv)}",
             f"# commit {now}", "", *report(records)]
    (out / "constraints.json").write_text(json.dumps(records, indent=1))
    (out / "constraints.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines[3:]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
