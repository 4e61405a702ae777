"""The rules of speculative sampling, one at a time, against numbers written by hand.

A scripted uniform stream stands in for the random generator where a test is about which
token a given uniform number must pick (the inverse CDF, the acceptance threshold); the
distribution checks at the end use the real generator and exact probabilities.
"""
from __future__ import annotations

import numpy as np
import pytest
from scipy import stats as sst

from engine.sampling import (
    Distribution,
    SamplingParams,
    accept_draft_token,
    distribution,
    sample_residual,
    softmax_prob,
    top_prob,
)


pytestmark = pytest.mark.filterwarnings("error::RuntimeWarning")  # no log(0), no overflow


class Uniforms:
    """Plays back the given uniform numbers in [0, 1) as rng.random() would return them."""

    def __init__(self, *values: float) -> None:
        self.values = list(values)

    def random(self) -> float:
        return self.values.pop(0)


def dist(ids, probs) -> Distribution:
    return Distribution(np.array(ids, dtype=np.int64), np.array(probs, dtype=np.float64))


# -- parameters ------------------------------------------------------------------------------
@pytest.mark.parametrize("kwargs, message", [
    (dict(top_k=-1), "top-k must be 0 (off) or positive"),
    (dict(top_p=0.0), "top-p must be in (0, 1]"),
    (dict(top_p=1.01), "top-p must be in (0, 1]"),
    (dict(min_p=-0.1), "min-p must be in [0, 1)"),
    (dict(min_p=1.0), "min-p must be in [0, 1)"),
])
def test_out_of_range_parameters_are_refused_with_a_reason(kwargs, message):
    with pytest.raises(ValueError) as err:
        SamplingParams(temperature=1.0, **kwargs).validate()
    assert str(err.value) == message


def test_edge_parameters_are_valid():
    SamplingParams(temperature=1.0, top_k=0, top_p=1.0, min_p=0.0).validate()
    SamplingParams(temperature=1.0, top_k=1, top_p=1e-9, min_p=0.999).validate()


def test_greedy_means_no_positive_temperature():
    assert SamplingParams(temperature=0.0).greedy and SamplingParams(temperature=-1.0).greedy
    assert not SamplingParams(temperature=0.01).greedy


# -- a distribution --------------------------------------------------------------------------
def test_prob_and_dense():
    d = dist([5, 2, 9], [0.5, 0.3, 0.2])
    assert (d.prob(5), d.prob(2), d.prob(9), d.prob(7), d.prob(0)) == (0.5, 0.3, 0.2, 0.0, 0.0)
    assert d.dense(11).tolist() == [0, 0, 0.3, 0, 0, 0.5, 0, 0, 0, 0.2, 0]


@pytest.mark.parametrize("u, token", [
    (0.0, 7), (0.19999, 7), (0.2, 8), (0.49999, 8), (0.5, 9), (0.99999, 9),
])
def test_a_uniform_number_picks_by_the_cumulative_distribution(u, token):
    # cumulative 0.2, 0.5, 1.0: [0, 0.2) -> 7, [0.2, 0.5) -> 8, [0.5, 1) -> 9
    assert dist([7, 8, 9], [0.2, 0.3, 0.5]).sample(Uniforms(u)) == token


def test_zero_probability_is_never_drawn():
    d = dist([1, 2, 3, 4], [0.5, 0.0, 0.5, 0.0])
    assert [d.sample(Uniforms(u)) for u in (0.0, 0.4999, 0.5, 0.9999)] == [1, 1, 3, 3]


def test_unnormalised_weights_draw_in_proportion():
    assert [dist([0, 1], [1.0, 3.0]).sample(Uniforms(u)) for u in (0.24, 0.26)] == [0, 1]


@pytest.mark.parametrize("u, index", [
    (0.0, 0), (0.40955, 4095), (0.40965, 4096), (0.81925, 8192), (0.99995, 9999), (0.50005, 5000),
])
def test_draws_over_many_blocks_are_exact(u, index):
    """10,000 equal weights: the draw goes by blocks, then inside one; u * 10,000 is the index."""
    d = Distribution(np.arange(10_000, dtype=np.int64)[::-1].copy(), np.full(10_000, 1e-4))
    assert d.sample(Uniforms(u)) == 9_999 - index


@pytest.mark.parametrize("u, index", [(0.5, 4096), (0.25, 2048), (0.75, 6144), (0.0, 0)])
def test_a_uniform_number_on_a_block_edge_picks_the_next_token(u, index):
    """8,192 weights of 1: u * 8,192 lands exactly on a running sum, which belongs to the next token."""
    assert Distribution(np.arange(8_192), np.ones(8_192)).sample(Uniforms(u)) == index


def test_draws_over_many_blocks_follow_the_weights():
    rng = np.random.default_rng(7)
    weights = np.exp(rng.standard_normal(9_000) * 2)
    probs = weights / weights.sum()
    d = Distribution(np.arange(9_000, dtype=np.int64), probs)
    draws = np.array([d.sample(rng) for _ in range(4_000)])
    cell = np.searchsorted(np.searchsorted(np.cumsum(probs), np.linspace(0, 1, 21)[1:-1]), np.arange(9_000), side="right")
    counts = np.bincount(cell[draws], minlength=20)  # 20 cells of about equal mass
    assert sst.chisquare(counts, np.bincount(cell, weights=probs) * draws.size).pvalue > 1e-3


def test_the_most_likely_token_comes_first_even_when_nothing_is_cut():
    row = np.array([0.0, 3.0, 1.0, 2.0, 2.5], dtype=np.float32)
    for params in (SamplingParams(1.0, 0, 1.0, 0.0), SamplingParams(1.0, 0, 0.99, 0.0), SamplingParams(1.0, 3, 1.0, 0.01)):
        d = distribution(row, params)
        assert d.ids[0] == 1 and d.probs[0] == d.probs.max()
    d = distribution(row, SamplingParams(1.0, 0, 1.0, 0.0))
    assert sorted(d.ids.tolist()) == [0, 1, 2, 3, 4] and d.ids.dtype == np.int64 and d.probs.dtype == np.float64


def test_greedy_probabilities():
    row = np.log(np.array([0.1, 0.2, 0.3, 0.4], dtype=np.float32)) + np.float32(10.0)  # shifted: only differences count
    assert softmax_prob(row, 2) == pytest.approx(0.3, rel=1e-5)
    assert softmax_prob(row, 0) == pytest.approx(0.1, rel=1e-5)
    tok, p = top_prob(row)
    assert tok == 3 and p == pytest.approx(0.4, rel=1e-5)


# -- acceptance: keep x with probability min(1, p(x) / q(x)) ----------------------------------
P = dist([0, 1, 2], [0.5, 0.3, 0.2])
Q = dist([1, 2, 3], [0.6, 0.1, 0.3])


@pytest.mark.parametrize("token, u, kept", [
    (1, 0.49, True), (1, 0.51, False),   # p/q = 0.3/0.6 = 0.5
    (2, 0.0, True), (2, 0.99, True),     # p/q = 2: always
    (3, 0.0, False),                     # p(x) = 0: never
])
def test_acceptance_threshold(token, u, kept):
    assert accept_draft_token(P, Q, token, Uniforms(u)) is kept


@pytest.mark.parametrize("token, u, kept", [(0, 0.49, True), (0, 0.51, False), (2, 0.19, True), (2, 0.21, False), (5, 0.0, False)])
def test_acceptance_of_a_lookup_draft_is_p(token, u, kept):
    assert accept_draft_token(P, None, token, Uniforms(u)) is kept  # q is a point mass: min(1, p / 1)


def test_acceptance_where_the_drafter_gave_no_probability():
    # q(x) = 0 cannot come from sampling q; keep x exactly when the target allows it
    assert accept_draft_token(P, Q, 0, Uniforms(0.99)) is True
    assert accept_draft_token(dist([4], [1.0]), Q, 0, Uniforms(0.0)) is False


# -- the residual: norm(max(0, p - q)) -------------------------------------------------------
@pytest.mark.parametrize("u, token", [(0.0, 0), (0.74, 0), (0.76, 1), (0.99, 1)])
def test_residual_of_a_model_draft(u, token):
    p = dist([0, 1, 2], [0.5, 0.3, 0.2])
    q = dist([2, 0, 1], [0.6, 0.2, 0.2])  # p - q = [0.3, 0.1, -0.4]: 0 with 3/4, 1 with 1/4
    assert sample_residual(p, q, 2, 3, Uniforms(u)) == token


@pytest.mark.parametrize("u, token", [(0.0, 1), (0.59, 1), (0.61, 2), (0.99, 2)])
def test_residual_of_a_lookup_draft_is_p_without_the_drafted_token(u, token):
    assert sample_residual(P, None, 0, 3, Uniforms(u)) == token  # [0.3, 0.2] / 0.5


def test_residual_reads_q_outside_the_targets_vocabulary():
    # a drafter's vocabulary may be larger than the target's: ids past n_vocab are simply not in p
    p = dist([0, 1, 2], [0.5, 0.3, 0.2])
    q = dist([7, 1], [0.5, 0.5])
    assert sample_residual(p, q, 7, 3, Uniforms(0.0)) == 0
    assert sample_residual(p, q, 7, 3, Uniforms(0.99)) == 2  # residual [0.5, 0, 0.2] / 0.7


def test_residual_when_p_equals_q_falls_back_to_p():
    assert sample_residual(P, P, 0, 3, Uniforms(0.6)) == 1


def test_accept_then_residual_reproduces_the_target():
    """Draw x from q, keep it with min(1, p/q), else draw the residual: the result is p (the
    theorem speculative sampling rests on), for a model draft and for a lookup draft."""
    p = dist([0, 1, 2, 3, 4], [0.35, 0.25, 0.2, 0.15, 0.05])
    q = dist([4, 3, 0, 1, 5], [0.3, 0.3, 0.2, 0.1, 0.1])
    rng = np.random.default_rng(11)
    n = 8_000
    for draft in ("model", "lookup"):
        out = []
        for _ in range(n):
            x = q.sample(rng) if draft == "model" else 3
            qq = q if draft == "model" else None
            out.append(x if accept_draft_token(p, qq, x, rng) else sample_residual(p, qq, x, 6, rng))
        counts = np.bincount(out, minlength=6)
        assert counts[5] == 0
        assert sst.chisquare(counts[:5], p.probs * n).pvalue > 1e-3, (draft, counts)
