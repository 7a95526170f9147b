"""Paper reproductions, runnable by name from a source checkout.

    python -m benchmarks.papers --list
    python -m benchmarks.papers sqp-table2 --quick --out /tmp/sqp
    python -m benchmarks.papers peers --quick --n-jobs 2

These are not part of the installed library: each reproduces one table or figure of a
paper with its own protocol and writes the paper's numbers beside ours, so it hard-codes
those numbers. The library's own experiment tools (:func:`fairopt.experiments.compare`, the
declarative configurations of :mod:`fairopt.experiments.configs`, sweeps, plots) are what
they are built from.

- ``sqp-table2`` (:mod:`benchmarks.papers.sqp_table2`): [SQP] Tables 2 and 4 and Fig. 7 -
  hard DI (and EI) constraints on Dutch, Law and ACSIncome (Colorado) with stochastic SQP;
- ``fair-ridge`` (:mod:`benchmarks.papers.fair_ridge`): [FR] Example 1 and the real-data
  comparison of FRRM, FGRRM, NCLM, ZLM and ZLRM;
- ``dcov-pg15`` (:mod:`benchmarks.papers.dcov_pg15`): [DC] sec. 5.2, the pg15training Poisson
  application with CCdCov and JdCov regularisers (Tables 5.3, 5.4, H.3 and Fig. 5.4);
- ``fauci-adult`` (:mod:`benchmarks.papers.fauci_adult`): [FU] Fig. 1 - FaUCI's DP, DI and EO
  regularisers on Adult for sex, race and age, trade-off curves against the vanilla network and SQP;
- ``gedi-tables`` (:mod:`benchmarks.papers.gedi_tables`): [GeDI] Tables 4/5 and Fig. 3 - RF, GB
  and MLP with Moving Targets under relative GeDI bounds on Adult and Communities, and the
  preprocessing (target projection) experiment; cached per (task, model, fold), parallel
  (``n_jobs``, the runners whose config has ``parallel=True``);
- ``peers`` (:mod:`benchmarks.papers.peers`): fairopt beside fairlearn, cooper and the
  Seldonian engine under ``DI >= delta`` (its own options: ``python -m benchmarks.papers peers -h``).

Each paper runs in full (the paper's protocol, or as close as the data and time allow) or
with ``quick=True`` (``--quick``: minutes on one core). The installed ``fairopt`` never imports
this package (``fairopt bench`` runs fairopt's declarative configurations only).
"""

from __future__ import annotations

import importlib
import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

__all__ = ["PaperConfig", "PAPER_CONFIGS", "PEERS", "run_paper_config", "command_line", "main"]


@dataclass(frozen=True)
class PaperConfig:
    """A named paper experiment: its description (``--list``) and its runner
    ``runner(out, *, quick, epochs, seeds, data_dir, subsample, command, progress) -> (table, summary, files)``."""

    name: str
    description: str
    runner: Callable[..., tuple[Any, str, list[Path]]]
    #: the runner also takes ``n_jobs`` (parallel cells); the others refuse ``n_jobs != 1``
    parallel: bool = False


def _sqp_table2(out: Path, *, quick: bool, epochs: int | None, seeds: Sequence[int] | None, data_dir: Any,
                subsample: int | None, command: str, progress: bool) -> tuple[Any, str, list[Path]]:
    from benchmarks.papers import sqp_table2

    settings = sqp_table2.override(sqp_table2.QUICK if quick else sqp_table2.FULL, epochs=epochs, seeds=seeds,
                                   subsample=subsample)
    return sqp_table2.run(out, settings, data_dir=data_dir, command=command, progress=progress)


def _fair_ridge(out: Path, *, quick: bool, epochs: int | None, seeds: Sequence[int] | None, data_dir: Any,
                subsample: int | None, command: str, progress: bool) -> tuple[Any, str, list[Path]]:
    from benchmarks.papers import fair_ridge

    if epochs is not None:
        raise ValueError("epochs: fair-ridge fits closed-form and convex models; --epochs does not apply")
    settings = fair_ridge.override(fair_ridge.QUICK if quick else fair_ridge.FULL, seeds=seeds, subsample=subsample)
    summary, files = fair_ridge.run(out, settings, data_dir=data_dir, command=command, progress=progress)
    return None, summary, files


def _settings_runner(module: str, tag: str) -> Callable[..., tuple[Any, str, list[Path]]]:
    """The runner of an experiment module with ``FULL``/``QUICK`` settings, ``override`` and
    ``run(out, settings, *, data_dir, command, progress, protocol, **extra)``; ``tag`` names
    the paper in the protocol line of the summary ("full ([DC] protocol)", "quick with
    overrides", ...). Extra keywords (``n_jobs``) go to ``run``."""

    def runner(out: Path, *, quick: bool, epochs: int | None, seeds: Sequence[int] | None, data_dir: Any,
               subsample: int | None, command: str, progress: bool, **extra: Any) -> tuple[Any, str, list[Path]]:
        experiment = importlib.import_module(f"{__name__}.{module}")
        base = experiment.QUICK if quick else experiment.FULL
        settings = experiment.override(base, epochs=epochs, seeds=seeds, subsample=subsample)
        protocol = ("quick" if quick else f"full ([{tag}] protocol)") + ("" if settings == base else " with overrides")
        return experiment.run(out, settings, data_dir=data_dir, command=command, progress=progress,
                              protocol=protocol, **extra)

    return runner


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
    "dcov-pg15": PaperConfig(
        "dcov-pg15",
        "[DC] sec. 5.2 Tables 5.3/5.4/H.3, Fig. 5.4: pg15training Poisson claim counts (exposure offset), "
        "CCdCov and JdCov regularisers against gender x region (not inputs), lambda 0..150 on a 70/30 "
        "calibration split, final models (CCdCov 40, JdCov 30) on the 80/20 split, AdaHessian with Table H.2's "
        "hyper-parameters, 10 seeds; Poisson deviance, RPS, dCov, JSD, UF with and without the balance "
        "correction, the paper's numbers beside ours. --quick: 30,000 rows, lambda 0/10/40/150, 1 seed, "
        "<= 40 epochs (~2 min on one core).",
        _settings_runner("dcov_pg15", "DC")),
    "fauci-adult": PaperConfig(
        "fauci-adult",
        "[FU] Fig. 1: FaUCI (BCE + lambda x WDP/WDI/WEO for sex and race, GDP/GDI/GEO for age) on Adult, MLP 100-50, "
        "batch 500, <= 5000 epochs with early stopping (patience 100) on each of 5 folds, 6-8 lambdas per panel, "
        "test accuracy against the metric beside the vanilla network, SQP hard constraints (sex, race) and the "
        "paper's numbers. --quick: fold 0, 3 lambdas per panel, <= 40 epochs, SQP on sex only (~5 min).",
        _settings_runner("fauci_adult", "FU")),
    "gedi-tables": PaperConfig(
        "gedi-tables",
        "[GeDI] Tables 4/5 and Fig. 3: RF, GB and MLP unconstrained and with Moving Targets under GeDI <= 20% of "
        "GeDI(x, y; V^1) (Adult sex/age, Communities race/pctBlack; V^1, or V^5 fine and coarse), 5-fold CV, 10 MT "
        "iterations, MLP 200 epochs; the preprocessing experiment (targets projected under GeDI-Coarse/Fine of order "
        "1..5, binned DIDI); the paper's numbers beside ours; cached per cell (resumable), --n-jobs. --quick: GB and "
        "MLP, Adult 4,000 rows, 2 of 5 folds, 3 MT iterations, MLP 20 epochs, orders 1/3/5 (minutes on 2 cores).",
        _settings_runner("gedi_tables", "GeDI"), parallel=True),
}


def command_line(name: str, out: str | Path, *, quick: bool = False, epochs: int | None = None,
                 seeds: Sequence[int] | None = None, data_dir: Any = None, subsample: int | None = None,
                 n_jobs: int = 1) -> str:
    """The command that reproduces a run (written into its summary)."""
    parts = ["python", "-m", "benchmarks.papers", name]
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
    if n_jobs != 1:
        parts += ["--n-jobs", str(n_jobs)]
    parts += ["--out", str(out)]
    return " ".join(shlex.quote(p) for p in parts)


def run_paper_config(name: str, out: str | Path, *, quick: bool = False, epochs: int | None = None,
                     seeds: Sequence[int] | None = None, data_dir: Any = None, subsample: int | None = None,
                     progress: bool = True, n_jobs: int = 1) -> Any:
    """Run paper experiment ``name`` into ``out``; returns a :class:`~fairopt.experiments.configs.BenchResult`
    (``table``: the per-run table of ``sqp-table2``, the linear-model folds of ``fair-ridge``)."""
    import pandas as pd

    from fairopt.experiments.reporting import BenchResult

    if name not in PAPER_CONFIGS:
        raise ValueError(f"name: {name!r} is not a paper experiment; available: {sorted(PAPER_CONFIGS)}")
    config = PAPER_CONFIGS[name]
    if n_jobs != 1 and not config.parallel:
        raise ValueError(f"n_jobs: {name!r} runs its experiments one after the other; --n-jobs applies to "
                         f"{sorted(n for n, c in PAPER_CONFIGS.items() if c.parallel)} (and 'peers')")
    command = command_line(name, out, quick=quick, epochs=epochs, seeds=seeds, data_dir=data_dir, subsample=subsample,
                           n_jobs=n_jobs)
    extra = {"n_jobs": n_jobs} if config.parallel else {}
    table, summary, files = config.runner(
        Path(out), quick=quick, epochs=epochs, seeds=seeds, data_dir=data_dir, subsample=subsample, command=command,
        progress=progress, **extra)
    if table is None:
        csv = Path(out) / "linear_folds.csv"
        table = pd.read_csv(csv) if csv.is_file() and csv.stat().st_size > 1 else pd.DataFrame()
    return BenchResult(table=table, summary=summary, files=list(files))


#: The peer benchmark's name; it takes its own options (:func:`benchmarks.papers.peers.add_arguments`).
PEERS = "peers"
_PEERS_DESCRIPTION = ("fairopt beside fairlearn, cooper and the Seldonian engine under DI >= delta; cached and "
                      "resumable (its own options: --quick --datasets --methods --deltas --seeds --n-jobs --max-rows "
                      "--include-sensitive --table).")


def _parser() -> Any:
    import argparse

    parser = argparse.ArgumentParser(prog="python -m benchmarks.papers",
                                     description="Run a paper reproduction by name (--list shows them).")
    parser.add_argument("name", nargs="?", help="a paper reproduction (--list), or 'peers' (then: peers -h)")
    parser.add_argument("--list", action="store_true", help="list the paper reproductions and exit")
    parser.add_argument("--out", default="fairopt_bench", help="output directory (default fairopt_bench)")
    parser.add_argument("--quick", action="store_true", help="the short variant (the description says what)")
    parser.add_argument("--epochs", type=int, help="override the epochs")
    parser.add_argument("--seeds", type=int, nargs="+", help="override the training seeds")
    parser.add_argument("--subsample", type=int, help="use a seeded subsample of this many rows")
    parser.add_argument("--data-dir", dest="data_dir", help="directory with the benchmark data files")
    parser.add_argument("--n-jobs", dest="n_jobs", type=int, default=1,
                        help=f"parallel cells: {sorted(n for n, c in PAPER_CONFIGS.items() if c.parallel)}")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m benchmarks.papers NAME [options]``; returns the exit status (2 for an unknown name or a
    missing one)."""
    import sys

    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == [PEERS]:
        from benchmarks.papers import peers

        return peers.main(argv[1:])
    parser = _parser()
    args = parser.parse_args(argv)
    if args.list or args.name is None:
        for name, config in PAPER_CONFIGS.items():
            print(f"{name}: {config.description}")
        print(f"{PEERS}: {_PEERS_DESCRIPTION}")
        return 0 if args.list else 2
    if args.name not in PAPER_CONFIGS:
        parser.error(f"{args.name!r} is not a paper reproduction; available: {[*PAPER_CONFIGS, PEERS]}")
    result = run_paper_config(args.name, args.out, quick=args.quick, epochs=args.epochs, seeds=args.seeds,
                              data_dir=args.data_dir, subsample=args.subsample, n_jobs=args.n_jobs)
    print(result.summary)
    print("wrote " + ", ".join(str(f) for f in result.files))
    return 0
