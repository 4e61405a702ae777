"""What the draft policy asks of a drafter each round (DraftRequest), and the keys acceptance is learned by."""
from __future__ import annotations

from dataclasses import dataclass

from engine.drafting.draft_choice import DraftKind


@dataclass(frozen=True, slots=True)
class DraftKey:
    """A kind of draft whose acceptance is learned on its own: model drafts, prompt-lookup
    drafts by the length of the n-gram match behind them, and drafts from past conversations by
    match length and confidence bucket."""

    kind: DraftKind
    match: int = 0
    """Lookup: tokens in the n-gram that matched (longer matches are more often right)."""
    confidence: int = 0
    """History: the draft's confidence bucket (engine.drafting.history_index; 0 = none given)."""

    def __str__(self) -> str:
        text = f"{self.kind.value}:{self.match}" if self.match else self.kind.value
        return f"{text}/c{self.confidence}" if self.confidence else text

    @property
    def parent(self) -> "DraftKey | None":
        """The coarser key whose acceptance a fresh one starts from (None: the prior)."""
        if self.confidence:
            return DraftKey(self.kind, self.match)
        return DraftKey(self.kind) if self.match else None


MODEL_KEY = DraftKey(DraftKind.MODEL)
MTP_KEY = DraftKey(DraftKind.MTP)
#: Lookup match lengths learned apart: 2, 3 and 4 tokens, then 5-7, 8-15, 16-31 and 32 or more (a reply
#: copying a passage matches dozens of tokens, and goes on copying far more often than a short match).
MATCH_BUCKETS = (2, 3, 4, 5, 8, 16, 32)


def lookup_key(match: int) -> DraftKey:
    """The key a lookup draft behind an n-gram match of `match` tokens is learned under."""
    return DraftKey(DraftKind.LOOKUP, max((b for b in MATCH_BUCKETS if b <= match), default=match))


@dataclass(frozen=True, slots=True)
class DraftRequest:
    """What the policy asks of the drafter this round."""

    model_k: int = 0
    """Tokens a model drafter should draft (it costs a forward pass each)."""
    lookup_k: int = 0
    """Tokens a free drafter (prompt lookup) may propose; the policy prunes them afterwards."""
    p_min: float = 0.0
    """A model drafter stops drafting where its top probability falls below this (the reply's
    setting; 0: never). The policy asks for lengths; the loop adds the reply's cut-off."""
    look: int = 0
    """A model drafter drafts nothing, reads its backlog and judges its own next-token predictions of
    the backlog's last `look` tokens (the target's, of this reply) as if it had drafted them
    (Draft.judged): what a first draft would teach, for the read alone. On a CPU, where a block of
    two costs 1.6x a plain round, a first 4-token draft wholly rejected cost a 3-s translation 7%."""

    @property
    def any(self) -> bool:
        return self.model_k > 0 or self.lookup_k > 0 or self.look > 0
