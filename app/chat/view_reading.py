"""Reading back what the chat view shows: which message and token sit at a place, their stories, copies.

Mixed into ChatView (app.chat.chat_view), which renders; this part only reads the document and the
records the view keeps beside it (`_shown`: each shown message's start and Provenance runs, in
document order; `_by_id`). Tests, exports, tooltips, the details panel and Copy read the view here.
"""
from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass

from PySide6.QtCore import QEvent, QPointF, Qt
from PySide6.QtGui import QGuiApplication, QTextCharFormat, QTextCursor, QTextDocument
from PySide6.QtWidgets import QScrollBar, QToolTip

from app.chat import app_links
from app.chat.app_links import LinkKind
from app.chat.live_reply import ShownMessage
from app.chat.markdown_spans import code_sources
from app.chat.thinking import THINKING_CODE, parts_of
from app.chat.token_story import token_story
from app.core.theme import Mark
from app.history.records import Message, Role


@dataclass(frozen=True, slots=True)
class TokenFragment:
    """A piece of reply text as the document shows it, and the token it came from."""

    text: str
    """The characters shown."""
    mark: Mark
    """Its token's source (REJECTED for a rejected draft)."""
    message_id: int
    """Database id of its message."""
    index: int
    """Token index in the reply (-1 for rejected draft text)."""
    round: int
    """Round that emitted (or rejected) it."""
    format: QTextCharFormat
    """The character format it is drawn with."""
    position: int
    """Document position of its first character."""


def message_source(m: Message) -> tuple[str, list[int]]:
    """What a message's body is rendered from, and its tokens' cumulative ends (none for user text)."""
    if m.role == Role.USER or not m.tokens:
        return m.content, []
    ends, at = [], 0
    texts = [t.text for t in m.tokens]
    for t in texts:
        at += len(t)
        ends.append(at)
    return "".join(texts), ends


class ViewReading:
    """Read-back of a ChatView: positions to messages and tokens, tokens to stories, messages to the clipboard."""

    # What the view provides (app.chat.chat_view.ChatView).
    _shown: list[ShownMessage]
    _by_id: dict[int, ShownMessage]
    copied: object
    """The view's signal: text was put on the clipboard ('message' or 'code')."""
    finish_rendering: Callable[[], None]
    document: Callable[[], QTextDocument]
    horizontalScrollBar: Callable[[], QScrollBar]
    verticalScrollBar: Callable[[], QScrollBar]

    def token_fragments(self) -> Iterator[TokenFragment]:
        """Every piece of reply text with its token, in document order (tests and exports read this)."""
        self.finish_rendering()
        doc = self.document()
        sel, at = QTextCursor(doc), QTextCursor(doc)
        for s in list(self._shown):
            m, p = s.message, s.prov
            for k in range(len(p)):
                a, b = s.start + p.starts[k], s.start + p.ends[k]
                sel.setPosition(a)
                sel.setPosition(b, QTextCursor.MoveMode.KeepAnchor)
                at.setPosition(a + 1)
                idx = p.index[k]
                mark = Mark.REJECTED if idx < 0 else Mark.of(m.tokens[idx].source)
                yield TokenFragment(sel.selectedText(), mark, m.id, idx, p.round[k], at.charFormat(), a)

    def message_at(self, position: int) -> Message | None:
        k = self._shown_index(position)
        return self._shown[k].message if k >= 0 else None

    def message_start(self, message_id: int) -> int | None:
        """Document position of a shown message's header."""
        s = self._by_id.get(message_id)
        return s.start if s is not None else None

    def _shown_index(self, position: int) -> int:
        lo, hi = 0, len(self._shown)
        while lo < hi:
            mid = (lo + hi) // 2
            if self._shown[mid].start <= position:
                lo = mid + 1
            else:
                hi = mid
        return lo - 1

    def fragment_at(self, position: int) -> TokenFragment | None:
        """The token piece holding the character at a document position, or None."""
        k = self._shown_index(position)
        if k < 0:
            return None
        s = self._shown[k]
        run = s.prov.find(position - s.start)
        if run < 0:
            return None
        p, m = s.prov, s.message
        a, b = s.start + p.starts[run], s.start + p.ends[run]
        cur = QTextCursor(self.document())
        cur.setPosition(a + 1)
        fmt = cur.charFormat()
        cur.setPosition(a)
        cur.setPosition(b, QTextCursor.MoveMode.KeepAnchor)
        idx = p.index[run]
        mark = Mark.REJECTED if idx < 0 else Mark.of(m.tokens[idx].source)
        return TokenFragment(cur.selectedText(), mark, m.id, idx, p.round[run], fmt, a)

    def story_at(self, position: int) -> str | None:
        """The token story (HTML) of the character at a document position, or None off reply tokens."""
        frag = self.fragment_at(position)
        return self.tooltip_for(frag) if frag is not None else None

    def tooltip_for(self, frag: TokenFragment) -> str | None:
        """What a token is and how it came to be, in HTML (the tooltip and the details panel show it)."""
        s = self._by_id.get(frag.message_id)
        if s is None:
            return None
        return token_story(s.message, frag.mark, frag.index, frag.round)

    def _doc_position(self, pos: QPointF) -> int:
        doc_pos = QPointF(pos.x() + self.horizontalScrollBar().value(), pos.y() + self.verticalScrollBar().value())
        return self.document().documentLayout().hitTest(doc_pos, Qt.HitTestAccuracy.ExactHit)

    def viewportEvent(self, e: QEvent) -> bool:
        """A tooltip over a reply token tells its story."""
        if e.type() == QEvent.Type.ToolTip:
            hit = self._doc_position(QPointF(e.pos()))
            if hit < 0:
                # Off the text (the blank page under the last message): no tooltip. Qt's own would be the
                # nearest character's, the last message's "Delete" link; an ignored event goes on to it.
                QToolTip.hideText()
                e.accept()
                return True
            tip = self.story_at(hit)
            if tip:
                QToolTip.showText(e.globalPos(), tip, self)
                return True
        return super().viewportEvent(e)  # type: ignore[misc] - the view's QTextBrowser

    # -- copies ----------------------------------------------------------------------------------------------
    def copy_message(self, message_id: int) -> None:
        """The message's own text: no rejected drafts, no notes, no ⏎ glyphs."""
        s = self._by_id.get(message_id)
        if s is not None:
            QGuiApplication.clipboard().setText(s.message.text)
            self.copied.emit("message")

    def copy_code(self, message_id: int, index: int) -> None:
        """The source text of a message's index-th code block."""
        s = self._by_id.get(message_id)
        if s is None:
            return
        m = s.message
        source, ends = message_source(m)
        parts = parts_of(m, source, ends)
        if index >= THINKING_CODE:  # a code block of the reply's thinking
            thinking = source[slice(*parts.thinking)] if parts.thinking is not None else m.thinking
            codes, index = code_sources(thinking), index - THINKING_CODE
        else:
            codes = code_sources(source[parts.answer:])
        if 0 <= index < len(codes):
            QGuiApplication.clipboard().setText(codes[index])
            self.copied.emit("code")

    # -- a message's links, as the document shows them ------------------------------------------------------
    def message_links(self, message_id: int) -> list[tuple[str, str, str]]:
        """The app links a shown message offers, in document order: (words, href, tooltip). Read from the
        document, so a menu lists exactly the links the message shows."""
        s = self._by_id.get(message_id)
        if s is None:
            return []
        k = self._shown.index(s)
        doc = self.document()
        end = self._shown[k + 1].start if k + 1 < len(self._shown) else doc.characterCount()
        out: list[tuple[str, str, str]] = []
        codes = 0
        block = doc.findBlock(s.start)
        while block.isValid() and block.position() < end:
            it = block.begin()
            while not it.atEnd():
                frag = it.fragment()
                fmt = frag.charFormat()
                link = app_links.parse(fmt.anchorHref()) if fmt.isAnchor() else None
                if link is not None and s.start <= frag.position() < end:
                    href = fmt.anchorHref()
                    if out and out[-1][1] == href:  # one link split over two formats
                        out[-1] = (out[-1][0] + frag.text(), href, out[-1][2])
                    else:
                        words = frag.text()
                        if link[0] is LinkKind.COPY_CODE:
                            codes += 1
                            words = f"Copy code block {codes}"
                        elif words in ("‹", "›"):
                            words = fmt.toolTip() or words
                        out.append((words, href, fmt.toolTip()))
                it += 1
            block = block.next()
        return out
