"""Benchmark data sets of the fairness literature, read from local files and verified.

Each data set has one reader, ``<name>_frame(data_dir=None, ...)``, that returns the cleaned
raw rows as a DataFrame (row counts checked against the literature), and a default
:meth:`fairopt.data.FairData.from_frame` specification (target, sensitive features, inputs,
categorical columns, task) that :func:`load` applies. The readers' docstrings give the
source, licence, target, protected attributes and encoding choices.

Files are looked up in the ``data_dir`` argument, then ``$FAIROPT_DATA``, then the user data
directory (``~/.local/share/fairopt`` on Linux, see :func:`fairopt.datasets.user_data_dir`);
UCI Adult is also embedded in the package. Nothing is downloaded.
"""

from __future__ import annotations

import inspect
import logging
import os
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Sequence

import numpy as np
import pandas as pd

from fairopt.data import FairData
from fairopt.datasets._paths import find_data_file, open_data_file

__all__ = [
    "load",
    "load_frame",
    "available",
    "describe",
    "locate",
    "DATA_FILES",
    "adult_frame",
    "dutch_frame",
    "law_frame",
    "acsincome_frame",
    "communities_frame",
    "compas_frame",
    "pg15training_frame",
]

logger = logging.getLogger(__name__)

PathLike = str | os.PathLike | None

#: keyword arguments of :meth:`FairData.from_frame` that :func:`load` accepts as overrides
FROM_FRAME_ARGUMENTS = (
    "target", "sensitive", "features", "categorical", "task", "exposure",
    "sensitive_kinds", "include_sensitive", "preprocessor",
)


# --------------------------------------------------------------------------------------
# shared reading and checking helpers
# --------------------------------------------------------------------------------------
def _read_csv(dataset: str, filenames: Sequence[str], data_dir: PathLike, embedded: bool = False,
              **read_options: Any) -> tuple[pd.DataFrame, str]:
    """Read the first of ``filenames`` found (see :mod:`fairopt.datasets._paths`).

    Returns the frame and the path it was read from (for error messages).
    """
    with open_data_file(dataset, filenames, data_dir, embedded=embedded) as path:
        logger.info("dataset %r: reading %s", dataset, path)
        frame = pd.read_csv(path, **read_options)
    return frame, str(path)


def _check_rows(dataset: str, frame: pd.DataFrame, expected: int, stage: str, source: str) -> None:
    """ValueError with expected vs got when a row count differs from the published one."""
    if len(frame) != expected:
        where = f" {stage}" if stage else ""
        raise ValueError(
            f"dataset {dataset!r}: expected {expected:,} rows{where}, got {len(frame):,} "
            f"(file {source}); the file is not the version fairopt expects"
        )


def _require_columns(dataset: str, frame: pd.DataFrame, columns: Sequence[str], source: str) -> None:
    """ValueError naming the columns a data file lacks."""
    missing = [c for c in columns if c not in frame.columns]
    if missing:
        raise ValueError(f"dataset {dataset!r}: file {source} lacks columns {missing}")


def _recode(dataset: str, series: pd.Series, mapping: Mapping[Any, Any]) -> pd.Series:
    """Map values through ``mapping``; ValueError listing values outside it."""
    unknown = sorted(set(series.unique().tolist()) - set(mapping), key=str)
    if unknown:
        raise ValueError(f"dataset {dataset!r}: column {series.name!r} has unexpected values {unknown[:10]}")
    return series.map(mapping)


# --------------------------------------------------------------------------------------
# Adult
# --------------------------------------------------------------------------------------
ADULT_COLUMNS = [
    "age", "workclass", "fnlwgt", "education", "education-num", "marital-status", "occupation",
    "relationship", "race", "sex", "capital-gain", "capital-loss", "hours-per-week", "native-country", "income",
]
ADULT_FEATURES = [
    "age", "workclass", "fnlwgt", "education-num", "marital-status", "occupation", "relationship",
    "race", "sex", "capital-gain", "capital-loss", "hours-per-week",
]
#: (file names, raw rows, rows without '?') of the two UCI files
ADULT_PARTS = {
    "train": (("adult.data.gz", "adult.data"), 32_561, 30_162),
    "test": (("adult.test.gz", "adult.test"), 16_281, 15_060),
}
#: data set -> the file names its loader looks for, in order (Adult: the UCI training file)
DATA_FILES: dict[str, tuple[str, ...]] = {
    "adult": ADULT_PARTS["train"][0],
    "dutch": ("dutch.csv.gz", "dutch.csv"),
    "law": ("law_school.csv.gz", "law_school.csv", "law_school_clean.csv"),
    "acsincome": ("acsincome_colorado.csv.gz", "acsincome_colorado.csv"),
    "communities": ("communities.csv.gz", "communities.csv"),
    "compas": ("compas-scores-two-years.csv.gz", "compas-scores-two-years.csv"),
    "pg15training": ("pg15training.csv.gz", "pg15training.csv"),
}


def locate(name: str, data_dir: PathLike = None) -> str:
    """Where data set ``name`` would be read from: the path of the file found in the search
    directories (:func:`fairopt.datasets._paths.search_dirs`), "embedded" for UCI Adult when no
    file overrides it, or "not found" with the file names looked for."""
    _info(name)
    found = find_data_file(DATA_FILES[name], data_dir)
    if found is not None:
        return str(found)
    if name == "adult":
        return "embedded in the package"
    return "not found (looked for " + ", ".join(DATA_FILES[name]) + ")"


def _adult_part(part: str, data_dir: PathLike, keep_missing: bool = False) -> pd.DataFrame:
    """One UCI file: whitespace stripped, '.' dropped from test labels, '?' rows removed (or,
    with ``keep_missing``, kept with "?" as a level of their categorical columns)."""
    filenames, raw_rows, clean_rows = ADULT_PARTS[part]
    frame, source = _read_csv(
        "adult", filenames, data_dir, embedded=True, header=None, names=ADULT_COLUMNS,
        skipinitialspace=True, comment="|", na_values=["?"], keep_default_na=False,
    )
    _check_rows("adult", frame, raw_rows, f"in the UCI {part} file", source)
    for column in frame.columns:
        if not pd.api.types.is_numeric_dtype(frame[column]):
            frame[column] = frame[column].str.strip()
    if keep_missing:
        frame = frame.fillna("?")  # only the categorical workclass, occupation and native-country have '?'
    else:
        frame = frame.dropna().reset_index(drop=True)
        _check_rows("adult", frame, clean_rows, f"in the UCI {part} file after removing rows with '?'", source)
    labels = frame["income"].str.rstrip(".")
    frame["income"] = _recode("adult", labels, {"<=50K": 0, ">50K": 1}).astype(np.int64)
    return frame


def adult_frame(data_dir: PathLike = None, part: str = "train", keep_missing: bool = False) -> pd.DataFrame:
    """UCI Adult (Census Income): predict income > 50K.

    Source: UCI Machine Learning Repository, Becker & Kohavi (1996),
    https://archive.ics.uci.edu/dataset/2/adult. Licence: CC BY 4.0 - embedded in the
    package (``fairopt/datasets/_data``), so no data directory is needed.

    Cleaning, as in the literature: whitespace stripped, the test file's comment line
    skipped and the '.' of its labels removed, rows with a missing value ('?') dropped.
    ``part="train"`` (default) is ``adult.data`` only, 30,162 rows - the version of Zafar
    et al., the GeDI/Moving Targets experiments (their preprocessed ``adult.csv`` has the
    same rows in the same order) and the ridge-penalty paper; ``"test"`` is ``adult.test``
    (15,060 rows) and ``"all"`` both (45,222 rows, train first), e.g. for an own 80/20 split.
    ``keep_missing=True`` keeps the rows with a missing value, "?" being a level of their
    categorical column (32,561 / 16,281 / 48,842 rows), as the FaUCI experiments do.

    Target: ``income`` (1 iff >50K). Protected attributes: ``sex`` (default; binary,
    Female=0, Male=1 by sorted level order), ``race`` (categorical, 5 levels), ``age``
    (continuous). Inputs (as in the GeDI preprocessing): all columns except ``education``
    (a duplicate of ``education-num``) and ``native-country``; strings one-hot encoded,
    numbers standardised.
    """
    if part not in ("train", "test", "all"):
        raise ValueError(f"part: expected 'train', 'test' or 'all', got {part!r}")
    parts = ["train", "test"] if part == "all" else [part]
    if not isinstance(keep_missing, bool):
        raise ValueError(f"keep_missing: expected True or False, got {keep_missing!r}")
    frames = [_adult_part(p, data_dir, keep_missing) for p in parts]
    return pd.concat(frames, ignore_index=True) if len(frames) > 1 else frames[0]


# --------------------------------------------------------------------------------------
# Dutch census
# --------------------------------------------------------------------------------------
DUTCH_COLUMNS = [
    "sex", "age", "household_position", "household_size", "prev_residence_place", "citizenship",
    "country_birth", "edu_level", "economic_status", "cur_eco_activity", "marital_status", "occupation",
]
DUTCH_NOMINAL = [
    "household_position", "household_size", "prev_residence_place", "citizenship",
    "country_birth", "economic_status", "cur_eco_activity", "marital_status",
]
DUTCH_ROWS = 60_420


def dutch_frame(data_dir: PathLike = None) -> pd.DataFrame:
    """Dutch census 2001: predict the occupation class.

    Source: Dutch Virtual Census 2001 (IPUMS International), cleaned copy of the fairness
    data-set survey (Le Quy et al. 2022, repository tailequy/fairness_dataset, file
    ``dutch.csv``). Licence: IPUMS terms (research use, no redistribution) - not embedded;
    put ``dutch.csv.gz`` in the data directory. 60,420 rows.

    Target: ``occupation0`` = 1 iff ``occupation == 0``, the "Y=1" of the SQP paper's
    Table 1 (31,657 rows; the raw ``occupation`` column is kept in the frame but is not an
    input). Protected attribute: ``sex`` (binary, female=0, male=1 = "S=1", 30,147 rows;
    11,287 male with occupation 0, P(Y=1|S=1) = 0.3744, P(Y=1|S=0) = 0.6730).

    Encoding: the original ARFF declares every column nominal. ``age`` (12 five-year age
    bands, codes 4..15) and ``edu_level`` (education level 0..5, increasing attainment)
    are ordered bands, so they are treated as ordinal numbers (standardised): one-hot
    encoding would discard the order and add 16 sparse inputs for no gain. All other
    columns (household position/size, previous residence, citizenship, country of birth,
    economic status, current economic activity, marital status) are codes of unordered
    categories and are one-hot encoded. Inputs: the 11 columns other than the target, as
    in the SQP paper (sex included).
    """
    frame, source = _read_csv("dutch", DATA_FILES["dutch"], data_dir)
    _require_columns("dutch", frame, DUTCH_COLUMNS, source)
    _check_rows("dutch", frame, DUTCH_ROWS, "", source)
    frame["occupation0"] = (frame["occupation"] == 0).astype(np.int64)
    return frame


# --------------------------------------------------------------------------------------
# Law school
# --------------------------------------------------------------------------------------
LAW_FEATURES = ["decile1b", "decile3", "lsat", "ugpa", "zfygpa", "zgpa", "fulltime", "fam_inc", "male", "tier", "race"]
LAW_ADMISSION_FEATURES = ["lsat", "ugpa", "fulltime", "fam_inc", "male", "tier", "race"]
LAW_ROWS = 20_798


def law_frame(data_dir: PathLike = None) -> pd.DataFrame:
    """LSAC National Longitudinal Bar Passage Study ("Law School").

    Source: Wightman (1998), LSAC; cleaned copy ``law_school_clean.csv`` of the fairness
    data-set survey (tailequy/fairness_dataset). Licence: research use - not embedded; put
    ``law_school.csv.gz`` in the data directory. 20,798 rows, no missing values.

    Target: ``pass_bar`` (binary, default). Protected attributes: ``race`` (binary,
    Non-White=0, White=1, 17,491 White rows; under the SQP paper's 80/20 split 13,995 of
    16,638 training rows are White) and ``male`` (binary 0/1).
    Inputs for ``pass_bar``: the other columns; the SQP paper's 11 include ``race``, which ``load`` leaves out
    unless ``include_sensitive=True`` (the loaders' default keeps a protected attribute out of the inputs).

    Regression on the first-year grade: ``load("law", target="zfygpa")`` (or
    ``target="zgpa"``) switches to ``task="regression"`` and to the admission-time inputs
    ``lsat, ugpa, fulltime, fam_inc, male, tier, race``: ``decile1b``/``decile3`` (class
    rank in years 1 and 3), ``zgpa`` and ``pass_bar`` are measured after the first year
    and would leak the target.
    """
    frame, source = _read_csv("law", DATA_FILES["law"], data_dir)
    _require_columns("law", frame, LAW_FEATURES + ["pass_bar"], source)
    _check_rows("law", frame, LAW_ROWS, "", source)
    for column in ("pass_bar", "male"):
        frame[column] = frame[column].astype(np.int64)
    return frame


# --------------------------------------------------------------------------------------
# ACSIncome (Colorado)
# --------------------------------------------------------------------------------------
ACS_COLUMNS = ["AGEP", "COW", "SCHL", "MAR", "OCCP", "POBP", "RELP", "WKHP", "SEX", "RAC1P", "PINCP"]
ACS_NOMINAL = ["COW", "MAR", "RELP", "RAC1P"]
ACS_ROWS = 31_306


def acsincome_frame(data_dir: PathLike = None) -> pd.DataFrame:
    """Folktables ACSIncome task, Colorado 2018 extract: predict income > 50,000 USD.

    Source: American Community Survey PUMS 2018 via folktables (Ding et al. 2021), the
    Colorado extract of the public repository wvlid/app_sup. Licence: US public domain -
    not embedded (size); put ``acsincome_colorado.csv.gz`` in the data directory.
    31,306 rows. (The SQP paper samples 50,000 rows from California, not available here:
    report results as "ACSIncome (Colorado)".)

    Target: ``PINCP`` (already 0/1). Protected attributes: ``SEX`` (recoded from 1/2 to
    the labels Male/Female, so binary Female=0, Male=1) and ``RAC1P`` (race, 9 codes,
    categorical).

    Encoding: codes are stored as integers. ``AGEP`` (age), ``WKHP`` (hours per week) and
    ``SCHL`` (educational attainment 1..24, ordered) are numeric; ``OCCP`` (occupation,
    522 codes) and ``POBP`` (place of birth, 194 codes) are kept as numeric codes as in
    folktables and the SQP paper (10 inputs; the codes are grouped by occupation family
    and by region, and one-hot encoding would add ~700 sparse inputs); ``COW`` (class of
    worker), ``MAR`` (marital status), ``RELP`` (relationship) and ``RAC1P`` are unordered
    with few levels and are one-hot encoded.
    """
    frame, source = _read_csv("acsincome", DATA_FILES["acsincome"], data_dir)
    _require_columns("acsincome", frame, ACS_COLUMNS, source)
    _check_rows("acsincome", frame, ACS_ROWS, "", source)
    for column in ACS_COLUMNS:
        frame[column] = frame[column].astype(np.int64)
    frame["SEX"] = _recode("acsincome", frame["SEX"], {1: "Male", 2: "Female"})
    return frame


# --------------------------------------------------------------------------------------
# Communities and Crime
# --------------------------------------------------------------------------------------
COMMUNITIES_ROWS = 1_993


def communities_frame(data_dir: PathLike = None) -> pd.DataFrame:
    """UCI Communities and Crime (unnormalised): predict violent crimes per 100k people.

    Source: UCI Machine Learning Repository (Redmond 2009), the copy used by the GeDI paper
    (github giuluck/GeneralizedDisparateImpact @6b66b95, ``data/communities.csv``).
    Licence: CC BY 4.0 - not embedded (the GeDI copy's redistribution terms are
    unstated); put ``communities.csv.gz`` in the data directory. 1,993 rows.

    Target: ``violentPerPop`` (regression, raw scale). Protected attributes: ``race``
    (binary, 1 iff ``pctBlack > pctWhite``, 62 rows; checked on load) and ``pctBlack``
    (continuous, ``load("communities", sensitive=["pctBlack"])``).

    Encoding, following the GeDI code: columns with missing values are dropped (the GeDI
    copy has already dropped them; a raw file's incomplete columns are dropped here and
    logged); the other crime counts/rates are not in the file. Column names are
    stripped of whitespace (the original has ``'rentQrange '``). Inputs: every other
    column (all numeric, standardised); ``race`` only with ``load(..., include_sensitive=True)`` (the
    loaders' default keeps a protected attribute out of the inputs; ``pctBlack`` is an input unless it is
    the protected attribute).
    """
    frame, source = _read_csv("communities", DATA_FILES["communities"], data_dir)
    frame.columns = [str(c).strip() for c in frame.columns]
    _require_columns("communities", frame, ["violentPerPop", "pctBlack", "pctWhite"], source)
    incomplete = [c for c in frame.columns if frame[c].isna().any() and c != "violentPerPop"]
    if incomplete:
        logger.info("communities: dropping %d columns with missing values: %s", len(incomplete), incomplete)
        frame = frame.drop(columns=incomplete)
    frame = frame.dropna(subset=["violentPerPop"]).reset_index(drop=True)
    majority_black = (frame["pctBlack"] > frame["pctWhite"]).astype(np.int64)
    if "race" in frame.columns and not (frame["race"] == majority_black).all():
        raise ValueError("dataset 'communities': column 'race' is not 1 iff pctBlack > pctWhite")
    frame["race"] = majority_black
    _check_rows("communities", frame, COMMUNITIES_ROWS, "", source)
    return frame


# --------------------------------------------------------------------------------------
# COMPAS
# --------------------------------------------------------------------------------------
COMPAS_RAW_ROWS = 7_214
COMPAS_ROWS = 6_172
COMPAS_COLUMNS = [
    "sex", "race", "age", "age_cat", "c_charge_degree", "priors_count", "days_b_screening_arrest",
    "decile_score", "score_text", "length_of_stay", "two_year_recid",
]
COMPAS_FEATURES = ["sex", "race", "age", "c_charge_degree", "priors_count"]
COMPAS_SMALL_RACES = {"Asian": "Other", "Native American": "Other"}


def compas_frame(data_dir: PathLike = None, group_race: bool = True) -> pd.DataFrame:
    """ProPublica COMPAS recidivism data: predict re-offending within two years.

    Source: ProPublica compas-analysis (Angwin et al. 2016), commit bafff5d,
    ``compas-scores-two-years.csv`` (7,214 rows). Licence: ProPublica's public analysis
    data - not embedded; put ``compas-scores-two-years.csv.gz`` in the data directory.

    Filtering, exactly ProPublica's: ``days_b_screening_arrest`` within [-30, 30],
    ``is_recid != -1``, ``c_charge_degree != 'O'`` (ordinary traffic offences) and a known
    ``score_text`` -> 6,172 rows (checked). Derived: ``length_of_stay`` = calendar days
    from the date of ``c_jail_in`` to the date of ``c_jail_out`` (ProPublica's
    ``as.Date`` difference; with clock times 183 rows would be slightly negative).

    Target: ``two_year_recid``. Protected attributes: ``race`` (default; categorical),
    ``sex`` (binary, Female=0, Male=1) and ``age`` (continuous); the distance-covariance
    paper uses all three (``load("compas", sensitive=["sex", "race", "age"])``).
    ``group_race=True`` (default) merges Asian (31 rows), Native American (11) and Other
    into "Other" as in that paper: African-American, Caucasian, Hispanic, Other.

    Inputs (the distance-covariance paper's Table G.1): ``sex``, ``race``, ``age``,
    ``c_charge_degree`` (F/M, one-hot) and ``priors_count``. The frame also keeps the other
    columns usual in ProPublica-derived work (``age_cat``, ``days_b_screening_arrest``,
    ``length_of_stay``, ``decile_score``, ``score_text``) for ``features=[...]``;
    ``decile_score``/``score_text`` are the COMPAS score itself, so they are not inputs by
    default (the task is to predict recidivism, not to re-learn the audited tool).
    ``is_recid`` (any new offence, the target's source) only filters the rows and is not
    returned: as an input it would leak the target (test accuracy 0.92 with every column).
    """
    frame, source = _read_csv("compas", DATA_FILES["compas"], data_dir)
    raw_columns = [c for c in COMPAS_COLUMNS if c != "length_of_stay"] + ["is_recid", "c_jail_in", "c_jail_out"]
    _require_columns("compas", frame, raw_columns, source)
    _check_rows("compas", frame, COMPAS_RAW_ROWS, "in the raw file", source)
    keep = (
        frame["days_b_screening_arrest"].between(-30, 30)
        & (frame["is_recid"] != -1)
        & (frame["c_charge_degree"] != "O")
        & frame["score_text"].notna()
        & (frame["score_text"] != "N/A")
    )
    frame = frame.loc[keep].reset_index(drop=True)
    jail_in = pd.to_datetime(frame["c_jail_in"]).dt.normalize()
    jail_out = pd.to_datetime(frame["c_jail_out"]).dt.normalize()
    frame["length_of_stay"] = (jail_out - jail_in).dt.days.astype(np.int64)
    if group_race:
        frame["race"] = frame["race"].replace(COMPAS_SMALL_RACES)
    frame = frame[COMPAS_COLUMNS].copy()
    _check_rows("compas", frame, COMPAS_ROWS, "after ProPublica's filters", source)
    return frame


# --------------------------------------------------------------------------------------
# pg15training (CASdatasets)
# --------------------------------------------------------------------------------------
PG15_RAW_ROWS = 100_021
PG15_DUPLICATES = 21
PG15_ROWS = 100_000
PG15_FEATURES = ["Occupation", "Age", "Bonus", "Poldur", "Density", "Category", "Type", "Group1", "Value"]
PG15_CATEGORY_ORDER = {"Small": 0, "Medium": 1, "Large": 2}


def pg15training_frame(data_dir: PathLike = None) -> pd.DataFrame:
    """pg15training motor insurance claims (CASdatasets): Poisson claim frequency.

    Source: R package CASdatasets (Dutang & Charpentier), data set ``pg15training``.
    Licence: GPL (>= 2) - kept outside the package; put ``pg15training.csv.gz`` (an
    export with the R column names) in the data directory.

    Cleaning, as in the distance-covariance paper (Appendix H): the first 21 rows are
    duplicates of later policies (checked: the remaining ``PolNum`` are unique) and are
    removed, leaving 100,000 policies. Derived: ``Exposure = Exppdays / 365`` (years).

    Target: ``Numtppd`` (third-party property damage claim counts, ``task="poisson"``)
    with exposure ``Exposure`` (offset). Protected attributes: ``Gender`` (binary, Female=0,
    Male=1) and ``Group2`` (region, 10 levels L..U, categorical), excluded from the inputs
    (``include_sensitive=False``) as in the paper; ``SubGroup2`` (sub-region) is not an
    input either since it reveals the region.

    Inputs (paper's Table H.1): ``Occupation``, ``Type`` and ``Group1`` (car group 1..20)
    one-hot; ``Category`` ordinal (Small=0, Medium=1, Large=2); ``Age``, ``Bonus``,
    ``Poldur``, ``Density``, ``Value`` numeric. All numeric inputs are standardised (the
    paper min-max scales them; the model class is unaffected).
    """
    frame, source = _read_csv("pg15training", DATA_FILES["pg15training"], data_dir)
    raw_columns = PG15_FEATURES + ["PolNum", "Gender", "Group2", "Exppdays", "Numtppd"]
    _require_columns("pg15training", frame, raw_columns, source)
    _check_rows("pg15training", frame, PG15_RAW_ROWS, "in the raw file", source)
    frame = frame.iloc[PG15_DUPLICATES:].reset_index(drop=True)
    if frame["PolNum"].duplicated().any():
        raise ValueError("dataset 'pg15training': PolNum still has duplicates after removing the first 21 rows")
    frame["Category"] = _recode("pg15training", frame["Category"], PG15_CATEGORY_ORDER).astype(np.int64)
    frame["Exposure"] = frame["Exppdays"] / 365.0
    _check_rows("pg15training", frame, PG15_ROWS, "after removing the 21 duplicated rows", source)
    return frame


# --------------------------------------------------------------------------------------
# registry
# --------------------------------------------------------------------------------------
def _spec(target: str, sensitive: list[str], features: list[str] | None, categorical: list[str] | None = None,
          task: str = "binary", exposure: str | None = None, include_sensitive: bool = False) -> dict[str, Any]:
    """A from_frame specification (every key of :data:`FROM_FRAME_ARGUMENTS` but preprocessor)."""
    return {
        "target": target, "sensitive": sensitive, "features": features, "categorical": categorical,
        "task": task, "exposure": exposure, "sensitive_kinds": None, "include_sensitive": include_sensitive,
    }


@dataclass(frozen=True)
class DatasetInfo:
    """A registered data set: its reader, its default specification and alternative targets
    (target -> spec keys that change with it, e.g. task and inputs)."""

    name: str
    reader: Callable[..., pd.DataFrame]
    spec: Mapping[str, Any]
    alternative_targets: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)

    @property
    def options(self) -> list[str]:
        """Reader keyword options besides ``data_dir`` (e.g. Adult's ``part``)."""
        return [p for p in inspect.signature(self.reader).parameters if p != "data_dir"]


_LAW_REGRESSION = {"task": "regression", "features": LAW_ADMISSION_FEATURES}

_DATASETS: dict[str, DatasetInfo] = {
    info.name: info
    for info in [
        DatasetInfo("adult", adult_frame, _spec("income", ["sex"], ADULT_FEATURES)),
        DatasetInfo("dutch", dutch_frame, _spec("occupation0", ["sex"], DUTCH_COLUMNS[:-1], DUTCH_NOMINAL)),
        DatasetInfo("law", law_frame, _spec("pass_bar", ["race"], LAW_FEATURES),
                    {"zfygpa": _LAW_REGRESSION, "zgpa": _LAW_REGRESSION}),
        DatasetInfo("acsincome", acsincome_frame, _spec("PINCP", ["SEX"], ACS_COLUMNS[:-1], ACS_NOMINAL)),
        DatasetInfo("communities", communities_frame, _spec("violentPerPop", ["race"], None, task="regression")),
        DatasetInfo("compas", compas_frame, _spec("two_year_recid", ["race"], COMPAS_FEATURES)),
        DatasetInfo("pg15training", pg15training_frame,
                    _spec("Numtppd", ["Gender", "Group2"], PG15_FEATURES, ["Group1"], task="poisson",
                          exposure="Exposure", include_sensitive=False)),
    ]
}


def available() -> list[str]:
    """Names accepted by :func:`load` and :func:`load_frame`."""
    return list(_DATASETS)


def _info(name: str) -> DatasetInfo:
    if name not in _DATASETS:
        raise ValueError(f"name: unknown dataset {name!r}; available: {available()}")
    return _DATASETS[name]


def describe(name: str) -> str:
    """The documentation of data set ``name`` (source, licence, target, protected
    attributes, encoding)."""
    return inspect.getdoc(_info(name).reader) or ""


def load_frame(name: str, data_dir: PathLike = None, **options: Any) -> tuple[pd.DataFrame, dict[str, Any]]:
    """The cleaned raw rows of a data set and its default from_frame specification.

    Parameters
    ----------
    name : one of :func:`available`.
    data_dir : directory searched first for the data file (then ``$FAIROPT_DATA``, then the
        user data directory; Adult is also embedded).
    **options : reader options (Adult: ``part``; COMPAS: ``group_race``).

    Returns
    -------
    frame : pandas.DataFrame
    spec : dict with keys target, sensitive, features, categorical, task, exposure,
        sensitive_kinds, include_sensitive - ``FairData.from_frame(frame, **spec)`` gives
        the data :func:`load` returns.

    Raises
    ------
    FileNotFoundError : the data file is in none of the places (the message lists them).
    ValueError : unknown name or option, or a row count that differs from the literature.
    """
    info = _info(name)
    unknown = [k for k in options if k not in info.options]
    if unknown:
        raise ValueError(f"options: {unknown} are not options of dataset {name!r} (options: {info.options})")
    frame = info.reader(data_dir, **options)
    spec = {k: (list(v) if isinstance(v, list) else v) for k, v in info.spec.items()}
    return frame, spec


def _apply_overrides(info: DatasetInfo, spec: dict[str, Any], overrides: Mapping[str, Any]) -> dict[str, Any]:
    """Merge user overrides into the default spec.

    A new target brings its registered alternative settings (task, inputs); otherwise it is
    removed from the default inputs. Explicit overrides always win.
    """
    merged = dict(spec)
    target = overrides.get("target", spec["target"])
    if target != spec["target"]:
        merged.update(info.alternative_targets.get(target, {}))
        if merged["features"] is not None and target in merged["features"] and "features" not in overrides:
            merged["features"] = [f for f in merged["features"] if f != target]
            logger.info("%s: target %r removed from the default inputs", info.name, target)
    merged.update(overrides)
    return merged


def load(name: str, data_dir: PathLike = None, **kwargs: Any) -> FairData:
    """Load a benchmark data set as :class:`~fairopt.data.FairData`.

    Parameters
    ----------
    name : one of :func:`available`: "adult", "dutch", "law", "acsincome", "communities",
        "compas", "pg15training". :func:`describe` gives each one's source, licence,
        target, protected attributes and encoding.
    data_dir : directory searched first for the data file (see :func:`load_frame`).
    **kwargs : reader options (Adult ``part``, COMPAS ``group_race``) and overrides of the
        :meth:`FairData.from_frame` arguments (``target``, ``sensitive``, ``features``,
        ``categorical``, ``task``, ``exposure``, ``sensitive_kinds``,
        ``include_sensitive``, ``preprocessor``). Example:
        ``load("law", target="zfygpa", task="regression")``.

    Examples
    --------
    >>> data = load("adult")                       # embedded, 30,162 rows
    >>> train, test = data.split(test_size=0.2, seed=0)
    """
    info = _info(name)
    options = {k: kwargs.pop(k) for k in list(kwargs) if k in info.options}
    unknown = [k for k in kwargs if k not in FROM_FRAME_ARGUMENTS]
    if unknown:
        raise ValueError(f"kwargs: {unknown} are neither options of dataset {name!r} ({info.options}) "
                         f"nor from_frame arguments {list(FROM_FRAME_ARGUMENTS)}")
    frame, spec = load_frame(name, data_dir, **options)
    return FairData.from_frame(frame, **_apply_overrides(info, spec, kwargs))
