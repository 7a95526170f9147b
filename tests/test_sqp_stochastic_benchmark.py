"""The accuracy grid of ``benchmarks/sqp_stochastic.py --grid`` (``benchmarks/sqp_grid.py``): a run
that ends below the majority rate, or outside its bound, counts as warned only when a failure
warning reached the user (subclasses count too); the per-cell comparison with a peer; reused runs;
the report rendered again from ``grid.json``."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"
if str(BENCHMARKS) not in sys.path:  # the script imports its siblings (_common) by name
    sys.path.insert(0, str(BENCHMARKS))

import sqp_grid  # noqa: E402

from solvers.outcome import ConstantPredictorWarning, NearConstantWarning  # noqa: E402


def test_failure_warnings_and_their_subclasses_count():
    assert sqp_grid.counts_as_failure(ConstantPredictorWarning("constant"))
    assert sqp_grid.counts_as_failure(NearConstantWarning("nearly constant"))
    assert not sqp_grid.counts_as_failure(UserWarning("something else"))
    assert not sqp_grid.counts_as_failure(RuntimeWarning("overflow"))


def _run(train: float, test: float, feasible: bool = True) -> dict:
    return {"train_acc": train, "test_acc": test, "feasible": feasible}


def test_peer_cells_compare_seed_means_where_both_meet_the_bound():
    cells = {  # (data set, model, batch, seed) -> method -> run
        ("a", "linear", 256, 0): {"fairopt": _run(0.80, 0.70), "peer": _run(0.79, 0.72)},
        ("a", "linear", 256, 1): {"fairopt": _run(0.80, 0.70), "peer": _run(0.79, 0.66)},  # test means 0.70, 0.69
        ("b", "mlp", 1024, 0): {"fairopt": _run(0.70, 0.70), "peer": _run(0.71, 0.69)},
        ("c", "mlp", 256, 0): {"fairopt": _run(0.50, 0.50), "peer": _run(0.90, 0.90, feasible=False)},
    }
    train, test = sqp_grid.peer_cell_lines(cells, "peer")  # no loss recorded: no loss line
    assert "on the 2 (data set" in train and "at least as accurate on 1; behind (points): b mlp 1024 -1.00" in train
    assert test.endswith("at least as accurate on 2")  # cell c: the peer misses the bound on a seed
    for key, loss in [(("a", "linear", 256, 0), (0.40, 0.45)), (("a", "linear", 256, 1), (0.40, 0.45)),
                      (("b", "mlp", 1024, 0), (0.50, 0.45)), (("c", "mlp", 256, 0), (0.1, 0.1))]:
        cells[key]["fairopt"]["train_loss"], cells[key]["peer"]["train_loss"] = loss
    *_, losses = sqp_grid.peer_cell_lines(cells, "peer")
    assert losses.endswith("at most the peer's on 1; higher: b mlp 1024 0.5000 vs 0.4500")


def test_reused_runs_are_the_reference_and_peer_runs_of_the_previous_grid(tmp_path):
    import json

    previous = [{"dataset": "a", "model": "linear", "batch": "full", "seed": 0, "method": "fairopt"},
                {"dataset": "a", "model": "linear", "batch": 256, "seed": 0, "method": "fairopt"},
                {"dataset": "a", "model": "linear", "batch": 256, "seed": 0, "method": "peer"},
                {"dataset": "a", "model": "linear", "batch": 256, "seed": 9, "method": "peer"}]
    (tmp_path / "grid.json").write_text(json.dumps(previous))
    (tmp_path / "grid.md").write_text("# python benchmarks/sqp_stochastic.py --grid\n# commit abc1234\n")
    jobs = [("a", "linear", None, 0, "fairopt", 0.8, "root"), ("a", "linear", 256, 0, "fairopt", 0.8, "root"),
            ("a", "linear", 256, 0, "peer", 0.8, "root")]
    runs, commit = sqp_grid.reused_runs(tmp_path, jobs)
    assert commit == "commit abc1234"
    assert [(r["batch"], r["method"]) for r in runs] == [("full", "fairopt"), (256, "peer")]  # not the mini-batch run
    runs, _ = sqp_grid.reused_runs(tmp_path, jobs, rerun="full")  # --reuse-minibatch: the full batch again
    assert [(r["batch"], r["method"]) for r in runs] == [(256, "fairopt"), (256, "peer")]
    runs, _ = sqp_grid.reused_runs(tmp_path, jobs, rerun="fairopt")  # --reuse-peers: both of fairopt's again
    assert [(r["batch"], r["method"]) for r in runs] == [(256, "peer")]
    with pytest.raises(SystemExit, match="^--reuse-peers: no previous grid"):
        sqp_grid.reused_runs(tmp_path / "nowhere", jobs, rerun="fairopt")


def test_grid_jobs_take_the_batches_and_seeds_of_the_command():
    from types import SimpleNamespace

    args = SimpleNamespace(seeds=[0], datasets=["dutch", "acsincome"], delta=0.8, surrogate=None, batches=None)
    jobs = sqp_grid.grid_jobs(args, "root", ["peer"])
    runs = len(sqp_grid.GRID_DATASETS) * len(sqp_grid.GRID_MODELS) * 3  # (data set, model, seed), seeds 0-2
    assert len(jobs) == runs * (1 + 2 * len(sqp_grid.GRID_BATCHES))  # the full batch, fairopt and the peer
    assert {j[2] for j in jobs} == {None, *sqp_grid.GRID_BATCHES}
    args = SimpleNamespace(seeds=[4], datasets=["law"], delta=0.7, surrogate=None, batches=[128, 512])
    jobs = sqp_grid.grid_jobs(args, "root", [])
    assert sorted((j[0], j[1], j[2] or 0, j[3], j[5]) for j in jobs) == sorted(
        ("law", m, b, 4, 0.7) for m in sqp_grid.GRID_MODELS for b in (0, 128, 512))


def test_report_only_renders_the_table_and_the_plot_from_grid_json(tmp_path):
    import argparse
    import json

    run = {"dataset": "a", "model": "linear", "majority": 0.6, "test_acc": 0.79, "train_loss": 0.45,
           "train_di": 0.80, "test_di": 0.81, "feasible": True, "warned": [], "seconds": 1.0}
    runs = [{**run, "batch": batch, "seed": seed, "method": method, "train_acc": acc, "commit": c}
            for seed in (0, 1)
            for batch, method, acc, c in (("full", "fairopt", 0.80, "aaa"), (256, "fairopt", 0.805, "bbb"),
                                          (256, "peer", 0.79, "aaa"))]
    (tmp_path / "grid.json").write_text(json.dumps(runs))
    (tmp_path / "grid.md").write_text("# python benchmarks/sqp_stochastic.py --grid\n# commit abc1234\nold table\n")
    assert sqp_grid.render_grid(argparse.Namespace(delta=0.8), tmp_path) == 0
    text = (tmp_path / "grid.md").read_text().splitlines()
    assert text[:2] == ["# python benchmarks/sqp_stochastic.py --grid", "# commit abc1234"]
    assert text[2] == "# runs by commit: full batch 2 at aaa; mini-batch 2 at bbb; peer 2 at aaa"
    assert text[3].startswith("# report rendered again from grid.json at commit")
    assert "old table" not in text and any(line.startswith("| a | linear | 256 | 0 |") for line in text)
    assert "cells within 0.01 of the full-batch train accuracy: 2/2" in text
    assert (tmp_path / "grid.png").stat().st_size > 0


def test_paired_interval_is_the_student_t_interval_of_the_mean():
    from scipy import stats

    import sqp_grid_pooled

    diffs = [0.1, -0.3, 0.5, 0.2]
    mean, half = sqp_grid_pooled.paired_interval(diffs)
    low, high = stats.t.interval(0.95, len(diffs) - 1, loc=stats.tmean(diffs), scale=stats.sem(diffs))
    assert abs(mean - 0.125) < 1e-12 and abs(mean - half - low) < 1e-9 and abs(mean + half - high) < 1e-9
    assert sqp_grid_pooled.paired_interval([0.4])[1] == float("inf")


def _grid(folder, seeds, ours, peer, peer_feasible=True):
    import json

    folder.mkdir()
    run = {"dataset": "a", "model": "linear", "batch": 256, "majority": 0.6, "train_di": 0.8, "warned": []}
    runs = []
    for seed, o, p in zip(seeds, ours, peer):
        runs.append({**run, "seed": seed, "method": "fairopt", "train_acc": o, "test_acc": o, "train_loss": 1 - o,
                     "feasible": True})
        runs.append({**run, "seed": seed, "method": "peer", "train_acc": p, "test_acc": p, "train_loss": 1 - p,
                     "feasible": peer_feasible})
    (folder / "grid.json").write_text(json.dumps(runs))
    (folder / "grid.md").write_text(f"# python benchmarks/sqp_stochastic.py --grid\n# commit {folder.name}\n")


def test_pooled_report_pairs_the_seeds_of_both_grids_and_separates_noise_from_a_clear_gap(tmp_path):
    import sqp_grid_pooled

    # seeds 0-2 behind by 0.1 point each, seeds 3-5 by 0.1 point each: a clear gap (zero spread)
    _grid(tmp_path / "g1", (0, 1, 2), (0.800, 0.810, 0.820), (0.801, 0.811, 0.821))
    _grid(tmp_path / "g2", (3, 4, 5), (0.800, 0.810, 0.820), (0.801, 0.811, 0.821))
    assert sqp_grid_pooled.render_pooled([tmp_path / "g1", tmp_path / "g2"], tmp_path) == 0
    text = (tmp_path / "pooled.md").read_text()
    assert "| a | linear | 256 | 6 | -0.10 +- 0.00 |" in text
    assert "train_acc: on 1 cells, fairopt's mean behind on 1 (a linear 256 -0.10); the whole 95% interval behind on 1" in text
    assert "train_loss: on 1 cells, fairopt's mean higher on 1" in text and "# " + str(tmp_path / "g2") in text
    assert (tmp_path / "pooled.png").stat().st_size > 0  # the forest plot of the same intervals


def test_pooled_report_a_noisy_gap_and_a_peer_that_misses_the_bound(tmp_path):
    import pytest

    import sqp_grid_pooled

    _grid(tmp_path / "g1", (0, 1, 2), (0.80, 0.82, 0.80), (0.81, 0.80, 0.815))  # mean -0.17 points, spread 1.5
    records, _ = sqp_grid_pooled.pooled_records([tmp_path / "g1"])
    lines = sqp_grid_pooled.pooled_report(records)
    assert any(line.startswith("train_acc: on 1 cells, fairopt's mean behind on 1") and
               line.endswith("the whole 95% interval behind on 0") for line in lines)
    _grid(tmp_path / "g2", (3,), (0.8,), (0.9,), peer_feasible=False)  # the peer misses: cell left out
    records, _ = sqp_grid_pooled.pooled_records([tmp_path / "g1", tmp_path / "g2"])
    assert any(line.startswith("train_acc: on 0 cells") for line in sqp_grid_pooled.pooled_report(records))
    with pytest.raises(SystemExit, match="in both"):  # the same seed twice
        sqp_grid_pooled.pooled_records([tmp_path / "g1", tmp_path / "g1"])


def test_metric_report_sets_the_two_metrics_side_by_side():
    import curvature_metric

    def run(seed, metric, loss, acc):
        return {"dataset": "a", "model": "linear", "seed": seed, "method": metric, "train_loss": loss,
                "train_acc": acc, "test_acc": acc, "train_di": 0.8, "feasible": True, "iterations": 100,
                "seconds": 1.0 if metric == "adam" else 0.5, "status": "converged"}

    records = [run(0, "adam", 0.40, 0.80), run(0, "gauss-newton", 0.38, 0.81),
               run(1, "adam", 0.42, 0.80), run(1, "gauss-newton", 0.40, 0.83)]
    lines = curvature_metric.metric_report(records)
    assert "| a | linear | 2 | -0.0200 | +2.00 | +2.00 | 2/2 | 1.00 | 0.50 |" in lines
    assert lines[-1] == "cells where Gauss-Newton ends at the lower mean training loss: 1/1"
    jobs = curvature_metric.metric_jobs(["a"], [0], None, "auto", 0.8, "root")
    assert {job[4] for job in jobs} == {"adam", "gauss-newton"} and all(job[7]["hessian"] == job[4] for job in jobs)
    assert all("hessian_shift" not in job[7] for job in jobs)
    shifted = curvature_metric.metric_jobs(["a"], [0], 256, 10, 0.8, "root", gn_shift=0.05)
    assert {job[4]: job[7].get("hessian_shift") for job in shifted} == {"adam": None, "gauss-newton": 0.05}


def test_grid_surrogate_and_dataset_specs():
    import fairopt
    from fairopt.surrogates import Sigmoid, SmoothedStep

    assert sqp_grid.parse_surrogate("sigmoid:1") == Sigmoid(scale=1.0)
    assert sqp_grid.parse_surrogate("smoothed_step") == SmoothedStep()
    data = sqp_grid.load_spec("adult:race", None)  # the embedded Adult, race as the one sensitive attribute
    assert data.sensitive_names == ["race"] and len(data.sensitive_levels["race"]) == 5
    assert sqp_grid.load_spec("adult", None).sensitive_names != ["race"]
    cut = sqp_grid.load_spec("adult:age>=40", None)  # two groups cut from a numeric column
    assert cut.sensitive_names == ["age>=40"] and cut.sensitive_levels["age>=40"] == ["<40", ">=40"]
    frame, _ = fairopt.datasets.load_frame("adult")
    assert int(cut.sensitive["age>=40"].sum()) == int((frame["age"] >= 40).sum())
    with pytest.raises(ValueError, match="no column"):
        sqp_grid.load_spec("adult:height>=2", None)
