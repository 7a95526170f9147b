"""The engines' output convention (solvers.problem.row_outputs / model_outputs): one output
per row, (n,), or the (n, 1) column of a single-output module such as a plain
torch.nn.Linear(p, 1), squeezed in one place for every engine; any other shape is refused."""

from __future__ import annotations

import contextlib
import warnings

import numpy as np
import pytest
import torch
from torch import nn

from fairopt.constraints import DisparateImpact
from fairopt.data import FairData
from fairopt.estimators import FairClassifier, FairRegressor
from solvers import StochasticSQP
from solvers.lagrangian import LagrangianDual
from solvers.penalty import Penalty
from solvers.problem import model_outputs, row_outputs


pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture(scope="module")
def data() -> FairData:
    rng = np.random.default_rng(0)
    n = 300
    s = rng.integers(0, 2, n)
    X = np.column_stack([rng.normal(size=n) + 1.2 * s, rng.normal(size=n), rng.normal(size=n)])
    y = (X[:, 0] - 0.5 * X[:, 1] + 0.5 * rng.normal(size=n) > 0.6).astype(float)
    return FairData.from_arrays(X, y, {"sex": s}, sensitive_kinds={"sex": "binary"})


class _Flat(nn.Module):
    """The same linear layer with its output flattened to (n,) by the module itself (row by
    row, as it declares: the SQP engine then takes the same stratified pullback as for the
    plain layer)."""

    rowwise = True

    def __init__(self, linear: nn.Linear) -> None:
        super().__init__()
        self.linear = linear

    def forward(self, X: torch.Tensor) -> torch.Tensor:
        return self.linear(X).squeeze(1)


class _Shaped(nn.Module):
    """A linear layer whose outputs are reshaped to ``shape(n)``."""

    def __init__(self, p: int, shape) -> None:
        super().__init__()
        self.linear = nn.Linear(p, 2)
        self.shape = shape

    def forward(self, X: torch.Tensor) -> torch.Tensor:
        out = self.linear(X)
        return out if self.shape is None else out[:, :1].reshape(self.shape(X.shape[0]))


def _column_and_flat(p: int) -> tuple[nn.Linear, nn.Module]:
    torch.manual_seed(0)
    column = nn.Linear(p, 1)
    flat = _Flat(nn.Linear(p, 1))
    flat.linear.load_state_dict(column.state_dict())
    return column, flat


def test_row_outputs_squeezes_only_a_single_column():
    out = torch.arange(6.0, requires_grad=True)
    assert row_outputs(out, 6) is out
    column = out.reshape(6, 1)
    flat = row_outputs(column, 6)
    assert flat.shape == (6,) and torch.equal(flat, out.detach())
    flat.sum().backward()  # a view: gradients reach the module's output
    assert torch.equal(out.grad, torch.ones(6))
    assert row_outputs(torch.zeros(1, 1), 1).shape == (1,)
    for shape in [(6, 2), (1, 6), (6, 1, 1), (3,), (5, 1), ()]:
        with pytest.raises(ValueError, match=r"model: expected one output per row, shape \(6,\) or \(6, 1\)"):
            row_outputs(torch.zeros(shape), 6)
    with pytest.raises(ValueError, match="expected a tensor"):
        row_outputs(np.zeros(6), 6)
    with pytest.raises(ValueError, match="^module_factory: "):
        row_outputs(torch.zeros(6, 2), 6, what="module_factory")


def test_model_outputs_of_a_plain_linear_layer(data):
    column, flat = _column_and_flat(data.n_features)
    assert torch.equal(model_outputs(column, data), model_outputs(flat, data))
    assert model_outputs(column, data).shape == (len(data),)


# the SQP engines on the gradient metric: "auto" picks the curvature metric only for a network it
# recognises, which the custom flattening module is not
_ENGINES = {
    "sqp": lambda: StochasticSQP(epochs=15, hessian="adam"),
    "sqp_minibatch_balanced": lambda: StochasticSQP(epochs=3, batch_size=64, constraint_batch="balanced",
                                                    polish_iterations=3, hessian="adam"),
    "sqp_chunked": lambda: StochasticSQP(epochs=10, chunk_rows=70, hessian="adam"),
    "penalty": lambda: Penalty(epochs=15, lr=0.05, batch_size=100),
    "lagrangian": lambda: LagrangianDual(epochs=15, lr=0.05, batch_size=100),
}


@contextlib.contextmanager
def _quiet():
    """Unmet-bound, relaxed-step and fit-quality warnings are beside the point of these short runs."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        yield


def _fit(name: str, model: nn.Module, data: FairData):
    constraint = DisparateImpact("sex", 0.8)
    with _quiet():
        if name == "penalty":
            return _ENGINES[name]().fit(model, data, loss="bce", penalties=constraint)
        return _ENGINES[name]().fit(model, data, loss="bce", constraints=constraint)


@pytest.mark.parametrize("name", list(_ENGINES))
def test_engines_train_a_plain_linear_layer(name, data):
    """A plain torch.nn.Linear(p, 1) trains exactly as the same layer with a flattened
    output: same iterates, same returned model, same history."""
    column, flat = _column_and_flat(data.n_features)
    got = _fit(name, column, data)
    ref = _fit(name, flat, data)
    assert got.status == ref.status and len(got.history) == len(ref.history) > 0
    for a, b in zip(column.parameters(), flat.linear.parameters()):
        assert torch.equal(a, b)
    assert got.history.column("f").tolist() == ref.history.column("f").tolist()
    assert got.info.get("c_exact") == ref.info.get("c_exact")


@pytest.mark.parametrize("name", list(_ENGINES))
@pytest.mark.parametrize("shape", [None, lambda n: (1, n), lambda n: (n, 1, 1)], ids=["(n,2)", "(1,n)", "(n,1,1)"])
def test_engines_refuse_other_shapes(name, shape, data):
    torch.manual_seed(0)
    with pytest.raises(ValueError, match="model: expected one output per row"):
        _fit(name, _Shaped(data.n_features, shape), data)


@pytest.mark.parametrize("method", ["sqp", "penalty", "lagrangian", "moving_targets"])
def test_estimators_accept_a_single_column_model_factory(data, method):
    """model=lambda p: nn.Linear(p, 1) fits and predicts as the same layer flattened by the
    module (same seeded initialisation)."""
    X, y, s = data.X.double().numpy(), data.y.numpy(), data.sensitive["sex"].numpy()
    options = {"method": method, "epochs": 10,
               "engine_params": {"iterations": 1} if method == "moving_targets" else None}
    fits = []
    for factory in (lambda p: nn.Linear(p, 1), lambda p: nn.Sequential(nn.Linear(p, 1), nn.Flatten(0))):
        with _quiet():
            clf = FairClassifier(("di", "sex", 0.8), model=factory, **options)
            fits.append(clf.fit(X, y, sensitive_features={"sex": s}))
    out = fits[0].decision_function(X)
    assert out.shape == (len(X),)
    np.testing.assert_array_equal(out, fits[1].decision_function(X))
    assert fits[0].predict_proba(X).shape == (len(X), 2)


def test_regressor_accepts_a_single_column_model_factory(data):
    X = data.X.double().numpy()
    y = X[:, 0] + 0.5 * X[:, 1]
    reg = FairRegressor(model=lambda p: nn.Linear(p, 1), method="penalty", epochs=200, lr=0.05).fit(X, y)
    assert reg.predict(X).shape == (len(X),) and reg.score(X, y) > 0.9


def test_eval_mode_switches_a_training_module_and_restores_it_even_on_error():
    from solvers.problem import eval_mode

    module = nn.Sequential(nn.Linear(2, 2), nn.Dropout(0.5))
    with eval_mode(module):
        assert not module.training and not module[1].training
    assert module.training and module[1].training
    with pytest.raises(RuntimeError), eval_mode(module):
        raise RuntimeError("inside")
    assert module.training
    module.eval()
    with eval_mode(module):
        pass
    assert not module.training  # a module already in eval mode stays there
    with eval_mode(lambda x: x):  # any other callable is left alone
        pass


@pytest.mark.parametrize("method", ["sqp", "penalty", "lagrangian"])
def test_a_two_logit_network_is_refused_before_training_with_advice(data, method):
    """A network with one logit per class is refused at its first output (on two rows, not a stratum of
    thousands), and the message says how to give the one logit the estimators train."""
    X, y, s = data.X.numpy(), data.y.numpy(), data.sensitive["sex"].numpy()
    clf = FairClassifier(("disparate_impact", "sex", 0.8), method=method, epochs=2, verbose=0,
                         model=lambda p: nn.Sequential(nn.Linear(p, 4), nn.ReLU(), nn.Linear(4, 2)))
    with pytest.raises(ValueError, match=r"\(2, 2\); a binary classifier's module outputs the positive class's "
                                         r"logit alone: .* logits\[:, 1\] - logits\[:, 0\]"):
        clf.fit(X, y, sensitive_features=s)


def test_other_shapes_get_no_class_logit_advice():
    with pytest.raises(ValueError, match=r"got \(5, 3\)$"):
        row_outputs(torch.zeros(5, 3), 5)
