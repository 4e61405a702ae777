"""The message box: Enter (or Ctrl+Enter) sends, Shift+Enter starts a new line; and an edit mode for resending.

In edit mode the box holds an earlier question's text under a one-line banner saying so; Enter
resends it (as a new alternative of that question), Esc gives the box back as it was before.
"""
from __future__ import annotations

from PySide6.QtCore import QEvent, Qt, Signal
from PySide6.QtGui import QKeyEvent, QTextCursor
from PySide6.QtWidgets import QLabel, QPlainTextEdit, QWidget

EDIT_HINT = "Editing a message — Enter resends, Esc cancels"
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

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setPlaceholderText(PLACEHOLDER)
        self.setTabChangesFocus(True)
        self.setMaximumHeight(HEIGHT)
        self.setMinimumHeight(48)
        self.editing: int | None = None
        """The id of the message being edited, or None."""
        self._draft = ""
        self.banner = QLabel(EDIT_HINT, self)
        self.banner.setObjectName("edit_banner")
        self.banner.setAccessibleName("Edit mode")
        self.banner.setStyleSheet("font-weight: bold; padding: 2px 6px;")
        self.banner.hide()

    # -- edit mode -------------------------------------------------------------------------
    def begin_edit(self, message_id: int, text: str) -> None:
        """Hold `text` for editing; what was typed before comes back when the edit ends."""
        if self.editing is None:
            self._draft = self.toPlainText()
        self.editing = message_id
        self.setPlainText(text)
        self.moveCursor(QTextCursor.MoveOperation.End)
        h = self.banner.sizeHint().height()
        self.setViewportMargins(0, h, 0, 0)
        self.setMaximumHeight(HEIGHT + h)
        self.banner.show()
        self._place_banner()
        self.setAccessibleDescription(EDIT_HINT)
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
            if text.strip():
                if self.editing is not None:
                    self.sig_resend.emit(self.editing, text)
                else:
                    self.sig_submit.emit(text)
            return
        if e.key() in (Qt.Key.Key_Return, Qt.Key.Key_Enter):
            self.insertPlainText("\n")  # Shift+Enter (or Alt+Enter): a line break, never a paragraph trick
            return
        super().keyPressEvent(e)
