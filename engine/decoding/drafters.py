"""Drafters: whatever proposes the next few tokens for the target to check.

A drafter is a small interface: `propose` up to k tokens after the accepted context, then
`commit` the context the target accepted. How many tokens to ask for is the policy's job
(engine.decoding.policy), not the drafter's.
"""
from __future__ import annotations

import time
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from engine.decoding.llama_backend import LlamaModel
from engine.decoding.sampling import Distribution, SamplingParams, distribution, top_prob


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
    """Wall time spent drafting."""
    source: str = "none"
    """Which drafter produced it."""
    key: str = "model"
    """Kind of draft, for the policy's acceptance estimates ("model", "lookup:N" for an N-token match)."""

    def truncated(self, n: int) -> "Draft":
        return Draft(self.tokens[:n], self.q[:n], self.q_probs[:n], self.seconds, self.source, self.key)


class Drafter(ABC):
    """Proposes tokens; keeps whatever state it needs in step with the accepted context."""

    name: str = "drafter"
    #: True when proposing costs forward passes of a model (the policy prices it)
    uses_model: bool = False

    def begin(self, context: Sequence[int]) -> None:
        """A new reply starts from `context` (prompt tokens)."""

    @abstractmethod
    def propose(self, context: Sequence[int], k: int, params: SamplingParams, rng: np.random.Generator,
                lookup_k: int | None = None) -> Draft:
        """Up to k tokens that might follow `context` (a lookup drafter may propose up to lookup_k)."""

    def commit(self, context: Sequence[int]) -> None:
        """The target accepted `context`: drop anything that went past it."""

    def reset(self) -> None:
        """Forget everything (between benchmark runs: nothing may be replayed)."""

    @property
    def passes(self) -> int:
        return 0


class ModelDrafter(Drafter):
    """A small GGUF model that shares the target's vocabulary."""

    uses_model = True

    def __init__(self, model: LlamaModel, p_min: float = 0.0) -> None:
        self.model = model
        self.p_min = p_min  # confidence cut-off: stop drafting below this top probability
        self.name = "model"

    @property
    def passes(self) -> int:
        return self.model.passes

    def begin(self, context: Sequence[int]) -> None:
        # Read the prompt with the target's prefill, so drafting rounds price only drafting.
        have = self.model.sync(context[:-1])
        if have < len(context) - 1:
            self.model.decode(context[have:-1], "none")

    def propose(self, context: Sequence[int], k: int, params: SamplingParams, rng: np.random.Generator,
                lookup_k: int | None = None) -> Draft:
        t0 = time.perf_counter()
        draft = Draft(source=self.name)
        if k <= 0:
            return draft
        m = self.model
        have = m.sync(context)
        if have == len(context):  # it already read everything: re-read the last token for its logits
            m.truncate(have - 1)
            have -= 1
        row = m.decode(context[have:], "last")[0]
        for i in range(k):
            if params.greedy:
                tok, prob = top_prob(row)
                dist = None
                if prob < self.p_min:
                    break
            else:
                dist = distribution(row, params)
                if dist.probs[0] < self.p_min:
                    break
                tok = dist.sample(rng)
                prob = dist.prob(tok)
            draft.tokens.append(tok)
            draft.q.append(dist)
            draft.q_probs.append(prob)
            if i + 1 < k and len(m.kv) < m.n_ctx:
                row = m.decode([tok], "last")[0]
            else:
                break
        draft.seconds = time.perf_counter() - t0
        return draft

    def commit(self, context: Sequence[int]) -> None:
        # Keep the KV of drafted tokens the target accepted: they are never decoded twice.
        self.model.sync(context)

    def reset(self) -> None:
        self.model.clear()


class LookupDrafter(Drafter):
    """Prompt lookup: propose what followed the most recent earlier occurrence of the
    longest n-gram that ends the context (prompt and reply so far). No model, no cost."""

    def __init__(self, max_ngram: int = 5, min_ngram: int = 2) -> None:
        self.name = "lookup"
        self.max_ngram = max_ngram
        self.min_ngram = min_ngram
        self.reset()

    def reset(self) -> None:
        self._tokens: list[int] = []
        # n -> {ngram: last start position of that n-gram whose continuation is known}
        self._index: dict[int, dict[tuple[int, ...], int]] = {n: {} for n in range(self.min_ngram, self.max_ngram + 1)}

    def begin(self, context: Sequence[int]) -> None:
        self.reset()
        self._extend(context)

    def _extend(self, context: Sequence[int]) -> None:
        toks = self._tokens
        if len(context) < len(toks) or list(context[: len(toks)]) != toks:
            self.reset()
            toks = self._tokens
        start = len(toks)
        toks.extend(context[start:])
        # Index n-grams that now have at least one token after them.
        for end in range(max(start, 1), len(toks)):
            for n, index in self._index.items():
                if end >= n:
                    index[tuple(toks[end - n : end])] = end - n

    def propose(self, context: Sequence[int], k: int, params: SamplingParams, rng: np.random.Generator,
                lookup_k: int | None = None) -> Draft:
        t0 = time.perf_counter()
        k = k if lookup_k is None else lookup_k
        self._extend(context)
        toks = self._tokens
        draft = Draft(source=self.name)
        for n in range(self.max_ngram, self.min_ngram - 1, -1):
            if len(toks) <= n:
                continue
            pos = self._index[n].get(tuple(toks[-n:]))
            if pos is not None and pos + n < len(toks):
                cont = toks[pos + n : pos + n + k]
                draft.tokens = list(cont)
                draft.q = [None] * len(cont)
                draft.q_probs = [1.0] * len(cont)
                draft.key = f"lookup:{n}"
                break
        draft.seconds = time.perf_counter() - t0
        return draft


class CombinedDrafter(Drafter):
    """Prompt lookup first; when it finds nothing, the model drafter."""

    uses_model = True

    def __init__(self, lookup: LookupDrafter, model: ModelDrafter) -> None:
        self.lookup, self.model = lookup, model
        self.name = "lookup+model"

    @property
    def passes(self) -> int:
        return self.model.passes

    def begin(self, context: Sequence[int]) -> None:
        self.lookup.begin(context)
        self.model.begin(context)

    def propose(self, context: Sequence[int], k: int, params: SamplingParams, rng: np.random.Generator,
                lookup_k: int | None = None) -> Draft:
        draft = self.lookup.propose(context, k, params, rng, lookup_k)
        if draft.tokens:
            return draft
        spent = draft.seconds
        draft = self.model.propose(context, k, params, rng)
        draft.seconds += spent
        return draft

    def commit(self, context: Sequence[int]) -> None:
        self.model.commit(context)

    def reset(self) -> None:
        self.lookup.reset()
        self.model.reset()
