"""Group-rate and covariance fairness constraints ([SQP] sec 2-3).

Every constraint here is linear in one transformed output per row. With
``t = out - threshold`` and a surrogate ``phi`` (:mod:`fairopt.surrogates`), the smooth rows
are

``c(out) = D @ (W @ phi(t))``,

where ``W`` (``G x n``) holds group-membership weights normalised to means
(``W[g, i] = 1{i in g} / n_g``, so ``(W @ phi)_g = P_g``, the mean of ``phi`` over group
``g``) and ``D`` (``m x G``) combines the group means into rows (e.g. ``delta * P_0 - P_1``).
:meth:`exact` evaluates the same rows with ``phi`` replaced by the hard step
``1{out > threshold}``, and :meth:`target_encoding` returns ``D @ W`` as linear rows on a
vector of hard labels ``z``. ``W`` and ``D`` depend only on the batch; they are built once per
batch with ``one_hot`` (no Python loop over data rows, no boolean indexing) and cached, so the
per-iteration cost is two matrix-vector products.

Groups
------
``sensitive`` names one attribute or several (``batch.sensitive[name]``; binary 0/1 or
categorical codes ``0..K-1``):

- a binary attribute (or any grouping with ``K = 2`` groups) gives one comparison: group 1
  against group 0 ([SQP] eq 5 and Thm 2.1 use exactly these two rates);
- ``K > 2`` groups, ``groups="one_vs_rest"`` (default): each group ``g`` against the rows
  not in ``g`` - ``K`` comparisons, so the number of rows grows linearly in ``K``, and each
  group's rate is compared with the population it is excluded from (the usual reading of
  "group vs rest" disparate impact). It does not bound every pair of groups: two groups can
  each be within ``delta`` of their complements yet about ``delta^2`` of each other;
- ``groups="pairwise"``: every unordered pair ``{g, h}``, ``g < h`` (group ``h`` against
  group ``g``) - ``K (K - 1) / 2`` comparisons, bounding every pair;
- several attributes: the groups are the intersection cells of their levels, in row-major
  order of the listed attributes (the last attribute varies fastest, like
  ``itertools.product``), compared one-vs-rest or pairwise as above; with
  ``groups="marginal"`` each attribute is instead constrained on its own groups (its pair
  if ``K = 2``, else one-vs-rest) and the row blocks are concatenated in the listed order.

Empty groups: a group with no rows in a batch (no rows with ``y = 1`` for
:class:`EqualImpact`) has no defined mean. Every row that compares it is set to 0 ("no
information": the row is satisfied and has zero gradient) instead of being dropped, so the
number of rows never depends on the batch. This is logged at debug level for each new batch,
and :meth:`setup` warns (:class:`~fairopt.exceptions.FairnessWarning`) when it happens on the
training data itself.

The cache keeps the operators of the last few batches, keyed on ``id(batch)``,
``len(batch)`` and the dtype/device of ``out``; each entry holds a reference to its batch so
that no other object can take the same id while it is cached. It assumes a batch is not
modified in place after first use.
"""

from __future__ import annotations

import itertools
import logging
import math
import warnings
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F

from fairopt._validation import (as_1d_tensor, check_binary, check_interval, finite_float, nonnegative_float,
                                 sensitive_names)
from fairopt.constraints.base import BaseConstraint
from fairopt.exceptions import FairnessWarning
from fairopt.surrogates import Linear, Surrogate, get_surrogate
from solvers.problem import LinearEncoding

__all__ = ["DisparateImpact", "EqualImpact", "DemographicParity", "Covariance", "GroupRateConstraint"]

logger = logging.getLogger(__name__)

GROUPINGS = ("one_vs_rest", "pairwise", "marginal")
_CACHE_SIZE = 4
_KINDS = ("binary", "categorical", "continuous")
_FLOAT = torch.float64

# ----------------------------------------------------------------------------- groups


@dataclass(frozen=True)
class _Partition:
    """The rows split into groups by one attribute or by the cells of several.

    ``sizes`` holds the number of levels of each attribute in ``names`` and ``labels`` one
    label per group (``"sex=F&race=B"``). A continuous attribute has ``sizes == ()`` and its
    name as the only label.
    """

    names: tuple[str, ...]
    sizes: tuple[int, ...]
    labels: tuple[str, ...]

    @property
    def continuous(self) -> bool:
        return not self.sizes

    @property
    def n_groups(self) -> int:
        return len(self.labels)

    def codes(self, batch: Any) -> torch.Tensor:
        """Group id of every row, ``sum_j code_j * prod_{k > j} size_k`` (row-major cells)."""
        cell = None
        for name, size in zip(self.names, self.sizes):
            code = _attribute_codes(batch, name, size)
            cell = code if cell is None else cell * size + code
        return cell

    def indicators(self, batch: Any) -> torch.Tensor:
        """Group membership ``(n_groups, n)`` as float64 0/1."""
        return F.one_hot(self.codes(batch), self.n_groups).T.to(_FLOAT)

    def values(self, batch: Any) -> torch.Tensor:
        """The raw values ``(n,)`` of a continuous attribute, as float64."""
        return _sensitive_column(batch, self.names[0]).to(_FLOAT)


def _metadata(data: Any, field: str) -> Mapping:
    value = getattr(data, field, None)
    if not isinstance(value, Mapping):
        raise ValueError(f"data: expected a FairData-like object with a dict `{field}`, got {type(data).__name__}")
    return value


def _sensitive_column(batch: Any, name: str) -> torch.Tensor:
    """``batch.sensitive[name]`` checked to be a tensor of one value per row."""
    columns = _metadata(batch, "sensitive")
    if name not in columns:
        raise ValueError(f"sensitive: unknown name {name!r}; available: {sorted(columns)}")
    column = columns[name]
    if not isinstance(column, torch.Tensor) or column.shape != (len(batch),):
        shape = tuple(column.shape) if isinstance(column, torch.Tensor) else type(column).__name__
        raise ValueError(f"sensitive[{name!r}]: expected a tensor of shape ({len(batch)},), got {shape}")
    return column


def _attribute_codes(batch: Any, name: str, size: int) -> torch.Tensor:
    """Long codes ``0..size-1`` of a binary or categorical attribute, validated."""
    column = _sensitive_column(batch, name)
    if _metadata(batch, "sensitive_kinds")[name] == "binary":
        return check_binary(column, f"sensitive[{name!r}]").long()
    if column.is_floating_point() and bool((column != column.round()).any()):
        raise ValueError(f"sensitive[{name!r}]: categorical codes must be integers")
    codes = column.long()
    bad = (codes < 0) | (codes >= size)
    if bool(bad.any()):
        raise ValueError(
            f"sensitive[{name!r}]: codes must lie in 0..{size - 1} ({size} levels), got {codes[bad][0].item()}"
        )
    return codes


def _levels(data: Any, name: str, kind: str) -> list[str]:
    """Level labels of a binary/categorical attribute (``["0", "1"]`` if a binary one has none)."""
    levels = [str(level) for level in _metadata(data, "sensitive_levels").get(name) or []]
    if kind == "binary" and not levels:
        levels = ["0", "1"]
    if kind == "binary" and len(levels) != 2:
        raise ValueError(f"sensitive_levels[{name!r}]: a binary attribute needs 2 levels, got {levels}")
    if len(levels) < 2:
        raise ValueError(f"sensitive: {name!r} has {len(levels)} level(s); at least 2 groups are needed")
    return levels


def _resolve_partitions(
    data: Any, names: tuple[str, ...], marginal: bool, allow_continuous: bool
) -> tuple[_Partition, ...]:
    """The partitions that ``names`` define on ``data``'s sensitive attributes (module doc)."""
    kinds = _metadata(data, "sensitive_kinds")
    available = sorted(_metadata(data, "sensitive"))
    for name in names:
        if name not in kinds or name not in available:
            raise ValueError(f"sensitive: unknown name {name!r}; available: {available}")
        if kinds[name] not in _KINDS:
            raise ValueError(f"sensitive_kinds[{name!r}]: expected one of {_KINDS}, got {kinds[name]!r}")
    continuous = [name for name in names if kinds[name] == "continuous"]
    if continuous and not allow_continuous:
        raise ValueError(
            f"sensitive: {continuous} is continuous and has no groups; use Covariance for a continuous "
            "attribute (or bin it into a categorical one)"
        )
    if len(names) > 1 and not marginal:
        if continuous:
            raise ValueError(
                f"sensitive: cannot form intersection cells with the continuous {continuous}; "
                "pass groups='marginal'"
            )
        levels = [_levels(data, name, kinds[name]) for name in names]
        labels = tuple(
            "&".join(f"{name}={level}" for name, level in zip(names, cell)) for cell in itertools.product(*levels)
        )
        return (_Partition(names, tuple(len(lv) for lv in levels), labels),)
    partitions = []
    for name in names:
        if kinds[name] == "continuous":
            partitions.append(_Partition((name,), (), (name,)))
        else:
            levels = _levels(data, name, kinds[name])
            partitions.append(_Partition((name,), (len(levels),), tuple(f"{name}={lv}" for lv in levels)))
    return tuple(partitions)


# ----------------------------------------------------------------------------- shared machinery


def _check_out(out: Any, batch: Any) -> torch.Tensor:
    """``out`` as a floating 1-D tensor with one value per batch row (cheap for tensors)."""
    if not isinstance(out, torch.Tensor):
        out = as_1d_tensor(out, "out")
    elif out.dim() == 2 and out.shape[1] == 1:
        out = out.reshape(-1)
    if out.dim() != 1 or out.shape[0] != len(batch):
        raise ValueError(f"out: expected shape ({len(batch)},) for a batch of {len(batch)} rows, got {tuple(out.shape)}")
    return out if out.is_floating_point() else out.to(torch.get_default_dtype())


def _inactive_rows(W: torch.Tensor, D: torch.Tensor) -> torch.Tensor:
    """Rows of ``D @ W`` that no data row informs (all their groups empty or zeroed)."""
    side_active = (W != 0).any(dim=1).to(D.dtype)
    return (D.abs() @ side_active) == 0


class _LinearRowsConstraint(BaseConstraint):
    """Rows ``c(out) = D @ (W @ phi(out - threshold))`` with batch-built ``W`` and ``D``.

    Subclasses set ``_prefix`` and implement ``_build_rows`` (bounds, row names and any
    batch-independent row structure, from ``self._partitions``) and ``_build_operator(batch)``
    (float64 ``W`` ``(G, n)`` and ``D`` ``(m, G)``).
    """

    _prefix = "constraint"
    _allow_continuous = False

    def __init__(self, sensitive: Any, *, surrogate: Any, threshold: float, groups: str, groupings: Sequence[str]):
        self.sensitive = sensitive_names(sensitive)
        if groups not in groupings:
            raise ValueError(f"groups: expected one of {tuple(groupings)}, got {groups!r}")
        self.groups = groups
        self.surrogate: Surrogate = get_surrogate(surrogate)
        self.threshold = finite_float(threshold, "threshold")
        joiner = "&" if len(self.sensitive) > 1 and groups != "marginal" else ","
        self.name = f"{self._prefix}[{joiner.join(self.sensitive)}]"
        self._partitions: tuple[_Partition, ...] | None = None
        self._lower: torch.Tensor | None = None
        self._upper: torch.Tensor | None = None
        self._cache: OrderedDict = OrderedDict()

    # bounds exist once the rows are sized from the data's sensitive levels
    def _bound(self, value: torch.Tensor | None) -> torch.Tensor:
        if value is None:
            raise AttributeError(
                f"{self.name}: the rows are sized from the data's sensitive levels; call setup(data) "
                "(engines do) or evaluate the constraint on a batch first"
            )
        return value

    @property
    def lower(self) -> torch.Tensor:
        return self._bound(self._lower)

    @lower.setter
    def lower(self, value: torch.Tensor) -> None:
        self._lower = value

    @property
    def upper(self) -> torch.Tensor:
        return self._bound(self._upper)

    @upper.setter
    def upper(self, value: torch.Tensor) -> None:
        self._upper = value

    def setup(self, data: Any) -> None:
        """Size the rows from ``data.sensitive_levels``/``sensitive_kinds`` and check ``data``.

        Warns with :class:`~fairopt.exceptions.FairnessWarning` when some rows are inactive
        on ``data`` (an empty group: the row is identically 0, see the module doc).
        """
        self._configure(data)
        W, D = self._build_operator(data)
        inactive = _inactive_rows(W, D)
        if bool(inactive.any()):
            rows = [name for name, off in zip(self.row_names, inactive.tolist()) if off]
            warnings.warn(
                f"{self.name}: {len(rows)} row(s) are identically 0 on the training data because a group "
                f"is empty; they constrain nothing: {rows}",
                FairnessWarning,
                stacklevel=2,
            )

    def _configure(self, data: Any) -> None:
        self._partitions = self._resolve(data)
        self._cache.clear()
        self._build_rows()

    def _resolve(self, data: Any) -> tuple[_Partition, ...]:
        return _resolve_partitions(data, self.sensitive, self.groups == "marginal", self._allow_continuous)

    def _build_rows(self) -> None:  # pragma: no cover - abstract
        raise NotImplementedError

    def _build_operator(self, batch: Any) -> tuple[torch.Tensor, torch.Tensor]:  # pragma: no cover - abstract
        raise NotImplementedError

    def _operator(self, batch: Any, dtype: torch.dtype, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
        """``(W, D)`` for ``batch`` in ``dtype``/``device``, from the cache when possible."""
        # the entry holds the batch itself, so no other live object can have its id
        key = (id(batch), len(batch), dtype, device)
        entry = self._cache.get(key)
        if entry is not None:
            self._cache.move_to_end(key)
            return entry[1], entry[2]
        if self._partitions is None:
            self._configure(batch)
        elif self._resolve(batch) != self._partitions:
            raise ValueError(
                f"batch: its sensitive levels for {list(self.sensitive)} differ from those {self.name} "
                "was set up with"
            )
        W, D = self._build_operator(batch)
        inactive = _inactive_rows(W, D)
        if bool(inactive.any()):
            logger.debug(
                "%s: rows %s are 0 on this batch (a group they compare is empty)",
                self.name, inactive.nonzero().flatten().tolist(),
            )
        W, D = W.to(dtype=dtype, device=device), D.to(dtype=dtype, device=device)
        self._cache[key] = (batch, W, D)
        while len(self._cache) > _CACHE_SIZE:
            self._cache.popitem(last=False)
        return W, D

    def _transform(self, t: torch.Tensor, exact: bool) -> torch.Tensor:
        """``phi(t)`` for the smooth rows, the hard step ``1{t > 0}`` for the exact ones."""
        return self.surrogate.step(t) if exact else self.surrogate(t)

    def _rows(self, out: Any, batch: Any, exact: bool) -> torch.Tensor:
        out = _check_out(out, batch)
        W, D = self._operator(batch, out.dtype, out.device)
        return D @ (W @ self._transform(out - self.threshold, exact))

    def __call__(self, out: torch.Tensor, batch: Any) -> torch.Tensor:
        """Smooth rows ``D @ (W @ phi(out - threshold))``, shape ``(m,)``, in ``out``'s dtype."""
        return self._rows(out, batch, exact=False)

    def exact(self, out: torch.Tensor, batch: Any) -> torch.Tensor:
        """The same rows on hard predictions ``1{out > threshold}`` (no gradient)."""
        with torch.no_grad():
            return self._rows(out, batch, exact=True)

    def __getstate__(self) -> dict:
        state = dict(self.__dict__)
        state["_cache"] = OrderedDict()  # never pickle data
        return state


# ----------------------------------------------------------------------------- group rates


@dataclass(frozen=True)
class _Side:
    """One group mean: group ``group`` of partition ``partition``, or its complement."""

    partition: int
    group: int
    complement: bool
    label: str


@dataclass(frozen=True)
class _RowTemplate:
    """A row ``coef_focus * P_focus + coef_ref * P_ref`` in ``[lower, upper]`` for every comparison."""

    coef_focus: float
    coef_ref: float
    lower: float
    upper: float
    label: str  # format string with {focus} and {ref}


def _comparisons(partitions: Sequence[_Partition], pairwise: bool) -> tuple[list[_Side], list[tuple[int, int]]]:
    """The group means (sides) and the (focus, reference) side pairs to compare (module doc)."""
    sides: list[_Side] = []
    pairs: list[tuple[int, int]] = []
    for p, part in enumerate(partitions):
        base, K, labels = len(sides), part.n_groups, part.labels
        if K == 2:
            sides += [_Side(p, 1, False, labels[1]), _Side(p, 0, False, labels[0])]
            pairs.append((base, base + 1))
            continue
        sides += [_Side(p, g, False, labels[g]) for g in range(K)]
        if pairwise:
            pairs += [(base + h, base + g) for g in range(K) for h in range(g + 1, K)]
        else:
            sides += [_Side(p, g, True, f"not({labels[g]})") for g in range(K)]
            pairs += [(base + g, base + K + g) for g in range(K)]
    return sides, pairs


class GroupRateConstraint(_LinearRowsConstraint):
    """Rows that are linear combinations of two group means ``P_focus``, ``P_ref`` per comparison.

    The common base of :class:`DisparateImpact` and :class:`DemographicParity` (group rate
    constraints, certified in closed form by :mod:`fairopt.certificate`).
    """

    def _row_templates(self) -> list[_RowTemplate]:  # pragma: no cover - abstract
        raise NotImplementedError

    def _row_mask(self, batch: Any) -> torch.Tensor | None:
        """Weights (n,) restricting the rows that count (None: all rows)."""
        return None

    def _build_rows(self) -> None:
        sides, pairs = _comparisons(self._partitions, pairwise=self.groups == "pairwise")
        templates = self._row_templates()
        D = torch.zeros(len(pairs) * len(templates), len(sides), dtype=_FLOAT)
        names, lower, upper = [], [], []
        for j, (focus, ref) in enumerate(pairs):
            for k, tpl in enumerate(templates):
                row = j * len(templates) + k
                D[row, focus] += tpl.coef_focus
                D[row, ref] += tpl.coef_ref
                names.append(f"{self.name}:" + tpl.label.format(focus=sides[focus].label, ref=sides[ref].label))
                lower.append(tpl.lower)
                upper.append(tpl.upper)
        self._set_bounds(lower, upper, names)
        self._D = D
        self._n_templates = len(templates)
        self._focus = torch.tensor([f for f, _ in pairs], dtype=torch.long)
        self._ref = torch.tensor([r for _, r in pairs], dtype=torch.long)
        self._side_groups = [
            (torch.tensor([s.group for s in sides if s.partition == p], dtype=torch.long),
             torch.tensor([s.complement for s in sides if s.partition == p], dtype=torch.bool))
            for p in range(len(self._partitions))
        ]

    def _membership(self, batch: Any) -> torch.Tensor:
        """0/1 membership ``(G, n)`` of every side, sides in ``_comparisons`` order."""
        blocks = []
        for part, (groups, complement) in zip(self._partitions, self._side_groups):
            block = part.indicators(batch)[groups]
            blocks.append(torch.where(complement[:, None], 1.0 - block, block))
        return torch.cat(blocks)

    def _build_operator(self, batch: Any) -> tuple[torch.Tensor, torch.Tensor]:
        membership = self._membership(batch)
        mask = self._row_mask(batch)
        if mask is not None:
            membership = membership * mask
        counts = membership.sum(dim=1)
        W = membership / counts.clamp(min=1.0)[:, None]
        return W, self._informed_rows(counts, _FLOAT)

    def _informed_rows(self, counts: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
        """``D`` with the rows that compare an empty side (``counts == 0``) set to 0
        (module doc, "Empty groups")."""
        informed = (counts[self._focus] > 0) & (counts[self._ref] > 0)
        return self._D.to(dtype) * informed.repeat_interleave(self._n_templates).to(dtype)[:, None]

    def partial_sums(self, out: torch.Tensor, batch: Any, exact: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
        """Per-group sums of ``phi(out - threshold)`` and group counts on ``batch``.

        ``sums = M @ phi(out - threshold)`` and ``counts = M @ 1`` with ``M`` (``G x n``) the
        unnormalised 0/1 membership of every side (group or complement, masked to ``y = 1``
        for :class:`EqualImpact`); ``M`` is read off the cached operator ``W = M / n_g``.
        Both are additive over disjoint row shards, so a sum over shards followed by
        :meth:`from_sums` reproduces ``self(out, data)`` on their union (data-parallel SQP,
        :mod:`solvers.distributed`). ``exact=True`` uses the hard step ``1{out > threshold}``.

        Returns
        -------
        sums : Tensor (G,)
            In ``out``'s dtype, differentiable in ``out`` (unless ``exact``).
        counts : Tensor (G,)
            Rows per side, same dtype, no gradient.
        """
        out = _check_out(out, batch)
        W, _ = self._operator(batch, out.dtype, out.device)
        membership = (W != 0).to(out.dtype)
        with torch.set_grad_enabled(torch.is_grad_enabled() and not exact):
            sums = membership @ self._transform(out - self.threshold, exact)
        return sums, membership.sum(dim=1)

    def from_sums(self, sums: torch.Tensor, counts: torch.Tensor) -> torch.Tensor:
        """Rows ``D @ (sums / counts)`` from group sums and counts over the whole data.

        Rows comparing a side with ``counts == 0`` are 0, exactly as in :meth:`__call__`
        (module doc, "Empty groups"). Differentiable in ``sums``; shape ``(m,)``.
        """
        if getattr(self, "_D", None) is None:
            raise ValueError(f"{self.name}: call setup(data) before from_sums (the rows are sized from the data)")
        G = self._D.shape[1]
        if sums.shape != (G,) or counts.shape != (G,):
            raise ValueError(f"sums/counts: expected shape ({G},) each, got {tuple(sums.shape)}, {tuple(counts.shape)}")
        means = sums / counts.clamp(min=1.0)
        return self._informed_rows(counts, sums.dtype).to(sums.device) @ means

    def target_encoding(self, batch: Any) -> LinearEncoding:
        """The rows as linear (in)equalities on hard labels ``z`` (n,): ``lower <= (D W) z <= upper``.

        Replacing ``phi(t_i)`` by ``z_i`` in the group means gives rows linear in ``z``; e.g.
        for disparate impact with binary ``S``:
        ``delta * sum_{S=0} z / n_0 - sum_{S=1} z / n_1 <= 0`` and the symmetric row. On
        ``z = 1{out > threshold}`` the rows equal :meth:`exact`.
        """
        W, D = self._operator(batch, _FLOAT, torch.device("cpu"))
        return LinearEncoding(
            name=self.name,
            A_z=(D @ W).numpy(),
            lb=self.lower.numpy(),
            ub=self.upper.numpy(),
            meta={"row_names": list(self.row_names)},
        )


#: The former private name, kept for backward compatibility.
_GroupRateConstraint = GroupRateConstraint


class DisparateImpact(GroupRateConstraint):
    r"""Disparate impact: the positive rates of two groups within a ratio ``delta`` ([SQP] eq 5).

    For binary ``S`` with ``P_s`` the mean of ``phi(out - threshold)`` over group ``s``:

    ``delta * P_0 - P_1 <= 0`` and ``delta * P_1 - P_0 <= 0``,

    i.e. ``min(P_0 / P_1, P_1 / P_0) >= delta`` (the four-fifths rule at ``delta = 0.8``).
    With ``K > 2`` groups, intersections and ``groups="marginal"``, every comparison
    (focus ``f``, reference ``r``) contributes the pair ``delta * P_r - P_f <= 0``,
    ``delta * P_f - P_r <= 0`` (module doc). :meth:`exact` uses the hard rates
    ``mean(1{out > threshold})``, whose realised ratio is the DI reported by the evaluation.

    Parameters
    ----------
    sensitive : str or list of str
        Binary or categorical sensitive attribute(s) (``batch.sensitive``); a list gives
        intersection cells (or separate attributes with ``groups="marginal"``).
    delta : float, default 0.8
        Ratio in ``(0, 1]``.
    surrogate : str or Surrogate, default "smoothed_step"
        See :func:`fairopt.surrogates.get_surrogate`.
    threshold : float, default 0.0
        Decision threshold on ``out`` (0 for logits).
    groups : {"one_vs_rest", "pairwise", "marginal"}, default "one_vs_rest"

    Raises
    ------
    ValueError
        ``delta`` outside ``(0, 1]``, an unknown ``surrogate``/``groups``, or (at setup/call) an
        unknown or continuous sensitive attribute.
    """

    _prefix = "disparate_impact"

    def __init__(
        self,
        sensitive: str | Sequence[str],
        delta: float = 0.8,
        surrogate: str | Surrogate = "smoothed_step",
        threshold: float = 0.0,
        groups: str = "one_vs_rest",
    ) -> None:
        self.delta = check_interval(delta, "delta", 0.0, 1.0, closed="right")
        super().__init__(sensitive, surrogate=surrogate, threshold=threshold, groups=groups, groupings=GROUPINGS)
        self._params = {
            "sensitive": sensitive, "delta": self.delta, "surrogate": self.surrogate,
            "threshold": self.threshold, "groups": groups,
        }

    def _row_templates(self) -> list[_RowTemplate]:
        d = self.delta
        return [
            _RowTemplate(-1.0, d, -math.inf, 0.0, f"{d:g}*P[{{ref}}]-P[{{focus}}]"),
            _RowTemplate(d, -1.0, -math.inf, 0.0, f"{d:g}*P[{{focus}}]-P[{{ref}}]"),
        ]


class EqualImpact(DisparateImpact):
    r"""Equal impact: :class:`DisparateImpact` on the rows with ``y = 1`` ([SQP] sec 2.2).

    ``delta * P(yhat = 1 | Y = 1, S = 0) <= P(yhat = 1 | Y = 1, S = 1)`` and the symmetric
    row, with the rates estimated over the rows of each group that have ``y = 1``
    (``batch.y`` must be 0/1). Same parameters as :class:`DisparateImpact`.
    """

    _prefix = "equal_impact"

    def _row_mask(self, batch: Any) -> torch.Tensor:
        y = getattr(batch, "y", None)
        if not isinstance(y, torch.Tensor) or y.shape != (len(batch),):
            raise ValueError(f"y: EqualImpact needs a 0/1 tensor batch.y of shape ({len(batch)},)")
        return (check_binary(y, "y") == 1).to(_FLOAT)


class DemographicParity(GroupRateConstraint):
    r"""Demographic parity: ``-bound <= P_1 - P_0 <= bound`` ([SQP] eq 2).

    For ``K > 2`` groups, one row ``P_g - P_rest`` per group (one-vs-rest) or ``P_h - P_g``
    per pair (pairwise); see the module doc. ``P`` are surrogate means of
    ``phi(out - threshold)``; :meth:`exact` uses hard predictions. [SQP] Thm 2.1: a bounded
    surrogate with ``|c_dp| <= bound`` and all ``phi`` within ``gamma`` of 0 or 1 gives a hard
    difference of at most ``bound + 2 gamma``.

    Parameters
    ----------
    sensitive : str or list of str
    bound : float
        Largest allowed absolute rate difference, ``>= 0``.
    surrogate, threshold, groups
        As in :class:`DisparateImpact`.
    """

    _prefix = "demographic_parity"

    def __init__(
        self,
        sensitive: str | Sequence[str],
        bound: float,
        surrogate: str | Surrogate = "smoothed_step",
        threshold: float = 0.0,
        groups: str = "one_vs_rest",
    ) -> None:
        self.bound = nonnegative_float(bound, "bound")
        super().__init__(sensitive, surrogate=surrogate, threshold=threshold, groups=groups, groupings=GROUPINGS)
        self._params = {
            "sensitive": sensitive, "bound": self.bound, "surrogate": self.surrogate,
            "threshold": self.threshold, "groups": groups,
        }

    def _row_templates(self) -> list[_RowTemplate]:
        return [_RowTemplate(1.0, -1.0, -self.bound, self.bound, "P[{focus}]-P[{ref}]")]


# ----------------------------------------------------------------------------- covariance


class Covariance(_LinearRowsConstraint):
    r"""Decision-boundary covariance (Zafar et al.; [SQP] sec 2.3): ``|mean((s - mean s) * out)| <= bound``.

    ``c = (1/n) sum_i (s_i - s_bar) out_i`` with the batch mean ``s_bar``; linear in ``out``
    (the threshold cancels because ``s - s_bar`` sums to 0), so :meth:`exact` equals the smooth
    value. ``s`` is

    - a binary attribute: its 0/1 values (one row); by [SQP] Thm 2.2 the row equals
      ``n_0 n_1 / n^2 * (mean_1 out - mean_0 out)``;
    - a continuous attribute: its raw values (one row; the bound is in units of ``s`` times
      ``out``, so standardise ``s`` for a unit-free bound);
    - a categorical attribute with ``K > 2`` levels: one row per level indicator ``1{s = k}``
      (``K = 2``: the indicator of level 1 only, the other row being its negative);
    - several attributes: the indicators of their intersection cells, or with
      ``groups="marginal"`` each attribute's rows in turn (continuous ones allowed).

    Parameters
    ----------
    sensitive : str or list of str
    bound : float
        ``>= 0``.
    groups : {"one_vs_rest", "marginal"}, default "one_vs_rest"
        "one_vs_rest" names the per-group indicators (group against the rest, as for the rate
        constraints); pairwise comparisons are not defined for a covariance.
    """

    _prefix = "covariance"
    _allow_continuous = True

    def __init__(self, sensitive: str | Sequence[str], bound: float, groups: str = "one_vs_rest") -> None:
        self.bound = nonnegative_float(bound, "bound")
        super().__init__(sensitive, surrogate=Linear(), threshold=0.0, groups=groups,
                         groupings=("one_vs_rest", "marginal"))
        self._params = {"sensitive": sensitive, "bound": self.bound, "groups": groups}

    def _transform(self, t: torch.Tensor, exact: bool) -> torch.Tensor:
        return t  # linear: the exact value is the smooth value

    @staticmethod
    def _indicator_groups(part: _Partition) -> list[int]:
        return [1] if part.n_groups == 2 else list(range(part.n_groups))

    def _build_rows(self) -> None:
        labels = []
        for part in self._partitions:
            labels += part.labels if part.continuous else [part.labels[g] for g in self._indicator_groups(part)]
        m = len(labels)
        self._set_bounds([-self.bound] * m, [self.bound] * m, [f"{self.name}:cov({lb},out)" for lb in labels])
        self._D = torch.eye(m, dtype=_FLOAT)

    def _build_operator(self, batch: Any) -> tuple[torch.Tensor, torch.Tensor]:
        blocks = [
            part.values(batch)[None, :] if part.continuous else part.indicators(batch)[self._indicator_groups(part)]
            for part in self._partitions
        ]
        values = torch.cat(blocks)
        W = (values - values.mean(dim=1, keepdim=True)) / max(len(batch), 1)
        return W, self._D
