"""Tests of the balance-property correction of Poisson rates (Lindholm and Wuthrich 2024, [DC] Remark 5.3)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from fairopt.measures import apply_balance_correction, balance_correction


@pytest.fixture
def portfolio():
    rng = np.random.default_rng(0)
    n = 5000
    exposure = rng.uniform(0.25, 1.0, n)
    true_rate = np.exp(-2.3 + 0.4 * rng.normal(size=n))
    claims = rng.poisson(exposure * true_rate).astype(float)
    pred_rate = 0.8 * true_rate * np.exp(0.1 * rng.normal(size=n))  # biased low, as after regularisation
    return pred_rate, exposure, claims


def test_balance_property_holds_exactly(portfolio):
    pred_rate, exposure, claims = portfolio
    factor = balance_correction(pred_rate, exposure, claims)
    assert factor == pytest.approx(claims.sum() / (exposure * pred_rate).sum(), rel=1e-15)
    assert factor > 1.1  # the predictions were 20% low
    corrected = apply_balance_correction(pred_rate, exposure, claims)
    assert abs((exposure * corrected).sum() - claims.sum()) <= 1e-12 * claims.sum()
    np.testing.assert_allclose(corrected / pred_rate, factor, rtol=1e-15)  # ratios between risks unchanged
    # the log-scale intercept shift is the same correction
    np.testing.assert_allclose(np.exp(np.log(pred_rate) + math.log(factor)), corrected, rtol=1e-12)
    # torch input, and the training factor applied to new rates
    assert balance_correction(torch.tensor(pred_rate), torch.tensor(exposure), torch.tensor(claims)) \
        == pytest.approx(factor, rel=1e-15)
    np.testing.assert_allclose(apply_balance_correction(pred_rate[:10], factor=factor), corrected[:10], rtol=1e-15)


def test_factor_is_one_when_already_balanced(portfolio):
    _, exposure, claims = portfolio
    balanced = np.full(len(claims), claims.sum() / exposure.sum())  # the balanced constant rate
    assert balance_correction(balanced, exposure, claims) == pytest.approx(1.0, abs=1e-12)
    once = apply_balance_correction(portfolio[0], exposure, claims)
    assert balance_correction(once, exposure, claims) == pytest.approx(1.0, abs=1e-12)


def test_errors():
    rate, exposure, claims = np.ones(3), np.ones(3), np.array([0.0, 1.0, 2.0])
    with pytest.raises(ValueError, match="exposure: expected positive"):
        balance_correction(rate, np.array([1.0, 0.0, 1.0]), claims)
    with pytest.raises(ValueError, match="exposure: expected positive"):
        balance_correction(rate, np.array([1.0, -0.5, 1.0]), claims)
    with pytest.raises(ValueError, match="pred_rate: expected positive"):
        balance_correction(np.array([1.0, 0.0, 1.0]), exposure, claims)
    with pytest.raises(ValueError, match="claims: expected counts >= 0"):
        balance_correction(rate, exposure, np.array([0.0, -1.0, 2.0]))
    with pytest.raises(ValueError, match="total is 0"):
        balance_correction(rate, exposure, np.zeros(3))
    with pytest.raises(ValueError, match="length mismatch"):
        balance_correction(rate, np.ones(2), claims)
    with pytest.raises(ValueError, match="non-finite"):
        balance_correction(np.array([1.0, np.inf, 1.0]), exposure, claims)
    with pytest.raises(ValueError, match="both are needed"):
        apply_balance_correction(rate, exposure)
    with pytest.raises(ValueError, match="not both"):
        apply_balance_correction(rate, exposure, claims, factor=1.2)
    with pytest.raises(ValueError, match="factor"):
        apply_balance_correction(rate, factor=0.0)
