"""``python -m benchmarks.papers NAME [options]``: run a paper reproduction (``--list`` names them)."""

import sys

from benchmarks.papers import main

try:
    status = main()
except ValueError as exc:  # a setting the paper does not take: one line, as argparse reports a bad flag
    print(f"python -m benchmarks.papers: error: {exc}", file=sys.stderr)
    status = 2
raise SystemExit(status)
