"""What every conversation opens with is read into the model drafter at load, and replays ask the policy what
the live loop can know.

A reply's first model draft (a fixed k: with the prefill; Auto: at its look) read the whole prompt, the chat
template's system turn included, which is the same in every conversation: 24 of a translation's 65 tokens with
the default pair, read again after every launch (and, in the benchmark, every run). The drafter reads it at
load now (Session.opening). And the replay told the policy where each reply would end (the tokens left before
it), which the live loop never knows: it knows the limit. Asked about the limit, the replay puts short replies
where the live benchmark measured them (tests/engine/drafting/test_replay.py has the figures)."""
from __future__ import annotations

import json

import pytest

from engine.drafting.policy import DraftPolicy
from engine.drafting.request import DraftRequest
from engine.decoding.replay import CostProfile, Trace, fixed_policy, load_traces, simulate
from engine.decoding.session import GenerationSettings, Session

from session_reads import counted_reads


def test_the_drafter_holds_the_template_opening_after_a_load_and_after_a_reset(tiny):
    s = Session(tiny["target"], str(tiny["drafter"]), calibrate=False)
    try:
        opening = s.opening()
        # The tiny target's template (ChatML, no default system turn) opens every conversation like this, after
        # the BOS its vocabulary asks for.
        written = s.target.tokenize("<|im_start|>user\n", add_special=False, parse_special=True)
        assert opening == [s.target.vocab_facts().bos, *written] and len(written) == 6
        assert list(s.draft_model.kv) == opening
        reads = counted_reads(s)
        messages = [{"role": "user", "content": "hello world the model is fast"}]
        prompt = s.render(messages).tokens
        assert prompt[: len(opening)] == opening
        events = list(s.chat(messages, GenerationSettings(draft_max=2, max_tokens=6)))
        assert events
        # A fixed k reads the prompt with the prefill: all of it but the opening and its last token.
        assert reads[0] == len(prompt) - 1 - len(opening), (reads, len(prompt), len(opening))
        s.reset_state()
        assert list(s.draft_model.kv) == opening
        # A conversation with a system prompt shares only the opening's BOS and <|im_start|>: the rest is read.
        reads.clear()
        with_system = [{"role": "system", "content": "be brief"}, *messages]
        prompt = s.render(with_system).tokens
        list(s.chat(with_system, GenerationSettings(draft_max=2, max_tokens=2)))
        assert reads[0] == len(prompt) - 1 - 2
    finally:
        s.close()


def test_a_drafter_cache_that_holds_the_opening_and_more_is_kept_whole(tiny):
    s = Session(tiny["target"], str(tiny["drafter"]), calibrate=False)
    try:
        messages = [{"role": "user", "content": "python code token draft"}]
        list(s.chat(messages, GenerationSettings(draft_max=2, max_tokens=4)))
        held = list(s.draft_model.kv)
        assert len(held) > len(s.opening())
        s.drafter.prime(s.opening())  # a conversation's cache begins with the opening: nothing to read
        assert list(s.draft_model.kv) == held
    finally:
        s.close()


class Asked(DraftPolicy):
    """Plain decoding that writes down what it was asked."""

    def __init__(self) -> None:
        self.asked: list[tuple[int, int | None]] = []

    def request(self, limit: int, behind: int = 0, remaining: int | None = None, judgeable: int = 0) -> DraftRequest:
        self.asked.append((limit, remaining))
        return DraftRequest()


def asked_by(trace: Trace) -> list[tuple[int, int | None]]:
    policies: list[Asked] = []

    def make(_costs):
        policies.append(Asked())
        return policies[-1]

    simulate(trace, CostProfile("written", lambda n: n + 1.0, 0.5, lambda n: 0.1 * n), make, "lookup")
    return policies[0].asked


def test_a_replay_asks_about_what_the_limit_leaves_not_where_the_reply_ends():
    ended = Trace("ended", "written", "1" * 5, max_tokens=96)
    assert asked_by(ended) == [(95, 96), (94, 95), (93, 94), (92, 93), (91, 92)]
    # Without a recorded limit the replay knows nothing better than the reply's own end.
    assert asked_by(Trace("unknown", "written", "1" * 3)) == [(2, 3), (1, 2), (0, 1)]
    # A reply cut by its limit: the same either way.
    assert asked_by(Trace("cut", "written", "1" * 3, max_tokens=3)) == [(2, 3), (1, 2), (0, 1)]


def test_a_replayed_drafter_reads_the_prompt_less_the_opening_it_read_at_load():
    profile = CostProfile("written", lambda n: n + 1.0, 0.5, lambda n: 0.1 * n)
    # A 50-token prompt whose first 24 are the opening: a fixed k reads 25 at the prefill (not its last).
    trace = Trace("opened", "written", "1" * 12, prompt=50, opening=24)
    assert simulate(trace, profile, fixed_policy(3), "model").prefill_s == pytest.approx(2.5)
    assert simulate(Trace("closed", "written", "1" * 12, prompt=50), profile, fixed_policy(3), "model").prefill_s \
        == pytest.approx(4.9)


def test_a_traces_file_gives_its_limit_and_opening_to_traces_that_do_not_say_theirs(tmp_path):
    path = tmp_path / "t.jsonl"
    rows = [{"units": "ms", "max_tokens": 96, "opening": 24},
            {"name": "a", "category": "c", "model_match": "11", "lookup": [], "prompt": 40},
            {"name": "b", "category": "c", "model_match": "10", "lookup": [[1, 2, 3, 1]], "prompt": 30, "opening": 3}]
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n", encoding="utf-8")
    _, (a, b) = load_traces(path)
    assert (a.max_tokens, a.opening, b.max_tokens, b.opening) == (96, 24, 96, 3)
    assert b.to_json()["opening"] == 3 and "opening" not in Trace("c", "c", "1").to_json()
    path.write_text("\n".join(json.dumps(r) for r in [{"units": "ms"}, rows[1]]) + "\n", encoding="utf-8")
    _, (old,) = load_traces(path)
    assert (old.max_tokens, old.opening) == (None, 0)


def test_a_template_that_refuses_a_lone_user_message_loads_with_nothing_read_ahead(tmp_path, tiny):
    from dataclasses import replace

    from tiny_models import TARGET, write_tiny_model

    strict = write_tiny_model(tmp_path / "strict.gguf", replace(TARGET, chat_template=(
        "{% if messages[0]['role'] != 'system' %}{{ raise_exception('a system prompt first') }}{% endif %}"
        "{% for m in messages %}{{ '<|im_start|>' + m['role'] + '\n' + m['content'] + '<|im_end|>\n' }}{% endfor %}"
        "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}")))
    s = Session(strict, str(tiny["drafter"]), calibrate=False)
    try:
        assert s.opening() == [] and list(s.draft_model.kv) == []
        s.reset_state()
        assert list(s.draft_model.kv) == []
        messages = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hello world"}]
        assert [e for e in s.chat(messages, GenerationSettings(draft_max=2, max_tokens=3))]
    finally:
        s.close()
