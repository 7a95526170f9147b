"""Pictures (issue 31, point 8): the certificate plot, the group report's bar chart with long
intersection labels inside the figure, and the images report.md links."""

from __future__ import annotations

import re
import warnings

import matplotlib

matplotlib.use("Agg")  # a headless backend for the figures drawn here

import numpy as np
import pandas as pd
import pytest

import fairopt
from fairopt.certificate import certify, plot_certificate
from fairopt.cli import main
from fairopt.constraints import DisparateImpact


def _png(path) -> bytes:
    data = path.read_bytes()
    assert data[:4] == b"\x89PNG" and len(data) > 3000
    return data


def biased_sample(n: int, seed: int = 0):
    rng = np.random.default_rng(seed)
    s = (rng.random(n) < 0.5).astype(int)
    X = np.column_stack([rng.normal(size=n) + 0.8 * s, rng.normal(size=n)])
    y = (X[:, 0] + 0.3 * X[:, 1] + rng.normal(scale=0.7, size=n) > 0.4).astype(int)
    return X, y, s


def test_certificate_plot_of_certificates(tmp_path):
    data = fairopt.datasets.load("adult").subset(np.arange(3000))
    train, held_out = data.split(test_size=0.4, seed=0)
    model = fairopt.models.linear(train.n_features, seed=0)
    fairopt.StochasticSQP(epochs=40, verbose=0).fit(model, train, loss="bce",
                                                    constraints=[DisparateImpact("sex", 0.8)])
    certificate = certify(model, held_out, DisparateImpact("sex", 0.8))
    ax = plot_certificate([certificate], path=tmp_path / "certificate.png", title="held-out DI")
    _png(tmp_path / "certificate.png")
    # the error bar spans the interval, the dashed line is the bound
    (line,) = [l for l in ax.get_lines() if l.get_linestyle() == "--"]
    assert line.get_ydata()[0] == pytest.approx(0.8)
    low, high = ax.get_ylim()
    assert low <= certificate.lower <= certificate.realised <= certificate.upper <= high
    assert ("passed" if certificate.passed else "FAILED") in ax.get_title()


def test_certificate_plot_per_candidate():
    X, y, s = biased_sample(1500)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        clf = fairopt.FairClassifier([("di", "s", 0.8)], validation_fraction=0.3, margin="auto", n_candidates=3,
                                     verbose=0).fit(X, y, sensitive_features=s)
    ax = plot_certificate(clf)
    assert len(ax.get_xticks()) == len(clf.candidates_)
    labels = [f"{v:.3g}" + (" (skipped)" if p is None else "")
              for v, p in zip(clf.candidates_["inflation"], clf.candidates_["passed"])]
    assert [t.get_text() for t in ax.get_xticklabels()] == labels
    ax.figure.canvas.draw()
    # a skipped candidate is grey, not failed, and the legend's colours are the outcomes present
    from fairopt.certificate.plotting import _candidates
    from matplotlib.figure import Figure

    table = pd.DataFrame({"inflation": [2.0, 1.25, 0.5], "passed": [None, True, True], "chosen": [False, False, True],
                          f"{clf.certificate_[0].constraint}: held-out": [np.nan, 0.95, 0.97],
                          f"{clf.certificate_[0].constraint}: confidence bound": [np.nan, 0.85, 0.86]})
    panel = Figure().subplots()
    handles = _candidates(panel, clf.certificate_[0], table)
    assert [h.get_label().split(":")[0] for h in handles] == ["passed", "skipped (no model)", "returned model"]
    assert [t.get_text() for t in panel.get_xticklabels()] == ["2 (skipped)", "1.25", "0.5"]
    with pytest.raises(ValueError, match="no certificate"):
        plot_certificate(fairopt.FairClassifier(verbose=0).fit(X, y))


def test_intersection_labels_stay_inside_the_figure():
    from sklearn.linear_model import LogisticRegression

    rng = np.random.default_rng(0)
    n = 600
    groups = pd.DataFrame({"ethnicity": rng.choice(["Caucasian", "African-American", "Hispanic"], n),
                           "gender": rng.choice(["Female", "Male"], n)})
    X = rng.normal(size=(n, 3))
    y = (X[:, 0] > 0).astype(int)
    report = fairopt.group_report(LogisticRegression().fit(X, y), X, y, groups, n_bootstrap=20)
    ax = report.plot()
    fig = ax.figure
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    for label in ax.get_xticklabels():
        box = label.get_window_extent(renderer)
        assert box.x0 >= 0 and box.y0 >= 0 and box.x1 <= fig.bbox.width, label.get_text()
    import matplotlib.pyplot as plt

    plt.close(fig)


def test_report_md_links_the_images_it_writes(tmp_path):
    X, y, s = biased_sample(400)
    frame = pd.DataFrame({"x0": X[:, 0], "x1": X[:, 1], "group": np.where(s == 1, "b", "a"), "label": y})
    frame.to_csv(tmp_path / "rows.csv", index=False)
    out = tmp_path / "run"
    assert main(["train", "--data", str(tmp_path / "rows.csv"), "--target", "label", "--sensitive", "group",
                 "--constraint", "di:group>=0.8", "--epochs", "40", "--out", str(out), "--quiet"]) == 0
    report = (out / "report.md").read_text()
    linked = re.findall(r"!\[[^\]]*\]\(([^)]+)\)", report)
    assert {"history.png", "groups_train.png", "groups_test.png"} <= set(linked)
    for name in linked:
        _png(out / name)
