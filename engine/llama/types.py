"""What the backend is told and tells: load settings, which logits rows, a stop llama.cpp sees, vocabulary facts."""
from __future__ import annotations

import ctypes
import threading
from dataclasses import dataclass
from enum import StrEnum


class Logits(StrEnum):
    """Which rows of logits a decode hands back."""

    LAST = "last"
    """One row, for the last token: what comes next."""
    ALL = "all"
    """A row per token (all must fit one batch): the verify pass scores a whole draft."""
    NONE = "none"
    """No row: the tokens only fill the cache (prefill, catching a drafter up)."""
    TAIL = "tail"
    """A row for each of the last `tail` tokens (all in the last batch): a drafter's look reads its
    backlog and scores the reply's last tokens in one pass, not two (a pass of the 0.5B drafter costs
    about 15 ms before its first token here)."""


class StopRequest(threading.Event):
    """A stop request that llama.cpp sees too: inside a pass, between its graph's nodes.

    A pass of a large model on a busy CPU can take seconds; a stop seen only between passes waits for
    it. `set()` also writes a byte that the abort callback of a model watching this request
    (LlamaModel.watch) reads, and llama.cpp then ends the pass part-way (LlamaModel.decode raises
    Interrupted). The callback is C code, libc's strlen over a two-byte buffer ("x" when set, ""
    when not: a length of 1 or 0 reads as the bool llama.cpp expects), so the compute threads read
    the flag without Python: a Python callback runs for every node, hundreds of times a pass, and
    waits for the GIL whenever the window is busy."""

    def __init__(self) -> None:
        super().__init__()
        self.flag = ctypes.create_string_buffer(2)

    def set(self) -> None:
        self.flag[0] = b"x"
        super().set()

    def clear(self) -> None:
        self.flag[0] = b"\0"
        super().clear()


@dataclass(frozen=True, slots=True)
class VocabFacts:
    """What llama.cpp's draft-compatibility rules compare."""

    vocab_type: str
    n_vocab: int
    add_bos: bool
    add_eos: bool
    bos: int
    eos: int


@dataclass(frozen=True, slots=True)
class LoadSettings:
    """How a model is loaded."""

    n_ctx: int = 4096
    """Context length in tokens (0 = the model's trained length)."""
    n_gpu_layers: int = -1
    """Layers to offload to a GPU (-1 = all; ignored by a CPU-only build)."""
    n_threads: int | None = None
    """CPU threads for generating tokens (None = physical cores, as llama.cpp chooses: engine.llama.threads)."""
    n_threads_batch: int | None = None
    """CPU threads for batches: prompts and verification blocks (None = every CPU the process may use)."""
    n_batch: int = 512
    """Largest batch handed to one llama_decode."""
    extra_buffers: bool | None = None
    """CPU weight repacking (AMX, AVX repack). None = on, except on CPUs with AMX, where
    ggml's AMX kernels segfault on Q4_K weights (ggml-org/llama.cpp#20824)."""
    flash_attn: bool | None = None
    """llama.cpp's flash attention: on, off, or None = as llama.cpp chooses ("auto": on where the device
    runs it, the CPU included). The engine loads a drafter without it on a CPU (Session)."""
    cpu_drafter: bool | None = None
    """Draft with a copy of the drafter made for this CPU (engine.llama.cpu_weights). None = where it
    helps: an x86-64 CPU with AVX2, nothing offloaded to a GPU, a drafter of 64 MB or more."""
