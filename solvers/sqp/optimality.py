"""How good an iterate is on ALL training rows: its objective and exact rows, its KKT
residuals (stationarity and complementarity of the unit-metric QP) and the early-stop test
of a feasible KKT point, with the offers of full-data iterates to the best-iterate tracker."""

from __future__ import annotations

import math
from typing import Any, Callable

import torch

from solvers.derivatives import Derivatives
from solvers.outcome import BestIterate
from solvers.problem import eval_mode, model_outputs, row_violations, violation
from solvers.qp import diagonal_qp
from solvers.sqp.state import FitProblem, SQPState
from solvers.sums import exact_in_chunks

__all__ = ["at_kkt_point", "evaluate_all", "final_check", "full_derivatives", "kkt_residuals",
           "offer_and_test_kkt"]

def kkt_residuals(der: Derivatives, lower: torch.Tensor, upper: torch.Tensor) -> dict:
    """KKT residuals at the point where ``der`` was taken, for the bounds ``lower``/``upper``.

    Stationarity is ``||d||_inf`` for ``d`` the step of the unit-metric QP
    ``min g'd + 1/2 d'd  s.t.  l <= c + J d <= u``: at its solution
    ``d = -(g + J'y)``, so it is the projected-gradient residual ``||g + J'y||_inf``, zero
    exactly at a KKT point. Complementarity is ``max_i |y_i| * dist(c_i, active side)``.
    """
    m = int(der.c.numel())
    V = float(violation(der.c, lower, upper)) if m else 0.0
    comp, active = 0.0, []
    if m:
        h = torch.ones_like(der.g, dtype=torch.float64)
        res = diagonal_qp(der.g.double(), h, der.J.double(), lower - der.c, upper - der.c)
        if res.status == "optimal":
            stat = float(res.d.abs().max())
            y = res.multipliers.to(torch.float64)
            slack = torch.where(y > 0, upper - der.c, der.c - lower)
            slack = torch.where(torch.isfinite(slack), slack.abs(), torch.zeros_like(slack))
            comp = float((y.abs() * slack).max())
            active = [("u" if int(res.active[i]) > 0 else "l") + str(int(i))
                      for i in torch.nonzero(res.active).reshape(-1)]
        else:  # the linearisation is infeasible: not a KKT point of this problem
            stat, comp = math.inf, math.inf
    else:
        stat = float(der.g.abs().max())
    return {"stationarity": stat, "complementarity": comp, "f": der.f, "c": der.c.tolist(), "V": V,
            "active": active}


def at_kkt_point(der: Derivatives, lower: torch.Tensor, upper: torch.Tensor, offset: torch.Tensor,
                 tracker: BestIterate, state: SQPState, tol: float) -> bool:
    """Early stop test on full-data derivatives: every exact row within the tracker's
    ``feasibility_tol`` and stationarity (:func:`kkt_residuals`) within ``tol``. The
    unit-metric QP is solved only once the previous step's residual is within ``10 tol``."""
    if state.last_kkt > 10.0 * tol and state.iteration > 0:
        return False
    if der.c_exact is not None and not tracker.feasible(row_violations(der.c_exact, lower, upper)):
        return False
    return kkt_residuals(der, lower - offset, upper - offset)["stationarity"] <= tol


def offer_and_test_kkt(der: Derivatives, params: list[torch.Tensor], lower: torch.Tensor, upper: torch.Tensor,
                       offset: torch.Tensor, tracker: BestIterate, state: SQPState, tol: float) -> bool:
    """Offer a full-data iterate to ``tracker``; True (and offered as preferred) when it
    is a feasible KKT point (:func:`at_kkt_point`), which ends training."""
    tracker.offer(params, der.f, der.c_exact, state.iteration)
    if not at_kkt_point(der, lower, upper, offset, tracker, state, tol):
        return False
    tracker.offer(params, der.f, der.c_exact, state.iteration, prefer=True)
    return True


def evaluate_all(model: torch.nn.Module, loss_fn: Callable, cons: Any, data: Any,
                 chunk_rows: int | None = None,
                 reduce: Callable[[torch.Tensor], torch.Tensor] | None = None) -> tuple[float, torch.Tensor | None]:
    """Objective and exact rows of the current model on all training rows, in chunks of ``chunk_rows``
    when the constraints allow (:func:`solvers.sums.exact_in_chunks`); ``reduce`` sums over ranks. The
    model runs in eval mode (:func:`solvers.problem.changes_in_eval_mode`): these values judge the model
    that is returned."""
    with eval_mode(model):
        return _evaluate_all(model, loss_fn, cons, data, chunk_rows, reduce)


def _evaluate_all(model: torch.nn.Module, loss_fn: Callable, cons: Any, data: Any, chunk_rows: int | None,
                  reduce: Callable[[torch.Tensor], torch.Tensor] | None) -> tuple[float, torch.Tensor | None]:
    """:func:`evaluate_all` in the model's current mode."""
    if reduce is not None:
        return exact_in_chunks(model, loss_fn, cons, data, int(chunk_rows or max(len(data), 1)), reduce)
    if chunk_rows is not None and len(data) > chunk_rows:
        chunked = exact_in_chunks(model, loss_fn, cons, data, int(chunk_rows))
        if chunked is not None:
            return chunked
    with torch.no_grad():
        out = model_outputs(model, data)
        f = float(loss_fn(out, data))
        c = cons.exact(out, data).reshape(-1).to(torch.float64) if cons.n_rows else None
    return f, c


def full_derivatives(problem: FitProblem) -> Derivatives | None:
    """Derivatives on all training rows from the problem's oracle, None when they are not
    finite."""
    p = problem
    try:
        der = p.oracle(p.model, p.params, p.loss_fn, p.cons, p.data, p.data if p.cons.n_rows else None)
    except RuntimeError:  # pragma: no cover - reported through status
        return None
    return der if math.isfinite(der.f) and bool(torch.isfinite(der.g).all()) else None


def final_check(problem: FitProblem, lower: torch.Tensor, upper: torch.Tensor, state: SQPState) -> dict:
    """KKT residuals (:func:`kkt_residuals`) of the returned iterate on the full data, for the
    working bounds; infinite when the derivatives there are not finite."""
    der = full_derivatives(problem)
    if der is None:
        return {"stationarity": math.inf, "complementarity": math.inf, "f": math.nan, "c": [], "V": math.nan,
                "active": []}
    kkt = kkt_residuals(der, lower, upper)
    state.final_kkt, state.final_violation = kkt["stationarity"], kkt["V"]
    return kkt
