"""Reply Markdown -> blocks of styled spans, each span tied to the source characters it shows (no Qt).

markdown-it-py parses (CommonMark + tables + strikethrough). Block tokens carry line ranges and inline
tokens their content, so every shown character is found back in the source: each line of an inline
token's content is located in its source line, and each child's text in that content, walking left to
right. A span's text[i] is source[span.source + i] (a one-character entity or escape points at itself).
Markup that is not shown (`**`, fence lines, `- `, `|`) simply yields no span. Code blocks are lexed
by Pygments; each code span keeps its token type for colouring.

`parse` can start at any top-level block boundary, with absolute offsets, so a streaming reply is
re-parsed only from its last block; `tops` says where top-level blocks start for that purpose.
"""
from __future__ import annotations

from bisect import bisect_right
from dataclasses import dataclass, field
from enum import Enum, IntFlag
from functools import lru_cache

from markdown_it import MarkdownIt
from pygments.lexers import get_lexer_by_name
from pygments.token import Text
from pygments.util import ClassNotFound

LINE_BREAK = "\u2028"
"""What a soft or hard line break inside a paragraph shows as (a line break within the block)."""

_MD = MarkdownIt("commonmark").enable(["table", "strikethrough"]).disable("text_join")  # keep escapes apart
#: Blocks nest this deep before markdown-it drops what is inside (commonmark's preset stops at 20,
#: which a reply of 20 nested quotes reaches); deeper still is dropped, never raised.
MAX_NESTING = 60
_MD.options["maxNesting"] = MAX_NESTING
#: markdown-it pads every row of a table to its header's width: a reply with a 300-column header
#: and 200 short lines became 65,700 cells and a second of parsing on every redraw. Past this many
#: (columns x lines) a reply's tables read as text.
MAX_TABLE_CELLS = 20_000
_MD_NO_TABLES = MarkdownIt("commonmark").enable(["strikethrough"]).disable("text_join")
_MD_NO_TABLES.options["maxNesting"] = MAX_NESTING


def _parser(text: str) -> MarkdownIt:
    """The parser for `text`: without tables when they could cost more than MAX_TABLE_CELLS."""
    if "|" not in text:
        return _MD
    lines = text.count("\n") + 1
    widest = max(line.count("|") for line in text.splitlines() if "-" in line) if "-" in text else 0
    return _MD_NO_TABLES if (widest + 1) * lines > MAX_TABLE_CELLS else _MD


class Style(IntFlag):
    """Inline styling of a span."""

    NONE = 0
    BOLD = 1
    ITALIC = 2
    STRIKE = 4
    CODE = 8
    """Inline code."""
    LINK = 16


class Kind(Enum):
    """What a block is."""

    TEXT = "text"
    """A paragraph (also inside lists and quotes), or raw HTML shown as text."""
    HEADING = "heading"
    CODE_LABEL = "code_label"
    """The line above a code block: its language and a copy link."""
    CODE = "code"
    """One line of a code block."""
    TABLE = "table"
    RULE = "rule"


Span = tuple[str, int, int, str, str | None]
"""Shown text and where it comes from: (text, source, style, href, kind).

- text: characters to show; LINE_BREAK for a break inside a paragraph;
- source: source offset of text[0];
- style: Style flags as an int;
- href: link target (Style.LINK), else '';
- kind: Pygments token type name of code-block text ('Token.Keyword'), else None.

A plain tuple of strings and ints, built by `_span`: a long chat holds ~100k of them, a dataclass or
NamedTuple costs more to build, and Python's garbage collector stops tracking exact tuples of atoms, so
they add nothing to the pauses of its full collections."""


def _span(text: str, source: int, style: int = 0, href: str = "", kind: str | None = None) -> Span:
    return (text, source, style, href, kind)


@dataclass(frozen=True, slots=True)
class ListLevel:
    """One enclosing list."""

    id: int
    """Distinct per list within one parse."""
    ordered: bool
    """Numbered."""
    start: int
    """First number."""


@dataclass(slots=True)
class Block:
    """One block of the rendered reply (a paragraph, a heading, one code line, a table, a rule); not changed
    once parsed (not frozen: a long reply has thousands and frozen construction is slow)."""

    kind: Kind
    """What it is."""
    top: int
    """Source offset of the line where its top-level block starts."""
    spans: tuple[Span, ...] = ()
    """Its text (not TABLE)."""
    level: int = 0
    """Heading level."""
    lists: tuple[ListLevel, ...] = ()
    """Enclosing lists, outermost first."""
    item: bool = False
    """First block of a list item: it shows the bullet."""
    tight: bool = False
    """Inside a tight list: no paragraph spacing."""
    quote: int = 0
    """Block quote depth."""
    language: str = ""
    """Code blocks: the fence's language."""
    code_index: int = -1
    """Code blocks: which code block of the reply (from 0)."""
    line: int = -1
    """Code blocks: line number inside the block (from 0)."""
    last: bool = False
    """Code blocks: the block's last line."""
    restart: bool = False
    """Code blocks: the line before ended outside any string or comment (lexing may restart here)."""
    cells: tuple[tuple[tuple[Span, ...], ...], ...] = ()
    """Tables: rows of cells."""
    header_rows: int = 0
    """Tables: rows in the header."""
    aligns: tuple[str, ...] = ()
    """Tables: 'left', 'center', 'right' or '' per column."""


@dataclass(slots=True)
class Parsed:
    """`parse`'s result."""

    blocks: list[Block] = field(default_factory=list)
    """Blocks in source order."""
    tops: list[int] = field(default_factory=list)
    """Source offsets where top-level blocks start, in order."""
    code_blocks: int = 0
    """Code blocks seen (the next code_index)."""


def parse(source: str, start: int = 0, code_index: int = 0, skip_code_lines: int = 0) -> Parsed:
    """Blocks of source[start:] (start at a line start) with absolute offsets.

    code_index numbers the first code block met; skip_code_lines leaves out (and does not lex) the first
    lines of a code block that begins at `start`: a streaming reply re-renders a long open fence from a
    line where lexing can restart rather than from its top.
    """
    text = source[start:] if start else source
    lines = _line_starts(text)
    out = Parsed(code_blocks=code_index)
    walker = _Walker(text, lines, start, out, skip_code_lines)
    walker.walk(_parser(text).parse(text))
    return out


def code_sources(source: str) -> list[str]:
    """The source text of each code block, in order (what 'Copy' of a code block copies)."""
    return [t.content for t in _parser(source).parse(source) if t.type in ("fence", "code_block")]


def _line_starts(text: str) -> list[int]:
    starts = [0]
    find = text.find
    i = find("\n")
    while i >= 0:
        starts.append(i + 1)
        i = find("\n", i + 1)
    return starts


class _Walker:
    """One pass over markdown-it's token stream."""

    def __init__(self, text: str, lines: list[int], base: int, out: Parsed, skip_code_lines: int) -> None:
        self.text, self.lines, self.base, self.out = text, lines, base, out
        self.skip = skip_code_lines
        self.cols: dict[int, int] = {}  # source line -> column already matched (table cells share a line)
        self.lists: list[ListLevel] = []
        self.list_ids = 0
        self.item = False
        self.quote = 0
        self.top = base
        self.tight = False
        self.heading = 0
        self.table: list[list[tuple[Span, ...]]] | None = None
        self.aligns: list[str] = []
        self.header_rows = 0

    def line_text(self, n: int) -> tuple[int, str]:
        lines = self.lines
        if n >= len(lines):
            return len(self.text), ""
        s = lines[n]
        e = lines[n + 1] - 1 if n + 1 < len(lines) else len(self.text)
        return s, self.text[s:e]

    def emit(self, block: Block) -> None:
        self.out.blocks.append(block)

    def walk(self, tokens: list) -> None:
        for tok in tokens:
            ty = tok.type
            if tok.level == 0 and tok.map is not None and not ty.endswith("_close"):
                self.top = self.base + self.lines[min(tok.map[0], len(self.lines) - 1)]
                self.out.tops.append(self.top)
            if ty == "inline":
                spans = tuple(self.inline(tok))
                if self.table is not None:
                    self.table[-1].append(spans)
                elif self.heading:
                    self.emit(Block(Kind.HEADING, self.top, spans, level=self.heading, quote=self.quote,
                                    lists=tuple(self.lists), item=self._take_item()))
                else:
                    self.emit(Block(Kind.TEXT, self.top, spans, lists=tuple(self.lists), item=self._take_item(),
                                    tight=self.tight, quote=self.quote))
            elif ty == "paragraph_open":
                self.tight = bool(tok.hidden)
            elif ty == "heading_open":
                self.heading = int(tok.tag[1:])
            elif ty == "heading_close":
                self.heading = 0
            elif ty in ("bullet_list_open", "ordered_list_open"):
                self.list_ids += 1
                start = tok.attrGet("start")
                self.lists.append(ListLevel(self.list_ids, ty == "ordered_list_open", int(start) if start else 1))
            elif ty in ("bullet_list_close", "ordered_list_close"):
                self.lists.pop()
            elif ty == "list_item_open":
                self.item = True
            elif ty == "list_item_close" and self.item:  # an empty item still shows its bullet
                self.emit(Block(Kind.TEXT, self.top, (), lists=tuple(self.lists), item=self._take_item(), tight=True,
                                quote=self.quote))
            elif ty == "blockquote_open":
                self.quote += 1
            elif ty == "blockquote_close":
                self.quote -= 1
            elif ty in ("fence", "code_block"):
                self.code(tok)
            elif ty == "hr":
                self.emit(Block(Kind.RULE, self.top, lists=tuple(self.lists), quote=self.quote, item=self._take_item()))
            elif ty == "html_block":
                self.html_block(tok)
            elif ty == "table_open":
                self.table, self.aligns, self.header_rows = [], [], 0
            elif ty == "tr_open":
                assert self.table is not None
                self.table.append([])
            elif ty == "thead_close":
                self.header_rows = len(self.table or ())
            elif ty in ("th_open", "td_open") and self.table is not None and len(self.table) == 1:
                style = tok.attrGet("style") or ""
                self.aligns.append(style.partition(":")[2])
            elif ty == "table_close" and self.table is not None:
                cols = max((len(r) for r in self.table), default=0)
                rows = tuple(tuple(r) + ((),) * (cols - len(r)) for r in self.table)
                self.emit(Block(Kind.TABLE, self.top, cells=rows, header_rows=self.header_rows,
                                aligns=tuple(self.aligns) + ("",) * (cols - len(self.aligns)),
                                lists=tuple(self.lists), quote=self.quote, item=self._take_item()))
                self.table = None

    def _take_item(self) -> bool:
        item, self.item = self.item, False
        return item

    # -- inline --------------------------------------------------------------------------------
    def content_map(self, tok, content: str, first_line: int) -> tuple[list[int], list[int]]:
        """Where each line of an inline or code token's content starts, in the content and in the source."""
        starts, bases = [], []
        at = 0
        for j, piece in enumerate(content.split("\n")):
            n = first_line + j
            line_start, line = self.line_text(n)
            col = line.find(piece, self.cols.get(n, 0)) if piece else self.cols.get(n, 0)
            if col < 0:
                col = line.find(piece)
                col = max(col, 0)
            self.cols[n] = col + len(piece)
            starts.append(at)
            bases.append(self.base + line_start + col)
            at += len(piece) + 1
        return starts, bases

    def inline(self, tok) -> list[Span]:
        content: str = tok.content
        starts, bases = self.content_map(tok, content, tok.map[0] if tok.map else 0)
        one_line = len(starts) == 1
        base0 = bases[0]

        def src(ci: int) -> int:
            if one_line:
                return base0 + ci
            j = bisect_right(starts, ci) - 1
            return bases[j] + ci - starts[j]

        spans: list[Span] = []
        add = spans.append
        style = 0
        href = ""
        hrefs: list[str] = []
        flat = content.replace("\n", " ")  # code spans show line endings as spaces
        c = 0
        for ch in tok.children or ():
            ty = ch.type
            if ty in ("text", "html_inline"):
                s = ch.content
                if not s:
                    continue
                i = content.find(s, c)
                if i < 0:
                    i = c
                add(_span(s, src(i), style, href))
                c = i + len(s)
            elif ty == "text_special":
                i = content.find(ch.markup, c)
                if i < 0:
                    i = c
                add(_span(ch.content, src(i + 1 if ch.info == "escape" else i), style, href))
                c = i + len(ch.markup)
            elif ty == "code_inline":
                c = _skip(content, c, ch.markup)
                s = ch.content
                i = flat.find(s, c)
                if i < 0:
                    i = c
                for at, piece in _split_keep(content[i:i + len(s)], s):
                    if piece:
                        add(_span(piece, src(i + at), style | _CODE, href))
                c = _skip(content, i + len(s), ch.markup)
            elif ty in ("softbreak", "hardbreak"):
                i = content.find("\n", c)
                if i < 0:
                    i = c
                add(_span(LINE_BREAK, src(i), style, href))
                c = i + 1
            elif ty in ("strong_open", "em_open", "s_open"):
                style |= _STYLE_OF[ty]
                c = _skip(content, c, ch.markup)
            elif ty in ("strong_close", "em_close", "s_close"):
                style &= ~_STYLE_OF[ty]
                c = _skip(content, c, ch.markup)
            elif ty == "link_open":
                hrefs.append(href)
                href = ch.attrGet("href") or ""
                style |= _LINK
                c = _skip(content, c, "<" if ch.markup == "autolink" else "[")
            elif ty == "link_close":
                href = hrefs.pop() if hrefs else ""
                if not href:  # links do not nest, but a stray close must not leave the style on
                    style &= ~_LINK
                c = _skip(content, c, ">") if ch.markup == "autolink" else _skip_link_tail(content, c)
            elif ty == "image":
                alt = ch.content
                i = content.find(alt, c) if alt else -1
                if alt and i >= 0:
                    add(_span(alt, src(i), style | _ITALIC, href))
                    c = _skip_link_tail(content, i + len(alt))
        return spans

    # -- blocks ----------------------------------------------------------------------------------
    def code(self, tok) -> None:
        index = self.out.code_blocks
        self.out.code_blocks += 1
        content: str = tok.content
        if content.endswith("\n"):
            content = content[:-1]
        language = tok.info.split()[0] if tok.type == "fence" and tok.info and tok.info.strip() else ""
        first = tok.map[0] + (1 if tok.type == "fence" else 0)
        lists, quote, item = tuple(self.lists), self.quote, self._take_item()
        skip = self.skip if self.top == self.base else 0
        self.skip = 0
        if not skip:
            self.emit(Block(Kind.CODE_LABEL, self.top, language=language, code_index=index, lists=lists, quote=quote,
                            item=item))
        _starts, bases = self.content_map(tok, content, first)
        code_lines = content.split("\n")
        if skip >= len(code_lines):
            skip = 0
        lexed = _lex(language, "\n".join(code_lines[skip:]))
        top = self.top
        last = len(code_lines) - 1
        for j, (parts, restart) in enumerate(lexed, start=skip):
            base = bases[j]
            spans = []
            col = 0
            for kind, value in parts:
                spans.append(_span(value, base + col, 0, "", kind))
                col += len(value)
            self.emit(Block(Kind.CODE, top, tuple(spans), language=language, code_index=index, line=j, last=j == last,
                            restart=restart, lists=lists, quote=quote))

    def html_block(self, tok) -> None:
        content: str = tok.content.rstrip("\n")
        _starts, bases = self.content_map(tok, content, tok.map[0])
        spans = []
        for j, line in enumerate(content.split("\n")):
            if j:
                spans.append(_span(LINE_BREAK, bases[j] - 1))
            if line:
                spans.append(_span(line, bases[j]))
        self.emit(Block(Kind.TEXT, self.top, tuple(spans), lists=tuple(self.lists), item=self._take_item(),
                        quote=self.quote))


_CODE, _LINK, _ITALIC = int(Style.CODE), int(Style.LINK), int(Style.ITALIC)
_STYLE_OF = {"strong_open": int(Style.BOLD), "strong_close": int(Style.BOLD), "em_open": _ITALIC, "em_close": _ITALIC,
             "s_open": int(Style.STRIKE), "s_close": int(Style.STRIKE)}


def _skip(content: str, c: int, markup: str) -> int:
    """Past `markup` if it comes next (whitespace never separates markup from what it marks)."""
    return c + len(markup) if markup and content.startswith(markup, c) else c


def _skip_link_tail(content: str, c: int) -> int:
    """Past the `](destination "title")`, `][label]` or `]` that closes a link or image."""
    if not content.startswith("]", c):
        return c
    c += 1
    if content.startswith("(", c):
        depth, i, n = 0, c, len(content)
        quote = ""
        while i < n:
            ch = content[i]
            if ch == "\\":
                i += 2
                continue
            if quote:
                if ch == quote:
                    quote = ""
            elif ch in "\"'" and depth == 1:
                quote = ch
            elif ch == "(":
                depth += 1
            elif ch == ")":
                depth -= 1
                if depth == 0:
                    return i + 1
            i += 1
        return c
    if content.startswith("[", c):
        end = content.find("]", c)
        return end + 1 if end >= 0 else c
    return c


def _split_keep(raw: str, shown: str) -> list[tuple[int, str]]:
    """Inline code's shown text cut at the source's line ends: (offset, piece) pairs, the line end shown as a space
    belonging to the piece before it."""
    if "\n" not in raw:
        return [(0, shown)]
    out, at = [], 0
    for line in raw.split("\n"):
        end = min(at + len(line) + 1, len(shown))
        out.append((at, shown[at:end]))
        at = end
    return out


@lru_cache(maxsize=None)
def _kind_name(kind) -> str:
    return str(kind)


@lru_cache(maxsize=64)
def _lexer(language: str):
    if not language:
        return None
    try:
        return get_lexer_by_name(language.lower(), stripnl=False, stripall=False, ensurenl=False)
    except ClassNotFound:
        return None


def _lex(language: str, code: str) -> list[tuple[list[tuple[str | None, str]], bool]]:
    """Per code line: (token type name, text) parts, and whether the line before ended outside strings and
    comments."""
    lexer = _lexer(language)
    lines: list[tuple[list[tuple[str | None, str]], bool]] = []
    parts: list[tuple[str | None, str]] = []
    restart = True
    if lexer is not None:
        total = 0
        for _i, kind, value in lexer.get_tokens_unprocessed(code):
            total += len(value)
            name = _kind_name(kind)
            if "\n" not in value:
                if value:
                    parts.append((name, value))
                continue
            pieces = value.split("\n")
            for k, piece in enumerate(pieces):
                if k:
                    lines.append((parts, restart))
                    parts = []
                    restart = kind in Text
                if piece:
                    parts.append((name, piece))
        lines.append((parts, restart))
        if total == len(code):
            return lines
    # No lexer for the language (or one that does not give back its input): plain lines.
    return [([(None, line)] if line else [], True) for line in code.split("\n")]
