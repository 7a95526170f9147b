"""benchmarks/regressor_small.py: its job list, the variants' options and the paired differences of its page."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

import regressor_small as grid  # noqa: E402


def _run(variant, seed, train_r2, test_r2, model="mlp", termination="max_epochs"):
    return {"task": "law-300", "bound": "gedi", "model": model, "variant": variant, "seed": seed, "n_train": 210,
            "train_r2": train_r2, "test_r2": test_r2, "met": True, "status": "feasible_not_stationary",
            "termination": termination, "iterations": 100, "warned": [], "seconds": 1.0}


def test_jobs_give_the_rows_budget_to_networks_only():
    todo = grid.jobs(["law-300"], [0, 1], list(grid.MODELS), list(grid.VARIANTS), "/d")
    assert len(todo) == len(grid.BOUNDS) * 2 * (3 + 2)  # mlp: three variants, linear: two
    assert not [j for j in todo if j["model"] == "linear" and j["variant"] == "rows-budget"]


def test_variant_options():
    assert grid.variant_options("default", 210) == {}
    assert grid.variant_options("no-stall", 210) == {"engine_params": {"stall_epochs": None}}
    assert grid.variant_options("rows-budget", 210) == {"epochs": 1506}  # ceil(10000 * 210 / 1395)
    assert grid.variant_options("rows-budget", 14558) == {"epochs": 10000}


def test_cell_means_pair_each_run_with_the_same_seed_without_the_stall():
    runs = [_run("no-stall", 0, 0.70, 0.10), _run("no-stall", 1, 0.60, 0.20),
            _run("default", 0, 0.69, 0.12, termination="stalled"), _run("default", 1, 0.60, 0.20)]
    cells = {c["variant"]: c for c in grid.cell_means(runs)}
    default = cells["default"]
    assert default["train_diff"] == pytest.approx(-0.01) and default["test_diff"] == pytest.approx(0.02)
    assert cells["default"]["stalled"] == 1 and cells["no-stall"]["train_diff"] is None
    page = grid.report(runs, ["# title"])
    assert "| mlp | law-300 | gedi | default | 2 | 210 |" in page and "| +0.0200 |" in page
