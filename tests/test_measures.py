"""Tests of fairopt.measures: hand-computed examples, independent brute-force references
(loops, pandas groupby, scikit-learn, scipy), torch/numpy agreement, finite-difference
gradients of the FaUCI metrics and input validation."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pandas as pd
import pytest
import torch
from scipy.spatial.distance import jensenshannon
from scipy.stats import entropy, poisson
from sklearn.metrics import accuracy_score, brier_score_loss, mean_poisson_deviance, mean_squared_error, r2_score

from fairopt.exceptions import FairnessWarning, UndefinedMeasureWarning
from fairopt.measures import (
    accuracy,
    bin_equal_width,
    bin_quantiles,
    disparate_impact,
    dp_difference,
    encode_groups,
    equal_impact,
    equalised_odds,
    gdi,
    gdp,
    geo,
    group_means,
    group_rates,
    intersection_cells,
    js_divergence,
    mse,
    poisson_deviance,
    poisson_rps,
    r2,
    rps,
    uf,
    wdi,
    wdp,
    weo,
)

TOL = 1e-12

# A small example used by several hand computations:
# group a: rows 0-2, predictions 1, 0, 1 (rate 2/3); group b: rows 3-5, predictions 1, 0, 0 (rate 1/3).
HAND_PRED = np.array([1, 0, 1, 1, 0, 0])
HAND_S = np.array(["a", "a", "a", "b", "b", "b"])
HAND_Y = np.array([1, 0, 1, 0, 1, 1])


def random_case(n: int = 400, k: int = 4, seed: int = 0):
    rng = np.random.default_rng(seed)
    s = rng.choice([f"g{j}" for j in range(k)], size=n, p=np.arange(1, k + 1) / np.arange(1, k + 1).sum())
    y = rng.integers(0, 2, n)
    prob = rng.uniform(0.02, 0.98, n)
    hard = (rng.uniform(size=n) < prob).astype(int)
    return s, y, prob, hard


# ------------------------------------------------------------------------------------
# performance
# ------------------------------------------------------------------------------------


class TestPerformance:
    def test_accuracy_hand_and_sklearn(self):
        assert accuracy([1, 0, 1, 1], [1, 1, 1, 0]) == pytest.approx(0.5, abs=TOL)
        _, y, _, hard = random_case()
        assert accuracy(y, hard) == pytest.approx(accuracy_score(y, hard), abs=TOL)
        assert accuracy(torch.tensor(y, dtype=torch.float32), torch.tensor(hard)) == pytest.approx(accuracy_score(y, hard), abs=TOL)

    def test_accuracy_rejects_probabilities(self):
        with pytest.raises(ValueError, match="pred.*hard"):
            accuracy([1, 0], [0.7, 0.2])

    def test_mse_r2_vs_sklearn(self):
        rng = np.random.default_rng(1)
        y = rng.normal(size=200)
        p = y + rng.normal(scale=0.5, size=200)
        assert mse(y, p) == pytest.approx(mean_squared_error(y, p), abs=TOL)
        assert r2(y, p) == pytest.approx(r2_score(y, p), abs=TOL)
        # hand: y = (1, 2, 3), pred = (1, 2, 4): SS_res = 1, SS_tot = 2
        assert r2([1, 2, 3], [1, 2, 4]) == pytest.approx(0.5, abs=TOL)
        assert mse([1, 2, 3], [1, 2, 4]) == pytest.approx(1 / 3, abs=TOL)

    def test_r2_constant_target_follows_sklearn(self):
        assert r2([2, 2, 2], [2, 2, 2]) == r2_score([2, 2, 2], [2, 2, 2]) == 1.0
        assert r2([2, 2, 2], [1, 2, 2]) == r2_score([2, 2, 2], [1, 2, 2]) == 0.0

    def test_poisson_deviance_hand(self):
        # unit deviances: y=0 -> 2*mu = 2; y=1 -> 0; y=2 -> 2*(2 log 2 - 1)
        expected = (2.0 + 0.0 + 2 * (2 * math.log(2) - 1)) / 3
        assert poisson_deviance([0, 1, 2], [1, 1, 1]) == pytest.approx(expected, abs=TOL)

    def test_poisson_deviance_vs_sklearn_and_loop(self):
        rng = np.random.default_rng(2)
        mu = rng.uniform(0.05, 3, 300)
        y = rng.poisson(mu)
        assert poisson_deviance(y, mu) == pytest.approx(mean_poisson_deviance(y, mu), rel=1e-12)
        loop = np.mean([2 * ((yi * math.log(yi / mi) if yi > 0 else 0.0) - (yi - mi)) for yi, mi in zip(y, mu)])
        assert poisson_deviance(y, mu) == pytest.approx(loop, rel=1e-12)

    def test_poisson_deviance_exposure(self):
        rng = np.random.default_rng(3)
        e = rng.uniform(0.1, 1.0, 100)
        rate = rng.uniform(0.1, 2, 100)
        y = rng.poisson(e * rate)
        # exposure multiplies the rate into the expected count
        assert poisson_deviance(y, rate, exposure=e) == pytest.approx(poisson_deviance(y, e * rate), rel=1e-12)
        # same as the exposure-weighted frequency deviance rescaled by sum(e)/n
        weighted = mean_poisson_deviance(y / e, rate, sample_weight=e) * e.sum() / e.size
        assert poisson_deviance(y, rate, exposure=e) == pytest.approx(weighted, rel=1e-10)

    def test_poisson_deviance_validation(self):
        with pytest.raises(ValueError, match="mu"):
            poisson_deviance([1, 2], [1.0, 0.0])
        with pytest.raises(ValueError, match="^y: "):
            poisson_deviance([-1, 2], [1.0, 1.0])
        with pytest.raises(ValueError, match="exposure"):
            poisson_deviance([1, 2], [1.0, 1.0], exposure=[1.0, 0.0])
        with pytest.raises(ValueError, match="length mismatch"):
            poisson_deviance([1, 2], [1.0, 1.0, 1.0])
        assert poisson_deviance([0, 1], [0.0, 1.0]) == pytest.approx(0.0, abs=TOL)  # mu = 0 allowed where y = 0

    def test_binary_rps_is_brier(self):
        _, y, prob, _ = random_case()
        assert rps(y, prob) == pytest.approx(brier_score_loss(y, prob), abs=TOL)
        # hand: E.4 with categories {0, 1}: (P(Y<=0) - 1[y<=0])^2 = ((1-p) - (1-y))^2
        assert rps([1, 0], [0.8, 0.3]) == pytest.approx((0.2**2 + 0.3**2) / 2, abs=TOL)

    def test_multiclass_rps_vs_loop(self):
        rng = np.random.default_rng(4)
        prob = rng.dirichlet(np.ones(4), size=50)
        y = rng.integers(0, 4, 50)
        loop = []
        for i in range(50):
            cum_p, cum_o, total = 0.0, 0.0, 0.0
            for k in range(4):
                cum_p += prob[i, k]
                cum_o += float(y[i] == k)
                total += (cum_p - cum_o) ** 2
            loop.append(total)
        assert rps(y, prob) == pytest.approx(np.mean(loop), abs=1e-12)
        with pytest.raises(ValueError, match="prob.*sum"):
            rps([0, 1], np.array([[0.5, 0.6], [0.5, 0.5]]))

    def test_poisson_rps_hand(self):
        # y = 0, mean 1, K = 2: categories 0, 1, ">=2"; F(0) = e^-1, F(1) = 2 e^-1
        expected = (math.exp(-1) - 1) ** 2 + (2 * math.exp(-1) - 1) ** 2
        assert poisson_rps([0], [1.0], K=2) == pytest.approx(expected, abs=TOL)
        # y = 3 > K = 2 is censored to the last category: both terms have O = 0
        expected = math.exp(-2) + 4 * math.exp(-2)
        assert poisson_rps([3], [1.0], K=2) == pytest.approx(expected, abs=TOL)

    def test_poisson_rps_vs_lumped_matrix(self):
        rng = np.random.default_rng(5)
        rate = rng.uniform(0.05, 2.5, 120)
        y = rng.poisson(rate)
        K = 6
        pmf = poisson.pmf(np.arange(K)[None, :], rate[:, None])
        matrix = np.column_stack([pmf, 1.0 - pmf.sum(axis=1)])  # last column: P(N >= K)
        assert poisson_rps(y, rate, K=K) == pytest.approx(rps(np.minimum(y, K), matrix), abs=1e-12)

    def test_poisson_rps_default_truncation_is_untruncated(self):
        rng = np.random.default_rng(6)
        rate = rng.uniform(0.05, 4.0, 80)
        y = rng.poisson(rate)
        assert poisson_rps(y, rate) == pytest.approx(poisson_rps(y, rate, K=200), abs=1e-10)
        e = rng.uniform(0.2, 1.0, 80)
        assert poisson_rps(y, rate, exposure=e) == pytest.approx(poisson_rps(y, rate * e, K=200), abs=1e-10)

    def test_poisson_rps_validation(self):
        with pytest.raises(ValueError, match="^y: .*integer"):
            poisson_rps([0.5], [1.0])
        with pytest.raises(ValueError, match="^K: "):
            poisson_rps([1], [1.0], K=0)
        with pytest.raises(ValueError, match="rate"):
            poisson_rps([1], [-1.0])

    @pytest.mark.parametrize("bad", [[0.0, float("nan")], [0.0, float("inf")]])
    def test_nan_rejected(self, bad):
        with pytest.raises(ValueError, match="pred.*non-finite"):
            mse([0.0, 1.0], bad)
        with pytest.raises(ValueError, match="y_true.*non-finite"):
            r2(bad, [0.0, 1.0])

    def test_empty_rejected(self):
        with pytest.raises(ValueError, match="y_true.*empty"):
            mse([], [])


# ------------------------------------------------------------------------------------
# group rates on hard predictions
# ------------------------------------------------------------------------------------


def brute_rates(pred, s, rows=None):
    frame = pd.DataFrame({"p": pred, "s": s})
    if rows is not None:
        frame = frame[rows]
    return frame.groupby("s")["p"].mean()


class TestGroupMeasures:
    def test_hand_example(self):
        assert group_rates(HAND_PRED, HAND_S) == pytest.approx({"a": 2 / 3, "b": 1 / 3}, abs=TOL)
        assert disparate_impact(HAND_PRED, HAND_S) == pytest.approx(0.5, abs=TOL)
        assert dp_difference(HAND_PRED, HAND_S) == pytest.approx(1 / 3, abs=TOL)
        # y = 1 rows: a -> (1, 1), b -> (0, 0)
        assert equal_impact(HAND_PRED, HAND_S, HAND_Y) == pytest.approx(0.0, abs=TOL)
        value, parts = equalised_odds(HAND_PRED, HAND_S, HAND_Y, return_parts=True)
        assert parts == pytest.approx({0: 1.0, 1: 1.0}, abs=TOL)
        assert value == pytest.approx(1.0, abs=TOL)

    def test_second_hand_example_binary(self):
        pred = [1, 1, 0, 0, 1, 0, 0, 0]
        s = [0, 0, 0, 0, 1, 1, 1, 1]  # P0 = 1/2, P1 = 1/4
        y = [1, 0, 1, 0, 1, 1, 0, 0]  # TPR: s0 1/2, s1 1/2; FPR: s0 1/2, s1 0
        assert disparate_impact(pred, s) == pytest.approx(min(0.25 / 0.5, 0.5 / 0.25), abs=TOL)
        assert equal_impact(pred, s, y) == pytest.approx(1.0, abs=TOL)
        assert equalised_odds(pred, s, y, return_parts=True)[1] == pytest.approx({0: 0.5, 1: 0.0}, abs=TOL)

    def test_vs_pandas_groupby(self):
        s, y, _, hard = random_case(n=500, k=4, seed=7)
        rates = brute_rates(hard, s)
        assert group_rates(hard, s) == pytest.approx(rates.to_dict(), abs=TOL)
        assert disparate_impact(hard, s) == pytest.approx(rates.min() / rates.max(), abs=TOL)
        assert dp_difference(hard, s) == pytest.approx(rates.max() - rates.min(), abs=TOL)
        pos = brute_rates(hard, s, y == 1)
        assert equal_impact(hard, s, y) == pytest.approx(pos.min() / pos.max(), abs=TOL)
        gaps = {v: (lambda r: r.max() - r.min())(brute_rates(hard, s, y == v)) for v in (0, 1)}
        value, parts = equalised_odds(hard, s, y, return_parts=True)
        assert parts == pytest.approx(gaps, abs=TOL)
        assert value == pytest.approx(max(gaps.values()), abs=TOL)

    def test_torch_matches_numpy(self):
        s, y, _, hard = random_case(n=200, k=3, seed=8)
        codes, _ = encode_groups(s)
        for fn, args in [(disparate_impact, ()), (dp_difference, ()), (equal_impact, (y,)), (equalised_odds, (y,))]:
            a = fn(hard, s, *args)
            b = fn(torch.tensor(hard, dtype=torch.float32), torch.tensor(codes), *[torch.tensor(x) for x in args])
            assert isinstance(b, float)
            assert a == pytest.approx(b, abs=1e-12)

    def test_zero_rate_conventions(self):
        # 0/0 (no group has a positive prediction) used to read 1.0, "perfectly fair": it is
        # undefined, so NaN with a warning naming the measure (tested in test_zero_over_zero_*)
        with pytest.warns(UndefinedMeasureWarning, match="^disparate_impact: no group has positive predictions"):
            assert math.isnan(disparate_impact([0, 0, 0, 0], [0, 0, 1, 1]))
        assert disparate_impact([0, 0, 1, 0], [0, 0, 1, 1]) == 0.0
        assert dp_difference([0, 0, 0, 0], [0, 0, 1, 1]) == 0.0
        assert disparate_impact([1, 1, 1, 1], [0, 0, 1, 1]) == 1.0

    def test_zero_over_zero_ratios_are_nan_with_a_warning(self):
        """Regression: disparate and equal impact of predictions without a positive (0/0)
        were 1.0; they are NaN, with an UndefinedMeasureWarning (a FairnessWarning) that
        names the measure and says that no group has positive predictions."""
        with pytest.warns(FairnessWarning) as caught:
            di = disparate_impact(np.zeros(6), ["a", "b", "c", "a", "b", "c"])
            ei = equal_impact([0, 0, 1, 0], [0, 1, 0, 1], [1, 1, 0, 1])  # positives only where y = 0
        assert math.isnan(di) and math.isnan(ei)
        messages = [str(w.message) for w in caught]
        assert all(w.category is UndefinedMeasureWarning for w in caught) and len(messages) == 2
        assert messages[0].startswith("disparate_impact: no group has positive predictions")
        assert messages[1].startswith("equal_impact: no group has positive predictions among its rows with y_true = 1")
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # defined ratios do not warn
            assert equal_impact([1, 0, 1, 0], [0, 1, 0, 1], [1, 1, 1, 1]) == 0.0

    def test_labels_any_hashable(self):
        rates = group_rates([1, 0, 1, 1], pd.Series(["x", "y", "y", "x"], dtype="category"))
        assert rates == pytest.approx({"x": 1.0, "y": 0.5}, abs=TOL)
        assert list(group_rates([1, 0], [True, False])) == [False, True]

    def test_group_means(self):
        assert group_means([1.0, 3.0, -2.0], ["u", "u", "v"]) == pytest.approx({"u": 2.0, "v": -2.0}, abs=TOL)

    def test_single_group_names_sensitive(self):
        with pytest.raises(ValueError, match="^sensitive: found 1 group"):
            disparate_impact([1, 0, 1], [1, 1, 1])
        with pytest.raises(ValueError, match="^sensitive: "):
            dp_difference([1, 0, 1], ["a", "a", "a"])

    def test_length_mismatch(self):
        with pytest.raises(ValueError, match="length mismatch.*sensitive"):
            disparate_impact([1, 0, 1], [0, 1])
        with pytest.raises(ValueError, match="length mismatch.*y_true"):
            equal_impact([1, 0, 1, 0], [0, 1, 0, 1], [1, 1])

    def test_invalid_values(self):
        with pytest.raises(ValueError, match="^pred: .*0/1"):
            disparate_impact([0.3, 1], [0, 1])
        with pytest.raises(ValueError, match="^pred: .*non-finite"):
            disparate_impact([float("nan"), 1], [0, 1])
        with pytest.raises(ValueError, match="^sensitive: missing value"):
            disparate_impact([0, 1, 1], [0, 1, float("nan")])
        with pytest.raises(ValueError, match="^sensitive: missing value"):
            disparate_impact([0, 1, 1], ["a", None, "b"])
        with pytest.raises(ValueError, match="^y_true: .*0/1"):
            equalised_odds([0, 1], [0, 1], [2, 1])
        with pytest.raises(ValueError, match="^y_true: group 'b' .*y_true = 1"):
            equal_impact([0, 1, 1, 0], ["a", "a", "b", "b"], [1, 0, 0, 0])


# ------------------------------------------------------------------------------------
# FaUCI metrics
# ------------------------------------------------------------------------------------


def brute_fauci(pred, groups, y=None, weights="uniform"):
    """Direct transcription of [FU] eq. 5, 8, 10 with loops over the groups."""
    labels = sorted(set(groups))
    n = len(pred)
    if weights == "uniform":
        w = {a: 1 / len(labels) for a in labels}
    elif weights == "proportional":
        w = {a: sum(g == a for g in groups) / n for a in labels}
    else:
        w = weights
    mean = lambda rows: float(np.mean([pred[i] for i in rows]))  # noqa: E731
    all_rows = range(n)
    dp = di = eo = 0.0
    for a in labels:
        inside = [i for i in all_rows if groups[i] == a]
        outside = [i for i in all_rows if groups[i] != a]
        dp += w[a] * abs(mean(inside) - mean(all_rows))
        m_in, m_out = mean(inside), mean(outside)
        di += w[a] * (1.0 if max(m_in, m_out) == 0 else min(m_in, m_out) / max(m_in, m_out))
        if y is not None:
            for v in (0, 1):
                cls = [i for i in all_rows if y[i] == v]
                both = [i for i in cls if groups[i] == a]
                if both:
                    eo += w[a] * abs(mean(both) - mean(cls))
    return dp, di, eo


def brute_bins(a, n_bins):
    """Equal-width bin of each value by explicit interval tests (last bin closed)."""
    lo, hi = float(np.min(a)), float(np.max(a))
    width = (hi - lo) / n_bins
    out = []
    for v in a:
        j = int((v - lo) // width)
        out.append(min(j, n_bins - 1))
    return np.array(out)


class TestFauci:
    def test_hand_example(self):
        # overall mean 1/2; group means 2/3 and 1/3
        assert wdp(HAND_PRED, HAND_S) == pytest.approx(1 / 6, abs=TOL)
        assert wdi(HAND_PRED, HAND_S) == pytest.approx(0.5, abs=TOL)
        # y=0: overall 1/2, a 0, b 1; y=1: overall 1/2, a 1, b 0 -> each group 1/2 + 1/2
        assert weo(HAND_PRED, HAND_S, HAND_Y) == pytest.approx(1.0, abs=TOL)

    def test_binary_identities(self):
        rng = np.random.default_rng(9)
        s = (rng.uniform(size=300) < 0.3).astype(int)
        prob = rng.uniform(size=300)
        p0, p1 = prob[s == 0].mean(), prob[s == 1].mean()
        pi1 = s.mean()
        assert wdp(prob, s) == pytest.approx(abs(p0 - p1) / 2, abs=1e-12)
        assert wdp(prob, s, weights="proportional") == pytest.approx(2 * pi1 * (1 - pi1) * abs(p0 - p1), abs=1e-12)
        for weights in ("uniform", "proportional", {0: 0.9, 1: 0.1}):
            assert wdi(prob, s, weights=weights) == pytest.approx(min(p0 / p1, p1 / p0), abs=1e-12)

    @pytest.mark.parametrize("weights", ["uniform", "proportional", {"g0": 0.1, "g1": 0.2, "g2": 0.3, "g3": 0.4}])
    def test_vs_brute_force(self, weights):
        s, y, prob, _ = random_case(n=120, k=4, seed=10)
        dp, di, eo = brute_fauci(list(prob), list(s), list(y), weights)
        assert wdp(prob, s, weights=weights) == pytest.approx(dp, abs=1e-12)
        assert wdi(prob, s, weights=weights) == pytest.approx(di, abs=1e-12)
        assert weo(prob, s, y, weights=weights) == pytest.approx(eo, abs=1e-12)

    def test_sequence_weights_align_with_sorted_labels(self):
        s, y, prob, _ = random_case(n=120, k=3, seed=11)
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # no group is empty: no FairnessWarning
            assert wdp(prob, s, weights=[0.1, 0.2, 0.7]) == pytest.approx(
                wdp(prob, s, weights={"g0": 0.1, "g1": 0.2, "g2": 0.7}), abs=TOL
            )

    def test_weo_skips_missing_pairs(self):
        # group c has no y=0 row: only its y=1 term counts
        pred = np.array([0.2, 0.6, 0.4, 0.8, 0.9])
        s = np.array(["a", "a", "b", "b", "c"])
        y = np.array([0, 1, 0, 1, 1])
        m0, m1 = (0.2 + 0.4) / 2, (0.6 + 0.8 + 0.9) / 3
        expected = (abs(0.2 - m0) + abs(0.6 - m1) + abs(0.4 - m0) + abs(0.8 - m1) + abs(0.9 - m1)) / 3
        assert weo(pred, s, y) == pytest.approx(expected, abs=TOL)

    @pytest.mark.parametrize("n_bins", [2, 5, 10])
    def test_generalised_vs_brute_force(self, n_bins):
        rng = np.random.default_rng(12)
        age = rng.uniform(18, 90, 150)
        y = rng.integers(0, 2, 150)
        prob = rng.uniform(size=150)
        bins = brute_bins(age, n_bins)
        counts = np.bincount(np.searchsorted(np.unique(bins), bins))
        dens = {b: c / 150 for b, c in zip(np.unique(bins), counts)}
        dp, di, eo = brute_fauci(list(prob), list(bins), list(y), dens)
        assert gdp(prob, age, bins=n_bins) == pytest.approx(dp, abs=1e-12)
        assert gdi(prob, age, bins=n_bins) == pytest.approx(di, abs=1e-12)
        assert geo(prob, age, y, bins=n_bins) == pytest.approx(eo, abs=1e-12)
        dp_u, di_u, eo_u = brute_fauci(list(prob), list(bins), list(y), "uniform")
        assert gdp(prob, age, bins=n_bins, weights="uniform") == pytest.approx(dp_u, abs=1e-12)
        assert geo(prob, age, y, bins=n_bins, weights="uniform") == pytest.approx(eo_u, abs=1e-12)

    def test_equal_width_bins_match_numpy_histogram(self):
        rng = np.random.default_rng(13)
        a = rng.normal(size=1000)
        codes, edges = bin_equal_width(a, 7)
        hist, np_edges = np.histogram(a, bins=7)
        np.testing.assert_allclose(edges, np_edges, rtol=0, atol=1e-12)
        np.testing.assert_array_equal(np.bincount(codes, minlength=7), hist)
        codes2, _ = bin_equal_width([-10.0, 0.0, 10.0], [-1.0, 0.5, 1.0])
        np.testing.assert_array_equal(codes2, [0, 0, 1])  # outside values go to the end bins

    def test_user_bin_weights_and_empty_bins(self):
        a = np.array([0.0, 0.1, 0.2, 0.9, 1.0, 1.0])  # 3 bins: [0, 1/3) 3 rows, middle empty, last 3 rows
        prob = np.array([0.1, 0.2, 0.3, 0.7, 0.8, 0.9])
        with pytest.warns(FairnessWarning, match="weights"):
            value = gdp(prob, a, bins=3, weights=[0.25, 0.5, 0.25])
        # middle bin dropped, remaining weights rescaled to 1/2, 1/2
        assert value == pytest.approx(0.5 * abs(0.2 - 0.5) + 0.5 * abs(0.8 - 0.5), abs=TOL)
        assert gdp(prob, a, bins=3) == pytest.approx(value, abs=TOL)  # density weights here are 1/2, 1/2

    def test_generalised_density_equals_weighted_on_bins(self):
        rng = np.random.default_rng(14)
        age = rng.gamma(3.0, 10.0, 200)
        prob = rng.uniform(size=200)
        codes, _ = bin_equal_width(age, 8)
        assert gdi(prob, age, bins=8) == pytest.approx(wdi(prob, codes, weights="proportional"), abs=TOL)

    @pytest.mark.parametrize("name", ["wdp", "wdi", "weo", "gdp", "gdi", "geo"])
    def test_torch_matches_numpy_and_keeps_graph(self, name):
        fn = {"wdp": wdp, "wdi": wdi, "weo": weo, "gdp": gdp, "gdi": gdi, "geo": geo}[name]
        rng = np.random.default_rng(15)
        s = rng.integers(0, 3, 90) if name[0] == "w" else rng.uniform(0, 1, 90)
        y = rng.integers(0, 2, 90)
        prob = rng.uniform(0.05, 0.95, 90)
        extra = (y,) if name.endswith("eo") else ()
        expected = fn(prob, s, *extra)
        assert isinstance(expected, float)
        t = torch.tensor(prob, dtype=torch.float64, requires_grad=True)
        got = fn(t, torch.tensor(s), *[torch.tensor(e) for e in extra])
        assert isinstance(got, torch.Tensor) and got.dim() == 0 and got.requires_grad
        assert float(got.detach()) == pytest.approx(expected, abs=1e-12)
        got32 = fn(t.detach().float(), s, *extra)
        assert got32.dtype == torch.float32 and float(got32) == pytest.approx(expected, abs=1e-5)

    @pytest.mark.parametrize("name", ["wdp", "wdi", "weo", "gdp", "gdi", "geo"])
    def test_gradient_vs_finite_differences(self, name):
        fn = {"wdp": wdp, "wdi": wdi, "weo": weo, "gdp": gdp, "gdi": gdi, "geo": geo}[name]
        rng = np.random.default_rng(16)
        n = 40
        s = rng.integers(0, 3, n) if name[0] == "w" else rng.uniform(0, 1, n)
        y = rng.integers(0, 2, n)
        extra = (y,) if name.endswith("eo") else ()
        kwargs = {"bins": 4} if name[0] == "g" else {"weights": "proportional"}
        x = torch.tensor(rng.uniform(0.1, 0.9, n), dtype=torch.float64, requires_grad=True)
        (grad,) = torch.autograd.grad(fn(x, s, *extra, **kwargs), x)
        h = 1e-6
        fd = np.empty(n)
        base = x.detach().numpy()
        for i in range(n):
            up, down = base.copy(), base.copy()
            up[i] += h
            down[i] -= h
            fd[i] = (fn(up, s, *extra, **kwargs) - fn(down, s, *extra, **kwargs)) / (2 * h)
        np.testing.assert_allclose(grad.numpy(), fd, rtol=1e-6, atol=1e-7)
        assert np.abs(fd).max() > 1e-3  # the metric does depend on pred

    def test_wdi_zero_means(self):
        assert wdi([0.0, 0.0, 0.0, 0.0], [0, 0, 1, 1]) == 1.0
        assert wdi([0.0, 0.0, 0.5, 0.5], [0, 0, 1, 1]) == 0.0
        t = torch.tensor([0.0, 0.0, 0.0, 0.0], requires_grad=True)
        (g,) = torch.autograd.grad(wdi(t, [0, 0, 1, 1]), t)
        assert torch.isfinite(g).all()

    def test_validation(self):
        with pytest.raises(ValueError, match="^pred: .*\\[0, 1\\]"):
            wdp([0.5, 1.5], [0, 1])
        with pytest.raises(ValueError, match="^sensitive: found 1 group"):
            wdp([0.5, 0.2], [1, 1])
        with pytest.raises(ValueError, match="^sensitive: found 1 group"):
            gdp([0.5, 0.2], [3.0, 3.0])
        with pytest.raises(ValueError, match="^weights: must sum to 1"):
            wdp([0.5, 0.2], [0, 1], weights=[0.5, 0.6])
        with pytest.raises(ValueError, match="^weights: expected 2 weights"):
            wdp([0.5, 0.2], [0, 1], weights=[0.5, 0.25, 0.25])
        with pytest.raises(ValueError, match="^weights: no weight given for group 1"):
            wdp([0.5, 0.2], [0, 1], weights={0: 1.0})
        with pytest.raises(ValueError, match="^weights: expected 'uniform'"):
            wdp([0.5, 0.2], [0, 1], weights="equal")
        with pytest.raises(ValueError, match="^weights: expected finite non-negative"):
            wdp([0.5, 0.2], [0, 1], weights=[1.5, -0.5])
        with pytest.raises(ValueError, match="^bins: "):
            gdp([0.5, 0.2], [0.0, 1.0], bins=0)
        with pytest.raises(ValueError, match="length mismatch"):
            weo([0.5, 0.2], [0, 1], [1, 0, 1])
        with pytest.raises(ValueError, match="^pred: .*non-finite"):
            wdp(torch.tensor([0.5, float("nan")]), [0, 1])

    def test_mapping_with_absent_group_warns_and_rescales(self):
        with pytest.warns(FairnessWarning):
            value = wdp([0.2, 0.6, 0.4], ["a", "b", "b"], weights={"a": 0.25, "b": 0.25, "c": 0.5})
        assert value == pytest.approx(0.5 * abs(0.2 - 0.4) + 0.5 * abs(0.5 - 0.4), abs=TOL)


# ------------------------------------------------------------------------------------
# UF and JS divergence
# ------------------------------------------------------------------------------------


class TestDistribution:
    def test_uf_hand(self):
        # cell means 2/3, 1/3, overall 1/2: between = 1/36, total variance 1/4
        assert uf(HAND_PRED.astype(float), HAND_S) == pytest.approx(1 / 9, abs=TOL)
        # unequal cell sizes: weighted by size (law of total variance)
        pred = np.array([0.0, 0.0, 0.0, 3.0])
        cells = np.array([0, 0, 0, 1])
        # mean 3/4; between = 3/4 * (3/4)^2 + 1/4 * (9/4)^2 = 27/16; total = 27/16 -> UF = 1
        assert uf(pred, cells) == pytest.approx(1.0, abs=TOL)

    def test_uf_equals_r2_of_cell_dummies(self):
        rng = np.random.default_rng(17)
        cells = rng.integers(0, 5, 300)
        pred = rng.normal(size=300) + 0.4 * cells
        design = np.eye(5)[cells]
        fitted = design @ np.linalg.lstsq(design, pred, rcond=None)[0]
        r2_dummies = 1 - np.sum((pred - fitted) ** 2) / np.sum((pred - pred.mean()) ** 2)
        assert uf(pred, cells) == pytest.approx(r2_dummies, abs=1e-12)
        frame = pd.DataFrame({"p": pred, "c": cells})
        stats = frame.groupby("c")["p"].agg(["mean", "size"])
        between = np.sum(stats["size"] / 300 * (stats["mean"] - pred.mean()) ** 2)
        assert uf(pred, cells) == pytest.approx(between / pred.var(), abs=1e-12)

    def test_uf_bounds_and_constant(self):
        assert uf([0.3, 0.3, 0.3, 0.3], [0, 0, 1, 1]) == 0.0
        assert uf([0.1, 0.5, 0.1, 0.5], [0, 0, 1, 1]) == pytest.approx(0.0, abs=TOL)
        assert uf([0.1, 0.1, 0.5, 0.5], [0, 0, 1, 1]) == pytest.approx(1.0, abs=TOL)

    def test_intersections_and_continuous_binning(self):
        rng = np.random.default_rng(18)
        sex = rng.integers(0, 2, 200).astype(np.float32)  # binary in the FairData convention
        race = rng.choice(["x", "y", "z"], 200)
        age = rng.uniform(18, 80, 200)
        pred = rng.uniform(size=200)
        combined = [f"{a}|{b}|{c}" for a, b, c in zip(sex, race, pd.qcut(age, 3, labels=False))]
        assert uf(pred, sex, race, age) == pytest.approx(uf(pred, combined), abs=TOL)
        assert js_divergence(pred, sex, race, age) == pytest.approx(js_divergence(pred, combined), abs=TOL)
        cells = intersection_cells(sex, race, age, kinds=["binary", "categorical", "continuous"])
        assert cells.max() + 1 == len(set(combined))
        np.testing.assert_array_equal(bin_quantiles(age, 4), pd.qcut(age, 4, labels=False))

    def test_quantile_bins_are_right_closed(self):
        # n = 7: the 1/3 and 2/3 quantiles fall exactly on the data points 3 and 5
        x = np.arange(1.0, 8.0)
        np.testing.assert_array_equal(bin_quantiles(x, 3), [0, 0, 0, 1, 1, 2, 2])
        np.testing.assert_array_equal(bin_quantiles(x, 3), pd.qcut(x, 3, labels=False))
        np.testing.assert_array_equal(bin_quantiles([1.0, 1.0, 1.0, 2.0], 3), [0, 0, 0, 1])  # tied edges merge
        with pytest.raises(ValueError, match="^n_quantiles: "):
            bin_quantiles(x, 0)

    def test_kinds_validation(self):
        with pytest.raises(ValueError, match="^kinds: expected one kind"):
            uf([0.1, 0.2], [0, 1], kinds=["binary", "binary"])
        with pytest.raises(ValueError, match="^kinds: expected values"):
            uf([0.1, 0.2], [0, 1], kinds=["ordinal"])
        with pytest.raises(ValueError, match="^sensitive: found 1 group"):
            js_divergence([0.1, 0.2], [1, 1])
        with pytest.raises(ValueError, match="^sensitive: at least one"):
            uf([0.1, 0.2])

    def test_js_two_equal_cells_is_scipy_jensenshannon_squared(self):
        rng = np.random.default_rng(19)
        pred = np.concatenate([rng.beta(2, 5, 500), rng.beta(5, 2, 500)])
        cells = np.repeat([0, 1], 500)
        edges = np.linspace(0, 1, 11)
        h0 = np.histogram(pred[:500], bins=edges)[0] / 500
        h1 = np.histogram(pred[500:], bins=edges)[0] / 500
        assert js_divergence(pred, cells, bins=edges) == pytest.approx(jensenshannon(h0, h1) ** 2, abs=1e-12)
        assert js_divergence(pred, cells, bins=edges, base=2) == pytest.approx(jensenshannon(h0, h1, base=2) ** 2, abs=1e-12)

    def test_js_unequal_cells_vs_entropy_and_loop(self):
        rng = np.random.default_rng(20)
        cells = rng.choice(3, size=400, p=[0.6, 0.3, 0.1])
        pred = rng.normal(loc=0.5 * cells, size=400)
        codes, edges = bin_equal_width(pred, 12)
        hist = lambda rows: np.bincount(codes[rows], minlength=12) / rows.sum()  # noqa: E731
        pooled = hist(np.ones(400, dtype=bool))
        pis = [np.mean(cells == c) for c in range(3)]
        via_entropy = entropy(pooled) - sum(pi * entropy(hist(cells == c)) for c, pi in enumerate(pis))
        loop = 0.0
        for c, pi in enumerate(pis):
            pc = hist(cells == c)
            loop += pi * sum(pc[x] * math.log(pc[x] / pooled[x]) for x in range(12) if pc[x] > 0)
        assert js_divergence(pred, cells, bins=12) == pytest.approx(loop, abs=1e-12)
        assert js_divergence(pred, cells, bins=12) == pytest.approx(via_entropy, abs=1e-12)
        # np.histogram agrees with the bins used
        np.testing.assert_array_equal(np.histogram(pred, bins=edges)[0], np.bincount(codes, minlength=12))

    def test_js_zero_when_distributions_match(self):
        pred = np.tile([0.1, 0.4, 0.9], 4)
        cells = np.repeat([0, 1, 2, 3], 3)
        assert js_divergence(pred, cells) == pytest.approx(0.0, abs=TOL)
        assert js_divergence(pred, cells, base=3) >= 0.0

    def test_js_separated_cells_reach_entropy_of_weights(self):
        # disjoint supports: D_JS = H(pi)
        pred = np.array([0.0, 0.0, 0.0, 1.0])
        cells = np.array([0, 0, 0, 1])
        assert js_divergence(pred, cells, bins=2) == pytest.approx(entropy([0.75, 0.25]), abs=TOL)

    def test_js_validation(self):
        with pytest.raises(ValueError, match="^base: "):
            js_divergence([0.1, 0.2], [0, 1], base=1)
        with pytest.raises(ValueError, match="length mismatch"):
            js_divergence([0.1, 0.2, 0.3], [0, 1])
        with pytest.raises(ValueError, match="^pred: .*non-finite"):
            uf([0.1, float("nan")], [0, 1])
