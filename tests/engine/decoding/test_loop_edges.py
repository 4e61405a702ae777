"""Edges of the loop and the model drafter, on tiny real models (issue 9, item 6)."""
from __future__ import annotations

import threading

import numpy as np
import pytest

from engine.drafting.model import ModelDrafter
from engine.decoding.events import DoneEvent, RoundEvent, TokenEvent
from engine.llama.backend import LlamaModel
from engine.llama.types import LoadSettings, Logits
from engine.drafting.request import DraftRequest
from engine.sampling import SamplingParams
from engine.decoding.session import GenerationSettings, Session
from engine.errors import EngineError

GREEDY = SamplingParams()
CONTEXT = [1, 17, 42, 99, 7, 23]


@pytest.fixture(scope="module")
def drafter_model(tiny):
    m = LlamaModel(tiny["drafter"], LoadSettings(n_ctx=256))
    yield m
    m.close()


def first_guess(model: LlamaModel) -> int:
    model.clear()
    guess = int(np.argmax(model.decode(CONTEXT, Logits.LAST)[0]))
    model.clear()
    return guess


def test_a_draft_ends_before_an_id_the_target_cannot_produce(drafter_model):
    guess = first_guess(drafter_model)
    d = ModelDrafter(drafter_model, target_vocab=guess)  # the target's vocabulary stops just below it
    assert d.propose(CONTEXT, DraftRequest(model_k=4), GREEDY, np.random.default_rng(0)).tokens == []
    wide = ModelDrafter(drafter_model, target_vocab=guess + 1)
    assert wide.propose(CONTEXT, DraftRequest(model_k=4), GREEDY, np.random.default_rng(0)).tokens[0] == guess


def test_nothing_is_drafted_after_an_end_of_generation_guess(drafter_model):
    guess = first_guess(drafter_model)
    d = ModelDrafter(drafter_model, is_eog=lambda t: t == guess)
    assert d.propose(CONTEXT, DraftRequest(model_k=6), GREEDY, np.random.default_rng(0)).tokens == [guess]
    normal = ModelDrafter(drafter_model, is_eog=lambda t: False)
    assert len(normal.propose(CONTEXT, DraftRequest(model_k=6), GREEDY, np.random.default_rng(0)).tokens) == 6


def test_a_stop_request_ends_drafting_between_steps(drafter_model):
    stop = threading.Event()
    stop.set()
    d = ModelDrafter(drafter_model, is_eog=lambda t: False)
    assert len(d.propose(CONTEXT, DraftRequest(model_k=8), GREEDY, np.random.default_rng(0), stop=stop).tokens) == 1


def test_catch_up_is_timed_apart_from_drafting(drafter_model):
    d = ModelDrafter(drafter_model, is_eog=lambda t: False)
    drafter_model.clear()
    d.begin(CONTEXT[:2])
    draft = d.propose(CONTEXT, DraftRequest(model_k=2), GREEDY, np.random.default_rng(0))
    # It had read one token of six: four are a backlog read in one batch, the sixth goes with the first step.
    assert draft.catchup_tokens == 4 and draft.catchup_s > 0 and len(draft.tokens) == 2
    again = d.propose(CONTEXT + draft.tokens[:1] + [5], DraftRequest(model_k=2), GREEDY, np.random.default_rng(0))
    assert again.catchup_tokens == 0  # the usual one or two unread tokens are part of drafting


def test_a_fixed_k_beyond_the_batch_is_capped(tiny):
    s = Session(tiny["target"], str(tiny["drafter"]), target_load=LoadSettings(n_batch=8), calibrate=False)
    try:
        events = list(s.complete("hello world the code", GenerationSettings(draft_max=40, max_tokens=30)))
        rounds = [e for e in events if isinstance(e, RoundEvent)]
        assert isinstance(events[-1], DoneEvent) and max(len(r.drafted) for r in rounds) == 7
    finally:
        s.close()


def test_k_zero_with_a_drafter_loaded_leaves_the_drafter_idle(tiny):
    s = Session(tiny["target"], str(tiny["drafter"]), calibrate=False)
    try:
        before = s.draft_model.passes
        events = list(s.complete("hello world the code", GenerationSettings(draft_max=0, max_tokens=12)))
        assert events[-1].stats.tokens == 12 and s.draft_model.passes == before
    finally:
        s.close()


def test_same_seed_and_fixed_k_give_the_same_sampled_text(tiny):
    s = Session(tiny["target"], str(tiny["drafter"]), calibrate=False)
    try:
        def text(seed: int) -> list[int]:
            settings = GenerationSettings(draft_max=3, max_tokens=30, sampling=SamplingParams(temperature=1.0, seed=seed))
            return [e.token_id for e in s.complete("hello world the code", settings) if isinstance(e, TokenEvent)]

        a, b, c = text(7), text(7), text(8)
        assert a == b and a != c
    finally:
        s.close()


def test_a_failing_rewind_does_not_hide_the_error_that_stopped_the_loop(tiny, monkeypatch):
    s = Session(tiny["target"], None, calibrate=False)
    try:
        trims = []

        def broken_truncate(n):
            trims.append(n)
            raise RuntimeError("and the cache could not be trimmed")

        def broken_check(token):
            # After the verify pass, before the rewind: the cache holds more than the context.
            monkeypatch.setattr(s.target, "truncate", broken_truncate)
            raise EngineError("the end-of-generation check broke")

        monkeypatch.setattr(s.target, "is_eog", broken_check)
        with pytest.raises(EngineError, match="check broke"):
            list(s.complete("hello world the code", GenerationSettings(draft_max=0, max_tokens=10)))
        assert trims  # the rewind was attempted, failed, and the first error still came out
    finally:
        monkeypatch.undo()
        s.close()


def test_thread_defaults_follow_physical_cores_affinity_and_quota(tmp_path, monkeypatch):
    from engine.llama import threads

    sysfs = tmp_path / "cpu"
    for cpu, siblings in {0: "0,2", 1: "1,3", 2: "0,2", 3: "1,3"}.items():  # 2 cores, 2 hyper-threads each
        (sysfs / f"cpu{cpu}" / "topology").mkdir(parents=True)
        (sysfs / f"cpu{cpu}" / "topology" / "thread_siblings_list").write_text(siblings + "\n")
    assert threads.physical_cores({0, 1, 2, 3}, sysfs) == 2
    assert threads.physical_cores({0, 2}, sysfs) == 1  # affinity to one core's two threads
    cg = tmp_path / "cg"
    cg.mkdir()
    (cg / "cpu.max").write_text("150000 100000\n")
    assert threads.cgroup_cpu_limit(cg) == 1.5
    (cg / "cpu.max").write_text("max 100000\n")
    assert threads.cgroup_cpu_limit(cg) is None
    monkeypatch.setenv("DRAFTLIGHT_THREADS", "3")
    assert threads.default_threads() == 3 and threads.default_batch_threads() == 3
    monkeypatch.setenv("DRAFTLIGHT_THREADS", "none")
    assert 1 <= threads.default_threads() <= threads.default_batch_threads() == len(threads.allowed_cpus())


def test_auto_learns_per_reply_and_a_continuation_goes_on_from_its_reply(tiny):
    """Each reply's Auto starts afresh (policy.ReplyAuto); Continue goes on from what its reply learned and
    says so; the benchmark's reset forgets even that."""
    s = Session(tiny["target"], str(tiny["drafter"]))
    try:
        settings = GenerationSettings(draft_max="auto", max_tokens=12)
        msgs = [{"role": "user", "content": "hello world"}]
        first = list(s.chat(msgs, settings))
        done = first[-1]
        assert done.stats.auto_rounds_before == 0 and done.stats.rounds > 0
        second = list(s.chat([{"role": "user", "content": "the model is fast"}], settings))[-1].stats
        assert second.auto_rounds_before == 0
        assert list(s.chat(msgs, settings))[-1].stats.auto_rounds_before == 0  # the same question again
        again = list(s.chat(msgs, settings))
        prefix = s.reply_tokens(again[-1].text, [e.token_id for e in again if isinstance(e, TokenEvent)])
        went_on = list(s.chat(msgs, settings, reply_prefix=prefix))[-1].stats
        assert went_on.auto_rounds_before == again[-1].stats.rounds
        s.reset_state()
        assert list(s.chat(msgs, settings, reply_prefix=prefix))[-1].stats.auto_rounds_before == 0
        fixed = list(s.chat(msgs, GenerationSettings(draft_max=2, max_tokens=12)))[-1].stats
        assert fixed.auto_rounds_before == 0
    finally:
        s.close()
