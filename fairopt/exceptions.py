"""Warnings and errors raised by fairopt (``docs/errors.md`` says what each means and what to do), and
:func:`warn_at_caller`, which attributes a warning to the user's line."""

from __future__ import annotations

import os
import sys
import warnings
from collections.abc import Iterable


class FairnessWarning(UserWarning):
    """A fairness-related condition the user should know about: an infeasible or relaxed
    step, an inactive constraint, a train/held-out violation gap."""


class SmallGroupWarning(FairnessWarning):
    """A rate constraint set up on training rows in which a compared group is empty or has fewer than
    30 rows (:data:`fairopt.constraints.rates.MIN_GROUP_ROWS`): its rate moves in steps of ``1/rows``.
    Issued once per fit, on the rows the model is fitted to; set-ups on held-out, report or
    certification rows do not issue it."""


class UndefinedMeasureWarning(FairnessWarning):
    """A fairness measure is undefined on these predictions and is returned as NaN: a ratio
    measure (disparate impact, equal impact, ``di_ratio``) whose groups all have a zero
    rate, i.e. 0/0. Such predictions are not "perfectly fair"; nothing can be compared."""


class DegenerateModelWarning(FairnessWarning):
    """The model predicts the same for every row (a constant classifier, or a regression
    model with constant predictions), or a fitted classifier is no better than a constant one
    (its training accuracy not above the majority rate by two standard errors, or one class on
    almost every row). Its fairness measures look good only because it barely uses its inputs;
    the fit's ``status_`` is ``"degenerate"``, and :func:`fairopt.evaluate`'s ``degenerate`` flag
    is True where the predictions are exactly constant."""


class MarginTooLargeError(ValueError):
    """A margin that leaves a row of the tightened constraint without a feasible value (its lower bound above
    its upper one, or its upper bound below the smallest value the row takes), or, for group rates, leaves
    the rows together no rates in ``[0, 1]`` that meet them (exact parity leaves room for no margin at all)."""


class CertificateError(ValueError):
    """A held-out fairness certificate failed (``on_fail="raise"`` of the estimators): the
    bound does not hold on the validation rows at the requested confidence."""


class UnweightedOnlyError(ValueError):
    """A part of the library without a weighted version yet was given per-row weights. ``who`` names it
    (``Distance covariance``, ``auto_margin (margin='auto')``): callers that speak in other terms (the
    command line's ``--weights``) word the message from it."""

    def __init__(self, who: str, hint: str) -> None:
        self.who, self.hint = who, hint
        super().__init__(f"{who} does not support sample weights yet; {hint}")

    def __reduce__(self) -> tuple:
        return type(self), (self.who, self.hint)


class UnknownSensitiveError(ValueError):
    """A constraint names a sensitive feature the data does not have. ``name`` is the name asked for,
    ``available`` the data's sensitive features (sorted): callers that speak in other terms (the command
    line's ``--constraint``) word the message from them."""

    def __init__(self, name: str, available: Iterable[str]) -> None:
        self.name, self.available = name, sorted(available)
        unnamed = any(a.startswith("sensitive_") and a[len("sensitive_"):].isdigit() for a in self.available)
        columns = (" An unnamed 2-D array's columns are called sensitive_0, sensitive_1, ...: name them with "
                   "sensitive_names=[...] on the estimator, or pass a DataFrame." if unnamed else "")
        parts = [part.strip() for part in str(name).split("&")]
        if len(parts) > 1 and all(part in self.available for part in parts):  # the label of an intersection
            columns += (f" The intersection of {parts} is written {','.join(parts)!r} in a text spec "
                        f"(e.g. 'eodds:{','.join(parts)}<=0.05') and {parts} in a tuple.")
        super().__init__(f"sensitive: unknown name {name!r}; available: {self.available}. Name the constraint after "
                         f"one of them, or give the feature that name (a Series passed to fit keeps its own: "
                         f"s.rename({name!r})).{columns}")

    def __reduce__(self):  # picklable with its arguments (a worker of a parallel search raises it)
        return type(self), (self.name, self.available)


def _library_directories() -> tuple[str, ...]:
    """The directories whose frames :func:`warn_at_caller` skips: fairopt, its engines (``solvers``) and
    scikit-learn (whose ``cross_val_score``, ``Pipeline`` and search objects call an estimator's ``fit``),
    read from the loaded modules (this module imports none of them: it sits below every layer)."""
    paths = [os.path.dirname(os.path.abspath(__file__))]
    for name in ("solvers", "sklearn"):
        module = sys.modules.get(name)
        if getattr(module, "__file__", None):
            paths.append(os.path.dirname(os.path.abspath(module.__file__)))
    return tuple(path + os.sep for path in paths)


def warn_at_caller(message: str | Warning, category: type[Warning] = FairnessWarning) -> None:
    """``warnings.warn(message, category)`` attributed to the first frame outside fairopt, ``solvers`` and
    scikit-learn: the user's line that called ``fit`` (directly or through a Pipeline or a search), however
    deep in the library the condition was found, so that the warning names the user's code and Python's
    once-per-location filters count the user's calls."""
    skipped, frame, level = _library_directories(), sys._getframe(1), 2
    while frame is not None and frame.f_code.co_filename.startswith(skipped):
        frame, level = frame.f_back, level + 1
    warnings.warn(message, category, stacklevel=level)
