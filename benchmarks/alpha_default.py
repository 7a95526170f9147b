"""The classifier's default L2 penalty ``alpha``: test accuracy of the default FairClassifier
(SQP, linear, DI >= 0.8) per ``alpha`` on small and large data sets.

Data: German credit (``tests/data/german_credit.csv.gz``, sex from ``personal_status``, 70/30
split stratified by the label), Law, COMPAS, a 5,000-row sample of Dutch (``dutch5k``), and full
Adult and Dutch (``/work/shared/data``; the library's loaders and their 70/30 ``split``);
seeds 0-2 (split, sample and model). German credit also gets scikit-learn's default
``LogisticRegression()`` after one-hot encoding and standardisation, the reference of issue 31.

    .venv/bin/python benchmarks/alpha_default.py --data german compas dutch5k law --alphas 0 3e-4 1e-3 3e-3
    .venv/bin/python benchmarks/alpha_default.py --data adult dutch --alphas 0 3e-4 1e-3
"""

from __future__ import annotations

import argparse
import sys
import time
import warnings
from pathlib import Path

import numpy as np
import pandas as pd
import torch
from sklearn.compose import make_column_transformer
from sklearn.linear_model import LogisticRegression
from sklearn.model_selection import train_test_split
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import OneHotEncoder, StandardScaler

import fairopt
from fairopt import FairClassifier

try:
    from benchmarks._common import commit, data_dir
except ImportError:  # run as a script from benchmarks/
    from _common import commit, data_dir

GERMAN = Path(__file__).resolve().parents[1] / "tests" / "data" / "german_credit.csv.gz"


def german(seed: int) -> tuple:
    """((X, y, sensitive) train, (X, y, sensitive) test, sensitive name) of German credit."""
    frame = pd.read_csv(GERMAN)
    y = (frame.pop("credit") == 1).astype(int).to_numpy()  # 1: good credit
    sex = np.where(frame["personal_status"].isin(["A92", "A95"]), "female", "male")
    X_tr, X_te, y_tr, y_te, s_tr, s_te = train_test_split(frame, y, sex, test_size=0.3, stratify=y,
                                                          random_state=seed)
    return (X_tr, y_tr, {"sex": s_tr}), (X_te, y_te, {"sex": s_te}), "sex"


def sklearn_default(train: tuple, test: tuple) -> float:
    """Test accuracy of LogisticRegression() after one-hot encoding and standardisation."""
    X = train[0]
    text = [c for c in X.columns if not pd.api.types.is_numeric_dtype(X[c])]
    numbers = [c for c in X.columns if c not in text]
    pipe = make_pipeline(make_column_transformer((OneHotEncoder(handle_unknown="ignore"), text),
                                                 (StandardScaler(), numbers)), LogisticRegression(max_iter=5000))
    return float(pipe.fit(X, train[1]).score(test[0], test[1]))


def loaded(name: str, seed: int, directory, rows: int | None = None) -> tuple:
    data = fairopt.datasets.load(name, data_dir=directory)
    if rows:
        data = data.subset(np.sort(np.random.default_rng(seed).choice(len(data), rows, replace=False)))
    train, test = data.split(test_size=0.3, seed=seed)
    return train, test, data.sensitive_names[0]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", nargs="+", default=["german", "compas", "dutch5k", "law"])
    parser.add_argument("--alphas", type=float, nargs="+", default=[0.0, 3e-4, 1e-3, 3e-3])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--data-dir")
    args = parser.parse_args()
    torch.set_num_threads(1)
    print(f"# commit {commit()}; python benchmarks/alpha_default.py {' '.join(sys.argv[1:])}", flush=True)
    rows = []
    for name in args.data:
        for seed in args.seeds:
            if name == "german":
                train, test, sensitive = german(seed)
                print(f"{name} seed {seed}: sklearn LogisticRegression() {sklearn_default(train, test):.4f}",
                      flush=True)
            else:
                base, sample = ("dutch", 5000) if name == "dutch5k" else (name, None)
                train, test, sensitive = loaded(base, seed, data_dir(args.data_dir), sample)
            for alpha in args.alphas:
                est = FairClassifier(constraints=[("disparate_impact", sensitive, 0.8)], alpha=alpha, seed=seed,
                                     pos_label=1 if name == "german" else None)
                start = time.perf_counter()
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    if name == "german":
                        est.fit(train[0], train[1], sensitive_features=train[2])
                        accuracy = est.score(test[0], test[1])
                    else:
                        est.fit(train)
                        accuracy = est.score(test)
                rows.append({"data": name, "seed": seed, "alpha": alpha, "test_accuracy": accuracy,
                             "train_violation": est.train_violation_, "seconds": time.perf_counter() - start})
                print(rows[-1], flush=True)
    table = pd.DataFrame(rows)
    print(table.pivot_table(index=["data", "seed"], columns="alpha", values="test_accuracy").round(4).to_string())
    print(table.groupby(["data", "alpha"]).test_accuracy.mean().unstack().round(4).to_string())


if __name__ == "__main__":
    main()
