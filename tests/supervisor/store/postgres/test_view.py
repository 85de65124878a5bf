"""`staal-supervisor status` and the console on the PostgreSQL store (issue 27
item 1): each question they ask is one query that answers as the whole
ledger did, and what they fetch, and what the database reads for their
lists, does not grow with the ledger."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg.types.json import Jsonb

from staal.manifest.check import load_manifest
from staal.manifest.durations import Duration
from staal.manifest.model import QuotaConfig
from staal.records.ledger_records import LEDGER, Reserve, Settle
from staal.runtime.clock import SYSTEM_CLOCK, FixedClock
from staal.supervisor.recovery.forget import forget_in_store
from staal.supervisor.store.entries import Admission, OnceHold
from staal.supervisor.store.errors import StoreError
from staal.supervisor.store.postgres import view as postgres_view
from staal.supervisor.store.postgres.events import entries_where
from staal.supervisor.store.postgres.ledger import PostgresLedger
from staal.supervisor.store.postgres.schema import SCHEMA_VERSION
from staal.supervisor.store.postgres.view import open_view
from staal.supervisor.store.reads.view import StateView
from staal.supervisor.store.state import LedgerState, caller_key
from staal.supervisor.views.console import Console
from staal.supervisor.views.console_data import RUNS_SHOWN, overview, run_detail
from staal.supervisor.views.status import collect
from tests.helpers.pg_store import PgStore
from tests.helpers.serving import tool, write_manifest
from tests.supervisor.store.postgres.test_caller_runs import plan_nodes
from tests.supervisor.store.test_contract import HOUR, T0

ALICE, BOB = "a" * 64, "b" * 64
ENV = "STAAL_VIEW_TEST_DSN"
HOURLY = QuotaConfig(window=Duration.parse("1h"), calls=1000)
CONNECT = postgres_view.connect


def whole_ledger(pg_store: PgStore) -> StateView:
    """Every run, read whole as status once read it (in reserve-time order)."""
    with psycopg.connect(pg_store.dsn) as conn, conn.cursor() as cur:
        return StateView(LedgerState.holding(entries_where(cur, "true", {})))


def test_each_question_status_and_the_console_ask_is_answered_as_the_whole_ledger_answers_it(
        pg_store: PgStore) -> None:
    clock = FixedClock(T0)
    with PostgresLedger.open(pg_store.dsn, "one", clock, [].append) as one, \
            PostgresLedger.open(pg_store.dsn, "two", clock, [].append) as two:
        runs = []
        for i in range(40):
            ledger = one if i % 3 else two
            caller = (ALICE, BOB, None)[i % 3]
            admission = None if caller is None else Admission(caller, profile=f"p{i % 4}")
            once = OnceHold(key=f"{i:064d}", args="1" * 64, keep_ms=HOUR) if i % 7 == 0 else None
            made = ledger.reserve_call(("t", "u", "v")[i % 3], None, 1, (), once, admission)
            runs.append(made.run)  # type: ignore[union-attr]
            if i % 5 == 1:
                ledger.release(made.run)  # type: ignore[union-attr]
            elif i % 5 in (2, 3) or once is not None:
                ledger.settle(made.run, "done" if i % 2 else "failed", ())  # type: ignore[union-attr]
            clock.advance((i % 4) * 20_000)  # some runs share a millisecond
        forget_in_store(pg_store.dsn, runs[7], clock)
        forget_in_store(pg_store.dsn, runs[14], clock)
    whole = whole_ledger(pg_store)
    now = clock.now_ms()
    with open_view(pg_store.dsn) as view:
        assert view.latest_reserve_ms() == whole.latest_reserve_ms() > T0
        assert view.unsettled() == whole.unsettled() and len(view.unsettled()) == 13
        assert set(view.owners().values()) == {"one", "two"}
        assert set(view.owners()) == {e.run for e in whole.unsettled()}
        assert [i.instance for i in view.instances()] == ["one", "two"]
        assert view.callers() == whole.callers()
        assert [(c.caller, c.runs) for c in view.callers()] == [(ALICE, 14), (BOB, 13)]
        assert view.forgotten() == whole.forgotten() and len(view.forgotten()) == 2
        for key in ("t", "u", "w", caller_key(ALICE), caller_key(BOB, "u"), caller_key(BOB, "t")):
            for window in (60_000, 10 * 60_000, HOUR):
                assert view.in_window(key, window, now) == whole.in_window(key, window, now), \
                    (key, window)
        for needle in ("", "done", "failed", "released", "never", "u", runs[5][:6], "zz"):
            for limit in (3, 100):
                found = view.ended_runs(needle, limit)
                assert found == whole.ended_runs(needle, limit), (needle, limit)
        assert view.ended_runs("", 100).matched == 27
        for run in (runs[0], runs[1], runs[7], "f" * 32):
            assert view.run(run) == whole.state.run(run)


@dataclass
class Reads:
    """The statements a reader's snapshot ran, and the rows they returned."""

    statements: list[tuple[str, Any]] = field(default_factory=list)
    rows: int = 0


def counted(monkeypatch: pytest.MonkeyPatch) -> Reads:
    """Every statement of the view's connections counted with its rows."""
    reads = Reads()

    class Counting(psycopg.Cursor):  # type: ignore[type-arg]
        def execute(self, query: Any, params: Any = None, **kwargs: Any) -> Any:
            super().execute(query, params, **kwargs)
            reads.statements.append((query, params))
            if self.description is not None:
                reads.rows += self.rowcount
            return self

    def connect(dsn: str) -> psycopg.Connection[Any]:
        conn = CONNECT(dsn)
        conn.cursor_factory = Counting
        return conn

    monkeypatch.setattr(postgres_view, "connect", connect)
    return reads


def grow(pg_store: PgStore, runs: int, fence: int, now: int) -> None:
    """`runs` more settled runs of tool t by Alice, two days before `now`, in bulk."""
    reserve = Jsonb(LEDGER.encode(Reserve(run="0" * 32, tool="t", time=T0, calls=1,
                                          caller=ALICE, profile="p")))
    settle = Jsonb(LEDGER.encode(Settle(run="0" * 32, time=T0, outcome="done")))
    first = pg_store.rows("SELECT count(*) FROM staal_runs")[0][0]
    params = {"reserve": reserve, "settle": settle, "fence": fence, "from": first,
              "to": first + runs - 1, "t": now - 2 * 24 * HOUR}
    pg_store.execute(
        "INSERT INTO staal_runs (run, tool, reserved_ms, seq, event, owner, fence, caller, ended) "
        "SELECT md5(i::text), 't', %(t)s::bigint + i, nextval('staal_event_seq'), "
        "jsonb_set(jsonb_set(%(reserve)s, '{run}', to_jsonb(md5(i::text))), '{time}', "
        "to_jsonb(%(t)s::bigint + i)), 'one', %(fence)s, %(caller)s, true "
        "FROM generate_series(%(from)s::bigint, %(to)s::bigint) AS i", {**params, "caller": ALICE})
    pg_store.execute(
        "INSERT INTO staal_ends (run, kind, ended_ms, seq, event) "
        "SELECT md5(i::text), 'settle', %(t)s::bigint + i, nextval('staal_event_seq'), "
        "jsonb_set(jsonb_set(%(settle)s, '{run}', to_jsonb(md5(i::text))), '{time}', "
        "to_jsonb(%(t)s::bigint + i)) FROM generate_series(%(from)s::bigint, %(to)s::bigint) AS i", params)
    pg_store.execute("ANALYZE staal_runs, staal_ends")


def runs_rows_read(pg_store: PgStore, statements: list[tuple[str, Any]]) -> list[int]:
    """Per statement that lists runs (not a count, nor a search, which
    compares every run it must in the database), the rows of staal_runs the
    database read for it (returned or filtered out), as EXPLAIN ANALYZE says."""
    read = []
    with psycopg.connect(pg_store.dsn) as conn, conn.cursor() as cur:
        for query, params in statements:
            if "count(" in query or "strpos(" in query or query.startswith("SET "):
                continue  # a SET reads nothing
            cur.execute(f"EXPLAIN (ANALYZE, FORMAT JSON) {query}", params)
            plan = cur.fetchone()[0][0]["Plan"]  # type: ignore[index]
            read.append(sum(n["Actual Rows"] * n["Actual Loops"] + n.get("Rows Removed by Filter", 0)
                            for n in plan_nodes(plan) if n.get("Relation Name") == "staal_runs"))
    return read


def test_status_and_the_console_fetch_no_more_rows_from_a_ledger_grown_by_twelve_thousand_runs(
        pg_store: PgStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "count.py").write_text("def main(n: int) -> int:\n    return n\n")
    manifest = load_manifest(write_manifest(
        tmp_path, [tool("t", "count.py", quota={"window": "1h", "calls": 1000}),
                   tool("u", "count.py")], store={"postgres": {"dsn": {"env": ENV}}}))
    monkeypatch.setenv(ENV, pg_store.dsn)
    clock = FixedClock(SYSTEM_CLOCK.now_ms())  # status reads its windows at the clock's now
    with PostgresLedger.open(pg_store.dsn, "one", clock, [].append) as ledger:
        unfinished = ledger.reserve_call("t", HOURLY, 1, (), None, Admission(BOB, "p"))
        for _ in range(3):
            clock.advance(1)
            done = ledger.reserve_call("t", HOURLY, 1, (), None, Admission(ALICE, "p"))
            ledger.settle(done.run, "done", ())  # type: ignore[union-attr]
        fence = ledger.fence
    console = Console(manifest)
    seen: list[tuple[int, int, list[int]]] = []
    for runs in (3_000, 12_000):
        grow(pg_store, runs, fence, clock.now_ms())
        reads = counted(monkeypatch)
        report = collect(manifest)
        pages = overview(manifest), overview(manifest, "DONE")
        detail = run_detail(manifest, unfinished.run)  # type: ignore[union-attr]
        (status, page), (run_status, run_page) = (
            console.route(path, "") for path in ("/", f"/runs/{done.run}"))  # type: ignore[union-attr]
        total = pg_store.rows("SELECT count(*) FROM staal_runs")[0][0]
        assert (status, run_status) == (200, 200)
        assert f"<p data-matched={total}>{total} runs, the newest {RUNS_SHOWN} shown</p>" in page
        assert page.count("<tr data-run=") == RUNS_SHOWN
        assert "data-state>done</b>" in run_page
        # The counts are the grown ledger's, and the lists what they were.
        assert {c.caller: c.runs for c in report.callers} == {ALICE: total - 1, BOB: 1}
        assert [r.run for r in report.runs] == [unfinished.run]  # type: ignore[union-attr]
        assert [q.calls for q in report.quotas] == [4]
        assert [p.matched for p in pages] == [total, total - 1]
        assert [len(p.runs) for p in pages] == [RUNS_SHOWN, RUNS_SHOWN]
        assert pages[0].runs[0].run == done.run  # type: ignore[union-attr]
        assert detail is not None and detail[0].run == unfinished.run  # type: ignore[union-attr]
        seen.append((len(reads.statements), reads.rows, runs_rows_read(pg_store, reads.statements)))
    (statements, rows, read), grown = seen
    # What the readers fetched is the same on a ledger twelve thousand runs
    # larger, and what the database read for each list is what it shows:
    # no whole ledger, and no sort of one.
    assert grown[:2] == (statements, rows) and rows <= 3 * RUNS_SHOWN + 100
    assert max(read) == max(grown[2]) == RUNS_SHOWN + 1, (read, grown[2])


def test_a_store_an_older_schema_wrote_gains_the_index_of_reserve_times(
        pg_store: PgStore) -> None:
    pg_store.at_version(7)
    with PostgresLedger.open(pg_store.dsn, "new", FixedClock(T0), [].append):
        assert pg_store.rows("SELECT version FROM staal_schema") == [(SCHEMA_VERSION,)]
        assert pg_store.rows("SELECT indexdef FROM pg_indexes WHERE indexname = "
                             "'staal_runs_time'")[0][0].endswith("(reserved_ms, run)")


def test_a_store_older_than_status_can_read_is_refused_naming_its_version_and_left_as_it_was(
        pg_store: PgStore) -> None:
    pg_store.at_version(4)
    tables = pg_store.rows("SELECT tablename FROM pg_tables WHERE schemaname = %s ORDER BY 1",
                           (pg_store.schema,))
    with pytest.raises(StoreError) as caught, open_view(pg_store.dsn):
        pass
    assert "schema is version 4" in caught.value.message
    assert "start an instance of this staal on it once to upgrade it" in caught.value.message
    assert pg_store.rows("SELECT version FROM staal_schema") == [(4,)]
    assert pg_store.rows("SELECT tablename FROM pg_tables WHERE schemaname = %s ORDER BY 1",
                         (pg_store.schema,)) == tables
