"""The HTTP machinery every capability that speaks HTTP shares, made once
per process: in a worker, once in the zygote and inherited by every fork
(DESIGN.md section 6), so a run pays only for its own connections and
requests (issue 12); and the one bounded exchange (`exchange`) each of them
sends its requests through.

Made here, not per run: the modules httpx imports lazily (httpcore, h11 and
their parts), the SSL context with its CA bundle (the slow part of an
httpx client, made even for an http:// URL), and one `httpx.Client` whose
connection pool is empty when the zygote forks. Timeouts are given per
request, since each tool has its own `net`. The client keeps no cookie: a
Set-Cookie would otherwise be sent again on a later request, unjournaled (a
resumed run would send what its first life did not), and in a process that
serves many runs, to a later caller's run.

An exchange's bounds are its `Limits`. Connecting is bounded by
`connect_timeout_ms`, each read and write by `timeout_ms`, and so is the
whole answer's arrival: counted from when the request's headers are sent,
found through httpcore's trace events (the process's own work before that, a
fork under load or a program's computation, is not the service's wait), or,
for a `whole` exchange, from its start, connecting included, and given up at
that deadline even inside one of httpx's phases. An answer larger than
`max_bytes` is not read further.
"""

from __future__ import annotations

import contextvars
import ssl
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from http.cookiejar import DefaultCookiePolicy
from typing import Any

import httpx

from staal.worker.errors import WorkerError

_lock = threading.Lock()
_client: httpx.Client | None = None
_ssl_context: ssl.SSLContext | None = None

# How long an idle connection is kept for a later request: in a worker that
# serves many runs, a connection outlives the run that opened it. Under the
# 5 s after which many servers close an idle one (Node's keepAliveTimeout;
# httpx's own default is 5 s too), so a request rarely goes out on a
# connection the server is closing as it arrives; when one does, a GET is
# an ActionFailed and an unkeyed POST is in doubt, as any POST whose answer
# was lost (docs/programs.md, net.http). The pool's sizes are httpx's.
KEEPALIVE_S = 4.0
_LIMITS = httpx.Limits(max_connections=100, max_keepalive_connections=20,
                       keepalive_expiry=KEEPALIVE_S)

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
                                   timeout=None, limits=_LIMITS)
            _client.cookies.jar.set_policy(DefaultCookiePolicy(allowed_domains=[]))  # stores none
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


def reason(exc: Exception) -> str:
    """An exchange's error as its messages name it: `ConnectError: ...`."""
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__


class TooSlow(WorkerError):
    """No complete answer within the exchange's `timeout_ms`."""

    kind = "too_slow"


@dataclass(frozen=True)
class Limits:
    """One exchange's bounds (the module's docstring says how they count)."""

    timeout_ms: int
    connect_timeout_ms: int
    max_bytes: int
    # timeout_ms bounds the exchange from its start, connecting included,
    # rather than from when the request goes out.
    whole: bool = False


@dataclass(frozen=True)
class Answer:
    status: int
    headers: httpx.Headers
    data: bytes | None  # None: larger than the limits' max_bytes, not read further
    encoding: str


def exchange(method: str, url: str, limits: Limits, headers: Mapping[str, str],
             **body: Any) -> Answer:
    """One request and its answer, within `limits`: TooSlow past its
    timeout; httpx's own errors as they come."""
    if not limits.whole:
        return _exchange(method, url, limits, headers, body)
    return _within(limits, lambda: _exchange(method, url, limits, headers, body))


def _exchange(method: str, url: str, limits: Limits, headers: Mapping[str, str],
              body: dict[str, Any]) -> Answer:
    limit = limits.timeout_ms / 1000
    clock = SendClock()
    with client().stream(method, url, headers=dict(headers),
                         timeout=timeout(limits.timeout_ms, limits.connect_timeout_ms),
                         extensions=clock.extensions(), **body) as response:
        data = bytearray()
        for chunk in response.iter_bytes():
            data += chunk
            if time.monotonic() - (clock.made if limits.whole else clock.started) > limit:
                raise TooSlow(f"no complete answer within {limits.timeout_ms} ms")
            if len(data) > limits.max_bytes:
                return Answer(response.status_code, response.headers, None,
                              response.encoding or "utf-8")
        return Answer(response.status_code, response.headers, bytes(data),
                      response.encoding or "utf-8")


def _within(limits: Limits, work: Callable[[], Answer]) -> Answer:
    """`work` given up after `timeout_ms` all told. httpx bounds each phase
    (connect, send, each read) but not their sum, so the exchange runs in a
    thread of its own that this one stops waiting for; given up, the thread
    still ends within httpx's own timeouts, and lets its connection go
    itself. It runs in this thread's context, so inside the broker's
    section."""
    answers: list[Answer] = []
    errors: list[BaseException] = []
    finished = threading.Event()
    context = contextvars.copy_context()

    def run() -> None:
        try:
            answers.append(context.run(work))
        except BaseException as exc:  # noqa: BLE001 - handed to the waiting thread
            errors.append(exc)
        finally:
            finished.set()

    threading.Thread(target=run, name="staal-http-exchange", daemon=True).start()
    if not finished.wait(limits.timeout_ms / 1000):
        raise TooSlow(f"no complete answer within {limits.timeout_ms} ms")
    if errors:
        raise errors[0]
    return answers[0]
