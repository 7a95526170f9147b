r"""Label-conditioned group-rate constraints: equal opportunity, false-positive-rate parity and equalized
odds (Hardt, Price and Srebro, 2016).

Each compares between group sides ``g`` the (weighted) surrogate rate among the rows with one label:

``TPR_g = sum_{i in g, y_i = 1} w_i phi(t_i) / sum_{i in g, y_i = 1} w_i`` (``FPR_g``: ``y_i = 0``).

Every comparison (focus ``f``, reference ``r``, as in :mod:`fairopt.constraints.rates`) of a rate
``R`` gives, in the ratio form (``delta``), ``delta * R_r - R_f <= 0`` and ``delta * R_f - R_r <= 0``;
in the difference form (``bound``), ``-bound <= R_f - R_r <= bound``. :class:`EqualizedOdds` stacks
the TPR block and the FPR block. ``batch.y`` must hold 0/1 labels.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from fairopt._validation import check_interval
from fairopt.constraints.rates import (GroupRateConstraint, RowTemplate, difference_templates, label_mask,
                                       ratio_templates)
from fairopt.constraints.rows import GROUPINGS
from fairopt.surrogates import Surrogate

__all__ = ["ConditionalRateConstraint", "EqualOpportunity", "FalsePositiveParity", "EqualizedOdds"]


class ConditionalRateConstraint(GroupRateConstraint):
    r"""Group rates among the rows with given true labels, in ratio or difference form.

    A subclass sets ``_prefix`` and ``_conditions``, a tuple of ``(block label, y value)``: one block of
    rows per entry, in that order.

    Parameters
    ----------
    sensitive : str or list of str
        Sensitive attribute(s) in ``batch.sensitive``; a list gives intersection cells.
    delta : float, optional
        Ratio form: ``min(R_f / R_r, R_r / R_f) >= delta``, ``delta`` in ``(0, 1]``.
    bound : float, optional
        Difference form: ``|R_f - R_r| <= bound``, ``bound >= 0``. Exactly one of ``delta`` and
        ``bound`` is given (to switch with :meth:`set_params`, set the other to None in the same call).
    surrogate : str, Surrogate or None, default None
        As in :class:`~fairopt.constraints.rates.DisparateImpact`: None is the smoothed step where the
        constraint is used as is, and the rates' :meth:`calibrated_form` in the SQP engines.
    threshold : float, default 0.0
        Decision threshold on ``out``.
    groups : {"one_vs_rest", "pairwise", "marginal"}, default "one_vs_rest"
    """

    _prefix = "conditional_rate"
    _conditions: tuple[tuple[str, int], ...] = ()

    def __init__(
        self,
        sensitive: str | Sequence[str],
        delta: float | None = None,
        bound: float | None = None,
        surrogate: str | Surrogate | None = None,
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
        self.bound: float | None = (None if bound is None  # a difference of two rates lies in [0, 1]
                                    else check_interval(bound, "bound", 0.0, 1.0, closed="both"))
        super().__init__(sensitive, surrogate=surrogate, threshold=threshold, groups=groups, groupings=GROUPINGS)
        self._params = {
            "sensitive": sensitive, "delta": self.delta, "bound": self.bound,
            "surrogate": self._named_surrogate, "threshold": self.threshold, "groups": groups,
        }

    def _row_templates(self) -> list[RowTemplate]:
        return ratio_templates(self.delta) if self.delta is not None else difference_templates(self.bound)

    def _block_labels(self) -> tuple[str, ...]:
        return tuple(label for label, _ in self._conditions)

    def _row_masks(self, batch: Any) -> list[torch.Tensor | None]:
        return [label_mask(batch, value, type(self).__name__) for _, value in self._conditions]


class EqualOpportunity(ConditionalRateConstraint):
    r"""Equal opportunity: parity of the true-positive rates ``P(yhat = 1 | Y = 1, g)`` (rows ``...:TPR:...``).

    The ratio form has the rows of :class:`~fairopt.constraints.EqualImpact`; spec kind ``equal_opportunity``.
    """

    _prefix = "equal_opportunity"
    _conditions = (("TPR", 1),)


class FalsePositiveParity(ConditionalRateConstraint):
    r"""False-positive-rate parity: parity of ``P(yhat = 1 | Y = 0, g)`` (rows ``...:FPR:...``)."""

    _prefix = "false_positive_parity"
    _conditions = (("FPR", 0),)


class EqualizedOdds(ConditionalRateConstraint):
    r"""Equalized odds: the rows of :class:`EqualOpportunity` followed by those of :class:`FalsePositiveParity`."""

    _prefix = "equalized_odds"
    _conditions = (("TPR", 1), ("FPR", 0))
