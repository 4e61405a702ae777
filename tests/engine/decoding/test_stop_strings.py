"""A model without a chat template stops at the next "User:" turn (issue 21), on scripted tiny models.

The scripted models (tests/tiny_models.py `scripted`) write exactly the pieces the test lists, so the
expected reply is text written here. A drafter that is the target's own file accepts every draft: the
marker then arrives inside a round's accepted block.
"""
from __future__ import annotations

from pathlib import Path

import pytest
import tiny_models

from engine.decoding.events import DoneEvent, FinishReason, RoundEvent, TokenEvent
from engine.decoding.session import GenerationSettings, Session
from engine.decoding.stop_strings import StopText, first_stop, hold_from

SPACE = "\u2581"  # the prompt's last token in the fallback layout ("Assistant: ")
STOPS = ("\n\nUser:", "\nUser:")
CHAT = [{"role": "user", "content": "hi"}]

#: name -> (pieces after the prompt, extra vocabulary pieces, the reply expected, its tokens' texts)
SCRIPTS = {
    # the marker spread over six tokens: "\n", "U" (a byte token), "s", "e", "r", ":"
    "spans tokens": ((SPACE + "hello", SPACE + "world", "\n", "<0x55>", "s", "e", "r", ":", SPACE + "the"), (),
                     " hello world", [" hello", " world"]),
    # the marker begins inside a token that also ends the reply's last word
    "inside a token": ((SPACE + "hello", SPACE + "wor", "ld\nUs", "er:", SPACE + "code"), ("ld\nUs", "er:"),
                       " hello world", [" hello", " wor", "ld"]),
    # a blank line before it: the earliest stop wins, so the blank line goes with the marker
    "after a blank line": ((SPACE + "fast", "\n\n", "Us", "er", ":"), ("\n\n", "Us", "er"),
                           " fast", [" fast"]),
    # the start of a marker that turns out not to be one: held back a while, then shown
    "not a marker": ((SPACE + "hello", "\n", "<0x55>", "s", "e", SPACE + "the", SPACE + "code"), (),
                     " hello\nUse the code", [" hello", "\n", "U", "s", "e", " the", " code"]),
    # a reply that ends with what could have begun one
    "ends on a partial marker": ((SPACE + "hello", "\n", "<0x55>", "s"), (),
                                 " hello\nUs", [" hello", "\n", "U", "s"]),
}


def test_first_stop_and_hold_from_on_text_written_here():
    assert first_stop("a\n\nUser: b", STOPS) == 1
    assert first_stop("a\nUser: b", STOPS) == 1
    assert first_stop("a User: b", STOPS) == -1
    assert hold_from("hello\n", STOPS) == 5
    assert hold_from("hello\n\nUs", STOPS) == 5
    assert hold_from("hello\nUse", STOPS) == 5
    assert hold_from("hello\nUsa", STOPS) == 9
    assert hold_from("hello", STOPS) == 5
    assert hold_from("", STOPS) == 0


def test_stop_text_holds_units_that_may_begin_a_marker_and_cuts_at_one():
    w: StopText[str] = StopText(STOPS)
    assert [(r.unit, r.texts) for r in w.push("r1", [" a", " b"])] == [("r1", [" a", " b"])]
    assert w.push("r2", [" c", "\n"]) == []  # "\n" may begin "\nUser:"
    assert w.push("r3", ["U", "s"]) == []
    out = w.push("r4", ["er", ":", " x"])
    assert w.stopped
    assert [(r.unit, r.texts) for r in out] == [("r2", [" c"]), ("r3", []), ("r4", [])]
    w2: StopText[str] = StopText(STOPS)
    assert w2.push("r1", [" a\nU"]) == []
    assert [(r.unit, r.texts) for r in w2.push("r2", ["sa"])] == [("r1", [" a\nU"]), ("r2", ["sa"])]
    w3: StopText[str] = StopText(STOPS)
    assert w3.push("r1", ["x", "\n"]) == []
    assert [(r.unit, r.texts) for r in w3.flush()] == [("r1", ["x", "\n"])] and not w3.stopped
    assert [(r.unit, r.texts) for r in StopText(()).push("r", ["\nUser:"])] == [("r", ["\nUser:"])]


@pytest.fixture(scope="module")
def scripted(tmp_path_factory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("scripted")
    return {name: tiny_models.write_tiny_model(folder / f"{i}.gguf", tiny_models.scripted(
                f"no-template-{i}", (SPACE, *pieces), chat_template=None, extra_pieces=extra))
            for i, (name, (pieces, extra, _, _)) in enumerate(SCRIPTS.items())}


def check_stream(events: list) -> tuple[DoneEvent, list[TokenEvent], list[RoundEvent]]:
    """Each round is followed by exactly its own tokens, indices run 0.., and the text is the tokens' texts."""
    done = events[-1]
    assert isinstance(done, DoneEvent)
    tokens = [e for e in events if isinstance(e, TokenEvent)]
    rounds = [e for e in events if isinstance(e, RoundEvent)]
    i = 0
    while i < len(events) - 1:
        r = events[i]
        assert isinstance(r, RoundEvent)
        assert all(isinstance(t, TokenEvent) and t.round == r.round for t in events[i + 1 : i + 1 + r.emitted])
        i += 1 + r.emitted
    assert [t.index for t in tokens] == list(range(len(tokens)))
    assert "".join(t.text for t in tokens) == done.text
    return done, tokens, rounds


@pytest.mark.parametrize("name", list(SCRIPTS))
@pytest.mark.parametrize("draft", ["none", "self k=8", "self k=2"])
def test_a_reply_without_a_chat_template_ends_before_the_next_user_turn(scripted, name, draft):
    path = scripted[name]
    _pieces, _extra, expected, texts = SCRIPTS[name]
    k = 0 if draft == "none" else int(draft[-1])
    s = Session(path, None if k == 0 else str(path), calibrate=False)
    try:
        assert s.stop_strings and any("no chat template" in n for n in s.notes)
        done, tokens, rounds = check_stream(list(s.chat(CHAT, GenerationSettings(draft_max=k, max_tokens=40))))
    finally:
        s.close()
    assert done.text == expected
    assert [t.text for t in tokens] == texts
    assert done.finish_reason == FinishReason.STOP
    assert done.stats.tokens == len(tokens)
    if name == "inside a token":  # the last token shown is the one the marker began in, cut before it
        assert tokens[-1].text == "ld"
    if draft == "self k=8" and "marker" not in name:
        # One round drafted the whole script and the target kept it: the marker was in its accepted block,
        # with reply text before it and more after it.
        assert len(rounds) == 1 and rounds[0].accepted >= len(texts) + 2 and rounds[0].emitted == len(texts)


def test_a_model_with_a_chat_template_has_no_stop_strings(tmp_path):
    # ChatML's generation prompt ends with a newline token; the byte token <0x0A> is the reply's own newline.
    path = tiny_models.write_tiny_model(tmp_path / "chatml.gguf", tiny_models.scripted(
        "chatml", ("\n", SPACE + "hello", "<0x0A>", "<0x55>", "s", "e", "r", ":", SPACE + "the"),
        chat_template=tiny_models.CHATML))
    s = Session(path, None, calibrate=False)
    try:
        assert s.stop_strings == ()
        done, _, _ = check_stream(list(s.chat(CHAT, GenerationSettings(draft_max=0, max_tokens=40))))
    finally:
        s.close()
    assert done.text == " hello\nUser: the"


def test_raw_completion_is_not_cut_at_a_turn_marker(scripted):
    # complete() continues text without a chat layout: a "User:" there is the text's own.
    path = scripted["spans tokens"]
    s = Session(path, None, calibrate=False)
    try:
        done, _, _ = check_stream(list(s.complete("Assistant: ", GenerationSettings(draft_max=0, max_tokens=40))))
    finally:
        s.close()
    assert done.text == " hello world\nUser: the"
