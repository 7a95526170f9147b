"""The estimators' first-order methods on mini-batches: a budget of steps, a decayed step, the Penalty's
smoothed hinge switch and the Lagrangian classifier's signed dual update on calibrated rows (fairopt.training)."""

from __future__ import annotations

import math
import warnings

import pytest
import torch

import fairopt
from fairopt import FairClassifier
from fairopt.data import FairData
from fairopt.exceptions import FairnessWarning
from fairopt.training import (ENGINE_DEFAULTS, FIRST_ORDER_MINIBATCH_SCHEDULE, LAGRANGIAN_CALIBRATE_EXACT,
                              PENALTY_ROW_SMOOTHING, TrainingOptions, engine_options, engine_param_defaults,
                              first_order_minibatch_epochs)
from solvers.lagrangian import LagrangianDual
from solvers.penalty import Penalty, schedule_factor, smoothed_switch

pytestmark = pytest.mark.usefixtures("one_torch_thread")

FULL_EPOCHS = ENGINE_DEFAULTS["binary"]["first_order"]["epochs"]


@pytest.fixture(scope="module")
def adult_sample() -> FairData:
    """3,000 seeded rows of the embedded Adult (sex the sensitive attribute, not an input)."""
    data = fairopt.datasets.load("adult")
    idx = torch.randperm(len(data), generator=torch.Generator().manual_seed(0))[:3000]
    return data.subset(idx)


def test_the_budget_is_the_full_batch_epochs_as_steps():
    # 14,000 rows in batches of 256: 55 steps an epoch, 19 epochs for 1,000 steps
    assert first_order_minibatch_epochs(1000, 256, 14000) == 19
    assert first_order_minibatch_epochs(1000, 1024, 14000) == math.ceil(1000 / 14)
    assert first_order_minibatch_epochs(1000, 2, 3) == 500  # never more than the full batch's epochs
    assert first_order_minibatch_epochs(3000, 256, 1000) == 750
    mini = TrainingOptions(method="penalty", task="binary", batch_size=256)
    assert engine_options(mini, "first_order", n_rows=14000) == {"epochs": 19, "lr": 0.02, "batch_size": 256}
    given = TrainingOptions(method="penalty", task="binary", batch_size=256, epochs=7, lr=0.1)
    assert engine_options(given, "first_order", n_rows=14000) == {"epochs": 7, "lr": 0.1, "batch_size": 256}
    covering = TrainingOptions(method="lagrangian", task="binary", batch_size=20000)
    assert engine_options(covering, "first_order", n_rows=14000)["epochs"] == FULL_EPOCHS


def test_full_batch_fits_take_no_mini_batch_defaults(adult_sample):
    for method in ("penalty", "lagrangian"):
        assert engine_param_defaults(TrainingOptions(method=method, task="binary"), adult_sample) == {}
        full = TrainingOptions(method=method, task="binary", batch_size=len(adult_sample))
        assert engine_param_defaults(full, adult_sample) == {}
    assert engine_options(TrainingOptions(method="penalty", task="binary"), "first_order", n_rows=3000) == {
        "epochs": FULL_EPOCHS, "lr": 0.02}


def test_mini_batch_defaults_per_method(adult_sample):
    penalty = engine_param_defaults(TrainingOptions(method="penalty", task="binary", batch_size=256), adult_sample)
    assert penalty == {"lr_schedule": FIRST_ORDER_MINIBATCH_SCHEDULE, "row_smoothing": PENALTY_ROW_SMOOTHING}
    dual = engine_param_defaults(TrainingOptions(method="lagrangian", task="binary", batch_size=256), adult_sample)
    assert dual == {"lr_schedule": FIRST_ORDER_MINIBATCH_SCHEDULE, "dual_update": "signed",
                    "calibrate_exact": LAGRANGIAN_CALIBRATE_EXACT}
    given_lr = TrainingOptions(method="lagrangian", task="binary", batch_size=256, lr=0.01)
    assert "lr_schedule" not in engine_param_defaults(given_lr, adult_sample)  # a user's step stays constant


def test_schedule_factor():
    assert schedule_factor("none", 5, 10) == 1.0
    assert schedule_factor("cosine", 0, 10) == 1.0
    assert schedule_factor("cosine", 5, 10) == pytest.approx(0.5)
    assert schedule_factor("linear", 5, 10) == pytest.approx(0.5)
    assert schedule_factor("cosine", 10, 10) == pytest.approx(0.0, abs=1e-12)


def test_smoothed_switch_keeps_the_batch_value_and_takes_the_running_means_switch():
    lower, upper = torch.tensor([-math.inf, 0.0]), torch.tensor([0.0, math.inf])
    state: dict = {"mean": torch.tensor([-1.0, -1.0])}  # the running mean: row 0 met, row 1 below its lower bound
    c = torch.tensor([0.5, -0.2], requires_grad=True)  # the batch: row 0 above its upper bound, row 1 below
    value = smoothed_switch(c, torch.tensor(0.7), lower, upper, state, 0.1)
    assert float(value) == pytest.approx(0.7)
    value.backward()
    # row 0's hinge is off (the mean meets it), row 1's on its lower side: gradient -1
    assert c.grad.tolist() == pytest.approx([0.0, -1.0])
    assert state["mean"].tolist() == pytest.approx([0.9 * -1.0 + 0.1 * 0.5, 0.9 * -1.0 + 0.1 * -0.2])


def test_row_smoothing_is_checked_and_leaves_a_full_batch_as_it_was(adult_sample):
    with pytest.raises(ValueError, match="row_smoothing"):
        Penalty(row_smoothing=0.0)
    from fairopt.constraints import DisparateImpact

    params = []
    for smoothing in (None, 0.05):
        constraint = DisparateImpact("sex", 0.8)
        model = fairopt.models.linear(adult_sample.n_features, seed=0)
        Penalty(epochs=20, lr=0.02, row_smoothing=smoothing, verbose=0).fit(model, adult_sample,
                                                                            penalties=[constraint])
        params.append(torch.cat([p.detach().reshape(-1) for p in model.parameters()]))
    assert torch.equal(params[0], params[1])


@pytest.mark.parametrize("method", ["penalty", "lagrangian"])
def test_a_mini_batch_fit_takes_the_step_budget_and_ends_near_the_full_batch(adult_sample, method):
    fits = {}
    for batch in (None, 256):
        clf = FairClassifier([("disparate_impact", "sex", 0.8)], method=method, batch_size=batch, seed=0)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            clf.fit(adult_sample)
        fits[batch] = (clf, [w for w in caught if issubclass(w.category, FairnessWarning)])
    full, (mini, warned) = fits[None][0], fits[256]
    per_epoch = math.ceil(len(adult_sample) / 256)
    epochs = first_order_minibatch_epochs(FULL_EPOCHS, 256, len(adult_sample))
    assert max(r["epoch"] for r in mini.history_) + 1 == epochs
    assert len(mini.history_) == epochs * per_epoch <= FULL_EPOCHS + per_epoch - 1
    assert mini.score(adult_sample) >= full.score(adult_sample) - 0.02
    if full.train_violation_ <= 1e-9:  # the bound met on all rows as by the full batch, or warned
        assert mini.train_violation_ <= 1e-9 or warned


def test_calibrated_rows_take_the_exact_level_and_the_calibrated_forms_gradient(adult_sample):
    from fairopt.constraints import DisparateImpact

    constraint = DisparateImpact("sex", 0.8)
    model = fairopt.models.linear(adult_sample.n_features, seed=0)
    engine = LagrangianDual(epochs=1, lr=0.02, dual_update="signed", batch_size=500, calibrate_exact=True, verbose=0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # one epoch: the bound is not the point here
        engine.fit(model, adult_sample, constraints=[constraint])
    batch = adult_sample.subset(torch.arange(500))
    out = model(batch.X).reshape(-1).detach().requires_grad_(True)
    c, _, _ = engine._row_violations(out, batch)
    (grad,) = torch.autograd.grad(c.sum(), out)
    form = constraint.calibrated_form("threshold")  # a linear model's: sigmoid(5 out)
    (expected,) = torch.autograd.grad(form(out, batch).reshape(-1).sum(), out)
    exact = constraint.exact(out.detach(), batch).reshape(-1)
    assert c.detach().double().tolist() == pytest.approx(exact.double().tolist(), abs=1e-6)
    assert torch.allclose(grad, expected, atol=1e-6)
    smoothed = torch.autograd.grad(constraint(out, batch).reshape(-1).sum(), out)[0]
    assert not torch.allclose(grad, smoothed, atol=1e-3)  # not the default smoothed step's slope


def test_the_lagrangian_on_mini_batches_ends_within_a_point_of_its_full_batch(adult_sample):
    # 3,000 Adult rows: the batch rows' smoothed-step gradient left the signed update 1.7 points short at 256 rows
    constraint = [("disparate_impact", "sex", 0.8)]
    full = FairClassifier(constraint, method="lagrangian", seed=0).fit(adult_sample)
    for batch in (256, 1024):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            mini = FairClassifier(constraint, method="lagrangian", batch_size=batch, seed=0).fit(adult_sample)
        assert mini.score(adult_sample) >= full.score(adult_sample) - 0.01, batch
        warned = any(issubclass(w.category, FairnessWarning) for w in caught)
        assert mini.train_violation_ <= 1e-9 or warned
