"""Confidence statements on held-out rows: :class:`Certificate` and :func:`certify`
(normal and Clopper-Pearson bounds for rate constraints, a bootstrap for the others)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from fairopt._validation import check_interval, require_unweighted
from fairopt.certificate.intervals import (bootstrap_rows, clopper_pearson, compared_pairs,
                                           finite_sides, normal_quantile, outputs_on, prepared_copy, rate_sides,
                                           ratio_bound, ratio_upper, row_table, capped_ratio, within_bounds,
                                           worst_case_rows)
from fairopt.constraints.base import release_caches
from fairopt.constraints.rates import GroupRateConstraint
from fairopt.measures.bootstrap import percentile_interval

__all__ = ["CERTIFY_METHODS", "Certificate", "certify"]


@dataclass
class Certificate:
    """A confidence statement about one constraint on one sample of rows.

    Attributes
    ----------
    constraint : str
        The constraint's name (e.g. ``"disparate_impact[sex]"``).
    measure : str
        What ``realised``/``lower``/``upper`` measure (``"disparate_impact ratio"``, or a row name).
    realised : float
        The measure on the certification rows (hard predictions).
    lower, upper : float
        Confidence bounds of the measure in the population. The end the verdict reads (:attr:`confidence_bound`, on
        the side of the bound) is one-sided at (at least) ``confidence``; the other end is reported for reference and
        can be looser where the measure is folded at its boundary (a difference ``|d|`` whose true value is 0, a
        ratio whose true value is 1: the normal method's far end then covers at about ``1 - 2 alpha``).
    confidence : float
    bound : float
        The user's bound on the measure (``delta`` for a ratio, ``bound`` otherwise).
    bound_side : {"lower", "upper"}
        Whether the measure must be ``>= bound`` (ratios) or ``<= bound``.
    passed : bool
        Every row satisfies its bound at the confidence level.
    n : int
        Rows the statement is based on.
    method : {"normal", "clopper-pearson", "bootstrap"}
    rows : dict
        Per row: ``names``, ``values``, simultaneous ``lower``/``upper`` and ``bound_lower``/``bound_upper``.
    """

    constraint: str
    measure: str
    realised: float
    lower: float
    upper: float
    confidence: float
    bound: float
    bound_side: str
    passed: bool
    n: int
    method: str
    rows: dict = field(default_factory=dict)

    @property
    def confidence_bound(self) -> float:
        """The end of the interval the bound is checked against (``lower`` for a ratio, else ``upper``)."""
        return self.lower if self.bound_side == "lower" else self.upper

    def to_dict(self) -> dict:
        """Plain Python values (JSON-safe apart from infinities)."""
        return {
            "constraint": self.constraint, "measure": self.measure, "realised": float(self.realised),
            "lower": float(self.lower), "upper": float(self.upper), "confidence": float(self.confidence),
            "bound": float(self.bound), "bound_side": self.bound_side, "passed": bool(self.passed),
            "n": int(self.n), "method": self.method,
            "rows": {k: list(v) for k, v in self.rows.items()},
        }

    def __str__(self) -> str:
        """The realised measure, the confidence bound the verdict reads (``lower`` for a ratio, else
        ``upper``: a one-sided bound at ``confidence``), the requirement and the verdict. The other end of
        ``[lower, upper]`` is not quoted: each end is a one-sided bound, so the pair is not an interval at
        ``confidence``."""
        op = ">=" if self.bound_side == "lower" else "<="
        verdict = "PASSED" if self.passed else "FAILED"
        return (f"{self.constraint}: {self.measure} = {self.realised:.4g} on {self.n} rows; "
                f"{self.confidence:.0%} {self.bound_side} confidence bound {self.confidence_bound:.4g} "
                f"({self.method}); required {op} {self.bound:g}: {verdict}")


def certify(
    model_outputs_or_model: Any,
    data: Any,
    constraint: Any,
    confidence: float = 0.95,
    *,
    n_bootstrap: int = 200,
    seed: int = 0,
    method: str = "normal",
) -> Certificate:
    """Confidence statement about ``constraint`` on the rows of ``data`` (the methods: :mod:`fairopt.certificate`).

    Parameters
    ----------
    model_outputs_or_model : torch.nn.Module, callable, Tensor or array (n,)
        The model (called on ``data.X``) or its outputs (logits for a classifier).
    data : FairData
        The certification rows, encoded like the training data and not used for training.
    constraint : constraint object or spec
        Set up on the training data it keeps that set-up (e.g. GeDI's standardisation); never set up, it
        is set up on ``data``. Neither it nor its caches are modified.
    confidence : float, default 0.95
        Level of the simultaneous statement, in (0, 1).
    n_bootstrap : int, default 200
        Resamples for the bootstrap constraints.
    seed : int, default 0
        Seed of the bootstrap resamples.
    method : {"normal", "clopper-pearson"}, default "normal"
        Rate constraints only (:mod:`fairopt.certificate`). ``p_g = (k_g + 1/2) / (n_g + 1)`` in the normal standard
        error keeps a variance at 0 or n positives.

    Raises
    ------
    TypeError
        A constraint type without a certificate.
    ValueError
        Bad ``confidence``/``n_bootstrap``/``method``, outputs of the wrong length, or weighted ``data``
        (the intervals count rows).
    """
    require_unweighted(data, "certify (held-out certificates)",
                       "certify unweighted rows, or fit without validation_fraction")
    confidence = check_interval(confidence, "confidence", 0.0, 1.0)
    if isinstance(n_bootstrap, bool) or not isinstance(n_bootstrap, (int, np.integer)) or n_bootstrap < 10:
        raise ValueError(f"n_bootstrap: expected an integer >= 10, got {n_bootstrap!r}")
    c = prepared_copy(constraint, data)
    out = outputs_on(model_outputs_or_model, data)
    if method not in CERTIFY_METHODS:
        raise ValueError(f"method: expected one of {CERTIFY_METHODS}, got {method!r}")
    if isinstance(c, GroupRateConstraint):
        if method == "normal":
            return _certify_rates_normal(c, out, data, confidence)
        return _certify_rates(c, out, data, confidence)
    return _certify_bootstrap(c, out, data, confidence, int(n_bootstrap), int(seed))


def _rate_certificate(c: GroupRateConstraint, data: Any, confidence: float, method: str, k: np.ndarray,
                      n: np.ndarray, rates: np.ndarray, values: np.ndarray, row_lo: np.ndarray, row_hi: np.ndarray,
                      interval: Any, extra_rows: dict) -> Certificate:
    """The certificate both rate methods share: ``passed`` from the row bounds, the realised measure
    (:meth:`GroupRateConstraint.realised_from_rates`) and the row table; ``interval(pairs, is_ratio)`` is the
    method's interval of the measure.
    """
    b_lo, b_hi = c.lower.double().numpy(), c.upper.double().numpy()
    passed = bool(within_bounds(row_lo, row_hi, b_lo, b_hi).all())
    focus, ref = c.compared_sides
    pairs = list(zip(focus.tolist(), ref.tolist()))
    is_ratio = c.rate_form == "ratio"  # DisparateImpact, EqualImpact, a conditioned rate with delta
    if is_ratio:
        measure, side, bound = f"{c.kind} ratio", "lower", c.delta
    else:
        measure, side, bound = f"{c.kind} difference", "upper", c.bound
    realised = c.realised_from_rates(rates, n)
    lo, hi = interval(pairs, is_ratio)
    rows = row_table(c, values, row_lo, row_hi, b_lo, b_hi)
    rows.update(sides_positive=k.tolist(), sides_n=n.tolist(), **extra_rows)
    return Certificate(constraint=c.name, measure=measure, realised=float(realised), lower=float(lo), upper=float(hi),
                       confidence=confidence, bound=float(bound), bound_side=side, passed=passed, n=len(data),
                       method=method, rows=rows)


def _rates_and_rows(c: GroupRateConstraint, n: np.ndarray, k: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Side rates ``k / n`` (0 for an empty side) and the realised rows (a row comparing an empty side is 0)."""
    rates = np.where(n > 0, k / np.maximum(n, 1.0), 0.0)
    return rates, c.informed_rows(torch.as_tensor(n), torch.float64).numpy() @ rates


def _certify_rates(c: GroupRateConstraint, out: torch.Tensor, data: Any, confidence: float) -> Certificate:
    """Clopper-Pearson intervals per side and worst-case rows; an empty side counts as the uninformative ``[0, 1]``."""
    k, n = rate_sides(c, out, data)
    L, U = clopper_pearson(k, n, 1.0 - (1.0 - confidence) / len(n))
    rates, values = _rates_and_rows(c, n, k)
    row_lo, row_hi = worst_case_rows(c.side_rows.double().numpy(), L, U)

    def interval(pairs: list, is_ratio: bool) -> tuple[float, float]:
        if is_ratio:
            return (min(min(capped_ratio(L[f], U[r]), capped_ratio(L[r], U[f])) for f, r in pairs),
                    min(ratio_upper(L[f], U[f], L[r], U[r]) for f, r in pairs))
        return (max(max(0.0, L[f] - U[r], L[r] - U[f]) for f, r in pairs),
                max(max(U[f] - L[r], U[r] - L[f]) for f, r in pairs))

    return _rate_certificate(c, data, confidence, "clopper-pearson", k, n, rates, values, row_lo, row_hi, interval,
                             {"sides_lower": L.tolist(), "sides_upper": U.tolist()})


def _certify_rates_normal(c: GroupRateConstraint, out: torch.Tensor, data: Any, confidence: float) -> Certificate:
    """Per-row normal bounds (``certify(method="normal")``)."""
    k, n = rate_sides(c, out, data)
    rates, values = _rates_and_rows(c, n, k)
    p = (k + 0.5) / (n + 1.0)
    var = np.where(n > 0, p * (1.0 - p) / np.maximum(n, 1.0), np.inf)  # an empty side is uninformative
    z = normal_quantile(confidence, compared_pairs(c))
    with np.errstate(invalid="ignore"):
        se = np.sqrt((c.side_rows.double().numpy() ** 2) @ var)
    row_lo, row_hi = values - z * se, values + z * se

    def interval(pairs: list, is_ratio: bool) -> tuple[float, float]:
        if is_ratio:
            def bound(zz: float) -> float:
                return min((min(ratio_bound(rates[a], rates[b], var[a], var[b], zz) for a, b in ((f, r), (r, f)))
                            for f, r in pairs), default=1.0)
            return bound(z), bound(-z)
        spread = [z * math.sqrt(var[f] + var[r]) for f, r in pairs]
        return (max((max(0.0, abs(rates[f] - rates[r]) - w) for (f, r), w in zip(pairs, spread)), default=0.0),
                max((abs(rates[f] - rates[r]) + w for (f, r), w in zip(pairs, spread)), default=0.0))

    return _rate_certificate(c, data, confidence, "normal", k, n, rates, values, row_lo, row_hi, interval,
                             {"sides_se": np.sqrt(var).tolist()})


def _certify_bootstrap(c: Any, out: torch.Tensor, data: Any, confidence: float, n_bootstrap: int,
                       seed: int) -> Certificate:
    values = c.exact(out.to(data.X.dtype), data).double().reshape(-1).numpy()
    draws = bootstrap_rows(c, out, data, n_bootstrap, seed)
    b_lo, b_hi = c.lower.double().numpy(), c.upper.double().numpy()
    lo, hi = percentile_interval(draws, confidence, sides=finite_sides(c))
    passed = bool(within_bounds(lo, hi, b_lo, b_hi).all())
    room = np.minimum(np.where(np.isfinite(b_hi), b_hi - hi, np.inf), np.where(np.isfinite(b_lo), lo - b_lo, np.inf))
    j = int(np.argmin(room)) if np.isfinite(room).any() else 0
    upper_side = np.isfinite(b_hi[j]) and (not np.isfinite(b_lo[j]) or b_hi[j] - hi[j] <= lo[j] - b_lo[j])
    rows = row_table(c, values, lo, hi, b_lo, b_hi)
    release_caches([c])
    return Certificate(constraint=c.name, measure=rows["names"][j], realised=float(values[j]), lower=float(lo[j]),
                       upper=float(hi[j]), confidence=confidence,
                       bound=float(b_hi[j] if upper_side else b_lo[j]), bound_side="upper" if upper_side else "lower",
                       passed=passed, n=len(data), method="bootstrap", rows=rows)


#: Values of ``certify(method=)``.
CERTIFY_METHODS: tuple[str, ...] = ("normal", "clopper-pearson")
