"""The peer benchmark runner (benchmarks.papers.peers): cache/resume, table, DI, skips."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

from benchmarks.papers import peers

DATA = Path(__file__).resolve().parents[2] / "shared" / "data"


def _fake_adapter(calls: list):
    def fit_predict(train, test, delta, seed):
        calls.append((delta, seed))
        rng = np.random.default_rng(seed)
        return {"train_pred": rng.integers(0, 2, len(train)), "test_pred": rng.integers(0, 2, len(test)),
                "fit_time": 0.01, "status": "ok"}

    fit_predict.requires = ()
    return fit_predict


def test_cache_and_resume(tmp_path):
    calls: list = []
    adapters = {"fake": _fake_adapter(calls)}
    kwargs = dict(datasets=["adult"], methods=["fake"], deltas=[0.7, 0.8], seeds=[0, 1], out=tmp_path,
                  max_rows=300, adapters=adapters, plots=False)
    first = peers.run_grid(**kwargs)
    assert len(calls) == 4 and first.ran == 4 and first.cached == 0
    assert len(list((tmp_path / "cells").glob("*.json"))) == 4
    second = peers.run_grid(**kwargs)
    assert len(calls) == 4, "a cached cell was rerun"
    assert second.ran == 0 and second.cached == 4
    assert second.table.equals(first.table)
    # an interrupted run: remove one cell, only that one reruns
    next((tmp_path / "cells").glob("*d0.7__s1*.json")).unlink()
    third = peers.run_grid(**kwargs)
    assert len(calls) == 5 and calls[-1] == (0.7, 1) and third.ran == 1


def test_table_accumulates_cached_runs(tmp_path):
    """Two partial runs into one directory give one table (table="cache"); "grid" shows one run."""
    adapters = {"fake": _fake_adapter([]), "other": _fake_adapter([])}
    kwargs = dict(datasets=["adult"], seeds=[0], out=tmp_path, max_rows=300, adapters=adapters, plots=False)
    peers.run_grid(methods=["fake"], deltas=[0.7, 0.8], **kwargs)
    second = peers.run_grid(methods=["other"], deltas=[0.8], **kwargs)
    assert sorted(zip(second.table["method"], second.table["delta"])) == [("fake", 0.7), ("fake", 0.8),
                                                                          ("other", 0.8)]
    assert "3 cells" in (tmp_path / "peers.md").read_text()
    only = peers.run_grid(methods=["other"], deltas=[0.8], table="grid", **kwargs)
    assert list(only.table["method"]) == ["other"]
    # cells of another subsample size stay out of the table
    other_size = peers.run_grid(methods=["fake"], deltas=[0.8], **{**kwargs, "max_rows": 200})
    assert len(other_size.cells) == 1
    with pytest.raises(ValueError, match="table"):
        peers.run_grid(methods=["fake"], deltas=[0.8], table="all", **kwargs)


def test_table_columns_and_outputs(tmp_path):
    result = peers.run_grid(datasets=["adult"], methods=["fake"], deltas=[0.8], seeds=[0, 1], out=tmp_path,
                            max_rows=300, adapters={"fake": _fake_adapter([])})
    assert list(result.table.columns) == peers.TABLE_COLUMNS
    assert "train DI >= delta-0.005" in result.table.columns
    row = result.table.iloc[0]
    assert row["seeds"] == 2 and row["delta"] == 0.8
    cells = result.cells
    assert row["train DI"] == pytest.approx(cells["train_di"].mean())
    assert row["test acc"] == pytest.approx(cells["test_acc"].mean())
    assert row["train DI >= delta-0.005"] == f"{int((cells['train_di'] >= 0.795).sum())}/2"
    md = (tmp_path / "peers.md").read_text()
    assert "| dataset | method | delta | train DI | test DI |" in md
    assert (tmp_path / "peers.csv").is_file() and (tmp_path / "tradeoff_adult.png").is_file()


def _di_brute_force(pred, s):
    p0 = sum(p for p, g in zip(pred, s) if g == 0) / sum(1 for g in s if g == 0)
    p1 = sum(p for p, g in zip(pred, s) if g == 1) / sum(1 for g in s if g == 1)
    if p0 == 0 and p1 == 0:
        return 1.0
    if p0 == 0 or p1 == 0:
        return 0.0
    return min(p0 / p1, p1 / p0)


@pytest.mark.parametrize("seed", range(5))
def test_di_matches_brute_force(seed):
    rng = np.random.default_rng(seed)
    n = 200
    s = rng.integers(0, 2, n)
    pred = (rng.random(n) < np.where(s == 1, 0.6, 0.3)).astype(int)
    y = rng.integers(0, 2, n)
    m = peers.cell_metrics(pred, y, s)
    assert m["di"] == pytest.approx(_di_brute_force(pred.tolist(), s.tolist()))
    assert m["acc"] == pytest.approx(sum(int(a == b) for a, b in zip(pred, y)) / n)
    assert np.isnan(peers.cell_metrics(None, y, s)["di"])


def test_missing_peer_is_skipped(tmp_path, monkeypatch, caplog):
    monkeypatch.setitem(sys.modules, "fairlearn", None)  # import fairlearn -> ImportError
    monkeypatch.setitem(sys.modules, "fairlearn.reductions", None)
    assert peers.available_methods(["fairlearn-eg", "cooper"]) == (["cooper"] if _importable("cooper") else [])
    calls: list = []
    adapters = {"fairlearn-eg": peers.ADAPTERS["fairlearn-eg"], "fake": _fake_adapter(calls)}
    with caplog.at_level("WARNING"):
        result = peers.run_grid(datasets=["adult"], methods=["fairlearn-eg", "fake"], deltas=[0.8], seeds=[0],
                                out=tmp_path, max_rows=300, adapters=adapters, plots=False)
    assert "skipping method fairlearn-eg" in caplog.text
    assert list(result.table["method"]) == ["fake"] and len(calls) == 1
    # inside a cell too (import failing only at fit time): skipped, not cached, no crash
    with caplog.at_level("WARNING"):
        rec = peers._run_cell(peers.Cell("adult", "fairlearn-eg", 0.8, 0), tmp_path / "cells", None, 300,
                              {"fairlearn-eg": peers.ADAPTERS["fairlearn-eg"]})
    assert rec["status"] == "skipped" and "not installed" in rec["note"]
    assert not list((tmp_path / "cells").glob("*fairlearn*"))


def _importable(module: str) -> bool:
    try:
        __import__(module)
    except ImportError:
        return False
    return True


def test_unknown_method(tmp_path):
    with pytest.raises(ValueError, match="unknown method"):
        peers.run_grid(datasets=["adult"], methods=["nope"], out=tmp_path)


def test_tiny_real_run_eg_vs_threshold_optimizer(tmp_path):
    pytest.importorskip("fairlearn")
    result = peers.run_grid(datasets=["adult"], methods=["fairlearn-eg", "fairlearn-to"], deltas=[0.8], seeds=[0],
                            out=tmp_path, max_rows=1500, plots=False)
    cells = result.cells.set_index("method")
    assert set(cells.index) == {"fairlearn-eg", "fairlearn-to"}
    assert (cells["n_train"] + cells["n_test"] == 1500).all()
    assert cells["n_test"].iloc[0] == 450
    for method in cells.index:
        assert 0.6 < cells.loc[method, "test_acc"] <= 1.0
        assert 0.0 <= cells.loc[method, "train_di"] <= 1.0
    # ThresholdOptimizer targets exact parity on the training rows
    assert cells.loc["fairlearn-to", "train_di"] > 0.8


def test_prepare_same_split_for_all_methods():
    train, test, info = peers.prepare("adult", 0, None, 600)
    train2, test2, _ = peers.prepare("adult", 0, None, 600)
    assert train is train2 or np.array_equal(train.X, train2.X)
    assert len(train) + len(test) == 600 and set(np.unique(train.s)) <= {0, 1}
    assert info["sensitive"] == "sex" and train.X.shape[1] == info["n_features"]


@pytest.mark.skipif(not (DATA / "compas-scores-two-years.csv.gz").is_file(),
                    reason="../shared/data (COMPAS) is absent")
def test_compas_race_is_binary():
    train, test, info = peers.prepare("compas", 0, str(DATA), None)
    assert info["sensitive"] == "race" and len(info["levels"]) == 2
    assert len(train) + len(test) == 6172
