"""Input conversion and validation shared by measures, constraints and the data layer.

Every public function validates at the boundary with these helpers, so that a bad input
gives a ``ValueError`` naming the argument and the offending value.
The data checks (tensors, lengths, 0/1 values, sensitive names) live here; the parameter
checks (numbers, integers, choices, flags, intervals, seeds) are those of
:mod:`solvers.validation`, re-exported so that there is one implementation of each.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from fairopt.exceptions import UnweightedOnlyError
from solvers.validation import (check_choice, check_flag, check_interval, check_seed, check_seeds, finite_float,
                                nonnegative_float, positive_float, positive_int, to_numpy)

__all__ = [
    "as_tensor", "as_1d_tensor", "to_numpy", "check_same_length", "check_binary", "sensitive_names",
    "check_sample_weight", "require_unweighted", "UNWEIGHTED_HINT", "measure_bound",
    # parameter checks and the array conversion, from solvers.validation
    "finite_float", "positive_float", "nonnegative_float", "positive_int", "check_choice", "check_flag",
    "check_interval", "check_seed", "check_seeds",
]


def as_tensor(x: Any, name: str, dtype: torch.dtype | None = None) -> torch.Tensor:
    """Convert ``x`` (tensor, numpy array, pandas object, list) to a tensor.

    Tensors are returned as they are (keeping autograd), cast to ``dtype`` if given.
    Raises ``ValueError`` naming ``name`` when the conversion fails or values are NaN/inf.
    """
    if isinstance(x, torch.Tensor):
        t = x
    else:
        if hasattr(x, "to_numpy"):
            x = x.to_numpy()
        try:
            arr = np.asarray(x)
            if arr.dtype == object:
                arr = arr.astype(float)
            if not arr.flags.writeable:  # e.g. pandas' read-only views: torch needs a writable buffer
                arr = arr.copy()
            t = torch.as_tensor(arr)
        except (TypeError, ValueError) as exc:
            raise ValueError(f"{name}: cannot convert {type(x).__name__} to a numeric array ({exc})") from None
    if dtype is not None and t.dtype != dtype:
        t = t.to(dtype)
    if t.is_floating_point() and not bool(torch.isfinite(t.detach()).all()):
        bad = t.detach()[~torch.isfinite(t.detach())].reshape(-1)[0].item()
        raise ValueError(f"{name}: contains non-finite values (e.g. {bad})")
    return t


def as_1d_tensor(x: Any, name: str, dtype: torch.dtype | None = None) -> torch.Tensor:
    """:func:`as_tensor` and require one dimension (a column vector (n, 1) is flattened)."""
    t = as_tensor(x, name, dtype)
    if t.dim() == 2 and t.shape[1] == 1:
        t = t.reshape(-1)
    if t.dim() != 1:
        raise ValueError(f"{name}: expected a 1-D array, got shape {tuple(t.shape)}")
    return t


def column_1d(values: Any, name: str, what: str = "array", allow_empty: bool = True) -> np.ndarray:
    """``values`` as a 1-D numpy array (an ``(n, 1)`` column is flattened); ValueError naming
    ``name`` when it is not 1-D (``what`` says what was expected, e.g. "array of labels") or,
    unless ``allow_empty``, empty."""
    array = to_numpy(values)
    if array.ndim == 2 and array.shape[1] == 1:
        array = array.reshape(-1)
    if array.ndim != 1:
        raise ValueError(f"{name}: expected a 1-D {what}, got shape {array.shape}")
    if not allow_empty and array.size == 0:
        raise ValueError(f"{name}: is empty (0 rows)")
    return array


def check_same_length(**arrays: Any) -> int:
    """Require all arrays to have the same first dimension; returns it."""
    lengths = {k: len(v) for k, v in arrays.items()}
    if len(set(lengths.values())) > 1:
        desc = ", ".join(f"{k} has {n}" for k, n in lengths.items())
        raise ValueError(f"length mismatch: {desc} rows")
    return next(iter(lengths.values())) if lengths else 0


def check_binary(x: torch.Tensor, name: str) -> torch.Tensor:
    """Require values in {0, 1}; returns ``x`` as float."""
    xd = x.detach()
    bad = ~((xd == 0) | (xd == 1))
    if bool(bad.any()):
        raise ValueError(f"{name}: expected 0/1 values, got {xd[bad].reshape(-1)[0].item()!r}")
    return x.to(torch.get_default_dtype()) if not x.is_floating_point() else x


def sensitive_names(sensitive: Any) -> tuple[str, ...]:
    """``sensitive`` (a column name or a non-empty list of distinct names) as a tuple."""
    if isinstance(sensitive, str):
        return (sensitive,)
    if isinstance(sensitive, (list, tuple)) and sensitive and all(isinstance(s, str) for s in sensitive):
        if len(set(sensitive)) != len(sensitive):
            raise ValueError(f"sensitive: duplicate names in {list(sensitive)!r}")
        return tuple(sensitive)
    raise ValueError(f"sensitive: expected a column name or a non-empty list of names, got {sensitive!r}")


def check_sample_weight(sample_weight: Any, n: int, name: str = "sample_weight") -> np.ndarray | None:
    """Per-row weights as a float64 array ``(n,)``, or None for ``None``.

    The checks of scikit-learn's ``_check_sample_weight`` (written here: that helper is
    private in scikit-learn): a scalar is repeated on every row; otherwise a numeric 1-D
    array (a column ``(n, 1)`` is flattened) with one value per row. Every weight must be
    finite and ``>= 0``, and at least one ``> 0``.

    Raises
    ------
    ValueError
        Naming ``name``: a wrong length or shape, non-numeric, NaN/inf, negative or all-zero
        weights.
    """
    if sample_weight is None:
        return None
    if isinstance(sample_weight, bool):
        raise ValueError(f"{name}: expected numbers, got {sample_weight!r}")
    if isinstance(sample_weight, (int, float, np.integer, np.floating)):
        weights = np.full(int(n), float(sample_weight))
    else:
        weights = np.asarray(to_numpy(sample_weight))
        if weights.dtype == object:
            try:
                weights = weights.astype(np.float64)
            except (TypeError, ValueError):
                pass
        if weights.dtype.kind not in "iuf":
            raise ValueError(f"{name}: expected numbers, got an array of dtype {weights.dtype}")
        weights = weights.astype(np.float64, copy=True)
        weights = column_1d(weights, name, "array (n,)")
        if weights.shape[0] != n:
            raise ValueError(f"{name}: {weights.shape[0]} weights for {n} rows")
    if not np.isfinite(weights).all():
        first = int(np.flatnonzero(~np.isfinite(weights))[0])
        raise ValueError(f"{name}: contains NaN or infinite values (first at row {first})")
    if (weights < 0).any():
        first = int(np.flatnonzero(weights < 0)[0])
        raise ValueError(f"{name}: weights must be >= 0, got {float(weights[first])!r} at row {first}")
    if n and not (weights > 0).any():
        raise ValueError(f"{name}: all weights are zero; at least one row must have a positive weight")
    return weights


#: The default advice of :func:`require_unweighted` (for a constraint or a penalty).
UNWEIGHTED_HINT = ("fit without sample_weight (FairData weights), or use a constraint that has a weighted version "
                   "(the group-rate constraints and Covariance)")


def require_unweighted(data: Any, who: str, hint: str = UNWEIGHTED_HINT) -> None:
    """:class:`~fairopt.exceptions.UnweightedOnlyError` (a ValueError) ``"<who> does not support sample weights
    yet; <hint>"`` when ``data`` carries per-row weights (``data.weights`` not None): for the parts of the
    library that have no weighted version yet and must not silently ignore them."""
    if getattr(data, "weights", None) is not None:
        raise UnweightedOnlyError(who, hint)


def measure_bound(value: Any, name: str, measure: str, floor: float = 0.0) -> float:
    """A bound on ``measure`` from above: ``value`` as a finite float ``>= floor``, the least
    value the measure takes (0 for GeDI, a distance covariance, a covariance: what a
    constant prediction gives).

    Raises
    ------
    ValueError
        ``"<name>: expected a real number, ..."`` / ``"... a finite number ..."`` (as
        :func:`finite_float`), or ``"<name>: <value> is below <floor>, the floor of
        <measure> ...: no model can meet it"``: a bound the measure cannot reach, diagnosed
        before training.
    """
    bound = finite_float(value, name)
    if bound < floor:
        raise ValueError(f"{name}: {value!r} is below {floor:g}, the floor of {measure} (its value for a constant "
                         f"prediction): no model can meet it; expected a finite number >= {floor:g}")
    return bound
