"""The llama.cpp side of drafters that ride the target: a Gemma 4 assistant (architecture `gemma4-assistant`).

The assistant has no KV cache of its own: its context is made with `ctx_other` = the target's context, and
its layers attend to the target's keys and values (its sliding layers the target's last sliding layer, its
full layers the last full one). Its input is a token and the target's hidden state before that token (the
"nextn" embeddings, post final norm), and it returns logits and a hidden state of its own for the next
step. So it never reads the conversation: no catch-up, a step costs a few small layers. The driver follows
llama.cpp's common/speculative.cpp (`common_speculative_impl_draft_mtp`, shared-memory mode): every draft
step of a round sits at the same position, the position of the target's last token.

The nextn calls live in llama.cpp's staging header (llama-ext.h), bound by llama-cpp-python's
`llama_cpp_ext` as C++ symbols; a build without them cannot draft this way (`unavailable()` says why).
"""
from __future__ import annotations

import ctypes
import time
from pathlib import Path

import llama_cpp as lc
import numpy as np

from engine.errors import EngineError, ModelLoadError
from engine.gguf_check import validate_gguf
from engine.llama.backend import LlamaModel, ensure_backend, last_log_error
from engine.llama.types import LoadSettings, Logits

ASSISTANT_ARCH = "gemma4-assistant"


def _ext():
    """llama_cpp_ext, or the reason it cannot be had (its import resolves every symbol, raising if one is missing)."""
    try:
        from llama_cpp import llama_cpp_ext
    except (ImportError, AttributeError, OSError) as exc:
        return None, f"this build of llama-cpp-python lacks llama.cpp's nextn calls ({exc})"
    return llama_cpp_ext, None


def unavailable() -> str | None:
    """Why this build cannot run a drafter that rides the target; None when it can."""
    ext, why = _ext()
    if ext is None:
        return why
    needed = ("llama_batch_ext_init", "llama_batch_ext_set_embd_token", "llama_process")
    missing = [n for n in needed if not hasattr(lc, n)]
    return f"this build of llama-cpp-python lacks {', '.join(missing)}" if missing else None


class Assistant:
    """A Gemma 4 assistant loaded beside, and bound to, a loaded target (which must outlive it)."""

    def __init__(self, path: str | Path, target: LlamaModel, settings: LoadSettings = LoadSettings()) -> None:
        self.path = Path(path)
        self.info = validate_gguf(self.path, read_tokens=False)
        why = unavailable()
        if why is not None:
            raise ModelLoadError(f"{self.path.name} cannot draft here: {why}")
        if self.info.architecture != ASSISTANT_ARCH:
            raise ModelLoadError(f"{self.path.name} is not a Gemma 4 assistant ({self.info.architecture})")
        self.ext, _ = _ext()
        self.target = target
        ensure_backend()
        mparams = lc.llama_model_default_params()
        mparams.n_gpu_layers = settings.n_gpu_layers
        mparams.use_extra_bufts = target.extra_buffers
        self._model = lc.llama_model_load_from_file(str(self.path).encode(), mparams)
        if not self._model:
            raise ModelLoadError(f"llama.cpp could not load {self.path.name}: {last_log_error() or 'unknown reason'}")
        self._ctx = None
        self._batch = None
        try:
            self._bind(settings)
        except BaseException:
            self.close()
            raise

    def _bind(self, settings: LoadSettings) -> None:
        t = self.target
        self.n_embd = int(lc.llama_model_n_embd_out(self._model))
        width = int(lc.llama_model_n_embd(t._model))
        if self.n_embd != width:
            raise ModelLoadError(f"{self.path.name} reads hidden states {self.n_embd} wide; {t.path.name}'s are {width}: "
                                 "it is another model's assistant")
        self.n_vocab = int(lc.llama_vocab_n_tokens(lc.llama_model_get_vocab(self._model)))
        cparams = lc.llama_context_default_params()
        cparams.n_ctx = t.n_ctx  # as the target's: its positions are the target's
        cparams.n_batch = cparams.n_ubatch = 8  # one token a step
        cparams.n_seq_max = 1
        cparams.n_threads = settings.n_threads or t.n_threads
        cparams.n_threads_batch = settings.n_threads_batch or t.n_threads_batch
        cparams.no_perf = True
        cparams.swa_full = True  # as the target's cache, whose layout it shares
        cparams.flash_attn_type = {None: lc.LLAMA_FLASH_ATTN_TYPE_AUTO, True: lc.LLAMA_FLASH_ATTN_TYPE_ENABLED,
                                   False: lc.LLAMA_FLASH_ATTN_TYPE_DISABLED}[t.flash_attn]
        cparams.ctx_type = lc.LLAMA_CONTEXT_TYPE_MTP
        cparams.ctx_other = t._ctx
        self._ctx = lc.llama_init_from_model(self._model, cparams)
        if not self._ctx:
            raise ModelLoadError(f"llama.cpp could not pair {self.path.name} with {t.path.name}: "
                                 f"{last_log_error() or 'unknown reason'}")
        if self.ext.llama_get_ctx_other(self._ctx) != t._ctx:
            raise ModelLoadError(f"{self.path.name} does not share {t.path.name}'s cache in this build")
        self.ext.llama_set_embeddings_nextn(t._ctx, True, False)  # every row of the target's passes
        self.ext.llama_set_embeddings_nextn(self._ctx, True, True)  # the assistant's output row
        self._mem = lc.llama_get_memory(self._ctx)
        self._batch = lc.llama_batch_ext_init(self._ctx)
        self._pos = (lc.llama_pos * 1)()
        self._h = np.zeros(self.n_embd, dtype=np.float32)  # the state a step reads, owned here
        self._embd = lc.llama_embd(self._h.ctypes.data_as(ctypes.POINTER(ctypes.c_float)), 1, self.n_embd)
        self.passes = 0
        self.decode_s = 0.0  # seconds inside llama_process, as LlamaModel.decode_s
        self.last_share = 1.0
        """Of the CPU time the last step's threads could have had, the share they got (as LlamaModel's)."""

    @property
    def size(self) -> int:
        return self.info.size

    def target_state(self, pos: int) -> bool:
        """Load the target's hidden state at `pos` as the next step's input; False where the target's last
        pass did not compute that position, or its cache no longer holds it (a plain round computes it)."""
        t = self.target
        first, n = t.last_block
        if not (first <= pos < first + n and pos < len(t.kv)):
            return False
        row = self.ext.llama_get_embeddings_nextn_ith(t._ctx, pos - first)
        if not row:
            return False
        self._h[:] = np.ctypeslib.as_array(row, shape=(self.n_embd,))
        return True

    def reread_target(self, pos: int) -> bool:
        """The target reads its cache's last token (at `pos`) again, so its hidden state there is at hand: one
        single-token pass, where a cache reused whole left none (a reply to a prompt it held). False where `pos`
        is not its last token."""
        t = self.target
        if pos < 0 or len(t.kv) != pos + 1:
            return False
        token = t.kv[pos]
        t.truncate(pos)
        t.decode([token], Logits.NONE)
        return self.target_state(pos)

    def step(self, token: int, pos: int) -> np.ndarray:
        """One pass: `token` at `pos` with the loaded state; returns its logits (a view valid until the next
        step) and loads its own hidden state for the step after."""
        lc.llama_batch_ext_clear(self._batch)
        idx = lc.llama_batch_ext_add_token(self._batch, 0, token)
        self._pos[0] = pos
        if idx < 0 or not (lc.llama_batch_ext_set_pos(self._batch, idx, self._pos)
                           and lc.llama_batch_ext_set_embd_token(self._batch, idx, self._embd)
                           and lc.llama_batch_ext_set_output_logits(self._batch, idx, True)):
            raise EngineError(f"{self.path.name}: llama.cpp refused a draft step at position {pos}")
        c0, t0 = time.process_time(), time.perf_counter()
        rc = lc.llama_process(self._ctx, lc.LLAMA_PROCESS_TYPE_DECODE, self._batch)
        wall, cpu = time.perf_counter() - t0, time.process_time() - c0
        self.passes += 1
        self.decode_s += wall
        threads = max(1, self.target.n_threads)
        self.last_share = min(1.0, cpu / (wall * threads)) if wall > 0 and self.target.cpu_bound else 1.0
        if rc != 0:
            raise EngineError(f"{self.path.name}'s draft step failed with code {rc}: {last_log_error()}")
        logits = lc.llama_get_logits_ith(self._ctx, idx)
        h = self.ext.llama_get_embeddings_nextn_ith(self._ctx, idx)
        if not logits or not h:
            raise EngineError(f"{self.path.name} returned no output for its draft step")
        self._h[:] = np.ctypeslib.as_array(h, shape=(self.n_embd,))
        return np.ctypeslib.as_array(logits, shape=(self.n_vocab,))

    def forget_from(self, pos: int) -> None:
        """Drop whatever the steps left at `pos` and after (the target verifies there next)."""
        if self._ctx:
            lc.llama_memory_seq_rm(self._mem, 0, pos, -1)

    def close(self) -> None:
        if getattr(self, "_batch", None):
            lc.llama_batch_ext_free(self._batch)
            self._batch = None
        if getattr(self, "_ctx", None):
            if self.target._ctx:  # the target goes on alone: its passes stop writing hidden states
                self.ext.llama_set_embeddings_nextn(self.target._ctx, False, False)
            lc.llama_free(self._ctx)
            self._ctx = None
        if getattr(self, "_model", None):
            lc.llama_model_free(self._model)
            self._model = None

    def __del__(self) -> None:  # pragma: no cover - best effort at interpreter exit
        try:
            self.close()
        except Exception:
            pass
