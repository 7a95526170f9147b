"""Optimisers of the penalty and Lagrangian engines by name (:func:`make_optimizer`), with
:class:`AdaHessian` (Yao et al. 2021), the optimiser of [DC App D], which torch does not ship."""

from __future__ import annotations

import math
from typing import Any, Iterable, Sequence

import torch

from solvers.validation import check_choice, check_interval, positive_float, positive_int

__all__ = ["AdaHessian", "hutchinson_diagonal", "make_optimizer", "needs_create_graph", "OPTIMIZERS"]

OPTIMIZERS = ("adam", "sgd", "adahessian")


def rademacher_like(tensor: torch.Tensor, generator: torch.Generator | None) -> torch.Tensor:
    """A tensor of independent +-1 entries (probability 1/2 each), shaped like ``tensor``."""
    bits = torch.randint(0, 2, tensor.shape, generator=generator, dtype=torch.int64, device=tensor.device)
    return (2 * bits - 1).to(tensor.dtype)


def hutchinson_diagonal(
    grads: Sequence[torch.Tensor],
    params: Sequence[torch.Tensor],
    *,
    n_samples: int = 1,
    generator: torch.Generator | None = None,
    vectors: Sequence[Sequence[torch.Tensor]] | None = None,
) -> list[torch.Tensor]:
    """Hutchinson's estimate ``diag(H) ~ mean_k z_k * (H z_k)``, one detached tensor per parameter.

    For Rademacher ``z``, ``E[z_i (Hz)_i] = sum_j H_ij E[z_i z_j] = H_ii`` (Bekas, Kokiopoulou, Saad
    2007; Yao et al. 2021, eq. 6), exact over all ``2^p`` sign vectors; ``Hz`` is the gradient of
    ``g' z`` through the graph of ``grads`` (taken with ``create_graph=True``). ``vectors`` gives the
    probes explicitly, else ``n_samples`` are drawn from ``generator``.
    """
    grads, params = list(grads), list(params)
    if len(grads) != len(params):
        raise ValueError(f"grads: expected one gradient per parameter ({len(params)}), got {len(grads)}")
    if not any(g.requires_grad for g in grads):
        raise ValueError("grads: no gradient carries a graph; compute it with create_graph=True")
    if vectors is None:
        positive_int(n_samples, "n_samples")
        vectors = [[rademacher_like(p, generator) for p in params] for _ in range(n_samples)]
    vectors = list(vectors)
    if not vectors:
        raise ValueError("vectors: expected at least one probe vector")
    with_graph = [i for i, g in enumerate(grads) if g.requires_grad]
    total = [torch.zeros_like(p, memory_format=torch.contiguous_format) for p in params]
    for k, z in enumerate(vectors):
        if len(z) != len(params):
            raise ValueError(f"vectors[{k}]: expected {len(params)} tensors (one per parameter), got {len(z)}")
        hvs = torch.autograd.grad(
            [grads[i] for i in with_graph],
            params,
            grad_outputs=[z[i] for i in with_graph],
            retain_graph=k < len(vectors) - 1,
            allow_unused=True,
        )
        for i, hv in enumerate(hvs):
            if hv is not None:
                total[i] += z[i] * hv.detach()
    return [t / len(vectors) for t in total]


def _spatial_average(d: torch.Tensor) -> torch.Tensor:
    """``|d|`` averaged over a convolution kernel's spatial dimensions (Yao et al. 2021, eq. 9)."""
    if d.dim() <= 2:
        return d.abs()
    dims = tuple(range(2, d.dim()))
    return d.abs().mean(dim=dims, keepdim=True).expand_as(d)


class AdaHessian(torch.optim.Optimizer):
    r"""AdaHessian (Yao, Gholami, Shen, Mustafa, Keutzer, Mahoney, AAAI 2021), implemented here.

    Algorithm 1 of the paper, with ``D_t = z * (H_t z)`` from :func:`hutchinson_diagonal`:

    .. code-block:: text

        D_t^(s) = |D_t|, block-averaged over kernel dims if spatial_average   (eq. 9)
        m_t = b1 m_{t-1} + (1 - b1) g_t
        v_t = b2 v_{t-1} + (1 - b2) D_t^(s) * D_t^(s)
        w_{t+1} = w_t - lr * (m_t / (1 - b1^t)) / ((sqrt(v_t) / sqrt(1 - b2^t))^k + eps)
                      - lr * weight_decay * w_t

    with ``k`` the Hessian power (``k = 0`` is momentum SGD); ``|D|`` follows the authors' code.
    Gradients need their graph (``loss.backward(create_graph=True)``); the step detaches ``p.grad``.

    Parameters
    ----------
    params : iterable of tensors or parameter groups
    lr : float, default 0.15 (the authors' default)
    betas : (float, float), default (0.9, 0.999)
    eps : float, default 1e-4
    weight_decay : float, default 0.0 (decoupled, as in the reference code)
    hessian_power : float in [0, 1], default 1.0
    spatial_average : bool, default False
        Average the curvature over the spatial dimensions of convolution kernels.
    n_samples : int, default 1
        Hutchinson probe vectors per step.
    seed : int, default 0
        Seed of the Rademacher vectors.
    """

    def __init__(
        self,
        params: Iterable[Any],
        lr: float = 0.15,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-4,
        weight_decay: float = 0.0,
        hessian_power: float = 1.0,
        spatial_average: bool = False,
        n_samples: int = 1,
        seed: int = 0,
    ) -> None:
        positive_float(lr, "lr")
        if len(betas) != 2 or not all(0.0 <= b < 1.0 for b in betas):
            raise ValueError(f"betas: expected two values in [0, 1), got {betas!r}")
        if not eps > 0:
            raise ValueError(f"eps: expected a positive number, got {eps!r}")
        if not weight_decay >= 0:
            raise ValueError(f"weight_decay: expected a non-negative number, got {weight_decay!r}")
        check_interval(hessian_power, "hessian_power", 0.0, 1.0, closed="both")
        positive_int(n_samples, "n_samples")
        defaults = dict(lr=lr, betas=tuple(betas), eps=eps, weight_decay=weight_decay,
                        hessian_power=hessian_power, spatial_average=bool(spatial_average))
        super().__init__(params, defaults)
        self.n_samples = n_samples
        self.generator = torch.Generator().manual_seed(int(seed))

    @torch.no_grad()
    def step(self, closure=None):  # type: ignore[override]
        """One AdaHessian step; an optional ``closure`` re-evaluates the loss and gradients."""
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        params = [p for group in self.param_groups for p in group["params"] if p.grad is not None]
        if not params:
            return loss
        with torch.enable_grad():
            curvature = hutchinson_diagonal(
                [p.grad for p in params], params, n_samples=self.n_samples, generator=self.generator)
        diagonal = dict(zip(map(id, params), curvature))
        for group in self.param_groups:
            beta1, beta2 = group["betas"]
            for p in group["params"]:
                if p.grad is None:
                    continue
                grad = p.grad.detach()
                p.grad = grad
                d = diagonal[id(p)]
                d = _spatial_average(d) if group["spatial_average"] else d.abs()
                state = self.state[p]
                if not state:
                    state["step"] = 0
                    state["exp_avg"] = torch.zeros_like(p)
                    state["exp_hessian_diag_sq"] = torch.zeros_like(p)
                state["step"] += 1
                t = state["step"]
                state["exp_avg"].mul_(beta1).add_(grad, alpha=1.0 - beta1)
                state["exp_hessian_diag_sq"].mul_(beta2).addcmul_(d, d, value=1.0 - beta2)
                k = group["hessian_power"]
                denom = (state["exp_hessian_diag_sq"].sqrt() / math.sqrt(1.0 - beta2**t)).pow(k).add_(group["eps"])
                if group["weight_decay"]:
                    p.mul_(1.0 - group["lr"] * group["weight_decay"])
                p.addcdiv_(state["exp_avg"], denom, value=-group["lr"] / (1.0 - beta1**t))
        return loss


def make_optimizer(name: str, params: Iterable[torch.Tensor], lr: float, seed: int = 0, **options: Any) -> torch.optim.Optimizer:
    """:class:`torch.optim.Adam`, :class:`torch.optim.SGD` or :class:`AdaHessian` (seeded by ``seed``) by
    name, ``options`` going to its constructor."""
    check_choice(name, OPTIMIZERS, "optimizer")
    params = list(params)
    try:
        if name == "adam":
            return torch.optim.Adam(params, lr=lr, **options)
        if name == "sgd":
            return torch.optim.SGD(params, lr=lr, **options)
        return AdaHessian(params, lr=lr, seed=seed, **options)
    except TypeError as exc:
        raise ValueError(f"optimizer_options: {sorted(options)} not accepted by {name!r} ({exc})") from None


def needs_create_graph(optimizer: torch.optim.Optimizer) -> bool:
    """Whether the optimiser reads second-order information from the gradient's graph."""
    return isinstance(optimizer, AdaHessian)
