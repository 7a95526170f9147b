"""Tests of fairopt.measures.dcov and fairopt.constraints.dcov.DistanceCovariance.

References used here, independent of the fast paths:
- ``dcor.u_distance_covariance_sqr`` (naive method) for univariate pairs;
- an explicit O(n^2) U-centring [DC eq A.6-A.7] in torch float64 (its autograd gives the
  reference gradients; torch.abs has subgradient 0 at 0, i.e. sign(0) = 0);
- the JdCov~^2 definition of Chakraborty & Zhang as in their R package ``jdcov``
  (sum over all k, l of prod (U_i + c), U_i = -(U-centred matrix), minus c^d n/(n-3));
- the decomposition theorem 3.2.1 of [DC] with eta, xi of their eq (3.9)-(3.10);
- central finite differences (the statistics are piecewise linear in x, so they are exact
  up to round-off, also at ties).
"""

from __future__ import annotations

import math
import tracemalloc
from types import SimpleNamespace

import dcor
import numpy as np
import pytest
import torch

from fairopt.constraints.dcov import DistanceCovariance
from fairopt.measures._dcov_blocked import block_rows
from fairopt.measures.dcov import ccdcov, dcorr, dcov, encode_sensitive, jdcov, select_dcov_method
from solvers.problem import ConstraintSet

RTOL = 1e-9


# --------------------------------------------------------------------------- references


def _as_matrix(v) -> torch.Tensor:
    t = torch.as_tensor(v, dtype=torch.float64)
    return t.reshape(t.shape[0], -1)


def _distances(v) -> torch.Tensor:
    """Euclidean distance matrix; differentiable in a 1-D tensor (|x_i - x_j|)."""
    if isinstance(v, torch.Tensor) and v.dim() == 1:
        return (v[:, None] - v[None, :]).abs()
    m = _as_matrix(v)
    return ((m[:, None, :] - m[None, :, :]) ** 2).sum(-1).sqrt()


def _u_centre(a: torch.Tensor) -> torch.Tensor:
    """[DC eq A.7] written out: zero diagonal, row/column sums over n - 2."""
    n = a.shape[0]
    rows = a.sum(1)
    total = a.sum()
    centred = a - rows[:, None] / (n - 2) - rows[None, :] / (n - 2) + total / ((n - 1) * (n - 2))
    return centred * (1 - torch.eye(n, dtype=a.dtype))


def ref_dcov(x, s) -> torch.Tensor:
    """[DC eq A.6]: (1/(n(n-3))) sum_ij A~_ij B~_ij."""
    n = len(x)
    return (_u_centre(_distances(x)) * _u_centre(_distances(s))).sum() / (n * (n - 3))


def ref_dcorr(x, s) -> torch.Tensor:
    a, b = _u_centre(_distances(x)), _u_centre(_distances(s))
    return (a * b).sum() / torch.sqrt((a * a).sum() * (b * b).sum())


def ref_jdcov(variables, c: float = 1.0, sign: float = -1.0) -> torch.Tensor:
    """Chakraborty-Zhang bias-corrected JdCov~^2 (R package form); ``sign=-1`` is their U."""
    n = len(variables[0])
    product = torch.ones(n, n, dtype=torch.float64)
    for v in variables:
        product = product * (sign * _u_centre(_distances(v)) + c)
    d = len(variables)
    return product.sum() / (n * (n - 3)) - c**d * n / (n - 3)


def finite_difference_gradient(fn, x: np.ndarray, h: float = 1e-6) -> np.ndarray:
    grad = np.empty_like(x)
    for k in range(x.shape[0]):
        up, down = x.copy(), x.copy()
        up[k] += h
        down[k] -= h
        grad[k] = (fn(up) - fn(down)) / (2 * h)
    return grad


def _grad(value: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    (g,) = torch.autograd.grad(value, x)
    return g


@pytest.fixture
def rng() -> np.random.Generator:
    return np.random.default_rng(12345)


def _dependent_pair(rng, n: int, ties: str) -> tuple[np.ndarray, np.ndarray]:
    x = rng.normal(size=n)
    y = x + rng.normal(size=n)
    if ties in ("x", "both"):
        x = np.round(2 * x) / 2
    if ties in ("y", "both"):
        y = np.round(y)
    return x, y


# --------------------------------------------------------------------------- dCov values


@pytest.mark.parametrize("n", [4, 5, 11, 64, 257, 1000])
@pytest.mark.parametrize("ties", ["none", "x", "y", "both"])
def test_univariate_values_equal_dcor(rng, n, ties):
    x, y = _dependent_pair(rng, n, ties)
    expected = dcor.u_distance_covariance_sqr(x, y, method="naive")
    for method in ("auto", "univariate", "grouped", "blocked"):
        np.testing.assert_allclose(dcov(x, y, method=method), expected, rtol=RTOL, atol=1e-14, err_msg=method)


def test_large_n_paths_agree_including_gradient(rng):
    n = 20_000
    x = np.round(rng.normal(size=n) * 20) / 20  # many ties
    s = rng.integers(18, 60, size=n).astype(float)  # integer ages: 42 values
    x = x + 0.01 * s
    values = {}
    for method in ("grouped", "univariate"):
        xt = torch.tensor(x, requires_grad=True)
        value = dcov(xt, s, method=method)
        values[method] = (float(value.detach()), _grad(value, xt).numpy())
    np.testing.assert_allclose(values["grouped"][0], values["univariate"][0], rtol=RTOL)
    np.testing.assert_allclose(values["grouped"][1], values["univariate"][1], rtol=1e-7, atol=1e-15)
    np.testing.assert_allclose(values["grouped"][0], dcor.u_distance_covariance_sqr(x, s, method="mergesort"),
                               rtol=1e-7)


def _categorical(rng, n, k):
    return np.eye(k)[rng.integers(0, k, size=n)]


@pytest.mark.parametrize("case", ["categorical", "concatenated", "mixed", "codes"])
def test_grouped_values_equal_bruteforce(rng, case):
    n = 150
    if case == "categorical":
        s = _categorical(rng, n, 5)
    elif case == "concatenated":
        s = np.hstack([_categorical(rng, n, 3), _categorical(rng, n, 4), (rng.random(n) < 0.3)[:, None]])
    elif case == "mixed":
        s = np.hstack([_categorical(rng, n, 3), rng.integers(20, 26, size=(n, 1))])
    else:
        s = rng.integers(0, 6, size=n).astype(float)
    x = rng.normal(size=n) + _as_matrix(s).numpy() @ rng.normal(size=_as_matrix(s).shape[1])
    expected = float(ref_dcov(x, s))
    assert select_dcov_method(s) == "grouped"
    for method in ("auto", "grouped", "blocked"):
        np.testing.assert_allclose(dcov(x, s, method=method), expected, rtol=RTOL, err_msg=method)


def test_blocked_multivariate_equals_bruteforce(rng):
    n = 120
    s = rng.normal(size=(n, 3))
    x = s[:, 0] ** 2 + rng.normal(size=n)
    expected = float(ref_dcov(x, s))
    assert select_dcov_method(s) == "blocked"
    for block_size in (None, 1, 7, n):
        np.testing.assert_allclose(dcov(x, s, block_size=block_size), expected, rtol=RTOL)


def test_values_can_be_negative_and_are_not_clamped(rng):
    n = 40
    x, s = rng.normal(size=n), rng.normal(size=n)
    value = dcov(x, s)
    assert value < 0
    np.testing.assert_allclose(value, float(ref_dcov(x, s)), rtol=RTOL)


def test_projection_is_seeded_exact_in_1d_and_close_in_3d(rng):
    n = 200
    s1 = rng.normal(size=n)
    x = s1 + rng.normal(size=n)
    np.testing.assert_allclose(dcov(x, s1, method="projection", n_projections=3), dcov(x, s1), rtol=RTOL)
    s = np.column_stack([s1, rng.normal(size=(n, 2))])
    exact = dcov(x, s, method="blocked")
    first = dcov(x, s, method="projection", n_projections=1000, seed=3)
    assert first == dcov(x, s, method="projection", n_projections=1000, seed=3)
    assert first != dcov(x, s, method="projection", n_projections=1000, seed=4)
    # per-direction standard deviation ~0.3 exact -> Monte Carlo error ~1% for 1000 directions
    assert abs(first - exact) < 0.05 * exact


# --------------------------------------------------------------------------- gradients


@pytest.mark.parametrize("case", ["grouped", "univariate", "blocked"])
def test_gradient_equals_autograd_reference_and_finite_differences(rng, case):
    n = 40
    x = np.round(rng.normal(size=n) * 2) / 2  # ties in x
    if case == "grouped":
        s = _categorical(rng, n, 3)
    elif case == "univariate":
        s = np.round(rng.normal(size=n), 1)  # ties in s
    else:
        s = np.column_stack([rng.normal(size=n), rng.integers(0, 2, size=n)])
    if case != "univariate":  # n = 40 is below the distinct-value limit of "auto"
        assert select_dcov_method(s) == case
    xt = torch.tensor(x, requires_grad=True)
    gradient = _grad(dcov(xt, s, method=case), xt).numpy()
    xr = torch.tensor(x, requires_grad=True)
    reference = _grad(ref_dcov(xr, s), xr).numpy()
    np.testing.assert_allclose(gradient, reference, rtol=1e-9, atol=1e-13)
    numeric = finite_difference_gradient(lambda v: dcov(v, s, method=case), x)
    np.testing.assert_allclose(gradient, numeric, rtol=1e-6, atol=1e-9)
    assert np.count_nonzero(np.abs(gradient) > 1e-12) > n // 2  # not a trivially zero gradient


def test_torch_dtype_device_and_numpy_agree(rng):
    n = 300
    s = rng.integers(0, 4, size=n)
    x64 = rng.normal(size=n) + s
    x32 = torch.tensor(x64, dtype=torch.float32, requires_grad=True)
    value = dcov(x32, s)
    assert isinstance(value, torch.Tensor) and value.dim() == 0 and value.dtype == torch.float32
    assert _grad(value, x32).dtype == torch.float32
    # float64 accumulation: the float32 input gives the float64 value of its (rounded) entries
    np.testing.assert_allclose(float(value.detach()), dcov(x32.detach().double().numpy(), s), rtol=1e-6)
    plain = dcov(torch.tensor(x64), s)
    assert isinstance(plain, torch.Tensor) and not plain.requires_grad
    assert isinstance(dcov(x64, s), float)
    np.testing.assert_allclose(float(plain), dcov(x64, s), rtol=1e-15)


def test_batched_vector_jacobian_products(rng):
    """The engines pull several constraint rows back at once."""
    n = 40
    codes = rng.integers(0, 3, size=n)
    age = rng.normal(size=n)
    x = torch.tensor(rng.normal(size=n) + codes, requires_grad=True)

    def rows(v: torch.Tensor) -> torch.Tensor:
        return torch.stack([dcov(v, age), dcorr(v, codes), jdcov(v, codes, age), ccdcov(v, codes, age)])

    values = rows(x)
    eye = torch.eye(4, dtype=torch.float64)
    (batched,) = torch.autograd.grad(values, x, grad_outputs=eye, is_grads_batched=True, retain_graph=True)
    single = torch.stack([torch.autograd.grad(values[i], x, retain_graph=True)[0] for i in range(4)])
    np.testing.assert_allclose(batched.numpy(), single.numpy(), rtol=1e-12, atol=1e-15)
    _, vjp_fn = torch.func.vjp(rows, x.detach())
    (functional,) = torch.func.vmap(vjp_fn)(eye)
    np.testing.assert_allclose(functional.numpy(), single.numpy(), rtol=1e-12, atol=1e-15)
    assert single.abs().sum(1).min() > 0


# --------------------------------------------------------------------------- dCorr


def test_dcorr_value_gradient_and_degenerate_cases(rng):
    n = 60
    s = rng.integers(0, 3, size=n)
    x = np.round(rng.normal(size=n) + s, 1)
    xt = torch.tensor(x, requires_grad=True)
    value = dcorr(xt, s)
    xr = torch.tensor(x, requires_grad=True)
    reference = ref_dcorr(xr, s)
    np.testing.assert_allclose(value.item(), reference.item(), rtol=RTOL)
    np.testing.assert_allclose(_grad(value, xt).numpy(), _grad(reference, xr).numpy(), rtol=1e-8, atol=1e-13)
    np.testing.assert_allclose(dcorr(x, s), reference.item(), rtol=RTOL)
    np.testing.assert_allclose(dcorr(x, x), 1.0, rtol=1e-12)
    constant = torch.ones(n, dtype=torch.float64, requires_grad=True)
    zero = dcorr(constant, s)
    assert zero.item() == 0.0 and _grad(zero, constant).abs().max() == 0
    assert dcorr(x, np.ones(n)) == 0.0


# --------------------------------------------------------------------------- JdCov


@pytest.mark.parametrize("c", [1.0, 0.5])
@pytest.mark.parametrize("case", ["binary+categorical", "categorical+continuous", "three_mixed"])
def test_jdcov_equals_definition(rng, c, case):
    n = 36
    binary = (rng.random(n) < 0.4).astype(float)
    codes = rng.integers(0, 3, size=n)
    continuous = rng.normal(size=(n, 2))
    features = {
        "binary+categorical": [binary, codes],
        "categorical+continuous": [codes, continuous],
        "three_mixed": [binary, codes, continuous[:, 0]],
    }[case]
    x = np.round(rng.normal(size=n) + codes + binary, 1)
    encoded = [np.eye(3)[f] if f is codes else f for f in features]
    xr = torch.tensor(x, requires_grad=True)
    reference = ref_jdcov([xr] + encoded, c)
    reference_grad = _grad(reference, xr).numpy()
    for method in ("auto", "grouped", "blocked"):
        xt = torch.tensor(x, requires_grad=True)
        value = jdcov(xt, *features, c=c, method=method)
        np.testing.assert_allclose(value.item(), reference.item(), rtol=RTOL, err_msg=method)
        np.testing.assert_allclose(_grad(value, xt).numpy(), reference_grad, rtol=1e-8, atol=1e-13, err_msg=method)
    np.testing.assert_allclose(jdcov(x, *features, c=c), reference.item(), rtol=RTOL)


def test_jdcov_sign_convention_and_decomposition(rng):
    """[DC eq 3.5] with Chakraborty-Zhang's U = -U~: pair terms plus the triple term of U's."""
    n = 30
    s1 = rng.normal(size=n)
    s2 = s1 ** 2 + rng.normal(size=n)
    x = s1 * s2 + rng.normal(size=n)
    value = jdcov(x, s1, s2)
    u = [-_u_centre(_distances(v)) for v in (x, s1, s2)]
    triple = float((u[0] * u[1] * u[2]).sum()) / (n * (n - 3))
    pairs = dcov(x, s1) + dcov(x, s2) + dcov(s1, s2)
    np.testing.assert_allclose(value, pairs + triple, rtol=RTOL)
    flipped = float(ref_jdcov([x, s1, s2], sign=+1.0))  # the paper's eq (B.5) as printed
    np.testing.assert_allclose(flipped, pairs - triple, rtol=RTOL)
    assert abs(triple) > 1e-3 * abs(value)  # the convention matters for this sample


def test_jdcov_with_one_feature_is_dcov(rng):
    n = 50
    s = rng.normal(size=n)
    x = s + rng.normal(size=n)
    np.testing.assert_allclose(jdcov(x, s), dcov(x, s), rtol=RTOL)
    np.testing.assert_allclose(jdcov(x, s, c=3.0), float(ref_jdcov([x, s], c=3.0)), rtol=RTOL)


# --------------------------------------------------------------------------- CCdCov


def _paper_eta(y: np.ndarray, blocks: list[np.ndarray]) -> float:
    """eta of [DC eq 3.9] with xi of eq 3.10 (sum over feature pairs k < l, see below)."""
    n = len(y)
    a = _distances(y).numpy()
    parts = [_distances(b).numpy() for b in blocks]
    joint = _distances(np.hstack(blocks)).numpy()
    pair_products = sum(parts[k] * parts[l] for k in range(len(parts)) for l in range(k + 1, len(parts)))
    denominator = joint + sum(parts)
    xi = np.where(joint > 0, -2 * pair_products / np.where(denominator > 0, denominator, 1), 0.0)
    total = (a * xi).sum() + a.sum() * xi.sum() / ((n - 1) * (n - 2)) - 2 / (n - 2) * (a.sum(1) * xi.sum(1)).sum()
    return total / (n * (n - 3))


def test_ccdcov_decomposition_theorem(rng):
    """CCdCov = sum_k dCov~^2(y, s_k) + eta [DC Thm 3.2.1].

    As printed, eq (3.10) sums 2|.||.| over all 1 <= k, l <= d and eq (3.9) carries a
    leading minus; the identity (C.4) behind the proof needs the sum over k < l, and with
    xi defined negative (C.3) eta enters with a plus sign. Both are checked below: the
    corrected form holds to round-off, the printed sign does not.
    """
    n = 45
    s1 = rng.normal(size=(n, 2))
    codes = rng.integers(0, 3, size=n)
    age = rng.integers(20, 70, size=n).astype(float)
    y = s1[:, 0] + codes + 0.05 * age + rng.normal(size=n)
    blocks = encode_sensitive([s1, codes, age], n, categorical=[False, True, False])
    value = ccdcov(y, s1, codes, age, categorical=[False, True, False])
    marginal = sum(dcov(y, block) for block in blocks)
    eta = _paper_eta(y, blocks)
    np.testing.assert_allclose(value, marginal + eta, rtol=RTOL)
    assert abs(value - (marginal - eta)) > 1e-3 * abs(value)
    np.testing.assert_allclose(value, float(ref_dcov(y, np.hstack(blocks))), rtol=RTOL)


def test_ccdcov_encoding_and_inference(rng):
    n = 80
    codes = rng.integers(0, 4, size=n)
    labels = np.array(["a", "b", "c", "d"])[codes]
    age = rng.integers(20, 30, size=n)
    x = rng.normal(size=n) + codes
    one_hot = np.eye(4)[codes]
    expected = dcov(x, np.column_stack([one_hot, age]))
    np.testing.assert_allclose(ccdcov(x, codes, age.astype(float)), expected, rtol=RTOL)
    np.testing.assert_allclose(ccdcov(x, labels, age, categorical=[None, False]), expected, rtol=RTOL)
    np.testing.assert_allclose(ccdcov(x, torch.tensor(codes), torch.tensor(age, dtype=torch.float32)), expected,
                               rtol=RTOL)
    assert ccdcov(x, codes, age) != pytest.approx(expected)  # integer age inferred categorical
    np.testing.assert_allclose(ccdcov(x, codes, categorical=False), dcov(x, codes), rtol=RTOL)


# --------------------------------------------------------------------------- paths


def test_auto_never_picks_blocked_for_grouped_or_univariate(rng):
    n = 5000
    cases = {
        "binary": ((rng.random(n) < 0.5).astype(float), "grouped"),
        "codes": (rng.integers(0, 12, size=n), "grouped"),
        "one_hot": (_categorical(rng, n, 12), "grouped"),
        "concatenated": (np.hstack([_categorical(rng, n, 3), _categorical(rng, n, 5)]), "grouped"),
        "mixed_cells": (np.hstack([_categorical(rng, n, 4), rng.integers(18, 90, size=(n, 1))]), "grouped"),
        "integer_age": (rng.integers(18, 90, size=n).astype(float), "grouped"),
        "continuous": (rng.normal(size=n), "univariate"),
        "many_integers": (rng.integers(0, 1000, size=n), "univariate"),
    }
    for name, (s, expected) in cases.items():
        assert select_dcov_method(s) == expected, name
    assert select_dcov_method(rng.normal(size=(n, 2))) == "blocked"
    assert select_dcov_method(rng.normal(size=(n, 2)), method="projection") == "projection"


@pytest.mark.parametrize("n", [20_001, 100_000, 1_000_000])
def test_blocked_block_never_holds_an_n_by_n_matrix(n):
    rows = block_rows(n)
    assert 1 <= rows < n
    assert rows * n <= 1 << 22


def test_blocked_memory_stays_at_the_block_size(rng):
    n = 2500
    s = rng.normal(size=(n, 2))
    x = s[:, 0] + rng.normal(size=n)
    tracemalloc.start()
    value = dcov(x, s, method="blocked", block_size=50)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert peak < n * n * 8 / 8  # an n x n float64 matrix would take 50 MB
    np.testing.assert_allclose(value, dcov(x, s, method="blocked"), rtol=RTOL)


# --------------------------------------------------------------------------- validation


def test_invalid_inputs_raise_value_errors(rng):
    x, s = rng.normal(size=10), rng.normal(size=10)
    with pytest.raises(ValueError, match="x: .*at least 4"):
        dcov(x[:3], s[:3])
    with pytest.raises(ValueError, match="s: has 9 rows"):
        dcov(x, s[:9])
    with pytest.raises(ValueError, match="s: contains non-finite"):
        dcov(x, np.where(np.arange(10) == 3, np.nan, s))
    with pytest.raises(ValueError, match="x: contains non-finite"):
        dcov(np.where(np.arange(10) == 3, np.inf, x), s)
    with pytest.raises(ValueError, match="x: contains non-finite"):
        dcov(torch.tensor(np.where(np.arange(10) == 3, np.nan, x), requires_grad=True), s)
    with pytest.raises(ValueError, match="x: expected a 1-D array"):
        dcov(torch.zeros(10, 2), s)
    with pytest.raises(ValueError, match="method: expected one of"):
        dcov(x, s, method="fast")
    with pytest.raises(ValueError, match="univariate s, got 2 columns"):
        dcov(x, np.column_stack([s, s]), method="univariate")
    with pytest.raises(ValueError, match="n_projections"):
        dcov(x, s, method="projection", n_projections=0)
    with pytest.raises(ValueError, match="seed"):
        dcov(x, s, method="projection", seed="a")
    with pytest.raises(ValueError, match="block_size"):
        dcov(x, s, method="blocked", block_size=0)
    with pytest.raises(ValueError, match="c: expected a finite positive"):
        jdcov(x, s, s, c=0.0)
    with pytest.raises(ValueError, match="method: expected one of"):
        jdcov(x, s, s, method="univariate")
    with pytest.raises(ValueError, match="categorical: expected one flag"):
        ccdcov(x, s, s, categorical=[True])
    with pytest.raises(ValueError, match="s: at least one"):
        ccdcov(x)
    with pytest.raises(ValueError, match=r"s\[0\]: contains missing"):
        ccdcov(x, np.array(["a", None] * 5, dtype=object))


# --------------------------------------------------------------------------- constraint


class _Batch(SimpleNamespace):
    def __len__(self) -> int:
        return int(self.y.shape[0])


def _batch(task: str = "binary", n: int = 64, seed: int = 0) -> _Batch:
    g = torch.Generator().manual_seed(seed)
    race = torch.randint(0, 3, (n,), generator=g)
    return _Batch(
        X=torch.randn(n, 2, generator=g),
        y=(torch.rand(n, generator=g) < 0.5).float(),
        task=task,
        sensitive={
            "sex": (torch.rand(n, generator=g) < 0.5).float(),
            "race": race,
            "age": (torch.rand(n, generator=g) * 50 + 18).round(),
        },
        sensitive_kinds={"sex": "binary", "race": "categorical", "age": "continuous"},
        sensitive_levels={"sex": ["F", "M"], "race": ["a", "b", "c"], "age": []},
        exposure=None,
    )


@pytest.mark.parametrize("task,link", [("binary", torch.sigmoid), ("regression", lambda o: o), ("poisson", torch.exp)])
def test_constraint_value_and_gradient_per_task(task, link):
    batch = _batch(task)
    out = torch.randn(len(batch), dtype=torch.float64, requires_grad=True)
    constraint = DistanceCovariance(["sex", "race", "age"], bound=0.01, kind="ccdcov")
    value = constraint(out, batch)
    assert value.shape == (1,)
    s = np.column_stack([batch.sensitive["sex"].numpy(), np.eye(3)[batch.sensitive["race"].numpy()],
                         batch.sensitive["age"].numpy()])
    reference_out = out.detach().clone().requires_grad_(True)
    reference = ref_dcov(link(reference_out), s)
    np.testing.assert_allclose(value.item(), reference.item(), rtol=RTOL)
    np.testing.assert_allclose(_grad(value.sum(), out).numpy(), _grad(reference, reference_out).numpy(),
                               rtol=1e-8, atol=1e-13)
    exact = constraint.exact(out, batch)
    assert not exact.requires_grad and exact.item() == value.item()


def test_constraint_kinds(rng):
    batch = _batch("regression")
    out = torch.randn(len(batch), dtype=torch.float64) + batch.sensitive["race"]
    names = ["sex", "race"]
    dcov_value = DistanceCovariance(names, 1.0, kind="dcov")(out, batch)
    ccdcov_value = DistanceCovariance(names, 1.0, kind="ccdcov")(out, batch)
    assert dcov_value.item() == pytest.approx(ccdcov_value.item(), rel=1e-12)
    single = DistanceCovariance("sex", 1.0)(out, batch)
    np.testing.assert_allclose(single.item(), dcov(out, batch.sensitive["sex"]), rtol=RTOL)
    jd = DistanceCovariance(names, 1.0, kind="jdcov", c=0.5)(out, batch)
    reference = ref_jdcov([out, batch.sensitive["sex"].double(), np.eye(3)[batch.sensitive["race"].numpy()]], c=0.5)
    np.testing.assert_allclose(jd.item(), reference.item(), rtol=RTOL)


@pytest.mark.parametrize("kind, method", [("dcov", "auto"), ("ccdcov", "auto"), ("jdcov", "auto"),
                                          ("ccdcov", "projection")])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_exact_is_the_smooth_value_so_engines_reuse_it(kind, method, dtype, monkeypatch):
    from solvers.derivatives import LocalDerivatives
    from solvers.losses import mse_loss

    batch = _batch("regression")
    names = ["sex", "race"] if method == "auto" else ["age", "sex"]
    constraint = DistanceCovariance(names, 1.0, kind=kind, method=method)
    out = torch.randn(len(batch), dtype=dtype, generator=torch.Generator().manual_seed(1)) + batch.sensitive["sex"].to(dtype)
    assert DistanceCovariance.smooth_is_exact and ConstraintSet([constraint]).smooth_is_exact
    assert torch.equal(constraint.exact(out, batch), constraint(out, batch).detach())  # the declaration holds
    # the SQP oracle then takes c_exact from c: exact() is never evaluated, and the value is the same
    model = torch.nn.Linear(2, 1)
    cons = ConstraintSet([constraint])
    cons.setup(batch)
    calls = []
    monkeypatch.setattr(DistanceCovariance, "exact", lambda self, o, b: calls.append(1) or self(o, b).detach())
    der = LocalDerivatives()(model, list(model.parameters()), mse_loss, cons, batch, batch)
    assert not calls
    with torch.no_grad():
        assert torch.equal(der.c_exact, constraint(model(batch.X).reshape(-1), batch).to(torch.float64))


def test_constraint_bounds_violation_and_constraint_set():
    batch = _batch("regression")
    out = batch.sensitive["age"].double() / 10  # strongly dependent on age
    constraint = DistanceCovariance(["age"], bound=0.05)
    assert constraint.n_rows == 1 and constraint.name == "dcov[age]"
    assert float(constraint.lower[0]) == -math.inf and float(constraint.upper[0]) == 0.05
    value = float(constraint.exact(out, batch))
    assert value > 0.05
    np.testing.assert_allclose(float(constraint.violation(out, batch)), value - 0.05, rtol=1e-12)
    both = ConstraintSet([constraint, DistanceCovariance("sex", 1.0)])
    assert both(out, batch).shape == (2,) and both.lower.shape == (2,)
    assert "DistanceCovariance(sensitive=['age'], bound=0.05" in repr(constraint)


def test_constraint_validation():
    batch = _batch()
    out = torch.zeros(len(batch))
    for bound in (-0.1, float("nan"), float("inf"), "a", "0.5", True, None):
        with pytest.raises(ValueError, match="bound"):
            DistanceCovariance("sex", bound)
    with pytest.raises(ValueError, match="sensitive"):
        DistanceCovariance([], 0.1)
    with pytest.raises(ValueError, match="kind"):
        DistanceCovariance("sex", 0.1, kind="hsic")
    with pytest.raises(ValueError, match="method"):
        DistanceCovariance(["sex", "race"], 0.1, kind="jdcov", method="univariate")
    with pytest.raises(ValueError, match="c: "):
        DistanceCovariance("sex", 0.1, kind="jdcov", c=-1)
    unknown = DistanceCovariance(["sex", "income"], 0.1)
    with pytest.raises(ValueError, match="unknown name 'income'"):
        unknown(out, batch)
    with pytest.raises(ValueError, match="unknown name 'income'"):
        unknown.setup(batch)
    with pytest.raises(ValueError, match="out: expected shape"):
        DistanceCovariance("sex", 0.1)(out[:10], batch)
    batch.task = "multiclass"
    with pytest.raises(ValueError, match="batch.task"):
        DistanceCovariance("sex", 0.1)(out, batch)
    batch.task = "binary"
    batch.sensitive_kinds = dict(batch.sensitive_kinds, sex="ordinal")
    with pytest.raises(ValueError, match="sensitive_kinds"):
        DistanceCovariance("sex", 0.1)(out, batch)


def test_minibatch_sqp_meets_a_dcov_bound_on_all_rows():
    """Stochastic SQP with the distance-covariance row estimated on each mini-batch (a
    U-statistic, unbiased per batch): the full-batch end-game returns a model whose
    U-centred dCov^2 with the sensitive feature, recomputed on ALL rows by dcor, meets the
    bound."""
    from fairopt import models
    from fairopt.data import FairData
    from solvers import StochasticSQP

    rng = np.random.default_rng(0)
    s, w, noise = rng.normal(size=(3, 600))
    y = 0.8 * s + 0.6 * w + 0.1 * noise
    data = FairData.from_arrays(np.c_[s, w], y, {"s": s}, task="regression", include_sensitive=False)
    unconstrained = dcor.u_distance_covariance_sqr(y, s)
    bound = 0.2 * unconstrained
    model = models.mlp(2, hidden=(8,), seed=0)
    torch.set_num_threads(1)
    result = StochasticSQP(epochs=30, batch_size=150, seed=0).fit(
        model, data, loss="mse", constraints=[DistanceCovariance("s", bound=bound)])
    with torch.no_grad():
        out = model(data.X).double().numpy()
    realised = dcor.u_distance_covariance_sqr(out, s)
    assert result.info["feasible"] and any(r.get("phase") == "polish" for r in result.history.records)
    assert realised <= bound * (1 + 1e-3), (realised, bound)
    assert realised >= 0.5 * bound  # the bound binds: the fit keeps the allowed dependence


def test_a_jdcov_bound_below_its_floor_warns_at_setup():
    """A JdCov bound below the value of a constant prediction (the dependence among the
    sensitive features themselves) is diagnosed before training, with the floor."""
    import warnings

    import fairopt
    from fairopt.constraints import DistanceCovariance
    from fairopt.exceptions import FairnessWarning

    rng = np.random.default_rng(0)
    n = 300
    a = rng.normal(size=n)
    b = a + 0.3 * rng.normal(size=n)  # strongly dependent sensitive features
    X = rng.normal(size=(n, 2))
    data = fairopt.FairData.from_arrays(X, (X[:, 0] > 0).astype(float), {"a": a, "b": b})
    probe = DistanceCovariance(["a", "b"], bound=1.0, kind="jdcov")
    floor = float(probe.exact(torch.zeros(n, dtype=torch.float64), data)[0])
    assert floor > 0
    with pytest.warns(FairnessWarning, match="below .* constant prediction"):
        DistanceCovariance(["a", "b"], bound=floor / 10, kind="jdcov").setup(data)
    with warnings.catch_warnings():
        warnings.simplefilter("error", FairnessWarning)
        DistanceCovariance(["a", "b"], bound=2 * floor, kind="jdcov").setup(data)
        DistanceCovariance(["a", "b"], bound=0.0, kind="dcov").setup(data)  # dCov's floor is 0


def test_a_jdcov_penalty_has_no_bound_and_no_floor_warning():
    """The JdCov penalty reuses the statistic with no bound: its setup never warns about one."""
    import warnings

    import fairopt
    from fairopt.exceptions import FairnessWarning
    from fairopt.penalties import DistanceCovariancePenalty

    rng = np.random.default_rng(0)
    a = rng.normal(size=300)
    X = rng.normal(size=(300, 2))
    data = fairopt.FairData.from_arrays(X, (X[:, 0] > 0).astype(float), {"a": a, "b": a + 0.3 * rng.normal(size=300)})
    with warnings.catch_warnings():
        warnings.simplefilter("error", FairnessWarning)
        DistanceCovariancePenalty(["a", "b"], kind="jdcov").setup(data)


def _relative_rows(task: str, n: int = 400, seed: int = 0):
    rng = np.random.default_rng(seed)
    s = rng.integers(0, 2, n).astype(float)
    age = rng.normal(40, 10, n)
    exposure = rng.uniform(0.2, 1.0, n)
    if task == "poisson":
        y = rng.poisson(np.exp(0.5 + 1.0 * s + 0.03 * (age - 40)) * exposure).astype(float)
    else:
        y = 0.5 * s + 0.02 * age + rng.normal(size=n)
    return SimpleNamespace(X=torch.zeros(n, 1), y=torch.as_tensor(y), task=task, __len__=None,
                           sensitive={"s": torch.as_tensor(s), "age": torch.as_tensor(age)},
                           sensitive_kinds={"s": "binary", "age": "continuous"},
                           exposure=torch.as_tensor(exposure) if task == "poisson" else None), s, age, y, exposure


class _Rows(SimpleNamespace):
    def __len__(self):
        return len(self.y)


@pytest.mark.parametrize("task", ["regression", "poisson"])
def test_a_relative_bound_is_a_share_of_the_targets_own_statistic(task):
    """relative=True: the row holds D(yhat, s) <= bound * D(y, s), y on the predictions' scale (the observed rate
    for a Poisson task), checked against dcor's unbiased distance covariance; realised is the ratio."""
    namespace, s, age, y, exposure = _relative_rows(task)
    rows = _Rows(**{k: v for k, v in vars(namespace).items() if k != "__len__"})
    target = y / exposure if task == "poisson" else y
    joint = np.column_stack([s, age])
    expected = dcor.u_distance_covariance_sqr(target, joint)
    c = DistanceCovariance(["s", "age"], 0.25, relative=True)
    c.setup(rows)
    assert c.reference == pytest.approx(expected, rel=1e-6) and c.absolute_bound == pytest.approx(0.25 * expected)
    assert float(c.upper[0]) == pytest.approx(0.25 * expected)
    out = torch.as_tensor(np.log(target + 1.0) if task == "poisson" else 0.5 * target)
    prediction = np.exp(out.numpy()) if task == "poisson" else out.numpy()
    assert c.realised(out, rows) == pytest.approx(dcor.u_distance_covariance_sqr(prediction, joint) / expected,
                                                  rel=1e-6)
    with pytest.raises(ValueError, match="relative: only for kind 'dcov' or 'ccdcov'"):
        DistanceCovariance(["s", "age"], 0.25, kind="jdcov", relative=True)
    flat = _Rows(**{**vars(rows), "y": torch.as_tensor(np.random.default_rng(0).normal(size=len(y)))})
    flat.task = "regression"  # a target independent of s, whose unbiased statistic dips below 0
    assert dcor.u_distance_covariance_sqr(flat.y.numpy(), s) < 0
    with pytest.raises(ValueError, match="relative: the training target's dcov"):
        DistanceCovariance(["s"], 0.25, relative=True).setup(flat)


def test_a_relative_bound_trains_through_the_regressor_and_saves_its_absolute_value(tmp_path):
    """("dcov", s, 0.25, {"relative": True}) through FairRegressor: the bound holds on the training rows as a share
    of the target's statistic, and the saved model rebuilds the absolute bound it resolved."""
    import warnings

    import fairopt
    from fairopt.estimators import FairRegressor

    rng = np.random.default_rng(2)
    n = 600
    s = rng.integers(0, 2, n).astype(float)
    X = np.column_stack([s + rng.normal(scale=0.3, size=n), rng.normal(size=n)])
    y = X[:, 0] + 0.5 * X[:, 1] + rng.normal(scale=0.5, size=n)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        reg = FairRegressor(("dcov", "s", 0.25, {"relative": True}), epochs=200).fit(X, y, sensitive_features=s)
    (bound,) = reg.evaluate(X, y, sensitive_features=s)["bounds"].values()
    assert bound["value"] <= 0.25 + 1e-3 and bound["met"]
    direct = dcor.u_distance_covariance_sqr(reg.predict(X), s) / dcor.u_distance_covariance_sqr(y, s)
    assert direct == pytest.approx(bound["value"], rel=1e-3, abs=1e-4)
    fairopt.save(reg, tmp_path / "reg.fairopt")
    loaded = fairopt.load(tmp_path / "reg.fairopt")
    assert not loaded.constraints_[0].relative
    assert loaded.constraints_[0].bound == pytest.approx(reg.constraints_[0].absolute_bound)


def test_integer_codes_read_as_a_continuous_attribute_are_warned_at_setup():
    """A region coded 1..10 and inferred continuous enters the statistic through |3 - 7|: warned with how to
    declare it categorical; a categorical declaration or a real-valued attribute is not warned."""
    import warnings

    from fairopt.data import FairData
    from fairopt.exceptions import FairnessWarning

    rng = np.random.default_rng(0)
    n = 300
    codes = rng.integers(1, 11, n)
    X = rng.normal(size=(n, 2))
    coded = FairData.from_arrays(X, X[:, 0] + 0.1 * codes, {"region": codes}, task="regression")
    with pytest.warns(FairnessWarning, match=r"'region' holds 10 distinct integers: if these are group codes"):
        DistanceCovariance(["region"], bound=0.1).setup(coded)
    declared = FairData.from_arrays(X, X[:, 0], {"region": codes}, task="regression",
                                    sensitive_kinds={"region": "categorical"})
    real = FairData.from_arrays(X, X[:, 0], {"age": rng.normal(40, 10, n)}, task="regression")
    binary = FairData.from_arrays(X, X[:, 0], {"sex": rng.integers(0, 2, n)}, task="regression")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        DistanceCovariance(["region"], bound=0.1).setup(declared)
        DistanceCovariance(["age"], bound=0.1).setup(real)
        DistanceCovariance(["sex"], bound=0.1).setup(binary)  # a 0/1 attribute: its distance is the indicator's
