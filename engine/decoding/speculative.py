"""The speculative loop: draft, verify, accept, resample, rewind. Plain decoding is the same
loop with empty drafts.

Invariant between rounds: `ctx` is the prompt plus every emitted token; the target's KV cache
holds ctx[:-1] (the last token is scored at the start of the next round, together with the
draft), and the drafter's cache holds a prefix of ctx.
"""
from __future__ import annotations

import codecs
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, replace

import numpy as np

from engine.decoding.drafters import Draft, Drafter
from engine.errors import ContextFullError, EngineError
from engine.decoding.events import DoneEvent, Event, FinishReason, RoundEvent, TokenEvent, TokenSource
from engine.decoding.llama_backend import LlamaModel
from engine.decoding.policy import CostModel, DraftPolicy, NoDraft, RoundOutcome
from engine.decoding.sampling import SamplingParams, accept_draft_token, distribution, sample_residual, softmax_prob
from engine.decoding.stats import StatsTracker

_NO_DRAFT = Draft()


@dataclass(frozen=True, slots=True)
class Verdict:
    """The target's judgement of one draft."""

    accepted: int
    """Leading draft tokens kept."""
    next_token: int
    """The target's own token after them: a correction, a bonus, or a plain token."""
    p: list[float]
    """Target probability of each kept token and of next_token."""
    runner_up: list[tuple[int, float]] | None = None
    """Greedy: per emitted token, the target's second choice and its distance in logits."""


def judge_greedy(rows: np.ndarray, draft: Draft) -> Verdict:
    """Accept while the target's argmax equals the draft; then take the target's argmax."""
    accepted = 0
    for i, tok in enumerate(draft.tokens):
        if int(np.argmax(rows[i])) != tok:
            break
        accepted += 1
    nxt = int(np.argmax(rows[accepted]))
    kept = draft.tokens[:accepted] + [nxt]
    return Verdict(accepted, nxt, [softmax_prob(rows[i], t) for i, t in enumerate(kept)],
                   [_second_choice(rows[i]) for i in range(len(kept))])


def _second_choice(row: np.ndarray) -> tuple[int, float]:
    """The runner-up token and how far behind the winner it is (evidence for ties)."""
    two = np.argpartition(row, -2)[-2:]
    lo, hi = (two[0], two[1]) if row[two[0]] <= row[two[1]] else (two[1], two[0])
    return int(lo), float(row[hi]) - float(row[lo])


def judge_sampled(rows: np.ndarray, draft: Draft, params: SamplingParams, n_vocab: int, rng: np.random.Generator) -> Verdict:
    """Speculative sampling (Leviathan et al. 2023; Chen et al. 2023): keep x with probability
    min(1, p(x)/q(x)); at the first rejection sample norm(max(0, p - q)); after a full accept,
    sample the bonus from p. The output follows the target's distribution exactly."""
    probs: list[float] = []
    for i, tok in enumerate(draft.tokens):
        p = distribution(rows[i], params)
        q = draft.q[i]
        if not accept_draft_token(p, q, tok, rng):
            nxt = sample_residual(p, q, tok, n_vocab, rng)
            return Verdict(i, nxt, probs + [p.prob(nxt)])
        probs.append(p.prob(tok))
    p = distribution(rows[len(draft.tokens)], params)
    nxt = p.sample(rng)
    return Verdict(len(draft.tokens), nxt, probs + [p.prob(nxt)])


class _Text:
    """Incremental UTF-8: never emit half a character."""

    def __init__(self, model: LlamaModel) -> None:
        self.model = model
        self.decoder = codecs.getincrementaldecoder("utf-8")("replace")
        self.parts: list[str] = []

    def push(self, token: int) -> str:
        s = self.decoder.decode(self.model.piece(token))
        self.parts.append(s)
        return s

    def flush(self) -> str:
        s = self.decoder.decode(b"", final=True)
        self.parts.append(s)
        return s

    def alone(self, token: int) -> str:
        return self.model.piece(token).decode("utf-8", "replace")


def _settle(pending: tuple[RoundOutcome, float] | None, now: float, costs: CostModel) -> None:
    """Record a finished round's costs, its overhead being everything in the round that was
    neither drafting nor verifying (accepting, events, bookkeeping), consumer time excluded."""
    if pending is not None:
        o, start = pending
        overhead = max(0.0, now - start - o.draft_s - o.verify_s)
        costs.record(replace(o, overhead_s=overhead))
    return None


def generate(
    target: LlamaModel,
    prompt: Sequence[int],
    params: SamplingParams = SamplingParams(),
    drafter: Drafter | None = None,
    policy: DraftPolicy | None = None,
    max_tokens: int = 256,
    stop: threading.Event | None = None,
    costs: CostModel | None = None,
    note: str = "",
) -> Iterator[Event]:
    """Generate a reply to `prompt` (token ids), yielding the event stream."""
    if not prompt:
        raise EngineError("the prompt is empty")
    params.validate()
    policy = policy or NoDraft()
    costs = costs or CostModel()
    rng = np.random.default_rng(params.seed)
    if drafter is None:
        policy = NoDraft()
    stats = StatsTracker(policy.label, target, drafter)
    if len(prompt) >= target.n_ctx:
        raise ContextFullError(f"the prompt has {len(prompt)} tokens; the context holds {target.n_ctx}")

    # Prefill: the target reads the prompt, less the last token (scored with the first draft).
    t_prefill = time.perf_counter()
    reused = target.sync(prompt[:-1])
    for start in range(reused, len(prompt) - 1, target.n_batch):
        if stop is not None and stop.is_set():
            break  # a long prompt can take a while: a stop request is honoured between batches
        target.decode(prompt[start : min(start + target.n_batch, len(prompt) - 1)], "none")
    if drafter is not None and not (stop is not None and stop.is_set()):
        drafter.begin(prompt)
    stats.prefill_done(len(prompt), reused, time.perf_counter() - t_prefill)

    # Normally the whole prompt; after a stop during prefill, only what the target has read (+1).
    ctx = list(prompt[: len(target.kv) + 1])
    text = _Text(target)
    finish: FinishReason | None = None
    pending: tuple[RoundOutcome, float] | None = None
    round_no = 0
    emitted = 0
    try:
        while finish is None:
            if stop is not None and stop.is_set():
                finish = FinishReason.CANCELLED
                break
            room = target.n_ctx - len(ctx)  # the block [last, d1..dk] must fit
            if room < 0:
                finish = FinishReason.CONTEXT_FULL
                break
            round_no += 1
            t_round = stats.clock()
            pending = _settle(pending, t_round, costs)
            # 1. draft
            limit = min(room, max_tokens - emitted - 1)
            k, k_lookup = policy.choose_k(limit), policy.lookup_k(limit)
            draft = drafter.propose(ctx, k, params, rng, k_lookup) if (k > 0 or k_lookup > 0) else _NO_DRAFT
            keep_n = policy.prune(draft.key, len(draft.tokens)) if draft.tokens else 0
            if keep_n < len(draft.tokens):  # not worth verifying all of it
                draft = draft.truncated(keep_n)
            if draft.source == "lookup":
                k = k_lookup
            # 2. verify: one forward pass scores the last token and every drafted one
            t_verify = time.perf_counter()
            rows = target.decode([ctx[-1]] + draft.tokens, "all")
            verify_s = time.perf_counter() - t_verify
            # 3. accept, 4. resample
            if params.greedy:
                verdict = judge_greedy(rows, draft)
            else:
                verdict = judge_sampled(rows, draft, params, target.n_vocab, rng)
            n_draft = len(draft.tokens)
            assert 0 <= verdict.accepted <= n_draft  # every round yields at least one token
            new = draft.tokens[: verdict.accepted] + [verdict.next_token]
            last_source = (
                TokenSource.TARGET if n_draft == 0
                else TokenSource.BONUS if verdict.accepted == n_draft
                else TokenSource.CORRECTION
            )
            sources = [TokenSource.ACCEPTED] * verdict.accepted + [last_source]
            # Stop at an end-of-generation token or at max_tokens, inside the block if need be.
            keep = len(new)
            for i, tok in enumerate(new):
                if target.is_eog(tok):
                    keep, finish = i, FinishReason.STOP
                    break
                if emitted + i + 1 >= max_tokens:
                    keep, finish = i + 1, FinishReason.LENGTH
                    break
            ctx.extend(new[: keep + 1] if finish is FinishReason.STOP else new[:keep])  # keep the EOG itself
            # 5. rewind: both caches back to the accepted state
            target.truncate(len(ctx) - 1)
            if drafter is not None and n_draft:
                drafter.commit(ctx)
            rejected = draft.tokens[verdict.accepted :]
            outcome = RoundOutcome(
                k=k, drafted=n_draft, accepted=verdict.accepted, draft_s=draft.seconds, verify_s=verify_s,
                overhead_s=0.0,  # known once the round's events are out: see _settle
                key=draft.key,
            )
            pending = (outcome, t_round)
            policy.observe(outcome)
            stats.round_done(outcome, keep)
            tps, speedup = stats.live_rate(costs, keep)
            yield from stats.timed(RoundEvent(
                round=round_no, k=k, drafted=tuple(draft.tokens),
                drafted_text=tuple(text.alone(t) for t in draft.tokens), accepted=verdict.accepted,
                rejected=tuple(rejected), rejected_text=tuple(text.alone(t) for t in rejected),
                emitted=keep, draft_s=draft.seconds, verify_s=verify_s, drafter=draft.source if n_draft else "none",
                tokens_per_s=tps, estimated_speedup=speedup,
            ))
            for i in range(keep):
                tok = new[i]
                q = draft.q_probs[i] if i < verdict.accepted else None
                stats.token_emitted()
                second = verdict.runner_up[i] if verdict.runner_up else (None, None)
                yield from stats.timed(TokenEvent(
                    text=text.push(tok), token_id=tok, source=sources[i], round=round_no,
                    p=verdict.p[i], q=q, index=emitted, runner_up=second[0], margin=second[1],
                ))
                emitted += 1
    except ContextFullError:
        finish = FinishReason.CONTEXT_FULL
    finally:
        # Whatever happened (a consumer that stopped listening included), caches match `kv`.
        if len(target.kv) > len(ctx) - 1:
            target.truncate(len(ctx) - 1)
        if drafter is not None:
            drafter.commit(ctx)
    _settle(pending, stats.clock(), costs)
    text.flush()  # a reply cut inside a character ends with U+FFFD rather than lose the bytes
    yield DoneEvent(finish_reason=finish or FinishReason.STOP, text="".join(text.parts), stats=stats.finish(costs, note))
