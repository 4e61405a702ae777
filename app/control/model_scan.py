"""Which models are installed, and which of them can draft for a target (no Qt: runs off the GUI thread).

Uses engine.models.modelstore when it is there; otherwise reads the GGUF headers itself with the
engine's validator and llama.cpp's pairing rules (engine.drafting.compat), loading no weights.
"""
from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from engine import paths
from engine.assistant_fit import ASSISTANT_ARCH, misfit
from engine.llama import cpu_weights
from engine.drafting.compat import incompatibilities, vocab_of_file
from engine.errors import EngineError
from engine.gguf_check import validate_gguf

try:  # the models API (another part of the engine) may not be installed in this tree yet
    from engine.models import modelstore as _store
except ImportError:  # pragma: no cover - depends on the tree
    _store = None


@dataclass(frozen=True, slots=True)
class ModelEntry:
    """An installed GGUF model, as the pickers show it."""

    path: Path
    """The file."""
    name: str
    """Model name from its metadata (or the file name)."""
    architecture: str
    """e.g. 'qwen2', 'llama'."""
    n_params: int
    """Parameter count."""
    quantization: str
    """e.g. 'Q4_K_M'."""
    size_bytes: int
    """File size."""
    copy_of: Path | None = None
    """The model this is the fast copy for this CPU of (engine.llama.cpu_weights), or None."""
    copyable: bool = False
    """A fast copy for this CPU can be made of it (and is not made yet)."""

    @property
    def label(self) -> str:
        """'Qwen2.5 Coder 1.5B Instruct · Q4_K_M' (the parameter count too where the name has no size)."""
        name = shown_name(self.name)
        if not _SIZE.search(name):
            name = f"{name} · {human_params(self.n_params)}"
        return f"{name} · {self.quantization}" + (" · fast copy for this CPU" if self.copy_of else "")

    @property
    def short_label(self) -> str:
        """What tells models apart in a narrow picker: 'Qwen2.5 Coder 1.5B' (the size last, so eliding the
        middle keeps it)."""
        name = _tidy(_TUNING.sub(" ", shown_name(self.name)))
        name = name if _SIZE.search(name) else f"{name} {human_params(self.n_params)}"
        return f"fast {name}" if self.copy_of else name


@dataclass(frozen=True, slots=True)
class DrafterOption:
    """A model considered as drafter for a target."""

    model: ModelEntry
    """The candidate."""
    compatible: bool
    """llama.cpp's pairing rules pass."""
    reasons: tuple[str, ...]
    """Why not, when incompatible."""
    warning: str | None
    """A pairing that works but is unlikely to help (e.g. a drafter as big as the target)."""


#: Words in a model's general.name that describe a file format or a quantization, often another file's: the
#: 0.5B Qwen GGUF calls itself "Qwen2.5 Coder 0.5B Instruct AWQ" though it is a Q4_K_M GGUF. The file's own
#: quantization is shown beside the name, from its tensors.
_PACKAGING = re.compile(r"(?<![\w.])(GGUF|GGML|AWQ|GPTQ|EXL2|MLX|BNB|HQQ|QAT|INT[348]|FP8|FP16|FP32|BF16|F16|F32|"
                        r"I?Q\d(_[A-Z0-9]+)*|\d+-?bit)(?![\w.])", re.IGNORECASE)
_TUNING = re.compile(r"(?<![\w.])(Instruct|Chat|it)(?![\w.])", re.IGNORECASE)
_SIZE = re.compile(r"(?<![\w.])\d+(\.\d+)?[BM](?![\w.])", re.IGNORECASE)


def _tidy(name: str) -> str:
    name = re.sub(r"([ _-])[ _-]+", r"\1", name)  # what a removed word left between its neighbours
    return name.strip(" _-")


def shown_name(name: str) -> str:
    """A model's name without the format and quantization words its metadata may carry."""
    return _tidy(_PACKAGING.sub(" ", name)) or name


def human_params(n: int) -> str:
    if n >= 1e9:
        return f"{n / 1e9:.1f}B"
    if n >= 1e6:
        return f"{n / 1e6:.0f}M"
    return f"{n / 1e3:.0f}K" if n >= 1e3 else str(n)


def human_bytes(n: float | None) -> str:
    """Decimal units, as the hub and the engine's memory estimates give them ('1.6 GB' = 1.6e9 bytes)."""
    if n is None:
        return "?"
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if abs(n) < 1000 or unit == "TB":
            return f"{n:.0f} {unit}" if unit in ("B", "KB") else f"{n:.1f} {unit}"
        n /= 1000
    return f"{n:.1f} TB"


def _entry_of_record(r) -> ModelEntry:  # engine.models.modelstore.ModelRecord
    return ModelEntry(Path(r.path), r.name, r.architecture, int(r.n_params or 0), r.quantization, int(r.size_bytes or 0))


def _entry_of_file(path: Path) -> ModelEntry:
    info = validate_gguf(path, read_tokens=False)
    return ModelEntry(path, info.name, info.architecture, info.n_params, info.quantization, info.size)


def models_folder() -> Path:
    return Path(_store.models_folder()) if _store is not None and hasattr(_store, "models_folder") else paths.models_dir()


def entry_for(models: Iterable[ModelEntry], path: str | Path | None) -> ModelEntry | None:
    """The listed model at `path` (the settings name it as text), or None."""
    return next((m for m in models if path and str(m.path) == str(path)), None)


def list_models(extra: Iterable[Path | str] = ()) -> tuple[list[ModelEntry], list[str]]:
    """Installed models (the model folder, plus `extra` files chosen elsewhere), and problems in words."""
    found: dict[Path, ModelEntry] = {}
    problems: list[str] = []
    if _store is not None:
        try:
            records, bad = _store.scan()
        except (EngineError, OSError) as exc:
            records, bad = [], [(None, str(exc))]
        for r in records:
            found[Path(r.path).resolve()] = _entry_of_record(r)
        problems += [reason for _path, reason in bad]
    else:
        folder = paths.models_dir()
        for p in sorted(folder.glob("*.gguf")) if folder.is_dir() else []:
            try:
                found[p.resolve()] = _entry_of_file(p)
            except EngineError as exc:
                problems.append(str(exc))
    for p in extra:
        p = Path(p)
        if not str(p) or p.resolve() in found or not p.is_file():
            continue
        try:
            found[p.resolve()] = _entry_of_file(p)
        except EngineError as exc:
            problems.append(str(exc))
    # Largest first: the target picker starts with the likely target; a fast copy right after its model.
    return sorted(_with_fast_copies(found), key=lambda e: (-e.n_params, e.name, e.copy_of is not None)), problems


def _with_fast_copies(found: dict[Path, ModelEntry]) -> list[ModelEntry]:
    """Each model marked with whether a fast copy for this CPU can be made of it, and the copies made
    so far listed beside their models (they live with the other CPU copies, not in the model folder)."""
    out: dict[Path, ModelEntry] = {}
    for key, e in found.items():
        if (source := cpu_weights.source_of(e.path)) is not None:
            out[key] = replace(e, copy_of=source)
            continue
        try:
            copy = cpu_weights.ready(e.path, cpu_weights.Role.FAST_TARGET)
            offered = copy is None and cpu_weights.fast_copy_offered(e.path)
            if copy is not None and copy.resolve() not in out:
                out[copy.resolve()] = replace(_entry_of_file(copy), copy_of=e.path)
        except EngineError:
            offered = False  # a copy that no longer reads is made again when asked; the model is listed as it is
        out.setdefault(key, replace(e, copyable=offered))
    return list(out.values())


def drafter_options(target: Path, candidates: Sequence[ModelEntry]) -> list[DrafterOption]:
    """Every other model judged as drafter for `target`: compatible first, smallest first."""
    target = Path(target)
    # A fast copy drafts for nobody, and nothing drafts for it that it was copied from (the same model).
    others = [c for c in candidates if c.path.resolve() != target.resolve() and c.copy_of is None
              and c.path.resolve() != (cpu_weights.source_of(target) or target).resolve()]
    if not others:
        return []
    if _store is not None and hasattr(_store, "pair_options"):
        try:
            return _assistants_judged(target, _store_options(target, others))
        except EngineError:
            raise
        except Exception:  # noqa: BLE001 - the models API misbehaved: judge the pairs here instead
            pass
    return _assistants_judged(target, _local_options(target, others))


def _assistants_judged(target: Path, options: list[DrafterOption]) -> list[DrafterOption]:
    """A Gemma 4 assistant shares the vocabulary of every Gemma 4, but drafts only for the one whose width it
    reads (engine.assistant_fit), and only with a llama.cpp build that has the nextn calls."""
    if not any(o.model.architecture == ASSISTANT_ARCH for o in options):
        return options
    from engine.llama.mtp import unavailable  # off the GUI thread: it resolves llama.cpp's C++ symbols

    out = []
    for o in options:
        if o.model.architecture == ASSISTANT_ARCH:
            why = misfit(target, o.model.path) or unavailable()
            o = replace(o, compatible=why is None, reasons=(why,) if why else (), warning=None)
        out.append(o)
    return sorted(out, key=lambda o: (not o.compatible, o.model.n_params))


def _store_options(target: Path, others: Sequence[ModelEntry]) -> list[DrafterOption]:
    by_path = {c.path.resolve(): c for c in others}
    records = []
    for c in others:
        try:
            records.append(_store.verify(c.path))
        except EngineError:
            continue  # vanished or damaged since the listing: not offered
    out = []
    for o in _store.pair_options(target, records):
        entry = by_path.get(Path(o.drafter.path).resolve()) or _entry_of_record(o.drafter)
        out.append(DrafterOption(entry, bool(o.compatible), tuple(o.reasons), o.warning))
    return out


def _local_options(target: Path, others: Sequence[ModelEntry]) -> list[DrafterOption]:
    tinfo = validate_gguf(target, read_tokens=True)
    tvocab = vocab_of_file(tinfo)
    out = []
    for c in others:
        try:
            why = incompatibilities(tvocab, vocab_of_file(validate_gguf(c.path, read_tokens=True)))
        except EngineError as exc:
            why = [str(exc)]
        warning = None
        if not why and c.n_params >= tinfo.n_params:
            warning = "it is not smaller than the target, so it cannot make it faster"
        out.append(DrafterOption(c, not why, tuple(why), warning))
    return sorted(out, key=lambda o: (not o.compatible, o.model.n_params))
