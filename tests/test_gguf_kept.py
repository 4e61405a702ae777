"""A file's check is kept for the process while the file stays the same (engine.gguf_check): asking
again reads nothing, the answer cannot be changed by the caller it was given to, and a file rewritten,
replaced or damaged since is read again and refused. Real tiny GGUF files, real reads."""
from __future__ import annotations

import dataclasses
import os
import shutil
import struct
from pathlib import Path

import pytest
from gguf import GGUFReader

from engine.errors import ModelFileError
from engine.gguf_check import validate_gguf, validation_counts
from tiny_models import TinySpec, write_tiny_model


def reads() -> int:
    return validation_counts().reads


def last_tensor_offset_at(path: Path) -> int:
    """Where the last tensor record's data offset lies: the last bytes of the header the check reads."""
    field = GGUFReader(path).tensors[-1].field
    return field.offset + sum(p.nbytes for p in field.parts[:5])


def test_asking_again_reads_nothing_and_the_answer_cannot_be_changed(tmp_path, tiny):
    path = Path(shutil.copy(tiny["target"], tmp_path / "t.gguf"))
    before = validation_counts()
    first = validate_gguf(path)
    again, without_tokens = validate_gguf(path), validate_gguf(path, read_tokens=False)
    after = validation_counts()
    assert (after.reads - before.reads, after.reused - before.reused) == (1, 2)
    assert again is first and without_tokens is first  # read with the tokens: answers a request without them
    assert validate_gguf(str(tmp_path / "." / "t.gguf")).path == tmp_path / "." / "t.gguf"  # as it was asked for
    assert reads() == after.reads

    with pytest.raises(dataclasses.FrozenInstanceError):
        first.size = 1  # type: ignore[misc]
    with pytest.raises(TypeError):
        first.metadata["general.name"] = "changed"  # type: ignore[index]
    with pytest.raises(AttributeError):
        first.tokens.append("x")  # type: ignore[attr-defined]
    with pytest.raises(AttributeError):
        first.tensors.pop()  # type: ignore[attr-defined]
    later = validate_gguf(path)
    assert later.metadata["general.name"] == first.name and len(later.tokens) == first.vocab_size


def test_an_array_in_the_metadata_is_read_only(tmp_path):
    def with_tags(w, tokens, scores, types):
        w.add_token_list(tokens), w.add_token_scores(scores), w.add_token_types(types)
        w.add_array("general.tags", ["code", "tiny"])

    path = write_tiny_model(tmp_path / "tagged.gguf", TinySpec(n_layer=1, vocab_writer=with_tags))
    tags = validate_gguf(path).metadata["general.tags"]
    assert tags == ("code", "tiny")
    with pytest.raises(AttributeError):
        tags.append("changed")  # type: ignore[attr-defined]


def test_tokens_asked_for_after_an_answer_without_them_are_read(tmp_path, tiny):
    path = Path(shutil.copy(tiny["drafter"], tmp_path / "d.gguf"))
    n = reads()
    assert validate_gguf(path, read_tokens=False).tokens == ()
    with_tokens = validate_gguf(path, read_tokens=True)
    assert reads() == n + 2 and len(with_tokens.tokens) == with_tokens.vocab_size > 0
    assert validate_gguf(path, read_tokens=False) is with_tokens and reads() == n + 2


def test_a_file_rewritten_since_is_read_again(tmp_path):
    path = write_tiny_model(tmp_path / "m.gguf", TinySpec(n_layer=1, name="first"))
    assert validate_gguf(path).name == "first"
    n = reads()
    write_tiny_model(path, TinySpec(n_layer=2, name="second"))  # another size, another time
    assert validate_gguf(path).name == "second" and reads() == n + 1


def test_a_good_file_replaced_by_a_damaged_one_is_refused(tmp_path, tiny):
    path = Path(shutil.copy(tiny["target"], tmp_path / "t.gguf"))
    validate_gguf(path)
    data = bytearray(path.read_bytes())
    at = last_tensor_offset_at(path)
    data[at : at + 8] = struct.pack("<Q", 1 << 32)
    swap = tmp_path / "swap.gguf"
    swap.write_bytes(bytes(data))
    os.replace(swap, path)  # same name, same size, another file
    with pytest.raises(ModelFileError, match="past the end of the file"):
        validate_gguf(path)


def test_a_file_damaged_in_place_with_its_time_put_back_is_refused(tmp_path, tiny):
    """Same path, size, inode and modification time as the file that passed: only its bytes differ."""
    path = Path(shutil.copy(tiny["target"], tmp_path / "t.gguf"))
    validate_gguf(path)
    st = os.stat(path)
    at = last_tensor_offset_at(path)
    with open(path, "r+b") as fh:
        fh.seek(at)
        fh.write(struct.pack("<Q", 1 << 32))
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    now = os.stat(path)
    assert (now.st_size, now.st_mtime_ns, now.st_ino) == (st.st_size, st.st_mtime_ns, st.st_ino)
    n = reads()
    with pytest.raises(ModelFileError, match="past the end of the file"):
        validate_gguf(path)
    with pytest.raises(ModelFileError, match="past the end of the file"):
        validate_gguf(path, read_tokens=False)  # the failure was not kept: read and refused again
    assert reads() == n + 2


def test_a_damaged_file_that_is_mended_passes(tmp_path, tiny):
    good = tiny["target"].read_bytes()
    path = tmp_path / "t.gguf"
    path.write_bytes(good[: len(good) // 2])
    with pytest.raises(ModelFileError, match="truncated"):
        validate_gguf(path)
    path.write_bytes(good)
    assert validate_gguf(path).size == len(good)
