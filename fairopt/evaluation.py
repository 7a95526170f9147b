"""Evaluation of a trained model: performance, realised fairness and constraint values.

:func:`evaluate` runs the model once on a dataset and returns a flat dict of numbers;
:func:`fairness_report` and :func:`format_report` lay one or several such dicts out as a table.
Fairness of a classifier is measured on hard predictions ``out > threshold``. Two cases are never
reported as "perfectly fair": a ratio whose groups all have a zero rate (0/0: NaN with an
:class:`~fairopt.exceptions.UndefinedMeasureWarning`) and a model that predicts the same for every
row (``"degenerate": True`` with a :class:`~fairopt.exceptions.DegenerateModelWarning`); the
reasons go to ``"notes"``.
"""

from __future__ import annotations

import logging
import math
import re
import warnings
from dataclasses import asdict, dataclass
from typing import Any, Callable, Iterable, Mapping

import numpy as np
import pandas as pd
import torch

from fairopt.exceptions import DegenerateModelWarning, FairnessWarning, UndefinedMeasureWarning
from fairopt.evaluation_fauci import fauci_measures, resolve_combined
from fairopt.measures.distribution import intersection_cells, js_divergence, uf
from fairopt.measures.group import (group_means, python_scalar, ratio_and_difference, undefined_ratio_message,
                                    undefined_ratio_reason)
from fairopt.measures.performance import accuracy, mse, poisson_deviance, poisson_rps, r2, rps
from fairopt.status import DEFINITIONS, MET_TOL, BoundStatus, compared_label, label_of, met_tolerance
from solvers.problem import eval_mode, prediction_outputs, violation

__all__ = ["BOUNDS", "DEGENERATE", "MEASURE_DEFINITIONS", "NOTES", "RealisedMeasure", "bound_statuses",
           "constant_predictions", "constraint_violations", "evaluate", "fairness_report", "format_report",
           "model_violations", "realised_measures"]

logger = logging.getLogger(__name__)

TASKS = ("binary", "regression", "poisson")
GROUP_KINDS = ("binary", "categorical")
#: Key of :func:`evaluate`'s flag for a model that predicts the same for every row.
DEGENERATE = "degenerate"
#: Key of :func:`evaluate`'s reasons, ``{measure: why}``, for NaN measures and a degenerate model.
NOTES = "notes"
#: Key of :func:`evaluate`'s bounded measures, ``{constraint: {label, value, bound, sense, met}}``.
BOUNDS = "bounds"
#: What every measure :func:`format_report` prints means (the key before any ``[feature]``).
MEASURE_DEFINITIONS: dict[str, str] = {
    "rows": "number of rows",
    "accuracy": "share of rows whose hard prediction is the label",
    "rps": "ranked probability score; for two classes the Brier score, mean (p - y)^2 of the probability p",
    "r2": "coefficient of determination, 1 - (squared error) / (squared deviation from the mean)",
    "mse": "mean squared error",
    "deviance": "mean Poisson unit deviance",
    "balance": "predicted over observed total (claims): exposure x rate summed over the rows / counts summed; 1 "
               "is a model whose overall level matches the data (a bound can lower it)",
    "di_ratio": "ratio of the smallest to the largest group mean of the predictions (positive rate for a "
                "classifier): disparate impact, 1 is parity",
    "dp_difference": "largest minus smallest group mean of the predictions: demographic-parity difference, 0 is "
                     "parity",
    "uf": "demographic unfairness, Var(E[prediction | cell]) / Var(prediction) over the cells of all sensitive "
          "features, 0 is parity",
    "js_divergence": "Jensen-Shannon divergence of the prediction distributions of those cells, 0 is parity",
    "wdp": "FaUCI weighted demographic parity, the mean over groups of |P(yhat=1 | group) - P(yhat=1)|, 0 is "
           "parity",
    "wdi": "FaUCI weighted disparate impact, the mean over groups of min(r, 1/r), r the group's positive rate "
           "over the rest's, 1 is parity ('weighted' over groups: rows count alike, sample weights or not)",
    "weo": "FaUCI weighted equalized odds, the weighted mean over groups of the sum of their TPR gap and FPR gap to "
           "all rows' ([FU] eq. 10, in [0, 2]; a group without rows of a label adds 0 for it), 0 is parity",
    "gdp": "wdp over 10 bins of a continuous feature, weighted by bin size",
    "gdi": "wdi over 10 bins of a continuous feature, weighted by bin size",
    "geo": "weo over 10 bins of a continuous feature, weighted by bin size",
    "degenerate": "True when the model predicts the same for every row (its fairness is then trivial)",
}


def _forward(model: Callable[[torch.Tensor], torch.Tensor], data: Any) -> torch.Tensor:
    """``model(data.X)`` without autograd, in eval mode, as a flat (n,) finite tensor."""
    if not callable(model):
        raise ValueError(f"model: expected a callable (e.g. torch.nn.Module), got {type(model).__name__}")
    n = len(data.y)
    with eval_mode(model), torch.no_grad():
        out = prediction_outputs(model, data.X)
    if not isinstance(out, torch.Tensor):
        raise ValueError(f"model: expected a tensor output, got {type(out).__name__}")
    if out.numel() != n:
        raise ValueError(f"model: expected one output per row ({n}), got shape {tuple(out.shape)}")
    out = out.reshape(-1)
    if not bool(torch.isfinite(out).all()):
        raise ValueError("model: produced non-finite outputs (NaN/inf)")
    return out


def _check_data(data: Any) -> str:
    """The task of ``data``, after checking the contract fields evaluate() reads."""
    for field in ("X", "y", "task"):
        if not hasattr(data, field):
            raise ValueError(f"data: missing field {field!r} of the FairData contract")
    if data.task not in TASKS:
        raise ValueError(f"data: task must be one of {TASKS}, got {data.task!r}")
    if len(data.y) == 0:
        raise ValueError("data: has 0 rows")
    return data.task


def _response(out: torch.Tensor, task: str) -> np.ndarray:
    """Predictions on the response scale: probability, prediction or rate per unit exposure."""
    o = out.detach().to(torch.float64)
    if task == "binary":
        o = torch.sigmoid(o)
    elif task == "poisson":
        o = torch.exp(o)
    return o.cpu().numpy()


def _hard(out: torch.Tensor, threshold: float) -> np.ndarray:
    """Hard 0/1 predictions of the binary task: ``out > threshold``."""
    return (out.detach().cpu().numpy() > threshold).astype(float)


def _exposure(data: Any) -> np.ndarray | None:
    """``data.exposure`` as a numpy array, or None."""
    exposure = getattr(data, "exposure", None)
    return None if exposure is None else np.asarray(torch.as_tensor(exposure).detach().cpu(), dtype=float)


def _performance(out: torch.Tensor, data: Any, task: str, threshold: float) -> dict[str, float]:
    """Task-specific performance keys."""
    y = data.y.detach().cpu().numpy() if isinstance(data.y, torch.Tensor) else np.asarray(data.y)
    response = _response(out, task)
    weights = _row_weights(data)
    if task == "binary":
        return {"accuracy": accuracy(y, _hard(out, threshold), weights), "rps": rps(y, response)}
    if task == "regression":
        return {"r2": r2(y, response, weights), "mse": mse(y, response, weights)}
    exposure = _exposure(data)
    mu = response if exposure is None else exposure * response
    observed = float(np.sum(y))
    return {"deviance": poisson_deviance(y, mu), "rps": poisson_rps(y, response, exposure=exposure),
            "balance": float(np.sum(mu)) / observed if observed > 0 else math.nan}


def _row_weights(data: Any) -> np.ndarray | None:
    """The data's row weights as float64 (None when unweighted): they weight accuracy, R2, MSE and the group
    means of ``di_ratio`` / ``dp_difference``."""
    weights = getattr(data, "weights", None)
    return None if weights is None else np.asarray(torch.as_tensor(weights).detach().cpu(), dtype=np.float64)


def _fairness_values(out: torch.Tensor, task: str, threshold: float) -> np.ndarray:
    """Hard 0/1 predictions (binary task) or response-scale predictions: what group fairness compares."""
    return _hard(out, threshold) if task == "binary" else _response(out, task)


def _group_fairness(values: np.ndarray, sensitive: Any, name: str, task: str,
                    weights: np.ndarray | None = None, levels: list | None = None) -> tuple[float, float, str | None]:
    """``(di_ratio, dp_difference, note)`` across the groups of one feature.

    ``di_ratio = min_g m_g / max_g m_g`` and ``dp_difference = max_g m_g - min_g m_g`` with ``m_g``
    the group means (weighted by ``weights`` when given); NaN for a single group, ``di_ratio`` NaN for a
    negative mean or when every mean is 0 (0/0, with a warning; ``note`` says why).
    """
    by_group = group_means(values, sensitive, weights)
    means = np.array(list(by_group.values()))
    if means.size < 2:
        warnings.warn(
            f"sensitive feature {name!r} has a single group in this data; di_ratio and "
            "dp_difference are undefined (NaN)",
            FairnessWarning,
            stacklevel=4,
        )
        return math.nan, math.nan, None
    ratio, difference = (float(v) for v in ratio_and_difference(means))
    note = None
    def level(g: Any) -> Any:  # the user's label of an encoded group
        code = python_scalar(g)
        return levels[code] if levels and isinstance(code, int) and 0 <= code < len(levels) else code

    weightless = [level(g) for g, m in by_group.items() if np.isnan(m)]
    if weightless:
        note = (f"group(s) {weightless} of {name!r} have total weight 0, so their mean and the di_ratio / "
                "dp_difference are undefined (NaN)")
        warnings.warn(f"di_ratio[{name}]: {note}", UndefinedMeasureWarning, stacklevel=4)
    elif means.min() >= 0 and means.max() == 0:
        what = "positive predictions" if task == "binary" else "a non-zero mean prediction"
        note = undefined_ratio_reason(what)
        warnings.warn(undefined_ratio_message(f"di_ratio[{name}]", what), UndefinedMeasureWarning, stacklevel=4)
    return ratio, difference, note


def _sensitive_items(data: Any) -> list[tuple[str, Any, str]]:
    """``(name, values, kind)`` of every sensitive feature, in the data's order."""
    sensitive = getattr(data, "sensitive", None) or {}
    kinds = getattr(data, "sensitive_kinds", None) or {}
    missing = [k for k in sensitive if k not in kinds]
    if missing:
        raise ValueError(f"data: sensitive feature {missing[0]!r} has no entry in sensitive_kinds")
    return [(k, v, kinds[k]) for k, v in sensitive.items()]


def _fairness(out: torch.Tensor, data: Any, task: str, threshold: float,
              notes: dict[str, str]) -> dict[str, float]:
    """di_ratio / dp_difference per binary or categorical feature, and UF / JS over all cells."""
    values = _fairness_values(out, task, threshold)
    items = _sensitive_items(data)
    weights = _row_weights(data)
    results: dict[str, float] = {}
    for name, s, kind in items:
        if kind not in GROUP_KINDS:
            continue
        ratio, diff, note = _group_fairness(values, s, name, task, weights,
                                            (getattr(data, "sensitive_levels", None) or {}).get(name))
        if "di_ratio" not in results:
            results["di_ratio"], results["dp_difference"] = ratio, diff
            if note:
                notes["di_ratio"] = note
        results[f"di_ratio[{name}]"], results[f"dp_difference[{name}]"] = ratio, diff
        if note:
            notes[f"di_ratio[{name}]"] = note
    if items:
        results.update(_distribution_fairness(_response(out, task), items))
    return results


def constant_predictions(out: Any, task: str, threshold: float = 0.0) -> str | None:
    """Why the model outputs ``out`` are degenerate (the same prediction for every row), or None.

    Binary task: every hard prediction ``out > threshold`` is the same class. Otherwise the
    response-scale predictions have zero spread up to float32 resolution,
    ``max - min <= eps32 * max(1, max |p|)``: the model computes in float32, so smaller differences
    are rounding.
    """
    o = torch.as_tensor(out).detach().reshape(-1).to(torch.float64).cpu()
    if o.numel() == 0:
        return None
    if task == "binary":
        hard = o > threshold
        if bool(hard.all()) or not bool(hard.any()):
            label = 1 if bool(hard[0]) else 0
            return (f"every row is predicted class {label} (out {'>' if label else '<='} {threshold:g} for all "
                    f"{o.numel()} rows): a constant classifier")
        return None
    response = _response(o, task)
    spread = float(response.max() - response.min())
    if spread <= np.finfo(np.float32).eps * max(1.0, float(np.abs(response).max())):
        return (f"every row gets the prediction {float(response[0]):.6g} (spread {spread:.3g} over {o.numel()} "
                "rows, within float32 resolution): a constant predictor")
    return None


def _distribution_fairness(response: np.ndarray, items: list[tuple[str, Any, str]]) -> dict[str, float]:
    """UF and JS divergence of the predictions across all intersectional cells (continuous features in 3
    quantile bins, [DC] sec 5.1); NaN for a single cell.
    """
    cells = intersection_cells(*[v for _, v, _ in items], kinds=[k for _, _, k in items])
    if cells.max() < 1:
        logger.debug("evaluate: a single intersectional cell; UF and JS divergence are undefined")
        return {"uf": math.nan, "js_divergence": math.nan}
    return {"uf": uf(response, cells), "js_divergence": js_divergence(response, cells)}


def _unique_name(name: str, taken: Mapping[str, Any]) -> str:
    """``name``, or ``name#2``, ``name#3``, ... when already taken."""
    if name not in taken:
        return name
    k = 2
    while f"{name}#{k}" in taken:
        k += 1
    return f"{name}#{k}"


def _check_protocol(c: Any) -> None:
    """A ValueError naming the first field of the Constraint protocol ``c`` lacks."""
    for field in ("name", "exact", "lower", "upper"):
        try:
            getattr(c, field)
        except AttributeError as error:  # a property's own reason (e.g. rows not sized before setup) is kept
            reason = str(error) if "setup" in str(error) else "solvers.problem.Constraint protocol"
            raise ValueError(f"constraints: {c!r} has no {field!r} ({reason})") from None


def _exact_violation(out: torch.Tensor, data: Any, c: Any) -> tuple[torch.Tensor, float]:
    """The exact row values of one constraint (float64, CPU) and their violation
    ``sum_i max(c_i - u_i, 0) + max(l_i - c_i, 0)``.
    """
    with torch.no_grad():
        values = torch.as_tensor(c.exact(out, data)).detach().reshape(-1).to(torch.float64).cpu()
    lower = torch.as_tensor(c.lower, dtype=torch.float64).reshape(-1)
    upper = torch.as_tensor(c.upper, dtype=torch.float64).reshape(-1)
    if not (values.shape == lower.shape == upper.shape):
        raise ValueError(
            f"constraints: {c.name!r} returned {values.numel()} exact values for "
            f"{lower.numel()} lower / {upper.numel()} upper bounds (was setup(data) called?)"
        )
    return values, float(violation(values, lower, upper))


def _constraint_values(out: torch.Tensor, data: Any, constraints: Iterable[Any]) -> dict[str, Any]:
    """``<name>`` -> exact row values, ``<name>.violation`` -> total violation, per constraint."""
    results: dict[str, Any] = {}
    total = 0.0
    for c in constraints:
        _check_protocol(c)
        values, v = _exact_violation(out, data, c)
        key = _unique_name(str(c.name), results)
        results[key] = values.tolist()
        results[f"{key}.violation"] = v
        total += v
    if results:
        results["violation"] = total
    return results


def bound_statuses(out: torch.Tensor, data: Any, constraints: Iterable[Any],
                   tol: float = MET_TOL) -> list[BoundStatus]:
    """The realised measure beside the bound of every constraint that declares its measure, in
    constraint order; the value NaN where the measure is a ratio of rates that are all 0 (``undefined``: 0/0,
    whose rows are met by convention).

    ``met`` when the exact violation of the rows is at most the constraint's tolerance
    (:func:`fairopt.status.met_tolerance` of ``tol``) and, for a bound from below on a ratio
    (``value >= delta``), the ratio itself is at least ``delta - tol``: the rows ``delta P_ref - P_g <= 0``
    are in rate units, and a row violation ``v`` within the tolerance is a ratio short of ``delta`` by
    ``v / P_ref``, 0.02 for ``v = 1e-3`` at a 5% reference rate (a four-fifths audit at a low selection rate
    must not read 0.784 as met).
    """
    measured = [c for c in constraints if callable(getattr(c, "realised", None))]
    statuses = []
    for c, measure in zip(measured, realised_measures(out, data, measured)):
        bound = getattr(c, "delta" if measure.sense == "lower" else "bound", None)
        violation = _exact_violation(out, data, c)[1]
        value = measure.value
        undefined = math.isnan(value) and _zero_over_zero(out, data, c)
        pairwise = getattr(c, "pairwise_realised", None)
        statuses.append(BoundStatus(name=str(c.name), label=label_of(c, getattr(data, "task", None)), value=value,
                                    bound=None if bound is None else float(bound), sense=measure.sense,
                                    met=violation <= met_tolerance(c, tol) and _ratio_within(value, bound,
                                                                                             measure.sense, tol),
                                    row_violation=violation,
                                    undefined=undefined,
                                    pairwise=pairwise(out, data) if callable(pairwise) else None))
    return statuses


def _ratio_within(value: float, bound: Any, sense: str, tol: float) -> bool:
    """Whether a measure bounded from below (a ratio ``>= delta``) is within ``tol`` of its bound on its own scale;
    True for a bound from above (its value is in the rows' units), an unknown bound or an undefined value."""
    if sense != "lower" or bound is None or not math.isfinite(value):
        return True
    return value >= float(bound) - tol


def _zero_over_zero(out: torch.Tensor, data: Any, c: Any) -> bool:
    """Whether ``c`` is a ratio of group rates that are all zero on ``out`` (every compared group without a
    positive prediction): its realised value, 1 by the rows' convention, is then undefined as a measure."""
    if getattr(c, "rate_form", None) != "ratio" or not callable(getattr(c, "partial_sums", None)):
        return False
    with torch.no_grad():
        sums, counts = c.partial_sums(out, data, exact=True)
    present = torch.as_tensor(counts).reshape(-1) > 0
    return bool(present.any()) and bool((torch.as_tensor(sums).reshape(-1)[present] == 0).all())


def met_tolerances(constraints: Iterable[Any], tol: float) -> dict[str, float]:
    """:func:`fairopt.status.met_tolerance` of each constraint, keyed like :func:`constraint_violations`."""
    result: dict[str, float] = {}
    for c in constraints:
        result[_unique_name(str(c.name), result)] = met_tolerance(c, tol)
    return result


def constraint_violations(out: torch.Tensor, data: Any, constraints: Iterable[Any]) -> dict[str, float]:
    """Exact total violation ``sum_i max(c_i - u_i, 0) + max(l_i - c_i, 0)`` of each constraint on the
    outputs ``out``, keyed by name (``name#2`` for a repeat): :func:`evaluate`'s ``.violation`` entries.
    """
    result: dict[str, float] = {}
    for c in constraints:
        _, v = _exact_violation(out, data, c)
        result[_unique_name(str(c.name), result)] = v
    return result


@dataclass(frozen=True)
class RealisedMeasure:
    """The exact value of the measure one constraint's bound argument bounds.

    Attributes
    ----------
    name : str
        The constraint's (or penalty's) name.
    measure : str
        What is measured, e.g. ``"disparate_impact[sex]"``, qualified as the estimators' status labels qualify
        it (:func:`fairopt.status.compared_label`): ``"disparate_impact[race, each vs rest]"`` where the
        constraint compares each group with the rest of the rows, ``"disparate_impact[sex, share of predictions
        > 0]"`` for a rate of a regression's predictions.
    sense : {"lower", "upper"}
        ``"lower"``: met when ``value >= bound`` (a ratio ``delta``); ``"upper"``: ``value <= bound``.
    value : float
        The measure on the data, on the scale of the bound argument; NaN where it is undefined (a ratio of
        rates that are all 0).
    """

    name: str
    measure: str
    sense: str
    value: float


def realised_measures(out: torch.Tensor, data: Any, constraints: Iterable[Any]) -> list[RealisedMeasure]:
    """The realised measure of every constraint (or penalty) that declares one.

    Each object's own ``realised(out, data)``, ``bound_sense`` and ``measure``
    (:class:`fairopt.constraints.base.BaseConstraint`): the one mapping from a bound to what it
    bounds. Objects without ``realised`` are left out. A ratio of group rates that are all 0 (no compared
    group has a positive prediction: 0/0, which the constraint's rows meet by convention) is NaN: it is
    undefined, not perfectly fair (:class:`fairopt.exceptions.UndefinedMeasureWarning`).

    Parameters
    ----------
    out : Tensor (n,)
        Model outputs on ``data`` (logits for a classifier).
    data : FairData or batch
    constraints : iterable
        Constraints and/or penalties, set up on the training data.

    Raises
    ------
    ValueError
        A ``bound_sense`` other than "lower" or "upper".
    """
    measures = []
    for c in constraints:
        realised = getattr(c, "realised", None)
        if not callable(realised):
            continue
        sense = getattr(c, "bound_sense", "upper")
        if sense not in ("lower", "upper"):
            raise ValueError(f"constraints: {c.name!r} has bound_sense {sense!r}; expected 'lower' or 'upper'")
        measure = compared_label(c, str(getattr(c, "measure", c.name)), getattr(data, "task", None))
        value = math.nan if _zero_over_zero(out, data, c) else float(realised(out, data))
        measures.append(RealisedMeasure(name=str(c.name), measure=measure, sense=sense, value=value))
    return measures


def model_violations(model: Callable[[torch.Tensor], torch.Tensor], data: Any,
                     constraints: Iterable[Any]) -> dict[str, float]:
    """:func:`constraint_violations` of ``model``'s outputs on ``data``, on the path the estimators predict
    through (:func:`solvers.problem.prediction_outputs` for a module)."""
    with eval_mode(model), torch.no_grad():
        out = prediction_outputs(model, data.X)
    return constraint_violations(out.reshape(-1), data, constraints)


def evaluate(model: Callable[[torch.Tensor], torch.Tensor], data: Any, constraints: Iterable[Any] = (),
             threshold: float = 0.0, *, fauci_combined: Any = None) -> dict[str, Any]:
    """Performance, realised fairness and exact constraint values of ``model`` on ``data``.

    The model runs once, ``out = model(data.X)``: a logit (binary), the prediction (regression) or
    the log-rate (poisson, ``mu = exposure * exp(out)``). The data's row weights weight the constraint
    rows, ``accuracy``, ``r2``, ``mse`` and the group means of ``di_ratio`` / ``dp_difference``
    (``sum_g w_i v_i / sum_g w_i``); the other measures (``rps``, ``uf``, ``js_divergence``, FaUCI, the
    Poisson ones) count rows unweighted.

    Parameters
    ----------
    model : callable
        ``torch.nn.Module`` or function mapping ``X`` (n, p) to ``out`` (n,) or (n, 1).
    data : FairData or batch
        Reads ``X``, ``y``, ``task``, ``sensitive``, ``sensitive_kinds``, ``exposure``.
    constraints : iterable of Constraint
        Constraints already set up (``setup(data)`` is not called here).
    threshold : float
        Hard prediction of the binary task: ``out > threshold``.
    fauci_combined : None, True, list of names or list of lists of names
        Binary task: FaUCI metrics of combined attributes ([FU] sec 3.4) over the cartesian product
        of the listed features' groups; True: all sensitive features
        (:func:`fairopt.evaluation_fauci.resolve_combined`).

    Returns
    -------
    dict
        - ``"n"``; binary: ``"accuracy"`` and ``"rps"`` (Brier score of ``sigmoid(out)``, [DC]
          App. E.2); regression: ``"r2"``, ``"mse"``; poisson: ``"deviance"``, ``"rps"`` and ``"balance"``
          (``sum mu / sum y``, the predicted over the observed total count).
        - per binary/categorical feature ``f``: ``"di_ratio[f]" = min_g m_g / max_g m_g`` and
          ``"dp_difference[f]" = max_g m_g - min_g m_g`` over group means ``m_g`` of the hard
          predictions (binary) or response-scale predictions; ``"di_ratio"``/``"dp_difference"``
          repeat the first feature.
        - ``"uf"`` and ``"js_divergence"`` ([DC] eq. 4.1, 4.4) across the intersections of all
          sensitive features.
        - binary: the FaUCI metrics ([FU] eq. 5-11, :mod:`fairopt.evaluation_fauci`) ``wdp``, ``wdi``,
          ``weo`` per group feature, ``gdp``, ``gdi``, ``geo`` per continuous one.
        - per constraint: ``name`` -> exact row values, ``name.violation`` -> total violation;
          ``"violation"``: their sum.
        - ``"degenerate"`` (:func:`constant_predictions`), ``"bounds"`` (:func:`bound_statuses`
          by constraint) and ``"notes"`` (``{measure: reason}`` for NaN ratios, groups of total weight 0,
          groups a bound leaves out for want of rows, e.g. without ``y = 1`` for equal opportunity, and a
          degenerate model).

    Warns
    -----
    UndefinedMeasureWarning
        A ``di_ratio`` is NaN because every group rate is 0.
    DegenerateModelWarning
        The model predicts the same for every row.
    """
    task = _check_data(data)
    combined = _check_options(data, task, threshold, fauci_combined)
    out = _forward(model, data)
    notes: dict[str, str] = {}
    results: dict[str, Any] = {"n": int(out.numel())}
    results.update(_performance(out, data, task, float(threshold)))
    results.update(_fairness(out, data, task, float(threshold), notes))
    if task == "binary":
        labels = np.asarray(torch.as_tensor(data.y).detach().cpu(), dtype=float)
        results.update(fauci_measures(_hard(out, float(threshold)), labels, _sensitive_items(data), combined, notes))
    results[DEGENERATE] = _degenerate(out, task, float(threshold), notes)
    constraints = list(constraints)
    results.update(_constraint_values(out, data, constraints))
    results[BOUNDS] = _bounds(out, data, constraints, notes)
    results[NOTES] = notes
    return results


def _check_options(data: Any, task: str, threshold: Any, fauci_combined: Any) -> list[tuple[str, ...]]:
    """A finite ``threshold``; the combined FaUCI attributes (binary task only), resolved."""
    if isinstance(threshold, bool) or not isinstance(threshold, (int, float)) or not math.isfinite(threshold):
        raise ValueError(f"threshold: expected a finite number, got {threshold!r}")
    combined = resolve_combined(fauci_combined, [name for name, _, _ in _sensitive_items(data)])
    if combined and task != "binary":
        raise ValueError(f"fauci_combined: the FaUCI metrics need a binary classifier, the task is {task!r}")
    return combined


def _degenerate(out: torch.Tensor, task: str, threshold: float, notes: dict[str, str]) -> bool:
    """Whether the model predicts the same for every row; if so a note and a DegenerateModelWarning."""
    reason = constant_predictions(out, task, threshold)
    if reason:
        notes[DEGENERATE] = f"{reason}; its fairness measures are trivially perfect"
        warnings.warn(f"degenerate model: {notes[DEGENERATE]}", DegenerateModelWarning, stacklevel=3)
    return reason is not None


#: What no compared group has when a bound's ratio measure is 0/0.
_UNDEFINED_BOUND = "positive predictions (outputs above the constraint's threshold)"


def _bounds(out: torch.Tensor, data: Any, constraints: list, notes: dict[str, str]) -> dict[str, dict[str, Any]]:
    """The ``"bounds"`` entry of :func:`evaluate`: the BoundStatus fields per constraint with a measure; an
    undefined one (0/0) is NaN, with its reason in ``notes`` under ``bounds[name]`` and an
    :class:`~fairopt.exceptions.UndefinedMeasureWarning`."""
    keys: dict[str, Any] = {}
    for c in constraints:
        keys[_unique_name(str(c.name), keys)] = c
    measured = [key for key, c in keys.items() if callable(getattr(c, "realised", None))]
    statuses = bound_statuses(out, data, [keys[key] for key in measured])
    for key, status in zip(measured, statuses):
        empty = keys[key].sides_without_rows(data) if callable(getattr(keys[key], "sides_without_rows", None)) else []
        if empty:
            notes[f"{BOUNDS}[{key}]"] = (f"{', '.join(empty)}: no rows (or no weight) on these rows, left out; the "
                                         "measure compares the other groups only")
            warnings.warn(f"{status.label} (bounds[{key}]): {notes[f'{BOUNDS}[{key}]']}", FairnessWarning,
                          stacklevel=4)
        if status.undefined:
            notes[f"{BOUNDS}[{key}]"] = undefined_ratio_reason(_UNDEFINED_BOUND)
            warnings.warn(undefined_ratio_message(f"{status.label} (bounds[{key}])",
                                                  _UNDEFINED_BOUND),
                          UndefinedMeasureWarning, stacklevel=4)
    return {key: asdict(status) for key, status in zip(measured, statuses)}


def _as_runs(results: Mapping[str, Any]) -> dict[str, Mapping[str, Any]]:
    """``{column name: evaluate() dict}`` from one evaluate() dict or a mapping of them."""
    if not isinstance(results, Mapping) or not results:
        raise ValueError(f"results: expected an evaluate() dict or a non-empty mapping of them, got {results!r}")
    # the "notes" of one evaluate() dict is a mapping, not a run
    nested = [isinstance(v, Mapping) for k, v in results.items()
              if not (k == NOTES and _is_notes(v)) and not (k == BOUNDS and _is_bounds(v))]
    if all(nested):
        return {str(k): v for k, v in results.items()}
    if any(nested):
        raise ValueError("results: mixes evaluate() entries with nested dicts")
    return {"value": results}


def _is_bounds(value: Any) -> bool:
    """Whether ``value`` is the ``"bounds"`` entry of an evaluate() dict (a dict per constraint)."""
    return isinstance(value, Mapping) and all(isinstance(v, Mapping) and "label" in v for v in value.values())


def _is_notes(value: Any) -> bool:
    """Whether ``value`` is the ``"notes"`` entry of an evaluate() dict (text by measure)."""
    return isinstance(value, Mapping) and all(isinstance(v, str) for v in value.values())


def _flatten(run: Mapping[str, Any]) -> dict[str, float]:
    """One number per row: list entries become ``name[i]``, ``"degenerate"`` 1.0 or 0.0, notes left out."""
    flat: dict[str, float] = {}
    for key, value in run.items():
        if (key == NOTES and _is_notes(value)) or (key == BOUNDS and _is_bounds(value)):
            continue
        if isinstance(value, (list, tuple, np.ndarray, torch.Tensor)):
            for i, v in enumerate(np.asarray(value, dtype=float).reshape(-1)):
                flat[f"{key}[{i}]"] = float(v)
        else:
            flat[key] = float(value)
    return flat


def fairness_report(results: Mapping[str, Any]) -> pd.DataFrame:
    """A table of one or several :func:`evaluate` results.

    Parameters
    ----------
    results : dict
        One evaluate() dict (column ``"value"``) or a mapping of them, e.g.
        ``{"train": evaluate(m, train), "test": evaluate(m, test)}``.

    Returns
    -------
    pandas.DataFrame
        One row per measure (constraint rows expanded to ``name[i]``), one float column per run,
        NaN where a run lacks a measure; ``degenerate`` is 1.0 or 0.0. ``table.attrs["notes"]``:
        ``{run: {measure: reason}}``.

    Warns
    -----
    DegenerateModelWarning
        Naming the runs whose model is degenerate.
    """
    chosen = _as_runs(results)
    runs = {name: _flatten(run) for name, run in chosen.items()}
    table = pd.DataFrame(runs, dtype=float)
    notes = {name: dict(run[NOTES]) for name, run in chosen.items() if _is_notes(run.get(NOTES)) and run[NOTES]}
    table.attrs["notes"] = notes
    degenerate = [name for name, run in chosen.items() if run.get(DEGENERATE) in (True, 1.0)]
    if degenerate:
        warnings.warn(f"fairness_report: the model of run(s) {degenerate} predicts the same for every row "
                      "(degenerate = 1); their fairness measures are trivially perfect and mean nothing",
                      DegenerateModelWarning, stacklevel=2)
    return table


def format_report(results: Mapping[str, Any], digits: int = 4) -> str:
    """:func:`fairness_report` as fixed-width text, in the user's terms.

    Each measure is printed once (the feature-less ``di_ratio``/``dp_difference`` and a ``wdi[f]``
    equal to ``di_ratio[f]`` are left out); a constraint that declares its measure is one row,
    ``DI[sex] (bound >= 0.800)``, with ``unmet`` where violated. Under the table: what each row means
    (:data:`MEASURE_DEFINITIONS`, :data:`fairopt.status.DEFINITIONS`) and the runs' notes.
    """
    if isinstance(digits, bool) or not isinstance(digits, int) or digits < 1:
        raise ValueError(f"digits: expected a positive integer, got {digits!r}")
    runs = _as_runs(results)
    table = fairness_report(results)
    bounds = {run: (r.get(BOUNDS) if _is_bounds(r.get(BOUNDS)) else {}) for run, r in runs.items()}
    measured = list(dict.fromkeys(key for b in bounds.values() for key in b))
    shown = [row for row in table.index if not _left_out(str(row), table, measured, bounds)]
    rows: dict[str, list[str]] = {}
    for row in shown:
        values = table.loc[row]
        if row == DEGENERATE:
            rows[row] = ["nan" if pd.isna(v) else str(bool(v)) for v in values]
        else:
            fmt = "{:.0f}" if row == "n" else f"{{:.{digits}f}}"
            rows["rows" if row == "n" else str(row)] = ["nan" if pd.isna(v) else fmt.format(v) for v in values]
    labels: list[str] = []
    for key in measured:
        first = next(b[key] for b in bounds.values() if key in b)
        status = BoundStatus(**first)
        label = f"{status.label} ({status.bound_text})"
        labels.append(status.label)
        rows[label] = [_bound_value(b[key]["value"], status.bound, digits) + ("" if b[key]["met"] else " unmet")
                       if key in b else "nan" for b in bounds.values()]
    text = pd.DataFrame.from_dict(rows, orient="index", columns=list(table.columns)).to_string()
    lines = [f"{run}: {measure}: {reason}" for run, notes in table.attrs.get("notes", {}).items()
             for measure, reason in notes.items()]
    return (text + "\nwhat the rows mean:\n" + "\n".join(_definitions(list(rows), labels))
            + ("\nnotes:\n" + "\n".join(lines) if lines else ""))


def _bound_value(value: float, bound: float | None, digits: int) -> str:
    """A bounded measure for :func:`format_report`: ``digits`` decimals, or ``digits`` significant digits
    beside a bound below 0.01 (a distance covariance of 0.000137 under 0.0001 printed as 0.0001 looked met)."""
    small = bound is not None and 0 < abs(bound) < 0.01
    return f"{value:.{digits}g}" if small else f"{value:.{digits}f}"


#: Realised measures of evaluate() that a constraint's row repeats, by the constraint's short name.
_SAME_MEASURE = {"di_ratio": "DI", "dp_difference": "DP"}


def _left_out(row: str, table: pd.DataFrame, measured: list[str], bounds: Mapping[str, Mapping]) -> bool:
    """Whether :func:`format_report` leaves a row out (printed elsewhere or twice)."""
    if row in ("di_ratio", "dp_difference") and any(str(r).startswith("di_ratio[") for r in table.index):
        return True
    base, _, feature = row.partition("[")
    if base in _SAME_MEASURE and feature:  # e.g. di_ratio[sex] beside the row of a DI[sex] constraint
        label = f"{_SAME_MEASURE[base]}[{feature}"
        for key in measured:
            mine = [b.get(key) for b in bounds.values()]
            if all(m is not None and m["label"] == label for m in mine) and np.allclose(
                    [m["value"] for m in mine], table.loc[row].to_numpy(float), rtol=0.0, atol=1e-9, equal_nan=True):
                return True
    match = re.fullmatch(r"wdi\[(.+)\]", row)
    if match and f"di_ratio[{match.group(1)}]" in table.index:
        a, b = table.loc[row].to_numpy(float), table.loc[f"di_ratio[{match.group(1)}]"].to_numpy(float)
        if np.all((np.isnan(a) & np.isnan(b)) | (np.abs(a - b) <= 1e-12)):
            return True
    for key in measured:  # the raw rows and violations of a constraint shown by its measure
        if row == f"{key}.violation" or re.fullmatch(re.escape(key) + r"\[\d+\]", row):
            return True
    keys = {str(r)[:-len(".violation")] for r in table.index if str(r).endswith(".violation")}
    return row == "violation" and bool(keys) and keys <= set(measured)


def _definitions(rows: list[str], labels: list[str]) -> list[str]:
    """One line per kind of row printed: what it measures."""
    lines, seen = [], set()
    for row in rows:
        base = row.split("[")[0].split(" (")[0]
        if base.endswith(".violation") or base == "violation":
            base, text = "violation", ("total exact violation of a constraint's rows, sum of max(c - upper, 0) + "
                                       "max(lower - c, 0)")
        elif base in MEASURE_DEFINITIONS:
            text = MEASURE_DEFINITIONS[base]
        elif base in DEFINITIONS:
            text = f"{DEFINITIONS[base]}; the constraint's measure beside its bound, 'unmet' where it does not hold"
        elif row.split("[")[0] in {label.split("[")[0] for label in labels}:
            text = "the constraint's measure beside its bound, 'unmet' where it does not hold"
        else:
            continue
        if base not in seen:
            seen.add(base)
            lines.append(f"  {base}: {text}")
    return lines
