"""What a connection to the MCP endpoint may hold before any credential is
checked (issues 13 and 24): uvicorn's httptools protocol with its request
heads bounded in size and time, and a gate shared by one server's
connections that keeps connections waiting for a request apart from the
requests in progress.

uvicorn's own `limit_concurrency` counts every open connection, so sockets
that never send a byte (no token, nothing to authenticate) made every
request, authenticated or not, a 503 for as long as they were held. Here a
connection is *waiting* from its accept, and again after each response,
until a whole request head arrives; only then is it a request, and only
requests count against the bound on requests in progress (past it: 503).
Waiting connections are bounded apart: a first byte within FIRST_BYTE_S, a
whole head within HEAD_TIMEOUT_S (else 408), the rest of a body still
coming after its request was answered (a refusal by its head) within
LINGER_S (else closed), and at most `max_waiting` of them (bounding the
descriptors they take), past which the oldest waiting
connection of the address holding the most waiting ones is closed with a
503: a fresh connection is the one a client is about to use. There is no
fixed cap per address: behind a proxy, or on loopback, every peer has the
same address, and such a cap would refuse the callers with the attacker.
"""

from __future__ import annotations

import asyncio
import resource
from typing import ClassVar

from uvicorn.protocols.http.flow_control import service_unavailable
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from staal.protocol.http.messages import HttpResponse, closing_response

FIRST_BYTE_S = 5.0
HEAD_TIMEOUT_S = 10.0
LINGER_S = 10.0
MAX_HEAD = 64 * 1024
MOST_WAITING = 1024
UNKNOWN_ADDRESS = "?"


def max_waiting_for(descriptors: int) -> int:
    """How many connections may wait for a request: a quarter of the
    process's descriptors (journals, workers' pipes and the store need the
    rest), at most MOST_WAITING, at least 16."""
    return max(16, min(MOST_WAITING, descriptors // 4))


def descriptor_limit() -> int:
    soft, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    return MOST_WAITING * 4 if soft == resource.RLIM_INFINITY else soft


class ConnectionGate:
    """One server's waiting connections, by address and oldest first, and
    the bound on its requests in progress."""

    def __init__(self, max_waiting: int, max_requests: int) -> None:
        self.max_waiting = max_waiting
        self.max_requests = max_requests
        self.waiting: dict[str, dict[BoundedHttpTools, None]] = {}
        self.count = 0

    def wait(self, connection: BoundedHttpTools) -> BoundedHttpTools | None:
        """`connection` waits for a request (newest of its address); the
        connection to close to make room for it, if the bound is reached."""
        self.waiting.setdefault(connection.address, {})[connection] = None
        self.count += 1
        if self.count <= self.max_waiting:
            return None
        most = max(self.waiting.values(), key=len)
        return next(iter(most))

    def leave(self, connection: BoundedHttpTools) -> None:
        """`connection` carries a request now, or is closed."""
        of_address = self.waiting.get(connection.address)
        if of_address is None or connection not in of_address:
            return
        del of_address[connection]
        self.count -= 1
        if not of_address:
            del self.waiting[connection.address]

    def full(self, requests: int) -> bool:
        return requests >= self.max_requests


class BoundedHttpTools(HttpToolsProtocol):
    """uvicorn's httptools protocol with each request's head bounded (at
    most MAX_HEAD bytes; a first byte within FIRST_BYTE_S of the
    connection; whole within HEAD_TIMEOUT_S of the connection, or of its
    first byte for a later request on it), a body left unread by its
    answer bounded by LINGER_S, and the connection waiting at `gate` until
    a head is whole. `gate`: set per server by `gated`."""

    gate: ClassVar[ConnectionGate]

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self.address = self.client[0] if self.client else UNKNOWN_ADDRESS
        self._head = 0
        self._in_head = True
        self._head_timer = self.loop.call_later(HEAD_TIMEOUT_S, self._head_too_slow)
        self._first_byte_timer: asyncio.TimerHandle | None = self.loop.call_later(
            FIRST_BYTE_S, self._head_too_slow)
        self._linger: asyncio.TimerHandle | None = None
        self._wait()

    def on_message_begin(self) -> None:
        super().on_message_begin()
        if not self._in_head:
            self._in_head, self._head = True, 0
            self._head_timer = self.loop.call_later(HEAD_TIMEOUT_S, self._head_too_slow)

    def on_url(self, url: bytes) -> None:
        self._head += len(url)
        super().on_url(url)

    def on_header(self, name: bytes, value: bytes) -> None:
        self._head += len(name) + len(value) + 4
        super().on_header(name, value)

    def data_received(self, data: bytes) -> None:
        if self._first_byte_timer is not None:
            self._first_byte_timer.cancel()
            self._first_byte_timer = None
        super().data_received(data)
        if self._in_head and self._head > MAX_HEAD:  # a head still growing past the bound
            self._refuse(431)

    def on_headers_complete(self) -> None:
        self._in_head = False
        self._head_timer.cancel()
        if self._head > MAX_HEAD:  # a head that ended in the bytes that made it too large
            self._refuse(431)
            return
        self.gate.leave(self)
        # Past the bound on requests in progress, this one is answered 503
        # (uvicorn's own check would also count the waiting connections).
        self.app = (service_unavailable if self.gate.full(len(self.tasks))
                    else self.config.loaded_app)
        super().on_headers_complete()

    def on_message_complete(self) -> None:
        super().on_message_complete()
        if self._linger is not None:  # the rest of an answered request's body came
            self._linger.cancel()
            self._linger = None
            self.timeout_keep_alive_task = self.loop.call_later(self.timeout_keep_alive,
                                                                self.timeout_keep_alive_handler)

    def on_response_complete(self) -> None:
        unread = self.cycle.more_body and not self.transport.is_closing()
        super().on_response_complete()
        if unread:
            # Answered before its body was whole (refused by its head, say):
            # what is left of the body is read and dropped for LINGER_S at
            # most, or the connection would be held by a body never ending.
            self._linger = self.loop.call_later(LINGER_S, self.transport.close)
        if self.timeout_keep_alive_task is not None:  # kept alive, no request pipelined
            self._wait()

    def connection_lost(self, exc: Exception | None) -> None:
        for timer in (self._head_timer, self._first_byte_timer, self._linger):
            if timer is not None:
                timer.cancel()
        self.gate.leave(self)
        super().connection_lost(exc)

    def _wait(self) -> None:
        crowded = self.gate.wait(self)
        if crowded is not None:
            self.gate.leave(crowded)
            crowded._refuse(503)

    def _head_too_slow(self) -> None:
        if self._in_head:
            self._refuse(408)

    def _refuse(self, status: int) -> None:
        if not self.transport.is_closing():
            self.transport.write(closing_response(HttpResponse(status, (("content-length", "0"),))))
            self.transport.close()


def gated(gate: ConnectionGate) -> type[BoundedHttpTools]:
    """The protocol class for one server, its connections sharing `gate`."""
    return type("GatedHttpTools", (BoundedHttpTools,), {"gate": gate})


def gated_protocol(max_requests: int) -> type[BoundedHttpTools]:
    """The protocol class for one server: at most `max_requests` requests
    in progress, and as many connections waiting as its descriptors allow."""
    return gated(ConnectionGate(max_waiting_for(descriptor_limit()), max_requests))
