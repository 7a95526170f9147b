"""solvers.boosting: SQP in function space with LightGBM trees (BoostedSQP and its parts)."""

from __future__ import annotations

import pickle
import warnings

import lightgbm
import numpy as np
import pytest
import torch
from scipy.optimize import minimize

from fairopt.constraints import Covariance, DisparateImpact, GeDI
from fairopt.data import FairData, Preprocessor
from fairopt.surrogates import Sigmoid
from solvers.boosting import BoostedScores, BoostedSQP
from solvers.boosting.objective import row_derivatives, starting_constant
from solvers.boosting.shift import smallest_shifts
from solvers.boosting.step import RoundState, round_step
from solvers.outcome import BoundWarning, ConstantPredictorWarning, NoUsableInputWarning


def _classification(n: int = 1500, seed: int = 0) -> tuple[FairData, np.ndarray, np.ndarray]:
    """Binary data with a strong group disparity: group 1 has a higher first feature."""
    rng = np.random.default_rng(seed)
    s = rng.integers(0, 2, n)
    X = rng.normal(size=(n, 4))
    X[:, 0] += 1.5 * s
    y = (rng.random(n) < 1 / (1 + np.exp(-(2.0 * X[:, 0] + X[:, 1] - 0.5 * X[:, 2] ** 2)))).astype(float)
    return FairData.from_arrays(X, y, {"s": s}), s, y


def _regression(n: int = 1200, seed: int = 0) -> tuple[FairData, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    s = rng.integers(0, 2, n)
    X = rng.normal(size=(n, 4))
    X[:, 0] += s
    y = 2.0 * X[:, 0] + X[:, 1] + 0.3 * rng.normal(size=n)
    return FairData.from_arrays(X, y, {"s": s}, task="regression"), s, y


def _di(out: np.ndarray, s: np.ndarray) -> float:
    """Realised disparate impact of the hard labels ``out > 0`` (computed here, not by fairopt)."""
    rates = [np.mean(out[s == g] > 0) for g in (0, 1)]
    return min(rates) / max(rates)


def _log_loss(out: np.ndarray, y: np.ndarray) -> float:
    return float(np.mean(np.logaddexp(0.0, out) - y * out))


def _fit(data: FairData, **kwargs):
    options = {"rounds": 60, "n_jobs": 1, **kwargs.pop("engine", {})}
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = BoostedSQP(**options).fit(data, **kwargs)
    return result, caught


# ----------------------------------------------------------------------------- the round's QP
@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("learning_rate", [1.0, 0.1])
def test_round_step_is_the_qp_solution(seed, learning_rate):
    """``d = -G / h`` with ``G = g + eta J'y`` solves ``min g'd + 1/2 d'Hd s.t. lo <= c + eta J d <= hi``:
    compared with scipy's SLSQP on the same problem, and the multipliers have the right signs."""
    rng = np.random.default_rng(seed)
    n, m = 25, 3
    g = rng.normal(size=n)
    h = rng.uniform(0.2, 2.0, size=n)
    J = rng.normal(size=(m, n))
    c = rng.normal(size=m)
    d_free = -g / h  # make the first row bind: its upper side below the unconstrained step's value
    value = c + learning_rate * J @ d_free
    lo = np.array([-np.inf, value[1] - 5.0, -np.inf])
    hi = np.array([value[0] - 0.5, np.inf, value[2] + 5.0])
    step = round_step(torch.tensor(g), torch.tensor(h), torch.tensor(c), torch.tensor(J), torch.tensor(lo),
                      torch.tensor(hi), learning_rate, RoundState(), correction=1.0)
    d = -(step.gradient.numpy()) / h

    cons = []
    for i in range(m):
        if np.isfinite(hi[i]):
            cons.append({"type": "ineq", "fun": lambda x, i=i: hi[i] - c[i] - learning_rate * J[i] @ x,
                         "jac": lambda x, i=i: -learning_rate * J[i]})
        if np.isfinite(lo[i]):
            cons.append({"type": "ineq", "fun": lambda x, i=i: c[i] + learning_rate * J[i] @ x - lo[i],
                         "jac": lambda x, i=i: learning_rate * J[i]})
    ref = minimize(lambda x: g @ x + 0.5 * h @ (x * x), np.zeros(n), jac=lambda x: g + h * x, constraints=cons,
                   method="SLSQP", options={"ftol": 1e-14, "maxiter": 500})
    assert ref.success
    np.testing.assert_allclose(d, ref.x, atol=1e-5 * (1 + np.abs(ref.x).max()))
    y = step.qp.multipliers.numpy()
    assert y[0] > 0  # the binding upper side
    assert abs(y[1]) < 1e-9 and abs(y[2]) < 1e-9
    assert step.status == "normal"


def test_round_step_without_binding_rows_is_the_unconstrained_step():
    """Bounds the unconstrained minimiser meets: the step is ``-g / h`` with zero multipliers, as the
    QP solver finds when asked directly."""
    from solvers.qp import diagonal_qp

    rng = np.random.default_rng(9)
    n, m = 30, 2
    g, h, J, c = rng.normal(size=n), rng.uniform(0.5, 2.0, n), rng.normal(size=(m, n)), rng.normal(size=m)
    value = c + 0.1 * J @ (-g / h)
    lo, hi = value - 1.0, value + 1.0
    step = round_step(torch.tensor(g), torch.tensor(h), torch.tensor(c), torch.tensor(J), torch.tensor(lo),
                      torch.tensor(hi), 0.1, RoundState(), correction=1.0)
    direct = diagonal_qp(torch.tensor(g), torch.tensor(h), 0.1 * torch.tensor(J), torch.tensor(lo - c),
                         torch.tensor(hi - c))
    np.testing.assert_allclose(-step.gradient.numpy() / h, direct.d.numpy(), atol=1e-12)
    np.testing.assert_array_equal(step.qp.multipliers.numpy(), np.zeros(m))
    np.testing.assert_allclose(direct.multipliers.numpy(), np.zeros(m), atol=1e-12)


@pytest.mark.parametrize("correction", [0.01, 0.3, 1.0])
def test_round_step_closes_the_share_correction_of_a_violation(correction):
    """A row violated at the current scores (``c > hi``) is asked to move only ``correction`` of the way back:
    the step is the QP on the bounds relaxed to ``hi + (1 - rho)(c - hi)``, with one binding row the closed form
    ``d = -(g + eta y J_0) / h``, ``y`` from ``c_0 + eta J_0 d = target``; a row inside its bounds keeps them."""
    rng = np.random.default_rng(5)
    n, eta = 20, 0.1
    h = rng.uniform(0.2, 2.0, size=n)
    J, c = rng.normal(size=(2, n)), np.array([1.0, -1.0])
    lo, hi = np.array([-np.inf, -np.inf]), np.array([0.0, 50.0])  # row 0 violated by 1, row 1 far inside
    g = rng.normal(size=n) - 5.0 * J[0]  # the unconstrained step pushes row 0 further up: its upper side binds
    step = round_step(torch.tensor(g), torch.tensor(h), torch.tensor(c), torch.tensor(J), torch.tensor(lo),
                      torch.tensor(hi), eta, RoundState(), correction=correction)
    d = -(step.gradient.numpy()) / h
    target = hi[0] + (1.0 - correction) * (c[0] - hi[0])
    y = (-eta * J[0] @ (g / h) - (target - c[0])) / (eta ** 2 * (J[0] ** 2 / h).sum())
    assert y > 0
    np.testing.assert_allclose(d, -(g + eta * y * J[0]) / h, rtol=1e-8, atol=1e-10)
    assert c[0] + eta * J[0] @ d == pytest.approx(target, abs=1e-8)
    assert c[1] + eta * J[1] @ d < hi[1]
    np.testing.assert_allclose(step.qp.multipliers.numpy(), [y, 0.0], rtol=1e-7, atol=1e-9)


@pytest.mark.parametrize("bad", [0.0, -0.1, 1.5, float("nan"), "all"])
def test_correction_is_checked(bad):
    with pytest.raises(ValueError, match="correction"):
        BoostedSQP(correction=bad)
    with pytest.raises(ValueError, match="max_take_backs"):
        BoostedSQP(max_take_backs=bad if bad != 0.0 else -1)


def _overshooting(seed: int = 0) -> FairData:
    """Two groups that one input separates only in part, and a bound far from the unconstrained rates: the
    rounds that close the whole linearised violation overshoot (every row pushed to one side)."""
    rng = np.random.default_rng(seed)
    n = 2000
    s = rng.integers(0, 2, n)
    X = rng.normal(size=(n, 6))
    X[:, 0] += 1.2 * s
    y = (rng.random(n) < 1 / (1 + np.exp(-(2.5 * X[:, 0] + X[:, 1] - 1.5)))).astype(float)
    return FairData.from_arrays(X, y, {"s": s})


def test_a_round_above_the_starting_loss_is_taken_back():
    """With the starting constant feasible, no returned round may end above its training loss: every round
    that does is taken back (its tree removed, recorded in the history), the correction share halves each
    time, at most ``max_take_backs`` times; ``info`` counts rounds run, trees kept and rounds taken back."""
    data = _overshooting()
    result, _ = _fit(data, loss="bce", constraints=[DisparateImpact("s", 0.95)], engine={"rounds": 80})
    info, records = result.info, result.history.records
    start = records[0]["f"]
    back = [r for r in records[:-1] if r.get("taken_back")]
    assert info["taken_back"] == len(back) <= 7
    assert info["iterations"] == info["rounds"] + info["taken_back"] == len(records) - 1
    assert result.model.n_trees == info["returned_iteration"] <= info["rounds"]
    if len(back) < 7:  # every kept round stayed at or below the starting loss
        kept_losses = [r["f"] for r in records[1:-1] if not r.get("taken_back")]
        assert max(kept_losses) <= start + 1e-12
    out = result.model(data.X).detach().numpy()
    labels, s = data.y.numpy() > 0.5, data.sensitive["s"].numpy()
    assert _di(out, s) >= 0.95 - 1e-6
    majority = max(labels.mean(), 1 - labels.mean())
    assert np.mean((out > 0) == labels) >= majority + 0.2  # not the constant every round kept ends at here


def test_max_take_backs_zero_keeps_every_round():
    """``max_take_backs=0``: the rounds are all kept (the engine without step 5), one tree per round."""
    data = _overshooting()
    result, _ = _fit(data, loss="bce", constraints=[DisparateImpact("s", 0.95)],
                     engine={"rounds": 40, "max_take_backs": 0})
    assert result.info["taken_back"] == 0 and result.info["rounds"] == result.info["iterations"] == 40
    assert not any(r.get("taken_back") for r in result.history.records)


# ----------------------------------------------------------------------------- per-row derivatives
def test_row_derivatives_weights_repeat_rows():
    """Integer weights give the per-row gradient and curvature of the data with rows repeated
    (summed over the copies), and the same loss."""
    data, s, y = _classification(200)
    w = np.random.default_rng(1).integers(1, 4, 200)
    weighted = FairData.from_arrays(data.X.numpy(), y, {"s": s}, sample_weight=w.astype(float))
    repeated = FairData.from_arrays(np.repeat(data.X.numpy(), w, axis=0), np.repeat(y, w), {"s": np.repeat(s, w)})
    F = torch.from_numpy(np.random.default_rng(2).normal(size=200))
    a = row_derivatives("bce", F, weighted)
    b = row_derivatives("bce", torch.from_numpy(np.repeat(F.numpy(), w)), repeated)
    owner = np.repeat(np.arange(200), w)
    np.testing.assert_allclose(a.grad.numpy(), np.bincount(owner, b.grad.numpy()), rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(a.hess.numpy(), np.bincount(owner, b.hess.numpy()), rtol=1e-10, atol=1e-12)
    assert a.f == pytest.approx(b.f, rel=1e-10)
    # the unweighted binary cross-entropy: LightGBM's own grad and hess
    p = 1 / (1 + np.exp(-F.numpy()))
    c = row_derivatives("bce", F, data)
    np.testing.assert_allclose(c.grad.numpy(), p - y, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(c.hess.numpy(), p * (1 - p), rtol=1e-10)
    assert starting_constant("bce", data) == pytest.approx(np.log(y.mean() / (1 - y.mean())))


@pytest.mark.parametrize("loss,kappa", [("bce", 1.0), ("mse", 2.0)])
@pytest.mark.parametrize("weighted", [False, True])
def test_row_derivatives_against_the_engines_losses(loss, kappa, weighted):
    """``f`` is the loss of :mod:`solvers.losses` and ``grad`` its ``df/dF`` times ``W / kappa``."""
    from solvers.losses import get_loss, value_and_gradient

    data, s, y = _classification(300)
    if weighted:
        w = np.random.default_rng(4).uniform(0.2, 3.0, 300)
        data = FairData.from_arrays(data.X.numpy(), y, {"s": s}, sample_weight=w)
    F = torch.from_numpy(np.random.default_rng(5).normal(size=300))
    ours = row_derivatives(loss, F, data)
    f, df = value_and_gradient(get_loss(loss), F, data)
    total = float(data.weights.double().sum()) if weighted else 300.0
    assert ours.f == pytest.approx(float(f), rel=1e-9)
    np.testing.assert_allclose(ours.grad.numpy(), df.numpy() * total / kappa, rtol=1e-9, atol=1e-12)
    assert bool((ours.hess > 0).all())


# ----------------------------------------------------------------------------- the fits
def test_unconstrained_matches_plain_lightgbm():
    """Without constraints the engine is LightGBM's binary objective: the same training log loss
    and predictions (up to float32 gradients), for the same rounds and tree settings."""
    data, s, y = _classification()
    result, caught = _fit(data, loss="bce")
    assert not caught
    ours = result.model(data.X).numpy()
    params = {"objective": "binary", "learning_rate": 0.1, "num_leaves": 31, "min_data_in_leaf": 20, "seed": 0,
              "deterministic": True, "force_col_wise": True, "verbosity": -1, "num_threads": 1}
    plain = lightgbm.train(params, lightgbm.Dataset(data.X.numpy(), label=y), num_boost_round=60)
    theirs = plain.predict(data.X.numpy(), raw_score=True)
    assert _log_loss(ours, y) == pytest.approx(_log_loss(theirs, y), rel=2e-3)
    assert np.mean((ours > 0) == (theirs > 0)) > 0.99
    assert result.converged and result.info["returned_iteration"] == 60  # the lowest loss: the last round


def test_disparate_impact_met_on_all_training_rows():
    """DI >= 0.8 on the exact measure of the returned model, from a data set whose unconstrained
    booster is far below it; the model beats a constant predictor."""
    data, s, y = _classification()
    free, _ = _fit(data, loss="bce")
    assert _di(free.model(data.X).numpy(), s) < 0.6
    result, caught = _fit(data, loss="bce", engine={"rounds": 100},
                          constraints=[DisparateImpact("s", 0.8, surrogate=Sigmoid(scale=1.0))])
    out = result.model(data.X).numpy()
    assert _di(out, s) >= 0.8
    assert result.converged and result.feasible and result.status == "converged"
    assert not [w for w in caught if issubclass(w.category, BoundWarning)]
    assert _log_loss(out, y) < _log_loss(np.full_like(out, starting_constant("bce", data)), y) - 0.05
    assert np.mean((out > 0) == (y > 0.5)) > max(y.mean(), 1 - y.mean()) + 0.05
    # the history: one record per round and a closing one for the returned model
    assert len(result.history) == 101 and result.history[-1]["qp_status"] == "final"
    assert result.history[-1]["V_exact"] == 0.0


@pytest.mark.parametrize("case", ["constant", "too_few_rows", "all_missing"])
def test_no_column_to_split_on_gives_the_starting_constant_with_a_warning(case, capfd):
    """Every column constant (or missing throughout), or a column whose minority value has fewer rows than
    a leaf needs (LightGBM refuses such a data set with a fatal error): no tree is grown, the model is the
    feasible starting constant (the log-odds of the target's mean), and the fit says why, without
    LightGBM's own fatal message on the console (the engine asks the constructed data set first)."""
    rng = np.random.default_rng(0)
    n = 80
    X = np.full((n, 2), np.nan if case == "all_missing" else 3.0)
    if case == "too_few_rows":
        X[:3, 0] = 1.0  # 3 rows on one side: below min_child_samples (20)
    s, y = rng.integers(0, 2, n), (rng.random(n) < 0.4).astype(float)
    data = FairData.from_arrays(X, y, {"s": s}, preprocessor=Preprocessor(missing="keep"))
    result, caught = _fit(data, loss="bce", constraints=[DisparateImpact("s", 0.8)])
    assert [w for w in caught if issubclass(w.category, NoUsableInputWarning)]
    # said once: not again as a failed training (the generic ConstantPredictorWarning and its advice)
    assert not [w for w in caught if w.category is ConstantPredictorWarning]
    assert result.info["no_usable_input"]
    out = result.model(data.X).numpy()
    np.testing.assert_allclose(out, np.log(y.mean() / (1 - y.mean())), rtol=1e-9)
    assert result.feasible
    assert "Fatal" not in capfd.readouterr().err


def test_trees_split_on_whether_a_value_is_missing():
    """A column that is constant where present and missing elsewhere still separates rows (LightGBM's
    missing-value split): the trees learn the target's dependence on the missingness."""
    rng = np.random.default_rng(0)
    n = 600
    missing = rng.random(n) < 0.5
    X = np.where(missing, np.nan, 1.0)[:, None]
    y = (rng.random(n) < np.where(missing, 0.85, 0.15)).astype(float)
    data = FairData.from_arrays(X, y, {"s": rng.integers(0, 2, n)}, preprocessor=Preprocessor(missing="keep"))
    result, caught = _fit(data, loss="bce", engine={"rounds": 20})
    assert not caught and result.info["rounds"] == 20
    predicted = result.model(data.X).numpy() > 0
    np.testing.assert_array_equal(predicted, missing)  # the Bayes rule: positive exactly where missing


@pytest.mark.parametrize("seed", [0, 1])
def test_a_rate_constraint_without_a_surrogate_trains_under_its_group_form(seed):
    """With calibration the engine differentiates the rates' calibrated form for spread="group",
    sigmoid(t): the fit of the named sigmoid, and far more accurate than under the smoothed step, whose
    slope moves only the rows at the threshold (0.63 against 0.89 to 0.90 measured on these data).
    Without calibration the constraint is used as given. The caller's constraint is not changed."""
    data, s, y = _classification(seed=seed)

    def fit(constraint, **engine):
        result, _ = _fit(data, loss="bce", engine={"rounds": 100, **engine}, constraints=[constraint])
        return result.model(data.X)

    given = DisparateImpact("s", 0.8)
    default = fit(given)
    assert torch.equal(default, fit(DisparateImpact("s", 0.8, surrogate=Sigmoid(scale=1.0))))
    assert given.get_params()["surrogate"] is None
    sharp = fit(DisparateImpact("s", 0.8, surrogate="smoothed_step"))
    accuracy = [float(np.mean((out.numpy() > 0) == (y > 0.5))) for out in (default, sharp)]
    assert _di(default.numpy(), s) >= 0.8 - 1e-6 and accuracy[0] > accuracy[1] + 0.1
    plain = fit(DisparateImpact("s", 0.8), rounds=30, calibrate_exact=False)
    assert torch.equal(plain, fit(DisparateImpact("s", 0.8, surrogate="smoothed_step"), rounds=30,
                                  calibrate_exact=False))


def test_regression_covariance_and_gedi_bounds_met():
    """Squared error under a covariance bound and under a GeDI bound: each met by the returned
    model, measured here from its predictions (``|mean((s - s_bar) yhat)|``, ``|cov(s, yhat) / var(s)|``)."""
    data, s, y = _regression()
    free, _ = _fit(data, loss="mse")
    pred = free.model(data.X).numpy()
    cov_free = abs(np.mean((s - s.mean()) * pred))
    gedi_free = abs(np.cov(s, pred, bias=True)[0, 1] / np.var(s))
    result, _ = _fit(data, loss="mse", constraints=[Covariance("s", bound=0.3 * cov_free)])
    pred = result.model(data.X).numpy()
    assert abs(np.mean((s - s.mean()) * pred)) <= 0.3 * cov_free + 1e-6
    assert result.converged
    result, _ = _fit(data, loss="mse", constraints=[GeDI("s", bound=0.3 * gedi_free)])
    pred = result.model(data.X).numpy()
    assert abs(np.cov(s, pred, bias=True)[0, 1] / np.var(s)) <= 0.3 * gedi_free * (1 + 1e-6)
    assert np.mean((pred - y) ** 2) < np.var(y)  # better than the mean


def test_sample_weight_changes_the_fit():
    data, s, y = _classification(800)
    w = np.where(y > 0.5, 3.0, 1.0)
    weighted = FairData.from_arrays(data.X.numpy(), y, {"s": s}, sample_weight=w)
    plain, _ = _fit(data, loss="bce", engine={"rounds": 20})
    heavy, _ = _fit(weighted, loss="bce", engine={"rounds": 20})
    a, b = plain.model(data.X).numpy(), heavy.model(data.X).numpy()
    assert np.mean(b > 0) > np.mean(a > 0) + 0.02  # positives weigh more: more predicted positive


def test_infeasible_bounds_warn_and_do_not_converge():
    """Two rows no model meets (positive rate >= 0.9 and <= 0.1): BoundWarning, converged False."""

    class Rate:
        name = "rate"
        lower = torch.tensor([0.9, -np.inf], dtype=torch.float64)
        upper = torch.tensor([np.inf, 0.1], dtype=torch.float64)

        def setup(self, data):
            pass

        def __call__(self, out, batch):
            return torch.sigmoid(out).mean().repeat(2)

        def exact(self, out, batch):
            return (out > 0).double().mean().repeat(2)

    data, _, _ = _classification(400)
    result, caught = _fit(data, loss="bce", engine={"rounds": 10}, constraints=[Rate()])
    assert not result.converged and result.status == "infeasible"
    assert [w for w in caught if issubclass(w.category, BoundWarning)]
    assert result.unmet_rows


# ----------------------------------------------------------------------------- the end-game
@pytest.mark.parametrize("seed", range(5))
def test_smallest_shift_against_brute_force(seed):
    """With a positive-rate row that grows with the shift, the search finds the smallest feasible
    number of flipped labels, the same as trying every shift."""
    rng = np.random.default_rng(seed)
    scores = torch.from_numpy(np.round(rng.normal(size=60), 1))  # ties included
    target = float(rng.uniform(0.55, 0.95))
    rows = lambda F: (F > 0).double().mean().reshape(1)  # noqa: E731
    found = smallest_shifts(scores, rows, torch.tensor([target]), torch.tensor([np.inf]), 0.0)
    up = [c for c in found if c.shift > 0]
    candidates = sorted({float(-v) + 1e-9 for v in scores.tolist() if v <= 0})  # every upward flip point
    best = next(t for t in candidates if float(rows(scores + t)) >= target)
    assert len(up) == 1
    assert float(rows(scores + up[0].shift)) >= target
    assert float(rows(scores + up[0].shift)) == pytest.approx(float(rows(scores + best)))


# ----------------------------------------------------------------------------- the model
def test_boosted_scores_state_dict_and_pickle():
    data, _, _ = _classification(300)
    result, _ = _fit(data, loss="bce", engine={"rounds": 5})
    model = result.model
    fresh = BoostedScores()
    fresh.load_state_dict(model.state_dict())
    np.testing.assert_array_equal(fresh(data.X).numpy(), model(data.X).numpy())
    again = pickle.loads(pickle.dumps(model))
    np.testing.assert_array_equal(again(data.X).numpy(), model(data.X).numpy())
    assert fresh.n_trees == 5 and not list(model.parameters())
    np.testing.assert_array_equal(BoostedScores(offset=0.3)(data.X).numpy(), np.full(300, 0.3))


def test_boosted_scores_remembered_rows_follow_in_place_changes():
    """The same tensor scored twice reuses the last answer, but not after an in-place change (nor for
    equal rows in another tensor, which score the same): every answer equals LightGBM's prediction."""
    data, _, _ = _classification(300)
    model = _fit(data, loss="bce", engine={"rounds": 20})[0].model
    booster = lightgbm.Booster(model_str=model.model_string)
    X = data.X.clone().double()
    expected = lambda rows: booster.predict(rows.numpy(), raw_score=True) + float(model.offset)  # noqa: E731
    np.testing.assert_allclose(model(X).numpy(), expected(X), rtol=0, atol=1e-12)
    X[:50, 0] += 3.0  # in place: the tensor's version changes
    changed = model(X).numpy()
    np.testing.assert_allclose(changed, expected(X), rtol=0, atol=1e-12)
    assert np.any(changed[:50] != expected(data.X.double())[:50])
    np.testing.assert_array_equal(model(X.clone()).numpy(), changed)


@pytest.mark.parametrize("constrained", [False, True])
def test_the_returned_model_remembers_its_training_scores_bit_for_bit(constrained):
    """A fit that returns its last round hands its model LightGBM's running scores of the training rows (no
    second pass of every row through every tree): they equal, bit for bit, what a model rebuilt from the
    saved trees predicts for those rows."""
    data, _, _ = _classification()
    cons = [DisparateImpact("s", 0.8, surrogate=Sigmoid(scale=1.0))] if constrained else []
    result, _ = _fit(data, loss="bce", constraints=cons, engine={"rounds": 80, "max_take_backs": 0})
    model = result.model
    assert result.info["returned_iteration"] == result.info["rounds"] == 80
    assert model._memo is not None  # remembered by the engine
    rebuilt = BoostedScores()
    rebuilt.load_state_dict(model.state_dict())  # nothing remembered: predicts every row
    assert rebuilt._memo is None
    np.testing.assert_array_equal(model(data.X).numpy(), rebuilt(data.X).numpy())
    np.testing.assert_array_equal(model(data.X.clone()).numpy(), rebuilt(data.X).numpy())


def test_an_earlier_best_round_remembers_its_running_scores_too():
    """Validation rows that pick an earlier round than the last (the training rows overfitted): the returned
    model of that many trees takes the running scores the round was offered at, equal bit for bit to what a
    model rebuilt from its saved trees predicts."""
    data, _, _ = _classification(600, seed=1)
    train, valid = _held_out(data, 300)
    result, _ = _fit(train, loss="bce", validation=valid, constraints=[DisparateImpact("s", 0.8)],
                     engine={"rounds": 150, "num_leaves": 31, "max_take_backs": 0})
    model = result.model
    assert 0 < result.info["returned_iteration"] < result.info["rounds"]
    assert model._memo is not None
    rebuilt = BoostedScores()
    rebuilt.load_state_dict(model.state_dict())
    np.testing.assert_array_equal(model(train.X).numpy(), rebuilt(train.X).numpy())


def test_remembered_scores_are_checked_against_the_trees():
    """Scores that are not the trees' (one row off in its last bit) are not remembered: the model predicts."""
    data, _, _ = _classification(400)
    model = _fit(data, loss="bce", engine={"rounds": 10})[0].model
    rebuilt = BoostedScores()
    rebuilt.load_state_dict(model.state_dict())
    true = torch.from_numpy(lightgbm.Booster(model_str=model.model_string).predict(data.X.double().numpy(),
                                                                                raw_score=True))
    wrong = true.clone()
    wrong[133] = np.nextafter(float(wrong[133]), np.inf)  # one of the rows checked (every 400/256th)
    fresh = BoostedScores()
    fresh.load_state_dict(model.state_dict())
    assert not fresh.remember(data.X, wrong) and fresh._memo is None
    np.testing.assert_array_equal(fresh(data.X).numpy(), rebuilt(data.X).numpy())
    assert fresh.remember(data.X, true) and not BoostedScores().remember(data.X, true)  # no trees: nothing to take


def test_validation():
    data, _, _ = _classification(100)
    with pytest.raises(ValueError, match="loss"):
        BoostedSQP(rounds=2).fit(data, loss="poisson")
    with pytest.raises(ValueError, match="objective"):
        BoostedSQP(params={"objective": "binary"})
    with pytest.raises(ValueError, match="num_leaves"):
        BoostedSQP(num_leaves=1)

    class Detached:
        name = "detached"
        lower = torch.tensor([-np.inf], dtype=torch.float64)
        upper = torch.tensor([0.5], dtype=torch.float64)

        def setup(self, data):
            pass

        def __call__(self, out, batch):
            return (out.detach() > 0).double().mean().reshape(1)

        exact = __call__

    with pytest.raises(ValueError, match="'detached' has no Jacobian"):
        BoostedSQP(rounds=2).fit(data, loss="bce", constraints=[Detached()])


# ----------------------------------------------------------------------------- validation rows
def _held_out(data: FairData, n_valid: int, seed: int = 0) -> tuple[FairData, FairData]:
    order = np.random.default_rng(seed).permutation(len(data))
    return data.subset(torch.from_numpy(order[n_valid:])), data.subset(torch.from_numpy(order[:n_valid]))


@pytest.mark.parametrize("metric", ["loss", "error"])
def test_validation_criterion_per_round(metric):
    """The per-round validation criterion is that of the model with that many trees, recomputed here
    from LightGBM's own predictions (log loss or error rate of ``init + trees``)."""
    data, _, _ = _classification(2000, seed=4)
    train, valid = _held_out(data, 500)
    result, _ = _fit(train, loss="bce", validation=valid, engine={"rounds": 40, "validation_metric": metric})
    curve = result.info["validation_losses"]
    assert len(curve) == 41 and result.info["best_validation_round"] == int(np.argmin(curve))
    full = lightgbm.Booster(model_str=result.model.model_string)  # the returned round's trees
    init, yv = result.info["init_score"], valid.y.numpy()
    for trees in {0, 1, result.info["returned_iteration"]}:
        raw = full.predict(valid.X.numpy(), raw_score=True, num_iteration=trees) if trees else 0.0
        out = init + raw + np.zeros(len(yv))
        expected = _log_loss(out, yv) if metric == "loss" else np.mean((out > 0) != (yv > 0.5))
        assert curve[trees] == pytest.approx(expected, rel=1e-9, abs=1e-12)


def test_early_stopping_returns_the_best_feasible_round():
    """Under DI >= 0.8 with validation rows and early stopping: the returned round meets the bound on
    every training row (checked here), has the lowest validation loss among the rounds that met it on
    the training rows (the history's exact violations), and the rounds stop once ``patience`` feasible
    rounds have followed it."""
    data, s, _ = _classification(3000, seed=5)
    train, valid = _held_out(data, 800)
    patience = 15
    result, caught = _fit(train, loss="bce", validation=valid, constraints=[DisparateImpact("s", 0.8)],
                          engine={"rounds": 400, "num_leaves": 31, "early_stopping_rounds": patience})
    info = result.info
    assert not [w for w in caught if issubclass(w.category, BoundWarning)]
    assert _di(result.model(train.X).numpy(), train.sensitive["s"].numpy()) >= 0.8
    curve = info["validation_losses"]
    assert info["rounds"] < 400 and info["shift"] == 0.0
    feasible = [r["iteration"] for r in result.history.records[:-1] if r["V_exact_max"] <= 1e-6]
    assert len(feasible) < info["rounds"]  # some rounds miss the bound on the training rows: not candidates
    assert info["returned_iteration"] == min(feasible, key=lambda t: (curve[t], t))
    assert len([t for t in feasible if t > info["returned_iteration"]]) == patience
    assert feasible[-1] == info["rounds"] - 1  # the last round run was the patience-th feasible one
    with pytest.raises(ValueError, match="validation"):
        BoostedSQP(rounds=2, early_stopping_rounds=3).fit(train, loss="bce")
    with pytest.raises(ValueError, match="columns"):
        BoostedSQP(rounds=2).fit(train, loss="bce", validation=FairData.from_arrays(
            np.zeros((5, 2)), np.zeros(5), {"s": np.arange(5) % 2}))
    reg, _, _ = _regression(300)
    with pytest.raises(ValueError, match="error"):
        BoostedSQP(rounds=2, validation_metric="error").fit(reg, loss="mse", validation=reg)


def test_engines_that_differentiate_their_model_refuse_missing_inputs_which_boosting_takes():
    """Rows with missing inputs: the SQP, penalty and Lagrangian engines refuse them up front (a row without a
    value has no output to differentiate), naming the boosted engine; BoostedSQP fits them."""
    from fairopt.models import linear
    from solvers import LagrangianDual, Penalty, StochasticSQP

    rng = np.random.default_rng(0)
    n = 300
    X = rng.normal(size=(n, 3))
    X[rng.random((n, 3)) < 0.1] = np.nan
    s, y = rng.integers(0, 2, n), (rng.random(n) < 0.4).astype(float)
    data = FairData.from_arrays(X, y, {"s": s}, preprocessor=Preprocessor(missing="keep"))
    constraint = DisparateImpact("s", 0.8)
    fits = {"sqp": lambda: StochasticSQP(epochs=2).fit(linear(3), data, loss="bce", constraints=[constraint]),
            "penalty": lambda: Penalty(epochs=2).fit(linear(3), data, loss="bce"),
            "lagrangian": lambda: LagrangianDual(epochs=2).fit(linear(3), data, loss="bce", constraints=[constraint])}
    for fit in fits.values():
        with pytest.raises(ValueError, match=r"data.X: \d+ row\(s\) hold missing input values .*BoostedSQP"):
            fit()
    result, _ = _fit(data, loss="bce", engine={"rounds": 10}, constraints=[constraint])
    assert result.feasible
