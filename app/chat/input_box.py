"""The message box: Enter (or Ctrl+Enter) sends, Shift+Enter starts a new line; and an edit mode for resending.

In edit mode the box holds an earlier message's text under a one-line banner saying so; Enter
resends a question (as a new alternative of it) or keeps an edited reply (beside the reply), Esc
gives the box back as it was before.

Files dropped on the box, or pasted into it (a file manager's copy puts their URLs on the clipboard),
are attached rather than typed as their paths (`sig_files`); pasted image data is refused with a
reason (`sig_refused`), since the models read text only.
"""
from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import QEvent, QMimeData, Qt, Signal
from PySide6.QtGui import QKeyEvent, QTextCursor
from PySide6.QtWidgets import QLabel, QPlainTextEdit, QWidget

EDIT_HINT = "Editing a message — Enter resends, Esc cancels"
EDIT_REPLY_HINT = "Editing a reply — Enter keeps it as an alternative, Esc cancels"
IMAGE_REFUSED = ("The pasted picture was not attached: the models here read text only, so they cannot see images. "
                 "Describe it in words, or attach text, code or PDF files.")
PLACEHOLDER = "Ask something…  (Enter sends, Shift+Enter starts a new line)"
HEIGHT = 96


class InputBox(QPlainTextEdit):
    """A plain-text editor that submits on Enter."""

    sig_submit = Signal(str)
    """Enter was pressed on non-blank text (the text, not yet cleared)."""
    sig_resend = Signal(int, str)
    """Enter was pressed in edit mode: the edited message's id and the new text (edit mode stays
    until `end_edit`, so a refused resend keeps the text)."""
    sig_edit_cancelled = Signal()
    """Esc left edit mode; the box holds what it held before."""
    sig_editing = Signal(bool)
    """Edit mode began (True) or ended (False)."""
    sig_files = Signal(list)
    """Files were dropped or pasted here (list[Path]): attach them."""
    sig_refused = Signal(str)
    """Something pasted or dropped cannot be attached: why, in a sentence."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setPlaceholderText(PLACEHOLDER)
        self.setTabChangesFocus(True)
        self.setMaximumHeight(HEIGHT)
        self.setMinimumHeight(48)
        self.editing: int | None = None
        """The id of the message being edited, or None."""
        self.files_attached = False
        """Files are attached to the message being written: Enter sends it with no words too."""
        self._draft = ""
        self.banner = QLabel(EDIT_HINT, self)
        self.banner.setObjectName("edit_banner")
        self.banner.setAccessibleName("Edit mode")
        self.banner.setStyleSheet("font-weight: bold; padding: 2px 6px;")
        self.banner.hide()

    # -- edit mode -------------------------------------------------------------------------
    def begin_edit(self, message_id: int, text: str, reply: bool = False) -> None:
        """Hold `text` for editing (a reply's, when `reply`); what was typed before comes back when the edit ends."""
        if self.editing is None:
            self._draft = self.toPlainText()
        self.editing = message_id
        hint = EDIT_REPLY_HINT if reply else EDIT_HINT
        self.banner.setText(hint)
        self.setPlainText(text)
        self.moveCursor(QTextCursor.MoveOperation.End)
        h = self.banner.sizeHint().height()
        self.setViewportMargins(0, h, 0, 0)
        self.setMaximumHeight(HEIGHT + h)
        self.banner.show()
        self._place_banner()
        self.setAccessibleDescription(hint)
        self.setFocus()
        self.sig_editing.emit(True)

    def end_edit(self) -> None:
        """Leave edit mode and give back what was typed before it."""
        if self.editing is None:
            return
        self.editing = None
        self.banner.hide()
        self.setViewportMargins(0, 0, 0, 0)
        self.setMaximumHeight(HEIGHT)
        self.setAccessibleDescription("")
        self.setPlainText(self._draft)
        self.moveCursor(QTextCursor.MoveOperation.End)
        self._draft = ""
        self.sig_editing.emit(False)

    def _place_banner(self) -> None:
        r = self.contentsRect()
        self.banner.setGeometry(r.left(), r.top(), r.width(), self.banner.sizeHint().height())

    def resizeEvent(self, e) -> None:
        super().resizeEvent(e)
        if self.editing is not None:
            self._place_banner()

    # -- files dropped or pasted ------------------------------------------------------------------
    def canInsertFromMimeData(self, source: QMimeData) -> bool:
        return bool(local_files(source)) or source.hasImage() or super().canInsertFromMimeData(source)

    def insertFromMimeData(self, source: QMimeData) -> None:
        files = local_files(source)
        if files:
            self.sig_files.emit(files)
        elif source.hasImage() and not source.hasText():
            self.sig_refused.emit(IMAGE_REFUSED)
        else:
            super().insertFromMimeData(source)

    # -- keys ----------------------------------------------------------------------------------
    def event(self, e: QEvent) -> bool:
        # Esc is also the window's Stop shortcut: while editing, this box takes it first.
        if (e.type() == QEvent.Type.ShortcutOverride and self.editing is not None
                and isinstance(e, QKeyEvent) and e.key() == Qt.Key.Key_Escape):
            e.accept()
            return True
        return super().event(e)

    def keyPressEvent(self, e: QKeyEvent) -> None:
        if e.key() == Qt.Key.Key_Escape and self.editing is not None:
            self.end_edit()
            self.sig_edit_cancelled.emit()
            return
        if e.key() in (Qt.Key.Key_Return, Qt.Key.Key_Enter) and not (
            e.modifiers() & (Qt.KeyboardModifier.ShiftModifier | Qt.KeyboardModifier.AltModifier)
        ):
            text = self.toPlainText()
            if text.strip() or self.files_attached:
                if self.editing is not None:
                    self.sig_resend.emit(self.editing, text)
                else:
                    self.sig_submit.emit(text)
            return
        if e.key() in (Qt.Key.Key_Return, Qt.Key.Key_Enter):
            self.insertPlainText("\n")  # Shift+Enter (or Alt+Enter): a line break, never a paragraph trick
            return
        super().keyPressEvent(e)


def local_files(source: QMimeData) -> list[Path]:
    """The local files a drop or a paste carries (a file manager's copy or drag), as paths."""
    if not source.hasUrls():
        return []
    return [Path(u.toLocalFile()) for u in source.urls() if u.isLocalFile() and u.toLocalFile()]
