"""How many threads a model's passes use now: all it was loaded with while the machine is ours, fewer
while other processes take cores.

llama.cpp's threads meet at a barrier after every operation of a pass and spin while they wait, so
one thread that the OS takes off its core for a time slice holds all the others up. On a 2-core Xeon
with one core taken by a busy process, two threads decoded 16x slower than on a quiet machine, and one
thread 8x faster than two (llama-bench tg 8.3 against 1.0 tok/s). So, between passes, the governor
reads how much CPU other processes used over the last half second or so (Linux: /proc/stat less this
process's own CPU time) and gives the model the cores they leave, and all of them back once they are
free again. Where /proc/stat is not there it leaves the threads as loaded.
"""
from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from engine.llama.threads import allowed_cpus

#: Seconds between two readings of the machine's load (a reading covers the time since the last).
INTERVAL_S = 0.5
#: A core is counted free when other processes used less than this share of it over a reading.
SPARE = 0.3
#: Readings in a row that must ask for the same change before threads change (one busy half-second,
#: a browser painting a page, does not).
STEADY = 2


@dataclass(frozen=True, slots=True)
class CpuReading:
    """Seconds of CPU time, as read at one moment: the whole machine's busy time and this process's."""

    wall: float
    machine_busy: float
    own: float


def read_proc_stat(cpus: set[int], path: Path = Path("/proc/stat")) -> float | None:
    """Seconds of CPU time the CPUs `cpus` spent on anything but idling and waiting on I/O, since boot
    (None: no /proc/stat, or none of those CPUs in it). Only the CPUs this process may use: load on
    the others takes no core from it."""
    try:
        lines = path.read_text(encoding="ascii", errors="replace").splitlines()
    except OSError:
        return None
    busy, seen = 0, False
    for line in lines:
        fields = line.split()
        if len(fields) < 6 or not fields[0].startswith("cpu") or not fields[0][3:].isdigit():
            continue
        if int(fields[0][3:]) not in cpus:
            continue
        try:
            ticks = [int(x) for x in fields[1:9]]
        except ValueError:
            return None
        # user nice system idle iowait irq softirq steal (guest time is inside user)
        busy += sum(ticks) - ticks[3] - (ticks[4] if len(ticks) > 4 else 0)
        seen = True
    return busy / os.sysconf("SC_CLK_TCK") if seen else None


def machine_reading(cpus: set[int] | None = None) -> CpuReading | None:
    busy = read_proc_stat(allowed_cpus() if cpus is None else cpus)
    if busy is None:
        return None
    return CpuReading(time.monotonic(), busy, time.process_time())


class ThreadGovernor:
    """Threads for single-token passes and for batches, following what other processes leave free.

    `reading` is called between passes once INTERVAL_S have passed on `clock` since the last call (a pass
    of the drafter takes milliseconds: reading /proc/stat before each would be work for nothing); None from
    it leaves the threads as they are. `cores`: the CPUs this process may use."""

    def __init__(self, full: int, full_batch: int, cores: int,
                 reading: Callable[[], CpuReading | None] | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.full, self.full_batch, self.cores = max(1, full), max(1, full_batch), max(1, cores)
        self.threads, self.threads_batch = self.full, self.full_batch
        if reading is None:
            cpus = allowed_cpus()
            reading = lambda: machine_reading(cpus)  # noqa: E731
        self._reading, self._clock = reading, clock
        self._last = reading()
        self._due = clock() + INTERVAL_S  # when the next reading is taken
        self._asked: tuple[int, int] | None = None  # the change the last readings asked for
        self._streak = 0
        self.others = 0.0
        """Cores other processes used over the last reading."""

    @property
    def reduced(self) -> bool:
        """Whether passes now run on fewer threads than the model was loaded with."""
        return (self.threads, self.threads_batch) != (self.full, self.full_batch)

    def want(self, others: float) -> tuple[int, int]:
        """Threads (single tokens, batches) for a machine where other processes use `others` cores."""
        free = max(1, int(self.cores - others + SPARE))
        return min(self.full, free), min(self.full_batch, free)

    def poll(self) -> tuple[int, int] | None:
        """Read the load if a reading is due; the new (threads, batch threads) where they change, else None."""
        t = self._clock()
        if t < self._due:
            return None
        self._due = t + INTERVAL_S
        last = self._last
        if last is None:
            self._last = self._reading()
            return None
        now = self._reading()
        if now is None or now.wall - last.wall < INTERVAL_S:
            return None
        self._last = now
        elapsed = now.wall - last.wall
        self.others = max(0.0, (now.machine_busy - last.machine_busy) - (now.own - last.own)) / elapsed
        want = self.want(self.others)
        if want == (self.threads, self.threads_batch):
            self._asked, self._streak = None, 0
            return None
        self._streak = self._streak + 1 if want == self._asked else 1
        self._asked = want
        if self._streak < STEADY:
            return None
        self.threads, self.threads_batch = want
        self._asked, self._streak = None, 0
        return want
