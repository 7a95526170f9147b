"""fairopt.metrics: the fairness metrics against brute force, and their scikit-learn
scorers receiving each fold's sensitive features through metadata routing."""

from __future__ import annotations

import warnings

import numpy as np
import pandas as pd
import pytest
import sklearn
from sklearn.linear_model import LogisticRegression
from sklearn.model_selection import GridSearchCV, KFold, cross_validate

import fairopt
from fairopt import metrics
from fairopt.exceptions import FairnessWarning, UndefinedMeasureWarning


def data(n: int = 600, seed: int = 0, groups=("a", "b", "c")):
    rng = np.random.default_rng(seed)
    s = rng.choice(np.array(groups), size=n)
    shift = np.searchsorted(np.array(groups), s) * 0.5
    X = np.column_stack([rng.normal(size=n) + shift, rng.normal(size=n)])
    y = (X[:, 0] + rng.normal(size=n) > 0.5).astype(int)
    return X, y, s


def rates(pred, y, s):
    """Brute force: per group (selection rate, TPR, FPR)."""
    out = {}
    for g in np.unique(s):
        m = s == g
        out[g] = (pred[m].mean(), pred[m & (y == 1)].mean(), pred[m & (y == 0)].mean())
    return np.array(list(out.values()))


def brute(name, y, pred, s):
    r = rates(pred, y, s)
    sel, tpr, fpr = r[:, 0], r[:, 1], r[:, 2]
    return {
        "disparate_impact": sel.min() / sel.max(),
        "demographic_parity_ratio": sel.min() / sel.max(),
        "demographic_parity_difference": sel.max() - sel.min(),
        "equal_opportunity_ratio": tpr.min() / tpr.max(),
        "equal_opportunity_difference": tpr.max() - tpr.min(),
        "equalized_odds_ratio": min(tpr.min() / tpr.max(), fpr.min() / fpr.max()),
        "equalized_odds_difference": max(tpr.max() - tpr.min(), fpr.max() - fpr.min()),
    }[name]


NAMES = ["disparate_impact", "demographic_parity_ratio", "demographic_parity_difference", "equal_opportunity_ratio",
         "equal_opportunity_difference", "equalized_odds_ratio", "equalized_odds_difference"]


@pytest.mark.parametrize("name", NAMES)
def test_metrics_match_brute_force(name):
    X, y, s = data()
    pred = (X[:, 0] > 0.6).astype(int)
    function = getattr(metrics, name)
    assert function(y, pred, sensitive_features=s) == pytest.approx(brute(name, y, pred, s), abs=1e-12)
    # string labels with pos_label, and pandas input
    yt, yp = np.where(y == 1, "yes", "no"), np.where(pred == 1, "yes", "no")
    assert function(pd.Series(yt), yp, sensitive_features=pd.Series(s), pos_label="yes") == pytest.approx(
        brute(name, y, pred, s), abs=1e-12)
    # the larger label is the positive class by default ("yes" > "no"), with the estimators' note
    with pytest.warns(FairnessWarning, match="pos_label not given: the positive class is 'yes'"):
        assert function(yt, yp, sensitive_features=s) == pytest.approx(brute(name, y, pred, s), abs=1e-12)
    # intersections: a DataFrame of two attributes is the same as their combined labels
    t = np.where(X[:, 1] > 0, "p", "q")
    combined = np.array([f"{a}{b}" for a, b in zip(s, t)])
    assert function(y, pred, sensitive_features=pd.DataFrame({"s": s, "t": t})) == pytest.approx(
        brute(name, y, pred, combined), abs=1e-12)
    assert fairopt.metrics.fairness_score(y, pred, measure=name, sensitive_features=s) == function(
        y, pred, sensitive_features=s)


def test_metric_conventions_and_errors():
    X, y, s = data(300, seed=1)
    nobody = np.zeros_like(y)
    with pytest.warns(UndefinedMeasureWarning, match="disparate_impact"):
        assert np.isnan(metrics.disparate_impact(y, nobody, sensitive_features=s))
    with pytest.warns(UndefinedMeasureWarning, match="equalized_odds_ratio"):
        assert np.isnan(metrics.equalized_odds_ratio(y, nobody, sensitive_features=s))
    assert metrics.demographic_parity_difference(y, nobody, sensitive_features=s) == 0.0
    y_missing = y.copy()
    y_missing[s == "b"] = 0
    with pytest.raises(ValueError, match=r"group\(s\) \['b'\] have no rows with y_true = 1"):
        metrics.equal_opportunity_ratio(y_missing, y, sensitive_features=s)
    with pytest.raises(ValueError, match="binary labels; got 3"):
        metrics.disparate_impact(y, np.arange(300) % 3, sensitive_features=s)
    with pytest.raises(ValueError, match="y_true has 300 rows, y_pred has 299"):
        metrics.disparate_impact(y, y[:-1], sensitive_features=s)
    with pytest.raises(ValueError, match="sensitive_features has 299 rows"):
        metrics.disparate_impact(y, y, sensitive_features=s[:-1])
    with pytest.raises(ValueError, match="enable metadata routing"):
        metrics.fairness_score(y, y, measure="disparate_impact")
    with pytest.raises(ValueError, match=r"pos_label: 'Yes' is not a label of y_true and y_pred"):
        metrics.disparate_impact(np.where(y == 1, "yes", "no"), np.where(y == 1, "yes", "no"),
                                 sensitive_features=s, pos_label="Yes")
    with pytest.raises(ValueError, match="measure: expected one of"):
        metrics.make_scorer("accuracy")
    with pytest.raises(ValueError, match="greater_is_better: required"):
        metrics.make_scorer(metrics.disparate_impact)


def test_scorer_signs_and_request():
    assert not sklearn.get_config()["enable_metadata_routing"]
    ratio = metrics.make_scorer("disparate_impact")
    difference = metrics.make_scorer("equalized_odds_difference")
    assert not sklearn.get_config()["enable_metadata_routing"]  # make_scorer leaves the setting alone
    assert ratio._sign == 1 and difference._sign == -1
    assert metrics.make_scorer("demographic_parity_difference", greater_is_better=True)._sign == 1
    X, y, s = data(400, seed=2)
    model = LogisticRegression().fit(X, y)
    pred = model.predict(X)
    with sklearn.config_context(enable_metadata_routing=True):
        assert ratio(model, X, y, sensitive_features=s) == pytest.approx(brute("disparate_impact", y, pred, s))
        assert difference(model, X, y, sensitive_features=s) == pytest.approx(
            -brute("equalized_odds_difference", y, pred, s))
        custom = metrics.make_scorer(metrics.equal_opportunity_ratio, greater_is_better=True)
        assert custom(model, X, y, sensitive_features=s) == pytest.approx(
            brute("equal_opportunity_ratio", y, pred, s))


def test_grid_search_routes_each_fold_slice_to_the_scorer():
    X, y, s = data(900, seed=3)
    grid = {"C": [0.01, 1.0]}
    cv = KFold(3)
    scoring = {"acc": "accuracy", "di": metrics.make_scorer("disparate_impact"),
               "eod": metrics.make_scorer("equalized_odds_difference"),
               "eor": metrics.make_scorer("equal_opportunity_ratio")}
    with sklearn.config_context(enable_metadata_routing=True):
        search = GridSearchCV(LogisticRegression(), grid, scoring=scoring, refit="di", cv=cv)
        search.fit(X, y, sensitive_features=s)
        for c_index, C in enumerate(grid["C"]):
            for fold, (train, test) in enumerate(cv.split(X)):
                pred = LogisticRegression(C=C).fit(X[train], y[train]).predict(X[test])
                results = search.cv_results_
                assert results[f"split{fold}_test_di"][c_index] == pytest.approx(
                    brute("disparate_impact", y[test], pred, s[test]), abs=1e-12)
                assert results[f"split{fold}_test_eod"][c_index] == pytest.approx(
                    -brute("equalized_odds_difference", y[test], pred, s[test]), abs=1e-12)
                assert results[f"split{fold}_test_eor"][c_index] == pytest.approx(
                    brute("equal_opportunity_ratio", y[test], pred, s[test]), abs=1e-12)
                assert results[f"split{fold}_test_acc"][c_index] == pytest.approx((pred == y[test]).mean())
        assert search.best_params_["C"] == grid["C"][int(np.argmax(search.cv_results_["mean_test_di"]))]
        # cross_validate routes through params= the same way (a DataFrame of two attributes)
        frame = pd.DataFrame({"s": s, "t": np.where(X[:, 1] > 0, "p", "q")})
        scores = cross_validate(LogisticRegression(), X, y, cv=cv, scoring={"dpd": metrics.make_scorer(
            "demographic_parity_difference")}, params={"sensitive_features": frame})
        for fold, (train, test) in enumerate(cv.split(X)):
            pred = LogisticRegression().fit(X[train], y[train]).predict(X[test])
            cells = (frame["s"] + frame["t"]).to_numpy()[test]
            assert scores["test_dpd"][fold] == pytest.approx(-brute("demographic_parity_difference", y[test], pred,
                                                                     cells), abs=1e-12)
    assert not sklearn.get_config()["enable_metadata_routing"]


def test_without_routing_the_scorer_says_how_to_route():
    X, y, s = data(300, seed=4)
    search = GridSearchCV(LogisticRegression(), {"C": [1.0]}, scoring={"di": metrics.make_scorer("disparate_impact")},
                          refit=False, cv=KFold(3), error_score="raise")
    with pytest.raises(ValueError, match="enable metadata routing"):
        search.fit(X, y)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        # the default error_score turns the failure into NaN scores
        quiet = GridSearchCV(LogisticRegression(), {"C": [1.0]}, cv=KFold(3), refit=False,
                             scoring={"di": metrics.make_scorer("disparate_impact")}).fit(X, y)
    assert np.isnan(quiet.cv_results_["mean_test_di"]).all()


def test_the_scorer_counts_the_positive_class_the_classifier_was_trained_for():
    """A classifier trained with pos_label="approved" (the first of the sorted labels): the scorer measures
    predicting "approved", as the constraints counted, also at the end of a Pipeline and in a search; a
    scorer given pos_label keeps it."""
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    X, y, s = data(600, seed=5, groups=("a", "b"))
    labels = np.where(y == 1, "approved", "rejected")
    scorer = metrics.make_scorer("disparate_impact")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FairnessWarning)
        clf = fairopt.FairClassifier(epochs=30, pos_label="approved").fit(X, labels)
        pipe = make_pipeline(StandardScaler(), fairopt.FairClassifier(epochs=30, pos_label="approved")).fit(X, labels)
    assert metrics.fitted_pos_label(clf) == "approved" and metrics.fitted_pos_label(pipe) == "approved"
    for model in (clf, pipe):
        approved = (model.predict(X) == "approved").astype(int)
        with sklearn.config_context(enable_metadata_routing=True), warnings.catch_warnings():
            warnings.simplefilter("error", FairnessWarning)  # no default-class note: the estimator says which
            assert scorer(model, X, labels, sensitive_features=s) == pytest.approx(
                brute("disparate_impact", y, approved, s), abs=1e-12)
            given = metrics.make_scorer("disparate_impact", pos_label="rejected")
            assert given(model, X, labels, sensitive_features=s) == pytest.approx(
                brute("disparate_impact", y, 1 - approved, s), abs=1e-12)
    assert metrics.fitted_pos_label(LogisticRegression()) is None
    # inside the fitted wrappers of scikit-learn's meta-estimators too (they were scored on classes_[1])
    from sklearn.calibration import CalibratedClassifierCV
    from sklearn.model_selection import FixedThresholdClassifier

    y01 = np.where(y == 1, 0, 1)  # the positive class 0 sorts first
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        fixed = FixedThresholdClassifier(fairopt.FairClassifier(epochs=30, pos_label=0), threshold=0.5,
                                         pos_label=0).fit(X, y01)
        calibrated = CalibratedClassifierCV(fairopt.FairClassifier(epochs=30, pos_label=0), cv=2).fit(X, y01)
    for model in (fixed, calibrated):
        assert metrics.fitted_pos_label(model) == 0
        with sklearn.config_context(enable_metadata_routing=True):
            assert scorer(model, X, y01, sensitive_features=s) == pytest.approx(
                brute("disparate_impact", y01, (model.predict(X) == 0).astype(int), s), abs=1e-12)


def test_a_scorer_reads_sensitive_columns_named_like_fit_takes_them():
    """``sensitive_features="s"`` (a column of the DataFrame X, as fit takes it) routed to the scorer: each
    fold's DI is that of the column's values in the fold's rows (it was NaN with an error about X)."""
    from sklearn.compose import make_column_transformer
    from sklearn.pipeline import make_pipeline

    X, y, s = data(900, seed=6)
    frame = pd.DataFrame({"x0": X[:, 0], "x1": X[:, 1], "s": s})
    model = make_pipeline(make_column_transformer(("passthrough", ["x0", "x1"])), LogisticRegression())
    cv = KFold(3)
    with sklearn.config_context(enable_metadata_routing=True):
        scores = cross_validate(model, frame, y, cv=cv, scoring={"di": metrics.make_scorer("disparate_impact")},
                                params={"sensitive_features": "s"}, error_score="raise")
    for fold, (train, test) in enumerate(cv.split(X)):
        pred = LogisticRegression().fit(X[train], y[train]).predict(X[test])
        assert scores["test_di"][fold] == pytest.approx(brute("disparate_impact", y[test], pred, s[test]), abs=1e-12)


def test_a_scorer_measures_the_columns_it_names_of_the_routed_features():
    """A fit bounding two attributes routes both; ``sensitive="a"`` scores over a's groups (not the
    intersections), checked by brute force on each fold; a name that is not routed is an error."""
    X, y, s = data(900, seed=7)
    other = np.where(np.arange(len(y)) % 2 == 0, "u", "v")
    routed = pd.DataFrame({"a": s, "b": other})
    cv = KFold(3)
    with sklearn.config_context(enable_metadata_routing=True):
        scoring = {"a": metrics.make_scorer("disparate_impact", sensitive="a"),
                   "both": metrics.make_scorer("disparate_impact")}
        scores = cross_validate(LogisticRegression(), X, y, cv=cv, scoring=scoring,
                                params={"sensitive_features": routed}, error_score="raise")
        with pytest.raises(ValueError, match=r"measures \['c'\], but the sensitive features it was given hold"):
            metrics.make_scorer("disparate_impact", sensitive="c")(LogisticRegression().fit(X, y), X, y,
                                                                    sensitive_features=routed)
    for fold, (train, test) in enumerate(cv.split(X)):
        pred = LogisticRegression().fit(X[train], y[train]).predict(X[test])
        cells = np.char.add(s[test].astype(str), other[test])
        assert scores["test_a"][fold] == pytest.approx(brute("disparate_impact", y[test], pred, s[test]), abs=1e-12)
        assert scores["test_both"][fold] == pytest.approx(brute("disparate_impact", y[test], pred, cells), abs=1e-12)


def test_measures_of_predictions_alone_take_rows_without_targets():
    """A production batch has no targets yet: disparate impact and the demographic-parity difference need
    none; the label-conditioned measures refuse y_true=None instead of reading the predictions as labels."""
    X, y, s = data(300, seed=8)
    pred = LogisticRegression().fit(X, y).predict(X)
    assert metrics.disparate_impact(None, pred, sensitive_features=s) == metrics.disparate_impact(
        y, pred, sensitive_features=s) == pytest.approx(brute("disparate_impact", y, pred, s), abs=1e-12)
    assert metrics.demographic_parity_difference(None, pred, sensitive_features=s) == pytest.approx(
        metrics.demographic_parity_difference(y, pred, sensitive_features=s), abs=1e-15)
    for measure in (metrics.equal_opportunity_ratio, metrics.equalized_odds_difference):
        with pytest.raises(ValueError, match="y_true: required"):
            measure(None, pred, sensitive_features=s)
    with pytest.raises(ValueError, match=r"^y: required \(got X without y\).*disparate_impact\(None"):
        fairopt.group_report(LogisticRegression().fit(X, y), X, None, s)
    with pytest.raises(ValueError, match="'sensitive_features' has a single group|has a single group"):
        fairopt.group_report(LogisticRegression().fit(X, y), X, y, np.full(len(y), "a"))


@pytest.mark.parametrize("name", NAMES)
def test_weighted_metrics_equal_the_metric_of_repeated_rows(name):
    """Integer weights count each row that many times (weight 0 drops it): the weighted measure is the
    unweighted measure of the repeated rows, and fairlearn's weighted measure where it has the name."""
    X, y, s = data(500, seed=4)
    pred = (X[:, 0] > 0.6).astype(int)
    w = np.random.default_rng(4).integers(0, 4, size=y.size)
    function = getattr(metrics, name)
    expected = brute(name, np.repeat(y, w), np.repeat(pred, w), np.repeat(s, w))
    assert function(y, pred, sensitive_features=s, sample_weight=w) == pytest.approx(expected, abs=1e-12)
    assert fairopt.metrics.fairness_score(y, pred, measure=name, sensitive_features=s,
                                          sample_weight=w) == pytest.approx(expected, abs=1e-12)
    # a constant weight changes nothing
    assert function(y, pred, sensitive_features=s, sample_weight=2.5) == pytest.approx(
        function(y, pred, sensitive_features=s), abs=1e-12)
    fairlearn_metrics = pytest.importorskip("fairlearn.metrics")
    if hasattr(fairlearn_metrics, name):
        real = np.random.default_rng(5).uniform(0.1, 3.0, size=y.size)
        assert function(y, pred, sensitive_features=s, sample_weight=real) == pytest.approx(
            getattr(fairlearn_metrics, name)(y, pred, sensitive_features=s, sample_weight=real), abs=1e-12)


def test_weighted_metrics_reject_bad_weights_and_groups_without_weight():
    X, y, s = data(300, seed=6)
    pred = (X[:, 0] > 0.6).astype(int)
    with pytest.raises(ValueError, match="sample_weight"):
        metrics.disparate_impact(y, pred, sensitive_features=s, sample_weight=np.ones(5))
    with pytest.raises(ValueError, match="sample_weight"):
        metrics.disparate_impact(y, pred, sensitive_features=s, sample_weight=-np.ones(y.size))
    w = np.where(s == "a", 0.0, 1.0)
    with pytest.raises(ValueError, match="sample_weight: group 'a'.*positive weight"):
        metrics.disparate_impact(y, pred, sensitive_features=s, sample_weight=w)
    with pytest.raises(ValueError, match=r"\['a'\] have no rows of positive weight with y_true = 1"):
        metrics.equal_opportunity_ratio(y, pred, sensitive_features=s, sample_weight=w)


def test_a_scorer_takes_routed_sample_weight_when_it_requests_it():
    X, y, s = data(600, seed=7)
    w = np.random.default_rng(7).integers(1, 4, size=y.size)
    cv = KFold(3)
    scorer = metrics.make_scorer("demographic_parity_difference")
    with sklearn.config_context(enable_metadata_routing=True):
        scorer.set_score_request(sample_weight=True)  # sensitive_features stay requested
        model = LogisticRegression().set_fit_request(sample_weight=False)  # the weights are for scoring only
        scores = cross_validate(model, X, y, cv=cv, scoring={"dpd": scorer},
                                params={"sensitive_features": s, "sample_weight": w})
    for fold, (train, test) in enumerate(cv.split(X)):
        pred = LogisticRegression().fit(X[train], y[train]).predict(X[test])
        expected = brute("demographic_parity_difference", np.repeat(y[test], w[test]), np.repeat(pred, w[test]),
                         np.repeat(s[test], w[test]))
        assert scores["test_dpd"][fold] == pytest.approx(-expected, abs=1e-12)


def test_reordered_pandas_arguments_are_warned_and_spaced_labels_get_a_hint():
    X, y, s = data(300, seed=9)
    pred = (X[:, 0] > 0.6).astype(int)
    y_series, s_series = pd.Series(y), pd.Series(s)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        metrics.disparate_impact(y_series, pred, sensitive_features=s_series)  # aligned: no warning
    with pytest.warns(FairnessWarning, match="sensitive_features: its index holds the labels of y_true's index"):
        metrics.disparate_impact(y_series, pred, sensitive_features=s_series.sample(frac=1.0, random_state=0))
    spaced = np.where(y == 1, " >50K", " <=50K")
    with pytest.raises(ValueError, match="did you mean ' >50K'"):
        metrics.disparate_impact(spaced, spaced, sensitive_features=s, pos_label=">50K")
