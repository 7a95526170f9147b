"""Tests of solvers.projection: MILP/QP target projection against independent references.

References: brute-force enumeration of every binary target vector (n <= 12) with the
constraints evaluated from their definitions (group rates, least-squares GeDI
coefficients); scipy.optimize.milp (its own HiGHS build, called independently); closed-form
Euclidean projections onto one row and onto an affine set plus one slab; OSQP vs the HiGHS
QP solver; Gurobi (skipped when gurobipy is absent), and a stub gurobipy that reproduces
the size-limited licence error to test the "auto" fallback.
"""

from __future__ import annotations

import itertools
import logging
import sys
import types

import numpy as np
import pytest
import torch
from scipy.optimize import Bounds, LinearConstraint, milp

from fairopt.constraints import Covariance, DemographicParity, DisparateImpact
from fairopt.constraints.gedi import GeDI
from fairopt.data import FairData
from solvers import projection
from solvers.problem import LinearEncoding
from solvers.projection import ProjectionInfeasibleError, project_targets

HAS_GUROBI = projection.gurobi_available()


# ----------------------------------------------------------------------------- data
def make_data(n: int, seed: int, task: str = "binary") -> FairData:
    """n rows: a binary attribute ``s`` (both groups present), a continuous ``x``, 0/1 or real y."""
    rng = np.random.default_rng(seed)
    s = np.zeros(n)
    s[rng.permutation(n)[: max(2, n // 3)]] = 1
    x = rng.normal(size=n) + s
    y = (rng.random(n) < 0.3 + 0.4 * s).astype(float) if task == "binary" else 2.0 * x + rng.normal(size=n)
    return FairData.from_arrays(rng.normal(size=(n, 2)), y, {"s": s, "x": x}, task=task,
                                sensitive_kinds={"s": "binary", "x": "continuous"})


def class_balance(n: int) -> LinearEncoding:
    return LinearEncoding("class_balance", np.ones((1, n)), [1.0], [n - 1.0])


def counted_balance(n: int) -> LinearEncoding:
    """The class-balance rows through an auxiliary count ``a = sum z``, ``1 <= a <= n - 1``."""
    return LinearEncoding("class_balance", np.ones((1, n)), [0.0], [0.0], A_a=[[-1.0]], aux_lb=[1.0],
                          aux_ub=[n - 1.0])


def all_binary(n: int) -> np.ndarray:
    return np.array(list(itertools.product([0.0, 1.0], repeat=n)))


def hamming_objective(Z: np.ndarray, refs: list[np.ndarray], weights: list[float]) -> np.ndarray:
    return sum(w * np.abs(Z - r[None, :]).mean(axis=1) for w, r in zip(weights, refs))


def kernel(x: np.ndarray, degree: int) -> np.ndarray:
    """Centred polynomial kernel of the standardised x (population sd), as in [GeDI] eq 16."""
    zx = (x - x.mean()) / x.std()
    F = zx[:, None] ** np.arange(1, degree + 1)[None, :]
    return F - F.mean(axis=0)


def gedi_l1(Z: np.ndarray, x: np.ndarray, degree: int) -> np.ndarray:
    """||alpha||_1 for every row of Z, alpha = least squares of centred z on the kernel."""
    F = kernel(x, degree)
    alpha = np.linalg.lstsq(F, (Z - Z.mean(axis=1, keepdims=True)).T, rcond=None)[0]
    return np.abs(alpha).sum(axis=0)


def between_values(values: np.ndarray, quantile: float) -> float:
    """A threshold strictly between two distinct attained values (no ties at the bound)."""
    distinct = np.unique(np.round(values, 12))
    i = int(quantile * (len(distinct) - 1))
    return float((distinct[i] + distinct[i + 1]) / 2)


# ----------------------------------------------------------------------------- MILP: brute force
@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("kind", ["disparate_impact", "demographic_parity", "gedi_coarse_2"])
def test_milp_equals_brute_force(kind: str, seed: int) -> None:
    n = 11
    data = make_data(n, seed)
    rng = np.random.default_rng(100 + seed)
    y = data.y.numpy().astype(float)
    p = (rng.random(n) < 0.5).astype(float)
    weights = [1.0, 1.0 / (seed + 1)]
    Z = all_binary(n)
    s = data.sensitive["s"].numpy()
    rates = np.stack([Z[:, s == 0].mean(axis=1), Z[:, s == 1].mean(axis=1)], axis=1)
    if kind == "disparate_impact":
        ratios = np.minimum(rates[:, 0], rates[:, 1]) / np.maximum(np.maximum(rates[:, 0], rates[:, 1]), 1e-300)
        delta = between_values(ratios[(ratios > 0.3) & (ratios < 0.95)], 0.5)
        constraint = DisparateImpact("s", delta=delta)
        feasible = (delta * rates[:, 0] <= rates[:, 1]) & (delta * rates[:, 1] <= rates[:, 0])
    elif kind == "demographic_parity":
        gaps = np.abs(rates[:, 1] - rates[:, 0])
        bound = between_values(gaps, 0.2)
        constraint = DemographicParity("s", bound=bound)
        feasible = gaps <= bound
    else:
        x = data.sensitive["x"].numpy().astype(float)
        l1 = gedi_l1(Z, x, 2)
        bound = between_values(l1, 0.3)
        constraint = GeDI("x", 2, bound=bound)
        feasible = l1 <= bound
    constraint.setup(data)
    counts = Z.sum(axis=1)
    feasible &= (counts >= 1) & (counts <= n - 1)
    objective = hamming_objective(Z, [p, y], weights)
    best = objective[feasible].min()

    result = project_targets([p, y], weights=weights, encodings=[constraint.target_encoding(data), class_balance(n)],
                             loss="hamming", binary=True, backend="highs", mip_gap=0.0)
    assert result.status == "optimal" and result.backend == "highs"
    assert result.objective == pytest.approx(best, abs=1e-12)
    row = np.flatnonzero((Z == result.z).all(axis=1))
    assert row.size == 1 and feasible[row[0]], "the master's z must be one of the feasible vectors"
    assert set(np.unique(result.z)) <= {0.0, 1.0}
    assert result.terms == pytest.approx([np.abs(result.z - p).mean(), np.abs(result.z - y).mean()], abs=1e-15)
    # the fairness constraint holds exactly on z (exact rows on hard labels out = 2z - 1)
    rows = constraint.exact(torch.tensor(2.0 * result.z - 1.0, dtype=torch.float64), data)
    assert bool((rows <= constraint.upper + 1e-12).all() and (rows >= constraint.lower - 1e-12).all())


def test_squared_loss_on_binary_targets_equals_brute_force() -> None:
    """Binary z with fractional references (probabilities): the squared loss is linear in z."""
    n = 10
    data = make_data(n, 5)
    rng = np.random.default_rng(7)
    proba, y = rng.random(n), data.y.numpy().astype(float)
    constraint = DemographicParity("s", bound=0.15)
    constraint.setup(data)
    Z = all_binary(n)
    s = data.sensitive["s"].numpy()
    feasible = np.abs(Z[:, s == 1].mean(axis=1) - Z[:, s == 0].mean(axis=1)) <= 0.15
    objective = ((Z - proba) ** 2).mean(axis=1) + 0.5 * ((Z - y) ** 2).mean(axis=1)
    result = project_targets([proba, y], weights=[1.0, 0.5], encodings=[constraint.target_encoding(data)],
                             loss="squared", binary=True, backend="highs", mip_gap=0.0)
    assert result.objective == pytest.approx(objective[feasible].min(), abs=1e-12)
    # and the Hamming loss on fractional references: |z - r| = r + (1 - 2r) z
    hamming = np.abs(Z - proba).mean(axis=1) + 0.5 * np.abs(Z - y).mean(axis=1)
    result = project_targets([proba, y], weights=[1.0, 0.5], encodings=[constraint.target_encoding(data)],
                             loss="hamming", binary=True, backend="highs", mip_gap=0.0)
    assert result.objective == pytest.approx(hamming[feasible].min(), abs=1e-12)


# ----------------------------------------------------------------------------- MILP: scipy.optimize.milp
@pytest.mark.parametrize("seed", [0, 1])
def test_highspy_equals_scipy_milp(seed: int) -> None:
    """n = 200 with GeDI coarse (degree 3, auxiliary variables) and DI: highspy vs scipy's milp."""
    n = 200
    data = make_data(n, seed)
    rng = np.random.default_rng(seed)
    y = data.y.numpy().astype(float)
    p = np.where(rng.random(n) < 0.15, 1 - y, y)
    gedi = GeDI("x", 3, bound=0.05)
    di = DisparateImpact("s", delta=0.9)
    for c in (gedi, di):
        c.setup(data)
    encodings = [gedi.target_encoding(data), di.target_encoding(data), class_balance(n)]
    weights = np.array([1.0, 0.5])
    result = project_targets([p, y], weights=weights, encodings=encodings, loss="hamming", binary=True,
                             backend="highs", mip_gap=0.0)

    # the same MILP written directly for scipy: sum-form objective sum_r w_r (r + (1 - 2r) z)
    n_aux = sum(e.n_aux for e in encodings)
    cost = np.concatenate([weights @ (1 - 2 * np.vstack([p, y])), np.zeros(n_aux)])
    rows, offset = [], 0
    for e in encodings:
        aux = np.zeros((e.A_z.shape[0], n_aux))
        aux[:, offset:offset + e.n_aux] = e.A_a
        offset += e.n_aux
        rows.append(LinearConstraint(np.hstack([e.A_z, aux]), e.lb, e.ub))
    lower = np.concatenate([np.zeros(n)] + [e.aux_lb for e in encodings])
    upper = np.concatenate([np.ones(n)] + [e.aux_ub for e in encodings])
    integrality = np.concatenate([np.ones(n), np.zeros(n_aux)])
    reference = milp(cost, constraints=rows, bounds=Bounds(lower, upper), integrality=integrality,
                     options={"mip_rel_gap": 0.0})
    assert reference.success
    expected = (reference.fun + weights @ np.vstack([p, y]).sum(axis=1)) / n
    assert result.objective == pytest.approx(expected, abs=1e-9)
    assert gedi_l1(result.z[None, :], data.sensitive["x"].numpy().astype(float), 3)[0] <= gedi.absolute_bound + 1e-9


# ----------------------------------------------------------------------------- QP: closed forms
def weighted_mean(refs: list[np.ndarray], weights: list[float]) -> np.ndarray:
    return sum(w * r for w, r in zip(weights, refs)) / sum(weights)


@pytest.mark.parametrize("backend", ["osqp", "highs"])
@pytest.mark.parametrize("bound, sign", [(0.0, 1.0), (0.3, 1.0), (0.3, -1.0)])
def test_qp_equals_closed_form_single_row(backend: str, bound: float, sign: float) -> None:
    """GeDI V^1 on a continuous target: one row ``|cov(x, z)| <= q var(x)``.

    The projection of the weighted mean m onto the slab ``lo <= a'z <= hi`` is
    ``m - a (a'm - clip(a'm, lo, hi)) / ||a||^2``; with q = 0 the row is an equality, and
    ``sign = -1`` (negated targets) makes the lower side active.
    """
    data = make_data(120, 3, task="regression")
    rng = np.random.default_rng(3)
    y = sign * (100.0 + 20.0 * data.y.numpy().astype(float))
    p = y + 20.0 * rng.normal(size=y.size)
    constraint = GeDI("x", 1, bound=bound, fine=True)
    constraint.setup(data)
    enc = constraint.target_encoding(data)
    weights = [1.0, 0.25]
    m = weighted_mean([p, y], weights)
    a = enc.A_z[0]
    value = a @ m
    z_star = m - a * (value - np.clip(value, enc.lb[0], enc.ub[0])) / (a @ a)
    assert value > enc.ub[0] + 1e-6 if sign > 0 else value < enc.lb[0] - 1e-6, "the constraint must be active"
    result = project_targets([p, y], weights=weights, encodings=[enc], backend=backend)
    assert result.backend == backend and result.status == "optimal"
    np.testing.assert_allclose(result.z, z_star, rtol=0, atol=1e-6 * np.abs(z_star).max())
    expected = sum(w * np.mean((z_star - r) ** 2) for w, r in zip(weights, [p, y]))
    assert result.objective == pytest.approx(expected, rel=1e-9)
    alpha = constraint.exact(torch.tensor(result.z), data)
    assert abs(float(alpha[0])) <= constraint.absolute_bound * (1 + 1e-7) + 1e-12


def test_qp_fine_degree_3_equals_closed_form() -> None:
    """GeDI fine, degree 3: two equalities plus one slab; KKT closed form with the slab active."""
    data = make_data(150, 4, task="regression")
    y = data.y.numpy().astype(float)
    constraint = GeDI("x", 3, bound=0.2, fine=True)
    constraint.setup(data)
    enc = constraint.target_encoding(data)

    def project(rows: np.ndarray, rhs: np.ndarray) -> np.ndarray:
        return y - rows.T @ np.linalg.solve(rows @ rows.T, rows @ y - rhs)

    equalities = enc.A_z[1:]
    z_eq = project(equalities, np.zeros(2))
    slab = enc.A_z[0] @ z_eq
    assert slab > enc.ub[0], "the test needs the slab to be active"
    z_star = project(enc.A_z, np.array([enc.ub[0], 0.0, 0.0]))
    result = project_targets(y, encodings=[enc], backend="osqp")
    np.testing.assert_allclose(result.z, z_star, rtol=0, atol=1e-7 * np.abs(y).max())
    alpha = constraint.exact(torch.tensor(result.z), data).numpy()
    q = constraint.absolute_bound
    assert abs(alpha[0]) <= q * (1 + 1e-7) and np.abs(alpha[1:]).max() <= 1e-7 * q


# ----------------------------------------------------------------------------- QP: OSQP vs HiGHS
def test_osqp_equals_highs_qp_with_auxiliary_variables() -> None:
    """GeDI coarse degree 3 (alpha and t auxiliary variables) + a DP row on real targets."""
    data = make_data(150, 6, task="regression")
    rng = np.random.default_rng(6)
    y = data.y.numpy().astype(float) * 50.0 + 300.0  # raw units, like crimes per 100k
    p = y + 40.0 * rng.normal(size=y.size)
    gedi = GeDI("x", 3, bound=0.2 * 50.0)
    gedi.setup(data)
    encodings = [gedi.target_encoding(data)]
    a = project_targets([p, y], weights=[1.0, 0.5], encodings=encodings, backend="osqp")
    b = project_targets([p, y], weights=[1.0, 0.5], encodings=encodings, backend="highs")
    assert a.status == b.status == "optimal"
    assert a.objective == pytest.approx(b.objective, rel=1e-7)
    np.testing.assert_allclose(a.z, b.z, rtol=0, atol=1e-4 * np.abs(y).max())
    l1 = gedi_l1(a.z[None, :], data.sensitive["x"].numpy().astype(float), 3)[0]
    assert l1 <= gedi.absolute_bound * (1 + 1e-7)
    assert l1 == pytest.approx(gedi.absolute_bound, rel=1e-6), "the L1 bound is active at the projection"


def test_osqp_converges_on_an_ill_conditioned_gedi_kernel() -> None:
    """GeDI coarse, degree 5 on a skewed attribute: the Gram matrix has condition ~4e7.
    OSQP does not converge on the normal equations as given (200k iterations); with the
    equality rows solved for alpha it does, and agrees with the HiGHS QP solver."""
    rng = np.random.default_rng(0)
    n = 300
    x = rng.lognormal(sigma=0.8, size=n)
    y = 50.0 * np.sqrt(x) + 10.0 * rng.normal(size=n) + 500.0
    data = FairData.from_arrays(rng.normal(size=(n, 2)), y, {"x": x}, task="regression",
                                sensitive_kinds={"x": "continuous"})
    gedi = GeDI("x", 5, bound=0.2, relative=True)
    gedi.setup(data)
    enc = gedi.target_encoding(data)
    assert np.linalg.cond(enc.A_a[:5, :5]) > 1e7
    a = project_targets(y, encodings=[enc], backend="osqp")
    b = project_targets(y, encodings=[enc], backend="highs")
    assert a.status == "optimal" and a.solver_status == "solved (polished)"
    assert a.objective == pytest.approx(b.objective, rel=1e-8)
    l1 = float(gedi.exact(torch.tensor(a.z), data)[0])
    assert l1 <= gedi.absolute_bound * (1 + 1e-7)


def test_unconstrained_projection_is_the_weighted_mean() -> None:
    rng = np.random.default_rng(0)
    r1, r2 = rng.normal(size=30), rng.normal(size=30)
    result = project_targets(np.vstack([r1, r2]), weights=[2.0, 1.0], backend="osqp")
    np.testing.assert_allclose(result.z, (2 * r1 + r2) / 3, atol=1e-8)


# ----------------------------------------------------------------------------- infeasibility
def test_infeasible_encoding_is_named() -> None:
    n = 8
    impossible = LinearEncoding("too_many_positives", np.ones((1, n)), [n + 1.0], [np.inf])
    ok = class_balance(n)
    with pytest.raises(ProjectionInfeasibleError, match="too_many_positives") as info:
        project_targets(np.zeros(n), encodings=[ok, impossible], loss="hamming", binary=True)
    assert info.value.constraints == ("too_many_positives",) and not info.value.jointly
    assert isinstance(info.value, RuntimeError)


def test_jointly_infeasible_constraints_are_named() -> None:
    """Equal rates with group sizes 3 and 4 force all-0 or all-1 targets, which the class
    balance rows exclude: each encoding is feasible alone, not together."""
    rng = np.random.default_rng(0)
    data = FairData.from_arrays(rng.normal(size=(7, 1)), [0, 1, 0, 1, 0, 1, 1], {"s": [0, 0, 0, 1, 1, 1, 1]},
                                sensitive_kinds={"s": "binary"})
    dp = DemographicParity("s", bound=0.0)
    dp.setup(data)
    with pytest.raises(ProjectionInfeasibleError, match="together") as info:
        project_targets(data.y.numpy(), encodings=[dp.target_encoding(data), class_balance(7)], loss="hamming",
                        binary=True)
    assert info.value.jointly and info.value.constraints == (dp.name, "class_balance")


def test_infeasible_qp_is_named() -> None:
    a = np.ones((2, 5))
    contradiction = LinearEncoding("contradiction", a, [-np.inf, 1.0], [-1.0, np.inf])
    with pytest.raises(ProjectionInfeasibleError, match="contradiction"):
        project_targets(np.arange(5.0), encodings=[contradiction], backend="osqp")


# ----------------------------------------------------------------------------- Gurobi
@pytest.mark.skipif(not HAS_GUROBI, reason="gurobipy is not installed")
@pytest.mark.parametrize("binary", [True, False])
def test_gurobi_equals_highs(binary: bool) -> None:
    # under the pip licence's limits: 2000 variables (MILP), 200 with a quadratic objective
    n = 250 if binary else 150
    data = make_data(n, 8, task="binary" if binary else "regression")
    rng = np.random.default_rng(8)
    y = data.y.numpy().astype(float)
    p = np.where(rng.random(n) < 0.2, 1 - y, y) if binary else y + rng.normal(size=n)
    gedi = GeDI("x", 2, bound=0.05)
    gedi.setup(data)
    encodings = [gedi.target_encoding(data)] + ([class_balance(n)] if binary else [])
    kwargs = dict(weights=[1.0, 0.5], encodings=encodings, binary=binary, mip_gap=0.0,
                  loss="hamming" if binary else "squared")
    g = project_targets([p, y], backend="gurobi", **kwargs)
    h = project_targets([p, y], backend="highs" if binary else "osqp", **kwargs)
    assert g.backend == "gurobi" and g.status == "optimal"
    assert g.objective == pytest.approx(h.objective, abs=1e-6)


class _StubGurobiError(Exception):
    def __init__(self, errno: int, message: str) -> None:
        super().__init__(message)
        self.errno = errno


def _stub_gurobipy(calls: list) -> types.ModuleType:
    """A gurobipy look-alike whose optimize() fails like the pip wheel's size-limited licence."""
    module = types.ModuleType("gurobipy")

    class GRB:
        BINARY, CONTINUOUS, MINIMIZE = "B", "C", 1
        EQUAL, LESS_EQUAL, GREATER_EQUAL = "=", "<", ">"
        OPTIMAL, INFEASIBLE, INF_OR_UNBD, TIME_LIMIT = 2, 3, 4, 9

        class Status:
            OPTIMAL = 2

        class Error:
            NO_LICENSE, SIZE_LIMIT_EXCEEDED = 10009, 10010

    class Env:
        def __init__(self, empty: bool = False) -> None:
            pass

        def setParam(self, *args) -> None:
            pass

        def start(self) -> None:
            pass

        def dispose(self) -> None:
            pass

    class Model:
        def __init__(self, env=None) -> None:
            pass

        def __enter__(self):
            return self

        def __exit__(self, *exc) -> None:
            return None

        def setParam(self, *args) -> None:
            pass

        def addMVar(self, *args, **kwargs):
            return None

        def setMObjective(self, *args, **kwargs) -> None:
            pass

        def addMConstr(self, *args, **kwargs) -> None:
            pass

        def optimize(self) -> None:
            calls.append("optimize")
            raise _StubGurobiError(10010, "Model too large for size-limited license; visit "
                                          "https://gurobi.com/unrestricted for more information")

    module.GRB, module.Env, module.Model, module.GurobiError = GRB, Env, Model, _StubGurobiError
    return module


def test_auto_falls_back_from_size_limited_gurobi(monkeypatch, caplog) -> None:
    calls: list = []
    monkeypatch.setitem(sys.modules, "gurobipy", _stub_gurobipy(calls))
    monkeypatch.setitem(projection.backends._GUROBI_STATE, "importable", None)
    monkeypatch.setitem(projection.backends._GUROBI_STATE, "size_limited", False)
    monkeypatch.setattr(projection.project, "_LOGGED_CHOICES", set())
    n = 30
    # counted_balance has an auxiliary variable: no count search, the MIP backends solve it
    y = (np.arange(n) % 3 == 0).astype(float)
    with caplog.at_level(logging.INFO, logger="solvers.projection"):
        result = project_targets(y, encodings=[counted_balance(n)], loss="hamming", binary=True)
    assert result.backend == "highs" and calls == ["optimize"]
    assert "size-limited" in caplog.text and "using highs" in caplog.text
    # explicit request: a clear error instead of a silent fallback
    with pytest.raises(RuntimeError, match="'gurobi' was requested but cannot be used.*size-limited"):
        project_targets(y, encodings=[counted_balance(n)], loss="hamming", binary=True, backend="gurobi")
    # once the licence is known to be size-limited, larger problems skip Gurobi without a try
    big = 2 * projection.GUROBI_SIZE_LIMIT
    calls.clear()
    result = project_targets(np.zeros(big), encodings=[counted_balance(big)], loss="hamming", binary=True)
    assert result.backend == "highs" and calls == []
    assert result.z.sum() == 1.0


def test_gurobi_not_installed(monkeypatch) -> None:
    monkeypatch.setitem(sys.modules, "gurobipy", None)  # import gurobipy raises ImportError
    monkeypatch.setitem(projection.backends._GUROBI_STATE, "importable", None)
    assert not projection.gurobi_available()
    assert project_targets(np.arange(4.0)).backend == "osqp"
    with pytest.raises(RuntimeError, match="gurobipy is not installed"):
        project_targets(np.arange(4.0), backend="gurobi")


# ----------------------------------------------------------------------------- time limit, validation
def test_time_limit_and_seconds_are_reported() -> None:
    data = make_data(300, 9)
    di = DisparateImpact("s", delta=0.95)
    di.setup(data)
    y = data.y.numpy().astype(float)
    result = project_targets(y, encodings=[di.target_encoding(data)], loss="hamming", binary=True, time_limit=5.0)
    assert result.status in ("optimal", "time_limit") and 0 < result.seconds < 5.0 + 1.0
    assert result.gap <= 1e-4 or result.status == "time_limit"
    assert result.max_violation <= 1e-12


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(loss="l1"), "loss"),
        (dict(backend="cplex"), "backend"),
        (dict(time_limit=0.0), "time_limit"),
        (dict(mip_gap=-1.0), "mip_gap"),
        (dict(seed=-1), "seed"),
        (dict(binary="yes"), "binary"),
        (dict(weights=[1.0, 2.0]), "weights"),
        (dict(weights=[-1.0]), "weights"),
        (dict(loss="hamming"), "binary=True"),
        (dict(loss="hamming", binary=True, reference=[0.0, 2.0, 1.0]), r"\[0, 1\]"),
        (dict(binary=True, backend="osqp"), "osqp"),
        (dict(reference=[[0.0, np.nan, 1.0]]), "NaN"),
        (dict(reference=[np.zeros(3), np.zeros(4)]), "lengths"),
        (dict(encodings=[LinearEncoding("wide", np.ones((1, 4)), [0.0], [1.0])]), "4 columns"),
        (dict(encodings=[LinearEncoding("empty", np.ones((1, 3)), [2.0], [1.0])]), "no feasible value"),
        (dict(encodings=["not an encoding"]), "LinearEncoding"),
    ],
)
def test_bad_arguments_raise_value_error(kwargs: dict, match: str) -> None:
    reference = kwargs.pop("reference", np.array([0.0, 1.0, 1.0]))
    with pytest.raises(ValueError, match=match):
        project_targets(reference, **kwargs)


def test_constraint_without_encoding_gives_clear_error() -> None:
    from solvers.problem import ConstraintSet

    data = make_data(20, 0, task="regression")
    cov = Covariance("x", bound=0.1)
    cov.setup(data)
    with pytest.raises(ValueError, match=r"'covariance\[x\]' has no linear target encoding"):
        ConstraintSet([cov]).target_encoding(data)


def test_torch_and_list_references_agree() -> None:
    """A torch (R, n) tensor and a list of R vectors give the same projection (onto sum z = 0)."""
    rng = np.random.default_rng(1)
    r = rng.normal(size=(2, 12))
    enc = LinearEncoding("sum", np.ones((1, 12)), [0.0], [0.0])
    a = project_targets(torch.tensor(r), weights=[1.0, 3.0], encodings=[enc])
    b = project_targets([r[0], r[1]], weights=[1.0, 3.0], encodings=[enc])
    np.testing.assert_allclose(a.z, b.z, atol=1e-12)
    expected = (r[0] + 3 * r[1]) / 4
    np.testing.assert_allclose(a.z, expected - expected.mean(), atol=1e-7)
