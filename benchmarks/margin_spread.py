"""The held-out spread of the disparate-impact row against what ``margin="auto"`` predicts.

``FairClassifier`` (linear, MLP, gbm) under ``DI >= 0.8`` is fitted on many seeded 70/30 splits
(:func:`benchmarks.papers.peers.prepare`; Adult a seeded 20,000-row sample, the sensitive
attribute not among the inputs), stratified by target x group as in the other benchmarks or, with
``--split random``, random (every part's group and target counts vary, as for new rows). Per run
it records the group rates of hard labels on the training and the test rows and the DI row
``r = delta * P_ref - P_focus`` that is largest on the training rows (the active one; the fit
keeps it ``<= -margin``), and the margins that
:func:`fairopt.certificate.auto_margin` gives for a 30% hold-out:

- ``margin target``: before a model exists (the group rates of the training TARGET), what the
  estimators train under;
- ``margin fitted``: with the fitted model's hard outputs (its own group rates);
- ``margin stratified``: for comparison, the variance of the parts of a split stratified by
  target x group (:func:`stratified_margins`).

Per data set and model the table compares the measured need, the 95% quantile of
``test row - train row`` over the splits, with the mean of each prediction, and counts the runs
whose test row stayed within ``train row + margin`` (coverage). Without a margin (``margin`` 0)
the fit sits on the bound, which is where the margin is sized. ``--margins auto`` fits with
``margin="auto"`` on the same splits (test DI >= delta - 0.01 per run, test accuracy), and
``--peers`` adds fairlearn's ``ExponentiatedGradient`` + LogisticRegression on the same splits.

One JSON file per (data set, model, margin, seed, split) under ``OUT/cells`` (a rerun skips those it
has), then ``OUT/margin_spread.md`` (with the commit) and ``OUT/margin_spread.csv``. Examples::

    python benchmarks/margin_spread.py --datasets adult --seeds 0 1            # a quick look
    nice python benchmarks/margin_spread.py --models linear mlp gbm --margins 0 auto --peers
    nice python benchmarks/margin_spread.py --split random --seeds $(seq 0 59)
"""

from __future__ import annotations

import logging
import sys
import time
import warnings
from pathlib import Path
from typing import Any

from _common import DEFAULT_OUT, commit, grid_parser, limited_threads, markdown, out_dir, provenance

import numpy as np
import pandas as pd

from benchmarks.papers.cells import read_cells, write_cell
from benchmarks.papers.peer_adapters import ADAPTERS, Part
from benchmarks.papers.peers import cell_metrics, prepare

logger = logging.getLogger("benchmarks.margin_spread")

DATASETS = ["adult", "dutch", "law", "acsincome", "compas"]
ROWS = {"adult": 20000}
DELTA = 0.8
#: The held-out share of the splits (prepare's) and of auto_margin's new sample.
HELD_OUT = 0.3
MODELS = {"linear": {}, "mlp": {"model": "mlp"}, "gbm": {"model": "gbm"},
          # the SQP engine with the Adam-type metric instead of its full-batch default (solvers.curvature)
          "linear-adam": {"engine_params": {"hessian": "adam"}},
          "mlp-adam": {"model": "mlp", "engine_params": {"hessian": "adam"}},
          # a network on mini-batches of 1,024 rows instead of the estimator's full batch
          "mlp-1024": {"model": "mlp", "batch_size": 1024}}


def group_rates(pred: np.ndarray, s: np.ndarray) -> np.ndarray:
    """Positive rates of hard labels of the groups ``s = 0`` and ``s = 1``."""
    return np.array([pred[s == g].mean() for g in (0, 1)])


def di_rows(rates: np.ndarray, delta: float) -> np.ndarray:
    """The two DI rows ``delta * P_1 - P_0`` and ``delta * P_0 - P_1`` (both ``<= 0``: DI >= delta)."""
    return np.array([delta * rates[1] - rates[0], delta * rates[0] - rates[1]])


def predicted_margins(train: Part, pred: np.ndarray, delta: float) -> dict[str, np.ndarray]:
    """``auto_margin`` of the DI rows (in the order of :func:`di_rows`) on the training part,
    before a model exists and with the fitted model's hard outputs."""
    import torch

    from fairopt.certificate import auto_margin
    from fairopt.constraints import DisparateImpact
    from fairopt.data import FairData

    data = FairData.from_arrays(train.X.astype(np.float64), train.y.astype(np.float64), {"s": train.s},
                                task="binary", sensitive_kinds={"s": "binary"})
    constraint = DisparateImpact("s", delta)
    constraint.setup(data)
    order = _row_order(constraint, data)  # the constraint's rows in the order of di_rows
    outputs = torch.as_tensor(8.0 * pred - 4.0, dtype=torch.float64)
    return {"target": auto_margin(data, constraint, 0.95, HELD_OUT).numpy()[order],
            "fitted": auto_margin(data, constraint, 0.95, HELD_OUT, outputs=outputs).numpy()[order],
            "stratified": stratified_margins(train, pred, delta)}


def stratified_margins(train: Part, pred: np.ndarray, delta: float, z: float = 1.6448536269514722) -> np.ndarray:
    """The margins of the DI rows when training and new rows are the two parts of a split
    stratified by target x group (fixed counts ``n_yg`` in both): only the rates
    ``q_yg = P(yhat = 1 | y, g)`` within each cell vary, so a group rate has variance
    ``sum_y n_yg q_yg (1 - q_yg) / n_g^2`` (instead of ``p_g (1 - p_g) / n_g``), and the margin
    is ``z sqrt(v_train + v_new)`` with ``v_new = v_train * (1 - f) / f``. For comparison only."""
    var = np.zeros(2)
    for g in (0, 1):
        n_g = float((train.s == g).sum())
        for label in (0, 1):
            cell = (train.s == g) & (train.y == label)
            q = pred[cell].mean() if cell.any() else 0.0
            var[g] += cell.sum() * q * (1.0 - q) / n_g ** 2
    coef = np.array([[1.0, delta * delta], [delta * delta, 1.0]])  # squared coefficients of (P_0, P_1) per row
    return z * np.sqrt(coef @ var * (1.0 + (1.0 - HELD_OUT) / HELD_OUT))


def _row_order(constraint: Any, data: Any) -> np.ndarray:
    """Index of the constraint's rows matching :func:`di_rows`: found by evaluating the exact rows
    on outputs whose group rates are (0.5, 0.25) (rows ``delta 0.25 - 0.5`` and ``delta 0.5 - 0.25``)."""
    import torch

    s = data.sensitive["s"].numpy()
    out = np.where(s == 0, np.where(np.arange(len(s)) % 2 == 0, 4.0, -4.0),
                   np.where(np.arange(len(s)) % 4 == 0, 4.0, -4.0))
    values = constraint.exact(torch.as_tensor(out, dtype=data.X.dtype), data).double().numpy().reshape(-1)
    rates = group_rates((out > 0).astype(float), s)
    wanted = di_rows(rates, constraint.delta)
    return np.array([int(np.argmin(np.abs(values - w))) for w in wanted])


def fit_fairopt(train: Part, test: Part, model: str, margin: str, seed: int) -> tuple[np.ndarray, np.ndarray, float]:
    from fairopt.estimators import FairClassifier

    clf = FairClassifier([("disparate_impact", "s", DELTA)], sensitive_names="s", seed=seed,
                         margin="auto" if margin == "auto" else 0.0, **MODELS[model])
    start = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        clf.fit(train.X, train.y, sensitive_features=train.s)
    seconds = time.perf_counter() - start
    return np.asarray(clf.predict(train.X)), np.asarray(clf.predict(test.X)), seconds


def run_cell(dataset: str, model: str, margin: str, seed: int, data_dir: str, cells: Path,
             split: str = "stratified") -> dict:
    """One fit on one split (``split``: stratified by target x group, or random), cached as JSON
    under ``cells``."""
    path = cells / f"{dataset}__{model}__{margin}__{seed}{'' if split == 'stratified' else '__' + split}.json"
    if path.is_file():
        return read_cells([path]).iloc[0].to_dict()
    train, test, _ = prepare(dataset, seed, data_dir, ROWS.get(dataset), stratify=split == "stratified")
    if model == "fairlearn-eg":
        result = ADAPTERS["fairlearn-eg"](train, test, DELTA, seed)
        train_pred, test_pred, seconds = result["train_pred"], result["test_pred"], result["fit_time"]
    else:
        train_pred, test_pred, seconds = fit_fairopt(train, test, model, margin, seed)
    train_pred, test_pred = (np.asarray(p).reshape(-1).astype(np.int64) for p in (train_pred, test_pred))
    rates_train, rates_test = group_rates(train_pred, train.s), group_rates(test_pred, test.s)
    rows_train, rows_test = di_rows(rates_train, DELTA), di_rows(rates_test, DELTA)
    active = int(np.argmax(rows_train))
    margins = predicted_margins(train, train_pred, DELTA)
    tr, te = cell_metrics(train_pred, train.y, train.s), cell_metrics(test_pred, test.y, test.s)
    record = {"dataset": dataset, "model": model, "margin": margin, "split": split, "seed": seed,
              "commit": commit(),
              "n train": len(train), "n test": len(test),
              "train P0": rates_train[0], "train P1": rates_train[1], "test P0": rates_test[0],
              "test P1": rates_test[1], "train row": rows_train[active], "test row": rows_test[active],
              "margin target": margins["target"][active], "margin fitted": margins["fitted"][active],
              "margin stratified": margins["stratified"][active],
              "train DI": tr["di"], "test DI": te["di"], "train acc": tr["acc"], "test acc": te["acc"],
              "fit s": seconds}
    write_cell(path, record)
    logger.info("%s %s margin=%s seed %d: train DI %.3f test DI %.3f, row %.4f -> %.4f, margin %.4f / %.4f "
                "(%.1f s)", dataset, model, margin, seed, tr["di"], te["di"], rows_train[active],
                rows_test[active], margins["target"][active], margins["fitted"][active], seconds)
    return record


def spread_table(runs: pd.DataFrame) -> pd.DataFrame:
    """Per split kind, data set and model (fits without a margin): the 95% quantile of ``test
    row - train row`` over the splits (the need), the mean predicted margins and their coverage."""
    rows = []
    fits = runs[(runs["margin"] == "0") & (runs["model"] != "fairlearn-eg")]
    for (split, dataset, model), g in fits.groupby(["split", "dataset", "model"], sort=False):
        gap = g["test row"] - g["train row"]
        need = gap.quantile(0.95)
        row = {"split": split, "dataset": dataset, "model": model, "runs": len(g), "train DI": g["train DI"].mean(),
               "test DI": g["test DI"].mean(), "mean gap": gap.mean(), "sd gap": gap.std(ddof=1),
               "q95 gap (need)": need}
        for kind in ("target", "fitted", "stratified"):
            margin = g[f"margin {kind}"]
            row[f"margin {kind}"] = margin.mean()
            row[f"{kind} / need"] = margin.mean() / need
            row[f"covered {kind}"] = f"{int((gap <= margin).sum())}/{len(g)}"
        row["q95 DI train - test"] = (g["train DI"] - g["test DI"]).quantile(0.95)
        rows.append(row)
    return pd.DataFrame(rows)


def outcome_table(runs: pd.DataFrame) -> pd.DataFrame:
    """Per split kind, data set, model and margin: mean DI and accuracy, and the runs with test
    DI >= delta - 0.01."""
    keys = ["split", "dataset", "model", "margin"]
    table = runs.groupby(keys, sort=False)[["train DI", "test DI", "train acc", "test acc", "fit s"]].mean()
    counts = runs.groupby(keys, sort=False)["test DI"]
    table["runs"] = counts.size()
    table[f"test DI >= {DELTA - 0.01:g}"] = counts.apply(lambda v: f"{int((v >= DELTA - 0.01).sum())}/{len(v)}")
    return table.reset_index()


def coverage_table(runs: pd.DataFrame) -> pd.DataFrame:
    """Per split kind and model: the splits of all data sets together whose gap stayed within
    the margin the estimators train under (from the target's rates)."""
    fits = runs[(runs["margin"] == "0") & (runs["model"] != "fairlearn-eg")]
    covered = (fits["test row"] - fits["train row"]) <= fits["margin target"]
    table = covered.groupby([fits["split"], fits["model"]], sort=False).agg(["sum", "size"]).reset_index()
    table["covered"] = table["sum"] / table["size"]
    return table.rename(columns={"sum": "covered runs", "size": "runs"})


def versus_peer(runs: pd.DataFrame, peer: str = "fairlearn-eg") -> pd.DataFrame:
    """``margin="auto"`` fits against ``peer`` on the same splits (seeds both have): mean test
    accuracy of each, their difference, and the runs with test DI >= delta - 0.01."""
    auto = runs[runs["margin"] == "auto"]
    other = runs[runs["model"] == peer].set_index(["split", "dataset", "seed"])
    rows = []
    for (split, dataset, model), g in auto.groupby(["split", "dataset", "model"], sort=False):
        keys = [(split, dataset, seed) for seed in g["seed"] if (split, dataset, seed) in other.index]
        if not keys:
            continue
        mine = g.set_index(["split", "dataset", "seed"]).loc[keys]
        theirs = other.loc[keys]
        floor = DELTA - 0.01
        rows.append({"split": split, "dataset": dataset, "model": model, "runs": len(keys),
                     "test acc auto": mine["test acc"].mean(), f"test acc {peer}": theirs["test acc"].mean(),
                     "difference": mine["test acc"].mean() - theirs["test acc"].mean(),
                     f"auto test DI >= {floor:g}": f"{int((mine['test DI'] >= floor).sum())}/{len(keys)}",
                     f"{peer} test DI >= {floor:g}": f"{int((theirs['test DI'] >= floor).sum())}/{len(keys)}"})
    return pd.DataFrame(rows)


def main(argv: list[str] | None = None) -> int:
    parser = grid_parser(__doc__.splitlines()[0], DATASETS, list(range(20)), DEFAULT_OUT / "margin_spread")
    parser.add_argument("--models", nargs="+", default=["linear"], choices=list(MODELS))
    parser.add_argument("--margins", nargs="+", default=["0"], choices=["0", "auto"])
    parser.add_argument("--split", default="stratified", choices=["stratified", "random"],
                        help="70/30 splits stratified by target x group (the benchmarks') or random")
    parser.add_argument("--peers", action="store_true", help="fairlearn ExponentiatedGradient on the same splits")
    args = parser.parse_args(argv)
    out = out_dir(args.out)
    cells = out / "cells"
    cells.mkdir(exist_ok=True)
    jobs = [(d, m, g) for m in args.models for g in args.margins for d in args.datasets]
    jobs += [(d, "fairlearn-eg", "0") for d in args.datasets] if args.peers else []
    start = time.perf_counter()
    with limited_threads(args.threads, logger):
        for seed in args.seeds:  # seeds outermost: an interrupted run has every cell at the first seeds
            for dataset, model, margin in jobs:
                run_cell(dataset, model, margin, seed, args.data_dir, cells, args.split)
    runs = read_cells(sorted(cells.glob("*.json")))
    runs["margin"] = runs["margin"].astype(str)
    runs["split"] = runs["split"].fillna("stratified") if "split" in runs else "stratified"
    lines = ["# Held-out spread of the DI row against margin='auto'", "",
             provenance("margin_spread.py", argv, runs["commit"]), "",
             f"Seeded 70/30 stratified splits (benchmarks.papers.peers.prepare), DI >= {DELTA:g} on hard labels, "
             "the active DI row r = delta P_ref - P_focus (largest on the training rows). 'q95 gap (need)': the "
             "95% quantile over splits of test row - train row of fits without a margin; 'margin target' / "
             "'margin fitted': auto_margin (30% hold-out, confidence 0.95) from the training target's group "
             "rates / from the fitted model's; 'covered': runs with test row - train row <= that margin.", "",
             "## Spread (fits without a margin)", "", markdown(spread_table(runs), floatfmt=".4f"), "",
             "## Coverage of the trained margin, all data sets", "", markdown(coverage_table(runs), floatfmt=".4f"),
             "", "## margin='auto' against fairlearn ExponentiatedGradient (same splits)", "",
             markdown(versus_peer(runs), floatfmt=".4f"), "",
             "## Outcomes per margin", "", markdown(outcome_table(runs), floatfmt=".4f"), ""]
    (out / "margin_spread.md").write_text("\n".join(lines))
    runs.to_csv(out / "margin_spread.csv", index=False)
    print("\n".join(lines))
    seconds = time.perf_counter() - start
    print(f"{len(args.seeds) * len(jobs)} cells in {seconds:.0f} s; wrote {out / 'margin_spread.md'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
