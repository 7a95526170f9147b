"""The least-violation LP (HiGHS through scipy), bounded by construction.

In the range basis of ``M`` the least total violation of ``lo <= w <= hi`` is an LP with
slacks and a box on the basis coordinates that grows while it binds; used to confirm an
infeasible QP and by :func:`solvers.qp.least_violation_bounds`."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

import numpy as np
from scipy.optimize import linprog

from solvers.qp.space import Space

__all__ = ["LP_TIME_LIMIT", "LPFailure", "LeastViolationWarning", "RangeBasis", "box_still_binding_message",
           "confirm_infeasible", "least_violation_point", "range_basis", "row_violation"]

logger = logging.getLogger(__name__)


def row_violation(w: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """``max(w - hi, 0) + max(lo - w, 0)`` per row."""
    return np.maximum(w - hi, 0.0) + np.maximum(lo - w, 0.0)


class LeastViolationWarning(RuntimeWarning):
    """The least-violation LP did not give a least-violation step; a safe but possibly larger
    relaxation was used instead (see :func:`least_violation_bounds`)."""


class LPFailure(RuntimeError):
    """The least-violation LP stopped without an optimum (HiGHS status in the message)."""


#: Initial box radius of the least-violation LP as a multiple of the size of ``z`` one row
#: needs to reach its bound (see :func:`_initial_box_radius`), the factor by which the box
#: grows while it binds, and how many times it may grow.
_BOX_SCALE = 1e3
_BOX_GROWTH = 1e3
_MAX_BOX_ENLARGEMENTS = 3
#: A box side counts as binding when its reduced cost exceeds this fraction of the column's
#: l1 norm (the largest reduced cost a unit move of that coordinate can have).
_BOX_BINDING_RTOL = 1e-8
#: Eigen-directions of the row-normalised ``M`` with an eigenvalue at most this fraction of
#: the largest are left out of the reachable values (rounding noise of dependent rows sits
#: near 1e-16; genuine directions of ill-conditioned SQP steps were seen near 1e-11).
_RANGE_RTOL = 1e-12
#: Rows of ``J`` whose ``H^{-1}``-norm is below this fraction of the largest row's are zero rows of the range
#: basis (their value ``w_i`` is taken as 0, the LP leaves their violation to the slacks): a Jacobian row at
#: ``1e-19`` of the others (a surrogate saturated on every row of its groups) put coefficients of ``1e-26``
#: into the LP and asked for ``|z|`` of ``1e24``, and HiGHS did not finish.
_NEGLIGIBLE_ROW = 1e-10
#: Wall-clock limit of one HiGHS solve, in seconds. These LPs have at most a few hundred columns and solve in
#: milliseconds; at the limit the solve is an :class:`LPFailure`, which each caller handles (a numerical
#: failure of the QP; the safe relaxation, with a warning) instead of waiting.
LP_TIME_LIMIT = 10.0
_LP_OPTIONS = {"primal_feasibility_tolerance": 1e-10, "dual_feasibility_tolerance": 1e-10,
               "time_limit": LP_TIME_LIMIT}


@dataclass(frozen=True)
class RangeBasis:
    """An explicit basis of the reachable constraint values ``w = J v``.

    ``w = basis @ z`` (``z`` in ``R^r``) spans ``range(M) = range(J)`` and ``M @ (y_map @ z)
    = basis @ z``. Built from the eigenvectors of the row-normalised ``M`` (unit diagonal,
    so rows of very different norms are treated alike); directions whose eigenvalue is at
    most ``_RANGE_RTOL`` times the largest are dropped: they are rounding noise of linearly
    dependent rows (free multipliers along them made an LP in ``y`` numerically unbounded).
    Zero rows of ``J`` have zero rows in both matrices (their value is always 0), and so do rows whose
    ``H^{-1}``-norm is below ``_NEGLIGIBLE_ROW`` times the largest (their value is 0 to that precision).
    """

    basis: np.ndarray  # (m, r)
    y_map: np.ndarray  # (m, r)


def range_basis(M: np.ndarray) -> RangeBasis:
    """The basis of ``range(M)`` described in :class:`RangeBasis` (one m x m eigh)."""
    m = M.shape[0]
    diag = np.diag(M)
    nz = np.flatnonzero((diag > 0) & (diag >= _NEGLIGIBLE_ROW ** 2 * diag.max(initial=0.0)))
    if nz.size == 0:
        return RangeBasis(np.zeros((m, 0)), np.zeros((m, 0)))
    norms = np.sqrt(diag[nz])
    corr = M[np.ix_(nz, nz)] / np.outer(norms, norms)
    lam, vecs = np.linalg.eigh(0.5 * (corr + corr.T))
    keep = lam > _RANGE_RTOL * lam.max()
    lam, vecs = lam[keep], vecs[:, keep]
    basis = np.zeros((m, lam.size))
    y_map = np.zeros((m, lam.size))
    basis[nz] = norms[:, None] * vecs
    y_map[nz] = vecs / lam[None, :] / norms[:, None]
    return RangeBasis(basis, y_map)


def _initial_box_radius(basis: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> float:
    """``_BOX_SCALE * (1 + max_i |finite bound_i| / max_j |basis_ij|)`` over non-zero rows.

    Moving the largest coordinate of row ``i`` alone, ``|z_j| = |bound_i| / max_j |basis_ij|``
    reaches the bound: the ratio is the size of ``z`` a row needs; the box is
    ``_BOX_SCALE`` times larger and grows while it binds (:func:`_solve_boxed_lp`).
    """
    scale = np.abs(basis).max(axis=1, initial=0.0)
    bounds = np.maximum(np.where(np.isfinite(lo), np.abs(lo), 0.0), np.where(np.isfinite(hi), np.abs(hi), 0.0))
    nz = scale > 0
    ratio = float((bounds[nz] / scale[nz]).max(initial=0.0))
    return _BOX_SCALE * (1.0 + ratio)


def _lp_tables(
    basis: np.ndarray, lo: np.ndarray, hi: np.ndarray, violation_cap: float | None
) -> tuple[np.ndarray, np.ndarray, np.ndarray, int]:
    """Cost, inequality matrix and right-hand side of the least-violation LPs.

    Variables ``(z, s_up, s_lo[, a])``: ``basis_i z - s_up_i <= hi_i`` and
    ``-basis_i z - s_lo_i <= -lo_i`` for the finite sides, ``s >= 0``. Without a cap the
    cost is ``sum s`` (the total violation); with one, ``sum a`` with ``a >= +-basis z``
    (``sum_i |w_i|``) subject to ``sum s <= violation_cap``. Returns the number of slacks too.
    """
    m, r = basis.shape
    up, dn = np.flatnonzero(np.isfinite(hi)), np.flatnonzero(np.isfinite(lo))
    ns = up.size + dn.size
    eye = np.eye(ns)
    rows = [np.hstack([basis[up], -eye[: up.size]]), np.hstack([-basis[dn], -eye[up.size :]])]
    rhs = [hi[up], -lo[dn]]
    cost = np.concatenate([np.zeros(r), np.ones(ns)])
    if violation_cap is not None:
        rows = [np.hstack([block, np.zeros((block.shape[0], m))]) for block in rows]
        rows += [np.hstack([basis, np.zeros((m, ns)), -np.eye(m)]), np.hstack([-basis, np.zeros((m, ns)), -np.eye(m)])]
        rows.append(np.concatenate([np.zeros(r), np.ones(ns), np.zeros(m)])[None, :])
        rhs += [np.zeros(m), np.zeros(m), np.array([violation_cap])]
        cost = np.concatenate([np.zeros(r + ns), np.ones(m)])
    return cost, np.vstack(rows), np.concatenate(rhs), ns


def _box_binding(res: Any, columns: np.ndarray, radius: float) -> bool:
    """Whether a side of the box ``|z| <= radius`` is active with a non-zero reduced cost
    (then a larger box could lower the objective; otherwise the box changes nothing)."""
    r = columns.shape[1]
    z = res.x[:r]
    on_box = np.abs(z) >= radius * (1.0 - 1e-9)
    reduced = np.abs(res.lower.marginals[:r]) + np.abs(res.upper.marginals[:r])
    return bool(np.any(on_box & (reduced > _BOX_BINDING_RTOL * np.abs(columns).sum(axis=0))))


def _solve_boxed_lp(
    basis: np.ndarray, lo: np.ndarray, hi: np.ndarray, violation_cap: float | None = None
) -> tuple[np.ndarray, bool]:
    """``z`` of a least-violation LP (see :func:`_lp_tables`) inside the box ``|z| <= R``.

    Bounded by construction: ``z`` is boxed and every other variable is ``>= 0`` with a
    cost of 0 or 1, so the LP (always feasible: ``z = 0`` with large slacks) has a finite
    optimum. If a box side binds (non-zero reduced cost) the box is enlarged by
    ``_BOX_GROWTH`` up to ``_MAX_BOX_ENLARGEMENTS`` times; an optimum with no binding side
    is an optimum of the LP without the box. Returns ``(z, still_binding)``; :class:`LPFailure` when
    HiGHS stops without an optimum.
    """
    r = basis.shape[1]
    cost, A, b, ns = _lp_tables(basis, lo, hi, violation_cap)
    if ns == 0 or r == 0:  # nothing to violate, or only w = 0 reachable
        return np.zeros(r), False
    z_columns = A[:, :r]
    radius = _initial_box_radius(basis, lo, hi)
    for attempt in range(_MAX_BOX_ENLARGEMENTS + 1):
        bounds = [(-radius, radius)] * r + [(0, None)] * (cost.size - r)
        res = linprog(cost, A_ub=A, b_ub=b, bounds=bounds, method="highs", options=_LP_OPTIONS)
        if res.status != 0:
            raise LPFailure(f"HiGHS status {res.status} ({res.message})")
        binding = _box_binding(res, z_columns, radius)
        if not binding:
            return res.x[:r], False
        if attempt < _MAX_BOX_ENLARGEMENTS:
            logger.debug("least-violation LP: box |z| <= %g binds; enlarging it", radius)
            radius *= _BOX_GROWTH
    return res.x[:r], True


def least_violation_point(
    basis: RangeBasis, lo: np.ndarray, hi: np.ndarray, violation_cap: float | None = None
) -> tuple[np.ndarray, np.ndarray, bool]:
    """A least-violation point ``w = basis z`` and multipliers ``y`` with ``M y = w``.

    ``violation_cap is None``: minimise the total violation ``V(w)``; otherwise minimise
    ``sum_i |w_i|`` among points with ``V(w) <= violation_cap`` (least-violation points
    are not unique, e.g. duplicated rows with disjoint bounds). Returns
    ``(w, y, box_binding)``; raises :class:`LPFailure` when HiGHS fails.
    """
    z, binding = _solve_boxed_lp(basis.basis, lo, hi, violation_cap)
    return basis.basis @ z, basis.y_map @ z, binding


def confirm_infeasible(space: Space) -> bool:
    """True when the least total violation exceeds the summed row tolerances (False, with a
    log message, when the LP fails: the caller then reports a numerical failure)."""
    try:
        w, _, _ = least_violation_point(range_basis(space.M), space.lo, space.hi)
    except (LPFailure, np.linalg.LinAlgError) as exc:
        logger.debug("least-violation LP failed while confirming infeasibility: %s", exc)
        return False
    return float(row_violation(w, space.lo, space.hi).sum()) > float(space.base_tol.sum())


def box_still_binding_message(where: str) -> str:
    """The warning text when the LP's box still binds after its enlargements."""
    return (f"{where}: the box of the least-violation LP still bound after {_MAX_BOX_ENLARGEMENTS} enlargements; "
            "the relaxation is the least within that box and may be larger than the least one.")
