r"""Komiyama et al. (2018) fair linear regression, NCLM ([FR] sec 2).

[FR] eq (2), ``y = S alpha + U beta + e`` with ``U`` the OLS-de-correlated predictors, fitted by least
squares subject to ``R^2_S(alpha, beta) <= r`` ([FR] eq (4)-(6))::

    min  alpha' V_S alpha + beta' V_U beta - 2 (E(yS)' alpha + E(yU)' beta)
    s.t. (1 - r) alpha' V_S alpha - r beta' V_U beta <= 0,

a non-convex QCQP, through its convex relaxation [FR] eq (7) (Yamada and Takeda 2018)::

    min gamma  s.t.  theta' diag(V_S, V_U) theta - 2 b' theta <= gamma,
                     theta' diag(V_S / r, 0) theta - 2 b' theta <= gamma,

``theta = (alpha, beta)``, ``b = (E(yS), E(yU))``. After whitening ``S`` and ``U``
(:class:`~fairopt.linear._common.Whitening`) every quadratic form is a squared norm, each constraint
``||x||^2 <= z`` the cone ``(z + 1, z - 1, 2x) in SOC``, solved by Clarabel; the interior point fixes
the value to its tolerance but the point only to about its square root, so Newton's method on the KKT
conditions polishes it, and ``alpha`` is scaled down if rounding leaves ``R^2_S > r``. In whitened
coordinates (6) is the projection of the OLS point onto the cone
``||alpha~|| <= sqrt(r / (1 - r)) ||beta~||``, so the relaxation is exact (the tests check it).

``r = 0`` (eq (7) undefined: the limit ``alpha = 0``, ``beta = OLS``) and an inactive bound (the OLS
fit) are solved without the solver.
"""

from __future__ import annotations

import logging
import warnings
from typing import Any

import numpy as np
import scipy.sparse as sp

from fairopt.exceptions import FairnessWarning
from fairopt._validation import nonnegative_float, positive_int
from fairopt.linear._common import (
    DecorrelatedRegressor,
    Whitening,
    check_fraction,
    variance_share,
)

__all__ = ["NCLM"]

logger = logging.getLogger(__name__)


class NCLM(DecorrelatedRegressor):
    r"""Komiyama et al. (2018) fair least squares with ``R^2_S <= r`` ([FR] eq (6)-(7)), by Clarabel (module doc).

    Unlike :class:`~fairopt.linear.FRRM` both ``alpha_`` and ``beta_`` move with ``r`` (``beta_`` grows
    to enlarge the denominator of ``R^2_S``).

    Parameters
    ----------
    r : float, default 0.0
        Bound on ``R^2_S`` ([FR] eq (4)) in ``[0, 1]``.
    tol : float, default 1e-10
        Clarabel's feasibility and duality-gap tolerances (its reduced tolerances ``max(tol, 1e-8)``;
        "AlmostSolved" is accepted and logged).
    max_iter : int, default 200
        Clarabel's iteration limit.

    Attributes
    ----------
    alpha_, beta_, intercept_ : as in :class:`~fairopt.linear.FRRM`.
    r2_sensitive_, r2_sensitive_ols_ : float
        ``R^2_S`` of the fit and of the OLS fit; the bound is active iff the latter exceeds ``r``.
    active_ : bool
    solver_status_ : str
        Clarabel's status, or ``"ols"`` / ``"zero"`` for the special cases.
    decorrelation_, n_features_in_, n_sensitive_in_ : as in FRRM.
    """

    def __init__(self, r: float = 0.0, tol: float = 1e-10, max_iter: int = 200) -> None:
        self.r = r
        self.tol = tol
        self.max_iter = max_iter

    def fit(self, X: Any, y: Any, sensitive: Any = None) -> "NCLM":
        """Fit on ``X`` (n, p), ``y`` (n,) and ``sensitive`` (n, q); ``RuntimeError`` when Clarabel fails."""
        r = check_fraction(self.r, "r")
        tol = nonnegative_float(self.tol, "tol")
        if tol == 0.0:
            raise ValueError("tol: expected a positive tolerance, got 0")
        max_iter = positive_int(self.max_iter, "max_iter")
        S_c, U, y = self._prepare(X, y, sensitive)
        ws, wu = Whitening().fit(S_c), Whitening().fit(U)
        s_tilde, u_tilde = ws.transform(S_c), wu.transform(U)
        y_c = y - y.mean()
        a, c = s_tilde.T @ y_c / len(y), u_tilde.T @ y_c / len(y)  # whitened OLS coefficients
        scale = float(np.sqrt(a @ a + c @ c)) or 1.0  # unit-norm b: the cone program is O(1)
        a, c = a / scale, c / scale
        self.r2_sensitive_ols_ = variance_share(s_tilde @ a, u_tilde @ c)
        self.active_ = self.r2_sensitive_ols_ > r
        if not self.active_:
            alpha_w, beta_w, self.solver_status_ = a, c, "ols"
            if 0.0 < r < 1.0:
                warnings.warn(f"NCLM: the bound r={r:g} is inactive (R^2_S of the OLS fit is "
                              f"{self.r2_sensitive_ols_:.4g}); returning the OLS fit", FairnessWarning, stacklevel=2)
        elif r == 0.0 or wu.rank == 0:  # no predictor variance left: any alpha != 0 gives R^2_S = 1
            alpha_w, beta_w, self.solver_status_ = np.zeros_like(a), c, "zero"
        else:
            alpha_w, beta_w, self.solver_status_ = _solve_relaxation(a, c, r, tol, max_iter)
        self.alpha_ = scale * (ws.matrix @ alpha_w)
        self.beta_ = scale * (wu.matrix @ beta_w)
        self.intercept_ = float(y.mean() - self.decorrelation_.s_mean @ self.alpha_)
        self.r2_sensitive_ = variance_share(S_c @ self.alpha_, U @ self.beta_)
        logger.debug("NCLM: r=%g status=%s R2_S=%g (OLS %g)", r, self.solver_status_, self.r2_sensitive_,
                     self.r2_sensitive_ols_)
        return self

def _solve_relaxation(a: np.ndarray, c: np.ndarray, r: float, tol: float, max_iter: int):
    r"""[FR] eq (7) in whitened coordinates: Clarabel, then a KKT polish.

    Returns ``alpha~, beta~`` and Clarabel's status. The point satisfies ``R^2_S <= r``
    exactly (:func:`_restore_feasibility`).
    """
    alpha, beta, status = _clarabel_relaxation(a, c, r, tol, max_iter)
    alpha, beta = _polish(alpha, beta, a, c, r)
    return _restore_feasibility(alpha, beta, r), beta, status


def _clarabel_relaxation(a: np.ndarray, c: np.ndarray, r: float, tol: float, max_iter: int):
    r"""[FR] eq (7) as a second-order cone program: variables ``(alpha~, beta~, gamma)``, objective ``gamma``.

    With ``z = gamma + 2 b'theta`` the constraints ``||theta||^2 <= z`` and ``||alpha~||^2 / r <= z`` are
    ``(z + 1, z - 1, 2x) in SOC`` (``(z+1)^2 - (z-1)^2 = 4z``), in Clarabel's form ``A v + s = h``.
    """
    import clarabel

    ks, ku = a.size, c.size
    d = ks + ku
    b = np.concatenate([a, c])
    z_row = -np.concatenate([2.0 * b, [1.0]])  # s = h - A v, so A carries -(2b, 1) for z

    def cone_rows(x_block: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        rows = np.vstack([z_row, z_row, -x_block])
        rhs = np.concatenate([[1.0, -1.0], np.zeros(x_block.shape[0])])
        return rows, rhs

    rows1, rhs1 = cone_rows(np.hstack([2.0 * np.eye(d), np.zeros((d, 1))]))
    rows2, rhs2 = cone_rows(np.hstack([2.0 / np.sqrt(r) * np.eye(ks), np.zeros((ks, ku + 1))]))
    A = sp.csc_matrix(np.vstack([rows1, rows2]))
    h = np.concatenate([rhs1, rhs2])
    P = sp.csc_matrix((d + 1, d + 1))
    q = np.zeros(d + 1)
    q[-1] = 1.0
    settings = clarabel.DefaultSettings()
    settings.verbose = False
    settings.max_iter = max_iter
    settings.tol_feas = settings.tol_gap_abs = settings.tol_gap_rel = tol
    # "AlmostSolved" then still means Clarabel's default (full) accuracy, 1e-8
    settings.reduced_tol_feas = settings.reduced_tol_gap_abs = settings.reduced_tol_gap_rel = max(tol, 1e-8)
    cones = [clarabel.SecondOrderConeT(d + 2), clarabel.SecondOrderConeT(ks + 2)]
    solution = clarabel.DefaultSolver(P, q, A, h, cones, settings).solve()
    status = str(solution.status).split(".")[-1]
    if status == "AlmostSolved":
        logger.info("NCLM: Clarabel met the tolerances 1e-8 but not tol=%g (AlmostSolved)", tol)
    elif status != "Solved":
        raise RuntimeError(f"NCLM: Clarabel failed to solve the relaxation [FR] eq (7): status {status}")
    x = np.asarray(solution.x)
    return x[:ks], x[ks:d], status


def _kkt_residual(theta: np.ndarray, mu: float, b: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """``F(theta, mu) = (2 (theta - b) + mu grad f_1, f_1)`` with ``f_1 = sum_j w_j theta_j^2``."""
    return np.append(2.0 * (theta - b) + 2.0 * mu * weights * theta, float(weights @ theta**2))


def _polish(alpha: np.ndarray, beta: np.ndarray, a: np.ndarray, c: np.ndarray, r: float, steps: int = 8):
    r"""Newton's method on the KKT conditions of eq (7) from the solver's point.

    With the bound active both constraints bind, so with multipliers ``1 - mu`` and ``mu`` the optimum
    solves ``F = (2 (theta - b) + mu grad f_1(theta), f_1(theta)) = 0``,
    ``f_1 = (1/r - 1) ||alpha~||^2 - ||beta~||^2``. The polished point is kept only if it lowers ``||F||``
    with ``0 <= mu <= 1``.
    """
    b = np.concatenate([a, c])
    theta = np.concatenate([alpha, beta])
    weights = np.concatenate([np.full(a.size, 1.0 / r - 1.0), -np.ones(c.size)])
    gradient = 2.0 * weights * theta
    mu = float(-gradient @ (2.0 * (theta - b)) / (gradient @ gradient))  # least-squares multiplier
    start = float(np.linalg.norm(_kkt_residual(theta, mu, b, weights)))
    candidate, candidate_mu = theta, mu
    for _ in range(steps):
        residual = _kkt_residual(candidate, candidate_mu, b, weights)
        jacobian = np.zeros((theta.size + 1, theta.size + 1))
        jacobian[:-1, :-1] = np.diag(2.0 + 2.0 * candidate_mu * weights)
        jacobian[:-1, -1] = jacobian[-1, :-1] = 2.0 * weights * candidate
        step = np.linalg.lstsq(jacobian, -residual, rcond=None)[0]
        candidate, candidate_mu = candidate + step[:-1], candidate_mu + float(step[-1])
    final = float(np.linalg.norm(_kkt_residual(candidate, candidate_mu, b, weights)))
    if final < start and 0.0 <= candidate_mu <= 1.0:
        return candidate[: a.size], candidate[a.size :]
    logger.info("NCLM: KKT polish rejected (residual %.3g -> %.3g, mu=%.3g); keeping the solver's point",
                start, final, candidate_mu)
    return alpha, beta


def _restore_feasibility(alpha: np.ndarray, beta: np.ndarray, r: float) -> np.ndarray:
    """``alpha`` scaled down just enough that ``||alpha||^2 <= r / (1 - r) ||beta||^2``
    (whitened ``R^2_S <= r``) when rounding left it slightly above."""
    limit = r / (1.0 - r) * float(beta @ beta)
    size = float(alpha @ alpha)
    return alpha * np.sqrt(limit / size) if size > limit else alpha
