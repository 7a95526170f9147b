"""GeDI / DIDI measures and the GeDI constraint, checked against independent references:
closed forms (cov/var, DIDI), numpy least squares on independently built design matrices,
pandas group-bys and qcut, a QP solver (clarabel) for the projection encodings, finite
differences, and the published numbers on Communities & Crime and Adult."""

from __future__ import annotations

import types

import numpy as np
import pandas as pd
import pytest
import qpsolvers
import torch
from scipy import sparse

from fairopt.constraints.gedi import GeDI
from fairopt.exceptions import FairnessWarning
from fairopt.measures.gedi import binned_didi, didi, gedi
from solvers.problem import LinearEncoding

TIGHT = 1e-10


# ---------------------------------------------------------------------------- helpers
class Batch(types.SimpleNamespace):
    """Minimal stand-in for FairData (the fields the GeDI constraint reads)."""

    def __len__(self) -> int:
        return len(self.y)

    def subset(self, idx) -> "Batch":
        idx = torch.as_tensor(idx)
        return Batch(
            X=self.X[idx], y=self.y[idx], task=self.task,
            sensitive={k: v[idx] for k, v in self.sensitive.items()},
            sensitive_kinds=self.sensitive_kinds,
        )


def make_batch(x, y, task="regression", kind="continuous", name="s") -> Batch:
    x = torch.as_tensor(np.asarray(x), dtype=torch.float32)
    y = torch.as_tensor(np.asarray(y), dtype=torch.float32)
    return Batch(X=torch.zeros(len(y), 1), y=y, task=task, sensitive={name: x}, sensitive_kinds={name: kind})


def continuous_sample(n=400, seed=0):
    """Skewed continuous x (not standardised) and a target with linear+quadratic+cubic terms."""
    rng = np.random.default_rng(seed)
    x = rng.gamma(3.0, 2.0, size=n) + 5.0
    z = (x - x.mean()) / x.std()
    y = 0.3 * z + 0.2 * z**2 - 0.05 * z**3 + rng.normal(scale=0.5, size=n)
    return x, y


def reference_alpha(x, y, degree, kernel="poly", shift=None, scale=None):
    """Least squares with an explicit intercept column (no centring): by Frisch-Waugh the
    slopes equal GeDI's centred fit. Built independently of fairopt."""
    x = np.asarray(x, float)
    shift = x.mean() if shift is None else shift
    scale = x.std() if scale is None else scale
    z = (x - shift) / scale
    if kernel == "poly":
        cols = [z**j for j in range(1, degree + 1)]
    else:
        cols = [np.sin((j + 1) // 2 * z) if j % 2 else np.cos(j // 2 * z) for j in range(1, degree + 1)]
    design = np.column_stack([np.ones_like(z)] + cols)
    return np.linalg.lstsq(design, np.asarray(y, float), rcond=None)[0][1:]


def project(encoding, y, tol=1e-10):
    """min ||z - y||^2 subject to the encoding rows and auxiliary bounds (clarabel)."""
    n, m = encoding.A_z.shape[1], encoding.n_aux
    rows = np.hstack([encoding.A_z, encoding.A_a])
    eq = encoding.lb == encoding.ub
    g_parts, h_parts = [], []
    finite_ub, finite_lb = ~eq & np.isfinite(encoding.ub), ~eq & np.isfinite(encoding.lb)
    g_parts += [rows[finite_ub], -rows[finite_lb]]
    h_parts += [encoding.ub[finite_ub], -encoding.lb[finite_lb]]
    aux = np.hstack([np.zeros((m, n)), np.eye(m)])
    g_parts += [aux[np.isfinite(encoding.aux_ub)], -aux[np.isfinite(encoding.aux_lb)]]
    h_parts += [encoding.aux_ub[np.isfinite(encoding.aux_ub)], -encoding.aux_lb[np.isfinite(encoding.aux_lb)]]
    g, h = sparse.csc_matrix(np.vstack(g_parts)), np.concatenate(h_parts)
    p = sparse.diags(np.concatenate([np.full(n, 2.0), np.full(m, 0.0)]), format="csc")
    q = np.concatenate([-2.0 * np.asarray(y, float), np.zeros(m)])
    sol = qpsolvers.solve_qp(
        p, q, G=g if len(h) else None, h=h if len(h) else None,
        A=sparse.csc_matrix(rows[eq]) if eq.any() else None, b=encoding.lb[eq] if eq.any() else None,
        solver="clarabel", tol_feas=tol, tol_gap_abs=tol, tol_gap_rel=tol,
    )
    assert sol is not None, "clarabel failed"
    return sol[:n], sol[n:]


# ---------------------------------------------------------------------------- gedi measure
def test_gedi_v1_is_cov_over_var_with_population_standardisation():
    x, y = continuous_sample()
    cov = np.mean((x - x.mean()) * (y - y.mean()))
    # standardised x (population sd): |cov(z, y) / var(z)| = |cov(x, y)| / sd(x)
    assert gedi(x, y) == pytest.approx(abs(cov) / x.std(ddof=0), rel=TIGHT)
    # raw x: |cov(x, y) / var(x)| [GeDI eq 13]
    assert gedi(x, y, standardize=False) == pytest.approx(abs(cov) / x.var(ddof=0), rel=TIGHT)
    # the sample-sd convention would give a different number (so the test can tell)
    assert abs(gedi(x, y) - abs(cov) / x.std(ddof=1)) > 1e-4 * gedi(x, y)


@pytest.mark.parametrize("kernel", ["poly", "fourier"])
@pytest.mark.parametrize("degree", [1, 2, 3, 5])
def test_gedi_coefficients_match_intercept_least_squares(kernel, degree):
    x, y = continuous_sample(seed=degree)
    value, alpha = gedi(x, y, degree, kernel=kernel, return_coefficients=True)
    expected = reference_alpha(x, y, degree, kernel)
    np.testing.assert_allclose(alpha, expected, rtol=1e-9, atol=1e-12)
    assert value == pytest.approx(np.abs(expected).sum(), rel=1e-9)


def test_gedi_higher_degree_captures_polynomial_dependence():
    rng = np.random.default_rng(1)
    x = rng.normal(size=500)
    z = (x - x.mean()) / x.std()
    y = z**2 - np.mean(z**2)  # exactly quadratic in standardised x: alpha = (0, 1, 0)
    _, alpha = gedi(x, y, 3, return_coefficients=True)
    np.testing.assert_allclose(alpha, [0.0, 1.0, 0.0], atol=1e-10)


def test_binary_x_gedi_equals_regression_didi_and_half_classification_didi():
    rng = np.random.default_rng(2)
    x = rng.integers(0, 2, size=700)
    y = rng.normal(size=700) + 0.4 * x
    labels = (rng.uniform(size=700) < 0.3 + 0.3 * x).astype(float)
    # GeDI(V^1) with the 0/1 coding (not standardised) [GeDI App. A.4 eq 47, 49]
    assert gedi(x, y, standardize=False) == pytest.approx(didi(y, x), abs=TIGHT)
    assert gedi(x, labels, standardize=False) == pytest.approx(didi(labels, x, classification=True) / 2, abs=TIGHT)
    assert didi(labels, x, classification=True) == pytest.approx(2 * didi(labels, x), abs=TIGHT)
    # standardising x rescales GeDI(V^1) by sd(x) = sqrt(p (1 - p)): no longer the DIDI
    p = x.mean()
    assert gedi(x, y) == pytest.approx(didi(y, x) * np.sqrt(p * (1 - p)), rel=TIGHT)


def test_didi_matches_pandas_groupby():
    rng = np.random.default_rng(3)
    groups = rng.choice(np.array(["a", "b", "c"]), size=300, p=[0.5, 0.3, 0.2])
    y = rng.normal(size=300) + (groups == "b")
    frame = pd.DataFrame({"g": groups, "y": y})
    expected = (frame.groupby("g")["y"].mean() - y.mean()).abs().sum()
    assert didi(y, groups) == pytest.approx(expected, abs=TIGHT)
    labels = (y > 0.5).astype(int)
    frame["label"] = labels
    expected_c = sum(
        (frame.groupby("g")["label"].apply(lambda s, u=u: np.mean(s == u)) - np.mean(labels == u)).abs().sum()
        for u in (0, 1)
    )
    assert didi(labels, pd.Series(groups), classification=True) == pytest.approx(expected_c, abs=TIGHT)


def test_binned_didi_uses_pandas_qcut_bins():
    rng = np.random.default_rng(4)
    # a block of ties in the middle makes several quantile edges coincide (merged bins)
    x = np.concatenate([rng.uniform(0, 1, 200), np.full(200, 5.0), rng.uniform(10, 11, 100)])
    y = rng.normal(size=500) + x
    for bins in (2, 3, 5, 10, 40):
        codes = pd.qcut(x, bins, labels=False, duplicates="drop")
        frame = pd.DataFrame({"c": codes, "y": y})
        expected = (frame.groupby("c")["y"].mean() - y.mean()).abs().sum()
        assert binned_didi(y, x, bins) == pytest.approx(expected, abs=TIGHT)
    assert binned_didi(y, x, 1) == pytest.approx(0.0, abs=TIGHT)


def test_binned_didi_ignores_empty_bins():
    # 4 bins on two points: interpolated edges 2.5, 5, 7.5 leave the middle bins empty
    x, y = np.array([0.0, 10.0]), np.array([1.0, 3.0])
    assert binned_didi(y, x, 4) == pytest.approx(2.0, abs=TIGHT)  # |1 - 2| + |3 - 2|


def test_torch_inputs_match_numpy_and_keep_dtype():
    x, y = continuous_sample()
    groups = (x > np.median(x)).astype(float)
    xt, yt = torch.tensor(x), torch.tensor(y)
    value, alpha = gedi(xt, yt, 4, return_coefficients=True)
    ref_value, ref_alpha = gedi(x, y, 4, return_coefficients=True)
    assert isinstance(value, torch.Tensor) and value.dtype == torch.float64
    np.testing.assert_allclose(alpha.numpy(), ref_alpha, rtol=TIGHT)
    assert float(value) == pytest.approx(ref_value, rel=TIGHT)
    assert float(didi(yt, torch.tensor(groups))) == pytest.approx(didi(y, groups), abs=TIGHT)
    assert float(binned_didi(yt, xt, 5)) == pytest.approx(binned_didi(y, x, 5), abs=TIGHT)
    v32 = gedi(xt.float(), yt.float(), 2)
    assert v32.dtype == torch.float32 and float(v32) == pytest.approx(gedi(x, y, 2), rel=1e-5)


def test_gradients_match_finite_differences():
    x, y = continuous_sample(n=60)
    xt = torch.tensor(x)
    groups = torch.tensor((x > np.median(x)).astype(float))
    y0 = torch.tensor(y, requires_grad=True)
    assert torch.autograd.gradcheck(lambda v: gedi(xt, v, 3), (y0,), eps=1e-6, atol=1e-7, fast_mode=True)
    assert torch.autograd.gradcheck(lambda v: gedi(xt, v, 4, kernel="fourier"), (y0,), eps=1e-6, atol=1e-7, fast_mode=True)
    assert torch.autograd.gradcheck(lambda v: didi(v, groups), (y0,), eps=1e-6, atol=1e-7, fast_mode=True)
    probs = torch.sigmoid(y0.detach()).requires_grad_(True)
    assert torch.autograd.gradcheck(lambda v: didi(v, groups, classification=True), (probs,), eps=1e-6, atol=1e-7, fast_mode=True)


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(degree=0), "degree"),
        (dict(degree=1.5), "degree"),
        (dict(degree=True), "degree"),
        (dict(kernel="rbf"), "kernel"),
    ],
)
def test_gedi_rejects_bad_arguments(kwargs, match):
    x, y = continuous_sample(n=50)
    with pytest.raises(ValueError, match=match):
        gedi(x, y, **kwargs)


def test_gedi_and_didi_reject_bad_data():
    x, y = continuous_sample(n=50)
    with pytest.raises(ValueError, match="length mismatch"):
        gedi(x[:-1], y)
    with pytest.raises(ValueError, match="x: is constant"):
        gedi(np.ones(50), y)
    with pytest.raises(ValueError, match="non-finite"):
        gedi(x, np.where(np.arange(50) == 3, np.nan, y))
    with pytest.raises(ValueError, match="rank 1 < 2"):
        gedi((x > 10).astype(float), y, 2)  # binary x: x^2 is collinear with x
    with pytest.raises(ValueError, match="pred: classification"):
        didi(y, x > 10, classification=True)
    with pytest.raises(ValueError, match="sensitive: expected a 1-D"):
        didi(y, np.ones((50, 2)))
    with pytest.raises(ValueError, match="bins"):
        binned_didi(y, x, 0)


# ---------------------------------------------------------------------------- published numbers
def test_communities_gedi_v1_matches_paper(shared_data):
    path = shared_data / "communities.csv.gz"
    if not path.exists():
        pytest.skip(f"{path} is absent")
    frame = pd.read_csv(path)
    target = frame["violentPerPop"]
    # the GeDI authors min-max scale the regression target to [0, 1] (and standardise x
    # with the population sd); without the scaling GeDI(V^1) would be ~387.
    scaled = (target - target.min()) / (target.max() - target.min())
    assert gedi(frame["pctBlack"], scaled) == pytest.approx(0.0794, abs=5e-5)


def test_adult_gedi_on_age_matches_paper(shared_data):
    path = shared_data / "adult_onehot.csv.gz"
    if not path.exists():
        pytest.skip(f"{path} is absent")
    frame = pd.read_csv(path, usecols=["age", "income"])
    assert gedi(frame["age"], frame["income"], 1) == pytest.approx(0.1046, abs=5e-5)
    assert gedi(frame["age"], frame["income"], 5) == pytest.approx(0.3562, abs=5e-5)


# ---------------------------------------------------------------------------- constraint: rows
def test_relative_bound_is_fraction_of_training_gedi_v1():
    x, y = continuous_sample()
    data = make_batch(x, y)
    constraint = GeDI("s", 3, bound=0.2, relative=True)
    constraint.setup(data)
    expected = 0.2 * gedi(data.sensitive["s"].double().numpy(), data.y.double().numpy(), 1)
    assert constraint.absolute_bound == pytest.approx(expected, rel=1e-9)
    assert float(constraint.upper[0]) == pytest.approx(expected, rel=1e-9)


def test_coarse_rows_smooth_upper_bound_and_exact_l1():
    x, y = continuous_sample()
    data = make_batch(x, y)
    constraint = GeDI("s", 3, bound=0.5)
    constraint.setup(data)
    out = torch.tensor(y, dtype=torch.float64)
    exact_l1 = gedi(data.sensitive["s"].double().numpy(), y, 3)  # the float32 x the constraint sees
    smooth, exact = float(constraint(out, data)), float(constraint.exact(out, data))
    assert exact == pytest.approx(exact_l1, rel=1e-9)
    bias = 3 * np.sqrt(constraint.smoothing)
    assert exact_l1 <= smooth <= exact_l1 + bias + 1e-12
    assert bias == pytest.approx(0.1 * 0.5, rel=1e-9)  # default eps: <= 10% of the bound
    assert constraint.lower.shape == (1,) and np.isinf(float(constraint.lower[0]))


def test_fine_rows_are_coefficients_with_tolerance():
    x, y = continuous_sample()
    data = make_batch(x, y)
    constraint = GeDI("s", 4, bound=0.3, fine=True, tol=0.2)
    constraint.setup(data)
    out = torch.tensor(y, dtype=torch.float64)
    xs = data.sensitive["s"].double().numpy()
    np.testing.assert_allclose(constraint(out, data).numpy(), reference_alpha(xs, y, 4), rtol=1e-8, atol=1e-12)
    np.testing.assert_allclose(constraint.upper.numpy(), [0.3, 0.02, 0.02, 0.02])
    np.testing.assert_allclose(constraint.lower.numpy(), -constraint.upper.numpy())
    assert constraint.row_names[1].endswith("alpha_2")


def test_binary_task_uses_probabilities_and_hard_labels():
    x, _ = continuous_sample()
    rng = np.random.default_rng(5)
    logits = rng.normal(size=len(x))
    labels = (logits > 0).astype(float)
    data = make_batch(x, labels, task="binary")
    constraint = GeDI("s", 2, bound=0.1, fine=True)
    constraint.setup(data)
    out = torch.tensor(logits, dtype=torch.float32)
    xs, probs = data.sensitive["s"].double().numpy(), torch.sigmoid(out).double().numpy()
    np.testing.assert_allclose(constraint(out, data).numpy(), reference_alpha(xs, probs, 2), rtol=1e-6, atol=1e-9)
    np.testing.assert_allclose(constraint.exact(out, data).numpy(), reference_alpha(xs, labels, 2), rtol=1e-6, atol=1e-9)
    assert constraint(out, data).dtype == torch.float32


def test_poisson_task_uses_the_rate():
    x, y = continuous_sample()
    data = make_batch(x, np.round(np.exp(y)), task="poisson")
    constraint = GeDI("s", 2, bound=0.1, fine=True)
    constraint.setup(data)
    out = torch.tensor(y, dtype=torch.float64)
    xs = data.sensitive["s"].double().numpy()
    np.testing.assert_allclose(constraint(out, data).numpy(), reference_alpha(xs, np.exp(y), 2), rtol=1e-8)
    np.testing.assert_allclose(constraint.exact(out, data).numpy(), reference_alpha(xs, np.exp(y), 2), rtol=1e-8)


def test_a_relative_bound_on_a_poisson_rate_is_relative_to_the_observed_rate():
    """The prediction exp(out) is a rate per unit of exposure, so the relative bound's reference is GeDI of
    the observed rate y / exposure, not of the counts y (which differ where exposure varies with x)."""
    x, y = continuous_sample()
    rng = np.random.default_rng(1)
    exposure = np.clip(0.2 + 0.08 * (x - x.min()), 0.05, 1.0) * rng.uniform(0.7, 1.0, len(x))
    counts = rng.poisson(np.exp(0.3 * y) * exposure).astype(float)
    data = make_batch(x, counts, task="poisson")
    data.exposure = torch.as_tensor(exposure, dtype=torch.float32)
    constraint = GeDI("s", 1, bound=0.2, relative=True)
    constraint.setup(data)
    xs = data.sensitive["s"].double().numpy()
    rate = counts / data.exposure.double().numpy()
    assert constraint.reference == pytest.approx(float(np.abs(reference_alpha(xs, rate, 1)).sum()), rel=1e-5)
    assert constraint.reference != pytest.approx(float(np.abs(reference_alpha(xs, counts, 1)).sum()), rel=0.05)


def test_binary_sensitive_bound_reads_as_didi():
    rng = np.random.default_rng(6)
    s = rng.integers(0, 2, size=300)
    y = rng.normal(size=300) + 0.5 * s
    data = make_batch(s, y, kind="binary")
    constraint = GeDI("s", bound=0.1)
    constraint.setup(data)
    out = torch.tensor(y, dtype=torch.float64)
    assert float(constraint.exact(out, data)) == pytest.approx(didi(y, s), rel=1e-9)


def test_minibatch_uses_training_standardisation_and_batch_centring():
    x, y = continuous_sample()
    data = make_batch(x, y)
    constraint = GeDI("s", 3, bound=0.5, fine=True)
    constraint.setup(data)
    x32 = data.sensitive["s"].double().numpy()  # the float32 values the constraint sees
    idx = np.random.default_rng(7).choice(len(x), size=64, replace=False)
    batch = data.subset(idx)
    out = torch.tensor(y[idx], dtype=torch.float64)
    expected = reference_alpha(x32[idx], y[idx], 3, shift=x32.mean(), scale=x32.std())
    np.testing.assert_allclose(constraint(out, batch).numpy(), expected, rtol=1e-8)
    # the batch's own standardisation would give other coefficients (degree > 1)
    assert np.max(np.abs(reference_alpha(x32[idx], y[idx], 3) - expected)) > 1e-3


def test_batch_cache_is_per_object_and_never_stale():
    x, y = continuous_sample()
    data = make_batch(x, y)
    constraint = GeDI("s", 2, bound=0.5, fine=True)
    constraint.setup(data)
    out = torch.tensor(y, dtype=torch.float64)
    first = constraint._basis(data)
    constraint(out, data)
    assert constraint._basis(data) is first  # full-batch training builds the kernel once
    x32 = data.sensitive["s"].double().numpy()
    rng = np.random.default_rng(8)
    for _ in range(12):  # fresh batch objects of equal length (ids may be recycled)
        idx = rng.choice(len(x), size=50, replace=False)
        expected = reference_alpha(x32[idx], y[idx], 2, shift=x32.mean(), scale=x32.std())
        got = constraint(torch.tensor(y[idx], dtype=torch.float64), data.subset(idx))
        np.testing.assert_allclose(got.numpy(), expected, rtol=1e-8)


def test_rank_deficient_batch_warns_and_uses_minimum_norm():
    x, y = continuous_sample()
    data = make_batch(x, y)
    constraint = GeDI("s", 3, bound=0.5, fine=True)
    constraint.setup(data)
    x32 = data.sensitive["s"].numpy()
    idx = np.flatnonzero(x32 == x32[0])[:1].repeat(5)  # one distinct value
    with pytest.warns(FairnessWarning, match="rank 0 < 3"):
        rows = constraint(torch.tensor(y[idx]), data.subset(idx))
    np.testing.assert_array_equal(rows.numpy(), np.zeros(3))


def test_constraint_gradient_matches_finite_differences():
    x, y = continuous_sample(n=80)
    data = make_batch(x, (y > 0).astype(float), task="binary")
    for fine in (False, True):
        constraint = GeDI("s", 3, bound=0.05, fine=fine)
        constraint.setup(data)
        out = torch.tensor(y, dtype=torch.float64, requires_grad=True)
        assert torch.autograd.gradcheck(lambda o: constraint(o, data), (out,), eps=1e-6, atol=1e-7, fast_mode=True)


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(bound=-0.1), "bound"),
        (dict(bound=float("nan")), "bound"),
        (dict(bound=0.1, degree=0), "degree"),
        (dict(bound=0.1, degree=2.0), "degree"),
        (dict(bound=0.1, kernel="gauss"), "kernel"),
        (dict(bound=0.1, tol=-1.0), "tol"),
        (dict(bound=0.1, eps=0.0), "eps"),
        (dict(bound=0.1, fine="yes"), "fine"),
        (dict(bound=0.1, relative=1), "relative"),
    ],
)
def test_constraint_rejects_bad_arguments(kwargs, match):
    with pytest.raises(ValueError, match=match):
        GeDI("s", **kwargs)


def test_constraint_rejects_bad_data():
    x, y = continuous_sample(n=100)
    data = make_batch(x, y)
    data.sensitive["cat"] = torch.arange(100) % 3
    data.sensitive["bin"] = (torch.arange(100) % 2).float()
    data.sensitive["const"] = torch.ones(100)
    data.sensitive_kinds.update(cat="categorical", bin="binary", const="continuous")
    with pytest.raises(ValueError, match="unknown sensitive feature 'nope'"):
        GeDI("nope", bound=0.1).setup(data)
    with pytest.raises(ValueError, match="categorical"):
        GeDI("cat", bound=0.1).setup(data)
    with pytest.raises(ValueError, match="degree: 2 for the binary"):
        GeDI("bin", 2, bound=0.1).setup(data)
    with pytest.raises(ValueError, match="is constant"):
        GeDI("const", bound=0.1).setup(data)
    constraint = GeDI("s", bound=0.1)
    with pytest.raises(RuntimeError, match="setup"):
        constraint(torch.zeros(100), data)
    constraint.setup(data)
    with pytest.raises(ValueError, match="out: expected 100"):
        constraint(torch.zeros(99), data)


# ---------------------------------------------------------------------------- constraint: encodings
def test_coarse_encoding_projection_satisfies_exact_l1_bound():
    x, y = continuous_sample(n=200, seed=9)
    data = make_batch(x, y)
    constraint = GeDI("s", 3, bound=0.2, relative=True)
    constraint.setup(data)
    q = constraint.absolute_bound
    encoding = constraint.target_encoding(data)
    y32 = data.y.double().numpy()
    z, aux = project(encoding, y32)
    assert np.max(encoding.residual(z, aux)) < 1e-7
    _, alpha = gedi(data.sensitive["s"].double().numpy(), z, 3, return_coefficients=True)
    np.testing.assert_allclose(aux[:3], alpha, atol=1e-7)  # aux alpha tied by the normal equations
    assert np.abs(alpha).sum() <= q + 1e-7
    assert np.abs(alpha).sum() == pytest.approx(q, rel=1e-5)  # active: the original is far above q
    assert gedi(data.sensitive["s"].double().numpy(), y32, 3) > 3 * q


def test_coarse_encoding_degree_one_matches_closed_form_slab_projection():
    x, y = continuous_sample(n=200, seed=10)
    data = make_batch(x, y)
    constraint = GeDI("s", 1, bound=0.05)
    constraint.setup(data)
    z, _ = project(constraint.target_encoding(data), data.y.double().numpy())
    xs = data.sensitive["s"].double().numpy()
    w = (xs - xs.mean()) / xs.std() / len(xs)  # alpha(z) = w' z / var(z-scaled x) with var = 1
    y32 = data.y.double().numpy()
    target = np.sign(w @ y32) * 0.05
    expected = y32 - (w @ y32 - target) / (w @ w) * w  # projection onto the slab |w'z| <= q
    np.testing.assert_allclose(z, expected, atol=1e-6)


def test_fine_encoding_removes_higher_order_dependence():
    x, y = continuous_sample(n=200, seed=11)
    data = make_batch(x, y)
    constraint = GeDI("s", 4, bound=0.2, relative=True, fine=True)
    constraint.setup(data)
    q = constraint.absolute_bound
    encoding = constraint.target_encoding(data)
    assert encoding.n_aux == 0 and encoding.A_z.shape == (4, 200)
    y32, xs = data.y.double().numpy(), data.sensitive["s"].double().numpy()
    z, _ = project(encoding, y32)
    assert np.max(encoding.residual(z)) < 1e-8
    g4, g1 = gedi(xs, z, 4), gedi(xs, z, 1)
    assert g4 == pytest.approx(g1, abs=1e-6)
    assert g1 <= q + 1e-7
    assert gedi(xs, y32, 4) > 1.5 * gedi(xs, y32, 1)  # the original target had higher-order terms


@pytest.mark.parametrize("kernel", ["poly", "fourier"])
def test_fine_covariance_form_equals_coefficient_form_with_correlated_columns(kernel):
    """Independent reference: alpha_j(z) = (Ft^+ z)_j from numpy's pinv, rows alpha_2..k = 0
    and |alpha_1| <= q. Its projection must coincide with the covariance form's."""
    x, y = continuous_sample(n=200, seed=12)
    data = make_batch(x, y)
    constraint = GeDI("s", 4, bound=0.2, relative=True, fine=True, kernel=kernel)
    constraint.setup(data)
    q = constraint.absolute_bound
    xs = data.sensitive["s"].double().numpy()
    z_std = (xs - xs.mean()) / xs.std()
    if kernel == "poly":
        f = np.column_stack([z_std**j for j in range(1, 5)])
    else:
        f = np.column_stack([np.sin(z_std), np.cos(z_std), np.sin(2 * z_std), np.cos(2 * z_std)])
    f -= f.mean(axis=0)
    assert np.max(np.abs(np.corrcoef(f.T) - np.eye(4))) > 0.3  # strongly correlated columns
    pinv = np.linalg.pinv(f)
    reference = LinearEncoding(name="ref", A_z=pinv, lb=[-q, 0, 0, 0], ub=[q, 0, 0, 0])
    y32 = data.y.double().numpy()
    z_cov, _ = project(constraint.target_encoding(data), y32)
    z_ref, _ = project(reference, y32)
    np.testing.assert_allclose(z_cov, z_ref, atol=1e-6)


def test_fine_encoding_accepts_exactly_the_linear_targets():
    x, _ = continuous_sample(n=150, seed=13)
    data = make_batch(x, np.zeros(150))
    constraint = GeDI("s", 3, bound=0.4, fine=True)
    constraint.setup(data)
    encoding = constraint.target_encoding(data)
    xs = data.sensitive["s"].double().numpy()
    z_std = (xs - xs.mean()) / xs.std()
    f = np.column_stack([z_std, z_std**2, z_std**3])
    rng = np.random.default_rng(14)
    noise = rng.normal(size=150)
    design = np.column_stack([np.ones(150), f])
    noise -= design @ np.linalg.lstsq(design, noise, rcond=None)[0]  # orthogonal to the kernel
    linear = 0.3 * z_std + 2.0 + noise  # alpha = (0.3, 0, 0): feasible
    assert np.max(encoding.residual(linear)) < 1e-10
    assert np.max(encoding.residual(linear + 0.5 * z_std)) > 1e-3  # |alpha_1| = 0.8 > 0.4
    assert np.max(encoding.residual(linear + 0.1 * z_std**2)) > 1e-3  # alpha_2 != 0


def test_step_surrogate_rows_track_the_hard_label_gedi():
    """With surrogate="smoothed_step" the smooth rows of a binary task use phi(out), which
    equals the hard label away from the threshold, so they match exact() there; the
    default (probabilities) does not."""
    rng = np.random.default_rng(3)
    n = 300
    x = rng.normal(size=n)
    out = torch.tensor(np.where(rng.random(n) < 0.5, -1.0, 1.0) * (0.5 + rng.random(n)) + 0.8 * x)
    out = torch.where(out.abs() < 0.2, torch.sign(out) * 0.2, out)  # |out| >= 0.2 >> 1/scale
    batch = make_batch(x, (out > 0).double().numpy(), task="binary", name="age")
    step = GeDI("age", degree=2, bound=0.5, fine=True, surrogate="smoothed_step")
    prob = GeDI("age", degree=2, bound=0.5, fine=True)
    for con in (step, prob):
        con.setup(batch)
    # at |out| >= 0.2 (u = scale * out >= 10) phi is within ~mu/(4 u^2) = 2.5e-5 of the step
    torch.testing.assert_close(step(out, batch), step.exact(out, batch), atol=1e-4, rtol=0)
    assert float((prob(out, batch) - prob.exact(out, batch)).abs().max()) > 1e-2
