"""The closed-form pullback of feed-forward networks (solvers.feedforward) against autograd."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from fairopt.constraints import DisparateImpact, GeDI
from fairopt.data import FairData
from fairopt.models import linear, mlp
from solvers import StochasticSQP
from solvers.derivatives import AutogradTrace, LocalDerivatives, trace_outputs
from solvers.feedforward import ACTIVATION_DERIVATIVES, FeedForward, FeedForwardTrace
from solvers.losses import bce_loss
from solvers.problem import as_constraint_set, trainable_parameters


def _reference(model: nn.Module, params: list[torch.Tensor], X: torch.Tensor, cot: torch.Tensor) -> torch.Tensor:
    """``cot @ d out / d params`` by one autograd backward pass per row (the independent reference)."""
    rows = []
    for row in cot:
        out = model(X).reshape(-1)
        grads = torch.autograd.grad(out, params, grad_outputs=row.to(out.dtype))
        rows.append(torch.cat([g.reshape(-1) for g in grads]))
    return torch.stack(rows)


def _check(model: nn.Module, params: list[torch.Tensor] | None = None, n: int = 50, k: int = 3,
           dtype: torch.dtype = torch.float32) -> None:
    model = model.to(dtype)
    params = list(model.parameters()) if params is None else params
    X = torch.randn(n, 4, dtype=dtype, generator=torch.Generator().manual_seed(1))  # every model takes 4 columns
    cot = torch.randn(k, n, dtype=dtype, generator=torch.Generator().manual_seed(2))
    network = FeedForward.recognise(model, params)
    assert network is not None
    trace = network.trace(X)
    assert torch.equal(trace.out, model(X).reshape(-1).detach())  # the same kernels: bit for bit
    ref = _reference(model, params, X, cot)
    got = trace.pullback(cot)
    assert got.shape == ref.shape
    tol = 1e-12 if dtype == torch.float64 else 2e-5
    torch.testing.assert_close(got, ref, rtol=tol, atol=tol * float(ref.abs().max()))


@pytest.mark.parametrize("activation", ["leaky_relu", "relu", "tanh"])
@pytest.mark.parametrize("hidden", [(5,), (6, 4), (3, 5, 2)])
def test_pullback_equals_autograd_for_the_library_networks(activation, hidden):
    torch.manual_seed(0)
    _check(mlp(4, hidden=hidden, activation=activation, seed=0))


@pytest.mark.parametrize("act", [nn.Sigmoid, nn.ELU, nn.GELU, nn.SiLU, nn.Softplus, nn.Hardtanh, nn.Mish])
def test_pullback_equals_autograd_for_other_elementwise_activations(act):
    _check(nn.Sequential(nn.Linear(4, 6), act(), nn.Linear(6, 1)), k=2)


def test_output_activation_no_bias_nested_identity_and_float64():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Sequential(nn.Linear(4, 5, bias=False), nn.Tanh(), nn.Identity()),
                          nn.Dropout(0.0), nn.Linear(5, 3), nn.ReLU(), nn.Linear(3, 1), nn.Sigmoid())
    _check(model, dtype=torch.float64)
    _check(model)
    model = nn.Sequential(nn.Linear(4, 6), nn.Linear(6, 1))  # stacked linear layers, no activation
    _check(model, k=1)


def test_a_single_linear_layer_and_frozen_or_reordered_parameters():
    _check(linear(4, seed=0))
    _check(nn.Linear(4, 1))  # a bare layer: its (n, 1) column is the output
    model = mlp(4, hidden=(5,), seed=0)
    params = list(model.parameters())
    _check(model, params=[params[2], params[0]])  # a subset in another order: rows in that order
    _check(nn.Sequential(nn.Linear(4, 3), nn.Tanh(), nn.Linear(3, 1), nn.Flatten(0)))  # (n, 1) -> (n,)


def test_dropout_in_evaluation_mode_is_the_identity():
    model = mlp(4, hidden=(5,), seed=0, dropout=0.3)
    assert FeedForward.recognise(model, list(model.parameters())) is None  # active dropout: autograd
    model.eval()
    _check(model)


@pytest.mark.parametrize("model", [
    nn.Sequential(nn.Linear(4, 5), nn.LayerNorm(5), nn.Linear(5, 1)),
    nn.Sequential(nn.Linear(4, 5), nn.PReLU(), nn.Linear(5, 1)),
    nn.Sequential(nn.Linear(4, 5), nn.ReLU(inplace=True), nn.Linear(5, 1)),
    nn.Sequential(nn.Linear(4, 5), nn.ReLU(), nn.Linear(5, 2)),
    nn.Sequential(nn.ReLU(), nn.Linear(4, 1)),
    nn.Sequential(nn.Linear(4, 5), nn.Flatten(0), nn.Linear(5, 1)),  # a reshape before a layer
    nn.Sequential(nn.Linear(4, 1), nn.Flatten(1)),
    nn.Linear(4, 3),
    nn.Sequential(),
])
def test_other_models_are_not_recognised(model):
    assert FeedForward.recognise(model, list(model.parameters())) is None


def test_a_layer_used_twice_is_not_recognised():
    shared = nn.Linear(1, 1)
    model = nn.Sequential(shared, nn.Tanh(), shared)  # tied weights: autograd sums both uses
    assert FeedForward.recognise(model, list(model.parameters())) is None


def test_parameters_outside_the_network_are_not_recognised():
    model = mlp(4, hidden=(5,), seed=0)
    extra = torch.zeros(3, requires_grad=True)
    assert FeedForward.recognise(model, list(model.parameters()) + [extra]) is None
    first = next(model.parameters())
    assert FeedForward.recognise(model, [first, first]) is None


def test_trace_outputs_picks_the_closed_form_only_under_auto():
    model = mlp(4, hidden=(5,), seed=0)
    params, X = list(model.parameters()), torch.randn(7, 4)
    assert isinstance(trace_outputs(model, params, X, "auto"), FeedForwardTrace)
    assert isinstance(trace_outputs(model, params, X, "loop"), AutogradTrace)
    ln = nn.Sequential(nn.Linear(4, 5), nn.LayerNorm(5), nn.Linear(5, 1))
    assert isinstance(trace_outputs(ln, list(ln.parameters()), X, "auto"), AutogradTrace)


def test_the_oracle_recognises_a_network_once_per_model_parameters_and_mode():
    """:meth:`LocalDerivatives.network` keeps the recognition while the model, its training mode and the
    parameter tensors are the same, and recognises again when any of them changes (an active dropout
    layer is no closed form: training mode decides)."""
    model = nn.Sequential(nn.Linear(4, 5), nn.ReLU(), nn.Dropout(0.5), nn.Linear(5, 1)).eval()
    params = list(model.parameters())
    oracle = LocalDerivatives()
    first = oracle.network(model, params)
    assert isinstance(first, FeedForward) and oracle.network(model, list(params)) is first
    assert oracle.network(model, params[:2]).n_params == 4 * 5 + 5  # other parameters: the first layer's only
    model.train()
    assert oracle.network(model, params) is None  # the dropout layer acts
    model.eval()
    again = oracle.network(model, params)  # recognised anew after the other calls
    assert isinstance(again, FeedForward) and again is not first
    other = mlp(4, hidden=(3,), seed=0)
    assert oracle.network(other, list(other.parameters())).n_params == 4 * 3 + 3 + 3 + 1
    assert LocalDerivatives("loop").network(model, params) is None


def _data(n: int = 300) -> FairData:
    g = torch.Generator().manual_seed(0)
    X = torch.randn(n, 4, generator=g)
    s = (torch.rand(n, generator=g) < 0.4).long()
    y = (torch.rand(n, generator=g) < 0.3 + 0.3 * s).float()
    return FairData.from_arrays(X.numpy(), y.numpy(), {"s": s.numpy()})


@pytest.mark.parametrize("constraints", [[GeDI("s", bound=0.01)], [DisparateImpact("s", 0.8)], []])
def test_oracle_derivatives_equal_the_autograd_ones(constraints):
    data = _data()
    model = mlp(data.n_features, hidden=(6,), seed=1)
    cons = as_constraint_set(constraints) if constraints else None
    if cons is not None:
        cons.setup(data)
    params = trainable_parameters(model)
    con_batch = data if constraints else None
    a = LocalDerivatives("auto")(model, params, bce_loss, cons, data, con_batch)
    b = LocalDerivatives("loop")(model, params, bce_loss, cons, data, con_batch)
    assert a.f == b.f
    torch.testing.assert_close(a.g, b.g, rtol=1e-5, atol=1e-7)
    torch.testing.assert_close(a.J, b.J, rtol=1e-5, atol=1e-7)
    torch.testing.assert_close(a.c, b.c, rtol=0, atol=0)


def test_sqp_fit_with_the_closed_form_matches_autograd():
    data = _data()
    fits = {}
    for mode in ("auto", "loop"):
        model = mlp(data.n_features, hidden=(6,), seed=0)
        res = StochasticSQP(epochs=30, jacobian=mode).fit(model, data, loss="bce",
                                                           constraints=[GeDI("s", bound=0.01)])
        fits[mode] = (torch.cat([p.detach().reshape(-1) for p in model.parameters()]), res.status)
    assert float((fits["auto"][0] - fits["loop"][0]).abs().max()) < 1e-3
    assert fits["auto"][1] == fits["loop"][1]


def test_pullback_of_a_slice_equals_the_pullback_of_those_rows():
    model = mlp(4, hidden=(5, 3), seed=0)
    params = list(model.parameters())
    X = torch.randn(40, 4, generator=torch.Generator().manual_seed(3))
    cot = torch.randn(2, 15, generator=torch.Generator().manual_seed(4))
    network = FeedForward.recognise(model, params)
    whole = network.trace(X).pullback(cot, rows=slice(10, 25))
    torch.testing.assert_close(whole, _reference(model, params, X[10:25], cot), rtol=2e-5, atol=1e-6)
    with pytest.raises(ValueError, match="cot: expected 15 columns"):
        network.trace(X).pullback(torch.zeros(2, 14), rows=slice(10, 25))


def test_segmented_pullback_equals_the_pullback_of_each_segment():
    """``pullback_segments`` (one call, products per segment) against autograd on each segment."""
    for hidden in ((5,), (5, 3)):
        model = mlp(4, hidden=hidden, seed=0)
        params = list(model.parameters())
        X = torch.randn(40, 4, generator=torch.Generator().manual_seed(3))
        cot = torch.randn(2, 40, generator=torch.Generator().manual_seed(4))
        bounds = ((0, 7), (7, 8), (8, 30), (30, 40))
        got = FeedForward.recognise(model, params).trace(X).pullback_segments(cot, bounds)
        assert got.shape == (4, 2, sum(p.numel() for p in params))
        for seg, (a, b) in enumerate(bounds):
            torch.testing.assert_close(got[seg], _reference(model, params, X[a:b], cot[:, a:b]), rtol=2e-5, atol=1e-6)
    partial_params = [model[0].weight]  # a subset of the tensors, in any order: their columns only
    got = FeedForward.recognise(model, partial_params).trace(X).pullback_segments(cot, bounds)
    torch.testing.assert_close(got[2], _reference(model, partial_params, X[8:30], cot[:, 8:30]), rtol=2e-5, atol=1e-6)
    with pytest.raises(ValueError, match="cot: expected 40 columns"):
        FeedForward.recognise(model, params).trace(X).pullback_segments(torch.zeros(2, 39), bounds)


def test_closed_form_activation_derivatives_write_into_a_given_buffer():
    """``ACTIVATION_DERIVATIVES[type](m, G, Z, H, out=buffer)`` fills ``buffer`` (the pullback reuses one
    across cotangents) with what the call without ``out`` returns, for an expanded ``G`` too."""
    gen = torch.Generator().manual_seed(9)
    Z = torch.randn(30, 4, generator=gen)
    G = torch.randn(30, 1, generator=gen).expand(30, 4)  # a cotangent per row, as the last hidden layer takes it
    for module in (nn.ReLU(), nn.LeakyReLU(0.1), nn.Tanh(), nn.Sigmoid()):
        H = module(Z)
        fresh = ACTIVATION_DERIVATIVES[type(module)](module, G, Z, H)
        buffer = torch.full((30, 4), float("nan"))
        written = ACTIVATION_DERIVATIVES[type(module)](module, G, Z, H, out=buffer)
        assert written.data_ptr() == buffer.data_ptr() and torch.equal(buffer, fresh), type(module).__name__
        leaf = Z.clone().requires_grad_(True)
        (reference,) = torch.autograd.grad((module(leaf) * G).sum(), leaf)
        torch.testing.assert_close(fresh, reference)


def test_augmented_first_layer_gives_the_same_outputs_and_pullbacks():
    """``trace(X, augmented=[X | 1])``: the first layer's weight and bias as one product, the same
    outputs and pullbacks up to rounding; a network without a first-layer bias ignores it."""
    X = torch.randn(60, 4, generator=torch.Generator().manual_seed(5))
    augmented = torch.cat([X, torch.ones(60, 1)], dim=1)
    cot = torch.randn(2, 60, generator=torch.Generator().manual_seed(6))
    bounds = ((0, 25), (25, 60))
    models = [mlp(4, hidden=(5,), seed=0), mlp(4, hidden=(5, 3), seed=1), linear(4, seed=2),
              nn.Sequential(nn.Linear(4, 3, bias=False), nn.Tanh(), nn.Linear(3, 1))]
    for model in models:
        for params in (list(model.parameters()), list(model.parameters())[:1], list(model.parameters())[1:]):
            network = FeedForward.recognise(model, params)
            plain = network.trace(X)
            for copy in (augmented, augmented.t().contiguous().t()):  # row- and column-major (the oracle's)
                fused = network.trace(X, augmented=copy)
                torch.testing.assert_close(fused.out, plain.out, rtol=1e-6, atol=1e-6)
                torch.testing.assert_close(fused.pullback_segments(cot, bounds), plain.pullback_segments(cot, bounds),
                                           rtol=1e-5, atol=1e-6)
                torch.testing.assert_close(fused.pullback(cot), _reference(model, params, X, cot), rtol=1e-5, atol=1e-6)
    with pytest.raises(ValueError, match=r"augmented: expected shape \(60, 5\)"):
        FeedForward.recognise(models[0], list(models[0].parameters())).trace(X, augmented=X)


def test_the_oracle_augments_large_feature_matrices_and_keeps_recurring_copies(monkeypatch):
    """``LocalDerivatives.augmented``: ``[X | 1]`` for batches of at least MIN_ROWS rows (a rule on the
    batch: a resumed fit takes the same path); the copies of two recurring matrices are kept."""
    X, other = torch.randn(30, 4), torch.randn(20, 4)
    assert LocalDerivatives("auto").augmented(X) is None  # fewer rows than MIN_ROWS: a mini-batch
    monkeypatch.setattr("solvers.derivatives.MIN_ROWS", 10)
    oracle = LocalDerivatives("auto")
    copy = oracle.augmented(X)
    assert torch.equal(copy, torch.cat([X, torch.ones(30, 1)], dim=1)) and oracle.augmented(X) is copy
    assert copy.t().is_contiguous()  # column-major: the pullback reads it along its columns
    kept = oracle.augmented(other)
    assert oracle.augmented(other) is kept and oracle.augmented(X) is copy  # both kept
    for _ in range(3):
        assert oracle.augmented(torch.randn(30, 4)) is not None  # fresh batches evict each other ...
        assert oracle.augmented(X) is copy  # ... not the recurring matrix
    X.add_(1.0)  # changed in place: a new copy
    fresh = oracle.augmented(X)
    assert fresh is not copy and torch.equal(fresh[:, :4], X)
    assert LocalDerivatives("loop").augmented(X) is None
    monkeypatch.setattr("solvers.derivatives.AUGMENT_MAX_ELEMENTS", 100)
    assert LocalDerivatives("auto").augmented(X) is None  # 120 entries: over the cap
