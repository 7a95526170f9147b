"""Penalty (soft-constraint) training: ``min_w f(w) + sum_j weight_j P_j(w)``.

``f`` is the mean training loss and each ``P_j`` the total violation of a constraint's surrogate
rows or any callable ``P(out, batch) -> scalar`` (:mod:`fairopt.penalties` has ready ones).
:class:`FirstOrderTrainer` is the mini-batch loop shared with :class:`solvers.lagrangian.LagrangianDual`.
"""

from __future__ import annotations

import logging
import math
import numbers
import time
import warnings
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Sequence

import torch
from torch import nn

from solvers.contract import check_constraint, looks_like_constraint, offers_setup
from solvers.history import COLUMN_PENALTY, FitResult, History
from solvers.losses import LossFn, check_targets, get_loss
from solvers.optimizers import OPTIMIZERS, make_optimizer, needs_create_graph
from solvers.outcome import DivergedWarning, warn_if_poor_first_order_fit
from solvers.problem import (assign_parameters, check_dataset, check_outputs_differentiable, flat_parameters,
                             model_outputs, trainable_parameters, violation)
from solvers.progress import check_progress, epoch_logs, progress
from solvers.sampling import covers_all_rows, minibatches
from solvers.validation import check_choice, check_seed, positive_float, positive_int

__all__ = ["LR_SCHEDULES", "Penalty", "PenaltyTerm", "penalty_terms", "penalised_loss", "FirstOrderTrainer",
           "schedule_factor", "smoothed_switch"]

logger = logging.getLogger(__name__)

PenaltyFn = Callable[[torch.Tensor, Any], torch.Tensor]


@dataclass
class PenaltyTerm:
    """One scalar penalty term ``P(out, batch)`` with its name and optional ``setup(data)``."""

    name: str
    fn: PenaltyFn
    setup: Callable[[Any], None] | None = None
    #: a constraint term's training state: ``"smoothing"`` (None: the plain hinge) and the running ``"mean"``
    state: dict | None = None

    def __call__(self, out: torch.Tensor, batch: Any) -> torch.Tensor:
        value = self.fn(out, batch)
        if not isinstance(value, torch.Tensor) or value.numel() != 1:
            shape = tuple(value.shape) if isinstance(value, torch.Tensor) else type(value).__name__
            raise ValueError(f"penalties: {self.name!r} must return a scalar tensor, got {shape}")
        return value.reshape(())


def _constraint_term(constraint: Any, smoothing: float | None = None) -> PenaltyTerm:
    """``P(out) = V(c(out)) = sum_i max(c_i - u_i, 0) + max(l_i - c_i, 0)`` on the surrogate rows; with
    ``smoothing``, its gradient in training switched by a running mean of the rows (:func:`smoothed_switch`)."""
    state: dict[str, Any] = {"smoothing": smoothing}

    def hinge(out: torch.Tensor, batch: Any) -> torch.Tensor:
        c = constraint(out, batch).reshape(-1)
        value = violation(c, constraint.lower, constraint.upper)
        if state["smoothing"] is None or not torch.is_grad_enabled():
            return value
        return smoothed_switch(c, value, constraint.lower, constraint.upper, state, state["smoothing"])

    setup = constraint.setup if offers_setup(constraint) else None
    return PenaltyTerm(str(getattr(constraint, "name", "constraint")), hinge, setup, state)


def smoothed_switch(c: torch.Tensor, value: torch.Tensor, lower: torch.Tensor, upper: torch.Tensor,
                    state: dict, smoothing: float) -> torch.Tensor:
    """``value`` (the batch's ``V(c_B)``) with the gradient ``sum_i 1{m_i > u_i} grad c_B,i - 1{m_i < l_i} grad c_B,i``.

    ``m <- (1 - smoothing) m + smoothing c_B`` is a running mean of the batches' rows (kept in ``state``;
    the first batch's rows to start). Why: the batch hinge's gradient is switched on by the batch's own rows,
    ``1{c_B,i > u_i}``, which near the bound is on in a share of the batches even where the rows on all data
    are met (``E max(c_B - u, 0) > max(E c_B - u, 0)``), so on average it pushes the fit inside the bound,
    the further the noisier the rows. The running mean estimates the rows on all data, and given the
    switch the batch's direction ``grad c_B`` is unbiased for the rows' ``grad c``.
    """
    with torch.no_grad():
        previous = state.get("mean")
        mean = c.detach().clone() if previous is None else (1 - smoothing) * previous + smoothing * c.detach()
        state["mean"] = mean
    lo, up = lower.to(c), upper.to(c)
    above = (mean > up) & torch.isfinite(up)
    below = (mean < lo) & torch.isfinite(lo)
    zero = torch.zeros_like(c)
    linear = (torch.where(above, c - torch.where(above, up, zero), zero)
              + torch.where(below, torch.where(below, lo, zero) - c, zero)).sum()
    return value.detach() + (linear - linear.detach())


def penalty_terms(penalties: Any, smoothing: float | None = None) -> list[PenaltyTerm]:
    """``penalties`` (one or an iterable) as :class:`PenaltyTerm` s: a constraint
    (:func:`solvers.contract.looks_like_constraint`, checked by :func:`solvers.contract.check_constraint`)
    becomes the total violation of its surrogate rows (``smoothing``: :func:`_constraint_term`); any other
    callable ``P(out, batch) -> scalar`` is used as it is, labelled by its ``name`` (or class/function name),
    with its ``setup(data)`` if any."""
    if penalties is None:
        return []
    items = [penalties] if callable(penalties) or isinstance(penalties, PenaltyTerm) else list(penalties)
    terms = []
    for item in items:
        if isinstance(item, PenaltyTerm):
            terms.append(item)
        elif looks_like_constraint(item):
            check_constraint(item)  # the contract every engine checks: a broken one is refused, not penalised raw
            terms.append(_constraint_term(item, smoothing))
        elif callable(item):
            name = getattr(item, "name", None) or getattr(item, "__name__", None) or type(item).__name__
            terms.append(PenaltyTerm(str(name), item, getattr(item, "setup", None)))
        else:
            raise ValueError(f"penalties: expected a Constraint or a callable(out, batch) -> scalar, got {item!r}")
    return terms


def _check_weights(weight: Any) -> list[float]:
    """One weight or a sequence of weights, each a finite number >= 0."""
    values = [weight] if isinstance(weight, numbers.Real) else list(weight)
    for w in values:
        if isinstance(w, bool) or not isinstance(w, numbers.Real) or not math.isfinite(w) or w < 0:
            raise ValueError(f"weight: expected finite numbers >= 0, got {weight!r}")
    return [float(w) for w in values]


def _term_weights(weights: list[float], n_terms: int) -> list[float]:
    """One weight per term: a single weight is shared by all terms."""
    if len(weights) == 1:
        return weights * n_terms
    if len(weights) != n_terms:
        raise ValueError(f"weight: {len(weights)} weights for {n_terms} penalties")
    return list(weights)


def _set_up_terms(penalties: Any, data: Any, smoothing: float | None = None) -> list[PenaltyTerm]:
    """:func:`penalty_terms` with each term's ``setup(data)`` called."""
    terms = penalty_terms(penalties, smoothing)
    for term in terms:
        if term.setup is not None:
            term.setup(data)
    return terms


def penalised_loss(loss: str | LossFn, penalties: Any, weight: float | Sequence[float], data: Any) -> LossFn:
    """``loss(out, batch) + sum_j weight_j P_j(out, batch)`` as one loss, for engines that take a plain
    loss (the regularisation-only approach of [SQP] sec 4.2); terms are set up on ``data`` now and
    those of weight 0 left out."""
    base = get_loss(loss)
    terms = _set_up_terms(penalties, data)
    active = [(w, t) for w, t in zip(_term_weights(_check_weights(weight), len(terms)), terms) if w > 0]

    def objective(out: torch.Tensor, batch: Any) -> torch.Tensor:
        value = base(out, batch)
        for w, term in active:
            value = value + w * term(out, batch)
        return value

    return objective


#: Step-size schedules of the first-order loop (:func:`schedule_factor`).
LR_SCHEDULES: tuple[str, ...] = ("none", "cosine", "linear")


def schedule_factor(schedule: str, step: int, total: int) -> float:
    """The factor on ``lr`` at ``step`` ``t`` (0-based) of ``T = total``: 1 for ``"none"``;
    ``(1 + cos(pi t / T)) / 2`` for ``"cosine"``; ``1 - t / T`` for ``"linear"``. A decayed step lets the
    last iterate of noisy (mini-batch) gradients settle instead of wandering about the optimum by about
    ``lr``."""
    if schedule == "none" or total <= 0:
        return 1.0
    t = min(step, total) / total
    return 0.5 * (1.0 + math.cos(math.pi * t)) if schedule == "cosine" else 1.0 - t


def _set_lr(optimizer: Any, lr: float) -> None:
    """Every parameter group of ``optimizer`` at step size ``lr``."""
    for group in optimizer.param_groups:
        group["lr"] = lr


class FirstOrderTrainer:
    """The mini-batch loop of :class:`Penalty` and :class:`~solvers.lagrangian.LagrangianDual`: per batch
    the objective ``f + extra`` (:meth:`_extra`), one optimiser step, then :meth:`_after_step`; a
    non-finite objective stops with status "diverged" and the last finite iterate."""

    engine = "first_order"

    def __init__(
        self,
        *,
        epochs: int,
        lr: float,
        batch_size: int | None,
        optimizer: str,
        optimizer_options: dict | None,
        seed: int,
        tol: float,
        verbose: int | str,
        callbacks: Sequence[Callable],
        lr_schedule: str = "none",
    ) -> None:
        self.epochs = epochs
        self.lr_schedule = check_choice(lr_schedule, LR_SCHEDULES, "lr_schedule")
        self.lr = lr
        self.batch_size = batch_size
        self.optimizer = optimizer
        self.optimizer_options = dict(optimizer_options or {})
        self.seed = seed
        self.tol = tol
        self.verbose = verbose
        self.callbacks = tuple(callbacks)
        positive_int(epochs, "epochs", allow_integral_float=True)
        positive_float(lr, "lr")
        if batch_size is not None:
            positive_int(batch_size, "batch_size", allow_integral_float=True)
        check_choice(optimizer, OPTIMIZERS, "optimizer")
        positive_float(tol, "tol")
        check_seed(seed, allow_none=False)
        check_progress(verbose)

    # ------------------------------------------------------------------ subclass hooks
    def _extra(self, out: torch.Tensor, batch: Any) -> tuple[torch.Tensor | None, dict]:
        """The term added to the loss (None for none) and the fields it records."""
        raise NotImplementedError  # pragma: no cover

    def _after_step(self, record: dict) -> None:
        """Called after each optimiser step with the step's record (may add fields)."""

    # ------------------------------------------------------------------ shared pieces

    @staticmethod
    def _forward(model: nn.Module, batch: Any) -> torch.Tensor:
        """``model(batch.X)`` as (n,)."""
        return model_outputs(model, batch)

    @staticmethod
    def _set_gradients(objective: torch.Tensor, params: list[torch.Tensor], create_graph: bool) -> None:
        """``p.grad = d objective / d p``; with the graph (for AdaHessian) if ``create_graph``."""
        if not create_graph:
            objective.backward()
            return
        grads = torch.autograd.grad(objective, params, create_graph=True, allow_unused=True)
        for p, g in zip(params, grads):
            p.grad = torch.zeros_like(p) if g is None else g

    def _train(self, model: nn.Module, data: Any, loss_fn: LossFn, row_names: Sequence[str],
               on_epoch_end: Callable[[int], None] | None = None) -> tuple[History, str]:
        """Run the epochs, calling ``on_epoch_end(iteration)`` after each; the history and the status."""
        params = trainable_parameters(model)
        n = check_dataset(data)
        check_outputs_differentiable(model, data)
        optimizer = make_optimizer(self.optimizer, params, lr=self.lr, seed=self.seed, **self.optimizer_options)
        create_graph = needs_create_graph(optimizer)
        generator = torch.Generator().manual_seed(int(self.seed))
        history = History(row_names=row_names)
        status = "max_epochs"
        iteration = 0
        epochs: Iterable[int] = range(int(self.epochs))
        epochs = progress(epochs, self.verbose, self.engine, "epoch")
        model.train()
        last_finite = flat_parameters(params)
        total_steps = int(self.epochs) * (1 if covers_all_rows(self.batch_size, n) else math.ceil(n / self.batch_size))
        for epoch in epochs:
            for idx in minibatches(n, self.batch_size, generator):
                batch = data if idx is None else data.subset(idx)
                t0 = time.perf_counter()
                if self.lr_schedule != "none":
                    _set_lr(optimizer, self.lr * schedule_factor(self.lr_schedule, iteration, total_steps))
                optimizer.zero_grad()
                out = self._forward(model, batch)
                f = loss_fn(out, batch)
                extra, fields = self._extra(out, batch)
                objective = f if extra is None else f + extra
                if not bool(torch.isfinite(objective.detach())):
                    assign_parameters(params, last_finite)  # the iterate before the diverging step
                    warnings.warn(f"{self.engine}: training diverged (non-finite objective) at iteration "
                                  f"{iteration}; the last finite iterate is returned", DivergedWarning, stacklevel=3)
                    return history, "diverged"
                last_finite = flat_parameters(params)  # the iterate whose objective was just seen finite
                self._set_gradients(objective, params, create_graph)
                optimizer.step()
                record = {"iteration": iteration, "epoch": epoch, "f": float(f.detach()),
                          "objective": float(objective.detach()), **fields}
                self._after_step(record)
                record["t_step"] = time.perf_counter() - t0
                history.append(record)
                iteration += 1
                if any(cb(self, record) for cb in self.callbacks):
                    return history, "stopped_by_callback"
            if on_epoch_end is not None:
                on_epoch_end(iteration)
            if epoch_logs(self.verbose):
                last = history[-1]
                logger.info("epoch %d: f=%.5f objective=%.5f", epoch, last["f"], last["objective"])
        return history, status

    def _stationarity(self, model: nn.Module, data: Any, loss_fn: LossFn) -> float:
        """``max_i |d (f + extra) / d w_i|`` on the full data at the final parameters."""
        params = trainable_parameters(model)
        out = self._forward(model, data)
        extra, _ = self._extra(out, data)
        objective = loss_fn(out, data) if extra is None else loss_fn(out, data) + extra
        grads = torch.autograd.grad(objective, params, allow_unused=True)
        norms = [float(g.abs().max()) for g in grads if g is not None]
        return max(norms) if norms else 0.0


class Penalty(FirstOrderTrainer):
    r"""Train ``min_w f(w) + sum_j weight_j P_j(w)`` with a fixed penalty weight.

    The soft-constraint baseline: [SQP] eq. 3 (``weight = 1/lambda``), the distance-covariance
    regulariser of [DC] eq. 3.1, FaUCI's ``E + lambda F`` [FU] eq. 12. ``f`` is a mini-batch's
    (weighted) mean loss and each ``P_j`` is evaluated on the same batch: a constraint's
    ``V(c) = sum_i max(c_i - u_i, 0) + max(l_i - c_i, 0)``, or a callable's value. A term of weight 0
    is only recorded, so ``weight=0`` is plain training.

    Parameters
    ----------
    weight : float or sequence of float, default 1.0
        ``>= 0``; one weight for all terms or one per term.
    epochs : int, default 100
    batch_size : int or None, default None
        Rows per mini-batch (shuffled each epoch from ``seed``); None: full batch.
    optimizer : {"adam", "sgd", "adahessian"}, default "adam"
        :class:`torch.optim.Adam`, :class:`torch.optim.SGD` or
        :class:`solvers.optimizers.AdaHessian`.
    lr : float, default 1e-3
    optimizer_options : dict, optional
        Extra constructor arguments of the optimiser.
    seed : int, default 0
        Seed of the mini-batch order (and of AdaHessian's probe vectors).
    tol : float, default 1e-4
        ``converged``: ``max |grad of the penalised objective|`` on the full data ``<= tol`` (a
        subgradient at a hinge's kink may stay above it).
    verbose : int or "auto", default "auto"
        As in :class:`solvers.StochasticSQP` (:mod:`solvers.progress`).
    callbacks : sequence of callables
        ``cb(engine, record) -> bool | None`` after every step; True stops training.
    lr_schedule : {"none", "cosine", "linear"}, default "none"
        Step size over the run's ``T = epochs * K`` steps (``K`` batches an epoch): constant, or ``lr`` times
        :func:`schedule_factor` at step ``t``, ``(1 + cos(pi t / T)) / 2`` or ``1 - t / T``.
    row_smoothing : float in (0, 1] or None, default None
        Mini-batches only: a constraint term's gradient switched on and off by a running mean of its rows,
        ``m <- (1 - row_smoothing) m + row_smoothing c_B``, instead of by the batch's rows (whose hinge is
        biased upwards, :func:`smoothed_switch`); None: the batch hinge. Full batch: the plain hinge.

    History columns: ``f`` (loss), ``P`` (weighted penalty sum), ``objective``,
    ``penalty[<term>]`` (each term's unweighted value), ``epoch``, ``iteration``, ``t_step``.
    """

    engine = "penalty"

    def __init__(
        self,
        weight: float | Sequence[float] = 1.0,
        epochs: int = 100,
        batch_size: int | None = None,
        optimizer: str = "adam",
        lr: float = 1e-3,
        seed: int = 0,
        *,
        optimizer_options: dict | None = None,
        tol: float = 1e-4,
        verbose: int | str = "auto",
        callbacks: Sequence[Callable] = (),
        lr_schedule: str = "none",
        row_smoothing: float | None = None,
    ) -> None:
        super().__init__(epochs=epochs, lr=lr, batch_size=batch_size, optimizer=optimizer,
                         optimizer_options=optimizer_options, seed=seed, tol=tol, verbose=verbose,
                         callbacks=callbacks, lr_schedule=lr_schedule)
        if row_smoothing is not None and not (isinstance(row_smoothing, numbers.Real)
                                              and not isinstance(row_smoothing, bool) and 0 < row_smoothing <= 1):
            raise ValueError(f"row_smoothing: expected None or a number in (0, 1], got {row_smoothing!r}")
        self.row_smoothing = row_smoothing
        self.weight = weight
        self._weights = _check_weights(weight)
        self._terms: list[PenaltyTerm] = []

    def _extra(self, out: torch.Tensor, batch: Any) -> tuple[torch.Tensor | None, dict]:
        total = None
        values = []
        for term, w in zip(self._terms, self._term_weights):
            if w == 0.0:
                with torch.no_grad():
                    value = term(out.detach(), batch)
            else:
                value = term(out, batch)
                total = w * value if total is None else total + w * value
            values.append(float(value.detach()))
        weighted = sum(w * v for w, v in zip(self._term_weights, values))
        return total, {"P": weighted, COLUMN_PENALTY: values}

    def fit(self, model: nn.Module, data: Any, *, loss: str | LossFn = "bce", penalties: Any = ()) -> FitResult:
        """Train ``model`` in place on ``data`` with the penalised objective.

        Parameters
        ----------
        model : torch.nn.Module
            Maps ``data.X`` (n, p) to one output per row, (n,) or (n, 1).
        data : Dataset
        loss : {"bce", "mse", "poisson"} or callable(out, batch) -> scalar
        penalties : Constraint, callable or iterable of them
            See :func:`penalty_terms`.

        Returns
        -------
        FitResult
            ``info``: ``weights``, ``penalty_names``, ``stationarity`` (final max-abs gradient
            of the penalised objective on the full data).
        """
        loss_fn = get_loss(loss)
        check_dataset(data)
        check_targets(loss_fn, data)
        mini = not covers_all_rows(self.batch_size, len(data))
        smoothing = self.row_smoothing if mini else None
        self._terms = _set_up_terms(penalties, data, smoothing)
        self._term_weights = _term_weights(self._weights, len(self._terms))
        names = [t.name for t in self._terms]
        history, status = self._train(model, data, loss_fn, names)
        for term in self._terms:  # the plain hinge from here on (stationarity on all rows)
            if term.state is not None:
                term.state["smoothing"] = None
        stationarity = self._stationarity(model, data, loss_fn) if status != "diverged" else math.inf
        if status != "diverged":
            warn_if_poor_first_order_fit("Penalty", model, loss_fn, data, mini_batch=mini)
        return FitResult(model=model, history=history, status=status, converged=stationarity <= self.tol,
                         info={"weights": list(self._term_weights), "penalty_names": names,
                               "stationarity": stationarity})
