"""Adam steps of the mini-batch SQP (``SQPOptions.momentum``): which fits take them, and the
recursion itself against an independent reference.

The reference is Adam's recursion written out here in float64 on the same batches (the engine's
sampler: one ``torch.randperm`` per epoch from a generator seeded with ``seed``), with the batch
gradients from autograd on a copy of the model: ``m <- b1 m + (1 - b1) g``,
``v <- b2 v + (1 - b2) g^2``, ``w <- w - lr (m / (1 - b1^t)) / sqrt(v / (1 - b2^t) + mu)``.
Without constraints the QP's step is that step (``d = -g / h``).
"""

from __future__ import annotations

import copy
import warnings

import numpy as np
import pytest
import torch

import fairopt
from fairopt.constraints import DisparateImpact
from solvers import StochasticSQP


@pytest.fixture(scope="module")
def small():
    data = fairopt.datasets.load("adult")
    return data.subset(torch.arange(600))


def _bce(model, X, y):
    return torch.nn.functional.binary_cross_entropy_with_logits(model(X).reshape(-1), y)


def _adam_reference(model, data, batch_size, steps, seed, lr=0.01, b1=0.9, b2=0.999, mu=1e-8):
    """Parameters (flat float64) after each of ``steps`` Adam steps on the engine's batches."""
    ref = copy.deepcopy(model).double()
    params = list(ref.parameters())
    gen = torch.Generator().manual_seed(seed)
    n = len(data)
    X, y = data.X.double(), data.y.double().reshape(-1)
    m = [torch.zeros_like(p) for p in params]
    v = [torch.zeros_like(p) for p in params]
    out, perm, start = [], torch.randperm(n, generator=gen), 0
    for t in range(1, steps + 1):
        if start >= n:
            perm, start = torch.randperm(n, generator=gen), 0
        idx = perm[start:start + batch_size]
        start += batch_size
        grads = torch.autograd.grad(_bce(ref, X[idx], y[idx]), params)
        with torch.no_grad():
            for p, g, m_i, v_i in zip(params, grads, m, v):
                m_i.mul_(b1).add_(g, alpha=1 - b1)
                v_i.mul_(b2).addcmul_(g, g, value=1 - b2)
                p -= lr * (m_i / (1 - b1 ** t)) / torch.sqrt(v_i / (1 - b2 ** t) + mu)
        out.append(torch.cat([p.detach().reshape(-1) for p in params]))
    return out


def test_unconstrained_minibatch_steps_of_an_mlp_are_adams(small):
    """Seven steps (two epochs of batches of 100 on 600 rows, the second reshuffled) match the
    float64 reference within float32 rounding."""
    model = fairopt.models.mlp(small.n_features, hidden=(5,), seed=0)
    expected = _adam_reference(model, small, 100, 7, seed=3)
    seen = []

    def record(engine, rec):
        seen.append(torch.cat([p.detach().reshape(-1).double() for p in model.parameters()]))
        return len(seen) == 7  # stop there (the run plans 102 steps, enough for Adam steps)

    engine = StochasticSQP(epochs=17, batch_size=100, seed=3, polish_iterations=0, callbacks=[record])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        engine.fit(model, small, loss="bce")
    assert engine.adam_steps_
    for got, want in zip(seen[:7], expected):
        np.testing.assert_allclose(got.numpy(), want.numpy(), atol=2e-5)
    # the first step moves every parameter with a gradient well above sqrt(mu) by lr: Adam's sign step
    first = (seen[0] - torch.cat([p.detach().reshape(-1) for p in
                                  fairopt.models.mlp(small.n_features, hidden=(5,), seed=0).parameters()]).double())
    assert float(first.abs().max()) <= 0.01 + 1e-6
    assert float((first.abs() > 0.009).double().mean()) > 0.5


@pytest.mark.parametrize("case, adam", [
    ({"model": "mlp", "batch_size": 50, "epochs": 9}, True),  # 12 x 9 = 108 steps
    ({"model": "mlp", "batch_size": 50, "epochs": 8}, False),  # 96 steps: too few for Adam's lr
    ({"model": "mlp", "batch_size": 50, "epochs": "auto"}, True),  # 500 steps
    ({"model": "mlp", "batch_size": None, "epochs": 2}, False),  # full batch: the full-batch defaults
    ({"model": "linear", "batch_size": 50, "epochs": 9}, False),  # a linear model keeps the gradient step
    ({"model": "mlp", "batch_size": 50, "epochs": 9, "hessian": "adagrad"}, False),  # another metric
])
def test_which_fits_take_adam_steps(small, case, adam):
    case = dict(case)
    kind = case.pop("model")
    model = (fairopt.models.mlp(small.n_features, hidden=(4,), seed=0) if kind == "mlp"
             else fairopt.models.linear(small.n_features, seed=0))
    engine = StochasticSQP(polish_iterations=0, **case)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        engine.fit(model, small, loss="bce", constraints=[DisparateImpact("sex", delta=0.8)])
    assert engine.adam_steps_ is adam
    if adam:
        assert (engine.lr_, engine.momentum_, engine.hessian_shift_) == (0.01, 0.9, 1e-8)
        assert engine.schedule_for(False) == "none" and engine.state_.m.numel() > 0
    else:
        assert engine.lr_ == 0.5 and engine.momentum_ == 0.0 and engine.state_.m.numel() == 0


@pytest.mark.parametrize("settings, adam, resolved, schedule", [
    ({"lr": 0.3}, True, (0.3, 0.9, 1e-8), "none"),  # an explicit setting replaces Adam's
    ({"momentum": 0.0}, False, (0.5, 0.0, 0.05), "rsqrt"),  # momentum 0 turns Adam steps off
    ({"momentum": 0.5, "lr_schedule": "rsqrt"}, True, (0.01, 0.5, 1e-8), "rsqrt"),
])
def test_explicit_settings_win_over_adam_steps(small, settings, adam, resolved, schedule):
    model = fairopt.models.mlp(small.n_features, hidden=(4,), seed=0)
    engine = StochasticSQP(epochs=9, batch_size=50, polish_iterations=0, **settings)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        engine.fit(model, small, loss="bce")
    assert engine.adam_steps_ is adam and (engine.lr_, engine.momentum_, engine.hessian_shift_) == resolved
    assert engine.schedule_for(False) == schedule and (engine.state_.m.numel() > 0) == (resolved[1] > 0)


def test_the_regressor_keeps_the_gradient_step_on_mini_batches():
    """FairRegressor's SQP defaults set momentum=0 with mini-batches (its lr 0.02 is the gradient
    step's); engine_params can still ask for Adam steps."""
    from fairopt.training import TrainingOptions, engine_param_defaults

    def defaults(task, batch_size, method="sqp"):
        return engine_param_defaults(TrainingOptions(task=task, method=method, batch_size=batch_size), None)

    assert defaults("regression", 64) == {"momentum": 0.0}
    assert defaults("regression", None) == {} and defaults("binary", 64) == {}
    rng = np.random.default_rng(0)
    X = rng.normal(size=(400, 3))
    s = (rng.random(400) < 0.5).astype(float)
    y = X @ np.array([1.0, -0.5, 0.2]) + s + rng.normal(scale=0.3, size=400)
    for engine_params, decays in ((None, True), ({"momentum": "auto"}, False)):  # 7 x 15 = 105 steps
        fitted = fairopt.FairRegressor(model="mlp", hidden=(4,), batch_size=64, epochs=15, verbose=0,
                                       engine_params=engine_params)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            fitted.fit(X, y)
        betas = [r["beta"] for r in fitted.history_.records if r.get("phase") is None and r["qp_status"] != "final"]
        assert betas[0] == 0.02 and (betas[-1] < 0.02) is decays  # "rsqrt" decays; Adam's step is constant
        assert np.isfinite(fitted.predict(X)).all()


@pytest.mark.parametrize("value", [1.0, -0.1, "fast", float("nan")])
def test_invalid_momentum_is_refused(value):
    with pytest.raises(ValueError, match="momentum"):
        StochasticSQP(momentum=value)


def test_a_checkpoint_resumes_only_with_its_own_momentum(small):
    """The first moment is part of the state. A resumed fit takes the steps of its checkpoint under
    "auto" (Adam's after Adam steps, whatever its own length; the gradient step after a short
    run), and explicit settings that disagree with the checkpoint are an error."""
    c = [DisparateImpact("sex", delta=0.8)]

    def fit(engine, model, resume=None):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            engine.fit(model, small, loss="bce", constraints=c, resume=resume)
        return engine

    mlp = fairopt.models.mlp(small.n_features, hidden=(4,), seed=0)
    adam = fit(StochasticSQP(epochs=9, batch_size=50, polish_iterations=0), mlp).state_dict()
    assert adam["momentum_m"].numel() == sum(p.numel() for p in mlp.parameters())
    assert fit(StochasticSQP(epochs=1, batch_size=50), mlp, resume=adam).adam_steps_  # 12 more steps
    with pytest.raises(ValueError, match="momentum"):
        fit(StochasticSQP(epochs=1, batch_size=50, momentum=0.0), mlp, resume=adam)
    short = fit(StochasticSQP(epochs=1, batch_size=50, polish_iterations=0), mlp)
    assert not short.adam_steps_ and short.state_dict()["momentum_m"].numel() == 0
    assert not fit(StochasticSQP(epochs=20, batch_size=50), mlp, resume=short.state_dict()).adam_steps_
    with pytest.raises(ValueError, match="momentum"):
        fit(StochasticSQP(epochs=1, batch_size=50, momentum=0.9), mlp, resume=short.state_dict())
    broken = dict(adam, momentum_m=torch.full_like(adam["momentum_m"], float("nan")))
    with pytest.raises(ValueError, match="first moment"):
        fit(StochasticSQP(epochs=1, batch_size=50), mlp, resume=broken)
