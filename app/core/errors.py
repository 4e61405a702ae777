"""Turn what went wrong into a message a person can act on: what happened, and what to do."""
from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from engine.errors import (AttachmentError, ContextFullError, EngineError, IncompatiblePairError, LoadCancelled,
                           ModelFileError, ModelLoadError)
from engine.models.default_pair import DefaultPairMissing


class Action(StrEnum):
    """The button a notice offers."""

    NONE = "none"
    OPEN_MODELS = "open_models"
    NEW_CHAT = "new_chat"
    SETTINGS = "settings"


class Level(StrEnum):
    """How loud a notice is."""

    INFO = "info"
    WARNING = "warning"
    ERROR = "error"


@dataclass(frozen=True, slots=True)
class Notice:
    """A message for the notice bar above the chat."""

    text: str
    """What happened and what to do, in plain words."""
    level: Level = Level.ERROR
    """Colour of the bar."""
    action: Action = Action.NONE
    """The button offered next to it."""


class AttachmentTooLarge(ContextFullError):
    """A question's attached files do not fit the context: the message names the largest, with its token count."""


_OOM_HINTS = ("out of memory", "failed to allocate", "cannot allocate", "unable to allocate", "oom", "cudamalloc")


def is_out_of_memory(text: str) -> bool:
    low = text.lower()
    return any(h in low for h in _OOM_HINTS)


def explain(exc: BaseException) -> Notice:
    """A notice for an exception raised by the engine (or by the system underneath it)."""
    msg = str(exc).strip() or type(exc).__name__
    if isinstance(exc, DefaultPairMissing):  # the window never asks for a command line
        return Notice(
            "The default pair's model packages are not part of this installation. Download the pair instead "
            "(Models… › Get models), or import GGUF files you already have.",
            Level.WARNING,
            Action.OPEN_MODELS,
        )
    if isinstance(exc, ModelFileError):
        return Notice(
            f"The model file cannot be used: {msg}. Download it again or import another file in Models….",
            action=Action.OPEN_MODELS,
        )
    if isinstance(exc, IncompatiblePairError):
        return Notice(
            f"These two models cannot work as a pair: {msg}. Pick a drafter from the list (it shows only "
            "compatible ones), or use “prompt lookup”.",
            action=Action.OPEN_MODELS,
        )
    if isinstance(exc, AttachmentTooLarge):
        return Notice(f"{msg} Nothing was sent: remove the file (✕) or attach the part you need, or raise the context "
                      "length in Models… › Hardware.", Level.WARNING)
    if isinstance(exc, AttachmentError):
        return Notice(f"{msg[:1].upper()}{msg[1:]}.", Level.WARNING)
    if isinstance(exc, ContextFullError):
        return Notice(
            f"The conversation does not fit the model's context: {msg} Start a new chat, shorten the "
            "message, or raise the context length in Models… › Hardware.",
            action=Action.NEW_CHAT,
        )
    if isinstance(exc, MemoryError) or is_out_of_memory(msg):
        return Notice(
            f"Not enough memory: {msg}. Choose a smaller model or quantization, lower the context length, "
            "or offload fewer layers to the GPU (Models… › Hardware).",
            action=Action.OPEN_MODELS,
        )
    if isinstance(exc, ModelLoadError):
        return Notice(
            f"llama.cpp could not load the model: {msg}. The file may use an architecture this build does "
            "not support, or need more memory; try another model in Models….",
            action=Action.OPEN_MODELS,
        )
    if isinstance(exc, LoadCancelled):  # asked for: not an error
        return Notice(f"{msg[:1].upper()}{msg[1:]}.", Level.INFO)
    if isinstance(exc, EngineError):
        return Notice(f"{msg[:1].upper()}{msg[1:]}.".replace("..", "."))
    return Notice(f"Something went wrong in the engine: {type(exc).__name__}: {msg}")


CONTEXT_FULL_NOTICE = Notice(
    "The reply stopped because the context is full. Start a new chat, or raise the context length in "
    "Models… › Hardware.",
    Level.WARNING,
    Action.NEW_CHAT,
)
