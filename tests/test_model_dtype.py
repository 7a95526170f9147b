"""A module whose parameters are in another floating dtype than the inputs (a factory that ends in
``.double()``) is a ValueError that names both dtypes, from every engine and the estimators, instead of
torch's "mat1 and mat2 must have the same dtype" from inside the first forward pass."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from fairopt import FairClassifier, FairData
from fairopt.constraints import DisparateImpact
from solvers import LagrangianDual, StochasticSQP

pytestmark = [pytest.mark.usefixtures("one_torch_thread")]


def _double_net(p: int) -> torch.nn.Module:
    return torch.nn.Sequential(torch.nn.Linear(p, 4), torch.nn.ReLU(), torch.nn.Linear(4, 1)).double()


@pytest.fixture(scope="module")
def rows() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    s = rng.integers(0, 2, 200)
    X = rng.normal(size=(200, 3))
    return X, (X[:, 0] + s > 0.5).astype(int), s


@pytest.mark.parametrize("engine", [StochasticSQP(epochs=2, verbose=0), LagrangianDual(epochs=2, verbose=0)],
                         ids=lambda engine: type(engine).__name__)
def test_engines_name_the_dtypes(rows, engine):
    X, y, s = rows
    data = FairData.from_arrays(X, y, {"s": s})
    with pytest.raises(ValueError, match=r"float64 but the inputs are torch\.float32"):
        engine.fit(_double_net(data.n_features), data, loss="bce", constraints=[DisparateImpact("s", delta=0.8)])


@pytest.mark.parametrize("method", ["sqp", "penalty", "lagrangian"])
def test_the_estimator_names_the_dtypes(rows, method):
    X, y, s = rows
    clf = FairClassifier(("disparate_impact", "s", 0.8), method=method, model=_double_net, epochs=2, verbose=0)
    with pytest.raises(ValueError, match="float64 but the inputs are torch.float32"):
        clf.fit(X, y, sensitive_features=s)


def test_a_module_in_the_inputs_dtype_trains(rows):
    X, y, s = rows
    data = FairData.from_arrays(X, y, {"s": s})
    model = torch.nn.Sequential(torch.nn.Linear(data.n_features, 4), torch.nn.ReLU(), torch.nn.Linear(4, 1))
    constraints = [DisparateImpact("s", delta=0.8)]
    result = StochasticSQP(epochs=2, verbose=0).fit(model, data, loss="bce", constraints=constraints)
    assert result.history is not None
