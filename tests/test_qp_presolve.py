"""The QP presolve (:mod:`solvers.qp.presolve`): parallel rows merged, dependent equalities dropped.

Exact parity written as ratio rows at ``delta = 1`` (mirrored pairs) or pairwise between several groups
(dependent equalities), with Jacobians rounded through float32 as a model's are: the active-set path must
solve these QPs itself (no OSQP fallback), to the optimum of the equality system found independently, and the
multipliers it returns on the original rows must satisfy the KKT conditions there.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch

import solvers.qp.solve as qp_solve
from solvers.qp import diagonal_qp
from solvers.qp.presolve import reduce_rows
from solvers.qp.space import build_space, validate_inputs


def _group_gradients(rng: np.random.Generator, groups: int, p: int) -> np.ndarray:
    """Per-group rate gradients, rounded to float32 as a float32 model computes them."""
    return rng.normal(size=(groups, p)).astype(np.float32).astype(np.float64)


def _pairwise_parity(rng: np.random.Generator, groups: int = 5, p: int = 30, mirrored: bool = True):
    """``R_a - R_b = 0`` for every pair (the linearised rows ``-c <= J d <= -c``), as ratio rows at
    ``delta = 1`` (each pair twice, mirrored, one-sided) or as equalities. The rows are float32 differences
    of the group gradients: dependent only up to float32 rounding."""
    grads = _group_gradients(rng, groups, p)
    rates = rng.uniform(0.1, 0.5, size=groups).astype(np.float32).astype(np.float64)
    rows, values = [], []
    for a in range(groups):
        for b in range(a + 1, groups):
            rows.append((grads[a].astype(np.float32) - grads[b].astype(np.float32)).astype(np.float64))
            values.append(float(np.float32(rates[a]) - np.float32(rates[b])))
    J, c = np.array(rows), np.array(values)
    g = rng.normal(size=p)
    h = rng.uniform(0.5, 2.0, size=p)
    if not mirrored:
        return g, h, J, -c, -c
    J2 = np.repeat(J, 2, axis=0)
    J2[1::2] *= -1.0
    hi = np.repeat(-c, 2)
    hi[1::2] *= -1.0
    return g, h, J2, np.full(hi.size, -np.inf), hi


def _reference(g, h, A, b) -> np.ndarray:
    """The minimiser of ``g'd + 1/2 d'Hd`` on ``A d = b`` (``A`` of deficient rank, consistent): with
    ``d = -H^{-1}(g + A' lam)``, ``lam`` the least-squares solution of ``A H^{-1} A' lam = -A H^{-1} g - b``."""
    AH = A / h
    lam = np.linalg.lstsq(AH @ A.T, -(AH @ g) - b, rcond=1e-10)[0]
    return -(g + A.T @ lam) / h


def _no_osqp(monkeypatch) -> list:
    calls: list = []
    original = qp_solve.solve_with_osqp
    monkeypatch.setattr(qp_solve, "solve_with_osqp", lambda *a, **k: calls.append(1) or original(*a, **k))
    return calls


def _check_kkt(g, h, J, lo, hi, res, atol=1e-6) -> None:
    d, y = res.d.numpy(), res.multipliers.numpy()
    assert np.abs(g + h * d + J.T @ y).max() <= 1e-10 * (1 + np.abs(g).max())
    w = J @ d
    assert np.all(w <= hi + atol) and np.all(w >= lo - atol)
    upper, lower = y > 1e-9, y < -1e-9  # a multiplier sits on the side it is signed for
    assert np.all(np.abs(w[upper] - hi[upper]) <= atol) and np.all(np.abs(w[lower] - lo[lower]) <= atol)
    assert np.array_equal(np.sign(res.active.numpy()[upper | lower]), np.sign(y[upper | lower]))


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("mirrored", [True, False])
def test_exact_parity_between_groups_is_solved_by_the_active_set_path(seed, mirrored, monkeypatch):
    rng = np.random.default_rng(seed)
    g, h, J, lo, hi = _pairwise_parity(rng, groups=int(rng.integers(3, 6)), mirrored=mirrored)
    calls = _no_osqp(monkeypatch)
    res = diagonal_qp(*(torch.as_tensor(a) for a in (g, h, J, lo, hi)))
    assert res.status == "optimal" and res.method == "dual"
    assert not calls
    _check_kkt(g, h, J, lo, hi, res)
    x = _reference(g, h, J[::2] if mirrored else J, hi[::2] if mirrored else hi)
    objective = lambda d: float(g @ d + 0.5 * h @ (d * d))  # noqa: E731
    assert res.objective == pytest.approx(objective(x), rel=1e-6, abs=1e-8)
    assert np.abs(res.d.numpy() - x).max() <= 1e-5 * (1 + np.abs(x).max())


def test_one_sided_rows_that_repeat_with_a_scale_keep_the_tighter_side():
    """``J_1 = 2 J_0`` with ``J_0 d <= 1`` and ``J_1 d <= 1`` (i.e. ``J_0 d <= 0.5``): the tighter one binds
    and carries the multiplier, the looser one none."""
    g = np.array([-3.0, -1.0])
    h = np.ones(2)
    J = np.array([[1.0, 0.0], [2.0, 0.0], [0.0, 1.0], [0.0, 1.0]])
    lo = np.array([-np.inf, -np.inf, -np.inf, 0.5])
    hi = np.array([1.0, 1.0, 2.0, np.inf])
    res = diagonal_qp(*(torch.as_tensor(a) for a in (g, h, J, lo, hi)))
    assert res.status == "optimal"
    np.testing.assert_allclose(res.d.numpy(), [0.5, 1.0], atol=1e-12)
    y = res.multipliers.numpy()
    assert y[0] == 0.0 and y[1] == pytest.approx(1.25) and y[2] == 0.0 and y[3] == 0.0
    assert res.active.tolist() == [0, 1, 0, 0]
    _check_kkt(g, h, J, lo, hi, res, atol=1e-12)


def test_inconsistent_dependent_equalities_stay_infeasible():
    """Pairwise parity whose values do not add up (``c_ab + c_bc != c_ac`` by 1e-3): no step meets them,
    and the presolve must not hide it."""
    rng = np.random.default_rng(3)
    g, h, J, lo, hi = _pairwise_parity(rng, groups=4, mirrored=False)
    lo, hi = lo.copy(), hi.copy()
    lo[-1] += 1e-3
    hi[-1] += 1e-3
    res = diagonal_qp(*(torch.as_tensor(a) for a in (g, h, J, lo, hi)))
    assert res.status == "infeasible"


def test_rows_that_do_not_repeat_are_left_alone():
    """The common case (no parallel rows, at most one equality) is solved as given: no reduction."""
    rng = np.random.default_rng(0)
    for _ in range(20):
        m, p = int(rng.integers(2, 12)), int(rng.integers(2, 20))
        J = rng.normal(size=(m, p))
        lo, hi = np.full(m, -np.inf), rng.normal(size=m)
        inputs = validate_inputs(rng.normal(size=p), rng.uniform(0.5, 2, size=p), J, lo, hi)
        assert reduce_rows(inputs, build_space(inputs, inputs.lo, inputs.hi, 1e-9), 1e-10, 1e-7) is None


def test_a_negligible_row_does_not_size_the_least_violation_lp():
    """A Jacobian row at ``1e-19`` of the others (a surrogate saturated on every row of its groups) whose bound
    asks for ``J_i d = 0.5``: the least-violation LP sized its box for that row (``|z|`` of ``1e24`` in a fit under
    exact parity), and HiGHS ran for minutes. The row is a zero row of the range basis (its value 0 to that
    precision), the box is sized by the other rows, the row's violation 0.5 is relaxed and the others are kept."""
    from solvers.qp import least_violation_bounds
    from solvers.qp.lp import _initial_box_radius, range_basis

    rng = np.random.default_rng(5)
    p = 12
    J = rng.normal(size=(9, p)) * 1e-3
    J[4] *= 1e-16
    lo, hi = np.full(9, -np.inf), np.abs(rng.normal(size=9)) * 1e-3
    lo[4] = hi[4] = 0.5  # unreachable: J_4 d = 0.5 needs |d| ~ 1e19
    basis = range_basis((J / np.ones(p)) @ J.T).basis
    assert not basis[4].any() and np.abs(basis[np.arange(9) != 4]).max(axis=1).min() > 0
    assert _initial_box_radius(basis, lo, hi) < 1e9
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no LeastViolationWarning: the LP itself gave the least violation
        relaxed = least_violation_bounds(*(torch.as_tensor(a) for a in (lo, hi, J, np.ones(p))))
    assert relaxed.violation == pytest.approx(0.5, rel=1e-6)
    assert float(relaxed.lo[4]) <= 1e-9 and float(relaxed.hi[4]) == 0.5
    keep = np.arange(9) != 4
    np.testing.assert_array_equal(relaxed.hi.numpy()[keep], hi[keep])
    res = diagonal_qp(torch.as_tensor(rng.normal(size=p)), torch.ones(p, dtype=torch.float64), torch.as_tensor(J),
                      relaxed.lo, relaxed.hi)
    assert res.status == "optimal"
