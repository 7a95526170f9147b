"""Balance-property correction of Poisson rate predictions (Lindholm and Wuthrich 2024) [DC Remark 5.3].

A claim-frequency model with predicted rates ``mu_i`` (claims per unit of exposure) and
exposures ``v_i`` has the *balance property* on a portfolio with observed claim counts
``N_i`` when

    sum_i v_i mu_i = sum_i N_i,

i.e. the premium charged covers the claims on average at portfolio level. Early stopping,
regularisation and fairness penalties break it ([DC] Remark 5.3, citing Wuthrich 2020);
[DC] recommends the simple post-processing of Lindholm and Wuthrich (2024), the
multiplicative correction

    alpha = sum_i N_i / sum_i v_i mu_i,        mu_i^bal = alpha mu_i,

after which ``sum_i v_i mu_i^bal = sum_i N_i`` holds exactly (up to float round-off).

For a log link, ``mu_i = exp(eta_i)``, this is the intercept shift ``eta_i -> eta_i +
log(alpha)``: the same correction written on the linear-predictor scale (it is what the
unpenalised maximum-likelihood intercept of a Poisson GLM satisfies automatically). It
leaves every ratio ``mu_i / mu_j`` unchanged, so the ranking of risks and scale-free
fairness measures are unaffected; scale-dependent ones (dCov~^2 of the rates, which is
positively homogeneous of degree one in them) are multiplied by ``alpha``.

Compute ``alpha`` on the training portfolio and apply the same factor to new predictions
(:func:`apply_balance_correction` with ``factor=``); correcting each new portfolio with its
own observed claims would use the outcomes being predicted.
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
    """Multiplicative balance correction ``alpha = sum_i N_i / sum_i v_i mu_i`` (Lindholm and Wuthrich 2024).

    Parameters
    ----------
    pred_rate : array-like or torch.Tensor, shape (n,)
        Predicted rates ``mu_i`` per unit of exposure (e.g. ``exp(out)`` of a Poisson model),
        all > 0 and finite.
    exposure : array-like or torch.Tensor, shape (n,)
        Exposures ``v_i`` (e.g. years insured), all > 0 and finite.
    claims : array-like or torch.Tensor, shape (n,)
        Observed claim counts ``N_i`` >= 0 (need not be integers), with a positive total.

    Returns
    -------
    float
        ``alpha > 0``; 1 when the predictions are already balanced. On the log scale the
        same correction is the intercept shift ``log(alpha)``.

    Raises
    ------
    ValueError
        Arrays of different lengths, empty or not 1-D; non-finite values; a rate or an
        exposure <= 0; a negative count; no claims at all (the balanced premium would be 0).
    """
    rate, volume, counts = _checked(pred_rate, exposure, claims)
    total_claims = float(np.sum(counts))
    if total_claims <= 0:
        raise ValueError("claims: the total is 0, so the balanced rates would all be 0")
    return total_claims / float(np.sum(volume * rate))


def apply_balance_correction(
    pred_rate: Any, exposure: Any = None, claims: Any = None, *, factor: float | None = None
) -> np.ndarray:
    """Balanced rates ``alpha * mu_i``, with ``sum_i v_i alpha mu_i = sum_i N_i`` on the data given.

    Either pass ``exposure`` and ``claims`` (``alpha`` = :func:`balance_correction` of these
    rows) or a ``factor`` computed before, e.g. on the training portfolio, to correct new
    predictions.

    Parameters
    ----------
    pred_rate : array-like or torch.Tensor, shape (n,)
        Predicted rates, > 0.
    exposure, claims : array-like, optional
        As in :func:`balance_correction`; required when ``factor`` is None.
    factor : float, optional
        A correction ``alpha > 0`` to apply as it is.

    Returns
    -------
    numpy.ndarray of float64, shape (n,)
        The corrected rates.
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
