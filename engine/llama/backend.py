"""The only module that imports llama_cpp: tokenize, decode a batch, logits rows, trim KV, vocab facts.

Every model file is validated (engine.gguf_check) before llama.cpp is allowed to open it:
llama.cpp trusts the file and a damaged one can crash the process.
"""
from __future__ import annotations

import ctypes
import functools
import os
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import llama_cpp as lc
import numpy as np

from engine.errors import (
    ContextFullError,
    EngineError,
    Interrupted,
    LoadCancelled,
    ModelLoadError,
)
from engine.gguf_check import GGUFInfo, validate_gguf
from engine.llama.thread_governor import ThreadGovernor
from engine.llama.threads import allowed_cpus, default_batch_threads, default_threads
from engine.llama.types import LoadSettings, Logits, StopRequest, VocabFacts

_init_lock = threading.Lock()
_initialised = False
_log_tail: deque[str] = deque(maxlen=40)
_verbose = bool(os.environ.get("DRAFTLIGHT_LLAMA_LOG"))


@lc.llama_log_callback
def _log_sink(level: int, text: bytes, _user: ctypes.c_void_p) -> None:
    # llama.cpp talks a lot on stderr; keep the tail so a failure can say why.
    msg = text.decode("utf-8", "replace") if text else ""
    _log_tail.append(msg)
    if _verbose:
        os.write(2, text or b"")


def ensure_backend() -> None:
    global _initialised
    with _init_lock:
        if not _initialised:
            lc.llama_log_set(_log_sink, ctypes.c_void_p(0))
            lc.llama_backend_init()
            _initialised = True


def last_log_error() -> str:
    for line in reversed(_log_tail):
        line = line.strip()
        if line and ("error" in line.lower() or "failed" in line.lower()):
            return line
    return ""


_NEVER = ctypes.create_string_buffer(1)
"""What a model watches between replies: a flag never set."""


@functools.cache
def _flag_reader():
    """libc's strlen as llama.cpp's abort callback (see StopRequest); None where there is no libc to ask."""
    try:
        libc = ctypes.cdll.msvcrt if os.name == "nt" else ctypes.CDLL(None)
        return lc.ggml_abort_callback(ctypes.cast(libc.strlen, ctypes.c_void_p).value)
    except (OSError, AttributeError):
        return None


_VOCAB_TYPES = {0: "none", 1: "spm", 2: "bpe", 3: "wpm", 4: "ugm", 5: "rwkv", 6: "plamo2"}


class LlamaModel:
    """One GGUF model with its own llama context and a record of what its KV cache holds.

    `kv` lists the tokens whose keys and values are in the cache, at positions 0..len-1.
    Every change to the cache goes through `decode` and `truncate`, which keep `kv` exact.
    """

    def __init__(
        self,
        path: str | Path,
        settings: LoadSettings = LoadSettings(),
        progress: Callable[[float], None] | None = None,
        cancel: threading.Event | None = None,
    ) -> None:
        """`cancel`, set from any thread, ends the load within one tensor: LoadCancelled is raised
        and llama.cpp has freed what it had loaded (its progress callback answered False)."""
        self.path = Path(path)
        # Raises ModelFileError with a clear reason. The vocabulary is checked either way; its texts are not
        # needed here (llama.cpp reads them), and without them a launch can use an earlier launch's answer.
        self.info = validate_gguf(self.path, read_tokens=False)
        ensure_backend()
        self.settings = settings
        _check_cancel(cancel, self.path)
        mparams = lc.llama_model_default_params()
        mparams.n_gpu_layers = settings.n_gpu_layers
        self.extra_buffers = use_extra_buffers(settings.extra_buffers, self.path, self.info, cancel)
        """Whether weight repacking is on for this model (settings.extra_buffers resolved)."""
        mparams.use_extra_bufts = self.extra_buffers
        raised: list[BaseException] = []
        if progress is not None or cancel is not None:
            def on_progress(value: float, _user: ctypes.c_void_p) -> bool:
                # An exception cannot cross llama.cpp: keep it, abort the load, raise it below.
                try:
                    if progress is not None:
                        progress(float(value))
                except BaseException as exc:  # noqa: BLE001
                    raised.append(exc)
                    return False
                return cancel is None or not cancel.is_set()

            # Kept with the model: llama.cpp keeps the pointer among the model's parameters.
            self._progress_cb = lc.llama_progress_callback(on_progress)
            mparams.progress_callback = self._progress_cb
        self._model = lc.llama_model_load_from_file(str(self.path).encode(), mparams)
        if raised:
            if self._model:
                lc.llama_model_free(self._model)
                self._model = None
            raise raised[0]
        if not self._model:
            _check_cancel(cancel, self.path)  # a cancelled load returns NULL too
            raise ModelLoadError(f"llama.cpp could not load {self.path.name}: {last_log_error() or 'unknown reason'}")
        n_threads = settings.n_threads or default_threads()
        n_threads_batch = settings.n_threads_batch or (n_threads if settings.n_threads else default_batch_threads())
        n_ctx = settings.n_ctx or lc.llama_model_n_ctx_train(self._model)
        cparams = lc.llama_context_default_params()
        cparams.n_ctx = n_ctx
        cparams.n_batch = settings.n_batch
        cparams.n_ubatch = settings.n_batch
        cparams.n_seq_max = 1
        cparams.n_threads = n_threads
        cparams.n_threads_batch = n_threads_batch
        cparams.no_perf = True
        self.flash_attn = settings.flash_attn
        """Flash attention as asked of llama.cpp (None: its own choice, "auto")."""
        cparams.flash_attn_type = {None: lc.LLAMA_FLASH_ATTN_TYPE_AUTO, True: lc.LLAMA_FLASH_ATTN_TYPE_ENABLED,
                                   False: lc.LLAMA_FLASH_ATTN_TYPE_DISABLED}[settings.flash_attn]
        cparams.swa_full = True  # sliding-window models must be able to roll back a rejected draft
        self._ctx = lc.llama_init_from_model(self._model, cparams)
        if not self._ctx:
            lc.llama_model_free(self._model)
            self._model = None
            raise ModelLoadError(
                f"llama.cpp could not create a context of {n_ctx} tokens for {self.path.name} "
                f"(out of memory?): {last_log_error() or 'unknown reason'}"
            )
        self._mem = lc.llama_get_memory(self._ctx)
        self._vocab = lc.llama_model_get_vocab(self._model)
        self.n_vocab = int(lc.llama_vocab_n_tokens(self._vocab))
        self.n_ctx = int(lc.llama_n_ctx(self._ctx))
        # llama.cpp may shrink the batch (never above the context): use what it actually took.
        self.n_batch = min(int(lc.llama_n_batch(self._ctx)), int(lc.llama_n_ubatch(self._ctx)), settings.n_batch)
        self.n_threads = n_threads
        self.n_threads_batch = n_threads_batch
        self._batch = lc.llama_batch_init(self.n_batch, 0, 1)
        self.kv: list[int] = []
        self.passes = 0
        self.tokens_decoded = 0
        self.decode_s = 0.0  # seconds inside llama_decode, for the overhead accounting
        self.last_share = 1.0
        """Of the CPU time the last decode's threads could have had, the share they got (1: the
        machine was ours; 0.6: a busy process took a core). llama.cpp's threads compute or spin for
        the whole pass, so less CPU time than wall time x threads means someone else ran."""
        self.cpu_bound = not offloads(settings.n_gpu_layers)
        """The passes run on the CPU: only then does `last_share` say anything about the load."""
        self.last_threads = (n_threads, n_threads)
        """(threads the last pass ran on, threads loaded for such a pass): fewer while the governor gives
        cores to other programs."""
        self.governor = (ThreadGovernor(n_threads, n_threads_batch, len(allowed_cpus()))
                         if self.cpu_bound and not settings.n_threads and max(n_threads, n_threads_batch) > 1 else None)
        """Fewer threads while other processes take cores (engine.llama.thread_governor); None: the
        threads asked for (given, or one), or passes that run on a GPU."""
        self._pieces: dict[int, bytes] = {}
        self._views: dict[int, tuple[int, np.ndarray]] = {}  # rows -> (buffer address, view onto it)
        self._facts: VocabFacts | None = None
        self.can_trim = not (lc.llama_model_is_recurrent(self._model) or lc.llama_model_is_hybrid(self._model))
        self._watched: StopRequest | None = None
        self.last_block = (0, 0)
        """(first position, tokens) of the last llama_decode call: the rows its output buffers hold."""
        self.watch(None)
        if cancel is not None and cancel.is_set():  # it came while the context was made (not interruptible)
            self.close()
            _check_cancel(cancel, self.path)

    # -- facts ---------------------------------------------------------------
    def vocab_facts(self) -> VocabFacts:
        if self._facts is None:
            self._facts = self._read_vocab_facts()
        return self._facts

    def _read_vocab_facts(self) -> VocabFacts:
        v = self._vocab
        return VocabFacts(
            vocab_type=_VOCAB_TYPES.get(int(lc.llama_vocab_type(v)), "unknown"),
            n_vocab=self.n_vocab,
            add_bos=bool(lc.llama_vocab_get_add_bos(v)),
            add_eos=bool(lc.llama_vocab_get_add_eos(v)),
            bos=int(lc.llama_vocab_bos(v)),
            eos=int(lc.llama_vocab_eos(v)),
        )

    def token_text(self, token: int) -> bytes:
        """The vocabulary entry itself (not the rendered piece): what compatibility compares."""
        return lc.llama_vocab_get_text(self._vocab, token) or b""

    @property
    def chat_template(self) -> str | None:
        ptr = lc.llama_model_chat_template(self._model, None)
        return ptr.decode("utf-8", "replace") if ptr else None

    # -- text ----------------------------------------------------------------
    def tokenize(self, text: str, add_special: bool = True, parse_special: bool = False) -> list[int]:
        data = text.encode("utf-8")
        cap = len(data) + 16
        buf = (lc.llama_token * cap)()
        n = lc.llama_tokenize(self._vocab, data, len(data), buf, cap, add_special, parse_special)
        if n < 0:
            cap = -n
            buf = (lc.llama_token * cap)()
            n = lc.llama_tokenize(self._vocab, data, len(data), buf, cap, add_special, parse_special)
        return list(buf[:n])

    def piece(self, token: int) -> bytes:
        """Bytes a token adds to the text (control tokens add nothing)."""
        cached = self._pieces.get(token)
        if cached is None:
            buf = ctypes.create_string_buffer(64)
            n = lc.llama_token_to_piece(self._vocab, token, buf, len(buf), 0, False)
            if n < 0:
                buf = ctypes.create_string_buffer(-n)
                n = lc.llama_token_to_piece(self._vocab, token, buf, len(buf), 0, False)
            cached = self._pieces[token] = buf.raw[:n]
        return cached

    def special_text(self, token: int) -> str:
        buf = ctypes.create_string_buffer(256)
        n = lc.llama_token_to_piece(self._vocab, token, buf, len(buf), 0, True)
        return buf.raw[: max(n, 0)].decode("utf-8", "replace")

    def is_eog(self, token: int) -> bool:
        return bool(lc.llama_vocab_is_eog(self._vocab, token))

    # -- the cache -----------------------------------------------------------
    def watch(self, stop: StopRequest | None) -> None:
        """From now on a pass ends part-way once `stop` is set (decode raises Interrupted); None: every
        pass runs to its end (loading, measuring). Call it from the thread that decodes, between passes."""
        reader = _flag_reader()
        if reader is None or not self._ctx:
            return
        self._watched = stop  # the buffer llama.cpp reads must live as long as it is watched
        flag = stop.flag if stop is not None else _NEVER
        lc.llama_set_abort_callback(self._ctx, reader, ctypes.cast(flag, ctypes.c_void_p))

    def decode(self, tokens: Sequence[int], logits: Logits = Logits.LAST, tail: int = 0) -> np.ndarray:
        """Append `tokens` to the cache in as few llama_decode calls as n_batch allows; `logits` says
        which rows come back (Logits.ALL must fit one batch; Logits.TAIL: the last `tail` tokens, in the
        last batch). Returns a read-only view of the rows, valid until the next decode.
        """
        if not tokens:
            raise EngineError("decode called with no tokens")
        logits = Logits(logits)
        if logits is Logits.ALL and len(tokens) > self.n_batch:
            raise EngineError(f"cannot score {len(tokens)} tokens in one pass (n_batch {self.n_batch})")
        if logits is Logits.TAIL and not 0 < tail <= (len(tokens) - 1) % self.n_batch + 1:
            raise EngineError(f"cannot score the last {tail} of {len(tokens)} tokens in one pass (n_batch {self.n_batch})")
        if len(self.kv) + len(tokens) > self.n_ctx:
            raise ContextFullError(
                f"the context window is full ({self.n_ctx} tokens): {len(self.kv)} used, {len(tokens)} more needed"
            )
        n_rows = 0
        wall = cpu = 0.0
        self._govern()
        single = len(tokens) == 1
        self.last_threads = (self.threads_now[0 if single else 1], self.n_threads if single else self.n_threads_batch)
        for start in range(0, len(tokens), self.n_batch):
            chunk = tokens[start : start + self.n_batch]
            last_chunk = start + self.n_batch >= len(tokens)
            b = self._batch
            pos0 = len(self.kv)
            for i, tok in enumerate(chunk):
                b.token[i] = tok
                b.pos[i] = pos0 + i
                b.n_seq_id[i] = 1
                b.seq_id[i][0] = 0
                b.logits[i] = last_chunk and (logits is Logits.ALL or (logits is Logits.LAST and i == len(chunk) - 1)
                                              or (logits is Logits.TAIL and i >= len(chunk) - tail))
            b.n_tokens = len(chunk)
            self.last_block = (0, 0)
            c0, t0 = time.process_time(), time.perf_counter()
            rc = lc.llama_decode(self._ctx, b)
            dt = time.perf_counter() - t0
            wall, cpu = wall + dt, cpu + time.process_time() - c0
            self.decode_s += dt
            self.passes += 1
            if rc != 0:
                self._recover(pos0)
                if rc == 2:
                    raise Interrupted(f"a stop request ended {self.path.name}'s pass part-way")
                if rc == 1:
                    raise ContextFullError(f"no room in the KV cache for {len(chunk)} more tokens")
                raise EngineError(f"llama_decode failed with code {rc}: {last_log_error()}")
            self.kv.extend(chunk)
            self.last_block = (pos0, len(chunk))
            self.tokens_decoded += len(chunk)
            if last_chunk:
                n_rows = {Logits.ALL: len(chunk), Logits.LAST: 1, Logits.TAIL: tail}.get(logits, 0)
        # Of the threads the model was loaded with: a pass on fewer (the governor) ran beside other work.
        self.last_share = min(1.0, cpu / (wall * self.last_threads[1])) if wall > 0 and self.cpu_bound else 1.0
        if n_rows == 0:
            return np.empty((0, self.n_vocab), dtype=np.float32)
        return self._logits(n_rows)

    def _govern(self) -> None:
        changed = self.governor.poll() if self.governor is not None else None
        if changed is not None:
            lc.llama_set_n_threads(self._ctx, *changed)

    @property
    def threads_now(self) -> tuple[int, int]:
        """Threads (single tokens, batches) the next pass runs on."""
        g = self.governor
        return (g.threads, g.threads_batch) if g is not None else (self.n_threads, self.n_threads_batch)

    def _logits(self, n_rows: int) -> np.ndarray:
        """The first n_rows rows of llama.cpp's logits buffer. A view is made once per row count and
        buffer address (llama.cpp moves the buffer when it needs more outputs): building one
        through ctypes cost about 0.06 ms a token, as much as the rest of decode's Python."""
        ptr = lc.llama_get_logits(self._ctx)
        addr = ctypes.cast(ptr, ctypes.c_void_p).value
        cached = self._views.get(n_rows)
        if cached is None or cached[0] != addr:
            cached = self._views[n_rows] = (addr, np.ctypeslib.as_array(ptr, shape=(n_rows, self.n_vocab)))
        return cached[1]

    def truncate(self, n: int) -> None:
        """Keep the first n tokens of the cache, drop the rest (a rejected draft)."""
        if n >= len(self.kv):
            return
        if not lc.llama_memory_seq_rm(self._mem, 0, n, -1):
            # Recurrent state cannot be rolled back partially: start afresh, honestly.
            lc.llama_memory_clear(self._mem, True)
            self.kv.clear()
            raise EngineError(f"{self.path.name} cannot trim its cache (recurrent model)")
        del self.kv[n:]

    def common_prefix(self, tokens: Sequence[int]) -> int:
        n = 0
        for a, b in zip(self.kv, tokens):
            if a != b:
                break
            n += 1
        return n

    def sync(self, tokens: Sequence[int]) -> int:
        """Make the cache a prefix of `tokens`; returns how many it already holds."""
        n = self.common_prefix(tokens)
        if n < len(self.kv) and not self.can_trim:
            self.clear()  # a recurrent state cannot be cut back: read everything again
            return 0
        self.truncate(n)
        return n

    def clear(self) -> None:
        lc.llama_memory_clear(self._mem, True)
        self.kv.clear()

    def cache_is_consistent(self) -> bool:
        """llama.cpp's own view of the cache agrees with `kv`."""
        return int(lc.llama_memory_seq_pos_max(self._mem, 0)) == len(self.kv) - 1

    def _recover(self, pos0: int) -> None:
        # After a failed decode llama.cpp may keep part of the batch: cut back to what we know.
        if int(lc.llama_memory_seq_pos_max(self._mem, 0)) != pos0 - 1:
            if not lc.llama_memory_seq_rm(self._mem, 0, pos0, -1):
                lc.llama_memory_clear(self._mem, True)
                self.kv.clear()

    def close(self) -> None:
        if getattr(self, "_ctx", None):
            lc.llama_batch_free(self._batch)
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


def _check_cancel(cancel: threading.Event | None, path: Path) -> None:
    if cancel is not None and cancel.is_set():
        raise LoadCancelled(f"loading {path.name} was cancelled")


#: Weight types ggml's AMX kernels take, and IQ4_NL, which the other repacking takes: a file with
#: none of them loads the same with repacking on or off (the tests' tiny F32 models).
_REPACKED_TYPES = {"Q4_0", "Q4_1", "Q8_0", "Q4_K", "Q5_K", "Q6_K", "IQ4_XS", "IQ4_NL", "F16"}


def amx_compiled() -> bool:
    """Whether this build of llama.cpp has AMX kernels (built for, and so running on, an AMX CPU)."""
    return "AMX_INT8 = 1" in system_info()


def repacking_decided(asked: bool | None, path: Path | None = None, info: GGUFInfo | None = None) -> bool | None:
    """Weight repacking for the model file `path` where it is decided without trying the file: as asked;
    DRAFTLIGHT_ALLOW_AMX=1 on, =0 off; on for a build without AMX kernels; off with no file to try or
    for a file with nothing to repack. None: only trying the file can tell (engine.llama.amx_check)."""
    if asked is not None:
        return asked
    forced = os.environ.get("DRAFTLIGHT_ALLOW_AMX")
    if forced in ("0", "1"):
        return forced == "1"
    if not amx_compiled():
        return True
    if path is None:
        return False  # no file to try: the safe way
    if info is None:
        info = validate_gguf(Path(path), read_tokens=False)
    if not any(t[2] in _REPACKED_TYPES for t in info.tensors):
        return False  # nothing would be repacked: it loads the same either way
    return None


def use_extra_buffers(asked: bool | None, path: Path | None = None, info: GGUFInfo | None = None,
                      cancel: threading.Event | None = None) -> bool:
    """Weight repacking for the model file `path`: on, except where this build's AMX kernels crash on
    it (tried once in a child process, then kept: engine.llama.amx_check), or as asked."""
    decided = repacking_decided(asked, path, info)
    if decided is not None:
        return decided
    from engine.llama import amx_check

    return amx_check.check(Path(path), cancel).verdict is amx_check.AmxVerdict.RUNS


def drafter_flash_attn(asked: bool | None, n_gpu_layers: int = -1) -> bool | None:
    """Flash attention for a drafter: as asked, else off where it runs on the CPU. llama.cpp's "auto"
    turns it on for the CPU too, where its kernel attends one query row at a time: on a 2-core Xeon it
    made the 0.5B drafter's step 2.5x dearer 3,000 tokens into the context (58 against 23 ms; 1.1x at
    128) and reading 40 tokens there 8.5x (1.92 against 0.23 s). A drafter's numerics cannot change a
    reply; the target's can, so it keeps llama.cpp's choice: with flash attention a block of tokens is
    attended to as the same tokens one at a time are, and greedy speculative replies equalled plain
    greedy ones on 5 of 5 prompts, 2 of 5 without (its 16-token verification 3,000 tokens in costs 422
    against 255 ms for that)."""
    if asked is not None:
        return asked
    return None if offloads(n_gpu_layers) else False


def chat_renderer(template: str, bos_token: str, eos_token: str) -> Callable[[list[dict[str, str]]], str]:
    """Compile a GGUF chat template once, in llama-cpp-python's sandboxed Jinja formatter."""
    from llama_cpp.llama_chat_format import Jinja2ChatFormatter

    formatter = Jinja2ChatFormatter(template=template, bos_token=bos_token, eos_token=eos_token)
    return lambda messages: formatter(messages=messages).prompt


def system_info() -> str:
    ensure_backend()
    return (lc.llama_print_system_info() or b"").decode("utf-8", "replace")


def quantize(src: Path, dst: Path, types: dict[str, str], file_type: int | None = None, threads: int | None = None) -> None:
    """llama.cpp's own quantizer: `dst` is `src` with the named tensors retyped (ggml type names, e.g.
    'Q8_0'); every other tensor is named with the type it has, so it is copied byte for byte.
    `file_type`: the llama_ftype the file says it is (default: what `src` says); it must be a
    quantized one for llama.cpp to apply the types at all."""
    from gguf import GGMLQuantizationType

    ensure_backend()
    info = validate_gguf(src)
    overrides = []
    for name, _shape, ggml_type, _ in info.tensors:
        new = types.get(name, ggml_type)
        if new in GGMLQuantizationType.__members__:
            overrides.append(("^" + name.replace(".", "\\.") + "$", int(GGMLQuantizationType[new])))
    patterns = [p.encode() for p, _ in overrides]  # kept alive while llama.cpp reads them
    table = (lc.llama_model_tensor_override * (len(overrides) + 1))()
    for i, ((_, ggml_type), pattern) in enumerate(zip(overrides, patterns)):
        table[i].pattern, table[i].type = pattern, ggml_type
    table[len(overrides)].pattern = None
    params = lc.llama_model_quantize_default_params()
    params.ftype = int(info.metadata.get("general.file_type", 15) if file_type is None else file_type)
    params.allow_requantize = True
    params.nthread = threads or default_batch_threads()
    params.tt_overrides = ctypes.cast(table, ctypes.POINTER(lc.llama_model_tensor_override))
    rc = lc.llama_model_quantize(str(src).encode(), str(dst).encode(), ctypes.byref(params))
    if rc != 0:
        raise EngineError(f"llama.cpp's quantizer failed on {Path(src).name}: {last_log_error() or f'code {rc}'}")


def supports_gpu_offload() -> bool:
    ensure_backend()
    return bool(lc.llama_supports_gpu_offload())


def offloads(n_gpu_layers: int) -> bool:
    """Whether a model loaded with `n_gpu_layers` runs layers on a GPU (else its passes run on the CPU)."""
    return n_gpu_layers != 0 and supports_gpu_offload()


@dataclass(frozen=True, slots=True)
class Device:
    """A compute device llama.cpp can use."""

    name: str
    description: str
    kind: str  # "cpu", "gpu", "igpu" or "accel"
    memory_free: int
    memory_total: int


_DEV_KINDS = {0: "cpu", 1: "gpu", 2: "igpu", 3: "accel"}


def _ggml():
    """ggml's device registry through ctypes (llama-cpp-python does not wrap it)."""
    from llama_cpp import _ggml as g

    lib = g.libggml
    if not getattr(lib, "_draftlight_typed", False):
        vp, sz = ctypes.c_void_p, ctypes.c_size_t
        lib.ggml_backend_dev_count.restype = sz
        lib.ggml_backend_dev_get.argtypes, lib.ggml_backend_dev_get.restype = [sz], vp
        for fn in ("ggml_backend_dev_name", "ggml_backend_dev_description"):
            getattr(lib, fn).argtypes, getattr(lib, fn).restype = [vp], ctypes.c_char_p
        lib.ggml_backend_dev_type.argtypes, lib.ggml_backend_dev_type.restype = [vp], ctypes.c_int
        lib.ggml_backend_dev_memory.argtypes = [vp, ctypes.POINTER(sz), ctypes.POINTER(sz)]
        lib.ggml_backend_dev_memory.restype = None
        lib.ggml_backend_reg_count.restype = sz
        lib.ggml_backend_reg_get.argtypes, lib.ggml_backend_reg_get.restype = [sz], vp
        lib.ggml_backend_reg_name.argtypes, lib.ggml_backend_reg_name.restype = [vp], ctypes.c_char_p
        lib._draftlight_typed = True
    return lib


def backends() -> list[str]:
    """Backends compiled into this build of llama.cpp (e.g. CPU, CUDA, Metal, Vulkan)."""
    ensure_backend()
    lib = _ggml()
    return [lib.ggml_backend_reg_name(lib.ggml_backend_reg_get(i)).decode() for i in range(lib.ggml_backend_reg_count())]


def devices() -> list[Device]:
    ensure_backend()
    lib = _ggml()
    out = []
    for i in range(lib.ggml_backend_dev_count()):
        dev = lib.ggml_backend_dev_get(i)
        free, total = ctypes.c_size_t(0), ctypes.c_size_t(0)
        lib.ggml_backend_dev_memory(dev, ctypes.byref(free), ctypes.byref(total))
        out.append(Device(
            name=(lib.ggml_backend_dev_name(dev) or b"").decode(),
            description=(lib.ggml_backend_dev_description(dev) or b"").decode(),
            kind=_DEV_KINDS.get(lib.ggml_backend_dev_type(dev), "unknown"),
            memory_free=int(free.value),
            memory_total=int(total.value),
        ))
    return out
