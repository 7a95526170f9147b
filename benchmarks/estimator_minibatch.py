"""FairClassifier with mini-batches against its default full batch, as a user fits it.

Full UCI Adult (embedded), 80/20 stratified split (seed 0), ``("disparate_impact", "sex", 0.8)``,
every other setting at its default; for each model (linear, MLP) the default full-batch fit and
``batch_size=1024`` (``epochs="auto"``: enough epochs for 500 steps for the MLP, for 100 steps
for the linear model, whose polish takes the curvature metric), run alternately
``--repeats`` times in this one process (one thread), the median wall time reported with the
train/test accuracy and the training DI of the first run::

    python benchmarks/estimator_minibatch.py --repeats 3
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
import warnings
from pathlib import Path

from _common import DEFAULT_OUT, commit


def fit_once(model: str, batch_size: int | None, parts: tuple) -> dict:
    import numpy as np
    import torch

    import fairopt
    from fairopt.measures import disparate_impact

    Xtr, Xte, ytr, yte, Str = parts
    clf = fairopt.FairClassifier(constraints=[("disparate_impact", "sex", 0.8)], model=model, batch_size=batch_size)
    start = time.perf_counter()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        clf.fit(Xtr, ytr, sensitive_features=Str)
    seconds = time.perf_counter() - start
    pred = clf.predict(Xtr)
    di = float(disparate_impact(torch.as_tensor(pred.astype(np.int64)),
                                torch.as_tensor((Str["sex"] == "Male").to_numpy())))
    warned = sorted({type(w.message).__name__ for w in caught if "Warning" in type(w.message).__name__})
    return {"seconds": seconds, "train": float((pred == ytr).mean()), "test": float((clf.predict(Xte) == yte).mean()),
            "di": di, "warned": warned}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--out", default=str(DEFAULT_OUT / "estimator_minibatch.txt"))
    args = ap.parse_args(argv)
    import torch
    from sklearn.model_selection import train_test_split

    import fairopt

    torch.set_num_threads(1)
    frame, _ = fairopt.datasets.load_frame("adult")
    y = frame.pop("income").to_numpy()
    Xtr, Xte, ytr, yte, Str, _ = train_test_split(frame, y, frame[["sex"]], test_size=0.2, random_state=0, stratify=y)
    parts = (Xtr, Xte, ytr, yte, Str)
    configs = [(m, b) for m in ("linear", "mlp") for b in (None, 1024)]
    runs: dict = {c: [] for c in configs}
    for _ in range(args.repeats):
        for c in configs:  # alternately: a shared machine's drift hits every configuration alike
            runs[c].append(fit_once(*c, parts))
    lines = [f"# python benchmarks/estimator_minibatch.py {' '.join(sys.argv[1:] if argv is None else argv)}",
             f"# commit {commit()}; full Adult, {len(ytr)} training rows, DI >= 0.8 on sex; median of {args.repeats} "
             "alternating runs", f"{'model':7s} {'batch':>6s} {'seconds':>8s} {'trainAcc':>8s} {'testAcc':>8s} "
             f"{'trainDI':>8s} warnings"]
    for (model, batch), reps in runs.items():
        first = reps[0]
        lines.append(f"{model:7s} {str(batch or 'full'):>6s} {statistics.median(r['seconds'] for r in reps):8.2f} "
                     f"{first['train']:8.4f} {first['test']:8.4f} {first['di']:8.3f} {','.join(first['warned']) or '-'}")
    for model in ("linear", "mlp"):
        full = statistics.median(r["seconds"] for r in runs[(model, None)])
        mini = statistics.median(r["seconds"] for r in runs[(model, 1024)])
        lines.append(f"# {model}: batch 1024 / full batch = {mini / full:.2f}")
    print("\n".join(lines))
    Path(args.out).write_text("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
