"""staal.records.fsio: writing every byte, private directories, the real syncer."""

from __future__ import annotations

import os
import signal
import stat
import threading
from pathlib import Path

import pytest

from staal.records.fsio import OS_SYNC, OsSync, make_private_dir, write_all

BOUND = 10.0  # seconds any wait in these tests may take before it fails
MIB = 1024 * 1024


class RecordingSyncer:
    """Records each sync, and whether the synced directory held what it should."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, object]] = []
        self.dir_listings: list[set[str]] = []

    def sync_file(self, fd: int) -> None:
        self.calls.append(("file", fd))

    def sync_dir(self, path: str | os.PathLike[str]) -> None:
        self.calls.append(("dir", Path(path)))
        self.dir_listings.append(set(os.listdir(path)))


@pytest.fixture
def umask():
    """Set a umask for one test and put the old one back afterwards."""
    saved = os.umask(0o077)  # the only way to read the umask is to set one
    os.umask(saved)
    yield os.umask
    os.umask(saved)


def mode_of(path: Path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


def drain(read_fd: int, into: bytearray) -> None:
    while chunk := os.read(read_fd, 65536):
        into.extend(chunk)


def payload(size: int) -> bytes:
    # Not a repeated byte, so a lost or reordered chunk shows in the compare.
    return (bytes(range(256)) * (size // 256 + 1))[:size]


class WriteSpy:
    """Wraps the real os.write for one descriptor and records what each call did."""

    def __init__(self, fd: int, real=os.write) -> None:
        self.fd = fd
        self.real = real
        self.results: list[tuple[int, int | str]] = []
        self.blocked = threading.Event()

    def __call__(self, fd: int, data) -> int:
        if fd != self.fd:
            return self.real(fd, data)
        try:
            written = self.real(fd, data)
        except BlockingIOError:
            self.results.append((len(data), "EAGAIN"))
            self.blocked.set()
            raise
        self.results.append((len(data), written))
        return written


def test_write_all_writes_every_byte_to_a_regular_file(tmp_path: Path) -> None:
    target = tmp_path / "out"
    data = payload(3 * MIB + 17)
    fd = os.open(target, os.O_CREAT | os.O_WRONLY, 0o600)
    try:
        write_all(fd, data)
    finally:
        os.close(fd)
    assert target.read_bytes() == data


def test_write_all_of_nothing_writes_nothing(tmp_path: Path) -> None:
    target = tmp_path / "out"
    fd = os.open(target, os.O_CREAT | os.O_WRONLY, 0o600)
    try:
        write_all(fd, b"")
    finally:
        os.close(fd)
    assert target.read_bytes() == b""


def test_write_all_carries_on_after_a_signal_cuts_a_pipe_write_short(monkeypatch) -> None:
    # Linux: a write to a full pipe blocks; a signal then makes it return the
    # bytes written so far (Python's handlers do not use SA_RESTART, and a
    # partial count is returned, not EINTR). The reader drains only once the
    # alarm has fired, so the first write must block until then and be cut
    # short; write_all has to notice and write the rest.
    if threading.current_thread() is not threading.main_thread():
        pytest.skip("signal handlers can only be set in the main thread")
    alarmed = threading.Event()
    read_fd, write_fd = os.pipe()
    spy = WriteSpy(write_fd)
    monkeypatch.setattr(os, "write", spy)
    received = bytearray()
    waited = []

    def reader() -> None:
        waited.append(alarmed.wait(BOUND))
        drain(read_fd, received)

    data = payload(MIB)
    old_handler = signal.signal(signal.SIGALRM, lambda signum, frame: alarmed.set())
    old_timer = signal.setitimer(signal.ITIMER_REAL, 0.05)
    thread = threading.Thread(target=reader, daemon=True)
    thread.start()
    try:
        write_all(write_fd, data)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old_handler)
        if old_timer[0] > 0:
            signal.setitimer(signal.ITIMER_REAL, *old_timer)
        os.close(write_fd)
        thread.join(BOUND)
        os.close(read_fd)
    assert not thread.is_alive()
    assert waited == [True]
    assert bytes(received) == data
    first_asked, first_written = spy.results[0]
    assert first_written < first_asked, "the first write was expected to be cut short"
    assert len(spy.results) >= 2


def test_write_all_waits_while_a_non_blocking_pipe_is_full(monkeypatch) -> None:
    # A descriptor inherited from the MCP client may be non-blocking. The pipe
    # is filled first, so write_all's first write must meet EAGAIN; the reader
    # starts draining only once it has.
    read_fd, write_fd = os.pipe()
    os.set_blocking(write_fd, False)
    prefill = bytearray()
    while True:
        try:
            prefill.extend(b"p" * os.write(write_fd, b"p" * 4096))
        except BlockingIOError:
            break
    spy = WriteSpy(write_fd)
    monkeypatch.setattr(os, "write", spy)
    received = bytearray()
    waited = []

    def reader() -> None:
        waited.append(spy.blocked.wait(BOUND))
        drain(read_fd, received)

    data = payload(MIB)
    thread = threading.Thread(target=reader, daemon=True)
    thread.start()
    try:
        write_all(write_fd, data)
    finally:
        os.close(write_fd)
        thread.join(BOUND)
        os.close(read_fd)
    assert not thread.is_alive()
    assert waited == [True]
    assert bytes(received) == bytes(prefill) + data
    assert spy.results[0][1] == "EAGAIN"


def test_write_all_raises_when_the_reader_has_gone() -> None:
    read_fd, write_fd = os.pipe()
    os.close(read_fd)
    try:
        with pytest.raises(BrokenPipeError):
            write_all(write_fd, b"nobody is listening\n")
    finally:
        os.close(write_fd)


def test_write_all_raises_on_a_descriptor_that_cannot_be_written(tmp_path: Path) -> None:
    target = tmp_path / "read-only"
    target.write_bytes(b"")
    fd = os.open(target, os.O_RDONLY)
    try:
        with pytest.raises(OSError):
            write_all(fd, b"x")
    finally:
        os.close(fd)


@pytest.mark.parametrize("mask", [0o000, 0o022, 0o077, 0o277])
def test_new_directories_are_private_whatever_the_umask(tmp_path: Path, umask, mask) -> None:
    umask(mask)
    target = tmp_path / "a" / "b" / "c"
    assert make_private_dir(target, RecordingSyncer()) == target
    for directory in (tmp_path / "a", tmp_path / "a" / "b", target):
        assert directory.is_dir()
        assert mode_of(directory) == 0o700


def test_each_new_directory_is_made_durable_in_its_parent_top_down(tmp_path: Path) -> None:
    syncer = RecordingSyncer()
    make_private_dir(tmp_path / "a" / "b" / "c", syncer)
    assert syncer.calls == [
        ("dir", tmp_path),
        ("dir", tmp_path / "a"),
        ("dir", tmp_path / "a" / "b"),
    ]
    assert syncer.dir_listings == [{"a"}, {"b"}, {"c"}]


def test_an_existing_directory_is_left_as_it_is(tmp_path: Path) -> None:
    shared = tmp_path / "shared"
    shared.mkdir()
    os.chmod(shared, 0o755)
    syncer = RecordingSyncer()
    assert make_private_dir(shared, syncer) == shared
    assert mode_of(shared) == 0o755
    assert syncer.calls == []


def test_only_the_missing_part_of_a_path_is_created(tmp_path: Path) -> None:
    os.chmod(tmp_path, 0o755)
    syncer = RecordingSyncer()
    make_private_dir(tmp_path / "new", syncer)
    assert mode_of(tmp_path) == 0o755
    assert syncer.calls == [("dir", tmp_path)]


def test_a_file_in_the_way_of_a_directory_is_refused(tmp_path: Path) -> None:
    blocker = tmp_path / "blocker"
    blocker.write_bytes(b"")
    with pytest.raises(NotADirectoryError):
        make_private_dir(blocker, RecordingSyncer())
    with pytest.raises(NotADirectoryError):
        make_private_dir(blocker / "below", RecordingSyncer())


def test_make_private_dir_accepts_a_string_path(tmp_path: Path) -> None:
    made = make_private_dir(str(tmp_path / "s"), RecordingSyncer())
    assert isinstance(made, Path)
    assert made.is_dir()


def test_the_real_syncer_syncs_a_file_and_a_directory(tmp_path: Path) -> None:
    assert isinstance(OS_SYNC, OsSync)
    target = tmp_path / "f"
    fd = os.open(target, os.O_CREAT | os.O_WRONLY, 0o600)
    try:
        write_all(fd, b"durable\n")
        OS_SYNC.sync_file(fd)
    finally:
        os.close(fd)
    OS_SYNC.sync_dir(tmp_path)
    OS_SYNC.sync_dir(str(tmp_path))
    make_private_dir(tmp_path / "real" / "sync")
    assert (tmp_path / "real" / "sync").is_dir()


def test_the_real_syncer_refuses_to_sync_a_file_as_a_directory(tmp_path: Path) -> None:
    target = tmp_path / "f"
    target.write_bytes(b"")
    with pytest.raises(NotADirectoryError):
        OS_SYNC.sync_dir(target)

