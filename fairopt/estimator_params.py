"""The scikit-learn parameter protocol for the estimators' list of constraints: nested keys
``constraints__<i>`` (an element) and ``constraints__<i>__<name>`` (a parameter of the
constraint object at ``i``), so that a grid search can vary one bound."""

from __future__ import annotations

from typing import Any

from fairopt.specs import spec_list

__all__ = ["constraint_index", "constraint_items", "nested_constraint_params", "with_constraint_params"]


def constraint_items(constraints: Any) -> list | None:
    """The elements of ``constraints`` when it is a list (or tuple) of specs; None for
    None or a single spec (a tuple whose first element is a string is one spec)."""
    if not isinstance(constraints, (list, tuple)):
        return None
    specs = spec_list(constraints)
    return None if len(specs) == 1 and specs[0] is constraints else specs


def constraint_index(key: str) -> tuple[int, str | None] | None:
    """``constraints__<i>[__<name>]`` -> ``(i, name or None)``; None for any other key."""
    parts = key.split("__", 2)
    if len(parts) < 2 or parts[0] != "constraints" or not parts[1].isdigit():
        return None
    return int(parts[1]), (parts[2] if len(parts) == 3 else None)


def nested_constraint_params(constraints: Any) -> dict:
    """``constraints__<i>`` for every element of a list of constraint specs and, for a
    constraint object, ``constraints__<i>__<name>`` for each of its parameters; ``{}`` for
    None or a single spec."""
    params: dict = {}
    for i, item in enumerate(constraint_items(constraints) or ()):
        params[f"constraints__{i}"] = item
        if hasattr(item, "get_params") and not isinstance(item, type):
            params.update((f"constraints__{i}__{k}", v) for k, v in item.get_params(deep=True).items())
    return params


def with_constraint_params(constraints: Any, indexed: dict) -> Any:
    """``constraints`` with the nested keys ``indexed`` applied: ``constraints__<i>``
    replaces element ``i`` (a new list, or tuple), ``constraints__<i>__<name>`` sets a
    parameter of the constraint object at ``i`` in place (its ``set_params``).

    Raises
    ------
    ValueError
        ``constraints`` is not a list of specs, an index out of range, or a parameter of a
        spec that has none of its own.
    """
    items = constraint_items(constraints)
    if items is None:
        names = [constraint_index(key) for key in indexed]
        plain = sorted({f"constraints__{index[1]}" for index in names if index is not None and index[1]})
        hint = (f"; a single constraint object's parameters are {plain} (without the index), or pass "
                "constraints=[...] to index them" if plain and hasattr(constraints, "set_params") else "")
        raise ValueError(f"set_params: {sorted(indexed)} index a list of constraints, but constraints is "
                         f"{constraints!r}{hint}")
    items = list(items)
    nested: dict[int, dict] = {}
    for key, value in indexed.items():
        i, name = constraint_index(key)
        if i >= len(items):
            raise ValueError(f"set_params: {key!r} indexes constraint {i}, but there are {len(items)}")
        if name is None:
            items[i] = value
        else:
            nested.setdefault(i, {})[name] = value
    for i, values in nested.items():
        if not callable(getattr(items[i], "set_params", None)):
            raise ValueError(f"set_params: constraint {i} ({items[i]!r}) is a spec without parameters of its "
                             f"own; replace it whole with constraints__{i}=... or give a constraint object")
        items[i].set_params(**values)
    return tuple(items) if isinstance(constraints, tuple) else items
