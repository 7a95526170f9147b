"""Encoded rows on disk, memory-mapped: training on more rows than fit in memory.

:func:`save_memmap` writes the tensors of an encoded :class:`~fairopt.data.FairData`
(inputs, target, sensitive features, intersection cells, exposure, row weights) as ``.npy`` files with a
``meta.json`` beside them. :func:`load_memmap` maps them back into a ``FairData`` whose
tensors are views of the files (``numpy.load(..., mmap_mode="c")``, copy-on-write): nothing
is read until rows are indexed, and :meth:`FairData.subset` (a mini-batch, a balanced
constraint batch, a chunk of a full-data pass) reads only its rows. With mini-batches and
``StochasticSQP(chunk_rows=...)`` (full-data passes in chunks) the memory of training is
bounded by the batch and the chunk, not by the number of rows; the operating system pages
the file in and out.

The saved rows are already encoded (standardised inputs, one-hot columns, coded sensitive
features): the loaded ``FairData`` has no preprocessor and no raw frame. Keep the
preprocessor of the data you saved to encode new rows the same way.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import numpy as np
import torch

from fairopt.data.container import FairData

__all__ = ["load_memmap", "save_memmap"]

#: Version of the on-disk layout written by :func:`save_memmap`.
MEMMAP_FORMAT = 1


def _json_scalar(value: Any) -> Any:
    """``json.dumps`` hook: numpy scalars (levels of coded columns) as Python scalars."""
    if isinstance(value, np.generic):
        return value.item()
    raise TypeError(f"{type(value).__name__} is not JSON serialisable")


def save_memmap(data: FairData, directory: str | os.PathLike) -> Path:
    """Write the encoded rows of ``data`` to ``directory`` (created; existing files of the
    same names are replaced) for :func:`load_memmap`.

    Returns
    -------
    pathlib.Path
        The directory.
    """
    if not isinstance(data, FairData):
        raise ValueError(f"data: expected a FairData, got {type(data).__name__}")
    path = Path(directory)
    path.mkdir(parents=True, exist_ok=True)
    np.save(path / "X.npy", data.X.detach().cpu().numpy())
    np.save(path / "y.npy", data.y.detach().cpu().numpy())
    np.save(path / "cells.npy", data.cells.detach().cpu().numpy())
    for i, name in enumerate(data.sensitive_names):
        np.save(path / f"sensitive_{i}.npy", data.sensitive[name].detach().cpu().numpy())
    if data.exposure is not None:
        np.save(path / "exposure.npy", data.exposure.detach().cpu().numpy())
    if data.weights is not None:
        np.save(path / "weights.npy", data.weights.detach().cpu().numpy())
    meta = {
        "format": MEMMAP_FORMAT, "n": len(data), "task": data.task, "sensitive_names": data.sensitive_names,
        "sensitive_kinds": data.sensitive_kinds,
        "sensitive_levels": data.sensitive_levels,
        "n_cells": data.n_cells, "cell_levels": data.cell_levels, "feature_names": data.feature_names,
        "feature_columns": data.feature_columns, "target_name": data.target_name,
        "include_sensitive": data.include_sensitive, "exposure_name": data.exposure_name,
        "has_exposure": data.exposure is not None,
        "has_weights": data.weights is not None, "weights_name": data.weights_name,
    }
    (path / "meta.json").write_text(json.dumps(meta, indent=1, default=_json_scalar))
    return path


def _mapped(path: Path, name: str, n: int) -> torch.Tensor:
    if not (path / name).is_file():
        raise ValueError(f"{path}: missing {name}; write the directory with fairopt.data.save_memmap")
    array = np.load(path / name, mmap_mode="c")
    if array.shape[0] != n:
        raise ValueError(f"{path / name}: {array.shape[0]} rows, meta.json says {n}")
    return torch.from_numpy(array)


def load_memmap(directory: str | os.PathLike) -> FairData:
    """A :class:`FairData` whose tensors are memory-mapped views of the files that
    :func:`save_memmap` wrote to ``directory`` (module docstring).

    Raises
    ------
    ValueError
        A missing or inconsistent file (naming it), or an unknown layout version.
    """
    path = Path(directory)
    meta_file = path / "meta.json"
    if not meta_file.is_file():
        raise ValueError(f"{path}: no meta.json; write the directory with fairopt.data.save_memmap")
    meta = json.loads(meta_file.read_text())
    if meta.get("format") != MEMMAP_FORMAT:
        raise ValueError(f"{meta_file}: layout version {meta.get('format')!r}, expected {MEMMAP_FORMAT}")
    n = int(meta["n"])
    sensitive = {name: _mapped(path, f"sensitive_{i}.npy", n) for i, name in enumerate(meta["sensitive_names"])}
    return FairData(
        _mapped(path, "X.npy", n), _mapped(path, "y.npy", n), meta["task"], sensitive, meta["sensitive_kinds"],
        meta["sensitive_levels"], _mapped(path, "cells.npy", n), meta["n_cells"],
        _mapped(path, "exposure.npy", n) if meta["has_exposure"] else None, meta["feature_names"],
        target_name=meta["target_name"], include_sensitive=meta["include_sensitive"],
        cell_levels=[tuple(c) for c in meta["cell_levels"]], exposure_name=meta["exposure_name"],
        feature_columns=meta["feature_columns"],
        # directories written before row weights existed have no "has_weights": unweighted
        weights=_mapped(path, "weights.npy", n) if meta.get("has_weights", False) else None,
        weights_name=meta.get("weights_name"),
    )
