"""The FaUCI metrics that :func:`fairopt.evaluate` reports ([FU] sec 3.1 and 3.4).

For a binary classifier, per sensitive feature ``f``, on the hard predictions
``h = 1{out > threshold}``: binary or categorical ``f``: ``wdp[f]``, ``wdi[f]``, ``weo[f]``
([FU] eq. 5, 8, 10, uniform weights ``w_a = 1/N`` as in [FU] sec 4.1); continuous ``f``:
``gdp[f]``, ``gdi[f]``, ``geo[f]`` ([FU] eq. 7, 9, 11, 10 equal-width bins, density weights
``w_b = n_b / n``); a combined attribute ``f1&f2`` ([FU] sec 3.4, "a dummy protected attribute by
combining the original ones"): the W* metrics of the occurring cells of the features' groups,
continuous features in 3 quantile bins as for evaluate's UF and JS divergence.

``WDP = sum_a w_a |E[h | A=a] - E[h]|`` and ``WEO = sum_a w_a sum_y |E[h | A=a, Y=y] - E[h | Y=y]|``
are unfairness values (0 is fair); ``WDI = sum_a w_a eta(E[h | A=a] / E[h | A!=a])``,
``eta(x) = min(x, 1/x)``, is a score (1 is fair). Undefined values are NaN, never "perfectly
fair": a single group gives NaN for all three (a constant continuous feature warns), and
``wdi``/``gdi`` are NaN with a note when no row is predicted positive.
"""

from __future__ import annotations

import logging
import math
import warnings
from typing import Any, Sequence

import numpy as np

from fairopt.exceptions import FairnessWarning
from fairopt.measures.distribution import intersection_cells
from fairopt.measures.fauci import gdi, gdp, geo, wdi, wdp, weo
from fairopt.measures.group import encode_groups, undefined_ratio_reason

__all__ = ["COMBINED_SEPARATOR", "COMBINED_QUANTILES", "FAUCI_METRICS", "fauci_columns", "fauci_measures", "fauci_keys",
           "resolve_combined"]

logger = logging.getLogger(__name__)

#: Joins the feature names of a combined attribute in the metric keys: ``wdp[sex&race]``.
COMBINED_SEPARATOR = "&"
#: Equal-count bins of a continuous feature inside a combined attribute (as evaluate's UF/JS cells).
COMBINED_QUANTILES = 3
#: The metric names by kind of sensitive feature: weighted (groups) or generalised (bins).
_NAMES = {"groups": ("wdp", "wdi", "weo"), "continuous": ("gdp", "gdi", "geo")}
#: Every FaUCI metric name (the prefixes of the keys ``<metric>[<feature>]``).
FAUCI_METRICS = _NAMES["groups"] + _NAMES["continuous"]


def fauci_columns(columns: Sequence[str]) -> list[str]:
    """The FaUCI metric keys ``<metric>[<feature>]`` among ``columns``, in their order."""
    return [c for c in columns if isinstance(c, str) and c.endswith("]") and c.split("[", 1)[0] in FAUCI_METRICS]


def fauci_keys(name: str, kind: str) -> tuple[str, str, str]:
    """The keys of feature (or combination) ``name``: ``wdp``, ``wdi``, ``weo`` or, for a continuous
    one, ``gdp``, ``gdi``, ``geo``, each ``[name]``.
    """
    names = _NAMES["continuous" if kind == "continuous" else "groups"]
    return tuple(f"{metric}[{name}]" for metric in names)  # type: ignore[return-value]


def resolve_combined(combined: Any, names: Sequence[str]) -> list[tuple[str, ...]]:
    """The combined attributes asked for, as tuples of sensitive feature names.

    Parameters
    ----------
    combined : None, bool, sequence of str or sequence of sequences of str
        None or False: none; True: all sensitive features (if at least two); a sequence of names:
        that combination; a sequence of sequences: one combination each.
    names : sequence of str
        The data's sensitive feature names.

    Raises
    ------
    ValueError
        An unknown name, fewer than two distinct features, or another type.
    """
    if combined is None or combined is False:
        return []
    if combined is True:
        return [tuple(names)] if len(names) >= 2 else []
    if isinstance(combined, str) or not isinstance(combined, Sequence):
        raise ValueError(f"fauci_combined: expected True, a list of sensitive feature names or a list of such lists, "
                         f"got {combined!r}")
    groups = [combined] if all(isinstance(c, str) for c in combined) else list(combined)
    result = []
    for group in groups:
        if isinstance(group, str) or not isinstance(group, Sequence) or not all(isinstance(g, str) for g in group):
            raise ValueError(f"fauci_combined: expected lists of sensitive feature names, got {group!r}")
        unknown = [g for g in group if g not in names]
        if unknown:
            raise ValueError(f"fauci_combined: unknown sensitive feature {unknown[0]!r}; available: {list(names)}")
        if len(set(group)) < 2:
            raise ValueError(f"fauci_combined: a combination needs at least two distinct features, got {list(group)}")
        result.append(tuple(group))
    return result


def _n_groups(values: Any, kind: str) -> int:
    """Groups of a binary/categorical feature; for a continuous one, 2 when it varies, else 1."""
    if kind == "continuous":
        v = np.asarray(values, dtype=float)
        return 2 if v.size and float(v.max()) > float(v.min()) else 1
    return int(encode_groups(values)[1].size)


def _di_or_nan(value: float, hard: np.ndarray, key: str, notes: dict[str, str]) -> float:
    """``value``, or NaN with a note when no row is predicted positive (every ratio is 0/0)."""
    if hard.max() > 0:
        return value
    notes[key] = undefined_ratio_reason()
    return math.nan


def _metrics(hard: np.ndarray, y: np.ndarray, groups: Any, kind: str, name: str,
             notes: dict[str, str]) -> dict[str, float]:
    """The three metrics of one feature or combination (NaN for a single group)."""
    keys = fauci_keys(name, kind)
    if _n_groups(groups, kind) < 2:
        if kind == "continuous":
            warnings.warn(f"sensitive feature {name!r} is constant in this data; {', '.join(keys)} are undefined "
                          "(NaN)", FairnessWarning, stacklevel=4)
        return dict.fromkeys(keys, math.nan)
    dp, di, eo = (gdp, gdi, geo) if kind == "continuous" else (wdp, wdi, weo)
    return {keys[0]: float(dp(hard, groups)),
            keys[1]: _di_or_nan(float(di(hard, groups)), hard, keys[1], notes),
            keys[2]: float(eo(hard, groups, y))}


def fauci_measures(hard: np.ndarray, y: np.ndarray, items: Sequence[tuple[str, Any, str]],
                   combined: Sequence[tuple[str, ...]] = (), notes: dict[str, str] | None = None) -> dict[str, float]:
    """The FaUCI metrics of hard predictions, per sensitive feature and then per combination.

    Parameters
    ----------
    hard : numpy.ndarray of shape (n,)
        Hard 0/1 predictions.
    y : numpy.ndarray of shape (n,)
        True 0/1 labels (for ``weo``/``geo``).
    items : sequence of (name, values, kind)
        The sensitive features.
    combined : sequence of tuples of names
        Combined attributes (:func:`resolve_combined`).
    notes : dict, optional
        Filled with ``{key: reason}`` for every NaN ``wdi``/``gdi`` of a 0/0.

    Returns
    -------
    dict
        The keys of :func:`fauci_keys` in the order of ``items``, then per combination.
    """
    notes = {} if notes is None else notes
    results: dict[str, float] = {}
    for name, values, kind in items:
        results.update(_metrics(hard, y, values, kind, name, notes))
    by_name = {name: (values, kind) for name, values, kind in items}
    for combination in combined:
        cells = intersection_cells(*[by_name[c][0] for c in combination], kinds=[by_name[c][1] for c in combination],
                                   n_quantiles=COMBINED_QUANTILES)
        label = COMBINED_SEPARATOR.join(combination)
        logger.debug("FaUCI: combined attribute %s has %d cells", label, int(cells.max()) + 1)
        results.update(_metrics(hard, y, cells, "categorical", label, notes))
    return results
