r"""Constraint information of mini-batch steps from a periodic full-data snapshot.

Stochastic SQP's theory ([SQP] Thm 3.1) takes the constraints as exact; estimated on a mini-batch,
group rates are ratios of means over the few rows near the threshold, noisy in value and
direction, and steps that follow the noise of ``J' y`` lose the objective. A
:class:`ConstraintSnapshot` holds the rows and Jacobian on all rows at ``w_s`` (the cost of one
full-batch iteration) and hands the steps in between their first-order model

.. math:: c(w) \approx c(w_s) + J(w_s) (w - w_s), \qquad J(w) \approx J(w_s),

exact up to ``O(||w - w_s||^2)``, without sampling noise; each step pulls back the objective only.
Refreshes happen at fixed steps of each epoch, and each is a full-data candidate for the returned
model; an engine checkpoint holds the snapshot and its spacing (:meth:`ConstraintSnapshot.state_dict`),
so that a resumed run refreshes where, and measures its drift as, the uninterrupted one does. With a
drift tolerance the spacing adapts: each refresh measures how far the first-order model has drifted
from the rows on all rows,

.. math:: e = \max_i \left| c_i(w) - \left(c_s + J_s (w - w_s)\right)_i \right|,

and halves the steps between refreshes when ``e`` exceeds the tolerance, or doubles them (up to the
fixed spacing) when ``e`` is below a quarter of it: the linearisation is trusted for as many steps
as it stays accurate, as a trust region is for as long as its model predicts the reduction. Each row
has its own tolerance ``tol_i`` (``e`` is then ``max_i |e_i| / tol_i`` against 1);
:func:`drift_tolerances` sizes them from the rows' declared scale (:func:`solvers.contract.row_scale`):
:data:`DEFAULT_DRIFT_TOL` times the scale, rows without a scale unmeasured.
"""

from __future__ import annotations

import math

import torch

from solvers.derivatives import Derivatives
from solvers.problem import flat_parameters
from solvers.validation import check_choice, nonnegative_float, positive_float, positive_int

__all__ = ["DEFAULT_DRIFT_TOL", "ConstraintSnapshot", "drift_tolerances", "refresh_steps"]

#: The default drift tolerance in units of the rows' scale (rate units for group rates: 0.02 is
#: a DI row ``delta P_ref - P_focus`` off by two points of rate). Chosen on the grids of
#: ``benchmarks/sqp_stochastic.py`` (five data sets, binary and several-group attributes).
DEFAULT_DRIFT_TOL = 0.02


def drift_tolerances(option: float | str | None, scales: torch.Tensor) -> torch.Tensor | None:
    """Per-row drift tolerances, float64 ``(m,)`` (``inf``: the row is not measured), or None for the
    fixed schedule. ``option``: None (fixed), a positive float (that tolerance on every row, in the
    rows' own units) or "auto" (:data:`DEFAULT_DRIFT_TOL` times each row's declared scale ``scales``,
    NaN where a row declares none; None when no row does)."""
    scales = torch.as_tensor(scales, dtype=torch.float64).reshape(-1)
    if option is None or not scales.numel():
        return None
    if isinstance(option, str):
        check_choice(option, ("auto",), "constraint_drift_tol")
        if bool(torch.isnan(scales).all()):
            return None
        return torch.where(torch.isnan(scales), torch.full_like(scales, math.inf), DEFAULT_DRIFT_TOL * scales)
    return torch.full_like(scales, positive_float(option, "constraint_drift_tol"))


def refresh_steps(steps_per_epoch: int, refreshes: int) -> int:
    """Steps between two refreshes: ``ceil(K / R)`` for ``K`` steps per epoch and ``R`` refreshes
    per epoch, at least 1 (every step refreshes when ``R >= K``)."""
    return max(1, math.ceil(int(steps_per_epoch) / max(1, int(refreshes))))


class ConstraintSnapshot:
    """Rows ``c_s``, Jacobian ``J_s`` (float64) and parameters ``w_s`` of the last full-data pass, due
    again at steps ``0, every, 2 every, ...`` of every epoch (:func:`refresh_steps`). With
    ``drift_tol`` (one positive number for every row, or one per row, ``inf`` for a row not
    measured), ``every`` adapts between 1 and its starting value (the module docstring) and
    ``drift`` is the last measured drift in units of the tolerance, ``max_i |e_i| / tol_i`` (None
    before the second refresh, and without ``drift_tol``, which measures nothing)."""

    #: Where every row's drift is below ``1 / DRIFT_RELAX`` of its tolerance the spacing doubles again.
    DRIFT_RELAX = 4.0

    def __init__(self, every: int, drift_tol: float | torch.Tensor | None = None) -> None:
        if int(every) < 1:
            raise ValueError(f"every: expected a positive integer, got {every!r}")
        self.every = self.longest = int(every)
        self.drift_tol = None if drift_tol is None else _tolerances(drift_tol)
        self.drift: float | None = None
        self.params: torch.Tensor | None = None
        self.c: torch.Tensor | None = None
        self.J: torch.Tensor | None = None
        self._converted: torch.Tensor | None = None  # J in the steps' dtype (_jacobian_as)

    def due(self, step_in_epoch: int) -> bool:
        """Whether step ``step_in_epoch`` (0-based, within its epoch) refreshes the snapshot."""
        return self.params is None or step_in_epoch % self.every == 0

    def refresh(self, params: list[torch.Tensor], full: Derivatives, measure: bool = True) -> None:
        """Store the full-data rows and Jacobian ``full`` taken at the current ``params`` (with a drift
        tolerance and ``measure``, first measure the old snapshot's drift there and adapt the spacing;
        ``measure=False`` after the divergence guard sent the parameters back, which is no drift of
        the steps')."""
        w = flat_parameters(params).to(torch.float64)
        c = full.c.detach().to(torch.float64)
        if measure and self.drift_tol is not None and self.params is not None and c.numel():
            error = (c - self.c - self.J @ (w - self.params)).abs()
            self.drift = float((error / self.drift_tol).max())  # one tolerance broadcasts over the rows
            if self.drift > 1.0:
                self.every = max(1, self.every // 2)
            elif self.drift < 1.0 / self.DRIFT_RELAX:
                self.every = min(self.longest, 2 * self.every)
        self.params = w
        self.c = c.clone()
        self.J = full.J.detach().to(torch.float64).clone()
        self._converted = None

    def state_dict(self) -> dict:
        """What a resumed fit needs to refresh where, and as, the uninterrupted one does: the spacing
        ``every``, the last ``drift`` and the snapshot ``params``, ``c``, ``J`` (None before the first
        refresh), from which the first refresh after the resume measures its drift."""
        copy = lambda t: None if t is None else t.clone()  # noqa: E731
        return {"every": self.every, "drift": self.drift, "params": copy(self.params), "c": copy(self.c),
                "J": copy(self.J)}

    def load_state_dict(self, saved: dict, n_params: int, n_rows: int) -> None:
        """Continue from the :meth:`state_dict` ``saved`` of a fit with ``n_params`` parameters and
        ``n_rows`` constraint rows; the spacing is capped at this snapshot's own longest (a resumed fit
        may refresh more often per epoch). ValueError for a state of another shape."""
        if not isinstance(saved, dict) or not all(k in saved for k in ("every", "drift", "params", "c", "J")):
            raise ValueError("resume: the checkpoint's snapshot state lacks every, drift, params, c or J")
        try:
            every = positive_int(saved["every"], "snapshot every")
            drift = None if saved["drift"] is None else nonnegative_float(saved["drift"], "snapshot drift")
        except ValueError as exc:
            raise ValueError(f"resume: invalid checkpoint state, {exc}") from None
        arrays = [saved[k] for k in ("params", "c", "J")]
        if any(a is not None for a in arrays):
            shapes = {"params": (n_params,), "c": (n_rows,), "J": (n_rows, n_params)}
            for name, expected in shapes.items():
                a = saved[name]
                if not isinstance(a, torch.Tensor) or tuple(a.shape) != expected:
                    found = tuple(a.shape) if isinstance(a, torch.Tensor) else type(a).__name__
                    raise ValueError(f"resume: the checkpoint's snapshot {name} has shape {found}, this fit needs "
                                     f"{expected}")
                if not bool(torch.isfinite(a).all()):
                    raise ValueError(f"resume: the checkpoint's snapshot {name} has non-finite entries")
            self.params, self.c, self.J = (a.detach().to(torch.float64).clone() for a in arrays)
            self._converted = None
        self.every = min(self.longest, every)
        self.drift = drift

    def linearised(self, params: list[torch.Tensor], objective: Derivatives) -> Derivatives:
        """``objective`` (``f``, ``g`` of a batch) with the snapshot's first-order rows at ``params``:
        ``c = c_s + J_s (w - w_s)``, ``J = J_s``; no exact rows (they are measured at refreshes)."""
        if self.params is None:
            raise RuntimeError("ConstraintSnapshot: refresh() before linearised()")
        shift = flat_parameters(params).to(torch.float64) - self.params
        c = self.c + self.J @ shift
        return Derivatives(objective.f, objective.g, c, self._jacobian_as(objective.g.dtype), None,
                           objective.t_forward, objective.t_jacobian)

    def _jacobian_as(self, dtype: torch.dtype) -> torch.Tensor:
        """``J_s`` in ``dtype`` (the steps' gradient dtype), converted once per refresh."""
        cached = self._converted
        if cached is None or cached.dtype != dtype:
            cached = self._converted = self.J.to(dtype)
        return cached


def _tolerances(drift_tol: float | torch.Tensor) -> torch.Tensor:
    """``drift_tol`` as a float64 tensor of positive tolerances (``inf`` allowed for an unmeasured row)."""
    if isinstance(drift_tol, torch.Tensor):
        tol = drift_tol.detach().to(torch.float64).reshape(-1)
        if tol.numel() == 0 or bool(torch.isnan(tol).any()) or bool((tol <= 0).any()):
            raise ValueError(f"drift_tol: expected positive tolerances (inf: a row not measured), got {tol.tolist()}")
        return tol
    return torch.tensor([positive_float(drift_tol, "drift_tol")], dtype=torch.float64)
