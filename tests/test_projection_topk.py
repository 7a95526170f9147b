"""Tests of the count search (solvers.projection.topk, ``backend="topk"``).

References: HiGHS branch-and-cut proving optimality (``mip_gap=0``) on random problems of up to
60 targets, and brute-force enumeration of every binary target vector (n <= 10) with the group
rates computed from their definitions. Problems: disparate impact and demographic parity of a
binary attribute, the rate conditioned on ``y = 1`` (a third, unconstrained cell), with the
class-balance row; costs with many ties (hard-label references) and without (probabilities).
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from fairopt.constraints import DisparateImpact
from fairopt.data import FairData
from solvers.problem import LinearEncoding
from solvers.projection import ProjectionInfeasibleError, project_targets
from solvers.projection.program import assemble
from solvers.projection.topk import count_structure


def group_rows(s: np.ndarray, mask: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Mean-over-group weight vectors of groups s == 0 and s == 1 restricted to ``mask``."""
    g0, g1 = (s == 0) & mask, (s == 1) & mask
    return g0 / g0.sum(), g1 / g1.sum()


def rate_encoding(kind: str, s: np.ndarray, mask: np.ndarray, bound: float) -> LinearEncoding:
    """Disparate impact (ratio >= bound) or demographic parity (|difference| <= bound) rows."""
    w0, w1 = group_rows(s, mask)
    if kind == "ratio":
        return LinearEncoding("di", np.vstack([bound * w0 - w1, bound * w1 - w0]), [-np.inf, -np.inf], [0.0, 0.0])
    return LinearEncoding("dp", (w1 - w0)[None, :], [-bound], [bound])


def class_balance(n: int) -> LinearEncoding:
    return LinearEncoding("class_balance", np.ones((1, n)), [1.0], [n - 1.0])


def random_problem(rng: np.random.Generator, n: int) -> tuple | None:
    """References, weights and encodings of one random problem (None: a group is empty)."""
    s = (rng.random(n) < rng.uniform(0.2, 0.8)).astype(int)
    y = (rng.random(n) < rng.uniform(0.1, 0.9)).astype(float)
    conditioned = rng.random() < 0.4
    mask = y == 1 if conditioned else np.ones(n, dtype=bool)
    if min(((s == 0) & mask).sum(), ((s == 1) & mask).sum()) == 0:
        return None
    kind = "ratio" if rng.random() < 0.6 else "difference"
    bound = rng.uniform(0.5, 1.0) if kind == "ratio" else rng.uniform(0.0, 0.3)
    if rng.random() < 0.5:  # hard labels: costs with many ties
        predictions = (rng.random(n) < rng.choice([0.0, 0.3, 0.7, 1.0])).astype(float)
    else:
        predictions = rng.random(n)
    weights = [1.0, float(rng.choice([1.0, 0.5, 0.25]))]
    return [predictions, y], weights, [rate_encoding(kind, s, mask, bound), class_balance(n)]


def solve(backend: str, refs: list, weights: list, encodings: list, **kwargs):
    """The projection, or None when it is infeasible."""
    try:
        return project_targets(refs, weights=weights, encodings=encodings, loss="hamming", binary=True,
                               backend=backend, mip_gap=0.0, **kwargs)
    except ProjectionInfeasibleError:
        return None


def test_count_search_matches_highs_on_random_problems():
    rng = np.random.default_rng(11)
    compared = infeasible = 0
    for _ in range(200):
        problem = random_problem(rng, int(rng.integers(6, 61)))
        if problem is None:
            continue
        refs, weights, encodings = problem
        fast = solve("topk", refs, weights, encodings, priority=rng.random(refs[0].size))
        exact = solve("highs", refs, weights, encodings)
        assert (fast is None) == (exact is None)
        if fast is None:
            infeasible += 1
            continue
        compared += 1
        assert fast.backend == "topk" and fast.status == "optimal"
        assert abs(fast.objective - exact.objective) <= 1e-9
        assert fast.max_violation <= 1e-9
        assert set(np.unique(fast.z)) <= {0.0, 1.0}
    assert compared >= 100 and infeasible >= 1  # both outcomes exercised


def test_count_search_matches_brute_force():
    rng = np.random.default_rng(5)
    checked = 0
    for _ in range(60):
        n = int(rng.integers(4, 11))
        problem = random_problem(rng, n)
        if problem is None:
            continue
        refs, weights, encodings = problem
        Z = np.array(list(itertools.product([0.0, 1.0], repeat=n)))
        feasible = np.ones(len(Z), dtype=bool)
        for enc in encodings:
            values = Z @ enc.A_z.T
            feasible &= ((values >= enc.lb - 1e-12) & (values <= enc.ub + 1e-12)).all(axis=1)
        fast = solve("topk", refs, weights, encodings)
        if not feasible.any():
            assert fast is None
            continue
        cost = sum(w * np.abs(Z - r).mean(axis=1) for w, r in zip(weights, refs))
        assert fast is not None and abs(fast.objective - cost[feasible].min()) <= 1e-12
        checked += 1
    assert checked >= 30


def test_class_balance_binds():
    """All references 0: the optimum without the class-balance row is z = 0, so the row binds and
    the search adds the cheapest one (the count-row branch of the search)."""
    rng = np.random.default_rng(2)
    n = 30
    s = (np.arange(n) % 3 == 0).astype(int)
    y = np.zeros(n)
    y[:2] = 1.0
    for mask in (np.ones(n, dtype=bool), y == 0):
        encodings = [rate_encoding("ratio", s, mask | (np.arange(n) < 2), 0.8), class_balance(n)]
        refs = [np.zeros(n), y]
        fast = solve("topk", refs, [1.0, 0.5], encodings, priority=rng.random(n))
        exact = solve("highs", refs, [1.0, 0.5], encodings)
        assert fast.z.sum() >= 1 and abs(fast.objective - exact.objective) <= 1e-9


def test_priority_breaks_ties_only():
    """Equal costs within a group: the rows of higher priority get the ones; the cost is unchanged."""
    n = 40
    s = (np.arange(n) < 20).astype(int)
    predictions = np.where(s == 1, 1.0, 0.0)  # rates 1 and 0: DI >= 0.8 forces flips in both groups
    priority = np.linspace(0.0, 1.0, n)
    encodings = [rate_encoding("ratio", s, np.ones(n, dtype=bool), 0.8), class_balance(n)]
    up = solve("topk", [predictions], [1.0], encodings, priority=priority)
    down = solve("topk", [predictions], [1.0], encodings, priority=-priority)
    assert abs(up.objective - down.objective) <= 1e-12
    flipped_up = np.flatnonzero((up.z == 1) & (s == 0))
    flipped_down = np.flatnonzero((down.z == 1) & (s == 0))
    assert flipped_up.size == flipped_down.size > 0
    group = np.flatnonzero(s == 0)
    ranked = group[np.argsort(priority[group])]
    assert set(flipped_up) == set(ranked[-flipped_up.size:])  # the highest priorities
    assert set(flipped_down) == set(ranked[: flipped_down.size])


def test_auto_uses_count_search_only_where_it_applies():
    rng = np.random.default_rng(0)
    n = 45
    s = rng.integers(0, 3, n)
    s[:3] = [0, 1, 2]
    y = (rng.random(n) < 0.5).astype(float)
    data = FairData.from_arrays(rng.normal(size=(n, 2)), y, {"g": s}, task="binary",
                                sensitive_kinds={"g": "categorical"})
    di = DisparateImpact("g", 0.8)
    di.setup(data)
    encodings = [di.target_encoding(data), class_balance(n)]
    prog = assemble(np.vstack([y]), np.ones(1), encodings, "hamming", True)
    three_groups = count_structure(prog)
    result = solve("auto", [y], [1.0], encodings)
    if three_groups is None:  # pairwise rows among three groups: no pivot, a MIP backend solves it
        assert result.backend != "topk"
        with pytest.raises(ValueError, match="topk"):
            solve("topk", [y], [1.0], encodings)
    exact = solve("highs", [y], [1.0], encodings)
    assert abs(result.objective - exact.objective) <= 1e-9
    binary = (s == 0).astype(int)
    two = [rate_encoding("ratio", binary, np.ones(n, dtype=bool), 0.8), class_balance(n)]
    assert solve("auto", [y], [1.0], two).backend == "topk"
    # row weights of two values within each group: weighted counts are not counts (a knapsack), so a MIP
    w = np.where(np.arange(n) % 2 == 0, 1.0, 2.0)
    w0, w1 = (binary == 0) * w / (w * (binary == 0)).sum(), (binary == 1) * w / (w * (binary == 1)).sum()
    weighted = [LinearEncoding("di", np.vstack([0.8 * w0 - w1, 0.8 * w1 - w0]), [-np.inf, -np.inf], [0.0, 0.0]),
                class_balance(n)]
    result = solve("auto", [y], [1.0], weighted)
    assert result.backend != "topk"
    assert abs(result.objective - solve("highs", [y], [1.0], weighted).objective) <= 1e-9


def test_priority_is_validated():
    n = 6
    s = np.array([0, 0, 0, 1, 1, 1])
    encodings = [rate_encoding("ratio", s, np.ones(n, dtype=bool), 0.8)]
    with pytest.raises(ValueError, match="priority"):
        project_targets([np.zeros(n)], encodings=encodings, loss="hamming", binary=True, priority=np.ones(n - 1))
