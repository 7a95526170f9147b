"""What :func:`fairopt.group_report` compares: the task, the predictions and the target of every row,
from any supported model.

Models: a fitted fairopt or scikit-learn-style estimator (``predict``; ``predict_proba`` for a
``threshold``); a :class:`~fairopt.SavedModel` (its torch model on ``saved.encode(X)`` for a
DataFrame when a preprocessor was saved; its schema's task); a ``torch.nn.Module`` with one
output per row (a logit for classification, the prediction for regression). A torch model's outputs are
computed in float64 (:func:`solvers.problem.float64_forward`), the path ``SavedModel.predict`` and the
estimators' ``predict`` read, so a row within float32 rounding of the threshold gets the label they give it
whatever rows it comes with; a SavedModel's classification is its ``predict`` (the probability of
``classes_[1]`` above its ``metadata["threshold"]``), and where its metadata names its ``classes`` a
``pos_label`` of ``classes_[0]`` counts the rows predicted ``classes_[0]``.

Classification compares hard predictions: ``threshold=None`` is the model's own decision
(``predict``, or ``out > 0``); ``threshold=t`` is ``p > t`` on the probability of the positive
class (unlike :func:`fairopt.evaluate`, whose threshold is on the logit). The positive class:
``pos_label``; else a FairClassifier's ``pos_label_`` (also as a Pipeline's last step); else
``classes_[1]``; else 1 for 0/1 or boolean ``y``; else an estimator's larger label (a torch model needs
0/1 ``y`` or ``pos_label``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
import torch
from sklearn.base import is_classifier, is_regressor

from fairopt._validation import column_1d
from fairopt.data.encoding import positive_class
from fairopt.exceptions import FairnessWarning, warn_at_caller
from fairopt.measures.group import python_scalar
from fairopt.metrics import fitted_pos_label
from fairopt.persistence import SavedModel
from fairopt.sensitive_groups import row_count
from solvers.problem import eval_mode, float64_forward

__all__ = ["TASKS", "Responses", "model_responses", "infer_task"]

#: Tasks of the report (``"classification"`` is accepted as another name for ``"binary"``).
TASKS = ("binary", "regression")


@dataclass(frozen=True)
class Responses:
    """The task and the per-row values the report is computed from.

    Attributes
    ----------
    task : {"binary", "regression"}
    pred : numpy.ndarray of float64, shape (n,)
        Hard 0/1 predictions (binary) or the predictions (regression).
    y : numpy.ndarray of float64, shape (n,)
        0/1 (1: positive class) or the numeric target.
    positive : object or None
        The label of the positive class (binary); None for regression.
    source : str
        What produced the predictions, for the report's description.
    """

    task: str
    pred: np.ndarray
    y: np.ndarray
    positive: Any
    source: str


def _target(y: Any, n: int) -> np.ndarray:
    arr = column_1d(y, "y")
    if arr.shape[0] != n:
        raise ValueError(f"length mismatch: X has {n} rows, y has {arr.shape[0]}")
    if bool(np.asarray(pd.isna(arr), dtype=bool).any()):
        raise ValueError("y: contains missing values (NaN/None)")
    return arr


def _is_numeric(arr: np.ndarray) -> bool:
    return arr.dtype.kind in "iuf"


def infer_task(y: np.ndarray) -> str:
    """``"binary"`` for 0/1, boolean or two-label text ``y``, ``"regression"`` for more than two numbers;
    two numbers other than 0 and 1 are ambiguous: ValueError.
    """
    labels = np.unique(y)
    if not _is_numeric(y):
        if labels.size <= 2:
            return "binary"
        raise ValueError(f"y: {labels.size} distinct non-numeric labels; a classification report needs binary y")
    if np.isin(labels, (0, 1)).all():
        return "binary"
    if labels.size > 2:
        return "regression"
    raise ValueError(f"task: cannot tell from y (two values {labels.tolist()}, not 0/1) whether this is "
                     "classification or regression; pass task='binary' (with pos_label) or task='regression'")


def _resolve_task(task: str | None, model: Any, y: np.ndarray) -> str:
    if task is not None:
        if task == "classification":
            return "binary"
        if task not in TASKS:
            raise ValueError(f"task: expected one of {TASKS} (or 'classification'), got {task!r}")
        return task
    if isinstance(model, SavedModel) and model.schema and model.schema.get("task"):
        saved = model.schema["task"]
        if saved not in TASKS:
            raise ValueError(f"task: the saved model's task is {saved!r}; group_report supports {TASKS}")
        return saved
    if not isinstance(model, (SavedModel, torch.nn.Module)):
        kind = _estimator_kind(model)
        if kind is not None:
            return kind
        if hasattr(model, "predict_proba"):
            return "binary"
    return infer_task(y)


def _estimator_kind(model: Any) -> str | None:
    """``"binary"`` / ``"regression"`` from scikit-learn's tags, None when they do not say."""
    try:
        if is_classifier(model):
            return "binary"
        if is_regressor(model):
            return "regression"
    except (AttributeError, TypeError):
        kind = getattr(model, "_estimator_type", None)
        return {"classifier": "binary", "regressor": "regression"}.get(kind)
    return None


def _positive_label(y: np.ndarray, pos_label: Any, classes: Any, torch_model: bool,
                    fitted_positive: Any = None) -> Any:
    """The positive class (module docstring); ValueError for non-binary y."""
    labels = np.unique(y)
    if labels.size > 2:
        raise ValueError(f"y: a classification report needs binary y; got {labels.size} distinct values "
                         f"{labels[:6].tolist()}{' ...' if labels.size > 6 else ''}")
    if classes is not None and len(classes) != 2:
        raise ValueError(f"model: a classification report needs a binary classifier; its classes_ are "
                         f"{list(classes)}")
    if classes is not None:
        unknown = [v for v in labels.tolist() if v not in list(classes)]
        if unknown:
            raise ValueError(f"y: labels {unknown[:5]} are not among the model's classes_ {list(classes)}")
    if pos_label is not None:
        known = list(classes) if classes is not None else labels.tolist()
        if pos_label not in known:
            raise ValueError(f"pos_label: {pos_label!r} is not one of the labels {known}")
        return pos_label
    if classes is not None:
        return _default_positive(list(classes)) if fitted_positive is None else fitted_positive
    if y.dtype.kind == "b" or (_is_numeric(y) and np.isin(labels, (0, 1)).all()):
        return True if y.dtype.kind == "b" else 1
    if torch_model:
        raise ValueError(f"y: a torch model's logit is that of class 1; code y as 0/1 or pass pos_label "
                         f"(y has the labels {labels.tolist()})")
    if labels.size < 2:
        raise ValueError(f"y: a single label {labels.tolist()} that is not 0/1; pass pos_label")
    return _default_positive(labels.tolist())


#: What the positive class means to the report, in the note of a default positive class.
_REPORT_ROLE = "the report's selection_rate, tpr and fpr are rates of predicting {label}"


def _default_positive(classes: list) -> Any:
    """``classes_[1]`` (the last sorted label), with the estimators' and measures' FairnessWarning where the
    labels' order says nothing about which is favourable (text labels: "rejected" sorts after "approved")."""
    positive, note = positive_class(classes, None, source="the model's classes_", role=_REPORT_ROLE)
    if note:
        warn_at_caller(note, FairnessWarning)
    return positive


def _check_output(out: np.ndarray, n: int, what: str) -> np.ndarray:
    out = np.asarray(out)
    if out.ndim == 2 and out.shape[1] == 1:
        out = out.reshape(-1)
    if out.ndim != 1 or out.shape[0] != n:
        raise ValueError(f"model: {what} returned shape {out.shape}; expected one value per row ({n},)")
    return out


def _torch_outputs(module: torch.nn.Module, X: Any, n: int) -> np.ndarray:
    """``module(X)`` as float64 (n,) on the inputs in the module's dtype, in eval mode, computed in float64
    without autograd (:func:`solvers.problem.float64_forward`): the outputs the estimators and ``SavedModel``
    predict from, whatever rows come with each row."""
    if isinstance(X, torch.Tensor):
        inputs = X
    else:
        array = X.to_numpy(dtype=np.float32) if isinstance(X, pd.DataFrame) else np.asarray(X, dtype=np.float32)
        inputs = torch.from_numpy(np.ascontiguousarray(array))
    parameter = next(module.parameters(), None)
    if parameter is not None:
        inputs = inputs.to(dtype=parameter.dtype)
    with eval_mode(module):
        out = float64_forward(module, inputs).numpy()
    return _finite(_check_output(out, n, "the torch model"))


def _finite(out: np.ndarray) -> np.ndarray:
    if not np.isfinite(out).all():
        raise ValueError("model: produced non-finite outputs (NaN/inf)")
    return out


def _check_threshold(threshold: Any) -> float | None:
    if threshold is None:
        return None
    if isinstance(threshold, bool) or not isinstance(threshold, (int, float, np.floating)) or not 0 < threshold < 1:
        raise ValueError(f"threshold: expected a probability in (0, 1), got {threshold!r}")
    return float(threshold)


def _estimator_hard(model: Any, X: Any, n: int, positive: Any, threshold: float | None) -> np.ndarray:
    if threshold is None:
        return (_check_output(model.predict(X), n, "predict") == positive).astype(np.float64)
    if not hasattr(model, "predict_proba"):
        raise ValueError(f"threshold: {type(model).__name__} has no predict_proba; pass threshold=None to use "
                         "its predict")
    proba = np.asarray(model.predict_proba(X), dtype=np.float64)
    classes = getattr(model, "classes_", None)
    column = list(classes).index(positive) if classes is not None else proba.shape[1] - 1
    return (_check_output(proba[:, column], n, "predict_proba") > threshold).astype(np.float64)


def model_responses(model: Any, X: Any, y: Any, *, task: str | None = None, threshold: Any = None,
                    pos_label: Any = None) -> Responses:
    """The task, predictions and target of the rows ``X``, ``y`` (module docstring).

    Raises
    ------
    ValueError
        An unsupported model; mismatched lengths; NaN in ``y``; non-binary ``y`` or classifier for
        classification; a bad or misplaced ``threshold``; non-finite or misshapen predictions.
    """
    n = _row_count(X)
    target = _target(y, n)
    threshold = _check_threshold(threshold)
    torch_model = isinstance(model, (SavedModel, torch.nn.Module))
    if not torch_model and not hasattr(model, "predict"):
        raise ValueError(f"model: expected a fitted estimator with predict, a fairopt.SavedModel or a "
                         f"torch.nn.Module, got {type(model).__name__}")
    resolved = _resolve_task(task, model, target)
    source = type(model).__name__
    if resolved == "regression":
        if threshold is not None:
            raise ValueError("threshold: only for classification (this is a regression report)")
        if not _is_numeric(target):
            raise ValueError(f"y: a regression report needs numeric y, got dtype {target.dtype}")
        pred = _torch_predictions(model, X, n) if torch_model else _check_output(model.predict(X), n, "predict")
        pred = np.asarray(pred, dtype=np.float64)
        if not np.isfinite(pred).all():
            raise ValueError("model: produced non-finite predictions (NaN/inf)")
        return Responses("regression", pred, target.astype(np.float64), None, source)
    classes = _saved_classes(model) if torch_model else getattr(model, "classes_", None)
    fitted = (None if classes is None else classes[1]) if torch_model else fitted_pos_label(model)
    positive = _positive_label(target, pos_label, classes, torch_model, fitted)
    if torch_model:
        hard = _torch_hard(model, X, n, positive, threshold)
    else:
        hard = _estimator_hard(model, X, n, positive, threshold)
    return Responses("binary", hard, (target == positive).astype(np.float64), python_scalar(positive), source)


def _torch_predictions(model: Any, X: Any, n: int) -> np.ndarray:
    """A torch model's float64 outputs (a SavedModel's :meth:`~fairopt.SavedModel.decision_function`)."""
    if isinstance(model, SavedModel):
        return _finite(_check_output(model.decision_function(X), n, "the saved model"))
    return _torch_outputs(model, X, n)


def _torch_hard(model: Any, X: Any, n: int, positive: Any, threshold: float | None) -> np.ndarray:
    """0/1: whether a torch model predicts ``positive`` for each row. A module's logit (a SavedModel's
    without ``classes`` in its metadata) is that of the positive class; a SavedModel decides as its
    ``predict`` (its ``metadata["threshold"]``), and its logit is that of its ``classes_[1]``."""
    other = positive != _logit_class(model, positive)  # the positive class is not the logit's
    if threshold is None:
        if isinstance(model, SavedModel):
            above = _check_output(model.predict(X), n, "the saved model") == model.classes_[1]
        else:
            above = _torch_predictions(model, X, n) > 0
        return (~above if other else above).astype(np.float64)
    p = 1.0 / (1.0 + np.exp(-_torch_predictions(model, X, n)))
    return ((1.0 - p if other else p) > threshold).astype(np.float64)


def _saved_classes(model: Any) -> np.ndarray | None:
    """The labels a SavedModel's metadata names (negative first: its logit is that of ``classes_[1]``), else None."""
    return model.classes_ if isinstance(model, SavedModel) and model.metadata.get("classes") is not None else None


def _logit_class(model: Any, positive: Any) -> Any:
    """The label whose logit a torch model outputs: a SavedModel's ``classes_[1]`` where its metadata names its
    classes, else the positive class."""
    classes = _saved_classes(model)
    return positive if classes is None else classes[1]


def _row_count(X: Any) -> int:
    try:
        return row_count(X)
    except TypeError:
        raise ValueError(f"X: expected an array-like of rows, got {type(X).__name__}") from None
