"""The backends of a projection: one function per solver (HiGHS, OSQP, Gurobi) behind one
table, :func:`solve_program` dispatching on the backend's name (as ``qpsolvers.solve_qp(...,
solver=)`` does), and what this process knows about Gurobi (importable, licence size-limited)."""

from __future__ import annotations

import logging
import os
import sys
import tempfile
import warnings
from typing import Any

import numpy as np
import scipy.sparse as sp

from solvers.problem import split_rows
from solvers.qp.reference import OSQP_MAX_ITERATIONS
from solvers.projection.program import Program
from solvers.projection.results import BackendResult

__all__ = [
    "FEASIBILITY_TOL",
    "GUROBI_SIZE_LIMIT",
    "GUROBI_QP_SIZE_LIMIT",
    "OSQP_TOL",
    "GurobiUnavailable",
    "gurobi_available",
    "gurobi_skip_reason",
    "solve_program",
]

#: Primal feasibility (and integrality) tolerance asked of every backend.
FEASIBILITY_TOL = 1e-9
#: Variables / linear constraints allowed by the size-limited licence of the gurobipy wheel.
GUROBI_SIZE_LIMIT = 2000
#: Variables allowed by that licence when the objective has quadratic terms (continuous QP).
GUROBI_QP_SIZE_LIMIT = 200
#: OSQP absolute/relative tolerances (the solution is then polished on the active set).
OSQP_TOL = 1e-9

# Gurobi error numbers (GRB.Error.NO_LICENSE, GRB.Error.SIZE_LIMIT_EXCEEDED), used when the
# installed gurobipy does not expose the names.
_GRB_NO_LICENSE = 10009
_GRB_SIZE_LIMIT_EXCEEDED = 10010
# What this process has learnt about Gurobi: importable (None = not checked yet) and
# whether its licence was found to be size-limited.
_GUROBI_STATE: dict[str, bool | None] = {"importable": None, "size_limited": False}
# Whether this process has built a HiGHS instance (its first one prints the banner).
_HIGHS_STATE: dict[str, bool] = {"announced": False}

logger = logging.getLogger(__name__)


class GurobiUnavailable(Exception):
    """Gurobi cannot solve this problem here (not importable, no licence, size limit)."""


# --------------------------------------------------------------------------------------
# HiGHS and OSQP
# --------------------------------------------------------------------------------------
def _solve_highs(prog: Program, time_limit: float, mip_gap: float, seed: int,
                 start: np.ndarray | None = None) -> BackendResult:
    """The program through ``highspy``: branch-and-cut for binary ``z``, HiGHS QP otherwise.

    ``start`` (program scale, NaN = not given) is passed with ``Highs.setSolution``: a MIP
    start that HiGHS checks, and tries to complete when only some values are given (fixing
    the given integer values, solving for the others); an infeasible start is discarded."""
    import highspy

    h = _new_highs(highspy)
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
    if start is not None:
        given = np.flatnonzero(np.isfinite(start)).astype(np.int32)
        h.setSolution(int(given.size), given, start[given].astype(np.float64))
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
        return BackendResult(None, kind, text, 0.0)
    return BackendResult(x, kind if x is not None else "failed", text, gap)


def _new_highs(highspy: Any) -> Any:
    """A ``highspy.Highs``. The first one built in a process prints the HiGHS banner from C++
    straight to file descriptor 1, before ``output_flag`` can be set; that construction runs
    with descriptor 1 sent to a temporary file, whose text is logged at DEBUG."""
    if _HIGHS_STATE["announced"]:
        return highspy.Highs()
    sys.stdout.flush()
    with tempfile.TemporaryFile() as sink:
        saved = os.dup(1)
        os.dup2(sink.fileno(), 1)
        try:
            h = highspy.Highs()
        finally:
            os.dup2(saved, 1)
            os.close(saved)
        sink.seek(0)
        banner = sink.read().decode(errors="replace").strip()
    _HIGHS_STATE["announced"] = True
    if banner:
        logger.debug("HiGHS: %s", " ".join(banner.split()))
    return h


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


def _solve_osqp(prog: Program, time_limit: float, mip_gap: float, seed: int,
                start: np.ndarray | None = None) -> BackendResult:
    """The convex QP through ``qpsolvers`` / OSQP with tight tolerances and polishing; a
    complete ``start`` (no NaN) is OSQP's primal warm start (``initvals``)."""
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
            problem, solver="osqp", initvals=start if start is not None and np.isfinite(start).all() else None,
            eps_abs=OSQP_TOL, eps_rel=OSQP_TOL, polish=True,
            max_iter=OSQP_MAX_ITERATIONS, time_limit=float(time_limit), verbose=False,
        )
    info = (solution.extras or {}).get("info")
    text = str(getattr(info, "status", "unknown"))
    polished = int(getattr(info, "status_polish", 0)) == 1
    text = f"{text} ({'polished' if polished else 'not polished'})"
    if "primal infeasible" in text:
        return BackendResult(None, "infeasible", text, 0.0)
    x = None if solution.x is None else np.asarray(solution.x, dtype=float)
    if x is None or not np.isfinite(x).all() or not text.startswith("solved"):
        return BackendResult(None, "failed", text, 0.0)  # iteration/time limit: the iterate is not feasible
    return BackendResult(x, "optimal" if solution.found else "suboptimal", text, 0.0)


# --------------------------------------------------------------------------------------
# Gurobi and its licence
# --------------------------------------------------------------------------------------
def _import_gurobi() -> tuple[Any, Any]:
    """``(gurobipy, GRB)``; raises GurobiUnavailable when gurobipy is not importable."""
    try:
        import gurobipy as gp
    except ImportError as exc:
        _GUROBI_STATE["importable"] = False
        raise GurobiUnavailable(f"gurobipy is not installed ({exc})") from None
    _GUROBI_STATE["importable"] = True
    return gp, gp.GRB


def gurobi_available() -> bool:
    """Whether ``gurobipy`` can be imported (its licence is only checked by a solve)."""
    if _GUROBI_STATE["importable"] is None:
        try:
            _import_gurobi()
        except GurobiUnavailable:
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


def _solve_gurobi(prog: Program, time_limit: float, mip_gap: float, seed: int,
                  start: np.ndarray | None = None) -> BackendResult:
    """The program through ``gurobipy``'s matrix API (MILP or convex QP).

    Objective ``x' Q x + c' x + constant`` with ``Q = diag(hessian) / 2``; rows
    ``A x <= ub``, ``A x >= lb`` (finite sides) and ``A x = b`` (``lb == ub``). ``start``
    is the variables' ``Start`` attribute (NaN entries ``GRB.UNDEFINED``: a partial MIP start).
    """
    gp, GRB = _import_gurobi()
    try:
        env = gp.Env(empty=True)
        env.setParam("OutputFlag", 0)
        env.start()
    except gp.GurobiError as exc:
        raise GurobiUnavailable(f"Gurobi could not start ({getattr(exc, 'errno', '?')}: {exc})") from None
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
            if start is not None:
                x.Start = np.where(np.isfinite(start), start, getattr(GRB, "UNDEFINED", 1e101))
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
            raise GurobiUnavailable(
                f"the Gurobi licence does not cover this problem ({prog.n_vars} variables, "
                f"{prog.n_rows} rows; error {getattr(exc, 'errno', '?')}: {exc})"
            ) from None
        raise RuntimeError(f"backend 'gurobi': Gurobi error {getattr(exc, 'errno', '?')}: {exc}") from exc
    finally:
        env.dispose()
    if code == GRB.OPTIMAL:
        kind = "optimal"
    elif code in (GRB.INFEASIBLE, GRB.INF_OR_UNBD):
        return BackendResult(None, "infeasible", text, 0.0)
    elif code in (GRB.TIME_LIMIT, getattr(GRB, "WORK_LIMIT", GRB.TIME_LIMIT)):
        kind = "time_limit"
    else:
        kind = "suboptimal"
    return BackendResult(values, kind if has_point else "failed", text, gap)


def gurobi_skip_reason(prog: Program) -> str | None:
    """Why "auto" should not try Gurobi for ``prog`` (None: try it)."""
    if not gurobi_available():
        return "gurobipy is not installed"
    limit = GUROBI_SIZE_LIMIT if prog.binary else GUROBI_QP_SIZE_LIMIT
    too_big = max(prog.n_vars, prog.n_rows) > GUROBI_SIZE_LIMIT or (not prog.binary and prog.n_vars > limit)
    if _GUROBI_STATE["size_limited"] and too_big:
        return (f"the Gurobi licence is size-limited and the problem has {prog.n_vars} variables and "
                f"{prog.n_rows} rows (limit {limit} variables{'' if prog.binary else ' with a quadratic objective'})")
    return None


# --------------------------------------------------------------------------------------
# The table of backends
# --------------------------------------------------------------------------------------
_BACKEND_FUNCTIONS = {"highs": _solve_highs, "osqp": _solve_osqp, "gurobi": _solve_gurobi}


def solve_program(prog: Program, backend: str, time_limit: float, mip_gap: float, seed: int,
                  start: np.ndarray | None = None) -> BackendResult:
    """Solve ``prog`` with "highs", "osqp" or "gurobi", from ``start`` (program scale, NaN where
    unknown) when given; :class:`GurobiUnavailable` lets the caller choose an error or a fallback."""
    return _BACKEND_FUNCTIONS[backend](prog, time_limit, mip_gap, seed, start)
