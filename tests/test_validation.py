"""solvers.validation: the one home of the parameter checks, and the engines/estimators using it."""

from __future__ import annotations

import math
import re

import numpy as np
import pytest
import torch

import fairopt._validation as fairopt_validation
from solvers import validation
from solvers.validation import (as_float_array, check_choice, check_flag, check_interval, check_seed, finite_float,
                                nonnegative_float, positive_float, positive_int)

NOT_NUMBERS = [True, False, np.bool_(True), "1", b"1", None, [1.0], object()]
NOT_FINITE = [math.nan, math.inf, -math.inf, np.float64("nan")]


def _message(name: str, what: str, value) -> str:
    """The exact message format: ``<name>: expected <what>, got <value!r>``."""
    return "^" + re.escape(f"{name}: expected {what}, got {value!r}") + "$"


# ----------------------------------------------------------------------------- finite_float
@pytest.mark.parametrize("value, expected", [(1, 1.0), (-2.5, -2.5), (0, 0.0), (np.float32(0.5), 0.5),
                                             (np.int64(3), 3.0), (np.array(2.0), 2.0), (torch.tensor(1.5), 1.5)])
def test_finite_float_accepts_real_numbers(value, expected):
    result = finite_float(value, "x")
    assert result == expected and type(result) is float


@pytest.mark.parametrize("value", NOT_NUMBERS)
def test_finite_float_rejects_non_numbers_and_bools(value):
    with pytest.raises(ValueError, match=_message("x", "a real number", value)):
        finite_float(value, "x")


@pytest.mark.parametrize("value", NOT_FINITE)
def test_finite_float_rejects_nan_and_inf(value):
    with pytest.raises(ValueError, match=_message("x", "a finite number", value)):
        finite_float(value, "x")


# ----------------------------------------------------------------------------- positive_float
@pytest.mark.parametrize("value", [1e-12, 1, 3.5, np.float32(2.0), np.int32(4)])
def test_positive_float_accepts_positive_numbers(value):
    assert positive_float(value, "lr") == float(value)
    assert positive_float(value, "lr", allow_zero=True) == float(value)


def test_positive_float_zero_only_with_allow_zero():
    with pytest.raises(ValueError, match=_message("lr", "a finite positive number", 0.0)):
        positive_float(0.0, "lr")
    assert positive_float(0, "tol", allow_zero=True) == 0.0
    assert nonnegative_float(0, "tol") == 0.0


@pytest.mark.parametrize("value", [-1e-9, -3] + NOT_NUMBERS + NOT_FINITE)
def test_positive_float_rejects(value):
    with pytest.raises(ValueError, match=_message("lr", "a finite positive number", value)):
        positive_float(value, "lr")
    with pytest.raises(ValueError, match=_message("tol", "a finite number >= 0", value)):
        positive_float(value, "tol", allow_zero=True)
    with pytest.raises(ValueError, match=_message("tol", "a finite number >= 0", value)):
        nonnegative_float(value, "tol")


# ----------------------------------------------------------------------------- positive_int
@pytest.mark.parametrize("value", [1, 7, np.int64(3), np.uint8(2)])
def test_positive_int_accepts_integers(value):
    result = positive_int(value, "epochs")
    assert result == int(value) and type(result) is int


def test_positive_int_zero_only_with_allow_zero():
    with pytest.raises(ValueError, match=_message("epochs", "a positive integer", 0)):
        positive_int(0, "epochs")
    assert positive_int(0, "verbose", allow_zero=True) == 0
    with pytest.raises(ValueError, match=_message("verbose", "a non-negative integer", -1)):
        positive_int(-1, "verbose", allow_zero=True)


@pytest.mark.parametrize("value", [-1, 2.0, 2.5, np.float64(3.0), True, False, np.bool_(True), "3", None, math.nan])
def test_positive_int_rejects_non_integers_and_bools(value):
    with pytest.raises(ValueError, match=_message("epochs", "a positive integer", value)):
        positive_int(value, "epochs")


def test_positive_int_integral_floats_only_when_allowed():
    assert positive_int(10.0, "epochs", allow_integral_float=True) == 10
    assert positive_int(np.float32(4.0), "epochs", allow_integral_float=True) == 4
    for bad in (2.5, 0.0, -3.0, math.inf, math.nan, True):
        with pytest.raises(ValueError, match="^epochs: expected a positive integer"):
            positive_int(bad, "epochs", allow_integral_float=True)


# ----------------------------------------------------------------------------- check_interval
@pytest.mark.parametrize("closed, text, low_ok, high_ok", [
    ("neither", "a number in (0, 1)", False, False),
    ("left", "a number in [0, 1)", True, False),
    ("right", "a number in (0, 1]", False, True),
    ("both", "a number in [0, 1]", True, True),
])
def test_check_interval_ends_and_brackets(closed, text, low_ok, high_ok):
    assert check_interval(0.5, "beta", 0.0, 1.0, closed=closed) == 0.5
    for value, ok in ((0.0, low_ok), (1.0, high_ok)):
        if ok:
            assert check_interval(value, "beta", 0, 1, closed=closed) == value
        else:
            with pytest.raises(ValueError, match=_message("beta", text, value)):
                check_interval(value, "beta", 0, 1, closed=closed)
    for value in [-0.1, 1.1, *NOT_NUMBERS, *NOT_FINITE]:
        with pytest.raises(ValueError, match=_message("beta", text, value)):
            check_interval(value, "beta", 0, 1, closed=closed)


def test_check_interval_formats_the_ends():
    with pytest.raises(ValueError, match=re.escape("fraction: expected a number in (0, 0.5], got 0.7")):
        check_interval(0.7, "fraction", 0.0, 0.5, closed="right")
    with pytest.raises(ValueError, match="^closed: expected one of"):
        check_interval(0.5, "x", 0, 1, closed="open")


# ----------------------------------------------------------------------------- check_choice
def test_check_choice():
    assert check_choice("adam", ("adam", "sgd"), "optimizer") == "adam"
    assert check_choice("b", ["a", "b"], "x") == "b"
    for bad in ("lbfgs", "ADAM", None, 1, True, ["adam"]):
        with pytest.raises(ValueError, match=_message("optimizer", "one of ['adam', 'sgd']", bad)):
            check_choice(bad, ("adam", "sgd"), "optimizer")


# ----------------------------------------------------------------------------- check_flag
def test_check_flag():
    assert check_flag(True, "fine") is True
    assert check_flag(False, "fine") is False
    assert check_flag(np.bool_(True), "fine") is True
    for bad in (1, 0, "yes", None, 1.0, np.int64(1)):
        with pytest.raises(ValueError, match=_message("fine", "True or False", bad)):
            check_flag(bad, "fine")


def test_check_flag_allow_none():
    assert check_flag(None, "distributed", allow_none=True) is None
    assert check_flag(False, "distributed", allow_none=True) is False
    with pytest.raises(ValueError, match=_message("distributed", "None, True or False", "yes")):
        check_flag("yes", "distributed", allow_none=True)


# ----------------------------------------------------------------------------- check_seed
def test_check_seed_defaults_integer_or_none():
    assert check_seed(None) is None
    assert check_seed(-3) == -3
    result = check_seed(np.int64(5))
    assert result == 5 and type(result) is int
    for bad in (0.5, 1.0, True, "0", np.bool_(False)):
        with pytest.raises(ValueError, match=_message("seed", "an integer or None", bad)):
            check_seed(bad)


def test_check_seed_options():
    with pytest.raises(ValueError, match=_message("seed", "an integer", None)):
        check_seed(None, allow_none=False)
    with pytest.raises(ValueError, match=_message("seed", "an integer", 0.5)):
        check_seed(0.5, allow_none=False)
    assert check_seed(0, allow_none=False, allow_negative=False) == 0
    with pytest.raises(ValueError, match=_message("seed", "a non-negative integer", -1)):
        check_seed(-1, allow_none=False, allow_negative=False)
    with pytest.raises(ValueError, match=_message("seed", "a non-negative integer or None", -1)):
        check_seed(-1, allow_negative=False)
    with pytest.raises(ValueError, match=_message("random_state", "an integer or None", "x")):
        check_seed("x", name="random_state")


# ----------------------------------------------------------------------------- as_float_array
def test_as_float_array():
    out = as_float_array([1, 2, 3], "y")
    assert out.dtype == np.float64 and out.tolist() == [1.0, 2.0, 3.0]
    tensor = torch.tensor([[1.0, 2.0]], requires_grad=True)
    assert as_float_array(tensor, "X").shape == (1, 2)
    assert np.isnan(as_float_array([np.nan], "y")[0])  # conversion only: NaN is kept
    with pytest.raises(ValueError, match=r"^y: expected numbers, got list"):
        as_float_array(["a", "b"], "y")


# ----------------------------------------------------------------------------- one implementation
def test_fairopt_reexports_the_same_functions():
    for name in ("finite_float", "positive_float", "nonnegative_float", "positive_int", "check_choice",
                 "check_flag", "check_interval", "check_seed"):
        assert getattr(fairopt_validation, name) is getattr(validation, name)


def test_solvers_validation_does_not_import_fairopt():
    source = open(validation.__file__).read()
    assert "import fairopt" not in source and "from fairopt" not in source


# ----------------------------------------------------------------------------- engines and estimators
@pytest.mark.parametrize("kwargs, match", [
    (dict(tol=-1), "tol: expected a finite positive number, got -1"),
    (dict(lr_kmin=0), "lr_kmin: expected a positive integer, got 0"),
    (dict(lr_kmin=True), "lr_kmin: expected a positive integer, got True"),
    (dict(feasibility_restoration="no"), "feasibility_restoration: expected True or False, got 'no'"),
    (dict(beta2=1.0), "beta2: expected a number in [0, 1), got 1.0"),
    (dict(sigma=0.0), "sigma: expected a number in (0, 1), got 0.0"),
    (dict(lr=math.nan), "lr: expected a finite positive number, got nan"),
    (dict(step="newton"), "step: expected one of ['fixed', 'adaptive'], got 'newton'"),
    (dict(polish_iterations=2.0), "polish_iterations: expected a non-negative integer, got 2.0"),
    (dict(distributed="yes"), "distributed: expected None, True or False, got 'yes'"),
])
def test_sqp_rejects_bad_options_naming_them(kwargs, match):
    from solvers.sqp import StochasticSQP

    with pytest.raises(ValueError, match="^" + re.escape(match)):
        StochasticSQP(**kwargs)


def test_sqp_keeps_accepting_what_it_accepted():
    from solvers.sqp import StochasticSQP

    StochasticSQP(epochs=10.0, polish_iterations=0, beta2=0.0, batch_size=32.0, distributed=False, lr_schedule=True)


@pytest.mark.parametrize("kwargs, match", [
    (dict(epochs=0), "epochs: expected a positive integer, got 0"),
    (dict(epochs=2.5), "epochs: expected a positive integer, got 2.5"),
    (dict(lr=0), "lr: expected a finite positive number, got 0"),
    (dict(optimizer="lbfgs"), "optimizer: expected one of"),
    (dict(seed=0.5), "seed: expected an integer, got 0.5"),
])
def test_penalty_rejects_bad_options_naming_them(kwargs, match):
    from solvers.penalty import Penalty

    with pytest.raises(ValueError, match="^" + re.escape(match)):
        Penalty(**kwargs)


def test_other_engines_reject_bad_options():
    from solvers.lagrangian import LagrangianDual
    from solvers.moving_targets import MovingTargets
    from solvers.qp import diagonal_qp

    with pytest.raises(ValueError, match=r"^dual_lr: expected a finite positive number"):
        LagrangianDual(dual_lr=-1.0)
    with pytest.raises(ValueError, match=r"^seed: expected a non-negative integer, got -1"):
        MovingTargets(seed=-1)
    with pytest.raises(ValueError, match=r"^time_limit: expected a finite positive number"):
        MovingTargets(time_limit=0.0)
    g, h, J = torch.zeros(2), torch.ones(2), torch.ones(1, 2)
    lo, hi = torch.tensor([-1.0]), torch.tensor([1.0])
    with pytest.raises(ValueError, match=r"^rank_tol: must be a finite positive number, got True"):
        diagonal_qp(g, h, J, lo, hi, rank_tol=True)


@pytest.mark.parametrize("params, match", [
    (dict(seed=-1), "seed: expected a non-negative integer, got -1"),
    (dict(seed=True), "seed: expected a non-negative integer, got True"),
    (dict(violation_tol=math.inf), "violation_tol: expected a finite number >= 0, got inf"),
    (dict(check_inactive=1), "check_inactive: expected True or False, got 1"),
    (dict(method="newton"), "method: expected one of"),
    (dict(confidence=1.0), "confidence: expected a number in (0, 1), got 1.0"),
    (dict(validation_fraction=0.7), "validation_fraction: expected a number in (0, 0.5], got 0.7"),
    (dict(n_candidates=0), "n_candidates: expected a positive integer, got 0"),
    (dict(margin="big"), "margin: expected one of ['auto'], got 'big'"),
    (dict(margin=-0.1), "margin: expected a finite number >= 0, got -0.1"),
])
def test_estimator_rejects_bad_parameters_at_fit(params, match):
    from fairopt.estimators import FairClassifier

    rng = np.random.default_rng(0)
    X, y = rng.normal(size=(40, 3)), np.tile([0, 1], 20)
    est = FairClassifier(**params)  # the constructor only stores (scikit-learn convention)
    with pytest.raises(ValueError, match="^" + re.escape(match)):
        est.fit(X, y)


def test_check_verbose_accepts_levels_and_flags_only():
    from solvers.validation import check_verbose

    assert check_verbose(0) == 0 and check_verbose(2) == 2 and check_verbose(True) == 1 and check_verbose(False) == 0
    assert check_verbose(np.int64(3)) == 3
    for bad in ("yes", -1, 1.5, None):
        with pytest.raises(ValueError, match=r"^verbose: expected a non-negative integer or True/False, got "):
            check_verbose(bad)


@pytest.mark.parametrize("engine", ["StochasticSQP", "Penalty", "LagrangianDual", "MovingTargets"])
def test_engines_refuse_a_truthy_string_for_verbose(engine):
    import solvers

    with pytest.raises(ValueError, match="verbose: expected 'auto', a non-negative integer or True/False, got 'yes'"):
        getattr(solvers, engine)(verbose="yes")


def test_sqp_refuses_a_bad_seed():
    from solvers import StochasticSQP

    for bad in (-1, "a", 1.5, None):
        with pytest.raises(ValueError, match="^seed: expected a non-negative integer"):
            StochasticSQP(seed=bad)


def test_check_seeds():
    from solvers.validation import check_seeds

    assert check_seeds([0, np.int64(3)]) == (0, 3) and check_seeds(range(2)) == (0, 1)
    for bad in ([], [True], [1.5], "ab", 3, None):
        with pytest.raises(ValueError, match="seeds: expected a non-empty sequence of integers"):
            check_seeds(bad)
    with pytest.raises(ValueError, match=r"seeds: the seed\(s\) \[0\] repeat"):  # its rows would count twice
        check_seeds([0, 1, 2, 0, 3])
