"""The engine's typed settings and state: SQPOptions (checked once, read through the engine's
attributes) and SQPState (the checkpoint's dict form round-trips)."""

import dataclasses
import math

import pytest
import torch

from solvers.sqp import SQPOptions, SQPState, StochasticSQP
from solvers.sqp.state import CHECKPOINT_FIELDS, ScreenMemory


def test_settings_read_as_attributes_and_default_to_the_options():
    engine = StochasticSQP(epochs=7, batch_size=64)
    assert engine.options == SQPOptions(epochs=7, batch_size=64)
    assert engine.epochs == 7 and engine.batch_size == 64 and engine.lr == SQPOptions().lr
    base = SQPOptions(lr=0.1, seed=3)
    assert StochasticSQP(base).lr == 0.1 and StochasticSQP(base, seed=4).seed == 4
    assert StochasticSQP(base, seed=4).lr == 0.1  # keywords override the given options only where named


def test_unknown_or_invalid_settings_are_refused_with_the_name():
    with pytest.raises(TypeError, match="not_a_setting"):
        StochasticSQP(not_a_setting=1)
    with pytest.raises(ValueError, match="lr"):
        StochasticSQP(lr=-1.0)
    with pytest.raises(ValueError, match="constraint_batch"):
        SQPOptions(constraint_batch="sometimes")
    with pytest.raises(TypeError, match="SQPOptions"):
        StochasticSQP({"lr": 0.1})


def test_assigning_a_setting_checks_it_again_and_leaves_the_old_options_alone():
    engine = StochasticSQP()
    before = engine.options
    engine.lr = 0.25
    assert engine.lr == 0.25 and engine.options.lr == 0.25 and before.lr == SQPOptions().lr
    with pytest.raises(ValueError, match="lr"):
        engine.lr = 0.0
    assert engine.lr == 0.25
    with pytest.raises(dataclasses.FrozenInstanceError):
        engine.options.lr = 1.0  # the options themselves are frozen
    with pytest.raises(AttributeError, match="nothing_here"):
        engine.nothing_here


def test_state_dict_form_round_trips_and_refuses_unknown_keys():
    state = SQPState(tau=0.05, xi=0.5, beta=0.2, iteration=12, recent_steps=[0.1, 0.3], offset=[0.0, -0.01],
                     screen=ScreenMemory(last=[0.1], scale=[0.02], seen=3), v=torch.ones(4))
    saved = state.to_dict()
    assert set(saved) == set(CHECKPOINT_FIELDS) and "v" not in saved
    assert isinstance(saved["screen"], dict) and saved["recent_steps"] == [0.1, 0.3]
    back = SQPState.from_dict(saved, torch.ones(4))
    assert back == state and torch.equal(back.v, state.v)
    with pytest.raises(ValueError, match="bogus"):
        SQPState.from_dict({**saved, "bogus": 1}, torch.ones(4))


def test_a_copy_is_independent():
    state = SQPState(tau=0.1, xi=1.0, beta=0.5, recent_steps=[1.0], v=torch.zeros(2), screen=ScreenMemory(seen=1))
    other = state.copy()
    other.recent_steps.append(2.0)
    other.v += 1.0
    other.screen.seen = 5
    other.iteration += 1
    assert state.recent_steps == [1.0] and float(state.v.sum()) == 0.0 and state.screen.seen == 1
    assert state.iteration == 0 and state.last_kkt == math.inf
