"""HGR-KDE (Mary et al. 2019), checked against a direct (non-separable) evaluation of the
2-D KDE on the grid, against the population value for Gaussian data, and for its
range, symmetry, determinism, limiting cases and gradients."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from scipy.stats import multivariate_normal

from fairopt.measures.hgr import hgr_kde, kde_bandwidth, kde_grid_size


def dense_reference(x, y, damping=1e-10):
    """Mary et al.'s recipe written out directly: the 2-D Gaussian density at every grid
    point from all samples (an (n, B, B) tensor), then the SVD of Q with numpy."""
    x, y = np.asarray(x, float), np.asarray(y, float)
    u, v = (x - x.mean()) / x.std(ddof=1), (y - y.mean()) / y.std(ddof=1)
    n = len(x)
    h = (n * (2 + 2) / 4.0) ** (-1.0 / (2 + 4))
    bins = int(min(50, 5.0 / h))
    grid = np.linspace(-2.5, 2.5, bins)
    ga, gb = np.meshgrid(grid, grid, indexing="ij")
    sq = (u[:, None, None] - ga[None]) ** 2 + (v[:, None, None] - gb[None]) ** 2
    density = np.exp(-sq / (2 * h * h)).mean(axis=0) / (2 * math.pi * h * h) + damping
    p = density / density.sum()
    q = p / np.sqrt(p.sum(axis=1)[:, None] * p.sum(axis=0)[None, :])
    return np.linalg.svd(q, compute_uv=False)[1]


def test_bandwidth_and_grid_follow_the_design():
    assert kde_bandwidth(5000) == pytest.approx(5000 ** (-1 / 6), rel=1e-12)
    assert kde_grid_size(kde_bandwidth(5000)) == 20  # 5 / 0.2418 = 20.7
    assert kde_grid_size(kde_bandwidth(10**7)) == 50  # capped


@pytest.mark.parametrize("seed", [0, 1])
def test_matches_dense_kde_reference(seed):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=300)
    y = np.sin(2 * x) + rng.normal(scale=0.5, size=300)
    assert hgr_kde(x, y) == pytest.approx(dense_reference(x, y), abs=1e-12)


@pytest.mark.parametrize("rho", [0.3, 0.8])
def test_gaussian_sample_matches_smoothed_population_value(rho):
    """For a bivariate normal sample the KDE converges to N(0, [[1+h^2, rho], [rho, 1+h^2]]);
    the grid version of that density gives the value the estimator targets."""
    n = 5000
    rng = np.random.default_rng(3)
    x = rng.normal(size=n)
    y = rho * x + np.sqrt(1 - rho**2) * rng.normal(size=n)
    h = kde_bandwidth(n)
    grid = np.linspace(-2.5, 2.5, kde_grid_size(h))
    points = np.stack(np.meshgrid(grid, grid, indexing="ij"), axis=-1)
    p = multivariate_normal(cov=[[1 + h * h, rho], [rho, 1 + h * h]]).pdf(points)
    p /= p.sum()
    q = p / np.sqrt(p.sum(axis=1)[:, None] * p.sum(axis=0)[None, :])
    population = np.linalg.svd(q, compute_uv=False)[1]
    assert hgr_kde(x, y) == pytest.approx(population, abs=0.02)


def test_independent_samples_give_small_values():
    rng = np.random.default_rng(4)
    value = hgr_kde(rng.normal(size=5000), rng.exponential(size=5000))
    assert 0.0 <= value < 0.1


@pytest.mark.parametrize("f", [lambda x: 2 * x + 1, np.tanh, np.arctan, lambda x: np.exp(x / 2), lambda x: -x])
def test_deterministic_monotone_dependence_gives_values_near_one(f):
    x = np.random.default_rng(5).normal(size=5000)
    value = hgr_kde(x, f(x))
    assert 0.9 < value <= 1.0 + 1e-12


def test_deterministic_symmetric_and_in_unit_interval():
    rng = np.random.default_rng(6)
    x = rng.uniform(size=800)
    y = (x - 0.5) ** 2 + 0.05 * rng.normal(size=800)  # non-monotone dependence
    first, second = hgr_kde(x, y), hgr_kde(x, y)
    assert first == second
    assert hgr_kde(y, x) == pytest.approx(first, abs=1e-12)  # Q is transposed
    assert 0.0 <= first <= 1.0
    assert first > 0.5  # HGR sees the non-linear dependence (Pearson's r is ~0 here)
    assert abs(np.corrcoef(x, y)[0, 1]) < 0.1


def test_constant_input_gives_zero():
    # a constant is only centred: the KDE is a product density and Q has rank one, up to
    # the damping added to empty grid cells (1e-10 on densities of order 1)
    x = np.random.default_rng(7).normal(size=200)
    assert hgr_kde(x, np.full(200, 3.0)) == pytest.approx(0.0, abs=1e-4)


def test_torch_input_matches_numpy_and_is_differentiable():
    rng = np.random.default_rng(8)
    x = rng.normal(size=60)
    y = x + rng.normal(size=60)
    value = hgr_kde(torch.tensor(x), torch.tensor(y))
    assert isinstance(value, torch.Tensor)
    assert float(value) == pytest.approx(hgr_kde(x, y), abs=1e-14)
    yt = torch.tensor(y, requires_grad=True)
    assert torch.autograd.gradcheck(lambda v: hgr_kde(torch.tensor(x), v), (yt,), eps=1e-6, atol=1e-6, fast_mode=True)


def test_rejects_bad_input():
    x = np.arange(10.0)
    with pytest.raises(ValueError, match="length mismatch"):
        hgr_kde(x, x[:-1])
    with pytest.raises(ValueError, match="at least 2 rows"):
        hgr_kde(x[:1], x[:1])
    with pytest.raises(ValueError, match="non-finite"):
        hgr_kde(x, np.where(x == 3, np.inf, x))
    with pytest.raises(ValueError, match="damping"):
        hgr_kde(x, x, damping=0.0)
    with pytest.raises(ValueError, match="1-D"):
        hgr_kde(np.ones((10, 2)), x)
