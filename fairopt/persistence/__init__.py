"""Saving and loading fitted estimators, torch models, fit results and histories.

:func:`save` writes one ``torch.save`` file of tensors and plain values only, so :func:`load`
reads it with ``torch.load(path, weights_only=True)`` and never runs code from it. Models are
stored as their ``state_dict`` and an architecture spec (``fairopt.models`` networks are
rebuilt; any other module is ``"custom"`` and :func:`load` needs ``model=``); the fitted
:class:`~fairopt.data.Preprocessor` as its attributes; constraints as spec tables
(:func:`fairopt.specs.constraint_to_spec`, a GeDI relative bound resolved to its absolute
value); histories as their records. The training data is never stored.

Integrity: the file stores ``checksum``, ``"sha256:<hex>"`` of a canonical serialisation of every
other entry. :func:`load` refuses (``ValueError`` naming the file) a wrong checksum, unknown or
missing keys or an unknown version, and restores only a fixed list of attributes, never one
named by the file. Version-1 files (before checksums) are read with a ``UserWarning``.

Loaded estimators predict exactly like the saved ones; their constraints are set up on the rows
given to ``evaluate``/``check_generalisation``, identical to training for all but GeDI, which
standardises its attribute with those rows' statistics. To resume an SQP training, save
``engine.state_dict()`` with ``torch.save`` and pass it to ``fit(..., resume=...)``.

Modules: ``format`` (version, keys, safe reading, checksum), ``modules`` (architecture specs),
``writing`` (:func:`save`), ``reading`` (:func:`load`, :class:`SavedModel`).
"""

from __future__ import annotations

from fairopt.persistence.format import FORMAT, FORMAT_VERSION
from fairopt.persistence.reading import SavedModel, load, read_metadata
from fairopt.persistence.writing import save

__all__ = ["save", "load", "read_metadata", "SavedModel", "FORMAT", "FORMAT_VERSION"]
