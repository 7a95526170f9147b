"""Fairness and performance measures.

- :mod:`~fairopt.measures.performance`: accuracy, mse, r2, poisson_deviance, rps, poisson_rps.
- :mod:`~fairopt.measures.group`: group rates and realised fairness on hard predictions
  (disparate impact, demographic-parity difference, equal impact, equalised odds).
- :mod:`~fairopt.measures.fauci`: the FaUCI metrics WDP/WDI/WEO and GDP/GDI/GEO, on soft or
  hard predictions, differentiable for torch input.
- :mod:`~fairopt.measures.distribution`: UF and the JS divergence across intersectional cells,
  and the JS divergence's finite-sample floor.
- :mod:`~fairopt.measures.gedi`: GeDI, DIDI and binned DIDI; :mod:`~fairopt.measures.hgr`: HGR-KDE.
- :mod:`~fairopt.measures.dcov`: distance covariance family (dCov, dCorr, JdCov, CCdCov) with
  exact fast paths; :mod:`~fairopt.measures.independence`: chi-square and permutation tests;
  :mod:`~fairopt.measures.mutual_independence`: the JdCov permutation test of mutual independence.
- :mod:`~fairopt.measures.balance`: balance-property correction of Poisson rates.
- :mod:`~fairopt.measures.bootstrap` and :mod:`~fairopt.measures.binomial`: percentile-bootstrap and exact
  (Clopper-Pearson) binomial confidence intervals.
"""

from fairopt.measures.balance import apply_balance_correction, balance_correction
from fairopt.measures.dcov import ccdcov, dcorr, dcov, jdcov
from fairopt.measures.distribution import JSDivergenceFloor, intersection_cells, js_divergence, js_divergence_floor, uf
from fairopt.measures.fauci import gdi, gdp, geo, wdi, wdp, weo
from fairopt.measures.group import (
    bin_equal_width,
    bin_quantiles,
    disparate_impact,
    dp_difference,
    encode_groups,
    equal_impact,
    equalised_odds,
    group_means,
    group_rates,
)
from fairopt.measures.gedi import binned_didi, didi, gedi
from fairopt.measures.hgr import hgr_kde
from fairopt.measures.independence import IndependenceTestResult, independence_test
from fairopt.measures.mutual_independence import JdCovTestResult, jdcov_permutation_test
from fairopt.measures.performance import accuracy, mse, poisson_deviance, poisson_rps, r2, rps

__all__ = [
    # performance
    "accuracy",
    "mse",
    "r2",
    "poisson_deviance",
    "rps",
    "poisson_rps",
    # group rates on hard predictions
    "group_rates",
    "group_means",
    "disparate_impact",
    "dp_difference",
    "equal_impact",
    "equalised_odds",
    # FaUCI
    "wdp",
    "wdi",
    "weo",
    "gdp",
    "gdi",
    "geo",
    # distribution
    "uf",
    "js_divergence",
    "js_divergence_floor",
    "JSDivergenceFloor",
    "intersection_cells",
    # GeDI family and HGR
    "gedi",
    "didi",
    "binned_didi",
    "hgr_kde",
    # distance covariance family
    "dcov",
    "dcorr",
    "jdcov",
    "ccdcov",
    "independence_test",
    "IndependenceTestResult",
    "jdcov_permutation_test",
    "JdCovTestResult",
    # Poisson premiums
    "balance_correction",
    "apply_balance_correction",
    # group coding helpers
    "encode_groups",
    "bin_equal_width",
    "bin_quantiles",
]
