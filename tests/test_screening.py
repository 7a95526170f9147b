"""Row screening (solvers.sqp.screening): Jacobian rows of constraint rows far inside their
bounds are skipped, without changing what the SQP step sees."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

import fairopt
from fairopt.constraints import DemographicParity, DisparateImpact
from solvers import StochasticSQP
from solvers.derivatives import LocalDerivatives
from solvers.losses import bce_loss
from solvers.problem import as_constraint_set, trainable_parameters
from solvers.sqp.screening import RowScreen

INF = math.inf


def test_no_screening_before_two_observations_and_on_refresh():
    screen = RowScreen(ratio=10.0, refresh=4)
    lower, upper = torch.full((2,), -INF, dtype=torch.float64), torch.zeros(2, dtype=torch.float64)
    assert screen.rows(lower, upper) is None  # nothing seen
    screen.observe(torch.tensor([-0.001, -1.0]))
    assert screen.rows(lower, upper) is None  # one observation: no movement scale yet
    screen.observe(torch.tensor([-0.002, -1.001]))  # both moved by 1e-3
    rows = screen.rows(lower, upper)
    # row 0 is 0.002 from its bound (< 10 x 1e-3): needed; row 1 is 1.001 away: screened
    assert rows.tolist() == [True, False]
    screen.observe(torch.tensor([-0.002, -1.002]))
    screen.observe(torch.tensor([-0.002, -1.003]))  # 4th observation: refresh
    assert screen.rows(lower, upper) is None


def test_slack_is_measured_to_the_nearest_finite_bound_and_decays():
    screen = RowScreen(ratio=2.0, refresh=100, decay=0.5)
    lower = torch.tensor([0.0, -INF, 0.0], dtype=torch.float64)
    upper = torch.tensor([1.0, INF, 0.0], dtype=torch.float64)  # two-sided, free, equality
    screen.observe(torch.tensor([0.5, 3.0, 0.0]))
    screen.observe(torch.tensor([0.4, 3.1, 0.0]))  # moves 0.1, 0.1, 0
    # row 0: slack 0.4 > 2 x 0.1 -> screened; free row: screened; equality: never (no slack)
    assert screen.rows(lower, upper).tolist() == [False, False, True]
    screen.observe(torch.tensor([0.05, 3.1, 0.0]))  # a jump of 0.35: row 0 now needed
    assert screen.rows(lower, upper).tolist() == [True, False, True]
    screen.reset()
    assert screen.rows(lower, upper) is None


def test_local_oracle_pulls_back_only_the_rows_asked_for():
    frame, _ = fairopt.datasets.load_frame("adult")
    frame = frame.sample(n=600, random_state=1)
    X = frame[["age", "education-num", "hours-per-week"]].to_numpy(float)
    data = fairopt.FairData.from_arrays(X, frame["income"].to_numpy(float),
                                        {"sex": (frame["sex"] == "Male").to_numpy(float)})
    model = fairopt.models.mlp(data.n_features, hidden=(5,), seed=0)
    params = trainable_parameters(model)
    cons = as_constraint_set([DisparateImpact("sex", delta=0.8), DemographicParity("sex", bound=0.05)])
    cons.setup(data)
    oracle = LocalDerivatives("loop")  # "auto" takes the stratified pullback here, which computes every row
    full = oracle(model, params, bce_loss, cons, data, data)
    rows = torch.tensor([True, False, True])  # DI: 2 rows, DP: 1 two-sided row
    part = oracle(model, params, bce_loss, cons, data, data, rows)
    assert part.f == full.f and torch.equal(part.g, full.g) and torch.equal(part.c, full.c)
    torch.testing.assert_close(part.J[rows], full.J[rows])
    assert torch.count_nonzero(part.J[~rows]) == 0 and part.skipped == 1 and full.skipped == 0
    none = oracle(model, params, bce_loss, cons, data, data, torch.zeros(3, dtype=torch.bool))
    assert torch.equal(none.g, full.g) and torch.count_nonzero(none.J) == 0
    with pytest.raises(ValueError, match="rows"):
        oracle(model, params, bce_loss, cons, data, data, torch.ones(2, dtype=torch.bool))


def _dutch_like(n: int = 3000, seed: int = 0) -> fairopt.FairData:
    gen = torch.Generator().manual_seed(seed)
    s = (torch.rand(n, generator=gen) < 0.5).double()
    X = torch.randn(n, 4, generator=gen, dtype=torch.float64) + 0.8 * s[:, None]
    y = ((X[:, 0] + 0.5 * X[:, 1] + 0.3 * torch.randn(n, generator=gen, dtype=torch.float64)) > 0.4).double()
    return fairopt.FairData.from_arrays(X.numpy(), y.numpy(), {"s": s.numpy()})


def test_screening_skips_rows_and_leaves_the_fit_unchanged():
    """Disparate impact on a binary attribute: one of its two rows is always far inside
    (delta < 1), so it is screened most iterations; the QP never needed it, so the fit is
    the same as with every row. The smoothed step named: 150 iterations (under the rates' calibrated
    form the fit converges after 18, before the movement history screens a row)."""
    data = _dutch_like()
    fits = {}
    for screen in (False, True):
        model = fairopt.models.linear(data.n_features, seed=0)
        result = StochasticSQP(epochs=150, screen_rows=screen, jacobian="loop").fit(
            model, data, loss="bce", constraints=[DisparateImpact("s", delta=0.8, surrogate="smoothed_step")])
        fits[screen] = (torch.cat([p.detach().reshape(-1) for p in model.parameters()]), result)
    (w_all, r_all), (w_screen, r_screen) = fits[False], fits[True]
    skipped = np.nan_to_num(r_screen.history.column("screened"))  # the final-check record has none
    assert skipped.sum() > 50  # most iterations skip the slack row
    assert np.nansum(r_all.history.column("screened")) == 0
    torch.testing.assert_close(w_screen, w_all, rtol=1e-6, atol=1e-8)
    assert r_screen.feasible == r_all.feasible


def test_screen_rows_must_be_a_flag():
    with pytest.raises(ValueError, match="screen_rows"):
        StochasticSQP(screen_rows="yes")


def test_stratified_pullback_skips_nothing_and_says_so():
    """The stratified pullback ("auto" for rate rows, a network and enough rows) computes every
    Jacobian row whatever ``rows`` asks, and says it skipped none."""
    from solvers.strata import MIN_ROWS

    data = _dutch_like(MIN_ROWS)
    model = fairopt.models.mlp(data.n_features, hidden=(4,), seed=0)
    cons = as_constraint_set([DisparateImpact("s", delta=0.8)])
    cons.setup(data)
    der = LocalDerivatives()(model, trainable_parameters(model), bce_loss, cons, data, data,
                             torch.tensor([True, False]))
    assert der.skipped == 0 and bool((der.J.abs().sum(dim=1) > 0).all())
