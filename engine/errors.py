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


class LoadCancelled(EngineError):
    """A model load was cancelled before it finished: nothing of it stays loaded."""


class Interrupted(EngineError):
    """A stop request ended a model's pass part-way; its cache is as it was before the pass."""
