"""engine.gguf_check rejects damaged files with a message that says what is wrong, and agrees with
gguf's own GGUFReader on good ones. The bad files are the tiny models with bytes edited at the
offsets GGUFReader reports."""
from __future__ import annotations

import re
import struct
from pathlib import Path

import numpy as np
import pytest
from gguf import GGUFReader

from engine.errors import ModelFileError
from engine.gguf_check import validate_gguf


def part_offset(field, index: int) -> int:
    """Byte offset of one part of a GGUFReader field (parts are stored back to back)."""
    return field.offset + sum(p.nbytes for p in field.parts[:index])


def edited(src: Path, dest: Path, offset: int, new: bytes) -> Path:
    data = bytearray(src.read_bytes())
    data[offset : offset + len(new)] = new
    dest.write_bytes(bytes(data))
    return dest


def reject(path: Path, pattern: str) -> str:
    with pytest.raises(ModelFileError, match=pattern) as exc:
        validate_gguf(path)
    msg = str(exc.value)
    assert "\n" not in msg and path.name in msg
    return msg


def test_random_bytes_are_not_a_gguf(tmp_path):
    junk = tmp_path / "junk.gguf"
    junk.write_bytes(np.random.default_rng(1).bytes(100_000))
    reject(junk, r"is not a GGUF model: it starts with b'")


def test_wrong_magic(tmp_path, tiny):
    other = edited(tiny["target"], tmp_path / "magic.gguf", 0, b"GGUX")
    reject(other, r"is not a GGUF model: it starts with b'GGUX', not b'GGUF'")
    old = edited(tiny["target"], tmp_path / "old.bin", 0, b"tjgg")  # ggjt: the format before GGUF
    reject(old, r"is an old GGML-format model")


def test_unsupported_and_big_endian_versions(tmp_path, tiny):
    reject(edited(tiny["target"], tmp_path / "v9.gguf", 4, struct.pack("<I", 9)), r"has GGUF version 9")
    reject(edited(tiny["target"], tmp_path / "be.gguf", 4, struct.pack(">I", 3)), r"is a big-endian GGUF file")


def test_truncated_in_the_tensor_data(tmp_path, tiny):
    data = tiny["target"].read_bytes()
    cut = tmp_path / "cut.gguf"
    cut.write_bytes(data[: int(len(data) * 0.6)])
    msg = reject(cut, r"is truncated: it has [\d,]+ bytes but its tensor data runs to byte [\d,]+ \(\d+% present")
    assert f"{len(data):,}" in msg  # names the size the complete file has


def test_truncated_in_the_header(tmp_path, tiny):
    data = tiny["target"].read_bytes()
    tiny_cut = tmp_path / "head.gguf"
    tiny_cut.write_bytes(data[:300])
    reject(tiny_cut, r"is truncated: its header lists 23 metadata entries and 30 tensors but the file ends at byte 300")
    cut = tmp_path / "meta.gguf"
    cut.write_bytes(data[:2000])
    reject(cut, r"runs past the end of the file \(needs byte [\d,]+, the file has 2,000\)")


def test_metadata_string_length_pointing_past_the_end(tmp_path, tiny):
    field = GGUFReader(tiny["target"]).fields["general.name"]
    at = part_offset(field, 3)  # parts: key length, key, value type, value length, value
    bad = edited(tiny["target"], tmp_path / "len.gguf", at, struct.pack("<Q", 1 << 40))
    reject(bad, r"is damaged: metadata entry 'general.name' claims a text of 1,099,511,627,776 bytes, longer than the whole file")


def test_tensor_data_past_the_end(tmp_path, tiny):
    tensor = GGUFReader(tiny["target"]).tensors[3]
    at = part_offset(tensor.field, 5)  # parts: name length, name, n_dims, dims, type, data offset
    bad = edited(tiny["target"], tmp_path / "offset.gguf", at, struct.pack("<Q", 1 << 32))
    reject(bad, rf"is damaged: the data of tensor '{tensor.name}' would end at byte [\d,]+, past the end of the file")
    misaligned = edited(tiny["target"], tmp_path / "align.gguf", at, struct.pack("<Q", 12345))
    reject(misaligned, rf"tensor '{tensor.name}' \(12,345\) is not aligned to 32")


def test_absurd_counts_in_the_header(tmp_path, tiny):
    reject(edited(tiny["target"], tmp_path / "kv.gguf", 16, struct.pack("<Q", 1 << 50)), r"its header claims")


def test_each_failure_has_its_own_message(tmp_path, tiny):
    """The point of the messages: a person can tell these apart."""
    data = tiny["target"].read_bytes()
    reader = GGUFReader(tiny["target"])
    (tmp_path / "a.gguf").write_bytes(np.random.default_rng(2).bytes(5000))
    (tmp_path / "b.gguf").write_bytes(data[: len(data) // 2])
    edited(tiny["target"], tmp_path / "c.gguf", 0, b"XXXX")
    edited(tiny["target"], tmp_path / "d.gguf", part_offset(reader.fields["general.name"], 3), struct.pack("<Q", 1 << 40))
    edited(tiny["target"], tmp_path / "e.gguf", part_offset(reader.tensors[0].field, 5), struct.pack("<Q", 1 << 32))
    kinds = set()
    for name in "abcde":
        with pytest.raises(ModelFileError) as exc:
            validate_gguf(tmp_path / f"{name}.gguf")
        kinds.add(re.sub(r"'[^']*'|[\d,]+", "_", str(exc.value).replace(f"{name}.gguf", "")))
    # random bytes and a wrong magic are the same failure; the other three each differ
    assert len(kinds) == 4, kinds


@pytest.mark.parametrize("key", ["target", "drafter", "other-vocab"])
def test_agrees_with_gguf_reader(tiny, key):
    path = tiny[key]
    ours = validate_gguf(path)
    ref = GGUFReader(path)
    assert ours.architecture == ref.fields["general.architecture"].contents()
    assert ours.name == ref.fields["general.name"].contents()
    assert len(ours.tensors) == len(ref.tensors)
    assert [t[0] for t in ours.tensors] == [t.name for t in ref.tensors]
    assert [t[1] for t in ours.tensors] == [tuple(int(d) for d in t.shape) for t in ref.tensors]
    assert [t[2] for t in ours.tensors] == [t.tensor_type.name for t in ref.tensors]
    assert [t[3] for t in ours.tensors] == [int(t.n_bytes) for t in ref.tensors]
    assert ours.n_params == sum(int(t.n_elements) for t in ref.tensors)
    assert list(ours.tokens) == ref.fields["tokenizer.ggml.tokens"].contents()
    ref_keys = {k for k in ref.fields if not k.startswith("GGUF.")}
    assert set(ours.metadata) - {"tokenizer.ggml.tokens.count"} == ref_keys - {"tokenizer.ggml.tokens"}
    for k in ("llama.block_count", "llama.context_length", "tokenizer.ggml.bos_token_id", "tokenizer.chat_template"):
        assert ours.metadata[k] == ref.fields[k].contents()


def test_real_pair_summary(real_pair):
    target, draft = (validate_gguf(p, read_tokens=False) for p in real_pair)
    assert (target.architecture, draft.architecture) == ("qwen2", "qwen2")
    assert target.vocab_size == draft.vocab_size == 151936
    assert target.quantization == draft.quantization == "Q4_K_M"
    assert target.n_params > 2 * draft.n_params
