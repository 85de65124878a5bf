"""Warm workers between runs (DESIGN.md section 6, issue 26): which rest in
the line for another run of their grant set, and which are told to exit.

A worker serves at most `reuse(key)` runs of the grant set its first run
bound it to: the pool marks the run that reaches that number its last
(`Run.last`), and the worker exits after it. A worker whose run ended and
that says it stays (`Ended.stays`: worker/processes/binding.py decides)
rests in the line, unless the pool is closing. At most `max_idle` bound
workers rest: past that the one at rest longest retires; so does any at
rest for WORKER_IDLE_S. A retired worker holds nothing at stake (no run),
so it is told to exit (`Retire`) and its exit is no fork that did no good.
"""

from __future__ import annotations

from collections.abc import Callable

from staal.records.messages import Ended, StoppedMsg
from staal.runtime.clock import Monotonic
from staal.supervisor.telemetry.log import Log
from staal.supervisor.workers.line import WorkerLine
from staal.supervisor.workers.pool_states import Worker, WorkerState

# A bound worker at rest this long is retired: its memory goes back, and the
# next call of its grant set takes a fresh worker (a fork: about a millisecond).
WORKER_IDLE_S = 60.0


def one_run(key: str) -> int:
    """A fresh worker per run (the pool's default without a manifest)."""
    return 1


class Resting:
    def __init__(self, line: WorkerLine, clock: Monotonic, log: Log,
                 tell_retire: Callable[[Worker], None],
                 reuse: Callable[[str], int] = one_run, max_idle: int = 16) -> None:
        self.line = line
        self.clock = clock
        self.log = log
        self.tell_retire = tell_retire  # sends the worker `Retire`
        self.reuse = reuse
        self.max_idle = max_idle

    def last(self, worker: Worker) -> bool:
        """Whether the run about to be sent is the worker's last."""
        return worker.runs >= self.reuse(worker.key or "")

    def after_run(self, worker: Worker, reply: Ended | StoppedMsg, closing: bool) -> bool:
        """A run ended: whether the worker rests (or retires) instead of
        exiting of itself."""
        if not (isinstance(reply, Ended) and reply.stays and worker.state is WorkerState.RUNNING
                and not worker.killed):  # killed by the watch: its exit is on its way
            if isinstance(reply, Ended) and reply.retires:
                self.log("worker_retired", pid=worker.pid, key=worker.key, runs=worker.runs,
                         why=reply.retires)
            return False
        if closing or worker.cancelled:  # a cancel may come after its run's end
            self.retire(worker, "pool closing" if closing else "cancelled")
            return True
        worker.move("rest")
        worker.idle_since = self.clock.monotonic()
        self.line.offer(worker)
        resting = self.line.bound_idle()
        for old in resting[:max(0, len(resting) - self.max_idle)]:
            self.retire(old, "idle cap")
        return True

    def look(self) -> None:
        """Retire every bound worker at rest WORKER_IDLE_S or longer."""
        now = self.clock.monotonic()
        for worker in self.line.bound_idle():
            if now - worker.idle_since >= WORKER_IDLE_S:
                self.retire(worker, "idle")

    def retire(self, worker: Worker, why: str) -> None:
        self.line.withdraw(worker)
        if worker.state not in (WorkerState.IDLE, WorkerState.RUNNING):
            return  # it died, or was lent, meanwhile: nothing to retire
        worker.move("retire")
        self.log("worker_retired", pid=worker.pid, key=worker.key, runs=worker.runs, why=why)
        self.tell_retire(worker)
