"""Tests of fairopt.experiments.significance (Wilcoxon signed-rank comparisons, [DC] App D).

References: scipy.stats.wilcoxon on the hand-paired arrays, and the normal approximation
with continuity correction of [DC] eq (D.2) written out.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
from scipy.stats import norm, rankdata, wilcoxon

from fairopt.experiments import WilcoxonComparison, compare_methods, compare_to_reference, holm_adjust


def _table(n_seeds: int = 4, n_folds: int = 3, shift: float = 0.01, seed: int = 0) -> pd.DataFrame:
    """A compare()-like table: methods base (value NaN), jdcov at two values; train and test rows."""
    rng = np.random.default_rng(seed)
    rows = []
    for s in range(n_seeds):
        for f in range(n_folds):
            base = 0.21 + 0.01 * rng.normal()
            for method, value, rps in [("base", np.nan, base), ("jdcov", 10.0, base + shift + 0.002 * rng.normal()),
                                       ("jdcov", 20.0, base + 2 * shift + 0.002 * rng.normal()),
                                       ("ccdcov", 25.0, base + 0.002 * rng.normal())]:
                for split in ("train", "test"):
                    rows.append({"method": method, "hyperparameter": "lambda", "value": value, "seed": s,
                                 "fold": f, "split": split, "rps": rps + (0.0 if split == "test" else -0.01)})
    return pd.DataFrame(rows)


def test_matches_scipy_on_the_paired_values():
    table = _table()
    test = table[table.split == "test"]
    a = test[(test.method == "jdcov") & (test.value == 10.0)].sort_values(["seed", "fold"])["rps"].to_numpy()
    b = test[test.method == "base"].sort_values(["seed", "fold"])["rps"].to_numpy()
    for alternative in ("two-sided", "greater", "less"):
        result = compare_methods(table, "rps", {"method": "jdcov", "value": 10.0}, "base", alternative=alternative)
        expected = wilcoxon(a, b, alternative=alternative)
        assert isinstance(result, WilcoxonComparison)
        assert result.n_pairs == 12 and result.n_nonzero == 12
        assert result.statistic == pytest.approx(float(expected.statistic))
        assert result.pvalue == pytest.approx(float(expected.pvalue))
        assert result.median_difference == pytest.approx(np.median(a - b))
        assert result.mean_difference == pytest.approx(np.mean(a - b))
    assert compare_methods(table, "rps", ("jdcov", 10.0), ("base", np.nan), by=("method", "value")).pvalue \
        == pytest.approx(float(wilcoxon(a, b).pvalue))
    # a clear shift of 0.01 with noise 0.002 over 12 pairs: every pair positive
    greater = compare_methods(table, "rps", {"method": "jdcov", "value": 10.0}, "base", alternative="greater")
    assert greater.pvalue == pytest.approx(1 / 2**12) and greater.statistic == 78  # W+ = 12 * 13 / 2


def test_normal_approximation_is_the_papers_eq_d2():
    rng = np.random.default_rng(5)
    n = 60
    d = rng.normal(0.1, 1.0, n)
    frame = pd.DataFrame({"method": ["a"] * n + ["b"] * n, "row": list(range(n)) * 2,
                          "rps": np.r_[d, np.zeros(n)]})
    result = compare_methods(frame, "rps", "a", "b", pair_on=("row",), alternative="greater", split=None,
                             wilcoxon_options={"method": "approx", "correction": True})
    ranks = rankdata(np.abs(d))
    w_plus = ranks[d > 0].sum()
    z = (w_plus - n * (n + 1) / 4 - 0.5) / math.sqrt(n * (n + 1) * (2 * n + 1) / 24)
    assert result.pvalue == pytest.approx(norm.sf(z), rel=1e-9)
    assert result.statistic == pytest.approx(w_plus)


def test_all_equal_and_zero_differences():
    table = _table(shift=0.0)
    same = table.copy()
    same.loc[same.method == "ccdcov", "rps"] = same.loc[same.method == "base", "rps"].to_numpy()
    result = compare_methods(same, "rps", "ccdcov", "base")
    assert result.pvalue == 1.0 and result.statistic == 0.0 and result.n_nonzero == 0


def test_errors_for_missing_or_too_few_pairs():
    table = _table()
    with pytest.raises(ValueError, match="several rows share the pair key"):
        compare_methods(table, "rps", "jdcov", "base")  # two lambda values per seed and fold
    partial = table[~((table.method == "base") & (table.seed == 0))]
    with pytest.raises(ValueError, match="appear for only one method"):
        compare_methods(partial, "rps", "ccdcov", "base")
    dropped = compare_methods(partial, "rps", "ccdcov", "base", drop_unpaired=True)
    assert dropped.n_pairs == 9
    few = table[table.seed == 0]
    with pytest.raises(ValueError, match="at least 5 are needed"):
        compare_methods(few[few.fold < 1], "rps", "ccdcov", "base")
    with pytest.raises(ValueError, match="metric"):
        compare_methods(table, "nope", "ccdcov", "base")
    with pytest.raises(ValueError, match="no row of the table"):
        compare_methods(table, "rps", "sqp", "base")
    with pytest.raises(ValueError, match="pair_on"):
        compare_methods(table, "rps", "ccdcov", "base", pair_on=("repeat",))
    with pytest.raises(ValueError, match="alternative"):
        compare_methods(table, "rps", "ccdcov", "base", alternative="bigger")
    nan_table = table.copy()
    nan_table.loc[(nan_table.method == "ccdcov") & (nan_table.split == "test") & (nan_table.seed == 1), "rps"] = np.nan
    with pytest.raises(ValueError, match="non-finite"):
        compare_methods(nan_table, "rps", "ccdcov", "base")


def test_compare_to_reference_table_and_holm():
    table = _table(n_seeds=5, n_folds=2)
    frame = compare_to_reference(table, "rps", ("base", np.nan), by=("method", "value"), alternative="greater")
    assert frame["method"].tolist() == ["jdcov, 10.0", "jdcov, 20.0", "ccdcov, 25.0"]
    assert (frame["reference"] == "base, nan").all() and (frame["n_pairs"] == 10).all()
    single = compare_methods(table, "rps", {"method": "jdcov", "value": 20.0}, {"method": "base"},
                             alternative="greater")
    assert frame.loc[1, "pvalue"] == pytest.approx(single.pvalue)
    np.testing.assert_allclose(frame["pvalue_holm"], holm_adjust(frame["pvalue"]))
    assert frame.loc[0, "pvalue"] < 0.01 and frame.loc[2, "pvalue"] > 0.01
    chosen = compare_to_reference(table, "rps", "base", methods=["ccdcov"], alternative="less")
    assert chosen["method"].tolist() == ["ccdcov"]


def test_holm_adjust_by_hand():
    # sorted 0.01, 0.02, 0.04 with m = 3: 0.03, max(0.03, 0.04) = 0.04, max(0.04, 0.04) = 0.04
    np.testing.assert_allclose(holm_adjust([0.04, 0.01, 0.02]), [0.04, 0.03, 0.04])
    np.testing.assert_allclose(holm_adjust([0.5, 0.6]), [1.0, 1.0])
    with pytest.raises(ValueError, match="pvalues"):
        holm_adjust([0.1, 1.5])
