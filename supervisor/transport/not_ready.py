"""The listening socket answered while the MCP endpoint cannot answer it:
while the server starts (recovery may take a while) and while it drains
after SIGTERM or SIGINT (uvicorn has closed its listener; calls in flight
are still being answered). A load balancer's `GET /ready` gets 503 `not
ready` then, and any other request 503 with Retry-After
(protocol/http/readiness.py), instead of a connection that hangs until the
check times out (starting: the socket listens, so the kernel accepts) or is
refused (draining).

The responder listens on a duplicate of the socket's descriptor, so closing
it leaves the socket listening for uvicorn (starting) and uvicorn closing
its own leaves this one listening (draining). Each connection gets one
answer, bounded in time like any head (http_connections.FIRST_BYTE_S +
HEAD_TIMEOUT_S), and is closed. At most as many are held at once as may
wait for a request while serving (http_connections.max_waiting_for); one
past that is closed unanswered, so sockets that send nothing cannot take
the descriptors recovery and the calls in flight need (the kernel's
backlog held them before the responder accepted them)."""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import AsyncIterator
from typing import cast

from staal.protocol.http.readiness import not_serving_answer
from staal.supervisor.transport.http_connections import (
    FIRST_BYTE_S,
    HEAD_TIMEOUT_S,
    descriptor_limit,
    max_waiting_for,
)


class _NotServing(asyncio.Protocol):
    def __init__(self, held: set[_NotServing], most: int) -> None:
        self.held, self.most = held, most
        self.received = b""
        self.transport: asyncio.Transport | None = None
        self.timer: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        if len(self.held) >= self.most:  # as many held as may be
            transport.close()
            return
        self.held.add(self)
        # uvloop's transports are not asyncio.Transport subclasses, though alike.
        self.transport = cast(asyncio.Transport, transport)
        self.timer = asyncio.get_running_loop().call_later(
            FIRST_BYTE_S + HEAD_TIMEOUT_S, self.transport.close)

    def data_received(self, data: bytes) -> None:
        self.received += data
        answer = not_serving_answer(self.received)
        if answer is not None and self.transport is not None:
            self.transport.write(answer)
            self.transport.close()

    def connection_lost(self, exc: Exception | None) -> None:
        self.held.discard(self)
        if self.timer is not None:
            self.timer.cancel()


@contextlib.asynccontextmanager
async def answering_not_ready(sock: socket.socket,
                              most: int | None = None) -> AsyncIterator[None]:
    """Answer requests on `sock` as not ready for as long as the block runs,
    holding at most `most` connections at once (default: as many as may
    wait for a request while serving)."""
    loop = asyncio.get_running_loop()
    held: set[_NotServing] = set()
    most = max_waiting_for(descriptor_limit()) if most is None else most
    server = await loop.create_server(lambda: _NotServing(held, most), sock=sock.dup())
    try:
        yield
    finally:
        server.close()  # closes the duplicate only
