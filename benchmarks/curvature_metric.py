"""The QP metric of the SQP engine: ``hessian="adam"`` against ``"gauss-newton"``.

    python benchmarks/curvature_metric.py --data-dir ../shared/data              # full batch
    python benchmarks/curvature_metric.py --batch-size 256 --epochs 10 --out DIR  # mini-batches

Adult, Dutch, Law, ACS-Colorado and COMPAS x {linear, MLP 32} x seeds 0-2, on the cells of the
mini-batch grid (``benchmarks/sqp_grid.py``: the seeded 70/30 split, ``DisparateImpact`` >= 0.8
with its default surrogate, every other setting at its default; full batch: ``epochs="auto"``, the
estimators' 500), once with each metric: training loss (mean binary cross-entropy), train and
test accuracy, DI (each group against the rest) on all training rows, the engine's status, the SQP
iterations and the fit time. ``"adam"`` scales the step by the root of a moving average of squared
gradients; ``"gauss-newton"`` by the loss's curvature along each parameter
(:mod:`solvers.curvature`), which a rare one-hot column has in proportion to its frequency. Writes
``metric.md`` (the runs and the seed means per cell, side by side), ``metric.json`` and
``metric.png`` into ``--out``.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import sys
from pathlib import Path

from _common import DEFAULT_OUT, commit, data_dir
from sqp_grid import GRID_DATASETS, GRID_MODELS, _cell_order, _mean, grid_cell

METRICS = ("adam", "gauss-newton")


def metric_jobs(datasets: list[str], seeds: list[int], batch: int | None, epochs: int | str, delta: float,
                root: str, gn_shift: float | None = None) -> list[tuple]:
    """One :func:`sqp_grid.grid_cell` job per (data set, model, seed, metric); ``gn_shift``: the
    Gauss-Newton runs' ``hessian_shift`` (None: "auto")."""
    def settings(metric: str) -> dict:
        extra = {"hessian_shift": gn_shift} if metric == "gauss-newton" and gn_shift is not None else {}
        return {"hessian": metric, "epochs": epochs, **extra}

    return [(d, m, batch, s, metric, delta, root, settings(metric))
            for d in datasets for m in GRID_MODELS for s in seeds for metric in METRICS]


def metric_pairs(records: list[dict]) -> dict[tuple[str, str], list[tuple[dict, dict]]]:
    """Per (data set, model), in grid order: ``(adam's run, gauss-newton's run)`` for each seed that
    has both."""
    runs = {(r["dataset"], r["model"], r["seed"], r["method"]): r for r in records}
    pairs: dict[tuple[str, str], list[tuple[dict, dict]]] = {}
    for d, m, s in sorted({k[:3] for k in runs}, key=lambda k: (_cell_order((k[0], k[1], 0)), k[2])):
        if (d, m, s, "adam") in runs and (d, m, s, "gauss-newton") in runs:
            pairs.setdefault((d, m), []).append((runs[(d, m, s, "adam")], runs[(d, m, s, "gauss-newton")]))
    return pairs


def metric_report(records: list[dict]) -> list[str]:
    """The runs side by side (one line per data set, model and seed) and the seed means per cell
    with the differences ``gauss-newton - adam``."""
    runs = {(r["dataset"], r["model"], r["seed"], r["method"]): r for r in records}
    keys = sorted({k[:3] for k in runs}, key=lambda k: (_cell_order((k[0], k[1], 0)), k[2]))
    head = ["dataset", "model", "seed"] + [f"{m} {part}" for m in METRICS
                                           for part in ("loss", "acc", "test acc", "DI", "iters", "s", "status")]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for key in keys:
        row = [key[0], key[1], str(key[2])]
        for metric in METRICS:
            r = runs.get((*key, metric))
            row += (["-"] * 7 if r is None else
                    [f"{r['train_loss']:.4f}", f"{r['train_acc']:.4f}", f"{r['test_acc']:.4f}",
                     f"{r['train_di']:.3f}", str(r["iterations"]), f"{r['seconds']:.1f}", r["status"]])
        lines.append("| " + " | ".join(row) + " |")
    head = ["dataset", "model", "seeds", "loss (gn - adam)", "train acc (points)", "test acc (points)",
            "both feasible", "iterations gn / adam", "time gn / adam"]
    lines += ["", "Seed means per cell, Gauss-Newton minus Adam:", "",
              "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    totals = {"lower_loss": 0, "cells": 0}
    for cell, pairs in metric_pairs(records).items():

        def diff(part: str, scale: float = 1.0) -> float:
            return scale * _mean([g[part] - a[part] for a, g in pairs])

        loss = diff("train_loss")
        totals["cells"] += 1
        totals["lower_loss"] += loss < 0
        feasible = sum(a["feasible"] and g["feasible"] for a, g in pairs)
        iterations = _mean([g["iterations"] for _, g in pairs]) / max(_mean([a["iterations"] for a, _ in pairs]), 1)
        seconds = _mean([g["seconds"] for _, g in pairs]) / max(_mean([a["seconds"] for a, _ in pairs]), 1e-9)
        lines.append(f"| {cell[0]} | {cell[1]} | {len(pairs)} | {loss:+.4f} | {diff('train_acc', 100):+.2f} | "
                     f"{diff('test_acc', 100):+.2f} | {feasible}/{len(pairs)} | {iterations:.2f} | {seconds:.2f} |")
    lines += ["", "cells where Gauss-Newton ends at the lower mean training loss: "
                  f"{totals['lower_loss']}/{totals['cells']}"]
    return lines


def metric_plot(records: list[dict], path: Path) -> None:
    """Per (data set, model): the seed-mean training loss and test accuracy of Gauss-Newton minus
    Adam's (bars), one panel each."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    pairs = metric_pairs(records)
    cells = list(pairs)
    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    for ax, part, scale, label in ((axes[0], "train_loss", 1.0, "training loss, Gauss-Newton minus Adam"),
                                   (axes[1], "test_acc", 100.0, "test accuracy, Gauss-Newton minus Adam (points)")):
        values = [scale * _mean([g[part] - a[part] for a, g in pairs[cell]]) for cell in cells]
        ax.bar(range(len(cells)), values, color=["tab:green" if (v < 0) == (part == "train_loss") else "tab:red"
                                                  for v in values])
        ax.axhline(0.0, color="0.4", linewidth=0.6)
        ax.set_xticks(range(len(cells)), [f"{d} {m}" for d, m in cells], rotation=60, fontsize=8)
        ax.set_ylabel(label, fontsize=8)
    fig.suptitle("SQP metric: seed means per (data set, model); green: Gauss-Newton better")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--datasets", nargs="+", default=list(GRID_DATASETS))
    ap.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    ap.add_argument("--batch-size", type=int, default=None, help="mini-batches of this size (default: full batch)")
    ap.add_argument("--epochs", default="auto", help='epochs, or "auto" (the default)')
    ap.add_argument("--delta", type=float, default=0.8)
    ap.add_argument("--gn-shift", type=float, default=None,
                    help='hessian_shift of the Gauss-Newton runs (default "auto")')
    ap.add_argument("--jobs", type=int, default=2, help="worker processes")
    ap.add_argument("--data-dir")
    ap.add_argument("--out", default=str(DEFAULT_OUT / "curvature_metric"))
    args = ap.parse_args(argv)
    epochs = args.epochs if args.epochs == "auto" else int(args.epochs)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    jobs = metric_jobs(args.datasets, args.seeds, args.batch_size, epochs, args.delta, str(data_dir(args.data_dir)),
                       args.gn_shift)
    records = []
    with mp.get_context("spawn").Pool(args.jobs, maxtasksperchild=1) as pool:
        for i, r in enumerate(pool.imap_unordered(grid_cell, jobs), 1):
            records.append(r)
            print(f"[{i}/{len(jobs)}] {r['dataset']} {r['model']} seed {r['seed']} {r['method']}: loss "
                  f"{r['train_loss']:.4f} acc {r['train_acc']:.4f} DI {r['train_di']:.3f} {r['iterations']} iterations "
                  f"{r['seconds']:.1f} s {r['status']}", flush=True)
    batch = "full batch" if args.batch_size is None else f"batches of {args.batch_size}"
    lines = [f"# python benchmarks/curvature_metric.py {' '.join(sys.argv[1:] if argv is None else argv)}",
             f"# commit {commit()}", "",
             f"DI >= {args.delta} (each group against the rest, all training rows), {batch}, epochs {epochs}, every "
             "other setting at its default; one thread per fit.", "", *metric_report(records)]
    (out / "metric.json").write_text(json.dumps(records, indent=1))
    (out / "metric.md").write_text("\n".join(lines) + "\n")
    metric_plot(records, out / "metric.png")
    print("\n".join(lines))
    print(f"wrote {out / 'metric.md'} and {out / 'metric.png'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
