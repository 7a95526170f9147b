"""Tests of solvers.qp: the exact diagonal-Hessian QP of the SQP step.

References are independent of the code under test: OSQP (tight, polished) and Clarabel
through qpsolvers, scipy's SLSQP, problems with a known solution built from the KKT
conditions, a hand-computed example, and an independent p-space HiGHS LP for the least
violation. Every optimal answer is also checked against the KKT conditions directly.
"""

from __future__ import annotations

import json
import math
import warnings
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
import qpsolvers
import scipy.sparse as sp
import torch
from scipy.optimize import linprog, minimize

from solvers.qp import ENUMERATION_MAX_ROWS, diagonal_qp, least_violation_bounds
from solvers.qp.scalar import NEAR_DEPENDENT, SCALAR_MAX_ROWS, solve_scalar
from solvers.qp.solve import PRIMAL_SLACK

N_RANDOM = 500
OBJ_RTOL = 1e-7


# --------------------------------------------------------------------------------------
# Problem generation and references
# --------------------------------------------------------------------------------------
@dataclass
class Problem:
    g: np.ndarray
    h: np.ndarray
    J: np.ndarray
    lo: np.ndarray
    hi: np.ndarray

    def tensors(self, dtype=torch.float64):
        return tuple(torch.tensor(a, dtype=dtype) for a in (self.g, self.h, self.J, self.lo, self.hi))

    def objective(self, d: np.ndarray) -> float:
        return float(self.g @ d + 0.5 * self.h @ (d * d))


def random_problem(rng: np.random.Generator, m: int | None = None, p: int | None = None) -> Problem:
    """A feasible problem with a random mix of upper, lower, two-sided, equality and free rows.

    A random point d_f is feasible by construction; the bounds sit between J d_f and beyond
    the unconstrained step's J(-g/h), so that some rows are active and some are not. With
    m > p the rows are dependent (consistent equalities included).
    """
    m = int(rng.integers(1, 13)) if m is None else m
    p = int(rng.integers(5, 61)) if p is None else p
    g = rng.normal(size=p)
    h = rng.uniform(0.5, 20.0, p)
    J = rng.normal(size=(m, p))
    w_f = J @ (0.3 * rng.normal(size=p))
    spread = np.abs(J @ (-g / h) - w_f) + 0.1
    above, below = w_f + rng.uniform(0, 1, m) * spread, w_f - rng.uniform(0, 1, m) * spread
    kind = rng.integers(0, 5, m)  # 0 upper, 1 lower, 2 two-sided, 3 equality, 4 free
    lo = np.where(np.isin(kind, (1, 2)), below, np.where(kind == 3, w_f, -np.inf))
    hi = np.where(np.isin(kind, (0, 2)), above, np.where(kind == 3, w_f, np.inf))
    return Problem(g, h, J, lo, hi)


def qpsolvers_reference(prob: Problem, solver: str) -> np.ndarray | None:
    """Primal solution by OSQP (eps 1e-10, polished) or Clarabel (tolerances 1e-10)."""
    eq = prob.lo == prob.hi
    up, dn = np.isfinite(prob.hi) & ~eq, np.isfinite(prob.lo) & ~eq
    if not (up.any() or dn.any() or eq.any()):
        return -prob.g / prob.h
    G = np.vstack([prob.J[up], -prob.J[dn]])
    h_G = np.concatenate([prob.hi[up], -prob.lo[dn]])
    options = (
        dict(eps_abs=1e-10, eps_rel=1e-10, polish=True, max_iter=500_000)
        if solver == "osqp"
        else dict(tol_feas=1e-10, tol_gap_abs=1e-10, tol_gap_rel=1e-10)
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return qpsolvers.solve_qp(
            sp.diags(prob.h, format="csc"), prob.g,
            sp.csc_matrix(G) if G.size else None, h_G if G.size else None,
            sp.csc_matrix(prob.J[eq]) if eq.any() else None, prob.lo[eq] if eq.any() else None,
            solver=solver, **options,
        )


def slsqp_reference(prob: Problem) -> np.ndarray:
    """scipy SLSQP on the same QP (constraint functions written out independently)."""
    constraints = []
    for a, lo, hi in zip(prob.J, prob.lo, prob.hi):
        if lo == hi:
            constraints.append({"type": "eq", "fun": lambda d, a=a, b=lo: a @ d - b, "jac": lambda d, a=a: a})
            continue
        if np.isfinite(hi):
            constraints.append({"type": "ineq", "fun": lambda d, a=a, b=hi: b - a @ d, "jac": lambda d, a=a: -a})
        if np.isfinite(lo):
            constraints.append({"type": "ineq", "fun": lambda d, a=a, b=lo: a @ d - b, "jac": lambda d, a=a: a})
    res = minimize(
        prob.objective, np.zeros_like(prob.g), jac=lambda d: prob.g + prob.h * d, method="SLSQP",
        constraints=constraints, options={"ftol": 1e-13, "maxiter": 1000},
    )
    assert res.success, res.message
    return res.x


def assert_kkt(prob: Problem, res, atol: float = 1e-8) -> None:
    """Independent check of the KKT conditions of an optimal QPResult."""
    assert res.status == "optimal", res.status
    d = res.d.double().numpy()
    y = res.multipliers.double().numpy()
    w = prob.J @ d
    scale = 1.0 + np.abs(prob.J @ (prob.g / prob.h)) + np.where(np.isfinite(prob.lo), np.abs(prob.lo), 0) + np.where(
        np.isfinite(prob.hi), np.abs(prob.hi), 0
    )
    # stationarity g + h d + J'y = 0
    assert np.abs(prob.g + prob.h * d + prob.J.T @ y).max() <= atol * (1 + np.abs(prob.g).max())
    assert res.kkt_residual <= atol * (1 + np.abs(prob.g).max())
    # primal feasibility
    assert np.all(w <= prob.hi + atol * scale) and np.all(w >= prob.lo - atol * scale)
    assert res.max_violation <= atol * scale.max()
    # signs and complementary slackness: y > 0 only at an active upper side, y < 0 at a lower one
    ty = atol * (1 + np.abs(y).max(initial=0))
    pos, neg = y > ty, y < -ty
    assert np.all(np.isfinite(prob.hi[pos])) and np.all(np.abs(w[pos] - prob.hi[pos]) <= atol * scale[pos])
    assert np.all(np.isfinite(prob.lo[neg])) and np.all(np.abs(w[neg] - prob.lo[neg]) <= atol * scale[neg])
    # reported objective
    assert res.objective == pytest.approx(prob.objective(d), rel=1e-12, abs=1e-12)


def assert_objective_close(value: float, reference: float, rtol: float = OBJ_RTOL) -> None:
    assert abs(value - reference) <= rtol * max(1.0, abs(reference)), (value, reference)


@pytest.fixture(scope="module")
def random_problems() -> list[Problem]:
    rng = np.random.default_rng(20240611)
    return [random_problem(rng) for _ in range(N_RANDOM)]


# --------------------------------------------------------------------------------------
# Random problems against OSQP, Clarabel and SLSQP
# --------------------------------------------------------------------------------------
@pytest.mark.parametrize("chunk", range(5))
def test_random_problems_match_osqp_and_clarabel(random_problems, chunk):
    """>= 500 random problems (m 1..12, p 5..60): objective within 1e-7 of both references."""
    per_chunk = N_RANDOM // 5
    for prob in random_problems[chunk * per_chunk : (chunk + 1) * per_chunk]:
        res = diagonal_qp(*prob.tensors())
        assert_kkt(prob, res)
        d = res.d.numpy()
        for solver in ("clarabel", "osqp"):
            x = qpsolvers_reference(prob, solver)
            assert x is not None, f"{solver} failed on a feasible problem"
            assert_objective_close(res.objective, prob.objective(x))
            # strong convexity (h >= 0.5) turns the objective gap into a step distance
            assert np.abs(d - x).max() <= 1e-5 * (1 + np.abs(x).max())


def test_random_problems_match_slsqp(random_problems):
    """scipy's SLSQP as a reference that does not go through qpsolvers."""
    small = [prob for prob in random_problems if prob.J.shape[1] <= 30][:60]
    assert len(small) == 60
    for prob in small:
        res = diagonal_qp(*prob.tensors())
        assert_objective_close(res.objective, prob.objective(slsqp_reference(prob)))


def test_enumeration_and_dual_paths_agree(random_problems):
    """[SQP] Alg 1 enumeration and the Goldfarb-Idnani dual method give the same step."""
    compared = 0
    for prob in random_problems:
        constrained = np.count_nonzero(np.isfinite(prob.lo) | np.isfinite(prob.hi))
        if constrained > 7:
            continue
        enum = diagonal_qp(*prob.tensors(), solver="enumeration")
        dual = diagonal_qp(*prob.tensors(), solver="dual")
        assert enum.status == dual.status == "optimal"
        assert np.abs(enum.d.numpy() - dual.d.numpy()).max() <= 1e-9 * (1 + np.abs(dual.d.numpy()).max())
        assert_objective_close(enum.objective, dual.objective, rtol=1e-12)
        assert enum.degenerate == dual.degenerate
        if not dual.degenerate:  # multipliers are unique under LICQ
            y_e, y_d = enum.multipliers.numpy(), dual.multipliers.numpy()
            assert np.abs(y_e - y_d).max() <= 1e-7 * (1 + np.abs(y_d).max())
            assert torch.equal(enum.active, dual.active)
        compared += 1
    assert compared >= 150


def test_default_path_uses_threshold(random_problems):
    """solver="active_set" enumerates up to ENUMERATION_MAX_ROWS constrained rows, and in scalar
    arithmetic when the problem has at most SCALAR_MAX_ROWS plain rows (solvers.qp.scalar)."""
    for prob in random_problems[:100]:
        constrained = np.count_nonzero(np.isfinite(prob.lo) | np.isfinite(prob.hi))
        res = diagonal_qp(*prob.tensors())
        scalar = solve_scalar(*prob.tensors(), 1e-9, 1e-10, PRIMAL_SLACK)
        if scalar is not None:
            assert prob.J.shape[0] <= SCALAR_MAX_ROWS and res.method == "enumeration"
        else:
            assert res.method == ("enumeration" if constrained <= ENUMERATION_MAX_ROWS else "dual")


def _tensors(prob: Problem, dtype=torch.float64) -> tuple:
    g, h, J, lo, hi = prob.tensors()
    return g.to(dtype), h.to(dtype), J.to(dtype), lo, hi


def test_scalar_path_equals_the_general_enumeration():
    """One to four rows: the scalar enumeration returns what the general enumeration returns."""
    rng = np.random.default_rng(7)
    taken, by_rows = 0, {m: 0 for m in range(1, SCALAR_MAX_ROWS + 1)}
    for k in range(1000):
        m = 1 + k % SCALAR_MAX_ROWS
        prob = random_problem(rng, m=m, p=int(rng.integers(3, 40)))
        if k % 7 == 0:  # a row nearly parallel to another, or a free row
            prob.J[-1] = prob.J[0] * (1 + 1e-9) if m > 1 else prob.J[-1]
        for dtype in (torch.float64, torch.float32):
            inputs = _tensors(prob, dtype)
            fast = solve_scalar(*inputs, 1e-9, 1e-10, PRIMAL_SLACK)
            general = diagonal_qp(*inputs, solver="enumeration")
            if fast is None:
                continue
            taken += 1
            by_rows[m] += 1
            assert fast.status == general.status == "optimal"
            assert fast.d.dtype == general.d.dtype == dtype and fast.multipliers.dtype == dtype
            d_f, d_g = fast.d.double().numpy(), general.d.double().numpy()
            assert np.abs(d_f - d_g).max() <= 1e-9 * (1 + np.abs(d_g).max())
            y_f, y_g = fast.multipliers.double().numpy(), general.multipliers.double().numpy()
            assert np.abs(y_f - y_g).max() <= 1e-7 * (1 + np.abs(y_g).max())
            assert torch.equal(fast.active, general.active) and fast.degenerate == general.degenerate
            assert fast.iterations == general.iterations and fast.method == "enumeration"
            for field in ("objective", "kkt_residual", "max_violation"):
                assert getattr(fast, field) == pytest.approx(getattr(general, field), rel=1e-9, abs=1e-12)
            if dtype == torch.float64:
                assert_kkt(prob, fast)
    # of 2,000: equality rows (one row in five) and more than MAX_CANDIDATES active sets go to the general path
    assert taken >= 800 and min(by_rows.values()) >= 100, by_rows


def test_scalar_path_takes_nearly_opposite_rows_above_its_threshold():
    """Two rows at ``1 - |cos| = 2e-7`` in the ``H^{-1}`` metric (what a disparate-impact pair often
    gives on a mini-batch) stay on the scalar path, above NEAR_DEPENDENT, and agree with the general
    enumeration; at ``1e-10`` they go to the general path."""
    rng = np.random.default_rng(3)
    for gap, taken in ((2e-7, True), (1e-10, False)):
        for _ in range(50):
            p = 60
            h = torch.as_tensor(rng.uniform(0.5, 2.0, p))
            J0 = torch.as_tensor(rng.normal(size=p))
            z = torch.as_tensor(rng.normal(size=p))
            z -= (z @ (J0 / h)) / (J0 @ (J0 / h)) * J0  # orthogonal to J0 in the H^-1 metric
            z *= math.sqrt(2 * gap * float(J0 @ (J0 / h)) / float(z @ (z / h)))  # sin^2 = 2 gap, so 1 - |cos| ~ gap
            J = torch.stack([J0, -J0 + z])
            g = torch.as_tensor(rng.normal(size=p))
            lo = torch.full((2,), -math.inf, dtype=torch.float64)
            hi = torch.as_tensor(rng.uniform(-0.05, 0.3, 2))
            assert NEAR_DEPENDENT < 2e-7
            fast = solve_scalar(g, h, J, lo, hi, 1e-9, 1e-10, PRIMAL_SLACK)
            if not taken:
                assert fast is None
                continue
            general = diagonal_qp(g, h, J, lo, hi, solver="enumeration")
            assert fast is not None and fast.status == general.status == "optimal"
            assert torch.equal(fast.active, general.active)
            d_f, d_g = fast.d.numpy(), general.d.numpy()
            assert np.abs(d_f - d_g).max() <= 1e-8 * (1 + np.abs(d_g).max())
            Jd = (J @ fast.d).numpy()
            assert np.all(Jd <= hi.numpy() + 1e-8 * (1 + np.abs(hi.numpy())))


def test_scalar_path_leaves_the_hard_cases_to_the_general_path():
    g, h = torch.tensor([1.0, -2.0, 0.5], dtype=torch.float64), torch.ones(3, dtype=torch.float64)
    J = torch.tensor([[1.0, 0.0, 1.0], [0.0, 1.0, 1.0]], dtype=torch.float64)
    lo, hi = torch.tensor([-1.0, -math.inf], dtype=torch.float64), torch.tensor([1.0, 0.5], dtype=torch.float64)
    assert solve_scalar(g, h, J, lo, hi, 1e-9, 1e-10, PRIMAL_SLACK) is not None  # the plain case
    cases = {
        "a repeated row": (g, h, torch.cat([J, J[:1]]), torch.cat([lo, lo[:1]]), torch.cat([hi, hi[:1]])),
        "five rows": (g, h, torch.eye(5, 3, dtype=torch.float64) + 0.1, torch.full((5,), -1.0, dtype=torch.float64),
                      torch.full((5,), math.inf, dtype=torch.float64)),
        # four two-sided rows: 81 candidate active sets, more than MAX_CANDIDATES
        "81 candidates": (torch.randn(6, dtype=torch.float64), torch.ones(6, dtype=torch.float64),
                          torch.eye(4, 6, dtype=torch.float64), torch.full((4,), -1.0, dtype=torch.float64),
                          torch.ones(4, dtype=torch.float64)),
        "equality": (g, h, J, torch.tensor([0.2, -1.0], dtype=torch.float64),
                     torch.tensor([0.2, 0.5], dtype=torch.float64)),
        "zero row": (g, h, torch.tensor([[1.0, 0.0, 1.0], [0.0, 0.0, 0.0]], dtype=torch.float64), lo, hi),
        "parallel rows": (g, h, torch.stack([J[0], 2 * J[0]]), lo, hi),
        "NaN in g": (torch.tensor([math.nan, 0.0, 0.0], dtype=torch.float64), h, J, lo, hi),
        "h = 0": (g, torch.tensor([1.0, 0.0, 1.0], dtype=torch.float64), J, lo, hi),
        "h = inf": (g, torch.tensor([1.0, math.inf, 1.0], dtype=torch.float64), J, lo, hi),
        "inf in J": (g, h, torch.tensor([[1.0, 0.0, math.inf], [0.0, 1.0, 1.0]], dtype=torch.float64), lo, hi),
        "lo > hi": (g, h, J, torch.tensor([2.0, -math.inf], dtype=torch.float64), hi),
        # two rows can only conflict when parallel: J0 d >= 1 and -J0 d >= 1
        "infeasible": (g, h, torch.stack([J[0], -J[0]]), torch.tensor([1.0, 1.0], dtype=torch.float64),
                       torch.tensor([math.inf, math.inf], dtype=torch.float64)),
        "numpy input": tuple(t.numpy() for t in (g, h, J, lo, hi)),
    }
    for name, args in cases.items():
        assert solve_scalar(*args, 1e-9, 1e-10, PRIMAL_SLACK) is None, name
        assert solve_scalar(*args, 1e-9, 1e-10, PRIMAL_SLACK, multipliers_only=True) is None, name
    # the general path still answers (or raises) as before
    assert diagonal_qp(*cases["parallel rows"]).method == "dual"
    assert diagonal_qp(*cases["infeasible"]).status == "infeasible"
    with pytest.raises(ValueError, match="g: contains NaN"):
        diagonal_qp(*cases["NaN in g"])
    with pytest.raises(ValueError, match="lo/hi"):
        diagonal_qp(*cases["lo > hi"])
    with pytest.raises(ValueError, match="h: contains an infinite value"):
        diagonal_qp(*cases["h = inf"], multipliers_only=True)


def test_multipliers_only_gives_the_full_solutions_multipliers(random_problems):
    """``multipliers_only=True``: the same multipliers, active set and degeneracy as the full solution; on
    the scalar path without ``d`` (NaN objective, residual and violation), elsewhere with it."""
    scalar = general = 0
    for prob in random_problems[:200]:
        full = diagonal_qp(*prob.tensors())
        only = diagonal_qp(*prob.tensors(), multipliers_only=True)
        assert only.status == full.status
        if full.status != "optimal":
            continue
        assert torch.equal(only.multipliers, full.multipliers) and torch.equal(only.active, full.active)
        assert only.degenerate == full.degenerate and only.method == full.method
        if only.d is None:
            scalar += 1
            assert prob.J.shape[0] <= SCALAR_MAX_ROWS
            assert math.isnan(only.objective) and math.isnan(only.kkt_residual) and math.isnan(only.max_violation)
        else:
            general += 1
            assert torch.equal(only.d, full.d)
    assert scalar >= 20 and general >= 20, (scalar, general)


def test_osqp_path_matches_active_set(random_problems):
    """solver="osqp" returns the same QPResult contents (multipliers in the same convention)."""
    for prob in random_problems[:40]:
        exact = diagonal_qp(*prob.tensors())
        osqp = diagonal_qp(*prob.tensors(), solver="osqp", tol=1e-10)
        assert osqp.status == "optimal" and osqp.method == "osqp"
        assert_objective_close(osqp.objective, exact.objective)
        assert np.abs(osqp.d.numpy() - exact.d.numpy()).max() <= 1e-5 * (1 + np.abs(exact.d.numpy()).max())
        if not exact.degenerate:
            y_o, y_x = osqp.multipliers.numpy(), exact.multipliers.numpy()
            assert np.abs(y_o - y_x).max() <= 1e-4 * (1 + np.abs(y_x).max())


# --------------------------------------------------------------------------------------
# Hand-computed and constructed solutions
# --------------------------------------------------------------------------------------
def test_hand_computed_example_and_sign_convention():
    """min -2 d1 + |d|^2/2: unconstrained d = (2, 0). With d1 <= 1: d = (1, 0), y = +1 (upper);
    with d1 >= 3: d = (3, 0), y = -1 (lower); with d1 == 1.5: d = (1.5, 0), y = 0.5."""
    g, h, J = torch.tensor([-2.0, 0.0]), torch.ones(2), torch.tensor([[1.0, 0.0]])
    inf = float("inf")
    for lo, hi, d1, y, side in ((-inf, 1.0, 1.0, 1.0, 1), (3.0, inf, 3.0, -1.0, -1), (1.5, 1.5, 1.5, 0.5, 1)):
        for solver in ("enumeration", "dual", "osqp"):
            res = diagonal_qp(g, h, J, torch.tensor([lo]), torch.tensor([hi]), solver=solver, tol=1e-10)
            assert res.status == "optimal"
            assert res.d.tolist() == pytest.approx([d1, 0.0], abs=1e-8)
            assert res.multipliers.item() == pytest.approx(y, abs=1e-8)
            assert res.active.tolist() == [side]
            assert res.objective == pytest.approx(-2 * d1 + 0.5 * d1**2, abs=1e-8)
    res = diagonal_qp(g, h, J, torch.tensor([-inf]), torch.tensor([5.0]))  # inactive
    assert res.d.tolist() == pytest.approx([2.0, 0.0]) and res.multipliers.item() == 0.0
    assert res.active.tolist() == [0]


def constructed_problem(rng, m: int, p: int, signs: np.ndarray) -> tuple[Problem, np.ndarray, np.ndarray]:
    """All rows active at a known optimum: pick d*, y* with sign pattern ``signs``, set each
    row's active bound to J_i d* (the other side loose) and g = -h d* - J'y* (stationarity)."""
    J = rng.normal(size=(m, p))
    h = rng.uniform(0.5, 20.0, p)
    d_star = rng.normal(size=p)
    y_star = signs * rng.uniform(0.5, 2.0, m)
    w = J @ d_star
    lo = np.where(signs < 0, w, w - 1.0)
    hi = np.where(signs > 0, w, w + 1.0)
    g = -h * d_star - J.T @ y_star
    return Problem(g, h, J, lo, hi), d_star, y_star


@pytest.mark.parametrize("m,p", [(3, 10), (6, 6), (9, 5)])
@pytest.mark.parametrize("solver", ["active_set", "enumeration", "dual"])
def test_all_rows_active_known_solution(m, p, solver):
    """m < p, m == p (a vertex) and m > p (a degenerate vertex: rows dependent)."""
    rng = np.random.default_rng(m * 100 + p)
    prob, d_star, y_star = constructed_problem(rng, m, p, rng.choice([-1.0, 1.0], m))
    res = diagonal_qp(*prob.tensors(), solver=solver)
    assert_kkt(prob, res)
    assert np.abs(res.d.numpy() - d_star).max() <= 1e-8 * (1 + np.abs(d_star).max())
    assert res.objective == pytest.approx(prob.objective(d_star), rel=1e-10)
    assert res.degenerate == (m > p)
    if m <= p:  # LICQ holds: the multipliers are unique
        assert np.abs(res.multipliers.numpy() - y_star).max() <= 1e-7 * (1 + np.abs(y_star).max())


@pytest.mark.parametrize("solver", ["enumeration", "dual", "osqp"])
def test_duplicated_rows_both_active(solver):
    """Two identical rows with identical upper bounds: d unique, multipliers shared, degenerate."""
    rng = np.random.default_rng(1)
    prob, _, _ = constructed_problem(rng, 3, 8, np.array([1.0, -1.0, 1.0]))
    prob = Problem(prob.g, prob.h, np.vstack([prob.J, prob.J[0]]), np.append(prob.lo, prob.lo[0]),
                   np.append(prob.hi, prob.hi[0]))
    res = diagonal_qp(*prob.tensors(), solver=solver, tol=1e-10)
    assert_kkt(prob, res, atol=1e-7)
    assert res.degenerate
    assert_objective_close(res.objective, prob.objective(qpsolvers_reference(prob, "clarabel")))


@pytest.mark.parametrize("solver", ["enumeration", "dual"])
def test_row_that_combines_others(solver):
    """Row 3 = row 1 + 2 row 2 with a bound that is consistent and binding."""
    rng = np.random.default_rng(2)
    prob, d_star, _ = constructed_problem(rng, 2, 7, np.array([1.0, 1.0]))
    row = prob.J[0] + 2 * prob.J[1]
    prob = Problem(prob.g, prob.h, np.vstack([prob.J, row]), np.append(prob.lo, -np.inf),
                   np.append(prob.hi, row @ d_star))
    res = diagonal_qp(*prob.tensors(), solver=solver)
    assert_kkt(prob, res)
    assert res.degenerate
    assert np.abs(res.d.numpy() - d_star).max() <= 1e-8 * (1 + np.abs(d_star).max())


def test_redundant_equalities_with_more_rows_than_variables():
    """8 consistent equalities in 4 variables: the solution is the unique feasible point."""
    rng = np.random.default_rng(3)
    J = rng.normal(size=(8, 4))
    d_f = rng.normal(size=4)
    prob = Problem(rng.normal(size=4), rng.uniform(0.5, 20, 4), J, J @ d_f, J @ d_f)
    for solver in ("active_set", "enumeration", "dual"):
        res = diagonal_qp(*prob.tensors(), solver=solver)
        assert_kkt(prob, res)
        assert np.abs(res.d.numpy() - d_f).max() <= 1e-8 * (1 + np.abs(d_f).max())
        assert res.degenerate


def test_zero_row_that_is_satisfied_is_ignored():
    rng = np.random.default_rng(4)
    prob = random_problem(rng, m=3, p=10)
    J = prob.J.copy()
    J[1] = 0.0
    prob = Problem(prob.g, prob.h, J, np.array([prob.lo[0], -1.0, prob.lo[2]]), np.array([prob.hi[0], 2.0, prob.hi[2]]))
    res = diagonal_qp(*prob.tensors())
    assert_kkt(prob, res)
    assert res.multipliers[1].item() == 0.0
    assert_objective_close(res.objective, prob.objective(qpsolvers_reference(prob, "clarabel")))


def test_no_constraints_and_free_rows():
    rng = np.random.default_rng(5)
    g, h = rng.normal(size=6), rng.uniform(0.5, 20, 6)
    no_rows = torch.zeros(0, 6, dtype=torch.float64)
    res = diagonal_qp(torch.tensor(g), torch.tensor(h), no_rows, torch.zeros(0), torch.zeros(0))
    assert res.status == "optimal" and np.allclose(res.d.numpy(), -g / h, rtol=1e-15)
    assert res.multipliers.shape == (0,) and res.kkt_residual <= 1e-15
    J = torch.tensor(rng.normal(size=(2, 6)))
    inf = torch.full((2,), float("inf"), dtype=torch.float64)
    res = diagonal_qp(torch.tensor(g), torch.tensor(h), J, -inf, inf)
    assert np.allclose(res.d.numpy(), -g / h, rtol=1e-15) and res.multipliers.abs().max().item() == 0.0


# --------------------------------------------------------------------------------------
# Infeasible systems
# --------------------------------------------------------------------------------------
def infeasible_problems() -> dict[str, Problem]:
    rng = np.random.default_rng(6)
    g, h = rng.normal(size=8), rng.uniform(0.5, 20, 8)
    J = rng.normal(size=(3, 8))
    inf = np.inf
    duplicate = Problem(g, h, np.vstack([J[0], J[0], J[1]]), np.array([-inf, 1.0, -1.0]), np.array([0.0, inf, 1.0]))
    zero = J.copy()
    zero[2] = 0.0
    zero_row = Problem(g, h, zero, np.array([-1.0, -1.0, 0.5]), np.array([1.0, 1.0, inf]))
    # row 3 = row 1 + row 2 but its bounds contradict theirs
    combo = Problem(g, h, np.vstack([J[0], J[1], J[0] + J[1]]), np.array([1.0, 1.0, -inf]), np.array([inf, inf, 1.0]))
    J10 = rng.normal(size=(10, 4))
    equalities = Problem(g[:4], h[:4], J10, b := rng.normal(size=10), b)
    return {"duplicate": duplicate, "zero_row": zero_row, "combination": combo, "equalities": equalities}


@pytest.mark.parametrize("name", ["duplicate", "zero_row", "combination", "equalities"])
@pytest.mark.parametrize("solver", ["active_set", "enumeration", "dual", "osqp"])
def test_infeasible_systems_are_reported(name, solver):
    prob = infeasible_problems()[name]
    res = diagonal_qp(*prob.tensors(), solver=solver)
    assert res.status == "infeasible"
    assert res.d is None and res.multipliers is None
    assert np.isnan(res.objective) and np.isnan(res.kkt_residual)
    assert res.active.tolist() == [0] * prob.J.shape[0]


# --------------------------------------------------------------------------------------
# dtype handling
# --------------------------------------------------------------------------------------
def test_float32_in_float32_out(random_problems):
    for prob in random_problems[:50]:
        res32 = diagonal_qp(*prob.tensors(torch.float32))
        assert res32.d.dtype == torch.float32 and res32.multipliers.dtype == torch.float32
        # the reference: the float32-rounded problem solved in float64
        rounded = Problem(*(t.double().numpy() for t in prob.tensors(torch.float32)))
        res64 = diagonal_qp(*rounded.tensors())
        assert_objective_close(res32.objective, res64.objective, rtol=1e-12)
        assert np.abs(res32.d.double().numpy() - res64.d.numpy()).max() <= 1e-6 * (1 + np.abs(res64.d.numpy()).max())
        assert res32.kkt_residual <= 1e-8 * (1 + np.abs(rounded.g).max())


def test_float64_result_dtype_and_numpy_inputs():
    rng = np.random.default_rng(7)
    prob = random_problem(rng, m=4, p=9)
    res = diagonal_qp(prob.g, prob.h, prob.J, prob.lo, prob.hi)  # numpy in -> float64 tensors
    assert res.d.dtype == torch.float64 and isinstance(res.d, torch.Tensor)
    assert_kkt(prob, res)


# --------------------------------------------------------------------------------------
# Validation
# --------------------------------------------------------------------------------------
def _ok_args():
    return (torch.zeros(3), torch.ones(3), torch.ones(2, 3), torch.tensor([-1.0, -1.0]), torch.tensor([1.0, 1.0]))


@pytest.mark.parametrize(
    "index,value,match",
    [
        (0, torch.tensor([0.0, float("nan"), 0.0]), "g: contains NaN"),
        (0, torch.zeros(4), "g: expected shape"),
        (1, torch.tensor([1.0, 0.0, 1.0]), r"h: must be > 0, got h\[1\]"),
        (1, torch.tensor([1.0, float("inf"), 1.0]), "h: contains an infinite"),
        (2, torch.ones(2, 4), "g: expected shape"),
        (2, torch.ones(3), "J: expected 2 dimension"),
        (2, torch.tensor([[1.0, float("nan"), 1.0], [1.0, 1.0, 1.0]]), "J: contains NaN"),
        (3, torch.tensor([-1.0]), r"lo: expected shape \(2,\)"),
        (3, torch.tensor([float("inf"), 0.0]), r"lo: lo\[0\] = \+inf"),
        (4, torch.tensor([1.0, float("-inf")]), r"hi: hi\[1\] = -inf"),
        (4, torch.tensor([1.0, float("nan")]), "hi: contains NaN"),
        (4, torch.tensor([1.0, -2.0]), r"lo/hi: lo\[1\] = -1.0 > hi\[1\] = -2.0 at row 1"),
    ],
)
def test_invalid_inputs_name_the_argument(index, value, match):
    args = list(_ok_args())
    args[index] = value
    with pytest.raises(ValueError, match=match):
        diagonal_qp(*args)


def test_invalid_options():
    with pytest.raises(ValueError, match="solver: expected one of"):
        diagonal_qp(*_ok_args(), solver="cvxpy")
    with pytest.raises(ValueError, match="tol: must be"):
        diagonal_qp(*_ok_args(), tol=0.0)
    with pytest.raises(ValueError, match="max_iter: must be"):
        diagonal_qp(*_ok_args(), max_iter=0)
    J = torch.randn(11, 3)
    with pytest.raises(ValueError, match="'enumeration' is limited to 10"):
        diagonal_qp(torch.zeros(3), torch.ones(3), J, -torch.ones(11), torch.ones(11), solver="enumeration")
    with pytest.raises(ValueError, match=r"lo/hi: lo\[0\]"):
        least_violation_bounds(torch.tensor([2.0]), torch.tensor([1.0]), torch.ones(1, 3), torch.ones(3))


# --------------------------------------------------------------------------------------
# Least-violation relaxation (infeasible linearisation)
# --------------------------------------------------------------------------------------
def p_space_least_violation(J: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> float:
    """Independent reference: min_v sum max(Jv - hi, 0) + max(lo - Jv, 0) as an LP in (v, s)."""
    p = J.shape[1]
    up, dn = np.flatnonzero(np.isfinite(hi)), np.flatnonzero(np.isfinite(lo))
    nu, nd = up.size, dn.size
    A = np.zeros((nu + nd, p + nu + nd))
    A[:nu, :p], A[:nu, p : p + nu] = J[up], -np.eye(nu)
    A[nu:, :p], A[nu:, p + nu :] = -J[dn], -np.eye(nd)
    c = np.concatenate([np.zeros(p), np.ones(nu + nd)])
    res = linprog(c, A_ub=A, b_ub=np.concatenate([hi[up], -lo[dn]]),
                  bounds=[(None, None)] * p + [(0, None)] * (nu + nd), method="highs")
    assert res.status == 0
    return float(res.fun)


def relaxation_cases() -> list[Problem]:
    cases = list(infeasible_problems().values())
    rng = np.random.default_rng(8)
    for _ in range(12):  # more rows than variables, random (inconsistent) bounds of all kinds
        p = int(rng.integers(3, 7))
        prob = random_problem(rng, m=int(rng.integers(p + 2, 13)), p=p)
        shift = rng.normal(size=prob.lo.size)
        cases.append(Problem(prob.g, prob.h, prob.J, prob.lo + shift, prob.hi + shift))
    return cases


@pytest.mark.parametrize("case", range(16))
def test_least_violation_relaxation(case):
    prob = relaxation_cases()[case]
    rb = least_violation_bounds(*(torch.tensor(a) for a in (prob.lo, prob.hi, prob.J, prob.h)))
    reference = p_space_least_violation(prob.J, prob.lo, prob.hi)
    assert rb.violation == pytest.approx(reference, rel=1e-7, abs=1e-9)
    v, w = rb.v.numpy(), rb.w.numpy()
    assert np.allclose(w, prob.J @ v, rtol=1e-12, atol=1e-12)
    violation_of_v = np.maximum(w - prob.hi, 0) + np.maximum(prob.lo - w, 0)
    assert violation_of_v.sum() == pytest.approx(rb.violation, rel=1e-12, abs=1e-12)
    lo_r, hi_r = rb.lo.numpy(), rb.hi.numpy()
    assert np.all(lo_r <= prob.lo) and np.all(hi_r >= prob.hi)  # only relaxed
    # each violated side is relaxed to J v widened by the step accuracy; the others are kept
    # (a system feasible within the row tolerances keeps its bounds: nothing is relaxed)
    feasible = np.array_equal(lo_r, prob.lo) and np.array_equal(hi_r, prob.hi)
    margin = 0.0 if feasible else PRIMAL_SLACK * (1 + np.abs(w))
    if not feasible:
        np.testing.assert_allclose(lo_r, np.where(w < prob.lo, w - margin, prob.lo), rtol=1e-14, atol=1e-15)
        np.testing.assert_allclose(hi_r, np.where(w > prob.hi, w + margin, prob.hi), rtol=1e-14, atol=1e-15)
    has_lo, has_hi = np.isfinite(prob.lo), np.isfinite(prob.hi)
    relaxation = np.sum(prob.lo[has_lo] - lo_r[has_lo]) + np.sum(hi_r[has_hi] - prob.hi[has_hi])
    margin = np.broadcast_to(margin, w.shape)
    widened = margin[has_lo & (w < prob.lo)].sum() + margin[has_hi & (w > prob.hi)].sum()
    assert relaxation == pytest.approx(rb.violation + widened, rel=1e-9, abs=1e-12)
    res = diagonal_qp(torch.tensor(prob.g), torch.tensor(prob.h), torch.tensor(prob.J), rb.lo, rb.hi)
    relaxed = Problem(prob.g, prob.h, prob.J, lo_r, hi_r)
    assert_kkt(relaxed, res)
    if case < 4:  # the infeasible originals really are infeasible
        assert rb.violation > 0.1
    if reference > 1e-6:  # the relaxed bounds are needed: the original QP is infeasible
        assert diagonal_qp(*prob.tensors()).status == "infeasible"


def test_relaxation_cases_are_mostly_infeasible():
    infeasible = [p_space_least_violation(prob.J, prob.lo, prob.hi) > 1e-6 for prob in relaxation_cases()]
    assert sum(infeasible) >= 10


def test_least_violation_on_feasible_system_changes_nothing(random_problems):
    for prob in random_problems[:10]:
        rb = least_violation_bounds(*(torch.tensor(a) for a in (prob.lo, prob.hi, prob.J, prob.h)))
        assert rb.violation <= 1e-9
        assert torch.equal(rb.lo, torch.tensor(prob.lo)) and torch.equal(rb.hi, torch.tensor(prob.hi))


def test_least_violation_picks_the_smallest_move_for_duplicated_rows():
    """J_1 = J_2 with J_1 v <= 0 and J_2 v >= 1: any value in [0, 1] costs 1; v = 0 moves least."""
    prob = infeasible_problems()["duplicate"]
    rb = least_violation_bounds(*(torch.tensor(a) for a in (prob.lo, prob.hi, prob.J, prob.h)))
    assert rb.violation == pytest.approx(1.0, abs=1e-9)
    assert np.abs(rb.v.numpy()).max() <= 1e-9


def test_least_violation_float32_bounds_keep_the_relaxed_qp_feasible():
    prob = infeasible_problems()["combination"]
    args32 = [torch.tensor(a, dtype=torch.float32) for a in (prob.lo, prob.hi, prob.J, prob.h)]
    rb = least_violation_bounds(*args32)
    assert rb.lo.dtype == rb.hi.dtype == rb.v.dtype == torch.float32
    res = diagonal_qp(torch.tensor(prob.g, dtype=torch.float32), args32[3], args32[2], rb.lo, rb.hi)
    assert res.status == "optimal"


def test_relaxed_qp_whose_feasible_set_is_one_point_is_solved():
    """Four equalities in four variables, and an inconsistent fifth (with two ranges) that the
    relaxation widens: the relaxed feasible set is the least-violation step alone. The m-space check
    at the default ``tol`` accepted a vertex of the wrong working set (large multipliers of an
    ill-conditioned ``M``), whose step missed an equality by 8e-7; the QP must return the one
    feasible point, the solution of the four equalities (a reference independent of the solver)."""
    h = np.array([5.0632833904961467e+02, 1.5833325094789544e-01, 6.1041795200034997e+01, 1.2381613064259662e+02])
    g = np.array([-0.6797995242538636, -0.1075841727576968, 0.8639612390332333, 0.355499629576138])
    J = np.array([
        [1.6432644673594121e+00, -1.5318640965490442e+00, 9.0575790445835205e-02, -2.6730966487742336e+00],
        [7.0285497741526326e-01, 5.0290251027994459e-01, -1.9771422890989410e-01, -1.1480494680787672e+00],
        [1.0219629907872003e+00, -2.7115841330799079e-01, 5.1621691164662598e-01, 2.1031630729675216e-01],
        [1.1306324568508272e+00, 3.1730519856033063e-01, -2.5128755389421470e-01, -2.0228040503944831e+00],
        [6.5309546857604139e-01, 1.1461297019370562e+00, -1.2206087808898711e+00, -3.8835167757843436e-01],
        [8.5671012671840996e-01, 8.0721583883465176e-01, 6.5819066446969610e-01, -5.6227180661183707e-01],
        [1.1144577671426974e+00, 2.2219786726352421e-03, 5.2265152914779989e-01, 8.9109880419035314e-01]])
    b = np.array([4.48094048049456, 0.19319682720660047, -0.006534185310582086, 0.9836125803093583,
                  -0.2586425606007408, -1.014034809609289, 0.30822582024479617])
    lo, hi = b.copy(), b.copy()
    hi[2] = np.inf  # row 2 is a lower bound; the other six rows are equalities
    tensors = [torch.tensor(a) for a in (g, h, J, lo, hi)]
    assert diagonal_qp(*tensors).status == "infeasible"
    rb = least_violation_bounds(tensors[3], tensors[4], tensors[2], tensors[1])
    equalities = [0, 4, 5, 6]  # kept by the relaxation (the least violation widens rows 1 and 3)
    assert np.allclose(rb.lo.numpy()[equalities], b[equalities]) and np.allclose(rb.hi.numpy()[equalities],
                                                                                 b[equalities])
    point = np.linalg.solve(J[equalities], b[equalities])
    res = diagonal_qp(*tensors[:3], rb.lo, rb.hi)
    assert res.status == "optimal"
    assert np.allclose(res.d.numpy(), point, atol=1e-8)
    assert res.max_violation <= PRIMAL_SLACK


# --------------------------------------------------------------------------------------
# Least violation with rank-deficient Jacobians: bounded by construction, with a fallback
# --------------------------------------------------------------------------------------
def _lv_args(prob: Problem) -> tuple[torch.Tensor, ...]:
    return tuple(torch.tensor(a) for a in (prob.lo, prob.hi, prob.J, prob.h))


def rank_deficient_problems() -> dict[str, Problem]:
    """Valid inputs (lo <= hi) whose Jacobian has dependent, duplicated or zero rows."""
    inf = np.inf
    rng = np.random.default_rng(21)
    # 4 rows in a 2-dimensional span (rounded products C @ B) with an equality row: the
    # LP in the multipliers was reported unbounded by HiGHS (status 3) on these inputs.
    hs_unbounded = Problem(
        np.zeros(4),
        np.array([1.4244935206182383, 0.6652313647989295, 0.40987387419838744, 0.29300855443339824]),
        np.array([
            [-3.207257848945335, -4.198400586319616, -8.77474273193724, 4.209268983971649],
            [-2.594796176222493, -7.140537485680349, -10.867890678569607, 5.9464539865325845],
            [2.8700959412302818, 3.7483649199295286, 7.843562864514963, -3.7608796665120696],
            [-3.724229263171648, 6.641093571671538, 1.4037380983155132, -2.9283974347485624],
        ]),
        np.array([-inf, -inf, 0.01320031296789516, -inf]),
        np.array([-0.13328179580257582, 0.42619903858355285, 0.01320031296789516, 0.9561156066535612]),
    )
    a = rng.normal(size=5)
    identical = Problem(np.zeros(5), np.ones(5), np.vstack([a, a]), np.array([1.0, -inf]), np.array([inf, 0.0]))
    triple = Problem(np.zeros(5), rng.uniform(0.5, 2, 5), np.vstack([a, a, 2 * a]), np.array([1.0, -1.0, 0.5]),
                     np.array([1.0, -1.0, 0.5]))
    J_zero = np.vstack([a, np.zeros(5), -a, np.zeros(5)])
    zero_rows = Problem(np.zeros(5), np.ones(5), J_zero, np.array([0.5, 0.25, 0.5, -inf]),
                        np.array([1.0, inf, 1.0, -2.0]))
    # intersectional pairwise rows: rate_a - rate_b for every ordered pair of 4 groups (rank 3)
    rates, offsets = rng.normal(size=(4, 6)), rng.normal(size=4)
    pairs = [(i, k) for i in range(4) for k in range(4) if i != k]
    J_pairs = np.array([rates[i] - rates[k] for i, k in pairs])
    c = np.array([offsets[i] - offsets[k] for i, k in pairs]) + 0.3 * rng.normal(size=len(pairs))
    pairwise = Problem(np.zeros(6), rng.uniform(0.1, 10, 6), J_pairs, -0.01 - c, 0.01 - c)
    return {"hs_unbounded": hs_unbounded, "identical": identical, "triple": triple, "zero_rows": zero_rows,
            "pairwise": pairwise}


def random_rank_deficient(seed: int) -> Problem:
    """J = C B of rank r < m (some rows zero, some integer combinations), scales 10^+-1."""
    rng = np.random.default_rng(seed)
    p = int(rng.integers(2, 8))
    r, m = int(rng.integers(1, p + 1)), int(rng.integers(p + 1, 12))
    B = rng.normal(size=(r, p)) * 10.0 ** rng.uniform(-1, 1)
    C = rng.normal(size=(m, r))
    C[rng.random(m) < 0.2] = 0.0
    if rng.random() < 0.5:
        C = np.round(C)
    c = rng.normal(size=m) * 10.0 ** rng.integers(-3, 3)
    lo, hi = c - rng.uniform(0, 1, m), c + rng.uniform(0, 1, m)
    kind = rng.random(m)
    lo[kind < 0.3], hi[(kind > 0.3) & (kind < 0.6)] = -np.inf, np.inf
    eq = rng.random(m) < 0.1
    lo[eq] = hi[eq] = c[eq]
    return Problem(rng.normal(size=p), 10.0 ** rng.uniform(-1, 1, p), C @ B, lo, hi)


def assert_valid_relaxation(prob: Problem, rb) -> None:
    """Finite, only relaxed, reached by v, and the relaxed QP (with the problem's g) is optimal."""
    lo_r, hi_r, v = rb.lo.numpy(), rb.hi.numpy(), rb.v.numpy()
    assert np.isfinite(v).all() and np.isfinite(rb.violation)
    assert np.all(lo_r <= prob.lo) and np.all(hi_r >= prob.hi)
    w = prob.J @ v
    assert np.all(lo_r <= w + 1e-9 * (1 + np.abs(w))) and np.all(w <= hi_r + 1e-9 * (1 + np.abs(w)))
    res = diagonal_qp(torch.tensor(prob.g), torch.tensor(prob.h), torch.tensor(prob.J), rb.lo, rb.hi)
    assert res.status == "optimal"
    assert np.isfinite(res.d.numpy()).all()


@pytest.mark.parametrize("name", ["hs_unbounded", "identical", "triple", "zero_rows", "pairwise"])
def test_least_violation_with_rank_deficient_jacobian_is_finite(name):
    prob = rank_deficient_problems()[name]
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the LP is solved: no fallback warning
        rb = least_violation_bounds(*_lv_args(prob))
    assert_valid_relaxation(prob, rb)
    reference = p_space_least_violation(prob.J, prob.lo, prob.hi)
    assert reference > 1e-3  # every case is infeasible
    assert rb.violation == pytest.approx(reference, rel=1e-7, abs=1e-9)


def test_least_violation_of_hand_computed_rank_deficient_cases():
    """Exact values, up to the documented slack of the least-move LP (tol * sum of row scales)."""
    probs = rank_deficient_problems()
    # a v >= 1 and a v <= 0: any value in [0, 1] costs 1
    assert least_violation_bounds(*_lv_args(probs["identical"])).violation == pytest.approx(1.0, abs=1e-7)
    # a v = 1, a v = -1, 2 a v = 0.5: the l1 optimum is a v = t in [-1, 1] costing 2 + |2t - 0.5| -> 2
    assert least_violation_bounds(*_lv_args(probs["triple"])).violation == pytest.approx(2.0, abs=1e-7)
    # a v in [0.5, 1], -a v in [0.5, 1] (cost 1 at best), zero rows 0 >= 0.25 and 0 <= -2 (cost 2.25)
    assert least_violation_bounds(*_lv_args(probs["zero_rows"])).violation == pytest.approx(3.25, abs=1e-7)


@pytest.mark.parametrize("seed", range(40))
def test_least_violation_matches_scipy_linprog_on_random_rank_deficient_systems(seed):
    prob = random_rank_deficient(seed)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        rb = least_violation_bounds(*_lv_args(prob))
    reference = p_space_least_violation(prob.J, prob.lo, prob.hi)
    assert rb.violation == pytest.approx(reference, rel=1e-6, abs=1e-6)
    assert_valid_relaxation(prob, rb)


def test_random_rank_deficient_systems_are_rank_deficient_and_mostly_infeasible():
    probs = [random_rank_deficient(seed) for seed in range(40)]
    assert all(np.linalg.matrix_rank(prob.J) < prob.J.shape[0] for prob in probs)
    assert sum(p_space_least_violation(prob.J, prob.lo, prob.hi) > 1e-6 for prob in probs) >= 20


class _FailedLP:
    status = 4
    message = "forced failure for the test"


def test_least_violation_falls_back_to_the_zero_step_when_the_lp_fails(monkeypatch):
    import solvers.qp.lp as qp

    monkeypatch.setattr(qp, "linprog", lambda *args, **kwargs: _FailedLP())
    for prob in [*rank_deficient_problems().values(), random_rank_deficient(3)]:
        with pytest.warns(qp.LeastViolationWarning, match=r"LP failed .*forced failure.*zero step"):
            rb = least_violation_bounds(*_lv_args(prob))
        lo_r, hi_r = rb.lo.numpy(), rb.hi.numpy()
        assert np.array_equal(lo_r, np.minimum(prob.lo, 0.0)) and np.array_equal(hi_r, np.maximum(prob.hi, 0.0))
        assert np.all(lo_r <= 0.0) and np.all(hi_r >= 0.0)  # the zero step is feasible
        assert not rb.v.any() and not rb.w.any()
        violation_at_zero = np.sum(np.maximum(-prob.hi, 0.0) + np.maximum(prob.lo, 0.0))
        assert rb.violation == pytest.approx(violation_at_zero)
        assert_valid_relaxation(prob, rb)


def test_least_violation_fallback_keeps_a_narrow_output_dtype(monkeypatch):
    import solvers.qp.lp as qp

    monkeypatch.setattr(qp, "linprog", lambda *args, **kwargs: _FailedLP())
    prob = rank_deficient_problems()["pairwise"]
    lo32, hi32, J32, h32 = (torch.tensor(a, dtype=torch.float32) for a in (prob.lo, prob.hi, prob.J, prob.h))
    with pytest.warns(qp.LeastViolationWarning):
        rb = least_violation_bounds(lo32, hi32, J32, h32)
    assert rb.lo.dtype == rb.hi.dtype == rb.v.dtype == torch.float32
    assert torch.all(rb.lo <= 0) and torch.all(rb.hi >= 0)
    assert torch.all(rb.lo <= lo32) and torch.all(rb.hi >= hi32)


def test_failed_least_move_lp_keeps_the_least_violation(monkeypatch):
    """Only the second LP (least move) fails: the first LP's point is used, silently."""
    import solvers.qp.lp as qp

    calls = []

    def first_call_only(*args, **kwargs):
        calls.append(1)
        return linprog(*args, **kwargs) if len(calls) == 1 else _FailedLP()

    monkeypatch.setattr(qp, "linprog", first_call_only)
    prob = rank_deficient_problems()["pairwise"]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        rb = least_violation_bounds(*_lv_args(prob))
    assert len(calls) >= 2
    assert rb.violation == pytest.approx(p_space_least_violation(prob.J, prob.lo, prob.hi), rel=1e-7, abs=1e-9)
    assert_valid_relaxation(prob, rb)


def test_failed_confirmation_lp_reports_numerical_instead_of_raising(monkeypatch):
    import solvers.qp.lp as qp

    monkeypatch.setattr(qp, "linprog", lambda *args, **kwargs: _FailedLP())
    res = diagonal_qp(*infeasible_problems()["duplicate"].tensors(), solver="dual")
    assert res.status == "numerical" and res.d is None


def test_least_violation_box_grows_until_it_no_longer_binds(monkeypatch):
    import solvers.qp.lp as qp

    prob = rank_deficient_problems()["hs_unbounded"]
    reference = p_space_least_violation(prob.J, prob.lo, prob.hi)
    monkeypatch.setattr(qp, "_BOX_SCALE", 1e-7)  # 1e-7 -> 1e2 after three enlargements
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        rb = least_violation_bounds(*_lv_args(prob))
    assert rb.violation == pytest.approx(reference, rel=1e-7, abs=1e-9)


def test_least_violation_box_that_still_binds_warns_and_stays_valid(monkeypatch):
    import solvers.qp.lp as qp

    prob = rank_deficient_problems()["hs_unbounded"]
    reference = p_space_least_violation(prob.J, prob.lo, prob.hi)
    monkeypatch.setattr(qp, "_BOX_SCALE", 1e-7)
    monkeypatch.setattr(qp, "_MAX_BOX_ENLARGEMENTS", 0)
    with pytest.warns(qp.LeastViolationWarning, match="still bound after 0 enlargements"):
        rb = least_violation_bounds(*_lv_args(prob))
    assert rb.violation > reference + 1e-3  # not the least: the box kept the LP near w = 0
    assert_valid_relaxation(prob, rb)


def _soak_cases() -> list[Problem]:
    path = Path(__file__).parent / "data" / "inconsistent_equality_qps.json"
    cases = json.loads(path.read_text())
    return [Problem(*(np.array(c[k], dtype=float) for k in ("g", "h", "J", "lo", "hi"))) for c in cases]


@pytest.mark.parametrize("case", range(2))
def test_relaxed_step_meets_relaxed_bounds_within_stated_accuracy(case):
    """Regression (soak, seed 0, QPs 4068 and 7676): more inconsistent equalities than
    variables. Relaxed exactly to ``J v``, ``v`` was a degenerate vertex and the relaxed QP's
    step missed a touching row by 1.6x the accuracy ``diagonal_qp`` states, with status
    "optimal" (its check summed both sides' bounds). Every side must now be met within
    ``base_tol + PRIMAL_SLACK (1 + |bound|)``."""
    prob = _soak_cases()[case]
    t = prob.tensors()
    rb = least_violation_bounds(t[3], t[4], t[2], t[1])
    res = diagonal_qp(*t[:3], rb.lo, rb.hi)
    assert res.status == "optimal"
    lo_r, hi_r = rb.lo.numpy(), rb.hi.numpy()
    w = prob.J @ res.d.numpy()
    q = prob.J @ (prob.g / prob.h)
    finite = lambda a: np.where(np.isfinite(a), a, 0.0)
    base = 1e-9 * (1 + np.abs(q) + np.maximum(np.abs(finite(lo_r)), np.abs(finite(hi_r))))
    below = np.where(np.isfinite(lo_r), lo_r - w - PRIMAL_SLACK * (1 + np.abs(finite(lo_r))), -np.inf)
    above = np.where(np.isfinite(hi_r), w - hi_r - PRIMAL_SLACK * (1 + np.abs(finite(hi_r))), -np.inf)
    assert np.all(np.maximum(below, above) <= base)


def test_failed_qp_after_the_refined_solves_reports_every_solves_iterations(monkeypatch):
    """When the m-space step misses a row, the QP is solved again at tighter tolerances; when those
    steps miss too and the LP confirms infeasibility, the failed result counts the dual method's
    iterations of every solve (the row check and the LP forced here, on a small feasible QP)."""
    import solvers.qp.solve as qp_solve

    calls = []
    original = qp_solve.solve_space

    def counted(*args, **kwargs):
        sol = original(*args, **kwargs)
        calls.append(sol.iterations)
        return sol

    monkeypatch.setattr(qp_solve, "solve_space", counted)
    monkeypatch.setattr(qp_solve, "_primal_step_feasible", lambda *args: False)
    monkeypatch.setattr(qp_solve, "confirm_infeasible", lambda space: True)
    g = torch.tensor([1.0, -2.0, 0.5])
    h = torch.tensor([1.0, 2.0, 4.0])
    J = torch.tensor([[1.0, 1.0, 0.0], [0.0, 1.0, -1.0]], dtype=torch.float64)
    res = diagonal_qp(g.double(), h.double(), J, torch.tensor([-0.5, -0.2], dtype=torch.float64),
                      torch.tensor([0.1, 0.3], dtype=torch.float64), solver="dual")
    assert res.status == "infeasible" and len(calls) == 1 + len(qp_solve.REFINED_TOL_FACTORS)
    assert res.iterations == sum(calls) and calls[1] > 0


def test_a_relaxed_point_like_feasible_set_is_solved_after_a_second_tightening():
    """Soak seed 15, QP 6531: an infeasible combination of 12 rows in 5 variables, relaxed by the least-violation
    LP, leaves a feasible set about one point wide where rows of norms 0.13 to 62 meet (curvatures 0.3 to 693). The
    dual method's step at tol and at tol / 100 missed a row and OSQP gave no solution: "numerical". A second
    tightening (tol / 10^4) finds it, within the stated accuracy; Clarabel agrees on the objective."""
    inf = np.inf
    g = np.array([-0.4043131309797702 ,  0.16162095967705079, -2.3247752897121665 , -0.5040765545110615 ,
           -0.12242906692250892])
    h = np.array([1.8602708105962189e+00, 3.0877508701358747e-01, 6.9321287620513965e+02, 4.5729672805427889e+01,
           4.7205405428132963e+01])
    J = np.array([[ 8.6248267650816390e-01,  5.4535622882813761e-01, -4.8928000622225198e-01,
            -1.3252447180586416e-01, -3.2826051198801681e-01],
           [ 1.2452406178307356e+00, -6.8734110879454413e-01, -3.4239173127035938e-01,
             1.2458695788626855e+00,  7.7087391845704389e-01],
           [ 3.3642270089416265e+01,  4.2145058169941041e-01, -3.5974689366203378e+01,
            -1.1797406073128169e+01,  2.5530558197805558e+01],
           [-6.4122229863011553e+00, -1.6224025990242377e+00,  5.2493520799684292e+00,
            -4.1766576810559721e+00, -2.5828772457098030e+00],
           [-6.0128395887268411e+00, -4.3257940009078943e+00,  4.1696360773893044e+00,
            -8.0144405899886051e-01, -2.4461372084191821e+00],
           [ 3.8275794132257168e-01, -1.2326973376226817e+00,  1.4688827495189263e-01,
             1.3783940506685497e+00,  1.0991344304450608e+00],
           [ 6.1969247033903496e+00, -2.3128789485500953e+01, -1.4840592828553211e+01,
             1.7368261124684125e+01,  5.2518805110983877e+01],
           [ 4.1048972602512936e+00, -2.7785691709716744e+01, -1.1097414884432775e+01,
             3.4690738859186226e+01,  1.4054259837791248e+00],
           [ 3.3550108137140697e+01, -6.5197187255958411e-02, -3.6052090126352041e+01,
            -1.1804207550395391e+01,  2.5105974022952505e+01],
           [ 1.2726850392801397e+00, -4.7500438949585027e+00, -3.0478667034011995e+00,
             3.5669831649887591e+00,  1.0785978649869712e+01],
           [-4.7788950746718337e-02, -2.5234259569578987e-01, -4.0134795576411086e-02,
            -3.5267857733345051e-03, -2.2016061638125065e-01],
           [-9.9631370520064377e-02,  1.3300318344877606e-02,  4.2080808281614764e-02,
            -1.8280928011543830e-02,  7.5075796754603408e-02]])
    lo = np.array([-0.9478859563646648 ,                 -inf, 11.312037567904873  , -0.49258499892119756,
                           -inf, -2.272984537572532  , 14.536485467518181  ,                 -inf,
                           -inf,                 -inf, -0.3614270718180961 ,  0.03353568647267822])
    hi = np.array([                 inf, -2.8957719127293293 , 11.312038799140362  , -0.23071458332238573,
            0.8214369429947805 ,                  inf,                  inf,  3.5291955553217793 ,
           14.467876437018855  ,  3.6594982620262564 ,  0.14703844911551656,  0.1918643973709845 ])
    res = diagonal_qp(*(torch.tensor(a) for a in (g, h, J, lo, hi)))
    assert res.status == "optimal"
    d = res.d.numpy()
    w, q = J @ d, J @ (g / h)
    finite = lambda a: np.where(np.isfinite(a), a, 0.0)
    base = 1e-9 * (1 + np.abs(q) + np.maximum(np.abs(finite(lo)), np.abs(finite(hi))))
    below = np.where(np.isfinite(lo), lo - w - PRIMAL_SLACK * (1 + np.abs(finite(lo))), -np.inf)
    above = np.where(np.isfinite(hi), w - hi - PRIMAL_SLACK * (1 + np.abs(finite(hi))), -np.inf)
    assert np.all(np.maximum(below, above) <= base)
    x = qpsolvers_reference(Problem(g, h, J, lo, hi), "clarabel")
    if x is not None:
        f = lambda v: float(g @ v + 0.5 * v @ (h * v))
        assert abs(f(d) - f(x)) <= 1e-6 * max(1.0, abs(f(x)))
