"""A reply's thinking in the chat: where it lies in the reply's tokens, its collapsed line, how it streams.

The engine splits a finished reply (engine.decoding.reasoning); the view splits the streaming text the same
way, so a reply's thinking shows as one line ("Thinking…", then "Thought for 12 s · 240 tokens") that a
click or Enter opens: the thinking then reads like the answer, Markdown and provenance marks included,
indented and muted. A streaming reply is drawn in phases; when the phase changes (its thinking closes, a
tag that was arriving turns out to be one, or not) the message is drawn again.
"""
from __future__ import annotations

from bisect import bisect_left
from collections.abc import Sequence
from dataclasses import dataclass
from enum import Enum

from engine.decoding.reasoning import OPEN, ReplyParts, split_reply

from app.history.records import Message, Role

_NONE = ReplyParts(None, 0, False)
THINKING_CODE = 1_000_000
"""Code blocks of a reply's thinking are numbered from here in its Copy links (the answer's from 0)."""


def parts_of(m: Message, source: str, ends: Sequence[int]) -> ReplyParts:
    """Where `m`'s thinking and answer lie in `source`, the text it is drawn from (its tokens' text).

    A reply drawn from its stored answer (no tokens) has no thinking in that text: its thinking, if any,
    is `m.thinking`. A stored reply whose text starts past an open tag thought inside a block its prompt
    opened."""
    if m.role != Role.ASSISTANT or not ends:
        return _NONE
    opened = m.thinking_open or (bool(m.thinking) and not source.lstrip().startswith(OPEN))
    return split_reply(source, opened, final=m.finished)


def thinks(m: Message, parts: ReplyParts) -> bool:
    return parts.thinking is not None or bool(m.thinking)


class Phase(Enum):
    """Which part of a streaming reply is drawn."""

    ANSWER = "answer"  # no thinking (yet): the answer from its start
    THINKING = "thinking"  # thinking that has not closed
    ANSWERED = "answered"  # the answer after closed thinking


@dataclass(frozen=True, slots=True)
class Drawing:
    """How a streaming reply is drawn now: the same drawing can be redrawn from its cut, another cannot."""

    phase: Phase
    """Which part streams."""
    expanded: bool | None = None
    """The thinking is open (None in the answer phase, where it plays no part)."""
    answer: int | None = None
    """Where the answer starts in the source (None while thinking: not known yet)."""


def drawing(parts: ReplyParts, expanded: bool) -> Drawing:
    """How a streaming reply is drawn now (a change means the message is drawn again)."""
    if parts.thinking is None:
        # The answer from its start (which moves while a tag may be arriving).
        return Drawing(Phase.ANSWER, answer=parts.answer)
    if not parts.closed:
        return Drawing(Phase.THINKING, expanded)
    return Drawing(Phase.ANSWERED, expanded, parts.answer)


def thinking_tokens(parts: ReplyParts, ends: Sequence[int]) -> int:
    """Tokens before the answer: the thinking and its tags."""
    return min(len(ends), bisect_left(ends, parts.answer) + 1) if ends else 0


def first_answer_token(parts: ReplyParts, ends: Sequence[int]) -> int:
    """The token that holds the answer's first character."""
    return bisect_left(ends, parts.answer + 1) if ends else 0


def duration(seconds: float) -> str:
    if seconds < 10:
        return f"{seconds:.1f} s"
    whole = round(seconds)
    return f"{whole} s" if whole < 60 else f"{whole // 60} min {whole % 60} s"


def toggle_label(m: Message, parts: ReplyParts, ends: Sequence[int], expanded: bool) -> str:
    """The thinking's one line: 'Thinking…' while it streams, then how long it took and how many tokens."""
    arrow = "▾" if expanded else "▸"
    if not m.finished and not parts.closed:
        return f"{arrow} Thinking…"
    seconds = m.stats.thinking_s if m.stats is not None else None
    words = f"Thought for {duration(seconds)}" if seconds is not None else "Thought"
    n = thinking_tokens(parts, ends)
    return f"{arrow} {words}" + (f" · {n} tokens" if n else "")
