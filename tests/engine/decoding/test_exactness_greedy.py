"""Greedy speculative decoding equals plain greedy decoding, at the edges of the loop.

The reference is plain greedy decoding of the same target (no drafter), and for the end of
generation the target's own argmax chain decoded token by token through the backend. Models:
the sharp tiny pair (tests/tiny_models.py) and a variant of it whose end-of-sequence token
stands in for one of its usual words, so that it ends its text three tokens into a reply.
"""
from __future__ import annotations

from dataclasses import replace

import pytest

import tiny_models
from engine.decoding.events import DoneEvent, FinishReason, RoundEvent, TokenEvent
from engine.drafting.draft_choice import DraftKind
from engine.llama.backend import LlamaModel
from engine.llama.types import LoadSettings
from engine.sampling import SamplingParams
from engine.decoding.session import GenerationSettings, Session
from llama_oracle import argmax_chain

ONE_THREAD = LoadSettings(n_ctx=256, n_threads=1, n_threads_batch=1)
GREEDY = SamplingParams(temperature=0.0)
PROMPT = "hello world the"


def run(session: Session, tokens: list[int], k: int | str, max_tokens: int = 16, sampling=GREEDY) -> list:
    return list(session.generate_tokens(list(tokens), GenerationSettings(sampling=sampling, draft_max=k, max_tokens=max_tokens)))


def ids(events) -> list[int]:
    return [e.token_id for e in events if isinstance(e, TokenEvent)]


def done(events) -> DoneEvent:
    assert isinstance(events[-1], DoneEvent)
    return events[-1]


@pytest.fixture(scope="module")
def sharp(tmp_path_factory):
    return tiny_models.write_set(tmp_path_factory.mktemp("sharp-greedy"), tiny_models.SHARP)


@pytest.fixture(scope="module")
def eos_pair(sharp, tmp_path_factory):
    """The sharp pair with the EOS row copied from one of the words the target says early on,
    a little stronger, so the target (and the drafter, which shares the output matrix) ends its
    text there. Of the first few such words, the first where the EOS comes two or more tokens
    into the reply and the drafter proposes it too."""
    probe = LlamaModel(sharp["sharp-target"], ONE_THREAD)
    prompt = probe.tokenize(PROMPT, add_special=True)
    probe.close()
    chain = argmax_chain(sharp["sharp-target"], prompt, 10)
    for word in dict.fromkeys(chain[2:]):
        specs = {key: replace(spec, eos_like=word, name=spec.name + "-eos") for key, spec in tiny_models.SHARP.items()}
        paths = tiny_models.write_set(tmp_path_factory.mktemp("eos"), specs)
        eos_chain = argmax_chain(paths["sharp-target"], prompt, 10)
        if 2 not in eos_chain[2:]:
            continue
        pair = Session(paths["sharp-target"], str(paths["sharp-drafter"]), target_load=ONE_THREAD, calibrate=False)
        try:
            rounds = [e for e in run(pair, prompt, 4) if isinstance(e, RoundEvent)]
        finally:
            pair.close()
        if 2 not in eos_chain[:2] and 2 in rounds[-1].drafted[: rounds[-1].accepted]:
            return paths, prompt, eos_chain
    pytest.fail("no word of the target's reply makes an EOS the drafter proposes too")


@pytest.fixture(scope="module")
def eos_bigram(tmp_path_factory):
    """A bigram model (tiny_models.BIGRAM) with an EOS like its third word: its greedy text, the
    EOS and what follows the EOS are the same whatever came before."""
    plain = tiny_models.write_set(tmp_path_factory.mktemp("bigram"), {"bigram": tiny_models.BIGRAM})["bigram"]
    probe = LlamaModel(plain, ONE_THREAD)
    prompt = probe.tokenize(PROMPT, add_special=True)
    probe.close()
    chain = argmax_chain(plain, prompt, 10)
    for word in dict.fromkeys(chain[2:]):
        spec = {"bigram-eos": replace(tiny_models.BIGRAM, eos_like=word, name="tiny-bigram-eos")}
        path = tiny_models.write_set(tmp_path_factory.mktemp("bigram-eos"), spec)["bigram-eos"]
        eos_chain = argmax_chain(path, prompt, 10)
        if 2 in eos_chain[2:] and 2 not in eos_chain[:2]:
            return path, prompt, eos_chain
    pytest.fail("no word of the bigram model's text makes an EOS two or more tokens in")


@pytest.fixture(scope="module")
def sessions(sharp):
    pair = Session(sharp["sharp-target"], str(sharp["sharp-drafter"]), target_load=ONE_THREAD, calibrate=False)
    plain = Session(sharp["sharp-target"], None, target_load=ONE_THREAD, calibrate=False)
    yield pair, plain
    pair.close()
    plain.close()


def test_an_end_of_generation_token_inside_a_model_draft_ends_the_reply(eos_pair):
    paths, prompt, chain = eos_pair
    plain = Session(paths["sharp-target"], None, target_load=ONE_THREAD, calibrate=False)
    pair = Session(paths["sharp-target"], str(paths["sharp-drafter"]), target_load=ONE_THREAD, calibrate=False)
    try:
        eos = chain.index(next(t for t in chain if plain.target.is_eog(t)))
        want = run(plain, prompt, 0)
        assert ids(want) == chain[:eos] and done(want).finish_reason is FinishReason.STOP
        for k in (2, 4, 8):
            got = run(pair, prompt, k)
            assert ids(got) == chain[:eos], k
            assert done(got).finish_reason is FinishReason.STOP
            assert done(got).text == done(want).text
            # the EOS was drafted and accepted: the round's bonus token after it was dropped
            last = [e for e in got if isinstance(e, RoundEvent)][-1]
            assert chain[eos] in last.drafted[: last.accepted], last
    finally:
        pair.close()
        plain.close()


def test_an_end_of_generation_token_inside_a_lookup_draft_ends_the_reply(eos_bigram):
    """The prompt holds the target's own greedy text past its EOS, then the start again: prompt
    lookup proposes the reply, the EOS and what the target would say after it, and the target
    (a bigram model: the history does not change its mind) accepts all of it. The reply must
    still end before the EOS."""
    path, prompt, chain = eos_bigram
    plain = Session(path, None, target_load=ONE_THREAD, calibrate=False)
    lookup = Session(path, "lookup", target_load=ONE_THREAD, calibrate=False)
    try:
        eos = chain.index(next(t for t in chain if plain.target.is_eog(t)))
        tokens = prompt + chain + prompt[1:]
        want = run(plain, tokens, 0)
        got = run(lookup, tokens, 8)
        assert ids(got) == ids(want) and done(got).finish_reason is FinishReason.STOP
        rounds = [e for e in got if isinstance(e, RoundEvent)]
        assert any(r.drafter == DraftKind.LOOKUP and chain[eos] in r.drafted[: r.accepted] and r.accepted > eos + 1
                   for r in rounds), rounds  # accepted past the EOS, and none of it emitted
    finally:
        lookup.close()
        plain.close()


@pytest.mark.parametrize("max_tokens", [1, 2, 3, 5, 7])
def test_max_tokens_inside_a_block(sessions, max_tokens):
    pair, plain = sessions
    tokens = plain.target.tokenize(PROMPT, add_special=True)
    want = ids(run(plain, tokens, 0, max_tokens=16))
    for k in (3, 8):
        got = run(pair, tokens, k, max_tokens=max_tokens)
        assert ids(got) == want[:max_tokens]
        assert done(got).finish_reason is FinishReason.LENGTH and done(got).stats.tokens == max_tokens


def test_lookup_plus_model_equals_plain(sharp, sessions):
    _, plain = sessions
    both = Session(sharp["sharp-target"], f"lookup+{sharp['sharp-drafter']}", target_load=ONE_THREAD, calibrate=False)
    try:
        start = plain.target.tokenize(PROMPT, add_special=True)
        tokens = start + ids(run(plain, start, 0, max_tokens=10)) + start[1:]  # something to look up
        want = ids(run(plain, tokens, 0, max_tokens=24))
        for k in (2, 5):
            got = run(both, tokens, k, max_tokens=24)
            assert ids(got) == want, k
            kinds = {r.drafter for r in got if isinstance(r, RoundEvent) and r.accepted}
            assert {DraftKind.LOOKUP, DraftKind.MODEL} <= kinds, kinds
    finally:
        both.close()


@pytest.mark.parametrize("k", [0, 3])
def test_multi_turn_with_kv_reuse_equals_a_cold_cache(sharp, k):
    """Each turn after the first, in a session whose cache holds the turns before, against the
    same conversation in an empty cache."""
    spec = str(sharp["sharp-drafter"]) if k else None
    warm = Session(sharp["sharp-target"], spec, target_load=ONE_THREAD, calibrate=False)
    cold = Session(sharp["sharp-target"], spec, target_load=ONE_THREAD, calibrate=False)
    try:
        settings = GenerationSettings(sampling=GREEDY, draft_max=k, max_tokens=12)
        msgs = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hello world"}]
        reply = done(list(warm.chat(msgs, settings))).text
        for turn in ("the model is fast", "and the code"):
            msgs += [{"role": "assistant", "content": reply}, {"role": "user", "content": turn}]
            cold.reset_state()
            reused, fresh = list(warm.chat(msgs, settings)), list(cold.chat(msgs, settings))
            assert ids(reused) == ids(fresh) and done(reused).text == done(fresh).text
            # the warm cache held everything up to the last reply
            assert done(reused).stats.prompt_tokens_reused >= len(warm.render(msgs[:-2]).tokens)
            assert done(fresh).stats.prompt_tokens_reused == 0
            reply = done(reused).text
    finally:
        warm.close()
        cold.close()


def test_same_seed_and_fixed_k_give_the_same_text_across_sessions_and_drafters(sharp):
    sampling = SamplingParams(temperature=1.0, top_k=40, top_p=0.95, min_p=0.02, seed=11)
    texts = []
    for spec in (str(sharp["sharp-drafter"]), f"lookup+{sharp['sharp-drafter']}"):
        for _ in range(2):  # a fresh session each time: nothing carried over may change the text
            s = Session(sharp["sharp-target"], spec, target_load=ONE_THREAD, calibrate=False)
            try:
                run(s, s.target.tokenize("the code", add_special=True), 3, 8, replace(sampling, seed=99))  # other work first
                texts.append(done(list(s.complete(PROMPT, GenerationSettings(sampling=sampling, draft_max=3, max_tokens=24)))).text)
            finally:
                s.close()
    assert texts[0] == texts[1] and texts[2] == texts[3]
    other = Session(sharp["sharp-target"], str(sharp["sharp-drafter"]), target_load=ONE_THREAD, calibrate=False)
    try:
        assert done(list(other.complete(PROMPT, GenerationSettings(sampling=replace(sampling, seed=12), draft_max=3,
                                                                   max_tokens=24)))).text != texts[0]
    finally:
        other.close()
