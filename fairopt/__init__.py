"""fairopt: train models under hard fairness constraints.

>>> import fairopt
>>> from fairopt.constraints import DisparateImpact
>>> data = fairopt.datasets.load("adult")                # embedded UCI Adult
>>> train, test = data.split(test_size=0.2, seed=0)
>>> model = fairopt.models.mlp(train.n_features, seed=0)
>>> result = fairopt.StochasticSQP(epochs=50).fit(
...     model, train, loss="bce", constraints=[DisparateImpact("sex", delta=0.8)])
>>> report = fairopt.evaluate(model, test)
"""

import importlib
from typing import Any

from fairopt import constraints, datasets, learners, linear, measures, models, penalties, surrogates
from fairopt.certificate import Certificate, certify
from fairopt.data import FairData, Preprocessor
from fairopt.estimators import FairClassifier, FairRegressor
from fairopt.evaluation import evaluate, fairness_report, format_report
from fairopt.exceptions import FairnessWarning
from fairopt.persistence import SavedModel, load, save
from fairopt.report import GroupReport, group_report
from fairopt import metrics
from fairopt.learners import TorchLearner
from solvers import FitResult, History, LagrangianDual, MovingTargets, Penalty, StochasticSQP

__version__ = "0.1.0"

__all__ = [
    "Certificate",
    "certify",
    "FairClassifier",
    "FairData",
    "FairRegressor",
    "SavedModel",
    "load",
    "save",
    "FairnessWarning",
    "FitResult",
    "GroupReport",
    "History",
    "LagrangianDual",
    "MovingTargets",
    "Penalty",
    "Preprocessor",
    "StochasticSQP",
    "TorchLearner",
    "constraints",
    "datasets",
    "evaluate",
    "experiments",
    "fairness_report",
    "format_report",
    "group_report",
    "learners",
    "linear",
    "measures",
    "metrics",
    "models",
    "penalties",
    "surrogates",
    "__version__",
]


def __getattr__(name: str) -> Any:
    """``fairopt.experiments`` on first use: ``import fairopt`` does not load the comparison tools."""
    if name == "experiments":
        return importlib.import_module("fairopt.experiments")
    raise AttributeError(f"module 'fairopt' has no attribute {name!r}")
