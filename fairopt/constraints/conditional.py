r"""Label-conditioned group-rate constraints: equal opportunity, false-positive-rate parity
and equalized odds (Hardt, Price and Srebro, 2016).

Each compares, between groups, the rate of positive predictions among the rows with a given
true label: the true-positive rate (TPR, rows with ``y = 1``) and/or the false-positive rate
(FPR, rows with ``y = 0``). With ``phi`` the surrogate of the step ``1{out > threshold}``
(:meth:`exact` uses the step itself) and ``g`` a group side (a group, or its complement
for one-vs-rest),

``TPR_g = sum_{i in g, y_i = 1} phi(t_i) / #{i in g : y_i = 1}``,

``FPR_g = sum_{i in g, y_i = 0} phi(t_i) / #{i in g : y_i = 0}``.

With per-row weights ``w_i`` (``batch.weights``, the weighted rows of
:mod:`fairopt.constraints.rates`) both are weighted means over the same rows,
``TPR_g = sum_{i in g, y_i = 1} w_i phi(t_i) / sum_{i in g, y_i = 1} w_i`` (and likewise
``FPR_g`` over ``y_i = 0``), in the smooth and exact rows, the additive sums and the
target encoding.

Every comparison (focus ``f``, reference ``r``; the groups, categorical one-vs-rest or
pairwise comparisons, intersections and marginal attributes are those of
:mod:`fairopt.constraints.rates`) of a rate ``R`` gives, in the

- **ratio form** (``delta`` in ``(0, 1]``): ``delta * R_r - R_f <= 0`` and
  ``delta * R_f - R_r <= 0``, i.e. ``min(R_f / R_r, R_r / R_f) >= delta`` (as
  :class:`~fairopt.constraints.EqualImpact`, which is the ratio form of equal opportunity);
- **difference form** (``bound >= 0``): ``-bound <= R_f - R_r <= bound`` (as
  :class:`~fairopt.constraints.DemographicParity`).

:class:`EqualOpportunity` constrains ``R = TPR``, :class:`FalsePositiveParity`
``R = FPR`` and :class:`EqualizedOdds` both: its rows are the TPR block followed by the
FPR block, named ``equalized_odds[<sensitive>]:TPR:<row>`` and ``...:FPR:<row>``.

The rows are linear in the transformed outputs, built on the machinery of
:class:`~fairopt.constraints.rates.GroupRateConstraint` (one block of sides per
conditioning label, the membership masked to that label): smooth rows for the engines,
:meth:`exact` on hard predictions, :meth:`partial_sums`/:meth:`from_sums` for
data-parallel sums, :meth:`target_encoding` for Moving Targets and closed-form
certificates (:mod:`fairopt.certificate`). A group with no row of a conditioning label in a
batch makes the rows that compare it 0 (the "Empty groups" rule of
:mod:`fairopt.constraints.rates`; :meth:`setup` warns when it happens on the training data).
``batch.y`` must hold 0/1 labels.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from fairopt._validation import check_interval, nonnegative_float
from fairopt.constraints.rates import (GroupRateConstraint, RowTemplate, difference_templates, label_mask,
                                       ratio_templates)
from fairopt.constraints.rows import GROUPINGS
from fairopt.surrogates import Surrogate

__all__ = ["ConditionalRateConstraint", "EqualOpportunity", "FalsePositiveParity", "EqualizedOdds"]


class ConditionalRateConstraint(GroupRateConstraint):
    r"""Group rates among the rows with given true labels, in ratio or difference form.

    The common base of :class:`EqualOpportunity`, :class:`FalsePositiveParity` and
    :class:`EqualizedOdds` (module doc). A subclass sets ``_prefix`` and ``_conditions``,
    a tuple of ``(block label, y value)``: one block of rows per entry, in that order.

    Parameters
    ----------
    sensitive : str or list of str
        Binary or categorical sensitive attribute(s) (``batch.sensitive``); a list gives
        intersection cells (or separate attributes with ``groups="marginal"``).
    delta : float, optional
        Ratio form: ``min(R_f / R_r, R_r / R_f) >= delta``, ``delta`` in ``(0, 1]``.
    bound : float, optional
        Difference form: ``|R_f - R_r| <= bound``, ``bound >= 0``.
    surrogate : str or Surrogate, default "smoothed_step"
        See :func:`fairopt.surrogates.get_surrogate`.
    threshold : float, default 0.0
        Decision threshold on ``out`` (0 for logits).
    groups : {"one_vs_rest", "pairwise", "marginal"}, default "one_vs_rest"

    Exactly one of ``delta`` and ``bound`` is given (to switch the form with
    :meth:`set_params`, set the other one to None in the same call).

    Raises
    ------
    ValueError
        Both or neither of ``delta``/``bound``, ``delta`` outside ``(0, 1]``, a negative
        ``bound``, an unknown ``surrogate``/``groups``; at setup/call an unknown or continuous
        sensitive attribute or a ``batch.y`` that is not 0/1.
    """

    _prefix = "conditional_rate"
    _conditions: tuple[tuple[str, int], ...] = ()

    def __init__(
        self,
        sensitive: str | Sequence[str],
        delta: float | None = None,
        bound: float | None = None,
        surrogate: str | Surrogate = "smoothed_step",
        threshold: float = 0.0,
        groups: str = "one_vs_rest",
    ) -> None:
        if (delta is None) == (bound is None):
            raise ValueError(
                f"{type(self).__name__}: give exactly one of delta (the ratio form, min(R_f/R_r, R_r/R_f) >= delta) "
                f"and bound (the difference form, |R_f - R_r| <= bound), got delta={delta!r}, bound={bound!r}"
            )
        self.delta: float | None = None if delta is None else check_interval(delta, "delta", 0.0, 1.0,
                                                                              closed="right")
        self.bound: float | None = None if bound is None else nonnegative_float(bound, "bound")
        super().__init__(sensitive, surrogate=surrogate, threshold=threshold, groups=groups, groupings=GROUPINGS)
        self._params = {
            "sensitive": sensitive, "delta": self.delta, "bound": self.bound, "surrogate": self.surrogate,
            "threshold": self.threshold, "groups": groups,
        }

    def _row_templates(self) -> list[RowTemplate]:
        return ratio_templates(self.delta) if self.delta is not None else difference_templates(self.bound)

    def _block_labels(self) -> tuple[str, ...]:
        return tuple(label for label, _ in self._conditions)

    def _row_masks(self, batch: Any) -> list[torch.Tensor | None]:
        return [label_mask(batch, value, type(self).__name__) for _, value in self._conditions]


class EqualOpportunity(ConditionalRateConstraint):
    r"""Equal opportunity: parity of the true-positive rates ``TPR_g = P(yhat = 1 | Y = 1, g)``.

    With ``TPR_g`` the mean of ``phi(out - threshold)`` over the rows of side ``g`` with
    ``y = 1``, every comparison (focus ``f``, reference ``r``; binary: ``f = 1``, ``r = 0``)
    has the rows

    - ratio form (``delta``): ``delta * TPR_r - TPR_f <= 0`` and ``delta * TPR_f - TPR_r <= 0``;
    - difference form (``bound``): ``-bound <= TPR_f - TPR_r <= bound``.

    Row names ``equal_opportunity[<sensitive>]:TPR:<row>``. The ratio form has the rows of
    :class:`~fairopt.constraints.EqualImpact`. Parameters as in
    :class:`ConditionalRateConstraint`; spec kind ``equal_opportunity`` (``eo``).
    """

    _prefix = "equal_opportunity"
    _conditions = (("TPR", 1),)


class FalsePositiveParity(ConditionalRateConstraint):
    r"""False-positive-rate parity: parity of ``FPR_g = P(yhat = 1 | Y = 0, g)``.

    With ``FPR_g`` the mean of ``phi(out - threshold)`` over the rows of side ``g`` with
    ``y = 0``, every comparison (focus ``f``, reference ``r``) has the rows

    - ratio form (``delta``): ``delta * FPR_r - FPR_f <= 0`` and ``delta * FPR_f - FPR_r <= 0``;
    - difference form (``bound``): ``-bound <= FPR_f - FPR_r <= bound``.

    Row names ``false_positive_parity[<sensitive>]:FPR:<row>``. Parameters as in
    :class:`ConditionalRateConstraint`; spec kind ``false_positive_parity`` (``fpr``).
    """

    _prefix = "false_positive_parity"
    _conditions = (("FPR", 0),)


class EqualizedOdds(ConditionalRateConstraint):
    r"""Equalized odds: parity of both the true- and the false-positive rates.

    The rows of :class:`EqualOpportunity` (``TPR``, rows with ``y = 1``) followed by those
    of :class:`FalsePositiveParity` (``FPR``, rows with ``y = 0``), for every comparison
    (focus ``f``, reference ``r``):

    - ratio form (``delta``): ``delta * R_r - R_f <= 0`` and ``delta * R_f - R_r <= 0`` for
      ``R`` in ``{TPR, FPR}``, i.e. both ``min(TPR_f / TPR_r, TPR_r / TPR_f)`` and
      ``min(FPR_f / FPR_r, FPR_r / FPR_f)`` are ``>= delta``;
    - difference form (``bound``): ``|TPR_f - TPR_r| <= bound`` and ``|FPR_f - FPR_r| <= bound``.

    Row names ``equalized_odds[<sensitive>]:TPR:<row>`` and ``...:FPR:<row>``. Parameters as
    in :class:`ConditionalRateConstraint`; spec kind ``equalized_odds`` (``eodds``).
    """

    _prefix = "equalized_odds"
    _conditions = (("TPR", 1), ("FPR", 0))
