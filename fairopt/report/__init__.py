"""Per-group reports of a trained model: :func:`group_report` and :class:`GroupReport`.

Modules (one job each), besides :mod:`fairopt.sensitive_groups` (outside the package, so that
the metrics import no training code), which turns the sensitive features into one group code
per row: ``responses`` runs any supported model (fairopt estimators, scikit-learn estimators,
:class:`~fairopt.SavedModel`, torch modules) into hard predictions or numbers;
``bootstrap`` computes the per-group statistics and their stratified percentile
bootstrap; ``result`` holds :class:`GroupReport` (tables, Markdown, plot); ``core`` puts
them together in :func:`group_report`.
"""

from __future__ import annotations

from fairopt.report.core import CLASSIFICATION_METRICS, MIN_GROUP_SIZE, REGRESSION_METRICS, group_report
from fairopt.report.result import GroupReport

__all__ = ["group_report", "GroupReport", "CLASSIFICATION_METRICS", "REGRESSION_METRICS", "MIN_GROUP_SIZE"]
