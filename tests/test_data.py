"""Tests of fairopt.data: Preprocessor, FairData.from_frame/from_arrays, subset, split, validation."""

from __future__ import annotations

import logging

import numpy as np
import pandas as pd
import pytest
import torch

from fairopt.data import FairData, Preprocessor, intersection_cells, stratified_split_indices


# --------------------------------------------------------------------------------------
# fixtures
# --------------------------------------------------------------------------------------
@pytest.fixture
def small_frame() -> pd.DataFrame:
    """Six rows with a numeric, a text, a binary-text and an integer-coded column."""
    return pd.DataFrame({
        "a": [1.0, 2.0, 3.0, 4.0, 5.0, 6.0],
        "c": ["x", "y", "x", "y", "z", "z"],
        "sex": ["m", "f", "m", "f", "m", "f"],
        "band": [0, 1, 2, 0, 1, 2],
        "y": [0, 1, 0, 1, 1, 0],
    })


def synthetic_frame(n: int = 400, seed: int = 0) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    return pd.DataFrame({
        "income": rng.normal(50.0, 10.0, n),
        "hours": rng.integers(10, 60, n).astype(float),
        "job": rng.choice(["clerk", "manager", "nurse", "driver"], n),
        "sex": rng.choice(["female", "male"], n),
        "race": rng.choice(["A", "B", "C"], n, p=[0.6, 0.3, 0.1]),
        "age": rng.integers(18, 80, n).astype(float),
        "y": rng.integers(0, 2, n),
        "count": rng.poisson(0.5, n),
        "expo": rng.uniform(0.1, 1.0, n),
    })


# --------------------------------------------------------------------------------------
# Preprocessor
# --------------------------------------------------------------------------------------
def test_preprocessor_standardises_and_one_hot_encodes_hand_example(small_frame):
    pre = Preprocessor(columns=["a", "c"])
    X, names = pre.fit_transform(small_frame)
    assert names == ["a", "c=x", "c=y", "c=z"]
    assert X.dtype == np.float32
    mean, std = 3.5, np.sqrt(17.5 / 6.0)  # population std of 1..6
    np.testing.assert_allclose(X[:, 0], (np.arange(1, 7) - mean) / std, atol=1e-6)
    expected_one_hot = np.array([[1, 0, 0], [0, 1, 0], [1, 0, 0], [0, 1, 0], [0, 0, 1], [0, 0, 1]], dtype=np.float32)
    np.testing.assert_array_equal(X[:, 1:], expected_one_hot)


def test_huge_feature_stays_informative_and_is_not_zeroed():
    """Regression: X[0, 0] = 1e300 overflowed the variance (inf) and the column became all zeros."""
    rng = np.random.default_rng(0)
    X = rng.normal(size=(50, 3))
    X[0, 0] = 1e300
    with np.errstate(all="raise"):  # no silent overflow on the way
        data = FairData.from_arrays(X, rng.integers(0, 2, 50), {"s": rng.integers(0, 2, 50)})
    column = data.X[:, 0].numpy()
    assert np.isfinite(column).all() and column[0] == pytest.approx(7.0, rel=1e-6)  # (1e300 - mean) / std
    assert (column[1:] < 0).all() and column.std() == pytest.approx(1.0, rel=1e-5)
    np.testing.assert_allclose(data.X[:, 1:].numpy(), (X[:, 1:] - X[:, 1:].mean(0)) / X[:, 1:].std(0), atol=1e-6)


def test_tiny_and_extreme_features_are_standardised_exactly_where_representable():
    z = np.sqrt(1.5)  # (1, 2, 3) standardised: -z, 0, z
    for column in ([1e-300, 2e-300, 3e-300], [1e300, 2e300, 3e300], [-1.7e308, 0.0, 1.7e308]):
        X, _ = Preprocessor().fit_transform(pd.DataFrame({"a": column}))
        np.testing.assert_allclose(X[:, 0], [-z, 0.0, z], rtol=1e-6)
    # ordinary columns: bit-for-bit the plain population mean and deviation
    values = pd.DataFrame(np.random.default_rng(1).normal(3.0, 7.0, size=(500, 3)), columns=list("abc"))
    pre = Preprocessor().fit(values)
    plain = values.to_numpy(dtype=np.float64)
    assert list(pre.means_.values()) == plain.mean(axis=0).tolist()
    assert list(pre.scales_.values()) == plain.std(axis=0).tolist()


def test_a_value_beyond_float32_after_standardisation_names_the_column_and_the_value():
    pre = Preprocessor().fit(pd.DataFrame({"a": [0.0, 1.0, 2.0], "big": [1.0, 2.0, 3.0]}))
    new = pd.DataFrame({"a": [1.0, 1.0], "big": [2.0, 1e300]}, index=[10, 11])
    with pytest.raises(ValueError, match=r"^df: column 'big' has the value 1e\+300 at index 11; standardised .*"
                                         r"beyond the float32 range"):
        pre.transform(new)
    with pytest.raises(ValueError, match=r"^df: column 'x0' has the value 1e\+300 at index 1; passed through "
                                         r"unscaled, beyond the float32 range"):
        FairData.from_arrays(np.array([[1.0], [1e300], [2.0], [3.0]]), [0, 1, 0, 1], {"s": [0, 0, 1, 1]},
                             preprocessor=Preprocessor(standardize=False).fit(pd.DataFrame({"x0": [1.0]})))


def test_preprocessor_constant_column_gets_unit_scale():
    df = pd.DataFrame({"k": [0.1, 0.1, 0.1], "v": [1.0, 2.0, 3.0]})
    X, _ = Preprocessor().fit_transform(df)
    np.testing.assert_array_equal(X[:, 0], np.zeros(3, dtype=np.float32))


def test_preprocessor_reuses_train_statistics_on_new_frame_and_zero_rows_unseen_levels(small_frame, caplog):
    pre = Preprocessor(columns=["a", "c"]).fit(small_frame)
    new = pd.DataFrame({"a": [10.0, 3.5], "c": ["w", "y"]})
    with caplog.at_level(logging.WARNING, logger="fairopt.data"):
        X, _ = pre.transform(new)
    std = np.sqrt(17.5 / 6.0)
    np.testing.assert_allclose(X[:, 0], [(10.0 - 3.5) / std, 0.0], atol=1e-6)
    np.testing.assert_array_equal(X[0, 1:], [0, 0, 0])  # unseen level 'w'
    np.testing.assert_array_equal(X[1, 1:], [0, 1, 0])
    assert "not seen at fit time" in caplog.text and "'c'" in caplog.text


def test_preprocessor_declared_categorical_integer_column(small_frame):
    X, names = Preprocessor(columns=["band"], categorical=["band"]).fit_transform(small_frame)
    assert names == ["band=0", "band=1", "band=2"]
    np.testing.assert_array_equal(X.argmax(axis=1), small_frame["band"].to_numpy())


def test_preprocessor_transform_rejects_missing_column_and_nan(small_frame):
    pre = Preprocessor(columns=["a", "c"]).fit(small_frame)
    with pytest.raises(ValueError, match=r"df: column\(s\) \['c'\] not found"):
        pre.transform(small_frame[["a"]])
    bad = small_frame.assign(a=[1.0, np.nan, 3.0, 4.0, 5.0, 6.0])
    with pytest.raises(ValueError, match="df: column 'a' has 1 of 6 rows with NaN"):
        pre.transform(bad)
    with pytest.raises(ValueError, match="preprocessor: not fitted"):
        Preprocessor().transform(small_frame)


def test_preprocessor_keeps_missing_values_when_asked(small_frame, caplog):
    frame = small_frame.assign(a=[1.0, np.nan, 3.0, np.nan, 5.0, 10.0], c=["x", None, "x", "y", "z", "z"],
                               empty=[np.nan] * 6)
    pre = Preprocessor(columns=["a", "c", "empty"], missing="keep")
    with caplog.at_level("WARNING", logger="fairopt.data"):
        X, names = pre.fit_transform(frame)
    assert not caplog.records  # a missing level is not an unseen one
    present = np.array([1.0, 3.0, 5.0, 10.0])
    assert pre.means_["a"] == pytest.approx(present.mean()) and pre.scales_["a"] == pytest.approx(present.std())
    assert (pre.means_["empty"], pre.scales_["empty"]) == (0.0, 1.0)  # no value: mapped as it is
    a = X[:, names.index("a")]
    np.testing.assert_array_equal(np.isnan(a), frame["a"].isna().to_numpy())
    np.testing.assert_allclose(a[~np.isnan(a)], (present - present.mean()) / present.std(), rtol=1e-6)
    np.testing.assert_array_equal(X[1, [names.index(f"c={v}") for v in "xyz"]], 0.0)  # no level
    assert np.isnan(X[:, names.index("empty")]).all()
    for copy in (pre.clone(), pre.renamed(["A", "C", "E"])):
        assert copy.missing == "keep"
    with pytest.raises(ValueError, match="df: column 'a' has 1 of 6 rows with infinite values"):
        pre.transform(frame.assign(a=[1.0, np.inf, 3.0, 4.0, 5.0, 6.0]))
    with pytest.raises(ValueError, match="df: column 'a' has 2 of 6 rows with NaN"):
        Preprocessor(columns=["a"]).fit(frame)  # the default: an error naming the column
    with pytest.raises(ValueError, match="missing: expected one of"):
        Preprocessor(missing="impute")


def test_an_unfitted_preprocessor_takes_the_declared_categorical_columns(small_frame):
    """``categorical=`` of from_frame one-hot encodes its columns with a given unfitted preprocessor that
    declares none itself, as with the preprocessor from_frame makes; one that declares its own keeps them."""
    given = FairData.from_frame(small_frame, target="y", sensitive="sex", categorical=["band"],
                                preprocessor=Preprocessor(missing="keep"))
    made = FairData.from_frame(small_frame, target="y", sensitive="sex", categorical=["band"])
    assert given.feature_names == made.feature_names and "band=2" in given.feature_names
    assert torch.equal(given.X, made.X)
    own = FairData.from_frame(small_frame, target="y", sensitive="sex", categorical=["band"],
                              preprocessor=Preprocessor(categorical=[]))
    assert "band" in own.feature_names


def test_from_frame_with_a_missing_keeping_preprocessor(small_frame):
    frame = small_frame.assign(a=[1.0, np.nan, 3.0, 4.0, 5.0, 6.0])
    data = FairData.from_frame(frame, target="y", sensitive="sex", preprocessor=Preprocessor(missing="keep"))
    assert int(torch.isnan(data.X).sum()) == 1
    assert int(torch.isnan(data.transform(frame).X).sum()) == 1  # new rows through the same preprocessor
    with pytest.raises(ValueError, match="features: column 'a' has 1 of 6 rows with NaN"):
        FairData.from_frame(frame, target="y", sensitive="sex")


# --------------------------------------------------------------------------------------
# from_frame: encodings
# --------------------------------------------------------------------------------------
def test_from_frame_contract_dtypes_and_shapes(small_frame):
    data = FairData.from_frame(small_frame, target="y", sensitive=["sex", "band"], categorical=["band"],
                               include_sensitive=True)
    n = len(small_frame)
    assert len(data) == n and data.X.dtype == torch.float32 and data.X.shape == (n, data.n_features)
    assert data.y.dtype == torch.float32 and data.y.tolist() == [0, 1, 0, 1, 1, 0]
    assert data.sensitive["sex"].dtype == torch.float32
    assert data.sensitive["band"].dtype == torch.int64
    assert data.cells.dtype == torch.int64 and data.strata is data.cells
    assert data.exposure is None and data.task == "binary"
    assert data.sensitive_names == ["sex", "band"] and data.target_name == "y"
    assert data.feature_names == ["a", "c=x", "c=y", "c=z", "sex=f", "sex=m", "band=0", "band=1", "band=2"]
    assert data.frame is small_frame


def test_sensitive_kind_inference():
    df = pd.DataFrame({
        "zero_one": [0, 1, 1, 0, 1, 0],
        "two_text": ["Male", "Female", "Male", "Male", "Female", "Female"],
        "two_numeric": [1, 2, 2, 1, 1, 2],
        "flag": [True, False, True, True, False, False],
        "multi_text": ["a", "b", "c", "a", "b", "c"],
        "multi_numeric": [18.0, 25.5, 40.0, 33.0, 61.0, 29.0],
        "bands": [1, 2, 3, 1, 2, 3],
        "y": [0, 1, 0, 1, 0, 1],
    })
    names = ["zero_one", "two_text", "two_numeric", "flag", "multi_text", "multi_numeric", "bands"]
    data = FairData.from_frame(df, target="y", sensitive=names, sensitive_kinds={"bands": "categorical"},
                               include_sensitive=True)  # every column is sensitive: they are the inputs too
    assert data.sensitive_kinds == {
        "zero_one": "binary", "two_text": "binary", "two_numeric": "binary", "flag": "binary",
        "multi_text": "categorical", "multi_numeric": "continuous", "bands": "categorical",
    }
    assert data.sensitive_levels["zero_one"] == [0, 1]
    assert data.sensitive["zero_one"].tolist() == [0, 1, 1, 0, 1, 0]  # kept as is
    assert data.sensitive_levels["two_text"] == ["Female", "Male"]  # sorted: Male = 1
    assert data.sensitive["two_text"].tolist() == [1, 0, 1, 1, 0, 0]
    assert data.sensitive_levels["two_numeric"] == [1, 2]
    assert data.sensitive["two_numeric"].tolist() == [0, 1, 1, 0, 0, 1]
    assert data.sensitive["flag"].tolist() == [1, 0, 1, 1, 0, 0]
    assert data.sensitive["multi_text"].tolist() == [0, 1, 2, 0, 1, 2]
    assert data.sensitive_levels["multi_numeric"] == []
    np.testing.assert_array_equal(data.sensitive["multi_numeric"].numpy(), df["multi_numeric"].to_numpy(np.float32))
    assert data.sensitive_levels["bands"] == [1, 2, 3] and data.sensitive["bands"].dtype == torch.int64


def test_categorical_argument_also_types_a_numeric_sensitive_column(small_frame):
    as_numbers = FairData.from_frame(small_frame, target="y", sensitive=["band"])
    as_groups = FairData.from_frame(small_frame, target="y", sensitive=["band"], categorical=["band"])
    assert as_numbers.sensitive_kinds["band"] == "continuous"
    assert as_groups.sensitive_kinds["band"] == "categorical"


def test_cells_match_brute_force_intersection():
    df = synthetic_frame(300, seed=1)
    data = FairData.from_frame(df, target="y", sensitive=["race", "sex", "age"])
    combos = sorted(set(zip(df["race"], df["sex"])))  # age is continuous: not part of cells
    assert data.n_cells == len(combos) == 6
    assert data.cell_levels == combos  # ids follow the sorted mixed-radix code
    expected = np.array([combos.index(pair) for pair in zip(df["race"], df["sex"])])
    np.testing.assert_array_equal(data.cells.numpy(), expected)


def test_cells_compact_over_present_combinations_only():
    codes = [np.array([0, 2, 2, 0]), np.array([1, 0, 0, 1])]
    cells, keys = intersection_cells(codes, [3, 2], 4)
    np.testing.assert_array_equal(keys, [1, 4])  # keys 0*2+1 and 2*2+0
    np.testing.assert_array_equal(cells, [0, 1, 1, 0])


def test_cells_are_zero_without_discrete_sensitive_features():
    df = synthetic_frame(50)
    data = FairData.from_frame(df, target="y", sensitive=["age"])
    assert data.n_cells == 1 and int(data.cells.abs().sum()) == 0


def test_include_sensitive_flag():
    """Sensitive columns are not model inputs by default (they are removed even when listed
    in ``features``); ``include_sensitive=True`` appends them."""
    df = synthetic_frame(60)
    inside = FairData.from_frame(df, target="y", sensitive=["sex"], features=["income", "job"], include_sensitive=True)
    outside = FairData.from_frame(df, target="y", sensitive=["sex"], features=["income", "job", "sex"])
    assert inside.feature_names[-2:] == ["sex=female", "sex=male"]
    assert not any(name.startswith("sex") for name in outside.feature_names)
    assert outside.include_sensitive is False and torch.equal(inside.sensitive["sex"], outside.sensitive["sex"])
    default = FairData.from_frame(df, target="y", sensitive=["sex"], exposure="expo", include_sensitive=False)
    assert set(default.feature_columns) == {"income", "hours", "job", "race", "age", "count"}


def test_poisson_task_with_exposure():
    df = synthetic_frame(80)
    data = FairData.from_frame(df, target="count", sensitive=["sex"], features=["income"], task="poisson",
                               exposure="expo")
    np.testing.assert_allclose(data.exposure.numpy(), df["expo"].to_numpy(np.float32))
    np.testing.assert_array_equal(data.y.numpy(), df["count"].to_numpy(np.float32))
    assert "expo" not in data.feature_columns


def test_binary_target_accepts_bool_and_float_zero_one(small_frame):
    as_bool = FairData.from_frame(small_frame.assign(y=small_frame["y"].astype(bool)), target="y", sensitive="sex")
    as_float = FairData.from_frame(small_frame.assign(y=small_frame["y"].astype(float)), target="y", sensitive="sex")
    assert as_bool.y.tolist() == as_float.y.tolist() == [0, 1, 0, 1, 1, 0]


# --------------------------------------------------------------------------------------
# subset
# --------------------------------------------------------------------------------------
def test_subset_indexes_every_field_and_frame_lazily():
    df = synthetic_frame(100)
    data = FairData.from_frame(df, target="y", sensitive=["sex", "race"], exposure="expo")
    idx = torch.tensor([5, 3, 99, 3])
    part = data.subset(idx)
    assert len(part) == 4
    assert torch.equal(part.X, data.X[idx]) and torch.equal(part.y, data.y[idx])
    assert torch.equal(part.cells, data.cells[idx]) and torch.equal(part.exposure, data.exposure[idx])
    for name in data.sensitive:
        assert torch.equal(part.sensitive[name], data.sensitive[name][idx])
    assert part._frame_cache is None  # no pandas work until the frame is read
    assert part.frame.index.tolist() == [5, 3, 99, 3]
    nested = part.subset(np.array([True, False, True, False]))
    assert nested.frame.index.tolist() == [5, 99]
    assert data.subset(slice(10, 13)).frame.index.tolist() == [10, 11, 12]
    assert part.n_cells == data.n_cells and part.sensitive_levels == data.sensitive_levels


def test_subset_by_long_index_equals_advanced_indexing_and_keeps_negative_positions():
    data = FairData.from_frame(synthetic_frame(50), target="y", sensitive=["sex", "race"], exposure="expo")
    for idx in (torch.tensor([7, 0, 49, 7]), torch.tensor([-1, 3, -50]), torch.zeros(0, dtype=torch.long)):
        part = data.subset(idx)
        for got, full in ((part.X, data.X), (part.y, data.y), (part.cells, data.cells), (part.exposure, data.exposure)):
            assert torch.equal(got, full[idx])
        assert part.frame.index.tolist() == [int(i) % 50 for i in idx]
    with pytest.raises(IndexError):
        data.subset(torch.tensor([50]))


def test_subset_missing_a_group_is_not_an_error():
    df = synthetic_frame(100)
    data = FairData.from_frame(df, target="y", sensitive=["race"])
    only_a = np.flatnonzero(df["race"].to_numpy() == "A")
    part = data.subset(only_a)
    assert set(part.sensitive["race"].tolist()) == {0} and part.sensitive_levels["race"] == ["A", "B", "C"]


def test_subset_rejects_bad_mask_length():
    data = FairData.from_frame(synthetic_frame(10), target="y", sensitive="sex")
    with pytest.raises(ValueError, match="idx: boolean mask of shape"):
        data.subset(np.ones(3, dtype=bool))


# --------------------------------------------------------------------------------------
# split
# --------------------------------------------------------------------------------------
def test_split_is_deterministic_disjoint_and_sized():
    data = FairData.from_frame(synthetic_frame(401), target="y", sensitive=["sex", "race"])
    train, test = data.split(test_size=0.25, seed=3)
    again_train, _ = data.split(test_size=0.25, seed=3)
    other_train, _ = data.split(test_size=0.25, seed=4)
    train_rows, test_rows = train._rows.numpy(), test._rows.numpy()
    assert len(test_rows) == 101 and len(train_rows) == 300  # ceil(0.25 * 401) test rows
    assert np.intersect1d(train_rows, test_rows).size == 0
    np.testing.assert_array_equal(np.sort(np.concatenate([train_rows, test_rows])), np.arange(401))
    np.testing.assert_array_equal(train_rows, again_train._rows.numpy())
    assert torch.equal(train.X, again_train.X)
    assert not np.array_equal(train_rows, other_train._rows.numpy())


def test_split_stratifies_by_target_and_cell():
    df = synthetic_frame(1000, seed=2)
    data = FairData.from_frame(df, target="y", sensitive=["sex", "race"])
    train, test = data.split(test_size=0.2, seed=0)
    strata = data.y.long() * data.n_cells + data.cells
    test_strata = test.y.long() * test.n_cells + test.cells
    for s in strata.unique():
        expected = 0.2 * int((strata == s).sum())
        assert abs(int((test_strata == s).sum()) - expected) < 1.0  # largest-remainder apportionment


def test_split_refits_preprocessor_on_train_rows_only(caplog):
    df = synthetic_frame(200, seed=5)
    df.loc[199, "job"] = "astronaut"  # one row with a unique level
    data = FairData.from_frame(df, target="y", sensitive=["sex"], features=["income", "job"])
    with caplog.at_level(logging.WARNING, logger="fairopt.data"):
        train, test = data.split(test_size=0.3, seed=1, stratify=False)
    train_income = df["income"].to_numpy()[train._rows.numpy()]
    mean, std = train_income.mean(), train_income.std()
    column = train.feature_names.index("income")
    np.testing.assert_allclose(train.X[:, column].numpy(), (train_income - mean) / std, atol=1e-5)
    test_income = df["income"].to_numpy()[test._rows.numpy()]
    np.testing.assert_allclose(test.X[:, column].numpy(), (test_income - mean) / std, atol=1e-5)
    assert train.preprocessor is test.preprocessor and train.preprocessor is not data.preprocessor
    assert abs(train.preprocessor.means_["income"] - data.preprocessor.means_["income"]) > 1e-6
    if 199 in test._rows.tolist():  # the unique level is unseen by the train fit
        assert "job=astronaut" not in train.feature_names
        row = test._rows.tolist().index(199)
        job_columns = [j for j, name in enumerate(test.feature_names) if name.startswith("job=")]
        assert float(test.X[row, job_columns].abs().sum()) == 0.0
        assert "not seen at fit time" in caplog.text
    else:
        assert "job=astronaut" in train.feature_names


def test_split_apportionment_hand_example():
    strata = np.array([0] * 5 + [1] * 3 + [2] * 2)
    train, test = stratified_split_indices(strata, 0.3, seed=0)
    # 3 test rows; exact shares 1.5, 0.9, 0.6 -> floors 1, 0, 0 -> remainders give +1 to strata 1 and 2
    assert np.bincount(strata[test], minlength=3).tolist() == [1, 1, 1]
    assert len(train) == 7


# --------------------------------------------------------------------------------------
# new data with an existing encoding
# --------------------------------------------------------------------------------------
def test_transform_new_rows_like_reference():
    df = synthetic_frame(300, seed=7)
    data = FairData.from_frame(df, target="y", sensitive=["race", "sex"])
    new = synthetic_frame(40, seed=8)
    new = new[new["race"] == "C"]  # only one race level: codes must still follow the reference
    encoded = data.transform(new)
    assert encoded.sensitive_levels == data.sensitive_levels
    assert set(encoded.sensitive["race"].tolist()) == {2}
    X_expected, _ = data.preprocessor.transform(new)
    np.testing.assert_array_equal(encoded.X.numpy(), X_expected)
    reference_cells = dict(zip(data.cell_levels, range(data.n_cells)))
    expected_cells = [reference_cells[pair] for pair in zip(new["race"], new["sex"])]
    assert encoded.cells.tolist() == expected_cells and encoded.n_cells == data.n_cells


def test_from_frame_with_fitted_preprocessor_and_with_preprocessor():
    df = synthetic_frame(120)
    data = FairData.from_frame(df, target="y", sensitive=["sex"], features=["income", "job"])
    other = synthetic_frame(30, seed=9)
    encoded = FairData.from_frame(other, target="y", sensitive=["sex"], preprocessor=data.preprocessor)
    np.testing.assert_array_equal(encoded.X.numpy(), data.preprocessor.transform(other)[0])
    refit = Preprocessor(["income", "job", "sex"]).fit(other)
    swapped = data.with_preprocessor(refit)
    np.testing.assert_array_equal(swapped.X.numpy(), refit.transform(df)[0])
    with pytest.raises(ValueError, match="preprocessor: fitted on columns"):
        FairData.from_frame(other, target="y", sensitive=["sex"], features=["income"], preprocessor=data.preprocessor)


# --------------------------------------------------------------------------------------
# from_arrays
# --------------------------------------------------------------------------------------
def test_from_arrays_wraps_from_frame():
    rng = np.random.default_rng(0)
    X = rng.normal(size=(50, 3))
    y = rng.integers(0, 2, 50)
    s = rng.integers(0, 2, 50)
    data = FairData.from_arrays(X, torch.as_tensor(y), {"group": s}, task="binary", feature_names=["u", "v", "w"])
    assert data.feature_names == ["u", "v", "w"]  # sensitive not appended by default
    np.testing.assert_allclose(data.X.numpy(), (X - X.mean(0)) / X.std(0), atol=1e-5)
    assert data.sensitive["group"].tolist() == s.tolist() and data.sensitive_kinds["group"] == "binary"
    with_s = FairData.from_arrays(X, y, {"group": s}, include_sensitive=True)
    assert with_s.feature_names == ["x0", "x1", "x2", "group"]


def test_from_arrays_validation():
    X = np.zeros((5, 2))
    with pytest.raises(ValueError, match="length mismatch: X has 5, y has 4"):
        FairData.from_arrays(X, np.zeros(4), {"s": np.array([0, 1, 0, 1, 0])})
    with pytest.raises(ValueError, match=r"X: expected a 2-D array"):
        FairData.from_arrays(np.zeros(5), np.zeros(5), {"s": np.array([0, 1, 0, 1, 0])})
    with pytest.raises(ValueError, match="sensitive: expected a dict"):
        FairData.from_arrays(X, np.zeros(5), [0, 1, 0, 1, 0])


# --------------------------------------------------------------------------------------
# validation: one test per bad input
# --------------------------------------------------------------------------------------
def _build(df, **overrides):
    arguments = {"target": "y", "sensitive": ["sex"]}
    arguments.update(overrides)
    return FairData.from_frame(df, **arguments)


def test_unknown_target_column(small_frame):
    with pytest.raises(ValueError, match=r"target: column\(s\) \['label'\] not found"):
        _build(small_frame, target="label")


def test_unknown_sensitive_column(small_frame):
    with pytest.raises(ValueError, match=r"sensitive: column\(s\) \['gender'\] not found"):
        _build(small_frame, sensitive=["gender"])


def test_unknown_feature_column(small_frame):
    with pytest.raises(ValueError, match=r"features: column\(s\) \['b'\] not found"):
        _build(small_frame, features=["a", "b"])


def test_unknown_categorical_column(small_frame):
    with pytest.raises(ValueError, match=r"categorical: column\(s\) \['kind'\] not found"):
        _build(small_frame, categorical=["kind"])


def test_unknown_exposure_column(small_frame):
    with pytest.raises(ValueError, match=r"exposure: column\(s\) \['time'\] not found"):
        _build(small_frame, exposure="time")


def test_nan_in_feature_column(small_frame):
    bad = small_frame.assign(a=[1.0, np.nan, np.nan, 4.0, 5.0, 6.0])
    with pytest.raises(ValueError, match="features: column 'a' has 2 of 6 rows with NaN"):
        _build(bad)


def test_inf_in_feature_column(small_frame):
    bad = small_frame.assign(a=[1.0, np.inf, 3.0, 4.0, 5.0, 6.0])
    with pytest.raises(ValueError, match="features: column 'a' has 1 of 6 rows with NaN/inf"):
        _build(bad)


def test_missing_value_in_categorical_feature(small_frame):
    bad = small_frame.assign(c=["x", None, "x", "y", "z", "z"])
    with pytest.raises(ValueError, match="features: column 'c' has 1 of 6 rows"):
        _build(bad)


def test_nan_in_target(small_frame):
    bad = small_frame.assign(y=[0, 1, np.nan, 1, 1, 0])
    with pytest.raises(ValueError, match="target: column 'y' has 1 of 6 rows with NaN"):
        _build(bad)


def test_nan_in_sensitive(small_frame):
    bad = small_frame.assign(sex=["m", "f", None, "f", "m", "f"])
    with pytest.raises(ValueError, match="sensitive: column 'sex' has 1 of 6 rows"):
        _build(bad)


def test_nan_in_exposure(small_frame):
    bad = small_frame.assign(t=[1.0, 1.0, np.nan, 1.0, 1.0, 0.5])
    with pytest.raises(ValueError, match="exposure: column 't' has 1 of 6 rows with NaN"):
        _build(bad, exposure="t")


def test_binary_target_not_zero_one(small_frame):
    with pytest.raises(ValueError, match=r"target: column 'y' must hold 0/1 values .* e\.g\. \[2\.0\]"):
        _build(small_frame.assign(y=[0, 1, 2, 1, 1, 0]))


def test_binary_target_text_labels(small_frame):
    with pytest.raises(ValueError, match="target: column 'y' must be numeric"):
        _build(small_frame.assign(y=["no", "yes", "no", "yes", "yes", "no"]))


def test_poisson_negative_count(small_frame):
    with pytest.raises(ValueError, match=r"target: column 'y' has 1 negative counts \(e\.g\. -1\.0\)"):
        _build(small_frame.assign(y=[0, 1, -1, 3, 1, 0]), task="poisson")


def test_poisson_non_integer_count(small_frame):
    with pytest.raises(ValueError, match=r"target: column 'y' has 1 non-integer counts \(e\.g\. 0\.5\)"):
        _build(small_frame.assign(y=[0, 1, 0.5, 3, 1, 0]), task="poisson")


def test_non_positive_exposure(small_frame):
    with pytest.raises(ValueError, match=r"exposure: column 't' has 2 non-positive values \(e\.g\. 0\.0\)"):
        _build(small_frame.assign(t=[1.0, 0.0, 1.0, -2.0, 1.0, 1.0]), exposure="t")


def test_unknown_task(small_frame):
    with pytest.raises(ValueError, match="task: expected one of .* got 'classification'"):
        _build(small_frame, task="classification")


def test_sensitive_with_single_group(small_frame):
    with pytest.raises(ValueError, match=r"sensitive: column 'sex' has only 1 group\(s\) \['f'\]"):
        _build(small_frame.assign(sex=["f"] * 6))


def test_unknown_sensitive_kind(small_frame):
    with pytest.raises(ValueError, match="sensitive_kinds: unknown kind"):
        _build(small_frame, sensitive_kinds={"sex": "ordinal"})


def test_declared_binary_with_three_levels(small_frame):
    with pytest.raises(ValueError, match="sensitive_kinds: column 'c' declared 'binary' but has 3 levels"):
        _build(small_frame, sensitive=["c"], sensitive_kinds={"c": "binary"})


def test_features_containing_the_target(small_frame):
    with pytest.raises(ValueError, match=r"features: \['y'\] is the target"):
        _build(small_frame, features=["a", "y"])


@pytest.mark.parametrize("test_size", [0, 1, 1.5, -0.2, "0.2"])
def test_split_test_size_out_of_range(small_frame, test_size):
    data = _build(small_frame)
    with pytest.raises(ValueError, match=f"test_size: expected a fraction in \\(0, 1\\), got {test_size!r}"):
        data.split(test_size=test_size)


def test_split_seed_not_an_integer(small_frame):
    with pytest.raises(ValueError, match="seed: expected an integer, got 0.5"):
        _build(small_frame).split(seed=0.5)


def test_empty_frame(small_frame):
    with pytest.raises(ValueError, match=r"df: the frame is empty \(0 rows\)"):
        _build(small_frame.iloc[:0])


def test_not_a_frame():
    with pytest.raises(ValueError, match="df: expected a pandas DataFrame, got dict"):
        FairData.from_frame({"y": [0, 1]}, target="y", sensitive=["s"])


# --------------------------------------------------------------------------------------
# performance
# --------------------------------------------------------------------------------------
def test_from_frame_100k_rows_and_many_subsets():
    """Scale check (timings belong in benchmarks/, not tests): 100k x 20 encodes, and
    mini-batch subsets index tensors without materialising the raw frame."""
    rng = np.random.default_rng(0)
    n = 100_000
    df = pd.DataFrame({f"num{j}": rng.normal(size=n) for j in range(15)})
    for j in range(3):
        df[f"cat{j}"] = rng.choice(list("abcdefgh"), n)
    df["sex"] = rng.choice(["F", "M"], n)
    df["race"] = rng.choice(["A", "B", "C", "D"], n)
    df["y"] = rng.integers(0, 2, n)
    data = FairData.from_frame(df, target="y", sensitive=["sex", "race"], include_sensitive=True)
    assert data.X.shape == (n, 15 + 3 * 8 + 2 + 4) and data.n_cells == 8
    for idx in torch.randint(0, n, (200, 256)):
        batch = data.subset(idx)
        assert len(batch) == 256 and batch._frame_cache is None
        torch.testing.assert_close(batch.X, data.X[idx])


# --------------------------------------------------------------------------------------
# numeric-looking text columns: one rule (coerce_numeric_columns)
# --------------------------------------------------------------------------------------
def numeric_text_frame(n: int = 200, seed: int = 3) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Four input columns of distinct numbers, as floats and as text (object dtype)."""
    rng = np.random.default_rng(seed)
    numbers = pd.DataFrame({
        "f1": np.round(rng.normal(size=n), 3),
        "f2": rng.permutation(n).astype(float),
        "f3": np.round(rng.uniform(-5, 5, n), 2),
        "f4": np.round(rng.exponential(size=n), 4) + 1e3,
    })
    text = numbers.apply(lambda column: column.map(repr)).astype(object)
    text["f2"] = numbers["f2"].astype(int).astype(str).astype(object)  # integers spelled "3"
    extra = {"sex": rng.choice(["f", "m"], n), "y": rng.integers(0, 2, n)}
    return numbers.assign(**extra), text.assign(**extra)


def test_numeric_text_columns_become_one_numeric_feature_each():
    numbers, text = numeric_text_frame()
    assert all(text[c].dtype == object for c in ["f1", "f2", "f3", "f4"])
    data = FairData.from_frame(text, target="y", sensitive="sex", include_sensitive=False)
    assert data.n_features == 4  # not one indicator per distinct value (769 features before the fix)
    assert data.feature_names == ["f1", "f2", "f3", "f4"]
    reference = FairData.from_frame(numbers, target="y", sensitive="sex", include_sensitive=False)
    torch.testing.assert_close(data.X, reference.X, rtol=0, atol=0)
    assert data.frame is text  # the raw rows are kept as given


def test_from_arrays_with_numeric_text_matches_numbers():
    numbers, text = numeric_text_frame(n=50)
    cols = ["f1", "f2", "f3", "f4"]
    data = FairData.from_arrays(text[cols].to_numpy(dtype=object), text["y"], {"sex": text["sex"]})
    reference = FairData.from_arrays(numbers[cols].to_numpy(), numbers["y"], {"sex": numbers["sex"]})
    assert data.n_features == 4
    torch.testing.assert_close(data.X, reference.X, rtol=0, atol=0)


def test_transform_converts_numeric_text_like_training_and_names_a_bad_column():
    numbers, text = numeric_text_frame(n=60)
    train = FairData.from_frame(numbers.iloc[:40], target="y", sensitive="sex", include_sensitive=False)
    test_text = train.transform(text.iloc[40:])
    test_numbers = train.transform(numbers.iloc[40:])
    torch.testing.assert_close(test_text.X, test_numbers.X, rtol=0, atol=0)
    broken = text.iloc[40:].copy()
    broken.iloc[3, broken.columns.get_loc("f3")] = "n/a"
    with pytest.raises(ValueError, match=r"column 'f3' was numeric when the preprocessor was fitted .*'n/a'"):
        train.transform(broken)


def test_mixed_text_column_stays_categorical():
    df = pd.DataFrame({"code": ["1", "a", "2", "1", "a", "2"], "v": ["0.5", "1", "2", "3", "4", "5"],
                       "sex": ["f", "m"] * 3, "y": [0, 1] * 3})
    data = FairData.from_frame(df, target="y", sensitive="sex", include_sensitive=False)
    assert data.feature_names == ["code=1", "code=2", "code=a", "v"]
    assert data.preprocessor.categorical_ == ["code"] and data.preprocessor.numeric_ == ["v"]


def test_coerce_numeric_columns_rule():
    from fairopt.data import coerce_numeric_columns

    df = pd.DataFrame({
        "text": [" 1.5", "3", "-2e3", "4"],
        "objects": pd.Series([1, 2.5, "3", np.int64(4)], dtype=object),
        "mixed": ["1", "a", "2", "3"],
        "bools": pd.Series([True, False, True, False], dtype=object),
        "category": pd.Categorical(["1", "2", "1", "2"]),
        "floats": [1.0, 2.0, 3.0, 4.0],
        "strings": pd.array(["7", "8", None, "9"], dtype="string"),
        "empty": pd.Series([None, None, None, None], dtype=object),
    })
    out, converted = coerce_numeric_columns(df)
    assert converted == ["text", "objects", "strings"]
    np.testing.assert_array_equal(out["text"].to_numpy(), [1.5, 3.0, -2000.0, 4.0])
    np.testing.assert_array_equal(out["objects"].to_numpy(), [1.0, 2.5, 3.0, 4.0])
    np.testing.assert_array_equal(out["strings"].to_numpy(), [7.0, 8.0, np.nan, 9.0])
    assert all(out[c].dtype == np.float64 for c in converted)
    for name in ["mixed", "bools", "category", "floats", "empty"]:
        pd.testing.assert_series_equal(out[name], df[name])
    assert df["text"].tolist() == [" 1.5", "3", "-2e3", "4"]  # the input frame is not modified
    same, none = coerce_numeric_columns(df, columns=["mixed", "floats"])
    assert same is df and none == []
    with pytest.raises(ValueError, match=r"columns: column\(s\) \['nope'\] not found"):
        coerce_numeric_columns(df, columns=["nope"])
    with pytest.raises(ValueError, match="frame: expected a pandas DataFrame, got list"):
        coerce_numeric_columns([["1"]])


def test_missing_values_in_numeric_text_columns():
    from fairopt.data import coerce_numeric_columns

    df = pd.DataFrame({"v": ["1", None, "2.5", np.nan, "4", "5"], "w": ["1", None, "x", "2", "3", "4"],
                       "sex": ["f", "m"] * 3, "y": [0, 1] * 3})
    out, converted = coerce_numeric_columns(df, ["v", "w"])
    assert converted == ["v"]  # missing values do not count against the rule
    np.testing.assert_array_equal(out["v"].to_numpy(), [1.0, np.nan, 2.5, np.nan, 4.0, 5.0])
    assert out["w"] is df["w"] or out["w"].equals(df["w"])
    # a numeric column with missing values is refused like any other (drop or impute first)
    with pytest.raises(ValueError, match=r"features: column 'v' has 2 of 6 rows with NaN/inf/missing"):
        FairData.from_frame(df, target="y", sensitive="sex", features=["v"])
    clean = FairData.from_frame(df.dropna(subset=["v"]), target="y", sensitive="sex", features=["v"],
                                include_sensitive=False)
    assert clean.feature_names == ["v"]


def test_declared_categorical_and_sensitive_numeric_text_are_not_converted():
    df = pd.DataFrame({"zip": ["02134", "10001", "02134", "94105"], "grp": ["1", "2", "3", "1"],
                       "v": ["1", "2", "3", "4"], "y": [0, 1, 0, 1]})
    data = FairData.from_frame(df, target="y", sensitive="grp", categorical=["zip"], include_sensitive=True)
    assert data.feature_names == ["zip=02134", "zip=10001", "zip=94105", "grp=1", "grp=2", "grp=3", "v"]
    assert data.sensitive_kinds["grp"] == "categorical" and data.sensitive_levels["grp"] == ["1", "2", "3"]


def test_conversion_is_logged_with_the_column_names(caplog):
    _, text = numeric_text_frame(n=20)
    with caplog.at_level(logging.INFO, logger="fairopt.data"):
        FairData.from_frame(text, target="y", sensitive="sex", include_sensitive=False)
    messages = [r.getMessage() for r in caplog.records if r.name == "fairopt.data" and "converted to numeric" in
                r.getMessage()]
    assert messages == ["columns holding only numbers as text converted to numeric: ['f1', 'f2', 'f3', 'f4']"]
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="fairopt.data"):
        FairData.from_frame(text.astype({"f1": float}).drop(columns=["f2", "f3", "f4"]), target="y", sensitive="sex")
    assert not [r for r in caplog.records if "converted to numeric" in r.getMessage()]
    from fairopt.data import coerce_numeric_columns

    caplog.clear()  # the numbers of an object array (a frame with text columns passed through numpy) are no text
    numbers = pd.DataFrame({"age": np.array([30, 41, 52, 23], dtype=object), "job": ["a", "b", "a", "b"]})
    with caplog.at_level(logging.INFO, logger="fairopt.data"):
        _, converted = coerce_numeric_columns(numbers)
    assert converted == ["age"] and not [r for r in caplog.records if "converted to numeric" in r.getMessage()]


def test_memmap_round_trip_reads_only_the_rows_it_indexes(tmp_path):
    """save_memmap/load_memmap: the loaded FairData equals the saved one field by field, its
    tensors are views of the files (nothing copied at load), and a subset is a FairData."""
    import fairopt
    from fairopt.data import load_memmap, save_memmap

    frame, _ = fairopt.datasets.load_frame("adult")
    frame = frame.sample(n=500, random_state=0)
    data = FairData.from_frame(frame, target="income", sensitive=["sex", "race"])
    loaded = load_memmap(save_memmap(data, tmp_path / "rows"))
    for field in ("X", "y", "cells"):
        assert torch.equal(getattr(loaded, field), getattr(data, field))
    for name in data.sensitive_names:
        assert torch.equal(loaded.sensitive[name], data.sensitive[name])
    assert (loaded.task, loaded.sensitive_kinds, loaded.n_cells, loaded.feature_names) == (
        data.task, data.sensitive_kinds, data.n_cells, data.feature_names)
    assert loaded.sensitive_levels == {k: list(v) for k, v in data.sensitive_levels.items()}
    assert not loaded.X.numpy().flags.owndata  # a view of the mapped file, not a copy
    part = loaded.subset(torch.arange(10, 20))
    assert torch.equal(part.X, data.X[10:20]) and torch.equal(part.cells, data.cells[10:20])


def test_memmap_errors_name_the_file(tmp_path):
    from fairopt.data import load_memmap, save_memmap

    with pytest.raises(ValueError, match="no meta.json"):
        load_memmap(tmp_path)
    data = FairData.from_arrays(np.random.default_rng(0).normal(size=(30, 2)), np.r_[np.zeros(15), np.ones(15)],
                                {"s": np.r_[np.zeros(10), np.ones(20)]})
    path = save_memmap(data, tmp_path / "d")
    (path / "y.npy").unlink()
    with pytest.raises(ValueError, match="missing y.npy"):
        load_memmap(path)
    with pytest.raises(ValueError, match="expected a FairData"):
        save_memmap({"X": 1}, tmp_path / "e")


def test_split_keeps_numbers_held_as_text_numeric():
    """Regression (found through the CLI): split() re-fitted the preprocessor on the raw frame
    without the numbers-as-text rule, so a column such as "52300" became one-hot encoded in
    both parts (with unseen-level warnings)."""
    rng = np.random.default_rng(0)
    n = 200
    df = pd.DataFrame({"income": [str(v) for v in rng.integers(20_000, 90_000, n)],
                       "city": rng.choice(["Lyon", "Porto"], n), "sex": rng.choice(["f", "m"], n),
                       "y": rng.integers(0, 2, n)})
    data = FairData.from_frame(df, target="y", sensitive="sex")
    assert data.preprocessor.numeric_ == ["income"]
    train, test = data.split(test_size=0.25, seed=0)
    for part in (train, test):
        assert part.preprocessor.numeric_ == ["income"] and part.feature_names == ["income", "city=Lyon", "city=Porto"]
    np.testing.assert_allclose(train.X[:, 0].mean().item(), 0.0, atol=1e-6)  # standardised on the train rows
    again = data.with_preprocessor(train.preprocessor)
    assert again.feature_names == train.feature_names and again.X.shape == data.X.shape


def test_levels_that_differ_only_by_spaces_around_them_get_a_hint(caplog):
    """A file written without the training file's leading spaces (' Private' against 'Private'): every row is
    unseen, and the warning says the values differ by spaces (it did not, unlike the labels' check)."""
    import logging

    from fairopt.data.preprocessing import Preprocessor

    fitted = Preprocessor(columns=["job"], categorical=["job"]).fit(pd.DataFrame({"job": [" Private", " Gov"]}))
    with caplog.at_level(logging.WARNING, logger="fairopt.data"):
        fitted.transform(pd.DataFrame({"job": ["Private", "Other"]}))
    assert "seen at fit time: ' Private', the same values with spaces around them" in caplog.text
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="fairopt.data"):
        fitted.transform(pd.DataFrame({"job": ["Other"]}))
    assert "not seen at fit time" in caplog.text and "spaces" not in caplog.text
