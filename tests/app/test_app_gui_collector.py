"""Cyclic garbage that holds Qt widgets is collected on the GUI thread, never on the thread that happened
to allocate (app.core.gui_collector): CI once segfaulted when a closed window's widgets were collected on
its engine thread while the next window was being built."""
from __future__ import annotations

import gc
import threading
import weakref
from collections.abc import Iterator
from contextlib import contextmanager

from PySide6.QtWidgets import QLabel

from app.control.controller import engine_threads_running
from app_support import install_tiny, open_window, send


class _Cycle:
    """An object that refers to itself and holds a widget: only the cyclic collector frees it."""

    def __init__(self, seen: list[str]) -> None:
        self.me = self
        self.label = QLabel("a closed dialog's label")
        weakref.finalize(self, lambda: seen.append(threading.current_thread().name))


def _allocate_on_a_thread(name: str) -> list[list[int]]:
    """What a job on thread `name` made: far more objects than the youngest generation's threshold (700)."""
    kept: list[list[int]] = []
    job = threading.Thread(target=lambda: kept.extend([i] for i in range(20_000)), name=name)
    job.start()
    job.join()
    return kept


@contextmanager
def collections_by_thread() -> Iterator[set[int]]:
    """The idents of the threads every collection ran on, while in the block."""
    threads: set[int] = set()

    def note(phase: str, _info: dict) -> None:
        if phase == "start":
            threads.add(threading.get_ident())

    gc.callbacks.append(note)
    try:
        yield threads
    finally:
        gc.callbacks.remove(note)


def test_a_cycle_holding_a_widget_is_collected_on_the_gui_thread_not_where_allocation_crossed_the_threshold(
        qtbot, tiny, isolated_home):
    install_tiny(tiny, isolated_home, max_tokens=8)
    open_window(qtbot)  # its controller hands the collector to the GUI thread
    seen: list[str] = []
    gc.collect()  # from here the garbage below is the youngest, and the job's allocations cross the threshold
    _Cycle(seen)
    made = _allocate_on_a_thread("job")
    assert seen == []  # the automatic collector would have freed it there, on "job"
    qtbot.waitUntil(lambda: bool(seen), timeout=5_000)  # the GUI thread's next tick
    assert seen == [threading.main_thread().name]
    del made


def test_no_collection_runs_on_the_engine_thread_as_it_streams_a_reply_or_frees_the_pair(qtbot, tiny, isolated_home):
    install_tiny(tiny, isolated_home, max_tokens=8)
    w = open_window(qtbot)
    with collections_by_thread() as threads:
        for _ in range(3):
            send(qtbot, w, "hello")
        w.close()
        qtbot.waitUntil(lambda: not engine_threads_running(), timeout=30_000)
    assert threads <= {threading.main_thread().ident}


def test_what_is_due_is_the_oldest_generation_past_its_threshold_as_the_interpreter_would_collect():
    from app.core.gui_collector import collect_due

    threshold, was_on = gc.get_threshold(), gc.isenabled()
    gc.disable()
    kept: list[list[int]] = []
    try:
        gc.collect()
        gc.set_threshold(50, 3, 2)
        assert collect_due() is None  # nothing allocated since the full collection
        kept += [[] for _ in range(100)]
        assert collect_due() == 0
        assert gc.get_count()[1] == 1  # one young collection counted towards the middle generation
        for _ in range(3):
            kept += [[] for _ in range(100)]
            assert collect_due() == 0
        kept += [[] for _ in range(100)]
        assert collect_due() == 1  # 4 young collections > 3: the middle generation, with the young one
        assert gc.get_count()[1:] == (0, 1)
        for _ in range(2):
            for _ in range(4):
                kept += [[] for _ in range(100)]
                collect_due()
            kept += [[] for _ in range(100)]
            collect_due()
        assert gc.get_count()[2] == 3
        kept += [[] for _ in range(100)]
        assert collect_due() == 2  # 3 > 2: everything
        assert gc.get_count()[1:] == (0, 0)
        gc.set_threshold(0)  # the interpreter's "never": nor here
        kept += [[] for _ in range(1000)]
        assert collect_due() is None
    finally:
        gc.set_threshold(*threshold)
        if was_on:
            gc.enable()
