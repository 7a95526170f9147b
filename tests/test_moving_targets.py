"""Tests of solvers.MovingTargets and fairopt.learners.TorchLearner.

References: the algorithm's definition ([GeDI] eq 56-57) replayed step by step with
project_targets; fixed points that follow from it for a learner that memorises its
targets; the exact constraint values computed from their definitions.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from sklearn.linear_model import LinearRegression, LogisticRegression
from sklearn.neighbors import KNeighborsRegressor
from sklearn.ensemble import RandomForestClassifier
from sklearn.tree import DecisionTreeClassifier

from fairopt import models
from fairopt.constraints import Covariance, DemographicParity, DisparateImpact
from fairopt.constraints.gedi import GeDI
from fairopt.data import FairData
from fairopt.learners import TorchLearner
from solvers.moving_targets import MovingTargets
from solvers.problem import LinearEncoding
from solvers.projection import ProjectionInfeasibleError, project_targets


@pytest.fixture(autouse=True)
def _one_torch_thread():
    """Tiny networks: one intra-op thread avoids contention on a shared machine."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def make_data(n: int, seed: int, task: str = "binary") -> FairData:
    """Rows whose target depends on a binary ``s`` and a continuous ``x`` (biased data)."""
    rng = np.random.default_rng(seed)
    s = (rng.random(n) < 0.4).astype(float)
    x = rng.normal(size=n) + s
    features = np.column_stack([rng.normal(size=n), x + 0.3 * rng.normal(size=n), s])
    if task == "binary":
        y = (features[:, 0] + 1.5 * s + rng.normal(size=n) > 0.7).astype(float)
    else:
        y = 3.0 * x + features[:, 0] + 0.5 * rng.normal(size=n)
    return FairData.from_arrays(features, y, {"s": s, "x": x}, task=task,
                                sensitive_kinds={"s": "binary", "x": "continuous"})


def rates(labels: np.ndarray, s: np.ndarray) -> tuple[float, float]:
    return float(labels[s == 0].mean()), float(labels[s == 1].mean())


# ----------------------------------------------------------------------------- classification
def test_classification_replays_the_algorithm() -> None:
    """Every iteration's master equals project_targets on (p_{t-1}, y) with weights (1, 1/t),
    its targets satisfy DI exactly, and the records hold what the solver and learner did."""
    data = make_data(160, 0)
    delta = 0.8
    result = MovingTargets(iterations=3, backend="highs", mip_gap=0.0).fit(
        LogisticRegression(), data, constraints=[DisparateImpact("s", delta=delta)])
    history = result.history
    assert [r["iteration"] for r in history] == [0, 1, 2, 3]
    assert history.column("alpha")[1:] == pytest.approx([1.0, 0.5, 1.0 / 3.0])

    X, y, s = data.X.numpy(), data.y.numpy().astype(float), data.sensitive["s"].numpy()
    replay = LogisticRegression().fit(X, y.astype(int))
    constraint = DisparateImpact("s", delta=delta)
    constraint.setup(data)
    encodings = [constraint.target_encoding(data), LinearEncoding("cb", np.ones((1, 160)), [1.0], [159.0])]
    for t in (1, 2, 3):
        predictions = replay.predict(X).astype(float)
        master = project_targets([predictions, y], weights=[1.0, 1.0 / t], encodings=encodings, loss="hamming",
                                 binary=True, backend="highs", mip_gap=0.0)
        record = history[t]
        assert record["master_objective"] == pytest.approx(master.objective, abs=1e-12)
        assert record["master_objective"] == pytest.approx(
            record["master_loss_predictions"] + record["alpha"] * record["master_loss_targets"], abs=1e-12)
        assert record["master_status"] == "optimal" and record["master_backend"] == "highs"
        assert record["master_seconds"] > 0 and record["learner_seconds"] > 0
        # the targets satisfy the constraint exactly: rates within the ratio delta
        p0, p1 = rates(master.z, s)
        assert min(p0, p1) >= delta * max(p0, p1) - 1e-12
        assert record["V_targets"] == 0.0
        replay.fit(X, master.z.astype(int))
        predictions = replay.predict(X).astype(float)
        assert record["score"] == pytest.approx(np.mean(predictions == y), abs=1e-15)
        q0, q1 = rates(predictions, s)
        expected_violation = max(delta * q0 - q1, 0) + max(delta * q1 - q0, 0)
        assert record["V_predictions"] == pytest.approx(expected_violation, abs=1e-12)
    np.testing.assert_array_equal(result.info["targets"], master.z)
    assert result.status == "max_iterations" and result.model.__class__ is LogisticRegression


@pytest.mark.parametrize("task", ["binary", "regression"])
def test_without_constraints_the_pretrained_learner_is_the_fit(task: str) -> None:
    """No constraint rows: a master's targets would be the learner's own predictions (the nearest that keep
    both classes), so no master/learner iteration runs; the returned model is the pretraining's fit."""
    data = make_data(120, 1, task)
    learner = LogisticRegression() if task == "binary" else LinearRegression()
    result = MovingTargets(iterations=5, seed=0).fit(learner, data, constraints=[])
    assert result.status == "converged" and result.info["returned_iteration"] == 0
    assert len(result.history) == 1 and result.info["master_seconds"] == 0
    X, y = data.X.numpy(), data.y.numpy()
    reference = (LogisticRegression() if task == "binary" else LinearRegression()).fit(X, y)
    assert np.allclose(result.model.predict(X), reference.predict(X))


def test_memorising_learner_reaches_a_feasible_fixed_point() -> None:
    """With a learner that fits its targets exactly, p_0 = y, so z_1 is the closest feasible
    vector to y; then z_1 minimises both master terms, hence z_t = z_1 for every t, and the
    final predictions satisfy the constraint exactly (converged)."""
    data = make_data(120, 1)
    y = data.y.numpy().astype(float)
    constraint = DemographicParity("s", bound=0.05)
    result = MovingTargets(iterations=4, mip_gap=0.0).fit(DecisionTreeClassifier(), data, constraints=[constraint])
    history = result.history
    assert history[0]["score"] == 1.0 and history[0]["V_predictions"] > 0
    closest = project_targets(y, encodings=[constraint.target_encoding(data),
                                            LinearEncoding("cb", np.ones((1, 120)), [1.0], [119.0])],
                              loss="hamming", binary=True, mip_gap=0.0)
    assert history[1]["master_loss_targets"] == pytest.approx(closest.objective, abs=1e-12)
    assert np.all(history.column("targets_change")[2:] == 0.0)
    assert np.all(history.column("V_predictions")[1:] == 0.0)
    assert result.converged and result.info["violation"] == 0.0
    assert len(result.c_exact) == len(result.row_names) == 1  # the returned model's exact rows, as other engines
    # the history plot's default panels are those Moving Targets records
    axes = history.plot()
    assert [a.get_title() for a in axes] == ["learner score", "violation of the targets",
                                            "violation of the predictions"]
    with pytest.raises(ValueError, match=r"none of \['f'\] were recorded; numeric columns of this history: .*score"):
        history.plot(keys=["f"])


def test_gedi_binary_attribute_targets_satisfy_the_bound() -> None:
    """GeDI(V^1) on the binary attribute, relative bound 0.2 ([GeDI] sec 5 protocol)."""
    data = make_data(200, 2)
    constraint = GeDI("s", 1, bound=0.2, relative=True)
    result = MovingTargets(iterations=2).fit(LogisticRegression(), data, constraints=[constraint])
    s, y = data.sensitive["s"].numpy().astype(float), data.y.numpy().astype(float)
    q = 0.2 * abs(np.cov(s, y, bias=True)[0, 1] / s.var())
    assert constraint.absolute_bound == pytest.approx(q, rel=1e-12)
    z = result.info["targets"]
    assert abs(np.cov(s, z, bias=True)[0, 1] / s.var()) <= q + 1e-12
    assert result.history[0]["c_targets"][0] == pytest.approx(5 * q, rel=1e-9)


# ----------------------------------------------------------------------------- regression
@pytest.mark.parametrize("fine", [False, True])
def test_regression_targets_satisfy_gedi_exactly(fine: bool) -> None:
    """Regression masters (convex QP, OSQP) give targets with GeDI(V^3) within the bound,
    and a 1-nearest-neighbour learner (memorises distinct rows) inherits it."""
    data = make_data(150, 3, task="regression")
    constraint = GeDI("x", 3, bound=0.2, relative=True, fine=fine)
    result = MovingTargets(iterations=2, backend="osqp").fit(KNeighborsRegressor(n_neighbors=1), data,
                                                             constraints=[constraint])
    q = constraint.absolute_bound
    for record in result.history[1:]:
        assert record["master_status"] == "optimal" and record["master_backend"] == "osqp"
        assert record["V_targets"] <= 1e-7 * q
        assert record["V_predictions"] <= 1e-7 * q
    x, z = data.sensitive["x"].numpy().astype(float), result.info["targets"]
    F = (x - x.mean()) / x.std()
    F = F[:, None] ** np.arange(1, 4)[None, :]
    alpha = np.linalg.lstsq(F - F.mean(axis=0), z - z.mean(), rcond=None)[0]
    assert (abs(alpha[0]) if fine else np.abs(alpha).sum()) <= q * (1 + 1e-7)
    if fine:
        assert np.abs(alpha[1:]).max() <= 1e-7 * q
    y = data.y.numpy().astype(float)
    r2 = 1 - np.sum((y - z) ** 2) / np.sum((y - y.mean()) ** 2)
    assert result.history[-1]["score"] == pytest.approx(r2, abs=1e-9)


def test_regression_first_master_is_the_projection_of_the_average() -> None:
    """t = 1: min MSE(z, p) + MSE(z, y) is the projection of (p + y) / 2 (squared loss)."""
    data = make_data(100, 4, task="regression")
    constraint = GeDI("x", 1, bound=0.1, relative=True, fine=True)
    result = MovingTargets(iterations=1).fit(LinearRegression(), data, constraints=[constraint])
    X, y = data.X.numpy(), data.y.numpy().astype(float)
    p = LinearRegression().fit(X, y).predict(X)
    enc = constraint.target_encoding(data)
    a, m = enc.A_z[0], (p + y) / 2
    value = a @ m
    z_star = m - a * (value - np.clip(value, enc.lb[0], enc.ub[0])) / (a @ a)
    np.testing.assert_allclose(result.info["targets"], z_star, atol=1e-6 * np.abs(y).max())


# ----------------------------------------------------------------------------- errors, options
def test_constraint_without_encoding_is_named() -> None:
    data = make_data(40, 5, task="regression")
    with pytest.raises(ValueError, match=r"'covariance\[x\]' has no linear target encoding"):
        MovingTargets(iterations=1).fit(LinearRegression(), data, constraints=[Covariance("x", bound=0.1)])


def test_infeasible_master_names_the_constraint() -> None:
    rng = np.random.default_rng(0)
    data = FairData.from_arrays(rng.normal(size=(7, 2)), [0, 1, 0, 1, 0, 1, 1], {"s": [0, 0, 0, 1, 1, 1, 1]},
                                sensitive_kinds={"s": "binary"})
    with pytest.raises(ProjectionInfeasibleError, match=r"demographic_parity\[s\].*class_balance"):
        MovingTargets(iterations=1).fit(LogisticRegression(), data, constraints=[DemographicParity("s", bound=0.0)])


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(iterations=0), "iterations"),
        (dict(backend="cplex"), "backend"),
        (dict(time_limit=-1.0), "time_limit"),
        (dict(seed=1.5), "seed"),
        (dict(verbose=-1), "verbose"),
        (dict(callbacks=[3]), "callbacks"),
    ],
)
def test_bad_options(kwargs: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        MovingTargets(**kwargs)


def test_bad_fit_arguments() -> None:
    data = make_data(30, 6)
    engine = MovingTargets(iterations=1)
    constraints = [DisparateImpact("s")]
    with pytest.raises(ValueError, match="learner"):
        engine.fit(object(), data, constraints=constraints)
    with pytest.raises(ValueError, match="does not match data.task"):
        engine.fit(LogisticRegression(), data, constraints=constraints, task="regression")
    with pytest.raises(ValueError, match="task"):
        engine.fit(LogisticRegression(), data, constraints=constraints, task="ranking")
    with pytest.raises(ValueError, match="0/1 labels"):
        engine.fit(LinearRegression(), data, constraints=constraints)  # real-valued "labels"


def test_seed_makes_random_learners_deterministic_and_callbacks_stop() -> None:
    data = make_data(100, 7)
    runs = []
    for _ in range(2):
        learner = RandomForestClassifier(n_estimators=5)
        result = MovingTargets(iterations=2, seed=3).fit(learner, data, constraints=[DisparateImpact("s", 0.9)])
        assert learner.random_state == 3
        runs.append(result.history.column("score"))
    np.testing.assert_array_equal(runs[0], runs[1])
    stop_after_first = MovingTargets(iterations=5, callbacks=[lambda engine, record: record["iteration"] >= 1])
    result = stop_after_first.fit(LogisticRegression(), data, constraints=[DisparateImpact("s", 0.9)])
    assert result.status == "stopped_by_callback" and len(result.history) == 2


# ----------------------------------------------------------------------------- TorchLearner
def small_mlp(p: int) -> torch.nn.Module:
    return models.mlp(p, hidden=(8,), activation="relu")


def test_torch_learner_is_deterministic_and_sklearn_like() -> None:
    data = make_data(120, 8)
    X, y = data.X.numpy(), data.y.numpy()
    learner = TorchLearner(small_mlp, epochs=30, batch_size=32, seed=1)
    state = torch.random.get_rng_state()
    first = learner.fit(X, y).predict_proba(X)
    assert torch.equal(torch.random.get_rng_state(), state), "the global RNG must be untouched"
    second = TorchLearner(small_mlp, epochs=30, batch_size=32, seed=1).fit(X, y).predict_proba(X)
    np.testing.assert_array_equal(first, second)
    assert first.shape == (120, 2) and np.allclose(first.sum(axis=1), 1.0)
    labels = learner.predict(X)
    np.testing.assert_array_equal(labels, (first[:, 1] > 0.5).astype(np.int64))
    assert learner.loss_curve_[-1] < learner.loss_curve_[0]
    assert np.mean(labels == y) > 0.7
    other = TorchLearner(small_mlp, epochs=30, batch_size=32, seed=2).fit(X, y).predict_proba(X)
    assert not np.array_equal(first, other)


def test_torch_learner_regression_scales_the_target() -> None:
    data = make_data(150, 9, task="regression")
    X, y = data.X.numpy(), 1000.0 + 200.0 * data.y.numpy()
    learner = TorchLearner(small_mlp, task="regression", epochs=60, batch_size=32, lr=1e-2).fit(X, y)
    assert learner.target_shift_ == pytest.approx(y.mean()) and learner.target_scale_ == pytest.approx(y.std())
    predictions = learner.predict(X)
    r2 = 1 - np.sum((y - predictions) ** 2) / np.sum((y - y.mean()) ** 2)
    assert r2 > 0.9
    with pytest.raises(ValueError, match="predict_proba"):
        learner.predict_proba(X)


def test_torch_learner_in_moving_targets() -> None:
    data = make_data(120, 10)
    learner = TorchLearner(small_mlp, epochs=15, batch_size=32)
    result = MovingTargets(iterations=2).fit(learner, data, constraints=[DisparateImpact("s", 0.8)])
    assert len(result.history) == 3 and all(r["V_targets"] == 0.0 for r in result.history[1:])


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(module_factory=3), "module_factory"),
        (dict(task="ranking"), "task"),
        (dict(epochs=0), "epochs"),
        (dict(lr=0.0), "lr"),
        (dict(seed=-1), "seed"),
        (dict(warm_start="no"), "warm_start"),
    ],
)
def test_torch_learner_validation(kwargs: dict, match: str) -> None:
    factory = kwargs.pop("module_factory", small_mlp)
    with pytest.raises(ValueError, match=match):
        TorchLearner(factory, **kwargs)


def test_torch_learner_bad_data() -> None:
    learner = TorchLearner(small_mlp, epochs=1)
    with pytest.raises(ValueError, match="0/1"):
        learner.fit(np.zeros((4, 2)), [0, 1, 2, 1])
    with pytest.raises(ValueError, match="targets for"):
        learner.fit(np.zeros((4, 2)), [0, 1, 1])
    with pytest.raises(RuntimeError, match="fit"):
        TorchLearner(small_mlp).predict(np.zeros((2, 2)))
    with pytest.raises(ValueError, match="one output per row"):
        TorchLearner(lambda p: torch.nn.Linear(p, 2), epochs=1).fit(np.zeros((4, 2)), [0, 1, 0, 1])


def test_returns_the_best_iteration_and_warns_when_infeasible():
    """The returned learner is a copy of the best iteration's: feasible with the highest score,
    else the least violating, with a BoundWarning; the learner passed in stays at the last."""
    import warnings as _warnings

    from solvers.outcome import BoundWarning

    rng = np.random.default_rng(4)
    n = 300
    s = rng.integers(0, 2, n)
    X = np.column_stack([rng.normal(size=n) + 1.5 * s, rng.normal(size=n)])
    y = (X[:, 0] + 0.3 * rng.normal(size=n) > 0.8).astype(float)
    data = FairData.from_arrays(X, y, {"sex": s}, sensitive_kinds={"sex": "binary"})
    learner = LogisticRegression()
    with _warnings.catch_warnings(record=True) as caught:
        _warnings.simplefilter("always")
        result = MovingTargets(iterations=3).fit(learner, data, constraints=[DisparateImpact("sex", 0.8)],
                                                 task="classification")
    records = result.history.records
    best = result.info["returned_iteration"]
    feasible = [r for r in records if r["V_predictions"] <= 1e-9]
    if feasible:
        assert result.converged and best == max(feasible, key=lambda r: r["score"])["iteration"]
        assert not any(issubclass(w.category, BoundWarning) for w in caught)
    else:
        assert not result.converged and any(issubclass(w.category, BoundWarning) for w in caught)
        assert records[best]["V_predictions"] == min(r["V_predictions"] for r in records)
    assert result.model is not learner  # a copy of the chosen iteration's learner
    # the returned learner's predictions are the ones recorded for that iteration
    constraint = DisparateImpact("sex", 0.8)
    constraint.setup(data)
    labels = torch.as_tensor(result.model.predict(data.X.numpy()), dtype=torch.float64)
    rows = constraint.exact(2.0 * labels - 1.0, data).double()
    np.testing.assert_allclose(rows.numpy(), records[best]["c_predictions"], atol=1e-12)
