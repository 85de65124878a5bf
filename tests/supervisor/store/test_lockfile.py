"""staal.supervisor.store.lockfile: one server per journal directory (seed 000 section 6)."""

from __future__ import annotations

import fcntl
import os
import stat
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from staal.errors import StaalError
from staal.supervisor.store.lockfile import LOCK_FILE, LockWaitStopped, ServerLock, ServerLockHeld

BOUND = 10.0  # seconds any wait in these tests may take before it fails

# Takes the lock, says so on stdout, and holds it until stdin closes.
HOLDER = """
import sys
from staal.supervisor.store.lockfile import ServerLock
lock = ServerLock.acquire(sys.argv[1], wait_s=0)
sys.stdout.write("held\\n")
sys.stdout.flush()
sys.stdin.read()
lock.release()
"""


class Holder:
    """Another process holding the lock of `journals`."""

    def __init__(self, journals: Path) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-c", HOLDER, str(journals)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        assert self.process.stdout is not None
        assert self.process.stdout.readline() == "held\n"

    def let_go(self) -> None:
        assert self.process.stdin is not None
        self.process.stdin.close()

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait(BOUND)
        for stream in (self.process.stdin, self.process.stdout):
            if stream is not None and not stream.closed:
                stream.close()


@pytest.fixture
def holder(tmp_path: Path) -> Iterator[Holder]:
    process = Holder(tmp_path / "journals")
    try:
        yield process
    finally:
        process.stop()


def test_the_lock_file_is_created_0600_in_a_0700_directory(tmp_path: Path) -> None:
    journals = tmp_path / "journals"
    with ServerLock.acquire(journals) as lock:
        assert lock.path == journals / LOCK_FILE
        assert stat.S_IMODE(os.stat(journals).st_mode) == 0o700
        assert stat.S_IMODE(os.stat(lock.path).st_mode) == 0o600
        assert lock.held


def test_a_lock_held_elsewhere_in_this_process_is_refused_once_the_wait_is_over(
        tmp_path: Path) -> None:
    with ServerLock.acquire(tmp_path), pytest.raises(ServerLockHeld) as caught:
        ServerLock.acquire(tmp_path, wait_s=0)
    assert caught.value.kind == "server_lock_held"
    assert caught.value.path == tmp_path / LOCK_FILE


def test_a_lock_held_by_another_server_is_refused_after_the_wait_naming_the_lock_file(
        tmp_path: Path, holder: Holder) -> None:
    waits: list[str] = []
    started = time.monotonic()
    with pytest.raises(StaalError) as caught:
        ServerLock.acquire(tmp_path / "journals", wait_s=0.3, on_wait=lambda: waits.append("w"))
    assert time.monotonic() - started >= 0.3
    assert caught.value.kind == "server_lock_held"
    assert isinstance(caught.value, ServerLockHeld)
    assert caught.value.path == tmp_path / "journals" / LOCK_FILE
    assert caught.value.waited_s == 0.3
    assert waits == ["w"]


def test_a_holder_killed_with_sigkill_frees_the_lock_within_the_wait(
        tmp_path: Path, holder: Holder) -> None:
    # Killed only once we are already waiting, so the wait is what lets us in.
    with ServerLock.acquire(tmp_path / "journals", wait_s=BOUND, on_wait=holder.process.kill):
        pass
    assert holder.process.wait(BOUND) == -9


def test_a_holder_that_lets_go_while_we_wait_lets_us_in(
        tmp_path: Path, holder: Holder) -> None:
    with ServerLock.acquire(tmp_path / "journals", wait_s=BOUND, on_wait=holder.let_go):
        pass
    assert holder.process.wait(BOUND) == 0


def test_a_released_lock_can_be_taken_again_and_release_is_idempotent(tmp_path: Path) -> None:
    lock = ServerLock.acquire(tmp_path)
    lock.release()
    lock.release()
    assert not lock.held
    with ServerLock.acquire(tmp_path, wait_s=0):
        pass


def test_the_lock_is_not_inherited_across_exec(tmp_path: Path) -> None:
    with ServerLock.acquire(tmp_path) as lock:
        fd = lock._fd
        assert fcntl.fcntl(fd, fcntl.F_GETFD) & fcntl.FD_CLOEXEC


def test_the_lock_file_names_its_holder_and_is_never_removed(tmp_path: Path) -> None:
    with ServerLock.acquire(tmp_path) as lock:
        assert lock.path.read_text() == f"{os.getpid()}\n"
    assert (tmp_path / LOCK_FILE).exists()


def test_an_existing_lock_file_left_by_a_dead_server_is_taken(tmp_path: Path) -> None:
    (tmp_path / LOCK_FILE).write_text("999999\n")
    with ServerLock.acquire(tmp_path, wait_s=0) as lock:
        assert lock.path.read_text() == f"{os.getpid()}\n"


def test_a_wait_given_up_from_another_thread_ends_at_once_holding_nothing(tmp_path: Path) -> None:
    stop = threading.Event()
    with ServerLock.acquire(tmp_path):
        waited = threading.Timer(0.05, stop.set)
        waited.start()
        with pytest.raises(LockWaitStopped):
            ServerLock.acquire(tmp_path, wait_s=3600, stop=stop)  # not its hour: the stop ends it
        waited.join(BOUND)
    with ServerLock.acquire(tmp_path, wait_s=0):  # the given-up wait kept nothing
        pass
