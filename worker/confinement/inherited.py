"""What a run's process inherited that a tool must not reach: the
environment (secrets may sit in it) and standard input (in a worker started
by the stdio server it would be the protocol stream).

`take_secrets` and `scrub_environment` empty the environment of all but what
is kept; `refuse_stdin` points descriptor 0 at /dev/null and makes every read
of `sys.stdin` a refusal (`worker/runs/refusal.py`), reported to the run as the
tripwire's refusals are.
"""

from __future__ import annotations

import io
import os
import sys
from collections.abc import Iterable
from typing import Any

from staal.worker.runs.refusal import refuse

__all__ = ["ALWAYS_KEPT", "refuse_stdin", "scrub_environment", "take_secrets"]

# Environment variables `scrub_environment` always keeps: the tools' search
# path, and the crash-kill harness's switches (DESIGN.md section 7).
ALWAYS_KEPT = frozenset({"PATH", "STAAL_TEST_KILL_POINTS", "STAAL_KILL_AT", "STAAL_KILL_ONCE",
                         "STAAL_TEST_FS_RECORD"})

_STDIN_MESSAGE = "a tool may not read standard input (sys.stdin.{}); its inputs are its parameters"
# The objects sys.stdin held before refuse_stdin. Kept alive on purpose: their
# FileIO owns descriptor 0 and would close it (now /dev/null) when collected.
_replaced_stdin: list[object] = []


class _Descriptor0:
    """What both refused streams say of themselves: readable (so a library
    that checks before reading reads, and is refused), on descriptor 0,
    which is /dev/null by then, and no terminal."""

    def readable(self) -> bool:
        return True

    def fileno(self) -> int:
        return 0

    def isatty(self) -> bool:
        return False


class _RefusedStdinBuffer(_Descriptor0, io.BufferedIOBase):
    """`sys.stdin.buffer` of a tool: every read is refused."""

    def read(self, size: int | None = -1) -> bytes:
        refuse(_STDIN_MESSAGE.format("buffer.read"))

    def read1(self, size: int = -1) -> bytes:
        refuse(_STDIN_MESSAGE.format("buffer.read1"))

    def readinto(self, buffer: Any) -> int:
        refuse(_STDIN_MESSAGE.format("buffer.readinto"))

    def readinto1(self, buffer: Any) -> int:
        refuse(_STDIN_MESSAGE.format("buffer.readinto1"))

    def readline(self, size: int | None = -1) -> bytes:
        refuse(_STDIN_MESSAGE.format("buffer.readline"))

    def readlines(self, hint: int | None = -1) -> list[bytes]:
        refuse(_STDIN_MESSAGE.format("buffer.readlines"))

    def peek(self, size: int = 0) -> bytes:
        refuse(_STDIN_MESSAGE.format("buffer.peek"))


class _RefusedStdin(_Descriptor0, io.TextIOBase):
    """`sys.stdin` of a tool: every read is refused. `fileno()` is 0, which
    is /dev/null by then."""

    def __init__(self) -> None:
        super().__init__()
        self._buffer = _RefusedStdinBuffer()

    @property
    def buffer(self) -> _RefusedStdinBuffer:
        return self._buffer

    # Plain attributes, as on the streams they stand for (io.TextIOBase's are).
    encoding = "utf-8"
    errors = "strict"

    @property
    def name(self) -> str:
        return "<stdin>"

    def read(self, size: int | None = -1) -> str:
        refuse(_STDIN_MESSAGE.format("read"))

    def readline(self, size: int | None = -1) -> str:  # type: ignore[override]
        refuse(_STDIN_MESSAGE.format("readline"))

    def readlines(self, hint: int | None = -1) -> list[str]:  # type: ignore[override]
        refuse(_STDIN_MESSAGE.format("readlines"))

    # typeshed types __next__ of every io class as _IOBase's (bytes), the text ones too.
    def __next__(self) -> str:  # type: ignore[override]
        refuse(_STDIN_MESSAGE.format("__next__"))


def refuse_stdin() -> None:
    """Point descriptor 0 at /dev/null and make `sys.stdin` (and
    `sys.__stdin__`) refuse every read with `CapabilityRefused`. A refused
    read also calls the tripwire's `on_violation` if a tripwire is installed
    when it happens. Refused even inside a broker section: there is no
    standard input left to read."""
    fd = os.open(os.devnull, os.O_RDONLY)
    if fd != 0:
        os.dup2(fd, 0)
        os.close(fd)
    _replaced_stdin.extend(s for s in (sys.stdin, sys.__stdin__) if s is not None)
    refused = _RefusedStdin()
    sys.stdin = refused
    # typeshed declares sys.__stdin__ a Final TextIOWrapper; it is an ordinary
    # attribute, replaced here on purpose (a library may read it directly).
    sys.__stdin__ = refused  # type: ignore[misc,assignment]


def scrub_environment(keep: Iterable[str]) -> None:
    """Remove every environment variable except those in `keep` and
    `ALWAYS_KEPT`, from `os.environ` and (through `unsetenv`) from the
    process environment C code and child processes see.

    The memory the process started with is not rewritten, so
    `/proc/self/environ` still shows the initial environment; the tripwire
    refuses reading it."""
    allowed = ALWAYS_KEPT.union(keep)
    for name in [name for name in os.environ if name not in allowed]:
        del os.environ[name]  # calls unsetenv


def take_secrets(names: Iterable[str]) -> dict[str, str]:
    """Read the variables `names` and remove them from the environment (as
    `scrub_environment` does), so that program code can never read them from
    `os.environ`, C's `getenv` or a child's environment. Returns the values of
    those that were set; a name that is not set is left out, and the caller
    decides whether that is an error."""
    secrets: dict[str, str] = {}
    for name in names:
        value = os.environ.pop(name, None)  # pop calls unsetenv
        if value is not None:
            secrets[name] = value
    return secrets
