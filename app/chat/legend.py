"""The key under the chat: each token style, drawn with the very formats the chat uses.

It wraps onto more lines when the window is narrow and grows to fit them, so no item is ever cut.
"""
from __future__ import annotations

from PySide6.QtCore import QSize, Qt
from PySide6.QtGui import QResizeEvent, QTextCharFormat, QTextCursor
from PySide6.QtWidgets import QFrame, QSizePolicy, QTextEdit, QWidget

from app.core.theme import EXPLANATIONS, LABELS, Mark, TokenColours, mark_format

_NBSP = "\u00a0"  # inside an item, so lines break only between items


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
        self.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Fixed)
        self.document().setDocumentMargin(2)
        self.setToolTip("<br>".join(f"<b>{LABELS[m]}</b>: {EXPLANATIONS[m]}" for m in Mark))
        self.setAccessibleName("Legend of token marks")
        self.setAccessibleDescription("; ".join(f"{LABELS[m]}: {EXPLANATIONS[m]}" for m in Mark))
        self.marks: list[Mark] = []
        self._fit()

    def show_legend(self, colours: TokenColours, highlight: bool, show_rejected: bool) -> None:
        self.clear()
        cur = QTextCursor(self.document())
        plain = QTextCharFormat()
        if not highlight:
            cur.insertText("Highlighting is off: replies read as plain text.", plain)
            self.marks = []
            self._fit()
            return
        self.marks = [Mark.ACCEPTED, Mark.CORRECTION, Mark.BONUS, Mark.TARGET]
        if show_rejected:
            self.marks.append(Mark.REJECTED)
        cur.insertText("Legend:", plain)
        for mark in self.marks:
            cur.insertText("   ", plain)
            cur.insertText(f"{_NBSP}{LABELS[mark].replace(' ', _NBSP)}{_NBSP}", mark_format(mark, colours, True))
        self._fit()

    def _fit(self) -> None:
        """As tall as the wrapped text at the current width: every line shows."""
        doc = self.document()
        doc.setTextWidth(max(1, self.viewport().width()))
        margins = self.contentsMargins()
        height = int(doc.size().height() + 0.999) + margins.top() + margins.bottom()
        if height != self.height() or self.minimumHeight() != height:
            self.setFixedHeight(height)

    def resizeEvent(self, e: QResizeEvent) -> None:
        super().resizeEvent(e)
        if e.size().width() != e.oldSize().width():
            self._fit()

    def minimumSizeHint(self) -> QSize:
        return QSize(60, super().minimumSizeHint().height())
