"""Constraints and penalties from short text specifications: moved to :mod:`fairopt.specs`.

This module keeps the old import path; the estimators, the CLI and the experiments use
:mod:`fairopt.specs`.
"""

from __future__ import annotations

from fairopt.specs import CONSTRAINT_KINDS, PENALTY_KINDS, build_constraint, build_penalty, constraint_builder

__all__ = ["build_constraint", "constraint_builder", "build_penalty", "CONSTRAINT_KINDS", "PENALTY_KINDS"]
