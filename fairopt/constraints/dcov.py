"""Distance-covariance fairness constraint [DC eq 3.2, 3.4, 3.6].

One constraint row ``dependence(prediction(out), s) <= bound``: the dependence between the
model's predictions and the sensitive features, measured by the unbiased dCov~^2, the
bias-corrected JdCov~^2 of Chakraborty & Zhang, or CCdCov (:mod:`fairopt.measures.dcov`).
Used as a hard constraint by the engines or as the penalty of [DC eq 3.1].
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Mapping
from typing import Any, Callable, Sequence

import torch

from fairopt.constraints.base import BaseConstraint
from fairopt._validation import measure_bound, require_unweighted, sensitive_names
from fairopt._validation import check_choice, check_seed, positive_float, positive_int
from fairopt.exceptions import FairnessWarning
from fairopt.measures.dcov import JOINT_METHODS, METHODS, ccdcov, jdcov

__all__ = ["DistanceCovariance", "prediction_from_output"]

KINDS = ("dcov", "jdcov", "ccdcov")
SENSITIVE_KINDS = ("binary", "categorical", "continuous")

_PREDICTIONS: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "binary": torch.sigmoid,
    "regression": lambda out: out,
    "poisson": torch.exp,
}


def prediction_from_output(out: torch.Tensor, task: str) -> torch.Tensor:
    """The prediction the dCov regularisers of [DC] act on, from the model output.

    ``task="binary"``: the probability ``sigmoid(out)`` (``out`` is a logit; [DC sec 5.1]
    regularises predicted recidivism probabilities); ``"regression"``: ``out`` itself;
    ``"poisson"``: the rate ``exp(out)`` (``out`` is a log-rate, exposure enters only the
    loss as an offset; [DC sec 5.2] regularises the predicted claim frequency).
    """
    if task not in _PREDICTIONS:
        raise ValueError(f"batch.task: expected one of {list(_PREDICTIONS)}, got {task!r}")
    return _PREDICTIONS[task](out)


def _batch_mapping(batch: Any, field: str) -> Mapping:
    value = getattr(batch, field, None)
    if not isinstance(value, Mapping):
        raise ValueError(f"batch: expected a FairData-like object with a dict `{field}`, got {type(batch).__name__}")
    return value


class DistanceCovariance(BaseConstraint):
    """Bound on the distance covariance between predictions and sensitive features.

    One row, ``-inf <= D(yhat, s_1, ..., s_d) <= bound``, with ``yhat`` the prediction
    (:func:`prediction_from_output`: ``sigmoid(out)`` for ``batch.task="binary"``,
    ``out`` for ``"regression"``, ``exp(out)`` for ``"poisson"``) and ``D``:

    ``kind="dcov"``
        dCov~^2(yhat, s) [DC eq 3.2] with ``s`` the sensitive vector; with several names
        ``s`` is their concatenation, so the value equals ``"ccdcov"``.
    ``kind="ccdcov"``
        CCdCov(yhat, (s_1, ..., s_d)) = dCov~^2 with the concatenated features [DC eq 3.6].
    ``kind="jdcov"``
        JdCov~^2(yhat, s_1, ..., s_d; c) of Chakraborty & Zhang [DC eq 3.4]; it also
        contains the dependence among the sensitive features themselves (a constant in
        ``out``), so a bound below that level is infeasible [DC sec 3.2.2].

    Sensitive columns come from the batch (``batch.sensitive[name]``, typed by
    ``batch.sensitive_kinds[name]``): binary features enter as their 0/1 value,
    categorical codes one-hot (distance sqrt(2) between different levels; the distance
    between integer codes would depend on the arbitrary order of the levels, [DC App
    B.1]), continuous features as their raw values (the statistics are not
    scale-invariant; rescale the column to change its weight in a concatenation).

    The U-statistics are unbiased for the population quantity on every batch, so a
    mini-batch value is an unbiased estimate. The value is differentiable in ``out``
    (tie-safe subgradient, sign(0) = 0) and can be slightly negative; it is never
    clamped.

    Parameters
    ----------
    sensitive : str or sequence of str
        Names of sensitive features of the batch.
    bound : float
        Upper bound, >= 0.
    kind : {"dcov", "jdcov", "ccdcov"}
    c : float
        Constant of JdCov~^2 (``kind="jdcov"`` only), > 0; 1 as in [DC] and the authors'
        package.
    method : str
        Computation path of :mod:`fairopt.measures.dcov`. ``"auto"`` picks the exact
        grouped path for binary/categorical features (and integer-valued continuous ones
        such as age in years, through their joint cells), the univariate path for one
        continuous feature, and the exact O(n^2) blocked path when a continuous feature
        with (almost) all values distinct is combined with others; ``"projection"``
        approximates that last case in O(n_projections n log n). ``kind="jdcov"``
        accepts ``"auto"``, ``"grouped"``, ``"blocked"``.
    n_projections, seed : int
        Directions and their seed for ``method="projection"`` (same directions on every
        call).
    block_size : int, optional
        Rows per block of the blocked path.
    """

    def __init__(
        self,
        sensitive: str | Sequence[str],
        bound: float,
        kind: str = "dcov",
        *,
        c: float = 1.0,
        method: str = "auto",
        n_projections: int = 50,
        seed: int = 0,
        block_size: int | None = None,
    ) -> None:
        self.sensitive = sensitive_names(sensitive)
        self.kind = check_choice(kind, KINDS, "kind")
        self.bound = measure_bound(bound, "bound", self.kind)
        self.c = positive_float(c, "c")
        self.method = check_choice(method, JOINT_METHODS if self.kind == "jdcov" else METHODS, "method")
        self.n_projections = positive_int(n_projections, "n_projections")
        self.seed = check_seed(seed)
        self.block_size = None if block_size is None else positive_int(block_size, "block_size")
        self.name = f"{self.kind}[{','.join(self.sensitive)}]"
        self._set_bounds([-math.inf], [self.bound], row_names=[self.name])
        self._params = {
            "sensitive": list(self.sensitive),
            "bound": self.bound,
            "kind": self.kind,
            "c": self.c,
            "method": self.method,
            "n_projections": self.n_projections,
            "seed": self.seed,
            "block_size": block_size,
        }

    def setup(self, data: Any, check_floor: bool = True) -> None:
        """Check that the sensitive names exist in ``data`` with a known kind and, for JdCov,
        that the bound is above the value of a constant prediction (``check_floor=False``
        skips it: a penalty that only reuses the statistic has no bound).

        Raises ``ValueError`` for data with per-row weights (``data.weights``): the
        distance-covariance U-statistics have no weighted version here yet.
        """
        require_unweighted(data, "Distance covariance")
        self._columns(data)
        if self.kind == "jdcov" and check_floor:
            self._check_floor(data)

    def _check_floor(self, data: Any) -> None:
        """Warn (:class:`~fairopt.exceptions.FairnessWarning`) when the bound is below the
        JdCov of a constant prediction on ``data``: the terms among the sensitive features
        alone, ``c JdCov~(S_1, ..., S_k)``, which no prediction removes (a U-statistic can
        dip slightly below it, so this is a warning, not an error)."""
        out = torch.zeros(len(data), dtype=torch.float64)
        floor = float(self.exact(out, data).reshape(-1)[0])
        if self.bound < floor - 1e-12:
            warnings.warn(
                f"{self.name}: bound {self.bound:g} is below {floor:.6g}, the JdCov of a constant prediction on "
                "the training rows (the dependence among the sensitive features themselves, which no model "
                "removes); the bound is most likely unattainable. Use a bound above that floor.",
                FairnessWarning, stacklevel=3)

    def _columns(self, batch: Any) -> tuple[list[torch.Tensor], list[bool]]:
        """The sensitive columns and, per column, whether to one-hot encode it."""
        columns = _batch_mapping(batch, "sensitive")
        kinds = _batch_mapping(batch, "sensitive_kinds")
        values, categorical = [], []
        for name in self.sensitive:
            if name not in columns or name not in kinds:
                raise ValueError(f"sensitive: unknown name {name!r}; available: {sorted(columns)}")
            kind = kinds[name]
            if kind not in SENSITIVE_KINDS:
                raise ValueError(f"sensitive_kinds[{name!r}]: expected one of {list(SENSITIVE_KINDS)}, got {kind!r}")
            values.append(columns[name])
            categorical.append(kind == "categorical")
        return values, categorical

    def __call__(self, out: torch.Tensor, batch: Any) -> torch.Tensor:
        """The statistic of the predictions on this batch, shape (1,), differentiable in ``out``."""
        if not isinstance(out, torch.Tensor):
            raise ValueError(f"out: expected a torch.Tensor, got {type(out).__name__}")
        if out.dim() != 1 or out.shape[0] != len(batch):
            raise ValueError(f"out: expected shape ({len(batch)},), got {tuple(out.shape)}")
        prediction = prediction_from_output(out, getattr(batch, "task", None))
        columns, categorical = self._columns(batch)
        if self.kind == "jdcov":
            value = jdcov(
                prediction, *columns, c=self.c, categorical=categorical, method=self.method,
                block_size=self.block_size,
            )
        else:
            value = ccdcov(
                prediction, *columns, categorical=categorical, method=self.method,
                n_projections=self.n_projections, seed=self.seed, block_size=self.block_size,
            )
        return value.reshape(1)

    #: :meth:`exact` is ``__call__`` without gradient (an engine reuses the smooth value).
    smooth_is_exact = True
    #: The U-statistics compare every pair of rows (O(n^2) on all rows, unbiased on a batch).
    cost_on_all_rows = "quadratic"

    def exact(self, out: torch.Tensor, batch: Any) -> torch.Tensor:
        """The same value without gradient: dCov is already exact on the predictions.

        There is no smooth surrogate here: the statistic is computed exactly (all paths
        but ``method="projection"``) on the predicted probabilities / values / rates.
        """
        with torch.no_grad():
            return self(out.detach(), batch)

    def realised(self, out: torch.Tensor, batch: Any) -> float:
        """The bounded measure on ``batch``: the statistic of :meth:`exact` (``bound`` bounds
        it from above; a U-statistic, so it can dip slightly below 0)."""
        return float(self.exact(out, batch).reshape(-1)[0])
