"""The pool's decisions in time, on a clock the test moves (issue 25 item 6):
when a zygote that does not answer is killed, when the next fork is asked
while workers keep dying unused, when a silent worker is killed, and when a
heartbeat that overtook its fork's report is forgotten. The pool is never
started: its zygote is a stand-in that records what it is asked, its
reports are lines the test hands to the pool's keeper of it
(`ZygoteKeeper.report`), and the watch looks when the test says (`Pool.look`)."""

from __future__ import annotations

import asyncio
import functools
from dataclasses import dataclass

import pytest

from staal.runtime.clock import FakeMonotonic
from staal.supervisor.workers.pool import Pool
from staal.supervisor.workers.pool_states import WorkerState
from staal.supervisor.workers.pool_timing import ZYGOTE_BOOT_S, ZYGOTE_SILENT_S
from staal.supervisor.workers.silence import SILENT_S, SilenceWatch
from tests.helpers.stand_ins import KILLED, NO_SUCH_PID, StandInZygote


@dataclass
class Scene:
    pool: Pool
    clock: FakeMonotonic
    zygote: StandInZygote
    logged: list[tuple[str, dict[str, object]]]

    def events(self, name: str) -> list[dict[str, object]]:
        return [fields for event, fields in self.logged if event == name]


@pytest.fixture
def scene(tmp_path):
    clock = FakeMonotonic()
    logged: list[tuple[str, dict[str, object]]] = []
    pool = Pool(tmp_path / "staal.toml", tmp_path, {}, ahead=1,
                log=lambda event, **fields: logged.append((event, fields)), clock=clock)
    zygote = StandInZygote()
    pool.zygote.process = zygote  # type: ignore[assignment]
    pool.zygote.due.started()  # as a zygote's start does
    yield Scene(pool, clock, zygote, logged)
    pool.chores.cancel()
    pool.router.close()


def in_loop(test):
    """Run the test's body in an event loop: the pool's timers need one."""
    async def body(scene):
        test(scene)

    @functools.wraps(test)
    def run(scene):
        asyncio.run(body(scene))

    return run


@in_loop
def test_a_zygote_that_never_says_ready_is_killed_only_once_its_boot_time_is_over(scene):
    scene.clock.advance(ZYGOTE_BOOT_S)
    scene.pool.look()
    assert not scene.zygote.killed
    scene.clock.advance(0.5)
    scene.pool.look()
    assert scene.zygote.killed
    assert scene.events("zygote_silent")[0]["why"] == f"it did not start within {ZYGOTE_BOOT_S:g} s"


@in_loop
def test_an_up_zygote_that_owes_forks_is_killed_once_it_has_been_silent_too_long(scene):
    scene.pool.zygote.report("ready")
    scene.pool._replenish()
    assert scene.zygote.stdin.lines == ["fork 1"]
    scene.clock.advance(ZYGOTE_SILENT_S - 0.5)
    scene.pool.look()
    assert not scene.zygote.killed  # not silent long enough yet
    scene.clock.advance(1.0)
    scene.pool.look()
    assert scene.zygote.killed
    assert scene.events("zygote_silent")[0]["why"] == (
        f"it answered no fork request for {ZYGOTE_SILENT_S:g} s")


@in_loop
def test_a_zygote_that_reported_its_fork_owes_nothing_and_is_never_killed(scene):
    scene.pool.zygote.report("ready")
    scene.pool._replenish()
    scene.clock.advance(ZYGOTE_SILENT_S - 0.5)
    scene.pool.zygote.report(f"forked {NO_SUCH_PID}")
    scene.clock.advance(10 * ZYGOTE_SILENT_S)
    scene.pool.look()
    assert not scene.zygote.killed


@in_loop
def test_while_workers_keep_dying_unused_the_next_fork_waits_for_the_backoff(scene):
    pool = scene.pool
    pool.zygote.report("ready")
    pool._replenish()
    pool.zygote.report(f"forked {NO_SUCH_PID}")
    pool.zygote.report(f"exit {NO_SUCH_PID} {KILLED}")  # the first death: forked again at once
    assert scene.zygote.stdin.lines == ["fork 1", "fork 1"]
    pool.zygote.report(f"forked {NO_SUCH_PID + 1}")
    pool.zygote.report(f"exit {NO_SUCH_PID + 1} {KILLED}")  # the second: after the backoff
    assert scene.zygote.stdin.lines == ["fork 1", "fork 1"]
    delay = scene.events("worker_died_unused")[-1]["retry_in_s"]
    assert isinstance(delay, float) and delay > 0
    assert pool.fork_timer is not None
    scene.clock.advance(delay)
    pool._fork_due()  # the timer's callback, at the time it was set for
    assert scene.zygote.stdin.lines == ["fork 1", "fork 1", "fork 1"]
    assert pool.deaths == {"run": 0, "idle": 2}


@in_loop
def test_a_fork_asked_early_waits_until_the_backoff_is_over(scene):
    pool = scene.pool
    pool.zygote.report("ready")
    for pid in (NO_SUCH_PID, NO_SUCH_PID + 1):
        pool._replenish()
        pool.zygote.report(f"forked {pid}")
        pool.zygote.report(f"exit {pid} {KILLED}")
    asked = list(scene.zygote.stdin.lines)
    pool.fork_timer = None  # as if its timer fired too soon
    pool._replenish()
    assert scene.zygote.stdin.lines == asked  # nothing asked before the backoff ends
    assert pool.fork_timer is not None  # a new timer waits for the rest


@in_loop
def test_a_worker_silent_too_long_is_killed_and_one_heard_meanwhile_is_not(scene):
    pool = scene.pool
    pool.silence = SilenceWatch(scene.clock.monotonic, read=lambda pid: None)
    pool.zygote.report("ready")
    pool.zygote.report(f"forked {NO_SUCH_PID}")
    pool.zygote.report(f"forked {NO_SUCH_PID + 1}")
    silent, heard = (pool.workers[f"w{pid}".encode()] for pid in (NO_SUCH_PID, NO_SUCH_PID + 1))
    for _ in range(int(SILENT_S) + 2):
        scene.clock.advance(1.0)
        heard.last_seen = scene.clock.monotonic()  # its heartbeats keep coming
        pool.look()
    assert silent.state is WorkerState.GONE and silent.killed
    assert heard.state is WorkerState.STARTING and not heard.killed
    (stuck,) = scene.events("worker_stuck")
    assert stuck["pid"] == NO_SUCH_PID and stuck["silence"] == "idle"


@in_loop
def test_a_heartbeat_that_overtook_its_fork_report_is_forgotten_after_the_silence_bound(scene):
    pool = scene.pool
    pool.heard_early[b"w7"] = scene.clock.monotonic()
    scene.clock.advance(SILENT_S)
    pool.look()
    assert b"w7" in pool.heard_early
    scene.clock.advance(0.5)
    pool.look()
    assert b"w7" not in pool.heard_early
