"""Soak test: many random QPs and small training problems, counting how each one ended.

Run (one thread; about 5-10 minutes for the full counts on one core)::

    OMP_NUM_THREADS=1 python benchmarks/soak.py                       # 10,000 QPs, 500 fits, seed 0
    OMP_NUM_THREADS=1 python benchmarks/soak.py --qps 500 --fits 20   # a quick look
    OMP_NUM_THREADS=1 python benchmarks/soak.py --seed 3 --out benchmarks/results/soak.json

Not part of ``make test``. Every problem is drawn from ``numpy.random.default_rng([seed,
part, index])`` (part 0: QPs, part 1: fits), so a reported ``(seed, part, index)`` rebuilds
the exact problem (``--only-qp INDEX`` / ``--only-fit INDEX`` rerun one and print it; the
examples in the report carry ``soak_seed``, ``part`` and ``index``).

What is drawn
-------------
QPs (``solvers.qp.diagonal_qp``): ``m`` in 1..12 rows, ``p`` in 2..60 variables, ``h`` in
[0.5, 20] times 10^U(-s, s), rows scaled by 10^U(-s, s) (s in {0, 1, 2}); row kinds upper,
lower, two-sided, equality and free (and, rarely, ``narrow``: two-sided of width
1e-12..1e-6). About 30% have dependent rows (duplicated, scaled, combined, zero). About 25%
are infeasible by construction: two rows ``a d <= t`` and ``c a d >= c (t + gap)``, a
combination row contradicting two others, a zero row with ``0 >= gap``, or more
inconsistent equalities than variables. Feasible ones are compared with Clarabel through
qpsolvers (tolerances 1e-10) wherever Clarabel returns a point feasible within 1e-7.

Fits (``fairopt.FairClassifier``): 20..300 rows, 1..6 features, a binary sensitive
attribute (0/1 or two strings) that shifts the labels; method sqp / penalty / lagrangian,
model linear / mlp (4 or 8 hidden units), a disparate-impact bound ``delta`` in 0.5..0.95
or no constraint, 5..50 epochs, full batch or mini-batches of 16..64. About 15% are edge
cases (a group of 1-2 rows, a constant feature, a group with one label, one label only).
Drawn after those (so the earlier draws of a seed are unchanged): a quarter of the SQP fits
take ``model="gbm"`` (boosted trees, full batch, the epochs as rounds), and a fifth of the
fits without an edge case split the shifted group into two or three levels (three or four
groups, named by strings, each bounded against the rest); after those, a tenth of the fits get
missing input values (NaN in 10-40% of the values of about half the columns): boosted trees
take them, every other model must refuse them with an error that names the column.

What is counted, per category (QP: ``feasible``, ``feasible+dependent``, ``feasible+narrow``,
``infeasible:<how>``; fit: ``<method>/<model>/<constrained or unconstrained>``)
------------------------------------------------------------------------------
completed
    Returned without an exception (a QP: any status; a fit: a fitted estimator).
clear_error
    ``ValueError`` whose message names a parameter, an argument or a column.
unclear_error
    ``ValueError`` naming none of them (message of the first one kept).
warnings
    Warnings by class (``warnings.warn``) and WARNING log records by logger
    (``log:<name>``), counted over all the problems of the category.
silent_wrong
    A returned result that a recomputation contradicts without the library saying so, by
    kind:

    - QP ``objective_off``: status "optimal" but the objective differs from Clarabel's by
      more than 1e-6 relative (``max(1, |f|)``); ``step_infeasible``: status "optimal" but the
      step misses a row by more than the accuracy ``diagonal_qp`` documents,
      ``tol (1 + |q_i| + max finite |bound_i|) + PRIMAL_SLACK (1 + |bound|)`` (see
      :func:`promise_excess`; ``tol = 1e-9``, ``PRIMAL_SLACK = 1e-7``);
      ``optimal_on_infeasible``: status "optimal" on a QP infeasible by construction;
      ``relaxation_invalid``: ``least_violation_bounds`` tightened a bound, reported no
      violation on an infeasible QP, or its ``v`` misses the relaxed bounds by > 1e-7;
      ``relaxed_step_infeasible``: the QP with the relaxed bounds is "optimal" but its step
      misses them by more than that documented accuracy.
    - fit ``converged_but_violated``: ``converged_`` is True (sqp, lagrangian: which
      promise feasibility) while the exact violation recomputed from the model's
      predictions exceeds the engine's ``feasibility_tol`` (1e-6) on a row;
      ``train_violation_mismatch``: ``train_violation_`` differs from the recomputation by
      more than 1e-6; ``missing_unmet_warning``: recomputed violation > ``violation_tol``
      (1e-3) without the FairnessWarning "violated on the training data";
      ``status_contradicts``: ``status_`` / ``engine_info_["feasible"]`` claim feasible
      while a row is violated by more than 1e-6, or infeasible while none is;
      ``non_finite_model``: non-finite parameters or predictions from a returned model;
      ``below_majority_unwarned``: a training accuracy below the majority-class rate (what
      predicting one class for every row scores) without a warning that says so (a
      ``ConstantPredictorWarning`` or the estimators' "near-constant classifier").
wrong_status (QPs only)
    Not silent but wrong: a non-optimal status on a QP that is feasible by construction,
    or a status other than "infeasible"/"optimal" on an infeasible one.
spurious_warning (fits only)
    The FairnessWarning "violated on the training data" although the recomputed
    violation is within ``violation_tol``.
unexpected
    Any other exception type; the first traceback of each type is kept.

The recomputation of a fit is independent of the library: hard predictions
``decision_function(X) > 0`` (float64), group rates, and the disparate-impact rows
``delta * P[a] - P[b] <= 0`` (two groups: both orders; more: each group against the rest, both
orders). Where the reported violation disagrees, the float32 forward
pass the library uses for ``train_violations_`` is also recomputed and the example is
labelled with whether the disagreement comes from predictions at the threshold.
"""

from __future__ import annotations

import argparse
import collections
import json
import logging
import re
import sys
import time
import traceback
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from tqdm import tqdm

import fairopt
from fairopt.exceptions import FairnessWarning
from solvers.outcome import ConstantPredictorWarning
from solvers.qp.reference import reference_step
from solvers.qp import diagonal_qp, least_violation_bounds
from solvers.qp.solve import PRIMAL_SLACK

OBJ_RTOL = 1e-6
FEAS_RTOL = 1e-7  # Clarabel's reference point counts only when this feasible
QP_TOL = 1e-9  # diagonal_qp's default tol
ROW_FEASIBILITY_TOL = 1e-6  # StochasticSQP / LagrangianDual feasibility_tol default
VIOLATION_TOL = 1e-3  # FairClassifier violation_tol default
ROW_KINDS = ("upper", "lower", "two_sided", "equality", "free")
INFEASIBILITIES = ("duplicate", "scaled_duplicate", "combination", "zero_row", "equalities")
QP_ARGUMENTS = ("g", "h", "J", "lo", "hi", "lo/hi", "solver", "tol", "max_iter", "rank_tol")


# --------------------------------------------------------------------------------------
# bookkeeping
# --------------------------------------------------------------------------------------
@dataclass
class Category:
    completed: int = 0
    clear_error: int = 0
    unclear_error: int = 0
    wrong_status: int = 0
    spurious_warning: int = 0
    unexpected: int = 0
    total: int = 0
    warnings: collections.Counter = field(default_factory=collections.Counter)
    silent_wrong: collections.Counter = field(default_factory=collections.Counter)
    facts: collections.Counter = field(default_factory=collections.Counter)  # statuses etc., for context


class Tally:
    """Counts per category plus the first example of every kind of problem."""

    def __init__(self) -> None:
        self.categories: dict[str, Category] = collections.defaultdict(Category)
        self.examples: dict[str, dict] = {}
        self.tracebacks: dict[str, str] = {}

    def example(self, key: str, info: dict) -> None:
        self.examples.setdefault(key, info)
        self.examples[key].setdefault("count", 0)
        self.examples[key]["count"] += 1

    def as_json(self) -> dict:
        return {
            "categories": {
                name: {"total": c.total, "completed": c.completed, "clear_error": c.clear_error,
                       "unclear_error": c.unclear_error, "wrong_status": c.wrong_status,
                       "spurious_warning": c.spurious_warning, "unexpected": c.unexpected,
                       "silent_wrong": dict(c.silent_wrong), "warnings": dict(c.warnings),
                       "facts": dict(c.facts)}
                for name, c in sorted(self.categories.items())
            },
            "examples": self.examples,
            "first_tracebacks": self.tracebacks,
        }


class LogCounter(logging.Handler):
    """Counts WARNING (and worse) log records of the library's loggers."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


def run_watched(fn, log: LogCounter) -> tuple[Any, list[str], BaseException | None, list]:
    """``fn()`` with warnings recorded; returns (result, warning class names, exception, warnings)."""
    log.records.clear()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            result, error = fn(), None
        except Exception as exc:  # noqa: BLE001 - every exception is classified
            result, error = None, exc
    names = [type(w.message).__name__ if isinstance(w.message, Warning) else w.category.__name__ for w in caught]
    names += [f"log:{r.name}" for r in log.records]
    return result, names, error, list(caught)


def names_an_argument(message: str, names) -> bool:
    return any(re.search(rf"(^|[\s('\"\[]){re.escape(n)}(['\"\]:\s(,.]|$)", message) for n in names)


def classify_error(tally: Tally, cat: Category, name: str, error: BaseException, argument_names, where: dict) -> None:
    if isinstance(error, ValueError):
        if names_an_argument(str(error), argument_names):
            cat.clear_error += 1
            tally.example(f"{name}: clear ValueError {str(error).split(':')[0]}", {**where, "message": str(error)})
        else:
            cat.unclear_error += 1
            tally.example(f"{name}: unclear ValueError", {**where, "message": str(error)})
        return
    cat.unexpected += 1
    key = f"{type(error).__module__}.{type(error).__name__}"
    if key not in tally.tracebacks:
        tally.tracebacks[key] = "".join(traceback.format_exception(error))
    tally.example(f"{name}: unexpected {key}", {**where, "message": str(error)[:500]})


# --------------------------------------------------------------------------------------
# QPs
# --------------------------------------------------------------------------------------
def random_qp(rng: np.random.Generator) -> tuple[str, tuple[np.ndarray, ...], bool]:
    """``(category, (g, h, J, lo, hi), feasible by construction)``."""
    infeasible = rng.random() < 0.25
    how = str(rng.choice(INFEASIBILITIES)) if infeasible else None
    if how == "equalities":
        m, p = int(rng.integers(1, 4)), int(rng.integers(2, 9))
    else:
        m, p = int(rng.integers(1, 13 - (3 if infeasible else 0))), int(rng.integers(2, 61))
    s_h, s_row = rng.choice([0.0, 1.0, 2.0], 2)
    g = rng.normal(size=p)
    h = rng.uniform(0.5, 20.0, p) * 10.0 ** rng.uniform(-s_h, s_h, p)
    J = rng.normal(size=(m, p)) * 10.0 ** rng.uniform(-s_row, s_row, (m, 1))
    dependent = rng.random() < 0.3
    if dependent:
        for i in range(1, m):
            how_dep = rng.choice(["none", "dup", "scaled", "sum", "zero"], p=[0.4, 0.15, 0.15, 0.2, 0.1])
            j, k = int(rng.integers(0, i)), int(rng.integers(0, i))
            if how_dep == "dup":
                J[i] = J[j]
            elif how_dep == "scaled":
                J[i] = rng.choice([-1.0, 1.0]) * rng.uniform(0.1, 10.0) * J[j]
            elif how_dep == "sum":
                J[i] = J[j] + rng.uniform(-2.0, 2.0) * J[k]
            elif how_dep == "zero":
                J[i] = 0.0
    w_f = J @ (0.3 * rng.normal(size=p))
    spread = np.abs(J @ (-g / h) - w_f) + 0.1
    kinds = rng.choice(len(ROW_KINDS) + 1, m, p=[0.22, 0.22, 0.22, 0.14, 0.12, 0.08])  # 5: narrow
    narrow = kinds == 5
    width = 10.0 ** rng.uniform(-12, -6, m)
    above = np.where(narrow, w_f + width * rng.random(m), w_f + rng.uniform(0, 1, m) * spread)
    below = np.where(narrow, w_f - width * rng.random(m), w_f - rng.uniform(0, 1, m) * spread)
    lo = np.where(np.isin(kinds, (1, 2, 5)), below, np.where(kinds == 3, w_f, -np.inf))
    hi = np.where(np.isin(kinds, (0, 2, 5)), above, np.where(kinds == 3, w_f, np.inf))
    if not infeasible:
        category = "feasible+narrow" if narrow.any() else ("feasible+dependent" if dependent else "feasible")
        return category, (g, h, J, lo, hi), True
    gap = float(rng.choice([1e-3, 0.1, 1.0, 10.0]))
    if how == "equalities":
        k = min(p + int(rng.integers(1, 4)), 12 - m)
        A = rng.normal(size=(k, p))
        q, _ = np.linalg.qr(A, mode="complete")
        off = q[:, p:] @ rng.normal(size=k - p)
        b = A @ rng.normal(size=p) + gap * off / np.linalg.norm(off)
        rows, new_lo, new_hi = A, b, b
    else:
        a, t = rng.normal(size=p), float(rng.normal())
        if how in ("duplicate", "scaled_duplicate"):
            c = 1.0 if how == "duplicate" else float(rng.uniform(0.1, 10.0))
            rows, new_lo, new_hi = np.vstack([a, c * a]), np.array([-np.inf, c * (t + gap)]), np.array([t, np.inf])
        elif how == "combination":
            b_row = rng.normal(size=p)
            rows = np.vstack([a, b_row, a + b_row])
            new_lo, new_hi = np.array([t, t, -np.inf]), np.array([np.inf, np.inf, 2 * t - gap])
        else:
            rows, new_lo, new_hi = np.zeros((1, p)), np.array([gap]), np.array([np.inf])
    order = rng.permutation(m + rows.shape[0])
    J2 = np.vstack([J, rows])[order]
    lo2, hi2 = np.concatenate([lo, new_lo])[order], np.concatenate([hi, new_hi])[order]
    return f"infeasible:{how}", (g, h, J2, lo2, hi2), False


def relative_violation(J, lo, hi, d) -> float:
    w = J @ d
    with np.errstate(invalid="ignore"):
        up = np.where(np.isfinite(hi), (w - hi) / (1 + np.abs(hi)), 0.0)
        dn = np.where(np.isfinite(lo), (lo - w) / (1 + np.abs(lo)), 0.0)
    return float(np.max(np.maximum(np.maximum(up, dn), 0.0), initial=0.0))


def promise_excess(g, h, J, lo, hi, d) -> float:
    """Largest row excess over the accuracy ``diagonal_qp`` documents, as a ratio (> 1: broken).

    A step meets row ``i`` within ``tol (1 + |q_i| + max finite |bound_i|) + PRIMAL_SLACK
    (1 + |bound|)`` (``q = J H^-1 g``, default ``tol``; the second term uses the violated
    side's bound); the solver checks exactly this before it returns a step.
    """
    w, q = J @ d, J @ (g / h)
    finite_lo, finite_hi = np.where(np.isfinite(lo), lo, 0.0), np.where(np.isfinite(hi), hi, 0.0)
    base = QP_TOL * (1.0 + np.abs(q) + np.maximum(np.abs(finite_lo), np.abs(finite_hi)))
    with np.errstate(invalid="ignore"):
        up = np.where(np.isfinite(hi), (w - hi) / (base + PRIMAL_SLACK * (1 + np.abs(finite_hi))), 0.0)
        dn = np.where(np.isfinite(lo), (lo - w) / (base + PRIMAL_SLACK * (1 + np.abs(finite_lo))), 0.0)
    return float(np.max(np.maximum(np.maximum(up, dn), 0.0), initial=0.0))


def objective(g, h, d) -> float:
    return float(g @ d + 0.5 * h @ (d * d))


def soak_qp(tally: Tally, log: LogCounter, seed: int, index: int, verbose: bool = False) -> None:
    rng = np.random.default_rng([seed, 0, index])
    category, (g, h, J, lo, hi), feasible = random_qp(rng)
    cat = tally.categories[f"qp {category}"]
    cat.total += 1
    where = {"soak_seed": seed, "part": "qp", "index": index, "category": category, "m": J.shape[0], "p": J.shape[1]}
    tensors = [torch.tensor(a) for a in (g, h, J, lo, hi)]
    res, names, error, _ = run_watched(lambda: diagonal_qp(*tensors), log)
    cat.warnings.update(names)
    if verbose:
        print(where, "\ng =", repr(g), "\nh =", repr(h), "\nJ =", repr(J), "\nlo =", repr(lo), "\nhi =", repr(hi),
              "\nresult:", res, error)
    if error is not None:
        classify_error(tally, cat, "qp", error, QP_ARGUMENTS, where)
        return
    cat.completed += 1
    cat.facts[f"status {res.status}"] += 1

    def wrong(kind: str, **info) -> None:
        cat.silent_wrong[kind] += 1
        tally.example(f"qp silent_wrong {kind} ({category})", {**where, **info})

    if feasible:
        if res.status != "optimal":
            cat.wrong_status += 1
            tally.example(f"qp wrong_status {res.status} ({category})", where)
            return
        d = res.d.numpy()
        violation = relative_violation(J, lo, hi, d)
        if not np.isfinite(d).all() or promise_excess(g, h, J, lo, hi, d) > 1.0:
            wrong("step_infeasible", relative_violation=violation, max_violation=res.max_violation)
        x = reference_step(g, h, J, lo, hi)
        if x is None or relative_violation(J, lo, hi, x) > FEAS_RTOL:
            cat.warnings["(no Clarabel reference)"] += 1
            return
        f, f_ref = objective(g, h, d), objective(g, h, x)
        if abs(f - f_ref) > OBJ_RTOL * max(1.0, abs(f_ref)):
            wrong("objective_off", objective=f, clarabel=f_ref, relative=abs(f - f_ref) / max(1.0, abs(f_ref)),
                  step_relative_violation=violation)
        return
    # infeasible by construction
    if res.status == "optimal":
        wrong("optimal_on_infeasible", max_violation=res.max_violation,
              max_abs_multiplier=float(res.multipliers.abs().max()))
    elif res.status != "infeasible":
        cat.wrong_status += 1
        tally.example(f"qp wrong_status {res.status} ({category})", where)
    rb, names, error, _ = run_watched(lambda: least_violation_bounds(tensors[3], tensors[4], tensors[2], tensors[1]),
                                      log)
    cat.warnings.update(f"least_violation_bounds:{n}" for n in names)
    if error is not None:
        classify_error(tally, cat, "least_violation_bounds", error, QP_ARGUMENTS, where)
        return
    lo_r, hi_r, v = rb.lo.numpy(), rb.hi.numpy(), rb.v.numpy()
    if (not np.isfinite(v).all() or not rb.violation > 0 or np.any(lo_r > lo) or np.any(hi_r < hi)
            or relative_violation(J, lo_r, hi_r, v) > FEAS_RTOL):
        wrong("relaxation_invalid", violation=rb.violation, v_relative_violation=relative_violation(J, lo_r, hi_r, v))
        return
    relaxed, names, error, _ = run_watched(lambda: diagonal_qp(*tensors[:3], rb.lo, rb.hi), log)
    cat.warnings.update(f"relaxed:{n}" for n in names)
    if error is not None:
        classify_error(tally, cat, "relaxed qp", error, QP_ARGUMENTS, where)
    elif relaxed.status != "optimal":
        cat.wrong_status += 1
        tally.example(f"qp wrong_status relaxed {relaxed.status} ({category})", where)
    elif promise_excess(g, h, J, lo_r, hi_r, relaxed.d.numpy()) > 1.0:
        wrong("relaxed_step_infeasible", relative_violation=relative_violation(J, lo_r, hi_r, relaxed.d.numpy()),
              over_promise=promise_excess(g, h, J, lo_r, hi_r, relaxed.d.numpy()))


# --------------------------------------------------------------------------------------
# fits
# --------------------------------------------------------------------------------------
FIT_ARGUMENTS = tuple(fairopt.FairClassifier().get_params()) + (
    "X", "y", "sensitive_features", "sensitive", "target", "features", "df", "delta", "bound", "s", "x0", "x1")


def random_fit(rng: np.random.Generator) -> tuple[str, dict, np.ndarray, np.ndarray, np.ndarray, str]:
    n, k = int(rng.integers(20, 301)), int(rng.integers(1, 7))
    X = rng.normal(size=(n, k)) * rng.choice([1.0, 10.0, 0.1], k)
    share = rng.uniform(0.15, 0.85)
    s = (rng.random(n) < share).astype(float)
    logits = X[:, 0] * rng.uniform(0.5, 2) + rng.uniform(0.5, 2.5) * (s - 0.5) + 0.7 * rng.normal(size=n)
    y = (logits > np.quantile(logits, rng.uniform(0.3, 0.7))).astype(int)
    edge = "none"
    if rng.random() < 0.15:
        edge = str(rng.choice(["tiny_group", "constant_feature", "one_label_in_group", "one_label"]))
        if edge == "tiny_group":
            s[:] = 0.0
            s[rng.choice(n, int(rng.integers(1, 3)), replace=False)] = 1.0
        elif edge == "constant_feature":
            X[:, int(rng.integers(0, k))] = float(rng.normal())
        elif edge == "one_label_in_group":
            y[s == 1] = 1
        else:
            y[:] = 1
    strings = rng.random() < 0.25
    method = str(rng.choice(["sqp", "penalty", "lagrangian"]))
    model = str(rng.choice(["linear", "mlp"]))
    delta = float(rng.uniform(0.5, 0.95)) if rng.random() < 0.8 else None
    params = dict(
        constraints=None if delta is None else ("disparate_impact", "s", delta),
        method=method, model=model, hidden=(int(rng.choice([4, 8])),), epochs=int(rng.integers(5, 51)),
        batch_size=None if rng.random() < 0.5 else int(rng.choice([16, 32, 64])), seed=int(rng.integers(0, 1000)),
    )
    # drawn after the draws above, so that a seed's earlier problems stay as they were
    if method == "sqp" and rng.random() < 0.25:
        params.update(model="gbm", batch_size=None)
    if edge == "none" and rng.random() < 0.2:  # the shifted group split into 2-3 levels
        s = np.where(s > 0, rng.integers(1, int(rng.integers(3, 5)), n), 0).astype(float)
    if strings or len(np.unique(s)) > 2:  # numeric codes of more than two levels read as a continuous attribute
        s = np.array(["M", "F", "X", "Y"], dtype=object)[s.astype(int)]
    if rng.random() < 0.1:  # holes (NaN) in 10-40% of the values of about half the input columns
        holes = (rng.random(X.shape) < rng.uniform(0.1, 0.4)) & (rng.random(k) < 0.5)[None, :]
        X = np.where(holes, np.nan, X)
    levels = len(np.unique(s))
    category = (f"fit {method}/{params['model']}/{'constrained' if delta is not None else 'unconstrained'}"
                + (f"/{levels} groups" if levels > 2 else "") + ("/missing inputs" if np.isnan(X).any() else ""))
    return category, params, X, y, s, edge


def di_rows(pred: np.ndarray, s: np.ndarray, levels: list, delta: float) -> np.ndarray:
    """The disparate-impact rows ``delta * P[a] - P[b]`` (<= 0): two groups, both orders in level order;
    more, each group ``g`` against the rows not in it, ``delta P[rest] - P[g]`` and ``delta P[g] - P[rest]``
    per group."""
    if len(levels) == 2:
        groups = [pred[s == level].mean() for level in levels]
        return np.array([delta * groups[0] - groups[1], delta * groups[1] - groups[0]])
    rows = []
    for level in levels:
        inside, rest = pred[s == level].mean(), pred[s != level].mean()
        rows += [delta * rest - inside, delta * inside - rest]
    return np.array(rows)


def soak_fit(tally: Tally, log: LogCounter, seed: int, index: int, verbose: bool = False) -> None:
    rng = np.random.default_rng([seed, 1, index])
    category, params, X, y, s, edge = random_fit(rng)
    cat = tally.categories[category]
    cat.total += 1
    where = {"soak_seed": seed, "part": "fit", "index": index, "edge": edge, "n": X.shape[0], "k": X.shape[1],
             **{k: v for k, v in params.items() if k != "constraints"},
             "delta": None if params["constraints"] is None else params["constraints"][2]}
    clf = fairopt.FairClassifier(**params)
    result, names, error, caught = run_watched(lambda: clf.fit(X, y, sensitive_features={"s": s}), log)
    cat.warnings.update(names)
    if verbose:
        print(where, error, names)
    if error is not None:
        classify_error(tally, cat, "fit", error, FIT_ARGUMENTS, where)
        return
    cat.completed += 1
    cat.facts[f"status_ {clf.status_}"] += 1
    cat.facts[f"converged_ {clf.converged_}"] += 1
    cat.facts[f"edge {edge}"] += 1

    def wrong(kind: str, **info) -> None:
        cat.silent_wrong[kind] += 1
        tally.example(f"fit silent_wrong {kind} ({category})", {**where, **info})

    parameters = getattr(clf.model_, "parameters", None)  # boosted trees have none: their outputs are checked
    finite_params = all(torch.isfinite(p).all() for p in parameters()) if callable(parameters) else True
    out = clf.decision_function(X)
    if not finite_params or not np.isfinite(out).all():
        wrong("non_finite_model", warnings=names, finite_params=bool(finite_params))
        return
    accuracy, majority = float(np.mean((out > 0) == (y > 0.5))), float(max(np.mean(y), 1.0 - np.mean(y)))
    says_constant = any(issubclass(w.category, ConstantPredictorWarning) or "near-constant" in str(w.message)
                        or "constant predictor" in str(w.message) for w in caught)
    if accuracy < majority - 1e-12 and not says_constant:
        wrong("below_majority_unwarned", accuracy=accuracy, majority=majority, status=clf.status_, warnings=names)
    if params["constraints"] is None:
        return
    delta = params["constraints"][2]
    levels = list(clf.sensitive_levels_["s"])
    rows = di_rows((out > 0).astype(float), np.asarray(s), levels, delta)
    row_violation = np.maximum(rows, 0.0)
    recomputed = float(row_violation.sum())
    reported = float(clf.train_violation_)
    if verbose:
        print("rows", rows, "reported", reported, clf.status_, clf.converged_, clf.engine_info_.get("feasible"))
    if abs(reported - recomputed) > 1e-6:
        # the library measures with a float32 forward pass: is the difference predictions at the threshold?
        encoded, _ = clf.preprocessor_.transform(_frame(X))
        with torch.no_grad():
            out32 = clf.model_(torch.from_numpy(encoded)).reshape(-1).double().numpy()
        rows32 = np.maximum(di_rows((out32 > 0).astype(float), np.asarray(s), levels, delta), 0.0).sum()
        wrong("train_violation_mismatch", reported=reported, recomputed=recomputed,
              float32_recomputed=float(rows32), rows_near_threshold=int(np.sum(np.abs(out) < 1e-5)))
    max_row = float(row_violation.max())
    if clf.converged_ and params["method"] in ("sqp", "lagrangian") and max_row > ROW_FEASIBILITY_TOL:
        wrong("converged_but_violated", max_row_violation=max_row, status=clf.status_)
    feasible_claim = clf.engine_info_.get("feasible")  # lagrangian (and sqp); penalty claims nothing
    if params["method"] == "sqp":  # its status says it too: converged / not_stationary are feasible
        feasible_claim = {"converged": True, "not_stationary": True, "infeasible": False}.get(clf.status_)
        if feasible_claim is not None and clf.engine_info_.get("feasible") not in (None, feasible_claim):
            wrong("status_contradicts", status=clf.status_, feasible=clf.engine_info_.get("feasible"),
                  max_row_violation=float(row_violation.max()))
    if feasible_claim is not None and bool(feasible_claim) != (max_row <= ROW_FEASIBILITY_TOL):
        wrong("status_contradicts", status=clf.status_, feasible=clf.engine_info_.get("feasible"),
              max_row_violation=max_row)
    unmet_warned = any(issubclass(w.category, FairnessWarning) and "violated on the training data" in str(w.message)
                       for w in caught)
    if recomputed > VIOLATION_TOL and not unmet_warned:
        wrong("missing_unmet_warning", recomputed=recomputed, status=clf.status_)
    if unmet_warned and recomputed <= VIOLATION_TOL:
        cat.spurious_warning += 1
        tally.example(f"fit spurious_warning ({category})", {**where, "recomputed": recomputed})


def _frame(X: np.ndarray):
    import pandas as pd

    return pd.DataFrame(X, columns=[f"x{j}" for j in range(X.shape[1])])


# --------------------------------------------------------------------------------------
# report
# --------------------------------------------------------------------------------------
def summary_table(tally: Tally) -> str:
    header = ("category", "total", "completed", "clear_err", "unclear_err", "wrong_status", "spurious_warn",
              "silent_wrong", "unexpected")
    rows = []
    for name, c in sorted(tally.categories.items()):
        rows.append((name, c.total, c.completed, c.clear_error, c.unclear_error, c.wrong_status, c.spurious_warning,
                     sum(c.silent_wrong.values()), c.unexpected))
    totals = ("ALL", *(sum(r[i] for r in rows) for i in range(1, len(header))))
    widths = [max(len(str(r[i])) for r in [header, *rows, totals]) for i in range(len(header))]
    line = lambda r: "  ".join(str(v).ljust(w) if i == 0 else str(v).rjust(w) for i, (v, w) in enumerate(zip(r, widths)))  # noqa: E731
    out = [line(header), line(["-" * w for w in widths]), *map(line, rows), line(totals), ""]
    for name, c in sorted(tally.categories.items()):
        if c.silent_wrong:
            out.append(f"{name}: silent_wrong {dict(c.silent_wrong)}")
    warning_totals = collections.Counter()
    for c in tally.categories.values():
        warning_totals.update(c.warnings)
    out.append(f"warnings (all categories): {dict(warning_totals.most_common())}")
    out.append("facts per category (statuses, converged_, edge cases of the completed runs):")
    for name, c in sorted(tally.categories.items()):
        out.append(f"  {name}: {dict(sorted(c.facts.items()))}")
    out.append("warnings per category:")
    for name, c in sorted(tally.categories.items()):
        if c.warnings:
            out.append(f"  {name}: {dict(c.warnings.most_common())}")
    if tally.tracebacks:
        out.append("first traceback of each unexpected exception type:")
        for key, text in tally.tracebacks.items():
            out.append(f"--- {key}\n{text}")
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--qps", type=int, default=10_000)
    parser.add_argument("--fits", type=int, default=500)
    parser.add_argument("--out", type=Path, help="write the summary (counts, examples, tracebacks) as JSON here")
    parser.add_argument("--only-qp", type=int, help="rerun QP number INDEX (with --seed) and print it")
    parser.add_argument("--only-fit", type=int, help="rerun fit number INDEX (with --seed) and print it")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    log = LogCounter()
    for name in ("solvers", "fairopt"):
        logging.getLogger(name).addHandler(log)
    tally = Tally()
    if args.only_qp is not None or args.only_fit is not None:
        if args.only_qp is not None:
            soak_qp(tally, log, args.seed, args.only_qp, verbose=True)
        if args.only_fit is not None:
            soak_fit(tally, log, args.seed, args.only_fit, verbose=True)
        print(json.dumps(tally.as_json(), indent=1, default=str))
        return 0
    started = time.perf_counter()
    for i in tqdm(range(args.qps), desc="QPs", mininterval=2.0):
        soak_qp(tally, log, args.seed, i)
    qp_seconds = time.perf_counter() - started
    for i in tqdm(range(args.fits), desc="fits", mininterval=2.0):
        soak_fit(tally, log, args.seed, i)
    seconds = time.perf_counter() - started
    print(f"\nsoak: seed {args.seed}, {args.qps} QPs ({qp_seconds:.0f} s), {args.fits} fits "
          f"({seconds - qp_seconds:.0f} s), {seconds:.0f} s in all\n")
    print(summary_table(tally))
    if tally.examples:
        print("\nfirst example of each finding (rerun with --only-qp/--only-fit INDEX):")
        for key, info in sorted(tally.examples.items()):
            print(f"  {key}: {json.dumps(info, default=str)}")
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        payload = {"seed": args.seed, "qps": args.qps, "fits": args.fits, "seconds": round(seconds, 1),
                   "qp_seconds": round(qp_seconds, 1), **tally.as_json()}
        args.out.write_text(json.dumps(payload, indent=1, default=str))
        print(f"\nwritten: {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
