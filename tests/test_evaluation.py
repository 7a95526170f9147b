"""Tests of fairopt.evaluation on tiny stand-in datasets (types.SimpleNamespace with the
FairData fields), a torch.nn.Linear model and a small fake constraint."""

from __future__ import annotations

import math
from types import SimpleNamespace

import warnings

import numpy as np
import pandas as pd
import pytest
import torch

from fairopt.evaluation import constant_predictions, evaluate, fairness_report, format_report
from fairopt.exceptions import DegenerateModelWarning, FairnessWarning, UndefinedMeasureWarning
from fairopt.measures import js_divergence, poisson_rps, uf
from solvers.problem import prediction_outputs

TOL = 1e-10


def make_data(task: str = "binary", n: int = 12, seed: int = 0, exposure: bool = False) -> SimpleNamespace:
    g = torch.Generator().manual_seed(seed)
    X = torch.randn(n, 3, generator=g)
    sex = torch.tensor([0.0, 1.0] * (n // 2))
    race = torch.arange(n) % 3
    age = torch.linspace(18, 80, n)
    if task == "binary":
        y = (torch.arange(n) % 4 < 2).float()
    elif task == "regression":
        y = torch.randn(n, generator=g)
    else:
        y = torch.tensor([0, 1, 0, 2, 0, 0, 1, 0, 3, 0, 0, 1][:n], dtype=torch.float32)
    return SimpleNamespace(
        X=X,
        y=y,
        task=task,
        sensitive={"sex": sex, "race": race, "age": age},
        sensitive_kinds={"sex": "binary", "race": "categorical", "age": "continuous"},
        sensitive_levels={"sex": ["f", "m"], "race": ["a", "b", "c"], "age": []},
        cells=(sex.long() * 3 + race),
        n_cells=6,
        exposure=torch.linspace(0.2, 1.0, n) if exposure else None,
    )


def make_model(seed: int = 1) -> torch.nn.Linear:
    torch.manual_seed(seed)
    model = torch.nn.Linear(3, 1)
    return model


class MeanProbability:
    """A fake constraint: rows [mean sigmoid(out) over sex=0, over sex=1] in [0.3, 0.6] and [-inf, 0.4]."""

    def __init__(self, name: str = "meanprob") -> None:
        self.name = name
        self.lower = torch.tensor([0.3, -math.inf], dtype=torch.float64)
        self.upper = torch.tensor([0.6, 0.4], dtype=torch.float64)
        self.calls = 0

    def exact(self, out: torch.Tensor, batch) -> torch.Tensor:
        self.calls += 1
        p = torch.sigmoid(out)
        s = batch.sensitive["sex"]
        return torch.stack([p[s == 0].mean(), p[s == 1].mean()])

    def __call__(self, out, batch):  # pragma: no cover - not used by evaluate
        return self.exact(out, batch)


def reference_values(model, data, threshold=0.0):
    """The outputs evaluate() reads: the model in float64, in the data's dtype (the estimators' predict path)."""
    out = prediction_outputs(model, data.X).reshape(-1).double()
    return out, (out > threshold).double()


class TestEvaluateBinary:
    def test_keys_and_values(self):
        data, model = make_data(), make_model()
        c = MeanProbability()
        res = evaluate(model, data, constraints=[c])
        out, hard = reference_values(model, data)
        y, sex, race = data.y.double(), data.sensitive["sex"], data.sensitive["race"]
        assert res["n"] == 12
        assert res["accuracy"] == pytest.approx(float((hard == y).double().mean()), abs=TOL)
        assert res["rps"] == pytest.approx(float(((torch.sigmoid(out) - y) ** 2).mean()), abs=TOL)
        rates_sex = [float(hard[sex == v].mean()) for v in (0, 1)]
        rates_race = [float(hard[race == v].mean()) for v in (0, 1, 2)]
        for name, rates in (("sex", rates_sex), ("race", rates_race)):
            ratio = math.nan if max(rates) == 0 else min(rates) / max(rates)  # 0/0 is undefined
            assert res[f"di_ratio[{name}]"] == pytest.approx(ratio, abs=TOL, nan_ok=True)
            assert res[f"dp_difference[{name}]"] == pytest.approx(max(rates) - min(rates), abs=TOL)
        assert res["di_ratio"] == res["di_ratio[sex]"] and res["dp_difference"] == res["dp_difference[sex]"]
        assert "di_ratio[age]" not in res  # continuous features have no groups
        prob = torch.sigmoid(out).numpy()
        age_bins = pd.qcut(data.sensitive["age"].numpy(), 3, labels=False)
        labels = [f"{a}|{b}|{c}" for a, b, c in zip(sex.numpy(), race.numpy(), age_bins)]
        assert res["uf"] == pytest.approx(uf(prob, labels), abs=TOL)
        assert res["js_divergence"] == pytest.approx(js_divergence(prob, labels), abs=TOL)
        # constraint rows and violation, computed by hand
        p = torch.sigmoid(out)
        rows = [float(p[sex == 0].mean()), float(p[sex == 1].mean())]
        assert res["meanprob"] == pytest.approx(rows, abs=1e-6)
        expected = max(rows[0] - 0.6, 0) + max(0.3 - rows[0], 0) + max(rows[1] - 0.4, 0)
        assert res["meanprob.violation"] == pytest.approx(expected, abs=1e-6)
        assert res["violation"] == pytest.approx(expected, abs=1e-6)
        assert c.calls == 1

    def test_threshold_changes_hard_predictions(self):
        data, model = make_data(), make_model()
        out, _ = reference_values(model, data)
        threshold = float(out.median())
        res = evaluate(model, data, threshold=threshold)
        _, hard = reference_values(model, data, threshold)
        assert res["accuracy"] == pytest.approx(float((hard == data.y.double()).double().mean()), abs=TOL)

    def test_no_grad_and_model_untouched(self):
        data, model = make_data(), make_model()
        before = [p.detach().clone() for p in model.parameters()]
        evaluate(model, data)
        assert all(p.grad is None for p in model.parameters())
        assert all(torch.equal(a, b) for a, b in zip(before, model.parameters()))

    def test_violation_positive_when_bound_broken(self):
        data = make_data()
        model = make_model()
        with torch.no_grad():
            model.weight.zero_()
            model.bias.fill_(3.0)  # sigmoid(3) = 0.953 in both groups
        with pytest.warns(DegenerateModelWarning, match="every row is predicted class 1"):
            res = evaluate(model, data, constraints=[MeanProbability()])
        p = 1 / (1 + math.exp(-3))
        assert res["meanprob.violation"] == pytest.approx((p - 0.6) + (p - 0.4), abs=1e-6)
        assert res["di_ratio"] == 1.0 and res["dp_difference"] == 0.0
        assert res["uf"] == 0.0  # constant predictions
        assert res["degenerate"] is True and "constant classifier" in res["notes"]["degenerate"]

    def test_duplicate_constraint_names(self):
        res = evaluate(make_model(), make_data(), constraints=[MeanProbability(), MeanProbability()])
        assert "meanprob" in res and "meanprob#2" in res and "meanprob#2.violation" in res
        assert res["violation"] == pytest.approx(2 * res["meanprob.violation"], abs=1e-12)


class TestEvaluateOtherTasks:
    def test_regression(self):
        data, model = make_data("regression"), make_model()
        res = evaluate(model, data)
        out, _ = reference_values(model, data)
        y = data.y.double()
        assert res["mse"] == pytest.approx(float(((out - y) ** 2).mean()), abs=TOL)
        assert res["r2"] == pytest.approx(1 - float(((out - y) ** 2).sum() / ((y - y.mean()) ** 2).sum()), abs=TOL)
        means = [float(out[data.sensitive["sex"] == v].mean()) for v in (0, 1)]
        assert res["dp_difference[sex]"] == pytest.approx(max(means) - min(means), abs=TOL)
        if min(means) < 0:
            assert math.isnan(res["di_ratio[sex]"])
        else:
            assert res["di_ratio[sex]"] == pytest.approx(min(means) / max(means), abs=TOL)
        assert "accuracy" not in res and "deviance" not in res

    def test_poisson_with_exposure(self):
        data, model = make_data("poisson", exposure=True), make_model()
        res = evaluate(model, data)
        out, _ = reference_values(model, data)
        rate = torch.exp(out)
        mu = data.exposure.double() * rate
        y = data.y.double()
        ylogy = torch.where(y > 0, y * torch.log(y / mu), torch.zeros_like(y))
        assert res["deviance"] == pytest.approx(float((2 * (ylogy - (y - mu))).mean()), abs=TOL)
        assert res["rps"] == pytest.approx(poisson_rps(y.numpy(), mu.numpy()), abs=TOL)
        assert res["balance"] == pytest.approx(float(mu.sum() / y.sum()), rel=1e-9)  # predicted / observed claims
        means = [float(rate[data.sensitive["race"] == v].mean()) for v in (0, 1, 2)]
        assert res["di_ratio[race]"] == pytest.approx(min(means) / max(means), abs=TOL)

    def test_poisson_without_exposure(self):
        data, model = make_data("poisson"), make_model()
        res = evaluate(model, data)
        out, _ = reference_values(model, data)
        y, mu = data.y.double(), torch.exp(out)
        ylogy = torch.where(y > 0, y * torch.log(y / mu), torch.zeros_like(y))
        assert res["deviance"] == pytest.approx(float((2 * (ylogy - (y - mu))).mean()), abs=TOL)


class TestEvaluateEdgeCases:
    def test_single_group_gives_nan_and_warning(self):
        data = make_data()
        data.sensitive = {"sex": torch.zeros(12)}
        data.sensitive_kinds = {"sex": "binary"}
        with pytest.warns(FairnessWarning, match="sex"):
            res = evaluate(make_model(), data)
        assert math.isnan(res["di_ratio"]) and math.isnan(res["uf"]) and math.isnan(res["js_divergence"])

    def test_no_sensitive_features(self):
        data = make_data()
        data.sensitive, data.sensitive_kinds = {}, {}
        res = evaluate(make_model(), data)
        assert "di_ratio" not in res and "uf" not in res and res["n"] == 12

    def test_validation(self):
        data, model = make_data(), make_model()
        with pytest.raises(ValueError, match="^data: task"):
            evaluate(model, SimpleNamespace(**{**vars(data), "task": "multiclass"}))
        with pytest.raises(ValueError, match="^model: expected one output per row"):
            evaluate(torch.nn.Linear(3, 2), data)
        with pytest.raises(ValueError, match="^threshold: "):
            evaluate(model, data, threshold=float("nan"))
        bad = MeanProbability()
        bad.lower = torch.tensor([0.0])
        bad.upper = torch.tensor([1.0])
        with pytest.raises(ValueError, match="^constraints: 'meanprob' returned 2 exact values"):
            evaluate(model, data, constraints=[bad])
        with pytest.raises(ValueError, match="^constraints: .*'exact'"):
            evaluate(model, data, constraints=[SimpleNamespace(name="x", lower=0, upper=1)])
        with pytest.raises(ValueError, match="^model: produced non-finite"):
            evaluate(lambda X: torch.full((X.shape[0],), float("nan")), data)

    def test_function_model_and_column_output(self):
        data = make_data()
        res = evaluate(lambda X: X[:, :1], data)  # (n, 1) output is flattened
        hard = (data.X[:, 0] > 0).double()
        assert res["accuracy"] == pytest.approx(float((hard == data.y.double()).double().mean()), abs=TOL)


class TestReport:
    def test_fairness_report_single_and_several(self):
        model, train, test = make_model(), make_data(seed=0), make_data(seed=3)
        c = MeanProbability()
        runs = {"train": evaluate(model, train, [c]), "test": evaluate(model, test, [c])}
        table = fairness_report(runs)
        assert list(table.columns) == ["train", "test"]
        assert table.loc["n", "train"] == 12
        assert table.loc["accuracy", "test"] == pytest.approx(runs["test"]["accuracy"], abs=TOL)
        assert table.loc["meanprob[1]", "train"] == pytest.approx(runs["train"]["meanprob"][1], abs=TOL)
        assert table.loc["meanprob.violation", "test"] == pytest.approx(runs["test"]["meanprob.violation"], abs=TOL)
        single = fairness_report(runs["train"])
        assert list(single.columns) == ["value"]
        assert single.loc["di_ratio[race]", "value"] == pytest.approx(runs["train"]["di_ratio[race]"], abs=TOL)

    def test_format_report(self):
        res = evaluate(make_model(), make_data(), [MeanProbability()])
        text = format_report({"train": res}, digits=3)
        lines = text.splitlines()
        assert lines[0].split() == ["train"]
        assert any(line.split() == ["rows", "12"] for line in lines)
        acc_line = next(line for line in lines if line.startswith("accuracy"))
        assert acc_line.split()[1] == f"{res['accuracy']:.3f}"
        with pytest.raises(ValueError, match="^digits: "):
            format_report(res, digits=0)

    def test_report_validation(self):
        with pytest.raises(ValueError, match="^results: "):
            fairness_report({})
        with pytest.raises(ValueError, match="^results: mixes"):
            fairness_report({"train": {"n": 1}, "n": 3})


# ------------------------------------------------------------------------------------
# 0/0 ratios and degenerate (constant) models: never reported as perfectly fair
# ------------------------------------------------------------------------------------
def _constant(value: float):
    return lambda X: torch.full((X.shape[0],), value)


class TestUndefinedAndDegenerate:
    def test_no_positive_prediction_gives_nan_di_ratio_with_the_reason(self):
        """Regression: a model without a positive prediction had di_ratio 1.0 ("perfectly fair")."""
        data = make_data()
        with pytest.warns(FairnessWarning) as caught:
            res = evaluate(_constant(-4.0), data)
        for key in ("di_ratio", "di_ratio[sex]", "di_ratio[race]"):
            assert math.isnan(res[key])
            assert "no group has positive predictions" in res["notes"][key]
        assert res["dp_difference[sex]"] == 0.0
        undefined = [str(w.message) for w in caught if w.category is UndefinedMeasureWarning]
        assert [m.split(":")[0] for m in undefined] == ["di_ratio[sex]", "di_ratio[race]"]
        assert all("no group has positive predictions" in m for m in undefined)
        # the report keeps the NaN and says why
        with pytest.warns(DegenerateModelWarning, match="'test'"):
            table = fairness_report({"test": res})
        assert math.isnan(table.loc["di_ratio", "test"]) and table.loc["degenerate", "test"] == 1.0
        assert "no group has positive predictions" in table.attrs["notes"]["test"]["di_ratio[sex]"]
        with pytest.warns(DegenerateModelWarning):
            text = format_report({"test": res})
        assert "test: di_ratio[sex]: no group has positive predictions" in text
        assert any(line.split() == ["degenerate", "True"] for line in text.splitlines())

    def test_constant_classifier_is_flagged_degenerate(self):
        """Regression: a constant classifier was reported as perfectly fair without a flag."""
        data = make_data()
        with pytest.warns(FairnessWarning) as caught:
            res = evaluate(_constant(-1.0), data)
        degenerate = [str(w.message) for w in caught if w.category is DegenerateModelWarning]
        assert len(degenerate) == 1 and degenerate[0].startswith("degenerate model: every row is predicted class 0")
        assert res["degenerate"] is True and "constant classifier" in res["notes"]["degenerate"]
        # the threshold decides the hard predictions, so it decides degeneracy too
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            assert evaluate(make_model(), data)["degenerate"] is False
            assert evaluate(make_model(), data)["notes"] == {}
        with pytest.warns(FairnessWarning) as caught:  # degenerate, and the 0/0 di_ratio warnings
            res = evaluate(make_model(), data, threshold=1e6)
        assert res["degenerate"] is True
        assert any(w.category is DegenerateModelWarning and "out <= 1e+06" in str(w.message) for w in caught)

    def test_constant_regression_is_flagged_degenerate(self):
        data = make_data("regression")
        with pytest.warns(DegenerateModelWarning, match="every row gets the prediction 0.5"):
            res = evaluate(_constant(0.5), data)
        assert res["degenerate"] is True and res["dp_difference"] == 0.0
        with warnings.catch_warnings():
            warnings.simplefilter("error", DegenerateModelWarning)
            assert evaluate(make_model(), data)["degenerate"] is False

    def test_zero_regression_predictions_give_nan_di_ratio(self):
        data = make_data("regression")
        with pytest.warns(FairnessWarning) as caught:
            res = evaluate(_constant(0.0), data)
        undefined = [str(w.message) for w in caught if w.category is UndefinedMeasureWarning]
        assert undefined[0].startswith("di_ratio[sex]: no group has a non-zero mean prediction")
        assert math.isnan(res["di_ratio[sex]"])

    def test_constant_predictions_rule(self):
        assert constant_predictions(torch.tensor([0.3, 0.2, 5.0]), "binary") is not None  # all class 1
        assert constant_predictions(torch.tensor([0.3, 0.2, 5.0]), "binary", threshold=0.25) is None
        assert constant_predictions(np.array([-1.0, 0.0]), "binary") is not None  # 0 is not > 0
        assert constant_predictions(np.array([2.0, 2.0 + 1e-9]), "regression") is not None  # float32 rounding
        assert constant_predictions(np.array([2.0, 2.0 + 1e-5]), "regression") is None
        assert constant_predictions(np.array([1.0, 1.0]), "poisson").startswith("every row gets the prediction 2.71828")

    def test_report_of_fair_runs_has_no_notes_and_no_warning(self):
        data = make_data()
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            table = fairness_report({"train": evaluate(make_model(), data)})
        assert table.attrs["notes"] == {} and table.loc["degenerate", "train"] == 0.0
        assert "notes:" not in format_report({"train": evaluate(make_model(), data)})


def test_estimator_warns_when_the_fit_collapses_to_a_constant_classifier():
    """Regression: a fit that predicts one class for every row gave no post-fit warning."""
    from fairopt import FairClassifier

    rng = np.random.default_rng(0)
    n = 200
    X = rng.normal(size=(n, 2))
    y = (rng.random(n) < 0.1).astype(int)  # 10% positives, features unrelated to y
    s = rng.integers(0, 2, n)
    clf = FairClassifier(model="linear", epochs=30, lr=0.1, seed=0)
    with pytest.warns(DegenerateModelWarning, match="^near-constant classifier: .*one class is predicted for 100.00%"):
        clf.fit(X, y, sensitive_features={"s": s})
    assert (clf.predict(X) == 0).all()


def test_a_constraint_not_set_up_is_named_with_what_to_do():
    """evaluate with a rate constraint whose rows are not sized yet: the error says to call setup, not only that a
    protocol field is missing; an object that lacks a field still names the protocol."""
    import fairopt
    from fairopt.constraints import DisparateImpact

    data = fairopt.datasets.load("adult").subset(np.arange(300))
    model = torch.nn.Linear(data.n_features, 1)
    with pytest.raises(ValueError, match=r"has no 'lower' \(disparate_impact\[sex\]: .*call setup\(data\)"):
        evaluate(model, data, constraints=[DisparateImpact("sex", delta=0.8)])
    with pytest.raises(ValueError, match=r"has no 'exact' \(solvers.problem.Constraint protocol\)"):
        evaluate(model, data, constraints=[SimpleNamespace(name="c", lower=0.0, upper=1.0)])


def test_a_group_left_out_of_a_measure_is_said_in_the_notes():
    """A group of total weight 0 makes di_ratio NaN with a note naming it (the user's label); a group without
    rows with y = 1 is left out of an equal-opportunity bound, which compares the others: a note and a
    FairnessWarning say so (both were silent)."""
    from fairopt import FairData
    from fairopt.constraints import EqualOpportunity

    rng = np.random.default_rng(3)
    n = 300
    race = np.array(["Black", "Other", "White"])[np.arange(n) % 3]
    y = (rng.random(n) < 0.5).astype(float)
    y[race == "Other"] = 0.0
    data = FairData.from_arrays(rng.normal(size=(n, 2)), y, {"race": race})
    eo = EqualOpportunity("race", delta=0.8)
    eo.setup(data)
    assert eo.sides_without_rows(data) == ["race=Other (TPR)"]

    def model(X):
        return torch.as_tensor(X[:, 0])

    with pytest.warns(FairnessWarning, match="race=Other"):
        results = evaluate(model, data, [eo])
    assert "race=Other (TPR)" in results["notes"]["bounds[equal_opportunity[race]]"]
    assert math.isfinite(results["bounds"]["equal_opportunity[race]"]["value"])
    weights = np.where(race == "Other", 0.0, 1.0)
    weighted = FairData.from_arrays(rng.normal(size=(n, 2)), (rng.random(n) < 0.5).astype(float),
                                    {"race": race}, sample_weight=weights)
    with pytest.warns(UndefinedMeasureWarning, match="total weight 0"):
        results = evaluate(model, weighted)
    assert math.isnan(results["di_ratio[race]"]) and "['Other']" in results["notes"]["di_ratio[race]"]


def test_the_status_says_a_bound_left_groups_out_on_the_training_rows():
    """Equal opportunity on sex with no woman of y = 1 (and DI with a group of weight 0) is met vacuously for
    that group: status_message_ says the bound leaves it out (it read 'Every bound is met' alone)."""
    from fairopt import FairClassifier

    rng = np.random.default_rng(4)
    n = 400
    sex = np.where(np.arange(n) % 2 == 0, "F", "M")
    X = rng.normal(size=(n, 2))
    y = ((X[:, 0] > 0) & (sex == "M")).astype(int)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        clf = FairClassifier("eo:sex<=0.05", epochs=20).fit(X, y, sensitive_features=sex)
    assert "EO[sex]: no training rows (or no weight) for sex=F (TPR)" in clf.status_message_
    y2 = (X[:, 0] > 0).astype(int)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        weighted = FairClassifier("di:sex>=0.8", epochs=20).fit(X, y2, sensitive_features=sex,
                                                                sample_weight=np.where(sex == "F", 0.0, 1.0))
        plain = FairClassifier("di:sex>=0.8", epochs=20).fit(X, y2, sensitive_features=sex)
    assert "for sex=F, so the bound leaves them out" in weighted.status_message_
    assert "leaves them out" not in plain.status_message_
