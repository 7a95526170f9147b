"""The measures of benchmarks/trees_odds.py and trees_regression.py against fairopt's own, the
FairGBM shim of trees_odds.py (skipped where fairgbm is not installed), and the grid machinery the
three tree scripts share (benchmarks/trees.py, benchmarks/_common.py) on toy methods."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"
if str(BENCHMARKS) not in sys.path:  # the scripts import their siblings (_common, trees) by name
    sys.path.insert(0, str(BENCHMARKS))

import _common  # noqa: E402
import gbm_missing  # noqa: E402
import trees  # noqa: E402
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


# --------------------------------------------------------------------------------------
# the shared grid machinery
# --------------------------------------------------------------------------------------
def _toy_part(rng: np.random.Generator, n: int):
    from benchmarks.papers.peer_adapters import Part

    s = rng.integers(0, 2, n)
    return Part(rng.normal(size=(n, 2)).astype(np.float32), rng.integers(0, 2, n), s)


def test_classifier_cell_measures_caches_and_skips(tmp_path, monkeypatch):
    rng = np.random.default_rng(3)
    train, test = _toy_part(rng, 300), _toy_part(rng, 100)
    monkeypatch.setattr(trees, "prepare", lambda dataset, seed, data_dir, rows: (train, test, None))
    calls = []

    def fit_predict(tr, te, bound, seed):
        calls.append(bound)
        return trees._out(tr.s, 1 - te.s, 1.5, note="toy")  # predictions: the attribute (train), its negation (test)

    def skipped(tr, te, bound, seed):
        raise trees.Skip("not here")

    methods: trees.Methods = {}
    method = trees.registrar(methods)
    method("toy", needs_s=False)(fit_predict)
    method("skipped", needs_s=True)(skipped)
    method("absent", needs_s=False, requires=("a_module_that_is_not_installed",))(fit_predict)
    options = {"methods": methods, "bound": ("bound", 0.25), "measure": trees_odds.gaps_measure,
               "log": trees.logger}
    record = trees.classifier_cell("adult", "toy", 0, "data", tmp_path, **options)
    # independent reference: predicting s gives rate gaps of exactly 1 on both labels; accuracy is P(y == s)
    assert record["status"] == "ok" and record["bound"] == 0.25 and calls == [0.25]
    assert record["train TPR gap"] == 1.0 and record["train FPR gap"] == 1.0
    assert record["train acc"] == pytest.approx(np.mean(train.y == train.s))
    assert record["test acc"] == pytest.approx(np.mean(test.y == 1 - test.s))
    assert record["fit s"] == 1.5 and record["note"] == "toy" and record["needs s"] == "no"
    cached = trees.classifier_cell("adult", "toy", 0, "data", tmp_path, **options)
    assert calls == [0.25] and cached["test acc"] == pytest.approx(record["test acc"])  # read back, not refitted
    for name in ("skipped", "absent"):
        out = trees.classifier_cell("adult", name, 0, "data", tmp_path, **options)
        assert out["status"] == "skipped" and out["note"]
    assert sorted(f.name for f in tmp_path.iterdir()) == ["adult__toy__0.json"]  # skipped runs are not cached


def test_run_grid_seeds_outermost_and_results(tmp_path, capsys):
    order = []

    def cell(dataset, name, seed, data_dir, cells):
        order.append((seed, dataset, name))
        record = {"dataset": dataset, "method": name, "seed": seed, "commit": "abc", "status": "ok", "note": ""}
        (cells / f"{dataset}__{name}__{seed}.json").write_text(pd.Series(record).to_json())
        return record

    (tmp_path / "cells_toy").mkdir()
    (tmp_path / "cells_toy" / "b__gone__0.json").write_text(pd.Series(
        {"dataset": "b", "method": "gone", "seed": 0, "commit": "old", "status": "ok", "note": ""}).to_json())
    parser = _common.grid_parser("toy", ["a", "b"], [0, 1], tmp_path, ["m1", "m2"])
    args = parser.parse_args(["--out", str(tmp_path), "--seeds", "1", "0"])
    assert (args.datasets, args.methods, args.threads) == (["a", "b"], ["m1", "m2"], 1)
    with pytest.raises(SystemExit):
        parser.parse_args(["--datasets", "c"])
    grid = trees.run_grid(args, cell, "cells_toy", ["m1", "m2"], trees.logger)
    assert order[:4] == [(1, "a", "m1"), (1, "a", "m2"), (1, "b", "m1"), (1, "b", "m2")] and len(order) == 8
    assert len(grid.runs) == 8 and set(grid.every["method"]) == {"m1", "m2"}  # the unknown method is left out
    line = _common.provenance("toy.py", ["--seeds", "0"], grid.every["commit"])
    assert line.startswith(f"commit {_common.commit()}; last command `python benchmarks/toy.py --seeds 0`")
    assert line.endswith("runs from commits abc.")
    trees.write_results(grid, "toy", ["# toy", line])
    assert (tmp_path / "toy.md").read_text() == "# toy\n" + line
    assert len(pd.read_csv(tmp_path / "toy.csv")) == 8
    assert "8 runs in" in capsys.readouterr().out


def test_table_helpers():
    table = pd.DataFrame({"dataset": ["b", "a", "b", "a"], "method": ["m2", "m2", "m1", "m1"], "x": [1, 2, 3, 4]})
    ordered = trees.in_grid_order(table, ["b", "a"], ["m1", "m2"])
    assert list(zip(ordered["dataset"], ordered["method"])) == [("b", "m1"), ("b", "m2"), ("a", "m1"), ("a", "m2")]
    assert trees.share(pd.Series([0.1, 0.5, 0.9]) > 0.4) == "2/3"
    runs = pd.DataFrame({"dataset": ["a"] * 4, "method": ["m", "m", "m", "n"], "note": ["y", "x", "y", np.nan],
                         "status": ["ok", "ok", "skipped", "skipped"]})
    assert list(trees.joined_notes(runs.groupby(["dataset", "method"], sort=False))) == ["x; y", ""]
    runs["note"] = ["y", "x", "not installed", "not installed"]
    assert trees.skipped_lines(runs) == ["Skipped here:", "", "- m: not installed", "- n: not installed", ""]
    assert trees.skipped_lines(runs[runs["status"] == "ok"]) == []


def test_regression_summary_counts_a_refused_margin_as_neither_met_nor_averaged():
    """trees_regression.summary: a skipped run (a margin the estimator refused) enters no mean, counts as
    meeting neither bound, and is named in the note; refusal_lines lists its message once."""
    ok = {"dataset": "law", "method": "fairopt-gbm-gedi-margin", "status": "ok", "note": "",
          "train GeDI/ref": 0.1, "test GeDI/ref": 0.15, "train cov/ref": 0.1, "test cov/ref": 0.15,
          "test RMSE": 0.9, "test R2": 0.1, "train R2": 0.12, "fit s": 0.5}
    runs = pd.DataFrame([{**ok, "seed": 0}, {**ok, "seed": 1, "test GeDI/ref": 0.25},
                         {"dataset": "law", "method": "fairopt-gbm-gedi-margin", "seed": 2, "status": "skipped",
                          "note": "refused: margin: too wide"}])
    row = trees_regression.summary(runs).iloc[0]
    assert row["train GeDI/ref"] == pytest.approx(0.1) and row["test GeDI/ref"] == pytest.approx(0.2)
    assert row["bound met on train"] == "2/3" and row["bound met on test"] == "1/3"
    assert "refused in 1/3" in row["note"]
    lines = trees_regression.refusal_lines(runs)
    assert any("seed 2: refused: margin: too wide" in line for line in lines)


def test_missing_value_holes_only_in_numeric_columns_and_imputed_by_training_means():
    """benchmarks/gbm_missing.py: holes at the asked share in the standardised columns only (one-hot
    indicators stay complete); the imputation fills each with its training column's mean."""
    rng = np.random.default_rng(0)
    X = np.column_stack([rng.normal(size=5000), rng.integers(0, 2, 5000), rng.normal(size=5000)]).astype(np.float32)
    columns = gbm_missing.numeric_columns(X)
    assert columns.tolist() == [True, False, True]
    holes = gbm_missing.with_holes(X, columns, 0.3, np.random.default_rng(1))
    share = np.isnan(holes).mean(axis=0)
    assert share[1] == 0.0 and abs(share[0] - 0.3) < 0.03 and abs(share[2] - 0.3) < 0.03
    assert np.array_equal(holes[~np.isnan(holes)], X[~np.isnan(holes)])
    filled = gbm_missing.mean_imputed(holes, holes)
    assert not np.isnan(filled).any()
    np.testing.assert_allclose(filled[np.isnan(holes[:, 0]), 0], np.nanmean(holes[:, 0].astype(np.float64)), atol=1e-5)


def test_label_dependent_holes_fall_more_often_in_positive_rows():
    rng = np.random.default_rng(2)
    X = rng.normal(size=(20000, 2)).astype(np.float32)
    y = rng.integers(0, 2, 20000)
    holes = np.isnan(gbm_missing.with_holes(X, np.array([True, True]), 0.2, np.random.default_rng(3), y))
    assert abs(holes[y == 1].mean() - 0.3) < 0.01 and abs(holes[y == 0].mean() - 0.1) < 0.01
