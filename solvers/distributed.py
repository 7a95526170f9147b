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
the model, :func:`solvers.derivatives.pullback`), packs it into one float64
vector and calls ``all_reduce(SUM)`` once per iteration. The reduced vector is the same on
every rank, so every rank solves the same QP and takes the same step: the parameters stay
bit-identical across ranks, and equal the single-process full-data iterates up to
floating-point summation order.

A constraint supports data parallelism when it implements :class:`DataParallelConstraint`
(``partial_sums(out, batch, exact=False) -> (sums, counts)`` and
``from_sums(sums, counts) -> c``); :class:`fairopt.constraints.DisparateImpact`,
``EqualImpact`` and ``DemographicParity`` do.

Scope: full-batch only (``batch_size=None``, ``constraint_batch="full"``); mini-batch and
balanced stochastic SQP raise ``ValueError``. The loss must be a mean over rows (the
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
:class:`solvers.sqp.DistributedSQP` is the engine that insists on it (the package attaches
it here too, so the old path ``solvers.distributed.DistributedSQP`` still imports).
"""

from __future__ import annotations

import logging
import time
from typing import Any, Protocol, Sequence, runtime_checkable

import torch
import torch.distributed as dist
from torch import nn

from solvers.derivatives import Derivatives, model_outputs, pullback, rows_jacobian
from solvers.losses import LossFn
from solvers.problem import as_constraint_set, assign_parameters, flat_parameters
from solvers.validation import check_flag

__all__ = ["AllReduceDerivatives", "DataParallelConstraint", "broadcast_parameters", "check_data_parallel_options",
           "distributed_active", "supports_data_parallel"]

logger = logging.getLogger(__name__)


@runtime_checkable
class DataParallelConstraint(Protocol):
    """A constraint whose rows are a function of additive per-group sums.

    ``partial_sums(out, batch, exact=False)`` returns ``(sums, counts)``, two tensors of
    shape ``(G,)`` that add up over disjoint row shards (``sums`` differentiable in ``out``;
    ``exact=True``: the sums behind :meth:`Constraint.exact`). ``from_sums(sums, counts)``
    maps the sums over the whole data to the ``m`` rows ``c``, differentiable in ``sums``,
    such that ``from_sums(*partial_sums(out, data)) == constraint(out, data)``.
    """

    def partial_sums(self, out: torch.Tensor, batch: Any, exact: bool = False) -> tuple[torch.Tensor, torch.Tensor]: ...

    def from_sums(self, sums: torch.Tensor, counts: torch.Tensor) -> torch.Tensor: ...


def supports_data_parallel(constraint: Any) -> bool:
    """True if ``constraint`` has callable ``partial_sums`` and ``from_sums``."""
    return callable(getattr(constraint, "partial_sums", None)) and callable(getattr(constraint, "from_sums", None))


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
    """Data-parallel SQP is full-batch with constraints on all rows, and every constraint
    must implement :class:`DataParallelConstraint`; ValueError otherwise."""
    if batch_size is not None:
        raise ValueError(f"batch_size: data-parallel SQP is full-batch only (batch_size=None), got "
                         f"{batch_size!r}; pass distributed=False for per-rank stochastic training")
    if constraint_batch not in ("full", "auto"):
        raise ValueError(f"constraint_batch: data-parallel SQP needs 'full' (or 'auto'), got {constraint_batch!r}")
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
        Strategy of :func:`solvers.derivatives.pullback`.
    """

    def __init__(self, jacobian: str = "auto") -> None:
        self.jacobian = jacobian

    def __call__(self, model: nn.Module, params: list[torch.Tensor], loss_fn: LossFn, cons: Any, obj_batch: Any,
                 con_batch: Any) -> Derivatives:
        t0 = time.perf_counter()
        out = model_outputs(model, obj_batch)
        if con_batch is not None and con_batch is not obj_batch:  # pragma: no cover - excluded by the options
            raise ValueError("constraint_batch: data-parallel SQP evaluates constraints on the objective rows")
        t1 = time.perf_counter()
        members = list(cons) if con_batch is not None else []
        local, sizes = _local_sums(out, params, obj_batch, loss_fn, members,
                                   lambda o, p, cot: pullback(o, p, cot, self.jacobian))
        totals = _all_reduce_sum(local)
        return _global_derivatives(totals, members, sizes, params[0].dtype, con_batch is not None,
                                   t1 - t0, time.perf_counter() - t1)


# ----------------------------------------------------------------------------- pieces

_FIELDS = ("loss_sum", "n", "grad_sum", "sums", "counts", "dsums", "sums_exact")


def _local_sums(out: torch.Tensor, params: list[torch.Tensor], batch: Any, loss_fn: LossFn,
                members: Sequence[Any], pullback) -> tuple[dict[str, torch.Tensor], list[int]]:
    """This shard's additive pieces, all float64: ``loss_sum = n f`` (scalar), ``n``, its
    gradient (p,), group ``sums``/``counts`` (G,), ``dsums = dS/dw`` (G, p) and exact sums;
    and the number of sums of each member (data-independent, so equal on every rank)."""
    n = len(batch)
    leaf = out.detach().requires_grad_(True)
    leaf64 = out.detach().to(torch.float64).requires_grad_(True)
    with torch.enable_grad():
        loss_sum = loss_fn(leaf, batch) * n
        parts = [member.partial_sums(leaf64, batch) for member in members]
    (dloss,) = torch.autograd.grad(loss_sum, leaf)
    if parts:
        sums = torch.cat([s.reshape(-1) for s, _ in parts])
        counts = torch.cat([k.reshape(-1) for _, k in parts]).detach()
        dsums_dout = rows_jacobian(sums, leaf64).to(out.dtype)  # (G, n)
        with torch.no_grad():
            exact = torch.cat([member.partial_sums(leaf64.detach(), batch, exact=True)[0].reshape(-1)
                               for member in members])
    else:
        sums = counts = exact = torch.zeros(0, dtype=torch.float64)
        dsums_dout = torch.zeros(0, n, dtype=out.dtype)
    rows = pullback(out, params, torch.cat([dloss.reshape(1, -1), dsums_dout]))  # (1 + G, p)
    f64 = torch.float64
    sizes = [int(s.numel()) for s, _ in parts]
    return {
        "loss_sum": loss_sum.detach().to(f64).reshape(1),
        "n": torch.tensor([float(n)], dtype=f64),
        "grad_sum": rows[0].to(f64),
        "sums": sums.detach().to(f64),
        "counts": counts.to(f64),
        "dsums": rows[1:].to(f64),
        "sums_exact": exact.to(f64),
    }, sizes


def _all_reduce_sum(local: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Sum every piece over the ranks with ONE ``all_reduce`` on their concatenation."""
    shapes = [local[k].shape for k in _FIELDS]
    flat = torch.cat([local[k].reshape(-1) for k in _FIELDS])
    dist.all_reduce(flat, op=dist.ReduceOp.SUM)
    pieces = torch.split(flat, [s.numel() for s in shapes])
    return {k: piece.reshape(shape) for k, piece, shape in zip(_FIELDS, pieces, shapes)}


def _global_derivatives(totals: dict[str, torch.Tensor], members: Sequence[Any], sizes: Sequence[int],
                        dtype: torch.dtype,
                        constrained: bool, t_forward: float, t_jacobian: float) -> Derivatives:
    """``f = L/N``, ``g = grad L / N``, ``c = C(S, N_g)``, ``J = (dC/dS) dS/dw`` from the sums."""
    N = float(totals["n"])
    f = float(totals["loss_sum"]) / N
    g = (totals["grad_sum"] / N).to(dtype)
    p = g.numel()
    if not constrained:
        return Derivatives(f, g, torch.zeros(0, dtype=torch.float64), torch.zeros(0, p, dtype=torch.float64),
                            None, t_forward, t_jacobian)
    sums = totals["sums"].clone().requires_grad_(True)
    with torch.enable_grad():
        c = _rows_from_sums(members, sizes, sums, totals["counts"])
    dc_dsums = rows_jacobian(c, sums) if c.numel() else torch.zeros(0, sums.numel(), dtype=torch.float64)
    J = dc_dsums @ totals["dsums"]
    with torch.no_grad():
        c_exact = _rows_from_sums(members, sizes, totals["sums_exact"], totals["counts"])
    return Derivatives(f, g, c.detach(), J, c_exact, t_forward, t_jacobian)


def _rows_from_sums(members: Sequence[Any], sizes: Sequence[int], sums: torch.Tensor,
                    counts: torch.Tensor) -> torch.Tensor:
    """Concatenated ``member.from_sums`` over the members' slices (``sizes``) of ``sums``/``counts``."""
    rows, start = [], 0
    for member, size in zip(members, sizes):
        rows.append(member.from_sums(sums[start:start + size], counts[start:start + size]).reshape(-1))
        start += size
    return torch.cat(rows).to(torch.float64) if rows else torch.zeros(0, dtype=torch.float64)


def broadcast_parameters(params: Sequence[torch.Tensor]) -> None:
    """Copy rank 0's parameters to every rank (one broadcast of their concatenation)."""
    if not params:
        return
    flat = flat_parameters(params)
    dist.broadcast(flat, src=0)
    assign_parameters(params, flat)
