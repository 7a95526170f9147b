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

    Only the derivative oracle differs (:class:`solvers.distributed.AllReduceDerivatives`), which
    ``StochasticSQP`` itself picks when the process group is initialised.
    """

    def fit(self, model: nn.Module, data: Any, **fit_args: Any) -> FitResult:
        """:meth:`StochasticSQP.fit` on this rank's disjoint, non-empty shard, with the same options and
        constraints on every rank."""
        if self.distributed is False:
            raise ValueError("distributed: DistributedSQP needs distributed=None or True, got False")
        distributed_active(True)
        return super().fit(model, data, **fit_args)

