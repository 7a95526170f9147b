"""Side-by-side peer benchmark: fairopt's methods and peer libraries under ``DI >= delta``.

Every method is a small adapter ``fit_predict(train, test, delta, seed) -> dict`` that
trains on ``train`` (a :class:`Part`: the numpy feature matrix, the 0/1 target and the
0/1 sensitive attribute) and returns hard 0/1 predictions on both parts and the fit time.
All methods of a cell see the SAME seeded 70/30 split and the SAME feature matrix
(:meth:`fairopt.data.FairData.split`, preprocessor fitted on the training rows).

Registered adapters (:data:`ADAPTERS`):

- ``sqp-linear``, ``sqp-mlp``, ``lagrangian``, ``penalty``, ``moving-targets``:
  :class:`fairopt.FairClassifier` with ``("disparate_impact", s, delta)`` and the
  estimator's DEFAULT settings (whatever they are at run time);
- ``fairlearn-eg``: ``ExponentiatedGradient(LogisticRegression, DemographicParity(
  ratio_bound=sqrt(delta)))``, randomised predictions drawn with ``random_state=seed``;
- ``fairlearn-grid``: ``GridSearch`` with the same constraint (deterministic predictor);
- ``fairlearn-to``: ``ThresholdOptimizer(constraints="demographic_parity")`` over a
  LogisticRegression; it takes no ratio bound (it targets exact parity, so ``delta`` is
  ignored) and it uses ``s`` at prediction time;
- ``cooper``: a plain Lagrangian (simultaneous gradient descent-ascent) on a torch
  logistic model with the two smoothed DI rows ``delta p_b - p_a <= 0`` as inequality
  constraints, through ``cooper`` 1.x;
- ``seldonian``: the Seldonian engine (``seldonian-engine``) with a logistic model and
  the behavioural constraint ``min(PR|[g0]/PR|[g1], PR|[g1]/PR|[g0]) >= delta`` at 95 %
  confidence; it splits candidate/safety data itself and may return no solution ("NSF").

The peers are optional. Install them with::

    pip install "fairopt[peers]"            # fairlearn, cooper-optim
    pip install --no-deps seldonian-engine==0.8.11
    pip install autograd cma graphviz       # what seldonian-engine really needs

(``seldonian-engine`` pins ``matplotlib==3.5.1``, which has no wheel for Python 3.11,
hence ``--no-deps``.) A method whose library cannot be imported is skipped with a logged
message.

The runner (:func:`run_grid`) caches one JSON file per cell ``(dataset, method, delta,
seed)`` under ``OUT/cells/``; a cell whose file exists is not rerun, so an interrupted run
resumes. It then writes ``OUT/peers.md``, ``OUT/peers.csv`` and ``OUT/tradeoff_<d>.png``.
``DI`` is :func:`fairopt.measures.disparate_impact` on hard predictions, accuracy is
``mean(yhat == y)``.
"""

from __future__ import annotations

import importlib
import json
import logging
import math
import time
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping, Sequence

import numpy as np
import pandas as pd

from fairopt.experiments.configs import markdown_table
from fairopt.measures import disparate_impact

logger = logging.getLogger(__name__)

__all__ = [
    "ADAPTERS",
    "DATASETS",
    "DELTAS",
    "SEEDS",
    "QUICK_METHODS",
    "Part",
    "PeerUnavailable",
    "PeersResult",
    "adapter",
    "available_methods",
    "prepare",
    "cell_metrics",
    "run_grid",
    "summary_table",
    "plot_tradeoffs",
    "main",
]

DATASETS = ["adult", "dutch", "law", "acsincome", "compas"]
DELTAS = [0.6, 0.7, 0.8, 0.9]
SEEDS = [0, 1, 2]
QUICK_METHODS = ["sqp-linear", "sqp-mlp", "fairlearn-eg", "fairlearn-to", "cooper"]
TEST_SIZE = 0.3
TOLERANCE = 0.005
SENSITIVE = "s"
PEERS_INSTALL = ('pip install "fairopt[peers]" && pip install --no-deps seldonian-engine==0.8.11 '
                 "&& pip install autograd cma graphviz")
TABLE_COLUMNS = ["dataset", "method", "delta", "train DI", "test DI", "train acc", "test acc", "time s",
                 "seeds", f"train DI >= delta-{TOLERANCE:g}", "note"]


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


# --------------------------------------------------------------------------------------
# data
# --------------------------------------------------------------------------------------
def _load(dataset: str, data_dir: str | None) -> Any:
    """FairData of ``dataset`` with one binary sensitive attribute.

    COMPAS' default ``race`` is categorical (4 levels): it is replaced by the binary
    grouping African-American vs other (the grouping of ProPublica's analysis).
    """
    from fairopt import datasets
    from fairopt.data import FairData

    if dataset == "compas":
        frame, spec = datasets.load_frame("compas", data_dir)
        frame = frame.copy()
        frame["race"] = np.where(frame["race"] == "African-American", "African-American", "Other")
        spec["sensitive_kinds"] = {"race": "binary"}
        data = FairData.from_frame(frame, **spec)
    else:
        data = datasets.load(dataset, data_dir=data_dir)
    name = data.sensitive_names[0]
    if data.sensitive_kinds[name] != "binary":
        raise ValueError(f"{dataset}: the default sensitive attribute {name!r} is {data.sensitive_kinds[name]}, "
                         "not binary")
    return data


@lru_cache(maxsize=4)
def prepare(dataset: str, seed: int, data_dir: str | None = None,
            max_rows: int | None = None) -> tuple[Part, Part, dict]:
    """The seeded 70/30 split of ``dataset`` shared by every method of a cell.

    Parameters
    ----------
    dataset : str
        A :func:`fairopt.datasets.available` name with a binary task.
    seed : int
        Seed of the (stratified) split and of the optional row subsample.
    data_dir : str, optional
        Directory of the data files (Adult is embedded).
    max_rows : int, optional
        Seeded subsample of this many rows before the split (quick checks).

    Returns
    -------
    train, test : Part
    info : dict
        ``sensitive`` (name), ``levels`` (labels of s=0 and s=1), ``n_features``.
    """
    data = _load(dataset, data_dir)
    if max_rows is not None and max_rows < len(data):
        import torch

        rows = np.sort(np.random.default_rng(seed).choice(len(data), size=max_rows, replace=False))
        data = data.subset(torch.from_numpy(rows))
    train, test = data.split(test_size=TEST_SIZE, seed=seed)
    name = data.sensitive_names[0]

    def part(d: Any) -> Part:
        return Part(d.X.cpu().numpy().astype(np.float32), d.y.cpu().numpy().astype(np.int64),
                    d.sensitive[name].cpu().numpy().astype(np.int64))

    info = {"sensitive": name, "levels": [str(v) for v in data.sensitive_levels[name]],
            "n_features": int(train.X.shape[1])}
    return part(train), part(test), info


def cell_metrics(pred: np.ndarray | None, y: np.ndarray, s: np.ndarray) -> dict:
    """``{"di": DI, "acc": accuracy, "rate": P(yhat=1)}`` of hard predictions (NaN if None)."""
    if pred is None:
        return {"di": float("nan"), "acc": float("nan"), "rate": float("nan")}
    pred = np.asarray(pred).reshape(-1)
    return {"di": float(disparate_impact(pred, s)), "acc": float(np.mean(pred == np.asarray(y))),
            "rate": float(np.mean(pred))}


# --------------------------------------------------------------------------------------
# the grid and its cache
# --------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Cell:
    """One run: a dataset, a method, a bound ``delta`` and a seed."""

    dataset: str
    method: str
    delta: float
    seed: int

    def filename(self, max_rows: int | None = None) -> str:
        rows = "" if max_rows is None else f"__n{max_rows}"
        return f"{self.dataset}__{self.method}__d{self.delta:g}__s{self.seed}{rows}.json"


def _run_cell(cell: Cell, cells_dir: Path, data_dir: str | None, max_rows: int | None,
              adapters: Mapping[str, Adapter]) -> dict:
    """Run one cell and write its JSON; returns the record (status ``skipped``/``error``
    records are NOT written, so a later run retries them)."""
    fn = adapters[cell.method]
    base = {"dataset": cell.dataset, "method": cell.method, "delta": cell.delta, "seed": cell.seed,
            "max_rows": max_rows}
    try:
        train, test, info = prepare(cell.dataset, cell.seed, data_dir, max_rows)
        out = fn(train, test, cell.delta, cell.seed)
    except PeerUnavailable as exc:
        logger.warning("skipping %s: %s", cell, exc)
        return {**base, "status": "skipped", "note": str(exc)}
    except Exception as exc:  # one failing cell must not end the grid
        logger.exception("cell %s failed", cell)
        return {**base, "status": "error", "note": f"{type(exc).__name__}: {str(exc).splitlines()[0][:200]}"}
    record = {**base, **{k: info[k] for k in ("sensitive", "levels", "n_features")},
              "n_train": len(train), "n_test": len(test)}
    for split, part in (("train", train), ("test", test)):
        m = cell_metrics(out.get(f"{split}_pred"), part.y, part.s)
        record.update({f"{split}_di": m["di"], f"{split}_acc": m["acc"], f"{split}_rate": m["rate"]})
    record.update(fit_time=float(out.get("fit_time", float("nan"))), status=str(out.get("status", "ok")),
                  note=str(out.get("note", "") or getattr(fn, "note", "")))
    path = cells_dir / cell.filename(max_rows)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(record, indent=1, default=float))
    tmp.replace(path)  # atomic: an interrupted write never leaves a half cell
    return record


@dataclass
class PeersResult:
    """What :func:`run_grid` produced."""

    cells: pd.DataFrame
    table: pd.DataFrame
    markdown: str
    files: list[Path] = field(default_factory=list)
    ran: int = 0
    cached: int = 0
    failed: list[dict] = field(default_factory=list)


def run_grid(datasets: Sequence[str] = tuple(DATASETS), methods: Sequence[str] | None = None,
             deltas: Sequence[float] = tuple(DELTAS), seeds: Sequence[int] = tuple(SEEDS),
             out: str | Path = "benchmarks/results/peers", data_dir: str | None = None, n_jobs: int = 1,
             max_rows: int | None = None, adapters: Mapping[str, Adapter] | None = None,
             command: str | None = None, plots: bool = True, table: str = "cache") -> PeersResult:
    """Run (or resume) the grid datasets x methods x deltas x seeds; write table and plots.

    Parameters
    ----------
    datasets, methods, deltas, seeds : sequences
        The grid; ``methods=None``: every registered adapter. Methods whose library cannot
        be imported are skipped (logged).
    out : path
        Output directory; cells are cached in ``out/cells/``.
    data_dir : str, optional
        Data directory (Adult is embedded).
    n_jobs : int
        Parallel cells (joblib); 1 runs in this process.
    max_rows : int, optional
        Seeded row subsample per dataset (cached under distinct cell names).
    adapters : mapping, optional
        name -> adapter; default :data:`ADAPTERS`.
    command : str, optional
        The command line, recorded in ``peers.md``.
    plots : bool
        Write ``tradeoff_<dataset>.png``.
    table : {"cache", "grid"}
        What the table and plots cover: "cache" (default) every cell cached under
        ``out/cells`` with the same ``max_rows``, so several partial runs into one directory
        (e.g. the full grid, then one slow method at one delta) accumulate into one release
        table; "grid" only the cells of this call.

    Returns
    -------
    PeersResult
    """
    from tqdm.auto import tqdm

    if table not in ("cache", "grid"):
        raise ValueError(f"table: expected 'cache' or 'grid', got {table!r}")
    adapters = ADAPTERS if adapters is None else adapters
    methods = list(adapters) if methods is None else list(methods)
    methods = available_methods(methods, adapters)
    out = Path(out)
    cells_dir = out / "cells"
    cells_dir.mkdir(parents=True, exist_ok=True)
    grid = [Cell(d, m, float(delta), int(seed)) for d in datasets for delta in deltas for seed in seeds
            for m in methods]
    todo = [c for c in grid if not (cells_dir / c.filename(max_rows)).is_file()]
    logger.info("%d cells, %d cached, %d to run", len(grid), len(grid) - len(todo), len(todo))
    records: list[dict] = []
    if todo:
        bar = tqdm(total=len(todo), desc="peers", unit="cell")
        if n_jobs == 1:
            for cell in todo:
                bar.set_postfix_str(f"{cell.dataset} {cell.method} {cell.delta:g} s{cell.seed}")
                records.append(_run_cell(cell, cells_dir, data_dir, max_rows, adapters))
                bar.update()
        else:
            from joblib import Parallel, delayed

            # group by (dataset, seed) first so each worker's prepare() cache is reused
            todo.sort(key=lambda c: (c.dataset, c.seed, c.delta))
            jobs = (delayed(_run_cell)(c, cells_dir, data_dir, max_rows, adapters) for c in todo)
            for record in Parallel(n_jobs=n_jobs, return_as="generator_unordered")(jobs):
                records.append(record)
                bar.update()
        bar.close()
    failed = [r for r in records if r["status"] in ("skipped", "error")]
    if table == "grid":
        cells = _read_cells([cells_dir / c.filename(max_rows) for c in grid])
    else:
        cells = _cached_cells(cells_dir, max_rows, order=(list(datasets), list(adapters)))
    summary = summary_table(cells)
    md = _markdown(summary, command, failed, max_rows, covered=None if table == "grid" else len(cells))
    files = [out / "peers.md", out / "peers.csv"]
    (out / "peers.md").write_text(md)
    summary.to_csv(out / "peers.csv", index=False)
    if plots and len(cells):
        files += plot_tradeoffs(cells, out, sorted({float(d) for d in cells["delta"]}))
    return PeersResult(cells, summary, md, files, ran=len(records) - len(failed), cached=len(grid) - len(todo),
                       failed=failed)


def _read_cells(paths: Iterable[Path]) -> pd.DataFrame:
    rows = [json.loads(p.read_text()) for p in paths if p.is_file()]
    return pd.DataFrame(rows)


def _cached_cells(cells_dir: Path, max_rows: int | None, order: tuple[list[str], list[str]]) -> pd.DataFrame:
    """Every cached cell under ``cells_dir`` run with ``max_rows``, sorted by dataset and
    method (in the given orders, unknown names last), delta and seed."""
    cells = _read_cells(sorted(cells_dir.glob("*.json")))
    if cells.empty:
        return cells
    same_rows = cells["max_rows"].isna() if max_rows is None else cells["max_rows"] == max_rows
    cells = cells[same_rows]

    ranks = {column: {name: i for i, name in enumerate(names)} for column, names in zip(("dataset", "method"), order)}

    def sort_key(col: pd.Series) -> pd.Series:
        rank = ranks.get(col.name)
        return col if rank is None else col.map(lambda v: rank.get(v, len(rank)))

    cells = cells.sort_values(["dataset", "method", "delta", "seed"], kind="stable", key=sort_key)
    return cells.reset_index(drop=True)


def summary_table(cells: pd.DataFrame) -> pd.DataFrame:
    """Means over seeds per (dataset, method, delta) with the columns :data:`TABLE_COLUMNS`.

    The column ``train DI >= delta-0.005`` counts the seeds whose training DI meets the
    bound up to 0.005 (``k/n``). NSF cells count as misses and have NaN measures.
    """
    if cells.empty:
        return pd.DataFrame(columns=TABLE_COLUMNS)
    ok_col = TABLE_COLUMNS[-2]
    rows = []
    for (dataset, method, delta), g in cells.groupby(["dataset", "method", "delta"], sort=False):
        met = int((g["train_di"] >= delta - TOLERANCE).sum())
        notes = sorted({str(n) for n in g["note"] if str(n)} | {f"status {s}" for s in g["status"] if s != "ok"})
        rows.append({"dataset": dataset, "method": method, "delta": float(delta),
                     "train DI": g["train_di"].mean(), "test DI": g["test_di"].mean(),
                     "train acc": g["train_acc"].mean(), "test acc": g["test_acc"].mean(),
                     "time s": g["fit_time"].mean(), "seeds": len(g), ok_col: f"{met}/{len(g)}",
                     "note": "; ".join(notes)})
    return pd.DataFrame(rows, columns=TABLE_COLUMNS)


def _markdown(table: pd.DataFrame, command: str | None, failed: list[dict], max_rows: int | None,
              covered: int | None = None) -> str:
    lines = ["# Peer benchmark: DI >= delta on one binary sensitive attribute", ""]
    if command:
        lines += ["Command (the last run into this directory):", "", f"    {command}", ""]
    if covered is not None:
        lines += [f"The table covers every cell cached under `cells/` ({covered} cells, from one or more runs "
                  "into this directory; one JSON file per dataset, method, delta and seed).", ""]
    lines += [f"Same seeded {1 - TEST_SIZE:.0%}/{TEST_SIZE:.0%} split and feature matrix for every method"
              + (f"; seeded subsample of {max_rows} rows" if max_rows else "") + ". DI = min(P(yhat=1|s=0)/"
              "P(yhat=1|s=1), inverse) on hard predictions; means over seeds (`seeds`).", ""]
    lines += [markdown_table(table, floatfmt=".3f"), ""]
    if failed:
        lines += ["Not run (retried on the next run):", ""]
        lines += [f"- {r['dataset']} {r['method']} delta={r['delta']:g} seed={r['seed']}: {r['status']}: "
                  f"{r['note']}" for r in failed]
        lines.append("")
    return "\n".join(lines)


def plot_tradeoffs(cells: pd.DataFrame, out: str | Path, deltas: Sequence[float]) -> list[Path]:
    """One ``tradeoff_<dataset>.png`` per dataset: test accuracy against test DI per cell,
    one marker and colour per method, dashed vertical lines at the requested deltas."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    markers = "osD^vP*Xh<>p"
    methods = list(dict.fromkeys(cells["method"]))
    colours = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    files = []
    for dataset, g in cells.groupby("dataset", sort=False):
        fig, ax = plt.subplots(figsize=(6.4, 4.4))
        for i, method in enumerate(methods):
            m = g[g["method"] == method].dropna(subset=["test_di", "test_acc"])
            if len(m):
                ax.scatter(m["test_di"], m["test_acc"], marker=markers[i % len(markers)],
                           color=colours[i % len(colours)], label=method, alpha=0.8)
        for delta in deltas:
            ax.axvline(delta, color="grey", linestyle="--", linewidth=0.8)
        ax.set_xlabel("test DI (hard predictions)")
        ax.set_ylabel("test accuracy")
        ax.set_title(f"{dataset}: accuracy vs disparate impact")
        ax.legend(fontsize=8, loc="best")
        fig.tight_layout()
        path = Path(out) / f"tradeoff_{dataset}.png"
        fig.savefig(path, dpi=120)
        plt.close(fig)
        files.append(path)
    return files


# --------------------------------------------------------------------------------------
# command line (benchmarks/peers.py and ``fairopt bench peers``)
# --------------------------------------------------------------------------------------
def add_arguments(parser: Any, prefix_out: bool = True) -> None:
    """The runner's options on an ``argparse`` parser."""
    parser.add_argument("--quick", action="store_true",
                        help=f"delta 0.8, seed 0, methods {', '.join(QUICK_METHODS)}")
    parser.add_argument("--datasets", nargs="+", help=f"default: {' '.join(DATASETS)}")
    parser.add_argument("--methods", nargs="+", help="default: every registered method")
    parser.add_argument("--deltas", nargs="+", type=float, help=f"default: {DELTAS}")
    parser.add_argument("--seeds", nargs="+", type=int, help=f"default: {SEEDS}")
    if prefix_out:
        parser.add_argument("--out", default="benchmarks/results/peers", help="output directory")
    parser.add_argument("--data-dir", dest="data_dir", help="directory with the benchmark data files")
    parser.add_argument("--n-jobs", dest="n_jobs", type=int, default=1, help="parallel cells (joblib)")
    parser.add_argument("--max-rows", dest="max_rows", type=int, help="seeded row subsample per dataset")
    parser.add_argument("--table", choices=("cache", "grid"), default="cache",
                        help="table and plots over every cached cell of --out (default) or only this run's grid")


def run_from_args(args: Any, command: str | None = None) -> PeersResult:
    """:func:`run_grid` from parsed :func:`add_arguments` options (``--quick`` defaults)."""
    quick = bool(getattr(args, "quick", False))
    result = run_grid(
        datasets=args.datasets or DATASETS,
        methods=args.methods or (QUICK_METHODS if quick else None),
        deltas=args.deltas or ([0.8] if quick else DELTAS),
        seeds=args.seeds if args.seeds is not None else ([0] if quick else SEEDS),
        out=args.out, data_dir=args.data_dir, n_jobs=args.n_jobs, max_rows=args.max_rows, command=command,
        table=getattr(args, "table", "cache"))
    return result


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m fairopt.experiments.peers [--quick] ...``."""
    import argparse
    import sys

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_arguments(parser)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    command = "python -m fairopt.experiments.peers " + " ".join(sys.argv[1:] if argv is None else argv)
    result = run_from_args(args, command)
    print(result.markdown)
    print("wrote " + ", ".join(str(f) for f in result.files))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
