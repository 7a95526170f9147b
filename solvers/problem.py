"""Protocols shared by every engine: datasets, batches, constraints and encodings.

The engines are fairness-agnostic: they see data only through :class:`Dataset` and a constraint
only through :class:`Constraint` and the optional capabilities of :mod:`solvers.contract`. A
constraint contributes ``m`` rows ``l_i <= c_i(out) <= u_i`` (a side may be infinite), with
violation ``max(c_i - u_i, 0) + max(l_i - c_i, 0)``, summed to ``V(c)``; constraints compose by
concatenating rows (:class:`ConstraintSet`).
"""

from __future__ import annotations

import contextlib
import contextvars
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Iterator, NamedTuple, Protocol, Sequence, runtime_checkable

import numpy as np
import torch

from solvers.contract import (Constraint, calibrated_form, check_bounds, check_constraint, declared_row_names,
                              jacobian_direction, offers_closed_form_rows, offers_factored_rows,
                              offers_setup, offers_strata, offers_target_encoding, row_scale, smooth_is_exact)
from solvers.strata import row_codes

__all__ = [
    "calibrated_spread",
    "is_network",
    "row_chunks",
    "RowFactors",
    "shared_scratch",
    "shared_value",
    "Batch",
    "Dataset",
    "Constraint",
    "ConstraintSet",
    "as_constraint_set",
    "LinearEncoding",
    "violation",
    "trainable_parameters",
    "check_dataset",
    "split_rows",
    "RowSplit",
    "row_violations",
    "exact_rows",
    "model_outputs",
    "float64_forward",
    "prediction_outputs",
    "eval_mode",
    "changes_in_eval_mode",
    "check_outputs_differentiable",
    "row_outputs",
    "row_weights",
    "weight_total",
    "weighted_mean",
]


@runtime_checkable
class Batch(Protocol):
    """A set of rows: model inputs ``X`` (n, p) and targets ``y`` (n,).

    A batch may also carry ``weights``, a float tensor (n,) of ``w_i >= 0`` (absent or None:
    unweighted), read through :func:`row_weights`; every mean over rows then becomes
    ``sum_i w_i v_i / sum_i w_i`` (:func:`weighted_mean`), and ``subset`` keeps each row's weight.
    It is not a protocol member because ``isinstance`` would then require it of every batch.
    """

    X: torch.Tensor
    y: torch.Tensor

    def __len__(self) -> int: ...

    def subset(self, idx: Any) -> "Batch":
        """Rows ``idx`` as a batch of the same type (constraints read their fields)."""
        ...


@runtime_checkable
class Dataset(Batch, Protocol):
    """A batch with ``strata``: a long tensor (n,) of group ids for balanced samplers ([SQP] Thm 3.1),
    or None."""

    @property
    def strata(self) -> torch.Tensor | None: ...


def trainable_parameters(model: Any) -> list[torch.Tensor]:
    """The parameters an engine trains; ValueError for a non-module or a frozen model."""
    if not isinstance(model, torch.nn.Module):
        raise ValueError(f"model: expected a torch.nn.Module, got {type(model).__name__}")
    params = [p for p in model.parameters() if p.requires_grad]
    if not params:
        raise ValueError("model: has no trainable parameters")
    return params


def check_outputs_differentiable(model: torch.nn.Module, data: Any) -> None:
    """ValueError when ``model``'s outputs on two rows of ``data`` do not depend on its trainable parameters
    (a ``detach()``, ``torch.no_grad()`` or ``.numpy()`` inside ``forward``), which autograd would report
    only as "element 0 of tensors does not require grad", or are not one per row (:func:`row_outputs`); run
    in eval mode, so that no running statistic moves."""
    rows = data.subset(torch.arange(min(2, len(data))))
    dtypes = {p.dtype for p in model.parameters() if p.is_floating_point()} - {rows.X.dtype}
    if rows.X.is_floating_point() and dtypes:
        raise ValueError(f"model: its parameters are {', '.join(sorted(map(str, dtypes)))} but the inputs are "
                         f"{rows.X.dtype}; build the module in the inputs' dtype (e.g. without .double())")
    with torch.enable_grad(), eval_mode(model):
        out = model(rows.X)
    row_outputs(out, rows.X.shape[0])  # a wrong output shape, before any set-up
    if not out.requires_grad:
        raise ValueError("model: its output does not depend on its trainable parameters (is it detached, or "
                         "computed under torch.no_grad(), in forward?); the engines differentiate it")


def row_outputs(out: Any, n: int, what: str = "model") -> torch.Tensor:
    """A model's outputs as shape ``(n,)``, the engines' convention; an ``(n, 1)`` column (a
    ``torch.nn.Linear(p, 1)``) is squeezed as a view."""
    if not isinstance(out, torch.Tensor):
        raise ValueError(f"{what}: expected a tensor output, got {type(out).__name__}")
    if out.dim() == 2 and out.shape[0] == n and out.shape[1] == 1:
        out = out.squeeze(1)
    if out.dim() != 1 or out.shape[0] != n:
        hint = ("; a binary classifier's module outputs the positive class's logit alone: for one logit per class "
                "return logits[:, 1] - logits[:, 0]" if out.dim() == 2 and out.shape[0] == n and out.shape[1] == 2
                else "")
        raise ValueError(f"{what}: expected one output per row, shape ({n},) or ({n}, 1) on {n} rows, got "
                         f"{tuple(out.shape)}{hint}")
    return out


def row_weights(batch: Any, like: torch.Tensor | None = None) -> torch.Tensor | None:
    """``batch.weights`` (:class:`Batch`), checked to be one value per row, in ``like``'s dtype and
    device when given; None when unweighted."""
    weights = getattr(batch, "weights", None)
    if weights is None:
        return None
    n = len(batch)
    if not isinstance(weights, torch.Tensor) or weights.shape != (n,):
        shape = tuple(weights.shape) if isinstance(weights, torch.Tensor) else type(weights).__name__
        raise ValueError(f"batch.weights: expected a tensor of shape ({n},) (one weight per row) or None, got {shape}")
    return weights if like is None else weights.to(dtype=like.dtype, device=like.device)


def weighted_mean(values: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
    """``sum_i w_i v_i / sum_i w_i``, differentiable in ``values``; 0 instead of ``0/0`` when all
    weights are 0."""
    total = weights.sum()
    return (weights * values).sum() / torch.where(total > 0, total, torch.ones_like(total))


def row_chunks(data: Any, chunk_rows: int | None) -> Iterator[Any]:
    """``data`` in consecutive blocks of ``chunk_rows`` rows (``data`` itself when None or larger):
    how the full-data passes walk a data set that need not fit in memory."""
    n = len(data)
    if chunk_rows is None or int(chunk_rows) >= n:
        yield data
        return
    step = int(chunk_rows)
    for start in range(0, n, step):
        yield data.subset(torch.arange(start, min(start + step, n)))


def weight_total(batch: Any) -> float:
    """The rows of ``batch``, or the sum of its weights: the denominator of its mean losses, so that
    ``mean * weight_total`` adds up over disjoint blocks."""
    weights = row_weights(batch)
    return float(len(batch)) if weights is None else float(weights.detach().double().sum())


@contextlib.contextmanager
def eval_mode(model: Any) -> Iterator[None]:
    """Run the block with a ``torch.nn.Module`` in eval mode, restoring training mode afterwards."""
    training = isinstance(model, torch.nn.Module) and model.training
    if training:
        model.eval()
    try:
        yield
    finally:
        if training:
            model.train()


def changes_in_eval_mode(model: Any) -> bool:
    """Whether a ``torch.nn.Module`` holds a layer whose outputs differ between training and eval mode:
    dropout (random masks in training) or a normalisation with running statistics (batch norm: the
    batch's statistics in training). The engines step such a model in training mode and measure the
    model they return (its exact rows, objective and accuracy on all rows) in eval mode, the mode it
    predicts in."""
    if not isinstance(model, torch.nn.Module):
        return False
    return any(_changes_in_eval_mode(module) for module in model.modules())


def _changes_in_eval_mode(module: torch.nn.Module) -> bool:
    """Dropout, or a normalisation that keeps running statistics (one without them normalises by the batch in
    either mode)."""
    if isinstance(module, torch.nn.modules.dropout._DropoutNd):
        return True
    return isinstance(module, torch.nn.modules.batchnorm._NormBase) and bool(module.track_running_stats)


def model_outputs(model: Any, batch: Any) -> torch.Tensor:
    """``model(batch.X)`` as shape ``(n,)`` (:func:`row_outputs`)."""
    return row_outputs(model(batch.X), len(batch))


def float64_forward(model: Any, X: Any) -> torch.Tensor:
    """``model(X)`` computed in float64 with the model's own parameters and buffers, as float64 ``(n,)``
    (:func:`row_outputs`), without autograd, on the CPU; a callable that is not a ``torch.nn.Module`` is
    called as it is.

    A float32 forward pass rounds a row's output by about ``1e-7`` of the terms it sums, and how depends on
    the rows around it (the blocking of a matrix product), so a row that close to a decision threshold can
    change its hard label with the batch it comes in. In float64 the error is ``1e-16`` of the terms: a row's
    output, and its label, do not depend on its batch. The estimators predict through this path, and their
    verdicts on bounds (training violations, ``evaluate``, certificates) read the same outputs, so that the
    labels a user computes from ``predict`` are the ones the verdict counted."""
    x = torch.as_tensor(np.asarray(X.detach().cpu() if isinstance(X, torch.Tensor) else X, dtype=np.float64))
    if not isinstance(model, torch.nn.Module):
        with torch.no_grad():
            return row_outputs(torch.as_tensor(model(x)), x.shape[0]).detach().to(torch.float64).cpu()
    state = {name: (t.detach().cpu().double() if t.is_floating_point() else t.detach().cpu())
             for name, t in [*model.named_parameters(), *model.named_buffers()]}
    with torch.no_grad():
        out = torch.func.functional_call(model, state, (x,))
    return row_outputs(out, x.shape[0]).double()


def prediction_outputs(model: Any, X: torch.Tensor) -> Any:
    """A ``torch.nn.Module``'s :func:`float64_forward` in ``X``'s dtype and device: the outputs the estimators
    predict from, for code that computes in the data's dtype (a cast keeps each output's sign, hence its hard
    label); any other callable's ``model(X)``, as it returns it (its arithmetic is its own)."""
    if not isinstance(model, torch.nn.Module):
        return model(X)
    return float64_forward(model, X).to(dtype=X.dtype if X.dtype.is_floating_point else torch.float32,
                                         device=X.device)


def flat_parameters(params: Sequence[torch.Tensor]) -> torch.Tensor:
    """A detached copy of ``params`` as one flat vector (their order, their dtype); ``torch.cat`` always
    writes a new tensor, also of a single parameter."""
    return torch.cat([p.detach().reshape(-1) for p in params])


def assign_parameters(params: Sequence[torch.Tensor], flat: torch.Tensor) -> None:
    """Write the flat vector ``flat`` (as from :func:`flat_parameters`) into ``params`` in place."""
    total = sum(p.numel() for p in params)
    if flat.numel() != total:
        raise ValueError(f"expected {total} parameter values, got {flat.numel()}")
    with torch.no_grad():
        offset = 0
        for p in params:
            p.copy_(flat[offset:offset + p.numel()].view_as(p).to(p.dtype))
            offset += p.numel()


#: Rows of ``X`` that :func:`check_dataset` tests at once: the test of a memory-mapped ``X`` holds one chunk's
#: flags in memory, not a flag per entry of all rows (467 MB for 2,000,000 x 30).
CHECK_CHUNK_ROWS = 65_536


def _rows_where(X: torch.Tensor, n: int, test: Any) -> int:
    """The number of rows of ``X`` (n rows) with an entry for which ``test`` (``torch.isnan``) holds, tested in
    chunks of :data:`CHECK_CHUNK_ROWS` rows."""
    flat = X.reshape(n, -1)
    return sum(int(test(flat[start:start + CHECK_CHUNK_ROWS]).any(dim=1).sum())
               for start in range(0, n, CHECK_CHUNK_ROWS))


def check_dataset(data: Any, complete_inputs: bool = True) -> int:
    """The number of rows of ``data``, checked to have ``X``, ``y``, ``subset``, a row, and weights
    (if any) finite, ``>= 0`` and not all 0. With ``complete_inputs`` (an engine that differentiates
    its model) an in-memory ``X`` (a tensor) must hold no missing value (NaN): a row without a value
    has no output to differentiate; the boosted engine routes such rows and passes False."""
    for attr in ("X", "y", "subset"):
        if not hasattr(data, attr):
            raise ValueError(f"data: expected a dataset with X, y and subset(), missing {attr!r}; got "
                             f"{type(data).__name__}. The engine draws its own batches from all rows (batch_size): "
                             "give the rows, not a DataLoader, e.g. fairopt.FairData.from_arrays(X, y, "
                             "{'sex': s}) (the solvers.problem.Dataset protocol)")
    n = len(data)
    if n == 0:
        raise ValueError("data: has no rows")
    X = data.X
    checked = isinstance(X, torch.Tensor) and X.is_floating_point()
    rows = _rows_where(X, n, torch.isnan) if checked and complete_inputs else 0
    if rows:
        raise ValueError(f"data.X: {rows} row(s) hold missing input values (NaN); this engine differentiates its "
                         "model and needs complete inputs: impute them, or train boosted trees "
                         "(solvers.boosting.BoostedSQP), which route missing values")
    rows = _rows_where(X, n, torch.isinf) if checked else 0
    if rows:
        raise ValueError(f"data.X: {rows} row(s) hold infinite input values (inf); no model output is finite there: "
                         "clip or drop them")
    weights = row_weights(data)
    if weights is not None:
        w = weights.detach()
        if not bool(torch.isfinite(w).all()) or bool((w < 0).any()):
            raise ValueError("data.weights: expected finite weights >= 0")
        if not bool((w > 0).any()):
            raise ValueError("data.weights: all weights are 0; at least one row must have a positive weight")
    return n


class RowSplit(NamedTuple):
    """``lo <= A x <= hi`` as QP solvers take it: ``G x <= h`` (finite upper sides, then negated finite
    lower sides) and ``A_eq x = b_eq`` (``lo == hi``); the masks ``upper``, ``lower``, ``equal`` map
    multipliers back to rows. Empty blocks are None."""

    G: Any
    h: np.ndarray | None
    A_eq: Any
    b_eq: np.ndarray | None
    upper: np.ndarray
    lower: np.ndarray
    equal: np.ndarray


class RowFactors(NamedTuple):
    """``m`` rows whose Jacobian is of rank one on each of ``s`` strata: ``dc/d out_i = coef[:, k]
    direction_i`` for row ``i`` in stratum ``k``. ``c``, ``exact`` (or None) float64 (m,); ``coef``
    (m, s) and ``direction`` (n,) in the dtype of ``out``."""

    c: torch.Tensor
    exact: torch.Tensor | None
    coef: torch.Tensor
    direction: torch.Tensor


def split_rows(A: Any, lo: np.ndarray, hi: np.ndarray) -> RowSplit:
    """Split ``lo <= A x <= hi`` (dense or sparse ``A``) into CSC blocks (:class:`RowSplit`)."""
    import scipy.sparse as sp

    A = sp.csr_matrix(A)
    lo, hi = np.asarray(lo, dtype=float), np.asarray(hi, dtype=float)
    equal = lo == hi
    upper = np.isfinite(hi) & ~equal
    lower = np.isfinite(lo) & ~equal
    G = sp.vstack([A[upper], -A[lower]], format="csc") if (upper.any() or lower.any()) else None
    h = np.concatenate([hi[upper], -lo[lower]]) if G is not None else None
    A_eq = A[equal].tocsc() if equal.any() else None
    b_eq = lo[equal] if equal.any() else None
    return RowSplit(G, h, A_eq, b_eq, upper, lower, equal)


def row_violations(c: torch.Tensor, lower: torch.Tensor, upper: torch.Tensor) -> torch.Tensor:
    """Per-row violation ``max(c - u, 0) + max(l - c, 0)`` (zero on infinite sides)."""
    lower = lower.to(c)
    upper = upper.to(c)
    return torch.clamp(c - upper, min=0.0) + torch.clamp(lower - c, min=0.0)


def exact_rows(cons: Any, out: torch.Tensor, batch: Any, smooth: torch.Tensor | None = None) -> torch.Tensor:
    """``cons.exact(out, batch)`` as float64 (m,) without gradient; the smooth rows ``smooth`` of the
    same outputs when ``cons`` declares ``smooth_is_exact``, which saves a second evaluation."""
    if smooth is not None and smooth_is_exact(cons):
        return smooth.detach().reshape(-1).to(torch.float64)
    with torch.no_grad():
        return cons.exact(out.detach(), batch).reshape(-1).to(torch.float64)


def violation(c: torch.Tensor, lower: torch.Tensor, upper: torch.Tensor) -> torch.Tensor:
    """Total violation ``V(c) = sum_i max(c_i - u_i, 0) + max(l_i - c_i, 0)``."""
    return row_violations(c, lower, upper).sum()


#: The scratch dict of the :meth:`ConstraintSet.rows_and_jacobian` call in progress.
_SCRATCH: contextvars.ContextVar[dict | None] = contextvars.ContextVar("constraint_set_scratch", default=None)


def shared_scratch() -> dict | None:
    """The dict shared by the members during one :meth:`ConstraintSet.rows_and_jacobian` or
    :meth:`ConstraintSet.rows_and_factors` call (None outside), where members leave intermediates
    others need too (:func:`shared_value`)."""
    return _SCRATCH.get()


def shared_value(key: Any, source: Any, compute: Callable[[], Any]) -> Any:
    """``compute()``, once per constraint-set call for the same ``key`` and ``source`` object (kept
    alive so that its ``id`` is not reused); outside such a call simply ``compute()``."""
    scratch = _SCRATCH.get()
    if scratch is None:
        return compute()
    entry = scratch.get((key, id(source)))
    if entry is None:
        entry = scratch[key, id(source)] = (source, compute())
    return entry[1]


class ConstraintSet:
    """Several constraints as one, rows concatenated in order; each keeps its name and bounds."""

    def __init__(self, constraints: Iterable[Constraint] = ()) -> None:
        self.constraints: list[Constraint] = list(constraints)
        for c in self.constraints:
            check_constraint(c)
        self.name = "+".join(c.name for c in self.constraints) or "none"

    def __len__(self) -> int:
        return len(self.constraints)

    def calibrated(self, spread: str) -> "ConstraintSet":
        """The set of the members' :class:`solvers.contract.CalibratedForm` for ``spread`` (a member without
        one as it is), for an engine that calibrates the rows' level to the exact ones; asked after
        :meth:`setup`, the forms are set up as the members are."""
        return ConstraintSet([calibrated_form(c, spread) for c in self.constraints])

    def rows_and_jacobian(self, out: torch.Tensor, batch: Any) -> tuple[torch.Tensor, torch.Tensor] | None:
        """``(c (m,), dc/d out (m, n))`` from the members' optional closed-form
        ``rows_and_jacobian(out, batch)``, without gradient; None when a member has none (the
        engine then differentiates ``__call__``)."""
        pairs = self._each_member(offers_closed_form_rows, lambda c: c.rows_and_jacobian(out, batch))
        if pairs is None:
            return None
        pairs = [(v.reshape(-1), j.reshape(-1, out.shape[0])) for v, j in pairs]
        if not pairs:
            return None
        if len(pairs) == 1:  # no copy of the (m, n) Jacobian
            return pairs[0][0], pairs[0][1].to(out.dtype)
        return self._cat([v for v, _ in pairs], like=out), torch.cat([j for _, j in pairs]).to(out.dtype)

    def rows_and_factors(self, out: torch.Tensor, batch: Any, strata: Any) -> RowFactors | None:
        """The members' ``rows_and_factors`` (:class:`RowFactors` on a :class:`solvers.strata.RowStrata`)
        concatenated, without gradient; None unless all offer them and share their direction (the
        engine then factors :meth:`rows_and_jacobian`)."""
        if not self.shared_direction:
            return None
        parts = self._each_member(offers_factored_rows, lambda c: c.rows_and_factors(out, batch, strata))
        if parts is None:
            return None
        if len(parts) == 1:
            return parts[0]
        return RowFactors(torch.cat([p.c.reshape(-1) for p in parts]), torch.cat([p.exact.reshape(-1) for p in parts]),
                          torch.cat([p.coef for p in parts]), parts[0].direction)

    def _each_member(self, offers: Callable[[Any], bool], ask: Callable[[Any], Any]) -> list | None:
        """``ask(member)`` of every member inside one :func:`shared_scratch`; None as soon as one does not
        ``offers`` the capability or answers None."""
        answers = []
        token = _SCRATCH.set({})
        try:
            for c in self.constraints:
                answer = ask(c) if offers(c) else None
                if answer is None:
                    return None
                answers.append(answer)
        finally:
            _SCRATCH.reset(token)
        return answers

    @property
    def shared_direction(self) -> bool:
        """Every member declares the same non-None ``jacobian_direction``, so the blocks of
        ``dc/d out`` are of rank one by construction and need no check."""
        keys = [jacobian_direction(c) for c in self.constraints]
        return bool(keys) and keys[0] is not None and all(k == keys[0] for k in keys)

    @property
    def smooth_is_exact(self) -> bool:
        """Every member declares ``smooth_is_exact`` (its exact rows are its smooth rows)."""
        return bool(self.constraints) and all(smooth_is_exact(c) for c in self.constraints)

    def __iter__(self):
        return iter(self.constraints)

    def setup(self, data: Any) -> None:
        """``setup(data)`` of every member that offers it, then :func:`solvers.contract.check_bounds`."""
        for c in self.constraints:
            if offers_setup(c):
                c.setup(data)
            check_bounds(c)

    @property
    def lower(self) -> torch.Tensor:
        return self._cat([torch.as_tensor(c.lower, dtype=torch.float64) for c in self.constraints])

    @property
    def upper(self) -> torch.Tensor:
        return self._cat([torch.as_tensor(c.upper, dtype=torch.float64) for c in self.constraints])

    @property
    def row_names(self) -> list[str]:
        """``"<constraint name>[<row>]"`` for every row, in order."""
        names = []
        for c in self.constraints:
            rows = declared_row_names(c)
            names += list(rows) if rows is not None else [f"{c.name}[{i}]" for i in range(_member_rows(c))]
        return names

    @property
    def n_rows(self) -> int:
        return int(self.lower.numel())

    def row_scales(self) -> torch.Tensor:
        """float64 ``(m,)``: each member's declared :func:`solvers.contract.row_scale` on its rows, NaN on
        the rows of a member that declares none (after :meth:`setup`, which sizes the rows)."""
        scales = [row_scale(c) for c in self.constraints]
        return self._cat([torch.full((_member_rows(c),), float("nan") if s is None else s, dtype=torch.float64)
                          for c, s in zip(self.constraints, scales)])

    def __call__(self, out: torch.Tensor, batch: Any) -> torch.Tensor:
        return self._cat([c(out, batch).reshape(-1) for c in self.constraints], like=out)

    def exact(self, out: torch.Tensor, batch: Any) -> torch.Tensor:
        with torch.no_grad():
            return self._cat([c.exact(out, batch).reshape(-1) for c in self.constraints], like=out)

    def strata(self, batch: Any) -> torch.Tensor | None:
        """One code per row, equal for rows in the same stratum of every member; None when a member
        has no strata."""
        codes = []
        for c in self.constraints:
            member = c.strata(batch) if offers_strata(c) else None
            if member is None:
                return None
            codes.append(torch.as_tensor(member).reshape(-1).long())
        if not codes:
            return None
        return row_codes(torch.stack(codes, dim=1))

    def target_encoding(self, batch: Any) -> list["LinearEncoding"]:
        """Encodings of all members; raises ValueError naming a member without one."""
        encodings = []
        for c in self.constraints:
            enc = c.target_encoding(batch) if offers_target_encoding(c) else None
            if enc is None:
                raise ValueError(
                    f"constraints: {c.name!r} has no linear target encoding and cannot be "
                    "used by a projection solver"
                )
            encodings.append(enc)
        return encodings

    @staticmethod
    def _cat(parts: Sequence[torch.Tensor], like: torch.Tensor | None = None) -> torch.Tensor:
        if not parts:
            dtype = like.dtype if like is not None else torch.float64
            return torch.zeros(0, dtype=dtype)
        return torch.cat(list(parts))


def _member_rows(constraint: Any) -> int:
    """The number of rows ``m`` of one member (its bounds' length, once set up)."""
    return int(torch.as_tensor(constraint.lower).numel())


def as_constraint_set(constraints: Any) -> ConstraintSet:
    """A :class:`ConstraintSet` from one constraint, an iterable of them, a set, or None. A callable is one
    constraint (an iterable of them is not callable), checked by :func:`solvers.contract.check_constraint`
    as it enters, which names a member it lacks."""
    if isinstance(constraints, ConstraintSet):
        return constraints
    if constraints is None:
        return ConstraintSet(())
    if callable(constraints):
        return ConstraintSet([constraints])
    return ConstraintSet(list(constraints))


@dataclass
class LinearEncoding:
    """Rows ``lb <= A_z z + A_a a <= ub`` on targets ``z`` (n,) and auxiliary variables
    ``aux_lb <= a <= aux_ub`` (k,), for the projection masters of Moving Targets."""

    name: str
    A_z: np.ndarray
    lb: np.ndarray
    ub: np.ndarray
    A_a: np.ndarray | None = None
    aux_lb: np.ndarray | None = None
    aux_ub: np.ndarray | None = None
    meta: dict = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.A_z = np.atleast_2d(np.asarray(self.A_z, dtype=float))
        self.lb = np.asarray(self.lb, dtype=float).reshape(-1)
        self.ub = np.asarray(self.ub, dtype=float).reshape(-1)
        r = self.A_z.shape[0]
        if self.lb.shape != (r,) or self.ub.shape != (r,):
            raise ValueError(f"lb/ub: expected shape ({r},), got {self.lb.shape}, {self.ub.shape}")
        if self.A_a is None:
            self.A_a = np.zeros((r, 0))
        self.A_a = np.atleast_2d(np.asarray(self.A_a, dtype=float)).reshape(r, -1)
        k = self.A_a.shape[1]
        self.aux_lb = np.full(k, -np.inf) if self.aux_lb is None else np.asarray(self.aux_lb, float)
        self.aux_ub = np.full(k, np.inf) if self.aux_ub is None else np.asarray(self.aux_ub, float)

    @property
    def n_aux(self) -> int:
        return int(self.A_a.shape[1])

    def residual(self, z: np.ndarray, a: np.ndarray | None = None) -> np.ndarray:
        """Per-row violation of the encoding at ``(z, a)``."""
        v = self.A_z @ np.asarray(z, float)
        if self.n_aux:
            v = v + self.A_a @ np.asarray(a, float)
        return np.maximum(v - self.ub, 0) + np.maximum(self.lb - v, 0)


def is_network(params: Iterable[torch.Tensor]) -> bool:
    """Whether the trained tensors ``params`` are a network's: more than one weight matrix among them (a
    linear model has one). A network's mini-batch steps differ in their step
    (:attr:`solvers.sqp.StochasticSQP.lr_`), its warm-up, its polish's start and the constraints' calibrated
    form (:func:`calibrated_spread`)."""
    return sum(p.dim() >= 2 for p in params) > 1


def calibrated_spread(params: Iterable[torch.Tensor], mini_batch: bool) -> str:
    """The ``spread`` of the constraints' calibrated form (:class:`solvers.contract.CalibratedForm`) for steps
    in ``params``: "wide" (``sigmoid(2 t)`` for fairopt's group rates) for the ``mini_batch`` steps of a network
    (:func:`is_network`), whose outputs leave the threshold as it fits its rows, else "threshold"
    (``sigmoid(5 t)``)."""
    return "wide" if mini_batch and is_network(params) else "threshold"
