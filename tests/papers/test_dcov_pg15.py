"""``python -m benchmarks.papers dcov-pg15``: the [DC] sec. 5.2 Poisson application, run on tiny synthetic
data through the experiment code; its measures against independent references (scikit-learn's
mean Poisson deviance, brute-force U-statistic and RPS); the balance correction; the
real pg15training splits (skipped when ../shared/data is absent)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pandas as pd
import pytest
import torch
from scipy.stats import poisson
from sklearn.metrics import mean_poisson_deviance

from fairopt import models
from fairopt.data import FairData
from benchmarks.papers import dcov_pg15
from benchmarks.papers.early_stopping import EarlyStopping
from benchmarks.papers import dcov_pg15_report as report
from benchmarks.papers import main as papers_main
from benchmarks.papers import PAPER_CONFIGS, command_line

from conftest import SHARED_DATA, require_shared_file

pytestmark = [pytest.mark.usefixtures("one_torch_thread"),
              pytest.mark.filterwarnings("ignore::fairopt.exceptions.FairnessWarning")]

TINY_HYPER = dcov_pg15.Hyper(lr=0.05, batch_size=64, layers=1, nodes=8, dropout=0.1, hessian_power=1.0,
                             betas=(0.85, 0.95))
TINY = dataclasses.replace(dcov_pg15.QUICK, lambdas=(0.0, 5.0), seeds=(0, 1), max_epochs=3, patience=1,
                           subsample=None, hyper={k: TINY_HYPER for k in ("none", "ccdcov", "jdcov")},
                           selected={"ccdcov": 5.0, "jdcov": 5.0})


def synthetic(n: int = 600, seed: int = 0) -> FairData:
    """Poisson counts with exposure whose frequency depends on x0 and, through x1, on gender
    and region (which are not inputs)."""
    rng = np.random.default_rng(seed)
    gender = rng.integers(0, 2, n).astype(float)
    region = rng.integers(0, 4, n)
    x = rng.normal(size=(n, 3))
    x[:, 1] += 0.8 * gender + 0.3 * region
    exposure = rng.uniform(0.25, 1.0, n)
    y = rng.poisson(exposure * np.exp(-1.5 + 0.4 * x[:, 0] + 0.3 * x[:, 1]))
    return FairData.from_arrays(x, y, {"Gender": gender, "Group2": region}, task="poisson", exposure=exposure,
                                sensitive_kinds={"Gender": "binary", "Group2": "categorical"})


def u_centred(d: np.ndarray) -> np.ndarray:
    """The U-centred distance matrix (zero diagonal) of Szekely and Rizzo (2014)."""
    n = len(d)
    out = d - d.sum(0)[None, :] / (n - 2) - d.sum(1)[:, None] / (n - 2) + d.sum() / ((n - 1) * (n - 2))
    np.fill_diagonal(out, 0.0)
    return out


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("dcov_pg15")
    rows, summary, files = dcov_pg15.run(out, TINY, data=synthetic(), progress=False, command="tiny command")
    return out, rows, summary, files


def test_tiny_run_writes_the_paper_tables(tiny_run):
    out, rows, summary, files = tiny_run
    # calibration: 1 baseline + 2 regularisers x 1 lambda; final: 3 models; 2 seeds, 2 parts, raw and corrected
    assert len(rows) == (3 + 3) * 2 * 2 * 2
    calibration = rows[rows["stage"] == "calibration"]
    assert set(calibration["split"]) == {"valid", "subtrain"} and set(rows[rows["stage"] == "test"]["split"]) == {
        "test", "train"}
    assert set(zip(calibration["regulariser"], calibration["lambda"])) == {("none", 0.0), ("ccdcov", 5.0),
                                                                           ("jdcov", 5.0)}
    for column in ("deviance", "rps", "ccdcov", "jdcov", "js_divergence", "uf", "balance", "factor", "epochs"):
        assert rows[column].notna().all(), column
    assert (rows["epochs"] >= 1).all() and (rows["epochs_run"] <= 3).all()
    saved = pd.read_csv(out / "results.csv")
    assert len(saved) == len(rows) and set(files) >= {out / "results.csv", out / "summary.md", out / "tradeoff.png"}
    assert (out / "tradeoff.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert summary.startswith("# dcov-pg15") and "Command: `tiny command`" in summary
    assert "Protocol: **custom**" in summary
    # the paper's numbers sit beside ours: Table 5.3 baseline RPS, Table 5.4 test deviance of the CCdCov model
    assert "| CCdCov | 0 | 2 | 0." in summary and " / 0.1192 (" in summary
    assert "| No regularisation | 0 | 2 | 0." in summary and " / 0.1225 (" in summary and " / 0.5450 (" in summary
    unpaired = [line for line in summary.splitlines() if line.startswith("| CCdCov | 5 | 2 |")]
    assert len(unpaired) == 5 and not any(" / " in line for line in unpaired)  # lambda 5: no paper row
    assert "raw predictions (what the paper reports)" in summary and "balance correction" in summary
    assert "## Gaps beyond our seed spread" in summary


def test_measures_match_independent_references():
    data = synthetic(300, seed=3)
    out = torch.from_numpy(np.random.default_rng(1).normal(-1.5, 0.4, len(data)))
    row = dcov_pg15.measure(out, data, factor=1.3)
    y = data.y.double().numpy()
    mu = data.exposure.double().numpy() * np.exp(out.numpy()) * 1.3
    assert row["deviance"] == pytest.approx(mean_poisson_deviance(y, mu), rel=1e-10)
    k = np.arange(60)[None, :]
    brute = np.mean(np.sum((poisson.cdf(k, mu[:, None]) - (y[:, None] <= k)) ** 2, axis=1))
    assert row["rps"] == pytest.approx(brute, rel=1e-8)
    assert row["balance"] == pytest.approx(mu.sum() / y.sum(), rel=1e-12)
    assert row["loss"] == pytest.approx(np.mean(mu - y * np.log(mu / data.exposure.double().numpy())), rel=1e-12)
    # CCdCov: the U-statistic of Szekely and Rizzo (2014) by brute force, gender 0/1 next to the one-hot region
    gender = data.sensitive["Gender"].double().numpy()
    region = np.eye(4)[data.sensitive["Group2"].numpy()]
    rate = mu / data.exposure.double().numpy()
    a = u_centred(np.abs(rate[:, None] - rate[None, :]))
    s = np.column_stack([gender, region])
    b = u_centred(np.linalg.norm(s[:, None, :] - s[None, :, :], axis=2))
    n = len(rate)
    assert row["ccdcov"] == pytest.approx(np.sum(a * b) / (n * (n - 3)), rel=1e-8, abs=1e-14)


def test_balance_correction_makes_weighted_predictions_sum_to_the_claims(tiny_run):
    _, rows, _, _ = tiny_run
    # on the rows each model was fitted on, sum_i v_i alpha mu_i = sum_i N_i
    fitted = rows[rows["corrected"] & (((rows["stage"] == "calibration") & (rows["split"] == "subtrain"))
                                       | ((rows["stage"] == "test") & (rows["split"] == "train")))]
    np.testing.assert_allclose(fitted["balance"], 1.0, rtol=1e-9)
    raw = rows[~rows["corrected"] & rows["split"].isin(["subtrain", "train"])]
    np.testing.assert_allclose(raw["balance"] * raw["factor"], 1.0, rtol=1e-9)  # alpha = sum N / sum v mu
    # on other rows the factor is the training one, not re-fitted (the test claims stay unused)
    other = rows[rows["corrected"] & rows["split"].isin(["valid", "test"])]
    assert not np.allclose(other["balance"], 1.0)


def test_early_stopping_keeps_the_best_epoch():
    model = torch.nn.Linear(1, 1)
    values = iter([3.0, 2.0, 2.5, 2.6, 1.0])
    stopper = EarlyStopping(model, lambda: next(values), steps_per_epoch=2, patience=2)
    stops = []
    for iteration in range(8):
        with torch.no_grad():
            model.weight.fill_(float(iteration))
        stops.append(stopper({}, {"iteration": iteration}))
    assert stops == [False, False, False, False, False, False, False, True]
    assert stopper.best_epoch == 2 and stopper.values == [3.0, 2.0, 2.5, 2.6]
    stopper.restore()
    assert float(model.weight.detach()) == 3.0  # the weights at the end of epoch 2 (iteration 3)
    with pytest.raises(ValueError, match="patience"):
        EarlyStopping(model, lambda: 0.0, steps_per_epoch=1, patience=0)


def test_mlp_dropout():
    plain = models.mlp(4, hidden=(8, 8), seed=0)
    same = models.mlp(4, hidden=(8, 8), seed=0, dropout=0.0)
    assert [type(m) for m in plain] == [type(m) for m in same]
    dropped = models.mlp(4, hidden=(8, 8), seed=0, dropout=0.5)
    assert sum(isinstance(m, torch.nn.Dropout) for m in dropped) == 2
    X = torch.randn(16, 4)
    dropped.eval()
    torch.testing.assert_close(dropped(X), plain(X))  # same initialisation, dropout off in eval mode
    dropped.train()
    assert not torch.allclose(dropped(X), plain(X))
    with pytest.raises(ValueError, match="dropout"):
        models.mlp(4, dropout=1.0)


def test_registered_listed_and_overrides(capsys):
    assert "dcov-pg15" in PAPER_CONFIGS and "--quick" in PAPER_CONFIGS["dcov-pg15"].description
    assert papers_main(["--list"]) == 0
    assert "dcov-pg15: [DC] sec. 5.2" in capsys.readouterr().out
    assert command_line("dcov-pg15", "o", quick=True, data_dir="d") == \
        "python -m benchmarks.papers dcov-pg15 --quick --data-dir d --out o"
    s = dcov_pg15.override(dcov_pg15.FULL, epochs=7, seeds=[3], subsample=1000, lambdas=[0, 20])
    assert (s.max_epochs, s.seeds, s.subsample, s.lambdas) == (7, (3,), 1000, (0.0, 20.0))
    with pytest.raises(ValueError, match="lambdas"):
        dcov_pg15.override(dcov_pg15.FULL, lambdas=[-1.0])
    with pytest.raises(ValueError, match="epochs"):
        dcov_pg15.override(dcov_pg15.FULL, epochs=0)
    with pytest.raises(ValueError, match="seeds"):
        dcov_pg15.override(dcov_pg15.FULL, seeds=[])
    with pytest.raises(ValueError, match="sensitive features"):
        dcov_pg15.prepare(dcov_pg15.FULL, data=FairData.from_arrays(
            np.ones((20, 1)), np.arange(20) % 3, {"sex": np.arange(20) % 2}, task="poisson",
            exposure=np.ones(20)))


def test_paper_numbers():
    assert len(report.PAPER_VALIDATION) == 14 and report.PAPER_SELECTED == {"none": 0.0, "ccdcov": 40.0,
                                                                           "jdcov": 30.0}
    assert report.PAPER_VALIDATION[("ccdcov", 0.0)] == report.PAPER_VALIDATION[("jdcov", 0.0)]
    assert report.PAPER_TEST["none"][1] == 0.5450 and report.PAPER_TRAIN["jdcov"][0] == 0.1205
    assert dcov_pg15.HYPER["none"].layers == 4 and dcov_pg15.HYPER["ccdcov"].nodes == 256


def test_pg15training_splits(shared_data):
    require_shared_file("pg15training.csv.gz")
    parts = dcov_pg15.prepare(dcov_pg15.FULL, data_dir=SHARED_DATA)
    assert (len(parts.train), len(parts.test), len(parts.subtrain), len(parts.valid)) == (80_000, 20_000, 56_000,
                                                                                         24_000)
    assert parts.train.n_features == 37 and parts.train.n_cells == 20
    fit, stop = dcov_pg15.stop_slice(parts.subtrain, 0.1, 0)
    assert len(stop) == 5_600 and len(fit) + len(stop) == 56_000
