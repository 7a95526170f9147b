"""Paper experiments runnable by name: ``fairopt bench sqp-table2`` and ``fairopt bench fair-ridge``.

Unlike the declarative configurations of :mod:`fairopt.experiments.configs` (data x methods
x grid through :func:`~fairopt.experiments.compare`), these reproduce one table or figure
of a paper with its own protocol and write the paper's numbers beside ours:

- ``sqp-table2`` (:mod:`fairopt.experiments.sqp_table2`): [SQP] Tables 2 and 4 and Fig. 7 -
  hard DI (and EI) constraints on Dutch, Law and ACSIncome (Colorado) with stochastic SQP;
- ``fair-ridge`` (:mod:`fairopt.experiments.fair_ridge`): [FR] Example 1 and the real-data
  comparison of FRRM, FGRRM, NCLM, ZLM and ZLRM.

Each runs in full (the paper's protocol, or as close as the data and time allow) or with
``quick=True`` (``--quick``: a few minutes on one core). :mod:`fairopt.experiments.configs`
registers them in :data:`~fairopt.experiments.configs.BUILTIN` (so ``fairopt bench --list``
shows them) and :func:`~fairopt.experiments.configs.run_config` dispatches to
:func:`run_paper_config`.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

__all__ = ["PaperConfig", "PAPER_CONFIGS", "run_paper_config", "command_line"]


@dataclass(frozen=True)
class PaperConfig:
    """A named paper experiment: its description (``fairopt bench --list``) and its runner
    ``runner(out, *, quick, epochs, seeds, data_dir, subsample, command, progress) -> (table, summary, files)``."""

    name: str
    description: str
    runner: Callable[..., tuple[Any, str, list[Path]]]


def _sqp_table2(out: Path, *, quick: bool, epochs: int | None, seeds: Sequence[int] | None, data_dir: Any,
                subsample: int | None, command: str, progress: bool) -> tuple[Any, str, list[Path]]:
    from fairopt.experiments import sqp_table2

    settings = sqp_table2.override(sqp_table2.QUICK if quick else sqp_table2.FULL, epochs=epochs, seeds=seeds,
                                   subsample=subsample)
    return sqp_table2.run(out, settings, data_dir=data_dir, command=command, progress=progress)


def _fair_ridge(out: Path, *, quick: bool, epochs: int | None, seeds: Sequence[int] | None, data_dir: Any,
                subsample: int | None, command: str, progress: bool) -> tuple[Any, str, list[Path]]:
    from fairopt.experiments import fair_ridge

    if epochs is not None:
        raise ValueError("epochs: fair-ridge fits closed-form and convex models; --epochs does not apply")
    settings = fair_ridge.override(fair_ridge.QUICK if quick else fair_ridge.FULL, seeds=seeds, subsample=subsample)
    summary, files = fair_ridge.run(out, settings, data_dir=data_dir, command=command, progress=progress)
    return None, summary, files


#: The paper experiments, by name.
PAPER_CONFIGS: dict[str, PaperConfig] = {
    "sqp-table2": PaperConfig(
        "sqp-table2",
        "[SQP] Tables 2/4 and Fig. 7: DI >= delta (0.5..0.9) and, at 0.8/0.9, EI and DI+EI, on Dutch (MLP 32), "
        "Law (linear) and ACSIncome-Colorado (MLP 256), sensitive attribute as input, 500 full-batch SQP epochs, "
        "5 seeds; the paper's numbers beside ours. --quick: Dutch, delta 0.8/0.9, 1 seed, 100 epochs (~20 s).",
        _sqp_table2),
    "fair-ridge": PaperConfig(
        "fair-ridge",
        "[FR] Example 1 (NCLM/FRRM profiles, ridge-decorrelation bias) and the real-data comparison: FRRM vs NCLM "
        "vs ZLM (C&C, COMPAS, LSAC; 50 x 10-fold CV) and FGRRM vs ZLRM (ADULT, COMPAS; 2 x 10-fold); the paper's "
        "numbers beside ours. --quick: 1 x 10-fold (linear), 1 x 5-fold (logistic), ~3 min.",
        _fair_ridge),
}


def command_line(name: str, out: str | Path, *, quick: bool = False, epochs: int | None = None,
                 seeds: Sequence[int] | None = None, data_dir: Any = None, subsample: int | None = None) -> str:
    """The ``fairopt bench`` command that reproduces a run (written into its summary)."""
    parts = ["fairopt", "bench", name]
    if quick:
        parts.append("--quick")
    if epochs is not None:
        parts += ["--epochs", str(epochs)]
    if seeds is not None:
        parts += ["--seeds", *map(str, seeds)]
    if subsample is not None:
        parts += ["--subsample", str(subsample)]
    if data_dir is not None:
        parts += ["--data-dir", str(data_dir)]
    parts += ["--out", str(out)]
    return " ".join(shlex.quote(p) for p in parts)


def run_paper_config(name: str, out: str | Path, *, quick: bool = False, epochs: int | None = None,
                     seeds: Sequence[int] | None = None, data_dir: Any = None, subsample: int | None = None,
                     progress: bool = True) -> Any:
    """Run paper experiment ``name`` into ``out``; returns a :class:`~fairopt.experiments.configs.BenchResult`
    (``table``: the per-run table of ``sqp-table2``, the linear-model folds of ``fair-ridge``)."""
    import pandas as pd

    from fairopt.experiments.reporting import BenchResult

    if name not in PAPER_CONFIGS:
        raise ValueError(f"name: {name!r} is not a paper experiment; available: {sorted(PAPER_CONFIGS)}")
    command = command_line(name, out, quick=quick, epochs=epochs, seeds=seeds, data_dir=data_dir, subsample=subsample)
    table, summary, files = PAPER_CONFIGS[name].runner(
        Path(out), quick=quick, epochs=epochs, seeds=seeds, data_dir=data_dir, subsample=subsample, command=command,
        progress=progress)
    if table is None:
        csv = Path(out) / "linear_folds.csv"
        table = pd.read_csv(csv) if csv.is_file() and csv.stat().st_size > 1 else pd.DataFrame()
    return BenchResult(table=table, summary=summary, files=list(files))
