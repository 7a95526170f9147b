"""fairopt.measures.bootstrap, the package's one bootstrap: stratified draws stay in their stratum
with the data's stratum sizes, are uniform within it, chunking does not change the draws, and the
percentile interval is numpy's quantile of the finite replicates."""

import numpy as np
import pytest

import fairopt.measures.bootstrap as bootstrap
from fairopt.measures.bootstrap import percentile_interval, resample_chunks, stratum_starts


def _all_rows(codes, n_strata, n_bootstrap, seed):
    chunks = list(resample_chunks(codes, n_strata, n_bootstrap, seed))
    assert [b0 for b0, _, _ in chunks] == sorted(b0 for b0, _, _ in chunks) and chunks[-1][1] == n_bootstrap
    return np.concatenate([rows for _, _, rows in chunks])


def test_draws_stay_in_their_stratum_with_the_data_sizes():
    rng = np.random.default_rng(0)
    codes = rng.integers(0, 3, size=200)
    sizes, starts = stratum_starts(codes, 3)
    rows = _all_rows(codes, 3, 50, seed=1)
    assert rows.shape == (50, 200)
    for g in range(3):
        block = rows[:, starts[g]:starts[g] + sizes[g]]
        assert (codes[block] == g).all()


def test_draws_are_uniform_within_a_stratum():
    codes = np.repeat([0, 1], [10, 30])
    rows = _all_rows(codes, 2, 4000, seed=2)
    counts = np.bincount(rows.ravel(), minlength=40) / 4000  # expected draws of each row per replicate: 1
    assert np.abs(counts - 1.0).max() < 0.1  # sd of a row's mean draw count ~ 1/sqrt(4000) = 0.016


def test_chunking_and_seed(monkeypatch):
    codes = np.zeros(100, dtype=np.int64)
    whole = _all_rows(codes, 1, 30, seed=5)
    monkeypatch.setattr(bootstrap, "CHUNK_ELEMENTS", 700)  # 7 replicates per chunk
    np.testing.assert_array_equal(_all_rows(codes, 1, 30, seed=5), whole)
    assert not np.array_equal(_all_rows(codes, 1, 30, seed=6), whole)


def test_empty_stratum_is_an_error():
    with pytest.raises(ValueError, match="every group needs at least one row"):
        list(resample_chunks(np.array([0, 0, 2]), 3, 5, seed=0))


def test_percentile_interval_against_numpy():
    rng = np.random.default_rng(3)
    draws = rng.normal(size=(500, 2))
    draws[:7, 1] = np.nan
    low, high = percentile_interval(draws, 0.9, sides=2)
    np.testing.assert_allclose([low[0], high[0]], np.quantile(draws[:, 0], [0.05, 0.95]))
    np.testing.assert_allclose([low[1], high[1]], np.quantile(draws[7:, 1], [0.05, 0.95]))
    low4, high4 = percentile_interval(draws, 0.9, sides=4)
    np.testing.assert_allclose([low4[0], high4[0]], np.quantile(draws[:, 0], [0.025, 0.975]))
    assert np.isnan(percentile_interval(np.full((3, 1), np.nan), 0.9)[0]).all()
