"""benchmarks/estimator_minibatch_grid.py: its job list, the gaps to the full batch, the counts and the page."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

import estimator_minibatch_grid as grid  # noqa: E402


def _run(task, seed, model, batch, variant, train_acc, violation=0.0, warned=()):
    return {"task": task, "seed": seed, "model": model, "batch": batch, "variant": variant, "n_train": 100,
            "train_acc": train_acc, "test_acc": train_acc - 0.01, "train_violation": violation,
            "test_violation": 0.02, "status": "ok",
            "warned": list(warned), "seconds": 1.0}


RUNS = [
    _run("compas", 0, "linear", None, "default", 0.60),
    _run("compas", 0, "linear", 256, "default", 0.595),    # -0.5 points: within
    _run("compas", 0, "linear", 256, "group", 0.58),       # -2 points: below
    _run("compas", 1, "linear", None, "default", 0.62),
    _run("compas", 1, "linear", 256, "default", 0.63, violation=0.01, warned=["FairnessWarning"]),
    _run("compas", 1, "linear", 256, "group", 0.61),       # exactly -1 point: within
    _run("law", 0, "mlp", 1024, "default", 0.90),          # no full batch: left out of the gaps
]


def test_jobs_pair_every_mini_batch_fit_with_one_full_batch():
    todo = grid.jobs(["adult", "compas-race"], [0, 1], ["linear", "mlp"], [256, 1024], ["default", "group"], "/d")
    assert len(todo) == 2 * 2 * 2 * (1 + 2 * 2)
    full = [j for j in todo if j["batch"] is None]
    assert len(full) == 8 and all(j["variant"] == "default" for j in full)
    assert {(j["batch"], j["variant"]) for j in todo if j["batch"]} == {(b, v) for b in (256, 1024)
                                                                       for v in ("default", "group")}
    assert all(j["data_dir"] == "/d" and j["max_rows"] is None for j in todo)
    # "threshold" (sigmoid(5 out) named) only for networks: it is a linear model's default
    todo = grid.jobs(["adult"], [0], ["linear", "mlp"], [256], ["default", "threshold"], "/d")
    assert {(j["model"], j["variant"]) for j in todo if j["batch"]} == {("linear", "default"), ("mlp", "default"),
                                                                       ("mlp", "threshold")}


def test_gaps_and_counts_against_the_full_batch_of_the_same_seed():
    gaps = {(r["seed"], r["variant"]): r["gap"] for r in grid.with_full_batch_gaps(RUNS)}
    assert gaps == pytest.approx({(0, "default"): -0.005, (0, "group"): -0.02, (1, "default"): 0.01,
                                  (1, "group"): -0.01})
    c = grid.counts(RUNS)
    assert set(c) == {("linear", "default"), ("linear", "group")}
    assert (c[("linear", "default")]["within"], c[("linear", "default")]["runs"]) == (2, 2)
    assert (c[("linear", "group")]["within"], c[("linear", "group")]["runs"]) == (1, 2)
    assert c[("linear", "group")]["worst"] == pytest.approx(-0.02)
    assert c[("linear", "group")]["misses"] == ["compas/256/0: -2.00"]


def test_cell_means_and_page():
    cells = {(c["task"], c["model"], c["batch"], c["variant"]): c for c in grid.cell_means(RUNS)}
    full = cells[("compas", "linear", "full", "-")]
    assert full["runs"] == 2 and full["train_acc"] == pytest.approx(0.61)
    mini = cells[("compas", "linear", 256, "default")]
    assert mini["feasible"] == 1 and mini["warned"] == 1 and mini["test_acc"] == pytest.approx(0.6025)
    page = grid.report(RUNS, ["# title"])
    assert "| linear | group | 1 | 2 | -2.00 | compas/256/0: -2.00 |" in page
    assert "| compas | linear | 256 | default | 2 | 0.6125 | 0.6025 | 0.0200 | 1.00 | 1/2 | 1/2 |" in page


def test_constraint_names_the_surrogate_only_for_the_group_and_threshold_variants():
    from fairopt.training import SQP_RATE_SURROGATE

    assert grid.constraint(["sex"], "default") == ("disparate_impact", "sex", grid.DELTA)
    assert grid.constraint(["sex", "race"], "default") == ("disparate_impact", ["sex", "race"], grid.DELTA)
    named = grid.constraint(["race"], "group")
    assert named.get_params()["surrogate"] == SQP_RATE_SURROGATE
    assert grid.constraint(["race"], "threshold").get_params()["surrogate"].scale == 5.0


def test_one_cell_end_to_end(shared_data):
    """A COMPAS fit on a 1,500-row sample: scores in [0, 1], the row count of the 70% part."""
    run = grid.fit_cell({"task": "compas", "seed": 0, "model": "linear", "batch": 256, "variant": "default",
                         "data_dir": str(shared_data), "max_rows": 1500})
    assert run["n_train"] == 1050
    assert 0.0 <= run["test_acc"] <= 1.0 and 0.5 <= run["train_acc"] <= 1.0
    assert run["train_violation"] >= 0.0 and run["test_violation"] >= 0.0 and run["seconds"] > 0


def test_compas_mini_batches_keep_the_full_batch_accuracy(shared_data):
    """Through FairClassifier, batches of 256 rows on COMPAS (binary race and four race groups, overlapping
    classes) keep the full batch's train accuracy: seed means within 2 points, every seed within 3 for the
    linear model and 2.5 for the MLP. Under the full batch's sigmoid(out) the linear means were 3.1 and 3.4
    points below (worst seed 6.1) and an MLP seed 3.1 (benchmarks/results/estimator_minibatch_grid/)."""
    todo = grid.jobs(["compas", "compas-race"], [0, 1, 2], ["linear"], [256], ["default"], str(shared_data))
    todo += grid.jobs(["compas"], [0, 1, 2], ["mlp"], [256], ["default"], str(shared_data))
    gaps = grid.with_full_batch_gaps([grid.fit_cell(job) for job in todo])
    assert len(gaps) == 9
    cases = [("compas", "linear", -0.03), ("compas-race", "linear", -0.03), ("compas", "mlp", -0.025)]
    for task, model, worst in cases:
        mine = [r["gap"] for r in gaps if r["task"] == task and r["model"] == model]
        assert len(mine) == 3
        assert sum(mine) / 3 >= -0.02 and min(mine) >= worst, (task, model, mine)
