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

Modules (one job each)
----------------------
``format``: the version, the expected keys, reading a file safely, the structure checks and
the checksum. ``modules``: the architecture spec of a torch model and the model rebuilt from
it. ``writing``: :func:`save` and the payload of each kind of object. ``reading``:
:func:`load`, :class:`SavedModel` and the objects rebuilt from a payload.
"""

from __future__ import annotations

from fairopt.persistence.format import FORMAT, FORMAT_VERSION
from fairopt.persistence.reading import SavedModel, load
from fairopt.persistence.writing import save

__all__ = ["save", "load", "SavedModel", "FORMAT", "FORMAT_VERSION"]
