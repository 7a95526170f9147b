"""Missing values in X are named by column before scikit-learn's generic check (issue: a
fairlearn user's first hour, point 7)."""

from __future__ import annotations

import warnings

import numpy as np
import pandas as pd
import pytest

import fairopt
from fairopt.inputs import check_input_missing


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
    check_input_missing(X)
    check_input_missing(X[["age", "income"]].to_numpy())
    check_input_missing(np.array([[1.0, np.inf]]))  # inf is left to scikit-learn's check
