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
    python benchmarks/first_order_minibatch.py --data-dir ../shared/data --peers --variants default

``--peers [NAME ...]`` (every key of :data:`sqp_stochastic.PEERS` when no name is given; package
``humancompatible-train``, nothing run, with a message, when it is absent) runs, instead of the grid against the full
batch, the mini-batch fits of ``--variants`` beside humancompatible-train's ALM + Adam (``hct-alm-adam``) and SSL-ALM
(``hct-ssl-alm``) trained by :func:`sqp_stochastic._fit_peer` on the same split and inputs (the columns the split
standardised with the training rows' statistics, which FairClassifier reads from the FairData as they are), the same
architecture and initial parameters (:func:`sqp_stochastic.grid_model`: ``fairopt.models.linear``, or
``fairopt.models.mlp`` with ``hidden=(32,)`` and its leaky ReLU, what ``FairClassifier(model="mlp")`` builds, seeded
alike) and the same batch size and seed: the peer's balanced batches (every group oversampled to the largest),
:data:`PEER_EPOCHS` (10) epochs, its last iterate, while fairopt's ``default`` takes its own budget of steps. It
writes ``grid.md`` and ``runs.json`` into ``--out`` (default ``first_order_minibatch/peers``): per method and variant
against each peer the runs whose hard predictions meet the bound on all training rows (exact DI >= delta -
:data:`DI_TOL`, each group against the rest), on the runs where both do how often fairopt's train and test accuracy
is at least the peer's and the mean and median differences in points, and per (task, model, batch) the seed means.
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
from sqp_grid import GRID_DI_TOL, GRID_EPOCHS, group_vs_rest_di
from sqp_stochastic import PEERS, _fit_peer, grid_model, installed_peers

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
#: ``--peers``: a run meets the bound when its exact DI on all training rows is at least DELTA minus this.
DI_TOL = GRID_DI_TOL
#: ``--peers``: the peers' epochs of balanced batches (those of ``sqp_stochastic.py --grid --peers``).
PEER_EPOCHS = GRID_EPOCHS
#: ``--peers``: fairopt's runs this far below a peer's train accuracy (both meeting the bound) are listed.
BEHIND = 0.005

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
    di = [exact_di(torch.as_tensor(clf.predict(part) == clf.pos_label_), part, attributes[0]) for part in (train, test)]
    return {**{k: job[k] for k in ("task", "seed", "method", "model", "batch", "variant")}, "n_train": len(train),
            "train_acc": float(clf.score(train)), "test_acc": float(clf.score(test)),
            "train_violation": float(clf.train_violation_), "train_di": di[0], "test_di": di[1],
            "status": str(clf.status_), "epochs": epochs, "steps": len(clf.history_), "warned": warned,
            "seconds": seconds}


def exact_di(positive: Any, part: Any, attribute: str) -> float:
    """The disparate impact of hard predictions on the rows of ``part``, each group against the rest
    (:func:`sqp_grid.group_vs_rest_di`; for two groups the ratio of their positive rates).

    Parameters
    ----------
    positive : torch.Tensor of shape (n,)
        True (or 1) where a row is predicted positive.
    part : FairData
        The rows (their sensitive column ``attribute``).
    attribute : str
        The constrained sensitive attribute.

    Returns
    -------
    float
    """
    return float(group_vs_rest_di(positive.long(), part.sensitive[attribute]))


def peer_cell(job: dict) -> dict:
    """One humancompatible-train fit of ``job`` (``method`` a key of :data:`PEERS`): :func:`sqp_stochastic._fit_peer`
    on fairopt's split, with the model FairClassifier builds (:func:`sqp_stochastic.grid_model`, seeded by the
    job's seed), balanced batches of the job's size and :data:`PEER_EPOCHS` epochs; the last iterate's train and
    test accuracy and exact DI (:func:`exact_di`) and the seconds of the fit (one thread).

    Parameters
    ----------
    job : dict
        ``task``, ``seed``, ``method``, ``model``, ``batch``, ``variant`` and ``data_dir``.

    Returns
    -------
    dict
        The run's figures, keyed as :func:`fit_cell`'s.
    """
    import time
    import warnings

    import torch

    torch.set_num_threads(1)
    train, test, attributes = split(job["task"], job["seed"], job["data_dir"])
    torch.manual_seed(job["seed"])
    model = grid_model(job["model"], train.n_features, job["seed"])
    start = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        _fit_peer(PEERS[job["method"]], model, train, attributes[0], DELTA, job["seed"], lambda engine, record: None,
                  epochs=PEER_EPOCHS, batch_size=job["batch"])
    seconds = time.perf_counter() - start
    figures = []
    with torch.no_grad():
        for part in (train, test):
            positive = model(part.X.float()).reshape(-1) > 0
            accuracy = float((positive.long() == part.y.long()).float().mean())
            figures += [accuracy, exact_di(positive, part, attributes[0])]
    return {**{k: job[k] for k in ("task", "seed", "method", "model", "batch", "variant")}, "n_train": len(train),
            "train_acc": figures[0], "train_di": figures[1], "test_acc": figures[2], "test_di": figures[3],
            "epochs": PEER_EPOCHS, "seconds": seconds}


def run_job(job: dict) -> dict:
    """:func:`peer_cell` for a peer's job, else :func:`fit_cell` (the worker processes' one entry point)."""
    return peer_cell(job) if job["method"] in PEERS else fit_cell(job)


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


def peer_jobs(args: Any, data_root: str, peers: list[str]) -> list[dict]:
    """``--peers``: per (task, seed, model, batch) fairopt's mini-batch fit of every method and variant, and each
    peer's fit (variant "peer"); no full batch.

    Parameters
    ----------
    args : argparse.Namespace
        The command's options (tasks, seeds, methods, models, batches, variants, legacy_epochs).
    data_root : str
        The data directory.
    peers : list of str
        Keys of :data:`PEERS`.

    Returns
    -------
    list of dict
    """
    out = [j for j in jobs(args, data_root) if j["batch"] is not None]
    for task in args.tasks:
        for seed in args.seeds:
            out += [{"task": task, "seed": seed, "method": peer, "model": model, "batch": batch, "variant": "peer",
                     "data_dir": data_root, "legacy_epochs": args.legacy_epochs}
                    for peer in peers for model in args.models for batch in args.batches]
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


def meets_bound(run: dict) -> bool:
    """``--peers``: the run's exact DI on all training rows is at least ``DELTA - DI_TOL``."""
    return run["train_di"] >= DELTA - DI_TOL


def peer_pairs(runs: list[dict], peer: str) -> dict[tuple[str, str], list[tuple[dict, dict]]]:
    """Per fairopt (method, variant) the pairs (fairopt's run, ``peer``'s run) of the same (task, seed, model,
    batch).

    Parameters
    ----------
    runs : list of dict
        The runs of a ``--peers`` grid.
    peer : str
        A key of :data:`PEERS`.

    Returns
    -------
    dict
    """
    theirs = {(r["task"], r["seed"], r["model"], r["batch"]): r for r in runs if r["method"] == peer}
    pairs: dict[tuple[str, str], list[tuple[dict, dict]]] = defaultdict(list)
    for r in runs:
        other = theirs.get((r["task"], r["seed"], r["model"], r["batch"]))
        if r["method"] not in PEERS and r["batch"] is not None and other is not None:
            pairs[(r["method"], r["variant"])].append((r, other))
    return pairs


def peer_summary(runs: list[dict], peers: list[str]) -> list[str]:
    """Per fairopt (method, variant) against each peer: the paired runs, those meeting the bound
    (:func:`meets_bound`) of each, and on the runs where both do how many where fairopt's train / test accuracy is
    at least the peer's, the mean and median difference (fairopt's minus the peer's, points; a peer's near-constant
    model that meets the bound weighs on the mean) and the runs where fairopt's train or test accuracy is more than
    :data:`BEHIND` below the peer's.

    Parameters
    ----------
    runs : list of dict
        The runs of a ``--peers`` grid.
    peers : list of str
        Keys of :data:`PEERS`.

    Returns
    -------
    list of str
        A markdown table.
    """
    lines = ["| method | variant | peer | runs | fairopt meets the bound | peer meets it | both | train acc >= peer | "
             "mean (median) train diff (pts) | test acc >= peer | mean (median) test diff (pts) | "
             f"behind by more than {100 * BEHIND:g} pt (train / test, pts) |", "|---" * 12 + "|"]
    for peer in sorted(peers):
        for (method, variant), pairs in sorted(peer_pairs(runs, peer).items()):
            both = [(o, q) for o, q in pairs if meets_bound(o) and meets_bound(q)]
            figures = []
            for part in ("train_acc", "test_acc"):
                diffs = [o[part] - q[part] for o, q in both]
                figures += [f"{sum(d >= 0 for d in diffs)}/{len(both)}", f"{100 * statistics.mean(diffs):+.2f} "
                            f"({100 * statistics.median(diffs):+.2f})" if diffs else "-"]
            behind = "; ".join(f"{o['task']} {o['model']} {o['batch']} seed {o['seed']}: "
                               f"{100 * (o['train_acc'] - q['train_acc']):+.2f} / "
                               f"{100 * (o['test_acc'] - q['test_acc']):+.2f}" for o, q in both
                               if min(o["train_acc"] - q["train_acc"], o["test_acc"] - q["test_acc"]) < -BEHIND)
            lines.append(f"| {method} | {variant} | {peer} | {len(pairs)} | {sum(meets_bound(o) for o, _ in pairs)} | "
                         f"{sum(meets_bound(q) for _, q in pairs)} | {len(both)} | {' | '.join(figures)} | "
                         f"{behind or '-'} |")
    return lines


def peer_cells(runs: list[dict]) -> list[str]:
    """Per (task, model, batch) the seed means of every fairopt method (and variant other than "default") and
    every peer: train accuracy / test accuracy / train DI, and the runs meeting the bound (:func:`meets_bound`).

    Parameters
    ----------
    runs : list of dict
        The runs of a ``--peers`` grid.

    Returns
    -------
    list of str
        A markdown table.
    """
    groups: dict[tuple, list[dict]] = defaultdict(list)
    for r in runs:
        if r["batch"] is not None:
            label = r["method"] if r["variant"] in ("default", "peer") else f"{r['method']} {r['variant']}"
            groups[(r["task"], r["model"], r["batch"], label)].append(r)
    ours = sorted({k[3] for k in groups if k[3].split()[0] not in PEERS})
    labels = ours + sorted({k[3] for k in groups} - set(ours))
    order = {t: i for i, t in enumerate(TASKS)}
    lines = ["| task | model | batch | " + " | ".join(f"{x}: train / test / DI (meet)" for x in labels) + " |",
             "|---" * (3 + len(labels)) + "|"]
    for cell in sorted({k[:3] for k in groups}, key=lambda k: (order.get(k[0], 99), k[1], k[2])):
        row = []
        for x in labels:
            rs = groups.get((*cell, x), [])
            mean = lambda field: statistics.mean(r[field] for r in rs)  # noqa: E731
            row.append(f"{mean('train_acc'):.4f} / {mean('test_acc'):.4f} / {mean('train_di'):.3f} "
                       f"({sum(meets_bound(r) for r in rs)}/{len(rs)})" if rs else "-")
        lines.append(f"| {' | '.join(map(str, cell))} | {' | '.join(row)} |")
    return lines


def provenance(argv: list[str] | None, runs: list[dict]) -> str:
    """The page's line naming this checkout's commit, the command and how many runs each commit produced."""
    return (f"commit {commit()}; `python benchmarks/first_order_minibatch.py "
            f"{' '.join(sys.argv[1:] if argv is None else argv)}`; runs by commit: "
            + ", ".join(f"{n} at {c}" for c, n in sorted(Counter(r["commit"] for r in runs).items())))


def grid_page(args: Any, argv: list[str] | None, runs: list[dict]) -> str:
    """The grid's page: the mini-batch runs against their full batch (summary and seed means)."""
    header = ["# First-order methods: mini-batches against the full batch", "", provenance(argv, runs), "",
              f"Disparate impact >= {DELTA} on the default binary attribute; seeded stratified 70/30 splits (Adult: "
              f"a {ADULT_ROWS:,}-row sample); 'legacy': the defaults before the mini-batch rule at "
              f"{args.legacy_epochs} epochs" + (" (the default was 1,000: its seconds are a fraction of a legacy "
                                               "fit's, its accuracy that of a fit cut short)"
                                               if args.legacy_epochs != LEGACY_EPOCHS else "")
              + "; 'feasible': zero exact violation on all training rows; 'feasible or warned': feasible, or the "
              "full batch is not, or the fit warned; seconds of one fit on one thread on a shared 2-core machine.",
              "", "## Summary (mini-batch runs against their full batch)", "", *summary(runs), "",
              "## Seed means", "", *cells(runs)]
    return "\n".join(header) + "\n"


def peer_page(argv: list[str] | None, runs: list[dict], peers: list[str]) -> str:
    """The ``--peers`` page: fairopt's mini-batch runs beside humancompatible-train's (summary and seed means)."""
    header = ["# First-order methods on mini-batches beside humancompatible-train", "", provenance(argv, runs), "",
              f"Disparate impact >= {DELTA} on the default binary attribute; seeded stratified 70/30 splits (Adult: "
              f"a {ADULT_ROWS:,}-row sample); fairopt: FairClassifier with batch_size set (variant 'default': every "
              "other option left to the estimator); peers: humancompatible-train (sqp_stochastic._fit_peer) on the "
              f"same split, inputs, architecture, seeded initialisation, batch size and seed, {PEER_EPOCHS} epochs "
              "of balanced batches, the last iterate, fixed settings not tuned per data set. 'Meets the bound': the "
              f"exact DI of the hard predictions on all training rows (each group against the rest) >= {DELTA} - "
              f"{DI_TOL:g}. Differences are fairopt's accuracy minus the peer's on the runs where both meet it.",
              "", "## Summary (each fairopt method against each peer, paired runs)", "", *peer_summary(runs, peers),
              "", "## Seed means per (task, model, batch)", "", *peer_cells(runs)]
    return "\n".join(header) + "\n"


def main(argv: list[str] | None = None) -> int:
    """The command (module docstring): run the fits ``runs.json`` of ``--out`` lacks (all without ``--merge``) and
    write the page, the grid's or with ``--peers`` the comparison with humancompatible-train; returns 0."""
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
    ap.add_argument("--peers", nargs="*", choices=list(PEERS), metavar="PEER",
                    help=f"the mini-batch fits beside humancompatible-train's {', '.join(PEERS)} (all when none is "
                         "named) instead of the full batch, into --out (default first_order_minibatch/peers)")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    peers = None if args.peers is None else installed_peers(args.peers or None)
    if peers == []:
        return 0  # humancompatible-train is not installed (installed_peers said so): nothing to compare with
    if peers and args.out == ap.get_default("out"):
        args.out = str(Path(args.out) / "peers")
    key = lambda r: (r["task"], r["seed"], r["method"], r["model"], str(r["batch"]), r["variant"])  # noqa: E731
    earlier = json.loads((Path(args.out) / "runs.json").read_text()) if args.merge and (
        Path(args.out) / "runs.json").exists() else []
    done = {key(r) for r in earlier}
    root = str(data_dir(args.data_dir))
    todo = [j for j in (peer_jobs(args, root, peers) if peers else jobs(args, root)) if key(j) not in done]
    runs = earlier + pooled_runs(run_job, todo, args.jobs, logger, lambda r: (
        f"{r['task']} seed {r['seed']} {r['method']} {r['model']} batch {r['batch'] or 'full'} {r['variant']}: "
        f"train {r['train_acc']:.4f} DI {r.get('train_di', float('nan')):.3f} {r['epochs']} epochs "
        f"({r['seconds']:.1f} s)"))
    page = peer_page(argv, runs, peers) if peers else grid_page(args, argv, runs)
    write_grid(Path(args.out), runs, key, page)
    return 0


if __name__ == "__main__":
    sys.exit(main())
