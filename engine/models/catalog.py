"""The catalog of recommended target + drafter pairs (data in resources/catalog.json, not code).

Each entry names the Hugging Face repository and file of both models, what it costs to run, and
the licence. SHA-256 and exact sizes appear only where they are known; a download checks them
when present and otherwise checks the SHA-256 the hub publishes for the file.
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from engine import paths
from engine.errors import EngineError

CATALOG_FILE = "catalog.json"
_SHA256 = re.compile(r"[0-9a-f]{64}")


class CatalogError(EngineError):
    """The catalog file is missing, not JSON, or an entry lacks a field."""


@dataclass(frozen=True, slots=True)
class CatalogFile:
    """One GGUF file on the Hugging Face hub."""

    repo_id: str
    """Repository, e.g. "Qwen/Qwen2.5-Coder-1.5B-Instruct-GGUF"."""
    filename: str
    """File name inside the repository; also its name in the model folder."""
    size_bytes: int | None
    """Exact size, when known; checked after download."""
    sha256: str | None
    """Exact SHA-256 (lower-case hex), when known; checked after download."""
    approx_bytes: int | None = None
    """The size shown on the hub's file list, for display only (never checked)."""
    revision: str = "main"
    """Branch, tag or commit to download from."""

    @property
    def local_name(self) -> str:
        return Path(self.filename).name

    @property
    def display_bytes(self) -> int | None:
        return self.size_bytes if self.size_bytes is not None else self.approx_bytes


@dataclass(frozen=True, slots=True)
class CatalogPair:
    """A recommended target and the drafter that speeds it up."""

    id: str
    """Stable identifier, e.g. "qwen2.5-coder-1.5b" (used on the command line)."""
    title: str
    """What a person reads in a list."""
    target: CatalogFile
    """The large model whose output you get."""
    drafter: CatalogFile
    """The small model that proposes tokens."""
    license: str
    """Licence of the weights."""
    hardware: str
    """The machines it suits, in words."""
    notes: str
    """Anything else worth knowing before downloading."""
    min_memory_gb: float = 0.0
    """Free RAM (or VRAM) the pair needs at a 4k context, roughly."""

    @property
    def files(self) -> tuple[CatalogFile, CatalogFile]:
        return (self.target, self.drafter)

    @property
    def download_bytes(self) -> int:
        """Both files together, as the catalog gives them (what every "size of the pair" shows)."""
        return sum(f.display_bytes or 0 for f in self.files)


def _file(raw: Any, where: str) -> CatalogFile:
    if not isinstance(raw, dict):
        raise CatalogError(f"catalog: {where} must be an object")
    for key in ("repo_id", "filename"):
        if not isinstance(raw.get(key), str) or not raw[key].strip():
            raise CatalogError(f"catalog: {where} has no {key}")
    if raw["repo_id"].count("/") != 1:
        raise CatalogError(f"catalog: {where} repo_id {raw['repo_id']!r} is not of the form owner/name")
    if not raw["filename"].endswith(".gguf"):
        raise CatalogError(f"catalog: {where} file {raw['filename']!r} is not a .gguf file")
    size, sha, approx = raw.get("size_bytes"), raw.get("sha256"), raw.get("approx_bytes")
    for key, value in (("size_bytes", size), ("approx_bytes", approx)):
        if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value <= 0):
            raise CatalogError(f"catalog: {where} {key} must be a positive integer or null")
    if sha is not None and (not isinstance(sha, str) or not _SHA256.fullmatch(sha)):
        raise CatalogError(f"catalog: {where} sha256 must be 64 lower-case hex digits or null")
    revision = raw.get("revision", "main")
    if not isinstance(revision, str) or not revision:
        raise CatalogError(f"catalog: {where} revision must be a non-empty string")
    return CatalogFile(raw["repo_id"], raw["filename"], size, sha, approx, revision)


def _pair(raw: Any, index: int) -> CatalogPair:
    if not isinstance(raw, dict):
        raise CatalogError(f"catalog: entry {index} must be an object")
    pid = raw.get("id")
    if not isinstance(pid, str) or not re.fullmatch(r"[a-z0-9][a-z0-9._-]*", pid):
        raise CatalogError(f"catalog: entry {index} has no valid id (lower-case letters, digits, '.', '_', '-')")
    for key in ("title", "license", "hardware"):
        if not isinstance(raw.get(key), str) or not raw[key].strip():
            raise CatalogError(f"catalog: entry {pid!r} has no {key}")
    notes = raw.get("notes", "")
    if not isinstance(notes, str):
        raise CatalogError(f"catalog: entry {pid!r} notes must be text")
    mem = raw.get("min_memory_gb", 0)
    if not isinstance(mem, (int, float)) or isinstance(mem, bool) or mem < 0:
        raise CatalogError(f"catalog: entry {pid!r} min_memory_gb must be a non-negative number")
    return CatalogPair(
        id=pid,
        title=raw["title"],
        target=_file(raw.get("target"), f"entry {pid!r} target"),
        drafter=_file(raw.get("drafter"), f"entry {pid!r} drafter"),
        license=raw["license"],
        hardware=raw["hardware"],
        notes=notes,
        min_memory_gb=float(mem),
    )


def catalog_path() -> Path:
    return paths.resources_dir() / CATALOG_FILE


def _read(path: Path | None) -> dict[str, Any]:
    path = Path(path) if path is not None else catalog_path()
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise CatalogError(f"catalog not found: {path}") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise CatalogError(f"catalog {path.name} cannot be read: {exc}") from None
    if not isinstance(data, dict) or not isinstance(data.get("pairs"), list):
        raise CatalogError(f"catalog {path.name} has no list of pairs")
    return data


def load_catalog(path: Path | None = None) -> list[CatalogPair]:
    """Every pair in the catalog, in the file's order; CatalogError names the first bad entry."""
    pairs = [_pair(raw, i) for i, raw in enumerate(_read(path)["pairs"])]
    seen: set[str] = set()
    for p in pairs:
        if p.id in seen:
            raise CatalogError(f"catalog: id {p.id!r} appears twice")
        seen.add(p.id)
    # One file name is one file: two entries that share a name must agree on what it is.
    by_name: dict[str, CatalogFile] = {}
    for p in pairs:
        for f in p.files:
            other = by_name.setdefault(f.local_name, f)
            if (other.repo_id, other.sha256, other.size_bytes) != (f.repo_id, f.sha256, f.size_bytes):
                raise CatalogError(f"catalog: {f.local_name} is described two different ways")
    return pairs


def default_pair_id(path: Path | None = None) -> str:
    data = _read(path)
    pid = data.get("default_pair")
    if not isinstance(pid, str):
        raise CatalogError("catalog names no default_pair")
    return pid


def find_pair(pair_id: str, path: Path | None = None) -> CatalogPair:
    """The pair with this id; CatalogError listing the known ids when there is none."""
    pairs = load_catalog(path)
    for p in pairs:
        if p.id == pair_id:
            return p
    known = ", ".join(p.id for p in pairs)
    raise CatalogError(f"no pair {pair_id!r} in the catalog (known: {known})")
