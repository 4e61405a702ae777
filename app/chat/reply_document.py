"""Writing rendered Markdown blocks into the chat's QTextDocument, keeping each character's token.

Formats are shared: one QTextCharFormat per (block look, inline style, code token type, link, mark),
never one per token, so Qt's format table stays small and neighbouring characters that look alike go
in with one insertText. Which token each character came from lives beside the document, in a
Provenance table per message (runs of document offsets -> token index), searched with bisect.
"""
from __future__ import annotations

from bisect import bisect_right
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from PySide6.QtCore import Qt
from PySide6.QtGui import (QColor, QFont, QTextBlockFormat, QTextCharFormat, QTextCursor, QTextFormat,
                           QTextFrameFormat, QTextLength, QTextListFormat,
                           QTextTableFormat)
from pygments.styles import get_style_by_name
from pygments.token import string_to_tokentype

from engine.decoding.events import RoundEvent, TokenEvent, TokenSource

from app.chat.app_links import LinkKind, href as app_href
from app.chat.markdown_spans import LINE_BREAK, Block, Kind, Style
from app.core.theme import Mark, TokenColours, mark_format, readable
from app.history.reply_stats import Tone

_MARK_OF = {s: Mark.of(s) for s in TokenSource}
_HEADING_SCALE = {1: 1.5, 2: 1.3, 3: 1.15, 4: 1.05, 5: 1.0, 6: 1.0}
_LIGHT_CODE_STYLE, _DARK_CODE_STYLE = "xcode", "github-dark"  # both >= 4.5:1 on the themes' code background
INDENT = 22
"""Pixels per list or quote level."""
THOUGHT = 1 << 16
"""A style bit beside markdown_spans.Style: the text is a reply's thinking (muted, indented)."""


def utf16_len(text: str) -> int:
    """Length in Qt document positions (UTF-16 code units)."""
    return len(text) if text.isascii() else len(text.encode("utf-16-le")) // 2


def is_dark(colours: TokenColours) -> bool:
    return QColor(colours.code_bg).lightnessF() < 0.5


def blend(fg: str, bg: QColor, alpha: float) -> QColor:
    f = QColor(fg)
    return QColor.fromRgbF(f.redF() * alpha + bg.redF() * (1 - alpha), f.greenF() * alpha + bg.greenF() * (1 - alpha),
                           f.blueF() * alpha + bg.blueF() * (1 - alpha))


class Provenance:
    """Runs of one message's document text and the token each came from, in document order.

    Offsets count from the message's first position, so the table survives text inserted above it.
    index -1 marks a rejected draft shown before its correction (round says which round rejected it).
    """

    __slots__ = ("starts", "ends", "index", "round")

    def __init__(self) -> None:
        self.starts: list[int] = []
        self.ends: list[int] = []
        self.index: list[int] = []
        self.round: list[int] = []

    def __len__(self) -> int:
        return len(self.starts)

    def truncate(self, n: int) -> None:
        for lst in (self.starts, self.ends, self.index, self.round):
            del lst[n:]

    def find(self, offset: int) -> int:
        """The run holding the character at `offset`, or -1."""
        k = bisect_right(self.starts, offset) - 1
        return k if k >= 0 and offset < self.ends[k] else -1


@dataclass(frozen=True, slots=True)
class Look:
    """What decides the formats: the view options and the widget's font and link colour."""

    colours: TokenColours
    """Theme colours."""
    highlight: bool
    """Mark tokens by source."""
    font: QFont
    """The view's font."""
    link: QColor
    """The palette's link colour."""


class Formats:
    """Shared character formats for one Look."""

    def __init__(self, look: Look) -> None:
        self.look = look
        c = look.colours
        self.cache: dict[tuple, QTextCharFormat] = {}
        """Formats made so far by their get() key (the writer's per-piece loop reads it directly)."""
        self._marks = {m: mark_format(m, c, look.highlight) for m in Mark}
        style = get_style_by_name(_DARK_CODE_STYLE if is_dark(c) else _LIGHT_CODE_STYLE)
        self._code_style = style
        self._code_kinds: dict[str, dict] = {}
        size = look.font.pointSizeF()
        self._size = size if size > 0 else 10.0
        self.plain = QTextCharFormat()
        self.muted = self._muted()
        self.small = self._muted(0.85)
        self.header = self._muted()
        self.header.setFontWeight(QFont.Weight.Bold)
        self.note = self._muted()
        self.note.setFontItalic(True)

    def _muted(self, scale: float = 1.0) -> QTextCharFormat:
        f = QTextCharFormat()
        f.setForeground(QColor(self.look.colours.muted_fg))
        if scale != 1.0:
            f.setFontPointSize(self._size * scale)
        return f

    def link(self, href: str, tip: str = "", scale: float = 0.85) -> QTextCharFormat:
        key = ("link", href, tip, scale)
        f = self.cache.get(key)
        if f is None:
            f = QTextCharFormat()
            f.setAnchor(True)
            f.setAnchorHref(href)
            f.setForeground(self.look.link)
            if scale != 1.0:
                f.setFontPointSize(self._size * scale)
            if tip:
                f.setToolTip(tip)
            self.cache[key] = f
        return f

    def chip(self, tone: Tone, tip: str) -> QTextCharFormat:
        c = self.look.colours
        f = QTextCharFormat(self.small)
        f.setForeground(QColor(c.text_fg))
        bg = {Tone.GOOD: QColor(c.accepted_bg), Tone.BAD: blend(c.correction_fg, QColor(c.page_bg), 0.25)}.get(tone)
        f.setBackground(bg if bg is not None else QColor(c.code_bg))
        f.setToolTip(tip)
        return f

    def rejected(self, block: int, style: int) -> QTextCharFormat:
        return self.get(block, style, None, "", Mark.REJECTED)

    def get(self, block: int, style: int, kind: str | None, href: str, mark: Mark | None) -> QTextCharFormat:
        """block: heading level (1-6), 0 for body text, -1 for code, -2 for a table header cell."""
        key = (block, style, kind, href, mark)
        f = self.cache.get(key)
        if f is not None:
            return f
        f = QTextCharFormat()
        if block > 0:
            f.setFontWeight(QFont.Weight.Bold)
            f.setFontPointSize(self._size * _HEADING_SCALE.get(block, 1.0))
        elif block == -2:
            f.setFontWeight(QFont.Weight.Bold)
        if block == -1 or style & Style.CODE:
            f.setFontFamilies(["monospace"])
            f.setFontFixedPitch(True)
            f.setFontStyleHint(QFont.StyleHint.Monospace)
        if style & Style.CODE:
            f.setBackground(QColor(self.look.colours.code_bg))
        if style & THOUGHT:
            f.setForeground(QColor(self.look.colours.muted_fg))
        if kind is not None:
            d = self._code_kinds.get(kind)
            if d is None:
                d = self._code_kinds[kind] = self._code_style.style_for_token(string_to_tokentype(kind))
            if d["color"]:
                f.setForeground(QColor("#" + d["color"]))
            if d["bold"]:
                f.setFontWeight(QFont.Weight.Bold)
            if d["italic"]:
                f.setFontItalic(True)
        if style & Style.BOLD:
            f.setFontWeight(QFont.Weight.Bold)
        if style & Style.ITALIC:
            f.setFontItalic(True)
        if style & Style.STRIKE:
            f.setFontStrikeOut(True)
        if style & Style.LINK and href:
            f.setAnchor(True)
            f.setAnchorHref(href)
            f.setForeground(self.look.link)
            f.setFontUnderline(True)
            f.setToolTip(href)
        if mark is not None:
            f.merge(self._marks[mark])
            if style & THOUGHT and mark is Mark.ACCEPTED:  # muted text on the draft's shading: keep 4.5:1
                f.setForeground(readable(self.look.colours.muted_fg, self.look.colours.accepted_bg))
        self.cache[key] = f
        return f


@dataclass(frozen=True, slots=True)
class BlockMark:
    """Where a block began in the document, so a streaming reply can be cut back to it."""

    block: Block
    """The block."""
    position: int
    """Document position before it (what to delete from)."""
    fresh: bool
    """The cursor stood in an empty block of ours (after a table): the block went there."""
    runs: int
    """Provenance runs before it."""


class ReplyWriter:
    """Writes one message's blocks at a cursor, recording each character's token in `prov`."""

    def __init__(self, cur: QTextCursor, formats: Formats, origin: int, prov: Provenance,
                 tokens: Sequence[TokenEvent] = (), ends: Sequence[int] = (),
                 rounds: dict[int, RoundEvent] | None = None, show_rejected: bool = False,
                 message_id: int = 0, links: bool = True) -> None:
        self.cur, self.formats, self.origin, self.prov = cur, formats, origin, prov
        self.tokens, self.ends = tokens, ends
        self.message_id, self.links = message_id, links
        self.thought = False
        """What is written now is the reply's thinking (THOUGHT)."""
        self.fresh = False
        self.pos = cur.position()
        self.highlight = formats.look.highlight
        self._lists: dict[int, object] = {}
        self._rejections: list[tuple[int, int, str]] = []
        if show_rejected and rounds:
            for t in tokens:
                if t.source == TokenSource.CORRECTION:
                    r = rounds.get(t.round)
                    if r is not None and r.rejected_text:
                        self._rejections.append((t.index, t.round, "".join(r.rejected_text).replace("\n", "⏎")))
        self._next_rejection = 0
        self._buf: list[str] = []
        self._buf_fmt: QTextCharFormat | None = None
        self._run_fmt: QTextCharFormat | None = None  # format of the last provenance run

    # -- blocks -------------------------------------------------------------------------------------
    def start_block(self, bf: QTextBlockFormat, cf: QTextCharFormat | None = None) -> None:
        self.flush()
        cf = cf or QTextCharFormat()
        if self.fresh:
            self.cur.setBlockFormat(bf)
            self.cur.setBlockCharFormat(cf)
            self.fresh = False
        else:
            self.cur.insertBlock(bf, cf)
        self.pos = self.cur.position()

    def insert(self, text: str, fmt: QTextCharFormat) -> None:
        """Text with no provenance (headers, labels, notes)."""
        if text:
            self.flush()
            self.cur.insertText(text, fmt)
            self.pos += utf16_len(text)

    def skip_rejections_before(self, index: int) -> None:
        """Rejections of corrections before token `index` were shown already (a re-render starts there)."""
        rj = self._rejections
        k = 0
        while k < len(rj) and rj[k][0] < index:
            k += 1
        self._next_rejection = k

    def end_rejections(self) -> None:
        """A finished reply: rejections of corrections that showed nothing after the last character shown."""
        rj = self._rejections
        if self._next_rejection >= len(rj):
            return
        if self.fresh:
            self.start_block(QTextBlockFormat())
        fmt = self.formats.rejected(0, 0)
        for _ix, rnd, rtext in rj[self._next_rejection:]:
            p = self.pos - self.origin
            self.insert(rtext, fmt)
            self.prov.starts.append(p)
            self.prov.ends.append(self.pos - self.origin)
            self.prov.index.append(-1)
            self.prov.round.append(rnd)
        self._next_rejection = len(rj)

    def write(self, blocks: Sequence[Block], on_block: Callable[[BlockMark], None] | None = None) -> None:
        for b in blocks:
            if on_block is not None:
                self.flush()
                on_block(BlockMark(b, self.cur.position(), self.fresh, len(self.prov)))
            kind = b.kind
            if kind == Kind.CODE:
                self._code_line(b)
            elif kind == Kind.TEXT or kind == Kind.HEADING:
                self._text(b)
            elif kind == Kind.CODE_LABEL:
                self._code_label(b)
            elif kind == Kind.TABLE:
                self._table(b)
            elif kind == Kind.RULE:
                bf = self._block_format(b)
                bf.setProperty(QTextFormat.Property.BlockTrailingHorizontalRulerWidth,
                               QTextLength(QTextLength.Type.PercentageLength, 100))
                self.start_block(bf)
                self._listed(b)
        self.flush()

    def _block_format(self, b: Block) -> QTextBlockFormat:
        bf = QTextBlockFormat()
        bf.setLeftMargin(INDENT * (b.quote + (0 if b.item else len(b.lists)) + self.thought))
        return bf

    def _listed(self, b: Block) -> None:
        """Puts the current block in its list when it starts a list item (Qt draws the bullet or number)."""
        if not (b.item and b.lists):
            return
        level = b.lists[-1]
        lst = self._lists.get(level.id)
        if lst is None:
            lf = QTextListFormat()
            depth = len(b.lists)
            if level.ordered:
                lf.setStyle(QTextListFormat.Style.ListDecimal)
                lf.setStart(level.start)
            else:
                lf.setStyle((QTextListFormat.Style.ListDisc, QTextListFormat.Style.ListCircle,
                             QTextListFormat.Style.ListSquare)[(depth - 1) % 3])
            lf.setIndent(depth + self.thought)
            self._lists[level.id] = self.cur.createList(lf)
        else:
            lst.add(self.cur.block())

    def _text(self, b: Block) -> None:
        bf = self._block_format(b)
        if b.kind == Kind.HEADING:
            bf.setHeadingLevel(b.level)
            bf.setTopMargin(10)
            bf.setBottomMargin(4)
            look = b.level
        else:
            bf.setBottomMargin(2 if b.tight else 8)
            look = 0
        self.start_block(bf)
        self._listed(b)
        self._spans(b.spans, look)

    def _code_label(self, b: Block) -> None:
        bf = self._block_format(b)
        bf.setBackground(QColor(self.formats.look.colours.code_bg))
        bf.setTopMargin(2)
        self.start_block(bf)
        self._listed(b)
        self.insert(b.language or "code", self.formats.small)
        if self.links:
            self.insert("   ", self.formats.small)
            self.insert("Copy", self.formats.link(app_href(LinkKind.COPY_CODE, self.message_id, b.code_index),
                                                  "Copy this code block"))

    def _code_line(self, b: Block) -> None:
        bf = self._block_format(b)
        bf.setBackground(QColor(self.formats.look.colours.code_bg))
        if b.last:
            bf.setBottomMargin(8)
        self.start_block(bf)
        self._spans(b.spans, -1)

    def _table(self, b: Block) -> None:
        rows, cols = len(b.cells), max((len(r) for r in b.cells), default=0)
        bf = self._block_format(b)
        self.start_block(bf)
        self._listed(b)
        if not rows or not cols:
            return
        tf = QTextTableFormat()
        tf.setBorder(1)
        tf.setBorderBrush(QColor(self.formats.look.colours.muted_fg))
        tf.setBorderStyle(QTextFrameFormat.BorderStyle.BorderStyle_Solid)
        tf.setBorderCollapse(True)
        tf.setCellPadding(4)
        tf.setCellSpacing(0)
        tf.setHeaderRowCount(b.header_rows)
        tf.setBottomMargin(8)
        tf.setLeftMargin(bf.leftMargin())
        outer = self.cur
        table = outer.insertTable(rows, cols, tf)
        align = {"left": Qt.AlignmentFlag.AlignLeft, "center": Qt.AlignmentFlag.AlignHCenter,
                 "right": Qt.AlignmentFlag.AlignRight}
        for r, row in enumerate(b.cells):
            for c, cell in enumerate(row):
                self.cur = table.cellAt(r, c).firstCursorPosition()
                a = align.get(b.aligns[c] if c < len(b.aligns) else "")
                if a is not None:
                    cbf = self.cur.blockFormat()
                    cbf.setAlignment(a)
                    self.cur.setBlockFormat(cbf)
                self.pos = self.cur.position()
                self._spans(cell, -2 if r < b.header_rows else 0)
                self.flush()
        self.cur = outer
        outer.setPosition(table.lastPosition() + 1)
        self.pos = outer.position()
        self.fresh = True

    # -- characters ----------------------------------------------------------------------------------
    def flush(self) -> None:
        if self._buf:
            self.cur.insertText("".join(self._buf), self._buf_fmt)
            self._buf = []

    def _emit(self, text: str, fmt: QTextCharFormat) -> None:
        if fmt is not self._buf_fmt:
            if self._buf:
                self.cur.insertText("".join(self._buf), self._buf_fmt)
                self._buf = []
            self._buf_fmt = fmt
        self._buf.append(text)

    def _spans(self, spans, look: int) -> None:
        # The one loop that runs per token piece (50k on a long chat, again at each view option): state is
        # kept in locals and written back at the end, formats come from the cache without a call, and
        # text goes to Qt in runs of one format, as _emit would send it.
        get = self.formats.get
        cache = self.formats.cache
        ends, tokens = self.ends, self.tokens
        n_tokens = len(ends)
        prov = self.prov
        starts_, ends_, index_, round_ = prov.starts, prov.ends, prov.index, prov.round
        origin = self.origin
        rj = self._rejections
        highlight = self.highlight
        insert = self.cur.insertText
        buf, buf_fmt, run_fmt = self._buf, self._buf_fmt, self._run_fmt
        at_doc = self.pos - origin  # document offset from the message's start
        thought = THOUGHT if self.thought else 0
        for text, src, style, href, kind in spans:
            style |= thought
            plain = cache.get((look, style, kind, href, None))
            if plain is None:
                plain = get(look, style, kind, href, None)
            n = len(text)
            i = bisect_right(ends, src) if n_tokens and text != LINE_BREAK else n_tokens
            at = 0
            while at < n:
                if i >= n_tokens:  # no token: a line break in a paragraph, text past the tokens (a reply's final text)
                    piece, t, fmt = text[at:] if at else text, None, plain
                    at = n
                else:
                    take = ends[i] - src - at
                    if take <= 0:  # an empty token
                        i += 1
                        continue
                    piece = text[at:at + take] if (at or take < n) else text
                    at += take
                    t = tokens[i]
                    if rj and self._next_rejection < len(rj) and rj[self._next_rejection][0] <= i:
                        self._buf, self._buf_fmt, self.pos = buf, buf_fmt, origin + at_doc
                        self._rejections_before(i, look, style, kind, href)
                        buf, buf_fmt, at_doc = self._buf, self._buf_fmt, self.pos - origin
                    # Whitespace-only pieces carry no mark: no shaded staircase at the left edge of code.
                    if highlight and not piece.isspace():
                        mark = _MARK_OF[t.source]
                        fmt = cache.get((look, style, kind, href, mark))
                        if fmt is None:
                            fmt = get(look, style, kind, href, mark)
                    else:
                        fmt = plain
                if fmt is not buf_fmt:
                    if buf:
                        insert("".join(buf), buf_fmt)
                        buf = []
                    buf_fmt = fmt
                buf.append(piece)
                p = at_doc
                at_doc += len(piece) if piece.isascii() else utf16_len(piece)
                if t is None:
                    continue
                if fmt is run_fmt and index_ and index_[-1] == i and ends_[-1] == p:
                    ends_[-1] = at_doc  # the same token, looking the same: one run
                else:
                    starts_.append(p)
                    ends_.append(at_doc)
                    index_.append(i)
                    round_.append(t.round)
                    run_fmt = fmt
                i += 1
        self._buf, self._buf_fmt, self._run_fmt, self.pos = buf, buf_fmt, run_fmt, origin + at_doc

    def _rejections_before(self, i: int, look: int, style: int, kind: str | None, href: str) -> None:
        """Rejected drafts of the corrections up to token `i`, each before its correction's first character."""
        rj = self._rejections
        prov = self.prov
        fmt = self.formats.get(look, style, kind, href, Mark.REJECTED)
        while self._next_rejection < len(rj) and rj[self._next_rejection][0] <= i:
            _ix, rnd, rtext = rj[self._next_rejection]
            self._next_rejection += 1
            self._emit(rtext, fmt)
            p = self.pos - self.origin
            self.pos += utf16_len(rtext)
            prov.starts.append(p)
            prov.ends.append(self.pos - self.origin)
            prov.index.append(-1)
            prov.round.append(rnd)
