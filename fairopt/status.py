"""A fit's result in the user's terms: each bound beside the measure it bounds, and a status.

A :class:`BoundStatus` (built by :func:`fairopt.evaluation.bound_statuses`, per constraint
that declares its measure) holds the realised value on some rows beside the user's bound
argument, printed as ``DI[sex] 0.903 (bound >= 0.800)``; the rows of the constraint decide
whether it is met (exact violation ``sum_i max(c_i - u_i, 0) + max(l_i - c_i, 0)`` within a
tolerance, as the estimators' diagnostics decide). :func:`fit_status` turns an engine's
:class:`solvers.history.FitResult` and those lines into the estimators' ``status_`` and the
sentence of ``status_message_``:

- ``"converged"``: every bound met on the training rows and the engine's stationarity test
  passed (a KKT point for SQP);
- ``"feasible_not_stationary"``: every bound met, the stationarity measure still above the
  engine's tolerance (more epochs may lower the loss; the bounds hold already);
- ``"infeasible"``: some bound not met on the training rows;
- ``"degenerate"``: every bound met, by a model that predicts the same for every training row (one
  class, or one value: :func:`fairopt.evaluation.constant_predictions`), or by a classifier no better
  than one (:func:`solvers.outcome.near_constant`: its training accuracy not above the majority-class
  rate by two standard errors, or one class on almost every row); a rate bound is met trivially by
  such a model (``0 / 0`` rates), so the fit is no answer however its engine ended; also where a
  ratio bound's rates are all 0 on the training rows (a regressor none of whose predictions exceeds
  the bound's threshold);
- ``"diverged"`` and ``"stopped_by_callback"``: the engine's own words for a run that did not
  end normally.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

from solvers.history import FitResult

__all__ = ["ABBREVIATIONS", "ALTERNATING_RESIDUAL", "BoundStatus", "DEFINITIONS", "MET_TOL", "STATUSES",
           "compared_label", "finite_bounds", "fit_status", "format_number", "label_of", "met_tolerance",
           "short_ratios", "smallest_nonzero_bound", "tolerance_of"]

#: Short names of the group-rate measures in summaries, by constraint prefix.
ABBREVIATIONS: dict[str, str] = {
    "disparate_impact": "DI", "equal_impact": "EI", "equal_opportunity": "EO", "demographic_parity": "DP",
    "false_positive_parity": "FPR", "equalized_odds": "EOdds",
}
#: What each short name stands for (printed where the names are).
DEFINITIONS: dict[str, str] = {
    "DI": "disparate impact, the smallest ratio of two groups' positive-prediction rates ('each vs rest': of a "
          "group's rate and the rate of all other rows)",
    "EI": "equal impact, DI on the rows with y = 1",
    "EO": "equal opportunity, the groups' true-positive rates compared (ratio or difference)",
    "DP": "demographic parity, the largest difference of two groups' positive-prediction rates ('each vs rest': "
          "of a group's rate and the rate of all other rows)",
    "FPR": "false-positive parity, the groups' false-positive rates compared (ratio or difference)",
    "EOdds": "equalized odds, true- and false-positive rates compared (ratio or difference)",
}
#: What :func:`compared_label` puts before a label's closing bracket for a constraint that compares each group
#: with the rest of the rows (``DI[race, each vs rest]``).
_AGAINST_REST = ", each vs rest"
#: Largest exact violation of a constraint reported as met where no tolerance is given (the
#: estimators' default ``violation_tol``), in rate units; :func:`met_tolerance` scales it to other rows.
MET_TOL = 1e-3


def met_tolerance(constraint: Any, tol: float, cap: bool = True) -> float:
    """The largest exact violation of ``constraint``'s rows reported as met, for the tolerance ``tol``.

    Rows of rates (``row_scale`` 1) take ``min(tol, b / 2)``, ``b`` the smallest nonzero finite ``|bound|``
    of the rows (:func:`smallest_nonzero_bound`; ``tol`` where there is none, as for a ratio's rows, whose
    bounds are 0): a demographic-parity bound of 1e-4 is met up to 1.5e-4, not up to 1.1e-3. Rows in other
    units (covariance, GeDI, distance covariance) take ``tol * min(1, B)``, ``B`` the largest finite
    ``|bound|`` of the rows, so that a small bound is met within the same share of itself: a distance
    covariance of 7e-5 under a bound of 1e-6 is not "met within the tolerance" 1e-3. ``tol`` where every
    finite bound is 0 or the constraint has no bounds yet. ``cap=False`` gives ``tol * B``, a share of the
    bound however large (a GeDI bound in the target's units of 20 takes 0.4 at ``tol`` 0.02).
    """
    scale = getattr(constraint, "row_scale", None)
    if scale is not None:
        smallest = smallest_nonzero_bound(constraint) if float(scale) == 1.0 else None
        limit = tol * (min(float(scale), 1.0) if cap else float(scale))
        return limit if smallest is None else min(limit, 0.5 * smallest)
    bounds = finite_bounds(constraint)
    scale = max(bounds, default=0.0)
    if scale == 0.0:
        return tol
    return tol * (min(float(scale), 1.0) if cap else float(scale))


def finite_bounds(constraint: Any) -> list[float]:
    """``|bound|`` of every finite lower and upper bound of ``constraint``'s rows; ``[]`` where it is not set
    up (or has bounds of another kind)."""
    try:
        values = [*constraint.lower.reshape(-1).tolist(), *constraint.upper.reshape(-1).tolist()]
    except (AttributeError, TypeError, ValueError):  # not set up, or bounds of another kind
        return []
    return [abs(float(v)) for v in values if math.isfinite(float(v))]


def smallest_nonzero_bound(constraint: Any) -> float | None:
    """The smallest nonzero finite ``|bound|`` of ``constraint``'s rows (a difference bound), None where there
    is none (a ratio's rows are bounded by 0, exact parity by 0 on both sides)."""
    return min((b for b in finite_bounds(constraint) if b > 0), default=None)


def tolerance_of(tol: float | Mapping[str, float], name: str) -> float:
    """``tol[name]`` of per-constraint tolerances (:func:`fairopt.evaluation.met_tolerances`), or ``tol``."""
    return float(tol[name]) if isinstance(tol, Mapping) else float(tol)
#: Values of the estimators' ``status_``.
STATUSES: tuple[str, ...] = ("converged", "feasible_not_stationary", "infeasible", "degenerate", "diverged",
                              "stopped_by_callback")
#: KKT residual above which a classifier network's full-batch SQP fit that stopped at its epochs is told to try
#: mini-batches (:func:`fit_status`): ten times the engine's ``tol``; the default network's full batches end at
#: 0.001-0.005, wider networks whose constant step alternates about the optimum at 0.03-0.05
#: (``hidden=(64, 64)``, ``(128, 64, 32)`` on Adult and ACS-Colorado, ``benchmarks/results/solver_notes.md``).
ALTERNATING_RESIDUAL = 0.01
#: The engines' stationarity measure, by ``method=``, as :attr:`FitResult.stationarity` reports it.
_STATIONARITY = {"sqp": "KKT residual", "penalty": "largest gradient entry of the penalised loss",
                 "lagrangian": "largest gradient entry of the Lagrangian"}


def format_number(value: float, scale: float | None = None) -> str:
    """Three decimals, or three significant digits for quantities below 0.01 (``scale``: the
    number whose size decides, e.g. the bound beside a value)."""
    size = abs(value if scale is None else scale)
    return f"{value:.3f}" if size >= 0.01 or size == 0 else f"{value:.3g}"


@dataclass(frozen=True)
class BoundStatus:
    """One constraint's measure on some rows beside its bound.

    Attributes
    ----------
    name : str
        The constraint's name (``disparate_impact[sex]``).
    label : str
        Its short name (``DI[sex]``; the name itself for other constraints).
    value : float
        The realised measure, on the scale of the bound argument.
    bound : float or None
        The bound argument (``delta`` for a ratio, ``bound`` otherwise).
    sense : {"lower", "upper"}
        ``"lower"``: met when ``value >= bound``.
    met : bool
        The constraint's rows are within their bounds (exact violation within the tolerance) and, for a ratio
        (``sense`` "lower"), the value is within the same tolerance of the bound on the ratio's own scale.
    row_violation : float or None
        The exact violation of its rows ``sum_i max(c_i - u_i, 0) + max(l_i - c_i, 0)``, where known, in the rows'
        units (which may differ from the value's, e.g. a relative GeDI bound on absolute rows); quoted when the
        value is short of the bound but within the tolerance.
    undefined : bool
        A ratio of rates that are all zero (0/0: no compared group has a positive prediction): the value is
        not a measure of fairness, and is printed as undefined (as :func:`fairopt.evaluate` reports NaN).
    pairwise : float or None
        Where the constraint compares each group with the rest (``DI[race, each vs rest]``), the same measure
        over every pair of groups (:meth:`~fairopt.constraints.rates.GroupRateConstraint.pairwise_realised`,
        what :mod:`fairopt.metrics` reports), quoted beside the value: the two differ, and a bound on one is
        not a bound on the other.
    """

    name: str
    label: str
    value: float
    bound: float | None
    sense: str
    met: bool
    row_violation: float | None = None
    undefined: bool = False
    pairwise: float | None = None

    @property
    def bound_text(self) -> str:
        """``bound >= 0.800`` (``bound`` argument unknown: the sense alone)."""
        op = ">=" if self.sense == "lower" else "<="
        return f"bound {op} ?" if self.bound is None else f"bound {op} {format_number(self.bound)}"

    def __str__(self) -> str:
        if self.undefined:
            rows = ", its rows met" if self.met else ""
            return (f"{self.label} undefined: 0/0, no compared group has a positive prediction "
                    f"({self.bound_text}{rows})")
        scale = self.bound if self.bound is not None else self.value
        short = self.bound is not None and (self.value < self.bound if self.sense == "lower"
                                            else self.value > self.bound)
        within = ""
        if self.met and short:
            within = ", met within the violation tolerance" + (
                "" if self.row_violation is None else f": exact violation of its rows {self.row_violation:.2g}")
        pairwise = ("" if self.pairwise is None or not math.isfinite(self.pairwise) else
                    f"; over every pair of groups {format_number(self.pairwise, scale)}, which groups='pairwise' "
                    "bounds")
        return f"{self.label} {format_number(self.value, scale)} ({self.bound_text}{within}{pairwise})"


def label_of(constraint: Any, task: str | None = None) -> str:
    """``DI[sex]`` for ``disparate_impact[sex]``: the short name of a group-rate prefix, qualified by
    :func:`compared_label` (``DI[race, each vs rest]``; on a regression, ``task``, ``DI[race, share of predictions
    > 0]``); the constraint's name for other constraints."""
    name = str(constraint.name)
    prefix = getattr(constraint, "kind", None)
    if prefix in ABBREVIATIONS and name.startswith(prefix):
        return compared_label(constraint, ABBREVIATIONS[prefix] + name[len(prefix):], task)
    return name


def compared_label(constraint: Any, label: str, task: str | None = None) -> str:
    """``label`` (``DI[race]``, ``disparate_impact[race]``) with what the set-up ``constraint`` compares before its
    closing bracket, where the name alone would read as another measure:

    - ``, each vs rest`` where it compares each group of an attribute of more than two groups with the rest of the
      rows (``groups="one_vs_rest"``, the default): that measure is not the ratio of the smallest to the largest
      group rate that :func:`fairopt.evaluate` reports as ``di_ratio``;
    - ``, share of predictions > t`` for a group-rate constraint on a regression (``task``): it compares the
      groups' shares of predictions above its threshold ``t``, not their mean predictions (what the realised
      fairness of a regression compares).

    ``label`` unchanged for other constraints (two groups: one pair, the same either way); a label without a
    closing bracket takes the share in parentheses."""
    against_rest = (getattr(constraint, "groups", None) == "one_vs_rest"
                    and getattr(constraint, "largest_grouping", 0) > 2)
    if against_rest and label.endswith("]"):
        label = label[:-1] + _AGAINST_REST + "]"
    threshold = getattr(constraint, "threshold", None)
    if task == "regression" and getattr(constraint, "kind", None) in ABBREVIATIONS and threshold is not None:
        share = f"share of predictions > {float(threshold):g}"
        label = label[:-1] + f", {share}]" if label.endswith("]") else f"{label} ({share})"
    return label


def short_ratios(bounds: Sequence[BoundStatus], violations: Mapping[str, float],
                 tol: float | Mapping[str, float]) -> list[BoundStatus]:
    """The bounds not ``met`` whose rows are within the tolerance ``tol`` (one number, or one per name): ratios
    short of ``delta`` on their own scale (:func:`fairopt.evaluation.bound_statuses`), which no unmet-rows
    warning names."""
    return [b for b in bounds if not b.met and b.name in violations and violations[b.name] <= tolerance_of(tol, b.name)]


#: What meets a ratio bound whose rows are within the tolerance but whose ratio is short, by method: the SQP
#: meets its rows to 1e-6 once it converges, the other methods stop at their own tolerances (a smaller
#: ``violation_tol`` only makes the verdict stricter, it changes no model).
_SHORT_RATIO_ADVICE = {
    "sqp": "the SQP stopped short of the bound; more epochs may meet it, else loosen the bound a little.",
    "sqp_mini_batch": "the SQP stopped short of the bound; more epochs or full batches may meet it, else loosen the "
                      "bound a little.",
    "penalty": "the SQP method (method='sqp') meets such rows to 1e-6, or a larger penalty weight.",
    "lagrangian": "the SQP method (method='sqp') meets such rows to 1e-6.",
    "moving_targets": "the SQP method (method='sqp') meets such rows to 1e-6.",
}


def fit_status(result: FitResult, method: str, violations: Mapping[str, float], tol: float | Mapping[str, float],
               bounds: Sequence[BoundStatus] = (), constant: str | None = None,
               near_constant: str | None = None, mini_batch: bool = False,
               network_full_batch: bool = False) -> tuple[str, str]:
    """``(status, message)`` of a finished fit (module docstring for the statuses).

    ``violations``: the exact training violation of every constraint (by name); ``tol``: the
    largest one that counts as met (one number, or one per name, :func:`met_tolerance`); ``bounds``:
    their measures on the training rows, quoted in the message (one not ``met``, a ratio short of its bound on
    its own scale though its rows are within ``tol``, is unmet too); ``constant``: why the model predicts
    the same for every training row (:func:`fairopt.evaluation.constant_predictions`), None if it does not;
    ``near_constant``: why a classifier that is not constant is no better than one
    (:func:`solvers.outcome.near_constant`), None if it is better; ``mini_batch``: the fit took its steps on
    batches of rows (the advice for a ratio short of its bound then names full batches);
    ``network_full_batch``: a classifier network's full-batch SQP fit, whose KKT residual still above
    :data:`ALTERNATING_RESIDUAL` points to mini-batches (its constant step can alternate about the optimum,
    :class:`fairopt.FairClassifier`'s ``batch_size``).
    """
    unmet = [name for name, v in violations.items() if v > tolerance_of(tol, name)]
    short = [b.name for b in short_ratios(bounds, violations, tol)]
    shown = {b.name: str(b) for b in bounds}
    if unmet or short:
        which = "; ".join(shown.get(name, f"{name} (exact violation {violations[name]:.3g})")
                          for name in unmet + short)
        bounds_text = f"not met on the training rows: {which}." + (
            " See the FairnessWarning for what to try." if unmet else
            " Its rows are within the violation tolerance in rate units, but at low rates that tolerance is a "
            "larger shortfall of the ratio itself: " + _SHORT_RATIO_ADVICE.get(
                f"{method}_mini_batch" if mini_batch and method == "sqp" else method, _SHORT_RATIO_ADVICE["sqp"]))
    elif violations:
        which = "; ".join(shown.get(name, name) for name in violations)
        bounds_text = f"every bound is met on the training rows: {which}."
    else:
        bounds_text = "no bounds (an unconstrained fit)."
    measure, value = _STATIONARITY.get(method), result.stationarity
    if result.status in ("diverged", "stopped_by_callback"):
        status = result.status
        stationary = ("training diverged; the model is the last sane iterate" if status == "diverged"
                      else "a callback stopped training")
    elif unmet or short:
        status, stationary = "infeasible", ""
    elif constant is not None:
        status, stationary = "degenerate", ""
        bounds_text = (f"the model is constant on the training rows ({constant}), which meets a rate bound "
                       "trivially; it is no answer to the task (see the DegenerateModelWarning). "
                       + bounds_text[0].upper() + bounds_text[1:])
    elif any(b.undefined for b in bounds):
        status, stationary = "degenerate", ""
        trivial = ", ".join(b.label for b in bounds if b.undefined)
        bounds_text = (f"{trivial} is met only trivially: no compared group has a positive prediction (its rates "
                       "are all 0, the ratio 0/0), so the model is no answer to the task. " + bounds_text[0].upper()
                       + bounds_text[1:])
    elif near_constant is not None:
        status, stationary = "degenerate", ""
        trivially = "a constant meets a rate bound trivially, so " if violations else ""
        bounds_text = (f"the model is no better than a constant classifier on the training rows ({near_constant}); "
                       f"{trivially}it is no answer to the task (see the DegenerateModelWarning). "
                       + bounds_text[0].upper() + bounds_text[1:])
    else:
        status = "converged" if result.converged else "feasible_not_stationary"
        if measure is None or value is None:
            stationary = "" if result.converged else "no stationarity test for this method"
        elif result.converged:
            stationary = f"stationary ({measure} {value:.2g}, within the engine's tolerance)"
        else:
            stationary = (f"not stationary yet ({measure} {value:.2g}, above the engine's tolerance): more epochs "
                          "may lower the loss a little" + ("; the bounds hold already" if violations else ""))
            if (result.info or {}).get("termination") == "stalled":
                stationary += (". Training stopped early: its step had shrunk to the schedule's floor and the loss "
                               "no longer fell (engine_params={'stall_epochs': None} runs every epoch)")
            if network_full_batch and method == "sqp" and value > ALTERNATING_RESIDUAL:
                stationary += (". A network's full batch steps at a constant lr and can alternate about the "
                               "optimum, fitting less and leaving a bound slack: batch_size=1024 usually fits it "
                               "further")
    message = bounds_text[0].upper() + bounds_text[1:]
    return status, message + (f" {stationary[0].upper()}{stationary[1:]}." if stationary else "")
