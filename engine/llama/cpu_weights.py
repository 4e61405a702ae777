"""Weights made for this CPU: copies of a model whose tensors use the types llama.cpp's CPU kernels
run fastest here, made once with llama.cpp's own quantizer and kept beside the calibration.

On x86 CPUs (AVX2) llama.cpp repacks Q4_0, IQ4_NL and Q4_K into interleaved blocks with real
matrix kernels, and tinyBLAS covers Q8_0, Q5_0 and IQ4_NL; Q6_K and Q5_K have neither and cost a
full dot product per row and token. What that means here (2-core EPYC, medians of interleaved runs):

- Drafter: the 0.5B drafter is Q5_0/Q8_0 with Q6_K layers (38-46 ms a step); as Q4_0 it takes
  23-32 ms. A drafter's weights cannot change a reply (every drafted token is checked by the target;
  under sampling the drafter's own probabilities are used), only how often it is right: its greedy
  agreement with the target went from 68.0% to 64.3% over 1,859 tokens. This copy is made by default,
  once (23 s here). IQ4_NL runs as fast and agrees a little more (66.3%) but takes 5x longer to make.
- Target: Q6_K layers as Q8_0 (8 bits for values stored in 6: nothing is rounded away but the
  re-blocking) verify 8 tokens 30% faster, 2-4 tokens about the same, one token 3% slower. It is
  another file, so it is made only when asked (`engine models tune --role target`). On a 2-core
  Zen 5 (AVX-512) that copy decoded one token 1.1-1.5x slower, and no cheaper at 4.
- Fast target (`--role fast-target`): every matrix in Q4_0, which llama.cpp repacks for 4-row
  matrix kernels. On that Zen 5, one token 0.8-0.9x the time of the Q4_K_M original and 4 tokens
  1.5-1.7 single steps where the original takes 2.1-2.9, so drafts pay far more often (Auto with
  lookup + model, one repeat: code rewrite 2.69x of plain against 1.15x). But it is another model:
  re-quantizing rounds the weights again, and its greedy choice agreed with the original's on
  97.2% of 919 reply tokens (the original against itself, batched against single-token: 99.0%).
  Replies are exact for the file that runs, so a person chooses it: never made by default.
"""
from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
import tempfile
import threading
import time
from enum import Enum
from importlib import metadata
from pathlib import Path

from engine import paths
from engine.errors import EngineError, LoadCancelled
from engine.gguf_check import validate_gguf

LLAMA_FTYPE_MOSTLY_Q4_0 = 2
#: Bump when what a copy holds changes: older copies are made again.
PLAN_VERSION = 1
#: Drafters smaller than this are not copied: they run fast as they are (and the tests' tiny ones stay as built).
MIN_DRAFTER_BYTES = 64 * 2**20
#: Types a 2-D weight is already fast in on these CPUs (repacked or tinyBLAS at 4-5 bits).
_FAST_DRAFT_TYPES = {"Q4_0", "IQ4_NL", "Q4_K"}
#: Target types without a batched CPU kernel, and the type that keeps every value they store.
_TARGET_RETYPE = {"Q6_K": "Q8_0", "Q5_K": "Q8_0"}
_WEIGHT_TYPES = {"F32", "F16", "BF16", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0", "Q2_K", "Q3_K", "Q4_K", "Q5_K",
                 "Q6_K", "IQ4_NL", "IQ4_XS"}


class Role(Enum):
    """What a copy is for: the role decides which tensors change."""

    DRAFTER = "drafter"
    TARGET = "target"
    FAST_TARGET = "fast-target"

    @property
    def tag(self) -> str:
        return {Role.DRAFTER: "cpu-q4_0", Role.TARGET: "cpu-q8", Role.FAST_TARGET: "cpu-q4_0-target"}[self]

    @property
    def file_type(self) -> int | None:
        """The llama_ftype the copy says it is (None: the source's)."""
        return None if self is Role.TARGET else LLAMA_FTYPE_MOSTLY_Q4_0


def cpu_suits() -> bool:
    """x86-64 with AVX2: where the kernels named in the module docstring are what llama.cpp runs."""
    if platform.machine().lower() not in ("x86_64", "amd64"):
        return False
    try:
        flags = Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return True  # not Linux: every x86-64 Mac and nearly every PC of the last decade has AVX2
    return " avx2" in flags


def plan(path: Path, role: Role) -> dict[str, str]:
    """Tensor name -> the type it gets in the copy (empty: nothing to gain). 2-D weights only; a
    drafter's token embeddings stay (a lookup table, not a matrix product)."""
    info = validate_gguf(path, read_tokens=False)  # tensors only: the vocabulary is a third of the read
    out: dict[str, str] = {}
    for name, shape, ggml_type, _ in info.tensors:
        if len([d for d in shape if d > 1]) < 2 or not name.endswith(".weight") or ggml_type not in _WEIGHT_TYPES:
            continue
        if role is Role.TARGET:
            if ggml_type in _TARGET_RETYPE:
                out[name] = _TARGET_RETYPE[ggml_type]
        elif name == "token_embd.weight" or shape[0] % 32 or ggml_type == "Q4_0":
            continue
        elif role is Role.FAST_TARGET or ggml_type not in _FAST_DRAFT_TYPES:
            out[name] = "Q4_0"
    return out


def folder() -> Path:
    override = os.environ.get("DRAFTLIGHT_CPU_WEIGHTS")
    return Path(override) if override else paths.cache_dir() / "cpu-weights"


def copy_path(src: Path, role: Role) -> Path:
    return folder() / f"{Path(src).stem}.{role.tag}.gguf"


def _identity(src: Path) -> dict:
    st = Path(src).stat()
    try:
        version = metadata.version("llama_cpp_python")
    except metadata.PackageNotFoundError:
        version = "unknown"
    return {"source": str(Path(src).resolve()), "size": st.st_size, "mtime_ns": st.st_mtime_ns,
            "plan": PLAN_VERSION, "llama_cpp": version}


def ready(src: Path, role: Role) -> Path | None:
    """The copy of `src` for `role`, if one was made from this very file by this version."""
    dst = copy_path(src, role)
    try:
        kept = json.loads(dst.with_suffix(".json").read_text(encoding="utf-8"))
        return dst if dst.is_file() and kept == _identity(src) else None
    except (OSError, ValueError):
        return None


def wanted(src: Path, role: Role, gpu_offload: bool) -> bool:
    """Whether a copy is worth making for `src` by default: a drafter of some size, run on this kind of
    CPU (not from a bundled app, which has no Python to run the quantizer's child process with)."""
    return (role is Role.DRAFTER and not gpu_offload and cpu_suits() and not paths.installed_app()
            and Path(src).stat().st_size >= MIN_DRAFTER_BYTES and bool(plan(src, role)))


def source_of(path: Path) -> Path | None:
    """The file a copy in the copies' folder was made from (None: `path` is not such a copy)."""
    path = Path(path)
    try:
        if path.resolve().parent != folder().resolve():
            return None
        return Path(json.loads(path.with_suffix(".json").read_text(encoding="utf-8"))["source"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def remove(copy: Path) -> None:
    """Delete a copy made here and its note (it can be made again); anything else is refused."""
    if source_of(copy) is None:
        raise EngineError(f"{Path(copy).name} is not a copy made for this CPU")
    for p in (Path(copy), Path(copy).with_suffix(".json")):
        p.unlink(missing_ok=True)


def fast_copy_offered(src: Path) -> bool:
    """Whether to offer a person the fast target copy of `src`: on a CPU-only llama.cpp of the kind the
    module docstring measured, from Python (a bundled app has none for the quantizer's child process),
    for a file that is not such a copy and has matrices to change. Reads the file's header."""
    from engine.llama.backend import supports_gpu_offload

    return (cpu_suits() and not paths.installed_app() and not supports_gpu_offload()
            and source_of(src) is None and bool(plan(src, Role.FAST_TARGET)))


def make(src: Path, role: Role, cancel: threading.Event | None = None) -> Path:
    """Make (or find) the copy of `src` for `role`. The quantizer runs in a child process, so a file
    that crashes llama.cpp costs the copy, not the app, and `cancel` ends it at once."""
    src = Path(src)
    if (done := ready(src, role)) is not None:
        return done
    types = plan(src, role)
    if not types:
        raise EngineError(f"{src.name} has nothing to change for this CPU as a {role.value}")
    dst = copy_path(src, role)
    dst.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{dst.stem}.", suffix=".tmp", dir=dst.parent)
    os.close(fd)
    spec = json.dumps({"types": types, "file_type": role.file_type})
    child = subprocess.Popen([sys.executable, "-m", "engine.llama.cpu_weights", str(src), tmp, spec],
                             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                             cwd=str(Path(__file__).resolve().parents[2]))
    try:
        while child.poll() is None:
            if cancel is not None and cancel.is_set():
                child.kill()
                child.wait()
                raise LoadCancelled(f"making a copy of {src.name} for this CPU was cancelled")
            time.sleep(0.05)
        err = child.stderr.read().decode("utf-8", "replace").strip().splitlines() if child.stderr else []
        if child.returncode != 0:
            raise EngineError(f"llama.cpp's quantizer could not copy {src.name} for this CPU "
                              f"(exit {child.returncode}): {err[-1] if err else 'no message'}")
        validate_gguf(Path(tmp))  # what llama.cpp will open is checked like any other file
        os.replace(tmp, dst)
        dst.with_suffix(".json").write_text(json.dumps(_identity(src)), encoding="utf-8")
        return dst
    finally:
        if child.stderr:
            child.stderr.close()
        if os.path.exists(tmp):
            os.unlink(tmp)


def _main(argv: list[str]) -> int:
    from engine.llama.backend import quantize

    src, dst, spec = argv
    job = json.loads(spec)
    quantize(Path(src), Path(dst), job["types"], job["file_type"])
    return 0


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))
