"""The stop of a full-batch "plateau" run that has stalled at the floor of its step (``stall_epochs``), and the
regressor's default of it (:data:`fairopt.training.REGRESSION_STALL`)."""

from __future__ import annotations

import types
import warnings

import numpy as np
import pytest
import torch

import fairopt
from fairopt import FairRegressor
from fairopt.training import REGRESSION_STALL, TrainingOptions, engine_param_defaults
from solvers import StochasticSQP
from solvers.sqp.schedules import stalled
from solvers.sqp.state import CHECKPOINT_FIELDS, SQPState

from conftest import TensorRows

LR = 0.02


def _options(epochs: int | None = 3, tol: float = 1e-3, floor: float = 1e-3) -> types.SimpleNamespace:
    return types.SimpleNamespace(stall_epochs=epochs, stall_tol=tol, lr_floor=floor, lr_=LR)


def test_only_epochs_at_the_floor_without_progress_count():
    options = _options()
    state = SQPState(tau=0.1, xi=1.0, beta=LR)
    assert not any(stalled(state, 0.5, options) for _ in range(10))  # above the floor: never
    state.beta = 1e-3 * LR
    # the first epoch at the floor takes the reference, three epochs without a fall of 1e-3 stop
    assert [stalled(state, f, options) for f in (0.5, 0.4996, 0.4992, 0.4990)] == [False, False, False, True]


def test_a_fall_beyond_the_tolerance_renews_the_reference_and_an_infeasible_best_starts_afresh():
    options = _options()
    state = SQPState(tau=0.1, xi=1.0, beta=1e-3 * LR)
    assert [stalled(state, f, options) for f in (0.5, 0.4995, 0.4985, 0.4984, 0.4983)] == [False] * 5
    assert state.stall_best == pytest.approx(0.4985) and state.stall_wait == 2
    assert not stalled(state, None, options) and state.stall_wait == 0 and state.stall_best is None
    assert not stalled(state, 0.4983, _options(epochs=None))  # off


def test_the_count_is_part_of_the_checkpoint():
    assert {"stall_best", "stall_wait"} <= set(CHECKPOINT_FIELDS)
    state = SQPState(tau=0.1, xi=1.0, beta=LR, stall_best=0.3, stall_wait=7)
    assert SQPState.from_dict(state.to_dict(), state.v).stall_wait == 7


def test_stall_options_are_checked():
    with pytest.raises(ValueError, match="stall_epochs"):
        StochasticSQP(stall_epochs=0)
    with pytest.raises(ValueError, match="stall_tol"):
        StochasticSQP(stall_tol=-1.0)
    assert StochasticSQP().stall_epochs is None  # the engine's own default: off


def _stalling_fit(stall_epochs: int | None):
    """Least squares in float32 from near its optimum, with a KKT tolerance float32 never meets: the loss stops
    falling within a few epochs, the plateau schedule takes the step to its floor (``lr_floor`` 0.5: one decay)
    and the rest of the epochs move nothing."""
    gen = torch.Generator().manual_seed(0)
    X = torch.randn(200, 3, generator=gen)
    y = X @ torch.tensor([1.0, -2.0, 0.5]) + 0.1 * torch.randn(200, generator=gen)
    model = torch.nn.Linear(3, 1, bias=False)
    with torch.no_grad():
        optimum = torch.linalg.lstsq(X.double(), y.double().unsqueeze(1)).solution.T
        model.weight.copy_((optimum + 0.01).float())
    engine = StochasticSQP(epochs=300, lr=0.1, lr_floor=0.5, lr_patience=1, hessian="adam", tol=1e-12,
                           stall_epochs=stall_epochs, verbose=0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return engine, engine.fit(model, TensorRows(X, y), loss="mse")


def test_a_stalled_full_batch_run_stops_and_says_so():
    engine, result = _stalling_fit(stall_epochs=20)
    assert result.info["termination"] == "stalled" and result.status == "not_stationary"
    assert engine.state_.epochs_done < 100  # of its 300 epochs
    full_engine, full = _stalling_fit(stall_epochs=None)
    assert full.info["termination"] == "max_epochs" and full_engine.state_.epochs_done == 300
    assert result.history[-1]["f"] <= full.history[-1]["f"] + 1e-3  # the epochs it saved gained nothing


def test_the_regressor_turns_the_stop_on_for_its_full_batch_sqp_only():
    X, y = np.random.default_rng(0).normal(size=(50, 2)), np.arange(50.0)
    data = fairopt.FairData.from_arrays(X, y, {"s": np.arange(50) % 2}, task="regression")
    regression = dict(method="sqp", task="regression", model="mlp")
    assert engine_param_defaults(TrainingOptions(**regression), data) == REGRESSION_STALL
    assert engine_param_defaults(TrainingOptions(**regression, batch_size=16), data) == {}
    assert "stall_epochs" not in engine_param_defaults(TrainingOptions(method="lagrangian", task="regression"), data)
    assert "stall_epochs" not in engine_param_defaults(TrainingOptions(method="sqp", task="binary", model="mlp"), data)
    assert REGRESSION_STALL["stall_epochs"] >= 100 and 0 < REGRESSION_STALL["stall_tol"] <= 1e-2


def test_a_small_communities_network_under_gedi_stops_well_before_its_budget(shared_data, one_torch_thread):
    """300 Communities rows (210 training rows): the network's exact GeDI row alternates about its bound, the
    plateau schedule takes the step to its floor, and the 10,000 epochs' budget would add little."""
    data = fairopt.datasets.load("communities", data_dir=shared_data, sensitive=["race"])
    sample = data.subset(np.sort(np.random.default_rng(1).permutation(len(data))[:300]))
    train, _ = sample.split(test_size=0.3, seed=1)
    reg = FairRegressor(("gedi", "race", 0.2, {"relative": True}), model="mlp", seed=1)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        reg.fit(train)
    assert reg.engine_info_["termination"] == "stalled" and reg.n_iter_ < 3000
    assert all(entry["met"] for entry in reg.evaluate(train)["bounds"].values())
    assert reg.status_ == "feasible_not_stationary" and "stall_epochs" in reg.status_message_
    assert reg.score(train) > 0.5
