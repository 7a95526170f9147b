"""Mini-batches against the full batch on classification tasks the estimators' defaults were never chosen on.

Two tasks built from the regression data of ``../shared/data`` (seeded 70/30 splits stratified by the label, the
sensitive attribute not among the inputs), ``FairClassifier`` under disparate impact >= 0.8 with every option at
its default but ``batch_size`` (None: the full batch; 256; 1,024), a linear model and ``model="mlp"``:

- ``communities``: Communities and Crime, ``violentPerPop`` above its 70% quantile, sensitive ``race`` (a group of
  about 47 of 1,395 training rows: one row moves its rate by two points), the 102 numeric inputs (correlated);
- ``pg15``: a seeded 30,000-row sample of pg15training, a claim (``Numtppd > 0``, 12% of the rows) against the
  one-hot policy columns, sensitive ``Gender`` (claims are nearly unpredictable from them: near-constant fits).

Per run: the majority rate, train / test accuracy, training log loss, DI from ``predict`` on the training and the
test rows, the estimator's status and warnings, seconds. The page reports per (task, model, batch) the runs within
one point of the full batch's training accuracy and the runs below the majority rate without a warning::

    python benchmarks/unseen_classification.py --data-dir ../shared/data --seeds 0 1 2 3 4 5
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from sklearn.metrics import log_loss
from sklearn.model_selection import train_test_split

from _common import DEFAULT_OUT, commit, data_dir
from fairopt.measures import disparate_impact

TASKS = ("communities", "pg15")
MODELS = ("linear", "mlp")
BATCHES = (None, 256, 1024)
#: Rows of pg15training sampled (seeded): the full 100,000 take minutes per full-batch network fit.
PG15_ROWS = 30000


def load_task(name: str, root: Path) -> tuple[pd.DataFrame, np.ndarray, np.ndarray]:
    """``(X, y, s)`` of a task (module docstring): inputs without the sensitive attribute, 0/1 labels, groups."""
    import fairopt

    if name == "communities":
        frame, _ = fairopt.datasets.load_frame("communities", data_dir=root)
        y = (frame["violentPerPop"] > frame["violentPerPop"].quantile(0.7)).astype(int).to_numpy()
        s = frame["race"].astype(int).to_numpy()
        X = frame.drop(columns=["violentPerPop", "race"]).select_dtypes("number")
        return X.loc[:, X.std() > 0].reset_index(drop=True), y, s
    if name == "pg15":
        frame, info = fairopt.datasets.load_frame("pg15training", data_dir=root)
        frame = frame.sample(n=PG15_ROWS, random_state=0)
        X = pd.get_dummies(frame[info["features"]].astype({"Group1": str}), dtype=float)
        y = (frame["Numtppd"] > 0).astype(int).to_numpy()
        return X.reset_index(drop=True), y, frame["Gender"].astype(str).to_numpy()
    raise ValueError(f"task: expected one of {TASKS}, got {name!r}")


def run_one(task: str, X: pd.DataFrame, y: np.ndarray, s: np.ndarray, seed: int, model: str,
            batch: int | None) -> dict[str, Any]:
    """One fit and what it is measured by (module docstring)."""
    from fairopt.estimators import FairClassifier

    Xtr, Xte, ytr, yte, s_tr, s_te = train_test_split(X, y, s, test_size=0.3, random_state=seed, stratify=y)
    start = time.perf_counter()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        est = FairClassifier(("disparate_impact", "s", 0.8), model=model, batch_size=batch, seed=seed)
        est.fit(Xtr, ytr, sensitive_features={"s": s_tr})
    seconds = time.perf_counter() - start
    train_pred, test_pred = est.predict(Xtr), est.predict(Xte)
    share = float(ytr.mean())
    return {"task": task, "seed": seed, "model": model, "batch": batch, "majority": max(share, 1.0 - share),
            "train_acc": float((train_pred == ytr).mean()), "test_acc": float((test_pred == yte).mean()),
            "log_loss": float(log_loss(ytr, est.predict_proba(Xtr)[:, 1])),
            "train_di": disparate_impact(train_pred, s_tr), "test_di": disparate_impact(test_pred, s_te),
            "status": est.status_, "seconds": seconds,
            "warnings": sorted({w.category.__name__ for w in caught if issubclass(w.category, UserWarning)})}


def render(runs: list[dict], command: str) -> str:
    """The results page: the runs, then per (task, model, batch) the criteria of the mini-batch grid."""
    lines = [f"# Mini-batches on classification tasks the defaults never saw\n\ncommit {commit()}; `{command}`\n",
             "DI >= 0.8 on each task's attribute, FairClassifier defaults with `batch_size` set (benchmarks/"
             "unseen_classification.py docstring); DI recomputed from `predict`.\n",
             "| task | model | batch | seed | majority | train acc | d acc vs full | log loss | train DI | test acc "
             "| test DI | status | s | warnings |", "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    full = {(r["task"], r["model"], r["seed"]): r["train_acc"] for r in runs if r["batch"] is None}
    for r in runs:
        gap = r["train_acc"] - full.get((r["task"], r["model"], r["seed"]), float("nan"))
        lines.append(f"| {r['task']} | {r['model']} | {r['batch'] or 'full'} | {r['seed']} | {r['majority']:.4f} | "
                     f"{r['train_acc']:.4f} | {gap:+.4f} | {r['log_loss']:.4f} | {r['train_di']:.3f} | "
                     f"{r['test_acc']:.4f} | {r['test_di']:.3f} | {r['status']} | {r['seconds']:.1f} | "
                     f"{', '.join(r['warnings']) or '-'} |")
    mini = [r for r in runs if r["batch"] is not None]
    within = sum(abs(r["train_acc"] - full[(r["task"], r["model"], r["seed"])]) <= 0.01 for r in mini)
    silent = sum(r["train_acc"] <= r["majority"] and not r["warnings"] for r in runs)
    unmet = sum(not r["train_di"] >= 0.795 and not r["warnings"] for r in runs)
    lines += ["", f"mini-batch runs within 0.01 of the full batch's train accuracy: {within}/{len(mini)}",
              f"runs at or below the majority rate without a warning: {silent}",
              f"runs with train DI (from predict) below 0.795 without a warning: {unmet}"]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--tasks", nargs="+", default=list(TASKS), choices=list(TASKS))
    ap.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    ap.add_argument("--data-dir")
    ap.add_argument("--out", default=str(DEFAULT_OUT / "unseen_classification"))
    args = ap.parse_args(argv)
    root, out = data_dir(args.data_dir), Path(args.out)
    runs = []
    for task in args.tasks:
        X, y, s = load_task(task, root)
        for seed in args.seeds:
            for model in MODELS:
                for batch in BATCHES:
                    runs.append(run_one(task, X, y, s, seed, model, batch))
                    print(json.dumps(runs[-1]), flush=True)
    out.mkdir(parents=True, exist_ok=True)
    (out / "runs.json").write_text(json.dumps(runs, indent=1))
    command = "python benchmarks/unseen_classification.py " + " ".join(sys.argv[1:] if argv is None else argv)
    (out / "grid.md").write_text(render(runs, command))
    print(f"written: {out / 'grid.md'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
