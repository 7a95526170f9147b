"""Group-rate fairness constraints ([SQP] sec 2-3): disparate impact, equal impact, demographic parity.

Every constraint here is linear in one transformed output per row. With ``t = out - threshold`` and a
surrogate ``phi`` (:mod:`fairopt.surrogates`) the smooth rows are

``c(out) = D @ (W @ phi(t))``,

``W`` (``G x n``) holding the group means (``W[g, i] = w_i 1{i in g} / sum_{j in g} w_j``, ``w_i = 1``
without ``batch.weights``; integer weights act as repeated rows) and ``D`` (``m x G``) combining them
into rows (e.g. ``delta * P_0 - P_1``). :meth:`exact` replaces ``phi`` by ``1{out > threshold}``;
:meth:`target_encoding` returns ``D @ W`` as rows linear in hard labels ``z``. ``W`` and ``D`` depend
only on the batch, so they are built once per batch and cached (keyed on ``id(batch)``, its length and
``out``'s dtype/device; a batch must not change in place after first use).

Groups (``sensitive``: one attribute or several, binary or codes ``0..K-1``):

- ``K = 2``: group 1 against group 0 ([SQP] eq 5, Thm 2.1);
- ``K > 2``, ``groups="one_vs_rest"`` (default): each group against the rows not in it (``K``
  comparisons; two groups can each be within ``delta`` of their complements yet ``delta^2`` apart);
- ``groups="pairwise"``: every pair ``g < h``, ``K (K - 1) / 2`` comparisons;
- several attributes: the intersection cells in row-major order (last attribute fastest), or with
  ``groups="marginal"`` each attribute on its own groups, blocks concatenated.

Conditioned blocks (:class:`EqualImpact`, :mod:`fairopt.constraints.conditional`) take the means over
rows with one label (``y = 1``: true-positive rates, ``y = 0``: false-positive rates); several labels
stack masked blocks in ``W`` with a block-diagonal ``D``.

Empty groups: a row comparing a group without rows in the batch is set to 0 (satisfied, no gradient)
rather than dropped, so the number of rows never depends on the batch; :meth:`setup` warns
(:class:`~fairopt.exceptions.SmallGroupWarning`) when this happens on the training data.
"""

from __future__ import annotations

import copy
import math
import warnings
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch

from fairopt._validation import check_binary, check_interval
from fairopt.constraints.rows import (FLOAT64, GROUPINGS, LinearRowsConstraint, Partition, check_out, exact_dtype,
                                     positive_counts)
from fairopt.exceptions import SmallGroupWarning, warn_at_caller
from fairopt.surrogates import Sigmoid, Surrogate
from solvers.contract import check_spread
from solvers.problem import LinearEncoding, RowFactors, row_weights, shared_value
from solvers.strata import RowStrata, row_codes

__all__ = ["DisparateImpact", "EqualImpact", "DemographicParity", "GroupRateConstraint", "MIN_GROUP_ROWS",
           "RowTemplate", "label_mask", "ratio_templates", "difference_templates"]

#: Fewer training rows than this in a compared group (within a label block for the conditional rates)
#: draw a :class:`~fairopt.exceptions.SmallGroupWarning` at :meth:`GroupRateConstraint.setup`: the group's
#: rate moves in steps of ``1 / rows``, so the bound on it is met or missed by single rows.
MIN_GROUP_ROWS = 30


@dataclass(frozen=True)
class _Side:
    """One group mean: group ``group`` of partition ``partition``, or its complement."""

    partition: int
    group: int
    complement: bool
    label: str


@dataclass(frozen=True)
class RowTemplate:
    """A row ``coef_focus * P_focus + coef_ref * P_ref`` in ``[lower, upper]`` for every comparison."""

    coef_focus: float
    coef_ref: float
    lower: float
    upper: float
    label: str  # format string with {focus} and {ref}


def ratio_templates(delta: float) -> list[RowTemplate]:
    """Ratio rows of one comparison: ``delta * P_ref - P_focus <= 0`` and ``delta * P_focus - P_ref <= 0``."""
    return [
        RowTemplate(-1.0, delta, -math.inf, 0.0, f"{delta:g}*P[{{ref}}]-P[{{focus}}]"),
        RowTemplate(delta, -1.0, -math.inf, 0.0, f"{delta:g}*P[{{focus}}]-P[{{ref}}]"),
    ]


def difference_templates(bound: float) -> list[RowTemplate]:
    """The difference row of one comparison: ``-bound <= P_focus - P_ref <= bound``."""
    return [RowTemplate(1.0, -1.0, -bound, bound, "P[{focus}]-P[{ref}]")]


def label_mask(batch: Any, label: int, who: str) -> torch.Tensor:
    """``1{y_i = label}`` (float64, ``(n,)``) from ``batch.y``; ``ValueError`` naming ``who`` unless 0/1 of length n."""
    y = getattr(batch, "y", None)
    if not isinstance(y, torch.Tensor) or y.shape != (len(batch),):
        raise ValueError(f"y: {who} needs a 0/1 tensor batch.y of shape ({len(batch)},)")
    return (check_binary(y, "y") == label).to(FLOAT64)


def _pair_ratio(a: float, b: float) -> float:
    """``min(a / b, b / a)`` of two non-negative rates, with ``0 / 0 = 1`` (equal zero rates)."""
    if a <= 0.0 and b <= 0.0:
        return 1.0
    if a <= 0.0 or b <= 0.0:
        return 0.0
    return min(a / b, b / a)


def _comparisons(partitions: Sequence[Partition], pairwise: bool) -> tuple[list[_Side], list[tuple[int, int]]]:
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


class GroupRateConstraint(LinearRowsConstraint):
    """Rows that combine two group means ``P_focus``, ``P_ref`` per comparison.

    Base of :class:`DisparateImpact`, :class:`DemographicParity` and :mod:`fairopt.constraints.conditional`.
    A subclass gives its row templates and, to condition on labels, a row mask (:meth:`_row_mask`) or one
    mask per labelled block (:meth:`_block_labels`, :meth:`_row_masks`).
    """

    #: The surrogates of :meth:`calibrated_form` per ``spread`` for a constraint constructed with
    #: ``surrogate=None``: ``sigmoid(5 t)`` ("threshold"), ``sigmoid(2 t)`` ("wide") and ``sigmoid(t)`` ("group").
    calibrated_surrogates: dict[str, Surrogate] = {"threshold": Sigmoid(scale=5.0), "wide": Sigmoid(scale=2.0),
                                                   "group": Sigmoid(scale=1.0)}
    #: Rows are combinations ``a P_focus + b P_ref`` of rates with ``|a|, |b| <= 1``: rate units.
    row_scale = 1.0

    def _row_templates(self) -> list[RowTemplate]:  # pragma: no cover - abstract
        raise NotImplementedError

    def setup(self, data: Any) -> None:
        """Size the rows from the data's sensitive levels (:meth:`LinearRowsConstraint.setup`) and warn
        (:class:`~fairopt.exceptions.SmallGroupWarning`) about compared groups with fewer than
        :data:`MIN_GROUP_ROWS` rows: a rate over ``k`` rows takes the values ``0, 1/k, ..., 1``, and a model
        meets the bound on it by the predictions of those rows alone, on new data as much by chance."""
        super().setup(data)
        sides, _ = _comparisons(self._partitions, pairwise=self.groups == "pairwise")
        labels = [f"{block}:{side.label}" if block else side.label for block in self._block_labels() for side in sides]
        counts = self._side_rows(data, sides)
        small = [(label, k, side) for label, k, side in zip(labels, counts, sides * len(self._block_labels()))
                 if 0 < k < MIN_GROUP_ROWS]
        if small:
            # a level of an attribute with more than two levels can be merged with other rare ones; a level
            # of a two-level attribute, or the rest of the rows (a complement), only grows with more data
            mergeable = any(not side.complement and self._partitions[side.partition].n_groups > 2
                            for _, _, side in small)
            advice = ("merge rare levels into one (recode the column) or collect more rows of these groups before "
                      "constraining." if mergeable else "only more rows of these groups make their rates less "
                      "coarse: read the bound on them as met or missed within a few rows.")
            warn_at_caller(
                f"{self.name}: {len(small)} compared group(s) have fewer than {MIN_GROUP_ROWS} training rows: "
                f"{', '.join(f'{label} ({k} rows)' for label, k, _ in small)}. Their rates move in steps of 1/rows "
                f"and the bound on them is met or missed by single rows, here and on new data; {advice}",
                SmallGroupWarning)

    def _side_rows(self, data: Any, sides: list[_Side]) -> list[int]:
        """The rows in each side of each block (the order of :meth:`_side_membership`), from per-group
        counts (``O(n)`` memory, not a side-by-row matrix)."""
        rows = []
        for mask in self._row_masks(data):
            counts = []
            for part in self._partitions:
                codes = part.codes(data)
                codes = codes if mask is None else codes[mask.to(codes.device) != 0]
                counts.append((torch.bincount(codes, minlength=part.n_groups).tolist(), int(codes.numel())))
            for side in sides:
                per_group, total = counts[side.partition]
                rows.append(total - per_group[side.group] if side.complement else per_group[side.group])
        return rows

    def calibrated_form(self, spread: str = "threshold") -> "GroupRateConstraint":
        r"""The constraint an engine differentiates when it calibrates the rows to the exact rates
        (:class:`solvers.contract.CalibratedForm`: :class:`solvers.StochasticSQP` asks for ``spread="threshold"``,
        or ``"wide"`` for a network's mini-batch steps,
        :class:`solvers.boosting.BoostedSQP` for ``"group"``, both with ``calibrate_exact=True``, their default).

        Constructed with ``surrogate=None``: a new constraint with the same parameters under
        ``calibrated_surrogates[spread]``, set up as ``self`` is (the engines ask after :meth:`setup`; the
        caller's constraint keeps its rows, bounds and surrogate); with a named surrogate: ``self``.

        Why other surrogates there. A calibrated step takes the rows' level from :meth:`exact` and only the
        direction ``dc/d out_i = (D W)_{:, i} phi'(out_i - threshold)`` from the surrogate. The default
        smoothed step (scale 50, [SQP] sec 3.1), chosen for rates close to the exact ones, has ``phi'``
        nonzero only on outputs within a few hundredths of the threshold: in a group of a few hundred rows
        the direction rests on a handful of them, and the rows' linear model mispredicts each step's change
        by about as much as the change.

        - ``"threshold"``: ``sigmoid(5 t)`` spreads ``phi'`` over ``|t| <~ 1`` (``phi'(1) / phi'(0) = 0.03``):
          many rows inform each group's direction, small groups too, and rows far from the threshold, whose
          change moves no hard label, weigh little. A flatter one (``sigmoid(t)``) weighs those too; with
          steps in a model's parameters on a data set with overlapping classes (COMPAS) its mini-batch and
          full-batch runs then end at different optima.
        - ``"wide"``: ``sigmoid(2 t)`` (``phi'(1) / phi'(0) = 0.42``, ``phi'(2) / phi'(0) = 0.07``), for a
          network's mini-batch steps. A network fits its training rows closely and moves most outputs away
          from the threshold; under ``sigmoid(5 t)`` a batch then holds a handful of rows per group that give
          the direction, and runs can meet the bound by predicting most rows positive, far below the full
          batch's accuracy; the wider slope lets every batch row inform its group's direction.
        - ``"group"``: ``sigmoid(t)`` moves every row of a group (``phi' = p (1 - p)``, the mean predicted
          probability's slope). Per-row score steps fitted by trees then shift whole groups, which carries
          over to new rows; under ``sigmoid(5 t)`` they move the training rows that sit at the threshold,
          and the bound met on them holds less on new rows.

        The measurements behind both are in ``benchmarks/results/solver_notes.md``.
        """
        check_spread(spread)
        params = self.get_params(deep=False)
        if params.get("surrogate", "unrecorded") is not None:  # named (or a subclass that records no parameters)
            return self
        form = copy.copy(self)  # shares the set-up rows and bounds, which no method changes in place
        form.surrogate = form._named_surrogate = self.calibrated_surrogates[spread]
        form._params = {**params, "surrogate": form.surrogate}
        form._cache = OrderedDict()
        return form

    @property
    def rate_form(self) -> str:
        """``"ratio"`` (rows ``delta * P_r - P_f <= 0``) when the constraint has a ``delta``, else ``"difference"``."""
        return "ratio" if getattr(self, "delta", None) is not None else "difference"

    def _row_mask(self, batch: Any) -> torch.Tensor | None:
        """Weights (n,) restricting the rows that count (None: all rows)."""
        return None

    def _block_labels(self) -> tuple[str, ...]:
        """One label per conditioned block; ``""`` for the single unlabelled block."""
        return ("",)

    def _row_masks(self, batch: Any) -> list[torch.Tensor | None]:
        """One row mask per block of :meth:`_block_labels` (default: :meth:`_row_mask`)."""
        return [self._row_mask(batch)]

    def _build_rows(self) -> None:
        sides, pairs = _comparisons(self._partitions, pairwise=self.groups == "pairwise")
        templates = self._row_templates()
        blocks = self._block_labels()
        S = len(sides)
        # blocks x pairs x templates rows; D is block diagonal over the blocks' sides
        D = torch.zeros(len(blocks) * len(pairs) * len(templates), len(blocks) * S, dtype=FLOAT64)
        names, lower, upper, focus_sides, ref_sides = [], [], [], [], []
        row = 0
        for b, block in enumerate(blocks):
            prefix = f"{self.name}:" + (f"{block}:" if block else "")
            for focus, ref in pairs:
                focus_sides.append(b * S + focus)
                ref_sides.append(b * S + ref)
                for tpl in templates:
                    D[row, b * S + focus] += tpl.coef_focus
                    D[row, b * S + ref] += tpl.coef_ref
                    names.append(prefix + tpl.label.format(focus=sides[focus].label, ref=sides[ref].label))
                    lower.append(tpl.lower)
                    upper.append(tpl.upper)
                    row += 1
        self._set_bounds(lower, upper, names)
        self._D = D
        self._n_templates = len(templates)
        self._focus = torch.tensor(focus_sides, dtype=torch.long)
        self._ref = torch.tensor(ref_sides, dtype=torch.long)
        self._side_groups = [
            (torch.tensor([s.group for s in sides if s.partition == p], dtype=torch.long),
             torch.tensor([s.complement for s in sides if s.partition == p], dtype=torch.bool))
            for p in range(len(self._partitions))
        ]

    @property
    def side_rows(self) -> torch.Tensor:
        """``D`` (m, G), set up: row ``i`` of the constraint is ``sum_s D[i, s] P_s`` over the side rates ``P_s``
        (each compared group, or the rest of the rows, per label block)."""
        return self._D

    @property
    def compared_sides(self) -> tuple[torch.Tensor, torch.Tensor]:
        """The focus and the reference side (indices into the side rates) of each comparison, set up; each
        comparison gives ``len(templates)`` consecutive rows (two for a ratio, one for a difference)."""
        return self._focus, self._ref

    def _membership(self, batch: Any) -> torch.Tensor:
        """0/1 membership ``(G, n)`` of every side, sides in ``_comparisons`` order."""
        blocks = []
        for part, (groups, complement) in zip(self._partitions, self._side_groups):
            # side g: rows whose (validated) code is the side's group, or is not for a complement
            codes = part.codes(batch)
            blocks.append(torch.ne(codes[None, :] == groups.to(codes.device)[:, None],
                                   complement.to(codes.device)[:, None]))
        return torch.cat(blocks).to(FLOAT64)

    def _side_membership(self, batch: Any) -> torch.Tensor:
        """0/1 membership ``(G, n)`` of every side of every block: group membership times the block's row mask."""
        groups = self._membership(batch)
        blocks = [groups if mask is None else groups * mask for mask in self._row_masks(batch)]
        return blocks[0] if len(blocks) == 1 else torch.cat(blocks)

    def _build_operator(self, batch: Any) -> tuple[torch.Tensor, torch.Tensor]:
        membership = self._side_membership(batch)
        weights = row_weights(batch)
        if weights is not None:  # weighted means (module doc)
            membership = membership * weights.to(device=membership.device, dtype=FLOAT64)[None, :]
        counts = membership.sum(dim=1)
        W = membership / positive_counts(counts)[:, None]
        return W, self.informed_rows(counts, FLOAT64)

    def informed_rows(self, counts: torch.Tensor, dtype: torch.dtype = FLOAT64) -> torch.Tensor:
        """``D`` (:attr:`side_rows`) with the rows that compare an empty side (``counts == 0``, the rows of
        each side) set to 0."""
        if bool((counts > 0).all()):  # every side has rows (the usual case): D as it is
            return self._D.to(dtype, copy=True)
        informed = (counts[self._focus] > 0) & (counts[self._ref] > 0)
        return self._D.to(dtype) * informed.repeat_interleave(self._n_templates).to(dtype)[:, None]

    def partial_sums(self, out: torch.Tensor, batch: Any, exact: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
        """Per-side sums ``M @ phi(out - threshold)`` and counts ``M @ 1`` on ``batch``.

        ``M[g, i] = w_i 1{i in g}`` is the unnormalised membership (masked by the block's label). Both are
        additive over disjoint row shards, so summing over shards and calling :meth:`from_sums` reproduces
        ``self(out, data)`` on their union (data-parallel SQP). ``exact=True`` uses ``1{out > threshold}``;
        ``sums`` is differentiable in ``out`` otherwise, ``counts`` never.
        """
        out = check_out(out, batch)
        if exact:  # summed in float64, as the exact rows are (LinearRowsConstraint.exact)
            out = out.detach().to(exact_dtype(out))
        W, _ = self._operator(batch, out.dtype, out.device)
        membership = (W != 0).to(out.dtype)
        weights = row_weights(batch, out)
        if weights is not None:  # W[g, i] != 0 exactly where i is in g with w_i > 0
            membership = membership * weights[None, :]
        with torch.set_grad_enabled(torch.is_grad_enabled() and not exact):
            sums = membership @ self._transform(out - self.threshold, exact)
        return sums, membership.sum(dim=1)

    def strata(self, batch: Any) -> torch.Tensor:
        """One code per row; rows with equal codes share their sides and have nonzero weight alike.

        ``dc/d out_i = phi'(out_i - threshold) D W[:, i]`` then points the same way for every row of a stratum,
        which the stratified pullback of the SQP engine uses (two backward passes instead of one per row).
        """
        W, _ = self._operator(batch, FLOAT64, torch.device("cpu"))
        return row_codes((W != 0).T)

    def rows_and_factors(self, out: torch.Tensor, batch: Any, strata: RowStrata) -> RowFactors | None:
        """Smooth and exact rows with their Jacobian as factors per stratum (:class:`solvers.problem.RowFactors`).

        Row ``i`` of stratum ``k`` has ``W[:, i] = w_i M[:, k] / n`` with ``M[:, k]`` the stratum's 0/1 side
        membership and ``n_g = sum_k M[g, k] S_k(w)``, ``S_k(x) = sum_{i in k} x_i``. With
        ``coef[:, k] = D M[:, k] / n``: smooth rows ``coef @ S(w * phi)``, exact rows
        ``coef @ S(w * 1{out > threshold})`` and ``dc/d out_i = coef[:, k] w_i phi'(out_i - threshold)``:
        ``O(n)`` work and no ``G x n`` operator per mini-batch.

        Returns
        -------
        RowFactors or None
            None when the closed form does not apply (no :attr:`jacobian_direction`, or a redefined :meth:`exact`).
        """
        if self.jacobian_direction is None or type(self).exact is not LinearRowsConstraint.exact:
            return None
        source = out
        out = check_out(out, batch).detach()
        if strata.codes.shape != out.shape:
            raise ValueError(f"strata: expected a stratum for each of the {out.shape[0]} rows, "
                             f"got {tuple(strata.codes.shape)}")
        representatives, _ = self._operator(strata.representatives, FLOAT64, torch.device("cpu"))
        membership = (representatives != 0).to(FLOAT64)  # (G, s): W != 0 is membership with nonzero weight
        weights = row_weights(batch, like=out)
        counts = membership @ strata.sums(weights).cpu()
        coef = self.informed_rows(counts, FLOAT64) @ (membership / positive_counts(counts)[:, None])
        coef = coef.to(out.device)
        smooth, exact, v = self._shared_stratum_sums(source, out, strata, weights)
        return RowFactors(coef @ smooth, coef @ exact, coef.to(out.dtype), v)

    def _shared_stratum_sums(self, source: Any, out: torch.Tensor, strata: RowStrata,
                             weights: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Per-stratum sums of ``w * phi(t)``, ``w * 1{t > 0}`` and ``v = w * phi'(t)``, shared by members alike."""
        def stratum_sums() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
            phi, slope = self._shared_transform_and_slope(source, out)
            step = self._transform(out - self.threshold, exact=True)
            if weights is not None:
                phi, step, slope = phi * weights, step * weights, slope * weights
            return strata.sums(phi), strata.sums(step), slope

        return shared_value((self.jacobian_direction, "stratum sums", id(strata)), source, stratum_sums)

    def from_sums(self, sums: torch.Tensor, counts: torch.Tensor) -> torch.Tensor:
        """Rows ``D @ (sums / counts)`` from side sums and counts over the whole data; empty sides give 0 rows."""
        if getattr(self, "_D", None) is None:
            raise ValueError(f"{self.name}: call setup(data) before from_sums (the rows are sized from the data)")
        G = self._D.shape[1]
        if sums.shape != (G,) or counts.shape != (G,):
            raise ValueError(f"sums/counts: expected shape ({G},) each, got {tuple(sums.shape)}, {tuple(counts.shape)}")
        means = sums / positive_counts(counts)
        return self.informed_rows(counts, sums.dtype).to(sums.device) @ means

    # ------------------------------------------------------------------ the bounded measure
    @property
    def bound_sense(self) -> str:
        """``"lower"`` for the ratio form (``delta`` bounds the ratio from below), else ``"upper"``."""
        return "lower" if self.rate_form == "ratio" else "upper"

    def realised_from_rates(self, rates: Any, counts: Any) -> float:
        """The bounded measure from the side rates and counts, over the compared pairs whose sides have rows.

        Ratio form: ``min min(P_f / P_r, P_r / P_f)`` (two zero rates: 1; one: 0; no pair: 1.0). Difference
        form: ``max |P_f - P_r|`` (no pair: 0.0).
        """
        P = torch.as_tensor(rates, dtype=FLOAT64).reshape(-1).tolist()
        n = torch.as_tensor(counts, dtype=FLOAT64).reshape(-1).tolist()
        pairs = [(f, r) for f, r in zip(self._focus.tolist(), self._ref.tolist()) if n[f] > 0 and n[r] > 0]
        if self.rate_form == "difference":
            return max((abs(P[f] - P[r]) for f, r in pairs), default=0.0)
        return min((_pair_ratio(P[f], P[r]) for f, r in pairs), default=1.0)

    def realised(self, out: torch.Tensor, batch: Any) -> float:
        """:meth:`realised_from_rates` of the hard (weighted) rates ``1{out > threshold}`` of every side."""
        with torch.no_grad():
            sums, counts = self.partial_sums(out, batch, exact=True)
        sums, counts = sums.to(FLOAT64).cpu(), counts.to(FLOAT64).cpu()
        return self.realised_from_rates(sums / positive_counts(counts), counts)

    def sides_without_rows(self, batch: Any) -> list[str]:
        """The compared group means that have no row (or no weight) on ``batch``, as ``"race=Other"`` (with the
        block's label where the constraint conditions on labels: ``"race=Other (TPR)"``): their rows are
        left out of the measure, which compares the other groups only."""
        out = torch.zeros(len(batch), dtype=FLOAT64)
        with torch.no_grad():
            _, counts = self.partial_sums(out, batch, exact=True)
        counts = counts.reshape(-1).tolist()
        sides, _ = _comparisons(self._partitions, pairwise=self.groups == "pairwise")
        blocks = self._block_labels()
        missing = []
        for b, block in enumerate(blocks):
            for i, side in enumerate(sides):
                if counts[b * len(sides) + i] == 0 and not side.complement:
                    label = side.label if "=" in side.label else f"{self._partitions[side.partition].names[0]}=" \
                        f"{side.label}"
                    missing.append(f"{label} ({block})" if block else label)
        return missing

    def pairwise_realised(self, out: torch.Tensor, batch: Any) -> float | None:
        """Where this constraint compares each group with the rest of the rows (``groups="one_vs_rest"`` on an
        attribute of more than two groups), the same measure over every pair of groups instead: the
        ratio ``min_g P_g / max_g P_g`` (or the difference ``max_g P_g - min_g P_g``) over the groups with rows,
        per attribute and label block, the worst of them; what ``groups="pairwise"`` bounds and
        :mod:`fairopt.metrics` reports. None for other constraints, whose measure is already that."""
        if self.groups == "pairwise" or all(part.n_groups <= 2 for part in self._partitions):
            return None
        with torch.no_grad():
            sums, counts = self.partial_sums(out, batch, exact=True)
        n = counts.to(FLOAT64).cpu().reshape(-1)
        P = (sums.to(FLOAT64).cpu().reshape(-1) / positive_counts(n)).tolist()
        n = n.tolist()
        sides, _ = _comparisons(self._partitions, pairwise=False)
        values = []
        for block in range(len(self._block_labels())):
            for p in range(len(self._partitions)):
                rates = [P[block * len(sides) + i] for i, side in enumerate(sides)
                         if side.partition == p and not side.complement and n[block * len(sides) + i] > 0]
                if len(rates) < 2:
                    continue
                if self.rate_form == "difference":
                    values.append(max(rates) - min(rates))
                elif max(rates) > 0.0:
                    values.append(_pair_ratio(min(rates), max(rates)))
                else:  # every rate 0: the ratio is 0/0, undefined as the constraint's own value
                    values.append(math.nan)
        defined = [v for v in values if not math.isnan(v)]
        if not values:
            return None
        if not defined:
            return math.nan
        return max(defined) if self.rate_form == "difference" else min(defined)

    def target_encoding(self, batch: Any) -> LinearEncoding:
        """The rows as linear (in)equalities on hard labels ``z``: ``lower <= (D W) z <= upper``.

        E.g. disparate impact with binary ``S``: ``delta * sum_{S=0} w z / sum_{S=0} w - sum_{S=1} w z /
        sum_{S=1} w <= 0`` and its mirror; on ``z = 1{out > threshold}`` the rows equal :meth:`exact`.
        """
        W, D = self._operator(batch, FLOAT64, torch.device("cpu"))
        return LinearEncoding(
            name=self.name,
            A_z=(D @ W).numpy(),
            lb=self.lower.numpy(),
            ub=self.upper.numpy(),
            meta={"row_names": list(self.row_names)},
        )


class DisparateImpact(GroupRateConstraint):
    r"""Disparate impact: positive rates within a ratio ``delta`` ([SQP] eq 5).

    ``delta * P_0 - P_1 <= 0`` and ``delta * P_1 - P_0 <= 0``, i.e. ``min(P_0 / P_1, P_1 / P_0) >= delta``
    (the four-fifths rule at 0.8), per comparison for more groups (module doc).

    Parameters
    ----------
    sensitive : str or list of str
        Sensitive attribute(s) in ``batch.sensitive``; a list gives intersection cells.
    delta : float, default 0.8
        Ratio in ``(0, 1]``.
    surrogate : str, Surrogate or None, default None
        See :func:`fairopt.surrogates.get_surrogate`. None: the smoothed step of [SQP] sec 3.1
        (``SmoothedStep()``, :attr:`default_surrogate`), whose rates are close to the exact ones, where
        the constraint is used as is (penalty, Lagrangian). SQP calibrates the level to the exact rates
        and takes a softer one: :class:`solvers.StochasticSQP` and :class:`solvers.boosting.BoostedSQP`
        differentiate :meth:`calibrated_form` (``sigmoid(5 t)``, ``sigmoid(2 t)``, ``sigmoid(t)``), and the estimators'
        ``method="sqp"`` gives the constraint :data:`fairopt.training.SQP_RATE_SURROGATE` in a full-batch
        fit (:func:`fairopt.training.use_sqp_surrogates`). A named surrogate is used everywhere.
    threshold : float, default 0.0
        Decision threshold on ``out``.
    groups : {"one_vs_rest", "pairwise", "marginal"}, default "one_vs_rest"
    """

    _prefix = "disparate_impact"

    def __init__(
        self,
        sensitive: str | Sequence[str],
        delta: float = 0.8,
        surrogate: str | Surrogate | None = None,
        threshold: float = 0.0,
        groups: str = "one_vs_rest",
    ) -> None:
        self.delta = check_interval(delta, "delta", 0.0, 1.0, closed="right")
        super().__init__(sensitive, surrogate=surrogate, threshold=threshold, groups=groups, groupings=GROUPINGS)
        self._params = {
            "sensitive": sensitive, "delta": self.delta,
            "surrogate": self._named_surrogate, "threshold": self.threshold, "groups": groups,
        }

    def _row_templates(self) -> list[RowTemplate]:
        return ratio_templates(self.delta)


class EqualImpact(DisparateImpact):
    r"""Equal impact: :class:`DisparateImpact` on the rows with ``y = 1`` ([SQP] sec 2.2)."""

    _prefix = "equal_impact"

    def _row_mask(self, batch: Any) -> torch.Tensor:
        return label_mask(batch, 1, "EqualImpact")


class DemographicParity(GroupRateConstraint):
    r"""Demographic parity: ``-bound <= P_1 - P_0 <= bound`` ([SQP] eq 2).

    [SQP] Thm 2.1: ``|c_dp| <= bound`` with every ``phi`` within ``gamma`` of 0 or 1 gives a hard
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
        surrogate: str | Surrogate | None = None,
        threshold: float = 0.0,
        groups: str = "one_vs_rest",
    ) -> None:
        self.bound = check_interval(bound, "bound", 0.0, 1.0, closed="both")  # |rate - rate| <= 1
        super().__init__(sensitive, surrogate=surrogate, threshold=threshold, groups=groups, groupings=GROUPINGS)
        self._params = {
            "sensitive": sensitive, "bound": self.bound,
            "surrogate": self._named_surrogate, "threshold": self.threshold, "groups": groups,
        }

    def _row_templates(self) -> list[RowTemplate]:
        return difference_templates(self.bound)
