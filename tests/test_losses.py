"""Named losses and the targets they accept (solvers.losses)."""

from __future__ import annotations

import pytest
import torch

from solvers import LagrangianDual, Penalty, StochasticSQP
from solvers.losses import ScaledLoss, bce_loss, check_targets, poisson_loss


class _Rows:
    def __init__(self, y):
        self.X = torch.linspace(-1, 1, len(y)).reshape(-1, 1)
        self.y = torch.as_tensor(y, dtype=torch.float32)

    def __len__(self):
        return len(self.y)

    def subset(self, idx):
        return _Rows(self.y[idx])


class _Never:
    """A constraint that never binds (LagrangianDual needs one)."""

    name, n_rows, row_names = "never", 1, ["never"]
    lower, upper = torch.tensor([-1e9]), torch.tensor([1e9])

    def setup(self, data):
        pass

    def __call__(self, out, batch):
        return out.mean().reshape(1)

    def exact(self, out, batch):
        return self(out, batch)


@pytest.mark.parametrize("loss, y, message", [
    ("bce", [0.0, 1.0, 0.37], r"loss 'bce': expected 0/1 labels, got 0.37"),
    (bce_loss, [0.0, 2.0], r"loss 'bce': expected 0/1 labels, got 2.0"),
    ("poisson", [0.0, 3.0, -1.0], r"loss 'poisson': expected counts or rates >= 0, got -1.0"),
    (poisson_loss, [1.0, -0.5], r"loss 'poisson'"),
    (ScaledLoss("mse", 0.5), [0.0, float("nan")], r"loss 'mse': the targets contain NaN"),
    (ScaledLoss(ScaledLoss("bce", 2.0), 0.5), [0.5, 1.0], r"loss 'bce'"),
])
def test_mismatched_targets_are_refused(loss, y, message):
    with pytest.raises(ValueError, match=message):
        check_targets(loss, _Rows(y))


@pytest.mark.parametrize("loss, y", [
    ("bce", [0.0, 1.0, 1.0]), ("poisson", [0.0, 2.0, 0.5]), ("mse", [-3.0, 2.5]),
    (lambda out, batch: out.mean(), [-7.0, 0.3]),  # a user's callable is not checked
])
def test_fitting_targets_pass(loss, y):
    check_targets(loss, _Rows(y))


@pytest.mark.parametrize("engine", [
    lambda: StochasticSQP(epochs=1),
    lambda: Penalty(epochs=1),
    lambda: LagrangianDual(epochs=1),
])
def test_every_engine_checks_targets_before_training(engine):
    model = torch.nn.Sequential(torch.nn.Linear(1, 1), torch.nn.Flatten(0))
    before = [p.detach().clone() for p in model.parameters()]
    kwargs = {"constraints": [_Never()]} if isinstance(engine(), LagrangianDual) else {}
    with pytest.raises(ValueError, match="loss 'bce': expected 0/1 labels"):
        engine().fit(model, _Rows([0.0, 0.4, 1.0]), loss="bce", **kwargs)
    assert all(torch.equal(a, b) for a, b in zip(before, model.parameters()))
