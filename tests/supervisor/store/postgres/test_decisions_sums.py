"""Quota decisions on the PostgreSQL store read sums, not runs (schema
version 9): an accepting reserve fetches a few rows however many runs its
windows hold, a refusal is the file store's to the word (and frees when the
file store's does), and a store version 8 wrote is upgraded with what each
run counts, in every state and in two currencies."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg.types.json import Jsonb

from staal.manifest.durations import Duration
from staal.manifest.model import NetConfig, QuotaConfig, Tool
from staal.money import Money
from staal.records.ledger_records import LEDGER, Release, Reserve, Settle
from staal.runtime.clock import FixedClock
from staal.supervisor.calls.quota_text import quota_text
from staal.supervisor.store.entries import Admission
from staal.supervisor.store.file_ledger import FileLedger
from staal.supervisor.store.ledger import OverQuota, Reserved
from staal.supervisor.store.postgres import schema
from staal.supervisor.store.postgres.ledger import PostgresLedger
from staal.supervisor.store.postgres.schema import SCHEMA_VERSION
from tests.helpers.pg_store import PgStore
from tests.supervisor.store.test_contract import HOUR, T0

MONEY = QuotaConfig(window=Duration.parse("1h"), calls=1000, money=Money("10", "USD"))
CALLS = QuotaConfig(window=Duration.parse("1h"), calls=3)
CALLER = "c" * 64


def usd(amount: str) -> tuple[Money, ...]:
    return (Money(amount, "USD"),)


@pytest.fixture
def fetched(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[int]]:
    """How many rows every cursor fetched, counted from when it is cleared."""
    counted: list[int] = []
    fetchone, fetchall = psycopg.Cursor.fetchone, psycopg.Cursor.fetchall

    def one(self: psycopg.Cursor[Any]) -> Any:
        row = fetchone(self)
        counted.append(row is not None)
        return row

    def every(self: psycopg.Cursor[Any]) -> Any:
        rows = fetchall(self)
        counted.append(len(rows))
        return rows

    monkeypatch.setattr(psycopg.Cursor, "fetchone", one)
    monkeypatch.setattr(psycopg.Cursor, "fetchall", every)
    monkeypatch.setattr(psycopg.Cursor, "fetchmany", None)  # not used: would not be counted
    monkeypatch.setattr(psycopg.Cursor, "__iter__", None)
    yield counted


def test_an_accepting_reserve_fetches_a_few_rows_however_many_runs_its_windows_hold(
        pg_store: PgStore, fetched: list[int]) -> None:
    clock = FixedClock(T0)
    admission = Admission(CALLER, rate=MONEY, quota=MONEY)
    with PostgresLedger.open(pg_store.dsn, "i", clock, [].append) as ledger:
        runs = []
        for _ in range(60):
            made = ledger.reserve_call("t", MONEY, 1, usd("0.10"), None, admission)
            assert isinstance(made, Reserved)
            runs.append(made.run)
            clock.advance(1)
        for run in runs[:20]:
            ledger.settle(run, "done", usd("0.01"))
        for run in runs[20:30]:
            ledger.release(run)
        fetched.clear()
        accepted = ledger.reserve_call("t", MONEY, 1, usd("0.10"), None, admission)
        assert isinstance(accepted, Reserved)
        assert ledger.over_quota("t", MONEY, 1, usd("0.10"), admission) is None
        use = ledger.quota_use("t", MONEY)
        # Three windows of 61 runs each were decided on twice and reported once.
        assert sum(fetched) <= 15, fetched
    # What they summed is what the runs count: 51 calls; 20 settled at 0.01,
    # 31 unsettled holding 0.10, 10 released counting nothing.
    assert (use.calls, use.unsettled) == (51, 31)
    assert (use.money_charged, use.money_held) == (Money("0.20", "USD"), Money("3.10", "USD"))
    assert use.calls_frees_at_ms == use.money_frees_at_ms == T0 + HOUR + 1


def tool(quota: QuotaConfig) -> Tool:
    return Tool("t", "T.", Path("t.py"), "t", {}, NetConfig(1000, 1000), quota=quota)


@contextmanager
def both(pg_store: PgStore, tmp_path: Path) -> Iterator[tuple[FixedClock, Any, Any]]:
    """A file store and a PostgreSQL store on one clock."""
    clock = FixedClock(T0)
    with FileLedger.open(tmp_path / "server.ledger", clock, warn=[].append) as files, \
            PostgresLedger.open(pg_store.dsn, "i", clock, [].append) as rows:
        yield clock, files, rows


def test_a_refusal_on_the_postgresql_store_is_the_file_stores_to_the_word_and_frees_as_it_does(
        pg_store: PgStore, tmp_path: Path) -> None:
    limits = Admission(CALLER, rate=CALLS, quota=MONEY)
    with both(pg_store, tmp_path) as (clock, files, rows):
        def same(calls: int, money: tuple[Money, ...], admission: Admission | None,
                 quota: QuotaConfig = MONEY) -> Any:
            """Both stores' answer to one reserve, which must be the same."""
            answers = [ledger.reserve_call("t", quota, calls, money, None, admission)
                       for ledger in (files, rows)]
            if isinstance(answers[0], OverQuota):
                assert answers[0] == answers[1]
                assert quota_text(tool(quota), answers[0], admission) == \
                    quota_text(tool(quota), answers[1], admission)
                return answers[0]
            assert [type(a) for a in answers] == [Reserved, Reserved]
            return answers

        settled, released, _held = (same(1, (*usd(a), Money("3", "EUR")), None)
                                    for a in ("4", "3", "2"))
        clock.advance(1000)
        for ledger, run in ((files, settled[0].run), (rows, settled[1].run)):
            ledger.settle(run, "done", (*usd("1.50"), Money("1", "EUR")))
        for ledger, run in ((files, released[0].run), (rows, released[1].run)):
            ledger.release(run)
        clock.advance(1000)
        same(1, usd("1"), limits)
        same(1, (), limits)
        same(1, (), limits)
        # Charged 1.50, nothing released, held 2 + 1: 4.50 of 10 USD.
        over = same(1, usd("6"), None)
        assert (over.which, over.in_use) == ("money", Money("4.50", "USD"))
        assert over.frees_at_ms == T0 + HOUR + 1  # the settled run's charges age out first
        assert same(1, usd("11"), None).frees_at_ms is None  # never fits
        rate = same(1, (), limits)
        assert (rate.scope, rate.in_use, rate.frees_at_ms) == ("rate", 3, T0 + 2000 + HOUR + 1)
        assert [files.quota_use("t", MONEY)] == [rows.quota_use("t", MONEY)]
        clock.advance(HOUR - 2000)
        assert same(1, usd("6"), None).frees_at_ms == T0 + HOUR + 1  # not yet: a bound
        clock.advance(1)
        same(1, usd("6"), None)  # the first runs aged out on both stores
        assert [files.quota_use("t", MONEY)] == [rows.quota_use("t", MONEY)]
        assert len(files.runs()) == len(rows.runs()) == 7  # the refusals reserved nothing


def test_a_store_version_8_wrote_is_upgraded_with_what_each_run_counts_in_every_state(
        pg_store: PgStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(schema, "BACKFILL_BATCH", 2)  # its three runs in two batches
    pg_store.at_version(8)
    pg_store.execute("INSERT INTO staal_instances VALUES ('old', 100, 0, NULL, 'old')")
    two = (Money("4", "USD"), Money("300", "JPY"))
    charged = (Money("1.25", "USD"), Money("7", "JPY"))
    runs = [("a" * 32, 1, CALLER), ("b" * 32, 2, None), ("c" * 32, 1, CALLER)]
    clock = FixedClock(T0)
    with FileLedger.open(tmp_path / "server.ledger", clock, warn=[].append) as files:
        made = []
        for seq, (run, calls, caller) in enumerate(runs, start=1):
            reserve = Reserve(run=run, tool="t", time=T0, calls=calls, money=two, caller=caller)
            pg_store.execute("INSERT INTO staal_runs (run, tool, reserved_ms, seq, event, owner, "
                             "fence, caller) VALUES (%s, 't', %s, %s, %s, 'old', 100, %s)",
                             (run, T0, seq, Jsonb(LEDGER.encode(reserve)), caller))
            made.append(files.reserve_call("t", None, calls, two, None,
                                           Admission(caller) if caller else None))
        ends: list[Settle | Release] = [Settle(run=runs[0][0], time=T0, outcome="done",
                                               charged=charged), Release(run=runs[2][0], time=T0)]
        for seq, end in enumerate(ends, start=4):
            pg_store.execute("INSERT INTO staal_ends VALUES (%s, %s, %s, %s, %s)",
                             (end.run, end.TYPE, T0, seq, Jsonb(LEDGER.encode(end))))
            pg_store.execute("UPDATE staal_runs SET ended = true WHERE run = %s", (end.run,))
        files.settle(made[0].run, "done", charged)
        files.release(made[2].run)
        with PostgresLedger.open(pg_store.dsn, "new", clock) as rows:
            assert pg_store.rows("SELECT version FROM staal_schema") == [(SCHEMA_VERSION,)]
            assert pg_store.rows("SELECT calls_used, money_used FROM staal_runs ORDER BY seq") \
                == [(1, {"USD": 125, "JPY": 7}), (2, {"USD": 400, "JPY": 300}), (0, {})]
            for currency, limit in (("USD", "5"), ("JPY", "300")):
                quota = QuotaConfig(window=Duration.parse("1h"), calls=3,
                                    money=Money(limit, currency))
                assert rows.quota_use("t", quota) == files.quota_use("t", quota)
                refused = rows.reserve_call("t", quota, 1, (), None)
                assert isinstance(refused, OverQuota) and refused.which == "calls"
                assert refused == files.reserve_call("t", quota, 1, (), None)
                over = rows.over_quota("t", quota, 0, (Money(limit, currency),))
                assert over is not None and over.which == "money"
                assert over == files.over_quota("t", quota, 0, (Money(limit, currency),))
            assert len(rows.runs()) == 3  # the refusals reserved nothing
