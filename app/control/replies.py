"""Replies: asking the engine thread for one, routing its events, and the chat's reply in progress.

Engine events arrive one by one from the worker and are handed on in batches, one per tick of the one
timer between the engine and the screen, so a fast pair cannot flood the event loop (and each batch is
one SQLite transaction). The tick's own cost (saving, then the observers' redraw) spaces the next one:
a slow redraw is never asked for more often than it can keep up with. The chat reply is a
`StreamingReply` (streaming_reply.py) that the window observes; Replies only starts it and, when it
is over, takes back a reply that failed before its first token and says why a reply ended. One busy
state for the whole app: while anything runs on the engine thread (a chat reply, or the two runs
of Compare) nothing else can be sent, and each caller stops only its own requests.

A chat reply always answers the shown path up to its question. Sending adds a question (with its
attached files) and its reply at the end; regenerating adds a reply beside the shown one (same
question); resending an edit adds a question beside the edited one, and its reply. Each new message
becomes the shown alternative of its group, so the path ends at the reply being written. Continuing
a reply that was stopped or cut at the max tokens limit goes on writing the same message; editing a
reply adds the edited text beside it, and nothing is generated.
"""
from __future__ import annotations

import dataclasses
import itertools
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Protocol

from PySide6.QtCore import QObject, Qt, QTimer, Signal

from engine.attachments import Attachment, user_content
from engine.decoding.events import FinishReason
from engine.decoding.reasoning import split_reply
from engine.sampling import SamplingParams
from engine.decoding.joined_turns import EARLIER_CHARS, EARLIER_MESSAGES
from engine.decoding.session import GenerationSettings

from app.control.conversations import Conversations, title_of
from app.control.pairing import Pairing, drafter_label, pair_problem
from app.control.preferences import Preferences
from app.control.streaming_reply import LIVE_TITLE, StreamingReply
from app.core.background import disconnect_all
from app.core.errors import CONTEXT_FULL_NOTICE, Action, Level, Notice, explain
from app.core.settings import AppSettings, settings_from_json
from app.core.engine_thread.worker import ContinueFrom, EngineWorker, ReadAheadRequest, ReplyRequest
from app.history.records import EDITED, Message, Role
from app.history.store import StoreError

FLUSH_MS = 40
"""How often streamed events reach the window (and the database), at most."""
TICK_SHARE = 4
"""A tick that took t seconds (saving and redrawing) is followed by the next after at least TICK_SHARE * t:
the rest of the event loop (typing, scrolling) keeps most of the time when a redraw grows slow."""
REPLAYED = ("target", "drafter", "draft_max", "temperature", "top_k", "top_p", "min_p", "seed", "max_tokens",
            "system_prompt")
"""What "regenerate" takes from the reply's recorded settings; the rest (context, threads, view) stays as is."""


class ReplyHandler(Protocol):
    """Where a request's events go: a StreamingReply (the chat's reply, or one of Compare's two runs)."""

    def on_events(self, events: list) -> None: ...
    def on_failed(self, exc: BaseException) -> None: ...
    def on_finished(self) -> None: ...


def history_for(messages: Sequence[Message], system_prompt: str) -> list[dict[str, str]]:
    """A conversation as the engine wants it, system prompt first: the chat and Compare both use this.

    Consecutive messages of one role are sent as one turn: deleting a message can leave two
    questions (or two replies) in a row, and many chat templates refuse turns that do not alternate.
    A reply that thought is sent as its answer with its thinking apart, as `reasoning_content`: the chat
    template decides whether that goes back into the context (Qwen3's keeps none of an earlier turn's).
    """
    out = [{"role": "system", "content": system_prompt}] if system_prompt.strip() else []
    for m in messages:
        text, thinking = (user_content(m.text, m.attachments), "") if m.role == Role.USER else (m.text, m.thinking)
        if m.role == Role.ASSISTANT and not thinking:  # a reply cut short by a crash keeps its tags in its text
            thinking, text = split_reply(text, m.thinking_open).split(text)
        if m.role == Role.ASSISTANT and not text and not thinking:
            continue
        turn = {"role": m.role.value, "content": text}
        if thinking:
            turn["reasoning_content"] = thinking
        if len(out) > (1 if system_prompt.strip() else 0) and out[-1]["role"] == m.role.value:
            before = out[-1]["content"] + "\n\n"
            out[-1] = {**out[-1], **turn, "content": before + text}
            if m.role == Role.USER:  # what the engine drops first when the joined turn does not fit
                joined = int(out[-1].get(EARLIER_MESSAGES, "0")) + 1
                out[-1].update({EARLIER_MESSAGES: str(joined), EARLIER_CHARS: str(len(before))})
        else:
            out.append(turn)
    return out


def generation_settings_of(s: AppSettings, plain: bool = False) -> GenerationSettings:
    return GenerationSettings(
        sampling=SamplingParams(temperature=s.temperature, top_k=s.top_k, top_p=s.top_p, min_p=s.min_p, seed=s.seed),
        draft_max=0 if plain else s.draft_max,
        max_tokens=s.max_tokens,
    )


@dataclasses.dataclass(frozen=True, slots=True)
class CompareRuns:
    """What Compare queued: the speculative and the plain run of one reply's prompt."""

    ids: tuple[int, int]
    """Request ids (speculative, plain): Compare stops these and nothing else."""
    settings: AppSettings
    """The settings both runs use: the reply's own, as recorded."""
    notes: tuple[str, ...]
    """Where the runs cannot be like the recorded reply (another pair loaded now, settings unknown)."""


class Replies(QObject):
    """Requests to the engine thread and the chat reply being written (GUI thread)."""

    sig_notice = Signal(object)
    """Show a Notice above the chat."""
    sig_reply_started = Signal(object)
    """A chat reply (StreamingReply) was asked for: observe it (its tokens, its numbers)."""
    sig_reply_finished = Signal(object)
    """The streaming reply (Message) is over."""
    sig_stats = Signal(object, str)
    """Show these numbers (StatsSnapshot or None) under this title."""
    sig_busy = Signal(bool)
    """The engine thread took work (True: a chat reply or Compare; nothing can be sent) or is free (False)."""
    sig_input_restore = Signal(str, object)
    """A reply failed before its first token: put the user's text and attached files (tuple[Attachment]) back
    in the input box."""
    sig_request = Signal(object)
    """A ReplyRequest was queued for the engine thread (the worker's input, as sent)."""
    sig_read_ahead = Signal(object)
    """A ReadAheadRequest for the engine thread: the chat shown, read into the drafter while the user writes."""

    def __init__(self, prefs: Preferences, worker: EngineWorker, conversations: Conversations, pairing: Pairing,
                 parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.prefs = prefs
        self.worker = worker
        self.conversations = conversations
        self.pairing = pairing
        self.chat_reply: StreamingReply | None = None
        self.closed = False
        self._new_question = False  # the chat reply's question was written for it (send, edit)
        self._ids = itertools.count(1)
        self._handlers: dict[int, ReplyHandler] = {}
        self._pending: dict[int, list] = {}
        self._was_busy = False
        # Directly, on this thread as it queues: a conversation being read ahead gives way at once.
        self.sig_request.connect(worker.interrupt_read_ahead, Qt.ConnectionType.DirectConnection)
        self.sig_request.connect(worker.reply)
        self.sig_read_ahead.connect(worker.read_ahead)
        self._links = ((worker.sig_event, self._on_event), (worker.sig_reply_failed, self._on_reply_failed),
                       (worker.sig_reply_finished, self._on_reply_finished))
        for sig, slot in self._links:
            sig.connect(slot)
        self._flush_timer = QTimer(self, interval=FLUSH_MS)
        self._flush_timer.timeout.connect(self.flush)

    @property
    def settings(self) -> AppSettings:
        return self.prefs.settings

    @property
    def store(self):
        return self.conversations.store

    # -- busy -----------------------------------------------------------------------------------
    @property
    def busy(self) -> bool:
        """A chat reply or a Compare run is queued or running on the engine thread."""
        return self.chat_reply is not None or bool(self._handlers)

    def _busy_changed(self) -> None:
        if self.busy != self._was_busy:
            self._was_busy = self.busy
            self.sig_busy.emit(self._was_busy)

    def interrupt(self) -> str | None:
        """Stop whatever runs (models are switching); says what was stopped."""
        if not self.busy:
            return None
        what = "The reply" if self.chat_reply is not None else "Compare"
        self.stop()
        return what

    def stop(self) -> None:
        """Stop whatever runs on the engine thread (takes effect within one round)."""
        self.worker.stop(list(self._handlers))

    def stop_requests(self, ids: Sequence[int]) -> None:
        """Stop only these requests, if they are still queued or running."""
        self.worker.stop([i for i in ids if i in self._handlers])

    # -- chat replies -----------------------------------------------------------------------------
    def _can_start(self) -> bool:
        if self.closed:
            return False
        if self.busy:  # Enter and Send did nothing here, with no reason (the text stays in the box)
            live = self.chat_reply
            conv = None if live is None or live.conversation_id is None else \
                self.conversations.conversation(live.conversation_id)
            where = "" if conv is None or conv.id == self.conversations.current_id else f" in “{conv.title}”"
            what = f"the reply{where}" if live is not None else "Compare"
            self.sig_notice.emit(Notice(f"Wait for {what} to finish (or press Stop) before sending: one reply is "
                                        "written at a time. What you typed is kept.", Level.INFO))
            return False
        if not self.settings.target:
            self.sig_notice.emit(Notice("Choose a target model first: install one in Models…, or pick a GGUF file "
                                        "in the Target list.", Level.WARNING, Action.OPEN_MODELS))
            return False
        return True

    def send(self, text: str, attachments: Sequence[Attachment] = ()) -> bool:
        """Start a reply to `text` and its attached files after the shown path; False (and a notice) when it
        cannot start."""
        text = text.strip()
        if not (text or attachments) or not self._can_start():
            return False
        convs, s = self.conversations, self.settings
        try:
            conv = convs.ensure_open()
            history = list(convs.messages)
            parent = history[-1].id if history else None
            user = self.store.add_message(conv, Role.USER, text, parent_id=parent, attachments=attachments)
            self.store.set_title_if_default(conv, title_of(text or attachments[0].name))
            reply = self._new_reply(conv, user, s)
        except StoreError as exc:
            convs.failed(exc)
            return False
        self._start(history + [user], user, reply, s, new_question=True, at_end=True)
        return True

    def regenerate(self, message_id: int, current: bool) -> bool:
        """A new alternative reply beside this one (or under this question), made with the reply's
        recorded settings, or with the current ones when `current`. A question has no recorded
        settings: its new reply always uses the current ones."""
        convs = self.conversations
        i = convs.find(message_id)
        if i is None or not self._can_start():
            return False
        m = convs.messages[i]
        q = i if m.role == Role.USER else i - 1
        if q < 0 or convs.messages[q].role != Role.USER:
            # Its question was deleted: the engine answers a question, never a reply.
            self.sig_notice.emit(Notice("This reply's question was deleted, so there is nothing to answer again.",
                                        Level.INFO))
            return False
        s = self.settings if current or m.role == Role.USER else self._replayed(m)
        if s is None:
            return False
        question = convs.messages[q]
        try:
            reply = self._new_reply(convs.current_id, question, s)
        except StoreError as exc:
            convs.failed(exc)
            return False
        self._start(convs.messages[: q + 1], question, reply, s, new_question=False, at_end=False)
        return True

    def resend_edit(self, message_id: int, text: str, attachments: Sequence[Attachment] | None = None) -> bool:
        """An edited question beside the original (which stays as an alternative), and its reply. Its files are
        `attachments` (None: the original's)."""
        text = text.strip()
        convs = self.conversations
        old = self._being_edited(message_id, "the edit was not sent")
        if old is None:
            return False
        i = convs.messages.index(old)
        files = old.attachments if attachments is None else tuple(attachments)
        if not (text or files) or old.role != Role.USER or not self._can_start():
            return False
        s = self.settings
        try:
            user = self.store.add_message(convs.current_id, Role.USER, text, parent_id=old.parent_id,
                                          attachments=files)
            reply = self._new_reply(convs.current_id, user, s)
        except StoreError as exc:
            convs.failed(exc)
            return False
        self._start(convs.messages[:i] + [user], user, reply, s, new_question=True, at_end=False)
        return True

    def save_reply_edit(self, message_id: int, text: str) -> bool:
        """The edited text of a reply, kept beside it as a new alternative (nothing is generated); the original
        stays one step back."""
        convs = self.conversations
        old = self._being_edited(message_id, "the edit was not saved")
        if old is None or old.role != Role.ASSISTANT or not text.strip() or self.busy or self.closed:
            return False
        try:
            self.store.add_message(convs.current_id, Role.ASSISTANT, text, old.target, old.drafter,
                                   {**old.settings, EDITED: True}, parent_id=old.parent_id,
                                   finish_reason=FinishReason.STOP)
        except StoreError as exc:
            convs.failed(exc)
            return False
        convs.reload()
        convs.emit_list()
        return True

    def _being_edited(self, message_id: int, outcome: str) -> Message | None:
        """The message of the shown path an edit is for; None (and a notice ending in `outcome`) when it left."""
        i = self.conversations.find(message_id)
        if i is None:
            self.sig_notice.emit(Notice(f"The message being edited is not shown any more; {outcome}.", Level.WARNING))
            return None
        return self.conversations.messages[i]

    def continue_reply(self, message_id: int) -> bool:
        """Go on writing a reply that was stopped or cut at the max tokens limit (the last message shown), with
        the settings it was made with: the engine reads it as the start of its answer, the same message grows,
        and its totals become those of both parts."""
        convs = self.conversations
        i = convs.find(message_id)
        if i is None or not self._can_start():
            return False
        m = convs.messages[i]
        if i != len(convs.messages) - 1 or not m.continuable:
            self.sig_notice.emit(Notice("Only the last reply can be continued, when it was stopped or reached the "
                                        "max tokens limit.", Level.INFO))
            return False
        if i == 0 or convs.messages[i - 1].role != Role.USER:
            self.sig_notice.emit(Notice("This reply's question was deleted, so there is nothing to continue from.",
                                        Level.INFO))
            return False
        s = self._replayed(m, continuing=True)
        if s is None:
            return False
        text, stats, finish = m.text, m.stats, m.finish_reason
        try:
            self.store.reopen(m.id)
        except StoreError as exc:
            convs.failed(exc)
            return False
        m.content, m.finish_reason, m.stats, m.error = "", None, None, ""
        live = self._streaming(convs.messages[i - 1], m, s)
        live.continuing(text, stats, finish)
        self._new_question = False
        convs.reload()
        # A reply that thought goes on after its thinking: the model is given what it wrote, tags and all.
        written = "".join(t.text for t in m.tokens) if m.thinking else text
        self._request_chat(convs.messages[:i], s, live, continuation=ContinueFrom(
            written, tuple(t.token_id for t in m.tokens)))
        return True

    def _replayed(self, reply: Message, continuing: bool = False) -> AppSettings | None:
        """The current settings with the reply's pair, k and sampling (`_start` switches to its pair).
        None (and a notice saying why) when the reply cannot be made again that way. A reply being
        continued whose settings were not recorded goes on with the current ones."""
        recorded = self.recorded_settings(reply)
        if recorded is None and continuing:
            return self.settings
        if recorded is None:
            self.sig_notice.emit(Notice("This reply's settings were not recorded, so it cannot be made again the same "
                                        "way. Use “Regenerate with current settings” instead.", Level.WARNING))
            return None
        problem = pair_problem(recorded.target, recorded.drafter)
        if problem:
            instead = "" if continuing else ", or use “Regenerate with current settings”"
            self.sig_notice.emit(Notice(f"This reply cannot be {'continued' if continuing else 'made again'} with its "
                                        f"own pair: {problem}. Install it again in Models…{instead}.",
                                        Level.WARNING, Action.OPEN_MODELS))
            return None
        return dataclasses.replace(self.settings, **{k: getattr(recorded, k) for k in REPLAYED})

    def _new_reply(self, conv_id: int, question: Message, s: AppSettings) -> Message:
        return self.store.add_message(conv_id, Role.ASSISTANT, "", Path(s.target).name, drafter_label(s.drafter),
                                      s.recorded(), parent_id=question.id)

    def _streaming(self, question: Message, reply: Message, s: AppSettings) -> StreamingReply:
        convs = self.conversations
        assert convs.current_id is not None
        live = StreamingReply(reply, auto=s.draft_max.is_auto, store=self.store, conversation_id=convs.current_id,
                              question=question)
        live.notice.connect(self.sig_notice)
        live.finished.connect(self._chat_finished)
        self.chat_reply = live
        self.sig_reply_started.emit(live)
        return live

    def _start(self, history: list[Message], question: Message, reply: Message, s: AppSettings,
               new_question: bool, at_end: bool) -> None:
        convs = self.conversations
        live = self._streaming(question, reply, s)
        self._new_question = new_question
        if at_end:
            convs.appended([question, reply])
        else:  # a new branch: the path below the branch point changes
            convs.reload()
            convs.emit_list()
        self._request_chat(history, s, live)

    def _request_chat(self, history: list[Message], s: AppSettings, live: StreamingReply,
                      continuation: ContinueFrom | None = None) -> None:
        """Ask for the chat reply `live`, loading its pair first when it is not the one chosen now."""
        convs = self.conversations
        self.sig_stats.emit(live.snapshot(), LIVE_TITLE)
        if (s.target, s.drafter) != (self.settings.target, self.settings.drafter):
            # A reply made again with its own pair: load it (queued before the request below).
            self.pairing.use_pair(s.target, s.drafter)
            self.sig_notice.emit(Notice(f"Loading {Path(s.target).name} + {drafter_label(s.drafter)}, the pair this "
                                        "reply was made with.", Level.INFO))
        self.pairing.ensure_loaded()
        self.request_reply(history_for(history, s.system_prompt), generation_settings_of(s), live,
                           conversation=str(convs.current_id), attachments=live.question.attachments,
                           continuation=continuation)

    def abandon(self, conv_id: int) -> None:
        """The conversation is being deleted: its running reply stops and writes nothing more."""
        live = self.chat_reply
        if live is not None and live.conversation_id == conv_id:
            live.orphaned = True
            self.stop()

    # -- any request --------------------------------------------------------------------------------
    def request_reply(self, messages: list[dict[str, str]], settings: GenerationSettings, handler: ReplyHandler,
                      cold: bool = False, conversation: str | None = None, attachments: Sequence[Attachment] = (),
                      continuation: ContinueFrom | None = None) -> int:
        """Queue a reply on the engine thread; events go to `handler` in batches. A chat reply names its
        `conversation` (counted into the index of past chats when that is on), the files attached to its
        question (named if they do not fit the context) and, when continuing a reply, what it holds so far."""
        rid = next(self._ids)
        self._handlers[rid] = handler
        self.sig_request.emit(ReplyRequest(rid, tuple(messages), settings, cold, conversation, tuple(attachments),
                                           continuation))
        self._busy_changed()
        return rid

    def read_ahead_shown(self) -> None:
        """After a reply, a load, or when another chat is shown: the drafter reads that chat (and the system
        prompt) as its next question will send it, while the user writes the question. Only with a pair loaded
        and nothing running; any request queued later ends it."""
        if self.closed or self.busy or self.pairing.loaded is None:
            return
        messages = history_for(self.conversations.messages, self.settings.system_prompt)
        if messages:
            self.sig_read_ahead.emit(ReadAheadRequest(tuple(messages), self.worker.asked))

    def recorded_settings(self, reply: Message) -> AppSettings | None:
        """The settings `reply` was made with, or None when they were not recorded."""
        data = reply.settings
        if not data:
            try:
                data = self.store.reply_settings(reply.id)
            except StoreError:
                return None
        return settings_from_json(data) if data else None

    def compare(self, messages: Sequence[Message], speculative: ReplyHandler, plain: ReplyHandler) -> CompareRuns | None:
        """Run the prompt of `messages[-1]` (a finished reply) again twice, speculative then plain, with
        the reply's own system prompt, sampling and history, each from empty caches (both cold: no run
        reuses what the other, or the chat, left). None when the engine is busy."""
        if self.busy or self.closed or not messages:
            return None
        reply = messages[-1]
        notes = []
        s = self.recorded_settings(reply)
        if s is None:
            s = self.settings
            notes.append("This reply's settings were not recorded; today's system prompt and sampling are used.")
        loaded = self.pairing.loaded_or_wanted()
        if loaded is not None and loaded.target.name != reply.target:
            notes.append(f"{loaded.target.name} is loaded now, but the reply came from {reply.target}.")
        elif loaded is not None and reply.drafter and drafter_label(loaded.drafter) != reply.drafter:
            notes.append(f"The drafter now is {drafter_label(loaded.drafter)}; the reply was made with {reply.drafter}.")
        if self.settings.history_drafts:
            notes.append("Drafting from past chats is left out: its index already holds this reply.")
        history = history_for(messages[:-1], s.system_prompt)
        self.pairing.ensure_loaded()
        ids = (self.request_reply(history, generation_settings_of(s), speculative, cold=True),
               self.request_reply(history, generation_settings_of(s, plain=True), plain, cold=True))
        return CompareRuns(ids, s, tuple(notes))

    def _on_event(self, rid: int, event: object) -> None:
        self._pending.setdefault(rid, []).append(event)
        if not self._flush_timer.isActive():
            self._flush_timer.start()

    def flush(self) -> None:
        """One tick: every request's events so far to its handler (each saves, then its observers redraw)."""
        t0 = time.perf_counter()
        pending, self._pending = self._pending, {}
        for rid, events in pending.items():
            handler = self._handlers.get(rid)
            if handler is not None and events:
                handler.on_events(events)
        if not self._pending:
            self._flush_timer.stop()
        self._flush_timer.setInterval(max(FLUSH_MS, round(TICK_SHARE * 1000 * (time.perf_counter() - t0))))

    def _on_reply_failed(self, rid: int, exc: BaseException) -> None:
        self.flush()
        handler = self._handlers.get(rid)
        if handler is not None:
            handler.on_failed(exc)

    def _on_reply_finished(self, rid: int) -> None:
        self.flush()
        handler = self._handlers.pop(rid, None)
        if handler is not None:
            handler.on_finished()
        self._busy_changed()

    # -- the chat reply's end ----------------------------------------------------------------------
    def showing(self, reply: StreamingReply) -> bool:
        """The reply's conversation is the open one (and was not deleted)."""
        return reply.conversation_id == self.conversations.current_id and not reply.orphaned

    def _chat_finished(self, rec: StreamingReply) -> None:
        self.chat_reply = None
        if rec.orphaned:
            return
        if rec.error is not None and self.pairing.loaded is None and self.pairing.load_error is not None:
            rec.error = self.pairing.load_error  # "no model is loaded" because loading failed: say why
        if rec.done is None and not rec.message.tokens:
            # Failed before any token: take back what this request wrote (the reply, and the question
            # when it was written for it: a regenerated reply's question stays) and show the path as it was.
            question = rec.question
            assert question is not None
            # A question goes back to the message box only where its chat is shown; elsewhere it stays in its
            # chat, unanswered (Retry), rather than be lost.
            back = self._new_question and self.showing(rec)
            taken = [rec.message] + ([question] if back else [])
            for m in taken:
                try:
                    self.store.delete_message(m.id)
                except StoreError:
                    pass
            if self.showing(rec):
                self.conversations.reload()
                if back:
                    self.sig_input_restore.emit(question.content, question.attachments)
            if back:
                self.conversations.forget_if_empty(rec.conversation_id)
            if rec.error is not None:
                self.sig_notice.emit(self._where(rec, explain(rec.error)))
            self.conversations.emit_list()
            return
        if self.showing(rec):
            self.sig_reply_finished.emit(rec.message)
        if rec.error is not None:
            self.sig_notice.emit(self._where(rec, explain(rec.error)))
        elif rec.done is not None and rec.done.finish_reason == FinishReason.CONTEXT_FULL:
            self.sig_notice.emit(CONTEXT_FULL_NOTICE)
        elif rec.done is not None and (note := rec.done.stats.note) and note not in self.settings.notes_seen:
            # Once, not after every reply (the default pair's hid the top of each) nor at every launch: the
            # status line keeps saying it.
            self.prefs.adopt(notes_seen=(*self.settings.notes_seen, note))
            self.sig_notice.emit(Notice(note[:1].upper() + note[1:] + ".", Level.INFO))
        self.conversations.emit_list()
        self.read_ahead_shown()  # the reply as the next question will send it (history_for)

    def _where(self, rec: StreamingReply, notice: Notice) -> Notice:
        """A reply's failure, naming its chat when another one is on screen (it read as this chat's)."""
        if self.showing(rec) or rec.conversation_id is None:
            return notice
        conv = self.conversations.conversation(rec.conversation_id)
        if conv is None:
            return notice
        return dataclasses.replace(notice, text=f"In “{conv.title}”: {notice.text}")

    # -- closing ---------------------------------------------------------------------------------
    def disconnect_worker(self) -> None:
        self._flush_timer.stop()
        disconnect_all(self._links)

    def close(self) -> None:
        """After the engine thread ended or was left behind: a reply whose end never came is kept as
        far as it was shown, marked stopped."""
        rec, self.chat_reply = self.chat_reply, None
        if rec is not None and not rec.orphaned:
            rec.closed_early("stopped: the app was closed during the reply")
        self._handlers.clear()
