"""The worker pool's lifecycles as data (supervisor/workers/pool.py runs them): the
pool's, which is its zygote's (a long-lived child's: restarting.py), and each
worker's, from the zygote's report that it was forked to its exit. A move a
table does not hold raises `IllegalTransition`; the pool never guesses where
a worker stands.

And the pool's errors; `Backoff` (shared/runtime/backoff.py) paces forks whose
workers die unused.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, field
from enum import Enum

from staal.records.messages import CANCEL_SIGNAL, JournalAck, JournalAppend
from staal.records.record import Record
from staal.runtime.backoff import Backoff as Backoff  # the pool's delays; pool.py imports it here
from staal.runtime.transitions import advance
from staal.supervisor.errors import SupervisorError
from staal.supervisor.workers.restarting import CHILD_TRANSITIONS, ChildState


class PoolError(SupervisorError):
    """Every error of the worker pool."""

    kind = "pool"


class NoWorker(PoolError):
    """No worker was ready within the wait."""

    kind = "no_worker"


class ZygoteGone(NoWorker):
    """No worker will come: the first zygote died before it was up, or the
    pool is closed."""

    kind = "zygote_gone"


class WorkerLost(PoolError):
    """A worker ended before its run did."""

    kind = "worker_lost"

    def __init__(self, pid: int, how: str, status: int | None = None,
                 runaway: bool = False) -> None:
        super().__init__(f"worker {pid} {how}")
        self.pid = pid
        self.how = how
        # The wait status the zygote reported, when it died (None: it went
        # silent, or died with the zygote); staal.runtime.budgets.own_limit reads it.
        self.status = status
        # The pool killed it for computing while silent (supervisor/workers/silence.py).
        self.runaway = runaway


# The pool's life is its zygote's (restarting.py), under the pool's names.
PoolState = ChildState
POOL_TRANSITIONS = CHILD_TRANSITIONS

# The pool states in which a zygote is there to ask for forks.
HAS_ZYGOTE = frozenset({PoolState.NEW, PoolState.BOOTING, PoolState.UP})


class WorkerState(Enum):
    STARTING = "starting"    # forked; no heartbeat yet
    IDLE = "idle"            # said it is ready; waits for a check or a run
    CHECKING = "checking"    # answering a start-up check
    LENT = "lent"            # taken by a call that has not sent its run yet
    RUNNING = "running"
    DRAINING = "draining"    # exited cleanly; its run's end is still on its way
    ENDED = "ended"          # its run's end arrived; it exits next
    RETIRING = "retiring"    # told to exit between runs (idle too long, or one too many)
    GONE = "gone"


# Workers on their way to serve a call: what keeps the pool `ahead` (those
# not yet bound to a grant set: Worker.fresh).
SUPPLY = frozenset({WorkerState.STARTING, WorkerState.IDLE, WorkerState.CHECKING})
# A worker that dies in one of these before any run served none: a fork
# that did no good.
UNUSED = frozenset({*SUPPLY, WorkerState.LENT})
# Someone waits on the worker's inbox and must learn that it died.
WATCHED = frozenset({WorkerState.CHECKING, WorkerState.RUNNING})

WORKER_TRANSITIONS: Mapping[tuple[WorkerState, str], WorkerState] = {
    (WorkerState.STARTING, "heard"): WorkerState.IDLE,
    (WorkerState.IDLE, "check"): WorkerState.CHECKING,
    (WorkerState.CHECKING, "checked"): WorkerState.IDLE,
    (WorkerState.IDLE, "lend"): WorkerState.LENT,
    (WorkerState.LENT, "give_back"): WorkerState.IDLE,
    (WorkerState.LENT, "run"): WorkerState.RUNNING,
    (WorkerState.RUNNING, "end"): WorkerState.ENDED,
    # A warm worker's run ended and it waits for the next of its grant set;
    # or the pool has no place for it and tells it to exit.
    (WorkerState.RUNNING, "rest"): WorkerState.IDLE,
    (WorkerState.RUNNING, "retire"): WorkerState.RETIRING,
    (WorkerState.IDLE, "retire"): WorkerState.RETIRING,
    # A worker exits cleanly just after sending its run's end, and the
    # zygote's report of the exit can overtake that message.
    (WorkerState.RUNNING, "exit_clean"): WorkerState.DRAINING,
    (WorkerState.DRAINING, "end"): WorkerState.GONE,
    (WorkerState.DRAINING, "overdue"): WorkerState.GONE,
    **{(state, "exit"): WorkerState.GONE
       for state in WorkerState if state not in (WorkerState.DRAINING, WorkerState.GONE)},
    **{(state, "exit_clean"): WorkerState.GONE
       for state in WorkerState if state not in (WorkerState.RUNNING, WorkerState.DRAINING,
                                                 WorkerState.GONE)},
}


@dataclass(eq=False)
class Worker:
    pid: int
    identity: bytes
    state: WorkerState = WorkerState.STARTING
    inbox: asyncio.Queue[Record | WorkerLost] = field(default_factory=asyncio.Queue)
    run: str | None = None
    last_seen: float = field(default_factory=time.monotonic)
    how: str = ""            # how it ended, once it did
    killed: bool = False     # the pool killed it for its silence
    runaway: bool = False    # ... while it burned CPU in its run: its run ends as budget
    key: str | None = None   # the grant set (config_key) it is bound to by its first run
    runs: int = 0            # runs sent to it
    lease: int = 0           # the number of the latest lending (Lease.n)
    idle_since: float = 0.0  # when it last came to rest between runs
    cancelled: bool = False  # its run was cancelled: it serves no other (resting.py)

    @property
    def fresh(self) -> bool:
        """Bound to no grant set yet: it may serve any."""
        return self.key is None

    def move(self, event: str) -> WorkerState:
        self.state = advance(WORKER_TRANSITIONS, self.state, event)
        return self.state


@dataclass(frozen=True, slots=True)
class Lease:
    """One lending of a worker to one call: `n` tells this lending from a
    later one of the same worker (a warm worker is lent again once it rests),
    so a call that gives back what it no longer holds gives back nothing."""

    worker: Worker
    n: int

    @property
    def current(self) -> bool:
        return self.worker.lease == self.n


@dataclass(frozen=True, slots=True)
class RecordRefused:
    """Why a worker's journal record was not committed, as the worker is
    told it: the refusal's kind and its message."""

    kind: str
    message: str


# A journal record's commit: None when durable, else its refusal (kind and
# message), which the worker is told as data.
OnJournal = Callable[[JournalAppend], Awaitable[RecordRefused | None]]


async def acknowledge(append: JournalAppend, on_journal: OnJournal | None) -> JournalAck:
    """The worker's answer to its journal record: committed, or why not."""
    refused = (RecordRefused("no_journal_store", "no journal store")
               if on_journal is None else await on_journal(append))
    if refused is None:
        return JournalAck(run=append.run)
    return JournalAck(run=append.run, refused=refused.message, kind=refused.kind)


class Cancels:
    """The pool's cancels of runs (DESIGN.md section 8, "Tasks"): a run a
    worker runs is told to stop before its next action (CANCEL_SIGNAL,
    worker/processes/cancel.py); one not sent yet is sent cancelled, and so
    is one sent again after its worker died. A run is asked once; it is
    forgotten when its call (or its recovery) ends (`done`)."""

    def __init__(self) -> None:
        self.asked: set[str] = set()

    def ask(self, workers: Iterable[Worker], run: str) -> bool:
        """Whether this is the first time `run` is asked."""
        if run in self.asked:
            return False
        self.asked.add(run)
        for worker in workers:
            if worker.run == run and worker.state is WorkerState.RUNNING:
                worker.cancelled = True  # it serves no other run (resting.py)
                try:
                    os.kill(worker.pid, CANCEL_SIGNAL)
                except ProcessLookupError:
                    pass  # it died: its run's end comes as its loss
                break
        return True

    def take(self, run: str) -> bool:
        """Whether `run`, about to be sent, was cancelled."""
        return run in self.asked

    def done(self, run: str) -> None:
        """The call (or the recovery) that held `run` let it go."""
        self.asked.discard(run)
