"""A default fit that meets its bound writes nothing but (on a long fit) a progress bar
(issue 31, point 4): solvers.progress decides when a bar shows; the HiGHS banner of Moving
Targets goes to DEBUG."""

from __future__ import annotations

import subprocess
import sys
import warnings

import numpy as np
import pytest

import fairopt
from solvers import progress as progress_module
from solvers.progress import check_progress, epoch_logs, progress


def biased_sample(n: int = 600, seed: int = 0):
    """Two features and a binary group that shifts the label: the unconstrained logistic model
    has a disparate-impact ratio well below 0.9, so a DI >= 0.9 bound binds."""
    rng = np.random.default_rng(seed)
    s = (rng.random(n) < 0.5).astype(int)
    X = np.column_stack([rng.normal(size=n) + 0.8 * s, rng.normal(size=n)])
    y = (X[:, 0] + 0.3 * X[:, 1] + rng.normal(scale=0.7, size=n) > 0.4).astype(int)
    return X, y, s


def test_default_fit_that_meets_its_bound_is_silent(capfd):
    X, y, s = biased_sample()
    reference = fairopt.FairClassifier().fit(X, y)
    positive = reference.predict(X) == 1
    unconstrained_di = min(positive[s == 0].mean() / positive[s == 1].mean(),
                           positive[s == 1].mean() / positive[s == 0].mean())
    assert unconstrained_di < 0.8  # the bound below binds
    capfd.readouterr()
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a fit that meets its bound has nothing to warn about
        clf = fairopt.FairClassifier([("di", "s", 0.9)]).fit(X, y, sensitive_features=s)
    assert clf.train_violation_ == 0.0
    out, err = capfd.readouterr()
    assert out == "" and err == ""


@pytest.mark.parametrize("method", ["sqp", "penalty", "lagrangian"])
def test_auto_bar_appears_only_after_the_delay(capfd, monkeypatch, method):
    X, y, s = biased_sample(200)
    params = dict(method=method, epochs=30)
    fairopt.FairClassifier([("di", "s", 0.5)], **params).fit(X, y, sensitive_features=s)
    assert capfd.readouterr().err == ""  # shorter than AUTO_DELAY_SECONDS: nothing
    monkeypatch.setattr(progress_module, "AUTO_DELAY_SECONDS", 0.0)
    fairopt.FairClassifier([("di", "s", 0.5)], **params).fit(X, y, sensitive_features=s)
    assert "epoch" in capfd.readouterr().err  # a "long" fit: the bar
    fairopt.FairClassifier([("di", "s", 0.5)], verbose=0, **params).fit(X, y, sensitive_features=s)
    assert capfd.readouterr().err == ""  # verbose=0: never a bar


def test_progress_rule():
    items = range(3)
    assert progress(items, 0, "x", "it") is items
    assert progress(items, False, "x", "it") is items
    assert list(progress(items, "auto", "x", "it")) == [0, 1, 2]
    assert check_progress("auto") == "auto" and check_progress(True) == 1 and check_progress(2) == 2
    assert not epoch_logs("auto") and not epoch_logs(0) and epoch_logs(1)
    for bad in ("yes", -1, 0.5):
        with pytest.raises(ValueError, match="verbose: expected 'auto'"):
            check_progress(bad)
    X, y, s = biased_sample(100)
    with pytest.raises(ValueError, match="verbose"):
        fairopt.FairClassifier(verbose="loud").fit(X, y)


def test_moving_targets_with_highs_prints_nothing():
    """In a fresh process (HiGHS prints its banner once per process, when the first solver
    is built): the fit's standard output and error are empty, and the banner is logged at
    DEBUG."""
    pytest.importorskip("highspy")
    script = """
import logging, sys, warnings
import numpy as np
import fairopt
records = []
handler = logging.Handler()
handler.emit = records.append
logging.getLogger("solvers.projection").addHandler(handler)
logging.getLogger("solvers.projection").setLevel(logging.DEBUG)
rng = np.random.default_rng(0)
n = 300
s = (rng.random(n) < 0.5).astype(int)
X = np.column_stack([rng.normal(size=n) + 0.8 * s, rng.normal(size=n)])
y = (X[:, 0] + rng.normal(scale=0.7, size=n) > 0.4).astype(int)
warnings.simplefilter("ignore")
clf = fairopt.FairClassifier([("di", "s", 0.9)], method="moving_targets", epochs=20,
                             engine_params={"backend": "highs", "iterations": 2})
clf.fit(X, y, sensitive_features=s)
banner = [r.getMessage() for r in records if r.getMessage().startswith("HiGHS")]
assert banner and "Running HiGHS" in banner[0], [r.getMessage() for r in records]
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout == "" and done.stderr == ""


def test_verbose_epoch_lines_give_the_epoch_mean_and_a_polish_line(caplog):
    """verbose=1 with mini-batches: each epoch line gives its steps' mean objective (the last step's was one noisy
    batch's) and the last exact violation measured on all rows; the closing polish gets a line of its own."""
    import logging

    import numpy as np

    import fairopt

    rng = np.random.default_rng(0)
    X = rng.normal(size=(2000, 3))
    s = rng.integers(0, 2, 2000)
    y = (X[:, 0] + s > 0.5).astype(int)
    with caplog.at_level(logging.INFO, logger="solvers.sqp"), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        clf = fairopt.FairClassifier("di:s>=0.8", epochs=2, batch_size=256, verbose=1).fit(
            X, y, sensitive_features={"s": s})
    lines = [r.getMessage() for r in caplog.records if r.name == "solvers.sqp"]
    epochs = [line for line in lines if line.startswith("epoch ")]
    history = clf.history_.to_pandas()
    first = history[history["epoch"] == 0]["f"]
    assert len(epochs) == 2 and f"mean f={first.mean():.5f} over {len(first)} steps" in epochs[0]
    assert any(line.startswith("polish: ") and "iterations on all rows" in line for line in lines)
