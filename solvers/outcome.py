"""What an engine returns: the best iterate it saw, and an honest word when a bound is unmet.

Engines offer candidates to a :class:`BestIterate` with their objective and exact rows on all
training rows. It keeps the feasible one (every ``max(c_i - u_i, 0) + max(l_i - c_i, 0) <=
feasibility_tol``) of lowest objective, else the one of least total violation (ties: objective);
beside it, on request, the infeasible one of least total violation among those a filter admits
(``closest``), which an engine may return instead of a feasible best that is only trivially so
(:func:`solvers.sqp.endgame.leave_trivial_constant`).
:func:`warn_unmet` names every row the returned iterate violates.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass
from typing import Any, Callable, Sequence

import numpy as np
import torch

from solvers.losses import best_constant_output, get_loss, loss_name, unregularised
from solvers.problem import assign_parameters, eval_mode, flat_parameters, model_outputs, row_chunks, row_violations

__all__ = ["BoundWarning", "BestIterate", "Candidate", "ConstantPredictorWarning", "DivergedWarning",
           "MINI_BATCH_REMEDIES", "NEAR_CONSTANT_SHARE", "NEAR_CONSTANT_Z", "NearConstantWarning", "NoProgressWarning",
           "RISE_TOLERANCE", "TrainingInstabilityWarning", "constant_meets_bounds", "learned_classifier",
           "near_constant", "no_better_than_constant", "outputs_near_constant", "predicts_one_class",
           "training_accuracy", "training_remedies", "unmet_rows", "warn_if_constant", "warn_if_poor_first_order_fit",
           "warn_if_start", "warn_if_unstable", "warn_unmet"]

#: Relative rise of the training loss over its starting value that :func:`warn_if_unstable` reports.
RISE_TOLERANCE = 0.25
#: Standard errors by which a classifier's training accuracy must exceed the majority-class rate
#: (:func:`near_constant`).
NEAR_CONSTANT_Z = 2.0
#: Share of the rows below which the less often predicted class makes a classifier near-constant.
NEAR_CONSTANT_SHARE = 0.005


class BoundWarning(UserWarning):
    """The returned model violates a hard bound (exactly, on all training rows)."""


class DivergedWarning(UserWarning):
    """Training stopped on a non-finite or exploding objective; the last finite (or best) iterate is
    returned."""


class NoProgressWarning(UserWarning):
    """The starting point is returned: no later iterate was better (typically none was feasible)."""


class ConstantPredictorWarning(UserWarning):
    """The returned model's training loss is not below the best constant output's: training failed, as
    fairness bounds never force this (a constant model meets them)."""


class NearConstantWarning(ConstantPredictorWarning):
    """The returned classifier is nearly constant (:func:`near_constant`): bounds only such a model
    meets force it, or training stopped short."""


class NoUsableInputWarning(ConstantPredictorWarning):
    """No input column can split the training rows (every column constant, or no value held by enough
    rows for a tree's leaf): a tree learner has nothing to grow, and the model is its starting constant."""


class TrainingInstabilityWarning(UserWarning):
    """The training loss rose above its start and the best constant's, or the divergence guard backed
    off: the returned model may be far from what the budget could reach."""


@dataclass
class Candidate:
    """One offered iterate: its copy (flat parameters or e.g. a fitted learner), objective, exact rows,
    iteration."""

    params: Any
    f: float
    c_exact: torch.Tensor
    row_violations: torch.Tensor
    iteration: int

    @property
    def violation(self) -> float:
        return float(self.row_violations.sum())


class BestIterate:
    """The best iterate offered so far (module docstring) against the user's bounds, never a shifted
    working copy."""

    def __init__(self, lower: torch.Tensor, upper: torch.Tensor, feasibility_tol: float,
                 closest_filter: Callable[[], bool] | None = None) -> None:
        self.lower = lower.to(torch.float64)
        self.upper = upper.to(torch.float64)
        self.feasibility_tol = float(feasibility_tol)
        #: whether the iterate being offered (the model holds it) may be :attr:`closest`; None keeps no closest
        self.closest_filter = closest_filter
        self.best: Candidate | None = None
        #: with a ``closest_filter``: the infeasible candidate of least total violation (ties: objective) among
        #: those the filter admits, kept also once a feasible one is the best
        self.closest: Candidate | None = None
        self.offered = 0
        #: objective of the first finite candidate, and the largest one offered with its iteration:
        #: the course of the training loss on all rows (:func:`warn_if_unstable`)
        self.first_f: float | None = None
        self.peak: tuple[float, int] | None = None

    def feasible(self, row_viol: torch.Tensor) -> bool:
        """Every row within ``feasibility_tol``."""
        tol = self.feasibility_tol  # a few rows: Python floats (a NaN is never feasible)
        return all(v <= tol for v in row_viol.reshape(-1).tolist())

    def meets(self, c_exact: torch.Tensor) -> bool:
        """Whether the exact rows ``c_exact`` (float64) lie within the tracker's bounds (:meth:`feasible` of
        their violations)."""
        return self.feasible(row_violations(c_exact, self.lower, self.upper))

    def _better(self, new: Candidate, old: Candidate) -> bool:
        new_ok, old_ok = self.feasible(new.row_violations), self.feasible(old.row_violations)
        if new_ok != old_ok:
            return new_ok
        if new_ok:
            return new.f < old.f
        return (new.violation, new.f) < (old.violation, old.f)

    def offer(self, params: Sequence[torch.Tensor], f: float, c_exact: torch.Tensor | None, iteration: int,
              prefer: bool = False) -> bool:
        """Whether the current parameters become the best (never with non-finite values); ``prefer`` (a
        feasible KKT point that stopped training) replaces the best if feasible."""
        return self.offer_copy(lambda: flat_parameters(params), f, c_exact, iteration, prefer)

    def offer_copy(self, copy: Callable[[], Any], f: float, c_exact: Any, iteration: int,
                   prefer: bool = False) -> bool:
        """:meth:`offer` for any iterate, ``copy()`` called only when it becomes the best (or the closest
        infeasible one, :attr:`closest`; the filter is asked only of an infeasible candidate closer than it)."""
        self.offered += 1
        c = (torch.zeros(0, dtype=torch.float64) if c_exact is None
             else torch.as_tensor(c_exact).detach().to(torch.float64).reshape(-1))
        if not math.isfinite(f) or not all(math.isfinite(v) for v in c.tolist()):
            return False
        if self.first_f is None:
            self.first_f = float(f)
        if self.peak is None or f > self.peak[0]:
            self.peak = (float(f), int(iteration))
        viol = row_violations(c, self.lower, self.upper) if c.numel() else c
        new = Candidate(None, float(f), c, viol, int(iteration))  # type: ignore[arg-type]
        feasible = self.feasible(viol)
        to_best = self.best is None or self._better(new, self.best) or (prefer and feasible)
        to_closest = (self.closest_filter is not None and not feasible
                      and (self.closest is None or self._better(new, self.closest)) and self.closest_filter())
        if not (to_best or to_closest):
            return False
        new.params = copy()
        if to_closest:
            self.closest = new
        if to_best:
            self.best = new
        return to_best

    def worth_restoring(self, f: float, c_exact: Any, gap: float) -> bool:
        """Whether to make an infeasible finite iterate feasible rather than return the best: no feasible
        candidate yet, or the best one's objective above ``f`` by more than ``gap * |f|``."""
        if self.best is None or c_exact is None:
            return False
        c = torch.as_tensor(c_exact).detach().to(torch.float64).reshape(-1)
        if not math.isfinite(f) or not all(math.isfinite(v) for v in c.tolist()):
            return False
        if not c.numel() or self.meets(c):
            return False
        if not self.feasible(self.best.row_violations):
            return True
        return self.best.f - f > gap * abs(f)

    def restore(self, params: Sequence[torch.Tensor]) -> Candidate | None:
        """Write the best parameters back into ``params`` (in place); returns the candidate."""
        if self.best is None:
            return None
        assign_parameters(params, self.best.params)
        return self.best


def unmet_rows(c_exact: torch.Tensor, lower: torch.Tensor, upper: torch.Tensor, row_names: Sequence[str],
               tol: float) -> list[str]:
    """``"<row>: <value> (bound <side> <bound>)"`` for every row whose exact violation exceeds ``tol``."""
    c = c_exact.detach().to(torch.float64).reshape(-1)
    lo, hi = lower.to(torch.float64), upper.to(torch.float64)
    viol = row_violations(c, lo, hi)
    out = []
    for i in torch.nonzero(viol > tol).reshape(-1).tolist():
        side = f"<= {hi[i].item():.6g}" if c[i] > hi[i] else f">= {lo[i].item():.6g}"
        name = row_names[i] if i < len(row_names) else str(i)
        out.append(f"{name}: {c[i].item():.6g} (bound {side}, violation {viol[i].item():.3g})")
    return out


def warn_unmet(engine: str, c_exact: torch.Tensor | None, lower: torch.Tensor, upper: torch.Tensor,
               row_names: Sequence[str], tol: float, stacklevel: int = 3) -> list[str]:
    """Emit one :class:`BoundWarning` for the rows the returned model violates; returns them."""
    if c_exact is None or not c_exact.numel():
        return []
    rows = unmet_rows(c_exact, lower, upper, row_names, tol)
    if rows:
        warnings.warn(f"{engine}: the returned model violates {len(rows)} constraint row(s) on the training data "
                      f"(exact measure, tolerance {tol:g}): " + "; ".join(rows), BoundWarning, stacklevel=stacklevel)
    return rows


def warn_if_start(engine: str, chosen: Candidate | None, start: int, last: int, tol: float,
                  stacklevel: int = 3) -> bool:
    """Warn (:class:`NoProgressWarning`) when the returned candidate is the start of a run that went on;
    whether it did."""
    if chosen is None or chosen.iteration != start or last <= start:
        return False
    warnings.warn(f"{engine}: the starting point is returned: none of the {last - start} later iterates offered "
                  f"was better (none met the bounds on all training rows within {tol:g}, or none had a lower "
                  "objective). Train longer, with larger batches or a looser bound.", NoProgressWarning,
                  stacklevel=stacklevel)
    return True


def near_constant(accuracy: float, majority: float, n_rows: int | None = None,
                  positive_share: float | None = None) -> list[str]:
    """Why a binary classifier is (nearly) constant on its ``n_rows`` training rows; empty when it is not.

    Its ``accuracy`` is not above ``m + NEAR_CONSTANT_Z * se``, ``se = sqrt(m (1 - m) / n)`` the binomial
    standard error at the majority-class rate ``m`` (0 without ``n_rows``); or the rarer predicted
    class, ``min(q, 1 - q)`` for ``q = positive_share``, covers fewer than
    ``max(1, NEAR_CONSTANT_SHARE * n)`` rows.
    """
    reasons = []
    se = 0.0 if not n_rows else math.sqrt(max(majority * (1.0 - majority), 0.0) / n_rows)
    if not accuracy > majority + NEAR_CONSTANT_Z * se:
        margin = f" + {NEAR_CONSTANT_Z:g} standard errors ({NEAR_CONSTANT_Z * se:.4f})" if se > 0 else ""
        reasons.append(f"training accuracy {accuracy:.4f} is not above the majority-class rate {majority:.4f}"
                       f"{margin}, what predicting the majority class for every row scores")
    if positive_share is not None:
        rare = min(positive_share, 1.0 - positive_share)
        n = n_rows or 0
        if rare * n < max(1.0, NEAR_CONSTANT_SHARE * n) - 1e-9:
            reasons.append(f"one class is predicted for {1.0 - rare:.2%} of the training rows")
    return reasons


def outputs_near_constant(out: Any, y: Any) -> tuple[list[str], float]:
    """:func:`near_constant` of a binary classifier's outputs ``out`` (logits: ``out > 0`` predicts 1) against
    0/1 targets ``y`` on their rows: ``(reasons, accuracy)``, the majority rate and the positive share taken
    from these rows."""
    out = np.asarray(out, dtype=np.float64).reshape(-1)
    y = np.asarray(y, dtype=np.float64).reshape(-1) > 0.5
    share = float(y.mean())
    accuracy = float(np.mean((out > 0) == y))
    return near_constant(accuracy, max(share, 1.0 - share), y.size, float(np.mean(out > 0))), accuracy


#: The training settings that help a run of mini-batches stopped short (:func:`training_remedies`).
MINI_BATCH_REMEDIES = "more epochs, full batches or a smaller lr"


def training_remedies(mini_batch: bool) -> str:
    """The training settings a warning advises for a run that stopped short: more epochs or a smaller
    ``lr``, and full batches where the run took its steps on mini-batches (a full-batch run has them)."""
    return MINI_BATCH_REMEDIES if mini_batch else "more epochs or a smaller lr"


def no_better_than_constant(f: float, f_constant: float) -> bool:
    """Whether a training loss ``f`` is not below ``f_constant``, the best constant output's (finite)."""
    return math.isfinite(f_constant) and not f < f_constant


def warn_if_constant(engine: str, f: float, f_constant: float, accuracy: float | None = None,
                     majority: float | None = None, stacklevel: int = 3, *, n_rows: int | None = None,
                     constant_meets_bounds: bool | None = True, remedies: str = MINI_BATCH_REMEDIES) -> bool:
    """Warn when the returned model is no better than a constant (:class:`ConstantPredictorWarning`:
    ``f`` not below ``f_constant``, :func:`no_better_than_constant`) or nearly constant
    (:class:`NearConstantWarning`, :func:`near_constant`); whether it did.

    ``constant_meets_bounds`` says whether the best constant output meets every bound on the exact
    measure (the library's group-rate, covariance, GeDI and distance-covariance bounds always do; a user
    constraint need not). True: the bounds do not force a loss above the constant's, so training failed.
    False: they may (a model that meets them can be worse than that constant), so the warning says so
    instead of blaming training. None: not checked (rows held in chunks), the warning does not claim either.
    ``remedies``: the training settings that help this engine's run, as the warning names them
    (:func:`training_remedies`).
    """
    failed = no_better_than_constant(f, f_constant)
    reasons = [f"training loss {f:.4g} >= {f_constant:.4g}, the loss of the best constant output"] if failed else []
    if accuracy is not None and majority is not None:
        reasons += near_constant(accuracy, majority, n_rows)
    if not reasons:
        return False
    if failed:
        if constant_meets_bounds is False:
            why = ("The best constant output violates the bounds, so they may force this: a model that meets them "
                   "can have a higher loss than that constant. If a better model should meet them, try "
                   f"{remedies}, and look at the history.")
        else:
            premise = ("The bounds do not force this (the best constant output meets them)"
                       if constant_meets_bounds else "Bounds that a constant model meets do not force this")
            why = (f"{premise}: training failed. Try {remedies}, or look at the "
                   "history; constraint rows that rest on few data rows (small groups under a sharp surrogate) "
                   "need a smoother surrogate; where those end at the constant itself, this model class may hold no "
                   "better model that meets the bounds on these inputs, and a more flexible one (a network) may.")
        warnings.warn(f"{engine}: the returned model is no better than a constant predictor ({'; '.join(reasons)}). "
                      + why, ConstantPredictorWarning, stacklevel=stacklevel)
    else:
        warnings.warn(f"{engine}: the returned model is nearly a constant predictor ({'; '.join(reasons)}). Bounds "
                      "that only such a model meets force this (a constant model meets every group-rate bound); "
                      f"otherwise training stopped short: {remedies}.",
                      NearConstantWarning, stacklevel=stacklevel)
    return True


def warn_if_poor_first_order_fit(engine: str, model: torch.nn.Module, loss_fn: Any, data: Any,
                                 stacklevel: int = 4, mini_batch: bool = True) -> bool:
    """:func:`warn_if_constant` for the first-order engines (Penalty, LagrangianDual): the returned model's
    loss on all rows (in eval mode, without an L2 term) against the best constant output's
    (:func:`solvers.losses.best_constant_output`) and, for the binary cross-entropy, its accuracy against the
    majority rate. A constant zeroes the library's penalties and meets its bounds, so a model above the
    constant's loss is a failed optimisation of the penalised or Lagrangian objective too. ``mini_batch``:
    the run took its steps on batches of rows (:func:`training_remedies`)."""
    plain = get_loss(unregularised(loss_fn))
    with torch.no_grad(), eval_mode(model):
        f = float(plain(model_outputs(model, data), data))
    _, f_constant = best_constant_output(loss_fn, data)
    accuracy = training_accuracy(model, data) if loss_name(loss_fn) == "bce" else (None, None)
    return warn_if_constant(engine, f, f_constant, *accuracy, stacklevel=stacklevel, n_rows=len(data),
                            constant_meets_bounds=None, remedies=training_remedies(mini_batch))


def constant_meets_bounds(model: torch.nn.Module, cons: Any, data: Any, tracker: "BestIterate", a: float) -> bool:
    """Whether the constant output ``a`` (the best one, :func:`solvers.losses.best_constant_output`) meets the
    tracker's bounds on the exact rows ``cons.exact(a 1, data)`` over all rows of ``data`` (held in
    memory); True without constraint rows. One pass over the rows, asked only before a
    :class:`ConstantPredictorWarning` (:func:`warn_if_constant`'s ``constant_meets_bounds``)."""
    if not cons.n_rows:
        return True
    with torch.no_grad():
        out = model_outputs(model, data)
        c = cons.exact(torch.full_like(out, a), data).reshape(-1).to(torch.float64)
    return tracker.meets(c)


def warn_if_unstable(engine: str, tracker: BestIterate, restarts: int = 0, f_constant: float = -math.inf,
                     stacklevel: int = 3, mini_batch: bool = True, returned_f: float | None = None) -> bool:
    """Warn (:class:`TrainingInstabilityWarning`) when the divergence guard backed off, or the largest
    loss offered to ``tracker`` exceeds the first by ``RISE_TOLERANCE`` of it and ``f_constant`` (a
    rise towards the bound's price is expected, beyond a constant model's loss is not); whether it did.
    ``mini_batch``: the run took steps on batches of rows, so larger ones are advised too. ``returned_f``,
    the returned model's training loss, is named beside the rise: below the start's it says that the run
    recovered from a transient rise (a network's first mini-batch steps at times), above it that the
    returned model is worse than where it began."""
    reasons = []
    if restarts:
        reasons.append(f"the divergence guard sent the parameters back {restarts} time(s) and cut the learning "
                       f"rate by {2 ** restarts:g}")
    first, peak = tracker.first_f, tracker.peak
    if (first is not None and peak is not None and peak[0] > first + RISE_TOLERANCE * abs(first)
            and peak[0] > f_constant):
        reasons.append(f"the training loss on all rows rose from {first:.4g} to {peak[0]:.4g} (iteration {peak[1]})")
    if not reasons:
        return False
    returned = "The returned model is the best iterate seen"
    if returned_f is not None and math.isfinite(returned_f) and first is not None:
        recovered = "below" if returned_f < first else "not below"
        returned += f" (its training loss {returned_f:.4g}, {recovered} the start's {first:.4g})"
    warnings.warn(f"{engine}: unstable training: {'; '.join(reasons)}. {returned}; a smaller "
                  f"lr{' or larger batches' if mini_batch else ''} usually helps, and a smoother "
                  "surrogate where constraint rows "
                  "rest on few data rows (small groups).", TrainingInstabilityWarning,
                  stacklevel=stacklevel)
    return True


def learned_classifier(model: torch.nn.Module, data: Any, chunk_rows: int | None = None) -> bool:
    """Whether a binary classifier is not nearly constant on the rows of ``data`` (:func:`near_constant` of
    its outputs against the 0/1 targets, :func:`outputs_near_constant`): more accurate than the majority
    class by ``NEAR_CONSTANT_Z`` standard errors, and each class predicted for at least
    ``NEAR_CONSTANT_SHARE`` of the rows. Eval mode, in chunks of ``chunk_rows``."""
    outs, ys = [], []
    with torch.no_grad(), eval_mode(model):
        for chunk in row_chunks(data, chunk_rows):
            outs.append(model_outputs(model, chunk).reshape(-1).double())
            ys.append(chunk.y.reshape(-1).double())
    reasons, _ = outputs_near_constant(torch.cat(outs).numpy(), torch.cat(ys).numpy())
    return not reasons


def predicts_one_class(model: torch.nn.Module, data: Any, chunk_rows: int | None = None) -> bool:
    """Whether a binary classifier predicts one class for every row of ``data``: ``out > 0`` on all rows or
    on none (eval mode, in chunks of ``chunk_rows``)."""
    positive = negative = False
    with torch.no_grad(), eval_mode(model):
        for chunk in row_chunks(data, chunk_rows):
            above = model_outputs(model, chunk).reshape(-1) > 0
            positive, negative = positive or bool(above.any()), negative or not bool(above.all())
            if positive and negative:
                return False
    return True


def training_accuracy(model: torch.nn.Module, data: Any, chunk_rows: int | None = None) -> tuple[float, float]:
    """Unweighted accuracy of ``out > 0`` against ``y > 0.5`` on all rows, and ``max(mean y, 1 - mean y)``."""
    n = len(data)
    hits = positives = 0.0
    with torch.no_grad(), eval_mode(model):
        for chunk in row_chunks(data, chunk_rows):
            y = chunk.y.reshape(-1) > 0.5
            hits += float(((model_outputs(model, chunk).reshape(-1) > 0) == y).sum())
            positives += float(y.sum())
    rate = positives / max(n, 1)
    return hits / max(n, 1), max(rate, 1.0 - rate)
