r"""First-order information of one SQP iteration, as a value and as interchangeable oracles.

An SQP iteration needs, at the current parameters ``w``, the objective ``f`` and its
gradient ``g`` on an objective batch, the smooth constraint rows ``c`` and their Jacobian
``J = dc/dw`` on a constraint batch, and the exact (non-smooth) rows ``c_exact`` that
decide feasibility. :class:`Derivatives` holds them; a *derivative oracle* computes them.

:class:`LocalDerivatives`
    On the rows this process holds. One forward pass per batch; ``dc/d out`` through the
    cheap constraint graph (:func:`rows_jacobian`); then the ``1 + m`` rows
    ``[df/d out; dc/d out] @ d out/dw`` are pulled back to the parameters
    (:func:`trace_outputs`: in closed form for a plain feed-forward network,
    :mod:`solvers.feedforward`, else through the autograd graph, :func:`pullback`), or, for
    group-rate rows and a row-wise model, two vectors per stratum of rows (:mod:`solvers.strata`).
:class:`solvers.distributed.AllReduceDerivatives`
    The same values on the union of the row shards of a ``torch.distributed`` process
    group (one all-reduce of additive pieces per iteration).

Engines pick one oracle and never look inside: the data-parallel engine differs from the
local one only by its oracle.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from functools import partial
from typing import Any, Protocol, Sequence, runtime_checkable

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
           "LocalDerivatives", "OutputTrace", "closed_form_network", "flatten_rows", "pullback",
           "rows_and_output_jacobian", "rows_jacobian", "trace_outputs", "vjp", "with_parameter_gradient"]

#: Largest feature matrix (entries) that :meth:`LocalDerivatives.augmented` copies with a column of
#: ones (2^24: 64 MiB in float32, e.g. a million rows of 16 features).
AUGMENT_MAX_ELEMENTS = 2**24

#: Strategies of the pullback: ``"auto"`` (the stratified pullback of :mod:`solvers.strata` when the
#: constraints announce strata and the model is row-wise with a hidden layer; the closed form of
#: :mod:`solvers.feedforward` for a plain feed-forward network, else ``"loop"``), ``"batched"``,
#: ``"loop"`` (both through the autograd graph).
JACOBIAN_MODES: tuple[str, ...] = ("auto", "batched", "loop")


@dataclass
class Derivatives:
    """``f``, ``g`` (p,) on the objective batch; ``c`` (m,) float64, ``J`` (m, p) and the
    exact rows ``c_exact`` (m,) float64 (None without constraints) on the constraint batch;
    seconds spent in the forward pass and in the derivatives; ``skipped``: the Jacobian rows
    left out (zero) on the caller's request (``rows``)."""

    f: float
    g: torch.Tensor
    c: torch.Tensor
    J: torch.Tensor
    c_exact: torch.Tensor | None
    t_forward: float
    t_jacobian: float
    skipped: int = 0


@runtime_checkable
class DerivativeOracle(Protocol):
    """Computes :class:`Derivatives` of ``loss_fn`` and the constraint set ``cons`` for
    ``model`` (whose trainable tensors are ``params``) on ``obj_batch``/``con_batch``
    (``con_batch`` None: unconstrained).

    ``rows`` (bool (m,), optional) names the constraint rows whose Jacobian row the caller
    needs; the others may come back as zero rows (a hint: an oracle may ignore it and
    return every row). ``c`` and ``c_exact`` always hold every row."""

    def __call__(self, model: nn.Module, params: list[torch.Tensor], loss_fn: LossFn, cons: Any, obj_batch: Any,
                 con_batch: Any, rows: torch.Tensor | None = None) -> Derivatives: ...


def with_parameter_gradient(der: Derivatives, loss_fn: LossFn, params: list[torch.Tensor]) -> Derivatives:
    """``der`` with the objective's gradient in the parameters themselves added to ``g``
    (:func:`solvers.losses.parameter_gradient`: an L2 penalty on the weights, which does not
    pass through the outputs that the oracles pull back); ``der`` as it is for other losses."""
    extra = parameter_gradient(loss_fn, params)
    if extra is not None:
        der.g = der.g + extra.to(der.g.dtype)
    return der


def flatten_rows(grads: Sequence[torch.Tensor], k: int) -> torch.Tensor:
    """Concatenate per-parameter gradients (each (k, *shape) or shape) into (k, p)."""
    return torch.cat([gr.reshape(k, -1) for gr in grads], dim=1)


def rows_jacobian(c: torch.Tensor, leaf: torch.Tensor) -> torch.Tensor:
    """``dc/d leaf`` as an (m, n) matrix: one small backward per row through the cheap
    constraint graph (the expensive model graph is not involved)."""
    m = int(c.numel())
    rows = [torch.autograd.grad(c[i], leaf, retain_graph=i < m - 1, allow_unused=True)[0] for i in range(m)]
    return torch.stack([r if r is not None else torch.zeros_like(leaf) for r in rows])


def rows_and_output_jacobian(cons: Any, out: torch.Tensor, batch: Any) -> tuple[torch.Tensor, torch.Tensor]:
    """The smooth rows ``c`` (m,) and ``dc/d out`` (m, n) at the outputs ``out``, without gradient.

    From the constraints' closed form when they offer one (an optional method
    ``rows_and_jacobian(out, batch)`` returning the pair, or None, as
    :meth:`solvers.problem.ConstraintSet.rows_and_jacobian` does); otherwise by one backward pass
    per row through the graph of ``cons(out, batch)`` (:func:`rows_jacobian`). Group-rate rows
    have the closed form ``(D W) * phi'``, which replaces a differentiable evaluation and two
    backward passes (about a tenth of a mini-batch step).
    """
    pair = cons.rows_and_jacobian(out.detach(), batch) if offers_closed_form_rows(cons) else None
    if pair is not None:
        return pair[0].detach().reshape(-1), pair[1].detach()
    leaf = out.detach().requires_grad_(True)
    with torch.enable_grad():
        c = cons(leaf, batch).reshape(-1)
    return c.detach(), rows_jacobian(c, leaf)


def vjp(out: torch.Tensor, params: list[torch.Tensor], cot: torch.Tensor, retain_graph: bool = False) -> torch.Tensor:
    """The row ``cot' d out / dw`` as a flat (p,) vector: the gradient of the scalar ``cot' out``.

    Bit for bit the product ``torch.autograd.grad(out, params, grad_outputs=cot)`` computes (the
    backward pass of ``cot' out`` hands ``1 * cot`` to ``out``), without its tensor
    ``grad_outputs``: PyTorch checks those with its symbolic-shapes module, whose first import
    (sympy) costs a noticeable part of a short fit, once per process.
    """
    scalar = torch.dot(out.reshape(-1), cot.reshape(-1).to(out.dtype))
    return flatten_rows(torch.autograd.grad(scalar, params, retain_graph=retain_graph), 1)[0]


def pullback(out: torch.Tensor, params: list[torch.Tensor], cot: torch.Tensor, jacobian: str = "auto") -> torch.Tensor:
    """Rows ``cot @ d out / d w`` as a (k, p) matrix from the single graph of ``out``.

    ``jacobian="batched"``: one batched vector-Jacobian product (``is_grads_batched``);
    ``"loop"``/``"auto"``: ``k`` backward calls on the retained graph, which
    ``benchmarks/sqp_speed.py`` measured faster on CPU for a few rows.
    """
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
    """:class:`OutputTrace` through the autograd graph of ``model(X)`` (any model): :func:`vjp`
    for one row, :func:`pullback` with the strategy ``jacobian`` for more."""

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
    """The forward pass of ``model`` on ``X`` ready for pullbacks: the closed form of
    :mod:`solvers.feedforward` when ``jacobian="auto"`` and ``model`` is a plain feed-forward network
    whose parameters ``params`` are (faster per full-batch SQP iteration:
    ``benchmarks/results/sqp_speed.txt``), with ``augmented = [X | 1]``
    for its first layer when given (:meth:`solvers.feedforward.FeedForward.trace`); otherwise the
    autograd graph (:class:`AutogradTrace`, strategy ``"loop"`` for ``"auto"``)."""
    network = closed_form_network(model, params, jacobian)
    if network is not None:
        return network.trace(X, augmented)
    return AutogradTrace(model, params, X, "loop" if jacobian == "auto" else jacobian)


def closed_form_network(model: nn.Module, params: list[torch.Tensor], jacobian: str) -> FeedForward | None:
    """The feed-forward network of ``model`` whose pullback the oracles take in closed form: under
    ``jacobian="auto"`` only (``"loop"``/``"batched"`` keep autograd), None for other models."""
    return FeedForward.recognise(model, params) if jacobian == "auto" else None


class LocalDerivatives:
    """The derivative oracle on this process's rows (module docstring).

    Parameters
    ----------
    jacobian : {"auto", "batched", "loop"}
        Strategy of :func:`pullback`.
    """

    def __init__(self, jacobian: str = "auto") -> None:
        self.jacobian = check_choice(jacobian, JACOBIAN_MODES, "jacobian")
        self._plan: StrataPlan | None = None  # the last stratified layout (a full batch recurs every step)
        self._plan_for: tuple[Any, Any, Any] | None = None  # (model, cons, con_batch) of the last plan
        self._inputs: list[tuple[torch.Tensor, int, torch.Tensor]] = []  # (X, its version, [X | 1]), newest last
        self._data_strata: tuple[torch.Tensor, Any] | None = None  # (stratum code per row, a row of each)
        self._drawn: tuple[Any, RowStrata] | None = None  # the last constraint batch drawn by index, its strata

    def know_strata(self, cons: Any, data: Any) -> bool:
        """Read the strata of every row of ``data`` once (``cons.strata(data)``), so that the constraint
        rows of batches drawn from it by index (:meth:`rows_drawn`) come from per-stratum sums
        (``cons.rows_and_factors``) instead of the batch's own ``G x n`` operator and ``m x n``
        Jacobian (a little faster per mini-batch step, the more so the more constraints share
        the strata). True when ``cons``
        offers this (members that share one direction, :attr:`~solvers.problem.ConstraintSet.shared_direction`,
        with ``strata`` and ``rows_and_factors``); otherwise False and batches keep the plain path."""
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
        """``[X | 1]`` for a feature matrix ``X`` of at least :data:`solvers.strata.MIN_ROWS` rows and
        at most :data:`AUGMENT_MAX_ELEMENTS` entries (``jacobian="auto"``), else None.

        The closed-form network then takes the first layer's weight and bias as one matrix
        (:meth:`solvers.feedforward.FeedForward.trace`), at the price of one copy of ``X`` with a
        column of ones. The copies of the two most recent matrices are kept, so that a full batch,
        traced at every iteration, is copied once (and a mini-batch objective beside a full
        constraint batch keeps the latter's copy). The copy is column-major (a transposed view of a
        contiguous ``(features + 1, n)`` matrix): the forward product runs as fast in either layout,
        and the pullback's ``[X | 1]' (v * S)`` reads it column by column (faster per product than
        the row-major copy on tens of thousands of rows). A rule on the batch alone, not on what was seen
        before: a resumed fit takes the same path, bit for bit."""
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
                 con_batch: Any, rows: torch.Tensor | None = None) -> Derivatives:
        plan = self.stratified_plan(model, cons, con_batch)
        if plan is None:
            der = self._plain(model, params, loss_fn, cons, obj_batch, con_batch, rows)
        else:
            der = self._stratified(model, params, loss_fn, cons, obj_batch, plan)
        return with_parameter_gradient(der, loss_fn, params)

    def _may_stratify(self, model: nn.Module, cons: Any, con_batch: Any) -> bool:
        """``"auto"``, constraints with strata, a batch of at least :data:`solvers.strata.MIN_ROWS`
        rows and a row-wise model with a hidden layer: a linear model's backward pass is one cheap
        product that does not repay a model pass per stratum (slower per Jacobian), nor does a
        small mini-batch. A rule, not a timing, so that a fit is
        reproducible bit for bit (and a resumed fit continues exactly)."""
        return (self.jacobian == "auto" and con_batch is not None and len(con_batch) >= MIN_ROWS
                and offers_strata(cons) and is_rowwise(model) and has_hidden_layer(model))

    def _plain(self, model: nn.Module, params: list[torch.Tensor], loss_fn: LossFn, cons: Any, obj_batch: Any,
               con_batch: Any, rows: torch.Tensor | None) -> Derivatives:
        """:class:`Derivatives` from one trace per batch (:func:`trace_outputs`)."""
        t0 = time.perf_counter()
        trace = trace_outputs(model, params, obj_batch.X, self.jacobian, self.augmented(obj_batch.X))
        same = con_batch is obj_batch
        trace_c = trace if same else (trace_outputs(model, params, con_batch.X, self.jacobian,
                                                    self.augmented(con_batch.X)) if con_batch is not None else None)
        out, out_c = trace.out, (trace_c.out if trace_c is not None else None)
        t1 = time.perf_counter()

        f, df = value_and_gradient(loss_fn, out, obj_batch)
        if out_c is None:  # unconstrained
            g = trace.pullback(df.reshape(1, -1))[0]
            return Derivatives(float(f), g, torch.zeros(0, dtype=torch.float64),
                               torch.zeros(0, g.numel(), dtype=g.dtype), None, t1 - t0, time.perf_counter() - t1)

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
        if same:
            flat = trace.pullback(torch.cat([df.reshape(1, -1), dc.to(df.dtype)], dim=0))
            g, J = flat[0], flat[1:]
        else:
            g = trace.pullback(df.reshape(1, -1))[0]
            J = trace_c.pullback(dc.to(out_c.dtype)) if dc.shape[0] else g.new_zeros(0, g.numel())
        if wanted is not None:
            J = g.new_zeros(c.numel(), g.numel()).index_copy_(0, wanted, J)
        c_exact = (factors.exact if factors is not None and factors.exact is not None
                   else exact_rows(cons, out_c, con_batch, smooth=c))
        return Derivatives(float(f), g, c.to(torch.float64), J, c_exact, t1 - t0,
                           time.perf_counter() - t1, 0 if wanted is None else c.numel() - wanted.numel())

    def _stratified(self, model: nn.Module, params: list[torch.Tensor], loss_fn: LossFn, cons: Any, obj_batch: Any,
                    plan: StrataPlan) -> Derivatives:
        """:class:`Derivatives` by the stratified pullback (:mod:`solvers.strata`) on the reordered
        constraint batch. A plain feed-forward network is traced once and each stratum is a segment
        of the trace (:mod:`solvers.feedforward`); any other row-wise model runs on each stratum's
        rows separately. Constraints whose members share one direction (``shared_direction``) give
        ``dc/d out`` as one vector ``v`` and a coefficient column per stratum (``rows_and_factors``,
        else factored from the dense matrix): ``v`` and the objective's ``df/d out`` (when the
        objective batch is the constraint batch) are pulled back together, segment by segment.
        Otherwise each stratum's block is factored and checked (:func:`solvers.strata.rank_one_factors`)
        and pulled back on its own. Every Jacobian row is computed (``rows`` does not apply)."""
        t0 = time.perf_counter()
        batch, bounds = plan.batch, plan.bounds
        same = obj_batch is plan.source
        network = closed_form_network(model, params, self.jacobian)
        if network is not None:
            whole = network.trace(batch.X, self.augmented(batch.X))
            out_c = whole.out
            pulls = [partial(whole.pullback, rows=slice(a, b)) for a, b in bounds]
        else:
            traces = [AutogradTrace(model, params, batch.X[a:b]) for a, b in bounds]
            out_c = torch.cat([t.out.detach() for t in traces])
            pulls = [t.pullback for t in traces]
        trace_obj = None if same else trace_outputs(model, params, obj_batch.X, self.jacobian)
        t1 = time.perf_counter()

        obj_out, obj_rows = (out_c, batch) if same else (trace_obj.out, obj_batch)
        f, df = value_and_gradient(loss_fn, obj_out, obj_rows)
        df = df.reshape(1, -1).to(out_c.dtype)
        g = None if same else trace_obj.pullback(df)[0]
        if shares_direction(cons):
            factors = self._factors(cons, out_c, plan)
            c, v = factors.c, factors.direction
            cot = torch.cat([df, v[None, :]]) if same else v[None, :]
            if network is not None:
                pulled = whole.pullback_segments(cot, bounds)  # (strata, rows of cot, p)
            else:
                pulled = torch.stack([pull(cot[:, a:b]) for pull, (a, b) in zip(pulls, bounds)])
            g = pulled[:, 0].sum(0) if same else g
            J = factors.coef.to(pulled.dtype) @ pulled[:, -1]
            c_exact = factors.exact if factors.exact is not None else exact_rows(cons, out_c, batch, smooth=c)
        else:
            p = sum(int(t.numel()) for t in params)
            c, g_strata, J = self._checked_strata(cons, out_c, batch, bounds, pulls, df if same else None, p)
            g = g_strata if same else g
            c_exact = exact_rows(cons, out_c, batch, smooth=c)
        return Derivatives(float(f), g, c.detach().to(torch.float64), J, c_exact, t1 - t0,
                           time.perf_counter() - t1)

    @staticmethod
    def _factors(cons: Any, out: torch.Tensor, plan: StrataPlan) -> RowFactors:
        """The rows and factors of constraints that share one direction, on the reordered batch of
        ``plan``: their own ``rows_and_factors`` when they offer it, else the factors of the dense
        ``dc/d out`` (``exact`` None: the caller evaluates the exact rows)."""
        factors = cons.rows_and_factors(out, plan.batch, plan.strata) if offers_factored_rows(cons) else None
        if factors is not None:
            return factors
        c, dc = rows_and_output_jacobian(cons, out, plan.batch)
        coef, direction = segment_factors(dc, plan.bounds)
        return RowFactors(c, None, coef, direction)

    @staticmethod
    def _checked_strata(cons: Any, out: torch.Tensor, batch: Any, bounds: tuple[tuple[int, int], ...], pulls: list,
                        df: torch.Tensor | None, p: int) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor]:
        """``(c, g, J)`` with each stratum's block of ``dc/d out`` factored and checked
        (:func:`solvers.strata.rank_one_factors`) and pulled back by ``pulls[k]`` together with the
        objective's ``df`` (1, n) when given (``g`` their sum; None without ``df``); ``p`` parameters."""
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
