"""Calibration of a penalty weight by the JS-divergence elbow ([DC] sec 4.3 and App F).

[DC] Algorithm 2: split the training data 70/30 (stratified on target and protected
attributes), train for every candidate ``lambda`` (0 included) on the first part, evaluate the JS
divergence across intersectional groups and an accuracy metric on the second, and pick the
"elbow": "the smallest lambda such that increasing lambda further will bring negligible
reductions in JSD" (App F, line 12), made precise by :func:`select_elbow`. Without a grid,
candidates are multiples of the ratio of the baseline's validation loss to its regulariser
([DC] sec 4.3.2, eq 4.5): :func:`lambda_scale`, :func:`lambda_grid`.
"""

from __future__ import annotations

import logging
import math
import warnings
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Sequence

import numpy as np
import pandas as pd
import torch

from solvers.losses import get_loss
from solvers.penalty import penalty_terms

from fairopt.exceptions import FairnessWarning
from fairopt.experiments.compare import compare, split_data
from fairopt.experiments.methods import Method, default_loss

__all__ = ["select_elbow", "calibrate_penalty", "CalibrationResult", "lambda_scale", "lambda_grid",
           "DEFAULT_LAMBDA_MULTIPLIERS"]

#: Multiples of the eq (4.5) ratio that :func:`lambda_grid` uses by default (a 1-2-5 series
#: spanning 0.1 to 5 times the ratio; [DC] gives the magnitude, not the grid).
DEFAULT_LAMBDA_MULTIPLIERS = (0.1, 0.2, 0.5, 1.0, 2.0, 5.0)

# columns of the baseline runs that carry the two sides of eq (4.5)
_SCALE_LOSS, _SCALE_REGULARISER = "_eq45_loss", "_eq45_regulariser"

logger = logging.getLogger(__name__)

_LOSS_METRICS = {"binary": "rps", "poisson": "rps", "regression": "mse"}


def _finite_vector(values: Any, name: str) -> np.ndarray:
    arr = np.asarray(values, dtype=float).reshape(-1)
    if arr.size == 0 or not np.isfinite(arr).all():
        raise ValueError(f"{name}: expected a non-empty sequence of finite numbers, got {values!r}")
    return arr


def select_elbow(lambdas: Sequence[float], fairness: Sequence[float], tolerance: float = 0.1) -> int:
    """Index of the elbow of a fairness-vs-``lambda`` curve ([DC] App F, Algorithm 2 line 12).

    With ``J_k`` the unfairness of the ``k``-th smallest ``lambda``, the smallest ``k`` with
    ``J_k - min_{j >= k} J_j <= tolerance * (J_0 - min_j J_j)``: beyond it no larger ``lambda``
    reduces the unfairness by more than ``tolerance`` of the sweep's total reduction (0 when none
    improves on the first).

    Parameters
    ----------
    lambdas : sequence of float
        Candidate strengths, strictly increasing.
    fairness : sequence of float
        Unfairness (lower is fairer) per candidate, e.g. the JS divergence.
    tolerance : float in [0, 1), default 0.1

    Returns
    -------
    int
        Position in ``lambdas``.
    """
    lam = _finite_vector(lambdas, "lambdas")
    J = _finite_vector(fairness, "fairness")
    if lam.size != J.size:
        raise ValueError(f"fairness: expected {lam.size} values (one per lambda), got {J.size}")
    if np.any(np.diff(lam) <= 0):
        raise ValueError(f"lambdas: expected strictly increasing values, got {lam.tolist()}")
    if isinstance(tolerance, bool) or not isinstance(tolerance, (int, float)) or not 0.0 <= tolerance < 1.0:
        raise ValueError(f"tolerance: expected a number in [0, 1), got {tolerance!r}")
    remaining_min = np.minimum.accumulate(J[::-1])[::-1]  # min_{j >= k} J_j
    total = J[0] - remaining_min[0]
    if total <= 0:
        return 0
    return int(np.flatnonzero(J - remaining_min <= tolerance * total)[0])


def lambda_scale(loss: float | Sequence[float] | np.ndarray, regulariser: float) -> float:
    """The ratio of [DC] eq (4.5): baseline validation loss over the baseline regulariser.

    ``scale = | (1/n_valid) sum_i L(yhat_i, y_i) | / psi(yhat, s_1, ..., s_d)`` with ``yhat`` the
    validation predictions of the unregularised model and ``psi`` the regulariser (JdCov~^2, CCdCov,
    ...): weights of this magnitude make ``lambda psi`` comparable to the loss. The absolute value
    covers losses defined up to a constant (a Poisson log-likelihood).

    Parameters
    ----------
    loss : float or array-like
        The mean validation loss, or per-row losses (their mean is taken).
    regulariser : float
        ``psi`` on the baseline validation predictions.

    Returns
    -------
    float
        The ratio, > 0.

    Raises
    ------
    ValueError
        Non-finite inputs, a zero mean loss, or ``regulariser <= 0`` (no scale to match: pass the
        candidate lambdas explicitly).
    """
    losses = np.asarray(loss, dtype=float).reshape(-1)
    if losses.size == 0 or not np.isfinite(losses).all():
        raise ValueError(f"loss: expected finite numbers, got {loss!r}")
    mean_loss = abs(float(np.mean(losses)))
    if mean_loss == 0.0:
        raise ValueError("loss: the mean baseline loss is 0, eq (4.5) gives no scale")
    if isinstance(regulariser, bool) or not isinstance(regulariser, (int, float, np.floating, np.integer)) \
            or not math.isfinite(regulariser):
        raise ValueError(f"regulariser: expected a finite number, got {regulariser!r}")
    if regulariser <= 0.0:
        raise ValueError(f"regulariser: eq (4.5) needs a positive regulariser at the baseline, got {regulariser!r} "
                         "(the baseline predictions already look independent); pass lambdas explicitly")
    return mean_loss / float(regulariser)


def lambda_grid(scale: float, multipliers: Sequence[float] = DEFAULT_LAMBDA_MULTIPLIERS) -> list[float]:
    """Candidate strengths ``[0] + [m * scale for m in multipliers]`` around the eq (4.5) ratio.

    Parameters
    ----------
    scale : float
        :func:`lambda_scale`, > 0.
    multipliers : sequence of float
        Positive, strictly increasing multiples.

    Returns
    -------
    list of float
        Strictly increasing, starting with the baseline 0.
    """
    if isinstance(scale, bool) or not isinstance(scale, (int, float, np.floating, np.integer)) \
            or not math.isfinite(scale) or scale <= 0:
        raise ValueError(f"scale: expected a finite number > 0, got {scale!r}")
    m = _finite_vector(multipliers, "multipliers")
    if (m <= 0).any() or np.any(np.diff(m) <= 0):
        raise ValueError(f"multipliers: expected positive, strictly increasing numbers, got {m.tolist()}")
    return [0.0] + [float(scale) * float(v) for v in m]


@dataclass
class CalibrationResult:
    """Outcome of :func:`calibrate_penalty`.

    Attributes
    ----------
    selected : float
        The chosen ``lambda``.
    summary : pandas.DataFrame
        One row per ``lambda``: ``value``, mean and standard deviation over seeds of the two
        metrics on the validation part, ``n_seeds`` and ``selected``.
    runs : pandas.DataFrame
        :func:`~fairopt.experiments.compare` rows of every run (``split="test"``: validation).
    fairness, accuracy : str
        The metric columns used.
    tolerance : float
    lambda_scale : float or None
        The eq (4.5) ratio that set the grid (None when ``lambdas`` were given).
    baseline_loss, baseline_regulariser : float or None
        Its two sides, means over seeds of the ``lambda = 0`` runs.
    """

    selected: float
    summary: pd.DataFrame
    runs: pd.DataFrame
    fairness: str
    accuracy: str
    tolerance: float
    lambda_scale: float | None = None
    baseline_loss: float | None = None
    baseline_regulariser: float | None = None


def calibrate_penalty(
    method: Method,
    data: Any,
    lambdas: Sequence[float] | None = None,
    *,
    seeds: Sequence[int] = (0,),
    valid_size: float = 0.3,
    split_seed: int = 0,
    fairness: str = "js_divergence",
    accuracy: str | None = None,
    tolerance: float = 0.1,
    extra_metrics: Mapping[str, Callable[[Callable, Any], float]] | None = None,
    multipliers: Sequence[float] = DEFAULT_LAMBDA_MULTIPLIERS,
) -> CalibrationResult:
    """Choose a penalty weight by the JS-divergence elbow on a 70/30 split ([DC] App F).

    Parameters
    ----------
    method : Method
        Usually a :class:`~fairopt.experiments.PenaltyMethod` whose value is ``lambda``.
    data : FairData
        The training data (the test set stays outside calibration, [DC] sec 4.3).
    lambdas : sequence of float, optional
        Candidate strengths ``>= 0`` (0 added if absent). Omitted: the baseline is trained first
        and the grid is ``lambda_grid(lambda_scale(loss, psi), multipliers)`` with its mean
        validation loss and sum of penalties (needs a method with ``penalties`` whose value is the
        weight itself, no ``weight_of``).
    seeds : sequence of int, default (0,)
        Training seeds; metrics are averaged over them.
    valid_size : float, default 0.3
        Validation share; the split is stratified on target x intersection cell.
    split_seed : int, default 0
    fairness : str, default "js_divergence"
        Unfairness column of :func:`~fairopt.experiments.compare` (lower is fairer): the paper's JS divergence
        of the predictions across groups by default, whatever the penalty; name the measure the penalty lowers
        where it differs (``"violation"``, the method's own constraint rows; ``"eo_difference"``).
    accuracy : str, optional
        Accuracy column reported alongside (default ``rps``; ``mse`` for regression).
    tolerance : float, default 0.1
        See :func:`select_elbow`.
    extra_metrics : mapping, optional
        Further columns of the runs (:func:`~fairopt.experiments.compare`).
    multipliers : sequence of float, default :data:`DEFAULT_LAMBDA_MULTIPLIERS`
        Multiples of the eq (4.5) ratio when ``lambdas`` is omitted.

    Returns
    -------
    CalibrationResult
    """
    accuracy = accuracy or _LOSS_METRICS[data.task]
    settings = dict(seeds=seeds, folds=1, test_size=valid_size, split_seed=split_seed)
    scale = baseline_loss = baseline_regulariser = None
    if lambdas is None:
        lambda_grid(1.0, multipliers)  # invalid multipliers fail before any training
        scale_metrics = _scale_metrics(method, data, valid_size, split_seed)
        baseline = compare([method], data, grid={method.name: [0.0]},
                           extra_metrics={**dict(extra_metrics or {}), **scale_metrics}, **settings)
        valid = baseline[baseline["split"] == "test"]
        baseline_loss = float(valid[_SCALE_LOSS].mean())
        baseline_regulariser = float(valid[_SCALE_REGULARISER].mean())
        scale = lambda_scale(baseline_loss, baseline_regulariser)
        values = lambda_grid(scale, multipliers)
        logger.info("calibrate_penalty: eq (4.5) scale %.4g = |loss %.4g| / regulariser %.4g; lambdas %s",
                    scale, baseline_loss, baseline_regulariser, [round(v, 6) for v in values])
        rest = compare([method], data, grid={method.name: values[1:]}, extra_metrics=extra_metrics, **settings)
        runs = pd.concat([baseline.drop(columns=[_SCALE_LOSS, _SCALE_REGULARISER]), rest], ignore_index=True)
    else:
        values = sorted({float(v) for v in _finite_vector(lambdas, "lambdas")} | {0.0})
        if values[0] < 0:
            raise ValueError(f"lambdas: expected values >= 0, got {values[0]!r}")
        runs = compare([method], data, grid={method.name: values}, extra_metrics=extra_metrics, **settings)
    for column in (fairness, accuracy):
        if column not in runs.columns:
            raise ValueError(f"fairness/accuracy: {column!r} is not a column of the results; "
                             f"available: {sorted(runs.columns)}")
    valid = runs[runs["split"] == "test"]
    grouped = valid.groupby("value")[[fairness, accuracy]]
    summary = grouped.mean().add_suffix("_mean").join(grouped.std(ddof=1).add_suffix("_std"))
    summary["n_seeds"] = valid.groupby("value").size()
    summary = summary.reset_index().sort_values("value", ignore_index=True)
    index = select_elbow(summary["value"], summary[f"{fairness}_mean"], tolerance)
    summary["selected"] = summary.index == index
    selected = float(summary["value"].iloc[index])
    logger.info("calibrate_penalty: %s elbow at lambda = %g (tolerance %g)", fairness, selected, tolerance)
    if math.isclose(selected, values[-1]) and len(values) > 1:
        warnings.warn(f"calibrate_penalty: the {fairness} elbow is the largest candidate weight {selected:g}, so the "
                      f"curve did not flatten within the grid: larger weights may be needed, or {fairness!r} may not "
                      "be what the penalty lowers (fairness= names the measure, e.g. 'violation' for a constraint "
                      "penalised by its hinge, 'eo_difference' for equalized odds); check the summary before "
                      "using it", FairnessWarning, stacklevel=2)
    return CalibrationResult(selected=selected, summary=summary, runs=runs, fairness=fairness,
                             accuracy=accuracy, tolerance=tolerance, lambda_scale=scale,
                             baseline_loss=baseline_loss, baseline_regulariser=baseline_regulariser)


def _scale_metrics(method: Method, data: Any, valid_size: float, split_seed: int) -> dict[str, Callable]:
    """Extra metrics giving the two sides of eq (4.5) on a part: the method's training loss and the
    sum of its penalties (set up on the sub-training part).
    """
    penalties = getattr(method, "penalties", None)
    if not penalties:
        raise ValueError(f"lambdas: required for {method!r}, which has no `penalties` to evaluate eq (4.5) with")
    if getattr(method, "weight_of", None) is not None:
        raise ValueError("lambdas: required when the method maps its value to the weight (weight_of); "
                         "eq (4.5) scales the penalty weight itself")
    loss = get_loss(getattr(method, "loss", None) or default_loss(data.task))
    terms = penalty_terms(penalties)
    _, sub_training, _ = split_data(data, 1, valid_size, split_seed)[0]
    for term in terms:
        if term.setup is not None:
            term.setup(sub_training)

    def mean_loss(model: Callable, part: Any) -> float:
        with torch.no_grad():
            return float(loss(model(part.X), part))

    def regulariser(model: Callable, part: Any) -> float:
        with torch.no_grad():
            out = model(part.X)
            return float(sum(float(term(out, part)) for term in terms))

    return {_SCALE_LOSS: mean_loss, _SCALE_REGULARISER: regulariser}
