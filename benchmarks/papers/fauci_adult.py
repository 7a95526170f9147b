r"""[FU] Fig. 1: FaUCI on UCI Adult - accuracy against DP, DI and EO for sex, race and age.

Magnini, Ciatto, Calegari, Omicini, "Enforcing Fairness via Constraint Injection with FaUCI"
([FU]) sec. 4: a network trained with the loss ``E + lambda F`` ([FU] eq. 12), ``E`` the
binary cross-entropy and ``F`` a FaUCI metric of its predicted probabilities on each
mini-batch (:class:`fairopt.penalties.FaUCI`), swept over ``lambda`` for the 3 x 3 panels of
[FU] Fig. 1: DP, DI, EO (rows) x sex (binary; WDP, WDI, WEO), race ("ethnicity",
categorical with 5 groups; WDP, WDI, WEO) and age (continuous; GDP, GDI, GEO) (columns),
against the unconstrained ("vanilla") network.

Protocol ([FU] sec. 4.1), as far as the text gives it:

- data: UCI Adult, its training and test files joined; 80/20 split; the 80% part gives 5
  folds: each fold's model is trained on 4/5 of it and early-stopped on the fifth
  (validation), and every point of the figure is the mean of the 5 models ("each dot ... is
  the average of 5 runs (5-folds cross-validation)"), measured on the 20% test set;
- model: fully connected, 2 hidden layers of 100 and 50 neurons; up to 5,000 epochs;
  mini-batches of 500;
- penalty ``F``: WDP, ``1 - WDI``, WEO for sex and race with uniform weights ``w_a = 1/N``;
  GDP, ``1 - GDI``, GEO for age with density weights (sec. 4.1);
- early stopping, checked on the validation fold after every epoch: (1) accuracy >= 0.9 with
  the metric within 0.01 (DP, EO) or 0.99 (DI, i.e. ``1 - DI <= 0.01``); (2) patience 100;
- reported: test accuracy against the test FaUCI metric of the hard predictions, per lambda.

Where the text is silent, the choices are in :data:`CHOICES` (written into the summary);
the lambda grids span the ranges of the authors' public experiment code linked from [FU]
sec. 4.1. Besides the FaUCI curves, fairopt's hard-constraint SQP (:class:`solvers.StochasticSQP`
with :class:`~fairopt.constraints.DemographicParity`, :class:`~fairopt.constraints.DisparateImpact`
or :class:`~fairopt.constraints.EqualizedOdds`) is placed on the DP/DI/EO panels of sex and
race at one or two bounds; the package has no group-rate constraint for a continuous
attribute, so the age panels have none.

The metrics of every model come from :func:`fairopt.evaluate` (its FaUCI keys
``wdp[sex]``, ..., ``gdi[age]``, and ``wdp[sex&race]`` for the combined attribute).
:func:`run` writes ``results.csv`` (one row per trained model), ``summary.md`` (the curves and
the paper's numbers beside ours, :mod:`benchmarks.papers.fauci_adult_report`) and
``fig1_tradeoffs.png``; ``python -m benchmarks.papers fauci-adult`` calls it.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np
import pandas as pd
import torch

from fairopt._validation import check_seeds, positive_int
from benchmarks.papers import fauci_adult_report as report
from benchmarks.papers.fauci_adult_report import ATTRIBUTES, METRICS

__all__ = ["Settings", "FULL", "QUICK", "METRICS", "ATTRIBUTES", "CHOICES", "Parts", "prepare", "panel_key",
           "train_fauci", "train_sqp", "run_rows", "run", "write_report", "override"]

logger = logging.getLogger(__name__)

Panel = tuple[str, str]

#: [FU] sec. 4.1 thresholds of the first early-stopping condition, on the penalty scale
#: (``1 - DI`` for DI: "0.01, 0.99, 0.01 for DP, DI, and EO").
TARGETS = {"dp": 0.01, "di": 0.01, "eo": 0.01}

#: Lambda grids (full run), within the ranges of the authors' public code (``max`` per panel:
#: DP sex 4, race 100, age 10; DI sex 0.3, race 0.1, age 0.5; EO sex 12, race 3, age 5), and DI
#: race beyond it (0.2, 0.5): with lambda <= 0.1 our mean WDI(race) stays below the paper's 0.8.
FULL_LAMBDAS: dict[Panel, tuple[float, ...]] = {
    ("dp", "sex"): (0.05, 0.1, 0.25, 0.5, 1.0, 2.0, 4.0),
    ("dp", "race"): (0.5, 1.0, 2.5, 5.0, 10.0, 25.0, 50.0, 100.0),
    ("dp", "age"): (0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0),
    ("di", "sex"): (0.01, 0.02, 0.05, 0.1, 0.2, 0.3),
    ("di", "race"): (0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5),
    ("di", "age"): (0.01, 0.02, 0.05, 0.1, 0.2, 0.5),
    ("eo", "sex"): (0.1, 0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 12.0),
    ("eo", "race"): (0.1, 0.25, 0.5, 1.0, 2.0, 3.0),
    ("eo", "age"): (0.1, 0.25, 0.5, 1.0, 2.5, 5.0),
}
#: ``--quick``: three lambdas per panel, below the values where the network collapses to a
#: constant prediction (which zeroes every penalty: the optimum once lambda F exceeds the
#: BCE gap to the constant classifier, about 0.25).
QUICK_LAMBDAS: dict[Panel, tuple[float, ...]] = {
    ("dp", "sex"): (0.25, 1.0, 2.0), ("dp", "race"): (0.5, 1.0, 2.5), ("dp", "age"): (0.25, 1.0, 2.5),
    ("di", "sex"): (0.02, 0.1, 0.3), ("di", "race"): (0.005, 0.02, 0.1), ("di", "age"): (0.02, 0.1, 0.5),
    ("eo", "sex"): (0.25, 0.5, 2.0), ("eo", "race"): (0.1, 0.25, 1.0), ("eo", "age"): (0.1, 0.25, 1.0),
}
#: Bounds of the hard-constraint SQP points: DP and EO differences (``|P_a - P_b| <= bound``;
#: for sex a bound 0.02 is ``WDP <= 0.01``), DI ratios (``>= delta``).
FULL_SQP_BOUNDS: dict[Panel, tuple[float, ...]] = {
    ("dp", "sex"): (0.02, 0.05), ("dp", "race"): (0.05,), ("di", "sex"): (0.8, 0.9), ("di", "race"): (0.8,),
    ("eo", "sex"): (0.02, 0.05), ("eo", "race"): (0.05,),
}
QUICK_SQP_BOUNDS: dict[Panel, tuple[float, ...]] = {("dp", "sex"): (0.02,), ("di", "sex"): (0.8,),
                                                      ("eo", "sex"): (0.05,)}


@dataclass(frozen=True)
class Settings:
    """What :func:`run` runs (:data:`FULL`: [FU] sec. 4.1; :data:`QUICK`: a short look).

    ``lambdas`` and ``sqp_bounds`` give the panels (``(metric, attribute)``) and their grids;
    ``run_folds`` the folds trained (None: all ``folds``); ``seeds`` the initialisation and
    batch-order seeds (each fold is trained once per seed).
    """

    lambdas: Mapping[Panel, tuple[float, ...]] = field(default_factory=lambda: dict(FULL_LAMBDAS))
    sqp_bounds: Mapping[Panel, tuple[float, ...]] = field(default_factory=lambda: dict(FULL_SQP_BOUNDS))
    folds: int = 5
    run_folds: tuple[int, ...] | None = None
    seeds: tuple[int, ...] = (0,)
    max_epochs: int = 5000
    patience: int = 100
    batch_size: int = 500
    lr: float = 1e-3
    hidden: tuple[int, ...] = (100, 50)
    target_accuracy: float = 0.9
    bins: int = 10
    test_size: float = 0.2
    split_seed: int = 0
    sqp_epochs: int = 500
    subsample: int | None = None


#: [FU] sec. 4.1: 9 panels x 6-8 lambdas x 5 folds, plus the vanilla network and the SQP points
FULL = Settings()
#: ``--quick``: fold 0 only, 3 lambdas per panel, at most 40 epochs (patience 8), SQP on sex only (200 epochs)
QUICK = Settings(lambdas=dict(QUICK_LAMBDAS), sqp_bounds=dict(QUICK_SQP_BOUNDS), run_folds=(0,), max_epochs=40,
                 patience=8, sqp_epochs=200)

CHOICES = """\
- **Data.** fairopt's Adult loader with the training and test files joined and the rows with
  a missing value kept ("?" a level of workclass, occupation, native-country), as the paper:
  {n_rows:,} rows (the paper: 48,842; its 80/20 split 39,074 / 9,768, ours {n_train:,} /
  {n_test:,}). Dropping those rows, as the loader does by default, costs about one point of
  accuracy (they are mostly low-income and easy to classify). Inputs: the loader's 12 columns
  (``education``, a copy of ``education-num``, and ``native-country`` left out; the authors'
  code keeps ``native-country``), sex, race and age among them as in the paper; categorical
  columns one-hot (the authors' code integer-codes them), numbers standardised on the rows a
  model is trained on.
- **Splits.** Stratified 80/20 split (label x sex x race, seed {split_seed}); stratified
  {folds}-fold split of the 80% part (same strata, seed {split_seed}).
- **Training.** Adam, learning rate {lr} (Keras' default, which the authors' code uses),
  ReLU hidden layers, PyTorch's default initialisation from the seed, mini-batches of
  {batch_size} reshuffled each epoch, at most {max_epochs} epochs.
- **Early stopping.** After every epoch on the validation fold: the run stops when the
  accuracy is >= {target_accuracy} and the penalty (``F`` as trained: WDP, ``1 - WDI``, ...) is
  within the paper's threshold, keeping those weights; otherwise the penalised objective
  ``BCE + lambda F`` of the validation fold is the quantity whose improvement the patience
  ({patience} epochs) waits for, and the weights of its best epoch are kept (the paper does not
  say which quantity must improve; the vanilla network stops on its validation BCE).
- **Metrics.** Measured by :func:`fairopt.evaluate` on the hard predictions of the test set:
  W* with uniform weights, G* with {bins} equal-width age bins and density weights (the
  paper: "histogram-based"; the authors' code uses 20 bins for training). WEO and GEO are
  [FU] eq. 10-11, the sum over the two classes; the authors' code averages the two classes,
  so the EO axis of Fig. 1 is half of eq. 10: the comparisons below halve our EO values
  ("figure scale").
- **Lambda grids.** The text does not give them; ours span the ranges of the authors' code
  (the full grid of DI / race goes beyond, to 0.5).
- **SQP points.** :class:`solvers.StochasticSQP`, full batch, {sqp_epochs} epochs, its default
  learning rate, the smoothed-step surrogate, same folds and test set; bounds {sqp_bounds}. No point for age:
  the package's group-rate constraints need a binary or categorical attribute.
"""


# ----------------------------------------------------------------------------- data
@dataclass
class Parts:
    """One fold: the rows a model is trained on (``fit``), its early-stopping fold (``valid``)
    and the test set encoded with the preprocessor fitted on ``fit``."""

    fold: int
    fit: Any
    valid: Any
    test: Any


def panel_key(metric: str, attribute: str, kind: str) -> str:
    """The :func:`fairopt.evaluate` key of a panel: ``wdp[sex]``, ``gdi[age]``, ..."""
    from fairopt.evaluation_fauci import fauci_keys

    return fauci_keys(attribute, kind)[METRICS.index(metric)]


def _check_panels(settings: Settings, kinds: Mapping[str, str]) -> None:
    for metric, attribute in (*settings.lambdas, *settings.sqp_bounds):
        if metric not in METRICS:
            raise ValueError(f"lambdas: unknown metric {metric!r}; expected one of {METRICS}")
        if attribute not in kinds:
            raise ValueError(f"lambdas: {attribute!r} is not a sensitive feature of the data ({sorted(kinds)})")
    continuous = [p for p in settings.sqp_bounds if kinds[p[1]] == "continuous"]
    if continuous:
        raise ValueError(f"sqp_bounds: {continuous} - the group-rate constraints need a binary or categorical "
                         "attribute")


def prepare(settings: Settings, data_dir: str | Path | None = None, data: Any = None) -> tuple[list[Parts], Any]:
    """The folds of the protocol and the whole data.

    Loads Adult (train and test files, the rows with missing values kept, sensitive sex, race
    and age, all of them inputs) unless
    ``data`` is given (a binary-task FairData with the sensitive features the panels name),
    subsamples, splits 80/20 and cuts the 80% part into ``settings.folds`` stratified folds
    (:func:`fairopt.experiments.split_data`).
    """
    from fairopt import datasets
    from fairopt.experiments.compare import split_data

    if data is None:
        data = datasets.load("adult", data_dir=data_dir, part="all", keep_missing=True, sensitive=list(ATTRIBUTES),
                             include_sensitive=True)
    if data.task != "binary":
        raise ValueError(f"data: the FaUCI metrics need a binary classification task, got {data.task!r}")
    _check_panels(settings, data.sensitive_kinds)
    if settings.subsample is not None and settings.subsample < len(data):
        rows = np.sort(np.random.default_rng(0).choice(len(data), size=settings.subsample, replace=False))
        data = data.subset(torch.from_numpy(rows))
    train, test = data.split(test_size=settings.test_size, seed=settings.split_seed)
    wanted = range(settings.folds) if settings.run_folds is None else settings.run_folds
    bad = [k for k in wanted if not 0 <= k < settings.folds]
    if bad:
        raise ValueError(f"run_folds: {bad} are not folds of {settings.folds}")
    parts = []
    for k, fit, valid in split_data(train, folds=settings.folds, seed=settings.split_seed):
        if k in wanted:
            encoded = test.with_preprocessor(fit.preprocessor) if fit.preprocessor is not None else test
            parts.append(Parts(k, fit, valid, encoded))
    return parts, data


# ----------------------------------------------------------------------------- training
class _TargetOrPatience:
    """Engine callback: [FU] sec. 4.1's two stopping conditions, checked after every epoch.

    Wraps the patience rule of :class:`benchmarks.papers.early_stopping.EarlyStopping` (on the
    validation objective ``BCE + lambda F``) and adds the target condition: validation accuracy
    ``>= target_accuracy`` and the penalty ``F`` ``<= target``. :attr:`reached` tells which
    condition ended the run.
    """

    def __init__(self, model: torch.nn.Module, valid: Any, penalty: Any, lam: float, steps_per_epoch: int,
                 settings: Settings, target: float | None) -> None:
        from benchmarks.papers.early_stopping import EarlyStopping
        from solvers.losses import get_loss

        self.valid, self.penalty, self.lam, self.target = valid, penalty, float(lam), target
        self.target_accuracy = settings.target_accuracy
        self.bce = get_loss("bce")
        self.reached = False
        self._last: tuple[float, float] = (math.nan, math.nan)
        self.patience = EarlyStopping(model, self._objective, steps_per_epoch, settings.patience)
        self.model = model

    def _objective(self) -> float:
        with torch.no_grad():
            out = self.model(self.valid.X).reshape(-1)
            value = float(self.penalty(out, self.valid)) if self.penalty is not None else 0.0
            accuracy = float(((out > 0).to(self.valid.y.dtype) == self.valid.y).double().mean())
            self._last = (accuracy, value)
            return float(self.bce(out, self.valid)) + self.lam * value

    def __call__(self, engine: Any, record: Mapping[str, Any]) -> bool:
        epochs_before = len(self.patience.values)
        stop = self.patience(engine, record)
        if len(self.patience.values) > epochs_before and self.target is not None:
            accuracy, value = self._last
            if accuracy >= self.target_accuracy and value <= self.target:
                self.reached = True
                return True
        return stop


def _fauci_penalty(metric: str, attribute: str, kind: str, bins: int) -> Any:
    """[FU]'s ``F`` of a panel: W* (uniform weights) for groups, G* (density weights) for a continuous attribute."""
    from fairopt.penalties import FaUCI

    return FaUCI(("g" if kind == "continuous" else "w") + metric, attribute, bins=bins)


def train_fauci(part: Parts, panel: Panel | None, lam: float, seed: int, settings: Settings) -> tuple[Any, dict]:
    """Train the [FU] network on ``part.fit`` with ``BCE + lam F`` of ``panel`` (None: the
    vanilla network), early-stopped on ``part.valid``.

    Returns the model (eval mode) and ``{"epochs": best epoch, "epochs_run", "seconds",
    "status", "stopped_by"}``.
    """
    from fairopt import models
    from fairopt.experiments.sweeps import seeded
    from solvers.penalty import Penalty

    penalty = None
    if panel is not None:
        penalty = _fauci_penalty(panel[0], panel[1], part.fit.sensitive_kinds[panel[1]], settings.bins)
        penalty.setup(part.fit)
    with seeded(seed):
        model = models.mlp(part.fit.n_features, hidden=settings.hidden, activation="relu", seed=seed)
        stopper = _TargetOrPatience(model, part.valid, penalty, lam, math.ceil(len(part.fit) / settings.batch_size),
                                    settings, None if panel is None else TARGETS[panel[0]])
        engine = Penalty(weight=lam, epochs=settings.max_epochs, batch_size=settings.batch_size, lr=settings.lr,
                         seed=seed, callbacks=[stopper])
        start = time.perf_counter()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # mini-batches missing a group: the FaUCI weights are rescaled
            result = engine.fit(model, part.fit, loss="bce", penalties=[] if penalty is None else [penalty])
        seconds = time.perf_counter() - start
    if not stopper.reached:
        stopper.patience.restore()
    model.eval()
    ran = len(stopper.patience.values)
    stopped_by = "target" if stopper.reached else "patience" if result.status == "stopped_by_callback" else "max_epochs"
    return model, {"epochs": ran if stopper.reached else stopper.patience.best_epoch, "epochs_run": ran,
                   "seconds": seconds, "status": result.status, "stopped_by": stopped_by}


def _sqp_constraint(metric: str, attribute: str, bound: float) -> Any:
    from fairopt.constraints import DemographicParity, DisparateImpact, EqualizedOdds

    # the smoothed step named: the surrogate of the committed runs (SQP would otherwise take the
    # rates' calibrated form, sigmoid(5 t))
    if metric == "dp":
        return DemographicParity(attribute, bound=bound, surrogate="smoothed_step")
    if metric == "di":
        return DisparateImpact(attribute, delta=bound, surrogate="smoothed_step")
    return EqualizedOdds(attribute, bound=bound, delta=None, surrogate="smoothed_step")


def train_sqp(part: Parts, panel: Panel, bound: float, seed: int, settings: Settings) -> tuple[Any, dict]:
    """Train the same network with fairopt's stochastic SQP under the hard constraint of
    ``panel`` at ``bound`` (full batch, ``settings.sqp_epochs`` epochs) on ``part.fit``."""
    from fairopt import models
    from fairopt.experiments.sweeps import seeded
    from solvers import StochasticSQP

    with seeded(seed):
        model = models.mlp(part.fit.n_features, hidden=settings.hidden, activation="relu", seed=seed)
        engine = StochasticSQP(epochs=settings.sqp_epochs, seed=seed)
        start = time.perf_counter()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # bound/relaxed-step warnings: the status column says it
            result = engine.fit(model, part.fit, loss="bce", constraints=[_sqp_constraint(*panel, bound)])
        seconds = time.perf_counter() - start
    model.eval()
    return model, {"epochs": settings.sqp_epochs, "epochs_run": settings.sqp_epochs, "seconds": seconds,
                   "status": result.status, "stopped_by": "max_epochs"}


def _measured(model: Any, part: Parts, combined: Sequence[tuple[str, ...]]) -> dict[str, float]:
    """Test accuracy (%) and the scalar measures of :func:`fairopt.evaluate` on ``part.test``."""
    from fairopt.evaluation import evaluate

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # degenerate/undefined measures are NaN with a note
        metrics = evaluate(model, part.test, fauci_combined=list(combined) or None)
    row = {k: float(v) for k, v in metrics.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}
    row["accuracy"] = 100.0 * row["accuracy"]
    row["degenerate"] = float(metrics["degenerate"])
    return row


# ----------------------------------------------------------------------------- protocol
def _plan(settings: Settings) -> list[tuple[str, Panel | None, float]]:
    """(method, panel, value) of every training run of one fold and seed, vanilla first."""
    runs: list[tuple[str, Panel | None, float]] = [("vanilla", None, 0.0)]
    runs += [("fauci", panel, float(lam)) for panel, grid in settings.lambdas.items() for lam in grid]
    runs += [("sqp", panel, float(b)) for panel, bounds in settings.sqp_bounds.items() for b in bounds]
    return runs


def run_rows(settings: Settings, data_dir: str | Path | None = None, progress: bool = True,
             data: Any = None) -> pd.DataFrame:
    """Train and evaluate every run of ``settings``: one row per (method, panel, value, fold, seed)."""
    from tqdm.auto import tqdm

    parts, full = prepare(settings, data_dir, data)
    kinds = full.sensitive_kinds
    groups = [n for n in ATTRIBUTES if kinds.get(n) in ("binary", "categorical")]
    combined = [tuple(groups)] if len(groups) >= 2 else []
    logger.info("fauci-adult: %d rows, %d test, folds %s, %d inputs", len(full), len(parts[0].test),
                [p.fold for p in parts], parts[0].fit.n_features)
    plan = [(part, seed, run) for part in parts for seed in settings.seeds for run in _plan(settings)]
    rows = []
    bar = tqdm(plan, desc="fauci-adult", unit="run", disable=not progress)
    for part, seed, (method, panel, value) in bar:
        if method == "sqp":
            model, info = train_sqp(part, panel, value, seed, settings)
        else:
            model, info = train_fauci(part, panel, value, seed, settings)
        metric, attribute = panel if panel is not None else ("none", "none")
        row = {"method": method, "metric": metric, "attribute": attribute, "value": value, "fold": part.fold,
               "seed": seed, "n_fit": len(part.fit), "n_valid": len(part.valid), **info,
               **_measured(model, part, combined)}
        rows.append(row)
        key = panel_key(metric, attribute, kinds[attribute]) if panel is not None else "wdp[sex]"
        bar.set_postfix_str(f"{method} {metric}/{attribute} {value:g} fold {part.fold}: acc {row['accuracy']:.2f} "
                            f"{key} {row.get(key, math.nan):.4f} ({info['epochs_run']} ep, {info['seconds']:.0f} s)")
        logger.info("%s %s/%s %g fold %d seed %d: %s", method, metric, attribute, value, part.fold, seed, info)
    return pd.DataFrame(rows)


def _sizes(rows: pd.DataFrame) -> dict[str, int]:
    """Rows of the data, of its 80% part (fit + validation) and of the test set, from the
    per-run columns ``n_fit``, ``n_valid`` and evaluate's ``n`` (the test rows)."""
    n_train = int(rows["n_fit"].iloc[0] + rows["n_valid"].iloc[0])
    n_test = int(rows["n"].iloc[0])
    return {"n_rows": n_train + n_test, "n_train": n_train, "n_test": n_test}


def write_report(rows: pd.DataFrame, out: str | Path, settings: Settings, command: str, seconds: float,
                 protocol: str) -> tuple[str, list[Path]]:
    """Write ``summary.md`` and ``fig1_tradeoffs.png`` for the runs ``rows`` (e.g. read back
    from a ``results.csv``); returns the summary and the two files."""
    out = Path(out)
    # an attribute is continuous when the table has its G* metrics (evaluate's keys by kind)
    kinds = {a: "continuous" if f"gdp[{a}]" in rows.columns else "categorical"
             for panel in (*settings.lambdas, *settings.sqp_bounds) for a in panel[1:]}
    keys = {panel: panel_key(*panel, kinds[panel[1]]) for panel in (*settings.lambdas, *settings.sqp_bounds)}
    figure = report.plot_fig1(rows, keys, out / "fig1_tradeoffs.png")
    sizes = _sizes(rows)
    choices = CHOICES.format(split_seed=settings.split_seed, folds=settings.folds, lr=settings.lr,
                             batch_size=settings.batch_size, max_epochs=settings.max_epochs,
                             target_accuracy=settings.target_accuracy, patience=settings.patience, bins=settings.bins,
                             sqp_epochs=settings.sqp_epochs,
                             sqp_bounds={f"{m}/{a}": list(b) for (m, a), b in settings.sqp_bounds.items()}, **sizes)
    header = _header(rows, settings, command, seconds, protocol)
    summary = report.write_summary(out / "summary.md", rows=rows, keys=keys, header=header, choices=choices)
    return summary, [figure, out / "summary.md"]


def _header(rows: pd.DataFrame, settings: Settings, command: str, seconds: float, protocol: str) -> list[str]:
    trained = rows[rows["method"] != "sqp"]
    folds = sorted(rows["fold"].unique().tolist())
    return [
        "# fauci-adult: [FU] Fig. 1, FaUCI on UCI Adult", "",
        "Magnini, Ciatto, Calegari, Omicini, *Enforcing Fairness via Constraint Injection with FaUCI*: "
        "accuracy against the FaUCI metrics (DP, DI, EO; sex binary, race categorical, age continuous) across the "
        "regularisation weight lambda, the vanilla network as reference, fairopt's hard-constraint SQP beside.", "",
        f"Command: `{command}`", "",
        f"Protocol: **{protocol}**. Folds {folds} of {settings.folds} (each early-stopped on its validation fold, "
        f"all measured on the same test set), seeds {list(settings.seeds)}, network {list(settings.hidden)} ReLU, "
        f"batch {settings.batch_size}, at most {settings.max_epochs} epochs (patience {settings.patience}), "
        f"{sum(len(v) for v in settings.lambdas.values())} lambdas over {len(settings.lambdas)} panels, "
        f"{sum(len(v) for v in settings.sqp_bounds.values())} SQP bounds ({settings.sqp_epochs} full-batch epochs)"
        + (f", subsample {settings.subsample} rows" if settings.subsample else "") + ".",
        "Rows: {n_rows:,} ({n_train:,} train+validation, {n_test:,} test).".format(**_sizes(rows)),
        f"Wall time: {seconds:.0f} s for {len(rows)} trained models (penalty runs: mean "
        f"{trained['seconds'].mean():.1f} s, "
        f"{trained['epochs_run'].mean():.1f} epochs run; stopped by {trained['stopped_by'].value_counts().to_dict()}).",
    ]


def run(out: str | Path, settings: Settings = FULL, data_dir: str | Path | None = None,
        command: str = "python -m benchmarks.papers fauci-adult", progress: bool = True, protocol: str | None = None,
        data: Any = None) -> tuple[pd.DataFrame, str, list[Path]]:
    """Run ``settings``; write ``results.csv``, ``summary.md`` and ``fig1_tradeoffs.png`` to ``out``.

    ``protocol`` names the settings in the summary (default: "full ([FU] protocol)" for
    :data:`FULL`, "quick" for :data:`QUICK`, else "custom"); ``data`` replaces Adult (tests).
    Returns the per-run table, the summary and the files written.
    """
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    if protocol is None:
        protocol = "full ([FU] protocol)" if settings == FULL else "quick" if settings == QUICK else "custom"
    start = time.perf_counter()
    rows = run_rows(settings, data_dir, progress=progress, data=data)
    seconds = time.perf_counter() - start
    rows.to_csv(out / "results.csv", index=False)
    summary, files = write_report(rows, out, settings, command, seconds, protocol)
    return rows, summary, [out / "results.csv", *files]


def override(settings: Settings, *, epochs: int | None = None, seeds: Sequence[int] | None = None,
             subsample: int | None = None, lambdas: Mapping[Panel, Sequence[float]] | None = None) -> Settings:
    """``settings`` with the given fields replaced (None keeps a field); ``epochs`` is the
    largest number of epochs of the penalty runs (early stopping may end a run before) and of
    the SQP runs."""
    epochs = None if epochs is None else positive_int(epochs, "epochs")
    if lambdas is not None and any(not math.isfinite(v) or v <= 0 for grid in lambdas.values() for v in grid):
        raise ValueError(f"lambdas: expected finite values > 0 (lambda = 0 is the vanilla run), got {dict(lambdas)}")
    changes = {"max_epochs": epochs, "sqp_epochs": epochs, "seeds": None if seeds is None else check_seeds(seeds),
               "subsample": subsample,
               "lambdas": None if lambdas is None else {k: tuple(float(v) for v in g) for k, g in lambdas.items()}}
    return dataclasses.replace(settings, **{k: v for k, v in changes.items() if v is not None})
