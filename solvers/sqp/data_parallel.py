"""The data-parallel SQP engine: :class:`DistributedSQP`."""

from __future__ import annotations

from typing import Any

from torch import nn

from solvers.distributed import distributed_active
from solvers.history import FitResult
from solvers.sqp.engine import StochasticSQP

__all__ = ["DistributedSQP"]


class DistributedSQP(StochasticSQP):
    """:class:`StochasticSQP` that insists on data-parallel training over the row shards of
    an initialised ``torch.distributed`` process group (:mod:`solvers.distributed`).

    Same parameters; full batch (``batch_size=None``, ``constraint_batch`` "full" or
    "auto") or mini-batches of ``batch_size`` rows per rank (``constraint_batch`` "snapshot",
    "batch" or "auto"; the same number of steps on every rank, :mod:`solvers.distributed`). Only the
    derivative oracle differs from a local fit
    (:class:`solvers.distributed.AllReduceDerivatives`): one all-reduce per iteration makes
    ``f``, ``g``, ``c``, ``J`` and the exact ``c`` those of the union of the shards, so the QP,
    merit, step and learning-rate rules run identically on every rank. ``StochasticSQP``
    itself switches to that oracle when the process group is initialised
    (``distributed=None``).
    """

    def fit(self, model: nn.Module, data: Any, **fit_args: Any) -> FitResult:
        """:meth:`StochasticSQP.fit` on this rank's shard; every rank must call it with the
        same options, the same constraints and its own disjoint, non-empty shard.

        Raises
        ------
        ValueError
            ``distributed=False``, no initialised process group, ``constraint_batch``
            "balanced" (or "full" with mini-batches), or a constraint without
            ``partial_sums``/``from_sums``.
        """
        if self.distributed is False:
            raise ValueError("distributed: DistributedSQP needs distributed=None or True, got False")
        distributed_active(True)
        return super().fit(model, data, **fit_args)

