"""The local server in the window: the loaded pair served to other programs, its requests shown live.

engine.frontends.serve answers HTTP on a thread of its own; this part is the `Engine` it submits jobs to.
A job goes to the ONE ordered engine thread as a queued slot call (EngineWorker.serve), in its turn among
the window's own replies and loads, so one model pair stays in memory. Its events come back as the
worker's signals and are folded, once per tick, into a StreamingReply without a store (as Compare's runs
are), which the Server dialog observes with the chat view and the stats panel. Off at every launch.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from PySide6.QtCore import QObject, Qt, QTimer, Signal

from engine.decoding.events import Event
from engine.errors import EngineError
from engine.frontends.serve import BackgroundServer, ServerOptions
from engine.frontends.serve_engine import ServedJob, ServedModel
from engine.frontends.serve_api import Endpoint

from app.control.pairing import Pairing
from app.control.preferences import Preferences
from app.control.replies import generation_settings_of
from app.control.streaming_reply import StreamingReply
from app.core.engine_thread.worker import EngineWorker, LoadedInfo
from app.history.records import Message, Role

FLUSH_MS = 40
"""How often served events reach the Server dialog, at most (as Replies.FLUSH_MS for the chat)."""
KEPT = 50
"""Served requests listed, newest first; older ones are forgotten (nothing of them is stored)."""
HOST = "127.0.0.1"
"""The window serves this machine only (`python -m engine serve --host` is for more)."""


@dataclass(frozen=True, slots=True)
class ServerState:
    """Whether the server listens, where, and what went wrong starting it."""

    running: bool
    url: str = ""
    """The base URL clients use (http://127.0.0.1:PORT/v1) while running."""
    error: str = ""
    """Why it could not start (a busy port), or ''."""
    keyed: bool = False
    """Clients must send the API key."""


class ServedReply(QObject):
    """One served request as the window shows it: its question and its live reply (no store)."""

    updated = Signal(object)
    """Its state changed (waiting → running → done or refused): this ServedReply."""

    def __init__(self, job: ServedJob, number: int, target: str, drafter: str) -> None:
        super().__init__()
        self.job = job
        self.number = number
        r = job.request
        asked = r.messages[-1]["content"] if r.endpoint is Endpoint.CHAT else r.prompt
        self.question = Message(-2 * number - 1, Role.USER, asked)
        self.message = Message(-2 * number - 2, Role.ASSISTANT, "", target, drafter)
        self.reply = StreamingReply(self.message, auto=r.settings.draft_max.is_auto)
        self.running = False
        self.finished = False

    @property
    def status(self) -> str:
        if self.job.error is not None:
            return f"refused ({self.job.error.kind.status}): {self.job.error.message}"
        if self.finished:
            done = self.reply.done
            if done is None:
                return "cancelled before it ran" if self.job.cancelled.is_set() else "ended"
            return f"{done.stats.tokens} tokens, {done.finish_reason.value}"
        return f"{len(self.message.tokens)} tokens…" if self.running else "waiting"


class LocalServer(QObject):
    """Starts and stops the server; runs its jobs on the engine thread (GUI thread, except `served`/`submit`)."""

    sig_state = Signal(object)
    """The server started, stopped or could not start (ServerState)."""
    sig_request = Signal(object)
    """A served request arrived (ServedReply): observe it."""
    _sig_submit = Signal(object)
    """A job for the engine thread (queued to EngineWorker.serve; emitted on the server's thread)."""
    _sig_arrived = Signal(object)
    """The same job, for this object on the GUI thread."""

    def __init__(self, prefs: Preferences, worker: EngineWorker, pairing: Pairing, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.prefs = prefs
        self.worker = worker
        self._server: BackgroundServer | None = None
        self._served: ServedModel | None = None
        self.requests: list[ServedReply] = []
        self._by_job: dict[int, ServedReply] = {}
        self._pending: dict[int, list[Event]] = {}
        self.state = ServerState(False)
        self._sig_submit.connect(worker.interrupt_read_ahead, Qt.ConnectionType.DirectConnection)
        self._sig_submit.connect(worker.serve, Qt.ConnectionType.QueuedConnection)
        self._sig_arrived.connect(self._arrived, Qt.ConnectionType.QueuedConnection)
        worker.sig_served.connect(self._event)
        worker.sig_served_finished.connect(self._finished)
        pairing.sig_loaded.connect(self._loaded)
        if pairing.loaded is not None:
            self._loaded(pairing.loaded)
        self._timer = QTimer(self)
        self._timer.setSingleShot(True)
        self._timer.setInterval(FLUSH_MS)
        self._timer.timeout.connect(self.flush)

    # -- the Engine the server submits to (its own thread) -------------------------------------------
    def served(self) -> ServedModel | None:
        return self._served

    def submit(self, job: ServedJob) -> None:
        self._sig_arrived.emit(job)  # first: the dialog lists it before its events come
        self._sig_submit.emit(job)

    # -- on and off -------------------------------------------------------------------------------------
    def start(self, port: int | None = None, key: str | None = None) -> ServerState:
        """Serve the loaded pair on 127.0.0.1:`port` (default: the setting), asking for `key` if given."""
        self.stop(announce=False)
        s = self.prefs.settings
        port = s.server_port if port is None else port
        key = s.server_key if key is None else key
        self.prefs.update(server_port=port, server_key=key)
        options = ServerOptions(api_key=key or None, live_defaults=lambda: generation_settings_of(self.prefs.settings))
        try:
            self._server = BackgroundServer(self, options, HOST, port).start()
        except (OSError, EngineError) as exc:
            self._server = None
            self.state = ServerState(False, error=str(exc))
        else:
            self.state = ServerState(True, self._server.url, keyed=bool(key))
        self.sig_state.emit(self.state)
        return self.state

    def stop(self, announce: bool = True) -> None:
        """Stop listening (a reply in progress is stopped; its client sees the stream end)."""
        server, self._server = self._server, None
        if server is not None:
            for r in self.requests:
                if not r.finished:
                    r.job.cancel()
            server.stop()
        if announce:
            self.state = ServerState(False)
            self.sig_state.emit(self.state)

    @property
    def running(self) -> bool:
        return self._server is not None

    def close(self) -> None:
        self.stop(announce=False)
        self.worker.sig_served.disconnect(self._event)
        self.worker.sig_served_finished.disconnect(self._finished)

    # -- the engine thread's news (GUI thread) ------------------------------------------------------------------
    def _loaded(self, info: LoadedInfo) -> None:
        self._served = ServedModel.named(Path(info.request.target), info.drafter_label, info.n_ctx)

    def _arrived(self, job: ServedJob) -> None:
        m = self._served
        r = ServedReply(job, (self.requests[0].number + 1) if self.requests else 1, m.target if m else "",
                        m.drafter if m else "")
        self.requests.insert(0, r)
        self._by_job[job.id] = r
        for old in self.requests[KEPT:]:
            if old.finished:
                self._by_job.pop(old.job.id, None)
        self.requests = [r for r in self.requests if r.job.id in self._by_job]
        self.sig_request.emit(r)

    def _event(self, job: ServedJob, ev: Event) -> None:
        self._pending.setdefault(job.id, []).append(ev)
        r = self._by_job.get(job.id)
        if r is not None and not r.running:
            r.running = True
            r.updated.emit(r)
        if not self._timer.isActive():
            self._timer.start()

    def flush(self) -> None:
        """Hand the events gathered since the last tick to their replies."""
        pending, self._pending = self._pending, {}
        for job_id, events in pending.items():
            r = self._by_job.get(job_id)
            if r is not None:
                r.reply.on_events(events)

    def _finished(self, job: ServedJob) -> None:
        self.flush()
        r = self._by_job.get(job.id)
        if r is None:
            return
        r.finished = True
        if job.error is not None:
            r.reply.on_failed(job.error)
        r.reply.on_finished()
        r.updated.emit(r)
