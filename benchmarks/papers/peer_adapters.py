"""The peer benchmark's method adapters: one ``fit_predict(train, test, delta, seed) -> dict``
per method (fairopt's estimators, fairlearn, cooper, the Seldonian engine), registered in
:data:`ADAPTERS` (the list of methods is in the docstring of :mod:`benchmarks.papers.peers`,
which runs them on a grid)."""

from __future__ import annotations

import importlib
import logging
import math
import time
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Mapping, Sequence

import numpy as np


__all__ = ["ADAPTERS", "Adapter", "PEERS_INSTALL", "Part", "PeerUnavailable", "SENSITIVE", "adapter",
           "available_methods"]

logger = logging.getLogger("benchmarks.papers.peers")

SENSITIVE = "s"
PEERS_INSTALL = ('pip install "fairopt[peers]" && pip install --no-deps seldonian-engine==0.8.11 '
                 "&& pip install autograd cma graphviz")


class PeerUnavailable(ImportError):
    """A peer library is not installed; its method is skipped."""


@dataclass(frozen=True)
class Part:
    """One part of a split: features ``X`` (n, p) float32, target ``y`` (n,) in {0, 1},
    binary sensitive attribute ``s`` (n,) in {0, 1}."""

    X: np.ndarray
    y: np.ndarray
    s: np.ndarray

    def __len__(self) -> int:
        return len(self.y)


Adapter = Callable[[Part, Part, float, int], dict]

#: name -> adapter ``fit_predict(train, test, delta, seed)``; each carries ``requires``
#: (importable modules) and ``note`` (a remark for the table) attributes.
ADAPTERS: dict[str, Adapter] = {}


def adapter(name: str, requires: Sequence[str] = (), note: str = "") -> Callable[[Adapter], Adapter]:
    """Decorator registering ``fit_predict`` in :data:`ADAPTERS` under ``name``.

    Parameters
    ----------
    name : str
        Method name used in the grid and the table.
    requires : sequence of str
        Modules the adapter imports; if one cannot be imported the method is skipped.
    note : str
        A remark shown in the table's ``note`` column.
    """

    def wrap(fn: Adapter) -> Adapter:
        fn.requires = tuple(requires)  # type: ignore[attr-defined]
        fn.note = note  # type: ignore[attr-defined]
        ADAPTERS[name] = fn
        return fn

    return wrap


def _require(module: str) -> Any:
    """Import ``module`` or raise :class:`PeerUnavailable` with the install command."""
    try:
        return importlib.import_module(module)
    except ImportError as exc:  # includes a module set to None in sys.modules
        raise PeerUnavailable(f"{module} is not installed ({exc}); install the peers with: {PEERS_INSTALL}") from exc


def available_methods(methods: Iterable[str], adapters: Mapping[str, Adapter] | None = None) -> list[str]:
    """The methods among ``methods`` whose required modules import; logs every skip.

    Raises
    ------
    ValueError : a name that is not a registered adapter.
    """
    adapters = ADAPTERS if adapters is None else adapters
    keep = []
    for name in methods:
        if name not in adapters:
            raise ValueError(f"methods: unknown method {name!r}; known: {sorted(adapters)}")
        try:
            for module in getattr(adapters[name], "requires", ()):
                _require(module)
        except PeerUnavailable as exc:
            logger.warning("skipping method %s: %s", name, exc)
            continue
        keep.append(name)
    return keep


def _result(train_pred: Any, test_pred: Any, seconds: float, status: str = "ok", note: str = "") -> dict:
    return {"train_pred": np.asarray(train_pred).reshape(-1).astype(np.int64),
            "test_pred": np.asarray(test_pred).reshape(-1).astype(np.int64),
            "fit_time": float(seconds), "status": status, "note": note}


# --------------------------------------------------------------------------------------
# our methods (estimator defaults, on purpose: the runner measures the defaults of the day)
# --------------------------------------------------------------------------------------
def _fairopt_adapter(method: str, model: str, **options: Any) -> Adapter:
    def fit_predict(train: Part, test: Part, delta: float, seed: int) -> dict:
        from fairopt.estimators import FairClassifier

        clf = FairClassifier(constraints=[("disparate_impact", SENSITIVE, delta)], method=method, model=model,
                             seed=seed, sensitive_names=SENSITIVE, **options)
        start = time.perf_counter()
        clf.fit(train.X, train.y, sensitive_features=train.s)
        seconds = time.perf_counter() - start
        status = str(getattr(clf, "status_", "ok"))
        certificates = getattr(clf, "certificate_", None)
        if certificates:  # validation_fraction: the held-out certificate of the returned model
            status += "; certificate " + ("passed" if all(c.passed for c in certificates) else "FAILED")
        return _result(clf.predict(train.X), clf.predict(test.X), seconds, status=status)

    fit_predict.__name__ = f"fit_predict_{method}_{model}"
    extra = "".join(f", {k}={v!r}" for k, v in options.items())
    fit_predict.__doc__ = f"fairopt.FairClassifier(method={method!r}, model={model!r}{extra}), else its defaults."
    return fit_predict


for _name, _method, _model, _options in [
        ("sqp-linear", "sqp", "linear", {}), ("sqp-mlp", "sqp", "mlp", {}),
        ("sqp-linear-margin", "sqp", "linear", {"margin": "auto"}),  # the held-out margin
        # certified on a held-out half (the Seldonian engine holds out 60%), 95% confidence
        ("sqp-linear-certified", "sqp", "linear", {"margin": "auto", "validation_fraction": 0.5,
                                                   "on_fail": "ignore"}),
        ("lagrangian", "lagrangian", "linear", {}), ("penalty", "penalty", "linear", {}),
        ("moving-targets", "moving_targets", "linear", {})]:
    adapter(_name, requires=("torch",))(_fairopt_adapter(_method, _model, **_options))


# --------------------------------------------------------------------------------------
# fairlearn
# --------------------------------------------------------------------------------------
def _f64(part: Part) -> np.ndarray:
    """fairlearn wants float64 features (float32 fails inside ThresholdOptimizer)."""
    return np.asarray(part.X, dtype=np.float64)


def _logistic(seed: int) -> Any:
    from sklearn.linear_model import LogisticRegression

    return LogisticRegression(max_iter=1000, random_state=seed)


@adapter("fairlearn-eg", requires=("fairlearn", "sklearn"), note="DP ratio_bound=sqrt(delta), randomised")
def fairlearn_eg(train: Part, test: Part, delta: float, seed: int) -> dict:
    """fairlearn ExponentiatedGradient, ``DemographicParity(ratio_bound=sqrt(delta))``.

    fairlearn bounds each group's rate against the overall rate in both directions by
    ``r``, so the group ratio is at least about ``r**2``: ``r = sqrt(delta)``.
    """
    reductions = _require("fairlearn.reductions")
    eg = reductions.ExponentiatedGradient(_logistic(seed), reductions.DemographicParity(ratio_bound=math.sqrt(delta)))
    start = time.perf_counter()
    eg.fit(_f64(train), train.y, sensitive_features=train.s)
    seconds = time.perf_counter() - start
    return _result(eg.predict(_f64(train), random_state=seed), eg.predict(_f64(test), random_state=seed + 1), seconds)


@adapter("fairlearn-grid", requires=("fairlearn", "sklearn"), note="DP ratio_bound=sqrt(delta), grid 10")
def fairlearn_grid(train: Part, test: Part, delta: float, seed: int) -> dict:
    """fairlearn GridSearch (default grid of 10 multipliers), same constraint as EG."""
    reductions = _require("fairlearn.reductions")
    gs = reductions.GridSearch(_logistic(seed), constraints=reductions.DemographicParity(ratio_bound=math.sqrt(delta)))
    start = time.perf_counter()
    gs.fit(_f64(train), train.y, sensitive_features=train.s)
    seconds = time.perf_counter() - start
    return _result(gs.predict(_f64(train)), gs.predict(_f64(test)), seconds)


@adapter("fairlearn-to", requires=("fairlearn", "sklearn"), note="exact DP, no ratio (delta ignored); uses s")
def fairlearn_to(train: Part, test: Part, delta: float, seed: int) -> dict:
    """fairlearn ThresholdOptimizer for demographic parity over a LogisticRegression.

    It takes no ratio bound: ``delta`` is ignored. Predictions are randomised
    (``random_state``) and need ``s`` at prediction time.
    """
    post = _require("fairlearn.postprocessing")
    to = post.ThresholdOptimizer(estimator=_logistic(seed), constraints="demographic_parity",
                                 predict_method="predict_proba")
    start = time.perf_counter()
    to.fit(_f64(train), train.y, sensitive_features=train.s)
    seconds = time.perf_counter() - start
    return _result(to.predict(_f64(train), sensitive_features=train.s, random_state=seed),
                   to.predict(_f64(test), sensitive_features=test.s, random_state=seed + 1), seconds)


# --------------------------------------------------------------------------------------
# cooper
# --------------------------------------------------------------------------------------
@adapter("cooper", requires=("cooper", "torch"), note="GDA, sigmoid(logit/0.1) rates, 500 epochs")
def cooper_lagrangian(train: Part, test: Part, delta: float, seed: int, epochs: int = 500,
                      temperature: float = 0.1) -> dict:
    """A plain Lagrangian with cooper 1.x: logistic model, smoothed DI rows as constraints.

    Rows ``delta * p_1 - p_0 <= 0`` and ``delta * p_0 - p_1 <= 0`` with the smoothed
    positive rates ``p_g = mean(sigmoid(logit / temperature))`` of each group (a sharp
    smoothed step: with ``temperature=1`` the rates are mean probabilities, which the
    hard-prediction DI does not follow, and the bound is missed); full-batch Adam (lr
    0.01) on the primal, gradient ascent (lr 0.05) on the multipliers. Fixed settings,
    not tuned per data set.
    """
    cooper = _require("cooper")
    import torch

    torch.manual_seed(seed)
    X, y = torch.as_tensor(train.X, dtype=torch.float32), torch.as_tensor(train.y, dtype=torch.float32)
    g1 = torch.as_tensor(train.s == 1)
    model = torch.nn.Linear(X.shape[1], 1)

    class DI(cooper.ConstrainedMinimizationProblem):
        def __init__(self) -> None:
            super().__init__()
            self.di = cooper.Constraint(constraint_type=cooper.ConstraintType.INEQUALITY,
                                        multiplier=cooper.multipliers.DenseMultiplier(num_constraints=2))

        def compute_cmp_state(self, model: torch.nn.Module, X: torch.Tensor, y: torch.Tensor) -> Any:
            logits = model(X).squeeze(1)
            rate = torch.sigmoid(logits / temperature)
            p0, p1 = rate[~g1].mean(), rate[g1].mean()
            rows = torch.stack([delta * p1 - p0, delta * p0 - p1])
            loss = torch.nn.functional.binary_cross_entropy_with_logits(logits, y)
            return cooper.CMPState(loss=loss, observed_constraints={self.di: cooper.ConstraintState(violation=rows)})

    cmp = DI()
    optimizer = cooper.optim.SimultaneousOptimizer(
        cmp=cmp, primal_optimizers=torch.optim.Adam(model.parameters(), lr=0.01),
        dual_optimizers=torch.optim.SGD(cmp.dual_parameters(), lr=0.05, maximize=True))
    start = time.perf_counter()
    for _ in range(epochs):
        optimizer.roll(compute_cmp_state_kwargs={"model": model, "X": X, "y": y})
    seconds = time.perf_counter() - start
    with torch.no_grad():
        predict = lambda part: (model(torch.as_tensor(part.X, dtype=torch.float32)).squeeze(1) > 0).numpy()
        return _result(predict(train), predict(test), seconds)


# --------------------------------------------------------------------------------------
# seldonian-engine
# --------------------------------------------------------------------------------------
@adapter("seldonian", requires=("seldonian", "autograd"), note="95% confidence; own candidate/safety split")
def seldonian_engine(train: Part, test: Part, delta: float, seed: int) -> dict:
    """The Seldonian engine: logistic model, ``min(PR|[g0]/PR|[g1], inverse) >= delta``
    with confidence 0.95 (its own 40/60 candidate/safety split of the shuffled training
    rows). When no candidate passes the safety test it returns "NSF" (no solution found):
    the cell then has status ``NSF`` and no predictions.

    Install: ``pip install --no-deps seldonian-engine==0.8.11 && pip install autograd cma
    graphviz`` (``--no-deps``: it pins matplotlib 3.5.1, no wheel for Python 3.11).
    """
    _require("seldonian")
    from seldonian.dataset import SupervisedDataSet, SupervisedMetaData
    from seldonian.models import objectives
    from seldonian.models.models import BinaryLogisticRegressionModel
    from seldonian.parse_tree.parse_tree import make_parse_trees_from_constraints
    from seldonian.seldonian_algorithm import SeldonianAlgorithm
    from seldonian.spec import SupervisedSpec
    from seldonian.utils.stats_utils import default_supervised_initial_solution_fn

    order = np.random.default_rng(seed).permutation(len(train))
    X = np.asarray(train.X, dtype=np.float64)[order]
    y = np.asarray(train.y, dtype=np.float64)[order]
    groups = np.column_stack([train.s[order] == 0, train.s[order] == 1]).astype(np.float64)
    features = [f"x{j}" for j in range(X.shape[1])]
    meta = SupervisedMetaData(sub_regime="classification", all_col_names=features + ["g0", "g1", "label"],
                              feature_col_names=features, label_col_names=["label"], sensitive_col_names=["g0", "g1"])
    dataset = SupervisedDataSet(features=X, labels=y, sensitive_attrs=groups, num_datapoints=len(y), meta=meta)
    constraint = f"min((PR | [g0])/(PR | [g1]),(PR | [g1])/(PR | [g0])) >= {delta}"
    trees = make_parse_trees_from_constraints([constraint], [0.05], regime="supervised_learning",
                                              sub_regime="classification", columns=["g0", "g1"])
    spec = SupervisedSpec(
        dataset=dataset, model=BinaryLogisticRegressionModel(), parse_trees=trees, sub_regime="classification",
        frac_data_in_safety=0.6, primary_objective=objectives.binary_logistic_loss,
        use_builtin_primary_gradient_fn=True, initial_solution_fn=default_supervised_initial_solution_fn,
        optimization_technique="gradient_descent", optimizer="adam",
        optimization_hyperparams={"lambda_init": np.array([0.5]), "alpha_theta": 0.01, "alpha_lamb": 0.01,
                                  "beta_velocity": 0.9, "beta_rmsprop": 0.95, "use_batches": False,
                                  "num_iters": 1000, "gradient_library": "autograd", "hyper_search": None,
                                  "verbose": False})
    np.random.seed(seed)
    start = time.perf_counter()
    passed, solution = SeldonianAlgorithm(spec).run()
    seconds = time.perf_counter() - start
    if isinstance(solution, str) and solution == "NSF":
        n_train, n_test = len(train), len(test)
        return {"train_pred": None, "test_pred": None, "fit_time": seconds, "status": "NSF",
                "note": f"no solution found (passed safety: {passed}); {n_train}/{n_test} rows"}
    model = BinaryLogisticRegressionModel()
    predict = lambda part: (model.predict(solution, np.asarray(part.X, dtype=np.float64)) > 0.5)
    return _result(predict(train), predict(test), seconds, status="ok" if passed else "failed safety")


