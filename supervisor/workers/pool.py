"""The supervisor's workers: a zygote that forks them (kept by
zygote_keeper.py), a ZeroMQ ROUTER they connect to (router.py), and `ahead` fresh ones
kept ready (DESIGN.md section 6).

Every fork asked for is accounted for, from the zygote's report of it
through the worker's states (pool_states.py) to its exit; whenever fewer
than `ahead` fresh workers are on their way or ready, more are asked for at
once, and while workers keep dying unused only after a backoff
(pool_timing.ForkPace). A call waits a bounded time for a worker of its
grant set (`checkout`) in the line (line.py); a worker serves runs of the
grant set its first run bound it to, resting between them (resting.py). A
worker that exits or goes silent before its run ended is reported to
whoever waits on it as `WorkerLost`; one killed computing while silent, or
past a warm run's CPU ceiling, is a runaway (silence.py): its run ends as
`budget`. Every reading of time is the pool's clock's (`Monotonic`), so
its decisions are tested on a clock the test moves.
"""

from __future__ import annotations

import asyncio
import os
import signal
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from staal.errors import StaalError
from staal.records.messages import (
    Check,
    Checked,
    Ended,
    Heartbeat,
    JournalAppend,
    Retire,
    Run,
    StoppedMsg,
    pack,
    unpack,
)
from staal.records.record import Record
from staal.records.runconfig import config_key
from staal.runtime.clock import MONOTONIC, Monotonic
from staal.supervisor.telemetry.log import Log
from staal.supervisor.workers.chores import Chores
from staal.supervisor.workers.exits import describe_exit
from staal.supervisor.workers.line import WorkerLine
from staal.supervisor.workers.pool_states import (
    HAS_ZYGOTE,
    SUPPLY,
    UNUSED,
    WATCHED,
    Cancels,
    Lease,
    OnJournal,
    PoolError,
    PoolState,
    Worker,
    WorkerLost,
    WorkerState,
    ZygoteGone,
    acknowledge,
)
from staal.supervisor.workers.pool_timing import ForkPace
from staal.supervisor.workers.resting import Resting, one_run
from staal.supervisor.workers.router import WorkerRouter
from staal.supervisor.workers.silence import SILENT_S, CpuCeiling, Silence, SilenceWatch, Verdict
from staal.supervisor.workers.zygote import Spawned
from staal.supervisor.workers.zygote_keeper import ZygoteKeeper

END_GRACE_S = 5.0
WATCH_S = 1.0
# How long a checkout waits for a worker: before serving, the zygote's own
# start on a loaded machine; while serving, what a call may wait before it
# is told the truth (far less than a client's patience).
START_WAIT_S = 60.0
CALL_WAIT_S = 10.0


def _no_log(event: str, level: str = "info", **fields: object) -> None:
    """A pool made without a log (tests, benchmarks) logs nothing."""


class Pool:
    def __init__(self, manifest: Path, runtime_dir: Path, env: dict[str, str],
                 ahead: int = 2, log: Log | None = None,
                 early: Spawned | None = None, clock: Monotonic = MONOTONIC,
                 reuse: Callable[[str], int] = one_run, max_idle: int = 16,
                 cpu_ceiling: Callable[[str], float | None] | None = None) -> None:
        self.manifest = manifest
        self.clock = clock
        self.endpoint = early.endpoint if early else f"ipc://{runtime_dir / 'workers'}"
        self.ahead = ahead
        self.log: Log = log or _no_log
        self.router = WorkerRouter(self._arrived)
        self.serving = False  # set by the server once it serves: the calls' wait applies
        self.chores = Chores(self.log)  # the pool's own tasks and timers
        self._task, self._later = self.chores.task, self.chores.later
        self.zygote = ZygoteKeeper(manifest, self.endpoint, env, early, self, clock, self.log,
                                   self._task, self._later)
        self.workers: dict[bytes, Worker] = {}
        self.line = WorkerLine()  # idle workers and the calls waiting for one
        self.resting = Resting(self.line, clock, self.log, self._tell_retire, reuse, max_idle)
        # Heartbeats that overtook the zygote's report of their fork, by when.
        self.heard_early: dict[bytes, float] = {}
        self.forks = ForkPace(clock)  # when the next fork may be asked
        self.deaths = {"run": 0, "idle": 0}  # every worker that died, for the metrics
        self.silence = SilenceWatch(clock.monotonic)  # why a silent worker is silent
        self.ceilings = CpuCeiling(cpu_ceiling)  # a warm run's CPU at most, by grant set
        self.fork_timer: asyncio.TimerHandle | None = None
        self.cancels = Cancels()  # runs of its calls whose tasks were cancelled

    # -- the pool's life ---------------------------------------------------

    async def start(self) -> None:
        self.router.bind(self.endpoint)
        self.zygote.start()
        self._task(self._watch())

    async def close(self) -> None:
        self.zygote.move("close")
        self.chores.cancel()
        await self.zygote.close()
        self.router.close()

    # -- what the zygote reports (zygote_keeper.Reports) -------------------------

    def started(self) -> None:
        self.heard_early.clear()
        self._replenish()

    def forked(self, pid: int) -> None:
        worker = Worker(pid=pid, identity=f"w{pid}".encode(), last_seen=self.clock.monotonic())
        self.workers[worker.identity] = worker
        if self.heard_early.pop(worker.identity, None) is not None:
            self._heard(worker)

    def unforked(self, errno: str) -> None:
        self._died_unused(f"could not be forked (errno {errno})", None)

    def exited(self, pid: int, status: int) -> None:
        worker = self.workers.get(f"w{pid}".encode())
        if worker is not None:
            self._gone(worker, describe_exit(status), clean=status == 0, status=status)

    def died(self, how: str) -> None:
        for worker in list(self.workers.values()):
            if worker.state is not WorkerState.DRAINING:
                self._gone(worker, f"died with the zygote, which {how}", strike=False)

    def ended(self, gone: ZygoteGone) -> None:
        self.line.close(gone)

    # -- keeping `ahead` workers on their way ----------------------------------

    def _replenish(self) -> None:
        """Ask for as many forks as keep `ahead` workers on their way or
        ready; while workers keep dying unused, not before the backoff says."""
        if self.zygote.state not in HAS_ZYGOTE:
            return
        missing = (self.ahead - self.zygote.asked
                   - sum(w.state in SUPPLY and w.fresh for w in self.workers.values()))
        if missing <= 0:
            return
        wait = self.forks.wait_s()
        if wait > 0:
            if self.fork_timer is None:
                self.fork_timer = self._later(wait, self._fork_due)
            return
        self.zygote.ask(missing)

    def _fork_due(self) -> None:
        self.fork_timer = None
        self._replenish()

    # -- handing out workers ------------------------------------------------

    async def checkout(self, key: str | None = None, wait_s: float | None = None) -> Lease:
        """A ready worker for a run of grant set `key` (config_key), lent
        for one run (`run`, or `give_back` if the call ends before its run
        starts); the pool forks a fresh one's replacement at once.
        `NoWorker` if none is ready within the wait."""
        if wait_s is None:
            wait_s = CALL_WAIT_S if self.serving else START_WAIT_S
        worker = await self.line.take(key, wait_s)
        worker.move("lend")
        worker.lease += 1
        if worker.fresh:
            self._replenish()
        return Lease(worker, worker.lease)

    def give_back(self, lease: Lease) -> None:
        """A lent worker whose call ended before its run was sent goes back to the
        idle line; for any other, or a lending over (it ran, rested, was lent again), nothing."""
        worker = lease.worker
        if lease.current and worker.state is WorkerState.LENT:
            worker.move("give_back")
            self.line.offer(worker)

    async def check(self, tool: str) -> Checked:
        worker = await self.line.take(None, START_WAIT_S)
        worker.move("check")
        try:
            self._send(worker, Check(manifest=str(self.manifest), tool=tool))
            while True:
                message = await self._next(worker)
                if isinstance(message, Checked):
                    return message
        finally:
            if worker.state is WorkerState.CHECKING:
                worker.move("checked")
                self.line.offer(worker)

    async def run(self, lease: Lease, message: Run,
                  on_message: Callable[[Record], None],
                  on_journal: OnJournal | None = None) -> Ended | StoppedMsg:
        """Send the run and wait for its end; every other message (started,
        print) goes to `on_message`, a journal record to `on_journal`, whose
        answer (None: committed; else why not) the worker waits for.
        `WorkerLost` if the worker dies first."""
        worker = lease.worker
        if worker.state is WorkerState.GONE:
            raise WorkerLost(worker.pid, worker.how)  # it died while lent
        if not lease.current:
            raise PoolError(f"worker {worker.pid}: lease {lease.n} is over")
        key = config_key(message.tool, message.grants)
        if worker.key not in (None, key):
            raise PoolError(f"worker {worker.pid} serves {worker.key!r}, not {key!r}")
        worker.move("run")
        worker.key, worker.run, worker.runaway = key, message.run, False
        worker.runs += 1
        worker.last_seen = self.clock.monotonic()
        message = replace(message, last=self.resting.last(worker), cancelled=self.cancels.take(message.run))
        self.router.send(worker.identity, pack(message))
        while True:
            reply = await self._next(worker)
            if isinstance(reply, (Ended, StoppedMsg)):
                self._after_run(worker, reply)
                return reply
            if isinstance(reply, JournalAppend):
                self._send(worker, await acknowledge(reply, on_journal))
                continue
            on_message(reply)

    def cancel(self, run: str) -> bool:
        """Stop run `run`, of this process, before its next action; False if asked already."""
        return self.cancels.ask(self.workers.values(), run)

    def _after_run(self, worker: Worker, reply: Ended | StoppedMsg) -> None:
        """The run ended: a worker that stays rests (resting.py); any other
        exits of itself, unless its death was reported before its end was read."""
        worker.run = None
        if (worker.state is WorkerState.GONE
                or self.resting.after_run(worker, reply, self.zygote.state is PoolState.CLOSED)):
            return
        if worker.move("end") is WorkerState.GONE:
            self.workers.pop(worker.identity, None)  # kept for this message

    def _tell_retire(self, worker: Worker) -> None:
        self._send(worker, Retire())

    def _send(self, worker: Worker, message: Record) -> None:
        self.router.send(worker.identity, pack(message))

    async def _next(self, worker: Worker) -> Record:
        item = await worker.inbox.get()
        if isinstance(item, WorkerLost):
            raise item
        return item

    # -- what arrives ----------------------------------------------------------

    def _arrived(self, frames: list[bytes]) -> None:
        if len(frames) != 2:
            self.log("bad_worker_message", level="error", error=f"{len(frames) - 1} frames, not 1")
            return
        identity, frame = frames
        try:
            message = unpack(frame)
        except StaalError as exc:
            self.log("bad_worker_message", level="error", error=exc.message)
            return
        worker = self.workers.get(identity)
        if worker is None:
            if isinstance(message, Heartbeat):
                self.heard_early[identity] = self.clock.monotonic()
            return
        worker.last_seen = self.clock.monotonic()
        if isinstance(message, Heartbeat):
            if worker.state is WorkerState.STARTING:
                self._heard(worker)
            return
        worker.inbox.put_nowait(message)

    def _heard(self, worker: Worker) -> None:
        worker.move("heard")
        deaths = self.forks.ready_again()
        if deaths:
            self.log("workers_ready_again", unused_deaths=deaths)
        self.line.offer(worker)

    def _gone(self, worker: Worker, how: str, clean: bool = False, strike: bool = True,
              status: int | None = None) -> None:
        """A worker exited: whoever waits on it learns how, and the pool
        forks what it now lacks."""
        was = worker.state
        if was is WorkerState.DRAINING:
            return
        self.silence.forget(worker.pid)
        self.ceilings.forget(worker.pid)
        if not clean and self.zygote.state is not PoolState.CLOSED:
            self.deaths["run" if was is WorkerState.RUNNING else "idle"] += 1
        if worker.move("exit_clean" if clean else "exit") is WorkerState.DRAINING:
            # Keep routing to it for a while: its run's end is on its way.
            self._later(END_GRACE_S, lambda: self._end_overdue(worker, how))
            return
        worker.how = how
        self.workers.pop(worker.identity, None)
        self.line.withdraw(worker)
        if was in WATCHED:
            worker.inbox.put_nowait(WorkerLost(worker.pid, how, status, runaway=worker.runaway))
        if was in UNUSED and strike and self.zygote.state is not PoolState.CLOSED:
            if worker.runs == 0:
                self._died_unused(f"worker {worker.pid} {how} while {was.value}", worker.pid)
            else:
                # No backoff (its fork did good); what the deaths metric's alert points at.
                self.log("worker_died_between_runs", level="warning", pid=worker.pid,
                         key=worker.key, runs=worker.runs, how=how)
        self._replenish()

    def _died_unused(self, what: str, pid: int | None) -> None:
        """A fork that did no good: the next waits for the backoff."""
        delay = self.forks.died_unused()
        self.log("worker_died_unused", level="warning", pid=pid, how=what, retry_in_s=delay)
        self._replenish()

    def _end_overdue(self, worker: Worker, how: str) -> None:
        if worker.state is WorkerState.DRAINING:
            worker.move("overdue")
            worker.how = how
            self.workers.pop(worker.identity, None)
            worker.inbox.put_nowait(WorkerLost(worker.pid, f"{how} without reporting its run's end"))

    # -- the watch ---------------------------------------------------------------

    async def _watch(self) -> None:
        """Once a second: a zygote that stopped answering is killed (and so
        replaced: zygote_keeper.py), and so is the process group of a worker that stopped
        sending heartbeats (stuck inside C code holding the interpreter, say;
        a running one that burned CPU meanwhile is a runaway: silence.py)."""
        while True:
            await self.clock.sleep(WATCH_S)
            self.look()

    def look(self) -> None:
        """One look of the watch, at the clock's time now."""
        self.zygote.look()
        for worker in list(self.workers.values()):
            if worker.state is not WorkerState.DRAINING and not worker.killed:
                verdict = self.silence.look(worker.pid, worker.last_seen)
                if verdict is not None:
                    self._kill_silent(worker, verdict)
                elif worker.state is WorkerState.RUNNING:
                    self._watch_cpu(worker)
        now = self.clock.monotonic()
        self.resting.look()
        for identity, when in list(self.heard_early.items()):
            if now - when > SILENT_S:
                del self.heard_early[identity]  # a worker of a zygote that is gone

    def _watch_cpu(self, worker: Worker) -> None:
        """A warm run past its CPU ceiling (silence.CpuCeiling) is killed as a runaway."""
        spent = self.ceilings.over(worker.pid, worker.run, worker.key)
        if spent is not None:
            worker.runaway = True
            self.log("worker_over_cpu", level="warning", pid=worker.pid, run=worker.run,
                     cpu_s=round(spent, 2))
            self._kill(worker)

    def _kill_silent(self, worker: Worker, verdict: Verdict) -> None:
        """Kill a worker silent for SILENT_S; one whose run burned CPU meanwhile
        is a runaway, its run ended as budget (run_crashes.py). The mark is in
        memory only: a supervisor that dies before the end is journaled has
        the run resumed once at start, and killed as a runaway again."""
        worker.runaway = (verdict.silence is Silence.RUNAWAY
                          and worker.state is WorkerState.RUNNING)
        share = None if verdict.cpu_share is None else round(verdict.cpu_share, 2)
        self.log("worker_stuck", level="warning", pid=worker.pid, run=worker.run,
                 state=worker.state.value, silence=verdict.silence.value, cpu_share=share,
                 runaway=worker.runaway)
        self._kill(worker)

    def _kill(self, worker: Worker) -> None:
        worker.killed = True
        try:
            os.killpg(worker.pid, signal.SIGKILL)
        except ProcessLookupError:
            self._gone(worker, "vanished without a report")
        except PermissionError:
            pass
