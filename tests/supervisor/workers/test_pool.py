"""The worker pool heals itself (issue 11, item 2). After any burst of worker
deaths it comes back by itself: every fork is accounted for, a worker that
dies before its first heartbeat included, and replacements are forked with a
bounded backoff. A zygote that stops answering is killed and replaced. A
call that cannot get a worker waits a bounded time and is told the truth:
busy, with nothing reserved, before its reservation; after it, an internal
failure naming the run, its reservation released, since the run never
started. Each refusal is shown to have done nothing: the service saw no
request and the ledger holds nothing, or a release."""

from __future__ import annotations

import itertools
import os
import signal
import time
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from staal.runtime.transitions import IllegalTransition, advance
from staal.supervisor.calls.in_flight import TRANSITIONS as RUN_HOLDERS
from staal.supervisor.calls.in_flight import Holder
from staal.supervisor.workers.pool_states import (
    POOL_TRANSITIONS,
    WORKER_TRANSITIONS,
    Backoff,
    PoolState,
    WorkerState,
)
from tests.helpers.killer import Killer, zygote
from tests.helpers.servers import RawServer, Site

NOOP = "def main(n: int) -> int:\n    return n\n"
RECORD = """
from staal.caps import HttpPost

def main(url: str, n: int, post: HttpPost) -> dict:
    return {"status": post.post(url, json={"n": n}).status_code}
"""
# A program a zygote cannot load: written over the tool's program once the
# server runs, so every zygote started after that dies on import.
DIES_ON_IMPORT = "import os\nos._exit(3)\n"


@contextmanager
def serving_noop(tmp_path, runs_per_worker: int = 100) -> Iterator[tuple[Site, RawServer]]:
    """A server of one tool that returns its input, shown serving."""
    site = Site(tmp_path)
    site.program("noop.py", NOOP)
    site.write([{"name": "noop", "program": "noop.py", "runs_per_worker": runs_per_worker}])
    with RawServer(site) as server:
        server.initialize()
        assert server.call_tool("noop", {"n": 0})["structuredContent"] == {"result": 0}
        yield site, server


def record_site(tmp_path, base: str) -> Site:
    site = Site(tmp_path)
    site.program("record.py", RECORD)
    site.write([{"name": "record", "program": "record.py",
                 "grants": {"post": {"cap": "net.http.post", "only": [base + "/*"]}}}])
    return site


def test_after_every_worker_is_killed_as_it_appears_for_two_seconds_twenty_calls_are_done(tmp_path):
    with serving_noop(tmp_path) as (site, server):
        killer = Killer(site.manifest)
        killed = killer.burst(2.0)
        # More died than the pool keeps ahead (3): its replacements too,
        # most before their first heartbeat.
        assert len(killed) > 3
        answers = []
        for n in range(1, 21):
            answers.append(server.call_tool("noop", {"n": n}))
            if n == 1:
                first = time.monotonic() - killer.ended_at
        every = time.monotonic() - killer.ended_at
        print(f"\n{len(killed)} workers killed in 2 s; after the burst the first call was done in "
              f"{first:.2f} s, all 20 in {every:.2f} s")
        assert [a.get("structuredContent") for a in answers] == [{"result": n} for n in range(1, 21)]
        assert all(a["isError"] is False for a in answers)
        server.close_stdin()
        assert server.wait_exit() == 0
    deaths = server.stderr.events("worker_died_unused")
    assert len(deaths) >= 3
    # Forks that kept dying were asked for again only after a growing wait.
    waits = [d["retry_in_s"] for d in deaths]
    assert waits[0] == 0 and max(waits) > 0 and max(waits) <= 1.0
    assert server.stderr.events("workers_ready_again")
    assert server.stderr.events("worker_lost") == []  # no run was in flight


def test_a_zygote_that_stops_answering_is_killed_and_replaced_and_calls_go_on(tmp_path):
    # A worker per run: every call needs a fork of the zygote (a warm
    # worker would serve them all and the stopped zygote never be asked).
    with serving_noop(tmp_path, runs_per_worker=1) as (site, server):
        stuck = zygote(site.manifest)
        os.kill(stuck.pid, signal.SIGSTOP)  # alive, but it answers no fork request
        try:
            # More calls than the workers forked ahead: the later ones need
            # workers the stopped zygote will never fork.
            answers = [server.call_tool("noop", {"n": n}) for n in range(1, 7)]
        finally:
            if stuck.is_running():
                os.kill(stuck.pid, signal.SIGCONT)
        assert [a.get("structuredContent") for a in answers] == [{"result": n} for n in range(1, 7)]
        silent = server.stderr.wait_event("zygote_silent")
        assert silent["pid"] == stuck.pid and "answered no fork request" in silent["why"]
        assert not stuck.is_running()
        assert zygote(site.manifest).pid != stuck.pid
        server.close_stdin()
        assert server.wait_exit() == 0
    assert server.stderr.events("zygote_started")


def test_a_call_that_gets_no_worker_before_its_reservation_is_busy_and_nothing_is_reserved_or_sent(
        tmp_path, service):
    service.route("POST", "/record", 200, {"recorded": True})
    site = record_site(tmp_path, service.base)
    with RawServer(site) as server:
        server.initialize()
        site.program("record.py", DIES_ON_IMPORT)
        os.kill(zygote(site.manifest).pid, signal.SIGKILL)  # its workers die with it
        server.stderr.wait_event("zygote_exited")
        result = server.call_tool("record", {"url": service.base + "/record", "n": 1})
        text = result["content"][0]["text"]
        assert result["isError"] is True
        assert "busy" in text and "no worker was ready within" in text and "try again later" in text
        assert site.ledger_events() == []  # nothing was reserved
        server.close_stdin()
        assert server.wait_exit() == 0
    assert service.seen() == [] and site.journal_files() == []
    # The pool kept starting zygotes, each after a longer wait than the last.
    waits = [e["retry_in_s"] for e in server.stderr.events("zygote_replacing")]
    assert len(waits) >= 2 and waits == sorted(waits) and waits[-1] > waits[0]


def test_a_call_whose_worker_is_lost_before_its_run_began_and_gets_no_other_is_released_as_internal(
        tmp_path, service):
    service.route("POST", "/record", 200, {"recorded": True})
    site = record_site(tmp_path, service.base)
    with RawServer(site) as server:
        server.initialize()  # answered after a start-up check in a worker, now idle again
        site.program("record.py", DIES_ON_IMPORT)
        stuck = zygote(site.manifest)
        workers = stuck.children()
        # Stopped, the zygote can neither fork nor report its workers'
        # deaths: the call takes a worker that is already dead.
        os.kill(stuck.pid, signal.SIGSTOP)
        for worker in workers:
            os.kill(worker.pid, signal.SIGKILL)
        result = server.call_tool("record", {"url": service.base + "/record", "n": 1})
        server.close_stdin()
        assert server.wait_exit() == 0
    events = site.ledger_events()
    assert [e["event"] for e in events] == ["reserve", "release"]
    run = events[0]["run"]
    assert events[1]["run"] == run
    assert result["isError"] is True
    assert result["content"][0]["text"] == (f"An internal error happened in run {run}. The details "
                                            "are in the server's log, for the operator.")
    assert "busy" not in result["content"][0]["text"]
    assert server.stderr.events("zygote_silent")
    (lost,) = server.stderr.events("worker_lost", run=run)
    assert "died with the zygote" in lost["how"]
    (none,) = server.stderr.events("no_worker", run=run)
    assert "no worker was ready within" in none["message"]
    # The run never started: nothing reached the service, no journal, no arguments kept.
    assert service.seen() == [] and site.journal_files() == []
    assert [p for p in site.files_under_journals() if p.name.endswith(".inputs.json")] == []


# -- the tables and the backoff ---------------------------------------------------------


@pytest.mark.parametrize("table, states", [(POOL_TRANSITIONS, PoolState),
                                           (WORKER_TRANSITIONS, WorkerState),
                                           (RUN_HOLDERS, Holder)])
def test_every_move_a_lifecycle_table_holds_is_allowed_and_every_other_raises(table, states):
    events = sorted({event for _, event in table})
    for state, event in itertools.product(states, events):
        if (state, event) in table:
            assert advance(table, state, event) is table[(state, event)]
        else:
            with pytest.raises(IllegalTransition):
                advance(table, state, event)


def test_a_worker_is_never_run_twice_nor_lent_once_gone():
    for state, event in [(WorkerState.RUNNING, "run"), (WorkerState.GONE, "lend"),
                         (WorkerState.GONE, "exit"), (WorkerState.STARTING, "run")]:
        with pytest.raises(IllegalTransition):
            advance(WORKER_TRANSITIONS, state, event)
    # Only a zygote that came up once is replaced; the first one dying is final.
    assert POOL_TRANSITIONS[(PoolState.NEW, "died")] is PoolState.FAILED
    assert POOL_TRANSITIONS[(PoolState.UP, "died")] is PoolState.REPLACING


def test_a_backoff_waits_nothing_first_then_doubles_to_its_cap_and_starts_over_after_a_quiet_spell():
    backoff = Backoff(first=0.05, cap=1.0, quiet=5.0)
    assert [backoff.strike(t / 100) for t in range(8)] == [0.0, 0.05, 0.1, 0.2, 0.4, 0.8, 1.0, 1.0]
    assert backoff.strike(6.0) == 0.0  # more than 5 s after the last failure
