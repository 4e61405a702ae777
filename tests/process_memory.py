"""A process's own resident memory, for tests and the soak script that watch for leaks."""
import os


def rss_mb() -> float:
    """Resident set size of this process in MiB (Linux: /proc/self/statm)."""
    with open("/proc/self/statm") as fh:
        pages = int(fh.read().split()[1])
    return pages * os.sysconf("SC_PAGE_SIZE") / 2**20
