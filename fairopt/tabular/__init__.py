"""A user's own table (CSV or parquet) through training, prediction and reporting: the work
behind ``fairopt train --data``, ``fairopt predict`` and ``fairopt report``.

Training (:func:`train_table`) reads the columns by their names:

- the target: two labels of any type (text such as ``"approved"`` / ``"rejected"``,
  0/1, booleans; ``positive`` names the positive class, else the last label in sorted
  order) or, for ``task="regression"``, numbers;
- the sensitive columns: used by the constraints and the group reports only, not model
  inputs unless ``include_sensitive``;
- every other column, except those in ``ignore``, is a model input, encoded by
  :meth:`fairopt.FairData.from_frame` with the library's one rule: text columns whose
  values all spell numbers become numbers, other text columns are one-hot encoded, both
  logged.

The model is a :class:`fairopt.FairClassifier` (binary target) or
:class:`fairopt.FairRegressor` fitted with the options given (their defaults otherwise) and saved with
:func:`fairopt.save` as a :class:`~fairopt.SavedModel`: the torch model, the fitted
preprocessor (raw columns to model inputs, training statistics), the schema, the
constraints and, in ``metadata``, what :func:`predict_table` needs besides (target name and
class labels, threshold, sensitive columns, the columns read as text) with the training
outcome. ``fairopt.load(path).predict(frame)`` gives the labels ``fairopt predict`` writes.
"""

from fairopt.tabular.outputs import (bound_lines, bound_parts, command_line, constraint_table, held_out_part,
                                     plot_training, predict_table, prediction_inputs, report_table, run_report,
                                     training_rows_label, write_run)
from fairopt.tabular.tables import LAYOUT, THRESHOLD, VIOLATION_TOL, TableModel, load_table_model, read_table
from fairopt.tabular.training import TrainedTable, train_table

__all__ = ["LAYOUT", "THRESHOLD", "VIOLATION_TOL", "TableModel", "TrainedTable", "read_table", "train_table",
           "write_run", "load_table_model", "prediction_inputs", "predict_table", "report_table", "run_report",
           "plot_training", "constraint_table", "command_line", "bound_lines", "bound_parts", "held_out_part",
           "training_rows_label"]
