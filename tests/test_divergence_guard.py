"""The mini-batch divergence guard on all rows (``solvers.sqp.endgame.all_rows_blew_up``), its loss
ceiling and its anchor (parameters and the metric's accumulator), through the engine and, with the shared
data, on the network that used to diverge (Communities and Crime, batches of 256)."""

from __future__ import annotations

import logging
import math
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch

import fairopt
from fairopt.constraints import DisparateImpact
from solvers import StochasticSQP
from solvers.outcome import TrainingInstabilityWarning
from solvers.problem import flat_parameters
from solvers.sqp.endgame import ALL_ROWS_RISE, MAX_RESTARTS, Anchor, all_rows_blew_up, loss_ceiling
from solvers.sqp.state import SQPState


@pytest.fixture(scope="module")
def adult_small():
    data = fairopt.datasets.load("adult", include_sensitive=True)
    idx = torch.randperm(len(data), generator=torch.Generator().manual_seed(0))[:3000]
    return data.subset(idx)


def _state(n: int) -> SQPState:
    return SQPState(tau=0.1, xi=1.0, beta=0.5, v=torch.zeros(n, dtype=torch.float64))


def test_loss_ceiling_is_the_larger_of_the_start_and_the_constant():
    assert loss_ceiling(0.75, 0.69) == 0.75
    assert loss_ceiling(0.3, 0.69) == 0.69  # a warm start below the constant: the constant's loss
    assert loss_ceiling(-2.0, None) == 2.0
    assert loss_ceiling(None, 0.5) == 0.5
    assert loss_ceiling(None, None) == math.inf
    assert loss_ceiling(float("nan"), 0.5) == 0.5


def test_the_guard_goes_back_to_the_anchor_with_its_metric():
    params = [torch.nn.Parameter(torch.tensor([1.0, 2.0])), torch.nn.Parameter(torch.tensor([3.0]))]
    state = _state(3)
    state.v.copy_(torch.tensor([0.1, 0.2, 0.3], dtype=torch.float64))
    anchor = Anchor.at(state, params, 0.4)
    with torch.no_grad():  # the run moves on: parameters and squared gradients of overshooting steps
        params[0].mul_(10.0)
        params[1].add_(5.0)
    state.v.add_(100.0)
    state.iteration = 9
    # within the rise: nothing changes
    assert not all_rows_blew_up(ALL_ROWS_RISE * 0.7 - 1e-9, 0.7, state, params, anchor)
    assert state.restarts == 0 and float(params[1].detach()) == 8.0
    assert all_rows_blew_up(ALL_ROWS_RISE * 0.7 + 1e-6, 0.7, state, params, anchor)
    assert torch.equal(flat_parameters(params), torch.tensor([1.0, 2.0, 3.0]))
    assert torch.equal(state.v, torch.tensor([0.1, 0.2, 0.3], dtype=torch.float64))
    assert state.beta == 0.25 and state.beta_scale == 0.5 and state.restarts == 1
    assert all_rows_blew_up(float("nan"), 0.7, state, params, anchor)  # a non-finite objective too
    assert not all_rows_blew_up(100.0, 0.7, state, params, None)  # no anchor: nothing to go back to
    state.restarts = MAX_RESTARTS
    assert not all_rows_blew_up(100.0, 0.7, state, params, anchor)


def _reverse_outputs_at(iteration: int, model: torch.nn.Module):
    """A callback that, once, turns the model's outputs around (the last layer times -2): the training loss on
    all rows jumps to several times its start, a batch's stays below ten times it."""
    done = []

    def callback(engine, record) -> bool:
        if record["iteration"] == iteration and not done:
            last = [m for m in model.modules() if isinstance(m, torch.nn.Linear)][-1]
            with torch.no_grad():
                last.weight.mul_(-2.0)
                last.bias.mul_(-2.0)
            done.append(True)
        return False

    return callback


@pytest.mark.parametrize("constraint_batch", ["snapshot", "batch"])
def test_a_run_thrown_off_goes_back_to_its_last_sane_iterate(adult_small, caplog, constraint_batch):
    """A network whose outputs are turned around at the end of its third epoch (the loss on all rows several times its
    start, each batch's below ten times it): the guard on all rows sends it back to an iterate before that,
    with the step halved, and the fit ends as accurate as the run left alone; it warns that it backed off."""
    cons = [DisparateImpact("sex", 0.8)]
    options = dict(epochs=6, batch_size=500, seed=0, constraint_batch=constraint_batch)
    clean = fairopt.models.mlp(adult_small.n_features, hidden=(16,), seed=0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        StochasticSQP(**options).fit(clean, adult_small, constraints=cons)
    model = fairopt.models.mlp(adult_small.n_features, hidden=(16,), seed=0)
    engine = StochasticSQP(**options, callbacks=[_reverse_outputs_at(17, model)])
    with caplog.at_level(logging.INFO, logger="solvers.sqp"), \
            pytest.warns(TrainingInstabilityWarning, match="divergence guard"):
        result = engine.fit(model, adult_small, constraints=cons)
    trips = [r.getMessage() for r in caplog.records if "on all rows at iteration" in r.getMessage()]
    assert result.info["restarts"] >= 1 and trips
    back_to = int(trips[0].split("back to iteration ")[1].split()[0])
    assert back_to <= 17
    assert result.info["feasible"]

    def accuracy(m):
        with torch.no_grad():
            return float(((m(adult_small.X).reshape(-1) > 0) == (adult_small.y.reshape(-1) > 0.5)).double().mean())

    assert accuracy(model) >= accuracy(clean) - 0.01


def test_the_network_on_correlated_inputs_keeps_its_accuracy(shared_data):
    """Communities and Crime (about 100 correlated inputs, 1,395 training rows), a network on batches of 256
    under DI >= 0.8: steps that overshoot as the network fits once left it with most rows in one class
    (training accuracy 0.70 against 0.96 for the full batch, seed 0); now every seed keeps the full batch's
    accuracy within 3 points, with the predicted-positive rate near the base rate."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
    from gbm_bounds_grid import load_task

    from fairopt.estimators import FairClassifier

    for seed in (0, 1, 2):
        train, _, attributes = load_task("communities-race", str(shared_data), seed)
        scores = {}
        for batch in (None, 256):
            clf = FairClassifier([("disparate_impact", attributes[0], 0.8)], model="mlp", batch_size=batch, seed=seed,
                                 verbose=0)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                clf.fit(train)
            scores[batch] = (clf.score(train), float(np.mean(clf.predict(train))), clf.train_violation_)
        assert scores[256][0] >= scores[None][0] - 0.03, (seed, scores)
        assert abs(scores[256][1] - float(train.y.double().mean())) < 0.1 and scores[256][2] <= 1e-4


def test_networks_on_batches_of_every_size_keep_the_full_batchs_accuracy(shared_data):
    """Communities and Crime, a network under DI >= 0.8 on batches of 128 and 512 rows: under the threshold
    surrogate ``sigmoid(5 out)`` three of these six runs met the bound by predicting about three rows in four
    positive, 22-25 points of training accuracy below the full batch and without a warning; a network's
    mini-batch steps now take the wide form ``sigmoid(2 out)`` and keep the full batch's accuracy within 3 points."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
    from gbm_bounds_grid import load_task

    from fairopt.estimators import FairClassifier

    for seed in (0, 1, 2):
        train, _, attributes = load_task("communities-race", str(shared_data), seed)
        full = FairClassifier([("disparate_impact", attributes[0], 0.8)], model="mlp", seed=seed, verbose=0)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            full.fit(train)
        for batch in (128, 512):
            clf = FairClassifier([("disparate_impact", attributes[0], 0.8)], model="mlp", batch_size=batch,
                                 seed=seed, verbose=0)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                clf.fit(train)
            assert clf.score(train) >= full.score(train) - 0.03, (seed, batch, clf.score(train), full.score(train))
            assert clf.train_violation_ <= 1e-4
