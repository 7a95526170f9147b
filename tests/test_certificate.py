"""Held-out statements: Clopper-Pearson certificates, bootstrap, margins, estimator integration."""

from __future__ import annotations

import itertools
import math
import warnings

import numpy as np
import pytest
import torch
from scipy import stats

import fairopt
from fairopt.certificate import (
    Certificate,
    auto_margin,
    certify,
    clopper_pearson,
    held_out_spread,
    tighten,
    worst_case_rows,
)
from fairopt.constraints import DemographicParity, DisparateImpact, GeDI
from fairopt.data import FairData
from fairopt.estimators import FairClassifier
from fairopt.exceptions import CertificateError, FairnessWarning


def _rate_data(n0: int, n1: int, k0: int, k1: int) -> tuple[FairData, torch.Tensor]:
    """Rows of two groups with ``k_g`` positives (outputs +1) among ``n_g`` rows."""
    s = np.r_[np.zeros(n0), np.ones(n1)]
    out = np.r_[np.where(np.arange(n0) < k0, 1.0, -1.0), np.where(np.arange(n1) < k1, 1.0, -1.0)]
    y = (out > 0).astype(float)
    data = FairData.from_arrays(np.c_[out], y, {"s": s})
    return data, torch.as_tensor(out)


@pytest.fixture(scope="module")
def adult_small():
    frame, _ = fairopt.datasets.load_frame("adult")
    frame = frame.sample(n=1200, random_state=3)
    X = frame[["age", "education-num", "hours-per-week", "capital-gain", "capital-loss"]]
    return X, frame["income"], frame[["sex"]]


# ----------------------------------------------------------------------------- intervals
@pytest.mark.parametrize("k,n", [(0, 20), (3, 20), (10, 20), (20, 20), (57, 400)])
def test_clopper_pearson_matches_scipy(k, n):
    lo, hi = clopper_pearson(k, n, 0.95)
    ci = stats.binomtest(k, n).proportion_ci(confidence_level=0.95, method="exact")
    assert float(lo) == pytest.approx(ci.low, abs=1e-10)
    assert float(hi) == pytest.approx(ci.high, abs=1e-10)


def test_worst_case_rows_match_corner_enumeration():
    rng = np.random.default_rng(0)
    D = rng.normal(size=(5, 4))
    lo = rng.uniform(0, 0.5, size=4)
    hi = lo + rng.uniform(0, 0.5, size=4)
    corners = np.array([D @ np.where(np.array(bits), hi, lo) for bits in itertools.product([0, 1], repeat=4)])
    row_lo, row_hi = worst_case_rows(D, lo, hi)
    np.testing.assert_allclose(row_lo, corners.min(axis=0))
    np.testing.assert_allclose(row_hi, corners.max(axis=0))


def test_di_certificate_values_and_bonferroni():
    data, out = _rate_data(400, 600, 80, 150)
    cert = certify(out, data, DisparateImpact("s", 0.8), method="clopper-pearson")
    assert isinstance(cert, Certificate) and cert.method == "clopper-pearson" and cert.n == 1000
    assert cert.realised == pytest.approx(0.2 / 0.25)
    # two sides, each at 1 - 0.05 / 2
    l0, u0 = clopper_pearson(80, 400, 0.975)
    l1, u1 = clopper_pearson(150, 600, 0.975)
    assert cert.lower == pytest.approx(min(l0 / u1, l1 / u0))
    assert cert.lower < cert.realised <= cert.upper
    assert cert.passed == (cert.lower >= 0.8) and not cert.passed
    assert cert.confidence_bound == cert.lower
    assert cert.to_dict()["passed"] is False and "FAILED" in str(cert)
    # equal rates on many rows: the bound holds
    data, out = _rate_data(4000, 6000, 1000, 1500)
    assert certify(out, data, DisparateImpact("s", 0.8), method="clopper-pearson").passed


def test_dp_certificate_upper_bound():
    data, out = _rate_data(500, 500, 100, 110)
    cert = certify(out, data, DemographicParity("s", 0.1), method="clopper-pearson")
    assert cert.measure == "demographic_parity difference" and cert.bound_side == "upper"
    assert cert.realised == pytest.approx(0.02)
    l0, u0 = clopper_pearson(100, 500, 0.975)
    l1, u1 = clopper_pearson(110, 500, 0.975)
    assert cert.upper == pytest.approx(max(u1 - l0, u0 - l1))
    assert cert.passed == (cert.upper <= 0.1)


def test_di_lower_bound_coverage_simulation():
    """The DI lower confidence bound is below the true DI in >= 95% of 2,000 samples."""
    rng = np.random.default_rng(12345)
    p0, p1, n0, n1 = 0.12, 0.3, 150, 300
    true_di = min(p0 / p1, p1 / p0)
    k0 = rng.binomial(n0, p0, size=2000)
    k1 = rng.binomial(n1, p1, size=2000)
    l0, u0 = clopper_pearson(k0, n0, 0.975)
    l1, u1 = clopper_pearson(k1, n1, 0.975)
    lcb = np.minimum(l0 / u1, l1 / u0)
    assert np.mean(lcb <= true_di) >= 0.95
    # and certify computes the same bound
    data, out = _rate_data(n0, n1, int(k0[0]), int(k1[0]))
    assert certify(out, data, DisparateImpact("s", 0.8), method="clopper-pearson").lower == pytest.approx(lcb[0])


def test_normal_certificate_rows_ratio_and_coverage():
    """method="normal": each DI row r = d P_r - P_f gets r + z se_r (z at 1 - 0.05, one pair); the
    reported ratio bound is the largest d whose rows pass; it covers the true DI."""
    n0, n1, k0, k1 = 400, 600, 80, 150
    data, out = _rate_data(n0, n1, k0, k1)
    cert = certify(out, data, DisparateImpact("s", 0.8))
    assert cert.method == "normal" and cert.realised == pytest.approx(0.8)
    z = stats.norm.ppf(1 - 0.05)
    p0, p1 = (k0 + 0.5) / (n0 + 1), (k1 + 0.5) / (n1 + 1)
    v0, v1 = p0 * (1 - p0) / n0, p1 * (1 - p1) / n1
    # the binding row 0.8 * P1 - P0 <= 0 and its upper confidence bound
    row = 0.8 * (k1 / n1) - k0 / n0
    assert max(cert.rows["upper"]) == pytest.approx(row + z * np.sqrt(0.64 * v1 + v0))
    assert not cert.passed  # realised exactly at the bound: the upper bound is above 0
    d = cert.lower
    assert d * (k1 / n1) - k0 / n0 + z * np.sqrt(d * d * v1 + v0) == pytest.approx(0.0, abs=1e-9)
    assert cert.lower < cert.realised < cert.upper <= 1.0
    # coverage: the lower bound is below the true DI in >= 95% of 2,000 simulated samples
    rng = np.random.default_rng(7)
    q0, q1, m0, m1 = 0.15, 0.2, 800, 1600
    hits = 0
    for a, b in zip(rng.binomial(m0, q0, size=400), rng.binomial(m1, q1, size=400)):
        sample, outputs = _rate_data(m0, m1, int(a), int(b))
        hits += certify(outputs, sample, DisparateImpact("s", 0.8)).lower <= q0 / q1
    assert hits / 400 >= 0.94
    with pytest.raises(ValueError, match="method"):
        certify(out, data, DisparateImpact("s", 0.8), method="t")


def test_bootstrap_certificate_is_seeded():
    rng = np.random.default_rng(1)
    s = rng.integers(0, 2, 300).astype(float)
    out = rng.normal(size=300) + 0.3 * s
    data = FairData.from_arrays(np.c_[out], (out > 0).astype(float), {"s": s})
    c = GeDI("s", bound=0.5)
    a = certify(torch.as_tensor(out), data, c, n_bootstrap=50, seed=3)
    b = certify(torch.as_tensor(out), data, c, n_bootstrap=50, seed=3)
    assert a.method == "bootstrap" and a.to_dict() == b.to_dict()
    assert a.lower <= a.realised <= a.upper and a.passed == (a.upper <= 0.5)


def test_unknown_constraint_type_is_type_error():
    data, out = _rate_data(10, 10, 3, 3)

    class Other:
        name = "other"

        def __call__(self, out, batch):
            return out.mean().reshape(1)

        def exact(self, out, batch):
            return out.mean().reshape(1)

    with pytest.raises(TypeError, match="no certificate"):
        certify(out, data, Other())


# ----------------------------------------------------------------------------- margins
def test_tighten_leaves_the_user_constraint_unchanged():
    data, _ = _rate_data(50, 50, 10, 10)
    c = DisparateImpact("s", 0.8)
    c.setup(data)
    before = (c.lower.clone(), c.upper.clone())
    t = tighten(c, 0.03)
    t.setup(data)
    assert torch.equal(c.lower, before[0]) and torch.equal(c.upper, before[1])
    assert torch.allclose(t.upper, before[1] - 0.03) and torch.equal(t.lower, before[0])
    dp = tighten(DemographicParity("s", 0.1), 0.04)
    dp.setup(data)
    assert torch.allclose(dp.upper, torch.tensor([0.06], dtype=torch.float64))
    assert torch.allclose(dp.lower, torch.tensor([-0.06], dtype=torch.float64))
    too_much = tighten(DemographicParity("s", 0.01), 0.04)
    with pytest.raises(ValueError, match="margin"):
        too_much.setup(data)


def test_with_margin_tightens_the_original_once_and_follows_set_params():
    """``with_margin`` starts from the untightened original (not the tightened copy) and from its
    parameters as ``set_params`` last left them."""
    data, _ = _rate_data(50, 50, 10, 10)
    dp = tighten(DemographicParity("s", 0.1), 0.02)
    dp.setup(data)
    wider = dp.with_margin(0.05)
    wider.setup(data)
    assert torch.allclose(wider.upper, torch.tensor([0.05], dtype=torch.float64))
    dp.set_params(bound=0.2)
    moved = dp.with_margin(0.05)
    moved.setup(data)
    assert moved.get_params()["bound"] == 0.2
    assert torch.allclose(moved.upper, torch.tensor([0.15], dtype=torch.float64))


def _regression_data(n: int = 800, seed: int = 3) -> FairData:
    rng = np.random.default_rng(seed)
    s = rng.integers(0, 2, n)
    X = rng.normal(size=(n, 2))
    X[:, 0] += s
    return FairData.from_arrays(X, 2.0 * X[:, 0] + X[:, 1] + 0.3 * rng.normal(size=n), {"s": s}, task="regression")


def test_auto_margin_of_a_bootstrap_constraint_covers_both_samples():
    """Bootstrap constraints (here GeDI, one finite side): the margin is ``z sqrt(sd^2 + sd_new^2)`` with
    ``sd_new = sd sqrt(n / n_new)``, so it is ``sqrt(1 + n_new / n)`` times the certificate's ``z sd_new``
    and ``z`` times :func:`held_out_spread`."""
    data = _regression_data()
    c = GeDI("s", bound=5.0)
    m = auto_margin(data, c, held_out_fraction=0.3)
    half = auto_margin(data, c, held_out_fraction=0.3, for_certificate=True, inflation=1.0)
    spread = held_out_spread(data, c, 0.3)
    assert m.shape == (1,) and bool(torch.isfinite(m).all()) and float(m) > 0
    assert float(m / half) == pytest.approx(math.sqrt(1 + 3 / 7), rel=1e-9)
    assert float(m / spread) == pytest.approx(stats.norm.ppf(0.95), rel=1e-9)


def test_regression_margin_before_a_fit_uses_the_least_squares_outputs():
    """Before a model exists a regression margin is sized on the least-squares fit of ``y`` on ``[X, 1]``
    (numpy's lstsq here), not on ``y``, whose dependence measure varies more (the residual's variance)."""
    data = _regression_data()
    c = GeDI("s", bound=5.0)
    X = data.X.double().numpy()
    A = np.c_[X, np.ones(len(X))]
    fitted = A @ np.linalg.lstsq(A, data.y.double().numpy(), rcond=None)[0]
    before = auto_margin(data, c, held_out_fraction=0.3)
    assert float(before) == pytest.approx(float(auto_margin(data, c, held_out_fraction=0.3, outputs=fitted)), rel=1e-6)
    assert float(before) < float(auto_margin(data, c, held_out_fraction=0.3, outputs=data.y.double().numpy()))


def test_margin_below_a_norms_floor_is_refused():
    """A coarse GeDI row is a norm: a margin that takes its bound below 0 leaves no model, and is refused
    naming the row; one that leaves room is applied."""
    data = _regression_data()
    with pytest.raises(ValueError, match="smallest value the row takes"):
        tighten(GeDI("s", bound=0.1), 0.2).setup(data)
    kept = tighten(GeDI("s", bound=0.3), 0.2)
    kept.setup(data)
    assert float(kept.upper) == pytest.approx(0.1)


def test_auto_margin_shrinks_as_groups_grow():
    margins = []
    for n in (100, 400, 1600, 6400):
        data, _ = _rate_data(n, 2 * n, n // 5, n // 2)
        m = auto_margin(data, DisparateImpact("s", 0.8), held_out_fraction=0.3)
        assert m.shape == (2,) and bool((m > 0).all())
        margins.append(float(m.max()))
    assert all(a > b for a, b in zip(margins, margins[1:]))
    assert margins[0] / margins[1] == pytest.approx(2.0, rel=1e-6)  # 1 / sqrt(n)
    # the formula, p_g the target's positive rates (1/7 and 1/14): training sides 700 and 1400,
    # new sides 300 and 600; one compared pair (z at 1 - 0.05); for a certificate, twice the
    # new sample's term
    data, _ = _rate_data(700, 1400, 100, 100)
    m = auto_margin(data, DisparateImpact("s", 0.8), held_out_fraction=0.3)
    z = stats.norm.ppf(1 - 0.05)
    v0, v1 = (1 / 7) * (6 / 7), (1 / 14) * (13 / 14)
    var_train, var_new = 0.64 * v0 / 700 + v1 / 1400, 0.64 * v0 / 300 + v1 / 600
    assert float(m[0]) == pytest.approx(z * np.sqrt(var_train + var_new))
    m_cert = auto_margin(data, DisparateImpact("s", 0.8), held_out_fraction=0.3, for_certificate=True)
    assert float(m_cert[0]) == pytest.approx(2 * z * np.sqrt(var_new))


# ----------------------------------------------------------------------------- estimator
def test_estimator_validation_fraction_certificate_and_no_refit(adult_small):
    X, y, S = adult_small
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FairnessWarning)
        clf = FairClassifier(constraints=[("disparate_impact", "sex", 0.8)], epochs=20, validation_fraction=0.25,
                             margin="auto", on_fail="ignore").fit(X, y, sensitive_features=S)
    held = clf.validation_indices_
    assert len(held) == 300 and len(clf.certificate_) == 1
    cert = clf.certificate_[0]
    assert cert.n == 300 and cert.constraint == "disparate_impact[sex]" and cert.method == "normal"
    # no refit: the preprocessing (and the model) saw only the training rows
    train = np.setdiff1d(np.arange(len(X)), held)
    assert np.allclose(clf.preprocessor_.means_["x0"], X.to_numpy()[train, 0].mean())
    assert clf.predicted_held_out_ is not None and (clf.predicted_held_out_["margin"] > 0).all()
    # the certificate is the realised held-out DI of the returned model
    report = clf.evaluate(X.iloc[held], y.iloc[held], sensitive_features=S.iloc[held])
    assert report is not None


def test_auto_margin_inflation_scales_the_certificate_margin():
    data, out = _rate_data(700, 1400, 100, 100)
    c = DisparateImpact("s", 0.8)
    one = auto_margin(data, c, held_out_fraction=0.3, for_certificate=True, inflation=1.0)
    two = auto_margin(data, c, held_out_fraction=0.3, for_certificate=True)
    assert torch.allclose(two, 2 * one)
    for bad in (0.0, -1.0, float("nan"), True, "2"):
        with pytest.raises(ValueError, match="inflation"):
            auto_margin(data, c, held_out_fraction=0.3, for_certificate=True, inflation=bad)


def test_candidate_inflations_fixed_decreasing_sequence():
    from fairopt.held_out import candidate_inflations

    np.testing.assert_allclose(candidate_inflations(7), [2.0, 1.75, 1.5, 1.25, 1.0, 0.75, 0.5])
    np.testing.assert_allclose(candidate_inflations(1), [2.0])


class _FakeCertificate:
    def __init__(self, passed):
        self.passed, self.constraint, self.measure = passed, "disparate_impact[sex]", "disparate_impact"
        self.realised = self.confidence_bound = 0.9 if passed else 0.7
        self.n, self.confidence, self.bound_side, self.bound = 100, 0.95, "lower", 0.8


@pytest.mark.parametrize("pattern, chosen, tried", [
    ([True, True, False, True], 1, 3),    # stops at the first failure; the later pass is never looked at
    ([True, True, True, True], 3, 4),     # all pass: the smallest margin
    ([False, True, True, True], 0, 1),    # the first fails: it is returned (its certificate failed)
])
def test_certified_sequence_keeps_last_pass_before_first_failure(adult_small, monkeypatch, pattern, chosen, tried):
    """Fixed-sequence testing: candidates are certified in the order of decreasing margin
    and the last one that passes before the first failure is returned."""
    import fairopt.held_out as held_out_module

    calls, margins_seen = iter(pattern), []
    original_train = FairClassifier._train

    def train(self, data, constraints, reference=False):
        margins_seen.append(float(torch.as_tensor(constraints[0].margin).max()))
        return original_train(self, data, constraints, reference)

    monkeypatch.setattr(held_out_module, "certificates", lambda est, held, model, cs: [_FakeCertificate(next(calls))])
    monkeypatch.setattr(FairClassifier, "_train", train)
    monkeypatch.setattr("fairopt.diagnostics.degenerate_reason", lambda model, data: None)  # 3 epochs: near constant
    X, y, S = adult_small
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FairnessWarning)
        clf = FairClassifier(constraints=[("disparate_impact", "sex", 0.8)], epochs=3, validation_fraction=0.3,
                             margin="auto", n_candidates=4, on_fail="ignore").fit(X, y, sensitive_features=S)
    table = clf.candidates_
    assert len(table) == tried == len(margins_seen)
    assert list(table["chosen"]) == [i == chosen for i in range(tried)]
    np.testing.assert_allclose(table["inflation"], [2.0, 1.5, 1.0, 0.5][:tried])
    assert np.all(np.diff(margins_seen) < 0)  # each candidate trained under a smaller margin
    assert clf.certificate_[0].passed == pattern[chosen]
    np.testing.assert_allclose(clf.predicted_held_out_["margin"].max(), margins_seen[chosen], rtol=1e-6)


def test_certified_sequence_end_to_end(adult_small, monkeypatch):
    """The returned model is the chosen candidate: its certificate is recomputed from it,
    and one candidate reproduces a single fit at inflation 2."""
    monkeypatch.setattr("fairopt.diagnostics.degenerate_reason", lambda model, data: None)  # every one certified
    X, y, S = adult_small
    kwargs = dict(constraints=[("disparate_impact", "sex", 0.8)], epochs=20, validation_fraction=0.3,
                  margin="auto", on_fail="ignore")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FairnessWarning)
        clf = FairClassifier(**kwargs).fit(X, y, sensitive_features=S)
        single = FairClassifier(**kwargs, n_candidates=1).fit(X, y, sensitive_features=S)
    row = clf.candidates_[clf.candidates_["chosen"]].iloc[0]
    assert clf.certificate_[0].realised == pytest.approx(row["disparate_impact[sex]: held-out"])
    held = clf.validation_indices_  # recomputed from the returned model's hard predictions
    pred, s = clf.predict(X.iloc[held]), S["sex"].iloc[held].to_numpy()
    rates = [pred[s == level].mean() for level in np.unique(s)]
    assert clf.certificate_[0].realised == pytest.approx(min(rates) / max(rates))
    assert len(single.candidates_) == 1 and single.candidates_["inflation"].iloc[0] == 2.0
    first = clf.candidates_.iloc[0]
    assert first["disparate_impact[sex]: held-out"] == pytest.approx(
        single.certificate_[0].realised)


def test_a_degenerate_candidate_is_skipped_not_certified(adult_small):
    """A candidate whose model is near constant on its training rows meets a rate bound trivially, so its
    certificate passes and used to end the sequence at it (a credit modeller's trial: 0.70 test accuracy,
    PASSED): it is skipped, decided on the training rows (the sequence stays fixed), unless it is the last."""
    X, y, S = adult_small
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        clf = FairClassifier(constraints=[("disparate_impact", "sex", 0.8)], epochs=20, validation_fraction=0.3,
                             margin="auto", on_fail="ignore").fit(X, y, sensitive_features=S)
        single = FairClassifier(constraints=[("disparate_impact", "sex", 0.8)], epochs=20, validation_fraction=0.3,
                                margin="auto", on_fail="ignore", n_candidates=1).fit(X, y, sensitive_features=S)
    table = clf.candidates_
    assert single.status_ == "degenerate"  # the first candidate's model (inflation 2), kept as the only one
    assert table["skipped"].iloc[0].startswith("degenerate on its training rows")
    chosen = table[table["chosen"]].iloc[0]
    assert chosen["inflation"] < 2.0 and clf.status_ != "degenerate"


def test_estimator_defaults_unchanged(adult_small):
    X, y, S = adult_small
    kwargs = dict(constraints=[("disparate_impact", "sex", 0.8)], epochs=10)
    a = FairClassifier(**kwargs).fit(X, y, sensitive_features=S)
    b = FairClassifier(**kwargs, margin=0.0, validation_fraction=None).fit(X, y, sensitive_features=S)
    assert a.certificate_ is None and a.predicted_held_out_ is None and a.validation_indices_ is None
    np.testing.assert_array_equal(a.decision_function(X), b.decision_function(X))


def test_on_fail_raise_and_warn(adult_small):
    X, y, S = adult_small
    kwargs = dict(constraints=[("demographic_parity", "sex", 0.0)], epochs=5, validation_fraction=0.3)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FairnessWarning)
        with pytest.raises(CertificateError, match="demographic_parity"):
            FairClassifier(**kwargs, on_fail="raise").fit(X, y, sensitive_features=S)
    assert issubclass(CertificateError, ValueError)
    with pytest.warns(FairnessWarning, match="confidence bound"):
        clf = FairClassifier(**kwargs).fit(X, y, sensitive_features=S)
    assert not clf.certificate_[0].passed


@pytest.mark.parametrize("params,match", [
    ({"margin": -0.1}, "margin"),
    ({"margin": "big"}, "margin"),
    ({"validation_fraction": 0.7}, "validation_fraction"),
    ({"validation_fraction": 0.0}, "validation_fraction"),
    ({"confidence": 1.0}, "confidence"),
    ({"on_fail": "explode"}, "on_fail"),
    ({"n_candidates": 0}, "n_candidates"),
    ({"n_candidates": 2.5}, "n_candidates"),
    ({"n_candidates": True}, "n_candidates"),
])
def test_parameter_validation(adult_small, params, match):
    X, y, S = adult_small
    with pytest.raises(ValueError, match=match):
        FairClassifier(constraints=[("disparate_impact", "sex", 0.8)], epochs=2, **params).fit(
            X, y, sensitive_features=S)


def test_auto_margin_of_label_conditioned_rates_is_not_zero():
    """Before a model exists the margin reads the target's rates per side; within y=1 (y=0) rows
    those are 1 (0) for every group, which would give no margin at all: such sides get p = 1/2."""
    from fairopt.constraints import EqualizedOdds

    data, _ = _rate_data(700, 1400, 100, 300)
    m = auto_margin(data, EqualizedOdds("s", 0.05), held_out_fraction=0.3)
    assert bool((m > 0).all())
    # row 0: P[s=1] - 0.05 P[s=0] >= 0 over the y=1 sides (300 and 100 training rows, 3/7 as many new
    # ones), both at p = 1/2; z at 1 - 0.05 / 2 (two compared pairs: one per label)
    z = stats.norm.ppf(1 - 0.05 / 2)
    side = lambda n: 0.25 * (1 / n + 1 / (n * 3 / 7))  # noqa: E731
    assert float(m[0]) == pytest.approx(z * np.sqrt(side(300.0) + 0.05 ** 2 * side(100.0)), rel=1e-6)


def test_certified_candidates_whose_margin_leaves_no_room_are_skipped(monkeypatch):
    """margin="auto" with validation_fraction: the first candidates' margins (2x, 1.75x, ... the held-out
    spread) can exceed a tight bound, which stopped the whole fit with "tightening ... leaves row" although
    the smaller ones train; they are skipped (decided on the training rows alone), and when every one is,
    the error names margin='auto'."""
    import fairopt.held_out as held_out_module
    from fairopt.certificate.tightening import MarginTooLargeError
    from fairopt.estimators import FairRegressor

    data = _regression_data()
    X, y = data.X.numpy(), data.y.numpy()
    S = {"s": data.sensitive["s"].numpy()}
    monkeypatch.setattr(held_out_module, "certificates", lambda est, held, model, cs: [_FakeCertificate(True)])
    real = held_out_module.constraint_margins

    def scaled(factor):
        return lambda options, d, cs: [m * factor for m in real(options, d, cs)]

    bound = ("gedi", "s", 0.2, {"relative": True})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        room = FairRegressor(bound, epochs=5, margin="auto", validation_fraction=0.3, n_candidates=4)
        monkeypatch.setattr(held_out_module, "constraint_margins", scaled(1.0))
        room.fit(X, y, sensitive_features=S)
        upper = float(room.constraints_[0].upper.max())  # the bound in the rows' units
        base = real(room._held_out_options(), data, [room.constraints_[0]])[0]
        # margins such that 2x and 1.5x leave no room, 1x and 0.5x do
        monkeypatch.setattr(held_out_module, "constraint_margins",
                            scaled(0.8 * upper / float(torch.as_tensor(base).max())))
        fitted = FairRegressor(bound, epochs=5, margin="auto", validation_fraction=0.3, n_candidates=4).fit(
            X, y, sensitive_features=S)
    table = fitted.candidates_
    assert table["skipped"].notna().tolist() == [True, True, False, False]
    assert table["chosen"].tolist() == [False, False, False, True]
    monkeypatch.setattr(held_out_module, "constraint_margins", scaled(5.0 * upper / float(torch.as_tensor(base).max())))
    with pytest.raises(MarginTooLargeError, match="margin='auto' with validation_fraction: every candidate"):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            FairRegressor(bound, epochs=5, margin="auto", validation_fraction=0.3, n_candidates=4).fit(
                X, y, sensitive_features=S)


@pytest.mark.parametrize("delta, share", [(0.8, 0.5), (0.8, 0.2), (0.9, 0.7), (0.5, 0.4)])
def test_group_rates_meet_two_tightened_ratio_rows_only_below_the_closed_form(delta, share):
    """``P_f >= delta P_r + m_1`` and ``P_r >= delta P_f + m_2`` with rates in [0, 1]: substituting one in
    the other, ``P_f >= (m_1 + delta m_2) / (1 - delta^2)`` and likewise ``P_r``, so they are feasible exactly
    when ``max(m_1 + delta m_2, m_2 + delta m_1) <= 1 - delta^2``."""
    from fairopt.certificate.tightening import rates_can_meet

    D = torch.tensor([[-1.0, delta], [delta, -1.0]], dtype=torch.float64)
    lower = torch.full((2,), -math.inf, dtype=torch.float64)
    a, b = share, 1.0 - share
    edge = (1.0 - delta ** 2) / max(a + delta * b, b + delta * a)  # margin = t (a, b) is feasible iff t <= edge
    for factor, feasible in ((0.999, True), (1.001, False)):
        margin = factor * edge * torch.tensor([a, b], dtype=torch.float64)
        assert rates_can_meet(D, lower, -margin) is feasible


def test_a_margin_no_group_rates_can_meet_is_refused_before_training():
    """margin='auto' for a group of 25 rows exceeds what two ratio rows can take together (a model predicting
    every row positive misses them as well): a MarginTooLargeError (a ValueError) before any training, not an
    approve-everyone model reported as meeting the bound."""
    from fairopt.certificate.tightening import MarginTooLargeError

    rng = np.random.default_rng(0)
    n = 2000
    s = np.where(np.arange(n) < 25, "small", "large")
    X = rng.normal(size=(n, 3))
    y = (X[:, 0] + rng.normal(size=n) > 0.8).astype(int)
    with pytest.raises(MarginTooLargeError, match="leaves no group rates in \\[0, 1\\] that meet all its rows"):
        FairClassifier(("disparate_impact", "s", 0.8), margin="auto", epochs=5).fit(X, y, sensitive_features=s)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the same data and bound without the margin trains
        FairClassifier(("disparate_impact", "s", 0.8), epochs=5).fit(X, y, sensitive_features=s)


def test_a_margin_that_takes_a_distance_covariance_bound_below_zero_is_refused():
    """A margin on a fixed (absolute) distance covariance bound was subtracted again at every setup (an
    estimator's fit trained to 0.05 - 2 x 0.03). dcov and ccdcov are 0 for a constant prediction and never negative in the population; a margin that
    takes the bound below 0 would train towards negative sampling noise (a trial got a constant model
    reported as meeting its bound): MarginTooLargeError, as for GeDI's coarse row. JdCov keeps no floor."""
    from fairopt.certificate.tightening import MarginTooLargeError, TightenedConstraint
    from fairopt.constraints import DistanceCovariance

    data = _regression_data(300)
    c = DistanceCovariance(["s"], bound=0.05)
    assert c.row_floor == 0.0 and DistanceCovariance(["s"], bound=0.05, kind="jdcov").row_floor is None
    tight = TightenedConstraint(c, 0.04)
    for _ in range(3):  # its setup keeps the fixed bound: the margin is applied once, not once per setup
        tight.setup(data)
        assert float(tight.upper[0]) == pytest.approx(0.01)
    with pytest.raises(MarginTooLargeError, match="upper -0.01 below 0, the smallest value the row takes"):
        TightenedConstraint(c, 0.06).setup(data)


def test_a_numeric_margin_on_an_absolute_distance_covariance_bound_tightens_it_once():
    from fairopt.estimators import FairRegressor

    data = _regression_data(600)
    X, y, S = data.X.numpy(), data.y.numpy(), {"s": data.sensitive["s"].numpy()}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        fitted = FairRegressor(("dcov", ["s"], 0.05), margin=0.03, epochs=50).fit(X, y, sensitive_features=S)
    value = fitted.evaluate(X, y, sensitive_features=S)["bounds"]["dcov[s]"]["value"]
    assert 0.015 <= value <= 0.02 + 1e-6  # trained to the tightened bound, which binds (0.05 - 0.03)


def test_distance_covariance_draws_are_half_samples_centred_on_the_statistic():
    """The dcov certificate and margin draw the statistic on halves of the rows without replacement: their
    mean sits at the sample's statistic (a bootstrap with repeated rows put it 3.5 sampling deviations above
    at 2,000 rows independent of the attribute), and each draw has n // 2 distinct rows."""
    from fairopt.certificate.intervals import bootstrap_rows, half_samples
    from fairopt.constraints import DistanceCovariance

    draws = list(half_samples(101, 5, seed=0))
    assert all(len(d) == 50 and len(np.unique(d)) == 50 and np.all(np.diff(d) > 0) for d in draws)
    assert [d.tolist() for d in half_samples(101, 5, seed=0)] == [d.tolist() for d in draws]  # seeded
    rng = np.random.default_rng(4)
    n = 1200
    s = rng.integers(0, 6, n)
    pred = rng.normal(size=n)  # independent of s: population value 0
    data = FairData.from_arrays(np.zeros((n, 1)), pred, {"s": s}, task="regression",
                                sensitive_kinds={"s": "categorical"})
    c = DistanceCovariance(["s"], bound=1.0)
    c.setup(data)
    out = torch.as_tensor(pred, dtype=torch.float32)
    value = float(c.exact(out, data)[0])
    rows = bootstrap_rows(c, out, data, 100, seed=1)[:, 0]
    assert abs(rows.mean() - value) < 0.5 * rows.std(ddof=1)
    certificate = fairopt.certify(out.numpy(), data, DistanceCovariance(["s"], bound=1.0), n_bootstrap=100)
    assert certificate.upper < value + 3.0 * rows.std(ddof=1)


def test_a_fitted_estimator_certifies_its_bounds_on_later_rows(adult_small):
    """``clf.certify(X, y, sensitive_features=S)``: the statement of fairopt.certify on those rows encoded as the
    training rows were, its realised value the DI of predict() by hand, passed exactly when its lower bound
    reaches the bound, a wider interval at a higher level."""
    X, y, S = adult_small
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        clf = FairClassifier(("disparate_impact", "sex", 0.8), epochs=60).fit(X.iloc[:700], y.iloc[:700],
                                                                             sensitive_features=S.iloc[:700])
    later, later_y, later_s = X.iloc[700:], y.iloc[700:], S.iloc[700:]
    (cert,) = clf.certify(later, later_y, sensitive_features=later_s)
    pred = clf.predict(later) == clf.pos_label_
    s = later_s["sex"].to_numpy()
    rates = {g: pred[s == g].mean() for g in np.unique(s)}
    assert cert.realised == pytest.approx(min(rates.values()) / max(rates.values()))
    assert cert.n == len(later) and cert.confidence == clf.confidence
    assert cert.passed == (cert.lower >= 0.8)
    (strict,) = clf.certify(later, later_y, sensitive_features=later_s, confidence=0.99, method="clopper-pearson")
    assert strict.confidence == 0.99 and strict.lower <= cert.lower  # wider: a higher level, an exact interval
    with pytest.raises(ValueError, match="y: required"):
        clf.certify(later, sensitive_features=later_s)
