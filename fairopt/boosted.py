"""``model="gbm"`` of the estimators: gradient-boosted trees trained by :class:`solvers.boosting.BoostedSQP`.

One job: turn an estimator's training options and a :class:`fairopt.FairData` into a boosted
model (a :class:`solvers.history.FitResult` whose model is a :class:`solvers.boosting.BoostedScores`).
The estimator's ``epochs`` is the most boosting rounds and ``lr`` the learning rate
(shrinkage); ``engine_params`` go to :class:`~solvers.boosting.BoostedSQP` (``num_leaves``, 7 by
default here, :data:`GBM_DEFAULTS`; ``min_child_samples``, ``params`` for further LightGBM
parameters, ``n_jobs``, ...). The loss is
the binary cross-entropy on logits (classifier) or the squared error in the units of ``y``
(regressor); the rate constraints use the same smooth surrogate as ``method="sqp"``.

Hard constraints only: ``method`` must be ``"sqp"`` (boosting is the SQP in function space).

Number of rounds chosen on held-out rows (``engine_params``: ``stopping_fraction``, 0.2 by
default, None to run all ``epochs`` on all rows; ``early_stopping_rounds``, 50 by default, None:
the held-out fit runs all ``epochs``; ``validation_metric``, ``"loss"``). A
stratified part of the training rows (target x group cell,
:func:`fairopt.data.splitting.stratified_split_indices`) is held out, the booster is trained
under the constraints on the rest, and the round count ``T`` is the round with the lowest loss
on the held-out part (``validation_metric``) among those that meet every bound on the rows it
trained on (:class:`solvers.boosting.BoostedSQP` with ``validation``; with
``early_stopping_rounds``, stopping once that many feasible rounds have followed the best).
The returned model is then boosted on ALL training rows for ``ceil(T / (1 - stopping_fraction))``
rounds (at most ``epochs``): it sees ``1 / (1 - stopping_fraction)`` times as many rows as the
held-out fit, and the best number of rounds of a booster grows with its rows (each tree fits
more of the signal before it fits noise). The engine's guarantee (every bound met on all
training rows, or a warning) is then the one of a plain fit. The held-out fit's own warnings are
not passed on (they are about a model the user does not get), and when it returns its constant start
(no round met the bounds) the fit on all rows runs all ``epochs``.
Fewer than :data:`MIN_STOPPING_ROWS` held-out rows: no early stopping (``epochs`` rounds).

Under a margin (constraints tightened by :func:`fairopt.certificate.tighten`, the estimators'
``margin``) and with a held-out fit, the refit's margin is raised by the fit optimism that fit measures
(:func:`fit_optimism`, the held-out rows' shortfall beyond its noise): trees can meet a bound on
their training rows by fitting the group rates of those rows, and then new rows sit further
towards the bound than the sampling noise that :func:`fairopt.certificate.auto_margin` sizes
the margin by accounts for.
"""

from __future__ import annotations

import math
import warnings
from typing import Any

import torch

from fairopt.certificate.margins import held_out_spread
from fairopt.certificate.tightening import TightenedConstraint
from fairopt.data.splitting import stratified_split_indices
from solvers.boosting import BoostedSQP
from solvers.history import FitResult

__all__ = ["GBM_DEFAULTS", "MIN_STOPPING_ROWS", "TWO_SIDED_KEPT", "fit_optimism", "run_gbm"]

#: The estimators' defaults for ``model="gbm"``: at most 300 rounds (``epochs``) at learning rate 0.1
#: (``lr``) where those are None; trees of 7 leaves; the rounds chosen on a held-out 20% by the
#: validation loss, stopping after 50 feasible rounds without a better one (module docstring;
#: ``engine_params`` sets any of them). Chosen on the grid of ``benchmarks/gbm_defaults.py`` (five
#: data sets, three seeds each; ``benchmarks/results/gbm_defaults.md``): the number of rounds that
#: generalises best differs by data set by a factor of four or more (the fewest on Law, where 300
#: rounds fit the training rows), which no fixed count serves. Trees of 15 leaves fit the
#: group-wise multiplier term ``J'y`` to the training rows: under a tightened bound (``margin``)
#: their rounds swung between feasible models worse than the constant for all 300 rounds on Adult.
GBM_DEFAULTS: dict[str, Any] = {"epochs": 300, "lr": 0.1, "num_leaves": 7, "early_stopping_rounds": 50,
                                "stopping_fraction": 0.2, "validation_metric": "loss"}

#: Fewest held-out rows for early stopping (module docstring).
MIN_STOPPING_ROWS = 100

#: Share of a two-sided row's interval ``[l, u]`` that the fit optimism leaves open (:func:`fit_optimism`).
TWO_SIDED_KEPT = 0.05

#: The loss of each task.
GBM_LOSSES: dict[str, str] = {"binary": "bce", "regression": "mse"}


def run_gbm(options: Any, data: Any, constraints: list, reference: bool = False) -> FitResult:
    """:class:`solvers.boosting.BoostedSQP` with the estimator's options (a
    :class:`fairopt.training.TrainingOptions`) under ``constraints`` (none for ``reference``).

    Raises
    ------
    ValueError
        ``method`` other than ``"sqp"``, a ``batch_size`` (boosting uses all rows every round), an
        option :class:`~solvers.boosting.BoostedSQP` does not take in ``engine_params`` (or its
        ``rounds``/``learning_rate``, which are ``epochs``/``lr``), or a
        constraint without a Jacobian in the per-row scores (naming it).
    """
    if options.method != "sqp":
        raise ValueError(f"method: model='gbm' trains under hard constraints with method='sqp' (SQP in function "
                         f"space), got method={options.method!r}")
    if options.batch_size is not None:
        raise ValueError(f"batch_size: model='gbm' grows every tree on all training rows; leave batch_size None, "
                         f"got {options.batch_size!r}")
    given = dict(options.engine_params or {})
    patience = given.pop("early_stopping_rounds", GBM_DEFAULTS["early_stopping_rounds"])
    fraction = given.pop("stopping_fraction", GBM_DEFAULTS["stopping_fraction"])
    given.setdefault("validation_metric", GBM_DEFAULTS["validation_metric"])
    clash = sorted(set(given) & {"rounds", "learning_rate"})
    if clash:
        raise ValueError(f"engine_params: {clash} are the estimator's epochs and lr for model='gbm'; set those")
    kwargs = {"num_leaves": GBM_DEFAULTS["num_leaves"], **given, "seed": int(options.seed),
              "verbose": 1 if options.verbose in (1, True) else 0}
    kwargs["rounds"] = GBM_DEFAULTS["epochs"] if options.epochs is None else options.epochs
    kwargs["learning_rate"] = GBM_DEFAULTS["lr"] if options.lr is None else options.lr
    loss, constraints = GBM_LOSSES[options.task], [] if reference else constraints
    stopping = _stopping_fit(kwargs, patience, fraction, data, loss, constraints, int(options.seed))
    optimism = None
    if stopping is not None:
        probe, kept, held = stopping
        best_round = int(probe.info["returned_iteration"])
        if best_round > 0:  # a probe that kept its constant start (no round met the bounds) says nothing of rounds
            kwargs["rounds"] = min(kwargs["rounds"], math.ceil(best_round / (1.0 - float(fraction))))
        if any(isinstance(c, TightenedConstraint) for c in constraints):
            optimism = fit_optimism(probe.model, constraints, kept, held)
            constraints = [c.with_margin(c.margin + o) if isinstance(c, TightenedConstraint) else c
                           for c, o in zip(constraints, optimism)]
    result = _engine(kwargs).fit(data, loss=loss, constraints=constraints)
    if stopping is not None:
        best = int(probe.info["returned_iteration"])
        result.info.update(stopping_rounds=kwargs["rounds"], stopping_best_round=best,
                           stopping_probe_rounds=int(probe.info["rounds"]),
                           stopping_validation_loss=float(probe.info["validation_losses"][best]))
    if optimism is not None:
        result.info["fit_optimism"] = [float(v) for o in optimism for v in o.tolist()]  # rows in order
    return result


def fit_optimism(model: Any, constraints: list, kept: Any, held: Any) -> list[torch.Tensor]:
    r"""Per row of each constraint, the fit optimism of ``model`` (fitted on the rows ``kept``) that the
    rows ``held`` out of its fit reveal: how much closer to its bound (or further past it) the exact
    row lies on ``held`` than on ``kept``, shrunk by the noise of that difference, at least 0.

    The raw difference is ``o = c(held) - c(kept)`` on a finite upper side, ``c(kept) - c(held)`` on
    a finite lower side (the larger with both). It is the optimism ``b`` plus the two samples' noise,
    of standard deviation ``s`` (:func:`fairopt.certificate.held_out_spread` of the fitted model on
    ``kept``, the new sample the size of ``held``). The estimate is the positive-part James-Stein
    shrinkage of ``o`` towards 0,

    .. math:: \hat b = \max(o, 0)\, \max(0,\; 1 - s^2 / o^2),

    so a difference within the noise (``|o| <= s``) adds nothing, and one of several ``s`` adds
    nearly all of itself: a margin sized by the noise alone (:func:`fairopt.certificate.auto_margin`)
    leaves new rows past the bound by about ``b`` where ``b`` is real, and raising it by raw
    noise would cost accuracy where it is not. With row weights (``kept.weights``) ``s`` is not
    estimated and ``max(o, 0)`` is taken.
    A row with two finite sides is tightened on both by one margin, so its optimism is capped
    to keep :data:`TWO_SIDED_KEPT` of its interval: ``margin + optimism <= (1 - TWO_SIDED_KEPT)
    (u - l) / 2`` in the user's bounds (unless the margin alone takes more). A constraint without
    a margin (not a :class:`~fairopt.certificate.TightenedConstraint`) gets zeros.
    """
    with torch.no_grad():
        out_kept = model(kept.X).reshape(-1)
        out_held = model(held.X).reshape(-1)
    fraction = len(held) / (len(kept) + len(held))
    optimism = []
    for c in constraints:
        if not isinstance(c, TightenedConstraint):
            optimism.append(torch.zeros(int(c.upper.numel()), dtype=torch.float64))
            continue
        on_kept = c.exact(out_kept, kept).reshape(-1).to(torch.float64)
        on_held = c.exact(out_held, held).reshape(-1).to(torch.float64)
        lower, upper = c.lower.to(torch.float64), c.upper.to(torch.float64)
        worse_upper = torch.where(torch.isfinite(upper), on_held - on_kept, torch.zeros_like(on_held))
        worse_lower = torch.where(torch.isfinite(lower), on_kept - on_held, torch.zeros_like(on_held))
        raw = torch.maximum(worse_upper, worse_lower).clamp(min=0.0)
        if getattr(kept, "weights", None) is None:
            spread = held_out_spread(kept, c, fraction, outputs=out_kept)
            raw = torch.where(raw > spread, raw - spread ** 2 / torch.where(raw > 0, raw, 1.0), 0.0)  # o (1 - s^2/o^2)
        half_room = torch.where(torch.isfinite(lower) & torch.isfinite(upper),  # two-sided: the margin is
                                (upper - lower) / 2, torch.full_like(upper, math.inf))  # on both sides
        room = (1.0 - TWO_SIDED_KEPT) * half_room - TWO_SIDED_KEPT * torch.as_tensor(c.margin, dtype=torch.float64)
        optimism.append(torch.minimum(raw, room.clamp(min=0.0)))
    return optimism


#: LightGBM's names for the estimator's own budget and step (``engine_params`` points to these instead).
_ESTIMATOR_SPELLINGS = {"n_estimators": "epochs", "num_iterations": "epochs", "num_boost_round": "epochs",
                        "num_rounds": "epochs", "eta": "lr", "shrinkage_rate": "lr"}


def _engine(kwargs: dict) -> BoostedSQP:
    """:class:`~solvers.boosting.BoostedSQP` of ``kwargs``; a ValueError naming an option it does not take
    and where it goes: LightGBM's budget and step are the estimator's ``epochs`` and ``lr``, any other
    LightGBM parameter goes in ``engine_params={"params": {...}}``."""
    own = sorted(k for k in kwargs if k in _ESTIMATOR_SPELLINGS)
    if own:
        where = ", ".join(f"{k} -> {_ESTIMATOR_SPELLINGS[k]}" for k in own)
        raise ValueError(f"engine_params: {own} are the estimator's own budget and step for model='gbm' ({where}); "
                         "set those on the estimator")
    try:
        return BoostedSQP(**kwargs)
    except TypeError as exc:
        raise ValueError(f"engine_params: BoostedSQP does not accept these options ({exc}). Its options are those "
                         "of solvers.boosting.BoostedSQP (num_leaves, min_child_samples, params, n_jobs, ...) and "
                         "early_stopping_rounds, stopping_fraction; other LightGBM parameters go in "
                         "engine_params={'params': {...}}, e.g. {'params': {'max_depth': 3}}") from None


def _stopping_fit(kwargs: dict, patience: Any, fraction: Any, data: Any, loss: str, constraints: list,
                  seed: int) -> tuple[FitResult, Any, Any] | None:
    """The held-out fit of the module docstring on a split of ``data`` with the rows it trained on and
    the rows held out (None when ``fraction`` is None or the held-out part would have fewer than
    :data:`MIN_STOPPING_ROWS` rows)."""
    engine = _engine({**kwargs, "early_stopping_rounds": patience})  # checks the options in every case
    if fraction is None:
        return None
    if isinstance(fraction, bool) or not isinstance(fraction, (int, float)) or not 0.0 < fraction <= 0.5:
        raise ValueError(f"engine_params: stopping_fraction must be None or in (0, 0.5], got {fraction!r}")
    if fraction * len(data) < MIN_STOPPING_ROWS:
        return None
    kept, held = stratified_split_indices(data.split_strata(), float(fraction), seed)
    kept_data, held_data = data.subset(kept), data.subset(held)
    with warnings.catch_warnings():  # about a model the user does not get: the fit on all rows says what holds
        warnings.simplefilter("ignore")
        probe = engine.fit(kept_data, loss=loss, constraints=constraints, validation=held_data)
    return probe, kept_data, held_data
