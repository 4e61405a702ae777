"""Run a plain function on Qt's thread pool and hear back on the GUI thread.

For short jobs that must not block the window (reading model headers, checking pairs). The
engine thread is kept for the session; downloads have their own threads (models dialog).
"""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

from PySide6.QtCore import QObject, QRunnable, QThreadPool, Signal, Slot


class _Relay(QObject):
    done = Signal(object)
    """The function returned this value."""
    failed = Signal(object)
    """The function raised this exception."""

    def __init__(self, on_done, on_failed) -> None:
        super().__init__()
        self.on_done, self.on_failed = on_done, on_failed
        # Slots of an object on the GUI thread: Qt queues the pool thread's emits to it.
        self.done.connect(self._done)
        self.failed.connect(self._failed)

    @Slot(object)
    def _done(self, value) -> None:
        _alive.discard(self)
        _call(self.on_done, value)

    @Slot(object)
    def _failed(self, exc) -> None:
        _alive.discard(self)
        if self.on_failed is not None:
            _call(self.on_failed, exc)


def _call(callback, value) -> None:
    try:
        callback(value)
    except RuntimeError as exc:
        # The widget that asked was closed meanwhile (its C++ side is gone): nobody to tell.
        if "already deleted" not in str(exc):
            raise


class _Job(QRunnable):
    def __init__(self, fn: Callable[[], Any], relay: _Relay) -> None:
        super().__init__()
        self.fn, self.relay = fn, relay

    def run(self) -> None:
        try:
            value = self.fn()
        except Exception as exc:  # noqa: BLE001 - handed to the GUI thread
            self.relay.failed.emit(exc)
        else:
            self.relay.done.emit(value)


_alive: set[_Relay] = set()


def run_in_background(fn: Callable[[], Any], on_done: Callable[[Any], None],
                      on_failed: Callable[[BaseException], None] | None = None) -> None:
    """Call `fn()` on a pool thread; `on_done(value)` or `on_failed(exc)` runs on the GUI thread."""
    relay = _Relay(on_done, on_failed)  # created on the GUI thread
    _alive.add(relay)
    QThreadPool.globalInstance().start(_Job(fn, relay))


def disconnect_all(links) -> None:
    """Undo (signal, slot) connections, skipping any Qt already dropped (an object already deleted)."""
    for sig, slot in links:
        try:
            sig.disconnect(slot)
        except (RuntimeError, TypeError):
            pass
