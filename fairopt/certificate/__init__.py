r"""Confidence statements about a constraint's exact measure on a sample of rows.

A bound enforced on the training rows holds on those rows; at deployment the question is how sure we
can be that it holds for the population that unseen rows come from. :func:`certify` gives a
:class:`Certificate` for one constraint on one sample (typically a held-out part): the realised
measure, a confidence interval and whether the bound holds at the stated confidence.
:func:`auto_margin` is the tightening ``margin="auto"`` applies during training; :func:`tighten`
copies a constraint with its finite bounds moved inwards.

Rate constraints (:class:`~fairopt.constraints.rates.GroupRateConstraint` and the conditioned rates)
have rows ``c = D P``, ``P_g = k_g / n_g`` the hard positive rate of every side, each ``k_g`` binomial:

- ``method="normal"`` (default): each row ``r = sum_g a_g P_g`` has standard error
  ``sqrt(sum_g a_g^2 p_g (1 - p_g) / n_g)`` and the one-sided bound ``r +- z se`` with a union bound
  over the compared pairs (a large-sample statement, as the Seldonian toolkit's);
- ``method="clopper-pearson"``: exact intervals ``[L_g, U_g]`` per side at ``1 - alpha / G``
  (``alpha = 1 - confidence``); by the union bound all ``G`` rates lie in ``prod_g [L_g, U_g]`` at
  ``1 - alpha`` (no independence needed), and a linear row's extremes over it are at corners. Valid at
  any sample size, but wider.

``passed`` is True iff every row's worst case lies within its bound. The reported measure is the ratio
``min(P_f / P_r, P_r / P_f)`` (ratio form, lower bound e.g. ``min(L_f / U_r, L_r / U_f)``) or the
difference ``|P_f - P_r|`` (difference form), over the comparisons.

GeDI, distance covariance and covariance are not means of indicators: their exact rows are recomputed
on ``n_bootstrap`` seeded resamples and, with ``k`` finite bound sides, compared with the
``1 - alpha / k`` (upper) or ``alpha / k`` (lower) percentile (approximate; Bonferroni over the sides).
Other constraint types raise :class:`TypeError`.
"""

from __future__ import annotations

from fairopt.certificate.intervals import clopper_pearson, worst_case_rows
from fairopt.certificate.margins import DEFAULT_HELD_OUT_FRACTION, auto_margin, held_out_spread
from fairopt.certificate.plotting import plot_certificate
from fairopt.certificate.statements import CERTIFY_METHODS, Certificate, certify
from fairopt.certificate.tightening import TightenedConstraint, tighten

__all__ = ["Certificate", "TightenedConstraint", "auto_margin", "certify", "clopper_pearson", "held_out_spread",
           "plot_certificate",
           "tighten", "worst_case_rows", "CERTIFY_METHODS", "DEFAULT_HELD_OUT_FRACTION"]
