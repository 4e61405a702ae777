"""Cyclic garbage is collected on the GUI thread only.

Python's cyclic collector runs in whichever thread happens to allocate when a generation's threshold is
crossed: the engine thread in the middle of a reply, a background job reading a model header. A cycle
that holds Qt wrappers (a closed window's widgets and the lambdas connected to them, a dialog) is then
deleted off the GUI thread while the GUI thread draws, and Qt's widgets are not thread-safe: the test
suite segfaulted so in CI (a window closed, its engine thread freeing the pair as it ended collected the
window, while the next window was being built). Reference counting is untouched: only what lies in a
cycle waits for the GUI thread's next tick, at most `INTERVAL_MS`.

The schedule is the interpreter's own (`gc.get_threshold`): a generation is collected when its count
has passed its threshold, oldest due first, as the automatic collector would have done at that moment.
"""
from __future__ import annotations

import gc

from PySide6.QtCore import QCoreApplication, QObject, QThread, QTimer

INTERVAL_MS = 250
"""How often the GUI thread looks at the collector's counts (a look costs a microsecond)."""

_NAME = "draftlight-gui-collector"


def collect_due() -> int | None:
    """Collect the oldest generation whose count has passed its threshold; returns it (None: none due).
    Call on the GUI thread (or where no Qt object can be in the garbage)."""
    counts, thresholds = gc.get_count(), gc.get_threshold()
    due = [g for g in range(3) if thresholds[g] and counts[g] > thresholds[g]]
    if not due:
        return None
    gc.collect(due[-1])
    return due[-1]


def collect_on_gui_thread() -> None:
    """Turn off the automatic collector and collect from a timer on the GUI thread instead; idempotent.
    Needs the QApplication; call on the GUI thread before starting threads that run Python code."""
    app = QCoreApplication.instance()
    if app is None or QThread.currentThread() is not app.thread():
        raise RuntimeError("collect_on_gui_thread needs the QApplication, on its thread")
    if app.findChild(QObject, _NAME) is None:
        ticker = QTimer(app)
        ticker.setObjectName(_NAME)
        ticker.setInterval(INTERVAL_MS)
        ticker.timeout.connect(collect_due)
        ticker.start()
    gc.disable()
