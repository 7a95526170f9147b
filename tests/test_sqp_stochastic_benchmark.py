"""benchmarks/sqp_stochastic.py's grid counts a run that ends below the majority rate, or outside
its bound, as warned only when a failure warning reached the user: subclasses count too."""

from __future__ import annotations

import sys
from pathlib import Path

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"
if str(BENCHMARKS) not in sys.path:  # the script imports its siblings (_common) by name
    sys.path.insert(0, str(BENCHMARKS))

import sqp_stochastic  # noqa: E402

from solvers.outcome import ConstantPredictorWarning, NearConstantWarning  # noqa: E402


def test_failure_warnings_and_their_subclasses_count():
    assert sqp_stochastic.counts_as_failure(ConstantPredictorWarning("constant"))
    assert sqp_stochastic.counts_as_failure(NearConstantWarning("nearly constant"))
    assert not sqp_stochastic.counts_as_failure(UserWarning("something else"))
    assert not sqp_stochastic.counts_as_failure(RuntimeWarning("overflow"))
