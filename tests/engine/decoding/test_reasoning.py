"""A reasoning model's reply comes apart into thinking and answer (issue 22, item 2), in the engine.

The split is checked on text written here, and on scripted tiny models with a Qwen3-style chat template
(tests/tiny_models.py): their replies think inside <think>...</think> with the tags split across tokens
or as one token each, through plain decoding and through speculative rounds whose accepted blocks hold
the tags.
"""
from __future__ import annotations

from pathlib import Path

import pytest
import tiny_models

from engine.decoding.events import DoneEvent, FinishReason, RoundEvent, TokenEvent
from engine.decoding.reasoning import ReplyParts, opens_thinking, split_reply
from engine.decoding.session import GenerationSettings, Session

NL = "\n"  # the Qwen3-style generation prompt's last token: the reply's script starts after it
CHAT = [{"role": "user", "content": "why"}]

#: name -> (template, script after the prompt, extra pieces, user-defined pieces, thinking, answer)
MODELS = {
    # tags split across tokens ("<thi" + "nk>\n", "\n</th" + "ink>\n\n"), Markdown inside the thinking
    "split tags": (tiny_models.QWEN3_STYLE,
                   ("<thi", "nk>\n", "The", "\u2581**", "draft", "**", "\u2581is", "\u2581fast", "\n</th", "ink>\n\n",
                    "hello", "\u2581world"),
                   ("<thi", "nk>\n", "The", "\u2581**", "draft", "**", "\n</th", "ink>\n\n", "hello"), (),
                   "The **draft** is fast", "hello world"),
    # Qwen3's own tokens: <think> and </think> are one user-defined token each
    "tag tokens": (tiny_models.QWEN3_STYLE,
                   ("<think>", "<0x0A>", "\u2581the", "\u2581model", "</think>", "\n\n", "\u2581hello", "\u2581code"),
                   ("\n\n",), ("<think>", "</think>"), "the model", "hello code"),
    # a template that opens the thinking in the generation prompt: only the close tag comes
    "opened by the template": (tiny_models.THINKING_OPEN,
                               ("The", "\u2581**", "draft", "**", "\u2581is", "\u2581fast", "\n</th", "ink>\n\n",
                                "hello", "\u2581world"),
                               ("The", "\u2581**", "draft", "**", "\n</th", "ink>\n\n", "hello"), ("<think>", "</think>"),
                               "The **draft** is fast", "hello world"),
}


# -- the split, on text written here -----------------------------------------------------------------------
@pytest.mark.parametrize("text, opened, final, thinking, answer, closed", [
    ("<think>\nabc\n</think>\n\nThe answer", False, True, "abc", "The answer", True),
    ("\n <think>x</think>y", False, True, "x", "y", True),
    ("plain answer", False, True, None, "plain answer", False),
    ("plain <think>later</think>", False, True, None, "plain <think>later</think>", False),  # only a reply's start
    ("<thi", False, False, None, "", False),  # the tag may still be arriving: nothing shown yet
    ("<thi", False, True, None, "<thi", False),  # it never came: that was the answer
    ("<think>abc</th", False, False, "abc", "", False),  # the close tag may still be arriving
    ("<think>abc</th", False, True, "abc</th", "", False),
    ("<think>\nstill thinking\n", False, True, "still thinking", "", False),  # stopped or cut while thinking
    ("abc\n</think>\n\nans", True, True, "abc", "ans", True),  # the template opened it
    ("abc", True, False, "abc", "", False),
    ("<think></think>\n\nans", False, True, "", "ans", True),
    ("", False, False, None, "", False),
])
def test_split_on_text_written_here(text, opened, final, thinking, answer, closed):
    parts = split_reply(text, opened, final)
    got_thinking, got_answer = parts.split(text)
    assert (got_thinking if parts.thinking is not None else None, got_answer, parts.closed) == (thinking, answer, closed)


def test_every_prefix_of_a_streaming_reply_splits_as_its_text_so_far_allows():
    text = "<think>\nThe draft\n</think>\n\nThe answer"
    for n in range(len(text) + 1):
        parts = split_reply(text[:n], final=False)
        thinking, answer = parts.split(text[:n])
        assert "<" not in thinking and "think>" not in answer  # no piece of a tag is ever shown
        assert "The draft".startswith(thinking) or thinking == "The draft"
        assert answer == ("The answer"[: max(0, n - len(text) + len("The answer"))])


def test_a_prompt_opens_thinking_when_its_last_block_is_left_open():
    assert opens_thinking("<|im_start|>assistant\n<think>\n")
    assert not opens_thinking("<|im_start|>assistant\n<think>\n\n</think>\n\n")  # Qwen3 with thinking off
    assert not opens_thinking("<|im_start|>assistant\n")
    assert not opens_thinking("<think>a</think> q <|im_start|>assistant\n")


def test_reply_parts_are_plain_values():
    assert split_reply("<think>a</think>b") == ReplyParts((7, 8), 16, True)


# -- the engine, on scripted models -------------------------------------------------------------------------
@pytest.fixture(scope="module")
def thinkers(tmp_path_factory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("thinkers")
    out = {}
    for i, (name, (template, script, extra, user, _, _)) in enumerate(MODELS.items()):
        out[name] = tiny_models.write_tiny_model(folder / f"thinker-{i}.gguf", tiny_models.scripted(
            f"thinker-{i}", (NL, *script), chat_template=template, extra_pieces=extra, user_pieces=user))
    return out


@pytest.mark.parametrize("name", list(MODELS))
@pytest.mark.parametrize("k", [0, 3, 8])
def test_a_chat_reply_comes_apart_into_thinking_and_answer(thinkers, name, k):
    path = thinkers[name]
    _, script, _, _, thinking, answer = MODELS[name]
    s = Session(path, str(path) if k else None, calibrate=False)
    try:
        events = list(s.chat(CHAT, GenerationSettings(draft_max=k, max_tokens=40)))
    finally:
        s.close()
    done = events[-1]
    assert isinstance(done, DoneEvent) and done.finish_reason == FinishReason.STOP
    assert (done.thinking, done.text) == (thinking, answer)
    assert done.stats.thinking_s is not None and done.stats.thinking_s >= 0
    # The tokens stay as the model wrote them, tags and all: the view ties every character to its token.
    tokens = [e for e in events if isinstance(e, TokenEvent)]
    assert len(tokens) == len(script)
    rounds = [e for e in events if isinstance(e, RoundEvent)]
    assert all(r.thinking_open == (name == "opened by the template") for r in rounds)
    if k == 8:  # the first round's draft was all kept: a tag arrived inside its accepted block, text after it
        assert rounds[0].accepted == 8 and rounds[0].emitted >= 8


@pytest.mark.parametrize("cut_after, thinking", [(4, "The **"), (2, "")])
def test_a_reply_cut_while_thinking_is_all_thinking(thinkers, cut_after, thinking):
    path = thinkers["split tags"]
    s = Session(path, str(path), calibrate=False)
    try:
        done = list(s.chat(CHAT, GenerationSettings(draft_max=3, max_tokens=cut_after)))[-1]
    finally:
        s.close()
    assert done.finish_reason == FinishReason.LENGTH
    assert (done.thinking, done.text) == (thinking, "")


def test_a_stopped_reply_keeps_what_it_thought(thinkers):
    path = thinkers["split tags"]
    s = Session(path, None, calibrate=False)
    try:
        events = []
        for ev in s.chat(CHAT, GenerationSettings(draft_max=0, max_tokens=40)):
            events.append(ev)
            if isinstance(ev, TokenEvent) and ev.index == 3:
                s.stop()
    finally:
        s.close()
    done = events[-1]
    assert done.finish_reason == FinishReason.CANCELLED and (done.thinking, done.text) == ("The **", "")


def test_raw_completion_is_not_split(thinkers):
    path = thinkers["split tags"]
    s = Session(path, None, calibrate=False)
    try:
        done = list(s.complete("<|im_start|>assistant\n", GenerationSettings(draft_max=0, max_tokens=40)))[-1]
    finally:
        s.close()
    assert done.thinking == "" and done.text.startswith("<think>\nThe **draft**")


def test_earlier_thinking_is_left_out_of_the_context_as_the_template_says(thinkers):
    path = thinkers["split tags"]
    s = Session(path, None, calibrate=False)
    try:
        apart = s.render_text([{"role": "user", "content": "q1"},
                               {"role": "assistant", "content": "a1", "reasoning_content": "r1"},
                               {"role": "user", "content": "q2"}])
        tagged = s.render_text([{"role": "user", "content": "q1"},
                                {"role": "assistant", "content": "<think>\nr1\n</think>\n\na1"},
                                {"role": "user", "content": "q2"}])
        thinking_off = s.render_text([{"role": "user", "content": "q1"}])
    finally:
        s.close()
    expected = ("<|im_start|>user\nq1<|im_end|>\n<|im_start|>assistant\na1<|im_end|>\n"
                "<|im_start|>user\nq2<|im_end|>\n<|im_start|>assistant\n")
    assert apart == expected and tagged == expected
    assert thinking_off == "<|im_start|>user\nq1<|im_end|>\n<|im_start|>assistant\n"
