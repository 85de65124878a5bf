"""What the supervisor's own HTTP listeners share (the MCP endpoint of
`serve --http`, the metrics): a socket bound before anything is served,
and uvicorn in the supervisor's event loop without signal handling of its
own (SIGTERM is the server's: `Server.stopping`)."""

from __future__ import annotations

import contextlib
import socket
from collections.abc import Iterator

import uvicorn


class InLoopUvicorn(uvicorn.Server):
    """The server's own SIGTERM handling stays: uvicorn takes no signals."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


def bind(host: str, port: int, backlog: int = 2048) -> socket.socket:
    """A listening socket at `host`:`port` (0: a free port), not inherited by
    any process started later; the OSError of the bind if it failed."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError:
        sock.close()
        raise
    sock.listen(backlog)
    sock.set_inheritable(False)
    return sock
