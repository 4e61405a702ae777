"""The app's brain on the GUI thread, as one object the widgets hold: a composition of its parts.

Each concern is its own part, with its own state and signals:

- `prefs` (preferences.py): the settings, saved soon after each change;
- `conversations` (conversations.py): the store, the chat list, the open chat's shown path;
- `pairing` (pairing.py): installed models, drafters, the load state machine, model jobs;
- `replies` (replies.py): requests to the engine thread, the chat reply (a StreamingReply the
  window observes: streaming_reply.py), Compare;
- `past_chats` (past_chats.py): drafting from past chats (opt-in) and forgetting them.

The parts depend one way (replies use conversations and pairing; nothing uses replies), and the
two links that point back (pairing stops running work to switch models; conversations read the
live reply's Message as one already in memory) are callbacks wired here. A change to loading touches pairing.py only, a
change to alternatives conversations.py and the store.

Why a facade and not the parts handed to the widgets: a dialog takes one reference and does not
need to know which part owns what, and the parts stay ignorant of widgets. The attributes below
are one-line forwards (the signals are the parts' own signal objects); what needs more than one
part (start, shutdown, refusing actions while a reply streams, deleting a chat whose reply runs)
is written here and nowhere else. It never draws.
"""
from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from PySide6.QtCore import QCoreApplication, QObject, Qt, QThread, Signal

from engine.attachments import Attachment
from engine.decoding.session import GenerationSettings

from app.control.conversations import Conversations
from app.control.local_server import LocalServer
from app.control.pairing import Pairing, drafter_label
from app.control.past_chats import PastChats
from app.control.preferences import Preferences
from app.control.replies import CompareRuns, Replies, ReplyHandler, generation_settings_of, history_for
from app.control.tasks import Task
from app.core.errors import Level, Notice
from app.core.gui_collector import collect_on_gui_thread
from app.core.settings import AppSettings
from app.core.engine_thread.worker import EngineWorker
from app.history.records import Conversation, Message, Role
from app.history.store import ChatStore, StoreMode

__all__ = ["ChatController", "CompareRuns", "drafter_label", "engine_threads_running", "history_for",
           "generation_settings_of"]

SHUTDOWN_WAIT_MS = 500
"""How long closing waits for the reply in progress to end (a stop ends it within one pass); a load
or a slot stuck elsewhere is not waited for."""

_lingering: list[tuple[QThread, EngineWorker]] = []
"""Engine threads of closed windows, still freeing their models or inside a load (kept referenced: Qt
aborts when a running QThread is destroyed). Each frees its models on its own thread as it ends."""


def engine_threads_running() -> bool:
    """Some closed window's engine thread has not ended yet (main() then exits without waiting for it)."""
    _lingering[:] = [(t, w) for t, w in _lingering if not t.isFinished()]
    return bool(_lingering)


class ChatController(QObject):
    """Owns the engine thread and the parts; the widgets' one way in."""

    sig_notice = Signal(object)
    """Show a Notice above the chat (from any part)."""
    sig_stats = Signal(object, str)
    """Show these numbers (StatsSnapshot or None) under this title (conversations or replies)."""

    def __init__(self, parent: QObject | None = None) -> None:
        super().__init__(parent)
        collect_on_gui_thread()  # before any of the app's threads runs Python (app.core.gui_collector)
        self.prefs = Preferences(self)
        self.startup_notices: list[Notice] = []
        if self.prefs.load_notice:
            self.startup_notices.append(Notice(self.prefs.load_notice, Level.WARNING))
        store = ChatStore()
        if store.notice:
            level = Level.ERROR if store.mode == StoreMode.MEMORY else Level.WARNING
            self.startup_notices.append(Notice(store.notice, level))
        self._closed = False

        self.thread = QThread(self)
        self.thread.setObjectName("engine")
        self.worker = EngineWorker()
        self.worker.moveToThread(self.thread)
        # The models are freed on the engine thread as it ends (or left to the system when the process
        # ends with the window: app.core.engine_thread.worker.leave_models_at_exit): freeing a pair takes about half
        # a second, which closing the window should not wait for.
        self.thread.finished.connect(self.worker.release, Qt.ConnectionType.DirectConnection)
        self.conversations = Conversations(store, live=lambda: self.replies.chat_reply, parent=self)
        self.pairing = Pairing(self.prefs, self.worker, interrupt=lambda: self.replies.interrupt(), parent=self)
        self.replies = Replies(self.prefs, self.worker, self.conversations, self.pairing, parent=self)
        self.past_chats = PastChats(self.prefs, self.worker, parent=self)
        self.local_server = LocalServer(self.prefs, self.worker, self.pairing, parent=self)
        """Models ▸ Local server: the loaded pair served to other programs (off until turned on)."""
        self.thread.start()

        for part in (self.prefs, self.conversations, self.pairing, self.replies, self.past_chats):
            part.sig_notice.connect(self.sig_notice)
        for part in (self.conversations, self.replies):
            part.sig_stats.connect(self.sig_stats)
        # The widgets' signals, each the owning part's own.
        self.sig_settings = self.prefs.sig_settings
        self.sig_conversations = self.conversations.sig_conversations
        self.sig_messages = self.conversations.sig_messages
        self.sig_message_added = self.conversations.sig_message_added
        self.sig_reply_started = self.replies.sig_reply_started
        self.sig_reply_finished = self.replies.sig_reply_finished
        self.sig_busy = self.replies.sig_busy
        self.sig_input_restore = self.replies.sig_input_restore
        self.sig_load_state = self.pairing.sig_load_state
        self.sig_models = self.pairing.sig_models
        self.sig_drafters = self.pairing.sig_drafters
        self.sig_no_models = self.pairing.sig_no_models
        self.sig_loaded = self.pairing.sig_loaded
        self.sig_task_started = self.pairing.sig_task_started
        self.sig_past_chats = self.past_chats.sig_status
        # The chat shown is read into the drafter while the user writes (after a reply too: Replies._chat_finished).
        self.pairing.sig_loaded.connect(lambda _info: self.replies.read_ahead_shown())
        self.conversations.sig_messages.connect(lambda _messages: self.replies.read_ahead_shown())

    # -- start and stop -------------------------------------------------------------------
    def start(self) -> None:
        """Fill the window: notices, conversations, models (then load the chosen pair)."""
        for n in self.startup_notices:
            self.sig_notice.emit(n)
        self.sig_settings.emit(self.settings)
        convs = self.conversations.listing()
        self.sig_conversations.emit(convs, None)
        if convs:
            self.open_conversation(convs[0].id)
        else:
            self.conversations.show_nothing()
        self.pairing.refresh_models(then_load=True)

    def shutdown(self) -> None:
        """Stop everything, save, close the database; returns at once even when the engine is busy.

        A running reply stops within one pass and is saved as stopped. A model load cannot be
        interrupted: it is not waited for. Either way the engine thread frees the models itself as it
        ends, after this returns (`engine_threads_running`).
        """
        if self._closed:
            return
        self._closed = True
        self.local_server.close()  # clients hear the stream end; nothing new reaches the engine thread
        self.pairing.close()
        self.replies.closed = True
        self.worker.close_soon()
        self.replies.stop()
        self.worker.wait_idle(SHUTDOWN_WAIT_MS / 1000)
        self.thread.quit()
        # The reply's last events (its DoneEvent included) may still be queued for the parts:
        # deliver them, so the reply is saved as stopped rather than cut short.
        for part in (self.replies, self.pairing, self.past_chats):
            QCoreApplication.sendPostedEvents(part)
        self.replies.flush()
        self.replies.disconnect_worker()
        self.pairing.disconnect_worker()
        self.past_chats.disconnect_worker()
        self.thread.setParent(None)  # outlives this object; frees the models as it ends
        _lingering.append((self.thread, self.worker))
        self.replies.close()
        self.prefs.close()
        self.store.close()

    # -- state the widgets read ------------------------------------------------------------
    @property
    def settings(self) -> AppSettings:
        return self.prefs.settings

    @property
    def store(self) -> ChatStore:
        return self.conversations.store

    @property
    def current_id(self) -> int | None:
        return self.conversations.current_id

    @property
    def messages(self) -> list[Message]:
        """The open conversation's shown path."""
        return self.conversations.messages

    @property
    def models(self):
        return self.pairing.models

    @property
    def drafters(self):
        return self.pairing.drafters

    @property
    def tasks(self) -> dict[str, Task]:
        return self.pairing.tasks

    @property
    def loaded(self):
        return self.pairing.loaded

    @property
    def loading(self):
        return self.pairing.loading

    @property
    def load_error(self):
        return self.pairing.load_error

    @property
    def chat_reply(self):
        return self.replies.chat_reply

    def showing(self, reply) -> bool:
        """The chat reply `reply` (a StreamingReply) is written in the open conversation."""
        return self.replies.showing(reply)

    @property
    def busy(self) -> bool:
        """A chat reply or a Compare run is queued or running on the engine thread."""
        return self.replies.busy

    # -- settings and models ----------------------------------------------------------------
    def update_settings(self, **changes: Any) -> None:
        old = self.prefs.update(**changes)
        if old is not None:
            self.pairing.settings_changed(old, self.settings)
            self.past_chats.settings_changed(old, self.settings)

    def generation_settings(self, plain: bool = False) -> GenerationSettings:
        return generation_settings_of(self.settings, plain)

    def refresh_models(self, then_load: bool = False) -> None:
        self.pairing.refresh_models(then_load)

    def refresh_drafters(self, then_load: bool = False) -> None:
        self.pairing.refresh_drafters(then_load)

    def wanted_load(self):
        return self.pairing.wanted_load()

    def ensure_loaded(self) -> None:
        self.pairing.ensure_loaded()

    def start_task(self, task: Task, use_pair: bool = False) -> Task:
        return self.pairing.start_task(task, use_pair)

    def forget_past_chats(self) -> None:
        """Delete the index of past chats (the chats stay); drafting from them stays on or off as it was."""
        self.past_chats.forget()

    # -- conversations ----------------------------------------------------------------------
    def conversation(self, conv_id: int) -> Conversation | None:
        return self.conversations.conversation(conv_id)

    def current_conversation(self) -> Conversation | None:
        return self.conversations.current()

    def set_search(self, text: str) -> None:
        self.conversations.set_search(text)

    def new_conversation(self) -> None:
        self.conversations.new()

    def open_conversation(self, conv_id: int) -> None:
        self.conversations.open(conv_id)

    def rename_conversation(self, conv_id: int, title: str) -> None:
        self.conversations.rename(conv_id, title)

    def delete_conversation(self, conv_id: int) -> None:
        self.replies.abandon(conv_id)
        self.conversations.delete(conv_id)

    # -- replies -----------------------------------------------------------------------------
    def send(self, text: str, attachments: Sequence[Attachment] = ()) -> bool:
        """Start a reply to `text` and its attached files; False (and a notice) when it cannot start."""
        return self.replies.send(text, attachments)

    def history(self) -> list[dict[str, str]]:
        """The open conversation's shown path as the engine wants it, system prompt first."""
        return history_for(self.messages, self.settings.system_prompt)

    def request_reply(self, messages: list[dict[str, str]], settings: GenerationSettings, handler: ReplyHandler,
                      cold: bool = False) -> int:
        return self.replies.request_reply(messages, settings, handler, cold)

    def stop(self) -> None:
        self.replies.stop()

    def stop_requests(self, ids: Sequence[int]) -> None:
        self.replies.stop_requests(ids)

    def recorded_settings(self, reply: Message) -> AppSettings | None:
        return self.replies.recorded_settings(reply)

    def compare(self, messages: Sequence[Message], speculative: ReplyHandler, plain: ReplyHandler) -> CompareRuns | None:
        return self.replies.compare(messages, speculative, plain)

    def flush(self) -> None:
        self.replies.flush()

    # -- one message's actions ------------------------------------------------------------------
    def refused(self, doing: str) -> bool:
        """Actions change the path a reply is being written on: not while the engine is busy."""
        if self._closed:
            return True
        if self.busy:
            what = "the reply" if self.chat_reply is not None else "Compare"
            self.sig_notice.emit(Notice(f"Wait for {what} to finish (or press Stop) before {doing}.", Level.INFO))
            return True
        return False

    def message(self, message_id: int) -> Message | None:
        """A message of the shown path, by id."""
        i = self.conversations.find(message_id)
        return None if i is None else self.messages[i]

    def regenerate(self, message_id: int, current: bool = False) -> bool:
        """A new alternative reply: with the reply's own settings, or the model bar's when `current`."""
        if self.refused("regenerating"):
            return False
        return self.replies.regenerate(message_id, current)

    def can_edit(self, message_id: int) -> bool:
        """The message can be put in the input to edit (a message on the shown path, nothing running); says why
        not otherwise."""
        if self.refused("editing a message"):
            return False
        m = self.message(message_id)
        if m is None:
            return False
        if m.role == Role.ASSISTANT and not m.finished:
            self.sig_notice.emit(Notice("This reply is not finished: continue or stop it before editing it.",
                                        Level.INFO))
            return False
        return True

    def resend_edit(self, message_id: int, text: str, attachments: Sequence[Attachment] | None = None) -> bool:
        """Send the edited text of a question (and its files: None keeps the original's) as its new alternative,
        and a reply to it; or keep the edited text of a reply as its new alternative."""
        if self.refused("resending"):
            return False
        m = self.message(message_id)
        if m is not None and m.role == Role.ASSISTANT:
            return self.replies.save_reply_edit(message_id, text)
        return self.replies.resend_edit(message_id, text, attachments)

    def continue_reply(self, message_id: int) -> bool:
        """Go on writing the last reply where it was stopped or cut at the max tokens limit (the same message)."""
        if self.refused("continuing a reply"):
            return False
        return self.replies.continue_reply(message_id)

    def fork(self, message_id: int) -> bool:
        """A new chat holding the shown path up to this message, opened; the original stays as it is."""
        if self.refused("forking the chat"):
            return False
        return self.conversations.fork(message_id)

    def import_chat(self, path: Path) -> bool:
        """A chat exported as JSON Lines (every branch, or an older shown-path export), as a new chat, opened."""
        if self.refused("importing a chat"):
            return False
        return self.conversations.import_chat(path)

    def add_imported(self, chat, name: str) -> bool:
        """A chat already read from an export (app.history.chat_import.read_chat, off the GUI thread), saved as a
        new chat and opened."""
        if self.refused("importing a chat"):
            return False
        return self.conversations.add_imported(chat, name)

    def import_refused(self, name: str, exc: BaseException) -> None:
        """Say why an export could not be imported."""
        self.conversations.import_refused(name, exc)

    def chat_tree(self) -> list[tuple[Message, int]]:
        """Every message of the open chat, every branch, with its shown stamp (what the JSONL export writes)."""
        return self.conversations.tree()

    def delete_message(self, message_id: int) -> bool:
        """Delete one message of the shown path; what followed it moves up (nothing else is lost)."""
        if self.refused("deleting a message"):
            return False
        return self.conversations.delete_message(message_id)

    def show_alternative(self, message_id: int, step: int) -> bool:
        """Show the previous (-1) or next (+1) alternative of this message."""
        if self.refused("switching alternatives"):
            return False
        return self.conversations.show_alternative(message_id, step)
