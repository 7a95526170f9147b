"""GeDI constraints enforced by stochastic SQP: the GeDI paper's performance tests ([GeDI] sec 5).

Tasks ([GeDI] Table 3): Communities & Crime, regression on ``violentPerPop`` (min-max scaled
to [0, 1] on the whole data, as the GeDI authors' code does; GeDI is scale-dependent, so
this is what makes the numbers comparable) with the continuous ``pctBlack`` protected;
Adult, classification of ``income`` with the continuous ``age`` and the binary ``sex``.
Inputs are standardised on the whole data (fairopt's preprocessing, as the authors'
``StandardScaler``); the protected attribute stays an input, as in the paper.

Protocol ([GeDI] sec 5 and App. B.2): 5-fold cross-validation (``KFold`` for regression,
``StratifiedKFold`` on the target for classification; shuffled, seed 0), relative bound
``q = 0.2 * GeDI(x, y_train; V^1)`` on the training fold, polynomial kernel of degree 5 for
a continuous attribute (coarse ``||alpha||_1 <= q`` and fine ``|alpha_1| <= q``,
``alpha_2..5 ~ 0``) and 1 for a binary one (coarse and fine coincide). Models: the paper's
networks (ReLU; two hidden layers of 256 for Communities, three of 32 for Adult), trained
full-batch by :class:`solvers.StochasticSQP`; the unconstrained baseline is the same
network trained by the same engine on the same folds without constraints.

Engine settings (chosen on the first Communities and Adult folds; see ``--help``): fixed
step ``alpha_k = beta_k``, initial ``beta = 1``, ``hessian_shift = 10``, 500 epochs and the
learning-rate adjustment of [SQP] Alg. 2 from 40% of the epochs on, dividing by 2 (not 10).
The coarse constraint's smooth L1 row ``sum_j sqrt(alpha_j^2 + eps) <= q`` uses
``eps = (0.1 q / k)^2`` (it overestimates ``||alpha||_1`` by at most 10% of ``q``, so it
stays a safe inner approximation); with the library default (1%) the row is so curved at
``alpha_j = 0`` that full SQP steps oscillate around the bound. The fine rows keep the
library tolerance ``tol = 0.1``: ``|alpha_j| <= 0.1 q / (k - 1)`` for ``j >= 2``, hence
``GeDI(V^k) <= 1.1 q``.

Measures per split, on hard predictions (0/1 labels for Adult) unless stated [GeDI sec 5]:

* ``gedi``: ``GeDI(x, yhat; V^k) / GeDI(x, y_train; V^1)`` with ``x`` standardised by the
  training fold (the constraint's kernel), so a training value <= 0.2 meets the bound;
  ``gedi_own`` divides by the split's own ``GeDI(x, y; V^1)`` (the paper code's convention).
* ``didi_n``: DIDI over ``n`` quantile bins of ``x`` (n = 2, 3, 5, 10), normalised by the
  same split's DIDI of the true targets (the "percentage values" of [GeDI] sec 5);
  ``didi`` for a binary attribute. ``fairopt.measures`` has no normalised DIDI; the ratio
  is taken here.
* ``hgr``: HGR-KDE (Mary et al. 2019) of (x, score), the score being the probability for
  Adult (see :func:`split_measures`); ``hgr_rel`` divided by HGR(x, y).
* ``score``: R^2 (regression) or accuracy (classification).
* training diagnostics of a constrained fit: the absolute bound ``q`` and the final
  violation of the smooth rows (``viol_smooth``, what SQP enforces; on probabilities for
  Adult unless ``--target labels``) and of the exact rows (``viol_exact``, hard labels, or
  probabilities with ``--target probabilities``), both divided by ``q``.

    python benchmarks/gedi_sqp.py                                   # full protocol (slow on 2 cores)
    python benchmarks/gedi_sqp.py --datasets adult --folds 5 --max-folds 2 --epochs 200

Writes gedi_sqp_targets, gedi_sqp_folds (one row per fold, split, method and attribute)
and gedi_sqp (mean +- sd over folds) as CSV and JSON, and gedi_sqp.md, under --out.
"""

from __future__ import annotations

import argparse
import logging
import math
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import numpy as np
import pandas as pd
import torch
from sklearn.model_selection import KFold, StratifiedKFold

from fairopt import datasets, models
from fairopt.constraints.gedi import GeDI
from fairopt.data import FairData
from fairopt.measures import accuracy, r2
from fairopt.measures.gedi import binned_didi, didi, gedi, standardization
from fairopt.measures.hgr import hgr_kde
from solvers import StochasticSQP
from solvers.problem import violation

from _common import data_dir, markdown, out_dir, write_table

BINS = (2, 3, 5, 10)  # DIDI-n bins of the paper's experiments
RELATIVE_BOUND = 0.2  # q = 0.2 GeDI(x, y_train; V^1) [GeDI sec 5]
SPLITS = ("train", "test")


@dataclass(frozen=True)
class Task:
    """One data set of the paper: its loss, network and protected attributes ``(name, k)``."""

    dataset: str
    loss: str
    hidden: tuple[int, ...]
    attributes: tuple[tuple[str, int], ...]

    @property
    def classification(self) -> bool:
        return self.loss == "bce"


TASKS = {
    "communities": Task("communities", "mse", (256, 256), (("pctBlack", 5),)),
    "adult": Task("adult", "bce", (32, 32, 32), (("age", 5), ("sex", 1))),
}

# [GeDI] sec 5 / MANIFEST: GeDI(x, y; V^k) of the original targets (x standardised)
PAPER_TARGET_GEDI = {("communities", "pctBlack", 1): 0.0794, ("adult", "age", 1): 0.1046, ("adult", "age", 5): 0.3562}

# [GeDI] Tables 4-5, neural-network rows: (train, val) of R2/accuracy and of GeDI-V^k %
PAPER_NN = [
    ("communities", "pctBlack", "NN", "0.99 / 0.58", "1.79 / 1.78"),
    ("communities", "pctBlack", "NN+MT-Coarse", "0.78 / 0.40", "0.21 / 0.90"),
    ("communities", "pctBlack", "NN+MT-Fine", "0.70 / 0.32", "0.27 / 1.09"),
    ("communities", "pctBlack", "NN+SBR-Coarse", "0.67 / 0.45", "0.21 / 0.98"),
    ("communities", "pctBlack", "NN+SBR-Fine", "0.64 / 0.43", "0.18 / 0.92"),
    ("adult", "age", "NN", "0.89 / 0.83", "4.09 / 4.12"),
    ("adult", "age", "NN+MT-Coarse", "0.80 / 0.78", "0.29 / 0.63"),
    ("adult", "age", "NN+MT-Fine", "0.80 / 0.79", "0.32 / 0.51"),
    ("adult", "age", "NN+SBR-Coarse", "0.84 / 0.83", "0.91 / 0.93"),
    ("adult", "age", "NN+SBR-Fine", "0.84 / 0.83", "0.89 / 0.91"),
    ("adult", "sex", "NN", "0.89 / 0.83", "1.03 / 1.03"),
    ("adult", "sex", "NN+MT", "0.86 / 0.83", "0.19 / 0.17"),
    ("adult", "sex", "NN+SBR", "0.84 / 0.84", "0.17 / 0.17"),
]


# ------------------------------------------------------------------------------ data
def load_task(task: Task, ddir: Path) -> FairData:
    """The task's FairData; Communities' target min-max scaled to [0, 1] on the whole data."""
    sensitive = [name for name, _ in task.attributes]
    if task.dataset != "communities":
        return datasets.load(task.dataset, data_dir=ddir, sensitive=sensitive)
    frame, spec = datasets.load_frame("communities", ddir)
    target = frame[spec["target"]]
    frame[spec["target"]] = (target - target.min()) / (target.max() - target.min())
    return FairData.from_frame(frame, **{**spec, "sensitive": sensitive})


def fold_indices(data: FairData, classification: bool, n_folds: int, seed: int) -> list[tuple[np.ndarray, np.ndarray]]:
    """Shuffled k-fold (train, test) indices, stratified on the target for classification."""
    splitter = (StratifiedKFold if classification else KFold)(n_splits=n_folds, shuffle=True, random_state=seed)
    return list(splitter.split(np.zeros(len(data)), data.y.numpy()))


def kind_of(data: FairData, attribute: str) -> str:
    return data.sensitive_kinds[attribute]


def target_gedi(data: FairData, task: Task) -> list[dict]:
    """(a) GeDI(x, y; V^k) of the original targets on the whole data, k = 1..5 (k = 1 if binary)."""
    rows = []
    for attribute, degree in task.attributes:
        x, y = data.sensitive[attribute].double().numpy(), data.y.double().numpy()
        binary = kind_of(data, attribute) == "binary"
        for k in range(1, degree + 1):
            rows.append({
                "dataset": task.dataset, "attribute": attribute, "k": k,
                "gedi": gedi(x, y, k, standardize=not binary),
                "paper": PAPER_TARGET_GEDI.get((task.dataset, attribute, k), math.nan),
            })
    return rows


# ------------------------------------------------------------------------------ measures
def ratio(value: float, reference: float) -> float:
    """``value / reference``; 0 when both are 0 and inf when only the reference is."""
    if reference == 0.0:
        return 0.0 if value == 0.0 else math.inf
    return value / reference


@dataclass(frozen=True)
class Scale:
    """The training fold's standardisation of one attribute and its reference GeDI(V^1)."""

    shift: float
    scale: float
    reference: float  # GeDI(x_train, y_train; V^1)

    @classmethod
    def of(cls, train: FairData, attribute: str) -> "Scale":
        x = train.sensitive[attribute]
        shift, scale = standardization(x, kind_of(train, attribute) != "binary", attribute)
        z = (x.double().numpy() - shift) / scale
        return cls(shift, scale, gedi(z, train.y.double().numpy(), 1, standardize=False))

    def gedi(self, x: np.ndarray, y: np.ndarray, degree: int) -> float:
        """GeDI with the training standardisation (the constraint's kernel) and this split's centring."""
        return gedi((x - self.shift) / self.scale, y, degree, standardize=False)


def outputs(model: torch.nn.Module, batch: FairData, classification: bool) -> tuple[np.ndarray, np.ndarray]:
    """Hard predictions (0/1 labels, logit > 0, for classification; the output for regression)
    and scores (the probability sigmoid(logit) for classification; the output for regression)."""
    with torch.no_grad():
        out = model(batch.X).double()
    if not classification:
        return out.numpy(), out.numpy()
    return (out > 0).double().numpy(), torch.sigmoid(out).numpy()


def fairness(x: np.ndarray, y: np.ndarray, pred: np.ndarray, binary: bool, classification: bool) -> dict:
    """DIDI-n (binned, continuous x) or DIDI (binary x) of hard predictions, relative to y's."""
    if binary:
        return {"didi": ratio(didi(pred, x, classification), didi(y, x, classification))}
    return {f"didi_{n}": ratio(binned_didi(pred, x, n, classification), binned_didi(y, x, n, classification))
            for n in BINS}


def split_measures(model, batch: FairData, attribute: str, degree: int, scale: Scale, task: Task) -> dict:
    """Score and fairness measures of ``model`` on one split for one protected attribute.

    GeDI and DIDI use hard predictions; HGR-KDE uses the scores (probabilities for
    classification): the KDE grid is [-2.5, 2.5] in standard units, so a standardised 0/1
    prediction whose positive rate is below ~14% falls off the grid and reads as HGR ~ 0.
    """
    pred, score = outputs(model, batch, task.classification)
    x, y = batch.sensitive[attribute].double().numpy(), batch.y.double().numpy()
    value = scale.gedi(x, pred, degree)
    hgr = hgr_kde(x, score)
    return {
        "score": accuracy(y, pred) if task.classification else r2(y, pred),
        "gedi": ratio(value, scale.reference),
        "gedi_own": ratio(value, scale.gedi(x, y, 1)),
        **fairness(x, y, pred, kind_of(batch, attribute) == "binary", task.classification),
        "hgr": hgr,
        "hgr_rel": ratio(hgr, hgr_kde(x, y)),
    }


# ------------------------------------------------------------------------------ training
def methods(task: Task) -> Iterator[tuple[str, str | None, int, bool | None]]:
    """(method label, constrained attribute, degree, fine) for the unconstrained run and each constraint."""
    yield "unconstrained", None, 0, None
    for attribute, degree in task.attributes:
        if degree == 1:
            yield "sqp", attribute, 1, False
        else:
            yield "sqp-coarse", attribute, degree, False
            yield "sqp-fine", attribute, degree, True


def make_constraint(attribute: str, degree: int, fine: bool, scale: Scale, args, binary: bool) -> GeDI:
    """The relative GeDI constraint; the coarse row's smoothing is ``(smoothing q / k)^2``;
    ``--target`` (labels or probabilities) for a classifier (``binary``) only."""
    q = RELATIVE_BOUND * scale.reference
    eps = None if fine else max((args.smoothing * q / degree) ** 2, 1e-12)
    return GeDI(attribute, degree, bound=RELATIVE_BOUND, relative=True, fine=fine, eps=eps, tol=args.fine_tol,
                surrogate=args.surrogate, target=args.target if binary else None)


def train_model(task: Task, train: FairData, constraint: GeDI | None, args) -> tuple[torch.nn.Module, dict]:
    """Fit the task's network by full-batch SQP; return it and the fit diagnostics."""
    hidden = tuple(args.hidden) if args.hidden else task.hidden
    model = models.mlp(train.X.shape[1], hidden=hidden, activation="relu", seed=args.seed)
    engine = StochasticSQP(
        epochs=args.epochs, lr=args.lr, hessian="adam", hessian_shift=args.hessian_shift, step="fixed",  # the paper's H
        lr_kmin=int(0.4 * args.epochs), lr_factor=args.lr_factor, seed=args.seed,
    )
    t0 = time.perf_counter()
    result = engine.fit(model, train, loss=task.loss, constraints=[] if constraint is None else [constraint])
    info = {
        "seconds": time.perf_counter() - t0,
        "relaxed_steps": int(sum(r["qp_status"] == "relaxed" for r in result.history.records)),
        "final_lr": result.info["beta"],
    }
    if constraint is not None:
        info.update(constraint_diagnostics(model, train, constraint))
    return model, info


def constraint_diagnostics(model, train: FairData, constraint: GeDI) -> dict:
    """Final violation of the smooth and the exact rows on the training fold, divided by q."""
    q = float(constraint.absolute_bound)
    with torch.no_grad():
        out = model(train.X)
        smooth = float(violation(constraint(out, train).double(), constraint.lower, constraint.upper))
        exact = float(violation(constraint.exact(out, train).double(), constraint.lower, constraint.upper))
    return {"bound": q, "viol_smooth": ratio(smooth, q), "viol_exact": ratio(exact, q)}


def run_fold(task: Task, data: FairData, fold: int, idx: tuple[np.ndarray, np.ndarray], args) -> list[dict]:
    """Every method on one fold; one row per (method, attribute, split)."""
    train, test = (data.subset(torch.as_tensor(i)) for i in idx)
    scales = {a: Scale.of(train, a) for a, _ in task.attributes}
    rows = []
    for label, constrained, degree, fine in methods(task):
        constraint = None if constrained is None else make_constraint(constrained, degree, fine, scales[constrained], args,
                                                                      task.classification)
        model, info = train_model(task, train, constraint, args)
        for attribute, k in task.attributes:
            if constrained not in (None, attribute):
                continue
            for split, batch in zip(SPLITS, (train, test)):
                rows.append({
                    "dataset": task.dataset, "attribute": attribute, "k": k, "method": label, "fold": fold,
                    "split": split, **split_measures(model, batch, attribute, k, scales[attribute], task), **info,
                })
        print(f"   fold {fold} {label:<13} {constrained or '':<8} {info['seconds']:6.1f}s"
              + (f"  viol_exact/q {info['viol_exact']:.2e}  viol_smooth/q {info['viol_smooth']:.2e}" if constraint else ""),
              flush=True)
    return rows


# ------------------------------------------------------------------------------ tables
def summarise(folds: pd.DataFrame) -> pd.DataFrame:
    """Mean and population sd over folds (np.std, as the GeDI paper's tables)."""
    keys = ["dataset", "attribute", "k", "method", "split"]
    numeric = [c for c in folds.columns if c not in keys + ["fold"] and pd.api.types.is_numeric_dtype(folds[c])]
    grouped = folds.groupby(keys, sort=False)[numeric]
    mean, sd = grouped.mean(), grouped.std(ddof=0)
    out = mean.add_suffix("_mean").join(sd.add_suffix("_sd")).reset_index()
    out["folds"] = folds.groupby(keys, sort=False)["fold"].nunique().to_numpy()
    return out.sort_values(["dataset", "attribute"], key=first_appearance, kind="stable").reset_index(drop=True)


def first_appearance(column: pd.Series) -> pd.Series:
    """Sort key: the position of each value's first appearance (keeps the run order)."""
    order = {value: i for i, value in enumerate(dict.fromkeys(column))}
    return column.map(order)


def pm(summary: pd.DataFrame, column: str, split: str) -> pd.Series:
    """``mean ± sd`` strings of one measure on one split (empty where absent)."""
    part = summary[summary.split == split].set_index(["dataset", "attribute", "method"])
    if f"{column}_mean" not in part:
        return pd.Series("", index=part.index)
    return part.apply(lambda r: "" if pd.isna(r[f"{column}_mean"]) else f"{r[f'{column}_mean']:.3f} ± {r[f'{column}_sd']:.3f}", axis=1)


def display_table(summary: pd.DataFrame, columns: list[tuple[str, str, str]]) -> pd.DataFrame:
    """A printable table: one row per (dataset, attribute, method); columns (title, measure, split)."""
    index = summary[summary.split == "train"].set_index(["dataset", "attribute", "method"]).index
    table = pd.DataFrame(index=index)
    for title, column, split in columns:
        table[title] = pm(summary, column, split)
    return table.reset_index()


def main_columns(summary: pd.DataFrame) -> list[tuple[str, str, str]]:
    columns = [("score train", "score", "train"), ("score test", "score", "test"),
               ("GeDI/q0 train", "gedi", "train"), ("GeDI/q0 test", "gedi", "test"),
               ("HGR train", "hgr", "train"), ("HGR test", "hgr", "test")]
    if "viol_exact_mean" in summary:
        columns += [("viol exact/q", "viol_exact", "train"), ("viol smooth/q", "viol_smooth", "train")]
    return columns + [("seconds", "seconds", "train")]


def didi_columns(summary: pd.DataFrame) -> list[tuple[str, str, str]]:
    names = [f"didi_{n}" for n in BINS] + ["didi"]
    present = [n for n in names if f"{n}_mean" in summary]
    return [(f"{n.upper().replace('_', '-')} {s}", n, s) for n in present for s in SPLITS]


def report(targets: pd.DataFrame, summary: pd.DataFrame, args) -> str:
    """The markdown report: target GeDI, main table, DIDI-n table, the paper's NN rows."""
    paper = pd.DataFrame(PAPER_NN, columns=["dataset", "attribute", "method", "score train / val", "GeDI % train / val"])
    paper = paper[paper.dataset.isin(args.datasets)]
    parts = [
        "## GeDI(x, y; V^k) of the original targets (whole data)", markdown(targets),
        f"## SQP with GeDI <= {RELATIVE_BOUND} GeDI(x, y_train; V^1): mean ± sd over folds "
        f"({args.epochs} epochs, lr {args.lr}, hessian_shift {args.hessian_shift}, folds {args.folds}"
        + (f", first {args.max_folds} run" if args.max_folds else "") + ")",
        "score: R2 (communities) or accuracy (adult); GeDI/q0 = GeDI(x, yhat; V^k) / GeDI(x, y_train; V^1) "
        "(k = 5 for pctBlack and age, 1 for sex); viol = final violation on the training fold / q.",
        markdown(display_table(summary, main_columns(summary))),
        "## DIDI-n of the predictions / DIDI-n of the targets (same split)",
        markdown(display_table(summary, didi_columns(summary))),
        "## [GeDI] Tables 4-5, neural-network rows (for reference)", markdown(paper),
    ]
    return "\n\n".join(parts) + "\n"


# ------------------------------------------------------------------------------ main
def parse_args() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--datasets", nargs="+", default=list(TASKS), choices=list(TASKS))
    ap.add_argument("--folds", type=int, default=5, help="k of k-fold cross-validation (>= 2)")
    ap.add_argument("--max-folds", type=int, default=None, help="run only the first folds (quick runs)")
    ap.add_argument("--epochs", type=int, default=500)
    ap.add_argument("--lr", type=float, default=1.0, help="initial SQP step beta_0")
    ap.add_argument("--hessian-shift", type=float, default=10.0, help="mu in H = diag(sqrt(v + mu))")
    ap.add_argument("--lr-factor", type=float, default=2.0, help="divisor of the [SQP] Alg. 2 lr adjustment")
    ap.add_argument("--smoothing", type=float, default=0.1, help="coarse row: eps = (smoothing q / k)^2")
    ap.add_argument("--fine-tol", type=float, default=0.1, help="fine rows: |alpha_j| <= tol q / (k - 1), j >= 2")
    ap.add_argument("--hidden", type=int, nargs="+", default=None, help="hidden widths for every task (default: the paper's)")
    ap.add_argument("--surrogate", default=None, help="binary tasks: step surrogate of the smooth rows "
                    "(e.g. smoothed_step); default: probabilities (the smoothed step with --target labels)")
    ap.add_argument("--target", default=None, choices=["labels", "probabilities"],
                    help="binary tasks: what the constraint bounds, GeDI of the hard labels (trained on a smoothed "
                         "step) or of the probabilities; default: hard labels measured, probabilities trained")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's choice)")
    ap.add_argument("--data-dir")
    ap.add_argument("--out")
    args = ap.parse_args()
    if args.folds < 2:
        ap.error(f"--folds: expected an integer >= 2, got {args.folds}")
    if not args.smoothing > 0:
        ap.error(f"--smoothing: expected a number > 0, got {args.smoothing}")
    if args.max_folds is not None and not 1 <= args.max_folds <= args.folds:
        ap.error(f"--max-folds: expected 1..{args.folds}, got {args.max_folds}")
    return args


def main() -> None:
    args = parse_args()
    logging.basicConfig(level=logging.WARNING)
    if args.threads:
        torch.set_num_threads(args.threads)
    ddir, out = data_dir(args.data_dir), out_dir(args.out)
    target_rows, fold_rows = [], []
    for name in args.datasets:
        task = TASKS[name]
        data = load_task(task, ddir)
        target_rows += target_gedi(data, task)
        folds = fold_indices(data, task.classification, args.folds, args.seed)[: args.max_folds]
        print(f"== {name}: {len(data)} rows, {data.X.shape[1]} features, {len(folds)} of {args.folds} folds", flush=True)
        for fold, idx in enumerate(folds):
            fold_rows += run_fold(task, data, fold, idx, args)
    targets = write_table(target_rows, out, "gedi_sqp_targets")
    folds_df = write_table(fold_rows, out, "gedi_sqp_folds")
    summary = write_table(summarise(folds_df).to_dict(orient="records"), out, "gedi_sqp")
    text = report(targets, summary, args)
    (out / "gedi_sqp.md").write_text(text)
    print(text)
    print(f"wrote {out / 'gedi_sqp.md'} and gedi_sqp*.csv/.json")


if __name__ == "__main__":
    main()
