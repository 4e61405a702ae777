"""Importing a chat export without freezing the window: the file is read on a worker thread, with a
progress dialog and Cancel; the chat is saved and opened on the GUI thread once it has been read.

A 50 MB file took about 30 s to read on the GUI thread, the window frozen meanwhile. Cancel sets the worker's
abort flag (read between chunks of the file) and the job stops listening at once: an answer that arrives after
Cancel is dropped, so nothing is imported once Cancel was pressed.
"""
from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import QObject, Qt, Signal, Slot
from PySide6.QtWidgets import QProgressDialog, QWidget

from app.core.background import Worker
from app.core.errors import Level, Notice
from app.history.chat_import import ChatImportError, ImportCancelled, read_chat

SHOW_AFTER_MS = 300
"""A file read faster than this never shows the dialog."""
SHOW_AT_ONCE_BYTES = 4 * 2**20
"""A file this large shows the dialog at once (it takes seconds to read)."""


class _ReadWorker(Worker):
    """read_chat on a thread of its own, its progress as a signal."""

    progressed = Signal(int, int)
    """(bytes read, bytes in all), emitted from the worker's thread."""

    def __init__(self, path: Path) -> None:
        super().__init__(None, "chat import")
        self.path = path

    def work(self):
        return read_chat(self.path, lambda done, size: self.progressed.emit(done, size), self.cancel)


class ImportJob(QObject):
    """One import: started by `start`, ends by `finished` (imported or not)."""

    finished = Signal(bool)
    """The import ended: True when a chat was imported and opened."""

    def __init__(self, window: QWidget, controller, path: Path) -> None:
        super().__init__(window)
        self.controller, self.path = controller, Path(path)
        self.dialog = QProgressDialog(f"Reading {self.path.name}…", "Cancel", 0, 1000, window)
        self.dialog.setObjectName("import_progress")
        self.dialog.setWindowTitle("Import a chat")
        self.dialog.setWindowModality(Qt.WindowModality.WindowModal)
        self.dialog.setMinimumDuration(SHOW_AFTER_MS)
        self.dialog.setAutoClose(False)
        self.dialog.setAutoReset(False)
        self.dialog.canceled.connect(self.cancel)
        self.worker = _ReadWorker(self.path)
        self.worker.progressed.connect(self._progress)
        self.worker.returned.connect(self._read)
        self.worker.errored.connect(self._failed)
        self.cancelled = False
        self.done = False

    def start(self) -> None:
        self.dialog.setValue(0)
        try:
            big = self.path.stat().st_size >= SHOW_AT_ONCE_BYTES
        except OSError:
            big = False  # read_chat says why
        if big:
            self.dialog.show()
        self.worker.start()

    @Slot()
    def cancel(self) -> None:
        """Stop reading; nothing is imported, whatever the worker answers later."""
        if self.done:
            return
        self.cancelled = True
        self.worker.cancel.set()
        self.controller.sig_notice.emit(Notice(f"Import of {self.path.name} cancelled. Nothing was imported.",
                                               Level.INFO))
        self._end(False)

    @Slot(int, int)
    def _progress(self, done: int, size: int) -> None:
        if not self.done and size > 0:
            self.dialog.setLabelText(f"Reading {self.path.name}… {done / 2**20:,.1f} of {size / 2**20:,.1f} MB")
            self.dialog.setValue(min(999, done * 1000 // size))

    @Slot(object)
    def _read(self, chat) -> None:
        if self.done:
            return
        self.dialog.setLabelText(f"Saving {self.path.name}…")
        ok = self.controller.add_imported(chat, self.path.name)
        self._end(ok)

    @Slot(object)
    def _failed(self, exc: BaseException) -> None:
        if self.done or isinstance(exc, ImportCancelled):
            return
        if not isinstance(exc, ChatImportError):  # a fault of this version, not of the file: said as such
            exc = ChatImportError(f"reading it failed ({type(exc).__name__}: {exc})")
        self.controller.import_refused(self.path.name, exc)
        self._end(False)

    def _end(self, ok: bool) -> None:
        self.done = True
        self.dialog.canceled.disconnect(self.cancel)
        self.dialog.reset()
        self.dialog.hide()
        self.dialog.deleteLater()
        self.finished.emit(ok)
