"""The fair ridge paper's experiment settings and its real data sets as arrays
(:mod:`benchmarks.papers.fair_ridge`)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np
import pandas as pd

R_GRID = (0.0, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5)  # [FR] sec. 5.1
PROFILE_R = (0.0, 0.005, 0.01, 0.02, 0.05, 0.1, 0.15, 0.2, 0.25, 0.3, 0.35, 0.4, 0.5, 0.6, 0.7, 0.8, 0.85, 0.9,
             0.95, 1.0)

# What the paper's text says in numbers (its Figs. 1-9 are images in the available text).
PAPER_FIG1 = {0.01: "3-5%", 0.02: "3-5%", 0.05: "(between)", 0.1: "up to 16%"}
PAPER_R2S_OLS = 0.85  # sec. 3: NCLM's coefficients "stop changing once r >= 0.85"
PAPER_F1_RANGE = {"adult": (0.6141, 0.6489), "compas": (0.6891, 0.7029)}  # sec. 5.3: FGRRM over all r
PAPER_FAIRLEARN_F1 = {"adult": 0.5805, "compas": 0.6787}  # sec. 5.3: fairlearn EG, eps = 0.1 (not run here)
PAPER_ROWS = {"communities": "810 obs, 101 predictors", "compas": "5855 obs, 13 predictors",
              "law": "20,800 obs (fairml)", "adult": "30162 obs, 14 predictors"}
MISSING = {"linear": ["NLSY (National Longitudinal Survey of Youth)", "GCR (German Credit)"],
           "logistic": ["BANK (bank marketing)"]}


@dataclass(frozen=True)
class Settings:
    """What :func:`run` runs (:data:`FULL` and :data:`QUICK`)."""

    example_n: int = 2000
    example_seed: int = 0
    profile_r: tuple[float, ...] = PROFILE_R
    bias_r: tuple[float, ...] = (0.01, 0.02, 0.05, 0.1)
    bias_lambdas: tuple[float, ...] = tuple(float(v) for v in np.logspace(-4, 1, 26))  # times n
    bias_folds: int = 10
    linear_datasets: tuple[str, ...] = ("communities", "compas", "law")
    logistic_datasets: tuple[str, ...] = ("adult", "compas")
    r_grid: tuple[float, ...] = R_GRID
    folds: int = 10
    runs: int = 50
    logistic_folds: int = 10
    logistic_runs: int = 2
    seeds: tuple[int, ...] | None = None  # shuffle seeds of the CV runs (None: 0, 1, ..., runs - 1)
    subsample: int | None = None
    zlm_qp_check: bool = True

    def run_seeds(self, logistic: bool = False) -> list[int]:
        """The shuffle seeds of the CV runs (one per run)."""
        if self.seeds is not None:
            return list(self.seeds)
        return list(range(self.logistic_runs if logistic else self.runs))


#: the paper's protocol for the linear models (50 runs of 10-fold CV); 2 runs for the
#: logistic ones (50 would take about 4 hours on one core: FGRRM and ZLRM need 2-4 s per fit on ADULT)
FULL = Settings()
#: ``--quick``: Example 1 in full, one run of 10-fold CV (linear) and of 5-fold CV (logistic)
QUICK = Settings(runs=1, logistic_runs=1, folds=10, logistic_folds=5)



# ----------------------------------------------------------------------------- real data
def _standardise(frame: pd.DataFrame) -> np.ndarray:
    values = frame.to_numpy(dtype=float)
    sd = values.std(axis=0)
    return (values - values.mean(axis=0)) / np.where(sd > 0, sd, 1.0)


def subsample_rows(arrays: tuple[np.ndarray, ...], size: int | None) -> tuple[np.ndarray, ...]:
    n = len(arrays[0])
    if size is None or size >= n:
        return arrays
    rows = np.sort(np.random.default_rng(0).choice(n, size=size, replace=False))
    return tuple(a[rows] for a in arrays)


def load_communities(data_dir: Any = None) -> tuple[np.ndarray, np.ndarray, np.ndarray, list[str]]:
    """C&C: X (100 standardised predictors), S = (pctBlack, pctForeignBorn), y = min-max normalised violentPerPop."""
    from fairopt import datasets

    frame, _ = datasets.load_frame("communities", data_dir=data_dir)
    sensitive = ["pctBlack", "pctForeignBorn"]
    features = [c for c in frame.columns if c not in {"violentPerPop", "race", *sensitive}]
    y = frame["violentPerPop"].to_numpy(dtype=float)
    y = (y - y.min()) / (y.max() - y.min())
    return _standardise(frame[features]), frame[sensitive].to_numpy(dtype=float), y, sensitive


def _data_file(names: Sequence[str], data_dir: Any) -> Path:
    """The first of ``names`` in ``data_dir``, ``$FAIROPT_DATA`` or the user data directory
    (the lookup order of :mod:`fairopt.datasets`)."""
    import os

    from fairopt import datasets

    places = [data_dir, os.environ.get(datasets.ENV_VAR), datasets.user_data_dir()]
    for place in places:
        for name in names if place else ():
            if (Path(place).expanduser() / name).is_file():
                return Path(place).expanduser() / name
    raise FileNotFoundError(f"none of {list(names)} in the data directories searched ({places[0]!s}, "
                            f"${datasets.ENV_VAR}, {places[2]})")


COMPAS_FAIRML = ["age", "juv_fel_count", "decile_score", "juv_misd_count", "juv_other_count", "v_decile_score",
                 "priors_count", "c_jail_in", "c_jail_out", "c_offense_date", "screening_date", "in_custody",
                 "out_custody"]


def compas_fairml_frame(data_dir: Any = None) -> pd.DataFrame:
    """ProPublica's two-year COMPAS file reduced to the ``fairml`` copy of [FR]: its 13
    predictors, ``sex``, ``race`` and ``two_year_recid``, rows complete on them (5,855);
    dates as days, min-max normalised to [0, 1] as in ``fairml``."""
    raw = pd.read_csv(_data_file(("compas-scores-two-years.csv.gz", "compas-scores-two-years.csv"), data_dir))
    frame = raw[COMPAS_FAIRML + ["sex", "race", "two_year_recid"]].dropna().reset_index(drop=True)
    for column in ("c_jail_in", "c_jail_out", "c_offense_date", "screening_date", "in_custody", "out_custody"):
        days = pd.to_datetime(frame[column]).astype("int64") / 86_400e9
        frame[column] = (days - days.min()) / (days.max() - days.min())
    return frame


def load_compas(data_dir: Any = None) -> tuple[np.ndarray, np.ndarray, np.ndarray, list[str]]:
    """COMPAS (fairml columns): X (13 standardised), S = (male, race one-hot x 5), y = two_year_recid."""
    frame = compas_fairml_frame(data_dir)
    # drop the reference level (African-American): with all 6 indicators the covariance rows of
    # ZLM are linearly dependent and its SQP's QP fails at bound 0 (status 'numerical')
    race = pd.get_dummies(frame["race"], prefix="race", dtype=float, drop_first=True)
    S = pd.concat([(frame["sex"] == "Male").astype(float).rename("male"), race], axis=1)
    y = frame["two_year_recid"].to_numpy(dtype=float)
    return _standardise(frame[COMPAS_FAIRML]), S.to_numpy(), y, list(S.columns)


LAW_PREDICTORS = ["decile1b", "decile3", "fam_inc", "lsat", "male", "tier", "fulltime", "pass_bar"]


def load_law(data_dir: Any = None) -> tuple[np.ndarray, np.ndarray, np.ndarray, list[str]]:
    """LSAC: y = ugpa, S = race (White = 1), X = the fairml predictors available here."""
    from fairopt import datasets

    frame, _ = datasets.load_frame("law", data_dir=data_dir)
    S = (frame[["race"]] == "White").astype(float)
    return _standardise(frame[LAW_PREDICTORS]), S.to_numpy(), frame["ugpa"].to_numpy(dtype=float), ["race_white"]


def load_adult(data_dir: Any = None) -> tuple[np.ndarray, np.ndarray, np.ndarray, list[str]]:
    """ADULT: y = income > 50K, S = (male, age), X = the other columns but fnlwgt (one-hot, standardised)."""
    from fairopt import datasets

    frame, _ = datasets.load_frame("adult", data_dir=data_dir)
    S = np.column_stack([(frame["sex"] == "Male").astype(float), frame["age"].astype(float)])
    X = pd.get_dummies(frame.drop(columns=["income", "sex", "age", "fnlwgt"]), drop_first=True, dtype=float)
    return _standardise(X), S, frame["income"].to_numpy(dtype=float), ["male", "age"]


LINEAR_LOADERS: dict[str, Callable] = {"communities": load_communities, "compas": load_compas, "law": load_law}
LOGISTIC_LOADERS: dict[str, Callable] = {"adult": load_adult, "compas": load_compas}
LABELS = {"communities": "C&C", "compas": "COMPAS", "law": "LSAC", "adult": "ADULT"}


