"""``auto_margin`` of the rate rows against a brute-force simulation: binomial draws of the
group counts on a training sample and on a new sample, the row recomputed by hand on each."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from fairopt.certificate import auto_margin
from fairopt.constraints import DisparateImpact
from fairopt.data import FairData

DELTA = 0.8
HELD_OUT = 0.3
DRAWS = 40_000


def _rows_data(sizes: list[int], rates: list[float]) -> tuple[FairData, torch.Tensor]:
    """Groups ``0..K-1`` of ``sizes`` rows whose hard outputs have positive ``rates``."""
    s = np.concatenate([np.full(n, g) for g, n in enumerate(sizes)])
    out = np.concatenate([np.where(np.arange(n) < round(p * n), 4.0, -4.0) for n, p in zip(sizes, rates)])
    kinds = {"s": "binary" if len(sizes) == 2 else "categorical"}
    data = FairData.from_arrays(np.c_[out], (out > 0).astype(float), {"s": s}, sensitive_kinds=kinds)
    return data, torch.as_tensor(out)


def _one_vs_rest_rows(k: np.ndarray, n: np.ndarray) -> np.ndarray:
    """The DI rows by hand from group counts ``k`` (draws x K) and sizes ``n`` (K,): per group
    ``g`` (binary: group 1 only) ``delta P_rest - P_g`` and ``delta P_g - P_rest``."""
    rows = []
    for g in ([1] if k.shape[1] == 2 else range(k.shape[1])):
        p_g = k[:, g] / n[g]
        p_rest = (k.sum(axis=1) - k[:, g]) / (n.sum() - n[g])
        rows += [DELTA * p_rest - p_g, DELTA * p_g - p_rest]
    return np.stack(rows, axis=1)


def _simulated_gaps(sizes: list[int], rates: list[float], seed: int) -> np.ndarray:
    """``row(new sample) - row(training sample)`` over binomial draws of both samples' counts, the
    new sample ``HELD_OUT / (1 - HELD_OUT)`` times the training sizes per group."""
    rng = np.random.default_rng(seed)
    n = np.asarray(sizes, dtype=float)
    n_new = np.rint(n * HELD_OUT / (1.0 - HELD_OUT))
    k_train = rng.binomial(n.astype(int), rates, size=(DRAWS, len(sizes)))
    k_new = rng.binomial(n_new.astype(int), rates, size=(DRAWS, len(sizes)))
    return _one_vs_rest_rows(k_new, n_new) - _one_vs_rest_rows(k_train, n)


def _margin(sizes: list[int], rates: list[float]) -> np.ndarray:
    data, out = _rows_data(sizes, rates)
    c = DisparateImpact("s", DELTA)
    c.setup(data)
    # the hand rows are in the constraint's row order (checked on the data's own rates)
    observed = c.exact(out.to(data.X.dtype), data).double().numpy()
    by_hand = _one_vs_rest_rows(np.array([[round(p * m) for m, p in zip(sizes, rates)]], dtype=float),
                                np.asarray(sizes, dtype=float))[0]
    np.testing.assert_allclose(observed, by_hand, atol=1e-4)  # float32 rows
    return auto_margin(data, c, 0.95, HELD_OUT, outputs=out).numpy()


@pytest.mark.parametrize("sizes,rates", [([3000, 6000], [0.15, 0.2]), ([400, 1500], [0.3, 0.5]),
                                         ([20000, 40000], [0.35, 0.45])])
def test_two_groups_margin_is_the_95th_percentile_of_the_simulated_gap(sizes, rates):
    margin = _margin(sizes, rates)
    gaps = _simulated_gaps(sizes, rates, seed=0)
    quantile = np.quantile(gaps, 0.95, axis=0)
    # the normal approximation of binomial counts of hundreds of rows: within 5% of the simulation
    np.testing.assert_allclose(margin, quantile, rtol=0.05)
    exceeded = (gaps > margin).mean(axis=0)
    assert np.all(np.abs(exceeded - 0.05) < 0.01)


def test_several_groups_union_bound_over_pairs():
    """Three groups, one-vs-rest: three compared pairs, so every row is one-sided at
    ``1 - 0.05 / 3`` and a new sample violates some pair's margin at most 5% of the time."""
    sizes, rates = [1500, 3000, 4500], [0.2, 0.25, 0.3]
    margin = _margin(sizes, rates)
    gaps = _simulated_gaps(sizes, rates, seed=1)
    exceeded = (gaps > margin).mean(axis=0)
    np.testing.assert_allclose(exceeded, 0.05 / 3, atol=0.004)
    # one row per pair can be the violated one: whichever row of each pair is closer to its bound,
    # the chance that any of them exceeds its margin stays within the level
    for choice in ([0, 2, 4], [1, 3, 5], [0, 3, 4]):
        assert (gaps[:, choice] > margin[choice]).any(axis=1).mean() <= 0.05 + 0.004
