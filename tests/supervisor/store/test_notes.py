"""Waiting records, run logs and tasks' cancels as rows of the PostgreSQL
store (issue 15, schema versions 3 and 7): a run's waiting record is written
fenced, kept as first written, and removed with the run's end; its log is
rows in order; its cancel is written by any instance, outlives its end and
goes with its run; an upgrade from version 2 keeps every row, and one from
version 6 adds the cancels."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from psycopg.types.json import Jsonb

from staal.records.ledger_records import LEDGER, Reserve
from staal.records.waiting import WaitingRecord
from staal.supervisor.store.files import RunFiles
from staal.supervisor.store.notes import FileNotes, StoreNotes
from staal.supervisor.store.postgres.connection import connect
from staal.supervisor.store.postgres.ledger import Fenced
from staal.supervisor.store.postgres.note_rows import NoteRows
from staal.supervisor.store.postgres.schema import SCHEMA_VERSION, ensure_schema
from tests.docs.test_operators import waiting_manifest
from tests.helpers.pg_store import PgStore
from tests.helpers.recorder import WAIT
from tests.helpers.serving import start
from tests.processes.test_store_serving import STORE, env_for
from tests.supervisor.recovery.test_at_start import lookup_manifest
from tests.supervisor.store.test_journals import HEADER, open_rows
from tests.supervisor.telemetry.test_metrics import metrics_url, scrape, value

RECORD = WaitingRecord(run="0" * 32, tool="t", op=1, message="op 1: in doubt", time=1,
                       instance="a", resolve="staal-supervisor resolve MANIFEST --run R --op 1")


def waiting_rows(pg: PgStore) -> list[tuple[str, str, dict]]:
    return pg.rows("SELECT run, instance, record FROM staal_waiting ORDER BY run")


def test_a_runs_waiting_record_is_one_row_kept_as_first_written(
        pg_store: PgStore, tmp_path: Path) -> None:
    ledger, rows = open_rows(pg_store, "a")
    run = ledger.reserve_call("t", None, 1, (), None).run
    notes = StoreNotes(NoteRows(rows))
    files = RunFiles(tmp_path, "t", run)
    first = replace(RECORD, run=run, instance=rows.instance)
    assert notes.wait(files, first) == files.waiting  # the notify command's copy
    assert notes.wait(files, replace(first, op=2, message="op 2: in doubt")) is None
    assert waiting_rows(pg_store) == [(run, rows.instance, first.to_json())]
    assert notes.waiting(files) == first and notes.all_waiting() == {run: first}
    assert "journal" not in first.to_json() and "--journal" not in notes.resolve_hint(files, 1)
    rows.close()
    ledger.close()


def test_an_instance_fenced_off_a_run_cannot_write_its_waiting_record(
        pg_store: PgStore, tmp_path: Path) -> None:
    ledger, rows = open_rows(pg_store, "a")
    run = ledger.reserve_call("t", None, 1, (), None).run
    restarted, fresh = open_rows(pg_store, "a")  # a new process, a new fencing token
    first = replace(RECORD, run=run, instance=fresh.instance)
    assert NoteRows(fresh).wait(run, first)
    files = RunFiles(tmp_path, "t", run)
    with pytest.raises(Fenced) as caught:
        StoreNotes(NoteRows(rows)).wait(files, replace(first, op=3))
    assert f"run {run}" in caught.value.message
    assert waiting_rows(pg_store) == [(run, fresh.instance, first.to_json())]  # unchanged
    assert not files.waiting.exists()  # and no copy to notify anyone with
    for closing in (rows, fresh, ledger, restarted):
        closing.close()


def test_a_runs_log_is_rows_in_order_and_its_end_removes_its_record_and_arguments(
        pg_store: PgStore, tmp_path: Path) -> None:
    ledger, rows = open_rows(pg_store, "a")
    run = ledger.reserve_call("t", None, 1, (), None).run
    rows.keep_inputs(run, {"n": 1})
    notes = StoreNotes(NoteRows(rows))
    files = RunFiles(tmp_path, "t", run)
    notes.wait(files, replace(RECORD, run=run))
    notes.log(files, b'{"event":"print","text":"a"}\n{"event":"ended","outcome":"stopped"}\n')
    notes.end(files, b'{"event":"ended","outcome":"done"}\n')
    assert notes.logged(files) == [{"event": "print", "text": "a"},
                                   {"event": "ended", "outcome": "stopped"},
                                   {"event": "ended", "outcome": "done"}]
    assert pg_store.rows("SELECT line FROM staal_logs ORDER BY line") == [(1,), (2,), (3,)]
    assert waiting_rows(pg_store) == [] and not files.waiting.exists()
    assert pg_store.rows("SELECT count(*) FROM staal_inputs") == [(0,)]
    rows.close()
    ledger.close()


def test_an_upgrade_from_schema_version_2_keeps_every_row_and_adds_the_waiting_and_log_tables(
        pg_store: PgStore) -> None:
    pg_store.at_version(2)
    pg_store.execute("INSERT INTO staal_instances VALUES ('a', 1, 0, NULL, 'old')")
    run = "a" * 32
    reserve = Jsonb(LEDGER.encode(Reserve(run=run, tool="t", time=0, calls=1)))
    pg_store.execute("INSERT INTO staal_runs VALUES (%s, 't', 0, 1, %s, 'a', 1)", (run, reserve))
    pg_store.execute("INSERT INTO staal_journal VALUES (%s, 1, %s)",
                     (run, Jsonb(dict(HEADER, run=run))))
    before = pg_store.rows("SELECT run, line, record FROM staal_journal")
    with connect(pg_store.dsn) as conn, conn.transaction(), conn.cursor() as cur:
        assert ensure_schema(cur) == 2
    assert pg_store.rows("SELECT version FROM staal_schema") == [(SCHEMA_VERSION,)] == [(9,)]
    assert pg_store.rows("SELECT run, line, record FROM staal_journal") == before
    assert pg_store.rows("SELECT run, owner FROM staal_runs") == [(run, "a")]
    pg_store.execute("INSERT INTO staal_waiting VALUES (%s, 'a', '{}')", (run,))
    pg_store.execute("INSERT INTO staal_logs VALUES (%s, 1, '{}')", (run,))
    pg_store.execute("DELETE FROM staal_runs")  # compaction: they go with their run
    assert pg_store.rows("SELECT count(*) FROM staal_waiting") == [(0,)]
    assert pg_store.rows("SELECT count(*) FROM staal_logs") == [(0,)]


def test_a_tasks_cancel_is_written_by_any_instance_read_by_the_owner_and_goes_with_its_run(
        pg_store: PgStore, tmp_path: Path) -> None:
    pg_store.at_version(6)
    owner_ledger, owner_rows = open_rows(pg_store, "a")  # upgrades the schema to 7
    other_ledger, other_rows = open_rows(pg_store, "b")
    run = owner_ledger.reserve_call("t", None, 1, (), None).run
    kept = owner_ledger.reserve_call("t", None, 1, (), None).run
    owner, other = StoreNotes(NoteRows(owner_rows)), StoreNotes(NoteRows(other_rows))
    files = RunFiles(tmp_path, "t", run)
    assert not owner.cancelled(files) and owner.cancelled_among([run, kept]) == frozenset()
    other.cancel(files)  # not fenced: the instance the client asked is not the run's owner
    other.cancel(files)  # again: kept as first written
    assert owner.cancelled(files) and owner.cancelled_among([run, kept]) == {run}
    owner.end(files, b'{"event":"ended","outcome":"failed"}\n')
    assert owner.cancelled(files)  # a released run's task still answers cancelled
    assert pg_store.rows("SELECT run FROM staal_cancels") == [(run,)]
    pg_store.execute("DELETE FROM staal_runs WHERE run = %s", (run,))  # compaction
    assert pg_store.rows("SELECT count(*) FROM staal_cancels") == [(0,)]
    for closing in (owner_rows, other_rows, owner_ledger, other_ledger):
        closing.close()


def test_a_tasks_cancel_on_the_file_store_is_a_file_beside_its_journal_found_among_runs(
        tmp_path: Path) -> None:
    notes = FileNotes(tmp_path)
    run, kept = "1" * 32, "2" * 32
    files = RunFiles(tmp_path, "t", run)
    assert not notes.cancelled(files) and notes.cancelled_among([run, kept]) == frozenset()
    notes.cancel(files)
    notes.cancel(files)
    assert notes.cancelled(files) and files.cancel.parent == files.journal.parent
    assert notes.cancelled_among([run, kept]) == {run}
    assert json.loads(files.cancel.read_bytes())["run"] == run


def test_a_waiting_record_an_older_version_kept_as_a_file_becomes_the_runs_row_as_written(
        pg_store: PgStore, tmp_path: Path) -> None:
    ledger, rows = open_rows(pg_store, "a")
    run, answered = (ledger.reserve_call("t", None, 1, (), None).run for _ in range(2))
    notes = StoreNotes(NoteRows(rows))
    files, copy = RunFiles(tmp_path, "t", run), RunFiles(tmp_path, "t", answered)
    older = FileNotes(tmp_path).waiting_record("t", files, 2, "op 2: in doubt")
    FileNotes(tmp_path).wait(files, older)
    # A copy this version wrote, whose row an operator's answer removed since.
    FileNotes(tmp_path).wait(copy, replace(RECORD, run=answered, instance=rows.instance))
    notes.adopt([files, copy])
    notes.adopt([files, copy])  # at every start: kept as first written
    ((adopted,),) = pg_store.rows("SELECT record FROM staal_waiting")
    assert (adopted["run"], adopted["op"], adopted["time"]) == (run, 2, older.time)
    assert "journal" not in adopted and str(tmp_path) not in json.dumps(adopted)
    assert adopted["resolve"].startswith(f"staal-supervisor resolve MANIFEST --run {run} --op 2")
    # The notify copy says the same.
    assert FileNotes(tmp_path).waiting(files) == WaitingRecord.from_json(adopted)
    assert notes.waiting(copy) is None
    rows.close()
    ledger.close()


def test_another_instances_waiting_run_is_counted_in_this_ones_metrics(
        pg_store: PgStore, tmp_path: Path, service: Any) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    with start(waiting_manifest(tmp_path / "a", service, store=STORE), env_for(pg_store)) as a:
        run = a.call("ticket", {"order": "o1"})["structuredContent"]["run"]
        assert a.close() == 0
    manifest = waiting_manifest(tmp_path / "b", service, store=STORE,
                                metrics={"listen": "127.0.0.1:0"})
    with start(manifest, env_for(pg_store)) as b:
        samples = scrape(metrics_url(b))
        assert b.close() == 0
    assert value(samples, "staal_runs_waiting", tool="ticket") == 1
    ((owner,),) = pg_store.rows("SELECT owner FROM staal_runs WHERE run = %s", (run,))
    assert owner.endswith(str(tmp_path / "a" / "journals"))  # still a's: b only counted it
    assert not (tmp_path / "b" / "journals" / "waiting").exists()  # b holds no copy of it


def test_a_run_settled_from_its_end_at_the_next_start_leaves_no_kept_arguments_row(
        tmp_path: Path, service: Any, pg_store: PgStore) -> None:
    """The server dies after the run's end is journaled, before its settle:
    recovery settles it from its end as a run's end is, its kept arguments'
    row gone with it and its log saying how it ended."""
    manifest = lookup_manifest(tmp_path, service, store=STORE)
    dying = start(manifest, {**env_for(pg_store), "STAAL_TEST_KILL_POINTS": "1",
                             "STAAL_KILL_AT": "supervisor:ended"})
    with dying:
        dying.send({"jsonrpc": "2.0", "id": 9, "method": "tools/call",
                    "params": {"name": "lookup", "arguments": {"order": "o1"}}})
        assert dying.process.wait(timeout=WAIT) == -9
    ((run,),) = pg_store.rows("SELECT run FROM staal_runs")
    assert pg_store.rows("SELECT count(*) FROM staal_inputs") == [(1,)]
    assert pg_store.rows("SELECT count(*) FROM staal_ends") == [(0,)]
    with start(manifest, env_for(pg_store)) as again:
        assert [e["rule"] for e in again.events("recovered")] == ["settled from its end"]
        assert again.close() == 0
    assert pg_store.rows("SELECT kind FROM staal_ends WHERE run = %s", (run,)) == [("settle",)]
    assert pg_store.rows("SELECT count(*) FROM staal_inputs") == [(0,)]
    assert not RunFiles(tmp_path / "journals", "lookup", run).inputs.exists()
    (ended,) = [entry for (entry,) in pg_store.rows(
        "SELECT entry FROM staal_logs WHERE run = %s ORDER BY line", (run,))
        if entry["event"] == "ended"]
    assert ended["outcome"] == "done" and ended["recovered"] == "settled from its end"
    assert len(service.seen("GET")) == 1  # the read is not made again
