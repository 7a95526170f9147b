"""The solver-neutral program of a projection: validation of the references, weights and
encodings, and their assembly (objective terms, exact rescalings) into one :class:`Program`
that every backend solves."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np
import scipy.sparse as sp

from solvers.problem import LinearEncoding
from solvers.validation import as_float_array

__all__ = ["Program", "assemble", "check_encodings", "check_references", "check_weights", "mean_losses"]


@dataclass(frozen=True)
class Program:
    """``min 1/2 x' diag(hessian) x + cost' x + offset`` s.t. ``row_lower <= A x <= row_upper``,
    ``col_lower <= x <= col_upper``, ``x[:n]`` integer if ``binary`` (``x = [z, a_1, ..., a_E]``).

    The objective is in SUM form (``n`` times the mean losses) so that its coefficients are
    O(1) whatever ``n``; ``hessian`` is None for a linear objective. The program is
    scaled (see :func:`assemble`): the targets and auxiliary variables of the original
    problem are ``scale * x``.
    """

    n: int
    scale: float
    cost: np.ndarray
    hessian: np.ndarray | None
    offset: float
    A: sp.csr_matrix
    row_lower: np.ndarray
    row_upper: np.ndarray
    col_lower: np.ndarray
    col_upper: np.ndarray
    binary: bool
    names: tuple[str, ...]
    aux_slices: tuple[slice, ...]

    @property
    def n_vars(self) -> int:
        return int(self.cost.size)

    @property
    def n_rows(self) -> int:
        return int(self.A.shape[0])


# --------------------------------------------------------------------------------------
# Validation and assembly
# --------------------------------------------------------------------------------------
def check_references(reference: Any) -> np.ndarray:
    """``reference`` as a float64 array ``(R, n)`` (one row per reference)."""
    if isinstance(reference, (list, tuple)) and not all(np.ndim(r) == 0 for r in reference):
        rows = [_as_vector(r, f"reference[{i}]") for i, r in enumerate(reference)]
        if not rows:
            raise ValueError("reference: expected at least one reference vector, got an empty sequence")
        lengths = {r.size for r in rows}
        if len(lengths) > 1:
            raise ValueError(f"reference: the vectors have different lengths {sorted(lengths)}")
        return np.vstack(rows)
    array = as_float_array(reference, "reference")
    if array.ndim == 1:
        return _as_vector(array, "reference")[None, :]
    if array.ndim == 2:
        for i, row in enumerate(array):
            _as_vector(row, f"reference[{i}]")
        return array
    raise ValueError(f"reference: expected shape (n,) or (R, n), got {array.shape}")


def _as_vector(value: Any, name: str) -> np.ndarray:
    array = as_float_array(value, name)
    if array.ndim != 1 or array.size == 0:
        raise ValueError(f"{name}: expected a non-empty vector of shape (n,), got shape {array.shape}")
    if not np.isfinite(array).all():
        first = int(np.flatnonzero(~np.isfinite(array))[0])
        raise ValueError(f"{name}: contains NaN or infinite values (first at index {first})")
    return array


def check_weights(weights: Any, n_references: int) -> np.ndarray:
    """``weights`` as a float64 vector of length R, each finite and >= 0, sum > 0."""
    if weights is None:
        w = np.ones(n_references)
    else:
        w = np.atleast_1d(as_float_array(weights, "weights")).reshape(-1)
    if w.size != n_references:
        raise ValueError(f"weights: expected {n_references} weight(s) (one per reference), got {w.size}")
    if not np.isfinite(w).all() or (w < 0).any():
        raise ValueError(f"weights: expected finite non-negative numbers, got {w.tolist()}")
    if w.sum() <= 0:
        raise ValueError(f"weights: at least one weight must be positive, got {w.tolist()}")
    return w


def check_encodings(encodings: Any, n: int) -> tuple[LinearEncoding, ...]:
    """Each encoding has ``n`` columns in ``A_z``, finite coefficients and consistent bounds."""
    if isinstance(encodings, LinearEncoding):
        encodings = (encodings,)
    encodings = tuple(encodings)
    for e, enc in enumerate(encodings):
        if not isinstance(enc, LinearEncoding):
            raise ValueError(f"encodings[{e}]: expected a LinearEncoding, got {type(enc).__name__}")
        label = f"encodings[{e}] ({enc.name!r})"
        if enc.A_z.shape[1] != n:
            raise ValueError(f"{label}: A_z has {enc.A_z.shape[1]} columns for {n} targets")
        if not (np.isfinite(enc.A_z).all() and np.isfinite(enc.A_a).all()):
            raise ValueError(f"{label}: A_z/A_a contain NaN or infinite coefficients")
        for kind, lower, upper in (("row", enc.lb, enc.ub), ("aux", enc.aux_lb, enc.aux_ub)):
            if lower.shape != upper.shape or (kind == "aux" and lower.size != enc.n_aux):
                raise ValueError(f"{label}: {kind} bounds have shapes {lower.shape} and {upper.shape}")
            if np.isnan(lower).any() or np.isnan(upper).any() or (lower > upper).any() \
                    or (lower == np.inf).any() or (upper == -np.inf).any():
                i = int(np.flatnonzero(~(lower <= upper) | (lower == np.inf) | (upper == -np.inf))[0])
                raise ValueError(f"{label}: {kind} {i} has bounds [{lower[i]}, {upper[i]}] with no feasible value")
    return encodings


def _objective_terms(refs: np.ndarray, weights: np.ndarray, loss: str, binary: bool) -> tuple:
    """``(cost_z, hessian_z, offset)`` of ``sum_r w_r n L(z, r_r)`` (package doc)."""
    W = float(weights.sum())
    if binary:
        # linear in binary z: w (r or r^2) + w (1 - 2 r) z, summed over references
        cost = weights @ (1.0 - 2.0 * refs)
        constant = refs if loss == "hamming" else refs**2
        return cost, None, float(weights @ constant.sum(axis=1))
    cost = -2.0 * (weights @ refs)
    return cost, np.full(refs.shape[1], 2.0 * W), float(weights @ (refs**2).sum(axis=1))


def _reference_scale(refs: np.ndarray, weights: np.ndarray, binary: bool) -> float:
    """Scale ``s`` of a continuous problem: the RMS of the weighted mean reference (1 if binary or 0)."""
    if binary:
        return 1.0
    rms = float(np.sqrt(np.mean(((weights @ refs) / weights.sum()) ** 2)))
    return rms if rms > 0 else 1.0


def _solved_equalities(enc: LinearEncoding) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """``(A_z, A_a, lb, ub)`` of ``enc`` with its equality rows solved for auxiliary variables.

    When the ``r`` equality rows ``E_z z + E_a a = b`` have ``rank(E_a) = r``, ``r`` independent columns
    ``J`` (pivoted QR) give the same set as ``M E_z z + M E_a a = M b``, ``M = E_a[:, J]^{-1}``. For
    the GeDI coarse encoding this turns ``G alpha = Ft'z / n`` into ``alpha = G^{-1} Ft'z / n``,
    removing the ill-conditioned Gram matrix on which OSQP does not converge.
    """
    from scipy.linalg import qr

    A_z, A_a, lb, ub = enc.A_z, enc.A_a, enc.lb, enc.ub
    eq = lb == ub
    r = int(eq.sum())
    if r == 0 or enc.n_aux < r:
        return A_z, A_a, lb, ub
    _, _, pivots = qr(A_a[eq], pivoting=True, mode="economic")
    block = A_a[eq][:, pivots[:r]]
    if np.linalg.matrix_rank(block) < r or np.linalg.cond(block) > 1e12:
        return A_z, A_a, lb, ub
    A_z, A_a, lb, ub = A_z.copy(), A_a.copy(), lb.copy(), ub.copy()
    A_z[eq] = np.linalg.solve(block, A_z[eq])
    A_a[eq] = np.linalg.solve(block, A_a[eq])
    lb[eq] = ub[eq] = np.linalg.solve(block, lb[eq])
    return A_z, A_a, lb, ub


def assemble(refs: np.ndarray, weights: np.ndarray, encodings: Sequence[LinearEncoding], loss: str,
             binary: bool) -> Program:
    """Stack the encodings into one program over ``x = [z, a_1, ..., a_E] / s``.

    Exact rescalings keep the solvers' absolute tolerances meaningful in any units: continuous
    problems are solved for ``x / s``, ``s`` the RMS of the weighted mean reference
    (``sum_r w_r ||s u - r_r||^2 = s^2 sum_r w_r ||u - r_r / s||^2``); equality rows are solved for
    auxiliary variables (:func:`_solved_equalities`); each row is divided by its largest coefficient.
    """
    n = refs.shape[1]
    scale = _reference_scale(refs, weights, binary)
    cost_z, hess_z, offset = _objective_terms(refs / scale, weights, loss, binary)
    n_aux = [enc.n_aux for enc in encodings]
    starts = n + np.concatenate([[0], np.cumsum(n_aux)]).astype(int)
    total = int(starts[-1])
    blocks, lower, upper = [], [np.zeros(0)], [np.zeros(0)]
    for e, enc in enumerate(encodings):
        A_z, A_a, lb, ub = _solved_equalities(enc)
        rows = A_z.shape[0]
        parts = [sp.csr_matrix(A_z), sp.csr_matrix((rows, starts[e] - n)), sp.csr_matrix(A_a),
                 sp.csr_matrix((rows, total - starts[e + 1]))]
        blocks.append(sp.hstack(parts, format="csr"))
        lower.append(lb / scale)
        upper.append(ub / scale)
    A = sp.vstack(blocks, format="csr") if blocks else sp.csr_matrix((0, total))
    row_lower, row_upper = np.concatenate(lower), np.concatenate(upper)
    row_max = np.asarray(abs(A).max(axis=1).todense()).ravel() if A.shape[0] else np.zeros(0)
    row_factor = np.where(row_max > 0, 1.0 / np.where(row_max > 0, row_max, 1.0), 1.0)
    A = sp.diags(row_factor) @ A
    A.eliminate_zeros()
    z_lower, z_upper = (np.zeros(n), np.ones(n)) if binary else (np.full(n, -np.inf), np.full(n, np.inf))
    hessian = None if hess_z is None else np.concatenate([hess_z, np.zeros(total - n)])
    return Program(
        n=n,
        scale=scale,
        cost=np.concatenate([cost_z, np.zeros(total - n)]),
        hessian=hessian,
        offset=offset,
        A=sp.csr_matrix(A),
        row_lower=row_lower * row_factor,
        row_upper=row_upper * row_factor,
        col_lower=np.concatenate([z_lower] + [enc.aux_lb / scale for enc in encodings]),
        col_upper=np.concatenate([z_upper] + [enc.aux_ub / scale for enc in encodings]),
        binary=binary,
        names=tuple(enc.name for enc in encodings),
        aux_slices=tuple(slice(int(starts[e]), int(starts[e + 1])) for e in range(len(encodings))),
    )


def mean_losses(z: np.ndarray, refs: np.ndarray, loss: str) -> np.ndarray:
    """``L(z, r_r)`` for every reference (mean squared or mean absolute difference)."""
    diff = z[None, :] - refs
    return np.mean(diff**2 if loss == "squared" else np.abs(diff), axis=1)
