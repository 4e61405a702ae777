"""Drafting from past chats, on the GUI thread: the person's toggle and Forget go to the engine thread,
what the index holds comes back (notes about its files become notices).

The index itself lives on the engine thread (app.core.engine_thread.past_chats_index): only that thread may
touch it, and requests queue behind a running reply, so a reply is counted before a Forget
that was asked for while it ran.
"""
from __future__ import annotations

from PySide6.QtCore import QObject, Signal

from app.control.preferences import Preferences
from app.core.background import disconnect_all
from app.core.errors import Level, Notice
from app.core.engine_thread.past_chats_index import PastChatsChoice, PastChatsStatus
from app.core.settings import AppSettings
from app.core.engine_thread.worker import EngineWorker


def choice_of(s: AppSettings) -> PastChatsChoice:
    return PastChatsChoice(s.history_drafts, s.history_cap_mb)


class PastChats(QObject):
    """The toggle, Forget, and the latest status (GUI thread)."""

    sig_status = Signal(object)
    """What the index holds and does now (PastChatsStatus)."""
    sig_notice = Signal(object)
    """Show a Notice above the chat (a damaged file set aside, a save that failed)."""
    _configure = Signal(object)
    _forget = Signal()

    def __init__(self, prefs: Preferences, worker: EngineWorker, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.prefs = prefs
        self.status: PastChatsStatus | None = None
        self._configure.connect(worker.configure_past_chats)
        self._forget.connect(worker.forget_past_chats)
        self._links = ((worker.sig_past_chats, self._on_status),)
        for sig, slot in self._links:
            sig.connect(slot)
        self._configure.emit(choice_of(prefs.settings))  # queued before any load

    def settings_changed(self, old: AppSettings, new: AppSettings) -> None:
        if choice_of(old) != choice_of(new):
            self._configure.emit(choice_of(new))

    def forget(self) -> None:
        """Delete the index files (queued behind a running reply, which is counted first)."""
        self._forget.emit()

    def _on_status(self, status: PastChatsStatus) -> None:
        self.status = status
        for note in status.notes:
            self.sig_notice.emit(Notice(f"Drafting from past chats: {note}.", Level.WARNING))
        self.sig_status.emit(status)

    def disconnect_worker(self) -> None:
        disconnect_all(self._links)
