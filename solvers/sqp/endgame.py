"""How a stochastic SQP run ends and what it returns: the divergence guard, the tail average
of a mini-batch epoch, the full-batch polish of a mini-batch run, and the returned (best)
iterate with its final KKT measurements, history record and ``info``."""

from __future__ import annotations

import logging
import math
from typing import NamedTuple, Protocol, Sequence

import torch

from solvers.distributed import AllReduceDerivatives
from solvers.history import COLUMN_ACTIVE, COLUMN_QP_STATUS, QP_FINAL, QP_RELAXED, FitResult, History
from solvers.losses import loss_name
from solvers.outcome import (BestIterate, Candidate, constant_meets_bounds, no_better_than_constant,
                             predicts_one_class, training_accuracy, training_remedies, warn_if_constant, warn_if_start,
                             warn_if_unstable, warn_unmet)
from solvers.output_shift import shift_output
from solvers.problem import assign_parameters, changes_in_eval_mode, flat_parameters, row_violations
from solvers.sampling import covers_all_rows
from solvers.sqp.optimality import evaluate_all, final_check, full_derivatives, kkt_residuals, offer_and_test_kkt
from solvers.sqp.state import FitProblem, SQPState
from solvers.sqp.steps import StepOptions, calibrate, integral_push, sqp_step

__all__ = ["ALL_ROWS_RISE", "MAX_RESTARTS", "POLISH_DECAY", "POLISH_EXTENSION", "POLISH_GAP", "RESTORING_WINDOW",
           "Anchor", "EndgameOptions", "TailAverage", "all_rows_blew_up", "blew_up", "finish", "leave_trivial_constant",
           "loss_ceiling", "polish", "polish_last", "polish_length", "still_restoring"]

#: Divergence-guard restarts (:func:`blew_up`) after which a run is "diverged".
MAX_RESTARTS = 10
#: Mini-batch divergence guard on all rows (:func:`all_rows_blew_up`): an all-rows objective above
#: this many times the loss ceiling ``max(|f_0|, f_const)`` sends the run back to its anchor.
ALL_ROWS_RISE = 2.0
#: The polish may run this many times ``polish_iterations`` while it still restores feasibility.
POLISH_EXTENSION = 4
#: Iterates over which the polish must reduce the largest exact row violation to go on.
RESTORING_WINDOW = 10
#: Time constant, in iterations, of the mini-batch polish's diminishing step
#: ``beta_k = beta / sqrt(1 + k / POLISH_DECAY)`` (:func:`polish`).
POLISH_DECAY = 10
#: A full-batch run that ends infeasible is polished when its best feasible iterate's objective
#: exceeds the last iterate's by more than this fraction (:func:`polish_last`).
POLISH_GAP = 0.01

logger = logging.getLogger("solvers.sqp")  # one logger for the whole engine package


class EndgameOptions(StepOptions, Protocol):
    """The engine options the end-game reads besides those of one iteration
    (:class:`solvers.sqp.StochasticSQP` has them)."""

    polish_iterations: int
    batch_size: int | None
    lr_: float
    metric_spread_: float | None
    start_spread_: float | None
    calibrate_exact: bool
    calibration_weight: float
    tol: float
    feasibility_tol: float
    chunk_rows: int | None


class Anchor(NamedTuple):
    """Where a mini-batch run's divergence guard sends it back: the all-rows iterate with the lowest
    objective ``f`` among those at most the loss ceiling (:func:`loss_ceiling`), its ``iteration``, flat
    ``params`` and the metric's accumulator ``v`` there. The lowest, not the last: an iterate below
    the ceiling may already have begun to overshoot (the steps before a blow-up raise the loss over
    several iterations). ``v`` goes back too, so that the run continues from the state it had there
    rather than with the squared gradients of the overshooting steps in ``h = sqrt(v + mu)``."""

    iteration: int
    params: torch.Tensor
    v: torch.Tensor
    f: float

    @classmethod
    def at(cls, state: SQPState, params: list[torch.Tensor], f: float) -> "Anchor":
        return cls(state.iteration, flat_parameters(params), state.v.detach().clone(), float(f))

    def restore(self, state: SQPState, params: list[torch.Tensor]) -> None:
        assign_parameters(params, self.params)
        state.v.copy_(self.v)


def blew_up(f: float, state: SQPState, tracker: BestIterate, params: list[torch.Tensor],
            anchor: Anchor | None, on_all_rows: bool = True) -> bool:
    """Divergence guard: an objective above ``10 |f_0| + 1e-8`` (``f_0`` the first one on
    all rows) sends the parameters back to the best iterate and halves ``beta``. With
    mini-batches ``f`` is the batch objective; its noise is far below a factor of 10
    unless the run is blowing up (the starting point is always a candidate there), and the
    parameters go back to ``anchor``, the best sane all-rows iterate (:class:`Anchor`)."""
    if on_all_rows and state.f_first is None:
        state.f_first = f
    first = state.f_first
    if first is None:
        return False
    if f <= 10.0 * abs(first) + 1e-8 or tracker.best is None:
        return False
    if on_all_rows or anchor is None:
        tracker.restore(params)
        back_to = tracker.best.iteration
    else:  # mini-batch: the anchor, not the tracker's best (which may be the untrained start)
        anchor.restore(state, params)
        back_to = anchor.iteration
    _halve_step(state)
    logger.info("SQP: objective %.3g at iteration %d exceeds 10x the initial %.3g; back to iteration %d "
                   "with learning rate %.3g", f, state.iteration, first, back_to, state.beta)
    return True


def _halve_step(state: SQPState) -> None:
    """The back-off of both divergence guards: half the step from here on (``beta`` and the scale the
    "rsqrt" schedule multiplies by), one more restart counted."""
    state.beta *= 0.5
    state.beta_scale *= 0.5
    state.restarts += 1


def loss_ceiling(f_first: float | None, f_constant: float | None) -> float:
    """``max(|f_0|, f_const)``: the loss a sane iterate stays under (``f_0`` the start's on all rows,
    ``f_const`` the best constant output's, None where unknown; inf when both are). A model that meets
    every bound from a constant start, or a bound that a constant output meets (group rates,
    dependence measures), can always do as well as the worse of the two, so an iterate beyond it has
    learned nothing the run should keep."""
    known = [v for v in (None if f_first is None else abs(f_first), f_constant) if v is not None and math.isfinite(v)]
    return max(known) if known else math.inf


def all_rows_blew_up(f_all: float, ceiling: float, state: SQPState, params: list[torch.Tensor],
                     anchor: Anchor | None) -> bool:
    """Mini-batch divergence guard on an all-rows evaluation (an epoch's end, a snapshot refresh):
    ``f_all`` non-finite or above ``ALL_ROWS_RISE * ceiling`` (:func:`loss_ceiling`) sends the
    parameters (and the metric's ``v``) back to ``anchor`` (:class:`Anchor`: the all-rows iterate with
    the lowest objective at most ``ceiling``), and halves the step, as :func:`blew_up` does. Several
    steps that each overshoot a little (a step too long for curvature that grew as a network fitted)
    raise the loss over an epoch without one batch ten times its start; the last iterate within ten
    times it might then be one already damaged (hidden units pushed off, every row in one class),
    from which the remaining epochs do not recover. At most :data:`MAX_RESTARTS` times; False without
    an anchor."""
    if anchor is None or state.restarts >= MAX_RESTARTS or (math.isfinite(f_all) and f_all <= ALL_ROWS_RISE * ceiling):
        return False
    anchor.restore(state, params)
    _halve_step(state)
    logger.info("SQP: objective %.3g on all rows at iteration %d exceeds %g x %.3g (the larger of the start's "
                "and the best constant's); back to iteration %d with learning rate %.3g", f_all, state.iteration,
                ALL_ROWS_RISE, ceiling, anchor.iteration, state.beta)
    return True


class TailAverage:
    """Running mean of the iterates of one epoch (Polyak averaging of the tail)."""

    def __init__(self, params: list[torch.Tensor]) -> None:
        self.total = torch.zeros(sum(p.numel() for p in params), dtype=torch.float64)
        self.count = 0

    def add(self, params: list[torch.Tensor]) -> None:
        self.total += flat_parameters(params).to(torch.float64)
        self.count += 1

    def mean(self) -> torch.Tensor:
        return self.total / max(self.count, 1)


def polish_length(options: EndgameOptions, epochs: int) -> int:
    """``min(polish_iterations, epochs)``: the polish iterations of a full-batch run that trained
    ``epochs`` epochs (resumed parts included, :func:`polish_last`): its end-game takes no more
    passes over the data than the training did."""
    return min(int(options.polish_iterations), int(epochs))


def still_restoring(violations: Sequence[float], tol: float) -> bool:
    """True while the last iterate is infeasible (largest row violation above ``tol``) and
    that violation fell by at least 1% over the last ``RESTORING_WINDOW`` iterates."""
    if not violations or violations[-1] <= tol:
        return False
    if len(violations) <= RESTORING_WINDOW:
        return True
    return violations[-1] < 0.99 * violations[-1 - RESTORING_WINDOW]


def polish(problem: FitProblem, options: EndgameOptions, offset: torch.Tensor, state: SQPState,
           tracker: BestIterate, history: History, tail: TailAverage | None,
           limit: int | None = None) -> tuple[torch.Tensor, str, int]:
    """Full-batch end-game (``polish_iterations``) of a mini-batch run, or of a full-batch run
    that ends outside the bounds (``limit``, :func:`polish_last`).

    Starts from the tail average of the last epoch when it is given and finite (a linear model's
    mini-batch run; a network's, whose longer steps leave an average further from the bound,
    starts from its last iterate, ``tail`` None), runs full-data SQP
    iterations on copies of the engine state (``tau``, ``xi``, ``beta``, the Hessian
    accumulator), offers every iterate to ``tracker`` and stops at a feasible KKT point.
    The exact rows are step functions of the outputs, so a smooth step that meets the
    calibrated bound can leave a few rows on the wrong side; the polish therefore adds
    the exact violation of every infeasible iterate to a running tightening of the
    working bounds, halved at every feasible one (integral action without wind-up: without
    the tightening the polish can stall just outside a bound, without the halving it
    overshoots well inside it). That feedback with a fixed step can cycle: the iterate
    crosses the bound, the tightening pushes it well inside, the halving lets it back out,
    with the loss swinging by several per cent of its value. The mini-batch polish
    therefore takes the diminishing step ``beta_k = beta / sqrt(1 + k / POLISH_DECAY)``
    (``beta`` of ``state``: where training left it, or ``lr`` when the polish of a linear model
    changes to the curvature metric, ``k`` the polish iteration), the deterministic
    counterpart of the training's "rsqrt" schedule, which damps the cycle.
    It runs up to ``polish_iterations`` iterations, whatever the epochs trained: the tail
    average of a few epochs of noisy steps is often a feasible point short of the constrained
    optimum, and the full-data steps that follow are what reaches it (fewer, e.g. one per epoch
    trained, left runs a few tenths of an accuracy point short of the full batch's,
    ``benchmarks/results/solver_notes.md``). Past them it goes on (up to
    ``POLISH_EXTENSION * polish_iterations`` iterations in all)
    while the iterate is still infeasible and its exact violation still falls
    (:func:`still_restoring`): a polish can approach feasibility too slowly to reach it
    within ``polish_iterations``, and the run would return its starting point
    (``benchmarks/results/solver_notes.md``).
    ``limit`` (the polish of a full-batch run, from its last iterate, :func:`polish_last`):
    at most this many iterations, no extension, the run's trust region kept
    (:func:`solvers.sqp.steps.recent_radius`) and the learning rate back at ``lr``.
    ``problem`` holds the model, data, bounds and the engine's oracle; ``state`` is not modified
    (the polish works on a copy).
    Returns the calibration offset, the status and the number of polish iterations.
    """
    params, lower, upper = problem.params, problem.lower, problem.upper
    st = state.copy()
    if limit is not None:
        st.beta = float(options.lr_)
    if tail is not None and tail.count:
        average = tail.mean()
        if bool(torch.isfinite(average).all()):
            assign_parameters(params, average)
    beta = st.beta
    status = "max_epochs"
    violations: list[float] = []  # exact violation of every polish iterate
    push = torch.zeros_like(offset)  # accumulated exact violations (integral action)
    bound_lists = lower.tolist(), upper.tolist()  # fixed: read by every iteration's integral_push
    budget = POLISH_EXTENSION * int(options.polish_iterations) if limit is None else int(limit)
    base = int(options.polish_iterations)
    for k in range(budget):
        der = problem.on_all_rows()
        if not math.isfinite(der.f) or not bool(torch.isfinite(der.g).all()):
            break
        if offer_and_test_kkt(der, params, lower, upper, offset, tracker, st, options.tol):
            status = "converged"
            break
        violations.append(float(row_violations(der.c_exact, lower, upper).max())
                          if der.c_exact is not None and der.c_exact.numel() else 0.0)
        extended = limit is None and k >= base
        if extended and not still_restoring(violations, options.feasibility_tol):
            break
        if options.calibrate_exact and der.c_exact is not None:
            offset = calibrate(offset, der.c_exact - der.c, lower, upper, options.calibration_weight)
        if der.c_exact is not None:  # integral action: what is still violated tightens the target
            push = torch.tensor(integral_push(push.tolist(), der.c_exact.tolist(), *bound_lists), dtype=push.dtype)
        if limit is None:
            st.beta = beta / math.sqrt(1.0 + k / POLISH_DECAY)
        record = sqp_step(params, der, (lower - offset - push, upper - offset - push), st, options,
                          problem.on_all_rows, bounds=(lower, upper))
        record["epoch"] = st.epochs_done
        record["phase"] = "polish"
        history.append(record)
        st.iteration += 1
    return offset, status, st.iteration - state.iteration


def polish_last(tracker: BestIterate, evaluated: tuple[float, torch.Tensor | None], history: History,
                options: EndgameOptions, epochs: int) -> int:
    """Polish iterations (:func:`polish` with ``limit``) that a full-batch run should run from its
    last iterate, 0 for none; ``epochs`` is the number of epochs trained (a resumed run's
    included, so that a resumed run polishes as the uninterrupted one does).

    ``evaluated`` is the last iterate's objective and exact rows on all training rows. Its
    rows hover at the bounds, and the exact rows are step functions of the outputs, so a
    run can end a hair outside while the rule of :class:`solvers.outcome.BestIterate` returns
    an early, poor feasible iterate (with nearly twice the last iterate's loss in one measured
    run, ``benchmarks/results/solver_notes.md``).
    When :meth:`~solvers.outcome.BestIterate.worth_restoring` says so (``POLISH_GAP``; also
    when no iterate was feasible) and the last step's QP was not relaxed (linearised
    constraints that cannot be met, e.g. an infeasible problem, are not restored by more of
    the same steps), up to ``min(polish_iterations, epochs)`` polish iterations follow, each
    a candidate. Measured on that problem (``lr_kmin=50``) with the trust region of
    :func:`solvers.sqp.steps.recent_radius`, seeds 0-143: 69 runs polished; 144 of 144
    feasible, mean returned loss 0.337, largest 0.39 (without the polish: 129 of 144
    feasible, mean 0.402, 40 runs above 0.4; before both changes: 132 of 144, mean 0.465,
    74 above 0.4). ``POLISH_GAP`` 0.05: 57 runs polished, mean 0.338, largest 0.41; 0.001: 93
    runs polished, mean 0.336. The learning rate restarts at ``lr`` (with the run's decayed one: mean 0.367, 23 runs
    above 0.4, 142 of 144 feasible) and the trust region stays (without it one polish step
    reached ``||d|| = 1e14``)."""
    f, c_exact = evaluated
    relaxed = bool(history.records) and history[-1].get(COLUMN_QP_STATUS) == QP_RELAXED
    if relaxed or not tracker.worth_restoring(f, c_exact, POLISH_GAP):
        return 0
    limit = polish_length(options, epochs)
    best = tracker.best
    logger.info("SQP: the last iterate (objective %.4g) violates a bound; the best iterate is iteration %d "
                "(objective %.4g, %s): up to %d full-batch polish iterations from the last iterate", f,
                best.iteration, best.f, "feasible" if tracker.feasible(best.row_violations) else "infeasible", limit)
    return limit


def measured_in_eval_mode(problem: FitProblem, tracker: BestIterate, chunk_rows: int | None) -> Candidate:
    """The tracker's best candidate (held by the model) with its objective and exact rows measured on all
    rows in eval mode (:func:`solvers.problem.changes_in_eval_mode`), the mode the returned model predicts
    in; the model is left in eval mode. A full batch's candidates were measured by the training steps' own
    passes, with dropout masks drawn, so a bound met there may be missed by the deterministic model."""
    best = tracker.best
    assert best is not None
    f, c = evaluate_all(problem.model, problem.loss_fn, problem.cons, problem.data, chunk_rows)
    c = torch.zeros(0, dtype=torch.float64) if c is None else c.reshape(-1).to(torch.float64)
    viol = row_violations(c, tracker.lower, tracker.upper) if c.numel() else c
    tracker.best = Candidate(best.params, float(f), c, viol, best.iteration)
    problem.model.eval()
    return tracker.best


def leave_trivial_constant(problem: FitProblem, tracker: BestIterate, chunk_rows: int | None = None) -> bool:
    """Make the tracker's closest infeasible iterate the best when the best is a binary classifier that is
    feasible only because it predicts one class on every row; whether it did (the model then holds it).

    Why. A classifier that predicts one class for every row gives every group the same rate (all 0 or all 1),
    so it meets every group-parity bound exactly, whatever the data: its feasibility says nothing about
    the bound. A network's first steps can pass through such an iterate (its outputs start near 0 and the
    first steps move them all towards the logit of the base rate, below 0), and under a bound of exact or
    near parity (``delta = 1``, a difference bound of 0, groups of a few dozen rows) the trained iterates'
    exact rows, step functions of the outputs that move by whole rows, miss ``feasibility_tol`` at every
    iterate. The rule "feasible first" (:class:`solvers.outcome.BestIterate`) then returns the early
    constant, whose training accuracy is the majority rate, over every trained iterate; a linear model, whose
    first steps keep outputs of both signs, returns its least-violating iterate instead.

    What. When the best iterate is feasible, the loss is the binary cross-entropy and the model at the best
    predicts one class (:func:`solvers.outcome.predicts_one_class`), the tracker's closest iterate
    (``tracker.closest``: the infeasible one of least total violation ``sum_i max(c_i - u_i, 0) +
    max(l_i - c_i, 0)`` among those not nearly constant, the engine's filter) is returned if its loss is below
    the best constant output's (``problem.f_constant``), as the linear model's least-violating iterate is;
    its unmet rows are then reported as any infeasible fit's. Fits whose best is not such a constant, or
    that kept no closest iterate, are left as they are.
    """
    best, closest, f_constant = tracker.best, tracker.closest, problem.f_constant
    if (best is None or closest is None or f_constant is None or not tracker.feasible(best.row_violations)
            or loss_name(problem.loss_fn) != "bce" or not closest.f < f_constant):
        return False
    if not predicts_one_class(problem.model, problem.data, chunk_rows):
        return False
    assign_parameters(problem.params, closest.params)
    logger.info("SQP: the best feasible iterate (iteration %d, objective %.4g) predicts one class on every row; "
                "returning the least-violating iterate %d (objective %.4g, violation %.3g) instead",
                best.iteration, best.f, closest.iteration, closest.f, closest.violation)
    tracker.best = closest
    return True


def finish(problem: FitProblem, options: EndgameOptions, offset: torch.Tensor, state: SQPState,
           tracker: BestIterate, history: History, status: str, last: int) -> FitResult:
    """Return the best iterate (:class:`solvers.outcome.BestIterate`), measured on all rows.

    The final iterate is a candidate too; a nearly constant binary classifier's best one is a candidate
    too with its decision threshold moved to the most accurate one within the exact bounds, at no higher a
    loss, when that gains more than a standard error of training accuracy
    (:func:`solvers.output_shift.shift_output`); a best iterate that is then still feasible only by
    predicting one class gives way to the closest learned one (:func:`leave_trivial_constant`); the chosen
    parameters are written back into the model,
    its KKT residuals are measured on the full training data, a closing history record describes
    exactly the returned model, and a :class:`solvers.outcome.BoundWarning` names any row it violates (at the line that
    called the engine's ``fit``: call this from ``fit`` directly). ``state.start_iteration`` is
    the fit's first iteration (a run that returns it warns). ``problem.f_constant`` is the training
    loss of the best constant output (:func:`solvers.losses.constant_loss`; None: not
    checked): a returned model no better than it (or, with the binary cross-entropy, no more
    accurate than the majority class) warns (:class:`solvers.outcome.ConstantPredictorWarning`),
    as does a run whose loss on all rows rose above its start or that backed off
    (:class:`solvers.outcome.TrainingInstabilityWarning`).
    """
    model, params, loss_fn, cons, data = problem.model, problem.params, problem.loss_fn, problem.cons, problem.data
    lower, upper, f_constant = problem.lower, problem.upper, problem.f_constant
    m = int(lower.numel())
    kkt = None
    if status != "diverged" or tracker.best is None:
        # full-data derivatives (all-reduced when data-parallel), reused below if this
        # final iterate is the one returned
        der = full_derivatives(problem)
        if der is not None and tracker.offer(params, der.f, der.c_exact, last):
            kkt = kkt_residuals(der, lower - offset, upper - offset)
    chosen = tracker.restore(params)
    in_memory = ((options.chunk_rows is None or len(data) <= options.chunk_rows)
                 and not isinstance(problem.oracle, AllReduceDerivatives))
    if status != "diverged" and shift_output(problem, tracker, last, in_memory):
        chosen, kkt = tracker.best, None
    # after the threshold shift, which may keep a feasible best and make it useful
    if (status != "diverged" and not isinstance(problem.oracle, AllReduceDerivatives)
            and leave_trivial_constant(problem, tracker, options.chunk_rows)):
        chosen, kkt = tracker.best, None
    if chosen is not None and changes_in_eval_mode(model) and not isinstance(problem.oracle, AllReduceDerivatives):
        chosen = measured_in_eval_mode(problem, tracker, options.chunk_rows)
    if kkt is None:
        kkt = final_check(problem, lower - offset, upper - offset, state)
    state.final_kkt, state.final_violation = kkt["stationarity"], kkt["V"]
    c_exact = chosen.c_exact if chosen is not None else None
    row_viol = chosen.row_violations if chosen is not None else torch.zeros(0, dtype=torch.float64)
    feasible = chosen is not None and tracker.feasible(row_viol)
    stationary = kkt["stationarity"] <= options.tol
    converged = bool(feasible and stationary and status != "diverged")
    termination = status
    if status not in ("diverged", "stopped_by_callback"):
        status = "converged" if converged else ("infeasible" if not feasible else "not_stationary")
    unmet = warn_unmet("SQP", c_exact, lower, upper, cons.row_names, options.feasibility_tol, stacklevel=4)
    mini_batch = not covers_all_rows(options.batch_size, len(data))
    warn_if_start("SQP", chosen, state.start_iteration, last, options.feasibility_tol, stacklevel=4)
    if f_constant is not None and chosen is not None:
        accuracy = training_accuracy(model, data, options.chunk_rows) if loss_name(loss_fn) == "bce" else (None, None)
        meets: bool | None = True
        if no_better_than_constant(chosen.f, f_constant):  # one more pass, only before that warning
            meets = (constant_meets_bounds(model, cons, data, tracker, problem.constant_output)
                     if in_memory and problem.constant_output is not None else None)
        warn_if_constant("SQP", chosen.f, f_constant, *accuracy, stacklevel=4, n_rows=len(data),
                         constant_meets_bounds=meets, remedies=training_remedies(mini_batch))
    warn_if_unstable("SQP", tracker, state.restarts, -math.inf if f_constant is None else f_constant,
                     stacklevel=4, mini_batch=mini_batch, returned_f=chosen.f if chosen is not None else None)
    returned = chosen.iteration if chosen is not None else last
    history.append({
        "iteration": last, "epoch": state.epochs_done, "returned": returned, "f": kkt["f"],
        "c": kkt["c"], "c_exact": c_exact.tolist() if c_exact is not None else [],
        "V": kkt["V"], "V_exact": float(row_viol.sum()), "V_exact_max": float(row_viol.max()) if m else 0.0,
        "kkt": kkt["stationarity"], "complementarity": kkt["complementarity"], COLUMN_QP_STATUS: QP_FINAL,
        "tau": state.tau, "xi": state.xi, "beta": state.beta, COLUMN_ACTIVE: kkt["active"],
    })
    info = {"tau": state.tau, "xi": state.xi, "beta": state.beta, "L": state.L,
            "Gamma": state.Gamma, "kkt": kkt["stationarity"], "stationarity": kkt["stationarity"],
            "complementarity": kkt["complementarity"], "violation": float(row_viol.sum()),
            "max_row_violation": float(row_viol.max()) if m else 0.0,
            "violations": row_viol.tolist(), "c_exact": c_exact.tolist() if c_exact is not None else [],
            "feasible": bool(feasible), "stationary": bool(stationary), "termination": termination,
            "returned_iteration": returned, "iterations": last, "unmet_rows": unmet,
            "bound_offset": offset.tolist(), "row_names": cons.row_names,
            "restarts": state.restarts, "lr": float(options.lr_),
            "metric_spread": options.metric_spread_, "start_spread": options.start_spread_,
            "relaxed_steps": sum(r.get(COLUMN_QP_STATUS) == QP_RELAXED for r in history.records),
            "binding_rows": [cons.row_names[int(a[1:])] for a in kkt["active"]]}
    return FitResult(model=model, history=history, status=status, converged=converged, info=info)
