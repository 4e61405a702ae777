"""One reply as it streams: the engine's events folded once, saved, then announced.

A token's way to the screen: the engine's loop yields it (engine.decoding.speculative), the engine
thread sends it as a signal (app.core.engine_thread.worker), `Replies` hands the events to this object once per
tick of its one timer, this object folds them into its Message (saving them first) and announces
`changed(message_id, from_token)`, and the chat view draws from that token on. Whoever shows the
reply observes it by its signals (the chat view, the stats panel, Compare's panes); it never calls
back into whoever made it.

It is the single owner of the live Message: the tokens and rounds are appended here and nowhere
else, and a chat path read from the store while the reply streams takes this Message rather than
reading it again (Conversations.live).

A continued reply (Continue after Stop or the max tokens limit) is the same message going on: the
engine numbers the new part's tokens and rounds from the start, so they are moved on past the ones
the reply already has, their running totals offset by the first part's, its text is the old text
and the new, and its totals those of both parts.

With a store, order matters for "a crash loses nothing already shown": a batch is committed to
SQLite (one transaction) before it is announced. A batch that cannot be written (another program
holds the database for a moment) stays pending and goes with the next one, so a stored reply never
has a hole; one still unsaved when the reply ends is marked incomplete. Without a store (Compare's
runs) the same folding happens and nothing is written.
"""
from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence

from PySide6.QtCore import QObject, Signal

from engine.decoding.events import DoneEvent, Event, FinishReason, RoundEvent, RoundTotals, Stats, TokenEvent
from engine.decoding.reasoning import split_reply

from app.core.errors import Level, Notice, explain
from app.history.records import Message
from app.history.reply_stats import ReplyStats, StatsSnapshot, joined_stats
from app.history.store import ChatStore, StoreError


LIVE_TITLE = "This reply (streaming)"
"""The stats panel's title while a chat reply streams."""
DONE_TITLE = "This reply"
"""Its title once the reply has its final totals."""


def stats_title(snapshot: StatsSnapshot) -> str:
    return DONE_TITLE if snapshot.finished else LIVE_TITLE


@dataclasses.dataclass(frozen=True, slots=True)
class _Before:
    """What a continued reply held before its new part."""

    text: str
    stats: Stats | None
    tokens: int
    """How many tokens it had: the new part's are numbered after them."""
    rounds: int
    """Its last round's number."""
    totals: RoundTotals
    """Its last round's running totals: the new part's are offset by them."""
    finish: FinishReason


class StreamingReply(QObject):
    """One reply being written (GUI thread): a `ReplyHandler` for `Replies`, observed through its signals."""

    changed = Signal(int, int)
    """The reply (message id) gained tokens from this index on; they are saved (when it has a store)."""
    stats_changed = Signal(object)
    """Its numbers changed (StatsSnapshot)."""
    finished = Signal(object)
    """It is over, ended or failed (this StreamingReply); `message` holds its final text and totals."""
    notice = Signal(object)
    """Something to say about it (a Notice: part of it could not be saved, or is saved again)."""

    def __init__(self, message: Message, auto: bool, store: ChatStore | None = None,
                 conversation_id: int | None = None, question: Message | None = None,
                 parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.message = message
        self.store = store
        self.conversation_id = conversation_id
        """The chat it is written in (None: not a chat reply)."""
        self.question = question
        """The question it answers (None: not a chat reply)."""
        self.stats = ReplyStats(auto)
        self.done: DoneEvent | None = None
        self.error: BaseException | None = None
        self.orphaned = False
        """Its conversation was deleted: nothing more is written."""
        self._store_failed = False
        self._pending_rounds: list[RoundEvent] = []
        self._pending_tokens: list[TokenEvent] = []
        self._before: _Before | None = None

    def snapshot(self) -> StatsSnapshot:
        return self.stats.snapshot()

    def continuing(self, text: str, stats: Stats | None, finish: FinishReason) -> None:
        """This reply goes on from `text` (its tokens and rounds so far are in the message; it had ended for
        `finish`): new tokens and rounds are numbered after them, and the totals at the end are those of
        both parts. Should nothing be added, it is left as it was."""
        m = self.message
        for r in (m.rounds[n] for n in sorted(m.rounds)):
            self.stats.add_round(r)
        self._before = _Before(text, stats, len(m.tokens), max(m.rounds, default=0), self.stats.totals, finish)

    # -- ReplyHandler ---------------------------------------------------------------------------------
    def on_events(self, events: Sequence[Event]) -> None:
        """One batch: folded into the message, saved, then announced."""
        rounds = [e for e in events if isinstance(e, RoundEvent)]
        tokens = [e for e in events if isinstance(e, TokenEvent)]
        done = next((e for e in events if isinstance(e, DoneEvent)), None)
        b = self._before
        if b is not None:
            rounds = [dataclasses.replace(r, round=r.round + b.rounds,
                                          totals=b.totals.plus(r.totals) if r.totals is not None else None)
                      for r in rounds]
            tokens = [dataclasses.replace(t, index=t.index + b.tokens, round=t.round + b.rounds) for t in tokens]
        m = self.message
        for r in rounds:
            self.stats.add_round(r)
        if b is not None and done is not None:
            stats = joined_stats(b.stats, done.stats, self.stats.totals) if b.stats is not None else done.stats
            done = DoneEvent(done.finish_reason, b.text + done.text, stats, m.thinking)
        self._pending_rounds += rounds
        self._pending_tokens += tokens
        self._flush_pending()
        for r in rounds:
            m.rounds[r.round] = r
            if b is None:  # a continuation adds answer to a reply whose tokens the view splits as before
                m.thinking_open = r.thinking_open  # the same on every round: the view splits by it
        start = len(m.tokens)
        m.tokens.extend(tokens)
        if done is not None:
            self.done = done
            self.stats.finish(done.stats)
        if tokens:
            self.changed.emit(m.id, start)
        if rounds or done is not None:
            self.stats_changed.emit(self.stats.snapshot())

    def on_failed(self, exc: BaseException) -> None:
        self.error = exc

    def on_finished(self) -> None:
        """After the last batch: the reply ended, or failed."""
        m = self.message
        complete = self._flush_pending()
        if not complete and not self.orphaned:
            m.error = (f"incomplete in the history: {len(self._pending_tokens)} of its {len(m.tokens)} tokens "
                       "could not be saved")
        if self.done is not None:
            m.content, m.thinking = self.done.text, self.done.thinking
            m.finish_reason = self.done.finish_reason
            m.stats = self.done.stats
            done = self.done
            self._save(lambda s: s.finish(m.id, done, m.content, m.error, m.thinking))
        elif self._before is not None:  # a continuation that ended without its end (failed, or the app closed)
            b = self._before
            added = m.tokens[b.tokens:]
            self._text_from_tokens()
            if not added:  # nothing was added: the reply is as it was
                m.finish_reason, m.stats = b.finish, b.stats
                before = DoneEvent(b.finish, b.text, b.stats, m.thinking) if b.stats is not None else None
                self._save(lambda s: s.finish(m.id, before, m.content, m.error, m.thinking))
            else:
                m.finish_reason = FinishReason.CANCELLED
                m.error = f"failed: {explain(self.error).text}" if self.error is not None else m.error
                self._save(lambda s: s.finish(m.id, None, m.content, m.error, m.thinking))
        elif self.error is not None and m.tokens:
            self._text_from_tokens()
            m.finish_reason = FinishReason.CANCELLED
            m.error = f"failed: {explain(self.error).text}"
            self._save(lambda s: s.finish(m.id, None, m.content, m.error, m.thinking))
        self.finished.emit(self)

    def closed_early(self, note: str) -> None:
        """The app closed before the reply's end came: it is kept as far as it went, marked stopped (a
        busy machine can take longer to stop than a closing window waits)."""
        m = self.message
        self._flush_pending()
        self._text_from_tokens()
        m.finish_reason, m.error = FinishReason.CANCELLED, note
        self._save(lambda s: s.finish(m.id, None, m.content, m.error, m.thinking, FinishReason.CANCELLED))

    # -- saving ---------------------------------------------------------------------------------------
    def _flush_pending(self) -> bool:
        """Write every batch not yet stored (rows are keyed: writing one twice is harmless)."""
        rounds, tokens = self._pending_rounds, self._pending_tokens
        if not rounds and not tokens:
            return True
        if self._save(lambda s: s.append(self.message.id, rounds, tokens)):
            self._pending_rounds, self._pending_tokens = [], []
            return True
        return False

    def _text_from_tokens(self) -> None:
        """A reply that ended without its end: its text as far as its tokens went (a continuation's text
        before, then what it added; else its tokens' text, thinking apart)."""
        m = self.message
        if self._before is not None:
            m.content = self._before.text + "".join(t.text for t in m.tokens[self._before.tokens:])
        else:
            raw = "".join(t.text for t in m.tokens)
            m.thinking, m.content = split_reply(raw, m.thinking_open).split(raw)

    def _save(self, write: Callable[[ChatStore], None]) -> bool:
        """Whether the write went through (no store: nothing to write); the first failure of a reply is
        said, and its recovery."""
        if self.orphaned or self.store is None:
            return True
        try:
            write(self.store)
        except StoreError as exc:
            if not self._store_failed:  # say it once per reply, keep showing the reply
                self._store_failed = True
                self.notice.emit(Notice(f"Part of this reply could not be saved yet: {exc}. It is kept and saved "
                                        "with the next part; if this goes on, free some disk space or check that "
                                        "the data folder is writable."))
            return False
        if self._store_failed:
            self._store_failed = False
            self.notice.emit(Notice("This reply is being saved again: the part that could not be written is in the "
                                    "history now.", Level.INFO))
        return True
