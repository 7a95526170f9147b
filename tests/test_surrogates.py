"""Surrogates of the step function (fairopt.surrogates, [SQP] sec 3.1)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from fairopt.surrogates import Hinge, Linear, Sigmoid, SmoothedStep, Surrogate, get_surrogate

MU = 1e-2
L_MU = (1 - math.sqrt(1 + MU)) / 2  # inf of the paper's phi_mu
GRID = torch.linspace(-4.0, 4.0, 16_001, dtype=torch.float64)
FAR = torch.tensor([-1e12, 1e12], dtype=torch.float64)  # phi_mu(u) is within mu/(4|u|) of its limits


def paper_phi_numpy(u: np.ndarray, mu: float) -> np.ndarray:
    """[SQP] sec 3.1 written out as printed: phibar, then 1 - (1 - phibar + sqrt(...))/2."""
    phibar = 0.5 * (u + 0.5 + np.sqrt((u + 0.5) ** 2 + mu))
    return 1.0 - 0.5 * (1.0 - phibar + np.sqrt((1.0 - phibar) ** 2 + mu))


BOUNDED = [
    SmoothedStep(),
    SmoothedStep(scale=1.0),
    SmoothedStep(scale=7.0, mu=1e-4),
    Sigmoid(),
    Sigmoid(scale=1.0),
]
ALL = BOUNDED + [SmoothedStep(variant="paper"), SmoothedStep(scale=3.0, variant="paper"), Linear(), Hinge()]


def test_paper_variant_matches_the_printed_formula():
    u = np.linspace(-3, 3, 1001)
    for scale in (1.0, 50.0):
        phi = SmoothedStep(scale=scale, mu=MU, variant="paper")
        got = phi(torch.tensor(u / scale, dtype=torch.float64)).numpy()
        np.testing.assert_allclose(got, paper_phi_numpy(u, MU), rtol=0, atol=1e-14)


def test_scale_enters_as_phi_of_scale_times_t():
    t = torch.linspace(-0.2, 0.2, 101, dtype=torch.float64)
    for variant in ("paper", "normalized"):
        torch.testing.assert_close(SmoothedStep(50.0, variant=variant)(t), SmoothedStep(1.0, variant=variant)(50.0 * t),
                                   rtol=0, atol=1e-15)
    torch.testing.assert_close(Sigmoid(50.0)(t), torch.sigmoid(50.0 * t), rtol=0, atol=1e-15)


@pytest.mark.parametrize("phi", BOUNDED, ids=repr)
def test_bounded_surrogates_are_half_at_zero_odd_and_in_unit_interval(phi):
    y = phi(GRID)
    assert abs(phi(torch.tensor(0.0, dtype=torch.float64)).item() - 0.5) <= 1e-15
    assert (y + phi(-GRID) - 1).abs().max().item() <= 1e-15  # phi(t) + phi(-t) = 1
    assert y.min().item() >= 0.0 and y.max().item() <= 1.0
    assert bool((y[1:] >= y[:-1]).all())  # non-decreasing


def test_paper_variant_documented_deviations_at_mu_1e_2():
    """phi_mu(0) - 1/2 = -4.9e-5, max|phi(t) + phi(-t) - 1| = 2.5e-3, inf = L, sup = 1."""
    phi = SmoothedStep(scale=1.0, mu=MU, variant="paper")
    at_zero = phi(torch.tensor(0.0, dtype=torch.float64)).item() - 0.5
    assert at_zero == pytest.approx(-4.9e-5, abs=0.1e-5)
    asym = (phi(GRID) + phi(-GRID) - 1).abs().max().item()
    assert asym == pytest.approx(2.5e-3, abs=0.01e-3)
    assert asym > 1e-3  # the paper's formula is really not odd: the normalised variant is needed
    lo, hi = phi(FAR).tolist()
    assert lo == pytest.approx(L_MU, abs=1e-12) and L_MU == pytest.approx(-MU / 4, rel=0.01)
    assert hi == pytest.approx(1.0, abs=1e-12)
    assert phi(GRID).min().item() >= L_MU - 1e-15 and phi(GRID).max().item() <= 1.0
    assert phi(GRID).min().item() < 0  # slightly negative, as documented
    assert phi.lower_limit == pytest.approx(L_MU, rel=1e-12)


def test_paper_variant_asymmetry_shrinks_like_mu():
    phi = SmoothedStep(scale=1.0, mu=1e-4, variant="paper")
    assert (phi(GRID) + phi(-GRID) - 1).abs().max().item() == pytest.approx(2.5e-5, abs=0.01e-5)
    assert phi(torch.tensor(0.0, dtype=torch.float64)).item() - 0.5 == pytest.approx(-5e-9, abs=0.1e-9)


def test_normalized_variant_is_the_symmetrised_rescaled_paper_formula():
    paper = SmoothedStep(scale=1.0, variant="paper")
    norm = SmoothedStep(scale=1.0)
    expected = (0.5 * (paper(GRID) + 1 - paper(-GRID)) - L_MU / 2) / (1 - L_MU)
    torch.testing.assert_close(norm(GRID), expected, rtol=0, atol=1e-15)
    # within O(mu) of the paper's function, with limits 0 and 1
    assert (norm(GRID) - paper(GRID)).abs().max().item() <= 2.6e-3
    torch.testing.assert_close(norm(FAR), torch.tensor([0.0, 1.0], dtype=torch.float64), rtol=0, atol=1e-12)


SCALES = (1.0, 10.0, 100.0, 1000.0)
T_OFF_ZERO = torch.tensor([-0.3, -0.1, -0.02, 0.02, 0.1, 0.3], dtype=torch.float64)


@pytest.mark.parametrize("make", [SmoothedStep, Sigmoid], ids=["normalized", "sigmoid"])
def test_approaches_the_step_as_the_scale_grows(make):
    step = Surrogate.step(T_OFF_ZERO)
    errors = [(make(scale)(T_OFF_ZERO) - step).abs().max().item() for scale in SCALES]
    assert all(a > b for a, b in zip(errors, errors[1:]))
    assert errors[0] > 0.2 and errors[-1] < 2e-4


def test_paper_variant_approaches_L_not_0_below_the_threshold():
    """phi_mu(scale t) -> L = -2.5e-3 for t < 0 and -> 1 for t > 0: the step only up to |L| = O(mu)."""
    negative, positive = T_OFF_ZERO[T_OFF_ZERO < 0], T_OFF_ZERO[T_OFF_ZERO > 0]
    below = [(SmoothedStep(s, variant="paper")(negative) - L_MU).abs().max().item() for s in SCALES]
    above = [(SmoothedStep(s, variant="paper")(positive) - 1.0).abs().max().item() for s in SCALES]
    assert all(a > b for a, b in zip(below, below[1:])) and below[-1] < 2e-4
    assert all(a > b for a, b in zip(above, above[1:])) and above[-1] < 2e-4
    assert SmoothedStep(1000.0, variant="paper")(negative).max().item() < -2e-3  # never reaches the step's 0


def reference_torch(phi: Surrogate, t: torch.Tensor) -> torch.Tensor:
    """Independent float64 reference built from plain torch ops (autograd differentiates it)."""
    if isinstance(phi, SmoothedStep):
        def m(v):
            return 0.5 * (v + torch.sqrt(v * v + phi.mu))

        def paper(u):
            return 1 - m(1 - m(u + 0.5))

        u = phi.scale * t
        if phi.variant == "paper":
            return paper(u)
        lower = (1 - math.sqrt(1 + phi.mu)) / 2
        return (0.5 * (paper(u) + 1 - paper(-u)) - lower / 2) / (1 - lower)
    if isinstance(phi, Sigmoid):
        return 0.5 * (1 + torch.tanh(0.5 * phi.scale * t))  # = 1 / (1 + exp(-scale t)), no overflow
    if isinstance(phi, Hinge):
        return torch.relu(t)
    return t * 1.0


DERIVATIVE_POINTS = torch.cat([GRID[::19], torch.tensor([1e-3, -1e-3, 0.0123, 30.0, -30.0], dtype=torch.float64)])


@pytest.mark.parametrize("phi", ALL, ids=repr)
def test_values_and_derivative_match_autograd_of_an_independent_reference(phi):
    t = DERIVATIVE_POINTS[DERIVATIVE_POINTS != 0] if isinstance(phi, Hinge) else DERIVATIVE_POINTS  # hinge kink
    t = t.clone().requires_grad_(True)
    reference = reference_torch(phi, t)
    (expected,) = torch.autograd.grad(reference.sum(), t)
    torch.testing.assert_close(phi(t), reference, rtol=0, atol=1e-13)
    torch.testing.assert_close(phi.derivative(t.detach()), expected, rtol=1e-10, atol=1e-12)
    (through_phi,) = torch.autograd.grad(phi(t).sum(), t)  # the backward pass of phi itself
    torch.testing.assert_close(through_phi, expected, rtol=1e-10, atol=1e-12)


def test_smoothed_step_supports_batched_vector_jacobian_products():
    """Engines pull several rows back at once (is_grads_batched / torch.func)."""
    phi = SmoothedStep()
    t = torch.linspace(-0.05, 0.05, 11, dtype=torch.float64, requires_grad=True)
    weights = torch.rand(3, 11, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    expected = weights * phi.derivative(t.detach())
    rows = weights @ phi(t)
    (batched,) = torch.autograd.grad(rows, t, grad_outputs=torch.eye(3, dtype=torch.float64), is_grads_batched=True)
    torch.testing.assert_close(batched, expected, rtol=1e-12, atol=1e-12)
    _, pullback = torch.func.vjp(lambda x: weights @ phi(x), t.detach())
    (vmapped,) = torch.func.vmap(pullback)(torch.eye(3, dtype=torch.float64))
    torch.testing.assert_close(vmapped, expected, rtol=1e-12, atol=1e-12)


def test_smoothed_step_refuses_second_derivatives():
    t = torch.tensor([0.001, -0.002], dtype=torch.float64, requires_grad=True)
    (grad,) = torch.autograd.grad(SmoothedStep()(t).sum(), t, create_graph=True)
    with pytest.raises(RuntimeError):
        torch.autograd.grad(grad.sum(), t)


@pytest.mark.parametrize("phi", [SmoothedStep(), SmoothedStep(variant="paper"), Sigmoid()], ids=repr)
def test_derivative_matches_central_differences(phi):
    t = torch.linspace(-0.05, 0.05, 41, dtype=torch.float64)
    h = 1e-7
    numeric = (phi(t + h) - phi(t - h)) / (2 * h)
    torch.testing.assert_close(phi.derivative(t), numeric, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("phi", [SmoothedStep(), SmoothedStep(variant="paper"), Sigmoid(), Sigmoid(scale=3.0),
                                 Linear(), Hinge()], ids=repr)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_value_and_derivative_are_call_and_derivative(phi, dtype):
    t = (0.05 * torch.randn(257, generator=torch.Generator().manual_seed(3))).to(dtype).requires_grad_(True)
    value, slope = phi.value_and_derivative(t)
    assert torch.equal(value, phi(t).detach()) and not value.requires_grad  # bit for bit the rows' values
    torch.testing.assert_close(slope, phi.derivative(t.detach()), rtol=0, atol=0)


def test_smoothed_step_is_stable_in_float32_for_large_scaled_inputs():
    phi = SmoothedStep()
    t = torch.tensor([-1e4, -40.0, -1.0, 1.0, 40.0, 1e4], dtype=torch.float32, requires_grad=True)
    y = phi(t)
    (grad,) = torch.autograd.grad(y.sum(), t)
    assert bool(torch.isfinite(y).all()) and bool(torch.isfinite(grad).all())
    expected = SmoothedStep()(t.detach().double())
    torch.testing.assert_close(y.double(), expected, rtol=0, atol=1e-6)
    assert bool((grad >= 0).all())
    huge = torch.tensor([-1e25, 1e25], dtype=torch.float32, requires_grad=True)  # (scale t)^2 overflows
    for variant, low in (("normalized", 0.0), ("paper", L_MU)):
        phi = SmoothedStep(variant=variant)
        (grad,) = torch.autograd.grad(phi(huge).sum(), huge)
        torch.testing.assert_close(phi(huge).detach(), torch.tensor([low, 1.0]), rtol=0, atol=1e-6)
        assert grad.tolist() == [0.0, 0.0]


def test_linear_and_hinge_values():
    t = torch.tensor([-2.0, -0.5, 0.0, 0.5, 2.0])
    torch.testing.assert_close(Linear()(t), t)
    torch.testing.assert_close(Hinge()(t), torch.tensor([0.0, 0.0, 0.0, 0.5, 2.0]))
    torch.testing.assert_close(Hinge().derivative(t), torch.tensor([0.0, 0.0, 0.0, 1.0, 1.0]))


def test_step_is_strict_and_keeps_dtype():
    t = torch.tensor([-1.0, 0.0, 1e-12, 3.0], dtype=torch.float64)
    s = SmoothedStep().step(t)
    assert s.dtype == torch.float64 and s.tolist() == [0.0, 0.0, 1.0, 1.0]
    assert Sigmoid().step(torch.tensor([0, 2])).tolist() == [0.0, 1.0]


def test_get_surrogate_names_and_instances():
    assert isinstance(get_surrogate("smoothed_step"), SmoothedStep)
    assert get_surrogate("smoothed_step") == SmoothedStep(scale=50.0, mu=1e-2, variant="normalized")
    assert get_surrogate("sigmoid", scale=10) == Sigmoid(10.0)
    assert isinstance(get_surrogate("linear"), Linear) and isinstance(get_surrogate("hinge"), Hinge)
    phi = SmoothedStep(scale=5.0)
    assert get_surrogate(phi) is phi


@pytest.mark.parametrize(
    "call, argument",
    [
        (lambda: SmoothedStep(scale=0.0), "scale"),
        (lambda: SmoothedStep(scale=-1.0), "scale"),
        (lambda: SmoothedStep(scale=float("nan")), "scale"),
        (lambda: SmoothedStep(scale="big"), "scale"),
        (lambda: SmoothedStep(mu=0.0), "mu"),
        (lambda: SmoothedStep(mu=-1e-3), "mu"),
        (lambda: SmoothedStep(mu=float("inf")), "mu"),
        (lambda: SmoothedStep(variant="symmetric"), "variant"),
        (lambda: Sigmoid(scale=0), "scale"),
        (lambda: Sigmoid(scale=True), "scale"),
        (lambda: get_surrogate("tanh"), "surrogate"),
        (lambda: get_surrogate(3), "surrogate"),
        (lambda: get_surrogate("linear", scale=2.0), "surrogate"),
        (lambda: get_surrogate(Sigmoid(), scale=2.0), "surrogate"),
    ],
)
def test_bad_input_raises_value_error_naming_the_argument(call, argument):
    with pytest.raises(ValueError, match=rf"^{argument}:"):
        call()
