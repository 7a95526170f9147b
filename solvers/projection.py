"""Target projection: the master step of Moving Targets ([GeDI] eq 56).

Problem
-------
Given references ``r_1, ..., r_R`` (each of shape ``(n,)``), non-negative weights
``w_1, ..., w_R`` and linear encodings of the constraints (:class:`~solvers.problem.LinearEncoding`:
``lb <= A_z z + A_a a <= ub`` with auxiliary variables ``aux_lb <= a <= aux_ub``),
:func:`project_targets` solves

.. math::

    \\min_{z, a}\\; \\sum_{r} w_r\\, L(z, r_r)
    \\quad\\text{s.t.}\\quad lb_e \\le A_{z,e} z + A_{a,e} a_e \\le ub_e \\;\\; \\forall e,

with the mean losses

* ``loss="squared"``: ``L(z, r) = (1/n) sum_i (z_i - r_i)^2`` (mean squared error);
* ``loss="hamming"``: ``L(z, r) = (1/n) sum_i |z_i - r_i|`` (for binary ``z`` and ``r`` the
  fraction of disagreeing rows; ``r`` may be a probability in ``[0, 1]``, giving the
  expected disagreement).

``binary=True`` restricts ``z`` to ``{0, 1}^n``. Since ``z_i^2 = z_i`` there, both losses are
LINEAR in ``z``: ``(z_i - r_i)^2 = r_i^2 + (1 - 2 r_i) z_i`` and, for ``r_i`` in ``[0, 1]``,
``|z_i - r_i| = r_i + (1 - 2 r_i) z_i``, so the master is a mixed-integer LINEAR program
(binary ``z``, continuous ``a``). ``binary=False`` with the squared loss is a convex QP
(Hessian ``2 W / n`` on ``z``, ``W = sum_r w_r``, zero on ``a``). Nothing else is
offered: the Hamming loss of a continuous ``z`` is not what a master minimises.

Backends
--------
========  ==========================  ====================================================
name      problems                     through
========  ==========================  ====================================================
highs     MILP (binary) and convex QP  ``highspy`` (HiGHS branch-and-cut; its QP solver)
osqp      convex QP                    ``qpsolvers`` with OSQP (tight tolerances, polishing)
gurobi    MILP and convex QP           ``gurobipy`` (optional extra ``fairopt[gurobi]``)
auto      both                         Gurobi if importable and licensed for the size,
                                       else HiGHS (MILP) / OSQP (QP); the choice is logged
========  ==========================  ====================================================

The pip wheel of ``gurobipy`` carries a size-limited licence (2000 variables and 2000
linear constraints, :data:`GUROBI_SIZE_LIMIT`; only 200 variables when the objective is
quadratic, :data:`GUROBI_QP_SIZE_LIMIT` - measured with gurobipy 13.0.3: a 254-variable QP
failed with error 10010): ``"auto"`` catches the licence errors
(no licence, size limit exceeded), logs the reason and falls back to the open-source
backend; an explicit ``backend="gurobi"`` raises :class:`RuntimeError` instead. Once a
size-limited licence has been seen, ``"auto"`` skips Gurobi for larger problems without
trying it again.

Every backend gets the same time limit, relative MIP gap, seed and tight feasibility
tolerances (:data:`FEASIBILITY_TOL`). A backend that stops at its time (or work) limit
with a feasible incumbent returns it (status ``"time_limit"``, with the gap it reached);
one that stops without any feasible point raises :class:`RuntimeError` with its status.
An infeasible problem raises :class:`ProjectionInfeasibleError`, whose message names the
encodings that are infeasible on their own, or, if each is feasible alone, the set that is
jointly infeasible.
"""

from __future__ import annotations

import logging
import time
import warnings
from dataclasses import dataclass, replace
from typing import Any, Sequence

import numpy as np
import scipy.sparse as sp

from solvers.problem import LinearEncoding, split_rows
from solvers.validation import as_float_array, check_choice, check_flag, check_seed, positive_float

__all__ = [
    "BACKENDS",
    "LOSSES",
    "FEASIBILITY_TOL",
    "GUROBI_SIZE_LIMIT",
    "GUROBI_QP_SIZE_LIMIT",
    "ProjectionInfeasibleError",
    "ProjectionResult",
    "gurobi_available",
    "project_targets",
]

logger = logging.getLogger(__name__)

#: Accepted values of ``backend``.
BACKENDS: tuple[str, ...] = ("auto", "highs", "osqp", "gurobi")
#: Accepted values of ``loss``.
LOSSES: tuple[str, ...] = ("squared", "hamming")
#: Primal feasibility (and integrality) tolerance asked of every backend.
FEASIBILITY_TOL = 1e-9
#: Variables / linear constraints allowed by the size-limited licence of the gurobipy wheel.
GUROBI_SIZE_LIMIT = 2000
#: Variables allowed by that licence when the objective has quadratic terms (continuous QP).
GUROBI_QP_SIZE_LIMIT = 200
#: OSQP absolute/relative tolerances (the solution is then polished on the active set).
OSQP_TOL = 1e-9
OSQP_MAX_ITER = 200_000

# Gurobi error numbers (GRB.Error.NO_LICENSE, GRB.Error.SIZE_LIMIT_EXCEEDED), used when the
# installed gurobipy does not expose the names.
_GRB_NO_LICENSE = 10009
_GRB_SIZE_LIMIT_EXCEEDED = 10010
# What this process has learnt about Gurobi: importable (None = not checked yet) and
# whether its licence was found to be size-limited.
_GUROBI_STATE: dict[str, bool | None] = {"importable": None, "size_limited": False}
# "auto" choices already logged at INFO level (repeats go to DEBUG: a Moving Targets fit
# solves one master per iteration).
_LOGGED_CHOICES: set[str] = set()


# --------------------------------------------------------------------------------------
# Results and errors
# --------------------------------------------------------------------------------------
@dataclass(frozen=True)
class ProjectionResult:
    """Solution of :func:`project_targets`.

    Attributes
    ----------
    z : numpy.ndarray
        The projected targets ``(n,)``, float64; exactly 0.0/1.0 when ``binary``.
    aux : tuple of numpy.ndarray
        Auxiliary variables of each encoding, in the order of ``encodings`` (empty arrays
        for encodings without auxiliary variables).
    objective : float
        ``sum_r w_r L(z, r_r)`` evaluated at ``z`` in float64 (not the solver's number).
    terms : tuple of float
        The unweighted losses ``L(z, r_r)``, one per reference.
    status : str
        ``"optimal"`` (optimal within the relative gap ``mip_gap`` for MILPs, within the
        solver tolerances for QPs), ``"time_limit"`` (the best feasible point found before
        the time/work limit) or ``"suboptimal"`` (another limit, or an OSQP solution that
        is only accurate to its looser internal check).
    gap : float
        Relative MIP gap ``|primal - bound| / |primal|`` reported by the solver (0.0 for
        continuous problems).
    backend : str
        ``"highs"``, ``"osqp"`` or ``"gurobi"``: the backend that produced ``z``.
    seconds : float
        Wall time of the solve (model construction included).
    solver_status : str
        The backend's own status text (e.g. HiGHS ``"Optimal"``, OSQP ``"solved"``,
        Gurobi ``"OPTIMAL"``), with OSQP's polishing outcome.
    max_violation : float
        Largest row violation ``max(row - ub, lb - row, 0)`` over all encodings at
        ``(z, aux)``, after rounding a binary ``z``.
    """

    z: np.ndarray
    aux: tuple[np.ndarray, ...]
    objective: float
    terms: tuple[float, ...]
    status: str
    gap: float
    backend: str
    seconds: float
    solver_status: str
    max_violation: float

    @property
    def optimal(self) -> bool:
        """Whether the solver proved optimality (within its gap/tolerances)."""
        return self.status == "optimal"


class ProjectionInfeasibleError(RuntimeError):
    """The projection problem has no feasible point.

    Attributes
    ----------
    constraints : tuple of str
        Names of the encodings that are infeasible on their own, or, when each one is
        feasible alone, of all encodings (jointly infeasible).
    jointly : bool
        True when no single encoding is infeasible on its own.
    status : str
        The backend status that reported infeasibility.
    """

    def __init__(self, message: str, constraints: Sequence[str], jointly: bool, status: str) -> None:
        super().__init__(message)
        self.constraints = tuple(constraints)
        self.jointly = jointly
        self.status = status


class _GurobiUnavailable(Exception):
    """Gurobi cannot solve this problem here (not importable, no licence, size limit)."""


# --------------------------------------------------------------------------------------
# The solver-neutral program
# --------------------------------------------------------------------------------------
@dataclass(frozen=True)
class _Program:
    """``min 1/2 x' diag(hessian) x + cost' x + offset`` s.t. ``row_lower <= A x <= row_upper``,
    ``col_lower <= x <= col_upper``, ``x[:n]`` integer if ``binary`` (``x = [z, a_1, ..., a_E]``).

    The objective is in SUM form (``n`` times the mean losses) so that its coefficients are
    O(1) whatever ``n``; ``hessian`` is None for a linear objective. The program is
    scaled (see :func:`_assemble`): the targets and auxiliary variables of the original
    problem are ``scale * x``.
    """

    n: int
    scale: float
    cost: np.ndarray
    hessian: np.ndarray | None
    offset: float
    A: sp.csr_matrix
    row_lower: np.ndarray
    row_upper: np.ndarray
    col_lower: np.ndarray
    col_upper: np.ndarray
    binary: bool
    names: tuple[str, ...]
    aux_slices: tuple[slice, ...]

    @property
    def n_vars(self) -> int:
        return int(self.cost.size)

    @property
    def n_rows(self) -> int:
        return int(self.A.shape[0])


@dataclass(frozen=True)
class _Raw:
    """What a backend returns: the variables (None if no feasible point) and its status."""

    x: np.ndarray | None
    status: str  # "optimal" | "time_limit" | "suboptimal" | "infeasible" | "failed"
    solver_status: str
    gap: float


# --------------------------------------------------------------------------------------
# Validation and assembly
# --------------------------------------------------------------------------------------
def _references(reference: Any) -> np.ndarray:
    """``reference`` as a float64 array ``(R, n)`` (one row per reference)."""
    if isinstance(reference, (list, tuple)) and not all(np.ndim(r) == 0 for r in reference):
        rows = [_as_vector(r, f"reference[{i}]") for i, r in enumerate(reference)]
        if not rows:
            raise ValueError("reference: expected at least one reference vector, got an empty sequence")
        lengths = {r.size for r in rows}
        if len(lengths) > 1:
            raise ValueError(f"reference: the vectors have different lengths {sorted(lengths)}")
        return np.vstack(rows)
    array = as_float_array(reference, "reference")
    if array.ndim == 1:
        return _as_vector(array, "reference")[None, :]
    if array.ndim == 2:
        for i, row in enumerate(array):
            _as_vector(row, f"reference[{i}]")
        return array
    raise ValueError(f"reference: expected shape (n,) or (R, n), got {array.shape}")


def _as_vector(value: Any, name: str) -> np.ndarray:
    array = as_float_array(value, name)
    if array.ndim != 1 or array.size == 0:
        raise ValueError(f"{name}: expected a non-empty vector of shape (n,), got shape {array.shape}")
    if not np.isfinite(array).all():
        first = int(np.flatnonzero(~np.isfinite(array))[0])
        raise ValueError(f"{name}: contains NaN or infinite values (first at index {first})")
    return array


def _weights(weights: Any, n_references: int) -> np.ndarray:
    """``weights`` as a float64 vector of length R, each finite and >= 0, sum > 0."""
    if weights is None:
        w = np.ones(n_references)
    else:
        w = np.atleast_1d(as_float_array(weights, "weights")).reshape(-1)
    if w.size != n_references:
        raise ValueError(f"weights: expected {n_references} weight(s) (one per reference), got {w.size}")
    if not np.isfinite(w).all() or (w < 0).any():
        raise ValueError(f"weights: expected finite non-negative numbers, got {w.tolist()}")
    if w.sum() <= 0:
        raise ValueError(f"weights: at least one weight must be positive, got {w.tolist()}")
    return w


def _check_encodings(encodings: Any, n: int) -> tuple[LinearEncoding, ...]:
    """Each encoding has ``n`` columns in ``A_z``, finite coefficients and consistent bounds."""
    if isinstance(encodings, LinearEncoding):
        encodings = (encodings,)
    encodings = tuple(encodings)
    for e, enc in enumerate(encodings):
        if not isinstance(enc, LinearEncoding):
            raise ValueError(f"encodings[{e}]: expected a LinearEncoding, got {type(enc).__name__}")
        label = f"encodings[{e}] ({enc.name!r})"
        if enc.A_z.shape[1] != n:
            raise ValueError(f"{label}: A_z has {enc.A_z.shape[1]} columns for {n} targets")
        if not (np.isfinite(enc.A_z).all() and np.isfinite(enc.A_a).all()):
            raise ValueError(f"{label}: A_z/A_a contain NaN or infinite coefficients")
        for kind, lower, upper in (("row", enc.lb, enc.ub), ("aux", enc.aux_lb, enc.aux_ub)):
            if lower.shape != upper.shape or (kind == "aux" and lower.size != enc.n_aux):
                raise ValueError(f"{label}: {kind} bounds have shapes {lower.shape} and {upper.shape}")
            if np.isnan(lower).any() or np.isnan(upper).any() or (lower > upper).any() \
                    or (lower == np.inf).any() or (upper == -np.inf).any():
                i = int(np.flatnonzero(~(lower <= upper) | (lower == np.inf) | (upper == -np.inf))[0])
                raise ValueError(f"{label}: {kind} {i} has bounds [{lower[i]}, {upper[i]}] with no feasible value")
    return encodings


def _objective_terms(refs: np.ndarray, weights: np.ndarray, loss: str, binary: bool) -> tuple:
    """``(cost_z, hessian_z, offset)`` of ``sum_r w_r n L(z, r_r)`` (module doc)."""
    W = float(weights.sum())
    if binary:
        # linear in binary z: w (r or r^2) + w (1 - 2 r) z, summed over references
        cost = weights @ (1.0 - 2.0 * refs)
        constant = refs if loss == "hamming" else refs**2
        return cost, None, float(weights @ constant.sum(axis=1))
    cost = -2.0 * (weights @ refs)
    return cost, np.full(refs.shape[1], 2.0 * W), float(weights @ (refs**2).sum(axis=1))


def _reference_scale(refs: np.ndarray, weights: np.ndarray, binary: bool) -> float:
    """Scale ``s`` of a continuous problem: the RMS of the weighted mean reference (1 if binary or 0)."""
    if binary:
        return 1.0
    rms = float(np.sqrt(np.mean(((weights @ refs) / weights.sum()) ** 2)))
    return rms if rms > 0 else 1.0


def _solved_equalities(enc: LinearEncoding) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """``(A_z, A_a, lb, ub)`` of ``enc`` with its equality rows solved for auxiliary variables.

    If the equality rows ``E_z z + E_a a = b`` (``lb == ub``) have ``r`` rows and ``E_a``
    has rank ``r``, pick ``r`` independent auxiliary columns ``J`` (QR with column pivoting)
    and replace the rows by ``M E_z z + M E_a a = M b`` with ``M = E_a[:, J]^{-1}``: the same
    set (``M`` is invertible), now of the form ``a_J = ...``. For the GeDI coarse encoding
    this turns the normal equations ``G alpha = Ft'z / n`` into ``alpha = G^{-1} Ft'z / n``
    and removes the conditioning of the Gram matrix ``G`` (about 4e6 for a degree-5 kernel
    on Communities' pctBlack), with which OSQP does not converge.
    """
    from scipy.linalg import qr

    A_z, A_a, lb, ub = enc.A_z, enc.A_a, enc.lb, enc.ub
    eq = lb == ub
    r = int(eq.sum())
    if r == 0 or enc.n_aux < r:
        return A_z, A_a, lb, ub
    _, _, pivots = qr(A_a[eq], pivoting=True, mode="economic")
    block = A_a[eq][:, pivots[:r]]
    if np.linalg.matrix_rank(block) < r or np.linalg.cond(block) > 1e12:
        return A_z, A_a, lb, ub
    A_z, A_a, lb, ub = A_z.copy(), A_a.copy(), lb.copy(), ub.copy()
    A_z[eq] = np.linalg.solve(block, A_z[eq])
    A_a[eq] = np.linalg.solve(block, A_a[eq])
    lb[eq] = ub[eq] = np.linalg.solve(block, lb[eq])
    return A_z, A_a, lb, ub


def _assemble(refs: np.ndarray, weights: np.ndarray, encodings: Sequence[LinearEncoding], loss: str,
              binary: bool) -> _Program:
    """Stack the encodings into one program over ``x = [z, a_1, ..., a_E] / s``.

    Two exact rescalings keep the solvers' absolute tolerances meaningful whatever the
    units of the targets (e.g. crimes per 100k people, up to ~5000):

    * continuous problems are solved for ``x / s`` with ``s`` the RMS of the weighted mean
      reference: references, row bounds and auxiliary bounds are divided by ``s``
      (``sum_r w_r ||s u - r_r||^2 = s^2 sum_r w_r ||u - r_r / s||^2``, and the rows are
      linear and homogeneous in ``(z, a)``);
    * equality rows are solved for auxiliary variables (:func:`_solved_equalities`);
    * every row is divided (with its bounds) by its largest absolute coefficient.
    """
    n = refs.shape[1]
    scale = _reference_scale(refs, weights, binary)
    cost_z, hess_z, offset = _objective_terms(refs / scale, weights, loss, binary)
    n_aux = [enc.n_aux for enc in encodings]
    starts = n + np.concatenate([[0], np.cumsum(n_aux)]).astype(int)
    total = int(starts[-1])
    blocks, lower, upper = [], [np.zeros(0)], [np.zeros(0)]
    for e, enc in enumerate(encodings):
        A_z, A_a, lb, ub = _solved_equalities(enc)
        rows = A_z.shape[0]
        parts = [sp.csr_matrix(A_z), sp.csr_matrix((rows, starts[e] - n)), sp.csr_matrix(A_a),
                 sp.csr_matrix((rows, total - starts[e + 1]))]
        blocks.append(sp.hstack(parts, format="csr"))
        lower.append(lb / scale)
        upper.append(ub / scale)
    A = sp.vstack(blocks, format="csr") if blocks else sp.csr_matrix((0, total))
    row_lower, row_upper = np.concatenate(lower), np.concatenate(upper)
    row_max = np.asarray(abs(A).max(axis=1).todense()).ravel() if A.shape[0] else np.zeros(0)
    row_factor = np.where(row_max > 0, 1.0 / np.where(row_max > 0, row_max, 1.0), 1.0)
    A = sp.diags(row_factor) @ A
    A.eliminate_zeros()
    z_lower, z_upper = (np.zeros(n), np.ones(n)) if binary else (np.full(n, -np.inf), np.full(n, np.inf))
    hessian = None if hess_z is None else np.concatenate([hess_z, np.zeros(total - n)])
    return _Program(
        n=n,
        scale=scale,
        cost=np.concatenate([cost_z, np.zeros(total - n)]),
        hessian=hessian,
        offset=offset,
        A=sp.csr_matrix(A),
        row_lower=row_lower * row_factor,
        row_upper=row_upper * row_factor,
        col_lower=np.concatenate([z_lower] + [enc.aux_lb / scale for enc in encodings]),
        col_upper=np.concatenate([z_upper] + [enc.aux_ub / scale for enc in encodings]),
        binary=binary,
        names=tuple(enc.name for enc in encodings),
        aux_slices=tuple(slice(int(starts[e]), int(starts[e + 1])) for e in range(len(encodings))),
    )


def _mean_losses(z: np.ndarray, refs: np.ndarray, loss: str) -> np.ndarray:
    """``L(z, r_r)`` for every reference (mean squared or mean absolute difference)."""
    diff = z[None, :] - refs
    return np.mean(diff**2 if loss == "squared" else np.abs(diff), axis=1)


# --------------------------------------------------------------------------------------
# Backends
# --------------------------------------------------------------------------------------
def _solve_highs(prog: _Program, time_limit: float, mip_gap: float, seed: int) -> _Raw:
    """The program through ``highspy``: branch-and-cut for binary ``z``, HiGHS QP otherwise."""
    import highspy

    h = highspy.Highs()
    options = {
        "output_flag": False, "time_limit": float(time_limit), "random_seed": seed,
        "primal_feasibility_tolerance": FEASIBILITY_TOL, "dual_feasibility_tolerance": FEASIBILITY_TOL,
        "mip_feasibility_tolerance": FEASIBILITY_TOL, "mip_rel_gap": float(mip_gap),
    }
    for key, value in options.items():
        h.setOptionValue(key, value)
    lp = highspy.HighsLp()
    lp.num_col_, lp.num_row_ = prog.n_vars, prog.n_rows
    lp.col_cost_, lp.offset_ = prog.cost, prog.offset
    lp.col_lower_, lp.col_upper_ = prog.col_lower, prog.col_upper
    lp.row_lower_, lp.row_upper_ = prog.row_lower, prog.row_upper
    A = prog.A.tocsc()
    lp.a_matrix_.format_ = highspy.MatrixFormat.kColwise
    lp.a_matrix_.num_col_, lp.a_matrix_.num_row_ = prog.n_vars, prog.n_rows
    lp.a_matrix_.start_, lp.a_matrix_.index_, lp.a_matrix_.value_ = A.indptr, A.indices, A.data
    if prog.binary:
        kinds = [highspy.HighsVarType.kInteger] * prog.n + [highspy.HighsVarType.kContinuous] * (prog.n_vars - prog.n)
        lp.integrality_ = kinds
    model = highspy.HighsModel()
    model.lp_ = lp
    if prog.hessian is not None:
        model.hessian_ = _highs_diagonal_hessian(highspy, prog.hessian)
    h.passModel(model)
    h.run()
    status = h.getModelStatus()
    text = h.modelStatusToString(status)
    info = h.getInfo()
    has_point = info.primal_solution_status == highspy.SolutionStatus.kSolutionStatusFeasible
    x = np.asarray(h.getSolution().col_value, dtype=float) if has_point else None
    gap = float(info.mip_gap) if prog.binary and has_point else 0.0
    Status = highspy.HighsModelStatus
    if status == Status.kOptimal:
        kind = "optimal"
    elif status in (Status.kInfeasible, Status.kUnboundedOrInfeasible):
        kind = "infeasible"
    elif status == Status.kTimeLimit:
        kind = "time_limit"
    else:
        kind = "suboptimal"
    if kind == "infeasible":
        return _Raw(None, kind, text, 0.0)
    return _Raw(x, kind if x is not None else "failed", text, gap)


def _highs_diagonal_hessian(highspy: Any, diagonal: np.ndarray) -> Any:
    """A HiGHS Hessian (objective ``1/2 x'Qx``) holding ``diag(diagonal)`` (zeros omitted)."""
    hess = highspy.HighsHessian()
    hess.dim_ = int(diagonal.size)
    hess.format_ = highspy.HessianFormat.kTriangular
    nonzero = diagonal != 0
    hess.start_ = np.concatenate([[0], np.cumsum(nonzero)]).astype(np.int32)
    hess.index_ = np.flatnonzero(nonzero).astype(np.int32)
    hess.value_ = diagonal[nonzero]
    return hess


def _solve_osqp(prog: _Program, time_limit: float, mip_gap: float, seed: int) -> _Raw:
    """The convex QP through ``qpsolvers`` / OSQP with tight tolerances and polishing."""
    import qpsolvers

    G, h, A_eq, b_eq, *_ = split_rows(prog.A, prog.row_lower, prog.row_upper)
    P = sp.diags(prog.hessian, format="csc")
    finite_bounds = np.isfinite(prog.col_lower).any() or np.isfinite(prog.col_upper).any()
    lb = prog.col_lower if finite_bounds else None
    ub = prog.col_upper if finite_bounds else None
    problem = qpsolvers.Problem(P, prog.cost, G, h, A_eq, b_eq, lb, ub)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        solution = qpsolvers.solve_problem(
            problem, solver="osqp", eps_abs=OSQP_TOL, eps_rel=OSQP_TOL, polish=True,
            max_iter=OSQP_MAX_ITER, time_limit=float(time_limit), verbose=False,
        )
    info = (solution.extras or {}).get("info")
    text = str(getattr(info, "status", "unknown"))
    polished = int(getattr(info, "status_polish", 0)) == 1
    text = f"{text} ({'polished' if polished else 'not polished'})"
    if "primal infeasible" in text:
        return _Raw(None, "infeasible", text, 0.0)
    x = None if solution.x is None else np.asarray(solution.x, dtype=float)
    if x is None or not np.isfinite(x).all() or not text.startswith("solved"):
        return _Raw(None, "failed", text, 0.0)  # iteration/time limit: the iterate is not feasible
    return _Raw(x, "optimal" if solution.found else "suboptimal", text, 0.0)


def _import_gurobi() -> tuple[Any, Any]:
    """``(gurobipy, GRB)``; raises _GurobiUnavailable when gurobipy is not importable."""
    try:
        import gurobipy as gp
    except ImportError as exc:
        _GUROBI_STATE["importable"] = False
        raise _GurobiUnavailable(f"gurobipy is not installed ({exc})") from None
    _GUROBI_STATE["importable"] = True
    return gp, gp.GRB


def gurobi_available() -> bool:
    """Whether ``gurobipy`` can be imported (its licence is only checked by a solve)."""
    if _GUROBI_STATE["importable"] is None:
        try:
            _import_gurobi()
        except _GurobiUnavailable:
            pass
    return bool(_GUROBI_STATE["importable"])


def _licence_error(exc: Exception, GRB: Any) -> bool:
    """A Gurobi error meaning 'no licence' or 'size-limited licence exceeded'."""
    errors = getattr(GRB, "Error", None)
    codes = {getattr(errors, "NO_LICENSE", _GRB_NO_LICENSE),
             getattr(errors, "SIZE_LIMIT_EXCEEDED", _GRB_SIZE_LIMIT_EXCEEDED)}
    text = str(exc).lower()
    return getattr(exc, "errno", None) in codes or "size-limited" in text or "license" in text


def _gurobi_status_names(GRB: Any) -> dict[int, str]:
    status = GRB.Status
    return {getattr(status, name): name for name in dir(status) if name.isupper()}


def _solve_gurobi(prog: _Program, time_limit: float, mip_gap: float, seed: int) -> _Raw:
    """The program through ``gurobipy``'s matrix API (MILP or convex QP).

    Objective ``x' Q x + c' x + constant`` with ``Q = diag(hessian) / 2``; rows
    ``A x <= ub``, ``A x >= lb`` (finite sides) and ``A x = b`` (``lb == ub``).
    """
    gp, GRB = _import_gurobi()
    try:
        env = gp.Env(empty=True)
        env.setParam("OutputFlag", 0)
        env.start()
    except gp.GurobiError as exc:
        raise _GurobiUnavailable(f"Gurobi could not start ({getattr(exc, 'errno', '?')}: {exc})") from None
    try:
        with gp.Model(env=env) as model:
            params = {"TimeLimit": float(time_limit), "MIPGap": float(mip_gap), "Seed": seed,
                      "FeasibilityTol": FEASIBILITY_TOL, "IntFeasTol": FEASIBILITY_TOL}
            for key, value in params.items():
                model.setParam(key, value)
            vtype = np.array([GRB.BINARY if prog.binary else GRB.CONTINUOUS] * prog.n
                             + [GRB.CONTINUOUS] * (prog.n_vars - prog.n))
            infinity = float(getattr(GRB, "INFINITY", 1e100))
            x = model.addMVar(prog.n_vars, lb=np.maximum(prog.col_lower, -infinity),
                              ub=np.minimum(prog.col_upper, infinity), vtype=vtype)
            Q = None if prog.hessian is None else sp.diags(prog.hessian / 2.0, format="csr")
            model.setMObjective(Q, prog.cost, prog.offset, sense=GRB.MINIMIZE)
            lo, hi = prog.row_lower, prog.row_upper
            eq = lo == hi
            for mask, sense, rhs in ((eq, GRB.EQUAL, lo), (np.isfinite(hi) & ~eq, GRB.LESS_EQUAL, hi),
                                     (np.isfinite(lo) & ~eq, GRB.GREATER_EQUAL, lo)):
                if mask.any():
                    model.addMConstr(prog.A[mask], x, sense, rhs[mask])
            model.optimize()
            code = model.Status
            text = _gurobi_status_names(GRB).get(code, str(code))
            has_point = model.SolCount > 0
            values = np.asarray(x.X, dtype=float) if has_point else None
            gap = float(model.MIPGap) if prog.binary and has_point else 0.0
    except gp.GurobiError as exc:
        if _licence_error(exc, GRB):
            if getattr(exc, "errno", None) == _GRB_SIZE_LIMIT_EXCEEDED or "size-limited" in str(exc).lower():
                _GUROBI_STATE["size_limited"] = True
            raise _GurobiUnavailable(
                f"the Gurobi licence does not cover this problem ({prog.n_vars} variables, "
                f"{prog.n_rows} rows; error {getattr(exc, 'errno', '?')}: {exc})"
            ) from None
        raise RuntimeError(f"backend 'gurobi': Gurobi error {getattr(exc, 'errno', '?')}: {exc}") from exc
    finally:
        env.dispose()
    if code == GRB.OPTIMAL:
        kind = "optimal"
    elif code in (GRB.INFEASIBLE, GRB.INF_OR_UNBD):
        return _Raw(None, "infeasible", text, 0.0)
    elif code in (GRB.TIME_LIMIT, getattr(GRB, "WORK_LIMIT", GRB.TIME_LIMIT)):
        kind = "time_limit"
    else:
        kind = "suboptimal"
    return _Raw(values, kind if has_point else "failed", text, gap)


_BACKEND_FUNCTIONS = {"highs": _solve_highs, "osqp": _solve_osqp, "gurobi": _solve_gurobi}


# --------------------------------------------------------------------------------------
# Backend choice, infeasibility diagnosis
# --------------------------------------------------------------------------------------
def _open_source_backend(prog: _Program) -> str:
    return "highs" if prog.binary else "osqp"


def _gurobi_skip_reason(prog: _Program) -> str | None:
    """Why "auto" should not try Gurobi for ``prog`` (None: try it)."""
    if not gurobi_available():
        return "gurobipy is not installed"
    limit = GUROBI_SIZE_LIMIT if prog.binary else GUROBI_QP_SIZE_LIMIT
    too_big = max(prog.n_vars, prog.n_rows) > GUROBI_SIZE_LIMIT or (not prog.binary and prog.n_vars > limit)
    if _GUROBI_STATE["size_limited"] and too_big:
        return (f"the Gurobi licence is size-limited and the problem has {prog.n_vars} variables and "
                f"{prog.n_rows} rows (limit {limit} variables{'' if prog.binary else ' with a quadratic objective'})")
    return None


def _run_backend(prog: _Program, backend: str, time_limit: float, mip_gap: float, seed: int) -> tuple[str, _Raw]:
    """Resolve ``backend`` (logging the choice for "auto") and solve; returns ``(used, raw)``."""
    if backend == "osqp" and prog.binary:
        raise ValueError("backend: 'osqp' solves continuous QPs only; binary targets need 'highs' or 'gurobi'")
    if backend != "auto":
        try:
            return backend, _BACKEND_FUNCTIONS[backend](prog, time_limit, mip_gap, seed)
        except _GurobiUnavailable as exc:
            raise RuntimeError(
                f"backend: 'gurobi' was requested but cannot be used: {exc}. Install gurobipy with a licence "
                "for this problem size, or use backend='auto' or 'highs'"
            ) from None
    fallback = _open_source_backend(prog)
    reason = _gurobi_skip_reason(prog)
    if reason is None:
        try:
            raw = _solve_gurobi(prog, time_limit, mip_gap, seed)
            _log_choice("gurobi", f"{prog.n_vars} variables, {prog.n_rows} rows")
            return "gurobi", raw
        except _GurobiUnavailable as exc:
            reason = str(exc)
    _log_choice(fallback, reason)
    return fallback, _BACKEND_FUNCTIONS[fallback](prog, time_limit, mip_gap, seed)


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
        prog = _assemble(refs, weights, [enc], loss, binary)
        feasibility = replace(prog, cost=np.zeros_like(prog.cost), hessian=None, offset=0.0)
        if _solve_highs(feasibility, time_limit, 1.0, seed).status == "infeasible":
            alone.append(enc.name)
    return alone


def _raise_infeasible(raw: _Raw, backend: str, refs: np.ndarray, weights: np.ndarray,
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
) -> ProjectionResult:
    """Project references onto the targets allowed by linear encodings (module doc, [GeDI] eq 56).

    Solves ``min_{z, a} sum_r w_r L(z, r_r)`` subject to every encoding's rows
    ``lb <= A_z z + A_a a <= ub`` and auxiliary bounds, with ``L`` the mean squared or mean
    absolute (Hamming) difference, ``z`` binary or real.

    Parameters
    ----------
    reference : array-like (n,) or (R, n), or a sequence of R vectors (n,)
        The references ``r_r`` (numpy, torch or lists). Moving Targets passes the
        predictions and the true targets.
    weights : float or sequence of R floats, optional
        ``w_r >= 0`` with a positive sum; default all ones.
    encodings : LinearEncoding or sequence of LinearEncoding
        Constraint rows on ``z`` (and on each encoding's own auxiliary variables).
    loss : {"squared", "hamming"}, default "squared"
        ``"hamming"`` needs ``binary=True`` and references in ``[0, 1]``.
    binary : bool, default False
        ``z`` in ``{0, 1}^n`` (mixed-integer linear program) instead of real (convex QP).
    backend : {"auto", "highs", "osqp", "gurobi"}, default "auto"
        See the module doc; ``"osqp"`` solves continuous problems only.
    time_limit : float, default 60.0
        Seconds allowed to the solver (> 0).
    mip_gap : float, default 1e-4
        Relative optimality gap at which a MILP is declared optimal (>= 0; the HiGHS and
        Gurobi default). Use 0 to prove exact optimality.
    seed : int, default 0
        The solver's random seed (HiGHS ``random_seed``, Gurobi ``Seed``).

    Returns
    -------
    ProjectionResult

    Raises
    ------
    ValueError
        Bad arguments (each message names the argument and the value), references outside
        ``[0, 1]`` for the Hamming loss, an encoding whose ``A_z`` does not have ``n``
        columns or whose bounds admit no value, ``"osqp"`` with binary targets.
    ProjectionInfeasibleError
        (a RuntimeError) No feasible target vector; the message names the constraints.
    RuntimeError
        The solver stopped without a feasible point (e.g. time limit), failed, or
        ``backend="gurobi"`` is not usable here (not installed, no licence, size limit).

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
    refs = _references(reference)
    w = _weights(weights, refs.shape[0])
    if loss == "hamming":
        if not binary:
            raise ValueError("loss: 'hamming' needs binary=True (the Hamming distance of real targets is not offered)")
        if (refs < 0).any() or (refs > 1).any():
            raise ValueError(f"reference: the Hamming loss needs values in [0, 1], got range "
                             f"[{refs.min():g}, {refs.max():g}]")
    encodings = _check_encodings(encodings, refs.shape[1])

    start = time.perf_counter()
    prog = _assemble(refs, w, encodings, loss, binary)
    used, raw = _run_backend(prog, backend, time_limit, mip_gap, seed)
    seconds = time.perf_counter() - start
    if raw.status == "infeasible":
        _raise_infeasible(raw, used, refs, w, encodings, loss, binary, time_limit, seed)
    if raw.x is None:
        raise RuntimeError(f"projection failed: backend {used!r} stopped with status {raw.solver_status!r} and "
                           f"no feasible target vector (time_limit={time_limit:g} s)")
    x = raw.x * prog.scale
    z = x[: prog.n]
    if binary:
        z = np.round(z).clip(0.0, 1.0)
    aux = tuple(x[s] for s in prog.aux_slices)
    terms = _mean_losses(z, refs, loss)
    result = ProjectionResult(
        z=z, aux=aux, objective=float(w @ terms), terms=tuple(float(t) for t in terms), status=raw.status,
        gap=raw.gap, backend=used, seconds=seconds, solver_status=raw.solver_status,
        max_violation=_max_violation(encodings, z, aux),
    )
    logger.debug("projection: %s %s, objective %.6g, gap %.2e, %.3f s, max violation %.2e", used,
                 raw.solver_status, result.objective, result.gap, seconds, result.max_violation)
    return result
