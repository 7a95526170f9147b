"""Held-out disparate impact: default vs margin="auto" vs validation_fraction + certificate.

On the real UCI Adult data (a seeded sample of ``--rows`` rows), for each split seed a
stratified 70/30 train/test split; FairClassifier (linear model, SQP) with
``DI >= 0.8`` on ``sex`` is fitted on the 70% part in three configurations:

(a) default (margin 0);
(b) ``margin="auto"``;
(c) ``validation_fraction=0.3`` + ``margin="auto"``: trains on 70% of the training part and
    certifies the model on the other 30% (``certificate_``; up to ``n_candidates`` margins
    tried in a fixed sequence);
(d) the same with half the training part held out (the Seldonian toolkit's default puts 60%
    in its safety set).

Reported per seed: training and test DI (hard predictions, ``min(P0/P1, P1/P0)``), test
accuracy and, for (c), the certificate (realised held-out DI, its 95% interval, passed).

    python benchmarks/heldout_certificate.py --data-dir ../shared/data
    python benchmarks/heldout_certificate.py --seeds 0 1 2 --rows 20000 --epochs 500
"""

from __future__ import annotations

import argparse
import time
import warnings

import numpy as np
import pandas as pd
import torch

import fairopt
from fairopt.data import stratified_split_indices
from fairopt.estimators import FairClassifier

from _common import data_dir


def disparate_impact(pred: np.ndarray, s: np.ndarray) -> float:
    p0, p1 = pred[s == 0].mean(), pred[s == 1].mean()
    return float(min(p0 / p1, p1 / p0)) if min(p0, p1) > 0 else 0.0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-dir", help="default: $FAIROPT_DATA or ../shared/data")
    parser.add_argument("--rows", type=int, default=20000)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--epochs", type=int, default=None, help="SQP epochs (default: the engine's)")
    parser.add_argument("--delta", type=float, default=0.8)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)

    data = fairopt.datasets.load("adult", data_dir=data_dir(args.data_dir))
    rows = np.sort(np.random.default_rng(0).choice(len(data), size=min(args.rows, len(data)), replace=False))
    sample = data.subset(torch.from_numpy(rows))
    X = sample.X.double().numpy()
    y = sample.y.numpy().astype(int)
    s = sample.sensitive["sex"].numpy().astype(int)
    print(f"Adult: {len(data)} rows, sample {len(sample)} rows, {X.shape[1]} inputs, DI >= {args.delta} on sex")

    configs = {
        "a default": {},
        "b margin=auto": {"margin": "auto"},
        "c val=0.3+auto": {"margin": "auto", "validation_fraction": 0.3},
        "d val=0.5+auto": {"margin": "auto", "validation_fraction": 0.5},
    }
    results = []
    for seed in args.seeds:
        train, test = stratified_split_indices(y * 2 + s, 0.3, seed)
        for label, extra in configs.items():
            start = time.perf_counter()
            clf = FairClassifier(constraints=[("disparate_impact", "sex", args.delta)], method="sqp", model="linear",
                                 epochs=args.epochs, seed=seed, on_fail="ignore", **extra)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                clf.fit(X[train], y[train], sensitive_features={"sex": s[train]})
            seconds = time.perf_counter() - start
            fit_rows = np.setdiff1d(np.arange(len(train)), clf.validation_indices_ if clf.validation_indices_
                                    is not None else [])
            pred_train = clf.predict(X[train][fit_rows])
            pred_test = clf.predict(X[test])
            row = {"seed": seed, "config": label, "fit_rows": len(fit_rows),
                   "train_DI": disparate_impact(pred_train, s[train][fit_rows]),
                   "test_DI": disparate_impact(pred_test, s[test]),
                   "test_acc": float((pred_test == y[test]).mean()), "seconds": seconds}
            if clf.certificate_:
                cert = clf.certificate_[0]
                row.update(cert_n=cert.n, cert_DI=cert.realised, cert_lo=cert.lower, cert_hi=cert.upper,
                           passed=cert.passed)
            results.append(row)
            print(f"seed {seed} {label}: done in {seconds:.1f} s", flush=True)
    table = pd.DataFrame(results)
    print("\nper seed and configuration:")
    print(table.to_string(index=False, float_format="%.4f"))
    print("\nmean over seeds:")
    numeric = table.drop(columns=["seed"]).groupby("config").mean(numeric_only=True)
    print(numeric.to_string(float_format="%.4f"))


if __name__ == "__main__":
    main()
