"""What a conversation is made of, in memory: messages, and for replies every round and token.

Reply provenance reuses the engine's own event dataclasses (RoundEvent, TokenEvent, Stats):
the store writes them as they arrive and reads them back unchanged.
"""
from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, fields
from enum import StrEnum
from typing import Any

from engine.attachments import Attachment
from engine.decoding.events import (
    Certainty,
    FinishReason,
    RoundEvent,
    RoundTotals,
    Stats,
    TokenEvent,
    TokenSource,
    drafter_counts,
    with_totals,
)


class Role(StrEnum):
    """Who wrote a message."""

    USER = "user"
    ASSISTANT = "assistant"


@dataclass(frozen=True, slots=True)
class Conversation:
    """One chat in the list."""

    id: int
    """Database id."""
    title: str
    """Shown in the list; the first words of the first message until renamed."""
    updated: float
    """Unix time of the last change (the list is newest first)."""


@dataclass(slots=True)
class Message:
    """One message; a reply also carries its rounds and tokens (GUI thread only)."""

    id: int
    """Database id."""
    role: Role
    """User or assistant."""
    content: str
    """The text (for a reply: final text once finished)."""
    target: str = ""
    """Target model file name (replies)."""
    drafter: str = ""
    """Drafter label (replies)."""
    tokens: list[TokenEvent] = field(default_factory=list)
    """Every emitted token, in order."""
    rounds: dict[int, RoundEvent] = field(default_factory=dict)
    """Every round, by number."""
    finish_reason: FinishReason | None = None
    """Why the reply ended (None: still streaming, or interrupted by a crash)."""
    stats: Stats | None = None
    """The engine's totals once finished."""
    error: str = ""
    """What went wrong, if the reply failed part-way."""
    created: float = 0.0
    """Unix time it was written."""
    settings: dict[str, Any] = field(default_factory=dict)
    """The app settings a reply was made with (pair, k or Auto, sampling, system prompt); {} if unknown."""
    parent_id: int | None = None
    """The message this one answers or follows (None: the first of its conversation)."""
    variant: int = 1
    """Its place among the alternatives that share its parent, from 1 (regenerated or edited)."""
    variants: int = 1
    """How many alternatives share its parent."""
    attachments: tuple[Attachment, ...] = ()
    """Files given with a question, as text (engine.attachments): the model reads them before its words."""
    thinking: str = ""
    """A reply's thinking, kept apart from its answer (content); "" when it did not think or is still streaming."""
    thinking_open: bool = False
    """The prompt opened the reply's thinking block: its tokens start inside it (engine.decoding.reasoning)."""

    @property
    def text(self) -> str:
        if self.role == Role.USER or self.finish_reason is not None:
            return self.content
        return "".join(t.text for t in self.tokens)

    @property
    def finished(self) -> bool:
        return self.role == Role.USER or self.finish_reason is not None

    @property
    def continuable(self) -> bool:
        """A reply Continue can go on from (when it is the last shown): stopped or cut at the max tokens
        limit, with the tokens it was made of (an edited reply has none). A reply stopped while it still
        thought has no answer to go on from: Regenerate makes it again."""
        return self.role == Role.ASSISTANT and self.finish_reason in CONTINUABLE and bool(self.tokens) \
            and not self.edited and not (self.thinking and not self.content)

    @property
    def edited(self) -> bool:
        """A reply the person wrote over (Edit on a reply): its text is theirs, it has no tokens."""
        return self.role == Role.ASSISTANT and bool(self.settings.get(EDITED))


CONTINUABLE = (FinishReason.CANCELLED, FinishReason.LENGTH)
"""Why a reply ended, when Continue can go on from it."""
EDITED = "edited"
"""The settings key that marks an edited reply (its other settings are the original reply's)."""


_ROUND_FIELDS = frozenset(f.name for f in fields(RoundEvent) if f.init)
_STATS_FIELDS = frozenset(f.name for f in fields(Stats) if f.init)
_SOURCES = {s.value: s for s in TokenSource}
"""Opening a long chat builds one event per stored round and token (50k tokens: every microsecond
a row counts), so the field sets and the source lookup are made once."""


def round_from_dict(d: dict[str, Any]) -> RoundEvent:
    kw = {k: v for k, v in d.items() if k in _ROUND_FIELDS}
    for k in ("drafted", "drafted_text", "rejected", "rejected_text"):
        kw[k] = tuple(kw.get(k, ()))
    kw["certainty"] = _certainty(kw.get("certainty"))
    totals = kw.get("totals")
    if totals is not None and not isinstance(totals, dict):
        raise ValueError("a round's totals must be an object")
    kw["totals"] = RoundTotals.from_dict(totals) if totals else None  # None: stored before rounds carried them
    kw["threads"], kw["looked"] = _pair(kw.get("threads")), _pair(kw.get("looked"))
    return RoundEvent(**kw)


def _pair(v: Any) -> tuple[int, int] | None:
    """Two whole numbers as stored (a JSON list), or None for anything else."""
    if isinstance(v, (list, tuple)) and len(v) == 2 and all(isinstance(x, int) and not isinstance(x, bool) for x in v):
        return int(v[0]), int(v[1])
    return None


def rounds_by_number(rounds: Sequence[RoundEvent]) -> dict[int, RoundEvent]:
    """A reply's rounds keyed by number, each with its running totals: rounds stored by an older version
    have none, and are given them here, once, as they load (engine.decoding.events.with_totals)."""
    ordered = sorted(rounds, key=lambda r: r.round)
    if all(r.totals is not None for r in ordered):
        return {r.round: r for r in ordered}
    return {r.round: r for r in with_totals(ordered)}


def stats_from_dict(d: dict[str, Any]) -> Stats:
    kw = {k: v for k, v in d.items() if k in _STATS_FIELDS}
    kw["acceptance_by_position"] = tuple(kw.get("acceptance_by_position", ()))
    kw["certainty"] = _certainty(kw.get("certainty"))
    kw["rounds_by_drafter"] = drafter_counts(kw.get("rounds_by_drafter", {}))
    return Stats(**kw)


def _certainty(value: Any) -> Certainty:
    """Stored as text; replies stored before the verdict had a certainty read as settled."""
    try:
        return Certainty(value) if value is not None else Certainty.SETTLED
    except ValueError:
        return Certainty.SETTLED


def token(index: int, text: str, token_id: int, source: str, round_: int, p: float | None, q: float | None,
          runner_up: int | None = None, margin: float | None = None) -> TokenEvent:
    kind = _SOURCES.get(source)
    if kind is None:
        raise ValueError(f"unknown token source {source!r}")  # read as an unreadable token record
    return TokenEvent(text, token_id, kind, round_, p, q, index, runner_up, margin)


UNREADABLE = "this reply's token record could not be read"
"""A reply's note when its stored tokens or rounds cannot be made into events (its text still shows)."""
_TOKENS = Message.__dict__["tokens"]  # the slots under StoredReply's properties
_ROUNDS = Message.__dict__["rounds"]
Rows = Callable[[], Sequence[tuple] | None]
"""Reads a reply's stored rows (None: they could not be read)."""


class StoredReply(Message):
    """A reply read back from the store, whose token and round rows are read when first asked for.

    Opening a 50k-token chat spent nearly all its time reading every stored token and round and making
    each an event. The view asks for a message's tokens when it draws it (the newest messages at once,
    older ones over the next event-loop turns), and for rounds only where one is shown: a token's story,
    rejected drafts, the running stats of a reply without the engine's totals, an export. Token rows
    that cannot be read leave the reply without tokens and rounds, round rows without rounds; either
    way its note says so, and its text still shows."""

    __slots__ = ("_token_rows", "_round_rows")

    def __init__(self, *args: Any, token_rows: Rows | None = None, round_rows: Rows | None = None,
                 **kwargs: Any) -> None:
        self._token_rows: Rows | None = None
        self._round_rows: Rows | None = None
        super().__init__(*args, **kwargs)
        self._token_rows, self._round_rows = token_rows, round_rows  # after __init__: it assigns through the setters

    @property  # type: ignore[override]
    def tokens(self) -> list[TokenEvent]:
        read = self._token_rows
        if read is not None:
            self._token_rows = None
            try:
                rows = read()
                if rows is None:
                    raise ValueError("unreadable")
                _TOKENS.__set__(self, [token(*r) for r in rows])
            except (ValueError, TypeError):
                self.rounds = {}  # they describe tokens that are no longer there
                self.error = self.error or UNREADABLE
        return _TOKENS.__get__(self)

    @tokens.setter
    def tokens(self, value: list[TokenEvent]) -> None:
        self._token_rows = None
        _TOKENS.__set__(self, value)

    @property  # type: ignore[override]
    def rounds(self) -> dict[int, RoundEvent]:
        read = self._round_rows
        if read is not None:
            self._round_rows = None
            try:
                rows = read()
                if rows is None:
                    raise ValueError("unreadable")
                _ROUNDS.__set__(self, rounds_by_number([round_from_dict(json.loads(d)) for _n, d in rows]))
            except (ValueError, TypeError, KeyError, AttributeError):
                # The tokens stay: the view may have drawn them already, and it finds them by index.
                self.error = self.error or UNREADABLE
        return _ROUNDS.__get__(self)

    @rounds.setter
    def rounds(self, value: dict[int, RoundEvent]) -> None:
        self._round_rows = None
        _ROUNDS.__set__(self, value)
