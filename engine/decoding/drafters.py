"""Drafters: whatever proposes the next few tokens for the target to check.

A drafter is a small interface: `propose` a draft after the accepted context (as much as the
policy's request allows, pruned by the policy), then `commit` the context the target accepted.
How many tokens to ask for is the policy's job (engine.decoding.policy), not the drafter's; what
is special about a kind of drafter (lookup proposes for free, a model must catch up first) stays
inside it.
"""
from __future__ import annotations

import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from engine.decoding.calibration import judged_share
from engine.decoding.history_index import HistoryIndex
from engine.decoding.llama_backend import LlamaModel, Logits
from engine.decoding.policy import MODEL_KEY, DraftKey, DraftKind, DraftRequest, look_windows, lookup_key
from engine.decoding.sampling import Distribution, SamplingParams, distribution, top_prob
from engine.errors import Interrupted

#: The policy's say over a proposed draft: how many of its tokens to verify.
Prune = Callable[[DraftKey, int], int]


#: Unread tokens up to this many are read with the first draft step rather than as a catch-up.
CATCHUP_MIN = 2
#: Longest match a lookup reports (LookupDrafter.find): Auto learns its drafts by bucket of it (policy.lookup_key).
MATCH_CAP = 32


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


#: A drafter's long reads (the prompt, a backlog) go in blocks of this many tokens, a stop request
#: honoured between them: one read of a long prompt took seconds on a busy CPU, Stop waiting on it.
READ_BLOCK = 128


def _read(model: LlamaModel, tokens: Sequence[int], stop: threading.Event | None, draft: Draft | None = None) -> int:
    """Decode `tokens` into the model in blocks; returns how many were read (fewer after a stop). A `draft`
    the read is timed for gets each pass's share of the CPU (_passed)."""
    done = 0
    while done < len(tokens):
        if stop is not None and stop.is_set():
            break
        block = tokens[done : done + READ_BLOCK]
        try:
            model.decode(block, Logits.NONE)
        except Interrupted:  # a stop inside the block's pass (llama_backend.StopRequest)
            break
        if draft is not None:
            _passed(model, draft)
        done += len(block)
    return done


def _passed(model: LlamaModel, draft: Draft) -> None:
    """A timed pass of the drafter for `draft` is done: its share of the CPU lowers the draft's."""
    draft.share = min(draft.share, judged_share(model.last_share, model.info.size))


class Drafter(ABC):
    """Proposes tokens; keeps whatever state it needs in step with the accepted context."""

    name: str = "drafter"
    #: True when proposing costs forward passes of a model (the policy prices it)
    uses_model: bool = False

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


class ModelDrafter(Drafter):
    """A small GGUF model that shares the target's vocabulary."""

    uses_model = True

    def __init__(self, model: LlamaModel, target_vocab: int | None = None,
                 is_eog: Callable[[int], bool] | None = None) -> None:
        self.model = model
        self.name = "model"
        # Pairing allows vocabularies that differ by up to 128 ids: the target can never produce
        # the drafter's extra ones, so a draft ends before one (exact: that position is then
        # sampled from the target's own distribution).
        self.target_vocab = target_vocab or model.n_vocab
        self.is_eog = is_eog or model.is_eog

    @property
    def passes(self) -> int:
        return self.model.passes

    def begin(self, context: Sequence[int], stop: threading.Event | None = None) -> None:
        # Read the prompt with the target's prefill, so drafting rounds price only drafting.
        have = self.model.sync(context[:-1])
        _read(self.model, context[have:-1], stop)

    def behind(self, context: Sequence[int]) -> int:
        return len(context) - self.model.common_prefix(context)

    def prime(self, opening: Sequence[int], stop: threading.Event | None = None) -> None:
        m = self.model
        if m.common_prefix(opening) < len(opening):  # a cache that holds it (and more) is kept whole
            _read(m, opening[m.sync(opening):], stop)

    def _catch_up(self, context: Sequence[int], draft: Draft, stop: threading.Event | None = None) -> list[int] | None:
        """Bring the cache to context[:-1] plus whatever the first draft step should read with the
        last token. A real backlog (after plain or lookup rounds) is read in one batch and timed
        apart; the usual one or two tokens (the correction or bonus, and the last draft token after
        a full accept) go with the first draft step, as they do in steady state."""
        m = self.model
        have = m.sync(context)
        if have == len(context):  # it already read everything: re-read the last token for its logits
            m.truncate(have - 1)
            have -= 1
        if len(context) - have > CATCHUP_MIN:
            t0 = time.perf_counter()
            read = _read(m, context[have:-1], stop, draft)
            draft.catchup_s, draft.catchup_tokens = time.perf_counter() - t0, read
            if have + read < len(context) - 1:
                return None  # stopped while reading: no draft this round
            have = len(context) - 1
        return list(context[have:])

    def propose(self, context: Sequence[int], request: DraftRequest, params: SamplingParams,
                rng: np.random.Generator, prune: Prune = keep_all, stop: threading.Event | None = None) -> Draft:
        k, p_min = request.model_k, request.p_min  # p_min: stop drafting below this top probability
        draft = Draft(key=MODEL_KEY, asked=k)
        if request.look > 0:
            self._look(context, request.look, draft, stop)
            return draft
        if k <= 0:
            return draft
        m = self.model
        unread = self._catch_up(context, draft, stop)
        if unread is None:
            return draft
        t0 = time.perf_counter()
        row = m.decode(unread, Logits.LAST)[0]
        draft.steps = 1
        _passed(m, draft)
        for i in range(k):
            if params.greedy:
                tok, prob = top_prob(row)
                dist = None
                if prob < p_min:
                    break
            else:
                dist = distribution(row, params)
                if dist.probs[0] < p_min:
                    break
                tok = dist.sample(rng)
                prob = dist.prob(tok)
            if tok >= self.target_vocab:
                break
            draft.tokens.append(tok)
            draft.q.append(dist)
            draft.q_probs.append(prob)
            if self.is_eog(tok) or i + 1 >= k or len(m.kv) >= m.n_ctx or (stop is not None and stop.is_set()):
                break  # nothing follows an end of generation; a stop request is honoured between steps
            row = m.decode([tok], Logits.LAST)[0]
            draft.steps += 1
            _passed(m, draft)
        draft.seconds = time.perf_counter() - t0
        return draft

    def _look(self, context: Sequence[int], n: int, draft: Draft, stop: threading.Event | None) -> None:
        """Read the backlog up to context[:-1], with logits for the rows that predict its last n tokens:
        greedy drafts from those positions keep exactly the tokens the argmax agrees on (with sampling, a
        close estimate). Timed as a catch-up; drafts nothing."""
        m = self.model
        have = m.sync(context[:-1])
        backlog = context[have : len(context) - 1]
        n = min(n, len(backlog), m.n_batch)
        # The judged rows come with the backlog's last block, in its pass: a pass of their own cost
        # the 0.5B drafter a fifth of a look here (147 ms against 119 for a 65-token prompt and 6 rows).
        last = min(len(backlog), READ_BLOCK, m.n_batch)  # holds the n judged tokens (n <= n_batch)
        t0 = time.perf_counter()
        read = _read(m, backlog[: len(backlog) - last], stop, draft)
        if last and read == len(backlog) - last and not (stop is not None and stop.is_set()):
            try:
                rows = m.decode(backlog[len(backlog) - last :], Logits.TAIL, tail=n)  # row i predicts context[-n + i]
            except Interrupted:
                rows = None
            if rows is not None:
                _passed(m, draft)
                read += last
                guesses = np.argmax(rows[:, : self.target_vocab], axis=1)
                draft.judged = look_windows([int(g) == int(t) for g, t in zip(guesses, context[-n:])])
        draft.catchup_s, draft.catchup_tokens = time.perf_counter() - t0, read

    def commit(self, context: Sequence[int]) -> None:
        # Keep the KV of drafted tokens the target accepted: they are never decoded twice.
        self.model.sync(context)

    def reset(self) -> None:
        self.model.clear()


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


class CombinedDrafter(Drafter):
    """Prompt lookup first; when it has nothing worth verifying, the model drafter."""

    uses_model = True

    def __init__(self, lookup: LookupDrafter, model: ModelDrafter) -> None:
        self.lookup, self.model = lookup, model
        self.name = "lookup+model"

    @property
    def passes(self) -> int:
        return self.model.passes

    def begin(self, context: Sequence[int], stop: threading.Event | None = None) -> None:
        self.lookup.begin(context)
        self.model.begin(context, stop)

    def reply_starts(self, at: int | None) -> None:
        self.lookup.reply_starts(at)

    def behind(self, context: Sequence[int]) -> int:
        return self.model.behind(context)

    def prime(self, opening: Sequence[int], stop: threading.Event | None = None) -> None:
        self.model.prime(opening, stop)

    def propose(self, context: Sequence[int], request: DraftRequest, params: SamplingParams,
                rng: np.random.Generator, prune: Prune = keep_all, stop: threading.Event | None = None) -> Draft:
        draft = self.lookup.propose(context, request, params, rng, prune, stop)
        if draft.tokens:
            return draft
        spent, aside = draft.seconds, draft.aside
        draft = self.model.propose(context, request, params, rng, prune, stop)
        draft.seconds += spent
        draft.aside = aside + draft.aside
        return draft

    def commit(self, context: Sequence[int]) -> None:
        self.model.commit(context)

    def reset(self) -> None:
        self.lookup.reset()
        self.model.reset()
