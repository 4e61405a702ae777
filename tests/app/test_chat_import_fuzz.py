"""Property tests of the chat import parser (app.history.chat_import): the file is a stranger's bytes.

The promise: `parse_lines` returns a chat, or raises ChatImportError with a sentence; nothing else ever escapes
(no RecursionError, TypeError, AttributeError...: each was an "internal error" window with a traceback). And what
it returns keeps that promise's other half: every reply's tokens spell its text, or it has none.
REGRESSIONS lists every input that broke the parser; each must keep being refused (or read) as written there.
"""
from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from app.history.chat_import import ChatImportError, ImportedChat, parse_lines
from app.history.records import Role

json_scalars = st.none() | st.booleans() | st.integers(-2**70, 2**70) | st.floats(allow_nan=False) | st.text(max_size=20)
json_values = st.recursive(json_scalars, lambda kids: st.lists(kids, max_size=4)
                           | st.dictionaries(st.text(max_size=8), kids, max_size=4), max_leaves=30)
KEYS = ("type", "id", "role", "content", "parent", "shown", "settings", "attachments", "finish_reason", "message",
        "text", "token_id", "source", "round", "p", "q", "index", "stats", "thinking", "name", "size", "kind")
TYPES = ("conversation", "message", "round", "token", "done", "error", "other")


@st.composite
def records(draw) -> dict:
    """A record an export might hold: the fields an export has, each with any JSON value or a likely one."""
    r = {"type": draw(st.sampled_from(TYPES) | json_values)}
    for key in draw(st.lists(st.sampled_from(KEYS), max_size=10, unique=True)):
        likely = {"id": st.integers(1, 4), "message": st.integers(1, 4), "role": st.sampled_from(["user", "assistant"]),
                  "content": st.text(max_size=12), "text": st.text(max_size=6), "index": st.integers(0, 3),
                  "source": st.sampled_from(["target", "drafter", "bonus", "x"]), "round": st.integers(0, 3),
                  "token_id": st.integers(0, 9), "parent": st.none() | st.integers(1, 4)}.get(key, json_values)
        r[key] = draw(likely | json_values)
    return r


def outcome(lines) -> ImportedChat | None:
    try:
        return parse_lines(lines, "t")
    except ChatImportError as exc:
        assert str(exc) and "\n" not in str(exc)
        return None


def check_chat(chat: ImportedChat | None) -> None:
    """A reply read with tokens is spelt by them (a few characters of a cut character aside, or thinking apart)."""
    if chat is None:
        return
    for m, _ in chat.messages:
        if m.role == Role.ASSISTANT and m.tokens:
            spelled = "".join(t.text for t in m.tokens)
            assert (m.content.startswith(spelled) and len(m.content) - len(spelled) <= 4) or "think>" in spelled


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(records(), max_size=8))
def test_records_of_any_shape_give_a_chat_or_a_reason(rs):
    check_chat(outcome([json.dumps(r) for r in rs]))


@settings(max_examples=150, deadline=None)
@given(st.lists(st.binary(max_size=60), max_size=6))
def test_any_bytes_give_a_chat_or_a_reason(lines):
    check_chat(outcome(lines))


@settings(max_examples=100, deadline=None)
@given(st.lists(st.text(max_size=60), max_size=6))
def test_any_text_gives_a_chat_or_a_reason(lines):
    check_chat(outcome(lines))


def _msg(**kw) -> str:
    return json.dumps({"type": "message", "id": 1, "role": "user", "content": "q", **kw})


#: Every input that broke the parser, and the start of what it must say (None: it is read).
REGRESSIONS = [
    (["[" * 10_000 + "]" * 10_000], "line 1 nests lists or objects thousands deep"),
    (['{"type": "message", "content": ' + "{\"a\": " * 10_000 + "1" + "}" * 10_001], "line 1 nests lists or"),
    ([_msg(settings={"a": [[[[[[[[1]]]]]]]]})], "line 1 nests lists or objects more than 8 deep"),
    (['{"type": "message"}', '{"type": "x\x01"}'], "line 1: a field is missing (id)"),
    (['{"type": "conversation"}', '{"type": "x\x01"}'], "line 2 is not JSON (Invalid control character at column 12)"),
    ([b'{"type": "conversation", "title": "caf\xe9"}'], "line 1 is not UTF-8 text (its byte 39)"),
    ([_msg(content="a" * (8 * 2**20 + 1))], "line 1: its content is 8,388,609 characters long"),
    ([_msg(attachments=[{"name": "a", "text": "b" * (8 * 2**20 + 1)}])], "line 1: its text is 8,388,609"),
    ([_msg(id=1.5)], "line 1: a message's id must be a number or a string"),
    ([_msg(), _msg(id=2, role="assistant", content="a"), json.dumps({"type": "round", "message": 2, "round": "x"})],
     "line 3: a round's number must be a whole number"),
    ([_msg(), _msg(id=2, role="assistant", content="a"), json.dumps({"type": "round", "message": 2, "round": 1})],
     "line 3: this round record is not as an export writes it (RoundEvent.__init__() missing 8"),
    ([_msg(), _msg(id=2, role="assistant", content="a"), json.dumps({"type": "done", "message": 2, "stats": []})],
     "line 3: a reply's totals must be an object"),
    ([_msg(), _msg(id=2, role="assistant", content="a"),
      json.dumps({"type": "token", "message": 2, "index": 0, "text": "a", "token_id": 1, "source": "target",
                  "round": 1, "p": None, "q": None})], None),
    ([_msg(shown=True)], "line 1: a message's shown stamp must be a whole number"),
    ([_msg(created="yesterday")], "line 1: could not convert string to float"),
    ([_msg(created=1e400)], None),
]


@pytest.mark.parametrize("lines, said", REGRESSIONS)
def test_inputs_that_once_broke_the_parser(lines, said):
    if said is None:
        assert outcome(lines) is not None
        return
    with pytest.raises(ChatImportError) as got:
        parse_lines(lines, "t")
    assert str(got.value).startswith(said), str(got.value)
