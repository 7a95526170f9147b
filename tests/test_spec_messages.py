"""Spec strings a user gets slightly wrong get an error that says what was meant (issue: a
fairlearn user's first hour, point 7)."""

from __future__ import annotations

import pytest

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
