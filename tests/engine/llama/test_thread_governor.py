"""Threads follow what other processes leave free: readings the test writes, then a real busy process."""
from __future__ import annotations

import os
import subprocess
import sys
import time

import llama_cpp as lc
import pytest

from engine.llama import thread_governor as tg
from engine.llama.backend import LlamaModel
from engine.llama.types import LoadSettings, Logits
from engine.llama.thread_governor import CpuReading, ThreadGovernor, read_proc_stat

STAT = """cpu  900 0 100 5000 0 0 0 0 0 0
cpu0 100 10 20 3000 40 1 2 3 50 0
cpu1 400 0 60 1000 0 0 0 7 0 0
cpu2 5 5 5 5 5 5 5 5 0 0
intr 1 2 3
"""


def test_busy_time_is_summed_over_the_cpus_this_process_may_use(tmp_path):
    path = tmp_path / "stat"
    path.write_text(STAT)
    hz = os.sysconf("SC_CLK_TCK")
    # cpu0: user 100 + nice 10 + system 20 + irq 1 + softirq 2 + steal 3 (idle 3000, iowait 40 and guest 50 left out)
    assert read_proc_stat({0}, path) == pytest.approx(136 / hz)
    assert read_proc_stat({0, 1}, path) == pytest.approx((136 + 467) / hz)
    assert read_proc_stat({2}, path) == pytest.approx(30 / hz)
    assert read_proc_stat({7}, path) is None  # none of ours in it
    assert read_proc_stat({0}, tmp_path / "missing") is None
    path.write_text("cpu0 1 2 x 4 5 6 7 8\n")
    assert read_proc_stat({0}, path) is None


class Clock:
    """Readings the test writes: other processes use `others` cores, this one `own`."""

    def __init__(self) -> None:
        self.t = self.busy = self.mine = 0.0
        self.others, self.own = 0.0, 2.0
        self.available = True

    def advance(self, seconds: float) -> None:
        self.t += seconds
        self.busy += (self.others + self.own) * seconds
        self.mine += self.own * seconds

    def __call__(self) -> CpuReading | None:
        return CpuReading(self.t, self.busy, self.mine) if self.available else None


def step(g: ThreadGovernor, clock: Clock, seconds: float = 0.6):
    clock.advance(seconds)
    return g.poll()


def test_a_busy_core_takes_a_thread_away_and_gives_it_back_once_free():
    clock = Clock()
    g = ThreadGovernor(2, 2, cores=2, reading=clock, clock=lambda: clock.t)
    assert (g.threads, g.threads_batch, g.reduced) == (2, 2, False)
    assert step(g, clock) is None  # quiet
    clock.others = 1.0
    assert step(g, clock) is None  # one busy reading is not enough
    assert g.others == pytest.approx(1.0)
    assert step(g, clock) == (1, 1)
    assert (g.threads, g.reduced) == (1, True)
    clock.own = 1.0
    assert [step(g, clock) for _ in range(3)] == [None] * 3  # still busy: stays at one
    clock.others = 0.0
    assert step(g, clock) is None
    assert step(g, clock) == (2, 2)
    assert not g.reduced


def test_a_brief_burst_changes_nothing_and_readings_come_at_most_every_interval():
    clock = Clock()
    g = ThreadGovernor(2, 2, cores=2, reading=clock, clock=lambda: clock.t)
    clock.others = 1.0
    assert step(g, clock) is None
    clock.others = 0.0
    assert step(g, clock) is None  # the burst is over before a second reading asked for it
    clock.others = 1.0
    read = []
    g._reading = lambda: read.append(clock.t) or clock()
    assert step(g, clock, 0.2) is None and step(g, clock, 0.2) is None  # 0.4 s: no reading yet
    assert read == []  # /proc/stat is not even read before a reading is due
    assert step(g, clock, 0.2) is None  # the first busy reading (0.6 s)
    assert step(g, clock) == (1, 1)


def test_part_of_a_core_and_more_cores_than_threads():
    clock = Clock()
    g = ThreadGovernor(4, 8, cores=8, reading=clock, clock=lambda: clock.t)
    clock.others = 3.0  # 5 cores left: the 4 single-token threads stay, batches get 5
    assert [step(g, clock) for _ in range(2)] == [None, (4, 5)]
    clock.others = 0.2  # a fifth of a core busy counts as free
    assert [step(g, clock) for _ in range(2)] == [None, (4, 8)]
    clock.others = 7.9  # never below one thread
    assert [step(g, clock) for _ in range(2)] == [None, (1, 1)]


def test_no_reading_leaves_the_threads_as_loaded():
    clock = Clock()
    clock.available = False
    g = ThreadGovernor(2, 2, cores=2, reading=clock, clock=lambda: clock.t)
    clock.others = 2.0
    assert [step(g, clock) for _ in range(4)] == [None] * 4
    assert (g.threads, g.threads_batch) == (2, 2)


def test_threads_asked_for_are_never_governed(tiny):
    m = LlamaModel(tiny["target"], LoadSettings(n_ctx=256, n_threads=2, n_threads_batch=2))
    try:
        assert m.governor is None and m.threads_now == (2, 2)
    finally:
        m.close()


def test_a_real_busy_process_takes_a_thread_and_gives_it_back(tiny, monkeypatch):
    """A busy loop pinned to one of two CPUs: the model's passes drop to one thread, and go back to two
    once the loop is killed (llama.cpp runs the passes; what the governor reads is the test's: this process's
    CPU time and the loop's core while it lives, not the rest of the machine, so the test holds beside other work)."""
    mine = sorted(os.sched_getaffinity(0))
    assert len(mine) >= 2, "this test needs two CPUs"
    cpus = set(mine[:2])
    monkeypatch.delenv("DRAFTLIGHT_THREADS", raising=False)
    monkeypatch.setattr(tg, "allowed_cpus", lambda: cpus)
    monkeypatch.setattr("engine.llama.backend.allowed_cpus", lambda: cpus)
    monkeypatch.setattr("engine.llama.backend.default_threads", lambda: 2)
    monkeypatch.setattr("engine.llama.backend.default_batch_threads", lambda: 2)
    # The governor judges the load the test makes and nothing else: while the test's busy loop lives it counts
    # as one whole core taken (what it takes on a machine with nothing else to do), and as nothing once it is
    # killed; the rest of the machine is not read, so another job can neither take a thread nor keep one away.
    # llama.cpp still runs every pass, on the threads the governor gives it.
    child: dict[str, float | None] = {"since": None, "seconds": 0.0}

    def child_cpu() -> float:
        if child["since"] is not None:
            child["seconds"] = time.monotonic() - child["since"]
        return float(child["seconds"])

    def test_load(cpus_asked=None) -> tg.CpuReading:
        own = time.process_time()
        return tg.CpuReading(time.monotonic(), own + child_cpu(), own)

    monkeypatch.setattr(tg, "machine_reading", test_load)
    m = LlamaModel(tiny["target"], LoadSettings(n_ctx=512))
    assert m.governor is not None

    def decode_until(want: tuple[int, int], seconds: float = 8.0) -> list:
        """Decode until the model runs on `want` threads (or `seconds` pass): what was seen, last last."""
        seen, end = [], time.monotonic() + seconds
        while time.monotonic() < end:
            m.clear()
            m.decode(list(range(5, 37)), Logits.LAST)
            for t in range(8):
                m.decode([40 + t], Logits.LAST)
            # what llama.cpp itself holds for the context, beside what the governor says
            seen.append((m.threads_now, (lc.llama_n_threads(m._ctx), lc.llama_n_threads_batch(m._ctx))))
            if seen[-1] == (want, want):
                break
        return seen

    busy = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    child["since"] = time.monotonic()
    try:
        os.sched_setaffinity(busy.pid, {mine[1]})
        under_load = decode_until((1, 1))
        assert under_load[-1] == ((1, 1), (1, 1)), under_load[-5:]
    finally:
        busy.kill()
        busy.wait()
        child_cpu()
        child["since"] = None
    try:
        quiet = decode_until((2, 2))
        assert quiet[-1] == ((2, 2), (2, 2)), quiet[-5:]
    finally:
        m.close()


class Ticking(Clock):
    """Each look at the clock is 0.6 s after the last: the test's clock, not the machine's."""

    def now(self) -> float:
        self.advance(0.6)
        return self.t


def test_rounds_say_when_the_target_ran_on_fewer_threads(tiny, monkeypatch):
    """A real reply on the tiny target, loaded with two threads, while the test's readings say another
    process takes a core: after two readings the passes run on one thread (llama.cpp's context says so),
    and the rounds from then on carry (1, 2); once the core is free again they carry nothing."""
    from engine.decoding.events import RoundEvent
    from engine.decoding.session import GenerationSettings, Session

    monkeypatch.delenv("DRAFTLIGHT_THREADS", raising=False)
    monkeypatch.setattr("engine.llama.backend.default_threads", lambda: 2)
    monkeypatch.setattr("engine.llama.backend.default_batch_threads", lambda: 2)
    s = Session(tiny["target"], None, calibrate=False)
    clock = Ticking()

    def reply() -> list:
        return [e for e in s.complete("hello world", GenerationSettings(draft_max=0, max_tokens=8))
                if isinstance(e, RoundEvent)]

    try:
        s.target.governor = ThreadGovernor(2, 2, cores=2, reading=clock, clock=clock.now)
        assert all(r.threads is None for r in reply()) and lc.llama_n_threads(s.target._ctx) == 2
        clock.others = 1.0
        rounds = reply()
        assert rounds[-1].threads == (1, 2) and lc.llama_n_threads(s.target._ctx) == 1
        clock.others = 0.0
        rounds = reply()
        assert rounds[-1].threads is None and lc.llama_n_threads(s.target._ctx) == 2
    finally:
        s.close()


def test_two_different_asks_in_a_row_change_nothing_and_a_late_first_reading_starts_the_count():
    clock = Clock()
    g = ThreadGovernor(4, 8, cores=8, reading=clock, clock=lambda: clock.t)
    clock.others = 3.0  # asks for (4, 5)
    assert step(g, clock) is None
    clock.others = 4.0  # asks for (4, 4): another change, so its count starts again
    assert step(g, clock) is None and (g.threads, g.threads_batch) == (4, 8)
    assert step(g, clock) == (4, 4)
    # /proc/stat missing at first, there later: the first reading only starts the count
    clock = Clock()
    clock.available = False
    g = ThreadGovernor(2, 2, cores=2, reading=clock, clock=lambda: clock.t)
    clock.others = 1.0
    assert step(g, clock) is None
    clock.available = True
    assert [step(g, clock) for _ in range(3)] == [None, None, (1, 1)]
    one = ThreadGovernor(1, 1, cores=2, reading=Clock(), clock=lambda: 0.0)
    assert (one.threads, one.threads_batch) == (1, 1)
