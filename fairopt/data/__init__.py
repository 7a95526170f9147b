"""Tabular data for fair learning: the :class:`Preprocessor` and the :class:`FairData` container.

A :class:`FairData` holds everything an engine, a constraint or a measure needs about a set
of rows (the data contract every engine, constraint and measure relies on):

* ``X`` (n, p) float32 model inputs, produced by a fitted :class:`Preprocessor`
  (numeric columns standardised with training mean and standard deviation, categorical
  columns one-hot encoded with the levels seen in training);
* ``y`` (n,) float32 target (0/1 for ``task="binary"``, counts for ``task="poisson"``);
* ``sensitive``: one tensor per sensitive feature, typed by ``sensitive_kinds``
  (binary float32 0/1, categorical int64 codes, continuous float32 raw values);
* ``cells``: the intersection cell of the binary/categorical sensitive features, a
  compact mixed-radix code (:func:`intersection_cells`);
* ``exposure`` (n,) float32 or ``None`` (Poisson offset ``log(exposure)``);
* ``weights`` (n,) float64 or ``None``: per-row (survey, importance) weights ``w_i >= 0``;
  the losses and the group rates become weighted means ``sum_i w_i v_i / sum_i w_i``.

Sensitive features and weights travel with the rows: :meth:`FairData.subset` indexes every
tensor with the same index (a mini-batch is a subset), so constraints never need globals.

Modules (one job each): ``frames`` (checks of user tables and the numeric-string rule),
``preprocessing`` (:class:`Preprocessor`), ``encoding`` (target, exposure, sensitive
features, intersection cells), ``splitting`` (seeded stratified splits), ``container``
(:class:`FairData` and its assembly), ``memmap`` (encoded rows on disk, memory-mapped).
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
