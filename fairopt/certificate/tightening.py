"""A copy of a constraint whose finite bounds are moved inwards by a margin
(:func:`tighten`, :class:`TightenedConstraint`); the user's object is never changed."""

from __future__ import annotations

import copy
import math
from typing import Any, Callable

import numpy as np
import torch
from scipy.optimize import linprog

from fairopt.constraints.base import BaseConstraint
from fairopt.constraints.gedi import GeDI
from fairopt.constraints.rates import GroupRateConstraint
from fairopt.exceptions import MarginTooLargeError
from solvers.contract import cost_on_all_rows, offers_calibrated_form, row_scale, smooth_is_exact

__all__ = ["MarginTooLargeError", "TightenedConstraint", "bounds_ready", "fresh_copy", "rates_can_meet", "tighten"]


def rates_can_meet(side_rows: torch.Tensor, lower: torch.Tensor, upper: torch.Tensor) -> bool:
    """Whether some side rates ``P`` in ``[0, 1]^G`` give ``lower <= D P <= upper`` (``D`` the
    constraint's :attr:`~fairopt.constraints.rates.GroupRateConstraint.side_rows`), by a feasibility
    linear programme (HiGHS).

    The side rates are taken as free, although a group's complement is an average of the other groups'
    rates: a necessary condition, which catches the margins no model can meet. Two ratio rows of one
    comparison, ``P_f >= delta P_r + m_1`` and ``P_r >= delta P_f + m_2``, give
    ``P_f >= (m_1 + delta m_2) / (1 - delta^2)`` and likewise ``P_r``: with equal margins they need
    ``m <= 1 - delta`` (0.2 at ``delta = 0.8``), and a margin sized for a group of 30 rows often exceeds it.
    """
    D = side_rows.detach().double().cpu().numpy()
    lo, up = lower.double().cpu().numpy(), upper.double().cpu().numpy()
    has_upper, has_lower = np.isfinite(up), np.isfinite(lo)
    if not (has_upper.any() or has_lower.any()):
        return True
    result = linprog(np.zeros(D.shape[1]), A_ub=np.vstack([D[has_upper], -D[has_lower]]),
                     b_ub=np.concatenate([up[has_upper], -lo[has_lower]]), bounds=(0.0, 1.0), method="highs")
    return result.status != 2  # 2: infeasible


def fresh_copy(constraint: Any) -> Any:
    """A deep copy without the per-batch caches (they hold data)."""
    cache = getattr(constraint, "_cache", None)
    memo = {} if cache is None else {id(cache): type(cache)()}
    return copy.deepcopy(constraint, memo)


def bounds_ready(constraint: Any) -> bool:
    try:
        constraint.lower  # noqa: B018 - a property that raises before setup
    except AttributeError:
        return False
    if isinstance(constraint, GeDI) and not constraint.is_set_up:
        return False
    return True


class TightenedConstraint(BaseConstraint):
    """A constraint whose finite bounds are moved inwards by ``margin``: ``upper - margin``
    and ``lower + margin``.

    Holds a cache-free deep copy of the original (the user's object is never changed) and
    re-applies the margin after every :meth:`setup` (engines set constraints up, which
    resets data-sized bounds). Everything else is delegated to the copy. For GeDI the
    absolute bound the Moving Targets projection reads is tightened as well.
    """

    def __init__(self, constraint: Any, margin: Any) -> None:
        if isinstance(constraint, TightenedConstraint):
            raise ValueError("constraint: already tightened; tighten the original with the total margin")
        self.constraint = fresh_copy(constraint)
        self._original = fresh_copy(constraint)  # untightened, for :meth:`with_margin`
        self.name = getattr(constraint, "name", "constraint")
        self.margin = margin if isinstance(margin, torch.Tensor) else float(margin)
        if isinstance(self.margin, float) and (not math.isfinite(self.margin) or self.margin < 0):
            raise ValueError(f"margin: expected a finite number >= 0, got {margin!r}")
        if isinstance(self.margin, torch.Tensor) and not bool((torch.isfinite(self.margin) & (self.margin >= 0)).all()):
            raise ValueError("margin: expected finite values >= 0")
        self._tight: tuple[torch.Tensor, torch.Tensor] | None = None
        self._base: tuple[torch.Tensor, torch.Tensor] | None = None  # the copy's bounds before the margin
        if bounds_ready(self.constraint):
            self._apply()

    def _apply(self) -> None:
        inner = self.constraint
        base = (inner.lower, inner.upper)
        lower, upper = inner.lower.double().clone(), inner.upper.double().clone()
        margin = torch.as_tensor(self.margin, dtype=torch.float64).reshape(-1)
        if margin.numel() not in (1, lower.numel()):
            raise ValueError(f"margin: {margin.numel()} values for the {lower.numel()} rows of {self.name}")
        lower = torch.where(torch.isfinite(lower), lower + margin, lower)
        upper = torch.where(torch.isfinite(upper), upper - margin, upper)
        floor = getattr(inner, "row_floor", None)  # the smallest value a row takes (a norm: 0), if known
        empty = (lower > upper) | ((upper < floor) if floor is not None else torch.zeros_like(upper, dtype=torch.bool))
        if bool(empty.any()):
            i = int(torch.nonzero(empty)[0])
            names = inner.row_names or []
            what = (f"lower {lower[i].item():.4g} > upper {upper[i].item():.4g}" if lower[i] > upper[i] else
                    f"upper {upper[i].item():.4g} below {floor:.4g}, the smallest value the row takes (a constant "
                    "prediction's)")
            raise MarginTooLargeError(f"margin: tightening {self.name} by {margin.max().item():.4g} leaves row "
                                      f"{names[i] if i < len(names) else i!r} with {what}; use a smaller margin, a "
                                      "looser bound or more data")
        if isinstance(inner, GroupRateConstraint) and not rates_can_meet(inner.side_rows, lower, upper):
            raise MarginTooLargeError(f"margin: tightening {self.name} by up to {margin.max().item():.4g} (rate "
                                      "units) leaves no group rates in [0, 1] that meet all its rows together; "
                                      "margin='auto' grows as groups get smaller: merge small groups, use a smaller "
                                      "margin, a looser bound or more data")
        inner.lower, inner.upper = lower, upper
        self._base = base
        if isinstance(inner, GeDI) and inner.absolute_bound is not None:
            inner.absolute_bound = float(upper[0])
        self._tight = (lower, upper)

    def setup(self, data: Any) -> None:
        """Set the copy up on ``data`` and tighten its (re)built bounds; a setup that keeps the bounds (fixed
        ones, e.g. an absolute distance covariance bound) gets the margin once, not once per setup."""
        inner = self.constraint
        inner.setup(data)
        if self._tight is not None and inner.lower is self._tight[0] and inner.upper is self._tight[1]:
            inner.lower, inner.upper = self._base
        self._apply()

    @property
    def lower(self) -> torch.Tensor:
        if self._tight is None:
            return self.constraint.lower  # raises before setup
        return self._tight[0]

    @property
    def upper(self) -> torch.Tensor:
        if self._tight is None:
            return self.constraint.upper
        return self._tight[1]

    @property
    def row_names(self) -> list[str] | None:
        return self.constraint.row_names

    def __call__(self, out: torch.Tensor, batch: Any) -> torch.Tensor:
        return self.constraint(out, batch)

    def exact(self, out: torch.Tensor, batch: Any) -> torch.Tensor:
        return self.constraint.exact(out, batch)

    def target_encoding(self, batch: Any) -> Any:
        return self.constraint.target_encoding(batch)

    @property
    def measure(self) -> str:
        """The original constraint's bounded measure (the margin changes its rows, not the measure)."""
        return getattr(self.constraint, "measure", self.name)

    @property
    def bound_sense(self) -> str:
        return getattr(self.constraint, "bound_sense", "upper")

    @property
    def smooth_is_exact(self) -> bool:
        """The original's flag (a margin moves bounds, not the rows)."""
        return smooth_is_exact(self.constraint)

    @property
    def cost_on_all_rows(self) -> str:
        """The original's cost on all rows: a tightened distance covariance is still quadratic,
        so mini-batch SQP keeps its batch estimates."""
        return cost_on_all_rows(self.constraint)

    @property
    def row_scale(self) -> float | None:
        """The original's row scale (a margin moves bounds, not the rows' units)."""
        return row_scale(self.constraint)

    @property
    def calibrated_form(self) -> Callable[..., Any]:
        """:class:`solvers.contract.CalibratedForm`: the original's calibrated form under the same margin
        (absent, an ``AttributeError``, where the original offers none)."""
        if not offers_calibrated_form(self.constraint):
            raise AttributeError("calibrated_form")
        return self._calibrated_form

    def _calibrated_form(self, spread: str = "threshold") -> Any:
        inner = self.constraint.calibrated_form(spread)
        if inner is self.constraint:
            return self
        form = copy.copy(self)  # the same margin (and tightened bounds, once set up) around the form
        form.constraint = inner
        return form

    def realised(self, out: torch.Tensor, batch: Any) -> float:
        """The original constraint's realised measure (compare it with the user's bound)."""
        return self.constraint.realised(out, batch)

    def get_params(self, deep: bool = True) -> dict:
        """The original constraint's parameters (the margin is not one of them)."""
        return self.constraint.get_params(deep=deep)

    def set_params(self, **params: Any) -> "TightenedConstraint":
        """Change the original constraint's parameters; the margin is applied again to the
        rebuilt bounds (now, or at the next :meth:`setup`)."""
        self.constraint.set_params(**params)
        self._original.set_params(**params)  # :meth:`with_margin` starts from the changed original
        self.name = getattr(self.constraint, "name", self.name)
        self._tight = None
        if bounds_ready(self.constraint):
            self._apply()
        return self

    def with_margin(self, margin: Any) -> "TightenedConstraint":
        """The original constraint tightened by ``margin`` instead (a number or one value per row)."""
        return TightenedConstraint(self._original, margin)

    def __sklearn_clone__(self) -> "TightenedConstraint":
        """:func:`sklearn.base.clone`: the clone of the original under the same margin."""
        inner = getattr(self.constraint, "__sklearn_clone__", None)
        if not callable(inner):  # an original without the protocol: a copy as it is
            return fresh_copy(self)
        margin = self.margin.clone() if isinstance(self.margin, torch.Tensor) else self.margin
        return TightenedConstraint(inner(), margin)

    def __getattr__(self, name: str) -> Any:
        # only called for attributes not found normally: partial_sums, from_sums, _cache, ...
        if name.startswith("__") or "constraint" not in self.__dict__:
            raise AttributeError(name)
        return getattr(self.__dict__["constraint"], name)

    def __repr__(self) -> str:
        margin = self.margin if isinstance(self.margin, float) else self.margin.tolist()
        return f"TightenedConstraint({self.constraint!r}, margin={margin!r})"


def tighten(constraint: Any, margin: Any) -> TightenedConstraint:
    """A copy of ``constraint`` with ``upper - margin`` and ``lower + margin`` on its finite
    sides (``margin``: a number or one value per row, ``>= 0``, in the rows' units).

    The user's constraint is not modified. Bounds sized from the data (rate constraints)
    are tightened when the copy is set up (engines do this); a margin that empties a row's
    interval is a ValueError then.
    """
    return TightenedConstraint(constraint, margin)
