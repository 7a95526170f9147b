"""Writing a file: :func:`save` and the payload of each kind of object (estimator, torch model,
FitResult, History) as tensors and plain values."""

from __future__ import annotations

import json
import logging
import os
from typing import Any

import numpy as np
import torch
from sklearn.utils.validation import check_is_fitted
from torch import nn

from fairopt.data import FairData, Preprocessor
from fairopt.estimators import FairClassifier, FairRegressor
from solvers.history import plain_values
from fairopt.persistence.format import FORMAT, FORMAT_VERSION, PREPROCESSOR_ATTRIBUTES, PathLike, checksum
from fairopt.persistence.modules import module_of, module_payload
from fairopt.specs import is_constraint_object, is_single_spec, saved_spec, spec_list
from fairopt.sklearn_learner import is_sklearn_model
from solvers.history import FitResult, History

__all__ = ["save"]

# records under the package logger "fairopt.persistence"
logger = logging.getLogger(__package__)


def save(
    obj: Any,
    path: PathLike,
    *,
    data: FairData | None = None,
    preprocessor: Preprocessor | None = None,
    constraints: Any = (),
    metadata: dict | None = None,
) -> None:
    """Write a fitted estimator, a torch model, a FitResult or a History to ``path``.

    Parameters
    ----------
    obj : FairClassifier, FairRegressor, torch.nn.Module, FitResult or History
        A fitted estimator is saved whole (parameters, model, preprocessing, constraints,
        history and fitted attributes).
    path : str or path-like
    data : FairData, optional
        For a model or FitResult: store its preprocessor and the description of its columns
        (``SavedModel.schema``), never its rows.
    preprocessor : Preprocessor, optional
        For a model or FitResult: a fitted preprocessor (instead of ``data``'s).
    constraints : constraint objects or specs, optional
        For a model or FitResult: the constraints it was trained under.
    metadata : dict, optional
        Plain values stored as they are.

    Raises
    ------
    ValueError
        An unfitted estimator, another type, an unfitted preprocessor, values that are not plain,
        or an estimator whose ``model`` is a scikit-learn estimator (pickle it instead).
    """
    payload = {"format": FORMAT, "format_version": FORMAT_VERSION, "metadata": _plain(metadata or {}, "metadata")}
    payload.update(_payload(obj, data, preprocessor, constraints))
    payload["checksum"] = checksum(payload)
    torch.save(payload, os.fspath(path))
    logger.debug("saved %s to %s", payload["kind"], path)


# --------------------------------------------------------------------------------------
# writing
# --------------------------------------------------------------------------------------
def _payload(obj: Any, data: Any, preprocessor: Any, constraints: Any) -> dict:
    """The kind-specific part of the file."""
    if isinstance(obj, (FairClassifier, FairRegressor)):
        return {"kind": "estimator", **_estimator_payload(obj)}
    if isinstance(obj, History):
        return {"kind": "history", "history": _history_payload(obj)}
    if isinstance(obj, FitResult):
        module = module_of(obj.model)
        return {"kind": "fit_result", "model": module_payload(module), "history": _history_payload(obj.history),
                "status": str(obj.status), "converged": bool(obj.converged), "info": plain_values(obj.info),
                **_context_payload(data, preprocessor, constraints)}
    if isinstance(obj, nn.Module):
        return {"kind": "model", "model": module_payload(obj), **_context_payload(data, preprocessor, constraints)}
    raise ValueError(f"obj: expected a fitted FairClassifier/FairRegressor, a torch.nn.Module, a FitResult or a "
                     f"History, got {type(obj).__name__}")


def _context_payload(data: Any, preprocessor: Any, constraints: Any) -> dict:
    """Preprocessor, data description and constraint specs saved beside a bare model."""
    if data is not None and not isinstance(data, FairData):
        raise ValueError(f"data: expected a FairData, got {type(data).__name__}")
    if preprocessor is None and data is not None:
        preprocessor = data.preprocessor
    schema = None if data is None else _plain({
        "task": data.task, "target_name": data.target_name, "feature_columns": data.feature_columns,
        "feature_names": data.feature_names, "sensitive_names": data.sensitive_names,
        "sensitive_kinds": data.sensitive_kinds, "sensitive_levels": data.sensitive_levels,
    }, "data")
    return {"preprocessor": _preprocessor_payload(preprocessor), "schema": schema,
            "constraints": [saved_spec(spec) for spec in spec_list(constraints)]}


def _param_spec(spec: Any) -> Any:
    """A constraint as given to an estimator: plain specs are kept as they are, objects
    (or specs holding objects) become tables."""
    if not is_constraint_object(spec):
        try:
            return _plain(spec, "constraints")
        except ValueError:
            pass
    return saved_spec(spec)


def _estimator_payload(est: Any) -> dict:
    """Parameters, fitted attributes, model, preprocessing, constraints and history."""
    check_is_fitted(est)
    params = est.get_params(deep=False)
    model_param = params["model"]
    if is_sklearn_model(model_param):
        raise ValueError(f"save: model={type(model_param).__name__}(...) is a scikit-learn estimator, whose fitted "
                         "state is not a torch state dict; save this estimator with pickle or joblib, as any "
                         "scikit-learn estimator")
    given = params["constraints"]
    params["constraints"] = None if given is None else [_param_spec(spec) for spec in spec_list(given)]
    params["model"] = model_param if isinstance(model_param, str) else "custom"
    fitted = {
        "n_features_in_": int(est.n_features_in_),
        "feature_names_in_": list(getattr(est, "feature_names_in_", [])) or None,
        "dropped_columns_": list(getattr(est, "dropped_columns_", [])),
        "status_": est.status_, "status_message_": getattr(est, "status_message_", ""),
        "converged_": est.converged_, "n_iter_": est.n_iter_,
        "train_violations_": est.train_violations_, "train_violation_": est.train_violation_,
        "reference_violations_": est.reference_violations_, "engine_info_": est.engine_info_,
        "sensitive_names_": est.sensitive_names_, "sensitive_kinds_": est.sensitive_kinds_,
        "sensitive_levels_": est.sensitive_levels_,
    }
    fitted.update(_held_out_payload(est))
    if given is not None:  # the parameter's form, so that load gives back what get_params gave
        fitted["constraints_param_form"] = {"single": is_single_spec(given),
                                            "objects": [is_constraint_object(spec) for spec in spec_list(given)]}
    if hasattr(est, "classes_"):
        fitted["classes_"] = est.classes_.tolist()
        fitted["classes_dtype"] = est.classes_.dtype.str
        fitted["pos_label_"] = est.pos_label_
    return {
        "class": type(est).__name__,
        "params": _plain(params, "params"),
        "fitted": _plain(fitted, "fitted attributes"),
        "model": module_payload(est.model_, n_features=est.preprocessor_.n_features),
        "preprocessor": _preprocessor_payload(est.preprocessor_),
        "constraints": [saved_spec(c) for c in est.constraints_],
        "history": _history_payload(est.history_),
    }


def _held_out_payload(est: Any) -> dict:
    """The fit's held-out statements (:data:`~fairopt.persistence.format.HELD_OUT_ATTRIBUTES`) as plain values."""
    certificates = getattr(est, "certificate_", None)
    indices = getattr(est, "validation_indices_", None)
    return {"certificate_": None if certificates is None else [c.to_dict() for c in certificates],
            "candidates_": _frame_payload(getattr(est, "candidates_", None)),
            "predicted_held_out_": _frame_payload(getattr(est, "predicted_held_out_", None)),
            "validation_indices_": None if indices is None else np.asarray(indices).tolist()}


def _frame_payload(frame: Any) -> dict | None:
    """A table as ``DataFrame.to_dict("split")`` (index, columns, data), or None."""
    return None if frame is None else frame.to_dict(orient="split")


def _preprocessor_payload(preprocessor: Any) -> dict | None:
    """The fitted preprocessor's attributes as plain values."""
    if preprocessor is None:
        return None
    if not isinstance(preprocessor, Preprocessor) or not preprocessor.is_fitted:
        raise ValueError(f"preprocessor: expected a fitted Preprocessor, got {preprocessor!r}")
    return _plain({name: getattr(preprocessor, name) for name in PREPROCESSOR_ATTRIBUTES}, "preprocessor")


def _history_payload(history: History) -> dict:
    """Row names and records as plain values (numpy numbers become Python numbers)."""
    records = json.loads(json.dumps(history.records, default=_json_default))
    return {"row_names": list(history.row_names), "records": records}


def _json_default(value: Any) -> Any:
    if isinstance(value, (np.generic, torch.Tensor, np.ndarray)):
        return value.tolist()
    return str(value)


def _plain(value: Any, where: str) -> Any:
    """``value`` with numpy scalars/arrays turned into Python values; ValueError for
    anything that is not a number, string, None, list, tuple, dict or tensor."""
    if isinstance(value, np.generic):  # first: numpy.str_ and numpy.float64 are str and float too
        return value.item()
    if value is None or isinstance(value, (bool, int, float, str, torch.Tensor)):
        return value
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, dict):
        return {_plain(k, where): _plain(v, where) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        items = [_plain(v, where) for v in value]
        return tuple(items) if isinstance(value, tuple) else items
    raise ValueError(f"{where}: {value!r} ({type(value).__name__}) cannot be saved; only numbers, strings, "
                     "lists and dicts can")
