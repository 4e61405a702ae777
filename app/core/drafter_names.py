"""A drafter as people read it, which is also how each reply's row records it ('none', 'prompt lookup',
'prompt lookup + NAME.gguf' or 'NAME.gguf'), and those words read back as a DraftSpec (no Qt)."""
from __future__ import annotations

from pathlib import Path

from engine.drafting.draft_choice import DraftSpec

NONE_LABEL = "none"
LOOKUP_LABEL = "prompt lookup"
_WITH_LOOKUP = LOOKUP_LABEL + " + "


def drafter_label(drafter: DraftSpec | str) -> str:
    """A drafter choice as people read it (and as replies record it); the model by its file name."""
    spec = DraftSpec.parse(drafter)
    if spec.model is None:
        return LOOKUP_LABEL if spec.lookup else NONE_LABEL
    return f"{_WITH_LOOKUP}{spec.model.name}" if spec.lookup else spec.model.name


def recorded_drafter(label: str) -> DraftSpec:
    """The drafter a reply's recorded label names, its model by file name only ('' or 'none': none;
    words this version did not write read as a model's name)."""
    if not label or label == NONE_LABEL:
        return DraftSpec.NONE
    if label == LOOKUP_LABEL:
        return DraftSpec.LOOKUP
    if label.startswith(_WITH_LOOKUP):
        return DraftSpec.with_lookup(label[len(_WITH_LOOKUP):])
    return DraftSpec(model=Path(label))
