"""compare(n_jobs=..., results_path=...): parallel, deterministic and resumable sweeps."""

from __future__ import annotations

import re
from pathlib import Path

import joblib
import numpy as np
import pandas as pd
import pytest
import torch

from fairopt import datasets, penalties
from fairopt.constraints import DisparateImpact
from fairopt.experiments import PenaltyMethod, SQPMethod, compare
from fairopt.experiments.sweeps import KEY_COLUMN, ResultStore, data_fingerprint, run_key, seeded

pytestmark = [pytest.mark.filterwarnings("ignore::solvers.sqp.SQPWarning"),
              pytest.mark.usefixtures("one_torch_thread")]

GRID = {"sqp": [0.7, 0.9]}
SEEDS = [0, 1]


@pytest.fixture(scope="module")
def adult():
    """The embedded Adult data, a seeded subsample of 600 rows."""
    data = datasets.load("adult")
    rows = np.sort(np.random.default_rng(0).choice(len(data), size=600, replace=False))
    return data.subset(torch.from_numpy(rows))


def _sqp(epochs: int = 2) -> SQPMethod:
    return SQPMethod(lambda delta: DisparateImpact("sex", delta=delta), epochs=epochs)


class _CountingMethod:
    """An SQP method that logs each finished fit to a file and can fail on its ``fail_at``-th call."""

    name, hyperparameter = "sqp", "delta"

    def __init__(self, log: Path, fail_at: int | None = None) -> None:
        self.inner, self.log, self.fail_at = _sqp(), log, fail_at

    def fits(self) -> list[str]:
        return self.log.read_text().splitlines() if self.log.exists() else []

    def fit(self, train, *, value, seed):
        if self.fail_at is not None and len(self.fits()) + 1 == self.fail_at:
            raise RuntimeError("simulated crash")
        fitted = self.inner.fit(train, value=value, seed=seed)
        with open(self.log, "a") as handle:
            handle.write(f"{value},{seed}\n")
        return fitted


def _same(a: pd.DataFrame, b: pd.DataFrame) -> None:
    """Equal tables (values, dtypes, order) apart from the wall-clock ``time`` column."""
    pd.testing.assert_frame_equal(a.drop(columns="time").reset_index(drop=True),
                                  b.drop(columns="time").reset_index(drop=True), check_exact=True)


def test_n_jobs_1_and_2_and_the_results_file_give_identical_tables(adult, tmp_path):
    methods = [_sqp(), PenaltyMethod(penalties.DemographicParitySquared("sex"), epochs=2, lr=0.05)]
    grid = {**GRID, "penalty": [1.0]}
    serial_histories: dict = {}
    serial = compare(methods, adult, grid, seeds=SEEDS, n_jobs=1, torch_threads=1, histories=serial_histories)
    parallel_histories: dict = {}
    with joblib.parallel_config(backend="loky"):
        parallel = compare(methods, adult, grid, seeds=SEEDS, n_jobs=2, torch_threads=1,
                           results_path=tmp_path / "sweep.csv", histories=parallel_histories)
    assert len(serial) == (2 + 1) * 2 * 2 and (parallel["time"] > 0).all()
    # same rows in the grid order, same values to the last bit, same dtypes (read back from the CSV)
    _same(serial, parallel)
    # 2 epochs: the returned model is the best FEASIBLE iterate, which may still be the initial one
    assert serial.loc[serial.method == "sqp", "accuracy"].between(0.3, 1).all() and serial["di_ratio"].notna().all()
    assert set(serial_histories) == set(parallel_histories) and len(serial_histories) == 6
    key = ("sqp", 0.9, 1, 0)
    serial_history, parallel_history = serial_histories[key].to_pandas(), parallel_histories[key].to_pandas()
    untimed = [c for c in serial_history.columns if not c.startswith("t_") and "time" not in c]
    assert "f" in untimed and serial_history[untimed].equals(parallel_history[untimed])
    saved = pd.read_csv(tmp_path / "sweep.csv")
    assert list(saved.columns)[-1] == KEY_COLUMN and saved[KEY_COLUMN].nunique() == 6 and len(saved) == 12


def test_runs_do_not_depend_on_order_or_on_the_global_generator(adult):
    method = _sqp()
    torch.manual_seed(123)
    state = torch.get_rng_state()
    forward = compare(method, adult, GRID, seeds=[0, 1])
    assert torch.equal(torch.get_rng_state(), state)  # the caller's generator is left alone
    torch.manual_seed(7)
    backward = compare(method, adult, {"sqp": [0.9, 0.7]}, seeds=[1, 0])
    order = ["value", "seed", "split"]
    _same(forward.sort_values(order, kind="stable"), backward.sort_values(order, kind="stable"))
    # the seed matters: the two training seeds give different models
    train = forward[forward.split == "train"]
    assert train.groupby("seed")["rps"].apply(list).loc[0] != train.groupby("seed")["rps"].apply(list).loc[1]


def test_a_killed_sweep_resumes_without_rerunning_finished_runs(adult, tmp_path):
    path, log = tmp_path / "sweep.csv", tmp_path / "fits.log"
    with pytest.raises(RuntimeError, match="simulated crash"):
        compare(_CountingMethod(log, fail_at=4), adult, GRID, seeds=SEEDS, results_path=path)
    counter = _CountingMethod(log)
    assert len(counter.fits()) == 3
    saved = pd.read_csv(path)
    assert saved[KEY_COLUMN].nunique() == 3 and len(saved) == 6  # each finished run was written at once

    resumed = compare(counter, adult, GRID, seeds=SEEDS, results_path=path)
    fits = counter.fits()
    assert len(fits) == 4 and len(set(fits)) == 4  # only the missing run was trained
    reference = compare(_sqp(), adult, GRID, seeds=SEEDS)
    _same(reference, resumed)
    # the finished runs were read back, not recomputed: their times are the saved ones
    first = saved.drop(columns=KEY_COLUMN).reset_index(drop=True)
    np.testing.assert_array_equal(resumed["time"].to_numpy()[:6], first["time"].to_numpy())

    again = compare(counter, adult, GRID, seeds=SEEDS, results_path=path)
    assert len(counter.fits()) == 4  # nothing left to train
    pd.testing.assert_frame_equal(again, resumed, check_exact=True)
    subgrid = compare(counter, adult, {"sqp": [0.9]}, seeds=[1], results_path=path)
    assert len(counter.fits()) == 4 and len(subgrid) == 2
    _same(subgrid, reference[(reference.value == 0.9) & (reference.seed == 1)])


def test_a_file_of_another_data_set_is_not_passed_off_as_this_one(adult, tmp_path):
    """A resumed sweep on other rows of the same shape trains them: the run key holds a fingerprint of
    the data's values (a trial's second call on another data set returned the first one's rows)."""
    path, log = tmp_path / "sweep.csv", tmp_path / "fits.log"
    counter = _CountingMethod(log)
    first = compare(counter, adult, {"sqp": [0.8]}, seeds=[0], results_path=path)
    other = adult.subset(torch.arange(len(adult) - 1, -1, -1))  # the same rows reversed: another split
    assert data_fingerprint(other) != data_fingerprint(adult) == data_fingerprint(adult.subset(torch.arange(600)))
    second = compare(counter, other, {"sqp": [0.8]}, seeds=[0], results_path=path)
    assert len(counter.fits()) == 2  # trained, not read back
    _same(second, compare(_sqp(), other, {"sqp": [0.8]}, seeds=[0]))
    assert not first.drop(columns="time").equals(second.drop(columns="time"))
    again = compare(counter, adult, {"sqp": [0.8]}, seeds=[0], results_path=path)
    assert len(counter.fits()) == 2
    _same(again, first)


def test_an_interrupted_write_is_repaired_and_rerun(adult, tmp_path):
    path, log = tmp_path / "sweep.csv", tmp_path / "fits.log"
    counter = _CountingMethod(log)
    full = compare(counter, adult, GRID, seeds=SEEDS, results_path=path)
    text = path.read_text()
    path.write_text(text[: len(text) - 25])  # a kill in the middle of the last run's test row
    assert ResultStore(path, rows_per_run=2).load().keys() == set(full_keys(full, adult)[:3])
    resumed = compare(counter, adult, GRID, seeds=SEEDS, results_path=path)
    assert len(counter.fits()) == 5 and counter.fits()[-1] == "0.9,1"  # only the damaged run again
    pd.testing.assert_frame_equal(resumed.drop(index=[6, 7]), full.drop(index=[6, 7]), check_exact=True)
    _same(resumed, full)


def full_keys(table: pd.DataFrame, data) -> list[str]:
    """The run keys of a default-split table of ``data``, in its order (one per run)."""
    runs = table[table.split == "train"]
    return [run_key(m, h, v, s, f, folds=1, split_seed=0, test_size=0.2, threshold=0.0, data=data_fingerprint(data))
            for m, h, v, s, f in runs[["method", "hyperparameter", "value", "seed", "fold"]].itertuples(index=False)]


def test_run_key_and_seeded():
    key = run_key("sqp", "delta", 0.1 + 0.2, 3, 0, folds=1, split_seed=0, test_size=0.2, threshold=0.0)
    assert key == "sqp|delta=0.30000000000000004|seed=3|fold=0/1|split_seed=0|test_size=0.2|threshold=0.0"
    assert run_key("sqp", "delta", None, 3, 0, folds=1, split_seed=1, test_size=0.2, threshold=0.0) != \
        run_key("sqp", "delta", None, 3, 0, folds=1, split_seed=0, test_size=0.2, threshold=0.0)
    assert "|delta=None|" in run_key("sqp", "delta", None, 3, 0, folds=5, split_seed=0, test_size=0.2, threshold=0.0)
    torch.manual_seed(0)
    outside = torch.rand(3)
    with seeded(5, threads=1):
        inside = torch.rand(3)
    torch.manual_seed(5)
    assert torch.equal(inside, torch.rand(3)) and not torch.equal(inside, outside)


def test_validation(adult, tmp_path):
    method = _sqp(epochs=1)
    with pytest.raises(ValueError, match="n_jobs"):
        compare(method, adult, n_jobs=0)
    with pytest.raises(ValueError, match="torch_threads"):
        compare(method, adult, torch_threads=0)
    with pytest.raises(ValueError, match="results_path"):
        compare(method, adult, results_path=tmp_path / "missing" / "sweep.csv")
    foreign = tmp_path / "foreign.csv"
    pd.DataFrame({"a": [1]}).to_csv(foreign, index=False)
    with pytest.raises(ValueError, match="run_key"):
        compare(method, adult, results_path=foreign)


def test_a_repeated_seed_is_refused_before_any_run(adult, tmp_path):
    """A repeated seed was trained once and reported twice, so a mean over seeds counted it double."""
    counter = _CountingMethod(tmp_path / "fits.log")
    with pytest.raises(ValueError, match=r"seeds: the seed\(s\) \[0\] repeat"):
        compare(counter, adult, {"sqp": [0.8]}, seeds=[0, 0], results_path=tmp_path / "sweep.csv")
    assert len(counter.fits()) == 0


def test_a_non_numeric_metric_cell_refuses_to_resume(adult, tmp_path):
    """Regression: a results file with text in a metric column was resumed silently (the
    column came back as text). The sweep now refuses, naming the file, the line, the run
    key and the column."""
    path, log = tmp_path / "sweep.csv", tmp_path / "fits.log"
    method = _CountingMethod(log)
    table = compare(method, adult, GRID, seeds=[0], results_path=path)
    assert table["degenerate"].isin([0.0, 1.0]).all()  # evaluate()'s flag, as a number
    lines = path.read_text().splitlines()
    header = lines[0].split(",")
    cells = lines[3].split(",")  # the second run's train row
    key = cells[header.index(KEY_COLUMN)]
    cells[header.index("accuracy")] = "0.8x"
    lines[3] = ",".join(cells)
    path.write_text("\n".join(lines) + "\n")
    message = (f"results_path: '{path}' line 4 (run '{key}') has the value '0.8x' in column 'accuracy', "
               "which holds numbers")
    with pytest.raises(ValueError, match="^" + re.escape(message)):
        compare(method, adult, GRID, seeds=[0], results_path=path)
    assert len(method.fits()) == 2  # nothing was trained again
    # a number written as text ("nan", "inf") is still a number
    cells[header.index("accuracy")] = "nan"
    lines[3] = ",".join(cells)
    path.write_text("\n".join(lines) + "\n")
    resumed = compare(method, adult, GRID, seeds=[0], results_path=path)
    assert resumed["accuracy"].dtype == np.float64 and resumed["accuracy"].isna().sum() == 1
    assert len(method.fits()) == 2
