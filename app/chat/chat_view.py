"""The conversation as a document: every reply token keeps its provenance in its character format.

Each token is inserted with the format of its source (theme.mark_format) plus properties naming
the message, token index and round, so a hover can explain it and tests can read it back.
Replies stream in at the end of the document in batches (one edit block per timer tick).
Finished replies can instead be shown rendered from Markdown; code inside a reply reads in a
monospace font in the token view too.
"""
from __future__ import annotations

import html
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from PySide6.QtCore import QEvent, QPointF, Qt, Signal
from PySide6.QtGui import QColor, QFont, QTextBlockFormat, QTextCharFormat, QTextCursor, QTextFormat
from PySide6.QtWidgets import QTextBrowser, QToolTip, QWidget

from engine.decoding.events import FinishReason, TokenEvent, TokenSource

from app.history.records import Message, Role
from app.core.theme import EXPLANATIONS, LABELS, LIGHT_COLOURS, Mark, TokenColours, mark_format

PROP_MARK = QTextFormat.Property.UserProperty + 1
"""Mark value ('accepted', ..., 'rejected') of a reply fragment."""
PROP_MESSAGE = QTextFormat.Property.UserProperty + 2
"""Database id of the message a fragment belongs to."""
PROP_INDEX = QTextFormat.Property.UserProperty + 3
"""Token index in the reply (-1 for rejected draft text)."""
PROP_ROUND = QTextFormat.Property.UserProperty + 4
"""Round that emitted (or rejected) it."""

_FINISH_NOTES = {
    FinishReason.CANCELLED: "stopped",
    FinishReason.LENGTH: "stopped at the max tokens limit; raise it under Sampling",
    FinishReason.CONTEXT_FULL: "the context is full",
}


@dataclass(frozen=True, slots=True)
class ViewOptions:
    """How replies are drawn."""

    colours: TokenColours = LIGHT_COLOURS
    """Theme colours."""
    highlight: bool = True
    """Style tokens by source."""
    show_rejected: bool = False
    """Insert rejected draft tokens, struck through, before each correction."""
    rendered: bool = False
    """Show finished replies rendered from Markdown."""


@dataclass(frozen=True, slots=True)
class TokenFragment:
    """A piece of reply text as the document holds it."""

    text: str
    mark: Mark
    message_id: int
    index: int
    round: int
    format: QTextCharFormat
    position: int
    """Document position of its first character."""


class _CodeTracker:
    """Follows ``` fences through a reply as it streams, line by line."""

    def __init__(self) -> None:
        self.in_code = False
        self.line = ""

    @property
    def code_line(self) -> bool:
        return self.in_code or self.line.lstrip().startswith("```")

    def newline(self) -> None:
        if self.line.lstrip().startswith("```"):
            self.in_code = not self.in_code
        self.line = ""


class ChatView(QTextBrowser):
    """Read-only view of one conversation; GUI thread only."""

    action_requested = Signal(str, int)
    """(MessageAction value, message id): a message's action link was used."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setOpenExternalLinks(True)
        self.setUndoRedoEnabled(False)
        self.document().setDocumentMargin(14)
        self.options = ViewOptions()
        self.messages: list[Message] = []
        self._by_id: dict[int, Message] = {}
        self._reply_start = -1  # document position where the streaming reply's text begins
        self._code = _CodeTracker()
        self.setMouseTracking(True)

    # -- whole document --------------------------------------------------------------
    def set_options(self, options: ViewOptions) -> None:
        if options != self.options:
            self.options = options
            self.show_messages(self.messages)

    def show_messages(self, messages: Sequence[Message]) -> None:
        """Redraw everything (opening a chat, or after a view option changed)."""
        self.messages = list(messages)
        self._by_id = {m.id: m for m in self.messages}
        doc = self.document()
        doc.clear()
        self._base_font = QFont(self.font())
        cur = QTextCursor(doc)
        cur.beginEditBlock()
        first = True
        for m in self.messages:
            self._write_message(cur, m, first)
            first = False
        cur.endEditBlock()
        self._scroll_to_end()

    def _write_message(self, cur: QTextCursor, m: Message, first: bool) -> None:
        self._write_header(cur, m, first)
        if m.role == Role.USER:
            cur.insertText(m.content, QTextCharFormat())
            return
        self._reply_start = cur.position()
        self._code = _CodeTracker()
        if m.finished and self.options.rendered:
            self._write_markdown(cur, m)
        else:
            self._write_tokens(cur, m, m.tokens)
        if m.finished:
            self._write_finish_note(cur, m)

    # -- streaming ---------------------------------------------------------------------
    def append_message(self, m: Message) -> None:
        """Add a message at the end (the user's, or an empty reply about to stream)."""
        at_end = self._at_bottom()
        self.messages.append(m)
        self._by_id[m.id] = m
        cur = QTextCursor(self.document())
        cur.movePosition(QTextCursor.MoveOperation.End)
        cur.beginEditBlock()
        self._write_message(cur, m, first=len(self.messages) == 1)
        cur.endEditBlock()
        if at_end:
            self._scroll_to_end()

    def append_tokens(self, m: Message, tokens: Sequence[TokenEvent]) -> None:
        """Tokens the reply `m` (the last message) has just gained; one edit block."""
        if not tokens:
            return
        at_end = self._at_bottom()
        cur = QTextCursor(self.document())
        cur.movePosition(QTextCursor.MoveOperation.End)
        cur.beginEditBlock()
        self._write_tokens(cur, m, tokens)
        cur.endEditBlock()
        if at_end:
            self._scroll_to_end()

    def finish_reply(self, m: Message) -> None:
        """The reply `m` (the last message) ended: add its note, render it if asked."""
        at_end = self._at_bottom()
        cur = QTextCursor(self.document())
        cur.beginEditBlock()
        if self.options.rendered and self._reply_start >= 0:
            cur.setPosition(self._reply_start)
            cur.movePosition(QTextCursor.MoveOperation.End, QTextCursor.MoveMode.KeepAnchor)
            cur.removeSelectedText()
            self._write_markdown(cur, m)
        else:
            cur.movePosition(QTextCursor.MoveOperation.End)
        self._write_finish_note(cur, m)
        cur.endEditBlock()
        if at_end:
            self._scroll_to_end()

    # -- pieces ------------------------------------------------------------------------
    def _write_header(self, cur: QTextCursor, m: Message, first: bool) -> None:
        bf = QTextBlockFormat()
        bf.setTopMargin(0 if first else 14)
        bf.setBottomMargin(4)
        if not first:
            cur.insertBlock(bf)
        else:
            cur.setBlockFormat(bf)
        hf = QTextCharFormat()
        hf.setFontWeight(QFont.Weight.Bold)
        hf.setForeground(QColor(self.options.colours.muted_fg))
        if m.role == Role.USER:
            label = "You"
        else:
            pair = m.target + (f"  ←  {m.drafter}" if m.drafter and m.drafter != "none" else "")
            label = f"Draftlight · {pair}" if pair else "Draftlight"
        cur.insertText(label, hf)
        cur.insertBlock(QTextBlockFormat(), QTextCharFormat())

    def _write_finish_note(self, cur: QTextCursor, m: Message) -> None:
        note = m.error or (_FINISH_NOTES.get(m.finish_reason, "") if m.finish_reason else "")
        if not note:
            return
        nf = QTextCharFormat()
        nf.setFontItalic(True)
        nf.setForeground(QColor(self.options.colours.muted_fg))
        cur.insertText(f"  ({note})", nf)

    def _token_format(self, m: Message, mark: Mark, index: int, round_: int, code: bool) -> QTextCharFormat:
        fmt = mark_format(mark, self.options.colours, self.options.highlight)
        fmt.setProperty(PROP_MARK, mark.value)
        fmt.setProperty(PROP_MESSAGE, m.id)
        fmt.setProperty(PROP_INDEX, index)
        fmt.setProperty(PROP_ROUND, round_)
        if code:
            fmt.setFontFamilies(["monospace"])
            fmt.setFontFixedPitch(True)
        return fmt

    def _code_block(self, cur: QTextCursor) -> None:
        bf = cur.blockFormat()
        bf.setBackground(QColor(self.options.colours.code_bg))
        cur.setBlockFormat(bf)

    def _write_tokens(self, cur: QTextCursor, m: Message, tokens: Sequence[TokenEvent]) -> None:
        code = self._code
        for t in tokens:
            if t.source == TokenSource.CORRECTION and self.options.show_rejected:
                r = m.rounds.get(t.round)
                if r is not None and r.rejected_text:
                    rejected = "".join(r.rejected_text).replace("\n", "⏎")
                    cur.insertText(rejected, self._token_format(m, Mark.REJECTED, -1, t.round, code.code_line))
            mark = Mark.of(t.source)
            for i, part in enumerate(t.text.split("\n")):
                if i:
                    code.newline()
                    cur.insertBlock(QTextBlockFormat())
                    if code.in_code:
                        self._code_block(cur)
                if part:
                    was_code = code.code_line
                    code.line += part
                    if code.code_line and not was_code:
                        self._code_block(cur)  # this line turned out to open a fence
                    cur.insertText(part, self._token_format(m, mark, t.index, t.round, code.code_line))

    def _write_markdown(self, cur: QTextCursor, m: Message) -> None:
        start = cur.position()
        cur.insertMarkdown(m.text)
        end = cur.position()
        block = self.document().findBlock(start)
        while block.isValid() and block.position() <= end:
            if block.blockFormat().hasProperty(QTextFormat.Property.BlockCodeFence):
                c = QTextCursor(block)
                self._code_block(c)
            block = block.next()
        cur.setPosition(end)

    # -- reading back ------------------------------------------------------------------
    def token_fragments(self) -> Iterator[TokenFragment]:
        """Every reply fragment with its mark, in document order (tests and exports read this)."""
        block = self.document().begin()
        while block.isValid():
            it = block.begin()
            while not it.atEnd():
                frag = it.fragment()
                fmt = frag.charFormat()
                if fmt.hasProperty(PROP_MARK):
                    yield TokenFragment(frag.text(), Mark(fmt.property(PROP_MARK)), int(fmt.property(PROP_MESSAGE)),
                                        int(fmt.property(PROP_INDEX)), int(fmt.property(PROP_ROUND)), fmt,
                                        frag.position())
                it += 1
            block = block.next()

    def format_at(self, pos: QPointF) -> QTextCharFormat | None:
        """The character format under a viewport point, or None off the text."""
        doc_pos = QPointF(pos.x() + self.horizontalScrollBar().value(), pos.y() + self.verticalScrollBar().value())
        hit = self.document().documentLayout().hitTest(doc_pos, Qt.HitTestAccuracy.ExactHit)
        if hit < 0:
            return None
        cur = QTextCursor(self.document())
        cur.setPosition(hit + 1)  # charFormat() is the format of the character before the cursor
        return cur.charFormat()

    def tooltip_for(self, fmt: QTextCharFormat) -> str | None:
        if not fmt.hasProperty(PROP_MARK):
            return None
        m = self._by_id.get(int(fmt.property(PROP_MESSAGE)))
        if m is None:
            return None
        mark = Mark(fmt.property(PROP_MARK))
        index, round_ = int(fmt.property(PROP_INDEX)), int(fmt.property(PROP_ROUND))
        r = m.rounds.get(round_)
        lines = [f"<b>{LABELS[mark]}</b> · round {round_}", f"<i>{html.escape(EXPLANATIONS[mark])}</i>"]
        if 0 <= index < len(m.tokens):
            t = m.tokens[index]
            lines.append(f"token {_quote(t.text)} (id {t.token_id}), position {t.index + 1} in the reply")
            probs = [f"target p = {t.p:.3f}" if t.p is not None else "target p = –"]
            probs.append(f"drafter q = {t.q:.3f}" if t.q is not None else "drafter q = – (not drafted)")
            lines.append(" · ".join(probs))
            if t.margin is not None:
                near = " (a near tie)" if t.margin < 0.25 else ""
                lines.append(f"the target's runner-up was {t.margin:.2f} logits behind{near}")
        if r is not None:
            if r.drafted_text:
                parts = []
                for i, text in enumerate(r.drafted_text):
                    q = _quote(text)
                    parts.append(f"✓{q}" if i < r.accepted else f"<s>✗{q}</s>")
                lines.append(f"round {round_} draft ({r.drafter}, k={r.k}): " + " ".join(parts))
                lines.append(f"kept {r.accepted} of {len(r.drafted_text)} · emitted {r.emitted}")
            else:
                lines.append(f"round {round_}: no draft (plain decoding)")
            lines.append(f"drafting {r.draft_s * 1000:.1f} ms · verifying {r.verify_s * 1000:.1f} ms")
        return "<br>".join(lines)

    def viewportEvent(self, e: QEvent) -> bool:
        if e.type() == QEvent.Type.ToolTip:
            fmt = self.format_at(QPointF(e.pos()))
            tip = self.tooltip_for(fmt) if fmt is not None else None
            if tip:
                QToolTip.showText(e.globalPos(), tip, self)
            else:
                QToolTip.hideText()
                e.ignore()
            return True
        return super().viewportEvent(e)

    # -- scrolling -----------------------------------------------------------------------
    def _at_bottom(self) -> bool:
        sb = self.verticalScrollBar()
        return sb.value() >= sb.maximum() - 8

    def _scroll_to_end(self) -> None:
        sb = self.verticalScrollBar()
        sb.setValue(sb.maximum())


def _quote(text: str) -> str:
    shown = text.replace("\n", "⏎").replace("\t", "⇥")
    return f"“{html.escape(shown)}”"
