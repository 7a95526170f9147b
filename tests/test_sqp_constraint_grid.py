"""``benchmarks/sqp_constraint_grid.py``: the scores against scikit-learn's, the job list, the report's
counts (a run below a constant predictor counts only without a warning), and one small cell end to end
(skipped without ``../shared/data``)."""

from __future__ import annotations

import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"
if str(BENCHMARKS) not in sys.path:  # the script imports its siblings (_common, sqp_grid) by name
    sys.path.insert(0, str(BENCHMARKS))

import sqp_constraint_grid as grid  # noqa: E402

DATA = Path(__file__).resolve().parents[2] / "shared" / "data"


def _part(y, exposure=None) -> SimpleNamespace:
    return SimpleNamespace(y=torch.as_tensor(y, dtype=torch.float64),
                           exposure=None if exposure is None else torch.as_tensor(exposure, dtype=torch.float64))


def test_scores_match_scikit_learn():
    from sklearn.metrics import accuracy_score, d2_tweedie_score, mean_poisson_deviance, r2_score

    rng = np.random.default_rng(0)
    out = rng.normal(size=200)
    labels = (rng.random(200) < 0.4).astype(float)
    assert grid.score("bce", torch.as_tensor(out), _part(labels)) == pytest.approx(
        accuracy_score(labels, out > 0))
    target = out + rng.normal(size=200)
    assert grid.score("mse", torch.as_tensor(out), _part(target)) == pytest.approx(r2_score(target, out))
    counts = rng.poisson(np.exp(0.3 * out)).astype(float)
    # unit exposure: the null model is the mean count, scikit-learn's D^2 with the Poisson deviance
    assert grid.score("poisson", torch.as_tensor(0.3 * out), _part(counts, np.ones(200))) == pytest.approx(
        d2_tweedie_score(counts, np.exp(0.3 * out), power=1))
    # exposure v: mu = v exp(out) against the constant rate sum(y) / sum(v)
    v = rng.uniform(0.2, 1.0, size=200)
    mu, mu0 = v * np.exp(0.3 * out), v * counts.sum() / v.sum()
    expected = 1.0 - mean_poisson_deviance(counts, mu) / mean_poisson_deviance(counts, mu0)
    assert grid.score("poisson", torch.as_tensor(0.3 * out), _part(counts, v)) == pytest.approx(expected)


def test_constant_score_is_the_majority_rate_or_zero():
    assert grid.constant_score("bce", _part([1, 0, 0, 0])) == pytest.approx(0.75)
    assert grid.constant_score("mse", _part([1.0, 2.0])) == 0.0
    assert grid.constant_score("poisson", _part([1.0, 2.0], [1.0, 1.0])) == 0.0


def test_jobs_put_the_full_batch_first_and_cover_every_cell():
    todo = grid.jobs(["adult-eo", "pg15-dcov"], [0, 1], [256, 1024], "root")
    cells = 2 * len(grid.GRID_MODELS) * 2  # (task, model, seed)
    assert len(todo) == cells * 3
    assert all(j[2] is None for j in todo[:cells]) and all(j[2] is not None for j in todo[cells:])
    assert set(grid.TASKS) >= {j[0] for j in todo}


def test_tasks_build_their_constraints():
    from fairopt.constraints import DisparateImpact, EqualOpportunity, GeDI

    both = grid.TASKS["adult-di-sex-and-race"].constraint()
    assert [type(c) for c in both] == [DisparateImpact, DisparateImpact]
    assert [tuple(c.sensitive) for c in both] == [("sex",), ("race",)]  # one constraint per attribute
    assert tuple(grid.TASKS["adult-di-sex-x-race"].constraint().sensitive) == ("sex", "race")  # their cells
    assert isinstance(grid.TASKS["compas-eo"].constraint(), EqualOpportunity)
    assert isinstance(grid.TASKS["law-gedi"].constraint(), GeDI) and grid.TASKS["law-gedi"].loss == "mse"
    dcov = [t for t in grid.TASKS.values() if t.constraint is None]
    assert dcov and all(t.dcov for t in dcov)  # sized by dcov_bound on the training part


def test_report_counts_within_feasible_and_silent_failures():
    base = {"task": "t", "model": "linear", "constant": 0.6, "test_score": 0.7, "status": "max_epochs",
            "seconds": 1.0, "violation": 0.0}
    records = [
        {**base, "batch": "full", "seed": 0, "train_score": 0.80, "feasible": True, "warned": []},
        {**base, "batch": "full", "seed": 1, "train_score": 0.80, "feasible": True, "warned": []},
        {**base, "batch": 256, "seed": 0, "train_score": 0.795, "feasible": True, "warned": []},  # within
        {**base, "batch": 256, "seed": 1, "train_score": 0.55, "feasible": False, "warned": []},  # silent failure
        {**base, "batch": 1024, "seed": 0, "train_score": 0.55, "feasible": False,
         "warned": ["ConstantPredictorWarning"]},  # below constant, but warned
    ]
    text = grid.report(records)
    assert "runs within 0.01 of the full-batch train score: 1/3" in text
    assert "runs feasible on all training rows or warned: 2/3" in text
    assert "runs at or below a constant predictor's train score without a warning: 1" in text
    assert "full-batch runs feasible: 2/2" in text
    assert "| t | linear | 256 | -0.1275 | -0.2500 |" in text


def test_peer_jobs_and_lines_cover_the_tasks_fairlearn_has():
    todo = grid.peer_jobs(["adult-eo", "law-gedi", "adult-di-sex-x-race"], [0, 1], "root")
    assert todo == [("adult-eo", 0, "root"), ("adult-eo", 1, "root"), ("adult-di-sex-x-race", 0, "root"),
                    ("adult-di-sex-x-race", 1, "root")]  # fairlearn has no GeDI
    run = {"task": "adult-eo", "constant": 0.75, "status": "-", "seconds": 1.0, "violation": 0.0, "warned": []}
    records = [
        {**run, "model": "linear", "batch": "full", "seed": 0, "train_score": 0.85, "test_score": 0.84,
         "feasible": True},
        {**run, "model": "linear", "batch": 256, "seed": 0, "train_score": 0.845, "test_score": 0.83, "feasible": True},
        {**run, "model": "logistic", "batch": grid.PEER, "seed": 0, "train_score": 0.80, "test_score": 0.81,
         "feasible": False},
        {**run, "model": "logistic", "batch": grid.PEER, "seed": 1, "train_score": 0.82, "test_score": 0.83,
         "feasible": True},
    ]
    text = grid.report(records)
    assert "runs within 0.01 of the full-batch train score: 1/1" in text  # the peer is not a mini-batch run
    rows = [line for line in text if line.startswith("| adult-eo | ")]
    assert rows[-3:] == ["| adult-eo | fairlearn-eg | logistic | - | 0.8100 | 0.8200 | 1/2 |",
                         "| adult-eo | fairopt | linear | 256 | 0.8450 | 0.8300 | 1/1 |",
                         "| adult-eo | fairopt | linear | full | 0.8500 | 0.8400 | 1/1 |"]
    assert grid.peer_lines([r for r in records if r["batch"] != grid.PEER]) == []


@pytest.mark.skipif(not (DATA / "compas-scores-two-years.csv.gz").is_file(), reason="needs ../shared/data (COMPAS)")
def test_the_fairlearn_peer_is_measured_by_the_tasks_constraint():
    pytest.importorskip("fairlearn")
    run = grid.peer_cell(("compas-eo", 0, str(DATA)))
    assert run["method"] == grid.PEER and run["train_score"] > run["constant"]  # COMPAS: about 0.58 against 0.545
    assert run["feasible"] == (run["violation"] <= 1e-6) and 0.0 <= run["test_score"] <= 1.0


@pytest.mark.skipif(not (DATA / "compas-scores-two-years.csv.gz").is_file(), reason="needs ../shared/data (COMPAS)")
def test_a_distance_covariance_cell_meets_its_bound_in_both_modes():
    for batch in (None, 1024):
        run = grid.cell(("compas-dcov", "linear", batch, 0, str(DATA)))
        assert run["feasible"] and not run["warned"]
        assert run["train_score"] > run["constant"] + 0.03  # COMPAS: about 0.63 against 0.545
