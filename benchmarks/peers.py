"""Side-by-side peer benchmark: fairopt vs fairlearn, cooper and the Seldonian engine.

Same seeded 70/30 split and feature matrix for every method, ``DI >= delta`` on one binary
sensitive attribute; one cached JSON per (dataset, method, delta, seed) cell under
``--out/cells`` (an interrupted run resumes), then ``peers.md``, ``peers.csv`` and
``tradeoff_<dataset>.png``. The library part is :mod:`benchmarks.papers.peers`.

    python benchmarks/peers.py --quick --n-jobs 2                 # delta 0.8, seed 0, 5 methods
    python benchmarks/peers.py --datasets law --deltas 0.7 0.9 --methods sqp-linear fairlearn-eg
    python -m benchmarks.papers peers --quick --out DIR                          # the same through the CLI

Peers (optional; a missing one is skipped with a logged message)::

    pip install "fairopt[peers]"                      # fairlearn, cooper-optim
    pip install --no-deps seldonian-engine==0.8.11    # pins matplotlib 3.5.1 (no py3.11 wheel)
    pip install autograd cma graphviz                 # what seldonian-engine really needs
"""

from __future__ import annotations

import argparse
import logging
import sys
import time

from _common import DEFAULT_DATA, DEFAULT_OUT
from benchmarks.papers import peers


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    peers.add_arguments(parser)
    parser.set_defaults(out=str(DEFAULT_OUT / "peers"))
    args = parser.parse_args(argv)
    if args.data_dir is None and DEFAULT_DATA.is_dir():
        args.data_dir = str(DEFAULT_DATA)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    command = "python benchmarks/peers.py " + " ".join(sys.argv[1:] if argv is None else argv)
    start = time.perf_counter()
    result = peers.run_from_args(args, command)
    print(result.markdown)
    print(f"{result.ran} cells run, {result.cached} cached, {len(result.failed)} not run; "
          f"{time.perf_counter() - start:.0f} s")
    print("wrote " + ", ".join(str(f) for f in result.files))
    return 0


if __name__ == "__main__":
    sys.exit(main())
