"""Input conversion and validation of the distance-covariance measures.

Every bad input raises ``ValueError`` naming the argument and the offending value.
Predictions keep their torch tensor (for autograd) next to a float64
numpy copy; sensitive features become float64 ``(n, q)`` arrays.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np
import pandas as pd
import torch

from solvers.validation import to_numpy


__all__ = [
    "MIN_SAMPLES",
    "Prediction",
    "prediction_input",
    "prediction_values",
    "tensor_values",
    "feature_matrix",
    "numeric_array",
    "encode_sensitive",
]

MIN_SAMPLES = 4
"""The unbiased estimators divide by ``n (n - 3)``."""


@dataclass(frozen=True)
class Prediction:
    """Validated predictions: the torch tensor (torch input) or a float64 array (other input).

    A tensor is not converted to numpy here: under ``torch.func`` transforms it is a
    wrapper without storage, and only the autograd Function of
    :mod:`fairopt.measures.dcov` sees the plain tensor (:func:`tensor_values`).
    """

    tensor: torch.Tensor | None
    array: np.ndarray | None
    n: int


def prediction_input(x: Any, name: str = "x") -> Prediction:
    """Validate predictions: 1-D (or (n, 1)), finite, at least 4 samples.

    For a tensor only the shape is checked here; its values are checked (in numpy) by
    :func:`tensor_values` when they are read, which avoids a separate pass of torch
    operations over the tensor.
    """
    if isinstance(x, torch.Tensor):
        tensor = x.reshape(-1) if x.dim() == 2 and x.shape[1] == 1 else x
        if tensor.dim() != 1:
            raise ValueError(f"{name}: expected a 1-D array, got shape {tuple(x.shape)}")
        if not tensor.is_floating_point():
            tensor = tensor.to(torch.float64)
        prediction = Prediction(tensor=tensor, array=None, n=int(tensor.shape[0]))
    else:
        array = numeric_array(x, name)
        if array.ndim == 2 and array.shape[1] == 1:
            array = array[:, 0]
        if array.ndim != 1:
            raise ValueError(f"{name}: expected a 1-D array, got shape {array.shape}")
        prediction = Prediction(tensor=None, array=array, n=int(array.shape[0]))
    if prediction.n < MIN_SAMPLES:
        raise ValueError(f"{name}: the unbiased estimators need at least {MIN_SAMPLES} samples, got {prediction.n}")
    return prediction


def tensor_values(tensor: torch.Tensor, name: str = "x") -> np.ndarray:
    """A finite float64 numpy copy of a plain (not transform-wrapped) tensor."""
    return numeric_array(tensor.detach().to(device="cpu", dtype=torch.float64).numpy(), name)


def prediction_values(prediction: Prediction) -> np.ndarray:
    """The predictions as float64 numpy (outside of ``torch.func`` transforms)."""
    return prediction.array if prediction.tensor is None else tensor_values(prediction.tensor)


def numeric_array(value: Any, name: str) -> np.ndarray:
    """``value`` as a finite float64 numpy array.

    Numpy only (no torch operations), so that it also works inside ``torch.func``
    transforms, where every new tensor is a wrapper without storage.
    """
    try:
        array = np.asarray(to_numpy(value), dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{name}: cannot convert {type(value).__name__} to a numeric array ({exc})") from None
    finite = np.isfinite(array)
    if not finite.all():
        raise ValueError(f"{name}: contains non-finite values (e.g. {array[~finite].flat[0]})")
    return array


def feature_matrix(s: Any, n: int, name: str) -> np.ndarray:
    """A numeric sensitive feature as a finite float64 (n, q) array (1-D input gives q = 1)."""
    array = numeric_array(s, name)
    if array.ndim == 1:
        array = array.reshape(-1, 1)
    if array.ndim != 2:
        raise ValueError(f"{name}: expected shape (n,) or (n, q), got {array.shape}")
    if array.shape[0] != n:
        raise ValueError(f"{name}: has {array.shape[0]} rows but x has {n}")
    if array.shape[1] == 0:
        raise ValueError(f"{name}: has no columns")
    return array


def _is_categorical_dtype(values: Any) -> bool:
    """Strings, objects, booleans, pandas categoricals and integer codes are categorical."""
    if isinstance(values, torch.Tensor):
        return not values.is_floating_point() and not values.is_complex()
    if isinstance(getattr(values, "dtype", None), pd.CategoricalDtype):
        return True
    return np.asarray(values).dtype.kind in "OUSbiu"


def _one_hot(values: Any, n: int, name: str) -> np.ndarray:
    """One-hot (n, K) float64 encoding of a 1-D categorical feature (K observed levels)."""
    array = to_numpy(values)
    if array.ndim == 2 and array.shape[1] == 1:
        array = array[:, 0]
    if array.ndim != 1:
        raise ValueError(f"{name}: a categorical feature must be 1-D, got shape {array.shape}")
    if array.shape[0] != n:
        raise ValueError(f"{name}: has {array.shape[0]} rows but x has {n}")
    codes, levels = pd.factorize(array)
    if (codes < 0).any():
        raise ValueError(f"{name}: contains missing values (e.g. at row {int(np.flatnonzero(codes < 0)[0])})")
    return np.eye(len(levels), dtype=np.float64)[codes]


def encode_sensitive(
    features: Sequence[Any], n: int, categorical: bool | Sequence[bool | None] | None = None
) -> list[np.ndarray]:
    """Encode sensitive features for CCdCov / JdCov: one float64 (n, q_i) array each.

    Parameters
    ----------
    features : sequence of array-like
        Each of shape (n,) or (n, q_i) (numeric), or (n,) (categorical).
    n : int
        Number of samples.
    categorical : bool or sequence of (bool or None), optional
        Per feature: ``True`` one-hot encodes it (distance sqrt(2) between different
        levels, 0 within a level; [DC App B.1]), ``False`` keeps its numeric values,
        ``None`` infers: strings, objects, booleans, pandas categoricals and integer
        dtypes (numpy or torch, e.g. the int64 codes of FairData) are categorical, floats
        numeric. Pass ``False`` (or a float array) for an integer-valued numeric feature
        such as age in years. A single value applies to all features.

    Returns
    -------
    list of float64 ndarray
        A one-hot feature has one column per observed level (memory n x K).
    """
    if categorical is None or isinstance(categorical, (bool, np.bool_)):
        flags: list[Any] = [categorical] * len(features)
    else:
        flags = list(categorical)
        if len(flags) != len(features):
            raise ValueError(
                f"categorical: expected one flag per sensitive feature ({len(features)}), got {len(flags)}"
            )
    encoded = []
    for index, (feature, flag) in enumerate(zip(features, flags)):
        if flag is not None and not isinstance(flag, (bool, np.bool_)):
            raise ValueError(f"categorical[{index}]: expected True, False or None, got {flag!r}")
        is_categorical = _is_categorical_dtype(feature) if flag is None else bool(flag)
        name = f"s[{index}]"
        encoded.append(_one_hot(feature, n, name) if is_categorical else feature_matrix(feature, n, name))
    return encoded
