"""The speculative loop, held to references written here (mutation survivors of
engine/decoding/speculative.py).

References: logits rows and acceptance decisions worked out by hand (with the uniform numbers a
scripted generator hands out), the target's own plain decoding from an empty cache (its argmax
chain, its softmax, its runner-up), and drafters that stand in for real ones with values written
in the test. Times are only bounded by the wall time around the call, or read from a clock the
test controls; no speed is asserted. About 3 s on the 2-core machine.
"""
from __future__ import annotations

import math
import threading
import time
from types import SimpleNamespace

import numpy as np
import pytest

import engine.decoding.speculative as speculative
from engine.drafting.base import Draft, Drafter, keep_all
from engine.drafting.model import ModelDrafter
from engine.decoding.events import DoneEvent, FinishReason, RoundEvent, TokenEvent, TokenSource
from engine.drafting.draft_choice import DraftKind
from engine.llama.backend import LlamaModel
from engine.llama.types import LoadSettings, Logits
from engine.drafting.request import MODEL_KEY, DraftKey, DraftRequest
from engine.drafting.policy import AutoK, FixedK
from engine.drafting.costs import CostModel
from engine.sampling import Distribution, SamplingParams
from engine.decoding.speculative import (LoopOptions, _Text, cut, draft_step, generate, judge_greedy, judge_sampled,
                                         judged_aside)
from engine.errors import ContextFullError, EngineError
from test_exactness_greedy import eos_pair, sharp  # noqa: F401 (fixtures: a pair whose target ends its text early)
from llama_oracle import argmax_chain

ONE_THREAD = LoadSettings(n_ctx=256, n_threads=1, n_threads_batch=1)
GREEDY = SamplingParams()
FULL = SamplingParams(1.0, 0, 1.0, 0.0)  # temperature 1, nothing cut: p is the softmax of the row
PROMPT = "hello world the"


# -- judging, by hand ---------------------------------------------------------------------------------
def test_greedy_judgement_by_hand():
    rows = np.array([[1.0, 3.0, 2.0, 0.0], [0.5, 0.0, 2.5, 2.0], [4.0, 1.0, 1.0, 3.5]], dtype=np.float32)
    before = rows.copy()
    v = judge_greedy(rows, Draft([1, 3]))
    # row 0's argmax is the drafted 1; row 1's is 2, not the drafted 3: one kept, then the correction 2
    assert (v.accepted, v.next_token) == (1, 2)
    want = [1 / (math.exp(-2) + 1 + math.exp(-1) + math.exp(-3)), 1 / (math.exp(-2) + math.exp(-2.5) + 1 + math.exp(-0.5))]
    assert v.p == pytest.approx(want, rel=1e-6)
    assert v.runner_up == [(2, pytest.approx(1.0)), (3, pytest.approx(0.5))]
    np.testing.assert_array_equal(rows, before)  # llama.cpp's buffer is left as found


class Script:
    """A random generator that hands out the uniform numbers written in the test, in order."""

    def __init__(self, *u: float) -> None:
        self.u = list(u)

    def random(self) -> float:
        return self.u.pop(0)


def rows_of(*probs) -> np.ndarray:
    """Logits whose softmax is each of `probs`."""
    return np.log(np.array(probs, dtype=np.float64)).astype(np.float32)


ROWS = rows_of([0.1, 0.6, 0.2, 0.1], [0.25, 0.25, 0.25, 0.25], [0.7, 0.1, 0.1, 0.1])


def test_a_model_draft_kept_then_rejected_by_hand():
    q0 = Distribution(np.array([1, 0, 2, 3]), np.array([0.8, 0.1, 0.05, 0.05]))
    q1 = Distribution(np.array([2, 0, 1, 3]), np.array([0.5, 0.4, 0.05, 0.05]))
    draft = Draft([1, 2], [q0, q1], [0.8, 0.5])
    # token 1: kept when u q(1) < p(1): 0.7 * 0.8 = 0.56 < 0.6. Token 2: 0.6 * 0.5 = 0.3 >= p(2) = 0.25,
    # rejected; the residual max(0, p - q) = (0, 0.2, 0, 0.2) over ids 0..3 halves between 1 and 3,
    # and u = 0.3 takes the first half: token 1 (p without the drafted token would give token 0)
    v = judge_sampled(ROWS, draft, FULL, 4, Script(0.7, 0.6, 0.3))
    assert (v.accepted, v.next_token) == (1, 1)
    assert v.p == pytest.approx([0.6, 0.25], rel=1e-6)


def test_a_lookup_draft_rejected_by_hand():
    # a lookup token is a point mass: 0 kept when u < p(0) = 0.7; u = 0.9 rejects it, and the residual
    # is p without 0: 1, 2, 3 a third each; u = 0.5 takes token 2 (with 0 left in, token 0)
    v = judge_sampled(ROWS[2:], Draft([0], [None], [1.0]), FULL, 4, Script(0.9, 0.5))
    assert (v.accepted, v.next_token) == (0, 2) and v.p == pytest.approx([0.1], rel=1e-6)


def test_a_full_accept_samples_the_bonus_from_the_next_row_by_hand():
    q0 = Distribution(np.array([1, 0, 2, 3]), np.array([0.8, 0.1, 0.05, 0.05]))
    # kept (0.1 * 0.8 < 0.6); the bonus from row 1, uniform: u = 0.9 is past three quarters, token 3
    v = judge_sampled(ROWS, Draft([1], [q0], [0.8]), FULL, 4, Script(0.1, 0.9))
    assert (v.accepted, v.next_token) == (1, 3) and v.p == pytest.approx([0.6, 0.25], rel=1e-6)


def test_where_a_block_is_cut():
    target = SimpleNamespace(is_eog=lambda t: t == 2)
    assert cut(target, [5, 6, 7], 0, 2) == (2, FinishReason.LENGTH)  # max_tokens inside the block
    assert cut(target, [5, 6, 7], 4, 6) == (2, FinishReason.LENGTH)
    assert cut(target, [5, 2, 7], 0, 10) == (1, FinishReason.STOP)  # the end of generation is not emitted
    assert cut(target, [5, 6], 3, 10) == (2, None)


class StubDrafter(Drafter):
    """Answers every proposal with `tokens` (as many as asked), timed and keyed as given."""

    def __init__(self, tokens=(), behind: int = 0, **draft) -> None:
        self.tokens, self._behind, self.draft, self.calls = list(tokens), behind, draft, []

    def behind(self, context) -> int:
        return self._behind

    def propose(self, context, request, params, rng, prune=keep_all, stop=None):
        self.calls.append((list(context), request, params, rng, prune, stop))
        n = min(len(self.tokens), max(request.model_k, request.lookup_k))
        return Draft(self.tokens[:n], [None] * n, [0.5] * n, **self.draft)


class Recording(FixedK):
    """A fixed k that writes down what it was asked and what it observed."""

    def __init__(self, k: int) -> None:
        super().__init__(k)
        self.requests, self.outcomes = [], []

    def request(self, limit, behind=0, remaining=None, judgeable=0):
        self.requests.append((limit, behind, remaining))
        return super().request(limit, behind, remaining)

    def observe(self, outcome) -> None:
        self.outcomes.append(outcome)


def test_a_draft_step_asks_the_policy_with_the_drafters_backlog_and_passes_the_stop_on():
    drafter, policy, stop, rng = StubDrafter([4, 5, 6], behind=7), Recording(2), threading.Event(), np.random.default_rng(0)
    draft = draft_step(drafter, policy, [1, 2, 3], 5, 9, GREEDY, rng, stop)
    assert policy.requests == [(5, 7, 9)] and draft.tokens == [4, 5]
    assert drafter.calls == [([1, 2, 3], DraftRequest(2, 2), GREEDY, rng, policy.prune, stop)]


# -- text ------------------------------------------------------------------------------------------------
def test_half_a_character_is_shown_as_a_replacement(models):
    target = models["target"]
    lead, _ = [t for t in target.tokenize("é", add_special=False) if target.piece(t) != b" "]
    text = _Text(target)
    assert text.push(lead) == "" and text.flush() == "\ufffd"  # a reply cut inside a character
    assert _Text(target).alone(lead) == "\ufffd"  # a drafted byte on its own


# -- the loop on tiny models -----------------------------------------------------------------------------
@pytest.fixture(scope="module")
def models(tiny):
    """The tiny target and drafter under test, and a second target: the reference."""
    m = {k: LlamaModel(tiny[k if k != "oracle" else "target"], ONE_THREAD) for k in ("target", "drafter", "oracle")}
    yield m
    for x in m.values():
        x.close()


@pytest.fixture
def fresh(models):
    for m in models.values():
        m.clear()
    return models


def plain_rows(oracle: LlamaModel, prompt: list[int], tokens: list[int]) -> list[np.ndarray]:
    """The target's logits before each of `tokens` (and after the last), decoded from an empty cache."""
    oracle.clear()
    rows = [np.array(oracle.decode(prompt, Logits.LAST)[0], dtype=np.float64)]
    for t in tokens:
        if len(oracle.kv) == oracle.n_ctx:
            break
        rows.append(np.array(oracle.decode([t], Logits.LAST)[0], dtype=np.float64))
    oracle.clear()
    return rows


class RecordingCosts(CostModel):
    def __init__(self) -> None:
        super().__init__()
        self.add_verify(1, 0.01)  # a price for plain decoding from the start: speedups are estimated
        self.records = []

    def record(self, o) -> None:
        self.records.append(o)
        super().record(o)


def prompt_of(models) -> list[int]:
    return models["target"].tokenize(PROMPT, add_special=True)


def test_rounds_and_tokens_are_numbered_priced_and_explained(fresh):
    # several lengths, so that max_tokens cuts some round's draft short
    assert sum(reply_checked(fresh, n) for n in (7, 8, 9, 10)) > 0


def reply_checked(fresh, max_tokens: int) -> int:
    """Checks one reply; returns how many of its rounds drafted fewer than k tokens."""
    for m in fresh.values():
        m.clear()
    target, dm, oracle = fresh["target"], fresh["drafter"], fresh["oracle"]
    prompt, k = prompt_of(fresh), 3
    drafter, policy, costs = ModelDrafter(dm, is_eog=lambda t: False), Recording(k), RecordingCosts()
    events, snapshots = [], []
    t0 = time.perf_counter()
    for e in generate(target, prompt, LoopOptions(GREEDY, max_tokens=max_tokens), drafter=drafter, policy=policy,
                      costs=costs):
        events.append(e)
        if isinstance(e, RoundEvent):
            snapshots.append(list(dm.kv))
    wall = time.perf_counter() - t0
    rounds = [e for e in events if isinstance(e, RoundEvent)]
    tokens = [e for e in events if isinstance(e, TokenEvent)]
    done = events[-1]
    assert isinstance(done, DoneEvent) and done.finish_reason is FinishReason.LENGTH
    ids = [e.token_id for e in tokens]
    assert ids == argmax_chain(oracle, prompt, max_tokens)
    # numbered from 1 and from 0, max_tokens in all
    assert [r.round for r in rounds] == list(range(1, len(rounds) + 1)) and len(rounds) >= 2
    assert [e.index for e in tokens] == list(range(max_tokens)) and done.stats.tokens == max_tokens
    # each round drafts k, or fewer where max_tokens leaves less room: a block never runs past it
    emitted, binding = 0, 0
    for r in rounds:
        assert len(r.drafted) == min(k, max_tokens - emitted - 1), (r, emitted)
        binding += len(r.drafted) < k
        emitted += r.emitted
    # p, the runner-up and its margin: the target's own softmax and second choice, decoded alone
    for e, row in zip(tokens, plain_rows(oracle, prompt, ids)):
        order = np.argsort(-row, kind="stable")
        assert e.token_id == order[0] and e.runner_up == order[1]
        # (a block's rows and one-token rows differ in float32 rounding: about 1e-5 in p)
        assert e.p == pytest.approx(1.0 / np.exp(row - row.max()).sum(), rel=1e-3)
        assert e.margin == pytest.approx(row[order[0]] - row[order[1]], rel=1e-3, abs=1e-3)
    # what was drafted, shown as text: the kept part reads as the kept tokens do
    by_round = {r.round: [e.text for e in tokens if e.round == r.round] for r in rounds}
    for r in rounds:
        assert len(r.drafted_text) == len(r.drafted) and list(r.drafted_text[: r.accepted]) == by_round[r.round][: r.accepted]
    assert done.text == "".join(e.text for e in tokens)
    # times: positive parts of the wall time; every round's costs reach the cost model handed in
    assert all(0.0 < r.verify_s and r.tokens_per_s > 0.0 and r.estimated_speedup is not None for r in rounds)
    assert sum(r.verify_s for r in rounds) <= wall and 0.0 < done.stats.prefill_s <= done.stats.wall_s <= wall
    assert len(costs.records) == len(rounds) == len(policy.outcomes)
    overheads = [o.overhead_s for o in costs.records]
    assert all(0.0 <= s for s in overheads) and 0.0 < sum(overheads) <= wall
    assert all(o.overhead_s == 0.0 for o in policy.outcomes)  # the policy judges a round before its events are out
    assert done.stats.draft_mode == "fixed k=3"
    # the drafter's cache holds a prefix of the context at every round and after the reply
    context = prompt + ids
    assert all(s == context[: len(s)] for s in snapshots + [list(dm.kv)]), (snapshots, context)
    return binding


class FakeTime:
    """speculative's clock, 100 s later at every reading (the verify pass takes 100 s by it)."""

    def __init__(self) -> None:
        self.t = 0.0

    def perf_counter(self) -> float:
        self.t += 100.0
        return time.perf_counter() + self.t


# Drafting and catch-up as the drafter reports them (seconds written here, far longer than the
# round really took), or verifying as a clock 100 s later at every reading says it took.
@pytest.mark.parametrize("draft_s,catchup_s,slow_clock", [(7.0, 5.0, False), (5.0, 7.0, False), (0.0, 0.0, True)])
def test_a_rounds_costs_as_the_drafter_and_the_clock_report_them(fresh, monkeypatch, draft_s, catchup_s, slow_clock):
    target, oracle = fresh["target"], fresh["oracle"]
    prompt = prompt_of(fresh)
    chain = argmax_chain(oracle, prompt, 12)
    # a wrong proposal at every third position: kept tokens and corrections both
    proposals = [t if i % 3 != 2 else (t + 1) % target.n_vocab for i, t in enumerate(chain)]

    class Following(StubDrafter):
        def propose(self, context, request, params, rng, prune=keep_all, stop=None):
            self.tokens = proposals[len(context) - len(prompt):][:1]
            return super().propose(context, request, params, rng, prune, stop)

    key = DraftKey(DraftKind.LOOKUP, 2)
    drafter = Following(seconds=draft_s, catchup_s=catchup_s, catchup_tokens=3, key=key, asked=1)
    policy, costs = Recording(1), RecordingCosts()
    if slow_clock:
        monkeypatch.setattr(speculative, "time", FakeTime())
    events = list(generate(target, prompt, LoopOptions(GREEDY, max_tokens=8), drafter=drafter, policy=policy,
                           costs=costs))
    rounds = [e for e in events if isinstance(e, RoundEvent)]
    tokens = [e for e in events if isinstance(e, TokenEvent)]
    assert [e.token_id for e in tokens] == chain[:8]
    drafted = [r for r in rounds if r.drafted]
    assert len(drafted) >= 4 and all(r.verify_s >= 100.0 for r in rounds) == slow_clock
    assert all(r.draft_s == draft_s + catchup_s and r.drafter is DraftKind.LOOKUP for r in drafted)
    outcomes = [o for o in policy.outcomes if o.drafted]
    assert len(outcomes) == len(drafted)
    for o in outcomes:
        assert (o.key, o.k, o.drafted, o.draft_s, o.catchup_s, o.catchup_tokens) == (key, 1, 1, draft_s, catchup_s, 3)
    # drafting, catch-up and verifying took longer than the round by these clocks: no overhead left
    assert [o.overhead_s for o in costs.records if o.drafted or slow_clock] == [0.0] * (len(drafted) if not slow_clock else len(rounds))
    kept = [e for e in tokens if e.source is TokenSource.ACCEPTED]
    assert kept and all(e.q == 0.5 for e in kept) and all(e.q is None for e in tokens if e.source is not TokenSource.ACCEPTED)
    assert any(r.accepted == 0 for r in rounds)


def test_proposals_set_aside_are_judged_by_hand():
    look, hist = DraftKey(DraftKind.LOOKUP, 5), DraftKey(DraftKind.HISTORY, 2)
    assert judged_aside([], [7]) == ()
    # a plain round emits one token: only a proposal's first is judged
    assert judged_aside([(look, [7, 8]), (hist, [6])], [7]) == ((look, 1, 1), (hist, 1, 0))
    # three emitted: judged up to the first wrong token, or as far as both go
    assert judged_aside([(look, [7, 8, 1, 9]), (hist, [7, 8])], [7, 8, 9]) == ((look, 3, 2), (hist, 2, 2))
    assert judged_aside([(look, [4, 8, 9])], [7, 8, 9]) == ((look, 3, 0),)


def test_a_free_draft_pruned_away_is_judged_by_the_tokens_its_round_emitted(fresh):
    target, oracle = fresh["target"], fresh["oracle"]
    prompt = prompt_of(fresh)
    chain = argmax_chain(oracle, prompt, 12)
    look, hist = DraftKey(DraftKind.LOOKUP, 5), DraftKey(DraftKind.HISTORY, 2)

    class Aside(StubDrafter):
        def propose(self, context, request, params, rng, prune=keep_all, stop=None):
            rest = chain[len(context) - len(prompt):]
            # the model drafts the next two right; lookup had two right then a wrong one, history a wrong one
            d = Draft(rest[:2], [None, None], [0.5, 0.5], key=MODEL_KEY, asked=2)
            d.aside = [(look, rest[:2] + [(rest[2] + 1) % target.n_vocab]), (hist, [(rest[0] + 1) % target.n_vocab])]
            return d

    policy = Recording(2)
    tokens = [e.token_id for e in generate(target, prompt, LoopOptions(GREEDY, max_tokens=9), drafter=Aside(),
                                           policy=policy) if isinstance(e, TokenEvent)]
    assert tokens == chain[:9]
    assert [(o.drafted, o.accepted, o.aside) for o in policy.outcomes] == [(2, 2, ((look, 3, 2), (hist, 1, 0)))] * 3


def test_a_round_whose_consumer_stops_listening_is_still_priced(fresh):
    for m in fresh.values():
        m.clear()
    drafter, policy, costs = ModelDrafter(fresh["drafter"], is_eog=lambda t: False), Recording(3), RecordingCosts()
    events = generate(fresh["target"], prompt_of(fresh), LoopOptions(GREEDY, max_tokens=12), drafter=drafter,
                      policy=policy, costs=costs)
    first = next(e for e in events if isinstance(e, TokenEvent))
    events.close()  # as a consumer that stops reading after the first token
    assert first.round == 1 and len(costs.records) == 1
    assert costs.records[0] == policy.outcomes[0] and costs.records[0].drafted == 3


def test_the_drafter_reads_the_prompt_with_the_target_and_is_handed_the_stop(fresh):
    target, dm = fresh["target"], fresh["drafter"]
    seen = []

    class Watching(ModelDrafter):
        def propose(self, context, request, params, rng, prune=keep_all, stop=None):
            seen.append(stop)
            return super().propose(context, request, params, rng, prune, stop)

    policy, stop = Recording(3), threading.Event()
    events = list(generate(target, prompt_of(fresh), LoopOptions(GREEDY, max_tokens=10),
                           drafter=Watching(dm, is_eog=lambda t: False), policy=policy, stop=stop))
    assert events[-1].finish_reason is FinishReason.LENGTH and seen and all(s is stop for s in seen)
    # the prompt was read at prefill: no round, the first included, starts with a catch-up
    assert [o.catchup_tokens for o in policy.outcomes] == [0] * len(policy.outcomes)
    # each round is told what the reply may still emit: 10 less what the rounds before it emitted
    emitted = [0]
    for o in policy.outcomes[:-1]:
        emitted.append(emitted[-1] + o.accepted + 1)
    assert [r[2] for r in policy.requests] == [10 - e for e in emitted]


def test_auto_leaves_the_prompt_to_its_first_round_and_pays_for_it_there(fresh):
    target, dm = fresh["target"], fresh["drafter"]
    prompt = prompt_of(fresh)
    for policy, read in ((FixedK(2), len(prompt) - 1), (AutoK(CostModel()), 0)):
        target.clear(), dm.clear()
        speculative.prefill(target, prompt, ModelDrafter(dm), policy, None)
        assert len(dm.kv) == read, policy.label
    # Auto drafting from the first round (reading is cheap here): that round reads the prompt, priced
    costs = RecordingCosts()
    for n in (1, 2, 3, 4):
        costs.add_verify(n, 0.1)
    costs.draft_per_token.add(0.001)
    costs.catchup.add(len(prompt) - 1, 0.001)
    target.clear(), dm.clear()
    auto = AutoK(costs, k_max=3)
    list(generate(target, prompt, LoopOptions(GREEDY, max_tokens=8), drafter=ModelDrafter(dm, is_eog=lambda t: False),
                  policy=auto, costs=costs))
    first = costs.records[0]
    assert first.drafted == 3 and first.catchup_tokens == len(prompt) - 1 and first.catchup_s > 0.0
    assert all(o.catchup_tokens == 0 for o in costs.records[1:])


def test_a_stop_before_the_prompt_is_read_leaves_the_drafter_idle(fresh):
    target, dm = fresh["target"], fresh["drafter"]
    stop = threading.Event()
    stop.set()
    before = dm.passes
    events = list(generate(target, prompt_of(fresh), LoopOptions(GREEDY, max_tokens=10), drafter=ModelDrafter(dm),
                           policy=FixedK(3), stop=stop))
    assert events[-1].finish_reason is FinishReason.CANCELLED
    assert dm.passes == before and dm.kv == [] and target.kv == []


def test_a_failing_round_still_rewinds_the_drafter(fresh, monkeypatch):
    target, dm = fresh["target"], fresh["drafter"]
    prompt = prompt_of(fresh)

    def broken(token):
        raise EngineError("the end-of-generation check broke")

    monkeypatch.setattr(target, "is_eog", broken)  # after the drafter drafted and the target verified
    with pytest.raises(EngineError, match="check broke"):
        list(generate(target, prompt, LoopOptions(GREEDY, max_tokens=10),
                      drafter=ModelDrafter(dm, is_eog=lambda t: False), policy=FixedK(4)))
    monkeypatch.undo()
    assert dm.kv == prompt[: len(dm.kv)] and target.kv == prompt[:-1]


def test_the_prompt_is_reused_as_far_as_the_cache_holds_it(fresh):
    target, oracle = fresh["target"], fresh["oracle"]
    prompt = prompt_of(fresh)
    first = list(generate(target, prompt, LoopOptions(GREEDY, max_tokens=5)))
    reply = [e.token_id for e in first if isinstance(e, TokenEvent)]
    again = list(generate(target, prompt, LoopOptions(GREEDY, max_tokens=5)))  # the same prompt: all but its last token
    assert again[-1].stats.prompt_tokens_reused == len(prompt) - 1
    # one token more than the last reply: the cache lacks the reply's last token and this one
    longer = prompt + reply + [target.tokenize(" the", add_special=False)[-1]]
    target.clear()
    list(generate(target, prompt, LoopOptions(GREEDY, max_tokens=5)))
    warm = list(generate(target, longer, LoopOptions(GREEDY, max_tokens=6)))
    assert warm[-1].stats.prompt_tokens_reused == len(longer) - 2
    assert [e.token_id for e in warm if isinstance(e, TokenEvent)] == argmax_chain(oracle, longer, 6)


@pytest.mark.parametrize("k", [0, 4])
def test_a_reply_fills_the_context_to_the_last_token(fresh, k):
    target, dm, oracle = fresh["target"], fresh["drafter"], fresh["oracle"]
    prompt = target.tokenize("hello world " * 40, add_special=True)
    drafter = ModelDrafter(dm, is_eog=lambda t: False) if k else None
    events = list(generate(target, prompt, LoopOptions(GREEDY, max_tokens=1000), drafter=drafter, policy=FixedK(k)))
    ids = [e.token_id for e in events if isinstance(e, TokenEvent)]
    # the last token is scored with the cache full: n_ctx + 1 tokens of context in all (plain decoding
    # gets there one token a round; drafts are cut to the room left)
    assert events[-1].finish_reason is FinishReason.CONTEXT_FULL
    assert ids == argmax_chain(oracle, prompt, target.n_ctx + 1 - len(prompt))
    assert len(ids) == target.n_ctx + 1 - len(prompt)


def test_a_batch_of_one_token_leaves_no_room_to_draft(tiny, models):
    target = LlamaModel(tiny["target"], LoadSettings(n_ctx=256, n_batch=1, n_threads=1, n_threads_batch=1))
    try:
        prompt = target.tokenize(PROMPT, add_special=True)
        models["drafter"].clear()
        events = list(generate(target, prompt, LoopOptions(GREEDY, max_tokens=6),
                               drafter=ModelDrafter(models["drafter"]), policy=FixedK(3)))
        assert all(r.drafted == () for r in events if isinstance(r, RoundEvent))
        assert [e.token_id for e in events if isinstance(e, TokenEvent)] == argmax_chain(models["oracle"], prompt, 6)
    finally:
        target.close()


@pytest.mark.parametrize("drafts", ["model", "the target's own text"])
def test_after_an_end_of_generation_the_cache_holds_the_reply_without_it(eos_pair, drafts):  # noqa: F811
    """The model drafter ends its draft with the EOG (the bonus follows it); a drafter proposing the
    target's own text, EOG and what follows it included, puts the EOG after tokens of its block."""
    paths, prompt, chain = eos_pair
    target, dm = LlamaModel(paths["sharp-target"], ONE_THREAD), LlamaModel(paths["sharp-drafter"], ONE_THREAD)

    class Following(StubDrafter):
        def propose(self, context, request, params, rng, prune=keep_all, stop=None):
            self.tokens = chain[len(context) - len(prompt):]
            return super().propose(context, request, params, rng, prune, stop)

    drafter = ModelDrafter(dm, is_eog=target.is_eog) if drafts == "model" else Following()
    try:
        events = list(generate(target, prompt, LoopOptions(GREEDY, max_tokens=16), drafter=drafter, policy=FixedK(4)))
        assert events[-1].finish_reason is FinishReason.STOP
        reply = [e.token_id for e in events if isinstance(e, TokenEvent)]
        last = [e for e in events if isinstance(e, RoundEvent)][-1]
        assert reply == chain[: chain.index(2)]
        # drafted, or inside a block after tokens it emits
        assert 2 in last.drafted if drafts == "model" else last.emitted >= 1
        assert target.kv == prompt + reply  # the context ends with the EOG: the cache holds all before it
        assert dm.kv == (prompt + reply + [2])[: len(dm.kv)]
    finally:
        target.close()
        dm.close()


def test_generate_checks_its_prompt_and_its_defaults(fresh):
    target = fresh["target"]
    with pytest.raises(EngineError, match="^the prompt is empty$"):
        list(generate(target, []))
    full = [1] + [300] * (target.n_ctx - 1)
    with pytest.raises(ContextFullError, match=f"^the prompt has {target.n_ctx} tokens; the context holds {target.n_ctx}$"):
        list(generate(target, full))
    target.clear()
    # a policy without a drafter drafts nothing and says so
    done = list(generate(target, prompt_of(fresh), LoopOptions(GREEDY, max_tokens=3), drafter=None,
                         policy=FixedK(3)))[-1]
    assert done.stats.draft_mode == "none" and done.stats.drafted == 0


def test_generate_by_default_is_plain_greedy_for_256_tokens(tiny, models):
    target = LlamaModel(tiny["target"], LoadSettings(n_ctx=512, n_threads=1, n_threads_batch=1))
    try:
        prompt = target.tokenize(PROMPT, add_special=True)
        events = list(generate(target, prompt))
        ids = [e.token_id for e in events if isinstance(e, TokenEvent)]
        assert events[-1].finish_reason is FinishReason.LENGTH and len(ids) == 256
        assert ids[:20] == argmax_chain(models["oracle"], prompt, 20) and events[-1].stats.note == ""
    finally:
        target.close()
