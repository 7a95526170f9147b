"""fairopt.save / fairopt.load and StochasticSQP checkpoints (state_dict / fit(resume=))."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pandas as pd
import pytest
import torch
from sklearn.exceptions import NotFittedError
from torch import nn

import fairopt
from fairopt.constraints import DisparateImpact, GeDI
from fairopt.estimators import FairClassifier, FairRegressor
from fairopt.exceptions import FairnessWarning
from fairopt.persistence import FORMAT_VERSION, SavedModel, load, save
from solvers import FitResult, History, StochasticSQP
from solvers.moving_targets import MovingTargets

N_TRAIN = 613  # a row count no parameter tensor has, to spot stored data


@pytest.fixture(autouse=True, scope="module")
def _one_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def adult():
    data = fairopt.datasets.load("adult")
    idx = torch.randperm(len(data), generator=torch.Generator().manual_seed(2))[:N_TRAIN]
    return data.subset(idx)


@pytest.fixture(scope="module")
def arrays(adult):
    X = adult.frame[["age", "education-num", "hours-per-week", "capital-gain"]].to_numpy(dtype=float)
    return X, adult.y.numpy(), adult.sensitive["sex"].numpy(), adult.frame["age"].to_numpy(dtype=float)


def _quiet(fn, *args, **kwargs):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FairnessWarning)
        return fn(*args, **kwargs)


def _walk(obj):
    """Every value inside a payload (dicts, lists, tuples)."""
    yield obj
    if isinstance(obj, dict):
        for v in obj.values():
            yield from _walk(v)
    elif isinstance(obj, (list, tuple)):
        for v in obj:
            yield from _walk(v)


def _assert_no_training_rows(path):
    payload = torch.load(path, weights_only=True)  # plain tensors and Python values only
    for value in _walk(payload):
        if isinstance(value, torch.Tensor):
            assert N_TRAIN not in value.shape
        if isinstance(value, (list, tuple)):
            assert len(value) != N_TRAIN
    return payload


# ----------------------------------------------------------------------------- estimators
@pytest.mark.parametrize("method", ["sqp", "moving_targets"])
def test_classifier_round_trip(tmp_path, arrays, method):
    X, y, s, _ = arrays
    labels = np.where(y > 0, "high", "low")
    clf = FairClassifier([("disparate_impact", "sex", 0.8), DisparateImpact("sex", delta=0.7)], method=method,
                         model="mlp", hidden=(5,), epochs=15, engine_params={"iterations": 2}
                         if method == "moving_targets" else {"lr_schedule": False})
    _quiet(clf.fit, X, labels, sensitive_features={"sex": s})
    path = tmp_path / "clf.pt"
    save(clf, path)
    payload = _assert_no_training_rows(path)
    assert payload["format_version"] == FORMAT_VERSION and payload["model"]["spec"]["kind"] == "mlp"
    loaded = load(path)
    assert type(loaded) is FairClassifier
    np.testing.assert_array_equal(loaded.decision_function(X), clf.decision_function(X))
    np.testing.assert_array_equal(loaded.predict(X), clf.predict(X))
    assert loaded.classes_.tolist() == ["high", "low"] and loaded.classes_.dtype == clf.classes_.dtype
    params = loaded.get_params()
    assert params["constraints"][0] == ("disparate_impact", "sex", 0.8)  # plain specs are kept as given
    assert params["constraints"][1]["delta"] == 0.7  # objects become tables
    assert {k: v for k, v in params.items() if k != "constraints"} == \
        {k: v for k, v in clf.get_params().items() if k != "constraints"}
    for attr in ("n_iter_", "status_", "converged_", "train_violations_", "train_violation_", "n_features_in_",
                 "sensitive_levels_", "sensitive_kinds_", "engine_info_"):
        assert getattr(loaded, attr) == getattr(clf, attr), attr
    pd.testing.assert_frame_equal(loaded.history_.to_pandas(), clf.history_.to_pandas())
    held = slice(0, 300)
    pd.testing.assert_frame_equal(
        _quiet(loaded.check_generalisation, X[held], labels[held], sensitive_features={"sex": s[held]}),
        _quiet(clf.check_generalisation, X[held], labels[held], sensitive_features={"sex": s[held]}))


def test_regressor_round_trip_with_dataframe_and_relative_gedi(tmp_path, arrays):
    X, _, s, age = arrays
    frame = pd.DataFrame(X, columns=["age", "edu", "hours", "gain"])
    y = 0.05 * frame["age"] + 0.5 * frame["edu"]
    reg = _quiet(FairRegressor(("gedi", "age", 0.3, {"relative": True}), epochs=20).fit, frame, y,
                 sensitive_features=frame[["age"]])
    absolute = reg.constraints_[0].absolute_bound
    assert absolute is not None and absolute != pytest.approx(0.3)
    path = tmp_path / "reg.pt"
    save(reg, path)
    payload = _assert_no_training_rows(path)
    assert payload["constraints"][0]["relative"] is False
    assert payload["constraints"][0]["bound"] == absolute  # resolved on the training data
    loaded = load(path)
    np.testing.assert_array_equal(loaded.predict(frame), reg.predict(frame))
    assert loaded.feature_names_in_.tolist() == ["age", "edu", "hours", "gain"]
    assert loaded.constraints_[0].bound == absolute and not loaded.constraints_[0].relative
    assert loaded.score(frame, y) == reg.score(frame, y)


def test_custom_model_factory_needs_the_factory(tmp_path, arrays):
    X, y, _, _ = arrays

    def factory(p):
        return nn.Sequential(nn.Linear(p, 3), nn.Sigmoid(), nn.Linear(3, 1), nn.Flatten(0))

    clf = FairClassifier(model=factory, epochs=5).fit(X, y)
    path = tmp_path / "custom.pt"
    save(clf, path)
    with pytest.raises(ValueError, match="custom model factory"):
        load(path)
    loaded = load(path, model=factory)
    assert loaded.model is factory
    np.testing.assert_array_equal(loaded.decision_function(X), clf.decision_function(X))


def test_save_errors(tmp_path, arrays):
    X, y, _, _ = arrays
    with pytest.raises(NotFittedError):
        save(FairClassifier(), tmp_path / "a.pt")
    clf = FairClassifier(epochs=2, engine_params={"callbacks": [lambda engine, record: None]}).fit(X, y)
    with pytest.raises(ValueError, match="cannot be saved"):
        save(clf, tmp_path / "b.pt")
    with pytest.raises(ValueError, match="obj"):
        save({"weights": 1}, tmp_path / "c.pt")
    torch.save({"weights": torch.zeros(2)}, tmp_path / "d.pt")
    with pytest.raises(ValueError, match="not a file written by fairopt.save"):
        load(tmp_path / "d.pt")
    save(History(), tmp_path / "e.pt")
    payload = torch.load(tmp_path / "e.pt", weights_only=True)
    payload["format_version"] = FORMAT_VERSION + 1
    torch.save(payload, tmp_path / "e.pt")
    with pytest.raises(ValueError, match="format version"):
        load(tmp_path / "e.pt")


# ----------------------------------------------------------------------------- models, results, histories
def test_torch_model_with_preprocessing_and_constraints(tmp_path, adult):
    model = fairopt.models.mlp(adult.n_features, hidden=(4, 3), activation="tanh", seed=1)
    constraint = GeDI("sex", 1, bound=0.2, relative=True)
    constraint.setup(adult)
    path = tmp_path / "model.pt"
    save(model, path, data=adult, constraints=[constraint, ("disparate_impact", "sex", 0.8)],
         metadata={"note": "demo", "epochs": 3})
    _assert_no_training_rows(path)
    bundle = load(path)
    assert isinstance(bundle, SavedModel)
    with torch.no_grad():
        torch.testing.assert_close(bundle.model(adult.X), model(adult.X), rtol=0, atol=0)
    torch.testing.assert_close(bundle.encode(adult.frame), adult.X, rtol=0, atol=0)
    assert bundle.constraints[0].bound == constraint.absolute_bound and not bundle.constraints[0].relative
    assert repr(bundle.constraints[1]) == repr(DisparateImpact("sex", delta=0.8))
    assert bundle.schema["sensitive_levels"] == adult.sensitive_levels
    assert bundle.schema["target_name"] == adult.target_name
    assert bundle.metadata == {"note": "demo", "epochs": 3}


def test_custom_torch_module_needs_an_instance(tmp_path):
    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.w = nn.Parameter(torch.arange(3.0))

        def forward(self, x):
            return x @ self.w

    net = Net()
    save(net, tmp_path / "net.pt")
    with pytest.raises(ValueError, match="custom module"):
        load(tmp_path / "net.pt")
    fresh = Net()
    with torch.no_grad():
        fresh.w.zero_()
    bundle = load(tmp_path / "net.pt", model=fresh)
    assert torch.equal(bundle.model.w, net.w)
    with pytest.raises(ValueError, match="do not fit"):
        load(tmp_path / "net.pt", model=nn.Linear(3, 1))


def test_fit_result_round_trip(tmp_path, adult):
    model = fairopt.models.linear(adult.n_features, seed=0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        result = StochasticSQP(epochs=8).fit(model, adult, constraints=[DisparateImpact("sex", delta=0.9)])
    save(result, tmp_path / "result.pt", data=adult)
    loaded = load(tmp_path / "result.pt")
    assert isinstance(loaded, FitResult)
    assert (loaded.status, loaded.converged) == (result.status, result.converged)
    assert loaded.info["row_names"] == result.info["row_names"] and loaded.info["tau"] == result.info["tau"]
    pd.testing.assert_frame_equal(loaded.history.to_pandas(), result.history.to_pandas())
    with torch.no_grad():
        assert torch.equal(loaded.model(adult.X), model(adult.X))


def test_moving_targets_result_drops_the_targets(tmp_path, adult):
    from fairopt.learners import TorchLearner

    learner = TorchLearner(lambda p: fairopt.models.linear(p), epochs=2)
    result = MovingTargets(iterations=1).fit(learner, adult, constraints=[DisparateImpact("sex", delta=0.8)])
    assert len(result.info["targets"]) == N_TRAIN
    save(result, tmp_path / "mt.pt")
    _assert_no_training_rows(tmp_path / "mt.pt")
    loaded = load(tmp_path / "mt.pt")
    assert "targets" not in loaded.info and loaded.info["violation"] == result.info["violation"]
    np.testing.assert_array_equal(
        (loaded.model(torch.from_numpy(adult.X.numpy())) > 0).numpy().astype(np.int64),
        learner.predict(adult.X.numpy()))


def test_history_round_trip(tmp_path):
    history = History(row_names=["a", "b"])
    history.append({"iteration": 0, "f": np.float32(0.5), "c": [1.0, np.float64(2.0)], "status": "relaxed",
                    "gap": math.nan, "backend": None, "active": ["u0"]})
    history.append({"iteration": 1, "f": 0.25, "c": [0.0, -1.0], "status": "normal", "gap": 1e-3,
                    "backend": "highs", "active": []})
    save(history, tmp_path / "h.pt")
    loaded = load(tmp_path / "h.pt")
    assert loaded.row_names == ["a", "b"]
    pd.testing.assert_frame_equal(loaded.to_pandas(), history.to_pandas(), check_dtype=False)
    assert isinstance(loaded[0]["f"], float) and math.isnan(loaded[0]["gap"])


# ----------------------------------------------------------------------------- SQP checkpoints
@pytest.mark.parametrize("options", [
    {"lr_schedule": False},
    {"lr_schedule": True, "lr": 5.0, "lr_kmin": 2, "lr_interval": 1},  # the schedule cuts beta mid-run
    {"batch_size": 200, "constraint_batch": "balanced"},
    {"step": "adaptive"},
])
def test_sqp_resume_is_bit_identical(tmp_path, adult, options):
    """10 epochs + checkpoint + 10 resumed epochs == 20 epochs, parameters and history."""
    def fresh():
        return fairopt.models.mlp(adult.n_features, hidden=(6,), seed=0)

    def fit(model, epochs, resume=None):
        engine = StochasticSQP(epochs=epochs, **options)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            result = engine.fit(model, adult, constraints=[DisparateImpact("sex", delta=0.9)], resume=resume)
        return engine, result

    full_model = fresh()
    full_engine, full = fit(full_model, 20)
    first_model = fresh()
    first_engine, first = fit(first_model, 10)
    torch.save({"model": first_model.state_dict(), "engine": first_engine.state_dict()}, tmp_path / "ck.pt")
    checkpoint = torch.load(tmp_path / "ck.pt", weights_only=True)
    model = fairopt.models.mlp(adult.n_features, hidden=(6,), seed=99)
    model.load_state_dict(checkpoint["model"])
    engine, second = fit(model, 10, resume=checkpoint["engine"])
    for a, b in zip(full_model.parameters(), model.parameters()):
        assert torch.equal(a, b)
    steps = lambda h: [r for r in h.records if r["qp_status"] != "final"]  # noqa: E731 - each fit closes with one
    joined, whole = steps(first.history) + steps(second.history), steps(full.history)
    assert [r["iteration"] for r in joined] == list(range(len(whole)))
    for key in ("f", "V", "tau", "xi", "alpha", "beta", "epoch"):
        assert [r[key] for r in joined] == [r[key] for r in whole], key
    assert second.history[-1] == full.history[-1]  # the same returned model, described the same way
    assert engine.state_ == full_engine.state_
    if options.get("lr_schedule"):
        assert full_engine.state_["beta"] < options["lr"]  # the schedule acted within the run


def test_sqp_checkpoint_validation(adult):
    with pytest.raises(RuntimeError, match="call fit"):
        StochasticSQP().state_dict()
    engine = StochasticSQP(epochs=1)
    _quiet(engine.fit, fairopt.models.linear(adult.n_features, seed=0), adult,
           constraints=[DisparateImpact("sex", delta=0.8)])
    checkpoint = engine.state_dict()
    with pytest.raises(ValueError, match="trainable parameters"):
        StochasticSQP(epochs=1).fit(fairopt.models.mlp(adult.n_features, hidden=(2,)), adult,
                                    constraints=[DisparateImpact("sex", delta=0.8)], resume=checkpoint)
    with pytest.raises(ValueError, match="constraint rows"):
        StochasticSQP(epochs=1).fit(fairopt.models.linear(adult.n_features), adult, resume=checkpoint)
    with pytest.raises(ValueError, match="resume"):
        StochasticSQP(epochs=1).fit(fairopt.models.linear(adult.n_features), adult, resume={"tau": 1.0})
