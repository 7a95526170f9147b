"""Derivatives from additive per-group sums (solvers.sums): chunked full-data passes."""

from __future__ import annotations

import pytest
import torch

import fairopt
from fairopt.constraints import DemographicParity, DisparateImpact, GeDI
from solvers.derivatives import LocalDerivatives
from solvers.losses import bce_loss
from solvers.problem import as_constraint_set, trainable_parameters
from solvers.sums import ChunkedDerivatives


@pytest.fixture(scope="module")
def adult():
    frame, _ = fairopt.datasets.load_frame("adult")
    frame = frame.sample(n=900, random_state=0)
    X = frame[["age", "education-num", "hours-per-week", "capital-gain", "capital-loss"]].to_numpy(float)
    return fairopt.FairData.from_arrays(X, frame["income"].to_numpy(float),
                                        {"sex": (frame["sex"] == "Male").to_numpy(float)})


@pytest.mark.parametrize("chunk_rows", [1, 97, 300, 899])
def test_chunked_full_pass_equals_the_unchunked_one(adult, chunk_rows):
    """f, g, c, J and the exact rows of a full-data pass in chunks equal one pass over all
    rows (up to float summation order)."""
    torch.manual_seed(0)
    model = fairopt.models.mlp(adult.n_features, hidden=(6,), seed=0)
    params = trainable_parameters(model)
    cons = as_constraint_set([DisparateImpact("sex", delta=0.8), DemographicParity("sex", bound=0.05)])
    cons.setup(adult)
    ref = LocalDerivatives()(model, params, bce_loss, cons, adult, adult)
    got = ChunkedDerivatives(chunk_rows)(model, params, bce_loss, cons, adult, adult)
    assert got.f == pytest.approx(ref.f, rel=1e-5)
    torch.testing.assert_close(got.g, ref.g, rtol=1e-4, atol=1e-6)
    torch.testing.assert_close(got.c, ref.c, rtol=1e-6, atol=1e-7)
    torch.testing.assert_close(got.J.to(ref.J.dtype), ref.J, rtol=1e-4, atol=1e-6)
    # the local exact rows are float32 means, the chunked ones float64 sums of the same hard labels
    torch.testing.assert_close(got.c_exact, ref.c_exact, rtol=0, atol=1e-6)


def test_chunked_oracle_falls_back_to_one_pass_when_it_cannot_chunk(adult):
    """A batch that fits one chunk, or a constraint without additive sums (GeDI), is
    computed by the local oracle, exactly."""
    model = fairopt.models.linear(adult.n_features, seed=0)
    params = trainable_parameters(model)
    for members, chunk in (([DisparateImpact("sex", delta=0.8)], 10_000), ([GeDI("sex", bound=0.1)], 50)):
        cons = as_constraint_set(members)
        cons.setup(adult)
        ref = LocalDerivatives()(model, params, bce_loss, cons, adult, adult)
        got = ChunkedDerivatives(chunk)(model, params, bce_loss, cons, adult, adult)
        assert got.f == ref.f and torch.equal(got.g, ref.g) and torch.equal(got.J, ref.J)


def test_chunk_rows_must_be_positive():
    with pytest.raises(ValueError, match="chunk_rows"):
        ChunkedDerivatives(0)


def test_sqp_with_chunk_rows_never_runs_a_forward_pass_over_all_rows(adult):
    """StochasticSQP(chunk_rows=128) with mini-batches of 150: no forward pass ever sees more
    than 150 rows (the epoch-end candidates, the polish and the final check run in chunks),
    and the returned model's feasibility, recomputed on ALL rows, is what the engine says.
    (Chunked passes equal one pass up to float order, see above; the hard-label rows are
    discontinuous, so the two runs may then return different, equally checked iterates.)"""
    from fairopt.constraints import DisparateImpact
    from fairopt.measures import disparate_impact
    from solvers import StochasticSQP

    class Recording(torch.nn.Module):
        def __init__(self, inner):
            super().__init__()
            self.inner, self.sizes = inner, []

        def forward(self, X):
            self.sizes.append(X.shape[0])
            return self.inner(X)

    model = Recording(fairopt.models.mlp(adult.n_features, hidden=(6,), seed=0))
    result = StochasticSQP(epochs=4, batch_size=150, seed=0, chunk_rows=128).fit(
        model, adult, constraints=[DisparateImpact("sex", delta=0.8)])
    assert max(model.sizes) <= 150 and any(r.get("phase") == "polish" for r in result.history.records)
    with torch.no_grad():
        di = float(disparate_impact((model(adult.X) > 0).long(), adult.sensitive["sex"]))
    assert result.info["feasible"] == (di >= 0.8 - 1e-9), di


def test_chunk_rows_is_validated():
    from solvers import StochasticSQP

    for bad in (0, -5, 2.5, "100"):
        with pytest.raises(ValueError, match="chunk_rows"):
            StochasticSQP(chunk_rows=bad)
