r"""Stratified pullback: the constraint Jacobian of group-rate rows in one backward pass per stratum.

Rows that are linear in per-row values, ``c(out) = D W phi(out)`` with ``W[g, i] = w_i 1{i in g} / n_g``
(group rates, weighted or not), have ``dc_r / d out_i = w_i phi'(out_i) sum_g D[r, g] 1{i in g} / n_g``.
Rows ``i`` that lie in the same groups (a *stratum*) therefore share one direction: on stratum ``A``
the block ``dc[:, A]`` of the ``m x n`` Jacobian in the outputs is ``a_A v_A'`` with ``a_A`` in
``R^m`` and ``v_A = (w_i phi'(out_i))_{i in A}``. With the model evaluated separately on each
stratum's rows (a *row-wise* model: row ``i``'s output depends on row ``i`` alone), the parameter
Jacobian is

``J = sum_A a_A (v_A' d out_A / dw)``,

one vector-Jacobian product per stratum, plus the objective gradient ``g = sum_A df_A' d out_A/dw``
on the same per-stratum graphs: two backward passes over the rows in all, whatever the number of
constraint rows ``m`` (the plain pullback needs ``1 + m``). A block that is not numerically of rank
one (e.g. two members with different surrogates ``phi``) is pulled back row by row, so the result is
exact in every case; the rank test is the safeguard, the strata only a hint. Constraints whose
blocks are of rank one by construction may hand the factors themselves, ``a_A`` for every stratum
and ``v`` on all rows (``solvers.problem.ConstraintSet.rows_and_factors``); otherwise
:func:`segment_factors` reads them off the dense matrix.

This module is fairness-agnostic: constraints announce their strata through an optional method
``strata(batch) -> LongTensor (n,)`` (rows with equal codes share every group); models through their
types (:data:`ROWWISE_TYPES`) or an attribute ``rowwise = True`` on a module whose output rows depend on
its input rows one by one.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

import torch
from torch import nn

from solvers.contract import offers_strata

__all__ = ["MAX_STRATA", "MIN_ROWS", "ROWWISE_TYPES", "RowStrata", "StrataPlan", "has_hidden_layer", "is_rowwise",
           "plan_strata", "rank_one_factors", "row_codes", "segment_factors", "stratum_codes"]

#: Module types whose outputs are computed row by row (exact types: a subclass may override
#: ``forward``). Any other module makes a model non-row-wise unless it sets ``rowwise = True``.
ROWWISE_TYPES: tuple[type[nn.Module], ...] = (
    nn.Sequential, nn.Linear, nn.Identity, nn.Dropout, nn.Flatten, nn.LayerNorm, nn.ReLU, nn.LeakyReLU, nn.PReLU,
    nn.ELU, nn.SELU, nn.CELU, nn.GELU, nn.SiLU, nn.Mish, nn.Tanh, nn.Sigmoid, nn.Softplus, nn.Hardtanh,
)

#: More strata than this and the per-stratum passes cost more than they save: plain pullback.
MAX_STRATA = 64
#: Fewer rows than this and the layout and per-stratum passes cost more than they save (slower
#: than row by row on mini-batches of 1024 rows, faster on a full batch of tens of thousands;
#: ``benchmarks/results/solver_notes.md``).
MIN_ROWS = 4096


def is_rowwise(model: nn.Module) -> bool:
    """Whether ``model(X)[i]`` depends on ``X[i]`` alone, judged from its modules' types.

    True when every module in ``model.modules()`` has an exact type in :data:`ROWWISE_TYPES` or an
    attribute ``rowwise`` that is True (a custom module's declaration). A batch-normalisation layer,
    attention across rows or any undeclared custom module gives False.
    """
    if not isinstance(model, nn.Module):
        return False
    return all(type(m) in ROWWISE_TYPES or getattr(m, "rowwise", False) is True for m in model.modules())


def has_hidden_layer(model: nn.Module) -> bool:
    """Whether more than one module of ``model`` holds trainable parameters directly (a network
    with a hidden layer, not a single linear map)."""
    return sum(1 for m in model.modules() if any(p.requires_grad for p in m.parameters(recurse=False))) > 1


@dataclass(frozen=True, eq=False)
class RowStrata:
    """The stratum of every row of a batch, in any row order.

    ``codes`` (n,) numbers the strata ``0 .. s-1`` (rows with equal codes lie in the same groups,
    as the constraints' ``strata`` method says); ``representatives`` is a batch of ``s`` rows, row
    ``k`` one of stratum ``k`` (from this batch or from the data it was drawn from: a mini-batch may
    miss a stratum). Built from the contiguous segments of a batch ordered by stratum
    (:meth:`from_bounds`) or from the codes of rows drawn from data whose strata are known (the
    constructor). Constraints read the groups of each stratum off ``representatives`` once (an object
    they may cache by identity) and per-stratum sums (:meth:`sums`) off ``codes``.
    """

    codes: torch.Tensor
    representatives: Any
    #: the contiguous segments of the strata when the rows are ordered by stratum (:meth:`from_bounds`):
    #: sums over slices then, several times faster than a scatter over codes on large batches
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
        """Stratum ``k`` = rows ``a:b`` of ``batch`` for ``bounds[k] = (a, b)``; the segments must tile
        ``0:len(batch)`` in order.

        Raises
        ------
        ValueError
            Segments that are empty, out of order or leave a gap."""
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
        """Per-stratum sums ``s_k = sum_{i: codes_i = k} x_i`` (float64, (s,)); row counts for ``x = None``.
        Over the slices of :attr:`bounds` when the rows are ordered by stratum (several times
        faster than the scatter), else a scatter over the codes."""
        if self.bounds is not None:
            if x is None:
                return torch.tensor([float(b - a) for a, b in self.bounds], dtype=torch.float64)
            return torch.stack([x[a:b].sum(dtype=torch.float64) for a, b in self.bounds])
        if x is None:
            return torch.bincount(self.codes, minlength=self.n_strata).to(torch.float64)
        codes = self.codes if self.codes.device == x.device else self.codes.to(x.device)
        return torch.bincount(codes, weights=x.to(torch.float64), minlength=self.n_strata)

    def expand(self, columns: torch.Tensor) -> torch.Tensor:
        """``columns[:, codes]``: a value per stratum (k, s) spread to a value per row (k, n) (through
        ``index_select``, which copies the same entries as advanced indexing several times faster)."""
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
    """``cons.strata(batch)`` as a long tensor of one code per row, or None when ``cons`` has no
    ``strata`` method (or it returns None: some member has no strata).

    Raises
    ------
    ValueError
        The method does not return one code per row."""
    codes = cons.strata(batch) if offers_strata(cons) else None
    if codes is None:
        return None
    codes = torch.as_tensor(codes).reshape(-1).long()
    if codes.numel() != len(batch):
        raise ValueError(f"strata: expected one code per row ({len(batch)}), got {codes.numel()}")
    return codes


def plan_strata(cons: Any, batch: Any, max_strata: int = MAX_STRATA) -> StrataPlan | None:
    """The stratified layout of ``batch`` for the constraint set ``cons``, or None.

    None when ``cons`` has no ``strata`` method (or it returns None: some member has no strata),
    when there is a single stratum or more than ``max_strata``. The codes are sorted stably, so rows
    keep their relative order inside a stratum.
    """
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
    """One code per row of ``table`` (n, k) of non-negative integers or booleans: equal rows get
    equal codes, numbered 0, 1, ... in the lexicographic order of the rows.

    The same labels as ``torch.unique(table, dim=0, return_inverse=True)[1]``, computed by
    packing each row into one integer ``sum_j table[:, j] prod_{l > j} r_l`` (``r_l`` the
    number of values of column ``l``; the first column is the most significant, so the order
    is kept) and a one-dimensional ``unique``, an order of magnitude faster than
    ``unique(dim=0)`` on tens of thousands of rows. Falls back to ``unique(dim=0)`` when the packed codes would not
    fit in 62 bits.
    """
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

    ``r = 0`` for a zero block; ``r = 1`` (``rows`` the block's largest row ``v``, ``coef`` the ratios
    ``block[:, j] / v[j]`` at the largest entry ``j`` of ``v``) when every residual
    ``|block - coef v'|`` is within ``64 eps`` of the block's largest entry, ``eps`` the block's
    machine precision; otherwise the nonzero rows themselves (``coef`` picks them), so the
    factorisation is exact up to that tolerance in every case. Rows that are exactly proportional
    in real arithmetic (``a_r phi'(out_i)`` rounded once) pass with residuals of a few ``eps``.
    All in the block's dtype (four passes over it, no float64 copy). ``check=False`` (a block
    of rank one by construction, ``solvers.problem.ConstraintSet.shared_direction``) skips the
    residual pass and returns the rank-one factors of any nonzero block.
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
    """``(coef (m, s), v (n,))`` with ``dc[:, a:b] == coef[:, k] v[a:b]'`` on each segment ``k = (a, b)``
    of ``bounds``, for an ``m x n`` matrix whose blocks are of rank one by construction (each the
    unchecked :func:`rank_one_factors` of the block; a zero block gives ``coef[:, k] = 0``)."""
    coef = dc.new_zeros(dc.shape[0], len(bounds))
    v = dc.new_zeros(dc.shape[1])
    for k, (a, b) in enumerate(bounds):
        block_coef, rows = rank_one_factors(dc[:, a:b], check=False)
        if rows.shape[0]:
            coef[:, k] = block_coef[:, 0]
            v[a:b] = rows[0]
    return coef, v
