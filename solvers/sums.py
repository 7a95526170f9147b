r"""Derivatives from additive per-group sums: over row chunks (one process) or shards.

Under :class:`solvers.contract.SumsConstraint` constraints every quantity of an SQP iteration is a
sum over rows (weighted with ``batch.weights``): ``n f`` and its gradient, the group sums ``S_g`` and
counts ``N_g``, ``dS/dw`` and the exact sums. :func:`local_sums` computes them on one block from one
forward pass, :func:`add_sums` adds disjoint blocks, and :func:`derivatives_from_sums` gives
``f = L/N``, ``g = grad L / N``, ``c = C(S, N_g)``, ``J = (dC/dS) dS/dw``.
:class:`ChunkedDerivatives` bounds a full-data pass's memory by a chunk (the data may be memory
mapped); :class:`solvers.distributed.AllReduceDerivatives` adds the ranks' pieces instead.
"""

from __future__ import annotations

import time
from typing import Any, Callable, Sequence

import torch
from torch import nn

from solvers.contract import supports_sums
from solvers.derivatives import Derivatives, LocalDerivatives, rows_jacobian, trace_through, with_parameter_gradient
from solvers.losses import LossFn, value_and_gradient
from solvers.problem import model_outputs, row_chunks, row_weights, weight_total

__all__ = ["FIELDS", "ChunkedDerivatives", "add_sums", "derivatives_from_sums", "exact_in_chunks", "local_sums",
           "rows_from_sums"]

FIELDS = ("loss_sum", "n", "grad_sum", "sums", "counts", "dsums", "sums_exact")


def local_sums(out: torch.Tensor, batch: Any, loss_fn: LossFn, members: Sequence[Any],
               pull: Callable[[torch.Tensor], torch.Tensor]) -> tuple[dict[str, torch.Tensor], list[int]]:
    """The float64 pieces of one block (:data:`FIELDS`: ``loss_sum = n f``, ``n`` or the weight total,
    its gradient, ``sums``/``counts`` (G,), ``dsums = dS/dw`` (G, p), exact sums) and each member's
    number of sums; ``pull`` is the pullback of the trace that gave ``out``."""
    n = len(batch)
    total = n if row_weights(batch) is None else weight_total(batch)  # the mean's denominator
    f, df = value_and_gradient(loss_fn, out, batch)
    loss_sum, dloss = f * total, df * total
    leaf64 = out.detach().to(torch.float64).requires_grad_(True)
    with torch.enable_grad():
        parts = [member.partial_sums(leaf64, batch) for member in members]
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
    rows = pull(torch.cat([dloss.reshape(1, -1), dsums_dout]))  # (1 + G, p)
    f64 = torch.float64
    sizes = [int(s.numel()) for s, _ in parts]
    return {
        "loss_sum": loss_sum.to(f64).reshape(1),
        "n": torch.tensor([float(total)], dtype=f64),
        "grad_sum": rows[0].to(f64),
        "sums": sums.detach().to(f64),
        "counts": counts.to(f64),
        "dsums": rows[1:].to(f64),
        "sums_exact": exact.to(f64),
    }, sizes


def derivatives_from_sums(totals: dict[str, torch.Tensor], members: Sequence[Any], sizes: Sequence[int],
                          dtype: torch.dtype, constrained: bool, t_forward: float, t_jacobian: float) -> Derivatives:
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
        c = rows_from_sums(members, sizes, sums, totals["counts"])
    dc_dsums = rows_jacobian(c, sums) if c.numel() else torch.zeros(0, sums.numel(), dtype=torch.float64)
    J = dc_dsums @ totals["dsums"]
    with torch.no_grad():
        c_exact = rows_from_sums(members, sizes, totals["sums_exact"], totals["counts"])
    return Derivatives(f, g, c.detach(), J, c_exact, t_forward, t_jacobian)


def rows_from_sums(members: Sequence[Any], sizes: Sequence[int], sums: torch.Tensor,
                   counts: torch.Tensor) -> torch.Tensor:
    """Concatenated ``member.from_sums`` over the members' slices (``sizes``) of ``sums``/``counts``."""
    rows, start = [], 0
    for member, size in zip(members, sizes):
        rows.append(member.from_sums(sums[start:start + size], counts[start:start + size]).reshape(-1))
        start += size
    return torch.cat(rows).to(torch.float64) if rows else torch.zeros(0, dtype=torch.float64)


def add_sums(total: dict[str, torch.Tensor] | None, part: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """``total + part`` field by field (``part`` itself when ``total`` is None)."""
    if total is None:
        return {k: v.clone() for k, v in part.items()}
    return {k: total[k] + part[k] for k in FIELDS}


class ChunkedDerivatives:
    """The derivative oracle of one process with full-data passes in chunks of ``chunk_rows`` rows.

    A call on more than ``chunk_rows`` rows, constraints on the same rows and all with sums, runs a
    forward pass and ``1 + G`` pullbacks per chunk and adds the pieces, so peak memory is one
    chunk's; any other call is :class:`solvers.derivatives.LocalDerivatives`. Values equal the
    unchunked ones up to summation order; the ``rows`` hint is unused.
    """

    def __init__(self, chunk_rows: int, jacobian: str = "auto") -> None:
        self.local = LocalDerivatives(jacobian)
        self.chunk_rows = int(chunk_rows)
        if self.chunk_rows < 1:
            raise ValueError(f"chunk_rows: expected a positive integer, got {chunk_rows!r}")

    def __call__(self, model: nn.Module, params: list[torch.Tensor], loss_fn: LossFn, cons: Any, obj_batch: Any,
                 con_batch: Any, rows: torch.Tensor | None = None, *,
                 objective_gradient: bool = True) -> Derivatives:
        n = len(obj_batch)
        members = list(cons) if con_batch is not None else []
        if (n <= self.chunk_rows or (con_batch is not None and con_batch is not obj_batch)
                or not all(supports_sums(m) for m in members)):
            return self.local(model, params, loss_fn, cons, obj_batch, con_batch, rows,
                              objective_gradient=objective_gradient)
        t_forward = t_jacobian = 0.0
        total, sizes = None, []
        for chunk in row_chunks(obj_batch, self.chunk_rows):
            t0 = time.perf_counter()
            trace = trace_through(self.local.network(model, params), model, params, chunk.X, self.local.jacobian)
            t1 = time.perf_counter()
            part, sizes = local_sums(trace.out, chunk, loss_fn, members, trace.pullback)
            total = add_sums(total, part)
            t_forward, t_jacobian = t_forward + (t1 - t0), t_jacobian + (time.perf_counter() - t1)
        der = derivatives_from_sums(total, members, sizes, params[0].dtype, con_batch is not None, t_forward,
                                    t_jacobian)
        return with_parameter_gradient(der, loss_fn, params)


def exact_in_chunks(model: nn.Module, loss_fn: LossFn, cons: Any, data: Any, chunk_rows: int,
                    reduce: Callable[[torch.Tensor], torch.Tensor] | None = None
                    ) -> tuple[float, torch.Tensor | None] | None:
    """``f`` and ``c_exact`` on all rows of ``data`` from additive sums, one forward pass per chunk; None
    when a constraint has no sums. ``reduce`` sums a float64 vector over the ranks (data-parallel)."""
    members = list(cons)
    if not all(supports_sums(m) for m in members):
        return None
    n = len(data)
    weighted = row_weights(data) is not None
    loss_sum, sums, counts, sizes = 0.0, None, None, []
    with torch.no_grad():
        for chunk in row_chunks(data, chunk_rows):
            out = model_outputs(model, chunk)
            loss_sum += float(loss_fn(out, chunk)) * (weight_total(chunk) if weighted else len(chunk))
            if members:
                parts = [m.partial_sums(out.to(torch.float64), chunk, exact=True) for m in members]
                s = torch.cat([p[0].reshape(-1) for p in parts]).to(torch.float64)
                k = torch.cat([p[1].reshape(-1) for p in parts]).to(torch.float64)
                sums, counts = (s, k) if sums is None else (sums + s, counts + k)
                sizes = [int(p[0].numel()) for p in parts]
    denominator = weight_total(data) if weighted else float(n)  # rows, or the weight total
    if reduce is not None:
        empty = torch.zeros(0, dtype=torch.float64)
        local = torch.cat([torch.tensor([loss_sum, denominator], dtype=torch.float64),
                           empty if sums is None else sums, empty if counts is None else counts])
        total = reduce(local)
        loss_sum, denominator = float(total[0]), float(total[1])
        if sums is not None:
            sums, counts = total[2 : 2 + sums.numel()], total[2 + sums.numel():]
    c = rows_from_sums(members, sizes, sums, counts) if members and cons.n_rows else None
    return loss_sum / denominator, c
