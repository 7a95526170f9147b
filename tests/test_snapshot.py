"""Mini-batch SQP with constraint snapshots, and the engines' honest word on failed runs."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest
import torch

import fairopt
from fairopt.constraints import Covariance, DisparateImpact
from solvers import StochasticSQP
from solvers.derivatives import Derivatives, LocalDerivatives
from solvers.losses import constant_loss, get_loss
from solvers.outcome import (BestIterate, ConstantPredictorWarning, TrainingInstabilityWarning, training_accuracy,
                             warn_if_constant, warn_if_unstable)
from solvers.problem import as_constraint_set, trainable_parameters
from solvers.sqp.snapshot import DEFAULT_DRIFT_TOL, ConstraintSnapshot, drift_tolerances, refresh_steps


@pytest.fixture(scope="module")
def adult_small():
    data = fairopt.datasets.load("adult", include_sensitive=True)
    idx = torch.randperm(len(data), generator=torch.Generator().manual_seed(0))[:3000]
    return data.subset(idx)


def _accuracy(model, data) -> float:
    with torch.no_grad():
        return float(((model(data.X).reshape(-1) > 0).long() == data.y.long()).float().mean())


# ----------------------------------------------------------------------------- the snapshot
def test_refresh_steps():
    assert refresh_steps(10, 1) == 10 and refresh_steps(10, 2) == 5 and refresh_steps(11, 2) == 6
    assert refresh_steps(3, 5) == 1 and refresh_steps(1, 2) == 1


def test_snapshot_is_the_first_order_model_of_the_full_data_rows(adult_small):
    """``c = c_s + J_s (w - w_s)`` and ``J = J_s`` with ``c_s, J_s`` the full-data rows at ``w_s``;
    compared with a brute-force full-data evaluation after a small move: the difference is
    second order in the move."""
    model = fairopt.models.linear(adult_small.n_features, seed=0)
    params = trainable_parameters(model)
    cons = as_constraint_set([DisparateImpact("sex", delta=0.8, surrogate=fairopt.surrogates.Sigmoid(scale=1.0))])
    cons.setup(adult_small)
    oracle = LocalDerivatives()
    snapshot = ConstraintSnapshot(every=3)
    assert snapshot.due(1)  # no snapshot yet
    full = oracle(model, params, get_loss("bce"), cons, adult_small, adult_small)
    snapshot.refresh(params, full)
    assert snapshot.due(0) and snapshot.due(3) and not snapshot.due(1) and not snapshot.due(4)
    direction = torch.randn(sum(p.numel() for p in params), generator=torch.Generator().manual_seed(1))
    errors = []
    for eps in (1e-2, 5e-3):
        with torch.no_grad():
            offset = 0
            for p in params:
                p.add_(eps * direction[offset:offset + p.numel()].view_as(p))
                offset += p.numel()
        objective = Derivatives(0.0, torch.zeros_like(direction), torch.zeros(0), torch.zeros(0, 0), None, 0.0, 0.0)
        lin = snapshot.linearised(params, objective)
        moved = oracle(model, params, get_loss("bce"), cons, adult_small, adult_small)
        assert torch.equal(lin.J, full.J.to(lin.J.dtype)) and lin.J.dtype == objective.g.dtype
        assert snapshot.linearised(params, objective).J is lin.J  # converted once per refresh
        errors.append(float((lin.c - moved.c).abs().max()))
        with torch.no_grad():  # back to w_s for the next, smaller move
            offset = 0
            for p in params:
                p.sub_(eps * direction[offset:offset + p.numel()].view_as(p))
                offset += p.numel()
    assert errors[1] < 0.5 * errors[0]  # second order: halving the move quarters the error
    kept = snapshot.linearised(params, objective).J
    snapshot.refresh(params, oracle(model, params, get_loss("bce"), cons, adult_small, adult_small))
    assert snapshot.linearised(params, objective).J is not kept  # a refresh converts its own Jacobian


def test_snapshot_needs_a_refresh_and_a_positive_period():
    with pytest.raises(ValueError, match="every"):
        ConstraintSnapshot(0)
    with pytest.raises(RuntimeError, match="refresh"):
        ConstraintSnapshot(1).linearised([], None)


def _rows(c: list[float]) -> Derivatives:
    """Full-data derivatives with rows ``c`` and the Jacobian ``[[1, 0], [0, 1]]`` (two parameters)."""
    return Derivatives(0.0, torch.zeros(2), torch.tensor(c, dtype=torch.float64), torch.eye(2, dtype=torch.float64),
                       None, 0.0, 0.0)


def test_snapshot_drift_halves_and_restores_the_spacing():
    """The drift ``max |c(w) - (c_s + J_s (w - w_s))| / tol``, checked by hand: above the tolerance
    the steps between refreshes halve (not below 1), below a quarter of it they double back, never
    beyond the starting spacing; without a tolerance the spacing stays and nothing is measured."""
    w = torch.zeros(2, dtype=torch.float64, requires_grad=False)
    snapshot = ConstraintSnapshot(every=8, drift_tol=0.02)
    snapshot.refresh([w], _rows([0.0, 0.0]))
    assert snapshot.drift is None and snapshot.every == 8
    w += torch.tensor([0.1, 0.0], dtype=torch.float64)  # predicted rows (0.1, 0); actual (0.15, 0): drift 0.05
    snapshot.refresh([w], _rows([0.15, 0.0]))
    assert snapshot.drift == pytest.approx(0.05 / 0.02) and snapshot.every == 4
    for expected in (2, 1, 1):  # each refresh drifts by 0.03 > 0.02
        w += torch.tensor([0.0, 0.1], dtype=torch.float64)
        snapshot.refresh([w], _rows([float(snapshot.c[0]), float(snapshot.c[1]) + 0.13]))
        assert snapshot.drift == pytest.approx(0.03 / 0.02) and snapshot.every == expected
    for expected in (2, 4, 8, 8):  # exact first-order moves: no drift
        w += torch.tensor([0.1, 0.1], dtype=torch.float64)
        snapshot.refresh([w], _rows([float(snapshot.c[0]) + 0.1, float(snapshot.c[1]) + 0.1]))
        assert snapshot.drift == pytest.approx(0.0, abs=1e-12) and snapshot.every == expected
    w += torch.tensor([0.1, 0.0], dtype=torch.float64)  # drift 0.01: between a quarter and the tolerance
    snapshot.refresh([w], _rows([float(snapshot.c[0]) + 0.11, float(snapshot.c[1])]))
    assert snapshot.drift == pytest.approx(0.01 / 0.02) and snapshot.every == 8
    fixed = ConstraintSnapshot(every=8)
    fixed.refresh([torch.zeros(2, dtype=torch.float64)], _rows([0.0, 0.0]))
    fixed.refresh([torch.tensor([0.1, 0.0], dtype=torch.float64)], _rows([1.0, 0.0]))
    assert fixed.drift is None and fixed.every == 8
    with pytest.raises(ValueError, match="drift_tol"):
        ConstraintSnapshot(every=2, drift_tol=0.0)
    with pytest.raises(ValueError, match="drift_tol"):
        ConstraintSnapshot(every=2, drift_tol=torch.tensor([0.02, float("nan")]))


def test_snapshot_state_round_trips_and_is_checked():
    """A snapshot restored from its state measures the next drift and adapts the spacing exactly as
    the original; the spacing is capped at the restoring snapshot's own; states of another shape,
    non-finite or with a bad spacing are refused."""
    w = torch.zeros(2, dtype=torch.float64)
    original = ConstraintSnapshot(every=8, drift_tol=0.02)
    original.refresh([w], _rows([0.0, 0.0]))
    original.refresh([w + torch.tensor([0.1, 0.0], dtype=torch.float64)], _rows([0.15, 0.0]))  # every 8 -> 4
    state = original.state_dict()
    restored = ConstraintSnapshot(every=8, drift_tol=0.02)
    restored.load_state_dict(state, n_params=2, n_rows=2)
    assert restored.every == 4 and restored.drift == original.drift
    state["c"][0] = 99.0  # a copy: the original's snapshot is untouched
    assert float(original.c[0]) == pytest.approx(0.15)
    later = torch.tensor([0.2, 0.0], dtype=torch.float64)
    for snapshot in (original, restored):
        snapshot.refresh([later], _rows([0.28, 0.0]))  # predicted 0.25, drift 0.03: 4 -> 2 on both
    assert restored.every == original.every == 2 and restored.drift == pytest.approx(original.drift)
    shorter = ConstraintSnapshot(every=3, drift_tol=0.02)
    shorter.load_state_dict(original.state_dict() | {"every": 16}, n_params=2, n_rows=2)
    assert shorter.every == 3
    empty = ConstraintSnapshot(every=8).state_dict()  # before any refresh: the spacing only
    fresh = ConstraintSnapshot(every=8)
    fresh.load_state_dict(empty, n_params=5, n_rows=1)
    assert fresh.params is None and fresh.due(3)
    good = original.state_dict()
    for bad, message in [({"J": torch.zeros(3, 2, dtype=torch.float64)}, "shape"),
                         ({"c": torch.tensor([float("nan"), 0.0], dtype=torch.float64)}, "non-finite"),
                         ({"every": 0}, "positive integer"), ({"drift": -1.0}, "drift")]:
        with pytest.raises(ValueError, match=message):
            ConstraintSnapshot(every=8).load_state_dict(good | bad, n_params=2, n_rows=2)
    with pytest.raises(ValueError, match="lacks"):
        ConstraintSnapshot(every=8).load_state_dict({"every": 2}, n_params=2, n_rows=2)


def test_per_row_tolerances_weigh_each_row_in_its_own_units():
    """With one tolerance per row the drift is ``max_i |e_i| / tol_i``: a row off by 0.05 under a
    tolerance of 1 does not halve the spacing, the same error under 0.02 does; an ``inf`` row is
    not measured."""
    for tol, every, ratio in (([1.0, 0.02], 8, 0.05), ([0.02, 1.0], 4, 2.5), ([0.02, math.inf], 4, 2.5),
                              ([math.inf, 0.02], 8, 0.0)):
        snapshot = ConstraintSnapshot(every=8, drift_tol=torch.tensor(tol, dtype=torch.float64))
        w = torch.zeros(2, dtype=torch.float64)
        snapshot.refresh([w], _rows([0.0, 0.0]))
        snapshot.refresh([w + torch.tensor([0.1, 0.0], dtype=torch.float64)], _rows([0.15, 0.0]))  # e = (0.05, 0)
        assert snapshot.drift == pytest.approx(ratio) and snapshot.every == every


def test_drift_tolerances_from_the_rows_scales():
    """"auto": DEFAULT_DRIFT_TOL times each row's declared scale, rows without one (NaN) unmeasured,
    None where no row has a scale; a number applies to every row; None is the fixed schedule."""
    scales = torch.tensor([1.0, 1.0, float("nan"), 2.0], dtype=torch.float64)
    tol = drift_tolerances("auto", scales)
    assert torch.equal(tol, torch.tensor([DEFAULT_DRIFT_TOL, DEFAULT_DRIFT_TOL, math.inf, 2 * DEFAULT_DRIFT_TOL],
                                         dtype=torch.float64))
    assert drift_tolerances("auto", torch.full((3,), float("nan"), dtype=torch.float64)) is None
    assert torch.equal(drift_tolerances(0.5, scales), torch.full((4,), 0.5, dtype=torch.float64))
    assert drift_tolerances(None, scales) is None and drift_tolerances("auto", torch.zeros(0)) is None
    with pytest.raises(ValueError, match="constraint_drift_tol"):
        drift_tolerances("fast", scales)
    with pytest.raises(ValueError, match="constraint_drift_tol"):
        drift_tolerances(0.0, scales)


def test_auto_drift_tolerance_follows_the_declared_row_scale(adult_small):
    """"auto" (the default) is 0.02 on rate rows, which declare ``row_scale = 1``: the same fit as that
    number; a constraint without a scale (Covariance) keeps the fixed schedule, the same fit as None."""
    def fit(constraint, tol):
        model = fairopt.models.mlp(adult_small.n_features, hidden=(16,), seed=0)
        engine = StochasticSQP(epochs=2, batch_size=256, seed=0, constraint_drift_tol=tol)
        result = engine.fit(model, adult_small, constraints=[constraint])
        return (torch.cat([p.detach().reshape(-1) for p in model.parameters()]),
                [bool(r.get("refreshed")) for r in result.history.records])

    assert StochasticSQP().constraint_drift_tol == "auto"
    rates = [fit(DisparateImpact("sex", delta=0.8), tol) for tol in ("auto", DEFAULT_DRIFT_TOL)]
    assert torch.equal(rates[0][0], rates[1][0]) and rates[0][1] == rates[1][1]
    cov = [fit(Covariance("sex", bound=0.01), tol) for tol in ("auto", None)]
    assert torch.equal(cov[0][0], cov[1][0]) and cov[0][1] == cov[1][1]


def test_drift_tolerance_refreshes_more_where_the_snapshot_drifts(adult_small):
    """An MLP on mini-batches under DI >= 0.8: a tolerance no drift reaches gives the fixed
    schedule's fit exactly; a small one refreshes at least as often, and at more steps than the
    fixed two per epoch once the network's rows drift; the history's "drift" column holds the
    measured drift (in units of the tolerance) at refreshing steps and None elsewhere; a
    tolerance <= 0 is refused."""
    fits, drifts = {}, {}
    for tol in (None, 1e9, 1e-4):
        model = fairopt.models.mlp(adult_small.n_features, hidden=(16,), seed=0)
        engine = StochasticSQP(epochs=3, batch_size=256, seed=0, constraint_drift_tol=tol)
        result = engine.fit(model, adult_small, constraints=[DisparateImpact("sex", delta=0.8)])
        steps = [r for r in result.history.records if "refreshed" in r]
        refreshes = sum(bool(r["refreshed"]) for r in steps)
        fits[tol] = (torch.cat([p.detach().reshape(-1) for p in model.parameters()]), refreshes)
        drifts[tol] = [r["drift"] for r in steps if r["refreshed"]]
        assert all(r["drift"] is None for r in steps if not r["refreshed"])
    assert torch.equal(fits[None][0], fits[1e9][0]) and fits[None][1] == fits[1e9][1]
    assert fits[1e-4][1] > fits[None][1]
    assert all(d is None for d in drifts[None])
    assert drifts[1e-4][0] is None and all(d >= 0 for d in drifts[1e-4][1:])
    assert max(drifts[1e-4][1:]) > 1 > max(drifts[1e9][1:])  # a small tolerance is exceeded, a huge one never
    with pytest.raises(ValueError, match="constraint_drift_tol"):
        StochasticSQP(constraint_drift_tol=-1.0)


def test_minibatch_auto_takes_snapshots_refreshed_as_asked(adult_small):
    """"auto" with mini-batches is "snapshot": without a drift tolerance ``constraint_refresh``
    full-data refreshes per epoch at fixed steps of the epoch, and with the default one at least
    those; the stochastic steps leave the merit parameter alone."""
    model = fairopt.models.linear(adult_small.n_features, seed=0)
    adaptive = StochasticSQP(epochs=3, batch_size=500, constraint_refresh=2, seed=0)
    history = adaptive.fit(model, adult_small, constraints=[DisparateImpact("sex", delta=0.8)]).history
    assert sum(bool(r.get("refreshed")) for r in history.records) >= 3 * 2
    model = fairopt.models.linear(adult_small.n_features, seed=0)
    engine = StochasticSQP(epochs=3, batch_size=500, constraint_refresh=2, seed=0, constraint_drift_tol=None)
    result = engine.fit(model, adult_small, constraints=[DisparateImpact("sex", delta=0.8)])
    assert engine.constraint_mode(False, [DisparateImpact("sex")]) == "snapshot"
    steps = [r for r in result.history.records if r.get("phase", "stochastic") == "stochastic"
             and r["qp_status"] != "final"]
    assert len(steps) == 3 * 6
    assert [r["refreshed"] for r in steps[:6]] == [True, False, False, True, False, False]
    assert sum(r["refreshed"] for r in steps) == 3 * 2
    assert all(r["tau"] == engine.tau0 for r in steps)  # estimated reductions never move tau


def test_quadratic_constraints_stay_on_the_batch():
    """The distance covariance's pass over all rows is quadratic in the rows: "auto" keeps its
    (unbiased) batch estimates."""
    from fairopt.constraints import DistanceCovariance

    engine = StochasticSQP(batch_size=64)
    assert DistanceCovariance.cost_on_all_rows == "quadratic"
    assert engine.constraint_mode(False, [DistanceCovariance("sex", bound=0.1)]) == "batch"
    assert engine.constraint_mode(True, [DistanceCovariance("sex", bound=0.1)]) == "full"


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_minibatch_keeps_the_full_batch_accuracy_on_a_small_adult_sample(adult_small, seed):
    """3,000 Adult rows, DI >= 0.8 with the default surrogate, linear model: 10 epochs of
    batches of 256 rows end within one accuracy point of 300 full-batch epochs and meet the
    bound on all rows (the constraints estimated on each batch lost up to 4 points here)."""
    accuracy = _full_and_minibatch_accuracy(adult_small, "sex", seed,
                                            lambda: fairopt.models.linear(adult_small.n_features, seed=seed))
    assert accuracy[256] >= accuracy[None] - 0.01, accuracy


def _full_and_minibatch_accuracy(data, attribute: str, seed: int, make_model) -> dict:
    """Train accuracy of a fresh ``make_model()`` under DI >= 0.8 on ``attribute`` after 300 full-batch
    epochs (key None) and after 10 epochs of batches of 256 rows (key 256), each run feasible on all
    rows and never a constant predictor."""
    accuracy = {}
    for batch, epochs in ((None, 300), (256, 10)):
        model = make_model()
        with warnings.catch_warnings():
            warnings.simplefilter("error", ConstantPredictorWarning)
            result = StochasticSQP(epochs=epochs, batch_size=batch, seed=seed).fit(
                model, data, constraints=[DisparateImpact(attribute, delta=0.8)])
        assert result.info["feasible"]
        accuracy[batch] = _accuracy(model, data)
    return accuracy


@pytest.fixture(scope="module")
def adult_by_age():
    """3,000 Adult rows with two groups cut from age (40 and over against the rest): an attribute
    no default of the mini-batch path was chosen on; age stays an input."""
    frame, _ = fairopt.datasets.load_frame("adult")
    frame = frame.assign(older=(frame["age"] >= 40).map({True: ">=40", False: "<40"}))
    data = fairopt.FairData.from_frame(frame, target="income", sensitive=["older"],
                                       features=[c for c in frame.columns if c not in ("income", "older")])
    return data.subset(torch.randperm(len(data), generator=torch.Generator().manual_seed(1))[:3000])


@pytest.mark.parametrize("seed", [0, 1])
def test_minibatch_network_keeps_the_full_batch_accuracy_on_another_attribute(adult_by_age, seed):
    """The same property for a network (MLP 16) under DI >= 0.8 between age groups: 10 epochs of 256
    rows within one accuracy point of 300 full-batch epochs, the bound met on all rows (measured on
    seeds 0-7 within 0.3 points)."""
    accuracy = _full_and_minibatch_accuracy(adult_by_age, "older", seed, lambda: fairopt.models.mlp(
        adult_by_age.n_features, hidden=(16,), seed=seed))
    assert accuracy[256] >= accuracy[None] - 0.01, accuracy


# ----------------------------------------------------------------------------- honest results
def test_constant_loss_matches_the_closed_forms():
    rng = np.random.default_rng(0)
    n = 500
    X = rng.normal(size=(n, 2))
    y = (rng.random(n) < 0.3).astype(float)
    data = fairopt.FairData.from_arrays(X, y, {"s": (rng.random(n) < 0.5).astype(int)})
    p = y.mean()
    assert constant_loss(get_loss("bce"), data) == pytest.approx(-(p * math.log(p) + (1 - p) * math.log(1 - p)),
                                                                   rel=1e-9)
    assert constant_loss(get_loss("bce"), data, chunk_rows=77) == pytest.approx(constant_loss(get_loss("bce"), data),
                                                                                rel=1e-9)
    yr = rng.normal(3.0, 2.0, size=n)
    reg = fairopt.FairData.from_arrays(X, yr, {"s": (rng.random(n) < 0.5).astype(int)}, task="regression")
    assert constant_loss(get_loss("mse"), reg) == pytest.approx(float(np.var(yr)), rel=1e-6)
    # raw amounts far from 0 (a mean of 580, as Communities' crime counts): no cap on the Newton step
    far = fairopt.FairData.from_arrays(X, 580.0 + 600.0 * yr, {"s": (rng.random(n) < 0.5).astype(int)},
                                       task="regression")
    assert constant_loss(get_loss("mse"), far) == pytest.approx(float(np.var(580.0 + 600.0 * yr)), rel=1e-5)
    weights = rng.uniform(0.5, 2.0, size=n)
    weighted = fairopt.FairData.from_arrays(X, yr, {"s": (rng.random(n) < 0.5).astype(int)}, task="regression",
                                            sample_weight=weights)
    mean = np.average(yr, weights=weights)
    assert constant_loss(get_loss("mse"), weighted) == pytest.approx(
        float(np.average((yr - mean) ** 2, weights=weights)), rel=1e-6)
    counts = rng.poisson(0.3, size=n).astype(float)
    exposure = rng.uniform(0.2, 1.0, size=n)
    pois = fairopt.FairData.from_arrays(X, counts, {"s": (rng.random(n) < 0.5).astype(int)}, task="poisson",
                                        exposure=exposure)
    rate = counts.sum() / exposure.sum()  # the constant log-rate's optimum: log(sum y / sum e)
    eta = math.log(rate) + np.log(exposure)
    assert constant_loss(get_loss("poisson"), pois) == pytest.approx(float(np.mean(np.exp(eta) - counts * eta)),
                                                                      rel=1e-6)


def test_warn_if_constant_and_unstable_rules():
    with pytest.warns(ConstantPredictorWarning, match="training loss"):
        assert warn_if_constant("E", 0.6, 0.56)
    with pytest.warns(ConstantPredictorWarning, match="accuracy"):
        assert warn_if_constant("E", 0.5, 0.56, accuracy=0.74, majority=0.75)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert not warn_if_constant("E", 0.5, 0.56, accuracy=0.80, majority=0.75)
    tracker = BestIterate(torch.zeros(0), torch.zeros(0), 1e-6)
    for f in (0.69, 0.8, 0.5):  # +16%: within the tolerance
        tracker.offer([torch.zeros(1)], f, None, 0)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert not warn_if_unstable("E", tracker, 0, 0.56)
    tracker.offer([torch.zeros(1)], 3.0, None, 7)
    with pytest.warns(TrainingInstabilityWarning, match="rose from 0.69 to 3"):
        assert warn_if_unstable("E", tracker, 0, 0.56)
    # the returned model's loss beside the rise: a run that recovered says so, one that did not too
    with pytest.warns(TrainingInstabilityWarning, match=r"its training loss 0.5, below the start's 0.69"):
        assert warn_if_unstable("E", tracker, 0, 0.56, returned_f=0.5)
    with pytest.warns(TrainingInstabilityWarning, match=r"its training loss 0.8, not below the start's 0.69"):
        assert warn_if_unstable("E", tracker, 0, 0.56, returned_f=0.8)
    # a start below the constant's loss (warm start) may rise towards the bound's price, not above it
    warm = BestIterate(torch.zeros(0), torch.zeros(0), 1e-6)
    for f in (0.33, 0.45):
        warm.offer([torch.zeros(1)], f, None, 0)
    assert not warn_if_unstable("E", warm, 0, 0.56)
    with pytest.warns(TrainingInstabilityWarning, match="divergence guard"):
        assert warn_if_unstable("E", warm, 2, 0.56)


def test_training_accuracy_in_chunks_equals_one_pass(adult_small):
    model = fairopt.models.linear(adult_small.n_features, seed=0)
    assert training_accuracy(model, adult_small, 7) == pytest.approx(training_accuracy(model, adult_small))
    acc, majority = training_accuracy(model, adult_small)
    rate = float(adult_small.y.float().mean())
    assert acc == pytest.approx(_accuracy(model, adult_small)) and majority == pytest.approx(max(rate, 1 - rate))


def test_an_untrained_model_is_reported_as_no_better_than_a_constant(adult_small):
    """A model started far off (large weights) and given a learning rate too small to move it:
    the engine says so instead of returning it silently."""
    model = fairopt.models.linear(adult_small.n_features, seed=0)
    with torch.no_grad():
        for p in model.parameters():
            p.mul_(50.0)
    with pytest.warns(ConstantPredictorWarning):
        StochasticSQP(epochs=3, lr=1e-6, seed=0).fit(model, adult_small, constraints=[DisparateImpact("sex", 0.8)])


def test_a_backed_off_run_warns(adult_small):
    """A learning rate that blows the objective up: the divergence guard backs off, and the
    engine says so with a warning (not only a log line)."""
    model = fairopt.models.mlp(adult_small.n_features, hidden=(8,), seed=0)
    with pytest.warns(TrainingInstabilityWarning, match="divergence guard"):
        StochasticSQP(epochs=5, lr=500.0, hessian_shift=1e-6, seed=0).fit(
            model, adult_small, constraints=[DisparateImpact("sex", 0.8)])


def test_a_good_run_warns_nothing(adult_small):
    model = fairopt.models.linear(adult_small.n_features, seed=0)
    with warnings.catch_warnings():
        warnings.simplefilter("error", ConstantPredictorWarning)
        warnings.simplefilter("error", TrainingInstabilityWarning)
        StochasticSQP(epochs=5, batch_size=500, seed=0).fit(model, adult_small,
                                                            constraints=[DisparateImpact("sex", 0.8)])


# ----------------------------------------------------------------------------- epochs="auto"
def test_auto_epochs_budget_steps_not_passes():
    from solvers.sqp.engine import (DEFAULT_LR, FULL_BATCH_EPOCHS, LINEAR_MINIBATCH_EPOCHS, LINEAR_MINIBATCH_STEPS,
                                    MINIBATCH_MIN_EPOCHS, MINIBATCH_STEPS, auto_epochs, network_step)

    assert auto_epochs(1, True) == FULL_BATCH_EPOCHS == 500
    assert auto_epochs(24, False) == math.ceil(MINIBATCH_STEPS / 24) == 21  # full Adult, batches of 1,024
    assert auto_epochs(200, False) == MINIBATCH_MIN_EPOCHS  # many steps per epoch: at least 10 epochs
    assert auto_epochs(1, False) == FULL_BATCH_EPOCHS  # one step per epoch: no more than the full batch
    # a linear model, polished under the curvature metric: enough epochs for 100 steps, at least 2
    assert auto_epochs(24, False, curvature_polish=True) == math.ceil(LINEAR_MINIBATCH_STEPS / 24) == 5
    assert auto_epochs(200, False, True) == LINEAR_MINIBATCH_EPOCHS == 2
    assert auto_epochs(1, True, curvature_polish=True) == FULL_BATCH_EPOCHS
    # a smaller lr, proportionally more steps (0.25: 200), up to the networks' 500 (the regressor's 0.02)
    assert auto_epochs(24, False, True, lr=0.25) == math.ceil(200 / 24)
    assert auto_epochs(11, False, True, lr=0.02) == math.ceil(MINIBATCH_STEPS / 11) == 46
    # a network's step below 0.5: as many more steps as it is shorter (lr="auto" on 64 rows: 0.25, twice 500)
    assert auto_epochs(55, False, lr=network_step(64), network=True) == math.ceil(2 * MINIBATCH_STEPS / 55) == 19
    assert auto_epochs(24, False, lr=network_step(256), network=True) == auto_epochs(24, False) == 21
    assert auto_epochs(24, False, lr=DEFAULT_LR, network=True) == 21  # not shorter: the budget as it is
    assert auto_epochs(1000, False, lr=network_step(32), network=True) == MINIBATCH_MIN_EPOCHS  # large data: 10 epochs
    # the regressor's 0.02: 25 times the steps (12,500), within the full batch's 500 epochs
    assert auto_epochs(57, False, lr=0.02, network=True) == math.ceil(25 * MINIBATCH_STEPS / 57) == 220
    assert auto_epochs(6, False, lr=0.02, network=True) == FULL_BATCH_EPOCHS


def test_epochs_auto_gives_a_networks_shorter_steps_more_of_them(adult_small):
    """lr="auto" on a network's batches of 64 rows (a step half as long as on 256): twice the 500 steps; so
    does an explicit lr of 0.25, and 1.0 (longer than 0.5) keeps the 500."""
    rows = math.ceil(len(adult_small) / 64)
    for lr, steps in (("auto", 1000), (0.25, 1000), (1.0, 500)):
        engine = StochasticSQP(batch_size=64, lr=lr, polish_iterations=0, seed=0)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            engine.fit(fairopt.models.mlp(adult_small.n_features, hidden=(4,), seed=0), adult_small)
        assert engine.epochs_ == max(10, math.ceil(steps / rows)), lr


def test_epochs_auto_resolves_and_bad_values_are_refused(adult_small):
    from solvers.sqp.engine import LINEAR_MINIBATCH_STEPS

    engine = StochasticSQP(batch_size=1000, polish_iterations=0, seed=0, hessian="adam")
    engine.fit(fairopt.models.linear(adult_small.n_features, seed=0), adult_small,
               constraints=[DisparateImpact("sex", 0.8)])
    assert engine.epochs == "auto" and engine.epochs_ == 167  # 3 steps per epoch -> ceil(500 / 3)
    engine = StochasticSQP(batch_size=1000, polish_iterations=0, seed=0)  # "auto": a curvature-metric polish
    engine.fit(fairopt.models.linear(adult_small.n_features, seed=0), adult_small,
               constraints=[DisparateImpact("sex", 0.8)])
    assert engine.epochs_ == math.ceil(LINEAR_MINIBATCH_STEPS / 3) and engine.polish_hessian_ == "gauss-newton"
    assert engine.hessian_ == "adam"  # the training phase's metric
    for bad in ("many", 0, -1, 2.5):
        with pytest.raises(ValueError, match="epochs"):
            StochasticSQP(epochs=bad)


def test_estimator_with_batch_size_keeps_the_engine_budget():
    """FairClassifier(batch_size=...) leaves epochs to the engine's "auto" (a budget of steps),
    not the full-batch epochs; an explicit epochs is kept."""
    from fairopt.training import TrainingOptions, engine_options

    given = TrainingOptions(method="sqp", task="regression", batch_size=256)
    assert "epochs" not in engine_options(given, "sqp")
    assert engine_options(TrainingOptions(method="sqp", task="regression"), "sqp")["epochs"] == 10000
    assert engine_options(TrainingOptions(method="sqp", task="regression", batch_size=256, epochs=7),
                          "sqp")["epochs"] == 7


def test_lr_auto_resolves_by_model_and_mode(adult_small):
    """lr="auto": 0.5 for full-batch fits and a linear model's mini-batch steps, for a network's mini-batch
    steps 0.75 on batches of at least 256 rows and ``0.5 sqrt(B / 256)`` on ``B`` fewer; a network's mini-batch
    steps rise linearly over the first epoch whatever the batch (a linear model's do not); an explicit
    lr is kept (a network's mini-batch steps still warm up)."""
    from solvers.sqp.engine import DEFAULT_LR, MINIBATCH_NETWORK_LR, MINIBATCH_NETWORK_MIN_BATCH, network_step
    from solvers.sqp.schedules import rsqrt_beta
    from solvers.sqp.state import SQPState

    assert StochasticSQP().lr == "auto" and StochasticSQP().lr_ == DEFAULT_LR  # before a fit
    betas = {}
    for kind, batch, expected in [("linear", None, DEFAULT_LR), ("mlp", None, DEFAULT_LR),
                                  ("linear", 500, DEFAULT_LR), ("mlp", 500, MINIBATCH_NETWORK_LR),
                                  ("mlp", MINIBATCH_NETWORK_MIN_BATCH - 1, DEFAULT_LR * (255 / 256) ** 0.5),
                                  ("mlp", 64, DEFAULT_LR / 2)]:
        model = (fairopt.models.mlp(adult_small.n_features, hidden=(4,), seed=0) if kind == "mlp"
                 else fairopt.models.linear(adult_small.n_features, seed=0))
        engine = StochasticSQP(epochs=2, batch_size=batch, polish_iterations=0, seed=0)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            history = engine.fit(model, adult_small, constraints=[DisparateImpact("sex", delta=0.8)]).history
        assert engine.lr_ == pytest.approx(expected, rel=1e-12), (kind, batch)
        betas[(kind, batch)] = [r["beta"] for r in history.records if r["qp_status"] != "final"]
    K = 6  # 3,000 rows in batches of 500
    mlp, linear = betas[("mlp", 500)], betas[("linear", 500)]
    assert mlp[0] == pytest.approx(MINIBATCH_NETWORK_LR / K)  # the first step: a K-th of lr
    assert all(a < b for a, b in zip(mlp[:K - 1], mlp[1:K]))  # rising over the first epoch
    assert mlp[K - 1] == pytest.approx(MINIBATCH_NETWORK_LR / (1 + (K - 1) / (4 * K)) ** 0.5)
    assert linear[0] == pytest.approx(DEFAULT_LR) and all(a > b for a, b in zip(linear, linear[1:]))
    small = betas[("mlp", MINIBATCH_NETWORK_MIN_BATCH - 1)]  # 12 steps an epoch, warmed up to its lr
    lr_small = network_step(MINIBATCH_NETWORK_MIN_BATCH - 1)
    assert small[0] == pytest.approx(lr_small / 12) and small[11] == pytest.approx(lr_small / (1 + 11 / 48) ** 0.5)
    # the square-root rule: continuous up to the larger batches' own step, halved at a quarter of the rows
    assert [network_step(b) for b in (256, 1024)] == [MINIBATCH_NETWORK_LR] * 2
    assert network_step(64) == pytest.approx(DEFAULT_LR / 2) and network_step(16) == pytest.approx(DEFAULT_LR / 4)
    explicit = StochasticSQP(lr=0.1, epochs=1, batch_size=500, polish_iterations=0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        explicit.fit(fairopt.models.mlp(adult_small.n_features, hidden=(4,), seed=0), adult_small)
    assert explicit.lr_ == 0.1
    state = SQPState(tau=0.1, xi=1.0, beta=0.1, v=torch.zeros(1), iteration=3)
    assert rsqrt_beta(state, 1.0, 8, warmup=True) == pytest.approx(0.5 / (1 + 3 / 32) ** 0.5)
    assert rsqrt_beta(state, 1.0, 8) == pytest.approx(1 / (1 + 3 / 32) ** 0.5)
    with pytest.raises(ValueError, match="lr"):
        StochasticSQP(lr="fast")


def test_hessian_shift_auto_resolves_by_mode(adult_small):
    from solvers.sqp.engine import FULL_BATCH_SHIFT, MINIBATCH_SHIFT

    engine = StochasticSQP(epochs=1, polish_iterations=0)
    assert engine.hessian_shift_ == FULL_BATCH_SHIFT  # before a fit: the full-batch value
    engine.batch_size = 1000
    engine.fit(fairopt.models.linear(adult_small.n_features, seed=0), adult_small)
    assert engine.hessian_shift_ == MINIBATCH_SHIFT
    assert StochasticSQP(hessian_shift=2.0).hessian_shift_ == 2.0
    with pytest.raises(ValueError, match="hessian_shift"):
        StochasticSQP(hessian_shift="big")


@pytest.mark.parametrize("hidden", [None, (16,)], ids=["plain", "stratified"])
def test_refresh_oracle_skips_only_the_objective_gradient(hidden):
    """A snapshot refresh asks the oracle for no objective gradient: ``g`` is None and ``f``, the rows,
    their Jacobian and the exact rows are those of the full call, on the plain pullback (a linear
    model) and on the stratified one (a network on at least MIN_ROWS rows)."""
    data = fairopt.datasets.load("adult", include_sensitive=True)
    rows = data.subset(torch.randperm(len(data), generator=torch.Generator().manual_seed(1))[:5000])
    model = (fairopt.models.linear(rows.n_features, seed=0) if hidden is None
             else fairopt.models.mlp(rows.n_features, hidden=hidden, seed=0))
    cons = as_constraint_set([DisparateImpact("sex", delta=0.8)])
    cons.setup(rows)
    oracle, params, loss = LocalDerivatives("auto"), trainable_parameters(model), get_loss("bce")
    assert (oracle.stratified_plan(model, cons, rows) is None) == (hidden is None)
    full = oracle(model, params, loss, cons, rows, rows)
    lean = oracle(model, params, loss, cons, rows, rows, objective_gradient=False)
    assert full.g is not None and lean.g is None
    assert lean.f == pytest.approx(full.f, rel=1e-12)
    assert torch.allclose(lean.c, full.c, rtol=1e-9, atol=1e-12)
    assert torch.allclose(lean.J, full.J, rtol=1e-5, atol=1e-7) and lean.J.abs().max() > 0
    assert torch.equal(lean.c_exact, full.c_exact)


@pytest.mark.parametrize("seed", [0, 1])
def test_an_unconstrained_minibatch_run_is_polished_like_a_constrained_one(adult_small, seed):
    """Without constraints a mini-batch run also ends with full-data polish iterations (it ended at the noisy
    batch iterate: 0.5-3.6 points below the full batch's accuracy in a trial, below a run under a bound that
    never binds): within a point of 300 full-batch epochs, with "polish" records in its history."""
    accuracy = {}
    for batch, epochs in ((None, 300), (256, 10)):
        model = fairopt.models.linear(adult_small.n_features, seed=seed)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            result = StochasticSQP(epochs=epochs, batch_size=batch, seed=seed).fit(model, adult_small)
        accuracy[batch] = _accuracy(model, adult_small)
        phases = {record.get("phase") for record in result.history.records}
        assert ("polish" in phases) == (batch is not None)
    assert accuracy[256] >= accuracy[None] - 0.01, accuracy
