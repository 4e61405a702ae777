"""Stop strings: text that ends a reply, found however it falls across tokens and rounds.

A model with no chat template of its own is prompted in a plain 'Role: text' layout, and nothing
tells it where its turn ends: it goes on to write the next "User:" turn itself. Such a marker can
span tokens, begin inside a token that also holds the reply's last words, and arrive in the middle
of a speculative round's accepted block. The loop asks `StopText` what it may release: a round whose
text might be the start of a marker waits (with its tokens) until the next round says, and at a
marker the reply ends with the text before it, the marker neither shown nor stored.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Generic, TypeVar

T = TypeVar("T")


def first_stop(text: str, stops: Sequence[str]) -> int:
    """Where the earliest stop string in `text` begins, or -1."""
    found = [i for s in stops if (i := text.find(s)) >= 0]
    return min(found, default=-1)


def hold_from(text: str, stops: Sequence[str]) -> int:
    """Where the longest end of `text` that could still grow into a stop string begins (len(text): none)."""
    for start in range(max(0, len(text) - max((len(s) for s in stops), default=0) + 1), len(text)):
        tail = text[start:]
        if any(s.startswith(tail) for s in stops):
            return start
    return len(text)


@dataclass(slots=True)
class Released(Generic[T]):
    """A unit (a round) the consumer may have now, with its tokens' texts (cut short at a stop)."""

    unit: T
    """What was held (the loop's round)."""
    texts: list[str]
    """Its tokens' texts; at a stop only those before it, the last one cut where the stop begins."""


class StopText(Generic[T]):
    """Holds back units of tokens while their text may be the start of a stop string."""

    def __init__(self, stops: Sequence[str]) -> None:
        self.stops = tuple(s for s in stops if s)
        self._held: list[tuple[T, list[str]]] = []
        self.stopped = False
        """A stop string was found: the reply ends with what was released."""

    def push(self, unit: T, texts: list[str]) -> list[Released[T]]:
        """A unit's tokens' texts; returns the units that may go out now, in order."""
        if not self.stops:
            return [Released(unit, texts)]
        self._held.append((unit, texts))
        joined = "".join(t for _, ts in self._held for t in ts)
        at = first_stop(joined, self.stops)
        if at >= 0:
            self.stopped = True
            return self._cut(at)
        safe = hold_from(joined, self.stops)
        out, end = [], 0
        while self._held:
            size = sum(map(len, self._held[0][1]))
            if end + size > safe:
                break
            end += size
            u, ts = self._held.pop(0)
            out.append(Released(u, ts))
        return out

    def flush(self) -> list[Released[T]]:
        """The reply ended otherwise: what was held is reply text after all."""
        out = [Released(u, ts) for u, ts in self._held]
        self._held = []
        return out

    def _cut(self, stop_at: int) -> list[Released[T]]:
        """Every held unit, keeping the tokens whose text begins before the stop, the last one cut there."""
        out, at = [], 0
        for u, ts in self._held:
            kept = []
            for t in ts:
                if at < stop_at:
                    kept.append(t[: stop_at - at])
                at += len(t)
            out.append(Released(u, kept))
        self._held = []
        return out
