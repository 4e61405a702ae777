"""An opt-in index of past conversations that prompt lookup may draft from.

What it holds: for every context of 1 to MAX_CONTEXT tokens in the conversations it was given,
how often each next token followed it (an n-gram cache with counts, as llama.cpp's
`ngram-cache`). What it proposes: after the current context, the most frequent continuation of
the longest context it has seen, step by step, each token with a confidence from its counts.

- Confidence of a continuation x of a context c is the rule of succession on the counts,
  (count(c, x) + 1) / (count(c) + 2): the share count(c, x) / count(c) shrunk towards 1/2 while
  there is little evidence (seen once: 2/3; eight times out of eight: 0.9). A draft ends at the
  first token below its context length's minimum or in a lower bucket than the draft's first
  token, so one bucket describes every token of a draft: Auto learns acceptance per (context
  length, bucket) and prices exactly that (engine.drafting.policy.DraftKey).
- Keyed by the tokenizer: an index carries a fingerprint of the target's vocabulary, and a file
  built for another vocabulary is never used (its ids would mean other tokens).
- Bounded: the arrays it holds (entries, and the length and digest of each named conversation)
  never exceed a cap in bytes. Over the cap, the least useful entries go first: lowest count,
  halved for every HALF_LIFE conversations since it last occurred (older first among equals),
  down to KEEP_AFTER_EVICTION of the cap. An addition briefly holds a second copy while merging.
- Compact: one sorted uint64 array of (44-bit context hash, 20-bit next token) keys with uint32
  counts and last-seen serials, 16 bytes an entry, saved as a numpy .npz with a versioned header.
  Two contexts whose hashes collide share their counts: a proposal may then be wrong, and the
  target rejects it. Drafts are only proposals; nothing here can change what is generated.
- A damaged or unreadable file gives a notice and an empty index; the next save keeps the old
  file beside the new one as NAME.damaged (NAME.other-vocabulary for another vocabulary's file)
  rather than destroying it.

Not thread-safe: propose, add and save from one thread (the engine's).
"""
from __future__ import annotations

import contextlib
import hashlib
import json
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from engine.errors import EngineError
from engine.paths import data_dir

FORMAT = "draftlight-history-index"
VERSION = 1
#: Longest context (tokens) counted; contexts of 1..MAX_CONTEXT are kept, the longest seen wins.
MAX_CONTEXT = 4
#: Least confidence a proposed token needs, by the length of the context behind it;
#: a single token of context needs the most evidence (llama.cpp's ngram-cache is as strict).
MIN_CONFIDENCE = {1: 0.8, 2: 0.6, 3: 0.5, 4: 0.5}
#: Confidence buckets: bucket b (1-based) holds confidences from BUCKETS[b-2] up to BUCKETS[b-1].
BUCKETS = (0.75, 0.9)
#: Conversations after which an entry's count weighs half when choosing what to evict.
HALF_LIFE = 200
#: An eviction frees room down to this share of the cap, so that not every addition evicts.
KEEP_AFTER_EVICTION = 0.9
#: Conversations whose length is remembered (to count only what was added since, as replies finish).
MAX_CONVERSATIONS = 4096
DEFAULT_CAP_MB = 64.0

TOKEN_BITS = 20
TOKEN_MASK = (1 << TOKEN_BITS) - 1
_M64 = (1 << 64) - 1
_SEED = 0x9E3779B97F4A7C15
_FNV = 0x100000001B3
_C1, _C2 = 0xFF51AFD7ED558CCD, 0xC4CEB9FE1A85EC53
#: Bytes an entry costs: key (8), count (4), last-seen serial (4).
ENTRY_BYTES = 16
#: Bytes a remembered conversation costs: id (8), length (4), digest (8).
CONVERSATION_BYTES = 20
_DTYPES = {"keys": np.uint64, "counts": np.uint32, "last": np.uint32,
           "conv_ids": np.uint64, "conv_lens": np.uint32, "conv_hashes": np.uint64}
_CONV = ("conv_ids", "conv_lens", "conv_hashes")


# -- hashing ---------------------------------------------------------------------------------------
def context_hash(tokens: Sequence[int]) -> int:
    """44-bit hash of a context (its length included): FNV-style over the ids, then fmix64."""
    h = (len(tokens) * _SEED) & _M64
    for t in tokens:
        h = ((h ^ int(t)) * _FNV) & _M64
    h ^= h >> 33
    h = (h * _C1) & _M64
    h ^= h >> 33
    h = (h * _C2) & _M64
    h ^= h >> 33
    return h >> TOKEN_BITS


def _window_hashes(tokens: np.ndarray, n: int, start: int) -> np.ndarray:
    """context_hash(tokens[i-n:i]) for every i from max(n, start) to len(tokens) - 1, vectorised."""
    first = max(n, start)
    m = max(0, len(tokens) - first)
    h = np.full(m, (n * _SEED) & _M64, np.uint64)
    for j in range(n):
        h ^= tokens[first - n + j : first - n + j + m]
        h *= np.uint64(_FNV)
    for c in (_C1, _C2, None):
        h ^= h >> np.uint64(33)
        if c is not None:
            h *= np.uint64(c)
    return h >> np.uint64(TOKEN_BITS)


def _digest(tokens: np.ndarray) -> int:
    return int.from_bytes(hashlib.blake2b(tokens.astype("<u4").tobytes(), digest_size=8).digest(), "little")


def conversation_id(name: str) -> int:
    return int.from_bytes(hashlib.blake2b(name.encode("utf-8"), digest_size=8).digest(), "little")


# -- the tokenizer's identity -------------------------------------------------------------------------
_FINGERPRINTS: dict[tuple, str] = {}


def vocab_fingerprint(model) -> str:
    """SHA-256 of a model's vocabulary: type, special ids and every token's text. Cached per file."""
    try:
        st = Path(model.path).stat()
        cache_key = (str(Path(model.path).resolve()), st.st_size, st.st_mtime_ns)
    except (AttributeError, OSError):
        cache_key = None
    if cache_key in _FINGERPRINTS:
        return _FINGERPRINTS[cache_key]
    f = model.vocab_facts()
    h = hashlib.sha256(f"{f.vocab_type}|{f.n_vocab}|{f.bos}|{f.eos}|{f.add_bos}|{f.add_eos}".encode())
    for i in range(f.n_vocab):
        text = model.token_text(i)
        h.update(len(text).to_bytes(4, "little") + text)
    fp = h.hexdigest()
    if cache_key is not None:
        _FINGERPRINTS[cache_key] = fp
    return fp


def default_folder() -> Path:
    """Where the app keeps its indexes: one file per vocabulary."""
    return data_dir() / "history-index"


def index_path(folder: Path, fingerprint: str) -> Path:
    return Path(folder) / f"history-{fingerprint[:16]}.npz"


# -- proposals ------------------------------------------------------------------------------------------
def confidence(count: int, total: int) -> float:
    """Rule of succession: the chance the next occurrence continues this way too."""
    return (count + 1) / (total + 2)


def bucket(conf: float) -> int:
    """1 (weakest) to len(BUCKETS) + 1."""
    return 1 + sum(conf >= b for b in BUCKETS)


@dataclass(frozen=True, slots=True)
class Step:
    """One proposed token and the evidence behind it."""

    token: int
    context: int
    """Tokens of context it was looked up with (the longest seen)."""
    count: int
    """Times it followed that context."""
    total: int
    """Times anything followed that context."""

    @property
    def share(self) -> float:
        return self.count / self.total

    @property
    def confidence(self) -> float:
        return confidence(self.count, self.total)


@dataclass(frozen=True, slots=True)
class Proposal:
    steps: tuple[Step, ...] = ()

    @property
    def tokens(self) -> list[int]:
        return [s.token for s in self.steps]

    @property
    def confidences(self) -> list[float]:
        return [s.confidence for s in self.steps]

    @property
    def match(self) -> int:
        """Context length behind the first token (0: nothing proposed)."""
        return self.steps[0].context if self.steps else 0

    @property
    def bucket(self) -> int:
        """Confidence bucket of the draft (every token in it is at least this confident)."""
        return bucket(self.steps[0].confidence) if self.steps else 0


# -- the index ------------------------------------------------------------------------------------------
class HistoryIndex:
    """Counts of next tokens after short contexts in past conversations, for one vocabulary."""

    def __init__(self, fingerprint: str, cap_bytes: int = int(DEFAULT_CAP_MB * 2**20), path: Path | None = None) -> None:
        if cap_bytes <= 0:
            raise ValueError("the history index needs a memory cap above 0")
        self.fingerprint = fingerprint
        self.cap_bytes = int(cap_bytes)
        self.path = Path(path) if path is not None else None
        self.notes: list[str] = []
        """What the user should know (a damaged file, another vocabulary's file)."""
        self.serial = 0
        """Conversations added so far (each addition counts as one)."""
        self.evicted = 0
        """Entries dropped to stay under the cap, since it was opened."""
        self._a = {name: np.empty(0, dt) for name, dt in _DTYPES.items()}
        self._set_aside: str | None = None  # the file at `path` is not ours to overwrite: its new name
        self._dirty = False

    # -- sizes --------------------------------------------------------------------------
    @property
    def entries(self) -> int:
        return len(self._a["keys"])

    @property
    def conversations(self) -> int:
        return len(self._a["conv_ids"])

    @property
    def nbytes(self) -> int:
        """Bytes of the arrays held: what the cap bounds."""
        return sum(a.nbytes for a in self._a.values())

    def describe(self) -> str:
        return (f"{self.entries:,} n-grams from {self.serial:,} conversations, {self.nbytes / 2**20:.1f} MB "
                f"of {self.cap_bytes / 2**20:.3g} MB")

    # -- reading ----------------------------------------------------------------------------
    def continuations(self, context: Sequence[int]) -> dict[int, int]:
        """{next token: count} after exactly this context (at most MAX_CONTEXT tokens)."""
        if not 0 < len(context) <= MAX_CONTEXT:
            return {}
        lo, hi = self._range(context_hash(context))
        a = self._a
        return {int(k) & TOKEN_MASK: int(c) for k, c in zip(a["keys"][lo:hi], a["counts"][lo:hi])}

    def _range(self, ctx: int) -> tuple[int, int]:
        """Where a context's entries are: its keys share the context hash in their high bits."""
        keys = self._a["keys"]
        lo = int(np.searchsorted(keys, np.uint64(ctx << TOKEN_BITS)))
        hi = int(np.searchsorted(keys, np.uint64((ctx << TOKEN_BITS) | TOKEN_MASK), side="right"))
        return lo, hi

    def _step(self, tail: Sequence[int]) -> Step | None:
        """The best continuation of the longest suffix of `tail` the index has seen."""
        a = self._a
        for n in range(min(MAX_CONTEXT, len(tail)), 0, -1):
            lo, hi = self._range(context_hash(tail[len(tail) - n :]))
            if hi > lo:
                counts = a["counts"][lo:hi]
                # most often, then most recently, then the lowest id
                best = int(np.argmax((counts.astype(np.uint64) << np.uint64(32)) | a["last"][lo:hi]))
                return Step(int(a["keys"][lo + best]) & TOKEN_MASK, n, int(counts[best]), int(counts.sum()))
        return None

    def propose(self, context: Sequence[int], k: int) -> Proposal:
        """Up to k tokens that followed the end of `context` in past conversations, cut where
        confidence falls below its minimum or below the bucket the draft started in."""
        tail = list(context[-MAX_CONTEXT:])
        steps: list[Step] = []
        while len(steps) < k:
            s = self._step(tail)
            if s is None or s.confidence < MIN_CONFIDENCE[s.context]:
                break
            if steps and bucket(s.confidence) < bucket(steps[0].confidence):
                break
            steps.append(s)
            tail = (tail + [s.token])[-MAX_CONTEXT:]
        return Proposal(tuple(steps))

    # -- writing ----------------------------------------------------------------------------
    def add(self, tokens: Sequence[int], conversation: str | None = None) -> int:
        """Count a conversation's token ids (prompt and replies). With a `conversation` name, only
        what was added since the last call for it counts, as long as it still starts the same way
        (an edited conversation counts again from the start). Returns the tokens counted."""
        t = np.asarray(tokens, dtype=np.int64)
        if t.ndim != 1 or (len(t) and (t.min() < 0 or t.max() > TOKEN_MASK)):
            raise ValueError(f"token ids must be between 0 and {TOKEN_MASK}")
        t = t.astype(np.uint64)
        start = self._remember(conversation, t) if conversation is not None else 0
        self.serial += 1
        pairs = [(_window_hashes(t, n, start) << np.uint64(TOKEN_BITS)) | t[max(n, start) :]
                 for n in range(1, MAX_CONTEXT + 1)]
        new, times = np.unique(np.concatenate(pairs), return_counts=True)
        self._merge(new, times)
        self._dirty = True
        self._evict()
        return max(0, len(t) - max(start, 1))

    def _remember(self, conversation: str, t: np.ndarray) -> int:
        """Where counting starts for this conversation; records it as it is now. Rows are kept in
        the order they were last added to, so the first is the one added to longest ago."""
        a = self._a
        cid = np.uint64(conversation_id(conversation))
        at = np.flatnonzero(a["conv_ids"] == cid)
        start = 0
        if len(at):
            i = int(at[0])
            seen = int(a["conv_lens"][i])
            if seen <= len(t) and _digest(t[:seen]) == int(a["conv_hashes"][i]):
                start = seen
            self._forget(i)
        elif len(a["conv_ids"]) >= MAX_CONVERSATIONS:
            self._forget(0)
        for name, v in zip(_CONV, (cid, len(t), _digest(t))):
            a[name] = np.append(a[name], np.array([v], _DTYPES[name]))
        return start

    def _forget(self, rows) -> None:
        for name in _CONV:
            self._a[name] = np.delete(self._a[name], rows)

    def _merge(self, new: np.ndarray, times: np.ndarray) -> None:
        a = self._a
        keys = a["keys"]
        at = np.searchsorted(keys, new)
        found = at < len(keys)
        found[found] = keys[at[found]] == new[found]
        hit = at[found]
        a["counts"][hit] = np.minimum(a["counts"][hit] + times[found], 2**32 - 1)  # saturate, never wrap
        a["last"][hit] = self.serial
        miss = ~found
        a["keys"] = np.insert(keys, at[miss], new[miss])
        a["counts"] = np.insert(a["counts"], at[miss], times[miss])  # one conversation: far below 2**32
        a["last"] = np.insert(a["last"], at[miss], self.serial)

    def _evict(self) -> None:
        if self.conversations * CONVERSATION_BYTES > self.cap_bytes:  # a cap below the bookkeeping alone
            self._forget(np.arange(self.conversations - self.cap_bytes // CONVERSATION_BYTES))
        room = (self.cap_bytes - self.conversations * CONVERSATION_BYTES) // ENTRY_BYTES
        if self.entries <= room:
            return
        keep = int(room * KEEP_AFTER_EVICTION)
        a = self._a
        age = np.int64(self.serial) - a["last"]
        score = a["counts"] * np.exp2(-age / HALF_LIFE)
        drop = np.lexsort((a["last"], score))[: self.entries - keep]  # least useful first; among equals, older first
        self.evicted += len(drop)
        for name in ("keys", "counts", "last"):
            a[name] = np.delete(a[name], drop)

    # -- files ------------------------------------------------------------------------------
    @classmethod
    def open(cls, path: Path, fingerprint: str, cap_bytes: int = int(DEFAULT_CAP_MB * 2**20)) -> "HistoryIndex":
        """The index saved at `path` for this vocabulary; an empty one (with a note saying why)
        when there is none, it is damaged, or it belongs to another vocabulary. Never raises for
        what is in the file."""
        index = cls(fingerprint, cap_bytes, path)
        path = Path(path)
        if not path.exists():
            return index
        try:
            meta, arrays = _read(path)
        except Exception as exc:  # whatever a damaged file makes numpy or zipfile raise
            index._set_aside = path.name + ".damaged"
            index.notes.append(f"the history index {path} is damaged ({_why(exc)}): starting a new one; "
                               f"the old file will be kept as {index._set_aside}")
            return index
        if meta["fingerprint"] != fingerprint:
            index._set_aside = path.name + ".other-vocabulary"
            index.notes.append(f"the history index {path} was built for another vocabulary: not used for this "
                               f"model; the old file will be kept as {index._set_aside}")
            return index
        index._a, index.serial = arrays, int(meta["serial"])
        index._evict()  # the cap may be lower than when it was saved
        return index

    @classmethod
    def open_for(cls, folder: Path, model, cap_bytes: int = int(DEFAULT_CAP_MB * 2**20)) -> "HistoryIndex":
        """The index for `model`'s vocabulary in `folder` (one file per vocabulary)."""
        fp = vocab_fingerprint(model)
        return cls.open(index_path(folder, fp), fp, cap_bytes)

    def save(self, path: Path | None = None) -> Path:
        """Write atomically (a temporary file, then a rename) to `path`, by default the file it was
        opened from (saving elsewhere does not change that). Raises EngineError when it cannot."""
        path = Path(path) if path is not None else self.path
        if path is None:
            raise EngineError("the history index has no file to save to")
        meta = {"format": FORMAT, "version": VERSION, "fingerprint": self.fingerprint, "serial": self.serial,
                "max_context": MAX_CONTEXT, "token_bits": TOKEN_BITS}
        tmp = path.with_name(f"{path.name}.tmp-{os.getpid()}")
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            with open(tmp, "wb") as fh:
                np.savez(fh, meta=np.frombuffer(json.dumps(meta).encode(), np.uint8), **self._a)
                fh.flush()
                os.fsync(fh.fileno())
            if self._set_aside is not None and path == self.path and path.exists():
                os.replace(path, path.with_name(self._set_aside))
            os.replace(tmp, path)
        except OSError as exc:
            with contextlib.suppress(OSError):
                tmp.unlink()
            raise EngineError(f"cannot save the history index to {path}: {exc.strerror or exc}") from None
        if path == self.path:
            self._set_aside = None
        self._dirty = False
        if self.path is None:
            self.path = path
        return path

    def copy(self) -> "HistoryIndex":
        """An independent copy, tied to no file."""
        other = HistoryIndex(self.fingerprint, self.cap_bytes)
        other._a = {name: a.copy() for name, a in self._a.items()}
        other.serial = self.serial
        return other

    @property
    def dirty(self) -> bool:
        """Added to since it was opened or saved."""
        return self._dirty


def _why(exc: Exception) -> str:
    return str(exc) or type(exc).__name__


def _read(path: Path) -> tuple[dict, dict[str, np.ndarray]]:
    """Header and arrays of a saved index, checked; anything wrong raises."""
    with open(path, "rb") as fh:
        if fh.read(4) != b"PK\x03\x04":  # an .npz is a zip file
            raise ValueError("not a history index file")
    with np.load(path, allow_pickle=False) as z:
        meta = json.loads(bytes(z["meta"]).decode("utf-8"))
        if not isinstance(meta, dict) or meta.get("format") != FORMAT:
            raise ValueError("not a history index")
        if meta.get("version") != VERSION:
            raise ValueError(f"format version {meta.get('version')!r}, this Draftlight reads {VERSION}")
        if meta.get("max_context") != MAX_CONTEXT or meta.get("token_bits") != TOKEN_BITS:
            raise ValueError("built with other settings")
        if not isinstance(meta.get("fingerprint"), str) or not isinstance(meta.get("serial"), int) or meta["serial"] < 0:
            raise ValueError("header incomplete")
        arrays = {name: z[name] for name in _DTYPES}  # each member's CRC is checked as it is read
    for name, a in arrays.items():
        if a.dtype != _DTYPES[name] or a.ndim != 1:
            raise ValueError(f"{name} has the wrong type")
    keys, conv = arrays["keys"], arrays["conv_ids"]
    if not (len(keys) == len(arrays["counts"]) == len(arrays["last"])):
        raise ValueError("entry arrays differ in length")
    if not all(len(arrays[n]) == len(conv) for n in _CONV):
        raise ValueError("conversation arrays differ in length")
    if len(keys) and (np.any(keys[1:] <= keys[:-1]) or arrays["counts"].min() == 0 or arrays["last"].max() > meta["serial"]):
        raise ValueError("entries out of order or inconsistent")
    return meta, arrays
