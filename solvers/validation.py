"""Parameter checks: the one place where the engines and :mod:`fairopt` validate options.

Every "a positive number", "a positive integer", "one of these choices", "True or False",
"a number in an interval" and "a seed" check of the engines (:mod:`solvers`) and of
:mod:`fairopt` (which imports these functions directly or through
``fairopt._validation``) is one of the functions below, modelled on scikit-learn's
``sklearn/utils/validation.py``. Keeping a single implementation keeps the accepted values
and the messages of all parameters consistent.

Conventions
-----------
* A failed check raises ``ValueError`` with the message
  ``"<name>: expected <what>, got <value!r>"``, so that the message names the parameter
  first and shows the offending value as the caller wrote it.
* A bool (Python or numpy) is never a number: ``True`` is rejected wherever a number or
  an integer is expected.
* Numbers must be finite: NaN and +-inf are rejected.
* A check returns the validated value converted to the plain Python type (``float``,
  ``int``, ``bool``, ``str``); callers that store parameters as given (scikit-learn
  convention) may ignore the return value.

This module depends on numpy only (no torch, no :mod:`fairopt`): :mod:`solvers` never
imports :mod:`fairopt`.
"""

from __future__ import annotations

import math
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
    """Return ``value`` as a finite ``float``.

    Parameters
    ----------
    value : Any
        A real number: a Python or numpy scalar, or anything ``float()`` converts
        (e.g. a 0-d array or a one-element tensor). Bools, strings and bytes are rejected.
    name : str
        The parameter's name, used in the error message.

    Returns
    -------
    float

    Raises
    ------
    ValueError
        ``"<name>: expected a real number, got ..."`` for a non-number (or a bool),
        ``"<name>: expected a finite number, got ..."`` for NaN or +-inf.
    """
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
    """Return ``value`` as a finite ``float`` ``> 0`` (``>= 0`` with ``allow_zero``).

    Parameters
    ----------
    value : Any
        A real number (see :func:`finite_float`).
    name : str
        The parameter's name, used in the error message.
    allow_zero : bool, default False
        Accept 0.

    Returns
    -------
    float

    Raises
    ------
    ValueError
        ``"<name>: expected a finite positive number, got ..."`` (``"expected a finite
        number >= 0"`` with ``allow_zero``), also for bools, non-numbers, NaN and +-inf.
    """
    what = "a finite number >= 0" if allow_zero else "a finite positive number"
    result = _number(value, name, what)
    if result < 0 or (result == 0 and not allow_zero):
        raise ValueError(f"{name}: expected {what}, got {value!r}")
    return result


def nonnegative_float(value: Any, name: str) -> float:
    """Return ``value`` as a finite ``float`` ``>= 0``: ``positive_float(value, name, allow_zero=True)``.

    Raises
    ------
    ValueError
        ``"<name>: expected a finite number >= 0, got ..."``.
    """
    return positive_float(value, name, allow_zero=True)


def positive_int(value: Any, name: str, *, allow_zero: bool = False, allow_integral_float: bool = False) -> int:
    """Return ``value`` as an ``int`` ``>= 1`` (``>= 0`` with ``allow_zero``).

    Parameters
    ----------
    value : Any
        A Python or numpy integer; bools are rejected.
    name : str
        The parameter's name, used in the error message.
    allow_zero : bool, default False
        Accept 0.
    allow_integral_float : bool, default False
        Also accept a finite float with an integral value such as ``10.0`` (the engines'
        loop counts and batch sizes have always accepted it, e.g. from a TOML ``1e3``).

    Returns
    -------
    int

    Raises
    ------
    ValueError
        ``"<name>: expected a positive integer, got ..."`` (``"expected a non-negative
        integer"`` with ``allow_zero``).
    """
    ok = _is_integer(value)
    if not ok and allow_integral_float and isinstance(value, (float, np.floating)):
        ok = math.isfinite(value) and float(value).is_integer()
    if not ok or value < (0 if allow_zero else 1):
        what = "a non-negative integer" if allow_zero else "a positive integer"
        raise ValueError(f"{name}: expected {what}, got {value!r}")
    return int(value)


def check_interval(value: Any, name: str, low: float, high: float, *, closed: Closed = "neither") -> float:
    """Return ``value`` as a finite ``float`` in the interval from ``low`` to ``high``.

    Parameters
    ----------
    value : Any
        A real number (see :func:`finite_float`).
    name : str
        The parameter's name, used in the error message.
    low, high : float
        The ends of the interval.
    closed : {"neither", "left", "right", "both"}, default "neither"
        Which ends belong to the interval: ``(low, high)``, ``[low, high)``,
        ``(low, high]`` or ``[low, high]``.

    Returns
    -------
    float

    Raises
    ------
    ValueError
        ``"<name>: expected a number in (low, high), got ..."`` with the brackets of
        ``closed``, also for bools, non-numbers, NaN and +-inf.
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
    """Return ``value`` if it is one of the strings ``allowed``.

    Parameters
    ----------
    value : Any
        The option given.
    allowed : sequence of str
        The accepted options.
    name : str
        The parameter's name, used in the error message.

    Returns
    -------
    str

    Raises
    ------
    ValueError
        ``"<name>: expected one of ['a', 'b'], got ..."``.
    """
    if not isinstance(value, str) or value not in allowed:
        raise ValueError(f"{name}: expected one of {list(allowed)}, got {value!r}")
    return value


def check_flag(value: Any, name: str, *, allow_none: bool = False) -> bool | None:
    """Return ``value`` as a ``bool`` if it is ``True`` or ``False`` (Python or numpy).

    Parameters
    ----------
    value : Any
        The flag given; integers such as 0/1 and strings such as "yes" are rejected.
    name : str
        The parameter's name, used in the error message.
    allow_none : bool, default False
        Accept ``None`` (returned as ``None``), e.g. for "decide automatically".

    Returns
    -------
    bool or None

    Raises
    ------
    ValueError
        ``"<name>: expected True or False, got ..."`` (``"expected None, True or False"``
        with ``allow_none``).
    """
    if value is None and allow_none:
        return None
    if not _is_bool(value):
        what = "None, True or False" if allow_none else "True or False"
        raise ValueError(f"{name}: expected {what}, got {value!r}")
    return bool(value)


def check_seed(seed: Any, *, allow_none: bool = True, allow_negative: bool = True,
               name: str = "seed") -> int | None:
    """Return a random seed as an ``int`` (or ``None``).

    Parameters
    ----------
    seed : Any
        A Python or numpy integer (bools rejected), or ``None`` if ``allow_none``.
    allow_none : bool, default True
        Accept ``None`` (no fixed seed).
    allow_negative : bool, default True
        Accept negative integers (False where the seed goes to numpy or a MIP solver).
    name : str, default "seed"
        The parameter's name, used in the error message.

    Returns
    -------
    int or None

    Raises
    ------
    ValueError
        ``"seed: expected an integer or None, got ..."``; ``"a non-negative integer"``
        without ``allow_negative``, without ``"or None"`` unless ``allow_none``.
    """
    if seed is None and allow_none:
        return None
    if not _is_integer(seed) or (not allow_negative and seed < 0):
        what = ("an integer" if allow_negative else "a non-negative integer") + (" or None" if allow_none else "")
        raise ValueError(f"{name}: expected {what}, got {seed!r}")
    return int(seed)


# ----------------------------------------------------------------------------- arrays
def check_seeds(seeds: Any, name: str = "seeds") -> tuple[int, ...]:
    """Return a non-empty sequence of random seeds as a tuple of ``int``.

    Parameters
    ----------
    seeds : iterable
        Python or numpy integers (bools rejected), at least one.
    name : str, default "seeds"
        The parameter's name, used in the error message.

    Raises
    ------
    ValueError
        ``"seeds: expected a non-empty sequence of integers, got ..."``.
    """
    try:
        values = list(seeds)
    except TypeError:
        values = []
    if not values or not all(_is_integer(v) for v in values):
        raise ValueError(f"{name}: expected a non-empty sequence of integers, got {seeds!r}")
    return tuple(int(v) for v in values)


def as_float_array(value: Any, name: str) -> np.ndarray:
    """Return ``value`` as a float64 numpy array (any shape; NaN/inf are kept).

    Parameters
    ----------
    value : Any
        Array-like: a numpy array, a list, a pandas object or a torch tensor (detached and
        moved to the CPU; torch is not imported).
    name : str
        The argument's name, used in the error message.

    Returns
    -------
    numpy.ndarray of float64

    Raises
    ------
    ValueError
        ``"<name>: expected numbers, got <type> (...)"`` when the conversion fails.
    """
    if hasattr(value, "detach"):  # torch tensors, without importing torch
        value = value.detach().cpu().numpy()
    try:
        return np.asarray(value, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{name}: expected numbers, got {type(value).__name__} ({exc})") from None


def check_verbose(value: Any, name: str = "verbose") -> int:
    """Return a verbosity level as an ``int``: a non-negative integer, or ``True``/``False``
    (1/0), as scikit-learn's ``verbose``.

    Raises
    ------
    ValueError
        ``"<name>: expected a non-negative integer or True/False, got ..."`` (e.g. for
        ``"yes"``, a string that would otherwise be truthy).
    """
    if _is_bool(value):
        return int(bool(value))
    if not _is_integer(value) or value < 0:
        raise ValueError(f"{name}: expected a non-negative integer or True/False, got {value!r}")
    return int(value)
