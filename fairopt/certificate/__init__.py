r"""Confidence statements about a constraint's exact measure on a sample of rows.

A bound enforced on the training rows holds on those rows. This module answers the
question that matters at deployment: given a model and rows it did NOT see, how sure can
we be that the constraint holds for the population those rows come from?

:func:`certify`
    A :class:`Certificate` for one constraint on one sample of rows (typically a held-out
    validation part): the realised value of the user-facing measure, a confidence interval,
    and whether the bound holds at the stated confidence.
:func:`auto_margin`
    The per-row tightening ``margin="auto"`` of the estimators applies during training, so
    that the value on a new sample of a stated size is predicted to stay within the bound.
:func:`tighten`
    A copy of a constraint whose finite bounds are moved inwards by a margin (the user's
    object is never changed).

Rate constraints (Clopper-Pearson with a union bound)
-----------------------------------------------------
:class:`~fairopt.constraints.DisparateImpact`, :class:`~fairopt.constraints.EqualImpact`,
:class:`~fairopt.constraints.DemographicParity` and the label-conditioned
:class:`~fairopt.constraints.EqualOpportunity`, :class:`~fairopt.constraints.FalsePositiveParity`
and :class:`~fairopt.constraints.EqualizedOdds` have rows ``c = D P`` where ``P`` holds
the hard positive rate ``P_g = k_g / n_g`` of every group side ``g`` (group or
complement, restricted to ``y = 1`` for equal impact and the true-positive rates, to
``y = 0`` for the false-positive rates) and ``D`` has known signs. Given the
rows, each ``k_g`` is binomial, so

1. every side gets an exact (Clopper-Pearson) two-sided interval ``[L_g, U_g]`` at level
   ``1 - alpha / G`` (``alpha = 1 - confidence``, ``G`` sides; ``L_g`` is the
   ``alpha / (2G)`` quantile of ``Beta(k_g, n_g - k_g + 1)``, ``U_g`` the
   ``1 - alpha / (2G)`` quantile of ``Beta(k_g + 1, n_g - k_g)``);
2. by the union (Bonferroni) bound all ``G`` true rates lie in the rectangle
   ``prod_g [L_g, U_g]`` simultaneously with probability at least ``1 - alpha``
   (no independence between sides is needed, so complements are fine);
3. a row ``sum_g a_g P_g`` is linear, so its extremes over the rectangle are at corners:
   ``max = sum_{a_g > 0} a_g U_g + sum_{a_g < 0} a_g L_g`` and symmetrically for the
   ``min``. Every row's interval ``[min, max]`` holds simultaneously at ``1 - alpha``.

``passed`` is True iff every row's worst case lies within its bound (finite sides only):
then, with probability at least ``confidence`` over the sample, the population rows
satisfy the constraint. The user-facing measure is reported too: for disparate / equal
impact and the ratio form (``delta``) of the conditioned rates the ratio
``min(P_f / P_r, P_r / P_f)`` (smallest over the comparisons, TPR and FPR alike), whose
lower confidence bound ``min(L_f / U_r, L_r / U_f)`` is ``>= delta`` exactly when the two
worst-case rows are ``<= 0``; for demographic parity and the difference form
(``bound``) of the conditioned rates the absolute difference
``|P_f - P_r|`` (largest over the comparisons) with upper bound
``max(U_f - L_r, U_r - L_f)``.

Other constraints (seeded percentile bootstrap)
-----------------------------------------------
:class:`~fairopt.constraints.GeDI`, :class:`~fairopt.constraints.DistanceCovariance` and
:class:`~fairopt.constraints.Covariance` are not means of independent indicators. Their
exact rows are recomputed on ``n_bootstrap`` resamples (with replacement, seeded) of the
rows; with ``k`` finite bound sides over all rows, a finite upper bound is compared with
the ``1 - alpha / k`` quantile and a finite lower bound with the ``alpha / k`` quantile
(one-sided at the confidence level, Bonferroni over the sides). A percentile bootstrap is
approximate, not exact; the headline measure is the row with the least room to its bound.

Constraints of other types raise :class:`TypeError`.

Modules (one job each): ``statements`` (:class:`Certificate`, :func:`certify`),
``intervals`` (outputs, Clopper-Pearson and normal bounds, worst-case rows, bootstrap
draws), ``margins`` (:func:`auto_margin`), ``tightening`` (:class:`TightenedConstraint`,
:func:`tighten`), ``plotting`` (:func:`plot_certificate`: value, interval and bound per
constraint and per candidate).
"""

from __future__ import annotations

from fairopt.certificate.intervals import clopper_pearson, worst_case_rows
from fairopt.certificate.margins import DEFAULT_HELD_OUT_FRACTION, auto_margin
from fairopt.certificate.plotting import plot_certificate
from fairopt.certificate.statements import CERTIFY_METHODS, Certificate, certify
from fairopt.certificate.tightening import TightenedConstraint, tighten

__all__ = ["Certificate", "TightenedConstraint", "auto_margin", "certify", "clopper_pearson", "plot_certificate",
           "tighten", "worst_case_rows", "CERTIFY_METHODS", "DEFAULT_HELD_OUT_FRACTION"]
