"""Penalty engine, AdaHessian / Hutchinson, and the fairness penalties of fairopt.penalties."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
import torch

from fairopt import penalties
from fairopt.constraints import DisparateImpact
from fairopt.data import FairData
from fairopt.measures import dp_difference, wdi, wdp
from fairopt.measures.gedi import gedi
from fairopt.surrogates import get_surrogate
from solvers.losses import bce_loss
from solvers.optimizers import AdaHessian, hutchinson_diagonal, make_optimizer
from solvers.penalty import Penalty, penalised_loss, penalty_terms
from solvers.problem import violation
from solvers.sampling import minibatches


pytestmark = pytest.mark.usefixtures("one_torch_thread")


def _tiny(n: int = 240, seed: int = 0) -> FairData:
    """Binary task, a binary sensitive feature correlated with the target, a continuous one."""
    rng = np.random.default_rng(seed)
    s = rng.integers(0, 2, n)
    age = rng.uniform(18, 70, n)
    X = np.column_stack([rng.normal(size=n) + 1.2 * s, rng.normal(size=n), (age - 40) / 10])
    logits = 1.5 * X[:, 0] - 0.5 * X[:, 1]
    y = (rng.uniform(size=n) < 1 / (1 + np.exp(-logits))).astype(float)
    return FairData.from_arrays(X, y, {"sex": s, "age": age}, sensitive_kinds={"sex": "binary", "age": "continuous"})


def _linear(p: int, seed: int = 0) -> torch.nn.Module:
    from fairopt.models import linear

    return linear(p, seed=seed)


# ----------------------------------------------------------------------------- Hutchinson / AdaHessian
def _quadratic_grads(A: torch.Tensor, b: torch.Tensor, w: torch.Tensor) -> list[torch.Tensor]:
    f = 0.5 * w @ A @ w - b @ w
    return list(torch.autograd.grad(f, [w], create_graph=True))


def _spd(p: int, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    M = torch.randn(p, p, generator=g, dtype=torch.float64)
    return M @ M.T + p * torch.eye(p, dtype=torch.float64)


def test_hutchinson_over_all_sign_vectors_is_exact_diagonal():
    A = _spd(4, 1)
    w = torch.randn(4, dtype=torch.float64, requires_grad=True)
    grads = _quadratic_grads(A, torch.zeros(4, dtype=torch.float64), w)
    signs = [[torch.tensor(z, dtype=torch.float64)] for z in itertools.product((-1.0, 1.0), repeat=4)]
    (estimate,) = hutchinson_diagonal(grads, [w], vectors=signs)
    torch.testing.assert_close(estimate, torch.diagonal(A), atol=1e-12, rtol=0)


def test_hutchinson_random_estimate_is_unbiased():
    A = _spd(5, 2)
    w = torch.zeros(5, dtype=torch.float64, requires_grad=True)
    grads = _quadratic_grads(A, torch.ones(5, dtype=torch.float64), w)
    n = 4000
    (estimate,) = hutchinson_diagonal(grads, [w], n_samples=n, generator=torch.Generator().manual_seed(0))
    # Var(z_i (Az)_i) = sum_{j != i} A_ij^2: the mean is within 5 standard errors of diag(A)
    off = A - torch.diag(torch.diagonal(A))
    stderr = torch.sqrt((off**2).sum(dim=1) / n)
    assert bool(((estimate - torch.diagonal(A)).abs() <= 5 * stderr).all())
    assert float((estimate - torch.diagonal(A)).abs().max()) > 0  # random, not the exact enumeration


def test_hutchinson_needs_the_gradient_graph():
    w = torch.ones(3, requires_grad=True)
    (g,) = torch.autograd.grad((w**2).sum(), [w])
    with pytest.raises(ValueError, match="create_graph"):
        hutchinson_diagonal([g], [w])


def test_adahessian_first_step_matches_the_formula():
    # diagonal Hessian: the Hutchinson estimate is exact, so step 1 is
    # w1 = w0 - lr * g / (|diag A| + eps) (bias corrections cancel at t = 1)
    A = torch.diag(torch.tensor([4.0, 0.5, 2.0], dtype=torch.float64))
    b = torch.tensor([1.0, -1.0, 0.5], dtype=torch.float64)
    w = torch.tensor([0.3, -0.2, 1.0], dtype=torch.float64, requires_grad=True)
    w0 = w.detach().clone()
    opt = AdaHessian([w], lr=0.1, eps=1e-4)
    (w.grad,) = _quadratic_grads(A, b, w)
    g = (A @ w0 - b)
    opt.step()
    expected = w0 - 0.1 * g / (torch.diagonal(A) + 1e-4)
    torch.testing.assert_close(w.detach(), expected, atol=1e-14, rtol=0)
    assert not w.grad.requires_grad  # the graph is released


def test_adahessian_converges_on_a_quadratic():
    A, b = _spd(6, 3), torch.linspace(-1, 1, 6, dtype=torch.float64)
    w_star = torch.linalg.solve(A, b)
    w = torch.zeros(6, dtype=torch.float64, requires_grad=True)
    opt = AdaHessian([w], lr=0.2, seed=1)
    for _ in range(600):
        opt.zero_grad()
        (w.grad,) = _quadratic_grads(A, b, w)
        opt.step()
    assert float((w.detach() - w_star).norm()) < 1e-4


def test_make_optimizer_validates():
    w = [torch.zeros(2, requires_grad=True)]
    with pytest.raises(ValueError, match="optimizer"):
        make_optimizer("lbfgs", w, lr=0.1)
    with pytest.raises(ValueError, match="optimizer_options"):
        make_optimizer("adam", w, lr=0.1, hessian_power=0.5)
    with pytest.raises(ValueError, match="hessian_power"):
        AdaHessian(w, hessian_power=2.0)


# ----------------------------------------------------------------------------- Penalty engine
def test_weight_zero_is_bit_identical_to_a_plain_adam_loop():
    data = _tiny()
    lr, epochs, batch, seed = 0.05, 3, 64, 7
    reference = _linear(data.n_features, seed=0)
    opt = torch.optim.Adam(reference.parameters(), lr=lr)
    generator = torch.Generator().manual_seed(seed)
    for _ in range(epochs):
        for idx in minibatches(len(data), batch, generator):
            b = data.subset(idx)
            opt.zero_grad()
            bce_loss(reference(b.X), b).backward()
            opt.step()
    model = _linear(data.n_features, seed=0)
    result = Penalty(weight=0.0, epochs=epochs, batch_size=batch, lr=lr, seed=seed).fit(
        model, data, loss="bce", penalties=[penalties.DemographicParitySquared("sex")])
    for p, q in zip(model.parameters(), reference.parameters()):
        assert torch.equal(p, q)
    assert len(result.history) == epochs * math.ceil(len(data) / batch)
    assert all(r["P"] == 0.0 for r in result.history.records)
    assert max(r["penalty"][0] for r in result.history.records) > 0  # still evaluated


def test_one_sgd_step_uses_loss_plus_weighted_penalties():
    data = _tiny()
    pen_a, pen_b = penalties.DemographicParitySquared("sex"), DisparateImpact("sex", delta=0.95)
    model = _linear(data.n_features, seed=3)
    ref = _linear(data.n_features, seed=3)
    for term in (pen_a, pen_b):
        term.setup(data)
    out = ref(data.X)
    hinge = violation(pen_b(out, data), pen_b.lower, pen_b.upper)
    objective = bce_loss(out, data) + 2.0 * pen_a(out, data) + 0.5 * hinge
    objective.backward()
    expected = [p.detach() - 0.1 * p.grad for p in ref.parameters()]
    result = Penalty(weight=[2.0, 0.5], epochs=1, optimizer="sgd", lr=0.1).fit(
        model, data, loss="bce", penalties=[pen_a, pen_b])
    for p, e in zip(model.parameters(), expected):
        torch.testing.assert_close(p.detach(), e, atol=1e-6, rtol=0)
    record = result.history[0]
    assert record["penalty"][1] == pytest.approx(float(hinge.detach()), abs=1e-7) and float(hinge.detach()) > 0
    assert record["objective"] == pytest.approx(float(objective.detach()), abs=1e-6)
    assert result.info["penalty_names"] == [pen_a.name, pen_b.name]


def test_penalised_loss_is_loss_plus_weighted_terms():
    data = _tiny()
    dp, di = penalties.DemographicParitySquared("sex"), DisparateImpact("sex", delta=0.95)
    objective = penalised_loss("bce", [dp, di], [3.0, 0.5], data)  # sets the terms up on data
    out = torch.linspace(-2, 2, len(data))
    expected = bce_loss(out, data) + 3.0 * dp(out, data) + 0.5 * violation(di(out, data), di.lower, di.upper)
    torch.testing.assert_close(objective(out, data), expected, atol=1e-7, rtol=0)
    only_loss = penalised_loss("bce", [dp, di], [0.0, 0.0], data)
    assert torch.equal(only_loss(out, data), bce_loss(out, data))


def test_penalty_reduces_the_dp_gap_and_adahessian_trains():
    data = _tiny(400)
    gaps = {}
    for weight in (0.0, 20.0):
        model = _linear(data.n_features, seed=0)
        Penalty(weight=weight, epochs=60, lr=0.05).fit(model, data, penalties=penalties.DemographicParitySquared("sex"))
        with torch.no_grad():
            gaps[weight] = dp_difference((model(data.X) > 0).float(), data.sensitive["sex"])
    assert gaps[0.0] > 0.3 and gaps[20.0] < 0.5 * gaps[0.0]
    model = _linear(data.n_features, seed=0)
    res = Penalty(weight=1.0, epochs=30, optimizer="adahessian", lr=0.1, batch_size=100).fit(
        model, data, penalties=penalties.FaUCI("wdp", "sex"))
    f = res.history.column("f")
    assert res.status == "max_epochs" and f[-4:].mean() < f[:4].mean() - 0.05


def test_penalty_validation_and_divergence():
    data = _tiny(60)
    with pytest.raises(ValueError, match="weight"):
        Penalty(weight=-1.0)
    with pytest.raises(ValueError, match="weight"):
        Penalty(weight=[1.0, 2.0]).fit(_linear(3), data, penalties=[penalties.DemographicParitySquared("sex")])
    with pytest.raises(ValueError, match="optimizer"):
        Penalty(optimizer="rmsprop")
    with pytest.raises(ValueError, match="epochs"):
        Penalty(epochs=0)
    with pytest.raises(ValueError, match="penalties"):
        penalty_terms([3.0])
    with pytest.raises(ValueError, match="scalar"):
        Penalty(epochs=1).fit(_linear(3), data, penalties=[lambda out, batch: out])
    res = Penalty(epochs=2).fit(_linear(3), data, penalties=[lambda out, batch: out.sum() * math.inf])
    assert res.status == "diverged" and not res.converged and len(res.history) == 0


# ----------------------------------------------------------------------------- fairopt.penalties
def test_dp_squared_is_the_squared_gap_of_smoothed_rates():
    data = _tiny()
    out = torch.linspace(-2, 2, len(data))
    pen = penalties.DemographicParitySquared("sex")
    pen.setup(data)
    phi = get_surrogate("smoothed_step")(out)
    s = data.sensitive["sex"]
    q = phi[s == 1].mean() - phi[s == 0].mean()
    torch.testing.assert_close(pen(out, data), q**2, atol=1e-7, rtol=0)
    hard = (out > 0).float()
    assert float(pen.exact(out, data)) == pytest.approx(dp_difference(hard, s) ** 2, abs=1e-7)


def test_fauci_penalties_match_the_measures():
    data = _tiny()
    out = torch.linspace(-1, 1, len(data), requires_grad=True)
    h, s = torch.sigmoid(out.detach()), data.sensitive["sex"]
    for metric, reference in (("wdp", wdp(h, s)), ("wdi", 1 - wdi(h, s))):
        pen = penalties.FaUCI(metric, "sex")
        pen.setup(data)
        value = pen(out, data)
        assert float(value.detach()) == pytest.approx(float(reference), abs=1e-7)
        (grad,) = torch.autograd.grad(value, out)
        assert bool(torch.isfinite(grad).all()) and float(grad.abs().sum()) > 0
    with pytest.raises(ValueError, match="continuous"):
        penalties.FaUCI("wdp", "age").setup(data)
    with pytest.raises(ValueError, match="metric"):
        penalties.FaUCI("xdp", "sex")


def _u_centred(v: np.ndarray) -> np.ndarray:
    """U-centred Euclidean distance matrix (Szekely & Rizzo 2014), brute force."""
    n = v.shape[0]
    d = np.linalg.norm(v[:, None, :] - v[None, :, :], axis=-1)
    u = d - d.sum(0, keepdims=True) / (n - 2) - d.sum(1, keepdims=True) / (n - 2) + d.sum() / ((n - 1) * (n - 2))
    np.fill_diagonal(u, 0.0)
    return u


def test_dcov_penalties_match_the_brute_force_u_statistic():
    data = _tiny(120)
    n = len(data)
    out = torch.linspace(-1, 1, n, dtype=torch.float32) * torch.cos(torch.arange(n).float())
    h = torch.sigmoid(out).double().numpy()[:, None]
    age = data.sensitive["age"].double().numpy()[:, None]
    sex = data.sensitive["sex"].double().numpy()[:, None]
    for sensitive, s in ((["age"], age), (["sex", "age"], np.hstack([sex, age]))):
        pen = penalties.DistanceCovariancePenalty(sensitive, kind="ccdcov")
        pen.setup(data)
        reference = float((_u_centred(h) * _u_centred(s)).sum() / (n * (n - 3)))
        assert float(pen(out, data)) == pytest.approx(reference, rel=1e-4, abs=1e-8)


def test_gedi_penalty_matches_the_measure():
    data = _tiny()
    out = torch.linspace(-1, 1, len(data), requires_grad=True)
    pen = penalties.GeDIPenalty("age", degree=2)
    pen.setup(data)
    reference = gedi(data.sensitive["age"].double(), torch.sigmoid(out.detach()).double(), degree=2)
    assert float(pen(out, data).detach()) == pytest.approx(float(reference), rel=1e-5)
    z = (data.sensitive["age"].double() - data.sensitive["age"].double().mean())
    y = torch.sigmoid(out.detach()).double()
    linear = penalties.GeDIPenalty("age", degree=1)
    linear.setup(data)
    closed_form = abs(float(((z - z.mean()) * (y - y.mean())).mean() / z.var(unbiased=False))) * float(z.std(unbiased=False))
    assert float(linear(out, data).detach()) == pytest.approx(closed_form, rel=1e-5)


@pytest.mark.parametrize("engine", ["penalty", "lagrangian"])
def test_first_order_divergence_returns_the_last_finite_iterate_and_warns(engine):
    """A loss that turns non-finite mid-run: the engine stops, writes back the last
    iterate whose objective was finite, warns, and does not report convergence."""
    from solvers import DivergedWarning, LagrangianDual

    data = _tiny()
    calls = {"n": 0}
    seen: list = []

    def flaky(out, batch):
        if not out.requires_grad:  # the engines' own evaluations on all rows
            return bce_loss(out, batch)
        calls["n"] += 1
        if calls["n"] == 6:
            seen.append([p.detach().clone() for p in model.parameters()])
            return out.sum() * float("inf")
        return bce_loss(out, batch)

    model = torch.nn.Sequential(torch.nn.Linear(data.n_features, 1), torch.nn.Flatten(0))
    with pytest.warns(DivergedWarning, match="diverged .* at iteration 5; the last finite iterate"):
        if engine == "penalty":
            result = Penalty(epochs=20, lr=0.1).fit(model, data, loss=flaky, penalties=[])
        else:
            result = LagrangianDual(epochs=20, lr=0.1).fit(model, data, loss=flaky,
                                                           constraints=[DisparateImpact("sex", delta=0.8)])
    assert result.status == "diverged" and not result.converged
    assert all(bool(torch.isfinite(p).all()) for p in model.parameters())
    if engine == "penalty":  # the iterate before the diverging evaluation's step
        assert not all(torch.equal(a, b) for a, b in zip(seen[0], model.parameters()))


def test_the_first_order_engines_warn_when_their_model_is_no_better_than_a_constant():
    """Penalty and LagrangianDual warn as SQP does when the returned model's loss on all rows is not below the
    best constant output's (an engine user's Penalty run ended at 0.46 accuracy, majority 0.75, silently);
    a sound fit is not warned."""
    import warnings

    import fairopt
    from fairopt.constraints import DisparateImpact
    from solvers import LagrangianDual
    from solvers.outcome import ConstantPredictorWarning

    data = fairopt.datasets.load("adult").subset(torch.arange(3000))
    for engine, kind in ((Penalty(weight=1.0, epochs=1, lr=5.0, seed=0), "penalties"),
                         (LagrangianDual(epochs=1, lr=5.0, seed=0), "constraints")):
        model = torch.nn.Linear(data.n_features, 1)
        with torch.no_grad():
            model.bias.fill_(3.0)  # every row positive: a loss far above the constant's
            model.weight.zero_()
        engine.lr = 1e-9  # the steps leave it there
        with pytest.warns(ConstantPredictorWarning, match="no better than a constant predictor") as caught:
            engine.fit(model, data, loss="bce", **{kind: [DisparateImpact("sex", 0.8)]})
        # the remedies include a more flexible model, for a class that holds no better model meeting the bounds
        assert any("a more flexible one (a network) may" in str(w.message) for w in caught)
    good = fairopt.models.linear(data.n_features, seed=0)
    with warnings.catch_warnings():
        warnings.simplefilter("error", ConstantPredictorWarning)
        Penalty(weight=0.1, epochs=100, lr=0.05, seed=0).fit(good, data, loss="bce",
                                                            penalties=[DisparateImpact("sex", 0.8)])
