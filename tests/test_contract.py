"""The Constraint contract (solvers.contract): the capabilities every shipped constraint class offers,
the helpers against the getattr probes the engines used before, and the check at an engine's entry."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import fairopt
import fairopt.constraints as fc
from fairopt import FairData
from fairopt.certificate.tightening import TightenedConstraint
from fairopt.constraints.base import BaseConstraint
from fairopt.surrogates import Sigmoid
from solvers import StochasticSQP
from solvers.contract import (ConstraintContractError, calibrated_form, capabilities, check_bounds, check_constraint,
                              cost_on_all_rows, jacobian_direction, offers_calibrated_form, offers_closed_form_rows,
                              offers_factored_rows, offers_setup, offers_strata, offers_target_encoding,
                              looks_like_constraint, smooth_is_exact, supports_sums)
from solvers.lagrangian import LagrangianDual
from solvers.penalty import Penalty, penalty_terms
from solvers.problem import ConstraintSet, as_constraint_set
from solvers.sums import exact_in_chunks

RATES = frozenset({"setup", "target_encoding", "closed_form_rows", "strata", "factored_rows", "shared_direction",
                   "sums", "calibrated_form", "row_scale"})
#: Every constraint class the library ships, an instance, and the capabilities it offers.
SHIPPED = {
    fc.DisparateImpact: (lambda: fc.DisparateImpact("s", 0.8), RATES),
    fc.EqualImpact: (lambda: fc.EqualImpact("s", 0.8), RATES),
    fc.DemographicParity: (lambda: fc.DemographicParity("s", bound=0.1), RATES),
    fc.EqualOpportunity: (lambda: fc.EqualOpportunity("s", bound=0.1), RATES),
    fc.FalsePositiveParity: (lambda: fc.FalsePositiveParity("s", bound=0.1), RATES),
    fc.EqualizedOdds: (lambda: fc.EqualizedOdds("s", bound=0.1), RATES),
    fc.Covariance: (lambda: fc.Covariance("s", bound=0.1), frozenset({"setup", "target_encoding",
                                                                      "closed_form_rows"})),
    fc.GeDI: (lambda: fc.GeDI("x", bound=0.1), frozenset({"setup", "target_encoding"})),
    fc.DistanceCovariance: (lambda: fc.DistanceCovariance("x", bound=0.1),
                            frozenset({"setup", "target_encoding", "smooth_is_exact", "quadratic_cost"})),
}
#: Bases that no user instantiates (their rows are left to subclasses).
BASES = {"BaseConstraint", "LinearRowsConstraint", "GroupRateConstraint", "ConditionalRateConstraint"}


def old_probes(c) -> frozenset[str]:
    """The engines' getattr probes before solvers.contract, verbatim (the reference)."""
    offered = {
        "setup": getattr(c, "setup", None) is not None,  # ConstraintSet.setup
        "target_encoding": hasattr(c, "target_encoding"),  # ConstraintSet.target_encoding
        "closed_form_rows": callable(getattr(c, "rows_and_jacobian", None)),  # derivatives, ConstraintSet
        "strata": callable(getattr(c, "strata", None)),  # strata.stratum_codes, derivatives._may_stratify
        "factored_rows": callable(getattr(c, "rows_and_factors", None)),  # derivatives, ConstraintSet
        "shared_direction": getattr(c, "jacobian_direction", None) is not None,  # ConstraintSet.shared_direction
        "sums": callable(getattr(c, "partial_sums", None)) and callable(getattr(c, "from_sums", None)),
        "calibrated_form": callable(getattr(c, "calibrated_form", None)),  # sqp engine.fit (calibrate_exact)
        "smooth_is_exact": getattr(c, "smooth_is_exact", False) is True,  # problem.exact_rows
        "quadratic_cost": getattr(c, "cost_on_all_rows", "linear") == "quadratic",  # sqp constraint_mode
        "row_scale": getattr(c, "row_scale", None) is not None,  # sqp snapshot drift tolerance
    }
    return frozenset(k for k, v in offered.items() if v)


def small_data(n: int = 120, seed: int = 0) -> FairData:
    rng = np.random.default_rng(seed)
    s = rng.integers(0, 2, n)
    x = rng.normal(size=n)
    X = np.column_stack([rng.normal(size=(n, 2)), s, x])
    y = (X[:, 0] + 0.5 * s + rng.logistic(size=n) > 0).astype(int)
    return FairData.from_arrays(X, y, {"s": s, "x": x}, sensitive_kinds={"x": "continuous"})


def shipped_classes() -> set[type]:
    """Every concrete subclass of BaseConstraint defined in the library (not in a test)."""
    found, todo = set(), [BaseConstraint]
    while todo:
        cls = todo.pop()
        for sub in cls.__subclasses__():
            todo.append(sub)
            if sub.__module__.startswith(("fairopt.", "solvers.")) and sub.__name__ not in BASES:
                found.add(sub)
    return found


def test_the_table_lists_every_shipped_class():
    assert shipped_classes() == set(SHIPPED) | {TightenedConstraint}


@pytest.mark.parametrize("cls", list(SHIPPED), ids=lambda cls: cls.__name__)
def test_capabilities_of_each_shipped_class_match_the_old_probes(cls):
    make, expected = SHIPPED[cls]
    data = small_data()
    for constraint in (make(), TightenedConstraint(make(), 0.0)):
        check_constraint(constraint)
        before = capabilities(constraint)
        assert before == old_probes(constraint)
        constraint.setup(data)
        check_bounds(constraint)
        assert capabilities(constraint) == old_probes(constraint) == before
    assert capabilities(make()) == expected


def test_constraint_set_capabilities_match_the_old_probes():
    members = [fc.DisparateImpact("s", 0.8), fc.DemographicParity("s", bound=0.1)]
    cons = as_constraint_set(members)
    assert capabilities(cons) == old_probes(cons) == frozenset({"setup", "target_encoding", "closed_form_rows",
                                                                 "strata", "factored_rows"})
    # the set offers no calibrated form of its own: the engine maps its members
    assert cons.shared_direction and not ConstraintSet([fc.Covariance("s", bound=0.1)]).shared_direction


def test_each_helper_is_its_capability():
    c = fc.DisparateImpact("s", 0.8)
    assert offers_setup(c) and offers_target_encoding(c) and offers_closed_form_rows(c) and offers_strata(c)
    assert offers_factored_rows(c) and supports_sums(c) and jacobian_direction(c) is not None
    assert not smooth_is_exact(c) and cost_on_all_rows(c) == "linear"
    d = fc.DistanceCovariance("x", bound=0.1)
    assert smooth_is_exact(d) and cost_on_all_rows(d) == "quadratic" and not supports_sums(d)


class Minimal:
    """Only the required members: rows ``mean(out) <= 0.5``."""

    name = "minimal"

    def __init__(self) -> None:
        self.lower = torch.tensor([-np.inf], dtype=torch.float64)
        self.upper = torch.tensor([0.5], dtype=torch.float64)

    def __call__(self, out, batch):
        return torch.sigmoid(out).mean().reshape(1)

    def exact(self, out, batch):
        return (out > 0).double().mean().reshape(1)


def test_a_minimal_constraint_passes_and_offers_nothing_optional():
    check_constraint(Minimal())
    assert capabilities(Minimal()) == frozenset()
    cons = as_constraint_set(Minimal())
    cons.setup(small_data())  # no setup of its own: nothing called, bounds checked
    assert cons.n_rows == 1 and cons.row_names == ["minimal[0]"]


def with_members(**members):
    """A Minimal constraint with extra members, or with a member set to None (no longer callable)."""
    return type("User", (Minimal,), members)()


def hook(*args, **kwargs):
    return None


@pytest.mark.parametrize("members, named", [
    ({"exact": None}, "'exact'"),
    ({"name": None}, "'name'"),
    ({"name": 3}, "'name'"),
    ({"partial_sums": hook}, "from_sums"),
    ({"from_sums": hook}, "partial_sums"),
    ({"rows_and_factors": hook, "jacobian_direction": "key"}, "strata"),
    ({"rows_and_factors": hook, "strata": hook}, "jacobian_direction"),
    ({"smooth_is_exact": "yes"}, "smooth_is_exact"),
    ({"cost_on_all_rows": "cubic"}, "cost_on_all_rows"),
], ids=["no-exact", "no-name", "name-not-str", "half-sums", "other-half-sums", "factors-no-strata",
        "factors-no-direction", "flag-not-bool", "unknown-cost"])
def test_a_broken_constraint_is_refused_naming_the_member(members, named):
    broken = with_members(**members)
    with pytest.raises(ConstraintContractError, match=named) as error:
        as_constraint_set([broken])
    assert isinstance(error.value, TypeError) and isinstance(error.value, ValueError)


@pytest.mark.parametrize("members, named", [({"exact": None}, "'exact'"), ({"name": None}, "'name'")],
                         ids=["no-exact", "no-name"])
def test_a_broken_constraint_given_alone_is_refused_as_in_a_list(members, named):
    """One constraint without ``exact`` given alone (not in a list) was taken for an iterable of them
    ("'User' object is not iterable"); Penalty added its raw smooth value to the loss instead of its
    violation of the bounds."""
    with pytest.raises(ConstraintContractError, match=named):
        as_constraint_set(with_members(**members))
    with pytest.raises(ConstraintContractError, match=named):
        StochasticSQP(epochs=1).fit(torch.nn.Linear(4, 1), small_data(), loss="bce",
                                    constraints=with_members(**members))
    with pytest.raises(ConstraintContractError, match=named):
        Penalty(epochs=1).fit(torch.nn.Linear(4, 1), small_data(), loss="bce", penalties=[with_members(**members)])


def test_a_plain_penalty_function_is_no_constraint():
    def squared_mean(out, batch):
        return out.mean() ** 2

    assert not looks_like_constraint(squared_mean) and looks_like_constraint(Minimal())
    [term] = penalty_terms([squared_mean])
    assert term.name == "squared_mean"


def test_a_not_callable_object_is_refused():
    with pytest.raises(ConstraintContractError, match="callable"):
        ConstraintSet([object()])


def test_a_whole_capability_is_accepted():
    whole = with_members(partial_sums=hook, from_sums=hook, rows_and_factors=hook, strata=hook,
                         jacobian_direction=None, smooth_is_exact=False, cost_on_all_rows="quadratic")
    check_constraint(whole)
    assert {"sums", "factored_rows", "strata", "quadratic_cost"} <= capabilities(whole)


class LateBounds(Minimal):
    """Bounds built by setup, as constraints sized from the data do."""

    def __init__(self, size: int = 1) -> None:
        self.size = size

    def setup(self, data) -> None:
        self.lower = torch.full((self.size,), -np.inf, dtype=torch.float64)
        self.upper = torch.full((1,), 0.5, dtype=torch.float64)


def test_bounds_are_checked_after_setup_not_before():
    cons = as_constraint_set([LateBounds()])  # no bounds yet: accepted at entry
    cons.setup(small_data())
    assert cons.n_rows == 1
    broken = Minimal()
    del broken.upper
    with pytest.raises(ConstraintContractError, match="'upper'"):
        as_constraint_set(broken).setup(small_data())
    with pytest.raises(ConstraintContractError, match="2 lower and 1 upper"):
        as_constraint_set(LateBounds(size=2)).setup(small_data())


@pytest.mark.parametrize("engine", [StochasticSQP(epochs=1), LagrangianDual(epochs=1)], ids=["sqp", "lagrangian"])
def test_engines_refuse_a_half_capability_at_entry(engine):
    data = small_data()
    with pytest.raises(ConstraintContractError, match="from_sums"):
        engine.fit(torch.nn.Linear(4, 1), data, loss="bce", constraints=with_members(partial_sums=hook))


class Budget(Minimal):
    """Minimal with additive sums: ``sums = [sum_i sigmoid(out_i)]`` (or the hard step), ``counts = [n]``."""

    def partial_sums(self, out, batch, exact=False):
        values = (out > 0).double() if exact else torch.sigmoid(out)
        return values.sum().reshape(1), torch.tensor([float(len(out))], dtype=torch.float64)

    def from_sums(self, sums, counts):
        return sums / counts


def test_a_user_sums_constraint_takes_the_chunked_path():
    data = small_data(n=300)
    model = torch.nn.Linear(4, 1)
    cons = as_constraint_set([Budget()])
    assert capabilities(Budget()) == frozenset({"sums"})
    loss = torch.nn.functional.binary_cross_entropy_with_logits
    chunked = exact_in_chunks(model, lambda out, batch: loss(out, batch.y.to(out.dtype)), cons, data, chunk_rows=70)
    assert chunked is not None
    with torch.no_grad():
        whole = Minimal().exact(model(data.X).squeeze(1), data)
    assert torch.allclose(chunked[1], whole.double(), atol=1e-12)
    assert exact_in_chunks(model, lambda out, batch: out.mean(), as_constraint_set([Minimal()]), data, 70) is None


def test_a_tightened_constraint_keeps_the_flags_of_the_original():
    """A margin moves bounds, not rows: a tightened distance covariance is still quadratic on all
    rows (so mini-batch SQP keeps its batch estimates), and an exact-smooth constraint stays so."""
    dcov = TightenedConstraint(fc.DistanceCovariance("x", bound=0.1), 0.01)
    assert dcov.cost_on_all_rows == "quadratic" == fc.DistanceCovariance("x", bound=0.1).cost_on_all_rows
    assert StochasticSQP(batch_size=64).constraint_mode(False, [dcov]) == "batch"
    rate = TightenedConstraint(fc.DisparateImpact("s", delta=0.8), 0.01)
    assert rate.cost_on_all_rows == "linear"
    assert StochasticSQP(batch_size=64).constraint_mode(False, [rate]) == "snapshot"
    for make in (lambda: fc.DistanceCovariance("x", bound=0.1), lambda: fc.DisparateImpact("s", delta=0.8)):
        assert TightenedConstraint(make(), 0.01).smooth_is_exact == make().smooth_is_exact


# ---------------------------------------------------------------------------------- calibrated form
@pytest.mark.parametrize("make", [lambda s: fc.DisparateImpact("s", 0.8, surrogate=s),
                                  lambda s: fc.EqualizedOdds("s", bound=0.1, surrogate=s)],
                         ids=["disparate-impact", "equalized-odds"])
def test_the_calibrated_form_of_a_rate_constraint_without_a_surrogate(make):
    """``surrogate=None``: a new constraint under ``sigmoid(5 t)`` with the same exact rows and bounds;
    a named surrogate: the constraint itself; the caller's object is not changed."""
    data = small_data()
    given = make(None)
    form = given.calibrated_form()
    assert form is not given and given.get_params()["surrogate"] is None
    assert form.get_params() == {**given.get_params(), "surrogate": form.calibrated_surrogates["threshold"]}
    assert isinstance(form.surrogate, Sigmoid) and form.surrogate.scale == 5.0
    named = make("smoothed_step")
    assert named.calibrated_form() is named and calibrated_form(named) is named
    for c in (given, form):
        c.setup(data)
    out = torch.linspace(-2, 2, len(data), dtype=torch.float64)
    assert torch.equal(form.exact(out, data), given.exact(out, data))
    assert torch.equal(form.lower, given.lower) and torch.equal(form.upper, given.upper)
    if isinstance(form, fc.DisparateImpact):  # rows delta P_0 - P_1, delta P_1 - P_0 on phi = sigmoid(5 out)
        phi, s = torch.sigmoid(5 * out), data.sensitive["s"].to(torch.bool)
        p1, p0 = float(phi[s].mean()), float(phi[~s].mean())
        assert torch.allclose(form(out, data).double(), torch.tensor([0.8 * p0 - p1, 0.8 * p1 - p0],
                                                                     dtype=torch.float64), atol=1e-12)


def test_the_group_spread_is_the_mean_predicted_probability_and_spreads_are_checked():
    given = fc.DisparateImpact("s", 0.8)
    form = calibrated_form(given, "group")
    assert isinstance(form.surrogate, Sigmoid) and form.surrogate.scale == 1.0
    assert calibrated_form(given).surrogate.scale == 5.0  # "threshold" by default
    with pytest.raises(ValueError, match="spread"):
        calibrated_form(given, "rows")
    with pytest.raises(ValueError, match="spread"):
        given.calibrated_form("rows")


def test_a_networks_mini_batch_steps_take_the_wide_spread():
    """``sigmoid(2 t)`` ("wide") for the mini-batch steps of a network, ``sigmoid(5 t)`` ("threshold") for a linear
    model and for every full-batch fit, as the engine picks them."""
    given = fc.DisparateImpact("s", 0.8)
    assert calibrated_form(given, "wide").surrogate.scale == 2.0
    network = list(fairopt.models.mlp(5, hidden=(8,), seed=0).parameters())
    linear = list(fairopt.models.linear(5, seed=0).parameters())
    assert StochasticSQP(batch_size=64).calibrated_spread(network, 1000) == "wide"
    assert StochasticSQP(batch_size=64).calibrated_spread(linear, 1000) == "threshold"
    assert StochasticSQP().calibrated_spread(network, 1000) == "threshold"  # full batch
    assert StochasticSQP(batch_size=1000).calibrated_spread(network, 1000) == "threshold"  # one batch: all rows


def test_constraints_without_a_calibrated_form_are_their_own():
    for c in (fc.Covariance("s", bound=0.1), fc.GeDI("x", bound=0.1), Minimal()):
        assert not offers_calibrated_form(c) and calibrated_form(c) is c
        assert not offers_calibrated_form(TightenedConstraint(c, 0.0))


def test_a_tightened_constraint_keeps_its_margin_in_the_calibrated_form():
    data = small_data()
    tight = TightenedConstraint(fc.DisparateImpact("s", 0.8), 0.02)
    form = calibrated_form(tight)
    assert isinstance(form, TightenedConstraint) and form.margin == 0.02
    assert isinstance(form.constraint.surrogate, Sigmoid)
    for c in (tight, form):
        c.setup(data)
    assert torch.equal(form.upper, tight.upper) and torch.equal(form.upper, torch.full_like(form.upper, -0.02))
    named = TightenedConstraint(fc.DisparateImpact("s", 0.8, surrogate="sigmoid"), 0.02)
    assert calibrated_form(named) is named


@pytest.mark.parametrize("calibrate", [True, False], ids=["calibrated", "not-calibrated"])
def test_sqp_differentiates_the_calibrated_form_only_when_it_calibrates(calibrate):
    """A rate constraint without a surrogate trains under ``StochasticSQP`` as its calibrated form does
    (``sigmoid(5 t)``) and, with ``calibrate_exact=False``, as the smoothed step does: same run, same
    iterates. The caller's constraint keeps ``surrogate=None`` and is set up on the data, as before."""
    data = small_data(n=400)
    surrogate = Sigmoid(scale=5.0) if calibrate else "smoothed_step"

    def fit(constraint):
        torch.manual_seed(0)
        model = torch.nn.Linear(4, 1)
        StochasticSQP(epochs=5, seed=0, calibrate_exact=calibrate).fit(model, data, constraints=[constraint])
        return torch.cat([p.detach().reshape(-1) for p in model.parameters()])

    given = fc.DisparateImpact("s", 0.9)
    assert torch.equal(fit(given), fit(fc.DisparateImpact("s", 0.9, surrogate=surrogate)))
    assert given.get_params()["surrogate"] is None and given.surrogate.name != "sigmoid"
    assert given.lower.shape == (2,)  # set up by the fit: evaluate reads its bounds


def test_plain_number_bounds_and_row_names_of_another_length_are_refused_by_name():
    """Bounds given as floats failed deep inside the engine ('zero-dimensional tensor ... cannot be
    concatenated'), two row_names for one row were reported as they were: both a ConstraintContractError; an
    infinite input is a ValueError as a missing one is (it ended as "diverged" at iteration 0)."""
    from solvers import StochasticSQP
    from solvers.contract import ConstraintContractError

    class MeanSquare:
        name = "mean_sq"

        def __init__(self):
            self.lower = torch.tensor([-np.inf], dtype=torch.float64)
            self.upper = torch.tensor([1.0], dtype=torch.float64)

        def __call__(self, out, batch):
            return (out ** 2).mean().reshape(1)

        def exact(self, out, batch):
            return (out ** 2).mean().reshape(1).double()

    class FloatBounds(MeanSquare):
        def __init__(self):
            self.lower, self.upper = -np.inf, 1.0

    class TwoNames(MeanSquare):
        row_names = ["a", "b"]

    rng = np.random.default_rng(0)
    X = rng.normal(size=(200, 3))
    data = FairData.from_arrays(X, (X[:, 0] > 0).astype(int), {})
    with pytest.raises(ConstraintContractError, match="has lower=-inf; expected a 1-D tensor"):
        StochasticSQP(epochs=2).fit(torch.nn.Linear(3, 1), data, constraints=FloatBounds())
    with pytest.raises(ConstraintContractError, match="has 2 row_names for its 1 rows"):
        StochasticSQP(epochs=2).fit(torch.nn.Linear(3, 1), data, constraints=TwoNames())
    data.X[3, 1] = float("inf")
    with pytest.raises(ValueError, match="hold infinite input values"):
        StochasticSQP(epochs=2).fit(torch.nn.Linear(3, 1), data, constraints=MeanSquare())
