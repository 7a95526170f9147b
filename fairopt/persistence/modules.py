"""Torch models in a file: the architecture spec that describes a module (``fairopt.models``
linear / mlp networks, an output scale, boosted trees, or a custom module) and the module rebuilt
from it."""

from __future__ import annotations

from typing import Any

from torch import nn

from fairopt import models
from fairopt.exceptions import warn_at_caller
from fairopt.learners import OutputScale
from solvers.boosting import BoostedScores

__all__ = ["load_module", "module_of", "module_payload"]


# --------------------------------------------------------------------------------------
# describing a module
# --------------------------------------------------------------------------------------
def module_of(model: Any) -> nn.Module:
    """The torch module of a FitResult's model (a TorchLearner's ``module_``)."""
    if isinstance(model, nn.Module):
        return model
    module = getattr(model, "module_", None)
    if isinstance(module, nn.Module):
        return module
    raise ValueError(f"obj: the FitResult's model is a {type(model).__name__}, not a torch module; only torch "
                     "models can be saved")


def module_payload(module: nn.Module, n_features: int | None = None) -> dict:
    """Architecture spec and a detached copy of the state dict; ``n_features`` (the input
    width) is recorded for a custom module, to call its factory at load time."""
    state = {k: v.detach().cpu().clone() for k, v in module.state_dict().items()}
    return {"spec": _architecture(module, n_features), "state_dict": state}


def _architecture(module: nn.Module, n_features: int | None = None) -> dict:
    """The spec that rebuilds ``module`` (module docstring); ``custom`` if not recognised. Boosted
    trees (:class:`solvers.boosting.BoostedScores`, ``model="gbm"``) are ``boosted_trees``: their
    trees and offset are buffers of the state dict."""
    if isinstance(module, BoostedScores):
        return {"kind": "boosted_trees", "n_features": n_features}
    children = list(module.children()) if isinstance(module, nn.Sequential) else []
    if len(children) == 2 and isinstance(children[1], OutputScale):
        return {"kind": "output_scale", "inner": _architecture(children[0], n_features)}
    spec = _fairopt_model_spec(children)
    if spec is not None and repr(_build_architecture(spec)) == repr(module):
        return spec
    return {"kind": "custom", "class": f"{type(module).__module__}.{type(module).__qualname__}",
            "n_features": n_features if n_features is not None else _first_in_features(module)}


def _fairopt_model_spec(children: list[nn.Module]) -> dict | None:
    """The ``fairopt.models.linear``/``mlp`` arguments the layers suggest (None if none);
    :func:`_architecture` confirms them by comparing the rebuilt module."""
    linears = [m for m in children if isinstance(m, nn.Linear)]
    if not linears:
        return None
    n_features, bias = linears[0].in_features, linears[0].bias is not None
    if len(linears) == 1:
        return {"kind": "linear", "n_features": n_features, "bias": bias}
    activation = next((name for name, cls in models.ACTIVATIONS.items() if any(type(m) is cls for m in children)),
                      None)
    if activation is None:
        return None
    return {"kind": "mlp", "n_features": n_features, "bias": bias, "activation": activation,
            "hidden": [m.out_features for m in linears[:-1]]}


def _first_in_features(module: nn.Module) -> int | None:
    """Input width of the first linear layer (the usual input width), None without one."""
    first = next((m for m in module.modules() if isinstance(m, nn.Linear)), None)
    return None if first is None else int(first.in_features)


# --------------------------------------------------------------------------------------
# rebuilding a module
# --------------------------------------------------------------------------------------
def _build_architecture(spec: dict) -> nn.Module:
    """A freshly initialised ``fairopt.models.linear``/``mlp`` module of a spec."""
    if spec["kind"] == "linear":
        return models.linear(spec["n_features"], bias=spec["bias"], seed=0)
    if spec["kind"] == "mlp":
        return models.mlp(spec["n_features"], hidden=tuple(spec["hidden"]), activation=spec["activation"],
                          bias=spec["bias"], seed=0)
    raise ValueError(f"model: unknown architecture kind {spec['kind']!r}")


def _rebuild(spec: dict, model: Any) -> nn.Module:
    """The module of a spec: rebuilt, or the user's for a custom architecture."""
    if spec["kind"] == "output_scale":
        return nn.Sequential(_rebuild(spec["inner"], model), OutputScale())
    if spec["kind"] == "custom":
        return _custom_module(spec, model)
    if spec["kind"] == "boosted_trees":
        return BoostedScores()  # load_state_dict takes the saved trees, whatever their length
    return _build_architecture(spec)


def _holds_custom(spec: dict) -> bool:
    """Whether a module spec (or the one it wraps) is a custom architecture, the only kind ``model=`` builds."""
    return spec["kind"] == "custom" or (spec["kind"] == "output_scale" and _holds_custom(spec["inner"]))


def load_module(payload: dict, model: Any) -> nn.Module:
    """The saved module with its weights, in eval mode; a ``model`` given for a built-in architecture (rebuilt
    from the file's description) is not used, with a warning."""
    if model is not None and not _holds_custom(payload["spec"]):
        warn_at_caller(f"load: model= is not used: the file holds a built-in architecture "
                       f"({payload['spec']['kind']}), rebuilt from its own description", UserWarning)
    module = _rebuild(payload["spec"], model)
    try:
        module.load_state_dict(payload["state_dict"])
    except RuntimeError as exc:
        raise ValueError(f"model: the saved weights do not fit the given architecture ({exc})") from None
    return module.eval()


def _custom_module(spec: dict, model: Any) -> nn.Module:
    """The user's module (or its factory's output) for a custom architecture."""
    if isinstance(model, nn.Module):
        return model
    if callable(model):
        if spec["n_features"] is None:
            raise ValueError("model: the input width of the saved custom module is unknown; pass an instance "
                             "of the architecture instead of a factory")
        module = model(spec["n_features"])
        if not isinstance(module, nn.Module):
            raise ValueError(f"model: the factory returned {type(module).__name__}, expected a torch.nn.Module")
        return module
    raise ValueError(f"model: the file holds the weights of a custom module ({spec['class']}); pass model= an "
                     "instance of that architecture (or its factory n_features -> module)")
