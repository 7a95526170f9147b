"""Fairness metrics with the scikit-learn signature, and scorers for model selection.

The functions take ``(y_true, y_pred, *, sensitive_features)`` with hard predictions ``y_pred``.
With ``P_g = P(yhat = 1 | g)``, ``TPR_g = P(yhat = 1 | g, y = 1)`` and
``FPR_g = P(yhat = 1 | g, y = 0)``:

============================== ========================================================
``disparate_impact``           ``min_g P_g / max_g P_g`` (= ``demographic_parity_ratio``)
``demographic_parity_difference`` ``max_g P_g - min_g P_g``
``equal_opportunity_ratio``    ``min_g TPR_g / max_g TPR_g``
``equal_opportunity_difference`` ``max_g TPR_g - min_g TPR_g``
``equalized_odds_ratio``       ``min(TPR ratio, FPR ratio)``
``equalized_odds_difference``  ``max(TPR difference, FPR difference)``
============================== ========================================================

They are the measures of :mod:`fairopt.measures.group` behind that signature: a ratio whose groups
all have rate 0 is NaN with an :class:`~fairopt.exceptions.UndefinedMeasureWarning` (not
"perfectly fair"); a group without rows of the label a TPR/FPR needs is a ``ValueError``. Several
sensitive columns give their intersections.

:func:`make_scorer` wraps a measure as a scorer that requests ``sensitive_features`` through
metadata routing, so a search passes each fold's slice::

    sklearn.set_config(enable_metadata_routing=True)
    search = GridSearchCV(estimator, grid, refit="acc",
                          scoring={"acc": "accuracy", "di": fairopt.metrics.make_scorer("disparate_impact")})
    search.fit(X, y, sensitive_features=s)   # routed to the "di" scorer only, sliced per fold
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping
from typing import Any, Callable

import numpy as np
import pandas as pd
import sklearn
from sklearn.metrics import make_scorer as sklearn_make_scorer
from sklearn.metrics._scorer import _Scorer

from fairopt._validation import check_sample_weight, column_1d
from fairopt.data.encoding import positive_class
from fairopt.exceptions import FairnessWarning, UndefinedMeasureWarning, warn_at_caller
from fairopt.inputs import columns_of_x, names_columns_of_x, warn_reordered_against
from fairopt.measures.group import (disparate_impact as group_disparate_impact, dp_difference, equal_impact,
                                    equalised_odds, warn_undefined_ratio)
from fairopt.sensitive_groups import intersection_groups

__all__ = [
    "MEASURES",
    "disparate_impact",
    "demographic_parity_ratio",
    "demographic_parity_difference",
    "equal_opportunity_ratio",
    "equal_opportunity_difference",
    "equalized_odds_ratio",
    "equalized_odds_difference",
    "fairness_score",
    "fitted_pos_label",
    "make_scorer",
]


# --------------------------------------------------------------------------------------
# inputs
# --------------------------------------------------------------------------------------
def _labels_1d(x: Any, name: str) -> np.ndarray:
    return column_1d(x, name, "array of labels", allow_empty=False)


def _binary(y_true: Any, y_pred: Any, pos_label: Any) -> tuple[np.ndarray, np.ndarray]:
    """``y_true`` and ``y_pred`` as float 0/1, 1 being ``pos_label`` (default: 1 for 0/1 or boolean
    labels, else the larger label, scikit-learn's ``classes_[1]``). ``y_true=None`` (rows without targets
    yet, for the measures of predictions alone) stands in ``y_pred`` for it.
    """
    yp = _labels_1d(y_pred, "y_pred")
    yt = yp if y_true is None else _labels_1d(y_true, "y_true")
    if yt.shape[0] != yp.shape[0]:
        raise ValueError(f"length mismatch: y_true has {yt.shape[0]} rows, y_pred has {yp.shape[0]}")
    try:
        labels = np.unique(np.concatenate([yt, yp]))
    except TypeError:
        raise ValueError("y_true, y_pred: labels of mixed types cannot be compared") from None
    if labels.size > 2:
        raise ValueError(f"y_true, y_pred: fairness metrics need binary labels; got {labels.size} distinct labels "
                         f"{labels[:6].tolist()}")
    zero_one = labels.dtype.kind == "b" or (labels.dtype.kind in "iuf" and np.isin(labels, (0, 1)).all())
    if pos_label is None and zero_one:
        pos_label = 1
    elif labels.size == 2:  # the estimators' rule: the last sorted label, with a note where the order says nothing
        pos_label, note = positive_class(labels.tolist(), pos_label, source="y_true and y_pred", role=_MEASURE_ROLE)
        if note:
            warn_at_caller(f"{note}. A fitted FairClassifier's pos_label_ is the class its constraints counted; "
                           "make_scorer's scorers read it from the estimator.", FairnessWarning)
    elif pos_label is None:
        raise ValueError(f"pos_label: the only label is {labels.tolist()}; pass pos_label")
    return (yt == pos_label).astype(np.float64), (yp == pos_label).astype(np.float64)


#: What the positive class means to a measure, in the note of a default positive class.
_MEASURE_ROLE = "the measure's group rates are rates of predicting {label}"


def _group_labels(sensitive_features: Any, n: int) -> np.ndarray:
    """One group label per row (intersections for several attributes)."""
    if sensitive_features is None:
        raise ValueError("sensitive_features: required. For a scorer inside a search or cross-validation, enable "
                         "metadata routing (sklearn.set_config(enable_metadata_routing=True)) and pass them to "
                         "fit: search.fit(X, y, sensitive_features=s)")
    groups = intersection_groups(sensitive_features, n)
    return np.asarray(groups.labels, dtype=object)[groups.codes]


def _require_rows(y: np.ndarray, groups: np.ndarray, value: int, weights: np.ndarray | None = None) -> None:
    """Every group has rows with ``y_true = value`` (of positive weight, when weighted), else its TPR/FPR is
    undefined."""
    chosen = (y == value) if weights is None else (y == value) & (weights > 0)
    present = set(groups[chosen].tolist())
    missing = [g for g in dict.fromkeys(groups.tolist()) if g not in present]
    if missing:
        rate = "true-positive" if value == 1 else "false-positive"
        weighted = "" if weights is None else " of positive weight"
        raise ValueError(f"y_true: the group(s) {missing} have no rows{weighted} with y_true = {value} (positive "
                         f"class: 1); their {rate} rate is undefined")


def _prepare(y_true: Any, y_pred: Any, sensitive_features: Any, pos_label: Any, sample_weight: Any = None,
             needs_labels: bool = True) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray | None]:
    """``(y, yhat, groups, weights)``: 0/1 labels and predictions, one group label per row, the checked
    weights (None without)."""
    if needs_labels and y_true is None:
        raise ValueError("y_true: required: this measure compares rates among the rows of each true label "
                         "(disparate_impact and demographic_parity_difference take y_true=None)")
    named = {"y_true": y_true, "y_pred": y_pred, "sensitive_features": sensitive_features,
             "sample_weight": sample_weight}
    first = next((name for name, value in named.items() if isinstance(value, (pd.Series, pd.DataFrame))), None)
    if first is not None:  # pandas arguments are paired by position: say so where an index was reordered
        warn_reordered_against(named.pop(first), first, **named)
    y, p = _binary(y_true, y_pred, pos_label)
    return y, p, _group_labels(sensitive_features, y.shape[0]), check_sample_weight(sample_weight, y.shape[0])


# --------------------------------------------------------------------------------------
# the measures
# --------------------------------------------------------------------------------------
def disparate_impact(y_true: Any, y_pred: Any, *, sensitive_features: Any, pos_label: Any = None,
                     sample_weight: Any = None) -> float:
    """Disparate impact ``min_g P(yhat=1 | g) / max_g P(yhat=1 | g)`` (1: parity).

    Parameters
    ----------
    y_true, y_pred : array-like (n,)
        True and predicted labels (two classes); ``y_true`` is used for its length only, and may be
        None for rows without targets yet (a production batch).
    sensitive_features : array-like (n,) or (n, k), DataFrame
        Group of each row; several columns give their intersections.
    pos_label : optional
        The positive class; default 1 for 0/1 or boolean labels, else the larger label.
    sample_weight : array-like (n,), optional
        Row weights, as fairlearn's: each group's rate is ``sum_g w_i yhat_i / sum_g w_i``. The same keyword
        weights every measure of this module.

    Returns
    -------
    float
        In [0, 1]; NaN (with an UndefinedMeasureWarning) when no group has a positive prediction.
    """
    _, p, s, w = _prepare(y_true, y_pred, sensitive_features, pos_label, sample_weight, needs_labels=False)
    return float(group_disparate_impact(p, s, w))


def demographic_parity_ratio(y_true: Any, y_pred: Any, *, sensitive_features: Any, pos_label: Any = None,
                             sample_weight: Any = None) -> float:
    """The same as :func:`disparate_impact` (fairlearn's name): ``min_g P_g / max_g P_g``."""
    return disparate_impact(y_true, y_pred, sensitive_features=sensitive_features, pos_label=pos_label,
                            sample_weight=sample_weight)


def demographic_parity_difference(y_true: Any, y_pred: Any, *, sensitive_features: Any,
                                  pos_label: Any = None, sample_weight: Any = None) -> float:
    """Demographic-parity difference ``max_g P(yhat=1 | g) - min_g P(yhat=1 | g)`` (0: parity); ``y_true`` as
    in :func:`disparate_impact` (None for rows without targets)."""
    _, p, s, w = _prepare(y_true, y_pred, sensitive_features, pos_label, sample_weight, needs_labels=False)
    return float(dp_difference(p, s, w))


def equal_opportunity_ratio(y_true: Any, y_pred: Any, *, sensitive_features: Any, pos_label: Any = None,
                            sample_weight: Any = None) -> float:
    """``min_g TPR_g / max_g TPR_g`` with ``TPR_g = P(yhat=1 | g, y=1)`` (1: equal opportunity); NaN
    with a warning when every TPR is 0.
    """
    y, p, s, w = _prepare(y_true, y_pred, sensitive_features, pos_label, sample_weight)
    _require_rows(y, s, 1, w)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UndefinedMeasureWarning)
        value = float(equal_impact(p, s, y, w))
    return warn_undefined_ratio(value, "equal_opportunity_ratio", "positive predictions among its rows with y = 1")


def equal_opportunity_difference(y_true: Any, y_pred: Any, *, sensitive_features: Any,
                                 pos_label: Any = None, sample_weight: Any = None) -> float:
    """``max_g TPR_g - min_g TPR_g`` (0: equal opportunity)."""
    y, p, s, w = _prepare(y_true, y_pred, sensitive_features, pos_label, sample_weight)
    _require_rows(y, s, 1, w)
    positives = y == 1
    return float(dp_difference(p[positives], s[positives], None if w is None else w[positives]))


def equalized_odds_ratio(y_true: Any, y_pred: Any, *, sensitive_features: Any, pos_label: Any = None,
                         sample_weight: Any = None) -> float:
    """``min(min_g TPR_g / max_g TPR_g, min_g FPR_g / max_g FPR_g)`` (1: equalized odds); NaN with a
    warning when either ratio is 0/0.
    """
    y, p, s, w = _prepare(y_true, y_pred, sensitive_features, pos_label, sample_weight)
    _require_rows(y, s, 1, w)
    _require_rows(y, s, 0, w)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UndefinedMeasureWarning)
        tpr_ratio = float(equal_impact(p, s, y, w))
        fpr_ratio = float(equal_impact(p, s, 1.0 - y, w))  # "y = 1" of the flipped target: the rows with y = 0
    value = float("nan") if np.isnan(tpr_ratio) or np.isnan(fpr_ratio) else min(tpr_ratio, fpr_ratio)
    what = "positive predictions among its rows with y = 1" if np.isnan(tpr_ratio) else \
        "positive predictions among its rows with y = 0"
    return warn_undefined_ratio(value, "equalized_odds_ratio", what)


def equalized_odds_difference(y_true: Any, y_pred: Any, *, sensitive_features: Any,
                              pos_label: Any = None, sample_weight: Any = None) -> float:
    """``max(max_g TPR_g - min_g TPR_g, max_g FPR_g - min_g FPR_g)`` (0: equalized odds)."""
    y, p, s, w = _prepare(y_true, y_pred, sensitive_features, pos_label, sample_weight)
    _require_rows(y, s, 1, w)
    _require_rows(y, s, 0, w)
    return float(equalised_odds(p, s, y, sample_weight=w))


#: name -> (function, greater_is_better).
MEASURES: dict[str, tuple[Callable[..., float], bool]] = {
    "disparate_impact": (disparate_impact, True),
    "demographic_parity_ratio": (demographic_parity_ratio, True),
    "demographic_parity_difference": (demographic_parity_difference, False),
    "equal_opportunity_ratio": (equal_opportunity_ratio, True),
    "equal_opportunity_difference": (equal_opportunity_difference, False),
    "equalized_odds_ratio": (equalized_odds_ratio, True),
    "equalized_odds_difference": (equalized_odds_difference, False),
}


def _measure(name: Any) -> tuple[Callable[..., float], bool]:
    if not isinstance(name, str) or name not in MEASURES:
        raise ValueError(f"measure: expected one of {sorted(MEASURES)} or a callable, got {name!r}")
    return MEASURES[name]


def fairness_score(y_true: Any, y_pred: Any, *, measure: str, sensitive_features: Any = None,
                   pos_label: Any = None, sample_weight: Any = None) -> float:
    """The measure named ``measure`` (a key of :data:`MEASURES`): the score function of :func:`make_scorer`."""
    function, _ = _measure(measure)
    return function(y_true, y_pred, sensitive_features=sensitive_features, pos_label=pos_label,
                    sample_weight=sample_weight)


def fitted_pos_label(estimator: Any, depth: int = 0) -> Any:
    """The positive class a fitted classifier counted (``pos_label_`` of a :class:`fairopt.FairClassifier`, also
    inside a fitted meta-estimator, nested: a Pipeline's last step, a search's ``best_estimator_``, the fitted
    ``estimator_`` of a wrapper such as ``FixedThresholdClassifier``, the first of ``CalibratedClassifierCV``'s
    ``calibrated_classifiers_``), or None: a wrapper's own ``classes_[1]`` is not the class its FairClassifier's
    bounds counted."""
    if hasattr(estimator, "pos_label_") or depth > 8:
        return getattr(estimator, "pos_label_", None)
    if hasattr(estimator, "steps"):
        inner = estimator.steps[-1][1]
    else:
        calibrated = getattr(estimator, "calibrated_classifiers_", None)
        inner = next((getattr(estimator, name) for name in ("best_estimator_", "estimator_")
                      if getattr(estimator, name, None) is not None),
                     getattr(calibrated[0], "estimator", None) if calibrated else None)
    return None if inner is None or inner is estimator else fitted_pos_label(inner, depth + 1)


class _FairnessScorer(_Scorer):
    """scikit-learn's predict scorer that counts, unless the scorer was given ``pos_label``, the positive
    class of the estimator it scores (:func:`fitted_pos_label`): a fairness measure of a classifier trained
    with ``pos_label="approved"`` is a measure of predicting "approved", whatever the labels' order."""

    def _score(self, method_caller: Any, estimator: Any, X: Any, y_true: Any, **kwargs: Any) -> float:
        positive = fitted_pos_label(estimator)
        if positive is not None and "pos_label" not in self._kwargs and "pos_label" not in kwargs:
            kwargs["pos_label"] = positive
        named = kwargs.get("sensitive_features")
        if names_columns_of_x(named, X):  # column names of X, as fit takes them: their values in these rows
            kwargs["sensitive_features"] = columns_of_x([named] if isinstance(named, str) else list(named), X)
        chosen = getattr(self, "_sensitive", None)
        if chosen is not None:
            kwargs["sensitive_features"] = _chosen_columns(kwargs.get("sensitive_features"), chosen, X)
        return super()._score(method_caller, estimator, X, y_true, **kwargs)

    def set_score_request(self, **kwargs: Any) -> "_FairnessScorer":
        """scikit-learn's request, which replaces the whole request, keeping ``sensitive_features`` requested
        unless it is named: ``scorer.set_score_request(sample_weight=True)`` adds the weights."""
        kwargs.setdefault("sensitive_features", True)
        return super().set_score_request(**kwargs)


def _chosen_columns(given: Any, names: list[str], X: Any) -> Any:
    """The columns ``names`` of the routed sensitive features (a DataFrame or a dict), or of a DataFrame ``X``
    when none were routed; ValueError naming what is there otherwise."""
    if isinstance(given, pd.DataFrame) and all(n in given.columns for n in names):
        return given[names]
    if isinstance(given, Mapping) and all(n in given for n in names):
        return {n: given[n] for n in names}
    if given is None and names_columns_of_x(names, X):
        return columns_of_x(names, X)
    there = (list(given.columns) if isinstance(given, pd.DataFrame) else list(given) if isinstance(given, Mapping)
             else type(given).__name__)
    raise ValueError(f"sensitive: the scorer measures {names}, but the sensitive features it was given hold {there} "
                     "(route a DataFrame or dict with those columns, or leave sensitive None)")


def make_scorer(measure: str | Callable[..., float], *, greater_is_better: bool | None = None,
                sensitive: str | list[str] | None = None, **kwargs: Any) -> Any:
    """A scikit-learn scorer of a fairness measure that receives ``sensitive_features`` through
    metadata routing.

    It scores ``measure(y_true, estimator.predict(X), sensitive_features=..., **kwargs)``; with
    ``sklearn.set_config(enable_metadata_routing=True)`` a search or ``cross_validate`` passes it the
    rows of ``s`` of each test fold.

    Parameters
    ----------
    measure : str or callable
        A name of :data:`MEASURES`, or ``f(y_true, y_pred, *, sensitive_features, **kwargs)`` (then
        ``greater_is_better`` is required).
    greater_is_better : bool, optional
        Default: True for the ratios, False for the differences (scikit-learn then reports
        ``-difference``).
    sensitive : str or list of str, optional
        The column(s) of the routed sensitive features to measure over. Default: all of them, whose
        intersections are the groups; a fit that bounds race and sex separately routes both, and a search
        should score race alone with ``sensitive="race"`` (the intersections' rates are other, smaller
        groups).
    **kwargs
        Passed to the measure, e.g. ``pos_label``. Without ``pos_label`` the scorer counts the positive class
        of the classifier it scores (``pos_label_`` of a fitted :class:`fairopt.FairClassifier`, also at the
        end of a Pipeline), so a search measures the class the constraints counted.

    Returns
    -------
    scorer
        ``scorer(estimator, X, y, sensitive_features=s)`` (called directly, too, only with routing enabled:
        scikit-learn refuses the keyword otherwise); for weighted scores, ``scorer.set_score_request(
        sample_weight=True)`` (with routing enabled) and route ``sample_weight`` too. ``s`` may name columns of
        a DataFrame ``X``, as ``fit`` takes them (``sensitive_features="sex"``): the scorer reads their values in
        the scored rows. Several columns give their intersections (each combination of values is a group).
    """
    if callable(measure):
        if greater_is_better is None:
            raise ValueError("greater_is_better: required (True or False) for a measure given as a function")
        score_func, extra = measure, {}
    else:
        _, default = _measure(measure)
        score_func, extra = fairness_score, {"measure": measure}
        greater_is_better = default if greater_is_better is None else greater_is_better
    if not isinstance(greater_is_better, (bool, np.bool_)):
        raise ValueError(f"greater_is_better: expected True or False, got {greater_is_better!r}")
    clash = {"sensitive_features", "measure"} & set(kwargs)
    if clash:
        raise ValueError(f"{sorted(clash)}: not a make_scorer keyword (sensitive_features come through routing)")
    plain = sklearn_make_scorer(score_func, response_method="predict", greater_is_better=bool(greater_is_better),
                                **extra, **kwargs)
    scorer = _FairnessScorer.__new__(_FairnessScorer)  # the same state; the subclass only adds the estimator's class
    scorer.__dict__.update(plain.__dict__)
    scorer._sensitive = None if sensitive is None else ([sensitive] if isinstance(sensitive, str) else list(sensitive))
    # set_score_request needs routing enabled when it is called; the request is kept on the
    # scorer and used by every search that runs with routing enabled
    with sklearn.config_context(enable_metadata_routing=True):
        scorer.set_score_request(sensitive_features=True)
    return scorer
