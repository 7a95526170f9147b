"""Data-parallel full-batch SQP on ``torch.distributed``.

Every rank holds a disjoint shard of the training rows and an identical copy of the
model. Every quantity the SQP iteration needs is a sum over rows:

- the objective ``f = (1/N) sum_r n_r f_r`` and its gradient ``g = (1/N) sum_r n_r g_r``,
  with ``f_r`` the mean loss on shard ``r`` (``n_r`` rows, ``N = sum_r n_r``);
- the constraint rows ``c = C(S, N_g)`` are a function of per-group sums
  ``S_g = sum_i M[g, i] phi_i`` and counts ``N_g = sum_i M[g, i]`` (e.g. the rate
  constraints ``c = D @ (S / N_g)``), so ``J = dc/dw = (dC/dS) (dS/dw)`` with
  ``dS/dw = sum_r dS_r/dw``.

Each rank therefore computes, from ONE forward pass on its shard, the local
``[n_r f_r, n_r, n_r g_r, S_r, N_{g,r}, dS_r/dw, S_r^exact]`` (``1 + G`` pull-backs through
the model, :func:`solvers.derivatives.trace_outputs`), packs it into one float64
vector and calls ``all_reduce(SUM)`` once per iteration. The reduced vector is the same on
every rank, so every rank solves the same QP and takes the same step: the parameters stay
bit-identical across ranks, and equal the single-process full-data iterates up to
floating-point summation order.

A constraint supports data parallelism when it implements :class:`solvers.contract.SumsConstraint`
(``partial_sums(out, batch, exact=False) -> (sums, counts)`` and
``from_sums(sums, counts) -> c``); :class:`fairopt.constraints.DisparateImpact`,
``EqualImpact`` and ``DemographicParity`` do.

Scope: full batch (``batch_size=None``, ``constraint_batch="full"``) and mini-batches
(``batch_size`` rows per rank and step) with ``constraint_batch="snapshot"`` (the default:
the constraint rows and Jacobian of a periodic pass over the union of all shards,
linearised in between, :mod:`solvers.sqp.snapshot`) or ``"batch"`` (the constraints of a
step are those of the union of the ranks' mini-batches).
Every rank takes ``ceil(n_max / batch_size)`` steps per epoch, ``n_max`` the largest
shard (a smaller shard reshuffles when its rows run out); the epoch-end candidates, the
polish and the final check are exact on the union of all shards (:func:`all_reduce_vector`).
Balanced constraint batches raise ``ValueError``. The loss must be a mean over rows (the
built-in ``"bce"``, ``"mse"``, ``"poisson"`` are). Callbacks must decide identically on
every rank (records agree on every rank except the timing columns), or the ranks deadlock.

Launch
------
Initialise the process group, give each rank its shard and fit as usual; ``StochasticSQP``
switches to this engine automatically when ``torch.distributed`` is initialised
(``distributed=None``; pass ``distributed=False`` to train each rank on its own)::

    # train_dp.py, run with:  torchrun --nproc_per_node=2 train_dp.py
    import torch, torch.distributed as dist
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    shard = data.subset(torch.arange(len(data)).tensor_split(world)[rank])
    torch.manual_seed(0); model = ...   # or rely on the broadcast from rank 0
    StochasticSQP(epochs=500).fit(model, shard, loss="bce", constraints=DisparateImpact("sex"))
    dist.destroy_process_group()

At the start of a data-parallel fit the parameters are broadcast from rank 0 (as
``DistributedDataParallel`` does), so the ranks start from the same point.

Structure: this module knows nothing of the engine. It provides the derivative oracle
:class:`AllReduceDerivatives` (the data-parallel implementation of
:class:`solvers.derivatives.DerivativeOracle`) and the checks and broadcast a data-parallel
fit needs; :class:`solvers.sqp.StochasticSQP` picks this oracle instead of
:class:`solvers.derivatives.LocalDerivatives` when the process group is active.
:class:`solvers.sqp.DistributedSQP` is the engine that insists on it.
"""

from __future__ import annotations

import logging
import time
from typing import Any, Sequence

import torch
import torch.distributed as dist
from torch import nn

from solvers.contract import supports_sums
from solvers.derivatives import Derivatives, trace_outputs, with_parameter_gradient
from solvers.losses import LossFn
from solvers.problem import as_constraint_set, assign_parameters, flat_parameters
from solvers.sums import FIELDS, derivatives_from_sums, local_sums
from solvers.validation import check_flag

__all__ = ["AllReduceDerivatives", "broadcast_parameters", "check_data_parallel_options",
           "distributed_active", "supports_data_parallel"]

logger = logging.getLogger(__name__)


#: True if a constraint has callable ``partial_sums`` and ``from_sums``.
supports_data_parallel = supports_sums


def distributed_active(flag: bool | None) -> bool:
    """Resolve the engine's ``distributed`` option.

    ``None`` (auto): True iff ``torch.distributed`` is available and initialised.
    ``True``: requires an initialised process group. ``False``: never.

    Raises
    ------
    ValueError
        ``flag`` is not None/True/False, or True without an initialised process group.
    """
    flag = check_flag(flag, "distributed", allow_none=True)
    if flag is None:
        return dist.is_available() and dist.is_initialized()
    if flag and not (dist.is_available() and dist.is_initialized()):
        raise ValueError("distributed: True needs an initialised torch.distributed process group "
                         "(dist.init_process_group, e.g. under torchrun)")
    return flag


def check_data_parallel_options(batch_size: Any, constraint_batch: str, constraints: Any) -> None:
    """Data-parallel SQP evaluates the constraints on the objective's rows: all rows
    (``batch_size=None``, ``constraint_batch`` "full" or "auto") or each step's mini-batch
    (``batch_size`` set, ``constraint_batch`` "batch", "snapshot" or "auto"; a snapshot is a pass
    over all rows of every shard); every constraint must implement
    :class:`solvers.contract.SumsConstraint`; ValueError otherwise."""
    if batch_size is None and constraint_batch not in ("full", "auto"):
        raise ValueError(f"constraint_batch: full-batch data-parallel SQP needs 'full' (or 'auto'), got "
                         f"{constraint_batch!r}")
    if batch_size is not None and constraint_batch not in ("batch", "snapshot", "auto"):
        raise ValueError(f"constraint_batch: mini-batch data-parallel SQP evaluates the constraints on each step's "
                         f"mini-batches (the union over the ranks) or on all rows of every shard: 'batch', "
                         f"'snapshot' (or 'auto'), got {constraint_batch!r}")
    for member in as_constraint_set(constraints):
        if not supports_data_parallel(member):
            raise ValueError(f"constraints: {getattr(member, 'name', member)!r} has no partial_sums/from_sums "
                             "and cannot be used with data-parallel SQP")


class AllReduceDerivatives:
    """The derivative oracle over the union of all ranks' shards (module docstring): one
    forward pass on this rank's shard, ``1 + G`` pull-backs, ONE all-reduce.

    Parameters
    ----------
    jacobian : {"auto", "batched", "loop"}
        Strategy of :func:`solvers.derivatives.trace_outputs`.

    The ``rows`` hint of :class:`solvers.derivatives.DerivativeOracle` is not used here:
    the ``1 + G`` pull-backs of the group sums serve every row at once.
    """

    def __init__(self, jacobian: str = "auto") -> None:
        self.jacobian = jacobian

    def __call__(self, model: nn.Module, params: list[torch.Tensor], loss_fn: LossFn, cons: Any, obj_batch: Any,
                 con_batch: Any, rows: torch.Tensor | None = None) -> Derivatives:
        t0 = time.perf_counter()
        trace = trace_outputs(model, params, obj_batch.X, self.jacobian)
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
    """The most rows any rank holds (one ``all_reduce`` with MAX): every rank sizes its
    epochs by it, so that all take the same number of mini-batch steps."""
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
