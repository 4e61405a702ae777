"""Ctrl+F in the chat: find text in the conversation, next and previous, Esc closes."""
from __future__ import annotations

from PySide6.QtCore import QEvent, QObject, Qt, Signal
from PySide6.QtGui import QKeyEvent, QPalette, QTextCursor, QTextDocument
from PySide6.QtWidgets import QHBoxLayout, QLabel, QLineEdit, QTextEdit, QToolButton, QWidget

from app.chat.chat_view import ChatView


class FindBar(QWidget):
    """A one-line bar under the chat; searches the view's document with QTextDocument.find, wrapping around."""

    closed = Signal()
    """The bar was closed (Esc or its close button)."""

    def __init__(self, view: ChatView, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.view = view
        self.setAccessibleName("Find in chat")
        lay = QHBoxLayout(self)
        lay.setContentsMargins(0, 2, 0, 2)
        self.field = QLineEdit()
        self.field.setPlaceholderText("Find in chat")
        self.field.setAccessibleName("Find in chat")
        self.field.setClearButtonEnabled(True)
        self.previous = QToolButton(text="↑", toolTip="Previous match (Shift+Enter)")
        self.previous.setAccessibleName("Previous match")
        self.next = QToolButton(text="↓", toolTip="Next match (Enter)")
        self.next.setAccessibleName("Next match")
        self.status = QLabel("")
        self.status.setAccessibleName("Find result")
        self.close_button = QToolButton(text="✕", toolTip="Close (Esc)")
        self.close_button.setAccessibleName("Close find bar")
        for w in (self.field, self.previous, self.next, self.status):
            lay.addWidget(w, 1 if w is self.field else 0)
        lay.addStretch(0)
        lay.addWidget(self.close_button)
        self.previous.clicked.connect(lambda: self.find(backward=True))
        self.next.clicked.connect(lambda: self.find())
        self.close_button.clicked.connect(self.close_bar)
        self.field.textEdited.connect(lambda _t: self.find(from_start_of_match=True))
        self.field.installEventFilter(self)

    def open(self) -> None:
        self.view.finish_rendering()  # older messages render lazily; search all of them
        self.show()
        self.field.setFocus(Qt.FocusReason.ShortcutFocusReason)
        self.field.selectAll()

    def close_bar(self) -> None:
        self.hide()
        self.view.setExtraSelections([])
        self.view.setFocus(Qt.FocusReason.OtherFocusReason)
        self.closed.emit()

    def eventFilter(self, obj: QObject, e: QEvent) -> bool:
        if obj is self.field:
            if e.type() == QEvent.Type.ShortcutOverride and isinstance(e, QKeyEvent) and e.key() == Qt.Key.Key_Escape:
                e.accept()  # Esc closes the bar here rather than stopping the reply (the window's shortcut)
                return True
            if e.type() == QEvent.Type.KeyPress and isinstance(e, QKeyEvent):
                if e.key() == Qt.Key.Key_Escape:
                    self.close_bar()
                    return True
                if e.key() in (Qt.Key.Key_Return, Qt.Key.Key_Enter):
                    self.find(backward=bool(e.modifiers() & Qt.KeyboardModifier.ShiftModifier))
                    return True
        return super().eventFilter(obj, e)

    def find(self, backward: bool = False, from_start_of_match: bool = False) -> bool:
        """Selects the next (or previous) match after the view's cursor, wrapping around; False if none."""
        text = self.field.text()
        view, doc = self.view, self.view.document()
        if not text:
            self.status.setText("")
            view.setExtraSelections([])
            return False
        flags = QTextDocument.FindFlag.FindBackward if backward else QTextDocument.FindFlag(0)
        start = QTextCursor(view.textCursor())
        if from_start_of_match:  # typing more letters keeps the match where it is
            start.setPosition(start.selectionStart())
        hit = doc.find(text, start, flags)
        if hit.isNull():
            edge = QTextCursor(doc)
            edge.movePosition(QTextCursor.MoveOperation.End if backward else QTextCursor.MoveOperation.Start)
            hit = doc.find(text, edge, flags)
        if hit.isNull():
            self.status.setText("Not found")
            view.setExtraSelections([])
            return False
        self.status.setText("")
        view.setTextCursor(hit)
        view.ensureCursorVisible()
        sel = QTextEdit.ExtraSelection()
        sel.cursor = hit
        sel.format.setBackground(view.palette().color(QPalette.ColorRole.Highlight))
        sel.format.setForeground(view.palette().color(QPalette.ColorRole.HighlightedText))
        view.setExtraSelections([sel])
        return True
