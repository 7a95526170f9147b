"""Tests of fairopt.measures.jdcov_permutation_test (JdCov mutual-independence test, [DC] App E.1).

The reference statistic is the authors' R package formula (``Jdcov.sq.U`` of
Chakraborty and Zhang's ``jdcov``: ``sum(prod(u.center + c)) / (n(n-3)) - c^d n/(n-3)``,
``u.center`` the negated U-centred distance matrix with a zero diagonal), written out
here with dense matrices; the two-variable case is compared with ``dcor``'s permutation
test, which uses the biased V-statistic.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import torch
from scipy.stats import binomtest, kstest

import fairopt.measures.mutual_independence as mutual
from fairopt.measures import JdCovTestResult, jdcov_permutation_test


def _u_center(v: np.ndarray) -> np.ndarray:
    """``u.center`` of the R package: minus the U-centred Euclidean distance matrix, zero diagonal."""
    m = np.asarray(v, dtype=np.float64).reshape(len(v), -1)
    a = np.sqrt(((m[:, None, :] - m[None, :, :]) ** 2).sum(-1))
    n = a.shape[0]
    r = a.sum(1)
    u = -(a - r[:, None] / (n - 2) - r[None, :] / (n - 2) + a.sum() / ((n - 1) * (n - 2)))
    np.fill_diagonal(u, 0.0)
    return u


def reference_jdcov(variables: list[np.ndarray], c: float = 1.0) -> float:
    """Jdcov.sq.U of the R package ``jdcov`` over all variables (the prediction first)."""
    n, d = len(variables[0]), len(variables)
    product = np.ones((n, n))
    for v in variables:
        product *= _u_center(v) + c
    return float(product.sum() / (n * (n - 3)) - c**d * n / (n - 3))


def reference_null(x: np.ndarray, features: list[np.ndarray], count: int, seed: int, c: float) -> np.ndarray:
    """The documented resampling: resample r permutes feature i by the (r, i)-th draw."""
    rng = np.random.default_rng(seed)
    null = []
    for _ in range(count):
        perms = [rng.permutation(len(x)) for _ in features]
        null.append(reference_jdcov([x] + [f[p] for f, p in zip(features, perms)], c))
    return np.asarray(null)


def _mixed(n: int, rng: np.random.Generator, dependence: float = 0.0):
    sex = rng.integers(0, 2, n).astype(float)  # binary 0/1 as FairData stores it
    race = rng.integers(0, 4, n)
    age = rng.uniform(18, 70, n)
    x = rng.normal(size=n) + dependence * (age - 44) / 15 + dependence * sex
    return x, {"sex": sex, "race": race, "age": age}


@pytest.mark.parametrize("c", [1.0, 0.6])
@pytest.mark.parametrize("case", ["grouped", "dense", "univariate", "dense_multicolumn"])
def test_statistic_and_null_equal_the_reference(case, c):
    rng = np.random.default_rng(7)
    n = 40 if case in ("grouped", "dense") else 120  # at n = 40 a 40-value feature counts as discrete
    x, sens = _mixed(n, rng, dependence=0.3)
    one_hot = np.eye(4)[sens["race"]]
    if case == "grouped":
        sensitive, features = {"sex": sens["sex"], "race": sens["race"]}, [sens["sex"], one_hot]
    elif case == "dense":
        sensitive, features = sens, [sens["sex"], one_hot, sens["age"]]
    elif case == "univariate":
        sensitive, features = {"age": sens["age"]}, [sens["age"]]
    else:  # a two-column continuous feature and a binary one
        z = rng.normal(size=(n, 2))
        sensitive, features = [z, sens["sex"]], [z, sens["sex"]]
    result = jdcov_permutation_test(x, sensitive, n_permutations=15, seed=3, c=c)
    assert isinstance(result, JdCovTestResult) and result.path == case.split("_")[0]
    np.testing.assert_allclose(result.statistic, reference_jdcov([x] + features, c), rtol=1e-10, atol=1e-13)
    null = reference_null(x, features, 15, 3, c)
    np.testing.assert_allclose(result.null_distribution, null, rtol=1e-10, atol=1e-13)
    expected_p = (1 + np.sum(null >= result.statistic - 1e-10)) / 16
    assert result.pvalue == pytest.approx(expected_p)
    assert result.null_mean == pytest.approx(null.mean()) and result.null_std == pytest.approx(null.std(ddof=1))
    assert result.null_quantiles[0.95] == pytest.approx(np.quantile(null, 0.95))


def test_blocked_path_for_large_samples(monkeypatch):
    monkeypatch.setattr(mutual, "DENSE_MAX_N", 10)
    rng = np.random.default_rng(1)
    x, sens = _mixed(120, rng)  # age has more distinct values than the grouped paths take
    result = jdcov_permutation_test(x, sens, n_permutations=4, seed=0)
    assert result.path == "blocked"
    features = [sens["sex"], np.eye(4)[sens["race"]], sens["age"]]
    np.testing.assert_allclose(result.null_distribution, reference_null(x, features, 4, 0, 1.0), rtol=1e-10)


def test_input_forms_agree():
    rng = np.random.default_rng(2)
    x, sens = _mixed(60, rng, dependence=0.5)
    as_dict = jdcov_permutation_test(x, sens, n_permutations=30)
    as_frame = jdcov_permutation_test(torch.tensor(x), pd.DataFrame(sens), n_permutations=30)
    as_list = jdcov_permutation_test(x, [sens["sex"], sens["race"], sens["age"]], n_permutations=30)
    assert as_dict.pvalue == as_frame.pvalue == as_list.pvalue
    assert as_dict.statistic == pytest.approx(as_frame.statistic, rel=1e-12)
    assert as_dict.features == ("sex", "race", "age") and as_list.features == ("s[0]", "s[1]", "s[2]")
    # race as numbers instead of one-hot: a different statistic
    numeric = jdcov_permutation_test(x, sens, n_permutations=30, categorical={"race": False})
    assert numeric.statistic != pytest.approx(as_dict.statistic)


def test_pvalues_are_uniform_under_mutual_independence():
    pvalues = []
    for seed in range(50):
        rng = np.random.default_rng(100 + seed)
        x, sens = _mixed(50, rng)
        pvalues.append(jdcov_permutation_test(x, sens, n_permutations=49, seed=seed).pvalue)
    pvalues = np.asarray(pvalues)
    # discrete p-values k/50: compare with the uniform law, loosely
    assert kstest(pvalues, "uniform").pvalue > 0.001
    rejections = int(np.sum(pvalues <= 0.05))
    assert binomtest(rejections, 50, 0.05).pvalue > 0.001  # about 2.5 of 50 expected


def test_small_pvalue_under_dependence():
    rng = np.random.default_rng(3)
    x, sens = _mixed(200, rng, dependence=1.0)
    result = jdcov_permutation_test(x, sens, n_permutations=199)
    assert result.pvalue == pytest.approx(1 / 200)
    assert result.statistic > result.null_quantiles[0.99]


def test_dependent_sensitive_features_reject_whatever_the_prediction():
    """[DC] sec 4.3.1: the mutual-independence null fails when the features depend on each other."""
    rng = np.random.default_rng(4)
    n = 200
    race = rng.integers(0, 4, n)
    age = 30 + 8 * (race == 0) + rng.normal(0, 5, n)  # age depends on race
    x = rng.normal(size=n)  # independent of both
    assert jdcov_permutation_test(x, {"race": race, "age": age}, n_permutations=199).pvalue < 0.01


def test_two_variables_match_dcor_permutation_test_in_distribution():
    dcor = pytest.importorskip("dcor")
    differences = []
    for seed in range(4):
        rng = np.random.default_rng(seed)
        n = 150
        s = rng.normal(size=n)
        x = 0.12 * s**2 + 0.1 * s + 0.5 * rng.normal(size=n)
        ours = jdcov_permutation_test(x, {"s": s}, n_permutations=1999, seed=seed).pvalue
        theirs = dcor.independence.distance_covariance_test(x, s, num_resamples=1999, random_state=seed).pvalue
        differences.append(ours - theirs)
        codes = rng.integers(0, 3, n).astype(float)  # numeric codes: the same distances as dcor's
        xd = rng.normal(size=n) + 0.25 * (codes == 2)
        ours = jdcov_permutation_test(xd, {"s": codes}, n_permutations=1999, seed=seed).pvalue
        theirs = dcor.independence.distance_covariance_test(xd, codes, num_resamples=1999, random_state=seed).pvalue
        differences.append(ours - theirs)
    # unbiased vs biased statistic and independent resamples: close, not identical
    assert np.max(np.abs(differences)) < 0.08
    assert np.any(np.abs(differences) > 0)


def test_validation_errors():
    x = np.arange(10.0)
    s = {"a": np.arange(10.0)}
    with pytest.raises(ValueError, match="n_permutations"):
        jdcov_permutation_test(x, s, n_permutations=0)
    with pytest.raises(ValueError, match="c:"):
        jdcov_permutation_test(x, s, c=0.0)
    with pytest.raises(ValueError, match="at least one"):
        jdcov_permutation_test(x, {})
    with pytest.raises(ValueError, match="expected a dict"):
        jdcov_permutation_test(x, np.arange(10.0))
    with pytest.raises(ValueError, match="rows but x has 10"):
        jdcov_permutation_test(x, {"a": np.arange(9.0)})
    with pytest.raises(ValueError, match="at least 4"):
        jdcov_permutation_test(x[:3], {"a": x[:3]})
    with pytest.raises(ValueError, match="non-finite"):
        jdcov_permutation_test(np.r_[x[:-1], np.nan], s)
    with pytest.raises(ValueError, match="no sensitive feature named"):
        jdcov_permutation_test(x, s, categorical={"b": True})
    with pytest.raises(ValueError, match="seed"):
        jdcov_permutation_test(x, s, seed=1.5)
