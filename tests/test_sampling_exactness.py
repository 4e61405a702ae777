"""Speculative sampling follows the target's distribution: a statistical test over many seeds.

The exact joint distribution of the first two reply tokens is computed from the target's own
logits, one token at a time. Speculative samples (k = 2, so the first round's accept/reject and
residual sampling decide those tokens) and plain samples must both fit it; the third token's
distribution must be the same for both. Seeds are fixed, so the test is repeatable. The same
test must reject two wrong samplers (it can fail): the drafter's own distribution, and
speculative sampling with the classic bug of resampling from p instead of norm(max(0, p - q)).
"""
from __future__ import annotations

from collections import Counter

import numpy as np
import pytest
from scipy import stats as sst

import engine.decoding.speculative as spec
from engine.decoding.events import RoundEvent, TokenEvent
from engine.decoding.sampling import SamplingParams, distribution
from engine.decoding.session import GenerationSettings, Session

PROMPT = "hello world the"
N = 3000
PARAMS = dict(temperature=1.0, top_k=6, top_p=1.0, min_p=0.0)


@pytest.fixture(scope="module")
def sessions(tiny):
    pair = Session(tiny["target"], str(tiny["drafter"]), calibrate=False)
    plain = Session(tiny["target"], None, calibrate=False)
    drafter_alone = Session(tiny["drafter"], None, calibrate=False)
    yield pair, plain, drafter_alone
    for s in (pair, plain, drafter_alone):
        s.close()


def sample(session: Session, draft_max: int, n: int = N, seed0: int = 0) -> list[tuple[int, ...]]:
    """Three-token replies for n seeds; also counts rounds that rejected a draft token."""
    out = []
    sample.rejections = 0
    for seed in range(seed0, seed0 + n):
        settings = GenerationSettings(sampling=SamplingParams(seed=seed, **PARAMS), draft_max=draft_max, max_tokens=3)
        events = list(session.complete(PROMPT, settings))
        sample.rejections += sum(1 for e in events if isinstance(e, RoundEvent) and e.rejected)
        out.append(tuple(e.token_id for e in events if isinstance(e, TokenEvent)))
    return out


def exact_pairs(session: Session) -> dict[tuple[int, int], float]:
    """P(t1, t2) under the target's sampling transforms, from single-token decoding."""
    model = session.target
    params = SamplingParams(**PARAMS)
    prompt = model.tokenize(PROMPT, add_special=True)
    model.clear()
    first = distribution(np.array(model.decode(prompt, "last")[0]), params)
    joint = {}
    for t1, p1 in zip(first.ids, first.probs):
        model.truncate(len(prompt))
        second = distribution(np.array(model.decode([int(t1)], "last")[0]), params)
        for t2, p2 in zip(second.ids, second.probs):
            joint[(int(t1), int(t2))] = float(p1 * p2)
    model.clear()
    return joint


def gof_pvalue(samples: list[tuple[int, ...]], exact: dict[tuple[int, int], float]) -> float:
    """Chi-square goodness of fit of the (t1, t2) counts; cells expecting < 5 are pooled."""
    counts = Counter(s[:2] for s in samples)
    n = len(samples)
    if any(c not in exact for c in counts):
        return 0.0  # a pair the target can never produce
    big = [c for c, p in exact.items() if p * n >= 5]
    observed = [counts.get(c, 0) for c in big]
    expected = [exact[c] * n for c in big]
    rest_obs = n - sum(observed)
    rest_exp = n - sum(expected)
    if rest_exp > 0:
        observed.append(rest_obs)
        expected.append(rest_exp)
    return float(sst.chisquare(observed, expected).pvalue)


def two_sample_pvalue(a: list[int], b: list[int]) -> float:
    keys = sorted(set(a) | set(b))
    table = np.array([[Counter(a)[k] for k in keys], [Counter(b)[k] for k in keys]])
    table = table[:, table.sum(axis=0) >= 10]  # drop cells too sparse for the chi-square approximation
    return float(sst.chi2_contingency(table).pvalue)


def test_speculative_sampling_follows_the_target_distribution(sessions):
    pair, plain, _ = sessions
    exact = exact_pairs(plain)
    assert abs(sum(exact.values()) - 1.0) < 1e-9
    spec_samples = sample(pair, draft_max=2)
    rejections = sample.rejections
    plain_samples = sample(plain, draft_max=0, seed0=10_000)
    p_spec = gof_pvalue(spec_samples, exact)
    p_plain = gof_pvalue(plain_samples, exact)
    p_third = two_sample_pvalue([s[2] for s in spec_samples if len(s) > 2], [s[2] for s in plain_samples if len(s) > 2])
    assert p_plain > 1e-3, f"plain sampling does not fit the exact distribution (p={p_plain:.2g})"
    assert p_spec > 1e-3, f"speculative sampling does not fit the target's distribution (p={p_spec:.2g})"
    assert p_third > 1e-3, f"third token differs between speculative and plain sampling (p={p_third:.2g})"
    # The drafter was wrong often enough for the rejection path to carry real weight.
    assert rejections > N // 10, rejections


def test_the_same_test_rejects_wrong_samplers(sessions, monkeypatch):
    pair, plain, drafter_alone = sessions
    exact = exact_pairs(plain)
    # 1. Sampling from the drafter's distribution q instead of the target's p.
    assert gof_pvalue(sample(drafter_alone, draft_max=0), exact) < 1e-6
    # 2. Speculative sampling that resamples from p after a rejection (a classic bug).
    monkeypatch.setattr(spec, "sample_residual", lambda p, q, tok, n_vocab, rng: p.sample(rng))
    assert gof_pvalue(sample(pair, draft_max=2), exact) < 1e-6
