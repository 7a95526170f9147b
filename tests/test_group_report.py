"""fairopt.group_report / GroupReport: per-group values against brute force, the stratified
bootstrap, intersections, every kind of model, errors, Markdown and plot."""

from __future__ import annotations

import logging
import warnings

import numpy as np
import pandas as pd
import pytest
import torch
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from sklearn.base import BaseEstimator, RegressorMixin
from sklearn.linear_model import LinearRegression

import fairopt
from fairopt import FairClassifier, GroupReport, group_report
from fairopt.exceptions import FairnessWarning
from fairopt.measures import group_rates
from fairopt.persistence import SavedModel

pytestmark = pytest.mark.usefixtures("one_torch_thread")

CLASSIFICATION = ("selection_rate", "tpr", "fpr", "accuracy")
REGRESSION = ("mean_prediction", "mean_target", "mae", "rmse")


class Fixed:
    """A scikit-learn-style classifier whose predictions are the last column of X."""

    def predict(self, X):
        return np.asarray(X)[:, -1]


class FixedRegressor(RegressorMixin, BaseEstimator):
    """A scikit-learn regressor whose predictions are the last column of X."""

    def predict(self, X):
        return np.asarray(X)[:, -1]


def synthetic(n: int, seed: int = 0, groups=("a", "b", "c")):
    """Random rows with group-dependent rates: X (last column = prediction), y, s."""
    rng = np.random.default_rng(seed)
    s = rng.choice(np.array(groups), size=n, p=np.linspace(1, 2, len(groups)) / np.linspace(1, 2, len(groups)).sum())
    shift = np.searchsorted(np.array(groups), s) * 0.15
    y = (rng.random(n) < 0.3 + shift).astype(int)
    pred = (rng.random(n) < 0.2 + 0.4 * y + shift / 2).astype(int)
    X = np.column_stack([rng.normal(size=n), pred])
    return X, y, s


def brute_classification(pred, y, s):
    rows = {}
    for g in np.unique(s):
        m = s == g
        rows[str(g)] = {"n": m.sum(), "selection_rate": pred[m].mean(), "tpr": pred[m & (y == 1)].mean(),
                        "fpr": pred[m & (y == 0)].mean(), "accuracy": (pred[m] == y[m]).mean()}
    return pd.DataFrame(rows).T


# ----------------------------------------------------------------------------- values
def test_classification_values_match_brute_force():
    X, y, s = synthetic(900)
    report = group_report(Fixed(), X, y, s, n_bootstrap=200)
    expected = brute_classification(X[:, -1], y, s)
    assert isinstance(report, GroupReport) and report.task == "binary" and report.metrics == CLASSIFICATION
    assert list(report.by_group.index) == ["a", "b", "c"] and report.by_group.index.name == "sensitive"
    for column in ("n", *CLASSIFICATION):
        np.testing.assert_allclose(report.by_group[column].to_numpy(float), expected[column].to_numpy(float),
                                   rtol=0, atol=1e-12)
    pred = X[:, -1]
    overall = {"selection_rate": pred.mean(), "tpr": pred[y == 1].mean(), "fpr": pred[y == 0].mean(),
               "accuracy": (pred == y).mean()}
    assert report.overall["n"] == 900
    for metric, value in overall.items():
        assert report.overall[metric] == pytest.approx(value, abs=1e-12)
        values = expected[metric].to_numpy(float)
        row = report.disparities.loc[metric]
        assert row["ratio"] == pytest.approx(values.min() / values.max(), abs=1e-12)
        assert row["difference"] == pytest.approx(values.max() - values.min(), abs=1e-12)
        assert row["group_min"] == expected.index[values.argmin()] and row["group_max"] == expected.index[values.argmax()]
        assert row["overall"] == pytest.approx(value, abs=1e-12)
    # the library's own measures agree
    assert dict(report.by_group["selection_rate"]) == pytest.approx(group_rates(pred, s))
    assert report.ratio()["selection_rate"] == pytest.approx(
        fairopt.metrics.disparate_impact(y, pred, sensitive_features=s))
    assert report.difference()["tpr"] == pytest.approx(
        fairopt.metrics.equal_opportunity_difference(y, pred, sensitive_features=s))


def test_regression_values_match_brute_force():
    rng = np.random.default_rng(3)
    n = 500
    s = rng.choice(["x", "y"], size=n)
    y = rng.normal(size=n) + (s == "y")
    pred = y + rng.normal(scale=0.5 + (s == "x"), size=n)
    X = np.column_stack([rng.normal(size=n), pred])
    report = group_report(FixedRegressor(), X, y, pd.Series(s, name="grp"), n_bootstrap=100)
    assert report.task == "regression" and report.metrics == REGRESSION
    assert report.by_group.index.name == "grp"
    for g in ("x", "y"):
        m = s == g
        row = report.by_group.loc[g]
        assert row["mean_prediction"] == pytest.approx(pred[m].mean())
        assert row["mean_target"] == pytest.approx(y[m].mean())
        assert row["mae"] == pytest.approx(np.abs(y[m] - pred[m]).mean())
        assert row["rmse"] == pytest.approx(np.sqrt(((y[m] - pred[m]) ** 2).mean()))
    assert report.overall["rmse"] == pytest.approx(np.sqrt(((y - pred) ** 2).mean()))
    mae = report.by_group["mae"].to_numpy()
    assert report.disparities.loc["mae", "ratio"] == pytest.approx(mae.min() / mae.max())
    # a real scikit-learn regressor: its kind decides the task, no threshold for regression
    model = LinearRegression().fit(X[:, :1], y)
    assert group_report(model, X[:, :1], y, s, n_bootstrap=0).task == "regression"
    with pytest.raises(ValueError, match="threshold: only for classification"):
        group_report(model, X[:, :1], y, s, threshold=0.5)


def test_weighted_values_equal_those_of_repeated_rows():
    """Integer weights count each row that many times: the weighted report's values are the unweighted
    report's on the repeated rows (regression's RMSE too), and fairopt.metrics agrees."""
    X, y, s = synthetic(700, seed=5)
    w = np.random.default_rng(5).integers(0, 4, size=y.size)
    report = group_report(Fixed(), X, y, s, sample_weight=w, n_bootstrap=300)
    repeated = group_report(Fixed(), np.repeat(X, w, axis=0), np.repeat(y, w), np.repeat(s, w), n_bootstrap=0)
    assert report.weighted and not repeated.weighted
    for metric in CLASSIFICATION:
        np.testing.assert_allclose(report.by_group[metric], repeated.by_group[metric], rtol=0, atol=1e-12)
        assert report.overall[metric] == pytest.approx(repeated.overall[metric], abs=1e-12)
        assert report.disparities.loc[metric, "ratio"] == pytest.approx(repeated.disparities.loc[metric, "ratio"])
        table = report.by_group
        assert (table[f"{metric}_low"] <= table[metric]).all() and (table[metric] <= table[f"{metric}_high"]).all()
    np.testing.assert_array_equal(report.by_group["n"], [np.sum(s == g) for g in ("a", "b", "c")])
    np.testing.assert_allclose(report.by_group["weight"], [w[s == g].sum() for g in ("a", "b", "c")])
    assert report.ratio()["selection_rate"] == pytest.approx(
        fairopt.metrics.disparate_impact(y, X[:, -1], sensitive_features=s, sample_weight=w), abs=1e-12)
    assert "weighted by sample_weight" in report.to_markdown()
    rng = np.random.default_rng(6)
    pred = rng.normal(size=400)
    groups = rng.choice(["x", "y"], size=400)
    target = pred + rng.normal(size=400) * (1 + (groups == "x"))
    Xr, wr = np.column_stack([pred, pred]), rng.integers(0, 3, size=400)
    weighted = group_report(FixedRegressor(), Xr, target, groups, sample_weight=wr, n_bootstrap=0)
    plain = group_report(FixedRegressor(), np.repeat(Xr, wr, axis=0), np.repeat(target, wr), np.repeat(groups, wr),
                         n_bootstrap=0)
    for metric in REGRESSION:
        np.testing.assert_allclose(weighted.by_group[metric], plain.by_group[metric], rtol=1e-12)
    with pytest.raises(ValueError, match="sample_weight"):
        group_report(Fixed(), X, y, s, sample_weight=np.ones(3))


# ----------------------------------------------------------------------------- bootstrap
def test_intervals_contain_the_point_and_shrink_with_n():
    widths = {}
    for n in (600, 6000):
        X, y, s = synthetic(n, seed=1)
        report = group_report(Fixed(), X, y, s, n_bootstrap=400, seed=0)
        table = report.by_group
        for metric in CLASSIFICATION:
            assert (table[f"{metric}_low"] <= table[metric]).all() and (table[metric] <= table[f"{metric}_high"]).all()
            assert report.overall[f"{metric}_low"] <= report.overall[metric] <= report.overall[f"{metric}_high"]
        d = report.disparities
        assert (d["ratio_low"] <= d["ratio"]).all() and (d["ratio"] <= d["ratio_high"]).all()
        assert (d["difference_low"] <= d["difference"]).all() and (d["difference"] <= d["difference_high"]).all()
        widths[n] = (table["selection_rate_high"] - table["selection_rate_low"]).to_numpy()
    ratio = widths[600] / widths[6000]
    assert np.all((ratio > 2.3) & (ratio < 4.3))  # sqrt(10) = 3.16


def test_interval_width_matches_the_binomial_standard_error():
    """An independent check of the bootstrap: the 95% interval of a group rate is about
    +-1.96 sqrt(p (1 - p) / n_g)."""
    X, y, s = synthetic(4000, seed=2, groups=("a", "b"))
    report = group_report(Fixed(), X, y, s, n_bootstrap=1000, seed=3)
    for g, row in report.by_group.iterrows():
        p, n_g = row["selection_rate"], row["n"]
        expected = 2 * 1.96 * np.sqrt(p * (1 - p) / n_g)
        assert row["selection_rate_high"] - row["selection_rate_low"] == pytest.approx(expected, rel=0.15)


def test_bootstrap_is_reproducible_with_a_seed_and_stratified():
    X, y, s = synthetic(700, seed=4)
    first = group_report(Fixed(), X, y, s, n_bootstrap=300, seed=7)
    again = group_report(Fixed(), X, y, s, n_bootstrap=300, seed=7)
    other = group_report(Fixed(), X, y, s, n_bootstrap=300, seed=8)
    pd.testing.assert_frame_equal(first.by_group, again.by_group)
    pd.testing.assert_frame_equal(first.disparities, again.disparities)
    assert not first.by_group["selection_rate_low"].equals(other.by_group["selection_rate_low"])
    # resampling within groups: a group whose rows are all predicted positive stays at rate 1
    X[s == "a", -1] = 1
    report = group_report(Fixed(), X, y, s, n_bootstrap=200)
    # (its rows all share the outcome: the interval is the exact one of n events in n rows, not [1, 1])
    from scipy import stats

    n_a = int((s == "a").sum())
    assert report.by_group.loc["a", ["selection_rate_low", "selection_rate_high"]].tolist() == pytest.approx(
        [stats.beta.ppf(0.025, n_a, 1), 1.0])
    no_ci = group_report(Fixed(), X, y, s, n_bootstrap=0)
    assert no_ci.by_group["selection_rate_low"].isna().all() and np.isnan(no_ci.disparities["ratio_low"]).all()


def test_small_groups_get_nan_intervals_and_a_logged_warning(caplog):
    X, y, s = synthetic(400, seed=5)
    s = s.astype(object)
    s[:6] = "tiny"
    with caplog.at_level(logging.WARNING, logger="fairopt.report"):
        report = group_report(Fixed(), X, y, s, n_bootstrap=100)
    assert report.by_group.loc["tiny", "n"] == 6
    assert np.isnan(report.by_group.loc["tiny", ["selection_rate_low", "accuracy_high"]].to_numpy(float)).all()
    assert report.by_group.drop(index="tiny")["selection_rate_low"].notna().all()
    assert np.isnan(report.disparities.loc["selection_rate", "ratio_low"])  # the disparity involves the tiny group
    assert not np.isnan(report.disparities.loc["selection_rate", "ratio"])  # its point value is still given
    assert any("fewer than 10 rows" in r.getMessage() and "'tiny' (6)" in r.getMessage() for r in caplog.records)
    assert any("tiny" in note for note in report.notes)


# ----------------------------------------------------------------------------- groups
def test_intersections_of_several_attributes():
    X, y, s = synthetic(1200, seed=6)
    rng = np.random.default_rng(0)
    t = rng.choice(["u", "v"], size=len(y))
    frame = pd.DataFrame({"sex": s, "race": t})
    report = group_report(Fixed(), X, y, frame, n_bootstrap=50)
    labels = [f"sex={a}|race={b}" for a in ("a", "b", "c") for b in ("u", "v")]
    assert list(report.by_group.index) == labels and report.by_group.index.name == "sex|race"
    assert report.groups.loc["sex=b|race=v"].tolist() == ["b", "v"]
    combined = np.array([f"sex={a}|race={b}" for a, b in zip(s, t)])
    expected = brute_classification(X[:, -1], y, combined)
    np.testing.assert_allclose(report.by_group["tpr"].to_numpy(float), expected.loc[labels, "tpr"].to_numpy(float))
    # a 2-D array: columns named sensitive_0, sensitive_1
    arrays = group_report(Fixed(), X, y, np.column_stack([s, t]), n_bootstrap=0)
    assert arrays.by_group.index[0] == "sensitive_0=a|sensitive_1=u"
    np.testing.assert_array_equal(arrays.by_group["n"].to_numpy(), report.by_group["n"].to_numpy())


def test_sensitive_features_as_column_names_of_x():
    X, y, s = synthetic(500, seed=7)
    frame = pd.DataFrame({"noise": X[:, 0], "sex": s, "pred": X[:, -1]})
    one = group_report(Fixed(), frame, y, "sex", n_bootstrap=0)
    assert one.sensitive_names == ["sex"] and list(one.by_group.index) == ["a", "b", "c"]
    frame["grp"] = np.where(X[:, 0] > 0, "hi", "lo")
    frame = frame[["noise", "sex", "grp", "pred"]]
    two = group_report(Fixed(), frame, y, ["sex", "grp"], n_bootstrap=0)
    assert two.by_group.index[0] == "sex=a|grp=hi" and two.by_group["n"].sum() == 500


# ----------------------------------------------------------------------------- models
@pytest.fixture(scope="module")
def adult():
    frame, _ = fairopt.datasets.load_frame("adult")
    frame = frame.sample(n=2000, random_state=0).reset_index(drop=True)
    X = frame[["age", "education-num", "hours-per-week", "capital-gain"]].to_numpy(dtype=float)
    return frame, X, frame["income"].to_numpy(), frame[["sex"]]


def test_fair_classifier(adult):
    frame, X, y, S = adult
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FairnessWarning)
        clf = FairClassifier(("disparate_impact", "sex", 0.8), epochs=20).fit(X, y, sensitive_features=S)
    report = group_report(clf, X, y, S, n_bootstrap=100)
    pred = (clf.predict(X) == clf.classes_[1]).astype(float)
    sex = S["sex"].to_numpy()
    expected = brute_classification(pred, (y == clf.classes_[1]).astype(int), sex)
    np.testing.assert_allclose(report.by_group[list(CLASSIFICATION)].to_numpy(float),
                               expected[list(CLASSIFICATION)].to_numpy(float))
    assert report.positive == 1 and report.source == "FairClassifier"
    # threshold on the probability: 0.5 is the classifier's own decision; a higher one selects fewer
    half = group_report(clf, X, y, S, n_bootstrap=0, threshold=0.5)
    np.testing.assert_allclose(half.by_group["selection_rate"], report.by_group["selection_rate"])
    strict = group_report(clf, X, y, S, n_bootstrap=0, threshold=0.7)
    p = clf.predict_proba(X)[:, 1]
    assert strict.overall["selection_rate"] == pytest.approx((p > 0.7).mean())
    # string labels: the positive class is classes_[1]
    labels = np.where(y == 1, ">50K", "<=50K")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FairnessWarning)
        named = FairClassifier(epochs=20).fit(X, labels)
    text = group_report(named, X, labels, S, n_bootstrap=0)
    assert text.positive == ">50K"
    assert text.overall["selection_rate"] == pytest.approx((named.predict(X) == ">50K").mean())


def test_saved_model_and_torch_module(adult, tmp_path):
    data = fairopt.datasets.load("adult").subset(range(1500))
    model = fairopt.models.mlp(data.n_features, hidden=(4,), seed=1)
    fairopt.save(model, tmp_path / "model.pt", data=data)
    bundle = fairopt.load(tmp_path / "model.pt")
    assert isinstance(bundle, SavedModel)
    raw = data.frame
    # raw rows: the saved preprocessor encodes them; sex as a column name of the raw frame
    report = group_report(bundle, raw, raw["income"], "sex", n_bootstrap=50)
    with torch.no_grad():
        out = model(data.X).reshape(-1).numpy()
    pred = (out > 0).astype(float)
    expected = brute_classification(pred, raw["income"].to_numpy(), raw["sex"].to_numpy())
    np.testing.assert_allclose(report.by_group["selection_rate"].to_numpy(float),
                               expected["selection_rate"].to_numpy(float))
    assert report.source == "SavedModel" and report.task == "binary"
    # the torch module itself on the encoded tensor: task inferred from the 0/1 target
    direct = group_report(model, data.X, data.y.numpy(), raw["sex"], n_bootstrap=0)
    np.testing.assert_allclose(direct.by_group["selection_rate"], report.by_group["selection_rate"])
    assert model.training  # the mode is restored
    soft = group_report(model, data.X.numpy(), data.y.numpy(), raw["sex"], n_bootstrap=0, threshold=0.3)
    assert soft.overall["selection_rate"] == pytest.approx((1 / (1 + np.exp(-out)) > 0.3).mean())
    # regression from a torch module: more than two target values
    linear = torch.nn.Linear(data.n_features, 1)
    values = data.frame["age"].to_numpy(dtype=float)
    regression = group_report(linear, data.X, values, raw["sex"], n_bootstrap=0)
    with torch.no_grad():
        prediction = linear(data.X).reshape(-1).double().numpy()
    assert regression.task == "regression"
    assert regression.overall["mae"] == pytest.approx(np.abs(values - prediction).mean(), rel=1e-6)


def _threshold_row_model() -> tuple[torch.nn.Module, np.ndarray, np.ndarray, np.ndarray]:
    """A linear module and 40 rows of two groups (10 in "small") whose row 0 is within float32 rounding of the
    threshold: ``1 + 1e-8 - 1`` is 1e-8 in float64, 0 (class 0) in a float32 pass."""
    module = fairopt.models.linear(2, seed=0)
    with torch.no_grad():
        module[0].weight.copy_(torch.tensor([[1.0, 1.0]]))
        module[0].bias.fill_(-1.0)
    rng = np.random.default_rng(3)
    X = np.column_stack([np.ones(40), rng.choice([-1.0, 1.0], size=40)]).astype(np.float32)
    X[0, 1] = 1e-8
    s = np.where(np.arange(40) < 10, "small", "big")
    y = (rng.random(40) < 0.5).astype(int)
    return module, X, y, s


def test_a_saved_model_and_a_module_report_the_labels_predict_gives_within_float32_rounding(tmp_path):
    module, X, y, s = _threshold_row_model()
    with torch.no_grad():
        assert float(module(torch.from_numpy(X))[0]) <= 0.0  # the float32 pass puts row 0 in class 0
    fairopt.save(module, tmp_path / "m.fairopt")
    saved = fairopt.load(tmp_path / "m.fairopt")
    labels = saved.predict(X)
    assert labels[0] == 1  # predict (float64) puts it in class 1
    expected = {g: float((labels[s == g] == 1).mean()) for g in ("big", "small")}
    for model in (saved, module):
        report = group_report(model, X, y, s, n_bootstrap=0)
        assert report.by_group["selection_rate"].to_dict() == pytest.approx(expected, abs=0, rel=0)
        assert report.overall["accuracy"] == float((labels == y).mean())


def test_a_saved_models_pos_label_of_its_first_class_counts_the_rows_predicted_that_class(tmp_path):
    X, y, s = synthetic(400, seed=11)
    module = fairopt.models.linear(2, seed=1)
    words = np.where(y == 1, "approved", "denied")
    fairopt.save(module, tmp_path / "m.fairopt", metadata={"classes": ["denied", "approved"]})
    saved = fairopt.load(tmp_path / "m.fairopt")
    labels = saved.predict(X)
    proba = saved.predict_proba(X)
    for positive, column in (("approved", 1), ("denied", 0)):
        report = group_report(saved, X, words, s, pos_label=positive, n_bootstrap=0)
        assert report.positive == positive
        rates = {g: float((labels[s == g] == positive).mean()) for g in ("a", "b", "c")}
        assert report.by_group["selection_rate"].to_dict() == pytest.approx(rates, abs=0, rel=0)
        assert report.overall["accuracy"] == float((labels == words).mean())
        soft = group_report(saved, X, words, s, pos_label=positive, threshold=0.3, n_bootstrap=0)
        assert soft.overall["selection_rate"] == float((proba[:, column] > 0.3).mean())
    # without pos_label: the class whose logit it outputs, its classes_[1]
    assert group_report(saved, X, words, s, n_bootstrap=0).positive == "approved"


def test_a_saved_regressions_report_reads_the_predictions_of_its_predict(tmp_path):
    X, _, s = synthetic(300, seed=12)
    module = fairopt.models.linear(2, seed=2)
    with torch.no_grad():
        module[0].weight.copy_(torch.tensor([[0.1234567, 3.3333333]]))
        module[0].bias.fill_(10.987654)
    fairopt.save(module, tmp_path / "r.fairopt", metadata={"task": "regression"})
    saved = fairopt.load(tmp_path / "r.fairopt")
    values = np.linspace(0.0, 20.0, 300)
    prediction = saved.predict(X)
    report = group_report(saved, X, values, s, task="regression", n_bootstrap=0)
    expected = {g: float(prediction[s == g].mean()) for g in ("a", "b", "c")}
    assert report.by_group["mean_prediction"].to_dict() == pytest.approx(expected, rel=1e-15)


# ----------------------------------------------------------------------------- errors
def test_bad_inputs_raise_clear_errors():
    X, y, s = synthetic(300, seed=8)
    with pytest.raises(ValueError, match=r"y, sensitive_features: required \(got X without y or sensitive_features\)"):
        group_report(Fixed(), X)
    with pytest.raises(ValueError, match=r"got a FairData without y or sensitive_features.*fairopt.evaluate\(model, "
                                         r"data\)"):
        group_report(Fixed(), fairopt.datasets.load("adult").subset(np.arange(50)))
    with pytest.raises(ValueError, match=r"sensitive_features has 299 rows, X and y have 300"):
        group_report(Fixed(), X, y, s[:-1])
    with pytest.raises(ValueError, match=r"X has 300 rows, y has 298"):
        group_report(Fixed(), X, y[:-2], s)
    with pytest.raises(ValueError, match="missing value"):
        group_report(Fixed(), X, y, np.where(np.arange(300) == 5, None, s))
    with pytest.raises(ValueError, match=r"missing value"):
        group_report(Fixed(), X, y, np.where(np.arange(300) == 5, np.nan, (s == "a").astype(float)))
    with pytest.raises(ValueError, match="binary y; got 3 distinct values"):
        group_report(Fixed(), X, np.arange(300) % 3, s, task="binary")
    frame = pd.DataFrame({"x": X[:, 0], "sex": s, "pred": X[:, 1]})
    with pytest.raises(ValueError, match=r"unknown column\(s\) \['race'\] of X; X has the columns \['x', 'sex', 'pred'\]"):
        group_report(Fixed(), frame, y, ["sex", "race"])
    with pytest.raises(ValueError, match="need X to be a pandas DataFrame"):
        group_report(Fixed(), X, y, "sex")
    with pytest.raises(ValueError, match="a single group"):
        group_report(Fixed(), X, y, np.zeros(300))
    with pytest.raises(ValueError, match="threshold: expected a probability"):
        group_report(Fixed(), X, y, s, threshold=1.5)
    with pytest.raises(ValueError, match="has no predict_proba"):
        group_report(Fixed(), X, y, s, threshold=0.5)
    with pytest.raises(ValueError, match="expected a fitted estimator with predict"):
        group_report(object(), X, y, s)
    with pytest.raises(ValueError, match="confidence"):
        group_report(Fixed(), X, y, s, confidence=1.0)
    with pytest.raises(ValueError, match="n_bootstrap"):
        group_report(Fixed(), X, y, s, n_bootstrap=-1)
    with pytest.raises(ValueError, match="code y as 0/1 or pass pos_label"):
        group_report(torch.nn.Linear(2, 1), torch.zeros(300, 2), np.where(y == 1, "yes", "no"), s)
    with pytest.raises(ValueError, match="cannot tell from y"):
        group_report(torch.nn.Linear(2, 1), torch.zeros(300, 2), y + 1, s)


def test_undefined_rates_are_nan_not_a_crash():
    X, y, s = synthetic(300, seed=9)
    y[s == "a"] = 0  # group a has no positives: its TPR is undefined
    report = group_report(Fixed(), X, y, s, n_bootstrap=50)
    assert np.isnan(report.by_group.loc["a", "tpr"]) and not np.isnan(report.by_group.loc["b", "tpr"])
    assert np.isnan(report.disparities.loc["tpr", "ratio"]) and pd.isna(report.disparities.loc["tpr", "group_min"])
    assert any("tpr is undefined" in note for note in report.notes)
    X[:, -1] = 0  # nobody selected: the selection-rate ratio is 0/0
    nobody = group_report(Fixed(), X, y, s, n_bootstrap=0)
    assert np.isnan(nobody.disparities.loc["selection_rate", "ratio"])
    assert nobody.disparities.loc["selection_rate", "difference"] == 0
    assert any("0/0" in note for note in nobody.notes)


# ----------------------------------------------------------------------------- output
def test_markdown_and_repr():
    X, y, s = synthetic(600, seed=10)
    t = np.where(X[:, 0] > 0, "p", "q")
    report = group_report(Fixed(), X, y, pd.DataFrame({"s": s, "t": t}), n_bootstrap=100)
    text = report.to_markdown(digits=2)
    lines = text.splitlines()
    assert lines[2].startswith("| s\\|t | n | selection_rate | tpr | fpr | accuracy |")
    assert "| s=a\\|t=p |" in text and "| overall | 600 |" in text
    row = report.by_group.loc["s=a|t=p"]
    assert (f"{row['selection_rate']:.2f} [{row['selection_rate_low']:.2f}, {row['selection_rate_high']:.2f}]"
            in text)
    assert "| metric | ratio (min/max) | difference (max - min) |" in text
    assert "95% percentile bootstrap" in text
    # every table row has the same number of unescaped cells as its header
    for block in text.split("\n\n"):
        rows = [r for r in block.splitlines() if r.startswith("|")]
        if rows:
            counts = {r.replace("\\|", "").count("|") for r in rows}
            assert len(counts) == 1
    assert "no confidence intervals" in group_report(Fixed(), X, y, s, n_bootstrap=0).to_markdown()
    assert repr(report).startswith("GroupReport(task='binary', groups=6 of ['s', 't'], n=600")


def test_plot_returns_the_axes():
    X, y, s = synthetic(400, seed=11)
    report = group_report(Fixed(), X, y, s, n_bootstrap=50)
    ax = Figure().subplots()  # no pyplot: no backend involved
    assert report.plot(ax=ax) is ax
    assert len(ax.patches) == 3 and ax.get_ylabel() == "selection_rate"
    assert report.plot(ax=Figure().subplots(), metric="tpr").get_ylabel() == "tpr"
    with pytest.raises(ValueError, match="metric: expected one of"):
        report.plot(ax=ax, metric="rmse")
    import matplotlib.pyplot as plt

    made = report.plot(metric="accuracy")
    assert isinstance(made, Axes)
    plt.close(made.figure)


def test_a_disparity_outside_its_own_interval_is_explained():
    """Three groups of 20 rows with the same selection rate: the ratio is 1 and the difference 0, while the
    resamples' smallest and largest group rates drift apart, so both intervals exclude the value; the
    Markdown says why. Groups far apart keep their disparities inside and get no such note."""
    s = np.repeat(["a", "b", "c"], 20)
    pred = np.tile(np.repeat([1, 0], 10), 3)
    X, y = np.column_stack([np.zeros(60), pred]), pred
    report = group_report(Fixed(), X, y, s, n_bootstrap=300, seed=0)
    rate = report.disparities.loc["selection_rate"]
    assert rate["ratio"] == 1.0 and rate["ratio_high"] < 1.0 and rate["difference_low"] > 0.0
    assert "selection_rate ratio, selection_rate difference: the value lies outside" in report.to_markdown()
    X, y, s = synthetic(3000, seed=1)
    assert "lies outside its percentile interval" not in group_report(Fixed(), X, y, s, n_bootstrap=200,
                                                                      seed=0).to_markdown()


def test_a_group_without_an_interval_is_drawn_hatched_not_as_an_exact_value():
    """A group below min_group_size has no bootstrap interval: its bar is hatched and gets no error bar
    (it had a zero-width one, which reads as an exact value)."""
    X, y, s = synthetic(400, seed=11)
    report = group_report(Fixed(), X, y, s, n_bootstrap=50, min_group_size=10_000)
    ax = Figure().subplots()
    report.plot(ax=ax)
    bars = ax.patches[:3]
    assert all(bar.get_hatch() == "//" for bar in bars)
    assert not ax.collections  # no error bars at all
    full = group_report(Fixed(), X, y, s, n_bootstrap=50).plot(ax=Figure().subplots())
    assert not any(bar.get_hatch() for bar in full.patches) and len(full.collections) == 1


def test_an_unused_category_of_a_sensitive_column_is_left_out_with_a_logged_warning(caplog):
    """A categorical column with a code list's unused level: left out of the report and the metrics, as the
    estimators' fit and evaluate leave it out (it was an error here only)."""
    X, y, s = synthetic(300, seed=2)
    categories = pd.Series(pd.Categorical(s, categories=["a", "b", "c", "d"]), name="g")
    with caplog.at_level(logging.WARNING, logger="fairopt.sensitive_groups"):
        report = group_report(Fixed(), X, y, categories, n_bootstrap=0)
    assert list(report.by_group.index) == ["a", "b", "c"]
    assert any("['d'] of 'g' have 0 rows" in r.getMessage() for r in caplog.records)
    plain = group_report(Fixed(), X, y, s, n_bootstrap=0)
    pd.testing.assert_frame_equal(report.by_group, plain.by_group, check_index_type=False, check_names=False)
    assert fairopt.metrics.demographic_parity_ratio(y, X[:, -1], sensitive_features=categories) == pytest.approx(
        fairopt.metrics.demographic_parity_ratio(y, X[:, -1], sensitive_features=s))


def test_the_legend_draws_each_kind_of_bar_as_it_is_drawn_when_the_first_group_is_small():
    """The metric's legend entry is a plain bar and "no interval (small group)" a hatched one, whichever group
    comes first (the entry was taken from the first bar, hatched when that group was small)."""
    X, y, s = synthetic(400, seed=12)
    s = s.astype(object)
    s[:6] = "a_tiny"  # sorts first
    ax = group_report(Fixed(), X, y, s, n_bootstrap=50).plot(ax=Figure().subplots())
    legend = ax.get_legend()
    entries = dict(zip((t.get_text() for t in legend.get_texts()), legend.legend_handles))
    assert not entries["selection_rate"].get_hatch()
    assert entries["no interval (small group)"].get_hatch() == "//"


def test_a_group_whose_rows_all_share_the_outcome_gets_the_exact_interval_not_zero_width():
    """0 of 25 selected: the percentile bootstrap gives [0, 0] (every replicate is 0), which claims certainty;
    the report gives the Clopper-Pearson interval [0, 0.137] (with weights at Kish's effective size) and no
    interval for the metric's disparities, with a note."""
    from scipy import stats

    rng = np.random.default_rng(13)
    n = 600
    s = np.where(np.arange(n) < 25, "small", np.where(np.arange(n) < 300, "b", "c"))
    pred = (rng.random(n) < 0.5).astype(int)
    pred[:25] = 0
    y = (rng.random(n) < 0.5).astype(int)
    X = np.column_stack([rng.normal(size=n), pred])
    report = group_report(Fixed(), X, y, s, n_bootstrap=200)
    row = report.by_group.loc["small"]
    assert row["selection_rate_low"] == 0 and row["selection_rate_high"] == pytest.approx(
        stats.beta.ppf(0.975, 1, 25))
    assert np.isnan(report.disparities.loc["selection_rate", ["ratio_low", "difference_high"]].to_numpy(float)).all()
    assert report.disparities.loc["selection_rate", "ratio"] == 0
    assert any("exact Clopper-Pearson" in note and "'small' (25)" in note for note in report.notes)
    assert report.by_group.loc["b", "selection_rate_high"] > report.by_group.loc["b", "selection_rate_low"]
    weights = np.ones(n)
    weights[:5] = 21.0  # 5 rows carry most of the small group's weight: n_eff = 125^2 / (5 * 441 + 20) = 7.07
    weighted = group_report(Fixed(), X, y, s, n_bootstrap=200, sample_weight=weights)
    n_eff = 125.0 ** 2 / (5 * 21.0 ** 2 + 20)
    assert weighted.by_group.loc["small", "selection_rate_high"] == pytest.approx(stats.beta.ppf(0.975, 1, n_eff))
    # a metric on real numbers (a regressor's error) keeps its bootstrap interval
    reg = group_report(FixedRegressor(), X, y.astype(float), s, n_bootstrap=50)
    assert not any("Clopper" in note for note in reg.notes)


def test_a_default_positive_class_of_text_labels_is_warned_and_reordered_rows_too():
    """A scikit-learn classifier of text labels: the report counts classes_[1] as the other measures do, and
    says so (a selection rate of 'rejected' read as one of 'approved' would invert the report); a sensitive
    Series whose index is X's in another order is paired by position, with the estimators' warning."""
    from sklearn.linear_model import LogisticRegression

    rng = np.random.default_rng(8)
    X = pd.DataFrame(rng.normal(size=(300, 2)), columns=["u", "v"])
    y = pd.Series(np.where(X["u"] + rng.normal(size=300) > 0, "approved", "rejected"))
    s = pd.Series(rng.choice(["a", "b"], size=300), name="g")
    model = LogisticRegression().fit(X, y)
    with pytest.warns(FairnessWarning, match="pos_label not given: the positive class is 'rejected'"):
        report = group_report(model, X, y, s, n_bootstrap=0)
    expected = {g: float((model.predict(X)[s == g] == "rejected").mean()) for g in ("a", "b")}
    assert report.positive == "rejected" and dict(report.by_group["selection_rate"]) == pytest.approx(expected)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert group_report(model, X, y, s, n_bootstrap=0, pos_label="approved").positive == "approved"
    shuffled = s.sample(frac=1.0, random_state=1)
    with pytest.warns(FairnessWarning, match="sensitive_features: its index holds the labels of X's index"):
        group_report(model, X, y, shuffled, n_bootstrap=0, pos_label="approved")
