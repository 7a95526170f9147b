"""Parameter checks shared by the engines and :mod:`fairopt`, so every option accepts the same values.

Modelled on scikit-learn's ``sklearn/utils/validation.py``. A failed check raises ``ValueError``
``"<name>: expected <what>, got <value!r>"`` (``name`` is the parameter's name); a bool is never a
number; numbers must be finite; a check returns the value as a plain Python type. numpy only: the
engines never import :mod:`fairopt`.
"""

from __future__ import annotations

import math
from collections import Counter
from numbers import Integral
from typing import Any, Literal, Sequence

import numpy as np

__all__ = [
    "finite_float",
    "positive_float",
    "nonnegative_float",
    "positive_int",
    "check_choice",
    "check_flag",
    "check_seed",
    "check_seeds",
    "check_interval",
    "check_verbose",
    "as_float_array",
    "to_numpy",
]

Closed = Literal["neither", "left", "right", "both"]
_CLOSED = ("neither", "left", "right", "both")


def _is_bool(value: Any) -> bool:
    return isinstance(value, (bool, np.bool_))


def _is_integer(value: Any) -> bool:
    """A Python or numpy integer that is not a bool."""
    return isinstance(value, Integral) and not _is_bool(value)


def _number(value: Any, name: str, what: str) -> float:
    """:func:`finite_float`, failing with ``"<name>: expected <what>, got ..."``."""
    try:
        return finite_float(value, name)
    except ValueError:
        raise ValueError(f"{name}: expected {what}, got {value!r}") from None


# ----------------------------------------------------------------------------- numbers
def finite_float(value: Any, name: str) -> float:
    """Return ``value`` (anything ``float()`` converts but a bool, str or bytes) as a finite ``float``."""
    if _is_bool(value) or isinstance(value, (str, bytes)):
        raise ValueError(f"{name}: expected a real number, got {value!r}")
    try:
        result = float(value)
    except (TypeError, ValueError, OverflowError):  # OverflowError: an int beyond the float range
        raise ValueError(f"{name}: expected a real number, got {value!r}") from None
    if not math.isfinite(result):
        raise ValueError(f"{name}: expected a finite number, got {value!r}")
    return result


def positive_float(value: Any, name: str, *, allow_zero: bool = False) -> float:
    """Return ``value`` as a finite ``float`` ``> 0`` (``>= 0`` with ``allow_zero``)."""
    what = "a finite number >= 0" if allow_zero else "a finite positive number"
    result = _number(value, name, what)
    if result < 0 or (result == 0 and not allow_zero):
        raise ValueError(f"{name}: expected {what}, got {value!r}")
    return result


def nonnegative_float(value: Any, name: str) -> float:
    """Return ``value`` as a finite ``float`` ``>= 0``."""
    return positive_float(value, name, allow_zero=True)


def positive_int(value: Any, name: str, *, allow_zero: bool = False, allow_integral_float: bool = False) -> int:
    """Return ``value`` (a Python or numpy integer) as an ``int`` ``>= 1`` (``>= 0`` with ``allow_zero``).

    ``allow_integral_float`` also accepts a float with an integral value such as a TOML ``1e3``,
    for loop counts and batch sizes.
    """
    ok = _is_integer(value)
    if not ok and allow_integral_float and isinstance(value, (float, np.floating)):
        ok = math.isfinite(value) and float(value).is_integer()
    if not ok or value < (0 if allow_zero else 1):
        what = "a non-negative integer" if allow_zero else "a positive integer"
        raise ValueError(f"{name}: expected {what}, got {value!r}")
    return int(value)


def check_interval(value: Any, name: str, low: float, high: float, *, closed: Closed = "neither") -> float:
    """Return ``value`` as a finite ``float`` between ``low`` and ``high``.

    ``closed`` says which ends belong to the interval: "neither" ``(low, high)``, "left"
    ``[low, high)``, "right" ``(low, high]`` or "both" ``[low, high]``.
    """
    if closed not in _CLOSED:
        raise ValueError(f"closed: expected one of {list(_CLOSED)}, got {closed!r}")
    left, right = closed in ("left", "both"), closed in ("right", "both")
    what = f"a number in {'[' if left else '('}{low:g}, {high:g}{']' if right else ')'}"
    result = _number(value, name, what)
    above = result >= low if left else result > low
    below = result <= high if right else result < high
    if not (above and below):
        raise ValueError(f"{name}: expected {what}, got {value!r}")
    return result


# ----------------------------------------------------------------------------- others
def check_choice(value: Any, allowed: Sequence[str], name: str) -> str:
    """Return ``value`` if it is one of the strings ``allowed``."""
    if not isinstance(value, str) or value not in allowed:
        raise ValueError(f"{name}: expected one of {list(allowed)}, got {value!r}")
    return value


def check_flag(value: Any, name: str, *, allow_none: bool = False) -> bool | None:
    """Return ``value`` as a ``bool`` if it is a Python or numpy ``True``/``False`` (0/1 are refused).

    ``allow_none`` also accepts ``None``, e.g. for "decide automatically".
    """
    if value is None and allow_none:
        return None
    if not _is_bool(value):
        what = "None, True or False" if allow_none else "True or False"
        raise ValueError(f"{name}: expected {what}, got {value!r}")
    return bool(value)


def check_seed(seed: Any, *, allow_none: bool = True, allow_negative: bool = True,
               name: str = "seed") -> int | None:
    """Return a random seed (a Python or numpy integer, or ``None`` if ``allow_none``) as an ``int``.

    ``allow_negative=False`` where the seed goes to numpy or a MIP solver.
    """
    if seed is None and allow_none:
        return None
    if not _is_integer(seed) or (not allow_negative and seed < 0):
        what = ("an integer" if allow_negative else "a non-negative integer") + (" or None" if allow_none else "")
        raise ValueError(f"{name}: expected {what}, got {seed!r}")
    return int(seed)


# ----------------------------------------------------------------------------- arrays
def check_seeds(seeds: Any, name: str = "seeds") -> tuple[int, ...]:
    """Return a non-empty iterable of distinct random seeds as a tuple of ``int`` (a repeated seed repeats a run,
    whose rows a mean over seeds would count twice)."""
    try:
        values = list(seeds)
    except TypeError:
        values = []
    if not values or not all(_is_integer(v) for v in values):
        raise ValueError(f"{name}: expected a non-empty sequence of integers, got {seeds!r}")
    repeated = sorted(seed for seed, count in Counter(int(v) for v in values).items() if count > 1)
    if repeated:
        raise ValueError(f"{name}: the seed(s) {repeated} repeat; each seed is one run, so give each once")
    return tuple(int(v) for v in values)


def to_numpy(value: Any) -> np.ndarray:
    """A numpy array of a torch tensor (detached, on CPU; recognised without importing torch), a pandas
    object (``to_numpy()``) or any array-like (``np.asarray``): a view where possible, no dtype change."""
    if hasattr(value, "detach"):
        return value.detach().cpu().numpy()
    if hasattr(value, "to_numpy"):
        return value.to_numpy()
    return np.asarray(value)


def as_float_array(value: Any, name: str) -> np.ndarray:
    """Return an array-like or a torch tensor (without importing torch) as a float64 array; NaN/inf are kept."""
    if hasattr(value, "detach"):  # torch tensors, without importing torch
        value = to_numpy(value)
    try:
        return np.asarray(value, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{name}: expected numbers, got {type(value).__name__} ({exc})") from None


def check_verbose(value: Any, name: str = "verbose") -> int:
    """Return a verbosity level, a non-negative integer or ``True``/``False`` (1/0), as an ``int``."""
    if _is_bool(value):
        return int(bool(value))
    if not _is_integer(value) or value < 0:
        raise ValueError(f"{name}: expected a non-negative integer or True/False, got {value!r}")
    return int(value)
