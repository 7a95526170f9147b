"""The held-out margin (:func:`auto_margin`): a per-row tightening that predicts a new
sample stays within the bounds."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch

from fairopt._validation import check_interval, positive_float, require_unweighted
from fairopt.certificate.intervals import (bootstrap_rows, compared_pairs, finite_sides, normal_quantile, outputs_on,
                                           prepared_copy, rate_sides)
from fairopt.constraints.rates import GroupRateConstraint

__all__ = ["DEFAULT_HELD_OUT_FRACTION", "auto_margin", "held_out_spread"]


#: Default held-out fraction of :func:`auto_margin` (and of the estimators' ``margin="auto"``
#: without ``validation_fraction``): a new sample of ``0.3 / 0.7`` times the training rows.
DEFAULT_HELD_OUT_FRACTION = 0.3


def _proxy_outputs(data: Any) -> torch.Tensor:
    """Outputs that stand in for a fitted model's before one exists: ``+-4`` logits that reproduce a
    binary target, ``log y`` for a Poisson rate, and for regression the least-squares fit of ``y`` on
    ``[X, 1]``. A regression model's outputs vary like its fit, not like the target: the spread of a
    dependence measure of the outputs grows with their variance, and ``y`` itself would give it the
    target's variance, ``1 / R^2`` times the fit's (three times the margin where ``R^2`` is 0.1)."""
    y = data.y.double().reshape(-1)
    task = getattr(data, "task", "regression")
    if task == "binary":
        return 8.0 * y - 4.0
    if task == "poisson":
        return torch.log(y.clamp(min=1e-6))
    A = torch.cat([data.X.double().reshape(len(y), -1), torch.ones(len(y), 1, dtype=torch.float64)], dim=1)
    return A @ torch.linalg.lstsq(A, y.reshape(-1, 1), driver="gelsd").solution.reshape(-1)


def auto_margin(
    data: Any,
    constraint: Any,
    confidence: float = 0.95,
    held_out_fraction: float = DEFAULT_HELD_OUT_FRACTION,
    *,
    outputs: Any = None,
    n_bootstrap: int = 200,
    seed: int = 0,
    for_certificate: bool = False,
    inflation: float = 2.0,
) -> torch.Tensor:
    r"""Per-row tightening (in the rows' own units) that predicts a new sample stays within bounds.

    ``data`` are the training rows; the new sample is the held-out part of a split in
    which ``held_out_fraction`` of all rows are held out, i.e.
    ``n_new = n * f / (1 - f)`` rows with every group in the same proportions
    (``f = 0.3``: a new sample of ``3/7`` of the training size).

    Rate constraints: a row ``r = sum_g a_g P_g`` has standard error
    ``se(n) = sqrt(sum_g a_g^2 p_g (1 - p_g) / n_g)`` on a sample with side sizes ``n_g``.
    The model is fitted to meet the row on the training rows (sizes ``n_g``), whose value
    differs from the population's by the training noise; a new sample (sizes
    ``n'_g = n_g * n_new / n``) differs again by its own. For one model with group rates
    ``p_g`` the two sample rows are independent and about normal around the population's
    row, so the gap ``r_new - r_train`` has variance ``se(n)^2 + se(n')^2``; the fit leaves
    ``r_train`` at ``upper - margin``, and ``r_new`` exceeds ``upper`` when the gap exceeds
    the margin. Hence the margin is
    ``z * sqrt(se(n)^2 + se(n')^2)``, ``z`` the one-sided normal quantile at
    ``1 - alpha / pairs`` (``alpha = 1 - confidence``, a union bound over the compared pairs
    of sides as in :func:`certify`; bootstrap constraints: over the ``k`` finite bound
    sides), with ``p_g`` the current hard rates on ``data`` when ``outputs`` are given, else
    the positive rates of the training TARGET per side (the rates a fitted model is drawn
    towards; a side whose target rate is 0 or 1, as every side of a rate conditioned on the
    label is, e.g. :class:`~fairopt.constraints.EqualizedOdds`' true-positive rates, gets the largest
    binomial variance, ``p_g = 1/2``). The rows of a ratio constraint are its own event (``P_f / P_r >= delta`` iff
    ``delta P_r - P_f <= 0``), so no linearisation enters. The new sample is drawn like
    the training rows (independent rows); the held-out part of a split stratified by
    target x group (``FairData.split``) varies less, since only the rates within each
    target x group cell move (``benchmarks/margin_spread.py`` measures both kinds of split).
    ``for_certificate=True`` (a held-out part will be certified with
    :func:`certify`): ``inflation * z se(n')``; the default ``inflation=2`` is the
    certificate's own half-width ``z se(n')`` (the held-out value must clear the bound by
    that much for its confidence bound to pass) plus as much again for the held-out sample's
    noise: the "inflated" prediction of the Seldonian candidate selection (Thomas et al.,
    Science 2019). The estimators' certified fits try a fixed sequence of smaller
    inflations as well (``n_candidates``). With ``inflation=2`` it leaves out the training
    noise, so a certificate passes with probability about ``Phi(z / sqrt(2))`` (88% at
    ``z = 1.645``) rather than ``1 - alpha`` when training and held-out parts are of equal
    size; the certificate's own level is unaffected (measured on Adult, 20,000 rows, DI >=
    0.8, half held out: 3 of 3 passed, with 0.2 points more accuracy than the margin
    ``z sqrt(se(n)^2 + se(n')^2) + z se(n')``).

    Bootstrap constraints (GeDI, distance covariance, covariance): the standard deviation
    ``sd_r`` of the exact row over ``n_bootstrap`` seeded resamples of ``data`` (with
    ``outputs``, or, before a model exists, outputs that reproduce the training targets),
    scaled to the new size: ``z * sd_r * sqrt(n / n_new)``.

    This is a prediction for the deviation between training and new rows, not a
    certificate: use :func:`certify` on held-out rows for a statement with coverage.

    Returns
    -------
    torch.Tensor, float64 (m,)
        One margin ``>= 0`` per row of the constraint (set up on ``data`` if it was not).

    Raises
    ------
    ValueError
        ``data`` has per-row weights (``data.weights``): the standard errors above count
        rows (binomial side sizes, unweighted resamples); weighted ones are not implemented.
    """
    require_unweighted(data, "auto_margin (margin='auto')",
                       "give a numeric margin, or fit without sample_weight (FairData weights)")
    confidence = check_interval(confidence, "confidence", 0.0, 1.0)
    inflation = positive_float(inflation, "inflation")
    c = prepared_copy(constraint, data)
    z = normal_quantile(confidence, compared_pairs(c) if isinstance(c, GroupRateConstraint) else finite_sides(c))
    sd_train, sd_new = _sample_spreads(data, c, held_out_fraction, outputs, n_bootstrap, seed)
    margin = inflation * z * sd_new if for_certificate else z * np.sqrt(sd_train ** 2 + sd_new ** 2)
    return torch.as_tensor(margin, dtype=torch.float64)


def held_out_spread(data: Any, constraint: Any, held_out_fraction: float, *, outputs: Any = None,
                    n_bootstrap: int = 200, seed: int = 0) -> torch.Tensor:
    """Standard deviation per row of ``r_new - r_train``, the gap between a new sample's exact row
    and the training rows' (:func:`auto_margin` without its quantile: ``sqrt(se(n)^2 + se(n')^2)``,
    the new sample the held-out part of a split holding out ``held_out_fraction`` of all rows)."""
    require_unweighted(data, "held_out_spread", "fit without sample_weight (FairData weights)")
    sd_train, sd_new = _sample_spreads(data, prepared_copy(constraint, data), held_out_fraction, outputs,
                                       n_bootstrap, seed)
    return torch.as_tensor(np.sqrt(sd_train ** 2 + sd_new ** 2), dtype=torch.float64)


def _sample_spreads(data: Any, c: Any, held_out_fraction: float, outputs: Any, n_bootstrap: int,
                    seed: int) -> tuple[np.ndarray, np.ndarray]:
    """``(se(n), se(n'))`` per row of the prepared constraint ``c`` (:func:`auto_margin`'s docstring)."""
    fraction = check_interval(held_out_fraction, "held_out_fraction", 0.0, 1.0)
    scale = fraction / (1.0 - fraction)  # n_new / n
    out = _proxy_outputs(data) if outputs is None else outputs_on(outputs, data)
    if isinstance(c, GroupRateConstraint):
        k, n = rate_sides(c, out, data)
        p = np.where(n > 0, k / np.maximum(n, 1.0), 0.5)
        if outputs is None:  # a label-conditioned side's target rate is 0 or 1: no variance to go by
            p = np.where((p <= 0.0) | (p >= 1.0), 0.5, p)
        D = c.informed_rows(torch.as_tensor(n), torch.float64).numpy()
        var_new = (D ** 2) @ (p * (1.0 - p) / np.maximum(n * scale, 1.0))
        var_train = (D ** 2) @ (p * (1.0 - p) / np.maximum(n, 1.0))
        return np.sqrt(var_train), np.sqrt(var_new)
    draws = bootstrap_rows(c, out, data, int(n_bootstrap), int(seed))
    sd = draws.std(axis=0, ddof=1)  # the training sample's; a new one of n_new rows: sd / sqrt(scale)
    return sd, sd / math.sqrt(scale)
