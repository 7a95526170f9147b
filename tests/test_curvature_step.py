"""benchmarks/curvature_step.py: the spread carried to every run of the same data, the bands, the cells and the
page; with the shared data, the default step on Communities and Crime's correlated inputs."""

from __future__ import annotations

import sys
import warnings
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

import curvature_step as bench  # noqa: E402


def _run(step, lr, spread, unstable, rise, task="law-male", copies=3, delta=0.0, seed=0, test_acc=0.9):
    return {"task": task, "copies": copies, "step": step, "delta": delta, "seed": seed, "n_features": 44, "lr": lr,
            "spread": spread, "rise": rise, "unstable": unstable, "train_acc": test_acc, "test_acc": test_acc,
            "train_violation": 0.0, "seconds": 0.1}


RUNS = [
    _run("auto", 0.3, 10.0, False, 1.0),                    # 0.5 * 10 = 5 > 4: the step 3 / 10
    _run(0.5, 0.5, None, True, 2.5, test_acc=0.89),         # beta * lambda = 5
    _run(0.25, 0.25, None, False, 1.0),                     # 2.5
    _run("auto", 0.5, 3.0, False, 1.0, copies=-1),          # kept
    _run(0.5, 0.5, None, False, 1.0, copies=-1),            # 1.5: ends as "auto"
    _run(0.5, 0.5, None, True, 3.0, copies=7),              # no "auto" run of this data: left out
]


def test_the_spread_of_the_auto_run_goes_to_every_run_of_the_same_data():
    runs = bench.with_spread(RUNS)
    assert len(runs) == 5 and all(r["copies"] != 7 for r in runs)
    assert [round(r["beta_spread"], 6) for r in runs] == [3.0, 5.0, 2.5, 1.5, 1.5]


def test_bands_count_unstable_runs_per_step_kind():
    rows = {(r["step"], r["band"]): r for r in bench.bands(bench.with_spread(RUNS))}
    assert rows[("lr 0.5", "(4, 5]")]["unstable"] == 1 and rows[("lr 0.5", "(4, 5]")]["largest rise"] == 2.5
    assert rows[("lr 0.5", "(0, 3]")]["runs"] == 1 and rows[("lr < 0.5", "(0, 3]")]["runs"] == 1
    assert rows[("auto", "(0, 3]")]["runs"] == 2 and rows[("auto", "(0, 3]")]["unstable"] == 0


def test_page_states_what_auto_changes():
    page = bench.report(RUNS, ["# title"])
    assert "lr='auto': 1 of 2 runs take a smaller step than 0.5, 0 unstable (lr 0.5: 1 of 2); the 1 runs it " \
           "leaves at 0.5 end as the fixed 0.5 does in 1." in page
    cells = {(c["task"], c["copies"]): c for c in bench.cells(bench.with_spread(RUNS))}
    assert cells[("law-male", 3)]["0.5: unstable"] == "1/1" and cells[("law-male", 3)]["auto lr"] == 0.3


def test_copies_are_noisy_and_seeded(shared_data):
    from gbm_bounds_grid import load_task

    train, _, attributes = load_task("compas-sex", str(shared_data), 0)
    one = bench.with_copies(train, 1, attributes[0], 5)
    again = bench.with_copies(train, 1, attributes[0], 5)
    p = train.X.shape[1]
    assert one.X.shape == (len(train), 2 * p) and np.array_equal(one.X.numpy(), again.X.numpy())
    corr = np.corrcoef(one.X.numpy()[:, 0], one.X.numpy()[:, p])[0, 1]
    assert 0.9 < corr < 0.999
    assert bench.with_copies(train, -1, attributes[0], 5) is train


def test_default_step_on_correlated_inputs_does_not_oscillate(shared_data):
    """Communities and Crime (about 100 correlated inputs): at lr 0.5 the loss rises several-fold and the
    fit warns; the default step is smaller, trains without the warning and ends as accurate."""
    from fairopt.estimators import FairClassifier
    from gbm_bounds_grid import load_task
    from solvers.outcome import TrainingInstabilityWarning

    train, test, attributes = load_task("communities-race", str(shared_data), 0)
    results = {}
    for lr in (None, 0.5):
        clf = FairClassifier([("disparate_impact", attributes[0], 0.8)], lr=lr, seed=0, verbose=0)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            clf.fit(train)
        f = clf.history_.column("f")
        results[lr] = (clf.engine_info_["lr"], float(np.nanmax(f) / f[0]),
                       any(issubclass(w.category, TrainingInstabilityWarning) for w in caught), clf.score(test),
                       clf.train_violation_)
    assert results[0.5][1] > 1.5 and results[0.5][2]
    assert results[None][0] < 0.25 and results[None][1] < 1.05 and not results[None][2]
    assert results[None][4] <= 1e-4 and results[None][3] >= results[0.5][3] - 0.02
