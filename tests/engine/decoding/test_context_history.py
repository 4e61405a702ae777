"""The context rule on long histories (engine.decoding.session.Session.render), with a tiny real model:
the fewest oldest exchanges are dropped (found by halving, checked here against dropping one at a time with
the model's own tokenizer), and a history joined into the newest question (questions in a row are one turn)
is dropped like any other history instead of making the question "too long"."""
from __future__ import annotations

import pytest

from engine.decoding.joined_turns import EARLIER_CHARS, EARLIER_MESSAGES
from engine.decoding.session import Session
from engine.errors import ContextFullError
from engine.llama.types import LoadSettings


@pytest.fixture(scope="module")
def small(tiny):
    s = Session(tiny["target"], None, target_load=LoadSettings(n_ctx=256), calibrate=False)
    yield s
    s.close()


def fewest_dropped_one_by_one(s: Session, msgs: list[dict], reserve: int) -> int:
    """The rule as written in the module's docstring, applied one exchange at a time (the reference)."""
    msgs = [dict(m) for m in msgs]
    dropped = 0
    while len(s._tokens_for(msgs)[0]) + reserve > s.target.n_ctx and len(msgs) > 2:
        end = 2
        while end < len(msgs) - 1 and msgs[end]["role"] != "user":
            end += 1
        dropped += end - 1
        del msgs[1:end]
    return dropped


@pytest.mark.parametrize("exchanges", [3, 12, 40])
def test_the_fewest_oldest_exchanges_are_dropped(small, exchanges):
    msgs = [{"role": "system", "content": "be brief"}]
    for i in range(exchanges):
        msgs += [{"role": "user", "content": f"hello world {i} " * 3}, {"role": "assistant", "content": "the code " * 4}]
    msgs.append({"role": "user", "content": "last question"})
    r = small.render(msgs, reserve=64)
    assert r.dropped_messages == fewest_dropped_one_by_one(small, msgs, 64)
    assert len(r.tokens) + 64 <= small.target.n_ctx
    if r.dropped_messages:
        assert r.notes == [f"dropped the {r.dropped_messages} oldest messages to fit the context"]


def test_a_history_joined_into_the_newest_question_is_dropped_not_called_too_long(small):
    earlier = "hello world " * 300  # an imported chat's last question, never answered: far past 256 tokens
    joined = earlier + "\n\n" + "hi"
    msgs = [{"role": "user", "content": "first"}, {"role": "assistant", "content": "the code"},
            {"role": "user", "content": joined, EARLIER_MESSAGES: "1", EARLIER_CHARS: str(len(earlier) + 2)}]
    r = small.render(msgs, reserve=32)
    assert r.dropped_messages == 3
    assert r.notes == ["the chat's history does not fit the context: dropped the 3 oldest messages, including the "
                       "questions the newest one followed"]
    alone, _ = small._tokens_for([{"role": "user", "content": "hi"}])
    assert r.tokens == alone
    with pytest.raises(ContextFullError, match="the message is too long"):  # without the marks it is one message
        small.render([{"role": "user", "content": joined}], reserve=32)
