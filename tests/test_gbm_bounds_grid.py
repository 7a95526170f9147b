"""benchmarks/gbm_bounds_grid.py: what counts as a failed run, the cell means, the page and the groupings."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

import gbm_bounds_grid as grid  # noqa: E402


def _run(task, delta, method, seed, test_acc, violation, majority=0.75):
    return {"task": task, "delta": delta, "method": method, "seed": seed, "n_train": 100, "train_acc": test_acc,
            "test_acc": test_acc, "train_di": delta, "test_di": delta - 0.02, "train_violation": violation,
            "majority": majority, "warned": [], "seconds": 1.0}


RUNS = [
    _run("adult-sex", 0.9, "gbm", 0, 0.85, 0.0),
    _run("adult-sex", 0.9, "gbm", 1, 0.84, 0.0001),                     # at the tolerance: met
    _run("adult-sex", 0.9, "gbm-keep-every-round", 0, 0.754, 0.0),      # within half a point of the majority rate
    _run("adult-sex", 0.9, "gbm-keep-every-round", 1, 0.83, 0.002),     # past the bound on the training rows
    _run("adult-sex", 0.95, "linear", 0, 0.82, 0.0),
]


def test_failed_is_past_the_bound_or_at_the_constant():
    assert [grid.failed(r) for r in RUNS] == [False, False, True, True, False]


def test_cells_are_seed_means_with_the_smallest_training_di():
    cells = {(c["task"], c["delta"], c["method"]): c for c in grid.cells(RUNS)}
    gbm = cells[("adult-sex", 0.9, "gbm")]
    assert gbm["runs"] == 2 and gbm["failed"] == 0
    assert gbm["test_acc"] == pytest.approx(0.845) and gbm["max_train_violation"] == pytest.approx(0.0001)
    assert cells[("adult-sex", 0.9, "gbm-keep-every-round")]["failed"] == 2
    assert [c["delta"] for c in grid.cells(RUNS)] == sorted(c["delta"] for c in grid.cells(RUNS))


def test_page_counts_failed_runs_per_method_and_bound():
    page = grid.report(RUNS, ["# title"])
    assert "| method | DI >= 0.9 | DI >= 0.95 | all | mean test accuracy |" in page
    assert "| gbm | 0 / 2 | 0 / 0 | 0 / 2 | 0.8450 |" in page
    assert "| gbm-keep-every-round | 2 / 2 | 0 / 0 | 2 / 2 | 0.7920 |" in page
    assert "| linear | 0 / 0 | 0 / 1 | 0 / 1 | 0.8200 |" in page
    assert "| adult-sex | 0.9000 | gbm | 2 | 0.8450 | 0.9000 | 0.0001 |" in page


@pytest.mark.parametrize("task", ["adult-race", "communities-race", "adult-sex-x-race"])
def test_groupings_are_not_inputs(shared_data, task):
    train, test, attributes = grid.load_task(task, str(shared_data), 0)
    assert not any(name == a or name.startswith(f"{a}_") for a in attributes for name in train.feature_names)
    assert abs(len(test) / (len(train) + len(test)) - 0.3) < 0.01
    if task == "communities-race":  # the regression target above its median: about half the rows
        assert train.task == "binary" and abs(float(np.mean(train.y.numpy())) - 0.5) < 0.05
        assert train.sensitive_kinds["race"] == "binary"
    elif task == "adult-race":  # White against the rest, a seeded 20,000-row sample
        assert train.sensitive_kinds["race"] == "binary" and len(train) + len(test) == 20000
    else:  # several groups: the sex x race cells
        assert attributes == ["sex", "race"] and train.n_cells == 10
