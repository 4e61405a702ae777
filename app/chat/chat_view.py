"""The conversation as one document: Markdown rendered live, every character tied to its token.

Why one QTextDocument (a QTextBrowser) for the whole chat and not a widget per message: selection and
copy run across messages, Ctrl+F is QTextDocument.find, and Qt lays out only what is on screen; a
widget per message costs a layout per message on every resize and stops a selection at its edge.
Messages are still units: each is a header (who, pair, k or Auto, sampling, "‹ 2 / 3 ›"), a body and,
once finished, a footer (speed, acceptance, the verdict as a chip, time, action links). The view keeps
each message's document range and a Provenance table (document offset runs -> token index) beside the
document, rather than a character format per token, so formats stay few and shared.

markdown_spans parses (markdown-it-py, Pygments); reply_document writes with shared formats;
message_frame writes headers and footers; live_reply keeps a streaming reply, re-rendered only from
the start of its last top-level block (in a long open code fence, from a line where lexing can
restart), each time the reply says it changed (app.control.streaming_reply; how often is the one
throttle's, in app.control.replies, which spaces its ticks by what they cost). Opening a long chat
renders the last messages at once and the older ones above them in slices of ~10-30 ms, so the
event loop never waits long;
parsed blocks are kept per message, so a view option does not parse again.
"""
from __future__ import annotations

import gc
import time
from collections.abc import Sequence
from dataclasses import dataclass

from PySide6.QtCore import Qt, QTimer, Signal
from PySide6.QtGui import (QFont, QGuiApplication, QKeyEvent, QPalette,
                           QTextBlockFormat, QTextCursor)
from PySide6.QtWidgets import QMenu, QTextBrowser, QWidget

from engine.decoding.events import TokenEvent

from app.chat import app_links
from app.chat.app_links import LinkKind
from app.chat.live_reply import LiveReply, ShownMessage
from app.chat.markdown_spans import LINE_BREAK, Block, parse
from app.chat.message_frame import write_attachments, write_end, write_header, write_thinking_toggle
from app.chat.reply_document import INDENT, Formats, Look, Provenance, ReplyWriter
from app.chat.thinking import THINKING_CODE, Phase, drawing, first_answer_token, parts_of, thinks, toggle_label
from app.chat.view_actions import ViewActions
from app.chat.view_navigation import ViewNavigation
from app.chat.view_reading import ViewReading, message_source
from app.core.theme import LIGHT_COLOURS, TokenColours
from app.history.records import Message, Role

TAIL_CHARS = 3000
"""Opening a chat renders at once the last messages up to about this much text; older ones follow."""
SLICE_S = 0.012
"""Time spent per slice of rendering older messages before the event loop gets a turn (plus one step)."""


@dataclass(frozen=True, slots=True)
class ViewOptions:
    """How replies are drawn."""

    colours: TokenColours = LIGHT_COLOURS
    """Theme colours."""
    highlight: bool = True
    """Mark tokens by source."""
    show_rejected: bool = False
    """Insert rejected draft tokens, struck through, before each correction."""
    actions: bool = True
    """Show the messages' action links (copy, regenerate, edit, delete, alternatives)."""


def _out_of_the_collectors_sight() -> None:
    """Called after each slice of drawing older messages: what was made for them lives as long as the chat is shown.

    A stored reply makes its token events as the view draws it (StoredReply), so they are born after the chat
    opened (when app.control.conversations froze what it had read). Left to the cyclic collector, each full
    pass walks all those not frozen: as they pile up over the slices, a pass took up to 39 ms under load on the
    50k-token chat (before lazy reading, up to 220 ms); once each slice freezes what it made, the longest pass
    is a young generation's (9 ms under the same load). None of them is in a cycle; the youngest generation is
    collected first so that the slice's own cyclic garbage is not frozen with them (none was found frozen after
    opening the 50k-token chat three times and toggling twice)."""
    gc.collect(0)
    gc.freeze()


class ChatView(ViewReading, ViewNavigation, ViewActions, QTextBrowser):
    """Read-only view of one conversation; GUI thread only. This class renders (the whole chat in slices,
    the streaming reply) and handles links; reading back is ViewReading's, moving about ViewNavigation's."""

    action_requested = Signal(str, int)
    """(MessageAction value, message id): a message's action link was used."""
    copied = Signal(str)
    """Text was put on the clipboard: 'message' or 'code'."""
    link_refused = Signal(str)
    """A link in a message that is neither http, https nor mailto was clicked (it opens nothing)."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setOpenLinks(False)  # action and copy links are handled here; web links go to the browser
        self.anchorClicked.connect(self._on_anchor)
        self.setUndoRedoEnabled(False)
        self.setTextInteractionFlags(Qt.TextInteractionFlag.TextBrowserInteraction
                                     | Qt.TextInteractionFlag.TextSelectableByKeyboard)
        self.setAccessibleName("Conversation")
        self.setAccessibleDescription("Messages and replies; Ctrl+Up and Ctrl+Down move between messages, Tab to "
                                      "a message's links, the menu key or Shift+F10 lists its actions")
        doc = self.document()
        doc.setDocumentMargin(14)
        doc.setIndentWidth(INDENT)
        self.setMouseTracking(True)
        self.options = ViewOptions()
        self.messages: list[Message] = []
        self._shown: list[ShownMessage] = []
        self._by_id: dict[int, ShownMessage] = {}
        self._pending: list[Message] = []  # older messages not rendered yet, newest first (pop() is the oldest)
        self._older_shown = 0  # of them, how many are in (at the top of self._shown)
        self._live: LiveReply | None = None
        self._blocks: dict[int, tuple[tuple[int, int], list[Block]]] = {}  # id -> ((source length, start), blocks)
        self._thoughts: dict[int, tuple[tuple[int, int, int], list[Block]]] = {}  # the same for replies' thinking
        self._expanded: set[int] = set()  # replies whose thinking is shown
        self._by_key = False  # inside a key press (a link activated by Enter)
        self._sources: dict[int, tuple[list[TokenEvent], int, str, list[int]]] = {}  # see _source_of
        self._formats: Formats | None = None
        self._pending_timer = QTimer(self, singleShot=True, interval=0, timeout=self._render_pending)
        self.actions_menu: QMenu | None = None
        """The last menu of a message's actions (open while it is shown)."""

    # -- whole document --------------------------------------------------------------------------
    def set_options(self, options: ViewOptions) -> None:
        if options != self.options:
            self.options = options
            self.show_messages(self.messages)

    def show_messages(self, messages: Sequence[Message]) -> None:
        """Draw a conversation: the newest messages now, older ones above them over the next event-loop turns.

        Drawing the same chat again (a view option, an alternative, a deletion) keeps the message at the top
        of the view where it was, unless the view was at the bottom."""
        same_chat = bool(messages and self.messages and messages[0].id == self.messages[0].id)
        anchor = self._top_message() if same_chat and not self._at_bottom() else None
        self._pending_timer.stop()
        self._live = None
        self.messages = list(messages)
        keep = {m.id for m in self.messages}
        self._blocks = {k: v for k, v in self._blocks.items() if k in keep}
        self._thoughts = {k: v for k, v in self._thoughts.items() if k in keep}
        self._sources = {k: v for k, v in self._sources.items() if k in keep}
        self._formats = self._current_formats()
        doc = self.document()
        doc.clear()
        self._shown, self._by_id = [], {}
        size, first = 0, len(self.messages)
        while first > 0 and (first == len(self.messages) or size < TAIL_CHARS):
            first -= 1
            m = self.messages[first]
            size += len(m.content) if m.finished else sum(len(t.text) for t in m.tokens)
        self._pending = self.messages[:first][::-1]
        self._older_shown = 0
        cur = QTextCursor(doc)
        cur.beginEditBlock()
        for i, m in enumerate(self.messages[first:]):
            if i:
                cur.insertBlock()
            last = first + i == len(self.messages) - 1
            self._add(self._write_message(cur, m, live=not m.finished and last,
                                          unanswered=last and m.role == Role.USER, last=last))
        cur.endEditBlock()
        cur.movePosition(QTextCursor.MoveOperation.End)
        self.setTextCursor(cur)
        self._scroll_to_end()
        if anchor is not None:
            self._scroll_to_message(*anchor)
        if self._pending:
            self._pending_timer.start()

    @property
    def complete(self) -> bool:
        """Every message is rendered (the streaming reply's text is drawn as it comes: `reply_changed`)."""
        return not self._pending

    def finish_rendering(self) -> None:
        """Render the older messages still waiting now."""
        while self._pending:
            self._render_pending(budget=float("inf"))

    def _add(self, shown: ShownMessage) -> None:
        self._shown.append(shown)
        self._by_id[shown.message.id] = shown

    def _render_pending(self, budget: float = SLICE_S) -> None:
        """One slice: parse the next older message, or put a parsed one in, until `budget` is spent (each step
        is one message: parsing and Qt's layout of a long reply are the big costs).

        Older messages go in oldest first, each just above the messages drawn at once: Qt then moves only
        those few along, where putting each at the very top would move the whole document every time."""
        if not self._pending:
            return
        at_bottom = self._at_bottom()
        anchor = None if at_bottom else self._top_position()
        doc = self.document()
        cur = QTextCursor(doc)
        t0 = time.perf_counter()
        while self._pending and time.perf_counter() - t0 < budget:
            m = self._pending[-1]
            if m.role == Role.ASSISTANT and m.id not in self._blocks:
                source, ends = self._source_of(m)
                self._blocks_of(m, source, parts_of(m, source, ends).answer)  # parsed in this step, written in the next
                continue
            self._pending.pop()
            k = self._older_shown
            at = self._shown[k].start
            before = doc.characterCount()
            cur.beginEditBlock()
            block = doc.findBlock(at)
            cur.setPosition(at)
            cur.insertBlock(block.blockFormat(), block.charFormat())
            cur.setPosition(at)
            shown = self._write_message(cur, m, live=False)
            cur.endEditBlock()  # Qt lays the new text out here
            delta = doc.characterCount() - before
            for s in self._shown[k:]:
                s.start += delta
            self._shown.insert(k, shown)
            self._by_id[m.id] = shown
            self._older_shown += 1
            if anchor is not None and anchor[0] >= at:
                anchor = (anchor[0] + delta, anchor[1])
        if at_bottom:
            self._scroll_to_end()
        elif anchor is not None:
            pos, y = anchor
            c = QTextCursor(doc)
            c.setPosition(min(pos, doc.characterCount() - 1))
            sb = self.verticalScrollBar()
            sb.setValue(sb.value() + self.cursorRect(c).top() - y)
        _out_of_the_collectors_sight()
        if self._pending:
            self._pending_timer.start()

    # -- one message ---------------------------------------------------------------------------------
    def _current_formats(self) -> Formats:
        pal = QGuiApplication.palette()  # the theme's, set just before set_options (the widget's follows later)
        look = Look(self.options.colours, self.options.highlight, QFont(self.font()),
                    pal.color(QPalette.ColorRole.Link))
        if self._formats is not None and self._formats.look == look:
            return self._formats
        return Formats(look)

    def _writer(self, cur: QTextCursor, shown: ShownMessage, ends: Sequence[int]) -> ReplyWriter:
        m = shown.message
        assert self._formats is not None
        # Rejected drafts only with highlighting: with it off a reply reads as plain text, and a struck-through
        # draft would be the one mark left. Only they need the rounds (a stored reply reads them when asked).
        rejected = self.options.show_rejected and self.options.highlight
        return ReplyWriter(cur, self._formats, shown.start, shown.prov, m.tokens if ends else (), ends,
                           m.rounds if rejected else None, rejected, m.id, self.options.actions)

    def _write_message(self, cur: QTextCursor, m: Message, live: bool, unanswered: bool = False,
                       last: bool = False) -> ShownMessage:
        """Writes `m` into the empty block at the cursor (`unanswered`: a question last on the path, no reply;
        `last`: the path's last message, whose footer may offer Continue)."""
        shown = ShownMessage(m, cur.position(), Provenance())
        source, ends = self._source_of(m)
        w = self._writer(cur, shown, ends)
        w.fresh = True
        write_header(w, m, self.options.actions, unanswered)
        if m.role == Role.USER:
            write_attachments(w, m)
            bf = QTextBlockFormat()
            bf.setBottomMargin(4)
            w.start_block(bf)
            w.insert(m.content.replace("\r\n", "\n").replace("\n", LINE_BREAK), w.formats.plain)
        else:
            self._write_reply(w, shown, source, ends, live)
        w.flush()
        if m.finished or not live:
            write_end(w, m, self.options.actions, last)
        return shown

    def _write_reply(self, w: ReplyWriter, shown: ShownMessage, source: str, ends: list[int], live: bool) -> None:
        """A reply's body: its thinking's line (and the thinking, when shown), then its answer. Live, the part
        that streams now is left to a LiveReply (app.chat.thinking)."""
        m = shown.message
        parts = parts_of(m, source, ends)
        expanded = m.id in self._expanded
        start, limit, thought = parts.answer, None, False  # what streams, live
        if thinks(m, parts):
            write_thinking_toggle(w, m, toggle_label(m, parts, ends, expanded), expanded)
            if parts.thinking is None:  # drawn from the stored answer: the thinking has no tokens here
                if expanded:
                    self._write_bare_thinking(w, m)
            elif live and not parts.closed:
                start, limit, thought = (*parts.thinking, True) if expanded else (parts.answer, parts.answer, False)
            elif expanded:
                w.thought = True
                w.write(self._thought_blocks(m, source, parts.thinking))
                w.thought = False
            w.skip_rejections_before(first_answer_token(parts, ends) if not thought else 0)
        if live:
            w.flush()
            lv = self._live = LiveReply(shown, source, list(ends), len(m.tokens), w.cur.position() - shown.start,
                                        cut=start, cut_fresh=w.fresh, cut_code=THINKING_CODE if thought else 0,
                                        limit=limit, thought=thought,
                                        drawing=drawing(parts, expanded),
                                        first_token=0 if thought else first_answer_token(parts, ends))
            w.thought = thought
            lv.render(w)
            w.thought = False
        else:
            w.write(self._blocks_of(m, source, parts.answer))
            w.end_rejections()

    def _write_bare_thinking(self, w: ReplyWriter, m: Message) -> None:
        """A stored reply's thinking without its tokens (they could not be read): its text, unmarked."""
        w.flush()
        bare = ReplyWriter(w.cur, w.formats, w.origin, w.prov, message_id=m.id, links=self.options.actions)
        bare.fresh, bare.thought = w.fresh, True
        bare.write(parse(m.thinking, 0, THINKING_CODE).blocks)
        bare.flush()
        w.pos, w.fresh = bare.pos, bare.fresh

    def _source_of(self, m: Message) -> tuple[str, list[int]]:
        """message_source(m), kept while the message keeps the same tokens (a view option redraws every message)."""
        tokens = m.tokens if m.role == Role.ASSISTANT else None
        if not tokens:  # its text is its content
            return message_source(m)
        cached = self._sources.get(m.id)
        if cached is None or cached[0] is not tokens or cached[1] != len(tokens):
            cached = self._sources[m.id] = (tokens, len(tokens), *message_source(m))
        return cached[2], cached[3]

    def _blocks_of(self, m: Message, source: str, start: int = 0) -> list[Block]:
        """The blocks of a message's text (a reply's answer, from `start`), parsed once."""
        key = (len(source), start)
        cached = self._blocks.get(m.id)
        if cached is not None and cached[0] == key:
            return cached[1]
        blocks = parse(source, start).blocks
        self._blocks[m.id] = (key, blocks)
        return blocks

    def _thought_blocks(self, m: Message, source: str, span: tuple[int, int]) -> list[Block]:
        """The blocks of a reply's thinking (source[span]), parsed once; its code blocks from THINKING_CODE."""
        key = (len(source), *span)
        cached = self._thoughts.get(m.id)
        if cached is not None and cached[0] == key:
            return cached[1]
        blocks = parse(source[: span[1]], span[0], THINKING_CODE).blocks
        self._thoughts[m.id] = (key, blocks)
        return blocks

    def toggle_thinking(self, message_id: int) -> None:
        """Show a reply's thinking, or hide it again; the message is drawn again where it is."""
        k = next((i for i, s in enumerate(self._shown) if s.message.id == message_id), -1)
        if k < 0:
            return
        self._expanded ^= {message_id}
        at_end = self._at_bottom()
        value = self.verticalScrollBar().value()
        live = self._live is not None and self._live.shown is self._shown[k]
        self._rewrite(k, live)
        if at_end and live:
            self._scroll_to_end()
        else:
            self.verticalScrollBar().setValue(value)
        if self._by_key:
            self._focus_thinking_link(self._shown[k])

    def _focus_thinking_link(self, shown: ShownMessage) -> None:
        """Select the message's thinking link again after a key opened or closed it (the message was drawn
        anew): Enter then toggles it back and Tab goes on from there."""
        doc = self.document()
        block = doc.findBlock(shown.start)
        while block.isValid():
            it = block.begin()
            while not it.atEnd():
                frag = it.fragment()
                link = app_links.parse(frag.charFormat().anchorHref()) if frag.charFormat().isAnchor() else None
                if link is not None and link[0] is LinkKind.THINKING:
                    cur = QTextCursor(doc)
                    cur.setPosition(frag.position())
                    cur.setPosition(frag.position() + frag.length(), QTextCursor.MoveMode.KeepAnchor)
                    self.setTextCursor(cur)
                    return
                it += 1
            if block.position() > shown.start + 400:  # it is in the message's first lines
                return
            block = block.next()

    def _rewrite(self, k: int, live: bool, cur: QTextCursor | None = None) -> None:
        """Draw the k-th shown message again in place (live: as the streaming reply)."""
        doc = self.document()
        old = self._shown[k]
        end = self._shown[k + 1].start - 1 if k + 1 < len(self._shown) else doc.characterCount() - 1
        own = cur is None
        if cur is None:
            cur = QTextCursor(doc)
            cur.beginEditBlock()
        before = doc.characterCount()
        cur.setPosition(old.start)
        cur.setPosition(end, QTextCursor.MoveMode.KeepAnchor)
        cur.removeSelectedText()
        if self._live is not None and self._live.shown is old:
            self._live = None
        last = k == len(self._shown) - 1
        new = self._write_message(cur, old.message, live=live,
                                  unanswered=last and old.message.role == Role.USER and not self._pending, last=last)
        self._shown[k] = new
        self._by_id[new.message.id] = new
        delta = doc.characterCount() - before
        for s in self._shown[k + 1:]:
            s.start += delta
        if own:
            cur.endEditBlock()

    # -- streaming ---------------------------------------------------------------------------------------
    def append_message(self, m: Message) -> None:
        """Add a message at the end (the user's, or an empty reply about to stream). One the user sent brings the
        view to the end, as in any chat, wherever they had scrolled to: their message and the reply are what
        they look at next (found: a chat reopened where it was last read showed neither)."""
        at_end = self._at_bottom() or m.role == Role.USER
        if self._live is not None:  # a reply that never said it finished: settle it first
            self.finish_rendering()
            self._live = None
        if self._shown and self._shown[-1].message.continuable and self.options.actions:
            self._redraw_last(last=False)  # it is no longer the last: it cannot be continued any more
        self.messages.append(m)
        self._formats = self._current_formats()
        cur = QTextCursor(self.document())
        cur.beginEditBlock()
        cur.movePosition(QTextCursor.MoveOperation.End)
        if self._shown or self._pending:
            cur.insertBlock()
        self._add(self._write_message(cur, m, live=not m.finished))
        cur.endEditBlock()
        if at_end:
            self._scroll_to_end()

    def reply_changed(self, message_id: int, from_token: int) -> None:
        """The streaming reply `message_id` gained tokens from `from_token` on (a StreamingReply's `changed`):
        drawn now, from where the last drawing stopped. Its tokens are read from the Message shown, which is
        the reply's own (app.control.streaming_reply); a reply not shown here, or not live, is left alone.
        How often this comes is the one throttle's business (app.control.replies: FLUSH_MS, TICK_SHARE)."""
        lv = self._live
        if lv is None or lv.shown.message.id != message_id or len(lv.shown.message.tokens) <= from_token:
            return
        self._render_live()

    def finish_reply(self, m: Message) -> None:
        """The reply `m` (the last message) ended: its final text, note and footer."""
        lv = self._live
        at_end = self._at_bottom()
        cur = QTextCursor(self.document())
        cur.beginEditBlock()
        if lv is not None and lv.shown.message is m and self._thought_or_moved(lv):
            # A reply that thought: its line now says how long, and its answer may have begun in the last
            # tokens (or a tag that was arriving never came). Drawn again whole, once.
            self._live = None
            self._rewrite(len(self._shown) - 1, live=False, cur=cur)
        elif lv is not None and lv.shown.message is m:
            w = self._render_live(cur, final=True)  # its writer: it knows whether the cursor stands in an empty block
            self._live = None
            if w is None:
                cur.movePosition(QTextCursor.MoveOperation.End)
                w = self._writer(cur, lv.shown, lv.ends)
            w.end_rejections()
            write_end(w, m, self.options.actions, last=True)
            w.flush()
        elif self._shown and self._shown[-1].message.id == m.id:  # drawn before it was live: draw it again
            self.messages[-1] = m
            self._redraw_last(cur, m, last=True)
        cur.endEditBlock()
        if at_end:
            self._scroll_to_end()

    def _redraw_last(self, cur: QTextCursor | None = None, m: Message | None = None, last: bool = True) -> None:
        """Write the last shown message again (as `m` when given), finished."""
        own = cur is None
        if cur is None:
            cur = QTextCursor(self.document())
            cur.beginEditBlock()
        old = self._shown.pop()
        cur.setPosition(old.start)
        cur.movePosition(QTextCursor.MoveOperation.End, QTextCursor.MoveMode.KeepAnchor)
        cur.removeSelectedText()
        self._add(self._write_message(cur, m or old.message, live=False, last=last))
        if own:
            cur.endEditBlock()

    def _thought_or_moved(self, lv: LiveReply) -> bool:
        """The finished reply thought, or its final text is drawn otherwise than its streaming one was."""
        m = lv.shown.message
        lv.take(m.tokens)
        parts = parts_of(m, lv.source, lv.ends)
        return (thinks(m, parts) or lv.drawing.phase is not Phase.ANSWER
                or drawing(parts, m.id in self._expanded) != lv.drawing)

    def _render_live(self, cur: QTextCursor | None = None, final: bool = False) -> ReplyWriter | None:
        lv = self._live
        if lv is None:
            return None
        m = lv.shown.message
        lv.take(m.tokens)
        parts = parts_of(m, lv.source, lv.ends)
        if drawing(parts, m.id in self._expanded) != lv.drawing and self._shown and self._shown[-1] is lv.shown:
            # The thinking closed, or a tag that was arriving came (or did not): another part streams now.
            at_end = cur is None and self._at_bottom()
            self._rewrite(len(self._shown) - 1, live=True, cur=cur)
            if at_end:
                self._scroll_to_end()
            return None
        if lv.thought:
            lv.limit = parts.thinking[1]
        elif lv.limit is not None:
            lv.limit = lv.cut  # its thinking streams hidden: nothing to draw
        own = cur is None
        at_end = own and self._at_bottom()
        if cur is None:
            cur = QTextCursor(self.document())
            cur.beginEditBlock()
        cur.setPosition(lv.shown.start + lv.cut_doc)
        cur.movePosition(QTextCursor.MoveOperation.End, QTextCursor.MoveMode.KeepAnchor)
        cur.removeSelectedText()
        prov = lv.shown.prov
        prov.truncate(lv.cut_runs)
        w = self._writer(cur, lv.shown, lv.ends)
        w.fresh = lv.cut_fresh
        w.thought = lv.thought
        w.skip_rejections_before(max(lv.first_token, next((i for i in reversed(prov.index) if i >= 0), -1) + 1))
        lv.render(w, final)
        w.thought = False
        w.flush()
        if own:
            cur.endEditBlock()
            if at_end:
                self._scroll_to_end()
        return w


    # -- keyboard ----------------------------------------------------------------------------------------------
    def keyPressEvent(self, e: QKeyEvent) -> None:
        self._by_key = True  # a link Enter opens keeps the keyboard's place (toggle_thinking)
        try:
            super().keyPressEvent(e)  # ViewNavigation's first: Ctrl+Up / Ctrl+Down move between messages
        finally:
            self._by_key = False
