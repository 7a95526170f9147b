r"""Hard labels that the rounding of a float32 forward pass decided (:func:`settle_rounded_labels`).

The engines measure a classifier's exact rows (group rates of ``out > 0``) on float32 outputs; a model's
predictions come from its float64 outputs (:func:`solvers.problem.float64_forward`), in which a row's output
does not depend on the rows around it. The two agree on every row farther than the float32 rounding from
the threshold (about ``1e-7`` of the terms a row sums). An end-game that keeps the best feasible iterate
selects, among iterates a tiny step apart, the last before a row crosses the threshold, so that row can end
within rounding of it: on 1,395 training rows with a group of 47 (Communities and Crime, DI >= 0.8), one
row at ``+3.6e-8`` in float64 sat at or below 0 in float32, the engine counted the bound met, and the labels
``predict`` gives put it at 0.781. One row of a small group moves its rate by several points.

The remedy keeps the labels the engine measured: the rows whose float64 label differs from the float32 one
all lie within rounding of the threshold, and a move of the output bias
(:func:`solvers.output_shift.output_bias`) by ``b`` moves every output by ``b``, so a float32 move of the
bias by about twice their distance from the threshold (at least one float32 step) gives them, in float64,
the labels the engine counted, and flips no other row as long as no other row lies that close. The move
is taken only then (checked on a float64 pass), and only when every differing row needs the same
direction; otherwise the model is left as it is, and the estimators' verdict, read on the float64 outputs,
reports what ``predict`` gives.
"""

from __future__ import annotations

import logging
from typing import Any

import torch

from solvers.output_shift import output_bias
from solvers.problem import eval_mode, float64_forward, model_outputs

__all__ = ["MAX_BIAS_ULPS", "settle_rounded_labels"]

#: Most float32 steps (units in the last place) the bias may move: a difference of rounding is a few.
MAX_BIAS_ULPS = 64

logger = logging.getLogger("solvers")


def _moved_bias(bias: float, move: float, up: bool) -> float | None:
    """The float32 value nearest ``bias + 2 move`` whose difference from ``bias`` is beyond ``move`` (strictly
    above a positive one, at or below a negative one), stepping one float32 place further where rounding fell
    short; None past :data:`MAX_BIAS_ULPS` steps."""
    value = torch.tensor(bias + 2.0 * move, dtype=torch.float32)
    toward = torch.tensor(float("inf") if up else float("-inf"), dtype=torch.float32)
    for _ in range(MAX_BIAS_ULPS):
        delta = float(value) - bias
        if (up and delta > move) or (not up and delta <= move):
            return float(value)
        value = torch.nextafter(value, toward)
    return None


def settle_rounded_labels(model: torch.nn.Module, data: Any) -> int:
    """Give the rows of ``data`` whose hard label ``out > 0`` differs between the float32 and the float64
    forward pass the float32 label, by a move of the output bias that does it and flips no other row
    (module docstring). Returns the number of rows settled; 0 leaves the model untouched (no row
    differs, they need opposite moves, the model has no output bias, or the move would flip another row).
    """
    if not isinstance(model, torch.nn.Module):
        return 0
    with eval_mode(model), torch.no_grad():
        measured = model_outputs(model, data).detach().to(torch.float64).cpu() > 0
        out = float64_forward(model, data.X)
        differ = measured != (out > 0)
        if not bool(differ.any()):
            return 0
        down, up = differ & ~measured, differ & measured  # float64 says positive / negative where float32 did not
        if bool(down.any()) and bool(up.any()):
            return 0
        params = [p for p in model.parameters() if p.requires_grad]
        bias = output_bias(model, params, data)
        if bias is None:
            return 0
        start = float(bias.detach().reshape(-1)[0])
        # down: out + b <= 0 on those rows, b <= -max(out); up: out + b > 0, b > -min(out)
        needed = -float(out[down].max()) if bool(down.any()) else -float(out[up].min())
        value = _moved_bias(start, needed, up=bool(up.any()))
        if value is None:
            return 0
        bias.fill_(value)
        moved = float64_forward(model, data.X) > 0
        if not bool(torch.equal(moved, measured)):
            bias.fill_(start)
            return 0
    count = int(differ.sum())
    logger.info("%d row(s) within float32 rounding of the decision threshold: output bias moved by %.3g so that "
                "the float64 predictions keep the labels the engine measured", count, value - start)
    return count
