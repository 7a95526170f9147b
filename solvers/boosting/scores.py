"""The model a boosting fit returns: :class:`BoostedScores`, gradient-boosted trees as a torch module.

The engines and the estimators treat a model as ``out = model(X)``, one raw score per row, with
its state in tensors (``state_dict``): that is how predictions, the exact measures, save/load and
pickling work for every model. :class:`BoostedScores` keeps a LightGBM model in that form: the
text dump of its trees as a ``uint8`` buffer ``trees`` and a constant ``offset`` buffer, and
computes ``out = offset + sum_k tree_k(X)`` (LightGBM's raw score). It has no trainable
parameters; the trees are grown by :class:`solvers.boosting.BoostedSQP`.
"""

from __future__ import annotations

import hashlib
import weakref
from typing import Any

import numpy as np
import torch
from torch import nn

__all__ = ["BoostedScores"]


def _as_bytes(text: str) -> torch.Tensor:
    """The UTF-8 bytes of ``text`` as a ``uint8`` tensor."""
    return torch.from_numpy(np.frombuffer(text.encode("utf-8"), dtype=np.uint8).copy())


def _rows_key(x: np.ndarray) -> tuple:
    """What :class:`BoostedScores` remembers rows by: their shape and a digest of their float64 bytes."""
    return x.shape, hashlib.blake2b(x.data, digest_size=16).digest()


class BoostedScores(nn.Module):
    """Raw scores ``out_i = offset + sum_k tree_k(x_i)`` of boosted trees, shape ``(n,)``, float64.

    Parameters
    ----------
    model_string : str, default ""
        A LightGBM model as ``lightgbm.Booster.model_to_string()`` writes it; ``""``: no tree
        (the model is the constant ``offset``).
    offset : float, default 0.0
        Constant added to the trees' raw score: the fit's starting constant (LightGBM does not
        store a training ``init_score`` in the model) plus any constant shift of the end-game.

    Notes
    -----
    Both are buffers (``trees``, ``offset``), so ``state_dict``/``load_state_dict`` carry the model
    (a saved ``trees`` buffer of another length replaces the current one). The output is float64
    whatever the dtype of ``X``: a row's hard prediction ``out > 0`` then does not depend on a
    float32 rounding of its score. Row ``i`` of the output depends on row ``i`` of ``X`` alone.
    """

    rowwise = True

    def __init__(self, model_string: str = "", offset: float = 0.0) -> None:
        super().__init__()
        self.register_buffer("trees", _as_bytes(model_string))
        self.register_buffer("offset", torch.tensor(float(offset), dtype=torch.float64))
        self._booster: Any = None
        self._booster_of: torch.Tensor | None = None
        self._memo: tuple | None = None  # (key of the last rows scored, their raw scores)
        self._memo_source: tuple | None = None  # (weak reference to the last input tensor, its version, key)

    @property
    def model_string(self) -> str:
        """The LightGBM text dump of the trees (``""`` without trees)."""
        return bytes(self.trees.cpu().numpy().tobytes()).decode("utf-8")

    @property
    def booster(self) -> Any:
        """The ``lightgbm.Booster`` of :attr:`model_string` (None without trees), built once per buffer."""
        if self.trees.numel() == 0:
            return None
        if self._booster is None or self._booster_of is not self.trees:
            import lightgbm

            self._booster = lightgbm.Booster(model_str=self.model_string)
            self._booster_of, self._memo, self._memo_source = self.trees, None, None
        return self._booster

    @property
    def n_trees(self) -> int:
        """Number of boosting rounds in the model."""
        booster = self.booster
        return 0 if booster is None else int(booster.current_iteration())

    def forward(self, X: torch.Tensor) -> torch.Tensor:
        if X.dim() != 2:
            raise ValueError(f"X: expected a 2-D feature matrix, got shape {tuple(X.shape)}")
        out = self._raw_scores(X) + self.offset.detach().cpu().double()
        return out.to(X.device)

    def remember(self, X: torch.Tensor, raw: torch.Tensor, checked_rows: int = 256) -> bool:
        """Take ``raw`` as the trees' raw scores of the rows ``X`` (what :meth:`forward` adds ``offset`` to)
        without a pass of every row through every tree: a boosting fit's running scores of its training rows,
        which LightGBM sums tree by tree from 0 in the order of its prediction, so they are the same numbers
        bit for bit (while no tree was rolled back). Checked against the prediction of up to ``checked_rows``
        evenly spaced rows; on any difference nothing is remembered. Whether it was."""
        booster = self.booster
        raw = raw.detach().cpu().to(torch.float64).reshape(-1)
        if booster is None or X.dim() != 2 or raw.shape[0] != X.shape[0] or X.shape[0] == 0:
            return False
        x = np.ascontiguousarray(X.detach().cpu().numpy(), dtype=np.float64)
        rows = np.unique(np.linspace(0, x.shape[0] - 1, min(int(checked_rows), x.shape[0])).astype(np.int64))
        probe = np.asarray(booster.predict(x[rows], raw_score=True), dtype=np.float64).reshape(-1)
        if not np.array_equal(probe, raw.numpy()[rows]):
            return False
        key = _rows_key(x)
        self._memo = (key, raw.clone())
        self._memo_source = (weakref.ref(X), X._version, key)
        return True

    def _raw_scores(self, X: torch.Tensor) -> torch.Tensor:
        """The trees' raw score of the rows ``X`` (float64). The last answer is remembered with a
        digest of the rows' float64 bytes: evaluating a fit (exact measures, diagnostics) scores the
        same rows several times, and hashing them costs a small part of a pass through hundreds of
        trees. The same tensor again, unmodified (its ``_version``), reuses the last digest without
        hashing."""
        booster = self.booster
        if booster is None or X.shape[0] == 0:
            return torch.zeros(X.shape[0], dtype=torch.float64)
        source = getattr(self, "_memo_source", None)  # absent from a model pickled before it existed
        if source is not None and source[0]() is X and source[1] == X._version and self._memo is not None \
                and self._memo[0] == source[2]:
            return self._memo[1].clone()
        x = np.ascontiguousarray(X.detach().cpu().numpy(), dtype=np.float64)
        key = _rows_key(x)
        self._memo_source = (weakref.ref(X), X._version, key)
        if self._memo is not None and self._memo[0] == key:
            return self._memo[1].clone()
        raw = torch.from_numpy(np.asarray(booster.predict(x, raw_score=True), dtype=np.float64).reshape(-1))
        self._memo = (key, raw)
        return raw.clone()

    def _load_from_state_dict(self, state_dict: dict, prefix: str, *args: Any, **kwargs: Any) -> None:
        """Take a saved ``trees`` buffer of any length (the model of another fit), then load as usual."""
        saved = state_dict.get(prefix + "trees")
        if isinstance(saved, torch.Tensor) and saved.shape != self.trees.shape:
            self.trees = torch.zeros_like(saved, dtype=torch.uint8)
        super()._load_from_state_dict(state_dict, prefix, *args, **kwargs)
        self._booster, self._booster_of, self._memo = None, None, None  # the buffer was written in place
        self._memo_source = None

    def __getstate__(self) -> dict:
        state = super().__getstate__() if hasattr(super(), "__getstate__") else self.__dict__
        state = dict(state)
        state["_booster"], state["_booster_of"], state["_memo"] = None, None, None  # rebuilt from the buffer
        state["_memo_source"] = None  # a weak reference does not pickle
        return state

    def extra_repr(self) -> str:
        return f"n_trees={self.n_trees}, offset={float(self.offset):.6g}"
