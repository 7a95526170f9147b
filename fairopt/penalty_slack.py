"""The warning of ``method="penalty"`` when its fixed weight over-satisfies a bound.

A penalty ``weight * V(c)`` does not aim at the bound: a weight far above the optimal
multiplier pushes the constraint well inside it and costs accuracy the user did not ask to
give up (FairRegressor on Communities and Crime, GeDI <= 0.2 relative, at the default weight
1: GeDI 0.009 and test R2 0.21). The check names every constraint row with a nonzero
finite bound whose exact training value lies inside its bounds with room of more than
:data:`SLACK_FRACTION` of the bound's magnitude on every finite side; rows whose bound is 0
(the rate constraints' ``0.8 P_a - P_b <= 0``) have no scale to judge by and are not named. A
constraint with a row at or beyond its bound (within that room, or :data:`ZERO_BOUND_ROOM` of a
bound of 0) is not over-satisfied, whatever its other rows: the rows of one group against the
rest can sit far inside while another group's row binds.
"""

from __future__ import annotations

import math
from typing import Any, Iterable

import torch

from solvers.problem import model_outputs

__all__ = ["SLACK_FRACTION", "ZERO_BOUND_ROOM", "over_satisfied_rows", "penalty_slack_message"]

#: Room inside a bound, as a fraction of ``|bound|``, above which a penalty fit is reported.
SLACK_FRACTION = 0.5
#: Room inside a bound of 0 (rate units) within which a row counts as at its bound.
ZERO_BOUND_ROOM = 1e-3


def over_satisfied_rows(model: Any, data: Any, constraints: Iterable[Any],
                        fraction: float = SLACK_FRACTION) -> list[tuple[str, float, float]]:
    """``(row name, exact value, bound)`` of every row inside its bounds whose distance to each
    finite bound exceeds ``fraction * |bound|`` (rows with a finite nonzero bound only; the
    bound reported is the nearer finite one)."""
    with torch.no_grad():
        out = model_outputs(model, data)
    rows = []
    for constraint in constraints:
        values = constraint.exact(out, data).reshape(-1).double()
        lower = constraint.lower.reshape(-1).double().expand_as(values)
        upper = constraint.upper.reshape(-1).double().expand_as(values)
        names = list(getattr(constraint, "row_names", None) or [])
        flagged, binding = [], False
        for i, (c, lo, hi) in enumerate(zip(values.tolist(), lower.tolist(), upper.tolist())):
            sides = [b for b in (lo, hi) if math.isfinite(b)]
            if not sides:
                continue
            if not lo <= c <= hi or any(abs(c - b) <= (fraction * abs(b) if b else ZERO_BOUND_ROOM) for b in sides):
                binding = True  # a row at or beyond its bound: the weight is not too large for this constraint
                continue
            if all(b != 0 for b in sides):
                nearest = min(sides, key=lambda b: abs(c - b))
                name = names[i] if i < len(names) else f"{getattr(constraint, 'name', 'constraint')}[{i}]"
                flagged.append((name, c, nearest))
        if not binding:
            rows += flagged
    return rows


def penalty_slack_message(rows: list[tuple[str, float, float]], weight: Any) -> str | None:
    """The warning text for :func:`over_satisfied_rows`, None when there are none."""
    if not rows:
        return None
    listed = "; ".join(f"{name}: {value:.4g} against the bound {bound:.4g}" for name, value, bound in rows[:3])
    return (f"method='penalty' with weight {weight!r} over-satisfies its bound(s) ({listed}): the penalty pushed "
            "the model far inside, at a cost in accuracy the bound does not ask for. Lower the weight "
            "(engine_params={'weight': ...}) until the bound is just met, or use method='sqp' or "
            "'lagrangian', which aim at the bound itself")
