"""The file-system layer the durable files are written through.

Every operation that changes the journal directory (create, write,
truncate, rename, unlink, mkdir, and the fsyncs that make them durable)
goes through `FS`, a `FileSystem`, so a test can record each one in order
and rebuild every state a power loss could leave (tests/powerloss). `FS`
is the plain OS calls unless `STAAL_TEST_FS_RECORD` names a file at start:
then every process (supervisor, zygote, the workers it forks) appends each
operation to that file as it returns. A narrower `Syncer` (just the
fsyncs) is what the logs take as a parameter, so a unit test can fail or
count them; `OS_SYNC` is `FS`.
"""

from __future__ import annotations

import base64
import errno
import os
import select
import stat
import time
from pathlib import Path
from typing import Protocol

import orjson

from staal.runtime.timings import TIMINGS

PRIVATE_DIR_MODE = 0o700
RECORD_VARIABLE = "STAAL_TEST_FS_RECORD"


class Syncer(Protocol):
    """Makes written data and directory entries durable."""

    def sync_file(self, fd: int) -> None: ...

    def sync_dir(self, path: str | os.PathLike[str]) -> None: ...


class FileSystem(Syncer, Protocol):
    """Every change to a durable file or its directory."""

    def open(self, path: str | os.PathLike[str], flags: int, mode: int = 0o600) -> int: ...

    def write(self, fd: int, data: bytes, offset: int | None = None) -> None: ...

    def truncate(self, fd: int, size: int) -> None: ...

    def replace(self, source: str | os.PathLike[str], target: str | os.PathLike[str]) -> None: ...

    def unlink(self, path: str | os.PathLike[str]) -> None: ...

    def mkdir(self, path: str | os.PathLike[str], mode: int = PRIVATE_DIR_MODE) -> None: ...


class OsSync:
    """The real file system: the OS calls, fsync(2) on files and directories.
    Each fsync is timed into this process's `TIMINGS` (the metrics' fsync
    latency): this is the one place fsyncs happen."""

    def sync_file(self, fd: int) -> None:
        began = time.perf_counter_ns()
        os.fsync(fd)
        TIMINGS.fsync.observe_ns(time.perf_counter_ns() - began)

    def sync_dir(self, path: str | os.PathLike[str]) -> None:
        # A new or removed name is durable only once its directory is fsync'd.
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            began = time.perf_counter_ns()
            os.fsync(fd)
            TIMINGS.fsync.observe_ns(time.perf_counter_ns() - began)
        finally:
            os.close(fd)

    def open(self, path: str | os.PathLike[str], flags: int, mode: int = 0o600) -> int:
        return os.open(path, flags, mode)

    def write(self, fd: int, data: bytes, offset: int | None = None) -> None:
        if offset is None:
            write_all(fd, data)
            return
        view = memoryview(data)
        while view:
            written = os.pwrite(fd, view, offset)
            if written == 0:
                raise OSError(errno.EIO, "write made no progress")
            view, offset = view[written:], offset + written

    def truncate(self, fd: int, size: int) -> None:
        os.ftruncate(fd, size)

    def replace(self, source: str | os.PathLike[str], target: str | os.PathLike[str]) -> None:
        os.replace(source, target)

    def unlink(self, path: str | os.PathLike[str]) -> None:
        os.unlink(path)

    def mkdir(self, path: str | os.PathLike[str], mode: int = PRIVATE_DIR_MODE) -> None:
        os.mkdir(path, mode)


class RecordingFileSystem(OsSync):
    """The real calls, each appended to a recording once it returned: one
    JSON line with the process id and what it changed (a write's bytes and
    offset). Lines go out in one O_APPEND write each, so the file holds the
    operations of every process in the order they happened, and anything a
    process did after an operation (a message to another, an answer) comes
    after its line. The descriptor is opened at import, before a worker is
    confined, and forks inherit it."""

    def __init__(self, recording: str) -> None:
        self._out = os.open(recording, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o600)
        self._paths: dict[int, str] = {}

    def _record(self, op: str, **fields: object) -> None:
        line = orjson.dumps({"pid": os.getpid(), "op": op, **fields}) + b"\n"
        os.write(self._out, line)  # one write: O_APPEND keeps it whole

    def open(self, path: str | os.PathLike[str], flags: int, mode: int = 0o600) -> int:
        name = os.path.abspath(path)
        existed = os.path.lexists(name)
        fd = super().open(path, flags, mode)
        self._paths[fd] = name
        self._record("open", path=name, fd=fd, created=not existed and bool(flags & os.O_CREAT),
                     append=bool(flags & os.O_APPEND))
        return fd

    def write(self, fd: int, data: bytes, offset: int | None = None) -> None:
        at = offset if offset is not None else os.lseek(fd, 0, os.SEEK_CUR)
        super().write(fd, data, offset)
        if offset is None and at + len(data) != os.lseek(fd, 0, os.SEEK_CUR):
            at = os.lseek(fd, 0, os.SEEK_CUR) - len(data)  # O_APPEND: it went to the end
        self._record("write", fd=fd, path=self._paths.get(fd), offset=at,
                     data=base64.b64encode(data).decode())

    def truncate(self, fd: int, size: int) -> None:
        super().truncate(fd, size)
        self._record("truncate", fd=fd, path=self._paths.get(fd), size=size)

    def sync_file(self, fd: int) -> None:
        super().sync_file(fd)
        self._record("fsync", fd=fd, path=self._paths.get(fd))

    def sync_dir(self, path: str | os.PathLike[str]) -> None:
        super().sync_dir(path)
        self._record("dirsync", path=os.path.abspath(path))

    def replace(self, source: str | os.PathLike[str], target: str | os.PathLike[str]) -> None:
        super().replace(source, target)
        self._record("rename", source=os.path.abspath(source), path=os.path.abspath(target))

    def unlink(self, path: str | os.PathLike[str]) -> None:
        super().unlink(path)
        self._record("unlink", path=os.path.abspath(path))

    def mkdir(self, path: str | os.PathLike[str], mode: int = PRIVATE_DIR_MODE) -> None:
        super().mkdir(path, mode)
        self._record("mkdir", path=os.path.abspath(path))


def _chosen() -> FileSystem:
    recording = os.environ.get(RECORD_VARIABLE)
    return RecordingFileSystem(recording) if recording else OsSync()


FS: FileSystem = _chosen()
OS_SYNC: Syncer = FS


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
    try:
        if stat.S_ISDIR(os.stat(path).st_mode):
            # The common case, one stat: a run's folder is made at start.
            return path if isinstance(path, Path) else Path(path)
    except OSError:
        pass  # the walk below says what is missing or wrong
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
        FS.mkdir(directory, PRIVATE_DIR_MODE)
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


def write_durably(path: Path, data: bytes, syncer: Syncer = OS_SYNC) -> bool:
    """Create `path` holding `data`, 0600, file and directory fsync'd.
    False if the file already exists (it is kept as first written)."""
    make_private_dir(path.parent, syncer)
    try:
        fd = FS.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
    except FileExistsError:
        return False
    try:
        os.fchmod(fd, 0o600)
        FS.write(fd, data)
        syncer.sync_file(fd)
    finally:
        os.close(fd)
    syncer.sync_dir(path.parent)
    return True
