"""Speculative sampling with a Gemma 4 assistant (the MTP drafter kind) follows the target's distribution.

The same test as tests/engine/decoding/test_sampling_exactness.py, whose helpers it uses: replies over many
seeds from the real loop (`Session`), grouped by prefix at every position, against the exact distribution
(the target's own logits for that prefix, decoded alone by a second copy of the target, through the float64
chain of tests/llama_oracle.py, checked against llama.cpp's chain for each prefix). The pair is
scripts/make_tiny_mtp.py's with sharper logits, so that replies share their first tokens. The assistant
samples its drafts from its own distribution q (rows read from the target's hidden state and KV cache); a
kept token must still follow p. False alarms: p > ALPHA = 1e-3 per case, fixed seeds. Negative control: every
draft token accepted must be rejected at p < 1e-6.
"""
from __future__ import annotations

import importlib.util
import sys

import pytest

from engine.llama.backend import LlamaModel
from engine.sampling import SamplingParams
from engine.decoding.session import Session
from test_sampling_exactness import (
    ALPHA, ONE_THREAD, REJECT, Case, Rig, goodness_of_fit, patched, reference_for, replies,
)
from tree import ROOT

CASES = {
    "assistant k=3, T=0.9, top-k 40": Case("model", 3, SamplingParams(0.9, 40, 1.0, 0.0), n=800),
    "assistant k=2, T=0.8, top-p 0.9, min-p 0.02": Case("model", 2, SamplingParams(0.8, 0, 0.9, 0.02), n=600),
}


@pytest.fixture(scope="module")
def rig(tmp_path_factory):
    spec = importlib.util.spec_from_file_location("make_tiny_mtp", ROOT / "scripts" / "make_tiny_mtp.py")
    maker = importlib.util.module_from_spec(spec)
    sys.modules["make_tiny_mtp"] = maker
    spec.loader.exec_module(maker)
    target, assistant = maker.write_pair(tmp_path_factory.mktemp("sharp-mtp"), maker.MtpSpec(logit_scale=5.0))
    session = Session(target, None, target_load=ONE_THREAD, calibrate=False)
    rig = Rig(session, LlamaModel(target, ONE_THREAD), str(assistant))
    yield rig
    rig.session.close()
    rig.oracle.close()


@pytest.mark.parametrize("name", list(CASES))
def test_sampled_replies_with_the_assistant_follow_the_target(rig, name):
    case = CASES[name]
    samples = replies(rig, case)
    rounds = replies.rounds
    assert rig.session.assistant is not None  # the drafter was the assistant, not a model loaded as one
    p, df, positions = goodness_of_fit(samples, reference_for(rig, case), case.tokens)
    assert p > ALPHA, f"{name}: replies do not follow the target's distribution (p={p:.2g}, df={df})"
    assert positions >= 3 and df >= 20, (positions, df)
    # the drafts were real: some kept, some rejected, and kept after the first round too
    assert rounds["drafted"] > case.n and rounds["rejected"] > case.n // 10, rounds
    assert rounds["later"] > case.n // 10, rounds


def test_rejects_every_assistant_draft_accepted(rig, monkeypatch):
    case = CASES["assistant k=3, T=0.9, top-k 40"]
    patched(monkeypatch, "accept_draft_token", lambda p, q, tok, rng: True)
    samples = replies(rig, case, seed0=70_000)
    p, df, _ = goodness_of_fit(samples, reference_for(rig, case), case.tokens)
    assert p < REJECT, f"every draft token accepted: not detected (p={p:.2g}, df={df})"
