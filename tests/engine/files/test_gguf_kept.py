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
from tree import ROOT


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


# -- kept between launches ----------------------------------------------------------------------------
CHILD = r"""
import json, sys
from engine.gguf_check import validate_gguf, validation_counts
from engine.errors import ModelFileError
try:
    info = validate_gguf(sys.argv[1], read_tokens=sys.argv[2] == "tokens")
    out = {"ok": True, "version": info.version, "size": info.size, "n_params": info.n_params, "name": info.name,
           "metadata": sorted((k, repr(v)) for k, v in info.metadata.items()), "tensors": repr(info.tensors)}
except ModelFileError as exc:
    out = {"ok": False, "error": str(exc)}
c = validation_counts()
print(json.dumps({**out, "reads": c.reads, "kept": c.kept}))
"""


def launch_check(path: Path, home: Path, tokens: bool = False) -> dict:
    """validate_gguf in a fresh process (a launch), with its own cache folder under `home`."""
    import json
    import subprocess
    import sys

    env = {**os.environ, "DRAFTLIGHT_HOME": str(home), "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-c", CHILD, str(path), "tokens" if tokens else "no"], env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.fixture
def big_model(tmp_path) -> Path:
    """A tiny model with an array in its metadata, padded (sparse) past engine.gguf_check.KEPT_MIN_BYTES:
    a file as large as a real model."""
    from engine.gguf_check import KEPT_MIN_BYTES

    def with_tags(w, tokens, scores, types):
        w.add_token_list(tokens), w.add_token_scores(scores), w.add_token_types(types)
        w.add_array("general.tags", ["code", "tiny"])

    path = write_tiny_model(tmp_path / "big.gguf", TinySpec(n_layer=1, vocab_writer=with_tags))
    with open(path, "r+b") as fh:
        fh.truncate(KEPT_MIN_BYTES + 4096)
    return path


def test_the_next_launch_takes_the_answer_kept_for_a_large_file_unchanged_since(big_model, tmp_path, tiny):
    home = tmp_path / "home"
    first = launch_check(big_model, home)
    assert first["ok"] and (first["reads"], first["kept"]) == (1, 0)
    again = launch_check(big_model, home)
    assert (again["reads"], again["kept"]) == (0, 1)
    assert {k: v for k, v in again.items() if k not in ("reads", "kept")} == \
           {k: v for k, v in first.items() if k not in ("reads", "kept")}  # the same answer, field by field
    # The tokens' texts are not kept: asked for, the file is read.
    assert (launch_check(big_model, home, tokens=True)["reads"]) == 1
    # A small file is never kept (it is read in milliseconds): the tiny model itself, twice.
    small = Path(shutil.copy(tiny["target"], tmp_path / "small.gguf"))
    assert [launch_check(small, home)["reads"] for _ in range(2)] == [1, 1]


def test_a_large_file_changed_between_launches_is_read_again_and_refused(big_model, tmp_path):
    home = tmp_path / "home"
    assert launch_check(big_model, home)["ok"]
    st = os.stat(big_model)
    at = last_tensor_offset_at(big_model)
    with open(big_model, "r+b") as fh:  # damage in place: the last tensor's data offset, far past the end
        fh.seek(at)
        fh.write(struct.pack("<Q", 1 << 40))
    os.utime(big_model, ns=(st.st_atime_ns, st.st_mtime_ns))  # its time put back: the header's hash differs
    assert os.stat(big_model).st_mtime_ns == st.st_mtime_ns
    damaged = launch_check(big_model, home)
    assert not damaged["ok"] and "big.gguf" in damaged["error"] and damaged["reads"] == 1


def test_a_damaged_store_of_kept_answers_is_as_good_as_none(big_model, tmp_path):
    from engine.gguf_check import KEPT_NAME

    home = tmp_path / "home"
    assert launch_check(big_model, home)["ok"]
    store = home / "cache" / KEPT_NAME
    import json

    entries = json.loads(store.read_text())
    (entry,) = entries.values()
    for bad in ({**entry, "tensors": [["x", "not a shape", 0]]}, {**entry, "digest": "zz"},
                {**entry, "stamp": None}, {**entry, "header_end": 10**12}, {**entry, "metadata": []}):
        store.write_text(json.dumps({k: bad for k in entries}))
        got = launch_check(big_model, home)
        assert got["ok"] and got["reads"] == 1 and got["kept"] == 0, bad
    store.write_text("{not json")
    assert launch_check(big_model, home)["reads"] == 1
    assert launch_check(big_model, home)["kept"] == 1  # and the answer is kept again


@pytest.fixture
def launches(monkeypatch, tmp_path):
    """In this process, as in a new launch each time it is called: the process's kept answers forgotten, the
    cache folder (where answers are kept between launches) under tmp_path. Returns the counts since."""
    import engine.gguf_check as gc

    monkeypatch.setenv("DRAFTLIGHT_HOME", str(tmp_path / "home-in-process"))

    def new_launch():
        monkeypatch.setattr(gc, "_checked", gc._CheckedFiles())
        return gc._checked

    return new_launch


def test_in_one_process_a_new_launch_takes_exactly_the_answer_a_walk_gives(big_model, launches, tmp_path, tiny):
    from engine.gguf_check import KEPT_NAME

    first = launches()
    walked = validate_gguf(big_model.resolve(), read_tokens=False)
    assert (first.reads, first.kept) == (1, 0)
    second = launches()
    kept = validate_gguf(big_model.resolve(), read_tokens=False)
    assert (second.reads, second.kept) == (0, 1)
    assert kept == walked and dict(kept.metadata) == dict(walked.metadata) and kept.tensors == walked.tensors
    assert kept.metadata["general.tags"] == ("code", "tiny")  # read-only, as a walk gives it
    assert validate_gguf(big_model, read_tokens=False) is kept and second.reused == 1  # then kept for the process
    with_tokens = validate_gguf(big_model)  # the texts are not kept between launches: read
    assert second.reads == 1 and len(with_tokens.tokens) == kept.vocab_size > 0
    # A file below the size is never written down.
    launches()
    small = Path(shutil.copy(tiny["target"], tmp_path / "small.gguf"))
    store = tmp_path / "home-in-process" / "cache" / KEPT_NAME
    before = store.read_text()
    validate_gguf(small, read_tokens=False)
    assert store.read_text() == before and str(small.resolve()) not in before


def test_in_one_process_a_changed_file_or_a_bad_entry_means_a_walk(big_model, launches, tmp_path):
    import json

    from engine.gguf_check import KEPT_NAME

    launches()
    validate_gguf(big_model, read_tokens=False)
    store = tmp_path / "home-in-process" / "cache" / KEPT_NAME
    good = json.loads(store.read_text())
    (key,) = good
    entry = good[key]
    for bad in ({**entry, "stamp": [entry["stamp"][0] + 1, *entry["stamp"][1:]]},  # each part of the stamp
                {**entry, "stamp": [entry["stamp"][0], entry["stamp"][1] + 1, *entry["stamp"][2:]]},
                {**entry, "stamp": [*entry["stamp"][:2], entry["stamp"][2] + 1, entry["stamp"][3]]},
                {**entry, "stamp": [*entry["stamp"][:3], entry["stamp"][3] + 1]},
                {**entry, "digest": "00" * 32}, {**entry, "header_end": entry["header_end"] - 1},
                {**entry, "header_end": 0}, {**entry, "header_end": -5}, {**entry, "header_end": "end"},
                {**entry, "tensors": [["x", "not a shape", 0]]}, {**entry, "metadata": []}, {**entry, "n_params": "many"},
                {k: v for k, v in entry.items() if k != "version"}):
        store.write_text(json.dumps({key: bad}))
        counts = launches()
        assert validate_gguf(big_model, read_tokens=False).n_params > 0
        assert (counts.reads, counts.kept) == (1, 0), bad
    store.write_text(json.dumps({key: entry}))
    st = os.stat(big_model)
    with open(big_model, "r+b") as fh:  # damage in place, its time put back: the header's hash differs
        fh.seek(last_tensor_offset_at(big_model))
        fh.write(struct.pack("<Q", 1 << 40))
    os.utime(big_model, ns=(st.st_atime_ns, st.st_mtime_ns))
    counts = launches()
    with pytest.raises(ModelFileError, match="big.gguf"):
        validate_gguf(big_model, read_tokens=False)
    assert (counts.reads, counts.kept) == (1, 0)


def test_kept_between_launches_from_exactly_the_size_on_and_answered_as_asked(big_model, launches, tmp_path):
    """The size that is kept is a bound (a file of exactly KEPT_MIN_BYTES is kept, one byte less is not),
    and a kept answer names the file as it was asked for (a link to it), not as it was kept."""
    from engine.gguf_check import KEPT_MIN_BYTES

    for size, kept in ((KEPT_MIN_BYTES, 1), (KEPT_MIN_BYTES - 1, 0)):
        with open(big_model, "r+b") as fh:
            fh.truncate(size)
        launches()
        validate_gguf(big_model, read_tokens=False)
        counts = launches()
        validate_gguf(big_model, read_tokens=False)
        assert (counts.reads, counts.kept) == (1 - kept, kept), size
    with open(big_model, "r+b") as fh:
        fh.truncate(KEPT_MIN_BYTES)
    launches()
    validate_gguf(big_model, read_tokens=False)
    link = tmp_path / "link.gguf"
    link.symlink_to(big_model)
    counts = launches()
    assert validate_gguf(link, read_tokens=False).path == link and counts.kept == 1


def test_threads_checking_one_file_walk_it_once_and_no_lock_outlives_the_checks(tmp_path, tiny):
    """Eight threads asking for the same file at once: one walks it, the others wait and take its answer;
    afterwards (and after checks of many other files, as a download's parts are) no per-file lock is left."""
    import threading

    from engine import gguf_check

    path = Path(shutil.copy(tiny["target"], tmp_path / "t.gguf"))
    before, start, answers = reads(), threading.Barrier(8), []

    def check() -> None:
        start.wait()
        answers.append(validate_gguf(path))

    threads = [threading.Thread(target=check) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert reads() - before == 1 and len(answers) == 8 and all(a is answers[0] for a in answers)
    for i in range(40):
        other = Path(shutil.copy(tiny["drafter"], tmp_path / f"part-{i}.gguf"))
        validate_gguf(other)
    broken = tmp_path / "broken.gguf"
    broken.write_bytes(open(tiny["drafter"], "rb").read()[:4096])  # cut short mid-header
    with pytest.raises(ModelFileError):
        validate_gguf(broken)  # a failed check leaves no lock either
    assert gguf_check._checked._walks == {}
