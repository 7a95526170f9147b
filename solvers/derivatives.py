r"""First-order information of one SQP iteration, as a value and as interchangeable oracles.

An iteration needs ``f`` and ``g`` on an objective batch, the smooth rows ``c``, ``J = dc/dw`` and
the exact rows ``c_exact`` on a constraint batch (:class:`Derivatives`). :class:`LocalDerivatives`
computes them on this process's rows: one forward pass per batch, ``dc/d out`` through the cheap
constraint graph, then ``[df/d out; dc/d out] @ d out/dw`` pulled back in closed form
(:mod:`solvers.feedforward`), through autograd (:func:`pullback`), or per stratum of rows
(:mod:`solvers.strata`). :class:`solvers.distributed.AllReduceDerivatives` gives the same values on
the union of a process group's row shards; engines differ only by their oracle.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from functools import partial
from typing import Any, Callable, Protocol, Sequence, runtime_checkable

import torch
from torch import nn

from solvers.contract import offers_closed_form_rows, offers_factored_rows, offers_strata, shares_direction
from solvers.feedforward import FeedForward
from solvers.losses import LossFn, parameter_gradient, value_and_gradient
from solvers.problem import RowFactors, exact_rows, row_outputs
from solvers.strata import (MIN_ROWS, RowStrata, StrataPlan, has_hidden_layer, is_rowwise, plan_strata,
                            rank_one_factors, segment_factors, stratum_codes)
from solvers.validation import check_choice

__all__ = ["AUGMENT_MAX_ELEMENTS", "AutogradTrace", "DerivativeOracle", "Derivatives", "JACOBIAN_MODES",
           "LocalDerivatives", "NetworkRecogniser", "OutputTrace", "closed_form_network", "flatten_rows", "pullback",
           "rows_and_output_jacobian", "rows_jacobian", "trace_outputs", "trace_through", "vjp",
           "with_parameter_gradient"]

#: Largest feature matrix (entries) that :meth:`LocalDerivatives.augmented` copies (64 MiB in float32).
AUGMENT_MAX_ELEMENTS = 2**24

#: Strategies of the pullback (``SQPOptions.jacobian``).
JACOBIAN_MODES: tuple[str, ...] = ("auto", "batched", "loop")


@dataclass
class Derivatives:
    """``f``, ``g`` (p,; None when the caller asked for no objective gradient); ``c`` (m,) float64,
    ``J`` (m, p), ``c_exact`` (m,) float64 or None; seconds of
    the forward pass and of the derivatives; ``skipped``: Jacobian rows left zero on request;
    ``curvature``: when the engine uses a curvature metric, a call that returns the objective's
    Gauss-Newton diagonal on the same objective batch (:mod:`solvers.curvature`; computed only
    by a step that needs it)."""

    f: float
    g: torch.Tensor | None
    c: torch.Tensor
    J: torch.Tensor
    c_exact: torch.Tensor | None
    t_forward: float
    t_jacobian: float
    skipped: int = 0
    curvature: Callable[[], torch.Tensor] | None = None


@runtime_checkable
class DerivativeOracle(Protocol):
    """:class:`Derivatives` of ``loss_fn`` and ``cons`` on ``obj_batch``/``con_batch`` (None:
    unconstrained); ``rows`` (bool (m,)) hints which Jacobian rows are needed, the rest may be zero;
    ``objective_gradient=False`` says the caller reads ``f`` but not ``g`` (a mini-batch SQP snapshot
    refresh), which an oracle may then leave None and save its pullback."""

    def __call__(self, model: nn.Module, params: list[torch.Tensor], loss_fn: LossFn, cons: Any, obj_batch: Any,
                 con_batch: Any, rows: torch.Tensor | None = None, *,
                 objective_gradient: bool = True) -> Derivatives: ...


def with_parameter_gradient(der: Derivatives, loss_fn: LossFn, params: list[torch.Tensor]) -> Derivatives:
    """``der`` with the gradient of terms on the parameters themselves (an L2 penalty), which do not
    pass through the outputs, added to ``g``."""
    extra = parameter_gradient(loss_fn, params) if der.g is not None else None
    if extra is not None:
        der.g = der.g + extra.to(der.g.dtype)
    return der


def flatten_rows(grads: Sequence[torch.Tensor], k: int) -> torch.Tensor:
    """Concatenate per-parameter gradients (each (k, *shape) or shape) into (k, p)."""
    return torch.cat([gr.reshape(k, -1) for gr in grads], dim=1)


def rows_jacobian(c: torch.Tensor, leaf: torch.Tensor) -> torch.Tensor:
    """``dc/d leaf`` (m, n): one backward per row through the cheap constraint graph only."""
    m = int(c.numel())
    if m == 0:  # no constraint rows (an unconstrained run's all-row derivatives)
        return leaf.new_zeros((0, *leaf.shape))
    rows = [torch.autograd.grad(c[i], leaf, retain_graph=i < m - 1, allow_unused=True)[0] for i in range(m)]
    return torch.stack([r if r is not None else torch.zeros_like(leaf) for r in rows])


def rows_and_output_jacobian(cons: Any, out: torch.Tensor, batch: Any) -> tuple[torch.Tensor, torch.Tensor]:
    """``c`` (m,) and ``dc/d out`` (m, n) without gradient: the constraints' closed form
    (:class:`solvers.contract.ClosedFormRows`) when offered, else :func:`rows_jacobian`."""
    pair = cons.rows_and_jacobian(out.detach(), batch) if offers_closed_form_rows(cons) else None
    if pair is not None:
        return pair[0].detach().reshape(-1), pair[1].detach()
    leaf = out.detach().requires_grad_(True)
    with torch.enable_grad():
        c = cons(leaf, batch).reshape(-1)
    return c.detach(), rows_jacobian(c, leaf)


def vjp(out: torch.Tensor, params: list[torch.Tensor], cot: torch.Tensor, retain_graph: bool = False) -> torch.Tensor:
    """``cot' d out / dw`` (p,) as the gradient of the scalar ``cot' out``: bit for bit what
    ``grad_outputs=cot`` gives, without the symbolic-shapes import (sympy) that argument triggers."""
    scalar = torch.dot(out.reshape(-1), cot.reshape(-1).to(out.dtype))
    return flatten_rows(torch.autograd.grad(scalar, params, retain_graph=retain_graph), 1)[0]


def pullback(out: torch.Tensor, params: list[torch.Tensor], cot: torch.Tensor, jacobian: str = "auto") -> torch.Tensor:
    """``cot @ d out / d w`` (k, p): one batched VJP ("batched") or ``k`` backward calls on the
    retained graph ("loop"/"auto", faster on CPU for a few rows)."""
    k = cot.shape[0]
    if jacobian == "batched":
        grads = torch.autograd.grad(out, params, grad_outputs=cot, is_grads_batched=True, retain_graph=True)
        return flatten_rows(grads, k)
    return torch.stack([vjp(out, params, cot[i], retain_graph=i < k - 1) for i in range(k)])


class OutputTrace(Protocol):
    """A model's outputs ``out`` (n,) on a batch and the pullback ``cot (k, n) -> cot @ d out/dw``
    (k, p), called at most once per trace."""

    out: torch.Tensor

    def pullback(self, cot: torch.Tensor) -> torch.Tensor: ...


class AutogradTrace:
    """:class:`OutputTrace` through the autograd graph of any ``model(X)``."""

    def __init__(self, model: nn.Module, params: list[torch.Tensor], X: torch.Tensor, jacobian: str = "loop") -> None:
        self.out = row_outputs(model(X), X.shape[0])
        self._params = params
        self._jacobian = jacobian

    def pullback(self, cot: torch.Tensor) -> torch.Tensor:
        if cot.shape[0] == 1:
            return vjp(self.out, self._params, cot[0]).reshape(1, -1)
        return pullback(self.out, self._params, cot, self._jacobian)


def trace_outputs(model: nn.Module, params: list[torch.Tensor], X: torch.Tensor, jacobian: str = "auto",
                  augmented: torch.Tensor | None = None) -> OutputTrace:
    """The forward pass on ``X`` ready for pullbacks: in closed form for a plain feed-forward network
    under "auto" (``augmented = [X | 1]`` for its first layer), else :class:`AutogradTrace`."""
    return trace_through(closed_form_network(model, params, jacobian), model, params, X, jacobian, augmented)


def trace_through(network: FeedForward | None, model: nn.Module, params: list[torch.Tensor], X: torch.Tensor,
                  jacobian: str = "auto", augmented: torch.Tensor | None = None) -> OutputTrace:
    """:func:`trace_outputs` with ``model`` already recognised: ``network`` (None: not in closed form)."""
    if network is not None:
        return network.trace(X, augmented)
    return AutogradTrace(model, params, X, "loop" if jacobian == "auto" else jacobian)


def closed_form_network(model: nn.Module, params: list[torch.Tensor], jacobian: str) -> FeedForward | None:
    """``model`` as a :class:`FeedForward` under ``jacobian="auto"``, else None."""
    return FeedForward.recognise(model, params) if jacobian == "auto" else None


class NetworkRecogniser:
    """:func:`closed_form_network`, recognised once for as long as the same model (in the same training
    mode, which decides whether a dropout layer is inert) is asked about with the same parameter tensors:
    an oracle's every call during a fit asks."""

    def __init__(self, jacobian: str = "auto") -> None:
        self.jacobian = jacobian
        self._last: tuple[Any, bool, tuple[torch.Tensor, ...], FeedForward | None] | None = None

    def __call__(self, model: nn.Module, params: list[torch.Tensor]) -> FeedForward | None:
        last = self._last
        if (last is not None and last[0] is model and last[1] == model.training and len(last[2]) == len(params)
                and all(a is b for a, b in zip(last[2], params))):
            return last[3]
        network = closed_form_network(model, params, self.jacobian)
        self._last = (model, model.training, tuple(params), network)
        return network


class LocalDerivatives:
    """The derivative oracle on this process's rows, with pullback strategy ``jacobian``."""

    def __init__(self, jacobian: str = "auto") -> None:
        self.jacobian = check_choice(jacobian, JACOBIAN_MODES, "jacobian")
        self._plan: StrataPlan | None = None  # the last stratified layout (a full batch recurs every step)
        self._plan_for: tuple[Any, Any, Any] | None = None  # (model, cons, con_batch) of the last plan
        self._inputs: list[tuple[torch.Tensor, int, torch.Tensor]] = []  # (X, its version, [X | 1]), newest last
        self._data_strata: tuple[torch.Tensor, Any] | None = None  # (stratum code per row, a row of each)
        self._drawn: tuple[Any, RowStrata] | None = None  # the last constraint batch drawn by index, its strata
        self._recognise = NetworkRecogniser(self.jacobian)

    def network(self, model: nn.Module, params: list[torch.Tensor]) -> FeedForward | None:
        """:func:`closed_form_network` of ``model`` with ``params`` (:class:`NetworkRecogniser`: once per
        model, training mode and parameter list)."""
        return self._recognise(model, params)

    def know_strata(self, cons: Any, data: Any) -> bool:
        """Read the strata of all rows of ``data`` once, so that batches drawn by index
        (:meth:`rows_drawn`) get their rows from per-stratum sums instead of an ``m x n`` Jacobian.
        False, keeping the plain path, unless ``cons`` shares one direction and offers factored rows."""
        self._data_strata, self._drawn = None, None
        if not (shares_direction(cons) and offers_factored_rows(cons)):
            return False
        codes = stratum_codes(cons, data)
        if codes is None or codes.numel() == 0:
            return False
        n = codes.numel()
        first = torch.full((int(codes.max()) + 1,), n, dtype=torch.long)
        first.scatter_reduce_(0, codes, torch.arange(n), reduce="amin")  # every code occurs (row_codes numbers them)
        self._data_strata = (codes, data.subset(first))
        return True

    def rows_drawn(self, batch: Any, idx: torch.Tensor) -> None:
        """Declare the constraint batch ``batch`` to be ``data.subset(idx)`` of the data of
        :meth:`know_strata` (no effect before it); the last declaration is kept."""
        if self._data_strata is None:
            return
        codes, representatives = self._data_strata
        self._drawn = (batch, RowStrata(codes.index_select(0, torch.as_tensor(idx, dtype=torch.long)), representatives))

    def _row_strata(self, batch: Any) -> RowStrata | None:
        return self._drawn[1] if self._drawn is not None and self._drawn[0] is batch else None

    def augmented(self, X: torch.Tensor) -> torch.Tensor | None:
        """``[X | 1]`` under "auto" for ``X`` of at least :data:`solvers.strata.MIN_ROWS` rows and at most
        :data:`AUGMENT_MAX_ELEMENTS` entries, else None: the first layer's weight and bias as one
        product. The two newest copies are kept (a full batch is copied once); column-major, since the
        pullback's ``[X | 1]' (v * S)`` reads columns. A rule on the batch alone, so a resumed fit
        takes the same path."""
        if self.jacobian != "auto" or X.shape[0] < MIN_ROWS or X.numel() > AUGMENT_MAX_ELEMENTS:
            return None
        for position, (seen, version, copy) in enumerate(self._inputs):
            if seen is X and version == X._version:
                del self._inputs[position]
                self._inputs.append((X, version, copy))
                return copy
        with torch.no_grad():  # column-major: the pullback's products read it along its columns
            columns = torch.empty(X.shape[1] + 1, X.shape[0], dtype=X.dtype, device=X.device)
            columns[:-1] = X.t()
            columns[-1] = 1
            copy = columns.t()
        self._inputs = self._inputs[-1:] + [(X, X._version, copy)]
        return copy

    def stratified_plan(self, model: nn.Module, cons: Any, con_batch: Any) -> StrataPlan | None:
        """The layout of the stratified pullback for this call, or None for the plain one
        (``jacobian != "auto"``, a model that is not row-wise, constraints without strata)."""
        last = self._plan_for
        if last is not None and last[0] is model and last[1] is cons and last[2] is con_batch:
            return self._plan  # a full batch recurs every step: the model's type checks are not repeated
        if not self._may_stratify(model, cons, con_batch):
            return None
        self._plan, self._plan_for = plan_strata(cons, con_batch), (model, cons, con_batch)
        return self._plan

    def __call__(self, model: nn.Module, params: list[torch.Tensor], loss_fn: LossFn, cons: Any, obj_batch: Any,
                 con_batch: Any, rows: torch.Tensor | None = None, *,
                 objective_gradient: bool = True) -> Derivatives:
        plan = self.stratified_plan(model, cons, con_batch)
        if plan is None:
            der = self._plain(model, params, loss_fn, cons, obj_batch, con_batch, rows, objective_gradient)
        else:
            der = self._stratified(model, params, loss_fn, cons, obj_batch, plan, objective_gradient)
        return with_parameter_gradient(der, loss_fn, params)

    def _may_stratify(self, model: nn.Module, cons: Any, con_batch: Any) -> bool:
        """"auto", constraints with strata, at least :data:`solvers.strata.MIN_ROWS` rows and a row-wise
        model with a hidden layer (a linear model or a small batch does not repay a pass per stratum).
        A rule, not a timing, so that fits are reproducible."""
        return (self.jacobian == "auto" and con_batch is not None and len(con_batch) >= MIN_ROWS
                and offers_strata(cons) and is_rowwise(model) and has_hidden_layer(model))

    def _plain(self, model: nn.Module, params: list[torch.Tensor], loss_fn: LossFn, cons: Any, obj_batch: Any,
               con_batch: Any, rows: torch.Tensor | None, objective_gradient: bool = True) -> Derivatives:
        """:class:`Derivatives` from one trace per batch (:func:`trace_outputs`); ``g`` None without
        ``objective_gradient``."""
        t0 = time.perf_counter()
        network = self.network(model, params)
        trace = trace_through(network, model, params, obj_batch.X, self.jacobian, self.augmented(obj_batch.X))
        same = con_batch is obj_batch
        trace_c = trace if same else (trace_through(network, model, params, con_batch.X, self.jacobian,
                                                    self.augmented(con_batch.X)) if con_batch is not None else None)
        out, out_c = trace.out, (trace_c.out if trace_c is not None else None)
        t1 = time.perf_counter()

        f, df = value_and_gradient(loss_fn, out, obj_batch)
        p = sum(int(t.numel()) for t in params)
        if out_c is None:  # unconstrained
            g = trace.pullback(df.reshape(1, -1))[0] if objective_gradient else None
            return Derivatives(float(f), g, torch.zeros(0, dtype=torch.float64),
                               torch.zeros(0, p, dtype=out.dtype), None, t1 - t0, time.perf_counter() - t1)

        strata = self._row_strata(con_batch)
        factors = cons.rows_and_factors(out_c, con_batch, strata) if strata is not None else None
        if factors is not None:  # per-stratum sums (know_strata)
            c, dc = factors.c, strata.expand(factors.coef) * factors.direction[None, :]
        else:
            c, dc = rows_and_output_jacobian(cons, out_c, con_batch)  # (m,), (m, n_c)
        if rows is not None and rows.shape != c.shape:
            raise ValueError(f"rows: expected a bool mask of shape ({c.numel()},), got {tuple(rows.shape)}")
        wanted = None if rows is None or bool(rows.all()) else torch.nonzero(rows).reshape(-1)
        if wanted is not None:  # pull back only the rows asked for (one backward pass each)
            dc = dc[wanted]
        if same and objective_gradient:
            flat = trace.pullback(torch.cat([df.reshape(1, -1), dc.to(df.dtype)], dim=0))
            g, J = flat[0], flat[1:]
        else:
            g = trace.pullback(df.reshape(1, -1))[0] if objective_gradient else None
            J = trace_c.pullback(dc.to(out_c.dtype)) if dc.shape[0] else out_c.new_zeros(0, p)
        if wanted is not None:
            J = J.new_zeros(c.numel(), p).index_copy_(0, wanted, J)
        c_exact = (factors.exact if factors is not None and factors.exact is not None
                   else exact_rows(cons, out_c, con_batch, smooth=c))
        return Derivatives(float(f), g, c.to(torch.float64), J, c_exact, t1 - t0,
                           time.perf_counter() - t1, 0 if wanted is None else c.numel() - wanted.numel())

    def _stratified(self, model: nn.Module, params: list[torch.Tensor], loss_fn: LossFn, cons: Any, obj_batch: Any,
                    plan: StrataPlan, objective_gradient: bool = True) -> Derivatives:
        """:class:`Derivatives` by the stratified pullback on the reordered constraint batch (every row).
        A feed-forward network is traced once, a stratum being a segment; other row-wise models run
        per stratum. With a shared direction ``v``, ``J = coef @ (v pulled back per segment)``, with
        ``df/d out`` pulled back alongside (not at all without ``objective_gradient``: ``g`` None);
        otherwise each block is factored, checked and pulled back."""
        t0 = time.perf_counter()
        batch, bounds = plan.batch, plan.bounds
        same = obj_batch is plan.source
        network = self.network(model, params)
        if network is not None:
            whole = network.trace(batch.X, self.augmented(batch.X))
            out_c = whole.out
            pulls = [partial(whole.pullback, rows=slice(a, b)) for a, b in bounds]
        else:
            traces = [AutogradTrace(model, params, batch.X[a:b]) for a, b in bounds]
            out_c = torch.cat([t.out.detach() for t in traces])
            pulls = [t.pullback for t in traces]
        trace_obj = None if same else trace_through(network, model, params, obj_batch.X, self.jacobian)
        t1 = time.perf_counter()

        obj_out, obj_rows = (out_c, batch) if same else (trace_obj.out, obj_batch)
        f, df = value_and_gradient(loss_fn, obj_out, obj_rows)
        df = df.reshape(1, -1).to(out_c.dtype)
        g = None if same or not objective_gradient else trace_obj.pullback(df)[0]
        along = same and objective_gradient  # df pulled back with the constraints' cotangents
        if shares_direction(cons):
            factors = self._factors(cons, out_c, plan)
            c, v = factors.c, factors.direction
            cot = torch.cat([df, v[None, :]]) if along else v[None, :]
            if network is not None:
                pulled = whole.pullback_segments(cot, bounds)  # (strata, rows of cot, p)
            else:
                pulled = torch.stack([pull(cot[:, a:b]) for pull, (a, b) in zip(pulls, bounds)])
            g = pulled[:, 0].sum(0) if along else g
            J = factors.coef.to(pulled.dtype) @ pulled[:, -1]
            c_exact = factors.exact if factors.exact is not None else exact_rows(cons, out_c, batch, smooth=c)
        else:
            p = sum(int(t.numel()) for t in params)
            c, g_strata, J = self._checked_strata(cons, out_c, batch, bounds, pulls, df if along else None, p)
            g = g_strata if along else g
            c_exact = exact_rows(cons, out_c, batch, smooth=c)
        return Derivatives(float(f), g, c.detach().to(torch.float64), J, c_exact, t1 - t0,
                           time.perf_counter() - t1)

    @staticmethod
    def _factors(cons: Any, out: torch.Tensor, plan: StrataPlan) -> RowFactors:
        """Rows and factors on ``plan``'s batch: ``rows_and_factors`` if offered, else factored from the
        dense ``dc/d out`` (``exact`` None)."""
        factors = cons.rows_and_factors(out, plan.batch, plan.strata) if offers_factored_rows(cons) else None
        if factors is not None:
            return factors
        c, dc = rows_and_output_jacobian(cons, out, plan.batch)
        coef, direction = segment_factors(dc, plan.bounds)
        return RowFactors(c, None, coef, direction)

    @staticmethod
    def _checked_strata(cons: Any, out: torch.Tensor, batch: Any, bounds: tuple[tuple[int, int], ...], pulls: list,
                        df: torch.Tensor | None, p: int) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor]:
        """``(c, g, J)``, each stratum's block factored, checked and pulled back by ``pulls[k]`` with the
        objective's ``df`` (1, n) when given (else ``g`` None)."""
        c, dc = rows_and_output_jacobian(cons, out, batch)
        J = out.new_zeros(c.numel(), p)
        g = None if df is None else out.new_zeros(p)
        for (a, b), pull in zip(bounds, pulls):
            coef, factors = rank_one_factors(dc[:, a:b])
            cot = factors.to(out.dtype) if df is None else torch.cat([df[:, a:b], factors.to(out.dtype)])
            if cot.shape[0] == 0:
                continue
            pulled = pull(cot)
            if df is not None:
                g += pulled[0]
                pulled = pulled[1:]
            if coef.shape[1]:
                J += coef.to(J.dtype) @ pulled
        return c, g, J
