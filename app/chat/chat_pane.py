"""The chat view with its find bar and token details panel, and the actions that open them."""
from __future__ import annotations

from PySide6.QtWidgets import QVBoxLayout, QWidget

from app.chat.chat_view import ChatView
from app.chat.find_bar import FindBar
from app.chat.token_details import TokenDetails
from app.core.commands import StandardKey, command, key_sequences


class ChatPane(QWidget):
    """ChatView above a find bar (Ctrl+F) and a token details panel (Ctrl+I); both start hidden."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.view = ChatView()
        self.find_bar = FindBar(self.view)
        self.find_bar.hide()
        self.details = TokenDetails(self.view)
        self.details.hide()
        lay = QVBoxLayout(self)
        lay.setContentsMargins(0, 0, 0, 0)
        lay.setSpacing(2)
        lay.addWidget(self.view, 1)
        lay.addWidget(self.find_bar)
        lay.addWidget(self.details)
        # Window-wide shortcuts: they work from the input box too.
        self.act_find = command(self, "&Find in chat…", "Find text in this chat", key_sequences(StandardKey.Find, "Ctrl+F"))
        self.act_find.triggered.connect(self.find_bar.open)
        self.act_details = command(self, "Token &details", "Show the story of the token at the text cursor under the chat",
                                   key_sequences(None, "Ctrl+I"), checkable=True)
        self.act_details.toggled.connect(self.details.setVisible)
        self.addAction(self.act_find)
        self.addAction(self.act_details)
