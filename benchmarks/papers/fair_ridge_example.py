"""The fair ridge paper's Example 1 (synthetic): data, the population values, the
coefficient profiles and the bias of ridge-decorrelated NCLM (:mod:`benchmarks.papers.fair_ridge`)."""

from __future__ import annotations

import math
import warnings
from typing import Any, Sequence

import numpy as np
import pandas as pd

from benchmarks.papers.fair_ridge_data import Settings

# ----------------------------------------------------------------------------- Example 1
def example1_sigma() -> np.ndarray:
    sigma = np.full((6, 6), 0.3)
    np.fill_diagonal(sigma, 1.0)
    return sigma


def example1_data(n: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """[FR] Example 1: ``X`` (n, 3), ``S`` (n, 3) and ``y`` (n,)."""
    rng = np.random.default_rng(seed)
    Z = rng.multivariate_normal(np.zeros(6), example1_sigma(), size=n)
    X, S = Z[:, :3], Z[:, 3:]
    y = X @ np.array([2.0, 3.0, 4.0]) + S @ np.array([5.0, 6.0, 7.0]) + rng.normal(0.0, 10.0, size=n)
    return X, S, y


def example1_population() -> dict:
    """Population values of Example 1: OLS coefficients of eq. (2) and ``R^2_S``, for the
    model as printed (``y`` from ``X``) and for ``alpha = [5, 6, 7]`` taken as eq. (2)'s
    coefficients of ``S`` next to the de-correlated ``U`` (the paper's "using the notation
    established in (2)")."""
    sigma = example1_sigma()
    sxx, sxs, sss = sigma[:3, :3], sigma[:3, 3:], sigma[3:, 3:]
    a, b = np.array([5.0, 6.0, 7.0]), np.array([2.0, 3.0, 4.0])
    B = np.linalg.solve(sss, sxs.T)  # X = S B + U
    var_u = sxx - sxs @ np.linalg.solve(sss, sxs.T)
    alpha = a + B @ b

    def share(al: np.ndarray) -> float:
        vs, vu = al @ sss @ al, b @ var_u @ b
        return float(vs / (vs + vu))

    return {"alpha_ols": alpha, "beta_ols": b, "r2s_as_printed": share(alpha), "r2s_eq2_reading": share(a)}


def quiet_fit(model: Any, *args: Any, **kwargs: Any) -> Any:
    from fairopt.exceptions import FairnessWarning

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FairnessWarning)  # inactive bounds at large r are expected
        return model.fit(*args, **kwargs)


def example1_profiles(X: np.ndarray, S: np.ndarray, y: np.ndarray, r_values: Sequence[float]) -> pd.DataFrame:
    """[FR] Fig. 2 (NCLM) and Fig. 3 (FRRM): coefficients, ``R^2_S`` and ``lambda`` over ``r``."""
    from fairopt.linear import FRRM, NCLM

    rows = []
    for r in r_values:
        for label, model in (("NCLM", NCLM(r=r)), ("FRRM", FRRM(r=r))):
            quiet_fit(model, X, y, sensitive=S)
            row = {"model": label, "r": r, "r2_sensitive": model.r2_sensitive_, "active": bool(model.active_),
                   "r2_sensitive_ols": model.r2_sensitive_ols_, "lambda": getattr(model, "lambda_", np.nan)}
            row.update({f"alpha_S{j + 1}": v for j, v in enumerate(model.alpha_)})
            row.update({f"beta_X{j + 1}": v for j, v in enumerate(model.beta_)})
            rows.append(row)
    return pd.DataFrame(rows)


class RidgeDecorrelatedNCLM:
    """NCLM whose de-correlated predictors come from a ridge regression of ``X`` on ``S``
    with penalty ``ridge`` (sum-of-squares scale): ``U~ = X_c - S_c (S_c'S_c + ridge I)^-1 S_c'X_c``
    ([FR] sec. 2.2, eq. 8). The solver still treats ``S`` and ``U~`` as orthogonal - the
    biased procedure the paper describes. ``nominal_`` is the share it enforces and
    ``realised_`` the true ``VAR(S a) / VAR(S a + U~ b)``."""

    def __init__(self, r: float, ridge: float) -> None:
        self.r, self.ridge = r, ridge

    def fit(self, X: np.ndarray, y: np.ndarray, sensitive: np.ndarray) -> "RidgeDecorrelatedNCLM":
        from fairopt.linear import NCLM

        ridge = self.ridge
        X_c = X - X.mean(axis=0)
        S_c = sensitive - sensitive.mean(axis=0)
        U = X_c - S_c @ np.linalg.solve(S_c.T @ S_c + ridge * np.eye(S_c.shape[1]), S_c.T @ X_c)

        class _Biased(NCLM):
            def _prepare(self, X_, y_, sensitive_):  # noqa: ANN001 - NCLM's own signature
                S_c_, _, y_ = super()._prepare(X_, y_, sensitive_)
                return S_c_, U, y_

        model = quiet_fit(_Biased(r=self.r), X, y, sensitive=sensitive)
        s_part, u_part = S_c @ model.alpha_, U @ model.beta_
        self.alpha_, self.beta_ = model.alpha_, model.beta_
        self.nominal_ = model.r2_sensitive_
        self.realised_ = float(np.var(s_part) / np.var(s_part + u_part))
        return self


def _ridge_cv_range(X: np.ndarray, S: np.ndarray, lambdas: np.ndarray, folds: int, seed: int) -> tuple[float, float]:
    """The range of ridge penalties (sum-of-squares scale) within one standard error of the
    10-fold CV minimum, over the regressions of each ``X_i`` on ``S`` ([FR] Fig. 1's shaded area)."""
    from sklearn.model_selection import KFold

    splits = list(KFold(n_splits=folds, shuffle=True, random_state=seed).split(X))
    low, high = math.inf, 0.0
    for i in range(X.shape[1]):
        errors = np.empty((len(lambdas), folds))
        for k, (tr, te) in enumerate(splits):
            s_mean, x_mean = S[tr].mean(axis=0), X[tr, i].mean()
            S_tr, x_tr = S[tr] - s_mean, X[tr, i] - x_mean
            gram, cross = S_tr.T @ S_tr, S_tr.T @ x_tr
            for j, lam in enumerate(lambdas):
                coef = np.linalg.solve(gram + lam * len(tr) / len(X) * np.eye(S.shape[1]), cross)
                errors[j, k] = np.mean((X[te, i] - x_mean - (S[te] - s_mean) @ coef) ** 2)
        mean, se = errors.mean(axis=1), errors.std(axis=1, ddof=1) / math.sqrt(folds)
        best = int(np.argmin(mean))
        within = np.flatnonzero(mean <= mean[best] + se[best])
        low, high = min(low, float(lambdas[best])), max(high, float(lambdas[within].max()))
    return low, high


def example1_bias(X: np.ndarray, S: np.ndarray, y: np.ndarray, settings: Settings) -> tuple[pd.DataFrame, tuple]:
    """[FR] Fig. 1: nominal vs realised ``R^2_S`` of ridge-decorrelated NCLM over the ridge
    penalty; also the CV range of penalties. Penalties on the sum-of-squares scale (eq. 8)."""
    n = len(y)
    lambdas = n * np.asarray(settings.bias_lambdas, dtype=float)
    cv_range = _ridge_cv_range(X, S, lambdas, settings.bias_folds, settings.example_seed)
    lambdas = np.unique(np.concatenate([lambdas, cv_range]))
    rows = []
    for r in settings.bias_r:
        for lam in lambdas:
            model = RidgeDecorrelatedNCLM(r, lam).fit(X, y, S)
            rows.append({"r": r, "lambda": lam, "lambda_over_n": lam / n, "nominal": model.nominal_,
                         "realised": model.realised_, "relative_difference": model.realised_ / model.nominal_ - 1,
                         "in_cv_range": bool(cv_range[0] <= lam <= cv_range[1])})
    return pd.DataFrame(rows), cv_range


