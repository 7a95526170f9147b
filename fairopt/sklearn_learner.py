"""A scikit-learn estimator as the estimators' model: ``model=<estimator>`` with ``method="moving_targets"``.

Moving Targets needs only ``fit``/``predict`` of its learner, so a clone of any scikit-learn
classifier or regressor can be trained under the constraints with a linear target encoding
(group rates, GeDI); the gradient engines need a differentiable model and refuse one. The fitted
clone is wrapped as the torch module the estimators predict with (:class:`FittedEstimator`). The
estimator given is never fitted itself, so clones, grid searches and refits all start from it.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from sklearn.base import clone, is_classifier, is_regressor
from torch import nn

from solvers.history import FitResult

__all__ = ["FittedEstimator", "check_sklearn_model", "is_sklearn_model", "routes_missing_values",
           "run_sklearn_learner"]

# logits of predict_proba are clipped to +-LOGIT_CLIP (probabilities 0 and 1 give finite outputs)
LOGIT_CLIP = 36.0


def is_sklearn_model(model: Any) -> bool:
    """Whether ``model`` is a scikit-learn estimator instance (``get_params``, ``fit``, ``predict`` or
    ``predict_proba``) rather than a named model or a module factory.
    """
    return (not isinstance(model, (str, type, nn.Module)) and callable(getattr(model, "get_params", None))
            and callable(getattr(model, "fit", None))
            and (callable(getattr(model, "predict", None)) or callable(getattr(model, "predict_proba", None))))


def routes_missing_values(model: Any) -> bool:
    """Whether a scikit-learn estimator takes missing input values itself (its ``allow_nan`` input tag:
    ``HistGradientBoostingClassifier`` and the like), so the estimators pass them to it."""
    from sklearn.utils import get_tags

    try:
        return bool(get_tags(model).input_tags.allow_nan)
    except (AttributeError, TypeError, ValueError):  # an estimator without scikit-learn's tags
        return False


def check_sklearn_model(model: Any, method: str, task: str) -> None:
    """ValueError unless ``model`` can be trained: Moving Targets only, a classifier for
    ``task="binary"``, a regressor for ``"regression"`` (where its tags say which it is), and one that
    scikit-learn's ``clone`` copies (Moving Targets refits a clone). :class:`fairopt.learners.TorchLearner`,
    the learner Moving Targets builds from ``model="linear"``, ``"mlp"`` or a module factory, is refused
    with that advice.
    """
    from fairopt.learners import TorchLearner

    name = type(model).__name__
    if method != "moving_targets":
        raise ValueError(f"model: a scikit-learn estimator ({name}) is trained by method='moving_targets' only "
                         f"(the other methods differentiate the model), got method={method!r}; use "
                         "method='moving_targets', or model='gbm' for boosted trees under method='sqp'")
    if isinstance(model, TorchLearner):
        raise ValueError("model: a fairopt.TorchLearner is the learner method='moving_targets' builds itself from "
                         "model='linear', 'mlp' or a factory n_features -> torch.nn.Module (with epochs, lr and "
                         "batch_size on the estimator); pass one of those as model")
    kind = _declared_kind(model)
    if task == "binary" and kind == "regressor":
        raise ValueError(f"model: FairClassifier needs a scikit-learn classifier, {name} is a regressor")
    if task == "regression" and kind == "classifier":
        raise ValueError(f"model: FairRegressor needs a scikit-learn regressor, {name} is a classifier")
    try:
        clone(model)
    except (RuntimeError, TypeError, AttributeError) as exc:
        raise ValueError(f"model: scikit-learn cannot clone {name} ({exc}); Moving Targets refits a clone of the "
                         "estimator given, so it must follow scikit-learn's estimator API (derive from "
                         "sklearn.base.BaseEstimator, store each constructor argument unchanged)") from None


def _declared_kind(model: Any) -> str | None:
    """``"classifier"`` or ``"regressor"`` as scikit-learn's tags (or an ``_estimator_type``) declare it; None for
    an estimator that declares neither, or has no tags (not derived from ``BaseEstimator``)."""
    try:
        if is_regressor(model):
            return "regressor"
        return "classifier" if is_classifier(model) else None
    except (AttributeError, TypeError):
        kind = getattr(model, "_estimator_type", None)
        return kind if kind in ("classifier", "regressor") else None


class FittedEstimator(nn.Module):
    """A fitted scikit-learn estimator as a module ``x -> out`` (not differentiable).

    Classifier: ``decision_function(x)``, else the logit of ``predict_proba(x)[:, 1]`` clipped to
    ``[-36, 36]``, else ``2 predict(x) - 1``, so ``out > 0`` exactly when it predicts class 1.
    Regressor: ``predict(x)``. Inputs are passed as float32, as in training.

    Parameters
    ----------
    estimator : object
        The fitted scikit-learn estimator.
    task : {"binary", "regression"}
    """

    def __init__(self, estimator: Any, task: str) -> None:
        super().__init__()
        self.estimator = estimator
        self.task = task

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        inputs = x.detach().cpu().numpy().astype(np.float32)
        est = self.estimator
        if self.task == "regression":
            values = np.asarray(est.predict(inputs), dtype=np.float64)
        elif callable(getattr(est, "decision_function", None)):
            values = np.asarray(est.decision_function(inputs), dtype=np.float64)
        elif callable(getattr(est, "predict_proba", None)):
            p = np.asarray(est.predict_proba(inputs), dtype=np.float64)[:, -1]
            with np.errstate(divide="ignore"):
                values = np.clip(np.log(p) - np.log1p(-p), -LOGIT_CLIP, LOGIT_CLIP)
        else:
            values = 2.0 * np.asarray(est.predict(inputs), dtype=np.float64) - 1.0
        return torch.as_tensor(values.reshape(-1), dtype=x.dtype, device=x.device)

    def extra_repr(self) -> str:
        return f"estimator={self.estimator!r}, task={self.task!r}"


def run_sklearn_learner(options: Any, data: Any, constraints: list, reference: bool = False) -> FitResult:
    """:class:`solvers.moving_targets.MovingTargets` refitting a clone of ``options.model`` under
    ``constraints`` (none for ``reference``); the model is the best iteration's estimator as a
    :class:`FittedEstimator`. ``epochs``, ``lr`` and ``batch_size`` must be None.
    """
    from solvers.moving_targets import MovingTargets  # loads the projection back-ends: only when used

    check_sklearn_model(options.model, options.method, options.task)
    given = {k: getattr(options, k) for k in ("epochs", "lr", "batch_size") if getattr(options, k) is not None}
    if given:
        raise ValueError(f"{', '.join(sorted(given))}: options of the torch learners; a scikit-learn model takes its "
                         f"own settings (e.g. model=HistGradientBoostingClassifier(max_iter=...)), got {given}")
    try:
        engine = MovingTargets(**options.engine_kwargs())
    except TypeError as exc:
        raise ValueError(f"engine_params: MovingTargets does not accept these options ({exc})") from None
    task = "classification" if options.task == "binary" else "regression"
    result = engine.fit(clone(options.model), data, constraints=[] if reference else constraints, task=task)
    result.model = FittedEstimator(result.model, options.task)
    return result
