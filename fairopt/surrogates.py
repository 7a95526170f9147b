"""Smooth surrogates of the step function for rate constraints.

A rate such as ``P(yhat = 1 | S = s)`` averages the step ``1{t > 0}`` over a group, with
``t = out - threshold`` ([SQP] eq 1). The step has no useful gradient, so training replaces it by
a smooth ``phi(t)`` and keeps the exact value for reporting. Each surrogate gives ``phi(t)``
(autograd), ``phi.derivative(t)`` (closed form) and ``phi.step(t)`` (the hard step):
:class:`SmoothedStep` ([SQP] sec 3.1, default), :class:`Sigmoid`, :class:`Linear` (the covariance
surrogate, [SQP] Thm 2.2) and :class:`Hinge`; :func:`get_surrogate` resolves a name.
"""

from __future__ import annotations

import math
from typing import Any

import torch

from fairopt._validation import as_tensor, positive_float

__all__ = ["Surrogate", "SmoothedStep", "Sigmoid", "Linear", "Hinge", "get_surrogate", "SURROGATES"]

DEFAULT_SCALE = 50.0
DEFAULT_MU = 1e-2
VARIANTS = ("normalized", "paper")


def _as_float_tensor(t: Any) -> torch.Tensor:
    """``t`` as a floating tensor (tensors pass through, keeping autograd)."""
    if not isinstance(t, torch.Tensor):
        t = as_tensor(t, "t")
    return t if t.is_floating_point() else t.to(torch.get_default_dtype())


class Surrogate:
    """A smooth approximation ``phi(t)`` of the step ``1{t > 0}`` ([SQP] eq 1)."""

    name: str = "surrogate"

    def __call__(self, t: torch.Tensor) -> torch.Tensor:  # pragma: no cover - abstract
        raise NotImplementedError

    def derivative(self, t: torch.Tensor) -> torch.Tensor:  # pragma: no cover - abstract
        raise NotImplementedError

    def value_and_derivative(self, t: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``(phi(t), phi'(t))`` without gradient, in one pass where a subclass can."""
        with torch.no_grad():
            return self(t).detach(), self.derivative(t).detach()

    @staticmethod
    def step(t: torch.Tensor) -> torch.Tensor:
        """The hard step ``1{t > 0}`` in the dtype of ``t`` (``t = 0`` maps to 0, [SQP] eq 1)."""
        t = _as_float_tensor(t)
        return (t > 0).to(t.dtype)

    def _params(self) -> dict:
        return {}

    def __repr__(self) -> str:
        params = ", ".join(f"{k}={v!r}" for k, v in self._params().items())
        return f"{type(self).__name__}({params})"

    def __eq__(self, other: object) -> bool:
        return type(self) is type(other) and self._params() == other._params()  # type: ignore[attr-defined]

    def __hash__(self) -> int:
        return hash((type(self).__name__, tuple(self._params().items())))


def _smooth_max0(v: torch.Tensor, mu: float) -> tuple[torch.Tensor, torch.Tensor]:
    """``m(v) = (v + sqrt(v^2 + mu)) / 2`` (the smooth ``max(v, 0)`` of [SQP] sec 3.1) and
    ``m'(v) = m(v) / sqrt(v^2 + mu)``.

    Evaluated as ``max(v, 0) + (mu/2) / (sqrt(v^2 + mu) + |v|)``, the same number without the
    cancellation of ``v + sqrt(v^2 + mu)`` for ``v << 0`` (float32 returns 0 there).
    """
    root = torch.addcmul(v.new_full((), mu), v, v).sqrt_()  # fresh tensors updated in place: one allocation each
    den = torch.abs(v).add_(root)
    value = torch.clamp(v, min=0.0).addcdiv_(v.new_ones(()), den, value=0.5 * mu)
    return value, value / root


def _outer_and_slope(shifted: torch.Tensor, mu: float) -> tuple[torch.Tensor, torch.Tensor]:
    """``m(1 - m(v))`` and ``phi_mu'(u) = m'(1 - m(v)) m'(v)`` at ``v = u + 1/2``, so that
    ``phi_mu(u) = 1 - m(1 - m(v))``."""
    inner, inner_slope = _smooth_max0(shifted, mu)
    outer, outer_slope = _smooth_max0(torch.rsub(inner, 1.0), mu)
    return outer, outer_slope.mul_(inner_slope)


def _phi_mu(u: torch.Tensor, mu: float) -> tuple[torch.Tensor, torch.Tensor]:
    """The paper's ``phi_mu(u) = 1 - m(1 - m(u + 1/2))`` ([SQP] sec 3.1) and
    ``phi_mu'(u) = m'(1 - m(u + 1/2)) m'(u + 1/2)``."""
    outer, slope = _outer_and_slope(u + 0.5, mu)
    return torch.rsub(outer, 1.0), slope


def _lower_limit(mu: float) -> float:
    """``L = inf phi_mu = 1 - m(1) = (1 - sqrt(1 + mu)) / 2`` (the limit as ``u -> -inf``)."""
    return 0.5 * (1.0 - math.sqrt(1.0 + mu))


def _smoothed_step(u: torch.Tensor, mu: float, normalized: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """``phi_mu`` (paper) or ``phi_c`` (normalized) at ``u`` and its derivative, in one pass."""
    if not normalized:
        return _phi_mu(u, mu)
    shifted = u.new_empty((2,) + tuple(u.shape))  # u + 1/2 and -u + 1/2, evaluated together
    torch.add(u, 0.5, out=shifted[0])
    torch.mul(u, -1.0, out=shifted[1]).add_(0.5)
    outer, slope = _outer_and_slope(shifted, mu)
    inverse_range = 0.5 / (1.0 - _lower_limit(mu))  # phi_mu(u) - phi_mu(-u) = outer(-u) - outer(u)
    return torch.sub(outer[1], outer[0]).mul_(inverse_range).add_(0.5), torch.add(slope[0], slope[1]).mul_(inverse_range)


class _SmoothedStepFunction(torch.autograd.Function):
    """``phi(u)`` with its closed-form derivative saved in the forward pass.

    The backward pass is one multiplication instead of a walk back through the forward's
    elementwise operations. ``generate_vmap_rule`` makes batched vector-Jacobian products work;
    the backward is once-differentiable, so second derivatives raise instead of returning zeros.
    """

    generate_vmap_rule = True

    @staticmethod
    def forward(u: torch.Tensor, mu: float, normalized: bool) -> tuple[torch.Tensor, torch.Tensor]:
        return _smoothed_step(u, mu, normalized)

    @staticmethod
    def setup_context(ctx: Any, inputs: tuple, output: tuple) -> None:
        ctx.mark_non_differentiable(output[1])
        ctx.save_for_backward(output[1])

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx: Any, grad_value: torch.Tensor, grad_slope: torch.Tensor) -> tuple:
        (slope,) = ctx.saved_tensors
        return grad_value * slope, None, None


class SmoothedStep(Surrogate):
    """Smoothed step of [SQP] sec 3.1, scaled: ``phi(t) = phi_c(scale * t)`` (default variant).

    The paper smooths the ramp ``min(max(0, u + 1/2), 1)`` with ``m(u) = (u + sqrt(u^2 + mu)) / 2``:
    ``phi_mu(u) = 1 - m(1 - m(u + 1/2))`` at ``u = alpha t``. ``phi_mu`` ranges over
    ``(L, 1)`` with ``L = (1 - sqrt(1 + mu)) / 2`` and is not exactly odd about ``(0, 1/2)``, which
    [SQP] Thm 2.1 assumes. ``variant="normalized"`` therefore uses

    ``phi_c(u) = 1/2 + (phi_mu(u) - phi_mu(-u)) / (2 (1 - L))``,

    exactly odd, strictly increasing from 0 to 1 and within ``O(mu)`` of ``phi_mu``;
    ``variant="paper"`` evaluates ``phi_mu`` as published.

    Parameters
    ----------
    scale : float, default 50.0
        ``alpha > 0``; ``phi`` rises from near 0 to near 1 over ``|t| < 1 / (2 scale)``. [SQP]
        sec 4.1 chose 50 from ``{1, 5, 10, 20, 50, 100}`` (smallest gap between imposed and
        realised disparate impact).
    mu : float, default 1e-2
        Smoothing of the ramp's corners (left open by [SQP]): they round over
        ``|u -/+ 1/2| ~ sqrt(mu)`` with curvature ``|phi''| <= 1 / (2 sqrt(mu))`` in ``u``. A smaller
        ``mu`` sharpens the corners, hurting the SQP model, without bringing ``phi`` closer to the
        step, which ``scale`` controls.
    variant : {"normalized", "paper"}, default "normalized"

    Examples
    --------
    >>> phi = SmoothedStep()
    >>> float(phi(torch.tensor(0.0)))
    0.5
    """

    name = "smoothed_step"

    def __init__(self, scale: float = DEFAULT_SCALE, mu: float = DEFAULT_MU, variant: str = "normalized") -> None:
        self.scale = positive_float(scale, "scale")
        self.mu = positive_float(mu, "mu")
        if variant not in VARIANTS:
            raise ValueError(f"variant: expected one of {VARIANTS}, got {variant!r}")
        self.variant = variant
        self.lower_limit = _lower_limit(self.mu)
        """``L = inf phi_mu = (1 - sqrt(1 + mu)) / 2`` (the paper variant's infimum)."""

    def _params(self) -> dict:
        return {"scale": self.scale, "mu": self.mu, "variant": self.variant}

    def __call__(self, t: torch.Tensor) -> torch.Tensor:
        value, _ = _SmoothedStepFunction.apply(self.scale * _as_float_tensor(t), self.mu, self.variant == "normalized")
        return value

    def derivative(self, t: torch.Tensor) -> torch.Tensor:
        """``scale * phi_mu'(u)`` (paper) or ``scale * (phi_mu'(u) + phi_mu'(-u)) / (2 (1 - L))``, ``u = scale t``."""
        return self.value_and_derivative(t)[1]

    def value_and_derivative(self, t: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``phi`` and ``phi'`` from one evaluation of the closed form."""
        u = self.scale * _as_float_tensor(t).detach()
        with torch.no_grad():
            value, slope = _smoothed_step(u, self.mu, self.variant == "normalized")
        return value, self.scale * slope


class Sigmoid(Surrogate):
    """Scaled logistic sigmoid ``phi(t) = 1 / (1 + exp(-scale t))`` ([SQP] sec 2.3, 3.1).

    Odd about ``(0, 1/2)`` and ``[0, 1]``-valued, so [SQP] Thm 2.1 applies.

    Parameters
    ----------
    scale : float, default 50.0
        ``alpha > 0`` ([SQP] sec 4.1: 50).
    """

    name = "sigmoid"

    def __init__(self, scale: float = DEFAULT_SCALE) -> None:
        self.scale = positive_float(scale, "scale")

    def _params(self) -> dict:
        return {"scale": self.scale}

    def __call__(self, t: torch.Tensor) -> torch.Tensor:
        return torch.sigmoid(self.scale * _as_float_tensor(t))

    def derivative(self, t: torch.Tensor) -> torch.Tensor:
        """``scale * sigma(scale t) * (1 - sigma(scale t))``."""
        return self.value_and_derivative(t)[1]

    def value_and_derivative(self, t: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``sigma(scale t)`` and its derivative from one sigmoid evaluation."""
        with torch.no_grad():
            s = self(t)
            return s, self.scale * s * (1.0 - s)


class Linear(Surrogate):
    """Identity ``phi(t) = t``: the covariance surrogate of Zafar et al. ([SQP] sec 2.3, Thm 2.2).

    Unbounded, so [SQP] Thm 2.1 does not apply; a group-rate difference is then
    ``N^2 / (N_0 N_1)`` times the covariance ``mean((s - mean s) * out)``.
    """

    name = "linear"

    def __call__(self, t: torch.Tensor) -> torch.Tensor:
        return _as_float_tensor(t)

    def derivative(self, t: torch.Tensor) -> torch.Tensor:
        """``1`` everywhere."""
        return torch.ones_like(_as_float_tensor(t))


class Hinge(Surrogate):
    """``phi(t) = max(t, 0)`` ([SQP] sec 2.3); derivative ``1{t > 0}`` (0 at ``t = 0``)."""

    name = "hinge"

    def __call__(self, t: torch.Tensor) -> torch.Tensor:
        return torch.clamp(_as_float_tensor(t), min=0.0)

    def derivative(self, t: torch.Tensor) -> torch.Tensor:
        """``1{t > 0}`` (subgradient 0 at ``t = 0``, as autograd)."""
        return self.step(t)


SURROGATES: dict[str, type[Surrogate]] = {
    cls.name: cls for cls in (SmoothedStep, Sigmoid, Linear, Hinge)
}


def get_surrogate(spec: "str | Surrogate", **kwargs: Any) -> Surrogate:
    """Resolve a surrogate from a name (built with ``kwargs``, e.g. ``scale=10``) or an instance.

    Parameters
    ----------
    spec : str or Surrogate
        One of ``"smoothed_step"``, ``"sigmoid"``, ``"linear"``, ``"hinge"``, or an instance
        (returned as is).
    **kwargs
        Constructor arguments of a named surrogate.

    Raises
    ------
    ValueError
        An unknown name, a non-surrogate object, or ``kwargs`` with an instance.
    """
    if isinstance(spec, Surrogate):
        if kwargs:
            raise ValueError(f"surrogate: options {sorted(kwargs)} given with the instance {spec!r}")
        return spec
    if isinstance(spec, str) and spec in SURROGATES:
        try:
            return SURROGATES[spec](**kwargs)
        except TypeError:
            raise ValueError(f"surrogate: {spec!r} does not take the options {sorted(kwargs)}") from None
    raise ValueError(
        f"surrogate: expected one of {sorted(SURROGATES)} or a Surrogate instance, got {spec!r}"
    )
