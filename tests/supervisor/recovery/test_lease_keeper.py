"""Keeping the lease (supervisor/recovery/lease_keeper.py), on a clock the
test moves: renewed every third of the lease, from its registration on,
while start-up still runs (renewing only: no takeover, not ready) and then
while serving; a renewal the store does not answer leaves the instance not
ready and is tried again; one that finds the identity another process's
stops serving for good; after each renewal that holds once serving, the
takeover's turn. No database and no waiting: the store's renewal is a
stand-in."""

from __future__ import annotations

import asyncio

from staal.errors import StaalError
from staal.runtime.clock import FakeMonotonic
from staal.supervisor.recovery.lease import Lease, LeaseState, LeaseTiming
from staal.supervisor.recovery.lease_keeper import LeaseKeeper
from staal.supervisor.transport.readiness import Readiness, ReadyState

TIMING = LeaseTiming(lease_ms=30_000)  # renewed every 10 s


class StoreError(StaalError):
    """What a store out of reach raises (the PostgreSQL store's kind)."""

    kind = "store"


class Store:
    """The store's renewal: answers in turn True (still ours), False (the
    identity is another process's) or an error (out of reach)."""

    def __init__(self, clock: FakeMonotonic, *answers: bool | StoreError) -> None:
        self.clock = clock
        self.answers = list(answers)
        self.renewed_at: list[float] = []
        # Set (on the loop that waits for it) once the store has answered
        # as many renewals as `waiting_for` says.
        self.waiting_for: tuple[int, asyncio.AbstractEventLoop, asyncio.Event] | None = None

    def renew(self, lease_ms: int) -> bool:
        assert lease_ms == TIMING.lease_ms
        self.renewed_at.append(self.clock.monotonic())
        answer = self.answers.pop(0)
        if self.waiting_for is not None and len(self.renewed_at) >= self.waiting_for[0]:
            _, loop, answered = self.waiting_for
            loop.call_soon_threadsafe(answered.set)
        if isinstance(answer, StoreError):
            raise answer
        return answer

    async def renewed(self, times: int) -> None:
        """Once the store has been asked `times` renewals (what a start-up
        that long stands for here)."""
        answered = asyncio.Event()
        self.waiting_for = (times, asyncio.get_running_loop(), answered)
        if len(self.renewed_at) >= times:
            answered.set()
        await answered.wait()


class Keeping:
    """A keeper of a lease just registered; `started` (default) as if
    start-up were over already."""

    def __init__(self, *answers: bool | StoreError, started: bool = True) -> None:
        self.clock = FakeMonotonic(now=0.0)
        self.store = Store(self.clock, *answers)
        self.logged: list[tuple[str, dict[str, object]]] = []
        self.readiness = ReadyState(self.log)
        self.stopping = asyncio.Event()
        self.renewals_held: list[float] = []
        self.keeper = LeaseKeeper(Lease(self.store.renew, TIMING), self.readiness, self.stopping,
                                  self.log, self.clock)
        if started:
            self.keeper.serving(self.after_renewal)

    def log(self, event: str, **fields: object) -> None:
        self.logged.append((event, fields))

    async def after_renewal(self, lease: Lease) -> None:
        assert lease.state is LeaseState.HELD
        self.renewals_held.append(self.clock.monotonic())

    def events(self) -> list[str]:
        return [event for event, _ in self.logged if event != "readiness"]


def test_the_lease_is_renewed_every_third_of_it_until_another_process_holds_the_identity():
    keeping = Keeping(True, True, False)
    asyncio.run(asyncio.wait_for(keeping.keeper.keep(), 5))
    assert keeping.store.renewed_at == [10.0, 20.0, 30.0]
    # Each renewal that held led to a takeover's turn; the lost one did not.
    assert keeping.renewals_held == [10.0, 20.0]
    assert keeping.stopping.is_set()
    assert keeping.readiness.state is Readiness.FENCED
    assert keeping.events() == ["lease_lost"]


def test_a_renewal_the_store_does_not_answer_makes_the_instance_not_ready_until_one_holds():
    keeping = Keeping(StoreError("the database is out of reach"), True, False)
    states = []

    async def after_renewal(lease: Lease) -> None:
        states.append(keeping.readiness.state)

    keeping.keeper.after_renewal = after_renewal
    asyncio.run(asyncio.wait_for(keeping.keeper.keep(), 5))
    assert keeping.store.renewed_at == [10.0, 20.0, 30.0]  # tried again at the next renewal
    assert states == [Readiness.SERVING]  # ready again once the renewal held
    failed = [fields for event, fields in keeping.logged if event == "lease_renewal_failed"]
    assert failed == [{"level": "warning", "kind": "store",
                       "message": "the database is out of reach"}]


def test_one_renewal_reports_the_lease_state_and_a_failed_one_leaves_it_held():
    keeping = Keeping(StoreError("out of reach"), True)

    async def twice() -> list[LeaseState]:
        return [await keeping.keeper.renew(), await keeping.keeper.renew()]

    assert asyncio.run(twice()) == [LeaseState.HELD, LeaseState.HELD]
    assert keeping.renewals_held == [0.0]  # only after the renewal that held
    assert not keeping.stopping.is_set()


def test_the_lease_is_renewed_while_start_up_runs_longer_than_it_and_takes_over_only_once_serving():
    keeping = Keeping(True, True, True, True, False, started=False)
    readiness_while_starting = []

    async def start_then_serve() -> None:
        keeping_task = asyncio.ensure_future(keeping.keeper.keep())
        # Start-up (recovery resuming runs one after another) outlasts the
        # lease: three renewals, a whole lease, and it still runs.
        await keeping.store.renewed(3)
        readiness_while_starting.append((keeping.readiness.state, keeping.keeper.lease.state))
        keeping.keeper.serving(keeping.after_renewal)
        await keeping_task

    asyncio.run(asyncio.wait_for(start_then_serve(), 5))
    assert keeping.store.renewed_at == [10.0, 20.0, 30.0, 40.0, 50.0]
    # Renewing only while starting: not ready, and no takeover's turn.
    assert readiness_while_starting == [(Readiness.STARTING, LeaseState.STARTING)]
    # Once serving, each renewal that held led to a takeover's turn (the
    # third, answered as start-up ended, may or may not have).
    assert keeping.renewals_held in ([30.0, 40.0], [40.0])
    assert keeping.readiness.state is Readiness.FENCED
    assert keeping.events() == ["lease_lost"]


def test_a_lease_lost_or_a_store_out_of_reach_while_starting_is_told_once_the_instance_started():
    lost = Keeping(False, started=False)
    asyncio.run(asyncio.wait_for(lost.keeper.keep(), 5))
    assert lost.stopping.is_set() and lost.readiness.state is Readiness.FENCED
    lost.keeper.serving(lost.after_renewal)  # start-up ends: fenced still, for good
    assert (lost.readiness.state, lost.keeper.lease.state) == (Readiness.FENCED, LeaseState.LOST)
    assert lost.renewals_held == []

    unreachable = Keeping(StoreError("the database is out of reach"), True, started=False)
    asyncio.run(unreachable.keeper.renew())
    assert unreachable.readiness.state is Readiness.STARTING  # not ready, starting
    unreachable.keeper.serving(unreachable.after_renewal)
    assert not unreachable.readiness.ready
    assert unreachable.readiness.state is Readiness.STORE_UNREACHABLE
    asyncio.run(unreachable.keeper.renew())
    assert unreachable.readiness.ready and unreachable.renewals_held == [0.0]


def test_a_failure_after_a_renewal_is_logged_and_the_renewals_go_on():
    keeping = Keeping(True, True, False)
    turns: list[float] = []

    async def after_renewal(lease: Lease) -> None:
        turns.append(keeping.clock.monotonic())
        raise RuntimeError("a bug in the takeover")

    keeping.keeper.after_renewal = after_renewal
    asyncio.run(asyncio.wait_for(keeping.keeper.keep(), 5))
    assert keeping.store.renewed_at == [10.0, 20.0, 30.0]  # the lease kept until it was lost
    assert turns == [10.0, 20.0]
    failed = [fields for event, fields in keeping.logged if event == "after_renewal_failed"]
    assert failed == [{"level": "error", "error": "RuntimeError: a bug in the takeover"}] * 2
