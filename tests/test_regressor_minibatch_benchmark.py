"""benchmarks/regressor_minibatch.py: its job list, the seed means with the gaps to the full batch, and the page."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

import regressor_minibatch as grid  # noqa: E402


def _run(task, seed, batch, variant, train_r2, status="converged", met=True, warned=()):
    return {"task": task, "seed": seed, "batch": batch, "variant": variant, "n_train": 100, "train_r2": train_r2,
            "test_r2": train_r2 - 0.1, "train_violation": 0.0, "met": met, "status": status, "iterations": 10,
            "warned": list(warned), "seconds": 1.0}


RUNS = [
    _run("law-gedi", 0, None, "whitened", 0.30),
    _run("law-gedi", 1, None, "whitened", 0.20),
    _run("law-gedi", 0, 256, "whitened", 0.299),
    _run("law-gedi", 1, 256, "whitened", 0.19, status="feasible_not_stationary"),  # the worst gap: -0.01
    _run("law-gedi", 0, None, "inputs", 0.29),
    _run("law-gedi", 0, 256, "inputs", 0.25, met=False, warned=["TrainingInstabilityWarning"]),
]


def test_jobs_cover_every_task_seed_batch_and_variant():
    todo = grid.jobs(["law-gedi", "pg15-gedi"], [0, 1], list(grid.BATCHES), list(grid.VARIANTS), "/d")
    assert len(todo) == 2 * 2 * len(grid.BATCHES) * len(grid.VARIANTS)
    assert {j["batch"] for j in todo} == {None, 256, 1024} and all(j["data_dir"] == "/d" for j in todo)


def test_cell_means_give_each_mini_batch_cell_its_worst_gap_to_the_full_batch():
    cells = {(c["task"], c["batch"], c["variant"]): c for c in grid.cell_means(RUNS)}
    mini = cells[("law-gedi", 256, "whitened")]
    assert mini["runs"] == 2 and mini["converged"] == 1 and mini["met"] == 2
    assert mini["worst_gap"] == pytest.approx(-0.01)
    assert mini["train_r2"] == pytest.approx(0.2445)
    assert cells[("law-gedi", "full", "whitened")]["worst_gap"] is None
    inputs = cells[("law-gedi", 256, "inputs")]
    assert inputs["worst_gap"] == pytest.approx(-0.04) and inputs["met"] == 0
    assert inputs["warned"] == ["TrainingInstabilityWarning"]
    # full batch first, then the batches by size, within a task
    order = [(c["batch"], c["variant"]) for c in grid.cell_means(RUNS)]
    assert order == [("full", "inputs"), ("full", "whitened"), (256, "inputs"), (256, "whitened")]


def test_report_has_one_row_per_cell():
    page = grid.report(RUNS, ["# title"])
    rows = [line for line in page.splitlines() if line.startswith("| law-gedi")]
    assert len(rows) == 4
    assert "| law-gedi | 256 | whitened | 2 | 0.2445 | 0.1445 | -0.0100 | -0.0100 | 1/2 | 2/2 |" in page


def test_a_networks_variants_share_one_full_batch_and_the_old_budget_sets_its_epochs():
    todo = grid.jobs(["law-gedi"], [0], list(grid.BATCHES), list(grid.NETWORK_VARIANTS), "/d", model="mlp")
    assert len(todo) == 1 + 2 * len(grid.NETWORK_VARIANTS) and all(j["model"] == "mlp" for j in todo)
    assert [j["variant"] for j in todo if j["batch"] is None] == ["default"]
    # 14,500 rows in batches of 256: 57 steps per epoch, 500 steps in 9 epochs, clipped to at least 10
    old = grid.variant_options({"variant": "500-steps", "batch": 256, "model": "mlp"}, 14500)
    assert old["epochs"] == 10 and old["model"] == "mlp"
    assert grid.variant_options({"variant": "500-steps", "batch": 256, "model": "mlp"}, 1395)["epochs"] == 84
    assert "epochs" not in grid.variant_options({"variant": "default", "batch": 256, "model": "mlp"}, 1395)
    runs = [_run("law-gedi", 0, None, "default", 0.12), _run("law-gedi", 0, 256, "default", 0.11),
            _run("law-gedi", 0, 256, "500-steps", 0.10)]
    cells = {(c["batch"], c["variant"]): c for c in grid.cell_means(runs)}
    assert cells[(256, "500-steps")]["worst_gap"] == pytest.approx(-0.02)  # against the default's full batch
    assert cells[(256, "default")]["worst_test_gap"] == pytest.approx(-0.01)


def test_merge_keeps_the_earlier_runs_that_were_not_run_again(tmp_path):
    import json

    earlier = [dict(_run("law-gedi", 0, None, "default", 0.12), commit="old"),
               dict(_run("law-gedi", 0, 256, "default", 0.11), commit="old")]
    (tmp_path / "runs.json").write_text(json.dumps(earlier))
    again = [dict(_run("law-gedi", 0, None, "default", 0.125), commit="new")]
    merged = grid.merged_runs(again, tmp_path)
    assert sorted((r["batch"] is None, r["commit"]) for r in merged) == [(False, "old"), (True, "new")]
    assert grid.merged_runs(again, tmp_path / "absent") == again
