"""Warnings and errors raised by fairopt."""


class FairnessWarning(UserWarning):
    """A fairness-related condition the user should know about: an infeasible or relaxed
    step, an inactive constraint, a train/held-out violation gap."""


class CertificateError(ValueError):
    """A held-out fairness certificate failed (``on_fail="raise"`` of the estimators): the
    bound does not hold on the validation rows at the requested confidence."""
