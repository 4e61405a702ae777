"""Speculative sampling with drafts from past conversations follows the target's distribution.

History drafts (engine.drafting.history_index, asked by LookupDrafter(history=...) when the
conversation itself has no match) are proposed deterministically, as prompt-lookup drafts are:
q is a point mass, so a drafted x is kept with probability p(x) and a rejection samples p
without x. Their counts and confidences only price and display them; nothing about them may
change what is sampled. This is the same test as tests/engine/decoding/test_sampling_exactness.py, whose helpers
it uses: replies over many seeds from the real loop (`Session`), grouped by prefix at every
position, against the exact distribution (the target's own logits for that prefix through the
float64 chain of tests/llama_oracle.py, checked against llama.cpp's chain for each prefix).

The index holds past conversations: the prompt with the target's greedy reply, counted three
times (confidence 4/5, so history proposes the greedy continuation on the greedy path), and the
prompt with SAMPLED of the target's own sampled replies at T = 0.6 (seeds unused by the tests),
so that off the greedy path history still has something to say, while the first token after the
prompt stays confident enough to draft (at T = 1 the replies' first tokens spread too thin). The target finds those tokens
likely but not certain: drafts are kept and rejected both, in later rounds too.

False alarms: each case passes at p > ALPHA = 1e-3 (a correct engine fails a given case with
probability 1e-3 over the choice of seeds; the seeds are fixed, so runs repeat). Negative controls
must reject at p < 1e-6: a residual that keeps the drafted token, and every draft token accepted.
About 15 s on the 2-core machine.
"""
from __future__ import annotations

from collections import Counter
from dataclasses import replace

import pytest
from test_sampling_exactness import (
    ALPHA,
    BROKEN_ORIGINALS,
    PROMPT,
    REJECT,
    Case,
    goodness_of_fit,
    patched,
    reference_for,
    replies,
    residual_keeping_the_lookup_token,
    sharp_rig,
)

from engine.decoding.events import DoneEvent, RoundEvent, TokenEvent
from engine.decoding.session import GenerationSettings, Session
from engine.drafting.draft_choice import DraftKind
from engine.drafting.history_index import HistoryIndex, vocab_fingerprint
from engine.sampling import SamplingParams

#: Times the prompt and greedy reply are counted: confidence (3 + 1) / (3 + 2) = 0.8 on its own.
GREEDY_ADDED = 3
SAMPLED = 30

CASES = {
    "history k=3": Case("lookup", 3, SamplingParams(0.6, 40, 0.95, 0.02), tokens=8),
    "history k=8, T=1": Case("lookup", 8, SamplingParams(1.0, 40, 1.0, 0.0), tokens=8),
    "history + model k=3, top-k 0, p_min 0.3": Case("lookup+model", 3, SamplingParams(0.8, 0, 0.9, 0.05), tokens=8,
                                                     p_min=0.3),
}


@pytest.fixture(scope="module")
def rig(tmp_path_factory):
    for rig in sharp_rig(tmp_path_factory.mktemp("sharp-history")):
        session = rig.session
        prompt = session.target.tokenize(PROMPT, add_special=True)

        def reply(params: SamplingParams) -> list[int]:
            events = list(session.generate_tokens(prompt, GenerationSettings(params, 0, 12)))
            assert isinstance(events[-1], DoneEvent)
            return [e.token_id for e in events if isinstance(e, TokenEvent)]

        index = HistoryIndex(vocab_fingerprint(session.target))
        greedy = reply(SamplingParams(0.0))
        for _ in range(GREEDY_ADDED):
            index.add(prompt + greedy)
        for seed in range(1_000_000, 1_000_000 + SAMPLED):
            index.add(prompt + reply(SamplingParams(0.6, seed=seed)))
        session.use_history(index)
        yield rig


def counting_history_rounds(monkeypatch, session: Session) -> Counter:
    """Tee the session's events: per history round, tokens drafted and rejected, and whether
    drafted tokens were kept after the first round."""
    seen, complete = Counter(), session.complete

    def tee(prompt, settings):
        for e in complete(prompt, settings):
            if isinstance(e, RoundEvent) and e.drafter is DraftKind.HISTORY:
                seen["rounds"] += 1
                seen["drafted"] += len(e.drafted)
                seen["rejected"] += bool(e.rejected)
                seen["later"] += e.round > 1 and e.accepted > 0
            yield e

    monkeypatch.setattr(session, "complete", tee)
    return seen


@pytest.mark.parametrize("name", list(CASES))
def test_sampled_replies_with_history_drafts_follow_the_target(rig, monkeypatch, name):
    case = CASES[name]
    history = counting_history_rounds(monkeypatch, rig.session)
    samples = replies(rig, case)
    p, df, positions = goodness_of_fit(samples, reference_for(rig, case), case.tokens)
    assert p > ALPHA, f"{name}: replies do not follow the target's distribution (p={p:.2g}, df={df})"
    assert positions >= 3 and df >= 20, (positions, df)
    # the history drafts were real: many, some kept and some rejected, kept after the first round too
    assert history["drafted"] > case.n and history["rejected"] > case.n // 10, history
    assert history["later"] > case.n // 10, history


BROKEN_RULES = {
    "history residual keeps the drafted token": ("history k=8, T=1", "sample_residual", residual_keeping_the_lookup_token, 400),
    "every history draft token accepted": ("history k=3", "accept_draft_token", lambda p, q, tok, rng: True, 200),
}


@pytest.mark.parametrize("broken", list(BROKEN_RULES))
def test_rejects_a_broken_rule_for_history_drafts(rig, monkeypatch, broken):
    name, function, fake, n = BROKEN_RULES[broken]
    assert function in BROKEN_ORIGINALS
    case = replace(CASES[name], n=n)
    history = counting_history_rounds(monkeypatch, rig.session)
    patched(monkeypatch, function, fake)
    samples = replies(rig, case, seed0=90_000)
    p, df, _ = goodness_of_fit(samples, reference_for(rig, case), case.tokens)
    assert history["drafted"] > n, history  # what broke was the rule for history drafts
    assert p < REJECT, f"{broken}: not detected (p={p:.2g}, df={df})"
