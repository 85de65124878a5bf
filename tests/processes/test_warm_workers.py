"""Warm workers end to end (issue 26 item 1): a worker serves many runs of
one tool and grant set, each run with a fresh program module, and is
replaced after a run that did not end done or failed by its program, after
`runs_per_worker` runs, or when the run left the process changed. The pid
each run ran in is the supervisor's `run_started` log line's."""

from __future__ import annotations

from typing import Any

import pytest

from tests.helpers.servers import RawServer, Site

COUNTER = """
count = 0

def main() -> int:
    global count
    count += 1
    return count
"""

# One program for the retire rules: `how` picks what the run does.
BEHAVES = """
import threading
from staal import fail

def main(how: str) -> str:
    if how == "fails":
        fail("validation", "refused by the program")
    if how == "raises":
        raise ValueError("a bug of the program's")
    if how == "memory":
        hog = bytearray(512 * 1024 * 1024)
        return str(len(hog))
    if how == "tripwire":
        try:
            open("written", "w")
        except Exception:
            pass
        return "caught"
    if how == "thread":
        stop = threading.Event()
        threading.Thread(target=stop.wait, daemon=True).start()
        return "left a thread"
    if how == "cwd":
        import os
        os.chdir("/")
        return "moved"
    return "ok"
"""


def pids(server: RawServer) -> list[int]:
    return [int(e["pid"]) for e in server.stderr.events("run_started")]


def calls(site: Site, tool: str, arguments: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], list[int]]:
    with RawServer(site) as server:
        server.initialize()
        results = [server.call_tool(tool, a) for a in arguments]
        server.close_stdin()
        assert server.wait_exit() == 0
        return results, pids(server)


WHY = {"memory": "budget", "tripwire": "tripwire", "thread": "changed threads",
       "cwd": "changed cwd"}


def calls_retiring(site: Site, tool: str, arguments: list[dict[str, Any]]
                   ) -> tuple[list[dict[str, Any]], list[int], list[dict[str, Any]]]:
    """As `calls`, and the workers the log says retired themselves, and why."""
    with RawServer(site) as server:
        server.initialize()
        results = [server.call_tool(tool, a) for a in arguments]
        server.close_stdin()
        assert server.wait_exit() == 0
        retired = [{"pid": int(e["pid"]), "why": e["why"]}
                   for e in server.stderr.events("worker_retired")]
        return results, pids(server), retired


def test_a_program_that_counts_in_its_module_returns_one_on_every_run_of_one_worker(tmp_path):
    site = Site(tmp_path)
    site.program("counter.py", COUNTER)
    site.write([{"name": "counter", "program": "counter.py"}], runs_per_worker=100)
    results, ran_in = calls(site, "counter", [{}] * 5)
    assert [r["structuredContent"]["result"] for r in results] == [1] * 5
    assert len(set(ran_in)) == 1  # all five in one worker


def test_runs_per_worker_one_gives_every_run_a_process_of_its_own(tmp_path):
    site = Site(tmp_path)
    site.program("counter.py", COUNTER)
    site.write([{"name": "counter", "program": "counter.py", "runs_per_worker": 1}],
               runs_per_worker=100)
    results, ran_in = calls(site, "counter", [{}] * 3)
    assert [r["structuredContent"]["result"] for r in results] == [1] * 3
    assert len(set(ran_in)) == 3


def test_a_worker_serves_runs_per_worker_runs_then_the_next_run_has_a_new_one(tmp_path):
    site = Site(tmp_path)
    site.program("counter.py", COUNTER)
    site.write([{"name": "counter", "program": "counter.py", "runs_per_worker": 2}])
    _, ran_in = calls(site, "counter", [{}] * 4)
    assert ran_in[0] == ran_in[1] != ran_in[2] == ran_in[3]


@pytest.mark.parametrize("how, kind", [("fails", "validation"), ("raises", "value")])
def test_a_run_failed_by_its_program_leaves_its_worker_serving(tmp_path, how, kind):
    site = Site(tmp_path)
    site.program("behaves.py", BEHAVES)
    site.write([{"name": "behaves", "program": "behaves.py"}], runs_per_worker=100)
    results, ran_in = calls(site, "behaves", [{"how": how}, {"how": "ok"}])
    assert results[0]["isError"] is True and kind in results[0]["content"][0]["text"]
    assert results[1]["structuredContent"]["result"] == "ok"
    assert ran_in[0] == ran_in[1]


@pytest.mark.parametrize("how, first", [("memory", "budget"), ("tripwire", "may not write to files"),
                                        ("thread", "left a thread"), ("cwd", "moved")])
def test_a_run_that_may_have_left_its_worker_unsound_is_followed_by_a_fresh_worker(tmp_path, how,
                                                                                    first):
    site = Site(tmp_path)
    site.program("behaves.py", BEHAVES)
    site.write([{"name": "behaves", "program": "behaves.py", "max_memory": "256MiB"}],
               runs_per_worker=100)
    results, ran_in, retired = calls_retiring(site, "behaves",
                                              [{"how": how}, {"how": "ok"}, {"how": "ok"}])
    answered = (results[0]["content"][0]["text"] if results[0]["isError"]
                else results[0]["structuredContent"]["result"])
    assert first in answered
    assert results[1]["structuredContent"]["result"] == "ok"
    assert retired == [{"pid": ran_in[0], "why": WHY[how]}]
    assert ran_in[0] != ran_in[1] == ran_in[2]
    assert not (tmp_path / "written").exists()


GETS = """
from staal.caps import HttpGet

def main(url: str, get: HttpGet) -> int:
    return get.get(url).status_code
"""


@pytest.mark.parametrize("runs_per_worker", [100, 1])
def test_fifty_calls_reach_a_service_over_one_connection_per_worker(tmp_path, service,
                                                                     runs_per_worker):
    service.route("GET", "/v1/ping", body={"ok": True})
    site = Site(tmp_path)
    site.program("gets.py", GETS)
    site.write([{"name": "gets", "program": "gets.py",
                 "grants": {"get": {"cap": "net.http.get", "only": [service.base + "/**"]}}}],
               runs_per_worker=runs_per_worker)
    results, ran_in = calls(site, "gets", [{"url": service.base + "/v1/ping"}] * 50)
    assert [r["structuredContent"]["result"] for r in results] == [200] * 50
    assert len(service.seen("GET")) == 50
    # Kept alive across a worker's runs: one connection per worker that ran.
    assert service.connections == len(set(ran_in))
    assert len(set(ran_in)) == (1 if runs_per_worker == 100 else 50)


BACKEND = """
from staal.caps import PostgresWrite

def main(path: str, db: PostgresWrite) -> dict:
    seen = db.query("SELECT pg_backend_pid() AS pid, current_setting('search_path') AS path")[0]
    if path:
        db.execute(f"SET search_path TO {path}")
    return seen
"""


def test_a_warm_worker_keeps_its_postgres_connection_and_no_run_sees_what_another_set(
        tmp_path, postgres_dsn):
    site = Site(tmp_path)
    site.program("backend.py", BACKEND)
    site.write([{"name": "backend", "program": "backend.py",
                 "grants": {"db": {"cap": "db.postgres.write", "dsn": {"env": "SHOP_DSN"}}}}],
               runs_per_worker=100)
    with RawServer(site, env={"SHOP_DSN": postgres_dsn}) as server:
        server.initialize()
        seen = [server.call_tool("backend", {"path": "elsewhere, public" if n % 2 else ""})
                for n in range(10)]
        server.close_stdin()
        assert server.wait_exit() == 0
        ran_in = pids(server)
    rows = [s["structuredContent"]["result"] for s in seen]
    assert len(set(ran_in)) == 1
    assert len({row["pid"] for row in rows}) == 1  # one connection for the ten runs
    # Every other run set its search_path; the next run never sees it.
    assert {row["path"] for row in rows} == {'"$user", public'}


SPINS = """
import hashlib
import signal

def main(spin: bool) -> str:
    if not spin:
        return "ok"
    # Sets the run's budget aside (its timer, the kernel's signal) and
    # computes in C with the interpreter let go (its heartbeats go on, and
    # few lines are counted).
    signal.signal(signal.SIGXCPU, signal.SIG_IGN)
    signal.signal(signal.SIGPROF, signal.SIG_IGN)
    signal.setitimer(signal.ITIMER_PROF, 0)
    data = b"x" * (64 << 20)
    while True:
        hashlib.sha256(data).digest()
"""


def test_a_warm_run_that_sets_its_cpu_budget_aside_is_ended_as_budget_by_the_pool(tmp_path):
    site = Site(tmp_path)
    site.program("spins.py", SPINS)
    site.write([{"name": "spins", "program": "spins.py", "max_cpu": "1s"}], runs_per_worker=100)
    with RawServer(site) as server:
        server.initialize()
        spun = server.call_tool("spins", {"spin": True})
        after = server.call_tool("spins", {"spin": False})
        over = server.stderr.events("worker_over_cpu")
        server.close_stdin()
        assert server.wait_exit() == 0
    assert spun["isError"] is True and "budget" in spun["content"][0]["text"], spun
    assert after["structuredContent"]["result"] == "ok"
    assert len(over) == 1 and over[0]["cpu_s"] > 1 + 2 + 1  # max_cpu, the grace and a second
