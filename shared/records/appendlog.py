"""The append-only JSON-lines log the ledger and the journals are kept in.

One JSON object per line, each line written whole and fsync'd before
`append` returns (DESIGN.md section 5). A crash can only leave the last line
short of its newline: that torn write is discarded on read. Any other damage
stops with `LogDamaged` naming the line, because guessing past it could
repeat or forget an action.
"""

from __future__ import annotations

import errno
import os
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any, BinaryIO

import orjson

from staal.errors import LogDamaged, LogExists, StaalError
from staal.records.canonical import canonical_json
from staal.records.fsio import FS, OS_SYNC, Syncer, make_private_dir

LOG_FILE_MODE = 0o600
_CREATE_FLAGS = os.O_CREAT | os.O_EXCL | os.O_APPEND | os.O_WRONLY | os.O_CLOEXEC
# Read and write on one descriptor, so the file that was checked is the file
# that gets truncated and appended to, even if its name is replaced meanwhile.
_OPEN_FLAGS = os.O_RDWR | os.O_APPEND | os.O_CLOEXEC

Decode = Callable[[dict[str, Any]], Any]


def line_of(record: Mapping[str, Any]) -> bytes:
    """A record as one line of a log: the one way a line is written."""
    return canonical_json(record) + b"\n"


@dataclass(frozen=True)
class LogRead:
    """What a log holds: its records, and how much of the file they cover."""

    records: tuple[Any, ...]
    valid_bytes: int
    torn_bytes: int = 0


def read_log(path: str | os.PathLike[str], decode: Decode | None = None) -> LogRead:
    """Read every complete record of the log at `path`, without changing it.

    A status command reads logs beside a running server, so a last line
    still being written looks torn here and is simply left out.
    """
    with open(path, "rb") as stream:
        return _read_stream(stream, os.fspath(path), decode)


def _read_stream(stream: BinaryIO, name: str, decode: Decode | None) -> LogRead:
    records: list[Any] = []
    valid = 0
    for number, line in enumerate(stream, start=1):
        if not line.endswith(b"\n"):
            # Only the last segment can lack its newline: a torn write.
            return LogRead(tuple(records), valid, len(line))
        records.append(_parse_line(line[:-1], name, number, decode))
        valid += len(line)
    return LogRead(tuple(records), valid, 0)


def _parse_line(body: bytes, name: str, number: int, decode: Decode | None) -> Any:
    if not body:
        raise LogDamaged(name, number, "empty line")
    try:
        value = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise LogDamaged(name, number, f"not valid JSON: {exc}") from exc
    if not isinstance(value, dict):
        raise LogDamaged(name, number, f"a JSON {type(value).__name__}, not an object")
    if decode is None:
        return value
    try:
        return decode(value)
    except StaalError as exc:
        raise LogDamaged(name, number, f"{exc.kind}: {exc.message}") from exc


class AppendLog:
    """The single writer of one log file; made by `create`, `open` or `open_or_create`.

    Appends from several threads are serialized by a lock, so lines never
    interleave. Cross-process exclusion is the caller's job (the ledger's
    lock file, one worker per journal).
    """

    def __init__(self, path: Path, fd: int, syncer: Syncer) -> None:
        self._path = path
        self._fd = fd
        self._syncer = syncer
        self._lock = threading.Lock()
        self._failure: BaseException | None = None
        self._unsynced = False

    @classmethod
    def create(cls, path: str | os.PathLike[str], syncer: Syncer = OS_SYNC,
               first: Mapping[str, Any] | None = None,
               created: Callable[[], None] | None = None) -> AppendLog:
        """Create a new log, empty or holding `first` (written before the one
        fsync that makes file and record durable together); `LogExists` if
        the file is already there. `created` is called once the file exists
        and before anything is written to it (a crash test's kill point)."""
        target = Path(path)
        make_private_dir(target.parent, syncer)
        line = None if first is None else line_of(first)
        try:
            fd = FS.open(target, _CREATE_FLAGS, LOG_FILE_MODE)
        except FileExistsError:
            raise LogExists(f"{target} already exists") from None
        try:
            # As in make_private_dir: the umask may only narrow 0600, and a
            # file its owner cannot read back is of no use.
            os.fchmod(fd, LOG_FILE_MODE)
            if created is not None:
                created()
            if line is not None:
                FS.write(fd, line)
            syncer.sync_file(fd)
            syncer.sync_dir(target.parent)
        except BaseException:
            os.close(fd)
            raise
        return cls(target, fd, syncer)

    @classmethod
    def open(
        cls,
        path: str | os.PathLike[str],
        decode: Decode | None = None,
        syncer: Syncer = OS_SYNC,
    ) -> tuple[AppendLog, LogRead]:
        """Open an existing log for appending, with what it already holds.

        Damage raises `LogDamaged` and leaves the file as it is. A torn last
        line is cut off so the next append starts on a line boundary.
        """
        target = Path(path)
        fd = FS.open(target, _OPEN_FLAGS)
        try:
            read = _read_fd(fd, os.fspath(target), decode)
            if read.torn_bytes:
                FS.truncate(fd, read.valid_bytes)
            # The previous writer may have died between write and fsync (its
            # bytes then live only in the page cache) or before syncing the
            # directory; the caller is about to act on what it read, so make
            # that durable first, along with any truncation.
            syncer.sync_file(fd)
            syncer.sync_dir(target.parent)
        except BaseException:
            os.close(fd)
            raise
        return cls(target, fd, syncer), read

    @classmethod
    def open_or_create(
        cls,
        path: str | os.PathLike[str],
        decode: Decode | None = None,
        syncer: Syncer = OS_SYNC,
    ) -> tuple[AppendLog, LogRead]:
        try:
            return cls.open(path, decode, syncer)
        except FileNotFoundError:
            pass
        try:
            return cls.create(path, syncer), LogRead((), 0, 0)
        except LogExists:
            # Someone created it between our two attempts; read what they wrote.
            return cls.open(path, decode, syncer)

    @property
    def path(self) -> Path:
        return self._path

    @property
    def closed(self) -> bool:
        return self._fd < 0

    def append(self, record: Mapping[str, Any], sync: bool = True) -> None:
        """Write `record` as one line and return once it is fsync'd.

        With `sync=False` the line is written but made durable only by the
        next synced append (or `close`): for a record whose loss in a power
        cut is harmless because nothing after it can be durable either.
        """
        if not isinstance(record, Mapping):
            raise TypeError(f"a log record is a mapping, not {type(record).__name__}")
        # Serialize before taking the lock: a value with no canonical form
        # raises here, with nothing written.
        line = line_of(record)
        with self._lock:
            self._check_usable()
            try:
                FS.write(self._fd, line)
                if sync:
                    self._syncer.sync_file(self._fd)
                self._unsynced = not sync
            except BaseException as exc:
                self._failure = exc
                raise

    def _check_usable(self) -> None:
        if self._fd < 0:
            raise ValueError(f"append to closed log {self._path}")
        if self._failure is not None:
            # A failed write may have left part of a line, and a failed fsync
            # leaves the page cache in an unknown state: appending after
            # either could bury damage mid-file. Reopening cuts the torn tail.
            raise OSError(
                errno.EIO, "an earlier append failed; reopen the log", str(self._path)
            ) from self._failure

    def close(self) -> None:
        with self._lock:
            if self._fd >= 0:
                fd, self._fd = self._fd, -1
                try:
                    if self._unsynced and self._failure is None:
                        self._syncer.sync_file(fd)
                finally:
                    os.close(fd)

    def __enter__(self) -> AppendLog:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self.closed else "open"
        return f"<AppendLog {self._path} {state}>"


def _read_fd(fd: int, name: str, decode: Decode | None) -> LogRead:
    # closefd=False: the descriptor stays open for the appends that follow.
    with open(fd, "rb", closefd=False) as stream:
        return _read_stream(stream, name, decode)
