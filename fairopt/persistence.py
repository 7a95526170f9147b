"""Saving and loading fitted estimators, torch models, fit results and histories.

:func:`save` writes one ``torch.save`` file holding a dict with a format tag and version.
Everything in it is a tensor or a plain Python value (numbers, strings, lists, tuples,
dicts), so :func:`load` reads it with ``torch.load(path, weights_only=True)``: loading a
file never runs code from it. What is stored:

- models as their ``state_dict`` plus an architecture spec: ``fairopt.models.linear`` and
  ``fairopt.models.mlp`` networks are recognised (their spec rebuilds them); any other
  module is stored as ``"custom"`` and :func:`load` needs ``model=`` (an instance of the
  architecture, or for an estimator its factory);
- the fitted :class:`~fairopt.data.Preprocessor` (column roles, training means and
  scales, one-hot levels);
- constraints as spec tables (:func:`fairopt.specs.constraint_to_spec`), with a GeDI
  relative bound resolved to the absolute bound it took on the training data;
- histories as their records.

The training data itself is never stored: no data tensor, no Moving Targets targets.

Integrity. Beside ``format_version`` the file stores ``checksum``, ``"sha256:<hex>"`` of a
canonical serialisation of every other entry (each tensor by dtype, shape and raw bytes;
numbers, strings, lists, tuples and dicts by type and value, dict entries in a fixed
order). :func:`load` reads only this format, refuses a file whose checksum does not match
its content, whose entries are not exactly the expected keys (unknown or missing), or
whose version it does not know, and restores only a fixed list of attributes on the
loaded objects, never one named by the file. Every such error is a ``ValueError`` naming
the file. Files of format version 1 (written before checksums existed) carry none: they
are still read, with the same key checks, and a ``UserWarning`` says that their integrity
cannot be verified and that saving them again adds a checksum.

Loaded estimators predict exactly like the saved ones. Their constraints are rebuilt
from the specs and, for :meth:`~fairopt.FairClassifier.evaluate` and
:meth:`~fairopt.FairClassifier.check_generalisation`, set up on the rows given there:
identical to the training set-up for the rate, covariance and distance-covariance
constraints (their set-up reads only the groups, which must match the training groups),
while a GeDI constraint standardises its attribute with the statistics of those rows
instead of the training ones.

To continue an SQP training from a checkpoint, save ``model.state_dict()`` and
``engine.state_dict()`` (:meth:`solvers.StochasticSQP.state_dict`) with ``torch.save`` and
pass the latter to ``fit(..., resume=...)``.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import warnings
import zipfile
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np
import torch
from sklearn.utils.validation import check_is_fitted
from torch import nn

from fairopt import models
from fairopt.data import FairData, Preprocessor
from fairopt.estimators import FairClassifier, FairRegressor, OutputScale, plain_info
from fairopt.specs import constraint_from_spec, constraint_to_spec, is_constraint_object, spec_list
from solvers.history import FitResult, History

__all__ = ["save", "load", "SavedModel", "FORMAT", "FORMAT_VERSION"]

logger = logging.getLogger(__name__)

FORMAT = "fairopt"
FORMAT_VERSION = 2
#: Versions :func:`load` reads; version 1 files have no checksum (read with a warning).
_READABLE_VERSIONS = (1, 2)
_VERSIONS_WITHOUT_CHECKSUM = (1,)
_KINDS = ("estimator", "model", "fit_result", "history")
_ZIP_MAGIC = b"PK\x03\x04"  # torch.save writes a zip archive
_CHECKSUM_PREFIX = "sha256:"

#: Top-level entries: common to every file, then by content kind.
_COMMON_KEYS = frozenset({"format", "format_version", "metadata", "kind"})
_CONTEXT_KEYS = frozenset({"preprocessor", "schema", "constraints"})
_KIND_KEYS = {
    "estimator": frozenset({"class", "params", "fitted", "model", "preprocessor", "constraints", "history"}),
    "model": frozenset({"model"}) | _CONTEXT_KEYS,
    "fit_result": frozenset({"model", "history", "status", "converged", "info"}) | _CONTEXT_KEYS,
    "history": frozenset({"history"}),
}
_MODULE_KEYS = frozenset({"spec", "state_dict"})
_HISTORY_KEYS = frozenset({"row_names", "records"})
_SCHEMA_KEYS = frozenset({"task", "target_name", "feature_columns", "feature_names", "sensitive_names",
                          "sensitive_kinds", "sensitive_levels"})
_SPEC_KEYS = {
    "linear": frozenset({"kind", "n_features", "bias"}),
    "mlp": frozenset({"kind", "n_features", "bias", "activation", "hidden"}),
    "output_scale": frozenset({"kind", "inner"}),
    "custom": frozenset({"kind", "class", "n_features"}),
}
#: The only attributes :func:`load` sets on an estimator (``feature_names_in_`` and, for a
#: classifier, ``classes_`` are rebuilt as arrays) and on a Preprocessor.
_FITTED_ATTRIBUTES = ("n_features_in_", "status_", "converged_", "n_iter_", "train_violations_",
                      "train_violation_", "reference_violations_", "engine_info_", "sensitive_names_",
                      "sensitive_kinds_", "sensitive_levels_")
_FITTED_KEYS = frozenset(_FITTED_ATTRIBUTES) | {"feature_names_in_"}
_CLASSIFIER_FITTED_KEYS = frozenset({"classes_", "classes_dtype"})
_PREPROCESSOR_ATTRIBUTES = ("columns", "categorical", "standardize", "columns_", "categorical_", "numeric_",
                            "means_", "scales_", "levels_", "feature_names_", "_fitted")

PathLike = str | os.PathLike


@dataclass
class SavedModel:
    """A torch model loaded by :func:`load` with what was saved beside it.

    Attributes
    ----------
    model : torch.nn.Module
        The model, in eval mode.
    preprocessor : Preprocessor or None
        Encodes raw rows into the model's inputs (:meth:`encode`).
    constraints : list
        Constraint objects rebuilt from their specs (not set up: call ``setup(data)``
        before evaluating them).
    schema : dict or None
        What a :class:`~fairopt.data.FairData` passed to :func:`save` described: ``task``,
        ``target_name``, ``feature_columns``, ``feature_names``, ``sensitive_names``,
        ``sensitive_kinds``, ``sensitive_levels``.
    metadata : dict
        The ``metadata`` given to :func:`save`.
    """

    model: nn.Module
    preprocessor: Preprocessor | None = None
    constraints: list = field(default_factory=list)
    schema: dict | None = None
    metadata: dict = field(default_factory=dict)

    def encode(self, frame: Any) -> torch.Tensor:
        """Model inputs (float32 tensor) of a DataFrame of raw rows, with the saved
        preprocessing (training statistics)."""
        if self.preprocessor is None:
            raise ValueError("encode: no preprocessor was saved with this model")
        X, _ = self.preprocessor.transform(frame)
        return torch.from_numpy(X)


# --------------------------------------------------------------------------------------
# public API
# --------------------------------------------------------------------------------------
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
        For a torch model or FitResult: store ``data.preprocessor`` and the description of
        its columns and sensitive features (``SavedModel.schema``), never its rows.
    preprocessor : Preprocessor, optional
        For a torch model or FitResult: a fitted preprocessor (instead of ``data``'s).
    constraints : constraint objects or specs, optional
        For a torch model or FitResult: the constraints it was trained under.
    metadata : dict, optional
        Plain values (numbers, strings, lists, dicts) stored as they are.

    Raises
    ------
    ValueError
        An unfitted estimator, an object of another type, a preprocessor that is not
        fitted, values that are not plain (e.g. a callback in ``engine_params``).
    """
    payload = {"format": FORMAT, "format_version": FORMAT_VERSION, "metadata": _plain(metadata or {}, "metadata")}
    payload.update(_payload(obj, data, preprocessor, constraints))
    payload["checksum"] = _checksum(payload)
    torch.save(payload, os.fspath(path))
    logger.debug("saved %s to %s", payload["kind"], path)


def load(path: PathLike, *, model: nn.Module | Callable[[int], nn.Module] | None = None) -> Any:
    """Read what :func:`save` wrote (safely: ``torch.load(..., weights_only=True)``).

    Parameters
    ----------
    path : str or path-like
    model : torch.nn.Module or callable, optional
        Needed when a custom (not ``fairopt.models``) module was saved: an instance of the
        same architecture to load the weights into, or a factory ``n_features -> module``
        (an estimator built with ``model=factory`` takes the factory: it becomes the
        loaded estimator's ``model`` parameter).

    Returns
    -------
    FairClassifier, FairRegressor, SavedModel, FitResult or History

    Raises
    ------
    FileNotFoundError
        No file at ``path``.
    ValueError
        Always naming the file: not a fairopt file (empty, not a torch archive, or not
        written by :func:`save`), truncated or corrupted, objects other than tensors and
        plain values inside, an unsupported format version, unknown or missing keys, a
        checksum that does not match the content, a custom model without ``model=``,
        weights that do not fit the given architecture.

    Warns
    -----
    UserWarning
        The file has format version 1, written before checksums existed: it is read, but
        its integrity cannot be verified (save it again to add a checksum).
    """
    name = os.fspath(path)
    payload = _read_payload(name)
    try:
        version = _check_header(payload)
        _check_structure(payload, version)
        _verify_checksum(payload, version, name)
        return _load_payload(payload, model)
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
            model=_load_module(payload["model"], model),
            preprocessor=_load_preprocessor(payload["preprocessor"]),
            constraints=[constraint_from_spec(spec) for spec in payload["constraints"]],
            schema=payload["schema"],
            metadata=payload["metadata"],
        )
    if kind == "fit_result":
        return FitResult(model=_load_module(payload["model"], model), history=_load_history(payload["history"]),
                         status=payload["status"], converged=payload["converged"], info=payload["info"])
    return _load_history(payload["history"])


# --------------------------------------------------------------------------------------
# file integrity: reading, header, keys, checksum
# --------------------------------------------------------------------------------------
_ESTIMATOR_CLASSES = {"FairClassifier": FairClassifier, "FairRegressor": FairRegressor}


def _read_payload(name: str) -> Any:
    """``torch.load(name, weights_only=True)`` with a ValueError naming the file when it
    is empty, not a torch archive, truncated or corrupted, or holds arbitrary objects."""
    with open(name, "rb") as handle:
        head = handle.read(len(_ZIP_MAGIC))
    if not head:
        raise ValueError(f"{name!r} is not a fairopt file: it is empty (0 bytes)")
    if head != _ZIP_MAGIC:
        raise ValueError(f"{name!r} is not a fairopt file (not a file written by fairopt.save): it is not a "
                         f"torch.save zip archive (it starts with {head!r})")
    try:
        return torch.load(name, weights_only=True)
    except Exception as exc:  # torch reports a damaged archive with many exception types
        first_line = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        if "Weights only load failed" in str(exc):
            raise ValueError(f"{name!r}: refusing to load it: it holds objects other than tensors and plain "
                             f"values, which fairopt.save never writes ({first_line})") from exc
        what = "truncated" if not zipfile.is_zipfile(name) else "corrupted"
        raise ValueError(f"{name!r} is {what}: the torch.save archive cannot be read; the file was cut short "
                         f"or damaged after it was saved ({type(exc).__name__}: {first_line})") from exc


def _check_header(payload: Any) -> int:
    """The format version of a fairopt payload (ValueError for another file or version)."""
    if not isinstance(payload, dict) or payload.get("format") != FORMAT:
        found = f"keys {_sorted_keys(payload)}" if isinstance(payload, dict) else f"a {type(payload).__name__}"
        raise ValueError(f"not a fairopt file (not a file written by fairopt.save): no 'format': {FORMAT!r} "
                         f"entry (the archive holds {found})")
    version = payload.get("format_version")
    if isinstance(version, bool) or version not in _READABLE_VERSIONS:
        raise ValueError(f"unsupported format version {version!r} (this fairopt reads versions "
                         f"{', '.join(map(str, _READABLE_VERSIONS))}; a newer fairopt may have written it)")
    return int(version)


def _sorted_keys(table: dict) -> list[str]:
    return sorted(map(str, table))


def _require_keys(table: Any, expected: frozenset, where: str, allow_missing: bool = False) -> dict:
    """``table`` if it is a dict with exactly the keys ``expected`` (``allow_missing``: a
    subset of them), else ValueError."""
    if not isinstance(table, dict):
        raise ValueError(f"{where}: expected a table (dict), got {type(table).__name__}")
    unknown = _sorted_keys({k: None for k in table if k not in expected})
    missing = [] if allow_missing else sorted(expected - set(table))
    if unknown or missing:
        parts = ([f"unknown keys {unknown}"] if unknown else []) + ([f"missing keys {missing}"] if missing else [])
        raise ValueError(f"{where}: {' and '.join(parts)} (expected exactly {sorted(expected)})")
    return table


def _check_structure(payload: dict, version: int) -> None:
    """Exactly the expected keys at every level whose keys the loader reads."""
    kind = payload.get("kind")
    if kind not in _KIND_KEYS:
        raise ValueError(f"unknown content kind {kind!r}; expected one of {_KINDS}")
    common = _COMMON_KEYS if version in _VERSIONS_WITHOUT_CHECKSUM else _COMMON_KEYS | {"checksum"}
    _require_keys(payload, common | _KIND_KEYS[kind], f"top level of a {kind!r} file")
    if kind in ("estimator", "fit_result", "history"):
        _require_keys(payload["history"], _HISTORY_KEYS, "'history'")
    if kind == "history":
        return
    _check_module(payload["model"])
    if payload["preprocessor"] is not None:
        _require_keys(payload["preprocessor"], frozenset(_PREPROCESSOR_ATTRIBUTES), "'preprocessor'")
    if kind == "estimator":
        _check_estimator(payload)
    elif payload["schema"] is not None:
        _require_keys(payload["schema"], _SCHEMA_KEYS, "'schema'")


def _check_module(table: Any) -> None:
    """The ``{"spec", "state_dict"}`` table of a module: spec keys by kind, tensor weights."""
    _require_keys(table, _MODULE_KEYS, "'model'")
    _check_spec(table["spec"], "'model.spec'")
    state = table["state_dict"]
    if not isinstance(state, dict) or not all(isinstance(k, str) and isinstance(v, torch.Tensor)
                                              for k, v in state.items()):
        raise ValueError("'model.state_dict': expected a table of parameter names to tensors")


def _check_spec(spec: Any, where: str) -> None:
    kind = spec.get("kind") if isinstance(spec, dict) else None
    if kind not in _SPEC_KEYS:
        raise ValueError(f"{where}: unknown architecture kind {kind!r}; expected one of {sorted(_SPEC_KEYS)}")
    _require_keys(spec, _SPEC_KEYS[kind], where)
    if kind == "output_scale":
        _check_spec(spec["inner"], f"{where[:-1]}.inner'")


def _check_estimator(payload: dict) -> None:
    """Known class, only its constructor parameters (absent ones take their defaults),
    exactly the allow-listed attributes."""
    cls = _ESTIMATOR_CLASSES.get(payload["class"])
    if cls is None:
        raise ValueError(f"'class': unknown estimator class {payload['class']!r}; expected one of "
                         f"{sorted(_ESTIMATOR_CLASSES)}")
    # parameters added after a file was written are absent from it: they take their defaults
    _require_keys(payload["params"], frozenset(cls._get_param_names()), f"'params' of {cls.__name__}",
                  allow_missing=True)
    fitted_keys = _FITTED_KEYS | (_CLASSIFIER_FITTED_KEYS if cls is FairClassifier else frozenset())
    _require_keys(payload["fitted"], fitted_keys, f"'fitted' attributes of {cls.__name__}")


def _verify_checksum(payload: dict, version: int, name: str) -> None:
    """Compare the stored checksum with the content's (warn for files without one)."""
    if version in _VERSIONS_WITHOUT_CHECKSUM:
        warnings.warn(f"{name!r} has format version {version}, written before fairopt files carried a "
                      "checksum: its integrity cannot be verified. Load it once and save it again with "
                      "fairopt.save to add one.", UserWarning, stacklevel=3)
        return
    stored = payload["checksum"]
    if not (isinstance(stored, str) and stored.startswith(_CHECKSUM_PREFIX)):
        raise ValueError(f"malformed checksum {stored!r}; expected '{_CHECKSUM_PREFIX}<64 hex digits>'")
    content = {k: v for k, v in payload.items() if k != "checksum"}
    actual = _checksum(content)
    if actual != stored:
        raise ValueError(f"checksum mismatch: the file records {stored} but its content hashes to {actual}; it "
                         "was modified or corrupted after fairopt.save wrote it")


def _checksum(content: dict) -> str:
    """``"sha256:<hex>"`` of the canonical serialisation of ``content`` (:func:`_digest`)."""
    digest = hashlib.sha256()
    _digest(content, digest)
    return _CHECKSUM_PREFIX + digest.hexdigest()


def _digest(value: Any, digest: Any) -> None:
    """Feed a canonical, unambiguous serialisation of ``value`` to ``digest``.

    Every item starts with a type tag; strings and containers carry their length; floats
    are written exactly (``float.hex``); dict entries are ordered by the serialisation of
    their keys (independent of insertion order); tensors contribute dtype, shape and the
    raw bytes of their contiguous CPU copy. Anything else is a ValueError.
    """
    if value is None:
        digest.update(b"N")
    elif isinstance(value, bool):
        digest.update(b"B1" if value else b"B0")
    elif isinstance(value, int):
        digest.update(b"I%d;" % value)
    elif isinstance(value, float):
        digest.update(b"F" + value.hex().encode() + b";")
    elif isinstance(value, str):
        _digest_bytes(b"S", value.encode("utf-8", "surrogatepass"), digest)
    elif isinstance(value, torch.Tensor):
        _digest_tensor(value, digest)
    elif isinstance(value, dict):
        entries = sorted((_serialised(k), v) for k, v in value.items())
        digest.update(b"D%d:" % len(entries))
        for key, item in entries:
            digest.update(key)
            _digest(item, digest)
    elif isinstance(value, (list, tuple)):
        digest.update((b"L%d:" if isinstance(value, list) else b"T%d:") % len(value))
        for item in value:
            _digest(item, digest)
    else:
        raise ValueError(f"content of type {type(value).__name__} ({value!r:.60}) is not a tensor or plain value")


def _serialised(value: Any) -> bytes:
    """The canonical serialisation of ``value`` as bytes (for ordering dict keys)."""
    collector = _Collector()
    _digest(value, collector)
    return bytes(collector.data)


class _Collector:
    """A stand-in for a hash object that keeps what it is fed."""

    def __init__(self) -> None:
        self.data = bytearray()

    def update(self, chunk: bytes) -> None:
        self.data += chunk


def _digest_bytes(tag: bytes, data: bytes, digest: Any) -> None:
    digest.update(tag + b"%d:" % len(data))
    digest.update(data)


def _digest_tensor(tensor: torch.Tensor, digest: Any) -> None:
    """Dtype, shape and raw bytes of a dense tensor."""
    if tensor.layout != torch.strided:
        raise ValueError(f"a {tensor.layout} tensor cannot be checksummed; only dense tensors are saved")
    flat = tensor.detach().cpu().contiguous().reshape(-1)
    raw = flat.view(torch.uint8) if flat.dtype != torch.uint8 else flat
    digest.update(b"X" + str(tensor.dtype).encode() + b"(" + ",".join(map(str, tensor.shape)).encode() + b")")
    _digest_bytes(b"", raw.numpy().tobytes(), digest)


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
        module = _module_of(obj.model)
        return {"kind": "fit_result", "model": _module_payload(module), "history": _history_payload(obj.history),
                "status": str(obj.status), "converged": bool(obj.converged), "info": plain_info(obj.info),
                **_context_payload(data, preprocessor, constraints)}
    if isinstance(obj, nn.Module):
        return {"kind": "model", "model": _module_payload(obj), **_context_payload(data, preprocessor, constraints)}
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
            "constraints": [_constraint_spec(spec) for spec in spec_list(constraints)]}


def _constraint_spec(spec: Any) -> dict:
    """A plain table rebuilding a constraint given as an object (a set-up GeDI with a
    relative bound gets its resolved absolute bound) or as any spec form."""
    if is_constraint_object(spec):
        return constraint_to_spec(spec, resolved=getattr(spec, "absolute_bound", None) is not None)
    return constraint_to_spec(constraint_from_spec(spec))


def _param_spec(spec: Any) -> Any:
    """A constraint as given to an estimator: plain specs are kept as they are, objects
    (or specs holding objects) become tables."""
    if not is_constraint_object(spec):
        try:
            return _plain(spec, "constraints")
        except ValueError:
            pass
    return _constraint_spec(spec)


def _estimator_payload(est: Any) -> dict:
    """Parameters, fitted attributes, model, preprocessing, constraints and history."""
    check_is_fitted(est)
    params = est.get_params(deep=False)
    model_param = params["model"]
    params["constraints"] = None if params["constraints"] is None else [
        _param_spec(spec) for spec in spec_list(params["constraints"])]
    params["model"] = model_param if isinstance(model_param, str) else "custom"
    fitted = {
        "n_features_in_": int(est.n_features_in_),
        "feature_names_in_": list(getattr(est, "feature_names_in_", [])) or None,
        "status_": est.status_, "converged_": est.converged_, "n_iter_": est.n_iter_,
        "train_violations_": est.train_violations_, "train_violation_": est.train_violation_,
        "reference_violations_": est.reference_violations_, "engine_info_": est.engine_info_,
        "sensitive_names_": est.sensitive_names_, "sensitive_kinds_": est.sensitive_kinds_,
        "sensitive_levels_": est.sensitive_levels_,
    }
    if hasattr(est, "classes_"):
        fitted["classes_"] = est.classes_.tolist()
        fitted["classes_dtype"] = est.classes_.dtype.str
    return {
        "class": type(est).__name__,
        "params": _plain(params, "params"),
        "fitted": _plain(fitted, "fitted attributes"),
        "model": _module_payload(est.model_, n_features=est.preprocessor_.n_features),
        "preprocessor": _preprocessor_payload(est.preprocessor_),
        "constraints": [_constraint_spec(c) for c in est.constraints_],
        "history": _history_payload(est.history_),
    }


def _module_of(model: Any) -> nn.Module:
    """The torch module of a FitResult's model (a TorchLearner's ``module_``)."""
    if isinstance(model, nn.Module):
        return model
    module = getattr(model, "module_", None)
    if isinstance(module, nn.Module):
        return module
    raise ValueError(f"obj: the FitResult's model is a {type(model).__name__}, not a torch module; only torch "
                     "models can be saved")


def _module_payload(module: nn.Module, n_features: int | None = None) -> dict:
    """Architecture spec and a detached copy of the state dict; ``n_features`` (the input
    width) is recorded for a custom module, to call its factory at load time."""
    state = {k: v.detach().cpu().clone() for k, v in module.state_dict().items()}
    return {"spec": _architecture(module, n_features), "state_dict": state}


def _architecture(module: nn.Module, n_features: int | None = None) -> dict:
    """The spec that rebuilds ``module`` (module docstring); ``custom`` if not recognised."""
    children = list(module.children()) if isinstance(module, nn.Sequential) else []
    if len(children) == 2 and isinstance(children[1], OutputScale):
        return {"kind": "output_scale", "inner": _architecture(children[0], n_features)}
    spec = _fairopt_model_spec(children)
    if spec is not None and repr(_build_architecture(spec)) == repr(module):
        return spec
    return {"kind": "custom", "class": f"{type(module).__module__}.{type(module).__qualname__}",
            "n_features": n_features if n_features is not None else _first_in_features(module)}


def _fairopt_model_spec(children: list[nn.Module]) -> dict | None:
    """The ``fairopt.models.linear``/``mlp`` arguments the layers suggest (None if none);
    :func:`_architecture` confirms them by comparing the rebuilt module."""
    linears = [m for m in children if isinstance(m, nn.Linear)]
    if not linears:
        return None
    n_features, bias = linears[0].in_features, linears[0].bias is not None
    if len(linears) == 1:
        return {"kind": "linear", "n_features": n_features, "bias": bias}
    activation = next((name for name, cls in models.ACTIVATIONS.items() if any(type(m) is cls for m in children)),
                      None)
    if activation is None:
        return None
    return {"kind": "mlp", "n_features": n_features, "bias": bias, "activation": activation,
            "hidden": [m.out_features for m in linears[:-1]]}


def _first_in_features(module: nn.Module) -> int | None:
    """Input width of the first linear layer (the usual input width), None without one."""
    first = next((m for m in module.modules() if isinstance(m, nn.Linear)), None)
    return None if first is None else int(first.in_features)


def _preprocessor_payload(preprocessor: Any) -> dict | None:
    """The fitted preprocessor's attributes as plain values."""
    if preprocessor is None:
        return None
    if not isinstance(preprocessor, Preprocessor) or not preprocessor.is_fitted:
        raise ValueError(f"preprocessor: expected a fitted Preprocessor, got {preprocessor!r}")
    return _plain({name: getattr(preprocessor, name) for name in _PREPROCESSOR_ATTRIBUTES}, "preprocessor")


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
    if value is None or isinstance(value, (bool, int, float, str, torch.Tensor)):
        return value
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, dict):
        return {_plain(k, where): _plain(v, where) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        items = [_plain(v, where) for v in value]
        return tuple(items) if isinstance(value, tuple) else items
    raise ValueError(f"{where}: {value!r} ({type(value).__name__}) cannot be saved; only numbers, strings, "
                     "lists and dicts can")


# --------------------------------------------------------------------------------------
# reading
# --------------------------------------------------------------------------------------
def _build_architecture(spec: dict) -> nn.Module:
    """A freshly initialised ``fairopt.models.linear``/``mlp`` module of a spec."""
    if spec["kind"] == "linear":
        return models.linear(spec["n_features"], bias=spec["bias"], seed=0)
    if spec["kind"] == "mlp":
        return models.mlp(spec["n_features"], hidden=tuple(spec["hidden"]), activation=spec["activation"],
                          bias=spec["bias"], seed=0)
    raise ValueError(f"model: unknown architecture kind {spec['kind']!r}")


def _rebuild(spec: dict, model: Any) -> nn.Module:
    """The module of a spec: rebuilt, or the user's for a custom architecture."""
    if spec["kind"] == "output_scale":
        return nn.Sequential(_rebuild(spec["inner"], model), OutputScale())
    if spec["kind"] == "custom":
        return _custom_module(spec, model)
    return _build_architecture(spec)


def _load_module(payload: dict, model: Any) -> nn.Module:
    """The saved module with its weights, in eval mode."""
    module = _rebuild(payload["spec"], model)
    try:
        module.load_state_dict(payload["state_dict"])
    except RuntimeError as exc:
        raise ValueError(f"model: the saved weights do not fit the given architecture ({exc})") from None
    return module.eval()


def _custom_module(spec: dict, model: Any) -> nn.Module:
    """The user's module (or its factory's output) for a custom architecture."""
    if isinstance(model, nn.Module):
        return model
    if callable(model):
        if spec["n_features"] is None:
            raise ValueError("model: the input width of the saved custom module is unknown; pass an instance "
                             "of the architecture instead of a factory")
        module = model(spec["n_features"])
        if not isinstance(module, nn.Module):
            raise ValueError(f"model: the factory returned {type(module).__name__}, expected a torch.nn.Module")
        return module
    raise ValueError(f"model: the file holds the weights of a custom module ({spec['class']}); pass model= an "
                     "instance of that architecture (or its factory n_features -> module)")


def _load_preprocessor(state: dict | None) -> Preprocessor | None:
    """A fitted Preprocessor with the saved attributes (only those of the allow-list)."""
    if state is None:
        return None
    if state["_fitted"] is not True:
        raise ValueError(f"preprocessor: the saved preprocessor is not fitted (_fitted = {state['_fitted']!r})")
    preprocessor = Preprocessor.__new__(Preprocessor)
    for attribute in _PREPROCESSOR_ATTRIBUTES:
        setattr(preprocessor, attribute, state[attribute])
    return preprocessor


def _load_history(payload: dict) -> History:
    return History(row_names=payload["row_names"], records=payload["records"])


def _load_estimator(payload: dict, model: Any) -> Any:
    """The estimator with its parameters and the allow-listed fitted attributes."""
    params = dict(payload["params"])
    if params["model"] == "custom":
        if not callable(model) or isinstance(model, nn.Module):
            raise ValueError("model: this estimator was built with a custom model factory; pass load(..., "
                             "model=factory) with the same factory")
        params["model"] = model
    estimator = _ESTIMATOR_CLASSES[payload["class"]](**params)
    fitted = payload["fitted"]
    if isinstance(estimator, FairClassifier):
        estimator.classes_ = np.asarray(fitted["classes_"], dtype=np.dtype(fitted["classes_dtype"]))
    if fitted["feature_names_in_"] is not None:
        estimator.feature_names_in_ = np.asarray(fitted["feature_names_in_"], dtype=object)
    for attribute in _FITTED_ATTRIBUTES:
        setattr(estimator, attribute, fitted[attribute])
    estimator.model_ = _load_module(payload["model"], model)
    estimator.preprocessor_ = _load_preprocessor(payload["preprocessor"])
    estimator.constraints_ = [constraint_from_spec(spec) for spec in payload["constraints"]]
    estimator.history_ = _load_history(payload["history"])
    return estimator
