"""`fairopt train --data` -> `fairopt predict` -> `fairopt report` on a table of the user's own
(not a built-in data set): its own column names, text categories, a column of numbers
written as text, a text target and a text sensitive column."""

from __future__ import annotations

import json
import io
import logging
import os
import subprocess
import sys
import warnings

import numpy as np
import pandas as pd
import pytest

import fairopt
from fairopt.cli import _flag_spelling, _flags_of, build_parser, main

pytestmark = [pytest.mark.usefixtures("one_torch_thread")]

N = 600
SPEC = "di:gender>=0.8"
COMMON = ["--target", "decision", "--positive", "approved", "--sensitive", "gender", "--ignore", "applicant",
          "--constraint", SPEC]


def loans(n: int = N, seed: int = 0) -> pd.DataFrame:
    """Loan decisions that favour one gender through a proxy (income): the DI bound binds."""
    rng = np.random.default_rng(seed)
    gender = rng.choice(["woman", "man"], n, p=[0.4, 0.6])
    city = rng.choice(["Lyon", "Porto", "Turin", "Ghent"], n)
    income = ((rng.normal(44, 10, n) + 14 * (gender == "man")).round(1) * 1000).astype(int)
    age = rng.integers(18, 70, n)
    score = 0.08 * (income / 1000 - 50) + 1.0 * (gender == "man") + 0.5 * (city == "Lyon") + rng.normal(0, 1, n)
    return pd.DataFrame({
        "applicant": [f"A{i:04d}" for i in range(n)],
        "age": age,
        "income": [f"{v:_}" for v in income],  # "52_300": numbers as text (pandas keeps it as text)
        "city": city,
        "gender": gender,
        "decision": np.where(score > 0.1, "approved", "rejected"),
    })


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    folder = tmp_path_factory.mktemp("own")
    frame = loans()
    frame.to_csv(folder / "loans.csv", index=False)
    # new rows: no target, shuffled order, an extra column the model does not use
    new = frame.drop(columns=["decision"]).sample(frac=1.0, random_state=1).assign(note="walk-in")
    new.to_csv(folder / "new.csv", index=False)
    return folder


@pytest.fixture(scope="module")
def sqp_run(files):
    out = files / "run_sqp"
    assert main(["train", "--data", str(files / "loans.csv"), *COMMON, "--method", "sqp", "--epochs", "60",
                 "--test-size", "0", "--out", str(out), "--quiet"]) == 0
    return out


def _one_error_line(capsys, command: str) -> str:
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"fairopt {command}: error: ") and "\n" not in err and "Traceback" not in err, err
    return err


def test_train_writes_a_loadable_model_report_and_history(sqp_run, files):
    saved = fairopt.load(sqp_run / "model.fairopt")
    assert isinstance(saved, fairopt.SavedModel)
    meta = saved.metadata
    assert meta["target"] == "decision" and meta["classes"] == ["rejected", "approved"] and meta["threshold"] == 0.5
    assert meta["sensitive"] == ["gender"] and meta["constraints"] == [SPEC]
    pre = saved.preprocessor
    # the sensitive column and the ignored id are not inputs; numbers written as text are numbers
    assert pre.columns_ == ["age", "income", "city"]
    assert pre.numeric_ == ["age", "income"] and pre.levels_["city"] == ["Ghent", "Lyon", "Porto", "Turin"]
    assert [c.name for c in saved.constraints] == ["disparate_impact[gender]"]

    report = (sqp_run / "report.md").read_text()
    assert "fairopt train --data" in report and "--constraint 'di:gender>=0.8'" in report
    assert f"| status | {meta['status']} |" in report and "## Constraints on the training rows" in report
    assert "| disparate_impact[gender] | 0.8*P[gender=man]-P[gender=woman] |" in report
    assert "## Per-group report: training rows" in report and "held-out rows" not in report
    png = (sqp_run / "history.png").read_bytes()
    assert png[:4] == b"\x89PNG" and len(png) > 5000

    # the DI bound holds on the training rows (all rows: --test-size 0) when the run says so
    frame = pd.read_csv(files / "loans.csv")
    approved = saved.predict(frame) == "approved"
    rates = pd.Series(approved).groupby(frame["gender"].to_numpy()).mean()
    assert 0 < approved.mean() < 1  # not a degenerate model
    if meta["feasible"]:
        assert rates.min() / rates.max() >= 0.8 - 1e-12
        assert meta["train_violations"]["disparate_impact[gender]"] == 0.0


def test_predict_keeps_row_order_and_matches_the_loaded_model(sqp_run, files, capsys, caplog):
    out = files / "predictions.csv"
    with caplog.at_level(logging.INFO, logger="fairopt"):
        assert main(["predict", str(sqp_run / "model.fairopt"), "--data", str(files / "new.csv"), "--out", str(out),
                     "--id-column", "applicant"]) == 0
    assert "ignoring column(s) ['note']" in caplog.text
    assert "wrote 600 predictions" in capsys.readouterr().out
    new = pd.read_csv(files / "new.csv")
    predictions = pd.read_csv(out)
    assert list(predictions.columns) == ["applicant", "prediction", "score"]
    assert predictions["applicant"].tolist() == new["applicant"].tolist()
    saved = fairopt.load(sqp_run / "model.fairopt")
    assert predictions["prediction"].tolist() == saved.predict(new).tolist()
    np.testing.assert_allclose(predictions["score"], saved.predict_proba(new)[:, 1], rtol=1e-12)
    assert ((predictions["score"] > 0.5) == (predictions["prediction"] == "approved")).all()

    # the same rows in the training file's order (the target present is not an input)
    again = files / "again.csv"
    assert main(["predict", str(sqp_run), "--data", str(files / "loans.csv"), "--out", str(again),
                 "--id-column", "applicant"]) == 0
    by_id = pd.read_csv(again).set_index("applicant").loc[predictions["applicant"]]
    assert by_id["prediction"].tolist() == predictions["prediction"].tolist()
    np.testing.assert_allclose(by_id["score"], predictions["score"], rtol=1e-12)

    # an id column named like an output column would be overwritten: refused, the file not written
    clash = files / "clash.csv"
    new.rename(columns={"applicant": "score"}).to_csv(clash, index=False)
    assert main(["predict", str(sqp_run), "--data", str(clash), "--out", str(files / "clash_out.csv"),
                 "--id-column", "score"]) == 2
    assert "--id-column: 'score' is also the name of an output column" in capsys.readouterr().err
    assert not (files / "clash_out.csv").exists()
    assert main(["predict", str(sqp_run), "--data", str(files / "new.csv"), "--out",
                 str(files / "no_such_folder" / "p.csv")]) == 2
    assert "does not exist; create it first" in capsys.readouterr().err


def test_report_has_one_row_per_group(sqp_run, files, capsys):
    assert main(["report", str(sqp_run / "model.fairopt"), "--data", str(files / "loans.csv"),
                 "--n-bootstrap", "50"]) == 0
    text = capsys.readouterr().out
    rows = [line.split("|")[1].strip() for line in text.splitlines() if line.startswith("| ")]
    assert rows.count("man") == 1 and rows.count("woman") == 1 and rows.count("overall") == 1
    assert "## Constraints on these rows" in text
    # another grouping, and the report of these rows agrees with fairopt.group_report
    assert main(["report", str(sqp_run), "--data", str(files / "loans.csv"), "--sensitive", "city",
                 "--n-bootstrap", "0"]) == 0
    text = capsys.readouterr().out
    assert sum(line.startswith(f"| {c} |") for line in text.splitlines() for c in ("Ghent", "Lyon", "Porto",
                                                                                   "Turin")) == 4


def test_moving_targets_with_a_held_out_part(files, capsys):
    out = files / "run_mt"
    assert main(["train", "--data", str(files / "loans.csv"), *COMMON, "--method", "moving_targets",
                 "--epochs", "40", "--iterations", "2", "--test-size", "0.25", "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert printed.startswith("moving_targets on loans.csv: status ") and "wrote " in printed
    saved = fairopt.load(out / "model.fairopt")
    assert saved.metadata["method"] == "moving_targets" and saved.metadata["n_test"] == 150
    # fitted on the training part only, with the same encoding as without a split
    assert saved.preprocessor.numeric_ == ["age", "income"] and saved.preprocessor.categorical_ == ["city"]
    report = (out / "report.md").read_text()
    assert "## Constraints on the held-out rows" in report and "## Per-group report: held-out rows" in report
    assert (out / "history.png").read_bytes()[:4] == b"\x89PNG"
    assert len(saved.predict(pd.read_csv(files / "new.csv"))) == N


def test_builtin_dataset_with_moving_targets(tmp_path):
    """--dataset NAME --method moving_targets goes through the same pipeline (the built-in
    dataset mode of the other methods is tests/test_cli.py's)."""
    out = tmp_path / "adult"
    assert main(["train", "--dataset", "adult", "--subsample", "600", "--method", "moving_targets",
                 "--constraint", "di:sex>=0.8", "--epochs", "20", "--iterations", "2", "--out", str(out),
                 "--quiet"]) == 0
    saved = fairopt.load(out / "model.fairopt")
    assert saved.metadata["classes"] == [0, 1] and saved.metadata["method"] == "moving_targets"
    assert "sex" not in saved.preprocessor.columns_ and "education" not in saved.preprocessor.columns_
    assert "## Per-group report: held-out rows" in (out / "report.md").read_text()


def test_python_dash_m_train_predict_report(files, tmp_path):
    """The whole chain as a user runs it: separate processes, the console script's module."""
    def fairopt_cli(*argv: str) -> subprocess.CompletedProcess:
        done = subprocess.run([sys.executable, "-m", "fairopt", *argv], capture_output=True, text=True, timeout=300,
                              env={**os.environ, "OMP_NUM_THREADS": "1"})
        assert done.returncode == 0, done.stderr[-2000:]
        return done

    out = tmp_path / "run"
    fairopt_cli("train", "--data", str(files / "loans.csv"), *COMMON, "--method", "sqp", "--epochs", "20",
                "--test-size", "0.2", "--out", str(out))
    done = fairopt_cli("predict", str(out / "model.fairopt"), "--data", str(files / "new.csv"), "--out", "-")
    predictions = pd.read_csv(io.StringIO(done.stdout))
    assert list(predictions.columns) == ["prediction", "score"] and len(predictions) == N
    saved = fairopt.load(out / "model.fairopt")
    assert predictions["prediction"].tolist() == saved.predict(pd.read_csv(files / "new.csv")).tolist()
    done = fairopt_cli("report", str(out / "model.fairopt"), "--data", str(files / "loans.csv"), "--n-bootstrap", "20")
    assert done.stdout.startswith("# fairopt report: loans.csv") and "| woman |" in done.stdout


def test_regression_target(files, tmp_path, capsys):
    frame = loans()
    frame["limit"] = frame["age"] * 100.0 + np.random.default_rng(1).normal(0, 500, N).round(2)
    frame.to_csv(tmp_path / "limits.csv", index=False)
    out = tmp_path / "run"
    assert main(["train", "--data", str(tmp_path / "limits.csv"), "--target", "limit", "--sensitive", "gender",
                 "--ignore", "applicant", "--ignore", "decision", "--constraint", "covariance:gender:10",
                 "--epochs", "100", "--out", str(out), "--quiet"]) == 0
    saved = fairopt.load(out / "model.fairopt")
    assert saved.task == "regression" and saved.metadata["classes"] is None
    assert main(["predict", str(out), "--data", str(tmp_path / "limits.csv"), "--out", str(tmp_path / "p.csv")]) == 0
    predictions = pd.read_csv(tmp_path / "p.csv")
    np.testing.assert_allclose(predictions["prediction"], saved.predict(frame), rtol=1e-12)
    assert (predictions["prediction"] == predictions["score"]).all()
    assert main(["report", str(out), "--data", str(tmp_path / "limits.csv"), "--n-bootstrap", "0"]) == 0
    assert "mean_prediction" in capsys.readouterr().out


def test_saved_model_predicts_without_cli_metadata(tmp_path):
    """A model saved with its data but no class labels: labels 0/1, a positive logit is 1."""
    frame = loans(200)
    frame["approved"] = (frame.pop("decision") == "approved").astype(int)
    data = fairopt.FairData.from_frame(frame.drop(columns=["applicant", "income"]), target="approved",
                                       sensitive="gender", include_sensitive=False)
    model = fairopt.models.linear(data.n_features, seed=0)
    fairopt.save(model, tmp_path / "bare.fairopt", data=data)
    saved = fairopt.load(tmp_path / "bare.fairopt")
    out = saved.decision_function(frame)
    assert saved.predict(frame).tolist() == (out > 0).astype(int).tolist()
    np.testing.assert_allclose(saved.predict_proba(frame)[:, 1], 1 / (1 + np.exp(-out)), rtol=1e-12)


@pytest.mark.parametrize("argv, command, message", [
    (["predict", "{run}", "--data", "{files}/loans_without_income.csv", "--out", "{files}/p.csv"], "predict",
     "missing the model's input column(s) ['income']"),
    (["predict", "{run}", "--data", "{files}/new.csv", "--out", "{files}/p.csv", "--strict-columns"], "predict",
     "--strict-columns: new.csv has column(s) ['note']"),
    (["predict", "{files}/no_model.fairopt", "--data", "{files}/new.csv", "--out", "{files}/p.csv"], "predict",
     "no such file"),
    (["report", "{run}", "--data", "{files}/new.csv"], "report", "--target: column(s) ['decision'] not found"),
    (["train", "--data", "{files}/no_such.csv", *COMMON, "--out", "{files}/x"], "train",
     "--data: no such file"),
    (["train", "--data", "{files}/loans.csv", "--target", "outcome", "--sensitive", "gender", "--out", "{files}/x"],
     "train", "--target: column(s) ['outcome'] not found in loans.csv"),
    (["train", "--data", "{files}/loans.csv", "--target", "decision", "--constraint", "di:sex>=0.8",
      "--out", "{files}/x"], "train", "--constraint: column(s) ['sex'] not found in loans.csv"),
    (["train", "--data", "{files}/loans.csv", "--target", "decision", "--constraint", "fairness:gender:0.8",
      "--out", "{files}/x"], "train", "--constraint 'fairness:gender:0.8': expected"),
    (["train", "--data", "{files}/loans.csv", "--target", "decision", "--constraint", "di:gender>=x",
      "--out", "{files}/x"], "train", "is not a number"),
])
def test_mistakes_are_one_error_line_with_status_2(sqp_run, files, capsys, argv, command, message):
    pd.read_csv(files / "new.csv").drop(columns=["income"]).to_csv(files / "loans_without_income.csv", index=False)
    argv = [a.format(run=sqp_run, files=files) for a in argv]
    assert main(argv) == 2
    assert message in _one_error_line(capsys, command)


def test_weights_with_a_constraint_without_a_weighted_version_blame_the_flag(files, capsys):
    frame = pd.read_csv(files / "loans.csv")
    frame["w"] = 1.0 + (np.arange(len(frame)) % 2)
    frame.to_csv(files / "weighted.csv", index=False)
    assert main(["train", "--data", str(files / "weighted.csv"), "--target", "decision", "--weights", "w",
                 "--constraint", "dcov:gender<=0.001", "--out", str(files / "x")]) == 2
    line = _one_error_line(capsys, "train")
    assert "error: --weights: Distance covariance does not take row weights yet" in line and "sample_weight" not in line


def test_messages_spell_parameters_as_flags(capsys):
    flags = _flags_of(build_parser(), "train")
    assert flags["data_dir"] == "--data-dir" and flags["include_sensitive"] == "--include-sensitive"
    text = "adult.csv not found. For example ..., or pass data_dir=..., or set FAIROPT_DATA=/path/to/dir."
    assert "or pass --data-dir ..., or set FAIROPT_DATA=" in _flag_spelling(text, flags)
    assert _flag_spelling("test_size: expected a fraction", flags) == "--test-size: expected a fraction"
    assert _flag_spelling("name: unknown dataset 'x'", flags) == "--dataset: unknown dataset 'x'"
    # the library's advice for Python callers, as the command line's
    assert _flag_spelling("batch_size: ... on all training rows; leave batch_size None, got 256", flags).endswith(
        "leave --batch-size out, got 256")
    assert _flag_spelling("margin: 'auto' does not ...; give a numeric margin with sample_weight", flags).endswith(
        "give a numeric --margin with --weights")
    continuous = _flag_spelling("sensitive: ['age'] is continuous and has no groups; use Covariance for a continuous "
                                "attribute (or bin it into a categorical one)", flags)
    assert continuous.startswith("--constraint: ['age'] is continuous") and "covariance:COLUMN<=0.05" in continuous
    assert "pandas" not in _flag_spelling("... (read the file with pandas.read_csv(..., skipinitialspace=True), or "
                                          "strip them)", flags)
    assert main(["datasets"]) == 0
    assert "--data-dir" in capsys.readouterr().out


def test_parquet_round_trip(files, tmp_path):
    pytest.importorskip("pyarrow", reason="parquet needs pyarrow")
    loans().to_parquet(tmp_path / "loans.parquet")
    out = tmp_path / "run"
    assert main(["train", "--data", str(tmp_path / "loans.parquet"), *COMMON, "--epochs", "10", "--test-size", "0",
                 "--out", str(out), "--quiet"]) == 0
    assert main(["predict", str(out), "--data", str(tmp_path / "loans.parquet"), "--out",
                 str(tmp_path / "p.csv")]) == 0
    from_csv = fairopt.load(out / "model.fairopt").predict(pd.read_csv(files / "loans.csv"))
    assert pd.read_csv(tmp_path / "p.csv")["prediction"].tolist() == from_csv.tolist()


def test_train_with_a_weights_column(files, tmp_path, capsys):
    """--weights COL: the bound holds on the WEIGHTED group rates of the training rows, the
    column is no model input, and a bad column is one error line with status 2."""
    frame = loans()
    rng = np.random.default_rng(3)
    # women of Lyon count five times: the weighted rates differ from the plain ones
    frame["w"] = np.where((frame["gender"] == "woman") & (frame["city"] == "Lyon"), 5.0, 1.0) \
        * rng.uniform(0.5, 1.5, len(frame))
    frame.to_csv(tmp_path / "weighted.csv", index=False)
    out = tmp_path / "run"
    assert main(["train", "--data", str(tmp_path / "weighted.csv"), *COMMON, "--weights", "w", "--epochs", "80",
                 "--test-size", "0", "--out", str(out), "--quiet"]) == 0
    saved = fairopt.load(out / "model.fairopt")
    assert "w" not in saved.preprocessor.columns_
    approved = saved.predict(frame.drop(columns=["decision"])) == "approved"
    w, woman = frame["w"].to_numpy(), (frame["gender"] == "woman").to_numpy()
    rate = lambda group: float((w[group] * approved[group]).sum() / w[group].sum())  # noqa: E731
    weighted_di = min(rate(woman) / rate(~woman), rate(~woman) / rate(woman))
    assert weighted_di >= 0.8 - 1e-3, weighted_di
    report = (out / "report.md").read_text()  # which figures are weighted is said, not left to guess
    assert "## Bounds (weighted)" in report and "## Per-group report: training rows (unweighted)" in report
    assert "Rows weighted by the column `w`" in report and saved.metadata["weights"] == "w"
    # the realised fairness table holds the weighted accuracy and DI (it was headed "unweighted")
    assert "## Realised fairness (weighted)" in report and "count rows unweighted." in report
    row = _table_row(report, "## Realised fairness", "gender").split("|")
    correct = (saved.predict(frame.drop(columns=["decision"])) == frame["decision"]).to_numpy()
    assert float(row[3]) == pytest.approx(float((w * correct).sum() / w.sum()), abs=1e-5)
    assert float(row[4]) == pytest.approx(weighted_di, abs=1e-5)
    frame.assign(w=-frame["w"]).to_csv(tmp_path / "negative.csv", index=False)
    assert main(["train", "--data", str(tmp_path / "negative.csv"), *COMMON, "--weights", "w",
                 "--out", str(tmp_path / "bad"), "--quiet"]) == 2
    assert "--weights" in _one_error_line(capsys, "train")


@pytest.mark.parametrize("task, method", [("binary", "sqp"), ("regression", "penalty")])
def test_table_path_is_the_estimator_fitted_directly(tmp_path, task, method):
    """train_table builds a FairClassifier / FairRegressor: the saved run predicts what the
    estimator fitted directly on the same training rows with the same settings predicts."""
    from fairopt.tabular import train_table, write_run

    frame = loans(300, seed=2)
    frame["income"] = frame["income"].str.replace("_", "").astype(int)  # numbers: the same columns both ways
    frame["limit"] = frame["age"] * 100.0 + np.random.default_rng(1).normal(0, 500, len(frame))
    target, spec = ("decision", SPEC) if task == "binary" else ("limit", "covariance:gender:10")
    unused = ["applicant", "limit" if task == "binary" else "decision"]
    trained = train_table(frame, target=target, positive="approved" if task == "binary" else None,
                          sensitive=["gender"], ignore=unused, constraints=[spec], method=method, epochs=30, seed=3,
                          test_size=0.25, progress=False)
    write_run(trained, tmp_path, n_bootstrap=0)
    saved = fairopt.load(tmp_path / "model.fairopt")

    rows = trained.train_frame
    inputs = rows.drop(columns=[*unused, target, "gender"])
    if task == "binary":
        direct = fairopt.FairClassifier([spec], pos_label="approved", method=method, epochs=30, seed=3)
    else:
        direct = fairopt.FairRegressor([spec], method=method, epochs=30, seed=3)
    direct.fit(inputs, rows[target], sensitive_features=rows["gender"])
    new = frame.drop(columns=[*unused, target, "gender"])
    if task == "binary":
        assert saved.predict(frame).tolist() == direct.predict(new).tolist()
        approved = list(direct.classes_).index("approved")
        np.testing.assert_allclose(saved.predict_proba(frame)[:, 1], direct.predict_proba(new)[:, approved],
                                   rtol=0, atol=1e-9)
    else:
        np.testing.assert_allclose(saved.predict(frame), direct.predict(new), rtol=1e-9, atol=1e-9)
    assert saved.metadata["status"] == direct.status_
    assert saved.metadata["train_violations"] == pytest.approx(direct.train_violations_, abs=1e-12)


def test_boosted_trees_train_and_predict_rows_with_missing_inputs(files, tmp_path, capsys):
    """--model gbm keeps missing input values (LightGBM routes them) at train and predict time; the
    linear model refuses them, naming the columns and --model gbm; --dataset has no gbm."""
    frame = loans()
    rng = np.random.default_rng(3)
    frame.loc[rng.random(N) < 0.2, "age"] = np.nan
    frame.loc[rng.random(N) < 0.1, "city"] = None
    frame.to_csv(tmp_path / "holes.csv", index=False)
    out = tmp_path / "run_gbm"
    assert main(["train", "--data", str(tmp_path / "holes.csv"), *COMMON, "--model", "gbm", "--test-size", "0",
                 "--out", str(out), "--quiet"]) == 0
    saved = fairopt.load(out / "model.fairopt")
    assert saved.metadata["model"] == "gbm" and saved.preprocessor.missing == "keep"
    assert saved.metadata["feasible"] and saved.metadata["train_violations"] == {"disparate_impact[gender]": 0.0}
    assert main(["predict", str(out), "--data", str(tmp_path / "holes.csv"), "--out", str(tmp_path / "p.csv")]) == 0
    predictions = pd.read_csv(tmp_path / "p.csv")
    assert predictions["prediction"].tolist() == saved.predict(frame.drop(columns=["decision"])).tolist()
    gender = frame["gender"].to_numpy()
    rates = [np.mean(predictions["prediction"].to_numpy()[gender == g] == "approved") for g in ("woman", "man")]
    assert min(rates) / max(rates) >= 0.8 - 1e-9  # the bound holds on the training rows, holes and all
    capsys.readouterr()
    assert main(["train", "--data", str(tmp_path / "holes.csv"), *COMMON, "--out", str(tmp_path / "lin"),
                 "--quiet"]) == 2
    err = _one_error_line(capsys, "train")
    assert "missing values in 'age'" in err and "'city'" in err and "--model gbm" in err
    # layer widths without a network would be ignored: refused
    assert main(["train", "--data", str(tmp_path / "holes.csv"), *COMMON, "--model", "gbm", "--hidden", "64,32",
                 "--out", str(tmp_path / "h"), "--quiet"]) == 2
    assert "--hidden: only for --model mlp (not gbm)" in _one_error_line(capsys, "train")


def test_report_of_a_model_with_only_continuous_sensitive_columns_gives_its_constraint_rows(tmp_path, capsys):
    """``fairopt report`` refused a model whose sensitive column is continuous (age under GeDI), which its own
    ``train`` report handles; it now prints a note instead of the per-group table, and the constraint rows."""
    rng = np.random.default_rng(1)
    frame = pd.DataFrame({"x": rng.normal(size=300), "age": rng.uniform(20, 70, 300)})
    frame["y"] = frame["x"] + 0.02 * frame["age"] + rng.normal(size=300)
    frame.to_csv(tmp_path / "reg.csv", index=False)
    assert main(["train", "--data", str(tmp_path / "reg.csv"), "--target", "y", "--sensitive", "age",
                 "--constraint", "gedi:age<=0.5", "--epochs", "20", "--out", str(tmp_path / "run"), "--quiet"]) == 0
    capsys.readouterr()
    assert main(["report", str(tmp_path / "run"), "--data", str(tmp_path / "reg.csv")]) == 0
    text = capsys.readouterr().out
    assert "No per-group table" in text and "| gedi_coarse[age] |" in text


def test_the_default_positive_class_note_is_in_the_report(files, tmp_path):
    """Without --positive the class taken as positive ('rejected', the last sorted label) is said in report.md's
    warnings, not only on standard error."""
    out = tmp_path / "run"
    flags = [f for f in COMMON if f not in ("--positive", "approved")]
    assert main(["train", "--data", str(files / "loans.csv"), *flags, "--epochs", "5", "--out", str(out),
                 "--quiet"]) == 0
    warnings_part = (out / "report.md").read_text().split("## Warnings", 1)[1]
    assert "--positive not given: the positive class is 'rejected'" in warnings_part


def test_report_on_rows_with_a_sensitive_level_the_training_rows_lacked(sqp_run, files, tmp_path, capsys):
    """A level the model never trained on is noted; the saved constraints are evaluated on the rows of the
    training groups, the rows of the new group left out and counted (the section said "Not evaluated: ...
    declared 'binary' but has 3 levels" for a third level of a binary attribute)."""
    frame = loans()
    renamed = frame.assign(gender=frame["gender"].replace({"woman": "nonbinary"}))
    renamed.to_csv(tmp_path / "renamed.csv", index=False)
    assert main(["report", str(sqp_run), "--data", str(tmp_path / "renamed.csv"), "--n-bootstrap", "0"]) == 0
    assert "`gender` holds level(s) ['nonbinary'] that the training rows did not" in capsys.readouterr().out
    three = frame.assign(gender=np.where(np.arange(len(frame)) % 5 == 0, "nonbinary", frame["gender"]))
    three.to_csv(tmp_path / "three.csv", index=False)
    assert main(["report", str(sqp_run), "--data", str(tmp_path / "three.csv"), "--n-bootstrap", "0"]) == 0
    text = capsys.readouterr().out
    section = text.split("## Constraints on these rows", 1)[1]
    kept = int((np.arange(len(frame)) % 5 != 0).sum())
    assert f"On the {kept} rows of the training groups; the {len(frame) - kept} rows of groups new" in section
    assert "disparate_impact[gender]" in section and "Not evaluated" not in section


def test_train_gives_a_certified_model_with_the_held_out_flags(files, tmp_path, capsys):
    """--margin auto --validation-fraction F: the estimators' certified candidates from the command line; the
    certificates are printed, in report.md (with the margins and the candidates) and in metrics.json, and the
    saved model predicts like any other run's."""
    out = tmp_path / "certified"
    assert main(["train", "--data", str(files / "loans.csv"), *COMMON, "--epochs", "60", "--margin", "auto",
                 "--validation-fraction", "0.3", "--confidence", "0.9", "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "certificate: disparate_impact[gender]" in printed and "90% lower confidence bound" in printed
    assert "training part (the model trained on 70% of it; 30% held out for the certificates)" in printed
    report = (out / "report.md").read_text()
    assert "## Held-out statements" in report and "margin='auto'" in report and "Certified candidates" in report
    certificates = json.loads((out / "metrics.json").read_text())["certificates"]
    assert len(certificates) == 1 and certificates[0]["confidence"] == 0.9
    saved = fairopt.load(out / "model.fairopt")
    assert saved.metadata["margin"] == "auto" and saved.metadata["validation_fraction"] == 0.3
    assert main(["train", "--data", str(files / "loans.csv"), *COMMON, "--margin", "wide", "--out",
                 str(tmp_path / "x")]) == 2
    assert "--margin: expected 'auto' or a number" in _one_error_line(capsys, "train")


def test_a_validation_part_with_levels_missing_from_the_model_rows_trains_and_reports(tmp_path, capsys):
    """--validation-fraction re-fits the encoding on the rows the model trains on: levels seen only in the
    validation or held-out rows have no input, and the report evaluates (and counts) the model's own inputs."""
    frame = loans(400, seed=3)
    frame.loc[:11, "city"] = [f"Town{i}" for i in range(12)]  # twelve levels of one row each
    frame.to_csv(tmp_path / "rare.csv", index=False)
    out = tmp_path / "run"
    assert main(["train", "--data", str(tmp_path / "rare.csv"), *COMMON, "--epochs", "40",
                 "--validation-fraction", "0.3", "--out", str(out)]) == 0
    assert "certificate: disparate_impact[gender]" in capsys.readouterr().out
    saved = fairopt.load(out / "model.fairopt")
    n_inputs = len(saved.preprocessor.feature_names_)
    assert f"-> {n_inputs} model inputs |" in (out / "report.md").read_text()
    train = json.loads((out / "metrics.json").read_text())["train"]
    assert 0.5 < train["accuracy"] <= 1.0 and train["n"] == 320


def test_a_spreadsheets_csv_is_read_with_its_separator_and_number_format(tmp_path, capsys, caplog):
    """A CSV with semicolons, decimal commas and thousands points: the separator is found from the header,
    --decimal / --thousands read the numbers; without them, text that holds numbers or dates is warned
    rather than silently one-hot encoded. -v works after the command too."""
    frame = loans(300, seed=5)
    income = frame["income"].str.replace("_", "").astype(int)
    frame["income"] = [f"{v:,}".replace(",", ".") for v in income]  # 52.300
    frame["ratio"] = [f"{v:.3f}".replace(".", ",") for v in np.linspace(0.1, 0.9, len(frame))]  # 0,345
    frame["since"] = [f"2023-{1 + i % 12:02d}-{1 + i % 28:02d}" for i in range(len(frame))]
    frame.to_csv(tmp_path / "eu.csv", sep=";", index=False)
    base = ["train", "--data", str(tmp_path / "eu.csv"), *COMMON, "--epochs", "20"]
    with caplog.at_level(logging.WARNING, logger="fairopt"):
        assert main([*base, "--out", str(tmp_path / "plain")]) == 0
    assert "column 'ratio' holds numbers written with" in caplog.text and "'0,100'" in caplog.text
    assert "column 'since' holds dates (e.g. '2023-01-01')" in caplog.text and "--ignore since" in caplog.text
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="fairopt"):
        assert main([*base, "--decimal", ",", "--thousands", ".", "--ignore", "since",
                     "--out", str(tmp_path / "read")]) == 0
    assert "holds numbers written with" not in caplog.text
    saved = fairopt.load(tmp_path / "read" / "model.fairopt")
    assert {"income", "ratio"} <= set(saved.preprocessor.numeric_)
    capsys.readouterr()
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="fairopt"):
        assert main(["predict", str(tmp_path / "read"), "--data", str(tmp_path / "eu.csv"), "--decimal", ",",
                     "--thousands", ".", "--out", str(tmp_path / "p.csv"), "-v"]) == 0
    assert "the header holds semicolons" in caplog.text
    assert len(pd.read_csv(tmp_path / "p.csv")) == len(frame)


def scores(n: int = 500, seed: int = 2) -> pd.DataFrame:
    """A numeric target that depends on race, sex and a continuous share: the relative bounds bind."""
    rng = np.random.default_rng(seed)
    frame = pd.DataFrame({"race": rng.choice(["a", "b", "c"], n), "sex": rng.choice(["f", "m"], n),
                          "share": rng.uniform(0, 1, n), "x": rng.normal(size=n)})
    frame["y"] = (frame["x"] + 0.8 * (frame["race"] == "a") + 0.5 * (frame["sex"] == "m") + frame["share"]
                  + rng.normal(0, 0.5, n))
    return frame


def _table_row(markdown: str, heading: str, name: str) -> str:
    """The first constraint-table row of ``name`` after ``heading`` in ``markdown``."""
    after = markdown[markdown.index(heading):]
    return next(line for line in after.splitlines() if line.startswith(f"| {name} |"))


@pytest.mark.parametrize("spec", ["dcov:race,sex<=0.25x", "gedi:share<=0.2x"])
def test_a_relative_bound_on_the_held_out_rows_keeps_the_training_scale(tmp_path, capsys, spec):
    """``<=0.25x`` is a share of the TRAINING target's own measure: train's held-out check rescaled it to the
    held-out target's and could read 'met' where ``fairopt report`` on the same rows read 'NO'. Both now hold
    the saved model's absolute bound, and the held-out bound line reads a share of the training measure."""
    from fairopt import tabular

    trained = tabular.train_table(scores(), target="y", constraints=[spec], epochs=40, test_size=0.3, seed=0,
                                  progress=False)
    tabular.write_run(trained, tmp_path / "run", n_bootstrap=0)
    trained.test_frame.to_csv(tmp_path / "held.csv", index=False)
    capsys.readouterr()
    assert main(["report", str(tmp_path / "run"), "--data", str(tmp_path / "held.csv"), "--n-bootstrap", "0"]) == 0
    fitted = trained.constraints[0]
    from_report = _table_row(capsys.readouterr().out, "## Constraints on these rows", fitted.name)
    from_train = _table_row((tmp_path / "run" / "report.md").read_text(), "## Constraints on the held-out rows",
                            fitted.name)
    assert from_train == from_report
    held_out = trained.test_eval["bounds"][fitted.name]
    absolute = float(from_train.split("|")[3])
    assert held_out["bound"] == fitted.bound and held_out["value"] == pytest.approx(absolute / fitted.reference,
                                                                                    rel=1e-5)


def test_a_constraint_given_as_a_config_table_is_reported_as_written(files, tmp_path, capsys):
    """A --config constraint table (the form train's advice gives for a threshold) crashed ``fairopt report``
    (a TypeError joining the specs) and showed as a Python dict in report.md; both now write it as TOML."""
    config = tmp_path / "run.toml"
    config.write_text(f'data = "{files / "loans.csv"}"\ntarget = "decision"\npositive = "approved"\n'
                      'ignore = ["applicant"]\nepochs = 20\nquiet = true\n'
                      'constraint = [{kind = "di", sensitive = "gender", delta = 0.8}]\n')
    assert main(["train", "--config", str(config), "--out", str(tmp_path / "run")]) == 0
    written = '{kind = "di", sensitive = "gender", delta = 0.8}'
    assert f"| constraints | `{written}` |" in (tmp_path / "run" / "report.md").read_text()
    capsys.readouterr()
    assert main(["report", str(tmp_path / "run"), "--data", str(files / "loans.csv"), "--n-bootstrap", "0"]) == 0
    assert f"trained on loans.csv ({written})" in capsys.readouterr().out


def test_report_reads_a_numeric_target_written_as_floats_as_the_models_classes(files, tmp_path, capsys):
    """A 0/1 target trained as integers and written 0.0/1.0 in the report's file (also the law data set's own
    file after ``train --dataset law``) was refused: the labels were compared as text ('1.0' is not '1')."""
    frame = loans()
    frame["approved"] = (frame.pop("decision") == "approved").astype(int)
    frame.to_csv(tmp_path / "ints.csv", index=False)
    frame.assign(approved=frame["approved"].astype(float)).to_csv(tmp_path / "floats.csv", index=False)
    assert main(["train", "--data", str(tmp_path / "ints.csv"), "--target", "approved", "--ignore", "applicant",
                 "--constraint", SPEC, "--epochs", "20", "--out", str(tmp_path / "run"), "--quiet"]) == 0
    reports = []
    for name in ("ints.csv", "floats.csv"):
        capsys.readouterr()
        assert main(["report", str(tmp_path / "run"), "--data", str(tmp_path / name), "--n-bootstrap", "0"]) == 0
        reports.append(capsys.readouterr().out.split("\n", 1)[1])  # past the title, which names the file
    assert reports[0] == reports[1]
    frame.assign(approved=frame["approved"] * 2.0).to_csv(tmp_path / "twos.csv", index=False)
    assert main(["report", str(tmp_path / "run"), "--data", str(tmp_path / "twos.csv"), "--n-bootstrap", "0"]) == 2
    assert "holds label(s) ['2.0'] that are not the model's classes [0, 1]" in _one_error_line(capsys, "report")


@pytest.mark.parametrize("flags, message", [
    (["--target", "Decision", "--constraint", SPEC], "--target: column(s) ['Decision'] not found in spaced.csv; "
                                                     "did you mean 'decision'? Its columns are"),
    (["--target", "decision", "--ignore", "applicant", "--constraint", SPEC],
     "--ignore: column(s) ['applicant'] not found in spaced.csv; did you mean 'applicant '? The file's column "
     "name holds spaces around it: quote it, spaces included. Its columns are"),
    (["--target", "decision", "--constraint", "di:gendr>=0.8"],
     "--constraint: column(s) ['gendr'] not found in spaced.csv; did you mean 'gender'?"),
    (["--target", "decision", "--sensitive", "GENDER", "--sensitive", "cty", "--constraint", "di:GENDER>=0.8"],
     "--sensitive: column(s) ['GENDER', 'cty'] not found in spaced.csv; did you mean 'gender' for 'GENDER', "
     "'city' for 'cty'?"),
    (["--target", "decision", "--constraint", "di:sex>=0.8"],
     "--constraint: column(s) ['sex'] not found in spaced.csv; its columns are"),
])
def test_a_column_not_found_suggests_the_close_names(tmp_path, capsys, flags, message):
    """A column-not-found error listed the first dozen columns and suggested nothing, even where the file's
    name differed only by case or a trailing space: it now says "did you mean" (same name once case and
    spaces are ignored, else difflib's close matches); none when nothing is close."""
    loans(50).rename(columns={"applicant": "applicant "}).to_csv(tmp_path / "spaced.csv", index=False)
    assert main(["train", "--data", str(tmp_path / "spaced.csv"), *flags, "--out", str(tmp_path / "x")]) == 2
    assert message in _one_error_line(capsys, "train")


@pytest.mark.parametrize("command", ["report", "predict"])
def test_an_out_file_in_a_missing_folder_is_refused_before_the_work(sqp_run, files, capsys, command):
    """``fairopt report --out`` into a missing folder printed the whole report, then a bare Errno (no flag);
    report now checks its --out as predict does (one helper), before reading the rows, and prints nothing."""
    for out, message in ((files / "no_folder" / "r.out", f"--out: the folder '{files / 'no_folder'}' of "),
                         (files, "is a directory; give a file name such as")):
        capsys.readouterr()
        assert main([command, str(sqp_run), "--data", str(files / "loans.csv"), "--out", str(out)]) == 2
        captured = capsys.readouterr()
        assert captured.out == "" and captured.err.startswith(f"fairopt {command}: error: ") \
            and message in captured.err and captured.err.count("\n") == 1, captured


def test_a_numeric_target_of_three_values_says_it_trains_a_regression_and_its_rate_threshold(tmp_path, capsys):
    """A 0/1/2 label silently trained a regression, and a DI bound on it, which compares the groups' shares of
    predictions above a threshold (0 unless a --config table gives one), read like the DI of labels. The
    console now says which task --task auto took, and each bound line names the threshold."""
    frame = loans(300)
    frame["tier"] = np.where(frame["age"] < 30, 2, (frame.pop("decision") == "approved").astype(int))
    frame.to_csv(tmp_path / "tiers.csv", index=False)
    base = ["train", "--data", str(tmp_path / "tiers.csv"), "--target", "tier", "--ignore", "applicant",
            "--epochs", "20"]
    assert main([*base, "--constraint", SPEC, "--out", str(tmp_path / "run")]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == ("task: regression (the target 'tier' has 3 distinct numeric values; the predictions are "
                      "numbers, not labels); a classifier needs a target of two labels (--task binary)")
    assert out[2].startswith("training rows: DI[gender, share of predictions > 0] ")
    assert out[3].startswith("held-out rows: DI[gender, share of predictions > 0] ")
    assert "- training rows: DI[gender, share of predictions > 0] " in (tmp_path / "run" / "report.md").read_text()
    config = tmp_path / "threshold.toml"
    config.write_text('constraint = [{kind = "di", sensitive = "gender", delta = 0.8, threshold = 1.5}]\n')
    assert main([*base, "--task", "regression", "--config", str(config), "--out", str(tmp_path / "t")]) == 0
    out = capsys.readouterr().out.splitlines()  # --task regression given: no notice
    assert not out[0].startswith("task:") and "DI[gender, share of predictions > 1.5] " in out[1]


def test_a_target_written_with_a_decimal_comma_gets_the_flag_that_reads_it(tmp_path, capsys):
    """A ';'-separated file with '0,26' targets: both errors (as a classifier, and with --task regression) name
    --decimal , (the first advised --task regression, which led to the second)."""
    rng = np.random.default_rng(0)
    frame = pd.DataFrame({"x": rng.normal(size=60), "g": rng.choice(["a", "b"], 60),
                          "score": np.round(rng.normal(size=60), 2)})
    path = tmp_path / "comma.csv"
    frame.to_csv(path, sep=";", decimal=",", index=False)
    for extra in ([], ["--task", "regression"]):
        assert main(["train", "--data", str(path), "--target", "score", "--sensitive", "g",
                     "--out", str(tmp_path / "run"), "--quiet", *extra]) == 2
        assert "read the file with --decimal ," in capsys.readouterr().err


def test_subsample_draws_with_the_seed():
    """--subsample of a --data file follows --seed (it always drew with seed 0)."""
    from fairopt.cli import _subsample

    frame = pd.DataFrame({"x": np.arange(200)})
    first, again, other = (_subsample(frame, 50, seed) for seed in (3, 3, 4))
    assert first.equals(again) and not first.equals(other) and len(other) == 50
    assert _subsample(frame, 500, 1) is frame


def test_an_identifier_column_warning_is_in_the_report_and_each_message_shows_once(tmp_path, capsys, caplog):
    """A numeric id column left as an input: its warning goes to report.md's warnings like the others (it was a
    raw Python warning only), and an unseen level of the held-out rows is logged once, not once per encoding."""
    rng = np.random.default_rng(1)
    n = 400
    frame = pd.DataFrame({"person": np.arange(n), "x": rng.normal(size=n), "g": rng.choice(["a", "b"], n),
                          "job": np.where(np.arange(n) == n - 1, "rare", rng.choice(["p", "q"], n)),
                          "y": rng.integers(0, 2, n)})
    path = tmp_path / "rows.csv"
    frame.to_csv(path, index=False)
    out = tmp_path / "run"
    with warnings.catch_warnings(record=True) as caught, caplog.at_level(logging.WARNING):
        warnings.simplefilter("always")
        assert main(["train", "--data", str(path), "--target", "y", "--sensitive", "g", "--constraint",
                     "di:g>=0.8", "--epochs", "5", "--test-size", "0.5", "--seed", "3", "--out", str(out),
                     "--quiet"]) == 0
    assert not [w for w in caught if "whole number in every row" in str(w.message)]
    report = (out / "report.md").read_text()
    assert "'person' holds a different whole number in every row" in report
    unseen = [r for r in caplog.records if "not seen at fit time" in r.getMessage()]
    assert len(unseen) == 1, [r.getMessage() for r in unseen]


def test_a_second_protected_looking_column_among_the_inputs_is_warned(tmp_path, caplog):
    """A lender's trial: with --sensitive gender only, the file's race column became a model input without a
    word. The run says so and names both ways out; a column bounded by --sensitive is not named."""
    frame = loans(300, seed=3)
    frame["Race"] = np.random.default_rng(3).choice(["a", "b", "c"], len(frame))
    frame.to_csv(tmp_path / "loans.csv", index=False)
    with caplog.at_level(logging.WARNING, logger="fairopt"):
        assert main(["train", "--data", str(tmp_path / "loans.csv"), *COMMON, "--epochs", "5",
                     "--out", str(tmp_path / "run")]) == 0
    message = next(r.getMessage() for r in caplog.records if "suggest protected attributes" in r.getMessage())
    assert "['Race']" in message and "--sensitive Race" in message and "--ignore Race" in message
    assert "gender" not in message.split("are model inputs")[0]
