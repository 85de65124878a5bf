"""The deployment on the shared ledger (issue 15, item 5): three `serve
--http` instances behind HAProxy, each with its own journal directory, all
on one PostgreSQL store in the tests' private cluster (`tests/helpers/pg_cluster.py`,
which the tests may crash and restart; the machine's shared server is never
touched). A 1,000-call flood from 32 clients on a tool with a quota of 100
runs exactly 100 and refuses every other call over quota, none twice; a
PostgreSQL crash and restart mid-flood fails calls closed (nothing runs
unrecorded: the fake service is checked against the ledger) and the
instances serve again, and settle their runs the crash left unsettled,
without a restart of their own. Afterwards every run has one reserve and
one settle or release, read from the store."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest
from psycopg.conninfo import make_conninfo

from staal.records.canonical import canonical_json, once_key, sha256_hex
from tests.helpers.fleet import Fleet, ManifestWriter, first_record, fleet
from tests.helpers.flood import (
    Answer,
    Flood,
    by_instance,
    call_request,
    classify,
    ledger_holds,
    store_events,
    tally,
)
from tests.helpers.pg_cluster import PgCluster, private_cluster
from tests.helpers.recorder import Recorder, serving
from tests.helpers.servers import WAIT, Site

ENV = "STAAL_STORE_DSN"
STORE = {"postgres": {"dsn": {"env": ENV}}}
QUOTA = 100
COUNT = """
def main(n: int) -> dict:
    return {"n": n}
"""
FETCH = """
from staal.caps import HttpGet

def main(n: int, url: str, get: HttpGet) -> dict:
    return {"n": n, "status": get.get(url + "?n=" + str(n)).status_code}
"""
# A bound on the calls that may fail after the store is back: each
# instance's first call there may find its connection cut (one retry heals
# it), and at most the calls in flight across the restart end failed.
AFTER = 6


@pytest.fixture(scope="module")
def cluster() -> Iterator[PgCluster]:
    with private_cluster("issue_deploy") as own:
        yield own


@pytest.fixture
def dsn(cluster: PgCluster) -> Iterator[str]:
    """A database of the test's own in the private cluster."""
    name = f"issue_deploy_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(cluster.dsn, autocommit=True, connect_timeout=10) as conn:
        conn.execute(f"CREATE DATABASE {name}")
    yield make_conninfo(cluster.dsn, dbname=name)
    with psycopg.connect(cluster.dsn, autocommit=True, connect_timeout=10) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


def count_site(site: Site, server: dict[str, Any]) -> None:
    site.program("count.py", COUNT)
    site.write([{"name": "count", "program": "count.py",
                 "quota": {"window": "1h", "calls": QUOTA}}],
               max_concurrent_runs=32, store=STORE, **server)


def test_a_thousand_calls_from_32_clients_on_a_shared_quota_of_100_run_exactly_100_none_twice(
        tmp_path, dsn, authorization):
    with fleet(3, count_site, authorization, env={ENV: dsn}, root=tmp_path) as running:
        answers = Flood(running.url, "count", lambda i: {"n": i}, headers=running.headers).run()
        kinds = tally(answers)
        # Exactly the quota ran; every other call was refused over quota, none
        # answered busy (the ledger refuses it before it waits for a worker).
        assert kinds == {"done": QUOTA, "over_quota": 1000 - QUOTA}, [
            a.text for a in answers if a.kind not in ("done", "over_quota")][:5]
        served = running.lb.wait_served(1000)
        journals = {i.site.journals for i in running.instances}
    assert all(a.result == {"n": a.index} for a in answers if a.kind == "done")
    assert all("is over its quota: 100 of 100 calls" in a.text
               for a in answers if a.kind == "over_quota")
    # The one quota was shared: the instances together ran 100, each some.
    done = by_instance(answers, "done")
    assert set(done) == {"i1", "i2", "i3"} and sum(done.values()) == QUOTA
    assert set(served) == {"i1", "i2", "i3"} and max(served.values()) - min(served.values()) <= 1
    assert len(journals) == 3  # each instance its own journal directory
    runs = ledger_holds(store_events(dsn))
    assert len(runs) == QUOTA and all(seen == ["reserve", "settle"] for seen in runs.values())


def fetch_site(root: Path, service: Recorder) -> ManifestWriter:
    """Every instance names the same program file: a run whose instance's
    lease ran out while the store was down (PostgreSQL's restart after an
    immediate stop can outlast it on a loaded machine) is taken over and
    resumed by another, which needs the program it began with."""
    program = root / "fetch.py"
    program.write_text(FETCH)

    def write(site: Site, server: dict[str, Any]) -> None:
        site.write([{"name": "fetch", "program": str(program), "once": {"by": ["n"], "keep": "1h"},
                     "grants": {"get": {"cap": "net.http.get", "only": [service.base + "/*"]}}}],
                   max_concurrent_runs=32, store=STORE, **server)
    return write


def direct_call(url: str, n: int, service: Recorder, bearer: dict[str, str]) -> Answer:
    body, headers = call_request(n, "fetch", {"n": n, "url": service.base + "/item"}, "2025-11-25")
    with httpx.Client(timeout=4 * WAIT, trust_env=False) as http:
        answer = http.post(url, content=body, headers={**headers, **bearer})
    return classify(n, answer.status_code, answer.content)


def serves_again(running: Fleet, service: Recorder, first: int) -> dict[str, list[str]]:
    """Each instance, called directly, until it answers a call done; at
    most AFTER calls in all may fail first. The kinds each answered, in order."""
    seen: dict[str, list[str]] = {}
    n = first
    for instance in running.instances:
        kinds = seen.setdefault(instance.name, [])
        while "done" not in kinds and sum(k != "done" for ks in seen.values() for k in ks) <= AFTER:
            kinds.append(direct_call(instance.url, n, service, running.headers).kind)
            n += 1
    return seen


def acted(service: Recorder, count: int) -> bool:
    """Wait (bounded) until the service has seen `count` actions."""
    with service.lock:
        return service.arrived.wait_for(lambda: len(service.requests) >= count, 6 * WAIT)


def settled_in_place(running: Fleet, dsn: str) -> list[str]:
    """Wait (bounded, on the instances' logs) until every run the crash
    left unsettled is settled, released or resumed to its end, by its own
    instance or, if its lease ran out while the database was down, by the
    one that took it over; the runs resumed (their read in doubt is sent
    again, as at a start), by any instance."""
    def ended(run: str) -> Callable[[dict[str, Any]], bool]:
        return lambda r: (r.get("event") == "recovered" and r.get("run") == run and (
            r.get("rule") in ("settled from its end", "released: it never started")
            or (r.get("rule") == "resumed" and r.get("outcome") != "failed")))

    left = rows_of(dsn, "SELECT r.run FROM staal_runs r LEFT JOIN staal_ends e "
                   "USING (run) WHERE e.run IS NULL")
    for (run,) in left:
        first_record(running.instances, ended(run), 6 * WAIT, f"the end of run {run}")
    return [e["run"] for i in running.instances
            for e in i.server.stderr.events("recovered", rule="resumed")]


def rows_of(dsn: str, sql: str) -> list[tuple[Any, ...]]:
    with psycopg.connect(dsn, autocommit=True, connect_timeout=10) as conn:
        return conn.execute(sql).fetchall()


def test_postgresql_crashed_mid_flood_fails_calls_closed_and_the_instances_recover_once_back(
        tmp_path, cluster, dsn, authorization):
    calls, before = 300, 50
    with serving("GET", "/item", 200, {"ok": True}) as service, \
            fleet(3, fetch_site(tmp_path, service), authorization, env={ENV: dsn},
                  root=tmp_path / "fleet") as running:
        flood = Flood(running.url, "fetch", lambda i: {"n": i, "url": service.base + "/item"},
                      calls=calls, clients=16, headers=running.headers)
        answers: list[Answer] = []
        sender = threading.Thread(target=lambda: answers.extend(flood.run()))
        sender.start()
        hold = None
        try:
            # The flood runs on a live store, then the database crashes while
            # runs are in flight at the service (acted, not yet settled); the
            # rest of the flood is sent while it is down.
            assert acted(service, before)
            hold = service.hold("/item")
            assert hold.arrived.wait(WAIT)
            cluster.stop("immediate")
            hold.release.set()
            sender.join(8 * WAIT)
        finally:
            if hold is not None:
                hold.release.set()
            if not cluster.running():
                cluster.start()  # pg_ctl -w: back and accepting connections
        assert not sender.is_alive() and len(answers) == calls
        after = serves_again(running, service, calls)
        resumed = settled_in_place(running, dsn)
        events = store_events(dsn)
        requests = [r.path for r in service.seen("GET", "/item")]
    kinds = tally(answers)
    assert set(kinds) <= {"done", "failed"}, kinds
    # A client sends its next call only once answered: at least `before`
    # less one per client were answered, done, before the crash; the held
    # runs could not settle while the store was down, and failed.
    assert kinds["done"] >= before - 16 and kinds["failed"] >= 1, kinds
    assert all(a.result == {"n": a.index, "status": 200} for a in answers if a.kind == "done")
    # The instances serve again without a restart of their own.
    assert all("done" in seen for seen in after.values()), after
    # Fail closed: every action the service saw belongs to a run the
    # ledger reserved, none twice but the reads of the runs resumed in
    # place (a read in doubt is sent again, as at a start); every call
    # answered done was settled done.
    asked = [int(path.split("?n=", 1)[1]) for path in requests]
    reserves = {e["once"]["key"]: e["run"] for e in events if e["event"] == "reserve"}
    # With `auth`, a once key is the caller's own: one caller (the fleet's token) here.
    (caller,) = {e["caller"] for e in events if e["event"] == "reserve"}

    def key(n: int) -> str:
        return sha256_hex(canonical_json([caller, once_key("fetch", {"n": n}, ["n"])]))

    twice = {reserves[key(n)] for n in asked if asked.count(n) > 1}
    assert twice <= set(resumed), "an action ran twice"
    assert all(asked.count(n) <= 2 for n in asked)
    unrecorded = [n for n in asked if key(n) not in reserves]
    assert not unrecorded, f"actions with no reserve in the ledger: {unrecorded[:5]}"
    settled = {e["run"]: e["outcome"] for e in events if e["event"] == "settle"}
    for a in answers:
        if a.kind == "done":
            assert settled[reserves[key(a.index)]] == "done"
    runs = ledger_holds(events)
    assert len(runs) == len(reserves)
    # No run is left unsettled: the instances settled them in place.
    assert all(seen in (["reserve", "settle"], ["reserve", "release"]) for seen in runs.values())
