"""The protocol stream, protected at the level of file descriptors (seed
000 section 3).

Before the manifest is read, descriptors 0 and 1 are duplicated to private
close-on-exec descriptors used only by the protocol reader and writer; then
descriptor 1 points at standard error and descriptor 0 at /dev/null. Anything
else that writes to standard output (a stray print, a C library) lands on
standard error, and nothing else can read the client's messages.
"""

from __future__ import annotations

import os
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


def read_chunks(fd: int, deliver: Callable[[bytes | None], None], size: int = 65536) -> threading.Thread:
    """A thread that reads the protocol descriptor and hands each chunk to
    `deliver`; None at end of input (or when reading fails)."""

    def pump() -> None:
        while True:
            try:
                data = os.read(fd, size)
            except OSError:
                data = b""
            deliver(data or None)
            if not data:
                return

    thread = threading.Thread(target=pump, name="staal-stdin", daemon=True)
    thread.start()
    return thread
