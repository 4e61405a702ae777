"""Background work: the one worker type of the app, and a short way to run a plain function with it.

A Worker runs one function on a thread of its own and hands its outcome to the GUI thread, as superqt's
`create_worker` / `FunctionWorker` do (a small type here rather than a new dependency): `returned` and
`errored` are emitted from the worker's thread and queued by Qt to the Worker, which lives on the GUI
thread; `cancel` is the abort flag, set directly from the GUI thread (the worker is busy, a queued slot
would wait). Short jobs that must not block the window (reading model headers, checking pairs) use
`run_in_background`; long model jobs (downloads, imports) are Workers with progress
(app.control.tasks.Task). The engine thread is apart and ordered (app.core.engine_thread).

Threads are daemons: closing the window never waits for a job; a job's late answer to a closed widget is
dropped, and so is one that ends after the app's exit has deleted its Worker (PySide deletes the QObjects Python
still holds as the interpreter exits, while a daemon job may still run). Short jobs run at most a few at a time
(as on a thread pool: attaching fifty files reads a few at once); a long job never holds up a short one.
"""
from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Callable
from typing import Any

from PySide6.QtCore import QObject, Signal, Slot


class Worker(QObject):
    """`fn()` on a thread of its own; what it returns or raises reaches the GUI thread.

    Create it on the GUI thread. `on_done(value)` / `on_failed(exc)`, when given, are called there;
    `returned` / `errored` can be connected as well."""

    returned = Signal(object)
    """The function returned this value (emitted from the worker's thread)."""
    errored = Signal(object)
    """The function raised this exception (emitted from the worker's thread)."""

    def __init__(self, fn: Callable[[], Any] | None, name: str = "worker",
                 on_done: Callable[[Any], None] | None = None,
                 on_failed: Callable[[BaseException], None] | None = None,
                 turns: threading.Semaphore | None = None) -> None:
        """`turns`: shared with other workers, so that only so many run at once (None: this one is never held up)."""
        super().__init__()
        self.cancel = threading.Event()
        """Set from the GUI thread to ask the function to stop (it reads it between steps)."""
        self._fn = fn
        self._on_done, self._on_failed = on_done, on_failed
        self._turns = turns
        # Slots of an object on the GUI thread: Qt queues the worker thread's emits to them.
        self.returned.connect(self._deliver_value)
        self.errored.connect(self._deliver_error)
        self._name = name
        self._thread: threading.Thread | None = None  # made on start: until then nothing holds this worker but its owner

    def start(self) -> None:
        _alive.add(self)  # nobody else may hold it (run_in_background): kept until its outcome is delivered
        self._thread = threading.Thread(target=self._run, name=self._name, daemon=True)
        self._thread.start()

    def wait(self, timeout: float | None = None) -> bool:
        """Wait for the function to end, at most `timeout` seconds; True when it has (or never started)."""
        if self._thread is None:
            return True
        self._thread.join(timeout)
        return not self._thread.is_alive()

    def _run(self) -> None:
        value, error = None, None
        with self._turns or contextlib.nullcontext():
            try:
                value = self.work()
            except BaseException as exc:  # noqa: BLE001 - handed to the GUI thread
                error = exc
        self._ended(value, error)

    def work(self) -> Any:
        """What runs on the worker's thread: `fn()` (a subclass may do more, without a closure over itself,
        which would keep the QObject for the cyclic collector to free on whatever thread it runs)."""
        assert self._fn is not None
        return self._fn()

    def _ended(self, value: Any, error: BaseException | None) -> None:
        """On the worker's thread, as the function ends (a subclass notes the outcome first)."""
        if error is None:
            self.tell(self.returned, value)
        else:
            self.tell(self.errored, error)

    def tell(self, signal: Any, value: Any) -> None:
        """Emit `signal(value)` from the worker's thread. Where the app's exit has already deleted this QObject,
        nobody is left to hear it: the value is dropped and the job is asked to stop (it reads `cancel` between
        steps)."""
        try:
            signal.emit(value)
        except RuntimeError as exc:
            if "deleted" not in str(exc):  # PySide: "Signal source has been deleted"
                raise
            self.cancel.set()

    @Slot(object)
    def _deliver_value(self, value) -> None:
        self._let_go()
        if self._on_done is not None:
            _call(self._on_done, value)

    @Slot(object)
    def _deliver_error(self, error) -> None:
        self._let_go()
        if self._on_failed is not None:
            _call(self._on_failed, error)

    def _let_go(self) -> None:
        # The thread is past its emit (a few lines from its end): once it has ended, nothing on it holds this
        # QObject, so the last reference goes here, on the GUI thread, where a QObject must be deleted.
        self.wait()
        _alive.discard(self)


def _call(callback, value) -> None:
    try:
        callback(value)
    except RuntimeError as exc:
        # The widget that asked was closed meanwhile (its C++ side is gone): nobody to tell.
        if "already deleted" not in str(exc):
            raise


_alive: set[Worker] = set()
_SHORT_TURNS = threading.BoundedSemaphore(max(2, os.cpu_count() or 2))
"""Short jobs at once (Qt's global thread pool allowed as many)."""


def run_in_background(fn: Callable[[], Any], on_done: Callable[[Any], None],
                      on_failed: Callable[[BaseException], None] | None = None) -> Worker:
    """Call `fn()` on a worker thread; `on_done(value)` or `on_failed(exc)` runs on the GUI thread."""
    worker = Worker(fn, "background", on_done, on_failed, _SHORT_TURNS)  # created on the GUI thread
    worker.start()
    return worker


def disconnect_all(links) -> None:
    """Undo (signal, slot) connections, skipping any Qt already dropped (an object already deleted)."""
    for sig, slot in links:
        try:
            sig.disconnect(slot)
        except (RuntimeError, TypeError):
            pass
