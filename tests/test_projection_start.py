"""Warm starts of target projections and the fine GeDI rows of binary targets.

* ``project_targets(..., initial=...)``: a start changes the path, not the optimum (HiGHS
  with ``mip_gap=0``, OSQP and Gurobi against the cold solve); that the start reaches the
  solver is seen under a time limit too short for any search: HiGHS then returns the start
  (status ``time_limit``) where the cold solve has no point at all.
* :class:`solvers.MovingTargets` with ``warm_start=True`` hands each master the previous
  master's result.
* :meth:`GeDI.target_encoding` of a fine constraint on a binary task: checked by brute
  force (every 0/1 vector of 12 rows) against the least-squares coefficients computed with
  numpy, and on Adult/age, where the covariance equalities admit no 0/1 vector.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch

from fairopt.constraints.gedi import GeDI
from fairopt.data import FairData
from solvers import projection
from solvers.moving_targets import MovingTargets
from solvers.projection import ProjectionResult, project_targets


def binary_data(n: int, seed: int) -> FairData:
    rng = np.random.default_rng(seed)
    x = rng.normal(size=n)
    y = (rng.random(n) < 0.3 + 0.3 * (x > 0)).astype(float)
    return FairData.from_arrays(rng.normal(size=(n, 2)), y, {"x": x}, task="binary",
                                sensitive_kinds={"x": "continuous"})


def gedi_master(n: int = 300, seed: int = 0, degree: int = 3):
    data = binary_data(n, seed)
    constraint = GeDI("x", degree, bound=0.2, relative=True)
    constraint.setup(data)
    y = data.y.numpy().astype(float)
    rng = np.random.default_rng(seed + 1)
    p = np.where(rng.random(n) < 0.2, 1 - y, y)
    return data, [constraint.target_encoding(data)], p, y


def test_highs_start_is_used_and_keeps_the_optimum():
    _, enc, p, y = gedi_master()
    kwargs = dict(encodings=enc, loss="hamming", binary=True, backend="highs")
    first = project_targets([p, y], weights=[1.0, 1.0], mip_gap=0.0, **kwargs)
    cold = project_targets([p, y], weights=[1.0, 0.5], mip_gap=0.0, **kwargs)
    warm = project_targets([p, y], weights=[1.0, 0.5], mip_gap=0.0, initial=first, **kwargs)
    assert cold.status == warm.status == "optimal"
    assert warm.objective == pytest.approx(cold.objective, abs=1e-12)
    assert warm.max_violation < 1e-9
    # no time for any search: the cold solve has no point, the warm one returns its start
    with pytest.raises(RuntimeError, match="no feasible target vector"):
        project_targets([p, y], weights=[1.0, 0.5], time_limit=1e-9, **kwargs)
    started = project_targets([p, y], weights=[1.0, 0.5], time_limit=1e-9, initial=first, **kwargs)
    assert started.status == "time_limit"
    np.testing.assert_array_equal(started.z, first.z)


def test_osqp_start_keeps_the_optimum():
    rng = np.random.default_rng(4)
    n = 200
    x = rng.normal(size=n)
    y = 2.0 * x + rng.normal(size=n)
    data = FairData.from_arrays(rng.normal(size=(n, 2)), y, {"x": x}, task="regression",
                                sensitive_kinds={"x": "continuous"})
    constraint = GeDI("x", 3, bound=0.2, relative=True)
    constraint.setup(data)
    enc = [constraint.target_encoding(data)]
    p = y + rng.normal(size=n)
    first = project_targets([p, y], weights=[1.0, 1.0], encodings=enc, backend="osqp")
    cold = project_targets([p, y], weights=[1.0, 0.5], encodings=enc, backend="osqp")
    warm = project_targets([p, y], weights=[1.0, 0.5], encodings=enc, backend="osqp", initial=first)
    assert warm.status == cold.status == "optimal"
    np.testing.assert_allclose(warm.z, cold.z, atol=1e-6 * np.abs(y).max())


@pytest.mark.skipif(not projection.gurobi_available(), reason="gurobipy is not installed")
def test_gurobi_start_keeps_the_optimum():
    _, enc, p, y = gedi_master(n=200)
    kwargs = dict(encodings=enc, loss="hamming", binary=True, mip_gap=0.0)
    first = project_targets([p, y], weights=[1.0, 1.0], backend="highs", **kwargs)
    try:
        cold = project_targets([p, y], weights=[1.0, 0.5], backend="gurobi", **kwargs)
    except RuntimeError as exc:  # no licence on this machine
        pytest.skip(f"Gurobi cannot solve here: {exc}")
    for start in (first, first.z):  # with and without the auxiliary variables
        warm = project_targets([p, y], weights=[1.0, 0.5], backend="gurobi", initial=start, **kwargs)
        assert warm.objective == pytest.approx(cold.objective, abs=1e-12)


def test_initial_is_validated():
    _, enc, p, y = gedi_master(n=50)
    kwargs = dict(encodings=enc, loss="hamming", binary=True, backend="highs")
    with pytest.raises(ValueError, match="initial: expected 50 finite"):
        project_targets([p, y], initial=np.zeros(49), **kwargs)
    with pytest.raises(ValueError, match="initial: binary targets need a 0/1 start"):
        project_targets([p, y], initial=np.full(50, 0.5), **kwargs)
    other = project_targets(y, encodings=[], loss="hamming", binary=True, backend="highs")
    with pytest.raises(ValueError, match="auxiliary variables have sizes"):
        project_targets([p, y], initial=other, **kwargs)


def test_moving_targets_warm_start_hands_over_the_previous_master(monkeypatch):
    import solvers.moving_targets as mt
    from sklearn.linear_model import LogisticRegression

    data = binary_data(200, 5)
    seen: list = []
    original = mt.project_targets

    def recording(*args, **kwargs):
        result = original(*args, **kwargs)
        seen.append((kwargs.get("initial"), result))
        return result

    monkeypatch.setattr(mt, "project_targets", recording)
    MovingTargets(iterations=3, backend="highs", warm_start=True).fit(
        LogisticRegression(), data, constraints=[GeDI("x", 2, bound=0.2, relative=True)])
    assert [s[0] is None for s in seen] == [True, False, False]
    assert all(isinstance(start, ProjectionResult) and start is previous
               for (start, _), (_, previous) in zip(seen[1:], seen[:-1]))
    seen.clear()
    MovingTargets(iterations=2, backend="highs").fit(LogisticRegression(), data,
                                                     constraints=[GeDI("x", 2, bound=0.2, relative=True)])
    assert [s[0] for s in seen] == [None, None]  # the default: cold masters
    with pytest.raises(ValueError, match="warm_start"):
        MovingTargets(warm_start="yes")


# ----------------------------------------------------------------------------- fine GeDI, binary targets
def coefficients(x: np.ndarray, z: np.ndarray, degree: int) -> np.ndarray:
    """Least-squares GeDI coefficients of z on the centred powers of the standardised x (numpy)."""
    s = (x - x.mean()) / x.std()
    F = s[:, None] ** np.arange(1, degree + 1)[None, :]
    return np.linalg.lstsq(F - F.mean(axis=0), z - z.mean(), rcond=None)[0]


def test_fine_binary_rows_accept_exactly_the_vectors_that_meet_the_constraint():
    n, degree = 12, 3
    data = binary_data(n, 7)
    x = data.sensitive["x"].numpy().astype(float)
    constraint = GeDI("x", degree, bound=0.5, relative=True, fine=True, tol=0.5)
    constraint.setup(data)
    enc = constraint.target_encoding(data)
    assert enc.meta["form"] == "fine-coefficients" and enc.n_aux == 0
    lower, upper = constraint.lower.numpy(), constraint.upper.numpy()
    Z = np.array(list(itertools.product([0.0, 1.0], repeat=n)))
    alpha = np.array([coefficients(x, z, degree) for z in Z])
    meets = ((alpha >= lower - 1e-12) & (alpha <= upper + 1e-12)).all(axis=1)
    accepted = np.array([enc.residual(z).max() <= 1e-9 for z in Z])
    assert 0 < meets.sum() < len(Z) and (accepted == meets).all()
    # the projection is the closest meeting vector (ties: the same Hamming distance)
    y = data.y.numpy().astype(float)
    result = project_targets(y, encodings=[enc], loss="hamming", binary=True, backend="highs", mip_gap=0.0)
    assert result.objective == pytest.approx(np.abs(Z[meets] - y).mean(axis=1).min(), abs=1e-12)
    exact = constraint.exact(torch.tensor(2 * result.z - 1), data).numpy()
    assert ((exact >= lower - 1e-9) & (exact <= upper + 1e-9)).all()


def test_fine_binary_projection_on_adult_age_is_feasible():
    """The covariance equalities of [GeDI] App. B.1 admit no 0/1 vector on Adult/age (no
    feasible point in 20 s, HiGHS and Gurobi); the coefficient rows are solved at once."""
    from fairopt import datasets

    data = datasets.load("adult", sensitive=["age"]).subset(torch.arange(1500))
    constraint = GeDI("age", 3, bound=0.2, relative=True, fine=True)
    constraint.setup(data)
    y = data.y.numpy().astype(float)
    result = project_targets(y, encodings=[constraint.target_encoding(data)], loss="hamming", binary=True,
                             backend="highs", time_limit=30.0)
    assert result.status == "optimal" and result.max_violation < 1e-9
    alpha = coefficients(data.sensitive["age"].numpy().astype(float), result.z, 3)
    q = constraint.absolute_bound
    assert abs(alpha[0]) <= q * (1 + 1e-7) and np.abs(alpha[1:]).max() <= 0.1 * q / 2 * (1 + 1e-7)
