"""The ``fairopt`` command line.

    fairopt demo [--epochs 300] [--delta 0.8] [--out fairopt_demo.png]
    fairopt datasets                      # list the data sets and where they are looked up
    fairopt bench sqp-vs-penalty-law --out results/   # a named experiment or a TOML file
    fairopt train --dataset adult --constraint disparate_impact:sex:0.8 --method sqp --out run/

Subcommands register themselves in :data:`COMMANDS` (name -> (help, add_arguments, run)).
"""

from __future__ import annotations

import argparse
import logging
import sys
from typing import Callable

__all__ = ["main", "COMMANDS", "USER_ERRORS", "register"]

COMMANDS: dict[str, tuple[str, Callable[[argparse.ArgumentParser], None], Callable[[argparse.Namespace], int | None]]] = {}


def register(name: str, help: str, add_arguments: Callable[[argparse.ArgumentParser], None] | None = None):
    """Decorator: ``@register("name", "help", add_arguments)`` on ``run(args) -> int | None``."""

    def wrap(run):
        COMMANDS[name] = (help, add_arguments or (lambda parser: None), run)
        return run

    return wrap


def _demo_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--epochs", type=int, default=300)
    p.add_argument("--delta", type=float, default=0.8)
    p.add_argument("--out", default="fairopt_demo.png")
    p.add_argument("--seed", type=int, default=0)


@register("demo", "train on the embedded UCI Adult with and without DI >= delta", _demo_arguments)
def _demo(args: argparse.Namespace) -> None:
    from fairopt.demo import run

    run(args.epochs, args.delta, args.out, args.seed)



@register("datasets", "list the benchmark data sets and the data directories searched")
def _datasets(args: argparse.Namespace) -> None:
    from fairopt import datasets

    print("data sets:", ", ".join(datasets.available()))
    print(f"searched: the data_dir argument, ${datasets.ENV_VAR}, {datasets.user_data_dir()}")
    print("UCI Adult is embedded and always available.")


_PEERS_HELP = ("side-by-side peer benchmark (fairopt vs fairlearn, cooper, seldonian) under DI >= delta; "
               "cached and resumable (options --quick --datasets --methods --deltas --n-jobs --max-rows)")


def _bench_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("config", nargs="?", help="a built-in configuration name (see --list), 'peers', or a TOML file")
    p.add_argument("--list", action="store_true", help="list the built-in configurations and exit")
    p.add_argument("--out", help="output directory (default fairopt_bench; peers: benchmarks/results/peers)")
    p.add_argument("--epochs", type=int, help="override every method's epochs")
    p.add_argument("--seeds", type=int, nargs="+", help="override the training seeds")
    p.add_argument("--subsample", type=int, help="use a seeded subsample of this many rows")
    p.add_argument("--data-dir", help="directory with the benchmark data files")
    peers = p.add_argument_group("peers", "options of 'fairopt bench peers'")
    peers.add_argument("--quick", action="store_true", help="peers: delta 0.8, seed 0, five methods")
    peers.add_argument("--datasets", nargs="+", help="peers: data sets")
    peers.add_argument("--methods", nargs="+", help="peers: methods")
    peers.add_argument("--deltas", nargs="+", type=float, help="peers: DI bounds")
    peers.add_argument("--n-jobs", dest="n_jobs", type=int, default=1, help="peers: parallel cells (joblib)")
    peers.add_argument("--max-rows", dest="max_rows", type=int, help="peers: seeded row subsample per data set")


def _bench_peers(args: argparse.Namespace) -> int:
    from fairopt.experiments import peers

    if args.out is None:
        args.out = "benchmarks/results/peers"
    if args.max_rows is None and args.subsample is not None:
        args.max_rows = args.subsample
    result = peers.run_from_args(args, "fairopt " + " ".join(sys.argv[1:]))
    print(result.markdown)
    print("wrote " + ", ".join(str(f) for f in result.files))
    return 0


@register("bench", "run a named experiment configuration or a TOML file; writes CSV, PNG and a summary",
          _bench_arguments)
def _bench(args: argparse.Namespace) -> int | None:
    from fairopt.experiments.configs import BUILTIN, run_config

    if args.list or args.config is None:
        for name in sorted(BUILTIN):
            print(f"{name}: {BUILTIN[name]['description']}")
        print(f"peers: {_PEERS_HELP}")
        return 0 if args.list else 2
    if args.config == "peers":
        return _bench_peers(args)
    result = run_config(args.config, args.out or "fairopt_bench", epochs=args.epochs, seeds=args.seeds, data_dir=args.data_dir,
                        subsample=args.subsample)
    print(result.summary)
    print("wrote " + ", ".join(str(f) for f in result.files))


def _train_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--config", help="TOML file with the options below as keys (flags override it)")
    p.add_argument("--dataset", help="data set name (fairopt datasets)")
    p.add_argument("--constraint", action="append",
                   help="kind:sensitive:bound, e.g. disparate_impact:sex:0.8 (repeatable)")
    p.add_argument("--penalty", action="append", help="penalty spec for --method penalty, e.g. dp_squared:sex")
    p.add_argument("--method", choices=["sqp", "penalty", "lagrangian"])
    p.add_argument("--model", choices=["linear", "mlp"])
    p.add_argument("--hidden", help="MLP hidden widths, e.g. 32 or 64,32")
    p.add_argument("--epochs", type=int)
    p.add_argument("--lr", type=float)
    p.add_argument("--batch-size", dest="batch_size", type=int)
    p.add_argument("--weight", type=float, help="penalty weight (--method penalty)")
    p.add_argument("--optimizer", choices=["adam", "sgd", "adahessian"])
    p.add_argument("--dual-lr", dest="dual_lr", type=float)
    p.add_argument("--dual-update", dest="dual_update", choices=["ascent", "adam"])
    p.add_argument("--seed", type=int)
    p.add_argument("--test-size", dest="test_size", type=float)
    p.add_argument("--subsample", type=int)
    p.add_argument("--data-dir", dest="data_dir")
    p.add_argument("--out", help="output directory (default fairopt_train)")


@register("train", "train one model from flags or a TOML file; writes a report, metrics, history and model",
          _train_arguments)
def _train(args: argparse.Namespace) -> None:
    import tomllib
    from pathlib import Path

    from fairopt.experiments.configs import run_train

    options: dict = {}
    if args.config:
        if not Path(args.config).is_file():
            raise ValueError(f"--config: {args.config} is not a file")
        options = tomllib.loads(Path(args.config).read_text())
    flags = {k: v for k, v in vars(args).items() if k not in ("config", "command", "verbose") and v is not None}
    options.update(flags)
    out = options.pop("out", "fairopt_train")
    result = run_train(options, out)
    print(result["report"])
    print(f"status {result['status']}, {result['seconds']:.1f} s; wrote {out}")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="fairopt", description="Train models under hard fairness constraints.")
    parser.add_argument("-v", "--verbose", action="count", default=0, help="more logging (-v info, -vv debug)")
    sub = parser.add_subparsers(dest="command", required=True)
    for name, (help_text, add_arguments, _) in COMMANDS.items():
        add_arguments(sub.add_parser(name, help=help_text, description=help_text))
    return parser


#: Exceptions that report a user's mistake (bad flag value, constraint spec, data or config
#: file, missing optional package): one line ``error: ...`` and exit status 2, as argparse
#: does for bad flags. Anything else is a bug and keeps its traceback.
USER_ERRORS: tuple[type[BaseException], ...] = (ValueError, OSError, ImportError, KeyError)


def _one_line(exc: BaseException) -> str:
    text = str(exc.args[0]) if isinstance(exc, KeyError) and exc.args else str(exc)
    return " ".join(text.split()) or type(exc).__name__


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``fairopt`` console script (and ``python -m fairopt``); returns the
    exit status: 0 on success, 2 for a user's mistake (one line ``error: ...`` on stderr; the
    traceback only with ``-vv``)."""
    args = build_parser().parse_args(argv)
    level = [logging.WARNING, logging.INFO, logging.DEBUG][min(args.verbose, 2)]
    logging.basicConfig(level=level, format="%(levelname)s %(name)s: %(message)s")
    _, _, run = COMMANDS[args.command]
    try:
        return int(run(args) or 0)
    except USER_ERRORS as exc:
        if args.verbose >= 2:
            raise
        print(f"fairopt {args.command}: error: {_one_line(exc)}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
