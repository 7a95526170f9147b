"""``python -m fairopt``: the same command line as the ``fairopt`` console script."""

import sys

from fairopt.cli import main

sys.exit(main())
