"""What a request chooses about drafting: which drafter (DraftSpec) and how long its drafts (DraftLength).

Both are values parsed where text enters (a settings file, a command line, a widget) and written back
as the same text, so settings files and flags of earlier versions still read; past that edge nothing
compares text. No llama.cpp here: the app reads and writes these without loading a model.
"""
from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import ClassVar

AUTO_TEXT = "auto"
LOOKUP = "lookup"
NONE = "none"
_WITH_LOOKUP = LOOKUP + "+"


class DraftKind(StrEnum):
    """Who proposed a draft."""

    NONE = "none"
    MODEL = "model"
    LOOKUP = "lookup"
    HISTORY = "history"  # prompt lookup in past conversations (engine.drafting.history_index)
    MTP = "mtp"  # a drafter that rides the target: a Gemma 4 assistant (engine.drafting.mtp)

    @property
    def runs_model(self) -> bool:
        """Each drafted token costs a forward pass of a model (priced by the cost model; lookups are free)."""
        return self in (DraftKind.MODEL, DraftKind.MTP)


@dataclass(frozen=True, slots=True)
class DraftLength:
    """How many tokens a round may draft: a fixed k (0 = plain decoding), or Auto (measured costs decide)."""

    k: int | None = None
    """The fixed length; None for Auto."""

    AUTO: ClassVar[DraftLength]
    """Let the policy choose each round's length (engine.drafting.policy.AutoK)."""

    def __post_init__(self) -> None:
        if self.k is not None and (isinstance(self.k, bool) or not isinstance(self.k, int) or self.k < 0):
            raise _not_a_length(self.k)

    @classmethod
    def fixed(cls, k: int) -> DraftLength:
        """Exactly k tokens a round (capped by what fits); 0 is plain decoding."""
        return cls(k)

    @classmethod
    def parse(cls, value: DraftLength | int | str) -> DraftLength:
        """'auto', a whole number (or its digits, from a command line), or a DraftLength; ValueError otherwise."""
        if isinstance(value, DraftLength):
            return value
        if value == AUTO_TEXT:
            return cls.AUTO
        if isinstance(value, str):
            try:
                value = int(value)
            except ValueError:
                raise _not_a_length(value) from None
        if isinstance(value, bool) or not isinstance(value, int):  # None would read as Auto
            raise _not_a_length(value)
        return cls(value)

    @property
    def is_auto(self) -> bool:
        return self.k is None

    def to_json(self) -> int | str:
        """As settings files and command lines write it: 'auto' or the number."""
        return AUTO_TEXT if self.k is None else self.k

    def __str__(self) -> str:
        return str(self.to_json())

    @property
    def label(self) -> str:
        """As people read it: 'Auto' or 'k=4'."""
        return "Auto" if self.k is None else f"k={self.k}"


DraftLength.AUTO = DraftLength()


def _not_a_length(value: object) -> ValueError:
    return ValueError(f"a draft length is a whole number of tokens from 0, or {AUTO_TEXT!r}; not {value!r}")


@dataclass(frozen=True, slots=True)
class DraftSpec:
    """Which drafter: a GGUF model, prompt lookup, both (lookup first), or none."""

    model: Path | None = None
    """The drafter model's file, if a model drafts."""
    lookup: bool = False
    """Prompt lookup drafts (first, when a model drafts too)."""

    NONE: ClassVar[DraftSpec]
    """No drafter: plain decoding."""
    LOOKUP: ClassVar[DraftSpec]
    """Prompt lookup alone."""

    @staticmethod
    def parse(text: str | Path | DraftSpec | None) -> DraftSpec:
        """'none', 'lookup', 'PATH.gguf' or 'lookup+PATH.gguf' (empty or None: none)."""
        if isinstance(text, DraftSpec):
            return text
        text = str(text) if text is not None else ""
        if not text or text == NONE:
            return DraftSpec()
        if text == LOOKUP:
            return DraftSpec(lookup=True)
        if text.startswith(_WITH_LOOKUP):
            model = text[len(_WITH_LOOKUP):]
            return DraftSpec(model=Path(model) if model else None, lookup=True)
        return DraftSpec(model=Path(text))

    @staticmethod
    def with_lookup(model: str | Path) -> DraftSpec:
        """Prompt lookup first, then the model drafter."""
        return DraftSpec(model=Path(model), lookup=True)

    @property
    def drafts(self) -> bool:
        """Anything drafts at all (not plain decoding)."""
        return self.model is not None or self.lookup

    @property
    def text(self) -> str:
        """As settings files and command lines write it; `parse` reads it back."""
        if self.model is not None:
            return f"{_WITH_LOOKUP}{self.model}" if self.lookup else str(self.model)
        return LOOKUP if self.lookup else NONE

    def __str__(self) -> str:
        return self.text

    @property
    def label(self) -> str:
        """Short, with the model's file name only: 'lookup+NAME.gguf', 'NAME.gguf', 'lookup' or 'none'."""
        if self.model and self.lookup:
            return f"lookup+{self.model.name}"
        return self.model.name if self.model else (LOOKUP if self.lookup else NONE)


DraftSpec.NONE = DraftSpec()
DraftSpec.LOOKUP = DraftSpec(lookup=True)
