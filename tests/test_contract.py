"""The Constraint contract (solvers.contract): the capabilities every shipped constraint class offers,
the helpers against the getattr probes the engines used before, and the check at an engine's entry."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import fairopt.constraints as fc
from fairopt import FairData
from fairopt.certificate.tightening import TightenedConstraint
from fairopt.constraints.base import BaseConstraint
from solvers import StochasticSQP
from solvers.contract import (ConstraintContractError, capabilities, check_bounds, check_constraint,
                              cost_on_all_rows, jacobian_direction, offers_closed_form_rows, offers_factored_rows,
                              offers_setup, offers_strata, offers_target_encoding, smooth_is_exact, supports_sums)
from solvers.lagrangian import LagrangianDual
from solvers.problem import ConstraintSet, as_constraint_set
from solvers.sums import exact_in_chunks

RATES = frozenset({"setup", "target_encoding", "closed_form_rows", "strata", "factored_rows", "shared_direction",
                   "sums"})
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
        "smooth_is_exact": getattr(c, "smooth_is_exact", False) is True,  # problem.exact_rows
        "quadratic_cost": getattr(c, "cost_on_all_rows", "linear") == "quadratic",  # sqp constraint_mode
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
