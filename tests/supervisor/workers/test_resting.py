"""Warm workers in the pool (supervisor/workers/resting.py, line.py, the
pool's lease), on a clock the test moves: a worker whose run ended and that
stays rests for the next run of its grant set; a call of another set takes
a fresh worker; the run that reaches `runs_per_worker` is sent as the last;
a worker at rest too long, or one too many, is told to retire; a call that
gives back a lending that is over gives back nothing; and a bound worker
that dies between runs is no fork that did no good, but is logged. The pool is never
started: its zygote and its router are stand-ins, and a worker's messages
are put in its inbox by the test."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

import pytest

from staal.records.messages import Ended, Retire, Run, StoppedMsg, unpack
from staal.records.record import Record
from staal.runtime.clock import FakeMonotonic
from staal.supervisor.workers.pool import Pool
from staal.supervisor.workers.pool_states import Lease, NoWorker, Worker, WorkerLost, WorkerState
from staal.supervisor.workers.resting import WORKER_IDLE_S
from staal.supervisor.workers.silence import CpuCeiling, Usage
from tests.helpers.stand_ins import KILLED, NO_SUCH_PID, StandInZygote


class StandInRouter:
    """What the pool sends its workers, by worker identity."""

    def __init__(self) -> None:
        self.sent: list[tuple[bytes, Record]] = []

    def send(self, identity: bytes, frame: bytes) -> None:
        self.sent.append((identity, unpack(frame)))

    def close(self) -> None:
        pass

    def to(self, worker: Worker) -> list[Record]:
        return [message for identity, message in self.sent if identity == worker.identity]


@dataclass
class Scene:
    pool: Pool
    clock: FakeMonotonic
    router: StandInRouter
    logged: list[tuple[str, dict[str, object]]]
    next_pid: int = NO_SUCH_PID

    def events(self, name: str) -> list[dict[str, object]]:
        return [fields for event, fields in self.logged if event == name]

    def ready_worker(self) -> Worker:
        """A fresh worker forked and heard: idle in the line."""
        pid, self.next_pid = self.next_pid, self.next_pid + 1
        self.pool.zygote.report(f"forked {pid}")
        worker = self.pool.workers[f"w{pid}".encode()]
        self.pool._heard(worker)
        return worker

    async def serve(self, lease: Lease, tool: str, reply: Ended | StoppedMsg) -> Run:
        """Send a run of `tool` on `lease`, the worker answering `reply`;
        the run message the worker was sent."""
        lease.worker.inbox.put_nowait(reply)
        message = Run(run="a" * 32, tool=tool, journal="j", inputs="i")
        await self.pool.run(lease, message, lambda _: None)
        runs = [m for m in self.router.to(lease.worker) if isinstance(m, Run)]
        return runs[-1]


REUSE = {"pay": 3, "look": 3}


@pytest.fixture
def scene(tmp_path):
    clock = FakeMonotonic()
    logged: list[tuple[str, dict[str, object]]] = []
    pool = Pool(tmp_path / "m.json", tmp_path, {}, ahead=1, clock=clock,
                log=lambda event, **fields: logged.append((event, fields)),
                reuse=lambda key: REUSE.get(key, 1), max_idle=2)
    real_router, router = pool.router, StandInRouter()
    pool.router = router  # type: ignore[assignment]
    pool.zygote.process = StandInZygote()  # type: ignore[assignment]
    pool.zygote.due.started()
    pool.zygote.report("ready")
    yield Scene(pool, clock, router, logged)
    pool.chores.cancel()
    real_router.close()


def stays(run: str = "a" * 32) -> Ended:
    return Ended(run=run, outcome="done", result=1, stays=True)


def run_in_loop(body):
    def test(scene):
        asyncio.run(body(scene))
    test.__name__ = body.__name__
    return test


@run_in_loop
async def test_a_worker_whose_run_ended_and_that_stays_rests_and_serves_the_next_call_of_its_grant_set(scene):
    worker = scene.ready_worker()
    lease = await scene.pool.checkout("pay", wait_s=0)
    await scene.serve(lease, "pay", stays())
    assert worker.state is WorkerState.IDLE and worker.key == "pay" and worker.runs == 1
    again = await scene.pool.checkout("pay", wait_s=0)
    assert again.worker is worker and again.n == lease.n + 1


@run_in_loop
async def test_a_call_of_another_grant_set_never_gets_a_bound_worker(scene):
    worker = scene.ready_worker()
    await scene.serve(await scene.pool.checkout("pay", wait_s=0), "pay", stays())
    fresh = scene.ready_worker()
    other = await scene.pool.checkout("look", wait_s=0)
    assert other.worker is fresh and other.worker is not worker
    with pytest.raises(NoWorker):  # the bound one is no use to a third set, nor to a check
        await scene.pool.checkout("look:profile", wait_s=0)
    assert worker.state is WorkerState.IDLE


@run_in_loop
async def test_the_run_that_reaches_runs_per_worker_is_sent_as_the_last_and_its_worker_ends(scene):
    worker = scene.ready_worker()
    sent = [await scene.serve(await scene.pool.checkout("pay", wait_s=0), "pay",
                              stays() if n < 3 else Ended(run="a" * 32, outcome="done"))
            for n in (1, 2, 3)]
    assert [m.last for m in sent] == [False, False, True]
    assert worker.state is WorkerState.ENDED and worker.runs == 3


@run_in_loop
async def test_a_tool_with_one_run_per_worker_sends_every_run_as_the_last(scene):
    scene.ready_worker()
    sent = await scene.serve(await scene.pool.checkout("once", wait_s=0), "once",
                             Ended(run="a" * 32, outcome="done"))
    assert sent.last is True


@run_in_loop
async def test_a_worker_at_rest_for_the_idle_time_is_told_to_retire_and_its_exit_is_no_strike(scene):
    worker = scene.ready_worker()
    await scene.serve(await scene.pool.checkout("pay", wait_s=0), "pay", stays())
    scene.clock.advance(WORKER_IDLE_S - 1)
    scene.pool.look()
    assert worker.state is WorkerState.IDLE
    scene.clock.advance(1)
    scene.pool.look()
    await asyncio.sleep(0)  # the Retire is sent by a task of the pool's
    assert worker.state is WorkerState.RETIRING
    assert scene.router.to(worker)[-1] == Retire()
    assert scene.events("worker_retired") == [{"pid": worker.pid, "key": "pay", "runs": 1,
                                               "why": "idle"}]
    scene.pool.zygote.report(f"exit {worker.pid} 0")
    assert worker.state is WorkerState.GONE and scene.events("worker_died_unused") == []
    with pytest.raises(NoWorker):
        await scene.pool.checkout("pay", wait_s=0)


@run_in_loop
async def test_more_bound_workers_at_rest_than_the_cap_retire_the_one_at_rest_longest(scene):
    workers = [scene.ready_worker() for _ in range(3)]
    leases = [await scene.pool.checkout("pay", wait_s=0) for _ in workers]
    for lease in leases:
        scene.clock.advance(1)
        await scene.serve(lease, "pay", stays())
    await asyncio.sleep(0)
    assert [w.state for w in workers] == [WorkerState.RETIRING, WorkerState.IDLE, WorkerState.IDLE]
    assert [e["why"] for e in scene.events("worker_retired")] == ["idle cap"]


@run_in_loop
async def test_giving_back_a_lending_that_is_over_leaves_the_worker_with_the_call_that_holds_it(scene):
    worker = scene.ready_worker()
    first = await scene.pool.checkout("pay", wait_s=0)
    await scene.serve(first, "pay", stays())
    second = await scene.pool.checkout("pay", wait_s=0)
    scene.pool.give_back(first)  # the first call's `finally`, after its run ended
    assert worker.state is WorkerState.LENT
    with pytest.raises(NoWorker):  # not handed to anyone else
        await scene.pool.checkout("pay", wait_s=0)
    scene.pool.give_back(second)
    assert worker.state is WorkerState.IDLE


@run_in_loop
async def test_a_bound_worker_killed_between_runs_is_replaced_without_a_backoff(scene):
    worker = scene.ready_worker()
    await scene.serve(await scene.pool.checkout("pay", wait_s=0), "pay", stays())
    scene.pool.zygote.report(f"exit {worker.pid} {KILLED}")
    assert worker.state is WorkerState.GONE
    assert scene.events("worker_died_unused") == [] and scene.pool.fork_timer is None
    assert scene.pool.deaths == {"run": 0, "idle": 1}


@run_in_loop
async def test_a_bound_worker_that_dies_between_runs_is_logged_with_its_grant_set_and_runs(scene):
    worker = scene.ready_worker()
    await scene.serve(await scene.pool.checkout("pay", wait_s=0), "pay", stays())
    lent = scene.ready_worker()
    lease = await scene.pool.checkout("look", wait_s=0)
    await scene.serve(lease, "look", stays())
    await scene.pool.checkout("look", wait_s=0)  # lent for its next run, not sent yet
    scene.pool.zygote.report(f"exit {worker.pid} {KILLED}")
    scene.pool.zygote.report(f"exit {lent.pid} 256")
    assert scene.events("worker_died_between_runs") == [
        {"level": "warning", "pid": worker.pid, "key": "pay", "runs": 1,
         "how": "was killed by SIGKILL"},
        {"level": "warning", "pid": lent.pid, "key": "look", "runs": 1,
         "how": "exited with code 1"}]


@pytest.mark.parametrize("reply", [stays(), Ended(run="a" * 32, outcome="done")],
                         ids=["stays", "ends"])
def test_a_run_whose_end_arrived_before_its_workers_death_was_reported_ends_as_its_end_says(
        scene, reply):
    async def body() -> None:
        worker = scene.ready_worker()
        lease = await scene.pool.checkout("pay", wait_s=0)
        message = Run(run="a" * 32, tool="pay", journal="j", inputs="i")
        running = asyncio.ensure_future(scene.pool.run(lease, message, lambda _: None))
        await asyncio.sleep(0)  # the run is sent; the pool waits for its end
        worker.inbox.put_nowait(reply)  # the end arrives over ZeroMQ...
        scene.pool.zygote.report(f"exit {worker.pid} {KILLED}")  # ...the death over the pipe
        assert await asyncio.wait_for(running, 5) == reply
        assert worker.state is WorkerState.GONE and worker not in scene.pool.line.bound_idle()
        with pytest.raises(NoWorker):
            await scene.pool.checkout("pay", wait_s=0)

    asyncio.run(body())


@run_in_loop
async def test_a_fresh_worker_that_dies_is_no_death_between_runs(scene):
    worker = scene.ready_worker()
    scene.pool.zygote.report(f"exit {worker.pid} {KILLED}")
    assert scene.events("worker_died_between_runs") == []
    assert [e["pid"] for e in scene.events("worker_died_unused")] == [worker.pid]


@run_in_loop
async def test_a_stopped_run_never_leaves_its_worker_at_rest(scene):
    worker = scene.ready_worker()
    await scene.serve(await scene.pool.checkout("pay", wait_s=0), "pay",
                      StoppedMsg(run="a" * 32, op=1, message="in doubt"))
    assert worker.state is WorkerState.ENDED


@run_in_loop
async def test_a_resting_worker_goes_to_the_call_of_its_grant_set_already_waiting(scene):
    worker = scene.ready_worker()
    lease = await scene.pool.checkout("pay", wait_s=0)
    waiting = asyncio.ensure_future(scene.pool.checkout("pay", wait_s=30))
    await asyncio.sleep(0)
    await scene.serve(lease, "pay", stays())
    got = await asyncio.wait_for(waiting, 5)
    assert got.worker is worker and worker.state is WorkerState.LENT


@run_in_loop
async def test_a_worker_the_watch_killed_is_never_rested_though_its_end_says_it_stays(scene):
    worker = scene.ready_worker()
    lease = await scene.pool.checkout("pay", wait_s=0)
    worker.killed = True  # the silence watch killed it; its end was already on its way
    await scene.serve(lease, "pay", stays())
    assert worker.state is WorkerState.ENDED
    with pytest.raises(NoWorker):
        await scene.pool.checkout("pay", wait_s=0)


@run_in_loop
async def test_a_warm_run_past_its_cpu_ceiling_is_killed_as_a_runaway(scene):
    spent = {"cpu": 10.0}
    scene.pool.ceilings = CpuCeiling(lambda key: 3.0 if key == "pay" else None,
                                     read=lambda pid: Usage(spent["cpu"], stopped=False))
    worker = scene.ready_worker()
    lease = await scene.pool.checkout("pay", wait_s=0)
    running = asyncio.ensure_future(scene.pool.run(
        lease, Run(run="b" * 32, tool="pay", journal="j", inputs="i"), lambda _: None))
    await asyncio.sleep(0)
    for cpu in (10.0, 12.5, 13.0):  # the first look takes its start; 3 s is not past 3 s
        spent["cpu"] = cpu
        worker.last_seen = scene.clock.monotonic()  # heartbeats keep coming
        scene.pool.look()
    assert not worker.killed
    spent["cpu"] = 13.5
    scene.pool.look()
    assert worker.killed and worker.runaway
    assert scene.events("worker_over_cpu") == [{"level": "warning", "pid": worker.pid,
                                                "run": "b" * 32, "cpu_s": 3.5}]
    with pytest.raises(WorkerLost) as lost:  # the kill found no process: it is gone
        await asyncio.wait_for(running, 5)
    assert lost.value.runaway


@run_in_loop
async def test_a_worker_whose_run_ends_while_the_pool_closes_is_told_to_retire(scene):
    worker = scene.ready_worker()
    lease = await scene.pool.checkout("pay", wait_s=0)
    scene.pool.zygote.move("close")
    await scene.serve(lease, "pay", stays())
    await asyncio.sleep(0)  # the Retire is sent by a task of the pool's
    assert worker.state is WorkerState.RETIRING
    assert scene.router.to(worker)[-1] == Retire()
    assert [e["why"] for e in scene.events("worker_retired")] == ["pool closing"]
