"""Check a GGUF file before llama.cpp opens it, and read the facts a person wants to see.

llama.cpp trusts the bytes it is given; a truncated or damaged file can crash the process.
This walks the whole header (magic, version, every metadata entry, every tensor record) with
bounds checks against the file's size and checks that every tensor's data lies inside the
file. It uses the `gguf` package's constants (value types, quantization block sizes) but not
its `GGUFReader`: that one builds a NumPy view per string and takes ~8 s on a 1.1 GB Qwen file,
where this takes a fraction of a second. The tests check both agree.

A launch asks about the same files several times (the model list, the drafter options, the copy for
this CPU, the load itself): each file's answer is kept for the process while the file stays the same
(engine.gguf_check.validation_counts says how often it was read and how often reused).
"""
from __future__ import annotations

import hashlib
import mmap
import os
import struct
import threading
from collections import OrderedDict
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from types import MappingProxyType
from typing import Any

from gguf import GGML_QUANT_SIZES, GGUF_DEFAULT_ALIGNMENT, GGUF_MAGIC, GGMLQuantizationType, GGUFValueType, LlamaFileType

from engine import paths
from engine.llama import kept_store
from engine.errors import ModelFileError
from engine.gguf_hparams import check_hparams
from engine.gguf_vocab import check_vocab

_SCALARS: dict[int, tuple[str, int]] = {
    GGUFValueType.UINT8: ("<B", 1),
    GGUFValueType.INT8: ("<b", 1),
    GGUFValueType.UINT16: ("<H", 2),
    GGUFValueType.INT16: ("<h", 2),
    GGUFValueType.UINT32: ("<I", 4),
    GGUFValueType.INT32: ("<i", 4),
    GGUFValueType.FLOAT32: ("<f", 4),
    GGUFValueType.BOOL: ("<?", 1),
    GGUFValueType.UINT64: ("<Q", 8),
    GGUFValueType.INT64: ("<q", 8),
    GGUFValueType.FLOAT64: ("<d", 8),
}
#: Big arrays a person never needs to see: skipped (bounds-checked) unless asked for.
_BULKY = ("tokenizer.ggml.merges", "tokenizer.ggml.scores", "tokenizer.ggml.token_type")
_MAX_DIMS = 4
#: Counts no real model exceeds: beyond them a count is damage, below them a short file is truncation.
#: (The largest real models have a few thousand tensors: a million empty records cost 7 s and 415 MB.)
_PLAUSIBLE_KV, _PLAUSIBLE_TENSORS = 100_000, 100_000
#: Longest numeric array read into Python as values; longer ones are only bounds-checked (a 30-million
#: entry array once made the check take 20x the file's size in memory). Tokenizer arrays are checked
#: in place (engine.gguf_vocab), never as Python lists.
_MAX_LISTED = 4096
#: Magic numbers of the formats before GGUF (ggml, ggmf, ggjt), as they appear on disk.
_GGML_MAGICS = (b"lmgg", b"fmgg", b"tjgg")


@dataclass(frozen=True, slots=True)
class GGUFInfo:
    """What a valid GGUF file says about itself. Read-only: one answer is shared by every caller that
    asks about the same file (validate_gguf keeps it)."""

    path: Path
    """The file as it was asked for."""
    size: int
    """Its size in bytes."""
    version: int
    """The GGUF version (2 or 3)."""
    metadata: Mapping[str, Any]
    """Key -> value, read-only; arrays as tuples (long and bulky ones as their length)."""
    tensors: tuple[tuple[str, tuple[int, ...], str, int], ...]
    """Per tensor: name, shape, ggml type, bytes."""
    n_params: int
    """Elements of all tensors."""
    tokens: tuple[str, ...] = field(repr=False, default=())
    """The token texts, where they were read (read_tokens); else empty."""

    @property
    def architecture(self) -> str:
        return str(self.metadata.get("general.architecture", "unknown"))

    @property
    def name(self) -> str:
        return str(self.metadata.get("general.name") or self.path.stem)

    @property
    def context_length(self) -> int | None:
        v = self.metadata.get(f"{self.architecture}.context_length")
        return int(v) if v is not None else None

    @property
    def vocab_size(self) -> int:
        return len(self.tokens) if self.tokens else int(self.metadata.get("tokenizer.ggml.tokens.count", 0))

    @property
    def quantization(self) -> str:
        ft = self.metadata.get("general.file_type")
        if ft is not None:
            try:
                return LlamaFileType(int(ft)).name.removeprefix("MOSTLY_").removeprefix("ALL_")
            except ValueError:
                pass
        types = {t for _, _, t, _ in self.tensors}
        return "/".join(sorted(types)) or "unknown"

    @property
    def has_chat_template(self) -> bool:
        return bool(self.metadata.get("tokenizer.chat_template"))

    @property
    def n_layers(self) -> int | None:
        v = self.metadata.get(f"{self.architecture}.block_count")
        return int(v) if v is not None else None


class _Cursor:
    def __init__(self, buf: mmap.mmap | bytes, size: int, path: Path) -> None:
        self.buf, self.size, self.pos, self.path = buf, size, 0, path

    def need(self, n: int, what: str) -> None:
        if n < 0 or self.pos + n > self.size:
            raise ModelFileError(
                f"{self.path.name} is damaged or truncated: {what} runs past the end of the file "
                f"(needs byte {self.pos + n:,}, the file has {self.size:,})"
            )

    def scalar(self, fmt: str, n: int, what: str) -> Any:
        self.need(n, what)
        (v,) = struct.unpack_from(fmt, self.buf, self.pos)
        self.pos += n
        return v

    def string(self, what: str) -> str:
        n = self.scalar("<Q", 8, what)
        if n > self.size:  # no cut-short file explains a length beyond the whole file: the length is wrong
            raise ModelFileError(
                f"{self.path.name} is damaged: {what} claims a text of {n:,} bytes, longer than the whole file "
                f"({self.size:,} bytes)"
            )
        self.need(n, what)
        raw = self.buf[self.pos : self.pos + n]
        self.pos += n
        return raw.decode("utf-8", "replace")

    def skip_strings(self, count: int, what: str) -> None:
        buf, pos, size = self.buf, self.pos, self.size
        unpack = struct.unpack_from
        for _ in range(count):
            if pos + 8 > size:
                self.pos = pos
                self.need(8, what)
            (n,) = unpack("<Q", buf, pos)
            pos += 8 + n
        self.pos = pos
        self.need(0, what)


def _value(cur: _Cursor, vtype: int, key: str, keep: bool) -> Any:
    what = f"metadata entry '{key}'"
    if vtype in _SCALARS:
        fmt, n = _SCALARS[vtype]
        return cur.scalar(fmt, n, what)
    if vtype == GGUFValueType.STRING:
        return cur.string(what)
    if vtype == GGUFValueType.ARRAY:
        etype = cur.scalar("<I", 4, what)
        count = cur.scalar("<Q", 8, what)
        if etype in _SCALARS:
            fmt, n = _SCALARS[etype]
            cur.need(count * n, what)
            if not keep or count > _MAX_LISTED:
                cur.pos += count * n
                return count
            vals = list(struct.unpack_from(f"<{count}{fmt[1]}", cur.buf, cur.pos))
            cur.pos += count * n
            return vals
        if etype == GGUFValueType.STRING:
            if not keep:
                cur.skip_strings(count, what)
                return count
            return [cur.string(what) for _ in range(count)]
        raise ModelFileError(f"{cur.path.name} is damaged: metadata entry '{key}' has an unknown array type {etype}")
    raise ModelFileError(f"{cur.path.name} is damaged: metadata entry '{key}' has an unknown value type {vtype}")


def validate_gguf(path: str | Path, read_tokens: bool = True) -> GGUFInfo:
    """Validate the file's structure; raise ModelFileError naming what is wrong.

    The answer is kept for this process while the file stays the same (path, size, modification time,
    inode, and the header bytes it was read from): asking again costs a hash of the header instead of a walk.
    A file changed or replaced since is read again, and a failure is never kept. An answer read with
    the tokens also answers a request without them (its `tokens` are then filled)."""
    path = Path(path)
    if not path.exists():
        raise ModelFileError(f"model file not found: {path}")
    if not path.is_file():
        raise ModelFileError(f"not a file: {path}")
    key = path.resolve()
    with open(path, "rb") as fh:
        st = os.fstat(fh.fileno())
        size = st.st_size
        if size < 24:
            _checked.forget(key)
            raise ModelFileError(f"{path.name} is not a GGUF model: only {size} bytes")
        stamp = (size, st.st_mtime_ns, st.st_ino, st.st_dev)
        # One walk of a file at a time: at a launch the model list (a background thread) and the load (the
        # engine thread) check the same files together, and a walk is Python, so two at once take as
        # long as one after the other, and the second then reuses the first's answer.
        with mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as buf, _checked.walking(key):
            kept = _checked.get(key, stamp, read_tokens, buf)
            if kept is None and not read_tokens and size >= KEPT_MIN_BYTES:  # smaller files are never kept
                kept = _from_earlier_launch(key, stamp, buf)
            if kept is not None:
                return kept if kept.path == path else replace(kept, path=path)  # another spelling, a link
            _checked.note_read()
            try:
                info, header_end = _walk(path, buf, size, read_tokens)
            except BaseException:
                _checked.forget(key)
                raise
            checked = _Checked(stamp, header_end, _digest(buf, header_end), read_tokens, info)
            _checked.put(key, checked)
            if size >= KEPT_MIN_BYTES:
                _keep_for_later_launches(key, checked)
            return info


#: Files this large (real models) have their answer kept between launches too, in KEPT_NAME under the
#: cache folder (engine.llama.kept_store; at most KEPT_FILES): a launch then checks a model by hashing
#: its header (15 ms for the 1.5B file) instead of walking it (0.5 s with the vocabulary's checks, which
#: is Python). Smaller files are walked every time, in milliseconds.
KEPT_MIN_BYTES = 64 << 20
KEPT_FILES, KEPT_NAME = 32, "checked-models.json"


def _kept_path() -> Path:
    return paths.cache_dir() / KEPT_NAME


def _keep_for_later_launches(key: Path, c: _Checked) -> None:
    i = c.info
    kept_store.put(_kept_path(), str(key), {
        "stamp": list(c.stamp), "header_end": c.header_end, "digest": c.digest.hex(), "version": i.version,
        "metadata": dict(i.metadata), "tensors": [list(t) for t in i.tensors], "n_params": i.n_params}, KEPT_FILES)


def _from_earlier_launch(key: Path, stamp: tuple[int, int, int, int], buf: mmap.mmap) -> GGUFInfo | None:
    """The answer an earlier launch kept for this very file (same stamp, same header bytes), without its
    tokens; None where there is none or it does not hold (a damaged entry is as good as none)."""
    entry = kept_store.read(_kept_path()).get(str(key))
    try:
        header_end, digest = int(entry["header_end"]), bytes.fromhex(entry["digest"])
        if tuple(entry["stamp"]) != stamp or _digest(buf, header_end) != digest:
            return None
        tensors = tuple((str(n), tuple(int(d) for d in dims), str(t), int(b)) for n, dims, t, b in entry["tensors"])
        info = GGUFInfo(path=key, size=stamp[0], version=int(entry["version"]), metadata=_frozen(entry["metadata"]),
                        tensors=tensors, n_params=int(entry["n_params"]))
    except (KeyError, TypeError, ValueError, AttributeError):
        return None
    _checked.put(key, _Checked(stamp, header_end, digest, False, info))
    _checked.note_kept()
    return info


def _frozen(meta: Mapping[str, Any]) -> Mapping[str, Any]:
    """Metadata as GGUFInfo holds it, read-only: arrays (lists, as read or as kept in JSON) as tuples."""
    return MappingProxyType({k: tuple(v) if isinstance(v, list) else v for k, v in meta.items()})


def _digest(buf: mmap.mmap, end: int) -> bytes:
    with memoryview(buf) as whole, whole[:end] as header:  # released before the map closes
        return hashlib.sha256(header).digest()


@dataclass(frozen=True, slots=True)
class ValidationCounts:
    """How often validate_gguf read a file and how often it reused what it had read (this process)."""

    reads: int
    """Headers walked and checked (those found damaged too)."""
    reused: int
    """Answers given again for a file unchanged since."""
    kept: int = 0
    """Answers an earlier launch kept (KEPT_NAME), for a file unchanged since."""


def validation_counts() -> ValidationCounts:
    return ValidationCounts(_checked.reads, _checked.reused, _checked.kept)


@dataclass(frozen=True, slots=True)
class _Checked:
    """One file's answer, and what must be the same for it to hold."""

    stamp: tuple[int, int, int, int]
    """Size, modification time (ns), inode and device of the file that was read."""
    header_end: int
    """Bytes from the start that the check read (all it depends on, with the size)."""
    digest: bytes
    """SHA-256 of those bytes: a file rewritten in place within one tick of the file system's clock, or with
    its time put back, differs here."""
    with_tokens: bool
    """Read with the token texts."""
    info: GGUFInfo


@dataclass(slots=True)
class _Walk:
    """A file's check lock and how many checks hold or wait for it."""

    lock: threading.Lock
    users: int = 0


class _CheckedFiles:
    """The last few files' answers, by resolved path; thread-safe (the GUI lists models on a background
    thread while the engine thread loads)."""

    #: Files kept: a pair, its copies for this CPU, a few more (a vocabulary is ~10 MB of text).
    LIMIT = 8

    def __init__(self) -> None:
        self._by_path: OrderedDict[Path, _Checked] = OrderedDict()
        self._lock = threading.Lock()
        self._walks: dict[Path, _Walk] = {}
        self.reads = self.reused = self.kept = 0

    def get(self, key: Path, stamp: tuple, with_tokens: bool, buf: mmap.mmap) -> GGUFInfo | None:
        with self._lock:
            hit = self._by_path.get(key)
        if hit is None or hit.stamp != stamp or (with_tokens and not hit.with_tokens) \
                or _digest(buf, hit.header_end) != hit.digest:
            return None
        with self._lock:
            if key in self._by_path:
                self._by_path.move_to_end(key)
            self.reused += 1
        return hit.info

    @contextmanager
    def walking(self, key: Path) -> Iterator[None]:
        """Held while `key` is checked: one check of a file at a time. Its lock lives while a check holds or
        waits for it (kept for good, a process that checks many files, a download's parts, held one each)."""
        with self._lock:
            entry = self._walks.setdefault(key, _Walk(threading.Lock()))
            entry.users += 1
        try:
            with entry.lock:
                yield
        finally:
            with self._lock:
                entry.users -= 1
                if entry.users == 0:
                    del self._walks[key]

    def note_read(self) -> None:
        with self._lock:
            self.reads += 1

    def note_kept(self) -> None:
        with self._lock:
            self.kept += 1

    def put(self, key: Path, checked: _Checked) -> None:
        with self._lock:
            self._by_path[key] = checked
            self._by_path.move_to_end(key)
            while len(self._by_path) > self.LIMIT:
                self._by_path.popitem(last=False)

    def forget(self, key: Path) -> None:
        with self._lock:
            self._by_path.pop(key, None)


_checked = _CheckedFiles()


def _walk(path: Path, buf: mmap.mmap, size: int, read_tokens: bool) -> tuple[GGUFInfo, int]:
    """Check the header and tensor records in `buf`; the answer and where the records end."""
    cur = _Cursor(buf, size, path)
    magic = cur.scalar("<I", 4, "magic")
    if magic != GGUF_MAGIC:
        if bytes(buf[:4]) in _GGML_MAGICS:
            raise ModelFileError(
                f"{path.name} is an old GGML-format model (before GGUF, 2023): llama.cpp no longer reads it; "
                f"download a .gguf version of the model instead"
            )
        raise ModelFileError(
            f"{path.name} is not a GGUF model: it starts with {bytes(buf[:4])!r}, not b'GGUF'"
        )
    version = cur.scalar("<I", 4, "version")
    if version not in (2, 3) and int.from_bytes(version.to_bytes(4, "little"), "big") in (2, 3):
        raise ModelFileError(f"{path.name} is a big-endian GGUF file; only little-endian files are supported")
    if version not in (2, 3):
        raise ModelFileError(f"{path.name} has GGUF version {version}; versions 2 and 3 are supported")
    n_tensors = cur.scalar("<Q", 8, "tensor count")
    n_kv = cur.scalar("<Q", 8, "metadata count")
    if n_kv > _PLAUSIBLE_KV or n_tensors > _PLAUSIBLE_TENSORS:
        raise ModelFileError(f"{path.name} is damaged: its header claims {n_kv:,} metadata entries and {n_tensors:,} tensors")
    # Each entry takes at least 8+4 bytes: a count beyond that is a damaged header or a cut-short file.
    if n_kv * 12 > size or n_tensors * 24 > size:
        if n_kv <= _PLAUSIBLE_KV and n_tensors <= _PLAUSIBLE_TENSORS:
            raise ModelFileError(
                f"{path.name} is truncated: its header lists {n_kv:,} metadata entries and {n_tensors:,} tensors "
                f"but the file ends at byte {size:,}"
            )
        raise ModelFileError(f"{path.name} is damaged: its header claims {n_kv:,} metadata entries and {n_tensors:,} tensors")
    meta: dict[str, Any] = {}
    tokens: list[str] = []
    arrays: dict[str, tuple[int, int, int, int]] = {}  # key -> (value type, element type, count, data offset)
    for _ in range(n_kv):
        key = cur.string("a metadata key")
        vtype = cur.scalar("<I", 4, f"metadata entry '{key}'")
        if key in meta or (key == "tokenizer.ggml.tokens" and key + ".count" in meta):
            raise ModelFileError(f"{path.name} is damaged: the metadata entry '{key}' appears twice")
        if vtype == GGUFValueType.ARRAY:
            cur.need(12, f"metadata entry '{key}'")
            etype, count = struct.unpack_from("<IQ", buf, cur.pos)
            arrays[key] = (vtype, etype, count, cur.pos + 12)
        elif key.startswith("tokenizer.ggml."):
            arrays[key] = (vtype, -1, 0, cur.pos)
        if key == "tokenizer.ggml.tokens":
            val = _value(cur, vtype, key, keep=read_tokens)
            if isinstance(val, list):
                tokens = val
                meta[key + ".count"] = len(val)
            else:
                meta[key + ".count"] = val
            continue
        meta[key] = _value(cur, vtype, key, keep=key not in _BULKY)
    if "general.architecture" not in meta:
        raise ModelFileError(f"{path.name} is not a usable model: it names no architecture (general.architecture)")
    check_vocab(path.name, buf, meta, arrays)
    check_hparams(path.name, meta)
    infos = []
    for i in range(n_tensors):
        name = cur.string(f"tensor record {i}")
        n_dims = cur.scalar("<I", 4, f"tensor '{name}'")
        if not 1 <= n_dims <= _MAX_DIMS:
            raise ModelFileError(f"{path.name} is damaged: tensor '{name}' has {n_dims} dimensions")
        cur.need(8 * n_dims, f"tensor '{name}'")
        dims = struct.unpack_from(f"<{n_dims}Q", buf, cur.pos)
        cur.pos += 8 * n_dims
        ttype = cur.scalar("<I", 4, f"tensor '{name}'")
        offset = cur.scalar("<Q", 8, f"tensor '{name}'")
        infos.append((name, dims, ttype, offset))
    align = meta.get("general.alignment", GGUF_DEFAULT_ALIGNMENT)
    if not isinstance(align, int) or isinstance(align, bool):
        raise ModelFileError(f"{path.name} is damaged: its alignment (general.alignment) is {align!r}, not a number")
    if align <= 0 or align & (align - 1):
        raise ModelFileError(f"{path.name} is damaged: alignment {align} is not a power of two")
    header_end = cur.pos
    data_start = cur.pos + (-cur.pos % align)
    sized = []
    for name, dims, ttype, offset in infos:
        try:
            qtype = GGMLQuantizationType(ttype)
            block, type_size = GGML_QUANT_SIZES[qtype]
        except (ValueError, KeyError):
            raise ModelFileError(f"{path.name} uses tensor type {ttype} (tensor '{name}'), unknown to this build") from None
        n_el = 1
        for d in dims:
            n_el *= d
        if n_el % block:
            raise ModelFileError(f"{path.name} is damaged: tensor '{name}' has {n_el} elements, not a multiple of {block}")
        if offset % align:
            raise ModelFileError(f"{path.name} is damaged: the data offset of tensor '{name}' ({offset:,}) is not aligned to {align}")
        sized.append((name, dims, qtype, offset, n_el, n_el // block * type_size))
    # Tensors lie one after another: a cut-short file ends inside that run, a damaged offset points beyond it.
    data_end = data_start + sum(nbytes + (-nbytes % align) for *_, nbytes in sized)
    tensors = []
    n_params = 0
    for name, dims, qtype, offset, n_el, nbytes in sized:
        end = data_start + offset + nbytes
        if end > size and end <= data_end:
            full = max(e for e in (data_start + t[3] + t[5] for t in sized) if e <= data_end)
            raise ModelFileError(
                f"{path.name} is truncated: it has {size:,} bytes but its tensor data runs to byte "
                f"{full:,} ({size / full:.0%} present; the download or copy was cut short)"
            )
        if end > size:
            raise ModelFileError(
                f"{path.name} is damaged: the data of tensor '{name}' would end at byte {end:,}, "
                f"past the end of the file ({size:,} bytes)"
            )
        n_params += n_el
        tensors.append((name, tuple(int(d) for d in dims), qtype.name, nbytes))
    return GGUFInfo(path=path, size=size, version=version, metadata=_frozen(meta), tensors=tuple(tensors), n_params=n_params,
                    tokens=tuple(tokens)), header_end
