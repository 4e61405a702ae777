"""The MTP drafter kind: a Gemma 4 assistant riding a Gemma 4 target (scripts/make_tiny_mtp.py), through real
llama.cpp. Greedy replies equal plain greedy ones; llama.cpp's own draft-mtp loop, run on the same files,
drafts and keeps exactly as many tokens and writes the same text; misfits are refused before loading."""
from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys

import pytest

from engine.assistant_fit import is_assistant, misfit, target_heads
from engine.decoding.events import DoneEvent, RoundEvent, TokenEvent, TokenSource
from engine.decoding.session import GenerationSettings, Session
from engine.drafting.draft_choice import DraftKind
from engine.drafting.acceptance import PRIORS
from engine.drafting.policy import AutoK
from engine.drafting.costs import CostModel, RoundOutcome
from engine.drafting.request import MODEL_KEY, MTP_KEY
from engine.errors import EngineError
from engine.llama.types import LoadSettings
from engine.sampling import SamplingParams
from tree import ROOT

THREADS = 1
LOAD = LoadSettings(n_ctx=512, n_threads=THREADS, n_threads_batch=THREADS)
PROMPTS = ("the model is fast and", "she was there when", "import the code")


def _maker():
    spec = importlib.util.spec_from_file_location("make_tiny_mtp", ROOT / "scripts" / "make_tiny_mtp.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["make_tiny_mtp"] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def maker():
    return _maker()


@pytest.fixture(scope="module")
def pair(tmp_path_factory, maker):
    target, assistant = maker.write_pair(tmp_path_factory.mktemp("mtp"))
    return target, assistant


@pytest.fixture(scope="module")
def sessions(pair):
    target, assistant = pair
    plain = Session(target, None, target_load=LOAD, calibrate=False)
    riding = Session(target, assistant, target_load=LOAD, calibrate=False)
    riding.control_rounds = False  # where they fall depends on measured times: these tests compare rounds
    yield plain, riding
    riding.close()
    plain.close()


def greedy(k: int | str, max_tokens: int = 48) -> GenerationSettings:
    return GenerationSettings(draft_max=k, max_tokens=max_tokens, sampling=SamplingParams(temperature=0))


def test_the_script_writes_the_same_bytes_every_time(tmp_path, maker, pair):
    again = maker.write_pair(tmp_path)
    assert [p.read_bytes() for p in again] == [p.read_bytes() for p in pair]
    assert is_assistant(pair[1]) and not is_assistant(pair[0])


def test_greedy_replies_equal_plain_greedy_and_every_kind_of_token_occurs(sessions):
    plain, riding = sessions
    assert riding.assistant is not None and riding.draft_model is None
    sources: set[TokenSource] = set()
    drafted = accepted = 0
    for prompt in PROMPTS:
        want = list(plain.complete(prompt, greedy(0)))[-1].text
        events = list(riding.complete(prompt, greedy(4)))
        done = events[-1]
        assert isinstance(done, DoneEvent) and done.text == want
        rounds = [e for e in events if isinstance(e, RoundEvent)]
        assert {r.drafter for r in rounds if r.drafted} == {DraftKind.MTP}
        drafted += sum(len(r.drafted) for r in rounds)
        accepted += sum(r.accepted for r in rounds)
        sources |= {e.source for e in events if isinstance(e, TokenEvent)}
        assert done.stats.drafted == sum(len(r.drafted) for r in rounds) and done.stats.accepted == sum(
            r.accepted for r in rounds)
        assert riding.target.cache_is_consistent() and len(riding.target.kv) == len(riding.target.kv)
    # The assistant is often but not always right: kept, corrected and bonus tokens all occur.
    assert 0 < accepted < drafted
    assert {TokenSource.ACCEPTED, TokenSource.CORRECTION, TokenSource.BONUS} <= sources


def test_sampled_replies_run_and_stay_within_the_vocabulary(sessions):
    _, riding = sessions
    settings = GenerationSettings(draft_max=3, max_tokens=32, sampling=SamplingParams(0.8, 40, 0.95, 0.0, seed=7))
    events = list(riding.complete(PROMPTS[0], settings))
    tokens = [e.token_id for e in events if isinstance(e, TokenEvent)]
    assert tokens and all(0 <= t < riding.target.n_vocab for t in tokens)
    again = [e.token_id for e in riding.complete(PROMPTS[0], settings) if isinstance(e, TokenEvent)]
    assert again == tokens  # a seed gives the same reply for the same k
    assert riding.target.cache_is_consistent()


def test_a_prompt_the_cache_holds_whole_costs_one_token_read_and_drafts_the_same(sessions):
    """A second reply to the same prompt reuses the cache whole: the target's last pass did not compute the
    hidden state before the prompt's last token, so the target reads that token again, and the rounds are
    those of the first reply."""
    _, riding = sessions
    riding.target.clear()
    first = [e for e in riding.complete(PROMPTS[1], greedy(4, 24)) if isinstance(e, RoundEvent)]
    again = [e for e in riding.complete(PROMPTS[1], greedy(4, 24)) if isinstance(e, RoundEvent)]
    assert [(r.drafted, r.accepted) for r in again] == [(r.drafted, r.accepted) for r in first]
    assert again[0].drafted and riding.target.cache_is_consistent()


def test_switching_between_no_drafter_and_the_assistant_keeps_the_target(pair):
    target, assistant = pair
    s = Session(target, None, target_load=LOAD, calibrate=False)
    try:
        loaded = s.target
        s.set_drafter(str(assistant))
        assert s.assistant is not None and s.target is loaded
        s.set_drafter("lookup+" + str(assistant))
        assert s.drafter is not None and s.drafter.model_key == MTP_KEY and s.drafter.name == "lookup+mtp"
        events = list(s.complete(PROMPTS[0], greedy(4, 24)))
        assert isinstance(events[-1], DoneEvent) and s.target.cache_is_consistent()
        s.set_drafter(None)
        assert s.assistant is None and s.drafter is None
    finally:
        s.close()


def test_an_assistant_is_refused_for_another_architecture_before_loading(pair, tiny):
    _, assistant = pair
    why = misfit(tiny["target"], assistant)
    assert why is not None and "Gemma 4 target" in why and "llama" in why
    s = Session(tiny["target"], tiny["drafter"], target_load=LOAD, calibrate=False)
    try:
        before = s.drafter
        with pytest.raises(EngineError, match="Gemma 4 target"):
            s.set_drafter(str(assistant))
        assert s.drafter is before and s.assistant is None  # the drafter in use stays
    finally:
        s.close()


def test_an_assistant_of_another_width_is_refused(tmp_path, maker, pair):
    wide_target, _ = maker.write_pair(tmp_path, maker.MtpSpec(n_embd=96))
    why = misfit(wide_target, pair[1])
    assert why is not None and "64 wide" in why and "96 wide" in why
    assert misfit(pair[0], pair[1]) is None
    with pytest.raises(EngineError, match="another Gemma 4"):
        Session(wide_target, pair[1], target_load=LOAD, calibrate=False)


def test_damaged_files_are_not_assistants(tmp_path, pair):
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(pair[1].read_bytes()[:200])
    assert not is_assistant(bad) and not is_assistant(tmp_path / "missing.gguf")
    assert "not a readable GGUF" in misfit(pair[0], bad)
    assert target_heads(pair[0]) == 0


def test_auto_learns_the_assistant_under_its_own_key_and_prior():
    assert PRIORS[DraftKind.MTP] != PRIORS[DraftKind.MODEL]
    auto = AutoK(CostModel(), model_key=MTP_KEY)
    auto.observe(RoundOutcome(k=3, drafted=3, accepted=1, draft_s=0.001, verify_s=0.01, key=MTP_KEY))
    assert auto.table(MTP_KEY).rounds == 1 and MODEL_KEY not in auto.tables
    assert auto.prune(MTP_KEY, 3) == 3  # its length was chosen with its cost, as a model drafter's


def test_the_command_line_drafts_and_prints_plain_greedy_text(pair):
    target, assistant = pair
    env = {**os.environ, "PYTHONPATH": str(ROOT), "DRAFTLIGHT_THREADS": "1"}

    def run(draft: str) -> dict:
        r = subprocess.run([sys.executable, "-m", "engine", "generate", "--target", str(target), "--draft", draft,
                            "--temperature", "0", "--draft-max", "4", "--max-tokens", "40", "--ctx", "512",
                            "--threads", "1", "--prompt", PROMPTS[0], "--json"],
                           capture_output=True, text=True, timeout=300, env=env)
        assert r.returncode == 0, r.stderr
        return json.loads(r.stdout.strip().splitlines()[-1])

    riding, plain = run(str(assistant)), run("none")
    assert riding["text"] == plain["text"] and len(plain["text"]) > 20
    assert riding["stats"]["drafted"] > 0 and riding["stats"]["accepted"] > 0
    assert riding["stats"]["rounds_by_drafter"].get("mtp", 0) > 0
