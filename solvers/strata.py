r"""Stratified pullback: the constraint Jacobian of group-rate rows in one backward pass per stratum.

Group rates ``c(out) = D W phi(out)``, ``W[g, i] = w_i 1{i in g} / n_g``, have
``dc_r / d out_i = w_i phi'(out_i) sum_g D[r, g] 1{i in g} / n_g``, so on a *stratum* ``A`` (rows in
the same groups) the block ``dc[:, A] = a_A v_A'``, ``v_A = (w_i phi'(out_i))_{i in A}``. For a
*row-wise* model (output ``i`` depends on row ``i`` alone, :func:`is_rowwise`)

``J = sum_A a_A (v_A' d out_A / dw)``,

with ``g = sum_A df_A' d out_A/dw`` on the same per-stratum graphs: two backward passes whatever the
number of rows ``m`` (the plain pullback needs ``1 + m``). A block not numerically of rank one is
pulled back row by row (:func:`rank_one_factors`), so the strata are only a hint. Constraints
announce strata by ``strata(batch)`` (:class:`solvers.contract.Stratified`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

import torch
from torch import nn

from solvers.contract import offers_strata

__all__ = ["MAX_STRATA", "MIN_ROWS", "ROWWISE_TYPES", "RowStrata", "StrataPlan", "has_hidden_layer", "is_rowwise",
           "plan_strata", "rank_one_factors", "row_codes", "segment_factors", "stratum_codes"]

#: Module types computed row by row (exact types: a subclass may override ``forward``); other modules
#: declare it with ``rowwise = True``.
ROWWISE_TYPES: tuple[type[nn.Module], ...] = (
    nn.Sequential, nn.Linear, nn.Identity, nn.Dropout, nn.Flatten, nn.LayerNorm, nn.ReLU, nn.LeakyReLU, nn.PReLU,
    nn.ELU, nn.SELU, nn.CELU, nn.GELU, nn.SiLU, nn.Mish, nn.Tanh, nn.Sigmoid, nn.Softplus, nn.Hardtanh,
)

#: More strata than this and the per-stratum passes cost more than they save: plain pullback.
MAX_STRATA = 64
#: Fewer rows than this and the per-stratum passes cost more than they save (solver_notes.md).
MIN_ROWS = 4096


def is_rowwise(model: nn.Module) -> bool:
    """Whether ``model(X)[i]`` depends on ``X[i]`` alone: every module of an exact type in
    :data:`ROWWISE_TYPES` or declaring ``rowwise = True``."""
    if not isinstance(model, nn.Module):
        return False
    return all(type(m) in ROWWISE_TYPES or getattr(m, "rowwise", False) is True for m in model.modules())


def has_hidden_layer(model: nn.Module) -> bool:
    """Whether more than one module holds trainable parameters directly (not a single linear map)."""
    return sum(1 for m in model.modules() if any(p.requires_grad for p in m.parameters(recurse=False))) > 1


@dataclass(frozen=True, eq=False)
class RowStrata:
    """The stratum ``codes`` (n,), ``0 .. s-1``, of a batch's rows, and ``representatives``, a batch whose
    row ``k`` is in stratum ``k`` (possibly from the full data: a mini-batch may miss a stratum), off
    which constraints read each stratum's groups once."""

    codes: torch.Tensor
    representatives: Any
    #: the strata's contiguous segments when the rows are ordered by stratum: sums over slices, not a scatter
    bounds: tuple[tuple[int, int], ...] | None = None

    def __post_init__(self) -> None:
        codes = self.codes
        if codes.dim() != 1 or codes.is_floating_point() or codes.dtype == torch.bool:
            raise ValueError(f"codes: expected a 1-d integer tensor, got {codes.dtype} of shape {tuple(codes.shape)}")
        low, high = codes.aminmax() if codes.numel() else (0, 0)
        if int(low) < 0 or int(high) >= self.n_strata:
            raise ValueError(f"codes: expected values in 0..{self.n_strata - 1} (one per representative row)")

    @property
    def n_strata(self) -> int:
        return len(self.representatives)

    @classmethod
    def from_bounds(cls, batch: Any, bounds: Sequence[tuple[int, int]]) -> RowStrata:
        """Stratum ``k`` = rows ``a:b`` of ``batch`` for ``bounds[k] = (a, b)``, segments tiling the rows in order."""
        ends = [0]
        for a, b in bounds:
            if a != ends[-1] or b <= a:
                raise ValueError(f"bounds: expected non-empty segments that tile the rows in order, got {list(bounds)}")
            ends.append(b)
        if ends[-1] != len(batch):
            raise ValueError(f"bounds: expected segments that tile the {len(batch)} rows, got {list(bounds)}")
        lengths = torch.tensor([b - a for a, b in bounds], dtype=torch.long)
        codes = torch.repeat_interleave(torch.arange(len(bounds)), lengths)
        return cls(codes, batch.subset(torch.tensor(ends[:-1], dtype=torch.long)), tuple(bounds))

    def sums(self, x: torch.Tensor | None = None) -> torch.Tensor:
        """Per-stratum sums ``s_k = sum_{i: codes_i = k} x_i`` (float64, (s,)); row counts for ``x = None``."""
        if self.bounds is not None:
            if x is None:
                return torch.tensor([float(b - a) for a, b in self.bounds], dtype=torch.float64)
            return torch.stack([x[a:b].sum(dtype=torch.float64) for a, b in self.bounds])
        if x is None:
            return torch.bincount(self.codes, minlength=self.n_strata).to(torch.float64)
        codes = self.codes if self.codes.device == x.device else self.codes.to(x.device)
        return torch.bincount(codes, weights=x.to(torch.float64), minlength=self.n_strata)

    def expand(self, columns: torch.Tensor) -> torch.Tensor:
        """``columns[:, codes]``: (k, s) per stratum spread to (k, n) per row (``index_select``, faster than
        advanced indexing)."""
        return columns.index_select(1, self.codes.to(columns.device))


@dataclass(frozen=True)
class StrataPlan:
    """``source`` reordered by stratum: ``batch = source.subset(order)``, stratum ``k`` in rows
    ``bounds[k][0]:bounds[k][1]`` of ``batch`` (``strata``: the same layout as a :class:`RowStrata`)."""

    source: Any
    batch: Any
    bounds: tuple[tuple[int, int], ...]
    strata: RowStrata


def stratum_codes(cons: Any, batch: Any) -> torch.Tensor | None:
    """``cons.strata(batch)`` as a long tensor of one code per row, or None."""
    codes = cons.strata(batch) if offers_strata(cons) else None
    if codes is None:
        return None
    codes = torch.as_tensor(codes).reshape(-1).long()
    if codes.numel() != len(batch):
        raise ValueError(f"strata: expected one code per row ({len(batch)}), got {codes.numel()}")
    return codes


def plan_strata(cons: Any, batch: Any, max_strata: int = MAX_STRATA) -> StrataPlan | None:
    """``batch`` reordered stably by stratum, or None without strata, with one or more than
    ``max_strata``."""
    codes = stratum_codes(cons, batch)
    if codes is None:
        return None
    _, counts = torch.unique(codes, return_counts=True)
    if not 1 < counts.numel() <= max_strata:
        return None
    order = torch.argsort(codes, stable=True)
    ends = torch.cumsum(counts, 0).tolist()
    bounds = tuple(zip([0] + ends[:-1], ends))
    ordered = batch.subset(order)
    return StrataPlan(source=batch, batch=ordered, bounds=bounds, strata=RowStrata.from_bounds(ordered, bounds))


def row_codes(table: torch.Tensor) -> torch.Tensor:
    """``torch.unique(table, dim=0, return_inverse=True)[1]`` for a non-negative integer table (n, k), by
    packing each row into ``sum_j table[:, j] prod_{l > j} r_l`` (``r_l`` the values of column ``l``)
    and a much faster one-dimensional ``unique``; ``unique(dim=0)`` beyond 62 bits."""
    table = torch.as_tensor(table)
    if table.dim() != 2:
        raise ValueError(f"table: expected a 2-d tensor (rows, columns), got shape {tuple(table.shape)}")
    table = table.long()
    n, k = table.shape
    if n == 0 or k == 0:
        return torch.zeros(n, dtype=torch.long)
    if bool((table < 0).any()):
        raise ValueError("table: expected non-negative entries")
    radices = (table.amax(dim=0) + 1).tolist()
    packed_max, weights = 1, []
    for r in reversed(radices):
        weights.append(packed_max)
        packed_max *= int(r)
    if packed_max >= 2**62:
        return torch.unique(table, dim=0, return_inverse=True)[1]
    packed = (table * torch.tensor(weights[::-1], dtype=torch.long)).sum(dim=1)
    return torch.unique(packed, return_inverse=True)[1]


def rank_one_factors(block: torch.Tensor, check: bool = True) -> tuple[torch.Tensor, torch.Tensor]:
    """``(coef (m, r), rows (r, k))`` with ``coef @ rows == block`` (an ``m x k`` block of ``dc/d out``).

    ``r = 0`` for a zero block; ``r = 1`` (``v`` the largest row, ``coef = block[:, j] / v[j]`` at its
    largest entry) when every residual ``|block - coef v'|`` is within ``64 eps`` of the largest
    entry; otherwise the nonzero rows themselves, so the factorisation is exact in every case.
    ``check=False`` (rank one by construction) skips the residual pass.
    """
    m = block.shape[0]
    if block.numel() == 0:
        return block.new_zeros(m, 0), block[:0]
    scale = block.abs().amax(dim=1)  # (aminmax along a dimension is several times slower on CPU)
    top_row = int(torch.argmax(scale))
    top = float(scale[top_row])
    if top == 0.0:
        return block.new_zeros(m, 0), block[:0]
    v = block[top_row]
    j = int(torch.argmax(v.abs()))
    coef = block[:, j] / v[j]
    if not check:
        return coef[:, None], v[None, :]
    low, high = torch.addcmul(block, coef[:, None], v[None, :], value=-1.0).aminmax()  # the residuals, one pass
    if max(float(high), -float(low)) <= 64 * torch.finfo(block.dtype).eps * top:
        return coef[:, None], v[None, :]
    nonzero = torch.nonzero(scale > 0).reshape(-1)
    return torch.eye(m, dtype=block.dtype)[:, nonzero], block[nonzero]


def segment_factors(dc: torch.Tensor, bounds: Sequence[tuple[int, int]]) -> tuple[torch.Tensor, torch.Tensor]:
    """``(coef (m, s), v (n,))`` with ``dc[:, a:b] == coef[:, k] v[a:b]'`` on each segment of ``bounds``,
    for blocks of rank one by construction."""
    coef = dc.new_zeros(dc.shape[0], len(bounds))
    v = dc.new_zeros(dc.shape[1])
    for k, (a, b) in enumerate(bounds):
        block_coef, rows = rank_one_factors(dc[:, a:b], check=False)
        if rows.shape[0]:
            coef[:, k] = block_coef[:, 0]
            v[a:b] = rows[0]
    return coef, v
