"""Sensitive features in the forms fairlearn users pass them (issue "a fairlearn user's first
hour", point 2): every form trains the same model, and bad inputs get errors that name the
column."""

from __future__ import annotations

import warnings

import numpy as np
import pandas as pd
import pytest

import fairopt
from fairopt import FairClassifier, FairData, FairRegressor

FEATURES = ["age", "education-num", "hours-per-week", "capital-gain", "capital-loss"]
SPEC = ("disparate_impact", "sex", 0.8)
EPOCHS = 30


def _fit(estimator, *args, **kwargs):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the diagnostics of a short fit are not the subject here
        return estimator.fit(*args, **kwargs)


@pytest.fixture(scope="module")
def frame():
    rows, _ = fairopt.datasets.load_frame("adult")
    return rows.sample(n=1500, random_state=0)


@pytest.fixture(scope="module")
def reference(frame):
    """The model fitted with a DataFrame of sensitive features, the form that always worked."""
    return _fit(FairClassifier(SPEC, epochs=EPOCHS), frame[FEATURES], frame["income"],
                sensitive_features=frame[["sex"]])


def _assert_same_model(model, reference, X):
    """Same decision function (within 1e-6) and the same predictions away from the threshold."""
    expected = reference.decision_function(X)
    np.testing.assert_allclose(model.decision_function(X), expected, rtol=0, atol=1e-6)
    clear = np.abs(expected) > 1e-6
    np.testing.assert_array_equal(model.predict(X)[clear], reference.predict(X)[clear])


FORMS = {
    "DataFrame": lambda f: (f[FEATURES], f[["sex"]]),
    "named Series": lambda f: (f[FEATURES], f["sex"]),
    "unnamed Series": lambda f: (f[FEATURES], f["sex"].rename(None)),
    "1-D array": lambda f: (f[FEATURES], f["sex"].to_numpy()),
    "list": lambda f: (f[FEATURES], f["sex"].tolist()),
    "2-D array of one column": lambda f: (f[FEATURES], f[["sex"]].to_numpy()),
    "dict": lambda f: (f[FEATURES], {"sex": f["sex"].to_numpy()}),
    "column name of X": lambda f: (f[FEATURES + ["sex"]], "sex"),
    "list of column names of X": lambda f: (f[["sex"] + FEATURES], ["sex"]),
}


@pytest.mark.parametrize("form", list(FORMS))
def test_every_form_trains_the_same_model(frame, reference, form):
    X, sensitive = FORMS[form](frame)
    model = _fit(FairClassifier(SPEC, epochs=EPOCHS), X, frame["income"], sensitive_features=sensitive)
    assert model.sensitive_names_ == ["sex"] and model.sensitive_kinds_ == {"sex": "binary"}
    assert list(model.feature_names_in_) == FEATURES and model.n_features_in_ == len(FEATURES)
    _assert_same_model(model, reference, frame[FEATURES])
    taken = form.startswith(("column name", "list of column"))
    assert model.dropped_columns_ == (["sex"] if taken else [])
    if taken:  # the column taken as sensitive is dropped from a DataFrame that still holds it
        np.testing.assert_array_equal(model.decision_function(X), model.decision_function(frame[FEATURES]))
        np.testing.assert_array_equal(model.predict_proba(X), model.predict_proba(frame[FEATURES]))


def test_fair_data_trains_the_same_model(frame, reference):
    data = FairData.from_frame(frame, target="income", sensitive="sex", features=FEATURES)
    model = _fit(FairClassifier(SPEC, epochs=EPOCHS), data)
    _assert_same_model(model, reference, frame[FEATURES])
    assert list(model.feature_names_in_) == FEATURES and model.dropped_columns_ == ["sex"]
    assert model.classes_.tolist() == [0, 1] and model.pos_label_ == 1
    assert model.preprocessor_ is data.preprocessor  # its inputs, encoded once, are used as they are
    # predict / score / evaluate on the FairData itself, and on its raw rows
    np.testing.assert_array_equal(model.decision_function(data), model.decision_function(frame[FEATURES]))
    np.testing.assert_array_equal(model.predict(frame[FEATURES + ["sex"]]), model.predict(data))
    assert model.score(data) == model.score(frame[FEATURES], frame["income"])
    assert model.evaluate(data)["accuracy"] == pytest.approx(model.score(data))
    table = model.check_generalisation(data)
    assert list(table.index) == ["disparate_impact[sex]"] and table.loc["disparate_impact[sex]", "gap"] == 0.0


def test_fair_data_weights_and_positive_class(frame):
    weights = np.where(frame["sex"] == "Female", 2.0, 1.0)
    data = FairData.from_frame(frame.assign(w=weights), target="income", sensitive="sex", features=FEATURES,
                               weights="w")
    by_data = _fit(FairClassifier(SPEC, epochs=EPOCHS), data)
    by_arrays = _fit(FairClassifier(SPEC, epochs=EPOCHS), frame[FEATURES], frame["income"],
                     sensitive_features=frame["sex"], sample_weight=weights)
    _assert_same_model(by_data, by_arrays, frame[FEATURES])
    assert by_data.score(data) == pytest.approx(by_arrays.score(frame[FEATURES], frame["income"],
                                                                sample_weight=weights))
    # pos_label=0: the FairData's 0 is the positive class, as for arrays
    plain = FairData.from_frame(frame, target="income", sensitive="sex", features=FEATURES)
    zero = _fit(FairClassifier(SPEC, epochs=EPOCHS, pos_label=0), plain)
    zero_arrays = _fit(FairClassifier(SPEC, epochs=EPOCHS, pos_label=0), frame[FEATURES], frame["income"],
                       sensitive_features=frame["sex"])
    assert zero.pos_label_ == 0 and zero.classes_.tolist() == [0, 1]
    _assert_same_model(zero, zero_arrays, frame[FEATURES])
    assert zero.score(plain) == zero_arrays.score(frame[FEATURES], frame["income"])


def test_a_loaded_data_set_fits_and_predicts():
    data = fairopt.datasets.load("adult").subset(np.arange(1000))
    model = _fit(FairClassifier(SPEC, epochs=5), data)
    assert model.n_features_in_ == len(data.feature_columns) and "sex" not in model.feature_names_in_
    raw = data.frame[list(model.feature_names_in_)]  # the raw rows: text columns, encoded by preprocessor_
    np.testing.assert_allclose(model.decision_function(raw), model.decision_function(data), rtol=0, atol=1e-6)
    assert 0.5 < model.score(data) <= 1.0
    train, test = data.split(test_size=0.3, seed=0)  # test shares the training part's preprocessor
    held = _fit(FairClassifier(SPEC, epochs=5), train)
    np.testing.assert_allclose(held.decision_function(test),
                               held.decision_function(test.frame[list(held.feature_names_in_)]), rtol=0, atol=1e-6)


def test_regressor_takes_a_fair_data():
    rng = np.random.default_rng(0)
    rows = pd.DataFrame({"a": rng.normal(size=300), "b": rng.normal(size=300), "s": rng.integers(0, 2, 300)})
    rows["t"] = rows["a"] + 0.5 * rows["s"] + 0.1 * rng.normal(size=300)
    data = FairData.from_frame(rows, target="t", sensitive="s", features=["a", "b"], task="regression")
    spec = ("covariance", "s", 0.01)
    by_data = _fit(FairRegressor(spec, epochs=50), data)
    by_arrays = _fit(FairRegressor(spec, epochs=50), rows[["a", "b"]], rows["t"],
                     sensitive_features=rows["s"].to_numpy())  # unnamed: bound to "s"
    np.testing.assert_allclose(by_data.predict(rows[["a", "b"]]), by_arrays.predict(rows[["a", "b"]]), rtol=0,
                               atol=1e-6)
    assert by_data.score(data) == pytest.approx(by_arrays.score(rows[["a", "b"]], rows["t"]))
    with pytest.raises(ValueError, match="task 'binary'"):
        FairRegressor(spec).fit(FairData.from_frame(rows.assign(t=rows["s"]), target="t", sensitive="s",
                                                    features=["a", "b"]))


def test_unnamed_column_naming_rules(frame):
    X, y, s = frame[FEATURES], frame["income"], frame["sex"].to_numpy()
    # without constraints the column keeps its default name
    assert _fit(FairClassifier(epochs=5), X, y, sensitive_features=s).sensitive_names_ == ["sensitive"]
    # sensitive_names wins over the constraints' name
    named = _fit(FairClassifier(("disparate_impact", "gender", 0.8), epochs=5, sensitive_names="gender"), X, y,
                 sensitive_features=s)
    assert named.sensitive_names_ == ["gender"]
    with pytest.raises(ValueError, match=r"unknown name 'sex'; available: \['gender'\]"):
        FairClassifier(SPEC, epochs=5, sensitive_names="gender").fit(X, y, sensitive_features=s)
    # the same name twice (and an intersection of one name) is still one name
    twice = _fit(FairClassifier([SPEC, ("demographic_parity", "sex", 0.2)], epochs=5), X, y, sensitive_features=s)
    assert twice.sensitive_names_ == ["sex"]
    # several names: which one the column is cannot be told
    several = FairClassifier([SPEC, ("demographic_parity", "race", 0.2)], epochs=5)
    for unnamed in (s, s.tolist(), pd.Series(s)):
        with pytest.raises(ValueError, match=r"one unnamed column .* 2 sensitive features are needed, \['sex', 'race'\].*"
                                             r"a DataFrame with the columns \['sex', 'race'\] or a dict"):
            several.fit(X, y, sensitive_features=unnamed)
    # a named Series keeps its own name (the constraint then names an absent feature)
    with pytest.raises(ValueError, match=r"unknown name 'sex'; available: \['gender'\]\. .*s\.rename\('sex'\)"):
        FairClassifier(SPEC, epochs=5).fit(X, y, sensitive_features=frame["sex"].rename("gender"))


def test_several_column_names_of_x(frame):
    X = frame[FEATURES + ["race", "sex"]]
    model = _fit(FairClassifier([SPEC, ("demographic_parity", "race", 0.3)], epochs=5), X, frame["income"],
                 sensitive_features=["sex", "race"])
    assert model.sensitive_names_ == ["sex", "race"] and model.dropped_columns_ == ["sex", "race"]
    assert list(model.feature_names_in_) == FEATURES
    np.testing.assert_array_equal(model.predict(X), model.predict(frame[FEATURES]))
    # evaluate takes the same column names
    assert model.evaluate(X, frame["income"], sensitive_features=["sex", "race"])["n"] == len(frame)


def test_column_names_are_saved(frame, tmp_path):
    X = frame[FEATURES + ["sex"]]
    model = _fit(FairClassifier(SPEC, epochs=5), X, frame["income"], sensitive_features="sex")
    fairopt.save(model, tmp_path / "model.pt")
    loaded = fairopt.load(tmp_path / "model.pt")
    assert loaded.dropped_columns_ == ["sex"]
    np.testing.assert_array_equal(loaded.predict(X), model.predict(X))
    # an array cannot drop 'sex' by name: with it still in, the error says so
    with pytest.raises(ValueError, match=r"X has 6 columns, 1 more than the model's 5: fit took \['sex'\] out"):
        model.predict(X.to_numpy(dtype=object))


def test_column_name_errors(frame):
    X, y = frame[FEATURES + ["sex"]], frame["income"]
    clf = FairClassifier(SPEC, epochs=5)
    with pytest.raises(ValueError, match=r"unknown column\(s\) \['gender'\] of X; X has the columns \['age', "):
        clf.fit(X, y, sensitive_features="gender")
    with pytest.raises(ValueError, match=r"unknown column\(s\) \['gender'\] of X"):
        clf.fit(X, y, sensitive_features=["sex", "gender"])
    with pytest.raises(ValueError, match="need X to be a pandas DataFrame"):
        clf.fit(X.to_numpy(dtype=object), y, sensitive_features="sex")
    # a list of labels of the wrong length is read as column names: the message says both
    with pytest.raises(ValueError, match=r"unknown column\(s\) .* needs 1500 values, not 1499"):
        clf.fit(X, y, sensitive_features=frame["sex"].tolist()[:-1])
    # all columns taken: nothing is left for the model
    with pytest.raises(ValueError, match=r"\[.sex.\] are all the columns of X; .* no input"):
        clf.fit(frame[["sex"]], y, sensitive_features="sex")


def test_value_errors_name_the_column(frame):
    X, y, s = frame[FEATURES], frame["income"], frame["sex"]
    clf = FairClassifier(SPEC, epochs=5)
    for short in (s.to_numpy()[:-1], s.tolist()[:-1], s.iloc[:-1].rename(None)):
        with pytest.raises(ValueError, match=r"sensitive_features: 'sex' has shape \(1499,\); expected \(1500,\)"):
            clf.fit(X.to_numpy(), y, sensitive_features=short)
    missing = s.to_numpy().copy()
    missing[7] = None
    with pytest.raises(ValueError, match=r"sensitive_features: 'sex' has 1 missing value\(s\) .* at row 7"):
        clf.fit(X, y, sensitive_features=missing)
    coded = (s == "Male").to_numpy(dtype=float, copy=True)
    coded[3] = np.nan
    with pytest.raises(ValueError, match=r"'sex' has 1 missing value\(s\) .* at row 3"):
        clf.fit(X, y, sensitive_features=coded)
    with pytest.raises(ValueError, match=r"'sex' has 1 missing value\(s\) .* at row 3"):
        clf.fit(frame[FEATURES + ["sex"]].assign(sex=coded), y, sensitive_features="sex")
    with pytest.raises(ValueError, match="'sex' has only 1 group"):
        clf.fit(X, y, sensitive_features=np.full(len(X), "Male"))


def test_fair_data_errors(frame):
    data = FairData.from_frame(frame, target="income", sensitive="sex", features=FEATURES)
    clf = FairClassifier(SPEC, epochs=5)
    with pytest.raises(ValueError, match="^y: fit\\(data\\) takes it from the FairData"):
        clf.fit(data, frame["income"])
    with pytest.raises(ValueError, match="^sensitive_features: fit\\(data\\)"):
        clf.fit(data, sensitive_features=frame["sex"])
    with pytest.raises(ValueError, match="^sample_weight: fit\\(data\\)"):
        clf.fit(data, sample_weight=np.ones(len(frame)))
    with pytest.raises(ValueError, match="^sensitive_names: a FairData names"):
        FairClassifier(SPEC, sensitive_names="gender").fit(data)
    with pytest.raises(ValueError, match="^sensitive_kinds: a FairData"):
        FairClassifier(SPEC, sensitive_kinds={"sex": "categorical"}).fit(data)
    fitted = _fit(FairClassifier(SPEC, epochs=5, sensitive_names="sex", sensitive_kinds={"sex": "binary"}), data)
    with pytest.raises(ValueError, match="a FairData carries its target"):
        fitted.score(data, frame["income"])
    with pytest.raises(ValueError, match="sample_weight: a FairData carries its weights"):
        fitted.score(data, sample_weight=np.ones(len(frame)))


def test_a_sensitive_series_in_another_row_order_than_x_is_warned(frame):
    """Rows pair by position (as in scikit-learn); a Series whose index holds X's labels in another order is
    almost surely misaligned, and says so. The same index, or another index altogether, is not warned."""
    X, s = frame[FEATURES], frame["sex"]
    with pytest.warns(fairopt.exceptions.FairnessWarning, match="paired by position"):
        FairClassifier(SPEC, epochs=2).fit(X, frame["income"], sensitive_features=s.sample(frac=1, random_state=1))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        model = FairClassifier(SPEC, epochs=2).fit(X, frame["income"], sensitive_features=s)
        FairClassifier(SPEC, epochs=2).fit(X, frame["income"], sensitive_features=s.reset_index(drop=True))
        model.score(X, frame["income"])
    assert not [w for w in caught if "paired by position" in str(w.message)]
    with pytest.warns(fairopt.exceptions.FairnessWarning, match="y: its index"):
        model.evaluate(X, frame["income"].sort_index(), sensitive_features=s)


def test_inside_a_pipeline_a_reordered_sensitive_series_is_checked_against_y(frame):
    """A ColumnTransformer hands the estimator an array without X's index; y keeps it, so a sensitive
    Series in another row order than y is still warned."""
    from sklearn.compose import make_column_transformer
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    pipe = make_pipeline(make_column_transformer((StandardScaler(), FEATURES)), FairClassifier(SPEC, epochs=2))
    shuffled = frame["sex"].sample(frac=1, random_state=1)
    with pytest.warns(fairopt.exceptions.FairnessWarning, match="labels of y's index in another order"):
        pipe.fit(frame, frame["income"], fairclassifier__sensitive_features=shuffled)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        pipe.fit(frame, frame["income"], fairclassifier__sensitive_features=frame["sex"])
    assert not [w for w in caught if "paired by position" in str(w.message)]


def test_a_category_column_of_integer_codes_is_read_as_groups():
    """A pandas ``category`` dtype says the values are group labels, whatever their type: integer codes
    0..3 in a category Series (or a DataFrame or dict column) are four groups, not a continuous
    attribute; the same codes as plain integers or floats evaluate the fitted model alike."""
    rng = np.random.default_rng(0)
    n = 1200
    X = pd.DataFrame(rng.normal(size=(n, 3)), columns=["a", "b", "c"])
    codes = rng.integers(0, 4, n)
    y = (X["a"] + 0.5 * codes + rng.normal(size=n) > 1).astype(int)
    category = pd.Series(codes, name="s", dtype="category")
    fitted = {}
    for form, given in {"series": category, "frame": category.to_frame(), "dict": {"s": category}}.items():
        fitted[form] = _fit(FairClassifier(("disparate_impact", "s", 0.8), epochs=EPOCHS), X, y,
                            sensitive_features=given)
        assert fitted[form].sensitive_kinds_ == {"s": "categorical"}
        assert fitted[form].sensitive_levels_ == {"s": [0, 1, 2, 3]}
    assert _fit(FairClassifier(("disparate_impact", "s", 0.8), epochs=EPOCHS), X.assign(s=category), y,
                sensitive_features="s").sensitive_kinds_ == {"s": "categorical"}
    with pytest.raises(ValueError, match="continuous"):  # plain integers still need the declaration
        _fit(FairClassifier(("disparate_impact", "s", 0.8), epochs=EPOCHS), X, y,
             sensitive_features=pd.Series(codes, name="s"))
    ratios = [fitted["series"].evaluate(X, y, sensitive_features=given)["di_ratio[s]"]
              for given in (category, pd.Series(codes, name="s"), pd.Series(codes.astype(float), name="s"))]
    assert ratios[0] == ratios[1] == ratios[2]
    rates = [float((fitted["series"].predict(X)[codes == g]).mean()) for g in range(4)]
    assert ratios[0] == pytest.approx(min(rates) / max(rates), abs=1e-9)  # over all groups, as documented


def test_evaluating_rows_of_a_group_training_did_not_have_names_it(frame):
    """A group absent from training has no row in the constraints: the error names it and its rows
    (it read "declared 'binary'" for an inferred kind, or "every training group must be present")."""
    model = _fit(FairClassifier(SPEC, epochs=2), frame[FEATURES], frame["income"], sensitive_features=frame["sex"])
    other = frame["sex"].where(np.arange(len(frame)) % 7 != 0, "Other")
    for call in (model.evaluate, model.check_generalisation):
        with pytest.raises(ValueError, match=r"'sex' has the group\(s\) \['Other'\] \(215 rows\) that training did "
                                             r"not have \(training groups \['Female', 'Male'\]\)"):
            call(frame[FEATURES], frame["income"], sensitive_features=other)
