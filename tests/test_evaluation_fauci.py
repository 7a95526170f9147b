"""The FaUCI metrics in fairopt.evaluate's output (and compare's table and bench summaries),
checked against a brute-force numpy computation of [FU] eq. 5-11 written with plain loops."""

from __future__ import annotations

import math
import warnings
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest
import torch

from fairopt.data import FairData
from fairopt.evaluation import evaluate
from fairopt.evaluation_fauci import fauci_columns, resolve_combined
from fairopt.experiments import PenaltyMethod, compare
from fairopt.experiments.configs import run_config
from fairopt.penalties import FaUCI

TOL = 1e-12


def small_table(n: int = 90, seed: int = 3) -> tuple[SimpleNamespace, torch.Tensor]:
    """Binary, categorical (4 unbalanced levels) and continuous sensitive features, labels and logits."""
    rng = np.random.default_rng(seed)
    sex = rng.integers(0, 2, n).astype(np.float32)
    race = rng.choice(4, n, p=[0.5, 0.3, 0.15, 0.05]).astype(np.int64)
    age = rng.uniform(18.0, 80.0, n).astype(np.float32)
    y = rng.integers(0, 2, n).astype(np.float32)
    out = torch.tensor(rng.normal(0.3 * y + 0.4 * sex - 0.2, 1.0), dtype=torch.float32)
    data = SimpleNamespace(
        X=torch.zeros(n, 1), y=torch.from_numpy(y), task="binary",
        sensitive={"sex": torch.from_numpy(sex), "race": torch.from_numpy(race), "age": torch.from_numpy(age)},
        sensitive_kinds={"sex": "binary", "race": "categorical", "age": "continuous"})
    return data, out


# ------------------------------------------------------------------ brute force
def brute_metrics(h: np.ndarray, groups: list, y: np.ndarray, weights: str) -> tuple[float, float, float]:
    """WDP, WDI, WEO of [FU] eq. 5, 8, 10 with loops over the group labels present."""
    labels = sorted(set(groups))
    n = len(h)
    members = {g: [i for i in range(n) if groups[i] == g] for g in labels}
    w = {g: (1.0 / len(labels) if weights == "uniform" else len(members[g]) / n) for g in labels}
    overall = sum(h) / n
    dp = di = eo = 0.0
    for g in labels:
        inside = [h[i] for i in members[g]]
        outside = [h[i] for i in range(n) if groups[i] != g]
        m_in, m_out = sum(inside) / len(inside), sum(outside) / len(outside)
        dp += w[g] * abs(m_in - overall)
        di += w[g] * (1.0 if max(m_in, m_out) == 0 else min(m_in / m_out if m_out else 0.0,
                                                            m_out / m_in if m_in else 0.0))
        for label in (0, 1):
            rows_y = [i for i in range(n) if y[i] == label]
            rows_gy = [i for i in members[g] if y[i] == label]
            if rows_gy:
                eo += w[g] * abs(sum(h[i] for i in rows_gy) / len(rows_gy) - sum(h[i] for i in rows_y) / len(rows_y))
    return dp, di, eo


def equal_width_bins(values: np.ndarray, n_bins: int = 10) -> list[int]:
    """Bin of each value among ``n_bins`` equal-width bins of [min, max] (last bin closed)."""
    lo, hi = float(values.min()), float(values.max())
    return [min(int((v - lo) / (hi - lo) * n_bins), n_bins - 1) for v in values.astype(float)]


def test_evaluate_reports_the_fauci_metrics_of_each_feature_by_brute_force():
    data, out = small_table()
    res = evaluate(lambda X: out, data)
    h = (out.numpy() > 0).astype(float)
    y = data.y.numpy()
    for name in ("sex", "race"):
        dp, di, eo = brute_metrics(h, data.sensitive[name].tolist(), y, "uniform")
        assert res[f"wdp[{name}]"] == pytest.approx(dp, abs=TOL)
        assert res[f"wdi[{name}]"] == pytest.approx(di, abs=TOL)
        assert res[f"weo[{name}]"] == pytest.approx(eo, abs=TOL)
    # binary sex: WDP with uniform weights is half the DP difference, WDI is the DI ratio
    assert res["wdp[sex]"] == pytest.approx(res["dp_difference[sex]"] / 2, abs=TOL)
    assert res["wdi[sex]"] == pytest.approx(res["di_ratio[sex]"], abs=TOL)
    dp, di, eo = brute_metrics(h, equal_width_bins(data.sensitive["age"].numpy()), y, "density")
    assert (res["gdp[age]"], res["gdi[age]"], res["geo[age]"]) == pytest.approx((dp, di, eo), abs=TOL)
    assert not any(k.startswith(("gdp[", "gdi[", "geo[")) and k != f"{k[:3]}[age]" for k in res)
    assert "wdp[age]" not in res and "gdp[sex]" not in res
    assert fauci_columns(list(res)) == ["wdp[sex]", "wdi[sex]", "weo[sex]", "wdp[race]", "wdi[race]", "weo[race]",
                                        "gdp[age]", "gdi[age]", "geo[age]"]


def test_combined_attribute_is_the_cartesian_product_by_brute_force():
    data, out = small_table()
    res = evaluate(lambda X: out, data, fauci_combined=[["sex", "race"], ["sex", "race", "age"]])
    h, y = (out.numpy() > 0).astype(float), data.y.numpy()
    sex, race = data.sensitive["sex"].tolist(), data.sensitive["race"].tolist()
    age_bins = pd.qcut(data.sensitive["age"].numpy(), 3, labels=False).tolist()  # 3 equal-count bins
    for label, cells in (("sex&race", list(zip(sex, race))), ("sex&race&age", list(zip(sex, race, age_bins)))):
        dp, di, eo = brute_metrics(h, cells, y, "uniform")
        assert (res[f"wdp[{label}]"], res[f"wdi[{label}]"], res[f"weo[{label}]"]) == pytest.approx((dp, di, eo), abs=TOL)
    assert evaluate(lambda X: out, data, fauci_combined=True)["wdp[sex&race&age]"] == res["wdp[sex&race&age]"]
    assert "wdp[sex&race]" not in evaluate(lambda X: out, data)  # off by default


def test_soft_metrics_of_the_penalty_agree_with_the_brute_force_on_probabilities():
    """The training penalty (sigmoid probabilities) and evaluate (hard predictions) share the definitions."""
    data, out = small_table()
    p = torch.sigmoid(out.double()).numpy()
    dp, di, _ = brute_metrics(p, data.sensitive["race"].tolist(), data.y.numpy(), "uniform")
    batch = SimpleNamespace(sensitive=data.sensitive, y=data.y)
    assert float(FaUCI("wdp", "race")(out.double(), batch)) == pytest.approx(dp, abs=1e-10)
    assert float(FaUCI("wdi", "race")(out.double(), batch)) == pytest.approx(1 - di, abs=1e-10)


def test_undefined_values_are_nan_never_perfectly_fair():
    data, _ = small_table()
    with pytest.warns(UserWarning):
        res = evaluate(lambda X: torch.full((X.shape[0],), -3.0), data)  # no positive prediction
    for key in ("wdi[sex]", "wdi[race]", "gdi[age]"):
        assert math.isnan(res[key]) and "no group has positive predictions" in res["notes"][key]
    assert res["wdp[sex]"] == 0.0 and res["degenerate"] is True
    one_group = SimpleNamespace(**{**vars(data), "sensitive": {**data.sensitive, "sex": torch.zeros(len(data.y)),
                                                               "age": torch.full((len(data.y),), 30.0)}})
    with pytest.warns(UserWarning, match="constant in this data"):
        res = evaluate(lambda X: torch.linspace(-1, 1, X.shape[0]), one_group)
    assert all(math.isnan(res[k]) for k in ("wdp[sex]", "wdi[sex]", "weo[sex]", "gdp[age]", "gdi[age]", "geo[age]"))
    assert np.isfinite(res["wdp[race]"])


def test_fauci_metrics_only_for_binary_classification_and_combined_validation():
    data, out = small_table()
    regression = SimpleNamespace(**{**vars(data), "task": "regression", "y": torch.randn(len(data.y))})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        res = evaluate(lambda X: out, regression)
    assert not fauci_columns(list(res)) and "di_ratio[sex]" in res
    with pytest.raises(ValueError, match="^fauci_combined: the FaUCI metrics need a binary classifier"):
        evaluate(lambda X: out, regression, fauci_combined=True)
    with pytest.raises(ValueError, match="^fauci_combined: unknown sensitive feature 'income'"):
        evaluate(lambda X: out, data, fauci_combined=["sex", "income"])
    with pytest.raises(ValueError, match="at least two distinct"):
        resolve_combined(["sex", "sex"], ["sex", "race"])
    with pytest.raises(ValueError, match="^fauci_combined: expected True"):
        resolve_combined("sex", ["sex", "race"])
    assert resolve_combined(True, ["sex"]) == [] and resolve_combined(None, ["sex", "race"]) == []
    assert resolve_combined([["sex", "race"], ("race", "age")], ["sex", "race", "age"]) == [("sex", "race"),
                                                                                             ("race", "age")]


def _frame(n: int = 160, seed: int = 0) -> FairData:
    rng = np.random.default_rng(seed)
    df = pd.DataFrame({"sex": rng.choice(["F", "M"], n), "race": rng.choice(["a", "b", "c"], n),
                       "age": rng.uniform(18, 80, n), "x": rng.normal(size=n)})
    df["y"] = (df["x"] + 0.5 * (df["sex"] == "M") + rng.normal(size=n) > 0).astype(int)
    return FairData.from_frame(df, target="y", sensitive=["sex", "race", "age"])


def test_compare_table_has_the_fauci_columns_and_the_combined_ones(one_torch_thread):
    data = _frame()
    method = PenaltyMethod(FaUCI("wdp", "sex"), model="linear", epochs=30, lr=0.1, name="fauci")
    table = compare(method, data, {"fauci": [1.0]}, fauci_combined=["sex", "race"])
    for column in ("wdp[sex]", "wdi[race]", "weo[race]", "gdp[age]", "geo[age]", "wdp[sex&race]", "weo[sex&race]"):
        assert column in table.columns and table[column].notna().all()
    with pytest.raises(ValueError, match="^fauci_combined: unknown"):
        compare(method, data, {"fauci": [1.0]}, fauci_combined=["sex", "zip"])


def test_bench_summary_lists_the_fauci_metrics(tmp_path, one_torch_thread):
    config = {"name": "fauci-summary", "run": {"fauci_combined": True},
              "data": {"dataset": "adult", "subsample": 400, "options": {"sensitive": ["sex", "race"]}},
              "methods": [{"kind": "penalty", "name": "fauci", "penalty": "fauci:wdp:sex", "values": [1.0],
                           "epochs": 2, "lr": 0.05}]}
    result = run_config(config, tmp_path)
    assert "## FaUCI metrics (test; means over seeds and folds)" in result.summary
    header = next(line for line in result.summary.splitlines() if line.startswith("| method | value | wdp[sex]"))
    assert "| wdi[sex] | weo[sex] | wdp[race] |" in header and "| wdp[sex&race] |" in header


def test_evaluate_scores_a_dropout_network_in_eval_mode_and_restores_its_mode():
    import fairopt
    from fairopt.evaluation import evaluate

    rng = np.random.default_rng(0)
    X = rng.normal(size=(200, 3))
    data = fairopt.FairData.from_arrays(X, (X[:, 0] > 0).astype(float), {"s": rng.integers(0, 2, 200)})
    model = fairopt.models.mlp(data.n_features, hidden=(16,), dropout=0.5, seed=0)
    model.train()
    first, second = evaluate(model, data), evaluate(model, data)
    assert model.training  # put back as it was
    assert first["accuracy"] == second["accuracy"]  # dropout off: the same outputs every time
    model.eval()
    assert evaluate(model, data)["accuracy"] == first["accuracy"] and not model.training
