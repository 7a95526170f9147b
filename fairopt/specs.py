"""Constraint specifications: short user-facing forms <-> constraint objects.

The estimators, the CLI, the TOML configs and :func:`fairopt.save` / :func:`fairopt.load` accept a
constraint in any of these forms:

=============================================  =================================================
form                                           meaning
=============================================  =================================================
``("disparate_impact", "sex", 0.8)``           kind, sensitive name(s), the kind's bound argument
``("gedi", "age", 0.2, {"relative": True})``   the same with further constructor arguments
``"disparate_impact:sex:0.8"``                 the text form (CLI, TOML)
``"equal_opportunity:sex>=0.8"``               ``>=`` sets ``delta`` (a ratio), ``<=`` ``bound``
``"di[pairwise]:race>=0.8"``                   a rate kind's ``groups`` (``gedi[labels]``: ``target``)
``"dcov:region<=0.25x"``                       a relative bound (``relative=True``: 0.25 times the
                                               training target's own; ``gedi``, ``dcov``, ``ccdcov``)
``{"kind": "dcov", "sensitive": [...], ...}``  a table of constructor arguments
a constraint object                            used as it is (the estimators copy it first)
=============================================  =================================================

Kinds (:data:`CONSTRAINT_KINDS`) and their classes:

=====================================  ===============================================
``disparate_impact`` (``di``)           :class:`~fairopt.constraints.DisparateImpact`, delta
``equal_impact`` (``ei``)               :class:`~fairopt.constraints.EqualImpact`, delta
``demographic_parity`` (``dp``)         :class:`~fairopt.constraints.DemographicParity`, bound
``equal_opportunity`` (``eo``)          :class:`~fairopt.constraints.EqualOpportunity`, delta or bound
``false_positive_parity`` (``fpr``)     :class:`~fairopt.constraints.FalsePositiveParity`, delta or bound
``equalized_odds`` (``eodds``)          :class:`~fairopt.constraints.EqualizedOdds`, delta or bound
``covariance``                          :class:`~fairopt.constraints.Covariance`, bound
``gedi``, ``gedi[labels]``              :class:`~fairopt.constraints.gedi.GeDI`, bound (``target=``)
``dcov``, ``jdcov``, ``ccdcov``         :class:`~fairopt.constraints.dcov.DistanceCovariance`, bound
=====================================  ===============================================

The label-conditioned kinds take ``delta`` from a tuple or ``kind:sensitive:value``, and the
difference form ``bound`` from ``kind:sensitive<=value``, a table with ``bound`` or the option
``{"delta": None}``. A positional ratio below 0.5, or a positional demographic-parity difference of 0.5 or
more, warns that it is most likely the other form (fairlearn's difference bounds are 0.05-0.1, the
four-fifths ratio 0.8). A sensitive element is one name or a list (intersections; several attributes
with ``{"groups": "marginal"}``; comma-separated in text). :func:`constraint_to_spec` writes a
table of plain values (safe for ``torch.load(..., weights_only=True)`` and JSON) from which
:func:`constraint_from_spec` rebuilds an equal constraint.

Penalty specs (:mod:`fairopt.penalties`): ``dp_squared:sex``, ``dcov|jdcov|ccdcov:sex,race,age``,
``gedi:age[:degree]``, ``fauci:<metric>:<sensitive>`` (metric wdp, wdi, weo, gdp, gdi, geo), or a
table ``{kind = ..., ...}``.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Mapping
from typing import Any, Callable

from fairopt.constraints import (Covariance, DemographicParity, DisparateImpact, DistanceCovariance, EqualImpact,
                                 EqualizedOdds, EqualOpportunity, FalsePositiveParity, GeDI)
from fairopt import penalties
from fairopt.exceptions import FairnessWarning, warn_at_caller
from fairopt.surrogates import Surrogate, get_surrogate

__all__ = ["CONSTRAINT_KINDS", "EITHER_FORM_KINDS", "PENALTY_KINDS", "build_constraint", "build_penalty",
           "constraint_builder", "constraint_from_spec", "constraint_to_spec", "pairwise_spec", "resolve_constraints",
           "saved_spec", "spec_list", "is_constraint_object", "is_single_spec"]

_SURROGATE_KEY = "surrogate"


def is_constraint_object(obj: Any) -> bool:
    """Whether ``obj`` is a constraint object rather than a specification: callable (a string, tuple, table or
    fairlearn constraint never is). Whether it keeps the constraint contract is checked as it enters an
    engine (:func:`solvers.contract.check_constraint`), which names a missing member."""
    return callable(obj)


def is_single_spec(obj: Any) -> bool:
    """A single specification, as opposed to a list of them."""
    if is_constraint_object(obj) or isinstance(obj, (str, Mapping)):
        return True
    return isinstance(obj, tuple) and bool(obj) and isinstance(obj[0], str)


def spec_list(constraints: Any) -> list:
    """The ``constraints`` argument as a list of single specs (``None`` -> ``[]``; a tuple whose first
    element is a string is one spec); ValueError for anything else.
    """
    if constraints is None:
        return []
    if is_single_spec(constraints) or type(constraints).__name__ in _FAIRLEARN_NAMES:
        return [constraints]  # a fairlearn constraint object alone: constraint_from_spec says what to write
    if not isinstance(constraints, (list, tuple)):
        raise ValueError(f"constraints: expected a spec or a list of specs, got {type(constraints).__name__}")
    return list(constraints)


def resolve_constraints(constraints: Any) -> list:
    """New constraint objects (not set up; the caller's are deep-copied) from one spec or a list of specs.

    Parameters
    ----------
    constraints : None, a spec, or a list/tuple of specs
        See the module docstring.

    Returns
    -------
    list

    Raises
    ------
    ValueError
        An unknown kind, a malformed spec, or invalid constructor arguments.
    """
    return [constraint_from_spec(spec) for spec in spec_list(constraints)]


def constraint_from_spec(spec: Any) -> Any:
    """One constraint object from a spec (module docstring); objects are deep-copied."""
    if is_constraint_object(spec):
        return copy.deepcopy(spec)
    if isinstance(spec, str):
        return build_constraint(spec)
    if isinstance(spec, Mapping):
        return build_constraint(_with_surrogate_object(dict(spec)))
    if isinstance(spec, (tuple, list)):
        return _from_tuple(spec)
    fairlearn = _FAIRLEARN_NAMES.get(type(spec).__name__)
    if fairlearn is not None:  # a fairlearn constraint object: its bound is set apart from the sensitive feature
        ratio = getattr(spec, "ratio", None)  # fairlearn keeps ratio_bound as .ratio (1.0 for a difference bound)
        hint = (f" Its ratio_bound {ratio:g} compares each group's rate with the overall rate; fairopt's "
                f"'disparate_impact:sex>=delta' compares the groups with each other, delta about ratio_bound**2 "
                f"({ratio ** 2:.2f})." if isinstance(ratio, (int, float)) and 0 < ratio < 1
                and fairlearn == "demographic_parity" else "")
        raise ValueError(f"constraints: fairlearn's {type(spec).__name__} is fairopt's {fairlearn!r}: "
                         f"{_kind_only_advice(fairlearn)}.{hint}")
    raise ValueError(
        "constraints: expected a constraint object, a (kind, sensitive, bound[, options]) tuple, "
        f"a 'kind:sensitive:bound' string or a table, got {spec!r}"
    )


def _from_tuple(spec: tuple | list) -> Any:
    """``(kind, sensitive, bound[, options])``: the bound goes to the kind's bound argument."""
    if len(spec) not in (3, 4) or not isinstance(spec[0], str):
        raise ValueError(f"constraints: expected (kind, sensitive, bound[, options]), got {spec!r}")
    options = spec[3] if len(spec) == 4 else {}
    if not isinstance(options, Mapping):
        raise ValueError(f"constraints: the 4th element of {spec!r} must be a dict of options")
    sensitive = list(spec[1]) if isinstance(spec[1], (list, tuple)) else spec[1]
    table = _with_surrogate_object({**options, "kind": spec[0], "sensitive": sensitive})
    build, bound_name, _ = constraint_builder(table)
    clash = {"kind", "sensitive", bound_name} & set(options)
    if clash == {bound_name} and spec[2] is None:  # ("eo", "sex", None, {"bound": 0.05}): the options' bound
        return build_constraint(table)
    if clash:
        raise ValueError(f"constraints: options {sorted(clash)} of {spec!r} repeat the tuple's own elements")
    _warn_unlikely_bound(_ALIASES.get(spec[0], spec[0]), bound_name, spec[2], spec, sensitive)
    return build(spec[2])


def _with_surrogate_object(table: dict) -> dict:
    """Replace a surrogate table ``{"name": ..., <params>}`` by the surrogate object."""
    surrogate = table.get(_SURROGATE_KEY)
    if isinstance(surrogate, Mapping):
        params = dict(surrogate)
        name = params.pop("name", None)
        table[_SURROGATE_KEY] = get_surrogate(name, **params)
    return table


def _kind(constraint: Any) -> str:
    """The registry kind of a fairopt constraint object (exact class match)."""
    kinds = {cls: kind for kind, cls in _CLASSES.items()}
    if type(constraint) is DistanceCovariance:
        return constraint.kind
    if type(constraint) not in kinds:
        raise ValueError(
            f"constraints: {type(constraint).__name__} is not a fairopt constraint class with a registered "
            f"kind ({sorted(kinds.values()) + ['dcov', 'jdcov', 'ccdcov']}); it cannot be written as a spec"
        )
    return kinds[type(constraint)]


def constraint_to_spec(constraint: Any, resolved: bool = False) -> dict:
    """A table ``{"kind": ..., <constructor arguments>}`` of plain values that rebuilds ``constraint``.

    Parameters
    ----------
    constraint : a fairopt constraint object of a registered kind.
    resolved : bool, default False
        For a set-up GeDI or distance covariance with ``relative=True``: write the absolute bound it
        resolved on its training data, so the rebuilt constraint enforces the same number without that data.

    Raises
    ------
    ValueError
        For an object of another class.
    """
    table: dict[str, Any] = {"kind": _kind(constraint)}
    for key, value in constraint.get_params().items():
        table[key] = _plain(value, key)
    if resolved and table.get("relative"):  # a relative GeDI or distance covariance
        absolute = getattr(constraint, "absolute_bound", None)
        if absolute is None:
            raise ValueError(f"constraints: {constraint!r} has a relative bound and is not set up; "
                             "call setup(data) first or save it with resolved=False")
        table.update(bound=float(absolute), relative=False)
    return table


def saved_spec(spec: Any) -> dict:
    """The plain table a saved model holds for a constraint given as an object or in any spec form.

    What :func:`fairopt.save` writes for an estimator's constraints and what the command line rebuilds to
    evaluate held-out rows with the saved model's bounds (one form, so both read the same bound): a set-up
    relative GeDI or distance covariance writes the absolute bound it resolved on its training data
    (:func:`constraint_to_spec` with ``resolved``), so the rebuilt constraint enforces the same number without
    that data; an object not set up keeps its relative bound; a spec is written as the table of the constraint
    it builds.
    """
    if is_constraint_object(spec):
        return constraint_to_spec(spec, resolved=getattr(spec, "absolute_bound", None) is not None)
    return constraint_to_spec(constraint_from_spec(spec))


def pairwise_spec(constraint: Any) -> str:
    """The text spec of ``constraint`` over every pair of groups (``'eodds[pairwise]:age_band>=0.8'``), what to
    write for the same bound on each pair instead of each group against the rest; a table spec where the
    constraint has no short text form (other options set)."""
    table = constraint_to_spec(constraint)
    kind = table.pop("kind")
    short = next((alias for alias, name in _ALIASES.items() if name == kind), kind)
    sensitive = table.pop("sensitive")
    names = ",".join(sensitive) if isinstance(sensitive, (list, tuple)) else str(sensitive)
    delta, bound = table.pop("delta", None), table.pop("bound", None)
    table.pop("groups", None)
    table.pop("surrogate", None)  # the smooth stand-in training chose, not part of the bound
    if table.get("threshold", 0.0) != 0.0 or set(table) - {"threshold"}:
        return repr({"kind": kind, "sensitive": sensitive, "delta": delta, "bound": bound, **table,
                     "groups": "pairwise"})
    return f"{short}[pairwise]:{names}" + (f">={delta:g}" if delta is not None else f"<={bound:g}")


def _plain(value: Any, key: str) -> Any:
    """``value`` as Python scalars/strings/lists/dicts (surrogate objects become tables)."""
    if isinstance(value, Surrogate):
        return {"name": value.name, **value._params()}  # the surrogate's declared parameters
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else float(value)
    if isinstance(value, (list, tuple)):
        return [_plain(v, key) for v in value]
    if hasattr(value, "item") and getattr(value, "ndim", 1) == 0:  # numpy / torch scalar
        return value.item()
    raise ValueError(f"constraints: argument {key!r} = {value!r} cannot be written as a plain value")


# ----------------------------------------------------------------------------- text and table forms
#: kind -> the constructor argument a bracket after the kind sets (``gedi[labels]:age:0.05``)
_KIND_OPTIONS = {"gedi": "target", **{kind: "groups" for kind in (
    "disparate_impact", "equal_impact", "demographic_parity", "equal_opportunity", "false_positive_parity",
    "equalized_odds")}}
_ALIASES = {"di": "disparate_impact", "ei": "equal_impact", "dp": "demographic_parity", "eo": "equal_opportunity",
            "fpr": "false_positive_parity", "eodds": "equalized_odds"}
#: constraint kind -> name of its bound argument (the default one for the kinds of
#: :data:`EITHER_FORM_KINDS`, which also take ``bound``)
CONSTRAINT_KINDS = {
    "disparate_impact": "delta",
    "equal_impact": "delta",
    "demographic_parity": "bound",
    "equal_opportunity": "delta",
    "false_positive_parity": "delta",
    "equalized_odds": "delta",
    "covariance": "bound",
    "gedi": "bound",
    "dcov": "bound",
    "jdcov": "bound",
    "ccdcov": "bound",
}
#: kinds whose constraint takes either ``delta`` (ratio form) or ``bound`` (difference form)
EITHER_FORM_KINDS = ("equal_opportunity", "false_positive_parity", "equalized_odds")
PENALTY_KINDS = ("dp_squared", "dcov", "jdcov", "ccdcov", "gedi", "fauci")
#: comparison of a text spec ``kind:sensitive<op>value`` -> the bound argument it sets
_COMPARISONS = {">=": "delta", "<=": "bound"}
#: operators written the other way round (or a lone comparison) -> the one meant
_MISWRITTEN = {"=>": ">=", "=<": "<=", ">": ">=", "<": "<="}
#: fairlearn's constraint class names -> fairopt's kind of the same measure (for the error message of a spec
#: that names the class: fairopt's bounds go with the kind and the sensitive feature)
_FAIRLEARN_NAMES = {"DemographicParity": "demographic_parity", "EqualizedOdds": "equalized_odds",
                    "TruePositiveRateParity": "equal_opportunity", "FalsePositiveRateParity": "false_positive_parity"}
_CLASSES = {"disparate_impact": DisparateImpact, "equal_impact": EqualImpact,
            "demographic_parity": DemographicParity, "equal_opportunity": EqualOpportunity,
            "false_positive_parity": FalsePositiveParity, "equalized_odds": EqualizedOdds,
            "covariance": Covariance, "gedi": GeDI}


def _short_names() -> str:
    """The short kind names as ``'di' (disparate_impact), ...`` for error messages."""
    return ", ".join(f"{short!r} ({kind})" for short, kind in _ALIASES.items())


def _bound_args(kind: str) -> tuple[str, ...]:
    """The bound arguments a kind accepts (both for the kinds of EITHER_FORM_KINDS)."""
    return ("delta", "bound") if kind in EITHER_FORM_KINDS else (CONSTRAINT_KINDS[kind],)


def _bound_name(kind: str, options: Mapping) -> str:
    """The bound argument a spec's value sets: ``bound`` for an either-form kind whose options choose
    the difference form, else the kind's own.
    """
    if kind in EITHER_FORM_KINDS and options.get("delta") is None and (
            "delta" in options or options.get("bound") is not None):
        return "bound"
    return CONSTRAINT_KINDS[kind]


def _names(text: str, spec: Any) -> str | list[str]:
    names = [part.strip() for part in text.split(",") if part.strip()]
    if not names:
        raise ValueError(f"spec: no sensitive feature name in {spec!r}")
    return names[0] if len(names) == 1 else names


#: The kinds whose bound can be relative to the training target's own measure (``0.2x`` in text).
_RELATIVE_KINDS = ("gedi", "dcov", "ccdcov")


def _bound_number(text: str, what: str, kind: str, spec: Any) -> tuple[float, dict]:
    """The bound of a text spec and, for ``0.25x`` (a share of the training target's own measure), the option
    ``relative=True``."""
    text = text.strip()
    if text[-1:] in ("x", "X") and _is_number(text[:-1]):
        if kind not in _RELATIVE_KINDS:
            raise ValueError(f"spec: a relative bound ({text!r}, a share of the training target's own measure) is "
                             f"for {list(_RELATIVE_KINDS)}, not {kind!r}, in {spec!r}")
        return _number(text[:-1], what, spec), {"relative": True}
    return _number(text, what, spec), {}


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def _number(text: str, what: str, spec: Any) -> float:
    try:
        value = float(text)
    except ValueError:
        raise ValueError(f"spec: {what} {text!r} in {spec!r} is not a number") from None
    if not math.isfinite(value):
        raise ValueError(f"spec: {what} in {spec!r} must be finite, got {text!r}")
    return value


def _table(spec: Any, kinds: Any) -> tuple[str, dict]:
    """``(kind, keyword arguments)`` of a table spec."""
    options = dict(spec)
    kind = options.pop("kind", None)
    kind = _ALIASES.get(kind, kind)
    fairlearn = _FAIRLEARN_NAMES.get(kind) if isinstance(kind, str) else None
    if fairlearn is not None and fairlearn in kinds:
        raise ValueError(f"spec: fairlearn's {kind} is fairopt's kind {fairlearn!r}: write it in its place, e.g. "
                         f"({fairlearn!r}, 'sex', bound) or '{fairlearn}:sex<=bound'")
    if kind not in kinds:
        raise ValueError(f"spec: 'kind' must be one of {sorted(kinds)} or a short name {_short_names()}, got "
                         f"{kind!r} in {dict(spec)!r}")
    return kind, options


def _kind_only_advice(kind: str) -> str:
    """How to write a spec of ``kind`` with its sensitive feature and bound (for the errors above)."""
    example = f"{kind}:sex>=0.8" if kind in ("disparate_impact", "equal_impact") else f"{kind}:sex<=0.05"
    return (f"write 'kind:sensitive' with the bound, e.g. {example!r} for a sensitive feature named 'sex' (a key "
            f"of sensitive_features, or the name of the Series passed), or the tuple ({kind!r}, 'sex', bound)")


def _parse_constraint(spec: Any) -> tuple[str, dict]:
    """``(kind, constructor arguments)`` of a constraint spec (the bound may be absent)."""
    if isinstance(spec, Mapping):
        return _table(spec, CONSTRAINT_KINDS)
    if not isinstance(spec, str):
        raise ValueError(f"spec: expected 'kind:sensitive[:bound]' or a table, got {spec!r}")
    parts = spec.split(":")
    kind, bracket, option = parts[0].strip().partition("[")
    kind = _ALIASES.get(kind.strip(), kind.strip())
    fairlearn = _FAIRLEARN_NAMES.get(kind)
    if fairlearn is not None and len(parts) > 1:
        raise ValueError(f"spec: fairlearn's {kind} is fairopt's {fairlearn!r}: write "
                         f"{spec.replace(kind, fairlearn, 1)!r}")
    if fairlearn is not None or (kind in CONSTRAINT_KINDS and len(parts) == 1):  # fairlearn's way: the kind alone
        named = f"fairlearn's {kind} is fairopt's {fairlearn!r}; " if fairlearn else ""
        raise ValueError(f"spec: {named}{spec!r} does not name the sensitive feature it bounds: "
                         f"{_kind_only_advice(fairlearn or kind)}")
    if kind not in CONSTRAINT_KINDS or len(parts) not in (2, 3):
        raise ValueError(f"spec: expected 'kind:sensitive[:bound]' or 'kind:sensitive>=delta|<=bound' with kind in "
                         f"{sorted(CONSTRAINT_KINDS)} or a short name {_short_names()}, got {spec!r}")
    if len(parts) == 2 and not any(op in parts[1] for op in _COMPARISONS):
        wrong = next((op for op in _MISWRITTEN if op in parts[1]), None)
        if wrong is not None:
            meant = _MISWRITTEN[wrong]
            raise ValueError(f"spec: unknown comparison {wrong!r} in {spec!r}; write {meant!r} "
                             f"(e.g. {spec.replace(wrong, meant, 1)!r}): '>=' sets a ratio delta, '<=' a "
                             "difference bound")
    extra = {}
    if bracket:
        if kind not in _KIND_OPTIONS or not option.endswith("]") or not option[:-1].strip():
            raise ValueError(f"spec: 'kind[option]' is only {sorted(f'{k}[...]' for k in _KIND_OPTIONS)} (e.g. "
                             f"'gedi[labels]:age:0.05', 'di[pairwise]:race>=0.8'), got {parts[0]!r} in {spec!r}")
        extra[_KIND_OPTIONS[kind]] = option[:-1].strip()
    op = next((op for op in _COMPARISONS if op in parts[1]), None)
    if op is not None:
        if len(parts) != 2:
            raise ValueError(f"spec: expected 'kind:sensitive{op}value' (no third part), got {spec!r}")
        names, value = parts[1].split(op, 1)
        arg = _COMPARISONS[op]
        if kind == "demographic_parity" and op == ">=":
            raise ValueError(f"spec: demographic parity bounds a difference of rates ('<='); a ratio of positive "
                             f"rates is disparate impact: write {spec.replace(parts[0].strip(), 'di', 1)!r}")
        if arg not in _bound_args(kind):
            raise ValueError(f"spec: {kind!r} takes {' or '.join(repr(a) for a in _bound_args(kind))}; "
                             f"'{op}' sets {arg!r} ('>=' a ratio delta, '<=' a difference bound), in {spec!r}")
        number, relative = _bound_number(value, arg, kind, spec)
        return kind, {"sensitive": _names(names, spec), arg: number, **extra, **relative}
    options: dict = {"sensitive": _names(parts[1], spec), **extra}
    if len(parts) == 3:
        number, relative = _bound_number(parts[2], CONSTRAINT_KINDS[kind], kind, spec)
        _warn_unlikely_bound(kind, CONSTRAINT_KINDS[kind], number, spec, options["sensitive"])
        options.update({CONSTRAINT_KINDS[kind]: number, **relative})
    return kind, options


#: A ratio bound ``delta`` below this, or a difference bound of positive rates at or above it, written
#: without naming its form (the third element of a tuple, ``kind:sensitive:value``), is more likely the
#: other form than what the user meant: :func:`_warn_unlikely_bound`.
UNLIKELY_BOUND = 0.5


def _warn_unlikely_bound(kind: str, arg: str, value: Any, spec: Any, sensitive: str | list) -> None:
    """Warn (:class:`~fairopt.exceptions.FairnessWarning`) when a bound written by position reads as the other
    form of a rate bound than the value suggests.

    A positional value sets the kind's default bound argument: ``delta`` of the ratio kinds
    (``min(P_g, P_rest) / max(P_g, P_rest) >= delta``), ``bound`` of demographic parity
    (``|P_g - P_rest| <= bound``). fairlearn writes equalized odds and demographic parity with a
    ``difference_bound`` (0.05, 0.1) and the four-fifths rule is a ratio of 0.8, so
    ``("equalized_odds", "race", 0.1)`` (a rate at least a tenth of the other: hardly a restriction) and
    ``("demographic_parity", "sex", 0.8)`` (rates up to 0.8 apart) are most likely the other form. A named form
    (``>=`` / ``<=`` in text, ``delta=`` / ``bound=`` in a table or an object) is taken as written.
    """
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        return
    try:
        value = float(value)
    except OverflowError:  # an integer beyond a float: the constraint's own check refuses it
        return
    names = ",".join(sensitive) if isinstance(sensitive, list) else str(sensitive)
    if arg == "delta" and 0 <= value < UNLIKELY_BOUND:  # only the ratio kinds take a delta
        meant = "demographic_parity" if kind in ("disparate_impact", "equal_impact") else kind
        warn_at_caller(f"constraints: {spec!r} reads {value:g} as a ratio bound ({kind}: the smaller rate at least "
                       f"{value:g} times the larger), which hardly restricts; the four-fifths rule is 0.8. For a "
                       f"difference of rates of at most {value:g} write '{meant}:{names}<={value:g}'; to keep the "
                       f"ratio, write '{kind}:{names}>={value:g}'.", FairnessWarning)
    elif arg == "bound" and kind == "demographic_parity" and value >= UNLIKELY_BOUND:
        warn_at_caller(f"constraints: {spec!r} reads {value:g} as a difference bound ({kind}: the positive rates at "
                       f"most {value:g} apart), which hardly restricts. For the four-fifths rule's ratio write "
                       f"'disparate_impact:{names}>={value:g}'; to keep the difference, write "
                       f"'{kind}:{names}<={value:g}'.", FairnessWarning)


def _make_constraint(kind: str, options: dict) -> Any:
    if "sensitive" not in options:
        raise ValueError(f"spec: a {kind!r} constraint needs 'sensitive'")
    if not any(arg in options for arg in _bound_args(kind)):
        raise ValueError(f"spec: a {kind!r} constraint needs its {' or '.join(repr(a) for a in _bound_args(kind))}")
    if kind in ("dcov", "jdcov", "ccdcov"):
        return DistanceCovariance(kind=kind, **options)
    try:
        return _CLASSES[kind](**options)
    except TypeError as exc:
        raise ValueError(f"spec: bad arguments {sorted(options)} for {kind!r} ({exc})") from None


def build_constraint(spec: str | Mapping, bound: float | None = None) -> Any:
    """A constraint from a spec; ``bound`` overrides the spec's bound.

    ``build_constraint("disparate_impact:sex:0.8")`` is ``DisparateImpact("sex", delta=0.8)``.
    """
    kind, options = _parse_constraint(spec)
    if bound is not None:
        options[_bound_name(kind, options)] = bound
    return _make_constraint(kind, options)


def constraint_builder(spec: str | Mapping) -> tuple[Callable[[float], Any], str, float | None]:
    """``(value -> constraint, bound argument's name, the spec's own bound or None)`` for sweeping a
    bound; the spec is validated now.
    """
    kind, options = _parse_constraint(spec)
    name = _bound_name(kind, options)
    default = options.get(name)
    probe = dict(options)
    probe.setdefault(name, 1.0 if name == "delta" else 0.0)
    _make_constraint(kind, probe)
    return (lambda value: build_constraint(spec, bound=value)), name, default


def build_penalty(spec: str | Mapping) -> Any:
    """A penalty object of :mod:`fairopt.penalties` from a spec (module docstring)."""
    if isinstance(spec, Mapping):
        kind, options = _table(spec, PENALTY_KINDS)
    elif isinstance(spec, str):
        parts = [p.strip() for p in spec.split(":")]
        kind = parts[0]
        if kind not in PENALTY_KINDS:
            raise ValueError(f"spec: penalty kind must be one of {PENALTY_KINDS}, got {spec!r}")
        if kind == "fauci":
            if len(parts) != 3:
                raise ValueError(f"spec: expected 'fauci:<metric>:<sensitive>', got {spec!r}")
            options = {"metric": parts[1], "sensitive": parts[2]}
        elif kind == "gedi":
            if len(parts) not in (2, 3):
                raise ValueError(f"spec: expected 'gedi:<sensitive>[:<degree>]', got {spec!r}")
            options = {"sensitive": parts[1]}
            if len(parts) == 3:
                degree = _number(parts[2], "degree", spec)
                if not degree.is_integer():
                    raise ValueError(f"spec: degree in {spec!r} must be an integer")
                options["degree"] = int(degree)
        else:
            if len(parts) != 2:
                raise ValueError(f"spec: expected '{kind}:<sensitive>[,<sensitive>...]', got {spec!r}")
            options = {"sensitive": _names(parts[1], spec)}
    else:
        raise ValueError(f"spec: expected a penalty spec string or table, got {spec!r}")
    makers = {
        "dp_squared": penalties.DemographicParitySquared,
        "gedi": penalties.GeDIPenalty,
        "fauci": penalties.FaUCI,
    }
    try:
        if kind in ("dcov", "jdcov", "ccdcov"):
            return penalties.DistanceCovariancePenalty(kind=kind, **options)
        return makers[kind](**options)
    except TypeError as exc:
        raise ValueError(f"spec: bad arguments {sorted(options)} for penalty {kind!r} ({exc})") from None
