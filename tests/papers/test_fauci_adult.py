"""The [FU] Fig. 1 experiment (``python -m benchmarks.papers fauci-adult``) on tiny settings.

A synthetic table runs the whole protocol in seconds (folds, early stopping, SQP points,
results table, figure, the paper's numbers beside ours); the command line runs ``--quick``
on a few hundred rows of Adult (embedded in the package, so nothing to skip).
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pandas as pd
import pytest

from fairopt.data import FairData
from benchmarks.papers import fauci_adult, fauci_adult_report
from benchmarks.papers import main as papers_main
from benchmarks.papers import PAPER_CONFIGS

pytestmark = [pytest.mark.filterwarnings("ignore::solvers.sqp.SQPWarning"),
              pytest.mark.usefixtures("one_torch_thread")]

TINY = fauci_adult.Settings(
    lambdas={("dp", "sex"): (0.5, 4.0), ("di", "race"): (0.1,), ("eo", "age"): (1.0,)},
    sqp_bounds={("di", "sex"): (0.8,)}, folds=3, run_folds=(0, 1), max_epochs=4, patience=2, sqp_epochs=3,
    batch_size=64)


def synthetic(n: int = 600, seed: int = 0) -> FairData:
    """Adult-like: binary sex, categorical race (3 unbalanced levels), continuous age, a label that depends on them."""
    rng = np.random.default_rng(seed)
    df = pd.DataFrame({"sex": rng.choice(["Female", "Male"], n), "race": rng.choice(["a", "b", "c"], n, p=[.6, .3, .1]),
                       "age": rng.uniform(17, 90, n), "x1": rng.normal(size=n), "x2": rng.normal(size=n)})
    logit = df["x1"] + 0.8 * (df["sex"] == "Male") + 0.03 * (df["age"] - 40)
    df["income"] = (rng.uniform(size=n) < 1 / (1 + np.exp(-logit))).astype(int)
    return FairData.from_frame(df, target="income", sensitive=["sex", "race", "age"], include_sensitive=True)


def _png(path) -> bool:
    return path.is_file() and path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_registered_listed_and_protocol_constants(capsys):
    assert "fauci-adult" in PAPER_CONFIGS
    assert papers_main(["--list"]) == 0
    assert "fauci-adult: [FU] Fig. 1" in capsys.readouterr().out
    full = fauci_adult.FULL
    # [FU] sec. 4.1: 5 folds, 2 hidden layers of 100 and 50, <= 5000 epochs, batch 500, patience 100
    assert (full.folds, full.hidden, full.max_epochs, full.batch_size, full.patience) == (5, (100, 50), 5000, 500, 100)
    assert full.run_folds is None and full.target_accuracy == 0.9 and fauci_adult.TARGETS == {"dp": .01, "di": .01,
                                                                                               "eo": .01}
    assert set(full.lambdas) == {(m, a) for m in fauci_adult.METRICS for a in fauci_adult.ATTRIBUTES}
    assert all(p[1] != "age" for p in full.sqp_bounds)  # no group-rate constraint for a continuous attribute
    assert fauci_adult.panel_key("di", "race", "categorical") == "wdi[race]"
    assert fauci_adult.panel_key("eo", "age", "continuous") == "geo[age]"
    assert fauci_adult.override(fauci_adult.QUICK, epochs=7).max_epochs == 7
    with pytest.raises(ValueError, match="^lambdas: expected finite values > 0"):
        fauci_adult.override(full, lambdas={("dp", "sex"): (0.0,)})
    with pytest.raises(ValueError, match="^epochs: "):
        fauci_adult.override(full, epochs=0)


def test_paper_numbers_are_the_texts():
    claims = {(c.panel, c.what): c.paper for c in fauci_adult_report.PAPER_CLAIMS}
    assert claims[(("dp", "sex"), "accuracy at bound")] == 85.27  # [FU] sec. 4.2
    assert claims[(("di", "sex"), "vanilla metric")] == 0.34 and claims[(("di", "sex"), "accuracy at bound")] == 85.6
    assert claims[(("di", "age"), "best metric")] == 0.58 and claims[(("eo", "sex"), "accuracy at bound")] == 85.9
    assert fauci_adult_report.PAPER_ACCURACY_SPREAD == pytest.approx(86.8 - 86.4)
    rounding = {c.paper: c.rounding for c in fauci_adult_report.PAPER_CLAIMS}
    assert rounding[85.27] == pytest.approx(0.005) and rounding[86.7] == pytest.approx(0.05)
    assert rounding[0.34] == pytest.approx(0.005)


def test_tiny_synthetic_run_writes_the_table_the_figure_and_the_paper_beside_ours(tmp_path):
    rows, summary, files = fauci_adult.run(tmp_path, TINY, data=synthetic(), progress=False)
    # one vanilla + 4 FaUCI + 1 SQP model per fold, 2 folds
    assert len(rows) == 12 and sorted(rows["fold"].unique()) == [0, 1]
    assert rows.groupby("method").size().to_dict() == {"fauci": 8, "sqp": 2, "vanilla": 2}
    for column in ("method", "metric", "attribute", "value", "fold", "seed", "accuracy", "epochs", "epochs_run",
                   "stopped_by", "wdp[sex]", "wdi[sex]", "weo[sex]", "wdp[race]", "wdi[race]", "weo[race]",
                   "gdp[age]", "gdi[age]", "geo[age]", "wdp[sex&race]"):
        assert column in rows.columns
    assert rows["accuracy"].between(0, 100).all() and (rows["epochs_run"] <= TINY.max_epochs).all()
    saved = pd.read_csv(tmp_path / "results.csv")
    assert len(saved) == 12 and _png(tmp_path / "fig1_tradeoffs.png")
    assert [f.name for f in files] == ["results.csv", "fig1_tradeoffs.png", "summary.md"]
    assert summary.startswith("# fauci-adult: [FU] Fig. 1") and "Protocol: **custom**" in summary
    header = next(line for line in summary.splitlines() if line.startswith("| panel | metric | claim |"))
    assert "| paper | ours | gap | beyond spread |" in header
    assert "| 85.27 |" in summary and "| 0.3400 |" in summary  # DP <= 0.01 and DI of sex, [FU] sec. 4.2-4.3
    assert "| DI / race | wdi[race] | fauci | 0.1 | 2 |" in summary
    assert "| DI / sex | wdi[sex] | sqp | 0.8 | 2 |" in summary
    # the report can be rewritten from the saved table alone
    again = tmp_path / "again"
    again.mkdir()
    text, _ = fauci_adult.write_report(saved, again, TINY, "python -m benchmarks.papers fauci-adult", 1.0, "custom")
    def body(markdown: str) -> str:
        return markdown[markdown.index("## The paper's numbers"):]

    assert body(text) == body(summary) and "Rows: 600 (480 train+validation, 120 test)" in text


def test_claims_read_the_curve_as_the_paper_does():
    """``accuracy at bound`` takes the most accurate point meeting the bound (lambda 0 included);
    a point above the paper's accuracy is no gap (a lower bound to meet)."""
    base = {"metric": "di", "attribute": "sex", "fold": 0, "epochs_run": 1}
    rows = pd.DataFrame([
        {**base, "method": "vanilla", "value": 0.0, "accuracy": 86.6, "wdi[sex]": 0.30},
        {**base, "method": "fauci", "value": 0.1, "accuracy": 86.0, "wdi[sex]": 0.82},
        {**base, "method": "fauci", "value": 0.3, "accuracy": 85.0, "wdi[sex]": 0.95},
    ])
    table = fauci_adult_report.claims_table(rows, {("di", "sex"): "wdi[sex]"}).set_index("claim")
    assert table.loc["accuracy at bound (>= 0.8)", "ours"] == "86.00"
    assert table.loc["accuracy at bound (>= 0.8)", "beyond spread"] == "no"  # 86.0 >= 85.6
    # the regulariser's cost: (86.0 - 85.6) - (86.6 - 86.7), the vanilla offset removed
    assert table.loc["accuracy at bound (>= 0.8)", "net of vanilla"] == "+0.50"
    assert table.loc["vanilla metric", "gap"] == "-0.0400" and table.loc["vanilla metric", "beyond spread"] == "yes"
    assert table.loc["vanilla accuracy", "beyond spread"] == "no"  # within the paper's 0.4 points


def test_quick_from_the_command_line_on_adult(tmp_path, monkeypatch):
    tiny = dataclasses.replace(fauci_adult.QUICK, lambdas={("dp", "sex"): (1.0,), ("di", "age"): (0.1,)},
                               sqp_bounds={("eo", "sex"): (0.05,)}, max_epochs=2, patience=1, sqp_epochs=2,
                               subsample=1500)
    monkeypatch.setattr(fauci_adult, "QUICK", tiny)
    out = tmp_path / "quick"
    assert papers_main(["fauci-adult", "--quick", "--out", str(out)]) == 0
    rows = pd.read_csv(out / "results.csv")
    assert len(rows) == 4 and set(rows["method"]) == {"vanilla", "fauci", "sqp"}
    summary = (out / "summary.md").read_text()
    assert "Command: `python -m benchmarks.papers fauci-adult --quick" in summary and "Protocol: **quick**" in summary
    assert _png(out / "fig1_tradeoffs.png")


def test_adult_data_of_the_protocol():
    parts, data = fauci_adult.prepare(dataclasses.replace(fauci_adult.QUICK, run_folds=(0,)))
    # [FU] sec. 4.1: train and test files joined, 48,842 records, 80/20 (39,074 / 9,768)
    assert len(data) == 48_842 and data.sensitive_kinds == {"sex": "binary", "race": "categorical",
                                                             "age": "continuous"}
    part = parts[0]
    assert abs(len(part.test) - 9_768) <= 1 and len(part.fit) + len(part.valid) == 48_842 - len(part.test)
    assert abs(len(part.valid) - len(part.fit) / 4) <= 2
    assert "occupation=?" in part.fit.feature_names  # a missing value is a level
    assert {"age", "sex=Male", "race=Black"} <= set(part.fit.feature_names)  # the sensitive attributes are inputs
    from fairopt import datasets

    frame, _ = datasets.load_frame("adult", part="test", keep_missing=True)
    assert len(frame) == 16_281 and (frame["workclass"] == "?").any() and not frame.isna().any().any()
    with pytest.raises(ValueError, match="^keep_missing: "):
        datasets.load_frame("adult", keep_missing="yes")
    with pytest.raises(ValueError, match="^run_folds: "):
        fauci_adult.prepare(dataclasses.replace(fauci_adult.QUICK, run_folds=(7,)), data=synthetic())
