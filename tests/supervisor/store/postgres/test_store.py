"""The PostgreSQL store's own guarantees (issue 15 item 2), on a real
server: quotas and once keys exact across processes, the invariants held by
the schema itself, a versioned schema, one clock across instances, fencing,
compaction across instances, and a DSN that never shows."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import threading
from pathlib import Path

import psycopg
import pytest

from staal.records.ledger_records import OnceHold
from staal.runtime.clock import FixedClock
from staal.runtime.transitions import IllegalTransition, advance
from staal.supervisor.recovery.lease import DEFAULT_LEASE, TRANSITIONS, Lease, LeaseState, LeaseTiming
from staal.supervisor.store.errors import StoreError
from staal.supervisor.store.ledger import Existing, LedgerBug, OverQuota, Reserved
from staal.supervisor.store.postgres.connection import SESSION, connect
from staal.supervisor.store.postgres.ledger import Fenced, PostgresLedger
from staal.supervisor.store.postgres.schema import SCHEMA_VERSION, SchemaNewer, key_lock
from tests.helpers.pg_store import CommitCutter, PgStore
from tests.helpers.store_racer import QUOTA_CALLS
from tests.supervisor.store.test_contract import HOUR, QUOTA, T0

BOUND = 120  # seconds a racing process may take before the test fails
ROOT = Path(__file__).resolve().parents[4]


def open_ledger(pg: PgStore, instance: str = "a", clock: FixedClock | None = None,
                warnings: list[str] | None = None) -> PostgresLedger:
    sink = warnings if warnings is not None else []
    return PostgresLedger.open(pg.dsn, instance, clock or FixedClock(T0), sink.append)


def reserve(ledger: PostgresLedger, tool: str = "t") -> Reserved:
    got = ledger.reserve_call(tool, None, 1, (), None)
    assert isinstance(got, Reserved), got
    return got


def test_four_processes_reserving_at_once_never_exceed_a_quota_nor_run_a_once_key_twice(
        pg_store: PgStore) -> None:
    tries = 6
    racers = [subprocess.Popen(
        [sys.executable, "-m", "tests.helpers.store_racer", pg_store.dsn, f"racer-{i}", str(tries)],
        cwd=ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True) for i in range(4)]
    try:
        for racer in racers:
            assert racer.stdout.readline().strip() == "ready"
        for racer in racers:  # every one is connected; now they race
            racer.stdin.write("go\n")
            racer.stdin.flush()
        results = [json.loads(racer.communicate(timeout=BOUND)[0]) for racer in racers]
    finally:
        for racer in racers:
            racer.kill()
            racer.wait()
    assert all(racer.returncode == 0 for racer in racers)
    quota_runs = [run for r in results for run in r["quota"]]
    once_runs = [run for r in results for run in r["once"]]
    assert len(quota_runs) == QUOTA_CALLS and len(set(quota_runs)) == QUOTA_CALLS
    assert len(once_runs) == 1 and sum(r["existing"] for r in results) == 4 * tries - 1
    assert pg_store.rows("SELECT count(*) FROM staal_runs WHERE tool = 'quota-tool'") == \
        [(QUOTA_CALLS,)]
    assert pg_store.rows("SELECT count(*) FROM staal_runs WHERE tool = 'once-tool'") == [(1,)]


def test_the_schema_refuses_a_second_reserve_end_or_once_holder_even_with_the_code_bypassed(
        pg_store: PgStore) -> None:
    with open_ledger(pg_store) as ledger:
        made = ledger.reserve_call("t", None, 1, (), OnceHold("a" * 64, "b" * 64, None))
        assert isinstance(made, Reserved)
        ledger.settle(made.run, "done", ())
    run = made.run
    bypasses = {
        "a second reserve": ("INSERT INTO staal_runs (run, tool, reserved_ms, seq, event, owner, "
                             "fence) SELECT run, tool, reserved_ms, seq + 100, event, owner, "
                             "fence FROM staal_runs WHERE run = %s", (run,)),
        "a second end": ("INSERT INTO staal_ends (run, kind, ended_ms, seq, event) SELECT run, "
                         "'release', ended_ms, seq + 100, event FROM staal_ends WHERE run = %s",
                         (run,)),
        "an end with no reserve": ("INSERT INTO staal_ends (run, kind, ended_ms, seq, event) "
                                   "VALUES (%s, 'release', 1, 999, '{}')", ("f" * 32,)),
        "a second holder of a once key": ("INSERT INTO staal_once (tool, key, run) VALUES "
                                          "('t', %s, %s)", ("a" * 64, run)),
    }
    before = pg_store.rows("SELECT (SELECT count(*) FROM staal_runs), "
                           "(SELECT count(*) FROM staal_ends), (SELECT count(*) FROM staal_once)")
    for what, (sql, params) in bypasses.items():
        with pytest.raises(psycopg.errors.IntegrityError):
            pg_store.execute(sql, params)
        assert pg_store.rows("SELECT (SELECT count(*) FROM staal_runs), (SELECT count(*) FROM "
                             "staal_ends), (SELECT count(*) FROM staal_once)") == before, what
    assert before == [(1, 1, 1)]


def test_a_schema_newer_than_the_server_refuses_to_start_naming_both_versions(
        pg_store: PgStore) -> None:
    open_ledger(pg_store).close()
    pg_store.execute("UPDATE staal_schema SET version = %s", (SCHEMA_VERSION + 7,))
    with pytest.raises(SchemaNewer) as caught:
        open_ledger(pg_store, instance="b")
    assert caught.value.kind == "schema_newer"
    assert f"version {SCHEMA_VERSION + 7}" in caught.value.message
    assert f"version {SCHEMA_VERSION}," in caught.value.message
    assert pg_store.rows("SELECT instance FROM staal_instances") == [("a",)]


def test_instances_starting_together_create_the_schema_once_and_all_serve(
        pg_store: PgStore) -> None:
    opened: list[PostgresLedger] = []
    errors: list[BaseException] = []
    barrier = threading.Barrier(4, timeout=BOUND)

    def start(i: int) -> None:
        try:
            barrier.wait()
            opened.append(open_ledger(pg_store, instance=f"i{i}"))
        except BaseException as exc:  # noqa: BLE001 - reported by the assert below
            errors.append(exc)

    threads = [threading.Thread(target=start, args=(i,)) for i in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(BOUND)
    try:
        assert errors == [] and len(opened) == 4
        assert pg_store.rows("SELECT version FROM staal_schema") == [(SCHEMA_VERSION,)]
        fences = pg_store.rows("SELECT fence FROM staal_instances")
        assert len({fence for (fence,) in fences}) == 4
    finally:
        for ledger in opened:
            ledger.close()


def test_an_instance_sees_the_runs_another_committed_and_a_quota_counts_both(
        pg_store: PgStore) -> None:
    clock = FixedClock(T0)
    with open_ledger(pg_store, "a", clock) as a, open_ledger(pg_store, "b", clock) as b:
        first = a.reserve_call("t", QUOTA, 1, (), None)
        second = b.reserve_call("t", QUOTA, 1, (), None)
        assert isinstance(first, Reserved) and isinstance(second, Reserved)
        refused = a.reserve_call("t", QUOTA, 1, (), None)
        assert isinstance(refused, OverQuota) and refused.in_use == 2
        assert [e.run for e in b.runs()] == [first.run, second.run]
        assert [e.run for e in a.mine()] == [first.run]
        assert [e.run for e in b.mine()] == [second.run]
        a.settle(first.run, "done", ())
        assert b.run(first.run).state == "settled"


def test_ledger_time_never_goes_back_across_instances_whose_clocks_disagree(
        pg_store: PgStore) -> None:
    ahead, behind = FixedClock(T0 + HOUR), FixedClock(T0)
    warnings: list[str] = []
    with open_ledger(pg_store, "a", ahead) as a, \
            open_ledger(pg_store, "b", behind, warnings) as b:
        first = reserve(a)
        second = reserve(b)
        assert second.time == first.time == T0 + HOUR
        assert b.now_ms() == T0 + HOUR
        assert len(warnings) == 1 and "behind the ledger in the PostgreSQL store" in warnings[0]
    assert pg_store.rows("SELECT reserved_ms FROM staal_runs ORDER BY seq") == \
        [(T0 + HOUR,), (T0 + HOUR,)]


def test_an_instance_that_restarted_fences_out_the_process_it_replaced(
        pg_store: PgStore) -> None:
    with open_ledger(pg_store, "a") as stale:
        run = reserve(stale).run
        with open_ledger(pg_store, "a") as restarted:
            assert restarted.fence > stale.fence
            with pytest.raises(Fenced) as caught:
                stale.settle(run, "done", ())
            assert caught.value.kind == "fenced" and run in caught.value.message
            assert pg_store.rows("SELECT count(*) FROM staal_ends") == [(0,)]
            assert [e.run for e in restarted.mine()] == [run]
            assert restarted.settle(run, "done", ()).state == "settled"


def test_an_instance_cannot_end_another_instances_run(pg_store: PgStore) -> None:
    with open_ledger(pg_store, "a") as a, open_ledger(pg_store, "b") as b:
        run = reserve(a).run
        with pytest.raises(Fenced):
            b.release(run)
        assert pg_store.rows("SELECT count(*) FROM staal_ends") == [(0,)]
        assert a.release(run).state == "released"
        with pytest.raises(LedgerBug):
            b.release(run)


def test_compaction_keeps_another_instances_runs_and_the_other_reads_the_new_ledger(
        pg_store: PgStore) -> None:
    clock = FixedClock(T0)
    with open_ledger(pg_store, "a", clock) as a, open_ledger(pg_store, "b", clock) as b:
        mine, theirs = reserve(a), reserve(b)
        a.settle(mine.run, "done", ())
        b.settle(theirs.run, "done", ())
        clock.advance(2 * HOUR)
        result = a.compact(set(), {"t": HOUR})
        assert (result.kept, result.dropped) == ((theirs.run,), (mine.run,))
        assert [e.run for e in b.runs()] == [theirs.run]
        assert reserve(b).time == T0 + 2 * HOUR
        assert len(a.runs()) == 2


def test_the_store_commits_with_synchronous_commit_on_whatever_the_dsn_asks(
        pg_store: PgStore) -> None:
    dsn = pg_store.dsn.replace("options='", "options='-csynchronous_commit=off ")
    with PostgresLedger.open(dsn, "a", FixedClock(T0)) as ledger:
        reserve(ledger)
        assert ledger._conn.execute("SHOW synchronous_commit").fetchone() == ("on",)


def test_a_connection_cut_before_a_write_is_retried_once_on_a_new_connection(
        pg_store: PgStore) -> None:
    with open_ledger(pg_store) as ledger:
        run = reserve(ledger).run
        pg_store.execute("SELECT pg_terminate_backend(%s)", (ledger._conn.info.backend_pid,))
        assert ledger.settle(run, "done", ()).state == "settled"
        assert pg_store.rows("SELECT count(*) FROM staal_ends") == [(1,)]


def test_a_commit_whose_answer_was_lost_is_found_on_the_retry_and_never_written_twice(
        pg_store: PgStore) -> None:
    open_ledger(pg_store).close()  # the schema, made without the proxy
    with CommitCutter(pg_store) as proxy, \
            PostgresLedger.open(proxy.dsn, "a", FixedClock(T0)) as ledger:
        proxy.cut_next_commit(b"INSERT INTO staal_runs")  # a reserve no key decides on
        made = reserve(ledger)
        assert proxy.cut.is_set()
        proxy.cut_next_commit()  # a reserve deciding on a quota: a transaction
        decided = ledger.reserve_call("t", QUOTA, 1, (), None)
        assert proxy.cut.is_set() and isinstance(decided, Reserved)
        proxy.cut_next_commit(b"INSERT INTO staal_ends")
        ended = ledger.settle(made.run, "done", ())
        assert proxy.cut.is_set()
        assert ended.state == "settled" and ledger.run(made.run) == ended
    assert pg_store.rows("SELECT run FROM staal_runs ORDER BY seq") == \
        [(made.run,), (decided.run,)]
    assert pg_store.rows("SELECT run, kind FROM staal_ends") == [(made.run, "settle")]


def test_a_store_that_cannot_be_reached_is_a_store_error_and_nothing_is_written(
        pg_store: PgStore) -> None:
    with open_ledger(pg_store) as ledger:
        run = reserve(ledger).run
        ledger._pool.dsn = re.sub(r"port=\d+", "port=1", ledger._pool.dsn)  # the server is gone
        pg_store.execute("SELECT pg_terminate_backend(%s)", (ledger._conn.info.backend_pid,))
        with pytest.raises(StoreError) as caught:
            ledger.settle(run, "done", ())
        assert caught.value.kind == "store"
        assert "could not connect to the PostgreSQL store" in caught.value.message
    assert pg_store.rows("SELECT count(*) FROM staal_ends") == [(0,)]


def test_neither_the_dsn_nor_its_password_appear_in_a_store_error() -> None:
    password = "hunter2-not-shown"
    dsn = f"host=127.0.0.1 port=1 dbname=nowhere user=someone password={password}"
    with pytest.raises(StoreError) as caught:
        PostgresLedger.open(dsn, "a", FixedClock(T0))
    assert "could not connect to the PostgreSQL store" in caught.value.message
    assert password not in caught.value.message and dsn not in caught.value.message
    with pytest.raises(StoreError) as caught:
        PostgresLedger.open(f"password={password} not a dsn ===", "a", FixedClock(T0))
    assert password not in caught.value.message


def test_existing_is_answered_for_a_once_key_another_instance_holds(pg_store: PgStore) -> None:
    key = OnceHold("a" * 64, "b" * 64, None)
    with open_ledger(pg_store, "a") as a, open_ledger(pg_store, "b") as b:
        made = a.reserve_call("t", None, 1, (), key)
        again = b.reserve_call("t", None, 1, (), key)
        assert isinstance(made, Reserved) and isinstance(again, Existing)
        assert again.entry.run == made.run


def test_a_session_paused_holding_a_tools_quota_is_ended_and_other_tools_never_wait_for_it(
        pg_store: PgStore) -> None:
    open_ledger(pg_store).close()
    paused = connect(pg_store.dsn)  # a session as staal opens them, then stuck mid-transaction
    paused.execute("BEGIN")
    paused.execute(f"SELECT {key_lock('key')}", {"key": "quota:t"})  # as a reserve of t locks
    with open_ledger(pg_store, "b") as other:
        elsewhere = other.reserve_call("u", QUOTA, 1, (), None)  # another tool's quota: no wait
        assert isinstance(elsewhere, Reserved)
        paused.execute("SELECT 1")  # still alive, still holding t's quota: u never waited for it
        made = other.reserve_call("t", QUOTA, 1, (), None)  # waits until the server ends it
        assert isinstance(made, Reserved) and other.run(made.run) is not None
    with pytest.raises(psycopg.Error):
        paused.execute("SELECT 1")
    paused.close()
    assert paused.broken or paused.closed


def test_every_session_has_the_settings_the_guarantees_need(pg_store: PgStore) -> None:
    with open_ledger(pg_store) as ledger:
        reserve(ledger)
        for name, value in SESSION.items():
            shown = ledger._conn.execute("SELECT setting FROM pg_settings WHERE name = %s",
                                         (name,)).fetchone()[0]
            assert shown == value, name  # timeouts in ms, as pg_settings gives them


def lease_of(pg: PgStore, instance: str) -> int | None:
    (until,) = pg.rows("SELECT lease_until_ms FROM staal_instances WHERE instance = %s",
                       (instance,))[0]
    return until


def test_a_lease_is_renewed_while_held_lost_for_good_once_taken_and_given_up_at_close(
        pg_store: PgStore) -> None:
    clock = FixedClock(T0)
    ledger = open_ledger(pg_store, "a", clock)
    assert lease_of(pg_store, "a") == T0 + DEFAULT_LEASE.lease_ms
    lease = Lease(ledger.renew_lease)
    clock.advance(1000)
    assert lease.renew() is LeaseState.STARTING  # renewed while the instance starts
    assert lease_of(pg_store, "a") == T0 + 1000 + DEFAULT_LEASE.lease_ms
    assert lease.started() is LeaseState.HELD
    with open_ledger(pg_store, "a", clock):  # another process takes the identity
        assert lease.renew() is LeaseState.LOST
        with pytest.raises(IllegalTransition):
            lease.renew()  # lost is for good
        ledger.close()
        assert lease_of(pg_store, "a") == T0 + 1000 + DEFAULT_LEASE.lease_ms  # not the old one's
    assert lease_of(pg_store, "a") is None  # the holder closed: given up, not expired


def test_a_configured_lease_is_registered_and_renewed_for_its_own_length_every_third_of_it(
        pg_store: PgStore) -> None:
    clock, timing = FixedClock(T0), LeaseTiming(6000)
    ledger = PostgresLedger.open(pg_store.dsn, "a", clock, lambda text: None, timing)
    assert lease_of(pg_store, "a") == T0 + 6000
    lease = Lease(ledger.renew_lease, timing)
    clock.advance(2000)
    assert lease.renew() is LeaseState.STARTING
    assert lease_of(pg_store, "a") == T0 + 2000 + 6000
    assert timing.renew_every_s == 2.0 and DEFAULT_LEASE.renew_every_s == 5.0
    ledger.close()


def test_only_a_held_lease_moves_and_only_as_its_table_says() -> None:
    for state in LeaseState:
        for event in ("renewed", "lost", "took_over", "started"):
            if (state, event) in TRANSITIONS:
                assert advance(TRANSITIONS, state, event) in LeaseState
            else:
                with pytest.raises(IllegalTransition):
                    advance(TRANSITIONS, state, event)
    # Only a serving lease takes over; a lost one only stays lost.
    assert {state for state, event in TRANSITIONS if event == "took_over"} == {LeaseState.HELD}
    assert {event for state, event in TRANSITIONS if state is LeaseState.LOST} == {"started"}
    assert advance(TRANSITIONS, LeaseState.LOST, "started") is LeaseState.LOST
