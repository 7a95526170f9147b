"""LagrangianDual (SBR): multiplier updates, convergence to the constrained optimum, validation."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from scipy.optimize import minimize

from fairopt.constraints import DisparateImpact
from fairopt.data import FairData
from fairopt.measures import disparate_impact
from solvers.lagrangian import LagrangianDual

from conftest import TensorRows


pytestmark = pytest.mark.usefixtures("one_torch_thread")


class _Identity(torch.nn.Module):
    def __init__(self, w0):
        super().__init__()
        self.w = torch.nn.Parameter(torch.as_tensor(w0, dtype=torch.float64).clone())

    def forward(self, X):
        return X @ self.w


class _SumAtMost:
    """One row ``sum(out) <= bound``."""

    name = "sum"

    def __init__(self, bound):
        self.lower = torch.tensor([-np.inf], dtype=torch.float64)
        self.upper = torch.tensor([bound], dtype=torch.float64)

    def setup(self, data):
        pass

    def __call__(self, out, batch):
        return out.sum().reshape(1)

    def exact(self, out, batch):
        return out.sum().reshape(1)

    def target_encoding(self, batch):
        return None


TARGET = np.array([3.0, 1.0, 2.0, 0.5])
CURVATURE = torch.tensor([1.0, 2.0, 0.5, 1.5], dtype=torch.float64)


def _loss(out, batch):
    return 0.5 * torch.sum(CURVATURE * (out - torch.as_tensor(TARGET)) ** 2)


def _problem():
    # identity features, so that ``out = w`` for :class:`_Identity`
    return TensorRows(torch.eye(4, dtype=torch.float64), torch.zeros(4, dtype=torch.float64)), _SumAtMost(2.0)


def test_ascent_multipliers_grow_while_violated_and_stop_when_satisfied():
    data, con = _problem()
    rho = 0.5
    res = LagrangianDual(epochs=400, lr=0.05, dual_lr=rho).fit(_Identity(np.zeros(4)), data, loss=_loss, constraints=con)
    lam = np.array([r["lambda"][0] for r in res.history.records])
    viol = np.array([r["viol"][0] for r in res.history.records])
    previous = np.concatenate([[0.0], lam[:-1]])
    np.testing.assert_allclose(lam - previous, rho * viol, atol=1e-12, rtol=0)
    grew, satisfied = viol > 0, viol == 0
    assert grew.sum() > 10 and satisfied.sum() > 10
    assert np.all(lam[grew] > previous[grew]) and np.all(lam[satisfied] == previous[satisfied])
    # the unconstrained optimum has sum 6.5: the multipliers brought the iterate to the bound
    assert res.info["violation"] < 0.05 and res.info["multipliers"][0] > 0.5
    frame = res.history.to_pandas()
    assert "lambda[sum[0]]" in frame.columns and "viol[sum[0]]" in frame.columns


def test_converges_to_the_constrained_optimum():
    data, con = _problem()
    q = CURVATURE.numpy()
    ref = minimize(lambda w: 0.5 * np.sum(q * (w - TARGET) ** 2), np.zeros(4), method="SLSQP",
                   constraints=[{"type": "ineq", "fun": lambda w: 2.0 - w.sum()}], tol=1e-12)
    lam_star = q[0] * (TARGET[0] - ref.x[0])  # KKT: q_i (w_i - t_i) + lambda = 0
    res = LagrangianDual(epochs=2000, lr=0.01, dual_lr=0.2).fit(_Identity(np.zeros(4)), data, loss=_loss, constraints=con)
    w = res.model.w.detach().numpy()
    assert np.abs(w - ref.x).max() < 2e-2
    # the hinge is an exact penalty: every lambda >= lambda* has the constrained optimum as a
    # minimiser, so dual ascent stops somewhere at or above lambda* (not at lambda* itself)
    assert res.info["multipliers"][0] >= 0.95 * lam_star


def test_adam_dual_update_is_projected_ascent():
    data, con = _problem()
    res = LagrangianDual(epochs=300, lr=0.05, dual_update="adam", dual_lr=0.05).fit(
        _Identity(TARGET), data, loss=_loss, constraints=con)  # starts infeasible: sum 6.5 > 2
    lam = np.array([r["lambda"][0] for r in res.history.records])
    viol = np.array([r["viol"][0] for r in res.history.records])
    assert lam[0] == pytest.approx(0.05, rel=1e-6)  # Adam's first step has length lr
    assert np.all(lam >= 0) and np.all(np.diff(lam) >= -1e-15)  # the gradient v >= 0: never decreases
    assert np.all(np.diff(lam)[viol[1:] > 0] > 0)
    assert LagrangianDual(dual_update="adam").dual_lr == 1e-3


def test_disparate_impact_on_fair_data():
    from fairopt.models import linear
    from fairopt.surrogates import Sigmoid

    rng = np.random.default_rng(0)
    n = 400
    s = rng.integers(0, 2, n)
    X = np.column_stack([rng.normal(size=n) + 1.5 * s, rng.normal(size=n)])
    y = (X[:, 0] + 0.3 * rng.normal(size=n) > 0.8).astype(float)
    data = FairData.from_arrays(X, y, {"sex": s}, sensitive_kinds={"sex": "binary"})
    di = {}
    for delta, dual_lr in ((0.01, 1e-12), (0.8, 0.5)):
        model = linear(data.n_features, seed=0)
        # a gentle surrogate: the steep default (scale 50) saturates and its gradient vanishes
        constraint = DisparateImpact("sex", delta, surrogate=Sigmoid(scale=5.0))
        res = LagrangianDual(epochs=150, lr=0.05, dual_lr=dual_lr).fit(model, data, constraints=constraint)
        with torch.no_grad():
            di[delta] = disparate_impact((model(data.X) > 0).float(), data.sensitive["sex"])
    assert di[0.01] < 0.5 and di[0.8] >= 0.8
    assert len(res.info["multipliers"]) == 2 and max(res.info["multipliers"]) > 0 and res.info["violation"] == 0.0


def test_validation():
    data, con = _problem()
    with pytest.raises(ValueError, match="dual_update"):
        LagrangianDual(dual_update="newton")
    with pytest.raises(ValueError, match="dual_lr"):
        LagrangianDual(dual_lr=-1.0)
    with pytest.raises(ValueError, match="multipliers0"):
        LagrangianDual(multipliers0=-0.1)
    bad = _SumAtMost(2.0)
    bad.lower = torch.tensor([3.0], dtype=torch.float64)
    with pytest.raises(ValueError, match="lower"):
        LagrangianDual(epochs=1).fit(_Identity(np.zeros(4)), data, loss=_loss, constraints=bad)


def test_returns_the_best_feasible_epoch_and_warns_when_none_is():
    """The returned model is the best epoch-end iterate on the exact measure; a model that
    still violates a row comes with a BoundWarning naming it, and converged is False."""
    from fairopt.models import linear
    from fairopt.surrogates import Sigmoid
    from solvers.outcome import BoundWarning

    rng = np.random.default_rng(1)
    n = 400
    s = rng.integers(0, 2, n)
    X = np.column_stack([rng.normal(size=n) + 1.5 * s, rng.normal(size=n)])
    y = (X[:, 0] + 0.3 * rng.normal(size=n) > 0.8).astype(float)
    data = FairData.from_arrays(X, y, {"sex": s}, sensitive_kinds={"sex": "binary"})
    model = linear(data.n_features, seed=0)
    constraint = DisparateImpact("sex", 0.8, surrogate=Sigmoid(scale=5.0))
    res = LagrangianDual(epochs=150, lr=0.05, dual_lr=0.5).fit(model, data, constraints=constraint)
    with torch.no_grad():
        di = disparate_impact((model(data.X) > 0).float(), data.sensitive["sex"])
    assert res.info["feasible"] and di >= 0.8 and res.info["violation"] == 0.0
    assert 0 <= res.info["returned_iteration"] <= len(res.history)
    # without a dual step the bound is never enforced: the least-violating epoch is returned, with a warning
    model = linear(data.n_features, seed=0)
    with pytest.warns(BoundWarning, match="disparate_impact"):
        res = LagrangianDual(epochs=30, lr=0.05, dual_lr=1e-12).fit(model, data, constraints=constraint)
    assert not res.converged and not res.info["feasible"] and res.info["violation"] > 0


@pytest.mark.parametrize("dual_update", ["ascent", "adam"])
@pytest.mark.parametrize("batch_size", [None, 64])
def test_without_constraints_is_plain_first_order_training(dual_update, batch_size):
    """No constraints (the default ``constraints=()``, or ``[]``): no multipliers, no
    Lagrangian term; the iterates are step for step those of Penalty without penalties
    (same optimiser and options), and the result says so (class docstring)."""
    from fairopt.models import linear
    from solvers.penalty import Penalty

    rng = np.random.default_rng(3)
    n = 300
    s = rng.integers(0, 2, n)
    X = np.column_stack([rng.normal(size=n) + s, rng.normal(size=n)])
    y = (X[:, 0] + 0.5 * rng.normal(size=n) > 0.5).astype(float)
    data = FairData.from_arrays(X, y, {"sex": s}, sensitive_kinds={"sex": "binary"})
    options = {"epochs": 15, "lr": 0.05, "batch_size": batch_size, "seed": 4}
    for constraints in ((), []):
        lagrangian, plain = linear(data.n_features, seed=0), linear(data.n_features, seed=0)
        kwargs = {} if constraints == () else {"constraints": constraints}
        res = LagrangianDual(dual_update=dual_update, **options).fit(lagrangian, data, **kwargs)
        ref = Penalty(**options).fit(plain, data)
        assert res.history.column("f").tolist() == ref.history.column("f").tolist()
        assert res.history.column("objective").tolist() == res.history.column("f").tolist()
        for record in res.history:
            assert record["lambda"] == [] and record["c"] == [] and record["V"] == record["V_exact"] == 0.0
        assert res.info["multipliers"] == [] and res.info["row_names"] == [] and res.info["c_exact"] == []
        assert res.info["feasible"] and res.info["violation"] == 0.0 and res.info["unmet_rows"] == []
        assert res.status == "max_epochs" and len(res.history) == len(ref.history)
        # the returned model is the epoch-end iterate with the lowest loss on all rows: here,
        # with the loss still decreasing, the last one, which is Penalty's model bit for bit
        assert res.info["returned_iteration"] == len(res.history)
        for a, b in zip(lagrangian.parameters(), plain.parameters()):
            assert torch.equal(a, b)
        assert res.converged == (res.info["stationarity"] <= LagrangianDual().tol)


def test_fit_results_give_the_outcome_the_same_way_for_every_engine():
    """FitResult.feasible/violation/c_exact/row_names/unmet_rows/stationarity/
    returned_iteration/relaxed_steps read the same outcome whatever the engine."""
    import numpy as np

    import fairopt
    from fairopt.constraints import DisparateImpact
    from solvers import LagrangianDual, Penalty, StochasticSQP

    rng = np.random.default_rng(0)
    X = rng.normal(size=(200, 3))
    s = rng.integers(0, 2, 200)
    y = (X[:, 0] + s > 0.5).astype(float)
    data = fairopt.FairData.from_arrays(X, y, {"sex": s})
    for engine in (StochasticSQP(epochs=20), LagrangianDual(epochs=20, lr=0.05)):
        model = fairopt.models.linear(data.n_features, seed=0)
        result = engine.fit(model, data, constraints=[DisparateImpact("sex", delta=0.8)])
        assert result.feasible == (result.violation <= 1e-6 if result.violation is not None else None)
        assert len(result.c_exact) == len(result.row_names) == 2
        assert result.feasible == (not result.unmet_rows)
        assert result.stationarity is not None and result.returned_iteration is not None
        assert result.relaxed_steps >= 0
    plain = Penalty(epochs=5).fit(fairopt.models.linear(data.n_features, seed=0), data, penalties=[])
    assert plain.feasible is None and plain.c_exact == [] and plain.relaxed_steps == 0
    assert plain.stationarity is not None


def test_fit_results_name_the_binding_rows_and_complementarity():
    """SQP: the rows of the final unit-metric QP's active set, by name, and the KKT
    complementarity; the other engines have no active set (None)."""
    import numpy as np

    import fairopt
    from fairopt.constraints import DisparateImpact
    from solvers import StochasticSQP

    rng = np.random.default_rng(0)
    X = rng.normal(size=(400, 3))
    s = rng.integers(0, 2, 400)
    y = (X[:, 0] + 2.5 * s > 1.5).astype(float)  # the unconstrained model violates DI >= 0.9
    data = fairopt.FairData.from_arrays(X, y, {"sex": s})
    result = StochasticSQP(epochs=200).fit(fairopt.models.linear(data.n_features, seed=0), data,
                                           constraints=[DisparateImpact("sex", delta=0.9)])
    final = result.history.records[-1]
    assert result.binding_rows == [result.row_names[int(a[1:])] for a in final["active"]]
    assert len(result.binding_rows) == 1 and result.binding_rows[0] in result.row_names  # one DI side binds
    assert result.complementarity is not None and 0.0 <= result.complementarity < 1e-3
    lagrangian = LagrangianDual(epochs=5).fit(fairopt.models.linear(data.n_features, seed=0), data,
                                              constraints=[DisparateImpact("sex", delta=0.9)])
    assert lagrangian.binding_rows is None and lagrangian.complementarity is None
