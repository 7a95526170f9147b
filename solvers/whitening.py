r"""Whitened inputs: the affine change of coordinates that makes a linear model's least-squares
curvature the identity.

For inputs ``X`` (n, p) with row weights ``w`` (all 1 without), weighted mean ``m`` and covariance
``C = sum_i w_i (x_i - m)(x_i - m)' / sum_i w_i``, take ``S = diag(s)`` with ``s`` the column standard
deviations (1 for a constant column) when the rank is decided on the correlations (``correlation=True``),
else ``S = I``, and the eigen-decomposition ``S^-1 C S^-1 = A diag(l) A'``. The whitened coordinates are

.. math:: z = (x - m) W, \qquad W = S^{-1} A_+ \operatorname{diag}(l_+^{-1/2}),

over the directions with ``l > RANK_RTOL * max(l)`` (the rank convention of the whole code base). On
the correlations the rank does not depend on the columns' units (on the covariance itself a column in
dollars pushes a column of shares below the cut), which the SQP regressor needs for inputs a user left
unstandardised; the fair linear models (:mod:`fairopt.linear`) whiten blocks of residuals on the
covariance, where a column of rounding noise must stay below the cut. The covariance of ``z`` is the
identity, so the Hessian of a least-squares fit of ``out = z v + b`` is ``2 I``: a diagonal metric is
exact there, where on ``x`` it ignores every correlation between inputs (on ~100 correlated columns the
steps' convergence slows by orders of magnitude). The model ``z v + b`` is the linear model
``x coef + intercept`` with

.. math:: \mathrm{coef} = W v, \qquad \mathrm{intercept} = b - m' W v \qquad (:meth:`Whitening.fold`),

and the ridge penalty ``||coef||^2`` is ``v' W' W v`` (:meth:`Whitening.ridge_form`): the same problem,
solved in better coordinates. Directions dropped for rank carry (almost) no variance of the training
inputs; the model does not move along them.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from solvers.validation import as_float_array, to_numpy

__all__ = ["CHUNK_ROWS", "RANK_RTOL", "Whitening"]

#: Eigenvalues of a Gram/covariance matrix below this fraction of the largest one are treated as zero
#: (rank deficiency); the same cut as singular values below ``sqrt(RANK_RTOL)`` of the largest, so least
#: squares, whitening and eigen-decompositions agree on the rank (the fair linear models'
#: :mod:`fairopt.linear` too).
RANK_RTOL = 1e-10

#: Rows per block of the float64 accumulations, so that whitening a large ``X`` never holds a float64
#: copy of it.
CHUNK_ROWS = 65536


def _blocks(n: int):
    for start in range(0, n, CHUNK_ROWS):
        yield slice(start, min(start + CHUNK_ROWS, n))


class Whitening:
    """Affine map ``Z -> (Z - mean) W`` to uncorrelated unit-variance coordinates (module docstring);
    ``correlation``: decide the rank on the correlations instead of the covariance.

    Attributes after :meth:`fit`: ``mean`` (p,), ``scale`` (the diagonal of ``S``, (p,)), ``matrix``
    (``W``, (p, k)), ``variances`` (the kept eigenvalues ``l_+``, (k,)); constant data give ``rank == 0``.
    """

    def __init__(self, correlation: bool = False) -> None:
        self.correlation = bool(correlation)

    def fit(self, Z: Any, weights: Any = None) -> "Whitening":
        """Mean, covariance and its eigen-decomposition of the rows of ``Z`` (n, p) (numpy or torch;
        accumulated in float64 in blocks of :data:`CHUNK_ROWS` rows), weighted by ``weights`` (n,)
        when given."""
        Z = to_numpy(Z)
        n, p = Z.shape
        w = None if weights is None else as_float_array(weights, "weights").reshape(-1)
        total = float(n) if w is None else float(w.sum())
        if not total > 0.0:
            raise ValueError("weights: their sum must be positive to whiten the inputs")
        mean = np.zeros(p)
        for rows in _blocks(n):
            block = Z[rows].astype(np.float64)
            mean += block.sum(axis=0) if w is None else w[rows] @ block
        mean /= total
        cov = np.zeros((p, p))
        for rows in _blocks(n):
            centred = Z[rows].astype(np.float64) - mean
            cov += centred.T @ (centred if w is None else centred * w[rows, None])
        cov /= total
        scale = np.sqrt(np.clip(np.diag(cov), 0.0, None)) if self.correlation else np.ones(p)
        scale[scale == 0.0] = 1.0  # a constant column: a zero row and column of the correlations, dropped
        eigvals, eigvecs = np.linalg.eigh(cov / np.outer(scale, scale))
        largest = float(eigvals.max()) if eigvals.size else 0.0
        keep = eigvals > RANK_RTOL * largest if largest > 0.0 else np.zeros(eigvals.shape, dtype=bool)
        self.mean = mean
        self.scale = scale
        self.variances = eigvals[keep]
        self.matrix = eigvecs[:, keep] / np.sqrt(self.variances) / scale[:, None]
        return self

    @property
    def rank(self) -> int:
        """``k``, the number of whitened coordinates."""
        return int(self.matrix.shape[1])

    def transform(self, Z: Any, dtype: Any = np.float64) -> np.ndarray:
        """``(Z - mean) W`` (n, k) as ``dtype``, computed in float64 block by block."""
        Z = to_numpy(Z)
        out = np.empty((Z.shape[0], self.rank), dtype=dtype)
        for rows in _blocks(Z.shape[0]):
            out[rows] = (Z[rows].astype(np.float64) - self.mean) @ self.matrix
        return out

    def ridge_form(self) -> np.ndarray:
        """``W' W`` (k, k): ``||W v||^2 = v' W' W v``, the ridge penalty of the folded coefficients in
        whitened coordinates (``diag(1 / l_+)`` when ``S = I``)."""
        return self.matrix.T @ self.matrix

    def fold(self, v: Any, b: float = 0.0) -> tuple[np.ndarray, float]:
        """The coefficients and intercept on the original inputs of ``out = z v + b``:
        ``coef = W v`` (p,) and ``intercept = b - mean' W v``."""
        coef = self.matrix @ as_float_array(v, "v").reshape(-1)
        return coef, float(b) - float(self.mean @ coef)
