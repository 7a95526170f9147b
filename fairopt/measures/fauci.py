"""FaUCI fairness metrics: weighted (categorical A) and generalised (continuous A) DP, DI, EO ([FU] sec 3.1).

With ``h`` the prediction (probability or 0/1 label) and group weights ``w_a`` summing to 1:

- ``WDP = sum_a w_a |E[h | A=a] - E[h]|``                              [FU] eq. 5
- ``WDI = sum_a w_a eta(E[h | A=a] / E[h | A!=a])``, ``eta(x) = min(x, 1/x)``  eq. 8
- ``WEO = sum_a w_a sum_{y in {0,1}} |E[h | A=a, Y=y] - E[h | Y=y]|``     eq. 10

GDP, GDI, GEO ([FU] eq. 7, 9, 11) integrate over a continuous ``A``; as in the paper's implementation
([FU] sec 3.3) the integral is a sum over equal-width bins of ``A``, bin weight ``w_b = int_b w_a da``.

``weights``: ``"uniform"`` (``1/N`` over the groups present; the W* default, as the paper's experiments,
[FU] sec 4.1), ``"proportional"``/``"density"`` (``n_a / n``; the G* default, [FU] eq. 6), or user
weights (mapping by label, or sequence over sorted labels / bins; non-negative, summing to 1). A group
with positive weight but no row is left out with a :class:`~fairopt.exceptions.FairnessWarning` and
the rest rescaled.

WDP/GDP (<= 1) and WEO/GEO (<= 2) are penalties (0 is fair); WDI/GDI are scores in [0, 1] (1 is fair,
the paper trains on ``1 - WDI``). A torch ``pred`` gives a 0-dim tensor differentiable in ``pred``
([FU] eq. 12), any other input a float.
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
    """``pred`` as a floating tensor in [0, 1] (tensors keep dtype and graph) and whether it was a tensor."""
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
    """User weights aligned with ``slots``, then the total weight of mapping labels not in ``slots``."""
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
    """Weights of the non-empty slots (group labels or bins), summing to 1 (module doc)."""
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
    """``sum_a w_a sum_y |E[h | A=a, Y=y] - E[h | Y=y]|`` ([FU] eq. 10/11); an empty pair ``(a, y)`` adds nothing."""
    total = pred.new_zeros(())
    for value in (0, 1):
        rows = (y == value).to(pred.dtype)
        if not bool(rows.any()):
            continue
        class_sums, class_counts = group_sums(pred, codes, w.numel(), rows)  # the rows with y = value
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

    For binary ``A``: ``|P_0 - P_1| / 2`` with uniform weights, ``2 pi_0 pi_1 |P_0 - P_1|`` proportional.

    Parameters
    ----------
    pred : array-like or torch.Tensor of shape (n,)
        Predictions in [0, 1].
    sensitive : array-like of shape (n,)
        Binary or categorical attribute; >= 2 groups.
    weights : {"uniform", "proportional", "density"}, mapping or sequence
        Group weights (module doc).
    """
    p, is_tensor = _prediction(pred)
    codes, w = _categorical_groups(sensitive, p, weights)
    return _result(_dp_value(p, codes, w), is_tensor)


def wdi(pred: Any, sensitive: Any, weights: WeightSpec = "uniform") -> torch.Tensor | float:
    """Weighted disparate impact ``WDI = sum_a w_a eta(E[h | A=a] / E[h | A!=a])`` ([FU] eq. 8).

    ``eta`` is ``min(m, m') / max(m, m')``: 1 when both means are 0, 0 when one is. For binary ``A`` WDI is
    the disparate impact ``min(P_0/P_1, P_1/P_0)``. Parameters as in :func:`wdp`.
    """
    p, is_tensor = _prediction(pred)
    codes, w = _categorical_groups(sensitive, p, weights)
    return _result(_di_value(p, codes, w), is_tensor)


def weo(pred: Any, sensitive: Any, y_true: Any, weights: WeightSpec = "uniform") -> torch.Tensor | float:
    """Weighted equalised odds ``WEO = sum_a w_a sum_y |E[h | A=a, Y=y] - E[h | Y=y]|`` ([FU] eq. 10).

    ``y_true`` holds 0/1 labels; other parameters as in :func:`wdp`. In [0, 2].
    """
    p, is_tensor = _prediction(pred)
    y = _targets(y_true, p)
    codes, w = _categorical_groups(sensitive, p, weights)
    return _result(_eo_value(p, codes, y, w), is_tensor)


def gdp(pred: Any, sensitive: Any, bins: BinSpec = 10, weights: WeightSpec = "density") -> torch.Tensor | float:
    """Generalised demographic parity ``GDP = int_l^u |E[h | A=a] - E[h]| w_a da`` ([FU] eq. 7), over bins.

    Parameters
    ----------
    pred : array-like or torch.Tensor of shape (n,)
        Predictions in [0, 1].
    sensitive : array-like of shape (n,)
        Continuous attribute ``A``.
    bins : int or sequence of float
        Equal-width bins on ``[min A, max A]``, or explicit edges (outside values go to the end bins).
    weights : {"density", "proportional", "uniform"} or sequence
        Bin weights (one per bin for a sequence).
    """
    p, is_tensor = _prediction(pred)
    codes, w = _binned_groups(sensitive, p, bins, weights)
    return _result(_dp_value(p, codes, w), is_tensor)


def gdi(pred: Any, sensitive: Any, bins: BinSpec = 10, weights: WeightSpec = "density") -> torch.Tensor | float:
    """Generalised disparate impact ``int_l^u eta(E[h | A=a] / E[h | A!=a]) w_a da`` ([FU] eq. 9), as :func:`gdp`."""
    p, is_tensor = _prediction(pred)
    codes, w = _binned_groups(sensitive, p, bins, weights)
    return _result(_di_value(p, codes, w), is_tensor)


def geo(pred: Any, sensitive: Any, y_true: Any, bins: BinSpec = 10, weights: WeightSpec = "density") -> torch.Tensor | float:
    """Generalised equalised odds ``int_l^u (eo(a, 0) + eo(a, 1)) w_a da`` ([FU] eq. 11), as :func:`gdp`/:func:`weo`."""
    p, is_tensor = _prediction(pred)
    y = _targets(y_true, p)
    codes, w = _binned_groups(sensitive, p, bins, weights)
    return _result(_eo_value(p, codes, y, w), is_tensor)
