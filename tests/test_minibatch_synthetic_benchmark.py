"""benchmarks/minibatch_synthetic.py: the data sets it draws, one fit, and its counts against the full batch."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

import minibatch_synthetic as bench  # noqa: E402


@pytest.mark.parametrize("seed", [0, 7, 23])
def test_a_seed_draws_one_data_set_within_the_stated_ranges(seed):
    X, y, s, constraint, described = bench.make_dataset(seed)
    again = bench.make_dataset(seed)
    np.testing.assert_array_equal(X.to_numpy(), again[0].to_numpy())
    np.testing.assert_array_equal(y, again[1])
    assert len(X) == len(y) == len(s) == described["n"] in (3000, 8000, 20000)
    assert 4 <= X.shape[1] == described["d"] <= 40 and np.isfinite(X.to_numpy()).all()
    assert set(np.unique(y)) == {0, 1} and set(np.unique(s)) == {0, 1}
    assert constraint[:2] == ("disparate_impact", "s") and constraint[2] in (0.8, 0.9)
    assert 0.05 < s.mean() < 0.55 and 0.03 < y.mean() < 0.6


@pytest.mark.parametrize("seed", [0, 7, 23])
def test_the_families_share_the_inputs_and_differ_by_the_constraint(seed):
    X, y, s, _, _ = bench.make_dataset(seed, "di")
    for family, kind in (("eodds", "equalized_odds"), ("dp", "demographic_parity")):
        X_f, y_f, s_f, constraint, described = bench.make_dataset(seed, family)
        np.testing.assert_array_equal(X_f.to_numpy(), X.to_numpy())
        np.testing.assert_array_equal(y_f, y)
        np.testing.assert_array_equal(s_f, s)
        assert (constraint["kind"] if isinstance(constraint, dict) else constraint[0]) == kind
        assert 0.0 < described["bound"] <= 0.1
    _, y_g, s_g, constraint, described = bench.make_dataset(seed, "groups")
    assert 3 <= described["levels"] == len(np.unique(s_g)) <= 5 and described["smallest_share"] > 0.01
    assert constraint[0] == "disparate_impact" and len(y_g) == len(y)
    with pytest.raises(ValueError, match="family"):
        bench.make_dataset(seed, "odds")


def test_the_measures_are_the_stated_formulas():
    predicted = np.array([1, 0, 1, 1, 0, 0, 1, 0])
    y = np.array([1, 0, 1, 0, 1, 0, 1, 1])
    s = np.array([0, 0, 0, 0, 1, 1, 1, 1])
    assert bench.realised_fairness(predicted, y, s, "di") == pytest.approx(0.25 / 0.75)
    assert bench.realised_fairness(predicted, y, s, "dp") == pytest.approx(0.5)
    # true-positive rates 2/2 and 1/3, false-positive rates 1/2 and 0/1
    assert bench.realised_fairness(predicted, y, s, "eodds") == pytest.approx(2 / 3)
    groups = np.array([0, 0, 1, 1, 2, 2, 2, 2])  # rates 1/2, 1, 1/4 against the rest 1/2, 1/3, 3/4
    assert bench.realised_fairness(predicted, y, groups, "groups") == pytest.approx(1 / 3)
    assert bench.bound_met({"family": "dp", "train_fairness": 0.104, "bound": 0.1})
    assert not bench.bound_met({"family": "eodds", "train_fairness": 0.106, "bound": 0.1})
    assert not bench.bound_met({"family": "groups", "train_fairness": 0.79, "bound": 0.8})
    assert bench.bound_met({"train_di": 0.796, "delta": 0.8})  # a run written before the families


def _run(seed, model, batch, acc, di=0.85, warned=(), majority=0.7, seconds=1.0):
    return {"seed": seed, "model": model, "batch": batch, "delta": 0.8, "majority": majority, "train_acc": acc,
            "test_acc": acc - 0.01, "train_di": di, "seconds": seconds, "warned": list(warned)}


def test_the_summary_counts_each_run_against_its_own_full_batch():
    runs = [_run(0, "linear", None, 0.80), _run(1, "linear", None, 0.90, seconds=2.0),
            _run(0, "linear", 256, 0.795),  # within a point
            _run(1, "linear", 256, 0.65, di=0.79, seconds=4.0),  # a miss, bound missed, below majority unwarned
            _run(0, "linear", 1024, 0.69, warned=["FairnessWarning"])]  # warned: not counted as silent
    cells = {(c["model"], c["batch"]): c for c in bench.cell_summary(runs)}
    small = cells[("linear", 256)]
    assert small["runs"] == 2 and small["within"] == 1 and small["bound_met"] == 1
    assert small["below_majority_unwarned"] == 1 and small["worst_gap"] == pytest.approx(-0.25)
    assert small["time_ratio"] == pytest.approx(1.5)  # median of 1.0 and 2.0
    assert cells[("linear", 1024)]["below_majority_unwarned"] == 0 and ("mlp", 256) not in cells
    assert "| di | linear | 256 | 2 | 1/2 | 1/2 | 1 |" in bench.report(runs, ["# t"])


def test_one_fit_reports_what_the_page_reads():
    run = bench.fit_cell({"seed": 5, "model": "linear", "batch": 1024})
    assert {"train_acc", "test_acc", "train_fairness", "majority", "seconds", "warned", "bound"} <= set(run)
    assert 0.5 <= run["train_acc"] <= 1.0 and bench.bound_met(run)
