"""Long model jobs (downloads, installing the default pair, importing a file) on their own threads.

A Task is the app's one worker type (app.core.background.Worker) with progress and a state. It
outlives the dialog that started it (the controller keeps them), so closing the Models dialog does
not cut a download; reopening it shows the progress again. Each job gets a
`report(what, fraction, detail)` callable and the worker's cancel Event; progress reaches the GUI
thread as queued signals, at most a few per second.
"""
from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from PySide6.QtCore import Signal

from app.core.background import Worker


class TaskState(StrEnum):
    """Where a task is."""

    RUNNING = "running"
    DONE = "done"
    FAILED = "failed"
    CANCELLED = "cancelled"


@dataclass(frozen=True, slots=True)
class Progress:
    """One progress report."""

    what: str
    """The file or step in progress."""
    fraction: float | None
    """0-1, or None when the total is unknown."""
    detail: str
    """e.g. '312 MB of 1.1 GB, 12 MB/s, 1 min left'."""


Report = Callable[[str, float | None, str], None]


class Task(Worker):
    """One job; `key` names it (e.g. 'download:qwen2.5-coder-1.5b'). `cancel` (the worker's) asks it to stop."""

    sig_progress = Signal(object)
    """A Progress report."""
    sig_finished = Signal(object)
    """The task ended (this Task; see .state, .result, .error)."""

    def __init__(self, key: str, title: str, job: Callable[[Report, threading.Event], Any],
                 cancelled_types: tuple[type[BaseException], ...] = ()) -> None:
        super().__init__(None, name=f"task-{key}")
        self.key, self.title = key, title
        self.state = TaskState.RUNNING
        self.result: Any = None
        self.error: BaseException | None = None
        self.last: Progress | None = None
        self.use_pair = False
        """When the job yields a (target, drafter) pair: make it the current pair once done."""
        self._job = job
        self._cancelled_types = cancelled_types
        self._last_emit = 0.0
        self._last_fraction = -1.0
        self._last_what = ""

    def _report(self, what: str, fraction: float | None, detail: str = "") -> None:
        now = time.monotonic()
        moved = fraction is not None and abs(fraction - self._last_fraction) >= 0.005
        if now - self._last_emit < 0.1 and not moved and what == self._last_what:
            return  # a few reports per second is plenty for a progress bar; a visible step always goes
        self._last_emit, self._last_what = now, what
        self._last_fraction = fraction if fraction is not None else self._last_fraction
        self.last = Progress(what, fraction, detail)
        self.tell(self.sig_progress, self.last)

    def work(self) -> Any:
        return self._job(self._report, self.cancel)

    def _ended(self, value: Any, error: BaseException | None) -> None:
        # On the task's thread: the state is set before anyone hears that it ended.
        if error is None:
            self.result, self.state = value, TaskState.DONE
        else:
            self.error = error
            cancelled = self.cancel.is_set() or isinstance(error, self._cancelled_types)
            self.state = TaskState.CANCELLED if cancelled else TaskState.FAILED
        super()._ended(value, error)
        self.tell(self.sig_finished, self)


def rate_detail(done: int, total: int | None, bytes_per_s: float) -> str:
    from app.control.model_scan import human_bytes

    out = human_bytes(done) + (f" of {human_bytes(total)}" if total else "")
    if bytes_per_s > 0:
        out += f", {human_bytes(bytes_per_s)}/s"
        if total:
            left = max(total - done, 0) / bytes_per_s
            out += f", {left / 60:.0f} min left" if left >= 90 else f", {left:.0f} s left"
    return out
