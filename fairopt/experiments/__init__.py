"""Experiments: compare constraint and penalty methods on equal terms.

- :mod:`~fairopt.experiments.methods`: the :class:`Method` protocol and adapters for the
  engines (:class:`SQPMethod`, :class:`PenaltyMethod`, :class:`LagrangianMethod`,
  :class:`MovingTargetsMethod`);
- :func:`compare`: methods x grid values x seeds x folds -> one tidy DataFrame of exact
  measures on train and test, with each run's own bounded measure (``realised``);
  :func:`realised_vs_requested` reads every method on it;
- :func:`calibrate_penalty`: the JS-divergence elbow of [DC] App F, on a grid set by the
  ratio of [DC] eq 4.5 (:func:`lambda_scale`, :func:`lambda_grid`) unless one is given;
- :func:`compare_methods`, :func:`compare_to_reference`: Wilcoxon signed-rank tests of a
  metric between methods paired on seeds and folds ([DC] App D);
- plots: :func:`plot_requested_vs_realised`, :func:`plot_tradeoff`,
  :func:`plot_histories`, :func:`plot_calibration`;
- :mod:`~fairopt.experiments.configs`: named/TOML experiment configurations behind the
  ``fairopt bench`` and ``fairopt train`` commands.

``import fairopt`` does not import this subpackage; ``fairopt.experiments`` loads it on first
use. The paper reproductions built on it live outside the package, in ``benchmarks/papers``
of a source checkout (``python -m benchmarks.papers --list``).
"""

from fairopt.experiments.calibration import (
    DEFAULT_LAMBDA_MULTIPLIERS,
    CalibrationResult,
    calibrate_penalty,
    lambda_grid,
    lambda_scale,
    select_elbow,
)
from fairopt.experiments import sweeps
from fairopt.experiments.compare import compare, realised_vs_requested, split_data
from fairopt.experiments.configs import available_configs, load_config, minmax_sensitive, run_config, run_train
from fairopt.experiments.methods import (
    Fitted,
    LagrangianMethod,
    Method,
    MovingTargetsMethod,
    PenaltyMethod,
    SQPMethod,
    default_loss,
    model_factory,
)
from fairopt.experiments.significance import WilcoxonComparison, compare_methods, compare_to_reference, holm_adjust
from fairopt.experiments.plots import plot_calibration, plot_histories, plot_requested_vs_realised, plot_tradeoff
from fairopt.specs import build_constraint, build_penalty

__all__ = [
    "sweeps",
    "Method",
    "Fitted",
    "SQPMethod",
    "PenaltyMethod",
    "LagrangianMethod",
    "MovingTargetsMethod",
    "model_factory",
    "default_loss",
    "compare",
    "split_data",
    "realised_vs_requested",
    "calibrate_penalty",
    "select_elbow",
    "CalibrationResult",
    "lambda_scale",
    "lambda_grid",
    "DEFAULT_LAMBDA_MULTIPLIERS",
    "compare_methods",
    "compare_to_reference",
    "holm_adjust",
    "WilcoxonComparison",
    "plot_requested_vs_realised",
    "plot_tradeoff",
    "plot_histories",
    "plot_calibration",
    "available_configs",
    "load_config",
    "run_config",
    "run_train",
    "minmax_sensitive",
    "build_constraint",
    "build_penalty",
]
