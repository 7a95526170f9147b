"""StochasticSQP: convergence to KKT points, sampler unbiasedness, relaxed steps, history."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pandas as pd
import pytest
import torch
from scipy.optimize import NonlinearConstraint, minimize

from solvers import StochasticSQP
from solvers.derivatives import Derivatives
from solvers.history import History
from solvers.outcome import BestIterate, NoProgressWarning
from solvers.sampling import BalancedSampler
from solvers.sqp.endgame import POLISH_GAP, polish_last
from solvers.sqp.state import SQPState
from solvers.sqp.steps import TRUST_GROWTH, TRUST_MEMORY, recent_radius, remember_step, sqp_step


class _Rows:
    """A minimal dataset: identity features so that ``out = w`` for :class:`_Identity`."""

    def __init__(self, X, y, strata=None):
        self.X, self.y, self._strata = X, y, strata

    def __len__(self):
        return self.X.shape[0]

    def subset(self, idx):
        return _Rows(self.X[idx], self.y[idx], None if self._strata is None else self._strata[idx])

    @property
    def strata(self):
        return self._strata


class _Identity(torch.nn.Module):
    def __init__(self, w0):
        super().__init__()
        self.w = torch.nn.Parameter(torch.as_tensor(w0, dtype=torch.float64).clone())

    def forward(self, X):
        return X @ self.w


class _FnConstraint:
    """Rows given by a function of ``out`` (for tests)."""

    def __init__(self, name, fn, lower, upper):
        self.name, self.fn = name, fn
        self.lower = torch.as_tensor(lower, dtype=torch.float64)
        self.upper = torch.as_tensor(upper, dtype=torch.float64)

    def setup(self, data):
        pass

    def __call__(self, out, batch):
        return self.fn(out)

    def exact(self, out, batch):
        return self.fn(out)

    def target_encoding(self, batch):
        return None


A = torch.tensor([3.0, 1.0, 2.0, 0.5], dtype=torch.float64)
Q = torch.tensor([1.0, 2.0, 0.5, 1.5], dtype=torch.float64)


def _quadratic(out, batch):
    return 0.5 * torch.sum(Q * (out - A) ** 2)


def _problem():
    p = 4
    data = _Rows(torch.eye(p, dtype=torch.float64), torch.zeros(p, dtype=torch.float64))
    lin = _FnConstraint("sum", lambda w: w.sum().reshape(1), [-np.inf], [2.0])
    ball = _FnConstraint("ball", lambda w: (w**2).sum().reshape(1), [-np.inf], [3.0])
    return data, [lin, ball]


def _scipy_reference():
    fun = lambda w: 0.5 * np.sum(Q.numpy() * (w - A.numpy()) ** 2)
    jac = lambda w: Q.numpy() * (w - A.numpy())
    cons = [
        NonlinearConstraint(lambda w: [w.sum()], -np.inf, 2.0, jac=lambda w: np.ones((1, 4))),
        NonlinearConstraint(lambda w: [np.sum(w**2)], -np.inf, 3.0, jac=lambda w: 2 * w.reshape(1, -1)),
    ]
    res = minimize(fun, np.zeros(4), jac=jac, method="trust-constr", constraints=cons,
                   options={"gtol": 1e-12, "xtol": 1e-14, "maxiter": 5000})
    return res.x


@pytest.mark.parametrize("step", ["fixed", "adaptive"])
def test_converges_to_scipy_kkt_point(step):
    data, cons = _problem()
    model = _Identity(torch.zeros(4))
    engine = StochasticSQP(epochs=300, lr=1.0, step=step, lr_schedule=False, hessian_shift=1.0, beta2=0.9, tol=1e-9,
                           feasibility_tol=1e-12)
    res = engine.fit(model, data, loss=_quadratic, constraints=cons)
    w = model.w.detach().numpy()
    ref = _scipy_reference()
    np.testing.assert_allclose(w, ref, atol=1e-7)
    assert res.converged, res.info
    assert res.history[-1]["V"] < 1e-8
    df = res.history.to_pandas()
    assert {"f", "V", "tau", "xi", "alpha", "beta", "kkt", "qp_status", "c[sum]", "c[ball]"} <= set(df.columns) or \
        {"f", "V", "tau", "xi", "alpha", "beta", "kkt", "qp_status"} <= set(df.columns)


def test_unconstrained_matches_closed_form():
    data, _ = _problem()
    model = _Identity(torch.zeros(4))
    StochasticSQP(epochs=400, lr=1.0, lr_schedule=False, hessian_shift=1.0, tol=1e-9).fit(model, data, loss=_quadratic)
    np.testing.assert_allclose(model.w.detach().numpy(), A.numpy(), atol=1e-6)


def test_infeasible_linearisation_takes_relaxed_step_and_warns():
    data, _ = _problem()
    # two copies of the same row with disjoint bounds: no step satisfies both linearisations
    lo = _FnConstraint("lo", lambda w: w[:1], [1.0], [np.inf])
    hi = _FnConstraint("hi", lambda w: w[:1], [-np.inf], [0.0])
    model = _Identity(torch.zeros(4))
    with pytest.warns(UserWarning, match="relaxed"):
        res = StochasticSQP(epochs=50, lr=0.5, lr_schedule=False).fit(model, data, loss=_quadratic, constraints=[lo, hi])
    statuses = set(res.history.to_pandas()["qp_status"])
    assert "relaxed" in statuses
    assert not res.converged


def test_callback_stops_training():
    data, cons = _problem()
    calls = []
    res = StochasticSQP(epochs=100, callbacks=[lambda eng, rec: calls.append(rec["iteration"]) or len(calls) >= 7]).fit(
        _Identity(torch.zeros(4)), data, loss=_quadratic, constraints=cons)
    assert res.status == "stopped_by_callback"
    # 7 iterations, then the closing record that describes the returned model
    assert len(res.history) == 8 and res.history[-1]["qp_status"] == "final"


def test_deterministic_minibatches():
    torch.manual_seed(1)
    X = torch.randn(200, 3)
    y = (X[:, 0] > 0).float()
    data = _Rows(X, y, strata=(X[:, 1] > 0).long())

    def run():
        model = torch.nn.Linear(3, 1)
        torch.nn.init.zeros_(model.weight)
        torch.nn.init.zeros_(model.bias)
        net = torch.nn.Sequential(model, torch.nn.Flatten(0))
        con = _FnConstraint("mean", lambda out: torch.sigmoid(out).mean().reshape(1), [-np.inf], [0.45])
        StochasticSQP(epochs=3, batch_size=32, constraint_batch="balanced", seed=3).fit(
            net, data, loss="bce", constraints=[con])
        return torch.cat([p.detach().reshape(-1) for p in net.parameters()])

    assert torch.equal(run(), run())


def test_balanced_sampler_group_means_unbiased():
    gen = torch.Generator().manual_seed(0)
    strata = torch.tensor([0] * 30 + [1] * 7 + [2] * 13)
    values = torch.randn(50, dtype=torch.float64)
    sampler = BalancedSampler(strata, per_stratum=5, generator=gen)
    draws = 4000
    sums = torch.zeros(3, dtype=torch.float64)
    for _ in range(draws):
        idx = sampler.sample()
        for s in range(3):
            rows = idx[strata[idx] == s]
            assert len(rows) == 5
            sums[s] += values[rows].mean()
    est = sums / draws
    true = torch.stack([values[strata == s].mean() for s in range(3)])
    # standard error of the mean of 4000 draws of a 5-row mean is < 0.02 here
    np.testing.assert_allclose(est.numpy(), true.numpy(), atol=0.04)


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"epochs": 0}, "epochs"),
        ({"lr": -1.0}, "lr"),
        ({"step": "newton"}, "step"),
        ({"constraint_batch": "random"}, "constraint_batch"),
        ({"batch_size": 2.5}, "batch_size"),
        ({"beta2": 1.0}, "beta2"),
        ({"constraint_batch": "balanced"}, "constraint_batch"),
        ({"constraint_batch": "memory"}, "constraint_batch"),
        ({"polish_iterations": -1}, "polish_iterations"),
        ({"polish_iterations": 2.0}, "polish_iterations"),
        ({"lr_schedule": "cosine"}, "lr_schedule"),
    ],
)
def test_bad_options_raise(kwargs, match):
    with pytest.raises(ValueError, match=match):
        StochasticSQP(**kwargs)


def test_bad_fit_inputs_raise():
    data, cons = _problem()
    with pytest.raises(ValueError, match="model"):
        StochasticSQP(epochs=1).fit(lambda X: X, data)
    with pytest.raises(ValueError, match="loss"):
        StochasticSQP(epochs=1).fit(_Identity(torch.zeros(4)), data, loss="hinge")
    bad = _FnConstraint("bad", lambda w: w[:1], [1.0], [0.0])
    with pytest.raises(ValueError, match="lower"):
        StochasticSQP(epochs=1).fit(_Identity(torch.zeros(4)), data, loss=_quadratic, constraints=[bad])


def test_a_failed_relaxed_qp_takes_the_least_violation_step_and_warns(monkeypatch):
    """Regression: 32-row batches under DI plus a 3-group DP bound, with the constraints
    estimated on each batch, made degenerate relaxed QPs; one that failed ('numerical')
    raised RuntimeError mid-training. Now the least-violation step is taken, with one
    SQPWarning, and training goes on. The failure is forced here (every QP with an objective
    fails), so the test does not hang on one trajectory's rounding."""
    import fairopt
    import solvers.sqp.steps as steps
    from fairopt.constraints import DemographicParity, DisparateImpact

    solve = steps.diagonal_qp

    def failing(g, h, J, lo, hi, *args, **kwargs):
        res = solve(g, h, J, lo, hi, *args, **kwargs)
        if float(g.abs().sum()) == 0.0:  # the least-norm restoration step keeps working
            return res
        return steps.QPResult(d=res.d, multipliers=res.multipliers, active=res.active, status="numerical",
                              objective=float("nan"), kkt_residual=float("nan"), max_violation=float("nan"),
                              degenerate=True, method="forced", iterations=0)

    monkeypatch.setattr(steps, "diagonal_qp", failing)
    rng = np.random.default_rng(9)
    n = 200
    X, s, g = rng.normal(size=(n, 3)), rng.integers(0, 2, n), rng.integers(0, 3, n)
    y = (X[:, 0] + s + 0.5 * g + rng.normal(size=n) > 1).astype(float)
    data = fairopt.FairData.from_arrays(X, y, {"s": s, "g": g}, sensitive_kinds={"g": "categorical"})
    model = fairopt.models.linear(data.n_features, seed=0)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = StochasticSQP(epochs=5, batch_size=32, seed=9, constraint_batch="batch").fit(
            model, data, constraints=[DisparateImpact("s", 0.8), DemographicParity("g", bound=0.05)])
    assert sum("least-violation step was taken" in str(w.message) for w in caught) == 1
    assert result.status in ("converged", "not_stationary", "infeasible")
    assert all(np.isfinite(p.detach().numpy()).all() for p in model.parameters())


# ----------------------------------------------------------------------------- full-batch trust region and polish
def _quadratic_plus_one(out, batch):
    """The quadratic objective plus 1 (the divergence guard compares with ``10 |f_0|``, and
    the unconstrained optimum has ``f = 0``)."""
    return _quadratic(out, batch) + 1.0


class _BiasedRow(_FnConstraint):
    """A row whose exact measure exceeds its smooth one by ``bias`` (as hard-label rates differ
    from their smoothed surrogate): the smooth steps stop at the bound, the exact row a hair
    outside it."""

    def __init__(self, name, fn, lower, upper, bias):
        super().__init__(name, fn, lower, upper)
        self.bias = bias

    def exact(self, out, batch):
        return self.fn(out) + self.bias


def test_trust_radius_follows_the_recent_steps():
    state = SQPState(tau=0.1, xi=1.0, beta=0.5)
    assert recent_radius(state) == math.inf and recent_radius(state, 0.5) == math.inf  # no memory: no cap
    lengths = [0.5, 0.1, 0.2, 0.4]
    for x in lengths:
        remember_step(state, x)
    upper_median = sorted(lengths)[len(lengths) // 2]  # by hand: 0.4
    assert recent_radius(state) == pytest.approx(TRUST_GROWTH * upper_median)
    assert recent_radius(state, 10.0) == 10.0  # never below the unconstrained step's length
    kept = state.recent_steps
    remember_step(state, 50.0, capped=True)  # a capped step remembers the median, not its length
    assert state.recent_steps[-1] == upper_median and kept == lengths  # a list taken before is left alone
    for k in range(3 * TRUST_MEMORY):
        remember_step(state, 1.0 + k)
    assert state.recent_steps == [1.0 + k for k in range(2 * TRUST_MEMORY, 3 * TRUST_MEMORY)]


def test_full_batch_step_is_capped_by_the_recent_steps():
    """A violated row whose Jacobian nearly vanishes (the failure measured on Adult with
    equalized odds): its linearised bound lies far away. The first step (no memory) takes
    the QP step in full; with a memory of short steps ``d`` is capped at ``TRUST_GROWTH``
    times their median, the restoration at ``alpha ||d||``, and ``tau`` is kept."""
    g = torch.tensor([0.3, -0.2, 0.1], dtype=torch.float64)
    J = torch.tensor([[1e-3, 0.0, 0.0]], dtype=torch.float64)
    c = torch.tensor([0.05], dtype=torch.float64)
    der = Derivatives(f=1.0, g=g, c=c, J=J, c_exact=c.clone(), t_forward=0.0, t_jacobian=0.0)
    lower = torch.tensor([-math.inf], dtype=torch.float64)
    upper = torch.zeros(1, dtype=torch.float64)
    options = StochasticSQP(lr=0.5)

    def step(state):
        params = [torch.zeros(3, dtype=torch.float64)]
        record = sqp_step(params, der, (lower, upper), state, options, lambda: der, bounds=(lower, upper))
        return record, params[0]

    def base(**kw):
        return SQPState(tau=0.1, xi=1.0, beta=0.5, v=torch.zeros(3, dtype=torch.float64), **kw)

    # the QP with its one row active, by hand: d = -(g + y J')/h with J d = u - c
    h = torch.sqrt((1.0 - options.beta2) * g**2 + options.hessian_shift_)
    y = (c[0] - (J[0] / h) @ g) / ((J[0] / h) @ J[0])
    d_qp = -(g + y * J[0]) / h
    free, _ = step(base())
    assert free["trust_radius"] == math.inf and free["norm_d"] == pytest.approx(float(d_qp.norm()), rel=1e-9)
    assert free["norm_d"] > 50 and free["tau"] < 0.01  # the long step collapses tau

    state = base(recent_steps=[0.1] * TRUST_MEMORY)
    capped, w = step(state)
    radius = max(TRUST_GROWTH * 0.1, float((g / h).norm()))
    assert capped["trust_radius"] == pytest.approx(radius) and capped["norm_d"] == pytest.approx(radius)
    assert capped["tau"] == 0.1 == state.tau
    alpha = capped["alpha"]
    assert (1 - alpha) * capped["norm_v"] <= alpha * capped["norm_d"] * (1 + 1e-9)
    assert float(w.norm()) <= 2 * alpha * radius * (1 + 1e-9)
    assert state.recent_steps[-1] == pytest.approx(0.1)  # the capped step does not widen the region


def test_a_run_from_the_unconstrained_optimum_takes_its_constrained_step():
    """At the unconstrained optimum ``g = 0``: a radius scaled by ``||g / h||`` would never let
    the constrained step through; the first step has no memory, so it is taken in full."""
    data, _ = _problem()
    model = _Identity(A)
    con = _FnConstraint("sum", lambda w: w.sum().reshape(1), [-np.inf], [2.0])
    res = StochasticSQP(epochs=300, tol=1e-9, feasibility_tol=1e-12).fit(model, data, loss=_quadratic_plus_one,
                                                                        constraints=[con])
    lam = (A.sum() - 2.0) / (1.0 / Q).sum()  # closed form: w = A - lam / Q on sum(w) = 2
    np.testing.assert_allclose(model.w.detach().numpy(), (A - lam / Q).numpy(), atol=1e-7)
    assert res.converged and res.history[0]["trust_radius"] == math.inf and res.history[0]["norm_d"] > 2.0


def test_polish_trigger_rule():
    lower = torch.tensor([-math.inf], dtype=torch.float64)
    upper = torch.zeros(1, dtype=torch.float64)
    tracker = BestIterate(lower, upper, 1e-6)
    hair = torch.tensor([1e-3])  # the last iterate, a hair outside
    assert not tracker.worth_restoring(0.35, hair, 0.01)  # nothing offered
    tracker.offer([torch.zeros(1)], 0.40, torch.tensor([0.01]), 0)
    assert tracker.worth_restoring(0.45, hair, 0.01)  # no iterate was feasible
    tracker.offer([torch.zeros(1)], 0.657, torch.tensor([-0.1]), 1)  # feasible, poor (the seed-6 case)
    assert tracker.worth_restoring(0.348, hair, 0.01) and tracker.worth_restoring(0.64, hair, 0.01)
    assert not tracker.worth_restoring(0.652, hair, 0.01)  # 0.657 - 0.652 < 1 % of 0.652
    assert not tracker.worth_restoring(0.348, torch.tensor([5e-7]), 0.01)  # within feasibility_tol
    assert not tracker.worth_restoring(0.348, torch.tensor([-1e-3]), 0.01)
    assert not tracker.worth_restoring(math.nan, hair, 0.01) and not tracker.worth_restoring(0.348, None, 0.01)
    options = StochasticSQP(polish_iterations=50)
    history = History(records=[{"qp_status": "normal"}])
    assert polish_last(tracker, (0.348, hair), history, options, 150) == 50
    assert polish_last(tracker, (0.348, hair), history, options, 7) == 7  # never more than the run's epochs
    assert polish_last(tracker, (0.652, hair), history, options, 150) == 0
    relaxed = History(records=[{"qp_status": "relaxed"}])  # linearised bounds that cannot be met
    assert polish_last(tracker, (0.348, hair), relaxed, options, 150) == 0
    assert POLISH_GAP == 0.01


def test_the_tracker_keeps_the_closest_infeasible_iterate_its_filter_admits():
    """With a ``closest_filter`` the tracker also keeps the infeasible candidate of least violation (ties: the
    objective) among those the filter admits, after a feasible one has become the best too; the filter is asked
    only of infeasible candidates closer than the kept one. Without a filter it keeps none, and the best is
    chosen as before either way."""
    lower = torch.tensor([-math.inf], dtype=torch.float64)
    upper = torch.zeros(1, dtype=torch.float64)
    admit, asked = [True], []

    def admitted():
        asked.append(True)
        return admit[0]

    tracker, plain = BestIterate(lower, upper, 1e-6, closest_filter=admitted), BestIterate(lower, upper, 1e-6)
    offers = [(0.50, 0.02, True), (0.45, 0.0, True), (0.30, 0.01, True), (0.25, 0.005, False), (0.28, 0.03, True),
              (0.20, 0.01, True)]
    for k, (f, c, ok) in enumerate(offers):
        admit[0] = ok
        for t in (tracker, plain):
            t.offer([torch.full((1,), float(k))], f, torch.tensor([c]), k)
    assert tracker.best.iteration == plain.best.iteration == 1  # the feasible one, as before
    assert tracker.closest.iteration == 5 and float(tracker.closest.params) == 5.0  # 0.01 at f 0.20 < 0.30
    assert plain.closest is None
    assert len(asked) == 4  # offers 0, 2, 3 and 5: not the feasible 1, not 4 (farther than the kept 0.01)


def _hair_outside_run(polish_iterations, bias=0.01):
    """Full-batch steps (``alpha = 1``) that reach the smooth bound ``sum(w) <= 4`` at the first
    step and stay on it: the exact row stays ``bias`` outside, and the only feasible iterate
    is the (poor) start."""
    data, _ = _problem()
    model = _Identity(torch.zeros(4))
    con = _BiasedRow("sum", lambda w: w.sum().reshape(1), [-np.inf], [4.0], bias)
    engine = StochasticSQP(epochs=20, lr=1.0, lr_schedule="none", hessian_shift=2.25, calibrate_exact=False,
                           polish_iterations=polish_iterations)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        res = engine.fit(model, data, loss=_quadratic_plus_one, constraints=[con])
    return model, res, [w.category for w in caught]


def test_a_full_batch_run_ending_a_hair_outside_is_polished_from_its_last_iterate():
    lam = (A.sum() - 4.0) / (1.0 / Q).sum()
    last = A - lam / Q  # where the training steps end: the smooth constrained optimum
    f_start = float(_quadratic_plus_one(torch.zeros(4, dtype=torch.float64), None))
    model, res, caught = _hair_outside_run(0)  # without the polish: the start comes back
    assert res.feasible and res.info["returned_iteration"] == 0 and res.history[-1]["f"] == pytest.approx(f_start)
    assert NoProgressWarning in caught

    model, res, caught = _hair_outside_run(50)
    steps = [r for r in res.history.records if r["qp_status"] != "final"]
    phases = [r.get("phase", "training") for r in steps]
    assert phases == ["training"] * 20 + ["polish"] * 20  # min(polish_iterations, epochs)
    assert res.info["iterations"] == 40 and res.info["returned_iteration"] >= 20
    w = model.w.detach()
    assert res.feasible and float(w.sum()) <= 4.0 - 0.01 + 1e-9  # the exact row meets its bound
    assert res.history[-1]["f"] < float(_quadratic_plus_one(last, None)) + 0.01 < f_start
    assert float((w - last).abs().max()) < 0.01 and NoProgressWarning not in caught


def test_a_full_batch_run_that_ends_feasible_is_not_polished():
    model, res, _ = _hair_outside_run(50, bias=0.0)
    assert res.converged and res.info["termination"] == "converged"  # a feasible KKT point stops it early
    assert len(res.history) == res.info["iterations"] + 1 and not any("phase" in r for r in res.history.records)
    model, res, _ = _hair_outside_run(50, bias=-0.01)  # the exact row a hair inside: feasible all along
    assert res.feasible and not any("phase" in r for r in res.history.records)


def test_integral_push_adds_the_signed_excess_and_halves_once_feasible():
    """``p <- p + e`` with ``e = max(c - u, 0) - max(l - c, 0)`` while a row is violated (above its upper
    bound: a positive push, below its lower: a negative one), ``p <- p / 2`` once every row holds."""
    from solvers.sqp.steps import integral_push

    inf = math.inf
    lower, upper = [0.0, -inf, -1.0], [1.0, 0.5, inf]
    push = [0.25, -0.5, 1.0]
    assert integral_push(push, [1.5, 0.5, -1.25], lower, upper) == [0.25 + 0.5, -0.5, 1.0 - 0.25]
    assert integral_push(push, [0.5, 0.5, -1.0], lower, upper) == [0.125, -0.25, 0.5]  # on the bounds: feasible
    assert integral_push([0.0] * 3, [2.0, 0.0, 0.0], lower, upper) == [1.0, 0.0, 0.0]


def test_calibrate_is_the_exponential_average_of_the_finite_gaps():
    """``b <- (1 - w) b + w (c_exact - c)`` on bounded rows with a finite gap, ``(1 - w) b`` elsewhere: the
    float64 rows (computed in Python floats) and float32 ones (in tensors) give the same values."""
    from solvers.sqp.steps import calibrate

    inf, nan = math.inf, math.nan
    offset = torch.tensor([0.5, -1.0, 2.0, 0.25, 0.0], dtype=torch.float64)
    gap = torch.tensor([1.0, inf, 3.0, nan, -0.5], dtype=torch.float64)
    lower = torch.tensor([0.0, 0.0, -inf, 0.0, -inf], dtype=torch.float64)
    upper = torch.tensor([inf, 1.0, inf, inf, 0.0], dtype=torch.float64)
    w = 0.25
    expected = [0.75 * 0.5 + 0.25 * 1.0, 0.75 * -1.0, 0.75 * 2.0, 0.75 * 0.25, 0.25 * -0.5]  # row 2: unbounded
    assert calibrate(offset, gap, lower, upper, w).tolist() == expected
    single = calibrate(*(t.float() for t in (offset, gap, lower, upper)), w)
    assert single.dtype == torch.float32
    np.testing.assert_allclose(single.numpy(), expected, rtol=1e-7)


def test_a_history_round_trips_through_json(tmp_path):
    """``History.to_json`` / ``from_json`` (docs/guide/history.md): the records of a fit come back equal,
    numpy values as plain numbers, and ``to_pandas`` gives the same table."""
    data, cons = _problem()
    result = StochasticSQP(epochs=20).fit(_Identity(torch.zeros(4, dtype=torch.float64)), data, loss=_quadratic,
                                          constraints=cons)
    history = result.history
    history.records[0]["extra"] = np.float32(0.5)
    history.to_json(tmp_path / "h.json")
    back = History.from_json(tmp_path / "h.json")
    assert back.row_names == list(history.row_names) and len(back) == len(history)
    assert back.records[0]["extra"] == 0.5 and back.records[-1] == history.records[-1]
    pd.testing.assert_frame_equal(back.to_pandas(), history.to_pandas(), check_dtype=False)


def test_per_epoch_averages_each_epochs_records_and_keeps_the_polish_apart(tmp_path):
    """``History.per_epoch``: the mean of each numeric column over an epoch's records (by hand), the
    polish phase as its own row, the closing "final" record left out; ``plot(per_epoch=True)`` draws it."""
    records = [{"iteration": i, "epoch": i // 3, "f": float(10 - i), "V": 0.1 * i, "qp_status": "normal",
                "active": []} for i in range(6)]
    records += [{"iteration": 6 + k, "epoch": 2, "f": 3.0 - k, "V": 0.0, "phase": "polish", "qp_status": "normal"}
                for k in range(2)]
    records.append({"iteration": 8, "epoch": 2, "f": 1.5, "V": 0.0, "qp_status": "final"})
    table = History(records=records).per_epoch()
    assert list(table.index) == [0, 1, 2] and list(table["phase"]) == ["train", "train", "polish"]
    assert list(table["steps"]) == [3, 3, 2] and list(table["iteration"]) == [2, 5, 7]
    np.testing.assert_allclose(table["f"], [9.0, 6.0, 2.5])
    np.testing.assert_allclose(table["V"], [0.1, 0.4, 0.0])
    axes = History(records=records).plot(tmp_path / "epochs.png", per_epoch=True)
    assert len(axes) == 2 and (tmp_path / "epochs.png").exists()  # f and V: no V_exact recorded
    with pytest.raises(ValueError, match="no 'epoch' column"):
        History(records=[{"iteration": 0, "f": 1.0}]).per_epoch()
    # a real mini-batch fit: every step but the closing record is in one epoch row
    data, cons = _problem()
    result = StochasticSQP(epochs=4, batch_size=16, seed=0).fit(_Identity(torch.zeros(4, dtype=torch.float64)),
                                                                data, loss=_quadratic, constraints=cons)
    frame = result.history.to_pandas()
    table = result.history.per_epoch()
    assert int(table["steps"].sum()) == int((frame["qp_status"] != "final").sum())
    assert set(table.loc[table["phase"] == "train"].index) == set(range(4))


def test_a_minibatch_history_records_unmeasured_exact_rows_as_nan():
    """Mini-batch steps do not measure the exact rows on all rows: V_exact is NaN there (it read 0, "feasible",
    while the model broke the bound), the snapshot refreshes and the closing record carry the measured value."""
    import fairopt
    from fairopt.constraints import DisparateImpact

    data = fairopt.datasets.load("adult").subset(torch.arange(2000))
    model = fairopt.models.linear(data.n_features, seed=0)
    result = StochasticSQP(epochs=3, batch_size=256, seed=0).fit(model, data, loss="bce",
                                                                 constraints=[DisparateImpact("sex", delta=0.8)])
    steps = [r for r in result.history.records if r.get("qp_status") != "final" and r.get("phase") != "polish"]
    refreshed = [r for r in steps if r.get("refreshed")]
    others = [r for r in steps if not r.get("refreshed")]
    assert refreshed and others
    assert all(math.isnan(r["V_exact"]) and math.isnan(r["V_exact_max"]) and r["c_exact"] == [] for r in others)
    assert all(math.isfinite(r["V_exact"]) and len(r["c_exact"]) == len(result.row_names) for r in refreshed)
    assert math.isfinite(result.history.records[-1]["V_exact"])


@pytest.mark.parametrize("mode", ["batch", "balanced"])
def test_a_batch_estimate_of_the_exact_rows_is_not_recorded_as_the_all_rows_value(mode):
    """With the constraint rows on each batch or balanced sample the step measures them there only: V_exact is
    NaN and the batch's own value goes to V_exact_batch (it read as the all-rows violation)."""
    import fairopt
    from fairopt.constraints import DisparateImpact

    data = fairopt.datasets.load("adult").subset(torch.arange(2000))
    result = StochasticSQP(epochs=2, batch_size=256, constraint_batch=mode, seed=0).fit(
        fairopt.models.linear(data.n_features, seed=0), data, loss="bce",
        constraints=[DisparateImpact("sex", delta=0.8)])
    steps = [r for r in result.history.records if r.get("qp_status") != "final" and r.get("phase") != "polish"]
    assert steps and all(math.isnan(r["V_exact"]) and r["c_exact"] == [] for r in steps)
    assert all(math.isfinite(r["V_exact_batch"]) for r in steps)
