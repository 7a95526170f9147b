"""Every bound is compared with the measure it bounds (fairopt.evaluation.realised_measures,
compare's ``realised`` column, realised_vs_requested, the bench summary), and a bound the
measure cannot reach fails before training.

References, independent of fairopt: ``dcor.u_distance_covariance_sqr`` for the distance
covariance, numpy least squares for the GeDI coefficients, group means for the DI ratio.
"""

from __future__ import annotations

import dcor
import numpy as np
import pandas as pd
import pytest
import torch

from fairopt.constraints import Covariance, DisparateImpact, DistanceCovariance, GeDI
from fairopt.data import FairData
from fairopt.evaluation import realised_measures
from fairopt.experiments import Fitted, SQPMethod, compare, realised_vs_requested
from fairopt.experiments.configs import run_config
from fairopt.penalties import DistanceCovariancePenalty

pytestmark = [pytest.mark.filterwarnings("ignore::solvers.sqp.SQPWarning"),
              pytest.mark.usefixtures("one_torch_thread")]

N = 400


@pytest.fixture(scope="module")
def data() -> FairData:
    rng = np.random.default_rng(4)
    s = rng.integers(0, 2, N)
    age = rng.normal(40, 10, N)
    X = np.column_stack([rng.normal(size=N) + 0.8 * s + 0.05 * (age - 40), rng.normal(size=N)])
    y = (X[:, 0] + 0.3 * rng.normal(size=N) > 0.4).astype(float)
    return FairData.from_arrays(X, y, {"sex": s, "age": age}, sensitive_kinds={"sex": "binary", "age": "continuous"})


def _outputs(part: FairData) -> torch.Tensor:
    """Fixed logits, a function of the rows (the same on any split)."""
    return (1.5 * part.X[:, 0] - 0.4 * part.X[:, 1] - 0.3).double()


class _FixedMethod:
    """A method whose model is fixed: its constraints (built from the swept value) are
    only set up and reported, so the realised values can be recomputed from the outputs."""

    hyperparameter = "bound"

    def __init__(self, name: str, build):
        self.name, self.build = name, build

    def fit(self, train, *, value, seed):
        constraints = [self.build(value)]
        for c in constraints:
            c.setup(train)
        return Fitted(model=None, predict=_outputs, constraints=constraints, seconds=0.0)


def _gedi_labels(part: FairData, train: FairData) -> float:
    """GeDI(V^1) of the hard labels on ``part``, with the training standardisation of age
    (what the constraint fixes at setup; the intercept centres on the part)."""
    x, x_train = part.sensitive["age"].double().numpy(), train.sensitive["age"].double().numpy()
    z = (x - x_train.mean()) / x_train.std()
    labels = (_outputs(part).numpy() > 0).astype(float)
    return abs(np.linalg.lstsq(np.column_stack([np.ones_like(z), z]), labels, rcond=None)[0][1])


def _dcov(part: FairData) -> float:
    prob = 1.0 / (1.0 + np.exp(-_outputs(part).numpy()))
    return dcor.u_distance_covariance_sqr(prob, part.sensitive["sex"].double().numpy())


def test_compare_reports_each_bound_against_its_own_measure(data):
    methods = [_FixedMethod("dcov", lambda b: DistanceCovariance("sex", bound=b)),
               _FixedMethod("gedi", lambda b: GeDI("age", bound=b, target="labels")),
               _FixedMethod("di", lambda d: DisparateImpact("sex", delta=d))]
    methods[2].hyperparameter = "delta"
    table = compare(methods, data, {"dcov": [1e-4, 0.05], "gedi": [0.01, 0.5], "di": [0.3, 0.99]})
    for (name, split), part_rows in table.groupby(["method", "split"]):
        part = _split(data, split)
        expected = {"dcov": _dcov(part), "gedi": _gedi_labels(part, _split(data, "train"))}.get(name)
        if name == "di":
            rates = [float((_outputs(part).numpy() > 0)[part.sensitive["sex"].numpy() == g].mean()) for g in (0, 1)]
            expected = min(rates) / max(rates)
            np.testing.assert_allclose(part_rows["di_ratio"], expected, rtol=1e-12)  # DI bounds di_ratio itself
        np.testing.assert_allclose(part_rows["realised"], expected, rtol=1e-6)
        if name != "di":  # a dCov or GeDI bound is not read on di_ratio
            assert not np.allclose(part_rows["realised"], part_rows["di_ratio"])
    labels = table.groupby("method")["measure"].first()
    assert labels.to_dict() == {"dcov": "dcov[sex]", "gedi": "gedi_coarse[age][labels]", "di": "disparate_impact[sex]"}
    assert table.groupby("method")["sense"].first().to_dict() == {"dcov": "upper", "gedi": "upper", "di": "lower"}
    reading = realised_vs_requested(table).set_index("method")
    train = _split(data, "train")
    assert reading.loc["dcov", "realised_min"] == pytest.approx(_dcov(train), rel=1e-6)
    assert reading.loc["gedi", "realised_max"] == pytest.approx(_gedi_labels(train, train), rel=1e-6)
    # each measure is far from the smaller value of its grid and within the larger one
    assert reading["bounds_met"].to_dict() == {"dcov": 1, "gedi": 1, "di": 1}
    assert reading.loc["gedi", "worst_gap"] == pytest.approx(_gedi_labels(train, train) - 0.01, rel=1e-6)
    assert reading.loc["gedi", "measure"] == "gedi_coarse[age][labels]"
    # the old yardstick is still there on request, and reads something else
    assert realised_vs_requested(table, measure="di_ratio").set_index("method").loc["gedi", "realised_min"] != \
        pytest.approx(reading.loc["gedi", "realised_min"])


def _split(data: FairData, split: str) -> FairData:
    train, test = data.split(test_size=0.2, seed=0)  # compare's default split
    return train if split == "train" else test


def test_realised_measures_of_constraints_and_penalties(data):
    out = _outputs(data)
    dcov, cov = DistanceCovariance("sex", bound=0.01), Covariance("sex", bound=0.01)
    penalty = DistanceCovariancePenalty(["sex"], kind="dcov")
    for c in (dcov, cov, penalty):
        c.setup(data)
    measures = realised_measures(out, data, [dcov, cov, penalty, object()])  # object(): declares no measure
    assert [m.name for m in measures] == ["dcov[sex]", "covariance[sex]", "dcov[sex]"]
    s = data.sensitive["sex"].double().numpy()
    assert measures[1].value == pytest.approx(abs(np.mean((s - s.mean()) * out.numpy())), rel=1e-9)
    assert measures[0].value == pytest.approx(_dcov(data), rel=1e-6)
    assert measures[2].value == pytest.approx(_dcov(data), rel=1e-6)  # the penalised value of the penalty
    assert {m.sense for m in measures} == {"upper"}


def test_the_bench_summary_reads_a_gedi_bound_on_gedi(tmp_path):
    config = {
        "name": "gedi-bound",
        "data": {"dataset": "adult", "subsample": 600, "options": {"sensitive": ["sex", "age"]}},
        "methods": [{"kind": "sqp", "name": "gedi", "constraint": "gedi[labels]:age", "values": [0.01, 0.5],
                     "epochs": 3},
                    {"kind": "penalty", "name": "dcov", "penalty": "dcov:sex", "values": [0.0, 10.0], "epochs": 2,
                     "lr": 0.05}],
    }
    result = run_config(config, tmp_path)
    table = pd.read_csv(tmp_path / "results.csv")
    gedi_rows = table[table.method == "gedi"]
    assert set(gedi_rows["measure"]) == {"gedi_coarse[age][labels]"} and set(gedi_rows["sense"]) == {"upper"}
    assert set(table.loc[table.method == "dcov", "measure"]) == {"dcov[sex]"}
    summary = result.summary
    assert "| gedi | bound | gedi_coarse[age][labels] | upper | 2 |" in summary
    assert "| dcov | weight | dcov[sex] | upper | 2 |" in summary
    train = gedi_rows[gedi_rows.split == "train"].sort_values("value")
    lines = summary.splitlines()
    line = next(ln for ln in lines if ln.startswith("| gedi | bound |"))
    header = next(ln for ln in lines if ln.startswith("| method | hyperparameter | measure |"))
    cells = dict(zip([c.strip() for c in header.strip("|").split("|")], [c.strip() for c in line.strip("|").split("|")]))
    assert float(cells["realised_min"]) == pytest.approx(train["realised"].min(), rel=1e-3)
    assert float(cells["realised_max"]) == pytest.approx(train["realised"].max(), rel=1e-3)
    assert not np.allclose(train["realised"], train["di_ratio"])
    assert (tmp_path / "requested_vs_realised.png").exists()


# ----------------------------------------------------------------------------- unreachable bounds
@pytest.mark.parametrize("make, message", [
    (lambda: DisparateImpact("sex", delta=1.2), r"delta: expected a number in \(0, 1\], got 1.2"),
    (lambda: GeDI("age", bound=-0.1), r"bound: -0.1 is below 0, the floor of GeDI \(its value for a constant"),
    (lambda: GeDI("age", bound=-0.5, relative=True), r"bound: -0.5 is below 0, the floor of a relative GeDI"),
    (lambda: DistanceCovariance("sex", bound=-1e-3), r"bound: -0.001 is below 0, the floor of dcov"),
    (lambda: DistanceCovariance(["sex", "age"], bound=-1e-3, kind="jdcov"), r"the floor of jdcov"),
])
def test_a_bound_the_measure_cannot_reach_is_an_error(make, message):
    with pytest.raises(ValueError, match=message):
        make()


def test_a_sweep_value_the_measure_cannot_reach_fails_before_any_run_trains(data):
    fits = []

    class Counting(SQPMethod):
        def fit(self, train, *, value, seed):
            fits.append(value)
            return super().fit(train, value=value, seed=seed)

    ok = Counting(lambda d: DisparateImpact("sex", delta=d), name="di", epochs=1)
    bad = Counting(lambda b: GeDI("age", bound=b), name="gedi", hyperparameter="bound", epochs=1)
    with pytest.raises(ValueError, match=r"grid\['gedi'\]: value -0.2: bound: -0.2 is below 0, the floor of GeDI"):
        compare([ok, bad], data, {"di": [0.8], "gedi": [0.1, -0.2]})
    assert fits == []
    with pytest.raises(ValueError, match=r"grid\['di'\]: value 1.5: delta"):
        compare(ok, data, {"di": [1.5]})
    assert fits == []
