"""GeDI fairness constraint, coarse and fine [GeDI sec 4].

With ``alpha(yhat)`` the least-squares coefficients of the predictions on the centred kernel of the
protected attribute (:func:`fairopt.measures.gedi.gedi`):

* coarse: ``GeDI(x, yhat; F) = ||alpha||_1 <= q``                     [GeDI eq 18-20]
* fine:   ``|alpha_1| <= q`` and ``alpha_j = 0`` for ``j = 2..k``      [GeDI eq 22, 24]

``q`` is ``bound``, or ``bound * GeDI(x, y_train; V^1)`` with ``relative=True`` [GeDI sec 5].
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

from fairopt._validation import (check_choice, check_flag, check_same_length, finite_float,
                                 measure_bound, nonnegative_float, positive_float, require_unweighted)
from fairopt.constraints.base import BaseConstraint, observed_target
from fairopt.exceptions import FairnessWarning
from fairopt.measures.gedi import KernelBasis, check_degree, check_kernel, standardization
from fairopt.surrogates import Surrogate, get_surrogate
from solvers.problem import LinearEncoding

__all__ = ["GeDI", "TARGETS"]

logger = logging.getLogger(__name__)

_TASKS = ("binary", "regression", "poisson")
#: What a binary task's GeDI measures (``target``): hard labels or probabilities.
TARGETS = ("labels", "probabilities")
#: What the exact rows measure, per task (a binary task: per target; None is "labels").
_MEASURED = {"regression": "predictions", "poisson": "rates"}
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
    """Generalized Disparate Impact constraint on one numeric protected attribute [GeDI eq 16].

    * coarse: one row ``sum_j sqrt(alpha_j^2 + eps) <= q``. Since ``|a| <= sqrt(a^2 + eps) <= |a| +
      sqrt(eps)`` the smooth row overestimates ``||alpha||_1`` by at most ``k sqrt(eps)``, so meeting it
      meets the exact constraint; :meth:`exact` gives ``||alpha||_1``.
    * fine: ``-q <= alpha_1 <= q`` and ``|alpha_j| <= tol q / (k - 1)`` for ``j = 2..k``. Exact zeros are
      unattainable for hard predictions, hence the tolerance; split over ``k - 1`` rows it guarantees
      ``GeDI(V^k) <= (1 + tol) q``.

    ``yhat`` is ``out`` (regression), ``exp(out)`` (Poisson) or, for a binary task, what ``target`` says:
    ``"labels"`` measures ``1{out > threshold}`` and trains on ``surrogate(out - threshold)``;
    ``"probabilities"`` measures and trains on ``sigmoid(out)``; None measures the labels but trains on
    ``sigmoid(out)`` (or ``surrogate``), a loose surrogate of the step. Bounding the probabilities does not
    bound the labels. An explicit ``target`` is part of the name (``gedi_coarse[age][labels]``).

    A batch's kernel uses the training standardisation (fixed in :meth:`setup`), centred on the batch, and
    is cached per batch object.

    Parameters
    ----------
    sensitive : str
        Continuous or binary sensitive feature (``batch.sensitive[name]``).
    degree : int
        Kernel order ``k`` (1 for a binary attribute: its powers are collinear).
    bound : float
        ``q >= 0``: absolute, or relative to ``GeDI(x, y_train; V^1)`` if ``relative``.
    fine : bool
        Constrain the coefficients instead of their L1 norm.
    relative : bool
        ``bound`` is a fraction of the training data's ``GeDI(V^1)`` (order 1 whatever ``degree``) of the
        target on the predictions' scale: ``y``, or for a Poisson task the observed rate ``y / exposure``
        (the prediction ``exp(out)`` is a rate per unit of exposure).
    kernel : {"poly", "fourier"}
        Kernel basis, see :mod:`fairopt.measures.gedi`.
    eps : float or None
        Smoothing of the coarse row (> 0); None for ``(0.1 q / k)^2`` (``1e-12`` if ``q = 0``).
    tol : float
        Fine constraint: allowance for the higher-order coefficients as a fraction of ``q`` (>= 0).
    standardize : bool or None
        Standardise with the training mean and population sd. None: yes unless the attribute is binary
        (kept 0/1 so that ``GeDI(V^1)`` is the regression DIDI [GeDI App. A.4]).
    surrogate : str, Surrogate or None
        Binary task, hard labels: the smooth step of the training rows. None: ``"smoothed_step"`` for
        ``target="labels"``, ``sigmoid(out)`` for None. Not allowed with ``"probabilities"``.
    target : {"labels", "probabilities"} or None
        Binary tasks only (``ValueError`` at :meth:`setup` for the other tasks).
    threshold : float
        Binary task: the decision threshold on ``out``.
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
        target: str | None = None,
        threshold: float = 0.0,
    ) -> None:
        if not isinstance(sensitive, str) or not sensitive:
            raise ValueError(f"sensitive: expected the name of a sensitive feature, got {sensitive!r}")
        self.sensitive = sensitive
        self.degree = check_degree(degree)
        self.bound = measure_bound(bound, "bound", "a relative GeDI" if relative is True else "GeDI")
        self.fine = check_flag(fine, "fine")
        self.relative = check_flag(relative, "relative")
        self.kernel = check_kernel(kernel)
        self.eps = None if eps is None else positive_float(eps, "eps")
        self.tol = nonnegative_float(tol, "tol")
        self.standardize = check_flag(standardize, "standardize", allow_none=True)
        self.target = None if target is None else check_choice(target, TARGETS, "target")
        if self.target == "probabilities" and surrogate is not None:
            raise ValueError(f"surrogate: {surrogate!r} with target='probabilities', which trains on the probabilities "
                             "themselves; a step surrogate is for target='labels'")
        step = "smoothed_step" if surrogate is None and self.target == "labels" else surrogate
        self.surrogate = None if step is None else get_surrogate(step)
        self.threshold = finite_float(threshold, "threshold")
        self._params = dict(
            sensitive=sensitive, degree=self.degree, bound=self.bound, fine=self.fine,
            relative=self.relative, kernel=self.kernel, eps=self.eps, tol=self.tol,
            standardize=self.standardize, surrogate=surrogate, target=self.target,
            threshold=self.threshold,
        )
        self.name = f"gedi_{'fine' if self.fine else 'coarse'}[{sensitive}]" + (f"[{target}]" if target else "")
        self.measured: str | None = self.target
        """What :meth:`exact` measures: "labels", "probabilities", "predictions" or "rates" (after setup)."""
        self.reference: float | None = None
        """``GeDI(x, y_train; V^1)``, the scale of a relative bound (set up; None otherwise)."""
        self.absolute_bound: float | None = None
        self.smoothing: float | None = None
        self._task: str | None = None
        self._shift = self._scale = None
        self._cache: OrderedDict[int, _CacheEntry] = OrderedDict()
        if not self.relative:
            self._resolve_bounds(self.bound)

    # ------------------------------------------------------------------ setup
    def setup(self, data: Any) -> None:
        """Check the attribute and fix the training standardisation and the absolute bound.

        Raises ``ValueError`` for an unknown, categorical or constant attribute, a binary one with
        ``degree > 1``, an unsupported task, a ``target`` on a non-binary task, a rank-deficient training
        kernel, or weighted data (GeDI has no weighted version).
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
        if self.target is not None and task != "binary":
            raise ValueError(f"target: {self.target!r} chooses between a classifier's labels and probabilities; the "
                             f"{task} task has one prediction ({_MEASURED[task]}): leave target=None")
        self._task = task
        self.measured = _MEASURED.get(task, self.target or "labels")
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
            y_train = observed_target(data)  # the rate y / exposure for a Poisson task, as exp(out)
            check_same_length(**{"data.y": y_train, f"sensitive[{self.sensitive!r}]": x})
            self.reference = float(reference.coefficients(y_train).abs().sum())
            q = self.bound * self.reference
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

    @property
    def is_set_up(self) -> bool:
        """Whether :meth:`setup` has fixed the training standardisation of the sensitive feature (the rows'
        basis and, for a relative bound, the absolute bound)."""
        return self._shift is not None

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
            if self.target == "probabilities":
                return torch.sigmoid(out)
            t = out - self.threshold
            if hard:
                return Surrogate.step(t)
            return torch.sigmoid(out) if self.surrogate is None else self.surrogate(t)
        if self._task == "poisson":
            return torch.exp(out)
        return out

    def coefficients(self, out: torch.Tensor, batch: Any, hard: bool = False) -> torch.Tensor:
        """``alpha`` (k,) of the smooth rows' predictions, or with ``hard`` of the measured ones (float64)."""
        return self._basis(batch).coefficients(self._predictions(out, batch, hard))

    # ------------------------------------------------------------------ rows
    def __call__(self, out: torch.Tensor, batch: Any) -> torch.Tensor:
        """Smooth rows: ``[sum_j sqrt(alpha_j^2 + eps)]`` (coarse) or ``alpha`` (fine)."""
        alpha = self.coefficients(out, batch)
        rows = alpha if self.fine else torch.sqrt(alpha**2 + self.smoothing).sum().reshape(1)
        return rows.to(out.dtype)

    def exact(self, out: torch.Tensor, batch: Any) -> torch.Tensor:
        """Exact rows of the measured predictions (:attr:`measured`): ``[||alpha||_1]`` (coarse) or ``alpha`` (fine)."""
        with torch.no_grad():
            alpha = self.coefficients(out, batch, hard=True)
            rows = alpha if self.fine else alpha.abs().sum().reshape(1)
        return rows.to(out.dtype)

    # ------------------------------------------------------------------ the bounded measure
    @property
    def row_floor(self) -> float | None:
        """The smallest value a row can take: 0 for the coarse row ``||alpha||_1``; None (signed rows) when
        ``fine``. A margin that takes an upper bound below it leaves no feasible model
        (:class:`fairopt.certificate.TightenedConstraint` refuses it)."""
        return None if self.fine else 0.0

    @property
    def measure(self) -> str:
        """The bounded measure's name, with :attr:`measured` appended for a binary task without ``target``."""
        if self.target is None and self.measured in TARGETS:
            return f"{self.name}[{self.measured}]"
        return self.name

    def realised(self, out: torch.Tensor, batch: Any) -> float:
        """The exact value of the measure ``bound`` bounds (from above).

        Coarse: ``||alpha||_1`` [GeDI eq 17]; fine: the smallest ``q`` the coefficients meet,
        ``max(|alpha_1|, max_{j >= 2} |alpha_j| (k - 1) / tol)``. Divided by :attr:`reference` when ``relative``.
        """
        alpha = self.exact(out, batch).to(torch.float64).abs().cpu()
        if not self.fine:
            value = float(alpha.sum())
        else:
            share = torch.tensor([1.0] + [self.tol / (self.degree - 1)] * (self.degree - 1), dtype=torch.float64)
            scaled = torch.where(alpha == 0, torch.zeros_like(alpha), alpha / share)
            value = float(scaled.max())
        if self.relative:
            if self.reference is None:
                raise RuntimeError(f"{self.name}: call setup(training data) before realised (the relative scale)")
            return value / self.reference if self.reference > 0 else (0.0 if value == 0 else math.inf)
        return value

    # ------------------------------------------------------------------ projection
    def target_encoding(self, batch: Any) -> LinearEncoding:
        """The constraint as linear rows on a target vector ``z`` (n,) [GeDI eq 19-20, 54].

        Rows are divided by ``n``. ``Ft`` is the centred batch kernel and ``G = Ft'Ft / n``; its columns have
        zero mean, so ``Ft'(z - mean z) = Ft' z``. Coarse, with auxiliaries ``a = [alpha (free), t (>= 0)]``::

            G alpha - Ft' z / n = 0,   t_j - alpha_j >= 0,   t_j + alpha_j >= 0,   sum_j t_j <= q

        Fine, covariance form (``v = G_11``, ``c_j = G_j1``)::

            -q v <= cov(F_1, z) <= q v,   c_j cov(F_1, z) - v cov(F_j, z) = 0  (j = 2..k)

        For full-rank ``Ft`` these hold exactly when the unique solution of the normal equations is
        ``alpha = (a, 0, ..., 0)`` with ``|a| <= q`` [GeDI App. B.1]; they enforce the higher orders exactly
        (``tol`` unused). For a binary task with ``k >= 2`` the equalities admit no 0/1 vector in general, so
        the rows are the coefficients ``alpha = G^{-1} Ft' z / n`` with the fine rows' bounds.
        """
        basis = self._basis(batch)
        ft = basis.centred.numpy()
        gram = basis.gram.numpy()
        n, k = ft.shape
        q = float(self.absolute_bound)
        meta = {"constraint": self.name, "form": "fine" if self.fine else "coarse", "degree": k, "bound": q}
        if self.fine and self._task == "binary" and k > 1:
            meta["form"] = "fine-coefficients"
            rows = np.linalg.solve(gram, ft.T / n)
            return LinearEncoding(name=self.name, A_z=rows, lb=self.lower.numpy().copy(),
                                  ub=self.upper.numpy().copy(), meta=meta)
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
