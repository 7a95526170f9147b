"""Models with dropout or batch norm: the engines step them in training mode, and judge (and return)
the model in eval mode, the mode it predicts in. Before, the SQP engine measured feasibility with
dropout masks drawn, and called models feasible whose deterministic predictions missed the bound."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch

from fairopt import FairData
from fairopt.constraints import DisparateImpact
from solvers import LagrangianDual, StochasticSQP
from solvers.problem import changes_in_eval_mode

pytestmark = [pytest.mark.usefixtures("one_torch_thread")]


@pytest.fixture(scope="module")
def rows() -> FairData:
    rng = np.random.default_rng(3)
    n = 3000
    s = (rng.random(n) < 0.4).astype(int)
    X = rng.normal(size=(n, 6)) + 0.8 * s[:, None] * rng.normal(size=6)
    y = (X @ rng.normal(size=6) + 0.9 * s + rng.normal(size=n) > 0.6).astype(int)
    return FairData.from_arrays(X, y, {"s": s})


def _dropout_net(p: int, seed: int) -> torch.nn.Module:
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(p, 32), torch.nn.ReLU(), torch.nn.Dropout(0.5), torch.nn.Linear(32, 1))


def _eval_rows(model: torch.nn.Module, constraint: DisparateImpact, data: FairData) -> torch.Tensor:
    with torch.no_grad():
        return constraint.exact(model(data.X).reshape(-1), data).reshape(-1).to(torch.float64)


def test_which_models_change_in_eval_mode():
    assert changes_in_eval_mode(torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.Dropout(0.1)))
    assert changes_in_eval_mode(torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.BatchNorm1d(4)))
    assert not changes_in_eval_mode(torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.BatchNorm1d(
        4, track_running_stats=False)))
    assert not changes_in_eval_mode(torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.ReLU()))
    assert not changes_in_eval_mode(lambda x: x)


@pytest.mark.parametrize("batch_size", [None, 256])
@pytest.mark.parametrize("seed", [0, 1])
def test_sqp_judges_and_returns_a_dropout_model_in_eval_mode(rows, batch_size, seed):
    model = _dropout_net(rows.n_features, seed)
    constraint = DisparateImpact("s", delta=0.8)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = StochasticSQP(batch_size=batch_size, epochs=4 if batch_size else 60, seed=seed, verbose=0).fit(
            model, rows, loss="bce", constraints=[constraint])
    assert not model.training  # returned in the mode its rows were measured in
    measured = _eval_rows(model, constraint, rows)
    np.testing.assert_allclose(result.info["c_exact"], measured.numpy(), atol=1e-9)
    missed = bool((measured > 1e-6).any())
    assert result.info["feasible"] == (not missed)
    assert missed == any(w.category.__name__ == "BoundWarning" for w in caught)


def test_lagrangian_measures_a_dropout_model_in_eval_mode(rows):
    model = _dropout_net(rows.n_features, 0)
    constraint = DisparateImpact("s", delta=0.8)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        result = LagrangianDual(batch_size=256, epochs=3, lr=0.01, seed=0, verbose=0).fit(
            model, rows, loss="bce", constraints=[constraint])
    assert not model.training
    np.testing.assert_allclose(result.info["c_exact"], _eval_rows(model, constraint, rows).numpy(), atol=1e-9)


class _Detached(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(6, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.linear(x).detach()


@pytest.mark.parametrize("engine", [StochasticSQP(epochs=1, verbose=0), LagrangianDual(epochs=1, verbose=0)])
def test_a_model_whose_output_is_detached_is_refused_before_training(rows, engine):
    with pytest.raises(ValueError, match="its output does not depend on its trainable parameters"):
        engine.fit(_Detached(), rows, loss="bce", constraints=[DisparateImpact("s", delta=0.8)])


def test_a_data_loader_is_refused_with_the_rows_to_give():
    from torch.utils.data import DataLoader, TensorDataset

    loader = DataLoader(TensorDataset(torch.randn(10, 2), torch.ones(10)))
    with pytest.raises(ValueError, match="got DataLoader.*FairData.from_arrays"):
        StochasticSQP(epochs=1, verbose=0).fit(torch.nn.Linear(2, 1), loader, loss="bce")
