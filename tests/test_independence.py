"""Tests of fairopt.measures.independence.independence_test.

The permutation p-values are compared with a brute-force loop that permutes the rows of
``s`` with the same generator and recomputes dCorr~^2 by explicit U-centring (O(n^2)).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from scipy.stats import chi2

from fairopt.measures.dcov import dcorr
from fairopt.measures.independence import TIE_TOLERANCE, IndependenceTestResult, independence_test


def _u_centred_distances(v: np.ndarray) -> np.ndarray:
    m = np.asarray(v, dtype=np.float64).reshape(len(v), -1)
    a = np.sqrt(((m[:, None, :] - m[None, :, :]) ** 2).sum(-1))
    n = a.shape[0]
    rows = a.sum(1)
    centred = a - rows[:, None] / (n - 2) - rows[None, :] / (n - 2) + a.sum() / ((n - 1) * (n - 2))
    np.fill_diagonal(centred, 0.0)
    return centred


def brute_force_dcorr(x: np.ndarray, s: np.ndarray) -> float:
    a, b = _u_centred_distances(x), _u_centred_distances(s)
    return float((a * b).sum() / np.sqrt((a * a).sum() * (b * b).sum()))


def brute_force_permutation_pvalue(x: np.ndarray, s: np.ndarray, n_resamples: int, seed: int) -> float:
    observed = brute_force_dcorr(x, s)
    rng = np.random.default_rng(seed)
    null = [brute_force_dcorr(x, s[rng.permutation(len(x))]) for _ in range(n_resamples)]
    return (1 + sum(value >= observed - TIE_TOLERANCE for value in null)) / (1 + n_resamples)


@pytest.fixture
def rng() -> np.random.Generator:
    return np.random.default_rng(2024)


def test_chi2_pvalue_formula_and_power(rng):
    n = 400
    s = rng.integers(0, 3, size=n).astype(float)
    independent = rng.normal(size=n)
    dependent = independent + 0.4 * s
    result = independence_test(dependent, s)
    assert isinstance(result, IndependenceTestResult)
    assert result.method == "chi2" and result.n_resamples is None
    np.testing.assert_allclose(result.statistic, brute_force_dcorr(dependent, s), rtol=1e-9)
    np.testing.assert_allclose(result.pvalue, chi2.sf(n * result.statistic + 1, 1), rtol=1e-12)
    assert result.pvalue < 1e-6
    null_result = independence_test(independent, s)
    assert null_result.pvalue > 0.1
    np.testing.assert_allclose(null_result.statistic, dcorr(independent, s), rtol=1e-12)


@pytest.mark.parametrize("kind", ["grouped", "univariate", "multivariate"])
def test_permutation_matches_brute_force(rng, kind):
    n = 30
    if kind == "grouped":
        s = rng.integers(0, 3, size=n).astype(float)
    elif kind == "univariate":
        s = rng.normal(size=n)
    else:
        s = rng.normal(size=(n, 2))
    x = rng.normal(size=n) + 0.3 * np.asarray(s).reshape(n, -1)[:, 0]
    path = "univariate" if kind == "univariate" else "auto"  # auto: grouped / blocked here
    result = independence_test(x, s, method="permutation", n_resamples=199, seed=7, dcov_method=path)
    assert result.method == "permutation" and result.n_resamples == 199
    np.testing.assert_allclose(result.statistic, brute_force_dcorr(x, s), rtol=1e-9)
    assert result.pvalue == brute_force_permutation_pvalue(x, s, 199, seed=7)


def test_permutation_is_deterministic_and_has_power(rng):
    n = 200
    s = (rng.random(n) < 0.5).astype(float)
    independent = rng.normal(size=n)
    dependent = independent + 0.8 * s
    first = independence_test(independent, s, method="permutation", n_resamples=299, seed=1)
    assert first == independence_test(independent, s, method="permutation", n_resamples=299, seed=1)
    assert first.pvalue > 0.1
    strong = independence_test(dependent, s, method="permutation", n_resamples=299, seed=1)
    assert strong.pvalue == 1 / 300  # no permutation reaches the observed statistic
    other = [independence_test(independent, s, method="permutation", n_resamples=299, seed=k).pvalue
             for k in range(2, 6)]
    assert len(set(other + [first.pvalue])) > 1  # the seed changes the resamples


def test_torch_input_and_degenerate_cases(rng):
    n = 50
    s = rng.normal(size=n)
    x = torch.tensor(rng.normal(size=n) + s, requires_grad=True)
    result = independence_test(x, s)
    np.testing.assert_allclose(result.statistic, brute_force_dcorr(x.detach().numpy(), s), rtol=1e-9)
    for method in ("chi2", "permutation"):
        constant = independence_test(np.ones(n), s, method=method, n_resamples=9)
        assert constant.statistic == 0.0 and constant.pvalue == 1.0


def test_invalid_arguments(rng):
    x, s = rng.normal(size=20), rng.normal(size=20)
    with pytest.raises(ValueError, match="method: expected one of"):
        independence_test(x, s, method="hsic")
    with pytest.raises(ValueError, match="n_resamples"):
        independence_test(x, s, method="permutation", n_resamples=0)
    with pytest.raises(ValueError, match="seed"):
        independence_test(x, s, method="permutation", seed="one")
    with pytest.raises(ValueError, match="dcov_method"):
        independence_test(x, s, dcov_method="fastest")
    with pytest.raises(ValueError, match="s: has 19 rows"):
        independence_test(x, s[:19])
