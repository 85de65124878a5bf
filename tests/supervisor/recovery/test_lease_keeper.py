"""Keeping the lease (supervisor/recovery/lease_keeper.py), on a clock the
test moves: renewed every third of the lease; a renewal the store does not
answer leaves the instance not ready and is tried again; one that finds the
identity another process's stops serving for good; after each renewal that
holds, the takeover's turn. No database and no waiting: the store's renewal
is a stand-in."""

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

    def renew(self, lease_ms: int) -> bool:
        assert lease_ms == TIMING.lease_ms
        self.renewed_at.append(self.clock.monotonic())
        answer = self.answers.pop(0)
        if isinstance(answer, StoreError):
            raise answer
        return answer


class Keeping:
    def __init__(self, *answers: bool | StoreError) -> None:
        self.clock = FakeMonotonic(now=0.0)
        self.store = Store(self.clock, *answers)
        self.logged: list[tuple[str, dict[str, object]]] = []
        self.readiness = ReadyState(self.log)
        self.readiness.note("started")
        self.stopping = asyncio.Event()
        self.renewals_held: list[float] = []
        self.keeper = LeaseKeeper(Lease(self.store.renew, TIMING), self.readiness, self.stopping,
                                  self.after_renewal, self.log, self.clock)

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
