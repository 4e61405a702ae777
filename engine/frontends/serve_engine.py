"""The engine's side of serving: a request as a job on the ONE ordered engine thread that owns the pair.

A `ServedJob` is made on the server's event loop and run on the engine thread (`run`), which sends its events
back to that loop thread-safely; `cancel()` from either side stops it within a round (its own StopRequest,
the engine.llama StopRequest of the reply it runs). `EngineThread` is the command's engine thread; the app
has its own (app.control.local_server submits to EngineWorker.serve).
"""
from __future__ import annotations

import asyncio
import queue
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from engine.decoding.events import Event
from engine.decoding.session import Session
from engine.errors import ContextFullError, EngineError
from engine.frontends.serve_api import ApiError, Endpoint, ErrorKind, ServeRequest, bad


@dataclass(frozen=True, slots=True)
class ServedModel:
    """The pair a server answers with, as GET /v1/models lists it."""

    id: str
    """The model id clients name: the target's file name without .gguf."""
    target: str
    """The target's file name."""
    drafter: str
    """The drafter as the engine names it ('none', 'lookup', a file name, 'lookup+FILE')."""
    n_ctx: int
    """Context length in tokens."""
    created: int = 0
    """When the target file was made (seconds since 1970), as OpenAI's `created`."""

    @classmethod
    def of(cls, session: Session) -> "ServedModel":
        return cls.named(Path(session.target.path), session.spec.label, session.target.n_ctx)

    @classmethod
    def named(cls, target: Path, drafter: str, n_ctx: int) -> "ServedModel":
        created = int(target.stat().st_mtime) if target.exists() else 0
        return cls(target.name.removesuffix(".gguf"), target.name, drafter, n_ctx, created)


@dataclass(frozen=True, slots=True)
class Started:
    """The request was read into the model's template and fits: its reply follows."""

    prompt_tokens: int


END = object()
"""The last item of a job: nothing more comes."""


class ServedJob:
    """One request on its way through the engine thread: `run` there, `next()` and `cancel()` on the server's."""

    _ids = iter(range(1, 1 << 62))

    def __init__(self, request: ServeRequest, loop: asyncio.AbstractEventLoop,
                 on_end: Callable[["ServedJob"], None] | None = None) -> None:
        self.id = next(ServedJob._ids)
        self.request = request
        self.cancelled = threading.Event()
        self.started_at: float | None = None
        """When the engine thread began it (None: not yet, or skipped as cancelled)."""
        self.ended_at: float | None = None
        self._loop = loop
        self._queue: asyncio.Queue = asyncio.Queue()
        self._on_end = on_end
        self._stop: threading.Event | None = None  # the running reply's stop request
        self.error: ApiError | None = None
        """Why the request was refused or failed (set on the engine thread before its end is sent)."""

    # -- the server's side (its event loop) ------------------------------------------------------
    async def next(self) -> Any:
        """The next item: Started, an engine Event, an ApiError, or END."""
        return await self._queue.get()

    def cancel(self) -> None:
        """The client is gone: a queued job is skipped, a running one stops within a round. Any thread."""
        self.cancelled.set()  # then read _stop (run writes them the other way round)
        stop = self._stop
        if stop is not None:
            stop.set()

    # -- the engine thread's side -------------------------------------------------------------------
    def run(self, session: Session | None) -> Iterator[Event]:
        """Generate the reply, sending each event to the server; yields them too, for a window that shows them."""
        try:
            if self.cancelled.is_set():
                return
            self.started_at = time.monotonic()
            if session is None:
                raise ApiError(ErrorKind.NO_MODEL, "no model is loaded: load a pair in Draftlight first", "no_model")
            events = self._start(session)
            self._stop = session.stop_event  # then read cancelled (cancel writes them the other way round)
            if self.cancelled.is_set():
                self._stop.set()
            for ev in events:
                self._put(ev)
                yield ev
        except ApiError as exc:
            self._fail(exc)
        except EngineError as exc:
            self._fail(ApiError(ErrorKind.ENGINE, str(exc), "engine_error"))
        except Exception as exc:  # noqa: BLE001 - a bug of ours: the client hears of it, the server stays up
            self._fail(ApiError(ErrorKind.ENGINE, f"internal error ({type(exc).__name__}: {exc})", "internal_error"))
        finally:
            self._stop = None
            self.ended_at = time.monotonic()
            self._put(END)

    def _start(self, session: Session) -> Iterator[Event]:
        """The reply's events, once the request is known to fit the context (else ApiError, before any)."""
        req, n_ctx = self.request, session.target.n_ctx
        if req.endpoint is Endpoint.COMPLETION:
            n = len(session.target.tokenize(req.prompt, add_special=True))
            if n >= n_ctx:
                raise _too_long(n, n_ctx, "prompt")
            events = session.complete(req.prompt, req.settings)
        else:
            try:
                rendered = session.render(list(req.messages))
            except ContextFullError as exc:
                raise _too_long(exc.needed, exc.holds or n_ctx, "messages") from None
            except EngineError as exc:  # the template refuses this conversation
                raise bad(str(exc), "messages") from None
            if rendered.dropped_messages:  # the app's rule drops old turns; an API client must hear of it
                raise _too_long(session.conversation_tokens(req.messages), n_ctx, "messages")
            n = len(rendered.tokens)
            events = session.reply(rendered, req.settings)
        self._put(Started(n))
        return events

    def _fail(self, exc: ApiError) -> None:
        self.error = exc
        self._put(exc)

    def _put(self, item: Any) -> None:
        try:
            self._loop.call_soon_threadsafe(self._queue.put_nowait, item)
            if item is END and self._on_end is not None:
                self._loop.call_soon_threadsafe(self._on_end, self)
        except RuntimeError:  # the server's loop has closed (shutting down): nobody listens
            pass


def _too_long(needed: int | None, holds: int, param: str) -> ApiError:
    size = f"{needed} tokens" if needed is not None else "longer than that"
    return bad(f"This model's maximum context length is {holds} tokens; the request is {size} "
               f"(chat template included). Shorten it, or load the model with a longer context.",
               param, "context_length_exceeded")


class Engine(Protocol):
    """Where served requests run: one ordered engine thread that owns the pair."""

    def served(self) -> ServedModel | None:
        """The pair loaded now (None: nothing is loaded)."""

    def submit(self, job: ServedJob) -> None:
        """Run `job.run(session)` on the engine thread, after whatever was submitted before it. Any thread."""


class EngineThread:
    """The command's engine thread: owns a Session and runs the jobs submitted to it, in order."""

    def __init__(self, session: Session, observe: Callable[[ServedJob, Event], None] | None = None) -> None:
        """`observe(job, event)`, if given, sees each event on the engine thread after its client was sent it."""
        self.session = session
        self._observe = observe
        self._model = ServedModel.of(session)
        self._jobs: queue.Queue[ServedJob | None] = queue.Queue()
        self._thread = threading.Thread(target=self._loop, name="engine", daemon=True)
        self._thread.start()

    def served(self) -> ServedModel:
        return self._model

    def submit(self, job: ServedJob) -> None:
        self._jobs.put(job)

    def _loop(self) -> None:
        while (job := self._jobs.get()) is not None:
            try:
                for ev in job.run(self.session):
                    if self._observe is not None:
                        self._observe(job, ev)
            finally:
                self._jobs.task_done()

    def idle(self) -> bool:
        """Nothing is queued or running."""
        return self._jobs.unfinished_tasks == 0

    def close(self) -> None:
        """Finish the job in progress, skip none queued, end the thread."""
        self._jobs.put(None)
        self._thread.join()
