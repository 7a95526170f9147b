"""Choice of the computation path and construction of the sensitive-side kernels.

See :mod:`fairopt.measures.dcov` for the paths and the rule of ``method="auto"``.
"""

from __future__ import annotations

import logging
import math
from typing import Any

import numpy as np

from fairopt.measures._dcov_blocked import (
    DEFAULT_MAX_BLOCK_ELEMENTS,
    BlockedKernel,
    CentredRows,
    DistanceRows,
    ProductRows,
    block_rows,
)
from fairopt._validation import check_choice, check_seed, positive_int
from fairopt.measures._dcov_kernels import (
    DistanceKernel,
    GroupedKernel,
    ProjectionKernel,
    UnivariateKernel,
    factorize_rows,
    grouped_u_centre,
    pairwise_distances,
)

__all__ = [
    "METHODS",
    "JOINT_METHODS",
    "GROUPED_MAX_GROUPS",
    "GROUPED_HARD_MAX",
    "univariate_grouped_limit",
    "auto_method",
    "rows_per_block",
    "distance_kernel",
    "joint_kernel",
]

logger = logging.getLogger(__name__)

METHODS = ("auto", "grouped", "univariate", "blocked", "projection")
JOINT_METHODS = ("auto", "grouped", "blocked")
GROUPED_MAX_GROUPS = 2048
"""Most distinct rows of a multivariate ``s`` for which ``"auto"`` takes the grouped path."""
GROUPED_HARD_MAX = 16384
"""Most distinct rows the grouped path accepts (its K x K float64 matrices take 2 GB)."""


def univariate_grouped_limit(n: int) -> int:
    """Most distinct values of a univariate ``s`` for which ``"auto"`` takes the grouped path."""
    return max(16, 8 * math.ceil(math.log2(max(n, 2))))


def auto_method(n: int, q: int, n_groups: int) -> str:
    """The path of ``method="auto"`` for n samples of a q-column ``s`` with ``n_groups`` distinct rows."""
    if q == 1:
        return "grouped" if n_groups <= univariate_grouped_limit(n) else "univariate"
    return "grouped" if n_groups <= min(GROUPED_MAX_GROUPS, n // 2) else "blocked"


def rows_per_block(n: int, block_size: Any) -> int:
    """Rows per block of the blocked path: ``block_size`` or blocks of at most 2^22 entries."""
    if block_size is None:
        return block_rows(n, DEFAULT_MAX_BLOCK_ELEMENTS)
    return min(positive_int(block_size, "block_size"), n)


def _check_group_count(n_groups: int) -> None:
    if n_groups > GROUPED_HARD_MAX:
        raise ValueError(
            f"method: 'grouped' needs at most {GROUPED_HARD_MAX} distinct sensitive rows, got {n_groups}; "
            "use 'blocked' or 'auto'"
        )


def distance_kernel(
    s: np.ndarray, method: str, n_projections: int = 50, seed: Any = 0, block_size: Any = None
) -> tuple[DistanceKernel, str]:
    """The kernel B~ of ``s`` (n, q) and the path taken (``"auto"`` resolved)."""
    check_choice(method, METHODS, "method")
    n, q = s.shape
    if method == "projection":
        return ProjectionKernel(s, positive_int(n_projections, "n_projections"), check_seed(seed)), method
    if method == "blocked":
        return BlockedKernel.for_sample(s, rows_per_block(n, block_size)), method
    if method == "univariate":
        if q != 1:
            raise ValueError(f"method: 'univariate' needs a univariate s, got {q} columns")
        return UnivariateKernel(s[:, 0]), method
    codes, representatives = factorize_rows(s)
    if method == "auto":
        method = auto_method(n, q, representatives.shape[0])
        logger.debug("dcov: n=%d, q=%d, %d distinct rows -> %s path", n, q, representatives.shape[0], method)
        if method != "grouped":
            return distance_kernel(s, method, n_projections, seed, block_size)
    _check_group_count(representatives.shape[0])
    return GroupedKernel.from_rows(codes, representatives), method


def joint_kernel(
    features: list[np.ndarray], c: float, method: str, block_size: Any = None
) -> tuple[DistanceKernel, float]:
    """Kernel ``W = -P~`` of JdCov~^2 and ``sum_{k != l} P(k, l)``.

    ``P(k, l) = prod_i (c - A~_i(k, l))`` over the sensitive features (off the diagonal),
    ``A~_i`` their U-centred distance matrices; see :func:`fairopt.measures.dcov.jdcov`.
    Grouped when the concatenated features have few distinct rows, else blocked.
    """
    check_choice(method, JOINT_METHODS, "method")
    joint = np.hstack(features)
    if method != "blocked":
        codes, representatives = factorize_rows(joint)
        if method == "grouped" or representatives.shape[0] <= GROUPED_MAX_GROUPS:
            _check_group_count(representatives.shape[0])
            logger.debug("jdcov: %d joint cells -> grouped path", representatives.shape[0])
            return _grouped_joint_kernel(features, codes, representatives, c)
    rows = rows_per_block(joint.shape[0], block_size)
    factors = [CentredRows(DistanceRows(feature), rows) for feature in features]
    centred_product = CentredRows(ProductRows(factors, c), rows)
    return BlockedKernel(centred_product, scale=-1.0), centred_product.total


def _grouped_joint_kernel(
    features: list[np.ndarray], codes: np.ndarray, representatives: np.ndarray, c: float
) -> tuple[DistanceKernel, float]:
    counts = np.bincount(codes, minlength=representatives.shape[0]).astype(np.float64)
    product = np.ones((representatives.shape[0],) * 2)
    start = 0
    for feature in features:
        cells = representatives[:, start:start + feature.shape[1]]
        start += feature.shape[1]
        centred, _ = grouped_u_centre(pairwise_distances(cells, cells), counts)
        product *= c - centred
    centred_product, total = grouped_u_centre(product, counts)
    return GroupedKernel(codes, -centred_product), total
