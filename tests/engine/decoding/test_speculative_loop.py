"""The speculative loop on real llama.cpp with tiny real models."""
from __future__ import annotations

import numpy as np
import pytest

from engine.errors import ContextFullError, EngineError, IncompatiblePairError, ModelFileError
from engine.decoding.events import DoneEvent, FinishReason, RoundEvent, TokenEvent, TokenSource
from engine.llama.backend import LlamaModel
from engine.llama.types import LoadSettings, Logits
from engine.drafting.request import DraftRequest
from engine.sampling import SamplingParams
from engine.decoding.session import GenerationSettings, Session

PROMPTS = ["hello world", "def return class import", "the model is fast", "python code token draft"]


def run(session, prompt, **kw):
    settings = GenerationSettings(**kw)
    events = list(session.chat([{"role": "user", "content": prompt}], settings))
    return events


def tokens_of(events):
    return [e.token_id for e in events if isinstance(e, TokenEvent)]


@pytest.fixture(scope="module")
def pair(tiny):
    s = Session(tiny["target"], str(tiny["drafter"]))
    yield s
    s.close()


@pytest.fixture(scope="module")
def plain(tiny):
    s = Session(tiny["target"], None)
    yield s
    s.close()


def assert_numerical_tie(session, prompt_tokens, prefix, spec_tok, plain_tok):
    """Where greedy outputs differ, the target's two candidates must be a near-exact tie."""
    model = session.target
    model.clear()
    row = model.decode(list(prompt_tokens) + list(prefix), Logits.LAST)[0].astype(np.float64)
    gap = abs(row[spec_tok] - row[plain_tok])
    assert gap <= 1e-4 * max(1.0, abs(row).max()), (
        f"greedy outputs differ at token {len(prefix)} by more than a numerical tie (logit gap {gap})"
    )
    model.clear()


@pytest.mark.parametrize("k", [1, 3, 8])
def test_greedy_speculative_equals_plain_greedy(pair, plain, k):
    for prompt in PROMPTS:
        want = tokens_of(run(plain, prompt, draft_max=0, max_tokens=48))
        events = run(pair, prompt, draft_max=k, max_tokens=48)
        got = tokens_of(events)
        if got != want:
            i = next(i for i, (a, b) in enumerate(zip(got, want)) if a != b)
            rendered = plain.render([{"role": "user", "content": prompt}]).tokens
            assert_numerical_tie(plain, rendered, want[:i], got[i], want[i])
        rounds = [e for e in events if isinstance(e, RoundEvent)]
        assert sum(r.drafted != () for r in rounds) > 0
        assert all(r.k <= k for r in rounds)


def test_every_source_appears_and_rounds_add_up(pair):
    sources = set()
    for prompt in PROMPTS:
        events = run(pair, prompt, draft_max=4, max_tokens=80)
        sources |= {e.source for e in events if isinstance(e, TokenEvent)}
        check_round_bookkeeping(events)
    assert {TokenSource.ACCEPTED, TokenSource.CORRECTION, TokenSource.BONUS} <= sources


def check_round_bookkeeping(events):
    done = events[-1]
    assert isinstance(done, DoneEvent)
    st = done.stats
    rounds = [e for e in events if isinstance(e, RoundEvent)]
    assert st.rounds == len(rounds)
    assert st.drafted == sum(len(r.drafted) for r in rounds)
    assert st.accepted == sum(r.accepted for r in rounds)
    assert st.tokens == sum(r.emitted for r in rounds) == len(tokens_of(events))
    assert 0.0 <= st.acceptance_rate <= 1.0
    # A round event comes before its tokens, and says how many there will be.
    i = 0
    while i < len(events) - 1:
        r = events[i]
        assert isinstance(r, RoundEvent)
        toks = events[i + 1 : i + 1 + r.emitted]
        assert all(isinstance(t, TokenEvent) and t.round == r.round for t in toks)
        kinds = [t.source for t in toks]
        assert kinds[: r.accepted] == [TokenSource.ACCEPTED] * min(r.accepted, len(kinds))
        if r.accepted < len(r.drafted) and r.emitted == r.accepted + 1:
            assert kinds[-1] is TokenSource.CORRECTION
            assert r.rejected == r.drafted[r.accepted :]
            assert r.rejected_text and r.rejected[0] != toks[-1].token_id
        i += 1 + r.emitted
    # Text is the concatenation of the token texts.
    assert done.text.startswith("".join(t.text for t in events if isinstance(t, TokenEvent)))


def test_identical_drafter_accepts_every_draft_token(tiny):
    with_self = Session(tiny["target"], str(tiny["target"]))
    try:
        for prompt in PROMPTS:
            events = run(with_self, prompt, draft_max=5, max_tokens=40)
            rounds = [e for e in events if isinstance(e, RoundEvent)]
            assert all(r.accepted == len(r.drafted) for r in rounds), [(r.drafted, r.accepted) for r in rounds]
            assert events[-1].stats.acceptance_rate == 1.0
            bonus = [e for e in events if isinstance(e, TokenEvent) and e.source is TokenSource.BONUS]
            assert bonus, "a fully accepted draft ends in the target's bonus token"
    finally:
        with_self.close()


def test_plain_decoding_uses_same_events(plain):
    events = list(plain.complete("hello world the code", GenerationSettings(max_tokens=10)))
    rounds = [e for e in events if isinstance(e, RoundEvent)]
    assert len(rounds) == 10 and all(r.k == 0 and r.drafted == () and r.emitted == 1 for r in rounds)
    assert {e.source for e in events if isinstance(e, TokenEvent)} == {TokenSource.TARGET}
    assert events[-1].finish_reason is FinishReason.LENGTH
    assert events[-1].stats.target_passes == 11  # prompt + one pass per token


def test_drafter_never_rereads_what_it_saw(tiny):
    s = Session(tiny["target"], str(tiny["drafter"]), calibrate=False)
    try:
        before = s.draft_model.tokens_decoded
        events = run(s, "hello world the code", draft_max=4, max_tokens=60)
        st = events[-1].stats
        rounds = [e for e in events if isinstance(e, RoundEvent)]
        # Per drafting round the drafter reads its own drafts but the last, plus what the target
        # added: the correction (1 token) or the last draft and the bonus (2). Nothing twice.
        expected = st.prompt_tokens + sum(
            len(r.drafted) - 1 + (2 if r.accepted == len(r.drafted) else 1) for r in rounds if r.drafted
        )
        assert s.draft_model.tokens_decoded - before <= expected
        assert st.drafter_passes >= 1
        # Its cache is the accepted context: the target's, plus at most the token the target has yet to read.
        d, t = s.draft_model.kv, s.target.kv
        assert len(d) <= len(t) + 1 and d[: len(t)] == t[: len(d)]
    finally:
        s.close()


def test_stop_mid_reply_leaves_caches_consistent_and_models_usable(pair):
    gen = pair.complete("hello world the code", GenerationSettings(draft_max=4, max_tokens=200))
    seen = 0
    for ev in gen:
        if isinstance(ev, TokenEvent):
            seen += 1
            if seen == 7:
                pair.stop()
    done = ev
    assert isinstance(done, DoneEvent) and done.finish_reason is FinishReason.CANCELLED
    assert done.stats.tokens < 7 + 5  # within one round of the request (k=4 -> at most 5 more)
    assert pair.target.cache_is_consistent() and pair.draft_model.cache_is_consistent()
    # A consumer that simply stops listening also leaves both caches consistent.
    gen = pair.complete("python code token", GenerationSettings(draft_max=4, max_tokens=200))
    for i, ev in enumerate(gen):
        if i == 9:
            break
    gen.close()
    assert pair.target.cache_is_consistent() and pair.draft_model.cache_is_consistent()
    # And the next request works and is still exact.
    again = list(pair.complete("hello world the code", GenerationSettings(draft_max=4, max_tokens=20)))
    assert again[-1].finish_reason is FinishReason.LENGTH and len(tokens_of(again)) == 20


def test_stop_during_a_long_prompt_is_honoured_between_batches(tiny):
    s = Session(tiny["target"], str(tiny["drafter"]), target_load=LoadSettings(n_ctx=1024, n_batch=32), calibrate=False)
    try:
        gen = s.complete("hello world the code " * 60, GenerationSettings(draft_max=4, max_tokens=50))
        s.stop()  # before the first batch is read: nothing more is decoded
        events = list(gen)
        assert events[-1].finish_reason is FinishReason.CANCELLED and events[-1].stats.tokens == 0
        assert len(s.target.kv) < 32 and s.target.cache_is_consistent()
        again = list(s.complete("hello world the code " * 60, GenerationSettings(draft_max=4, max_tokens=5)))
        assert again[-1].finish_reason is FinishReason.LENGTH and len(tokens_of(again)) == 5
    finally:
        s.close()


def test_multi_turn_reuses_the_kv_prefix(pair):
    msgs = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hello world"}]
    first = run(pair, "x", max_tokens=1)  # something else in the cache first
    first = list(pair.chat(msgs, GenerationSettings(draft_max=3, max_tokens=12)))
    reply = first[-1].text
    msgs += [{"role": "assistant", "content": reply}, {"role": "user", "content": "the code"}]
    second = list(pair.chat(msgs, GenerationSettings(draft_max=3, max_tokens=12)))
    st = second[-1].stats
    rendered = pair.render(msgs).tokens
    assert st.prompt_tokens == len(rendered)
    # Everything up to the previous reply was already in the cache.
    assert st.prompt_tokens_reused >= len(pair.render(msgs[:2]).tokens)
    assert st.target_passes < st.prompt_tokens - st.prompt_tokens_reused + st.rounds + 2


def test_long_conversation_drops_oldest_turns(tiny):
    s = Session(tiny["target"], None, target_load=LoadSettings(n_ctx=256), calibrate=False)
    try:
        msgs = [{"role": "system", "content": "be brief"}]
        for i in range(12):
            msgs += [{"role": "user", "content": f"hello world {i} " * 3}, {"role": "assistant", "content": "the code " * 4}]
        msgs.append({"role": "user", "content": "last question"})
        r = s.render(msgs, reserve=64)
        assert r.dropped_messages > 0 and len(r.tokens) + 64 <= s.target.n_ctx
        events = list(s.chat(msgs, GenerationSettings(max_tokens=64)))
        assert "dropped" in events[-1].stats.note
        with pytest.raises(ContextFullError, match="too long"):
            s.render([{"role": "user", "content": "hello " * 400}])
    finally:
        s.close()


def test_reply_that_fills_the_context_ends_cleanly(tiny):
    s = Session(tiny["target"], str(tiny["drafter"]), target_load=LoadSettings(n_ctx=256), calibrate=False)
    try:
        events = list(s.complete("hello world " * 40, GenerationSettings(draft_max=6, max_tokens=1000)))
        assert events[-1].finish_reason is FinishReason.CONTEXT_FULL
        assert len(s.target.kv) <= s.target.n_ctx and s.target.cache_is_consistent()
    finally:
        s.close()


def test_incompatible_pair_names_what_differs(tiny, tmp_path):
    with pytest.raises(IncompatiblePairError, match=r"token \d+ differs"):
        Session(tiny["target"], str(tiny["other-vocab"]))
    from dataclasses import replace

    from tiny_models import TARGET, write_tiny_model

    bigger = write_tiny_model(tmp_path / "big.gguf", replace(TARGET, extra_tokens=200))
    with pytest.raises(IncompatiblePairError, match="vocabulary sizes differ by 200"):
        Session(tiny["target"], str(bigger))
    swapped = write_tiny_model(tmp_path / "bos.gguf", replace(TARGET, bos_id=2))
    with pytest.raises(IncompatiblePairError, match="BOS token id differs"):
        Session(tiny["target"], str(swapped))


def test_bad_files_fail_cleanly_before_llama_cpp(tmp_path, tiny):
    junk = tmp_path / "junk.gguf"
    junk.write_bytes(np.random.default_rng(0).bytes(4096))
    with pytest.raises(ModelFileError, match="not a GGUF"):
        LlamaModel(junk)
    cut = tmp_path / "cut.gguf"
    cut.write_bytes(tiny["target"].read_bytes()[:400_000])
    with pytest.raises(ModelFileError, match="truncated"):
        LlamaModel(cut)
    with pytest.raises(ModelFileError, match="not found"):
        LlamaModel(tmp_path / "missing.gguf")


def test_lookup_drafter_continues_the_latest_longest_match():
    from engine.drafting.lookup import LookupDrafter
    from engine.sampling import SamplingParams

    d = LookupDrafter(max_ngram=3, min_ngram=2)
    rng = np.random.default_rng(0)
    ctx = [1, 2, 3, 4, 5, 9, 2, 3, 7, 8, 1, 2, 3]
    d.begin(ctx[:5])
    # "2 3" ends the context and occurs twice; "1 2 3" once, at the start: the longest match wins.
    assert d.propose(ctx, DraftRequest(lookup_k=3), SamplingParams(), rng).tokens == [4, 5, 9]
    assert d.propose(ctx + [6, 2, 3], DraftRequest(lookup_k=2), SamplingParams(), rng).tokens == [6, 2]  # the most recent "2 3"
    assert d.propose([5, 6, 7], DraftRequest(lookup_k=4), SamplingParams(), rng).tokens == []  # a new context: index rebuilt


def test_lookup_drafter_is_exact_and_finds_repeats(tiny, plain):
    s = Session(tiny["target"], "lookup", calibrate=False)
    try:
        prompt = "hello world the code is fast"
        want = tokens_of(plain.complete(prompt, GenerationSettings(draft_max=0, max_tokens=80)))
        events = list(s.complete(prompt, GenerationSettings(draft_max=8, max_tokens=80)))
        assert tokens_of(events) == want
        rounds = [e for e in events if isinstance(e, RoundEvent)]
        assert any(r.drafter == "lookup" and r.accepted > 0 for r in rounds)
    finally:
        s.close()


def test_utf8_is_never_split(plain):
    from engine.decoding.speculative import _Text

    model = plain.target
    ids = [t for t in model.tokenize("é€", add_special=False) if model.piece(t) != b" "]  # SPM's space prefix
    assert len(ids) == 5 and all(len(model.piece(t)) == 1 for t in ids)
    text = _Text(model)
    assert [text.push(t) for t in ids] == ["", "é", "", "", "€"]
    # And in real replies (the tiny vocabulary emits byte tokens too) every piece is whole text.
    for prompt in PROMPTS:
        events = run(plain, prompt, max_tokens=60)
        for e in events:
            if isinstance(e, TokenEvent):
                e.text.encode("utf-8")  # a lone surrogate would raise


def test_recurrent_target_falls_back_to_plain_decoding_and_says_so(tmp_path):
    from tiny_models import write_tiny_mamba

    mamba = write_tiny_mamba(tmp_path / "mamba.gguf")
    s = Session(mamba, "lookup")
    try:
        assert s.drafter is None and "plain decoding only" in s.notes[0]
        first = list(s.chat([{"role": "user", "content": "hello world"}], GenerationSettings(max_tokens=8)))
        assert first[-1].stats.drafted == 0 and "cannot roll back" in first[-1].stats.note
        # A new turn cannot reuse a recurrent state partially: it is read again, correctly.
        again = list(s.chat([{"role": "user", "content": "hello world"}], GenerationSettings(max_tokens=8)))
        assert tokens_of(again) == tokens_of(first)
    finally:
        s.close()


def test_switching_drafters_keeps_the_target_and_stays_exact(tiny):
    s = Session(tiny["target"], None, calibrate=False)
    try:
        target_model = s.target
        want = tokens_of(s.complete("hello world the code", GenerationSettings(draft_max=0, max_tokens=30)))
        for spec in (str(tiny["drafter"]), "lookup", f"lookup+{tiny['drafter']}", "none", str(tiny["drafter"])):
            s.set_drafter(spec)
            assert s.target is target_model
            got = tokens_of(s.complete("hello world the code", GenerationSettings(draft_max=3, max_tokens=30)))
            assert got == want, spec
        with pytest.raises(IncompatiblePairError):
            s.set_drafter(str(tiny["other-vocab"]))
        assert s.spec.model == tiny["drafter"]  # a failed switch leaves the working drafter in place
    finally:
        s.close()


def test_greedy_tokens_carry_the_runner_up_as_tie_evidence(pair):
    events = run(pair, "python code token draft", draft_max=4, max_tokens=30)
    toks = [e for e in events if isinstance(e, TokenEvent)]
    assert toks and all(e.runner_up is not None and e.runner_up != e.token_id and e.margin >= 0 for e in toks)
    sampled = list(pair.chat([{"role": "user", "content": "hello"}], GenerationSettings(
        sampling=SamplingParams(temperature=1.0, seed=3), draft_max=4, max_tokens=10)))
    assert all(e.margin is None for e in sampled if isinstance(e, TokenEvent))


def test_bench_calls_a_swap_of_close_candidates_a_tie():
    from engine.frontends.bench import RunResult, divergence

    def result(ids, seconds):
        return RunResult("p", "c", "v", 0, len(ids), 1.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, None, "length", 1.0,
                         token_ids=ids, second_choices=seconds)

    plain = result([5, 6, 7], [(9, 2.0), (8, 0.01), (1, 3.0)])
    spec = result([5, 8, 2], [(9, 2.0), (6, 0.03), (1, 1.0)])
    assert divergence(plain, spec, lambda t: False) == (1, 0.03, True)
    far = result([5, 8, 2], [(9, 2.0), (6, 0.9), (1, 1.0)])
    assert divergence(plain, far, lambda t: False)[2] is False  # 0.9 logits apart is no tie
    other = result([5, 8, 2], [(9, 2.0), (4, 0.01), (1, 1.0)])
    assert divergence(plain, other, lambda t: False)[2] is False  # plain's token was not spec's second choice


def test_a_broken_or_refusing_chat_template_is_a_message_not_a_crash(tmp_path):
    from dataclasses import replace

    from tiny_models import TARGET, write_tiny_model

    broken = write_tiny_model(tmp_path / "broken.gguf", replace(TARGET, chat_template="{% for m in messages %}{{ oops"))
    s = Session(broken, None, calibrate=False)
    try:
        assert "chat template is broken" in s.notes[0]
        assert run(s, "hello", max_tokens=4)[-1].stats.tokens >= 0  # the plain layout still works
    finally:
        s.close()
    strict = write_tiny_model(tmp_path / "strict.gguf", replace(
        TARGET, chat_template="{% if messages[0]['role'] == 'system' %}{{ raise_exception('no system prompts') }}{% endif %}"))
    s = Session(strict, None, calibrate=False)
    try:
        with pytest.raises(EngineError, match="no system prompts"):
            s.render([{"role": "system", "content": "x"}, {"role": "user", "content": "hi"}])
    finally:
        s.close()


def test_decoded_rows_are_llama_cpps_own_also_after_its_logits_buffer_moves(tiny):
    """decode() keeps a view onto llama.cpp's logits buffer per row count. llama.cpp reallocates
    that buffer when a pass wants more rows than it holds, so every returned row must equal what
    llama.cpp's own per-row accessor (llama_get_logits_ith) reads, whichever sizes came before."""
    import llama_cpp as lc

    m = LlamaModel(tiny["target"], LoadSettings(n_ctx=256, n_batch=64))
    try:
        toks = m.tokenize(" ".join(PROMPTS * 3))
        assert len(toks) >= 16
        seen = []
        for chunk, logits in [(toks[:3], "last"), (toks[3:4], "last"), (toks[4:12], "all"),
                              (toks[12:13], "last"), (toks[13:15], "all"), (toks[15:16], "all")]:
            rows = m.decode(chunk, logits)
            assert rows.shape == (len(chunk) if logits == "all" else 1, m.n_vocab)
            for i in range(rows.shape[0]):
                ref = np.ctypeslib.as_array(lc.llama_get_logits_ith(m._ctx, i - rows.shape[0]), shape=(m.n_vocab,))
                np.testing.assert_array_equal(rows[i], ref)
            seen.append(rows[-1].copy())
        assert not np.array_equal(seen[0], seen[1])  # the rows moved on with the context
    finally:
        m.close()


def test_tail_rows_are_the_last_tokens_rows_read_in_the_same_pass(tiny):
    """Logits.TAIL (a drafter's look): one pass that reads a backlog and hands back rows for its last
    tokens only. Each row must be llama.cpp's own for that token (llama_get_logits_ith), predict what
    the same token's row predicts when those tokens are scored in a pass of their own, and the rows
    must sit in the last batch of a read longer than one batch."""
    import llama_cpp as lc

    m = LlamaModel(tiny["target"], LoadSettings(n_ctx=256, n_batch=16))
    try:
        toks = m.tokenize(" ".join(PROMPTS * 4))[:40]
        assert len(toks) == 40
        rows = np.array(m.decode(toks, Logits.TAIL, tail=5))  # batches of 16, 16, 8: the 5 in the last
        assert rows.shape == (5, m.n_vocab) and len(m.kv) == 40
        for i in range(5):
            ref = np.ctypeslib.as_array(lc.llama_get_logits_ith(m._ctx, i - 5), shape=(m.n_vocab,))
            np.testing.assert_array_equal(rows[i], ref)
        m.clear()
        assert m.decode(toks[:35], Logits.NONE).shape == (0, m.n_vocab)
        apart = np.array(m.decode(toks[35:], Logits.ALL))  # the same tokens' rows, in a pass of their own
        assert np.allclose(rows, apart, atol=1e-3)
        assert list(rows.argmax(axis=1)) == list(apart.argmax(axis=1))
        assert not np.allclose(rows[0], rows[-1], atol=1e-3)  # distinct rows, in order
        m.clear()
        with pytest.raises(EngineError, match="last 9 of 40"):
            m.decode(toks, Logits.TAIL, tail=9)  # the last batch holds 8
        with pytest.raises(EngineError):
            m.decode(toks, Logits.TAIL, tail=0)
        with pytest.raises(EngineError):
            m.decode(toks, Logits.TAIL)  # how many rows must be said
        assert len(m.kv) == 0  # refused before anything was read
    finally:
        m.close()


def test_bench_compares_auto_with_the_fixed_k_best_over_the_repeats_not_each_runs_luckiest():
    from engine.frontends.bench import RunResult
    from engine.frontends.bench_report import _best_fixed, summarise

    def run(prompt, variant, repeat, tps, family, fixed=True):
        return RunResult(prompt, prompt, variant, repeat, 10, tps, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, None, "length", 1.0,
                         family=family, fixed=fixed)

    results = []
    for rep, (plain, k2, lk4, auto, combined) in enumerate([(10, 12, 13, 11, 11), (10, 8, 9, 11, 12), (10, 8, 9, 11, 10)]):
        results += [run("p", "plain", rep, plain, "plain"), run("p", "D k=2", rep, k2, "D"),
                    run("p", "lookup k=4", rep, lk4, "lookup"), run("p", "D k=auto", rep, auto, "D", fixed=False),
                    run("p", "auto", rep, combined, "lookup+D", fixed=False),
                    run("q", "plain", rep, 100, "plain"), run("q", "D k=auto", rep, 50, "D", fixed=False)]
    auto = [r for r in results if r.variant == "D k=auto" and r.prompt_id == "p"]
    # plain (median 10) beats k=2 (median 8), though k=2 was fastest in repeat 0 (12)
    assert [_best_fixed(results, r) for r in auto] == [10, 10, 10]
    # lookup + model: lookup k=4 counts too, and its median 9 still loses to plain's 10
    combined = [r for r in results if r.variant == "auto"]
    assert [_best_fixed(results, r) for r in combined] == [10, 10, 10]
    # another prompt is judged on its own runs only
    assert _best_fixed(results, next(r for r in results if r.prompt_id == "q" and not r.fixed)) == 100
    table = summarise(results)["table"]["p"]  # category = prompt here
    assert table["D k=auto"]["auto_vs_best_fixed"] == pytest.approx(11 / 10)  # not the median of 11/12, 11/10, 11/10
    assert table["auto"]["auto_vs_best_fixed"] == pytest.approx(11 / 10)  # 11/10, 12/10, 10/10
    # lookup + model: the best may be either drafter alone
    for prompt, plain_, k2, lk4, best in [("r", 10, 14, 12, 14), ("s", 10, 8, 15, 15)]:
        runs = [run(prompt, "plain", 0, plain_, "plain"), run(prompt, "D k=2", 0, k2, "D"),
                run(prompt, "lookup k=4", 0, lk4, "lookup"), run(prompt, "auto", 0, 13, "lookup+D", fixed=False)]
        assert _best_fixed(runs, runs[-1]) == best
    # nothing fixed to compare with
    assert _best_fixed([auto[0]], auto[0]) == 0.0
    # one repeat: the hindsight choice is that run's fastest
    one = [r for r in results if r.repeat == 0]
    assert _best_fixed(one, auto[0]) == 12
    # a chosen variant without a run in Auto's repeat gives nothing to compare with
    assert _best_fixed([r for r in results if not (r.variant == "plain" and r.repeat == 2)], auto[2]) == 0.0


def test_flash_attention_follows_the_setting_and_a_drafter_runs_without_it_on_a_cpu(tiny):
    """Asked on or off, llama.cpp attends that way (its two kernels round differently: the logits of the
    same tokens are close, not equal); left alone, the target gets llama.cpp's choice (on, on a CPU), and
    a Session loads its drafter without it on a CPU-only build, as asked off."""
    from engine.llama.backend import supports_gpu_offload

    tokens = list(range(5, 45))
    logits = {}
    for asked in (None, False, True):
        m = LlamaModel(tiny["target"], LoadSettings(n_ctx=256, n_batch=64, flash_attn=asked))
        try:
            logits[asked] = m.decode(tokens, Logits.ALL).copy()
            assert m.flash_attn is asked
        finally:
            m.close()
    assert not np.array_equal(logits[False], logits[True])
    assert np.allclose(logits[False], logits[True], atol=1e-2)
    assert np.array_equal(logits[None], logits[True])  # llama.cpp's "auto" runs it on the CPU
    s = Session(tiny["target"], str(tiny["drafter"]), calibrate=False)
    try:
        assert s.target.flash_attn is None
        assert s.draft_model.flash_attn is (None if supports_gpu_offload() else False)
    finally:
        s.close()
