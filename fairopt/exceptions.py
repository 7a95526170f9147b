"""Warnings and errors raised by fairopt."""


class FairnessWarning(UserWarning):
    """A fairness-related condition the user should know about: an infeasible or relaxed
    step, an inactive constraint, a train/held-out violation gap."""
