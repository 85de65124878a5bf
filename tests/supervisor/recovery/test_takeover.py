"""Takeover and settling in place (supervisor/recovery/takeover.py), with
stand-ins for the store: the runs of an expired instance are claimed,
recovered and let go; a run a call of this process holds is never
recovered; settling in place skips waiting runs and the runs it left alone,
and a store that fails leaves everything for the next renewal. The
multi-process behaviour is tests/supervisor/recovery/test_settle_in_place.py's."""

from __future__ import annotations

import asyncio
from collections.abc import Collection
from dataclasses import dataclass, field
from types import SimpleNamespace

from staal.errors import StaalError
from staal.protocol.mcp.results import Done
from staal.supervisor.calls.in_flight import Holder, RunsInFlight
from staal.supervisor.calls.run_logs import RunLogs
from staal.supervisor.recovery.at_start import RecoveryPlan
from staal.supervisor.recovery.lease import Lease
from staal.supervisor.recovery.runner import Recovery
from staal.supervisor.recovery.takeover import Takeover
from staal.supervisor.store.files import RunFiles


class StoreDown(StaalError):
    kind = "store"


@dataclass
class Store:
    """The ledger, journal rows and notes as takeover reads them."""

    taken: list[tuple[str, str]] = field(default_factory=list)  # (run, dead instance)
    unsettled: list[str] = field(default_factory=list)
    waiting: set[str] = field(default_factory=set)
    down: bool = False
    restored: list[list[str]] = field(default_factory=list)
    left_out: list[set[str]] = field(default_factory=list)  # what each takeover was told

    def now_ms(self) -> int:
        return 1_000

    def take_over(self, now_ms: int, held: Collection[str] = ()) -> list[tuple[RunFiles, str]]:
        if self.down:
            raise StoreDown("the database is out of reach")
        self.left_out.append(set(held))
        return [(RunFiles(self.journals, "tool", run), dead) for run, dead in self.taken
                if run not in held]

    def mine_unsettled(self) -> tuple[SimpleNamespace, ...]:
        if self.down:
            raise StoreDown("the database is out of reach")
        return tuple(SimpleNamespace(run=run, tool="tool") for run in self.unsettled)

    def all_waiting(self) -> dict[str, dict[str, object]]:
        return {run: {} for run in self.waiting}

    def restore(self, runs: list[RunFiles]) -> None:
        self.restored.append([files.run for files in runs])


class Scene:
    def __init__(self, tmp_path, store: Store, problems: frozenset[str] = frozenset(),
                 shared: bool = True) -> None:
        store.journals = tmp_path  # type: ignore[attr-defined]
        self.store = store
        self.problems = problems
        self.in_flight = RunsInFlight()
        self.logged: list[tuple[str, dict[str, object]]] = []
        self.planned: list[list[str]] = []
        self.resumed: list[tuple[str, Holder]] = []
        recovery = Recovery(store, store, RunLogs(), self.resume, self.in_flight,  # type: ignore[arg-type]
                            self.log)
        self.takeover = Takeover(tmp_path, store, store, store, self.in_flight,  # type: ignore[arg-type]
                                 self.plan, recovery, self.log, shared=shared, claim_wait_s=0.05)
        self.lease = Lease(lambda lease_ms: True)
        self.lease.started()  # a serving instance's: it takes over as it renews

    def log(self, event: str, **fields: object) -> None:
        self.logged.append((event, fields))

    def events(self, name: str) -> list[dict[str, object]]:
        return [fields for event, fields in self.logged if event == name]

    def plan(self, files: list[RunFiles]) -> RecoveryPlan:
        """Each run resumed, but those with a problem (its program changed)."""
        self.planned.append([f.run for f in files])
        return RecoveryPlan(resume=[f for f in files if f.run not in self.problems],
                            problems=[f"run {f.run}: changed" for f in files
                                      if f.run in self.problems])

    async def resume(self, files: RunFiles) -> Done:
        self.resumed.append((files.run, self.in_flight.holder(files.run)))
        return Done(files.run, None)

    async def take_over(self) -> None:
        await self.takeover.take_over(self.lease)
        await asyncio.gather(*list(self.takeover.resuming))

    def held_by_a_call(self, run: str) -> None:
        with self.in_flight.reserving() as hold:
            hold(run)


def test_the_runs_of_an_expired_instance_are_claimed_resumed_and_let_go(tmp_path):
    scene = Scene(tmp_path, Store(taken=[("r1", "dead-1"), ("r2", "dead-1")]))
    asyncio.run(scene.take_over())
    assert scene.resumed == [("r1", Holder.RECOVERY), ("r2", Holder.RECOVERY)]
    assert [e["run"] for e in scene.events("taken_over")] == ["r1", "r2"]
    assert scene.events("taken_over")[0]["instance"] == "dead-1"
    assert scene.in_flight.holder("r1") is Holder.FREE  # let go once recovered


def test_a_run_a_call_of_this_process_holds_is_left_out_of_the_takeover_and_not_recovered(
        tmp_path):
    store = Store(taken=[("r1", "dead-1"), ("r2", "dead-1")])
    scene = Scene(tmp_path, store)
    scene.held_by_a_call("r2")
    asyncio.run(scene.take_over())
    assert store.left_out == [{"r2"}]
    assert scene.planned == [["r1"]]
    assert [e["run"] for e in scene.events("taken_over")] == ["r1"]
    assert scene.in_flight.holder("r2") is Holder.CALL


def test_a_takeover_the_store_fails_is_logged_and_claims_nothing(tmp_path):
    scene = Scene(tmp_path, Store(taken=[("r1", "dead-1")], down=True))
    asyncio.run(scene.take_over())
    assert scene.events("takeover_failed") == [
        {"level": "warning", "kind": "store", "message": "the database is out of reach"}]
    assert scene.resumed == [] and scene.in_flight.holder("r1") is Holder.FREE


def test_settling_in_place_skips_waiting_runs_and_runs_in_flight_and_leaves_a_problem_alone(tmp_path):
    store = Store(unsettled=["r1", "r2", "r3", "r4"], waiting={"r2"})
    scene = Scene(tmp_path, store, problems=frozenset({"r3"}))
    scene.held_by_a_call("r4")
    asyncio.run(scene.takeover.settle_in_place())
    assert store.restored == [["r1", "r3"]] and scene.planned == [["r1", "r3"]]
    assert scene.resumed == [("r1", Holder.RECOVERY)]
    assert scene.events("settle_in_place_problem") == [{"level": "error", "message": "run r3: changed"}]
    assert scene.in_flight.holder("r3") is Holder.FREE
    # At the next renewal the run left alone is not looked at again.
    asyncio.run(scene.takeover.settle_in_place())
    assert scene.planned[-1] == ["r1"]
    assert len(scene.events("settle_in_place_problem")) == 1


def test_settling_in_place_waits_no_longer_than_its_bound_for_a_reservation_under_way(tmp_path):
    scene = Scene(tmp_path, Store(unsettled=["r1"]))

    async def while_reserving() -> None:
        with scene.in_flight.reserving():
            await scene.takeover.settle_in_place()

    asyncio.run(while_reserving())
    assert scene.planned == [] and scene.resumed == []
    (deferred,) = scene.events("settle_in_place_deferred")
    assert deferred["runs"] == 1


def test_a_store_that_fails_while_settling_in_place_leaves_the_runs_for_the_next_renewal(tmp_path):
    store = Store(unsettled=["r1"], down=True)
    scene = Scene(tmp_path, store)
    asyncio.run(scene.takeover.settle_in_place())
    (failed,) = scene.events("settle_in_place_failed")
    assert failed["error"] == "StoreDown: the database is out of reach"
    store.down = False
    asyncio.run(scene.takeover.settle_in_place())
    assert scene.resumed == [("r1", Holder.RECOVERY)]


def test_after_a_renewal_only_a_shared_store_settles_in_place(tmp_path):
    async def renewed(scene: Scene) -> None:
        await scene.takeover.after_renewal(scene.lease)
        if scene.takeover.settling is not None:
            await scene.takeover.settling

    shared = Scene(tmp_path, Store(unsettled=["r1"]))
    asyncio.run(renewed(shared))
    assert shared.resumed == [("r1", Holder.RECOVERY)]
    alone = Scene(tmp_path, Store(unsettled=["r1"]), shared=False)
    asyncio.run(renewed(alone))
    assert alone.takeover.settling is None and alone.resumed == []
