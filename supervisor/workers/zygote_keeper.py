"""The worker pool's zygote, kept (DESIGN.md section 6): started (the first
time, the one started early: zygote.py), asked for forks, its reports read
and handed to the pool, and watched.

One that dies is started again, after a backoff while they keep dying; one
that stops answering (fork requests with no report for ZYGOTE_SILENT_S, or
no "ready" within ZYGOTE_BOOT_S: pool_timing.ZygoteDeadlines) is killed and
so replaced. Only the first zygote, before it ever said ready, is not: a
program that kills it on import stops the server at start. When it is
started again is restarting.py's `Restarting`, the verifier's too; its
lifecycle is that class's table.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Protocol

from staal.runtime.backoff import Backoff
from staal.runtime.clock import Monotonic
from staal.supervisor.telemetry.log import Log
from staal.supervisor.workers.exits import describe_exit, wait_status
from staal.supervisor.workers.pool_states import PoolState, ZygoteGone
from staal.supervisor.workers.pool_timing import ZygoteDeadlines
from staal.supervisor.workers.restarting import Cancellable, ChildState, Restarting
from staal.supervisor.workers.zygote import Spawned, spawn

# The pool's own tasks and timers (logged if they fail; cancelled when it closes).
Task = Callable[[Coroutine[object, object, None]], asyncio.Task[None]]
Later = Callable[[float, Callable[[], None]], asyncio.TimerHandle]


class Reports(Protocol):
    """What the pool does with what its zygote reports."""

    def started(self) -> None:
        """A zygote was started: ask it for what the pool lacks."""

    def forked(self, pid: int) -> None: ...

    def unforked(self, errno: str) -> None: ...

    def exited(self, pid: int, status: int) -> None: ...

    def died(self, how: str) -> None:
        """The zygote died; its workers die with it (they ask the kernel to), unreported."""

    def ended(self, gone: ZygoteGone) -> None:
        """No worker will come any more: the first zygote failed, or the pool closed."""


class _OnTheKeepersClock:
    """Restarting's scheduler on the keeper's own clock and timers (a fake
    clock in the tests, the loop's otherwise)."""

    def __init__(self, clock: Monotonic, later: Later) -> None:
        self.clock, self.later = clock, later

    def time(self) -> float:
        return self.clock.monotonic()

    def call_later(self, delay: float, callback: Callable[[], None]) -> Cancellable:
        return self.later(delay, callback)


class ZygoteKeeper:
    def __init__(self, manifest: Path, endpoint: str, env: dict[str, str], early: Spawned | None,
                 pool: Reports, clock: Monotonic, log: Log, task: Task,
                 later: Later) -> None:
        self.manifest, self.endpoint, self.env, self.early = manifest, endpoint, env, early
        self.pool = pool
        self.clock = clock
        self.log = log
        self.task, self.later = task, later
        self.process: subprocess.Popen[bytes] | None = None
        self.exit = ""  # how the last one ended
        self.asked = 0  # forks asked of this zygote that it has not reported yet
        self.due = ZygoteDeadlines(clock)  # by when it owes an answer
        self.reports: asyncio.Task[None] | None = None
        self.life = Restarting(start=self._respawn, lost=self._died, moved=self._moved,
                               backoff=Backoff(first=0.5, cap=5.0, quiet=60.0),
                               scheduler=_OnTheKeepersClock(clock, later))

    @property
    def state(self) -> ChildState:
        return self.life.state

    def move(self, event: str) -> None:
        """A move of the zygote's lifecycle (restarting.py's table)."""
        self.life.move(event)

    def _moved(self, state: ChildState) -> None:
        if state in (PoolState.FAILED, PoolState.CLOSED):
            self.pool.ended(ZygoteGone(f"the zygote exited ({self.exit}); see the log above"
                                       if state is PoolState.FAILED
                                       else "the worker pool is closed"))

    def start(self) -> subprocess.Popen[bytes]:
        """Start a zygote (the first time, the one started early) and ask it
        for the workers the pool lacks; the zygote started."""
        spawned, self.early = self.early, None
        if spawned is None:
            spawned = spawn(self.manifest, self.endpoint, self.env)
        self.process = spawned.process
        self.asked = 0
        self.due.started()
        self.reports = self.task(self._read_reports(spawned.report_fd, spawned.process))
        self.pool.started()
        return spawned.process

    def ask(self, forks: int) -> None:
        """Ask the zygote (one was started, with a pipe for its stdin) for `forks` more."""
        assert self.process is not None and self.process.stdin is not None
        try:
            self.process.stdin.write(f"fork {forks}\n".encode())
            self.process.stdin.flush()
        except OSError as exc:
            # It is dead: the end of its report pipe says so next.
            self.log("zygote_unwritable", level="warning", error=str(exc))
            return
        self.asked += forks
        self.owed()

    def owed(self) -> None:
        """The zygote answered something: it owes the rest of what was asked
        (pool_timing.ZygoteDeadlines), if anything."""
        self.due.answered(self.state is PoolState.UP and self.asked > 0)

    def look(self) -> None:
        """The watch's look: a zygote that stopped answering is killed (and so replaced)."""
        overdue = self.due.overdue(self.state)
        if overdue is not None:
            self._kill(overdue)

    async def close(self) -> None:
        """After `move("close")`: closing its stdin makes it kill every
        worker it forked (the server closes only after every call in flight
        was answered); then it is waited for, or killed."""
        if self.process is not None and self.process.stdin is not None:
            try:
                self.process.stdin.close()
            except OSError:
                pass
        if self.reports is not None:
            self.reports.cancel()
        if self.process is not None:
            try:
                await asyncio.wait_for(asyncio.to_thread(self.process.wait), 5)
            except TimeoutError:
                self.process.kill()

    async def _read_reports(self, fd: int, zygote: subprocess.Popen[bytes]) -> None:
        """The zygote's report lines: "ready", "forked PID", "unforked ERRNO"
        and "exit PID STATUS"; then its own end."""
        reader = asyncio.StreamReader()
        loop = asyncio.get_running_loop()
        await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), os.fdopen(fd, "rb"))
        while line := await reader.readline():
            self.report(line.decode().strip())
        code = await asyncio.to_thread(zygote.wait)
        self._died(describe_exit(wait_status(code)))

    def report(self, line: str) -> None:
        """One report line of the zygote's."""
        verb, _, rest = line.partition(" ")
        if verb == "ready":
            self._up()
            return
        if verb == "forked":
            self.asked = max(0, self.asked - 1)
            self.pool.forked(int(rest))
        elif verb == "unforked":
            self.asked = max(0, self.asked - 1)
            self.pool.unforked(rest)
        elif verb == "exit":
            pid_text, _, status = rest.partition(" ")
            self.pool.exited(int(pid_text), int(status))
        self.owed()

    def _up(self) -> None:
        self.life.move("up")
        self.due.up()
        self.owed()

    def _died(self, how: str) -> None:
        self.exit = how
        delay = self.life.died()  # a replacement is scheduled, unless none will come
        self.asked = 0
        self.due.clear()
        self.pool.died(how)
        if self.state is PoolState.CLOSED:
            return
        self.log("zygote_exited", level="error", how=how)
        if delay is not None:
            self.log("zygote_replacing", retry_in_s=delay)

    def _respawn(self) -> None:
        """Restarting's start: a replacement zygote (OSError if it could not be started)."""
        zygote = self.start()
        self.log("zygote_started", pid=zygote.pid)

    def _kill(self, why: str) -> None:
        assert self.process is not None  # only a zygote that was started is overdue
        self.log("zygote_silent", level="error", pid=self.process.pid, why=why)
        self.due.clear()
        try:
            self.process.kill()  # its report pipe then ends, and it is replaced
        except OSError:
            pass
