"""The catalog's drafters that ride the target: Gemma 4 E2B / E4B with their assistants, and a Qwen3.6 build with
its own MTP heads. Served by the fake hub (tests/fake_hub.py) with the tiny Gemma 4 pair standing in for the real
files: downloaded, judged as a pair, loaded, drafting."""
from __future__ import annotations

import hashlib
import importlib.util
import sys

import pytest
from fake_hub import FakeHub
from tiny_models import TARGET, write_tiny_model
from tree import ROOT

from engine.assistant_fit import own_heads, target_heads
from engine.decoding.events import RoundEvent
from engine.decoding.session import GenerationSettings, Session
from engine.llama.types import LoadSettings
from engine.models import modelstore
from engine.models.catalog import find_pair, load_catalog
from engine.models.download import download_pair
from engine.sampling import SamplingParams


@pytest.fixture(scope="module")
def gemma_pair(tmp_path_factory):
    spec = importlib.util.spec_from_file_location("make_tiny_mtp", ROOT / "scripts" / "make_tiny_mtp.py")
    maker = importlib.util.module_from_spec(spec)
    sys.modules["make_tiny_mtp"] = maker
    spec.loader.exec_module(maker)
    return maker.write_pair(tmp_path_factory.mktemp("gemma"))


def test_the_gemma_4_pairs_name_their_assistants_and_the_qwen_build_is_one_file():
    pairs = {p.id: p for p in load_catalog()}
    for size in ("E2B", "E4B"):
        p = pairs[f"gemma-4-{size.lower()}-assistant"]
        assert p.target.repo_id == f"unsloth/gemma-4-{size}-it-qat-GGUF" == p.drafter.repo_id
        assert p.target.filename == f"gemma-4-{size}-it-qat-UD-Q4_K_XL.gguf"
        assert p.drafter.filename == f"mtp-gemma-4-{size}-it-Q8_0.gguf"
        assert p.target.display_bytes > 10 * p.drafter.display_bytes  # an assistant is ~77M parameters
        assert "assistant" in p.title and "hidden state" in p.notes
    q = pairs["qwen3.6-27b-mtp"]
    assert q.target == q.drafter and q.target.repo_id == "unsloth/Qwen3.6-27B-MTP-GGUF"
    assert "plain decoding" in q.notes and "hybrid" in q.notes


def test_a_downloaded_gemma_4_pair_is_judged_as_a_pair_loads_and_drafts(isolated_home, gemma_pair, tiny):
    pair = find_pair("gemma-4-e2b-assistant")
    target_bytes, assistant_bytes = (p.read_bytes() for p in gemma_pair)
    h = FakeHub()
    try:
        h.add(pair.target.repo_id, pair.target.filename, target_bytes)
        h.add(pair.drafter.repo_id, pair.drafter.filename, assistant_bytes)
        target, drafter = download_pair(pair, endpoint=h.endpoint)
    finally:
        h.close()
    assert hashlib.sha256(drafter.read_bytes()).hexdigest() == hashlib.sha256(assistant_bytes).hexdigest()
    options = {o.drafter.path.name: o for o in modelstore.pair_options(target)}
    assert options[pair.drafter.filename].compatible
    # The same assistant beside a target of another architecture: it shares the vocabulary, not the width.
    llama = modelstore.models_folder() / "tiny-llama.gguf"
    llama.write_bytes(tiny["target"].read_bytes())
    reasons = modelstore.pair_reasons(llama, drafter)
    assert reasons and "Gemma 4 target" in reasons[0]

    s = Session(target, drafter, target_load=LoadSettings(n_ctx=512, n_threads=1, n_threads_batch=1), calibrate=False)
    try:
        events = list(s.complete("the model is fast and", GenerationSettings(draft_max=3, max_tokens=24,
                                                                            sampling=SamplingParams(temperature=0))))
        assert sum(len(e.drafted) for e in events if isinstance(e, RoundEvent)) > 0
    finally:
        s.close()


def test_a_target_named_as_its_own_drafter_through_its_heads_is_refused_before_loading(tmp_path, monkeypatch):
    import gguf

    add_block_count = gguf.GGUFWriter.add_block_count

    def with_heads(self, n):  # a file that says it carries one nextn layer (llama.cpp's loader key)
        add_block_count(self, n)
        self.add_uint32("llama.nextn_predict_layers", 1)

    monkeypatch.setattr(gguf.GGUFWriter, "add_block_count", with_heads)
    path = write_tiny_model(tmp_path / "with-heads.gguf", TARGET)
    assert target_heads(path) == 1
    why = own_heads(path, tmp_path / "." / "with-heads.gguf")
    assert why is not None and "own MTP heads (1 nextn layer)" in why and "plain decoding" in why
    assert own_heads(path, tmp_path / "other.gguf") is None


def test_the_one_file_build_downloads_once(isolated_home, tiny):
    pair = find_pair("qwen3.6-27b-mtp")
    h = FakeHub()
    try:
        h.add(pair.target.repo_id, pair.target.filename, tiny["target"].read_bytes())
        target, drafter = download_pair(pair, endpoint=h.endpoint)
        gets = [s for s in h.seen if s.method == "GET"]  # the transfer itself (the hub redirects to its CDN)
    finally:
        h.close()
    assert target == drafter and target.is_file() and len(gets) == 1
