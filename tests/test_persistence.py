"""fairopt.save / fairopt.load and StochasticSQP checkpoints (state_dict / fit(resume=))."""

from __future__ import annotations

import math
import re
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


pytestmark = pytest.mark.usefixtures("one_torch_thread")


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
    assert isinstance(params["constraints"][1], DisparateImpact)  # objects come back as objects
    assert params["constraints__1__delta"] == 0.7  # so the nested parameters of a search are there
    # (constraints__<i>...: the nested parameters of the constraints, compared above)
    assert {k: v for k, v in params.items() if k.split("__")[0] != "constraints"} == \
        {k: v for k, v in clf.get_params().items() if k.split("__")[0] != "constraints"}
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


def test_save_and_the_command_lines_held_out_bounds_take_one_saved_form(tmp_path, arrays):
    """fairopt.save (persistence.writing) and the command line's held-out evaluation (tabular.training._saved_form)
    each wrote the spec of a fitted constraint; both now take fairopt.specs.saved_spec, so the held-out rows are
    read with the bounds the saved file holds: a set-up relative bound as its absolute bound, an object not set up
    as given, a spec as the table of the constraint it builds."""
    from fairopt.specs import constraint_to_spec, saved_spec
    from fairopt.tabular.training import _saved_form

    X, _, s, _ = arrays
    frame = pd.DataFrame(X, columns=["age", "edu", "hours", "gain"])
    y = 0.05 * frame["age"] + 0.5 * frame["edu"]
    reg = _quiet(FairRegressor([("gedi", "age", 0.3, {"relative": True}),
                                {"kind": "dcov", "sensitive": "sex", "bound": 0.5, "relative": True}], epochs=5).fit,
                 frame.drop(columns="age"), y, sensitive_features=pd.DataFrame({"age": frame["age"], "sex": s}))
    save(reg, tmp_path / "reg.pt")
    written = torch.load(tmp_path / "reg.pt", weights_only=True)["constraints"]
    assert written == [saved_spec(c) for c in reg.constraints_]
    assert written == [constraint_to_spec(c) for c in _saved_form(reg.constraints_)]
    assert [c["relative"] for c in written] == [False, False]
    assert saved_spec(GeDI("age", bound=0.3, relative=True))["relative"] is True  # not set up: as given
    assert saved_spec(("gedi", "age", 0.3)) == constraint_to_spec(GeDI("age", bound=0.3))


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
    {"batch_size": 200},  # the default snapshot, its spacing adapted to the drift
    {"batch_size": 200, "constraint_drift_tol": 1e-6},  # a spacing that halves at every refresh
    {"batch_size": 200, "constraint_drift_tol": None},  # the snapshot at its fixed spacing
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
    # each fit closes with one "final" record; a mini-batch fit polishes on copies of the state first
    steps = lambda h: [r for r in h.records if r["qp_status"] != "final" and r.get("phase") != "polish"]  # noqa: E731
    joined, whole = steps(first.history) + steps(second.history), steps(full.history)
    assert [r["iteration"] for r in joined] == list(range(len(whole)))
    for key in ("f", "V", "tau", "xi", "alpha", "beta", "epoch"):
        assert [r[key] for r in joined] == [r[key] for r in whole], key
    assert second.history[-1] == full.history[-1]  # the same returned model, described the same way
    assert engine.state_ == full_engine.state_
    if options.get("lr_schedule"):
        assert full_engine.state_.beta < options["lr"]  # the schedule acted within the run


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


# ----------------------------------------------------------------------------- integrity of saved files
@pytest.fixture(scope="module")
def saved_classifier(tmp_path_factory, arrays):
    """A small fitted classifier, the bytes of its file, and the rows it predicts on."""
    X, y, s, _ = arrays
    clf = _quiet(FairClassifier(("disparate_impact", "sex", 0.8), model="mlp", hidden=(7,), epochs=3).fit, X, y,
                 sensitive_features={"sex": s})
    path = tmp_path_factory.mktemp("integrity") / "clf.pt"
    save(clf, path)
    return clf, path.read_bytes(), X


def _write(path, data: bytes):
    path.write_bytes(data)
    return path


def _resave(path, payload, *, sign: bool = True):
    """Write a modified payload; ``sign`` recomputes its checksum (as a forger would), so
    that only the key checks can refuse it."""
    from fairopt.persistence.format import checksum as _checksum

    if sign:
        payload["checksum"] = _checksum({k: v for k, v in payload.items() if k != "checksum"})
    torch.save(payload, path)
    return path


def _names_file(path):
    return re.escape(repr(str(path)))


def test_saved_file_carries_a_sha256_checksum_and_round_trips(tmp_path, saved_classifier):
    clf, data, X = saved_classifier
    path = _write(tmp_path / "ok.pt", data)
    payload = torch.load(path, weights_only=True)
    assert payload["format_version"] == FORMAT_VERSION == 2
    assert re.fullmatch(r"sha256:[0-9a-f]{64}", payload["checksum"])
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a checked file loads without any warning
        loaded = load(path)
    np.testing.assert_array_equal(loaded.decision_function(X), clf.decision_function(X))
    np.testing.assert_array_equal(loaded.predict(X), clf.predict(X))


def test_truncated_file_is_refused_naming_the_file(tmp_path, saved_classifier):
    _, data, _ = saved_classifier
    for cut in (len(data) // 2, len(data) - 10, 100):
        path = _write(tmp_path / f"cut{cut}.pt", data[:cut])
        with pytest.raises(ValueError, match=_names_file(path) + " is truncated"):
            load(path)


def test_random_and_empty_files_are_not_fairopt_files(tmp_path):
    path = _write(tmp_path / "random.pt", np.random.default_rng(0).bytes(4096))
    with pytest.raises(ValueError, match=_names_file(path) + " is not a fairopt file .*not a torch.save zip"):
        load(path)
    path = _write(tmp_path / "empty.pt", b"")
    with pytest.raises(ValueError, match=_names_file(path) + " is not a fairopt file: it is empty"):
        load(path)
    torch.save([torch.zeros(2)], tmp_path / "list.pt")
    with pytest.raises(ValueError, match=_names_file(tmp_path / "list.pt") + ": not a fairopt file"):
        load(tmp_path / "list.pt")
    torch.save(torch.nn.Linear(3, 1).state_dict(), tmp_path / "weights.pt")  # a network's weights: said so
    with pytest.raises(ValueError, match=r"it is a network's weights \(a state_dict.*load_state_dict"):
        load(tmp_path / "weights.pt")


class _Payload:
    """Not a tensor nor a plain value: weights_only loading must refuse to unpickle it."""

    def __init__(self):
        self.format = "fairopt"


def test_file_with_arbitrary_objects_is_not_unpickled(tmp_path):
    path = tmp_path / "object.pt"
    torch.save({"format": "fairopt", "format_version": FORMAT_VERSION, "obj": _Payload()}, path)
    with pytest.raises(ValueError, match=_names_file(path) + ": refusing to load it: it holds objects other than"):
        load(path)


def test_one_flipped_byte_in_a_weight_is_a_checksum_mismatch(tmp_path, saved_classifier):
    clf, data, _ = saved_classifier
    weight = clf.model_.state_dict()["0.weight"].detach().cpu().contiguous().numpy().tobytes()
    assert data.count(weight) == 1  # the archive stores tensor bytes as they are
    start = data.find(weight)
    flipped = bytearray(data)
    flipped[start + len(weight) // 2] ^= 0x01
    path = _write(tmp_path / "flipped.pt", bytes(flipped))
    tampered = torch.load(path, weights_only=True)["model"]["state_dict"]["0.weight"]  # torch itself notices nothing
    assert not torch.equal(tampered, clf.model_.state_dict()["0.weight"])
    with pytest.raises(ValueError, match=_names_file(path) + ": checksum mismatch"):
        load(path)


def test_changed_value_without_a_new_checksum_is_refused(tmp_path, saved_classifier):
    _, data, _ = saved_classifier
    payload = torch.load(_write(tmp_path / "a.pt", data), weights_only=True)
    payload["fitted"]["n_iter_"] += 1
    path = _resave(tmp_path / "b.pt", payload, sign=False)
    with pytest.raises(ValueError, match=_names_file(path) + ": checksum mismatch"):
        load(path)
    payload["checksum"] = "md5:abc"
    path = _resave(tmp_path / "c.pt", payload, sign=False)
    with pytest.raises(ValueError, match=_names_file(path) + ": malformed checksum 'md5:abc'"):
        load(path)


@pytest.mark.parametrize("where, change, message", [
    ("top", lambda p: p.update(extra=1), r"top level of a 'estimator' file: unknown keys \['extra'\]"),
    ("top", lambda p: p.pop("history"), r"top level of a 'estimator' file: missing keys \['history'\]"),
    ("top", lambda p: p.pop("checksum"), r"missing keys \['checksum'\]"),
    ("fitted", lambda f: f.update(predict="not a method"), r"'fitted' attributes of FairClassifier: unknown keys "
                                                          r"\['predict'\]"),
    ("fitted", lambda f: f.update({"__class__": f.pop("status_")}),
     r"unknown keys \['__class__'\] and missing keys \['status_'\]"),
    ("fitted", lambda f: f.pop("classes_"), r"missing keys \['classes_'\]"),
    ("params", lambda q: q.update(evil=1), r"'params' of FairClassifier: unknown keys \['evil'\]"),
    ("preprocessor", lambda q: q.update(transform=None), r"'preprocessor': unknown keys \['transform'\]"),
    ("model", lambda q: q.pop("spec"), r"'model': missing keys \['spec'\]"),
    ("history", lambda q: q.update(rows=[]), r"'history': unknown keys \['rows'\]"),
])
@pytest.mark.parametrize("sign", [True, False])
def test_unknown_or_missing_keys_are_refused(tmp_path, saved_classifier, where, change, message, sign):
    """Refused by the key checks whether or not the forger recomputed the checksum."""
    _, data, _ = saved_classifier
    payload = torch.load(_write(tmp_path / "a.pt", data), weights_only=True)
    change(payload if where == "top" else payload[where])
    path = _resave(tmp_path / "b.pt", payload, sign=sign and "checksum" in payload)
    with pytest.raises(ValueError, match=_names_file(path) + ": " + r".*" + message):
        load(path)


def test_preprocessor_missing_mode_is_saved_and_defaults_for_older_files(tmp_path, saved_classifier):
    """``missing`` (added later) round-trips; a file without it loads as "error" (its default then); a
    value that is not a mode is refused."""
    clf, data, X = saved_classifier
    payload = torch.load(_write(tmp_path / "a.pt", data), weights_only=True)
    assert payload["preprocessor"]["missing"] == "error"
    payload["preprocessor"].pop("missing")
    assert load(_resave(tmp_path / "b.pt", payload)).preprocessor_.missing == "error"
    payload["preprocessor"]["missing"] = "impute"
    with pytest.raises(ValueError, match=r"preprocessor: 'missing' must be one of"):
        load(_resave(tmp_path / "c.pt", payload))


def test_tampered_attribute_is_never_set(tmp_path, saved_classifier, monkeypatch):
    """A signed file naming an attribute that is not on the allow-list sets nothing."""
    _, data, _ = saved_classifier
    payload = torch.load(_write(tmp_path / "a.pt", data), weights_only=True)
    payload["fitted"]["decision_function"] = "replaced"
    path = _resave(tmp_path / "b.pt", payload)
    set_names = []
    original = FairClassifier.__setattr__

    def record(self, name, value):
        set_names.append(name)
        original(self, name, value)

    monkeypatch.setattr(FairClassifier, "__setattr__", record)
    with pytest.raises(ValueError, match="unknown keys"):
        load(path)
    assert "decision_function" not in set_names


@pytest.mark.parametrize("version", [FORMAT_VERSION + 1, 0, "2", True, None])
def test_unsupported_format_version_names_the_file(tmp_path, saved_classifier, version):
    _, data, _ = saved_classifier
    payload = torch.load(_write(tmp_path / "a.pt", data), weights_only=True)
    payload["format_version"] = version
    path = _resave(tmp_path / "b.pt", payload)
    expected = _names_file(path) + ": unsupported format version " + re.escape(repr(version))
    with pytest.raises(ValueError, match=expected):
        load(path)


def _as_version_1(payload):
    """What fairopt.save wrote before checksums: format version 1, no checksum entry."""
    payload = dict(payload)
    payload.pop("checksum")
    payload["format_version"] = 1
    return payload


def test_version_1_file_without_checksum_loads_with_a_warning(tmp_path, saved_classifier):
    clf, data, X = saved_classifier
    payload = _as_version_1(torch.load(_write(tmp_path / "a.pt", data), weights_only=True))
    path = tmp_path / "v1.pt"
    torch.save(payload, path)
    with pytest.warns(UserWarning, match=_names_file(path) + " has format version 1.*cannot be verified.*save it"):
        loaded = load(path)
    np.testing.assert_array_equal(loaded.decision_function(X), clf.decision_function(X))
    payload["fitted"]["extra_"] = 1  # key checks apply to version 1 files too
    torch.save(payload, path)
    with pytest.raises(ValueError, match=_names_file(path) + r".*unknown keys \['extra_'\]"):
        load(path)


def test_checksum_covers_dtype_shape_and_bytes_not_dict_order():
    from fairopt.persistence.format import checksum as _checksum

    w = torch.arange(6, dtype=torch.float32)
    base = _checksum({"a": w, "b": [1, 2.5, "x", None, True], "c": {"k": (1, 2)}})
    assert base == _checksum({"c": {"k": (1, 2)}, "b": [1, 2.5, "x", None, True], "a": w.clone()})
    assert base != _checksum({"a": w.double(), "b": [1, 2.5, "x", None, True], "c": {"k": (1, 2)}})  # dtype
    assert base != _checksum({"a": w.reshape(2, 3), "b": [1, 2.5, "x", None, True], "c": {"k": (1, 2)}})  # shape
    assert base != _checksum({"a": w, "b": [1, 2.5, "x", None, 1], "c": {"k": (1, 2)}})  # True is not 1
    assert base != _checksum({"a": w, "b": [1, 2.5, "x", None, True], "c": {"k": [1, 2]}})  # tuple is not list
    assert _checksum({"x": ["ab", "c"]}) != _checksum({"x": ["a", "bc"]})  # strings are delimited
    assert _checksum({"x": float("nan")}) == _checksum({"x": float("nan")})


def test_preprocessor_allow_list_matches_the_fitted_attributes():
    from fairopt.data import Preprocessor
    from fairopt.persistence.format import PREPROCESSOR_ATTRIBUTES as _PREPROCESSOR_ATTRIBUTES

    fitted = Preprocessor().fit(pd.DataFrame({"a": [1.0, 2.0], "b": ["x", "y"]}))
    assert set(vars(fitted)) == set(_PREPROCESSOR_ATTRIBUTES)


def test_history_and_model_files_are_checked_too(tmp_path):
    save(History(row_names=["r"]), tmp_path / "h.pt")
    payload = torch.load(tmp_path / "h.pt", weights_only=True)
    payload["history"]["records"] = [{"iteration": 1}]
    torch.save(payload, tmp_path / "h2.pt")
    with pytest.raises(ValueError, match=_names_file(tmp_path / "h2.pt") + ": checksum mismatch"):
        load(tmp_path / "h2.pt")
    save(fairopt.models.linear(3, seed=0), tmp_path / "m.pt", metadata={"note": "x"})
    payload = torch.load(tmp_path / "m.pt", weights_only=True)
    payload["model"]["spec"]["hidden"] = [4]
    path = _resave(tmp_path / "m2.pt", payload)
    with pytest.raises(ValueError, match=_names_file(path) + r": 'model.spec': unknown keys \['hidden'\]"):
        load(path)


def test_parameter_added_after_the_file_takes_its_default(tmp_path, saved_classifier):
    """A signed file written before a constructor parameter existed loads; the parameter
    takes its default (unknown parameters are still refused, see above)."""
    _, data, _ = saved_classifier
    payload = torch.load(_write(tmp_path / "a.pt", data), weights_only=True)
    payload["params"].pop("n_candidates")
    loaded = load(_resave(tmp_path / "b.pt", payload))
    assert loaded.n_candidates == FairClassifier().n_candidates


@pytest.mark.parametrize("key, value, message", [
    ("tau", -5.0, r"tau: expected a finite positive number, got -5.0"),
    ("beta", float("nan"), r"beta: expected a finite positive number"),
    ("iteration", -1, r"iteration: expected a non-negative integer"),
    ("epochs_done", 2.5, r"epochs_done: expected a non-negative integer"),
    ("warned_relaxed", "no", r"warned_relaxed: expected True or False"),
    ("L", 0.0, r"L: expected a finite positive number"),
    ("recent_steps", 0.5, r"recent_steps: expected a list of step lengths, got float"),
    ("recent_steps", [0.1, -1.0], r"recent_steps: expected a finite number >= 0, got -1.0"),
])
def test_sqp_resume_validates_the_state_like_constructor_arguments(adult, key, value, message):
    """A checkpoint with an invalid merit parameter (or any other state value) is refused
    before training, with the value named."""
    engine = StochasticSQP(epochs=1)
    model = fairopt.models.linear(adult.n_features, seed=0)
    _quiet(engine.fit, model, adult, constraints=[DisparateImpact("sex", delta=0.8)])
    checkpoint = engine.state_dict()
    checkpoint["state"][key] = value
    before = [p.detach().clone() for p in model.parameters()]
    with pytest.raises(ValueError, match=r"resume: invalid checkpoint state, " + message):
        StochasticSQP(epochs=1).fit(model, adult, constraints=[DisparateImpact("sex", delta=0.8)],
                                    resume=checkpoint)
    assert all(torch.equal(a, b) for a, b in zip(before, model.parameters()))


def test_sqp_resume_refuses_non_finite_iterates(adult):
    engine = StochasticSQP(epochs=1)
    model = fairopt.models.linear(adult.n_features, seed=0)
    _quiet(engine.fit, model, adult, constraints=[DisparateImpact("sex", delta=0.8)])
    checkpoint = engine.state_dict()
    checkpoint["hessian_v"] = checkpoint["hessian_v"].clone().fill_(-1.0)
    with pytest.raises(ValueError, match="Hessian accumulator has negative or non-finite"):
        StochasticSQP(epochs=1).fit(model, adult, constraints=[DisparateImpact("sex", delta=0.8)],
                                    resume=checkpoint)
    checkpoint = engine.state_dict()
    checkpoint["last_params"] = checkpoint["last_params"].clone().fill_(float("nan"))
    with pytest.raises(ValueError, match="last iterate has non-finite"):
        StochasticSQP(epochs=1).fit(model, adult, constraints=[DisparateImpact("sex", delta=0.8)],
                                    resume=checkpoint)


def test_the_held_out_statements_are_saved_with_the_estimator(tmp_path, arrays):
    """A fit with ``margin="auto"`` and ``validation_fraction`` keeps its certificates, candidates, predicted
    held-out range and held-out rows through save/load (they were dropped); a fit without them loads None."""
    X, y, s, _ = arrays
    clf = _quiet(FairClassifier(("disparate_impact", "s", 0.8), epochs=20, margin="auto", validation_fraction=0.3,
                                n_candidates=2).fit, X, y, sensitive_features=s)
    path = tmp_path / "certified.fairopt"
    save(clf, path)
    loaded = load(path)
    assert [str(c) for c in loaded.certificate_] == [str(c) for c in clf.certificate_]
    assert [c.to_dict() for c in loaded.certificate_] == [c.to_dict() for c in clf.certificate_]
    pd.testing.assert_frame_equal(loaded.candidates_, clf.candidates_, check_dtype=False)
    pd.testing.assert_frame_equal(loaded.predicted_held_out_, clf.predicted_held_out_, check_dtype=False)
    np.testing.assert_array_equal(loaded.validation_indices_, clf.validation_indices_)
    plain = _quiet(FairClassifier(("disparate_impact", "s", 0.8), epochs=5).fit, X, y, sensitive_features=s)
    save(plain, tmp_path / "plain.fairopt")
    again = load(tmp_path / "plain.fairopt")
    assert again.certificate_ is None and again.candidates_ is None and again.predicted_held_out_ is None
    assert again.validation_indices_ is None


def test_a_saved_poisson_model_predicts_rates(tmp_path):
    """A Poisson model's output is the log-rate; the saved model's predict gives the rate exp(out) per unit of
    exposure (it gave the logarithm), decision_function the output itself."""
    rng = np.random.default_rng(0)
    frame = pd.DataFrame({"x": rng.normal(size=200), "g": rng.choice(["a", "b"], 200),
                          "exposure": rng.uniform(0.2, 1.0, 200)})
    frame["claims"] = rng.poisson(0.3 * frame["exposure"])
    data = fairopt.FairData.from_frame(frame, target="claims", sensitive=["g"], task="poisson", exposure="exposure")
    model = fairopt.models.linear(data.n_features, seed=0)
    save(model, tmp_path / "rates.fairopt", data=data)
    saved = load(tmp_path / "rates.fairopt")
    rows = frame.drop(columns=["claims"])
    log_rate = saved.decision_function(rows)
    np.testing.assert_allclose(saved.predict(rows), np.exp(log_rate), rtol=1e-12)
    assert (saved.predict(rows) > 0).all() and saved.task == "poisson"


def test_read_metadata_returns_what_save_stored_for_any_file(tmp_path):
    """A loaded estimator does not carry save's metadata; read_metadata gives it back, with load's checks."""
    from fairopt.persistence import read_metadata

    rng = np.random.default_rng(0)
    X = rng.normal(size=(200, 2))
    y = (X[:, 0] > 0).astype(int)
    s = (rng.random(200) > 0.5).astype(int)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        clf = FairClassifier(("disparate_impact", "s", 0.8), epochs=5).fit(X, y, sensitive_features={"s": s})
    save(clf, tmp_path / "m.pt", metadata={"approved_by": "risk", "bound": 0.8})
    assert read_metadata(tmp_path / "m.pt") == {"approved_by": "risk", "bound": 0.8}
    (tmp_path / "cut.pt").write_bytes((tmp_path / "m.pt").read_bytes()[:500])
    with pytest.raises(ValueError, match="cut.pt"):
        read_metadata(tmp_path / "cut.pt")


def test_a_model_given_for_a_built_in_architecture_is_not_used_and_says_so(tmp_path):
    network = fairopt.models.mlp(3, hidden=(4,), seed=0)
    save(network, tmp_path / "mlp.pt")
    with pytest.warns(UserWarning, match=r"model= is not used: the file holds a built-in architecture \(mlp\)"):
        bundle = load(tmp_path / "mlp.pt", model=lambda n: nn.Linear(n, 1))
    X = torch.randn(5, 3)
    torch.testing.assert_close(bundle.model(X), network.eval()(X))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        load(tmp_path / "mlp.pt")  # nothing to say without model=


def test_the_constraints_parameter_keeps_its_form_and_older_files_load_the_saved_list(tmp_path, saved_classifier):
    """One text spec comes back as that text (it came back as a one-element list), objects as objects; a file
    written before the form was saved loads its list of specs."""
    clf, data, X = saved_classifier
    labels = (X[:, 1] > np.median(X[:, 1])).astype(int)
    single = _quiet(FairClassifier("di:sex>=0.8", epochs=3).fit, X, labels, sensitive_features={"sex": X[:, 0] > np.median(X[:, 0])})
    save(single, tmp_path / "single.pt")
    assert load(tmp_path / "single.pt").get_params()["constraints"] == "di:sex>=0.8"
    payload = torch.load(_write(tmp_path / "a.pt", data), weights_only=True)
    assert payload["fitted"]["constraints_param_form"] == {"single": True, "objects": [False]}
    assert load(tmp_path / "a.pt").get_params()["constraints"] == ("disparate_impact", "sex", 0.8)
    payload["fitted"].pop("constraints_param_form")
    assert load(_resave(tmp_path / "b.pt", payload)).get_params()["constraints"] == [
        ("disparate_impact", "sex", 0.8)]
