"""Per-group reports of a trained model: :func:`group_report` and :class:`GroupReport`.

``responses`` runs any supported model into predictions, ``bootstrap`` computes the per-group
statistics and their stratified bootstrap, ``result`` holds :class:`GroupReport`, ``core`` puts
them together; the group codes come from :mod:`fairopt.sensitive_groups`.
"""

from __future__ import annotations

from fairopt.report.core import CLASSIFICATION_METRICS, MIN_GROUP_SIZE, REGRESSION_METRICS, group_report
from fairopt.report.result import GroupReport

__all__ = ["group_report", "GroupReport", "CLASSIFICATION_METRICS", "REGRESSION_METRICS", "MIN_GROUP_SIZE"]
