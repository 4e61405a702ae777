"""Drafters: whatever proposes the next few tokens for the target to check.

A drafter is a small interface: `propose` a draft after the accepted context (as much as the
policy's request allows, pruned by the policy), then `commit` the context the target accepted.
How many tokens to ask for is the policy's job (engine.drafting.policy), not the drafter's; what
is special about a kind of drafter (lookup proposes for free, a model must catch up first) stays
inside it.
"""
from __future__ import annotations

import threading
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from engine.drafting.draft_choice import DraftKind
from engine.drafting.request import MODEL_KEY, DraftKey, DraftRequest
from engine.sampling import Distribution, SamplingParams

#: The policy's say over a proposed draft: how many of its tokens to verify.
Prune = Callable[[DraftKey, int], int]


def keep_all(key: DraftKey, proposed: int) -> int:
    return proposed


@dataclass(slots=True)
class Draft:
    """What a drafter proposed in one round."""

    tokens: list[int] = field(default_factory=list)
    """Proposed token ids."""
    q: list[Distribution | None] = field(default_factory=list)
    """Drafter's sampling distribution per token (None: proposed deterministically, q(x) = 1)."""
    q_probs: list[float | None] = field(default_factory=list)
    """Drafter's probability of each proposed token, for display."""
    seconds: float = 0.0
    """Wall time spent drafting proper (one drafter step per token), catch-up excluded."""
    key: DraftKey = DraftKey(DraftKind.NONE)
    """Kind of draft, for the policy's acceptance estimates."""
    asked: int = 0
    """Draft length the policy asked of the drafter that proposed it."""
    catchup_s: float = 0.0
    """Wall time the drafter spent reading tokens it had not seen yet."""
    catchup_tokens: int = 0
    """How many tokens that was."""
    confidence: list[float] = field(default_factory=list)
    """Per token, the drafter's own estimate that the target agrees (history drafts: from counts;
    empty when the drafter gives none). Only for pricing and display: acceptance ignores it."""
    aside: list[tuple[DraftKey, list[int]]] = field(default_factory=list)
    """Free proposals (lookup, history) the policy pruned away whole: the round's own tokens judge
    them at no cost (policy.RoundOutcome.aside)."""
    judged: tuple[tuple[DraftKey, int, int], ...] = ()
    """A model drafter's look (DraftRequest.look): its predictions of tokens the target already gave,
    judged as drafts (key, tokens judged, of those kept from the first: policy.look_windows)."""
    steps: int = 0
    """A model drafter's passes in `seconds` (a step that ends drafting proposes nothing but costs a pass)."""
    share: float = 1.0
    """The lowest share of the CPU time any of the drafter's timed passes got (calibration.judged_share)."""

    @property
    def kind(self) -> DraftKind:
        return self.key.kind if self.tokens else DraftKind.NONE

    def truncated(self, n: int) -> "Draft":
        return Draft(self.tokens[:n], self.q[:n], self.q_probs[:n], self.seconds, self.key, self.asked,
                     self.catchup_s, self.catchup_tokens, self.confidence[:n], self.aside, self.judged,
                     self.steps, self.share)


class Drafter(ABC):
    """Proposes tokens; keeps whatever state it needs in step with the accepted context."""

    name: str = "drafter"
    #: True when proposing costs forward passes of a model (the policy prices it)
    uses_model: bool = False
    #: The key a drafter that runs a model drafts under: Auto learns its acceptance there
    model_key: DraftKey = MODEL_KEY

    def begin(self, context: Sequence[int], stop: threading.Event | None = None) -> None:
        """A new reply starts from `context` (prompt tokens); a set `stop` may cut a long read short."""

    def reply_starts(self, at: int | None) -> None:
        """The next reply starts `at` tokens into its context, after a chat template's frame for it (None:
        the context is raw text the reply continues). Told before each reply, whether or not `begin` runs."""

    @abstractmethod
    def propose(self, context: Sequence[int], request: DraftRequest, params: SamplingParams,
                rng: np.random.Generator, prune: Prune = keep_all, stop: threading.Event | None = None) -> Draft:
        """A draft that might follow `context`, within `request`, pruned by `prune`."""

    def behind(self, context: Sequence[int]) -> int:
        """Tokens of `context` a model drafter would have to read before drafting."""
        return 0

    def prime(self, opening: Sequence[int], stop: threading.Event | None = None) -> None:
        """Read what the next conversation opens with while nothing waits on it (at load: the chat template's
        system turn and the start of the user's; after a reply: the conversation so far), so the next reply's
        first model draft or look reads only the rest. `stop`: end the read early (what was read stays)."""

    def commit(self, context: Sequence[int]) -> None:
        """The target accepted `context`: drop anything that went past it."""

    def reset(self) -> None:
        """Forget everything (between benchmark runs: nothing may be replayed)."""

    @property
    def passes(self) -> int:
        return 0
