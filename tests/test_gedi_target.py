"""GeDI of a classifier's hard labels or probabilities (``GeDI(target=...)``) [GeDI sec 4-5].

References, independent of fairopt: the GeDI coefficients by numpy least squares with an
intercept on ``[z, z^2]`` (``z`` the attribute standardised with the population sd; the
intercept is equivalent to centring, [GeDI eq 16]) of the hard labels ``1{out > threshold}``
or of the probabilities ``1 / (1 + exp(-out))``.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch

from fairopt import evaluate, models
from fairopt.constraints import GeDI
from fairopt.data import FairData
from fairopt.specs import build_constraint, constraint_from_spec, constraint_to_spec
from solvers import StochasticSQP

pytestmark = pytest.mark.usefixtures("one_torch_thread")

N = 600
BOUND = 0.05  # absolute bound on GeDI(V^1); the unconstrained hard-label GeDI is about 0.35


def reference_alpha(x: np.ndarray, yhat: np.ndarray, degree: int) -> np.ndarray:
    """GeDI coefficients of ``yhat`` on the standardised polynomial kernel, by numpy lstsq."""
    z = (x - x.mean()) / x.std()
    design = np.column_stack([np.ones_like(z)] + [z**j for j in range(1, degree + 1)])
    return np.linalg.lstsq(design, yhat, rcond=None)[0][1:]


@pytest.fixture(scope="module")
def sample() -> tuple[FairData, np.ndarray, np.ndarray]:
    """A classifier's data whose labels depend on age (the attribute is not an input)."""
    rng = np.random.default_rng(0)
    age = rng.normal(40, 10, N)
    w = rng.normal(size=(N, 2))
    z = (age - age.mean()) / age.std()
    logit = 1.2 * z + 0.8 * w[:, 0] + 0.5 * rng.normal(size=N)
    X = np.c_[w, z + 0.3 * rng.normal(size=N)]
    data = FairData.from_arrays(X, (logit > 0).astype(float), {"age": age}, task="binary", include_sensitive=False)
    return data, data.sensitive["age"].double().numpy(), logit  # the attribute as the data stores it


@pytest.mark.parametrize("fine", [False, True])
@pytest.mark.parametrize("threshold", [0.0, 0.4])
def test_labels_target_measures_the_hard_labels(sample, fine, threshold):
    data, age, logit = sample
    constraint = GeDI("age", 2, bound=0.1, fine=fine, target="labels", threshold=threshold)
    constraint.setup(data)
    out = torch.tensor(logit, dtype=torch.float64)
    alpha = reference_alpha(age, (logit > threshold).astype(float), 2)
    expected = alpha if fine else [np.abs(alpha).sum()]
    np.testing.assert_allclose(constraint.exact(out, data).numpy(), expected, rtol=1e-9, atol=1e-12)
    # the smooth rows train on the smoothed step of the DI constraints: within its ramp of the labels
    assert constraint.surrogate.name == "smoothed_step"
    far = torch.where((out - threshold).abs() < 0.2, out + 0.4 * torch.sign(out - threshold), out)
    alpha_far = reference_alpha(age, (far.numpy() > threshold).astype(float), 2)
    smooth = constraint.coefficients(far, data).numpy()
    np.testing.assert_allclose(smooth, alpha_far, atol=1e-4)
    realised = np.abs(alpha).sum() if not fine else max(abs(alpha[0]), abs(alpha[1]) / constraint.tol)
    assert constraint.realised(out, data) == pytest.approx(realised, rel=1e-9)


def test_probabilities_target_measures_the_probabilities(sample):
    data, age, logit = sample
    constraint = GeDI("age", 2, bound=0.1, target="probabilities")
    constraint.setup(data)
    out = torch.tensor(logit, dtype=torch.float32)
    expected = np.abs(reference_alpha(age, 1.0 / (1.0 + np.exp(-logit)), 2)).sum()
    assert float(constraint.exact(out, data)[0]) == pytest.approx(expected, rel=1e-5)
    assert constraint.realised(out, data) == pytest.approx(expected, rel=1e-5)
    # the smooth row is the same measure, smoothed only by sqrt(alpha^2 + eps) <= |alpha| + sqrt(eps)
    assert expected <= float(constraint(out, data)[0]) <= expected + 2 * constraint.smoothing**0.5 + 1e-6


def test_relative_realised_is_on_the_scale_of_the_bound(sample):
    data, age, logit = sample
    constraint = GeDI("age", bound=0.2, relative=True, target="labels")
    constraint.setup(data)
    reference = abs(reference_alpha(age, data.y.double().numpy(), 1)[0])
    assert constraint.reference == pytest.approx(reference, rel=1e-9)
    assert constraint.absolute_bound == pytest.approx(0.2 * reference, rel=1e-9)
    out = torch.tensor(logit)
    labels = abs(reference_alpha(age, (logit > 0).astype(float), 1)[0])
    assert constraint.realised(out, data) == pytest.approx(labels / reference, rel=1e-9)


def test_every_result_says_which_gedi_it_reports(sample):
    data, _, logit = sample
    labels, probabilities, legacy = (GeDI("age", bound=0.1, target="labels"),
                                     GeDI("age", bound=0.1, target="probabilities"), GeDI("age", bound=0.1))
    assert (labels.name, probabilities.name, legacy.name) == (
        "gedi_coarse[age][labels]", "gedi_coarse[age][probabilities]", "gedi_coarse[age]")
    for c in (labels, probabilities, legacy):
        c.setup(data)
    assert labels.row_names == ["gedi_coarse[age][labels].l1"]
    # without a target a classifier's GeDI is the hard-label one (trained on probabilities): measure says so
    assert (legacy.measured, legacy.measure) == ("labels", "gedi_coarse[age][labels]")
    out = torch.tensor(logit, dtype=torch.float32)
    report = evaluate(lambda X: out, data, [labels, probabilities])
    assert report["gedi_coarse[age][labels]"] == pytest.approx(labels.exact(out, data).tolist())
    assert report["gedi_coarse[age][probabilities]"] == pytest.approx(probabilities.exact(out, data).tolist())
    assert report["gedi_coarse[age][labels]"][0] != pytest.approx(report["gedi_coarse[age][probabilities]"][0])


def test_target_validation(sample):
    with pytest.raises(ValueError, match="target: expected one of"):
        GeDI("age", bound=0.1, target="scores")
    with pytest.raises(ValueError, match="surrogate: 'sigmoid' with target='probabilities'"):
        GeDI("age", bound=0.1, target="probabilities", surrogate="sigmoid")
    rng = np.random.default_rng(1)
    regression = FairData.from_arrays(rng.normal(size=(50, 2)), rng.normal(size=50), {"x": rng.normal(size=50)},
                                      task="regression")
    with pytest.raises(ValueError, match="target: 'labels' chooses between a classifier's labels and probabilities"):
        GeDI("x", bound=0.1, target="labels").setup(regression)
    GeDI("x", bound=0.1).setup(regression)  # no target: the prediction


def test_spec_strings_name_the_target():
    labels = build_constraint("gedi[labels]:age<=0.05")
    assert (labels.target, labels.bound, labels.name) == ("labels", 0.05, "gedi_coarse[age][labels]")
    assert build_constraint("gedi[probabilities]:age:0.1").target == "probabilities"
    assert build_constraint("gedi:age:0.1").target is None
    assert build_constraint({"kind": "gedi", "sensitive": "age", "bound": 0.1, "target": "labels"}).target == "labels"
    again = constraint_from_spec(constraint_to_spec(labels))
    assert repr(again) == repr(labels)
    with pytest.raises(ValueError, match=r"'kind\[option\]' is only \[.*'gedi\[...\]'"):
        build_constraint("covariance[labels]:sex:0.8")
    with pytest.raises(ValueError, match="groups: expected one of"):  # a rate kind's bracket is its groups
        build_constraint("di[labels]:sex:0.8")
    with pytest.raises(ValueError, match="target: expected one of"):
        build_constraint("gedi[hard]:age:0.1")
    with pytest.raises(ValueError, match="spec"):
        build_constraint("gedi[labels:age:0.1")


def _fit(data: FairData, target: str | None) -> tuple[np.ndarray, object, list]:
    model = models.linear(data.X.shape[1], seed=0)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = StochasticSQP(epochs=100, seed=0).fit(model, data, loss="bce",
                                                       constraints=[GeDI("age", bound=BOUND, target=target)])
    with torch.no_grad():
        out = model(data.X).reshape(-1).double().numpy()
    return out, result, caught


def test_sqp_with_the_labels_target_meets_the_bound_on_hard_labels(sample):
    data, age, _ = sample
    out, result, caught = _fit(data, "labels")
    realised = abs(reference_alpha(age, (out > 0).astype(float), 1)[0])
    assert result.row_names == ["gedi_coarse[age][labels].l1"]
    assert result.c_exact[0] == pytest.approx(realised, rel=1e-6)  # the engine's exact check is on hard labels
    assert result.feasible and realised <= BOUND * (1 + 1e-6)
    assert not any("violates" in str(w.message) for w in caught)


def test_sqp_with_the_probabilities_target_meets_the_bound_on_probabilities(sample):
    data, age, _ = sample
    out, result, _ = _fit(data, "probabilities")
    probabilities = abs(reference_alpha(age, 1.0 / (1.0 + np.exp(-out)), 1)[0])
    labels = abs(reference_alpha(age, (out > 0).astype(float), 1)[0])
    assert result.feasible and result.row_names == ["gedi_coarse[age][probabilities].l1"]
    # feasible within the engine's feasibility_tol (1e-6 absolute), in float32 up to rel 1e-5
    assert result.c_exact[0] == pytest.approx(probabilities, rel=1e-5)
    assert probabilities <= BOUND + 1e-6 + 1e-5 * BOUND
    assert labels > 1.2 * BOUND  # what the probability bound leaves on the labels: why target matters
