"""Constraint-only vs regularisation-only fair training ([SQP] sec 4.2, Fig. 5 and 9).

Law (linear model, S = race) and ACSIncome (here the Colorado extract; MLP with one hidden
layer of 256, S = SEX), 80/20 split, BCE, full-batch epochs, smoothed-step surrogate:

- constraint-only: hard ``DI >= delta`` (rows of [SQP] eq. 5) for 8 deltas 0.2 .. 0.9,
  trained by the stochastic SQP engine (lr 0.5, the paper's setting);
- regularisation-only: ``loss + (1/lambda) r_dp`` ([SQP] eq. 3-4, ``r_dp = q^2`` the squared
  gap of smoothed positive rates, no constraint) for 8 lambdas 1e-4 .. 1e3, trained
  (a) by the same SQP engine without constraints, as in the paper
  (``PenaltyMethod(engine="sqp")``), and (b) by the :class:`solvers.penalty.Penalty` engine
  with full-batch Adam. fairopt's loss is the mean BCE, so the weight 1/lambda is relative
  to a mean loss (with the summed loss of eq. 3 as printed it would be N/lambda).

Realised fairness is measured on hard predictions (DI = min(P0/P1, P1/P0)). The reading:
does the constraint method realise the requested bound, and how does the realised DI of the
penalty method move with lambda (monotone? predictable?).

    python benchmarks/constraint_vs_penalty.py --datasets law --epochs 500
    python benchmarks/constraint_vs_penalty.py --datasets acsincome --epochs 150

Writes constraint_vs_penalty_<dataset>.csv/.json/.md and _<dataset>.png (realised DI and
accuracy against delta and lambda) plus _<dataset>_tradeoff.png under --out.
"""

from __future__ import annotations

import argparse
import logging
import time

import numpy as np
import torch

from fairopt import datasets
from fairopt.constraints import DisparateImpact
from fairopt.experiments import PenaltyMethod, SQPMethod, compare, model_factory, plot_tradeoff, realised_vs_requested
from fairopt.penalties import DemographicParitySquared

from _common import data_dir, markdown, out_dir, write_table

SETTINGS = {
    "law": dict(model=("linear", ()), adam_lr=0.05),
    "acsincome": dict(model=("mlp", (256,)), adam_lr=0.01),
}
DELTAS = [0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9]
LAMBDAS = [1e-4, 1e-3, 1e-2, 1e-1, 1.0, 1e1, 1e2, 1e3]


def methods_for(name: str, sensitive: str, epochs: int) -> list:
    kind, hidden = SETTINGS[name]["model"]
    model = model_factory(kind, hidden or (32,))
    return [
        SQPMethod(lambda delta: DisparateImpact(sensitive, delta=delta), model=model, name="constraint (SQP)",
                  epochs=epochs, lr=0.5),
        PenaltyMethod(DemographicParitySquared(sensitive), model=model, name="regularisation (SQP engine)",
                      hyperparameter="lambda", weight_of=lambda lam: 1.0 / lam, engine="sqp", epochs=epochs, lr=0.5),
        PenaltyMethod(DemographicParitySquared(sensitive), model=model, name="regularisation (Adam)",
                      hyperparameter="lambda", weight_of=lambda lam: 1.0 / lam, epochs=epochs,
                      lr=SETTINGS[name]["adam_lr"]),
    ]


def mean_table(table):
    cols = ["accuracy", "di_ratio", "dp_difference"]
    wide = table.groupby(["method", "value", "split"], sort=False)[cols].mean().unstack("split")
    wide.columns = [f"{split}_{measure}" for measure, split in wide.columns]
    wide["seconds"] = table.groupby(["method", "value"], sort=False)["time"].mean()
    order = ["train_accuracy", "test_accuracy", "train_di_ratio", "test_di_ratio", "train_dp_difference", "seconds"]
    return wide[order].reset_index()


def plot(table, path, title) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    train = table[table.split == "train"].groupby(["method", "value"], sort=False)[["di_ratio", "accuracy"]].mean()
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.8))
    for name, part in train.groupby(level="method", sort=False):
        part = part.droplevel("method")
        ax = axes[0] if name.startswith("constraint") else axes[1]
        ax.plot(part.index, part["di_ratio"], "o-", label=f"{name}: DI")
        ax.plot(part.index, part["accuracy"], "s--", label=f"{name}: accuracy")
    axes[0].plot(DELTAS, DELTAS, "k:", lw=1, label="DI = delta")
    axes[0].set_xlabel("requested delta")
    axes[1].set_xscale("log")
    axes[1].set_xlabel("lambda (objective loss + r_dp / lambda)")
    for ax in axes:
        ax.set_ylabel("train")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--datasets", nargs="+", default=list(SETTINGS), choices=list(SETTINGS))
    ap.add_argument("--epochs", type=int, default=500)
    ap.add_argument("--deltas", nargs="+", type=float, default=DELTAS)
    ap.add_argument("--lambdas", nargs="+", type=float, default=LAMBDAS)
    ap.add_argument("--seeds", nargs="+", type=int, default=[0])
    ap.add_argument("--threads", type=int, default=1, help="torch intra-op threads (1 avoids oversubscription)")
    ap.add_argument("--data-dir")
    ap.add_argument("--out")
    args = ap.parse_args()
    logging.basicConfig(level=logging.WARNING)
    torch.set_num_threads(args.threads)
    ddir, out = data_dir(args.data_dir), out_dir(args.out)
    for name in args.datasets:
        data = datasets.load(name, data_dir=ddir)
        sensitive = data.sensitive_names[0]
        print(f"== {name}: {len(data)} rows, S = {sensitive}, {args.epochs} full-batch epochs, seeds {args.seeds}",
              flush=True)
        methods = methods_for(name, sensitive, args.epochs)
        grid = {methods[0].name: args.deltas, methods[1].name: args.lambdas, methods[2].name: args.lambdas}
        t0 = time.perf_counter()
        table = compare(methods, data, grid, seeds=args.seeds, test_size=0.2, split_seed=0)
        stem = f"constraint_vs_penalty_{name}"
        write_table(table.to_dict(orient="records"), out, stem)
        means = mean_table(table)
        reading = realised_vs_requested(table, "di_ratio", "train")
        text = (f"## {name} ({time.perf_counter() - t0:.0f} s)\n\n" + markdown(means) + "\n\n### realised DI (train)\n\n"
                + markdown(reading) + "\n")
        (out / f"{stem}.md").write_text(text)
        print(text, flush=True)
        plot(table, out / f"{stem}.png", f"{name}: constraint-only (left) vs regularisation-only (right)")
        plot_tradeoff(table, out / f"{stem}_tradeoff.png", unfairness="di_ratio", split="test", title=name)
        constraint = means[means.method == "constraint (SQP)"]
        shortfall = np.maximum(constraint["value"] - constraint["train_di_ratio"], 0)
        print(f"constraint (SQP): train DI >= delta - 0.005 for {int((shortfall <= 0.005).sum())}/{len(constraint)} "
              f"deltas; largest shortfall {shortfall.max():.4f}\n", flush=True)


if __name__ == "__main__":
    main()
