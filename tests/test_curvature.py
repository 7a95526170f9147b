"""The Gauss-Newton diagonal (solvers.curvature) against per-row autograd, and the engine's
``hessian="gauss-newton"`` metric against scikit-learn's logistic regression on an ill-conditioned
one-hot design."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch
from torch import nn

from fairopt.constraints import DisparateImpact
from fairopt.data import FairData
from fairopt.models import linear, mlp
from solvers import StochasticSQP
from solvers.curvature import CurvatureModel, curvature_model, gauss_newton_diagonal, output_curvature
from solvers.losses import get_loss
from solvers.problem import trainable_parameters


def _data(n: int = 60, weights: bool = False, task: str = "binary", seed: int = 0) -> FairData:
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, 4))
    s = rng.integers(0, 2, n)
    y = (rng.random(n) < 0.4).astype(float) if task == "binary" else rng.poisson(2.0, n).astype(float)
    w = rng.uniform(0.5, 2.0, n) if weights else None
    return FairData.from_arrays(X, y, {"s": s}, task=task, sample_weight=w)


def _reference(model: nn.Module, loss, data: FairData) -> torch.Tensor:
    """``sum_i l''_i (d out_i / d w)^2``: the second derivative of the whole loss in each output by
    autograd (no separability assumed: the full output Hessian's diagonal), times each row's own
    squared parameter gradient, one backward pass per row."""
    params = trainable_parameters(model)
    out = model(data.X).reshape(-1).detach().requires_grad_(True)
    hessian = torch.autograd.functional.hessian(lambda o: loss(o, data), out)
    total = None
    for i in range(len(data)):
        grads = torch.autograd.grad(model(data.X[i:i + 1]).reshape(()), params)
        row = torch.cat([g.reshape(-1) for g in grads]) ** 2 * hessian[i, i]
        total = row if total is None else total + row
    return total


@pytest.mark.parametrize("loss_name,task", [("bce", "binary"), ("mse", "regression"), ("poisson", "regression")])
@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize("make", [lambda: linear(4, seed=0), lambda: mlp(4, hidden=(5, 3), seed=0),
                                  lambda: nn.Sequential(nn.Linear(4, 3), nn.Tanh(), nn.Linear(3, 1))])
def test_gauss_newton_diagonal_matches_per_row_autograd(loss_name, task, weighted, make):
    data = _data(weights=weighted, task=task)
    model = make().to(data.X.dtype)
    loss = get_loss(loss_name)
    recognised = curvature_model(model, trainable_parameters(model))
    assert isinstance(recognised, CurvatureModel) and recognised.scale == 1.0
    got = gauss_newton_diagonal(recognised, loss, data)
    assert torch.allclose(got, _reference(model, loss, data), rtol=1e-5, atol=1e-10)
    chunked = gauss_newton_diagonal(recognised, loss, data, chunk_rows=17)  # blocks add up to the same curvature
    assert torch.allclose(chunked, got, rtol=1e-5, atol=1e-10)


def test_gauss_newton_diagonal_adds_the_curvature_of_an_l2_penalty():
    """``alpha / 2 ||W||^2`` has Hessian diagonal ``alpha`` on each weight, 0 on the biases."""
    from solvers.losses import L2Regularised, linear_weights

    data = _data()
    model = mlp(4, hidden=(3,), seed=0)
    params = trainable_parameters(model)
    recognised = curvature_model(model, params)
    penalised = L2Regularised("bce", linear_weights(model), 0.25)
    plain = gauss_newton_diagonal(recognised, get_loss("bce"), data)
    assert torch.equal(gauss_newton_diagonal(recognised, penalised, data), plain)  # without params: the loss's
    got = gauss_newton_diagonal(recognised, penalised, data, params=params) - plain
    weights = {id(w) for w in linear_weights(model)}
    want = torch.cat([torch.full((p.numel(),), 0.25 if id(p) in weights else 0.0) for p in params])
    torch.testing.assert_close(got, want.to(got.dtype))


def test_gauss_newton_diagonal_of_a_network_with_an_affine_output():
    from fairopt.learners import scaled_output

    data = _data(task="regression")
    model = scaled_output(mlp(4, hidden=(5,), seed=0), 3.0, -1.5).to(data.X.dtype)
    loss = get_loss("poisson")  # curvature exp(out): taken at the scaled output, not the network's
    recognised = curvature_model(model, trainable_parameters(model))
    assert recognised is not None and (recognised.scale, recognised.shift) == (3.0, -1.5)
    assert torch.allclose(gauss_newton_diagonal(recognised, loss, data), _reference(model, loss, data),
                          rtol=1e-5, atol=1e-10)
    unreadable = nn.Sequential(nn.Linear(4, 4), nn.ReLU(), _Doubling())  # its last module is no affine output
    assert curvature_model(unreadable, trainable_parameters(unreadable)) is None


class _Doubling(nn.Module):
    """A module the engine cannot read: ``2 * inner(X)``."""

    def __init__(self) -> None:
        super().__init__()
        self.inner = nn.Linear(4, 1)

    def forward(self, X: torch.Tensor) -> torch.Tensor:
        return 2.0 * self.inner(X).reshape(-1)


def test_output_curvature_of_the_cross_entropy_is_p_one_minus_p_over_n():
    data = _data(n=30)
    out = torch.linspace(-3.0, 3.0, 30, dtype=data.X.dtype)
    p = torch.sigmoid(out)
    assert torch.allclose(output_curvature(get_loss("bce"), out, data), p * (1 - p) / 30, rtol=1e-6)
    linear_in_out = lambda o, batch: o.sum()  # noqa: E731
    assert torch.equal(output_curvature(linear_in_out, out, data), torch.zeros_like(out))


def _one_hot_problem(n: int = 3000, seed: int = 0) -> FairData:
    """Logistic data whose design is ill-conditioned as tabular data are: one numeric column and a
    categorical of 8 levels with frequencies from 50% to 0.4% and strong effects, one-hot (a full set
    of dummies)."""
    rng = np.random.default_rng(seed)
    freq = np.array([0.5, 0.3, 0.1, 0.05, 0.03, 0.01, 0.006, 0.004])
    level = rng.choice(len(freq), size=n, p=freq / freq.sum())
    x = rng.normal(size=n)
    logit = 0.8 * x + np.linspace(-2.0, 2.0, len(freq))[level] - 0.3
    y = (rng.random(n) < 1 / (1 + np.exp(-logit))).astype(float)
    X = np.column_stack([x, np.eye(len(freq))[level]])
    s = (rng.random(n) < 0.5).astype(int)
    return FairData.from_arrays(X, y, {"s": s})


def _mean_bce(model: nn.Module, data: FairData) -> float:
    with torch.no_grad():
        out = model(data.X).reshape(-1)
        return float(nn.functional.binary_cross_entropy_with_logits(out, data.y.to(out.dtype).reshape(-1)))


def test_gauss_newton_metric_reaches_the_logistic_optimum_on_a_one_hot_design():
    from sklearn.linear_model import LogisticRegression

    data = _one_hot_problem()
    reference = LogisticRegression(C=1e8, tol=1e-10, max_iter=10_000).fit(data.X.numpy(), data.y.numpy().ravel())
    p = np.clip(reference.predict_proba(data.X.numpy())[:, 1], 1e-12, 1 - 1e-12)
    y = data.y.numpy().ravel()
    optimum = float(-(y * np.log(p) + (1 - y) * np.log(1 - p)).mean())
    losses = {}
    for hessian in ("adam", "gauss-newton"):
        model = linear(data.n_features, seed=0).to(data.X.dtype)
        StochasticSQP(epochs=30, hessian=hessian, seed=0, tol=1e-6, verbose=0).fit(model, data)
        losses[hessian] = _mean_bce(model, data) - optimum
    assert losses["gauss-newton"] < 5e-5  # at the optimum (float32) within 30 iterations
    assert losses["adam"] > 1e-4  # the gradient-scaled metric is still on its way


@pytest.mark.parametrize("batch_size", [None, 500])
def test_gauss_newton_metric_meets_the_bound(batch_size):
    data = _one_hot_problem(n=2000, seed=1)
    model = mlp(data.n_features, hidden=(8,), seed=0).to(data.X.dtype)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        result = StochasticSQP(epochs=60 if batch_size is None else 10, batch_size=batch_size,
                               hessian="gauss-newton", seed=0, verbose=0).fit(
            model, data, constraints=[DisparateImpact("s", delta=0.95)])
    assert result.info["feasible"]
    assert _mean_bce(model, data) < 0.69  # better than a coin (the classes are near balanced)


def test_gauss_newton_metric_needs_a_feed_forward_network():
    data = _data()
    with pytest.raises(ValueError, match="feed-forward network"):
        StochasticSQP(epochs=1, hessian="gauss-newton", verbose=0).fit(_Doubling().to(data.X.dtype), data)
    with pytest.raises(ValueError, match="hessian"):
        StochasticSQP(hessian="newton")


def test_auto_metric_is_gauss_newton_only_for_a_full_batch_fit_of_a_linear_model():
    data = _data()

    def metric(model, loss="bce", **settings):
        engine = StochasticSQP(epochs=2, polish_iterations=0, verbose=0, **settings)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            engine.fit(model, data, loss=loss)
        return engine.hessian_

    assert StochasticSQP().hessian == "auto" and StochasticSQP().hessian_ == "adam"  # before a fit
    assert metric(linear(4, seed=0)) == "gauss-newton"
    assert metric(mlp(4, hidden=(5,), seed=0)) == "adam"  # a network: the gradient metric
    assert metric(mlp(4, hidden=(5,), seed=0), hessian="gauss-newton") == "gauss-newton"  # on request
    assert metric(linear(4, seed=0), batch_size=20) == "adam"  # a noisy batch curvature gains nothing
    assert metric(_Doubling().to(data.X.dtype)) == "adam"  # not recognised: no error under "auto"
    bce = get_loss("bce")
    assert metric(linear(4, seed=0), loss=lambda out, batch: bce(out, batch)) == "adam"  # a callable loss
    assert metric(linear(4, seed=0), hessian="adagrad") == "adagrad"


def test_a_checkpoint_resumes_only_under_its_own_metric():
    data = _data()
    model = linear(4, seed=0)
    engine = StochasticSQP(epochs=2, verbose=0)
    engine.fit(model, data)
    saved = engine.state_dict()
    assert saved["hessian"] == "gauss-newton"
    StochasticSQP(epochs=1, verbose=0).fit(model, data, resume=saved)  # "auto" resolves alike
    with pytest.raises(ValueError, match="'gauss-newton' metric"):
        StochasticSQP(epochs=1, hessian="adam", verbose=0).fit(model, data, resume=saved)
    older = {k: v for k, v in saved.items() if k != "hessian"}  # before the key existed: "adam"
    StochasticSQP(epochs=1, hessian="adam", verbose=0).fit(model, data, resume=older)


def test_gauss_newton_metric_moves_its_average_only_when_refreshed():
    from types import SimpleNamespace

    from solvers.sqp.steps import GAUSS_NEWTON_DECAY, hessian_diag

    options = SimpleNamespace(hessian_="gauss-newton", hessian_shift_=0.01)
    calls = []

    def curvature():
        calls.append(1)
        return torch.tensor([1.0, 4.0])

    v = torch.zeros(2)
    h = hessian_diag(torch.zeros(2), v, True, options, curvature)  # the first step takes G itself
    assert torch.allclose(h, torch.tensor([1.01, 4.01])) and len(calls) == 1
    h = hessian_diag(torch.zeros(2), v, False, options, lambda: torch.tensor([3.0, 0.0]), refresh=False)
    assert torch.allclose(h, torch.tensor([1.01, 4.01]))  # not refreshed: the average and h unchanged
    h = hessian_diag(torch.zeros(2), v, False, options, lambda: torch.tensor([3.0, 0.0]))
    b = GAUSS_NEWTON_DECAY
    assert torch.allclose(h, torch.tensor([b * 1.0 + (1 - b) * 3.0, b * 4.0]) + 0.01)
    with pytest.raises(RuntimeError, match="curvature"):
        hessian_diag(torch.zeros(2), v, False, options, None)


def test_fair_regressor_takes_the_gauss_newton_metric():
    from fairopt import FairRegressor

    rng = np.random.default_rng(0)
    X = rng.normal(size=(400, 3))
    s = rng.integers(0, 2, 400)
    y = X @ np.array([1.0, 2.0, -1.0]) + s + rng.normal(size=400)
    fits = {h: FairRegressor(engine_params={"hessian": h}, seed=0).fit(X, y, sensitive_features=s)
            for h in ("adam", "gauss-newton")}
    assert fits["gauss-newton"].score(X, y) > fits["adam"].score(X, y) - 0.01


def test_gauss_newton_metric_holds_its_steps_to_the_gradient_step_of_a_fresh_start():
    import math

    from solvers.derivatives import Derivatives
    from solvers.sqp.state import SQPState
    from solvers.sqp.steps import GAUSS_NEWTON_FLOOR_SHIFT, qp_direction

    g = torch.tensor([1.0, -2.0, 0.5], dtype=torch.float64)
    h = torch.full((3,), 0.01, dtype=torch.float64)  # little curvature: the Newton step is 100 g
    J = torch.tensor([[1.0, 0.0, 0.0]], dtype=torch.float64)
    der = Derivatives(0.5, g, torch.tensor([0.0], dtype=torch.float64), J, None, 0.0, 0.0)
    working = (torch.tensor([-math.inf], dtype=torch.float64), torch.tensor([1.0], dtype=torch.float64))
    cap = float(g.norm()) / math.sqrt(GAUSS_NEWTON_FLOOR_SHIFT)
    fresh = qp_direction(der, h, (g, h, J), working, SQPState(tau=0.1, xi=1.0, beta=0.5, v=torch.zeros(3)), False,
                         curvature_metric=True)
    assert fresh.capped and abs(float(fresh.d.norm()) - cap) < 1e-9  # the first step: no history, held to the cap
    plain = qp_direction(der, h, (g, h, J), working, SQPState(tau=0.1, xi=1.0, beta=0.5, v=torch.zeros(3)), False)
    assert not plain.capped and float(plain.d.norm()) > 10 * cap  # the gradient metric's first step is not capped
    later = SQPState(tau=0.1, xi=1.0, beta=0.5, v=torch.zeros(3), recent_steps=[10.0] * 10)
    grown = qp_direction(der, h, (g, h, J), working, later, False, curvature_metric=True)
    assert abs(float(grown.d.norm()) - min(30.0, float((g / h).norm()))) < 1e-9  # then 3 x the recent median
    # without constraint rows: the same region under the curvature metric, none under the gradient metric
    free = Derivatives(0.5, g, torch.zeros(0, dtype=torch.float64), torch.zeros(0, 3, dtype=torch.float64), None,
                       0.0, 0.0)
    none = (torch.zeros(0, dtype=torch.float64), torch.zeros(0, dtype=torch.float64))
    step = qp_direction(free, h, (g, h, free.J), none, SQPState(tau=0.1, xi=1.0, beta=0.5, v=torch.zeros(3)), False,
                        curvature_metric=True)
    assert step.status == "unconstrained" and step.capped and abs(float(step.d.norm()) - cap) < 1e-9
    raw = qp_direction(free, h, (g, h, free.J), none, SQPState(tau=0.1, xi=1.0, beta=0.5, v=torch.zeros(3)), False)
    assert not raw.capped and torch.allclose(raw.d, -g / h)


def _correlated(n: int = 1500, together: int = 12, seed: int = 0) -> FairData:
    """``together`` inputs that are noisy copies of one factor (correlation about 0.96) and three
    independent ones: the diagonal metric's spread is about ``together``."""
    rng = np.random.default_rng(seed)
    factor = rng.normal(size=(n, 1))
    X = np.hstack([factor + 0.2 * rng.normal(size=(n, together)), rng.normal(size=(n, 3))])
    y = (factor[:, 0] + X[:, -1] + rng.normal(size=n) > 0).astype(float)
    return FairData.from_arrays(X, y, {"s": rng.integers(0, 2, n)}, sensitive_kinds={"s": "binary"})


def _spread_reference(model: nn.Module, loss, data: FairData, shift: float) -> float:
    """``lambda_max(M^-1/2 G M^-1/2)`` from the explicit Gauss-Newton matrix: the rows' parameter
    gradients stacked (one backward per row) and numpy's symmetric eigensolver."""
    params = trainable_parameters(model)
    rows = []
    for i in range(len(data)):
        grads = torch.autograd.grad(model(data.X[i:i + 1]).reshape(()), params)
        rows.append(torch.cat([g.reshape(-1) for g in grads]).double().numpy())
    A = np.stack(rows)
    with torch.no_grad():
        out = model(data.X).reshape(-1)
    weight = output_curvature(loss, out, data).double().numpy()
    G = (A * weight[:, None]).T @ A
    scale = 1.0 / np.sqrt(np.diag(G) + shift)
    return float(np.linalg.eigvalsh(G * scale[:, None] * scale[None, :]).max())


@pytest.mark.parametrize("loss_name,task,together", [("bce", "binary", 1), ("bce", "binary", 12),
                                                      ("mse", "regression", 6)])
def test_metric_spread_matches_the_explicit_matrix(loss_name, task, together):
    from solvers.curvature import metric_spread

    data = _correlated(n=400, together=together)
    if task == "regression":
        data = FairData.from_arrays(data.X.numpy(), data.X.numpy()[:, 0] * 2.0 + 1.0,
                                    {"s": data.sensitive["s"].numpy()}, task="regression",
                                    sensitive_kinds={"s": "binary"})
    model = linear(data.n_features, seed=3)
    params = trainable_parameters(model)
    loss = get_loss(loss_name)
    got = metric_spread(model, params, curvature_model(model, params), loss, data, 0.01)
    want = _spread_reference(model, loss, data, 0.01)
    assert got == pytest.approx(want, rel=1e-3)
    assert (want > 8.0) == (together == 12)  # inputs that move together spread the metric


def test_metric_spread_of_a_sample_estimates_the_whole():
    import solvers.curvature as curvature

    data = _correlated(n=3000, together=8, seed=1)
    model = linear(data.n_features, seed=0)
    params = trainable_parameters(model)
    recognised, loss = curvature_model(model, params), get_loss("bce")
    whole = curvature.metric_spread(model, params, recognised, loss, data, 0.01)
    limit = curvature.SPREAD_ROWS
    try:
        curvature.SPREAD_ROWS = 1000
        sampled = [curvature.metric_spread(model, params, recognised, loss, data, 0.01, seed=s) for s in range(3)]
    finally:
        curvature.SPREAD_ROWS = limit
    assert all(abs(s - whole) < 0.1 * whole for s in sampled)
    assert len(set(sampled)) > 1  # each seed its own sample


def test_auto_step_follows_the_metric_spread():
    """``lr="auto"`` keeps 0.5 where ``0.5 * lambda <= STABLE_STEP_SPREAD`` and takes
    ``SAFE_STEP_SPREAD / lambda`` beyond, ``lambda`` the Gauss-Newton metric's spread in a full
    batch and the gradient metric's at its first steps for mini-batch steps; a given ``lr`` is
    kept, and a network is not measured."""
    from solvers.sqp.engine import DEFAULT_LR, SAFE_STEP_SPREAD, STABLE_STEP_SPREAD

    def fitted(data, model=None, **settings):
        engine = StochasticSQP(epochs=3, polish_iterations=0, verbose=0, **settings)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            result = engine.fit(model if model is not None else linear(data.n_features, seed=0), data)
        return engine, result

    plain, result = fitted(_correlated(together=1))
    assert DEFAULT_LR * plain.metric_spread_ <= STABLE_STEP_SPREAD and plain.lr_ == DEFAULT_LR
    assert result.info["lr"] == DEFAULT_LR and result.info["metric_spread"] == plain.metric_spread_
    together, result = fitted(_correlated(together=16))
    assert DEFAULT_LR * together.metric_spread_ > STABLE_STEP_SPREAD
    assert together.lr_ == pytest.approx(SAFE_STEP_SPREAD / together.metric_spread_)
    assert result.info["lr"] == pytest.approx(together.lr_) and together.state_.beta <= together.lr_
    given, _ = fitted(_correlated(together=16), lr=0.5)
    assert given.lr_ == 0.5 and given.metric_spread_ is None
    network, _ = fitted(_correlated(together=16), model=mlp(19, hidden=(4,), seed=0))
    assert network.metric_spread_ is None and network.lr_ == DEFAULT_LR
    assert together.start_spread_ is None  # a full batch: no gradient-metric steps
    batches, result = fitted(_correlated(together=16), batch_size=256)
    assert batches.hessian_ == "adam" and batches.start_spread_ is not None and batches.metric_spread_ is not None
    assert DEFAULT_LR * batches.start_spread_ > STABLE_STEP_SPREAD
    assert batches.lr_ == pytest.approx(SAFE_STEP_SPREAD / batches.start_spread_)  # the mini-batch steps
    assert result.info["start_spread"] == batches.start_spread_
    calm, _ = fitted(_correlated(together=1), batch_size=256)
    assert DEFAULT_LR * calm.start_spread_ <= STABLE_STEP_SPREAD and calm.lr_ == DEFAULT_LR


@pytest.mark.parametrize("batch_size", [None, 256])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_inputs_that_move_together_train_without_oscillating(batch_size, seed):
    """Twenty inputs that are noisy copies of one factor: the diagonal metric's step at 0.5 overshoots
    along their common direction and the loss rises several-fold above its start before the
    step shrinks (full batch: the plateau schedule, with TrainingInstabilityWarning); the "auto"
    step, from the Gauss-Newton metric's spread or, with mini-batches, from the gradient metric's at
    its first steps, does not, and ends as low."""
    from solvers.outcome import TrainingInstabilityWarning

    data = _correlated(n=1500, together=20, seed=seed)
    runs = {}
    for lr in ("auto", 0.5):
        model = linear(data.n_features, seed=seed)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            result = StochasticSQP(lr=lr, seed=seed, batch_size=batch_size, verbose=0).fit(model, data)
        f = result.history.column("f")
        f = f[np.isfinite(f)]
        runs[lr] = (float(f.max() / f[0]), any(issubclass(w.category, TrainingInstabilityWarning)
                                               for w in caught), _mean_bce(model, data))
    assert runs[0.5][0] > 1.5  # the fixed step: the loss leaves its start
    assert runs[0.5][1] or batch_size is not None  # (a mini-batch run's warning reads the epoch ends)
    assert runs["auto"][0] < 1.05 and not runs["auto"][1]
    assert runs["auto"][2] <= runs[0.5][2] + 2e-3


@pytest.mark.parametrize("batch_size", [None, 256])
def test_a_resumed_fit_keeps_the_step_of_its_start(batch_size):
    """3 + 3 resumed epochs == 6 epochs for a linear model whose spread shortens ``lr="auto"``: the
    checkpoint carries the start's spreads (measured again at the resumed parameters they would
    set another step); a checkpoint without them measures them anew, a malformed one is refused."""
    data = _correlated(n=1000, together=16, seed=4)

    def fit(epochs, resume=None, model=None):
        model = model if model is not None else linear(data.n_features, seed=0)
        engine = StochasticSQP(epochs=epochs, batch_size=batch_size, polish_iterations=0, seed=0, verbose=0)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            engine.fit(model, data, constraints=[DisparateImpact("s", delta=0.9)], resume=resume)
        return engine, model

    whole_engine, whole = fit(6)
    first_engine, first = fit(3)
    saved = first_engine.state_dict()
    assert saved["spreads"] == [first_engine.metric_spread_, first_engine.start_spread_]
    assert whole_engine.lr_ < 0.5  # the spread shortened the step
    resumed_engine, resumed = fit(3, resume=saved, model=first)
    for a, b in zip(whole.parameters(), resumed.parameters()):
        assert torch.equal(a, b)
    assert resumed_engine.lr_ == whole_engine.lr_ and resumed_engine.state_ == whole_engine.state_
    with pytest.raises(ValueError, match="invalid checkpoint state, spreads"):
        fit(1, resume={**first_engine.state_dict(), "spreads": [-1.0, None]}, model=linear(data.n_features, seed=0))
    old = {k: v for k, v in first_engine.state_dict().items() if k != "spreads"}
    again, _ = fit(1, resume=old, model=linear(data.n_features, seed=0))
    assert again.metric_spread_ is not None  # measured at the resumed parameters
