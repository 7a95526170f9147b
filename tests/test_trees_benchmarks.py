"""The measures of benchmarks/trees_odds.py and trees_regression.py against fairopt's own, and
the FairGBM shim of trees_odds.py (skipped where fairgbm is not installed)."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"
if str(BENCHMARKS) not in sys.path:  # the scripts import their siblings (_common, trees) by name
    sys.path.insert(0, str(BENCHMARKS))

import trees_odds  # noqa: E402
import trees_regression  # noqa: E402

from fairopt.measures.gedi import gedi as fairopt_gedi  # noqa: E402
from fairopt.metrics import equal_opportunity_difference, equalized_odds_difference  # noqa: E402


def test_rate_gaps_match_fairopt_metrics():
    rng = np.random.default_rng(0)
    for _ in range(5):
        y, s = rng.integers(0, 2, 500), rng.integers(0, 2, 500)
        pred = (rng.random(500) < 0.3 + 0.3 * s).astype(int)
        gaps = trees_odds.rate_gaps(pred, y, s)
        assert gaps["TPR gap"] == pytest.approx(equal_opportunity_difference(y, pred, sensitive_features=s))
        assert max(gaps.values()) == pytest.approx(equalized_odds_difference(y, pred, sensitive_features=s))
    pred = np.where(s == 1, 1, y)  # group 1 always positive: TPR equal (1 vs 1), FPR 0 vs 1
    assert trees_odds.rate_gaps(pred, y, s) == {"TPR gap": 0.0, "FPR gap": 1.0}


@pytest.mark.parametrize("degree", [1, 2, 3])
def test_gedi_matches_fairopt(degree):
    rng = np.random.default_rng(degree)
    s = rng.gamma(2.0, size=400)
    pred = 3.0 * s - 0.5 * s ** 2 + rng.normal(size=400)
    assert trees_regression.gedi(s, pred, degree) == pytest.approx(float(fairopt_gedi(s, pred, degree)), rel=1e-9)


def test_covariance_and_relative_measures():
    rng = np.random.default_rng(1)
    s = rng.integers(0, 2, 300).astype(float)
    y = 2.0 * s + rng.normal(size=300)
    assert trees_regression.covariance(s, y) == pytest.approx(abs(np.cov(s, y, bias=True)[0, 1]))
    part = trees_regression.Split(X=np.zeros((300, 1)), y=y, s=s, X_test=np.zeros((300, 1)), y_test=y, s_test=s)
    half = trees_regression.measures(part, 0.5 * y, 0.5 * y, degree=1)
    # predictions that are half the target have half its dependence on both measures
    assert half["train GeDI/ref"] == pytest.approx(0.5) and half["test cov/ref"] == pytest.approx(0.5)
    assert half["test R2"] < 1.0 and half["test RMSE"] == pytest.approx(np.sqrt(np.mean((0.5 * y) ** 2)))


def test_fairgbm_runs_through_the_shim():
    pytest.importorskip("fairgbm")
    from benchmarks.papers.peer_adapters import Part

    rng = np.random.default_rng(2)
    n = 600
    s = rng.integers(0, 2, n)
    X = np.column_stack([rng.normal(size=n) + s, rng.normal(size=n)]).astype(np.float32)
    y = (X[:, 0] + 0.5 * rng.normal(size=n) > 0.5).astype(int)
    train = Part(X[:400], y[:400], s[:400])
    test = Part(X[400:], y[400:], s[400:])
    out = trees_odds.METHODS["fairgbm"][2](train, test, 0.05, 0)
    assert out["train_pred"].shape == (400,) and out["test_pred"].shape == (200,)
    assert set(np.unique(out["train_pred"])) <= {0, 1} and 0.6 < np.mean(out["train_pred"] == train.y)
