"""What llama.cpp's hyperparameter loader (llama-model.cpp, `llama_model::load_hparams`) asserts on,
checked before it sees the file: a GGML_ASSERT there aborts the whole process (found by the header
fuzz test: `block_count` 513, one byte changed, passed verify and aborted llama.cpp).

Only the checks every architecture goes through are here; a value llama.cpp merely refuses (it
throws, and the load fails with a message) needs nothing.
"""
from __future__ import annotations

from typing import Any

from engine.errors import ModelFileError

#: llama-hparams.h
LLAMA_MAX_LAYERS = 512
LLAMA_MAX_EXPERTS = 1024
#: llama_rope_scaling_type_from_string: anything else is "unspecified", which llama.cpp asserts against.
ROPE_SCALING_TYPES = ("none", "linear", "yarn", "longrope")


def _count(meta: dict[str, Any], key: str, default: int | None = 0) -> int | None:
    value = meta.get(key, default)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        return -1  # a list (per-layer array) or text where a count belongs: judged by the callers below
    return value


def check_hparams(name: str, meta: dict[str, Any]) -> None:
    """Raise ModelFileError where llama.cpp would abort on the model's hyperparameters."""
    arch = str(meta.get("general.architecture"))

    def bad(what: str) -> ModelFileError:
        return ModelFileError(f"{name} is damaged: {what} (llama.cpp would abort on it)")

    layers = _count(meta, f"{arch}.block_count", None)
    if layers is not None and not 0 < layers <= LLAMA_MAX_LAYERS:
        raise bad(f"{arch}.block_count is {meta[f'{arch}.block_count']!r}, not 1 to {LLAMA_MAX_LAYERS}")
    nextn = _count(meta, f"{arch}.nextn_predict_layers")
    if nextn is not None and not 0 <= nextn <= (layers or 0):
        raise bad(f"{arch}.nextn_predict_layers is {nextn}, more than its {layers} layers")
    experts = _count(meta, f"{arch}.expert_count")
    if experts is not None and not 0 <= experts <= LLAMA_MAX_EXPERTS:
        raise bad(f"{arch}.expert_count is {meta[f'{arch}.expert_count']!r}, not 0 to {LLAMA_MAX_EXPERTS}")
    used = meta.get(f"{arch}.expert_used_count", 0)
    used_max = max(used) if isinstance(used, list) and used and all(isinstance(u, int) for u in used) else used
    if isinstance(used_max, int) and not isinstance(used_max, bool):
        if used_max > (experts or 0) or (experts and used_max <= 0):
            raise bad(f"{arch}.expert_used_count is {used_max} with {experts} experts")
    groups = _count(meta, f"{arch}.expert_group_count")
    if groups:
        group_used = _count(meta, f"{arch}.expert_group_used_count")
        if not experts or groups < 0 or groups >= experts or experts % groups or not 0 < (group_used or 0) < groups:
            raise bad(f"{arch}.expert_group_count {groups} (using {group_used}) does not divide {experts} experts")
    scaling = meta.get(f"{arch}.rope.scaling.type")
    if scaling is not None and scaling not in ROPE_SCALING_TYPES:
        raise bad(f"{arch}.rope.scaling.type is {scaling!r}, not one of {', '.join(ROPE_SCALING_TYPES)}")
