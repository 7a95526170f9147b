r"""The Constraint contract: the members every constraint has, the optional capabilities, and the one
check an engine applies when a constraint enters it.

A constraint is ``m`` scalar rows ``lower_i <= c_i(out) <= upper_i`` of a model's outputs ``out``
(one per row of a batch, shape ``(n,)``). Every engine needs the members of :class:`Constraint`.
Each optional capability below is a group of members that an engine uses when a constraint offers
all of them, and does without otherwise (same result, another path):

========================  ======================================================  ==========================
capability                members                                                 used by
========================  ======================================================  ==========================
:class:`SetUp`            ``setup(data)``                                         every engine, before training
:class:`TargetEncodable`  ``target_encoding(batch)``                              Moving Targets (projection)
:class:`ClosedFormRows`   ``rows_and_jacobian(out, batch)``                       SQP derivative oracles
:class:`Stratified`       ``strata(batch)``                                       SQP stratified Jacobians
:class:`FactoredRows`     ``strata``, ``jacobian_direction``,                     SQP factored Jacobians,
                          ``rows_and_factors(out, batch, strata)``                mini-batch rows by stratum
:class:`SumsConstraint`   ``partial_sums(out, batch, exact)``, ``from_sums``      chunked and data-parallel SQP
:class:`CalibratedForm`   ``calibrated_form(spread)``                             SQP, boosting (calibrated)
flags                     ``smooth_is_exact``, ``cost_on_all_rows``,              exact rows; mini-batch SQP
                          ``row_scale``
========================  ======================================================  ==========================

The engines ask through this module's helpers (:func:`capabilities` lists them all), which probe
with ``getattr``: from Python 3.12 ``isinstance`` on a ``runtime_checkable`` protocol does not see
members a wrapper delegates through ``__getattr__``. :func:`check_constraint` runs when constraints
enter an engine and refuses a missing member, half a capability or a wrong flag with a
:class:`ConstraintContractError`, instead of a slow path or an ``AttributeError`` deep in a fit;
:func:`check_bounds` checks the bounds after ``setup``, which may size them from the data.
"""

from __future__ import annotations

import math
from typing import Any, Hashable, Protocol, runtime_checkable

import torch

__all__ = [
    "COSTS",
    "DECLARING_MEMBERS",
    "SPREADS",
    "CalibratedForm",
    "ClosedFormRows",
    "Constraint",
    "ConstraintContractError",
    "FactoredRows",
    "SetUp",
    "Stratified",
    "SumsConstraint",
    "TargetEncodable",
    "capabilities",
    "check_bounds",
    "check_constraint",
    "check_spread",
    "calibrated_form",
    "cost_on_all_rows",
    "declared_row_names",
    "jacobian_direction",
    "looks_like_constraint",
    "offers_closed_form_rows",
    "offers_calibrated_form",
    "offers_factored_rows",
    "offers_setup",
    "offers_strata",
    "offers_target_encoding",
    "row_scale",
    "shares_direction",
    "smooth_is_exact",
    "supports_sums",
]

#: The values of ``cost_on_all_rows``: how the cost of the rows on ``n`` rows grows.
COSTS = ("linear", "quadratic")


class ConstraintContractError(TypeError, ValueError):
    """A constraint that does not meet the contract; a ``TypeError`` and the engines' ``ValueError``."""


@runtime_checkable
class Constraint(Protocol):
    """The members every constraint has: rows ``lower <= c(out) <= upper``.

    ``lower``/``upper`` are float64 ``(m,)`` (sides may be infinite), possibly built by ``setup``.
    ``__call__`` gives the smooth rows engines differentiate; ``exact`` the true rows on hard
    predictions, which decide feasibility and the returned iterate. Optional: ``row_names``;
    ``smooth_is_exact = True`` (``exact`` equals ``__call__``, so engines reuse the smooth rows);
    ``cost_on_all_rows = "quadratic"`` (pairwise statistics: mini-batch SQP estimates them on its
    batches instead of on all rows); ``row_scale``, a positive float, the magnitude in which the rows'
    values are read (1 for rates and probabilities), which sets engines' default tolerances on the
    rows' values (mini-batch SQP's snapshot drift, :mod:`solvers.sqp.snapshot`).
    """

    name: str
    lower: torch.Tensor
    upper: torch.Tensor

    def __call__(self, out: torch.Tensor, batch: Any) -> torch.Tensor:
        """Smooth rows ``c(out)``, shape ``(m,)``, differentiable in ``out``."""
        ...

    def exact(self, out: torch.Tensor, batch: Any) -> torch.Tensor:
        """Exact rows on hard predictions, shape ``(m,)``, without gradient."""
        ...


@runtime_checkable
class SetUp(Protocol):
    """``setup(data)``: called once by every engine with the training data before training, to
    size the rows (one row pair per category) and precompute data-only quantities."""

    def setup(self, data: Any) -> None: ...


@runtime_checkable
class TargetEncodable(Protocol):
    """``target_encoding(batch)``: the rows as linear (in)equalities on a target vector ``z`` (one
    value per row of ``batch``), ``lb <= A_z z + A_a a <= ub`` (a
    :class:`solvers.problem.LinearEncoding`), or None when the rows have none. Moving Targets
    projects its targets onto these; the other engines do not use it."""

    def target_encoding(self, batch: Any) -> Any: ...


@runtime_checkable
class ClosedFormRows(Protocol):
    """``rows_and_jacobian(out, batch)``: ``c`` ``(m,)`` and ``dc/d out`` ``(m, n)`` in closed form, or
    None, which saves the SQP oracles a backward pass per row (group rates ``c = D W phi(out - t)``
    give ``dc/d out = (D W) * phi'(out - t)``)."""

    def rows_and_jacobian(self, out: torch.Tensor, batch: Any) -> tuple[torch.Tensor, torch.Tensor] | None: ...


@runtime_checkable
class Stratified(Protocol):
    """``strata(batch)``: one integer code per row, equal where the Jacobian columns are proportional
    (rows in the same groups), or None; the SQP oracle then pulls back one vector per stratum
    instead of one per constraint row (:mod:`solvers.strata`)."""

    def strata(self, batch: Any) -> Any: ...


@runtime_checkable
class FactoredRows(Stratified, Protocol):
    """The Jacobian as per-stratum factors, ``dc/d out_i = coef[:, k] direction_i`` on stratum ``k``.

    ``rows_and_factors(out, batch, strata)`` returns a :class:`solvers.problem.RowFactors` or None;
    ``jacobian_direction`` keys the shared per-row ``direction`` (None: none), so constraints with
    equal keys have rank-one blocks by construction. Mini-batch rows then come from per-stratum
    sums (:meth:`solvers.derivatives.LocalDerivatives.know_strata`)."""

    @property
    def jacobian_direction(self) -> Hashable | None: ...

    def rows_and_factors(self, out: torch.Tensor, batch: Any, strata: Any) -> Any: ...


@runtime_checkable
class SumsConstraint(Protocol):
    """Rows that are a function of additive per-group sums, so that full-data SQP passes run in row
    chunks (:mod:`solvers.sums`) or over data-parallel shards (:mod:`solvers.distributed`).

    ``partial_sums(out, batch, exact=False)`` returns ``(sums, counts)`` ``(G,)``, additive over
    disjoint row blocks (``exact=True``: the sums behind ``exact``); ``from_sums(sums, counts)`` maps
    the totals to the rows, ``from_sums(*partial_sums(out, data)) == constraint(out, data)``. A group
    rate is ``sums_g / counts_g``, ``sums_g = sum_{i in g} w_i phi(out_i - t)``, ``counts_g = sum w_i``."""

    def partial_sums(self, out: torch.Tensor, batch: Any, exact: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
        ...

    def from_sums(self, sums: torch.Tensor, counts: torch.Tensor) -> torch.Tensor: ...


#: The rows an engine's steps should move, as it asks :meth:`CalibratedForm.calibrated_form` (its doc).
SPREADS = ("threshold", "wide", "group")


@runtime_checkable
class CalibratedForm(Protocol):
    """``calibrated_form(spread="threshold")``: the constraint to differentiate in an engine that calibrates
    the level of the smooth rows to the exact ones (the QP's bounds are shifted by ``exact - smooth``, so the
    smooth rows only give the direction ``dc/d out``).

    Asked after ``setup(data)``, it is set up as the constraint is: the same ``exact`` rows, bounds and
    row names; its smooth rows may use another surrogate, one chosen for the direction it gives rather
    than for values close to the exact ones. It may be the constraint itself, and it is a new object
    otherwise (the caller's is not changed). ``spread`` (one of :data:`SPREADS`) says which rows the
    engine's steps should move:

    - ``"threshold"``: the rows near the decision threshold, whose hard predictions a small step can
      change. Steps in a model's parameters pool the pulls of all rows (:class:`solvers.StochasticSQP`).
    - ``"wide"``: the rows near the threshold and those a few units of the output from it. A network's
      mini-batch steps (:class:`solvers.StochasticSQP`): a network fits its training rows closely and
      moves most outputs away from the threshold, and a batch then holds too few rows near it to give
      each group's direction.
    - ``"group"``: every row of the compared groups. Steps on each row's own score, which a learner then
      fits row by row (function-space boosting, :class:`solvers.boosting.BoostedSQP`), generalise when
      they shift whole groups rather than the rows that happen to sit at the threshold.
    """

    def calibrated_form(self, spread: str = "threshold") -> Any: ...


def _offers(constraint: Any, *members: str) -> bool:
    """Every one of ``members`` is a callable attribute of ``constraint`` (delegated ones included)."""
    return all(callable(getattr(constraint, name, None)) for name in members)


#: Members by which an object declares itself a constraint rather than a penalty ``P(out, batch)``: its
#: bounds (a penalty object may offer ``exact``, its measure, but has no bounds).
DECLARING_MEMBERS = ("lower", "upper")


def looks_like_constraint(obj: Any) -> bool:
    """``obj`` is meant as a constraint, not a plain penalty: callable and declaring its bounds
    (:data:`DECLARING_MEMBERS`; looked up with ``dir``, as some bounds raise before ``setup``, and with
    ``hasattr`` for bounds a wrapper delegates). Whether it is a valid one is :func:`check_constraint`'s
    question, which names what it lacks."""
    if not callable(obj):
        return False
    return bool(set(DECLARING_MEMBERS) & set(dir(obj))) or hasattr(obj, "lower")


def offers_setup(constraint: Any) -> bool:
    """:class:`SetUp`: ``constraint`` has a callable ``setup``."""
    return _offers(constraint, "setup")


def offers_target_encoding(constraint: Any) -> bool:
    """:class:`TargetEncodable`: ``constraint`` has a callable ``target_encoding``."""
    return _offers(constraint, "target_encoding")


def offers_closed_form_rows(constraint: Any) -> bool:
    """:class:`ClosedFormRows`: ``constraint`` has a callable ``rows_and_jacobian``."""
    return _offers(constraint, "rows_and_jacobian")


def offers_strata(constraint: Any) -> bool:
    """:class:`Stratified`: ``constraint`` has a callable ``strata``."""
    return _offers(constraint, "strata")


def offers_factored_rows(constraint: Any) -> bool:
    """:class:`FactoredRows`: ``constraint`` has a callable ``rows_and_factors``."""
    return _offers(constraint, "rows_and_factors")


def supports_sums(constraint: Any) -> bool:
    """:class:`SumsConstraint`: ``constraint`` has callable ``partial_sums`` and ``from_sums``."""
    return _offers(constraint, "partial_sums", "from_sums")


def offers_calibrated_form(constraint: Any) -> bool:
    """:class:`CalibratedForm`: ``constraint`` has a callable ``calibrated_form``."""
    return _offers(constraint, "calibrated_form")


def check_spread(spread: Any) -> str:
    """``spread`` if it is one of :data:`SPREADS`, else a ValueError naming it."""
    if spread not in SPREADS:
        raise ValueError(f"spread: expected one of {SPREADS}, got {spread!r}")
    return spread


def calibrated_form(constraint: Any, spread: str = "threshold") -> Any:
    """:meth:`CalibratedForm.calibrated_form` of ``constraint`` for ``spread`` where offered, else ``constraint``."""
    check_spread(spread)
    return constraint.calibrated_form(spread) if offers_calibrated_form(constraint) else constraint


def jacobian_direction(constraint: Any) -> Hashable | None:
    """The key of the shared direction of :class:`FactoredRows`, None when there is none."""
    return getattr(constraint, "jacobian_direction", None)


def smooth_is_exact(constraint: Any) -> bool:
    """The flag ``smooth_is_exact`` of :class:`Constraint` (absent: False)."""
    return getattr(constraint, "smooth_is_exact", False) is True


def cost_on_all_rows(constraint: Any) -> str:
    """The flag ``cost_on_all_rows`` of :class:`Constraint`, one of :data:`COSTS` (absent: "linear")."""
    return getattr(constraint, "cost_on_all_rows", "linear")


def row_scale(constraint: Any) -> float | None:
    """The optional flag ``row_scale`` of :class:`Constraint` (the magnitude of the rows' values, 1 for
    rates), None when absent."""
    scale = getattr(constraint, "row_scale", None)
    return None if scale is None else float(scale)


def declared_row_names(constraint: Any) -> list[str] | None:
    """The optional ``row_names`` of :class:`Constraint` (one name per row), None when absent."""
    rows = getattr(constraint, "row_names", None)
    return None if rows is None else list(rows)


def shares_direction(cons: Any) -> bool:
    """A :class:`solvers.problem.ConstraintSet` whose members share one Jacobian direction."""
    return bool(getattr(cons, "shared_direction", False))


def capabilities(constraint: Any) -> frozenset[str]:
    """The optional capabilities ``constraint`` offers, by name: ``"setup"``, ``"target_encoding"``,
    ``"closed_form_rows"``, ``"strata"``, ``"factored_rows"``, ``"shared_direction"`` (a non-None
    :func:`jacobian_direction`), ``"sums"``, ``"calibrated_form"``, ``"smooth_is_exact"``,
    ``"quadratic_cost"`` and ``"row_scale"``."""
    offered = {
        "setup": offers_setup(constraint),
        "target_encoding": offers_target_encoding(constraint),
        "closed_form_rows": offers_closed_form_rows(constraint),
        "strata": offers_strata(constraint),
        "factored_rows": offers_factored_rows(constraint),
        "shared_direction": jacobian_direction(constraint) is not None,
        "sums": supports_sums(constraint),
        "calibrated_form": offers_calibrated_form(constraint),
        "smooth_is_exact": smooth_is_exact(constraint),
        "quadratic_cost": cost_on_all_rows(constraint) == "quadratic",
        "row_scale": row_scale(constraint) is not None,
    }
    return frozenset(name for name, yes in offered.items() if yes)


def _label(constraint: Any) -> str:
    name = getattr(constraint, "name", None)
    return repr(name) if isinstance(name, str) else f"{type(constraint).__name__} object"


def check_constraint(constraint: Any) -> None:
    """Refuse, with a :class:`ConstraintContractError` naming the member, a constraint without
    ``__call__``, ``exact`` or a string ``name``, with half a capability, or with a wrong flag."""
    label = _label(constraint)
    if not callable(constraint):
        raise ConstraintContractError(f"constraints: {constraint!r} is not a constraint: it must be callable "
                                      "(__call__(out, batch): the smooth rows) and have exact, name, lower, upper")
    if not _offers(constraint, "exact"):
        raise ConstraintContractError(f"constraints: {label} has no callable 'exact' (exact(out, batch): the rows "
                                      "on hard predictions), a required member of solvers.contract.Constraint")
    if not isinstance(getattr(constraint, "name", None), str):
        raise ConstraintContractError(f"constraints: {label} has no string 'name', a required member of "
                                      "solvers.contract.Constraint")
    _check_pairs(constraint, label)
    flag = getattr(constraint, "smooth_is_exact", False)
    if not isinstance(flag, bool):
        raise ConstraintContractError(f"constraints: {label} has smooth_is_exact={flag!r}; expected True or False")
    cost = getattr(constraint, "cost_on_all_rows", "linear")
    if cost not in COSTS:
        raise ConstraintContractError(f"constraints: {label} has cost_on_all_rows={cost!r}; expected one of {COSTS}")
    scale = getattr(constraint, "row_scale", None)
    if scale is not None and (isinstance(scale, bool) or not isinstance(scale, (int, float))
                              or not math.isfinite(scale) or scale <= 0):
        raise ConstraintContractError(f"constraints: {label} has row_scale={scale!r}; expected None or a positive "
                                      "finite number (the magnitude of the rows' values, 1 for rates)")


def _check_pairs(constraint: Any, label: str) -> None:
    """Refuse a capability offered in part (:func:`check_constraint`)."""
    sums = [name for name in ("partial_sums", "from_sums") if _offers(constraint, name)]
    if len(sums) == 1:
        missing = "from_sums" if sums[0] == "partial_sums" else "partial_sums"
        raise ConstraintContractError(f"constraints: {label} has {sums[0]} but no callable {missing}; "
                                      "solvers.contract.SumsConstraint needs both")
    if offers_factored_rows(constraint):
        if not offers_strata(constraint):
            raise ConstraintContractError(f"constraints: {label} has rows_and_factors but no callable strata; "
                                          "solvers.contract.FactoredRows needs strata(batch)")
        if not hasattr(constraint, "jacobian_direction"):
            raise ConstraintContractError(f"constraints: {label} has rows_and_factors but no jacobian_direction; "
                                          "solvers.contract.FactoredRows needs it (the shared direction's key)")


def check_bounds(constraint: Any) -> None:
    """Refuse a set-up constraint whose ``lower``/``upper`` are missing or of different sizes."""
    label = _label(constraint)
    sizes = []
    for side in ("lower", "upper"):
        try:
            value = getattr(constraint, side)
        except AttributeError as error:
            raise ConstraintContractError(f"constraints: {label} has no {side!r} after setup ({error}); "
                                          "solvers.contract.Constraint needs lower and upper") from None
        if torch.as_tensor(value).dim() != 1:
            raise ConstraintContractError(f"constraints: {label} has {side}={value!r}; expected a 1-D tensor with one "
                                          "bound per row, e.g. torch.tensor([1.0], dtype=torch.float64)")
        sizes.append(int(torch.as_tensor(value).numel()))
    if sizes[0] != sizes[1]:
        raise ConstraintContractError(f"constraints: {label} has {sizes[0]} lower and {sizes[1]} upper bounds; "
                                      "expected one of each per row")
    names = declared_row_names(constraint)
    if names is not None and len(names) != sizes[0]:
        raise ConstraintContractError(f"constraints: {label} has {len(names)} row_names for its {sizes[0]} rows; "
                                      "expected one name per row (or no row_names)")
