"""The HTTP machinery every capability that speaks HTTP shares, made once
per process: in a worker, once in the zygote and inherited by every fork
(DESIGN.md section 6), so a run pays only for its own connections and
requests (issue 12).

Made here, not per run: the modules httpx imports lazily (httpcore, h11 and
their parts), the SSL context with its CA bundle (the slow part of an
httpx client, made even for an http:// URL), and one `httpx.Client` whose
connection pool is empty when the zygote forks. Timeouts are given per
request, since each tool has its own `net`.

A request's `timeout_ms` is counted from when its headers are sent, found
through httpcore's trace events: the process's own work before that (a fork
under load, a program's computation) is not the service's wait. Connecting
is bounded by `connect_timeout_ms`, each read and write by `timeout_ms`.
"""

from __future__ import annotations

import ssl
import threading
import time
from collections.abc import Callable
from typing import Any

import httpx

_lock = threading.Lock()
_client: httpx.Client | None = None
_ssl_context: ssl.SSLContext | None = None

# httpcore's trace events when a request starts to go out on a connection.
_SENDING = ("http11.send_request_headers.started", "http2.send_request_headers.started")


def prepare() -> None:
    """Make the shared client (and import what it would import on first use):
    in the zygote, before any fork; anywhere else, at the first request."""
    _shared()


def _shared() -> httpx.Client:
    global _client, _ssl_context
    with _lock:
        if _client is None:
            _ssl_context = httpx.create_ssl_context(trust_env=False)
            _client = httpx.Client(verify=_ssl_context, follow_redirects=False, trust_env=False,
                                   timeout=None)
            _import_lazily_loaded(_client)
        return _client


def _import_lazily_loaded(shared: httpx.Client) -> None:
    """What httpx and httpcore import only when a request is first made or
    answered: imported here so no fork pays for it."""
    import encodings.idna  # noqa: F401  (a host name is IDNA-encoded; it imports stringprep)

    import h11  # noqa: F401
    import httpcore._sync.connection
    import httpcore._sync.connection_pool
    import httpcore._sync.http11  # noqa: F401
    import httpx._decoders

    request = shared.build_request("GET", "http://127.0.0.1/", headers={"x": "y"})
    answer = httpx.Response(200, request=request, content=b"{}",
                            headers={"content-type": "text/plain"})
    _ = answer.text, answer.encoding


def client() -> httpx.Client:
    return _client if _client is not None else _shared()


def timeout(timeout_ms: int, connect_timeout_ms: int) -> httpx.Timeout:
    """Connecting bounded by connect_timeout_ms; each read, each write and
    the wait for a pooled connection by timeout_ms."""
    return httpx.Timeout(timeout_ms / 1000, connect=connect_timeout_ms / 1000)


class SendClock:
    """When the request's headers started to go out (the start of the
    service's wait), from httpcore's trace; `started` falls back to when
    the clock was made if no trace event came (a transport that sends none)."""

    def __init__(self) -> None:
        self.made = time.monotonic()
        self.sent: float | None = None

    def trace(self, name: str, info: dict[str, Any]) -> None:
        if self.sent is None and name in _SENDING:
            self.sent = time.monotonic()

    @property
    def started(self) -> float:
        return self.sent if self.sent is not None else self.made

    def extensions(self) -> dict[str, Callable[[str, dict[str, Any]], None]]:
        return {"trace": self.trace}
