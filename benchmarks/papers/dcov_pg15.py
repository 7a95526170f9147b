r"""[DC] sec. 5.2: the pg15training Poisson application (Tables 5.3, 5.4, H.3 and Fig. 5.4).

Lee, Antonio, Avanzi, Marchi, Zhou, "Machine Learning with Multitype Protected Attributes:
Intersectional Fairness through Regularisation" ([DC]), the motor-insurance application,
as far as the text gives the protocol:

- data ([DC] sec. 5.2.2, App. H.1): pg15training (CASdatasets), the first 21 rows removed
  (duplicates), 100,000 policies; target ``Numtppd`` (third-party property-damage claim
  counts) with exposure ``Exppdays / 365`` as offset; protected attributes gender and region
  (``Group2``, 10 levels), **not** model inputs; the inputs of Table H.1
  (:func:`fairopt.datasets.load` ``("pg15training")``);
- objective ([DC] eq. 5.2): ``(1/n) sum_i [v_i yhat_i - y_i log yhat_i] + lambda psi(yhat,
  Female, Region)`` with ``yhat = exp(out)`` the predicted claim frequency per unit of
  exposure and ``psi`` CCdCov ([DC] eq. 3.6) or JdCov ([DC] eq. 3.4) of ``yhat`` against gender
  (0/1) and the one-hot region, computed on each mini-batch
  (:class:`fairopt.penalties.DistanceCovariancePenalty`); our Poisson loss
  (:func:`solvers.losses.poisson_loss`) differs from the eq. 5.2 loss by the constant
  ``-(1/n) sum_i y_i log v_i``;
- model and optimiser ([DC] App. B-D, H.3, Table H.2): a feed-forward network with dropout,
  the exponential output with the exposure offset, AdaHessian, mini-batches of 128, early
  stopping; the hyper-parameters of Table H.2 (:data:`HYPER`);
- protocol ([DC] sec. 4.3, App. F): 80/20 train/test split; the training part split 70/30
  into sub-training and validation; for every ``lambda`` of the grid the model with the
  baseline (``lambda = 0``) hyper-parameters is trained on the sub-training part and
  evaluated on the validation part (Table 5.3, 10 seeds, ``lambda`` in {0, 10, 20, 40, 80,
  120, 150}); the final models (no regularisation, CCdCov at ``lambda = 40``, JdCov at
  ``lambda = 30``, [DC] sec. 5.2.4) are retrained on the whole training part with their
  re-tuned hyper-parameters (Table H.2) and evaluated on the test part (Table 5.4) and the
  training part (Table H.3);
- measures: RPS of the Poisson forecast ([DC] App. E.2, :func:`fairopt.measures.poisson_rps`),
  Poisson deviance ([DC] eq. D.4-D.5), CCdCov, JdCov, JS divergence and UF of the predicted
  frequencies over the 20 gender x region cells ([DC] eq. 4.1, 4.4);
- balance property ([DC] Remark 5.3): every model is also evaluated after the correction of
  Lindholm and Wüthrich (2024), ``mu -> alpha mu`` with ``alpha = sum N / sum v mu`` on the
  rows it was trained on (:func:`fairopt.measures.balance_correction`). The paper's tables
  report the uncorrected predictions; both are written.

Where the text is silent (:data:`CHOICES` lists them in the results file): the hidden
activation (ReLU), the number of epochs (at most ``max_epochs``) and the early-stopping rule
(the penalised objective on a 10% slice of the training rows, patience 5, best weights
kept), the initialisation (PyTorch's default), the seeds, and how the test-stage runs are
averaged (over the same seeds).

:func:`run` writes ``results.csv`` (one row per model, part and version of the predictions),
``floors.csv``, ``summary.md`` and ``tradeoff.png``; ``python -m benchmarks.papers dcov-pg15`` calls it.
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
from benchmarks.papers import dcov_pg15_report as report
from benchmarks.papers.early_stopping import EarlyStopping

__all__ = ["Settings", "Hyper", "HYPER", "FULL", "QUICK", "SENSITIVE", "KINDS", "CHOICES",
           "prepare", "stop_slice", "train_model", "measure", "run_rows", "run", "override", "write_report"]

logger = logging.getLogger(__name__)

SENSITIVE = ("Gender", "Group2")
KINDS = ("ccdcov", "jdcov")


@dataclass(frozen=True)
class Hyper:
    """Hyper-parameters of one network of [DC] Table H.2: AdaHessian learning rate, batch
    size, hidden layers x nodes, dropout, Hessian power and ``(beta_1, beta_2)``."""

    lr: float
    batch_size: int
    layers: int
    nodes: int
    dropout: float
    hessian_power: float
    betas: tuple[float, float]


#: [DC] Table H.2. "none" is the baseline tuned at lambda = 0, used for every lambda of the
#: calibration (sec. 4.3, Remark 4.2); "ccdcov" and "jdcov" are re-tuned for the final models.
HYPER: dict[str, Hyper] = {
    "none": Hyper(9.3106e-03, 128, 4, 64, 0.3398, 0.5, (0.85, 0.95)),
    "ccdcov": Hyper(1.6007e-03, 128, 2, 256, 0.2598, 1.0, (0.85, 0.95)),
    "jdcov": Hyper(1.1594e-03, 128, 2, 64, 0.1129, 0.75, (0.85, 0.95)),
}


@dataclass(frozen=True)
class Settings:
    """What :func:`run` runs (:data:`FULL`: the paper's protocol; :data:`QUICK`: a short look).

    ``lambdas`` is the calibration grid (0, the shared baseline, is always run);
    ``selected`` the lambda of each final model; ``final=False`` skips the test stage.
    """

    regularisers: tuple[str, ...] = KINDS
    lambdas: tuple[float, ...] = (0.0, 10.0, 20.0, 30.0, 40.0, 80.0, 120.0, 150.0)
    selected: Mapping[str, float] = field(default_factory=lambda: dict(report.PAPER_SELECTED))
    seeds: tuple[int, ...] = tuple(range(10))
    max_epochs: int = 100
    patience: int = 5
    stop_fraction: float = 0.1
    test_size: float = 0.2
    valid_size: float = 0.3
    split_seed: int = 0
    subsample: int | None = None
    activation: str = "relu"
    final: bool = True
    hyper: Mapping[str, Hyper] = field(default_factory=lambda: dict(HYPER))


#: [DC] sec. 5.2 / App. F: Table 5.3's lambdas plus 30 (JdCov's final value), 10 seeds
FULL = Settings()
#: ``--quick``: 30,000 sampled rows, lambda 0/10/40/150, seed 0, at most 40 epochs (patience 3)
QUICK = Settings(lambdas=(0.0, 10.0, 40.0, 150.0), seeds=(0,), max_epochs=40, patience=3, subsample=30_000)

CHOICES = """\
- **Where the paper is silent.** Hidden activation ReLU; PyTorch's default initialisation
  (seeded) except the output bias, set to the log of the training rows' claim frequency
  (``sum N / sum v``, the homogeneous Poisson fit); early stopping on the penalised objective
  (mean Poisson loss + lambda psi, psi on the whole slice) of a fixed 10% slice of the rows being
  trained on (stratified on the gender x region cell and claim/no claim), checked after every epoch,
  patience {patience}, at most {max_epochs} epochs, the best epoch's weights kept. The final models are
  trained and averaged over the same seeds as the calibration. The 80/20 and 70/30 splits
  are stratified on the 20 gender x region cells (the paper also stratifies on the
  response); split seed {split_seed}.
- **Hyper-parameters** are the paper's Table H.2 (we do not re-run its Bayesian search):
  calibration with the baseline row (4 x 64, dropout 0.3398, lr 9.3106e-3, Hessian power 0.5,
  betas (0.85, 0.95), batch 128); final CCdCov model 2 x 256, dropout 0.2598, lr 1.6007e-3,
  power 1; final JdCov model 2 x 64, dropout 0.1129, lr 1.1594e-3, power 0.75.
- **Inputs** (Table H.1): occupation, car type and car group one-hot, car category ordinal,
  age, bonus-malus, policy duration, density and value standardised on the training rows
  (the paper min-max scales them; the network class is the same). 37 inputs.
- **Regulariser**: computed exactly on each mini-batch of 128 (U-statistics); gender enters
  as 0/1, region one-hot (distance sqrt(2) between regions), as in Table H.1. JdCov uses c = 1.
- **JS divergence**: the plug-in histogram estimate with 10 equal-width bins of the predicted
  frequency (:func:`fairopt.measures.js_divergence`). The paper does not say how it estimates
  the densities; its values below about 0.004 are under our estimator's floor at these
  sample sizes (see "Estimator floors"), so small JSD values are not comparable.
- **RPS**: the Poisson forecast with mean ``v yhat``, truncated where every row's tail is
  below 1e-12 (the paper: "a sufficiently large maximum value K").
"""


# ----------------------------------------------------------------------------- data
@dataclass
class Parts:
    """The splits of one run: the 80% training and 20% test parts, and the training
    part's 70% sub-training and 30% validation parts (preprocessors fitted on the first of
    each pair)."""

    train: Any
    test: Any
    subtrain: Any
    valid: Any


def prepare(settings: Settings, data_dir: str | Path | None = None, data: Any = None) -> Parts:
    """Load pg15training (or take ``data``: a FairData with a Poisson target, exposure and
    the sensitive features of :data:`SENSITIVE`), subsample, and split it."""
    from fairopt import datasets

    if data is None:
        data = datasets.load("pg15training", data_dir=data_dir)
    if data.task != "poisson" or data.exposure is None:
        raise ValueError(f"data: expected a Poisson task with exposure, got task {data.task!r}, "
                         f"exposure {data.exposure_name!r}")
    missing = [s for s in SENSITIVE if s not in data.sensitive]
    if missing:
        raise ValueError(f"data: sensitive features {missing} are missing (have {list(data.sensitive)})")
    if settings.subsample is not None and settings.subsample < len(data):
        rows = np.sort(np.random.default_rng(0).choice(len(data), size=settings.subsample, replace=False))
        data = data.subset(torch.from_numpy(rows))
    train, test = data.split(test_size=settings.test_size, seed=settings.split_seed)
    subtrain, valid = train.split(test_size=settings.valid_size, seed=settings.split_seed)
    return Parts(train=train, test=test, subtrain=subtrain, valid=valid)


def stop_slice(part: Any, fraction: float, seed: int) -> tuple[Any, Any]:
    """``(fit, stop)`` rows of ``part``: a stratified ``fraction`` held out for early stopping
    (strata: cell x claim/no claim), by row indexing (the preprocessor stays that of ``part``)."""
    from fairopt.data.splitting import stratified_split_indices

    strata = part.cells.cpu().numpy() * 2 + (part.y.cpu().numpy() > 0)
    fit_idx, stop_idx = stratified_split_indices(strata, fraction, seed)
    return part.subset(torch.from_numpy(fit_idx)), part.subset(torch.from_numpy(stop_idx))


# ----------------------------------------------------------------------------- training
def _start_at_portfolio_frequency(model: torch.nn.Module, part: Any) -> None:
    """Set the output layer's bias to ``log(sum N / sum v)``, the homogeneous Poisson MLE, so
    that training starts from the portfolio's claim frequency instead of ``exp(0) = 1``."""
    last = [m for m in model.modules() if isinstance(m, torch.nn.Linear)][-1]
    frequency = float(part.y.to(torch.float64).sum() / part.exposure.to(torch.float64).sum())
    if frequency <= 0:
        raise ValueError("data: the training rows have no claims; a Poisson frequency model cannot be fitted")
    with torch.no_grad():
        last.bias.fill_(math.log(frequency))


def train_model(part: Any, hyper: Hyper, kind: str, lam: float, seed: int, settings: Settings) -> tuple[Any, dict]:
    """Train the [DC] eq. 5.2 network on ``part`` with regulariser ``kind`` at ``lam``.

    Returns the model in eval mode and ``{"epochs": best epoch, "epochs_run", "seconds",
    "status"}``.
    """
    from fairopt import models
    from fairopt.exceptions import FairnessWarning
    from fairopt.experiments.sweeps import seeded
    from fairopt.penalties import DistanceCovariancePenalty
    from solvers.losses import poisson_loss
    from solvers.penalty import Penalty

    fit, stop = stop_slice(part, settings.stop_fraction, settings.split_seed)
    psi = DistanceCovariancePenalty(list(SENSITIVE), kind=kind)

    def held_out() -> float:
        with torch.no_grad():
            out = model(stop.X).reshape(-1)
            return float(poisson_loss(out, stop) + lam * psi(out, stop))

    with seeded(seed), warnings.catch_warnings():  # dropout masks draw from torch's global generator
        # a JdCov penalty has no bound; its setup's "bound 0 below the floor" warning does not apply
        warnings.filterwarnings("ignore", message=r".*JdCov of a constant prediction", category=FairnessWarning)
        model = models.mlp(part.n_features, hidden=(hyper.nodes,) * hyper.layers, activation=settings.activation,
                           seed=seed, dropout=hyper.dropout)
        _start_at_portfolio_frequency(model, fit)
        stopper = EarlyStopping(model, held_out, math.ceil(len(fit) / hyper.batch_size), settings.patience)
        engine = Penalty(weight=lam, epochs=settings.max_epochs, batch_size=hyper.batch_size, optimizer="adahessian",
                         lr=hyper.lr, seed=seed, callbacks=[stopper],
                         optimizer_options={"betas": tuple(hyper.betas), "hessian_power": hyper.hessian_power})
        start = time.perf_counter()
        result = engine.fit(model, fit, loss="poisson", penalties=[psi])
        seconds = time.perf_counter() - start
    stopper.restore()
    model.eval()
    return model, {"epochs": stopper.best_epoch, "epochs_run": len(stopper.values), "seconds": seconds,
                   "status": result.status}


# ----------------------------------------------------------------------------- measures
def _outputs(model: Any, part: Any) -> torch.Tensor:
    with torch.no_grad():
        return model(part.X).reshape(-1).to(torch.float64)


def measure(out: torch.Tensor, part: Any, factor: float = 1.0) -> dict[str, float]:
    """The [DC] Table 5.3/5.4 measures of the log-rates ``out`` on ``part``, the rates
    multiplied by ``factor`` (the balance correction; 1 for none).

    ``deviance`` (mean unit Poisson deviance of the expected counts ``v yhat``), ``rps``,
    ``ccdcov``, ``jdcov`` (of ``yhat`` against gender and region), ``js_divergence`` and
    ``uf`` (over the gender x region cells), ``loss`` (the eq. 5.2 loss ``mean(v yhat -
    y log yhat)``) and ``balance`` (``sum v yhat / sum y``).
    """
    from fairopt.evaluation import evaluate
    from fairopt.penalties import DistanceCovariancePenalty

    shifted = out.reshape(-1).to(torch.float64) + math.log(factor)
    metrics = evaluate(lambda X: shifted, part)
    row = {k: float(metrics[k]) for k in ("deviance", "rps", "js_divergence", "uf")}
    for kind in KINDS:
        psi = DistanceCovariancePenalty(list(SENSITIVE), kind=kind)
        row[kind] = float(psi(shifted, part))
    rate = torch.exp(shifted).numpy()
    exposure = part.exposure.to(torch.float64).cpu().numpy()
    y = part.y.to(torch.float64).cpu().numpy()
    row["loss"] = float(np.mean(exposure * rate - y * np.log(rate)))
    row["balance"] = float(np.sum(exposure * rate) / np.sum(y))
    return row


def _evaluated(model: Any, parts: Mapping[str, Any], fitted_on: Any, ids: dict, info: dict) -> list[dict]:
    """Rows of one model: every part, raw and balance-corrected (factor from ``fitted_on``)."""
    from fairopt.measures.balance import balance_correction

    factor = balance_correction(torch.exp(_outputs(model, fitted_on)), fitted_on.exposure, fitted_on.y)
    rows = []
    for split, part in parts.items():
        out = _outputs(model, part)
        for corrected in (False, True):
            rows.append({**ids, "split": split, "corrected": corrected, "n": len(part),
                         **measure(out, part, factor if corrected else 1.0),
                         "factor": factor, **info})
    return rows


def _floors(model: Any, part: Any, stage: str, split: str, n_permutations: int = 20) -> dict:
    """JS divergence of permuted predictions (its value at independence) and the JdCov of a
    constant prediction (gender-region dependence alone) on ``part``."""
    from fairopt.measures import js_divergence
    from fairopt.penalties import DistanceCovariancePenalty

    rate = torch.exp(_outputs(model, part)).numpy()
    cells = part.cells.cpu().numpy()
    rng = np.random.default_rng(0)
    jsd = [js_divergence(rng.permutation(rate), cells, kinds=["categorical"]) for _ in range(n_permutations)]
    psi = DistanceCovariancePenalty(list(SENSITIVE), kind="jdcov")
    constant = float(psi(torch.zeros(len(part), dtype=torch.float64), part))
    return {"stage": stage, "split": split, "n": len(part), "cells": int(np.unique(cells).size),
            "JS divergence floor": float(np.mean(jsd)), "JS divergence floor sd": float(np.std(jsd, ddof=1)),
            "JdCov floor": constant}


# ----------------------------------------------------------------------------- protocol
def _plan(settings: Settings) -> list[tuple[str, str, float, int]]:
    """(stage, regulariser, lambda, seed) of every training run, calibration first."""
    runs = [("calibration", "none", 0.0, seed) for seed in settings.seeds]
    runs += [("calibration", reg, float(lam), seed) for reg in settings.regularisers
             for lam in sorted(set(settings.lambdas)) if lam > 0 for seed in settings.seeds]
    if settings.final:
        runs += [("test", reg, float(settings.selected.get(reg, 0.0)), seed)
                 for reg in ("none", *settings.regularisers) for seed in settings.seeds]
    return runs


def run_rows(settings: Settings, data_dir: str | Path | None = None, progress: bool = True,
             data: Any = None) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Train and evaluate every run of ``settings``; returns (rows, floors)."""
    from tqdm.auto import tqdm

    parts = prepare(settings, data_dir, data)
    logger.info("dcov-pg15: %d train (%d sub-training, %d validation) / %d test rows, %d inputs",
                len(parts.train), len(parts.subtrain), len(parts.valid), len(parts.test), parts.train.n_features)
    rows, floors = [], []
    plan = _plan(settings)
    bar = tqdm(plan, desc="dcov-pg15", unit="run", disable=not progress)
    for stage, reg, lam, seed in bar:
        hyper = settings.hyper["none" if stage == "calibration" else reg]
        fitted_on = parts.subtrain if stage == "calibration" else parts.train
        evaluated = ({"valid": parts.valid, "subtrain": parts.subtrain} if stage == "calibration"
                     else {"test": parts.test, "train": parts.train})
        kind = reg if reg in KINDS else "ccdcov"  # lambda = 0 trains the loss alone: the kind is a label
        model, info = train_model(fitted_on, hyper, kind, lam, seed, settings)
        ids = {"stage": stage, "regulariser": reg, "lambda": lam, "seed": seed}
        new_rows = _evaluated(model, evaluated, fitted_on, ids, info)
        rows += new_rows
        if reg == "none" and seed == settings.seeds[0]:
            floors += [_floors(model, part, stage, split) for split, part in evaluated.items()]
        first = new_rows[0]  # the first evaluated part, raw predictions
        bar.set_postfix_str(f"{stage} {reg} lambda={lam:g} seed={seed}: rps {first['rps']:.4f} {kind} "
                            f"{first[kind]:.2e} ({info['epochs']}/{info['epochs_run']} ep, {info['seconds']:.0f} s)")
        logger.info("%s %s lambda=%g seed %d: %s", stage, reg, lam, seed, info)
    return pd.DataFrame(rows), pd.DataFrame(floors)


def lambda_scales(rows: pd.DataFrame) -> pd.DataFrame:
    """[DC] eq. 4.5 per regulariser: |mean eq. 5.2 loss| / regulariser of the lambda = 0
    model on the validation part (means over seeds; :func:`~fairopt.experiments.lambda_scale`)."""
    from fairopt.experiments.calibration import lambda_scale

    base = rows[(rows["stage"] == "calibration") & (rows["regulariser"] == "none") & (rows["split"] == "valid")
                & (~rows["corrected"])]
    if base.empty:
        return pd.DataFrame()
    loss = float(base["loss"].mean())
    records = []
    for kind in KINDS:
        value = float(base[kind].mean())
        scale = lambda_scale(loss, value) if value > 0 else math.nan
        records.append({"regulariser": report.NAMES[kind], "mean loss": f"{loss:.4f}",
                        "regulariser value": f"{value:.4e}", "scale (eq. 4.5)": f"{scale:.1f}"})
    return pd.DataFrame(records)


def _header(rows: pd.DataFrame, settings: Settings, command: str, seconds: float, protocol: str) -> list[str]:
    calibration = rows[(rows["stage"] == "calibration") & (rows["split"] == "valid") & (~rows["corrected"])]
    final = rows[(rows["stage"] == "test") & (rows["split"] == "test") & (~rows["corrected"])]
    trained = pd.concat([calibration, final])
    return [
        "# dcov-pg15: [DC] sec. 5.2, the pg15training Poisson application (Tables 5.3, 5.4, H.3; Fig. 5.4)", "",
        "Lee, Antonio, Avanzi, Marchi, Zhou, *Machine Learning with Multitype Protected Attributes: "
        "Intersectional Fairness through Regularisation*: Poisson claim counts with a CCdCov or JdCov "
        "regulariser against gender x region, both excluded from the inputs.", "",
        f"Command: `{command}`", "",
        f"Protocol: **{protocol}**. Regularisers {list(settings.regularisers)}, calibration lambdas "
        f"{[float(v) for v in sorted(set(settings.lambdas) | {0.0})]}, final lambdas "
        f"{ {k: float(v) for k, v in settings.selected.items()} }, seeds {list(settings.seeds)}, at most "
        f"{settings.max_epochs} epochs (early stopping, patience {settings.patience}), "
        f"{int(round((1 - settings.test_size) * 100))}/{int(round(settings.test_size * 100))} split and "
        f"{int(round((1 - settings.valid_size) * 100))}/{int(round(settings.valid_size * 100))} calibration split "
        f"(seed {settings.split_seed})" + (f", subsample {settings.subsample} rows" if settings.subsample else "")
        + ("" if settings.final else ", final models not trained") + ".",
        f"Rows: calibration {int(calibration['n'].max()) if len(calibration) else 0} validation; "
        f"test {int(final['n'].max()) if len(final) else 0}.",
        f"Wall time: {seconds:.0f} s for {len(trained)} trained models (mean {trained['seconds'].mean():.1f} s, "
        f"{trained['epochs_run'].mean():.1f} epochs run, best epoch {trained['epochs'].mean():.1f} on average).",
    ]


def write_report(rows: pd.DataFrame, floors: pd.DataFrame, out: str | Path, settings: Settings, command: str,
                 seconds: float, protocol: str) -> tuple[str, list[Path]]:
    """Write ``summary.md`` and ``tradeoff.png`` for the runs ``rows``; returns the summary
    and the two files."""
    out = Path(out)
    validation = report.mean_table(rows, "calibration", "valid", False, report.VALIDATION_MEASURES)
    figure = out / "tradeoff.png"
    valid_floor = floors[(floors["stage"] == "calibration") & (floors["split"] == "valid")] if len(floors) else floors
    report.plot_tradeoff(validation, settings.regularisers, figure,
                         jsd_floor=float(valid_floor["JS divergence floor"].iloc[0]) if len(valid_floor) else None)
    choices = CHOICES.format(patience=settings.patience, max_epochs=settings.max_epochs,
                             split_seed=settings.split_seed)
    summary = report.write_summary(out / "summary.md", rows=rows, floors=floors, scales=lambda_scales(rows),
                                   header=_header(rows, settings, command, seconds, protocol), choices=choices,
                                   regularisers=settings.regularisers)
    return summary, [figure, out / "summary.md"]


def run(out: str | Path, settings: Settings = FULL, data_dir: str | Path | None = None,
        command: str = "python -m benchmarks.papers dcov-pg15", progress: bool = True, protocol: str | None = None,
        data: Any = None) -> tuple[pd.DataFrame, str, list[Path]]:
    """Run ``settings``; write ``results.csv``, ``floors.csv``, ``summary.md`` and ``tradeoff.png``.

    ``protocol`` names the settings in the summary (default: "full" for :data:`FULL`, "quick"
    for :data:`QUICK`, else "custom"); ``data`` replaces pg15training (tests).
    Returns the per-row table, the summary and the files written.
    """
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    if protocol is None:
        protocol = "full ([DC] protocol)" if settings == FULL else "quick" if settings == QUICK else "custom"
    start = time.perf_counter()
    rows, floors = run_rows(settings, data_dir, progress=progress, data=data)
    seconds = time.perf_counter() - start
    rows.to_csv(out / "results.csv", index=False)
    floors.to_csv(out / "floors.csv", index=False)
    summary, files = write_report(rows, floors, out, settings, command, seconds, protocol)
    return rows, summary, [out / "results.csv", out / "floors.csv", *files]


def override(settings: Settings, *, epochs: int | None = None, seeds: Sequence[int] | None = None,
             subsample: int | None = None, lambdas: Sequence[float] | None = None) -> Settings:
    """``settings`` with the given fields replaced (None keeps a field); ``epochs`` is the
    largest number of epochs (early stopping may end a run before)."""
    if lambdas is not None and any((not math.isfinite(v)) or v < 0 for v in lambdas):
        raise ValueError(f"lambdas: expected finite values >= 0, got {list(lambdas)}")
    epochs = None if epochs is None else positive_int(epochs, "epochs")
    subsample = None if subsample is None else positive_int(subsample, "subsample")
    changes = {"max_epochs": epochs, "seeds": None if seeds is None else check_seeds(seeds), "subsample": subsample,
               "lambdas": None if lambdas is None else tuple(float(v) for v in lambdas)}
    return dataclasses.replace(settings, **{k: v for k, v in changes.items() if v is not None})
