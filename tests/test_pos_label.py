"""FairClassifier's ``pos_label``: which class the constraints count as favourable.

Text labels sort alphabetically, so without ``pos_label`` the labels "approved"/"rejected"
make "rejected" the positive class and a disparate-impact bound constrains rejection rates.
These tests fit on 2,000 rows of the embedded Adult (income 1 -> "approved") and check the
realised rates of the hard predictions by hand, with margins.
"""

from __future__ import annotations

import copy
import warnings

import numpy as np
import pytest
import torch
from scipy.special import expit

import fairopt
from fairopt.data.encoding import positive_class
from fairopt.estimators import FairClassifier, FairRegressor
from fairopt.exceptions import FairnessWarning
from fairopt.inputs import encoded_inputs
from fairopt.persistence.format import checksum
from fairopt.training import float64_outputs

pytestmark = pytest.mark.usefixtures("one_torch_thread")

DELTA = 0.8
FEATURES = ["age", "education-num", "hours-per-week", "capital-gain", "capital-loss"]


@pytest.fixture(scope="module")
def loans():
    """2,000 rows of Adult: numeric X, text labels "approved" (income > 50K) / "rejected",
    the sensitive feature sex."""
    frame, _ = fairopt.datasets.load_frame("adult")
    frame = frame.sample(n=2000, random_state=0)
    y = np.where(frame["income"].to_numpy() == 1, "approved", "rejected").astype(object)
    return frame[FEATURES], y, frame[["sex"]]


def _fit(X, y, S, **params):
    """Fit a DI-constrained classifier; returns it and the FairnessWarnings of the fit."""
    clf = FairClassifier(("disparate_impact", "sex", DELTA), epochs=50, **params)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        clf.fit(X, y, sensitive_features=S)
    return clf, [w for w in caught if issubclass(w.category, FairnessWarning)]


def _pos_label_warnings(caught):
    return [w for w in caught if "pos_label" in str(w.message)]


def _realised_di(pred, groups, label):
    """min/max over the groups of the rate of predicting ``label``."""
    rates = [np.mean(pred[groups == g] == label) for g in np.unique(groups)]
    return min(rates) / max(rates)


@pytest.fixture(scope="module")
def approved(loans):
    X, y, S = loans
    return _fit(X, y, S, pos_label="approved")


@pytest.fixture(scope="module")
def by_default(loans):
    X, y, S = loans
    return _fit(X, y, S)


def test_pos_label_bounds_the_rates_of_the_named_class(loans, approved, by_default):
    X, y, S = loans
    clf, caught = approved
    assert _pos_label_warnings(caught) == []
    assert clf.pos_label_ == "approved"
    assert clf.classes_.tolist() == ["approved", "rejected"]  # sorted, as in scikit-learn
    groups = S["sex"].to_numpy()
    assert _realised_di(clf.predict(X), groups, "approved") >= DELTA - 0.01
    # without pos_label the same bound holds on the rates of "rejected", not of "approved"
    default, _ = by_default
    assert default.pos_label_ == "rejected"
    assert _realised_di(default.predict(X), groups, "rejected") >= DELTA - 0.01
    assert _realised_di(default.predict(X), groups, "approved") < DELTA - 0.05


def test_default_on_text_labels_warns_once_naming_the_class(by_default):
    _, caught = by_default
    (warning,) = _pos_label_warnings(caught)
    message = str(warning.message)
    assert "the positive class is 'rejected'" in message
    assert "pos_label='approved'" in message  # how to choose the other class
    assert warning.filename == __file__  # points at the caller's fit


def test_pos_label_not_in_y_is_a_value_error_naming_the_classes(loans):
    X, y, S = loans
    clf = FairClassifier(pos_label="accepted", epochs=5)  # the constructor only stores it
    with pytest.raises(ValueError, match=r"pos_label: 'accepted' is not a label of y.*'approved', 'rejected'"):
        clf.fit(X, y, sensitive_features=S)
    with pytest.raises(ValueError, match=r"pos_label: '1' is not a label of y.*\[0, 1\]"):
        FairClassifier(pos_label="1", epochs=5).fit(X, (y == "approved").astype(int))


@pytest.mark.parametrize("labels", [(0, 1), (-1, 1), (False, True), (0.0, 1.0)], ids=str)
def test_numeric_and_boolean_labels_do_not_warn(loans, labels):
    X, y, S = loans
    coded = np.where(y == "approved", labels[1], labels[0])
    clf, caught = _fit(X[:500], coded[:500], S[:500])
    assert _pos_label_warnings(caught) == []
    assert clf.pos_label_ == labels[1]  # the larger value, as before
    assert set(np.unique(clf.predict(X[:500]))) <= set(labels)


def test_other_numbers_warn_as_they_do_not_say_which_is_favourable(loans):
    X, y, S = loans
    coded = np.where(y == "approved", 1, 2)  # e.g. German credit: 1 good, 2 bad
    clf, caught = _fit(X[:500], coded[:500], S[:500])
    (warning,) = _pos_label_warnings(caught)
    assert "the positive class is 2" in str(warning.message) and "pos_label=1" in str(warning.message)
    assert clf.pos_label_ == 2


def test_predictions_are_the_users_labels_and_mutually_consistent(loans, approved):
    X, y, S = loans
    clf, _ = approved
    pred = clf.predict(X)
    assert set(np.unique(pred)) == {"approved", "rejected"}
    out = float64_outputs(clf.model_, encoded_inputs(X.to_numpy(dtype=np.float64), clf.preprocessor_))
    np.testing.assert_array_equal(pred == "approved", out > 0)  # the model's logit is that of pos_label
    decision = clf.decision_function(X)
    proba = clf.predict_proba(X)
    np.testing.assert_allclose(decision, -out, rtol=1e-9, atol=1e-12)  # positive means classes_[1]
    np.testing.assert_allclose(proba[:, 1], expit(decision), rtol=0, atol=1e-9)
    np.testing.assert_allclose(proba.sum(axis=1), 1.0, rtol=0, atol=1e-12)
    np.testing.assert_array_equal(pred, clf.classes_[(decision > 0).astype(int)])
    np.testing.assert_array_equal(pred, clf.classes_[proba.argmax(axis=1)])
    assert abs(clf.score(X, y) - np.mean(pred == y)) < 1e-12
    assert abs(clf.evaluate(X, y, sensitive_features=S)["accuracy"] - clf.score(X, y)) < 1e-9


def test_pos_label_equal_to_the_default_changes_nothing(loans, by_default):
    X, y, S = loans
    named, caught = _fit(X, y, S, pos_label="rejected")
    assert _pos_label_warnings(caught) == []
    default, _ = by_default
    np.testing.assert_array_equal(named.decision_function(X), default.decision_function(X))


def test_fitted_pos_label_survives_set_params_and_persistence(tmp_path, loans, approved):
    X, y, S = loans
    clf, _ = approved
    pred = clf.predict(X)
    path = tmp_path / "clf.fairopt"
    fairopt.save(clf, path)
    loaded = fairopt.load(path)
    assert loaded.pos_label == "approved" and loaded.pos_label_ == "approved"
    np.testing.assert_array_equal(loaded.predict(X), pred)
    np.testing.assert_array_equal(loaded.predict_proba(X), clf.predict_proba(X))
    # a parameter changed after fit does not change the fitted model's meaning
    loaded.set_params(pos_label="rejected")
    np.testing.assert_array_equal(loaded.predict(X), pred)


def test_files_without_pos_label_load_with_classes_1_and_tampered_ones_are_refused(tmp_path, loans, by_default):
    X, _, _ = loans
    clf, _ = by_default
    path = tmp_path / "clf.fairopt"
    fairopt.save(clf, path)
    payload = torch.load(path, weights_only=True)
    assert payload["fitted"]["pos_label_"] == "rejected"

    def resave(change):
        content = {k: v for k, v in copy.deepcopy(payload).items() if k != "checksum"}
        change(content)
        content["checksum"] = checksum(content)
        torch.save(content, tmp_path / "changed.fairopt")
        return tmp_path / "changed.fairopt"

    # written before pos_label existed: neither the parameter nor the fitted attribute
    old = fairopt.load(resave(lambda c: (c["fitted"].pop("pos_label_"), c["params"].pop("pos_label"))))
    assert old.pos_label is None and old.pos_label_ == "rejected"
    np.testing.assert_array_equal(old.predict(X), clf.predict(X))
    with pytest.raises(ValueError, match=r"pos_label_ 'maybe' is not one of classes_"):
        fairopt.load(resave(lambda c: c["fitted"].update(pos_label_="maybe")))


def test_group_report_uses_the_fitted_positive_class(loans, approved):
    X, y, S = loans
    clf, _ = approved
    report = fairopt.group_report(clf, X, y, sensitive_features=S["sex"], n_bootstrap=0)
    pred = clf.predict(X)
    for group, rate in report.by_group["selection_rate"].items():
        assert abs(rate - np.mean(pred[S["sex"].to_numpy() == group] == "approved")) < 1e-12


def test_group_report_of_a_pipeline_or_a_search_uses_its_fairclassifiers_positive_class(loans):
    """A Pipeline's classes_[1] is 'rejected'; its last step's bounds counted 'approved'."""
    from sklearn.model_selection import GridSearchCV
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    X, y, S = loans
    clf = FairClassifier(("disparate_impact", "sex", DELTA), epochs=30, pos_label="approved")
    pipe = make_pipeline(StandardScaler(), clf)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        pipe.fit(X, y, fairclassifier__sensitive_features=S)
        search = GridSearchCV(make_pipeline(StandardScaler(), clf), {"fairclassifier__alpha": [1e-3]}, cv=2)
        search.fit(X, y, fairclassifier__sensitive_features=S)
    assert pipe.classes_[1] == "rejected"
    for fitted in (pipe, search):
        report = fairopt.group_report(fitted, X, y, sensitive_features=S["sex"], n_bootstrap=0)
        pred = fitted.predict(X)
        for group, rate in report.by_group["selection_rate"].items():
            assert abs(rate - np.mean(pred[S["sex"].to_numpy() == group] == "approved")) < 1e-12


def test_classifier_parameters_are_the_regressors_plus_pos_label():
    """FairClassifier's signature (which scikit-learn reads) is the shared one plus pos_label."""
    assert sorted(FairClassifier._get_param_names()) == sorted([*FairRegressor._get_param_names(), "pos_label"])
    defaults = FairClassifier().get_params()
    assert defaults.pop("pos_label") is None
    assert defaults == FairRegressor().get_params()


def test_positive_class_is_the_rule_the_cli_shares():
    label, note = positive_class(["rejected", "approved"])  # any order in, sorted rule
    assert label == "rejected" and "['approved', 'rejected']" in note and "pos_label='approved'" in note
    assert positive_class(["approved", "rejected"], "approved") == ("approved", None)
    assert positive_class(["0", "1"]) == ("1", None) and positive_class([True, False]) == (True, None)
    label, note = positive_class(["no", "yes"], argument="--positive")
    assert label == "yes" and "--positive no" in note
    assert positive_class([0, 1], "1", argument="--positive", by_text=True) == (1, None)  # a flag is text
    with pytest.raises(ValueError, match=r"--positive: 'maybe' is not a label of the target column 'd'"):
        positive_class(["no", "yes"], "maybe", argument="--positive", source="the target column 'd'", by_text=True)


def test_a_text_positive_class_for_encoded_labels_points_to_the_meta_estimator():
    """VotingClassifier and StackingClassifier fit their members on labels encoded 0, 1 in sorted order: a text
    pos_label then names no label, and the error says what to give instead."""
    from sklearn.ensemble import VotingClassifier

    rng = np.random.default_rng(0)
    X = rng.normal(size=(200, 2))
    labels = np.where(X[:, 0] > 0, "approved", "rejected")
    with pytest.raises(ValueError, match="VotingClassifier or StackingClassifier.*position in the sorted labels"):
        VotingClassifier([("fair", FairClassifier(epochs=2, pos_label="approved"))]).fit(X, labels)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        voting = VotingClassifier([("fair", FairClassifier(epochs=20, pos_label=0))]).fit(X, labels)
    assert voting.estimators_[0].pos_label_ == 0 and set(voting.predict(X)) <= {"approved", "rejected"}
