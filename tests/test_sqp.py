"""StochasticSQP: convergence to KKT points, sampler unbiasedness, relaxed steps, history."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch
from scipy.optimize import NonlinearConstraint, minimize

from solvers import StochasticSQP
from solvers.sampling import BalancedSampler


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


def test_a_failed_relaxed_qp_takes_the_least_violation_step_and_warns():
    """Regression: 32-row batches under DI plus a 3-group DP bound make degenerate relaxed
    QPs; one that failed ('numerical') raised RuntimeError mid-training. Now the
    least-violation step is taken, with one SQPWarning, and training goes on."""
    import fairopt
    from fairopt.constraints import DemographicParity, DisparateImpact

    rng = np.random.default_rng(9)
    n = 200
    X, s, g = rng.normal(size=(n, 3)), rng.integers(0, 2, n), rng.integers(0, 3, n)
    y = (X[:, 0] + s + 0.5 * g + rng.normal(size=n) > 1).astype(float)
    data = fairopt.FairData.from_arrays(X, y, {"s": s, "g": g}, sensitive_kinds={"g": "categorical"})
    model = fairopt.models.linear(data.n_features, seed=0)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = StochasticSQP(epochs=5, batch_size=32, seed=9).fit(
            model, data, constraints=[DisparateImpact("s", 0.8), DemographicParity("g", bound=0.05)])
    assert any("least-violation step was taken" in str(w.message) for w in caught)
    assert result.status in ("converged", "not_stationary", "infeasible")
    assert all(np.isfinite(p.detach().numpy()).all() for p in model.parameters())
