"""method="penalty": a fixed weight that pushes a bound far inside it is reported (issue 31, point 9)."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch

from fairopt import FairRegressor, FairnessWarning
from fairopt.penalty_slack import SLACK_FRACTION, over_satisfied_rows


def _data(n: int = 500):
    rng = np.random.default_rng(3)
    s = (rng.random(n) < 0.5).astype(float)
    X = np.column_stack([rng.normal(size=n) + s, rng.normal(size=n), rng.normal(size=n) - 0.5 * s])
    y = 100.0 + 40.0 * (X @ np.array([1.0, 0.5, -1.0])) + rng.normal(scale=20.0, size=n)
    return X, y, s


def _slope(values, s):
    z = s - s.mean()
    return float(np.dot(z, values - values.mean()) / np.dot(z, z))


def _slack_warnings(weight):
    X, y, s = _data()
    est = FairRegressor(constraints=[("gedi", "s", 0.5, {"relative": True})], method="penalty",
                        engine_params=None if weight is None else {"weight": weight})
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        est.fit(X, y, sensitive_features={"s": s})
    found = [w for w in caught if issubclass(w.category, FairnessWarning) and "over-satisfies" in str(w.message)]
    return est, found, (X, y, s)


def test_default_weight_that_over_satisfies_the_bound_warns():
    est, found, (X, y, s) = _slack_warnings(None)
    ratio = abs(_slope(est.predict(X), s)) / abs(_slope(y, s))  # independent of fairopt: the realised GeDI-1
    assert ratio < 0.5 * (1 - SLACK_FRACTION)  # far inside the bound 0.5: the premise of the warning
    assert len(found) == 1 and "weight 'default 1.0'" in str(found[0].message)


def test_a_weight_that_just_meets_the_bound_is_quiet():
    # the smallest weight of a geometric grid whose realised ratio meets the bound
    for weight in (1e-2, 1.2e-2, 1.5e-2, 1.8e-2, 2.2e-2):
        est, found, (X, y, s) = _slack_warnings(weight)
        ratio = abs(_slope(est.predict(X), s)) / abs(_slope(y, s))
        if ratio <= 0.5 * 1.01:
            break
    else:
        pytest.fail("no weight of the grid meets the bound")
    assert ratio > 0.5 * (1 - SLACK_FRACTION)
    assert found == []


def test_rows_with_a_zero_bound_are_not_judged():
    class Rows:
        lower = torch.tensor([-float("inf"), 1.0])
        upper = torch.tensor([0.0, 3.0])
        row_names = ["zero bound", "two-sided"]

        def exact(self, out, data):
            return torch.tensor([-5.0, 2.0])

    class Data:
        X = torch.zeros((2, 1))

        def __len__(self):
            return 2

    rows = over_satisfied_rows(lambda x: x.reshape(-1), Data(), [Rows()])
    # the first row's bound is 0 (no scale); the second has room 1 to each side, i.e. 1/1 and 1/3 of |bound|
    assert rows == []
    assert [r[0] for r in over_satisfied_rows(lambda x: x.reshape(-1), Data(), [Rows()], fraction=0.2)] == ["two-sided"]


def test_a_constraint_with_a_row_at_its_bound_is_not_over_satisfied():
    """A difference bound on several groups compares each with the rest: one group's rows far inside while
    another's sits at the bound (or beyond) is not a penalty pushing the model too far (a trial got "Lower the
    weight" at EO exactly 0.050 <= 0.05, and at 0.070, infeasible)."""
    from fairopt.penalty_slack import over_satisfied_rows

    class Rows:
        name = "eo[race]"
        row_names = ["a", "b", "c"]
        lower = torch.tensor([-0.05, -0.05, -0.05], dtype=torch.float64)
        upper = torch.tensor([0.05, 0.05, 0.05], dtype=torch.float64)

        def __init__(self, values):
            self.values = torch.tensor(values, dtype=torch.float64)

        def exact(self, out, batch):
            return self.values

    class Model(torch.nn.Module):
        def forward(self, X):
            return X[:, 0]

    class Batch:
        X = torch.zeros(4, 1)

        def __len__(self):
            return 4

    assert [r[0] for r in over_satisfied_rows(Model(), Batch(), [Rows([0.0, 0.001, -0.002])])] == ["a", "b", "c"]
    assert over_satisfied_rows(Model(), Batch(), [Rows([0.0, 0.049, -0.002])]) == []  # b at its bound
    assert over_satisfied_rows(Model(), Batch(), [Rows([0.0, 0.07, -0.002])]) == []   # b beyond it
