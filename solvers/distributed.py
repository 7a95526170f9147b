"""Data-parallel full-batch SQP on ``torch.distributed``.

Every rank holds a disjoint shard of the rows and the same model, and everything an SQP iteration
needs is a sum over rows: ``f = (1/N) sum_r n_r f_r``, ``g = (1/N) sum_r n_r g_r``, and rows
``c = C(S, N_g)`` of per-group sums ``S_g = sum_i M[g, i] phi_i`` and counts ``N_g`` (e.g. rates
``c = D @ (S / N_g)``), so ``J = (dC/dS) sum_r dS_r/dw``. Each rank computes its
``[n_r f_r, n_r, n_r g_r, S_r, N_{g,r}, dS_r/dw, S_r^exact]`` from one forward pass and ``1 + G``
pullbacks, and one ``all_reduce(SUM)`` per iteration gives every rank the same QP and step: the
parameters stay identical across ranks and equal the single-process iterates up to summation order.
Constraints must implement :class:`solvers.contract.SumsConstraint`.

Scope: full batch, or mini-batches of ``batch_size`` rows per rank with ``constraint_batch``
"snapshot" (a pass over all shards, :mod:`solvers.sqp.snapshot`) or "batch" (the union of the
ranks' mini-batches); every rank takes ``ceil(n_max / batch_size)`` steps per epoch; epoch-end
candidates, polish and final check are exact on all shards. The loss must be a mean over rows;
callbacks must decide identically on every rank, or the ranks deadlock. ``StochasticSQP`` picks
:class:`AllReduceDerivatives` when ``torch.distributed`` is initialised (``distributed=None``) and
broadcasts rank 0's parameters first::

    # torchrun --nproc_per_node=2 train_dp.py
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    shard = data.subset(torch.arange(len(data)).tensor_split(world)[rank])
    StochasticSQP(epochs=500).fit(model, shard, loss="bce", constraints=DisparateImpact("sex"))
    dist.destroy_process_group()
"""

from __future__ import annotations

import logging
import time
from typing import Any, Sequence

import torch
import torch.distributed as dist
from torch import nn

from solvers.contract import supports_sums
from solvers.derivatives import Derivatives, NetworkRecogniser, trace_through, with_parameter_gradient
from solvers.losses import LossFn
from solvers.problem import as_constraint_set, assign_parameters, flat_parameters
from solvers.sums import FIELDS, derivatives_from_sums, local_sums
from solvers.validation import check_flag

__all__ = ["AllReduceDerivatives", "broadcast_parameters", "check_data_parallel_options",
           "distributed_active"]

logger = logging.getLogger(__name__)



def distributed_active(flag: bool | None) -> bool:
    """The engine's ``distributed`` option resolved: None when ``torch.distributed`` is initialised,
    True requiring it (ValueError otherwise), False never."""
    flag = check_flag(flag, "distributed", allow_none=True)
    if flag is None:
        return dist.is_available() and dist.is_initialized()
    if flag and not (dist.is_available() and dist.is_initialized()):
        raise ValueError("distributed: True needs an initialised torch.distributed process group "
                         "(dist.init_process_group, e.g. under torchrun)")
    return flag


def check_data_parallel_options(batch_size: Any, constraint_batch: str, constraints: Any) -> None:
    """Refuse options data-parallel SQP cannot run: constraints off the objective's rows ("full" for a
    full batch; "batch" or "snapshot" with mini-batches) or without ``partial_sums``/``from_sums``."""
    if batch_size is None and constraint_batch not in ("full", "auto"):
        raise ValueError(f"constraint_batch: full-batch data-parallel SQP needs 'full' (or 'auto'), got "
                         f"{constraint_batch!r}")
    if batch_size is not None and constraint_batch not in ("batch", "snapshot", "auto"):
        raise ValueError(f"constraint_batch: mini-batch data-parallel SQP evaluates the constraints on each step's "
                         f"mini-batches (the union over the ranks) or on all rows of every shard: 'batch', "
                         f"'snapshot' (or 'auto'), got {constraint_batch!r}")
    for member in as_constraint_set(constraints):
        if not supports_sums(member):
            raise ValueError(f"constraints: {getattr(member, 'name', member)!r} has no partial_sums/from_sums "
                             "and cannot be used with data-parallel SQP")


class AllReduceDerivatives:
    """The derivative oracle over the union of all ranks' shards: one forward pass, ``1 + G`` pullbacks
    (which serve every row, so the ``rows`` hint is unused) and one all-reduce."""

    def __init__(self, jacobian: str = "auto") -> None:
        self.jacobian = jacobian
        self._recognise = NetworkRecogniser(jacobian)

    def __call__(self, model: nn.Module, params: list[torch.Tensor], loss_fn: LossFn, cons: Any, obj_batch: Any,
                 con_batch: Any, rows: torch.Tensor | None = None, *,
                 objective_gradient: bool = True) -> Derivatives:
        t0 = time.perf_counter()
        trace = trace_through(self._recognise(model, params), model, params, obj_batch.X, self.jacobian)
        if con_batch is not None and con_batch is not obj_batch:  # pragma: no cover - excluded by the options
            raise ValueError("constraint_batch: data-parallel SQP evaluates constraints on the objective rows")
        t1 = time.perf_counter()
        members = list(cons) if con_batch is not None else []
        local, sizes = local_sums(trace.out, obj_batch, loss_fn, members, trace.pullback)
        totals = _all_reduce_sum(local)
        der = derivatives_from_sums(totals, members, sizes, params[0].dtype, con_batch is not None,
                                    t1 - t0, time.perf_counter() - t1)
        return with_parameter_gradient(der, loss_fn, params)  # the same parameters on every rank: added once


# ----------------------------------------------------------------------------- pieces

def _all_reduce_sum(local: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Sum every piece over the ranks with ONE ``all_reduce`` on their concatenation."""
    shapes = [local[k].shape for k in FIELDS]
    flat = all_reduce_vector(torch.cat([local[k].reshape(-1) for k in FIELDS]))
    pieces = torch.split(flat, [s.numel() for s in shapes])
    return {k: piece.reshape(shape) for k, piece, shape in zip(FIELDS, pieces, shapes)}


def all_reduce_vector(vector: torch.Tensor) -> torch.Tensor:
    """The sum over the ranks of a float64 vector (one ``all_reduce``; a new tensor)."""
    total = vector.detach().clone().to(torch.float64)
    dist.all_reduce(total, op=dist.ReduceOp.SUM)
    return total


def largest_shard(n: int) -> int:
    """The most rows any rank holds, by which every rank sizes its epochs to take the same steps."""
    value = torch.tensor([int(n)], dtype=torch.int64)
    dist.all_reduce(value, op=dist.ReduceOp.MAX)
    return int(value.item())


def broadcast_parameters(params: Sequence[torch.Tensor]) -> None:
    """Copy rank 0's parameters to every rank (one broadcast of their concatenation)."""
    if not params:
        return
    flat = flat_parameters(params)
    dist.broadcast(flat, src=0)
    assign_parameters(params, flat)
