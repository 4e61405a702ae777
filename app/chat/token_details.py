"""The story of the token at the chat's text cursor: the tooltip's, reachable with the keyboard."""
from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QFrame, QLabel, QVBoxLayout, QWidget

from app.chat.chat_view import ChatView

HINT = ("Put the text cursor on a reply token (click it, or move with the arrow keys in the chat) "
        "to see where it came from.")


class TokenDetails(QFrame):
    """A panel under the chat that follows the view's text cursor while it is shown."""

    def __init__(self, view: ChatView, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.view = view
        self.setFrameShape(QFrame.Shape.StyledPanel)
        self.setAccessibleName("Token details")
        lay = QVBoxLayout(self)
        lay.setContentsMargins(8, 4, 8, 4)
        self.label = QLabel(HINT)
        self.label.setTextFormat(Qt.TextFormat.RichText)
        self.label.setWordWrap(True)
        self.label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse
                                           | Qt.TextInteractionFlag.TextSelectableByKeyboard)
        self.label.setFocusPolicy(Qt.FocusPolicy.StrongFocus)  # Tab reaches it; a screen reader reads it
        self.label.setAccessibleName("Token details")
        lay.addWidget(self.label)
        view.cursorPositionChanged.connect(self.follow)

    def story(self) -> str | None:
        """The story at the cursor: the character after it, else the one before."""
        pos = self.view.textCursor().position()
        return self.view.story_at(pos) or (self.view.story_at(pos - 1) if pos > 0 else None)

    def follow(self) -> None:
        if self.isVisible():
            self.label.setText(self.story() or HINT)

    def showEvent(self, e) -> None:
        super().showEvent(e)
        self.follow()
