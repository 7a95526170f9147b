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


class _Batch:
    def __init__(self, y, weights=None, exposure=None):
        self.y, self.weights, self.exposure = y, weights, exposure

    def __len__(self):
        return len(self.y)


@pytest.mark.parametrize("name", ["bce", "mse", "poisson", "scaled-mse", "custom"])
@pytest.mark.parametrize("weights", [None, "some", "zeros"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_value_and_gradient_equal_autograd(name, weights, dtype):
    """The closed-form gradients of the built-in losses against a backward pass through them."""
    from solvers.losses import get_loss, mse_loss, scaled_mse_loss, value_and_gradient

    g = torch.Generator().manual_seed(0)
    n = 50
    out = torch.randn(n, generator=g, dtype=dtype)
    y = (torch.rand(n, generator=g) < 0.4).to(dtype) if name == "bce" else torch.rand(n, generator=g, dtype=dtype) * 3
    w = {None: None, "some": torch.randint(0, 3, (n,), generator=g).to(dtype), "zeros": torch.zeros(n, dtype=dtype)}
    batch = _Batch(y, w[weights], torch.rand(n, generator=g, dtype=dtype) + 0.5 if name == "poisson" else None)
    loss = {"scaled-mse": scaled_mse_loss(2.5), "custom": lambda o, b: mse_loss(o, b) + o.abs().mean()}.get(name) \
        or get_loss(name)
    leaf = out.clone().requires_grad_(True)
    f_ref = loss(leaf, batch)
    (df_ref,) = torch.autograd.grad(f_ref, leaf)
    f, df = value_and_gradient(loss, out, batch)
    assert not f.requires_grad and not df.requires_grad
    assert float(f) == float(f_ref)  # the same function call
    tol = 1e-6 if dtype == torch.float32 else 1e-14
    torch.testing.assert_close(df, df_ref, rtol=tol, atol=tol)


@pytest.mark.parametrize("name", ["bce", "mse", "poisson"])
def test_the_best_constant_of_a_named_loss_reads_views_of_the_targets_with_the_same_value(name):
    """best_constant_output of a named loss walks views of the targets (a memory-mapped data set's inputs stay on
    disk); its answer equals that of a loss it cannot name, which walks the chunks of all rows."""
    import numpy as np

    from fairopt import FairData
    from solvers.losses import best_constant_output, get_loss, target_blocks

    rng = np.random.default_rng(0)
    n = 1000
    y = (rng.random(n) < 0.3).astype(float) if name == "bce" else (rng.poisson(0.4, n).astype(float)
                                                                    if name == "poisson" else rng.normal(3.0, 2.0, n))
    data = FairData.from_arrays(rng.normal(size=(n, 3)), y, {"s": rng.integers(0, 2, n)},
                                task="binary" if name == "bce" else ("poisson" if name == "poisson" else "regression"),
                                sample_weight=rng.uniform(0.5, 2.0, n),
                                **({"exposure": rng.uniform(0.2, 1.0, n)} if name == "poisson" else {}))
    named = best_constant_output(name, data, chunk_rows=300)
    plain = get_loss(name)
    unnamed = best_constant_output(lambda out, batch: plain(out, batch), data, chunk_rows=300)
    assert named == pytest.approx(unnamed, rel=1e-12, abs=1e-12)
    blocks = target_blocks(data, 300)
    assert [len(b) for b in blocks] == [300, 300, 300, 100]
    assert blocks[1].y.data_ptr() == torch.as_tensor(data.y).reshape(-1)[300:].data_ptr()  # a view, not a copy


def test_the_input_check_counts_bad_rows_chunk_by_chunk(monkeypatch):
    """check_dataset tests X in chunks of rows (a memory-mapped X is not flagged entry by entry at once): the
    rows with a NaN or an inf are counted across the chunks."""
    import solvers.problem as problem

    monkeypatch.setattr(problem, "CHECK_CHUNK_ROWS", 3)
    X = torch.zeros(10, 2)
    X[1, 0] = X[4, 1] = X[4, 0] = X[9, 1] = float("nan")
    data = type("Rows", (), {"X": X, "y": torch.zeros(10), "subset": lambda self, i: self, "__len__": lambda self: 10})()
    with pytest.raises(ValueError, match=r"data.X: 3 row\(s\) hold missing input values"):
        problem.check_dataset(data)
    X[1, 0] = X[4, 1] = X[4, 0] = X[9, 1] = 0.0
    X[8, 0] = float("inf")
    with pytest.raises(ValueError, match=r"data.X: 1 row\(s\) hold infinite input values"):
        problem.check_dataset(data)
