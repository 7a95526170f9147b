"""SQP in function space with gradient-boosted trees: :class:`BoostedSQP`."""

from __future__ import annotations

import contextlib
import functools
import logging
import time
import warnings
from typing import Any, Callable, Iterator, Sequence

import numpy as np
import torch

from solvers.boosting.objective import BOOSTING_LOSSES, row_derivatives, starting_constant
from solvers.boosting.scores import BoostedScores
from solvers.boosting.shift import smallest_shifts
from solvers.boosting.step import CORRECTION, MAX_TAKE_BACKS, RoundState, WorkingBounds, round_step
from solvers.boosting.validation import VALIDATION_METRICS, ValidationLoss, running_scores
from solvers.derivatives import rows_and_output_jacobian
from solvers.history import COLUMN_ACTIVE, COLUMN_C, COLUMN_QP_STATUS, QP_FINAL, QP_RELAXED, FitResult, History
from solvers.losses import check_targets, loss_name
from solvers.outcome import (BestIterate, NoUsableInputWarning, no_better_than_constant, warn_if_constant,
                             warn_if_start, warn_unmet)
from solvers.problem import as_constraint_set, check_dataset, exact_rows, row_violations
from solvers.validation import check_choice, check_flag, check_interval, check_seed, positive_float, positive_int

__all__ = ["BoostedSQP"]

logger = logging.getLogger(__name__)



class BoostedSQP:
    r"""Gradient-boosted trees trained under hard constraints: SQP in function space.

    The variables are the per-row raw scores ``F = (F(x_1), ..., F(x_n))``. Round ``t`` of
    boosting, at the current scores ``F``:

    1. per-row loss derivatives ``g_i`` and curvature ``h_i`` (:mod:`solvers.boosting.objective`:
       LightGBM's ``grad``/``hess`` of the binary cross-entropy or the squared error, row
       weights included);
    2. the smooth constraint rows ``c`` (m,) and their Jacobian ``J = dc/dF`` (m, n) from the
       constraint objects themselves (:func:`solvers.derivatives.rows_and_output_jacobian`: a
       closed form where the constraint offers one, else autograd through ``c(F)``), and the
       exact rows ``c_exact``;
    3. the SQP subproblem of the step a tree shrunk by ``eta = learning_rate`` takes
       (:mod:`solvers.boosting.step`), solved by the SQP engine's QP
       (:func:`solvers.sqp.steps.solve_qp`: exact, with the least-violation relaxation of an
       infeasible linearisation):

       .. math:: \min_d\; g^\top d + \tfrac12 d^\top \operatorname{diag}(h)\, d
                 \quad\text{s.t.}\quad l - b - p \le c + \eta J d \le u - b - p,

       each violated side relaxed so that the step closes only the share ``rho`` of its violation
       (:func:`solvers.boosting.step.round_step`; ``rho`` starts at ``correction``), with ``b`` the
       exact calibration of :class:`solvers.StochasticSQP`
       (``b <- (1 - w) b + w (c_exact - c)``), so the smooth rows give the direction and the
       exact rows the level, and ``p`` the running sum of the exact rows' violations (halved at
       every feasible round); its multipliers ``y``;
    4. one tree fitted by LightGBM (custom objective) to the gradient of the Lagrangian
       ``G = g + eta J'y`` and the curvature ``h``: leaf values ``-eta sum(G) / sum(h)`` over each
       leaf's rows, i.e. the QP step ``d = -G / h`` averaged per leaf and shrunk by ``eta``.
       Without constraints (``y = 0``) this is plain LightGBM with its own objective.
    5. the round is taken back when the tree leaves the training loss above that of a constant that meets
       every bound (the starting constant when it does, else, for the binary cross-entropy, the best constant
       score on either side of 0 that does): the constraints' optimum is no worse than that constant, so
       such a round overshot (see :mod:`solvers.boosting.step`). Its tree is removed
       (LightGBM's ``rollback_one_iter``), ``b`` and ``p`` are restored and ``rho`` is halved; after
       ``max_take_backs`` such rounds every round is kept. A round taken back counts towards
       ``rounds``; ``info["taken_back"]`` counts them.

    Returned model: every round's scores are a candidate, compared on ALL training rows with
    the exact measure (:class:`solvers.outcome.BestIterate`: the feasible one with the lowest
    loss, else the least violating). With ``validation`` rows (:meth:`fit`), what compares
    candidates is the validation criterion (:mod:`solvers.boosting.validation`: the loss or the
    error rate): the returned round is the one with the lowest validation criterion among those
    that meet every bound on the training rows, and ``early_stopping_rounds`` stops the rounds
    once so many feasible rounds have followed that round without a lower criterion: the rounds
    that miss a bound do not count, so neither a criterion that is low while the bounds are
    still unmet nor a feasible start (a constant predictor often meets a rate bound) stops
    a fit that has not yet reached the bounds.
    For the binary cross-entropy, when the last round (or the least-violating one) is
    infeasible, the end-game also tries the smallest constant shift of its scores that meets
    the bounds (:mod:`solvers.boosting.shift`; a constant reads no sensitive attribute). The
    model is :class:`solvers.boosting.BoostedScores` (the trees up to the chosen round, plus the
    starting constant and the shift); it is checked once more on all rows, and a bound it
    misses emits :class:`solvers.outcome.BoundWarning` (a model no better than the best
    constant, :class:`solvers.outcome.ConstantPredictorWarning`).

    Parameters
    ----------
    rounds : int, default 300
        Boosting rounds (trees).
    learning_rate : float, default 0.1
        Shrinkage of every tree (LightGBM's ``learning_rate``).
    num_leaves : int, default 31
        Leaves per tree (LightGBM's default).
    min_child_samples : int, default 20
        Fewest rows in a leaf (LightGBM's ``min_data_in_leaf`` default).
    params : dict, optional
        Further LightGBM parameters (e.g. ``{"feature_fraction": 0.8, "lambda_l2": 1.0}``); the
        objective is the engine's and cannot be set.
    n_jobs : int, optional
        LightGBM threads (``num_threads``); None: LightGBM's default (all cores).
    correction : float in (0, 1], default 1.0
        The share ``rho`` of a row's current violation that the first rounds' subproblems ask to
        close (the rest is left to the integral term ``p``); halved at every round taken back
        (step 5).
    max_take_backs : int >= 0, default 7
        The most rounds a fit takes back (step 5); 0 keeps every round.
    calibrate_exact : bool, default True
        The exact calibration ``b`` of step 3; False: ``b = 0`` (the smooth rows must then meet
        the bounds themselves). With it the engine differentiates each constraint's
        :class:`solvers.contract.CalibratedForm` for ``spread="group"`` where it offers one
        (fairopt's group rates without a named surrogate: ``sigmoid(t)``, which moves every row of a
        group, instead of the smoothed step, which moves only the rows at the threshold).
    calibration_weight : float, default 0.2
        ``w`` in ``(0, 1]`` of the calibration.
    feasibility_tol : float, default 1e-6
        Largest exact violation of any row (in the row's own units) of a feasible model.
    seed : int, default 0
        LightGBM's seed (with ``deterministic=True``: the same fit on the same machine).
    verbose : int, default 0
        1: an INFO log line (logger ``solvers.boosting.engine``) every tenth of the rounds.
    callbacks : sequence of callables
        ``cb(engine, record) -> bool | None`` after every round; True stops training.
    early_stopping_rounds : int, optional
        With ``validation`` rows: stop after this many rounds that meet every bound on the
        training rows without a lower validation criterion than the best such round (rounds
        that miss a bound do not count). None: run all ``rounds``.
    validation_metric : {"loss", "error"}, default "loss"
        The validation criterion: the loss, or the error rate of the hard labels ``F > 0``
        (binary cross-entropy only).
    """

    def __init__(
        self,
        rounds: int = 300,
        learning_rate: float = 0.1,
        num_leaves: int = 31,
        min_child_samples: int = 20,
        params: dict | None = None,
        n_jobs: int | None = None,
        correction: float = CORRECTION,
        max_take_backs: int = MAX_TAKE_BACKS,
        calibrate_exact: bool = True,
        calibration_weight: float = 0.2,
        feasibility_tol: float = 1e-6,
        seed: int = 0,
        verbose: int = 0,
        callbacks: Sequence[Callable[[Any, dict], Any]] = (),
        early_stopping_rounds: int | None = None,
        validation_metric: str = "loss",
    ) -> None:
        self.rounds = positive_int(rounds, "rounds", allow_integral_float=True)
        self.learning_rate = positive_float(learning_rate, "learning_rate")
        self.num_leaves = positive_int(num_leaves, "num_leaves")
        if self.num_leaves < 2:
            raise ValueError(f"num_leaves: expected at least 2, got {num_leaves!r}")
        self.min_child_samples = positive_int(min_child_samples, "min_child_samples")
        if params is not None and not isinstance(params, dict):
            raise ValueError(f"params: expected a dict of LightGBM parameters, got {params!r}")
        if params is not None and any(k in params for k in ("objective", "application", "app", "loss")):
            raise ValueError("params: the objective is the engine's (the Lagrangian's gradient); do not set it")
        self.params = dict(params or {})
        self.n_jobs = None if n_jobs is None else positive_int(n_jobs, "n_jobs")
        self.correction = check_interval(correction, "correction", 0.0, 1.0, closed="right")
        self.max_take_backs = positive_int(max_take_backs, "max_take_backs", allow_zero=True)
        self.calibrate_exact = check_flag(calibrate_exact, "calibrate_exact")
        self.calibration_weight = check_interval(calibration_weight, "calibration_weight", 0.0, 1.0, closed="right")
        self.feasibility_tol = positive_float(feasibility_tol, "feasibility_tol", allow_zero=True)
        self.seed = check_seed(seed, allow_none=False, allow_negative=False)
        self.verbose = int(verbose)
        self.callbacks = list(callbacks)
        self.early_stopping_rounds = (None if early_stopping_rounds is None
                                      else positive_int(early_stopping_rounds, "early_stopping_rounds"))
        self.validation_metric = check_choice(validation_metric, VALIDATION_METRICS, "validation_metric")

    def lightgbm_params(self) -> dict:
        """The LightGBM parameters of the fit (the objective is set by :meth:`fit`)."""
        params = {"learning_rate": self.learning_rate, "num_leaves": self.num_leaves,
                  "min_data_in_leaf": self.min_child_samples, "seed": int(self.seed), "deterministic": True,
                  "force_col_wise": True, "verbosity": -1}
        if self.n_jobs is not None:
            params["num_threads"] = self.n_jobs
        return {**params, **self.params}

    # ------------------------------------------------------------------ fit
    def fit(self, data: Any, *, loss: Any = "bce", constraints: Any = (), validation: Any = None) -> FitResult:
        """Boost ``rounds`` trees on ``data`` under ``constraints`` (class docstring).

        Parameters
        ----------
        data : Dataset
            ``X`` (n, p), ``y`` (n,), optional ``weights``; the constraints read their fields.
        loss : {"bce", "mse"}
            The loss by name (a :class:`solvers.losses.ScaledLoss` of one counts as it: a constant
            factor does not change the fit).
        constraints : Constraint, iterable of them, or ConstraintSet
            Set up on ``data`` here.
        validation : Dataset, optional
            Rows not trained on (``X`` with the columns of ``data.X``, ``y``, optional ``weights``):
            their ``validation_metric`` compares the candidate rounds and stops early (class
            docstring).

        Returns
        -------
        FitResult
            ``model`` a :class:`~solvers.boosting.BoostedScores`; ``converged`` True iff it meets
            every bound on all training rows (boosting runs its budget of rounds: there is no
            stationarity test); ``status`` "converged", "infeasible" or "stopped_by_callback";
            ``info`` as the SQP engine's (``feasible``, ``violation``, ``c_exact``, ``row_names``,
            ``unmet_rows``, ``returned_iteration`` (the returned model's number of trees),
            ``relaxed_steps``) plus ``rounds`` (the trees kept), ``iterations`` (the rounds run),
            ``taken_back`` (the rounds whose tree was removed: ``iterations - rounds``), ``shift``
            (the end-game's constant) and ``init_score``; with ``validation``,
            ``validation_losses`` (the criterion per number of trees, from 0) and
            ``best_validation_round``.

        Raises
        ------
        ValueError
            A loss other than the squared error or the binary cross-entropy, targets it cannot
            fit, a bad dataset, a constraint whose rows have no Jacobian in the scores, or
            ``early_stopping_rounds`` without ``validation``, or ``validation_metric="error"``
            with the squared error.
        """
        import lightgbm

        n = check_dataset(data, complete_inputs=False)  # LightGBM routes missing input values
        if validation is None and self.early_stopping_rounds is not None:
            raise ValueError("early_stopping_rounds: needs validation rows (fit(..., validation=...))")
        name = loss_name(loss)
        if name not in BOOSTING_LOSSES:
            raise ValueError(f"loss: BoostedSQP needs per-row curvature and takes {sorted(BOOSTING_LOSSES)}, "
                             f"got {loss!r}")
        check_targets(name, data)
        cons = as_constraint_set(constraints)
        cons.setup(data)
        if self.calibrate_exact:  # the members to differentiate when the rows are calibrated to exact ones
            cons = cons.calibrated("group")
        m = cons.n_rows
        lower, upper = cons.lower.to(torch.float64), cons.upper.to(torch.float64)
        init = starting_constant(name, data)
        X = data.X.detach().cpu().numpy() if isinstance(data.X, torch.Tensor) else np.asarray(data.X)
        y = torch.as_tensor(data.y).detach().cpu().double().numpy()
        if m:
            _check_jacobians(cons, torch.full((n,), init, dtype=torch.float64), data)

        params = {**self.lightgbm_params(), "objective": "none", "metric": "None"}  # the engine reads no metric
        # no init_score: LightGBM's running scores of the rows are then the trees' sum from 0, bit for bit
        # what its prediction (the returned model) computes; the rounds add the starting constant
        train_set = lightgbm.Dataset(X, label=y, params=params, free_raw_data=False)
        booster = lightgbm.Booster(params=params, train_set=train_set)
        validation_loss = _checked_validation(validation, name, init, X.shape[1], self.validation_metric)
        state = RoundState(validation=validation_loss, init=init, targets=torch.from_numpy(y).reshape(-1))
        if state.validation is not None:
            state.validation.attach(booster, train_set)

        tracker = BestIterate(lower, upper, self.feasibility_tol)
        history = History(cons.row_names)
        bounds = WorkingBounds(lower, upper, self.calibrate_exact, self.calibration_weight)
        if _splittable(train_set):
            with one_thread_outside_lightgbm():
                rounds_done = self._boost(booster, name, cons, data, bounds, tracker, history, state)
        else:  # LightGBM would stop with a fatal error (printed, then raised): no column to split on
            _warn_no_usable_input(state)
            rounds_done = 0
        raw = _raw_training_scores(booster)  # after every round: LightGBM's running scores of the training rows
        last = raw + init
        last_f = row_derivatives(name, last, data).f if state.validation is None else state.validation.at(rounds_done)
        last_c = exact_rows(cons, last, data) if m else None
        tracker.offer_copy(lambda: (rounds_done, 0.0), last_f, last_c, rounds_done)
        if m and name == "bce":
            self._shift_candidates(booster, X, init, name, cons, data, lower, upper, tracker, last, last_c,
                                   rounds_done, state.validation)

        trees, shift = tracker.best.params if tracker.best is not None else (rounds_done, 0.0)
        model = BoostedScores(booster.model_to_string(num_iteration=trees) if trees > 0 else "", init + shift)
        known = raw if trees == rounds_done else state.best_raw[1] if state.best_raw[0] == trees else None
        if known is not None and trees > 0 and not state.taken_back:  # the booster's running scores: no new pass
            model.remember(data.X, known)
        return self._result(model, name, cons, data, bounds, history, state, tracker, init, rounds_done)

    def _boost(self, booster: Any, name: str, cons: Any, data: Any, bounds: WorkingBounds, tracker: BestIterate,
               history: History, state: RoundState) -> int:
        """The rounds (each :meth:`_round` and one tree); a round whose scores show that the previous
        tree overshot takes that tree back instead (class docstring, step 5). Returns the trees kept:
        none, with a :class:`NoUsableInputWarning`, when LightGBM finds no column to split on."""
        import lightgbm

        state.correction = self.correction
        before_last = bounds.snapshot()  # the working bounds before the last tree kept
        t = 0
        while t < self.rounds:  # a round interrupted to take the last tree back grows none and does not count
            state.iteration = t
            before = bounds.snapshot()
            try:
                booster.update(fobj=lambda preds, _: self._round(preds, name, cons, data, bounds, tracker, history,
                                                                 state))
            except _Overshoot as overshoot:  # at most max_take_backs times
                self._take_back(booster, bounds, before_last, state, history, overshoot.loss)
                continue
            except lightgbm.basic.LightGBMError as error:
                if state.trees or not _no_usable_input(error):
                    raise
                _warn_no_usable_input(state)
                break
            t += 1
            before_last = before
            state.trees += 1
            if state.validation is not None:
                state.validation.update(booster)
                if self.early_stopping_rounds is not None and _stalled(tracker, state, self.early_stopping_rounds):
                    break
            if self.verbose and t % max(1, self.rounds // 10) == 0:
                r = history.records[-1]
                logger.info("boosting round %d/%d: loss %.5g, exact violation %.3g", t, self.rounds, r["f"],
                            r["V_exact"])
            if state.stop:
                break
        last_loss = row_derivatives(name, _raw_training_scores(booster) + state.init, data).f if state.trees else None
        if last_loss is not None and self._overshot(last_loss, state):  # the last tree: no round after it
            self._take_back(booster, bounds, before_last, state, history, last_loss)
        return state.trees

    def _overshot(self, loss: float, state: RoundState) -> bool:
        """Whether the last tree left the training loss above the reference (the feasible starting constant's,
        else the least loss of a feasible constant score: :meth:`_feasible_constant_loss`) while rounds may
        still be taken back (class docstring, step 5)."""
        return (state.start_loss is not None and state.trees > 0 and state.taken_back < self.max_take_backs
                and loss > state.start_loss)

    def _feasible_constant_loss(self, name: str, cons: Any, data: Any, state: RoundState, lower: torch.Tensor,
                                upper: torch.Tensor) -> float | None:
        """Where the starting constant misses a bound: the least training loss of a constant score that
        meets every bound on the exact measure, or None. A binary classifier's constants predict one class
        for every row, so the candidates are the scores just above and just below 0 (the least loss on each
        side of the threshold, the starting constant lying on the other): the constraints' optimum is no
        worse than the feasible one, and a round whose tree leaves the loss above it overshot (step 5)."""
        if name != "bce":
            return None
        n = len(data)
        best = None
        for score in (1e-9, -1e-9):
            F = torch.full((n,), score, dtype=torch.float64)
            if float(row_violations(exact_rows(cons, F, data), lower, upper).max()) <= self.feasibility_tol:
                loss = row_derivatives(name, F, data, state.targets).f
                best = loss if best is None else min(best, loss)
        return best

    def _take_back(self, booster: Any, bounds: WorkingBounds, before: tuple, state: RoundState, history: History,
                   loss: float) -> None:
        """Remove the last tree (LightGBM's ``rollback_one_iter``), put the working bounds back to
        ``before`` (their snapshot before that tree's round), halve the correction share and mark that
        round in the history."""
        booster.rollback_one_iter()
        bounds.restore(before)
        state.trees -= 1
        state.taken_back += 1
        state.correction *= 0.5
        state.retry = True
        if state.validation is not None:
            state.validation.losses.pop()  # the criterion of the tree taken back
        grown = history.records[-1]  # the round that grew the tree: an interrupted round records nothing
        grown["taken_back"] = True
        logger.info("boosting: the tree of round %d left the training loss at %.5g, above the feasible constant's "
                    "%.5g; taken back, correction share now %.3g", grown["iteration"], loss, state.start_loss,
                    state.correction)

    # ------------------------------------------------------------------ one round
    def _round(self, preds: np.ndarray, name: str, cons: Any, data: Any, bounds: WorkingBounds,
               tracker: BestIterate, history: History, state: RoundState) -> tuple[np.ndarray, np.ndarray]:
        """LightGBM's custom objective for round ``state.iteration`` at the scores ``preds`` (those of
        ``state.trees`` trees): offers them as a candidate (unless a round at the same scores was taken
        back and offered them already), solves the QP and returns ``(g + J'y, h)``."""
        t, trees = state.iteration, state.trees
        offer = not state.retry
        state.retry = False
        F = torch.from_numpy(np.asarray(preds, dtype=np.float64).reshape(-1) + state.init)
        der = row_derivatives(name, F, data, state.targets)
        if self._overshot(der.f, state):
            raise _Overshoot(der.f)
        state.scores = F
        lower, upper = bounds.lower, bounds.upper
        m = int(lower.numel())
        record: dict = {"iteration": t, "f": der.f}
        offered_f = der.f  # the loss that compares candidates: the validation loss where there is one
        if state.validation is not None:
            offered_f = record["f_validation"] = state.validation.at(trees)
        grad = der.grad
        if m:
            t0 = time.perf_counter()
            c, dc = rows_and_output_jacobian(cons, F, data)
            c, J = c.to(torch.float64), dc.to(torch.float64)
            c_exact = exact_rows(cons, F, data, smooth=c)
            exact_viol = row_violations(c_exact, lower, upper)
            if t == 0:  # step 5's reference: the starting constant if feasible, else a feasible constant's loss
                state.start_loss = (der.f if float(exact_viol.max()) <= self.feasibility_tol
                                    else self._feasible_constant_loss(name, cons, data, state, lower, upper))
            if offer:
                became_best = tracker.offer_copy(lambda: _kept(state, trees, preds), offered_f, c_exact, t)
                state.stale = 0 if became_best else state.stale + int(tracker.feasible(exact_viol))
            lo, hi = bounds.update(c, c_exact)
            step = round_step(der.grad, der.hess, c, J, lo, hi, self.learning_rate, state, state.correction)
            grad = step.gradient
            record.update({
                COLUMN_C: c.tolist(), "c_exact": c_exact.tolist(), "V": float(row_violations(c, lo, hi).sum()),
                "V_exact": float(exact_viol.sum()), "V_exact_max": float(exact_viol.max()),
                "multipliers": step.qp.multipliers.tolist(), COLUMN_QP_STATUS: step.status,
                COLUMN_ACTIVE: [("u" if s > 0 else "l") + str(i) for i, s in enumerate(step.qp.active.tolist()) if s],
                "t_qp": time.perf_counter() - t0,
            })
        else:
            state.stale = 0 if tracker.offer_copy(lambda: _kept(state, trees, preds), offered_f, None, t) \
                else state.stale + 1
            record.update({"V": 0.0, "V_exact": 0.0, "V_exact_max": 0.0})
        history.append(record)
        if any(cb(self, record) for cb in self.callbacks):
            state.stop = True
        return grad.numpy(), der.hess.numpy()

    # ------------------------------------------------------------------ end-game
    def _shift_candidates(self, booster: Any, X: np.ndarray, init: float, name: str, cons: Any, data: Any,
                          lower: torch.Tensor, upper: torch.Tensor, tracker: BestIterate, last: torch.Tensor,
                          last_c: torch.Tensor, rounds_done: int, validation: ValidationLoss | None) -> None:
        """Offer the smallest feasible constant shifts (:mod:`solvers.boosting.shift`) of the last
        round's scores when they are infeasible, and of the least-violating round's when no round
        was feasible."""
        starts = []
        if not tracker.feasible(row_violations(last_c, lower, upper)):
            starts.append((rounds_done, last))
        best = tracker.best
        if best is not None and not tracker.feasible(best.row_violations) and best.params[0] != rounds_done:
            starts.append((best.params[0], _scores(booster, X, init, best.params[0])))
        for trees, scores in starts:
            for candidate in smallest_shifts(scores, lambda F: exact_rows(cons, F, data), lower, upper,
                                             self.feasibility_tol):
                f = (row_derivatives(name, scores + candidate.shift, data).f if validation is None
                     else validation.shifted(booster, trees, candidate.shift))
                tracker.offer_copy(lambda k=trees, s=candidate.shift: (k, s), f, candidate.c_exact, trees)

    def _result(self, model: BoostedScores, name: str, cons: Any, data: Any, bounds: WorkingBounds,
                history: History, state: RoundState, tracker: BestIterate, init: float, rounds_done: int) -> FitResult:
        """The final check of the returned model on all training rows, its warnings and the FitResult."""
        lower, upper = bounds.lower, bounds.upper
        trees, shift = tracker.best.params if tracker.best is not None else (rounds_done, 0.0)
        with torch.no_grad():
            out = model(data.X)
        f = row_derivatives(name, out, data).f
        m = int(lower.numel())
        c_exact = exact_rows(cons, out, data) if m else torch.zeros(0, dtype=torch.float64)
        viol = row_violations(c_exact, lower, upper) if m else c_exact
        feasible = bool((viol <= self.feasibility_tol).all()) if m else True
        unmet = warn_unmet("BoostedSQP", c_exact if m else None, lower, upper, cons.row_names, self.feasibility_tol,
                           stacklevel=4)
        warn_if_start("BoostedSQP", tracker.best, 0, rounds_done, self.feasibility_tol, stacklevel=4)
        f_constant = row_derivatives(name, torch.full_like(out, init), data).f  # the best constant's loss
        if not state.no_input:  # else NoUsableInputWarning (a ConstantPredictorWarning) said why it is the constant
            accuracy = majority = None
            if name == "bce":
                labels = torch.as_tensor(data.y).reshape(-1).double().cpu() > 0.5
                rate = float(labels.double().mean())
                accuracy, majority = float(((out.cpu() > 0) == labels).double().mean()), max(rate, 1.0 - rate)
            meets = True
            if m and no_better_than_constant(f, f_constant):  # one more pass, only before that warning
                meets = tracker.meets(exact_rows(cons, torch.full_like(out, init), data))
            warn_if_constant("BoostedSQP", f, f_constant, accuracy, majority, stacklevel=4,
                             constant_meets_bounds=meets, remedies="more rounds or a smaller learning_rate")
        status = "stopped_by_callback" if state.stop else ("converged" if feasible else "infeasible")
        ran = state.trees + state.taken_back  # rounds that grew a tree, those taken back included
        history.append({"iteration": ran, "returned": trees, "f": f, "c_exact": c_exact.tolist(),
                        "V_exact": float(viol.sum()), "V_exact_max": float(viol.max()) if m else 0.0,
                        "shift": shift, COLUMN_QP_STATUS: QP_FINAL, COLUMN_ACTIVE: []})
        info = {"feasible": feasible, "violation": float(viol.sum()), "violations": viol.tolist(),
                "max_row_violation": float(viol.max()) if m else 0.0, "c_exact": c_exact.tolist(),
                "row_names": cons.row_names, "unmet_rows": unmet, "returned_iteration": trees,
                "iterations": ran, "rounds": rounds_done, "taken_back": state.taken_back, "shift": shift,
                "init_score": init, "no_usable_input": state.no_input,
                "bound_offset": (bounds.offset + bounds.push).tolist(),
                "relaxed_steps": sum(r.get(COLUMN_QP_STATUS) == QP_RELAXED for r in history.records)}
        if state.validation is not None:
            info.update(validation_losses=list(state.validation.losses), best_validation_round=state.validation.best())
        return FitResult(model=model, history=history, status=status, converged=feasible, info=info)


class _Overshoot(Exception):
    """Raised by a round's objective when the scores it gets show that the last tree overshot
    (:meth:`BoostedSQP._overshot`): LightGBM then grows no tree, and :meth:`BoostedSQP._boost` takes the
    last one back."""

    def __init__(self, loss: float) -> None:
        super().__init__(loss)
        self.loss = float(loss)


@contextlib.contextmanager
def one_thread_outside_lightgbm() -> Iterator[None]:
    """Run the block with one torch thread and one BLAS thread (restored afterwards): the per-round
    work outside LightGBM is a few passes over ``n``-vectors and an ``m x n`` product, where waking
    worker threads costs more than it saves, and those threads would compete with LightGBM's own
    (``n_jobs``) for the cores between the rounds. The thread pools are looked up once per process
    (:func:`_thread_pools`): a lookup scans the loaded libraries, which costs more than a small fit's
    rounds outside LightGBM."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        with _thread_pools().limit(limits=1, user_api="blas"):
            yield
    finally:
        torch.set_num_threads(threads)


def _warn_no_usable_input(state: RoundState) -> None:
    """The :class:`NoUsableInputWarning` of a fit that grows no tree, its model the starting constant; marked in
    ``state`` so that the fit's closing checks do not say it again as a failed training
    (:func:`solvers.outcome.warn_if_constant`)."""
    state.no_input = True
    warnings.warn("BoostedSQP: no input column can split the training rows (every column constant, or no value "
                  "held by enough rows for a leaf: LightGBM's min_child_samples); the model is the starting "
                  "constant", NoUsableInputWarning, stacklevel=4)


def _splittable(train_set: Any) -> bool:
    """Whether LightGBM kept an input column of the constructed ``train_set`` to split on: a column that
    takes two values (a missing one counting as a value), each held by enough rows for a leaf
    (``min_child_samples``); the others it drops from its bins (``feature_num_bin`` 0)."""
    return any(train_set.feature_num_bin(j) > 1 for j in range(train_set.num_feature()))


def _no_usable_input(error: Exception) -> bool:
    """Whether a LightGBM error is its refusal to grow a tree on a data set without a usable column."""
    return "num_features" in str(error)


def _stalled(tracker: BestIterate, state: RoundState, patience: int) -> bool:
    """The best candidate meets every bound and ``patience`` feasible rounds have been offered since it."""
    best = tracker.best
    return best is not None and tracker.feasible(best.row_violations) and state.stale >= patience


def _checked_validation(validation: Any, name: str, init: float, n_features: int,
                         metric: str) -> ValidationLoss | None:
    """The :class:`ValidationLoss` of ``validation`` rows (None without), checked like the training rows."""
    if validation is None:
        return None
    check_dataset(validation, complete_inputs=False)
    check_targets(name, validation)
    if validation.X.ndim != 2 or validation.X.shape[1] != n_features:
        raise ValueError(f"validation: expected X with {n_features} columns like the training rows, got shape "
                         f"{tuple(validation.X.shape)}")
    return ValidationLoss(name, validation, init, metric)


@functools.lru_cache(maxsize=1)
def _thread_pools() -> Any:
    """threadpoolctl's controller of this process's thread pools (BLAS among them: numpy and torch load
    theirs when imported, before any fit)."""
    from threadpoolctl import ThreadpoolController

    return ThreadpoolController()


def _kept(state: RoundState, trees: int, preds: np.ndarray) -> tuple[int, float]:
    """The parameters ``(trees, shift)`` of a round's candidate that became the best, keeping the running
    scores it was offered at (``state.best_raw``): a model of those trees then needs no pass of the training
    rows through them (:meth:`~solvers.boosting.BoostedScores.remember`)."""
    state.best_raw = (trees, torch.from_numpy(np.array(preds, dtype=np.float64).reshape(-1)))
    return trees, 0.0


def _raw_training_scores(booster: Any) -> torch.Tensor:
    """The booster's running raw scores of its training rows (every tree so far, added tree by tree during
    training, not recomputed; without the starting constant), float64 (n,)."""
    return torch.from_numpy(running_scores(booster.eval_train))


def _scores(booster: Any, X: np.ndarray, init: float, trees: int | None = None) -> torch.Tensor:
    """``init + `` the raw score of the first ``trees`` trees (all: None) on ``X``, float64 (n,)."""
    if trees == 0:
        return torch.full((X.shape[0],), init, dtype=torch.float64)
    raw = booster.predict(np.asarray(X, dtype=np.float64), raw_score=True, num_iteration=trees)
    return torch.from_numpy(np.asarray(raw, dtype=np.float64).reshape(-1) + init)


def _check_jacobians(cons: Any, scores: torch.Tensor, data: Any) -> None:
    """ValueError naming the first constraint whose rows have no Jacobian in the per-row scores."""
    for member in cons:
        try:
            rows_and_output_jacobian(member, scores, data)
        except RuntimeError as exc:
            raise ValueError(f"constraints: {member.name!r} has no Jacobian with respect to the per-row scores, "
                             f"which boosting needs ({exc})") from None
