"""The mini-batch polish's line search on the exact merit (solvers.sqp.endgame.MeritBacktrack)."""

from __future__ import annotations

import torch

from solvers.sqp.endgame import POLISH_HALVINGS, MeritBacktrack

LOWER = torch.tensor([-1.0], dtype=torch.float64)
UPPER = torch.tensor([0.0], dtype=torch.float64)


def _params(value: float) -> list[torch.Tensor]:
    return [torch.full((3,), value)]


def test_first_iterate_and_improvements_are_accepted():
    search = MeritBacktrack(tau=0.1)
    p = _params(1.0)
    assert not search.rejects(1.0, torch.tensor([0.5], dtype=torch.float64), LOWER, UPPER, p)  # phi 0.6
    p[0].fill_(2.0)
    assert not search.rejects(0.9, torch.tensor([0.2], dtype=torch.float64), LOWER, UPPER, p)  # phi 0.29
    assert torch.equal(p[0], torch.full((3,), 2.0))  # accepted iterates are not moved


def test_a_step_that_raises_the_merit_is_halved_back_towards_the_accepted_iterate():
    search = MeritBacktrack(tau=0.1)
    p = _params(1.0)
    search.rejects(1.0, torch.tensor([0.0], dtype=torch.float64), LOWER, UPPER, p)  # phi 0.1, accepted at 1
    p[0].fill_(5.0)
    # phi = 0.1 * 1.2 + 0.3 (0.3 above the upper bound) = 0.42 > 0.1: moved to 1 + (5 - 1) / 2
    assert search.rejects(1.2, torch.tensor([0.3], dtype=torch.float64), LOWER, UPPER, p)
    assert torch.allclose(p[0], torch.full((3,), 3.0))


def test_after_the_last_halving_the_iterate_is_accepted_whatever_its_merit():
    search = MeritBacktrack(tau=0.1)
    p = _params(0.0)
    search.rejects(0.0, torch.tensor([0.0], dtype=torch.float64), LOWER, UPPER, p)
    worse = torch.tensor([1.0], dtype=torch.float64)
    rejected = 0
    while search.rejects(1.0, worse, LOWER, UPPER, p):
        rejected += 1
        assert rejected <= POLISH_HALVINGS
    assert rejected == POLISH_HALVINGS
    assert torch.allclose(p[0], torch.full((3,), 0.0))  # 0 stays 0 under halving towards 0
    # the accepted iterate is now the worse one: the same merit again is not a rise
    assert not search.rejects(1.0, worse, LOWER, UPPER, p)


def test_unconstrained_runs_are_never_backtracked():
    search = MeritBacktrack(tau=0.1)
    p = _params(1.0)
    assert not search.rejects(1.0, None, LOWER, UPPER, p)
    assert not search.rejects(9.0, None, LOWER, UPPER, p)


def _train_accuracy(model, data) -> float:
    with torch.no_grad():
        pred = (model(data.X).reshape(-1) > 0).long()
    return float((pred == data.y.long()).float().mean())


def test_dutch_mini_batch_linear_keeps_the_full_batch_accuracy(shared_data, one_torch_thread):
    """Dutch, linear, DI >= 0.8, batches of 256 for 10 epochs against 300 full-batch epochs: the
    polish from the tail average must not trade the objective for feasibility (without the line
    search one seed ended half a point below the full batch, thrashing across the bound)."""
    import warnings

    import fairopt
    from fairopt.constraints import DisparateImpact
    from solvers import StochasticSQP
    from solvers.outcome import BoundWarning

    data = fairopt.datasets.load("dutch", data_dir=shared_data)
    for seed in (0, 1, 2):
        train, _ = data.split(test_size=0.3, seed=seed)
        sens = train.sensitive_names[0]
        accuracy = {}
        for batch, epochs in ((256, 10), (None, 300)):
            model = fairopt.models.linear(train.n_features, seed=seed)
            with warnings.catch_warnings():
                warnings.simplefilter("error", BoundWarning)
                StochasticSQP(batch_size=batch, epochs=epochs, seed=seed, verbose=0).fit(
                    model, train, loss="bce", constraints=[DisparateImpact(sens, delta=0.8)])
            accuracy[batch] = _train_accuracy(model, train)
        assert accuracy[256] >= accuracy[None] - 0.004, (seed, accuracy)
