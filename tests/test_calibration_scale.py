"""Tests of the lambda range of [DC] eq (4.5) (lambda_scale, lambda_grid) and its use by
calibrate_penalty when no grid is given."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from fairopt.data import FairData
from fairopt.experiments import (
    DEFAULT_LAMBDA_MULTIPLIERS,
    Fitted,
    PenaltyMethod,
    calibrate_penalty,
    lambda_grid,
    lambda_scale,
    split_data,
)
from fairopt.measures import dcov

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def test_lambda_scale_by_hand():
    # mean loss (0.5 + 0.7) / 2 = 0.6, regulariser 0.02: 0.6 / 0.02 = 30
    assert lambda_scale([0.5, 0.7], 0.02) == pytest.approx(30.0)
    assert lambda_scale(0.6, 0.02) == pytest.approx(30.0)
    assert lambda_scale(-0.6, 0.02) == pytest.approx(30.0)  # a loss defined up to a constant
    assert lambda_grid(30.0) == pytest.approx([0.0, 3.0, 6.0, 15.0, 30.0, 60.0, 150.0])
    assert lambda_grid(2.0, [1, 4]) == [0.0, 2.0, 8.0]
    assert DEFAULT_LAMBDA_MULTIPLIERS == (0.1, 0.2, 0.5, 1.0, 2.0, 5.0)


def test_lambda_scale_errors():
    with pytest.raises(ValueError, match="positive regulariser"):
        lambda_scale(0.6, 0.0)
    with pytest.raises(ValueError, match="positive regulariser"):
        lambda_scale(0.6, -1e-4)
    with pytest.raises(ValueError, match="loss"):
        lambda_scale([0.5, np.nan], 0.1)
    with pytest.raises(ValueError, match="mean baseline loss is 0"):
        lambda_scale([0.5, -0.5], 0.1)
    with pytest.raises(ValueError, match="regulariser"):
        lambda_scale(0.6, float("inf"))
    with pytest.raises(ValueError, match="multipliers"):
        lambda_grid(1.0, [2, 1])
    with pytest.raises(ValueError, match="scale"):
        lambda_grid(0.0)


def _data(n: int = 200, seed: int = 3) -> FairData:
    rng = np.random.default_rng(seed)
    s = rng.integers(0, 2, n)
    X = np.column_stack([rng.normal(size=n), rng.normal(size=n)])
    y = rng.integers(0, 2, n).astype(float)
    return FairData.from_arrays(X, y, {"sex": s}, sensitive_kinds={"sex": "binary"})


def psi(out: torch.Tensor, batch) -> torch.Tensor:
    """dCov~^2 of the predicted probabilities and sex (a plain callable penalty)."""
    return dcov(torch.sigmoid(out), batch.sensitive["sex"].to(torch.float64))


class _ScaledStep:
    """Logits ``1.5 (2 s - 1) + 0.3 x_1`` below lambda = 1, then group-blind; records the values."""

    name, hyperparameter = "step", "lambda"
    penalties = [psi]
    loss = None  # the task's loss: binary cross-entropy

    def __init__(self) -> None:
        self.values: list[float] = []

    def fit(self, train, *, value, seed):
        self.values.append(value)

        def predict(batch):
            s = batch.sensitive["sex"].to(torch.float64)
            base = 0.3 * batch.X[:, 0].to(torch.float64)
            return base + (1.5 * (2 * s - 1) if value < 1.0 else 0.0)

        return Fitted(model=None, predict=predict, seconds=0.0)


def _brute_dcov(x: np.ndarray, s: np.ndarray) -> float:
    def centre(v):
        a = np.abs(v[:, None] - v[None, :])
        n = len(v)
        c = a - a.sum(0) / (n - 2) - a.sum(1, keepdims=True) / (n - 2) + a.sum() / ((n - 1) * (n - 2))
        np.fill_diagonal(c, 0.0)
        return c

    n = len(x)
    return float((centre(x) * centre(s)).sum() / (n * (n - 3)))


def test_calibrate_penalty_uses_eq_4_5_without_a_grid():
    data = _data()
    method = _ScaledStep()
    result = calibrate_penalty(method, data, seeds=(0, 1))
    # eq (4.5) by hand on the validation part of the same split
    _, _, valid = split_data(data, 1, 0.3, 0)[0]
    s = valid.sensitive["sex"].numpy().astype(float)
    out = 0.3 * valid.X[:, 0].numpy().astype(float) + 1.5 * (2 * s - 1)
    y = valid.y.numpy().astype(float)
    bce = np.mean(np.log1p(np.exp(out)) - y * out)
    regulariser = _brute_dcov(1 / (1 + np.exp(-out)), s)
    expected = bce / regulariser
    assert result.baseline_loss == pytest.approx(bce, rel=1e-5)
    assert result.baseline_regulariser == pytest.approx(regulariser, rel=1e-5)
    assert result.lambda_scale == pytest.approx(expected, rel=1e-5)
    grid = [0.0] + [m * expected for m in DEFAULT_LAMBDA_MULTIPLIERS]
    np.testing.assert_allclose(result.summary["value"], grid, rtol=1e-5)
    # every value trained once per seed (the baseline runs are reused, not retrained)
    assert len(method.values) == 2 * len(grid) and method.values.count(0.0) == 2
    assert len(result.runs) == 2 * 2 * len(grid)  # train and validation rows
    assert not any(column.startswith("_eq45") for column in result.runs.columns)
    # group-blind predictions from lambda = 1 on: the elbow is the first candidate >= 1
    assert result.selected == min(v for v in result.summary["value"] if v >= 1.0)
    custom = calibrate_penalty(_ScaledStep(), data, multipliers=[1.0, 3.0])
    np.testing.assert_allclose(custom.summary["value"], [0.0, expected, 3 * expected], rtol=1e-5)


def test_explicit_grid_is_unchanged():
    data = _data()
    result = calibrate_penalty(_ScaledStep(), data, [0.5, 2.0])
    assert result.summary["value"].tolist() == [0.0, 0.5, 2.0]
    assert result.lambda_scale is None and result.baseline_loss is None
    assert result.selected == 2.0


def test_calibrate_penalty_without_grid_needs_penalties():
    data = _data()

    class NoPenalty:
        name, hyperparameter = "plain", "lambda"

        def fit(self, train, *, value, seed):  # pragma: no cover - never trained
            raise AssertionError

    with pytest.raises(ValueError, match="lambdas: required"):
        calibrate_penalty(NoPenalty(), data)
    weighted = PenaltyMethod([psi], weight_of=lambda lam: 1 / lam, epochs=1)
    with pytest.raises(ValueError, match="weight_of"):
        calibrate_penalty(weighted, data)
    with pytest.raises(ValueError, match="multipliers"):
        calibrate_penalty(_ScaledStep(), data, multipliers=[0.0, 1.0])


def test_calibrate_penalty_with_a_penalty_method_end_to_end():
    rng = np.random.default_rng(5)
    n = 240
    sex = rng.integers(0, 2, n)
    X = np.column_stack([rng.normal(size=n) + 1.5 * sex, rng.normal(size=n)])
    y = (X[:, 0] + 0.5 * rng.normal(size=n) > 0.8).astype(float)  # y and X depend on sex
    data = FairData.from_arrays(X, y, {"sex": sex}, sensitive_kinds={"sex": "binary"})
    method = PenaltyMethod([psi], name="dcov", hyperparameter="lambda", epochs=3, lr=0.05)
    result = calibrate_penalty(method, data)
    assert result.lambda_scale is not None and result.lambda_scale > 0
    assert result.summary["value"].iloc[0] == 0.0 and len(result.summary) == 1 + len(DEFAULT_LAMBDA_MULTIPLIERS)
