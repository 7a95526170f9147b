r"""Zafar et al. (2019) covariance-bounded linear and logistic regression: ZLM and ZLRM ([FR] sec 5 baselines).

``eta = intercept + X w`` on the predictors only (the sensitive attributes appear in the constraints,
as in Zafar et al. and ``fairml``), fitted by least squares (ZLM) or maximum likelihood (ZLRM, ``eta``
the logit) subject to ``|COV(S_j, eta)| = |(1/n) sum_i (s_ij - mean(S_j)) eta_i| <= bound`` for every
sensitive column (population covariance; ``fairml`` divides by ``n - 1``).

Both run :class:`solvers.StochasticSQP` (full batch) on a linear model with the
:class:`fairopt.constraints.Covariance` constraint: the SQP engine with that constraint on a linear
model is ZLRM. The inputs are whitened first (:class:`~fairopt.linear._common.Whitening`, least-squares
Hessian ``2 I``) and ZLM's ``y`` scaled to unit variance, so the engine's diagonal Hessian model with
``hessian_shift=1`` fits. ``ZLM(solver="qp")`` solves ZLM's convex QP exactly with Clarabel, the
reference for the SQP route. At ``bound = 0`` the constrained problem is solved; ``fairml`` instead
drops every predictor correlated with ``S`` ([FR] sec 5.1).
"""

from __future__ import annotations

import logging
import warnings
from typing import Any

import numpy as np
from scipy.special import expit
from sklearn.base import BaseEstimator, ClassifierMixin, RegressorMixin
from sklearn.metrics import accuracy_score
from sklearn.utils.validation import check_is_fitted

from fairopt.constraints.covariance import Covariance
from fairopt.data import FairData, Preprocessor
from fairopt.exceptions import FairnessWarning
from fairopt._validation import check_choice, nonnegative_float
from fairopt.linear._common import (
    Whitening,
    as_matrix,
    as_vector,
    check_columns,
    check_fit_arrays,
    check_rows,
    regression_score,
)
from fairopt.models import linear
from solvers.sqp import StochasticSQP

__all__ = ["ZLM", "ZLRM"]

logger = logging.getLogger(__name__)

#: relative slack, on the scale ``max_j sd(S_j)`` times ``sd(y)`` (ZLM) or 1 (ZLRM, logit
#: units), before a realised covariance above the bound is reported (float32 training)
_FEASIBILITY_RTOL = 1e-5


def default_engine(epochs: int, seed: int = 0) -> StochasticSQP:
    """The engine used when ``engine=None``: full-batch SQP on the gradient metric, ``lr = 0.5``,
    ``hessian_shift = 1`` (whitened inputs have unit curvature: ``h = sqrt(v + 1)`` is about
    constant), the paper's schedule and a stationarity tolerance of 1e-7.

    ``epochs`` is 100 for ZLM and 200 for ZLRM (the logistic curvature is at most 1/4).
    """
    return StochasticSQP(epochs=epochs, lr=0.5, hessian="adam", hessian_shift=1.0, lr_schedule="paper", tol=1e-7,
                         seed=seed)


class _ZafarModel(BaseEstimator):
    """Shared fit machinery of ZLM and ZLRM (module doc)."""

    _task = "regression"
    _loss = "mse"
    _default_epochs = 100

    # -- validation -------------------------------------------------------------------
    @staticmethod
    def _whiten(X: np.ndarray) -> Whitening:
        white = Whitening().fit(X)
        if white.rank == 0:
            raise ValueError("X: every column is constant; there is nothing to fit")
        return white

    def _check_engine(self) -> StochasticSQP:
        if self.engine is None:
            return default_engine(self._default_epochs, self.seed)
        if not isinstance(self.engine, StochasticSQP):
            raise ValueError(f"engine: expected a solvers.StochasticSQP or None, got {type(self.engine).__name__}")
        return self.engine

    def _inputs(self, X: Any) -> np.ndarray:
        check_is_fitted(self)
        X = as_matrix(X, "X")
        check_columns(X, self.n_features_in_, "X")
        return X

    # -- fitting ----------------------------------------------------------------------
    def _fit_sqp(self, X_white: np.ndarray, target: np.ndarray, S: np.ndarray, bound: float, engine: StochasticSQP):
        """SQP on the whitened inputs; returns the weights, the bias and the FitResult."""
        names = [f"s{j}" for j in range(S.shape[1])]
        data = FairData.from_arrays(
            X_white.astype(np.float32), target, {name: S[:, j] for j, name in enumerate(names)}, task=self._task,
            feature_names=[f"z{j}" for j in range(X_white.shape[1])],
            sensitive_kinds={name: "continuous" for name in names}, preprocessor=Preprocessor(standardize=False),
        )
        model = linear(X_white.shape[1], seed=self.seed)
        constraint = Covariance(names, bound=bound, groups="marginal")
        result = engine.fit(model, data, loss=self._loss, constraints=[constraint])
        layer = model[0]
        weights = layer.weight.detach().double().numpy().ravel()
        return weights, float(layer.bias.detach().double()), result

    def _finish(self, X: np.ndarray, S: np.ndarray, bound: float, eta_scale: float) -> None:
        """Realised covariances on the training rows; warn when they exceed the bound by more than
        :data:`_FEASIBILITY_RTOL` ``* max_j sd(S_j) * eta_scale``.
        """
        eta = X @ self.coef_ + self.intercept_
        S_c = S - S.mean(axis=0)
        self.covariances_ = S_c.T @ eta / X.shape[0]
        excess = float(np.max(np.abs(self.covariances_))) - bound
        logger.debug("%s: bound=%g, realised max |COV(S_j, eta)|=%g", type(self).__name__, bound, bound + excess)
        if excess > _FEASIBILITY_RTOL * float(np.max(S_c.std(axis=0))) * eta_scale:
            warnings.warn(f"{type(self).__name__}: realised max |COV(S_j, eta)| exceeds bound={bound:g} by "
                          f"{excess:.3g}; train longer (engine epochs)", FairnessWarning, stacklevel=3)


class ZLM(RegressorMixin, _ZafarModel):
    r"""Zafar et al. linear regression with ``|COV(S_j, y_hat)| <= bound`` for every ``j`` (module doc).

    Parameters
    ----------
    bound : float, default 0.0
        Largest allowed ``|COV(S_j, y_hat)|`` (units of ``S_j`` times ``y``), ``>= 0``.
    solver : {"sqp", "qp"}, default "sqp"
        :class:`solvers.StochasticSQP` with the Covariance constraint, or the exact QP (Clarabel).
    engine : StochasticSQP or None
        The SQP engine (default :func:`default_engine`).
    seed : int, default 0
        Initialisation of the linear model and the default engine's seed.

    Attributes
    ----------
    coef_ : ndarray (p,)
    intercept_ : float
    covariances_ : ndarray (q,)
        Realised ``COV(S_j, y_hat)`` on the training rows.
    fit_result_ : solvers.FitResult or None
        None for ``solver="qp"``.
    n_features_in_, n_sensitive_in_ : int
    """

    _task = "regression"
    _loss = "mse"

    def __init__(self, bound: float = 0.0, solver: str = "sqp", engine: StochasticSQP | None = None,
                 seed: int = 0) -> None:
        self.bound = bound
        self.solver = solver
        self.engine = engine
        self.seed = seed

    def fit(self, X: Any, y: Any, sensitive: Any = None) -> "ZLM":
        """Fit on ``X`` (n, p), ``y`` (n,) and the sensitive attributes (n, q)."""
        bound = nonnegative_float(self.bound, "bound")
        solver = check_choice(self.solver, ("sqp", "qp"), "solver")
        engine = self._check_engine() if solver == "sqp" else None
        X, y, S = check_fit_arrays(X, y, sensitive, type(self).__name__)
        self.n_features_in_, self.n_sensitive_in_ = X.shape[1], S.shape[1]
        white = self._whiten(X)
        X_white = white.transform(X)
        y_mean = float(y.mean())
        scale = float(np.sqrt(np.mean((y - y_mean) ** 2))) or 1.0
        target = (y - y_mean) / scale
        if solver == "qp":
            weights, bias = _least_squares_qp(X_white, target, S, bound / scale), 0.0
            self.fit_result_ = None
        else:
            weights, bias, self.fit_result_ = self._fit_sqp(X_white, target, S, bound / scale, engine)
        self.coef_ = scale * (white.matrix @ weights)
        self.intercept_ = float(y_mean + scale * bias - white.mean @ self.coef_)
        self._finish(X, S, bound, scale)
        return self

    def predict(self, X: Any, sensitive: Any = None) -> np.ndarray:
        """``intercept_ + X coef_``; ``sensitive`` is accepted for a uniform API and not used."""
        X = self._inputs(X)
        return self.intercept_ + X @ self.coef_

    def score(self, X: Any, y: Any, sensitive: Any = None, sample_weight: Any = None) -> float:
        """Coefficient of determination ``R^2`` of :meth:`predict`."""
        return regression_score(y, self.predict(X), sample_weight)


class ZLRM(ClassifierMixin, _ZafarModel):
    r"""Zafar et al. logistic regression with ``|COV(S_j, logit)| <= bound`` for every ``j`` (module doc).

    Parameters
    ----------
    bound : float, default 0.0
        Largest allowed ``|COV(S_j, logit)|``, ``>= 0``.
    engine : StochasticSQP or None
        The SQP engine (default :func:`default_engine`).
    seed : int, default 0
        Initialisation of the linear model and the default engine's seed.

    Attributes
    ----------
    coef_ : ndarray (p,)
    intercept_ : float
    covariances_ : ndarray (q,)
        Realised ``COV(S_j, logit)`` on the training rows.
    classes_ : ndarray ``[0, 1]``
    fit_result_ : solvers.FitResult
    n_features_in_, n_sensitive_in_ : int
    """

    _task = "binary"
    _loss = "bce"
    _default_epochs = 200

    def __init__(self, bound: float = 0.0, engine: StochasticSQP | None = None, seed: int = 0) -> None:
        self.bound = bound
        self.engine = engine
        self.seed = seed

    def fit(self, X: Any, y: Any, sensitive: Any = None) -> "ZLRM":
        """Fit on ``X`` (n, p), 0/1 labels ``y`` (n,) and the sensitive attributes (n, q)."""
        bound = nonnegative_float(self.bound, "bound")
        engine = self._check_engine()
        X, y, S = check_fit_arrays(X, y, sensitive, type(self).__name__)
        bad = ~np.isin(y, (0.0, 1.0))
        if bad.any():
            raise ValueError(f"y: expected 0/1 labels, got {y[bad][0]!r}")
        self.n_features_in_, self.n_sensitive_in_ = X.shape[1], S.shape[1]
        self.classes_ = np.array([0, 1])
        white = self._whiten(X)
        weights, bias, self.fit_result_ = self._fit_sqp(white.transform(X), y, S, bound, engine)
        self.coef_ = white.matrix @ weights
        self.intercept_ = float(bias - white.mean @ self.coef_)
        self._finish(X, S, bound, 1.0)
        return self

    def decision_function(self, X: Any, sensitive: Any = None) -> np.ndarray:
        """The logit ``intercept_ + X coef_``, shape (n,)."""
        X = self._inputs(X)
        return self.intercept_ + X @ self.coef_

    def predict_proba(self, X: Any, sensitive: Any = None) -> np.ndarray:
        """``[P(y=0), P(y=1)]``, shape (n, 2)."""
        p = expit(self.decision_function(X))
        return np.column_stack([1.0 - p, p])

    def predict(self, X: Any, sensitive: Any = None) -> np.ndarray:
        """Labels ``1{logit > 0}``."""
        return (self.decision_function(X) > 0).astype(np.int64)

    def score(self, X: Any, y: Any, sensitive: Any = None, sample_weight: Any = None) -> float:
        """Accuracy of :meth:`predict`."""
        y = as_vector(y, "y")
        prediction = self.predict(X)
        check_rows(X=prediction, y=y)
        return float(accuracy_score(y, prediction, sample_weight=sample_weight))


def _least_squares_qp(X_white: np.ndarray, target: np.ndarray, S: np.ndarray, bound: float) -> np.ndarray:
    r"""Exact ZLM in whitened coordinates: ``min ||w||^2 - 2 c'w`` s.t. ``|M w| <= bound`` (Clarabel via ``qpsolvers``).

    ``c = X_w' target / n`` and ``M = S_c' X_w / n`` (rows ``COV(S_j, X_w w)``), since ``X_w'X_w / n = I``.
    """
    import scipy.sparse as sp
    from qpsolvers import solve_qp

    n, k = X_white.shape
    c = X_white.T @ target / n
    M = (S - S.mean(axis=0)).T @ X_white / n
    G = sp.csc_matrix(np.vstack([M, -M]))
    h = np.full(G.shape[0], bound)
    solution = solve_qp(sp.csc_matrix(2.0 * np.eye(k)), -2.0 * c, G, h, solver="clarabel",
                        tol_feas=1e-12, tol_gap_abs=1e-12, tol_gap_rel=1e-12)
    if solution is None:
        raise RuntimeError("ZLM: Clarabel (qpsolvers) found no solution of the least-squares QP")
    return np.asarray(solution, dtype=np.float64)
