"""A page of one caller's runs on the PostgreSQL store (issue 27): the same
page the whole ledger gives, read by one indexed query of that page alone,
and on a store an older schema wrote, once upgraded."""

from __future__ import annotations

from typing import Any

import psycopg
from psycopg.types.json import Jsonb

from staal.records.ledger_records import LEDGER, Reserve
from staal.runtime.clock import FixedClock
from staal.supervisor.store.caller_runs import CallerRuns, page_in
from staal.supervisor.store.entries import Admission, Reserved
from staal.supervisor.store.postgres.events import page_query
from staal.supervisor.store.postgres.ledger import PostgresLedger
from staal.supervisor.store.postgres.schema import SCHEMA_VERSION
from tests.helpers.pg_store import PgStore
from tests.supervisor.store.test_contract import T0

CALLERS = ("a" * 64, "b" * 64, "c" * 64, None)


def reserved(ledger: PostgresLedger, tool: str, caller: str | None) -> str:
    made = ledger.reserve_call(tool, None, 1, (), None,
                               None if caller is None else Admission(caller))
    assert isinstance(made, Reserved)
    return made.run


def whole_ledger_pages(ledger: PostgresLedger, caller: str | None, started: bool,
                       limit: int) -> list[tuple[str, ...]]:
    """Every page of `caller`'s runs, each read by the store's query and
    checked against the old answer: the whole ledger, filtered in memory."""
    pages: list[tuple[str, ...]] = []
    after = None
    while True:
        which = CallerRuns(caller, started, limit, after)
        page = ledger.caller_runs(which)
        assert page == page_in(reversed(ledger.runs()), which), (caller, started, after)
        pages.append(tuple(e.run for e in page))
        if len(page) < limit:
            return pages
        after = f"{page[-1].reserved_ms}:{page[-1].run}"


def test_a_callers_pages_among_many_runs_of_other_callers_are_the_whole_ledgers_answer(
        pg_store: PgStore) -> None:
    clock = FixedClock(T0)
    with PostgresLedger.open(pg_store.dsn, "one", clock, [].append) as ledger:
        for i in range(60):
            caller = CALLERS[i % len(CALLERS)]
            run = reserved(ledger, f"t{i % 3}", caller)
            if i % 5 == 0:
                ledger.release(run)
            elif i % 2 == 0:
                ledger.settle(run, "done", ())
            if i % 4 == 0:
                clock.advance(1)  # runs share milliseconds, as reserves do
        for caller in CALLERS:
            for started in (True, False):
                pages = whole_ledger_pages(ledger, caller, started, 4)
                listed = [run for page in pages for run in page]
                assert len(listed) == (12 if started else 15)  # each caller's 15, 3 released
                assert len(set(listed)) == len(listed)
        alices = ledger.caller_runs(CallerRuns(CALLERS[0], True, 100))
        # A cursor whose run is gone (retention), or is another caller's, is
        # read past its time, as the whole ledger's answer is.
        for cursor in (f"{alices[3].reserved_ms}:{'f' * 32}",
                       f"{alices[3].reserved_ms}:{ledger.caller_runs(CallerRuns(None, True, 1))[0].run}",
                       f"x:{alices[3].run}", f"{alices[3].reserved_ms}:{alices[3].run}"):
            which = CallerRuns(CALLERS[0], True, 5, cursor)
            assert ledger.caller_runs(which) == page_in(reversed(ledger.runs()), which), cursor
        assert ledger.caller_runs(CallerRuns("d" * 64, False, 5)) == ()


def plan_nodes(plan: dict[str, Any]) -> list[dict[str, Any]]:
    return [plan, *(node for child in plan.get("Plans", []) for node in plan_nodes(child))]


def scans_of_runs(pg_store: PgStore, which: CallerRuns) -> list[dict[str, Any]]:
    """The plan's nodes that read staal_runs, as the page's query ran."""
    with psycopg.connect(pg_store.dsn) as conn, conn.cursor() as cur:
        sql, params = page_query(cur, which)
        cur.execute(f"EXPLAIN (ANALYZE, FORMAT JSON) {sql}", params)
        plan = cur.fetchone()[0][0]["Plan"]  # type: ignore[index]
    return [n for n in plan_nodes(plan) if n.get("Relation Name") == "staal_runs"]


def test_a_callers_page_reads_only_its_rows_by_index_however_many_runs_others_have(
        pg_store: PgStore) -> None:
    with PostgresLedger.open(pg_store.dsn, "one", FixedClock(T0), [].append) as ledger:
        mine = [reserved(ledger, "t", CALLERS[0]) for _ in range(30)]
        template = Jsonb(LEDGER.encode(Reserve(run="0" * 32, tool="t", time=T0, calls=1,
                                               caller=CALLERS[1])))
        # Twenty thousand runs of another caller, newer than all of ours.
        pg_store.execute(
            "INSERT INTO staal_runs (run, tool, reserved_ms, seq, event, owner, fence, caller) "
            "SELECT md5(i::text), 't', %(t)s, nextval('staal_event_seq'), "
            "jsonb_set(%(event)s, '{run}', to_jsonb(md5(i::text))), 'one', %(fence)s, %(caller)s "
            "FROM generate_series(1, 20000) AS i",
            {"t": T0, "event": template, "fence": ledger.fence, "caller": CALLERS[1]})
        pg_store.execute("ANALYZE staal_runs")
        first = ledger.caller_runs(CallerRuns(CALLERS[0], True, 11))
        assert [e.run for e in first] == mine[::-1][:11]
        after = f"{first[-1].reserved_ms}:{first[-1].run}"
        for which in (CallerRuns(CALLERS[0], True, 11), CallerRuns(CALLERS[0], False, 11, after)):
            scans = scans_of_runs(pg_store, which)
            # The page's rows are read by index, and no more of them than the
            # page holds (none filtered out): not the other caller's 20000.
            assert [s["Node Type"] for s in scans] == ["Index Scan"]
            assert scans[0]["Actual Rows"] + scans[0].get("Rows Removed by Filter", 0) <= 11
        # Without a cursor only the caller's index finds its page quickly.
        assert scans_of_runs(pg_store, CallerRuns(CALLERS[0], True, 11))[0]["Index Name"] == \
            "staal_runs_caller_seq"


def test_a_store_an_older_schema_wrote_gains_the_callers_index_and_pages_its_runs(
        pg_store: PgStore) -> None:
    pg_store.at_version(5)
    pg_store.execute("INSERT INTO staal_instances VALUES ('old', 100, 0, NULL, 'old')")
    runs = [c * 32 for c in "123456"]
    for seq, run in enumerate(runs, start=1):
        caller = CALLERS[seq % 2]
        reserve = Reserve(run=run, tool="t", time=T0 + seq, calls=1, caller=caller)
        pg_store.execute("INSERT INTO staal_runs (run, tool, reserved_ms, seq, event, owner, "
                         "fence, caller) VALUES (%s, 't', %s, %s, %s, 'old', 100, %s)",
                         (run, T0 + seq, seq, Jsonb(LEDGER.encode(reserve)), caller))
    with PostgresLedger.open(pg_store.dsn, "new", FixedClock(T0), [].append) as ledger:
        assert pg_store.rows("SELECT version FROM staal_schema") == [(SCHEMA_VERSION,)]
        assert pg_store.rows("SELECT indexdef FROM pg_indexes WHERE indexname = "
                             "'staal_runs_caller_seq'")[0][0].endswith("(caller, seq)")
        page = ledger.caller_runs(CallerRuns(CALLERS[1], True, 2))
        assert [e.run for e in page] == [runs[4], runs[2]]
        rest = ledger.caller_runs(CallerRuns(CALLERS[1], True, 2,
                                             f"{page[-1].reserved_ms}:{page[-1].run}"))
        assert [e.run for e in rest] == [runs[0]]
