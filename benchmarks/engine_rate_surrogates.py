"""Rate constraints other than disparate impact under :class:`solvers.StochasticSQP`: the smoothed step named
against the default (``surrogate=None``, which the engine differentiates in its calibrated form ``sigmoid(5 t)``).

For equalized odds and demographic parity (difference form, ``bound``), a linear model or an MLP with 32 hidden
units (``--models``), full batch (300 epochs) and mini-batches of 1,024 (10 epochs), every other setting at its
default, on the seeded 70/30 split of each data set (:meth:`fairopt.data.FairData.split`): train and test
accuracy, whether the returned model meets the bound on all training rows, and the warnings the engine issued.
The mini-batch grid (``sqp_stochastic.py --grid``) covers disparate impact.

    .venv/bin/python benchmarks/engine_rate_surrogates.py --data-dir ../shared/data
    .venv/bin/python benchmarks/engine_rate_surrogates.py --data-dir ../shared/data --models mlp --out DIR
"""

from __future__ import annotations

import argparse
import itertools
import json
import sys
import warnings
from pathlib import Path

import pandas as pd

try:
    from benchmarks._common import DEFAULT_OUT, commit, data_dir, library_warnings, markdown
except ImportError:  # run as a script from benchmarks/
    from _common import DEFAULT_OUT, commit, data_dir, library_warnings, markdown

DATASETS = ("adult", "dutch", "law", "acsincome", "compas")
#: name -> (constraint class name, bound)
CONSTRAINTS = {"equalized_odds": ("EqualizedOdds", 0.05), "demographic_parity": ("DemographicParity", 0.05)}
SURROGATES = ("smoothed_step", "default")


def fit_one(train, test, constraint: str, surrogate: str, batch: int | None, seed: int, model: str = "linear") -> dict:
    """One engine fit; the constraint on the data's first sensitive attribute."""
    import torch

    import fairopt
    import fairopt.constraints as fc
    from solvers import StochasticSQP

    cls, bound = CONSTRAINTS[constraint]
    rows = getattr(fc, cls)(train.sensitive_names[0], bound=bound,
                            surrogate=None if surrogate == "default" else surrogate)
    net = (fairopt.models.mlp(train.n_features, hidden=(32,), seed=seed) if model == "mlp"
           else fairopt.models.linear(train.n_features, seed=seed))
    engine = StochasticSQP(seed=seed, epochs=300 if batch is None else 10, batch_size=batch)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = engine.fit(net, train, constraints=[rows])
    with torch.no_grad():
        accuracy = [float(((net(p.X).reshape(-1) > 0).to(p.y.dtype) == p.y).double().mean()) for p in (train, test)]
    warned = library_warnings(caught)
    return {"model": model, "constraint": constraint, "surrogate": surrogate, "batch": batch or "full", "seed": seed,
            "train_acc": accuracy[0], "test_acc": accuracy[1], "feasible": bool(result.feasible),
            "warned": ",".join(warned) or "-"}


def main(argv: list[str] | None = None) -> int:
    import torch

    import fairopt

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--datasets", nargs="+", default=list(DATASETS))
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--models", nargs="+", default=["linear"], choices=["linear", "mlp"])
    parser.add_argument("--data-dir")
    parser.add_argument("--out", default=str(DEFAULT_OUT / "engine_rate_surrogates"))
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    root, out = data_dir(args.data_dir), Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    records = []
    for dataset in args.datasets:
        data = fairopt.datasets.load(dataset, data_dir=root)
        for seed in args.seeds:
            train, test = data.split(test_size=0.3, seed=seed)
            for model, constraint, surrogate, batch in itertools.product(args.models, CONSTRAINTS, SURROGATES,
                                                                        (None, 1024)):
                r = {"dataset": dataset, **fit_one(train, test, constraint, surrogate, batch, seed, model)}
                records.append(r)
                print(json.dumps(r), flush=True)
    frame = pd.DataFrame(records)
    (out / "runs.json").write_text(json.dumps(records, indent=1))
    frame["warned_any"] = frame["warned"] != "-"
    means = (frame.groupby(["dataset", "model", "constraint", "batch", "surrogate"], sort=False)
             .agg(train_acc=("train_acc", "mean"), test_acc=("test_acc", "mean"), feasible=("feasible", "sum"),
                  warned=("warned_any", "sum"), runs=("seed", "size")).reset_index())
    text = [f"# python benchmarks/engine_rate_surrogates.py {' '.join(sys.argv[1:] if argv is None else argv)}",
            f"# commit {commit()}", "",
            f"StochasticSQP defaults, {' and '.join(args.models)} models (MLP: 32 hidden units), bounds "
            + ", ".join(f"{k} <= {b}" for k, (_, b) in CONSTRAINTS.items())
            + "; 'default': the constraint without a named surrogate (the calibrated form sigmoid(5 t)); seed means; "
            "'feasible': runs meeting the bound on all training rows; 'warned': runs with an engine warning.", "",
            markdown(means), "", "## Runs", "", markdown(frame.drop(columns="warned_any")), ""]
    (out / "engine_rate_surrogates.md").write_text("\n".join(text))
    print(markdown(means))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
