"""One line under the chat that shows each token style, drawn with the very formats the chat uses."""
from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtGui import QTextCharFormat, QTextCursor
from PySide6.QtWidgets import QFrame, QTextEdit, QWidget

from app.core.theme import EXPLANATIONS, LABELS, Mark, TokenColours, mark_format


class Legend(QTextEdit):
    """'accepted draft · target's correction · bonus token · target alone (· rejected draft)'."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setReadOnly(True)
        self.setFrameShape(QFrame.Shape.NoFrame)
        self.setVerticalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.setLineWrapMode(QTextEdit.LineWrapMode.WidgetWidth)
        self.setTextInteractionFlags(Qt.TextInteractionFlag.NoTextInteraction)
        self.setFocusPolicy(Qt.FocusPolicy.NoFocus)
        self.document().setDocumentMargin(2)
        self.setToolTip("<br>".join(f"<b>{LABELS[m]}</b>: {EXPLANATIONS[m]}" for m in Mark))
        self.setFixedHeight(self.fontMetrics().height() + 10)
        self.marks: list[Mark] = []

    def show_legend(self, colours: TokenColours, highlight: bool, show_rejected: bool) -> None:
        self.clear()
        cur = QTextCursor(self.document())
        plain = QTextCharFormat()
        if not highlight:
            cur.insertText("Highlighting is off: replies read as plain text.", plain)
            self.marks = []
            return
        self.marks = [Mark.ACCEPTED, Mark.CORRECTION, Mark.BONUS, Mark.TARGET]
        if show_rejected:
            self.marks.append(Mark.REJECTED)
        cur.insertText("Legend:  ", plain)
        for i, mark in enumerate(self.marks):
            if i:
                cur.insertText("   ", plain)
            cur.insertText(f" {LABELS[mark]} ", mark_format(mark, colours, True))
