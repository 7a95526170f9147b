""":func:`project_targets`: validate, assemble the program, choose and run the backend, diagnose an
infeasible problem."""

from __future__ import annotations

import logging
import time
from dataclasses import replace
from typing import Any, Sequence

import numpy as np

from solvers.problem import LinearEncoding
from solvers.projection.backends import GurobiUnavailable, gurobi_skip_reason, solve_program
from solvers.projection.program import (
    Program,
    assemble,
    check_encodings,
    check_references,
    check_weights,
    mean_losses,
)
from solvers.projection.results import BackendResult, ProjectionInfeasibleError, ProjectionResult
from solvers.projection.topk import count_structure, solve_counts
from solvers.validation import as_float_array, check_choice, check_flag, check_seed, positive_float

__all__ = ["BACKENDS", "LOSSES", "project_targets"]

logger = logging.getLogger(__package__)

#: Accepted values of ``backend``.
BACKENDS: tuple[str, ...] = ("auto", "topk", "highs", "osqp", "gurobi")
#: Accepted values of ``loss``.
LOSSES: tuple[str, ...] = ("squared", "hamming")
# "auto" choices already logged at INFO (repeats at DEBUG: Moving Targets solves a master per iteration)
_LOGGED_CHOICES: set[str] = set()


# --------------------------------------------------------------------------------------
# Backend choice, infeasibility diagnosis
# --------------------------------------------------------------------------------------
def _open_source_backend(prog: Program) -> str:
    return "highs" if prog.binary else "osqp"


def _run_backend(prog: Program, backend: str, time_limit: float, mip_gap: float,
                 seed: int, start: np.ndarray | None = None,
                 priority: np.ndarray | None = None) -> tuple[str, BackendResult]:
    """Resolve ``backend`` (logging the choice for "auto") and solve; returns ``(used, raw)``."""
    if backend == "osqp" and prog.binary:
        raise ValueError("backend: 'osqp' solves continuous QPs only; binary targets need 'highs' or 'gurobi'")
    if backend in ("auto", "topk"):
        structure = count_structure(prog)
        if structure is not None:
            _log_choice("topk", "binary targets whose rows read counts of cells")
            return "topk", solve_counts(prog, structure, priority)
        if backend == "topk":
            raise ValueError("backend: 'topk' needs binary targets, no auxiliary variables and rows that read counts "
                             "of cells with one pivot cell (solvers.projection.topk); use 'auto' or 'highs'")
    if backend != "auto":
        try:
            return backend, solve_program(prog, backend, time_limit, mip_gap, seed, start)
        except GurobiUnavailable as exc:
            raise RuntimeError(
                f"backend: 'gurobi' was requested but cannot be used: {exc}. Install gurobipy with a licence "
                "for this problem size, or use backend='auto' or 'highs'"
            ) from None
    fallback = _open_source_backend(prog)
    reason = gurobi_skip_reason(prog)
    if reason is None:
        try:
            raw = solve_program(prog, "gurobi", time_limit, mip_gap, seed, start)
            _log_choice("gurobi", f"{prog.n_vars} variables, {prog.n_rows} rows")
            return "gurobi", raw
        except GurobiUnavailable as exc:
            reason = str(exc)
    _log_choice(fallback, reason)
    return fallback, solve_program(prog, fallback, time_limit, mip_gap, seed, start)


def _log_choice(backend: str, reason: str) -> None:
    """Log the backend "auto" chose: at INFO the first time for a (backend, reason), then DEBUG."""
    message = f"projection backend 'auto': using {backend} ({reason})"
    key = f"{backend}|{reason.split(' (')[0]}"
    level = logging.DEBUG if key in _LOGGED_CHOICES else logging.INFO
    _LOGGED_CHOICES.add(key)
    logger.log(level, message)


def _diagnose_infeasibility(refs: np.ndarray, weights: np.ndarray, encodings: Sequence[LinearEncoding],
                            loss: str, binary: bool, time_limit: float, seed: int) -> list[str]:
    """Names of the encodings that are infeasible on their own (feasibility problems, HiGHS)."""
    alone = []
    for enc in encodings:
        prog = assemble(refs, weights, [enc], loss, binary)
        feasibility = replace(prog, cost=np.zeros_like(prog.cost), hessian=None, offset=0.0)
        if solve_program(feasibility, "highs", time_limit, 1.0, seed).status == "infeasible":
            alone.append(enc.name)
    return alone


def _raise_infeasible(raw: BackendResult, backend: str, refs: np.ndarray, weights: np.ndarray,
                      encodings: Sequence[LinearEncoding], loss: str, binary: bool, time_limit: float,
                      seed: int) -> None:
    domain = "binary" if binary else "real"
    alone = _diagnose_infeasibility(refs, weights, encodings, loss, binary, time_limit, seed)
    if alone:
        message = (f"projection infeasible ({backend} status {raw.solver_status!r}): constraint(s) {alone} admit "
                   f"no {domain} target vector on their own; relax their bounds")
        raise ProjectionInfeasibleError(message, alone, jointly=False, status=raw.solver_status)
    names = [enc.name for enc in encodings]
    message = (f"projection infeasible ({backend} status {raw.solver_status!r}): each of the constraints {names} "
               f"is satisfiable alone, but no {domain} target vector satisfies all of them together")
    raise ProjectionInfeasibleError(message, names, jointly=True, status=raw.solver_status)


def _max_violation(encodings: Sequence[LinearEncoding], z: np.ndarray, aux: Sequence[np.ndarray]) -> float:
    values = [float(enc.residual(z, a).max(initial=0.0)) for enc, a in zip(encodings, aux)]
    return max(values, default=0.0)


def _start_vector(initial: Any, prog: Program, encodings: Sequence[LinearEncoding]) -> np.ndarray | None:
    """``initial`` (a :class:`ProjectionResult` or targets ``z``) as ``[z, a_1, ..., a_E] / scale``, NaN
    for auxiliary variables it does not give."""
    if initial is None:
        return None
    z = initial.z if isinstance(initial, ProjectionResult) else initial
    z = as_float_array(z, "initial").reshape(-1)
    if z.size != prog.n or not np.isfinite(z).all():
        raise ValueError(f"initial: expected {prog.n} finite target values (one per reference entry), got "
                         f"{z.size}{'' if np.isfinite(z).all() else ' with NaN or infinite values'}")
    if prog.binary and ((z != 0) & (z != 1)).any():
        raise ValueError("initial: binary targets need a 0/1 start, got "
                         f"{z[(z != 0) & (z != 1)][0]!r}")
    start = np.full(prog.n_vars, np.nan)
    start[: prog.n] = z
    if isinstance(initial, ProjectionResult):
        sizes = [enc.n_aux for enc in encodings]
        if [np.size(a) for a in initial.aux] != sizes:
            raise ValueError(f"initial: its auxiliary variables have sizes {[np.size(a) for a in initial.aux]}, the "
                             f"encodings {sizes}; pass initial.z to start from the targets only")
        for piece, a in zip(prog.aux_slices, initial.aux):
            start[piece] = np.asarray(a, dtype=float)
    return start / prog.scale


def _priority(priority: Any, n: int) -> np.ndarray | None:
    """``priority`` as finite float64 (n,), or None."""
    if priority is None:
        return None
    values = as_float_array(priority, "priority").reshape(-1)
    if values.size != n or not np.isfinite(values).all():
        raise ValueError(f"priority: expected {n} finite values (one per target), got {values.size}"
                         f"{'' if np.isfinite(values).all() else ' with NaN or infinite values'}")
    return values


# --------------------------------------------------------------------------------------
# Public API
# --------------------------------------------------------------------------------------
def project_targets(
    reference: Any,
    *,
    weights: Any = None,
    encodings: Sequence[LinearEncoding] | LinearEncoding = (),
    loss: str = "squared",
    binary: bool = False,
    backend: str = "auto",
    time_limit: float = 60.0,
    mip_gap: float = 1e-4,
    seed: int = 0,
    initial: Any = None,
    priority: Any = None,
) -> ProjectionResult:
    """``min_{z, a} sum_r w_r L(z, r_r)`` subject to every encoding's rows (package doc, [GeDI] eq 56).

    Parameters
    ----------
    reference : array-like (n,) or (R, n), or a sequence of R vectors (n,)
        The references ``r_r`` (Moving Targets: the predictions and the true targets).
    weights : float or sequence of R floats, optional
        ``w_r >= 0`` with a positive sum; default all ones.
    encodings : LinearEncoding or sequence of LinearEncoding
    loss : {"squared", "hamming"}, default "squared"
        "hamming" needs ``binary=True`` and references in ``[0, 1]``.
    binary : bool, default False
        ``z`` in ``{0, 1}^n`` (MILP) instead of real (convex QP).
    backend : {"auto", "topk", "highs", "osqp", "gurobi"}, default "auto"
    time_limit : float, default 60.0
    mip_gap : float, default 1e-4
        Relative gap at which a MILP counts as optimal (0 proves optimality).
    seed : int, default 0
    initial : ProjectionResult or array-like (n,), optional
        A start, a previous projection onto the same encodings or targets alone: it changes the
        path, not the optimum ("topk" ignores it).
    priority : array-like (n,), optional
        The count search's tie-break within a cell, higher first to get a one.

    Returns
    -------
    ProjectionResult

    Raises
    ------
    ProjectionInfeasibleError
        No feasible target vector; the message names the constraints.
    RuntimeError
        The solver stopped without a feasible point or failed, or "gurobi" is unusable.

    Examples
    --------
    >>> import numpy as np
    >>> from solvers.problem import LinearEncoding, split_rows
    >>> mean_three = LinearEncoding("mean", A_z=np.full((1, 3), 1 / 3), lb=[3.0], ub=[3.0])
    >>> project_targets(np.array([2.0, 3.0, 7.0]), encodings=[mean_three]).z.round(6)
    array([1., 2., 6.])
    """
    loss = check_choice(loss, LOSSES, "loss")
    backend = check_choice(backend, BACKENDS, "backend")
    binary = check_flag(binary, "binary")
    time_limit = positive_float(time_limit, "time_limit")
    mip_gap = positive_float(mip_gap, "mip_gap", allow_zero=True)
    seed = check_seed(seed, allow_none=False, allow_negative=False)
    refs, w, encodings = _checked_problem(reference, weights, encodings, loss, binary)
    order = _priority(priority, refs.shape[1])

    start = time.perf_counter()
    prog = assemble(refs, w, encodings, loss, binary)
    used, raw = _run_backend(prog, backend, time_limit, mip_gap, seed, _start_vector(initial, prog, encodings),
                             order)
    seconds = time.perf_counter() - start
    if raw.status == "infeasible":
        _raise_infeasible(raw, used, refs, w, encodings, loss, binary, time_limit, seed)
    if raw.x is None:
        raise RuntimeError(f"projection failed: backend {used!r} stopped with status {raw.solver_status!r} and "
                           f"no feasible target vector (time_limit={time_limit:g} s)")
    result = _projection_result(raw, prog, encodings, (refs, w, loss), used, seconds)
    logger.debug("projection: %s %s, objective %.6g, gap %.2e, %.3f s, max violation %.2e", used,
                 raw.solver_status, result.objective, result.gap, seconds, result.max_violation)
    return result


def _checked_problem(reference: Any, weights: Any, encodings: Any, loss: str,
                     binary: bool) -> tuple[np.ndarray, np.ndarray, list[LinearEncoding]]:
    """The references (R, n), their weights and the encodings of :func:`project_targets`, checked."""
    refs = check_references(reference)
    w = check_weights(weights, refs.shape[0])
    if loss == "hamming":
        if not binary:
            raise ValueError("loss: 'hamming' needs binary=True (the Hamming distance of real targets is not offered)")
        if (refs < 0).any() or (refs > 1).any():
            raise ValueError(f"reference: the Hamming loss needs values in [0, 1], got range "
                             f"[{refs.min():g}, {refs.max():g}]")
    return refs, w, check_encodings(encodings, refs.shape[1])


def _projection_result(raw: Any, prog: Any, encodings: Sequence[LinearEncoding], objective: tuple,
                       used: str, seconds: float) -> ProjectionResult:
    """The :class:`ProjectionResult` of a solved program (binary targets rounded); ``objective`` is
    ``(refs, w, loss)``."""
    refs, w, loss = objective
    x = raw.x * prog.scale
    z = x[: prog.n]
    if prog.binary:
        z = np.round(z).clip(0.0, 1.0)
    aux = tuple(x[s] for s in prog.aux_slices)
    terms = mean_losses(z, refs, loss)
    return ProjectionResult(
        z=z, aux=aux, objective=float(w @ terms), terms=tuple(float(t) for t in terms), status=raw.status,
        gap=raw.gap, backend=used, seconds=seconds, solver_status=raw.solver_status,
        max_violation=_max_violation(encodings, z, aux),
    )
