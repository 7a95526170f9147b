"""Spec strings a user gets slightly wrong get an error that says what was meant (issue: a
fairlearn user's first hour, point 7)."""

from __future__ import annotations

import warnings

import pytest

from fairopt.exceptions import FairnessWarning
from fairopt.specs import resolve_constraints


@pytest.mark.parametrize("spec, meant", [("di:gender=>0.8", "di:gender>=0.8"), ("dp:gender=<0.05", "dp:gender<=0.05"),
                                         ("di:gender>0.8", "di:gender>=0.8"), ("dp:gender<0.05", "dp:gender<=0.05")])
def test_a_reversed_or_strict_comparison_names_the_operator_meant(spec, meant):
    with pytest.raises(ValueError, match="unknown comparison") as info:
        resolve_constraints([spec])
    assert repr(meant) in str(info.value)
    assert resolve_constraints([meant])  # and what it suggests works


def test_the_list_of_kinds_shows_the_short_names():
    for bad in ("xx:gender:0.8", {"kind": "xx", "sensitive": "gender", "delta": 0.8}):
        with pytest.raises(ValueError) as info:
            resolve_constraints([bad])
        assert "'di' (disparate_impact)" in str(info.value) and "'dp' (demographic_parity)" in str(info.value)


@pytest.mark.parametrize("spec, kind", [("demographic_parity", "demographic_parity"), ("dp", "demographic_parity"),
                                        ("disparate_impact", "disparate_impact"),
                                        ("DemographicParity", "demographic_parity"),
                                        ("TruePositiveRateParity", "equal_opportunity")])
def test_a_kind_alone_asks_for_the_sensitive_feature_with_a_spec_that_works(spec, kind):
    """fairlearn names a constraint by its kind (or its class) alone; fairopt's bounds go with a sensitive
    feature, and the message shows a spec of the same kind that builds."""
    with pytest.raises(ValueError, match="does not name the sensitive feature") as info:
        resolve_constraints([spec])
    example = f"{kind}:sex>=0.8" if kind == "disparate_impact" else f"{kind}:sex<=0.05"
    assert repr(example) in str(info.value)
    assert resolve_constraints([example])


def test_a_fairlearn_class_name_with_a_feature_names_the_kind_meant():
    with pytest.raises(ValueError, match="fairlearn's EqualizedOdds is fairopt's 'equalized_odds'") as info:
        resolve_constraints(["EqualizedOdds:sex<=0.05"])
    assert "'equalized_odds:sex<=0.05'" in str(info.value)


def test_a_fairlearn_constraint_object_names_the_kind_meant():
    DemographicParity = type("DemographicParity", (), {})  # stands for fairlearn.reductions.DemographicParity
    with pytest.raises(ValueError, match="fairlearn's DemographicParity is fairopt's 'demographic_parity'"):
        resolve_constraints([DemographicParity()])
    ratio_bound = DemographicParity()
    ratio_bound.ratio = 0.8  # fairlearn keeps ratio_bound=0.8 as .ratio
    with pytest.raises(ValueError, match=r"delta about ratio_bound\*\*2 \(0.64\)"):
        resolve_constraints(ratio_bound)  # alone, not in a list: the same advice
    with pytest.raises(ValueError, match="fairlearn's DemographicParity is fairopt's kind 'demographic_parity'"):
        resolve_constraints([("DemographicParity", "sex", 0.05)])


def test_a_rate_kinds_groups_in_brackets_and_a_ratio_asked_of_demographic_parity():
    from fairopt.specs import build_constraint

    pairwise = build_constraint("di[pairwise]:race>=0.8")
    assert (pairwise.groups, pairwise.delta) == ("pairwise", 0.8)
    assert build_constraint("dp[marginal]:sex,race<=0.1").groups == "marginal"
    assert build_constraint("eodds[pairwise]:race<=0.05").groups == "pairwise"
    with pytest.raises(ValueError, match="groups: expected one of"):
        build_constraint("di[each]:race>=0.8")
    with pytest.raises(ValueError, match="a ratio of positive rates is disparate impact: write 'di:sex>=0.8'"):
        build_constraint("dp:sex>=0.8")


def test_a_bound_ending_in_x_is_relative_to_the_training_targets_own_measure():
    from fairopt.specs import build_constraint, constraint_from_spec, constraint_to_spec

    for spec, bound in (("dcov:Gender,Group2<=0.25x", 0.25), ("gedi:age:0.2x", 0.2), ("ccdcov:region<=0.3X", 0.3)):
        c = build_constraint(spec)
        assert c.bound == bound and c.relative
        assert constraint_from_spec(constraint_to_spec(c)).relative  # kept through the saved form
    assert not build_constraint("dcov:a<=0.01").relative
    with pytest.raises(ValueError, match=r"a relative bound \('0.8x'.*is for \['gedi', 'dcov', 'ccdcov'\]"):
        build_constraint("di:sex>=0.8x")


def test_a_difference_bound_in_a_tuple_and_an_intersection_label_in_a_spec():
    """("eo", "sex", None, {"bound": 0.05}) is the difference form (it was refused as repeating the tuple's
    bound); 'sex&race', the label messages give an intersection, names the spec that writes it."""
    import numpy as np
    import pandas as pd

    import fairopt
    from fairopt.exceptions import UnknownSensitiveError

    (c,) = resolve_constraints([("eo", "sex", None, {"bound": 0.05})])
    assert c.delta is None and c.bound == 0.05
    with pytest.raises(ValueError, match="repeat the tuple's own elements"):
        resolve_constraints([("eo", "sex", 0.8, {"bound": 0.05})])
    rng = np.random.default_rng(0)
    X = pd.DataFrame({"a": rng.normal(size=300)})
    S = pd.DataFrame({"sex": rng.choice(["F", "M"], 300), "race": rng.choice(["A", "B"], 300)})
    with pytest.raises(UnknownSensitiveError, match=r"is written 'sex,race' in a text spec"):
        fairopt.FairClassifier("eodds:sex&race<=0.05", epochs=3).fit(X, (X["a"] > 0).astype(int),
                                                                      sensitive_features=S)


def test_the_pairwise_spec_of_a_constraint_is_its_own_kind_and_attribute():
    """The pairwise warning's advice names the constraint's own kind, attribute and bound (it said
    'di[pairwise]:race>=0.8' for every constraint), and each spec rebuilds the pairwise constraint."""
    from fairopt.specs import build_constraint, pairwise_spec

    for text, expected in [("eodds:age_band:0.8", "eodds[pairwise]:age_band>=0.8"),
                           ("dp:sex,race<=0.1", "dp[pairwise]:sex,race<=0.1"),
                           ("eo:race<=0.05", "eo[pairwise]:race<=0.05"), ("di:g>=0.75", "di[pairwise]:g>=0.75")]:
        spec = pairwise_spec(build_constraint(text))
        assert spec == expected
        assert build_constraint(spec).get_params()["groups"] == "pairwise"
    smooth = pairwise_spec(build_constraint({"kind": "di", "sensitive": "g", "delta": 0.8, "threshold": 0.5}))
    assert "'threshold': 0.5" in smooth and "'groups': 'pairwise'" in smooth


@pytest.mark.parametrize("spec, meant", [
    (("equalized_odds", "race", 0.1), "equalized_odds:race<=0.1"),
    ("eo:sex:0.05", "equal_opportunity:sex<=0.05"),
    (("disparate_impact", "sex", 0.1), "demographic_parity:sex<=0.1"),
    (("demographic_parity", "sex", 0.8), "disparate_impact:sex>=0.8"),
    ("dp:sex:0.8", "disparate_impact:sex>=0.8"),
])
def test_a_positional_bound_of_the_other_forms_size_warns_with_the_spec_meant(spec, meant):
    """fairlearn's equalized odds and demographic parity take a difference_bound (0.05, 0.1), the four-fifths
    rule a ratio of 0.8: a positional value read in the other form hardly restricts, so the spec warns and names
    both readings; the one suggested builds without a warning."""
    with pytest.warns(FairnessWarning, match="hardly restricts") as record:
        resolve_constraints([spec])
    assert any(repr(meant) in str(w.message) for w in record)
    with warnings.catch_warnings():
        warnings.simplefilter("error", FairnessWarning)
        assert resolve_constraints([meant])


@pytest.mark.parametrize("spec", [("disparate_impact", "sex", 0.8), ("equalized_odds", "race", 0.9),
                                  ("demographic_parity", "sex", 0.05), "eodds:race>=0.1", "dp:sex<=0.8",
                                  ("eo", "sex", None, {"bound": 0.6}),
                                  {"kind": "di", "sensitive": "sex", "delta": 0.1}])
def test_a_usual_or_named_bound_builds_without_a_warning(spec):
    with warnings.catch_warnings():
        warnings.simplefilter("error", FairnessWarning)
        assert resolve_constraints([spec])
