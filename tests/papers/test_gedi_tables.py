"""``python -m benchmarks.papers gedi-tables``: [GeDI] Tables 4/5 and Fig. 3 with Moving Targets.

Tiny runs on an Adult subsample (Adult is embedded: no data directory needed): the table
columns, the paper's values beside ours, the relative GeDI of one row recomputed by the
brute-force formula (group means of a 0/1 attribute; least squares on the centred powers
of a continuous one), the per-cell cache (a rerun trains nothing, a deleted or failed
cell is rerun). The Communities tasks need ../shared/data and skip without it.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pandas as pd
import pytest

from benchmarks.papers import gedi_tables
from benchmarks.papers.gedi_tables_data import PAPER, QUICK, TASKS, model_names, override, protocol_tag
from benchmarks.papers.gedi_tables_runs import ModelCell, make_learner, relative_didi, relative_gedi, task_folds
from benchmarks.papers import main as papers_main
from benchmarks.papers import PAPER_CONFIGS, command_line, run_paper_config

from conftest import SHARED_DATA, require_shared_file

pytestmark = pytest.mark.usefixtures("one_torch_thread")

#: a few seconds: 600 Adult rows, 2 of 5 folds, 2 MT iterations, 2 MLP epochs
TINY = dataclasses.replace(QUICK, tasks=("adult_sex",), learners=("gb", "nn"), max_folds=2, iterations=2,
                           mlp_epochs=2, adult_rows=600, preprocessing=("adult_age",), degrees=(1, 2), bins=(2, 3))


def brute_relative_gedi(x: np.ndarray, pred: np.ndarray, y: np.ndarray, degree: int, binary: bool) -> float:
    """[GeDI] sec. 5 "GeDI %" from the definitions: a 0/1 attribute gives the regression
    DIDI ``|mean(. | x=1) - mean(. | x=0)|`` (App. A.4); a continuous one the L1 norm of the
    least-squares coefficients on the centred powers of the standardised attribute."""
    if binary:
        def didi(v):
            return abs(v[x == 1].mean() - v[x == 0].mean())
        return didi(pred) / didi(y)

    s = (x - x.mean()) / x.std()

    def l1(v, k):
        F = s[:, None] ** np.arange(1, k + 1)[None, :]
        return np.abs(np.linalg.lstsq(F - F.mean(axis=0), v - v.mean(), rcond=None)[0]).sum()
    return l1(pred, degree) / l1(y, 1)


def test_registered_listed_and_paper_numbers(capsys):
    config = PAPER_CONFIGS["gedi-tables"]
    assert config.parallel and "--quick" in config.description
    assert papers_main(["--list"]) == 0
    assert "gedi-tables: [GeDI] Tables 4/5 and Fig. 3" in capsys.readouterr().out
    # copied from [GeDI] Tables 4/5: every model the runner trains has the paper's row
    for name, task in TASKS.items():
        assert set(model_names(task, ("rf", "gb", "nn"))) == set(PAPER[name])
    assert PAPER["adult_sex"]["GB+MT"][:4] == (0.85, 0.00, 0.85, 0.00)
    assert PAPER["communities_pctblack"]["NN+MT-Coarse"][6:8] == (0.90, 0.54)
    assert command_line("gedi-tables", "out", quick=True, n_jobs=2) == \
        "python -m benchmarks.papers gedi-tables --quick --n-jobs 2 --out out"
    with pytest.raises(ValueError, match="n_jobs"):
        run_paper_config("sqp-table2", "unused", n_jobs=2)


def test_override_and_protocol_tag():
    assert override(QUICK, epochs=7, seeds=[3], subsample=900) == dataclasses.replace(
        QUICK, mlp_epochs=7, seed=3, adult_rows=900)
    with pytest.raises(ValueError, match="seeds"):
        override(QUICK, seeds=[0, 1])
    with pytest.raises(ValueError, match="tasks"):
        override(QUICK, tasks=["compas"])
    assert protocol_tag(QUICK) != protocol_tag(override(QUICK, epochs=31))
    assert QUICK.run_folds() == [0, 1] and gedi_tables.FULL.run_folds() == [0, 1, 2, 3, 4]


def test_relative_measures_against_the_definitions():
    rng = np.random.default_rng(0)
    n = 400
    s = (rng.random(n) < 0.4).astype(float)
    x = rng.normal(40, 10, size=n)
    y = 0.02 * x + 0.3 * s + rng.normal(size=n)
    pred = 0.5 * y + 0.1 * (x - 40) ** 2 / 100
    assert relative_gedi(s, pred, y, 1, binary=True) == pytest.approx(brute_relative_gedi(s, pred, y, 1, True))
    assert relative_gedi(x, pred, y, 5, binary=False) == pytest.approx(brute_relative_gedi(x, pred, y, 5, False))
    # DIDI over 2 quantile bins of x: the groups x <= median and x > median
    high = x > np.median(x)

    def didi2(v):
        return abs(v[high].mean() - v.mean()) + abs(v[~high].mean() - v.mean())
    assert relative_didi(x, pred, y, 2, classification=False) == pytest.approx(didi2(pred) / didi2(y))


def test_tiny_run_tables_paper_values_and_one_row_by_brute_force(tmp_path):
    folds, summary, files = gedi_tables.run(tmp_path, TINY, progress=False, protocol="tiny")
    assert len(folds) == 2 * 4 and set(folds["model"]) == {"GB", "GB+MT", "NN", "NN+MT"}
    assert (folds["status"] == "ok").all() and folds["train_score"].between(0, 1).all()
    table = pd.read_csv(tmp_path / "tables.csv", dtype=str)
    metrics = ["train score", "val score", "train GeDI %", "val GeDI %"]
    assert list(table.columns) == (["task", "model", "folds"] + [f"{m} {k}" for m in metrics
                                                                 for k in ("ours", "paper", "gap")]
                                   + ["time s ours", "time s paper"])
    row = table[table["model"] == "GB+MT"].iloc[0]
    assert row["val score paper"] == "0.85 ± 0.00" and row["val GeDI % paper"] == "0.34 ± 0.04"
    ours = folds[folds["model"] == "GB+MT"]["val_score"].mean()
    assert row["val score gap"] == f"{ours - 0.85:+.2f}"
    assert "| GB+MT | 2 |" in summary and "| 0.34 ± 0.04 |" in summary  # ours beside the paper's
    assert "Protocol: **tiny**" in summary and "## Gaps larger than the paper's spread" in summary
    assert {f.name for f in files} >= {"summary.md", "tables.csv", "folds.csv", "tables.png", "preprocessing.csv",
                                       "preprocessing.png"}
    # one row recomputed independently: plain GB on fold 1, validation part
    data, parts = task_folds("adult_sex", TINY, None)
    _, train, val = parts[1]
    learner = make_learner("gb", TASKS["adult_sex"], TINY).fit(train.X.numpy(), train.y.numpy().astype(int))
    pred = learner.predict(val.X.numpy()).astype(float)
    x, y = val.sensitive["sex"].numpy().astype(float), val.y.numpy().astype(float)
    record = folds[(folds["model"] == "GB") & (folds["fold"] == 1)].iloc[0]
    assert record["val_gedi"] == pytest.approx(brute_relative_gedi(x, pred, y, 1, True), rel=1e-9)
    assert record["val_score"] == pytest.approx(np.mean(pred == y))
    # the preprocessing cells: the projected targets meet the bound (coarse: GeDI-Vk <= 0.2)
    pre = pd.read_csv(tmp_path / "preprocessing.csv")
    assert len(pre) == 2 * 2 and (pre["status"] == "optimal").all()
    assert (pre[pre["form"] == "coarse"]["targets GeDI-Vk %"] <= 0.2 + 1e-6).all()
    assert "Fig. 3 is an image in the paper" in summary


def test_cache_resume_and_failed_cells(tmp_path, monkeypatch):
    settings = dataclasses.replace(TINY, learners=("gb",), preprocessing=())
    folds, _, _ = gedi_tables.run(tmp_path, settings, progress=False)
    cells = sorted((tmp_path / "cells").glob("*.json"))
    assert len(cells) == 2 * 2 and all(protocol_tag(settings) in c.name for c in cells)

    calls: list = []
    original = ModelCell.run

    def counting(self, *args, **kwargs):
        calls.append(self)
        return original(self, *args, **kwargs)

    monkeypatch.setattr(ModelCell, "run", counting)
    again, summary, _ = gedi_tables.run(tmp_path, settings, progress=False)
    assert calls == [] and "0 cells run now, 4 read from `cells/`" in summary
    pd.testing.assert_frame_equal(again, folds)
    target = ModelCell("adult_sex", "GB+MT", 1)
    (tmp_path / "cells" / target.filename(settings)).unlink()
    gedi_tables.run(tmp_path, settings, progress=False)
    assert calls == [target]

    def failing(self, *args, **kwargs):
        raise RuntimeError("solver exploded")

    monkeypatch.setattr(ModelCell, "run", failing)
    other = dataclasses.replace(settings, iterations=3)  # another protocol: nothing cached
    folds3, summary3, _ = gedi_tables.run(tmp_path, other, progress=False)
    assert folds3.empty and "## Failed cells" in summary3 and "solver exploded" in summary3
    assert not any(protocol_tag(other) in c.name for c in (tmp_path / "cells").glob("*.json"))


def test_quick_through_the_cli(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(gedi_tables, "QUICK", dataclasses.replace(TINY, learners=("gb",), preprocessing=()))
    out = tmp_path / "quick"
    assert papers_main(["gedi-tables", "--quick", "--out", str(out)]) == 0
    summary = (out / "summary.md").read_text()
    assert summary.startswith("# gedi-tables")
    assert "Command: `python -m benchmarks.papers gedi-tables --quick --out" in summary
    assert "Protocol: **quick**" in summary and "# gedi-tables" in capsys.readouterr().out


def test_communities_tasks(tmp_path):
    require_shared_file("communities.csv.gz")
    settings = dataclasses.replace(TINY, tasks=("communities_race", "communities_pctblack"), learners=("nn",),
                                   max_folds=1, preprocessing=("communities_pctblack",), degrees=(1, 3),
                                   preprocessing_learner="nn")
    folds, summary, _ = gedi_tables.run(tmp_path, settings, data_dir=SHARED_DATA, progress=False)
    assert set(folds["model"]) == {"NN", "NN+MT", "NN+MT-Fine", "NN+MT-Coarse"}
    assert (folds["status"] == "ok").all() and (folds["backend"].dropna() == "osqp").all()
    mt = folds[folds["model"].str.contains("MT")]
    assert (mt["targets_V"] < 1e-6).all()  # the masters' targets meet the bound
    pre = pd.read_csv(tmp_path / "preprocessing.csv")
    fine3 = pre[(pre["form"] == "fine") & (pre["k"] == 3)].iloc[0]
    assert fine3["targets GeDI-Vk %"] <= 0.2 + 1e-6  # exact equalities: GeDI-V3 = GeDI-V1 <= bound
    assert "communities_pctblack" in summary
