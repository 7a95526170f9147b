"""End-game of a boosting fit on logits: the smallest constant shift of the scores that meets the bounds.

Hard labels are ``F_i > 0``; the exact rows of a rate constraint (group rates of predicting the
positive class) change only when a row's label flips. Adding a constant ``s`` to every score
flips the labels of the rows closest to the threshold first, and a prediction rule
``F(x) + s > 0`` reads no sensitive attribute. Shifting up by enough to flip ``k`` rows
(``s_k = -(a_k + a_{k+1}) / 2`` with ``a_1 >= a_2 >= ...`` the scores ``<= 0``, ties kept
together), or down likewise, :func:`smallest_shifts` finds, in each direction, the smallest
``k`` whose exact rows meet the bounds: doubling ``k`` until a feasible one, then bisection
between the last infeasible and the first feasible ``k`` (every returned shift is checked on the
exact rows; the rows need not be monotone in ``k``, so a smaller feasible ``k`` may exist that the
search does not visit). At most ``2 (log2 n + 1)`` evaluations of the exact rows per direction.
"""

from __future__ import annotations

from typing import Callable, NamedTuple

import numpy as np
import torch

from solvers.problem import row_violations

__all__ = ["ShiftCandidate", "smallest_shifts"]


class ShiftCandidate(NamedTuple):
    """A constant shift ``shift`` of the scores and the exact rows ``c_exact`` it gives (float64)."""

    shift: float
    c_exact: torch.Tensor


def _flip_shifts(scores: torch.Tensor, up: bool) -> torch.Tensor:
    """``s_k`` for ``k = 1..K`` (module docstring): the shift that flips the ``k`` labels nearest the
    threshold in direction ``up``; a tie group flips together (its shifts repeat). In numpy: once
    per end-game on up to ``n`` rows, where torch's ``repeat_interleave`` costs several passes."""
    values = scores.detach().cpu().numpy()
    side = values[values <= 0] if up else values[values > 0]
    if side.size == 0:
        return torch.zeros(0, dtype=scores.dtype)
    ordered = -np.sort(-side) if up else np.sort(side)  # nearest the threshold first
    beyond = ordered[-1] - 1.0 if up else ordered[-1] + 1.0  # past the farthest row
    shifts = -(ordered + np.append(ordered[1:], beyond)) / 2.0
    # rows tied with the next one: flip the whole tie group (the shift of its last member)
    last = np.append(np.flatnonzero(ordered[1:] != ordered[:-1]), ordered.size - 1)
    counts = np.diff(last, prepend=-1)
    return torch.from_numpy(np.repeat(shifts[last], counts))


def smallest_shifts(scores: torch.Tensor, exact_rows: Callable[[torch.Tensor], torch.Tensor], lower: torch.Tensor,
                    upper: torch.Tensor, tol: float) -> list[ShiftCandidate]:
    """The smallest found feasible shift up and down (module docstring), each with its exact rows.

    Parameters
    ----------
    scores : tensor (n,)
        Logits; a row is labelled positive where ``scores + shift > 0``.
    exact_rows : callable
        ``F -> c_exact`` (m,), the exact constraint rows of the scores ``F``.
    lower, upper : tensor (m,)
        The bounds.
    tol : float
        Largest per-row exact violation that counts as feasible.

    Returns
    -------
    list of ShiftCandidate
        Zero, one or two candidates (up and down), each feasible.
    """
    lower, upper = lower.to(torch.float64), upper.to(torch.float64)

    def feasible(shift: float) -> ShiftCandidate | None:
        c = exact_rows(scores + shift).to(torch.float64).reshape(-1)
        ok = bool(torch.isfinite(c).all()) and bool((row_violations(c, lower, upper) <= tol).all())
        return ShiftCandidate(float(shift), c) if ok else None

    found = []
    for up in (True, False):
        shifts = _flip_shifts(scores.detach().to(torch.float64), up)
        K = int(shifts.numel())
        low, k, hit = 0, 1, None  # low: the largest k known infeasible
        while k <= K:
            hit = feasible(float(shifts[k - 1]))
            if hit is not None:
                break
            low, k = k, 2 * k
        if hit is None and low < K:
            k, hit = K, feasible(float(shifts[K - 1]))
        if hit is None:
            continue
        high = k
        while high - low > 1:  # smallest feasible k in (low, high], by bisection
            mid = (low + high) // 2
            candidate = feasible(float(shifts[mid - 1]))
            if candidate is not None:
                high, hit = mid, candidate
            else:
                low = mid
        found.append(hit)
    return found
