"""Lagrangian dual training (SBR / LDF, Fioretto et al. 2021).

For constraint rows ``l <= c(w) <= u`` with per-row violations
``v_i(w) = max(c_i(w) - u_i, 0) + max(l_i - c_i(w), 0)``, each step on a mini-batch ``B``:

1. primal: one optimiser step on ``f_B(w) + sum_i lambda_i v_i,B(w)`` (``lambda`` fixed);
2. dual: ``lambda_i <- max(0, lambda_i + rho v_i,B)`` with the violations of the same batch
   at the parameters of step 1 before it moved (``dual_update="ascent"``), or one Adam
   ascent step on ``lambda`` with gradient ``v_B`` followed by the projection onto
   ``lambda >= 0`` (``dual_update="adam"``, the GeDI authors' SBR code; lr 1e-3).

``dual_update="signed"`` is projected dual ascent on ``s_i(w) <= 0`` with the signed excess
``s_i = max(c_i - u_i, l_i - c_i)``: primal term ``sum_i lambda_i s_i,B``, update
``lambda_i <- max(0, lambda_i + rho s_i,B)``, the primal-dual (Arrow-Hurwicz) method whose fixed
points are the KKT points. The hinge updates only increase ``lambda``, so an overshooting first
step leaves a penalty steeper than needed and feasible iterates inside the bound, short of the
optimum. Unlike LDF's Algorithm 1 (once per epoch), the dual update follows every primal step with
``rho = dual_lr``, as in the SBR code; full-batch training makes the two coincide.

``calibrate_exact=True`` takes the rows' level from the exact rows ``e`` (hard rates) of the batch and only
their gradient from the constraints' calibrated form ``c~`` (:class:`solvers.contract.CalibratedForm`, spread
as :func:`solvers.problem.calibrated_spread`): ``c = c~ + sg(e - c~)``, ``sg`` without gradient, in the
primal term and the dual update alike, the calibration of :class:`solvers.StochasticSQP`'s rows.
"""

from __future__ import annotations

import math
from typing import Any, Callable, Sequence

import torch
from torch import nn

from solvers.history import COLUMN_C, COLUMN_VIOL, FitResult
from solvers.losses import LossFn, check_targets, get_loss
from solvers.outcome import BestIterate, warn_if_poor_first_order_fit, warn_unmet
from solvers.output_shift import RescueInputs, shift_output
from solvers.penalty import FirstOrderTrainer
from solvers.problem import (Constraint, as_constraint_set, calibrated_spread, changes_in_eval_mode, check_dataset,
                             check_outputs_differentiable, eval_mode, exact_rows, row_violations, trainable_parameters)
from solvers.sampling import covers_all_rows
from solvers.validation import check_choice, positive_float

__all__ = ["LagrangianDual", "DUAL_UPDATES"]

DUAL_UPDATES = ("ascent", "adam", "signed")
_DEFAULT_DUAL_LR = {"ascent": 1.0, "adam": 1e-3, "signed": 1.0}



class LagrangianDual(FirstOrderTrainer):
    r"""Primal-dual training of ``min_w f(w) s.t. l <= c(w) <= u`` by Lagrangian duality.

    The iteration of the module docstring (SBR: Fioretto, Van Hentenryck, Mak, Tran, Baldo,
    Lombardi, "Lagrangian Duality for Constrained Deep Learning", 2021), on (weighted) batches.

    Parameters
    ----------
    epochs : int, default 100
    lr : float, default 1e-3
        Learning rate of the primal optimiser.
    dual_lr : float, optional
        ``rho`` of the ascent step, or Adam's learning rate on ``lambda``; default 1.0 for
        ``"ascent"`` and ``"signed"``, 1e-3 for ``"adam"`` (the GeDI SBR code).
    dual_update : {"ascent", "adam", "signed"}, default "ascent"
        The hinge updates of SBR (``"ascent"``, ``"adam"``) or projected dual ascent on the
        signed excess (``"signed"``, module docstring).
    batch_size : int or None, default None
    optimizer : {"adam", "sgd", "adahessian"}, default "adam"
        Primal optimiser (:func:`solvers.optimizers.make_optimizer`).
    multipliers0 : float, default 0.0
        Initial value of every ``lambda_i`` (>= 0).
    seed : int, default 0
    optimizer_options : dict, optional
    tol : float, default 1e-4
        Stationarity tolerance of the Lagrangian (max-abs gradient, full data).
    feasibility_tol : float, default 1e-6
        Exact total violation on the full data allowed for ``converged``.
    verbose, callbacks, lr_schedule
        As in :class:`solvers.Penalty` (``lr_schedule``: the primal step's; the dual step stays ``dual_lr``).
    calibrate_exact : bool, default False
        The rows' values (primal term, dual update, history) are the batch's exact rows and their gradient
        the calibrated form's (module docstring): for a smoothed step whose slope, nonzero on a handful of
        a batch's rows, gives a noisy direction. The estimators set it for a classifier on mini-batches
        (:func:`fairopt.training.first_order_minibatch_defaults`).

    History columns: ``f``, ``objective`` (the batch Lagrangian), ``c[row]``, ``viol[row]`` (surrogate, or
    exact with ``calibrate_exact``; before the step), ``V``, ``V_exact``, ``lambda[row]`` (after the dual update).

    Without constraint rows there is no Lagrangian term: the iterates are step for step those of
    :class:`solvers.Penalty` without penalties, and the returned model is the epoch-end iterate of
    lowest loss.
    """

    engine = "lagrangian"

    def __init__(
        self,
        epochs: int = 100,
        lr: float = 1e-3,
        dual_lr: float | None = None,
        dual_update: str = "ascent",
        batch_size: int | None = None,
        seed: int = 0,
        *,
        optimizer: str = "adam",
        multipliers0: float = 0.0,
        optimizer_options: dict | None = None,
        tol: float = 1e-4,
        feasibility_tol: float = 1e-6,
        verbose: int | str = "auto",
        callbacks: Sequence[Callable] = (),
        lr_schedule: str = "none",
        calibrate_exact: bool = False,
    ) -> None:
        super().__init__(epochs=epochs, lr=lr, batch_size=batch_size, optimizer=optimizer,
                         optimizer_options=optimizer_options, seed=seed, tol=tol, verbose=verbose,
                         callbacks=callbacks, lr_schedule=lr_schedule)
        self.dual_update = check_choice(dual_update, DUAL_UPDATES, "dual_update")
        self.dual_lr = _DEFAULT_DUAL_LR[dual_update] if dual_lr is None else dual_lr
        positive_float(self.dual_lr, "dual_lr")
        self.multipliers0 = positive_float(multipliers0, "multipliers0", allow_zero=True)
        positive_float(feasibility_tol, "feasibility_tol", allow_zero=True)
        self.feasibility_tol = feasibility_tol
        self.calibrate_exact = bool(calibrate_exact)

    # ------------------------------------------------------------------ iteration
    def _row_violations(self, out: torch.Tensor, batch: Any) -> tuple[torch.Tensor, torch.Tensor, float]:
        """The rows ``c`` of the batch, their violations and the exact rows' total violation. With
        ``calibrate_exact``: ``c = c~ + sg(e - c~)``, the exact rows ``e`` in value and the calibrated form's
        rows ``c~`` in gradient (``sg``: no gradient)."""
        c = self._directions(out, batch).reshape(-1)
        exact = exact_rows(self._constraints, out, batch, smooth=None if self.calibrate_exact else c)
        if self.calibrate_exact:
            c = c + (exact.to(c.dtype) - c).detach()
        v_exact = float(row_violations(exact, self._lower, self._upper).sum())
        return c, row_violations(c, self._lower, self._upper), v_exact

    def _signed_excess(self, c: torch.Tensor) -> torch.Tensor:
        """``s_i = max(c_i - u_i, l_i - c_i)``, an infinite side dropping out."""
        upper = torch.where(torch.isfinite(self._upper), c - self._upper.to(c.dtype), torch.full_like(c, -math.inf))
        lower = torch.where(torch.isfinite(self._lower), self._lower.to(c.dtype) - c, torch.full_like(c, -math.inf))
        return torch.maximum(upper, lower)

    def _extra(self, out: torch.Tensor, batch: Any) -> tuple[torch.Tensor | None, dict]:
        if self._n_rows == 0:  # no constraint rows: plain training of the loss (no Lagrangian term)
            self._last_violation = self._last_excess = torch.zeros(0, dtype=torch.float64)
            return None, {COLUMN_C: [], COLUMN_VIOL: [], "V": 0.0, "V_exact": 0.0}
        c, viol, v_exact = self._row_violations(out, batch)
        self._last_violation = viol.detach().to(torch.float64)
        if self.dual_update == "signed":
            excess = self._signed_excess(c)
            self._last_excess = excess.detach().to(torch.float64)
            lagrangian = (self.multipliers_.to(excess.dtype) * excess).sum()
        else:
            lagrangian = (self.multipliers_.to(viol.dtype) * viol).sum()
        fields = {COLUMN_C: c.detach().tolist(), COLUMN_VIOL: self._last_violation.tolist(),
                  "V": float(self._last_violation.sum()), "V_exact": v_exact}
        return lagrangian, fields

    def _after_step(self, record: dict) -> None:
        """Dual update with the batch violations measured before the primal step."""
        viol = self._last_violation
        with torch.no_grad():
            if self.dual_update == "ascent":
                self.multipliers_.add_(self.dual_lr * viol).clamp_(min=0.0)
            elif self.dual_update == "signed":
                self.multipliers_.add_(self.dual_lr * self._last_excess).clamp_(min=0.0)
            else:
                self._lambda_param.grad = viol.clone()
                self._dual_optimizer.step()
                self._lambda_param.clamp_(min=0.0)
        record["lambda"] = self.multipliers_.tolist()

    # ------------------------------------------------------------------ public API
    def fit(
        self,
        model: nn.Module,
        data: Any,
        *,
        loss: str | LossFn = "bce",
        constraints: Constraint | Sequence[Constraint] = (),
    ) -> FitResult:
        """Train ``model`` in place on ``data`` subject to ``constraints``.

        Returns
        -------
        FitResult
            The model is left at the best epoch-end iterate on all rows
            (:class:`solvers.outcome.BestIterate`; a :class:`solvers.outcome.BoundWarning` if it
            violates a row); a nearly constant binary classifier there gets the most accurate decision
            threshold within the bounds at no higher a loss (:func:`solvers.output_shift.shift_output`).
            ``info``: ``multipliers``, ``row_names``, ``violation``, ``c_exact``, ``feasible``,
            ``returned_iteration``, ``stationarity`` (max-abs gradient of the Lagrangian on all rows);
            ``converged``: feasible and stationary within ``tol``.
        """
        loss_fn = get_loss(loss)
        check_dataset(data)
        check_targets(loss_fn, data)
        cons = as_constraint_set(constraints)
        cons.setup(data)
        self._constraints = cons
        mini = not covers_all_rows(self.batch_size, len(data))
        params = trainable_parameters(model)
        check_outputs_differentiable(model, data)
        self._directions = cons.calibrated(calibrated_spread(params, mini)) if self.calibrate_exact else cons
        self._lower, self._upper = cons.lower, cons.upper
        if bool((self._lower > self._upper).any()):
            i = int(torch.nonzero(self._lower > self._upper)[0])
            raise ValueError(f"constraints: row {cons.row_names[i]!r} has lower {self._lower[i].item()} "
                             f"> upper {self._upper[i].item()}")
        m = self._n_rows = cons.n_rows
        self._lambda_param = torch.full((m,), self.multipliers0, dtype=torch.float64, requires_grad=True)
        self.multipliers_ = self._lambda_param.detach()  # shares storage with the Adam parameter
        self._dual_optimizer = torch.optim.Adam([self._lambda_param], lr=self.dual_lr, maximize=True)
        tracker = BestIterate(self._lower, self._upper, self.feasibility_tol)

        def offer(iteration: int) -> None:  # every epoch end: objective and exact rows on all rows, as it predicts
            with torch.no_grad(), eval_mode(model):
                out = self._forward(model, data)
                tracker.offer(params, float(loss_fn(out, data)), cons.exact(out, data).reshape(-1), iteration)

        history, status = self._train(model, data, loss_fn, cons.row_names, on_epoch_end=offer)
        if status != "diverged" or tracker.best is None:
            offer(len(history))
        chosen = tracker.restore(params)
        if status != "diverged" and shift_output(RescueInputs(model, params, loss_fn, cons, data), tracker,
                                                 len(history)):
            chosen = tracker.best  # a nearly constant classifier's threshold, moved within the bounds
        if chosen is None:
            stationarity, final_violation, exact, feasible = math.inf, math.inf, None, False
        else:
            stationarity = self._stationarity(model, data, loss_fn)
            exact = chosen.c_exact
            final_violation = chosen.violation
            feasible = tracker.feasible(chosen.row_violations)
        converged = status != "diverged" and stationarity <= self.tol and feasible
        if changes_in_eval_mode(model):  # returned in the mode its exact rows were measured in
            model.eval()
        unmet = warn_unmet("LagrangianDual", exact, self._lower, self._upper, cons.row_names, self.feasibility_tol)
        if status != "diverged" and chosen is not None:
            warn_if_poor_first_order_fit("LagrangianDual", model, loss_fn, data, mini_batch=mini)
        return FitResult(model=model, history=history, status=status, converged=converged,
                         info={"multipliers": self.multipliers_.tolist(), "row_names": cons.row_names,
                               "violation": final_violation, "stationarity": stationarity, "feasible": feasible,
                               "returned_iteration": None if chosen is None else chosen.iteration,
                               "c_exact": [] if exact is None else exact.tolist(), "unmet_rows": unmet})
