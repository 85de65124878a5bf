"""Worker deaths on demand, for the pool's tests: the zygote serving a
manifest found among this process's descendants (psutil), and a killer that
SIGKILLs each of its children (and of any zygote that replaces it) as it
appears, for a while or in bursts, from a thread. Everything is bounded.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from pathlib import Path

import psutil

# How often the killer looks for new workers: a fork takes a millisecond and
# a worker tens of them to say it is ready, so most die before they do.
SCAN_S = 0.002


def zygotes(manifest: Path) -> list[psutil.Process]:
    """The zygotes serving `manifest` (normally one) under this process. A
    worker is a fork of its zygote, command line and all: a zygote is the
    one whose parent is not one."""
    found = {}
    for process in psutil.Process().children(recursive=True):
        try:
            command = process.cmdline()
            parent = process.ppid()
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue
        if "staal.worker.processes.zygote" in command and str(manifest) in command:
            found[process.pid] = (process, parent)
    return [process for process, parent in found.values() if parent not in found]


def zygote(manifest: Path) -> psutil.Process:
    (found,) = zygotes(manifest)
    return found


class Killer:
    """SIGKILLs every worker of the zygote serving `manifest` as it appears."""

    def __init__(self, manifest: Path) -> None:
        self.manifest = manifest
        self.killed: list[int] = []
        self.stopped = threading.Event()
        self.thread: threading.Thread | None = None
        self.ended_at = 0.0  # when the last burst ended (monotonic)

    def _scan(self, known: list[psutil.Process]) -> list[psutil.Process]:
        if not known or not all(z.is_running() for z in known):
            known = zygotes(self.manifest)  # replaced: find the new one
        for parent in known:
            try:
                children = parent.children()
            except psutil.NoSuchProcess:
                continue
            for child in children:
                if child.pid not in self.killed:
                    try:
                        os.kill(child.pid, signal.SIGKILL)
                    except ProcessLookupError:
                        pass
                    self.killed.append(child.pid)
        return known

    def burst(self, seconds: float) -> list[int]:
        """Kill every worker as it appears for `seconds`, here; the pids killed."""
        before = len(self.killed)
        known: list[psutil.Process] = []
        end = time.monotonic() + seconds
        while time.monotonic() < end and not self.stopped.is_set():
            known = self._scan(known)
            self.stopped.wait(SCAN_S)  # the killer's pace, not a wait for anything
        self.ended_at = time.monotonic()
        return self.killed[before:]

    def bursts(self, on_s: float, off_s: float, bound_s: float) -> Killer:
        """In a thread: bursts of `on_s` seconds every `on_s + off_s`,
        until `stop()` or `bound_s` seconds."""
        def loop() -> None:
            end = time.monotonic() + bound_s
            while time.monotonic() < end and not self.stopped.is_set():
                self.burst(on_s)
                self.stopped.wait(off_s)

        self.thread = threading.Thread(target=loop, name="worker-killer", daemon=True)
        self.thread.start()
        return self

    def stop(self) -> None:
        self.stopped.set()
        if self.thread is not None:
            self.thread.join(10)
            assert not self.thread.is_alive(), "the killer did not stop"
