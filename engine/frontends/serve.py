"""`python -m engine serve`: an OpenAI-compatible local API that keeps the tokens' provenance.

Starlette answers HTTP (uvicorn serves it, sse-starlette frames the streams); the engine runs on one
ordered engine thread that owns the model pair (`Engine`: the command's own `EngineThread`, or the
app's engine thread: app.control.local_server). Requests run one at a time in the order they came:
one is generated while at most `queue` others wait their turn; past that a request gets 429 with a
Retry-After. A client that disconnects stops its reply within a round (its own StopRequest). The
shapes of requests and replies are engine.frontends.serve_api's; docs/serve.md describes them.
"""
from __future__ import annotations

import argparse
import asyncio
import hmac
import ipaddress
import json
import math
import queue
import socket
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route
from sse_starlette.sse import EventSourceResponse

from engine.decoding.events import Event
from engine.decoding.session import GenerationSettings, Session
from engine.errors import ContextFullError, EngineError
from engine.frontends.serve_api import (
    ApiError, Endpoint, ErrorKind, ReplyStream, ServeRequest, bad, parse_request,
)

DEFAULT_PORT = 8080
DEFAULT_QUEUE = 8
"""Requests that may wait while one is generated; more get 429 (a client retries after Retry-After)."""


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


_END = object()


class ServedJob:
    """One request on its way through the engine thread: `run` there, `next()` and `cancel()` on the server's."""

    _ids = iter(range(1, 1 << 62))

    def __init__(self, request: ServeRequest, loop: asyncio.AbstractEventLoop,
                 on_end: Callable[["ServedJob"], None] | None = None) -> None:
        self.id = next(ServedJob._ids)
        self.request = request
        self.cancelled = threading.Event()
        self.started_at = time.monotonic()
        self.ended_at: float | None = None
        self._loop = loop
        self._queue: asyncio.Queue = asyncio.Queue()
        self._on_end = on_end
        self._stop: threading.Event | None = None  # the running reply's stop request
        self.error: ApiError | None = None
        """Why the request was refused or failed (set on the engine thread before its end is sent)."""

    # -- the server's side (its event loop) ------------------------------------------------------
    async def next(self) -> Any:
        """The next item: Started, an engine Event, an ApiError, or _END."""
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
            self._put(_END)

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
            if item is _END and self._on_end is not None:
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


class Admission:
    """The bounded queue: one request runs, `waiting` more may wait; the rest are told when to come back.
    Used on the server's event loop only."""

    def __init__(self, waiting: int) -> None:
        self.limit = 1 + max(0, waiting)
        self.pending = 0
        """Requests admitted whose jobs have not ended (running or waiting)."""
        self._recent: deque[float] = deque(maxlen=8)  # seconds the last jobs took, for Retry-After

    def enter(self) -> None:
        if self.pending >= self.limit:
            mean = sum(self._recent) / len(self._recent) if self._recent else 1.0
            after = max(1, math.ceil(mean * self.pending))
            raise ApiError(ErrorKind.QUEUE_FULL, f"the server is busy: {self.pending} requests are running or "
                           f"waiting (at most {self.limit}); retry in {after} s", "queue_full",
                           headers={"Retry-After": str(after)})
        self.pending += 1

    def leave(self, job: ServedJob) -> None:
        self.pending -= 1
        if job.ended_at is not None:
            self._recent.append(job.ended_at - job.started_at)


@dataclass(frozen=True, slots=True)
class ServerOptions:
    """How the server answers (the command's flags, or the app's settings)."""

    defaults: GenerationSettings = GenerationSettings()
    """Sampling, max tokens and draft length where a request does not say (draft length: always these)."""
    api_key: str | None = None
    """Requests must send `Authorization: Bearer KEY` (None: no key is asked for)."""
    queue: int = DEFAULT_QUEUE
    """Requests that may wait while one is generated."""


def make_app(engine: Engine, options: ServerOptions = ServerOptions()) -> Starlette:
    """The ASGI app: /v1/models, /v1/chat/completions, /v1/completions, /health."""
    admission = Admission(options.queue)

    def check_key(request: Request) -> None:
        if options.api_key is None:
            return
        sent = request.headers.get("authorization", "")
        if not sent:
            raise ApiError(ErrorKind.UNAUTHORIZED, "You didn't provide an API key: send 'Authorization: Bearer KEY'",
                           "invalid_api_key")
        scheme, _, key = sent.partition(" ")
        if scheme.lower() != "bearer" or not hmac.compare_digest(key.strip().encode(), options.api_key.encode()):
            raise ApiError(ErrorKind.UNAUTHORIZED, "Incorrect API key provided", "invalid_api_key")

    def model() -> ServedModel:
        served = engine.served()
        if served is None:
            raise ApiError(ErrorKind.NO_MODEL, "no model is loaded: load a pair in Draftlight first", "no_model")
        return served

    async def models(request: Request) -> Response:
        check_key(request)
        m = engine.served()
        data = [] if m is None else [{
            "id": m.id, "object": "model", "created": m.created, "owned_by": "draftlight",
            "draftlight": {"target": m.target, "drafter": m.drafter, "n_ctx": m.n_ctx},
        }]
        return JSONResponse({"object": "list", "data": data})

    async def health(request: Request) -> Response:
        return JSONResponse({"status": "ok" if engine.served() is not None else "no_model",
                             "pending": admission.pending})

    async def generate(request: Request, endpoint: Endpoint) -> Response:
        check_key(request)
        body = await request.body()
        served = model()
        req = parse_request(body, endpoint, options.defaults, (served.id, served.target))
        admission.enter()
        job = ServedJob(req, asyncio.get_running_loop(), on_end=admission.leave)
        engine.submit(job)
        watcher = asyncio.create_task(_cancel_on_disconnect(request, job))
        try:
            first = await job.next()
            if isinstance(first, ApiError) or first is _END:
                raise first if isinstance(first, ApiError) else ApiError(ErrorKind.ENGINE, "the reply ended unsaid")
            stream = ReplyStream(req)
            if req.stream:
                watcher.cancel()  # sse-starlette listens for the disconnect from here on
                return EventSourceResponse(_events(job, stream), sep="\n", ping=15)
            while (item := await job.next()) is not _END:
                if isinstance(item, ApiError):
                    raise item
                stream.chunks(item)
            return JSONResponse(stream.whole())
        except BaseException:
            job.cancel()
            raise
        finally:
            watcher.cancel()

    async def chat(request: Request) -> Response:
        return await generate(request, Endpoint.CHAT)

    async def completions(request: Request) -> Response:
        return await generate(request, Endpoint.COMPLETION)

    async def api_error(request: Request, exc: ApiError) -> Response:
        return JSONResponse(exc.body(), status_code=exc.kind.status, headers=exc.headers)

    async def http_error(request: Request, exc: HTTPException) -> Response:
        kind = "not_found" if exc.status_code == 404 else "method_not_allowed" if exc.status_code == 405 else None
        return JSONResponse({"error": {"message": f"{request.method} {request.url.path}: {exc.detail}",
                                       "type": "invalid_request_error", "code": kind, "param": None}},
                            status_code=exc.status_code)

    routes = [Route("/v1/models", models, methods=["GET"]), Route("/health", health, methods=["GET"]),
              Route("/v1/chat/completions", chat, methods=["POST"]),
              Route("/v1/completions", completions, methods=["POST"])]
    return Starlette(routes=routes, exception_handlers={ApiError: api_error, HTTPException: http_error})


async def _cancel_on_disconnect(request: Request, job: ServedJob) -> None:
    """Cancel the job when the client goes away before its reply is sent (the body is read already)."""
    while (await request.receive())["type"] != "http.disconnect":
        pass
    job.cancel()


async def _events(job: ServedJob, stream: ReplyStream):
    """The SSE stream: OpenAI's chunks, then [DONE]; an engine error mid-way goes out as an error object."""
    try:
        if stream.chat:
            yield json.dumps(stream.opening(), ensure_ascii=False)
        while (item := await job.next()) is not _END:
            if isinstance(item, ApiError):
                yield json.dumps(item.body(), ensure_ascii=False)
                break
            for chunk in stream.chunks(item):
                yield json.dumps(chunk, ensure_ascii=False)
        yield "[DONE]"
    finally:
        job.cancel()  # the client went away (or all was sent: then nothing is left to stop)


def open_socket(host: str, port: int) -> socket.socket:
    """A listening socket on host:port (0: a free port), so a busy port is an OSError here, said in one line."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        raise OSError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None
    sock.listen(64)
    sock.setblocking(False)
    return sock


def is_loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return host == "localhost"


def exposure_warning(host: str, api_key: str | None) -> str | None:
    """What to tell the user when the server is reachable from other machines (None: loopback only)."""
    if is_loopback(host):
        return None
    key = "" if api_key else "; no API key is set, so anyone who reaches it can use it (--api-key)"
    return f"listening on {host}, not 127.0.0.1: other machines on the network can reach this server{key}"


class BackgroundServer:
    """The server on a thread of its own (the app, the tests): `start()` returns once it listens."""

    def __init__(self, engine: Engine, options: ServerOptions = ServerOptions(), host: str = "127.0.0.1",
                 port: int = 0) -> None:
        import uvicorn

        self._sock = open_socket(host, port)
        self.host, self.port = host, self._sock.getsockname()[1]
        config = uvicorn.Config(make_app(engine, options), log_level="warning", lifespan="off",
                                timeout_graceful_shutdown=2)
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(target=self._server.run, kwargs={"sockets": [self._sock]},
                                        name="local-server", daemon=True)

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}/v1"

    def start(self, timeout_s: float = 30.0) -> "BackgroundServer":
        self._thread.start()
        deadline = time.monotonic() + timeout_s
        while not self._server.started and self._thread.is_alive() and time.monotonic() < deadline:
            time.sleep(0.01)
        if not self._server.started:
            raise EngineError("the local server did not start")
        return self

    def stop(self) -> None:
        """Stop listening; replies in progress end (their clients see the stream cut)."""
        self._server.should_exit = True
        if self._thread.is_alive():
            self._thread.join(timeout=10)
        self._sock.close()


def cmd_serve(args) -> int:
    from engine.frontends.options import draft_load_settings, generation_settings, load_settings

    import uvicorn

    defaults = generation_settings(args)
    sock = open_socket(args.host, args.port)  # before loading: a busy port says so at once
    session = Session(args.target, args.draft, target_load=load_settings(args), draft_load=draft_load_settings(args))
    try:
        engine = EngineThread(session)
        options = ServerOptions(defaults, args.api_key or None, args.queue)
        for note in session.notes:
            print(f"note: {note}", file=sys.stderr)
        if (warning := exposure_warning(args.host, options.api_key)) is not None:
            print(f"warning: {warning}", file=sys.stderr)
        m = engine.served()
        host = f"[{args.host}]" if ":" in args.host else args.host
        print(f"serving {m.id} (drafter: {m.drafter}, context {m.n_ctx}) at http://{host}:{sock.getsockname()[1]}/v1"
              + (" (API key required)" if options.api_key else ""), file=sys.stderr, flush=True)
        config = uvicorn.Config(make_app(engine, options), log_level="warning", lifespan="off",
                                timeout_graceful_shutdown=2)
        uvicorn.Server(config).run(sockets=[sock])
        return 0
    finally:
        sock.close()
        session.close()


def register(sub) -> None:
    from engine.frontends.options import add_model_options, add_sampling_options

    s = sub.add_parser("serve", help="an OpenAI-compatible API on this machine (chat and completions, streamed "
                                     "with each token's provenance)")
    add_model_options(s)
    add_sampling_options(s)
    s.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1: this machine only)")
    s.add_argument("--port", type=int, default=DEFAULT_PORT, help=f"port (default {DEFAULT_PORT}; 0: a free one)")
    s.add_argument("--api-key", default=None, help="require 'Authorization: Bearer KEY' on every request")
    s.add_argument("--queue", type=_queue_arg, default=DEFAULT_QUEUE,
                   help=f"requests that may wait while one is generated; more get 429 (default {DEFAULT_QUEUE})")
    s.set_defaults(func=cmd_serve)


def _queue_arg(text: str) -> int:
    try:
        n = int(text)
    except ValueError:
        n = -1
    if n < 0:
        raise argparse.ArgumentTypeError("must be 0 or more")
    return n
