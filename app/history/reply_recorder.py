"""Follows one chat reply: saves each batch of rounds and tokens, then hands it to the window.

A continued reply (Continue after Stop or the max tokens limit) is the same message going on: the
engine numbers the new part's tokens and rounds from the start, so they are moved on past the ones
the reply already has, its text is the old text and the new, and its totals those of both parts.

Order matters for "a crash loses nothing already shown": a batch is committed to SQLite
(one transaction) before the view is told about it. A batch that cannot be written (another
program holds the database for a moment) stays pending and goes with the next one, so a stored
reply never has a hole; one still unsaved when the reply ends is marked incomplete.
"""
from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence

from engine.decoding.events import DoneEvent, Event, FinishReason, RoundEvent, Stats, TokenEvent
from engine.decoding.reasoning import split_reply

from app.core.errors import Level, Notice, explain
from app.history.records import Message
from app.history.reply_stats import ReplyStats, joined_stats
from app.history.store import ChatStore, StoreError


class ReplyRecorder:
    """Handler of one reply request (GUI thread). The controller routes batches of events here."""

    def __init__(self, store: ChatStore, conversation_id: int, user: Message, reply: Message, auto: bool,
                 on_tokens: Callable[[Message, list[TokenEvent]], None],
                 on_stats: Callable[[ReplyStats], None],
                 on_finished: Callable[["ReplyRecorder"], None],
                 on_notice: Callable[[Notice], None]) -> None:
        self.store = store
        self.conversation_id = conversation_id
        self.user = user
        self.message = reply
        self.stats = ReplyStats(auto)
        self.done: DoneEvent | None = None
        self.error: BaseException | None = None
        self.orphaned = False  # its conversation was deleted: stop writing
        self._on_tokens, self._on_stats, self._on_finished, self._on_notice = on_tokens, on_stats, on_finished, on_notice
        self._store_failed = False
        self._pending_rounds: list[RoundEvent] = []
        self._pending_tokens: list[TokenEvent] = []
        # A continued reply: what it held before (its tokens and rounds are kept in the message).
        self._before: tuple[str, Stats | None, int, int, FinishReason] | None = None

    def continuing(self, text: str, stats: Stats | None, finish: FinishReason) -> None:
        """This reply goes on from `text` (its tokens and rounds so far are in the message; it had ended for
        `finish`): new tokens and rounds are numbered after them, and the totals at the end are those of
        both parts. Should nothing be added, it is left as it was."""
        m = self.message
        self._before = (text, stats, len(m.tokens), max(m.rounds, default=0), finish)
        for r in (m.rounds[n] for n in sorted(m.rounds)):
            self.stats.add_round(r)

    def _flush_pending(self) -> bool:
        """Write every batch not yet stored (rows are keyed: writing one twice is harmless)."""
        rounds, tokens = self._pending_rounds, self._pending_tokens
        if not rounds and not tokens:
            return True
        if self._save(lambda: self.store.append(self.message.id, rounds, tokens)):
            self._pending_rounds, self._pending_tokens = [], []
            return True
        return False

    def on_events(self, events: Sequence[Event]) -> None:
        rounds = [e for e in events if isinstance(e, RoundEvent)]
        tokens = [e for e in events if isinstance(e, TokenEvent)]
        done = next((e for e in events if isinstance(e, DoneEvent)), None)
        if self._before is not None:
            _text, first, token_base, round_base, _finish = self._before
            rounds = [dataclasses.replace(r, round=r.round + round_base) for r in rounds]
            tokens = [dataclasses.replace(t, index=t.index + token_base, round=t.round + round_base) for t in tokens]
            if done is not None:
                stats = joined_stats(first, done.stats, [self.message.rounds[n] for n in sorted(self.message.rounds)]
                                     + rounds) if first is not None else done.stats
                done = DoneEvent(done.finish_reason, _text + done.text, stats, self.message.thinking)
        self._pending_rounds += rounds
        self._pending_tokens += tokens
        self._flush_pending()
        for r in rounds:
            self.message.rounds[r.round] = r
            if self._before is None:  # a continuation adds answer to a reply whose tokens the view splits as before
                self.message.thinking_open = r.thinking_open  # the same on every round: the view splits by it
            self.stats.add_round(r)
        self.message.tokens.extend(tokens)
        if tokens:
            self._on_tokens(self.message, tokens)
        if done is not None:
            self.done = done
            self.stats.finish(done.stats)
        if rounds or done is not None:
            self._on_stats(self.stats)

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
            self._save(lambda: self.store.finish(m.id, self.done, m.content, m.error, m.thinking))
        elif self._before is not None:  # a continuation that ended without its end (failed, or the app closed)
            text, stats, n_tokens, _rounds, finish = self._before
            added = m.tokens[n_tokens:]
            self._text_from_tokens()
            if not added:  # nothing was added: the reply is as it was
                m.finish_reason, m.stats = finish, stats
                before = DoneEvent(finish, text, stats, m.thinking) if stats is not None else None
                self._save(lambda: self.store.finish(m.id, before, m.content, m.error, m.thinking))
            else:
                m.finish_reason = FinishReason.CANCELLED
                m.error = f"failed: {explain(self.error).text}" if self.error is not None else m.error
                self._save(lambda: self.store.finish(m.id, None, m.content, m.error, m.thinking))
        elif self.error is not None and m.tokens:
            self._text_from_tokens()
            m.finish_reason = FinishReason.CANCELLED
            m.error = f"failed: {explain(self.error).text}"
            self._save(lambda: self.store.finish(m.id, None, m.content, m.error, m.thinking))
        self._on_finished(self)

    def closed_early(self, note: str) -> None:
        """The app closed before the reply's end came: it is kept as far as it went, marked stopped (a
        busy machine can take longer to stop than a closing window waits)."""
        m = self.message
        self._flush_pending()
        self._text_from_tokens()
        m.finish_reason, m.error = FinishReason.CANCELLED, note
        self._save(lambda: self.store.finish(m.id, None, m.content, m.error, m.thinking, FinishReason.CANCELLED))

    def _text_from_tokens(self) -> None:
        """A reply that ended without its end: its text as far as its tokens went (a continuation's text
        before, then what it added; else its tokens' text, thinking apart)."""
        m = self.message
        if self._before is not None:
            m.content = self._before[0] + "".join(t.text for t in m.tokens[self._before[2]:])
        else:
            raw = "".join(t.text for t in m.tokens)
            m.thinking, m.content = split_reply(raw, m.thinking_open).split(raw)

    def _save(self, write: Callable[[], None]) -> bool:
        """Whether the write went through; the first failure of a reply is said, and its recovery."""
        if self.orphaned:
            return True
        try:
            write()
        except StoreError as exc:
            if not self._store_failed:  # say it once per reply, keep showing the reply
                self._store_failed = True
                self._on_notice(Notice(f"Part of this reply could not be saved yet: {exc}. It is kept and saved "
                                       "with the next part; if this goes on, free some disk space or check that "
                                       "the data folder is writable."))
            return False
        if self._store_failed:
            self._store_failed = False
            self._on_notice(Notice("This reply is being saved again: the part that could not be written is in the "
                                   "history now.", Level.INFO))
        return True
