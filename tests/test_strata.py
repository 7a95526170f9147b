"""The stratified pullback (solvers.strata): same derivatives as the row-by-row pullback."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn

from fairopt.constraints import DisparateImpact, EqualImpact, EqualizedOdds, GeDI
from fairopt.data import FairData
from fairopt.models import linear, mlp
from fairopt.surrogates import Sigmoid
from solvers import StochasticSQP
from solvers.derivatives import LocalDerivatives
from solvers.losses import bce_loss
from solvers.problem import as_constraint_set, trainable_parameters
from solvers.strata import RowStrata, is_rowwise, plan_strata, rank_one_factors, row_codes, segment_factors


@pytest.fixture(autouse=True)
def _small_batches_stratified(monkeypatch):
    """These tests use a few hundred rows: lift the row threshold below which "auto" keeps the
    row-by-row pullback (``test_small_batches_keep_the_row_by_row_pullback`` checks it)."""
    monkeypatch.setattr("solvers.derivatives.MIN_ROWS", 1)


def _data(n: int = 400, weights: bool = False, seed: int = 0) -> FairData:
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, 4))
    s = rng.integers(0, 2, n)
    r = rng.integers(0, 3, n)
    y = (rng.random(n) < 0.3 + 0.3 * s).astype(float)
    w = rng.integers(0, 4, n) if weights else None
    return FairData.from_arrays(X, y, {"s": s, "r": r}, sample_weight=w, sensitive_kinds={"r": "categorical"})


def _close(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a - b).abs().max() / b.abs().max().clamp_min(1e-30))


def _both(model: nn.Module, constraints, data, obj=None):
    cons = as_constraint_set(constraints)
    cons.setup(data)
    params = trainable_parameters(model)
    obj = data if obj is None else obj
    auto, loop = LocalDerivatives("auto"), LocalDerivatives("loop")
    assert auto.stratified_plan(model, cons, data) is not None
    return auto(model, params, bce_loss, cons, obj, data), loop(model, params, bce_loss, cons, obj, data)


@pytest.mark.parametrize("weights", [False, True])
@pytest.mark.parametrize("which", ["di", "di+ei", "eodds", "categorical"])
def test_stratified_pullback_equals_row_by_row(which, weights):
    data = _data(weights=weights)
    constraints = {"di": [DisparateImpact("s", 0.8)],
                   "di+ei": [DisparateImpact("s", 0.8), EqualImpact("s", 0.8)],
                   "eodds": [EqualizedOdds("s", 0.05)],
                   "categorical": [DisparateImpact("r", 0.8), DisparateImpact("s", 0.9)]}[which]
    a, b = _both(mlp(data.n_features, hidden=(8,), seed=1), constraints, data)
    assert a.f == pytest.approx(b.f, rel=1e-6)
    assert _close(a.g, b.g) < 1e-4 and _close(a.J, b.J) < 1e-4
    assert torch.allclose(a.c, b.c, atol=1e-6) and torch.allclose(a.c_exact, b.c_exact, atol=1e-6)
    assert a.J.shape == b.J.shape and a.J.abs().sum() > 0


def test_stratified_pullback_with_mixed_surrogates_falls_back_per_stratum():
    """Two members with different surrogates: a stratum's block has rank two, its rows are
    pulled back one by one and the Jacobian is still the row-by-row one."""
    data = _data()
    cons = [DisparateImpact("s", 0.8), DisparateImpact("s", 0.9, surrogate=Sigmoid(scale=0.3))]
    a, b = _both(mlp(data.n_features, hidden=(3,), seed=0), cons, data)
    assert _close(a.J, b.J) < 1e-4 and _close(a.g, b.g) < 1e-4


def test_members_with_one_surrogate_declare_a_shared_direction():
    """The declaration that lets the stratified pullback skip the rank-one test, and when it holds."""
    from fairopt.constraints import Covariance

    def shared(cons):
        return as_constraint_set(cons).shared_direction

    assert shared([DisparateImpact("s", 0.8), EqualImpact("s", 0.8), EqualizedOdds("s", 0.05)])
    assert shared([DisparateImpact("r", 0.8), DisparateImpact("s", 0.9)])
    assert not shared([DisparateImpact("s", 0.8), DisparateImpact("s", 0.9, surrogate=Sigmoid(scale=0.3))])
    assert not shared([DisparateImpact("s", 0.8), Covariance(["s"], 0.1)])
    assert not shared([])

    class Squared(DisparateImpact):  # its own transform and slope: no shared key
        def _transform(self, t, exact):
            return super()._transform(t, exact) ** 2

        def _transform_and_slope(self, t):
            value, slope = super()._transform_and_slope(t)
            return value ** 2, 2 * value * slope

    assert Squared("s").jacobian_direction is None


def test_rank_one_factors_without_the_check_trust_the_caller():
    block = torch.tensor([[1.0, 0.0, 2.0], [0.0, 1.0, 1.0]])
    assert rank_one_factors(block)[1].shape[0] == 2  # checked: rank two, the rows themselves
    coef, rows = rank_one_factors(block, check=False)  # unchecked: the rank-one factors of its largest row
    assert rows.shape[0] == 1 and torch.equal(rows[0], block[0])
    v = torch.tensor([[1.0, -2.0, 0.5]])
    coef, rows = rank_one_factors(torch.tensor([[3.0], [-1.0]]) * v, check=False)
    torch.testing.assert_close(coef @ rows, torch.tensor([[3.0], [-1.0]]) * v)


def test_stratified_pullback_with_a_separate_objective_batch():
    data = _data(600)
    obj = data.subset(torch.arange(0, 600, 3))
    a, b = _both(mlp(data.n_features, hidden=(6,), seed=2), [DisparateImpact("s", 0.8)], data, obj=obj)
    assert a.f == pytest.approx(b.f, rel=1e-6)
    assert _close(a.g, b.g) < 1e-5 and _close(a.J, b.J) < 1e-4


def test_plan_is_none_without_strata_or_row_wise_model():
    data = _data()
    oracle = LocalDerivatives("auto")
    gedi = as_constraint_set([GeDI("s", bound=0.1)])
    gedi.setup(data)
    assert oracle.stratified_plan(mlp(data.n_features, seed=0), gedi, data) is None
    di = as_constraint_set([DisparateImpact("s", 0.8)])
    di.setup(data)
    batchnorm = nn.Sequential(nn.Linear(data.n_features, 4), nn.BatchNorm1d(4), nn.Linear(4, 1))
    assert oracle.stratified_plan(batchnorm, di, data) is None
    assert LocalDerivatives("loop").stratified_plan(mlp(data.n_features, seed=0), di, data) is None
    assert oracle.stratified_plan(linear(data.n_features, seed=0), di, data) is None  # no hidden layer
    assert plan_strata(di, data.subset(torch.nonzero(data.sensitive["s"] == 1).reshape(-1))) is None  # one stratum


def test_is_rowwise_reads_types_and_declarations():
    class Custom(nn.Module):
        def forward(self, x):
            return x - x.mean(0)

    class Declared(Custom):
        rowwise = True

    assert is_rowwise(mlp(3, hidden=(4, 4), activation="tanh")) and is_rowwise(linear(3))
    assert not is_rowwise(nn.Sequential(nn.Linear(3, 1), Custom()))
    assert is_rowwise(nn.Sequential(nn.Linear(3, 1), Declared()))
    assert not is_rowwise(lambda x: x)


def test_constraint_set_strata_are_the_common_refinement():
    data = _data()
    cons = as_constraint_set([DisparateImpact("s", 0.8), EqualImpact("r", 0.8)])
    cons.setup(data)
    codes = cons.strata(data)
    s, r, y = data.sensitive["s"], data.sensitive["r"], data.y
    # brute force: DI on s splits by s; EI on r (one group vs the rest, among y = 1) by (r, y)
    key = s * 100 + torch.where(y == 1, r, torch.full_like(r, -1)) + 10
    for a in range(len(data)):
        same = codes == codes[a]
        assert torch.equal(same, key == key[a])


@pytest.mark.parametrize("seed", range(5))
def test_row_codes_equal_unique_rows(seed):
    gen = torch.Generator().manual_seed(seed)
    for n, k, values in ((0, 2, 3), (1, 1, 1), (37, 3, 4), (200, 2, 2), (64, 5, 3)):
        table = torch.randint(0, values, (n, k), generator=gen)
        reference = torch.unique(table, dim=0, return_inverse=True)[1] if n else torch.zeros(0, dtype=torch.long)
        assert torch.equal(row_codes(table), reference)
        assert torch.equal(row_codes(table > 0), torch.unique(table > 0, dim=0, return_inverse=True)[1]
                           if n else reference)
    wide = torch.randint(0, 2**40, (30, 3), generator=gen)  # packed codes past 62 bits: the fallback
    assert torch.equal(row_codes(wide), torch.unique(wide, dim=0, return_inverse=True)[1])
    with pytest.raises(ValueError, match="table: expected a 2-d"):
        row_codes(torch.zeros(3))
    with pytest.raises(ValueError, match="non-negative"):
        row_codes(torch.tensor([[0, -1]]))


def test_rank_one_factors():
    v = torch.tensor([[1.0, -2.0, 0.5, 3.0]])
    coef, rows = rank_one_factors(torch.tensor([[2.0], [-1.0], [0.0]]) * v)
    assert coef.shape == (3, 1) and torch.allclose(coef @ rows, torch.tensor([[2.0], [-1.0], [0.0]]) * v)
    coef, rows = rank_one_factors(torch.zeros(2, 5))
    assert coef.shape == (2, 0) and rows.shape == (0, 5)
    block = torch.tensor([[1.0, 0.0, 2.0], [0.0, 1.0, 1.0], [0.0, 0.0, 0.0]])
    coef, rows = rank_one_factors(block)
    assert rows.shape[0] == 2 and torch.equal(coef @ rows, block)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_rank_one_factors_of_rounded_products_stay_rank_one(dtype):
    """Rows ``a_r * phi'`` rounded once (as the closed-form Jacobian of rate rows builds them)."""
    slope = torch.rand(20000, generator=torch.Generator().manual_seed(0), dtype=dtype) * 25
    a = torch.tensor([0.37, -1.9, 1 / 3, 0.0], dtype=dtype)
    block = a[:, None] * slope[None, :]
    coef, rows = rank_one_factors(block)
    assert rows.shape[0] == 1
    eps = torch.finfo(dtype).eps
    assert float((coef @ rows - block).abs().max()) <= 8 * eps * float(block.abs().max())


@pytest.mark.parametrize("metric", ["adam", "gauss-newton"])
def test_sqp_fit_same_with_stratified_and_row_by_row_pullback(metric):
    """The two pullbacks give the same iterates up to rounding. Under the gradient metric the 30
    iterations stay within 1e-3; the Newton-scaled steps of the curvature metric amplify a
    rounding difference on these random labels, so there the first iterations are compared."""
    data = _data(300)
    fits = {}
    for mode in ("auto", "loop"):
        model = mlp(data.n_features, hidden=(6,), seed=0)
        res = StochasticSQP(epochs=30, jacobian=mode, screen_rows=False, hessian=metric).fit(
            model, data, loss="bce", constraints=[DisparateImpact("s", 0.8), EqualImpact("s", 0.8)])
        fits[mode] = (torch.cat([p.detach().reshape(-1) for p in model.parameters()]), res)
    if metric == "adam":
        assert _close(fits["auto"][0], fits["loop"][0]) < 1e-3
        assert fits["auto"][1].status == fits["loop"][1].status
    else:
        head = [fits[mode][1].history.column("f")[:6] for mode in ("auto", "loop")]
        assert np.allclose(head[0], head[1], rtol=0, atol=1e-5)


def test_small_batches_keep_the_row_by_row_pullback(monkeypatch):
    from solvers.strata import MIN_ROWS

    monkeypatch.setattr("solvers.derivatives.MIN_ROWS", MIN_ROWS)
    data = _data(MIN_ROWS + 10)
    cons = as_constraint_set([DisparateImpact("s", 0.8)])
    cons.setup(data)
    model = mlp(data.n_features, hidden=(3,), seed=0)
    oracle = LocalDerivatives("auto")
    assert oracle.stratified_plan(model, cons, data) is not None
    assert oracle.stratified_plan(model, cons, data.subset(torch.arange(MIN_ROWS - 1))) is None


@pytest.mark.parametrize("weights", [False, True])
def test_rows_and_factors_equal_the_dense_rows_and_jacobian(weights):
    """The factored rows (segment sums, one direction, a coefficient column per stratum) against
    the dense closed form and the exact rows, on the stratified layout of the batch."""
    data = _data(weights=weights)
    model = mlp(data.n_features, hidden=(4,), seed=0)
    for constraints in ([DisparateImpact("s", 0.8), EqualImpact("s", 0.8)], [EqualizedOdds("s", 0.05)],
                        [DisparateImpact("r", 0.8), DisparateImpact("s", 0.9)]):
        cons = as_constraint_set(constraints)
        cons.setup(data)
        plan = plan_strata(cons, data)
        out = model(plan.batch.X).reshape(-1).detach()
        factors = cons.rows_and_factors(out, plan.batch, plan.strata)
        c, dc = cons.rows_and_jacobian(out, plan.batch)
        assert factors.c.dtype == factors.exact.dtype == torch.float64
        torch.testing.assert_close(factors.c, c.double(), rtol=0, atol=1e-6)
        torch.testing.assert_close(factors.exact, cons.exact(out, plan.batch).double(), rtol=0, atol=1e-6)
        rebuilt = torch.cat([factors.coef[:, [k]] * factors.direction[None, a:b]
                             for k, (a, b) in enumerate(plan.bounds)], dim=1)
        torch.testing.assert_close(rebuilt, dc, rtol=1e-5, atol=1e-6)
        coef, direction = segment_factors(dc, plan.bounds)  # the engine's fallback from the dense matrix
        torch.testing.assert_close(torch.cat([coef[:, [k]] * direction[None, a:b] for k, (a, b) in
                                              enumerate(plan.bounds)], dim=1), dc, rtol=1e-5, atol=1e-7)


def test_rows_and_factors_on_strata_given_row_by_row():
    """Rows in any order with their strata given as codes (a mini-batch drawn at random), a stratum
    split under two codes, and a stratum absent from the batch: the same rows as the dense closed form."""
    data = _data(weights=True)
    model = mlp(data.n_features, hidden=(4,), seed=0)
    for constraints in ([DisparateImpact("s", 0.8), EqualImpact("s", 0.8)], [EqualizedOdds("s", 0.05)]):
        cons = as_constraint_set(constraints)
        cons.setup(data)
        codes = cons.strata(data)
        n_strata = int(codes.max()) + 1
        firsts = torch.stack([torch.nonzero(codes == k)[0, 0] for k in range(n_strata)])  # a row of each stratum
        representatives = data.subset(firsts)
        idx = torch.randperm(len(data), generator=torch.Generator().manual_seed(1))[:150]
        idx = idx[codes[idx] != 0]  # stratum 0 has no row in this batch
        batch = data.subset(idx)
        strata = RowStrata(codes[idx], representatives)
        out = model(batch.X).reshape(-1).detach()
        factors = cons.rows_and_factors(out, batch, strata)
        c, dc = cons.rows_and_jacobian(out, batch)
        torch.testing.assert_close(factors.c, c.double(), rtol=0, atol=1e-6)
        torch.testing.assert_close(factors.exact, cons.exact(out, batch).double(), rtol=0, atol=1e-6)
        torch.testing.assert_close(strata.expand(factors.coef) * factors.direction[None, :], dc, rtol=1e-5, atol=1e-6)
        split = codes[idx].clone()
        split[::2][split[::2] == 1] = n_strata  # half of stratum 1's rows under a new code
        more = data.subset(torch.cat([firsts, torch.nonzero(codes == 1)[0]]))  # the new code: a row of stratum 1
        two = cons.rows_and_factors(out, batch, RowStrata(split, more))
        torch.testing.assert_close(two.c, factors.c, rtol=0, atol=1e-12)
        torch.testing.assert_close(two.coef[:, 1], two.coef[:, n_strata])


def test_row_strata_layouts():
    data = _data().subset(torch.arange(5))
    strata = RowStrata.from_bounds(data, ((0, 2), (2, 5)))
    assert strata.codes.tolist() == [0, 0, 1, 1, 1] and strata.n_strata == 2
    torch.testing.assert_close(strata.representatives.X, data.X[[0, 2]])
    torch.testing.assert_close(strata.sums(torch.arange(5.0)), torch.tensor([1.0, 9.0], dtype=torch.float64))
    torch.testing.assert_close(strata.sums(), torch.tensor([2.0, 3.0], dtype=torch.float64))
    scattered = RowStrata(strata.codes, strata.representatives)  # the same strata without the segments
    assert scattered.bounds is None
    torch.testing.assert_close(scattered.sums(torch.arange(5.0)), strata.sums(torch.arange(5.0)))
    torch.testing.assert_close(scattered.sums(), strata.sums())
    rows = RowStrata(torch.tensor([2, 0, 2, 0]), data.subset(torch.arange(4)))
    assert rows.expand(torch.tensor([[10.0, 11.0, 12.0, 13.0]])).tolist() == [[12.0, 10.0, 12.0, 10.0]]
    assert rows.sums().tolist() == [2.0, 0.0, 2.0, 0.0]
    for bad in (((0, 2), (3, 5)), ((1, 3), (3, 5)), ((0, 2), (2, 2), (2, 5)), ((0, 2), (2, 4))):
        with pytest.raises(ValueError, match="tile"):
            RowStrata.from_bounds(data, bad)
    with pytest.raises(ValueError, match="values in"):
        RowStrata(torch.tensor([0, 4]), data.subset(torch.arange(4)))
    with pytest.raises(ValueError, match="integer"):
        RowStrata(torch.tensor([0.0, 1.0]), data.subset(torch.arange(4)))


@pytest.mark.parametrize("weights", [False, True])
def test_drawn_batches_take_the_factored_rows(weights):
    """A batch declared as ``data.subset(idx)`` (``know_strata`` + ``rows_drawn``) gets the same
    derivatives from per-stratum sums as from the batch's own operator and dense Jacobian."""
    data = _data(weights=weights)
    cons = as_constraint_set([DisparateImpact("s", 0.8), EqualImpact("s", 0.8)])
    cons.setup(data)
    model = mlp(data.n_features, hidden=(4,), seed=0)
    params = trainable_parameters(model)
    idx = torch.randperm(len(data), generator=torch.Generator().manual_seed(2))[:96]
    batch = data.subset(idx)
    drawn, plain = LocalDerivatives("auto"), LocalDerivatives("auto")
    assert drawn.know_strata(cons, data)
    drawn.rows_drawn(batch, idx)
    assert drawn._row_strata(batch) is not None and plain._row_strata(batch) is None
    a = drawn(model, params, bce_loss, cons, batch, batch)
    b = plain(model, params, bce_loss, cons, batch, batch)
    assert a.f == b.f
    torch.testing.assert_close(a.g, b.g, rtol=0, atol=1e-7)
    torch.testing.assert_close(a.c, b.c, rtol=0, atol=1e-6)
    torch.testing.assert_close(a.c_exact, b.c_exact, rtol=0, atol=1e-12)
    torch.testing.assert_close(a.J, b.J, rtol=1e-5, atol=1e-6)
    other = data.subset(idx[:50])
    assert drawn._row_strata(other) is None  # not declared: the plain path


def test_know_strata_declines_constraints_without_a_shared_direction():
    data = _data()
    mixed = as_constraint_set([DisparateImpact("s", 0.8), DisparateImpact("s", 0.9, surrogate=Sigmoid(scale=0.3))])
    mixed.setup(data)
    oracle = LocalDerivatives("auto")
    assert not oracle.know_strata(mixed, data)
    oracle.rows_drawn(data.subset(torch.arange(10)), torch.arange(10))  # no effect
    assert oracle._drawn is None


def test_minibatch_fit_same_with_and_without_the_drawn_strata(monkeypatch):
    data = _data(600)
    fits = []
    for declared in (True, False):
        if not declared:
            monkeypatch.setattr(LocalDerivatives, "know_strata", lambda self, cons, data: False)
        model = mlp(data.n_features, hidden=(6,), seed=0)
        res = StochasticSQP(epochs=4, batch_size=128, seed=0, polish_iterations=0).fit(
            model, data, loss="bce", constraints=[DisparateImpact("s", 0.8), EqualImpact("s", 0.8)])
        fits.append((torch.cat([p.detach().reshape(-1) for p in model.parameters()]), res))
    assert _close(fits[0][0], fits[1][0]) < 1e-4
    assert len(fits[0][1].history) == len(fits[1][1].history)
