"""Rate and covariance constraints (fairopt.constraints.rates, [SQP] eq 5).

Every row is checked against group means computed independently with explicit loops /
pandas on small random batches that follow the FairData contract (CONVENTIONS.md).
"""

from __future__ import annotations

import itertools
import logging
import math
import pickle
import types
import warnings

import numpy as np
import pandas as pd
import pytest
import torch

from fairopt.constraints import (BaseConstraint, Covariance, DemographicParity, DisparateImpact, EqualImpact,
                                 EqualizedOdds, EqualOpportunity)
from fairopt.exceptions import FairnessWarning
from fairopt.surrogates import Hinge, Sigmoid, SmoothedStep
from solvers.problem import ConstraintSet, LinearEncoding, row_violations

SEX = ["M", "F"]
RACE = ["a", "b", "c"]


class Batch(types.SimpleNamespace):
    """A tiny stand-in for FairData (the fields constraints read)."""

    def __len__(self) -> int:
        return len(self.y)


def make_batch(n: int = 60, seed: int = 0, race_levels: int = 3) -> Batch:
    g = torch.Generator().manual_seed(seed)
    sex = (torch.rand(n, generator=g) < 0.45).float()
    race = torch.randint(0, race_levels, (n,), generator=g)
    age = 18 + 60 * torch.rand(n, generator=g)
    y = (torch.rand(n, generator=g) < 0.5).float()
    levels = {"sex": SEX, "race": RACE[:race_levels], "age": []}
    cells = sex.long() * race_levels + race
    return Batch(
        X=torch.randn(n, 4, generator=g), y=y, task="binary",
        sensitive={"sex": sex, "race": race, "age": age},
        sensitive_kinds={"sex": "binary", "race": "categorical", "age": "continuous"},
        sensitive_levels=levels, cells=cells, n_cells=2 * race_levels, exposure=None,
        feature_names=["x0", "x1", "x2", "x3"],
    )


def frame(batch: Batch, values: np.ndarray) -> pd.DataFrame:
    return pd.DataFrame({
        "sex": batch.sensitive["sex"].numpy().astype(int),
        "race": batch.sensitive["race"].numpy(),
        "age": batch.sensitive["age"].numpy().astype(float),
        "y": batch.y.numpy().astype(int),
        "v": values,
    })


def di_rows(df: pd.DataFrame, comparisons, delta: float) -> np.ndarray:
    """[SQP] eq 5 for each (focus mask, reference mask): delta P_r - P_f, delta P_f - P_r."""
    rows = []
    for focus, ref in comparisons:
        p_f, p_r = df.loc[focus, "v"].mean(), df.loc[ref, "v"].mean()
        rows += [delta * p_r - p_f, delta * p_f - p_r]
    return np.array(rows)


def dp_rows(df: pd.DataFrame, comparisons) -> np.ndarray:
    return np.array([df.loc[f, "v"].mean() - df.loc[r, "v"].mean() for f, r in comparisons])


def one_vs_rest(df: pd.DataFrame, column: str, k: int):
    return [(df[column] == g, df[column] != g) for g in range(k)]


def pairwise(df: pd.DataFrame, column: str, k: int):
    return [(df[column] == h, df[column] == g) for g in range(k) for h in range(g + 1, k)]


def binary_pair(df: pd.DataFrame, column: str):
    return [(df[column] == 1, df[column] == 0)]


@pytest.fixture
def batch() -> Batch:
    b = make_batch()
    counts = pd.crosstab(b.sensitive["sex"].numpy(), b.sensitive["race"].numpy())
    assert counts.shape == (2, 3) and (counts.to_numpy() > 0).all()
    return b


@pytest.fixture
def out(batch) -> torch.Tensor:
    # spread around the threshold 0 on the scale of the surrogate (|t| ~ 1/scale)
    return (0.05 * torch.randn(len(batch), generator=torch.Generator().manual_seed(1))).double()


def surrogate_values(phi, out, threshold=0.0) -> np.ndarray:
    return phi(out - threshold).detach().numpy()


# ----------------------------------------------------------------------------- values vs brute force


def test_disparate_impact_binary_matches_pandas_group_means(batch, out):
    c = DisparateImpact("sex", delta=0.8)
    df = frame(batch, surrogate_values(c.surrogate, out))
    p = df.groupby("sex")["v"].mean()
    expected = [0.8 * p[0] - p[1], 0.8 * p[1] - p[0]]  # [SQP] eq 5
    np.testing.assert_allclose(c(out, batch).detach().numpy(), expected, rtol=0, atol=1e-12)


def test_disparate_impact_categorical_one_vs_rest(batch, out):
    c = DisparateImpact("race", delta=0.7, surrogate=Sigmoid(20.0))
    df = frame(batch, surrogate_values(c.surrogate, out))
    expected = di_rows(df, one_vs_rest(df, "race", 3), 0.7)
    np.testing.assert_allclose(c(out, batch).detach().numpy(), expected, rtol=0, atol=1e-12)
    assert len(c.row_names) == 6


def test_two_level_categorical_gives_the_binary_pair_for_every_grouping(out):
    b = make_batch(race_levels=2, seed=9)
    df = frame(b, surrogate_values(SmoothedStep(), out))
    expected = di_rows(df, binary_pair(df, "race"), 0.8)  # delta P_a - P_b, delta P_b - P_a
    for groups in ("one_vs_rest", "pairwise"):
        c = DisparateImpact("race", delta=0.8, groups=groups)
        np.testing.assert_allclose(c(out, b).detach().numpy(), expected, rtol=0, atol=1e-12)
        assert c.row_names == ["disparate_impact[race]:0.8*P[race=a]-P[race=b]",
                               "disparate_impact[race]:0.8*P[race=b]-P[race=a]"]


def test_disparate_impact_categorical_pairwise(batch, out):
    c = DisparateImpact("race", delta=0.9, groups="pairwise")
    df = frame(batch, surrogate_values(c.surrogate, out))
    expected = di_rows(df, pairwise(df, "race", 3), 0.9)
    np.testing.assert_allclose(c(out, batch).detach().numpy(), expected, rtol=0, atol=1e-12)
    assert c.row_names[:2] == ["disparate_impact[race]:0.9*P[race=a]-P[race=b]",
                               "disparate_impact[race]:0.9*P[race=b]-P[race=a]"]


def test_intersection_cells_in_row_major_order(batch, out):
    c = DisparateImpact(["sex", "race"], delta=0.8)
    df = frame(batch, surrogate_values(c.surrogate, out))
    comparisons = []
    for s, r in itertools.product(range(2), range(3)):  # sex slowest, race fastest
        cell = (df["sex"] == s) & (df["race"] == r)
        comparisons.append((cell, ~cell))
    np.testing.assert_allclose(c(out, batch).detach().numpy(), di_rows(df, comparisons, 0.8), rtol=0, atol=1e-12)
    assert c.name == "disparate_impact[sex&race]"
    assert c.row_names[1] == "disparate_impact[sex&race]:0.8*P[sex=M&race=a]-P[not(sex=M&race=a)]"
    assert c.row_names[-1] == "disparate_impact[sex&race]:0.8*P[sex=F&race=c]-P[not(sex=F&race=c)]"


def test_intersection_cells_pairwise(batch, out):
    c = DemographicParity(["race", "sex"], bound=0.1, groups="pairwise")
    df = frame(batch, surrogate_values(c.surrogate, out))
    cells = [(df["race"] == r) & (df["sex"] == s) for r, s in itertools.product(range(3), range(2))]
    comparisons = [(cells[h], cells[g]) for g in range(6) for h in range(g + 1, 6)]
    np.testing.assert_allclose(c(out, batch).detach().numpy(), dp_rows(df, comparisons), rtol=0, atol=1e-12)
    assert c.n_rows == 15


def test_marginal_groups_concatenate_each_attribute(batch, out):
    c = DisparateImpact(["sex", "race"], delta=0.8, groups="marginal")
    df = frame(batch, surrogate_values(c.surrogate, out))
    comparisons = binary_pair(df, "sex") + one_vs_rest(df, "race", 3)
    np.testing.assert_allclose(c(out, batch).detach().numpy(), di_rows(df, comparisons, 0.8), rtol=0, atol=1e-12)
    assert c.name == "disparate_impact[sex,race]" and c.n_rows == 8


def test_equal_impact_restricts_to_positive_labels(batch, out):
    c = EqualImpact("race", delta=0.8)
    df = frame(batch, surrogate_values(c.surrogate, out))
    positives = df[df["y"] == 1]
    expected = di_rows(positives, one_vs_rest(positives, "race", 3), 0.8)
    got = c(out, batch).detach().numpy()
    np.testing.assert_allclose(got, expected, rtol=0, atol=1e-12)
    unrestricted = DisparateImpact("race", delta=0.8)(out, batch).detach().numpy()
    assert np.abs(got - unrestricted).max() > 1e-3  # the restriction matters on this data
    assert c.name == "equal_impact[race]"


def test_demographic_parity_binary_and_categorical(batch, out):
    binary = DemographicParity("sex", bound=0.05, surrogate=Hinge())
    df = frame(batch, surrogate_values(Hinge(), out))
    p = df.groupby("sex")["v"].mean()
    np.testing.assert_allclose(binary(out, batch).detach().numpy(), [p[1] - p[0]], rtol=0, atol=1e-12)
    categorical = DemographicParity("race", bound=0.05)
    df = frame(batch, surrogate_values(categorical.surrogate, out))
    np.testing.assert_allclose(categorical(out, batch).detach().numpy(), dp_rows(df, one_vs_rest(df, "race", 3)),
                               rtol=0, atol=1e-12)


def test_threshold_shifts_the_surrogate_argument(batch, out):
    c = DisparateImpact("sex", delta=0.8, threshold=0.03)
    df = frame(batch, surrogate_values(c.surrogate, out, threshold=0.03))
    expected = di_rows(df, binary_pair(df, "sex"), 0.8)
    np.testing.assert_allclose(c(out, batch).detach().numpy(), expected, rtol=0, atol=1e-12)
    unshifted = DisparateImpact("sex", delta=0.8)(out, batch).detach().numpy()
    assert np.abs(unshifted - expected).max() > 1e-3


# ----------------------------------------------------------------------------- exact rows


def test_exact_matches_brute_force_disparate_impact_on_hard_predictions(batch, out):
    threshold = 0.01
    c = DisparateImpact("race", delta=0.8, threshold=threshold)
    hard = (out.numpy() > threshold).astype(float)
    df = frame(batch, hard)
    expected = di_rows(df, one_vs_rest(df, "race", 3), 0.8)
    np.testing.assert_allclose(c.exact(out, batch).numpy(), expected, rtol=0, atol=1e-12)
    assert not c.exact(out.requires_grad_(), batch).requires_grad


def test_exact_rows_are_satisfied_iff_the_realised_ratio_reaches_delta(batch, out):
    """Realised DI = min(P_0/P_1, P_1/P_0) on hard predictions."""
    yhat = (out.numpy() > 0).astype(float)
    sex = batch.sensitive["sex"].numpy()
    p0, p1 = yhat[sex == 0].mean(), yhat[sex == 1].mean()
    ratio = min(p0 / p1, p1 / p0)
    assert 0.3 < ratio < 1.0
    for delta, satisfied in [(ratio - 1e-6, True), (ratio + 1e-6, False)]:
        c = DisparateImpact("sex", delta=delta)
        assert (c.exact(out, batch).max().item() <= 0) is satisfied


def test_covariance_rows_and_exact(batch, out):
    df = frame(batch, out.numpy())
    n = len(df)
    binary = Covariance("sex", bound=0.01)
    s = df["sex"].to_numpy(float)
    expected = sum((s[i] - s.mean()) * df["v"][i] for i in range(n)) / n
    np.testing.assert_allclose(binary(out, batch).detach().numpy(), [expected], rtol=0, atol=1e-14)
    torch.testing.assert_close(binary.exact(out, batch), binary(out, batch).detach(), rtol=0, atol=0)
    # [SQP] Thm 2.2: c_cov = N0 N1 / N^2 * (mean_1 out - mean_0 out)
    n0, n1 = (s == 0).sum(), (s == 1).sum()
    p = df.groupby("sex")["v"].mean()
    assert binary(out, batch).item() == pytest.approx(n0 * n1 / n**2 * (p[1] - p[0]), abs=1e-14)

    continuous = Covariance("age", bound=1.0)
    a = df["age"].to_numpy()
    expected = np.mean((a - a.mean()) * df["v"].to_numpy())
    np.testing.assert_allclose(continuous(out, batch).detach().numpy(), [expected], rtol=1e-6, atol=1e-9)

    categorical = Covariance("race", bound=0.01)
    expected = [np.mean(((df["race"] == k) - (df["race"] == k).mean()) * df["v"]) for k in range(3)]
    np.testing.assert_allclose(categorical(out, batch).detach().numpy(), expected, rtol=0, atol=1e-14)
    assert categorical.row_names == [f"covariance[race]:cov(race={lv},out)" for lv in RACE]

    cells = Covariance(["sex", "race"], bound=0.01)
    expected = []
    for sv, r in itertools.product(range(2), range(3)):
        ind = ((df["sex"] == sv) & (df["race"] == r)).to_numpy(float)
        expected.append(np.mean((ind - ind.mean()) * df["v"]))
    np.testing.assert_allclose(cells(out, batch).detach().numpy(), expected, rtol=0, atol=1e-14)

    marginal = Covariance(["sex", "age"], bound=0.5, groups="marginal")
    torch.testing.assert_close(marginal(out, batch), torch.cat([binary(out, batch), continuous(out, batch)]))


# ----------------------------------------------------------------------------- gradients


@pytest.mark.parametrize(
    "make",
    [
        lambda: DisparateImpact("sex"),
        lambda: DisparateImpact("race", groups="pairwise", surrogate=SmoothedStep(variant="paper")),
        lambda: EqualImpact(["sex", "race"], surrogate=Sigmoid()),
        lambda: DemographicParity("race", bound=0.1),
        lambda: Covariance(["race", "age"], bound=0.1, groups="marginal"),
    ],
    ids=["di", "di-pairwise-paper", "ei-cells-sigmoid", "dp", "cov"],
)
def test_gradients_match_finite_differences(make, batch, out):
    c = make()
    x = out.clone().requires_grad_(True)
    assert torch.autograd.gradcheck(lambda o: c(o, batch), (x,), eps=1e-7, atol=1e-6, rtol=1e-4)


def test_jacobian_is_weight_matrix_times_surrogate_derivative(batch, out):
    """dc/dout for binary DI: rows delta 1{S=0}/n0 - 1{S=1}/n1 (and swapped) times phi'(t)."""
    c = DisparateImpact("sex", delta=0.8)
    jac = torch.autograd.functional.jacobian(lambda o: c(o, batch), out)
    s = batch.sensitive["sex"].double()
    w0, w1 = (1 - s) / (1 - s).sum(), s / s.sum()
    expected = torch.stack([0.8 * w0 - w1, 0.8 * w1 - w0]) * c.surrogate.derivative(out)
    torch.testing.assert_close(jac, expected, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("make", [
    lambda: DisparateImpact("sex", delta=0.8), lambda: DisparateImpact("race", surrogate=Sigmoid(scale=5.0)),
    lambda: EqualImpact("race", delta=0.7, surrogate=Hinge()), lambda: DemographicParity("sex", 0.1),
    lambda: Covariance(["sex", "race"], 0.1), lambda: EqualizedOdds("sex", 0.8), lambda: EqualOpportunity("race", 0.9),
], ids=["di", "di-race-sigmoid", "ei-hinge", "dp", "covariance", "eodds", "eopp"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_rows_and_jacobian_in_closed_form_equal_autograd(make, dtype, batch, out):
    c = make()
    c.setup(batch)
    o = out.to(dtype)
    rows, jac = c.rows_and_jacobian(o, batch)
    assert torch.equal(rows, c(o, batch).detach()) and rows.dtype == dtype and jac.dtype == dtype
    reference = torch.autograd.functional.jacobian(lambda x: c(x, batch), o)
    tol = 1e-5 if dtype == torch.float32 else 1e-12
    torch.testing.assert_close(jac, reference, rtol=tol, atol=tol * float(reference.abs().max()))
    pair = ConstraintSet([c, DisparateImpact("sex", 0.9)]).rows_and_jacobian(o, batch)
    assert pair[0].shape == (c.n_rows + 2,) and pair[1].shape == (c.n_rows + 2, len(batch))


def test_members_with_one_surrogate_share_its_evaluation(batch, out, monkeypatch):
    """DI and EI on one attribute evaluate the smoothed step of the same outputs once per set call;
    the rows equal the members' own, and nothing is shared across calls or with another surrogate."""
    members = [DisparateImpact("sex", 0.8), EqualImpact("sex", 0.8), DisparateImpact("race", 0.9),
               DisparateImpact("sex", 0.7, surrogate=Sigmoid(scale=5.0))]
    for c in members:
        c.setup(batch)
    alone = [c.rows_and_jacobian(out, batch) for c in members]
    calls = []
    original = SmoothedStep.value_and_derivative
    monkeypatch.setattr(SmoothedStep, "value_and_derivative", lambda self, t: calls.append(1) or original(self, t))
    rows, jac = ConstraintSet(members).rows_and_jacobian(out, batch)
    assert len(calls) == 1  # three smoothed-step members, one threshold, one evaluation
    assert torch.equal(rows, torch.cat([r for r, _ in alone]))
    assert torch.equal(jac, torch.cat([j for _, j in alone]))
    ConstraintSet(members).rows_and_jacobian(out + 1.0, batch)
    assert len(calls) == 2  # a new call evaluates afresh


def test_rows_and_jacobian_defer_to_autograd_for_redefined_rows(batch, out):
    class Squared(DisparateImpact):  # redefines the transform only: no closed form
        def _transform(self, t, exact):
            return super()._transform(t, exact) ** 2

    c = Squared("sex")
    c.setup(batch)
    assert c.rows_and_jacobian(out, batch) is None
    assert ConstraintSet([DisparateImpact("sex"), c]).rows_and_jacobian(out, batch) is None


def test_rows_keep_the_dtype_of_out(batch, out):
    """The smooth rows keep ``out``'s dtype (the engine differentiates them); the exact rows are float64 whatever
    ``out``'s (counts of hard predictions, test_exact_rows_are_summed_in_float64...)."""
    c = DisparateImpact("race")
    assert c(out.float(), batch).dtype == torch.float32
    assert c(out, batch).dtype == torch.float64
    assert c.exact(out.float(), batch).dtype == torch.float64
    torch.testing.assert_close(c(out.float(), batch).double(), c(out, batch), rtol=0, atol=1e-5)


# ----------------------------------------------------------------------------- bounds, names, setup


def test_bounds_shapes_and_names(batch):
    di = DisparateImpact("sex", delta=0.8)
    di.setup(batch)
    assert di.lower.dtype == torch.float64 and di.upper.dtype == torch.float64
    assert di.lower.tolist() == [-math.inf, -math.inf] and di.upper.tolist() == [0.0, 0.0]
    assert di.name == "disparate_impact[sex]"
    assert di.row_names == ["disparate_impact[sex]:0.8*P[sex=M]-P[sex=F]",
                            "disparate_impact[sex]:0.8*P[sex=F]-P[sex=M]"]
    dp = DemographicParity("race", bound=0.1)
    dp.setup(batch)
    assert dp.lower.tolist() == [-0.1] * 3 and dp.upper.tolist() == [0.1] * 3
    assert dp.row_names[0] == "demographic_parity[race]:P[race=a]-P[not(race=a)]"
    pw = DisparateImpact("race", groups="pairwise")
    pw.setup(batch)
    assert pw.n_rows == 6 and len(pw.row_names) == 6
    cov = Covariance("age", bound=2.0)
    cov.setup(batch)
    assert cov.lower.tolist() == [-2.0] and cov.upper.tolist() == [2.0]
    assert cov.row_names == ["covariance[age]:cov(age,out)"]


def test_rows_are_sized_lazily_on_first_call(batch, out):
    c = DisparateImpact("race")
    with pytest.raises(AttributeError, match="setup"):
        _ = c.lower
    c(out, batch)
    assert c.upper.shape == (6,)


def test_constraint_set_composes_rows(batch, out):
    cs = ConstraintSet([DisparateImpact("sex"), DemographicParity("race", bound=0.1), Covariance("age", bound=1.0)])
    cs.setup(batch)
    assert cs.n_rows == 2 + 3 + 1 and len(cs.row_names) == 6
    values = cs(out, batch)
    assert values.shape == (6,)
    assert cs.exact(out, batch).shape == (6,)
    assert row_violations(values, cs.lower, cs.upper).shape == (6,)
    assert isinstance(cs.constraints[0], BaseConstraint)


def test_repr_and_pickle_without_cached_data(batch, out):
    c = DisparateImpact("sex", delta=0.75)
    # the constructor's arguments as given (scikit-learn style): no surrogate named, the smoothed step used
    assert repr(c).startswith("DisparateImpact(sensitive='sex', delta=0.75, surrogate=None,")
    assert c.surrogate == SmoothedStep()
    named = DisparateImpact("sex", delta=0.75, surrogate="smoothed_step")
    assert repr(named).startswith("DisparateImpact(sensitive='sex', delta=0.75, surrogate=SmoothedStep(")
    c(out, batch)
    clone = pickle.loads(pickle.dumps(c))
    assert len(clone._cache) == 0
    torch.testing.assert_close(clone(out, batch), c(out, batch))


# ----------------------------------------------------------------------------- empty groups


def test_empty_group_rows_are_zero_and_logged(out, caplog):
    b = make_batch(n=60, seed=3)
    b.sensitive["race"] = torch.where(b.sensitive["race"] == 2, torch.zeros_like(b.sensitive["race"]), b.sensitive["race"])
    c = DisparateImpact("race", delta=0.8)
    with caplog.at_level(logging.DEBUG, logger="fairopt.constraints.rates"):
        rows = c(out, b).detach().numpy()
    assert any("group they compare is empty" in r.getMessage() for r in caplog.records)
    df = frame(b, surrogate_values(c.surrogate, out))
    expected = di_rows(df, one_vs_rest(df, "race", 2), 0.8)  # groups a and b are informed
    np.testing.assert_allclose(rows[:4], expected, rtol=0, atol=1e-12)
    assert rows[4:].tolist() == [0.0, 0.0]  # group c is empty: no information
    grad = torch.autograd.functional.jacobian(lambda o: c(o, b), out)
    assert grad[4:].abs().max().item() == 0.0


def test_setup_warns_about_empty_groups():
    b = make_batch(n=40, seed=4)
    b.y = torch.where(b.sensitive["sex"] == 1, torch.zeros_like(b.y), b.y)  # no positives among S=1
    with pytest.warns(FairnessWarning, match="identically 0"):
        EqualImpact("sex").setup(b)
    assert EqualImpact("sex")(torch.randn(40, dtype=torch.float64), b).tolist() == [0.0, 0.0]


# ----------------------------------------------------------------------------- cache


def test_operator_is_built_once_per_batch_and_not_reused_across_batches(out, monkeypatch):
    c = DisparateImpact("race", delta=0.8)
    calls = []
    build = type(c)._build_operator
    monkeypatch.setattr(c, "_build_operator", lambda b: calls.append(id(b)) or build(c, b))
    first, second = make_batch(seed=0), make_batch(seed=5)  # same length, different groups
    for _ in range(3):
        c(out, first)
    assert len(calls) == 1
    rows_second = c(out, second).detach().numpy()
    assert len(calls) == 2
    df = frame(second, surrogate_values(c.surrogate, out))
    np.testing.assert_allclose(rows_second, di_rows(df, one_vs_rest(df, "race", 3), 0.8), rtol=0, atol=1e-12)
    c(out.float(), first)  # another dtype: its own entry
    assert len(calls) == 3
    for seed in range(10, 16):  # the cache is small: old batches are evicted
        c(out, make_batch(seed=seed))
    assert len(c._cache) <= 4


def test_levels_of_a_batch_must_match_setup(out):
    c = DisparateImpact("race")
    c.setup(make_batch(race_levels=3))
    with pytest.raises(ValueError, match="batch: its sensitive levels"):
        c(out, make_batch(race_levels=2, seed=1))


# ----------------------------------------------------------------------------- target encoding


@pytest.mark.parametrize(
    "make",
    [
        lambda: DisparateImpact("sex", delta=0.8),
        lambda: DisparateImpact(["sex", "race"], delta=0.7, groups="marginal"),
        lambda: DisparateImpact("race", delta=0.9, groups="pairwise"),
        lambda: EqualImpact("race", delta=0.8),
        lambda: DemographicParity("sex", bound=0.05),
        lambda: DemographicParity(["sex", "race"], bound=0.05),
    ],
    ids=["di", "di-marginal", "di-pairwise", "ei", "dp", "dp-cells"],
)
def test_target_encoding_rows_equal_exact_rows_on_hard_labels(make, batch):
    c = make()
    c.setup(batch)
    enc = c.target_encoding(batch)
    assert isinstance(enc, LinearEncoding) and enc.A_z.shape == (c.n_rows, len(batch)) and enc.n_aux == 0
    np.testing.assert_array_equal(enc.lb, c.lower.numpy())
    np.testing.assert_array_equal(enc.ub, c.upper.numpy())
    rng = np.random.default_rng(7)
    for _ in range(3):
        z = rng.integers(0, 2, len(batch)).astype(float)
        threshold = c.threshold
        out = torch.tensor(np.where(z == 1, threshold + 1.0, threshold - 1.0))
        exact = c.exact(out, batch)
        np.testing.assert_allclose(enc.A_z @ z, exact.numpy(), rtol=0, atol=1e-12)
        np.testing.assert_allclose(enc.residual(z), row_violations(exact, c.lower, c.upper).numpy(), rtol=0, atol=1e-12)


def test_target_encoding_of_binary_disparate_impact_is_the_documented_formula(batch):
    c = DisparateImpact("sex", delta=0.8)
    enc = c.target_encoding(batch)
    s = batch.sensitive["sex"].numpy()
    n0, n1 = (s == 0).sum(), (s == 1).sum()
    z = np.random.default_rng(2).integers(0, 2, len(batch)).astype(float)
    first = 0.8 * z[s == 0].sum() / n0 - z[s == 1].sum() / n1
    second = 0.8 * z[s == 1].sum() / n1 - z[s == 0].sum() / n0
    np.testing.assert_allclose(enc.A_z @ z, [first, second], rtol=0, atol=1e-12)
    dp = DemographicParity("sex", bound=0.1).target_encoding(batch)
    np.testing.assert_allclose(dp.A_z @ z, [z[s == 1].mean() - z[s == 0].mean()], rtol=0, atol=1e-12)
    np.testing.assert_array_equal(dp.lb, [-0.1])
    assert Covariance("sex", bound=0.1).target_encoding(batch) is None


# ----------------------------------------------------------------------------- validation


@pytest.mark.parametrize(
    "call, argument",
    [
        (lambda: DisparateImpact("sex", delta=0.0), "delta"),
        (lambda: DisparateImpact("sex", delta=1.2), "delta"),
        (lambda: DisparateImpact("sex", delta=float("nan")), "delta"),
        (lambda: DisparateImpact("sex", delta="0.8x"), "delta"),
        (lambda: EqualImpact("sex", delta=-0.5), "delta"),
        (lambda: DemographicParity("sex", bound=-0.1), "bound"),
        (lambda: DemographicParity("sex", bound=float("inf")), "bound"),
        (lambda: Covariance("sex", bound=-1.0), "bound"),
        (lambda: DisparateImpact("sex", groups="all"), "groups"),
        (lambda: Covariance("race", bound=0.1, groups="pairwise"), "groups"),
        (lambda: DisparateImpact(3), "sensitive"),
        (lambda: DisparateImpact([]), "sensitive"),
        (lambda: DisparateImpact(["sex", "sex"]), "sensitive"),
        (lambda: DisparateImpact("sex", surrogate="tanh"), "surrogate"),
        (lambda: DisparateImpact("sex", threshold=float("inf")), "threshold"),
    ],
)
def test_bad_constructor_input_raises_value_error_naming_the_argument(call, argument):
    with pytest.raises(ValueError, match=rf"^{argument}:"):
        call()


@pytest.mark.parametrize("when", ["setup", "call"])
def test_unknown_sensitive_name_lists_the_available_names(batch, out, when):
    c = DisparateImpact("gender")
    with pytest.raises(ValueError, match=r"^sensitive: unknown name 'gender'; available: \['age', 'race', 'sex'\]"):
        c.setup(batch) if when == "setup" else c(out, batch)


@pytest.mark.parametrize("cls", [DisparateImpact, EqualImpact, lambda s: DemographicParity(s, bound=0.1)])
def test_continuous_sensitive_for_rate_constraints_suggests_covariance(batch, cls):
    with pytest.raises(ValueError, match=r"^sensitive: .*age.*continuous.*Covariance"):
        cls("age").setup(batch)


def test_integer_coded_continuous_sensitive_suggests_declaring_it_categorical(batch):
    # integer codes inferred as continuous (three or more numbers): the error says how to declare them
    batch.sensitive["codes"] = batch.sensitive["race"].double()
    batch.sensitive_kinds["codes"] = "continuous"
    hint = r"'codes' holds 3 distinct integers.*sensitive_kinds=\{'codes': 'categorical'\}"
    with pytest.raises(ValueError, match=hint):
        DisparateImpact("codes").setup(batch)
    with pytest.raises(ValueError) as measured:  # a measured attribute gets no such hint
        DisparateImpact("age").setup(batch)
    assert "sensitive_kinds" not in str(measured.value)


def test_covariance_intersection_with_continuous_needs_marginal(batch):
    with pytest.raises(ValueError, match=r"^sensitive: .*intersection.*groups='marginal'"):
        Covariance(["sex", "age"], bound=0.1).setup(batch)


def test_bad_batch_contents_raise_value_error(batch, out):
    with pytest.raises(ValueError, match=r"^out: expected shape \(60,\)"):
        DisparateImpact("sex")(out[:10], batch)
    bad_y = make_batch()
    bad_y.y = bad_y.y * 2
    with pytest.raises(ValueError, match=r"^y:"):
        EqualImpact("sex")(out, bad_y)
    bad_codes = make_batch()
    bad_codes.sensitive["race"] = bad_codes.sensitive["race"] + 1
    with pytest.raises(ValueError, match=r"^sensitive\['race'\]: codes must lie in 0..2"):
        DisparateImpact("race")(out, bad_codes)
    bad_binary = make_batch()
    bad_binary.sensitive["sex"] = bad_binary.sensitive["sex"] * 3
    with pytest.raises(ValueError, match=r"^sensitive\['sex'\]: expected 0/1"):
        DisparateImpact("sex")(out, bad_binary)
    single = make_batch()
    single.sensitive_levels["race"] = ["a"]
    single.sensitive["race"] = torch.zeros_like(single.sensitive["race"])
    with pytest.raises(ValueError, match=r"^sensitive: 'race' has 1 level"):
        DisparateImpact("race").setup(single)


# ---------------------------------------------------------------------------------- small groups
def _groups_of(sizes: list[int], seed: int = 0):
    """FairData whose categorical attribute ``g`` has groups of the given sizes."""
    from fairopt import FairData

    rng = np.random.default_rng(seed)
    g = np.repeat(np.arange(len(sizes)), sizes)
    n = len(g)
    y = np.tile([0, 1], n // 2 + 1)[:n]
    return FairData.from_arrays(rng.normal(size=(n, 2)), y, {"g": g}, sensitive_kinds={"g": "categorical"})


def test_a_group_with_few_training_rows_is_named_at_setup():
    """Groups (and complements) of fewer than MIN_GROUP_ROWS rows are named with their counts, once."""
    from fairopt.constraints.rates import MIN_GROUP_ROWS

    data = _groups_of([200, MIN_GROUP_ROWS - 1, 3])
    with pytest.warns(FairnessWarning, match=r"fewer than 30 training rows: g=1 \(29 rows\), g=2 \(3 rows\)") as seen:
        DisparateImpact("g", 0.8).setup(data)
    assert len([w for w in seen if "training rows" in str(w.message)]) == 1
    assert "merge rare levels" in str(seen[0].message) and seen[0].filename == __file__  # the caller's line
    with pytest.warns(FairnessWarning, match=r"TPR:g=2 \(\d rows\)"):  # within the conditioned block
        EqualOpportunity("g", bound=0.1).setup(data)
    # two levels: nothing to merge; the advice says what a coarse rate means instead
    with pytest.warns(FairnessWarning, match=r"g=1 \(20 rows\)") as seen:
        DisparateImpact("g", 0.8).setup(_groups_of([200, 20]))
    assert "merge" not in str(seen[0].message) and str(seen[0].message).endswith(".")


def test_the_small_group_warning_comes_once_per_fit_with_the_training_rows_counts():
    """A boosted fit set its constraint up on the early-stopping probe's rows too (a group of 31 training
    rows reported as 22), and the command line's held-out evaluation called its counts "training rows"."""
    import warnings

    from fairopt import FairClassifier
    from fairopt.certificate import certify
    from fairopt.constraints.base import set_up_on_other_rows
    from fairopt.exceptions import SmallGroupWarning

    rng = np.random.default_rng(0)
    g = np.repeat([0, 1, 2], [600, 31, 300])
    X = rng.normal(size=(len(g), 3)) + 0.3 * g[:, None]
    y = (X[:, 0] + rng.normal(size=len(g)) > 0.3).astype(int)
    S = pd.DataFrame({"g": g.astype(str)})
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        clf = FairClassifier([("di", "g", 0.8)], model="gbm", epochs=40, seed=0).fit(X, y, sensitive_features=S)
    assert not [w for w in caught if issubclass(w.category, SmallGroupWarning)]  # 31 >= 30: the probe saw ~25
    held = _groups_of([100, 5])
    with warnings.catch_warnings():
        warnings.simplefilter("error", SmallGroupWarning)
        set_up_on_other_rows([DisparateImpact("g", 0.8)], held)
        rows = np.r_[0:40, 600:605, 631:671]  # a held-out sample with a group of 5 rows
        clf.evaluate(X[rows], y[rows], sensitive_features=S.iloc[rows])
        certify(np.zeros(len(held)), held, DisparateImpact("g", 0.8))
    with pytest.warns(SmallGroupWarning, match=r"g=1 \(5 rows\)"):
        DisparateImpact("g", 0.8).setup(held)


def test_groups_of_enough_rows_draw_no_warning():
    import warnings

    from fairopt.constraints.rates import MIN_GROUP_ROWS

    data = _groups_of([200, MIN_GROUP_ROWS, 2 * MIN_GROUP_ROWS])
    with warnings.catch_warnings():
        warnings.simplefilter("error", FairnessWarning)
        DisparateImpact("g", 0.8).setup(data)
        DemographicParity("g", bound=0.1, groups="pairwise").setup(data)


@pytest.mark.parametrize("make", [
    lambda: DisparateImpact("g", 0.8), lambda: DisparateImpact("g", 0.8, groups="pairwise"),
    lambda: DemographicParity(["g", "h"], bound=0.1),
    lambda: DemographicParity(["g", "h"], bound=0.1, groups="marginal"),
    lambda: EqualizedOdds("g", bound=0.1), lambda: EqualOpportunity(["g", "h"], bound=0.1)],
    ids=["one-vs-rest", "pairwise", "cells", "marginal", "equalized-odds", "conditioned-cells"])
def test_the_rows_counted_per_group_are_the_side_memberships(make):
    """The warning's counts (per-group counts) against the side-by-row membership matrix they replace."""
    from fairopt import FairData
    from fairopt.constraints.rates import _comparisons

    rng = np.random.default_rng(1)
    n = 400
    columns = {"g": rng.choice(4, n, p=[0.7, 0.2, 0.07, 0.03]), "h": rng.integers(0, 2, n)}
    data = FairData.from_arrays(rng.normal(size=(n, 2)), (rng.random(n) < 0.4).astype(int), columns,
                                sensitive_kinds={"g": "categorical", "h": "binary"})
    c = make()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        c.setup(data)
    sides, _ = _comparisons(c._partitions, pairwise=c.groups == "pairwise")
    assert c._side_rows(data, sides) == [int(k) for k in c._side_membership(data).sum(dim=1).tolist()]


def test_exact_rows_are_summed_in_float64_so_a_small_violation_at_scale_is_not_lost():
    """200,000 rows, float32 outputs, DI just below 0.95 (row +2.2e-5): the float32 sum of the 0/1 predictions
    read the row as -3e-5 (met); the exact rows and the partial sums are float64 now, as predict's counts."""
    from fairopt import FairData
    from fairopt.constraints import DisparateImpact

    rng = np.random.default_rng(0)
    n = 200_000
    sex = (rng.random(n) < 0.4).astype(int)
    data = FairData.from_arrays(np.zeros((n, 1)), (rng.random(n) < 0.5).astype(int), {"sex": sex})
    s = data.sensitive["sex"].numpy()
    n0, n1 = int((s == 0).sum()), int((s == 1).sum())
    k0 = n0 // 2
    k1 = int(np.floor(0.95 * k0 / n0 * n1)) - 1
    out = np.full(n, -1.0)
    out[np.flatnonzero(s == 0)[:k0]], out[np.flatnonzero(s == 1)[:k1]] = 1.0, 1.0
    true_row = 0.95 * k0 / n0 - k1 / n1
    c = DisparateImpact("sex", delta=0.95)
    c.setup(data)
    rows = c.exact(torch.tensor(out, dtype=torch.float32), data)
    assert rows.dtype == torch.float64 and 0 < true_row < 1e-4
    assert rows.max().item() == pytest.approx(true_row, rel=1e-9)
    sums, counts = c.partial_sums(torch.tensor(out, dtype=torch.float32), data, exact=True)
    assert sums.dtype == torch.float64 and c.from_sums(sums, counts).max().item() == pytest.approx(true_row, rel=1e-9)
