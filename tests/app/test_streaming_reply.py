"""The streaming reply (app.control.streaming_reply): the engine's events folded once, committed to a real
SQLite file before they are announced, continued replies renumbered with their running totals offset,
and the one throttle between the engine thread and the screen (app.control.replies), on a real Qt loop."""
from __future__ import annotations

import dataclasses
import os
import sqlite3
import time

import pytest

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

from PySide6.QtCore import QObject, Signal  # noqa: E402

from app.control import replies as replies_module  # noqa: E402
from app.control.conversations import Conversations  # noqa: E402
from app.control.replies import Replies  # noqa: E402
from app.control.streaming_reply import StreamingReply  # noqa: E402
from app.history.records import Message, Role  # noqa: E402
from app.history.reply_stats import joined_stats  # noqa: E402
from app.history.store import ChatStore, StoreError, database_path  # noqa: E402
from engine.decoding.events import (
    DoneEvent,
    FinishReason,
    RoundEvent,
    RoundTotals,
    TokenEvent,
    TokenSource,
    with_totals,
)
from chat_view_support import stats  # noqa: E402

A, C, T = TokenSource.ACCEPTED, TokenSource.CORRECTION, TokenSource.TARGET


def part(texts: list[str]) -> list:
    """An engine stream as the engine numbers it: per round, a RoundEvent carrying its running totals,
    then its tokens. Round n drafts two tokens and keeps one (then a correction); every third is plain."""
    rounds, tokens, index = [], [], 0
    for n, pair in enumerate(zip(texts[::2], texts[1::2]), start=1):
        plain = n % 3 == 0
        rounds.append(RoundEvent(n, 0 if plain else 2, () if plain else (5, 6), () if plain else ("a", "b"),
                                 0 if plain else 1, () if plain else (6,), () if plain else ("b",), 2,
                                 0.0 if plain else 0.01, 0.02, "none" if plain else "model", 10.0 * n, 1.2))
        for i, text in enumerate(pair):
            tokens.append(TokenEvent(text, 100 + index, T if plain else (A if i == 0 else C), n, 0.9, None, index))
            index += 1
    events = []
    for r in with_totals(rounds):  # as the engine counts them
        events += [r] + [t for t in tokens if t.round == r.round]
    return events


def new_reply(store: ChatStore) -> tuple[int, Message, Message]:
    conv = store.new_conversation()
    user = store.add_message(conv.id, Role.USER, "hello")
    return conv.id, user, store.add_message(conv.id, Role.ASSISTANT, "", "t.gguf", "d.gguf", parent_id=user.id)


def test_each_batch_is_committed_before_it_is_announced_and_folded_once(qtbot):
    store = ChatStore()
    conv, user, message = new_reply(store)
    live = StreamingReply(message, auto=False, store=store, conversation_id=conv, question=user)
    reader = sqlite3.connect(database_path())
    seen = []  # (from_token, tokens in the message, token rows another connection sees) per announcement
    live.changed.connect(lambda mid, start: seen.append(
        (mid, start, len(live.message.tokens),
         reader.execute("SELECT COUNT(*) FROM tokens WHERE message_id=?", (mid,)).fetchone()[0])))
    snaps = []
    live.stats_changed.connect(snaps.append)
    ended = []
    live.finished.connect(ended.append)
    events = part(["Hi", " there", ",", " how", " are", " you"])
    done = DoneEvent(FinishReason.STOP, "Hi there, how are you", stats(6))
    live.on_events(events[:6])
    live.on_events(events[6:] + [done])
    live.on_finished()
    assert seen == [(message.id, 0, 4, 4), (message.id, 4, 6, 6)]  # saved, then said
    rounds = [e for e in events if isinstance(e, RoundEvent)]
    assert list(live.message.rounds.values()) == rounds and len(live.message.tokens) == 6
    # The running numbers are the engine's totals as they came, never counted again.
    assert snaps[0].rounds == 2 and snaps[0].tokens == 4
    assert snaps[0].by_position == rounds[1].totals.acceptance_by_position
    assert snaps[-1].finished and ended == [live]
    assert live.message.finish_reason == FinishReason.STOP and live.message.content == done.text
    again = ChatStore().messages(conv)[1]
    assert again.text == done.text and list(again.rounds.values()) == rounds


def test_a_continuation_is_numbered_after_the_first_part_and_its_totals_offset(qtbot):
    store = ChatStore()
    conv, user, message = new_reply(store)
    first = part(["One", " two", " three", " four"])
    message.rounds = {e.round: e for e in first if isinstance(e, RoundEvent)}
    message.tokens = [e for e in first if isinstance(e, TokenEvent)]
    store.append(message.id, list(message.rounds.values()), message.tokens)
    before = stats(4)
    live = StreamingReply(message, auto=False, store=store, conversation_id=conv, question=user)
    live.continuing("One two three four", before, FinishReason.CANCELLED)
    starts = []
    live.changed.connect(lambda _mid, start: starts.append(start))
    then = part([" five", " six", " seven", " eight"])
    live.on_events(then + [DoneEvent(FinishReason.STOP, " five six seven eight", stats(4))])
    live.on_finished()
    m = live.message
    assert starts == [4]
    assert [t.index for t in m.tokens] == list(range(8)) and [t.round for t in m.tokens] == [1, 1, 2, 2, 3, 3, 4, 4]
    first_totals = m.rounds[2].totals
    assert [n for n in m.rounds] == [1, 2, 3, 4]
    assert m.rounds[4].totals == first_totals.plus(then[3].totals)
    recount = with_totals([dataclasses.replace(r, totals=None) for r in m.rounds.values()])[-1].totals
    got = m.rounds[4].totals
    assert dataclasses.replace(got, draft_s=0, verify_s=0) == dataclasses.replace(recount, draft_s=0, verify_s=0)
    assert (got.draft_s, got.verify_s) == pytest.approx((recount.draft_s, recount.verify_s))
    assert m.text == "One two three four five six seven eight"
    assert m.stats == joined_stats(before, stats(4), m.rounds[4].totals)


def test_a_batch_that_cannot_be_saved_waits_for_the_next_and_is_said_once(qtbot, monkeypatch):
    store = ChatStore()
    conv, user, message = new_reply(store)
    live = StreamingReply(message, auto=True, store=store, conversation_id=conv, question=user)
    notices = []
    live.notice.connect(notices.append)
    real = store.append
    failing = {"on": True}

    def append(*a):
        if failing["on"]:
            raise StoreError("the database is locked by another program")
        real(*a)

    monkeypatch.setattr(store, "append", append)
    events = part(["a", "b", "c", "d", "e", "f"])
    live.on_events(events[:3])
    live.on_events(events[3:6])
    assert len(notices) == 1 and "could not be saved yet" in notices[0].text
    failing["on"] = False
    live.on_events(events[6:])
    assert len(notices) == 2 and "saved again" in notices[1].text
    live.on_events([DoneEvent(FinishReason.STOP, "abcdef", stats(6))])
    live.on_finished()
    again = ChatStore().messages(conv)[1]
    assert [t.text for t in again.tokens] == list("abcdef") and not again.error


def test_without_a_store_the_same_folding_saves_nothing(qtbot):
    m = Message(-1, Role.ASSISTANT, "", "t.gguf", "d.gguf")
    live = StreamingReply(m, auto=True)
    events = part(["x", "y"])
    live.on_events(events + [DoneEvent(FinishReason.STOP, "xy", stats(2))])
    live.on_finished()
    assert m.text == "xy" and m.rounds[1].totals == RoundTotals().after(2, 1, 2, 0.01, 0.02, "model")


class _Worker(QObject):
    """The engine thread's signals, emitted by hand."""

    sig_event = Signal(int, object)
    sig_reply_failed = Signal(int, object)
    sig_reply_finished = Signal(int)

    def reply(self, _req) -> None:
        pass

    def interrupt_read_ahead(self, *_request) -> None:
        pass

    def read_ahead(self, _req) -> None:
        pass


class _Slow:
    """A handler whose every batch takes a while (a slow redraw)."""

    def __init__(self) -> None:
        self.batches: list[int] = []

    def on_events(self, events: list) -> None:
        self.batches.append(len(events))
        time.sleep(0.03)

    def on_failed(self, exc: BaseException) -> None:
        pass

    def on_finished(self) -> None:
        pass


def test_one_throttle_spaces_its_ticks_by_what_they_cost(qtbot):
    worker = _Worker()
    convs = Conversations(ChatStore(), live=lambda: None)
    replies = Replies(prefs=None, worker=worker, conversations=convs, pairing=None)
    handler = _Slow()
    replies._handlers[1] = handler
    for i in range(5):
        worker.sig_event.emit(1, i)
    assert handler.batches == []  # nothing goes out between ticks
    qtbot.waitUntil(lambda: handler.batches == [5], timeout=2000)
    # The tick took about 30 ms: the next comes no sooner than TICK_SHARE times that.
    assert replies._flush_timer.interval() >= replies_module.TICK_SHARE * 30 * 0.9
    worker.sig_event.emit(1, 5)
    t0 = time.perf_counter()
    qtbot.waitUntil(lambda: len(handler.batches) == 2, timeout=2000)
    assert time.perf_counter() - t0 >= 0.1


def test_rounds_stored_before_they_carried_totals_are_given_them_once_as_they_load():
    store = ChatStore()
    conv, _user, message = new_reply(store)
    events = part(["a", "b", "c", "d", "e", "f"])
    legacy = [dataclasses.replace(e, totals=None) for e in events if isinstance(e, RoundEvent)]
    store.append(message.id, legacy, [e for e in events if isinstance(e, TokenEvent)])
    got = ChatStore().messages(conv)[1].rounds
    assert list(got.values()) == [e for e in events if isinstance(e, RoundEvent)]
