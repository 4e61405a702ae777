"""The benchmark's row for the served path (`bench --served`): a variant's reply through the local server,
streamed over HTTP and timed at the client, beside the same variant run directly and plain decoding.

The server (engine.frontends.serve) runs in this process on a free port of 127.0.0.1, over the bench's own
Session on its own engine thread; the bench waits for each reply, so the session is never used from two
threads at once. The client is the standard library's (urllib): what a client costs is not the server's.
Timing as the engine's own: tokens/s from the end of the prompt's read (the engine's prefill time, from the
reply's stats) to the last token's arrival; ttft and the gaps between tokens as the client saw them.
"""
from __future__ import annotations

import json
import threading
import time
import urllib.request
from typing import Any

from engine.decoding.session import GenerationSettings, Session
from engine.errors import EngineError
from engine.frontends.serve import BackgroundServer, ServerOptions
from engine.frontends.serve_engine import EngineThread

_servers: dict[int, tuple[BackgroundServer, EngineThread, dict[str, GenerationSettings]]] = {}


def _server_for(session: Session) -> tuple[BackgroundServer, EngineThread, dict[str, GenerationSettings]]:
    found = _servers.get(id(session))
    if found is None:
        holder = {"settings": GenerationSettings()}
        engine = EngineThread(session)
        server = BackgroundServer(engine, ServerOptions(live_defaults=lambda: holder["settings"])).start()
        found = _servers[id(session)] = (server, engine, holder)
    return found


def close_servers() -> None:
    """Stop the bench's servers (before its session closes)."""
    for server, engine, _ in _servers.values():
        server.stop()
        engine.close()
    _servers.clear()


def served_run(session: Session, messages: list[dict[str, str]], settings: GenerationSettings) -> dict[str, Any]:
    """One streamed reply through the server: token ids, per-round (drafted, accepted, drafter), the engine's
    stats, the finish reason, and the client's times (seconds from the request: each token's arrival, the end)."""
    server, engine, holder = _server_for(session)
    holder["settings"] = settings  # the draft length and sampling the direct runs use
    body = json.dumps({"model": engine.served().id, "messages": messages, "max_tokens": settings.max_tokens,
                       "temperature": settings.sampling.temperature, "stream": True,
                       "stream_options": {"include_usage": True}}).encode()
    req = urllib.request.Request(f"{server.url}/chat/completions", data=body,
                                 headers={"Content-Type": "application/json"})
    out: dict[str, Any] = {"token_ids": [], "arrivals": [], "rounds": [], "stats": None, "finish": None}
    t0 = time.perf_counter()
    with urllib.request.urlopen(req, timeout=3600) as resp:
        for raw in resp:
            line = raw.decode("utf-8").rstrip("\r\n")
            if not line.startswith("data: {"):
                continue
            chunk = json.loads(line[len("data: "):])
            if "error" in chunk:
                raise EngineError(f"the served reply failed: {chunk['error']['message']}")
            ext = chunk.get("draftlight", {})
            if "token_ids" in ext:
                now = time.perf_counter() - t0
                out["token_ids"] += ext["token_ids"]
                out["arrivals"] += [now] * len(ext["token_ids"])
                if "drafted" in ext:
                    out["rounds"].append((ext["drafted"], ext["drafted"], ext["accepted"], 0.0, 0.0, ext["drafter"]))
            out["stats"] = ext.get("stats", out["stats"])
            out["finish"] = ext.get("finish", out["finish"])
    out["wall_s"] = time.perf_counter() - t0
    idle = threading.Event()
    while not engine.idle():  # its last bookkeeping done before the bench uses the session again
        idle.wait(0.001)
    if out["stats"] is None:
        raise EngineError("the served reply ended without its stats")
    return out
