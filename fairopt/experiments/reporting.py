"""Result containers and markdown of the experiment runners (no dependency on the runners).

:class:`BenchResult` is what ``fairopt bench`` runs return; :func:`markdown_table` formats a
DataFrame as a GitHub table. Both are re-exported by :mod:`fairopt.experiments.configs`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from fairopt.report.result import frame_markdown

__all__ = ["BenchResult", "markdown_table"]


def markdown_table(df: pd.DataFrame, floatfmt: str = ".4g") -> str:
    """A GitHub markdown table of ``df`` (no optional dependency): :func:`fairopt.report.result.frame_markdown`."""
    return frame_markdown(df, floatfmt)


@dataclass
class BenchResult:
    """What :func:`~fairopt.experiments.configs.run_config` produced: the tidy table, the
    markdown summary, the files."""

    table: pd.DataFrame
    summary: str
    files: list[Path] = field(default_factory=list)
