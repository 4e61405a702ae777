"""How many CPU threads llama.cpp should use, chosen as llama.cpp's own tools choose.

llama.cpp's common code defaults to the number of physical cores (hyper-threads share a core's
arithmetic units, and a token step is bound by them and by memory bandwidth). On top of that
this respects what the process may actually use: its CPU affinity and a cgroup CPU quota
(containers), which llama.cpp itself does not read.
"""
from __future__ import annotations

import math
import os
from pathlib import Path


def allowed_cpus() -> set[int]:
    try:
        return set(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return set(range(os.cpu_count() or 1))


def physical_cores(cpus: set[int], sysfs: Path = Path("/sys/devices/system/cpu")) -> int:
    """Distinct cores among `cpus` (hyper-thread siblings count once); len(cpus) where unknown."""
    cores = set()
    for cpu in cpus:
        try:
            siblings = (sysfs / f"cpu{cpu}" / "topology" / "thread_siblings_list").read_text().strip()
        except OSError:
            return len(cpus)
        cores.add(siblings)
    return len(cores) or len(cpus)


def cgroup_cpu_limit(root: Path = Path("/sys/fs/cgroup")) -> float | None:
    """CPUs a cgroup v2 quota allows ("max" = no limit), or None."""
    try:
        quota, period = (root / "cpu.max").read_text().split()[:2]
    except (OSError, ValueError):
        return None
    if quota == "max":
        return None
    return int(quota) / int(period)


def _override() -> int | None:
    """DRAFTLIGHT_THREADS pins both defaults (the tests use 1: on a shared machine llama.cpp's
    spinning threads slow each other down many times over)."""
    try:
        n = int(os.environ.get("DRAFTLIGHT_THREADS", ""))
    except ValueError:
        return None
    return n if n > 0 else None


def _within_quota(n: int) -> int:
    limit = cgroup_cpu_limit()
    if limit is not None:
        n = min(n, math.ceil(limit))
    return max(1, n)


def default_threads() -> int:
    """Threads for generating tokens: physical cores the process may use, within its quota."""
    pinned = _override()
    return pinned if pinned is not None else _within_quota(physical_cores(allowed_cpus()))


def default_batch_threads() -> int:
    """Threads for batches (prompts, verification blocks): every CPU the process may use, within its
    quota; a batch is bound by arithmetic, so hyper-threads help there."""
    pinned = _override()
    return pinned if pinned is not None else _within_quota(len(allowed_cpus()))
