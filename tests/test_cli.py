"""`fairopt train` and `fairopt bench` on tiny configurations of the embedded Adult."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from fairopt.cli import COMMANDS, main

pytestmark = [pytest.mark.filterwarnings("ignore::solvers.sqp.SQPWarning"),
              pytest.mark.usefixtures("one_torch_thread")]


def _png(path) -> bool:
    return path.exists() and path.stat().st_size > 1000 and path.read_bytes()[:4] == b"\x89PNG"


TINY = ["--dataset", "adult", "--subsample", "1500", "--epochs", "3"]


def test_commands_are_registered():
    assert {"bench", "train"} <= set(COMMANDS)


@pytest.mark.parametrize("method, extra", [
    ("sqp", ["--constraint", "disparate_impact:sex:0.8"]),
    ("penalty", ["--constraint", "di:sex:0.8", "--weight", "2", "--lr", "0.05"]),
    ("lagrangian", ["--constraint", "disparate_impact:sex:0.8", "--model", "mlp", "--hidden", "8"]),
])
def test_train_dataset_writes_what_train_data_writes(tmp_path, capsys, method, extra):
    """A built-in data set trains through the estimators like an own file: the model that ``fairopt predict``
    reads, the report, the metrics of both parts and the history."""
    from fairopt import load

    out = tmp_path / method
    assert main(["train", *TINY, "--method", method, *extra, "--out", str(out)]) == 0
    metrics = json.loads((out / "metrics.json").read_text())
    assert 0.0 <= metrics["test"]["accuracy"] <= 1.0 and metrics["train"]["n"] == 1200
    assert metrics["train"]["violation"] >= 0.0  # the DI constraint is reported
    history = pd.read_csv(out / "history.csv")
    assert _training_rows(history) >= 3 and "f" in history.columns
    assert _png(out / "history.png") and _png(out / "groups_test.png")
    assert load(out / "model.fairopt").metadata["method"] == method
    assert "DI[sex]" in (out / "report.md").read_text() and f"{method} on adult: status" in capsys.readouterr().out


def test_train_dataset_takes_the_estimators_options_and_trees(tmp_path):
    """Options of the estimators reach a built-in data set's fit (``--alpha`` was refused there), and so do
    boosted trees."""
    from fairopt import load

    assert main(["train", *TINY, "--constraint", "di:sex>=0.8", "--alpha", "0.01", "--out", str(tmp_path / "a"),
                 "--quiet"]) == 0
    assert load(tmp_path / "a" / "model.fairopt").metadata["alpha"] == 0.01
    assert main(["train", "--dataset", "adult", "--subsample", "1500", "--epochs", "20", "--model", "gbm",
                 "--constraint", "di:sex>=0.8", "--out", str(tmp_path / "g"), "--quiet"]) == 0
    metrics = json.loads((tmp_path / "g" / "metrics.json").read_text())
    assert metrics["train"]["bounds"]["disparate_impact[sex]"]["met"]


def test_train_dataset_penalty_terms_write_the_networks_weights(tmp_path, capsys):
    """``--penalty`` terms (``fairopt.penalties``) train through the experiments' runner, which saves the
    network's weights and a text report."""
    out = tmp_path / "penalty"
    assert main(["train", *TINY, "--method", "penalty", "--penalty", "dp_squared:sex", "--constraint", "di:sex:0.8",
                 "--weight", "2", "--lr", "0.05", "--out", str(out)]) == 0
    metrics = json.loads((out / "metrics.json").read_text())
    assert 0.0 <= metrics["test"]["accuracy"] <= 1.0 and metrics["train"]["n"] == 1200
    assert _training_rows(pd.read_csv(out / "history.csv")) == 3
    assert _png(out / "history.png") and (out / "model.pt").stat().st_size > 0
    assert "accuracy" in (out / "report.txt").read_text() and "accuracy" in capsys.readouterr().out


def test_train_dataset_prints_the_status_in_the_estimators_terms(tmp_path, capsys):
    """--dataset NAME prints the status of fairopt.status (not the engine's word) with its sentence."""
    import re

    from fairopt.status import STATUSES

    out = tmp_path / "run"
    assert main(["train", *TINY, "--constraint", "di:sex>=0.8", "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    found = re.search(r"^sqp on adult: status (\w+) \(\d+\.\d s\)\. (.+)$", printed, re.MULTILINE)
    assert found and found.group(1) in STATUSES, printed
    assert "DI[sex]" in found.group(2) and "bound >= 0.800" in found.group(2)
    assert json.loads((out / "metrics.json").read_text())["status"] == found.group(1)
    # --quiet: nothing on standard output, only the files
    assert main(["train", *TINY, "--constraint", "di:sex>=0.8", "--out", str(tmp_path / "quiet"), "--quiet"]) == 0
    assert capsys.readouterr().out == "" and (tmp_path / "quiet" / "metrics.json").is_file()


def test_train_from_toml_and_flag_override(tmp_path):
    config = tmp_path / "train.toml"
    config.write_text('dataset = "adult"\nsubsample = 1500\nepochs = 2\nmethod = "sqp"\n'
                      'constraint = ["disparate_impact:sex:0.7"]\n')
    out = tmp_path / "run"
    assert main(["train", "--config", str(config), "--epochs", "4", "--out", str(out)]) == 0
    assert _training_rows(pd.read_csv(out / "history.csv")) == 4 + 1


def test_train_dataset_config_passes_its_load_options(tmp_path):
    """A --config file's ``options`` are the built-in loader's arguments (Adult's sex as a model input)."""
    from fairopt import load

    config = tmp_path / "train.toml"
    config.write_text('dataset = "adult"\nsubsample = 1500\nepochs = 2\nconstraint = ["di:sex>=0.7"]\n'
                      'options = {include_sensitive = true}\n')
    assert main(["train", "--config", str(config), "--out", str(tmp_path / "run"), "--quiet"]) == 0
    assert "sex" in load(tmp_path / "run" / "model.fairopt").schema["feature_columns"]
    config.write_text('data = "loans.csv"\ntarget = "y"\noptions = {include_sensitive = true}\n')
    assert main(["train", "--config", str(config), "--out", str(tmp_path / "x")]) == 2


@pytest.mark.parametrize("line, message", [
    ("sensitive = 3", "'sensitive' must be a column name or a list of column names (text), got 3"),
    ('epochs = "ten"', "'epochs' must be an integer, got 'ten'"),
    ("epochs = 2.5", "'epochs' must be an integer, got 2.5"),
    ('seed = "abc"', "'seed' must be an integer, got 'abc'"),
    ("batch_size = true", "'batch_size' must be an integer, got True"),
    ('lr = "fast"', "'lr' must be a number, got 'fast'"),
    ('method = "sgd"', "'method' must be one of 'sqp', 'penalty', 'lagrangian', 'moving_targets', got 'sgd'"),
    ("constraint = 0.8", "'constraint' must be a constraint spec (text or a table) or a list of them, got 0.8"),
    ('quiet = "yes"', "'quiet' must be true or false, got 'yes'"),
])
def test_config_values_of_the_wrong_type_name_their_key(tmp_path, capsys, line, message):
    """--config values were not type-checked: ``sensitive = 3`` crashed with a traceback, ``epochs = "ten"``
    gave an error naming no key, ``batch_size = true`` trained with batch size 1 and ``epochs = 2.5`` two
    epochs. Each is now one error line naming the key, status 2, before any data is read."""
    config = tmp_path / "train.toml"
    config.write_text(f'dataset = "adult"\nsubsample = 1500\n{line}\n')
    assert main(["train", "--config", str(config), "--out", str(tmp_path / "run")]) == 2
    err = capsys.readouterr().err.strip()
    assert err == f"fairopt train: error: --config: {message}"
    assert not (tmp_path / "run").exists()


def test_config_values_of_the_forms_their_flags_take_pass_the_check():
    """Numbers for a float flag, a list for a repeatable one, a table constraint, a numeric margin."""
    from fairopt.cli import _check_config_types

    _check_config_types({"lr": 1, "sensitive": ["sex", "race"], "ignore": "id", "hidden": [8, 4], "margin": 0.01,
                         "constraint": [{"kind": "di", "sensitive": "sex", "delta": 0.8}, "dp:sex<=0.1"],
                         "positive": 1, "include_sensitive": True, "task": "binary", "options": {"a": 1}})


def _training_rows(history: pd.DataFrame) -> int:
    """History rows that are not polish iterations (``phase == "polish"``)."""
    return len(history) - int((history["phase"] == "polish").sum()) if "phase" in history else len(history)


@pytest.mark.parametrize("flags, message", [
    (["--constraint", "fairness:sex:0.8"], "expected 'kind:sensitive"),
    (["--constraint", "disparate_impact:sex"], "needs its 'delta'"),
    (["--config", "no_such_file.toml"], "--config"),
    (["--hidden", "8"], "--hidden: only for --model mlp"),
    (["--target", "income"], "--target: only with --data FILE"),
    (["--penalty", "dp_squared:sex"], "--penalty: only for --method penalty"),
    (["--method", "penalty", "--penalty", "dp_squared:sex", "--alpha", "0.1"], "--alpha: not with --penalty"),
])
def test_user_mistakes_give_one_error_line_and_status_2(tmp_path, capsys, flags, message):
    """A user's mistake is one line ``fairopt train: error: ...`` on stderr, exit status 2,
    no traceback; ``-vv`` shows the exception itself."""
    assert main(["train", *TINY, *flags, "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("fairopt train: error: ") and message in err and "\n" not in err
    assert "Traceback" not in err
    with pytest.raises(ValueError, match=message.lstrip("-")):
        main(["-vv", "train", *TINY, *flags, "--out", str(tmp_path)])


def test_python_dash_m_fairopt_is_the_console_script():
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-m", "fairopt", "train", "--dataset", "nope"], capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 2 and "unknown dataset 'nope'" in done.stderr and "Traceback" not in done.stderr
    done = subprocess.run([sys.executable, "-m", "fairopt", "datasets"], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0 and "adult" in done.stdout


def test_moving_targets_solvers_print_nothing(capfd):
    """The MILP/QP back-ends (HiGHS) are silent unless verbose: nothing on stdout or stderr."""
    import numpy as np

    from fairopt import FairClassifier

    rng = np.random.default_rng(0)
    X = rng.normal(size=(120, 3))
    y, s = (X[:, 0] > 0).astype(int), rng.integers(0, 2, 120)
    FairClassifier(constraints=[("disparate_impact", "s", 0.8)], method="moving_targets", sensitive_names="s",
                   engine_params={"iterations": 2}).fit(X, y, sensitive_features=s)
    out, err = capfd.readouterr()
    assert "HiGHS" not in out + err and out == ""


def test_bench_runs_a_toml_config(tmp_path, capsys):
    config = tmp_path / "tiny.toml"
    config.write_text("""
name = "tiny"
[data]
dataset = "adult"
subsample = 1500
[run]
seeds = [0]
[[methods]]
kind = "sqp"
constraint = "disparate_impact:sex"
values = [0.6, 0.8]
epochs = 3
[[methods]]
kind = "penalty"
penalty = "dp_squared:sex"
values = [0.1, 10.0]
weight_of = "inverse"
epochs = 3
lr = 0.05
""")
    out = tmp_path / "bench"
    assert main(["bench", str(config), "--out", str(out)]) == 0
    table = pd.read_csv(out / "results.csv")
    assert len(table) == (2 + 2) * 2 and set(table["method"]) == {"sqp", "penalty"}
    assert set(table.loc[table.method == "penalty", "hyperparameter"]) == {"lambda"}
    for name in ("tradeoff", "requested_vs_realised", "histories_sqp", "histories_penalty"):
        assert _png(out / f"{name}.png"), name
    summary = (out / "summary.md").read_text()
    assert summary.startswith("# tiny") and "| sqp | 0.6 |" in summary and "Realised vs requested" in summary
    assert "# tiny" in capsys.readouterr().out


def test_bench_builtin_with_overrides(tmp_path, capsys):
    assert main(["bench", "--list"]) == 0
    assert "demo-adult" in capsys.readouterr().out
    assert main(["bench"]) == 2  # no configuration: the list and an error line
    assert "fairopt bench: error: name a configuration" in capsys.readouterr().err
    out = tmp_path / "demo"
    assert main(["bench", "demo-adult", "--epochs", "2", "--subsample", "1000", "--out", str(out)]) == 0
    table = pd.read_csv(out / "results.csv")
    assert set(table["method"]) == {"sqp", "penalty", "lagrangian"} and (table["n"] > 0).all()


def test_a_constraint_on_an_unknown_sensitive_feature_is_worded_for_the_command_line(tmp_path, capsys):
    """The library says ``sensitive: unknown name`` (the constraint's argument) with advice for Python callers;
    the command line says which flag to change."""
    assert main(["train", *TINY, "--constraint", "di:gender>=0.8", "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("fairopt train: error: --constraint: column(s) ['gender'] not found in adult")
    assert "rename" not in err and "--sensitive" not in err


def test_a_built_in_data_sets_column_becomes_sensitive_when_a_constraint_names_it(tmp_path):
    """Adult's loader makes ``sex`` sensitive; a bound on ``race`` (an input column there) makes race the
    sensitive column instead, as a constraint does with ``--data``, and race is no model input then."""
    from fairopt import load

    assert main(["train", *TINY, "--constraint", "di:race>=0.5", "--out", str(tmp_path), "--quiet"]) == 0
    saved = load(tmp_path / "model.fairopt")
    assert saved.metadata["sensitive"] == ["race"] and "race" not in saved.schema["feature_columns"]
    assert "sex" not in saved.schema["feature_columns"]  # the loader's protected column stays out of the inputs


def test_a_poisson_data_set_trains_with_its_exposure(tmp_path, capsys, shared_data):
    """pg15training is a claim count with its exposure: the estimators (binary and least squares) do not take
    it, so it trains through the engine's Poisson runner, and the estimators' options are refused saying why."""
    common = ["train", "--dataset", "pg15training", "--data-dir", str(shared_data), "--subsample", "3000",
              "--constraint", "dcov:Gender<=1e-4", "--epochs", "3"]
    assert main([*common, "--out", str(tmp_path / "p"), "--quiet"]) == 0
    report = (tmp_path / "p" / "report.txt").read_text()
    assert (tmp_path / "p" / "model.pt").is_file() and "mean Poisson unit deviance" in report
    assert main([*common, "--alpha", "0.1", "--out", str(tmp_path / "q")]) == 2
    assert "--alpha: not with --dataset pg15training (a poisson target with its exposure" in capsys.readouterr().err


def test_a_bench_configuration_naming_an_unknown_attribute_names_its_key(tmp_path, capsys):
    """fairopt bench reads a TOML file: the error names the method's constraint key, not fairopt train's flags."""
    config = tmp_path / "bad.toml"
    config.write_text('name = "bad"\n[data]\ndataset = "adult"\nsubsample = 600\n[run]\nseeds = [0]\n'
                      '[[methods]]\nkind = "sqp"\nconstraint = "disparate_impact:gender"\nvalues = [0.8]\nepochs = 2\n')
    assert main(["bench", str(config), "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert "fairopt bench: error: constraint: names an unknown sensitive feature 'gender'" in err
    assert "--constraint" not in err and "--sensitive" not in err


def test_verbosity_counts_before_and_after_the_command_add_up():
    """fairopt -vv train -v read 1 (the command's count replaced the one before it)."""
    from fairopt.cli import build_parser

    parser = build_parser()
    for argv, expected in ((["-vv", "datasets", "-v"], 3), (["datasets", "-v"], 1), (["-v", "datasets"], 1),
                           (["datasets"], 0)):
        args = parser.parse_args(argv)
        assert args.verbose + args.verbose_after == expected
