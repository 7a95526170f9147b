"""Which derivative oracle (:mod:`solvers.derivatives`) a :class:`~solvers.sqp.StochasticSQP`
fit uses: data-parallel, chunked or local."""

from __future__ import annotations

import logging
from typing import Any

import torch
import torch.distributed as dist

from solvers.derivatives import DerivativeOracle, LocalDerivatives
from solvers.distributed import (AllReduceDerivatives, broadcast_parameters, check_data_parallel_options,
                                 distributed_active)
from solvers.sums import ChunkedDerivatives

__all__ = ["derivative_oracle"]

logger = logging.getLogger(__name__)


def derivative_oracle(options: Any, params: list[torch.Tensor], constraints: Any) -> DerivativeOracle:
    """:class:`solvers.distributed.AllReduceDerivatives` when ``options.distributed``
    resolves to True (options checked, parameters broadcast from rank 0), else
    :class:`solvers.sums.ChunkedDerivatives` with ``options.chunk_rows``, else
    :class:`solvers.derivatives.LocalDerivatives` (``options``: the engine, which also
    gives ``jacobian``, ``batch_size`` and ``constraint_batch``)."""
    if not distributed_active(options.distributed):
        if options.chunk_rows is not None:
            return ChunkedDerivatives(int(options.chunk_rows), options.jacobian)
        return LocalDerivatives(options.jacobian)
    check_data_parallel_options(options.batch_size, options.constraint_batch, constraints)
    logger.debug("data-parallel SQP: rank %d of %d", dist.get_rank(), dist.get_world_size())
    broadcast_parameters(params)
    return AllReduceDerivatives(options.jacobian)
