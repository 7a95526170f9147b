"""GeDI fairness constraint, coarse and fine [GeDI sec 4].

With ``alpha(yhat)`` the least-squares coefficients of the predictions on the centred
kernel of the protected attribute (:func:`fairopt.measures.gedi.gedi`):

* coarse: ``GeDI(x, yhat; F) = ||alpha||_1 <= q``                     [GeDI eq 18-20]
* fine:   ``|alpha_1| <= q`` and ``alpha_j = 0`` for ``j = 2..k``      [GeDI eq 22, 24]

``q`` is ``bound``, or ``bound * GeDI(x, y_train; V^1)`` with ``relative=True`` (the
paper's protocol uses ``bound = 0.2`` for every kernel order) [GeDI sec 5].
"""

from __future__ import annotations

import logging
import math
import warnings
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from fairopt._validation import (as_1d_tensor, check_flag, check_same_length, nonnegative_float, positive_float,
                                 require_unweighted)
from fairopt.constraints.base import BaseConstraint
from fairopt.exceptions import FairnessWarning
from fairopt.measures.gedi import KernelBasis, check_degree, check_kernel, standardization
from fairopt.surrogates import get_surrogate
from solvers.problem import LinearEncoding

__all__ = ["GeDI"]

logger = logging.getLogger(__name__)

_TASKS = ("binary", "regression", "poisson")
_SMOOTH_L1_BIAS = 0.1  # default eps: the smooth L1 overestimates ||alpha||_1 by <= 10% of q
_EPS_FLOOR = 1e-12  # default eps when q = 0 (keeps sqrt differentiable at alpha = 0)
_CACHE_SIZE = 4


@dataclass
class _CacheEntry:
    batch: Any  # strong reference: its id cannot be reused while it is cached
    sensitive: torch.Tensor
    n: int
    basis: KernelBasis


class GeDI(BaseConstraint):
    """Generalized Disparate Impact constraint on one numeric protected attribute.

    Rows (``lower <= c(out) <= upper``), with ``alpha`` the GeDI coefficients of the
    batch predictions ``yhat`` [GeDI eq 16]:

    * coarse (``fine=False``): ONE row ``sum_j sqrt(alpha_j^2 + eps) <= q``, a smooth
      upper bound of ``||alpha||_1``: ``|a| <= sqrt(a^2 + eps) <= |a| + sqrt(eps)``, so
      the surrogate overestimates by at most ``k sqrt(eps)`` (satisfying it implies the
      exact constraint). Default ``eps = (0.01 q / k)^2``: a bias of at most 1% of ``q``.
      :meth:`exact` gives the exact ``||alpha||_1``.
    * fine (``fine=True``): ``k`` rows ``-q <= alpha_1 <= q`` and
      ``-tol q / (k - 1) <= alpha_j <= tol q / (k - 1)`` for ``j = 2..k``. Exact zeros are
      unattainable for hard predictions and noisy for mini-batch estimates, so
      higher-order coefficients get a tolerance; splitting ``tol q`` over the ``k - 1``
      rows guarantees ``GeDI(V^k) <= (1 + tol) q`` for any feasible point (default
      ``tol = 0.1``: the fine constraint implies the coarse one up to 10%).

    Predictions: ``yhat = sigmoid(out)`` (probabilities) for ``task="binary"``,
    ``yhat = out`` for regression, ``yhat = exp(out)`` (the rate) for Poisson. The exact
    rows use hard labels ``out > 0`` for the binary task.

    Mini-batches: the kernel of a batch is built from the batch's own sensitive values
    with the TRAINING standardisation (mean/sd fixed in :meth:`setup`), centred on the
    batch, with the batch's own least-squares operator. It is cached per batch object
    (identity and length; the cache holds a reference so an id is never reused), so
    full-batch training computes it once.

    Parameters
    ----------
    sensitive : str
        Name of a continuous or binary sensitive feature (``batch.sensitive[name]``).
    degree : int
        Kernel order ``k`` (1 for a binary attribute: higher powers are collinear).
    bound : float
        ``q >= 0``: absolute, or relative to ``GeDI(x, y_train; V^1)`` if ``relative``.
    fine : bool
        Fine-grained constraint on the coefficients instead of the L1 norm.
    relative : bool
        Interpret ``bound`` as a fraction of the training data's ``GeDI(V^1)`` (polynomial
        order 1 whatever ``degree``/``kernel``, as in the paper's experiments).
    kernel : {"poly", "fourier"}
        Kernel basis, see :mod:`fairopt.measures.gedi`.
    eps : float or None
        Smoothing of the coarse L1 row (> 0); None for ``(0.1 q / k)^2`` (``1e-12`` if q=0).
    surrogate : str, Surrogate or None
        Binary tasks only: the prediction the smooth rows use. None: the probability
        ``sigmoid(out)``. A step surrogate (e.g. ``"smoothed_step"``, see
        :func:`fairopt.surrogates.get_surrogate`) makes the smooth rows approximate the
        hard-label GeDI that :meth:`exact` reports: with probabilities, SQP met the smooth
        rows on Adult/age while the hard-label GeDI stayed 2-5 times the bound.
    tol : float
        Fine constraint: total allowance for the higher-order coefficients as a fraction
        of ``q`` (>= 0).
    standardize : bool or None
        Standardise the attribute with the training mean and population sd. None: yes for
        a continuous attribute, no for a binary one (kept as its 0/1 code, so that
        ``GeDI(V^1)`` is exactly the regression DIDI and ``bound`` reads as a DIDI
        [GeDI App. A.4]).
    """

    def __init__(
        self,
        sensitive: str,
        degree: int = 1,
        *,
        bound: float,
        fine: bool = False,
        relative: bool = False,
        kernel: str = "poly",
        eps: float | None = None,
        tol: float = 0.1,
        standardize: bool | None = None,
        surrogate: Any = None,
    ) -> None:
        if not isinstance(sensitive, str) or not sensitive:
            raise ValueError(f"sensitive: expected the name of a sensitive feature, got {sensitive!r}")
        self.sensitive = sensitive
        self.degree = check_degree(degree)
        self.bound = nonnegative_float(bound, "bound")
        self.fine = check_flag(fine, "fine")
        self.relative = check_flag(relative, "relative")
        self.kernel = check_kernel(kernel)
        self.eps = None if eps is None else positive_float(eps, "eps")
        self.tol = nonnegative_float(tol, "tol")
        self.standardize = check_flag(standardize, "standardize", allow_none=True)
        self.surrogate = None if surrogate is None else get_surrogate(surrogate)
        self._params = dict(
            sensitive=sensitive, degree=self.degree, bound=self.bound, fine=self.fine,
            relative=self.relative, kernel=self.kernel, eps=self.eps, tol=self.tol,
            standardize=self.standardize, surrogate=surrogate,
        )
        self.name = f"gedi_{'fine' if self.fine else 'coarse'}[{sensitive}]"
        self.absolute_bound: float | None = None
        self.smoothing: float | None = None
        self._task: str | None = None
        self._shift = self._scale = None
        self._cache: OrderedDict[int, _CacheEntry] = OrderedDict()
        if not self.relative:
            self._resolve_bounds(self.bound)

    # ------------------------------------------------------------------ setup
    def setup(self, data: Any) -> None:
        """Check the attribute, fix the training standardisation and the absolute bound.

        Raises ``ValueError`` for an unknown or categorical attribute, a binary attribute
        with ``degree > 1``, a constant attribute, an unsupported task, a training kernel
        that is rank deficient, or data with per-row weights (``data.weights``: GeDI has no
        weighted version yet; ignoring the weights would constrain another measure than the
        one the weighted training optimises).
        """
        require_unweighted(data, "GeDI")
        x = self._sensitive_values(data)
        kind = getattr(data, "sensitive_kinds", {}).get(self.sensitive, "continuous")
        if kind == "categorical":
            raise ValueError(
                f"sensitive: {self.sensitive!r} is categorical; GeDI needs a numeric (continuous "
                "or binary) attribute - constrain each category's indicator instead"
            )
        if kind == "binary" and self.degree > 1:
            raise ValueError(
                f"degree: {self.degree} for the binary attribute {self.sensitive!r}; only degree=1 "
                "is identifiable (higher powers of a 0/1 variable are collinear)"
            )
        task = getattr(data, "task", "regression")
        if task not in _TASKS:
            raise ValueError(f"task: GeDI supports {_TASKS}, got {task!r}")
        self._task = task
        standardize = self.standardize if self.standardize is not None else kind != "binary"
        self._shift, self._scale = standardization(x, standardize, f"sensitive[{self.sensitive!r}]")
        self._cache.clear()
        basis = self._basis(data)
        if not basis.full_rank:
            raise ValueError(
                f"degree: the {self.kernel} kernel of order {self.degree} on {self.sensitive!r} has "
                f"rank {basis.rank} < {self.degree} on the training data; use a lower degree"
            )
        q = self.bound
        if self.relative:
            reference = KernelBasis.build(x, 1, "poly", self._shift, self._scale)
            y_train = as_1d_tensor(data.y, "data.y")
            check_same_length(**{"data.y": y_train, f"sensitive[{self.sensitive!r}]": x})
            q = self.bound * float(reference.coefficients(y_train).abs().sum())
        self._resolve_bounds(q)
        logger.debug("%s: absolute bound %.6g (eps %.3g, task %s)", self.name, q, self.smoothing, task)

    def _resolve_bounds(self, q: float) -> None:
        """Rows' bounds, tolerance and smoothing for the absolute bound ``q``."""
        k = self.degree
        self.absolute_bound = q
        ratio = _SMOOTH_L1_BIAS * q / k
        if self.eps is None and not math.isfinite(ratio * ratio):  # would overflow (q above ~1e154)
            raise ValueError(f"bound: {q!r} is too large for the default smoothing (0.1 q / degree)^2; a bound "
                             "this large constrains nothing, drop the constraint or give eps")
        self.smoothing = self.eps if self.eps is not None else max(ratio * ratio, _EPS_FLOOR)
        if not self.fine:
            self._set_bounds([-math.inf], [q], [f"{self.name}.l1"])
            return
        slack = self.tol * q / (k - 1) if k > 1 else 0.0
        upper = [q] + [slack] * (k - 1)
        self._set_bounds([-u for u in upper], upper, [f"{self.name}.alpha_{j}" for j in range(1, k + 1)])

    # ------------------------------------------------------------------ batches
    def _sensitive_values(self, batch: Any) -> torch.Tensor:
        sensitive = getattr(batch, "sensitive", None)
        if not isinstance(sensitive, dict) or self.sensitive not in sensitive:
            known = sorted(sensitive) if isinstance(sensitive, dict) else []
            raise ValueError(f"sensitive: unknown sensitive feature {self.sensitive!r}; available: {known}")
        return sensitive[self.sensitive]

    def _basis(self, batch: Any) -> KernelBasis:
        """The batch kernel (training standardisation, batch centring), cached per batch."""
        if self._shift is None:
            raise RuntimeError(f"{self.name}: call setup(training data) before evaluating the constraint")
        x = self._sensitive_values(batch)
        entry = self._cache.get(id(batch))
        if entry is not None and entry.batch is batch and entry.sensitive is x and entry.n == len(batch):
            self._cache.move_to_end(id(batch))
            return entry.basis
        basis = KernelBasis.build(x, self.degree, self.kernel, self._shift, self._scale)
        if not basis.full_rank:
            warnings.warn(
                f"{self.name}: the kernel of a batch of {len(batch)} rows has rank {basis.rank} < "
                f"{self.degree} (too few distinct values of {self.sensitive!r}); using the "
                "minimum-norm coefficients",
                FairnessWarning,
                stacklevel=3,
            )
        self._cache[id(batch)] = _CacheEntry(batch=batch, sensitive=x, n=len(batch), basis=basis)
        while len(self._cache) > _CACHE_SIZE:
            self._cache.popitem(last=False)
        return basis

    def _predictions(self, out: torch.Tensor, batch: Any, hard: bool) -> torch.Tensor:
        out = out.reshape(-1)
        if out.shape[0] != len(batch):
            raise ValueError(f"out: expected {len(batch)} values (one per batch row), got {out.shape[0]}")
        if self._task == "binary":
            if hard:
                return (out > 0).to(out.dtype)
            return torch.sigmoid(out) if self.surrogate is None else self.surrogate(out)
        if self._task == "poisson":
            return torch.exp(out)
        return out

    def coefficients(self, out: torch.Tensor, batch: Any, hard: bool = False) -> torch.Tensor:
        """``alpha`` (k,) of the batch predictions (float64; differentiable unless ``hard``)."""
        return self._basis(batch).coefficients(self._predictions(out, batch, hard))

    # ------------------------------------------------------------------ rows
    def __call__(self, out: torch.Tensor, batch: Any) -> torch.Tensor:
        """Smooth rows: ``[sum_j sqrt(alpha_j^2 + eps)]`` (coarse) or ``alpha`` (fine)."""
        alpha = self.coefficients(out, batch)
        rows = alpha if self.fine else torch.sqrt(alpha**2 + self.smoothing).sum().reshape(1)
        return rows.to(out.dtype)

    def exact(self, out: torch.Tensor, batch: Any) -> torch.Tensor:
        """Exact rows on hard predictions: ``[||alpha||_1]`` (coarse) or ``alpha`` (fine)."""
        with torch.no_grad():
            alpha = self.coefficients(out, batch, hard=True)
            rows = alpha if self.fine else alpha.abs().sum().reshape(1)
        return rows.to(out.dtype)

    # ------------------------------------------------------------------ projection
    def target_encoding(self, batch: Any) -> LinearEncoding:
        """The constraint as linear rows on a target vector ``z`` (n,) [GeDI eq 19-20, 54].

        All rows are divided by ``n`` (covariance scale). ``Ft`` is the batch kernel, centred,
        ``G = Ft'Ft / n``; since the columns of ``Ft`` have zero mean,
        ``Ft'(z - mean z) = Ft' z``, so centring ``z`` needs no extra rows.

        Coarse, auxiliary variables ``a = [alpha (k, free), t (k, >= 0)]``::

            G alpha - Ft' z / n = 0              (k rows: the normal equations)
            t_j - alpha_j >= 0,  t_j + alpha_j >= 0
            sum_j t_j <= q                        (exact ||alpha||_1 <= q)

        Fine, covariance form without auxiliary variables (``F_1`` the first column,
        ``v = var(F_1) = G_11``, ``c_j = cov(F_j, F_1) = G_j1``)::

            -q v <= cov(F_1, z) <= q v
            c_j cov(F_1, z) - v cov(F_j, z) = 0   for j = 2..k

        Equivalence with ``alpha = (alpha_1, 0, ..., 0)``, ``|alpha_1| <= q``: the normal
        equations ``G alpha = Ft'z / n`` have a unique solution when ``Ft`` has full rank.
        If ``alpha = a e_1`` they read ``c_j a = cov(F_j, z)`` for all ``j``; row 1 gives
        ``a = cov(F_1, z) / v`` and substituting it in rows ``j >= 2`` gives the equalities
        above. Conversely, if the equalities hold, ``a e_1`` with that ``a`` solves the normal
        equations, hence is THE solution. This holds for any ``k`` and any correlation
        between the kernel columns (correlated powers included) [GeDI App. B.1]. The
        projection enforces the higher-order coefficients exactly (``tol`` is not used):
        a solution is feasible for the rows of this constraint for every ``tol >= 0``.
        """
        basis = self._basis(batch)
        ft = basis.centred.numpy()
        gram = basis.gram.numpy()
        n, k = ft.shape
        q = float(self.absolute_bound)
        meta = {"constraint": self.name, "form": "fine" if self.fine else "coarse", "degree": k, "bound": q}
        if self.fine:
            v, c = gram[0, 0], gram[:, 0]
            rows = np.vstack([ft[:, 0], c[1:, None] * ft[None, :, 0] - v * ft[:, 1:].T]) / n
            lb = np.concatenate([[-q * v], np.zeros(k - 1)])
            ub = np.concatenate([[q * v], np.zeros(k - 1)])
            return LinearEncoding(name=self.name, A_z=rows, lb=lb, ub=ub, meta=meta)
        eye, zeros = np.eye(k), np.zeros((k, k))
        a_z = np.vstack([-ft.T / n, np.zeros((2 * k + 1, n))])
        a_a = np.vstack([
            np.hstack([gram, zeros]),
            np.hstack([-eye, eye]),
            np.hstack([eye, eye]),
            np.hstack([np.zeros(k), np.ones(k)])[None, :],
        ])
        lb = np.concatenate([np.zeros(3 * k), [-np.inf]])
        ub = np.concatenate([np.zeros(k), np.full(2 * k, np.inf), [q]])
        aux_lb = np.concatenate([np.full(k, -np.inf), np.zeros(k)])
        meta["aux"] = [f"alpha_{j}" for j in range(1, k + 1)] + [f"t_{j}" for j in range(1, k + 1)]
        return LinearEncoding(
            name=self.name, A_z=a_z, lb=lb, ub=ub, A_a=a_a, aux_lb=aux_lb,
            aux_ub=np.full(2 * k, np.inf), meta=meta,
        )
