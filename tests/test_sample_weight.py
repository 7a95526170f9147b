"""Per-row sample weights end to end: FairData, losses, rate rows, engines, estimators.

The key equivalence: integer weights are row duplication. Every weighted quantity (the
losses, the smooth and exact group rates, their additive sums and linear encodings, the
covariance, a full-batch SQP fit) equals the unweighted one on the data with row ``i``
repeated ``w_i`` times (a weight 0 removes the row). Weights that are all equal give the
unweighted results bit for bit.
"""

from __future__ import annotations

import datetime
import socket
import warnings

import numpy as np
import pandas as pd
import pytest
import sklearn
import torch
import torch.distributed as dist
from sklearn.model_selection import GridSearchCV, KFold
from sklearn.pipeline import Pipeline
from sklearn.preprocessing import StandardScaler

import fairopt
from fairopt import FairClassifier, FairData, FairRegressor
from fairopt.certificate import auto_margin, certify
from fairopt.constraints import (Covariance, DemographicParity, DisparateImpact, DistanceCovariance, EqualImpact,
                                 EqualizedOdds, EqualOpportunity, GeDI)
from fairopt.data import load_memmap, save_memmap
from fairopt.exceptions import FairnessWarning
from fairopt.learners import TorchLearner
from fairopt.models import linear
from fairopt.penalties import FaUCI, GeDIPenalty
from fairopt.surrogates import Sigmoid
from solvers import StochasticSQP
from solvers.derivatives import LocalDerivatives
from solvers.lagrangian import LagrangianDual
from solvers.losses import bce_loss, mse_loss, poisson_loss
from solvers.moving_targets import MovingTargets
from solvers.penalty import Penalty
from solvers.problem import as_constraint_set, check_dataset, trainable_parameters
from solvers.sampling import BalancedSampler
from solvers.sums import ChunkedDerivatives, add_sums, derivatives_from_sums, local_sums


# ----------------------------------------------------------------------------- data
def _arrays(n: int = 80, seed: int = 0):
    """Inputs, 0/1 labels, a binary and a 3-level sensitive feature, integer weights 0..3
    (some 0) that depend on the group and the label, so that weighted rates differ."""
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, 3))
    s = rng.integers(0, 2, n)
    r = rng.integers(0, 3, n)
    y = (rng.random(n) < 0.3 + 0.3 * s).astype(float)
    w = rng.integers(0, 4, n) + (s == 1) * (y == 1) * 2
    w[:4] = [1, 2, 0, 3]
    return X, y, s, r, w


def _pair(n: int):
    """(weighted data, the same rows repeated w_i times, the repeat index), encoded by ONE
    preprocessor so that X of a repeated row is X of its original."""
    X, y, s, r, w = _arrays(n)
    weighted = FairData.from_arrays(X, y, {"s": s, "r": r}, sample_weight=w, sensitive_kinds={"r": "categorical"})
    rep = np.repeat(np.arange(len(w)), w)
    repeated = FairData.from_arrays(X[rep], y[rep], {"s": s[rep], "r": r[rep]}, sensitive_kinds={"r": "categorical"},
                                    preprocessor=weighted.preprocessor)
    assert torch.equal(repeated.X, weighted.X[torch.as_tensor(rep)])
    return weighted, repeated, torch.as_tensor(rep)


@pytest.fixture(scope="module")
def pair():
    return _pair(80)


@pytest.fixture(scope="module")
def pair200():
    """A larger pair on which the engines' iterations are well conditioned (no divergence
    guard, no relaxed QP), so that float32 rounding is all that separates the two runs."""
    return _pair(200)


def _outputs(n: int, seed: int = 1) -> torch.Tensor:
    return torch.as_tensor(np.random.default_rng(seed).normal(size=n), dtype=torch.float64)


def test_fairdata_keeps_weights_through_subset_split_to_and_memmap(tmp_path):
    X, y, s, r, w = _arrays()
    frame = pd.DataFrame({"a": X[:, 0], "b": X[:, 1], "s": s, "y": y, "w": w})
    data = FairData.from_frame(frame, target="y", sensitive="s", weights="w")
    assert data.feature_names == ["a", "b"]  # the weights column is never an input
    assert data.weights.dtype == torch.float64 and data.weights_name == "w"
    assert torch.equal(data.weights, torch.as_tensor(w, dtype=torch.float64))
    assert "weights='w'" in repr(data)
    idx = torch.tensor([5, 0, 7])
    assert torch.equal(data.subset(idx).weights, data.weights[idx])
    assert torch.equal(data.subset(data.y == 1).weights, data.weights[data.y == 1])
    train, test = data.split(test_size=0.25, seed=0)
    assert torch.equal(torch.sort(torch.cat([train.weights, test.weights])).values, torch.sort(data.weights).values)
    assert torch.equal(train.weights, data.weights[train._rows])
    assert torch.equal(data.to("cpu").weights, data.weights)
    # new rows: the weights column when present, else unweighted; an explicit array wins
    assert torch.equal(data.transform(frame).weights, data.weights)
    assert data.transform(frame.drop(columns="w")).weights is None
    explicit = data.transform(frame.drop(columns="w"), weights=np.arange(1, len(frame) + 1))
    assert torch.equal(explicit.weights, torch.arange(1, len(frame) + 1, dtype=torch.float64))
    loaded = load_memmap(save_memmap(data, tmp_path / "rows"))
    assert torch.equal(loaded.weights, data.weights) and loaded.weights_name == "w"
    unweighted = load_memmap(save_memmap(FairData.from_frame(frame, target="y", sensitive="s"), tmp_path / "plain"))
    assert unweighted.weights is None


def test_equal_weights_are_stored_as_unweighted():
    X, y, s, _, _ = _arrays()
    for weights in (np.ones(len(y)), np.full(len(y), 2.5), 3.0):
        assert FairData.from_arrays(X, y, {"s": s}, sample_weight=weights).weights is None


# ----------------------------------------------------------------------------- (c) errors
@pytest.mark.parametrize("weights, message", [
    (np.ones(79), "length mismatch|79"),
    (np.r_[-1.0, np.ones(79)], ">= 0"),
    (np.r_[np.nan, np.ones(79)], "NaN"),
    (np.r_[np.inf, np.ones(79)], "NaN or infinite"),
    (np.zeros(80), "all weights are zero"),
    (np.array(["a"] * 80), "numbers"),
    (np.ones((80, 2)), "1-D"),
])
def test_invalid_weights_are_refused_with_a_clear_message(weights, message):
    X, y, s, _, _ = _arrays()
    with pytest.raises(ValueError, match=message):
        FairData.from_arrays(X, y, {"s": s}, sample_weight=weights)
    if weights.ndim == 1:
        with pytest.raises(ValueError, match=message):
            FairClassifier(epochs=2).fit(X, y, sample_weight=weights)


def test_invalid_weights_column_is_refused():
    X, y, s, _, w = _arrays()
    frame = pd.DataFrame({"a": X[:, 0], "s": s, "y": y, "w": w, "flag": w > 1, "text": ["x"] * len(w)})
    for column, message in (("nope", "weights"), ("y", "target"), ("s", "sensitive"), ("flag", "numbers"),
                            ("text", "numbers")):
        with pytest.raises(ValueError, match=message):
            FairData.from_frame(frame, target="y", sensitive="s", weights=column)
    with pytest.raises(ValueError, match="weights column"):
        FairData.from_frame(frame, target="y", sensitive="s", features=["a", "w"], weights="w")
    numbers_as_text = frame.assign(w=frame["w"].astype(str))
    assert torch.equal(FairData.from_frame(numbers_as_text, target="y", sensitive="s", features=["a"],
                                           weights="w").weights, torch.as_tensor(w, dtype=torch.float64))


def test_engines_refuse_a_batch_with_invalid_weights(pair):
    weighted, _, _ = pair
    bad = weighted.subset(torch.arange(len(weighted)))
    bad.weights = -bad.weights
    with pytest.raises(ValueError, match="data.weights"):
        check_dataset(bad)
    bad.weights = torch.ones(3, dtype=torch.float64)
    with pytest.raises(ValueError, match="batch.weights"):
        bce_loss(torch.zeros(len(bad)), bad)


# ----------------------------------------------------------------------------- (a) losses
@pytest.mark.parametrize("loss", [bce_loss, mse_loss, poisson_loss])
def test_weighted_loss_equals_the_loss_on_repeated_rows(pair, loss):
    weighted, repeated, rep = pair
    out = _outputs(len(weighted)).requires_grad_(True)
    got = loss(out, weighted)
    expected = loss(out[rep], repeated)
    torch.testing.assert_close(got, expected, rtol=1e-12, atol=0)
    (g_got,) = torch.autograd.grad(got, out)
    (g_exp,) = torch.autograd.grad(expected, out)
    torch.testing.assert_close(g_got, g_exp, rtol=1e-12, atol=1e-15)


def test_weighted_mean_of_a_batch_with_zero_weights_is_zero(pair):
    weighted, _, _ = pair
    zero = weighted.subset(torch.nonzero(weighted.weights == 0).reshape(-1))
    out = torch.zeros(len(zero), requires_grad=True)
    value = bce_loss(out, zero)
    assert float(value.detach()) == 0.0
    (grad,) = torch.autograd.grad(value, out)
    assert bool((grad == 0).all())


# ----------------------------------------------------------------------------- (a) rate rows
CONSTRAINTS = [
    lambda: DisparateImpact("s", delta=0.8),
    lambda: DisparateImpact("r", delta=0.8, groups="pairwise"),
    lambda: DisparateImpact(["s", "r"], delta=0.8),
    lambda: DemographicParity("s", bound=0.05),
    lambda: DemographicParity("r", bound=0.05),
    lambda: EqualImpact("s", delta=0.8),
    lambda: EqualOpportunity("s", bound=0.05),
    lambda: EqualOpportunity("r", delta=0.8),
    lambda: EqualizedOdds("s", bound=0.1),
]


def _assert_rows_match(make, weighted, repeated, rep):
    """Smooth and exact rows of a constraint on the weighted rows equal those on the rows
    repeated by their integer weights; returns the weighted constraint and the outputs."""
    c_w, c_r = make(), make()
    c_w.setup(weighted)
    c_r.setup(repeated)
    out = _outputs(len(weighted))
    torch.testing.assert_close(c_w(out, weighted), c_r(out[rep], repeated), rtol=1e-12, atol=1e-14)
    torch.testing.assert_close(c_w.exact(out, weighted), c_r.exact(out[rep], repeated), rtol=1e-12, atol=1e-14)
    return c_w, out


@pytest.mark.parametrize("make", CONSTRAINTS)
def test_weighted_rows_equal_the_rows_on_repeated_data(pair, make):
    """Smooth and exact rows, additive sums and the linear target encoding."""
    weighted, repeated, rep = pair
    c_w, out = _assert_rows_match(make, weighted, repeated, rep)
    c_r = make()
    c_r.setup(repeated)
    # weighted sums and weighted counts: the repeated data's sums and counts
    for exact in (False, True):
        sums_w, counts_w = c_w.partial_sums(out, weighted, exact=exact)
        sums_r, counts_r = c_r.partial_sums(out[rep], repeated, exact=exact)
        torch.testing.assert_close(sums_w, sums_r, rtol=1e-12, atol=1e-12)
        torch.testing.assert_close(counts_w, counts_r, rtol=0, atol=0)
    # still additive over shards of the weighted rows
    halves = torch.arange(len(weighted)).tensor_split(2)
    parts = [c_w.partial_sums(out[h], weighted.subset(h)) for h in halves]
    total = c_w.from_sums(parts[0][0] + parts[1][0], parts[0][1] + parts[1][1])
    torch.testing.assert_close(total, c_w(out, weighted), rtol=1e-12, atol=1e-14)
    # the encoding: A_w z equals A_r z[rep] for any target vector z
    z = torch.as_tensor(np.random.default_rng(3).random(len(weighted)))
    A_w = torch.as_tensor(c_w.target_encoding(weighted).A_z)
    A_r = torch.as_tensor(c_r.target_encoding(repeated).A_z)
    torch.testing.assert_close(A_w @ z, A_r @ z[rep], rtol=1e-12, atol=1e-14)


def test_weighted_rates_are_the_numpy_weighted_group_means(pair):
    weighted, _, _ = pair
    c = DemographicParity("s", bound=0.05)
    c.setup(weighted)
    out = _outputs(len(weighted))
    positive = (out.numpy() > 0).astype(float)
    s, w = weighted.sensitive["s"].numpy(), weighted.weights.numpy()
    rates = [np.sum(w * positive * (s == g)) / np.sum(w * (s == g)) for g in (0, 1)]
    assert float(c.exact(out, weighted)[0]) == pytest.approx(rates[1] - rates[0], abs=1e-12)


def test_weighted_covariance_equals_the_covariance_on_repeated_data(pair):
    weighted, repeated, rep = pair
    for make in (lambda: Covariance("s", bound=0.1), lambda: Covariance("r", bound=0.1)):
        _assert_rows_match(make, weighted, repeated, rep)


def test_a_group_with_zero_total_weight_counts_as_empty():
    X, y, s, _, w = _arrays()
    w = w.astype(float) + 1.0
    w[s == 1] = 0.0
    data = FairData.from_arrays(X, y, {"s": s}, sample_weight=w)
    c = DemographicParity("s", bound=0.05)
    with pytest.warns(FairnessWarning, match="identically 0"):
        c.setup(data)
    assert float(c(_outputs(len(data)), data).abs().sum()) == 0.0


# ----------------------------------------------------------------------------- (a) derivatives and engines
def test_chunked_and_sharded_sums_of_weighted_rows_equal_one_pass(pair):
    weighted, _, _ = pair
    model = linear(weighted.n_features, seed=0)
    params = trainable_parameters(model)
    cons = as_constraint_set([DisparateImpact("s", delta=0.8), DemographicParity("r", bound=0.05)])
    cons.setup(weighted)
    ref = LocalDerivatives()(model, params, bce_loss, cons, weighted, weighted)
    got = ChunkedDerivatives(7)(model, params, bce_loss, cons, weighted, weighted)
    shards, total, sizes = torch.arange(len(weighted)).tensor_split(3), None, []
    for idx in shards:  # the data-parallel oracle's pieces, added as its all-reduce would
        shard = weighted.subset(idx)
        out = model(shard.X).reshape(-1)
        part, sizes = local_sums(out, shard, bce_loss, list(cons),
                                 lambda cot, out=out: torch.stack([torch.cat([g.reshape(-1) for g in torch.autograd.grad(
                                     out, params, grad_outputs=row, retain_graph=True)]) for row in cot]))
        total = add_sums(total, part)
    sharded = derivatives_from_sums(total, list(cons), sizes, params[0].dtype, True, 0.0, 0.0)
    for der in (got, sharded):
        assert der.f == pytest.approx(ref.f, rel=1e-6)
        torch.testing.assert_close(der.g, ref.g, rtol=1e-4, atol=1e-6)
        torch.testing.assert_close(der.c, ref.c, rtol=1e-6, atol=1e-7)
        torch.testing.assert_close(der.J.to(ref.J.dtype), ref.J, rtol=1e-4, atol=1e-6)
        torch.testing.assert_close(der.c_exact, ref.c_exact, rtol=0, atol=1e-6)


def _rows():
    """DI on the binary and DP on the 3-level feature, with the estimators' SQP surrogate."""
    return [DisparateImpact("s", delta=0.9, surrogate=Sigmoid()), DemographicParity("r", bound=0.05,
                                                                                    surrogate=Sigmoid())]


def _sqp_parameters(data, constraints, epochs=40, **options):
    model = linear(data.n_features, seed=0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        result = StochasticSQP(epochs=epochs, lr=0.5, **options).fit(model, data, loss="bce",
                                                                      constraints=constraints)
    return torch.cat([p.detach().reshape(-1) for p in model.parameters()]), result


@pytest.mark.parametrize("epochs", [10, 40])
def test_full_batch_sqp_on_weighted_rows_follows_the_repeated_rows(pair200, epochs):
    """The key equivalence on a whole fit: N full-batch SQP iterations (linear model, DI and
    DP rows) on the weighted data and on the repeated rows give the same parameters (10
    epochs: mid-run; 40: the run stops at the same feasible KKT point)."""
    weighted, repeated, _ = pair200
    theta_w, res_w = _sqp_parameters(weighted, _rows(), epochs=epochs)
    theta_r, res_r = _sqp_parameters(repeated, _rows(), epochs=epochs)
    assert res_w.status == res_r.status and len(res_w.history) == len(res_r.history) >= 10
    assert res_w.info["returned_iteration"] == res_r.info["returned_iteration"]
    torch.testing.assert_close(theta_w, theta_r, rtol=0, atol=1e-5)
    X, y, s, r, _ = _arrays(200)
    plain = FairData.from_arrays(X, y, {"s": s, "r": r}, sensitive_kinds={"r": "categorical"},
                                 preprocessor=weighted.preprocessor)
    theta_plain, _ = _sqp_parameters(plain, _rows(), epochs=epochs)
    assert float((theta_plain - theta_w).abs().max()) > 1e-2  # the weights do change the fit


@pytest.mark.parametrize("engine", [
    lambda: Penalty(weight=5.0, epochs=30, lr=0.05, seed=0),
    lambda: LagrangianDual(epochs=30, lr=0.05, seed=0),
])
def test_first_order_engines_on_weighted_rows_follow_the_repeated_rows(pair200, engine):
    weighted, repeated, _ = pair200
    thetas = []
    for data in (weighted, repeated):
        model = linear(data.n_features, seed=0)
        fitter = engine()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            if isinstance(fitter, Penalty):
                fitter.fit(model, data, loss="bce", penalties=_rows())
            else:
                fitter.fit(model, data, loss="bce", constraints=_rows())
        thetas.append(torch.cat([p.detach().reshape(-1) for p in model.parameters()]))
    torch.testing.assert_close(thetas[0], thetas[1], rtol=0, atol=1e-5)


@pytest.fixture
def one_rank_group():
    """A one-process gloo group in this process, always torn down."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=0, world_size=1,
                            timeout=datetime.timedelta(seconds=30))
    try:
        yield
    finally:
        dist.destroy_process_group()


@pytest.mark.parametrize("batch_size", [None, 100])
def test_data_parallel_sqp_on_weighted_rows_equals_the_local_engine(pair200, one_rank_group, batch_size):
    """The all-reduce oracle adds weighted loss sums, weight totals and weighted group sums:
    with one rank it reproduces the local engine on the weighted rows."""
    weighted, _, _ = pair200
    # mini-batches: DI alone (the 3-group DP rows on 100-row batches make the QP fragile,
    # weighted or not)
    rows = _rows if batch_size is None else (lambda: [DisparateImpact("s", delta=0.8, surrogate=Sigmoid())])
    # the local engine with the data-parallel fit's metric ("auto" resolves to "adam" there)
    got, res_got = _sqp_parameters(weighted, rows(), epochs=8, batch_size=batch_size, distributed=True)
    want, res_want = _sqp_parameters(weighted, rows(), epochs=8, batch_size=batch_size, distributed=False,
                                     hessian="adam")
    assert len(res_got.history) == len(res_want.history)
    torch.testing.assert_close(got, want, rtol=0, atol=1e-5)


def test_minibatches_and_balanced_batches_keep_each_rows_weight(pair200):
    weighted, _, _ = pair200
    sampler = BalancedSampler(weighted.strata, 5, torch.Generator().manual_seed(0))
    idx = sampler.sample()
    assert torch.equal(weighted.subset(idx).weights, weighted.weights[idx])
    for constraint_batch in ("batch", "balanced"):  # stochastic SQP runs on weighted mini-batches
        _, result = _sqp_parameters(weighted, [DisparateImpact("s", delta=0.8)], epochs=3, batch_size=32,
                                    constraint_batch=constraint_batch, polish_iterations=2)
        assert np.isfinite(result.history.column("f")).all()


class _RecordingLearner:
    """A scikit-learn learner that records the sample weights of every fit."""

    def __init__(self):
        from sklearn.linear_model import LogisticRegression

        self.inner, self.weights = LogisticRegression(), []

    def fit(self, X, y, sample_weight=None):
        self.weights.append(sample_weight)
        self.inner.fit(X, y, sample_weight=sample_weight)
        return self

    def predict(self, X):
        return self.inner.predict(X)


def test_moving_targets_refits_the_learner_with_the_weights(pair):
    weighted, _, _ = pair
    learner = _RecordingLearner()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        MovingTargets(iterations=2, backend="highs").fit(learner, weighted, constraints=[DisparateImpact("s", 0.8)])
    assert len(learner.weights) == 3  # pretraining and two refits
    for received in learner.weights:
        np.testing.assert_array_equal(received, weighted.weights.numpy())

    class NoWeights:
        def fit(self, X, y):
            return self

        def predict(self, X):
            return np.zeros(len(X))

    with pytest.raises(ValueError, match="sample_weight"):
        MovingTargets(iterations=1).fit(NoWeights(), weighted, constraints=[])


def test_torch_learner_weighted_full_batch_equals_repeated_rows(pair200):
    weighted, repeated, _ = pair200
    modules = []
    for data, weights in ((weighted, weighted.weights.numpy()), (repeated, None)):
        learner = TorchLearner(lambda p: linear(p, seed=0), epochs=20, batch_size=10_000, lr=0.05)
        learner.fit(data.X.numpy(), data.y.numpy(), sample_weight=weights)
        modules.append(torch.cat([p.detach().reshape(-1) for p in learner.module_.parameters()]))
    torch.testing.assert_close(modules[0], modules[1], rtol=0, atol=1e-5)


# ----------------------------------------------------------------------------- (b) bit-identical
def test_weights_of_ones_give_bit_identical_fits():
    X, y, s, _, _ = _arrays()
    plain = FairData.from_arrays(X, y, {"s": s})
    ones = FairData.from_arrays(X, y, {"s": s}, sample_weight=np.ones(len(y)))
    theta_plain, _ = _sqp_parameters(plain, [DisparateImpact("s", delta=0.9)], epochs=20)
    theta_ones, _ = _sqp_parameters(ones, [DisparateImpact("s", delta=0.9)], epochs=20)
    assert torch.equal(theta_plain, theta_ones)
    fits = []
    for weights in (None, np.ones(len(y)), 4.0):
        clf = FairClassifier("di:s>=0.9", epochs=20)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            clf.fit(X, y, sensitive_features={"s": s}, sample_weight=weights)
        fits.append(clf.decision_function(X))
    assert np.array_equal(fits[0], fits[1]) and np.array_equal(fits[0], fits[2])


# ----------------------------------------------------------------------------- (d) estimator
def test_fair_classifier_meets_the_weighted_disparate_impact_bound():
    rng = np.random.default_rng(7)
    n = 600
    s = rng.integers(0, 2, n)
    X = np.column_stack([rng.normal(size=n) + 0.8 * s, rng.normal(size=n)])
    y = (X[:, 0] + 0.5 * rng.normal(size=n) > 0.4).astype(int)
    # survey-like weights (not integers) that make the weighted disparity worse than the plain one
    w = np.where((s == 1) & (y == 1), 3.0, 1.0) * rng.uniform(0.5, 1.5, n)

    def ratio(positive, weights):
        rates = [np.sum(weights * positive * (s == g)) / np.sum(weights * (s == g)) for g in (0, 1)]
        return min(rates[0] / rates[1], rates[1] / rates[0])

    fits = {}
    for name, weights in (("weighted", w), ("plain", None)):
        clf = FairClassifier("di:s>=0.8", epochs=300)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", FairnessWarning)
            clf.fit(X, y, sensitive_features={"s": s}, sample_weight=weights)
        fits[name] = clf
    positive = (fits["weighted"].predict(X) == 1).astype(float)
    assert ratio(positive, w) >= 0.8 - 1e-6  # the WEIGHTED exact rates, by hand
    assert fits["weighted"].train_violation_ <= 1e-6
    # the unweighted fit meets the unweighted bound only: its weighted ratio is below 0.8
    plain = (fits["plain"].predict(X) == 1).astype(float)
    assert ratio(plain, np.ones(n)) >= 0.8 - 1e-6 > ratio(plain, w)
    clf = fits["weighted"]
    # the weighted score is scikit-learn's
    assert clf.score(X, y, sample_weight=w) == pytest.approx(np.average(clf.predict(X) == y, weights=w))
    # evaluate with the weights states the bound as the fit met it; without them, the plain rates
    bounds = clf.evaluate(X, y, sensitive_features={"s": s}, sample_weight=w)["bounds"]["disparate_impact[s]"]
    assert bounds["met"] and bounds["value"] == pytest.approx(ratio(positive, w), abs=1e-6)
    plain_value = clf.evaluate(X, y, sensitive_features={"s": s})["bounds"]["disparate_impact[s]"]["value"]
    assert plain_value == pytest.approx(ratio(positive, np.ones(n)), abs=1e-6)
    # the realised measures and the accuracy of a weighted evaluate are weighted too, as fairopt.metrics' and
    # group_report's with the same weights
    weighted = clf.evaluate(X, y, sensitive_features={"s": s}, sample_weight=w)
    assert weighted["di_ratio[s]"] == pytest.approx(ratio(positive, w), abs=1e-12)
    assert weighted["di_ratio[s]"] == pytest.approx(fairopt.metrics.disparate_impact(
        y, clf.predict(X), sensitive_features=s, sample_weight=w), abs=1e-12)
    assert weighted["accuracy"] == pytest.approx(clf.score(X, y, sample_weight=w), abs=1e-12)
    assert clf.evaluate(X, y, sensitive_features={"s": s})["di_ratio[s]"] == pytest.approx(
        ratio(positive, np.ones(n)), abs=1e-12)
    assert clf.check_generalisation(X, y, sensitive_features={"s": s}, sample_weight=w)["gap"].abs().max() <= 1e-6


@pytest.mark.parametrize("method, options", [
    ("penalty", {"lr": 0.05, "engine_params": {"weight": 5.0}}),
    ("lagrangian", {"lr": 0.05}),
    ("moving_targets", {"engine_params": {"iterations": 1}}),
])
def test_every_method_trains_on_weighted_rows(method, options):
    X, y, s, _, w = _arrays(n=120)
    clf = FairClassifier("di:s>=0.8", method=method, epochs=20, **options)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        clf.fit(X, y, sensitive_features={"s": s}, sample_weight=w)
    assert np.isfinite(clf.train_violation_) and np.isfinite(clf.decision_function(X)).all()


def test_fair_regressor_takes_sample_weight():
    X, y, s, _, w = _arrays()
    target = X @ np.array([1.0, -2.0, 0.5]) + s
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FairnessWarning)
        reg = FairRegressor(("covariance", "s", 0.05), epochs=200).fit(X, target, sensitive_features={"s": s},
                                                                       sample_weight=w)
    assert reg.train_violation_ <= 1e-5
    assert np.isfinite(reg.score(X, target, sample_weight=w))


def test_estimator_refuses_weights_with_held_out_certificates():
    X, y, s, _, w = _arrays()
    with pytest.raises(ValueError, match="validation_fraction.*sample weights"):
        FairClassifier("di:s>=0.8", epochs=2, validation_fraction=0.3).fit(X, y, sensitive_features={"s": s},
                                                                          sample_weight=w)
    with pytest.raises(ValueError, match="margin.*sample weights"):
        FairClassifier("di:s>=0.8", epochs=2, margin="auto").fit(X, y, sensitive_features={"s": s},
                                                                sample_weight=w)


def test_certificates_and_auto_margins_refuse_weighted_rows(pair):
    weighted, _, _ = pair
    c = DisparateImpact("s", delta=0.8)
    with pytest.raises(ValueError, match="certify.*does not support sample weights"):
        certify(_outputs(len(weighted)), weighted, c)
    with pytest.raises(ValueError, match="auto_margin.*does not support sample weights"):
        auto_margin(weighted, c)


# ----------------------------------------------------------------------------- (e) metadata routing
_SEEN: list[dict] = []


class _RecordingClassifier(FairClassifier):
    """Records the metadata each fit receives (clones share the module-level list)."""

    def fit(self, X, y, *, sensitive_features=None, sample_weight=None):
        _SEEN.append({"n": len(X), "sample_weight": np.asarray(sample_weight),
                      "sensitive_features": np.asarray(sensitive_features)})
        return super().fit(X, y, sensitive_features=sensitive_features, sample_weight=sample_weight)


def test_grid_search_routes_per_fold_weights_to_the_estimator():
    X, y, s, _, _ = _arrays(n=90, seed=3)
    w = 1.0 + np.arange(len(y)) / len(y)  # one distinct weight per row: identifies the rows
    _SEEN.clear()
    cv = KFold(n_splits=3, shuffle=True, random_state=0)
    with sklearn.config_context(enable_metadata_routing=True):
        clf = _RecordingClassifier("di:s>=0.8", epochs=5, sensitive_names="s")
        clf = clf.set_fit_request(sensitive_features=True, sample_weight=True)
        clf = clf.set_score_request(sample_weight=True)
        pipe = Pipeline([("scale", StandardScaler().set_fit_request(sample_weight=False)), ("clf", clf)])
        search = GridSearchCV(pipe, {"clf__epochs": [3, 5]}, cv=cv)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # short fits: unmet bounds, no progress
            search.fit(X, y, sensitive_features=s, sample_weight=w)
    folds = [train for train, _ in cv.split(X)]
    assert len(_SEEN) == 2 * len(folds) + 1  # every candidate on every fold, then the refit
    for call in _SEEN[:-1]:
        matches = [train for train in folds if np.array_equal(call["sample_weight"], w[train])]
        assert len(matches) == 1, "each fold's fit received exactly its training rows' weights"
        np.testing.assert_array_equal(call["sensitive_features"], s[matches[0]])
    np.testing.assert_array_equal(_SEEN[-1]["sample_weight"], w)
    assert np.isfinite(search.best_score_)


# ----------------------------------------------------------------------------- (f) unsupported
def test_gedi_dcov_and_fauci_refuse_weighted_data(pair):
    weighted, _, _ = pair
    with pytest.raises(ValueError, match="GeDI does not support sample weights yet"):
        GeDI("s", bound=0.1).setup(weighted)
    with pytest.raises(ValueError, match="GeDI does not support sample weights yet"):
        GeDIPenalty("s").setup(weighted)
    with pytest.raises(ValueError, match="Distance covariance does not support sample weights yet"):
        DistanceCovariance("s", bound=1e-3).setup(weighted)
    with pytest.raises(ValueError, match="FaUCI does not support sample weights yet"):
        FaUCI("wdp", "s").setup(weighted)
    X, y, s, _, w = _arrays()
    with pytest.raises(ValueError, match="GeDI does not support sample weights yet"):
        FairRegressor(("gedi", "s", 0.2), epochs=2).fit(X, X[:, 0], sensitive_features={"s": s}, sample_weight=w)
