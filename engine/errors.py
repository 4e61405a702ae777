"""Errors the engine raises on purpose: each carries a message a person can act on."""


class EngineError(Exception):
    """Something went wrong that the user should hear about in one clear line."""


class ModelFileError(EngineError):
    """A model file is missing, not a GGUF, or damaged: llama.cpp is never given it."""


class ModelLoadError(EngineError):
    """llama.cpp refused to load a file that looked valid (unsupported architecture, out of memory)."""


class IncompatiblePairError(EngineError):
    """Target and drafter cannot be paired: their vocabularies differ."""


class ContextFullError(EngineError):
    """The prompt, or the conversation, does not fit in the context window."""

    def __init__(self, message: str, needed: int | None = None, holds: int | None = None) -> None:
        super().__init__(message)
        self.needed = needed
        """Tokens the request needs, when known."""
        self.holds = holds
        """Tokens the context holds, when known."""


class LoadCancelled(EngineError):
    """A model load was cancelled before it finished: nothing of it stays loaded."""


class AttachmentError(EngineError):
    """A file cannot be given to the model (an image, binary data, a damaged or protected PDF, too large...)."""


class Interrupted(EngineError):
    """A stop request ended a model's pass part-way; its cache is as it was before the pass."""
