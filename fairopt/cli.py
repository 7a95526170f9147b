"""The ``fairopt`` command line.

    fairopt demo [--epochs 300] [--delta 0.8] [--out fairopt_demo.png]
    fairopt datasets                      # list the data sets and where they are looked up
    fairopt bench sqp-vs-penalty-law --out results/   # a named experiment or a TOML file
    fairopt train --dataset adult --constraint disparate_impact:sex:0.8 --method sqp --out run/
    fairopt train --data loans.csv --target decision --positive approved --sensitive sex \
        --constraint "di:sex>=0.8" --method sqp --out run/     # your own CSV or parquet file
    fairopt predict run/model.fairopt --data new.csv --out predictions.csv [--id-column id]
    fairopt report run/model.fairopt --data new.csv          # per-group report (markdown)

Subcommands register themselves in :data:`COMMANDS` (name -> (help, add_arguments, run)).
"""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path
from typing import Any, Callable

__all__ = ["main", "COMMANDS", "USER_ERRORS", "register"]

COMMANDS: dict[str, tuple[str, Callable[[argparse.ArgumentParser], None], Callable[[argparse.Namespace], int | None]]] = {}


def register(name: str, help: str, add_arguments: Callable[[argparse.ArgumentParser], None] | None = None):
    """Decorator: ``@register("name", "help", add_arguments)`` on ``run(args) -> int | None``."""

    def wrap(run):
        COMMANDS[name] = (help, add_arguments or (lambda parser: None), run)
        return run

    return wrap


def _demo_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--epochs", type=int, default=300, help="full-batch SQP epochs of each fit (default 300)")
    p.add_argument("--delta", type=float, default=0.8,
                   help="the disparate-impact bound DI[sex] >= delta of the constrained fit (default 0.8)")
    p.add_argument("--out", default="fairopt_demo.png", metavar="FILE",
                   help="the picture of both fits' training histories (default fairopt_demo.png)")
    p.add_argument("--seed", type=int, default=0, help="seed of the split and the models (default 0)")


@register("demo", "train on the embedded UCI Adult with and without DI >= delta", _demo_arguments)
def _demo(args: argparse.Namespace) -> None:
    from fairopt.demo import run

    run(args.epochs, args.delta, args.out, args.seed)



def _datasets_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--data-dir", help="directory with the benchmark data files (searched first)")


@register("datasets", "list the benchmark data sets, the data directories searched and the file each one reads",
          _datasets_arguments)
def _datasets(args: argparse.Namespace) -> None:
    from fairopt import datasets

    print("data sets:", ", ".join(datasets.available()))
    print(f"searched: --data-dir (fairopt train, fairopt bench), ${datasets.ENV_VAR}, {datasets.user_data_dir()}")
    for name in datasets.available():
        print(f"  {name:13s} {datasets.locate(name, args.data_dir)}")
    print("UCI Adult is embedded and always available.")


_PAPERS_HINT = ("the paper reproductions (sqp-table2, fair-ridge, dcov-pg15, fauci-adult, gedi-tables, peers) are not "
                "part of fairopt: run them from the root of a source checkout with python -m benchmarks.papers NAME "
                "(--list names them)")


def _bench_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("config", nargs="?", help="a built-in configuration name (see --list) or a TOML file")
    p.add_argument("--list", action="store_true", help="list the built-in configurations and exit")
    p.add_argument("--out", help="output directory (default fairopt_bench)")
    p.add_argument("--epochs", type=int, help="override every method's epochs")
    p.add_argument("--seeds", type=int, nargs="+", help="override the training seeds")
    p.add_argument("--subsample", type=int, help="use a seeded subsample of this many rows")
    p.add_argument("--data-dir", help="directory with the benchmark data files")


@register("bench", "run a named experiment configuration or a TOML file; writes CSV, PNG and a summary",
          _bench_arguments)
def _bench(args: argparse.Namespace) -> int | None:
    from fairopt.experiments.configs import BUILTIN, run_config

    if args.list or args.config is None:
        for name in sorted(BUILTIN):
            print(f"{name}: {BUILTIN[name]['description']}")
        print(f"({_PAPERS_HINT})")
        if args.list:
            return 0
        print("fairopt bench: error: name a configuration above or a TOML file (fairopt bench NAME)", file=sys.stderr)
        return 2
    if args.config not in BUILTIN and not Path(args.config).is_file():
        raise ValueError(f"config: {args.config!r} is neither a built-in configuration (fairopt bench --list) "
                         f"nor a TOML file; {_PAPERS_HINT}")
    result = run_config(args.config, args.out or "fairopt_bench", epochs=args.epochs, seeds=args.seeds,
                        data_dir=args.data_dir, subsample=args.subsample)
    print(result.summary)
    print("wrote " + ", ".join(str(f) for f in result.files))


def _csv_arguments(p: Any) -> None:
    """How a CSV file writes its numbers (train --data, predict, report)."""
    p.add_argument("--sep", metavar="CHAR", help="the CSV's column separator (default: ',', or ';' when the header "
                                                  "has semicolons and no comma; tab for .tsv)")
    p.add_argument("--decimal", metavar="CHAR", help="the CSV's decimal mark, e.g. ',' for 0,5 (default '.')")
    p.add_argument("--thousands", metavar="CHAR", help="the CSV's thousands separator, e.g. ',' for 52,300 or '.' "
                                                       "for 52.300 (default: none)")


def _read_options(options: Any) -> dict:
    """``read_table``'s ``sep``, ``decimal`` and ``thousands`` from parsed flags or a config table."""
    get = options.get if isinstance(options, dict) else lambda key, default=None: getattr(options, key, default)
    return {"sep": get("sep"), "decimal": get("decimal") or ".", "thousands": get("thousands")}


def _train_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--config", help="TOML file with the options below as keys (flags override it)")
    source = p.add_argument_group("data", "one of --data (your own file) or --dataset (a built-in data set)")
    source.add_argument("--data", metavar="FILE", help="your own table: a .csv, .tsv or .parquet file")
    source.add_argument("--dataset", metavar="NAME", help="a built-in data set name (fairopt datasets)")
    source.add_argument("--data-dir", dest="data_dir", metavar="DIR",
                        help="directory with the built-in data set files (--dataset)")
    source.add_argument("--subsample", type=int, metavar="N",
                        help="use a subsample of this many rows, drawn with --seed")
    own = p.add_argument_group("columns", "of the --data file")
    own.add_argument("--target", metavar="COL",
                     help="the target column (two labels, or numbers for --task regression)")
    own.add_argument("--positive", metavar="LABEL",
                     help="the positive class of the target (default: the last label in sorted order)")
    own.add_argument("--sensitive", action="append", metavar="COL",
                     help="a sensitive column (repeatable); default: those the constraints name. Not a model input "
                          "unless --include-sensitive")
    own.add_argument("--include-sensitive", dest="include_sensitive", action="store_true", default=None,
                     help="make the sensitive columns model inputs too")
    own.add_argument("--ignore", action="append", metavar="COL",
                     help="a column that is not a model input, e.g. an id (repeatable)")
    own.add_argument("--weights", metavar="COL",
                     help="a column of row weights (>= 0): weighted loss and weighted group rates; not a model input")
    own.add_argument("--task", choices=["auto", "binary", "regression"],
                     help="default auto: binary for two labels, regression for numbers")
    _csv_arguments(own)
    p.add_argument("--constraint", action="append", metavar="SPEC",
                   help="constraint spec (repeatable): 'di:sex>=0.8', 'eodds:sex>=0.8', 'dp:sex<=0.05', "
                        "'disparate_impact:sex:0.8'; a regression's 'dcov:sex,region<=0.25x' (x: relative to the "
                        "training target's own measure; also gedi, ccdcov)")
    p.add_argument("--penalty", action="append",
                   help="penalty term for --method penalty, e.g. dp_squared:sex (--dataset only; such a run writes "
                        "model.pt, a network's weights, and report.txt instead of model.fairopt and report.md)")
    p.add_argument("--method", choices=["sqp", "penalty", "lagrangian", "moving_targets"])
    p.add_argument("--model", choices=["linear", "mlp", "gbm"],
                   help="default linear; gbm (boosted trees) takes missing input values as they are")
    p.add_argument("--hidden", help="MLP hidden widths, e.g. 32 or 64,32")
    p.add_argument("--epochs", type=int, metavar="N",
                   help="training epochs (moving_targets: epochs of each learner refit)")
    p.add_argument("--iterations", type=int, metavar="N", help="moving_targets: master iterations (default 10)")
    p.add_argument("--lr", type=float)
    p.add_argument("--alpha", type=float, help="L2 penalty alpha/2 ||w||^2 on the weights (default: the "
                                                "estimators', 3e-4 for a classifier, 0 for a regression)")
    p.add_argument("--batch-size", dest="batch_size", type=int)
    held = p.add_argument_group("held-out statements", "what the bounds say about new rows (docs: held-out)")
    held.add_argument("--margin", metavar="M", help="tighten every training bound by M (in the units of its rows), "
                                                   "or 'auto': by what a new sample's spread needs")
    held.add_argument("--validation-fraction", dest="validation_fraction", type=float, metavar="F",
                      help="hold out this share (above 0, at most 0.5) of the training rows for certificates "
                           "(with --margin auto: the certified candidates)")
    held.add_argument("--confidence", type=float, metavar="C",
                      help="confidence of the margin and the certificates (default 0.95)")
    p.add_argument("--weight", type=float, help="penalty weight (--method penalty)")
    p.add_argument("--optimizer", choices=["adam", "sgd", "adahessian"])
    p.add_argument("--dual-lr", dest="dual_lr", type=float)
    p.add_argument("--dual-update", dest="dual_update", choices=["ascent", "adam", "signed"])
    p.add_argument("--seed", type=int)
    p.add_argument("--test-size", dest="test_size", type=float, metavar="F",
                   help="held-out fraction (default 0.2; 0: none)")
    p.add_argument("--out", metavar="DIR", help="output directory (default fairopt_train)")
    p.add_argument("--quiet", action="store_true", help="no progress bar and nothing printed on success, only the "
                                                        "files written (warnings and errors still go to stderr)")


#: Options of ``train --data`` that the built-in ``--dataset`` mode does not take, and back.
_OWN_DATA_ONLY = ("target", "positive", "sensitive", "include_sensitive", "ignore", "weights", "task", "sep",
                  "decimal", "thousands")
_DATASET_ONLY = ("data_dir", "options")
#: Options of the estimators' training that the engine runner (:func:`fairopt.experiments.run_train`: the
#: ``--penalty`` terms of :mod:`fairopt.penalties`, a Poisson data set) does not take.
_ESTIMATORS_ONLY = ("alpha", "iterations", "margin", "validation_fraction", "confidence")
_NOT_OPTIONS = ("config", "command", "verbose", "verbose_after", "quiet", "argv")
#: Keys of ``train --data`` (flags or ``--config`` TOML keys).
_TABLE_KEYS = frozenset({"data", "dataset", "data_dir", "options", "subsample", "target", "positive", "sensitive",
                         "include_sensitive", "ignore", "weights", "task", "constraint", "penalty", "method", "model", "hidden",
                         "epochs", "iterations", "lr", "batch_size", "weight", "optimizer", "dual_lr", "dual_update",
                         "seed", "test_size", "alpha", "margin", "validation_fraction", "confidence", "sep", "decimal",
                         "thousands"})


@register("train", "train one model on your own CSV/parquet file (--data) or a built-in data set (--dataset); "
                   "writes the model, a report and the training history", _train_arguments)
def _train(args: argparse.Namespace) -> int:
    import tomllib
    from pathlib import Path

    options: dict = {}
    if args.config:
        if not Path(args.config).is_file():
            raise ValueError(f"--config: {args.config} is not a file")
        options = tomllib.loads(Path(args.config).read_text())
        _check_config_types(options)
        if "quiet" in options:  # a flag on the command line, a key like the others in the file
            args.quiet = args.quiet or options.pop("quiet")
    flags = {k: v for k, v in vars(args).items() if k not in _NOT_OPTIONS and v is not None}
    options.update(flags)
    out = options.pop("out", "fairopt_train")
    if "data" in options and "dataset" in options:
        raise ValueError("--data and --dataset: give one of them (your own file or a built-in data set)")
    if "data" not in options and "dataset" not in options:
        raise ValueError("train: give --data FILE (your own CSV or parquet file) or --dataset NAME (a built-in "
                         "data set, see fairopt datasets)")
    if "hidden" in options and options.get("model", "linear") != "mlp":
        raise ValueError(f"--hidden: only for --model mlp (not {options.get('model', 'linear')})")
    if "dataset" in options:
        given = [k for k in _OWN_DATA_ONLY if k in options]
        if given:
            raise ValueError(f"{_flag(given[0])}: only with --data FILE (your own table), not with --dataset "
                             "(a built-in data set names its own columns)")
    if "penalty" not in options:
        return _train_table(options, out, args)
    if "data" in options:
        raise ValueError("--penalty: only with --dataset (a built-in data set); with --data give --method penalty "
                         "and the bounds as --constraint")
    if options.get("method", "sqp") != "penalty":
        raise ValueError(f"--penalty: only for --method penalty (not {options.get('method', 'sqp')})")
    return _train_engine(options, out, args, "--penalty")


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _one_or_list(accepts: Callable[[Any], bool]) -> Callable[[Any], bool]:
    """A key that a repeatable flag sets: one value, or a list of them."""
    return lambda value: accepts(value) or (isinstance(value, list) and all(map(accepts, value)))


def _is_text(value: Any) -> bool:
    return isinstance(value, str)


def _is_spec(value: Any) -> bool:
    return isinstance(value, (str, dict))


#: ``--config`` keys whose TOML value takes other forms than their flag's text (a table, a list, a number):
#: key -> (the test of a value, what it must be).
_CONFIG_FORMS: dict[str, tuple[Callable[[Any], bool], str]] = {
    "sensitive": (_one_or_list(_is_text), "a column name or a list of column names (text)"),
    "ignore": (_one_or_list(_is_text), "a column name or a list of column names (text)"),
    "constraint": (_one_or_list(_is_spec), "a constraint spec (text or a table) or a list of them"),
    "penalty": (_one_or_list(_is_spec), "a penalty spec (text or a table) or a list of them"),
    "hidden": (lambda v: _is_text(v) or _one_or_list(_is_int)(v), "layer widths: an integer, a list of integers "
                                                                    "or text such as \"64,32\""),
    "margin": (lambda v: _is_text(v) or _is_number(v), "'auto' or a number"),
    "positive": (lambda v: isinstance(v, (str, int, float)), "a label (text, a number or true/false)"),
    "options": (lambda v: isinstance(v, dict), "a table of the data set's load options"),
}


def _flag_form(action: argparse.Action) -> tuple[Callable[[Any], bool], str]:
    """The test and description of a TOML value for the flag ``action`` (its type, choices, on/off switch)."""
    if action.nargs == 0:  # --quiet, --include-sensitive
        return (lambda v: isinstance(v, bool)), "true or false"
    if action.choices:
        return (lambda v: v in action.choices), "one of " + ", ".join(f"{c!r}" for c in action.choices)
    if action.type is int:
        return _is_int, "an integer"
    if action.type is float:
        return _is_number, "a number"
    return _is_text, "text (a quoted string)"


def _check_config_types(options: dict) -> None:
    """Each ``--config`` value of a known key has the type its flag takes (``epochs = 2.5`` is no integer,
    ``batch_size = true`` no batch size, ``sensitive = 3`` no column name): a ValueError naming the key, at
    read time, rather than a crash or a silently converted value later. Unknown keys are reported later."""
    parser = argparse.ArgumentParser(add_help=False)
    _train_arguments(parser)
    forms = {a.dest: _flag_form(a) for a in parser._actions}  # argparse has no public list of a parser's options
    forms.update(_CONFIG_FORMS)
    for key, value in options.items():
        if key in forms and not forms[key][0](value):
            raise ValueError(f"--config: {key!r} must be {forms[key][1]}, got {value!r}")


def _train_engine(options: dict, out: str, args: argparse.Namespace, why: str, data=None) -> int:
    """A built-in data set through the experiments' engine runner (:func:`fairopt.experiments.run_train`):
    penalty terms, and the tasks the estimators do not train (a Poisson rate with its exposure). ``why``
    names the reason in the errors of the options the runner does not take; ``data``: the rows, where
    they are loaded already."""
    if options.get("model") == "gbm":
        raise ValueError(f"--model gbm: not with {why}; give --model linear or mlp")
    given = [k for k in _ESTIMATORS_ONLY if k in options]
    if given:
        raise ValueError(f"{_flag(given[0])}: not with {why} (its training takes --epochs, --lr, --batch-size, "
                         "--optimizer and --weight)")
    from fairopt.experiments.configs import run_train

    result = run_train(options, out, data=data)
    if not args.quiet:
        print(result["report"])
        print(f"{options.get('method', 'sqp')} on {options['dataset']}: status {result['status']} "
              f"({result['seconds']:.1f} s). {result['status_message']}")
        print(f"wrote {out}")
    return 0


def _flag(key: str) -> str:
    return "--" + key.replace("_", "-")


def _list(value) -> list:
    if value is None:
        return []
    return [value] if isinstance(value, str) else list(value)


def _train_table(options: dict, out: str, args: argparse.Namespace) -> int:
    """``fairopt train --data FILE`` or ``--dataset NAME`` (without ``--penalty``): the estimators' fit of
    :func:`fairopt.tabular.train_table`, with their defaults, saved as ``model.fairopt`` with its report."""
    from pathlib import Path

    from fairopt import tabular

    unknown = sorted(set(options) - _TABLE_KEYS)
    if unknown:
        raise ValueError(f"--config: unknown key(s) {unknown}; allowed: {sorted(_TABLE_KEYS | {'out', 'quiet'})}")
    given = [k for k in _DATASET_ONLY if k in options and "data" in options]
    if given:
        raise ValueError(f"{_flag(given[0])}: only with --dataset (a built-in data set), not with --data")
    method = options.get("method", "sqp")
    engine = {}
    if "weight" in options:
        if method != "penalty":
            raise ValueError(f"--weight: only for --method penalty (not {method})")
        engine["weight"] = float(options["weight"])
    if "optimizer" in options:
        if method not in ("penalty", "lagrangian"):
            raise ValueError(f"--optimizer: only for --method penalty or lagrangian (not {method})")
        engine["optimizer"] = options["optimizer"]
    for key in ("dual_lr", "dual_update"):
        if key in options:
            if method != "lagrangian":
                raise ValueError(f"{_flag(key)}: only for --method lagrangian (not {method})")
            engine[key] = options[key]
    hidden = _hidden(options.get("hidden", "32"))
    common = dict(constraints=_list(options.get("constraint")), method=method, model=options.get("model", "linear"),
                  hidden=hidden, epochs=options.get("epochs"), lr=options.get("lr"),
                  batch_size=options.get("batch_size"), iterations=options.get("iterations"),
                  alpha=options.get("alpha"), margin=_margin(options.get("margin", 0.0)),
                  validation_fraction=options.get("validation_fraction"),
                  confidence=float(options.get("confidence", 0.95)),
                  test_size=float(options.get("test_size", 0.2)), seed=int(options.get("seed", 0)),
                  engine_params=engine, progress=not args.quiet, command=tabular.command_line(args.argv))
    if "data" in options:
        path = Path(options["data"])
        frame = tabular.read_table(path, **_read_options(options))
        frame = _subsample(frame, options.get("subsample"), options.get("seed", 0))
        trained = tabular.train_table(
            frame, target=_required(options, "target"), sensitive=_list(options.get("sensitive")),
            task=options.get("task", "auto"), positive=options.get("positive"),
            include_sensitive=bool(options.get("include_sensitive", False)), ignore=_list(options.get("ignore")),
            weights=options.get("weights"), source=path.name, **common)
    else:  # a built-in data set through the same pipeline, with the columns its loader names
        from fairopt.experiments.configs import load_data

        data = load_data({"dataset": options["dataset"], "options": options.get("options", {}),
                          **({"subsample": options["subsample"]} if "subsample" in options else {})},
                         options.get("data_dir"))
        if data.task not in ("binary", "regression"):  # a Poisson rate: the estimators take no exposure
            return _train_engine(options, out, args, f"--dataset {options['dataset']} (a {data.task} target with "
                                 "its exposure, which the engine's runner trains)", data=data)
        frame = data.frame.reset_index(drop=True)
        used = {data.target_name, *data.feature_columns}
        if data.include_sensitive:
            used |= set(data.sensitive_names)
        # the columns the constraints name are the sensitive ones (a loader's input column, e.g. Adult's
        # race, then leaves the inputs), as with --data; without a constraint, the loader's. The loader's
        # sensitive columns that no constraint names stay out of the inputs (ignored), as the loader has them
        sensitive = [] if common["constraints"] else list(data.sensitive_names)
        named = _constraint_columns(common["constraints"])
        trained = tabular.train_table(
            frame, target=data.target_name, sensitive=sensitive, include_sensitive=data.include_sensitive,
            ignore=[c for c in frame.columns if c not in used and c not in named],
            categorical=list(data.preprocessor.categorical_), sensitive_kinds=dict(data.sensitive_kinds),
            task="binary" if data.task == "binary" else "regression", source=str(options["dataset"]), **common)
    files = tabular.write_run(trained, out)
    meta = trained.metadata
    if not args.quiet:
        for notice in trained.notices:
            print(notice)
        print(f"{meta['method']} on {meta['source']}: status {meta['status']} ({trained.seconds:.1f} s). "
              f"{meta['status_message']}")
        for rows, lines in tabular.bound_parts(trained):
            print(f"{rows}: " + "; ".join(lines))
        for certificate in getattr(trained.estimator, "certificate_", None) or []:
            print(f"certificate: {certificate}")
        print("wrote " + ", ".join(str(f) for f in files))
    return 0


def _margin(value) -> float | str:
    """``--margin``: ``auto`` or a number (a TOML file may give either)."""
    if isinstance(value, str) and value.strip().lower() == "auto":
        return "auto"
    try:
        return float(value)
    except (TypeError, ValueError):
        raise ValueError(f"--margin: expected 'auto' or a number >= 0, got {value!r}") from None


def _constraint_columns(specs: list) -> list[str]:
    """The sensitive columns the constraint specs name; none where a spec does not parse (the training
    reports that spec with its flag)."""
    from fairopt.inputs import constraint_sensitive_names
    from fairopt.specs import resolve_constraints

    try:
        return constraint_sensitive_names(resolve_constraints(list(specs)))
    except ValueError:
        return []


def _required(options: dict, key: str) -> str:
    if options.get(key) is None:
        raise ValueError(f"{_flag(key)}: required with --data (the column to predict)")
    return options[key]


def _hidden(hidden) -> tuple[int, ...]:
    if isinstance(hidden, int):
        return (hidden,)
    if isinstance(hidden, str):
        try:
            widths = tuple(int(h) for h in hidden.split(",") if h.strip())
        except ValueError:
            raise ValueError(f"--hidden: expected comma-separated layer widths, e.g. 64,32; got {hidden!r}") from None
    else:
        widths = tuple(int(h) for h in hidden)
    if not widths or min(widths) < 1:
        raise ValueError(f"--hidden: expected positive layer widths, got {hidden!r}")
    return widths


def _subsample(frame, subsample, seed: int = 0):
    """``subsample`` rows of ``frame`` drawn without replacement with ``--seed`` (in file order), or all rows."""
    if subsample is None or subsample >= len(frame):
        return frame
    if isinstance(subsample, bool) or not isinstance(subsample, int) or subsample < 2:
        raise ValueError(f"--subsample: expected an integer >= 2, got {subsample!r}")
    import numpy as np

    rows = np.sort(np.random.default_rng(int(seed)).choice(len(frame), size=subsample, replace=False))
    return frame.iloc[rows].reset_index(drop=True)


def _predict_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("model", metavar="MODEL", help="model.fairopt written by fairopt train --data (or its directory)")
    p.add_argument("--data", required=True, metavar="FILE", help="rows to predict: a .csv, .tsv or .parquet file")
    p.add_argument("--out", required=True, metavar="FILE",
                   help="output CSV (prediction, score per row, in input order); - for standard output")
    p.add_argument("--id-column", dest="id_column", metavar="COL", help="a column of --data copied to the output")
    p.add_argument("--strict-columns", dest="strict_columns", action="store_true",
                   help="refuse columns the model does not use (default: ignore them, logged)")
    _csv_arguments(p)


def _model_and_rows(args: argparse.Namespace) -> tuple:
    """The table model of ``args.model`` and the rows of ``args.data`` (its text columns read
    as text), with the path of the rows."""
    from fairopt import tabular

    table = tabular.load_table_model(args.model)
    path = Path(args.data)
    return table, path, tabular.read_table(path, text_columns=table.text_columns, **_read_options(args))


def _check_out_file(out: str, example: str) -> None:
    """``--out FILE`` of predict and report, checked before the rows are read and the work is done (which a
    bad path would lose after the fact): not a directory, in a folder that exists. ``example``: a file name
    the message suggests."""
    path = Path(out)
    if path.is_dir():
        raise ValueError(f"--out: {out!r} is a directory; give a file name such as {example}")
    if not path.parent.is_dir():
        raise ValueError(f"--out: the folder {str(path.parent)!r} of {out!r} does not exist; create it first")


@register("predict", "predict the rows of a CSV/parquet file with a model from fairopt train --data",
          _predict_arguments)
def _predict(args: argparse.Namespace) -> int:
    from fairopt import tabular

    out = Path(args.out)
    if args.out != "-":
        _check_out_file(args.out, "predictions.csv")
    table, path, frame = _model_and_rows(args)
    predictions = tabular.predict_table(table, frame, source=path.name, strict=args.strict_columns,
                                        id_column=args.id_column)
    if args.out == "-":
        predictions.to_csv(sys.stdout, index=False)
        return 0
    predictions.to_csv(out, index=False)
    counts = ""
    if table.task == "binary":
        tally = predictions["prediction"].value_counts()
        counts = " (" + ", ".join(f"{label}: {int(tally.get(label, 0))}" for label in table.classes) + ")"
    print(f"wrote {len(predictions)} predictions to {out}{counts}")
    return 0


def _report_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("model", metavar="MODEL", help="model.fairopt written by fairopt train --data (or its directory)")
    p.add_argument("--data", required=True, metavar="FILE", help="rows with the target: a .csv, .tsv or .parquet file")
    p.add_argument("--target", metavar="COL", help="the target column (default: the model's)")
    p.add_argument("--sensitive", action="append", metavar="COL",
                   help="a column whose groups to compare (repeatable; default: the model's sensitive columns)")
    p.add_argument("--n-bootstrap", dest="n_bootstrap", type=int, default=1000,
                   help="bootstrap replicates of the confidence intervals (default 1000; 0: none)")
    p.add_argument("--seed", type=int, default=0, help="seed of the bootstrap")
    p.add_argument("--out", metavar="FILE", help="also write the report to this markdown file")
    _csv_arguments(p)


@register("report", "per-group report (markdown) of a model from fairopt train --data on a CSV/parquet file",
          _report_arguments)
def _report(args: argparse.Namespace) -> int:
    from fairopt import tabular

    if args.out:
        _check_out_file(args.out, "report.md")
    table, path, frame = _model_and_rows(args)
    text = tabular.report_table(table, frame, source=path.name, target=args.target, sensitive=args.sensitive or (),
                                n_bootstrap=args.n_bootstrap, seed=args.seed)
    print(text, end="")
    if args.out:
        Path(args.out).write_text(text)
    return 0


def build_parser() -> argparse.ArgumentParser:
    """The ``fairopt`` argument parser: one subcommand per :func:`register`-ed command, with its options."""
    parser = argparse.ArgumentParser(prog="fairopt", description="Train models under hard fairness constraints.")
    parser.add_argument("-v", "--verbose", action="count", default=0, help="more logging (-v info, -vv debug)")
    sub = parser.add_subparsers(dest="command", required=True)
    parser.command_parsers = {}
    for name, (help_text, add_arguments, _) in COMMANDS.items():
        parser.command_parsers[name] = sub.add_parser(name, help=help_text, description=help_text)
        add_arguments(parser.command_parsers[name])
        # after the command too (fairopt predict ... -v), as the guides write it; counted apart and added to the
        # count before the command (fairopt -v train -v is -vv)
        parser.command_parsers[name].add_argument("-v", "--verbose", action="count", dest="verbose_after", default=0,
                                                  help="more logging (-v info, -vv debug)")
    return parser


#: Exceptions that report a user's mistake (bad flag value, constraint spec, data or config
#: file, missing optional package): one line ``error: ...`` and exit status 2, as argparse
#: does for bad flags. Anything else is a bug and keeps its traceback.
USER_ERRORS: tuple[type[BaseException], ...] = (ValueError, OSError, ImportError, KeyError)


def _one_line(exc: BaseException) -> str:
    text = str(exc.args[0]) if isinstance(exc, KeyError) and exc.args else str(exc)
    return " ".join(text.split()) or type(exc).__name__


#: Parameter names of the library that a command's flag sets under another name.
_ALIASES = {"constraints": "constraint", "sensitive_features": "sensitive", "name": "dataset"}


def _flags_of(parser: argparse.ArgumentParser, command: str) -> dict[str, str]:
    """``dest -> --flag`` of the long options of ``command``'s parser."""
    sub = getattr(parser, "command_parsers", {}).get(command)
    if sub is None:
        return {}
    return {a.dest: next(o for o in a.option_strings if o.startswith("--"))
            for a in sub._actions  # argparse has no public list of a parser's options
            if any(o.startswith("--") for o in a.option_strings) and a.dest != "help"}


def _user_message(exc: Exception, flags: dict[str, str], command: str = "train") -> str:
    """The one line a user's mistake prints: a constraint naming a sensitive feature the data lacks is about
    ``--constraint`` (:class:`fairopt.exceptions.UnknownSensitiveError`), a part without a weighted version
    given ``--weights`` about that flag (:class:`fairopt.exceptions.UnweightedOnlyError`), both worded here without
    the library's advice for Python callers; any other message with its parameter names spelled as the
    command's flags."""
    from fairopt.exceptions import UnknownSensitiveError, UnweightedOnlyError

    if isinstance(exc, UnknownSensitiveError):
        if command == "bench":  # a configuration's [[methods]] key, not a flag
            return (f"constraint: names an unknown sensitive feature {exc.name!r}; available: {exc.available}. "
                    "Name one of them in the method's constraint (or penalty) key, or load the data set with that "
                    "attribute ([data] options = {sensitive = [...]})")
        return (f"--constraint: names an unknown sensitive feature {exc.name!r}; available: {exc.available}. Name "
                "one of them in --constraint, or with --data add the column with --sensitive")
    if isinstance(exc, UnweightedOnlyError):
        return (f"--weights: {exc.who} does not take row weights yet; train without --weights, or use a "
                "constraint that has a weighted version (the group rates: di, dp, eo, eodds, ...; covariance)")
    return _flag_spelling(_one_line(exc), flags)


#: Advice the library words for Python callers -> the same advice on the command line (regular expressions,
#: applied in order by :func:`_flag_spelling`).
_CLI_PHRASES: tuple[tuple[str, str], ...] = (
    (r"^sensitive: (\[.*?\]) is continuous and has no groups; use Covariance for a continuous attribute",
     r"constraint: \1 is continuous and has no groups; bound it with covariance, gedi or dcov "
     r"(e.g. covariance:COLUMN<=0.05)"),
    (r"leave batch_size None, got", "leave --batch-size out, got"),
    (r"a numeric margin with sample_weight", "a numeric --margin with --weights"),
    (r"\(read the file with pandas\.read_csv\(\.\.\., skipinitialspace=True\), or strip them\)",
     "(give the label with its spaces, quoted, or strip them in the file)"),
)


def _flag_spelling(text: str, flags: dict[str, str]) -> str:
    """A message with the parameter names it gives spelled as the command's flags:
    ``data_dir=...`` -> ``--data-dir ...``, a leading ``dest:`` -> ``--flag:``,
    ``'dataset' is required`` -> ``--dataset is required``, and the Python advice of :data:`_CLI_PHRASES` as
    the command line's."""
    import re

    for pattern, replacement in _CLI_PHRASES:
        text = re.sub(pattern, replacement, text)
    names = {**flags, **{alias: flags[dest] for alias, dest in _ALIASES.items() if dest in flags}}
    for name, flag in sorted(names.items(), key=lambda item: -len(item[0])):
        text = re.sub(rf"^{re.escape(name)}:", f"{flag}:", text)
        text = re.sub(rf"(?<![\w-]){re.escape(name)}=", f"{flag} ", text)
        text = text.replace(f"'{name}' is required", f"{flag} is required")
    return text


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``fairopt`` console script (and ``python -m fairopt``); returns the
    exit status: 0 on success, 2 for a user's mistake (one line ``error: ...`` on stderr; the
    traceback only with ``-vv``). Parameter names in those messages are spelled as the
    command's flags (``--data-dir``, not ``data_dir``)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser()
    args = parser.parse_args(argv)
    args.argv = argv
    args.verbose += getattr(args, "verbose_after", 0)
    level = [logging.WARNING, logging.INFO, logging.DEBUG][min(args.verbose, 2)]
    logging.basicConfig(level=level, format="%(levelname)s %(name)s: %(message)s")
    _, _, run = COMMANDS[args.command]
    once = _OncePerMessage()
    data_logger = logging.getLogger("fairopt.data")  # the inputs' messages, repeated by each encoding of the rows
    data_logger.addFilter(once)
    try:
        return int(run(args) or 0)
    except BrokenPipeError:  # the reader went away (fairopt report ... | head): stop quietly
        import os

        try:  # no second error when Python flushes stdout at exit
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        except (OSError, ValueError, AttributeError):
            pass
        return 141  # 128 + SIGPIPE, as a shell reports a command killed by a closed pipe
    except USER_ERRORS as exc:
        if args.verbose >= 2:
            raise
        message = _user_message(exc, _flags_of(parser, args.command), args.command)
        print(f"fairopt {args.command}: error: {message}", file=sys.stderr)
        return 2
    finally:
        data_logger.removeFilter(once)


class _OncePerMessage(logging.Filter):
    """Lets each distinct message through once: a command encodes the same rows several times (the held-out
    evaluation, the report), and an unseen level was logged once per encoding."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: set[str] = set()

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        if message in self.seen:
            return False
        self.seen.add(message)
        return True


if __name__ == "__main__":
    sys.exit(main())
