"""The rescue of a nearly constant binary classifier by its decision threshold (``solvers.output_shift``):
the threshold search against brute force over every label flip, when it applies (a nearly constant
classifier, the binary cross-entropy, a trained output bias) and, through the engine, the returned model
on inputs with many tied rows."""

from __future__ import annotations

import math
import warnings

import pytest
import torch

import fairopt
from fairopt.constraints import DisparateImpact
from fairopt.data import FairData
from solvers import LagrangianDual, StochasticSQP
from solvers.losses import bce_loss, mse_loss
from solvers.outcome import BestIterate, ConstantPredictorWarning, NearConstantWarning
from solvers.problem import as_constraint_set, model_outputs
from solvers.output_shift import SHIFT_BUDGET, no_higher_loss, output_bias, shift_output, threshold_search
from solvers.sqp.state import FitProblem

DELTA = 0.8


def _di_feasible(s: torch.Tensor, delta: float = DELTA):
    def feasible(shifted: torch.Tensor) -> bool:
        pred = (shifted > 0).double()
        p0, p1 = float(pred[s == 0].mean()), float(pred[s == 1].mean())
        return min(p0, p1) >= delta * max(p0, p1)
    return feasible


def _brute_force(out, y, w, feasible, loss_level=None, data=None):
    """The most accurate feasible shift over every interval between label flips (and 0); with
    ``loss_level``, among shifts whose binary cross-entropy on ``data`` is at most that."""
    flips = torch.unique(-out)
    shifts = [0.0, float(flips[0]) - 1.0, float(flips[-1]) + 1.0] + ((flips[:-1] + flips[1:]) / 2.0).tolist()
    best = -math.inf
    for b in shifts:
        if loss_level is not None and float(bce_loss((out + b).float(), data)) > loss_level:
            continue
        if feasible(out + b):
            best = max(best, float((w * ((out + b > 0) == y)).sum() / w.sum()))
    return best


def _within_brute_force(accuracy, start, labels, groups, level, data, slack=1e-5):
    """``accuracy`` is the brute-force optimum at no higher a loss than ``level``, up to thresholds whose
    loss is within ``slack`` of the level (float32 sums may put those on either side on another CPU)."""
    ones = torch.ones_like(start)
    low = _brute_force(start, labels, ones, _di_feasible(groups), level - slack, data)
    high = _brute_force(start, labels, ones, _di_feasible(groups), level + slack, data)
    assert low - 1e-12 <= accuracy <= high + 1e-12


def _tied_problem(n: int, levels: int, seed: int):
    g = torch.Generator().manual_seed(seed)
    s = (torch.rand(n, generator=g) < 0.4).long()
    out = torch.randint(0, levels, (n,), generator=g).double() / levels * 4.0 - 2.0 - 0.6 * s
    y = torch.rand(n, generator=g) < torch.sigmoid(2.0 * out + 0.8 * s)
    return out, y, s


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_the_search_is_exact_when_the_outputs_take_few_values(seed):
    out, y, s = _tied_problem(600, 40, seed)
    assert len(torch.unique(out)) < SHIFT_BUDGET
    w = torch.ones_like(out)
    feasible = _di_feasible(s)
    b, accuracy = threshold_search(out, y, w, feasible)
    assert feasible(out + b)
    assert accuracy == pytest.approx(float(((out + b > 0) == y).double().mean()))
    assert accuracy == pytest.approx(_brute_force(out, y, w, feasible))


@pytest.mark.parametrize("seed", [0, 1])
def test_the_search_finds_the_best_threshold_above_a_floor_with_weights(seed):
    """Continuous weighted outputs (every row its own flip): the most accurate feasible threshold more
    accurate than the floor, or none when the brute-force optimum is below it."""
    g = torch.Generator().manual_seed(seed)
    out, y, s = _tied_problem(1500, 10**6, seed)
    out = out + 0.01 * torch.randn(len(out), generator=g, dtype=torch.float64)
    w = 0.5 + torch.rand(len(out), generator=g, dtype=torch.float64)
    feasible = _di_feasible(s)
    best = _brute_force(out, y, w, feasible)
    b, accuracy = threshold_search(out, y, w, feasible, above=best - 0.02, budget=len(out) + 1)
    assert feasible(out + b)
    assert accuracy == pytest.approx(best)
    assert accuracy == pytest.approx(float((w * ((out + b > 0) == y)).sum() / w.sum()))
    assert threshold_search(out, y, w, feasible, above=best + 1e-9, budget=len(out) + 1) == (0.0, None)


def test_the_search_stops_at_its_budget():
    out = torch.linspace(-1.0, 1.0, 50, dtype=torch.float64)
    y = out > 0
    calls = []

    def never(shifted):
        calls.append(1)
        return False

    assert threshold_search(out, y, torch.ones_like(out), never, budget=7) == (0.0, None)
    assert len(calls) == 7


class _Wrapped(torch.nn.Module):
    """A linear layer behind a custom forward (not a Sequential): its bias still shifts every output."""

    def __init__(self) -> None:
        super().__init__()
        self.inner = torch.nn.Linear(3, 1)
        self.scale = torch.nn.Parameter(torch.tensor(2.0))  # a scalar that does not shift the outputs

    def forward(self, X):
        return (self.scale * self.inner(X)).reshape(-1) - self.scale * self.inner.bias + self.inner.bias


def test_the_output_bias_is_the_scalar_that_shifts_every_output():
    X = torch.randn(50, 3, generator=torch.Generator().manual_seed(0)).numpy()
    y, s = (torch.arange(50) % 2).double().numpy(), (torch.arange(50) % 3 == 0).long().numpy()
    data = FairData.from_arrays(X, y, {"s": s}, sensitive_kinds={"s": "binary"})
    linear = fairopt.models.linear(3, seed=0)
    assert output_bias(linear, list(linear.parameters()), data) is linear[0].bias
    net = fairopt.models.mlp(3, hidden=(4,), seed=0)
    params = list(net.parameters())
    bias = output_bias(net, params, data)
    assert bias is not None and bias.numel() == 1 and any(bias is p for p in params)
    assert output_bias(net, [p for p in params if p is not bias], data) is None  # the bias not trained
    plain = torch.nn.Linear(3, 1)  # an (n, 1) output
    assert output_bias(plain, list(plain.parameters()), data) is plain.bias
    wrapped = _Wrapped()
    before = [p.detach().clone() for p in wrapped.parameters()]
    assert output_bias(wrapped, list(wrapped.parameters()), data) is wrapped.inner.bias
    assert all(torch.equal(a, b.detach()) for a, b in zip(before, wrapped.parameters()))  # restored exactly
    free = fairopt.models.linear(3, bias=False, seed=0)
    assert output_bias(free, list(free.parameters()), data) is None
    squashed = torch.nn.Sequential(torch.nn.Linear(3, 1), torch.nn.Sigmoid(), torch.nn.Flatten(0))
    assert output_bias(squashed, list(squashed.parameters()), data) is None


def _shifted_classifier(shift_by: float, loss_fn=bce_loss):
    """A linear classifier on tied inputs whose bias was moved by ``shift_by`` from a good one, with the
    engine's DI >= 0.8 rows set up, and a tracker holding it as the best iterate."""
    out, y, s = _tied_problem(3000, 12, 5)
    data = FairData.from_arrays(out.reshape(-1, 1).numpy(), y.double().numpy(), {"s": s.numpy()},
                                sensitive_kinds={"s": "binary"})
    model = fairopt.models.linear(data.n_features, seed=0)
    with torch.no_grad():
        model[0].weight.fill_(float(data.X[:, 0].double().std()) * 2.0)
        model[0].bias.fill_(shift_by)
    cons = as_constraint_set([DisparateImpact("s", DELTA)])
    cons.setup(data)
    params = list(model.parameters())
    tracker = BestIterate(cons.lower, cons.upper, 1e-6)
    with torch.no_grad():
        out_model = model_outputs(model, data)
        tracker.offer(params, float(loss_fn(out_model, data)), cons.exact(out_model, data), 3)
    return FitProblem(model, params, loss_fn, cons, data, cons.lower, cons.upper, oracle=None), tracker


def _accuracy(model, data) -> float:
    with torch.no_grad():
        return float(((model_outputs(model, data) > 0) == (data.y.reshape(-1) > 0.5)).double().mean())


def _exact_feasible(problem) -> bool:
    with torch.no_grad():
        c = problem.cons.exact(model_outputs(problem.model, problem.data), problem.data).double()
    return bool(((c <= problem.upper + 1e-9) & (c >= problem.lower - 1e-9)).all())


def test_a_nearly_constant_classifier_gets_the_most_accurate_feasible_threshold():
    problem, tracker = _shifted_classifier(3.0)
    assert tracker.feasible(tracker.best.row_violations)
    before, level = _accuracy(problem.model, problem.data), tracker.best.f
    with torch.no_grad():
        start = model_outputs(problem.model, problem.data).double()
    assert shift_output(problem, tracker, 4)
    after = _accuracy(problem.model, problem.data)
    share = float(problem.data.y.double().mean())
    assert before <= max(share, 1.0 - share)  # it started no better than the majority class
    with torch.no_grad():
        scores = model_outputs(problem.model, problem.data).double()
    groups, labels = problem.data.sensitive["s"].reshape(-1), problem.data.y.reshape(-1) > 0.5
    _within_brute_force(after, start, labels, groups, level, problem.data)
    assert _exact_feasible(problem)
    assert tracker.best.f <= level  # no higher a training loss
    assert tracker.best.iteration == 4  # the shifted model is the returned candidate, with its own values
    with torch.no_grad():
        out = model_outputs(problem.model, problem.data)
    assert tracker.best.f == pytest.approx(float(bce_loss(out, problem.data)))


def test_a_classifier_better_than_a_constant_is_left_alone():
    problem, tracker = _shifted_classifier(3.0)
    assert shift_output(problem, tracker, 4)  # now clear of the majority rate: a second call changes nothing
    params = [p.detach().clone() for p in problem.params]
    assert not shift_output(problem, tracker, 5)
    assert all(torch.equal(a, b.detach()) for a, b in zip(params, problem.params))


def test_the_interval_of_no_higher_loss_matches_a_grid():
    """``no_higher_loss``: the sublevel set of the convex loss along the shift, against a fine grid."""
    out, y, s = _tied_problem(2000, 50, 3)
    data = FairData.from_arrays(out.reshape(-1, 1).numpy(), y.double().numpy(), {"s": s.numpy()},
                                sensitive_kinds={"s": "binary"})
    scores = (out + 1.0).float()  # a start off the loss's minimum
    level = float(bce_loss(scores, data))
    low, high = no_higher_loss(bce_loss, scores, data, level)
    grid = torch.linspace(-5.0, 5.0, 20001, dtype=torch.float64)
    inside = [float(b) for b in grid if float(bce_loss(scores + float(b), data)) <= level]
    assert min(inside) == pytest.approx(low, abs=1e-3) and max(inside) == pytest.approx(high, abs=1e-3)
    assert 0.0 in (low, high) and high - low > 0.1
    flat = torch.zeros_like(scores)  # the loss's minimum at 0 up to the labels' rate: an interval of
    assert no_higher_loss(bce_loss, flat + float(torch.logit(data.y.double().mean())), data,  # one point
                          float(bce_loss(flat + float(torch.logit(data.y.double().mean())), data)) - 1e-9) == (0.0, 0.0)


def test_the_polish_needs_the_binary_cross_entropy():
    problem, tracker = _shifted_classifier(3.0, loss_fn=mse_loss)
    assert not shift_output(problem, tracker, 4)


@pytest.mark.parametrize("engine", ["sqp", "lagrangian"])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_the_engine_rescues_a_nearly_constant_classifier_by_its_threshold(seed, engine):
    """A run (SQP, Lagrangian dual) that cannot leave a start predicting every row positive (a learning rate
    of 1e-9) on inputs with a dozen distinct rows: the engine returns the same weights with the most accurate
    threshold that meets DI >= 0.8 on the exact rows (brute force over every flip), and does not warn of a
    constant."""
    out, y, s = _tied_problem(4000, 12, 10 + seed)
    data = FairData.from_arrays(out.reshape(-1, 1).numpy(), y.double().numpy(), {"s": s.numpy()},
                                sensitive_kinds={"s": "binary"})
    model = fairopt.models.linear(data.n_features, seed=seed)
    with torch.no_grad():
        model[0].weight.fill_(2.0)
        model[0].bias.fill_(6.0)
    weight = model[0].weight.detach().clone()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        trainer = StochasticSQP(epochs=2, lr=1e-9, seed=seed) if engine == "sqp" else LagrangianDual(epochs=2, lr=1e-9)
        result = trainer.fit(model, data, constraints=[DisparateImpact("s", DELTA)])
    assert not [w for w in caught if issubclass(w.category, (NearConstantWarning, ConstantPredictorWarning))]
    assert result.info["feasible"]
    assert torch.allclose(model[0].weight.detach(), weight, atol=1e-6)
    with torch.no_grad():
        scores = model_outputs(model, data).double()
    labels, groups = data.y.reshape(-1) > 0.5, data.sensitive["s"].reshape(-1)
    accuracy = float(((scores > 0) == labels).double().mean())
    assert _di_feasible(groups)(scores)
    share = float(labels.double().mean())
    assert accuracy > max(share, 1.0 - share) + 0.02
    start = scores - float(model[0].bias) + 6.0
    level = float(bce_loss(start.float(), data))
    assert float(bce_loss(scores.float(), data)) <= level
    _within_brute_force(accuracy, start, labels, groups, level, data)
    if engine == "sqp":
        assert result.history.records[-1]["returned"] == result.info["returned_iteration"]
