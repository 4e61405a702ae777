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
import os
import socket
import sys
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route
from sse_starlette.sse import EventSourceResponse

from engine.decoding.session import GenerationSettings, Session
from engine.errors import EngineError
from engine.frontends.serve_api import ApiError, Endpoint, ErrorKind, ReplyStream, parse_request
from engine.frontends.serve_engine import END, Engine, EngineThread, ServedJob, ServedModel

__all__ = ["BackgroundServer", "Engine", "EngineThread", "ServedJob", "ServedModel", "ServerOptions", "make_app",
           "exposure_warning"]

DEFAULT_PORT = 8080
DEFAULT_QUEUE = 8
"""Requests that may wait while one is generated; more get 429 (a client retries after Retry-After)."""


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
        if job.started_at is not None and job.ended_at is not None:  # it ran (a skipped one says nothing of the pace)
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
    live_defaults: Callable[[], GenerationSettings] | None = None
    """If given, read at each request instead of `defaults` (the app: its settings as they are now)."""


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
        defaults = options.live_defaults() if options.live_defaults is not None else options.defaults
        req = parse_request(body, endpoint, defaults, (served.id, served.target))
        admission.enter()
        job = ServedJob(req, asyncio.get_running_loop(), on_end=admission.leave)
        engine.submit(job)
        watcher = asyncio.create_task(_cancel_on_disconnect(request, job))
        try:
            first = await job.next()
            if isinstance(first, ApiError) or first is END:
                raise first if isinstance(first, ApiError) else ApiError(ErrorKind.ENGINE, "the reply ended unsaid")
            stream = ReplyStream(req)
            if req.stream:
                watcher.cancel()  # sse-starlette listens for the disconnect from here on
                return EventSourceResponse(_events(job, stream), sep="\n", ping=15)
            while (item := await job.next()) is not END:
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
        while (item := await job.next()) is not END:
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
    s.add_argument("--api-key", default=os.environ.get("DRAFTLIGHT_API_KEY"),
                   help="require 'Authorization: Bearer KEY' on every request (default: $DRAFTLIGHT_API_KEY, which "
                        "keeps the key out of the process list)")
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
