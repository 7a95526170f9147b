"""The accuracy grid of the mini-batch SQP (``python benchmarks/sqp_stochastic.py --grid``).

Adult, Dutch, Law, ACS-Colorado and COMPAS (or the ``--datasets`` given, ``name:attribute`` for
another sensitive column, ``name:column>=value`` for two groups cut from a numeric one,
:func:`load_spec`) x {linear, MLP 32} x batch {256, 1024} x seeds 0-2,
``StochasticSQP(batch_size=B, epochs=10, seed=k)`` with every other setting at its default and
``DisparateImpact(attribute, delta)`` with its default surrogate (``--surrogate``: another, for
comparison), against the same engine with 300
full-batch epochs; train/test accuracy, training loss, DI (each group against the rest) on all
training rows, time and the warnings that flag a failed run, and with ``--peers``
humancompatible-train (:data:`sqp_stochastic.PEERS`) with 10 epochs of the same batch size on the
same cells. Writes ``grid.md`` (the table, the counts of the mini-batch criteria, and per (data
set, model, batch) cell the seed means against each peer), ``grid.json`` and ``grid.png``.
``--report-only`` renders ``grid.md`` and ``grid.png`` again from the ``grid.json`` in ``--out``
(after a change of the report, not of the runs).
"""

from __future__ import annotations

import json
import multiprocessing as mp
import sys
import time
import warnings
from pathlib import Path
from typing import Callable

from _common import commit
from sqp_stochastic import PEERS, _fit_peer, grid_model, installed_peers

GRID_DATASETS = ("adult", "dutch", "law", "acsincome", "compas")
GRID_MODELS = ("linear", "mlp")
GRID_BATCHES = (256, 1024)
GRID_EPOCHS, GRID_FULL_EPOCHS = 10, 300
#: A run ends "within one point" when its train accuracy is at least the full batch's minus this.
GRID_POINT = 0.01
#: A run meets the bound when its DI (each group against the rest, all training rows) is at least
#: delta minus this.
GRID_DI_TOL = 0.005


def group_vs_rest_di(pred, s) -> float:
    """``min_g min(r_g / r_rest, r_rest / r_g)`` with ``r_g`` the positive rate of group ``g`` and
    ``r_rest`` that of the other rows: the disparate impact that fairopt's rows bound (for two
    groups the usual ratio of the two rates); 1 when no row is predicted positive."""
    import torch

    pred, s = pred.reshape(-1).double(), s.reshape(-1)
    ratios = []
    for g in torch.unique(s).tolist():
        r_g, r_rest = float(pred[s == g].mean()), float(pred[s != g].mean())
        if max(r_g, r_rest) > 0:
            ratios.append(min(r_g, r_rest) / max(r_g, r_rest))
    return min(ratios, default=1.0)


def parse_surrogate(spec: str):
    """``"name"`` or ``"name:scale"`` (``"sigmoid:1"``) as a :func:`fairopt.surrogates.get_surrogate`
    instance, the ``--surrogate`` of the grid."""
    from fairopt.surrogates import get_surrogate

    name, _, scale = spec.partition(":")
    return get_surrogate(name, **({"scale": float(scale)} if scale else {}))


def load_spec(spec: str, data_root: str | None):
    """The data set ``spec`` names: a :func:`fairopt.datasets.available` name with its default
    sensitive attribute, ``"name:attribute"`` with another of its columns as the one sensitive
    attribute (``"adult:race"``: five groups, each against the rest), or ``"name:column>=value"``
    with two groups cut from a numeric column (``"adult:age>=40"``; the column stays an input).
    The cut attributes are settings the grid's defaults were not chosen on."""
    import fairopt

    name, _, attribute = spec.partition(":")
    column, cut, threshold = attribute.partition(">=")
    if not cut:
        return fairopt.datasets.load(name, data_dir=data_root, **({"sensitive": [attribute]} if attribute else {}))
    frame, options = fairopt.datasets.load_frame(name, data_dir=data_root)
    if column not in frame.columns:
        raise ValueError(f"{spec!r}: {name} has no column {column!r} (columns: {list(frame.columns)})")
    frame = frame.assign(**{attribute: (frame[column] >= float(threshold)).map({True: f">={threshold}",
                                                                               False: f"<{threshold}"})})
    options.update(sensitive=[attribute], sensitive_kinds=None)
    if options.get("features") is None:  # every other column an input: not the cut one
        options["features"] = [c for c in frame.columns if c not in (options["target"], attribute)]
    return fairopt.data.FairData.from_frame(frame, **options)


def grid_cell(job: tuple) -> dict | None:
    """One grid fit in a worker process: ``(dataset, model, batch, seed, method, delta, data_root)``,
    ``batch`` None for the full batch, ``method`` "fairopt" or a key of :data:`PEERS`; an eighth
    entry, a dict of :class:`~solvers.StochasticSQP` settings (``epochs`` among them; ``surrogate``, a
    :func:`~fairopt.surrogates.get_surrogate` instance for the constraint), runs fairopt with those
    settings under the label ``method``. ``dataset`` is a :func:`load_spec` spec. None for a
    peer whose balanced batches the groups do not divide (its sampler's requirement)."""
    import torch

    from fairopt.constraints import DisparateImpact
    from solvers import StochasticSQP

    dataset, model_kind, batch, seed, method, delta, data_root, *extra = job
    settings = dict(extra[0]) if extra else {}
    surrogate = settings.pop("surrogate", None)  # None: DisparateImpact's own default
    torch.set_num_threads(1)
    data = load_spec(dataset, data_root)
    train, test = data.split(test_size=0.3, seed=seed)
    sensitive = train.sensitive_names[0]
    groups = len(torch.unique(train.sensitive[sensitive]))
    if method in PEERS and batch % groups:
        return None  # humancompatible-train's balanced sampler needs a batch that the groups divide
    torch.manual_seed(seed)
    model = grid_model(model_kind, train.n_features, seed)
    start = time.perf_counter()
    caught: list = []
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        if method in PEERS:
            _fit_peer(PEERS[method], model, train, sensitive, delta, seed, lambda engine, record: None,
                      epochs=GRID_EPOCHS, batch_size=batch)
            status, iterations = "last iterate", None
        else:  # every setting at its default: the constraint's own surrogate, "auto" everywhere
            settings.setdefault("epochs", GRID_FULL_EPOCHS if batch is None else GRID_EPOCHS)
            constraint = DisparateImpact(sensitive, delta=delta, surrogate=surrogate)
            result = StochasticSQP(batch_size=batch, seed=seed, **settings).fit(
                model, train, loss="bce", constraints=[constraint])
            status, iterations = result.status, len(result.history) - 1  # the last record is the returned model
    seconds = time.perf_counter() - start
    warned = sorted({type(w.message).__name__ for w in caught if counts_as_failure(w.message)})

    def measures(part, out):
        pred = (out > 0).long()
        return group_vs_rest_di(pred, part.sensitive[sensitive]), float((pred == part.y.long()).float().mean())

    with torch.no_grad():
        out_train, out_test = model(train.X).reshape(-1), model(test.X).reshape(-1)
    (train_di, train_acc), (test_di, test_acc) = measures(train, out_train), measures(test, out_test)
    # the objective both kinds of method minimise: mean binary cross-entropy of the logits
    loss = float(torch.nn.functional.binary_cross_entropy_with_logits(out_train.double(), train.y.double()))
    rate = float(train.y.float().mean())
    return {"dataset": dataset, "model": model_kind, "batch": batch or "full", "seed": seed, "method": method,
            "n_train": len(train), "majority": max(rate, 1.0 - rate), "train_loss": loss,
            "train_acc": train_acc, "test_acc": test_acc,
            "train_di": train_di, "test_di": test_di, "feasible": train_di >= delta - GRID_DI_TOL,
            "status": status, "iterations": iterations, "warned": warned, "seconds": seconds}


#: The warnings that tell a user a run failed or is suspect (a cell that ends below the majority
#: rate or outside the bound must carry one of them).
WARNINGS_THAT_COUNT = ("BoundWarning", "ConstantPredictorWarning", "TrainingInstabilityWarning",
                       "NoProgressWarning", "DivergedWarning")


def counts_as_failure(message: Warning) -> bool:
    """True for an instance of a class in :data:`WARNINGS_THAT_COUNT` or of a subclass
    (``NearConstantWarning`` is a ``ConstantPredictorWarning``)."""
    return any(cls.__name__ in WARNINGS_THAT_COUNT for cls in type(message).__mro__)


def run_grid(args, root: str, out: Path) -> int:
    """``--grid``: every (dataset, model, batch, seed) cell with fairopt's defaults (10 epochs), the
    full batch (300 epochs) per (dataset, model, seed), and with ``--peers`` humancompatible-train on
    the same cells; writes ``grid.md`` and ``grid.json`` and prints the issue's criteria."""
    peers = installed_peers() if args.peers else []
    jobs = grid_jobs(args, root, peers)
    records = []
    flags = {"minibatch": args.reuse_reference, "full": getattr(args, "reuse_minibatch", False),
             "fairopt": getattr(args, "reuse_peers", False)}
    if any(flags.values()):
        rerun = next(mode for mode, given in flags.items() if given)
        records, previous = reused_runs(out, jobs, rerun)
        for r in records:  # runs of grids written before runs carried their commit: that grid's
            r.setdefault("commit", previous.removeprefix("commit "))
        done = {(r["dataset"], r["model"], r["batch"], r["seed"], r["method"]) for r in records}
        jobs = [j for j in jobs if (j[0], j[1], j[2] or "full", j[3], j[4]) not in done]
    now = commit()
    with mp.get_context("spawn").Pool(args.jobs, maxtasksperchild=1) as pool:
        for i, r in enumerate(pool.imap_unordered(grid_cell, jobs), 1):
            if r is None:
                print(f"[{i}/{len(jobs)}] skipped: a peer whose balanced batches the groups do not divide", flush=True)
                continue
            r["commit"] = now
            records.append(r)
            print(f"[{i}/{len(jobs)}] {r['dataset']} {r['model']} {r['batch']} seed {r['seed']} {r['method']}: "
                  f"acc {r['train_acc']:.4f} DI {r['train_di']:.3f} {r['seconds']:.1f} s {r['warned']}", flush=True)
    header = [f"# python benchmarks/sqp_stochastic.py {' '.join(sys.argv[1:])}", f"# commit {now}",
              provenance_line(records)]
    (out / "grid.json").write_text(json.dumps(records, indent=1))
    write_grid(records, header, args.delta, out)
    return 0


def grid_jobs(args, root: str, peers: list[str]) -> list[tuple]:
    """The grid's :func:`grid_cell` jobs: the full batch per (data set, model, seed), then every
    mini-batch size (``--batches``, default :data:`GRID_BATCHES`) for fairopt and each of ``peers``;
    seeds 0-2 and :data:`GRID_DATASETS` unless the command names others."""
    seeds = args.seeds if args.seeds != [0] else [0, 1, 2]
    datasets = args.datasets if args.datasets != ["dutch", "acsincome"] else list(GRID_DATASETS)
    extra = ({"surrogate": parse_surrogate(args.surrogate)},) if getattr(args, "surrogate", None) else ()
    batches = getattr(args, "batches", None) or GRID_BATCHES
    jobs = [(d, m, None, s, "fairopt", args.delta, root, *extra) for d in datasets for m in GRID_MODELS
            for s in seeds]
    jobs += [(d, m, b, s, meth, args.delta, root, *(extra if meth == "fairopt" else ())) for d in datasets
             for m in GRID_MODELS for b in batches for s in seeds for meth in ["fairopt", *peers]]
    return jobs


def provenance_line(records: list[dict]) -> str:
    """``# runs by commit: ...``: how many runs of each kind (full batch, fairopt's mini-batches, each
    peer) each commit produced (a reused run keeps the commit that produced it)."""
    counts: dict[tuple[str, str], int] = {}
    for r in records:
        kind = "full batch" if r["batch"] == "full" else ("mini-batch" if r["method"] == "fairopt" else r["method"])
        key = (kind, str(r.get("commit", "unknown")))
        counts[key] = counts.get(key, 0) + 1
    return "# runs by commit: " + "; ".join(f"{kind} {n} at {c}" for (kind, c), n in sorted(counts.items()))


def render_grid(args, out: Path) -> int:
    """``--report-only``: ``grid.md`` and ``grid.png`` again from ``out/grid.json``, under the command
    and commit lines of the ``grid.md`` that ran it, the runs' commits (:func:`provenance_line`) and
    a line naming this rendering's commit."""
    path = out / "grid.json"
    if not path.is_file():
        raise SystemExit(f"--report-only: no grid.json in {out}")
    previous = (out / "grid.md").read_text().splitlines() if (out / "grid.md").is_file() else []
    records = json.loads(path.read_text())
    header = [line for line in previous[:4] if line.startswith(("# python", "# commit"))]
    header += [provenance_line(records), f"# report rendered again from grid.json at commit {commit()}"]
    write_grid(records, header, args.delta, out)
    return 0


def write_grid(records: list[dict], header: list[str], delta: float, out: Path) -> None:
    """``grid.md`` (``header``, then :func:`grid_report`) and ``grid.png`` (:func:`grid_plot`) in ``out``."""
    lines = [*header, *grid_report(records, delta)]
    (out / "grid.md").write_text("\n".join(lines) + "\n")
    grid_plot(records, delta, out / "grid.png")
    print("\n".join(lines[len(header):]))
    print(f"wrote {out / 'grid.md'} and {out / 'grid.png'}")


def _cell_order(cell: tuple) -> tuple:
    """Sort key of a (data set, model, batch[, seed]) cell: by name, then batch size, then seed."""
    return (cell[0], cell[1], int(cell[2]), *cell[3:])


def _mean(values: list[float]) -> float:
    return sum(values) / len(values)


def _per_cell(records: list[dict], method: str, key: str, reduce: Callable[[list], float] = _mean) -> dict:
    """``reduce`` (the seed mean by default) of ``key`` per (data set, model, batch) mini-batch cell
    of ``method``."""
    values: dict[tuple, list[float]] = {}
    for r in records:
        if r["batch"] != "full" and r["method"] == method:
            values.setdefault((r["dataset"], r["model"], r["batch"]), []).append(r[key])
    return {k: reduce(v) for k, v in values.items()}


def grid_plot(records: list[dict], delta: float, path: Path) -> None:
    """Two panels over the (data set, model, batch) cells, seed means: left, each method's train
    accuracy minus the full batch's (the band is the one-point criterion; a hatched bar: the method
    misses the bound on at least one seed of the cell, so its accuracy is not comparable); right,
    each method's train accuracy against its smallest DI over the seeds (each group against the
    rest, training rows), the bound ``delta`` as a line."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    full = {(r["dataset"], r["model"], r["seed"]): r["train_acc"] for r in records if r["batch"] == "full"}
    for_gap = [dict(r, gap=r["train_acc"] - full[(r["dataset"], r["model"], r["seed"])]) for r in records
               if r["batch"] != "full" and (r["dataset"], r["model"], r["seed"]) in full]
    methods = ["fairopt"] + sorted({r["method"] for r in records if r["method"] != "fairopt"})
    cells = sorted({(r["dataset"], r["model"], r["batch"]) for r in for_gap}, key=_cell_order)
    fig, (ax_gap, ax_di) = plt.subplots(1, 2, figsize=(13, 4.8), gridspec_kw={"width_ratios": [1.6, 1]})
    width = 0.8 / len(methods)
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for j, method in enumerate(methods):
        gaps = _per_cell(for_gap, method, "gap")
        meets = _per_cell(for_gap, method, "feasible", all)
        for i, cell in enumerate(cells):
            if cell in gaps:
                ax_gap.bar(i + (j - (len(methods) - 1) / 2) * width, 100 * gaps[cell], width=width,
                           color=colors[j % len(colors)], alpha=1.0 if meets[cell] else 0.35,
                           hatch=None if meets[cell] else "//", label=method if i == 0 else None)
        acc, smallest = _per_cell(records, method, "train_acc"), _per_cell(for_gap, method, "train_di", min)
        ax_di.scatter([smallest[c] for c in acc], [100 * acc[c] for c in acc], s=14, color=colors[j % len(colors)],
                      label=method)
    ax_gap.axhspan(-100 * GRID_POINT, 100 * GRID_POINT, color="0.9", zorder=0)
    ax_gap.axhline(0.0, color="0.4", linewidth=0.6)
    ax_gap.set_xticks(range(len(cells)), [f"{d} {m} {b}" for d, m, b in cells], rotation=70, fontsize=7)
    ax_gap.set_ylabel("train accuracy minus the full batch's (points)")
    ax_gap.legend(fontsize=7, title="hatched: misses the bound", title_fontsize=7)
    ax_di.axvline(delta, color="0.4", linewidth=0.6)
    ax_di.set_xlim(0.0, 1.02)
    ax_di.set_xlabel("smallest DI over the seeds, training rows (the line is the bound)")
    ax_di.set_ylabel("train accuracy (%)")
    fig.suptitle("mini-batch grid: seed means per (data set, model, batch)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _loss_suffix(run: dict) -> str:
    """`` (loss L)`` for a run that recorded its training loss, else nothing."""
    return f" ({run['train_loss']:.4f})" if "train_loss" in run else ""


#: ``reused_runs``' modes: the jobs each runs again (the others are taken from the previous grid), and its flag.
RERUNS: dict[str, tuple[Callable[[tuple], bool], str]] = {
    "minibatch": (lambda j: j[2] is not None and j[4] == "fairopt", "--reuse-reference"),
    "full": (lambda j: j[2] is None, "--reuse-minibatch"),
    "fairopt": (lambda j: j[4] == "fairopt", "--reuse-peers"),
}


def reused_runs(out: Path, jobs: list[tuple], rerun: str = "minibatch") -> tuple[list[dict], str]:
    """The runs of ``out/grid.json`` among ``jobs`` that a change of one path leaves as they were,
    and the commit of that grid (from its ``grid.md``). ``rerun="minibatch"`` (``--reuse-reference``):
    the full batch's and the peers'; ``rerun="full"`` (``--reuse-minibatch``, for a change of the
    full-batch path only): fairopt's mini-batch runs and the peers'; ``rerun="fairopt"``
    (``--reuse-peers``, for a change of both of fairopt's paths, a default of the constraint, say):
    the peers' only."""
    redone, flag = RERUNS[rerun]
    path = out / "grid.json"
    if not path.is_file():
        raise SystemExit(f"{flag}: no previous grid in {out}")
    wanted = {(j[0], j[1], j[2] or "full", j[3], j[4]) for j in jobs if not redone(j)}
    runs = [r for r in json.loads(path.read_text())
            if (r["dataset"], r["model"], r["batch"], r["seed"], r["method"]) in wanted]
    head = (out / "grid.md").read_text().splitlines()[:2] if (out / "grid.md").is_file() else []
    previous = next((line.removeprefix("# ") for line in head if line.startswith("# commit")), "an unknown commit")
    return runs, previous


def mini_batch_cells(records: list[dict]) -> tuple[dict[tuple, dict], list[str]]:
    """The mini-batch runs by (data set, model, batch, seed), then by method, and the peers among
    the methods (every one but "fairopt"), sorted."""
    cells: dict[tuple, dict] = {}
    for r in records:
        if r["batch"] != "full":
            cells.setdefault((r["dataset"], r["model"], r["batch"], r["seed"]), {})[r["method"]] = r
    return cells, sorted({m for c in cells.values() for m in c if m != "fairopt"})


def grid_report(records: list[dict], delta: float) -> list[str]:
    """The grid table (one line per mini-batch cell: full batch, fairopt, peers side by side) and the
    issue's criteria as counts."""
    full = {(r["dataset"], r["model"], r["seed"]): r for r in records if r["batch"] == "full"}
    cells, peers = mini_batch_cells(records)
    head = ["dataset", "model", "batch", "seed", "majority", "full acc", "full s", "acc (loss)", "d acc", "DI",
            "test acc", "s", "warned"] + [f"{p} acc / DI (loss)" for p in peers]
    lines = [f"DI >= {delta} (each group against the rest, exact, all training rows); fairopt 10 epochs of "
             f"mini-batches with every setting at its default against {GRID_FULL_EPOCHS} full-batch epochs; "
             f"peers {GRID_EPOCHS} epochs of the same batch size", "",
             "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    within = feasible_or_warned = silent_below = both = not_worse = n = 0
    misses = []
    for key in sorted(cells, key=_cell_order):
        ref, ours = full.get((key[0], key[1], key[3])), cells[key].get("fairopt")
        if ref is None or ours is None:
            continue
        n += 1
        gap = ours["train_acc"] - ref["train_acc"]
        ok = gap >= -GRID_POINT
        within += ok
        feasible_or_warned += ours["feasible"] or bool(ours["warned"])
        silent_below += ours["train_acc"] < ours["majority"] and not ours["warned"]
        if not ok:
            misses.append(f"{key[0]} {key[1]} {key[2]} seed {key[3]}: {ours['train_acc']:.4f} vs {ref['train_acc']:.4f}")
        row = [key[0], key[1], str(key[2]), str(key[3]), f"{ours['majority']:.3f}", f"{ref['train_acc']:.4f}",
               f"{ref['seconds']:.1f}", f"{ours['train_acc']:.4f}" + _loss_suffix(ours), f"{gap:+.4f}",
               f"{ours['train_di']:.3f}",
               f"{ours['test_acc']:.4f}", f"{ours['seconds']:.1f}", ",".join(ours["warned"]) or "-"]
        for p in peers:
            peer = cells[key].get(p)
            row.append((f"{peer['train_acc']:.4f} / {peer['train_di']:.3f}" + _loss_suffix(peer)) if peer else "-")
            if peer and peer["feasible"] and ours["feasible"]:
                both += 1
                not_worse += ours["train_acc"] >= peer["train_acc"]
        lines.append("| " + " | ".join(row) + " |")
    lines += ["", f"cells within {GRID_POINT:g} of the full-batch train accuracy: {within}/{n}",
              f"cells feasible on all training rows (DI >= delta - {GRID_DI_TOL:g}) or warned: {feasible_or_warned}/{n}",
              f"cells below the majority-class rate without a warning: {silent_below}",
              f"cells where fairopt and a peer both meet the bound: {both}; fairopt at least as accurate: {not_worse}"]
    if misses:
        lines += ["misses: " + "; ".join(misses)]
    for p in peers:
        lines += peer_cell_lines(cells, p)
    return lines


def peer_pairs(cells: dict[tuple, dict], peer: str) -> dict[tuple, list[tuple[dict, dict]]]:
    """``(fairopt's run, the peer's)`` per seed, per (data set, model, batch) cell where both meet the
    bound (DI >= delta - tolerance) on every seed; ``cells`` maps (data set, model, batch, seed) to
    method to run."""
    groups: dict[tuple, list[tuple[dict, dict]]] = {}
    for key, methods in cells.items():
        if "fairopt" in methods and peer in methods:
            groups.setdefault(key[:3], []).append((methods["fairopt"], methods[peer]))
    return {k: v for k, v in groups.items() if all(o["feasible"] and q["feasible"] for o, q in v)}


def peer_cell_lines(cells: dict[tuple, dict], peer: str) -> list[str]:
    """fairopt against ``peer`` per (data set, model, batch), means over the seeds: on the cells where
    both meet the bound (DI >= delta - tolerance) on every seed, how often fairopt's mean train and
    test accuracies are at least the peer's, and the cells where they are not (gap in points); and,
    when the runs record it, how often fairopt's mean training loss (the objective both minimise) is
    at most the peer's."""
    both = peer_pairs(cells, peer)

    def means(part: str) -> list[tuple[tuple, float, float]]:  # (cell, fairopt's seed mean, the peer's)
        return [(key, _mean([o[part] for o, _ in both[key]]), _mean([q[part] for _, q in both[key]]))
                for key in sorted(both, key=_cell_order)]

    lines = []
    for part in ("train_acc", "test_acc"):
        behind = [f"{key[0]} {key[1]} {key[2]} {100 * (ours - theirs):+.2f}"
                  for key, ours, theirs in means(part) if ours < theirs]
        lines.append(f"{peer}, {part.replace('_acc', '')} accuracy, means over seeds, on the {len(both)} (data set, "
                     f"model, batch) cells where both meet the bound on every seed: fairopt at least as accurate "
                     f"on {len(both) - len(behind)}" + (f"; behind (points): {', '.join(behind)}" if behind else ""))
    if both and all("train_loss" in run for runs in both.values() for pair in runs for run in pair):
        higher = [f"{key[0]} {key[1]} {key[2]} {ours:.4f} vs {theirs:.4f}"
                  for key, ours, theirs in means("train_loss") if ours > theirs]
        lines.append(f"{peer}, training loss, means over seeds, on the same {len(both)} cells: fairopt's at most the "
                     f"peer's on {len(both) - len(higher)}" + (f"; higher: {', '.join(higher)}" if higher else ""))
    return lines
