"""Named experiment configurations, TOML loading, and the runners behind ``fairopt bench``
and ``fairopt train``.

A configuration is a dict (or a TOML file with the same tables)::

    name = "my-experiment"
    description = "..."

    [data]
    dataset = "law"            # fairopt.datasets name
    options = {}               # extra fairopt.datasets.load() arguments (sensitive, target, ...)
    subsample = 5000           # optional: seeded subsample of the rows
    minmax = ["age"]           # optional: min-max scale these continuous sensitive features
    data_dir = "..."           # optional

    [run]
    seeds = [0]
    folds = 1                  # 1: train/test split; k > 1: k-fold cross-validation
    test_size = 0.2
    split_seed = 0
    fauci_combined = [["sex", "race"]]   # optional: FaUCI metrics of combined attributes

    [model]
    kind = "linear"            # or "mlp" with hidden = [32]

    [[methods]]
    kind = "sqp"               # sqp | penalty | lagrangian
    constraint = "disparate_impact:race"     # fairopt.specs
    values = [0.5, 0.8]        # swept bound (delta); omitted: one run with the spec's bound
                               # a constraint of both forms (equal_opportunity, equalized_odds,
                               # ...) sweeps its ratio delta as written; "equal_opportunity:sex<="
                               # sweeps its difference bound
    epochs = 200               # any other key: an engine argument

    [[methods]]
    kind = "penalty"
    penalty = "dp_squared:race"              # or constraint = "di:race:0.8" (hinge)
    values = [0.1, 1.0, 10.0]
    weight_of = "inverse"      # weight = 1/value ([SQP] eq. 3); default "identity"
    engine = "sqp"             # optional: StochasticSQP on the penalised loss (default "penalty")

    [plots]
    measure = "di_ratio"       # optional: one column for requested vs realised; default each
                               # method's own bounded measure (its constraint's, e.g. a GeDI)
    unfairness = "dp_difference"
    performance = "accuracy"
    split = "test"
    history_keys = ["f", "V", "P"]

:data:`BUILTIN` holds the named configurations (``fairopt bench <name>``). The scripted paper
reproductions (``sqp-table2``, ``fair-ridge``, ...) are not configurations and not part of the
package: they live in ``benchmarks/papers`` of a source checkout (``python -m benchmarks.papers``).
"""

from __future__ import annotations

import copy
import json
import logging
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np
import pandas as pd
import torch

from fairopt.evaluation_fauci import fauci_columns
from fairopt.experiments.compare import compare, realised_vs_requested
from fairopt.experiments.methods import (
    PENALTY_HYPERPARAMETERS,
    LagrangianMethod,
    Method,
    MovingTargetsMethod,
    PenaltyMethod,
    SQPMethod,
    model_factory,
)
from fairopt.experiments.plots import plot_histories, plot_requested_vs_realised, plot_tradeoff
from fairopt.experiments.reporting import BenchResult, markdown_table
from fairopt.specs import build_penalty, constraint_builder

__all__ = [
    "BUILTIN",
    "available_configs",
    "load_config",
    "load_data",
    "build_methods",
    "run_config",
    "run_train",
    "BenchResult",
    "markdown_table",
    "minmax_sensitive",
]

logger = logging.getLogger(__name__)

_DELTAS = [0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9]
_LAMBDAS = [1e-4, 1e-3, 1e-2, 1e-1, 1.0, 1e1, 1e2, 1e3]

#: Named configurations of ``fairopt bench``.
BUILTIN: dict[str, dict] = {
    "sqp-vs-penalty-law": {
        "description": "[SQP] sec 4.2 / Fig. 9 on Law (linear model): hard DI >= delta constraints "
                       "(8 deltas) vs the regularisation-only loss + (1/lambda) r_dp (8 lambdas from 1e-4 "
                       "to 1e3, trained by the SQP engine as in the paper and by Adam), and the SBR Lagrangian.",
        "data": {"dataset": "law"},
        "model": {"kind": "linear"},
        "methods": [
            {"kind": "sqp", "name": "constraint (sqp)", "constraint": "disparate_impact:race", "values": _DELTAS,
             "epochs": 500, "lr": 0.5},
            {"kind": "penalty", "name": "penalty (sqp engine)", "penalty": "dp_squared:race", "values": _LAMBDAS,
             "weight_of": "inverse", "engine": "sqp", "epochs": 500, "lr": 0.5},
            {"kind": "penalty", "name": "penalty (adam)", "penalty": "dp_squared:race", "values": _LAMBDAS,
             "weight_of": "inverse", "epochs": 500, "lr": 0.05},
            {"kind": "lagrangian", "name": "lagrangian (sbr)", "constraint": "disparate_impact:race",
             "values": _DELTAS, "epochs": 500, "lr": 0.05},
        ],
    },
    "sqp-vs-penalty-acsincome": {
        "description": "[SQP] sec 4.2 / Fig. 5 on ACSIncome (Colorado extract; MLP 256): hard DI >= delta "
                       "vs loss + (1/lambda) r_dp (SQP engine and Adam).",
        "data": {"dataset": "acsincome"},
        "model": {"kind": "mlp", "hidden": [256]},
        "methods": [
            {"kind": "sqp", "name": "constraint (sqp)", "constraint": "disparate_impact:SEX", "values": _DELTAS,
             "epochs": 500, "lr": 0.5},
            {"kind": "penalty", "name": "penalty (sqp engine)", "penalty": "dp_squared:SEX", "values": _LAMBDAS,
             "weight_of": "inverse", "engine": "sqp", "epochs": 500, "lr": 0.5},
            {"kind": "penalty", "name": "penalty (adam)", "penalty": "dp_squared:SEX", "values": _LAMBDAS,
             "weight_of": "inverse", "epochs": 500, "lr": 0.01},
        ],
    },
    "dcov-compas": {
        "description": "[DC] sec 5.1: COMPAS with CCdCov and JdCov regularisers (sex, race, age), "
                       "lambda 0..80, AdaHessian, mini-batches of 512.",
        "data": {"dataset": "compas", "options": {"sensitive": ["sex", "race", "age"]}, "minmax": ["age"]},
        "run": {"seeds": [0, 1, 2], "test_size": 0.2},
        "model": {"kind": "mlp", "hidden": [256, 256]},
        "methods": [
            {"kind": "penalty", "name": "ccdcov", "penalty": "ccdcov:sex,race,age",
             "values": [0, 10, 20, 40, 60, 80], "optimizer": "adahessian", "lr": 0.01, "batch_size": 512,
             "epochs": 50, "optimizer_options": {"betas": [0.95, 0.999]}},
            {"kind": "penalty", "name": "jdcov", "penalty": "jdcov:sex,race,age",
             "values": [0, 10, 20, 40, 60, 80], "optimizer": "adahessian", "lr": 0.01, "batch_size": 512,
             "epochs": 50, "optimizer_options": {"betas": [0.95, 0.999]}},
        ],
        "plots": {"unfairness": "js_divergence", "performance": "rps", "history_keys": ["f", "P"]},
    },
    "demo-adult": {
        "description": "Embedded UCI Adult, linear model: SQP with DI >= delta, the DI hinge penalty and the "
                       "SBR Lagrangian, each at the estimators' default budget (SQP 500 full-batch iterations, "
                       "the first-order methods 1,000 Adam epochs at 0.02): with one short budget for all (30 "
                       "epochs) the first-order baselines ended near the majority class, which compares budgets, "
                       "not methods.",
        "data": {"dataset": "adult"},
        "model": {"kind": "linear"},
        "methods": [
            {"kind": "sqp", "constraint": "disparate_impact:sex", "values": [0.6, 0.8], "epochs": 500},
            {"kind": "penalty", "constraint": "disparate_impact:sex:0.8", "values": [1.0, 10.0]},
            {"kind": "lagrangian", "constraint": "disparate_impact:sex", "values": [0.6, 0.8]},
        ],
    },
}

_SECTIONS = {
    "name": None, "description": None,
    "data": {"dataset", "options", "subsample", "minmax", "data_dir"},
    "run": {"seeds", "folds", "test_size", "split_seed", "fauci_combined"},
    "model": {"kind", "hidden", "activation"},
    "methods": None,
    "plots": {"measure", "unfairness", "performance", "split", "history_keys"},
}
_METHOD_KEYS = {"kind", "name", "values", "constraint", "penalty", "weight_of", "hyperparameter", "loss", "model"}
_METHOD_CLASSES = {"sqp": SQPMethod, "penalty": PenaltyMethod, "lagrangian": LagrangianMethod,
                   "moving_targets": MovingTargetsMethod}
_WEIGHT_OF = {"identity": None, "inverse": lambda value: 1.0 / value}
_PERFORMANCE = {"binary": "accuracy", "regression": "r2", "poisson": "deviance"}


# ----------------------------------------------------------------------------- loading
def available_configs() -> list[str]:
    """Names of the built-in configurations."""
    return sorted(BUILTIN)


def _check_keys(table: Any, allowed: set, where: str) -> dict:
    if not isinstance(table, Mapping):
        raise ValueError(f"config: [{where}] must be a table, got {table!r}")
    unknown = sorted(set(table) - allowed)
    if unknown:
        raise ValueError(f"config: unknown key(s) {unknown} in [{where}]; allowed: {sorted(allowed)}")
    return dict(table)


def load_config(source: str | Path | Mapping) -> dict:
    """A validated configuration from a built-in name, a TOML file path or a dict.

    Raises ``ValueError`` naming an unknown configuration, section or key, or a missing
    ``data.dataset`` / ``methods``.
    """
    if isinstance(source, Mapping):
        config = copy.deepcopy(dict(source))
    elif isinstance(source, (str, Path)) and str(source) in BUILTIN:
        config = copy.deepcopy(BUILTIN[str(source)])
        config.setdefault("name", str(source))
    elif isinstance(source, (str, Path)) and Path(source).is_file():
        import tomllib  # Python >= 3.11

        try:
            config = tomllib.loads(Path(source).read_text())
        except tomllib.TOMLDecodeError as exc:
            raise ValueError(f"config: {source} is not valid TOML ({exc})") from None
        config.setdefault("name", Path(source).stem)
    else:
        raise ValueError(f"config: {source!r} is neither a built-in configuration {available_configs()} "
                         "nor an existing TOML file")
    unknown = sorted(set(config) - set(_SECTIONS))
    if unknown:
        raise ValueError(f"config: unknown section(s) {unknown}; allowed: {sorted(_SECTIONS)}")
    for section, keys in _SECTIONS.items():
        if keys is not None:
            config[section] = _check_keys(config.get(section, {}), keys, section)
    if "dataset" not in config["data"]:
        raise ValueError("config: [data] needs 'dataset'")
    methods = config.get("methods")
    if not isinstance(methods, list) or not methods:
        raise ValueError("config: needs at least one [[methods]] table")
    for i, m in enumerate(methods):
        if not isinstance(m, Mapping) or m.get("kind") not in _METHOD_CLASSES:
            raise ValueError(f"config: methods[{i}].kind must be one of {sorted(_METHOD_CLASSES)}, "
                             f"got {m.get('kind') if isinstance(m, Mapping) else m!r}")
    config.setdefault("name", "experiment")
    return config


def minmax_sensitive(data: Any, names: Sequence[str]) -> Any:
    """A copy of ``data`` whose continuous sensitive features ``names`` are min-max scaled
    to [0, 1] (e.g. age for the distance covariances of [DC], which are not scale-free;
    the paper scales age so, App. G.1). Inputs ``X`` are unchanged."""
    scaled = dict(data.sensitive)
    for name in names:
        if data.sensitive_kinds.get(name) != "continuous":
            raise ValueError(f"minmax: {name!r} is not a continuous sensitive feature of the data")
        values = scaled[name]
        span = float(values.max() - values.min())
        if span <= 0:
            raise ValueError(f"minmax: {name!r} is constant")
        scaled[name] = (values - values.min()) / span
    new = copy.copy(data)
    new.sensitive = scaled
    return new


def load_data(data_config: Mapping, data_dir: str | None = None) -> Any:
    """The FairData of a ``[data]`` table (dataset, options, subsample, minmax, data_dir)."""
    from fairopt import datasets

    cfg = _check_keys(data_config, _SECTIONS["data"], "data")
    data = datasets.load(cfg["dataset"], data_dir=data_dir or cfg.get("data_dir"), **dict(cfg.get("options", {})))
    if cfg.get("minmax"):
        data = minmax_sensitive(data, list(cfg["minmax"]))
    subsample = cfg.get("subsample")
    if subsample is not None:
        if isinstance(subsample, bool) or not isinstance(subsample, int) or subsample < 2:
            raise ValueError(f"config: data.subsample must be an integer >= 2, got {subsample!r}")
        if subsample < len(data):
            rows = np.sort(np.random.default_rng(0).choice(len(data), size=subsample, replace=False))
            data = data.subset(torch.from_numpy(rows))
    return data


def _method_values(spec: Mapping, default: float | None, where: str) -> list | None:
    values = spec.get("values")
    if values is None:
        return None if default is None else [default]
    if not isinstance(values, list) or not values:
        raise ValueError(f"config: {where}.values must be a non-empty list of numbers, got {values!r}")
    return values


def _penalty_method(spec: Mapping, where: str, common: dict, engine: dict) -> tuple[Method, list | None]:
    """A :class:`PenaltyMethod` from a ``kind = "penalty"`` table (penalty specs and/or a bounded constraint)."""
    terms = spec.get("penalty")
    if terms is None and "constraint" not in spec:
        raise ValueError(f"config: {where} (penalty) needs 'penalty' or 'constraint'")
    objects = [build_penalty(t) for t in (terms if isinstance(terms, list) else [terms])] if terms else []
    if "constraint" in spec:
        builder, _, bound = constraint_builder(spec["constraint"])
        if bound is None:
            raise ValueError(f"config: {where}.constraint of a penalty needs its bound, e.g. 'di:sex:0.8'")
        objects.append(builder(bound))
    weight_of = spec.get("weight_of", "identity")
    if weight_of not in _WEIGHT_OF:
        raise ValueError(f"config: {where}.weight_of must be one of {sorted(_WEIGHT_OF)}, got {weight_of!r}")
    if weight_of == "inverse":
        common = {**common, "hyperparameter": common["hyperparameter"] or "lambda"}
    method = PenaltyMethod(objects, weight_of=_WEIGHT_OF[weight_of], **common, **engine)
    return method, _method_values(spec, None, where)


def _constrained_method(spec: Mapping, where: str, common: dict, engine: dict) -> tuple[Method, list | None]:
    """An SQP, Lagrangian or Moving Targets method sweeping the bound of its ``constraint`` spec."""
    if "constraint" not in spec:
        raise ValueError(f"config: {where} ({spec['kind']}) needs 'constraint'")
    builder, name, bound = constraint_builder(spec["constraint"])
    common = {**common, "hyperparameter": common["hyperparameter"] or name}
    return _METHOD_CLASSES[spec["kind"]](builder, **common, **engine), _method_values(spec, bound, where)


def build_methods(config: Mapping, epochs: int | None = None) -> tuple[list[Method], dict[str, list]]:
    """The methods of a configuration and their grid (``epochs`` overrides every method's).

    Keys of a ``[[methods]]`` table besides ``kind``, ``name``, ``values``, ``constraint``,
    ``penalty``, ``weight_of``, ``hyperparameter``, ``loss`` and ``model`` are engine
    arguments.
    """
    methods, grid = [], {}
    for i, spec in enumerate(config["methods"]):
        where = f"methods[{i}]"
        engine = {k: v for k, v in spec.items() if k not in _METHOD_KEYS}
        if epochs is not None:
            engine["epochs"] = epochs
        model_cfg = _check_keys(spec.get("model", config.get("model", {})), _SECTIONS["model"], f"{where}.model")
        model = model_factory(model_cfg.get("kind", "linear"), tuple(model_cfg.get("hidden", (32,))),
                              model_cfg.get("activation", "leaky_relu"))
        common = {"model": model, "name": spec.get("name"), "loss": spec.get("loss"),
                  "hyperparameter": spec.get("hyperparameter")}
        make = _penalty_method if spec["kind"] == "penalty" else _constrained_method
        method, values = make(spec, where, common, engine)
        methods.append(method)
        if values is not None:
            grid[method.name] = values
    return methods, grid


# ----------------------------------------------------------------------------- reporting
def _mean_table(table: pd.DataFrame, columns: Sequence[str]) -> pd.DataFrame:
    """Means over seeds and folds per (method, value), one column per (measure, split)."""
    keep = [c for c in columns if c in table.columns]
    keys = ["method", "value"]
    wide = table.groupby(keys + ["split"], dropna=False, sort=False)[keep].mean().unstack("split")
    wide.columns = [f"{split} {measure}" for measure, split in wide.columns]
    time = table.groupby(keys, dropna=False, sort=False)["time"].mean().rename("time (s)")
    order = [c for m in keep for c in (f"train {m}", f"test {m}") if c in wide.columns]
    return wide[order].join(time).reset_index()


def _plot_settings(config: Mapping, task: str) -> dict:
    plots = dict(config.get("plots", {}))
    plots.setdefault("measure", None)  # None: each method's own bounded measure (compare's "realised")
    plots.setdefault("unfairness", "dp_difference")
    plots.setdefault("performance", _PERFORMANCE[task])
    plots.setdefault("split", "test")
    plots.setdefault("history_keys", ["f", "V", "V_exact", "P"])
    return plots


def run_config(
    config: str | Path | Mapping,
    out: str | Path,
    *,
    epochs: int | None = None,
    seeds: Sequence[int] | None = None,
    data_dir: str | None = None,
    subsample: int | None = None,
) -> BenchResult:
    """Run a configuration and write ``results.csv``, ``summary.md`` and PNG figures to ``out``.

    Figures: ``tradeoff.png`` (performance vs unfairness, one curve per method),
    ``requested_vs_realised.png`` (when a method sweeps a bound) and
    ``histories_<method>.png`` (training curves of the first seed and fold, one line per
    value).

    Parameters
    ----------
    config : built-in name, TOML path or dict (:func:`load_config`)
    out : directory (created)
    epochs, seeds, data_dir, subsample : optional overrides of the configuration
    """
    config = load_config(config)
    if subsample is not None:
        config["data"]["subsample"] = subsample
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    data = load_data(config["data"], data_dir)
    methods, grid = build_methods(config, epochs)
    run = config["run"]
    seeds = list(seeds) if seeds is not None else list(run.get("seeds", [0]))
    histories: dict = {}
    table = compare(methods, data, grid, seeds=seeds, folds=int(run.get("folds", 1)),
                    test_size=float(run.get("test_size", 0.2)), split_seed=int(run.get("split_seed", 0)),
                    fauci_combined=run.get("fauci_combined"),
                    histories=histories)
    plots = _plot_settings(config, data.task)
    files = [out / "results.csv"]
    table.to_csv(files[0], index=False)
    plot_tradeoff(table, out / "tradeoff.png", performance=plots["performance"], unfairness=plots["unfairness"],
                  split=plots["split"], title=config["name"])
    files.append(out / "tradeoff.png")
    bounded = [m.name for m in methods
               if m.hyperparameter is not None and m.hyperparameter not in PENALTY_HYPERPARAMETERS and m.name in grid]
    if bounded and (plots["measure"] or "realised") in table.columns:
        plot_requested_vs_realised(table, out / "requested_vs_realised.png", measure=plots["measure"],
                                   split="train", methods=bounded, title=config["name"])
        files.append(out / "requested_vs_realised.png")
    first_seed, first_fold = seeds[0], 0
    for method in methods:
        runs = {f"{method.hyperparameter}={value}" if value is not None else method.name: h
                for (name, value, seed, fold), h in histories.items()
                if name == method.name and seed == first_seed and fold == first_fold and h is not None}
        if runs:
            path = out / f"histories_{_slug(method.name)}.png"
            plot_histories(runs, path, keys=plots["history_keys"], title=method.name)
            files.append(path)
    summary = _summary(config, data, table, methods, plots)
    (out / "summary.md").write_text(summary + "\n")
    files.append(out / "summary.md")
    return BenchResult(table=table, summary=summary, files=files)


def _slug(name: str) -> str:
    return "".join(ch if ch.isalnum() or ch in "-_" else "_" for ch in name).strip("_") or "method"


def _fauci_means(table: pd.DataFrame, split: str) -> pd.DataFrame:
    """The FaUCI columns of ``table`` (:func:`fairopt.evaluation_fauci.fauci_columns`) on ``split``,
    averaged over seeds and folds per (method, value); empty when there are none."""
    columns = fauci_columns(table.columns)
    rows = table[table["split"] == split]
    if not columns or rows.empty:
        return pd.DataFrame()
    return rows.groupby(["method", "value"], dropna=False, sort=False)[columns].mean().reset_index()


def _summary(config: Mapping, data: Any, table: pd.DataFrame, methods: list[Method], plots: Mapping) -> str:
    columns = [plots["performance"], plots["measure"] or "realised", plots["unfairness"], "violation"]
    means = _mean_table(table, list(dict.fromkeys(columns)))
    if plots["measure"] is None and "measure" in table.columns:  # name what "realised" measures per method
        labels = table.groupby("method", sort=False)["measure"].agg(lambda m: " | ".join(map(str, m.dropna().unique())))
        means.insert(2, "measure", means["method"].map(labels))
    lines = [f"# {config['name']}", "", config.get("description", ""), "",
             f"Data: {config['data']['dataset']}, {len(data)} rows, task {data.task}, sensitive "
             f"{list(data.sensitive_kinds)}; seeds {sorted(table['seed'].unique().tolist())}, "
             f"folds {table['fold'].nunique()}.", "",
             "## Mean results over seeds and folds", "", markdown_table(means), ""]
    fauci = _fauci_means(table, plots["split"])
    if not fauci.empty:
        lines += [f"## FaUCI metrics ({plots['split']}; means over seeds and folds)", "",
                  "[FU] eq. 5-11 on hard predictions: `wdp`, `wdi`, `weo` of binary/categorical features (uniform "
                  "group weights), `gdp`, `gdi`, `geo` of continuous ones (10 equal-width bins, density weights); "
                  "`wdi`/`gdi` are scores (1 is fair), the others unfairness (0 is fair).", "",
                  markdown_table(fauci), ""]
    reading = realised_vs_requested(table, measure=plots["measure"], split="train")
    if not reading.empty:
        own = ("each method's own bounded measure (`measure`: what its constraint bounds, or its penalty "
               "penalises), exact on the training rows" if plots["measure"] is None else f"`{plots['measure']}`")
        lines += ["## Realised vs requested (train)", "",
                  f"Realised: {own}. `reversals`: adjacent values where the realised measure moves against the "
                  "method's overall trend by more than 0.005 (on the means over seeds and folds); `runs_met`: "
                  "runs (seeds and folds) that satisfy their requested bound (within 0.005; `sense` lower: "
                  "realised >= value, upper: realised <= value; an `undefined` measure, a constant classifier's "
                  "0/0 ratio, satisfies none), `bounds_met`: requested bounds that every run satisfies, for "
                  "bound-type hyper-parameters. A penalty sweeps weights, not bounds: its `bounds_met` is empty, "
                  "so read its "
                  "`realised_min` / `realised_max` against the bound its constraint names (a penalised DI >= 0.8 "
                  "can end at 0).", "", markdown_table(reading), ""]
    return "\n".join(lines)


# ----------------------------------------------------------------------------- train
_TRAIN_KEYS = {"dataset", "data_dir", "options", "constraint", "penalty", "method", "model", "hidden", "epochs",
               "lr", "batch_size", "weight", "optimizer", "seed", "test_size", "out", "dual_lr", "dual_update",
               "subsample"}


def run_train(options: Mapping[str, Any], out: str | Path, data: Any = None) -> dict:
    """One training run (``fairopt train``): train/test split, one method, report and files.

    ``options``: ``dataset`` (required), ``constraint`` (spec or list of specs),
    ``penalty`` (penalty spec or list, method "penalty"), ``method`` ("sqp", "penalty",
    "lagrangian"), ``model`` ("linear", "mlp"), ``hidden``, ``epochs``, ``lr``,
    ``batch_size``, ``weight`` (penalty), ``optimizer`` (penalty/lagrangian), ``dual_lr``,
    ``dual_update``, ``seed``, ``test_size``, ``data_dir``, ``options`` (load arguments),
    ``subsample``. Writes ``metrics.json`` (train/test :func:`fairopt.evaluate`),
    ``report.txt``, ``history.csv``, ``history.png`` and ``model.pt`` to ``out``. ``data``: the
    FairData these options load (:func:`load_data`), where the caller has it already.

    Returns
    -------
    dict
        ``{"train": ..., "test": ..., "status": ..., "status_message": ..., "seconds": ...}``: the
        status in the estimators' terms (:func:`fairopt.status.fit_status`).
    """
    from fairopt.diagnostics import near_constant_reason
    from solvers.problem import eval_mode
    from fairopt.evaluation import constant_predictions, evaluate, format_report, met_tolerances
    from fairopt.status import MET_TOL, BoundStatus, fit_status
    from solvers.history import FitResult

    opts = {k: v for k, v in dict(options).items() if v is not None}
    unknown = sorted(set(opts) - _TRAIN_KEYS)
    if unknown:
        raise ValueError(f"train: unknown option(s) {unknown}; allowed: {sorted(_TRAIN_KEYS)}")
    if "dataset" not in opts:
        raise ValueError("train: 'dataset' is required")
    method_kind = opts.get("method", "sqp")
    if method_kind not in _METHOD_CLASSES:
        raise ValueError(f"method: expected one of {sorted(_METHOD_CLASSES)}, got {method_kind!r}")
    constraints = opts.get("constraint", [])
    constraints = [constraints] if isinstance(constraints, (str, Mapping)) else list(constraints)
    penalty_specs = opts.get("penalty", [])
    penalty_specs = [penalty_specs] if isinstance(penalty_specs, (str, Mapping)) else list(penalty_specs)
    if data is None:
        data = load_data({"dataset": opts["dataset"], "options": opts.get("options", {}),
                          **({"subsample": opts["subsample"]} if "subsample" in opts else {})}, opts.get("data_dir"))
    train, test = data.split(test_size=float(opts.get("test_size", 0.2)), seed=int(opts.get("seed", 0)))
    built = []
    for spec in constraints:
        builder, _, bound = constraint_builder(spec)
        if bound is None:
            raise ValueError(f"constraint: {spec!r} needs its bound, e.g. 'disparate_impact:sex:0.8'")
        built.append(builder(bound))
    engine = {k: opts[k] for k in ("epochs", "lr", "batch_size") if k in opts}
    if method_kind in ("penalty", "lagrangian") and "optimizer" in opts:
        engine["optimizer"] = opts["optimizer"]
    if method_kind == "lagrangian":
        engine.update({k: opts[k] for k in ("dual_lr", "dual_update") if k in opts})
    model = model_factory(opts.get("model", "linear"), _hidden(opts.get("hidden", (32,))))
    if method_kind == "penalty":
        terms = [build_penalty(s) for s in penalty_specs] + built
        method: Method = PenaltyMethod(terms, model=model, **engine)
        value = float(opts.get("weight", 1.0))
    else:
        if penalty_specs:
            raise ValueError(f"penalty: only method 'penalty' takes penalties, not {method_kind!r}")
        method = _METHOD_CLASSES[method_kind](lambda _value: built, model=model, **engine)
        value = 1.0 if built else None
    fitted = method.fit(train, value=value, seed=int(opts.get("seed", 0)))
    results = {"train": evaluate(fitted.model, train, fitted.constraints),
               "test": evaluate(fitted.model, test, fitted.constraints)}
    violations = {k[:-len(".violation")]: v for k, v in results["train"].items() if k.endswith(".violation")}
    bounds = [BoundStatus(**b) for b in (results["train"].get("bounds") or {}).values()]
    engine = FitResult(fitted.model, fitted.history, fitted.status, fitted.converged, fitted.info)
    with eval_mode(fitted.model), torch.no_grad():
        train_out = fitted.model(train.X).reshape(-1)
    status, message = fit_status(engine, method_kind, violations, met_tolerances(fitted.constraints, MET_TOL), bounds,
                                 constant=constant_predictions(train_out, train.task),
                                 near_constant=near_constant_reason(train_out, train))
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    report = format_report(results)
    (out / "report.txt").write_text(report + "\n")
    (out / "metrics.json").write_text(json.dumps({**results, "status": status, "seconds": fitted.seconds},
                                                 indent=1, default=float))
    if fitted.history is not None and len(fitted.history):
        fitted.history.to_pandas().to_csv(out / "history.csv", index=False)
        keys = [k for k in ("f", "V", "V_exact", "P") if any(k in r for r in fitted.history.records)]
        plot_histories({method.name: fitted.history}, out / "history.png", keys=keys, title=method.name)
    if isinstance(fitted.model, torch.nn.Module):
        torch.save(fitted.model.state_dict(), out / "model.pt")
    return {**results, "status": status, "status_message": message, "seconds": fitted.seconds, "report": report}


def _hidden(hidden: Any) -> tuple[int, ...]:
    if isinstance(hidden, str):
        try:
            return tuple(int(h) for h in hidden.split(",") if h.strip())
        except ValueError:
            raise ValueError(f"hidden: expected comma-separated layer widths, got {hidden!r}") from None
    if isinstance(hidden, int):
        return (hidden,)
    return tuple(hidden)
