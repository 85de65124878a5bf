"""A real local HTTP service that records every request with its headers.

Runs in a thread of the test process on 127.0.0.1, so a `staal` process
under test talks to it over TCP. Each route answers with a fixed status and
JSON body; `hold(path)` makes requests to a path wait until released, which
lets a test kill the client while the service has the request in hand.
"""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

WAIT = 10.0


@dataclass
class Request:
    method: str
    path: str
    headers: dict[str, str]
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)


@dataclass
class Hold:
    arrived: threading.Event = field(default_factory=threading.Event)
    release: threading.Event = field(default_factory=threading.Event)


class Recorder:
    def __init__(self) -> None:
        self.requests: list[Request] = []
        self.routes: dict[tuple[str, str], tuple[int, Any]] = {}
        # Headers a route answers with besides its content's.
        self.answer_headers: dict[tuple[str, str], dict[str, str]] = {}
        self.holds: dict[str, Hold] = {}
        self.connections = 0  # TCP connections accepted
        self.lock = threading.Lock()
        self.arrived = threading.Condition(self.lock)
        recorder = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def setup(self) -> None:
                super().setup()
                with recorder.lock:
                    recorder.connections += 1
                # Headers and body are two writes; without this a delayed ACK
                # adds 40 ms to an answer on a kept-alive connection.
                self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

            def log_message(self, *args: Any) -> None:
                pass

            def _handle(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                path = self.path
                request = Request(self.command, path, {k.lower(): v for k, v in self.headers.items()}, body)
                with recorder.lock:
                    recorder.requests.append(request)
                    recorder.arrived.notify_all()
                    hold = recorder.holds.get(path.split("?")[0])
                    status, payload = recorder.routes.get(
                        (self.command, path.split("?")[0]), (404, {"error": "no route"}))
                    extra = recorder.answer_headers.get((self.command, path.split("?")[0]), {})
                if hold is not None:
                    hold.arrived.set()
                    if not hold.release.wait(WAIT * 3):
                        return
                data = json.dumps(payload).encode()
                try:
                    self.send_response(status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(data)))
                    for name, value in extra.items():
                        self.send_header(name, value)
                    self.end_headers()
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):
                    pass

            do_GET = _handle
            do_POST = _handle

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def base(self) -> str:
        host, port = self.server.server_address[:2]
        return f"http://{host}:{port}"

    def route(self, method: str, path: str, status: int = 200, body: Any = None,
              headers: dict[str, str] | None = None) -> None:
        with self.lock:
            self.routes[(method, path)] = (status, {} if body is None else body)
            self.answer_headers[(method, path)] = dict(headers or {})

    def hold(self, path: str) -> Hold:
        hold = Hold()
        with self.lock:
            self.holds[path] = hold
        return hold

    def seen(self, method: str | None = None, path: str | None = None) -> list[Request]:
        with self.lock:
            return [r for r in self.requests
                    if (method is None or r.method == method)
                    and (path is None or r.path.split("?")[0] == path)]

    def start(self) -> Recorder:
        self.thread.start()
        return self

    def stop(self) -> None:
        for hold in self.holds.values():
            hold.release.set()
        self.server.shutdown()
        self.server.server_close()


@contextmanager
def serving(method: str, path: str, status: int = 200, body: Any = None) -> Iterator[Recorder]:
    """A started recorder answering one route, stopped afterwards."""
    recorder = Recorder().start()
    recorder.route(method, path, status, body)
    try:
        yield recorder
    finally:
        recorder.stop()
