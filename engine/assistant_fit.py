"""Whether a drafter file rides the target (a Gemma 4 assistant) and whether it fits a target: read from the
files' metadata (engine.gguf_check), no llama.cpp, so the window can say so before anything loads."""
from __future__ import annotations

from pathlib import Path

from engine.errors import EngineError
from engine.gguf_check import GGUFInfo, validate_gguf

ASSISTANT_ARCH = "gemma4-assistant"
#: The architectures a Gemma 4 assistant reads the hidden state and KV cache of.
TARGET_ARCHS = ("gemma4",)
#: What the window calls such a drafter.
LABEL = "Gemma 4 assistant"


def _info(path: str | Path) -> GGUFInfo | None:
    try:
        return validate_gguf(Path(path), read_tokens=False)
    except (EngineError, OSError):
        return None


def is_assistant(path: str | Path) -> bool:
    """The file is a Gemma 4 assistant (a damaged or missing file is not)."""
    info = _info(path)
    return info is not None and info.architecture == ASSISTANT_ARCH


def _int(meta, key: str) -> int | None:
    value = meta.get(key)
    return int(value) if isinstance(value, int) and not isinstance(value, bool) else None


def misfit(target: str | Path, assistant: str | Path) -> str | None:
    """Why the assistant cannot draft for the target, in a sentence; None where it fits."""
    t, a = _info(target), _info(assistant)
    if t is None or a is None:
        return f"{Path(target if t is None else assistant).name} is not a readable GGUF file"
    if a.architecture != ASSISTANT_ARCH:
        return f"{a.path.name} is not a Gemma 4 assistant ({a.architecture})"
    if t.architecture not in TARGET_ARCHS:
        return f"a Gemma 4 assistant drafts for a Gemma 4 target; {t.path.name} is {t.architecture}"
    wants = _int(a.metadata, f"{ASSISTANT_ARCH}.embedding_length_out")
    width = _int(t.metadata, f"{t.architecture}.embedding_length")
    if wants is None or width is None or wants != width:
        return (f"{a.path.name} reads a target {wants} wide; {t.path.name} is {width} wide: "
                "it is another Gemma 4's assistant")
    return None


def target_heads(path: str | Path) -> int | None:
    """Layers of MTP (nextn) heads inside a target file (a model with its own heads), 0 for none."""
    info = _info(path)
    return None if info is None else _int(info.metadata, f"{info.architecture}.nextn_predict_layers") or 0


def own_heads(target: str | Path, drafter: str | Path) -> str | None:
    """Why a target named as its own drafter, a model with MTP (nextn) heads inside, drafts nothing here; None
    where that is not the case. Checked before anything loads: the file would otherwise load a second time."""
    try:
        same = Path(target).resolve() == Path(drafter).resolve()
    except OSError:
        return None
    heads = target_heads(target) if same else 0
    if not heads:
        return None
    return (f"{Path(target).name} carries its own MTP heads ({heads} nextn layer{'s' if heads > 1 else ''}); "
            "drafting with them is not supported yet: plain decoding")
