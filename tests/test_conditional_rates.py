"""Label-conditioned rate constraints (fairopt.constraints.conditional): equal opportunity
(TPR), false-positive-rate parity (FPR) and equalized odds (both), ratio and difference forms.

Every row is checked against TPR/FPR computed independently with numpy from the labels, the
group codes and the (hard or surrogate) predictions.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch
from sklearn.base import clone

import fairopt
from fairopt.certificate import certify
from fairopt.constraints import DemographicParity, EqualImpact, EqualizedOdds, EqualOpportunity, FalsePositiveParity
from fairopt.data import FairData
from fairopt.estimators import FairClassifier
from fairopt.exceptions import FairnessWarning
from fairopt.specs import build_constraint, constraint_builder, constraint_from_spec, constraint_to_spec
from fairopt.surrogates import Sigmoid
from solvers import StochasticSQP

pytestmark = pytest.mark.usefixtures("one_torch_thread")

BLOCKS = {EqualOpportunity: [("TPR", 1)], FalsePositiveParity: [("FPR", 0)],
          EqualizedOdds: [("TPR", 1), ("FPR", 0)]}


# ----------------------------------------------------------------------------- numpy reference
def make_data(n: int = 300, seed: int = 0, y: np.ndarray | None = None) -> FairData:
    """Random FairData with a binary ``sex``, a 3-level ``race`` and a 0/1 target."""
    rng = np.random.default_rng(seed)
    sensitive = {"sex": rng.integers(0, 2, n), "race": rng.choice(["a", "b", "c"], n, p=[0.5, 0.3, 0.2])}
    y = (rng.random(n) < 0.4).astype(int) if y is None else y
    return FairData.from_arrays(rng.normal(size=(n, 3)), y, sensitive)


def group_codes(data: FairData, names: list[str]) -> tuple[np.ndarray, int]:
    """Cell of every row (row-major over ``names``, the last fastest) and the number of cells."""
    cells, K = np.zeros(len(data), dtype=int), 1
    for name in names:
        k = len(data.sensitive_levels[name]) if data.sensitive_kinds[name] == "categorical" else 2
        cells, K = cells * k + data.sensitive[name].numpy().astype(int), K * k
    return cells, K


def comparisons(cells: np.ndarray, K: int, groups: str) -> list[tuple[np.ndarray, np.ndarray]]:
    """(focus mask, reference mask) per comparison, in the library's order."""
    if K == 2:
        return [(cells == 1, cells == 0)]
    if groups == "pairwise":
        return [(cells == h, cells == g) for g in range(K) for h in range(g + 1, K)]
    return [(cells == g, cells != g) for g in range(K)]


def reference_rows(v: np.ndarray, y: np.ndarray, pairs, blocks, delta=None, bound=None) -> np.ndarray:
    """Rows by hand: per block (label), per comparison, the ratio pair or the difference;
    0 when a side has no row with the block's label."""
    rows = []
    for _, label in blocks:
        for focus, ref in pairs:
            f, r = focus & (y == label), ref & (y == label)
            empty = not f.any() or not r.any()
            R_f, R_r = (0.0, 0.0) if empty else (v[f].mean(), v[r].mean())
            rows += [delta * R_r - R_f, delta * R_f - R_r] if delta is not None else [R_f - R_r]
    return np.array(rows)


def hard_rate(pred: np.ndarray, mask: np.ndarray) -> float:
    return float(pred[mask].mean())


def binary_ratio(pred, y, s, label) -> float:
    """min(R_1 / R_0, R_0 / R_1) of the rate among rows with ``y == label``."""
    r = [hard_rate(pred, (s == g) & (y == label)) for g in (0, 1)]
    return min(r) / max(r)


CASES = [
    (["sex"], "one_vs_rest"),
    (["race"], "one_vs_rest"),
    (["race"], "pairwise"),
    (["sex", "race"], "one_vs_rest"),
    (["sex", "race"], "pairwise"),
]


@pytest.mark.parametrize("cls", [EqualOpportunity, FalsePositiveParity, EqualizedOdds])
@pytest.mark.parametrize("names, groups", CASES)
@pytest.mark.parametrize("form", [{"delta": 0.8}, {"bound": 0.05}])
def test_rows_equal_numpy_rates(cls, names, groups, form):
    data = make_data()
    out = torch.randn(len(data), dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    c = cls(names if len(names) > 1 else names[0], groups=groups, surrogate=Sigmoid(scale=3.0), **form)
    c.setup(data)
    cells, K = group_codes(data, names)
    pairs = comparisons(cells, K, groups)
    y = data.y.numpy()
    hard = (out.numpy() > 0).astype(float)
    expected_exact = reference_rows(hard, y, pairs, BLOCKS[cls], **form)
    np.testing.assert_allclose(c.exact(out, data).numpy(), expected_exact, rtol=0, atol=1e-12)
    smooth = 1.0 / (1.0 + np.exp(-3.0 * out.numpy()))
    np.testing.assert_allclose(c(out, data).detach().numpy(), reference_rows(smooth, y, pairs, BLOCKS[cls], **form),
                               rtol=0, atol=1e-12)
    # bounds and names: one block per label, in order
    per_block = len(pairs) * (2 if "delta" in form else 1)
    assert c.n_rows == len(c.row_names) == per_block * len(BLOCKS[cls])
    for b, (label, _) in enumerate(BLOCKS[cls]):
        block_names = c.row_names[b * per_block:(b + 1) * per_block]
        assert all(name.startswith(f"{c.kind}[") and f"]:{label}:" in name for name in block_names)
    if "delta" in form:
        assert c.lower.isinf().all() and (c.upper == 0).all()
    else:
        assert (c.lower == -0.05).all() and (c.upper == 0.05).all()


def test_binary_exact_rows_are_the_tpr_and_fpr_ratio_and_difference():
    """At delta equal to the realised hard TPR (FPR) ratio the binding row of its block is 0;
    the difference rows are TPR_1 - TPR_0 and FPR_1 - FPR_0."""
    data = make_data(400, seed=3)
    out = torch.randn(len(data), dtype=torch.float64, generator=torch.Generator().manual_seed(2))
    pred, y, s = (out.numpy() > 0).astype(float), data.y.numpy(), data.sensitive["sex"].numpy()
    tpr_ratio, fpr_ratio = binary_ratio(pred, y, s, 1), binary_ratio(pred, y, s, 0)
    assert EqualOpportunity("sex", delta=tpr_ratio).exact(out, data).max().item() == pytest.approx(0.0, abs=1e-12)
    assert FalsePositiveParity("sex", delta=fpr_ratio).exact(out, data).max().item() == pytest.approx(0.0, abs=1e-12)
    rows = EqualizedOdds("sex", delta=min(tpr_ratio, fpr_ratio)).exact(out, data)
    assert rows.max().item() == pytest.approx(0.0, abs=1e-12) and rows.numel() == 4
    diff = EqualizedOdds("sex", bound=0.1).exact(out, data).numpy()
    expected = [hard_rate(pred, (s == 1) & (y == label)) - hard_rate(pred, (s == 0) & (y == label)) for label in (1, 0)]
    np.testing.assert_allclose(diff, expected, rtol=0, atol=1e-12)


def test_equal_opportunity_ratio_form_has_the_rows_of_equal_impact():
    data = make_data(200, seed=4)
    out = torch.randn(len(data), dtype=torch.float64)
    for names in ("sex", "race", ["sex", "race"]):
        eo, ei = EqualOpportunity(names, delta=0.7), EqualImpact(names, delta=0.7)
        assert torch.equal(eo(out, data), ei(out, data)) and torch.equal(eo.exact(out, data), ei.exact(out, data))
        assert [n.replace("equal_opportunity", "equal_impact").replace(":TPR:", ":") for n in eo.row_names] \
            == ei.row_names
        assert eo.rate_form == ei.rate_form == "ratio"
    assert EqualOpportunity("sex", bound=0.1).rate_form == "difference"


def test_equalized_odds_is_equal_opportunity_and_fpr_parity_stacked():
    data = make_data(250, seed=5)
    out = torch.randn(len(data), dtype=torch.float64, requires_grad=True)
    for form in ({"delta": 0.9}, {"bound": 0.02}):
        eodds = EqualizedOdds("race", groups="pairwise", **form)
        parts = [EqualOpportunity("race", groups="pairwise", **form), FalsePositiveParity("race", groups="pairwise",
                                                                                          **form)]
        assert torch.allclose(eodds(out, data), torch.cat([p(out, data) for p in parts]), rtol=0, atol=1e-15)
        g1 = torch.autograd.grad(eodds(out, data).sum(), out)[0]
        g2 = torch.autograd.grad(sum(p(out, data).sum() for p in parts), out)[0]
        assert torch.allclose(g1, g2, rtol=0, atol=1e-13)


# ----------------------------------------------------------------------------- empty groups
def test_empty_conditioned_group_rows_are_zero_and_setup_warns():
    """Group sex=1 has no row with y = 0: its FPR rows are 0 (no information); TPR rows are not.
    (Every other compared group has at least MIN_GROUP_ROWS rows, so that no other warning fires.)"""
    rng = np.random.default_rng(0)
    n = 200
    sex = rng.integers(0, 2, n)
    y = np.where(sex == 1, 1, (rng.random(n) < 0.5).astype(int))
    data = FairData.from_arrays(rng.normal(size=(n, 2)), y, {"sex": sex})
    out = torch.randn(n, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    c = EqualizedOdds("sex", delta=0.8)
    with pytest.warns(FairnessWarning, match="FPR"):
        c.setup(data)
    rows = c(out, data)
    assert rows[2:].tolist() == [0.0, 0.0] and bool((rows[:2] != 0).all())
    assert c.exact(out, data)[2:].tolist() == [0.0, 0.0]
    # the row is inactive: zero gradient
    out.requires_grad_(True)
    assert torch.autograd.grad(c(out, data)[2:].sum(), out, allow_unused=True)[0].abs().sum() == 0
    # the TPR-only constraint is complete and does not warn
    with warnings.catch_warnings():
        warnings.simplefilter("error", FairnessWarning)
        EqualOpportunity("sex", bound=0.1).setup(data)
    with pytest.warns(FairnessWarning):
        FalsePositiveParity("sex", bound=0.1).setup(data)
    # a target encoding row of an empty side is 0 as well
    assert np.all(c.target_encoding(data).A_z[2:] == 0)


# ----------------------------------------------------------------------------- validation
@pytest.mark.parametrize("cls", [EqualOpportunity, FalsePositiveParity, EqualizedOdds])
def test_exactly_one_of_delta_and_bound(cls):
    for kwargs in ({}, {"delta": 0.8, "bound": 0.1}, {"delta": None, "bound": None}):
        with pytest.raises(ValueError, match="exactly one of delta"):
            cls("sex", **kwargs)
    with pytest.raises(ValueError, match="delta"):
        cls("sex", delta=1.5)
    with pytest.raises(ValueError, match="bound"):
        cls("sex", bound=-0.1)
    with pytest.raises(ValueError, match=r"bound: expected a number in \[0, 1\], got 1.5"):  # rates differ by <= 1
        cls("sex", bound=1.5)
    with pytest.raises(ValueError, match=r"bound: expected a number in \[0, 1\]"):
        DemographicParity("sex", bound=1.5)
    with pytest.raises(ValueError, match="groups"):
        cls("sex", delta=0.8, groups="all")


def test_labels_must_be_binary():
    data = make_data(50)
    bad = FairData.from_arrays(np.zeros((50, 1)), np.arange(50) % 3, {"sex": data.sensitive["sex"].numpy()},
                               task="regression")
    with pytest.raises(ValueError, match="y"):
        EqualizedOdds("sex", delta=0.8)(torch.zeros(50, dtype=torch.float64), bad)


# ----------------------------------------------------------------------------- params and specs
@pytest.mark.parametrize("cls", [EqualOpportunity, FalsePositiveParity, EqualizedOdds])
def test_params_protocol_and_clone(cls):
    c = cls(["sex", "race"], delta=0.8, surrogate="sigmoid", groups="pairwise")
    params = c.get_params(deep=True)
    assert params == c.get_params(deep=False)
    assert set(params) == {"sensitive", "delta", "bound", "surrogate", "threshold", "groups"}
    assert params["delta"] == 0.8 and params["bound"] is None
    copy = clone(c)
    assert type(copy) is cls and copy is not c and copy.get_params().keys() == params.keys()
    assert copy.delta == 0.8 and copy.groups == "pairwise" and copy.surrogate.name == c.surrogate.name
    data = make_data(120)
    c.setup(data)
    assert clone(c)._partitions is None  # a clone is not set up
    # switching the form: the other argument goes to None in the same call
    with pytest.raises(ValueError, match="exactly one"):
        c.set_params(bound=0.1)
    assert c.delta == 0.8
    c.set_params(delta=None, bound=0.1)
    assert c.rate_form == "difference" and c.bound == 0.1 and c.delta is None
    c.setup(data)
    assert (c.upper == 0.1).all()


@pytest.mark.parametrize("spec, cls, form", [
    ("eo:sex>=0.8", EqualOpportunity, {"delta": 0.8}),
    ("eo:sex<=0.05", EqualOpportunity, {"bound": 0.05}),
    ("equal_opportunity:sex:0.7", EqualOpportunity, {"delta": 0.7}),
    ("fpr:sex>=0.8", FalsePositiveParity, {"delta": 0.8}),
    ("false_positive_parity:sex<=0.1", FalsePositiveParity, {"bound": 0.1}),
    ("eodds:sex>=0.8", EqualizedOdds, {"delta": 0.8}),
    ("equalized_odds:sex>=0.8", EqualizedOdds, {"delta": 0.8}),
    ("eodds:sex, race<=0.02", EqualizedOdds, {"bound": 0.02}),
    (("eodds", "sex", 0.9), EqualizedOdds, {"delta": 0.9}),
    (("eo", ["sex", "race"], 0.05, {"delta": None, "groups": "pairwise"}), EqualOpportunity, {"bound": 0.05}),
    ({"kind": "fpr", "sensitive": "sex", "bound": 0.03}, FalsePositiveParity, {"bound": 0.03}),
])
def test_spec_parsing_and_round_trip(spec, cls, form):
    c = constraint_from_spec(spec)
    assert type(c) is cls
    assert {k: c.get_params()[k] for k in ("delta", "bound")} == {"delta": None, "bound": None, **form}
    table = constraint_to_spec(c)
    assert table["kind"] == {EqualOpportunity: "equal_opportunity", FalsePositiveParity: "false_positive_parity",
                             EqualizedOdds: "equalized_odds"}[cls]
    rebuilt = constraint_from_spec(table)
    assert type(rebuilt) is cls and rebuilt.get_params() == c.get_params()


def test_spec_comparisons_and_sweeps():
    # the comparison also reads for the single-form kinds, and must match the form
    assert build_constraint("di:sex>=0.8").delta == 0.8 and build_constraint("dp:sex<=0.05").bound == 0.05
    for bad in ("di:sex<=0.05", "dp:sex>=0.8", "eo:sex>=0.8:1", "eo:sex>=x", "eo:sex", "eodds:>=0.8"):
        with pytest.raises(ValueError, match="spec"):
            constraint_from_spec(bad)
    # a sweep varies the argument of the spec's form
    build, name, default = constraint_builder("eodds:sex<=0.05")
    assert (name, default) == ("bound", 0.05) and build(0.1).bound == 0.1 and build(0.1).delta is None
    build, name, default = constraint_builder("eodds:sex")
    assert (name, default) == ("delta", None) and build(0.7).delta == 0.7


# ----------------------------------------------------------------------------- linear machinery
@pytest.mark.parametrize("cls", [EqualOpportunity, FalsePositiveParity, EqualizedOdds])
@pytest.mark.parametrize("names, groups", CASES)
def test_target_encoding_equals_exact_on_hard_labels(cls, names, groups):
    data = make_data(200, seed=6)
    out = torch.randn(len(data), dtype=torch.float64, generator=torch.Generator().manual_seed(3))
    for form in ({"delta": 0.75}, {"bound": 0.04}):
        c = cls(names, groups=groups, **form)
        c.setup(data)
        enc = c.target_encoding(data)
        z = (out > 0).double().numpy()
        np.testing.assert_allclose(enc.A_z @ z, c.exact(out, data).numpy(), rtol=0, atol=1e-12)
        np.testing.assert_array_equal(enc.lb, c.lower.numpy())
        np.testing.assert_array_equal(enc.ub, c.upper.numpy())
        assert enc.meta["row_names"] == c.row_names


@pytest.mark.parametrize("cls", [EqualOpportunity, FalsePositiveParity, EqualizedOdds])
@pytest.mark.parametrize("names, groups", [(["sex"], "one_vs_rest"), (["race"], "pairwise"),
                                           (["sex", "race"], "one_vs_rest")])
def test_partial_sums_over_shards_equal_the_direct_call(cls, names, groups):
    data = make_data(240, seed=7)
    out = torch.randn(len(data), dtype=torch.float64, generator=torch.Generator().manual_seed(4))
    perm = torch.randperm(len(data), generator=torch.Generator().manual_seed(5))
    shards = [perm[:70], perm[70:160], perm[160:]]
    for form in ({"delta": 0.8}, {"bound": 0.05}):
        c = cls(names, groups=groups, **form)
        c.setup(data)
        for exact in (False, True):
            parts = [c.partial_sums(out[i], data.subset(i), exact=exact) for i in shards]
            sums, counts = sum(p[0] for p in parts), sum(p[1] for p in parts)
            direct = c.exact(out, data) if exact else c(out, data)
            assert torch.allclose(c.from_sums(sums, counts), direct, rtol=0, atol=1e-12)
        # gradients through the sums match autograd of the direct rows
        x = out.clone().requires_grad_(True)
        sums, counts = c.partial_sums(x, data)
        g1 = torch.autograd.grad(c.from_sums(sums, counts).sum(), x)[0]
        g2 = torch.autograd.grad(c(x, data).sum(), x)[0]
        assert torch.allclose(g1, g2, rtol=0, atol=1e-12)


def test_certificate_measures_the_tpr_and_fpr_rates():
    """The ratio form certifies min over TPR and FPR ratios, the difference form the max
    absolute TPR/FPR difference (realised values by hand)."""
    data = make_data(600, seed=8)
    out = torch.randn(len(data), dtype=torch.float64, generator=torch.Generator().manual_seed(6))
    pred, y, s = (out.numpy() > 0).astype(float), data.y.numpy(), data.sensitive["sex"].numpy()
    ratio = certify(out.numpy(), data, EqualizedOdds("sex", delta=0.5))
    assert ratio.realised == pytest.approx(min(binary_ratio(pred, y, s, 1), binary_ratio(pred, y, s, 0)), abs=1e-12)
    assert ratio.measure == "equalized_odds ratio" and ratio.bound_side == "lower" and ratio.bound == 0.5
    assert ratio.lower <= ratio.realised <= ratio.upper
    diff = certify(out.numpy(), data, EqualOpportunity("sex", bound=0.2), method="clopper-pearson")
    tpr = [hard_rate(pred, (s == g) & (y == 1)) for g in (0, 1)]
    assert diff.realised == pytest.approx(abs(tpr[1] - tpr[0]), abs=1e-12)
    assert diff.measure == "equal_opportunity difference" and diff.bound_side == "upper"
    assert diff.lower <= diff.realised <= diff.upper


# ----------------------------------------------------------------------------- training on Adult
@pytest.fixture(scope="module")
def adult_4000():
    data = fairopt.datasets.load("adult")
    idx = torch.randperm(len(data), generator=torch.Generator().manual_seed(0))[:4000]
    return data.subset(idx)


def exact_ratios(pred: np.ndarray, data: FairData) -> tuple[float, float]:
    """Hard TPR and FPR ratios min(R_0/R_1, R_1/R_0) by sex, by hand."""
    y, s = data.y.numpy(), data.sensitive["sex"].numpy()
    return binary_ratio(pred, y, s, 1), binary_ratio(pred, y, s, 0)


def test_sqp_meets_equalized_odds_on_adult(adult_4000):
    data = adult_4000
    free = fairopt.models.linear(data.n_features, seed=0)
    StochasticSQP(epochs=150, lr_kmin=50).fit(free, data, loss="bce", constraints=[])
    with torch.no_grad():
        assert min(exact_ratios((free(data.X) > 0).double().numpy(), data)) < 0.5  # the constraint binds
    # The smoothed Jacobian rows of TPR and FPR can nearly vanish at an iterate of a linear
    # model, so the linearised bound lies far away: the full-batch trust region keeps such
    # steps short, and a run that ends a hair outside the bound is polished from its last
    # iterate (measured, seeds 0-143: all feasible, training accuracy 0.805-0.858, median
    # 0.851, returned loss <= 0.394; before: 132 of 144 feasible, returned loss up to 4.8).
    # Each seed must keep the engine's contract (the bound holds on the hard labels, or the
    # result says it does not).
    accuracies, met = [], 0
    for seed in (0, 1, 2):
        model = fairopt.models.linear(data.n_features, seed=seed)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            result = StochasticSQP(epochs=150, lr_kmin=50).fit(model, data, loss="bce",
                                                               constraints=[EqualizedOdds("sex", delta=0.8)])
        with torch.no_grad():
            pred = (model(data.X) > 0).double().numpy()
        tpr, fpr = exact_ratios(pred, data)
        assert result.feasible == (tpr >= 0.8 and fpr >= 0.8), (seed, tpr, fpr)
        assert (result.history[-1]["V_exact"] == 0.0) == result.feasible and len(result.history[-1]["c"]) == 4
        met += result.feasible
        accuracies.append((pred == data.y.numpy()).mean())
        assert result.history[-1]["f"] < 0.45, (seed, result.history[-1]["f"])
    assert met == 3 and min(accuracies) > 0.79 and np.median(accuracies) > 0.82, (met, accuracies)


def test_fair_classifier_spec_meets_equalized_odds(adult_4000):
    data = adult_4000
    X, y, s = data.X.numpy().astype(np.float64), data.y.numpy(), data.sensitive["sex"].numpy()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        clf = FairClassifier(constraints="eodds:sex>=0.8", method="sqp").fit(X, y, sensitive_features={"sex": s})
    assert type(clf.constraints_[0]) is EqualizedOdds and clf.constraints_[0].delta == 0.8
    tpr, fpr = exact_ratios(clf.predict(X).astype(float), data)
    assert tpr >= 0.8 and fpr >= 0.8, (tpr, fpr)
    assert clf.train_violations_ == {"equalized_odds[sex]": 0.0}


@pytest.mark.parametrize("method, options", [
    ("penalty", {"epochs": 300}),
    ("lagrangian", {"epochs": 300}),
    ("moving_targets", {"epochs": 5, "engine_params": {"iterations": 2}}),
])
def test_other_methods_train_with_equalized_odds(adult_4000, method, options):
    data = adult_4000.subset(torch.arange(2000))
    X, y, s = data.X.numpy().astype(np.float64), data.y.numpy(), data.sensitive["sex"].numpy()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        clf = FairClassifier(constraints=("equalized_odds", "sex", 0.8), method=method, **options).fit(
            X, y, sensitive_features={"sex": s})
    assert set(clf.train_violations_) == {"equalized_odds[sex]"}
    assert np.isfinite(clf.train_violation_)
    assert np.isfinite(clf.decision_function(X)).all()
    if method == "moving_targets":  # the master problem's targets meet the linear rows exactly
        assert all(r["V_targets"] == 0.0 for r in clf.history_.records)
    else:
        assert min(exact_ratios(clf.predict(X).astype(float), data)) > 0.6
