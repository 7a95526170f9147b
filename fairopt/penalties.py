"""Differentiable fairness penalties for :class:`solvers.Penalty`.

Each penalty is a callable ``P(out, batch) -> 0-dim tensor``, differentiable in the model output
``out``, with a ``name`` and a ``setup(data)`` the engine calls once with the training data:
``Penalty(weight=10).fit(model, data, penalties=[DemographicParitySquared("sex")])``. Predictions
are ``sigmoid(out)`` (binary), ``out`` (regression) or ``exp(out)`` (Poisson).

- :class:`DemographicParitySquared`: ``r_dp = q^2``, the squared gap of smoothed positive rates
  ([SQP] eq. 4, the regularisation-only baseline of its sec 4.2);
- :class:`DistanceCovariancePenalty`: dCov~^2, JdCov~^2 or CCdCov ([DC] eq. 3.2, 3.4, 3.6);
- :class:`GeDIPenalty`: ``GeDI(x, yhat; V^k) = ||alpha||_1`` ([GeDI] eq. 17);
- :class:`FaUCI`: WDP, WDI, WEO and GDP, GDI, GEO ([FU] eq. 5-12).
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

import torch

from fairopt._validation import require_unweighted
from fairopt.constraints.gedi import GeDI
from fairopt.constraints.rates import DemographicParity
from fairopt.measures import fauci

__all__ = ["BasePenalty", "DemographicParitySquared", "DistanceCovariancePenalty", "GeDIPenalty", "FaUCI"]


class BasePenalty:
    """Common interface: ``name``, ``setup(data)`` and ``__call__(out, batch) -> scalar``.

    :meth:`realised` gives the exact value of the penalised measure, read by
    :func:`fairopt.evaluation.realised_measures` as for a constraint (smaller is fairer).
    """

    name: str = "penalty"
    bound_sense: str = "upper"

    @property
    def measure(self) -> str:
        """The name of the penalised measure (the penalty's name)."""
        return self.name

    def realised(self, out: torch.Tensor, batch: Any) -> float:
        """The exact penalised measure on ``batch``: ``exact(out, batch)`` where the penalty smooths, else
        the penalty itself.
        """
        with torch.no_grad():
            exact = getattr(self, "exact", None)
            return float(exact(out, batch) if callable(exact) else self(out, batch))

    def setup(self, data: Any) -> None:
        """Check the training data and precompute data-only quantities (no-op by default)."""

    def __call__(self, out: torch.Tensor, batch: Any) -> torch.Tensor:  # pragma: no cover - abstract
        raise NotImplementedError

    def __repr__(self) -> str:
        params = ", ".join(f"{k}={v!r}" for k, v in getattr(self, "_params", {}).items())
        return f"{type(self).__name__}({params})"


class DemographicParitySquared(BasePenalty):
    """Squared demographic-parity gap of smoothed rates ([SQP] eq. 4): ``r_dp = q^2``.

    For a binary ``S``, ``q = P_1 - P_0`` with ``P_s`` the group mean of the surrogate
    ``phi(out - threshold)``; the paper minimises ``loss + (1/lambda) r_dp``. For ``K > 2`` groups
    ``r_dp = sum_rows q_row^2`` over the rows of :class:`~fairopt.constraints.DemographicParity`.

    Parameters
    ----------
    sensitive : str or list of str
        Binary or categorical sensitive attribute(s) (intersection cells for a list).
    surrogate : str or Surrogate, default "smoothed_step"
    threshold : float, default 0.0
        Decision threshold on ``out``.
    groups : {"one_vs_rest", "pairwise", "marginal"}, default "one_vs_rest"
    """

    def __init__(self, sensitive: str | Sequence[str], surrogate: Any = "smoothed_step", threshold: float = 0.0,
                 groups: str = "one_vs_rest") -> None:
        self._rows = DemographicParity(sensitive, bound=0.0, surrogate=surrogate, threshold=threshold, groups=groups)
        self.name = f"dp_squared[{','.join(self._rows.sensitive)}]"
        self._params = {"sensitive": sensitive, "surrogate": self._rows.surrogate, "threshold": threshold,
                        "groups": groups}

    def setup(self, data: Any) -> None:
        """Size the group rows from the training data's sensitive levels."""
        self._rows.setup(data)

    def __call__(self, out: torch.Tensor, batch: Any) -> torch.Tensor:
        """``sum_rows (P_focus - P_ref)^2`` of the batch, a 0-dim tensor."""
        return (self._rows(out, batch) ** 2).sum()

    def exact(self, out: torch.Tensor, batch: Any) -> torch.Tensor:
        """``r_dp`` with hard predictions ``1{out > threshold}`` ([SQP]'s ``rbar_dp``)."""
        return (self._rows.exact(out, batch) ** 2).sum()


class DistanceCovariancePenalty(BasePenalty):
    """Distance-covariance regulariser ``psi(yhat, s_1, ..., s_d)`` of [DC] eq. 3.1.

    ``kind="dcov"``: dCov~^2(yhat, s) [eq. 3.2]; ``"jdcov"``: JdCov~^2(yhat, s_1, ..., s_d; c)
    [eq. 3.4]; ``"ccdcov"``: dCov~^2 with the concatenated features, categoricals one-hot [eq. 3.6].
    The unbiased U-statistic of the batch (so a mini-batch value is unbiased, and it can be slightly
    negative), as in :class:`fairopt.constraints.DistanceCovariance`. For the sum of marginal terms of
    eq. 3.3, pass one penalty per feature.

    Parameters
    ----------
    sensitive : str or sequence of str
    kind : {"dcov", "jdcov", "ccdcov"}, default "ccdcov"
    c : float, default 1.0
        JdCov constant.
    method : str, default "auto"
        Computation path (:mod:`fairopt.measures.dcov`).
    """

    def __init__(self, sensitive: str | Sequence[str], kind: str = "ccdcov", *, c: float = 1.0,
                 method: str = "auto", block_size: int | None = None) -> None:
        from fairopt.constraints.dcov import DistanceCovariance  # imported lazily (heavy module)

        self._statistic = DistanceCovariance(sensitive, bound=0.0, kind=kind, c=c, method=method,
                                             block_size=block_size)
        self.kind = self._statistic.kind
        self.name = self._statistic.name
        self._params = {"sensitive": list(self._statistic.sensitive), "kind": self.kind, "c": c, "method": method}

    def setup(self, data: Any) -> None:
        """Check that the sensitive features exist with a known kind."""
        self._statistic.setup(data, check_floor=False)  # a penalty has no bound

    def __call__(self, out: torch.Tensor, batch: Any) -> torch.Tensor:
        """The statistic of the batch predictions, a 0-dim tensor."""
        return self._statistic(out, batch).reshape(())


class GeDIPenalty(BasePenalty):
    """GeDI of the predictions, ``||alpha||_1`` ([GeDI] eq. 15-17).

    ``alpha``: the least-squares coefficients of the batch predictions on the centred kernel ``V^k``
    of the sensitive attribute, standardised with the training mean and sd
    (:class:`fairopt.constraints.GeDI`).

    Parameters
    ----------
    sensitive : str
        A continuous or binary sensitive feature.
    degree : int, default 1
    kernel : {"poly", "fourier"}, default "poly"
    standardize : bool or None
        As in :class:`fairopt.constraints.GeDI`.
    """

    def __init__(self, sensitive: str, degree: int = 1, kernel: str = "poly", standardize: bool | None = None) -> None:
        self._gedi = GeDI(sensitive, degree, bound=0.0, kernel=kernel, standardize=standardize)
        self.name = f"gedi[{sensitive}]"
        self._params = {"sensitive": sensitive, "degree": degree, "kernel": kernel, "standardize": standardize}

    def setup(self, data: Any) -> None:
        """Fix the training standardisation and check the attribute and the kernel rank."""
        self._gedi.setup(data)

    def __call__(self, out: torch.Tensor, batch: Any) -> torch.Tensor:
        """``sum_j |alpha_j|`` of the batch predictions, a 0-dim tensor in ``out``'s dtype."""
        return self._gedi.coefficients(out, batch).abs().sum().to(out.dtype)


_FAUCI_METRICS = {
    # name -> (function, needs y, continuous attribute, score (1 is fair) rather than penalty)
    "wdp": (fauci.wdp, False, False, False),
    "wdi": (fauci.wdi, False, False, True),
    "weo": (fauci.weo, True, False, False),
    "gdp": (fauci.gdp, False, True, False),
    "gdi": (fauci.gdi, False, True, True),
    "geo": (fauci.geo, True, True, False),
}


class FaUCI(BasePenalty):
    """A FaUCI fairness metric as a penalty ``F`` in ``E + lambda F`` ([FU] eq. 12).

    On ``h = sigmoid(out)``: ``"wdp"``, ``"weo"`` ([FU] eq. 5, 10) and ``"gdp"``, ``"geo"`` (continuous
    ``A`` in bins; eq. 7, 11) as they are (0 is fair); the scores ``"wdi"``, ``"gdi"`` (eq. 8, 9; 1 is
    fair) enter as ``1 - WDI`` / ``1 - GDI``. Definitions: :mod:`fairopt.measures.fauci`.

    Parameters
    ----------
    metric : {"wdp", "wdi", "weo", "gdp", "gdi", "geo"}
    sensitive : str
        A binary/categorical (W*) or continuous (G*) sensitive feature.
    weights : str, mapping or sequence, optional
        Group/bin weights; default ``"uniform"`` for W* and ``"density"`` for G*.
    bins : int or sequence of float, default 10
        Bins of a continuous attribute (G* only).
    """

    def __init__(self, metric: str, sensitive: str, weights: str | Mapping | Sequence[float] | None = None,
                 bins: int | Sequence[float] = 10) -> None:
        if metric not in _FAUCI_METRICS:
            raise ValueError(f"metric: expected one of {sorted(_FAUCI_METRICS)}, got {metric!r}")
        if not isinstance(sensitive, str) or not sensitive:
            raise ValueError(f"sensitive: expected the name of a sensitive feature, got {sensitive!r}")
        self.metric = metric
        self.sensitive = sensitive
        self._fn, self._needs_y, self._continuous, self._score = _FAUCI_METRICS[metric]
        self.weights = weights if weights is not None else ("density" if self._continuous else "uniform")
        self.bins = bins
        self.name = f"{'1-' if self._score else ''}{metric}[{sensitive}]"
        self._params = {"metric": metric, "sensitive": sensitive, "weights": self.weights, "bins": bins}

    def setup(self, data: Any) -> None:
        """Check the task (binary), the kind of the sensitive feature and that rows are unweighted."""
        require_unweighted(data, "FaUCI")
        task = getattr(data, "task", None)
        if task != "binary":
            raise ValueError(f"data.task: FaUCI metrics need a binary classifier (probabilities), got {task!r}")
        kinds = getattr(data, "sensitive_kinds", None) or {}
        if self.sensitive not in kinds:
            raise ValueError(f"sensitive: unknown name {self.sensitive!r}; available: {sorted(kinds)}")
        continuous = kinds[self.sensitive] == "continuous"
        if continuous != self._continuous:
            expected = "a continuous" if self._continuous else "a binary or categorical"
            raise ValueError(f"sensitive: {self.metric!r} needs {expected} attribute, "
                             f"{self.sensitive!r} is {kinds[self.sensitive]}")

    def __call__(self, out: torch.Tensor, batch: Any) -> torch.Tensor:
        """The metric (or ``1 -`` the score) on ``sigmoid(out)`` of the batch, a 0-dim tensor."""
        h = torch.sigmoid(out)
        s = batch.sensitive[self.sensitive]
        extra = {"bins": self.bins} if self._continuous else {}
        args = (h, s, batch.y) if self._needs_y else (h, s)
        value = self._fn(*args, weights=self.weights, **extra)
        return 1.0 - value if self._score else value
