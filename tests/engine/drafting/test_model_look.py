"""A model drafter nothing has judged yet looks before it drafts (DraftRequest.look): it reads its
backlog and its own next-token predictions of the reply's last tokens, judged against the target's,
teach Auto what a first draft would have, for the read alone.

Checked against values written here, against the drafter decoded one token at a time (another path
through llama.cpp than the look's batched read), and on a real reply of the tiny pair."""
from __future__ import annotations

import threading

import numpy as np
import pytest

from engine.drafting.base import Draft
from engine.drafting.model import ModelDrafter
from engine.drafting.draft_choice import DraftKind
from engine.llama.backend import LlamaModel
from engine.llama.types import Logits, LoadSettings
from engine.drafting.policy import (
    LOOK_AGAIN,
    LOOK_CLEAR,
    LOOK_MAX,
    LOOK_TOKENS,
    LOOK_WINDOW,
    LOOKS,
    AutoK,
    NoDraft,
    look_windows,
)
from engine.drafting.request import MODEL_KEY, DraftKey, DraftRequest
from engine.drafting.costs import CostModel, RoundOutcome
from engine.sampling import SamplingParams
from engine.decoding.speculative import prefill, rounds


def test_a_looks_judgements_are_a_draft_of_four_from_every_position():
    assert LOOK_WINDOW == 4
    agree = [True, True, False, True, True, True, True, True, False]
    assert look_windows(agree) == ((MODEL_KEY, 4, 2), (MODEL_KEY, 4, 1), (MODEL_KEY, 4, 0), (MODEL_KEY, 4, 4), (MODEL_KEY, 4, 4),
                                   (MODEL_KEY, 4, 3), (MODEL_KEY, 3, 2), (MODEL_KEY, 2, 1), (MODEL_KEY, 1, 0))
    assert look_windows([]) == ()
    lk = DraftKey(DraftKind.LOOKUP, 2)
    assert look_windows([True] * 3, lk) == ((lk, 3, 3), (lk, 2, 2), (lk, 1, 1))  # near the end, what is known


def blocks(verify: dict[int, float]) -> CostModel:
    """A drafter at 5% of a target step and cheap reads: on its prior (0.8) a model drafter is worth drafting."""
    c = CostModel()
    for n, v in verify.items():
        c.add_verify(n, v)
    c.draft_per_token.add(0.005)
    for n, v in ((16, 0.005), (64, 0.01), (512, 0.05)):
        c.catchup.add(n, v)
    c.plain_overhead.add(0.0)
    return c


#: A CPU's: a wholly rejected 16-token draft costs over 3 plain rounds (AutoK.cautious).
CPU = {1: 0.1, 2: 0.16, 4: 0.19, 8: 0.24, 16: 0.3, 17: 0.31}
#: A GPU's: blocks cost next to one token.
GPU = {1: 0.1, 2: 0.102, 4: 0.106, 8: 0.114, 16: 0.13, 17: 0.131}


def test_auto_looks_at_an_unjudged_model_drafter_once_the_reply_has_tokens_to_judge():
    auto = AutoK(blocks(CPU))
    assert auto.cautious()
    # The prompt (100 tokens) is unread: no draft on the prior; a look once 12 reply tokens are in the backlog.
    assert LOOK_TOKENS == 12
    for judgeable in range(LOOK_TOKENS):
        assert auto.request(16, 101 + judgeable, 200, judgeable) == DraftRequest(0, 16)
    assert auto.request(16, 113, 200, 12) == DraftRequest(0, 16, look=12)
    assert auto.request(16, 14, 200, 12) == DraftRequest(0, 16, look=12)  # one token not the reply's: still a read
    assert auto.request(16, 140, 200, 39) == DraftRequest(0, 16, look=LOOK_MAX)
    # A drafter with nothing to read (the backlog is the reply's own tokens) drafts on its prior.
    assert auto.request(16, 13, 200, 12).model_k > 0
    assert auto.request(16, 1, 200, 0).model_k > 0


def test_where_blocks_cost_next_to_one_token_the_prior_drafts_at_once():
    auto = AutoK(blocks(GPU))
    assert not auto.cautious()
    req = auto.request(16, 101, 200, 0)
    assert req.look == 0 and req.model_k > 0


def looked(auto: AutoK, pattern: str) -> None:
    """Auto told of a look whose predictions were right where `pattern` says 1."""
    auto.observe(RoundOutcome(k=0, drafted=0, accepted=0, draft_s=0.0, verify_s=0.1, key=MODEL_KEY, catchup_s=0.05,
                              catchup_tokens=116, aside=look_windows([c == "1" for c in pattern])))


def gain(auto: AutoK, k: int) -> float:
    rates = auto.rates(MODEL_KEY, k, True)
    return rates[k] / rates[0]


@pytest.mark.parametrize("agrees", [True, False])
def test_what_a_look_judged_decides_the_next_round(agrees):
    auto = AutoK(blocks(CPU))
    looked(auto, ("1" if agrees else "0") * 16)
    assert auto.table(MODEL_KEY).rounds == 16
    req = auto.request(16, 2, 200, 1)
    assert req.look == 0
    if agrees:
        assert req.model_k >= 4
    else:
        assert req.model_k == 0  # 16 of 16 predictions wrong: no draft, and the probe budget starts again
    # Once judged, a backlog is read for a draft, never looked at again.
    assert auto.request(16, 300, 200, 50).look == 0


def test_a_look_that_finds_drafting_barely_worth_it_is_followed_by_another_before_any_draft():
    """Right on 3 of every 4 of 16 tokens, the best draft (3) is 1.18x of plain on these costs: within LOOK_CLEAR
    (1.2), so the reply goes on plainly until LOOK_AGAIN more tokens are in, and the drafter looks again; after
    LOOKS looks what they judged decides."""
    assert (LOOK_CLEAR, LOOK_AGAIN, LOOKS) == (1.2, 8, 2)
    auto = AutoK(blocks(CPU))
    looked(auto, "1110" * 4)
    assert auto.best_k(MODEL_KEY, 16, True) == 3 and gain(auto, 3) == pytest.approx(1.179, abs=0.001)
    for judgeable in range(1, LOOK_AGAIN):
        assert auto.request(16, judgeable + 1, 200, judgeable) == DraftRequest(0, 16)
    assert auto.request(16, LOOK_AGAIN + 1, 200, LOOK_AGAIN) == DraftRequest(0, 16, look=LOOK_AGAIN)
    assert auto.request(16, 30, 200, 29) == DraftRequest(0, 16, look=LOOK_MAX)
    looked(auto, "1110" * 2)  # as unsure again: the last look; the draft is paid for
    assert auto.request(16, 2, 200, 1) == DraftRequest(3, 16)
    assert auto.request(16, 30, 200, 29).look == 0


def test_a_second_look_that_finds_the_drafter_wrong_keeps_it_off_and_a_clear_first_look_drafts_at_once():
    auto = AutoK(blocks(CPU))
    looked(auto, "1110" * 4)
    looked(auto, "0" * 8)
    assert auto.request(16, 2, 200, 1) == DraftRequest(0, 16) and auto.request(16, 30, 200, 29) == DraftRequest(0, 16)
    clear = AutoK(blocks(CPU))
    looked(clear, "11110" * 3 + "1")
    assert gain(clear, 4) > LOOK_CLEAR and clear.request(16, 2, 200, 1) == DraftRequest(4, 16)


def test_the_line_is_drafting_against_plain_decoding():
    """With the drafter's step at 3 ms the same look makes a draft of 3 1.215x of plain: past the line, drafted
    at once (a one-token draft is 1.05x of plain: the line is not drawn against it)."""
    costs = blocks(CPU)
    costs.draft_per_token.value = 0.003
    auto = AutoK(costs)
    looked(auto, "1110" * 4)
    assert gain(auto, 3) == pytest.approx(1.215, abs=0.001) and gain(auto, 1) * LOOK_CLEAR > gain(auto, 3)
    assert auto.request(16, 2, 200, 1) == DraftRequest(3, 16)


def test_once_the_model_has_drafted_no_look_comes_before_a_draft():
    auto = AutoK(blocks(CPU))
    looked(auto, "1110" * 4)
    auto.observe(RoundOutcome(k=3, drafted=3, accepted=2, draft_s=0.015, verify_s=0.17, key=MODEL_KEY))
    k = auto.best_k(MODEL_KEY, 16, True)
    assert k > 0 and gain(auto, k) < LOOK_CLEAR  # as unsure as before the draft
    assert auto.request(16, 30, 200, 29) == DraftRequest(k, 16)
    auto.observe(RoundOutcome(k=4, drafted=2, accepted=1, draft_s=0.0, verify_s=0.16, key=DraftKey(DraftKind.LOOKUP, 2)))
    assert auto.request(16, 30, 200, 29).look == 0  # a lookup's round after it changes nothing


def test_a_draft_on_the_prior_with_nothing_to_read_is_not_held_for_a_look():
    """No look yet and the drafter in step (nothing of the prompt unread): the prior decides, however narrowly
    (here a 25-ms step makes a draft of 4 under 1.2x of plain)."""
    costs = blocks(CPU)
    costs.draft_per_token.value = 0.025
    auto = AutoK(costs)
    assert gain(auto, 4) < LOOK_CLEAR and auto.request(16, 1, 200, 0) == DraftRequest(4, 16)


def one_at_a_time(path, tokens: list[int], n: int, vocab: int) -> list[bool]:
    """The drafter's argmax after each of the last n prefixes, each decoded one token at a time in a fresh model."""
    m = LlamaModel(path, LoadSettings(n_ctx=256))
    try:
        out = []
        for i, tok in enumerate(tokens[:-1]):
            row = m.decode([tok], Logits.LAST)[0]
            if i + 1 >= len(tokens) - n:
                out.append(int(np.argmax(row[:vocab])) == tokens[i + 1])
        return out
    finally:
        m.close()


def test_a_look_judges_the_drafters_own_predictions_of_the_replys_tokens(tiny):
    target = LlamaModel(tiny["target"], LoadSettings(n_ctx=256))
    drafter = LlamaModel(tiny["drafter"], LoadSettings(n_ctx=256))
    try:
        # The context as the target wrote it: its own greedy continuation of a prompt.
        ctx = target.tokenize("the model is fast and the")
        rows = target.decode(ctx, Logits.LAST)
        for _ in range(20):
            tok = int(np.argmax(rows[0]))
            ctx.append(tok)
            rows = target.decode([tok], Logits.LAST)
        want = one_at_a_time(tiny["drafter"], ctx, 12, target.n_vocab)
        md = ModelDrafter(drafter, target.n_vocab)
        draft = md.propose(ctx, DraftRequest(look=12), SamplingParams(), np.random.default_rng(0))
        assert draft.tokens == [] and draft.catchup_tokens == len(ctx) - 1
        assert draft.judged == look_windows(want)
        assert drafter.kv == ctx[:-1]  # caught up: the next draft reads only the last token
        # A backlog of several batches: the judged rows come with its last batch (as many as it holds).
        small = LlamaModel(tiny["drafter"], LoadSettings(n_ctx=256, n_batch=8))
        try:
            look = ModelDrafter(small, target.n_vocab).propose(ctx, DraftRequest(look=12), SamplingParams(),
                                                               np.random.default_rng(0))
            assert (look.catchup_tokens, look.judged) == (len(ctx) - 1, look_windows(want[-8:]))
            assert small.kv == ctx[:-1]
        finally:
            small.close()
        # Half read already: the look reads the rest and judges no more than it has unread.
        drafter.truncate(len(ctx) - 6)
        draft = md.propose(ctx, DraftRequest(look=12), SamplingParams(), np.random.default_rng(0))
        assert draft.catchup_tokens == 5 and draft.judged == look_windows(want[-5:])
        assert 0 < draft.catchup_s < 10  # timed as a read
        # Caught up: nothing to read or judge. A look at one token judges that one.
        draft = md.propose(ctx, DraftRequest(look=12), SamplingParams(), np.random.default_rng(0))
        assert (draft.catchup_tokens, draft.judged, draft.catchup_s < 10) == (0, (), True)
        drafter.truncate(len(ctx) - 3)
        draft = md.propose(ctx, DraftRequest(look=1), SamplingParams(), np.random.default_rng(0))
        assert draft.catchup_tokens == 2 and draft.judged == look_windows(want[-1:])
        # A stop request set before the look: nothing is read, nothing judged, no draft.
        drafter.truncate(len(ctx) - 6)
        stop = threading.Event()
        stop.set()
        draft = md.propose(ctx, DraftRequest(look=12), SamplingParams(), np.random.default_rng(0), stop=stop)
        assert (draft.tokens, draft.judged, draft.catchup_tokens) == ([], (), 0)
        assert drafter.kv == ctx[: len(ctx) - 6]
        drafter.truncate(len(ctx) - 13)  # only the judged tokens unread: the stop still ends the look
        draft = md.propose(ctx, DraftRequest(look=12), SamplingParams(), np.random.default_rng(0), stop=stop)
        assert (draft.judged, draft.catchup_tokens) == ((), 0) and drafter.kv == ctx[: len(ctx) - 13]
    finally:
        drafter.close()
        target.close()


def reply(target, prompt, drafter=None, policy=None, n=40):
    target.clear()
    ctx, _, _ = prefill(target, prompt, drafter, policy or NoDraft(), None)
    return list(rounds(target, ctx, params=SamplingParams(), drafter=drafter, policy=policy or NoDraft(), max_tokens=n,
                       stop=None, rng=np.random.default_rng(0)))


def test_a_reply_on_auto_drafts_with_the_model_only_after_a_look_and_says_the_same(tiny):
    """The real loop on the tiny pair, Auto priced as a CPU: plain rounds until the reply has LOOK_TOKENS
    tokens, one round that reads the prompt and judges them (drafting nothing), then model drafts."""
    target = LlamaModel(tiny["target"], LoadSettings(n_ctx=256))
    drafter = LlamaModel(tiny["drafter"], LoadSettings(n_ctx=256))
    try:
        prompt = target.tokenize("the model is fast the model is fast")
        plain = [t for r in reply(target, prompt) for t in r.tokens]
        want = one_at_a_time(tiny["drafter"], prompt + plain, len(plain), target.n_vocab)
        auto = AutoK(blocks(CPU))
        got = reply(target, prompt, ModelDrafter(drafter, target.n_vocab), auto)
        assert [t for r in got for t in r.tokens] == plain
        look = next(i for i, r in enumerate(got) if r.outcome.aside)
        assert sum(len(r.tokens) for r in got[:look]) == LOOK_TOKENS
        assert all(not r.draft.tokens for r in got[: look + 1])  # nothing drafted before or at the look
        o = got[look].outcome
        assert o.catchup_tokens == len(prompt) - 1 + LOOK_TOKENS and o.drafted == 0
        assert o.aside == look_windows(want[:LOOK_TOKENS])  # the drafter's own guesses, one token at a time
        assert any(want[:LOOK_TOKENS]) and any(r.draft.kind is DraftKind.MODEL for r in got[look + 1 :])
    finally:
        drafter.close()
        target.close()


def test_a_draft_counts_the_drafters_passes_and_their_share(tiny):
    """Draft.steps is the drafter's passes in Draft.seconds: one per token, one more where an unsure token
    ended drafting; the tiny drafter's passes are not judged for load (share 1)."""
    target = LlamaModel(tiny["target"], LoadSettings(n_ctx=256))
    drafter = LlamaModel(tiny["drafter"], LoadSettings(n_ctx=256))
    try:
        ctx = target.tokenize("def fibonacci(n):", add_special=True)
        md = ModelDrafter(drafter, target.n_vocab)
        md.begin(ctx)  # the prompt read with the target's prefill: no catch-up pass in the round
        before = drafter.passes
        draft = md.propose(ctx, DraftRequest(model_k=3), SamplingParams(), np.random.default_rng(0))
        assert draft.catchup_tokens == 0 and draft.steps == len(draft.tokens) == drafter.passes - before  # k=3: the third token needs no pass
        assert draft.share == 1.0
        md.commit(ctx)
        before = drafter.passes
        none = md.propose(ctx, DraftRequest(model_k=3, p_min=1.01), SamplingParams(), np.random.default_rng(0))
        assert none.tokens == [] and none.steps == 1 == drafter.passes - before
    finally:
        target.close()
        drafter.close()


def test_a_real_drafters_passes_carry_their_share_of_the_cpu(real_pair):
    """The real drafter is large enough to be judged (calibration.judged): a draft's share is the lowest its
    passes got, as llama_backend measured each (LlamaModel.last_share), never above the last one's."""
    _, drafter_path = real_pair
    drafter = LlamaModel(drafter_path, LoadSettings(n_ctx=256))
    try:
        ctx = drafter.tokenize("def fibonacci(n):\n    return", add_special=True)
        md = ModelDrafter(drafter)
        draft = md.propose(ctx, DraftRequest(model_k=3), SamplingParams(), np.random.default_rng(0))
        assert draft.catchup_tokens > 0 and draft.steps == 3
        assert 0.0 < draft.share <= drafter.last_share <= 1.0
    finally:
        drafter.close()
