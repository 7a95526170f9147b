r"""Closed-form pullback of a feed-forward network: many gradient rows for about one backward pass.

A *feed-forward network* here is an ``nn.Sequential`` (nested ones flattened) of ``nn.Linear``
layers and elementwise activations ending in one unit (``nn.Identity``, inactive ``nn.Dropout`` and
a last parameter-free ``squeeze_output = True`` reshape or ``nn.Flatten(0)`` are skipped); anything
else is left to autograd
(:meth:`FeedForward.recognise` returns None). Writing
``H_0 = X``, ``Z_l = H_{l-1} W_l' + b_l`` and ``H_l = sigma_l(Z_l)`` (``sigma_l`` the activations
after layer ``l``, the identity when there are none), the output of row ``i`` is ``H_L[i]``. Its
*sensitivity* to layer ``l``'s pre-activations,

``S_l[i] = d out_i / d Z_l[i]``,   ``S_L = sigma_L'(Z_L)``,   ``S_l = (S_{l+1} W_{l+1}) * sigma_l'(Z_l)``,

does not depend on any cotangent (chain rule, one output per row). The gradient of ``v' out`` for a
cotangent ``v`` (n,) is then, layer by layer,

``dW_l = (v * S_l)' H_{l-1}``,   ``db_l = S_l' v``,

so ``k`` cotangents (an SQP iteration's ``df/d out`` and ``dc/d out``) cost one pass of activation
derivatives plus ``k`` products per layer, where autograd repeats the whole backward pass ``k``
times (``benchmarks/feedforward_pullback.py``). The last hidden layer needs no sensitivity matrix:
``S_{L-1} = (S_L w_L) * sigma_{L-1}'(Z_{L-1})`` is ``sigma'`` scaled by the output weight row
(:meth:`FeedForwardTrace._pull`). Values equal autograd's up to rounding; ``out`` is bit for bit
``model(X)`` unless the first layer is handed ``[X | 1]``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Sequence

import torch
import torch.nn.functional as F
from torch import nn

__all__ = ["ACTIVATION_DERIVATIVES", "FeedForward", "FeedForwardTrace", "GENERIC_ACTIVATIONS"]

def _into(op: Any, *args: Any, out: torch.Tensor | None) -> torch.Tensor:
    """The aten backward kernel ``op(*args)``, written into ``out`` (its ``grad_input`` overload) when given."""
    return op(*args) if out is None else op.grad_input(*args, grad_input=out)


#: ``(module, G, Z, H, out=None) -> G * sigma'(Z)`` by PyTorch's own backward kernels, written into the
#: reused buffer ``out`` when given (a fresh full-batch matrix per call is much slower).
ACTIVATION_DERIVATIVES: dict[type[nn.Module], Callable[..., torch.Tensor]] = {
    nn.ReLU: lambda m, G, Z, H, out=None: _into(torch.ops.aten.threshold_backward, G, H, 0, out=out),
    nn.LeakyReLU: lambda m, G, Z, H, out=None: _into(torch.ops.aten.leaky_relu_backward, G, Z, m.negative_slope,
                                                     False, out=out),
    nn.Tanh: lambda m, G, Z, H, out=None: _into(torch.ops.aten.tanh_backward, G, H, out=out),
    nn.Sigmoid: lambda m, G, Z, H, out=None: _into(torch.ops.aten.sigmoid_backward, G, H, out=out),
}

#: Elementwise activations without parameters whose derivative comes from one small autograd pass
#: through the activation alone (``d sum(G * sigma(Z)) / dZ``).
GENERIC_ACTIVATIONS: tuple[type[nn.Module], ...] = (
    nn.ELU, nn.SELU, nn.CELU, nn.GELU, nn.SiLU, nn.Mish, nn.Softplus, nn.Hardtanh,
)


def _flat_modules(model: nn.Module) -> list[nn.Module]:
    """The leaf modules of nested ``nn.Sequential`` containers, in order."""
    if type(model) is nn.Sequential:
        return [leaf for child in model for leaf in _flat_modules(child)]
    return [model]


def _is_identity(module: nn.Module) -> bool:
    """``nn.Identity``, or ``nn.Dropout`` that does nothing (evaluation mode or ``p = 0``)."""
    return type(module) is nn.Identity or (type(module) is nn.Dropout and (not module.training or module.p == 0))


def _is_squeeze(module: nn.Module) -> bool:
    """A parameter-free module that declares ``squeeze_output = True``, or ``nn.Flatten(0)``: a
    reshape of the (n, 1) output to (n,)."""
    if type(module) is nn.Flatten:
        return module.start_dim == 0 and module.end_dim == -1
    return getattr(module, "squeeze_output", False) is True and not any(True for _ in module.parameters())


def _is_activation(module: nn.Module) -> bool:
    known = type(module) in ACTIVATION_DERIVATIVES or type(module) in GENERIC_ACTIVATIONS
    return known and not getattr(module, "inplace", False)


def _activation_backward(module: nn.Module, G: torch.Tensor, Z: torch.Tensor, H: torch.Tensor,
                         out: torch.Tensor | None = None) -> torch.Tensor:
    """``G * sigma'(Z)`` for the activation ``module`` (``H = module(Z)``), in ``out`` when given and
    the activation has a closed form (a fresh tensor otherwise: use the returned one)."""
    closed = ACTIVATION_DERIVATIVES.get(type(module))
    if closed is not None:
        return closed(module, G, Z, H, out=out)
    leaf = Z.detach().requires_grad_(True)
    with torch.enable_grad():  # the dot form: no tensor grad_outputs (see solvers.derivatives.vjp)
        (grad,) = torch.autograd.grad(torch.sum(module(leaf) * G), leaf)
    return grad


@dataclass(frozen=True)
class _Layer:
    """One linear layer and the activations applied to its output, in order."""

    linear: nn.Linear
    activations: tuple[nn.Module, ...]


class FeedForward:
    """A recognised feed-forward network (:meth:`recognise`) and its parameters' positions in ``params``."""

    def __init__(self, layers: Sequence[_Layer], slots: Sequence[tuple[int, str]]) -> None:
        self.layers = tuple(layers)
        self.slots = tuple(slots)  # (layer index, "weight" | "bias") of each tensor of params, in order
        sizes = [getattr(layers[i].linear, name).numel() for i, name in self.slots]
        ends = [sum(sizes[:j + 1]) for j in range(len(sizes))]
        #: the columns ``(start, stop)`` of each tensor of ``params`` in a flat row, by (layer index, name)
        self.columns = {slot: (end - size, end) for slot, size, end in zip(self.slots, sizes, ends)}
        self.n_params = sum(sizes)

    @classmethod
    def recognise(cls, model: nn.Module, params: Sequence[torch.Tensor]) -> FeedForward | None:
        """The network of ``model`` with ``params`` (its linear layers' tensors, any order, each once) as
        the variables, or None when it is not a feed-forward network (module docstring)."""
        layers: list[_Layer] = []
        squeezed = False
        for module in _flat_modules(model):
            if squeezed and not (_is_identity(module) or _is_squeeze(module)):
                return None  # a reshape of the output only, after the last layer
            if type(module) is nn.Linear:
                layers.append(_Layer(module, ()))
            elif _is_identity(module):
                continue
            elif _is_activation(module) and layers:
                layers[-1] = _Layer(layers[-1].linear, layers[-1].activations + (module,))
            elif _is_squeeze(module):
                squeezed = True  # a (n, 1) -> (n,) reshape; checked against the output width below
            else:
                return None
        if not layers or layers[-1].linear.out_features != 1:
            return None
        if len({id(layer.linear) for layer in layers}) != len(layers):  # a layer used twice shares its weights
            return None
        owner = {}
        for index, layer in enumerate(layers):
            for name in ("weight", "bias"):
                tensor = getattr(layer.linear, name)
                if tensor is not None:
                    owner[id(tensor)] = (index, name)
        slots = [owner.get(id(p)) for p in params]
        if any(slot is None for slot in slots) or len(set(slots)) != len(slots):
            return None
        return cls(layers, slots)

    def trace(self, X: torch.Tensor, augmented: torch.Tensor | None = None) -> FeedForwardTrace:
        """The forward pass on ``X`` without an autograd graph, keeping each layer's input and stages.

        With ``augmented = [X | 1]`` the first layer acts as one matrix ``[W | b]``, so its bias
        gradient comes out of the weight product; ``out`` then equals ``model(X)`` up to rounding.
        """
        first = self.layers[0].linear
        use_augmented = augmented is not None and first.bias is not None
        if use_augmented and augmented.shape != (X.shape[0], X.shape[1] + 1):
            raise ValueError(f"augmented: expected shape {(X.shape[0], X.shape[1] + 1)} ([X | 1]), "
                             f"got {tuple(augmented.shape)}")
        with torch.no_grad():
            inputs, pre = [], []
            H = X
            for index, layer in enumerate(self.layers):
                if index == 0 and use_augmented:
                    inputs.append(augmented)
                    Z = augmented @ torch.cat([first.weight, first.bias[:, None]], dim=1).t()
                else:
                    inputs.append(H)
                    Z = F.linear(H, layer.linear.weight, layer.linear.bias)
                stages = [Z]
                for activation in layer.activations:
                    stages.append(activation(stages[-1]))
                pre.append(stages)
                H = stages[-1]
        return FeedForwardTrace(self, inputs, pre, H.reshape(-1), augmented_first=use_augmented)


class FeedForwardTrace:
    """The forward pass of a :class:`FeedForward` on a batch: ``out`` (n,) and, on demand, the
    rows ``cot @ d out / d params`` (:meth:`pullback`)."""

    def __init__(self, network: FeedForward, inputs: list[torch.Tensor], stages: list[list[torch.Tensor]],
                 out: torch.Tensor, augmented_first: bool = False) -> None:
        self.network = network
        self.out = out
        self._inputs = inputs  # H_{l-1} of each layer; [X | 1] for the first when augmented_first
        self._augmented_first = augmented_first
        self._stages = stages  # [Z_l, sigma_1(Z_l), ...] of each layer
        self._sensitivities: list[torch.Tensor] | None = None

    def sensitivities(self) -> list[torch.Tensor | None]:
        """``S_l = d out_i / d Z_l[i]`` (n, width_l) of every layer, once for all rows; None for an output
        layer without activation (``S_L = 1``)."""
        if self._sensitivities is None:
            with torch.no_grad():
                layers, n = self.network.layers, self.out.shape[0]
                sens: list[torch.Tensor | None] = [None] * len(layers)
                sens[-1] = G = self._output_sensitivity()
                for index in range(len(layers) - 2, -1, -1):
                    # a (n, 1) column of ones times the weight row: the row, broadcast
                    weight = layers[index + 1].linear.weight
                    G = weight.expand(n, -1) if G is None else G @ weight
                    sens[index] = G = self._activations_backward(index, G, slice(None))
            self._sensitivities = sens
        return self._sensitivities

    def _output_sensitivity(self) -> torch.Tensor | None:
        """``S_L = sigma_L'(Z_L)`` (n, 1) of the output layer; None when it has no activation (``S_L = 1``)."""
        if not self.network.layers[-1].activations:
            return None
        with torch.no_grad():
            return self._activations_backward(len(self.network.layers) - 1, torch.ones_like(self._stages[-1][-1]),
                                              slice(None))

    def _activations_backward(self, index: int, G: torch.Tensor, rows: slice,
                              out: torch.Tensor | None = None) -> torch.Tensor:
        """``G * sigma_l'(Z_l[rows])`` through the activations of layer ``index`` (``G`` unchanged without
        any); the last of them writes into ``out`` when given (see :func:`_activation_backward`)."""
        stages, activations = self._stages[index], self.network.layers[index].activations
        for position in range(len(activations) - 1, -1, -1):
            G = _activation_backward(activations[position], G, stages[position][rows], stages[position + 1][rows],
                                     out=out if position == 0 else None)
        return G

    def pullback(self, cot: torch.Tensor, rows: slice | None = None) -> torch.Tensor:
        """``cot @ d out[rows] / d params`` (k, p) for a contiguous slice ``rows`` of the traced rows, in
        the order of the ``params`` the network was recognised with."""
        start, stop, step = (rows if rows is not None else slice(None)).indices(self.out.shape[0])
        if step != 1:
            raise ValueError(f"rows: expected a contiguous slice (step 1), got step {step}")
        return self._pull([cot], ((start, stop),))[0]

    def pullback_segments(self, cot: torch.Tensor, bounds: Sequence[tuple[int, int]]) -> torch.Tensor:
        """``cot[:, a:b] @ d out[a:b] / d params`` for each disjoint segment ``(a, b)`` of ``bounds`` (the
        strata of :mod:`solvers.strata`), (s, k, p) for ``cot`` (k, n): :meth:`pullback` per segment
        in one call, each segment's products computed while its rows are in cache."""
        if cot.shape[-1] != self.out.shape[0]:
            raise ValueError(f"cot: expected {self.out.shape[0]} columns (one per row), got {cot.shape[-1]}")
        return self._pull([cot[:, a:b] for a, b in bounds], tuple(bounds))

    def _pull(self, cots: list[torch.Tensor], bounds: tuple[tuple[int, int], ...]) -> torch.Tensor:
        """The (s, k, p) pullbacks of ``cots[j]`` (k, b - a) on the segments ``bounds[j] = (a, b)``.

        Below the output unit ``v * S_{L-1} = (u * sigma_{L-1}'(Z_{L-1})) diag(w_L)``, ``u = v * S_L``:
        one activation pass per cotangent, ``w_L`` scaling the small product; only deeper layers read
        :meth:`sensitivities`. Products are ``H' (v * S)``, reading a column-major ``[X | 1]`` along
        its columns."""
        k = cots[0].shape[0]
        for (a, b), cot in zip(bounds, cots):
            if cot.shape[1] != b - a:
                raise ValueError(f"cot: expected {b - a} columns (one per row), got {cot.shape[1]}")
        cots = [cot.to(self.out.dtype) for cot in cots]
        result = cots[0].new_empty(len(bounds), k, self.network.n_params)
        layers, last = self.network.layers, len(self.network.layers) - 1
        with torch.no_grad():
            out_sens = self._output_sensitivity()
            units = cots if out_sens is None else [cot * out_sens[a:b].reshape(1, -1)
                                                   for (a, b), cot in zip(bounds, cots)]
            for seg, (a, b) in enumerate(bounds):  # the output layer: u' H_{L-1}
                self._put_unit(result[seg], units[seg], self._inputs[last][a:b], *self._slots(last))
            if last >= 1:  # the last hidden layer, rank one
                scale, width = layers[last].linear.weight.reshape(-1), layers[last - 1].linear.out_features
                buffer = cots[0].new_empty(max(b - a for a, b in bounds), width)  # one cotangent's u * sigma', reused
                slots = self._slots(last - 1)
                for seg, (a, b) in enumerate(bounds):
                    H = self._inputs[last - 1][a:b]
                    for r in range(k):
                        u = units[seg][r, :, None].expand(b - a, width)
                        G = self._activations_backward(last - 1, u, slice(a, b), out=buffer[:b - a])
                        self._put_layer(result[seg, r], G, H, *slots, scale)
            for index in range(last - 2, -1, -1):  # deeper layers: v * S_l from the sensitivities
                S_all = self.sensitivities()[index]
                buffer = S_all.new_empty(max(b - a for a, b in bounds), S_all.shape[1])  # one segment's v * S, reused
                slots = self._slots(index)
                for seg, ((a, b), cot) in enumerate(zip(bounds, cots)):
                    scaled, S, H = buffer[:b - a], S_all[a:b], self._inputs[index][a:b]
                    for r in range(k):
                        torch.mul(S, cot[r].unsqueeze(1), out=scaled)
                        self._put_layer(result[seg, r], scaled, H, *slots)
        return result

    def squared_pullback(self, weights: torch.Tensor) -> torch.Tensor:
        """``sum_i weights_i (d out_i / d params)^2`` (p,), elementwise squares: the diagonal of
        ``J_out' diag(weights) J_out``, the Gauss-Newton curvature of a loss whose second
        derivatives in the outputs are ``weights``.

        Layer ``l``'s entry ``(k, j)`` is ``sum_i w_i S_l[i, k]^2 H_{l-1}[i, j]^2``, i.e.
        ``(w * S_l^2)' H_{l-1}^2``, and its bias ``sum_i w_i S_l[i, k]^2``: one product per
        layer, like a pullback of one cotangent."""
        w = weights.to(self.out.dtype).reshape(-1, 1)
        if w.shape[0] != self.out.shape[0]:
            raise ValueError(f"weights: expected {self.out.shape[0]} entries (one per row), got {w.shape[0]}")
        result = w.new_zeros(self.network.n_params)
        with torch.no_grad():
            for index, S in enumerate(self.sensitivities()):
                G = w if S is None else w * S * S
                H = self._inputs[index]
                self._put_layer(result, G, H * H, *self._slots(index))
        return result

    def _slots(self, index: int) -> tuple[tuple[int, int] | None, tuple[int, int] | None, bool]:
        """The columns of layer ``index``'s weight and bias in a flat row (None: not a variable), and
        whether its input is ``[X | 1]``."""
        columns = self.network.columns
        return columns.get((index, "weight")), columns.get((index, "bias")), index == 0 and self._augmented_first

    @staticmethod
    def _put_unit(rows: torch.Tensor, u: torch.Tensor, H: torch.Tensor, weight: tuple[int, int] | None,
                  bias: tuple[int, int] | None, augmented: bool) -> None:
        """A one-unit layer's rows: ``dW = u H`` (k, features), ``db = u 1`` for the cotangents ``u`` (k, rows)
        of its output, written into ``rows`` (k, p)."""
        if weight is not None or augmented:
            product = u @ H
            if weight is not None:
                rows[:, slice(*weight)] = product[:, :-1] if augmented else product
            if augmented and bias is not None:
                rows[:, slice(*bias)] = product[:, -1:]
        if bias is not None and not augmented:
            torch.sum(u, 1, keepdim=True, out=rows[:, slice(*bias)])

    @staticmethod
    def _put_layer(row: torch.Tensor, G: torch.Tensor, H: torch.Tensor, weight: tuple[int, int] | None,
                   bias: tuple[int, int] | None, augmented: bool, scale: torch.Tensor | None = None) -> None:
        """A layer's row for one cotangent: ``dW = diag(scale) G' H`` (width, features) and
        ``db = diag(scale) G' 1`` (``scale`` None: ones), ``G = v * S`` (rows, width) without the factor
        ``scale``, written into ``row`` (p,). The product is formed as ``H' G`` (see :meth:`_pull`)."""
        width = G.shape[1]
        if weight is not None or augmented:
            product = H.t() @ G  # (features, width)
            if scale is not None:
                product = product * scale
            if weight is not None:
                row[slice(*weight)].view(width, -1).copy_((product[:-1] if augmented else product).t())
            if augmented and bias is not None:
                row[slice(*bias)] = product[-1]
        if bias is not None and not augmented:
            summed = G.sum(0)
            row[slice(*bias)] = summed if scale is None else summed * scale
