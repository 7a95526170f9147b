"""Score models (fairopt.models): shapes, architecture, determinism, validation."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from fairopt.models import linear, mlp


def parameters(model: nn.Module) -> list[torch.Tensor]:
    return [p.detach().clone() for p in model.parameters()]


def same_parameters(a: nn.Module, b: nn.Module) -> bool:
    return all(torch.equal(x, y) for x, y in zip(parameters(a), parameters(b)))


def test_linear_returns_one_score_per_row_equal_to_xw_plus_b():
    model = linear(5, seed=0)
    x = torch.randn(7, 5)
    out = model(x)
    assert out.shape == (7,)
    layer = model[0]
    torch.testing.assert_close(out, x @ layer.weight.reshape(-1) + layer.bias, rtol=1e-6, atol=1e-6)
    assert sum(p.numel() for p in model.parameters()) == 6
    assert sum(p.numel() for p in linear(5, bias=False).parameters()) == 5


@pytest.mark.parametrize("activation, cls", [("leaky_relu", nn.LeakyReLU), ("relu", nn.ReLU), ("tanh", nn.Tanh)])
def test_mlp_architecture_and_output_shape(activation, cls):
    model = mlp(11, hidden=(32, 16), activation=activation, seed=1)
    linears = [m for m in model if isinstance(m, nn.Linear)]
    assert [(m.in_features, m.out_features) for m in linears] == [(11, 32), (32, 16), (16, 1)]
    assert sum(isinstance(m, cls) for m in model) == 2
    assert model(torch.randn(9, 11)).shape == (9,)
    assert model(torch.randn(1, 11)).shape == (1,)


def test_mlp_forward_matches_a_hand_written_network():
    model = mlp(3, hidden=(4,), seed=2)
    first, _, last = model[0], model[1], model[2]
    x = torch.randn(6, 3)
    hidden = torch.nn.functional.leaky_relu(x @ first.weight.T + first.bias, negative_slope=0.01)
    torch.testing.assert_close(model(x), (hidden @ last.weight.T + last.bias).reshape(-1))


def test_paper_network_parameter_count():
    # [SQP] sec 4, Dutch: 11 features, one hidden layer of 32 units
    assert sum(p.numel() for p in mlp(11).parameters()) == 11 * 32 + 32 + 32 + 1
    assert sum(p.numel() for p in mlp(11, bias=False).parameters()) == 11 * 32 + 32


def test_seed_gives_identical_models_and_leaves_the_global_rng_alone():
    torch.manual_seed(123)
    before = torch.random.get_rng_state()
    a, b = mlp(6, seed=42), mlp(6, seed=42)
    assert torch.equal(torch.random.get_rng_state(), before)
    assert same_parameters(a, b)
    assert not same_parameters(a, mlp(6, seed=43))
    assert same_parameters(linear(6, seed=7), linear(6, seed=7))


def test_global_seed_makes_unseeded_models_deterministic():
    torch.manual_seed(5)
    a = mlp(4, hidden=(8,))
    torch.manual_seed(5)
    b = mlp(4, hidden=(8,))
    assert same_parameters(a, b)
    c = mlp(4, hidden=(8,))  # the global RNG moved on
    assert not same_parameters(a, c)


def test_gradients_flow_to_every_parameter():
    model = mlp(4, hidden=(5, 3), seed=0)
    model(torch.randn(10, 4)).pow(2).sum().backward()
    assert all(p.grad is not None and p.grad.abs().sum() > 0 for p in model.parameters())


@pytest.mark.parametrize(
    "call, argument",
    [
        (lambda: linear(0), "n_features"),
        (lambda: linear(2.5), "n_features"),
        (lambda: linear(True), "n_features"),
        (lambda: linear(3, bias="yes"), "bias"),
        (lambda: linear(3, seed=-1), "seed"),
        (lambda: linear(3, seed=1.5), "seed"),
        (lambda: mlp(0), "n_features"),
        (lambda: mlp(3, hidden=()), "hidden"),
        (lambda: mlp(3, hidden=(8, 0)), "hidden"),
        (lambda: mlp(3, hidden=(8.0,)), "hidden"),
        (lambda: mlp(3, hidden="32"), "hidden"),
        (lambda: mlp(3, activation="gelu"), "activation"),
        (lambda: mlp(3, bias=1), "bias"),
    ],
)
def test_bad_input_raises_value_error_naming_the_argument(call, argument):
    with pytest.raises(ValueError, match=rf"^{argument}:"):
        call()


def test_integer_hidden_is_one_layer():
    model = mlp(3, hidden=7, seed=0)
    assert [m.out_features for m in model if isinstance(m, nn.Linear)] == [7, 1]
