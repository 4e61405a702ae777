"""A real HTTP server on 127.0.0.1 that answers like the Hugging Face hub's file endpoint.

HEAD /{repo_id}/resolve/{revision}/{filename} answers 302 with the headers huggingface_hub
reads (X-Repo-Commit, X-Linked-Etag = the file's SHA-256, X-Linked-Size, Location) and points
to a "CDN" URL on another host name (localhost instead of 127.0.0.1, the same server), as the
hub does for large files; GET on the CDN URL serves the bytes, with Range support (206).
Unknown repos and files get 404 with the hub's X-Error-Code. Knobs imitate bad networks:
`drop_after` cuts the connection mid-file, `corrupt` serves other bytes than the ETag promises,
`outage_after_drop` keeps the server down after that, `stall_after` holds the transfer until `release` is set. Every request is recorded.
"""
from __future__ import annotations

import hashlib
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import unquote, urlparse

COMMIT = "0123456789abcdef0123456789abcdef01234567"


@dataclass
class Seen:
    method: str
    path: str
    range: str | None


@dataclass
class HubFile:
    data: bytes
    sha256: str = ""

    def __post_init__(self) -> None:
        self.sha256 = self.sha256 or hashlib.sha256(self.data).hexdigest()


@dataclass
class Knobs:
    drop_after: int | None = None  # cut the connection after this many body bytes (once)
    corrupt: bool = False  # flip bytes in the body (the ETag still names the good file)
    stall_after: int | None = None  # pause the body after this many bytes until `release` is set
    release: threading.Event = field(default_factory=threading.Event)
    fail_gets: int = 0  # answer this many GETs with 503
    outage_after_drop: int = 0  # after the drop, answer this many GETs with 503 (the server is down)
    size_says: int | None = None  # the size the metadata announces, whatever the file's (a hub that changed it)


class FakeHub:
    def __init__(self) -> None:
        self.files: dict[tuple[str, str], HubFile] = {}
        self.knobs = Knobs()
        self.seen: list[Seen] = []
        hub = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args) -> None:  # keep test output clean
                pass

            def do_HEAD(self) -> None:
                hub._handle(self, head=True)

            def do_GET(self) -> None:
                hub._handle(self, head=False)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.port = self.server.server_address[1]
        self.endpoint = f"http://127.0.0.1:{self.port}"
        self._thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        self._thread.start()

    def add(self, repo_id: str, filename: str, data: bytes) -> HubFile:
        f = HubFile(data)
        self.files[(repo_id, filename)] = f
        return f

    def close(self) -> None:
        self.knobs.release.set()
        self.server.shutdown()
        self.server.server_close()

    def ranges(self) -> list[str]:
        return [s.range for s in self.seen if s.method == "GET" and s.range]

    # -- protocol --------------------------------------------------------------------------------
    def _handle(self, h: BaseHTTPRequestHandler, head: bool) -> None:
        url = urlparse(h.path)
        self.seen.append(Seen("HEAD" if head else "GET", url.path, h.headers.get("Range")))
        parts = [unquote(p) for p in url.path.strip("/").split("/")]
        if len(parts) >= 5 and parts[2] == "resolve":
            return self._resolve(h, "/".join(parts[:2]), parts[3], "/".join(parts[4:]))
        if len(parts) == 2 and parts[0] == "cdn":
            return self._cdn(h, parts[1], head)
        self._empty(h, 404)

    def _empty(self, h, status: int, headers: dict[str, str] | None = None) -> None:
        h.send_response(status)
        for k, v in (headers or {}).items():
            h.send_header(k, v)
        h.send_header("Content-Length", "0")
        h.end_headers()

    def _resolve(self, h, repo_id: str, revision: str, filename: str) -> None:
        if not any(r == repo_id for r, _ in self.files):
            return self._empty(h, 404, {"X-Error-Code": "RepoNotFound", "X-Error-Message": "Repository not found"})
        f = self.files.get((repo_id, filename))
        if f is None:
            return self._empty(h, 404, {"X-Error-Code": "EntryNotFound", "X-Error-Message": "Entry not found",
                                        "X-Repo-Commit": COMMIT})
        # Large files: the hub redirects to a CDN host; the metadata rides on the redirect itself.
        self._empty(h, 302, {
            "Location": f"http://localhost:{self.port}/cdn/{f.sha256}",
            "X-Repo-Commit": COMMIT,
            "X-Linked-Etag": f'"{f.sha256}"',
            "X-Linked-Size": str(self.knobs.size_says if self.knobs.size_says is not None else len(f.data)),
            "ETag": '"0000000000000000000000000000000000000000"',
        })

    def _cdn(self, h, sha: str, head: bool) -> None:
        f = next((f for f in self.files.values() if f.sha256 == sha), None)
        if f is None:
            return self._empty(h, 404)
        if not head and self.knobs.fail_gets > 0:
            self.knobs.fail_gets -= 1
            return self._empty(h, 503)
        data = f.data
        if self.knobs.corrupt:
            mid = len(data) // 2
            data = data[:mid] + bytes(b ^ 0xFF for b in data[mid : mid + 64]) + data[mid + 64 :]
        start, status = 0, 200
        rng = h.headers.get("Range")
        if rng and rng.startswith("bytes="):
            start = int(rng[6:].split("-")[0])
            if start >= len(data):
                return self._empty(h, 416, {"Content-Range": f"bytes */{len(data)}"})
            status = 206
        body = data[start:]
        h.send_response(status)
        h.send_header("Content-Length", str(len(body)))
        h.send_header("ETag", f'"{f.sha256}"')
        h.send_header("Accept-Ranges", "bytes")
        if status == 206:
            h.send_header("Content-Range", f"bytes {start}-{len(data) - 1}/{len(data)}")
        h.end_headers()
        if head:
            return
        cut = self.knobs.drop_after
        if cut is not None:
            self.knobs.drop_after = None  # the network comes back for the next request...
            self.knobs.fail_gets = self.knobs.outage_after_drop  # ...unless the server stays down a while
            h.wfile.write(body[:cut])
            h.wfile.flush()
            h.close_connection = True
            return
        stall = self.knobs.stall_after
        sent = 0
        step = 1024 * 1024
        while sent < len(body):
            if stall is not None and sent >= stall:
                self.knobs.release.wait(30)
                stall = None
            piece = body[sent : sent + step]
            try:
                h.wfile.write(piece)
            except OSError:  # the client went away (cancelled): nothing more to do
                return
            sent += len(piece)
