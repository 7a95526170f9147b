"""What ``python -m benchmarks.papers gedi-tables`` runs: the [GeDI] tasks, the paper's numbers and the settings.

The tasks of [GeDI] Table 3, with the paper's Tables 4 and 5 copied from its text (mean and
standard deviation over 5 folds, training time in seconds), the preprocessing experiment
of its Fig. 3 (only the figure's caption and the sec. 5 text describe it: no numbers), and
the two protocols :data:`FULL` (the paper's, App. B.2) and :data:`QUICK`.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

__all__ = ["Task", "TASKS", "LEARNERS", "PAPER", "PAPER_PREPROCESSING", "Settings", "FULL", "QUICK", "override",
           "protocol_tag", "model_names"]


@dataclass(frozen=True)
class Task:
    """One performance test of [GeDI] Table 3.

    ``degree`` is the kernel order of the constraint and of the reported GeDI (1 for a
    binary attribute, 5 for a continuous one, [GeDI] sec. 5); ``variants`` maps a model
    suffix ("MT", "MT-Fine", "MT-Coarse") to ``fine``; ``hidden`` is the paper's MLP
    (App. B.2); ``table`` where the paper reports it.
    """

    dataset: str
    sensitive: str
    degree: int
    classification: bool
    variants: Mapping[str, bool]
    hidden: tuple[int, ...]
    table: str

    @property
    def score(self) -> str:
        return "accuracy" if self.classification else "R2"


TASKS: dict[str, Task] = {
    "adult_sex": Task("adult", "sex", 1, True, {"MT": False}, (32, 32, 32), "Table 4 (right)"),
    "communities_race": Task("communities", "race", 1, False, {"MT": False}, (256, 256), "Table 4 (left)"),
    "communities_pctblack": Task("communities", "pctBlack", 5, False, {"MT-Fine": True, "MT-Coarse": False},
                                 (256, 256), "Table 5 (left)"),
    "adult_age": Task("adult", "age", 5, True, {"MT-Fine": True, "MT-Coarse": False}, (32, 32, 32),
                      "Table 5 (right)"),
}
#: the learners of [GeDI] sec. 5 (the NN+SBR rows are another engine, not run here)
LEARNERS: tuple[str, ...] = ("rf", "gb", "nn")

# [GeDI] Tables 4 and 5, copied from the paper text: per task and model
# (train score, sd, val score, sd, train GeDI %, sd, val GeDI %, sd, time s).
# Score: accuracy (Adult) or R^2 (Communities); GeDI %: GeDI(x, yhat; V^k) / GeDI(x, y; V^1),
# k = 1 (Table 4) or 5 (Table 5).
PAPER: dict[str, dict[str, tuple[float, ...]]] = {
    "adult_sex": {
        "RF": (1.00, 0.00, 0.85, 0.00, 1.00, 0.00, 0.94, 0.05, 1.54),
        "RF+MT": (0.95, 0.00, 0.84, 0.00, 0.20, 0.00, 0.72, 0.03, 128.28),
        "GB": (0.87, 0.00, 0.86, 0.00, 0.88, 0.01, 0.88, 0.04, 2.25),
        "GB+MT": (0.85, 0.00, 0.85, 0.00, 0.35, 0.02, 0.34, 0.04, 129.65),
        "NN": (0.89, 0.00, 0.83, 0.00, 1.03, 0.05, 1.03, 0.08, 55.31),
        "NN+MT": (0.86, 0.00, 0.83, 0.00, 0.19, 0.01, 0.17, 0.06, 2593.11),
    },
    "communities_race": {
        "RF": (0.95, 0.00, 0.63, 0.02, 1.00, 0.00, 1.02, 0.12, 5.19),
        "RF+MT": (0.66, 0.01, 0.52, 0.04, 0.24, 0.00, 0.28, 0.10, 54.00),
        "GB": (0.87, 0.01, 0.63, 0.02, 1.03, 0.00, 1.05, 0.11, 2.43),
        "GB+MT": (0.64, 0.01, 0.54, 0.02, 0.21, 0.00, 0.27, 0.09, 29.25),
        "NN": (0.99, 0.01, 0.58, 0.01, 0.99, 0.02, 0.97, 0.12, 7.64),
        "NN+MT": (0.89, 0.02, 0.49, 0.04, 0.20, 0.02, 0.32, 0.11, 85.81),
    },
    "communities_pctblack": {
        "RF": (0.95, 0.00, 0.63, 0.02, 1.70, 0.08, 2.03, 0.59, 5.23),
        "RF+MT-Fine": (0.48, 0.01, 0.36, 0.02, 0.24, 0.01, 0.64, 0.20, 61.97),
        "RF+MT-Coarse": (0.60, 0.01, 0.46, 0.03, 0.24, 0.01, 0.69, 0.27, 64.91),
        "GB": (0.87, 0.01, 0.63, 0.02, 1.67, 0.10, 2.09, 0.50, 2.52),
        "GB+MT-Fine": (0.47, 0.01, 0.37, 0.02, 0.23, 0.00, 0.55, 0.24, 30.58),
        "GB+MT-Coarse": (0.60, 0.01, 0.49, 0.04, 0.22, 0.00, 0.92, 0.44, 31.93),
        "NN": (0.99, 0.01, 0.58, 0.01, 1.79, 0.14, 1.78, 0.35, 7.58),
        "NN+MT-Fine": (0.70, 0.03, 0.32, 0.05, 0.27, 0.03, 1.09, 0.67, 94.14),
        "NN+MT-Coarse": (0.78, 0.06, 0.40, 0.04, 0.21, 0.02, 0.90, 0.54, 99.33),
    },
    "adult_age": {
        "RF": (1.00, 0.00, 0.85, 0.00, 3.40, 0.06, 3.76, 0.18, 2.74),
        "RF+MT-Fine": (0.92, 0.00, 0.78, 0.00, 0.20, 0.00, 1.13, 0.25, 256.02),
        "RF+MT-Coarse": (0.92, 0.00, 0.79, 0.00, 0.20, 0.00, 0.57, 0.19, 60.89),
        "GB": (0.87, 0.00, 0.86, 0.00, 3.59, 0.06, 3.59, 0.16, 4.14),
        "GB+MT-Fine": (0.81, 0.00, 0.80, 0.01, 0.65, 0.06, 0.76, 0.26, 658.27),
        "GB+MT-Coarse": (0.83, 0.00, 0.83, 0.01, 0.86, 0.03, 0.90, 0.21, 66.18),
        "NN": (0.89, 0.00, 0.83, 0.00, 4.09, 0.16, 4.12, 0.21, 306.42),
        "NN+MT-Fine": (0.80, 0.01, 0.79, 0.01, 0.32, 0.08, 0.51, 0.29, 2096.00),
        "NN+MT-Coarse": (0.80, 0.01, 0.78, 0.01, 0.29, 0.05, 0.63, 0.48, 1378.40),
    },
}

#: [GeDI] sec. 5, "Preprocessing experiments" (Fig. 3 is an image: these statements are all
#: the text gives), keyed by the check that :mod:`benchmarks.papers.gedi_tables` makes.
PAPER_PREPROCESSING: dict[str, str] = {
    "satisfied": "All GeDI constraints are satisfied by construction due to the use of an exact solver.",
    "fine_trend": "Increasing the kernel order with the GeDI-Fine approach tends to improve the discretized DIDI "
                  "across all bin numbers; in the few cases where the DIDI-3 and DIDI-5 worsen, the discrepancy is "
                  "due to how the bin boundaries cut the shapes induced by the polynomial kernels.",
    "coarse_trend": "The same behavior is observed for GeDI-Coarse, although with a lower degree of consistency.",
    "fine_similar": "In the GeDI-Fine case all higher-order dependencies are canceled; this explains why "
                    "enforcing a 20% threshold with the GeDI-Fine approach also leads to similar DIDI-n values, since "
                    "the semantics of the two approaches are similar (read: DIDI-n % close to the 20% GeDI threshold).",
}


@dataclass(frozen=True)
class Settings:
    """What :func:`benchmarks.papers.gedi_tables.run` runs (:data:`FULL`: the paper's protocol).

    Performance tests ([GeDI] sec. 5, App. B.2-B.3): ``folds``-fold cross-validation shuffled
    with ``seed`` (stratified for Adult, as the authors' code), of which the first
    ``max_folds`` run (None: all); each learner unconstrained and with Moving Targets
    (``iterations`` masters, alpha_t = 1/t, the bound ``relative_bound`` x GeDI(x, y_train;
    V^1)); MLPs train ``mlp_epochs`` epochs per fit and, with ``mlp_warm_start``, keep their
    weights from one Moving Targets refit to the next (the authors' torch learner trains one
    network throughout); ``adult_rows`` subsamples Adult (None: all 30,162 rows).
    ``include_sensitive``: the protected attribute is a model input (the authors' code keeps
    it among the inputs). ``backend``, ``time_limit`` and ``warm_start`` go to
    :class:`solvers.MovingTargets`.

    Preprocessing ([GeDI] Fig. 3): the targets of each task in ``preprocessing`` projected
    under GeDI-Coarse and GeDI-Fine with every kernel order of ``degrees``, the binned DIDI
    with ``bins`` quantile bins of the projected targets and of a ``preprocessing_learner``
    model trained on them (fold 0 of the same split).
    """

    tasks: tuple[str, ...] = tuple(TASKS)
    learners: tuple[str, ...] = LEARNERS
    folds: int = 5
    max_folds: int | None = None
    seed: int = 0
    iterations: int = 10
    mlp_epochs: int = 200
    mlp_warm_start: bool = True
    adult_rows: int | None = None
    relative_bound: float = 0.2
    include_sensitive: bool = True
    backend: str = "auto"
    time_limit: float = 60.0
    warm_start: bool = True
    preprocessing: tuple[str, ...] = ("communities_pctblack", "adult_age")
    degrees: tuple[int, ...] = (1, 2, 3, 4, 5)
    bins: tuple[int, ...] = (2, 3, 5, 10)
    preprocessing_learner: str = "gb"

    def run_folds(self) -> list[int]:
        """The fold indices that run."""
        return list(range(self.folds if self.max_folds is None else min(self.max_folds, self.folds)))


#: the paper's protocol ([GeDI] sec. 5 and App. B.2): 5-fold CV on all rows, 10 MT iterations,
#: MLPs 200 epochs, Gurobi-like 60 s per master
FULL = Settings()
#: ``--quick``: GB and MLP (the random forest on Communities costs the most), Adult subsampled to
#: 4,000 rows, the first 2 of 5 folds, 3 MT iterations, MLPs 20 epochs, preprocessing orders 1, 3, 5
QUICK = Settings(learners=("gb", "nn"), max_folds=2, iterations=3, mlp_epochs=20, adult_rows=4000,
                 degrees=(1, 3, 5))


def model_names(task: Task, learners: Sequence[str]) -> list[str]:
    """The models of a task in the paper's row order: each learner, then its MT variants."""
    names = []
    for kind in learners:
        names += [kind.upper()] + [f"{kind.upper()}+{suffix}" for suffix in task.variants]
    return names


def protocol_tag(settings: Settings) -> str:
    """A short name of everything that changes a cell's numbers (the cache key)."""
    rows = "all" if settings.adult_rows is None else f"n{settings.adult_rows}"
    inputs = "" if settings.include_sensitive else "-nosens"
    warm = "w" if settings.mlp_warm_start else ""
    return (f"k{settings.folds}-it{settings.iterations}-ep{settings.mlp_epochs}{warm}-{rows}-s{settings.seed}"
            f"-b{settings.relative_bound:g}{inputs}")


def override(settings: Settings, *, epochs: int | None = None, seeds: Sequence[int] | None = None,
             subsample: int | None = None, **changes: Any) -> Settings:
    """``settings`` with overrides (None keeps a field): ``epochs`` the MLP epochs, ``seeds``
    the CV shuffle seed (one), ``subsample`` the Adult rows; other keywords replace fields."""
    fields = {k: v for k, v in changes.items() if v is not None}
    unknown = sorted(set(fields) - {f.name for f in dataclasses.fields(Settings)})
    if unknown:
        raise ValueError(f"changes: unknown settings {unknown}")
    if epochs is not None:
        fields["mlp_epochs"] = epochs
    if seeds is not None:
        if len(seeds) != 1:
            raise ValueError(f"seeds: gedi-tables runs one cross-validation seed (the paper: 0), got {list(seeds)}")
        fields["seed"] = int(seeds[0])
    if subsample is not None:
        fields["adult_rows"] = subsample
    for key in ("tasks", "preprocessing"):
        bad = [t for t in fields.get(key, ()) if t not in TASKS]
        if bad:
            raise ValueError(f"{key}: {bad} are not GeDI tasks ({sorted(TASKS)})")
    bad = [name for name in fields.get("learners", ()) if name not in LEARNERS]
    if bad:
        raise ValueError(f"learners: {bad} are not GeDI learners {LEARNERS}")
    for key in ("tasks", "learners", "preprocessing", "degrees", "bins"):
        if key in fields:
            fields[key] = tuple(fields[key])
    return dataclasses.replace(settings, **fields)
