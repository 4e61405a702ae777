"""Files from strangers: what `models verify` passes, llama.cpp must load, in a separate process so a
signal (llama.cpp's asserts abort) is seen, not suffered. The tokenizer faults are the ones llama.cpp's
vocabulary loader throws or asserts on (llama-vocab.cpp, `load`); the property tests mutate a real
tiny file's header; the cost tests hold the validator to bounded time and memory."""
from __future__ import annotations

import os
import struct
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest
from gguf import GGUFValueType, GGUFWriter
from hypothesis import HealthCheck, given, settings, strategies as st

from engine.errors import ModelFileError
from engine.gguf_check import validate_gguf
from tiny_models import TinySpec, write_tiny_model
from tree import ROOT

LOAD = (
    "import sys\n"
    "from engine.errors import EngineError\n"
    "from engine.llama.backend import LlamaModel, LoadSettings\n"
    "try:\n"
    "    LlamaModel(sys.argv[1], LoadSettings(n_ctx=64, n_threads=1)).close()\n"
    "except EngineError as exc:\n"
    "    print(exc, file=sys.stderr); sys.exit(3)\n"
)


RAW_LOAD = (  # llama.cpp alone, no check of ours before it: the reference for what it aborts on
    "import sys\n"
    "import llama_cpp as lc\n"
    "lc.llama_backend_init()\n"
    "model = lc.llama_model_load_from_file(sys.argv[1].encode(), lc.llama_model_default_params())\n"
    "sys.exit(0 if model else 3)\n"
)


def load_raw_in_process(path: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", RAW_LOAD, str(path)], cwd=ROOT, capture_output=True, text=True,
                          timeout=120)


def load_in_process(path: Path) -> subprocess.CompletedProcess:
    """llama.cpp opening the file, in its own process: 0 loaded, 3 refused cleanly, < 0 a signal."""
    return subprocess.run([sys.executable, "-c", LOAD, str(path)], cwd=ROOT, capture_output=True, text=True,
                          timeout=120, env={**os.environ, "PYTHONPATH": str(ROOT)})


def write_with(path: Path, vocab_writer) -> Path:
    return write_tiny_model(path, replace(TinySpec(n_layer=1, n_embd=32, n_ff=64, name="crafted"),
                                          vocab_writer=vocab_writer))


def _dup(w, tokens, scores, types):
    tokens = list(tokens)
    tokens[300] = tokens[301]
    w.add_token_list(tokens), w.add_token_scores(scores), w.add_token_types(types)


FAULTS = {
    "two equal token texts": (_dup, "both"),
    "scores shorter than the tokens": (lambda w, t, s, y: (w.add_token_list(t), w.add_token_scores(s[:-5]),
                                                           w.add_token_types(y)), "entries for"),
    "token types shorter than the tokens": (lambda w, t, s, y: (w.add_token_list(t), w.add_token_scores(s),
                                                                w.add_token_types(y[:-5])), "entries for"),
    "tokens stored as integers": (lambda w, t, s, y: (w.add_array("tokenizer.ggml.tokens", list(range(len(t)))),
                                                      w.add_token_scores(s), w.add_token_types(y)), "not an array of text"),
    "scores stored as text": (lambda w, t, s, y: (w.add_token_list(t), w.add_array("tokenizer.ggml.scores",
                                                                                     [str(x) for x in s]),
                                                  w.add_token_types(y)), "cannot read"),
}


@pytest.mark.parametrize("fault", list(FAULTS))
def test_tokenizer_faults_llama_cpp_refuses_or_aborts_on_are_refused_by_verify(tmp_path, fault):
    writer, words = FAULTS[fault]
    path = write_with(tmp_path / "crafted.gguf", writer)
    loaded = load_in_process(path)
    assert loaded.returncode != 0  # the independent reference: llama.cpp itself cannot use this file
    with pytest.raises(ModelFileError, match=words):
        validate_gguf(path)


def test_the_cli_says_no_in_one_line_where_llama_cpp_aborted(tmp_path):
    path = write_with(tmp_path / "dup.gguf", _dup)
    r = subprocess.run([sys.executable, "-m", "engine", "models", "verify", str(path)], cwd=ROOT, capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 2 and "Traceback" not in r.stderr and "both" in r.stderr


def _with(**extra):
    """A vocabulary writer that also writes the given metadata (key: (kind, value))."""
    def write(w, tokens, scores, types):
        w.add_token_list(tokens), w.add_token_scores(scores), w.add_token_types(types)
        for key, (kind, value) in extra.items():
            getattr(w, f"add_{kind}")(key, value)
    return write


def _block_count(value: int):
    def bend(path: Path) -> None:
        data = bytearray(path.read_bytes())
        at = bytes(data).index(b"llama.block_count") + len(b"llama.block_count") + 4  # then the value type: u32
        data[at:at + 4] = struct.pack("<I", value)
        path.write_bytes(bytes(data))
    return bend


#: Hyperparameters llama.cpp's loader asserts on (llama-model.cpp, load_hparams): it aborts.
HPARAM_FAULTS = {
    # the header fuzz test's find: one byte, 1 -> 513 layers (seed 322352956478829221363537802213624812782)
    "513 layers": (None, _block_count(513), "block_count is 513"),
    "no layers": (None, _block_count(0), "block_count is 0"),
    "an unknown rope scaling": (_with(**{"llama.rope.scaling.type": ("string", "sideways")}), None, "rope.scaling.type"),
    "more experts used than there are": (_with(**{"llama.expert_count": ("uint32", 0),
                                                  "llama.expert_used_count": ("uint32", 2)}), None, "expert_used_count"),
}


@pytest.mark.parametrize("fault", list(HPARAM_FAULTS))
def test_hyperparameters_llama_cpp_aborts_on_are_refused_by_verify(tmp_path, fault):
    writer, bend, reason = HPARAM_FAULTS[fault]
    path = write_with(tmp_path / "h.gguf", writer)
    if bend:
        bend(path)
    loaded = load_raw_in_process(path)
    assert loaded.returncode < 0, (loaded.returncode, loaded.stderr[-300:])  # the reference: llama.cpp aborts
    with pytest.raises(ModelFileError, match=reason):
        validate_gguf(path)


@pytest.fixture(scope="module")
def clean(tmp_path_factory) -> tuple[bytes, int]:
    """A tiny real file and where its tensor data starts (the header is what a stranger can bend)."""
    path = write_with(tmp_path_factory.mktemp("clean") / "clean.gguf", None)
    data = path.read_bytes()
    validate_gguf(path)
    assert load_in_process(path).returncode == 0
    from gguf import GGUFReader
    return data, GGUFReader(path).data_offset


def test_a_token_cut_short_by_a_nul_byte_into_another_tokens_text_is_refused(tmp_path, clean):
    """llama.cpp reads token texts as C strings: '<\\x00x35>' is '<', which another token already is, and it
    aborts (found by the test below: one byte of the header set to 0)."""
    raw, _ = clean
    buf = bytearray(raw)
    at = raw.index(b"<0x35>")
    buf[at + 1] = 0
    path = tmp_path / "nul.gguf"
    path.write_bytes(bytes(buf))
    # The independent reference: llama.cpp itself, given the file with no check before it, aborts.
    raw_load = ("import sys, llama_cpp as lc\nlc.llama_backend_init()\np = lc.llama_model_default_params()\n"
                "p.vocab_only = True\nsys.exit(0 if lc.llama_model_load_from_file(sys.argv[1].encode(), p) else 4)\n")
    assert subprocess.run([sys.executable, "-c", raw_load, str(path)], capture_output=True, timeout=120).returncode < 0
    with pytest.raises(ModelFileError, match="are both '<'"):
        validate_gguf(path)
    assert load_in_process(path).returncode == 3  # refused with that reason, never a signal


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.data())
def test_a_mutated_header_is_refused_or_loads_never_a_signal_or_a_traceback(tmp_path, clean, data):
    raw, header_end = clean
    buf = bytearray(raw)
    for _ in range(data.draw(st.integers(1, 3))):
        at = data.draw(st.integers(0, header_end - 8))
        how = data.draw(st.sampled_from(["byte", "u32", "u64", "zero"]))
        if how == "byte":
            buf[at] = data.draw(st.integers(0, 255))
        elif how == "u32":
            buf[at:at + 4] = struct.pack("<I", data.draw(st.sampled_from([0, 1, 2, 8, 0xFFFF, 2**31, 2**32 - 1])))
        elif how == "u64":
            buf[at:at + 8] = struct.pack("<Q", data.draw(st.sampled_from([0, 1, 7, 2**20, 2**40, 2**64 - 1])))
        else:
            buf[at:at + 8] = bytes(8)
    path = tmp_path / "mutated.gguf"
    path.write_bytes(bytes(buf))
    try:
        validate_gguf(path)
    except ModelFileError:
        return  # refused with a reason: the normal case
    loaded = load_in_process(path)
    assert loaded.returncode in (0, 3), (loaded.returncode, loaded.stderr[-400:])  # never a signal
    assert "Traceback" not in loaded.stderr


@settings(max_examples=12, deadline=None)
@given(fault=st.sampled_from(["count", "type", "length"]), key=st.sampled_from(
    ["tokenizer.ggml.tokens", "tokenizer.ggml.scores", "tokenizer.ggml.token_type"]),
    value=st.sampled_from([0, 1, 5, 2**31]))
def test_tokenizer_arrays_bent_in_place_are_refused_or_load(tmp_path_factory, fault, key, value):
    """The array headers of the tokenizer entries rewritten: element type, count, or first string length."""
    path = write_with(tmp_path_factory.mktemp("bent") / "t.gguf", None)
    buf = bytearray(path.read_bytes())
    at = bytes(buf).index(key.encode()) + len(key)  # then: value type (u32), element type (u32), count (u64)
    if fault == "type":
        buf[at + 4:at + 8] = struct.pack("<I", [GGUFValueType.INT32, GGUFValueType.STRING, GGUFValueType.FLOAT32,
                                                 GGUFValueType.UINT8][value % 4])
    elif fault == "count":
        buf[at + 8:at + 16] = struct.pack("<Q", value)
    else:
        buf[at + 16:at + 24] = struct.pack("<Q", value)
    path.write_bytes(bytes(buf))
    try:
        validate_gguf(path)
    except ModelFileError:
        return
    loaded = load_in_process(path)
    assert loaded.returncode == 0, loaded.stderr[-400:]  # verify passed: llama.cpp must load it


# -- the validator's own cost ----------------------------------------------------------------------------
MEASURE = (
    "import resource, sys\n"
    "from engine.errors import ModelFileError\n"
    "from engine.gguf_check import validate_gguf\n"
    "before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss\n"
    "try:\n"
    "    validate_gguf(sys.argv[1])\n"
    "except ModelFileError:\n"
    "    pass\n"
    "print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before)\n"
)


def peak_kib(path: Path) -> int:
    r = subprocess.run([sys.executable, "-c", MEASURE, str(path)], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    return int(r.stdout.strip())


def test_a_huge_metadata_array_costs_bounded_memory(tmp_path):
    path = tmp_path / "big-array.gguf"
    w = GGUFWriter(str(path), "llama")
    w.add_tokenizer_model("none")
    w.add_array("general.huge", [0])
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.close()
    # Rewrite the one-entry array as a 30-million-entry one (the writer would build a Python list of it).
    raw = bytearray(path.read_bytes())
    key = b"general.huge"
    at = raw.index(key) + len(key) + 8  # past value type and element type: the count
    raw[at:at + 8] = struct.pack("<Q", 30_000_000)
    raw = raw[: at + 8] + bytes(30_000_000) + raw[at + 9:]
    path.write_bytes(bytes(raw))
    array_kib = 30_000_000 // 1024
    assert peak_kib(path) < 1.5 * array_kib + 100 * 1024


def test_a_million_empty_tensor_records_are_refused_at_once(tmp_path):
    path = tmp_path / "records.gguf"
    header = struct.pack("<IIQQ", 0x46554747, 3, 1_000_000, 1)
    kv = struct.pack("<Q", 20) + b"general.architecture" + struct.pack("<IQ", GGUFValueType.STRING, 5) + b"llama"
    record = struct.pack("<Q", 0) + struct.pack("<I", 1) + struct.pack("<Q", 32) + struct.pack("<IQ", 0, 0)
    path.write_bytes(header + kv + record * 1_000_000)
    with pytest.raises(ModelFileError, match="tensors"):
        validate_gguf(path)
    assert peak_kib(path) < 100 * 1024


def test_an_alignment_that_is_not_a_number_is_one_bad_file(tmp_path):
    from engine.models import modelstore

    good = write_with(tmp_path / "good.gguf", None)
    bad = tmp_path / "bad.gguf"
    w = GGUFWriter(str(bad), "llama")
    w.add_string("general.alignment", "thirty-two")
    w.add_tokenizer_model("none")
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    with pytest.raises(ModelFileError, match="alignment"):
        validate_gguf(bad)
    records, problems = modelstore.scan(tmp_path)
    assert [r.path.name for r in records] == [good.name]
    assert [p.name for p, _ in problems] == [bad.name]
