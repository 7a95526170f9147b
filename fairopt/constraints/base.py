"""Base class for fairness constraints (the :class:`solvers.problem.Constraint` protocol)."""

from __future__ import annotations

import copy
import warnings
from typing import Any

import torch

from fairopt._validation import as_1d_tensor
from fairopt.exceptions import SmallGroupWarning
from solvers.problem import LinearEncoding, row_violations

__all__ = ["BaseConstraint", "release_caches", "set_up_on_other_rows"]


class BaseConstraint:
    """Common machinery: bounds as float64 tensors, row names, violation, repr, scikit-learn parameters.

    Subclasses set ``self.lower``/``self.upper`` (shape (m,)) in ``__init__`` or :meth:`setup` and implement
    ``__call__`` (smooth rows) and :meth:`exact` (hard-prediction rows). The rows enforce one user-facing
    bound on one measure (``DisparateImpact(delta=0.8)`` bounds the hard DI ratio from below); a constraint
    that implements ``realised(out, batch) -> float`` (that measure on the bound's scale) and sets
    :attr:`bound_sense` is read by :func:`fairopt.evaluation.realised_measures` without per-class code.
    """

    name: str = "constraint"
    #: How the bound argument bounds :meth:`realised`: "upper" (met when ``realised <= bound``)
    #: or "lower" (a ratio ``delta``, met when ``realised >= delta``).
    bound_sense: str = "upper"
    #: True when :meth:`exact` returns the values of ``__call__`` (no surrogate: the smooth rows
    #: are the measure itself). An engine may then take the exact rows from the smooth ones
    #: instead of evaluating the measure twice.
    smooth_is_exact: bool = False
    #: How the cost of the rows on ``n`` rows grows: "linear" (group rates, covariances, GeDI) or
    #: "quadratic" (pairwise statistics). Mini-batch engines evaluate "linear" rows on all rows
    #: from time to time (:mod:`solvers.sqp.snapshot`) and keep "quadratic" ones on their batches.
    cost_on_all_rows: str = "linear"
    #: The magnitude in which the rows' values are read (1 for rates), or None where the rows have
    #: no natural scale (covariances, GeDI, distance covariance: units of the data). Engines size
    #: default tolerances on row values with it (mini-batch SQP's snapshot drift).
    row_scale: float | None = None
    lower: torch.Tensor
    upper: torch.Tensor
    row_names: list[str] | None = None

    def setup(self, data: Any) -> None:
        """Prepare data-dependent quantities from the training data (no-op by default)."""

    def __call__(self, out: torch.Tensor, batch: Any) -> torch.Tensor:  # pragma: no cover
        raise NotImplementedError

    def exact(self, out: torch.Tensor, batch: Any) -> torch.Tensor:  # pragma: no cover
        raise NotImplementedError

    def target_encoding(self, batch: Any) -> LinearEncoding | None:
        """No linear target encoding unless a subclass provides one."""
        return None

    @property
    def measure(self) -> str:
        """The name of the bounded measure (the constraint's name unless a subclass says more)."""
        return self.name

    @property
    def n_rows(self) -> int:
        return int(self.lower.numel())

    def _set_bounds(self, lower: Any, upper: Any, row_names: list[str] | None = None) -> None:
        self.lower = torch.as_tensor(lower, dtype=torch.float64).reshape(-1)
        self.upper = torch.as_tensor(upper, dtype=torch.float64).reshape(-1)
        if self.lower.shape != self.upper.shape:
            raise ValueError(f"lower/upper: shapes differ ({self.lower.shape} vs {self.upper.shape})")
        self.row_names = row_names

    def clear_cache(self) -> None:
        """Drop the per-batch operator cache (``_cache``, of constraints that keep one): it holds
        references to the batches, the training data, which would otherwise live, and be pickled,
        with whatever holds the constraint."""
        cache = getattr(self, "_cache", None)
        if cache is not None:
            cache.clear()

    def violation(self, out: torch.Tensor, batch: Any, exact: bool = True) -> torch.Tensor:
        """Per-row violation of the exact (default) or surrogate values."""
        c = self.exact(out, batch) if exact else self(out, batch)
        return row_violations(c, self.lower, self.upper)

    def __repr__(self) -> str:
        params = ", ".join(f"{k}={v!r}" for k, v in self.get_params().items())
        return f"{type(self).__name__}({params})"

    # ------------------------------------------------------------------ parameters
    # The scikit-learn parameter protocol, so that an estimator holding constraint objects
    # can be cloned (GridSearchCV, cross_val_score, every meta-estimator) and their
    # parameters set as nested parameters. A subclass stores its constructor arguments,
    # under the constructor's names, in ``self._params``.

    def get_params(self, deep: bool = True) -> dict:
        """Constructor parameters (for repr, specs, persistence and scikit-learn; ``deep`` is ignored)."""
        return dict(getattr(self, "_params", {}))

    def set_params(self, **params: Any) -> "BaseConstraint":
        """Change constructor parameters in place and return ``self``.

        The constraint becomes ``type(self)(**{**self.get_params(), **params})``: values are validated as by
        the constructor (nothing changes on error) and the state of :meth:`setup` is dropped. ``ValueError``
        for an unknown name or invalid value.
        """
        if not params:
            return self
        current = self.get_params(deep=False)
        unknown = sorted(set(params) - set(current))
        if unknown:
            raise ValueError(f"set_params: {type(self).__name__} has no parameter(s) {unknown}; "
                             f"its parameters are {sorted(current)}")
        fresh = type(self)(**{**current, **params})
        self.__dict__.clear()
        self.__dict__.update(fresh.__dict__)
        return self

    def __sklearn_clone__(self) -> "BaseConstraint":
        """A new, not set up constraint from deep copies of the constructor parameters (:func:`sklearn.base.clone`)."""
        if "_params" not in vars(self):
            return copy.deepcopy(self)
        return type(self)(**{k: copy.deepcopy(v) for k, v in self.get_params(deep=False).items()})


def observed_target(data: Any) -> torch.Tensor:
    """The training target on the scale of the predictions a constraint measures: ``data.y`` (labels 0/1 beside
    a classifier's probabilities, or numbers), and for a Poisson task the observed rate ``y / exposure`` beside
    the predicted rate ``exp(out)``. What a relative bound (GeDI, distance covariance) is a share of."""
    y = as_1d_tensor(data.y, "data.y")
    exposure = getattr(data, "exposure", None)
    if getattr(data, "task", None) == "poisson" and exposure is not None:
        y = y / as_1d_tensor(exposure, "data.exposure").to(y.dtype)
    return y


def release_caches(constraints: Any) -> None:
    """:meth:`BaseConstraint.clear_cache` of every constraint in ``constraints`` that offers it (a
    user's constraint without it keeps no cache of ours)."""
    for c in constraints:
        clear = getattr(c, "clear_cache", None)
        if callable(clear):
            clear()


def set_up_on_other_rows(constraints: Any, data: Any) -> None:
    """``setup(data)`` of every constraint in ``constraints`` on rows a model is not fitted to (held-out,
    report or certification rows), without the :class:`~fairopt.exceptions.SmallGroupWarning` about small
    or empty groups: that warning is about the training rows, where the fit's own set-up issues it."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", SmallGroupWarning)
        for c in constraints:
            c.setup(data)
