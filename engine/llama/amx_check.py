"""Whether llama.cpp's AMX kernels run a model file here: tried once in a child process, then kept.

On Intel CPUs with AMX (Sapphire Rapids and later Xeons) ggml repacks a model's weights for its tile
kernels, and the target then verifies a block of 2-16 tokens for 1.5-2.5 single steps (measured
on a 2-core Xeon with the default pair: V(16) 2.5 single steps against 3.2 without, one token 12%
faster; the drafter's Q4_0 copy a step in 15 ms against 32). But a build of llama.cpp made
by GCC 12 crashes there: GCC's amxtileintrin.h tells the compiler that `ldtilecfg` reads 8 bytes of
its 64-byte config, dead-store elimination drops the stores that fill in the rows and columns, and
the first tile load faults on stack garbage (SIGSEGV, ggml-org/llama.cpp#20824: "machine-dependent"
because it is compiler-dependent). The same sources built with `-fno-dse` run (docs/how-it-works.md, AMX).

Which build a person has cannot be told from outside, so the first load of a file by a build with
AMX kernels tries it in a child process: the file loaded with repacking on and a batch decoded. A
crash there costs a second; the verdict is kept per build (its libraries' sizes and times) and
file (path, size, time) in the cache folder, and where the kernels crash the engine loads with
repacking off, as it did everywhere on these CPUs before.
"""
from __future__ import annotations

import importlib.util
import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from enum import Enum
from importlib import metadata
from pathlib import Path

from engine import paths
from engine.errors import LoadCancelled
from engine.llama import kept_store

FILE_NAME = "amx-check.json"
#: A check that takes longer than this (a load of a few GB on a very busy machine) is given up and
#: not kept: repacking stays off for this load, and the next load tries again.
TIMEOUT_S = 180.0
#: Entries kept: a few builds times a few files.
MAX_ENTRIES = 64
#: What a person can do about a build whose kernels crash (docs/how-it-works.md says the same).
REBUILD = ("pip install --force-reinstall --no-cache-dir llama-cpp-python==VERSION with "
           "CMAKE_ARGS=-DCMAKE_CXX_FLAGS=-fno-dse")


class AmxVerdict(Enum):
    """What the check found for one file and build."""

    RUNS = "runs"
    """The child decoded a batch with repacking on: the engine loads the file with it on."""
    CRASHES = "crashes"
    """The child was killed by a signal: repacking off for this file and build."""
    UNKNOWN = "unknown"
    """No answer (timed out, failed otherwise, or could not be run): off this time, tried again next load."""


@dataclass(frozen=True, slots=True)
class Check:
    verdict: AmxVerdict
    detail: str
    """For a person: what the child did ('killed by SIGSEGV', 'exit status 1: ...')."""


def store_path() -> Path:
    override = os.environ.get("DRAFTLIGHT_AMX_CHECKS")  # the tests share one store per run, as a person has one
    return Path(override) if override else paths.cache_dir() / FILE_NAME


def _file_identity(path: Path) -> str:
    st = path.stat()
    return f"{path.resolve()}|{st.st_size}|{st.st_mtime_ns}"


def build_identity() -> str:
    """What tells one build of llama.cpp from another on this machine: the version and the sizes and
    times of its library files (a rebuild with other flags replaces them). Found without importing it."""
    spec = importlib.util.find_spec("llama_cpp")
    default = Path(spec.origin).resolve().parent / "lib" if spec and spec.origin else Path(".")
    lib = Path(os.environ.get("LLAMA_CPP_LIB_PATH") or default)
    try:
        version = metadata.version("llama_cpp_python")
    except metadata.PackageNotFoundError:
        version = "unknown"
    files = []
    try:
        for f in sorted(lib.iterdir()):
            if "ggml" in f.name and f.is_file() and not f.is_symlink():
                st = f.stat()
                files.append(f"{f.name}:{st.st_size}:{st.st_mtime_ns}")
    except OSError:
        pass
    return f"{version}|{lib.resolve()}|{','.join(files)}"


def _key(path: Path) -> str:
    return f"{build_identity()}||{_file_identity(path)}"


def _read() -> dict:
    return kept_store.read(store_path())


def kept(path: Path) -> Check | None:
    """The verdict kept for `path` and this build, if any."""
    entry = _read().get(_key(path))
    if not isinstance(entry, dict):
        return None
    try:
        verdict = AmxVerdict(entry.get("verdict"))
    except ValueError:
        return None
    return Check(verdict, str(entry.get("detail", ""))) if verdict is not AmxVerdict.UNKNOWN else None


def _keep(path: Path, check: Check) -> None:
    """Keep the verdict (atomically; a read-only cache costs a check at the next load). Never raises."""
    kept_store.put(store_path(), _key(path), {"verdict": check.verdict.value, "detail": check.detail}, MAX_ENTRIES)


def _child_command(path: Path) -> list[str]:
    return [sys.executable, "-m", "engine.llama.amx_child", str(path)]


def run_check(path: Path, cancel: threading.Event | None = None) -> Check:
    """Try `path` with repacking on in a child process, now (nothing kept is read or written)."""
    if paths.installed_app():  # a bundled app has no Python to run the child with
        return Check(AmxVerdict.UNKNOWN, "not checked in the installed app")
    try:
        child = subprocess.Popen(_child_command(Path(path)), stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                 stderr=subprocess.PIPE, cwd=str(Path(__file__).resolve().parents[2]))
    except OSError as exc:
        return Check(AmxVerdict.UNKNOWN, f"could not start the check: {exc}")
    deadline = time.monotonic() + TIMEOUT_S
    try:
        while child.poll() is None:
            if cancel is not None and cancel.is_set():
                raise LoadCancelled(f"checking this CPU's AMX kernels on {Path(path).name} was cancelled")
            if time.monotonic() > deadline:
                return Check(AmxVerdict.UNKNOWN, f"no answer within {TIMEOUT_S:g} s")
            time.sleep(0.02)
        err = (child.stderr.read() if child.stderr else b"").decode("utf-8", "replace").strip().splitlines()
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
        if child.stderr:
            child.stderr.close()
    code = child.returncode
    if code == 0:
        return Check(AmxVerdict.RUNS, "a batch decoded with repacking on")
    if code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        return Check(AmxVerdict.CRASHES, f"killed by {name}")
    return Check(AmxVerdict.UNKNOWN, f"exit status {code}: {err[-1] if err else 'no message'}")


def check(path: Path, cancel: threading.Event | None = None) -> Check:
    """The kept verdict for `path` and this build, or a check now (kept when it gave an answer)."""
    path = Path(path)
    if (done := kept(path)) is not None:
        return done
    result = run_check(path, cancel)
    if result.verdict is not AmxVerdict.UNKNOWN:
        _keep(path, result)
    return result


def for_this_build() -> str:
    """One line for a person on this build's AMX kernels, from the files checked so far."""
    prefix = build_identity() + "||"
    found = {}
    for key, entry in _read().items():
        if key.startswith(prefix) and isinstance(entry, dict) and entry.get("verdict") in ("runs", "crashes"):
            found[key[len(prefix):].split("|")[0]] = entry["verdict"]
    crashed = sorted(Path(f).name for f, v in found.items() if v == "crashes")
    if crashed:
        return crash_note(*crashed)
    if found:
        return f"llama.cpp's AMX kernels run in this build (checked on {len(found)} model file(s)): weights are repacked for them"
    return "llama.cpp's AMX kernels: not tried yet (each model file is tried once, in a child process, at its first load)"


def crash_note(*files: str | Path) -> str:
    """What a person reads where files run without AMX because the build's kernels crash on them."""
    try:
        version = metadata.version("llama_cpp_python")
    except metadata.PackageNotFoundError:
        version = "X"
    return (f"llama.cpp's AMX kernels crash in this build of llama-cpp-python (checked on {', '.join(Path(f).name for f in files)}), so "
            "weight repacking is off, which is slower on this CPU; a build that runs them: "
            + REBUILD.replace("VERSION", version))
