"""Result containers and markdown of the experiment runners (no dependency on the runners).

:class:`BenchResult` is what ``fairopt bench`` runs return; :func:`markdown_table` formats a
DataFrame as a GitHub table. Both are re-exported by :mod:`fairopt.experiments.configs`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

__all__ = ["BenchResult", "markdown_table"]


def markdown_table(df: pd.DataFrame, floatfmt: str = ".4g") -> str:
    """A GitHub markdown table of ``df`` (no optional dependency)."""
    def cell(v: Any) -> str:
        return format(v, floatfmt) if isinstance(v, (float, np.floating)) else str(v)

    lines = ["| " + " | ".join(map(str, df.columns)) + " |", "|" + "|".join("---" for _ in df.columns) + "|"]
    lines += ["| " + " | ".join(cell(v) for v in row) + " |" for row in df.itertuples(index=False)]
    return "\n".join(lines)


@dataclass
class BenchResult:
    """What :func:`~fairopt.experiments.configs.run_config` produced: the tidy table, the
    markdown summary, the files."""

    table: pd.DataFrame
    summary: str
    files: list[Path] = field(default_factory=list)
