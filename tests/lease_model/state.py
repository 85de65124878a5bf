"""The model's state: what the database has committed, what each process
holds in memory, and the budgets of the faults still to come.

Every value is immutable and hashable, so a state is its own canonical
form: two interleavings that reach the same rows and the same processes meet
in the visited set. Time is kept relative to the real time now (the model
never stores an absolute time): a tick subtracts one from every stored time,
so the state space is finite without a bound on the number of ticks. Times
further back than `Config.floor` are clamped to it (docs/lease-model.md says
what that approximates).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import NamedTuple

# A run's journal, as the letters of its rows in order (supervisor/store/
# postgres/journal_rows.py: one row per record): H the header, I an op's
# intent, O its outcome (the worker's), A an operator's answer for the op in
# doubt (supervisor/store/postgres/resolve_rows.py), E the journal's end.
HEADER, INTENT, OUTCOME, ANSWER, END = "H", "I", "O", "A", "E"

# What a process holding a run does next (the call's steps, or recovery's
# plan: supervisor/recovery/at_start.py): append a record, perform the op's
# action (no row: the outside world), settle, release, or write the waiting
# record and stop.
NEXT_HEADER, NEXT_INTENT, NEXT_ACTION, NEXT_OUTCOME, NEXT_END = "h", "i", "x", "o", "e"
NEXT_SETTLE, NEXT_RELEASE, NEXT_WAIT = "settle", "release", "wait"

UP, PAUSED = "up", "paused"
HELD, LOST = "held", "lost"  # supervisor/recovery/lease.py's LeaseState
# Takeover.after_renewal: a takeover, then settling in place.
AFTER_NOTHING, AFTER_TAKE, AFTER_SETTLE = "", "take", "settle"


class Proc(NamedTuple):
    """One supervisor process of an instance, in memory."""

    status: str  # UP or PAUSED (a killed process is gone: None)
    token_current: bool  # its fencing token is its instance's row's (ledger.fence)
    lease: str  # HELD or LOST (Lease.state)
    renewed: bool  # it tried a renewal since the last tick (LeaseKeeper.keep)
    renew_ok: bool  # its last renewal held (a ghost for live_keeps_runs)
    after: str  # what its last renewal that held leads to next: AFTER_*
    # (run, what it does next, how many rows its copy of the journal has),
    # by run: RunsInFlight
    held: tuple[tuple[int, str, int], ...]
    # Start-up still runs (Startup.run): recovery at start resumes its runs,
    # no call is taken, and the lease is starting (renewed, takes over
    # nothing) until `started` (LeaseKeeper.serving).
    starting: bool = False


class Run(NamedTuple):
    """A run's committed rows, and ghosts the invariants read (never the code)."""

    owner: int  # staal_runs.owner (an instance's index)
    journal: str  # staal_journal, in line order
    end: str  # staal_ends.kind: "", "settle" or "release"
    waiting: bool  # a staal_waiting row
    # ghosts
    actions: int  # times the op's action happened in the outside world
    ends: int  # settles and releases committed
    fenced_writes: int  # rows accepted from a process that was fenced
    stolen: int  # takeovers of it from an instance alive and renewing on time


class Budget(NamedTuple):
    runs: int
    kills: int
    pauses: int
    db_restarts: int
    duplicates: int  # a second process registering an instance whose process is paused


class State(NamedTuple):
    # -- committed rows (they survive a database restart) --
    leases: tuple[int | None, ...]  # staal_instances.lease_until_ms - now; None: released
    head: int  # staal_head.last_ms - now
    runs: tuple[Run, ...]
    # -- the database and the processes --
    db_up: bool
    procs: tuple[Proc | None, ...]  # each instance's current process
    stale: tuple[Proc | None, ...]  # a process left over, its token replaced
    budget: Budget


@dataclass(frozen=True)
class Variant:
    """A deliberately broken model: each flag removes one rule of the code."""

    name: str = "faithful"
    skip_append_fence: bool = False  # journal appends without check_owned
    skip_end_fence: bool = False  # settle/release without the owner and token join
    register_keeps_token: bool = False  # register_instance without nextval
    redo_in_doubt: bool = False  # recovery re-performs an op in doubt
    takeover_released_only: bool = False  # dead means lease_until IS NULL
    # Takeover.take_over taking back a run a call of its own still holds
    # (the code before the model found it: the op ran twice).
    takeover_takes_held: bool = False
    # A second defence the code does not have: an append is accepted only
    # at the line the writer's copy of the journal expects.
    append_checks_line: bool = False
    # The code before issue 27 item 6: the lease is renewed only once
    # start-up is over, so a start-up longer than the lease lets it run out.
    no_renew_while_starting: bool = False


FAITHFUL = Variant()
DEFAULT_BUDGET = Budget(runs=1, kills=1, pauses=1, db_restarts=0, duplicates=0)


@dataclass(frozen=True)
class Config:
    """The bound: 3 instances (their clocks' skews against real time, in
    ticks), a lease of `lease` ticks, and how many calls and faults."""

    skews: tuple[int, ...] = (0, 0, 1)
    lease: int = 2
    budget: Budget = DEFAULT_BUDGET
    variant: Variant = field(default=FAITHFUL)

    @property
    def instances(self) -> int:
        return len(self.skews)

    @property
    def floor(self) -> int:
        """Leases that ran out this far back are all alike: before any `now`
        a process stamps (the later of its clock and the ledger's time)."""
        return min(self.skews) - 1

    def with_variant(self, variant: Variant) -> Config:
        return replace(self, variant=variant)


def initial(config: Config) -> State:
    """Every instance started and registered (register_instance: a lease of
    `lease` from its own clock), no run yet."""
    n = config.instances
    fresh = Proc(UP, True, HELD, False, True, AFTER_NOTHING, ())
    return State(leases=tuple(s + config.lease for s in config.skews), head=min(config.skews),
                 runs=(), db_up=True, procs=(fresh,) * n, stale=(None,) * n,
                 budget=config.budget)
