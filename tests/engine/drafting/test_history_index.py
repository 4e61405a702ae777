"""The index of past conversations (engine.drafting.history_index) and drafting from it.

References are written in the tests: counts and n-gram tallies worked out by hand from short
token histories, the rule of succession (count + 1) / (total + 2) done in the test's own
arithmetic, the vocabulary fingerprint recomputed from the GGUF file's token list with ggml's
own `gguf` reader, and greedy decoding of the same tiny target without any drafter.
"""
from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from gguf import GGUFReader

import tiny_models
from engine.drafting.lookup import LookupDrafter
from engine.drafting.draft_choice import DraftKind
from engine.decoding.events import RoundEvent, TokenEvent
from engine.drafting.history_index import (
    ENTRY_BYTES,
    MAX_CONVERSATIONS,
    HistoryIndex,
    Step,
    _why,
    bucket,
    context_hash,
    default_folder,
    index_path,
    vocab_fingerprint,
)
from engine.llama.backend import LlamaModel
from engine.llama.types import LoadSettings
from engine.drafting.policy import AutoK
from engine.drafting.costs import CostModel
from engine.drafting.request import DraftKey, DraftRequest
from engine.sampling import SamplingParams
from engine.decoding.session import GenerationSettings, Session
from engine.errors import EngineError
from tree import ROOT

ONE_THREAD = LoadSettings(n_ctx=256, n_threads=1, n_threads_batch=1)
GREEDY = SamplingParams(temperature=0.0)


def conf(count: int, total: int) -> float:
    """The rule of succession, written out here as the reference."""
    return (count + 1) / (total + 2)


# -- counts, confidence, proposals from hand-written histories -------------------------------------------
def test_counts_of_a_hand_written_history():
    idx = HistoryIndex("fp")
    idx.add([5, 6, 7, 5, 6, 8, 5, 6, 7])
    # every (context, next) pair, contexts of 1..4 tokens, tallied by hand
    assert idx.continuations([5]) == {6: 3}
    assert idx.continuations([6]) == {7: 2, 8: 1}
    assert idx.continuations([7]) == {5: 1}
    assert idx.continuations([8]) == {5: 1}
    assert idx.continuations([5, 6]) == {7: 2, 8: 1}
    assert idx.continuations([6, 7]) == {5: 1}
    assert idx.continuations([5, 6, 7]) == {5: 1}
    assert idx.continuations([6, 8, 5, 6]) == {7: 1}
    assert idx.continuations([7, 5, 6, 8]) == {5: 1}
    assert idx.continuations([9]) == {} and idx.continuations([8, 5, 6, 7]) == {}  # 7 ends the text
    assert idx.continuations([]) == {} and idx.continuations([5, 6, 7, 5, 6]) == {}  # 1..4 tokens only
    # 5 distinct pairs of 1 token of context, 6 of 2, 6 of 3, 5 of 4
    assert idx.entries == 22 and idx.nbytes == 22 * ENTRY_BYTES
    assert idx.serial == 1 and idx.dirty


def test_a_step_carries_its_counts_share_and_confidence():
    idx = HistoryIndex("fp")
    idx.add([5, 6, 7, 5, 6, 8, 5, 6, 7])
    p = idx.propose([9, 5, 6], 1)
    assert p.steps == (Step(token=7, context=2, count=2, total=3),)
    assert p.steps[0].share == 2 / 3
    assert p.steps[0].confidence == pytest.approx(conf(2, 3)) == pytest.approx(0.6)
    assert p.tokens == [7] and p.match == 2 and p.bucket == 1


def test_proposals_follow_the_longest_context_seen():
    idx = HistoryIndex("fp")
    idx.add([1, 2, 3, 4, 5, 6, 7])
    idx.add([9, 3, 40])
    p = idx.propose([0, 2, 3], 8)
    assert p.tokens == [4, 5, 6, 7]  # the text ends after 7: nothing follows
    assert [s.context for s in p.steps] == [2, 3, 4, 4]
    assert p.confidences == pytest.approx([conf(1, 1)] * 4)
    assert idx.propose([9, 3], 8).tokens == [40]  # (9, 3) was seen: it wins over (3,)
    assert idx.propose([0, 2, 3], 2).tokens == [4, 5]  # at most k
    assert idx.propose([0, 2, 3], 0).tokens == []
    assert idx.propose([], 4).tokens == []


def test_one_token_of_context_needs_more_evidence():
    idx = HistoryIndex("fp")
    idx.add([1, 2, 3, 4])
    idx.add([9, 3, 40])
    # only (3,) is known after [7, 3]: {4: 1, 40: 1}, confidence 2/4 is below 0.8
    assert idx.propose([7, 3], 4).steps == ()
    # (2,) -> 3 seen once: 2/3 is below 0.8 too
    assert idx.propose([7, 2], 4).steps == ()
    for _ in range(2):
        idx.add([2, 3])
    # (2,) -> 3 three times out of three: 4/5 = 0.8 is enough; then (2, 3) -> 4 once, 2/3 >= 0.6 ... but
    # the draft started in bucket 2 (0.8) and 2/3 is bucket 1: it ends there
    p = idx.propose([7, 2], 4)
    assert p.steps == (Step(3, 1, 3, 3),) and p.bucket == 2


def test_two_tokens_of_context_need_more_than_one_in_two():
    idx = HistoryIndex("fp")
    idx.add([1, 2, 3])
    idx.add([1, 2, 4])
    # (1, 2) -> {3: 1, 4: 1}: confidence 2/4 is below 0.6 for 2 tokens of context
    assert idx.propose([1, 2], 4).steps == ()
    idx.add([0, 1, 2, 4])
    # (0, 1, 2) -> 4 once: 2/3 >= 0.5 for 3 tokens of context
    assert idx.propose([0, 1, 2], 4).steps == (Step(4, 3, 1, 1),)


def test_a_draft_ends_where_confidence_drops_below_its_first_bucket():
    strong = HistoryIndex("fp")
    for _ in range(8):
        strong.add([1, 2, 3])
    strong.add([1, 2, 3, 5])
    # (1, 2) -> 3 nine times of nine: 10/11, bucket 3; then (1, 2, 3) -> 5 once: 2/3, bucket 1
    p = strong.propose([1, 2], 4)
    assert p.steps == (Step(3, 2, 9, 9),) and p.bucket == 3
    assert p.confidences == pytest.approx([conf(9, 9)])
    weak = HistoryIndex("fp")
    weak.add([1, 2, 3, 5])
    # every step seen once (bucket 1): nothing drops, it runs to the end of the text
    assert weak.propose([1, 2], 4).tokens == [3, 5]


def test_buckets():
    assert [bucket(c) for c in (0.5, 2 / 3, 0.7499, 0.75, 0.8, 0.8999, 0.9, 1.0)] == [1, 1, 1, 2, 2, 2, 3, 3]
    assert [bucket(conf(n, n)) for n in (1, 2, 3, 7, 8)] == [1, 2, 2, 2, 3]


def test_the_most_frequent_continuation_wins_then_the_most_recent():
    idx = HistoryIndex("fp")
    idx.add([1, 2, 3, 4])
    idx.add([1, 2, 3, 6])
    idx.add([1, 2, 3, 6])
    assert idx.continuations([2, 3]) == {4: 1, 6: 2}
    assert idx.propose([1, 2, 3], 1).steps == (Step(6, 3, 2, 3),)
    idx.add([1, 2, 3, 5])  # the most recent, but seen once
    assert idx.propose([1, 2, 3], 1).steps == (Step(6, 3, 2, 4),)
    tie = HistoryIndex("fp")
    tie.add([7, 8, 9, 30])
    tie.add([7, 8, 9, 20])  # later, and a lower id: recency decides, not the id
    tie.add([7, 8, 9, 20])
    tie.add([7, 8, 9, 30])
    assert tie.continuations([7, 8, 9]) == {20: 2, 30: 2}
    assert tie.propose([7, 8, 9], 1).tokens == [30]


def test_a_named_conversation_counts_only_what_was_added_since():
    idx = HistoryIndex("fp")
    assert idx.add([1, 2, 1], conversation="a") == 2
    assert idx.add([1, 2, 1, 2, 1], conversation="a") == 2  # the reply: two new next tokens
    # tallied by hand over [1, 2, 1, 2, 1] once
    assert idx.continuations([1]) == {2: 2} and idx.continuations([2]) == {1: 2}
    assert idx.continuations([1, 2]) == {1: 2} and idx.continuations([2, 1]) == {2: 1}
    assert idx.continuations([1, 2, 1]) == {2: 1} and idx.continuations([2, 1, 2]) == {1: 1}
    assert idx.continuations([1, 2, 1, 2]) == {1: 1}
    assert idx.conversations == 1 and idx.serial == 2
    # edited but as long or longer: counted again from its start
    edited = HistoryIndex("fp")
    edited.add([1, 2, 1, 2, 1], conversation="a")
    assert edited.add([9, 2, 1, 2, 1, 7], conversation="a") == 5
    assert edited.continuations([9]) == {2: 1} and edited.continuations([1]) == {2: 3, 7: 1}
    assert edited.continuations([2, 1]) == {2: 2, 7: 1}
    # another conversation with the same tokens counts on its own
    idx.add([1, 2], conversation="b")
    assert idx.continuations([1]) == {2: 3}
    # an edited conversation (it no longer starts the same way) counts again from its start
    assert idx.add([3, 2, 1], conversation="a") == 2
    assert idx.continuations([3]) == {2: 1} and idx.continuations([2]) == {1: 3}
    # shorter than what was seen: it cannot extend it either
    assert idx.add([3, 2], conversation="a") == 1
    assert idx.continuations([3]) == {2: 2}
    # a repeat of the same state adds nothing
    assert idx.add([3, 2], conversation="a") == 0
    assert idx.continuations([3]) == {2: 2}


def test_the_conversations_remembered_are_bounded():
    idx = HistoryIndex("fp")
    for i in range(MAX_CONVERSATIONS + 3):
        idx.add([i % 7 + 1, 50], conversation=f"c{i}")
    assert idx.conversations == MAX_CONVERSATIONS
    # the oldest were forgotten: "c0" counts again from its start; the newest is remembered
    assert idx.add([1, 50, 60], conversation="c0") == 2
    last = MAX_CONVERSATIONS + 2
    assert idx.add([last % 7 + 1, 50, 60], conversation=f"c{last}") == 1
    assert idx.continuations([50]) == {60: 2} and idx.continuations([1]) == {50: (MAX_CONVERSATIONS + 3 + 6) // 7 + 1}
    assert idx.conversations == MAX_CONVERSATIONS


def test_bad_token_ids_are_refused():
    idx = HistoryIndex("fp")
    with pytest.raises(ValueError, match="token ids must be between 0 and 1048575"):
        idx.add([1, -1])
    with pytest.raises(ValueError, match="token ids must be between 0 and 1048575"):
        idx.add([1, 1 << 20])
    with pytest.raises(ValueError):
        idx.add([[1, 2]])
    idx.add([1, (1 << 20) - 1])
    assert idx.continuations([1]) == {(1 << 20) - 1: 1}
    with pytest.raises(ValueError, match="^the history index needs a memory cap above 0$"):
        HistoryIndex("fp", cap_bytes=0)
    assert HistoryIndex("fp", cap_bytes=1).cap_bytes == 1
    assert HistoryIndex("fp").dirty is False


def test_context_hashes_keep_contexts_apart():
    # the context's length is part of its hash, so (5,) and (0, 5) differ even though a zero id
    # xor-ed in changes nothing by itself
    assert context_hash([5]) != context_hash([0, 5])
    assert context_hash([1, 2]) != context_hash([2, 1])
    assert all(0 <= context_hash(c) < 2**44 for c in ([0], [1, 2, 3, 4], [2**20 - 1] * 4))
    rng = np.random.default_rng(3)
    ctxs = {tuple(rng.integers(0, 50, rng.integers(1, 5)).tolist()) for _ in range(3000)}
    assert len({context_hash(c) for c in ctxs}) == len(ctxs)


# -- the cap ----------------------------------------------------------------------------------------------
def test_the_cap_evicts_the_least_useful_entries():
    idx = HistoryIndex("fp", cap_bytes=10 * ENTRY_BYTES)  # room for exactly 10 entries
    idx.add([1, 2, 3, 4, 5])  # 4 + 3 + 2 + 1 = 10 entries: it fits
    assert idx.entries == 10 and idx.evicted == 0
    idx.add([1, 2, 3])  # (1,) -> 2, (2,) -> 3, (1, 2) -> 3: all known, now counted twice
    assert idx.entries == 10 and idx.evicted == 0
    idx.add([7, 8])  # one more: over the cap, down to 90% of it
    assert idx.entries == 9 and idx.evicted == 2 and idx.nbytes <= idx.cap_bytes
    # the twice-seen ones and the newest stay; two of the seven once-seen old ones went
    assert idx.continuations([1]) == {2: 2} and idx.continuations([2]) == {3: 2}
    assert idx.continuations([1, 2]) == {3: 2} and idx.continuations([7]) == {8: 1}
    old = [[3], [4], [2, 3], [3, 4], [1, 2, 3], [2, 3, 4], [1, 2, 3, 4]]
    assert sum(bool(idx.continuations(c)) for c in old) == 5


def test_the_cap_in_bytes_need_not_be_a_whole_number_of_entries():
    idx = HistoryIndex("fp", cap_bytes=11 * ENTRY_BYTES + 15)  # room for 11 entries, not 12
    idx.add([1, 2, 3, 4, 5])
    idx.add([7, 8])
    assert idx.entries == 11 and idx.evicted == 0
    idx.add([9, 10])  # 12: down to int(11 * 0.9) = 9
    assert idx.entries == 9 and idx.evicted == 3
    for i in range(3):
        idx.add([20 + 2 * i, 21 + 2 * i])
    assert idx.entries == 9 and idx.evicted == 6  # 12 again: three more went, counted on top


def test_a_cap_smaller_than_the_bookkeeping_keeps_nothing():
    idx = HistoryIndex("fp", cap_bytes=20)  # one remembered conversation (20 bytes), no entry
    idx.add([1, 2], conversation="x")
    assert idx.entries == 0 and idx.conversations == 1 and idx.nbytes == 20
    idx.add([3, 4], conversation="y")
    assert idx.conversations == 1 and idx.nbytes == 20
    assert idx.add([3, 4, 5], conversation="y") == 1  # "y" was kept: the newest
    assert idx.add([1, 2, 3], conversation="x") == 2  # "x" was forgotten
    idx = HistoryIndex("fp", cap_bytes=19)  # not even one conversation; one entry fits
    idx.add([1, 2], conversation="x")
    assert idx.conversations == 0 and idx.continuations([1]) == {2: 1} and idx.nbytes == 16


def _aged(quiet: int) -> HistoryIndex:
    """(1,) -> 2 seen twice, then `quiet` conversations with nothing to count, then ten
    conversations of one new pair each: the last one is over a cap of 10 entries."""
    idx = HistoryIndex("fp", cap_bytes=10 * ENTRY_BYTES)
    idx.add([1, 2])
    idx.add([1, 2])
    for i in range(quiet):
        idx.add([100 + i])  # nothing follows a lone token: no entries, but time passes
    for j in range(10):
        idx.add([1000 + 2 * j, 1001 + 2 * j])
    return idx


def test_counts_lose_half_their_weight_every_half_life():
    # 250 quiet: (1,) -> 2 is 260 conversations old when the cap is reached, 2 * 2**(-260/200) = 0.81,
    # below the oldest once-seen pair's 2**(-9/200) = 0.97: it goes, with that oldest pair
    old = _aged(250)
    assert old.entries == 9 and old.evicted == 2
    assert old.continuations([1]) == {} and old.continuations([1000]) == {}
    assert all(old.continuations([1000 + 2 * j]) == {1001 + 2 * j: 1} for j in range(1, 10))
    # 100 quiet: 2 * 2**(-110/200) = 1.37 is above every once-seen pair: the two oldest of those go
    young = _aged(100)
    assert young.entries == 9 and young.continuations([1]) == {2: 2}
    assert young.continuations([1000]) == {} and young.continuations([1002]) == {}
    assert all(young.continuations([1000 + 2 * j]) == {1001 + 2 * j: 1} for j in range(2, 10))


def test_memory_stays_under_the_cap_and_is_reported():
    cap = 64 * 1024
    idx = HistoryIndex("fp", cap_bytes=cap)
    rng = np.random.default_rng(7)
    phrase = [11, 12, 13, 14, 15, 16]
    for i in range(300):
        conv = rng.integers(20, 5000, 60).tolist()
        if i % 10 == 0:
            conv[10:16] = phrase
        idx.add(conv, conversation=f"conv{i}")
        assert idx.nbytes <= cap
    assert idx.evicted > 0 and idx.conversations == 300
    # the bookkeeping of named conversations is counted too
    assert idx.nbytes == idx.entries * ENTRY_BYTES + 300 * (8 + 4 + 8)
    # a phrase seen in every tenth conversation outlives the random text around it
    assert idx.propose([11, 12], 4).tokens == [13, 14, 15, 16]
    assert idx.describe().startswith(f"{idx.entries:,} n-grams from 300 conversations, 0.1 MB of 0.0625 MB")


def test_opening_applies_a_lower_cap(tmp_path):
    big = HistoryIndex("fp")
    big.add(list(range(1, 200)))
    big.save(tmp_path / "i.npz")
    small = HistoryIndex.open(tmp_path / "i.npz", "fp", cap_bytes=100 * ENTRY_BYTES)
    assert small.entries == 90 and small.nbytes <= 100 * ENTRY_BYTES


# -- files ---------------------------------------------------------------------------------------------------
def test_counts_saturate_rather_than_wrap(tmp_path):
    idx = HistoryIndex("fp")
    idx.add([1, 2])
    path = idx.save(tmp_path / "i.npz")
    _rewrite(path, change=lambda a: a.__setitem__("counts", np.array([2**32 - 2], np.uint32)))
    idx = HistoryIndex.open(path, "fp")
    idx.add([1, 2])
    assert idx.continuations([1]) == {2: 2**32 - 1}
    idx.add([1, 2, 1, 2])
    assert idx.continuations([1]) == {2: 2**32 - 1}


def test_an_empty_index_saves_and_opens(tmp_path):
    idx = HistoryIndex("fp")
    path = idx.save(tmp_path / "a" / "b" / "empty.npz")  # folders are made as needed
    assert idx.path == path and idx.dirty is False
    again = HistoryIndex.open(path, "fp")
    assert again.notes == [] and again.entries == 0 and again.serial == 0
    again.add([1, 2])
    assert again.dirty is True
    assert again.save() == path and again.dirty is False


def test_the_file_format(tmp_path):
    """What is on disk, recomputed here: the header, the conversation ids and the digests of what
    was counted of each (blake2b, 8 bytes, little-endian; of the ids as little-endian uint32)."""
    idx = HistoryIndex("fingerprint-x")
    idx.add([5, 6, 7], conversation="chat-é")
    idx.add([1, 2])
    path = idx.save(tmp_path / "i.npz")

    def b2(data: bytes) -> int:
        return int.from_bytes(hashlib.blake2b(data, digest_size=8).digest(), "little")

    with np.load(path) as z:
        assert set(z.files) == {"meta", "keys", "counts", "last", "conv_ids", "conv_lens", "conv_hashes"}
        assert json.loads(bytes(z["meta"])) == {"format": "draftlight-history-index", "version": 1,
                                                "fingerprint": "fingerprint-x", "serial": 2, "max_context": 4,
                                                "token_bits": 20}
        assert z["conv_ids"].tolist() == [b2("chat-é".encode("utf-8"))]
        assert z["conv_hashes"].tolist() == [b2(np.array([5, 6, 7], "<u4").tobytes())]
        assert z["conv_lens"].tolist() == [3]
        assert z["counts"].dtype == np.uint32 and z["last"].dtype == np.uint32 and z["keys"].dtype == np.uint64
        assert sorted(z["last"].tolist()) == [1, 1, 1, 2]  # (5)->6, (6)->7, (5, 6)->7 then (1)->2
    assert index_path(tmp_path, "0123456789abcdef0123") == tmp_path / "history-0123456789abcdef.npz"


def test_the_default_folder(isolated_home):
    assert default_folder() == isolated_home / "data" / "history-index"


def test_a_pickle_in_the_file_is_never_run(tmp_path):
    """allow_pickle stays off: a crafted member that would run code when unpickled is refused."""
    marker = tmp_path / "ran"
    path = _saved(tmp_path)
    _rewrite(path, change=lambda a: a.__setitem__("keys", np.array([_Payload(marker)], dtype=object)))
    idx = HistoryIndex.open(path, "fp")
    assert idx.entries == 0 and "is damaged" in idx.notes[0] and not marker.exists()


class _Payload:
    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return (Path.write_text, (self.marker, "ran"))


def test_reasons_name_the_exception():
    assert _why(ValueError("header incomplete")) == "header incomplete" and _why(EOFError()) == "EOFError"



WRITER = """
import sys
from engine.drafting.history_index import HistoryIndex
idx = HistoryIndex.open(sys.argv[1], "vocab-a")
idx.add([5, 6, 7, 5, 6, 8, 5, 6, 7])
idx.add([5, 6, 8, 9], conversation="chat-1")
idx.save()
print(idx.entries)
"""


def test_an_index_survives_a_restart(tmp_path):
    path = tmp_path / "sub" / "deeper" / "index.npz"
    out = subprocess.run([sys.executable, "-c", WRITER, str(path)], cwd=ROOT, capture_output=True, text=True, check=True)
    idx = HistoryIndex.open(path, "vocab-a")
    assert idx.notes == [] and idx.entries == int(out.stdout) and not idx.dirty
    assert idx.serial == 2 and idx.conversations == 1
    assert idx.continuations([5, 6]) == {7: 2, 8: 2}
    assert idx.continuations([6, 8]) == {5: 1, 9: 1}
    assert idx.propose([0, 5, 6, 7, 5], 3).tokens == [6, 8, 5]
    # the named conversation's length came back with it: only the new tail counts
    assert idx.add([5, 6, 8, 9, 10], conversation="chat-1") == 1
    assert idx.continuations([9]) == {10: 1} and idx.continuations([5, 6]) == {7: 2, 8: 2}
    idx.save()
    again = HistoryIndex.open(path, "vocab-a")
    assert again.continuations([9]) == {10: 1} and again.serial == 3
    assert [p.name for p in path.parent.iterdir()] == ["index.npz"]  # no temporary file left


def _saved(tmp_path) -> Path:
    idx = HistoryIndex("fp")
    idx.add(list(range(1, 300)))
    return idx.save(tmp_path / "index.npz")


def _rewrite(path: Path, meta: dict | None = None, change=lambda arrays: None) -> None:
    """Save the file's arrays again, changed (a valid zip with wrong content)."""
    with np.load(path) as z:
        arrays = {k: z[k] for k in z.files}
    header = json.loads(bytes(arrays["meta"]))
    header.update(meta or {})
    arrays["meta"] = np.frombuffer(json.dumps(header).encode(), np.uint8)
    change(arrays)
    with open(path, "wb") as fh:
        np.savez(fh, **arrays)


def _set(name, fn):
    return lambda p: _rewrite(p, change=lambda a: a.__setitem__(name, fn(a[name])))


def _flip_in_keys(path: Path) -> None:
    data = bytearray(path.read_bytes())
    at = data.index(b"keys.npy") + 400  # inside the keys array's data, past its local and npy headers
    data[at] ^= 0x40
    path.write_bytes(bytes(data))


DAMAGE = {
    "truncated": lambda p: p.write_bytes(p.read_bytes()[: p.stat().st_size // 2]),
    "empty": lambda p: p.write_bytes(b""),
    "garbage": lambda p: p.write_bytes(bytes(range(256)) * 8),
    "a flipped bit": _flip_in_keys,
    "a newer version": lambda p: _rewrite(p, meta={"version": 2}),
    "another format": lambda p: _rewrite(p, meta={"format": "something else"}),
    "other settings": lambda p: _rewrite(p, meta={"max_context": 6}),
    "no serial": lambda p: _rewrite(p, meta={"serial": None}),
    "keys out of order": _set("keys", lambda a: a[::-1].copy()),
    "a repeated key": _set("keys", lambda a: np.concatenate([a[:1], a[:-1]])),
    "the last two keys swapped": _set("keys", lambda a: np.concatenate([a[:-2], a[-1:], a[-2:-1]])),
    "a zero count": _set("counts", lambda a: np.concatenate([a[:-1], [0]]).astype(np.uint32)),
    "a serial from the future": _set("last", lambda a: a + 1),
    "wrong dtype": _set("counts", lambda a: a.astype(np.int64)),
    "two dimensions": _set("counts", lambda a: a.reshape(1, -1)),
    "lengths differ": _set("last", lambda a: a[:-1].copy()),
    "conversations differ": _set("conv_lens", lambda a: np.ones(3, np.uint32)),
    "an array missing": lambda p: _rewrite(p, change=lambda a: a.pop("last")),
    "a pickled array": _set("keys", lambda a: np.array([object()], dtype=object)),
}


#: The reason a note gives, where it is this module's own words.
REASONS = {
    "garbage": "not a history index file", "empty": "not a history index file",
    "a newer version": "format version 2, this Draftlight reads 1", "another format": "not a history index",
    "other settings": "built with other settings", "no serial": "header incomplete",
    "keys out of order": "entries out of order or inconsistent", "a repeated key": "entries out of order or inconsistent",
    "the last two keys swapped": "entries out of order or inconsistent",
    "a zero count": "entries out of order or inconsistent", "a serial from the future": "entries out of order or inconsistent",
    "wrong dtype": "counts has the wrong type", "two dimensions": "counts has the wrong type",
    "lengths differ": "entry arrays differ in length", "conversations differ": "conversation arrays differ in length",
    "a flipped bit": "Bad CRC-32 for file 'keys.npy'",
}


@pytest.mark.parametrize("damage", sorted(DAMAGE))
def test_a_damaged_file_gives_a_notice_and_a_fresh_index(tmp_path, damage):
    path = _saved(tmp_path)
    DAMAGE[damage](path)
    broken = path.read_bytes()
    idx = HistoryIndex.open(path, "fp")
    assert idx.entries == 0 and idx.serial == 0
    assert len(idx.notes) == 1 and idx.notes[0].startswith(f"the history index {path} is damaged (")
    assert idx.notes[0].endswith("): starting a new one; the old file will be kept as index.npz.damaged")
    if damage in REASONS:
        assert f"is damaged ({REASONS[damage]}): " in idx.notes[0]
    assert idx.propose([1, 2, 3], 4).steps == ()
    idx.add([1, 2, 3])
    idx.save()
    idx.save()  # again: the damaged file was set aside once
    # the damaged file is kept aside, never destroyed, and the new one reads cleanly
    assert (tmp_path / "index.npz.damaged").read_bytes() == broken
    again = HistoryIndex.open(path, "fp")
    assert again.notes == [] and again.continuations([1, 2]) == {3: 1}
    again.add([4, 5])
    again.save()
    assert (tmp_path / "index.npz.damaged").read_bytes() == broken  # set aside once, not again


def test_a_folder_in_the_way_is_a_notice_too(tmp_path):
    (tmp_path / "index.npz").mkdir()
    idx = HistoryIndex.open(tmp_path / "index.npz", "fp")
    assert idx.entries == 0 and "is damaged" in idx.notes[0]


def test_a_failed_save_is_a_clear_error(tmp_path):
    (tmp_path / "file").write_text("x")
    idx = HistoryIndex("fp", path=tmp_path / "file" / "index.npz")
    idx.add([1, 2])
    with pytest.raises(EngineError, match=r"^cannot save the history index to .*index\.npz: File exists$"):
        idx.save()
    with pytest.raises(EngineError, match="^the history index has no file to save to$"):
        HistoryIndex("fp").save()
    assert idx.dirty and list(tmp_path.iterdir()) == [tmp_path / "file"]


def test_saving_elsewhere_leaves_the_set_aside_file_alone(tmp_path):
    path = _saved(tmp_path)
    path.write_bytes(b"junk")
    idx = HistoryIndex.open(path, "fp")
    idx.add([1, 2])
    idx.save(tmp_path / "copy.npz")
    assert path.read_bytes() == b"junk" and not (tmp_path / "index.npz.damaged").exists()
    idx.save(path)
    assert (tmp_path / "index.npz.damaged").read_bytes() == b"junk"
    assert HistoryIndex.open(path, "fp").continuations([1]) == {2: 1}


def test_another_vocabularys_file_proposes_nothing(tmp_path):
    a = HistoryIndex("vocab-a")
    a.add([5, 6, 7, 8])
    a.save(tmp_path / "index.npz")
    b = HistoryIndex.open(tmp_path / "index.npz", "vocab-b")
    assert b.entries == 0 and b.propose([5, 6], 4).steps == ()
    assert "another vocabulary" in b.notes[0] and "index.npz.other-vocabulary" in b.notes[0]
    b.add([1, 2])
    b.save()
    assert HistoryIndex.open(tmp_path / "index.npz.other-vocabulary", "vocab-a").continuations([5, 6]) == {7: 1}
    assert HistoryIndex.open(tmp_path / "index.npz", "vocab-b").continuations([1]) == {2: 1}


def test_a_copy_is_independent():
    idx = HistoryIndex("fp", cap_bytes=1000)
    idx.add([1, 2, 3])
    copy = idx.copy()
    copy.add([1, 2, 4])
    assert idx.continuations([1, 2]) == {3: 1} and copy.continuations([1, 2]) == {3: 1, 4: 1}
    assert copy.fingerprint == "fp" and copy.cap_bytes == 1000 and copy.serial == 2 and copy.path is None
    assert idx.serial == 1


# -- the policy's key ------------------------------------------------------------------------------------------
def test_draft_keys_with_a_confidence_bucket():
    key = DraftKey(DraftKind.HISTORY, 3, 2)
    assert str(key) == "history:3/c2" and str(DraftKey(DraftKind.HISTORY, 3)) == "history:3"
    assert key.parent == DraftKey(DraftKind.HISTORY, 3)
    assert key.parent.parent == DraftKey(DraftKind.HISTORY) and key.parent.parent.parent is None
    auto = AutoK(CostModel())
    auto.table(key).observe(4, 4)
    auto.table(DraftKey(DraftKind.HISTORY, 3, 1)).observe(2, 0)
    # each judgement reaches the coarser keys: a fresh bucket starts from what its match length saw
    assert list(auto.table(DraftKey(DraftKind.HISTORY, 3)).pooled) == [1, 1, 1, 1, 0]
    assert list(auto.table(DraftKey(DraftKind.HISTORY)).pooled) == [1, 1, 1, 1, 0]
    assert list(auto.table(key).pooled) == [1, 1, 1, 1]
    assert DraftKey(DraftKind.LOOKUP) not in auto.tables


# -- the lookup drafter ---------------------------------------------------------------------------------------
def _draft(drafter, context, k=4, prune=lambda key, n: n):
    return drafter.propose(context, DraftRequest(0, k), GREEDY, np.random.default_rng(0), prune)


def test_the_lookup_drafter_asks_the_index_when_the_conversation_has_no_match():
    idx = HistoryIndex("fp")
    idx.add([1, 2, 3, 4, 5, 6])
    d = LookupDrafter(history=idx)
    d.begin([7, 8, 2, 3])
    draft = _draft(d, [7, 8, 2, 3])
    assert draft.tokens == [4, 5, 6] and draft.key == DraftKey(DraftKind.HISTORY, 2, 1)
    assert draft.confidence == pytest.approx([2 / 3] * 3) and draft.q == [None] * 3 and draft.q_probs == [1.0] * 3
    assert draft.truncated(2).confidence == pytest.approx([2 / 3] * 2)
    # the conversation's own match goes first
    draft = _draft(d, [7, 8, 2, 3, 9, 7, 8])
    assert draft.tokens == [2, 3, 9, 7] and draft.key == DraftKey(DraftKind.LOOKUP, 2) and draft.confidence == []
    # a conversation match the policy would not verify leaves the turn to the index
    no_lookup = lambda key, n: 0 if key.kind is DraftKind.LOOKUP else 1  # noqa: E731
    draft = _draft(d, [2, 3, 9, 2, 3], prune=no_lookup)
    assert draft.tokens == [4] and draft.kind is DraftKind.HISTORY and draft.confidence == pytest.approx([2 / 3])
    assert _draft(d, [2, 3, 9, 2, 3], k=0).tokens == []
    # nothing follows the index's last token: an empty draft
    assert _draft(d, [5, 6]).tokens == []
    d.reset()  # between runs the conversation is forgotten, the past conversations are not
    assert d.history is idx and _draft(d, [0, 2, 3]).tokens == [4, 5, 6]


# -- with the engine, on tiny models -----------------------------------------------------------------------
@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    folder = tmp_path_factory.mktemp("history-models")
    paths = tiny_models.write_set(folder, tiny_models.SHARP)
    paths.update(tiny_models.write_set(folder, {"other-vocab": tiny_models.OTHER_VOCAB}))
    return paths


def _gguf_fingerprint(path: Path) -> str:
    """The fingerprint recomputed from the file's metadata with ggml's own reader."""
    r = GGUFReader(path)

    def field(name):
        f = r.fields[name]
        return f.parts[f.data[0]].tolist()[0]

    tok = r.fields["tokenizer.ggml.tokens"]
    texts = [bytes(tok.parts[i]) for i in tok.data]
    kind = {"llama": "spm", "gpt2": "bpe"}[bytes(r.fields["tokenizer.ggml.model"].parts[-1]).decode()]
    h = hashlib.sha256(f"{kind}|{len(texts)}|{field('tokenizer.ggml.bos_token_id')}|{field('tokenizer.ggml.eos_token_id')}|"
                       f"{bool(field('tokenizer.ggml.add_bos_token'))}|{bool(field('tokenizer.ggml.add_eos_token'))}".encode())
    for t in texts:
        h.update(len(t).to_bytes(4, "little") + t)
    return h.hexdigest()


class _FakeVocab:
    """Stands in for a loaded model: a vocabulary of a few tokens, counting how often it is read."""

    def __init__(self, texts: list[bytes], path: Path | None = None) -> None:
        self.texts, self.reads = texts, 0
        if path is not None:
            self.path = path

    def vocab_facts(self):
        from engine.llama.types import VocabFacts

        return VocabFacts("bpe", len(self.texts), True, False, 1, 2)

    def token_text(self, i: int) -> bytes:
        self.reads += 1
        return self.texts[i]


def test_the_fingerprint_of_a_small_vocabulary_by_hand(tmp_path):
    want = hashlib.sha256(b"bpe|3|1|2|True|False" + b"\x01\x00\x00\x00a" + b"\x02\x00\x00\x00bc"
                          + b"\x00\x00\x00\x00").hexdigest()
    pathless = _FakeVocab([b"a", b"bc", b""])
    assert vocab_fingerprint(pathless) == want
    other = _FakeVocab([b"a", b"bd", b""])
    assert vocab_fingerprint(other) != want  # no file to key a cache by: each is read
    # two files of the same size and time are still told apart by their path; each is read once
    f1, f2 = tmp_path / "one.gguf", tmp_path / "two.gguf"
    f1.write_bytes(b"x")
    f2.write_bytes(b"x")
    os.utime(f2, ns=(f1.stat().st_atime_ns, f1.stat().st_mtime_ns))
    m1, m2 = _FakeVocab([b"a", b"bc", b""], f1), _FakeVocab([b"a", b"bd", b""], f2)
    assert vocab_fingerprint(m1) == want and vocab_fingerprint(m2) == vocab_fingerprint(other)
    assert vocab_fingerprint(m1) == want and m1.reads == 3 and m2.reads == 3


def test_the_vocabulary_fingerprint(tiny):
    models = {k: LlamaModel(tiny[k], ONE_THREAD) for k in ("sharp-target", "sharp-drafter", "other-vocab")}
    try:
        fps = {k: vocab_fingerprint(m) for k, m in models.items()}
        for k in models:
            assert fps[k] == _gguf_fingerprint(tiny[k]), k
        assert fps["sharp-target"] == fps["sharp-drafter"] != fps["other-vocab"]
        assert vocab_fingerprint(models["sharp-target"]) == fps["sharp-target"]  # cached, same answer
    finally:
        for m in models.values():
            m.close()


def test_an_index_for_another_vocabulary_is_never_used(tiny, tmp_path):
    session = Session(tiny["sharp-target"], "lookup", target_load=ONE_THREAD, calibrate=False)
    other = LlamaModel(tiny["other-vocab"], ONE_THREAD)
    try:
        mine = HistoryIndex.open_for(tmp_path, session.target, cap_bytes=12345)
        assert mine.cap_bytes == 12345
        mine.add([1, 300, 301, 302, 303])
        mine.save()
        theirs = HistoryIndex.open_for(tmp_path, other)
        assert theirs.path != mine.path and theirs.entries == 0 and theirs.propose([1, 300], 4).steps == ()
        assert mine.path == index_path(tmp_path, vocab_fingerprint(session.target))
        with pytest.raises(EngineError, match="another vocabulary"):
            session.use_history(theirs)
        assert session.history is None and session.drafter.history is None
        session.use_history(mine)
        assert session.drafter.history is mine
        session.set_drafter(f"lookup+{tiny['sharp-drafter']}")  # a drafter switch keeps it
        assert session.drafter.lookup.history is mine
        session.use_history(None)
        assert session.drafter.lookup.history is None
    finally:
        other.close()
        session.close()


def _run(session, tokens, k, n=24):
    return list(session.generate_tokens(list(tokens), GenerationSettings(sampling=GREEDY, draft_max=k, max_tokens=n)))


def _ids(events):
    return [e.token_id for e in events if isinstance(e, TokenEvent)]


@pytest.mark.parametrize("k", [4, "auto"])
def test_greedy_output_with_history_drafts_equals_plain_greedy(tiny, k):
    """The index holds the target's own greedy reply with two tokens changed: its drafts are
    accepted where they agree and rejected at the changed tokens, and the reply stays the target's."""
    plain = Session(tiny["sharp-target"], None, target_load=ONE_THREAD, calibrate=False)
    look = Session(tiny["sharp-target"], "lookup", target_load=ONE_THREAD, calibrate=False)
    try:
        prompt = plain.target.tokenize("hello world the", add_special=True)
        want = _ids(_run(plain, prompt, 0))
        assert len(want) == 24
        changed = list(want)
        for i in (6, 14):
            changed[i] = want[i] + 1
        idx = HistoryIndex(vocab_fingerprint(plain.target))
        idx.add(plain.target.tokenize("the code is fast", add_special=True) + prompt[1:] + changed)
        look.use_history(idx)
        got = _run(look, prompt, k)
        assert _ids(got) == want
        if k == 4:
            rounds = [e for e in got if isinstance(e, RoundEvent) and e.drafter is DraftKind.HISTORY]
            assert any(r.accepted == len(r.drafted) == 4 for r in rounds), rounds
            assert any(r.accepted < len(r.drafted) and r.drafted[r.accepted] == changed[6] for r in rounds), rounds
        look.use_history(None)  # the same with nothing to draft from
        assert _ids(_run(look, prompt, k)) == want
    finally:
        look.close()
        plain.close()


def _generate(target: Path, folder: Path, prompt: str, *extra: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "engine", "generate", "--target", str(target), "--draft", "lookup", "--draft-max", "4",
         "--prompt", prompt, "--max-tokens", "24", "--ctx", "256", "--json", "--history-index", str(folder), *extra],
        cwd=ROOT, capture_output=True, text=True)


def test_generate_adds_each_conversation_and_drafts_from_the_earlier_ones(tiny, tmp_path):
    folder = tmp_path / "hist"
    first = _generate(tiny["sharp-target"], folder, "hello world the")
    assert first.returncode == 0, first.stderr
    assert "history index: " in first.stderr and "from 1 conversations" in first.stderr
    files = list(folder.iterdir())
    assert len(files) == 1 and files[0].name.startswith("history-")
    second = _generate(tiny["sharp-target"], folder, "hello world the")
    assert second.returncode == 0, second.stderr
    events = [json.loads(line) for line in second.stdout.splitlines()]
    rounds = [e for e in events if e["type"] == "round" and e["drafter"] == "history"]
    assert rounds and sum(r["accepted"] for r in rounds) > 0
    first_ids = [e["token_id"] for e in map(json.loads, first.stdout.splitlines()) if e["type"] == "token"]
    assert [e["token_id"] for e in events if e["type"] == "token"] == first_ids
    assert "from 2 conversations" in second.stderr
    # damaged: a notice, the reply, and a fresh index
    files[0].write_bytes(b"not an index")
    third = _generate(tiny["sharp-target"], folder, "hello world the")
    assert third.returncode == 0 and "is damaged" in third.stderr and "from 1 conversations" in third.stderr
    assert (folder / (files[0].name + ".damaged")).read_bytes() == b"not an index"
    bad = _generate(tiny["sharp-target"], folder, "hi", "--history-cap-mb", "0")
    assert bad.returncode == 2 and "--history-cap-mb must be above 0" in bad.stderr


def test_bench_indexes_only_the_other_conversations(tiny, tmp_path):
    from engine.frontends.bench import BenchPrompt, history_indexes

    chats = [BenchPrompt("a", "x", "hello world the code"), BenchPrompt("b", "x", "model token draft target"),
             BenchPrompt("c", "x", "fast slow speculative decoding", history=({"role": "user", "content": "python"},
                                                                            {"role": "assistant", "content": "class"}))]
    session = Session(tiny["sharp-target"], "lookup", target_load=ONE_THREAD, calibrate=False)
    try:
        own = {c.id: session.render(c.messages).tokens for c in chats}
        pairs = {c: {(tuple(t[i - 4 : i]), t[i]) for i in range(4, len(t))} for c, t in own.items()}
        # per chat, a context of 4 tokens and its next token that no other chat has
        mark = {c: min(pairs[c] - set().union(*(pairs[o] for o in pairs if o != c))) for c in pairs}
        indexes = history_indexes(session, chats[:2], chats)
        assert set(indexes) == {"a", "b"}
        for p in chats[:2]:
            assert indexes[p.id].serial == 2
            for c, (ctx, nxt) in mark.items():
                assert (nxt in indexes[p.id].continuations(ctx)) == (c != p.id), (p.id, c)
        # the same conversation under another id is left out too
        twin = BenchPrompt("a2", "x", "hello world the code")
        assert history_indexes(session, [chats[0]], [twin, chats[1]])["a"].serial == 1
        # with the target's own replies, generated here without a drafter, tallied by plain counting
        replies = {c.id: [e.token_id for e in session.chat(c.messages, GenerationSettings(draft_max=0, max_tokens=3))
                          if isinstance(e, TokenEvent)] for c in chats}
        full = {c: own[c] + replies[c] for c in own}
        with_replies = history_indexes(session, chats[:2], chats, reply_tokens=3)

        def tally(ctx, convs):
            out = {}
            for t in convs:
                for i in range(len(ctx), len(t)):
                    if t[i - len(ctx) : i] == list(ctx):
                        out[t[i]] = out.get(t[i], 0) + 1
            return out

        for p in chats[:2]:
            others = [full[c] for c in full if c != p.id]
            for c in full:
                for n in (1, 2, 4):
                    for i in range(len(full[c]) - 4, len(full[c])):  # contexts that end in the replies
                        ctx = full[c][i - n : i]
                        assert with_replies[p.id].continuations(ctx) == tally(ctx, others), (p.id, c, ctx)
        assert all(len(r) == 3 for r in replies.values())
    finally:
        session.close()


def test_bench_runs_a_history_variant(tiny, tmp_path):
    chats = tmp_path / "chats.jsonl"
    chats.write_text("\n".join(json.dumps({"id": f"c{i}", "category": "chat", "prompt": p}) for i, p in
                               enumerate(["hello world the", "the code is fast"])) + "\n")
    out = subprocess.run(
        [sys.executable, "-m", "engine", "bench", "--target", str(tiny["sharp-target"]), "--draft", "history@4",
         "--prompts", str(chats), "--max-tokens", "8", "--repeats", "1", "--ctx", "256", "--history-warm-replies", "4",
         "--out", str(tmp_path / "r")],
        cwd=ROOT, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    report = json.loads((tmp_path / "r" / "report.json").read_text())
    assert "history k=4" in report["summary"]["variants"]
    assert report["meta"]["history"]["warm"] == str(chats) and report["meta"]["history"]["warm_reply_tokens"] == 4
    assert ("each prompt drafts from an index of the other conversations in `" + str(chats) + "`, each with the "
            "target's own greedy reply (up to 4 tokens)") in (tmp_path / "r" / "report.md").read_text()
