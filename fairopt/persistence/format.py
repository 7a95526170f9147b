"""The file format of :func:`fairopt.save`: version and keys, reading a file safely, the
structure checks of a payload and its checksum (a canonical serialisation hashed with SHA-256)."""

from __future__ import annotations

import hashlib
import os
import warnings
import zipfile
from typing import Any

import torch

from fairopt.estimators import FairClassifier, FairRegressor

__all__ = [
    "FORMAT",
    "FORMAT_VERSION",
    "ESTIMATOR_CLASSES",
    "FITTED_ATTRIBUTES",
    "HELD_OUT_ATTRIBUTES",
    "OPTIONAL_PREPROCESSOR_ATTRIBUTES",
    "PREPROCESSOR_ATTRIBUTES",
    "PathLike",
    "check_header",
    "check_structure",
    "checksum",
    "read_payload",
    "verify_checksum",
]

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
    "boosted_trees": frozenset({"kind", "n_features"}),
}
#: The only attributes :func:`load` sets on an estimator (``feature_names_in_`` and, for a
#: classifier, ``classes_`` are rebuilt as arrays) and on a Preprocessor.
FITTED_ATTRIBUTES = ("n_features_in_", "status_", "converged_", "n_iter_", "train_violations_",
                     "train_violation_", "reference_violations_", "engine_info_", "sensitive_names_",
                     "sensitive_kinds_", "sensitive_levels_")
#: The held-out statements of a fit (``margin``, ``validation_fraction``): certificates as their
#: ``to_dict``, tables as ``DataFrame.to_dict("split")``, the held-out row indices as a list; None without them.
HELD_OUT_ATTRIBUTES = ("certificate_", "candidates_", "predicted_held_out_", "validation_indices_")
_FITTED_KEYS = (frozenset(FITTED_ATTRIBUTES) | {"feature_names_in_", "dropped_columns_", "status_message_",
                                                 "constraints_param_form"}
                | frozenset(HELD_OUT_ATTRIBUTES))
_CLASSIFIER_FITTED_KEYS = frozenset({"classes_", "classes_dtype", "pos_label_"})
#: Fitted attributes added after files were written: absent from older files, whose value
#: :func:`load` then derives (``pos_label_``: ``classes_[1]``, the only positive class then;
#: ``dropped_columns_``: none, as no column of X was taken as a sensitive feature then;
#: ``status_message_``: empty, and ``status_`` holds the engine's word of that time; the held-out
#: statements: None, as if the fit had none; ``constraints_param_form``, the form the ``constraints`` parameter
#: was given in: the saved list of specs).
_OPTIONAL_FITTED_KEYS = (frozenset({"pos_label_", "dropped_columns_", "status_message_", "constraints_param_form"})
                         | frozenset(HELD_OUT_ATTRIBUTES))
PREPROCESSOR_ATTRIBUTES = ("columns", "categorical", "standardize", "columns_", "categorical_", "numeric_",
                           "means_", "scales_", "levels_", "feature_names_", "_fitted", "missing", "display_names")
#: Preprocessor attributes added after files were written: absent from older files, whose value
#: :func:`load` then takes as the default of that time (``missing``: "error"; ``display_names``: none, the
#: messages name the columns by their own names).
OPTIONAL_PREPROCESSOR_ATTRIBUTES = {"missing": "error", "display_names": {}}

PathLike = str | os.PathLike

ESTIMATOR_CLASSES = {"FairClassifier": FairClassifier, "FairRegressor": FairRegressor}


# --------------------------------------------------------------------------------------
# file integrity: reading, header, keys, checksum
# --------------------------------------------------------------------------------------
def read_payload(name: str) -> Any:
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


def check_header(payload: Any) -> int:
    """The format version of a fairopt payload (ValueError for another file or version)."""
    if not isinstance(payload, dict) or payload.get("format") != FORMAT:
        found = f"keys {_sorted_keys(payload)}" if isinstance(payload, dict) else f"a {type(payload).__name__}"
        weights = isinstance(payload, dict) and bool(payload) and all(isinstance(v, torch.Tensor)
                                                                      for v in payload.values())
        hint = (": it is a network's weights (a state_dict, as the model.pt of 'fairopt train --penalty'), which "
                "torch.nn.Module.load_state_dict reads; a fitted estimator is saved by fairopt.save, and 'fairopt "
                "predict' reads the model.fairopt of 'fairopt train'" if weights else "")
        raise ValueError(f"not a fairopt file (not a file written by fairopt.save): no 'format': {FORMAT!r} "
                         f"entry (the archive holds {found}){hint}")
    version = payload.get("format_version")
    if isinstance(version, bool) or version not in _READABLE_VERSIONS:
        raise ValueError(f"unsupported format version {version!r} (this fairopt reads versions "
                         f"{', '.join(map(str, _READABLE_VERSIONS))}; a newer fairopt may have written it)")
    return int(version)


def _sorted_keys(table: dict) -> list[str]:
    return sorted(map(str, table))


def _require_keys(table: Any, expected: frozenset, where: str, allow_missing: bool = False,
                  optional: frozenset = frozenset()) -> dict:
    """``table`` if it is a dict with exactly the keys ``expected`` (``allow_missing``: a
    subset of them; ``optional``: keys that may be absent), else ValueError."""
    if not isinstance(table, dict):
        raise ValueError(f"{where}: expected a table (dict), got {type(table).__name__}")
    unknown = _sorted_keys({k: None for k in table if k not in expected})
    missing = [] if allow_missing else sorted(expected - optional - set(table))
    if unknown or missing:
        parts = ([f"unknown keys {unknown}"] if unknown else []) + ([f"missing keys {missing}"] if missing else [])
        raise ValueError(f"{where}: {' and '.join(parts)} (expected exactly {sorted(expected)})")
    return table


def check_structure(payload: dict, version: int) -> None:
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
        _require_keys(payload["preprocessor"], frozenset(PREPROCESSOR_ATTRIBUTES), "'preprocessor'",
                      optional=frozenset(OPTIONAL_PREPROCESSOR_ATTRIBUTES))
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
    cls = ESTIMATOR_CLASSES.get(payload["class"])
    if cls is None:
        raise ValueError(f"'class': unknown estimator class {payload['class']!r}; expected one of "
                         f"{sorted(ESTIMATOR_CLASSES)}")
    # parameters added after a file was written are absent from it: they take their defaults
    _require_keys(payload["params"], frozenset(cls._get_param_names()), f"'params' of {cls.__name__}",
                  allow_missing=True)
    fitted_keys = _FITTED_KEYS | (_CLASSIFIER_FITTED_KEYS if cls is FairClassifier else frozenset())
    _require_keys(payload["fitted"], fitted_keys, f"'fitted' attributes of {cls.__name__}",
                  optional=_OPTIONAL_FITTED_KEYS)


def verify_checksum(payload: dict, version: int, name: str) -> None:
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
    actual = checksum(content)
    if actual != stored:
        raise ValueError(f"checksum mismatch: the file records {stored} but its content hashes to {actual}; it "
                         "was modified or corrupted after fairopt.save wrote it")


def checksum(content: dict) -> str:
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
