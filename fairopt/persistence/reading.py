"""Reading a file: :func:`load` (checked header, structure and checksum) and the objects it
rebuilds: estimators, :class:`SavedModel`, FitResult, History."""

from __future__ import annotations

import copy

import os
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np
import pandas as pd
import torch
from scipy.special import expit
from torch import nn

from fairopt.data import Preprocessor
from fairopt.data.preprocessing import MISSING_MODES
from fairopt.estimators import FairClassifier
from fairopt.persistence.format import (
    ESTIMATOR_CLASSES,
    FITTED_ATTRIBUTES,
    OPTIONAL_PREPROCESSOR_ATTRIBUTES,
    PREPROCESSOR_ATTRIBUTES,
    PathLike,
    check_header,
    check_structure,
    read_payload,
    verify_checksum,
)
from fairopt.persistence.modules import load_module
from fairopt.specs import constraint_from_spec
from fairopt.training import float64_outputs
from solvers.history import FitResult, History

__all__ = ["SavedModel", "load"]


@dataclass
class SavedModel:
    """A torch model loaded by :func:`load` with what was saved beside it.

    :meth:`predict`, :meth:`predict_proba` and :meth:`decision_function` take a DataFrame of raw rows
    (encoded by the saved preprocessor) or the model inputs; the model runs in float64, so a row's
    output does not depend on the rows around it.

    Attributes
    ----------
    model : torch.nn.Module
        The model, in eval mode.
    preprocessor : Preprocessor or None
        Encodes raw rows into the model's inputs (:meth:`encode`).
    constraints : list
        Constraint objects rebuilt from their specs (not set up).
    schema : dict or None
        What a saved :class:`~fairopt.data.FairData` described: ``task``, ``target_name``,
        ``feature_columns``, ``feature_names``, ``sensitive_names``, ``sensitive_kinds``,
        ``sensitive_levels``.
    metadata : dict
        The ``metadata`` given to :func:`save`; ``"classes"`` (the two labels, negative first) and
        ``"threshold"`` (the probability of ``classes[1]`` above which a row gets it, default 0.5)
        shape :meth:`predict`.
    """

    model: nn.Module
    preprocessor: Preprocessor | None = None
    constraints: list = field(default_factory=list)
    schema: dict | None = None
    metadata: dict = field(default_factory=dict)

    def encode(self, frame: Any) -> torch.Tensor:
        """Model inputs (float32 tensor) of a DataFrame of raw rows, with the saved preprocessing."""
        if self.preprocessor is None:
            raise ValueError("encode: no preprocessor was saved with this model")
        X, _ = self.preprocessor.transform(frame)
        return torch.from_numpy(X)

    @property
    def task(self) -> str:
        """``"binary"`` or ``"regression"``: the schema's task, else the metadata's, else ``"binary"``."""
        return str((self.schema or {}).get("task") or self.metadata.get("task") or "binary")

    @property
    def classes_(self) -> np.ndarray:
        """The two labels of a binary model (default ``[0, 1]``); ``classes_[1]`` is the positive class."""
        return np.asarray(self.metadata.get("classes") or [0, 1])

    def decision_function(self, X: Any) -> np.ndarray:
        """The model's output per row, float64 (n,): the logit of ``classes_[1]`` or the prediction."""
        if isinstance(X, pd.DataFrame) and self.preprocessor is not None:
            X = self.encode(X)
        inputs = X.detach().cpu().numpy() if isinstance(X, torch.Tensor) else np.asarray(X, dtype=np.float64)
        return float64_outputs(self.model, inputs)

    def predict_proba(self, X: Any) -> np.ndarray:
        """``[P(classes_[0]), P(classes_[1])]`` per row, shape (n, 2) (binary models)."""
        if self.task != "binary":
            raise ValueError(f"predict_proba: only for a binary model; this one's task is {self.task!r}")
        p1 = expit(self.decision_function(X))
        return np.column_stack([1.0 - p1, p1])

    def predict(self, X: Any) -> np.ndarray:
        """Binary: ``classes_[1]`` where its probability exceeds ``metadata["threshold"]``, else
        ``classes_[0]``; regression: the prediction; Poisson: the rate ``exp(out)`` per unit of exposure
        (the model's output is its logarithm, which :meth:`decision_function` gives).
        """
        out = self.decision_function(X)
        if self.task == "poisson":
            return np.exp(out)
        if self.task != "binary":
            return out
        threshold = float(self.metadata.get("threshold", 0.5))
        if not 0.0 < threshold < 1.0:
            raise ValueError(f"metadata: threshold {threshold!r} is not a probability in (0, 1)")
        logit = 0.0 if threshold == 0.5 else float(np.log(threshold / (1.0 - threshold)))
        return self.classes_[(out > logit).astype(np.int64)]


def load(path: PathLike, *, model: nn.Module | Callable[[int], nn.Module] | None = None) -> Any:
    """Read what :func:`save` wrote (safely: ``torch.load(..., weights_only=True)``).

    Parameters
    ----------
    path : str or path-like
    model : torch.nn.Module or callable, optional
        Needed for a custom module: an instance of the same architecture, or the factory
        ``n_features -> module`` an estimator was built with.

    Returns
    -------
    FairClassifier, FairRegressor, SavedModel, FitResult or History

    Raises
    ------
    FileNotFoundError
        No file at ``path``.
    ValueError
        Naming the file: not a fairopt file, truncated or corrupted, objects other than tensors and
        plain values, an unsupported version, unknown or missing keys, a wrong checksum, a custom
        model without ``model=``, weights that do not fit the architecture.

    Warns
    -----
    UserWarning
        Format version 1 (before checksums): read, but its integrity cannot be verified.
    """
    return _read_checked(path, lambda payload: _load_payload(payload, model))


def read_metadata(path: PathLike) -> dict:
    """The ``metadata`` dict :func:`save` stored in ``path`` (for any kind of file; a loaded estimator does
    not carry it), after the checks of :func:`load` (header, structure, checksum)."""
    return _read_checked(path, lambda payload: dict(payload["metadata"]))


def _read_checked(path: PathLike, take: Callable[[dict], Any]) -> Any:
    """``take`` of the file's payload once its header, structure and checksum are checked; errors name the file."""
    name = os.fspath(path)
    payload = read_payload(name)
    try:
        version = check_header(payload)
        check_structure(payload, version)
        verify_checksum(payload, version, name)
        return take(payload)
    except (ValueError, KeyError, TypeError) as exc:
        detail = str(exc) if isinstance(exc, ValueError) else f"invalid content ({type(exc).__name__}: {exc})"
        raise ValueError(f"{name!r}: {detail}") from exc


def _load_payload(payload: dict, model: Any) -> Any:
    """The saved object of a checked payload."""
    kind = payload["kind"]
    if kind == "estimator":
        return _load_estimator(payload, model)
    if kind == "model":
        return SavedModel(
            model=load_module(payload["model"], model),
            preprocessor=_load_preprocessor(payload["preprocessor"]),
            constraints=[constraint_from_spec(spec) for spec in payload["constraints"]],
            schema=payload["schema"],
            metadata=payload["metadata"],
        )
    if kind == "fit_result":
        return FitResult(model=load_module(payload["model"], model), history=_load_history(payload["history"]),
                         status=payload["status"], converged=payload["converged"], info=payload["info"])
    return _load_history(payload["history"])


# --------------------------------------------------------------------------------------
# reading
# --------------------------------------------------------------------------------------
def _load_preprocessor(state: dict | None) -> Preprocessor | None:
    """A fitted Preprocessor with the saved allow-listed attributes."""
    if state is None:
        return None
    if state["_fitted"] is not True:
        raise ValueError(f"preprocessor: the saved preprocessor is not fitted (_fitted = {state['_fitted']!r})")
    preprocessor = Preprocessor.__new__(Preprocessor)
    for attribute in PREPROCESSOR_ATTRIBUTES:
        default = copy.copy(OPTIONAL_PREPROCESSOR_ATTRIBUTES.get(attribute))  # a fresh {} per preprocessor
        setattr(preprocessor, attribute, state.get(attribute, default))
    if not isinstance(preprocessor.display_names, dict) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in preprocessor.display_names.items()):
        raise ValueError("preprocessor: 'display_names' must map column names to names (text to text)")
    if preprocessor.missing not in MISSING_MODES:
        raise ValueError(f"preprocessor: 'missing' must be one of {MISSING_MODES}, got {preprocessor.missing!r}")
    return preprocessor


def _load_history(payload: dict) -> History:
    return History(row_names=payload["row_names"], records=payload["records"])


def _positive_label(classes: np.ndarray, fitted: dict) -> Any:
    """The element of ``classes`` the file names as ``pos_label_`` (``classes[1]`` for older files)."""
    if "pos_label_" not in fitted:
        return classes[1]
    matches = [c for c in classes if c == fitted["pos_label_"]]
    if not matches:
        raise ValueError(f"'fitted' attributes of FairClassifier: pos_label_ {fitted['pos_label_']!r} is not one of "
                         f"classes_ {classes.tolist()}")
    return matches[0]


def _set_held_out(estimator: Any, fitted: dict) -> None:
    """The held-out statements of the fit (None where the file has none, as files written before they were
    saved)."""
    from fairopt.certificate import Certificate

    certificates = fitted.get("certificate_")
    estimator.certificate_ = None if certificates is None else [Certificate(**c) for c in certificates]
    for attribute in ("candidates_", "predicted_held_out_"):
        table = fitted.get(attribute)
        setattr(estimator, attribute, None if table is None else pd.DataFrame(**table))
    indices = fitted.get("validation_indices_")
    estimator.validation_indices_ = None if indices is None else np.asarray(indices, dtype=np.int64)


def _constraints_param(saved: list | None, form: dict | None) -> Any:
    """The ``constraints`` parameter in the form it was given: constraint objects rebuilt from their tables,
    one spec unwrapped from its list (files without the form keep the saved list)."""
    if saved is None or not form:
        return saved
    specs = [constraint_from_spec(spec) if is_object else spec for spec, is_object in zip(saved, form["objects"])]
    return specs[0] if form["single"] and len(specs) == 1 else specs


def _load_estimator(payload: dict, model: Any) -> Any:
    """The estimator with its parameters and the allow-listed fitted attributes."""
    params = dict(payload["params"])
    if params["model"] == "custom":
        if not callable(model) or isinstance(model, nn.Module):
            raise ValueError("model: this estimator was built with a custom model factory; pass load(..., "
                             "model=factory) with the same factory")
        params["model"] = model
    fitted = payload["fitted"]
    params["constraints"] = _constraints_param(params["constraints"], fitted.get("constraints_param_form"))
    estimator = ESTIMATOR_CLASSES[payload["class"]](**params)
    if isinstance(estimator, FairClassifier):
        estimator.classes_ = np.asarray(fitted["classes_"], dtype=np.dtype(fitted["classes_dtype"]))
        estimator.pos_label_ = _positive_label(estimator.classes_, fitted)
    if fitted["feature_names_in_"] is not None:
        estimator.feature_names_in_ = np.asarray(fitted["feature_names_in_"], dtype=object)
    estimator.dropped_columns_ = [str(name) for name in fitted.get("dropped_columns_", [])]
    estimator.status_message_ = str(fitted.get("status_message_", ""))
    for attribute in FITTED_ATTRIBUTES:
        setattr(estimator, attribute, fitted[attribute])
    _set_held_out(estimator, fitted)
    estimator.model_ = load_module(payload["model"], model)
    estimator.preprocessor_ = _load_preprocessor(payload["preprocessor"])
    estimator.constraints_ = [constraint_from_spec(spec) for spec in payload["constraints"]]
    estimator.history_ = _load_history(payload["history"])
    return estimator
