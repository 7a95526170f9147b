"""Balance-property correction of Poisson rate predictions (Lindholm and Wuthrich 2024) [DC Remark 5.3].

Rates ``mu_i`` with exposures ``v_i`` are balanced on a portfolio with claim counts ``N_i`` when
``sum_i v_i mu_i = sum_i N_i`` (the premium covers the claims on average). Early stopping and fairness
penalties break it; [DC] recommends the multiplicative correction

    alpha = sum_i N_i / sum_i v_i mu_i,        mu_i^bal = alpha mu_i,

which for a log link is the intercept shift ``log(alpha)``. Ratios ``mu_i / mu_j`` and scale-free
fairness measures are unchanged; dCov~^2 of the rates (homogeneous of degree one) is multiplied by
``alpha``. Compute ``alpha`` on the training portfolio and apply it to new predictions (``factor=``):
correcting with a new portfolio's own claims would use the outcomes being predicted.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from fairopt._validation import check_same_length, positive_float
from fairopt.measures.performance import float_vector

__all__ = ["balance_correction", "apply_balance_correction"]


def _checked(pred_rate: Any, exposure: Any, claims: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    rate = float_vector(pred_rate, "pred_rate")
    volume = float_vector(exposure, "exposure")
    counts = float_vector(claims, "claims")
    check_same_length(pred_rate=rate, exposure=volume, claims=counts)
    if (rate <= 0).any():
        raise ValueError(f"pred_rate: expected positive rates, got {rate[rate <= 0][0]!r} "
                         f"at row {int(np.flatnonzero(rate <= 0)[0])}")
    if (volume <= 0).any():
        raise ValueError(f"exposure: expected positive exposures, got {volume[volume <= 0][0]!r} "
                         f"at row {int(np.flatnonzero(volume <= 0)[0])}")
    if (counts < 0).any():
        raise ValueError(f"claims: expected counts >= 0, got {counts[counts < 0][0]!r} "
                         f"at row {int(np.flatnonzero(counts < 0)[0])}")
    return rate, volume, counts


def balance_correction(pred_rate: Any, exposure: Any, claims: Any) -> float:
    """Multiplicative balance correction ``alpha = sum_i N_i / sum_i v_i mu_i`` (1 when already balanced).

    Parameters
    ----------
    pred_rate : array-like or torch.Tensor, shape (n,)
        Predicted rates ``mu_i`` per unit of exposure, > 0.
    exposure : array-like or torch.Tensor, shape (n,)
        Exposures ``v_i``, > 0.
    claims : array-like or torch.Tensor, shape (n,)
        Observed claim counts ``N_i`` >= 0 with a positive total.
    """
    rate, volume, counts = _checked(pred_rate, exposure, claims)
    total_claims = float(np.sum(counts))
    if total_claims <= 0:
        raise ValueError("claims: the total is 0, so the balanced rates would all be 0")
    return total_claims / float(np.sum(volume * rate))


def apply_balance_correction(
    pred_rate: Any, exposure: Any = None, claims: Any = None, *, factor: float | None = None
) -> np.ndarray:
    """Balanced rates ``alpha * mu_i``: ``alpha`` from ``exposure`` and ``claims``, or a given ``factor``.

    Parameters
    ----------
    pred_rate : array-like or torch.Tensor, shape (n,)
        Predicted rates, > 0.
    exposure, claims : array-like, optional
        As in :func:`balance_correction`; required when ``factor`` is None.
    factor : float, optional
        A correction ``alpha > 0`` computed before (e.g. on the training portfolio).
    """
    if factor is None:
        if exposure is None or claims is None:
            raise ValueError("exposure, claims: both are needed to compute the correction (or pass factor=)")
        factor = balance_correction(pred_rate, exposure, claims)
        return float_vector(pred_rate, "pred_rate") * factor
    if exposure is not None or claims is not None:
        raise ValueError("factor: give either factor or exposure and claims, not both")
    factor = positive_float(factor, "factor")
    rate = float_vector(pred_rate, "pred_rate")
    if (rate <= 0).any():
        raise ValueError(f"pred_rate: expected positive rates, got {rate[rate <= 0][0]!r}")
    return rate * factor
