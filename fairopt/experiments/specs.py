"""Constraints and penalties from short text specifications (CLI flags, TOML configs).

Constraint specs, ``kind:sensitive[:bound]`` (several sensitive names comma-separated),
or a table ``{kind = ..., sensitive = ..., <constructor arguments>}``:

=====================================  ===============================================
``disparate_impact:sex:0.8`` (``di``)   :class:`~fairopt.constraints.DisparateImpact`, delta
``equal_impact:sex:0.8`` (``ei``)       :class:`~fairopt.constraints.EqualImpact`, delta
``demographic_parity:sex:0.05`` (``dp``) :class:`~fairopt.constraints.DemographicParity`, bound
``covariance:sex:0.01``                 :class:`~fairopt.constraints.Covariance`, bound
``gedi:age:0.05``                       :class:`~fairopt.constraints.gedi.GeDI`, bound
``dcov|jdcov|ccdcov:sex,race:0.001``    :class:`~fairopt.constraints.dcov.DistanceCovariance`
=====================================  ===============================================

Penalty specs (:mod:`fairopt.penalties`): ``dp_squared:sex``, ``dcov|jdcov|ccdcov:sex,race,age``,
``gedi:age[:degree]``, ``fauci:<metric>:<sensitive>`` (metric wdp, wdi, weo, gdp, gdi, geo),
or a table ``{kind = ..., ...}``.
"""

from __future__ import annotations

import math
from typing import Any, Callable, Mapping

__all__ = ["build_constraint", "constraint_builder", "build_penalty", "CONSTRAINT_KINDS", "PENALTY_KINDS"]

_ALIASES = {"di": "disparate_impact", "ei": "equal_impact", "dp": "demographic_parity"}
#: constraint kind -> name of its bound argument
CONSTRAINT_KINDS = {
    "disparate_impact": "delta",
    "equal_impact": "delta",
    "demographic_parity": "bound",
    "covariance": "bound",
    "gedi": "bound",
    "dcov": "bound",
    "jdcov": "bound",
    "ccdcov": "bound",
}
PENALTY_KINDS = ("dp_squared", "dcov", "jdcov", "ccdcov", "gedi", "fauci")


def _names(text: str, spec: Any) -> str | list[str]:
    names = [part.strip() for part in text.split(",") if part.strip()]
    if not names:
        raise ValueError(f"spec: no sensitive feature name in {spec!r}")
    return names[0] if len(names) == 1 else names


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
    if kind not in kinds:
        raise ValueError(f"spec: 'kind' must be one of {sorted(kinds)}, got {kind!r} in {dict(spec)!r}")
    return kind, options


def _parse_constraint(spec: Any) -> tuple[str, dict]:
    """``(kind, constructor arguments)`` of a constraint spec (the bound may be absent)."""
    if isinstance(spec, Mapping):
        return _table(spec, CONSTRAINT_KINDS)
    if not isinstance(spec, str):
        raise ValueError(f"spec: expected 'kind:sensitive[:bound]' or a table, got {spec!r}")
    parts = spec.split(":")
    kind = _ALIASES.get(parts[0].strip(), parts[0].strip())
    if kind not in CONSTRAINT_KINDS or len(parts) not in (2, 3):
        raise ValueError(f"spec: expected 'kind:sensitive[:bound]' with kind in {sorted(CONSTRAINT_KINDS)}, "
                         f"got {spec!r}")
    options: dict = {"sensitive": _names(parts[1], spec)}
    if len(parts) == 3:
        options[CONSTRAINT_KINDS[kind]] = _number(parts[2], CONSTRAINT_KINDS[kind], spec)
    return kind, options


def _make_constraint(kind: str, options: dict) -> Any:
    from fairopt.constraints import Covariance, DemographicParity, DisparateImpact, EqualImpact
    from fairopt.constraints.gedi import GeDI

    if "sensitive" not in options:
        raise ValueError(f"spec: a {kind!r} constraint needs 'sensitive'")
    if CONSTRAINT_KINDS[kind] not in options:
        raise ValueError(f"spec: a {kind!r} constraint needs its {CONSTRAINT_KINDS[kind]!r}")
    if kind in ("dcov", "jdcov", "ccdcov"):
        from fairopt.constraints.dcov import DistanceCovariance  # heavy module: imported lazily

        return DistanceCovariance(kind=kind, **options)
    classes = {"disparate_impact": DisparateImpact, "equal_impact": EqualImpact,
               "demographic_parity": DemographicParity, "covariance": Covariance, "gedi": GeDI}
    try:
        return classes[kind](**options)
    except TypeError as exc:
        raise ValueError(f"spec: bad arguments {sorted(options)} for {kind!r} ({exc})") from None


def build_constraint(spec: str | Mapping, bound: float | None = None) -> Any:
    """A constraint from a spec (module docstring); ``bound`` overrides the spec's bound.

    E.g. ``build_constraint("disparate_impact:sex:0.8")`` is
    ``DisparateImpact("sex", delta=0.8)``.
    """
    kind, options = _parse_constraint(spec)
    if bound is not None:
        options[CONSTRAINT_KINDS[kind]] = bound
    return _make_constraint(kind, options)


def constraint_builder(spec: str | Mapping) -> tuple[Callable[[float], Any], str, float | None]:
    """``(value -> constraint, name of the bound argument, the spec's own bound or None)``
    for sweeping a constraint's bound; the spec is validated now."""
    kind, options = _parse_constraint(spec)
    name = CONSTRAINT_KINDS[kind]
    default = options.get(name)
    probe = dict(options)
    probe.setdefault(name, 1.0 if name == "delta" else 0.0)
    _make_constraint(kind, probe)
    return (lambda value: build_constraint(spec, bound=value)), name, default


def build_penalty(spec: str | Mapping) -> Any:
    """A penalty object of :mod:`fairopt.penalties` from a spec (module docstring)."""
    from fairopt import penalties

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
