"""Decisions per key on the PostgreSQL store (issue 27 items 1 and 2): time
across instances whose clocks differ by minutes (seed 000 section 6), the
keys a reserve locks, and a store an older schema wrote, upgraded."""

from __future__ import annotations

import threading
import time

import psycopg
from psycopg.types.json import Jsonb

from staal.manifest.durations import Duration
from staal.manifest.model import QuotaConfig
from staal.records.ledger_records import LEDGER, OnceHold, Reserve, Settle
from staal.runtime.clock import FixedClock
from staal.supervisor.store.entries import Admission
from staal.supervisor.store.ledger import Existing, OverQuota, Reserved
from staal.supervisor.store.postgres.connection import connect
from staal.supervisor.store.postgres.decisions import decision_keys
from staal.supervisor.store.postgres.ledger import PostgresLedger
from staal.supervisor.store.postgres.schema import SCHEMA_VERSION, key_lock
from tests.helpers.pg_store import PgStore
from tests.helpers.recorder import WAIT
from tests.supervisor.store.test_contract import HOUR, T0

MINUTE = 60_000
CALLS = QuotaConfig(window=Duration.parse("1h"), calls=2)


def opened(pg: PgStore, instance: str, clock: FixedClock,
           warnings: list[str] | None = None) -> PostgresLedger:
    sink = warnings if warnings is not None else []
    return PostgresLedger.open(pg.dsn, instance, clock, sink.append)


def test_instances_whose_clocks_differ_by_minutes_never_stamp_a_tools_decisions_backwards(
        pg_store: PgStore) -> None:
    ahead, between, behind = FixedClock(T0 + 5 * MINUTE), FixedClock(T0 + 2 * MINUTE), \
        FixedClock(T0)
    warned: list[str] = []
    with opened(pg_store, "ahead", ahead) as a, opened(pg_store, "between", between) as c, \
            opened(pg_store, "behind", behind, warned) as b:
        first = a.reserve_call("t", CALLS, 1, (), None)
        second = c.reserve_call("t", CALLS, 1, (), None)
        assert isinstance(first, Reserved) and isinstance(second, Reserved)
        assert (first.time, second.time) == (T0 + 5 * MINUTE, T0 + 5 * MINUTE)
        # The instance behind decides at the ledger's time: the window is not
        # moved back, so the quota frees an hour after the last reserve, not earlier.
        refused = b.reserve_call("t", CALLS, 1, (), None)
        assert isinstance(refused, OverQuota) and refused.in_use == 2
        assert refused.frees_at_ms == T0 + 5 * MINUTE + HOUR + 1
        assert len(warned) == 1 and "behind the ledger in the PostgreSQL store" in warned[0]
        ended = c.settle(second.run, "done", ())  # its end is never before its reserve
        assert ended.ended_ms == T0 + 5 * MINUTE
        behind.advance(HOUR)  # the clock behind passes an hour after its own start only
        assert isinstance(b.reserve_call("t", CALLS, 1, (), None), OverQuota)
        behind.advance(5 * MINUTE + 1)
        third = b.reserve_call("t", CALLS, 1, (), None)
        assert isinstance(third, Reserved) and third.time == T0 + 5 * MINUTE + HOUR + 1
        other = b.reserve_call("u", None, 1, (), None)  # another tool: its own time
        assert isinstance(other, Reserved) and other.time == third.time
    times = pg_store.rows("SELECT reserved_ms FROM staal_runs WHERE tool = 't' ORDER BY seq")
    assert [t for (t,) in times] == sorted(t for (t,) in times)


def test_a_once_key_settled_by_an_instance_ahead_is_held_for_its_keep_by_one_behind(
        pg_store: PgStore) -> None:
    hold = OnceHold(key="e" * 64, args="a" * 64, keep_ms=10 * MINUTE)
    ahead, behind = FixedClock(T0 + 5 * MINUTE), FixedClock(T0)
    with opened(pg_store, "ahead", ahead) as a, opened(pg_store, "behind", behind) as b:
        made = a.reserve_call("t", None, 1, (), hold)
        assert isinstance(made, Reserved)
        a.settle(made.run, "done", ())
        behind.advance(14 * MINUTE)  # inside the keep from the end the instance ahead stamped
        again = b.reserve_call("t", None, 1, (), hold)
        assert isinstance(again, Existing) and again.entry.run == made.run
        assert b.once_holder("t", hold.key) == again.entry
        behind.advance(MINUTE + 1)  # past the end the instance ahead stamped, plus the keep
        fresh = b.reserve_call("t", None, 1, (), hold)
        assert isinstance(fresh, Reserved) and fresh.run != made.run
        assert fresh.time > b.run(made.run).ended_ms  # the key's time went forward only
    assert pg_store.rows("SELECT run FROM staal_once") == [(fresh.run,)]


def test_a_reserve_locks_only_the_keys_it_decides_on_in_one_order(pg_store: PgStore) -> None:
    caller = "c" * 64
    limits = Admission(caller=caller, rate=CALLS, quota=CALLS)
    assert decision_keys("t", None, None, None) == []
    assert decision_keys("t", CALLS, OnceHold("e" * 64, "a" * 64, None), limits) == sorted(
        [f"caller:{caller}:t", "once:t:" + "e" * 64, "quota:t", f"rate:{caller}"])
    with opened(pg_store, "a", FixedClock(T0)) as ledger:
        holder = connect(pg_store.dsn)  # another session, holding t's quota and c's rate
        holder.execute("BEGIN")
        holder.execute(f"SELECT {key_lock('q')}, {key_lock('r')}",
                       {"q": "quota:t", "r": f"rate:{caller}"})
        # None of these decides on either key: each commits while they are held.
        assert isinstance(ledger.reserve_call("t", None, 1, (), None), Reserved)
        assert isinstance(ledger.reserve_call("u", CALLS, 1, (), None), Reserved)
        assert isinstance(ledger.reserve_call("u", None, 1, (), None,
                                              Admission(caller="d" * 64, rate=CALLS)), Reserved)
        holder.execute("SELECT 1")  # still holding: nothing above waited for it
        holder.execute("ROLLBACK")
        holder.close()
        assert isinstance(ledger.reserve_call("t", CALLS, 1, (), None), Reserved)


def test_one_instances_calls_on_other_keys_go_on_while_one_of_its_calls_waits_for_a_key(
        pg_store: PgStore) -> None:
    with opened(pg_store, "a", FixedClock(T0)) as ledger:
        holder = connect(pg_store.dsn)
        holder.execute("BEGIN")
        holder.execute(f"SELECT {key_lock('q')}", {"q": "quota:t"})
        done = threading.Event()
        results: list[object] = []

        def reserve_t() -> None:
            results.append(ledger.reserve_call("t", CALLS, 1, (), None))
            done.set()

        waiting = threading.Thread(target=reserve_t)
        waiting.start()
        deadline = time.monotonic() + WAIT  # until its session waits for t's quota key
        while not pg_store.rows("SELECT 1 FROM pg_locks WHERE locktype = 'advisory' "
                                "AND NOT granted"):
            assert time.monotonic() < deadline, "the reserve of t never waited for its key"
        other = ledger.reserve_call("u", CALLS, 1, (), None)  # the same instance, another key
        assert isinstance(other, Reserved) and not done.is_set()
        holder.execute("ROLLBACK")
        holder.close()
        assert done.wait(WAIT)
        waiting.join(WAIT)
        assert isinstance(results[0], Reserved)


def test_a_store_an_older_schema_wrote_is_upgraded_and_its_runs_count_in_every_decision(
        pg_store: PgStore) -> None:
    pg_store.at_version(4)
    caller = "c" * 64
    done, running = "a" * 32, "b" * 32
    pg_store.execute("INSERT INTO staal_instances VALUES ('old', 100, 0, NULL, 'old')")
    for seq, run in enumerate((done, running), start=1):
        reserve = Reserve(run=run, tool="t", time=T0, calls=1, caller=caller)
        pg_store.execute("INSERT INTO staal_runs VALUES (%s, 't', %s, %s, %s, 'old', 100)",
                         (run, T0, seq, Jsonb(LEDGER.encode(reserve))))
    pg_store.execute("INSERT INTO staal_ends VALUES (%s, 'settle', %s, 3, %s)",
                     (done, T0, Jsonb(LEDGER.encode(Settle(run=done, time=T0,
                                                           outcome="done")))))
    pg_store.execute("UPDATE staal_head SET last_ms = %s", (T0 + MINUTE,))
    with opened(pg_store, "new", FixedClock(T0)) as ledger:
        assert pg_store.rows("SELECT version FROM staal_schema") == [(SCHEMA_VERSION,)]
        assert pg_store.rows("SELECT run, caller, ended FROM staal_runs ORDER BY seq") == \
            [(done, caller, True), (running, caller, False)]
        assert [e.run for e in ledger.unsettled()] == [running]
        refused = ledger.reserve_call("u", None, 1, (), None, Admission(caller, rate=CALLS))
        assert isinstance(refused, OverQuota) and (refused.scope, refused.in_use) == ("rate", 2)
        assert isinstance(ledger.reserve_call("t", CALLS, 1, (), None), OverQuota)
    # The head row went: an instance of the older staal still serving fails on
    # its next write, naming it, instead of deciding on a copy no longer kept.
    try:
        pg_store.execute("SELECT last_ms FROM staal_head FOR UPDATE")
    except psycopg.errors.UndefinedTable as exc:
        assert "staal_head" in str(exc)
    else:
        raise AssertionError("staal_head is still there")
