"""The paper experiments runnable by name (``python -m benchmarks.papers``, from a source checkout;
``fairopt bench`` says where they are): ``sqp-table2`` and ``fair-ridge``.

The ``--quick`` variants run here on tiny settings (the module constants QUICK are patched
down); tests that need the benchmark data skip when ../shared/data is absent.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pandas as pd
import pytest

from fairopt.cli import main
import benchmarks.papers
from benchmarks.papers import fair_ridge, sqp_table2
from fairopt.experiments.configs import BUILTIN, available_configs, load_config
from benchmarks.papers import PAPER_CONFIGS, command_line, run_paper_config

from conftest import SHARED_DATA, require_shared_file

pytestmark = [pytest.mark.filterwarnings("ignore::solvers.sqp.SQPWarning"),
              pytest.mark.usefixtures("one_torch_thread")]


def _png(path) -> bool:
    return path.is_file() and path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_paper_configs_are_listed_and_registered(capsys):
    assert {"sqp-table2", "fair-ridge"} <= set(PAPER_CONFIGS)
    assert not {"sqp-table2", "fair-ridge"} & (set(available_configs()) | set(BUILTIN))  # not in the package
    assert benchmarks.papers.main(["--list"]) == 0
    listed = capsys.readouterr().out
    assert "sqp-table2: [SQP] Tables 2/4 and Fig. 7" in listed and "fair-ridge: [FR] Example 1" in listed
    assert "--quick" in PAPER_CONFIGS["sqp-table2"].description


def test_paper_configs_are_not_declarative_and_quick_is_theirs(tmp_path):
    with pytest.raises(ValueError, match="neither a built-in configuration"):
        load_config("sqp-table2")
    with pytest.raises(SystemExit):  # --quick is the papers' option; fairopt bench has none
        main(["bench", "demo-adult", "--quick", "--out", str(tmp_path)])
    with pytest.raises(ValueError, match="epochs"):
        run_paper_config("fair-ridge", tmp_path, epochs=3)
    assert command_line("fair-ridge", "out dir", quick=True, seeds=[0, 1], data_dir="../shared/data") == \
        "python -m benchmarks.papers fair-ridge --quick --seeds 0 1 --data-dir ../shared/data --out 'out dir'"



def test_papers_run_by_name_and_fairopt_bench_says_where_they_are(capsys):

    assert benchmarks.papers.main(["--list"]) == 0
    listed = capsys.readouterr().out
    assert all(f"{name}: " in listed for name in [*PAPER_CONFIGS, "peers"])
    with pytest.raises(SystemExit):  # argparse: not a paper reproduction
        benchmarks.papers.main(["demo-adult"])
    # the installed package never imports them: a clear error naming where they run, no traceback
    capsys.readouterr()
    assert main(["bench", "sqp-table2"]) == 2
    assert "python -m benchmarks.papers" in capsys.readouterr().err
    assert main(["bench", "--list"]) == 0 and "source checkout" in capsys.readouterr().out

def test_sqp_table2_paper_numbers_and_scenarios():
    # copied from [SQP] App. E Tables 2 and 4: 3 data sets x 3 scenarios x 2 deltas
    assert len(sqp_table2.PAPER_TABLES) == 18
    assert sqp_table2.PAPER_TABLES[("law", 0.8, "DI")][0] == pytest.approx(90.095)
    assert sqp_table2.FULL.deltas == (0.5, 0.6, 0.7, 0.8, 0.9) and sqp_table2.FULL.include_sensitive
    assert sqp_table2.FULL.epochs == 500 and sqp_table2.FULL.lr == 0.5 and len(sqp_table2.FULL.seeds) == 5
    quick = sqp_table2.scenarios(sqp_table2.QUICK)
    assert quick == [("none", None), ("DI", 0.8), ("DI", 0.9), ("EI", 0.8), ("EI", 0.9), ("DI+EI", 0.8), ("DI+EI", 0.9)]
    with pytest.raises(ValueError, match="datasets"):
        sqp_table2.override(sqp_table2.FULL, datasets=["adult"])


def test_sqp_table2_quick_runs_and_reports_the_paper_columns(tmp_path, monkeypatch, capsys):
    require_shared_file("dutch.csv.gz")
    monkeypatch.setattr(sqp_table2, "QUICK", dataclasses.replace(sqp_table2.QUICK, epochs=3, subsample=1500))
    out = tmp_path / "sqp"
    assert benchmarks.papers.main(["sqp-table2", "--quick", "--data-dir", str(SHARED_DATA), "--out", str(out)]) == 0
    rows = pd.read_csv(out / "results.csv")
    assert len(rows) == 7 and set(rows["dataset"]) == {"dutch"}
    assert set(rows["scenario"]) == {"none", "DI", "EI", "DI+EI"}
    assert rows["train_acc"].between(0, 100).all() and rows["train_di"].between(0, 1).all()
    assert _png(out / "fig7_realised_di.png")
    summary = (out / "summary.md").read_text()
    assert summary.startswith("# sqp-table2") and "Command: `python -m benchmarks.papers sqp-table2 --quick" in summary
    header = next(line for line in summary.splitlines() if line.startswith("| table |"))
    assert "Acc paper" in header and "c̄_di ours / paper" in header
    assert "| 78.00 |" in summary  # Dutch, DI >= 0.8: [SQP] Table 2
    assert "paper (Fig. 7 text)" in summary and "paper Table 3" in summary
    assert "# sqp-table2" in capsys.readouterr().out


def test_fair_ridge_example1_population_and_unbiased_decorrelation():
    pop = fair_ridge.example1_population()
    assert pop["r2s_as_printed"] == pytest.approx(0.9021, abs=1e-4)
    assert pop["r2s_eq2_reading"] == pytest.approx(0.8492, abs=1e-4)  # the paper's "r >= 0.85"
    X, S, y = fair_ridge.example1_data(400, seed=1)
    assert X.shape == (400, 3) and S.shape == (400, 3)
    assert np.corrcoef(np.column_stack([X, S]).T)[0, 3] == pytest.approx(0.3, abs=0.15)
    unbiased = fair_ridge.RidgeDecorrelatedNCLM(0.05, 0.0).fit(X, y, S)
    biased = fair_ridge.RidgeDecorrelatedNCLM(0.05, 400.0).fit(X, y, S)
    assert unbiased.realised_ == pytest.approx(unbiased.nominal_, rel=1e-6)  # OLS residuals: no bias
    assert abs(biased.realised_ / biased.nominal_ - 1) > 1e-3


def _tiny_fair_ridge(linear: tuple[str, ...]) -> fair_ridge.Settings:
    return dataclasses.replace(
        fair_ridge.QUICK, example_n=300, profile_r=(0.0, 0.05, 0.5, 1.0), bias_r=(0.01, 0.1),
        bias_lambdas=(1e-3, 1e-1, 1.0), bias_folds=3, linear_datasets=linear, logistic_datasets=("adult",),
        r_grid=(0.0, 0.05), folds=2, logistic_folds=2, subsample=600, zlm_qp_check=False)


def test_fair_ridge_quick_runs_and_reports_the_paper_columns(tmp_path, monkeypatch):
    require_shared_file("law_school.csv.gz")
    monkeypatch.setattr(fair_ridge, "QUICK", _tiny_fair_ridge(("law",)))
    out = tmp_path / "fr"
    assert benchmarks.papers.main(["fair-ridge", "--quick", "--data-dir", str(SHARED_DATA), "--out", str(out)]) == 0
    for name in ("example1.png", "real_data.png"):
        assert _png(out / name), name
    linear = pd.read_csv(out / "linear_folds.csv")
    assert len(linear) == 2 * 2 and set(linear["dataset"]) == {"law"}
    zero = linear[linear["r"] == 0]
    assert np.allclose(zero["frrm_rmse"], zero["nclm_rmse"], rtol=1e-9)  # r = 0: the same model ([FR] sec. 5.1)
    logistic = pd.read_csv(out / "logistic_folds.csv")
    assert len(logistic) == 2 * 2 and logistic["fgrrm_f1"].between(0, 1).all()
    summary = (out / "summary.md").read_text()
    assert summary.startswith("# fair-ridge") and "Command: `python -m benchmarks.papers fair-ridge --quick" in summary
    assert "paper (sec. 2.2, Fig. 1)" in summary and "3-5%" in summary  # Example 1, Fig. 1
    assert "~0.85" in summary  # Example 1, Fig. 2
    assert "FGRRM F1 over r, paper (sec. 5.3)" in summary and "[0.6141, 0.6489]" in summary  # ADULT
    assert "paper: FRRM < NCLM for r > 0" in summary and "Missing here: NLSY" in summary


def test_fair_ridge_quick_without_shared_data_uses_the_embedded_adult(tmp_path, monkeypatch):
    """Example 1 and the logistic ADULT comparison need no data directory (Adult is embedded)."""
    settings = _tiny_fair_ridge(())
    summary, files = fair_ridge.run(tmp_path, settings, progress=False)
    assert "[0.6141, 0.6489]" in summary and (tmp_path / "summary.md").is_file()
    assert "Real data, linear models" in summary and "FRRM validation RMSE" not in summary  # no linear data set
    assert all(f.is_file() for f in files)
