"""FairClassifier(model="gbm") under DI >= 0.8 beside plain LightGBM with the same rounds.

A seeded sample of a data set's rows (default Adult, 20,000 rows, sample seed 0), 70/30 stratified
splits (seeds 0-2, :meth:`fairopt.FairData.split`), its binary sensitive attribute (Adult: ``sex``)
NOT among the model inputs (the loader's ``include_sensitive=False``). Per seed: train and test DI (hard labels, group to
group), test accuracy and fit time of the boosted fit under the bound, and the same for plain
LightGBM (``objective="binary"``) with the same rounds, learning rate, leaves and threads; fit
times are the smaller of ``--repeats`` alternating runs (the machine is shared), as wall-clock
seconds and as the process's CPU seconds (``time.process_time``: with one thread per method the
work itself, which other processes on a shared machine slow less than the wall clock). Both
methods run with ``--n-jobs`` threads (LightGBM, BLAS, OpenMP, torch; 1 by default). The boosted fit
runs all ``--rounds`` rounds on all training rows (``stopping_fraction=None``: the same rounds as
the plain booster) unless ``--held-out-rounds`` keeps the estimator's default choice of the rounds
on held-out rows.

    python benchmarks/gbm_fit.py                       # 20,000 rows, seeds 0-2, 300 rounds
    python benchmarks/gbm_fit.py --num-leaves 31                # LightGBM's default trees, for both
    python benchmarks/gbm_fit.py --rows 5000 --seeds 0 --rounds 100
    python benchmarks/gbm_fit.py --dataset dutch                # Dutch, Law, ACS-Colorado: dutch, law, acsincome
    python benchmarks/gbm_fit.py --held-out-rounds              # the estimator's default rounds
"""

from __future__ import annotations

import argparse
import sys
import time
import warnings
from typing import Any, Callable

import lightgbm
import numpy as np
import pandas as pd

from fairopt import FairClassifier, FairData
from fairopt.boosted import GBM_DEFAULTS
from fairopt.datasets import load_frame

from _common import commit, data_dir, markdown


def disparate_impact(out: np.ndarray, groups: np.ndarray) -> float:
    """``min(P_0 / P_1, P_1 / P_0)`` of the hard labels ``out > 0`` over the two groups."""
    rates = [float(np.mean(out[groups == g] > 0)) for g in np.unique(groups)]
    low, high = min(rates), max(rates)
    return 1.0 if high == 0 else low / high


def timed(fit: Callable[[], Any]) -> tuple[Any, float, float]:
    """``fit()``'s result, wall-clock seconds and CPU seconds of this process."""
    wall, cpu = time.perf_counter(), time.process_time()
    result = fit()
    return result, time.perf_counter() - wall, time.process_time() - cpu


def plain_lightgbm(train: FairData, rounds: int, lr: float, leaves: int, n_jobs: int,
                   seed: int) -> tuple[lightgbm.Booster, float, float]:
    """LightGBM's own binary objective with the engine's tree settings; returns the booster and its fit
    time (wall-clock and CPU seconds)."""
    params = {"objective": "binary", "learning_rate": lr, "num_leaves": leaves, "min_data_in_leaf": 20, "seed": seed,
              "deterministic": True, "force_col_wise": True, "verbosity": -1, "num_threads": n_jobs}
    return timed(lambda: lightgbm.train(params, lightgbm.Dataset(train.X.numpy(), label=train.y.numpy()),
                                        num_boost_round=rounds))


def one_seed(data: FairData, seed: int, args: argparse.Namespace) -> list[dict]:
    train, test = data.split(test_size=0.3, seed=seed)
    s_train, s_test = train.sensitive[args.sensitive].numpy(), test.sensitive[args.sensitive].numpy()
    times_gbm, times_plain, cpu_gbm, cpu_plain = [], [], [], []
    for _ in range(args.repeats):
        options = {"n_jobs": args.n_jobs, "num_leaves": args.num_leaves,
                   **({} if args.held_out_rounds else {"stopping_fraction": None})}
        clf = FairClassifier(("disparate_impact", args.sensitive, args.delta), model="gbm", epochs=args.rounds,
                             lr=args.lr, seed=seed, engine_params=options)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            _, seconds, cpu = timed(lambda: clf.fit(train))
        times_gbm.append(seconds)
        cpu_gbm.append(cpu)
        booster, seconds, cpu = plain_lightgbm(train, args.rounds, args.lr, args.num_leaves, args.n_jobs, seed)
        times_plain.append(seconds)
        cpu_plain.append(cpu)
    rows = []
    for method, train_out, test_out, seconds, cpu, note in (
        ("FairClassifier(model='gbm'), DI >= %g" % args.delta, clf.decision_function(train),
         clf.decision_function(test), min(times_gbm), min(cpu_gbm),
         f"returned round {clf.engine_info_['returned_iteration']}, shift {clf.engine_info_['shift']:.3g}, "
         f"{len(caught)} warning(s)"),
        ("LightGBM, unconstrained", booster.predict(train.X.numpy(), raw_score=True),
         booster.predict(test.X.numpy(), raw_score=True), min(times_plain), min(cpu_plain), ""),
    ):
        rows.append({"seed": seed, "method": method, "train DI": disparate_impact(train_out, s_train),
                     "test DI": disparate_impact(test_out, s_test),
                     "test accuracy": float(np.mean((test_out > 0) == (test.y.numpy() > 0.5))),
                     "fit s": seconds, "fit CPU s": cpu, "note": note})
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-dir")
    parser.add_argument("--dataset", default="adult")
    parser.add_argument("--rows", type=int, default=20_000)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--rounds", type=int, default=300)
    parser.add_argument("--lr", type=float, default=0.1)
    parser.add_argument("--num-leaves", type=int, default=GBM_DEFAULTS["num_leaves"])
    parser.add_argument("--delta", type=float, default=0.8)
    parser.add_argument("--n-jobs", type=int, default=1)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--held-out-rounds", action="store_true")
    args = parser.parse_args(argv)
    frame, spec = load_frame(args.dataset, data_dir(args.data_dir))
    args.sensitive = spec["sensitive"][0]
    data = FairData.from_frame(frame.sample(n=min(args.rows, len(frame)), random_state=0), **spec)
    if any(name.startswith(args.sensitive) for name in data.feature_columns):
        raise SystemExit(f"{args.sensitive} must not be a model input")
    if data.sensitive_kinds[args.sensitive] != "binary":
        raise SystemExit(f"{args.dataset}: {args.sensitive} is not binary; DI here compares two groups")
    import torch
    from threadpoolctl import threadpool_limits

    torch.set_num_threads(args.n_jobs)  # the whole run, both methods: n_jobs BLAS/OpenMP/torch threads
    with threadpool_limits(limits=args.n_jobs):
        rows = [row for seed in args.seeds for row in one_seed(data, seed, args)]
    table = pd.DataFrame(rows)
    means = table.groupby("method", sort=False)[["train DI", "test DI", "test accuracy", "fit s", "fit CPU s"]].mean()
    ratio = means["fit s"].iloc[0] / means["fit s"].iloc[1]
    cpu_ratio = means["fit CPU s"].iloc[0] / means["fit CPU s"].iloc[1]
    print(f"# FairClassifier(model='gbm') on {args.dataset} ({len(data)} rows, sample seed 0, DI on "
          f"{args.sensitive}), 70/30 splits, "
          f"{args.rounds} rounds, lr {args.lr}, {args.num_leaves} leaves, {args.n_jobs} LightGBM thread(s)")
    print(f"commit {commit()}; python benchmarks/gbm_fit.py " + " ".join(sys.argv[1:] if argv is None else argv))
    print()
    print(markdown(table))
    print()
    print("Means over seeds:")
    print()
    print(markdown(means.reset_index()))
    print()
    print(f"fit time of model='gbm' / plain LightGBM (means): {ratio:.2f}x wall-clock, {cpu_ratio:.2f}x CPU")
    return 0


if __name__ == "__main__":
    sys.exit(main())
