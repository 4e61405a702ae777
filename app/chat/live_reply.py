"""A message on screen, and the streaming reply: its text so far and where its unsettled tail begins.

Each redraw of a streaming reply deletes the document from the cut and renders the tail again. The cut
is the start of the last top-level Markdown block whose first line is complete: once a later block has
begun on a complete line, nothing that follows can change the blocks before it. In a long open code
fence the cut moves on to a late line that ended outside strings and comments, where Pygments can
restart and give the colours lexing the whole fence would.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from engine.decoding.events import TokenEvent

from app.chat.markdown_spans import Kind, parse, table_pending
from app.chat.reply_document import BlockMark, Provenance, ReplyWriter
from app.chat.thinking import Drawing
from app.history.records import Message

CHECKPOINT_LINES = 40
"""A streaming code fence longer than this re-renders from a late line rather than from its top."""


@dataclass(slots=True)
class ShownMessage:
    """A message in the document."""

    message: Message
    """The message."""
    start: int
    """Document position of its first character (moves when older messages are rendered above it)."""
    prov: Provenance
    """Which token each of its characters came from."""


@dataclass(slots=True)
class LiveReply:
    """The streaming reply's text so far and its cut (see the module docstring)."""

    shown: ShownMessage
    """The reply on screen."""
    source: str
    """Its tokens' text so far."""
    ends: list[int]
    """Cumulative token text ends (source offsets)."""
    n_tokens: int
    """Tokens taken into `source`."""
    cut_doc: int
    """Offset from the message's start where the tail begins in the document (what a redraw deletes)."""
    cut: int = 0
    """Source offset the tail is parsed from (a top-level block start)."""
    cut_fresh: bool = False
    """The tail begins in an empty block of its own (after a table)."""
    cut_runs: int = 0
    """Provenance runs before the tail."""
    cut_code: int = 0
    """Code blocks before the tail."""
    skip_lines: int = 0
    """Lines of the code fence at `cut` that stay as they are."""
    limit: int | None = None
    """Where the streamed part ends in `source` (None: at its end). A reply that thinks streams one part
    at a time: its thinking (up to a close tag still arriving) while that is shown, then its answer."""
    thought: bool = False
    """The streamed part is the reply's thinking."""
    drawing: Drawing | None = None
    """Which part streams, and how (app.chat.thinking.drawing): when it changes, the message is drawn again."""
    first_token: int = 0
    """The first token of the streamed part (rejected drafts of earlier tokens are not shown with it)."""

    def take(self, tokens: Sequence[TokenEvent]) -> None:
        """The reply's tokens so far (those beyond `n_tokens` are new)."""
        if len(tokens) <= self.n_tokens:
            return
        texts = [t.text for t in tokens[self.n_tokens:]]
        at = self.ends[-1] if self.ends else 0
        for t in texts:
            at += len(t)
            self.ends.append(at)
        self.source += "".join(texts)
        self.n_tokens = len(tokens)

    def render(self, w: ReplyWriter, final: bool = False) -> None:
        """Writes the tail at the writer's cursor, then moves the cut as far as the text allows. Until the
        reply is `final`, a table header whose delimiter row has not come yet waits (see table_pending)."""
        source = self.source if self.limit is None else self.source[:max(self.limit, self.cut)]
        if not final:
            source = source[:max(self.cut, table_pending(source))]
        parsed = parse(source, self.cut, self.cut_code, self.skip_lines)
        marks: list[BlockMark] = []
        w.write(parsed.blocks, marks.append)
        w.flush()
        complete = source.rfind("\n") + 1  # where the last, maybe partial, line starts
        # A top block markdown-it dropped (nested past its maxNesting) has no mark: the cut cannot go there.
        marked = {mk.block.top for mk in marks}
        tops = [t for t in parsed.tops if self.cut < t < complete and t in marked]
        start = self.shown.start
        if tops:
            k = next(i for i, mk in enumerate(marks) if mk.block.top == tops[-1])
            mk = marks[k]
            codes = [b.block.code_index for b in marks[:k] if b.block.code_index >= 0]
            self.cut, self.cut_doc, self.cut_fresh, self.cut_runs = tops[-1], mk.position - start, mk.fresh, mk.runs
            self.cut_code = max(codes) + 1 if codes else self.cut_code
            self.skip_lines = 0
            marks = marks[k:]
        if [t for t in parsed.tops if t > self.cut]:
            return
        lines = [mk for mk in marks if mk.block.kind == Kind.CODE and mk.block.top == self.cut and not mk.block.lists
                 and not mk.block.quote and mk.block.restart and not mk.block.last
                 and mk.block.line >= max(CHECKPOINT_LINES, self.skip_lines + 1)]
        if lines:
            mk = lines[-1]
            self.cut_doc, self.cut_fresh, self.cut_runs = mk.position - start, mk.fresh, mk.runs
            self.skip_lines = mk.block.line
