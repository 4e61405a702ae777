"""A GGUF model of the target's family drafting for it: it reads what the target accepted, then drafts a step a token."""
from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence

import numpy as np

from engine.drafting.base import Draft, Drafter, Prune, keep_all
from engine.drafting.policy import look_windows
from engine.drafting.request import MODEL_KEY, DraftRequest
from engine.errors import Interrupted
from engine.llama.backend import LlamaModel
from engine.llama.calibration import judged_share
from engine.llama.types import Logits
from engine.sampling import SamplingParams, distribution, top_prob

#: Unread tokens up to this many are read with the first draft step rather than as a catch-up.
CATCHUP_MIN = 2

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
