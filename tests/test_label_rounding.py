"""Hard labels at the decision threshold: the float32 pass the engines measure and the float64 pass
``predict`` reads (solvers.label_rounding, solvers.problem.float64_forward)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn

from fairopt import FairClassifier
from solvers.label_rounding import MAX_BIAS_ULPS, settle_rounded_labels
from solvers.problem import float64_forward


class RoundedLinear(nn.Module):
    """``x w + b`` whose float32 pass subtracts ``rounding[i]`` from row ``i``: a stand-in for the rounding
    of a float32 matrix product, which moves a row's output by about 1e-7 of its terms."""

    def __init__(self, w: list[float], b: float, rounding: dict[int, float]) -> None:
        super().__init__()
        self.linear = nn.Linear(len(w), 1)
        with torch.no_grad():
            self.linear.weight.copy_(torch.tensor([w]))
            self.linear.bias.fill_(b)
        self.rounding = rounding

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.linear(x).reshape(-1)
        if x.dtype == torch.float32:
            shift = torch.zeros_like(out)
            for row, eps in self.rounding.items():
                shift[row] = eps
            out = out - shift
        return out


class _Rows:
    """The rows' inputs and targets (what settle_rounded_labels reads of a data set)."""

    def __init__(self, X: torch.Tensor) -> None:
        self.X, self.y = X, torch.zeros(len(X))

    def __len__(self) -> int:
        return len(self.X)


def _data(values: list[float]) -> _Rows:
    return _Rows(torch.tensor(values, dtype=torch.float32).reshape(-1, 1))


def test_a_row_positive_only_in_float64_gets_the_float32_label_and_no_other_row_moves():
    data = _data([3e-8, 0.5, -0.5, 2e-3, -2e-3])
    model = RoundedLinear([1.0], 0.0, {0: 1e-7})  # row 0: float32 -7e-8, float64 +3e-8
    before = float64_forward(model, data.X) > 0
    assert bool(before[0])
    assert settle_rounded_labels(model, data) == 1
    after = float64_forward(model, data.X)
    assert not bool(after[0] > 0)  # the label the float32 pass measured
    assert torch.equal(after[1:] > 0, before[1:])
    assert 0 < -float(model.linear.bias) < 1e-6  # a move of a few float32 steps


def test_a_row_negative_only_in_float64_is_moved_up():
    model = RoundedLinear([1.0], 0.3, {0: -1e-7})  # a bias of its usual scale, whose float32 step is 3e-8
    data = _data([-0.3 - 3e-8, 0.5, -0.5])
    out = float64_forward(model, data.X)
    assert -1e-7 < float(out[0]) < 0 < float(model(data.X)[0])  # negative in float64 only
    assert settle_rounded_labels(model, data) == 1
    assert bool(float64_forward(model, data.X)[0] > 0)


@pytest.mark.parametrize("values, rounding", [
    ([3e-8, -3e-8, 0.5], {0: 1e-7, 1: -1e-7}),  # one row needs the bias down, the other up
    ([3e-8, 3.1e-8, 0.5], {0: 1e-7}),          # a row just beyond the first would flip too
])
def test_no_move_when_it_cannot_give_exactly_the_measured_labels(values, rounding):
    data = _data(values)
    model = RoundedLinear([1.0], 0.0, rounding)
    bias = float(model.linear.bias)
    assert settle_rounded_labels(model, data) == 0
    assert float(model.linear.bias) == bias


def test_agreeing_labels_and_a_model_without_an_output_bias_are_left_alone():
    data = _data([0.3, -0.2, 0.1])
    model = RoundedLinear([1.0], 0.0, {})
    assert settle_rounded_labels(model, data) == 0
    no_bias = nn.Sequential(nn.Linear(1, 1, bias=False))
    with torch.no_grad():
        no_bias[0].weight.fill_(1.0)
    assert settle_rounded_labels(no_bias, _data([3e-8, 0.5])) == 0
    assert MAX_BIAS_ULPS >= 8


def _small_group_task(seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """900 rows, a group of 30 with a higher base rate: one row of it moves its rate by 3.3 points."""
    rng = np.random.default_rng(seed)
    n, small = 900, 30
    s = np.r_[np.ones(small, dtype=int), np.zeros(n - small, dtype=int)]
    X = rng.normal(size=(n, 6)) + 0.8 * s[:, None]
    y = (X[:, 0] + X[:, 1] + 0.7 * rng.normal(size=n) > 0.6).astype(int)
    return X, y, s


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_the_verdict_counts_the_labels_predict_gives(seed):
    """The estimator's training violations, bound statuses and evaluate() read the float64 outputs predict reads:
    the disparate impact recomputed from predict is the one reported, on any trajectory."""
    X, y, s = _small_group_task(seed)
    est = FairClassifier(("disparate_impact", "s", 0.8), seed=seed, epochs=200).fit(X, y, sensitive_features={"s": s})
    pred = est.predict(X)
    rates = [pred[s == g].mean() for g in (0, 1)]
    di = min(rates) / max(rates)
    report = est.evaluate(X, y, sensitive_features={"s": s})
    assert report["di_ratio"] == pytest.approx(di, abs=1e-12)
    violation = max(0.0, 0.8 * max(rates) - min(rates))  # the row delta P_ref - P_g of the lower group
    assert est.train_violations_["disparate_impact[s]"] == pytest.approx(violation, abs=1e-9)
    assert (est.status_ == "infeasible") == (violation > 1e-3)
