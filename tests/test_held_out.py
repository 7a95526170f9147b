"""fairopt.held_out.fit_held_out returns its results as a HeldOutFit value (it is given a
trainer, not an estimator): the split it trains on, the tightened constraints, the
certificates against fairopt.certificate.certify on the held-out rows, and the options checked
when built."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch
from torch import nn

from fairopt.certificate import certify
from fairopt import FairClassifier
from fairopt.constraints import DisparateImpact
from fairopt.data import FairData
from fairopt.held_out import HeldOutFit, HeldOutOptions, fit_held_out, raise_or_warn_failed
from fairopt.exceptions import CertificateError, FairnessWarning, MarginTooLargeError
from solvers.history import FitResult, History


def _data(n: int = 600) -> FairData:
    rng = np.random.default_rng(0)
    s = rng.integers(0, 2, size=n)
    x = rng.normal(size=n) + 0.3 * s
    y = (x + rng.normal(scale=0.5, size=n) > 0).astype(float)
    return FairData.from_arrays(np.c_[x], y, {"s": s})


class _Trainer:
    """Fits nothing: a fixed linear model, recording what it was asked to train on."""

    def __init__(self) -> None:
        self.calls: list[tuple[int, list]] = []

    def __call__(self, data: FairData, constraints: list) -> tuple[FitResult, int]:
        self.calls.append((len(data), constraints))
        for c in constraints:  # as an engine does
            c.setup(data)
        model = nn.Linear(1, 1).to(data.X.dtype)
        with torch.no_grad():
            model.weight.fill_(1.0)
            model.bias.fill_(0.0)
        return FitResult(model=model, history=History(), status="fixed", converged=True), 0


def test_value_with_held_out_part_and_margin():
    data, trainer = _data(), _Trainer()
    constraint = DisparateImpact("s", 0.8)
    options = HeldOutOptions(margin=0.05, validation_fraction=0.25, seed=1)
    fit = fit_held_out(options, data, [constraint], train=trainer)
    assert isinstance(fit, HeldOutFit)
    assert len(trainer.calls) == 1 and trainer.calls[0][0] == len(fit.data) == 600 - len(fit.validation_indices)
    assert fit.training is not None and fit.training[0] is not constraint  # a tightened copy
    assert fit.candidates is None and fit.predicted is not None
    assert np.allclose(fit.predicted["margin"], 0.05)
    held = data.subset(torch.as_tensor(fit.validation_indices))
    reference = certify(fit.result.model, held, constraint, 0.95, seed=1)
    assert fit.certificate[0].realised == pytest.approx(reference.realised)
    assert fit.certificate[0].lower == pytest.approx(reference.lower)


def test_value_without_options_trains_on_everything():
    data, trainer = _data(), _Trainer()
    constraints = [DisparateImpact("s", 0.8)]
    fit = fit_held_out(HeldOutOptions(), data, constraints, train=trainer)
    assert fit.data is data and fit.training is constraints
    assert fit.certificate is None and fit.validation_indices is None and fit.predicted is None


@pytest.mark.parametrize("kwargs, name", [({"margin": "big"}, "margin"), ({"margin": -1.0}, "margin"),
                                          ({"validation_fraction": 0.7}, "validation_fraction"),
                                          ({"confidence": 1.0}, "confidence"), ({"on_fail": "stop"}, "on_fail"),
                                          ({"n_candidates": 0}, "n_candidates")])
def test_options_are_checked(kwargs, name):
    with pytest.raises(ValueError, match=rf"^{name}"):
        HeldOutOptions(**kwargs)


class _Failed:
    passed, constraint, measure, realised, n, confidence = False, "di", "DI", 0.7, 100, 0.95
    confidence_bound, bound_side, bound = 0.6, "lower", 0.8


def test_on_fail_reactions():
    raise_or_warn_failed([_Failed()], "ignore")
    raise_or_warn_failed(None, "raise")
    with pytest.warns(FairnessWarning, match="held-out certificate failed - di: DI 0.7"):
        raise_or_warn_failed([_Failed()], "warn")
    with pytest.raises(CertificateError, match="required >= 0.8"):
        raise_or_warn_failed([_Failed()], "raise")
    # the advice fits the margin the fit used (it suggested "a margin" after margin="auto")
    with pytest.warns(FairnessWarning, match="margin='auto', more rows"):
        raise_or_warn_failed([_Failed()], "warn")
    with pytest.warns(FairnessWarning, match="margin='auto' was used: more rows"):
        raise_or_warn_failed([_Failed()], "warn", "auto")
    with pytest.warns(FairnessWarning, match="a margin larger than 0.02"):
        raise_or_warn_failed([_Failed()], "warn", 0.02)


@pytest.mark.parametrize("measure, side, bound", [("disparate_impact ratio", "lower", 1.0),
                                                   ("demographic_parity difference", "upper", 0.0)])
def test_exact_parity_is_not_advised_a_margin(measure, side, bound):
    """A failed certificate of exact parity: margin='auto' would raise MarginTooLargeError there (any
    margin asks for more than parity), so the advice names more rows or a looser bound only."""
    failed = type("Parity", (_Failed,), {"measure": measure, "bound_side": side, "bound": bound})()
    with pytest.warns(FairnessWarning, match="leaves no room for a margin") as caught:
        raise_or_warn_failed([failed], "warn")
    assert "margin='auto'" not in str(caught[0].message)
    rng = np.random.default_rng(0)
    X, s = rng.normal(size=(400, 2)), rng.integers(0, 2, 400)
    y = (X[:, 0] + s > 0.5).astype(int)
    spec = ("di", "s", 1.0) if side == "lower" else ("dp", "s", 0.0)
    with pytest.raises(MarginTooLargeError):
        FairClassifier([spec], margin="auto", epochs=5).fit(X, y, sensitive_features=s)


@pytest.mark.parametrize("spec", ["dcov:g<=0.25x", ("gedi", "g", 0.3, {"relative": True})])
def test_a_numeric_margin_on_a_relative_bound_fits(spec):
    """A relative bound (a share of the training target's own measure) under a numeric margin: the fit failed
    when measuring the original after training ("a relative bound is resolved by setup(data) first"), as only
    margin='auto' set the originals up."""
    from fairopt import FairRegressor

    rng = np.random.default_rng(0)
    g = rng.integers(0, 2, 400)
    X = rng.normal(size=(400, 3))
    y = X[:, 0] + 0.8 * g + 0.3 * rng.normal(size=400)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        reg = FairRegressor(spec, epochs=30, margin=1e-4).fit(X, y, sensitive_features={"g": g})
    assert reg.status_ in ("converged", "feasible_not_stationary")
    assert reg.constraints_[0].absolute_bound is not None
