"""Axes for the library's plots, without touching the user's matplotlib state.

Every plot function takes ``ax=`` (one Axes, or one per panel) and returns the Axes it drew on;
without it, a new :class:`matplotlib.figure.Figure` on an Agg canvas, so that pyplot keeps no
figures alive and the user's backend is left alone.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

__all__ = ["PANEL_SIZE", "finish_axes", "finite_points", "panel_axes"]

#: Width and height in inches of one panel of a new figure.
PANEL_SIZE = (4.6, 3.6)


def finite_points(xs: Any, ys: Any) -> tuple[Any, Any]:
    """The points of a curve whose value is finite: a history column that is NaN where it was not measured (a
    mini-batch step's exact violation) draws as a line through its measured points, not as isolated
    invisible fragments."""
    import numpy as np

    xs, ys = np.asarray(xs, dtype=float), np.asarray(ys, dtype=float)
    keep = np.isfinite(ys)
    return xs[keep], ys[keep]


def panel_axes(ax: Any, n_panels: int, argument: str = "ax") -> list:
    """``n_panels`` Axes to draw on: ``ax`` (one Axes, or a sequence of ``n_panels``) or a new figure's."""
    from matplotlib.axes import Axes

    if ax is None:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure

        fig = Figure(figsize=(PANEL_SIZE[0] * n_panels, PANEL_SIZE[1]))
        FigureCanvasAgg(fig)
        return list(fig.subplots(1, n_panels, squeeze=False)[0])
    axes = [ax] if isinstance(ax, Axes) else list(getattr(ax, "flat", ax)) if hasattr(ax, "__iter__") else [ax]
    if len(axes) != n_panels or not all(isinstance(a, Axes) for a in axes):
        raise ValueError(f"{argument}: expected {'one matplotlib Axes' if n_panels == 1 else f'{n_panels} matplotlib Axes'} "
                         f"(one per panel), got {ax!r}")
    return axes


def finish_axes(axes: list, path: str | Path | None, title: str | None, created: bool, dpi: int = 120) -> Any:
    """Title and layout of a figure this library created (``created``), the PNG at ``path``
    if given; returns the single Axes, or the list of them for several panels."""
    fig = axes[0].figure
    if created:
        if title:
            fig.suptitle(title)
        fig.tight_layout()
    elif title:
        axes[0].set_title(title if len(axes) == 1 else f"{title}: {axes[0].get_title()}")
    if path is not None:
        fig.savefig(Path(path), dpi=dpi, format="png")
    return axes[0] if len(axes) == 1 else axes
