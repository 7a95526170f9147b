"""scikit-learn style adapters for torch models (learners for :class:`solvers.MovingTargets`).

Moving Targets ([MT]) refits its learner on new targets through ``fit(X, y)`` and reads
``predict(X)``; :class:`TorchLearner` gives a torch module that interface, trained with Adam on
mini-batches (the [GeDI] App. B.2 protocol: default Adam, batches of 128, 200 epochs).

Regression targets are standardised one way throughout the library (here and in
:class:`fairopt.FairRegressor`): the module is ``Sequential(net, OutputScale(sd, mean))``
(:func:`scaled_output`), whose output is in the units of ``y`` (so are constraints and bounds),
and the loss :func:`solvers.losses.scaled_mse_loss` ``= mean((out - y)^2) / sd^2`` is the mean
squared error of ``net(x)`` against ``(y - mean) / sd``.
"""

from __future__ import annotations

from typing import Any, Callable

import numpy as np
import torch
from torch import nn

from fairopt._validation import (check_choice, check_flag, check_sample_weight, check_seed, nonnegative_float,
                                 positive_float, positive_int, to_numpy)
from solvers.losses import bce_loss, scaled_mse_loss
from solvers.problem import row_outputs

__all__ = ["TorchLearner", "LEARNER_TASKS", "OutputScale", "scaled_output", "target_statistics"]

#: Accepted values of ``TorchLearner(task=...)``.
LEARNER_TASKS: tuple[str, ...] = ("classification", "regression")


class OutputScale(nn.Module):
    """``out -> scale * out + shift`` with fixed buffers: a standardised output in the units of ``y``.
    ``affine_output = True`` declares it to the engine's curvature metric (:mod:`solvers.curvature`)."""

    affine_output = True

    def __init__(self, scale: float = 1.0, shift: float = 0.0) -> None:
        super().__init__()
        self.register_buffer("scale", torch.tensor(float(scale)))
        self.register_buffer("shift", torch.tensor(float(shift)))

    def forward(self, out: torch.Tensor) -> torch.Tensor:
        return out * self.scale + self.shift

    def set(self, scale: float, shift: float) -> None:
        """Replace the scale and shift in place."""
        with torch.no_grad():
            self.scale.fill_(float(scale))
            self.shift.fill_(float(shift))


def target_statistics(y: Any, weights: Any = None) -> tuple[float, float]:
    """``(mean, sd)`` of a regression target in float64 (population sd; 1 for a constant target so
    dividing by it is safe).

    With ``weights`` ``w``: ``m = sum_i w_i y_i / sum_i w_i`` and
    ``sd = sqrt(sum_i w_i (y_i - m)^2 / sum_i w_i)``, the statistics of row ``i`` repeated ``w_i`` times.
    """
    values = torch.as_tensor(np.asarray(to_numpy(y), dtype=np.float64).reshape(-1))
    if weights is not None:
        w = torch.as_tensor(np.asarray(to_numpy(weights), dtype=np.float64).reshape(-1))
        mean = float((w * values).sum() / w.sum())
        sd = float(torch.sqrt((w * (values - mean) ** 2).sum() / w.sum())) if values.numel() > 1 else 0.0
        return mean, (sd if sd > 0 and np.isfinite(sd) else 1.0)
    mean = float(values.mean())
    sd = float(values.std(unbiased=False)) if values.numel() > 1 else 0.0
    return mean, (sd if sd > 0 and np.isfinite(sd) else 1.0)


def scaled_output(module: nn.Module, scale: float, shift: float) -> nn.Sequential:
    """``Sequential(module, OutputScale(scale, shift))``: ``module`` predicts the standardised target,
    the result ``y``; train it with :func:`solvers.losses.scaled_mse_loss` ``(scale)``.
    """
    return nn.Sequential(module, OutputScale(scale, shift))


class TorchLearner:
    """A torch module trained and queried like a scikit-learn estimator.

    ``fit(X, y)`` builds ``module_factory(p)`` (unless ``warm_start``) and trains it with Adam for
    ``epochs`` passes of shuffled mini-batches, minimising the binary cross-entropy
    ``mean(log(1 + e^out) - y out)`` (classification) or the mean squared error (regression; with
    ``scale_target`` on the standardised target, module docstring). ``sample_weight`` makes each
    batch loss the weighted mean ``sum_i w_i l_i / sum_i w_i`` and the target statistics weighted.
    Training runs in :func:`torch.random.fork_rng` seeded with ``seed``: the same data and seed give
    the same model, and the global RNG is untouched.

    Parameters
    ----------
    module_factory : callable
        ``module_factory(n_features) -> torch.nn.Module`` with one output per row: a logit
        (classification) or the prediction (regression).
    task : {"classification", "regression"}, default "classification"
    epochs : int, default 200
    batch_size : int, default 128
    lr : float, default 1e-3
        Adam learning rate.
    weight_decay : float, default 0.0
    scale_target : bool, default True
        Regression only: train on the standardised target.
    warm_start : bool, default False
        Continue from the current weights on the next ``fit`` (same number of features).
    seed : int, default 0
    device : str or torch.device, default "cpu"

    Attributes
    ----------
    module_ : torch.nn.Module
        The trained module, predicting in the units of ``y``.
    target_shift_, target_scale_ : float
        Regression with ``scale_target``: mean and sd of the last targets.
    n_features_in_ : int
    classes_ : numpy.ndarray
        ``[0, 1]`` for classification.
    loss_curve_ : list of float
        Mean training loss of every epoch of the last :meth:`fit`.
    """

    def __init__(
        self,
        module_factory: Callable[[int], nn.Module],
        *,
        task: str = "classification",
        epochs: int = 200,
        batch_size: int = 128,
        lr: float = 1e-3,
        weight_decay: float = 0.0,
        scale_target: bool = True,
        warm_start: bool = False,
        seed: int = 0,
        device: str | torch.device = "cpu",
    ) -> None:
        if not callable(module_factory):
            raise ValueError(f"module_factory: expected a callable n_features -> nn.Module, got {module_factory!r}")
        check_choice(task, LEARNER_TASKS, "task")
        scale_target = check_flag(scale_target, "scale_target")
        warm_start = check_flag(warm_start, "warm_start")
        seed = check_seed(seed, allow_none=False, allow_negative=False)
        self.module_factory = module_factory
        self.task = task
        self.epochs = positive_int(epochs, "epochs")
        self.batch_size = positive_int(batch_size, "batch_size")
        self.lr = positive_float(lr, "lr")
        self.weight_decay = nonnegative_float(weight_decay, "weight_decay")
        self.scale_target = scale_target
        self.warm_start = warm_start
        self.seed = int(seed)
        self.device = torch.device(device)

    # ------------------------------------------------------------------ sklearn-like API
    def get_params(self, deep: bool = True) -> dict:
        """Constructor arguments (scikit-learn convention)."""
        return {
            "module_factory": self.module_factory, "task": self.task, "epochs": self.epochs,
            "batch_size": self.batch_size, "lr": self.lr, "weight_decay": self.weight_decay,
            "scale_target": self.scale_target, "warm_start": self.warm_start, "seed": self.seed,
            "device": self.device,
        }

    def set_params(self, **params: Any) -> "TorchLearner":
        """Change constructor arguments (validated as in the constructor)."""
        unknown = sorted(set(params) - set(self.get_params()))
        if unknown:
            raise ValueError(f"params: unknown parameter(s) {unknown}; known: {sorted(self.get_params())}")
        merged = {**self.get_params(), **params}
        factory = merged.pop("module_factory")
        self.__init__(factory, **merged)
        return self

    def fit(self, X: Any, y: Any, sample_weight: Any = None) -> "TorchLearner":
        """Train on ``X`` (n, p) and targets ``y`` (n,), rows weighted by ``sample_weight``; returns ``self``.

        Raises
        ------
        ValueError
            Mismatched shapes, NaN/inf values, non-0/1 classification targets, a module without one
            output per row, invalid weights.
        """
        X_t, y_t = self._inputs(X), self._targets(y)
        if y_t.shape[0] != X_t.shape[0]:
            raise ValueError(f"y: {y_t.shape[0]} targets for {X_t.shape[0]} rows of X")
        weights = check_sample_weight(sample_weight, X_t.shape[0])
        if weights is not None and bool((weights == weights[0]).all()):
            weights = None  # equal weights: the unweighted fit
        w_t = None if weights is None else torch.from_numpy(weights).to(device=self.device, dtype=torch.float32)
        self._set_target_scale(y_t, weights)
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(self.seed)
            module = self._module(X_t.shape[1])
            generator = torch.Generator().manual_seed(self.seed)
            self.loss_curve_ = self._train(module, X_t, y_t, generator, w_t)
        return self

    def decision_function(self, X: Any) -> np.ndarray:
        """Raw module outputs (n,): logits, or predictions in the units of ``y``."""
        self._check_fitted()
        X_t = self._inputs(X)
        if X_t.shape[1] != self.n_features_in_:
            raise ValueError(f"X: expected {self.n_features_in_} features, got {X_t.shape[1]}")
        self.module_.eval()
        with torch.no_grad():
            out = self._forward(self.module_, X_t).double().cpu().numpy()
        return out

    def predict(self, X: Any) -> np.ndarray:
        """Hard labels ``1{logit > 0}`` (int64) for classification, predictions for regression."""
        out = self.decision_function(X)
        return (out > 0).astype(np.int64) if self.task == "classification" else out

    def predict_proba(self, X: Any) -> np.ndarray:
        """``[P(y=0), P(y=1)]`` per row, shape (n, 2), ``P(y=1) = sigmoid(logit)``."""
        if self.task != "classification":
            raise ValueError("predict_proba: only defined for task='classification'")
        p1 = 1.0 / (1.0 + np.exp(-self.decision_function(X)))
        return np.column_stack([1.0 - p1, p1])

    # ------------------------------------------------------------------ pieces
    def _inputs(self, X: Any) -> torch.Tensor:
        array = np.asarray(to_numpy(X), dtype=np.float32)
        if array.ndim != 2 or array.shape[0] == 0:
            raise ValueError(f"X: expected a non-empty 2-D array (n, p), got shape {array.shape}")
        if not np.isfinite(array).all():
            raise ValueError("X: contains NaN or infinite values")
        return torch.from_numpy(np.ascontiguousarray(array)).to(self.device)

    def _targets(self, y: Any) -> torch.Tensor:
        array = np.asarray(to_numpy(y), dtype=np.float64).reshape(-1)
        if not np.isfinite(array).all():
            raise ValueError("y: contains NaN or infinite values")
        if self.task == "classification" and ((array != 0) & (array != 1)).any():
            raise ValueError(f"y: classification needs 0/1 targets, got {array[(array != 0) & (array != 1)][0]!r}")
        return torch.from_numpy(array).to(device=self.device, dtype=torch.float32)

    def _set_target_scale(self, y: torch.Tensor, weights: np.ndarray | None = None) -> None:
        if self.task == "classification":
            self.classes_ = np.array([0, 1])
        if self._scales_target():
            self.target_shift_, self.target_scale_ = target_statistics(y.double().cpu().numpy(), weights)

    def _scales_target(self) -> bool:
        return self.task == "regression" and self.scale_target

    def _module(self, n_features: int) -> nn.Module:
        """The module to train: the current one (warm start, same width) or a new one."""
        current = getattr(self, "module_", None)
        if self.warm_start and current is not None and self.n_features_in_ == n_features:
            if self._scales_target():  # the same net, read in the units of the new targets
                current[-1].set(self.target_scale_, self.target_shift_)
            return current
        module = self.module_factory(n_features)
        if not isinstance(module, nn.Module):
            raise ValueError(f"module_factory: returned {type(module).__name__}, expected a torch.nn.Module")
        if self._scales_target():
            module = scaled_output(module, self.target_scale_, self.target_shift_)
        self.module_ = module.to(self.device)
        self.n_features_in_ = n_features
        return self.module_

    def _forward(self, module: nn.Module, X: torch.Tensor) -> torch.Tensor:
        """``module(X)`` as (n,) (:func:`solvers.problem.row_outputs`)."""
        return row_outputs(module(X), X.shape[0], what="module_factory")

    def _train(self, module: nn.Module, X: torch.Tensor, y: torch.Tensor, generator: torch.Generator,
               weights: torch.Tensor | None = None) -> list[float]:
        """Adam on shuffled mini-batches; returns the (weighted) mean loss of each epoch."""
        if weights is not None:
            loss = bce_loss if self.task == "classification" else scaled_mse_loss(
                self.target_scale_ if self.scale_target else 1.0)
            batch_loss = lambda out, idx: loss(out, _Targets(y[idx], weights[idx]))  # noqa: E731
            mass = lambda idx: float(weights[idx].double().sum())  # noqa: E731
        else:
            if self.task == "classification":
                bce = nn.BCEWithLogitsLoss()
                batch_loss = lambda out, idx: bce(out, y[idx])  # noqa: E731
            else:
                scaled = scaled_mse_loss(self.target_scale_ if self.scale_target else 1.0)
                batch_loss = lambda out, idx: scaled(out, _Targets(y[idx]))  # noqa: E731
            mass = lambda idx: idx.numel()  # noqa: E731
        optimizer = torch.optim.Adam(module.parameters(), lr=self.lr, weight_decay=self.weight_decay)
        module.train()
        n, curve = X.shape[0], []
        total_mass = float(weights.double().sum()) if weights is not None else n
        for _ in range(self.epochs):
            order = torch.randperm(n, generator=generator).to(self.device)
            total = 0.0
            for start in range(0, n, self.batch_size):
                idx = order[start:start + self.batch_size]
                optimizer.zero_grad(set_to_none=True)
                value = batch_loss(self._forward(module, X[idx]), idx)
                value.backward()
                optimizer.step()
                total += float(value.detach()) * mass(idx)
            curve.append(total / total_mass)
        return curve

    def _check_fitted(self) -> None:
        if getattr(self, "module_", None) is None:
            raise RuntimeError("TorchLearner: call fit(X, y) before predicting")

    def __repr__(self) -> str:
        return (f"TorchLearner(task={self.task!r}, epochs={self.epochs}, batch_size={self.batch_size}, "
                f"lr={self.lr:g}, seed={self.seed})")


class _Targets:
    """The ``batch.y`` (and optional ``batch.weights``) a :mod:`solvers.losses` loss reads."""

    __slots__ = ("y", "weights")

    def __init__(self, y: torch.Tensor, weights: torch.Tensor | None = None) -> None:
        self.y = y
        self.weights = weights

    def __len__(self) -> int:
        return int(self.y.shape[0])
