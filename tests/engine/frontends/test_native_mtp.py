"""llama.cpp's own draft-mtp loop (`llama-speculative-simple --spec-type draft-mtp -md ASSISTANT`, built by
scripts/build_llama_tools.sh) on the tiny Gemma 4 pair, as the independent reference for the engine's MTP drafter:
the same greedy text, and, drafting at most k tokens a round to the same limits, round by round the same drafts kept
and rejected, which holds only if the engine hands the assistant the target's hidden state llama.cpp hands it."""
from __future__ import annotations

import importlib.util
import sys

import pytest

from engine.decoding.events import DoneEvent, RoundEvent
from engine.decoding.session import GenerationSettings, Session
from engine.frontends import native
from engine.llama.types import LoadSettings
from engine.sampling import SamplingParams
from tree import ROOT

THREADS = 1
PROMPTS = ("the model is fast and", "python code token draft")


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    spec = importlib.util.spec_from_file_location("make_tiny_mtp", ROOT / "scripts" / "make_tiny_mtp.py")
    maker = importlib.util.module_from_spec(spec)
    sys.modules["make_tiny_mtp"] = maker
    spec.loader.exec_module(maker)
    return maker.write_pair(tmp_path_factory.mktemp("gemma"))


@pytest.fixture(scope="module")
def session(pair):
    s = Session(pair[0], pair[1], target_load=LoadSettings(n_ctx=512, n_threads=THREADS, n_threads_batch=THREADS),
                calibrate=False)
    s.control_rounds = False  # llama.cpp's loop has none: the rounds must be the same
    yield s
    s.close()


@pytest.mark.parametrize("k", [1, 3])
@pytest.mark.parametrize("prompt", PROMPTS)
def test_llama_cpps_draft_mtp_drafts_keeps_and_writes_as_the_engine_does(tools, pair, session, tmp_path, prompt, k):
    n = 24
    path = tmp_path / "prompt.txt"
    path.write_text(prompt, encoding="utf-8", newline="")
    r = native.speculative(tools, pair[0], path, n_predict=n, threads=THREADS, drafter=pair[1], draft_max=k,
                           ctx_size=512, repack=False, extra_args=["--verbose"])  # its debug log says each round
    assert r.spec_type == native.DRAFT_MTP and "draft-mtp" in r.command  # chosen from the drafter's architecture
    assert r.n_drafted > 0 and 0 < r.n_accepted < r.n_drafted  # kept and rejected both
    events = list(session.complete(prompt, GenerationSettings(draft_max=k, max_tokens=n,
                                                              sampling=SamplingParams(temperature=0))))
    done = events[-1]
    assert isinstance(done, DoneEvent) and len(done.text) > 10
    # llama.cpp decodes one plain token more (it stops once it holds more than n); the rest is the same.
    assert r.text is not None and r.text.startswith(done.text), (r.text, done.text)
    theirs = list(r.rounds)
    assert (sum(d for _, d in theirs), sum(a for a, _ in theirs)) == (r.n_drafted, r.n_accepted)
    # Round by round the same drafts kept and rejected, while more than one token is left to write: from there
    # llama.cpp drafts k tokens where n_predict leaves room for none (its limit 0 reads as no limit) and goes on
    # past n; the engine decodes the last token plainly.
    ours, emitted = [], 0
    for e in events:
        if isinstance(e, RoundEvent) and emitted < n - 1:
            ours.append((e.accepted, len(e.drafted)))
            emitted += e.emitted
    assert len(ours) > 5 and theirs[: len(ours)] == ours, (ours, theirs)
