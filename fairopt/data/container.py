"""The :class:`FairData` container; its assembly from a DataFrame is :mod:`fairopt.data.assembly`."""

from __future__ import annotations

import logging
from typing import Any, Mapping, Sequence

import numpy as np
import pandas as pd
import torch

from fairopt._validation import check_same_length, check_sample_weight, column_1d, to_numpy
from fairopt.data.frames import as_name_list
from fairopt.data.assembly import SENSITIVE_KINDS, TASKS, build_fair_data, coerce_inputs
from fairopt.data.preprocessing import Preprocessor
from fairopt.data.splitting import check_test_size, stratified_split_indices

__all__ = ["TASKS", "SENSITIVE_KINDS", "FairData"]

logger = logging.getLogger("fairopt.data")  # one logger for the whole data layer




# --------------------------------------------------------------------------------------
# FairData
# --------------------------------------------------------------------------------------
class FairData:
    """Rows for fair learning: inputs, target, typed sensitive features, cells, exposure, weights.

    Build it with :meth:`from_frame` or :meth:`from_arrays`; the constructor only checks the contract.

    Attributes
    ----------
    X : torch.Tensor, float32 (n, p)
    y : torch.Tensor, float32 (n,)
    task : {"binary", "regression", "poisson"}
    sensitive : dict name -> tensor (binary float32 0/1, categorical int64 codes,
        continuous float32 raw values)
    sensitive_kinds : dict name -> kind; sensitive_levels : dict name -> level labels
        (binary: [label of 0, label of 1]; continuous: [])
    sensitive_names : list of the sensitive feature names, in order
    cells : torch.Tensor, int64 (n,); n_cells : int; cell_levels : list of tuples, the
        level labels of each cell (one per binary/categorical feature, in order)
    exposure : torch.Tensor, float32 (n,) or None; exposure_name : its column
    weights : torch.Tensor, float64 (n,) or None
        Per-row weights ``w_i >= 0``: every mean over rows in training and the constraints becomes
        ``sum_i w_i v_i / sum_i w_i`` (integer weights act as repeated rows). All-equal weights are stored
        as None, so they give the unweighted results bit for bit. ``weights_name``: their column or None.
    feature_names : list of str (columns of X); feature_columns : raw columns feeding X
    preprocessor : the fitted :class:`Preprocessor` that produced X
    target_name : str; include_sensitive : bool
    frame : the raw rows (pandas DataFrame), indexed lazily
    """

    # class defaults: objects pickled before row weights existed read as unweighted
    weights: torch.Tensor | None = None
    weights_name: str | None = None

    def __init__(
        self,
        X: torch.Tensor,
        y: torch.Tensor,
        task: str,
        sensitive: Mapping[str, torch.Tensor],
        sensitive_kinds: Mapping[str, str],
        sensitive_levels: Mapping[str, list],
        cells: torch.Tensor,
        n_cells: int,
        exposure: torch.Tensor | None = None,
        feature_names: Sequence[str] | None = None,
        *,
        preprocessor: Preprocessor | None = None,
        target_name: str = "y",
        include_sensitive: bool = False,
        cell_levels: Sequence[tuple] | None = None,
        exposure_name: str | None = None,
        feature_columns: Sequence[str] | None = None,
        frame: pd.DataFrame | None = None,
        cell_keys: np.ndarray | None = None,
        weights: Any = None,
        weights_name: str | None = None,
    ) -> None:
        self.X = X
        self.y = y
        self.task = task
        self.sensitive = dict(sensitive)
        self.sensitive_names = list(sensitive)
        self.sensitive_kinds = dict(sensitive_kinds)
        self.sensitive_levels = {k: list(v) for k, v in sensitive_levels.items()}
        self.cells = cells
        self.n_cells = int(n_cells)
        self.exposure = exposure
        self.feature_names = list(feature_names) if feature_names is not None else [f"x{j}" for j in range(X.shape[1])]
        self.preprocessor = preprocessor
        self.target_name = target_name
        self.include_sensitive = bool(include_sensitive)
        self.cell_levels = list(cell_levels) if cell_levels is not None else [()] * self.n_cells
        self.exposure_name = exposure_name
        self.feature_columns = list(feature_columns) if feature_columns is not None else list(self.feature_names)
        self._source = frame
        self._rows = torch.arange(X.shape[0])  # positions in ``frame``; composed by subset()
        self._frame_cache = frame
        self._cell_keys = cell_keys
        self._check_contract()
        self.weights = _row_weights(weights, X.shape[0])
        self.weights_name = weights_name if self.weights is not None else None

    def _check_contract(self) -> None:
        """Shapes and dtypes of the shared data contract."""
        n = self.X.shape[0] if self.X.dim() == 2 else -1
        if self.X.dim() != 2 or self.X.dtype != torch.float32:
            raise ValueError(f"X: expected a float32 tensor (n, p), got {self.X.dtype} of shape {tuple(self.X.shape)}")
        if self.task not in TASKS:
            raise ValueError(f"task: expected one of {TASKS}, got {self.task!r}")
        if self.y.shape != (n,) or self.y.dtype != torch.float32:
            raise ValueError(f"y: expected a float32 tensor of shape ({n},), got {self.y.dtype} {tuple(self.y.shape)}")
        if self.cells.shape != (n,) or self.cells.dtype != torch.int64:
            raise ValueError(f"cells: expected an int64 tensor of shape ({n},), "
                             f"got {self.cells.dtype} {tuple(self.cells.shape)}")
        if self.exposure is not None and self.exposure.shape != (n,):
            raise ValueError(f"exposure: expected shape ({n},), got {tuple(self.exposure.shape)}")
        if len(self.feature_names) != self.X.shape[1]:
            raise ValueError(f"feature_names: {len(self.feature_names)} names for {self.X.shape[1]} columns of X")
        expected_dtype = {"binary": torch.float32, "categorical": torch.int64, "continuous": torch.float32}
        for name, tensor in self.sensitive.items():
            kind = self.sensitive_kinds.get(name)
            if kind not in expected_dtype:
                raise ValueError(f"sensitive_kinds: {name!r} has kind {kind!r}; expected one of {SENSITIVE_KINDS}")
            if tensor.shape != (n,) or tensor.dtype != expected_dtype[kind]:
                raise ValueError(f"sensitive: {name!r} ({kind}) must be {expected_dtype[kind]} of shape ({n},), "
                                 f"got {tensor.dtype} {tuple(tensor.shape)}")

    # -- construction ----------------------------------------------------------------------
    @classmethod
    def from_frame(
        cls,
        df: pd.DataFrame,
        target: str,
        sensitive: str | Sequence[str],
        features: Sequence[str] | None = None,
        categorical: Sequence[str] | None = None,
        task: str = "binary",
        exposure: str | None = None,
        sensitive_kinds: Mapping[str, str] | None = None,
        include_sensitive: bool = False,
        preprocessor: Preprocessor | None = None,
        weights: Any = None,
    ) -> "FairData":
        """Build a :class:`FairData` from a DataFrame.

        Parameters
        ----------
        df : pandas.DataFrame
            The raw rows (kept, unmodified, as :attr:`frame`).
        target : str
            Target column: 0/1 (binary), non-negative integer counts (poisson) or numbers (regression).
        sensitive : str or list of str
            Sensitive columns, in order (the order of :attr:`cells`' mixed radix).
        features : list of str, optional
            Input columns; None: every column but the target and the exposure. Sensitive columns are
            added when ``include_sensitive`` and removed otherwise.
        categorical : list of str, optional
            Columns to one-hot encode (a numeric sensitive column listed here is inferred categorical).
            Object, string, category and bool columns always are.
        task : {"binary", "regression", "poisson"}
        exposure : str, optional
            Exposure column (time at risk, > 0), never an input.
        sensitive_kinds : dict name -> {"binary", "categorical", "continuous"}, optional
            Declared kinds; otherwise 2 distinct values -> binary (numeric {0,1} kept, else sorted levels),
            numeric with more values -> continuous, the rest categorical.
        include_sensitive : bool, default False
            Whether the sensitive columns are model inputs. By default the constraints use them and the
            model does not (reading sex or race is disparate treatment in many jurisdictions).
        preprocessor : Preprocessor, optional
            A fitted one encodes X as it is (e.g. test data); an unfitted or missing one is fitted on ``df``.
            ``Preprocessor(missing="keep")`` keeps missing input values (NaN, for boosted trees) where the
            default raises.
        weights : str or array (n,), optional
            Per-row weights (:attr:`weights`): a column of ``df`` (never an input) or an array; finite,
            ``>= 0``, not all 0. The input standardisation stays unweighted.

        Raises
        ------
        ValueError
            Unknown columns, NaN/inf in used columns (inf only in the inputs of a ``missing="keep"``
            preprocessor), a target that does not fit the task, non-positive
            exposure, an unknown task or kind, a sensitive feature with fewer than 2 groups, an empty frame
            or invalid weights, each naming the argument and the value.
        """
        return build_fair_data(
            cls, df, target=target, sensitive=sensitive, features=features, categorical=categorical,
            task=task, exposure=exposure, sensitive_kinds=sensitive_kinds,
            include_sensitive=include_sensitive, preprocessor=preprocessor, reference=None, weights=weights,
        )

    @classmethod
    def from_arrays(
        cls,
        X: Any,
        y: Any,
        sensitive: Mapping[str, Any],
        task: str = "binary",
        *,
        feature_names: Sequence[str] | None = None,
        exposure: Any = None,
        sensitive_kinds: Mapping[str, str] | None = None,
        include_sensitive: bool = False,
        categorical: Sequence[str] | None = None,
        preprocessor: Preprocessor | None = None,
        target_name: str = "y",
        sample_weight: Any = None,
    ) -> "FairData":
        """Build a :class:`FairData` from numpy, torch or pandas arrays (through :meth:`from_frame`).

        Parameters
        ----------
        X : array (n, p)
            Model inputs (standardised by the preprocessor like any numeric column).
        y : array (n,)
        sensitive : dict name -> array (n,)
            Sensitive features, kept apart from ``X`` unless ``include_sensitive``.
        task, sensitive_kinds, categorical, preprocessor : as in :meth:`from_frame`.
        feature_names : names of the columns of ``X`` (default ``x0 .. x{p-1}``).
        exposure : array (n,), optional
        target_name : name given to the target column.
        sample_weight : array (n,), optional
            Per-row weights (``weights=`` of :meth:`from_frame`).
        """
        X_np = to_numpy(X)
        if X_np.ndim != 2:
            raise ValueError(f"X: expected a 2-D array (n, p), got shape {X_np.shape}")
        names = [f"x{j}" for j in range(X_np.shape[1])] if feature_names is None else [str(n) for n in feature_names]
        if len(names) != X_np.shape[1]:
            raise ValueError(f"feature_names: {len(names)} names for {X_np.shape[1]} columns of X")
        if not isinstance(sensitive, Mapping):
            raise ValueError(f"sensitive: expected a dict name -> array, got {type(sensitive).__name__}")
        columns: dict[str, np.ndarray] = {"X": X_np, "y": column_1d(y, "y")}
        columns.update({f"sensitive[{k}]": column_1d(v, f"sensitive[{k}]") for k, v in sensitive.items()})
        if exposure is not None:
            columns["exposure"] = column_1d(exposure, "exposure")
        if sample_weight is not None and not np.isscalar(sample_weight):
            columns["sample_weight"] = column_1d(sample_weight, "sample_weight")
        check_same_length(**columns)
        exposure_name = "exposure" if exposure is not None else None
        all_names = names + [target_name] + [str(k) for k in sensitive] + ([exposure_name] if exposure_name else [])
        as_name_list(all_names, "feature_names/sensitive/target_name")
        df = pd.DataFrame(X_np, columns=names)
        df[target_name] = columns["y"]
        for key, values in sensitive.items():
            df[str(key)] = columns[f"sensitive[{key}]"]
        if exposure_name:
            df[exposure_name] = columns["exposure"]
        return cls.from_frame(
            df, target=target_name, sensitive=[str(k) for k in sensitive], features=names,
            categorical=categorical, task=task, exposure=exposure_name, sensitive_kinds=sensitive_kinds,
            include_sensitive=include_sensitive, preprocessor=preprocessor,
            weights=check_sample_weight(sample_weight, len(X_np)),
        )

    def transform(self, df: pd.DataFrame, weights: Any = None) -> "FairData":
        """Encode new rows (test or user data) exactly like this data.

        Same input columns, fitted :attr:`preprocessor`, sensitive codes and cell ids (an unseen combination
        gets a new id, logged; an unknown sensitive value is a ValueError). ``df`` must contain the target
        (and exposure). ``weights`` as in :meth:`from_frame`; None takes :attr:`weights_name` when ``df`` has it.
        """
        if weights is None and self.weights_name is not None and self.weights_name in df.columns:
            weights = self.weights_name
        return build_fair_data(
            type(self), df, target=self.target_name, sensitive=self.sensitive_names,
            features=self.feature_columns, categorical=None, task=self.task, exposure=self.exposure_name,
            sensitive_kinds=self.sensitive_kinds, include_sensitive=self.include_sensitive,
            preprocessor=self.preprocessor, reference=self, weights=weights,
        )

    def with_preprocessor(self, preprocessor: Preprocessor) -> "FairData":
        """The same rows with ``X`` recomputed from :attr:`frame` by a fitted ``preprocessor``."""
        if not isinstance(preprocessor, Preprocessor) or not preprocessor.is_fitted:
            raise ValueError(f"preprocessor: expected a fitted Preprocessor, got {preprocessor!r}")
        frame = self._require_frame("with_preprocessor")
        X, names = preprocessor.transform(self._inputs(frame, preprocessor))
        return self._replace(X=torch.from_numpy(X), feature_names=names, preprocessor=preprocessor,
                             feature_columns=list(preprocessor.columns_))

    def _inputs(self, frame: pd.DataFrame, preprocessor: Preprocessor | None = None) -> pd.DataFrame:
        """``frame`` with numbers-as-text input columns made numeric, as when this data was built."""
        fitted = self.preprocessor if preprocessor is None else preprocessor
        return coerce_inputs(frame, list(fitted.columns_), list(self.sensitive_names), [], fitted)

    # -- views -------------------------------------------------------------------------
    def __len__(self) -> int:
        return int(self.X.shape[0])

    @property
    def n_features(self) -> int:
        """Number of model inputs (columns of X)."""
        return int(self.X.shape[1])

    @property
    def strata(self) -> torch.Tensor:
        """Groups for balanced sampling: the intersection :attr:`cells`."""
        return self.cells

    @property
    def frame(self) -> pd.DataFrame | None:
        """The raw rows behind this data (computed on first access for subsets)."""
        if self._source is None:
            return None
        if self._frame_cache is None:
            self._frame_cache = self._source.iloc[self._rows.numpy()]
        return self._frame_cache

    def _require_frame(self, operation: str) -> pd.DataFrame:
        frame = self.frame
        if frame is None:
            raise ValueError(f"{operation}: this FairData has no raw frame (build it with from_frame/from_arrays)")
        return frame

    def with_target(self, y: torch.Tensor) -> "FairData":
        """The same rows with the target ``y`` (a tensor of the same length; no validation: the caller encodes
        it, e.g. an estimator's ``pos_label`` that makes the other class the positive one)."""
        if len(y) != len(self):
            raise ValueError(f"y: {len(y)} values for {len(self)} rows")
        return self._replace(y=y)

    def with_inputs(self, X: torch.Tensor, feature_names: Sequence[str]) -> "FairData":
        """The same rows with other model inputs ``X`` (float32 (n, k), e.g. whitened coordinates of these
        inputs) named ``feature_names``; target, sensitive features, cells, exposure and weights are shared.
        The preprocessor and raw columns still describe the original inputs: for training only."""
        if X.dim() != 2 or X.dtype != torch.float32 or X.shape[0] != len(self):
            raise ValueError(f"X: expected a float32 (n, k) tensor with n = {len(self)}, got {tuple(X.shape)} "
                             f"{X.dtype}")
        names = [str(name) for name in feature_names]
        if len(names) != X.shape[1]:
            raise ValueError(f"feature_names: {len(names)} names for {X.shape[1]} columns of X")
        return self._replace(X=X, feature_names=names)

    def _replace(self, **changes: Any) -> "FairData":
        """A shallow copy with some attributes replaced (no validation: internal use)."""
        new = object.__new__(type(self))
        new.__dict__.update(self.__dict__)
        new.__dict__.update(changes)
        return new

    def subset(self, idx: Any) -> "FairData":
        """Rows ``idx`` (positions, boolean mask or slice) as a FairData, by tensor indexing only.

        Levels, kinds and cell ids are those of the full data; a subset may miss groups or cells.
        """
        return self._take(_as_index(idx, len(self)))

    def _take(self, index: Any, **changes: Any) -> "FairData":
        row_index = index.cpu() if isinstance(index, torch.Tensor) else index
        fast = _selectable(index)
        fields = {
            "X": _take_rows(self.X, index, fast),
            "y": _take_rows(self.y, index, fast),
            "sensitive": {k: _take_rows(v, index, fast) for k, v in self.sensitive.items()},
            "cells": _take_rows(self.cells, index, fast),
            "exposure": None if self.exposure is None else _take_rows(self.exposure, index, fast),
            "weights": None if self.weights is None else _take_rows(self.weights, index, fast),
            "_rows": _take_rows(self._rows, row_index, fast),
            "_frame_cache": None,
        }
        fields.update(changes)
        return self._replace(**fields)

    def to(self, device: torch.device | str) -> "FairData":
        """A copy with every tensor on ``device`` (row bookkeeping stays on the CPU)."""
        return self._replace(
            X=self.X.to(device), y=self.y.to(device), cells=self.cells.to(device),
            sensitive={k: v.to(device) for k, v in self.sensitive.items()},
            exposure=None if self.exposure is None else self.exposure.to(device),
            weights=None if self.weights is None else self.weights.to(device),
        )

    def split(self, test_size: float = 0.2, seed: int = 0, stratify: bool = True) -> tuple["FairData", "FairData"]:
        """Deterministic train/test split with the preprocessor re-fitted on the training rows.

        ``stratify=True`` stratifies by target x cell (binary) or cell, falling back to the target, then to
        none when a stratum has fewer than 2 rows (:func:`stratified_split_indices`). A fresh clone of
        :attr:`preprocessor` fitted on the training rows encodes both parts, so no test statistic leaks into
        X; codes, cells and weights are kept.

        Returns
        -------
        train, test : FairData
        """
        test_size = check_test_size(test_size)
        strata = self.split_strata() if stratify else np.zeros(len(self), dtype=np.int64)
        train_idx, test_idx = stratified_split_indices(strata, test_size, seed)
        if self.preprocessor is None or self._source is None:
            logger.info("split: no raw frame or preprocessor; X is subset without re-fitting")
            return self.subset(torch.from_numpy(train_idx)), self.subset(torch.from_numpy(test_idx))
        frame = self._inputs(self.frame)
        preprocessor = self.preprocessor.clone()
        X_train, names = preprocessor.fit_transform(frame.iloc[train_idx])
        X_test, _ = preprocessor.transform(frame.iloc[test_idx])
        common = {"preprocessor": preprocessor, "feature_names": names}
        train = self._take(torch.from_numpy(train_idx), X=torch.from_numpy(X_train).to(self.X.device), **common)
        test = self._take(torch.from_numpy(test_idx), X=torch.from_numpy(X_test).to(self.X.device), **common)
        return train, test

    def encoded_with(self, preprocessor: Preprocessor) -> "FairData":
        """These rows with their inputs encoded by another fitted ``preprocessor`` (the one a model was trained
        with, e.g. an estimator's ``preprocessor_`` after its validation part re-fitted it on fewer rows);
        target, sensitive codes, cells and weights are kept. The data itself when ``preprocessor`` is its
        own; ValueError without the raw frame to encode."""
        if preprocessor is self.preprocessor:
            return self
        if self.preprocessor is None or self._source is None:
            raise ValueError("encoded_with: this FairData keeps no raw input columns to encode (it was built "
                             "with the constructor); build it with FairData.from_frame or from_arrays")
        X, names = preprocessor.transform(self._inputs(self.frame, preprocessor))
        everything = torch.arange(len(self))
        return self._take(everything, X=torch.from_numpy(X).to(self.X.device), preprocessor=preprocessor,
                          feature_names=names)

    def split_strata(self) -> np.ndarray:
        """The strata of a stratified split (:meth:`split`, the estimators' validation part, early stopping of
        boosted trees): target x cell for a binary target, else the cell; the coarser target alone (then none)
        where a stratum would hold fewer than 2 rows. One integer code per row."""
        cells = self.cells.cpu().numpy()
        candidates: list[tuple[str, np.ndarray]] = []
        if self.task == "binary":
            y = self.y.cpu().numpy().astype(np.int64)
            candidates += [("target x cell", y * self.n_cells + cells), ("target", y)]
        else:
            candidates.append(("cell", cells))
        for label, strata in candidates:
            if np.unique(strata, return_counts=True)[1].min() >= 2:
                logger.debug("split: stratified by %s", label)
                return strata
            logger.info("split: some %s strata have fewer than 2 rows; trying a coarser stratification", label)
        return np.zeros(len(self), dtype=np.int64)

    def __repr__(self) -> str:
        kinds = ", ".join(f"{k}: {v}" for k, v in self.sensitive_kinds.items())
        weighted = "" if self.weights is None else f", weights={self.weights_name or 'array'!r}"
        return (f"FairData(n={len(self)}, p={self.n_features}, task={self.task!r}, target={self.target_name!r}, "
                f"sensitive={{{kinds}}}, n_cells={self.n_cells}, exposure={self.exposure_name!r}{weighted})")


# --------------------------------------------------------------------------------------
# from_frame implementation
# --------------------------------------------------------------------------------------
def _row_weights(weights: Any, n: int) -> torch.Tensor | None:
    """The constructor's ``weights`` as a float64 tensor (:func:`fairopt._validation.check_sample_weight`), or
    None for None and for all-equal weights.
    """
    if weights is None:
        return None
    values = check_sample_weight(weights, n, "weights")
    if values.size == 0 or bool((values == values[0]).all()):
        return None
    tensor = torch.from_numpy(values)
    if isinstance(weights, torch.Tensor):
        tensor = tensor.to(weights.device)
    return tensor


def _selectable(index: Any) -> bool:
    """Whether ``index`` is a 1-D long tensor of non-negative positions (what ``index_select`` takes)."""
    return (isinstance(index, torch.Tensor) and index.dtype == torch.long and index.dim() == 1
            and (index.numel() == 0 or int(index.min()) >= 0))


def _take_rows(values: Any, index: Any, selectable: bool) -> Any:
    """``values[index]`` along the first axis, through ``index_select`` when ``selectable`` (faster than
    advanced indexing).
    """
    if selectable and isinstance(values, torch.Tensor) and index.device == values.device:
        return values.index_select(0, index)
    return values[index]


def _as_index(idx: Any, n: int) -> Any:
    """A row index usable on tensors: long/bool tensor or slice."""
    if isinstance(idx, slice):
        return idx
    if isinstance(idx, (int, np.integer)) and not isinstance(idx, bool):
        return torch.tensor([int(idx)])
    index = idx if isinstance(idx, torch.Tensor) else torch.as_tensor(np.asarray(idx))
    if index.numel() == 0:
        return torch.zeros(0, dtype=torch.long, device=index.device)
    if index.dtype == torch.bool:
        if index.shape != (n,):
            raise ValueError(f"idx: boolean mask of shape {tuple(index.shape)} for {n} rows")
        return index
    if index.dtype.is_floating_point or index.dtype.is_complex:
        raise ValueError(f"idx: expected integer positions or a boolean mask, got dtype {index.dtype}")
    return index.reshape(-1).long()
