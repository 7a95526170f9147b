"""GeDI fairness constraint, coarse and fine [GeDI sec 4].

With ``alpha(yhat)`` the least-squares coefficients of the predictions on the centred
kernel of the protected attribute (:func:`fairopt.measures.gedi.gedi`):

* coarse: ``GeDI(x, yhat; F) = ||alpha||_1 <= q``                     [GeDI eq 18-20]
* fine:   ``|alpha_1| <= q`` and ``alpha_j = 0`` for ``j = 2..k``      [GeDI eq 22, 24]

``q`` is ``bound``, or ``bound * GeDI(x, y_train; V^1)`` with ``relative=True`` (the
paper's protocol uses ``bound = 0.2`` for every kernel order) [GeDI sec 5].

For a classifier (binary task) ``yhat`` is one of two things, chosen by ``target``: the hard
labels ``1{out > threshold}`` (what the paper reports, [GeDI sec 5]) or the probabilities
``sigmoid(out)``. Each constraint says which it measures: ``target="labels"`` is named
``gedi_coarse[age][labels]``, ``target="probabilities"`` ``gedi_coarse[age][probabilities]``.
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

from fairopt._validation import (as_1d_tensor, check_choice, check_flag, check_same_length, finite_float,
                                 measure_bound, nonnegative_float, positive_float, require_unweighted)
from fairopt.constraints.base import BaseConstraint
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

    Predictions ``yhat``: ``out`` for regression, ``exp(out)`` (the rate) for Poisson, and
    for ``task="binary"`` what ``target`` says (the rows of :meth:`exact` are the measure
    the engines check, report and certify; the smooth rows of ``__call__`` are what they
    train on):

    ============================  ==============================  ==============================
    ``target``                    exact rows (the measure)        smooth rows (training)
    ============================  ==============================  ==============================
    ``"labels"``                  hard labels                     ``surrogate(out - threshold)``,
                                  ``1{out > threshold}``          default the smoothed step of
                                                                  :class:`~fairopt.constraints.DisparateImpact`
    ``"probabilities"``           ``sigmoid(out)``                ``sigmoid(out)``
    None (default)                hard labels                     ``sigmoid(out)``, or
                                  ``1{out > threshold}``          ``surrogate(out - threshold)``
    ============================  ==============================  ==============================

    ``None`` keeps the setting from before ``target`` existed: it reports and checks the
    hard-label GeDI but trains on the probabilities, a loose surrogate of the step, and
    leaves the gap to the engines' calibration of the rows on their exact values (on the
    first Adult fold, 200 epochs, the fine age constraint ended at a constant classifier).
    ``"labels"`` trains on the smoothed step instead, as the disparate-impact constraints
    do, so the training rows approach the exact hard-label rows that the engines check.
    Bounding the probabilities does not bound the labels: with ``"probabilities"`` met on
    that fold, the hard-label GeDI was 3.7 times the bound. The name says which measure an explicit
    ``target`` gives (``gedi_coarse[age][labels]``); :attr:`measure` says it for every
    constraint once set up.

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
        Binary tasks, hard labels (``target`` "labels" or None): the smooth step of the
        training rows, ``surrogate(out - threshold)`` (see
        :func:`fairopt.surrogates.get_surrogate`). None: ``"smoothed_step"`` for
        ``target="labels"``, the probability ``sigmoid(out)`` for ``target=None``. Not
        allowed with ``target="probabilities"``.
    target : {"labels", "probabilities"} or None
        Binary tasks only: what GeDI measures (table above). A regression or Poisson task
        has one prediction and takes None (ValueError at :meth:`setup` otherwise).
    threshold : float
        Binary tasks, hard labels: the decision threshold on ``out`` (0 on logits is
        probability 0.5), as in :class:`~fairopt.constraints.DisparateImpact`.
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
        """What :meth:`exact` measures: "labels" or "probabilities" (binary task),
        "predictions" (regression) or "rates" (Poisson); None until :meth:`setup` when no
        ``target`` is given."""
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
        """Check the attribute, fix the training standardisation and the absolute bound.

        Raises ``ValueError`` for an unknown or categorical attribute, a binary attribute
        with ``degree > 1``, a constant attribute, an unsupported task, a ``target`` on a task
        that is not binary, a training kernel that is rank deficient, or data with per-row
        weights (``data.weights``: GeDI has no
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
            y_train = as_1d_tensor(data.y, "data.y")
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
        """``alpha`` (k,) of the batch predictions (float64): those of the smooth rows, or with
        ``hard`` those of the exact rows (the measure, class doc; no useful gradient)."""
        return self._basis(batch).coefficients(self._predictions(out, batch, hard))

    # ------------------------------------------------------------------ rows
    def __call__(self, out: torch.Tensor, batch: Any) -> torch.Tensor:
        """Smooth rows: ``[sum_j sqrt(alpha_j^2 + eps)]`` (coarse) or ``alpha`` (fine)."""
        alpha = self.coefficients(out, batch)
        rows = alpha if self.fine else torch.sqrt(alpha**2 + self.smoothing).sum().reshape(1)
        return rows.to(out.dtype)

    def exact(self, out: torch.Tensor, batch: Any) -> torch.Tensor:
        """Exact rows of the measured predictions (:attr:`measured`: hard labels
        ``1{out > threshold}`` or probabilities for a classifier, class doc): ``[||alpha||_1]``
        (coarse) or ``alpha`` (fine)."""
        with torch.no_grad():
            alpha = self.coefficients(out, batch, hard=True)
            rows = alpha if self.fine else alpha.abs().sum().reshape(1)
        return rows.to(out.dtype)

    # ------------------------------------------------------------------ the bounded measure
    @property
    def measure(self) -> str:
        """The measure the bound argument bounds, with what it is measured on:
        ``gedi_coarse[age][labels]`` (the name, plus :attr:`measured` once set up for a
        binary task without an explicit ``target``)."""
        if self.target is None and self.measured in TARGETS:
            return f"{self.name}[{self.measured}]"
        return self.name

    def realised(self, out: torch.Tensor, batch: Any) -> float:
        """The exact value on ``batch`` of the measure ``bound`` bounds (``bound_sense`` upper).

        Coarse: ``||alpha||_1`` [GeDI eq 17]; fine: the smallest ``q`` whose rows the
        coefficients meet, ``max(|alpha_1|, max_{j >= 2} |alpha_j| (k - 1) / tol)`` (infinite
        if ``tol = 0`` and some ``alpha_j != 0``). With ``relative=True`` divided by
        :attr:`reference` = ``GeDI(x, y_train; V^1)``, the scale of ``bound``. ``alpha``
        is that of :meth:`exact` (hard labels or probabilities, :attr:`measured`).
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

        For a classifier ``z`` holds the 0/1 target labels of Moving Targets: the rows
        constrain the labels' GeDI (``target`` "labels" or None).

        Fine, binary task, ``k >= 2``: the ``k - 1`` equalities admit no 0/1 vector in
        general (on Adult/age neither HiGHS nor Gurobi found a feasible point in 20 s for
        ``k = 2`` on 1,500 rows), so the rows are the coefficients themselves,
        ``alpha = G^{-1} Ft' z / n`` (no auxiliary variables), with the bounds of the fine
        rows: ``|alpha_1| <= q``, ``|alpha_j| <= tol q / (k - 1)`` for ``j >= 2``. A 0/1
        vector meets them exactly when its GeDI coefficients meet this constraint's rows.
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
