"""The accuracy grid of ``benchmarks/sqp_stochastic.py --grid`` (``benchmarks/sqp_grid.py``): a run
that ends below the majority rate, or outside its bound, counts as warned only when a failure
warning reached the user (subclasses count too); the per-cell comparison with a peer; reused runs;
the report rendered again from ``grid.json``."""

from __future__ import annotations

import sys
from pathlib import Path

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


def test_report_only_renders_the_table_and_the_plot_from_grid_json(tmp_path):
    import argparse
    import json

    run = {"dataset": "a", "model": "linear", "majority": 0.6, "test_acc": 0.79, "train_loss": 0.45,
           "train_di": 0.80, "test_di": 0.81, "feasible": True, "warned": [], "seconds": 1.0}
    runs = [{**run, "batch": batch, "seed": seed, "method": method, "train_acc": acc}
            for seed in (0, 1)
            for batch, method, acc in (("full", "fairopt", 0.80), (256, "fairopt", 0.805), (256, "peer", 0.79))]
    (tmp_path / "grid.json").write_text(json.dumps(runs))
    (tmp_path / "grid.md").write_text("# python benchmarks/sqp_stochastic.py --grid\n# commit abc1234\nold table\n")
    assert sqp_grid.render_grid(argparse.Namespace(delta=0.8), tmp_path) == 0
    text = (tmp_path / "grid.md").read_text().splitlines()
    assert text[:2] == ["# python benchmarks/sqp_stochastic.py --grid", "# commit abc1234"]
    assert text[2].startswith("# report rendered again from grid.json at commit")
    assert "old table" not in text and any(line.startswith("| a | linear | 256 | 0 |") for line in text)
    assert "cells within 0.01 of the full-batch train accuracy: 2/2" in text
    assert (tmp_path / "grid.png").stat().st_size > 0
