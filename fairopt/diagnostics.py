"""Post-fit diagnostics of the estimators: what a user should know about a finished fit.

Pure functions that turn a :class:`solvers.history.FitResult`, the constraints, the data and the
exact training violations into warning texts (``None`` or ``[]`` when there is nothing to say);
the estimator warns (:class:`fairopt.FairnessWarning`, or
:class:`fairopt.exceptions.DegenerateModelWarning` for a constant model or a classifier no better than one):

- *unmet bound*: exact training violation above ``violation_tol`` at the end;
- *relaxed steps at the end*: relaxed SQP steps among the last 10% of the iterations;
- *near-constant classifier* (:func:`solvers.outcome.near_constant`) or *poor regression fit*
  (training R2 below :data:`POOR_FIT_R2`); *degenerate regressor*: zero spread of predictions;
- *inactive constraint*: satisfied and not restricting the model. SQP: no row in the QP active
  set and none violated over the last 10% of the iterations up to the returned one (zero multipliers
  at the end). Penalty and Lagrangian: the surrogate violation was 0 at every step (a term that acted
  earlier and is 0 at the end proves nothing). Moving Targets: the pre-trained learner already meets it. With
  ``check_inactive=True`` also every bound an unconstrained reference model meets.

What only the iterations tell is read from the history, through the column names of
:mod:`solvers.history`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any, Callable

import numpy as np
import torch
from torch import nn

from fairopt.data import FairData
from fairopt.evaluation import constant_predictions, met_tolerances
from fairopt.status import tolerance_of
from fairopt.exceptions import DegenerateModelWarning, FairnessWarning
from fairopt.training import ENGINE_CONSTANT_NOTE, float64_outputs
from solvers.boosting import BoostedScores
from solvers.history import (COLUMN_ACTIVE, COLUMN_C, COLUMN_C_PREDICTIONS, COLUMN_PENALTY, COLUMN_QP_STATUS,
                             COLUMN_VIOL, QP_FINAL, QP_RELAXED, FitResult, History)
from solvers.outcome import outputs_near_constant
from solvers.problem import changes_in_eval_mode, row_violations

__all__ = ["BOOSTED_SEVERAL_GROUPS", "POOR_FIT_R2", "TAIL_FRACTION", "bounds_acted", "constant_fit_message",
           "constraint_messages", "fit_quality_warnings", "fit_warnings", "inactive_by_history", "inactive_message",
           "iteration_records", "not_binding", "not_binding_reason", "poor_fit_message",
           "pretraining_violations", "relaxed_steps", "returned_its_start", "returned_tail", "row_blocks", "tail",
           "tail_relaxed_message", "unmet_message"]

#: Fraction of the final iterations the history diagnostics read.
TAIL_FRACTION = 0.1
#: A regression fit is reported as worse than a constant predictor below this training R2.
POOR_FIT_R2 = -0.05

# history columns, as the engines name them (solvers.history)
QP_STATUS, RELAXED, FINAL, ACTIVE = COLUMN_QP_STATUS, QP_RELAXED, QP_FINAL, COLUMN_ACTIVE
C, VIOL, PENALTY, C_PREDICTIONS = COLUMN_C, COLUMN_VIOL, COLUMN_PENALTY, COLUMN_C_PREDICTIONS

#: ``method=`` -> why its history rule calls a constraint inactive (the warning's words).
_NOT_BINDING_REASONS: dict[str, str] = {
    "sqp": "none of its rows was in the QP active set or violated over the last "
           f"{TAIL_FRACTION:.0%} of the iterations (zero multipliers at the end of training)",
    "lagrangian": "its rows were never violated during training (the Lagrangian term never acted)",
    "penalty": "its penalty was 0 at every step (it never acted)",
    "moving_targets": "the unconstrained pre-trained learner already satisfies it",
}


# --------------------------------------------------------------------------------------
# reading the result
# --------------------------------------------------------------------------------------
def iteration_records(history: History) -> list[dict]:
    """The iteration records of a history (without a closing ``qp_status == "final"`` one)."""
    return [r for r in history.records if r.get(QP_STATUS) != FINAL]


def tail(history: History) -> list[dict]:
    """The last ``TAIL_FRACTION`` of the iteration records (at least one)."""
    records = iteration_records(history)
    return records[-max(1, math.ceil(TAIL_FRACTION * len(records))):] if records else []


def relaxed_steps(result: FitResult) -> int:
    """The number of relaxed SQP steps of a fit (0 for the other engines)."""
    return result.relaxed_steps


def row_blocks(constraints: list) -> list[slice]:
    """The rows of each constraint in the concatenated constraint set."""
    blocks, start = [], 0
    for c in constraints:
        m = int(torch.as_tensor(c.lower).numel())
        blocks.append(slice(start, start + m))
        start += m
    return blocks


def pretraining_violations(history: History, constraints: list, names: list[str]) -> dict[str, float]:
    """Moving Targets: exact training violations of the pre-trained learner (iteration 0), keyed by ``names``."""
    values = torch.tensor(history[0][C_PREDICTIONS], dtype=torch.float64)
    return {name: float(row_violations(values[rows], c.lower, c.upper).sum())
            for name, rows, c in zip(names, row_blocks(constraints), constraints)}


# --------------------------------------------------------------------------------------
# the messages
# --------------------------------------------------------------------------------------
def inactive_by_history(result: FitResult, constraints: list, method: str) -> list[bool]:
    """Per constraint, whether the history rule of ``method`` (:func:`not_binding`) calls it inactive."""
    return [not_binding(method, result.history, index, rows, c)
            for index, (c, rows) in enumerate(zip(constraints, row_blocks(constraints)))]


def constraint_messages(result: FitResult, constraints: list, violations: Mapping[str, float], *, method: str,
                        violation_tol: float | Mapping[str, float], relaxed: int,
                        reference: Mapping[str, float] | None = None,
                        inactive: Sequence[bool] | None = None, noisy_model: bool = False) -> list[str]:
    """The FairnessWarning texts about the constraints: per constraint an unmet or else an inactive
    bound, then relaxed steps among the last iterations.

    ``violations``: exact training violation per constraint; ``relaxed``: the fit's relaxed SQP
    steps; ``reference``: the unconstrained reference model's violations, if trained; ``inactive``:
    :func:`inactive_by_history` where the caller has it already; ``noisy_model``: :func:`unmet_message`'s.
    """
    if not constraints:
        return []
    inactive = inactive_by_history(result, constraints, method) if inactive is None else inactive
    messages = []
    for name, free in zip(violations, inactive):
        tol = tolerance_of(violation_tol, name)
        message = (unmet_message(name, violations[name], tol, relaxed, method, noisy_model)
                   or inactive_message(name, method, free, reference, tol))
        if message:
            messages.append(message)
    message = tail_relaxed_message(result.history)
    if message:
        messages.append(message)
    return messages


def bounds_acted(violations: Mapping[str, float], inactive: Sequence[bool],
                 violation_tol: float | Mapping[str, float], reference: Mapping[str, float] | None = None) -> bool:
    """Whether some bound restricted the model: violated at the end, not inactive by the history rule
    (``inactive``, :func:`inactive_by_history`), or violated by the unconstrained ``reference``
    (``violation_tol``: one number, or one per constraint name)."""
    return any(violations[name] > tolerance_of(violation_tol, name) or not free
               or (reference is not None and reference[name] > tolerance_of(violation_tol, name))
               for name, free in zip(violations, inactive))


def unmet_message(name: str, violation: float, violation_tol: float, relaxed: int, method: str,
                  noisy_model: bool = False) -> str | None:
    """The warning for a constraint violated on the training data at the end, if it is. ``noisy_model``: the
    model changes between training and eval mode (dropout, batch normalisation,
    :func:`solvers.problem.changes_in_eval_mode`), which the advice then names: its steps see the masks' noise
    and the bound is measured on the eval-mode model (a full batch with dropout missed DI >= 0.8 on Adult by
    up to 0.008 where batches of 256 and 1,024 rows met it)."""
    if violation <= violation_tol:
        return None
    steps = (f"; {relaxed} relaxed QP step(s), i.e. iterations whose linearised constraints had no solution"
             if method == "sqp" else "")
    noisy = (" The model's dropout or batch normalisation makes its training steps noisy, and the bound is measured "
             "in eval mode: mini-batches (e.g. batch_size=1024) or the model without dropout usually meet it."
             if noisy_model else "")
    return (f"{name}: violated on the training data at the end of training (exact violation {violation:.3g} > "
            f"{violation_tol:.3g}, the tolerance in its rows' units{steps}). The bound may be infeasible for this "
            f"model and data, or training needs more epochs; see history_.{noisy}")


def inactive_message(name: str, method: str, binding_free: bool, reference: Mapping[str, float] | None,
                     violation_tol: float) -> str | None:
    """The warning for a constraint that did not restrict the model (``binding_free``: the history
    rule held; ``reference``: the reference model's violations or None), if any. None where the
    unconstrained reference violates it: then the bound restricts the model, whatever the history
    rule found (a boosted fit that returned its constant start, whose few last rounds bound nothing).
    """
    if reference is not None and reference[name] > violation_tol and method != "moving_targets":
        return None  # the unconstrained model violates it: the bound restricts whatever the history shows
    reasons = []
    if binding_free:
        reasons.append(not_binding_reason(method))
    # Moving Targets' reference is its pre-training, already the reason above
    if reference is not None and reference[name] <= violation_tol and method != "moving_targets":
        reasons.append(f"the unconstrained reference model satisfies it (violation {reference[name]:.3g})")
    if not reasons:
        return None
    return (f"{name}: inactive constraint - " + "; ".join(reasons) +
            ". The requested bound does not restrict the model at the end of training (it may have steered "
            "earlier steps, so the model can still differ from an unconstrained one).")


def not_binding(method: str, history: History, index: int, rows: slice, constraint: Any) -> bool:
    """The history rule for an inactive constraint (module docstring) at position ``index``, rows ``rows``."""
    lower = constraint.lower.to(torch.float64)
    upper = constraint.upper.to(torch.float64)
    return _NOT_BINDING_RULES[method](history, index, rows, lower, upper)


def returned_its_start(history: History) -> bool:
    """Whether the fit returned its first iterate (the closing record's ``returned`` is the first record's
    iteration): no later one was better, so its last iterations say nothing about what a bound did."""
    closing = history.records[-1] if history.records else {}
    records = iteration_records(history)
    return bool(records) and closing.get(QP_STATUS) == FINAL and closing.get("returned") == records[0].get("iteration")


def returned_tail(history: History) -> list[dict]:
    """:func:`tail` of the iteration records up to the returned one (the closing record's ``returned``; all of
    them where it names none): a fit that returned iterate 88 of 500 is judged at iterate 88, not by its last 50
    iterations, which say nothing about the returned model."""
    closing = history.records[-1] if history.records else {}
    returned = closing.get("returned") if closing.get(QP_STATUS) == FINAL else None
    records = iteration_records(history)
    if returned is not None and not (isinstance(returned, float) and math.isnan(returned)):
        records = [r for r in records if r.get("iteration", -1) <= returned] or records
    return records[-max(1, math.ceil(TAIL_FRACTION * len(records))):] if records else []


def _sqp_not_binding(history: History, index: int, rows: slice, lower: torch.Tensor, upper: torch.Tensor) -> bool:
    """No row in the QP active set and none violated over the last iterations up to the returned one
    (:func:`returned_tail`), of a fit that returned a later iterate than its start (:func:`returned_its_start`)."""
    if returned_its_start(history):
        return False
    last = returned_tail(history)
    active_rows = {int(a[1:]) for r in last for a in r[ACTIVE]}
    if any(i in active_rows for i in range(rows.start, rows.stop)):
        return False
    return all(float(row_violations(torch.tensor(r[C][rows], dtype=torch.float64), lower, upper).sum()) == 0
               for r in last)


# first-order methods: a hinge term that was 0 at every step never changed a step
def _lagrangian_not_binding(history: History, index: int, rows: slice, lower: torch.Tensor,
                            upper: torch.Tensor) -> bool:
    """No row violated (surrogate) at any step."""
    return all(max(r[VIOL][rows], default=0.0) == 0.0 for r in history.records)


def _penalty_not_binding(history: History, index: int, rows: slice, lower: torch.Tensor,
                         upper: torch.Tensor) -> bool:
    """The constraint's penalty term (one per constraint) was 0 at every step."""
    return all(r[PENALTY][index] == 0.0 for r in history.records)


def _moving_targets_not_binding(history: History, index: int, rows: slice, lower: torch.Tensor,
                                upper: torch.Tensor) -> bool:
    """The pre-trained learner (iteration 0) already meets the rows exactly."""
    values = torch.tensor(history[0][C_PREDICTIONS][rows], dtype=torch.float64)
    return float(row_violations(values, lower, upper).sum()) == 0.0


#: ``method=`` -> its history rule for an inactive constraint.
_NOT_BINDING_RULES: dict[str, Callable[[History, int, slice, torch.Tensor, torch.Tensor], bool]] = {
    "sqp": _sqp_not_binding,
    "penalty": _penalty_not_binding,
    "lagrangian": _lagrangian_not_binding,
    "moving_targets": _moving_targets_not_binding,
}


def not_binding_reason(method: str) -> str:
    """Why the history rule calls a constraint of ``method`` inactive (the warning's words)."""
    return _NOT_BINDING_REASONS[method]


def tail_relaxed_message(history: History) -> str | None:
    """The warning for relaxed SQP steps among the last ``TAIL_FRACTION`` of the iterations, if any."""
    last = tail(history)
    tail_relaxed = sum(r.get(QP_STATUS) == RELAXED for r in last)
    if not tail_relaxed:
        return None
    return (f"{tail_relaxed} of the last {len(last)} SQP iterations needed a relaxed QP step (the linearised "
            "constraints had no solution): the bounds are at the edge of what the model can reach on this "
            "data.")


def poor_fit_message(task: str, y: np.ndarray, out: np.ndarray, constrained: bool = False, acted: bool = True,
                     engine_note: str | None = None, *, tightened: bool = False,
                     model_kind: str | None = None) -> str | None:
    """The warning text when the training fit is no better than a constant predictor, else None.

    Regression: training R2 below ``POOR_FIT_R2``. Binary: :func:`solvers.outcome.near_constant`,
    the accuracy of ``out > 0`` not above the majority rate ``m`` by two standard errors
    ``sqrt(m (1 - m) / n)``, or one class on (almost) every row. ``constrained``: trained under
    bounds, which a constant classifier meets, so they may have forced it, unless none of them
    ``acted`` (each was inactive: the advice is then that of an unconstrained fit). ``engine_note``:
    the engine's own finding about the returned model (its training loss not below the best constant
    output's, or no input to split on; :data:`fairopt.training.ENGINE_CONSTANT_NOTE`), which is more
    specific than the rule here: it replaces the advice and makes the warning certain. ``tightened``:
    the bounds were tightened by a held-out ``margin``, which the advice names as the likelier cause.
    ``model_kind``: the estimator's ``model`` (``"linear"``, ``"mlp"``, ``"gbm"``; None for another), which
    decides whether a more flexible model class is advised (:func:`_more_to_work_with`).
    """
    y = np.asarray(y, dtype=np.float64).reshape(-1)
    out = np.asarray(out, dtype=np.float64).reshape(-1)
    if y.size == 0:
        return None
    advice = engine_note or ("Training has not converged or diverged: increase epochs or lr (or see history_); the "
                             "constraints cannot cause this, as a constant predictor satisfies them.")
    if task == "regression":
        total = float(np.sum((y - y.mean()) ** 2))
        if total <= 0:
            return None
        r2 = 1.0 - float(np.sum((y - out) ** 2)) / total if np.isfinite(out).all() else -math.inf
        if r2 < POOR_FIT_R2:
            return (f"training fit worse than a constant predictor: training R2 = {r2:.3g} < {POOR_FIT_R2:g} "
                    f"(R2 0 is predicting the training mean). {advice}")
        if engine_note:
            return f"training fit no better than a constant predictor: training R2 = {r2:.3g}. {advice}"
        return None
    if task == "binary":
        reasons, accuracy = outputs_near_constant(out, y)
        if not reasons and not engine_note:
            return None
        head = (f"near-constant classifier: {'; '.join(reasons)}." if reasons
                else f"classifier no better than a constant predictor (training accuracy {accuracy:.4f}).")
        if engine_note:
            return f"{head} {engine_note}"
        if not constrained:
            return (f"{head} No bound was given: training stopped short (increase epochs or lr, see history_) or "
                    "the inputs say little about the target.")
        if not acted:
            return (f"{head} No bound acted in training (each is reported inactive), so they did not force this: "
                    "training stopped short (increase epochs or lr, see history_) or the inputs say little about "
                    "the target.")
        if tightened:
            return (f"{head} A constant classifier meets every group-rate bound, and the model trained under the "
                    "bounds tightened by the margin, which leaves room for little else (or training stopped short, "
                    "see history_): its fairness says nothing. The margin grows as groups get smaller: give more "
                    "rows or a smaller numeric margin, or loosen the bound.")
        return (f"{head} A constant classifier meets every group-rate bound, so bounds this tight leave room for "
                "little else (or training stopped short, see history_): its fairness says nothing. Loosen the bound "
                f"(a smaller delta, a larger bound), give the model more to work with "
                f"({_more_to_work_with(model_kind)}), or train longer.")
    return None


def _more_to_work_with(model_kind: str | None) -> str:
    """What gives a near-constant classifier under tight bounds more to work with: informative inputs, and
    for the linear model the estimators' more flexible classes (advised to no model that is one already)."""
    if model_kind == "linear":
        return "informative inputs, model='mlp' or model='gbm'"
    return "informative inputs"


#: Added to the near-constant warning of boosted trees under a bound on more than two groups.
BOOSTED_SEVERAL_GROUPS = (
    " Boosted trees under a bound on more than two groups often end at the constant: a round's trees move "
    "the rows of a group only through inputs that separate it, and those of a small group barely move; the "
    "linear model and model='mlp' meet such bounds (docs: Which model?, strict bounds and other groupings).")


def near_constant_reason(out: Any, data: FairData) -> str | None:
    """Why a binary classifier with training outputs ``out`` (logits) is no better than a constant one on
    the rows of ``data`` (:func:`solvers.outcome.outputs_near_constant`), None when it is better or the
    task is not binary: the ``"degenerate"`` status of a model that is not exactly constant."""
    if data.task != "binary":
        return None
    values = torch.as_tensor(out).detach().cpu().numpy()
    reasons, _ = outputs_near_constant(values, data.y.detach().cpu().numpy())
    return "; ".join(reasons) or None


def degenerate_reason(model: nn.Module, data: FairData) -> str | None:
    """Why ``model`` is degenerate on the rows of ``data`` (its outputs constant,
    :func:`fairopt.evaluation.constant_predictions`, or a classifier no better than a constant one,
    :func:`near_constant_reason`), None when it is not: the ``"degenerate"`` status of a fit."""
    out = torch.from_numpy(float64_outputs(model, data.X.detach().cpu().numpy()))
    return constant_predictions(out, data.task) or near_constant_reason(out, data)


def fit_quality_warnings(model: nn.Module, data: FairData, constrained: bool,
                         constraints: Sequence[Any] = (), *, acted: bool = True,
                         engine_note: str | None = None, tightened: bool = False,
                         model_kind: str | None = None) -> list[tuple[type, str]]:
    """``(category, message)`` about the fitted model itself: near-constant, worse than its mean, or
    constant (:func:`poor_fit_message`; ``acted``: some bound restricted the model; ``engine_note``: the
    engine's own constant-predictor finding; ``model_kind``: the estimator's ``model``); for boosted trees
    near the constant under a bound on more than two groups, the advice :data:`BOOSTED_SEVERAL_GROUPS`. One
    warning for a classifier, a :class:`DegenerateModelWarning`: the fit's status is then "degenerate",
    whether the model is exactly constant or only no better than a constant."""
    out = float64_outputs(model, data.X.detach().cpu().numpy())  # one pass over the training rows for both
    poor = poor_fit_message(data.task, data.y.detach().cpu().numpy(), out, constrained, acted, engine_note,
                            tightened=tightened, model_kind=model_kind)
    constant = constant_fit_message(data.task, out)
    if poor and isinstance(model, BoostedScores) and any(getattr(c, "largest_grouping", 0) > 2 for c in constraints):
        poor += BOOSTED_SEVERAL_GROUPS
    if data.task == "binary":  # the near-constant rule covers one class on every row
        return [(DegenerateModelWarning, poor)] if poor else []
    if constant:  # one warning about the model: the constant, with the poor fit's diagnosis as its cause
        y = data.y.detach().cpu().numpy().reshape(-1)
        return [(DegenerateModelWarning, constant_fit_message(data.task, out, cause=poor, y=y))]
    return [(FairnessWarning, poor)] if poor else []


def constant_fit_message(task: str, out: np.ndarray, cause: str | None = None,
                         y: np.ndarray | None = None) -> str | None:
    """The warning text when the outputs are degenerate (:func:`fairopt.evaluation.constant_predictions`
    at threshold 0), else None. ``cause``: a diagnosis that replaces the generic one (the poor fit's,
    :func:`poor_fit_message`); ``y``: the training targets, whose own constancy is then the cause (the
    constant is the exact fit, nothing was lost).
    """
    reason = constant_predictions(np.asarray(out, dtype=np.float64), task, 0.0)
    if reason is None:
        return None
    if y is not None and y.size and float(np.ptp(y)) == 0.0:
        return (f"degenerate model: {reason} on the training data, because every training target is "
                f"{float(y[0]):.6g}: the constant is the exact fit, there is nothing to learn from the inputs, and "
                "its fairness measures are trivially perfect. Check the target column.")
    head = (f"degenerate model: {reason} on the training data. Its fairness measures are trivially perfect "
            "because it ignores its inputs.")
    if cause:
        return f"{head} {cause[0].upper()}{cause[1:]}"
    return (f"{head} Bounds that only a constant model meets, too few epochs or too large a learning rate cause "
            "this: loosen the bounds or change the training settings (see history_).")


def fit_warnings(model: nn.Module, data: FairData, result: FitResult, constraints: list,
                 violations: Mapping[str, float], *, method: str, violation_tol: float, relaxed: int,
                 reference: Mapping[str, float] | None = None, tightened: bool = False,
                 model_kind: str | None = None) -> list[tuple[type, str]]:
    """Every warning of a finished fit as ``(category, message)``: the model first, then the constraints
    (``tightened``: the model trained under the bounds less a ``margin``, which the advice then names;
    ``model_kind``: the estimator's ``model``, :func:`fit_quality_warnings`)."""
    inactive = inactive_by_history(result, constraints, method)
    violation_tol = met_tolerances(constraints, violation_tol)  # per constraint, in its rows' units
    found = fit_quality_warnings(model, data, bool(constraints), constraints,
                                 acted=bounds_acted(violations, inactive, violation_tol, reference),
                                 engine_note=result.info.get(ENGINE_CONSTANT_NOTE), tightened=tightened,
                                 model_kind=model_kind)
    found += [(FairnessWarning, message) for message in constraint_messages(
        result, constraints, violations, method=method, violation_tol=violation_tol, relaxed=relaxed,
        reference=reference, inactive=inactive, noisy_model=changes_in_eval_mode(model))]
    return found
