"""Warnings and errors raised by fairopt (``docs/errors.md`` says what each means and what to do)."""


class FairnessWarning(UserWarning):
    """A fairness-related condition the user should know about: an infeasible or relaxed
    step, an inactive constraint, a train/held-out violation gap."""


class UndefinedMeasureWarning(FairnessWarning):
    """A fairness measure is undefined on these predictions and is returned as NaN: a ratio
    measure (disparate impact, equal impact, ``di_ratio``) whose groups all have a zero
    rate, i.e. 0/0. Such predictions are not "perfectly fair"; nothing can be compared."""


class DegenerateModelWarning(FairnessWarning):
    """The model predicts the same for every row (a constant classifier, or a regression
    model with constant predictions). Its fairness measures look perfect only because it
    ignores its inputs; its ``degenerate`` flag in :func:`fairopt.evaluate` is True."""


class CertificateError(ValueError):
    """A held-out fairness certificate failed (``on_fail="raise"`` of the estimators): the
    bound does not hold on the validation rows at the requested confidence."""
