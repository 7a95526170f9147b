"""Progress bars of the engines' training loops: one rule for when a user sees one.

``verbose``: 0 nothing; "auto" a tqdm bar on standard error once the loop has run
:data:`AUTO_DELAY_SECONDS`; 1 or more the bar from the start and an INFO log line per epoch. The bar
is removed at the end, and redrawn only every :data:`LOG_INTERVAL_SECONDS` on a stream that is not
a terminal, so a log file gets a line every half minute, not thousands.
"""

from __future__ import annotations

import sys
from typing import Any, Iterable

from solvers.validation import check_verbose

__all__ = ["AUTO", "AUTO_DELAY_SECONDS", "LOG_INTERVAL_SECONDS", "TERMINAL_INTERVAL_SECONDS", "check_progress", "epoch_logs",
           "progress"]

#: The ``verbose`` value of a bar shown only on loops that run longer than a few seconds.
AUTO = "auto"
#: Seconds a loop runs under ``verbose="auto"`` before its bar appears.
AUTO_DELAY_SECONDS = 2.0
#: Seconds between redraws of a bar on a stream that is not a terminal.
LOG_INTERVAL_SECONDS = 30.0
#: Seconds between redraws on a terminal (tqdm's default).
TERMINAL_INTERVAL_SECONDS = 0.1


def check_progress(value: Any, name: str = "verbose") -> int | str:
    """``"auto"``, or a verbosity level of :func:`solvers.validation.check_verbose`."""
    if isinstance(value, str) and value == AUTO:
        return AUTO
    try:
        return check_verbose(value, name)
    except ValueError:
        raise ValueError(f"{name}: expected 'auto', a non-negative integer or True/False, got {value!r}") from None


def epoch_logs(verbose: int | str) -> bool:
    """Whether ``verbose`` asks for one INFO log line per epoch (a level of 1 or more)."""
    return not isinstance(verbose, str) and int(verbose) >= 1


def progress(iterable: Iterable[Any], verbose: int | str, desc: str, unit: str) -> Any:
    """``iterable`` wrapped in the bar ``verbose`` asks for (module docstring), or ``iterable``
    itself for ``verbose=0``. The bar (a ``tqdm`` object) takes ``set_postfix``."""
    if verbose == 0 or verbose is False:
        return iterable
    from tqdm.auto import tqdm

    stream = sys.stderr
    terminal = bool(getattr(stream, "isatty", lambda: False)())
    return tqdm(iterable, desc=desc, unit=unit, leave=False, file=stream,
                delay=AUTO_DELAY_SECONDS if verbose == AUTO else 0.0,
                mininterval=TERMINAL_INTERVAL_SECONDS if terminal else LOG_INTERVAL_SECONDS)
