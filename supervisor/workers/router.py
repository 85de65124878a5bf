"""The pool's ZeroMQ ROUTER, read on the event loop from its file descriptor.

`zmq.asyncio` wraps every receive in a future and every send in a poll of the
socket's state; per call that is several loop iterations and allocations for
what is, on a ROUTER, never a wait: a ROUTER's send does not block (a message
to a peer it cannot reach is dropped, as the worker's death is learnt from
its zygote anyway), and what arrives is there to be read when the socket's
FD says so. So the socket is a plain one: sends are synchronous, and arrivals
are drained in a reader callback and handed to `on_frames` one by one
(a worker's identity and its frames).

ZeroMQ's FD is edge-triggered in effect: it signals that the socket's state
may have changed, and any operation on the socket (a send included) may
consume that signal. So a drain reads until `Again`, and after every send
the socket's events are read again and a drain is scheduled if a message
is waiting, or it could wait unread until the next one arrives.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import zmq

# Messages read in one go before the loop runs other callbacks: a busy pool
# must not starve the transport.
DRAIN_AT_MOST = 64


class WorkerRouter:
    def __init__(self, on_frames: Callable[[list[bytes]], None]) -> None:
        self.on_frames = on_frames
        self.context = zmq.Context()
        self.socket = self.context.socket(zmq.ROUTER)
        self.socket.setsockopt(zmq.LINGER, 0)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._fd: int | None = None

    def bind(self, endpoint: str) -> None:
        """Bind and start reading; called in the loop that will read."""
        self.socket.bind(endpoint)
        self._loop = asyncio.get_running_loop()
        fd = self.socket.getsockopt(zmq.FD)
        assert isinstance(fd, int)  # an integer option; pyzmq's types say int | bytes
        self._fd = fd
        self._loop.add_reader(fd, self._drain)
        self._loop.call_soon(self._drain)  # anything that came before the reader

    def send(self, identity: bytes, frame: bytes) -> None:
        try:
            self.socket.send_multipart([identity, frame], flags=zmq.NOBLOCK)
        except zmq.Again:
            pass  # a ROUTER drops instead; kept for a socket option that changes it
        self._recheck()

    def _recheck(self) -> None:
        events = self.socket.getsockopt(zmq.EVENTS)
        if self._loop is not None and isinstance(events, int) and events & zmq.POLLIN:
            self._loop.call_soon(self._drain)

    def _drain(self) -> None:
        if self.socket.closed:
            return
        for _ in range(DRAIN_AT_MOST):
            try:
                frames = self.socket.recv_multipart(flags=zmq.NOBLOCK)
            except zmq.Again:
                return
            self.on_frames(frames)
        self._recheck()  # more may be waiting: read it after the others' turn

    def close(self) -> None:
        if self._loop is not None and self._fd is not None and not self._loop.is_closed():
            self._loop.remove_reader(self._fd)
        self._loop = None
        self.socket.close()
        self.context.term()
