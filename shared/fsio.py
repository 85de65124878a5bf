"""Small file-system helpers the durable logs are built on.

Durability goes through a `Syncer` so tests can record (or fail) every fsync
and check its order against the bytes on disk; `OS_SYNC` is the real one.
"""

from __future__ import annotations

import errno
import os
import select
from pathlib import Path
from typing import Protocol

PRIVATE_DIR_MODE = 0o700


class Syncer(Protocol):
    """Makes written data and directory entries durable."""

    def sync_file(self, fd: int) -> None: ...

    def sync_dir(self, path: str | os.PathLike[str]) -> None: ...


class OsSync:
    """The real syncer: fsync(2) on files and on directories."""

    def sync_file(self, fd: int) -> None:
        os.fsync(fd)

    def sync_dir(self, path: str | os.PathLike[str]) -> None:
        # A new or removed name is durable only once its directory is fsync'd.
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


OS_SYNC = OsSync()


def write_all(fd: int, data: bytes) -> None:
    """Write every byte of `data` to `fd`, or raise the OSError that stopped it.

    os.write may write less than asked (a signal arriving while a write to a
    full pipe is blocked returns what was written so far), and a descriptor
    shared with another process may have been made non-blocking; neither is a
    failure, so both are waited out. Python retries EINTR itself (PEP 475).
    """
    view = memoryview(data)
    while view:
        try:
            written = os.write(fd, view)
        except BlockingIOError:
            _wait_writable(fd)
            continue
        if written == 0:
            # Never expected for a non-empty write; looping would spin forever.
            raise OSError(errno.EIO, "write made no progress")
        view = view[written:]


def _wait_writable(fd: int) -> None:
    poller = select.poll()
    # POLLERR/POLLHUP also wake us; the next write then raises the real error.
    poller.register(fd, select.POLLOUT)
    poller.poll()


def make_private_dir(
    path: str | os.PathLike[str], syncer: Syncer = OS_SYNC
) -> Path:
    """Create `path` and its missing parents as 0700 directories.

    Each new directory's parent is fsync'd right after the directory is made,
    top down, so no durable entry ever points into a directory that is not.
    An existing directory keeps its mode: it may be shared on purpose.
    """
    target = Path(path)
    missing: list[Path] = []
    probe = target
    while not probe.exists():
        missing.append(probe)
        if probe.parent == probe:
            break
        probe = probe.parent
    for directory in reversed(missing):
        _make_one_private_dir(directory, syncer)
    if not target.is_dir():
        raise NotADirectoryError(errno.ENOTDIR, "not a directory", str(target))
    return target


def _make_one_private_dir(directory: Path, syncer: Syncer) -> None:
    try:
        os.mkdir(directory, PRIVATE_DIR_MODE)
    except FileExistsError:
        # Another process made it between our look and our mkdir; it is not
        # ours to chmod, but syncing its parent again is harmless.
        if not directory.is_dir():
            raise
    else:
        # The umask can only take bits away; a umask that takes the owner's
        # own bits would leave a directory we cannot use, so set it exactly.
        os.chmod(directory, PRIVATE_DIR_MODE)
    syncer.sync_dir(directory.parent)
