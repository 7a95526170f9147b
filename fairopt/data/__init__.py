"""Tabular data for fair learning: the :class:`Preprocessor` and the :class:`FairData` container.

A :class:`FairData` holds what engines, constraints and measures need about a set of rows: ``X``
(float32 inputs from a fitted :class:`Preprocessor`: numeric columns standardised, categorical ones
one-hot), ``y``, one typed tensor per sensitive feature, the intersection ``cells`` of the discrete
sensitive features (:func:`intersection_cells`), an optional ``exposure`` (Poisson offset) and optional
row ``weights``. :meth:`FairData.subset` indexes every tensor alike (a mini-batch is a subset), so
constraints never need globals.
"""

from __future__ import annotations

from fairopt.data.container import SENSITIVE_KINDS, TASKS, FairData
from fairopt.data.frames import coerce_numeric_columns
from fairopt.data.memmap import load_memmap, save_memmap
from fairopt.data.encoding import intersection_cells
from fairopt.data.preprocessing import Preprocessor
from fairopt.data.splitting import stratified_split_indices

__all__ = [
    "Preprocessor", "FairData", "coerce_numeric_columns", "intersection_cells", "stratified_split_indices",
    "TASKS", "SENSITIVE_KINDS", "load_memmap", "save_memmap",
]
