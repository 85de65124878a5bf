"""The protocol stream, protected at the level of file descriptors (seed
000 section 3).

Before the manifest is read, descriptors 0 and 1 are duplicated to private
close-on-exec descriptors used only by the protocol reader and writer; then
descriptor 1 points at standard error and descriptor 0 at /dev/null. Anything
else that writes to standard output (a stray print, a C library) lands on
standard error, and nothing else can read the client's messages.
"""

from __future__ import annotations

import asyncio
import os
import stat
import threading
from collections.abc import Callable
from dataclasses import dataclass

from staal.records.fsio import write_all


@dataclass(frozen=True)
class Stdio:
    reader: int
    writer: int


def protect_descriptors() -> Stdio:
    reader = os.dup(0)  # os.dup makes non-inheritable (close-on-exec) descriptors
    writer = os.dup(1)
    os.dup2(2, 1)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    return Stdio(reader, writer)


class LineWriter:
    """Writes whole protocol lines under one lock, so concurrent answers
    never interleave. A write that fails for good means the client is gone:
    `broken` is set and `on_broken` called once."""

    def __init__(self, fd: int, on_broken: Callable[[OSError], None]) -> None:
        self.fd = fd
        self.lock = threading.Lock()
        self.broken: OSError | None = None
        self.on_broken = on_broken

    def send(self, line: bytes) -> bool:
        with self.lock:
            if self.broken is not None:
                return False
            try:
                write_all(self.fd, line)
            except OSError as exc:
                self.broken = exc
            else:
                return True
        self.on_broken(self.broken)
        return False


def read_chunks(fd: int, deliver: Callable[[bytes | None], None],
                loop: asyncio.AbstractEventLoop, size: int = 65536) -> Callable[[], None]:
    """Read the protocol descriptor and hand each chunk to `deliver` on the
    event loop; None at end of input (or when reading fails). Returns what
    stops the reading.

    A pipe or a socket (what a client starts a server with) is read from the
    loop's own poll: no thread to wake, and no hop from it to the loop, per
    message. Anything else (a file, a terminal) is read by a thread."""
    kind = os.fstat(fd).st_mode
    if stat.S_ISFIFO(kind) or stat.S_ISSOCK(kind):
        # Only this process reads it: the descriptor is a private,
        # close-on-exec copy (protect_descriptors).
        os.set_blocking(fd, False)
        return _read_on_loop(fd, deliver, loop, size)
    return _read_in_thread(fd, deliver, loop, size)


def _read_on_loop(fd: int, deliver: Callable[[bytes | None], None],
                  loop: asyncio.AbstractEventLoop, size: int) -> Callable[[], None]:
    def readable() -> None:
        try:
            data = os.read(fd, size)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            data = b""
        if not data:
            loop.remove_reader(fd)
        deliver(data or None)

    def stop() -> None:
        loop.remove_reader(fd)

    loop.add_reader(fd, readable)
    return stop


def _read_in_thread(fd: int, deliver: Callable[[bytes | None], None],
                    loop: asyncio.AbstractEventLoop, size: int) -> Callable[[], None]:
    def pump() -> None:
        while True:
            try:
                data = os.read(fd, size)
            except OSError:
                data = b""
            try:
                loop.call_soon_threadsafe(deliver, data or None)
            except RuntimeError:
                return  # the loop is closed: serving is over
            if not data:
                return

    thread = threading.Thread(target=pump, name="staal-stdin", daemon=True)
    thread.start()
    return lambda: None  # a blocked read cannot be stopped: what it reads is dropped
