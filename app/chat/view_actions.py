"""The chat view's links and menus: an app link (a message action, copy, thinking) or a model's link (shown
before it opens), and a message's actions as a menu at the cursor or the mouse.

Mixed into ChatView (app.chat.chat_view), which declares the signals used here.
"""
from __future__ import annotations

from PySide6.QtCore import QPoint, Qt, QUrl
from PySide6.QtGui import QContextMenuEvent, QDesktopServices
from PySide6.QtWidgets import QMenu, QMessageBox

from app.chat import app_links
from app.chat.actions import MessageAction
from app.chat.app_links import LinkKind


def _with_mnemonic(words: str, taken: set[str]) -> str:
    """`words` with '&' before the first letter not yet `taken` (a word's first letter preferred): a menu's item
    then answers to that key."""
    words = words.replace("&", "&&")
    starts = [i for i, ch in enumerate(words) if ch.isalpha() and (i == 0 or not words[i - 1].isalnum())]
    for i in starts + list(range(len(words))):
        ch = words[i].lower()
        if words[i].isalnum() and ch not in taken:
            taken.add(ch)
            return words[:i] + "&" + words[i:]
    return words


class ViewActions:
    """Links and the actions menu of a ChatView."""

    # -- links ---------------------------------------------------------------------------------------------
    def _on_anchor(self, url: QUrl) -> None:
        link = app_links.parse(url.toString())
        if link is None:  # a link in a message: content, whatever it says
            self._open_external(url)
            return
        kind, parts = link
        if kind is LinkKind.ACTION and len(parts) == 2 and parts[0] in MessageAction.__members__.values() \
                and parts[1].lstrip("-").isdigit():
            self.action_requested.emit(parts[0], int(parts[1]))
        elif kind is LinkKind.COPY and len(parts) == 1 and parts[0].lstrip("-").isdigit():
            self.copy_message(int(parts[0]))
        elif kind is LinkKind.COPY_CODE and len(parts) == 2 and all(p.lstrip("-").isdigit() for p in parts):
            self.copy_code(int(parts[0]), int(parts[1]))
        elif kind is LinkKind.THINKING and len(parts) == 1 and parts[0].lstrip("-").isdigit():
            self.toggle_thinking(int(parts[0]))

    def _open_external(self, url: QUrl) -> None:
        """Only http, https and mailto, after showing where it goes (a model wrote it)."""
        if url.scheme().lower() not in app_links.EXTERNAL:
            self.link_refused.emit(url.toString())
            return
        answer = QMessageBox.question(self, "Open link", f"Open this link from the chat?\n\n{url.toString()}")
        if answer == QMessageBox.StandardButton.Yes:
            QDesktopServices.openUrl(url)

    # -- a message's actions as a menu -------------------------------------------------------------------------
    def show_actions_menu(self, at: QPoint | None = None) -> QMenu | None:
        """A menu of the actions of the message at the text cursor (or at `at`, a viewport point), shown
        there; also Copy and Select all. None when no message is shown."""
        if at is not None:
            position = self.cursorForPosition(at).position()
        else:
            position = self.textCursor().position()
            at = self.cursorRect().bottomLeft()
        m = self.message_at(position) or (self._shown[-1].message if self._shown else None)
        if m is None:
            return None
        menu = QMenu(self)
        menu.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
        menu.setAccessibleName("Message actions")
        menu.setToolTipsVisible(True)
        taken: set[str] = set()
        for words, href, tip in self.message_links(m.id):
            act = menu.addAction(_with_mnemonic(words, taken))
            act.setToolTip(tip)
            act.triggered.connect(lambda _checked=False, h=href: self._on_anchor(QUrl(h)))
        menu.addSeparator()
        copy = menu.addAction("Copy selected text", self.copy)
        copy.setEnabled(self.textCursor().hasSelection())
        menu.addAction("Select all", self.selectAll)
        self.actions_menu = menu
        menu.popup(self.viewport().mapToGlobal(at))
        return menu

    def contextMenuEvent(self, e: QContextMenuEvent) -> None:
        keyboard = e.reason() == QContextMenuEvent.Reason.Keyboard
        self.show_actions_menu(None if keyboard else e.pos())
