"""FaUCI fairness metrics: weighted (categorical A) and generalised (continuous A) DP, DI, EO.

Magnini, Ciatto, Calegari, Omicini, "Enforcing Fairness via Constraint Injection with
FaUCI" [FU] sec 3.1. With ``h`` the prediction (a probability in [0, 1]
or a hard 0/1 label) and ``w_a`` group weights summing to 1:

- ``WDP = sum_a w_a |E[h | A=a] - E[h]|``                              [FU] eq. 5
- ``WDI = sum_a w_a eta(E[h | A=a] / E[h | A!=a])``, ``eta(x) = min(x, 1/x)``  eq. 8
- ``WEO = sum_a w_a sum_{y in {0,1}} |E[h | A=a, Y=y] - E[h | Y=y]|``     eq. 10

The generalised versions GDP, GDI, GEO ([FU] eq. 7, 9, 11) replace the sum over values of
a continuous ``A`` by the integral ``int_l^u ... w_a da``. As in the paper's implementation
([FU] sec 3.3: "histogram-based, several non-overlapping intervals of the same width") the
integral is a sum over equal-width bins of ``A`` on ``[min A, max A]``, each bin acting as
one group with weight ``w_b = int_{bin b} w_a da``. With density weights ``w_a = P[A=a]``
(eq. 6) the bin weight is the bin's share of rows.

Weights (``weights=``):

- ``"uniform"``: ``w_a = 1/N`` over the ``N`` groups (bins) present in the data. This is
  what the paper's experiments use for the W* metrics ([FU] sec 4.1: "the same weight to
  each value of the protected attribute ... since the attributes we want to protect are
  unbalanced"), hence the default of :func:`wdp`, :func:`wdi`, :func:`weo`.
- ``"proportional"`` (alias ``"density"``): ``w_a = n_a / n``, the group frequencies used
  in the paper's Algorithms 1-3 and, as the density of A, in its G* experiments, hence the
  default of :func:`gdp`, :func:`gdi`, :func:`geo`.
- user weights: a mapping ``{label: weight}`` or a sequence aligned with the sorted group
  labels (W*) or with the bins (G*), non-negative and summing to 1 ([FU] sec 3.1: "The
  sum of the weights must be equal to 1"). A group or bin with positive weight but no
  row in the data (e.g. a mini-batch) has no conditional mean: it is left out, the other
  weights are rescaled to sum to 1, and a :class:`~fairopt.exceptions.FairnessWarning` is
  issued.

Direction: WDP/GDP and WEO/GEO are unfairness penalties (0 is fair; WDP/GDP <= 1, WEO/GEO
<= 2 as the sum over the two classes), while WDI/GDI are fairness scores in [0, 1] (1 is
fair): the paper trains with the penalty ``1 - WDI`` ([FU] sec 2.1).

Soft and hard predictions are both accepted (values in [0, 1]). With a torch tensor
``pred`` the value is a 0-dim tensor computed with torch ops, differentiable in ``pred``
(for use as a penalty, [FU] eq. 12); with any other input it is a Python float.
"""

from __future__ import annotations

import logging
import warnings
from typing import Any, Mapping, Sequence

import numpy as np
import torch

from fairopt._validation import as_1d_tensor, check_binary, check_same_length
from fairopt.exceptions import FairnessWarning
from fairopt.measures.group import bin_equal_width, encode_groups, group_sums, python_scalar, require_groups

__all__ = ["wdp", "wdi", "weo", "gdp", "gdi", "geo"]

logger = logging.getLogger(__name__)

WeightSpec = str | Mapping[Any, float] | Sequence[float] | np.ndarray
BinSpec = int | Sequence[float] | np.ndarray

#: Tolerance on ``sum(weights) == 1`` for user weights.
WEIGHT_SUM_TOL = 1e-6


# --------------------------------------------------------------------------------------
# inputs
# --------------------------------------------------------------------------------------


def _prediction(pred: Any) -> tuple[torch.Tensor, bool]:
    """``pred`` as a floating tensor with values in [0, 1]; and whether it was a tensor.

    Tensors keep their dtype (float) and autograd graph; other inputs become float64.
    """
    is_tensor = isinstance(pred, torch.Tensor)
    t = as_1d_tensor(pred, "pred")
    if not (is_tensor and t.is_floating_point()):
        t = t.to(torch.float64)
    if t.numel() == 0:
        raise ValueError("pred: is empty (0 rows)")
    d = t.detach()
    bad = (d < 0) | (d > 1)
    if bool(bad.any()):
        raise ValueError(f"pred: expected predictions in [0, 1] (probabilities or 0/1 labels), got {d[bad][0].item()!r}")
    return t, is_tensor


def _result(value: torch.Tensor, is_tensor: bool) -> torch.Tensor | float:
    """A 0-dim tensor for tensor input, a Python float otherwise."""
    return value if is_tensor else float(value)


def _targets(y_true: Any, pred: torch.Tensor) -> torch.Tensor:
    """``y_true`` as 0/1 values on ``pred``'s device, same length as ``pred``."""
    y = check_binary(as_1d_tensor(y_true, "y_true").detach(), "y_true")
    check_same_length(pred=pred, y_true=y)
    return y.to(device=pred.device)


def _user_weights(weights: Mapping[Any, float] | Sequence[float] | np.ndarray, slots: np.ndarray) -> np.ndarray:
    """User weights aligned with ``slots`` (group labels or bin indices), validated.

    A mapping may hold labels absent from ``slots`` (groups missing from this sample): their
    weight counts as the weight of an empty group.

    Returns
    -------
    numpy.ndarray of shape (len(slots) + 1,)
        The weight of each slot, then the total weight of mapping labels not in ``slots``.
    """
    try:
        if isinstance(weights, Mapping):
            lookup = {python_scalar(k): float(v) for k, v in weights.items()}
            raw = np.array(list(lookup.values()), dtype=float)
        else:
            lookup = None
            raw = np.asarray(weights, dtype=float).reshape(-1)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"weights: expected numeric weights, got {weights!r} ({exc})") from None
    if not np.isfinite(raw).all() or np.any(raw < 0):
        raise ValueError(f"weights: expected finite non-negative weights, got {raw.tolist()}")
    if abs(raw.sum() - 1.0) > WEIGHT_SUM_TOL:
        raise ValueError(f"weights: must sum to 1 ([FU] sec 3.1), got sum {raw.sum():.6g}")
    if lookup is None:
        if raw.size != len(slots):
            raise ValueError(f"weights: expected {len(slots)} weights (one per group/bin), got {raw.size}")
        return np.append(raw, 0.0)
    slot_keys = [python_scalar(s) for s in slots]
    missing = [k for k in slot_keys if k not in lookup]
    if missing:
        raise ValueError(f"weights: no weight given for group {missing[0]!r}")
    absent = sum(v for k, v in lookup.items() if k not in set(slot_keys))
    return np.array([lookup[k] for k in slot_keys] + [absent])


def _resolve_weights(weights: WeightSpec, slots: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """Weights of the non-empty slots, summing to 1 (see the module docstring).

    Parameters
    ----------
    weights : str, mapping or sequence
        ``"uniform"``, ``"proportional"``/``"density"`` or user weights.
    slots : numpy.ndarray of shape (S,)
        Group labels or bin indices.
    counts : numpy.ndarray of shape (S,)
        Rows per slot (zero for an empty bin).
    """
    present = counts > 0
    if isinstance(weights, str):
        if weights == "uniform":
            return np.full(int(present.sum()), 1.0 / present.sum())
        if weights in ("proportional", "density"):
            return counts[present] / counts.sum()
        raise ValueError(f"weights: expected 'uniform', 'proportional', 'density', a mapping or a sequence, got {weights!r}")
    values = _user_weights(weights, slots)
    kept = values[:-1][present]
    lost = float(values[-1] + values[:-1][~present].sum())
    if kept.sum() <= 0:
        raise ValueError("weights: every group/bin with positive weight is empty in this data")
    if lost > 0:
        warnings.warn(
            f"weights: groups/bins with total weight {lost:.4g} have no rows in this data and are "
            "left out; the remaining weights are rescaled to sum to 1",
            FairnessWarning,
            stacklevel=4,
        )
    return kept / kept.sum()


def _categorical_groups(sensitive: Any, pred: torch.Tensor, weights: WeightSpec) -> tuple[torch.Tensor, torch.Tensor]:
    """Group codes of a categorical ``sensitive`` and the group weights, as tensors."""
    codes, labels = encode_groups(sensitive)
    check_same_length(pred=pred, sensitive=codes)
    require_groups(labels)
    w = _resolve_weights(weights, labels, np.bincount(codes, minlength=labels.size))
    return _as_tensors(codes, w, pred)


def _binned_groups(sensitive: Any, pred: torch.Tensor, bins: BinSpec, weights: WeightSpec) -> tuple[torch.Tensor, torch.Tensor]:
    """Codes of the non-empty equal-width bins of a continuous ``sensitive``, and bin weights."""
    bin_codes, edges = bin_equal_width(sensitive, bins)
    check_same_length(pred=pred, sensitive=bin_codes)
    n_bins = edges.size - 1
    counts = np.bincount(bin_codes, minlength=n_bins)
    present = np.flatnonzero(counts > 0)
    require_groups(present, "sensitive")
    w = _resolve_weights(weights, np.arange(n_bins), counts)
    compact = np.searchsorted(present, bin_codes)
    logger.debug("FaUCI: %d of %d bins are non-empty", present.size, n_bins)
    return _as_tensors(compact, w, pred)


def _as_tensors(codes: np.ndarray, w: np.ndarray, pred: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    return (
        torch.as_tensor(codes, dtype=torch.long, device=pred.device),
        torch.as_tensor(w, dtype=pred.dtype, device=pred.device),
    )


# --------------------------------------------------------------------------------------
# the three metrics on integer groups (torch, differentiable in pred)
# --------------------------------------------------------------------------------------


def _eta_ratio(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """``eta(a/b) = min(a/b, b/a) = min(a, b) / max(a, b)``; 1 where ``a = b = 0``, 0 where one is 0."""
    hi = torch.maximum(a, b)
    positive = hi > 0
    one = torch.ones_like(hi)
    return torch.where(positive, torch.minimum(a, b) / torch.where(positive, hi, one), one)


def _dp_value(pred: torch.Tensor, codes: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """``sum_a w_a |E[h | A=a] - E[h]|`` ([FU] eq. 5/7)."""
    sums, counts = group_sums(pred, codes, w.numel())
    return (w * (sums / counts - pred.mean()).abs()).sum()


def _di_value(pred: torch.Tensor, codes: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """``sum_a w_a eta(E[h | A=a] / E[h | A!=a])`` ([FU] eq. 8/9)."""
    sums, counts = group_sums(pred, codes, w.numel())
    inside = sums / counts
    outside = (pred.sum() - sums) / (pred.numel() - counts)
    return (w * _eta_ratio(inside, outside)).sum()


def _eo_value(pred: torch.Tensor, codes: torch.Tensor, y: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """``sum_a w_a sum_y |E[h | A=a, Y=y] - E[h | Y=y]|`` ([FU] eq. 10/11).

    A pair ``(a, y)`` without rows has no conditional mean and contributes nothing.
    """
    total = pred.new_zeros(())
    for value in (0, 1):
        rows = (y == value).to(pred.dtype)
        if not bool(rows.any()):
            continue
        class_sums, _ = group_sums(pred * rows, codes, w.numel())
        class_counts, _ = group_sums(rows, codes, w.numel())
        has_rows = class_counts > 0
        group_mean = class_sums / class_counts.clamp(min=1)
        class_mean = (pred * rows).sum() / rows.sum()
        gap = torch.where(has_rows, (group_mean - class_mean).abs(), torch.zeros_like(group_mean))
        total = total + (w * gap).sum()
    return total


# --------------------------------------------------------------------------------------
# public metrics
# --------------------------------------------------------------------------------------


def wdp(pred: Any, sensitive: Any, weights: WeightSpec = "uniform") -> torch.Tensor | float:
    """Weighted demographic parity ``WDP = sum_a w_a |E[h | A=a] - E[h]|`` ([FU] eq. 5).

    Parameters
    ----------
    pred : array-like or torch.Tensor of shape (n,)
        Predictions in [0, 1] (probabilities or hard labels).
    sensitive : array-like of shape (n,)
        Binary or categorical attribute ``A`` (any sortable labels); >= 2 groups.
    weights : {"uniform", "proportional", "density"}, mapping or sequence
        Group weights ``w_a`` (see the module docstring); default ``"uniform"`` as in the
        paper's experiments.

    Returns
    -------
    float or 0-dim torch.Tensor
        In [0, 1]; 0 is parity. For binary ``A``: ``|P_0 - P_1| / 2`` with uniform weights,
        ``2 pi_0 pi_1 |P_0 - P_1|`` with proportional weights.
    """
    p, is_tensor = _prediction(pred)
    codes, w = _categorical_groups(sensitive, p, weights)
    return _result(_dp_value(p, codes, w), is_tensor)


def wdi(pred: Any, sensitive: Any, weights: WeightSpec = "uniform") -> torch.Tensor | float:
    """Weighted disparate impact ``WDI = sum_a w_a eta(E[h | A=a] / E[h | A!=a])`` ([FU] eq. 8).

    ``eta(x) = min(x, 1/x)``, computed as ``min(m_a, m_!a) / max(m_a, m_!a)``: 1 when both
    means are 0 (nothing to compare), 0 when exactly one is 0. For binary ``A`` (any
    weights) WDI equals the disparate impact ``min(P_0/P_1, P_1/P_0)``.

    Parameters
    ----------
    pred : array-like or torch.Tensor of shape (n,)
        Predictions in [0, 1].
    sensitive : array-like of shape (n,)
        Binary or categorical attribute; >= 2 groups.
    weights : {"uniform", "proportional", "density"}, mapping or sequence
        Group weights (default ``"uniform"``).

    Returns
    -------
    float or 0-dim torch.Tensor
        A fairness score in [0, 1] (1 is fair); the FaUCI penalty is ``1 - WDI``.
    """
    p, is_tensor = _prediction(pred)
    codes, w = _categorical_groups(sensitive, p, weights)
    return _result(_di_value(p, codes, w), is_tensor)


def weo(pred: Any, sensitive: Any, y_true: Any, weights: WeightSpec = "uniform") -> torch.Tensor | float:
    """Weighted equalised odds ``WEO = sum_a w_a sum_y |E[h | A=a, Y=y] - E[h | Y=y]|`` ([FU] eq. 10).

    Parameters
    ----------
    pred : array-like or torch.Tensor of shape (n,)
        Predictions in [0, 1].
    sensitive : array-like of shape (n,)
        Binary or categorical attribute; >= 2 groups.
    y_true : array-like of shape (n,)
        True labels in {0, 1}. A pair ``(a, y)`` with no rows contributes nothing.
    weights : {"uniform", "proportional", "density"}, mapping or sequence
        Group weights (default ``"uniform"``).

    Returns
    -------
    float or 0-dim torch.Tensor
        In [0, 2] (two classes); 0 is fair.
    """
    p, is_tensor = _prediction(pred)
    y = _targets(y_true, p)
    codes, w = _categorical_groups(sensitive, p, weights)
    return _result(_eo_value(p, codes, y, w), is_tensor)


def gdp(pred: Any, sensitive: Any, bins: BinSpec = 10, weights: WeightSpec = "density") -> torch.Tensor | float:
    """Generalised demographic parity ``GDP = int_l^u |E[h | A=a] - E[h]| w_a da`` ([FU] eq. 7).

    Histogram version: ``sum_b w_b |E[h | A in bin b] - E[h]|`` over the non-empty
    equal-width bins of ``A`` (see the module docstring).

    Parameters
    ----------
    pred : array-like or torch.Tensor of shape (n,)
        Predictions in [0, 1].
    sensitive : array-like of shape (n,)
        Continuous attribute ``A``.
    bins : int or sequence of float
        Number of equal-width bins on ``[min A, max A]`` (default 10), or explicit edges
        (values outside go to the end bins).
    weights : {"density", "proportional", "uniform"} or sequence
        Bin weights; default ``"density"`` (``w_a = P[A=a]``, [FU] eq. 6 and sec 4.1). A
        sequence has one weight per bin.

    Returns
    -------
    float or 0-dim torch.Tensor
        In [0, 1]; 0 is fair.
    """
    p, is_tensor = _prediction(pred)
    codes, w = _binned_groups(sensitive, p, bins, weights)
    return _result(_dp_value(p, codes, w), is_tensor)


def gdi(pred: Any, sensitive: Any, bins: BinSpec = 10, weights: WeightSpec = "density") -> torch.Tensor | float:
    """Generalised disparate impact ``GDI = int_l^u eta(E[h | A=a] / E[h | A!=a]) w_a da`` ([FU] eq. 9).

    Histogram version over the non-empty equal-width bins of ``A``; parameters as in
    :func:`gdp`. A fairness score in [0, 1] (1 is fair).
    """
    p, is_tensor = _prediction(pred)
    codes, w = _binned_groups(sensitive, p, bins, weights)
    return _result(_di_value(p, codes, w), is_tensor)


def geo(pred: Any, sensitive: Any, y_true: Any, bins: BinSpec = 10, weights: WeightSpec = "density") -> torch.Tensor | float:
    """Generalised equalised odds ``GEO = int_l^u (eo(a, 0) + eo(a, 1)) w_a da`` ([FU] eq. 11).

    ``eo(a, y) = |E[h | A=a, Y=y] - E[h | Y=y]|``; histogram version over the non-empty
    equal-width bins of ``A``. ``y_true`` as in :func:`weo`, other parameters as in
    :func:`gdp`. In [0, 2]; 0 is fair.
    """
    p, is_tensor = _prediction(pred)
    y = _targets(y_true, p)
    codes, w = _binned_groups(sensitive, p, bins, weights)
    return _result(_eo_value(p, codes, y, w), is_tensor)
