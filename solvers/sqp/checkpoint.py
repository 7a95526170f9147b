"""Engine checkpoints of the stochastic SQP: what :meth:`StochasticSQP.state_dict
<solvers.sqp.StochasticSQP.state_dict>` holds, and how ``fit(..., resume=)`` checks one
against the problem and continues from it."""

from __future__ import annotations

import math
from typing import Any

import torch

from solvers.outcome import BestIterate, Candidate
from solvers.problem import assign_parameters, row_violations
from solvers.sqp.snapshot import ConstraintSnapshot
from solvers.sqp.state import SQPState
from solvers.validation import check_flag, finite_float, nonnegative_float, positive_float, positive_int

__all__ = ["CHECKPOINT_FORMAT", "STATE_KEYS", "check_resumed_state", "checkpoint", "restore_checkpoint",
           "resume_iterates", "resume_snapshot", "resumed_spreads"]

#: Version of the checkpoint layout (``state_dict()["format"]``).
CHECKPOINT_FORMAT = 1
#: Keys a checkpoint's ``state`` must hold.
STATE_KEYS = ("tau", "xi", "beta", "L", "Gamma", "merit_avg", "since_change", "iteration", "warned_relaxed",
              "epochs_done")


def checkpoint(state: SQPState, generator: torch.Generator, n_rows: int, last_params: torch.Tensor,
               tracker: BestIterate, metric: str = "adam", snapshot: ConstraintSnapshot | None = None,
               spreads: tuple[float | None, float | None] = (None, None)) -> dict:
    """The content of :meth:`StochasticSQP.state_dict <solvers.sqp.StochasticSQP.state_dict>`:
    the engine state as a dict (:meth:`SQPState.to_dict <solvers.sqp.state.SQPState.to_dict>`),
    a copy of its Hessian accumulator ``v`` and the metric it belongs to (``hessian_``: a second
    moment of the gradients for "adam" and "adagrad", a curvature for "gauss-newton"), the
    sampling generator's state, the number of constraint rows, the last iterate, the
    tracker's best iterate and its closest infeasible one (``closest``), the constraint snapshot's
    state (None without a snapshot) and the metric spreads of the fit's start (``metric_spread_``,
    ``start_spread_``, which set ``lr="auto"``)."""
    return {
        "format": CHECKPOINT_FORMAT,
        "state": state.to_dict(),
        "hessian_v": state.v.detach().clone(),
        "hessian": metric,
        "generator": generator.get_state(),
        "n_rows": int(n_rows),
        "last_params": last_params.clone(),
        "best": _candidate_state(tracker.best),
        "closest": _candidate_state(tracker.closest),
        "snapshot": None if snapshot is None else snapshot.state_dict(),
        "spreads": [None if v is None else float(v) for v in spreads],
    }


def _candidate_state(candidate: Candidate | None) -> dict | None:
    """A tracker's candidate as checkpoint content (copies of its parameters and exact rows), None for none."""
    if candidate is None:
        return None
    return {"params": candidate.params.clone(), "f": float(candidate.f), "c_exact": candidate.c_exact.clone(),
            "iteration": int(candidate.iteration)}


def resumed_spreads(resume: dict) -> tuple[float | None, float | None] | None:
    """The metric spreads ``(metric_spread_, start_spread_)`` of the run a checkpoint continues,
    which a resumed fit's ``lr="auto"`` reads so that its steps are the uninterrupted run's; None for
    a checkpoint written before spreads were kept (the fit then measures them at the resumed
    parameters)."""
    saved = resume.get("spreads")
    if saved is None:
        return None
    try:
        if not isinstance(saved, (list, tuple)) or len(saved) != 2:
            raise ValueError(f"spreads: expected [metric spread, start spread], got {saved!r}")
        metric, start = (None if v is None else nonnegative_float(v, "spreads") for v in saved)
    except ValueError as exc:
        raise ValueError(f"resume: invalid checkpoint state, {exc}") from None
    return metric, start


def restore_checkpoint(resume: Any, v: torch.Tensor, gen: torch.Generator, n_rows: int,
                       metric: str = "adam") -> SQPState:
    """Check a :meth:`StochasticSQP.state_dict` checkpoint against this problem and this fit's
    metric (a checkpoint without one is taken as "adam"), load its Hessian accumulator into ``v``
    and its generator state into ``gen``; return the state (holding ``v``)."""
    if not isinstance(resume, dict) or resume.get("format") != CHECKPOINT_FORMAT:
        found = resume.get("format") if isinstance(resume, dict) else type(resume).__name__
        raise ValueError(f"resume: expected a StochasticSQP.state_dict() checkpoint (format {CHECKPOINT_FORMAT}), "
                         f"got {found!r}")
    state = resume.get("state")
    missing = [k for k in STATE_KEYS if not isinstance(state, dict) or k not in state]
    if missing:
        raise ValueError(f"resume: the checkpoint's state lacks {missing}")
    check_resumed_state(state)
    hv = resume.get("hessian_v")
    if not isinstance(hv, torch.Tensor) or hv.numel() != v.numel():
        size = hv.numel() if isinstance(hv, torch.Tensor) else type(hv).__name__
        raise ValueError(f"resume: the checkpoint's Hessian accumulator has {size} entries but the model has "
                         f"{v.numel()} trainable parameters")
    saved_metric = resume.get("hessian", "adam")
    if saved_metric != metric:
        raise ValueError(f"resume: the checkpoint's accumulator belongs to the {saved_metric!r} metric, this fit "
                         f"uses {metric!r} (set hessian= to the checkpoint's metric)")
    if resume.get("n_rows") != n_rows:
        raise ValueError(f"resume: the checkpoint was taken with {resume.get('n_rows')!r} constraint rows, "
                         f"these constraints have {n_rows}")
    if not bool((torch.isfinite(hv) & (hv >= 0)).all()):
        raise ValueError("resume: the checkpoint's Hessian accumulator has negative or non-finite entries")
    v.copy_(hv.reshape(-1).to(v.dtype))
    gen.set_state(resume["generator"].clone())
    try:
        return SQPState.from_dict(state, v)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"resume: invalid checkpoint state, {exc}") from None


def check_resumed_state(saved: dict) -> None:
    """A checkpoint's ``state`` dict ``saved``, checked like the settings it continues before it becomes
    an :class:`~solvers.sqp.state.SQPState`."""
    try:
        for name in ("tau", "xi", "beta"):
            positive_float(saved[name], name)
        for name in ("L", "Gamma"):
            if saved[name] is not None:
                positive_float(saved[name], name)
        if saved["merit_avg"] is not None:
            finite_float(saved["merit_avg"], "merit_avg")
        for name in ("since_change", "iteration", "epochs_done"):
            positive_int(saved[name], name, allow_zero=True)
        check_flag(saved["warned_relaxed"], "warned_relaxed")
        recent = saved.get("recent_steps")
        if recent is not None and not isinstance(recent, (list, tuple)):
            raise ValueError(f"recent_steps: expected a list of step lengths, got {type(recent).__name__}")
        for length in recent or ():
            positive_float(length, "recent_steps", allow_zero=True)
    except ValueError as exc:
        raise ValueError(f"resume: invalid checkpoint state, {exc}") from None


def resume_iterates(resume: dict, params: list[torch.Tensor], tracker: BestIterate) -> None:
    """Continue from a checkpoint's LAST iterate (the model passed in holds the returned, best
    one) and carry its best iterate, and its closest infeasible one, over into ``tracker``."""
    last = resume.get("last_params")
    total = sum(p.numel() for p in params)
    if last is not None:
        if not isinstance(last, torch.Tensor) or last.numel() != total:
            raise ValueError(f"resume: the checkpoint's last iterate has "
                             f"{last.numel() if isinstance(last, torch.Tensor) else type(last).__name__} entries but "
                             f"the model has {total} trainable parameters")
        if not bool(torch.isfinite(last).all()):
            raise ValueError("resume: the checkpoint's last iterate has non-finite entries")
        assign_parameters(params, last)
    best = resume.get("best")
    if isinstance(best, dict):
        tracker.offer([best["params"]], float(best["f"]), best["c_exact"], int(best["iteration"]))
    # set, not offered: the offer's filter reads the model, which holds the last iterate
    closest = resume.get("closest")
    tracker.closest = None
    if isinstance(closest, dict) and tracker.closest_filter is not None:
        kept, f = closest.get("params"), float(closest.get("f", math.nan))
        c = torch.as_tensor(closest.get("c_exact", [])).detach().to(torch.float64).reshape(-1)
        if not (isinstance(kept, torch.Tensor) and kept.numel() == total and bool(torch.isfinite(kept).all())
                and math.isfinite(f) and c.numel() == tracker.lower.numel() and bool(torch.isfinite(c).all())):
            raise ValueError("resume: the checkpoint's closest iterate does not fit this model and its constraint "
                             "rows (or has non-finite entries)")
        tracker.closest = Candidate(kept.clone(), f, c, row_violations(c, tracker.lower, tracker.upper),
                                    int(closest["iteration"]))


def resume_snapshot(resume: dict, snapshot: ConstraintSnapshot | None, n_params: int, n_rows: int) -> None:
    """Load a checkpoint's constraint snapshot into this fit's ``snapshot`` (both present); a
    checkpoint without one (a full-batch or sampled-constraint fit, or one written before snapshots
    were saved) leaves it to refresh afresh at its first step."""
    saved = resume.get("snapshot")
    if snapshot is not None and saved is not None:
        snapshot.load_state_dict(saved, n_params, n_rows)
