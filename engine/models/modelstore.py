"""The model folder: which GGUF files are installed, where they came from, and which drafters fit a target.

A model is a complete, valid `.gguf` file directly in the folder (or a file registered in place).
Downloads in progress live in the hidden `.partial/` folder and temporary copies start with a dot,
so neither is ever listed. A small registry file (`.draftlight-models.json`) remembers each file's
source and SHA-256, keyed to its size and modification time, so a checked file is not re-hashed.
Every check here reads metadata only: no weights are loaded.
"""
from __future__ import annotations

import hashlib
import json
import os
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from engine import paths
from engine.assistant_fit import ASSISTANT_ARCH, misfit
from engine.drafting.compat import (
    CHECK_START_TOKEN_ID,
    MAX_VOCAB_SIZE_DIFFERENCE,
    Vocab,
    incompatibilities,
    vocab_of_file,
)
from engine.errors import EngineError, ModelFileError
from engine.gguf_check import GGUFInfo, validate_gguf

REGISTRY_FILE = ".draftlight-models.json"
PARTIAL_DIR = ".partial"
#: A drafter with more than this share of the target's parameters costs more than it saves.
MAX_USEFUL_DRAFTER_SHARE = 0.5
_COPY_CHUNK = 8 * 1024 * 1024

SOURCE_DEFAULT = "default"
SOURCE_IMPORTED = "imported"
CATALOG_PREFIX = "catalog:"


@dataclass(frozen=True, slots=True)
class ModelRecord:
    """One validated, complete .gguf file."""

    path: Path
    """Where the file is."""
    name: str
    """The model's own name (general.name), or the file name."""
    architecture: str
    """llama.cpp architecture, e.g. "qwen2", "llama", "gemma3"."""
    n_params: int
    """Parameter count, summed over the tensors."""
    quantization: str
    """File type, e.g. "Q4_K_M"."""
    context_length: int | None
    """Context length the model was trained for."""
    vocab_size: int
    """Number of tokens in the vocabulary."""
    chat_template: bool
    """Whether the file carries a chat template."""
    size_bytes: int
    """File size."""
    source: str
    """"default", "catalog:<pair id>" or "imported"."""
    sha256: str | None = None
    """SHA-256 recorded when the file was last checked in full, if it was."""
    n_layers: int | None = None
    """Transformer blocks (for GPU offload settings)."""

    def summary(self) -> dict[str, Any]:
        return {
            "file": str(self.path),
            "name": self.name,
            "architecture": self.architecture,
            "parameters": self.n_params,
            "quantization": self.quantization,
            "context_length": self.context_length,
            "vocab_size": self.vocab_size,
            "chat_template": self.chat_template,
            "size_bytes": self.size_bytes,
            "layers": self.n_layers,
            "source": self.source,
            "sha256": self.sha256,
        }


@dataclass(frozen=True, slots=True)
class PairOption:
    """One installed model considered as a drafter for a chosen target."""

    drafter: ModelRecord
    """The candidate."""
    compatible: bool
    """True when it passes llama.cpp's draft-compatibility rules against the target."""
    reasons: list[str]
    """Why it does not fit (empty when compatible)."""
    warning: str | None
    """Set when it fits but cannot pay off (not much smaller than the target)."""


def models_folder() -> Path:
    """The model folder (created on demand): platformdirs user data dir, or DRAFTLIGHT_MODELS/HOME."""
    return paths.ensure(paths.models_dir())


def _folder(folder: Path | None) -> Path:
    return Path(folder) if folder is not None else models_folder()


# -- registry -------------------------------------------------------------------------------------
_lock = threading.Lock()


def _registry_path(folder: Path) -> Path:
    return folder / REGISTRY_FILE


def _read_registry(folder: Path) -> dict[str, dict[str, Any]]:
    try:
        data = json.loads(_registry_path(folder).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}  # missing or damaged: the files themselves are still validated on every listing
    files = data.get("files") if isinstance(data, dict) else None
    return {k: v for k, v in files.items() if isinstance(v, dict)} if isinstance(files, dict) else {}


def _write_registry(folder: Path, files: dict[str, dict[str, Any]]) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    tmp = folder / f".{REGISTRY_FILE}.{uuid.uuid4().hex[:8]}.tmp"
    tmp.write_text(json.dumps({"version": 1, "files": files}, indent=1, sort_keys=True), encoding="utf-8")
    os.replace(tmp, _registry_path(folder))


def _key(path: Path, folder: Path) -> str:
    """Files in the folder are keyed by name (the folder can move); others by absolute path."""
    path = path.absolute()
    try:
        if path.parent.resolve() == folder.resolve():
            return path.name
    except OSError:
        pass
    return str(path.resolve())


def _entry(path: Path, folder: Path) -> dict[str, Any] | None:
    """The registry entry of a file, if its size and mtime still match what was recorded."""
    e = _read_registry(folder).get(_key(path, folder))
    if e is None:
        return None
    try:
        st = path.stat()
    except OSError:
        return None
    if e.get("size") != st.st_size or e.get("mtime_ns") != st.st_mtime_ns:
        return {"source": e.get("source")}  # changed since it was checked: keep the source, drop the hash
    return e


def register(path: Path, source: str, sha256: str | None = None, folder: Path | None = None,
             origin: str | None = None) -> None:
    """Remember where a file came from (and its SHA-256, valid while size and mtime stay the same)."""
    folder = _folder(folder)
    path = Path(path)
    st = path.stat()
    with _lock:
        files = _read_registry(folder)
        entry: dict[str, Any] = {"source": source, "size": st.st_size, "mtime_ns": st.st_mtime_ns}
        if sha256:
            entry["sha256"] = sha256
        if origin:
            entry["origin"] = origin
        files[_key(path, folder)] = entry
        _write_registry(folder, files)


def known_sha256(path: Path, folder: Path | None = None) -> str | None:
    """The SHA-256 recorded for this file, if the file has not changed since."""
    e = _entry(Path(path), _folder(folder))
    return e.get("sha256") if e else None


def registry_entry(path: Path, folder: Path | None = None) -> dict[str, Any] | None:
    return _entry(Path(path), _folder(folder))


def forget(path: Path, folder: Path | None = None) -> None:
    folder = _folder(folder)
    with _lock:
        files = _read_registry(folder)
        if files.pop(_key(Path(path), folder), None) is not None:
            _write_registry(folder, files)


def remove_model(path: Path, folder: Path | None = None) -> None:
    """Delete a model from the folder (a file registered in place is only forgotten, never deleted)."""
    folder = _folder(folder)
    path = Path(path)
    if path.absolute().parent.resolve() == folder.resolve():
        path.unlink(missing_ok=True)
    forget(path, folder)


def sha256_of(path: Path, progress: Callable[[int, int], None] | None = None) -> str:
    h = hashlib.sha256()
    total = Path(path).stat().st_size
    done = 0
    with open(path, "rb") as fh:
        while chunk := fh.read(_COPY_CHUNK):
            h.update(chunk)
            done += len(chunk)
            if progress:
                progress(done, total)
    return h.hexdigest()


# -- records --------------------------------------------------------------------------------------
_info_cache: dict[str, tuple[int, int, GGUFInfo]] = {}
_vocab_cache: dict[str, tuple[int, int, "TokenDigests"]] = {}
_text_reasons: dict[tuple[str, str], tuple[tuple, list[str]]] = {}  # pairs whose token text differs: why


def _stat_key(path: Path) -> tuple[str, int, int]:
    """A file's cache key and what must not have changed for a cached answer to hold."""
    st = path.stat()
    return str(path.absolute()), st.st_size, st.st_mtime_ns


def _info(path: Path) -> GGUFInfo:
    """Validated header (tokens not read), cached while the file's size and mtime stay the same."""
    try:
        key, size, mtime = _stat_key(path)
    except FileNotFoundError:
        raise ModelFileError(f"model file not found: {path}") from None
    except OSError as exc:
        raise ModelFileError(f"cannot read {path}: {exc.strerror or exc}") from None
    hit = _info_cache.get(key)
    if hit and hit[:2] == (size, mtime):
        return hit[2]
    try:
        info = validate_gguf(path, read_tokens=False)
    except PermissionError:
        raise ModelFileError(f"cannot read {path}: permission denied") from None
    except OSError as exc:  # e.g. a file that vanished or a device error mid-read
        raise ModelFileError(f"cannot read {path}: {exc.strerror or exc}") from None
    _info_cache[key] = (size, mtime, info)
    return info


def _record(path: Path, info: GGUFInfo, folder: Path) -> ModelRecord:
    e = _entry(path, folder) or {}
    return ModelRecord(
        path=path,
        name=info.name,
        architecture=info.architecture,
        n_params=info.n_params,
        quantization=info.quantization,
        context_length=info.context_length,
        vocab_size=info.vocab_size,
        chat_template=info.has_chat_template,
        size_bytes=info.size,
        source=str(e.get("source") or SOURCE_IMPORTED),
        sha256=e.get("sha256"),
        n_layers=info.n_layers,
    )


def verify(path: Path, folder: Path | None = None) -> ModelRecord:
    """Validate one file's structure (header, metadata, tensor bounds); ModelFileError says what is wrong."""
    path = Path(path).expanduser()
    return _record(path, _info(path), _folder(folder))


def _is_listable(p: Path) -> bool:
    return p.suffix.lower() == ".gguf" and not p.name.startswith(".") and p.is_file()


def scan(folder: Path | None = None) -> tuple[list[ModelRecord], list[tuple[Path, str]]]:
    """Valid models, and the .gguf files that failed validation with the reason (for a warning)."""
    folder = _folder(folder)
    found: dict[str, Path] = {}
    if folder.is_dir():
        for p in folder.iterdir():
            if _is_listable(p):
                found[str(p.resolve())] = p
    for key in _read_registry(folder):
        p = Path(key)
        if p.is_absolute() and p.is_file():  # registered in place, outside the folder
            found.setdefault(str(p.resolve()), p)
    remove_stale_temporaries(folder)
    records, problems = [], []
    for p in found.values():
        try:
            records.append(verify(p, folder))
        except ModelFileError as exc:
            problems.append((p, str(exc)))
    records.sort(key=lambda r: (r.n_params, r.path.name.casefold()))
    return records, problems


def list_models(folder: Path | None = None) -> list[ModelRecord]:
    """Installed models, smallest first. Partial downloads, temporary copies and invalid files never appear."""
    return scan(folder)[0]


def partial_downloads(folder: Path | None = None) -> list[tuple[Path, int]]:
    """Unfinished downloads kept for resuming (path, bytes so far)."""
    d = _folder(folder) / PARTIAL_DIR
    return sorted((p, p.stat().st_size) for p in d.glob("*.part")) if d.is_dir() else []


# -- import ---------------------------------------------------------------------------------------
def _free_name(folder: Path, name: str) -> Path:
    dest = folder / name
    stem, suffix = Path(name).stem, Path(name).suffix
    n = 2
    while dest.exists():
        dest = folder / f"{stem}-{n}{suffix}"
        n += 1
    return dest


class CopyCancelled(EngineError):
    """An import's copy was cancelled; its temporary file is gone."""


#: A hidden temporary copy untouched this long belongs to an import that died (a copy writes every
#: few milliseconds): removed when the folder is next read.
STALE_TEMP_S = 600


def remove_stale_temporaries(folder: Path) -> list[Path]:
    """Delete the hidden '.NAME.xxxxxxxx.tmp' copies a killed import left (GBs each); returns them."""
    gone = []
    now = time.time()
    try:
        candidates = list(folder.glob(".*.tmp"))
    except OSError:
        return gone
    for p in candidates:
        try:
            if p.is_file() and now - p.stat().st_mtime > STALE_TEMP_S:
                p.unlink()
                gone.append(p)
        except OSError:
            continue
    return gone


def copy_atomically(src: Path, dest: Path, progress: Callable[[int, int], None] | None = None,
                    cancel: threading.Event | None = None) -> str:
    """Copy through a hidden temporary file and os.replace; return the copy's SHA-256. A set `cancel`
    ends it between chunks with CopyCancelled."""
    tmp = dest.with_name(f".{dest.name}.{uuid.uuid4().hex[:8]}.tmp")
    total = src.stat().st_size
    h = hashlib.sha256()
    done = 0
    try:
        with open(src, "rb") as fin, open(tmp, "wb") as fout:
            while chunk := fin.read(_COPY_CHUNK):
                if cancel is not None and cancel.is_set():
                    raise CopyCancelled(f"importing {src.name} was cancelled")
                fout.write(chunk)
                h.update(chunk)
                done += len(chunk)
                if progress:
                    progress(done, total)
            fout.flush()
            os.fsync(fout.fileno())
        if tmp.stat().st_size != total:
            raise ModelFileError(f"copying {src.name} gave {tmp.stat().st_size:,} bytes, not {total:,}")
        os.replace(tmp, dest)
    finally:
        tmp.unlink(missing_ok=True)
    return h.hexdigest()


def import_model(src: Path, folder: Path | None = None, copy: bool = True,
                 progress: Callable[[int, int], None] | None = None,
                 cancel: threading.Event | None = None) -> ModelRecord:
    """Validate a local .gguf, then copy it into the folder (atomically) or register it where it is."""
    src = Path(src).expanduser()
    verify(src)  # a bad file is refused before anything is written
    folder = _folder(folder)
    folder.mkdir(parents=True, exist_ok=True)
    name = src.name if src.suffix.lower() == ".gguf" else src.name + ".gguf"
    if src.absolute().parent.resolve() == folder.resolve() and src.name == name:
        if _entry(src, folder) is None:  # already in the folder: keep what the registry knows about it
            register(src, SOURCE_IMPORTED, folder=folder)
        return verify(src, folder)
    if not copy:
        register(src.resolve(), SOURCE_IMPORTED, folder=folder)
        return verify(src.resolve(), folder)
    dest = folder / name
    if dest.exists():
        if dest.stat().st_size == src.stat().st_size and sha256_of(dest) == sha256_of(src):
            register(dest, SOURCE_IMPORTED, sha256_of(dest), folder=folder)  # the same model, imported again
            return verify(dest, folder)
        dest = _free_name(folder, name)
    try:
        digest = copy_atomically(src, dest, progress, cancel)
    except OSError as exc:
        raise EngineError(f"could not copy {src.name} into {folder}: {exc.strerror or exc}") from None
    register(dest, SOURCE_IMPORTED, digest, folder=folder)
    return verify(dest, folder)


# -- pairing --------------------------------------------------------------------------------------
def _facts_only(info: GGUFInfo) -> Vocab:
    """Vocabulary facts from the header alone; token text is read only when the facts agree."""
    v = vocab_of_file(info)
    return replace(v, n_vocab=info.vocab_size, text=lambda _i: b"")  # texts compare equal in this first pass


@dataclass(frozen=True, slots=True)
class TokenDigests:
    """What pairing needs to know of a file's token list, kept instead of the list (for a Qwen vocabulary
    ~12 MB of strings): digests of the token text from CHECK_START_TOKEN_ID up to each length the file
    can be compared at. Two files are compared up to the shorter one's length, which the facts check
    lets be at most MAX_VOCAB_SIZE_DIFFERENCE below the longer one's."""

    n_vocab: int
    """Tokens in the list."""
    first: int
    """The shortest length with a digest."""
    tail: bytes
    """DIGEST_BYTES per length from `first` to `n_vocab`."""

    DIGEST_BYTES = 16

    @classmethod
    def of(cls, tokens: list[str]) -> "TokenDigests":
        n, size = len(tokens), cls.DIGEST_BYTES
        first = max(CHECK_START_TOKEN_ID, n - MAX_VOCAB_SIZE_DIFFERENCE)
        h = hashlib.blake2b(digest_size=size)
        tail = bytearray()
        for i in range(CHECK_START_TOKEN_ID, n + 1):
            if i >= first:
                tail += h.digest()
            if i < n:
                text = tokens[i].encode("utf-8")
                h.update(len(text).to_bytes(4, "little") + text)  # length-prefixed: ["ab", "c"] and ["a", "bc"] differ
        return cls(n, first, bytes(tail))

    def upto(self, length: int) -> bytes | None:
        """Digest of the token text from CHECK_START_TOKEN_ID up to `length` (None: not kept)."""
        if not self.first <= length <= self.n_vocab:
            return None
        at = (length - self.first) * self.DIGEST_BYTES
        return self.tail[at : at + self.DIGEST_BYTES]


def _token_digests(path: Path) -> TokenDigests:
    key, size, mtime = _stat_key(path)
    hit = _vocab_cache.get(key)
    if hit and hit[:2] == (size, mtime):
        return hit[2]
    digests = TokenDigests.of(validate_gguf(path, read_tokens=True).tokens)
    _vocab_cache[key] = (size, mtime, digests)
    return digests


def _text_differs(target: Path, drafter: Path) -> list[str]:
    """The check on the token text itself, to say which token differs: both lists are read again for it
    (the same facts with other text is rare), and the answer kept while neither file changes."""
    stats = (_stat_key(target), _stat_key(drafter))
    pair = (stats[0][0], stats[1][0])
    hit = _text_reasons.get(pair)
    if hit is None or hit[0] != stats:
        hit = _text_reasons[pair] = (stats, incompatibilities(vocab_of_file(validate_gguf(target, read_tokens=True)),
                                                              vocab_of_file(validate_gguf(drafter, read_tokens=True))))
    return list(hit[1])


def pair_reasons(target: Path, drafter: Path) -> list[str]:
    """Why `drafter` cannot draft for `target` (empty when it can), from metadata only."""
    target, drafter = Path(target), Path(drafter)
    t_info, d_info = _info(target), _info(drafter)
    if d_info.architecture == ASSISTANT_ARCH:  # it reads the target's hidden state: the width must fit too
        fit = misfit(target, drafter)
        if fit is not None:
            return [fit]
    why = incompatibilities(_facts_only(t_info), _facts_only(d_info))
    if why:
        return why
    t, d = _token_digests(target), _token_digests(drafter)
    shorter = min(t.n_vocab, d.n_vocab)
    if shorter <= CHECK_START_TOKEN_ID:  # no token text is compared
        return []
    digest = t.upto(shorter)
    if digest is not None and digest == d.upto(shorter):
        return []
    return _text_differs(target, drafter)


def size_warning(target: ModelRecord, drafter: ModelRecord) -> str | None:
    """A drafter close to the target's size cannot pay off: every drafted token costs nearly a target token."""
    if target.n_params <= 0:
        return None
    share = drafter.n_params / target.n_params
    if share >= 1:
        return (f"{drafter.name} is not smaller than the target ({_params(drafter.n_params)} vs "
                f"{_params(target.n_params)}): drafting with it is slower than plain decoding")
    if share > MAX_USEFUL_DRAFTER_SHARE:
        return (f"{drafter.name} has {share:.0%} of the target's parameters ({_params(drafter.n_params)} vs "
                f"{_params(target.n_params)}): too close in size to pay off; pick a smaller drafter")
    return None


def _params(n: int) -> str:
    return f"{n / 1e9:.1f}B" if n >= 1e9 else f"{n / 1e6:.0f}M" if n >= 1e6 else f"{n / 1e3:.0f}K"


def _same_file(a: Path, b: Path) -> bool:
    try:
        return os.path.samefile(a, b)
    except OSError:
        return False


def pair_options(target: Path, candidates: list[ModelRecord] | None = None) -> list[PairOption]:
    """Every candidate drafter for `target`: compatible ones first, smallest first; why the others don't fit."""
    target = Path(target).expanduser()
    t_rec = verify(target)
    if candidates is None:
        candidates = list_models()
    options = []
    for cand in candidates:
        if _same_file(cand.path, target):
            continue
        try:
            reasons = pair_reasons(target, cand.path)
        except ModelFileError as exc:
            reasons = [str(exc)]
        warning = size_warning(t_rec, cand) if not reasons else None
        options.append(PairOption(drafter=cand, compatible=not reasons, reasons=reasons, warning=warning))
    options.sort(key=lambda o: (not o.compatible, o.drafter.n_params, o.drafter.path.name))
    return options
