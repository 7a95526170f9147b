"""Calibration of a penalty weight by the JS-divergence elbow ([DC] sec 4.3 and App F).

The procedure of [DC] Algorithm 2: split the training data into a sub-training (70%) and a
validation part (30%), stratified on the target and the protected attributes; train the
model for every candidate ``lambda`` (``lambda = 0``, the unregularised baseline,
included) on the sub-training part; evaluate the JS divergence of the predictions across
the intersectional groups and an accuracy metric on the validation part; pick ``lambda``
at the "elbow" of the JS-divergence curve: "the smallest lambda such that increasing lambda
further will bring negligible reductions in JSD" (App F, Algorithm 2, line 12).

:func:`select_elbow` makes "negligible" precise: with ``J(lambda)`` the mean validation
JSD, the reduction still available beyond ``lambda_k`` is ``J(lambda_k) - min_{j >= k}
J(lambda_j)``; the selected ``lambda`` is the smallest one whose remaining reduction is at
most ``tolerance`` times the total reduction ``J(lambda_0) - min_j J(lambda_j)``.
On the paper's COMPAS validation means (Table 5.1) the default ``tolerance = 0.1`` picks
``lambda = 10`` for JdCov (the paper's choice) and 20 for CCdCov (the paper: 25 on its
finer grid of step 5).
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Sequence

import numpy as np
import pandas as pd

from fairopt.experiments.compare import compare
from fairopt.experiments.methods import Method

__all__ = ["select_elbow", "calibrate_penalty", "CalibrationResult"]

logger = logging.getLogger(__name__)

_LOSS_METRICS = {"binary": "rps", "poisson": "rps", "regression": "mse"}


def _finite_vector(values: Any, name: str) -> np.ndarray:
    arr = np.asarray(values, dtype=float).reshape(-1)
    if arr.size == 0 or not np.isfinite(arr).all():
        raise ValueError(f"{name}: expected a non-empty sequence of finite numbers, got {values!r}")
    return arr


def select_elbow(lambdas: Sequence[float], fairness: Sequence[float], tolerance: float = 0.1) -> int:
    """Index of the elbow of a fairness-vs-``lambda`` curve ([DC] App F, Algorithm 2 line 12).

    With the candidates sorted by ``lambda`` and ``J_k`` their (mean validation) unfairness,
    the selected index is the smallest ``k`` with

    ``J_k - min_{j >= k} J_j <= tolerance * (J_0 - min_j J_j)``,

    i.e. the smallest ``lambda`` beyond which no larger ``lambda`` reduces the unfairness by
    more than ``tolerance`` of the total reduction the sweep achieves. If no candidate
    improves on the first (``J_0 = min J``), the first is returned.

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


@dataclass
class CalibrationResult:
    """Outcome of :func:`calibrate_penalty`.

    Attributes
    ----------
    selected : float
        The chosen ``lambda``.
    summary : pandas.DataFrame
        One row per ``lambda`` (sorted): ``value``, mean and standard deviation over seeds of
        the fairness and accuracy metrics on the validation part, ``n_seeds``, and
        ``selected`` (bool).
    runs : pandas.DataFrame
        :func:`~fairopt.experiments.compare` rows of every run (``split="test"`` is the
        validation part).
    fairness, accuracy : str
        The metric columns used.
    tolerance : float
    """

    selected: float
    summary: pd.DataFrame
    runs: pd.DataFrame
    fairness: str
    accuracy: str
    tolerance: float


def calibrate_penalty(
    method: Method,
    data: Any,
    lambdas: Sequence[float],
    *,
    seeds: Sequence[int] = (0,),
    valid_size: float = 0.3,
    split_seed: int = 0,
    fairness: str = "js_divergence",
    accuracy: str | None = None,
    tolerance: float = 0.1,
    extra_metrics: Mapping[str, Callable[[Callable, Any], float]] | None = None,
) -> CalibrationResult:
    """Choose a penalty weight by the JS-divergence elbow on a 70/30 split ([DC] App F).

    Parameters
    ----------
    method : Method
        Usually a :class:`~fairopt.experiments.PenaltyMethod` whose value is ``lambda``.
    data : FairData
        The training data (the held-out test set stays outside calibration, [DC] sec 4.3).
    lambdas : sequence of float
        Candidate strengths (``>= 0``); 0 (the baseline) is added if absent.
    seeds : sequence of int, default (0,)
        Training seeds; metrics are averaged over them (the paper: 10).
    valid_size : float, default 0.3
        Validation share; the split is stratified on target x intersection cell.
    split_seed : int, default 0
    fairness : str, default "js_divergence"
        Unfairness column of :func:`~fairopt.experiments.compare` (lower is fairer).
    accuracy : str, optional
        Accuracy column reported alongside (default: ``rps`` for binary and Poisson tasks,
        ``mse`` for regression).
    tolerance : float, default 0.1
        See :func:`select_elbow`.
    extra_metrics : mapping, optional
        Further columns of the runs (:func:`~fairopt.experiments.compare`), e.g. the
        regulariser's value on the validation predictions.

    Returns
    -------
    CalibrationResult
    """
    values = sorted({float(v) for v in _finite_vector(lambdas, "lambdas")} | {0.0})
    if values[0] < 0:
        raise ValueError(f"lambdas: expected values >= 0, got {values[0]!r}")
    accuracy = accuracy or _LOSS_METRICS[data.task]
    runs = compare([method], data, grid={method.name: values}, seeds=seeds, folds=1,
                   test_size=valid_size, split_seed=split_seed, extra_metrics=extra_metrics)
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
    if math.isclose(selected, values[-1]):
        logger.warning("calibrate_penalty: the elbow is the largest candidate %g; consider larger lambdas", selected)
    return CalibrationResult(selected=selected, summary=summary, runs=runs, fairness=fairness,
                             accuracy=accuracy, tolerance=tolerance)
