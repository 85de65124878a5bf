"""The over-quota answer before a worker (issue 15, item 5): a call the
ledger already refuses over quota is answered so before it takes a
concurrency slot or a worker, with nothing reserved and nothing run, and is
counted as a quota refusal; on both stores. The early read only refuses
what the ledger, as read, refuses: a view that misses reserves (another
instance's, not yet seen) can only let a call on to the real reserve, and
on PostgreSQL the read waits for no writer's lock."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from staal.manifest.durations import Duration
from staal.manifest.model import QuotaConfig
from staal.money import Money
from staal.records.ledger_records import Release, Reserve, Settle
from staal.runtime.clock import FixedClock
from staal.supervisor.store.ledger import Admission, OverQuota, Reserved, quota_refusal, read_ledger
from staal.supervisor.store.postgres.ledger import PostgresLedger
from staal.supervisor.store.postgres.schema import key_lock
from staal.supervisor.store.state import LedgerState
from tests.helpers.http_servers import HttpServer
from tests.helpers.pg_store import PgStore
from tests.helpers.recorder import Recorder, serving
from tests.helpers.servers import WAIT, Site
from tests.supervisor.store.test_contract import T0
from tests.supervisor.telemetry.test_metrics import parse, value

ENV = "STAAL_STORE_DSN"
HELD = """
from staal.caps import HttpGet

def main(url: str, get: HttpGet) -> dict:
    return {"status": get.get(url).status_code}
"""
CALLS = QuotaConfig(window=Duration.parse("1h"), calls=2)


@pytest.fixture
def service() -> Iterator[Recorder]:
    with serving("GET", "/held", 200, {"ok": True}) as recorder:
        yield recorder


def held_site(site: Site, service: Recorder, **server: Any) -> Site:
    """One tool, one run at a time, a quota of one call: while its one run
    is held at the service, the slot is taken and the quota is used."""
    site.program("held.py", HELD)
    site.write([{"name": "held", "program": "held.py", "max_concurrent_runs": 1,
                 "quota": {"window": "1h", "calls": 1},
                 "grants": {"get": {"cap": "net.http.get", "only": [service.base + "/*"]}}}],
               metrics={"listen": "127.0.0.1:0"}, **server)
    return site


def call(http: HttpServer, url: str) -> dict[str, Any]:
    answer = http.modern("tools/call", {"name": "held", "arguments": {"url": url}})
    assert answer.status_code == 200, answer.text
    return answer.json()["result"]


@pytest.mark.parametrize("store", ["file", "postgres"])
def test_a_call_over_quota_is_refused_so_while_the_slot_and_the_worker_are_taken_and_nothing_ran(
        tmp_path: Path, service: Recorder, request: pytest.FixtureRequest, store: str) -> None:
    env: dict[str, str] = {}
    server: dict[str, Any] = {}
    if store == "postgres":
        pg: PgStore = request.getfixturevalue("pg_store")
        env, server = {ENV: pg.dsn}, {"store": {"postgres": {"dsn": {"env": ENV}}}}
    site = held_site(Site(tmp_path), service, **server)
    hold = service.hold("/held")
    url = service.base + "/held"
    with HttpServer(site, env=env) as http:
        metrics = http.stderr.wait_event("serving_metrics")["url"]
        first: list[dict[str, Any]] = []
        sender = threading.Thread(target=lambda: first.append(call(http, url)))
        sender.start()
        try:
            assert hold.arrived.wait(WAIT)
            # The tool's one slot is held by the first run: a call that went
            # on to the slot would be answered busy; the ledger refuses it first.
            second = call(http, url)
        finally:
            hold.release.set()
            sender.join(WAIT)
        samples = parse(httpx.get(metrics, timeout=WAIT).text)
    assert second["isError"] is True
    text = second["content"][0]["text"]
    assert text.startswith("tool 'held' is over its quota: 1 of 1 calls per 1h are used"), text
    assert first and first[0]["structuredContent"] == {"result": {"status": 200}}
    # Nothing ran for the refused call and nothing was reserved: one GET,
    # one run in the ledger.
    assert len(service.seen("GET", "/held")) == 1
    if store == "postgres":
        assert pg.rows("SELECT count(*) FROM staal_runs") == [(1,)]
    else:
        assert len(read_ledger(site.ledger_path).runs()) == 1
    assert value(samples, "staal_refusals_total", tool="held", reason="quota") == 1
    assert value(samples, "staal_refusals_total", tool="held", reason="busy") == 0
    assert value(samples, "staal_calls_total", tool="held", outcome="done") == 1


def test_the_early_read_on_postgresql_sees_other_instances_commits_and_waits_for_no_writer(
        pg_store: PgStore) -> None:
    clock = FixedClock(T0)
    with PostgresLedger.open(pg_store.dsn, "a", clock) as a, \
            PostgresLedger.open(pg_store.dsn, "b", clock) as b:
        assert a.over_quota("t", CALLS, 1, ()) is None
        runs = [b.reserve_call("t", CALLS, 1, (), None) for _ in range(2)]
        assert all(isinstance(r, Reserved) for r in runs)
        over = a.over_quota("t", CALLS, 1, ())
        assert isinstance(over, OverQuota) and (over.in_use, over.limit) == (2, 2)
        b.release(runs[0].run)
        assert a.over_quota("t", CALLS, 1, ()) is None  # the release was read too
        assert len(a.runs()) == 2  # and nothing was reserved by reading
        # A writer holds the tool's quota key (as a reserve does while it
        # decides, and any other reserve of the tool would wait for it): the
        # read takes no lock, so it still answers.
        with psycopg.connect(pg_store.dsn, autocommit=True) as writer, writer.transaction():
            writer.execute(f"SELECT {key_lock('key')}", {"key": "quota:t"})
            answered = threading.Event()

            def read() -> None:
                if a.over_quota("t", CALLS, 1, ()) is None:
                    answered.set()

            reading = threading.Thread(target=read)
            reading.start()
            assert answered.wait(WAIT)
            reading.join(WAIT)


def test_on_postgresql_a_reserve_committed_after_the_read_is_refused_by_the_reserve_itself(
        pg_store: PgStore) -> None:
    clock = FixedClock(T0)
    with PostgresLedger.open(pg_store.dsn, "a", clock) as a, \
            PostgresLedger.open(pg_store.dsn, "b", clock) as b:
        assert isinstance(b.reserve_call("t", CALLS, 1, (), None), Reserved)
        assert a.over_quota("t", CALLS, 1, ()) is None  # room for one, as read
        assert isinstance(b.reserve_call("t", CALLS, 1, (), None), Reserved)  # b takes it
        # The read let a's call on; the reserve, deciding holding the
        # tool's quota key, sees b's second run and refuses: the quota holds.
        refused = a.reserve_call("t", CALLS, 1, (), None)
        assert isinstance(refused, OverQuota) and (refused.in_use, refused.limit) == (2, 2)
    assert pg_store.rows("SELECT count(*) FROM staal_runs") == [(2,)]


# -- a view that misses reserves never refuses what the ledger admits --------

TOOL = "t"
CALLER = "c" * 64
MONEY = QuotaConfig(window=Duration.parse("1h"), calls=3, money=Money("10", "USD"))
ADMISSION = Admission(caller=CALLER, quota=QuotaConfig(window=Duration.parse("1h"), calls=2),
                      rate=QuotaConfig(window=Duration.parse("1h"), calls=4))

# One step: a reserve (minutes after T0, USD held, whether the caller made
# it), or the end of an earlier reserve (which one, settled or released, the
# share of its hold it charged).
steps = st.lists(st.one_of(
    st.tuples(st.just("reserve"), st.integers(0, 120), st.integers(0, 6), st.booleans()),
    st.tuples(st.just("end"), st.integers(0, 50), st.booleans(), st.integers(0, 100))),
    max_size=30)


def ledger_of(plan: list[tuple[Any, ...]]) -> tuple[list[Any], dict[str, int]]:
    """The events the plan makes, in time order, and each run's event index."""
    events: list[Any] = []
    reserves: list[Reserve] = []
    ended: set[str] = set()
    time = T0
    for step in plan:
        if step[0] == "reserve":
            _, minutes, dollars, by_caller = step
            time = max(time, T0 + minutes * 60_000)
            event = Reserve(run=f"r{len(reserves):04d}" + "0" * 20, tool=TOOL, time=time, calls=1,
                            money=(Money(str(dollars), "USD"),),
                            caller=CALLER if by_caller else None)
            reserves.append(event)
            events.append(event)
        elif reserves:
            _, which, settled, share = step
            reserve = reserves[which % len(reserves)]
            if reserve.run in ended:
                continue
            ended.add(reserve.run)
            charged = Money.from_minor(reserve.money[0].minor * share // 100, "USD")
            events.append(Settle(run=reserve.run, time=time, outcome="done", charged=(charged,))
                          if settled else Release(run=reserve.run, time=time))
    return events, {e.run: i for i, e in enumerate(events) if isinstance(e, Reserve)}


def state_of(events: list[Any]) -> LedgerState:
    state = LedgerState()
    for event in events:
        state.apply(event)
    return state


@settings(max_examples=300, deadline=None)
@given(plan=steps, unseen=st.sets(st.integers(0, 40)), need=st.integers(0, 12),
       at=st.integers(0, 180))
def test_a_view_missing_any_reserves_refuses_only_what_the_whole_ledger_refuses(
        plan: list[tuple[Any, ...]], unseen: set[int], need: int, at: int) -> None:
    events, index = ledger_of(plan)
    missed = {run for i, run in enumerate(index) if i in unseen}
    whole = state_of(events)
    view = state_of([e for e in events if e.run not in missed])
    now = max(whole.last_ms, T0 + at * 60_000)
    money = (Money(str(need), "USD"),)
    for admission in (None, ADMISSION):
        seen = quota_refusal(view, TOOL, MONEY, 1, money, admission, now)
        truth = quota_refusal(whole, TOOL, MONEY, 1, money, admission, now)
        if seen is not None:
            assert truth is not None, (seen, missed)
        if not missed:
            assert seen == truth  # a view that misses nothing is the ledger's own answer


def test_a_read_on_a_connection_cut_since_the_last_use_is_retried_once_on_a_new_one(
        pg_store: PgStore) -> None:
    with PostgresLedger.open(pg_store.dsn, "a", FixedClock(T0)) as ledger:
        made = ledger.reserve_call("t", CALLS, 1, (), None)
        assert isinstance(made, Reserved)
        cut = ledger._conn.info.backend_pid
        pg_store.execute("SELECT pg_terminate_backend(%s)", (cut,))
        # A database restart cuts every session so: the first read after it
        # answers from a new connection instead of failing its call.
        assert ledger.run(made.run) == made.entry
        assert ledger._conn.info.backend_pid != cut
        pg_store.execute("SELECT pg_terminate_backend(%s)", (ledger._conn.info.backend_pid,))
        assert ledger.over_quota("t", QuotaConfig(window=Duration.parse("1h"), calls=1), 1, ()) \
            is not None
