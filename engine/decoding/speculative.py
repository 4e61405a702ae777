"""The speculative loop: draft, verify, accept, resample, rewind. Plain decoding is the same
loop with empty drafts.

Two layers, as mlx-lm's `generate_step` under `stream_generate`: `rounds()` yields one `Round` per
draft-verify round (token ids, what was drafted and kept, costs) and `generate()` turns those into
the event stream (text, stats, timings) that every consumer reads. A round's costs reach the cost
model through one step, engine.decoding.round_costs, once its events are out.

Invariant between rounds: `ctx` is the prompt plus every emitted token; the target's KV cache
holds ctx[:-1] (the last token is scored at the start of the next round, together with the
draft), and the drafter's cache holds a prefix of ctx.
"""
from __future__ import annotations

import codecs
import contextlib
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, replace

import numpy as np

from engine.decoding.events import DoneEvent, Event, FinishReason, RoundEvent, TokenEvent, TokenSource
from engine.decoding.round_costs import RoundCosts
from engine.decoding.stats import StatsTracker
from engine.decoding.stop_strings import StopText
from engine.decoding.verdict import ControlRounds
from engine.drafting.base import Draft, Drafter
from engine.drafting.costs import CostModel, RoundOutcome
from engine.drafting.policy import DraftPolicy, NoDraft
from engine.drafting.request import DraftKey
from engine.errors import ContextFullError, EngineError, Interrupted
from engine.llama.backend import LlamaModel
from engine.llama.calibration import judged_share
from engine.llama.types import Logits
from engine.sampling import (
    SamplingParams,
    accept_draft_token,
    distribution,
    sample_residual,
)

_NO_DRAFT = Draft()


@dataclass(frozen=True, slots=True)
class Judgement:
    """The target's judgement of one draft."""

    accepted: int
    """Leading draft tokens kept."""
    next_token: int
    """The target's own token after them: a correction, a bonus, or a plain token."""
    p: list[float]
    """Target probability of each kept token and of next_token."""
    runner_up: list[tuple[int, float]] | None = None
    """Greedy: per emitted token, the target's second choice and its distance in logits."""


def judge_greedy(rows: np.ndarray, draft: Draft) -> Judgement:
    """Accept while the target's argmax equals the draft; then take the target's argmax.

    Vectorised over the rows that emit a token, in float32 and in place: at a 152k vocabulary
    every full-row pass counts (the softmax denominator behind p is the one exp per row left)."""
    tops = rows.argmax(axis=1)
    accepted = 0
    for tok in draft.tokens:
        if tops[accepted] != tok:
            break
        accepted += 1
    m = accepted + 1
    used, top = rows[:m], tops[:m]
    idx = np.arange(m)
    best = used[idx, top]
    # The runner-up: hide the winner for one more argmax, then put it back (rows is llama.cpp's
    # logits buffer; nothing else reads it before the next decode, but leave it as found).
    used[idx, top] = -np.inf
    second = used.argmax(axis=1)
    used[idx, top] = best
    gaps = best - used[idx, second]
    work = np.subtract(used, best[:, None])
    np.exp(work, out=work)
    p = 1.0 / work.sum(axis=1).astype(np.float64)  # float32 pairwise sums: ~1e-7 relative
    return Judgement(accepted, int(top[-1]), p.tolist(),
                   list(zip(second.tolist(), gaps.astype(np.float64).tolist())))


def judge_sampled(rows: np.ndarray, draft: Draft, params: SamplingParams, n_vocab: int,
                  rng: np.random.Generator) -> Judgement:
    """Speculative sampling (Leviathan et al. 2023; Chen et al. 2023): keep x with probability
    min(1, p(x)/q(x)); at the first rejection sample norm(max(0, p - q)); after a full accept,
    sample the bonus from p. The output follows the target's distribution exactly."""
    probs: list[float] = []
    for i, tok in enumerate(draft.tokens):
        p = distribution(rows[i], params)
        q = draft.q[i]
        if not accept_draft_token(p, q, tok, rng):
            nxt = sample_residual(p, q, tok, n_vocab, rng)
            return Judgement(i, nxt, probs + [p.prob(nxt)])
        probs.append(p.prob(tok))
    p = distribution(rows[len(draft.tokens)], params)
    nxt = p.sample(rng)
    return Judgement(len(draft.tokens), nxt, probs + [p.prob(nxt)])


@dataclass(frozen=True, slots=True)
class Round:
    """One draft-verify round, at the level of token ids."""

    number: int
    draft: Draft
    judgement: Judgement
    tokens: list[int]
    """Tokens this round emits (cut at an end of generation, which is kept in the context, or at max_tokens)."""
    sources: list[TokenSource]
    outcome: RoundOutcome
    finish: FinishReason | None
    """Set on the round that ends the reply."""


# -- the five stages -------------------------------------------------------------------------------
def prefill(target: LlamaModel, prompt: Sequence[int], drafter: Drafter | None, policy: DraftPolicy,
            stop: threading.Event | None) -> tuple[list[int], int, float]:
    """The target reads the prompt less its last token (scored with the first draft); a drafter
    reads it too when the policy says so (Auto prices that read in its first round instead).
    Returns the context, the reused prefix and the seconds the drafter spent reading."""
    reused = target.sync(prompt[:-1])
    read_s = 0.0
    try:
        for start in range(reused, len(prompt) - 1, target.n_batch):
            if stop is not None and stop.is_set():
                break  # a long prompt can take a while: a stop request is honoured between batches
            target.decode(prompt[start : min(start + target.n_batch, len(prompt) - 1)], Logits.NONE)
        if drafter is not None and policy.reads_prompt and not (stop is not None and stop.is_set()):
            t0 = time.perf_counter()
            try:
                drafter.begin(prompt, stop)
            finally:
                read_s = time.perf_counter() - t0
    except Interrupted:
        pass  # and inside one (llama_backend.StopRequest): the cache holds what was read before it
    # Normally the whole prompt; after a stop during prefill, only what the target has read (+1).
    return list(prompt[: len(target.kv) + 1]), reused, read_s


def draft_step(drafter: Drafter | None, policy: DraftPolicy, ctx: list[int], limit: int, remaining: int,
               params: SamplingParams, rng: np.random.Generator, stop: threading.Event | None,
               p_min: float = 0.0, emitted: int = 0) -> Draft:
    """1. draft: what the policy asks for (with the reply's confidence cut-off `p_min`), pruned to what it
    thinks is worth verifying. `emitted`: the reply's tokens so far (a look judges those a drafter has not read)."""
    if drafter is None:
        return _NO_DRAFT
    behind = drafter.behind(ctx)
    request = policy.request(limit, behind, remaining, max(0, min(emitted, behind - 1)))
    if not request.any:
        return _NO_DRAFT
    if p_min:  # the policy chooses lengths; the cut-off is the reply's own
        request = replace(request, p_min=p_min)
    return drafter.propose(ctx, request, params, rng, policy.prune, stop)


def verify(target: LlamaModel, ctx: list[int], draft: Draft) -> tuple[np.ndarray, float]:
    """2. verify: one forward pass scores the last token and every drafted one."""
    t0 = time.perf_counter()
    rows = target.decode([ctx[-1]] + draft.tokens, Logits.ALL)
    return rows, time.perf_counter() - t0


def judge(rows: np.ndarray, draft: Draft, params: SamplingParams, n_vocab: int, rng: np.random.Generator) -> Judgement:
    """3. accept and 4. resample."""
    judgement = judge_greedy(rows, draft) if params.greedy else judge_sampled(rows, draft, params, n_vocab, rng)
    assert 0 <= judgement.accepted <= len(draft.tokens)  # every round yields at least one token
    return judgement


def judged_aside(aside: list[tuple[DraftKey, list[int]]], new: list[int]) -> tuple[tuple[DraftKey, int, int], ...]:
    """Each proposal pruned away unverified against the target's tokens of this round: (key, tokens
    judged, of those kept), as if it had been verified (its first wrong token ends what is judged)."""
    out = []
    for key, tokens in aside:
        judged = min(len(tokens), len(new))
        kept = next((i for i in range(judged) if tokens[i] != new[i]), judged)
        out.append((key, judged, kept))
    return tuple(out)


def cut(target: LlamaModel, new: list[int], emitted: int, max_tokens: int) -> tuple[int, FinishReason | None]:
    """Where the block ends: at an end-of-generation token or at max_tokens, inside it if need be."""
    for i, tok in enumerate(new):
        if target.is_eog(tok):
            return i, FinishReason.STOP
        if emitted + i + 1 >= max_tokens:
            return i + 1, FinishReason.LENGTH
    return len(new), None


def rewind(target: LlamaModel, drafter: Drafter | None, ctx: list[int]) -> None:
    """5. rewind: both caches back to the accepted state."""
    if len(target.kv) > len(ctx) - 1:
        target.truncate(len(ctx) - 1)
    if drafter is not None:
        drafter.commit(ctx)


def rounds(target: LlamaModel, ctx: list[int], *, params: SamplingParams, drafter: Drafter | None,
           policy: DraftPolicy, max_tokens: int, stop: threading.Event | None, rng: np.random.Generator,
           control: ControlRounds | None = None, p_min: float = 0.0) -> Iterator[Round]:
    """The token-level loop. `ctx` grows in place; whatever happens (a consumer that stops listening
    included), the caches are rewound to it."""
    try:
        yield from _loop(target, ctx, params=params, drafter=drafter, policy=policy, max_tokens=max_tokens, stop=stop,
                         rng=rng, control=control, p_min=p_min)
    except BaseException:
        with contextlib.suppress(Exception):
            rewind(target, drafter, ctx)  # never hide the error that got us here
        raise
    rewind(target, drafter, ctx)


def _loop(target: LlamaModel, ctx: list[int], *, params: SamplingParams, drafter: Drafter | None,
          policy: DraftPolicy, max_tokens: int, stop: threading.Event | None, rng: np.random.Generator,
          control: ControlRounds | None = None, p_min: float = 0.0) -> Iterator[Round]:
    emitted = 0
    number = 0
    # A block of k + 1 tokens must fit one llama_decode call.
    k_cap = max(0, target.n_batch - 1)
    while True:
        if stop is not None and stop.is_set():
            return
        room = target.n_ctx - len(ctx)  # the block [last, d1..dk] must fit
        if room < 0:
            raise ContextFullError("the context is full")
        number += 1
        limit = min(room, max_tokens - emitted - 1, k_cap)
        try:
            if control is not None and control.due(max_tokens - emitted):
                draft = _NO_DRAFT  # a plain round, so the verdict has V(1) from this minute (verdict.ControlRounds)
            else:
                draft = draft_step(drafter, policy, ctx, limit, max_tokens - emitted, params, rng, stop, p_min, emitted)
            if stop is not None and stop.is_set():
                return  # asked while drafting: the round ends before its verification pass
            rows, verify_s = verify(target, ctx, draft)
        except Interrupted:
            return  # a stop request ended a pass part-way: the round yields nothing, the caches are rewound
        depth = len(ctx) - 1  # where the block was verified, before the context grows
        share = judged_share(target.last_share, target.info.size)  # the verify pass's share of the CPU
        judgement = judge(rows, draft, params, target.n_vocab, rng)
        n_draft = len(draft.tokens)
        new = draft.tokens[: judgement.accepted] + [judgement.next_token]
        last = (TokenSource.TARGET if n_draft == 0
                else TokenSource.BONUS if judgement.accepted == n_draft else TokenSource.CORRECTION)
        keep, finish = cut(target, new, emitted, max_tokens)
        ctx.extend(new[: keep + 1] if finish is FinishReason.STOP else new[:keep])  # keep the EOG itself
        rewind(target, drafter if n_draft else None, ctx)
        # As measured here; the round's overhead is added once its events are out (engine.decoding.round_costs).
        outcome = RoundOutcome(
            k=draft.asked, drafted=n_draft, accepted=judgement.accepted, draft_s=draft.seconds, verify_s=verify_s,
            key=draft.key, catchup_s=draft.catchup_s, catchup_tokens=draft.catchup_tokens, share=share,
            aside=judged_aside(draft.aside, new) + draft.judged, depth=depth, threads=_fewer_threads(target),
            draft_steps=draft.steps, draft_share=draft.share,
        )
        policy.observe(outcome)
        if control is not None:
            control.observe(outcome, keep)
        yield Round(number, draft, judgement, new[:keep], ([TokenSource.ACCEPTED] * judgement.accepted + [last])[:keep],
                    outcome, finish)
        emitted += keep
        if finish is not None:
            return


class _Text:
    """Incremental UTF-8: never emit half a character."""

    def __init__(self, model: LlamaModel) -> None:
        self.model = model
        self.decoder = codecs.getincrementaldecoder("utf-8")("replace")

    def push(self, token: int) -> str:
        return self.decoder.decode(self.model.piece(token))

    def flush(self) -> str:
        return self.decoder.decode(b"", final=True)

    def alone(self, token: int) -> str:
        return self.model.piece(token).decode("utf-8", "replace")


@dataclass(frozen=True, slots=True)
class LoopOptions:
    """How generate() makes one reply: everything but the models and the live objects (stop flag, costs)."""

    sampling: SamplingParams = SamplingParams()
    """Greedy or sampled, and the sampler's settings."""
    max_tokens: int = 256
    """Longest reply."""
    note: str = ""
    """Anything the user should know, carried into the reply's Stats."""
    control: bool = False
    """Now and then a plain round among drafting ones where it costs next to nothing (verdict.ControlRounds)."""
    stop_strings: tuple[str, ...] = ()
    """Text that ends the reply, itself left out (engine.decoding.stop_strings); a round whose text may begin
    one is yielded once the next round tells, still followed by its own tokens."""
    p_min: float = 0.0
    """A model drafter stops drafting below this top probability (engine.drafting.policy.DraftRequest)."""
    reply_from: int | None = None
    """Where the reply starts in a rendered conversation, after the chat template's frame for it (None: raw
    text, which the reply continues); prompt lookup matches only within the reply."""


def generate(target: LlamaModel, prompt: Sequence[int], options: LoopOptions = LoopOptions(), *,
             drafter: Drafter | None = None, policy: DraftPolicy | None = None, stop: threading.Event | None = None,
             costs: CostModel | None = None) -> Iterator[Event]:
    """Generate a reply to `prompt` (token ids), yielding the event stream."""
    if not prompt:
        raise EngineError("the prompt is empty")
    params = options.sampling
    params.validate()
    policy = policy if (policy is not None and drafter is not None) else NoDraft()
    costs = costs or CostModel()
    costs.new_reply(depth=len(prompt))
    rng = np.random.default_rng(params.seed)
    stats = StatsTracker(policy.label, target, drafter, policy.rounds_seen)
    if len(prompt) >= target.n_ctx:
        raise ContextFullError(f"the prompt has {len(prompt)} tokens; the context holds {target.n_ctx}")

    if drafter is not None:
        drafter.reply_starts(options.reply_from)
    t_prefill = time.perf_counter()
    ctx, reused, read_s = prefill(target, prompt, drafter, policy, stop)
    # The drafter's read of the prompt is the reply's cost, not the prompt's: counted with the target's
    # prefill, a fixed k looked faster than plain decoding where it was far slower (short answers after
    # long conversations, k=4: 1.14x of plain in tokens/s, 0.45x with its read counted), and Auto, which
    # reads while decoding, was compared with it on less work.
    stats.prefill_done(len(prompt), reused, time.perf_counter() - t_prefill - read_s)

    text = _Text(target)
    watch: StopText[Round] = StopText(options.stop_strings)
    shown: list[str] = []  # the reply's text as emitted
    finish: FinishReason | None = None
    emitted = 0

    def round_events(r: Round, texts: list[str]) -> Iterator[Event]:
        nonlocal emitted
        tps, speedup, certainty = stats.live_rate(len(texts))
        draft, judgement = r.draft, r.judgement
        rejected = draft.tokens[judgement.accepted :]
        draft_s = draft.seconds + draft.catchup_s
        totals = stats.round_shown(len(draft.tokens), judgement.accepted, len(texts), draft_s, r.outcome.verify_s,
                                   draft.kind)
        yield from stats.timed(RoundEvent(
            round=r.number, k=r.outcome.k, drafted=tuple(draft.tokens),
            drafted_text=tuple(text.alone(t) for t in draft.tokens), accepted=judgement.accepted,
            rejected=tuple(rejected), rejected_text=tuple(text.alone(t) for t in rejected),
            emitted=len(texts), draft_s=draft_s, verify_s=r.outcome.verify_s,
            drafter=draft.kind, tokens_per_s=tps, estimated_speedup=speedup, certainty=certainty, totals=totals,
            threads=r.outcome.threads, looked=_looked(draft),
        ))
        for i, piece in enumerate(texts):
            tok = r.tokens[i]
            stats.token_emitted()
            second = judgement.runner_up[i] if judgement.runner_up else (None, None)
            shown.append(piece)
            yield from stats.timed(TokenEvent(
                text=piece, token_id=tok, source=r.sources[i], round=r.number,
                p=judgement.p[i], q=draft.q_probs[i] if i < judgement.accepted else None, index=emitted,
                runner_up=second[0], margin=second[1],
            ))
            emitted += 1

    accounts = RoundCosts(costs, stats.clock)
    # A seed with sampling promises the same text for the same k: control rounds fall where measured
    # times put them, and would move the stream's draws.
    repeatable = not params.greedy and params.seed is not None
    control = ControlRounds(costs) if options.control and policy.drafts and not repeatable else None
    steps = rounds(target, ctx, params=params, drafter=drafter, policy=policy, max_tokens=options.max_tokens, stop=stop,
                   rng=rng, control=control, p_min=options.p_min)
    try:
        for r in steps:
            finish = r.finish
            accounts.begin(r.outcome)
            stats.round_done(r.outcome, len(r.tokens), costs, ended=r.finish is FinishReason.STOP)
            for out in watch.push(r, [text.push(t) for t in r.tokens]):
                yield from round_events(out.unit, out.texts)
            accounts.settle()
            if watch.stopped:
                finish = FinishReason.STOP
                break
        if finish is None:
            finish = FinishReason.CANCELLED if stop is not None and stop.is_set() else FinishReason.STOP
    except ContextFullError:
        finish = FinishReason.CONTEXT_FULL
    finally:
        steps.close()  # caches rewound now, even when the consumer stopped listening
        accounts.close()
    for out in watch.flush():
        yield from round_events(out.unit, out.texts)
    if not watch.stopped:
        shown.append(text.flush())  # a reply cut inside a character ends with U+FFFD rather than lose the bytes
    yield DoneEvent(finish_reason=finish, text="".join(shown), stats=stats.finish(options.note))


def _looked(draft: Draft) -> tuple[int, int] | None:
    """(positions a look judged, of those the drafter guessed right: its judgements' first tokens), or None."""
    if not draft.judged:
        return None
    return len(draft.judged), sum(1 for _, _, kept in draft.judged if kept)


def _fewer_threads(model: LlamaModel) -> tuple[int, int] | None:
    """(threads, threads loaded) where the model's last pass ran on fewer than it was loaded with, else None."""
    ran, loaded = model.last_threads
    return (ran, loaded) if ran < loaded else None
