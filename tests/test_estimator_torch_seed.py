"""The estimators' ``seed`` fixes every random draw of a fit, the dropout masks a user's module draws from
torch's global RNG while it trains included: the same seed gives the same model whatever the caller's global
torch seed, and the caller's global RNG is left as it was."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch

from fairopt import FairClassifier

pytestmark = [pytest.mark.usefixtures("one_torch_thread")]


def _dropout_net(p: int) -> torch.nn.Module:
    return torch.nn.Sequential(torch.nn.Linear(p, 16), torch.nn.ReLU(), torch.nn.Dropout(0.3), torch.nn.Linear(16, 1))


@pytest.fixture(scope="module")
def rows():
    rng = np.random.default_rng(0)
    n = 600
    s = rng.integers(0, 2, n)
    X = rng.normal(size=(n, 4)) + 0.5 * s[:, None]
    y = (X[:, 0] + 0.8 * s + rng.normal(size=n) > 0.4).astype(int)
    return X, y, s


def _decisions(rows, global_seed: int, **options) -> np.ndarray:
    X, y, s = rows
    torch.manual_seed(global_seed)
    clf = FairClassifier(("disparate_impact", "s", 0.8), model=_dropout_net, seed=3, verbose=0, **options)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        clf.fit(X, y, sensitive_features=s)
    return clf.decision_function(X)


@pytest.mark.parametrize("options", [{"epochs": 15}, {"epochs": 2, "batch_size": 128},
                                     {"method": "penalty", "epochs": 20}])
def test_same_seed_same_dropout_model_whatever_the_global_seed(rows, options):
    first = _decisions(rows, 1, **options)
    assert np.array_equal(first, _decisions(rows, 2, **options))


def test_a_fit_leaves_the_global_rng_as_it_was(rows):
    torch.manual_seed(11)
    state = torch.random.get_rng_state()
    _decisions(rows, 11, epochs=5)
    assert torch.equal(torch.random.get_rng_state(), state)
