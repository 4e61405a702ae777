"""The drafter's read of the prompt counts as the reply's time, not the prompt's.

A fixed k has its model drafter read the prompt with the target's prefill. Counted with the prefill, it
left the reply's tokens/s and its estimated speedup: short answers after long conversations showed a
fixed k=4 at 1.14x of plain decoding in tokens/s that was 0.45x with its read counted (engine bench,
this Xeon). Real tiny models; a clock the test controls, which only the drafter's read moves."""
from __future__ import annotations

import time

import pytest

from engine.decoding.events import DoneEvent
from engine.decoding.session import GenerationSettings, Session

READ_S = 5.0
TICK = 1e-6  # everything else: a microsecond a clock reading


@pytest.fixture
def clock(monkeypatch):
    now = [1000.0]

    def perf_counter() -> float:
        now[0] += TICK
        return now[0]

    monkeypatch.setattr(time, "perf_counter", perf_counter)
    return now


def done_of(session: Session, draft_max) -> DoneEvent:
    messages = [{"role": "user", "content": "hello world the model is fast " * 20}]
    events = list(session.chat(messages, GenerationSettings(draft_max=draft_max, max_tokens=8)))
    assert isinstance(events[-1], DoneEvent)
    return events[-1]


def test_a_fixed_k_s_prompt_read_is_in_its_tokens_per_second_and_not_in_its_prefill(tiny, clock):
    s = Session(tiny["target"], str(tiny["drafter"]), calibrate=False)
    try:
        begin = s.drafter.begin

        def slow_begin(context, stop=None):  # the read of the prompt takes READ_S on the test's clock
            begin(context, stop)
            clock[0] += READ_S

        s.drafter.begin = slow_begin
        st = done_of(s, 4).stats
        assert 0.0 < st.prefill_s < 0.01  # the target's prefill alone: microseconds on this clock
        assert st.wall_s > READ_S
        assert st.tokens_per_s == pytest.approx(st.tokens / (st.wall_s - st.prefill_s))
        assert st.tokens_per_s < st.tokens / READ_S  # was tokens / (a few ms): the read left out
        assert st.estimated_speedup is not None and st.estimated_speedup < 0.01  # the verdict counts it too
    finally:
        s.close()


def test_auto_reads_while_decoding_so_its_prefill_is_the_target_s_alone(tiny, clock):
    s = Session(tiny["target"], str(tiny["drafter"]), calibrate=False)
    try:
        called = []
        begin = s.drafter.begin
        s.drafter.begin = lambda context, stop=None: (called.append(1), begin(context, stop))
        st = done_of(s, "auto").stats
        assert not called and 0.0 < st.prefill_s < 0.01
    finally:
        s.close()
