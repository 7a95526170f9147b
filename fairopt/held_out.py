"""Held-out statements of the estimators: what a fit says about rows it did not train on.

One job: the estimators' ``margin``, ``validation_fraction``, ``confidence``, ``on_fail``
and ``n_candidates`` (:class:`HeldOutOptions`, checked when built): the margins that tighten
the training bounds, the held-out part of the rows, the certified candidate sequence, the
certificates (:func:`fairopt.certificate.certify`) and the range predicted for new rows.
:func:`fit_held_out` runs a whole fit with these options and returns a :class:`HeldOutFit`;
the estimator sets its fitted attributes (``certificate_``, ``candidates_``,
``validation_indices_``, ``predicted_held_out_``) from it.
"""

from __future__ import annotations

import logging
import math
import warnings
from dataclasses import dataclass
from typing import Any, Callable, Sequence

import numpy as np
import pandas as pd
import torch
from torch import nn

from fairopt._validation import check_choice, check_interval, positive_float, positive_int
from fairopt.data import FairData, stratified_split_indices
from fairopt.exceptions import FairnessWarning
from fairopt.status import met_tolerance
from fairopt.constraints.base import release_caches
from solvers.history import FitResult
from solvers.problem import prediction_outputs

__all__ = ["CANDIDATE_INFLATIONS", "ON_FAIL", "HeldOutFit", "HeldOutOptions", "candidate_inflations",
           "certificates", "certified_sequence", "constraint_margins", "fit_held_out", "generalisation_table",
           "predicted_held_out", "raise_or_warn_failed", "require_all_groups", "tightened", "training_rows",
           "validation_split"]

logger = logging.getLogger(__name__)

#: Values of ``on_fail=``.
ON_FAIL = ("warn", "raise", "ignore")
#: Largest and smallest inflation of the certified candidates' margins (multiples of the
#: held-out part's own certificate half-width ``z se``; :func:`fairopt.certificate.auto_margin`).
CANDIDATE_INFLATIONS = (2.0, 0.5)

#: ``train(data, constraints) -> (FitResult, relaxed steps)``: one candidate fit.
Trainer = Callable[[FairData, list], tuple[FitResult, int]]


@dataclass(frozen=True)
class HeldOutOptions:
    """The estimator parameters of the held-out statements, checked when built.

    Attributes
    ----------
    margin : float or "auto"
        Tightening of every training bound, in the units of the constraint rows.
    validation_fraction : float in (0, 0.5] or None
        Share of the rows held out for the certificates; None: none held out.
    confidence : float in (0, 1)
    on_fail : {"warn", "raise", "ignore"}
        Reaction to a failed certificate.
    n_candidates : int >= 1
        Candidates of the certified sequence (``margin="auto"`` with a held-out part).
    seed : int
        Seed of the split, the margins' bootstrap and the certificates.
    """

    margin: float | str = 0.0
    validation_fraction: float | None = None
    confidence: float = 0.95
    on_fail: str = "warn"
    n_candidates: int = 1
    seed: int = 0

    def __post_init__(self) -> None:
        if isinstance(self.margin, str):  # a margin in the units of the constraint rows, or "auto"
            check_choice(self.margin, ("auto",), "margin")
        else:
            positive_float(self.margin, "margin", allow_zero=True)
        if self.validation_fraction is not None:
            check_interval(self.validation_fraction, "validation_fraction", 0.0, 0.5, closed="right")
        check_interval(self.confidence, "confidence", 0.0, 1.0)
        check_choice(self.on_fail, ON_FAIL, "on_fail")
        positive_int(self.n_candidates, "n_candidates")


@dataclass(frozen=True)
class HeldOutFit:
    """A fit under the held-out options (:func:`fit_held_out`).

    Attributes
    ----------
    data : FairData
        The rows trained on (all rows without ``validation_fraction``).
    result : FitResult
        The returned model's engine result (the chosen candidate's with a certified sequence).
    relaxed : int
        Its relaxed SQP steps.
    training : list
        The constraints it trained under (the user's without a margin, else tightened copies).
    certificate : list of Certificate or None
        One held-out statement per constraint; None without a held-out part.
    candidates : pandas.DataFrame or None
        The certified sequence's candidates (inflation, held-out values, passed, chosen).
    validation_indices : numpy.ndarray or None
        Rows of the input held out.
    predicted : pandas.DataFrame or None
        With a margin: :func:`predicted_held_out`.
    """

    data: FairData
    result: FitResult
    relaxed: int
    training: list
    certificate: list | None
    candidates: pd.DataFrame | None
    validation_indices: np.ndarray | None
    predicted: pd.DataFrame | None


def fit_held_out(options: HeldOutOptions, data: FairData, constraints: list, *, train: Trainer) -> HeldOutFit:
    """Hold out ``validation_fraction`` of the rows, compute the margins, train (one fit, or the
    certified sequence with ``margin="auto"`` and a held-out part) and certify the result on the
    held-out rows."""
    data, held_out, indices = validation_split(options, data)  # (data, None, None) without validation_fraction
    margins = constraint_margins(options, data, constraints)  # None without margin
    candidates = None
    if held_out is not None and options.margin == "auto":  # certified candidates, fixed sequence
        result, relaxed, training, certified, candidates = certified_sequence(options, data, held_out, constraints,
                                                                              margins, train=train)
    else:
        training = tightened(constraints, margins)  # `constraints` itself without margin
        result, relaxed = train(data, training)
        certified = None if held_out is None else certificates(options, held_out, result.model, constraints)
    result.model.eval()
    predicted = (None if training is constraints else
                 predicted_held_out(result.model, data, constraints, training, result.info.get("fit_optimism")))
    return HeldOutFit(data=data, result=result, relaxed=relaxed, training=training, certificate=certified,
                      candidates=candidates, validation_indices=indices, predicted=predicted)


def validation_split(options: HeldOutOptions, data: FairData) -> tuple[FairData, FairData | None, np.ndarray | None]:
    """``(train, held_out, held-out row indices)``: with ``validation_fraction`` a stratified
    split (target x sensitive cell, seeded by ``seed``, :meth:`FairData.split`, which re-fits
    the preprocessing on the training part); without it ``(data, None, None)``."""
    fraction = options.validation_fraction
    if fraction is None:
        return data, None, None
    try:
        held_out_idx = _held_out_indices(options, data)
        train, held_out = data.split(test_size=float(fraction), seed=int(options.seed))
    except ValueError as exc:
        raise ValueError(f"validation_fraction: cannot hold out {fraction!r} of {len(data)} rows ({exc})") from None
    return train, held_out, held_out_idx


def training_rows(options: HeldOutOptions, data: FairData) -> int:
    """How many of ``data``'s rows the engine trains on: all without ``validation_fraction``, else those
    :func:`validation_split` keeps (the same seeded stratified split, counted without building it)."""
    if options.validation_fraction is None:
        return len(data)
    try:
        return len(data) - len(_held_out_indices(options, data))
    except ValueError:  # validation_split reports it with the options' names
        return len(data)


def _held_out_indices(options: HeldOutOptions, data: FairData) -> np.ndarray:
    """The rows of ``data`` held out by ``validation_fraction`` (:meth:`FairData.split`'s seeded stratified
    split); ValueError where the strata cannot be split so."""
    return stratified_split_indices(data.split_strata(), float(options.validation_fraction), int(options.seed))[1]


def candidate_inflations(n_candidates: int) -> np.ndarray:
    """The fixed, decreasing sequence of margin inflations of the certified candidates:
    ``n_candidates`` values evenly spaced from 2 to 0.5 (``[2.0]`` for one candidate)."""
    high, low = CANDIDATE_INFLATIONS
    return np.linspace(high, low, n_candidates) if n_candidates > 1 else np.array([high])


def constraint_margins(options: HeldOutOptions, data: FairData, constraints: list) -> list | None:
    """One margin per constraint (a number, or per-row values in the rows' units), or None
    without a margin. ``margin="auto"``: :func:`fairopt.certificate.auto_margin` for a new
    sample the size of the held-out part (of a 30% hold-out without
    ``validation_fraction``); with ``validation_fraction`` at inflation 1 (one held-out
    half-width ``z se``; :func:`certified_sequence` scales it). The originals are set up
    on ``data`` here (the engine sets up the tightened copies)."""
    if not constraints or (not isinstance(options.margin, str) and float(options.margin) == 0.0):
        return None
    for c in constraints:  # the originals are measured on the training rows after the fit (a relative bound too)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", FairnessWarning)  # the engine's set-up of the copy reports them
            c.setup(data)
    if options.margin != "auto":
        return [float(options.margin)] * len(constraints)
    from fairopt.certificate import DEFAULT_HELD_OUT_FRACTION, auto_margin

    certified = options.validation_fraction is not None
    fraction = options.validation_fraction or DEFAULT_HELD_OUT_FRACTION
    margins = []
    for c in constraints:
        margins.append(auto_margin(data, c, float(options.confidence), float(fraction), seed=int(options.seed),
                                   for_certificate=certified, inflation=1.0 if certified else 2.0))
    return margins


def tightened(constraints: list, margins: list | None, scale: float = 1.0) -> list:
    """The constraints the engine trains under: ``constraints`` itself without margins,
    else copies tightened by ``scale * margin`` (:func:`fairopt.certificate.tighten`)."""
    if margins is None:
        return constraints
    from fairopt.certificate import tighten

    return [tighten(c, m * scale) for c, m in zip(constraints, margins)]


def certificates(options: HeldOutOptions, held_out: FairData, model: nn.Module, constraints: list) -> list:
    """One :func:`fairopt.certificate.certify` statement per constraint on the held-out rows."""
    from fairopt.certificate import certify

    model.eval()
    try:
        return [certify(model, held_out, c, float(options.confidence), seed=int(options.seed)) for c in constraints]
    finally:
        release_caches(constraints)


def certified_sequence(options: HeldOutOptions, data: FairData, held_out: FairData, constraints: list,
                       margins: list, *, train: Trainer) -> tuple[FitResult, int, list, list, pd.DataFrame]:
    """Fit candidates under margins of decreasing inflation (:func:`candidate_inflations`),
    certify each on the held-out rows in that order and keep the last one whose
    certificates all pass before the first that fails (or the first candidate when it
    fails).

    Fixed-sequence testing: the order is fixed before any held-out row is looked at and
    every candidate is trained on the other rows only, so the returned model's
    certificate keeps its confidence level without a multiplicity correction. A false
    certificate needs a pass of the first candidate in the order that violates the bound
    in the population, which happens with probability at most ``1 - confidence``. A smaller
    margin gives a more accurate model when the held-out rows allow it; the sequence stops
    at the first failure, so a failing candidate costs one fit. A candidate whose margin leaves a
    row no feasible value on the training rows (:class:`fairopt.certificate.tightening.MarginTooLargeError`)
    is skipped (``skipped`` in the table says why), and so is one whose model is degenerate on its training
    rows (constant, or a classifier no better than one: :func:`fairopt.diagnostics.degenerate_reason`) unless
    it is the last: a constant meets a rate bound trivially, so its certificate would pass and end the sequence
    at a model that is no answer. Both are decided without the held-out rows, so the sequence stays fixed; a
    ValueError when every candidate's margin is too large.

    Returns the chosen candidate's FitResult, relaxed-step count, training constraints
    and certificates, and the table of the candidates tried (``chosen`` marks the returned one).
    """
    from fairopt.certificate.tightening import MarginTooLargeError
    from fairopt.diagnostics import degenerate_reason  # read at the call: tests replace it

    chosen, chosen_index, rows, too_large = None, 0, [], None
    inflations = candidate_inflations(int(options.n_candidates))
    for position, inflation in enumerate(inflations):
        try:
            training = tightened(constraints, margins, float(inflation))
            result, relaxed = train(data, training)
        except MarginTooLargeError as exc:  # no room under the bound: the training rows alone decide it
            too_large = exc
            rows.append({"inflation": float(inflation), "passed": None, "skipped": str(exc)})
            logger.info("certified candidates: inflation %.3g skipped (%s)", inflation, exc)
            continue
        degenerate = degenerate_reason(result.model, data) if position < len(inflations) - 1 else None
        if degenerate:  # decided on the training rows: the sequence stays fixed
            rows.append({"inflation": float(inflation), "passed": None,
                         "skipped": f"degenerate on its training rows: {degenerate}"})
            logger.info("certified candidates: inflation %.3g skipped (degenerate: %s)", inflation, degenerate)
            continue
        certified = certificates(options, held_out, result.model, constraints)
        passed = all(cert.passed for cert in certified)
        rows.append({"inflation": float(inflation), "passed": passed,
                     **{f"{cert.constraint}: held-out": cert.realised for cert in certified},
                     **{f"{cert.constraint}: confidence bound": cert.confidence_bound for cert in certified}})
        if chosen is not None and not passed:
            break
        chosen, chosen_index = (result, relaxed, training, certified), len(rows) - 1
        if not passed:  # the first candidate fails: it is returned, with its failed certificate
            break
    if chosen is None:
        raise MarginTooLargeError(
            f"margin='auto' with validation_fraction: every candidate margin (inflations {rows[0]['inflation']:g} "
            f"to {rows[-1]['inflation']:g} of the held-out spread) leaves no room under the bound; the smallest: "
            f"{too_large}. Loosen the bound, give more rows, or pass a numeric margin")
    table = pd.DataFrame(rows).assign(chosen=lambda t: np.arange(len(t)) == chosen_index)
    logger.info("certified candidates: kept inflation %.3g (%d of %d tried)", rows[chosen_index]["inflation"],
                chosen_index + 1, len(rows))
    return (*chosen, table)


def _no_room_for_margin(cert: Any) -> bool:
    """Whether a failed certificate's bound is at the end of its measure's range: a ratio bounded below by 1,
    a difference bounded above by 0. Exact parity: any margin asks for more than parity, which no group rates
    meet (:class:`fairopt.exceptions.MarginTooLargeError`), so no margin is advised."""
    if cert.measure.endswith(" ratio"):
        return cert.bound_side == "lower" and cert.bound >= 1.0
    return cert.measure.endswith(" difference") and cert.bound_side == "upper" and cert.bound <= 0.0


def raise_or_warn_failed(certified: list | None, on_fail: str, margin: float | str = 0.0) -> None:
    """The ``on_fail`` reaction to failed certificates: a :class:`fairopt.exceptions.CertificateError`
    (``"raise"``), a :class:`fairopt.FairnessWarning` (``"warn"``) or nothing (``"ignore"``, or
    none failed), naming each failed statement; the advice fits the ``margin`` the fit used (no margin:
    one; a margin already: a larger one, more rows or a looser bound)."""
    if certified is None:
        return
    from fairopt.exceptions import CertificateError

    failed = [cert for cert in certified if not cert.passed]
    if not failed or on_fail == "ignore":
        return
    message = "; ".join(
        f"{cert.constraint}: {cert.measure} {cert.realised:.4g} on {cert.n} held-out rows, {cert.confidence:.0%} "
        f"confidence bound {cert.confidence_bound:.4g}, required {'>=' if cert.bound_side == 'lower' else '<='} "
        f"{cert.bound:g}" for cert in failed)
    if margin == "auto":
        advice = ("margin='auto' was used: more rows, a lower confidence or a looser bound may help; a larger numeric "
                  "margin trades accuracy for it")
    elif any(_no_room_for_margin(cert) for cert in failed):
        advice = ("more rows or a looser bound may help; a bound at the end of its measure's range (a ratio of 1, a "
                  "difference of 0) leaves no room for a margin")
    elif margin:
        advice = f"a margin larger than {margin:g}, more rows or a looser bound may help"
    else:
        advice = "margin='auto', more rows or a looser bound may help"
    message = (f"held-out certificate failed - {message}. The bound is not shown to hold beyond the training rows "
               f"at this confidence (see certificate_; {advice}).")
    if on_fail == "raise":
        raise CertificateError(message)
    warnings.warn(message, FairnessWarning, stacklevel=3)


def predicted_held_out(model: nn.Module, data: FairData, constraints: list, training: list,
                       raised: Sequence[float] | None = None) -> pd.DataFrame:
    """Per constraint row: the exact training value, the margin, and the range
    ``[train - margin, train + margin]`` predicted for new rows (a prediction, not a
    certificate), with whether that range lies within the user's bounds. ``raised``: what the
    engine added to the margins of ``training``, one value per row of all constraints in order
    (``model="gbm"``'s fit optimism, :func:`fairopt.boosted.fit_optimism`)."""
    out = prediction_outputs(model, data.X)
    frames = []
    extra = iter(raised or [])
    for c, t in zip(constraints, training):
        values = c.exact(out, data).reshape(-1).to(torch.float64)
        lower, upper = c.lower.to(torch.float64), c.upper.to(torch.float64)
        margin = torch.where(torch.isfinite(upper), upper - t.upper.to(torch.float64),
                             t.lower.to(torch.float64) - lower)
        margin = torch.nan_to_num(margin, nan=0.0, posinf=0.0, neginf=0.0)
        if raised is not None:
            margin = margin + torch.tensor([next(extra) for _ in range(margin.numel())], dtype=torch.float64)
        low, high = values - margin, values + margin
        within = torch.where(torch.isfinite(upper), high <= upper + 1e-12, True) & \
            torch.where(torch.isfinite(lower), low >= lower - 1e-12, True)
        names = list(c.row_names or [f"{c.name}[{i}]" for i in range(values.numel())])
        frames.append(pd.DataFrame({"constraint": c.name, "train": values.numpy(), "margin": margin.numpy(),
                                    "predicted_low": low.numpy(), "predicted_high": high.numpy(),
                                    "bound_lower": lower.numpy(), "bound_upper": upper.numpy(),
                                    "within": within.numpy()}, index=names))
    return pd.concat(frames) if frames else pd.DataFrame()


def require_all_groups(data: FairData, levels: dict) -> None:
    """Every training group (``levels``: name -> training levels) of every discrete sensitive
    feature has rows in ``data`` (else a group rate, and so a held-out violation, is undefined)."""
    for name, kind in data.sensitive_kinds.items():
        if kind == "continuous":
            continue
        present = set(torch.unique(data.sensitive[name]).long().tolist())
        missing = [level for code, level in enumerate(levels[name]) if code not in present]
        if missing:
            raise ValueError(f"sensitive_features: the groups {missing} of {name!r} have no rows here; every "
                             "training group must be present to compare violations")


def generalisation_limit(constraint: Any, tol: float) -> float:
    """The largest held-out gap :meth:`check_generalisation` accepts for ``constraint``: ``tol`` in rate units
    for group rates, at most half the smallest nonzero finite ``|bound|`` of its rows (a gap of 0.019 under
    a difference bound of 0.02 doubles it), and ``tol * |bound|`` for rows in other units
    (:func:`fairopt.status.met_tolerance` with ``cap=False``)."""
    return met_tolerance(constraint, tol, cap=False)


def generalisation_table(train: dict[str, float], held_out: dict[str, float],
                         tol: float | dict[str, float]) -> pd.DataFrame:
    """Each constraint's exact violation on the training and the held-out rows, and the gap
    ``held_out - train``; warns (:class:`fairopt.FairnessWarning`) for every gap beyond ``tol`` (one number,
    or one per constraint name in the units of its rows; the table of ``check_generalisation`` of the
    estimators)."""
    table = pd.DataFrame({"train": pd.Series(train, dtype=float), "held_out": pd.Series(held_out, dtype=float)})
    table["gap"] = table["held_out"] - table["train"]
    for name, row in table.iterrows():
        limit = tol.get(name, 0.0) if isinstance(tol, dict) else tol
        if abs(row["gap"]) > limit:
            warnings.warn(f"{name}: held-out violation {row['held_out']:.3g} differs from the training "
                          f"violation {row['train']:.3g} by more than {limit:.3g} (tol, in the units of its "
                          "rows); the fairness guarantee holds on the training rows only.", FairnessWarning,
                          stacklevel=3)
    return table
