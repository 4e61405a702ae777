"""The engine thread: a QObject living on a QThread that loads models and drives replies.

Requests arrive as queued slot calls (in order: a load queued behind a reply runs after it);
everything it learns leaves as signals, which Qt delivers to the GUI thread. It never touches
a widget. This is superqt's `new_worker_qthread` pattern written out, and deliberately not the
app's background Worker (app.core.background), which gives each job a thread of its own: the
models live on this one thread for the session, and loads and replies must run one at a time in
the order they were asked for. Stop is not a slot (the thread is busy inside the reply): `stop()` marks request ids
as stopped and sets the running reply's own stop request directly from the GUI thread, which ends
llama.cpp's pass in progress part-way (engine.llama.backend.StopRequest).

Loads can be cancelled from the GUI thread (`cancel_load`): llama.cpp stops within one tensor and
frees what it had loaded, and the load ends as a failure with LoadCancelled. Closing cancels the
load in progress and never waits for a slot that cannot be interrupted (a long prompt read):
`close_soon()` makes every queued request a no-op and has the busy slot free the models itself
when it returns, on this thread.

Drafting from past chats (opt-in) lives here too, on this thread: the index opens after a load,
each finished reply of a conversation is counted into it, and it is saved every few replies and
when the models are freed (past_chats_index, beside this file).
"""
from __future__ import annotations

import ctypes
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from PySide6.QtCore import QObject, Signal, Slot

from engine.attachments import Attachment, fenced
from engine.errors import ContextFullError, EngineError, LoadCancelled
from engine.decoding.events import DoneEvent, TokenEvent
from engine.drafting.draft_choice import DraftSpec
from engine.decoding.session import GenerationSettings, Session
from engine.decoding.measure import LoadStage
from engine.llama.types import LoadSettings, StopRequest

from app.core.errors import AttachmentTooLarge
from app.core.engine_thread.past_chats_index import PastChatsChoice, PastChatsIndex


@dataclass(frozen=True, slots=True)
class LoadRequest:
    """Which pair to load, and how."""

    target: Path
    """Target model file."""
    drafter: DraftSpec
    """None, prompt lookup, a drafter model, or both."""
    load: LoadSettings = LoadSettings()
    """Context length, GPU layers, threads."""
    cancel: threading.Event = field(default_factory=threading.Event, compare=False, repr=False)
    """Set (EngineWorker.cancel_load) to cancel this load, queued or running."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "drafter", DraftSpec.parse(self.drafter))  # the text of a setting reads too


@dataclass(frozen=True, slots=True)
class LoadedInfo:
    """What got loaded."""

    request: LoadRequest
    """The request it answers."""
    drafter_label: str
    """The drafter as the engine names it."""
    n_ctx: int
    """Context length in tokens."""
    notes: tuple[str, ...]
    """The engine's remarks (no chat template, plain decoding only, ...)."""
    seconds: float
    """Time to load and measure."""


@dataclass(frozen=True, slots=True)
class ReplyRequest:
    """One reply to produce."""

    id: int
    """Chosen by the controller; every event of this reply carries it."""
    messages: tuple[dict, ...]
    """The conversation, system prompt first if any, ending with the user's message."""
    settings: GenerationSettings
    """Sampling, draft length, max tokens."""
    cold: bool = False
    """Empty the caches first, so the reply reuses nothing an earlier one left (Compare)."""
    conversation: str | None = None
    """The chat it belongs to: its finished reply is counted into the index of past chats (when on).
    None: not counted (Compare's runs repeat a reply already counted)."""
    attachments: tuple[Attachment, ...] = ()
    """The files attached to the newest question: a request too long for the context names them."""
    continuation: ContinueFrom | None = None
    """Continue this reply (the last message, not in `messages`) rather than start a new one."""


@dataclass(frozen=True, slots=True)
class ReadAheadRequest:
    """A chat to read into the drafter while the user writes its next question (Replies.read_ahead_shown)."""

    messages: tuple[dict[str, str], ...]
    """The chat as its next request will send it (history_for)."""
    asked: int
    """EngineWorker.asked when this was queued: a request queued after it means the read is not wanted now."""


@dataclass(frozen=True, slots=True)
class ContinueFrom:
    """A reply written so far, to be continued (Continue after Stop or the max tokens limit)."""

    text: str
    """Its text."""
    token_ids: tuple[int, ...] = ()
    """Its tokens as the engine emitted them (reused as they are when they spell the text for this model)."""


class EngineWorker(QObject):
    """Owns the engine Session; lives on the engine thread."""

    sig_load_progress = Signal(object, float)
    """Loading: stage (engine.decoding.session.LoadStage) and fraction 0-1 of that stage (0 for a stage
    that reports none: LoadStage.has_fraction)."""
    sig_loaded = Signal(object)
    """A pair is loaded and measured (LoadedInfo)."""
    sig_load_failed = Signal(object, object, object)
    """Loading failed (LoadRequest, exception, LoadedInfo of what is still loaded, or None)."""
    sig_event = Signal(int, object)
    """One engine event (RoundEvent, TokenEvent or DoneEvent) of reply `id`."""
    sig_reply_failed = Signal(int, object)
    """Reply `id` raised (exception); events already sent stand."""
    sig_reply_finished = Signal(int)
    """Reply `id` is over (after its DoneEvent or its failure): the thread is free."""
    sig_past_chats = Signal(object)
    """What the index of past chats holds and does now (PastChatsStatus)."""
    sig_served = Signal(object, object)
    """One engine event of a request the local server sent (its job, the event): app.control.local_server."""
    sig_served_finished = Signal(object)
    """A served request is over (its job: `job.error` says why when it was refused): the thread is free."""

    def __init__(self) -> None:
        super().__init__()
        self._session: Session | None = None
        self._info: LoadedInfo | None = None
        # Stop, Close and Cancel come from the GUI thread and never wait for this thread: no lock is
        # shared with it. Each side writes its own state first and then reads the other's (one
        # attribute or set operation at a time, which the GIL makes atomic and ordered), so whichever
        # comes second sees the first (see stop() and reply()).
        self._stopped: set[int] = set()
        self._running: tuple[int, threading.Event] | None = None  # the reply running now and its stop request
        self._closing = False
        self._loading: LoadRequest | None = None
        self._idle = threading.Event()  # no reply or load is running on this thread (wait_idle)
        self._idle.set()
        self._last_progress: tuple[LoadStage | None, int] = (None, -1)
        self._past = PastChatsIndex()
        # Reading a chat ahead into the drafter (read_ahead) gives way to any request:
        # `asked` counts requests as they are queued (GUI thread, interrupt_read_ahead), `_ahead` is the read's stop.
        self.asked = 0
        self._ahead: StopRequest | None = None

    # -- called from the GUI thread ------------------------------------------------
    def stop(self, ids) -> None:
        """End these replies (running or queued) within one round; thread-safe, returns at once."""
        self._stopped.update(ids)
        running = self._running
        if running is not None and running[0] in self._stopped:
            running[1].set()  # that reply's own request: a late stop cannot end the next reply

    def interrupt_read_ahead(self, *_request) -> None:
        """A request is being queued: a conversation being read ahead into the drafter ends now, within one
        pass, so the request does not wait for it; thread-safe, returns at once. Connected directly (it runs on
        the thread that queues) to the signals that queue loads and replies."""
        self.asked += 1  # then read _ahead (read_ahead writes them the other way round)
        ahead = self._ahead
        if ahead is not None:
            ahead.set()

    def cancel_load(self, req: LoadRequest | None = None) -> None:
        """Cancel the load `req` (queued or running), or else the load running now; thread-safe,
        returns at once. It ends with sig_load_failed(req, LoadCancelled, what is still loaded):
        a cancelled drafter switch keeps the pair as it was, a new target leaves nothing loaded."""
        req = req or self._loading
        if req is not None:
            req.cancel.set()

    def close_soon(self) -> None:
        """The app is closing: cancel the load in progress, skip whatever is queued; the busy slot
        frees the models when it returns."""
        self._closing = True  # then read _loading: either the load sees this, or this sees the load
        loading = self._loading
        if loading is not None:
            loading.cancel.set()
        self.interrupt_read_ahead()

    def wait_idle(self, timeout_s: float) -> bool:
        """Wait (closing only) until no reply or load runs on the engine thread, at most `timeout_s`.
        A stopped reply ends within one pass; a load or a stuck slot is not waited for past the timeout."""
        return self._idle.wait(timeout_s)

    def release(self) -> None:
        """Free the models now; only once the engine thread has ended (or from it, as it ends)."""
        self._close()

    @property
    def holds_models(self) -> bool:
        return self._session is not None

    # -- slots, run on the engine thread -----------------------------------------------
    @Slot(object)
    def load(self, req: LoadRequest) -> None:
        self._loading = req  # then read _closing (close_soon writes them the other way round)
        if self._closing:
            self._loading = None
            return
        self._last_progress = (None, -1)  # a load cancelled at n% must not hide the next one's n%
        self._idle.clear()
        try:
            if req.cancel.is_set():  # cancelled while queued: what is loaded stays
                self.sig_load_failed.emit(req, LoadCancelled(f"loading {Path(req.target).name} was cancelled"),
                                          self._info)
            else:
                self._load(req)
        finally:
            self._loading = None
            self._idle.set()

    def _load(self, req: LoadRequest) -> None:
        t0 = time.perf_counter()
        current = self._session
        if current is not None and self._info is not None and self._same_target(self._info.request, req) \
                and hasattr(current, "set_drafter"):
            # Same target: swap only the drafter (the target stays loaded and measured).
            try:
                current.set_drafter(req.drafter, cancel=req.cancel)
            except Exception as exc:  # noqa: BLE001 - the old drafter stays in place
                self.sig_load_failed.emit(req, exc, self._info)
                return
            if self._closing:  # the window closed while the drafter loaded
                self._close()
                return
            self._loaded(current, req, t0)
            return
        self._close()
        try:
            # The session measures the target's (and drafter's) speed once loaded, for Auto.
            session = Session(req.target, req.drafter, target_load=req.load, progress=self._progress, calibrate=True,
                              cancel=req.cancel)
        except Exception as exc:  # noqa: BLE001 - every failure becomes a message in the window
            _return_freed_memory()  # a failed or cancelled load may have freed most of a model
            self.sig_load_failed.emit(req, exc, None)
            return
        if self._closing:  # the window closed while this loaded: nobody needs it
            session.close()
            return
        self._session = session
        self._loaded(session, req, t0)

    def _loaded(self, session: Session, req: LoadRequest, t0: float) -> None:
        self._info = LoadedInfo(req, session.spec.label, session.target.n_ctx, tuple(session.notes),
                                time.perf_counter() - t0)
        self.sig_loaded.emit(self._info)
        self._past.attach(session)  # after the news of the load: opening reads the vocabulary and a file
        self.sig_past_chats.emit(self._past.status(session))

    @staticmethod
    def _same_target(a: LoadRequest, b: LoadRequest) -> bool:
        return Path(a.target) == Path(b.target) and a.load == b.load

    @Slot(object)
    def reply(self, req: ReplyRequest) -> None:
        if self._closing:
            return
        self._idle.clear()
        session = self._session
        reply_ids: list[int] = []
        prefix: list[int] = []
        done = False
        held = None  # the index of past chats, left out of a cold run
        try:
            if session is None:
                raise EngineError("no model is loaded: choose a target model in the bar above the chat")
            if req.cold:
                session.reset_state()
                if session.history is not None:  # Compare: the index may hold this very reply
                    held = session.history
                    session.use_history(None)
            prefix = session.reply_tokens(req.continuation.text, req.continuation.token_ids) if req.continuation else []
            try:
                rendered = session.render(list(req.messages), reserve=req.settings.max_tokens, reply_prefix=prefix)
            except ContextFullError as exc:
                raise _too_large(session, req.attachments, exc) or exc from None
            events = session.reply(rendered, req.settings)
            stop = session.stop_event  # this reply's own
            self._running = (req.id, stop)  # then read _stopped (stop() writes them the other way round)
            if req.id in self._stopped:  # stopped before it began
                stop.set()
            for ev in events:
                self.sig_event.emit(req.id, ev)
                if isinstance(ev, TokenEvent):
                    reply_ids.append(ev.token_id)
                done = done or isinstance(ev, DoneEvent)
        except Exception as exc:  # noqa: BLE001
            self.sig_reply_failed.emit(req.id, exc)
        finally:
            if held is not None:
                session.use_history(held)
            self._running = None
            self._stopped.discard(req.id)
            self.sig_reply_finished.emit(req.id)
            self._idle.set()  # a closing window goes on now: what follows needs nothing of it
            if done and self._past.index is not None:  # after the news: the window need not wait for this
                self._past.add(session, req.messages, req.settings, prefix + reply_ids, req.conversation)
                self.sig_past_chats.emit(self._past.status(session))
            if self._closing:
                self._close()

    @Slot(object)
    def serve(self, job) -> None:
        """A request from the local server (engine.frontends.serve.ServedJob), in its turn among the window's own:
        the job answers its client itself (and refuses when nothing is loaded); its events are shown live too."""
        self._idle.clear()
        try:
            for ev in job.run(None if self._closing else self._session):
                self.sig_served.emit(job, ev)
        finally:
            self.sig_served_finished.emit(job)
            self._idle.set()
            if self._closing:
                self._close()

    @Slot(object)
    def read_ahead(self, req: ReadAheadRequest) -> None:
        """While the user reads a reply and writes the next question, the drafter reads the chat shown (after a
        reply, a load, or when another chat is opened: Replies.read_ahead_shown), so the next reply's look or first
        draft reads only the new question. Not when a request was queued after it (`req.asked`); one queued
        meanwhile ends it (interrupt_read_ahead); what it did not read, the next reply reads as before."""
        session = self._session
        if session is None:
            return
        self._ahead = stop = StopRequest()  # then read asked (interrupt_read_ahead writes them the other way round)
        try:
            if self.asked == req.asked and not self._closing:
                session.read_ahead(req.messages, stop)
        except Exception:  # noqa: BLE001 - work ahead of time: nothing is lost, the next reply reads it (and reports)
            pass
        finally:
            self._ahead = None

    @Slot(object)
    def configure_past_chats(self, choice: PastChatsChoice) -> None:
        """Turn drafting from past chats on or off (or change its cap) without reloading anything."""
        if not self._closing:
            self._past.configure(choice, self._session)
            self.sig_past_chats.emit(self._past.status(self._session))

    @Slot()
    def forget_past_chats(self) -> None:
        """Delete the index of past chats, files and all (the chats themselves stay)."""
        if not self._closing:
            self._past.forget(self._session)
            self.sig_past_chats.emit(self._past.status(self._session))

    # -- helpers -------------------------------------------------------------------------
    def _close(self) -> None:
        session, self._session, self._info = self._session, None, None
        self._past.close()  # saved before the model it belongs to goes
        if session is None:
            return
        if self._closing and _left_at_exit is not None:
            _left_at_exit.append(session)  # the process ends now: the system frees them faster
            return
        session.close()
        _return_freed_memory()

    def _progress(self, which: LoadStage, fraction: float) -> None:
        # llama.cpp reports per tensor: pass on whole percents only.
        pct = int(fraction * 100)
        if (which, pct) != self._last_progress:
            self._last_progress = (which, pct)
            self.sig_load_progress.emit(which, fraction)


def _too_large(session: Session, attachments: tuple[Attachment, ...],
               exc: ContextFullError) -> AttachmentTooLarge | None:
    """The question does not fit the context and files came with it: name the largest, with its real token
    count (the target's tokenizer, on the text as the model would read it). None: no files came."""
    if not attachments:
        return None
    counts = sorted(((session.count_tokens(fenced(a)), a.name) for a in attachments), reverse=True)
    n, name = counts[0]
    holds = exc.holds or session.target.n_ctx
    whole = f" (with your message and the chat template, {exc.needed:,})" if exc.needed else ""
    others = f"; the other attached files add {sum(c for c, _ in counts[1:]):,}" if len(counts) > 1 else ""
    return AttachmentTooLarge(f"{name} is {n:,} tokens{others}, and the model's context holds {holds:,}{whole}.",
                              needed=exc.needed, holds=holds)


_left_at_exit: list[Session] | None = None
"""Sessions of closed windows left for the system to free (leave_models_at_exit); None: freed on close."""


def leave_models_at_exit() -> None:
    """This process ends when its window closes (app.main): closing leaves the models to the system.
    Freeing a pair takes about half a second (each model's memory is unmapped page by page), and the
    system does that work anyway when the process exits; app.main then exits without finalizing."""
    global _left_at_exit
    if _left_at_exit is None:
        _left_at_exit = []


def models_left_at_exit() -> bool:
    return bool(_left_at_exit)


def _return_freed_memory() -> None:
    """glibc keeps freed model buffers in its arenas; hand them back so a model switch does not
    leave the process hundreds of MB larger (no-op elsewhere)."""
    if sys.platform.startswith("linux"):
        try:
            ctypes.CDLL("libc.so.6").malloc_trim(0)
        except (OSError, AttributeError):
            pass
