"""Control rounds on the live engine (tiny real models): a plain round now and then changes no greedy
output, a seed under sampling still repeats its text (no control rounds there), and the verdict's
correction is learned from them."""
from __future__ import annotations

import pytest

from engine.decoding import verdict
from engine.decoding.events import RoundEvent, TokenEvent
from engine.sampling import SamplingParams
from engine.decoding.session import GenerationSettings, Session

MESSAGES = [{"role": "user", "content": "the model is fast"}]


@pytest.fixture(scope="module")
def session(tiny):
    s = Session(tiny["target"], str(tiny["drafter"]), calibrate=False)
    yield s
    s.close()


def reply(s: Session, control: bool, settings: GenerationSettings) -> tuple[list[int], list[int]]:
    s.control_rounds = control
    s.reset_state()
    events = list(s.chat(MESSAGES, settings))
    return ([e.token_id for e in events if isinstance(e, TokenEvent)],
            [len(e.drafted) for e in events if isinstance(e, RoundEvent)])


def test_control_rounds_change_no_greedy_token_and_teach_the_correction(session, monkeypatch):
    # Whether one fits its budget depends on timings of microseconds here (the budget is unit-tested
    # in test_verdict.py): with any cost allowed, they come on their cadence, every run alike.
    monkeypatch.setattr(verdict, "CONTROL_BUDGET", float("inf"))
    greedy = GenerationSettings(draft_max=3, max_tokens=120)
    with_controls, ks = reply(session, True, greedy)
    assert session.costs.pairs  # next to a drafting one: the shape's V(1)/V(n) was measured (for this reply)
    without, ks_off = reply(session, False, greedy)
    plain, _ = reply(session, False, GenerationSettings(draft_max=0, max_tokens=120))
    assert with_controls == without == plain
    assert 0 in ks[:-1] and 0 not in ks_off[:-1]  # a plain round among drafting ones, not at the end only


def test_a_seed_under_sampling_still_repeats_its_text(session):
    sampled = GenerationSettings(SamplingParams(temperature=0.9, seed=7), draft_max=3, max_tokens=120)
    first, ks = reply(session, True, sampled)
    second, _ = reply(session, True, sampled)
    assert first == second and 0 not in ks[:-1]
