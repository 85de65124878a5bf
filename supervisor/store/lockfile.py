"""The server lock (seed 000 section 6): one server process per journal directory.

An OS lock (`flock`) on `<journals>/server.lock`, so the kernel frees it when
the holding process dies, however it dies. A second server waits up to five
seconds for it (an SDK's throwaway probe, or a restart, may still be letting
go) and then refuses to start, naming the lock file.

The lock belongs to the open file description: the descriptor is
close-on-exec, and a process that forks without exec (the zygote must not)
would hold the lock as long as it lives.
"""

from __future__ import annotations

import errno
import fcntl
import os
import threading
import time
from collections.abc import Callable
from pathlib import Path

from staal.records.fsio import FS, OS_SYNC, Syncer, make_private_dir
from staal.runtime.backoff import Backoff
from staal.supervisor.errors import SupervisorError

LOCK_FILE = "server.lock"
LOCK_FILE_MODE = 0o600
DEFAULT_WAIT_S = 5.0
_FIRST_POLL_S = 0.005
_MAX_POLL_S = 0.1


class ServerLockHeld(SupervisorError):
    """Another process holds the journal directory's lock past the wait."""

    kind = "server_lock_held"

    def __init__(self, path: Path, waited_s: float, holder: int | None) -> None:
        by = f" (process {holder})" if holder else ""
        super().__init__(
            f"{path} is locked by another staal-supervisor{by}: another server is using the "
            f"journal directory {path.parent}; waited {waited_s:g} s for it to let go")
        self.path = path
        self.waited_s = waited_s


class LockWaitStopped(SupervisorError):
    """The wait for the lock was given up from outside (the start was
    interrupted): nothing is held."""

    kind = "lock_wait_stopped"


class ServerLock:
    """The held lock; made by `acquire`, freed by `release` or process exit."""

    def __init__(self, path: Path, fd: int) -> None:
        self._path = path
        self._fd = fd

    @classmethod
    def acquire(cls, journals_dir: str | os.PathLike[str], wait_s: float = DEFAULT_WAIT_S,
                on_wait: Callable[[], None] | None = None,
                syncer: Syncer = OS_SYNC,
                stop: threading.Event | None = None) -> ServerLock:
        """Lock `<journals_dir>/server.lock`, creating it (0600, in a 0700
        directory) if needed. While another process holds it, retry until
        `wait_s` has passed, then raise `ServerLockHeld`; `LockWaitStopped`
        at once if `stop` is set meanwhile (a thread's wait the start gave
        up: a Ctrl-C must not wait for it). `on_wait` is called once, when
        the lock is first found held (the server logs it)."""
        directory = make_private_dir(journals_dir, syncer)
        path = directory / LOCK_FILE
        fd = _open_lock_file(path)
        try:
            _lock_within(fd, path, wait_s, on_wait, stop or threading.Event())
            _write_holder(fd)
        except BaseException:
            os.close(fd)
            raise
        return cls(path, fd)

    @property
    def path(self) -> Path:
        return self._path

    @property
    def held(self) -> bool:
        return self._fd >= 0

    def release(self) -> None:
        if self._fd >= 0:
            fd, self._fd = self._fd, -1
            # Closing the only descriptor of the description drops the lock.
            os.close(fd)

    def __enter__(self) -> ServerLock:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.release()

    def __repr__(self) -> str:
        return f"<ServerLock {self._path} {'held' if self.held else 'released'}>"


def _open_lock_file(path: Path) -> int:
    try:
        fd = FS.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, LOCK_FILE_MODE)
    except FileExistsError:
        # Never removed once made: unlinking a lock file lets two processes
        # lock two different files of the same name.
        return FS.open(path, os.O_RDWR | os.O_CLOEXEC)
    os.fchmod(fd, LOCK_FILE_MODE)
    return fd


def _try_lock(fd: int) -> bool:
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as exc:
        if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
            return False
        raise
    return True


def _lock_within(fd: int, path: Path, wait_s: float,
                 on_wait: Callable[[], None] | None, stop: threading.Event) -> None:
    if _try_lock(fd):
        return
    if on_wait is not None:
        on_wait()
    deadline = time.monotonic() + max(wait_s, 0.0)
    # flock has no timeout; poll, backing off, never past the deadline. The
    # failure above is the first strike: the next poll is at once.
    pauses = Backoff(first=_FIRST_POLL_S, cap=_MAX_POLL_S)
    pauses.strike(time.monotonic())
    while True:
        if _try_lock(fd):
            return
        now = time.monotonic()
        left = deadline - now
        if left <= 0:
            raise ServerLockHeld(path, wait_s, _read_holder(fd))
        if stop.wait(min(pauses.strike(now), left)):
            raise LockWaitStopped(f"the wait for {path} was given up")


def _write_holder(fd: int) -> None:
    """Our pid in the file, for the message a waiting server gives. Not
    synced: after a crash the lock is free whatever the file says."""
    FS.truncate(fd, 0)
    FS.write(fd, f"{os.getpid()}\n".encode(), 0)


def _read_holder(fd: int) -> int | None:
    return _pid_in(os.pread(fd, 32, 0))


def lock_holder(journals: Path) -> int | None:
    """The pid the lock file of `journals` names, read without taking the
    lock (status, beside a running server): the server that holds it, or
    the last one that did (None: no lock file, or no pid in it)."""
    try:
        return _pid_in((journals / LOCK_FILE).read_bytes())
    except (FileNotFoundError, PermissionError):
        return None


def _pid_in(data: bytes) -> int | None:
    """The one reader of what `_write_holder` wrote."""
    text = data[:32].decode("ascii", "replace").strip()
    return int(text) if text.isdigit() else None
