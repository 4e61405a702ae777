"""A drafter that rides the target (MTP): a Gemma 4 assistant drafts from the target's own hidden state.

Nothing to catch up on: the assistant shares the target's KV cache and starts each draft from the
target's hidden state at the position before its last token (engine.llama.mtp.Assistant), so `behind`
is always 0 and Auto prices it as a model drafter with no backlog. Where the target's last pass did not
compute that state (a prompt the cache held whole, a reply continued), the target reads that one token
again (a one-token catch-up): a round drafts the same whatever the cache held, so a seed gives the same
sampled reply.
"""
from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence

import numpy as np

from engine.drafting.base import Draft, Drafter, Prune, keep_all
from engine.drafting.request import MTP_KEY, DraftRequest
from engine.llama.calibration import judged_share
from engine.llama.mtp import Assistant
from engine.sampling import SamplingParams, distribution, top_prob


class MtpDrafter(Drafter):
    """Drafts with a Gemma 4 assistant bound to the target."""

    uses_model = True
    model_key = MTP_KEY

    def __init__(self, assistant: Assistant, target_vocab: int | None = None,
                 is_eog: Callable[[int], bool] | None = None) -> None:
        self.assistant = self.model = assistant  # `model`: what the stats count passes and decode time of
        self.name = "mtp"
        self.target_vocab = min(target_vocab or assistant.n_vocab, assistant.n_vocab)
        self.is_eog = is_eog or (lambda _tok: False)

    @property
    def passes(self) -> int:
        return self.assistant.passes

    def propose(self, context: Sequence[int], request: DraftRequest, params: SamplingParams,
                rng: np.random.Generator, prune: Prune = keep_all, stop: threading.Event | None = None) -> Draft:
        k, p_min = request.model_k, request.p_min
        draft = Draft(key=MTP_KEY, asked=k)
        a = self.assistant
        pos = len(context) - 1  # where the target's last token sits: every step of the round sits there
        if k <= 0 or pos < 1:
            return draft
        if not a.target_state(pos - 1):
            t0 = time.perf_counter()
            if not a.reread_target(pos - 1):
                return draft
            draft.catchup_s, draft.catchup_tokens = time.perf_counter() - t0, 1
        tok = context[-1]
        t0 = time.perf_counter()
        try:
            for i in range(k):
                row = a.step(tok, pos)
                draft.steps += 1
                draft.share = min(draft.share, judged_share(a.last_share, a.size))
                if params.greedy:
                    tok, prob = top_prob(row[: self.target_vocab])
                    dist = None
                    if prob < p_min:
                        break
                else:
                    dist = distribution(row[: self.target_vocab], params)
                    if dist.probs[0] < p_min:
                        break
                    tok = dist.sample(rng)
                    prob = dist.prob(tok)
                draft.tokens.append(tok)
                draft.q.append(dist)
                draft.q_probs.append(prob)
                if self.is_eog(tok) or (stop is not None and stop.is_set()):
                    break  # nothing follows an end of generation; a stop request is honoured between steps
        finally:
            a.forget_from(pos)
            draft.seconds = time.perf_counter() - t0
        return draft
