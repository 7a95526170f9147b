"""Per-iteration training records and the result object every engine returns."""

from __future__ import annotations

import json
import numbers
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Sequence

import numpy as np

from solvers.plotting import finish_axes, finite_points, panel_axes

__all__ = ["DEFAULT_PLOT_KEYS", "History", "FitResult", "plain_values", "COLUMN_ACTIVE", "COLUMN_C",
           "COLUMN_C_PREDICTIONS", "COLUMN_DRIFT", "COLUMN_PENALTY", "COLUMN_QP_STATUS", "COLUMN_REFRESHED",
           "COLUMN_SCREENED", "COLUMN_VIOL",
           "QP_FINAL", "QP_NORMAL", "QP_RELAXED"]

# History columns that callers read (the engines write them under these names).
#: SQP: the status of the iteration's QP: :data:`QP_NORMAL`, :data:`QP_RELAXED` (its
#: linearised constraints had no solution) or :data:`QP_FINAL` (the closing record, which
#: describes the returned model).
COLUMN_QP_STATUS = "qp_status"
QP_NORMAL = "normal"
QP_RELAXED = "relaxed"
QP_FINAL = "final"
#: SQP: the rows in the QP's active set (``"u3"``, ``"l0"``: side and row index).
COLUMN_ACTIVE = "active"
#: SQP and LagrangianDual: the surrogate constraint values of the iteration.
COLUMN_C = "c"
#: SQP: constraint rows whose Jacobian row was skipped (:mod:`solvers.sqp.screening`).
COLUMN_SCREENED = "screened"
#: SQP mini-batches with ``constraint_batch="snapshot"``: whether the step refreshed the
#: constraint snapshot on all rows (:mod:`solvers.sqp.snapshot`).
COLUMN_REFRESHED = "refreshed"
#: SQP mini-batches with a snapshot drift tolerance (``constraint_drift_tol``): at a step that
#: refreshed the snapshot, the drift of its first-order model since the previous refresh in units of
#: the tolerance, ``max_i |e_i| / tol_i`` (above 1 the steps to the next refresh halved); None at
#: the other steps, at the first refresh and without a tolerance.
COLUMN_DRIFT = "drift"
#: LagrangianDual: the per-row surrogate violations of the step.
COLUMN_VIOL = "viol"
#: Penalty: the value of each penalty term (one per constraint) of the step.
COLUMN_PENALTY = "penalty"
#: MovingTargets: the exact constraint values of the learner's training predictions.
COLUMN_C_PREDICTIONS = "c_predictions"


def plain_values(info: dict) -> dict:
    """The entries of ``info`` that are plain values or lists of them (numpy/torch scalars as Python
    ones); arrays, which hold training data, are dropped."""
    def plain(v: Any) -> bool:
        return v is None or isinstance(v, (bool, numbers.Number, str))

    kept = {}
    for key, value in info.items():
        if plain(value):
            kept[key] = value.item() if hasattr(value, "item") else value
        elif isinstance(value, (list, tuple)) and all(plain(v) for v in value):
            kept[key] = [v.item() if hasattr(v, "item") else v for v in value]
    return kept


#: The default panels of :meth:`History.plot`, by engine: the first group with a recorded key is drawn.
DEFAULT_PLOT_KEYS: tuple[tuple[str, ...], ...] = (("f", "V", "V_exact", "P"),
                                                   ("score", "V_targets", "V_predictions"))


class History:
    """An append-only list of per-iteration records; :meth:`to_pandas` expands vector entries into
    columns ``"<key>[<row name>]"`` by ``row_names``."""

    def __init__(self, row_names: Sequence[str] = (), records: Iterable[dict] = ()) -> None:
        self.row_names = list(row_names)
        self.records: list[dict] = list(records)

    def append(self, record: dict) -> None:
        self.records.append(record)

    def __len__(self) -> int:
        return len(self.records)

    def __getitem__(self, i):
        return self.records[i]

    def column(self, key: str) -> np.ndarray:
        """One key over all records as an array (NaN where a record lacks it)."""
        return np.asarray([r.get(key, np.nan) for r in self.records], dtype=float)

    def to_pandas(self):
        """A DataFrame with one row per record; list-valued keys are expanded per row."""
        import pandas as pd

        flat = []
        for r in self.records:
            row = {}
            for k, v in r.items():
                if isinstance(v, (list, tuple, np.ndarray)) and k != COLUMN_ACTIVE:
                    names = self.row_names if len(self.row_names) == len(v) else [str(i) for i in range(len(v))]
                    for name, x in zip(names, v):
                        row[f"{k}[{name}]"] = x
                else:
                    row[k] = v
            flat.append(row)
        return pd.DataFrame(flat)

    def per_epoch(self):
        """One row per epoch: the mean of every numeric column over the epoch's records (a mini-batch run's
        steps share an epoch, so its noisy batch losses ``f`` average into one value per pass over the rows),
        ``steps`` (records averaged) and ``iteration`` (the epoch's last). Records of another ``phase`` (a
        mini-batch run's closing ``"polish"`` on all rows) get their own row, and the closing record of the
        returned model is left out. Index: ``epoch``; column ``phase`` ("train" for the epochs' steps).

        Raises
        ------
        ValueError
            When no record has an ``epoch`` (Moving Targets' and some engines' histories).
        """
        frame = self.to_pandas()
        if "epoch" not in frame or frame["epoch"].isna().all():
            raise ValueError("per_epoch: the records have no 'epoch' column (this engine records iterations only)")
        if COLUMN_QP_STATUS in frame:
            frame = frame[frame[COLUMN_QP_STATUS] != QP_FINAL]
        frame = frame[frame["epoch"].notna()].copy()
        frame["phase"] = frame["phase"].fillna("train") if "phase" in frame else "train"
        numeric = [c for c in frame.columns if c not in ("epoch", "phase", "iteration")
                   and frame[c].dtype.kind in "iufb"]
        grouped = frame.groupby(["phase", "epoch"], sort=False)
        table = grouped[numeric].mean()
        table.insert(0, "steps", grouped.size())
        table.insert(0, "iteration", grouped["iteration"].max())
        table = table.reset_index().sort_values(["iteration"]).set_index("epoch")
        return table

    def to_json(self, path: str | Path) -> None:
        """Write the history as JSON (row names and records)."""
        Path(path).write_text(json.dumps({"row_names": self.row_names, "records": self.records}, default=_jsonable))

    @classmethod
    def from_json(cls, path: str | Path) -> "History":
        """The history :meth:`to_json` wrote (numpy values come back as plain numbers and lists, anything else
        JSON has no type for as its ``str``)."""
        obj = json.loads(Path(path).read_text())
        return cls(obj.get("row_names", ()), obj.get("records", ()))

    def plot(self, path: str | Path | None = None, *, keys: Sequence[str] | None = None,
             x: str = "iteration", title: str | None = None, ax: Any = None, per_epoch: bool = False) -> Any:
        """Training curves: one panel per recorded key (objective, surrogate and exact violation).

        Parameters
        ----------
        path : str or Path, optional
            Also write the figure there as a PNG.
        keys : sequence of str, optional
            History columns; keys no record has are dropped (ValueError if none is left). None: the first of
            :data:`DEFAULT_PLOT_KEYS` of which some key was recorded (the gradient engines' objective and
            violations; Moving Targets' learner score and violations of its targets and predictions).
        x : str, default "iteration"
        title : str, optional
        ax : matplotlib Axes or sequence of Axes, optional
            Where to draw: one Axes per kept key. None: a new figure (object-oriented API;
            the pyplot state and the backend are left alone).
        per_epoch : bool, default False
            Draw the epoch means of :meth:`per_epoch` against the epoch (a mini-batch run's many noisy
            steps as one point per pass over the rows; its closing polish as a last marked point).

        Returns
        -------
        matplotlib Axes, or a list of them for several keys (the figure is ``.figure``).
        """
        if per_epoch:
            return self._plot_per_epoch(path, keys, title, ax)
        recorded = {k for r in self.records for k, v in r.items() if isinstance(v, (int, float))}
        if keys is None:
            keys = next((group for group in DEFAULT_PLOT_KEYS if recorded & set(group)), DEFAULT_PLOT_KEYS[0])
        kept = [k for k in keys if any(k in r for r in self.records)]
        if not kept:
            raise ValueError(f"keys: none of {list(keys)!r} were recorded; numeric columns of this history: "
                             f"{sorted(recorded)}")
        axes = panel_axes(ax, len(kept))
        xs = self.column(x) if any(x in r for r in self.records) else np.arange(len(self))
        for panel, key in zip(axes, kept):
            ys = self.column(key)
            sparse = np.isnan(np.asarray(ys, dtype=float)).mean() > 0.5  # measured on few steps: mark where
            panel.plot(*finite_points(xs, ys), lw=1.2, marker="." if sparse else None)
            _style_panel(panel, key, ys, x)
        return finish_axes(axes, path, title, created=ax is None)

    def _plot_per_epoch(self, path: str | Path | None, keys: Sequence[str] | None, title: str | None,
                        ax: Any) -> Any:
        """:meth:`plot` of the :meth:`per_epoch` means: a line over the training epochs, the polish (if any)
        as a marked point after them."""
        table = self.per_epoch()
        kept = [k for k in (keys or ("f", "V", "V_exact")) if k in table.columns]
        if not kept:
            raise ValueError(f"keys: none of {list(keys or ())!r} is a numeric column of the epochs; columns: "
                             f"{sorted(c for c in table.columns if c not in ('phase', 'steps', 'iteration'))}")
        axes = panel_axes(ax, len(kept))
        train, other = table[table["phase"] == "train"], table[table["phase"] != "train"]
        for panel, key in zip(axes, kept):
            panel.plot(train.index, train[key], marker=".", lw=1.2, label="epoch mean")
            for phase, rows in other.groupby("phase"):
                panel.plot(rows.index, rows[key], marker="s", ls="none", label=f"{phase} (mean)")
            if len(other):
                panel.legend(fontsize="small")
            _style_panel(panel, key, table[key].to_numpy(dtype=float), "epoch")
        return finish_axes(axes, path, title, created=ax is None)


#: Panel titles of :meth:`History.plot` for the common keys (others are titled by their key).
_PANEL_TITLES = {"f": "objective (loss)", "V": "violation (surrogate)", "V_exact": "violation (exact)",
                 "P": "penalty (weighted sum of the terms)",
                 "alpha": "step size", "beta": "learning rate", "tau": "merit parameter", "score": "learner score",
                 "V_targets": "violation of the targets", "V_predictions": "violation of the predictions"}


def _style_panel(panel: Any, key: str, ys: np.ndarray, x: str) -> None:
    """Title, x label and grid of one panel; violations on a symmetric-log scale (0 and small values show)."""
    if key.startswith("V") and np.nanmax(ys, initial=0) > 0:
        panel.set_yscale("symlog", linthresh=1e-4)
    if key.startswith("V"):  # a violation is >= 0: no negative part of the axis
        panel.set_ylim(bottom=0.0)
    panel.set_xlabel(x)
    panel.set_title(_PANEL_TITLES.get(key, key))
    panel.grid(alpha=0.3)


def _jsonable(x: Any):
    if isinstance(x, (np.floating, np.integer)):
        return x.item()
    if isinstance(x, np.ndarray):
        return x.tolist()
    return str(x)


#: Keys of :attr:`FitResult.info` that every engine fills in the same way (where it applies).
INFO_FEASIBLE = "feasible"
INFO_VIOLATION = "violation"
INFO_C_EXACT = "c_exact"
INFO_ROW_NAMES = "row_names"
INFO_UNMET_ROWS = "unmet_rows"
INFO_STATIONARITY = "stationarity"
INFO_RETURNED_ITERATION = "returned_iteration"
INFO_RELAXED_STEPS = "relaxed_steps"
INFO_COMPLEMENTARITY = "complementarity"
INFO_BINDING_ROWS = "binding_rows"


@dataclass
class FitResult:
    """What an engine's ``fit`` returns: the model (trained in place), its :class:`History`, a
    ``status`` ("max_epochs", "converged", "stopped_by_callback", "diverged", ...), whether it
    ``converged`` within the engine's tolerances, and ``info``, read through the properties below
    the same way for every engine (None where an engine has no such notion)."""

    model: Any
    history: History
    status: str
    converged: bool
    info: dict = field(default_factory=dict)

    def _optional(self, key: str, kind: type) -> Any:
        """``info[key]`` as ``kind``, or None when the engine does not report it."""
        value = self.info.get(key)
        return None if value is None else kind(value)

    @property
    def feasible(self) -> bool | None:
        """The returned model meets every bound on all training rows (exact measure)."""
        return self._optional(INFO_FEASIBLE, bool)

    @property
    def violation(self) -> float | None:
        """Total exact violation of the returned model on the training rows."""
        return self._optional(INFO_VIOLATION, float)

    @property
    def c_exact(self) -> list[float]:
        """Exact constraint rows of the returned model (empty without constraints)."""
        return list(self.info.get(INFO_C_EXACT, []))

    @property
    def row_names(self) -> list[str]:
        """Names of the constraint rows, in the order of :attr:`c_exact`."""
        return list(self.info.get(INFO_ROW_NAMES, []))

    @property
    def unmet_rows(self) -> list[str]:
        """The rows the returned model violates, each with its value and bound (empty when
        every bound is met)."""
        return list(self.info.get(INFO_UNMET_ROWS, []))

    @property
    def stationarity(self) -> float | None:
        """The engine's stationarity residual at the returned model (KKT residual for SQP,
        max-abs gradient of the objective for the first-order engines)."""
        return self._optional(INFO_STATIONARITY, float)

    @property
    def complementarity(self) -> float | None:
        """KKT complementarity at the returned model, ``max_i |y_i| dist(c_i, active side)``
        (SQP: its unit-metric QP on all training rows; None for the other engines)."""
        return self._optional(INFO_COMPLEMENTARITY, float)

    @property
    def binding_rows(self) -> list[str] | None:
        """The constraint rows that bind at the returned model: in the active set of the
        SQP's unit-metric QP on all training rows (their bound costs loss; loosening it would
        lower the loss). None for the engines without an active set."""
        value = self.info.get(INFO_BINDING_ROWS)
        return None if value is None else list(value)

    @property
    def returned_iteration(self) -> int | None:
        """Iteration of the returned (best) iterate."""
        return self._optional(INFO_RETURNED_ITERATION, int)

    @property
    def relaxed_steps(self) -> int:
        """Iterations whose linearised constraints had no solution (SQP; 0 elsewhere)."""
        return int(self.info.get(INFO_RELAXED_STEPS, 0))
