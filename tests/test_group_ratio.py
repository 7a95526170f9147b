"""fairopt.measures.group.ratio_and_difference, the one home of the group-to-group ratio and gap:
against a per-row Python reference, its NaN rules, and the measures that call it."""

import math

import numpy as np
import pytest

from fairopt.measures.group import disparate_impact, dp_difference, ratio_and_difference


def _reference(row):
    if any(math.isnan(v) for v in row):
        return math.nan, math.nan
    lo, hi = min(row), max(row)
    return (lo / hi if lo >= 0 and hi > 0 else math.nan), hi - lo


def test_against_a_python_reference_along_the_last_axis():
    rng = np.random.default_rng(0)
    values = rng.uniform(-0.2, 1.0, size=(40, 3))
    values[3] = 0.0
    values[5, 1] = np.nan
    values[7, 0] = 0.0
    ratio, difference = ratio_and_difference(values)
    expected = np.array([_reference(list(row)) for row in values])
    np.testing.assert_allclose(ratio, expected[:, 0], equal_nan=True)
    np.testing.assert_allclose(difference, expected[:, 1], equal_nan=True)
    assert np.isnan(ratio[3]) and difference[3] == 0.0 and np.isnan(ratio[5])


def test_the_measures_use_it():
    pred = np.array([1, 0, 0, 1, 1, 1, 0, 1])
    s = np.array([0, 0, 0, 0, 1, 1, 1, 1])
    assert disparate_impact(pred, s) == pytest.approx(0.5 / 0.75)
    assert dp_difference(pred, s) == pytest.approx(0.25)
    with pytest.warns(UserWarning, match="0/0"):
        assert math.isnan(disparate_impact(np.zeros(8), s))
    assert float(ratio_and_difference([0.5, 0.75])[0]) == disparate_impact(pred, s)
