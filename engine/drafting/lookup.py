"""Prompt lookup: drafts copied from where the context's last n-gram occurred before (and from past chats), free."""
from __future__ import annotations

import threading
import time
from collections.abc import Sequence

import numpy as np

from engine.drafting.base import Draft, Drafter, Prune, keep_all
from engine.drafting.draft_choice import DraftKind
from engine.drafting.history_index import HistoryIndex
from engine.drafting.request import DraftKey, DraftRequest, lookup_key
from engine.sampling import SamplingParams

#: Longest match a lookup reports (LookupDrafter.find): Auto learns its drafts by bucket of it (policy.lookup_key).
MATCH_CAP = 32


class LookupDrafter(Drafter):
    """Prompt lookup: propose what followed the most recent earlier occurrence of the
    longest n-gram that ends the context (prompt and reply so far). No model, no cost.

    With a `history` index (opt-in), past conversations are asked when this one has nothing
    worth verifying: a match here is recent and on topic, so it goes first; the index's counts
    then speak only where this conversation is silent, and Auto prices its drafts apart (kind
    HISTORY, by match length and confidence bucket)."""

    def __init__(self, max_ngram: int = 5, min_ngram: int = 2, history: HistoryIndex | None = None) -> None:
        self.name = "lookup"
        self.max_ngram = max_ngram
        self.min_ngram = min_ngram
        self.history = history
        self._reply_start = 0
        self.reset()

    def reply_starts(self, at: int | None) -> None:
        self._reply_start = at or 0

    def reset(self) -> None:
        self._tokens: list[int] = []
        # n -> {ngram: last start position of that n-gram whose continuation is known}
        self._index: dict[int, dict[tuple[int, ...], int]] = {n: {} for n in range(self.min_ngram, self.max_ngram + 1)}

    def begin(self, context: Sequence[int], stop: threading.Event | None = None) -> None:
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

    def find(self, context: Sequence[int], k: int) -> tuple[int, list[int]] | None:
        """The longest n-gram match ending `context` and up to k tokens that followed it, with the
        match's length: beyond the longest n-gram indexed, how far back the context goes on agreeing
        with what came before the match (up to MATCH_CAP), so a reply copying a passage tells a
        run of dozens of tokens from a five-token coincidence.

        The match lies within the reply (`reply_starts`): before it a conversation ends in the chat
        template's frame of a turn ("<|im_end|>\n<|im_start|>assistant\n"), the same every turn,
        which matched the previous reply's opening in each of the 5 recorded two-turn chats and was
        never right (the drafts were what the last reply began with)."""
        self._extend(context)
        toks = self._tokens
        reply = len(toks) - self._reply_start
        for n in range(min(self.max_ngram, reply), self.min_ngram - 1, -1):
            if len(toks) <= n:
                continue
            pos = self._index[n].get(tuple(toks[-n:]))
            if pos is not None and pos + n < len(toks):
                follows, end = pos + n, len(toks) - n  # back from the match's n-gram and from its source
                while n < min(MATCH_CAP, reply) and pos > 0 and toks[pos - 1] == toks[end - 1]:
                    pos, end, n = pos - 1, end - 1, n + 1
                return n, toks[follows : follows + k]
        return None

    def propose(self, context: Sequence[int], request: DraftRequest, params: SamplingParams,
                rng: np.random.Generator, prune: Prune = keep_all, stop: threading.Event | None = None) -> Draft:
        t0 = time.perf_counter()
        k = request.lookup_k
        draft = Draft(asked=k)
        found = self.find(context, k) if k > 0 else None
        if found is not None:
            n, cont = found
            draft.key = lookup_key(n)
            kept = prune(draft.key, len(cont))
            if not kept:
                draft.aside.append((draft.key, list(cont)))
            cont = cont[:kept]
            draft.tokens, draft.q, draft.q_probs = list(cont), [None] * len(cont), [1.0] * len(cont)
        if not draft.tokens and k > 0 and self.history is not None:
            p = self.history.propose(context, k)
            if p.steps:
                draft.key = DraftKey(DraftKind.HISTORY, p.match, p.bucket)
                n = prune(draft.key, len(p.steps))
                if not n:
                    draft.aside.append((draft.key, list(p.tokens)))
                draft.tokens, draft.confidence = p.tokens[:n], p.confidences[:n]
                draft.q, draft.q_probs = [None] * n, [1.0] * n
        draft.seconds = time.perf_counter() - t0
        return draft
