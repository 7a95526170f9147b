"""Distance-covariance fairness constraint [DC eq 3.2, 3.4, 3.6]: ``dependence(prediction(out), s) <= bound``."""

from __future__ import annotations

import math
import warnings
from collections.abc import Mapping
from typing import Any, Callable, Sequence

import torch

from fairopt.constraints.base import BaseConstraint, observed_target
from fairopt._validation import measure_bound, require_unweighted, sensitive_names
from fairopt._validation import check_choice, check_flag, check_seed, positive_float, positive_int
from fairopt.constraints.rows import group_code_hint
from fairopt.exceptions import FairnessWarning, UnknownSensitiveError, warn_at_caller
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
    """The prediction the dCov regularisers of [DC] act on: ``sigmoid(out)`` (binary, [DC sec 5.1]), ``out``
    (regression) or the rate ``exp(out)`` (Poisson, [DC sec 5.2]).
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

    One row ``D(yhat, s_1, ..., s_d) <= bound`` with ``yhat`` from :func:`prediction_from_output` and ``D``:

    - ``"dcov"``: dCov~^2(yhat, s) [DC eq 3.2], ``s`` the concatenated features (then equal to ``"ccdcov"``);
    - ``"ccdcov"``: CCdCov, dCov~^2 with the concatenated features [DC eq 3.6];
    - ``"jdcov"``: JdCov~^2(yhat, s_1, ..., s_d; c) [DC eq 3.4]; it includes the dependence among the
      sensitive features (constant in ``out``), so a bound below it is infeasible [DC sec 3.2.2].

    Binary features enter as 0/1, categorical ones one-hot (integer codes would make distances depend on
    the level order, [DC App B.1]), continuous ones raw (the statistics are not scale-invariant). The
    U-statistics are unbiased on every batch, may dip below 0 and are never clamped.

    Parameters
    ----------
    sensitive : str or sequence of str
        Names of sensitive features of the batch.
    bound : float
        Upper bound, >= 0.
    kind : {"dcov", "jdcov", "ccdcov"}
    c : float
        Constant of JdCov~^2 (``kind="jdcov"``), > 0.
    method : str
        Computation path of :mod:`fairopt.measures.dcov` (``"auto"`` picks an exact one; ``"projection"``
        approximates a distinct-valued continuous feature combined with others in O(n_projections n log n)).
    n_projections, seed : int
        Directions and their seed for ``method="projection"``.
    block_size : int, optional
        Rows per block of the blocked path.
    relative : bool, default False
        ``bound`` is a share of the training target's own statistic (kinds ``"dcov"`` and ``"ccdcov"``): the
        row holds ``D(yhat, s) <= bound * D(y, s)``, with ``y`` on the predictions' scale (labels 0/1 for a
        classifier, the observed rate ``y / exposure`` for a Poisson task), resolved by :meth:`setup` into
        :attr:`absolute_bound`; the realised measure is then ``D(yhat, s) / D(y, s)``. A bound of 0.25 keeps a
        quarter of the dependence the data themselves carry, whatever the units of the target.
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
        relative: bool = False,
    ) -> None:
        self.sensitive = sensitive_names(sensitive)
        self.kind = check_choice(kind, KINDS, "kind")
        self.bound = measure_bound(bound, "bound", self.kind)
        self.relative = check_flag(relative, "relative")
        if self.relative and self.kind == "jdcov":
            raise ValueError("relative: only for kind 'dcov' or 'ccdcov' (JdCov holds the sensitive features' own "
                             "dependence, which no share of the target's measures)")
        #: Set up with ``relative=True``: the statistic of the training target (on the predictions' scale) and
        #: the absolute bound ``bound * reference`` the row holds; None otherwise.
        self.reference: float | None = None
        self.absolute_bound: float | None = None
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
            "relative": self.relative,
        }

    def setup(self, data: Any, check_floor: bool = True) -> None:
        """Check the sensitive names and kinds and, for JdCov, warn when the bound is below a constant
        prediction's value (``check_floor=False`` skips it). ``ValueError`` for weighted data (no weighted
        U-statistic).
        """
        require_unweighted(data, "Distance covariance")
        self._columns(data)
        kinds = _batch_mapping(data, "sensitive_kinds")
        continuous = [name for name in self.sensitive if kinds.get(name) == "continuous"]  # 0/1 codes are harmless
        hint = group_code_hint(data, continuous) if continuous else ""
        if hint:  # label-encoded groups read as numbers: |3 - 7| would count as a distance between groups
            warn_at_caller(f"{self.name}: continuous sensitive features enter the distance covariance as numbers, "
                           f"through the distances between their values{hint}", FairnessWarning)
        if self.relative:
            self.reference = float(self._statistic(observed_target(data).double(), data).reshape(-1)[0])
            if not self.reference > 0:
                raise ValueError(f"relative: the training target's {self.kind} with {list(self.sensitive)} is "
                                 f"{self.reference:.3g}, not above 0 (the unbiased statistic dips below 0 where "
                                 "the dependence is too weak to measure): a relative bound has nothing to be a "
                                 "share of; give an absolute bound")
            self.absolute_bound = self.bound * self.reference
            self._set_bounds([-math.inf], [self.absolute_bound], row_names=[self.name])
        if self.kind == "jdcov" and check_floor:
            self._check_floor(data)

    def _check_floor(self, data: Any) -> None:
        """Warn when the bound is below ``c JdCov~(S_1, ..., S_k)``, the JdCov of a constant prediction."""
        out = torch.zeros(len(data), dtype=torch.float64)
        floor = float(self.exact(out, data).reshape(-1)[0])
        if self.bound < floor - 1e-12:
            warnings.warn(
                f"{self.name}: bound {self.bound:g} is below {floor:.6g}, the JdCov of a constant prediction on "
                "the training rows (the dependence among the sensitive features themselves, which no model "
                "removes). A model meets such a bound only where its own terms turn negative (the U-statistics "
                "can), which says nothing of fairness: use a bound above that value.",
                FairnessWarning, stacklevel=3)

    def _columns(self, batch: Any) -> tuple[list[torch.Tensor], list[bool]]:
        """The sensitive columns and, per column, whether to one-hot encode it."""
        columns = _batch_mapping(batch, "sensitive")
        kinds = _batch_mapping(batch, "sensitive_kinds")
        values, categorical = [], []
        for name in self.sensitive:
            if name not in columns or name not in kinds:
                raise UnknownSensitiveError(name, columns)
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
        return self._statistic(prediction_from_output(out, getattr(batch, "task", None)), batch)

    def _statistic(self, prediction: torch.Tensor, batch: Any) -> torch.Tensor:
        """The statistic of ``prediction`` (on the response scale) with the batch's sensitive columns, (1,)."""
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

    @property
    def row_floor(self) -> float | None:
        """0 for ``dcov`` and ``ccdcov``: a constant prediction's statistic, and the least value of the
        population measure (the U-statistics dip below it only by sampling noise). A held-out ``margin`` that
        takes the bound below it would train towards negative noise, so
        :class:`fairopt.certificate.TightenedConstraint` refuses it. None for ``jdcov`` (its constant-prediction
        value is the sensitive features' own dependence, checked by :meth:`setup`)."""
        return None if self.kind == "jdcov" else 0.0

    def exact(self, out: torch.Tensor, batch: Any) -> torch.Tensor:
        """The same value without gradient: the statistic has no surrogate."""
        with torch.no_grad():
            return self(out.detach(), batch)

    def realised(self, out: torch.Tensor, batch: Any) -> float:
        """The bounded measure on ``batch``: the statistic of :meth:`exact`; with ``relative=True`` divided by
        :attr:`reference` (the share of the training target's own statistic that ``bound`` is)."""
        value = float(self.exact(out, batch).reshape(-1)[0])
        if not self.relative:
            return value
        if self.reference is None:
            raise ValueError(f"{self.name}: a relative bound is resolved by setup(data) on the training rows first")
        return value / self.reference if self.reference > 0 else (0.0 if value <= 0 else math.inf)
