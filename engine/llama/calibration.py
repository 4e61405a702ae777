"""Measured costs kept between launches, per model file and machine.

Measuring the target's block costs and the drafter's step takes 10-15 s on a laptop CPU; the
same file on the same machine costs the same tomorrow (the speed factor in CostModel follows
the day's load). So a measurement is kept under a key of the file (size, mtime, a hash of its
first MiB: the header and metadata) and of what decides its speed (CPU, cores, threads, GPU
layers, batch size, weight repacking, llama.cpp's build); anything else measures again. Kept
figures are refined from real rounds: a session writes back what it measured while it ran.
"""
from __future__ import annotations

import hashlib
import json
import os
import platform
import statistics
from importlib import metadata
from pathlib import Path
from typing import Any

from engine import paths
from engine.llama import kept_store

FILE_NAME = "calibration.json"
#: Entries kept (the newest): a few pairs, thread counts and versions.
MAX_ENTRIES = 64
_HEADER_BYTES = 1 << 20
#: A timed pass ran undisturbed when llama.cpp's threads got at least this share of the CPU time
#: they could have had (LlamaModel.last_share; on a 2-core CPU: 0.93-0.99 quiet, 0.6-0.7 with a busy
#: loop on one core, 0.5 with one on each). A busy machine does not only slow every size alike: two
#: busy loops made V(8)/V(1) 3.3 where it is 6.5 quiet, and such a shape, kept, misprices every launch.
QUIET_SHARE = 0.85
#: Model files smaller than this are not judged: their passes last a millisecond or so, and thread
#: wake-ups and waits dominate them (the tests' tiny models: a 3-token pass got 0.3 of its one thread,
#: quiet). A size, not a time: a time would judge them on a busy machine and not on a quiet one.
JUDGED_MIN_BYTES = 64 * 2**20
#: A calibration measured beside other work is used and kept as provisional (a busy laptop measured again at
#: every launch, 10-15 s before the first reply); the undisturbed rounds a person runs refine it, and after
#: this many it is kept as the machine's (a reply is 20-100 rounds: a few replies' worth).
SETTLED_ROUNDS = 64


def judged(file_bytes: int) -> bool:
    """Whether the passes of a model stored in `file_bytes` are judged by their share of CPU time."""
    return file_bytes >= JUDGED_MIN_BYTES


def judged_share(share: float, file_bytes: int) -> float:
    """A pass's share of CPU time as the judgement reads it: 1 (undisturbed) for a model too small to
    judge. (LlamaModel.last_share is already 1 off the CPU.)"""
    return share if judged(file_bytes) else 1.0


def disturbed(share: float) -> bool:
    """Whether a pass whose threads got `share` of the CPU time they could have had ran beside other work."""
    return share < QUIET_SHARE


def undisturbed_median(passes: list[tuple[float, float]], want: int) -> tuple[float, bool]:
    """The median seconds of the undisturbed passes among (seconds, share) ones, and whether there
    were `want` of them; with none, the median of them all (a measurement of a busy machine)."""
    quiet = [t for t, share in passes if not disturbed(share)]
    if quiet:
        return statistics.median(quiet), len(quiet) >= want
    return statistics.median(t for t, _ in passes), False


def _cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace").splitlines():
            if line.lower().startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _version() -> str:
    try:
        return metadata.version("llama_cpp_python")
    except metadata.PackageNotFoundError:
        return "unknown"


def key_for(path: Path, load: dict[str, Any]) -> str:
    """The file's identity and the machine's, as one string (`load`: what the model was loaded with)."""
    st = path.stat()
    h = hashlib.sha256()
    with path.open("rb") as fh:
        h.update(fh.read(_HEADER_BYTES))
    ident = {
        "v": 5,  # how it was measured (v2: a warm-up pass per size, medians, at a chat's depth; v3: undisturbed
        # passes; v4: the target's shape at a second depth too; v5: a drafter's figures refined by undisturbed
        # rounds only: v4 ones may hold a step timed beside other work)
        "file": str(path.resolve()), "size": st.st_size, "mtime_ns": st.st_mtime_ns, "header": h.hexdigest(),
        "cpu": _cpu_name(), "cores": os.cpu_count(), "machine": platform.machine(), "llama_cpp": _version(), **load,
    }
    return hashlib.sha256(json.dumps(ident, sort_keys=True, default=str).encode()).hexdigest()


def store_path() -> Path:
    return paths.cache_dir() / FILE_NAME


def _read() -> dict[str, Any]:
    return kept_store.read(store_path())


def load(key: str) -> dict[str, Any] | None:
    """The kept entry for `key`, if any and well formed: {'blocks': {n: seconds}, 'step': seconds | None,
    'interference': factor, 'quiet': whether it was measured undisturbed, 'deep': {n: seconds} measured at
    depths[1] where 'blocks' was at depths[0] (empty: one depth), 'rounds': undisturbed rounds that refined
    a provisional (not quiet) entry}."""
    entry = _read().get(key)
    if not isinstance(entry, dict):
        return None
    blocks = entry.get("blocks")
    step = entry.get("step")
    try:
        good = {int(n): float(s) for n, s in blocks.items() if float(s) > 0 and int(n) > 0}
    except (AttributeError, TypeError, ValueError):
        return None
    if not good or not (step is None or (isinstance(step, (int, float)) and step > 0)):
        return None
    interference = entry.get("interference", 1.0)
    if not isinstance(interference, (int, float)) or not 1.0 <= interference <= 3.0:
        interference = 1.0
    deep, depths = _deep(entry)
    rounds = entry.get("rounds", 0)
    if not isinstance(rounds, int) or isinstance(rounds, bool) or rounds < 0:
        rounds = 0
    return {"blocks": good, "step": step, "interference": float(interference), "quiet": entry.get("quiet") is True,
            "deep": deep, "depths": depths, "rounds": rounds}


def _deep(entry: dict[str, Any]) -> tuple[dict[int, float], tuple[int, int]]:
    """The deep shape of an entry and the two depths, or nothing where any of it is malformed (one depth then)."""
    try:
        d0, d1 = (int(d) for d in entry.get("depths", ()))
        deep = {int(n): float(v) for n, v in entry.get("deep", {}).items()}
    except (AttributeError, TypeError, ValueError):
        return {}, (0, 0)
    if not deep or not 0 <= d0 < d1 or any(n <= 0 or not v > 0 for n, v in deep.items()):
        return {}, (0, 0)
    return deep, (d0, d1)


def save(key: str, blocks: dict[int, float], step: float | None = None, interference: float = 1.0,
         quiet: bool = True, deep: dict[int, float] | None = None, depths: tuple[int, int] = (0, 0),
         rounds: int = 0) -> None:
    """Keep `blocks` (seconds per block size), a single step's cost and, for a drafter, how much
    slower the target's next step is after one of its steps, for `key`; `quiet`: measured on a machine
    that was not busy with other work, or settled by SETTLED_ROUNDS undisturbed rounds (else it is provisional:
    used, and refined by the `rounds` undisturbed rounds counted so far). Never raises."""
    entry: dict[str, Any] = {"blocks": {str(n): s for n, s in sorted(blocks.items())}, "step": step,
                             "interference": interference, "quiet": quiet, "rounds": 0 if quiet else rounds}
    if deep:
        entry["deep"] = {str(n): s for n, s in sorted(deep.items())}
        entry["depths"] = list(depths)
    kept_store.put(store_path(), key, entry, MAX_ENTRIES)
