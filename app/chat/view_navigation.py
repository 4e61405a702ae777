"""Moving about the chat view: message to message by keyboard, and keeping a message in place on a redraw.

Mixed into ChatView (app.chat.chat_view), which renders; this part only moves the text cursor and the
scroll bar. Which message holds a position is read back by app.chat.view_reading.
"""
from __future__ import annotations

from collections.abc import Callable

from PySide6.QtCore import QPoint, QRect, Qt
from PySide6.QtGui import QKeyEvent, QTextCursor, QTextDocument
from PySide6.QtWidgets import QScrollBar

from app.chat.live_reply import ShownMessage
from app.history.records import Message


class ViewNavigation:
    """Navigation in a ChatView: Ctrl+Up / Ctrl+Down between message headers, scrolling to a message or the end."""

    # What the view provides (app.chat.chat_view.ChatView, app.chat.view_reading).
    _shown: list[ShownMessage]
    _by_id: dict[int, ShownMessage]
    _pending: list[Message]
    _shown_index: Callable[[int], int]
    _render_pending: Callable[[], None]
    finish_rendering: Callable[[], None]
    document: Callable[[], QTextDocument]
    textCursor: Callable[[], QTextCursor]
    setTextCursor: Callable[[QTextCursor], None]
    ensureCursorVisible: Callable[[], None]
    cursorRect: Callable[..., QRect]
    cursorForPosition: Callable[[QPoint], QTextCursor]
    verticalScrollBar: Callable[[], QScrollBar]

    # -- keyboard ----------------------------------------------------------------------------------------------
    def keyPressEvent(self, e: QKeyEvent) -> None:
        if e.modifiers() == Qt.KeyboardModifier.ControlModifier and e.key() in (Qt.Key.Key_Up, Qt.Key.Key_Down):
            self.go_to_message(-1 if e.key() == Qt.Key.Key_Up else 1)
            return
        super().keyPressEvent(e)  # type: ignore[misc] - the view's QTextBrowser

    def go_to_message(self, step: int) -> Message | None:
        """Moves the text cursor to the previous (-1) or next (+1) message's header and scrolls it to the top."""
        pos = self.textCursor().position()
        k = self._shown_index(pos)
        if step < 0:
            target = k if k >= 0 and pos > self._shown[k].start else k - 1
            if target < 0 and self._pending:
                self.finish_rendering()
                k = self._shown_index(self.textCursor().position())
                target = k - 1
        else:
            target = k + 1
        if not 0 <= target < len(self._shown):
            return None
        s = self._shown[target]
        self._scroll_to_position(s.start, select_word=True)
        return s.message

    def _scroll_to_position(self, position: int, select_word: bool = False) -> None:
        """`select_word`: select the word there (a message header's first), the cursor at its start: it shows
        where the keyboard is, and Tab then moves to the next link after it (from no selection, Qt's Tab
        starts at the top of the document)."""
        cur = QTextCursor(self.document())
        cur.setPosition(position)
        if select_word:
            cur.movePosition(QTextCursor.MoveOperation.EndOfWord)
            cur.setPosition(position, QTextCursor.MoveMode.KeepAnchor)
        self.setTextCursor(cur)
        self.ensureCursorVisible()
        sb = self.verticalScrollBar()
        sb.setValue(sb.value() + self.cursorRect(cur).top() - 6)

    # -- scrolling -----------------------------------------------------------------------------------------------
    def _at_bottom(self) -> bool:
        sb = self.verticalScrollBar()
        return sb.value() >= sb.maximum() - 8

    def _scroll_to_end(self) -> None:
        sb = self.verticalScrollBar()
        sb.setValue(sb.maximum())

    def _top_position(self) -> tuple[int, int]:
        c = self.cursorForPosition(QPoint(4, 4))
        return c.position(), self.cursorRect(c).top()

    def _top_message(self) -> tuple[int, int] | None:
        """(message id, viewport y of its header) of the message at the top of the view."""
        pos, _y = self._top_position()
        k = self._shown_index(pos)
        if k < 0:
            return None
        s = self._shown[k]
        c = QTextCursor(self.document())
        c.setPosition(s.start)
        return s.message.id, self.cursorRect(c).top()

    def _scroll_to_message(self, message_id: int, y: int) -> None:
        while message_id not in self._by_id and self._pending:
            self._render_pending()
        s = self._by_id.get(message_id)
        if s is None:
            return
        c = QTextCursor(self.document())
        c.setPosition(s.start)
        sb = self.verticalScrollBar()
        sb.setValue(sb.value() + self.cursorRect(c).top() - y)
