"""Missing values in X are named by column before scikit-learn's generic check (issue: a
fairlearn user's first hour, point 7)."""

from __future__ import annotations

import warnings

import numpy as np
import pandas as pd
import pytest

import fairopt
from fairopt.inputs import check_input_finite


def _data(n=200):
    rng = np.random.default_rng(0)
    X = pd.DataFrame({"age": rng.normal(size=n), "income": rng.normal(size=n), "job": rng.choice(["a", "b"], n)})
    return X, (rng.random(n) < 0.5).astype(int), pd.Series((rng.random(n) < 0.5).astype(int), name="g")


def test_fit_names_the_column_with_missing_values():
    X, y, g = _data()
    X.loc[5, "income"] = np.nan
    X.loc[9, "job"] = None
    with pytest.raises(ValueError, match=r"Input X contains NaN: 'income' has 1 missing value\(s\), e.g. at row 5, "
                                         r"and 1 more column"):
        fairopt.FairClassifier(constraints=[("di", "g", 0.8)], epochs=3).fit(X, y, sensitive_features=g)
    with pytest.raises(ValueError, match="'column 1' has 1 missing"):
        fairopt.FairClassifier(epochs=3).fit(X[["age", "income"]].to_numpy(), y)


def test_predict_names_the_column_too():
    X, y, g = _data()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        clf = fairopt.FairClassifier(epochs=3).fit(X, y)
    X.loc[3, "age"] = np.nan
    with pytest.raises(ValueError, match="'age' has 1 missing value"):
        clf.predict(X)


def test_inputs_without_missing_values_pass():
    X, _, _ = _data()
    check_input_finite(X)
    check_input_finite(X[["age", "income"]].to_numpy())
    check_input_finite(X.assign(count=pd.array([1, None] * 100, dtype="Int64")).dropna())


def test_infinite_values_are_named_by_column_at_fit_and_predict():
    """A frame with text columns reaches the preprocessor unchecked by scikit-learn: the user's column
    is named, not the estimator's internal one."""
    X, y, g = _data()
    bad = X.copy()
    bad.loc[7, "income"] = -np.inf
    named = r"Input X contains infinity: 'income' has 1 infinite value\(s\), e.g. at row 7"
    with pytest.raises(ValueError, match=named):
        fairopt.FairClassifier(epochs=3).fit(bad, y)
    with pytest.raises(ValueError, match="'column 1' has 1 infinite"):
        fairopt.FairClassifier(epochs=3).fit(bad[["age", "income"]].to_numpy(), y)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        clf = fairopt.FairClassifier(epochs=3).fit(X, y)
    with pytest.raises(ValueError, match="'income' has 1 infinite"):
        clf.predict(bad)


def test_scikit_learn_names_of_seed_and_epochs():
    """``random_state``/``max_iter`` are scikit-learn's names of ``seed``/``epochs``: the same
    model, and a clash of the two names is an error."""
    X, y, g = _data()
    fits = []
    for params in ({"seed": 3, "epochs": 20}, {"random_state": 3, "max_iter": 20}):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            clf = fairopt.FairClassifier(constraints=[("di", "g", 0.8)], **params).fit(X, y, sensitive_features=g)
        fits.append(clf.decision_function(X))
    np.testing.assert_allclose(fits[0], fits[1], rtol=0, atol=1e-6)
    assert fairopt.FairClassifier(random_state=5).seed_value() == 5 and fairopt.FairRegressor(max_iter=7).epochs_value() == 7
    for clash in ({"seed": 1, "random_state": 2}, {"epochs": 10, "max_iter": 20}):
        with pytest.raises(ValueError, match="name the same parameter"):
            fairopt.FairClassifier(**clash).fit(X, y)
    # random_state takes what scikit-learn's takes: a RandomState or Generator gives one drawn seed per fit
    drawn = []
    for state in (np.random.RandomState(0), np.random.RandomState(0), np.random.default_rng(0)):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            clf = fairopt.FairClassifier(random_state=state, epochs=5).fit(X, y)
        drawn.append((clf.seed_value(), clf.decision_function(X)))
    assert drawn[0][0] == drawn[1][0] and np.array_equal(drawn[0][1], drawn[1][1])
    with pytest.raises(ValueError, match="^random_state: expected a non-negative integer"):
        fairopt.FairClassifier(random_state=-1).fit(X, y)


@pytest.mark.parametrize("make", [np.random.default_rng, np.random.RandomState])
def test_a_generator_random_state_gives_one_seed_per_fit_whoever_asks_for_it(make):
    """seed_value() on an unfitted estimator drew from the user's generator at each call (three calls, three
    seeds, the generator three draws on) and fit then drew a fourth. Now the first call draws the next fit's seed
    once, that fit takes it (its split, margins and training alike), and the generator is one draw on per fit."""
    X, y, g = _data()
    reference = make(0)
    draw = reference.integers if hasattr(reference, "integers") else reference.randint
    first, second = (int(draw(np.iinfo(np.int32).max)) for _ in range(2))
    params = {"constraints": [("di", "g", 0.8)], "epochs": 3, "validation_fraction": 0.3}
    state = make(0)
    clf = fairopt.FairClassifier(random_state=state, **params)
    assert [clf.seed_value() for _ in range(3)] == [first] * 3
    untouched = fairopt.FairClassifier(random_state=make(0), **params)  # nobody asks before its fit
    twin = fairopt.FairClassifier(seed=first, **params)  # the drawn seed given as an integer
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for estimator in (clf, untouched, twin):
            estimator.fit(X, y, sensitive_features=g)
    assert clf.seed_value() == untouched.seed_value() == first
    for other in (untouched, twin):  # one seed for the validation split and the training
        np.testing.assert_array_equal(clf.validation_indices_, other.validation_indices_)
        np.testing.assert_array_equal(clf.decision_function(X), other.decision_function(X))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        clf.fit(X, y, sensitive_features=g)
    assert clf.seed_value() == clf.seed_value() == second  # the next fit, the next draw
    clf.set_params(random_state=make(0))  # another generator: its own first draw, once
    assert clf.seed_value() == clf.seed_value() == first


def test_linear_models_report_coefficients():
    """``coef_``/``intercept_`` of ``model="linear"`` reproduce decision_function/predict on the
    encoded inputs (classifier: also with the smaller label as positive); other models have none."""

    X, y, g = _data()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for pos_label in (None, 0):
            clf = fairopt.FairClassifier(constraints=[("di", "g", 0.8)], epochs=20, pos_label=pos_label).fit(
                X, y, sensitive_features=g)
            encoded = clf._model_inputs(X)  # the encoded, standardised rows the model reads
            assert clf.coef_.shape == (1, len(clf.preprocessor_.feature_names_)) and clf.intercept_.shape == (1,)
            np.testing.assert_allclose(encoded @ clf.coef_.ravel() + clf.intercept_[0], clf.decision_function(X),
                                       rtol=1e-9, atol=1e-9)
        target = X["age"].to_numpy() * 2.0 + 1.0
        reg = fairopt.FairRegressor(epochs=20).fit(X, target)
        np.testing.assert_allclose(reg._model_inputs(X) @ reg.coef_ + reg.intercept_, reg.predict(X),
                                   rtol=1e-9, atol=1e-9)
        mlp = fairopt.FairClassifier(model="mlp", epochs=5).fit(X, y)
        plain = fairopt.FairClassifier(epochs=3).fit(X[["age", "income"]].to_numpy(), y)
    assert not hasattr(mlp, "coef_") and not hasattr(fairopt.FairClassifier(), "coef_")
    # coef_'s columns by the user's names (preprocessor_.feature_names_ are internal: x0, x2=a)
    assert clf.get_feature_names_out().tolist() == ["age", "income", "job=a", "job=b"]
    assert len(clf.get_feature_names_out()) == clf.coef_.shape[1]
    assert plain.get_feature_names_out().tolist() == ["x0", "x1"]


def test_predict_encoding_messages_use_the_user_column_names(caplog):
    """The estimator's preprocessor holds internal column names; its messages at predict time name the
    user's columns (``Preprocessor.renamed``) and the argument ``X``."""
    X, y, g = _data()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        clf = fairopt.FairClassifier(epochs=3).fit(X, y)
    text = X.astype({"income": object})
    text.loc[4, "income"] = "lots"
    with pytest.raises(ValueError, match=r"^X: column 'income' was numeric .* not numbers here: \['lots'\]"):
        clf.predict(text)
    unseen = X.copy()
    unseen.loc[2, "job"] = "c"
    with caplog.at_level("WARNING", logger="fairopt.data"):
        clf.predict(unseen)
    assert "column 'job': 1 rows have levels not seen at fit time" in caplog.text


def test_a_validation_splits_encoding_messages_use_the_user_column_names(caplog):
    """validation_fraction re-fits the encoding on the fitted part and encodes the held-out rows: a level only
    they hold is logged by the user's column name, not the internal one (x2)."""
    X, y, g = _data(300)
    X.loc[7, "job"] = "only-once"
    with warnings.catch_warnings(), caplog.at_level("WARNING", logger="fairopt.data"):
        warnings.simplefilter("ignore")
        for seed in range(6):  # the row is held out by some of the seeded splits
            fairopt.FairClassifier(constraints=[("di", "g", 0.8)], epochs=2, validation_fraction=0.3,
                                   seed=seed).fit(X, y, sensitive_features=g)
    seen = [r.getMessage() for r in caplog.records if "not seen at fit time" in r.getMessage()]
    assert seen and all(m.startswith("column 'job'") for m in seen)


def test_predict_encoding_messages_name_x_for_an_array_too():
    """An array has no column names: the messages name the argument ``X`` and the column by position
    (``x2`` is ``X[:, 2]``), not the internal frame of the encoding."""
    X, y, _ = _data()
    values = X[["age", "income"]].to_numpy()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        clf = fairopt.FairClassifier(epochs=3).fit(values, y)
    huge = values.copy()
    huge[0, 1] = 1e300
    with pytest.raises(ValueError, match=r"^X: column 'x1' has the value 1e\+300 at index 0"):
        clf.predict(huge)


def test_renamed_preprocessor_encodes_as_the_original():
    from fairopt.data.preprocessing import Preprocessor

    X, _, _ = _data()
    internal = X.set_axis(["x0", "x1", "x2"], axis=1)
    pre = Preprocessor().fit(internal)
    copy = pre.renamed(list(X.columns))
    np.testing.assert_array_equal(copy.transform(X)[0], pre.transform(internal)[0])
    assert copy.feature_names_ == ["age", "income", "job=a", "job=b"]
    assert pre.columns_ == ["x0", "x1", "x2"]  # the original is unchanged
    with pytest.raises(ValueError, match="^names: expected 3 distinct names"):
        pre.renamed(["a", "a", "b"])


def test_sparse_inputs_from_a_one_hot_encoder_train_as_dense(monkeypatch):
    """A pipeline's OneHotEncoder gives SciPy sparse rows by default: fit and predict take them as dense
    (fairlearn's reductions accept them too); a dense copy beyond the limit is refused with advice."""
    from scipy import sparse
    from sklearn.compose import make_column_transformer
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import OneHotEncoder

    import fairopt.inputs

    X, y, g = _data()
    encode = make_column_transformer((OneHotEncoder(handle_unknown="ignore"), ["job"]), remainder="passthrough",
                                     sparse_threshold=1.0)  # sparse output whatever the density
    pipe = make_pipeline(encode, fairopt.FairClassifier(constraints=[("di", "g", 0.8)], epochs=5, seed=0))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        pipe.fit(X, y, fairclassifier__sensitive_features=g)
        dense = fairopt.FairClassifier(constraints=[("di", "g", 0.8)], epochs=5, seed=0).fit(
            encode.fit_transform(X).toarray(), y, sensitive_features=g)
    assert sparse.issparse(encode.transform(X))
    np.testing.assert_array_equal(pipe.predict(X), dense.predict(encode.transform(X).toarray()))
    monkeypatch.setattr(fairopt.inputs, "DENSE_LIMIT_BYTES", 100)
    with pytest.raises(ValueError, match=r"^X: a sparse 200 x 4 matrix would take .* GiB dense"):
        fairopt.inputs.dense_inputs(sparse.csr_matrix(np.ones((200, 4))))


def test_a_column_of_row_identifiers_is_warned_and_ordinary_numbers_are_not():
    """A distinct whole number per row, in row order or under an identifier's name, is a model input that
    identifies rows: warned at fit, naming the user's column; integer features with repeats, shuffled keys
    under an ordinary name and short frames are not."""
    from fairopt.data.frames import looks_like_row_identifier

    rng = np.random.default_rng(0)
    n = 300
    keys = pd.Series(rng.permutation(n) + 1000)
    assert looks_like_row_identifier(keys.rename("customer_id"))
    assert looks_like_row_identifier(keys.rename("Unnamed: 0")) and looks_like_row_identifier(keys.rename("ID"))
    assert looks_like_row_identifier(pd.Series(np.arange(n, dtype=float), name="score"))  # a row number
    assert not looks_like_row_identifier(keys.rename("score"))  # shuffled distinct integers, an ordinary name
    assert not looks_like_row_identifier(pd.Series(rng.integers(0, 50, n), name="id"))  # repeats
    assert not looks_like_row_identifier(pd.Series(rng.normal(size=n), name="id"))  # not whole numbers
    assert not looks_like_row_identifier(pd.Series(np.arange(50), name="id"))  # too few rows to tell
    assert not looks_like_row_identifier(pd.Series(["a"] * n, name="id"))
    X = pd.DataFrame({"customer_id": keys, "age": rng.integers(18, 80, n), "income": rng.normal(size=n)})
    y = (X["income"] + rng.normal(size=n) > 0).astype(int)
    s = rng.choice(["a", "b"], n)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        fairopt.FairClassifier(epochs=3).fit(X, y, sensitive_features=s)
        fairopt.FairClassifier(epochs=3).fit(X.drop(columns="customer_id"), y, sensitive_features=s)
    found = [str(w.message) for w in caught if "whole number in every row" in str(w.message)]
    assert len(found) == 1 and "'customer_id'" in found[0] and "--ignore customer_id" in found[0]
    assert [w.filename for w in caught if "whole number" in str(w.message)] == [__file__]


def test_missing_or_unnamed_sensitive_features_say_how_to_name_them():
    rng = np.random.default_rng(1)
    n = 200
    X = pd.DataFrame({"a": rng.normal(size=n), "Gender": rng.choice(["F", "M"], n), "Region": rng.choice(list("ABC"), n)})
    y = rng.normal(size=n)
    with pytest.raises(ValueError, match=r"\['Gender', 'Region'\] are columns of X: sensitive_features=\['Gender', "
                                         r"'Region'\] takes them from X"):
        fairopt.FairRegressor(("dcov", ["Gender", "Region"], 0.1)).fit(X, y)
    S = np.column_stack([rng.integers(0, 2, n), rng.integers(0, 2, n)])
    with pytest.raises(ValueError, match=r"sensitive_0, sensitive_1, \.\.\.: name them with sensitive_names="):
        fairopt.FairClassifier(("disparate_impact", "sex", 0.8)).fit(X[["a"]], (y > 0).astype(int),
                                                                     sensitive_features=S)


def test_a_column_number_as_sensitive_features_says_how_to_pass_it():
    """X with integer column names and sensitive_features=3: a message about the single value and how to pass
    the column (it said 'expected a 1-D or 2-D array, got shape ()'); '3' lists the columns as they are."""
    X, y, _ = _data()
    numbered = pd.DataFrame(X[["age", "income"]].to_numpy(), columns=[0, 1])
    numbered[3] = (np.arange(len(X)) % 2).astype(int)
    with pytest.raises(ValueError, match=r"got the single value 3, not one value per row.*X\[3\]"):
        fairopt.FairClassifier("di:3>=0.8", epochs=2).fit(numbered, y, sensitive_features=3)
    with pytest.raises(ValueError, match=r"unknown column\(s\) \['3'\] of X; X has the columns \[0, 1, 3\]"):
        fairopt.FairClassifier("di:3>=0.8", epochs=2).fit(numbered, y, sensitive_features="3")
