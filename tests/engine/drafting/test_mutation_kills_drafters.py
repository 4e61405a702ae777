"""The drafters, held to references written here (mutation survivors of engine/drafting/base.py).

Model drafts are compared with the drafter model's own plain decoding: a second copy of the tiny
drafter decodes the same context from an empty cache, token by token, and its argmax chain, its
softmax in float64 and, sampled, the float64 chain of tests/llama_oracle.py are the reference.
Prompt lookup is compared with continuations worked out by hand. Timings are only bounded by
the wall time around the call (never compared with a speed). About 2 s on the 2-core machine.
"""
from __future__ import annotations

import threading
import time

import numpy as np
import pytest

from engine.drafting.combined import CombinedDrafter
from engine.drafting.base import Draft, Drafter, keep_all
from engine.drafting.lookup import LookupDrafter
from engine.drafting.model import ModelDrafter
from engine.drafting.history_index import HistoryIndex
from engine.llama.backend import LlamaModel
from engine.llama.types import LoadSettings, Logits
from engine.drafting.request import MODEL_KEY, DraftKey, DraftRequest
from engine.drafting.draft_choice import DraftKind
from engine.sampling import SamplingParams
from engine.errors import ContextFullError
from llama_oracle import greedy_chain, Row, assert_same, float64_reference

ONE_THREAD = LoadSettings(n_ctx=256, n_threads=1, n_threads_batch=1)
GREEDY = SamplingParams()
SAMPLED = SamplingParams(0.8, 40, 0.9, 0.05)
CONTEXT = [1, 17, 42, 99, 7, 23, 301, 55]


@pytest.fixture(scope="module")
def models(tiny):
    """The drafter under test and a second copy of it, the reference, each with its own cache."""
    drafting, oracle = LlamaModel(tiny["drafter"], ONE_THREAD), LlamaModel(tiny["drafter"], ONE_THREAD)
    yield drafting, oracle
    drafting.close()
    oracle.close()


@pytest.fixture
def drafter(models):
    models[0].clear()
    return ModelDrafter(models[0], is_eog=lambda t: False)


def rows_along(oracle: LlamaModel, context: list[int], tokens: list[int]) -> list[np.ndarray]:
    """The reference's logits rows after `context` and after each of `tokens`, from an empty cache."""
    oracle.clear()
    rows = [np.array(oracle.decode(context, Logits.LAST)[0], dtype=np.float32)]
    for t in tokens:
        rows.append(np.array(oracle.decode([t], Logits.LAST)[0], dtype=np.float32))
    oracle.clear()
    return rows


def within_call(fn):
    """fn()'s result and the wall time around it."""
    t0 = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - t0


# -- Draft ----------------------------------------------------------------------------------------
def test_a_truncated_draft_keeps_the_first_n_per_token_and_the_rest_as_it_was():
    key = DraftKey(DraftKind.HISTORY, 3, 2)
    aside = [(DraftKey(DraftKind.LOOKUP, 2), [8, 9])]
    d = Draft([5, 6, 7], [None, None, None], [1.0, 0.5, 0.25], 1.5, key, 4, 0.75, 9, [0.9, 0.8, 0.7], aside)
    assert d.truncated(2) == Draft([5, 6], [None, None], [1.0, 0.5], 1.5, key, 4, 0.75, 9, [0.9, 0.8], aside)


# -- the model drafter ----------------------------------------------------------------------------
def test_a_greedy_draft_is_the_drafter_models_own_argmax_chain(drafter, models):
    tokens, probs = greedy_chain(models[1], CONTEXT, 5)
    draft, wall = within_call(lambda: drafter.propose(CONTEXT, DraftRequest(model_k=5), GREEDY, np.random.default_rng(0)))
    assert draft.tokens == tokens and draft.key == MODEL_KEY and draft.asked == 5
    assert draft.q == [None] * 5  # greedy drafts are proposed deterministically
    assert draft.q_probs == pytest.approx(probs, rel=1e-5)
    # a cold cache: the context less its last token is a catch-up, timed apart from drafting
    assert draft.catchup_tokens == len(CONTEXT) - 1
    assert 0.0 < draft.seconds and 0.0 < draft.catchup_s and draft.seconds + draft.catchup_s <= wall


def test_a_second_draft_after_the_same_context_is_the_same(drafter, models):
    """The drafter has read everything (the context and its own draft): it re-reads the last
    token of the context for its logits, nothing more and nothing less."""
    tokens, _ = greedy_chain(models[1], CONTEXT, 4)
    first = drafter.propose(CONTEXT, DraftRequest(model_k=4), GREEDY, np.random.default_rng(0))
    drafter.commit(CONTEXT)
    assert models[0].kv == CONTEXT
    again = drafter.propose(CONTEXT, DraftRequest(model_k=4), GREEDY, np.random.default_rng(0))
    assert first.tokens == again.tokens == tokens


def test_a_sampled_draft_carries_the_drafters_distributions(drafter, models):
    draft = drafter.propose(CONTEXT, DraftRequest(model_k=4), SAMPLED, np.random.default_rng(3))
    assert len(draft.tokens) == 4
    chain = (SAMPLED.temperature, SAMPLED.top_k, SAMPLED.top_p, SAMPLED.min_p)
    for i, (tok, row) in enumerate(zip(draft.tokens, rows_along(models[1], CONTEXT, draft.tokens))):
        q, ref_row = draft.q[i], Row(row)
        ref = float64_reference(ref_row, *chain)
        assert q is not None, i
        assert_same(ref_row, (q.ids, q.probs), ref, chain, 1e-9, "float64")
        want = float(ref[1][np.flatnonzero(ref[0] == tok)[0]])
        assert draft.q_probs[i] == pytest.approx(want, rel=1e-6) and q.prob(tok) == pytest.approx(want, rel=1e-6)


def test_k_zero_asks_nothing_of_the_model(drafter, models):
    before = models[0].passes
    draft = drafter.propose(CONTEXT, DraftRequest(model_k=0, lookup_k=4), GREEDY, np.random.default_rng(0))
    assert draft.tokens == [] and draft.asked == 0 and models[0].passes == before and models[0].kv == []


def test_p_min_cuts_a_greedy_draft_at_the_first_token_below_it(drafter, models):
    tokens, probs = greedy_chain(models[1], CONTEXT, 6)
    # a cut inside the draft, well away from every probability: the first token below it ends the draft
    below = [p for p in probs[1:] if p < probs[0]]
    assert below, probs
    p_min = (probs[0] + max(below)) / 2
    n = next(i for i, p in enumerate(probs) if p < p_min)
    assert 1 <= n < 6 and all(abs(p - p_min) > 1e-4 for p in probs)
    draft = drafter.propose(CONTEXT, DraftRequest(model_k=6, p_min=p_min), GREEDY, np.random.default_rng(0))
    assert draft.tokens == tokens[:n]
    # a top probability exactly at p_min is not below it
    p_min = draft.q_probs[0]
    assert drafter.propose(CONTEXT, DraftRequest(model_k=1, p_min=p_min), GREEDY, np.random.default_rng(0)).tokens == tokens[:1]
    # above the first token's: an empty draft, timed like any other
    p_min = probs[0] + 1e-3
    empty = drafter.propose(CONTEXT, DraftRequest(model_k=6, p_min=p_min), GREEDY, np.random.default_rng(0))
    assert isinstance(empty, Draft) and empty.tokens == [] and empty.seconds >= 0.0


def test_p_min_reads_the_sampled_distributions_top(drafter):
    one = SamplingParams(1.0, 1, 1.0, 0.0)  # top-k 1: the top token has probability exactly 1
    assert len(drafter.propose(CONTEXT, DraftRequest(model_k=3, p_min=1.0), one, np.random.default_rng(0)).tokens) == 3
    # no token of the tiny drafter is that sure under the full chain
    empty = drafter.propose(CONTEXT, DraftRequest(model_k=3, p_min=0.999), SAMPLED, np.random.default_rng(0))
    assert isinstance(empty, Draft) and empty.tokens == []


def test_a_draft_stops_when_the_drafters_cache_is_full(drafter, models):
    n_ctx = models[0].n_ctx
    context = (CONTEXT * n_ctx)[: n_ctx - 3]
    draft = drafter.propose(context, DraftRequest(model_k=8), GREEDY, np.random.default_rng(0))
    # it had read the context; each drafted token but the last is read too, up to a full cache
    assert len(draft.tokens) == 4 and len(models[0].kv) == n_ctx
    with pytest.raises(ContextFullError):
        models[0].decode([5], Logits.LAST)


def test_two_unread_tokens_go_with_the_first_step_and_three_are_a_catch_up(drafter, models):
    m = models[0]
    drafter.begin(CONTEXT[:-1])  # reads CONTEXT[:-2]
    assert m.kv == CONTEXT[:-2]
    before = m.passes
    draft = drafter.propose(CONTEXT, DraftRequest(model_k=3), GREEDY, np.random.default_rng(0))
    assert draft.catchup_tokens == 0 and draft.catchup_s == 0.0 and m.passes - before == 3
    m.clear()
    drafter.begin(CONTEXT[:-2])  # reads CONTEXT[:-3]
    before = m.passes
    draft, wall = within_call(lambda: drafter.propose(CONTEXT, DraftRequest(model_k=3), GREEDY, np.random.default_rng(0)))
    assert draft.catchup_tokens == 2 and 0.0 < draft.catchup_s <= wall and m.passes - before == 4
    assert draft.tokens == greedy_chain(models[1], CONTEXT, 3)[0]


def test_begin_reads_the_prompt_less_its_last_token_once(drafter, models):
    m = models[0]
    drafter.begin(CONTEXT)
    assert m.kv == CONTEXT[:-1] and drafter.behind(CONTEXT) == 1 and drafter.behind(CONTEXT + [4, 5, 6]) == 4
    before, decoded = m.passes, m.tokens_decoded
    drafter.begin(CONTEXT)  # nothing new to read
    assert m.passes == before
    drafter.begin(CONTEXT + [4, 5, 6])  # a longer prompt: only what is new
    assert m.tokens_decoded - decoded == 3 and m.kv == CONTEXT + [4, 5]
    assert drafter.behind([9] + CONTEXT) == len(CONTEXT) + 1


# -- prompt lookup --------------------------------------------------------------------------------
def test_lookup_is_never_behind():
    assert LookupDrafter().behind(CONTEXT) == 0


def test_lookup_matches_five_tokens_at_most_by_default():
    # the 5-gram 2..6 last continued with 60; the 6-gram 1..6, which a longer lookup would use, with 50
    tokens = [1, 2, 3, 4, 5, 6, 50, 2, 3, 4, 5, 6, 60, 1, 2, 3, 4, 5, 6]
    assert LookupDrafter().find(tokens, 3) == (5, [60, 1, 2])


def test_a_copied_passage_reports_how_far_back_it_matches_up_to_32_tokens():
    passage = list(range(100, 140))  # 40 tokens
    # copied 20 tokens so far: what preceded the copy (99) is not what preceded the source (2)
    assert LookupDrafter().find([1, 2, *passage, 99, *passage[:20]], 3) == (20, passage[20:23])
    # from the context's first token on: the match ends where the source has nothing before it
    assert LookupDrafter().find([*passage[:10], 7, *passage[:9]], 2) == (9, [passage[9], 7])
    # copied whole and on: at most 32
    assert LookupDrafter().find([*passage, 98, *passage[:38]], 2) == (32, passage[38:40])


def test_lookup_in_a_context_shorter_than_its_longest_n_gram():
    assert LookupDrafter().find([1, 2, 1, 2], 3) == (2, [1, 2])


def test_lookup_with_one_token_n_grams_indexes_the_first_token():
    assert LookupDrafter(min_ngram=1).find([5, 6, 7, 5], 2) == (1, [6, 7])


def test_lookup_starts_over_when_the_context_is_another():
    d = LookupDrafter()
    assert d.find([1, 2, 3, 4, 5, 1, 2], 3) == (2, [3, 4, 5])
    assert d.find([7, 8, 9, 10, 11, 12, 7, 8], 3) == (2, [9, 10, 11])  # longer, but not a continuation
    assert d.find([7, 8, 9, 7], 3) is None  # shorter


def _lookup(d: LookupDrafter, context: list[int], k: int, prune=keep_all) -> Draft:
    return d.propose(context, DraftRequest(0, k), GREEDY, np.random.default_rng(0), prune)


def test_a_lookup_draft_of_one_token():
    draft, wall = within_call(lambda: _lookup(LookupDrafter(), [1, 2, 3, 1, 2], 1))
    assert draft.tokens == [3] and draft.key == DraftKey(DraftKind.LOOKUP, 2) and draft.asked == 1
    assert draft.q == [None] and draft.q_probs == [1.0] and 0.0 < draft.seconds <= wall


def test_the_policy_prunes_what_lookup_found():
    asked = []

    def prune(key, proposed):
        asked.append((key, proposed))
        return proposed - 1

    draft = _lookup(LookupDrafter(), [1, 2, 3, 4, 1, 2], 3, prune)
    assert asked == [(DraftKey(DraftKind.LOOKUP, 2), 3)] and draft.tokens == [3, 4] and draft.q_probs == [1.0, 1.0]
    asked.clear()
    zero = _lookup(LookupDrafter(), [1, 2, 3, 4, 1, 2], 0, prune)  # nothing asked: nothing looked up or priced
    assert zero.tokens == [] and zero.key == DraftKey(DraftKind.NONE) and asked == [] and zero.aside == []
    assert draft.aside == []  # verified in part: judged by its verification, not set aside


def test_a_lookup_pruned_away_whole_is_set_aside_for_its_round_to_judge():
    draft = _lookup(LookupDrafter(), [1, 2, 3, 4, 1, 2], 3, lambda key, n: 0)
    assert draft.tokens == [] and draft.aside == [(DraftKey(DraftKind.LOOKUP, 2), [3, 4, 1])]
    # a match of 9 tokens is learned as 8-15
    passage = list(range(100, 120))
    draft = _lookup(LookupDrafter(), [*passage, 7, *passage[:9]], 2, lambda key, n: 0)
    assert draft.aside == [(DraftKey(DraftKind.LOOKUP, 8), passage[9:11])]
    idx = HistoryIndex("fp")
    idx.add([1, 2, 3, 4, 5, 6])
    draft = _lookup(LookupDrafter(history=idx), [7, 8, 2, 3], 2, lambda key, n: 0)
    assert draft.tokens == [] and draft.aside == [(DraftKey(DraftKind.HISTORY, 2, 1), [4, 5])]


def test_a_history_draft_of_one_token():
    idx = HistoryIndex("fp")
    idx.add([1, 2, 3, 4, 5, 6])
    draft = _lookup(LookupDrafter(history=idx), [7, 8, 2, 3], 1)
    assert draft.tokens == [4] and draft.key == DraftKey(DraftKind.HISTORY, 2, 1) and draft.asked == 1


# -- lookup, then the model -----------------------------------------------------------------------
class Recorder(Drafter):
    """Stands in for a drafter: records what it was asked and answers with a given draft."""

    def __init__(self, answer: Draft) -> None:
        self.answer, self.calls = answer, []

    def propose(self, context, request, params, rng, prune=keep_all, stop=None):
        self.calls.append((context, request, params, rng, prune, stop))
        return self.answer


def test_lookup_then_model_passes_the_round_on_and_adds_up_the_time():
    lookup = Recorder(Draft(seconds=0.5, asked=3))
    model = Recorder(Draft([9, 8], [None, None], [0.5, 0.5], seconds=0.25, key=MODEL_KEY, asked=3))
    context, request, rng, stop = [1, 2, 3], DraftRequest(3, 3), np.random.default_rng(0), threading.Event()

    def prune(key, n):
        return n

    draft = CombinedDrafter(lookup, model).propose(context, request, SAMPLED, rng, prune, stop)
    assert lookup.calls == model.calls == [(context, request, SAMPLED, rng, prune, stop)]
    assert draft.tokens == [9, 8] and draft.seconds == 0.75  # lookup's time, then the model's
    lookup.answer = Draft([4], [None], [1.0], seconds=0.5, key=DraftKey(DraftKind.LOOKUP, 2), asked=3)
    assert CombinedDrafter(lookup, model).propose(context, request, SAMPLED, rng, prune, stop).tokens == [4]
    assert len(model.calls) == 1  # lookup had something: the model was not asked
    # lookup's proposal pruned away: the model's draft carries it, for the round to judge
    aside = [(DraftKey(DraftKind.LOOKUP, 5), [4, 5])]
    lookup.answer = Draft(seconds=0.5, asked=3, aside=aside)
    model.answer = Draft([9], [None], [0.5], key=MODEL_KEY, asked=3, aside=[(DraftKey(DraftKind.HISTORY, 2), [6])])
    draft = CombinedDrafter(lookup, model).propose(context, request, SAMPLED, rng, prune, stop)
    assert draft.tokens == [9] and draft.aside == [*aside, (DraftKey(DraftKind.HISTORY, 2), [6])]


def test_lookup_then_model_honours_a_stop_request(drafter):
    stop = threading.Event()
    stop.set()
    d = CombinedDrafter(LookupDrafter(), drafter)
    # Behind the context, a stopped drafter reads nothing and drafts nothing (a long read is not begun).
    first = d.propose(CONTEXT, DraftRequest(model_k=8, lookup_k=8), GREEDY, np.random.default_rng(0), stop=stop)
    assert first.tokens == [] and first.catchup_tokens == 0
    # In step with it, the stop is honoured between steps: one token, not eight.
    d.propose(CONTEXT, DraftRequest(model_k=1, lookup_k=1), GREEDY, np.random.default_rng(0))
    assert len(d.propose(CONTEXT, DraftRequest(model_k=8, lookup_k=8), GREEDY, np.random.default_rng(0), stop=stop).tokens) == 1
