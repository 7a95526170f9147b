"""The estimators' rate surrogate under ``method="sqp"``: ``FairClassifier`` with the DI constraint under
``sigmoid(scale t)`` for several scales, on the peer benchmark's splits.

``fairopt.training.SQP_RATE_SURROGATE`` (``sigmoid(t)``) is what the estimators give a rate constraint that
names no surrogate; :class:`solvers.StochasticSQP` alone differentiates the constraint's calibrated form,
``sigmoid(5 t)``. This script fits ``FairClassifier(constraints=[DisparateImpact(s, delta,
surrogate=Sigmoid(scale))])`` (a named surrogate, kept by the estimator) with every other setting at its
default, for the linear model, the MLP and the linear model under ``margin="auto"``, on the seeded 70/30
splits of :func:`benchmarks.papers.peers.prepare` (the sensitive attribute not an input), and reports train
and test accuracy and DI per cell and the paired differences between the scales.

    .venv/bin/python benchmarks/estimator_surrogate.py --data-dir ../shared/data --jobs 2
    .venv/bin/python benchmarks/estimator_surrogate.py --datasets adult compas --deltas 0.8 --scales 1 5
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd

try:
    from benchmarks._common import DEFAULT_OUT, commit, data_dir, markdown
except ImportError:  # run as a script from benchmarks/
    from _common import DEFAULT_OUT, commit, data_dir, markdown

#: The estimator settings compared: name -> (model, extra FairClassifier arguments).
VARIANTS = {"linear": ("linear", {}), "mlp": ("mlp", {}), "linear-margin": ("linear", {"margin": "auto"})}
DATASETS = ("adult", "dutch", "law", "acsincome", "compas")


def fit_cell(job: tuple) -> dict:
    """One fit: ``(dataset, seed, variant, delta, scale, data_dir)`` -> its accuracies, DIs, time, status."""
    import torch

    from benchmarks.papers.peer_adapters import SENSITIVE
    from benchmarks.papers.peers import cell_metrics, prepare
    from fairopt.constraints import DisparateImpact
    from fairopt.estimators import FairClassifier
    from fairopt.surrogates import Sigmoid

    dataset, seed, variant, delta, scale, root = job
    torch.set_num_threads(1)
    train, test, _ = prepare(dataset, seed, root)
    model, extra = VARIANTS[variant]
    constraint = DisparateImpact(SENSITIVE, delta=delta, surrogate=Sigmoid(scale=scale))
    clf = FairClassifier(constraints=[constraint], model=model, seed=seed, sensitive_names=SENSITIVE, **extra)
    start = time.perf_counter()
    clf.fit(train.X, train.y, sensitive_features=train.s)
    seconds = time.perf_counter() - start
    fit, held = (cell_metrics(clf.predict(p.X), p.y, p.s) for p in (train, test))
    return {"dataset": dataset, "seed": seed, "variant": variant, "delta": delta, "scale": scale,
            "train_acc": fit["acc"], "train_di": fit["di"], "test_acc": held["acc"], "test_di": held["di"],
            "seconds": seconds, "status": str(clf.status_)}


def summary(frame: pd.DataFrame, base: float) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Seed means per (dataset, variant, delta, scale), and per (variant, scale) the mean paired
    difference to scale ``base`` in test and train accuracy (points) with the cells it is >= 0 on."""
    frame = frame.assign(feasible=frame["train_di"] >= frame["delta"] - 0.005)
    means = (frame.groupby(["dataset", "variant", "delta", "scale"])
             .agg(train_acc=("train_acc", "mean"), test_acc=("test_acc", "mean"), train_di=("train_di", "mean"),
                  test_di=("test_di", "mean"), feasible=("feasible", "sum"), runs=("seed", "size"),
                  seconds=("seconds", "mean")).reset_index())
    keys = ["dataset", "variant", "delta", "seed"]
    reference = frame.loc[frame["scale"] == base, [*keys, "train_acc", "test_acc"]]
    rows = []
    for (variant, scale), part in frame[frame["scale"] != base].groupby(["variant", "scale"]):
        paired = part.merge(reference, on=keys, suffixes=("", "_base"))
        cell = paired.groupby(["dataset", "delta"])[["train_acc", "test_acc", "train_acc_base", "test_acc_base"]].mean()
        d_test = 100 * (cell["test_acc"] - cell["test_acc_base"])
        d_train = 100 * (cell["train_acc"] - cell["train_acc_base"])
        rows.append({"variant": variant, "scale": scale, "cells": len(cell), "test acc - base (points)": d_test.mean(),
                     "cells test >= base": int((d_test >= 0).sum()), "train acc - base (points)": d_train.mean(),
                     "cells train >= base": int((d_train >= 0).sum()),
                     "feasible runs": int(part["train_di"].ge(part["delta"] - 0.005).sum()), "runs": len(part)})
    return means, pd.DataFrame(rows)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--datasets", nargs="+", default=list(DATASETS))
    parser.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=list(VARIANTS))
    parser.add_argument("--deltas", type=float, nargs="+", default=[0.7, 0.8, 0.9])
    parser.add_argument("--scales", type=float, nargs="+", default=[1.0, 5.0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--jobs", type=int, default=1)
    parser.add_argument("--data-dir")
    parser.add_argument("--out", default=str(DEFAULT_OUT / "estimator_surrogate"))
    args = parser.parse_args(argv)
    root = str(data_dir(args.data_dir))
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    jobs = [(d, s, v, delta, scale, root) for d in args.datasets for s in args.seeds for v in args.variants
            for delta in args.deltas for scale in args.scales]
    records = []
    with mp.get_context("spawn").Pool(args.jobs, maxtasksperchild=20) as pool:
        for i, r in enumerate(pool.imap_unordered(fit_cell, jobs), 1):
            records.append(r)
            print(f"[{i}/{len(jobs)}] {r['dataset']} {r['variant']} delta {r['delta']} scale {r['scale']} seed "
                  f"{r['seed']}: test acc {r['test_acc']:.4f} train DI {r['train_di']:.3f}", flush=True)
    frame = pd.DataFrame(records).sort_values(["dataset", "variant", "delta", "scale", "seed"])
    (out / "runs.json").write_text(json.dumps(frame.to_dict(orient="records"), indent=1))
    base = args.scales[0]
    means, paired = summary(frame, base)
    text = [f"# python benchmarks/estimator_surrogate.py {' '.join(sys.argv[1:] if argv is None else argv)}",
            f"# commit {commit()}", "",
            "FairClassifier(method='sqp'), every setting at its default but the DI constraint's named surrogate "
            "sigmoid(scale t); the peer benchmark's seeded 70/30 splits (the sensitive attribute not an input). "
            f"Paired differences are against scale {base:g}, seed by seed, then averaged per (data set, delta) cell.",
            "", "## Paired differences", "", markdown(paired), "", "## Seed means", "", markdown(means), ""]
    (out / "estimator_surrogate.md").write_text("\n".join(text))
    print(markdown(paired))
    print(f"wrote {out / 'estimator_surrogate.md'}")
    return 0


if __name__ == "__main__":
    np.seterr(all="ignore")
    raise SystemExit(main())
