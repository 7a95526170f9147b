"""Distance-covariance regularisation on COMPAS ([DC] sec 5.1, Table 5.1, Fig. 5.2, Table 5.2).

COMPAS (ProPublica filtering, 6,172 rows), protected attributes sex (binary), race (4
groups) and age (continuous, min-max scaled as in the paper's App. G.1; binned into
tertiles for the JS divergence and UF), all also model inputs. 80/20 train/test split; the
80% is split 70/30 into sub-training and validation ([DC] App F). Objective
``BCE + lambda * psi`` with ``psi`` = CCdCov or JdCov ([DC] eq. 3.4, 3.6) of the predicted
probabilities, an MLP (2 x 256, Leaky ReLU), AdaHessian (lr 0.01, betas (0.95, 0.999),
Hessian power 1), mini-batches of 512.

For each regulariser and lambda: validation RPS, CCdCov, JdCov, JS divergence and UF
(means over seeds), the lambda at the JS-divergence elbow
(:func:`fairopt.experiments.select_elbow`, tolerance 0.1), then the models at lambda = 0
and at the selected lambdas retrained on the 80% and evaluated on the 20% test part.

    python benchmarks/dcov_compas.py --seeds 0 1 2 --epochs 40

Writes dcov_compas_validation.csv/.md, dcov_compas_test.csv, dcov_compas_<kind>.png under --out.
"""

from __future__ import annotations

import argparse
import logging
import time

import pandas as pd
import torch

from fairopt import datasets
from fairopt.experiments import (
    PenaltyMethod,
    calibrate_penalty,
    compare,
    minmax_sensitive,
    model_factory,
    plot_calibration,
)
from fairopt.penalties import DistanceCovariancePenalty

from _common import data_dir, markdown, out_dir, write_table

SENSITIVE = ["sex", "race", "age"]
KINDS = ("ccdcov", "jdcov")
COLUMNS = ["rps", "ccdcov", "jdcov", "js_divergence", "uf"]


def statistic(kind: str, data):
    """``(model, part) -> psi(sigmoid(model(part.X)), sensitive)`` for the results table."""
    psi = DistanceCovariancePenalty(SENSITIVE, kind=kind)
    psi.setup(data)
    return lambda model, part: float(psi(model(part.X), part))


def method(kind: str, args) -> PenaltyMethod:
    return PenaltyMethod(
        DistanceCovariancePenalty(SENSITIVE, kind=kind), model=model_factory("mlp", (256, 256)), name=kind,
        hyperparameter="lambda", optimizer="adahessian", lr=args.lr, batch_size=512, epochs=args.epochs,
        optimizer_options={"betas": (0.95, 0.999), "hessian_power": 1.0})


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--lambdas", nargs="+", type=float, default=[0, 5, 10, 20, 40, 60, 80])
    ap.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    ap.add_argument("--epochs", type=int, default=40)
    ap.add_argument("--lr", type=float, default=0.01)
    ap.add_argument("--tolerance", type=float, default=0.1)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--data-dir")
    ap.add_argument("--out")
    args = ap.parse_args()
    logging.basicConfig(level=logging.WARNING)
    torch.set_num_threads(args.threads)
    ddir, out = data_dir(args.data_dir), out_dir(args.out)
    data = minmax_sensitive(datasets.load("compas", data_dir=ddir, sensitive=SENSITIVE), ["age"])
    train, _ = data.split(test_size=0.2, seed=0)
    extra = {kind: statistic(kind, data) for kind in KINDS}
    print(f"COMPAS: {len(data)} rows; calibration on {len(train)} training rows (70/30), seeds {args.seeds}, "
          f"{args.epochs} epochs, lambdas {args.lambdas}", flush=True)

    selected, tables, runs = {}, [], []
    for kind in KINDS:
        t0 = time.perf_counter()
        result = calibrate_penalty(method(kind, args), train, args.lambdas, seeds=args.seeds,
                                   tolerance=args.tolerance, extra_metrics=extra)
        selected[kind] = result.selected
        valid = result.runs[result.runs.split == "test"]
        table = valid.groupby("value")[COLUMNS].mean().reset_index().rename(columns={"value": "lambda"})
        table.insert(0, "regulariser", kind)
        table["elbow"] = table["lambda"] == result.selected
        tables.append(table)
        runs.append(result.runs)
        plot_calibration(result, out / f"dcov_compas_{kind}.png", title=f"COMPAS, {kind}")
        print(f"{kind}: elbow at lambda = {result.selected:g} ({time.perf_counter() - t0:.0f} s)", flush=True)

    validation = pd.concat(tables, ignore_index=True)
    write_table(pd.concat(runs).to_dict(orient="records"), out, "dcov_compas_validation_runs")
    write_table(validation.to_dict(orient="records"), out, "dcov_compas_validation")
    text = "## Validation means (Table 5.1 analogue)\n\n" + markdown(validation) + "\n"

    t0 = time.perf_counter()
    methods = [method(kind, args) for kind in KINDS]
    grid = {"ccdcov": sorted({0.0, selected["ccdcov"]}), "jdcov": [selected["jdcov"]]}
    final = compare(methods, data, grid, seeds=args.seeds, test_size=0.2, split_seed=0, extra_metrics=extra)
    write_table(final.to_dict(orient="records"), out, "dcov_compas_test")
    test = final[final.split == "test"].groupby(["method", "value"])[["rps", "accuracy"] + COLUMNS[1:]].mean()
    test = test.reset_index().rename(columns={"method": "regulariser", "value": "lambda"})
    test.loc[test["lambda"] == 0, "regulariser"] = "none"
    text += (f"\n## Test set at the selected lambdas (Table 5.2 analogue, {time.perf_counter() - t0:.0f} s)\n\n"
             + markdown(test) + "\n")
    (out / "dcov_compas.md").write_text(text)
    print(text)


if __name__ == "__main__":
    main()
