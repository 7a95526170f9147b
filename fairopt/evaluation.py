"""Evaluation of a trained model: performance, realised fairness and constraint values.

:func:`evaluate` runs the model once on a dataset (the FairData contract: ``X``, ``y``,
``task``, ``sensitive``, ``sensitive_kinds``, ``exposure``) and returns a flat dict of
numbers; :func:`fairness_report` and :func:`format_report` lay one or several such dicts
(e.g. ``{"train": ..., "test": ...}``) out as a table (history -> evaluation with the exact measures -> report).

Realised fairness is measured on hard predictions for classification (``out >
threshold`` on logits), group to group.
"""

from __future__ import annotations

import logging
import math
import warnings
from typing import Any, Callable, Iterable, Mapping

import numpy as np
import pandas as pd
import torch

from fairopt.exceptions import FairnessWarning
from fairopt.measures.distribution import intersection_cells, js_divergence, uf
from fairopt.measures.group import group_means, ratio_of_extremes
from fairopt.measures.performance import accuracy, mse, poisson_deviance, poisson_rps, r2, rps
from solvers.problem import violation

__all__ = ["constraint_violations", "evaluate", "fairness_report", "format_report"]

logger = logging.getLogger(__name__)

TASKS = ("binary", "regression", "poisson")
GROUP_KINDS = ("binary", "categorical")


def _forward(model: Callable[[torch.Tensor], torch.Tensor], data: Any) -> torch.Tensor:
    """``model(data.X)`` without autograd, as a flat (n,) tensor (one value per row)."""
    if not callable(model):
        raise ValueError(f"model: expected a callable (e.g. torch.nn.Module), got {type(model).__name__}")
    n = len(data.y)
    with torch.no_grad():
        out = model(data.X)
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
    if task == "binary":
        return {"accuracy": accuracy(y, _hard(out, threshold)), "rps": rps(y, response)}
    if task == "regression":
        return {"r2": r2(y, response), "mse": mse(y, response)}
    exposure = _exposure(data)
    mu = response if exposure is None else exposure * response
    return {"deviance": poisson_deviance(y, mu), "rps": poisson_rps(y, response, exposure=exposure)}


def _fairness_values(out: torch.Tensor, task: str, threshold: float) -> np.ndarray:
    """What group fairness compares: hard 0/1 predictions (binary task) or response-scale means."""
    return _hard(out, threshold) if task == "binary" else _response(out, task)


def _group_fairness(values: np.ndarray, sensitive: Any, name: str) -> tuple[float, float]:
    """``(di_ratio, dp_difference)`` of ``values`` across the groups of one feature.

    ``di_ratio = min_g m_g / max_g m_g`` and ``dp_difference = max_g m_g - min_g m_g`` with
    ``m_g`` the group means. NaN (with a FairnessWarning) when the feature has one group in
    this data; ``di_ratio`` is NaN when some group mean is negative (a ratio is meaningless).
    """
    means = np.array(list(group_means(values, sensitive).values()))
    if means.size < 2:
        warnings.warn(
            f"sensitive feature {name!r} has a single group in this data; di_ratio and "
            "dp_difference are undefined (NaN)",
            FairnessWarning,
            stacklevel=4,
        )
        return math.nan, math.nan
    ratio = ratio_of_extremes(means) if means.min() >= 0 else math.nan
    return ratio, float(means.max() - means.min())


def _sensitive_items(data: Any) -> list[tuple[str, Any, str]]:
    """``(name, values, kind)`` of every sensitive feature, in the data's order."""
    sensitive = getattr(data, "sensitive", None) or {}
    kinds = getattr(data, "sensitive_kinds", None) or {}
    missing = [k for k in sensitive if k not in kinds]
    if missing:
        raise ValueError(f"data: sensitive feature {missing[0]!r} has no entry in sensitive_kinds")
    return [(k, v, kinds[k]) for k, v in sensitive.items()]


def _fairness(out: torch.Tensor, data: Any, task: str, threshold: float) -> dict[str, float]:
    """di_ratio / dp_difference per binary or categorical feature, and UF / JS over all cells."""
    values = _fairness_values(out, task, threshold)
    items = _sensitive_items(data)
    results: dict[str, float] = {}
    for name, s, kind in items:
        if kind not in GROUP_KINDS:
            continue
        ratio, diff = _group_fairness(values, s, name)
        if "di_ratio" not in results:
            results["di_ratio"], results["dp_difference"] = ratio, diff
        results[f"di_ratio[{name}]"], results[f"dp_difference[{name}]"] = ratio, diff
    if items:
        results.update(_distribution_fairness(_response(out, task), items))
    return results


def _distribution_fairness(response: np.ndarray, items: list[tuple[str, Any, str]]) -> dict[str, float]:
    """UF and JS divergence of the response-scale predictions across all intersectional cells.

    Continuous features are cut into 3 quantile bins ([DC] sec 5.1). NaN when the data
    holds a single cell.
    """
    cells = intersection_cells(*[v for _, v, _ in items], kinds=[k for _, _, k in items])
    if cells.max() < 1:
        logger.debug("evaluate: a single intersectional cell; UF and JS divergence are undefined")
        return {"uf": math.nan, "js_divergence": math.nan}
    return {"uf": uf(response, cells), "js_divergence": js_divergence(response, cells)}


def _unique_name(name: str, taken: Mapping[str, Any]) -> str:
    """``name``, or ``name#2``, ``name#3``, ... when already used by another constraint."""
    if name not in taken:
        return name
    k = 2
    while f"{name}#{k}" in taken:
        k += 1
    return f"{name}#{k}"


def _check_protocol(c: Any) -> None:
    """A ValueError naming the first field of the Constraint protocol ``c`` lacks."""
    for field in ("name", "exact", "lower", "upper"):
        if not hasattr(c, field):
            raise ValueError(f"constraints: {c!r} has no {field!r} (solvers.problem.Constraint protocol)")


def _exact_violation(out: torch.Tensor, data: Any, c: Any) -> tuple[torch.Tensor, float]:
    """The exact row values of one constraint (float64, on the CPU) and their total
    violation ``sum_i max(c_i - u_i, 0) + max(l_i - c_i, 0)``."""
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


def constraint_violations(out: torch.Tensor, data: Any, constraints: Iterable[Any]) -> dict[str, float]:
    """Exact total violation of each constraint, ``sum_i max(c_i - u_i, 0) + max(l_i - c_i, 0)``
    of its exact rows on the model outputs ``out`` (hard predictions for the rate
    constraints), keyed by constraint name (``name#2``, ``name#3``, ... for a repeated name).

    The ``<name>.violation`` entries of :func:`evaluate`, computed the same way, without
    the rest; a constraint whose bounds are built on first use (the rate constraints)
    needs no ``setup(data)`` first.
    """
    result: dict[str, float] = {}
    for c in constraints:
        _, v = _exact_violation(out, data, c)
        result[_unique_name(str(c.name), result)] = v
    return result


def evaluate(model: Callable[[torch.Tensor], torch.Tensor], data: Any, constraints: Iterable[Any] = (), threshold: float = 0.0) -> dict[str, Any]:
    """Performance, realised fairness and exact constraint values of ``model`` on ``data``.

    The model is run once, ``out = model(data.X)`` under ``torch.no_grad()``, one value per
    row: a logit for ``task="binary"``, the prediction for ``"regression"``, the log-rate for
    ``"poisson"`` (expected count ``mu = exposure * exp(out)``, exposure 1 when absent).

    Parameters
    ----------
    model : callable
        ``torch.nn.Module`` or function mapping ``X`` (n, p) to ``out`` (n,) or (n, 1).
    data : FairData or batch
        Reads ``X``, ``y``, ``task``, ``sensitive``, ``sensitive_kinds``, ``exposure``.
    constraints : iterable of Constraint
        Objects with ``name``, ``lower``, ``upper`` and ``exact(out, batch)``, already set up
        (the caller's job: ``setup(data)`` is not called here).
    threshold : float
        Hard prediction of the binary task: ``out > threshold`` (0 on logits is probability
        0.5).

    Returns
    -------
    dict
        - ``"n"``: number of rows.
        - binary: ``"accuracy"`` (hard predictions) and ``"rps"`` (= Brier score of
          ``sigmoid(out)``, [DC] App. E.2); regression: ``"r2"``, ``"mse"``; poisson:
          ``"deviance"`` (mean unit deviance) and ``"rps"`` (:func:`poisson_rps`).
        - for each binary/categorical sensitive feature ``f``: ``"di_ratio[f]"`` =
          ``min_g m_g / max_g m_g`` and ``"dp_difference[f]"`` = ``max_g m_g - min_g m_g``,
          where ``m_g`` is the positive rate of hard predictions (binary task) or the mean
          prediction on the response scale (prediction; predicted rate ``exp(out)`` for
          poisson). ``"di_ratio"`` and ``"dp_difference"`` repeat the first such feature.
          NaN when a feature has a single group in ``data`` (a FairnessWarning is issued);
          ``di_ratio`` is NaN when a group mean is negative (regression).
        - ``"uf"`` and ``"js_divergence"`` ([DC] eq. 4.1, 4.4) of the response-scale
          predictions across the intersections of all sensitive features (continuous
          ones cut into 3 quantile bins); NaN for a single cell.
        - per constraint ``c``: ``c.name`` -> list of exact row values and
          ``c.name + ".violation"`` -> total violation ``sum_i max(c_i - u_i, 0) +
          max(l_i - c_i, 0)`` (:func:`solvers.problem.violation`); a repeated name gets a
          ``#2``, ``#3``, ... suffix. ``"violation"``: the sum over constraints.
    """
    task = _check_data(data)
    if isinstance(threshold, bool) or not isinstance(threshold, (int, float)) or not math.isfinite(threshold):
        raise ValueError(f"threshold: expected a finite number, got {threshold!r}")
    out = _forward(model, data)
    results: dict[str, Any] = {"n": int(out.numel())}
    results.update(_performance(out, data, task, float(threshold)))
    results.update(_fairness(out, data, task, float(threshold)))
    results.update(_constraint_values(out, data, constraints))
    return results


def _as_runs(results: Mapping[str, Any]) -> dict[str, Mapping[str, Any]]:
    """``{column name: evaluate() dict}`` from one evaluate() dict or a mapping of them."""
    if not isinstance(results, Mapping) or not results:
        raise ValueError(f"results: expected an evaluate() dict or a non-empty mapping of them, got {results!r}")
    nested = [isinstance(v, Mapping) for v in results.values()]
    if all(nested):
        return {str(k): v for k, v in results.items()}
    if any(nested):
        raise ValueError("results: mixes evaluate() entries with nested dicts")
    return {"value": results}


def _flatten(run: Mapping[str, Any]) -> dict[str, float]:
    """One row per number: list entries (constraint rows) become ``name[i]``."""
    flat: dict[str, float] = {}
    for key, value in run.items():
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
        One evaluate() dict (one column, ``"value"``) or a mapping of them, e.g.
        ``{"train": evaluate(m, train), "test": evaluate(m, test)}`` (one column each).

    Returns
    -------
    pandas.DataFrame
        One row per measure in first-seen order (constraint row values expanded to
        ``name[i]``), one float column per run; NaN where a run lacks a measure.
    """
    runs = {name: _flatten(run) for name, run in _as_runs(results).items()}
    return pd.DataFrame(runs, dtype=float)


def format_report(results: Mapping[str, Any], digits: int = 4) -> str:
    """:func:`fairness_report` rendered as fixed-width text for printing or logging.

    ``n`` is shown as an integer, everything else with ``digits`` significant digits.
    """
    if isinstance(digits, bool) or not isinstance(digits, int) or digits < 1:
        raise ValueError(f"digits: expected a positive integer, got {digits!r}")
    table = fairness_report(results)
    text = table.astype(object)
    for row in table.index:
        fmt = "{:.0f}" if row == "n" else f"{{:.{digits}g}}"
        text.loc[row] = [("nan" if pd.isna(v) else fmt.format(v)) for v in table.loc[row]]
    return text.to_string()
