"""Copies of models made for this CPU (engine.llama.cpu_weights): llama.cpp's own quantizer in a
child process, real GGUF files read back with the gguf package (not with the code under test),
real llama.cpp loading the copies, and a drafter copy that leaves every reply as it was."""
from __future__ import annotations

import json
import os
import threading
from pathlib import Path

import numpy as np
import pytest
from gguf import GGUFReader
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tiny_models
from engine.llama import cpu_weights
from engine.llama.cpu_weights import Role
from engine.decoding.events import TokenEvent
from engine.llama.types import LoadSettings
from engine.decoding.session import GenerationSettings, Session
from engine.errors import EngineError, LoadCancelled

MSGS = [{"role": "user", "content": "hello world code model token"}]


def types_of(path: Path) -> dict[str, str]:
    return {t.name: t.tensor_type.name for t in GGUFReader(str(path)).tensors}


def data_of(path: Path) -> dict[str, bytes]:
    return {t.name: np.asarray(t.data).tobytes() for t in GGUFReader(str(path)).tensors}


def test_the_drafter_plan_is_every_matrix_but_the_embeddings_in_q4_0(tiny):
    plan = cpu_weights.plan(tiny["drafter"], Role.DRAFTER)
    matrices = {f"blk.{i}.{m}.weight" for i in range(2)
                for m in ("attn_q", "attn_k", "attn_v", "attn_output", "ffn_gate", "ffn_up", "ffn_down")}
    assert plan == {name: "Q4_0" for name in matrices | {"output.weight"}}
    assert cpu_weights.plan(tiny["drafter"], Role.TARGET) == {}  # all F32: nothing without a batched kernel


def test_a_drafter_copy_holds_q4_0_matrices_and_everything_else_byte_for_byte(tiny):
    copy = cpu_weights.make(tiny["drafter"], Role.DRAFTER)
    assert copy.parent == Path(os.environ["DRAFTLIGHT_CPU_WEIGHTS"]) and copy.name == "tiny-drafter.cpu-q4_0.gguf"
    before, after = types_of(tiny["drafter"]), types_of(copy)
    assert set(after) == set(before)
    assert {n for n, t in after.items() if t == "Q4_0"} == set(cpu_weights.plan(tiny["drafter"], Role.DRAFTER))
    kept = [n for n in before if after[n] == before[n]]
    assert "token_embd.weight" in kept and "blk.0.attn_norm.weight" in kept
    old, new = data_of(tiny["drafter"]), data_of(copy)
    assert all(old[n] == new[n] for n in kept)
    assert cpu_weights.ready(tiny["drafter"], Role.DRAFTER) == copy
    assert not [p for p in copy.parent.iterdir() if p.name.endswith(".tmp")]


def test_a_session_drafts_with_the_copy_and_the_reply_is_plain_greedy_decoding(tiny):
    """The copy changes what the drafter proposes, never what the target keeps."""
    plain = Session(tiny["target"], None, target_load=LoadSettings(n_threads=1))
    try:
        want = [e.token_id for e in plain.chat(MSGS, GenerationSettings(draft_max=0, max_tokens=40)) if isinstance(e, TokenEvent)]
    finally:
        plain.close()
    s = Session(tiny["target"], str(tiny["drafter"]), target_load=LoadSettings(n_threads=1, cpu_drafter=True))
    try:
        assert s.draft_model.path.name == "tiny-drafter.cpu-q4_0.gguf" and s.spec.model == tiny["drafter"]
        assert any("made for this CPU" in n for n in s.notes)
        events = list(s.chat(MSGS, GenerationSettings(draft_max=3, max_tokens=40)))
        assert [e.token_id for e in events if isinstance(e, TokenEvent)] == want
        assert events[-1].stats.drafted > 0
    finally:
        s.close()
    off = Session(tiny["target"], str(tiny["drafter"]), target_load=LoadSettings(n_threads=1, cpu_drafter=False))
    try:
        assert off.draft_model.path == tiny["drafter"] and not any("made for this CPU" in n for n in off.notes)
    finally:
        off.close()


def test_by_default_a_small_drafter_runs_as_it_is(tiny):
    assert tiny["drafter"].stat().st_size < cpu_weights.MIN_DRAFTER_BYTES
    assert not cpu_weights.wanted(tiny["drafter"], Role.DRAFTER, gpu_offload=False)
    s = Session(tiny["target"], str(tiny["drafter"]), target_load=LoadSettings(n_threads=1))
    try:
        assert s.draft_model.path == tiny["drafter"]
    finally:
        s.close()


def test_a_changed_source_makes_its_copy_stale(tiny, tmp_path):
    src = tiny_models.write_tiny_model(tmp_path / "d.gguf", tiny_models.DRAFTER)
    copy = cpu_weights.make(src, Role.DRAFTER)
    assert cpu_weights.ready(src, Role.DRAFTER) == copy
    st = os.stat(src)
    os.utime(src, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000_000))
    assert cpu_weights.ready(src, Role.DRAFTER) is None
    assert cpu_weights.make(src, Role.DRAFTER) == copy and cpu_weights.ready(src, Role.DRAFTER) == copy


def test_cancel_ends_the_quantizer_and_leaves_nothing(tiny, tmp_path):
    src = tiny_models.write_tiny_model(tmp_path / "c.gguf", tiny_models.DRAFTER)
    cancel = threading.Event()
    cancel.set()
    with pytest.raises(LoadCancelled):
        cpu_weights.make(src, Role.DRAFTER, cancel)
    folder = cpu_weights.folder()
    assert not list(folder.glob("c.*")) and not list(folder.glob(".c.*"))
    assert cpu_weights.ready(src, Role.DRAFTER) is None


def test_a_file_llama_cpp_cannot_quantize_is_an_error_with_a_reason_not_a_crash(tmp_path):
    """The GGUF is well formed (verify passes) but names an architecture llama.cpp does not know:
    the child process fails, the caller gets one message and the drafter runs as it is."""
    bad = tiny_models.write_tiny_model(tmp_path / "odd.gguf", tiny_models.DRAFTER)
    data = bad.read_bytes()
    i = data.index(b"llama", data.index(b"general.architecture"))
    bad.write_bytes(data[:i] + b"lllma" + data[i + 5:])
    with pytest.raises(EngineError, match="quantizer could not copy odd.gguf"):
        cpu_weights.make(bad, Role.DRAFTER)
    assert not [p for p in cpu_weights.folder().iterdir() if p.name.startswith(".odd.")]


def test_the_real_pair_plans(real_pair):
    target, drafter = real_pair
    t = cpu_weights.plan(target, Role.TARGET)
    # Q4_K_M keeps attn_v and ffn_down of half the 28 layers, and the output matrix, in Q6_K.
    assert len(t) == 29 and set(t.values()) == {"Q8_0"} and "output.weight" in t
    assert sum(n.endswith("ffn_down.weight") for n in t) == 14 and sum(n.endswith("attn_v.weight") for n in t) == 14
    f = cpu_weights.plan(target, Role.FAST_TARGET)
    # Every matrix (169 Q4_K, 29 Q6_K) but the token embeddings (a lookup table): 28 layers x 7 + output.
    assert set(f.values()) == {"Q4_0"} and len(f) == 28 * 7 + 1 and "token_embd.weight" not in f
    assert Role.FAST_TARGET.file_type == cpu_weights.LLAMA_FTYPE_MOSTLY_Q4_0 and Role.TARGET.file_type is None
    assert cpu_weights.copy_path(target, Role.FAST_TARGET).name.endswith(".cpu-q4_0-target.gguf")
    assert not cpu_weights.wanted(target, Role.FAST_TARGET, gpu_offload=False)  # only when asked
    d = cpu_weights.plan(drafter, Role.DRAFTER)
    assert set(d.values()) == {"Q4_0"} and "token_embd.weight" not in d and "output.weight" in d
    assert len(d) == 24 * 7 + 1 - 12  # every matrix of 24 layers and the output, but the 12 ffn_down in Q4_K
    assert cpu_weights.wanted(drafter, Role.DRAFTER, gpu_offload=False) == cpu_weights.cpu_suits()
    assert not cpu_weights.wanted(drafter, Role.DRAFTER, gpu_offload=True)


def test_a_fast_copy_knows_its_source_and_is_not_offered_a_copy_of_its_own(tiny, tmp_path):
    src = tiny_models.write_tiny_model(tmp_path / "t.gguf", tiny_models.TARGET)
    assert cpu_weights.source_of(src) is None  # not in the copies' folder
    # Offered on this kind of CPU (the CI's: x86-64 with AVX2) from Python, with a CPU-only llama.cpp.
    assert cpu_weights.fast_copy_offered(src) == cpu_weights.cpu_suits()
    copy = cpu_weights.make(src, Role.FAST_TARGET)
    assert copy.name == "t.cpu-q4_0-target.gguf" and cpu_weights.source_of(copy) == src.resolve()
    assert not cpu_weights.fast_copy_offered(copy)
    assert set(types_of(copy).values()) == {"Q4_0", "F32"} and types_of(copy)["token_embd.weight"] == "F32"
    # A file of the same name elsewhere is no copy, whatever its .json says.
    elsewhere = tmp_path / "other" / copy.name
    elsewhere.parent.mkdir()
    elsewhere.write_bytes(copy.read_bytes())
    elsewhere.with_suffix(".json").write_text(copy.with_suffix(".json").read_text())
    assert cpu_weights.source_of(elsewhere) is None
    for not_a_copy in (src, elsewhere):  # a person's own files are never deleted through this
        with pytest.raises(EngineError, match="not a copy made for this CPU"):
            cpu_weights.remove(not_a_copy)
        assert not_a_copy.is_file()
    copy.unlink()  # the copy gone by hand, its note left: removing it still removes the note
    cpu_weights.remove(copy)
    assert not copy.exists() and not copy.with_suffix(".json").exists()
    assert cpu_weights.ready(src, Role.FAST_TARGET) is None and cpu_weights.fast_copy_offered(src) == cpu_weights.cpu_suits()


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.one_of(st.binary(max_size=40), st.builds(lambda v: json.dumps({"source": v}).encode(),
                                                   st.one_of(st.none(), st.integers(), st.lists(st.text(max_size=3)),
                                                             st.dictionaries(st.text(max_size=3), st.integers())))))
def test_a_crafted_note_beside_a_copy_is_no_source(tiny, note):
    """What sits beside a copy could be anything (a disk error, a stranger's file): never a traceback."""
    copy = cpu_weights.folder() / "crafted.cpu-q4_0-target.gguf"
    copy.parent.mkdir(parents=True, exist_ok=True)
    copy.write_bytes(b"GGUF")
    copy.with_suffix(".json").write_bytes(note)
    assert cpu_weights.source_of(copy) is None


def test_no_fast_copy_is_offered_on_a_cpu_without_the_kernels(tiny, tmp_path, monkeypatch):
    """Where the repacked Q4_0 kernels are not what llama.cpp runs (no AVX2, not x86-64), a copy would be
    another model for nothing: not offered, whatever the file."""
    src = tiny_models.write_tiny_model(tmp_path / "t.gguf", tiny_models.TARGET)
    monkeypatch.setattr(cpu_weights, "cpu_suits", lambda: False)
    assert cpu_weights.plan(src, Role.FAST_TARGET) and not cpu_weights.fast_copy_offered(src)
