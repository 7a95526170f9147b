"""The ``fairopt`` command line.

    fairopt demo [--epochs 300] [--delta 0.8] [--out fairopt_demo.png]
    fairopt datasets                      # list the data sets and where they are looked up

Subcommands register themselves in :data:`COMMANDS` (name -> (help, add_arguments, run)).
"""

from __future__ import annotations

import argparse
import logging
import sys
from typing import Callable

__all__ = ["main", "COMMANDS", "register"]

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


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="fairopt", description="Train models under hard fairness constraints.")
    parser.add_argument("-v", "--verbose", action="count", default=0, help="more logging (-v info, -vv debug)")
    sub = parser.add_subparsers(dest="command", required=True)
    for name, (help_text, add_arguments, _) in COMMANDS.items():
        add_arguments(sub.add_parser(name, help=help_text, description=help_text))
    return parser


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``fairopt`` console script; returns the exit status."""
    args = build_parser().parse_args(argv)
    level = [logging.WARNING, logging.INFO, logging.DEBUG][min(args.verbose, 2)]
    logging.basicConfig(level=level, format="%(levelname)s %(name)s: %(message)s")
    _, _, run = COMMANDS[args.command]
    return int(run(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
