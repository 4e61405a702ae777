"""The app's brain on the GUI thread: settings, conversations, models, and the engine thread.

Widgets talk to it through slots and hear back through signals; it never draws. Engine events
arrive one by one from the worker and are handed on in batches, one per timer tick, so a fast
pair cannot flood the event loop (and each batch is one SQLite transaction).

One busy state for the whole app: while anything runs on the engine thread (a chat reply, or the
two runs of Compare) nothing else can be sent, and each caller stops only its own requests.
"""
from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol

from PySide6.QtCore import QCoreApplication, QObject, QThread, QTimer, Signal

from engine.errors import ModelFileError
from engine.decoding.events import FinishReason
from engine.decoding.sampling import SamplingParams
from engine.decoding.session import GenerationSettings, LoadSettings

from app.core.background import run_in_background
from app.core.errors import CONTEXT_FULL_NOTICE, Action, Level, Notice, explain
from app.control.model_scan import DrafterOption, ModelEntry, drafter_options, list_models
from app.history.records import Conversation, Message, Role
from app.history.reply_recorder import ReplyRecorder
from app.history.reply_stats import ReplyStats
from app.core.settings import AUTO, DRAFT_LOOKUP, DRAFT_NONE, AppSettings, load_settings, save_settings
from app.core.settings import _coerce as settings_from_dict
from app.history.store import ChatStore, StoreError, StoreMode
from app.control.tasks import Task, TaskState
from app.core.worker import EngineWorker, LoadedInfo, LoadRequest, ReplyRequest

FLUSH_MS = 40
"""How often streamed events reach the window (and the database)."""
TITLE_CHARS = 48
SHUTDOWN_WAIT_MS = 500
"""How long closing waits for the engine thread; a load or a long prompt read is not waited for."""

_lingering: list[tuple[QThread, EngineWorker]] = []
"""Engine threads still inside a load or a prompt read after their window closed (kept referenced:
Qt aborts when a running QThread is destroyed). Each frees its models when that call returns."""


def engine_threads_running() -> bool:
    """Some closed window's engine thread is still busy (main() then exits without waiting)."""
    _lingering[:] = [(t, w) for t, w in _lingering if not t.isFinished()]
    return bool(_lingering)


class ReplyHandler(Protocol):
    """Whoever asked for a reply: the chat, or the compare dialog."""

    def on_events(self, events: list) -> None: ...
    def on_failed(self, exc: BaseException) -> None: ...
    def on_finished(self) -> None: ...


def history_for(messages: Sequence[Message], system_prompt: str) -> list[dict[str, str]]:
    """A conversation as the engine wants it, system prompt first: the chat and Compare both use this."""
    out = [{"role": "system", "content": system_prompt}] if system_prompt.strip() else []
    for m in messages:
        text = m.text
        if m.role == Role.ASSISTANT and not text:
            continue
        out.append({"role": m.role.value, "content": text})
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


def drafter_label(drafter: str) -> str:
    if drafter == DRAFT_NONE:
        return "none"
    if drafter == DRAFT_LOOKUP:
        return "prompt lookup"
    return Path(drafter).name


class ChatController(QObject):
    """Owns the store, the settings and the engine thread."""

    sig_notice = Signal(object)
    """Show a Notice above the chat."""
    sig_conversations = Signal(object, object)
    """The conversation list changed (list[Conversation], id of the open one or None)."""
    sig_messages = Signal(object)
    """A conversation was opened: show these messages (list[Message])."""
    sig_message_added = Signal(object)
    """Append this Message to the open conversation."""
    sig_tokens = Signal(object, object)
    """The streaming reply (Message) gained these tokens (list[TokenEvent])."""
    sig_reply_finished = Signal(object)
    """The streaming reply (Message) is over."""
    sig_stats = Signal(object, str)
    """Show these numbers (StatsSnapshot or None) under this title."""
    sig_busy = Signal(bool)
    """The engine thread took work (True: a chat reply or Compare; nothing can be sent) or is free (False)."""
    sig_input_restore = Signal(str)
    """A reply failed before its first token: put the user's text back in the input box."""
    sig_load_state = Signal(str, float)
    """Model state for the status bar: text, and progress 0-1 (negative: no progress bar)."""
    sig_models = Signal(object, str)
    """Installed models (list[ModelEntry]) and the current target path."""
    sig_drafters = Signal(object, str)
    """Drafter options for the target (list[DrafterOption]) and the current drafter choice."""
    sig_settings = Signal(object)
    """The settings changed (AppSettings)."""
    sig_no_models = Signal()
    """No model is installed and none is chosen: offer the ways to get one."""
    sig_loaded = Signal(object)
    """A pair finished loading (LoadedInfo)."""
    sig_task_started = Signal(object)
    """A long model job (tasks.Task) started; its own signals report progress."""
    _request_load = Signal(object)
    _request_reply = Signal(object)

    def __init__(self, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.settings, settings_notice = load_settings()
        self.startup_notices: list[Notice] = []
        if settings_notice:
            self.startup_notices.append(Notice(settings_notice, Level.WARNING))
        self.store = ChatStore()
        if self.store.notice:
            level = Level.ERROR if self.store.mode == StoreMode.MEMORY else Level.WARNING
            self.startup_notices.append(Notice(self.store.notice, level))
        self.models: list[ModelEntry] = []
        self.drafters: list[DrafterOption] = []
        self.current_id: int | None = None
        self.messages: list[Message] = []
        self.search = ""
        self.loaded: LoadedInfo | None = None
        self.loading: LoadRequest | None = None
        self.load_error: BaseException | None = None
        self._ids = itertools.count(1)
        self._handlers: dict[int, ReplyHandler] = {}
        self._pending: dict[int, list] = {}
        self.chat_reply: ReplyRecorder | None = None
        self._scan_generation = 0
        self._drafters_generation = 0
        self._drafters_ready = False
        self._closed = False
        self._was_busy = False
        self.tasks: dict[str, Task] = {}
        self._pending_pair: tuple[str, str] | None = None

        self.thread = QThread(self)
        self.thread.setObjectName("engine")
        self.worker = EngineWorker()
        self.worker.moveToThread(self.thread)
        self._request_load.connect(self.worker.load)
        self._request_reply.connect(self.worker.reply)
        self.worker.sig_load_progress.connect(self._on_load_progress)
        self.worker.sig_loaded.connect(self._on_loaded)
        self.worker.sig_load_failed.connect(self._on_load_failed)
        self.worker.sig_event.connect(self._on_event)
        self.worker.sig_reply_failed.connect(self._on_reply_failed)
        self.worker.sig_reply_finished.connect(self._on_reply_finished)
        self.thread.start()

        self._flush_timer = QTimer(self, interval=FLUSH_MS)
        self._flush_timer.timeout.connect(self.flush)
        self._save_timer = QTimer(self, singleShot=True, interval=400)
        self._save_timer.timeout.connect(self._save_settings)

    # -- start and stop -------------------------------------------------------------------
    def start(self) -> None:
        """Fill the window: notices, conversations, models (then load the chosen pair)."""
        for n in self.startup_notices:
            self.sig_notice.emit(n)
        self.sig_settings.emit(self.settings)
        convs = self._conversations()
        self.sig_conversations.emit(convs, None)
        if convs:
            self.open_conversation(convs[0].id)
        else:
            self.sig_messages.emit([])
            self.sig_stats.emit(None, "This reply")
        self.refresh_models(then_load=True)

    def shutdown(self) -> None:
        """Stop everything, save, close the database; returns at once even when the engine is busy.

        A running reply stops within one round and is saved as stopped. A model load or a long
        prompt read cannot be interrupted: the engine thread is left to finish it and then frees
        the models itself (`engine_threads_running`).
        """
        if self._closed:
            return
        self._closed = True
        for task in self.tasks.values():
            task.cancel.set()  # downloads keep their bytes and resume next time
        self.worker.close_soon()
        self.worker.stop(list(self._handlers))
        self.thread.quit()
        ended = self.thread.wait(SHUTDOWN_WAIT_MS)
        # The reply's last events (its DoneEvent included) may still be queued for this object:
        # deliver them, so the reply is saved as stopped rather than cut short.
        QCoreApplication.sendPostedEvents(self)
        self.flush()
        self._flush_timer.stop()
        self._disconnect_worker()
        if ended:
            self.worker.release()
        else:
            self.thread.setParent(None)  # outlives this object; frees the models when its call returns
            _lingering.append((self.thread, self.worker))
        rec, self.chat_reply = self.chat_reply, None
        if rec is not None and not rec.orphaned:  # its end never came: keep what was shown, marked
            try:
                self.store.finish(rec.message.id, None, rec.message.text, "stopped: the app was closed during the reply")
            except StoreError:
                pass  # the batches already written stand; it reads back as interrupted
        self._handlers.clear()
        self._save_timer.stop()
        self._save_settings()
        self.store.close()

    def _disconnect_worker(self) -> None:
        w = self.worker
        for sig, slot in ((w.sig_load_progress, self._on_load_progress), (w.sig_loaded, self._on_loaded),
                          (w.sig_load_failed, self._on_load_failed), (w.sig_event, self._on_event),
                          (w.sig_reply_failed, self._on_reply_failed), (w.sig_reply_finished, self._on_reply_finished)):
            try:
                sig.disconnect(slot)
            except (RuntimeError, TypeError):
                pass

    # -- settings -------------------------------------------------------------------------
    def update_settings(self, **changes: Any) -> None:
        new = dataclasses.replace(self.settings, **changes)
        if new == self.settings:
            return
        old, self.settings = self.settings, new
        self._save_timer.start()
        self.sig_settings.emit(new)
        if new.target != old.target:
            self.refresh_drafters(then_load=True)
        elif (new.drafter, new.n_ctx, new.n_gpu_layers, new.n_threads) != (old.drafter, old.n_ctx, old.n_gpu_layers, old.n_threads):
            self.ensure_loaded()

    def _save_settings(self) -> None:
        try:
            save_settings(self.settings)
        except OSError as exc:
            self.sig_notice.emit(Notice(f"Could not save the settings ({exc.strerror or exc}); they will be lost "
                                        "when the app closes. Check that the config folder is writable.",
                                        Level.WARNING))

    def generation_settings(self, plain: bool = False) -> GenerationSettings:
        return generation_settings_of(self.settings, plain)

    # -- models ---------------------------------------------------------------------------
    def refresh_models(self, then_load: bool = False) -> None:
        """Read the model folder off the GUI thread; then the drafters for the target."""
        self._scan_generation += 1
        gen = self._scan_generation
        extra = [p for p in (self.settings.target, self.settings.drafter) if p not in ("", DRAFT_NONE, DRAFT_LOOKUP)]

        def done(result) -> None:
            if gen != self._scan_generation or self._closed:
                return
            self.models, problems = result
            if self._pending_pair is not None:
                target, drafter = self._pending_pair
                self._pending_pair = None
                self.settings = dataclasses.replace(self.settings, target=target, drafter=drafter)
                self._save_timer.start()
                self.sig_settings.emit(self.settings)
            for p in problems:
                self.sig_notice.emit(Notice(f"A file in the model folder cannot be used: {p}", Level.WARNING,
                                            Action.OPEN_MODELS))
            if not self.settings.target and self.models:
                self.settings = dataclasses.replace(self.settings, target=str(self.models[0].path))
                self._save_timer.start()
            self.sig_models.emit(self.models, self.settings.target)
            if not self.models and not self.settings.target:
                self.sig_load_state.emit("No model installed", -1)
                self.sig_no_models.emit()
                return
            self.refresh_drafters(then_load=then_load)

        run_in_background(lambda: list_models(extra), done, self._scan_failed)

    def _scan_failed(self, exc: BaseException) -> None:
        self.sig_notice.emit(explain(exc))

    def refresh_drafters(self, then_load: bool = False) -> None:
        target = self.settings.target
        self._drafters_generation += 1
        gen = self._drafters_generation
        self._drafters_ready = False
        if not target:
            return
        if not Path(target).is_file():
            self.sig_drafters.emit([], self.settings.drafter)
            self.sig_notice.emit(explain(ModelFileError(f"{Path(target).name} is not there any more ({target})")))
            return
        models = list(self.models)

        def done(options: list[DrafterOption]) -> None:
            if gen != self._drafters_generation or self._closed:
                return
            self.drafters = options
            self._drafters_ready = True
            compatible = [str(o.model.path) for o in options if o.compatible]
            drafter = self.settings.drafter
            if drafter not in (DRAFT_NONE, DRAFT_LOOKUP) and drafter not in compatible:
                # The chosen drafter cannot pair with this target: take the smallest that can, else lookup.
                drafter = compatible[0] if compatible else DRAFT_LOOKUP
                self.settings = dataclasses.replace(self.settings, drafter=drafter)
                self._save_timer.start()
            self.sig_drafters.emit(options, drafter)
            if then_load:
                self.ensure_loaded()

        def failed(exc: BaseException) -> None:
            if gen == self._drafters_generation:
                self.sig_drafters.emit([], self.settings.drafter)
                self.sig_notice.emit(explain(exc))

        run_in_background(lambda: drafter_options(Path(target), models), done, failed)

    def wanted_load(self) -> LoadRequest | None:
        s = self.settings
        if not s.target:
            return None
        return LoadRequest(Path(s.target), s.drafter, LoadSettings(n_ctx=s.n_ctx, n_gpu_layers=s.n_gpu_layers,
                                                                   n_threads=s.n_threads))

    def ensure_loaded(self) -> None:
        """Load the pair the settings name, unless it is loaded or on its way."""
        want = self.wanted_load()
        if want is None or self._closed:
            return
        if self.loading is not None:
            return  # _on_loaded / _on_load_failed look again
        if self.loaded is not None and self.loaded.request == want:
            return
        if self.busy:
            # The load is queued behind the reply (or Compare), which ends within one round.
            what = "The reply" if self.chat_reply is not None else "Compare"
            self.stop()
            self.sig_notice.emit(Notice(f"{what} was stopped to switch models.", Level.INFO))
        self.loading = want
        self.load_error = None
        self.sig_load_state.emit(f"Loading {want.target.name}…", 0.0)
        self._request_load.emit(want)

    def _on_load_progress(self, which: str, fraction: float) -> None:
        names = {"target": "the target", "drafter": "the drafter", "measuring": "measuring speed"}
        text = f"Loading {names.get(which, which)}…" if which != "measuring" else "Measuring this machine's speed…"
        self.sig_load_state.emit(text, fraction if which != "measuring" else -1)

    def _on_loaded(self, info: LoadedInfo) -> None:
        self.loading = None
        self.loaded = info
        self.sig_loaded.emit(info)
        notes = f" — {'; '.join(info.notes)}" if info.notes else ""
        self.sig_load_state.emit(f"Ready: {info.request.target.name} + {drafter_label(info.request.drafter)} "
                                 f"(context {info.n_ctx}, loaded in {info.seconds:.1f} s){notes}", -1)
        self.ensure_loaded()  # the settings may have moved on while this loaded

    def _on_load_failed(self, req: LoadRequest, exc: BaseException, still: LoadedInfo | None) -> None:
        self.loading = None
        self.loaded = still
        self.load_error = exc
        self.sig_notice.emit(explain(exc))
        self.sig_load_state.emit("Not loaded" if still is None else
                                 f"Still using {still.request.target.name} + {drafter_label(still.request.drafter)}", -1)
        want = self.wanted_load()
        if want is not None and want != req:
            self.ensure_loaded()

    # -- long model jobs -------------------------------------------------------------------------
    def start_task(self, task: Task, use_pair: bool = False) -> Task:
        """Run a download / install / import; when `use_pair`, choose its (target, drafter) once done."""
        running = self.tasks.get(task.key)
        if running is not None and running.state == TaskState.RUNNING:
            return running
        task.use_pair = use_pair
        self.tasks[task.key] = task
        task.sig_finished.connect(self._task_finished)
        task.start()
        self.sig_task_started.emit(task)
        return task

    def _task_finished(self, task: Task) -> None:
        if self._closed:
            return
        if task.state == TaskState.DONE:
            result = task.result
            pair = result if isinstance(result, tuple) and len(result) == 2 else None
            if pair is not None and (task.use_pair or not self.settings.target):
                self._pending_pair = (str(pair[0]), str(pair[1]))  # chosen once the listing has them
            self.sig_notice.emit(Notice(f"{task.title}: done.", Level.INFO))
        elif task.state == TaskState.FAILED and task.error is not None:
            self.sig_notice.emit(explain(task.error))
        self.refresh_models(then_load=True)

    # -- conversations ------------------------------------------------------------------------
    def _store_failed(self, exc: StoreError) -> None:
        text = str(exc)
        self.sig_notice.emit(Notice(text[:1].upper() + text[1:] + ("" if text.endswith(".") else ".")))

    def _conversations(self) -> list[Conversation]:
        try:
            return self.store.conversations(self.search)
        except StoreError as exc:
            self._store_failed(exc)
            return []

    def conversation(self, conv_id: int) -> Conversation | None:
        try:
            return self.store.conversation(conv_id)
        except StoreError as exc:
            self._store_failed(exc)
            return None

    def _emit_conversations(self) -> None:
        self.sig_conversations.emit(self._conversations(), self.current_id)

    def set_search(self, text: str) -> None:
        self.search = text
        self._emit_conversations()

    def new_conversation(self) -> None:
        try:
            conv = self.store.new_conversation()
        except StoreError as exc:
            self._store_failed(exc)
            return
        self.current_id = conv.id
        self.messages = []
        self.search = ""
        self._emit_conversations()
        self.sig_messages.emit([])
        self.sig_stats.emit(None, "This reply")

    def open_conversation(self, conv_id: int) -> None:
        if conv_id == self.current_id and self.messages:
            return
        try:
            messages = self.store.messages(conv_id)
        except StoreError as exc:
            self._store_failed(exc)
            return
        self.current_id = conv_id
        self.messages = messages
        live = self.chat_reply
        if live is not None and live.conversation_id == conv_id:
            # Keep appending to the very Message the reply is filling.
            self.messages = [live.message if m.id == live.message.id else m for m in self.messages]
        self.sig_messages.emit(self.messages)
        last = next((m for m in reversed(self.messages) if m.role == Role.ASSISTANT), None)
        if last is None:
            self.sig_stats.emit(None, "This reply")
        elif live is not None and live.message is last:
            self.sig_stats.emit(live.stats.snapshot(), "This reply (streaming)")
        else:
            auto = last.stats.draft_mode == "auto" if last.stats else True
            rounds = [last.rounds[k] for k in sorted(last.rounds)]
            self.sig_stats.emit(ReplyStats.of_rounds(rounds, last.stats, auto).snapshot(), "Last reply")

    def rename_conversation(self, conv_id: int, title: str) -> None:
        try:
            self.store.rename(conv_id, title)
        except StoreError as exc:
            self._store_failed(exc)
        self._emit_conversations()

    def delete_conversation(self, conv_id: int) -> None:
        live = self.chat_reply
        if live is not None and live.conversation_id == conv_id:
            live.orphaned = True
            self.stop()
        try:
            self.store.delete(conv_id)
        except StoreError as exc:
            self._store_failed(exc)
            return
        if conv_id == self.current_id:
            self.current_id = None
            convs = self._conversations()
            if convs:
                self._emit_conversations()
                self.open_conversation(convs[0].id)
                self._emit_conversations()
                return
            self.messages = []
            self.sig_messages.emit([])
            self.sig_stats.emit(None, "This reply")
        self._emit_conversations()

    def current_conversation(self) -> Conversation | None:
        return self.conversation(self.current_id) if self.current_id is not None else None

    # -- replies ------------------------------------------------------------------------------
    @property
    def busy(self) -> bool:
        """A chat reply or a Compare run is queued or running on the engine thread."""
        return self.chat_reply is not None or bool(self._handlers)

    def _busy_changed(self) -> None:
        if self.busy != self._was_busy:
            self._was_busy = self.busy
            self.sig_busy.emit(self._was_busy)

    def send(self, text: str) -> bool:
        """Start a reply to `text`; False (and a notice) when it cannot start."""
        text = text.strip()
        if not text or self.busy or self._closed:
            return False
        if not self.settings.target:
            self.sig_notice.emit(Notice("Choose a target model first: install one in Models…, or pick a GGUF file "
                                        "in the Target list.", Level.WARNING, Action.OPEN_MODELS))
            return False
        try:
            if self.current_id is None:
                conv = self.store.new_conversation()
                self.current_id = conv.id
                self.messages = []
            history = self.history()
            user = self.store.add_message(self.current_id, Role.USER, text)
            self.store.set_title_if_default(self.current_id, _title_of(text))
            target = Path(self.settings.target).name
            reply = self.store.add_message(self.current_id, Role.ASSISTANT, "", target, drafter_label(self.settings.drafter),
                                           self.settings.to_json())
        except StoreError as exc:
            self._store_failed(exc)
            return False
        self.messages += [user, reply]
        self.sig_message_added.emit(user)
        self.sig_message_added.emit(reply)
        self._emit_conversations()
        messages = history + [{"role": "user", "content": text}]
        recorder = ReplyRecorder(
            self.store, self.current_id, user, reply, auto=self.settings.draft_max == AUTO,
            on_tokens=self._recorder_tokens, on_stats=self._recorder_stats,
            on_finished=self._recorder_finished, on_notice=self.sig_notice.emit,
        )
        self.chat_reply = recorder
        self.sig_stats.emit(recorder.stats.snapshot(), "This reply (streaming)")
        self.ensure_loaded()
        self.request_reply(messages, self.generation_settings(), recorder)
        return True

    def history(self) -> list[dict[str, str]]:
        """The open conversation as the engine wants it, system prompt first."""
        return history_for(self.messages, self.settings.system_prompt)

    def request_reply(self, messages: list[dict[str, str]], settings: GenerationSettings, handler: ReplyHandler,
                      cold: bool = False) -> int:
        """Queue a reply on the engine thread; events go to `handler` in batches."""
        rid = next(self._ids)
        self._handlers[rid] = handler
        self._request_reply.emit(ReplyRequest(rid, tuple(messages), settings, cold))
        self._busy_changed()
        return rid

    def stop(self) -> None:
        """Stop whatever runs on the engine thread (takes effect within one round)."""
        self.worker.stop(list(self._handlers))

    def stop_requests(self, ids: Sequence[int]) -> None:
        """Stop only these requests, if they are still queued or running."""
        self.worker.stop([i for i in ids if i in self._handlers])

    def recorded_settings(self, reply: Message) -> AppSettings | None:
        """The settings `reply` was made with, or None when they were not recorded."""
        try:
            data = self.store.reply_settings(reply.id)
        except StoreError:
            return None
        return settings_from_dict(data) if data else None

    def compare(self, messages: Sequence[Message], speculative: ReplyHandler, plain: ReplyHandler) -> CompareRuns | None:
        """Run the prompt of `messages[-1]` (a finished reply) again twice, speculative then plain, with
        the reply's own system prompt, sampling and history, each from empty caches (both cold: no run
        reuses what the other, or the chat, left). None when the engine is busy."""
        if self.busy or self._closed or not messages:
            return None
        reply = messages[-1]
        notes = []
        s = self.recorded_settings(reply)
        if s is None:
            s = self.settings
            notes.append("This reply's settings were not recorded; today's system prompt and sampling are used.")
        loaded = self.loaded.request if self.loaded is not None else self.wanted_load()
        if loaded is not None and loaded.target.name != reply.target:
            notes.append(f"{loaded.target.name} is loaded now, but the reply came from {reply.target}.")
        elif loaded is not None and reply.drafter and drafter_label(loaded.drafter) != reply.drafter:
            notes.append(f"The drafter now is {drafter_label(loaded.drafter)}; the reply was made with {reply.drafter}.")
        history = history_for(messages[:-1], s.system_prompt)
        self.ensure_loaded()
        ids = (self.request_reply(history, generation_settings_of(s), speculative, cold=True),
               self.request_reply(history, generation_settings_of(s, plain=True), plain, cold=True))
        return CompareRuns(ids, s, tuple(notes))

    def _on_event(self, rid: int, event: object) -> None:
        self._pending.setdefault(rid, []).append(event)
        if not self._flush_timer.isActive():
            self._flush_timer.start()

    def flush(self) -> None:
        pending, self._pending = self._pending, {}
        for rid, events in pending.items():
            handler = self._handlers.get(rid)
            if handler is not None and events:
                handler.on_events(events)
        if not self._pending:
            self._flush_timer.stop()

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

    # -- the chat reply's callbacks -------------------------------------------------------------
    def _showing(self, recorder: ReplyRecorder) -> bool:
        return recorder.conversation_id == self.current_id and not recorder.orphaned

    def _recorder_tokens(self, message: Message, tokens: list) -> None:
        rec = self.chat_reply
        if rec is not None and self._showing(rec):
            self.sig_tokens.emit(message, tokens)

    def _recorder_stats(self, stats: ReplyStats) -> None:
        rec = self.chat_reply
        if rec is not None and self._showing(rec):
            self.sig_stats.emit(stats.snapshot(), "This reply" if stats.final else "This reply (streaming)")

    def _recorder_finished(self, rec: ReplyRecorder) -> None:
        self.chat_reply = None
        if rec.orphaned:
            return
        if rec.error is not None and self.loaded is None and self.load_error is not None:
            rec.error = self.load_error  # "no model is loaded" because loading failed: say why
        if rec.done is None and not rec.message.tokens:
            # Failed before any token: take the exchange back and return the text to the input box.
            for m in (rec.message, rec.user):
                try:
                    self.store.delete_message(m.id)
                except StoreError:
                    pass
            if self._showing(rec):
                self.messages = [m for m in self.messages if m.id not in (rec.message.id, rec.user.id)]
                self.sig_messages.emit(self.messages)
                self.sig_input_restore.emit(rec.user.content)
            if rec.error is not None:
                self.sig_notice.emit(explain(rec.error))
            self._emit_conversations()
            return
        if self._showing(rec):
            self.sig_reply_finished.emit(rec.message)
        if rec.error is not None:
            self.sig_notice.emit(explain(rec.error))
        elif rec.done is not None and rec.done.finish_reason == FinishReason.CONTEXT_FULL:
            self.sig_notice.emit(CONTEXT_FULL_NOTICE)
        elif rec.done is not None and rec.done.stats.note:
            self.sig_notice.emit(Notice(rec.done.stats.note[:1].upper() + rec.done.stats.note[1:] + ".", Level.INFO))
        self._emit_conversations()


def _title_of(text: str) -> str:
    line = " ".join(text.split())
    return line if len(line) <= TITLE_CHARS else line[: TITLE_CHARS - 1].rstrip() + "…"

