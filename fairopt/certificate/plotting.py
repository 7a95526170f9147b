"""Pictures of held-out certificates: the realised value, its confidence interval and the bound.

:func:`plot_certificate` draws one panel per constraint: for certificates, the held-out value with its
interval as an error bar and the bound as a dashed line; for an estimator fitted with
``validation_fraction`` and ``margin="auto"``, one point per candidate in the order tried, with a line
to its confidence bound, coloured by pass/fail, the returned one circled. ``ax`` follows
:mod:`solvers.plotting`'s convention (one Axes per panel, or None for a new Agg figure).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Sequence

import numpy as np

from fairopt.certificate.statements import Certificate

__all__ = ["plot_certificate"]

_PASSED, _FAILED, _SKIPPED = "tab:green", "tab:red", "tab:gray"


def _certificates_of(source: Any) -> tuple[list[Certificate], Any]:
    """The certificates and the candidates table (or None) of ``source``."""
    if isinstance(source, Certificate):
        return [source], None
    if hasattr(source, "certificate_"):
        certificates = getattr(source, "certificate_")
        if certificates is None:
            raise ValueError("source: this estimator has no certificate; fit it with validation_fraction= (and "
                             "margin='auto' for the candidates)")
        return list(certificates), getattr(source, "candidates_", None)
    certificates = list(source) if isinstance(source, Sequence) else []
    if not certificates or not all(isinstance(c, Certificate) for c in certificates):
        raise ValueError(f"source: expected a Certificate, a list of them or an estimator fitted with "
                         f"validation_fraction=, got {type(source).__name__}")
    return certificates, None


def _one_certificate(ax: Any, cert: Certificate) -> None:
    """The held-out value with its interval."""
    color = _PASSED if cert.passed else _FAILED
    below, above = max(cert.realised - cert.lower, 0.0), max(cert.upper - cert.realised, 0.0)
    ax.errorbar([0], [cert.realised], yerr=[[below], [above]], fmt="o", capsize=8, color=color,
                label=f"held-out value, {cert.confidence:.0%} interval")
    ax.set_xticks([0])
    ax.set_xticklabels([f"{cert.n} held-out rows"])
    ax.set_xlim(-1, 1)


def _candidates(ax: Any, cert: Certificate, candidates: Any) -> list:
    """Every candidate's held-out value and confidence bound, in the order tried; a skipped candidate (``passed``
    None: degenerate, or its margin too large) is a grey tick without a value. The legend's colours are drawn
    for the outcomes present, not taken from the first candidate."""
    from matplotlib.lines import Line2D

    values = candidates[f"{cert.constraint}: held-out"].to_numpy(float)
    bounds = candidates[f"{cert.constraint}: confidence bound"].to_numpy(float)
    outcomes = ["skipped" if p is None or (isinstance(p, float) and np.isnan(p)) else "passed" if p else "failed"
                for p in candidates["passed"].tolist()]
    x = np.arange(len(values))
    colors = [{"passed": _PASSED, "failed": _FAILED, "skipped": _SKIPPED}[o] for o in outcomes]
    ax.vlines(x, np.minimum(values, bounds), np.maximum(values, bounds), colors=colors, lw=2)
    ax.scatter(x, values, c=colors, zorder=3)
    handles = [Line2D([], [], color=color, marker="o", lw=2, label=f"{outcome}: held-out value to its "
                      f"{cert.confidence:.0%} confidence bound" if outcome != "skipped" else "skipped (no model)")
               for outcome, color in (("passed", _PASSED), ("failed", _FAILED), ("skipped", _SKIPPED))
               if outcome in outcomes]
    chosen = np.flatnonzero(candidates["chosen"].to_numpy(bool))
    if chosen.size:
        handles.append(ax.scatter(x[chosen], values[chosen], s=160, facecolors="none", edgecolors="black", zorder=4,
                                  label="returned model"))
    ax.set_xticks(x)
    ax.set_xticklabels([f"{v:.3g}" + (" (skipped)" if o == "skipped" else "")
                        for v, o in zip(candidates["inflation"].to_numpy(float), outcomes)])
    ax.set_xlabel("margin inflation (candidates in the order tried)")
    return handles


def plot_certificate(source: Any, *, ax: Any = None, path: str | Path | None = None, title: str | None = None) -> Any:
    """Held-out certificates as a picture: one panel per constraint (module doc).

    Parameters
    ----------
    source : Certificate, list of Certificate, or fitted estimator
        Certificates (:func:`~fairopt.certificate.certify`, ``est.certificate_``) or an estimator fitted
        with ``validation_fraction``.
    ax : matplotlib Axes or sequence of them, optional
        One per constraint; None: a new figure.
    path : str or Path, optional
        Also write the figure there (PNG).
    title : str, optional
        Title of the figure (of the first panel when ``ax`` is given).

    Returns
    -------
    matplotlib.axes.Axes or list of them
        One per constraint; ``.figure`` is the figure.

    Raises
    ------
    ValueError
        ``source`` holds no certificate, or ``ax`` is not one Axes per constraint.
    """
    from solvers.plotting import finish_axes, panel_axes

    certificates, candidates = _certificates_of(source)
    created = ax is None
    panels = panel_axes(ax, len(certificates))
    for axes, cert in zip(panels, certificates):
        handles = None
        if candidates is not None and f"{cert.constraint}: held-out" in getattr(candidates, "columns", ()):
            handles = _candidates(axes, cert, candidates)
        else:
            _one_certificate(axes, cert)
        op = ">=" if cert.bound_side == "lower" else "<="
        line = axes.axhline(cert.bound, color="black", linestyle="--", linewidth=1, label=f"bound {op} {cert.bound:g}")
        axes.set_ylabel(cert.measure)
        axes.set_title(f"{cert.constraint}: {'passed' if cert.passed else 'FAILED'}", fontsize=9)
        axes.grid(alpha=0.3)
        axes.legend(**({} if handles is None else {"handles": [*handles, line]}), fontsize=7, loc="best")
    return finish_axes(panels, path, title, created)
