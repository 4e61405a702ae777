"""The message box: Enter sends, Shift+Enter starts a new line."""
from __future__ import annotations

from PySide6.QtCore import Qt, Signal
from PySide6.QtGui import QKeyEvent
from PySide6.QtWidgets import QPlainTextEdit, QWidget


class InputBox(QPlainTextEdit):
    """A plain-text editor that submits on Enter."""

    sig_submit = Signal(str)
    """Enter was pressed on non-blank text (the text, not yet cleared)."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setPlaceholderText("Ask something…  (Enter sends, Shift+Enter starts a new line)")
        self.setTabChangesFocus(True)
        self.setMaximumHeight(96)
        self.setMinimumHeight(48)

    def keyPressEvent(self, e: QKeyEvent) -> None:
        if e.key() in (Qt.Key.Key_Return, Qt.Key.Key_Enter) and not (
            e.modifiers() & (Qt.KeyboardModifier.ShiftModifier | Qt.KeyboardModifier.ControlModifier
                             | Qt.KeyboardModifier.AltModifier)
        ):
            text = self.toPlainText()
            if text.strip():
                self.sig_submit.emit(text)
            return
        if e.key() in (Qt.Key.Key_Return, Qt.Key.Key_Enter):
            self.insertPlainText("\n")  # Shift+Enter: a line break, never a paragraph trick
            return
        super().keyPressEvent(e)
