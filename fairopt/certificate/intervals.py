"""The interval arithmetic and sampling behind certificates and margins: model outputs on a
sample, the constraint copy they are measured with, Clopper-Pearson intervals, worst-case
rows over a box of rates, ratio bounds, normal quantiles and bootstrap draws (of
:mod:`fairopt.measures.bootstrap`)."""

from __future__ import annotations

import math
import warnings
from typing import Any, Iterator, Sequence

import numpy as np
import torch
from scipy import stats
from torch import nn

from fairopt.certificate.tightening import TightenedConstraint, bounds_ready, fresh_copy
from solvers.problem import eval_mode, float64_forward
from fairopt.constraints.base import release_caches, set_up_on_other_rows
from fairopt.constraints.dcov import DistanceCovariance
from fairopt.constraints.gedi import GeDI
from fairopt.constraints.covariance import Covariance
from fairopt.constraints.rates import GroupRateConstraint
from fairopt.measures.binomial import clopper_pearson
from fairopt.measures.bootstrap import resample_chunks

__all__ = ["BOOTSTRAP_TYPES", "bootstrap_rows", "capped_ratio", "clopper_pearson", "compared_pairs",
           "finite_sides", "half_samples", "normal_quantile", "outputs_on", "prepared_copy", "rate_sides",
           "ratio_bound", "ratio_upper", "row_table", "within_bounds", "worst_case_rows"]


BOOTSTRAP_TYPES = (GeDI, DistanceCovariance, Covariance)


def prepared_copy(constraint: Any, data: Any) -> Any:
    """A cache-free copy of ``constraint``, set up on ``data`` if it was never set up.

    A constraint set up on the training data keeps the training set-up (GeDI's
    standardisation and relative bound); one never set up is set up on ``data``.
    """
    if isinstance(constraint, TightenedConstraint):
        constraint = constraint.constraint
    if not callable(getattr(constraint, "exact", None)):
        from fairopt.specs import resolve_constraints

        constraint = resolve_constraints([constraint])[0]
    if not isinstance(constraint, (GroupRateConstraint, *BOOTSTRAP_TYPES)):
        raise TypeError(f"constraint: no certificate for {type(constraint).__name__}; supported: DisparateImpact, "
                        "EqualImpact, DemographicParity, EqualOpportunity, FalsePositiveParity, EqualizedOdds "
                        "(Clopper-Pearson), GeDI, DistanceCovariance, Covariance (bootstrap)")
    fresh = fresh_copy(constraint)
    if not bounds_ready(fresh):
        set_up_on_other_rows([fresh], data)
    return fresh


def outputs_on(model_or_outputs: Any, data: Any) -> torch.Tensor:
    """Model outputs on ``data`` (float64, (n,)) from a module/callable or given outputs."""
    if isinstance(model_or_outputs, nn.Module) or (callable(model_or_outputs)
                                                   and not isinstance(model_or_outputs, (torch.Tensor, np.ndarray))):
        with eval_mode(model_or_outputs), torch.no_grad():
            out = (float64_forward(model_or_outputs, data.X) if isinstance(model_or_outputs, nn.Module)
                   else model_or_outputs(data.X))
    else:
        out = torch.as_tensor(np.asarray(model_or_outputs) if not isinstance(model_or_outputs, torch.Tensor)
                              else model_or_outputs)
    out = out.detach().reshape(-1).to(torch.float64).cpu()
    if out.shape[0] != len(data):
        raise ValueError(f"outputs: expected {len(data)} values (one per row of data), got {out.shape[0]}")
    return out


def worst_case_rows(D: Any, lower: Any, upper: Any) -> tuple[np.ndarray, np.ndarray]:
    """Smallest and largest value of every row of ``D @ P`` over ``lower <= P <= upper``.

    Linear rows reach their extremes at corners: the largest takes ``upper`` where the
    coefficient is positive and ``lower`` where it is negative.
    """
    D = np.asarray(D, dtype=np.float64)
    lo, hi = np.asarray(lower, dtype=np.float64), np.asarray(upper, dtype=np.float64)
    pos, neg = np.clip(D, 0.0, None), np.clip(D, None, 0.0)
    return pos @ lo + neg @ hi, pos @ hi + neg @ lo


def within_bounds(values_lo: np.ndarray, values_hi: np.ndarray, bound_lo: np.ndarray,
                  bound_hi: np.ndarray) -> np.ndarray:
    """Per row, whether the interval ``[values_lo, values_hi]`` lies within ``[bound_lo, bound_hi]`` (an infinite
    bound is no bound; ``1e-12`` of rounding allowed)."""
    ok_hi = np.where(np.isfinite(bound_hi), values_hi <= bound_hi + 1e-12, True)
    ok_lo = np.where(np.isfinite(bound_lo), values_lo >= bound_lo - 1e-12, True)
    return ok_hi & ok_lo


def rate_sides(constraint: GroupRateConstraint, out: torch.Tensor, data: Any) -> tuple[np.ndarray, np.ndarray]:
    """Positives ``k_g`` and rows ``n_g`` of every side on hard predictions."""
    sums, counts = constraint.partial_sums(out, data, exact=True)
    return np.rint(sums.double().numpy()), np.rint(counts.double().numpy())


def ratio_bound(p_num: float, p_den: float, v_num: float, v_den: float, z: float) -> float:
    """The largest ``d`` in [0, 1] with ``d p_den - p_num + z sqrt(d^2 v_den + v_num) <= 0``:
    the ratio ``p_num / p_den`` that the row ``d P_den - P_num <= 0`` certifies (``z > 0``: a
    lower confidence bound; ``z < 0``: an upper one). Bisection: the left side increases in ``d``."""
    if not (math.isfinite(v_num) and math.isfinite(v_den)):
        return 0.0 if z > 0 else 1.0
    g = lambda d: d * p_den - p_num + z * math.sqrt(d * d * v_den + v_num)  # noqa: E731
    if g(0.0) > 0:
        return 0.0
    if g(1.0) <= 0:
        return 1.0
    lo, hi = 0.0, 1.0
    for _ in range(60):
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if g(mid) <= 0 else (lo, mid)
    return lo


def capped_ratio(a: float, b: float) -> float:
    """``min(a / b, 1)``, a rate ratio read as a disparate impact (at most 1); 1 where ``b <= 0`` (a
    rate bounded by 0 leaves nothing to compare with)."""
    return 1.0 if b <= 0.0 else min(a / b, 1.0)


def ratio_upper(lf: float, uf: float, lr: float, ur: float) -> float:
    """Largest ``min(P_f / P_r, P_r / P_f)`` over ``P_f in [lf, uf]``, ``P_r in [lr, ur]``."""
    if uf >= lr and ur >= lf:  # the intervals overlap: equal rates are possible
        return 1.0
    return uf / lr if uf < lr else ur / lf


def row_table(c: Any, values: Sequence[float], lo: Sequence[float], hi: Sequence[float], b_lo: Sequence[float],
              b_hi: Sequence[float]) -> dict[str, list]:
    """A certificate's per-row table as plain lists: the row names (``c.row_names``, else ``name[i]``), the
    realised ``values``, their confidence interval ``[lo, hi]`` and the bounds ``[b_lo, b_hi]``."""
    names = list(c.row_names or [f"{c.name}[{i}]" for i in range(len(values))])
    return {"names": names, "values": [float(v) for v in values], "lower": [float(v) for v in lo],
            "upper": [float(v) for v in hi], "bound_lower": [float(v) for v in b_lo],
            "bound_upper": [float(v) for v in b_hi]}


def bootstrap_rows(c: Any, out: torch.Tensor, data: Any, n_bootstrap: int, seed: int) -> np.ndarray:
    """Exact rows on ``n_bootstrap`` seeded resamples of the rows, shape (B, m): the unstratified
    :func:`fairopt.measures.bootstrap.resample_chunks` (with replacement), or for a
    :class:`~fairopt.constraints.DistanceCovariance` half-samples without replacement
    (:func:`half_samples`)."""
    n = len(data)
    draws = []
    samples = (half_samples(n, n_bootstrap, seed) if isinstance(c, DistanceCovariance) else
               (rows for _, _, chunk in resample_chunks(np.zeros(n, dtype=np.int64), 1, n_bootstrap, seed)
                for rows in chunk))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # rank warnings of tiny resamples
        for rows in samples:
            index = torch.from_numpy(rows)
            sample = data.subset(index)
            draws.append(c.exact(out[index].to(data.X.dtype), sample).double().reshape(-1).numpy())
            release_caches([c])
    return np.stack(draws)


def half_samples(n: int, n_draws: int, seed: int) -> Iterator[np.ndarray]:
    """``n_draws`` seeded subsets of ``floor(n / 2)`` distinct rows (sorted positions): the draws of a
    U-statistic's interval.

    A resample with replacement repeats rows, and a repeated row lies at distance 0 from its copy, which
    biases the distance covariance U-statistics upwards (at 2,000 rows independent of a 10-level
    attribute, the bootstrap mean was 0.0007 above the statistic, 3.5 times its sampling deviation). On
    distinct rows the statistic is unbiased, and on half of them its spread around the full sample's
    value is that of the full sample's around the population's: ``Var(U_{n/2} | sample) ~
    sigma^2 (2/n - 1/n) = Var(U_n)`` for a non-degenerate U-statistic (half-sampling; wider by about
    ``sqrt(3)`` where the population value is 0, which no bound above 0 is then at risk from)."""
    rng = np.random.default_rng(seed)
    half = n // 2
    for _ in range(int(n_draws)):
        yield np.sort(rng.permutation(n)[:half])


def normal_quantile(confidence: float, sides: int) -> float:
    """``z = Phi^-1(1 - alpha / sides)``, ``alpha = 1 - confidence``: the one-sided quantile of a union bound over
    ``sides`` statements (at least one)."""
    return float(stats.norm.ppf(1.0 - (1.0 - confidence) / max(sides, 1)))


def compared_pairs(c: GroupRateConstraint) -> int:
    """Simultaneous statements a rate constraint needs: one per compared pair of sides.

    The rows of a pair exclude each other's violation (``d P_r - P_f > 0`` and
    ``d P_f - P_r > 0`` cannot both hold for ``d <= 1``; nor ``P_f - P_r > b`` and
    ``P_f - P_r < -b`` for ``b >= 0``), so a false pass needs the one violated row of some pair
    to pass: a union bound over the pairs, each row one-sided at ``1 - alpha / pairs``, keeps
    the level (not over the ``2 x pairs`` rows, which would only widen the bounds)."""
    return max(len(c.compared_sides[0]), 1)


def finite_sides(c: Any) -> int:
    """The finite bound sides of ``c`` (each finite lower or upper bound of a row is one statement of a
    bootstrap certificate's union bound)."""
    return int(torch.isfinite(c.lower).sum() + torch.isfinite(c.upper).sum())
