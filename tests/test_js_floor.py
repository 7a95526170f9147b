"""Tests of the finite-sample floor of the JS divergence (fairopt.measures.js_divergence_floor).

Independent reference: for predictions independent of the cells, ``2 n D_JS`` (nats) is
the G statistic of the bins x cells table, approximately chi-square with (B-1)(C-1)
degrees of freedom, so the floor is about (B-1)(C-1)/(2n).
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from fairopt.measures import JSDivergenceFloor, js_divergence, js_divergence_floor


def test_floor_decreases_with_n_and_matches_the_chi_square_approximation():
    floors = [js_divergence_floor(n, bins=10, cells=2, n_simulations=100, seed=1) for n in (200, 800, 3200)]
    assert all(isinstance(f, JSDivergenceFloor) for f in floors)
    means = [f.mean for f in floors]
    assert means[0] > means[1] > means[2] > 0
    for f in floors:
        assert f.approximation == pytest.approx(9 / (2 * f.n))
        assert f.mean == pytest.approx(f.approximation, rel=0.15)  # Monte Carlo error ~ sqrt(2/9)/10 = 5%
        assert f.quantile_95 > f.mean


def test_floor_grows_with_bins_and_cells_and_follows_the_base():
    few = js_divergence_floor(500, bins=5, cells=2, n_simulations=60)
    many_bins = js_divergence_floor(500, bins=20, cells=2, n_simulations=60)
    many_cells = js_divergence_floor(500, bins=5, cells=[0.4, 0.3, 0.2, 0.1], n_simulations=60)
    assert many_bins.mean > 2 * few.mean and many_cells.mean > 2 * few.mean and many_cells.n_cells == 4
    bits = js_divergence_floor(500, bins=5, cells=2, n_simulations=60, base=2)
    assert bits.mean == pytest.approx(few.mean / math.log(2), rel=1e-12)  # same draws, other unit


def test_floor_uses_the_estimator_itself():
    """One simulation by hand: the same draws through js_divergence."""
    f = js_divergence_floor(300, bins=8, cells=3, n_simulations=1, seed=4)
    rng = np.random.default_rng(4)
    pred = rng.uniform(size=300)
    labels = rng.choice(3, size=300, p=np.full(3, 1 / 3))
    assert f.mean == pytest.approx(js_divergence(pred, labels, bins=8, kinds=["categorical"]), rel=1e-12)


def test_floor_errors():
    with pytest.raises(ValueError, match="cells"):
        js_divergence_floor(100, cells=1)
    with pytest.raises(ValueError, match="cells"):
        js_divergence_floor(100, cells=[1.0, 0.0])
    with pytest.raises(ValueError, match="sampler"):
        js_divergence_floor(100, sampler="cauchy")
    with pytest.raises(ValueError, match="n:"):
        js_divergence_floor(1)
    with pytest.raises(ValueError, match="bins"):
        js_divergence_floor(100, bins=0)
