"""The supervisor's workers: a zygote that forks them, a ZeroMQ ROUTER they
connect to, and a few forked ahead of demand (DESIGN.md section 6).

A worker says it is ready with a heartbeat that names no run. `checkout()`
hands out a ready worker and asks the zygote for a replacement at once, so
the fork happens on the other core while this call runs. The zygote reports
every exit; a worker that exits (or stops sending heartbeats) before its run
ended is reported to whoever waits on it as `WorkerLost`, with how it ended.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import zmq
import zmq.asyncio

from staal.errors import StaalError
from staal.messages import Check, Checked, Ended, Heartbeat, Run, StoppedMsg, pack, unpack
from staal.records import Record
from staal.supervisor.zygote import Spawned, spawn

HEARTBEAT_TIMEOUT_S = 15.0
END_GRACE_S = 5.0
READY_TIMEOUT_S = 60.0


class ZygoteGone(StaalError):
    """The zygote exited: no worker can be forked until it is started again."""

    kind = "zygote_gone"


class WorkerLost(StaalError):
    """A worker ended before its run did."""

    kind = "worker_lost"

    def __init__(self, pid: int, how: str, status: int | None = None) -> None:
        super().__init__(f"worker {pid} {how}")
        self.pid = pid
        self.how = how
        # The wait status the zygote reported, when it died (None: it went
        # silent, or died with the zygote); staal.budgets.own_limit reads it.
        self.status = status


MAX_ZYGOTE_RESPAWNS = 3


def _status_of(returncode: int) -> int:
    """A wait status from a Popen return code (negative: killed by a signal)."""
    return -returncode if returncode < 0 else returncode << 8


def describe_exit(status: int) -> str:
    if os.WIFSIGNALED(status):
        number = os.WTERMSIG(status)
        try:
            name = signal.Signals(number).name
        except ValueError:
            name = f"signal {number}"
        return f"was killed by {name}"
    return f"exited with code {os.waitstatus_to_exitcode(status)}"


@dataclass
class Worker:
    pid: int
    identity: bytes
    inbox: asyncio.Queue = field(default_factory=asyncio.Queue)
    run: str | None = None
    last_seen: float = field(default_factory=time.monotonic)
    gone: str | None = None
    ended: bool = False  # its run's end (Ended or StoppedMsg) has arrived


class Pool:
    def __init__(self, manifest: Path, runtime_dir: Path, env: dict[str, str],
                 ahead: int = 2, log: Callable[..., None] | None = None,
                 early: Spawned | None = None) -> None:
        self.manifest = manifest
        self.endpoint = early.endpoint if early else f"ipc://{runtime_dir / 'workers'}"
        self.early = early
        self.env = env
        self.ahead = ahead
        self.log = log or (lambda *a, **k: None)
        self.context = zmq.asyncio.Context()
        self.router = self.context.socket(zmq.ROUTER)
        self.router.setsockopt(zmq.LINGER, 0)
        self.workers: dict[bytes, Worker] = {}
        self.idle: asyncio.Queue[Worker] = asyncio.Queue()
        self.requested = 0
        self.zygote: subprocess.Popen | None = None
        self.tasks: list[asyncio.Task] = []
        self.closing = False
        self.serving = False  # set once start-up checks passed: only then respawn
        self.respawns = 0
        self.zygote_exit = ""
        self.zygote_gone = asyncio.Event()

    # -- life -----------------------------------------------------------

    async def start(self) -> None:
        self.router.bind(self.endpoint)
        await self._spawn_zygote()
        loop = asyncio.get_running_loop()
        self.tasks = [loop.create_task(self._receive()), loop.create_task(self._watch())]

    async def _spawn_zygote(self) -> None:
        self.zygote_gone = asyncio.Event()
        spawned, self.early = self.early, None  # started before the rest of start-up
        if spawned is None:
            spawned = spawn(self.manifest, self.endpoint, self.env)
        self.zygote = spawned.process
        self.reports = asyncio.get_running_loop().create_task(self._reports(spawned.report_fd))
        self.fork(self.ahead)

    async def close(self) -> None:
        self.closing = True
        if self.zygote is not None and self.zygote.stdin is not None:
            try:
                self.zygote.stdin.close()
            except OSError:
                pass
        # Closing the zygote's stdin makes it kill every worker it forked;
        # the server closes only after every call in flight was answered.
        for task in [*self.tasks, self.reports]:
            task.cancel()
        if self.zygote is not None:
            try:
                await asyncio.wait_for(asyncio.to_thread(self.zygote.wait), 5)
            except TimeoutError:
                self.zygote.kill()
        self.router.close()
        self.context.term()

    def fork(self, count: int = 1) -> None:
        if self.closing or self.zygote is None or self.zygote.stdin is None:
            return
        self.requested += count
        try:
            self.zygote.stdin.write(f"fork {count}\n".encode())
            self.zygote.stdin.flush()
        except OSError as exc:
            self.log("zygote_gone", level="error", error=str(exc))

    # -- handing out workers ------------------------------------------------

    async def _ready(self) -> Worker:
        """The next ready worker; `ZygoteGone` at once if none can come."""
        getter = asyncio.ensure_future(self.idle.get())
        gone = asyncio.ensure_future(self.zygote_gone.wait())
        try:
            done, _ = await asyncio.wait({getter, gone}, timeout=READY_TIMEOUT_S,
                                         return_when=asyncio.FIRST_COMPLETED)
        finally:
            gone.cancel()
        if getter in done:
            return getter.result()
        getter.cancel()
        if self.zygote_gone.is_set():
            raise ZygoteGone(f"the zygote exited ({self.zygote_exit}); see the log above")
        raise ZygoteGone(f"no worker was ready within {READY_TIMEOUT_S:.0f} s")

    async def checkout(self) -> Worker:
        """A ready worker, for one run; a replacement is forked at once."""
        while True:
            worker = await self._ready()
            if worker.gone is None:
                self.fork(1)
                return worker

    async def check(self, tool: str) -> Checked:
        worker = await self._ready()
        try:
            check = Check(manifest=str(self.manifest), tool=tool)
            await self.router.send_multipart([worker.identity, pack(check)])
            while True:
                message = await self._next(worker)
                if isinstance(message, Checked):
                    return message
        finally:
            if worker.gone is None:
                self.idle.put_nowait(worker)

    async def run(self, worker: Worker, message: Run,
                  on_message: Callable[[Record], None]) -> Ended | StoppedMsg:
        """Send the run and wait for its end; every other message (started,
        print) goes to `on_message`. `WorkerLost` if the worker dies first."""
        worker.run = message.run
        worker.last_seen = time.monotonic()
        await self.router.send_multipart([worker.identity, pack(message)])
        while True:
            reply = await self._next(worker)
            if isinstance(reply, (Ended, StoppedMsg)):
                worker.ended = True
                if worker.gone is not None:
                    self.workers.pop(worker.identity, None)  # kept for this message (_lost)
                return reply
            on_message(reply)

    async def _next(self, worker: Worker) -> Record:
        item = await worker.inbox.get()
        if isinstance(item, WorkerLost):
            raise item
        return item

    # -- what arrives ----------------------------------------------------------

    async def _receive(self) -> None:
        while True:
            identity, frame = await self.router.recv_multipart()
            try:
                message = unpack(frame)
            except StaalError as exc:
                self.log("bad_worker_message", level="error", error=exc.message)
                continue
            worker = self.workers.get(identity)
            if worker is None:
                if not isinstance(message, Heartbeat):
                    continue
                worker = Worker(pid=message.pid, identity=identity)
                self.workers[identity] = worker
                self.idle.put_nowait(worker)
                continue
            worker.last_seen = time.monotonic()
            if isinstance(message, Heartbeat):
                continue
            worker.inbox.put_nowait(message)

    async def _reports(self, fd: int) -> None:
        reader = asyncio.StreamReader()
        loop = asyncio.get_running_loop()
        await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), os.fdopen(fd, "rb"))
        while line := await reader.readline():
            verb, _, rest = line.decode().strip().partition(" ")
            if verb == "exit":
                pid_text, _, status = rest.partition(" ")
                self._exited(int(pid_text), int(status))
        code = await asyncio.to_thread(self.zygote.wait)
        self.zygote_exit = describe_exit(_status_of(code))
        self.zygote_gone.set()
        # Its workers die with it (they ask the kernel to), unreported.
        for worker in list(self.workers.values()):
            self._lost(worker, f"died with the zygote, which {self.zygote_exit}")
        if not self.closing:
            self.log("zygote_exited", level="error", how=self.zygote_exit)
            await self._respawn()

    async def _respawn(self) -> None:
        """While serving, a zygote that died is started again (a few times):
        calls in flight that wait for a worker get `ZygoteGone` meanwhile."""
        self.respawns += 1
        if self.respawns > MAX_ZYGOTE_RESPAWNS or not self.serving:
            return
        self.requested = 0
        await self._spawn_zygote()

    def _exited(self, pid: int, status: int) -> None:
        worker = self.workers.get(f"w{pid}".encode())
        if worker is not None:
            self._lost(worker, describe_exit(status), clean=status == 0, status=status)

    def _lost(self, worker: Worker, how: str, clean: bool = False,
              status: int | None = None) -> None:
        """A worker is gone: whoever waits on its run learns how; an idle one
        is replaced to keep the pool ahead of demand."""
        if worker.gone is not None:
            self.workers.pop(worker.identity, None)
            return
        worker.gone = how
        if worker.run is not None and clean and not worker.ended:
            # A worker exits cleanly just after sending its run's end, and the
            # zygote's report of the exit can overtake that message on its way
            # through the socket: keep routing to the worker until it arrives,
            # for a while; an end that never comes is a lost worker.
            asyncio.get_running_loop().call_later(END_GRACE_S, self._end_overdue, worker, how)
            return
        self.workers.pop(worker.identity, None)
        if worker.run is not None and not clean:
            worker.inbox.put_nowait(WorkerLost(worker.pid, how, status))
        elif worker.run is None and not self.closing:
            self.fork(1)

    async def _watch(self) -> None:
        """Kill the process group of a worker that stopped sending heartbeats
        (stuck inside C code holding the interpreter, say)."""
        while True:
            await asyncio.sleep(HEARTBEAT_TIMEOUT_S / 3)
            now = time.monotonic()
            for worker in list(self.workers.values()):
                if worker.gone is None and now - worker.last_seen > HEARTBEAT_TIMEOUT_S:
                    self.log("worker_stuck", level="warning", pid=worker.pid, run=worker.run)
                    self._kill(worker)

    def _end_overdue(self, worker: Worker, how: str) -> None:
        if not worker.ended:
            self.workers.pop(worker.identity, None)
            worker.inbox.put_nowait(WorkerLost(worker.pid, f"{how} without reporting its run's end"))

    def _kill(self, worker: Worker) -> None:
        try:
            os.killpg(worker.pid, signal.SIGKILL)
        except ProcessLookupError:
            self._lost(worker, "vanished without a report")
        except PermissionError:
            pass
