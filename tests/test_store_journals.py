"""Run journals as rows of the PostgreSQL store (issue 15): each record a
worker journals is committed, fenced by its instance's token, before the
worker goes on; the instance's journal file is a copy restored from the
rows; a run taken over by another instance has its next record refused,
and nothing after it is performed."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from staal.appendlog import read_log
from staal.clock import FixedClock
from staal.errors import RecordError
from staal.journal_records import JOURNAL, End, Header, Intent, OutcomeRecord
from staal.supervisor.files import RunFiles
from staal.supervisor.journal_rows import JournalRows
from staal.supervisor.ledger_postgres import Fenced, PostgresLedger
from tests.pg_store import PgStore
from tests.recorder import WAIT
from tests.serving import start, tool, write_manifest
from tests.test_recovery import interrupt, lookup_manifest
from tests.test_store_contract import T0
from tests.test_store_serving import STORE, env_for

TWO_READS = """
from staal.caps import HttpGet

def main(get: HttpGet) -> dict:
    first = get.get(BASE + "/v1/orders/o1").status_code
    second = get.get(BASE + "/v1/orders/o2").status_code
    return {"first": first, "second": second}
"""
HEADER = {"v": 1, "type": "header", "run": "a" * 32, "tool": "t", "program": "/p.py",
          "program_sha256": "0" * 64, "config_sha256": "0" * 64, "inputs_sha256": "0" * 64,
          "runtime": "test", "time": T0}


def journal_rows(pg: PgStore, run: str) -> list[Any]:
    """The run's journal rows, decoded, in line order."""
    return [JOURNAL.decode(row[0]) for row in
            pg.rows("SELECT record FROM staal_journal WHERE run = %s ORDER BY line", (run,))]


def the_run(pg: PgStore) -> str:
    ((run,),) = pg.rows("SELECT run FROM staal_runs")
    return run


def test_each_record_of_a_run_on_the_postgresql_store_is_a_row_and_the_local_file_its_copy(
        tmp_path: Path, service: Any, pg_store: PgStore) -> None:
    manifest = lookup_manifest(tmp_path, service, store=STORE)
    with start(manifest, env_for(pg_store)) as served:
        answer = served.call("lookup", {"order": "o1"})
        assert served.close() == 0
    assert answer["structuredContent"] == {"result": {"status": 200}}
    run = the_run(pg_store)
    rows = journal_rows(pg_store, run)
    assert [type(r) for r in rows] == [Header, Intent, OutcomeRecord, End]
    assert rows[-1].outcome == "done"
    copy = read_log(RunFiles(tmp_path / "journals", "lookup", run).journal,
                    decode=JOURNAL.decode).records
    assert list(copy) == rows
    assert pg_store.server_dsn not in json.dumps([r.__repr__() for r in rows])


def test_a_run_whose_journal_copy_was_lost_is_resumed_at_start_from_its_rows(
        tmp_path: Path, service: Any, pg_store: PgStore) -> None:
    manifest = lookup_manifest(tmp_path, service, store=STORE)
    interrupt(manifest, service, env_for(pg_store))
    run = the_run(pg_store)
    assert [type(r) for r in journal_rows(pg_store, run)] == [Header, Intent]
    copy = RunFiles(tmp_path / "journals", "lookup", run).journal
    copy.unlink()  # the instance's disk lost it; the rows are the journal
    with start(manifest, env_for(pg_store)) as again:
        assert [e["rule"] for e in again.events("recovered")] == ["resuming", "resumed"]
        status = again.call("staal_run_status", {"run": run})
        assert status["structuredContent"]["status"] == "done"
        assert again.close() == 0
    rows = journal_rows(pg_store, run)
    assert [type(r) for r in rows[:2]] == [Header, Intent]
    assert [type(r) for r in rows[-2:]] == [OutcomeRecord, End] and rows[-1].outcome == "done"
    assert pg_store.rows("SELECT kind FROM staal_ends WHERE run = %s", (run,)) == [("settle",)]


def test_a_run_taken_over_by_another_instance_has_its_next_record_refused_and_does_nothing_more(
        tmp_path: Path, service: Any, pg_store: PgStore) -> None:
    (tmp_path / "reads.py").write_text(f"BASE = {service.base!r}\n" + TWO_READS)
    for order in ("o1", "o2"):
        service.route("GET", f"/v1/orders/{order}", 200, {"id": order})
    grants = {"get": {"cap": "net.http.get", "only": [service.base + "/v1/orders/*"]}}
    manifest = write_manifest(tmp_path, [tool("reads", "reads.py", grants)], store=STORE)
    hold = service.hold("/v1/orders/o1")
    with start(manifest, env_for(pg_store)) as served:
        served.initialize()
        served.send({"jsonrpc": "2.0", "id": 7, "method": "tools/call",
                     "params": {"name": "reads", "arguments": {}}})
        assert hold.arrived.wait(WAIT), served.stderr()
        run = the_run(pg_store)
        # Another instance takes the run over while its first read is out.
        pg_store.execute("INSERT INTO staal_instances (instance, fence, started_ms, "
                         "lease_until_ms, version) VALUES ('thief', nextval('staal_fence_seq'), "
                         "0, NULL, 'test')")
        pg_store.execute("UPDATE staal_runs SET owner = 'thief' WHERE run = %s", (run,))
        hold.release.set()
        answer = served.answer(7, timeout=WAIT * 3)["result"]
        stderr = served.stderr()
        assert served.close() == 0
    assert answer["isError"] is True
    assert f"run {run}" in json.dumps(answer)  # the details are the operator's, in the log
    assert [r.path for r in service.seen("GET")] == ["/v1/orders/o1"]  # the second read never went
    assert [type(r) for r in journal_rows(pg_store, run)] == [Header, Intent]
    assert pg_store.rows("SELECT count(*) FROM staal_ends") == [(0,)]
    events = [json.loads(line) for line in stderr.splitlines() if line.startswith("{")]
    refused = [e for e in events if e.get("event") == "journal_refused"]
    assert refused and all(e["run"] == run and e["kind"] == "fenced" for e in refused)
    (cut,) = [e for e in events if e.get("event") == "internal_error" and e.get("run") == run]
    assert "refused" in cut["message"] and "not this instance's" in cut["message"]


def open_rows(pg: PgStore, instance: str) -> tuple[PostgresLedger, JournalRows]:
    ledger = PostgresLedger.open(pg.dsn, instance, FixedClock(T0), lambda text: None)
    return ledger, JournalRows(pg.dsn, ledger.instance, ledger.fence)


def test_appends_are_numbered_in_order_and_refused_once_the_instance_restarted(
        pg_store: PgStore) -> None:
    ledger, rows = open_rows(pg_store, "a")
    run = ledger.reserve_call("t", None, 1, (), None).run
    header = dict(HEADER, run=run)
    assert rows.append(run, header) == 1
    state = rows.read(run)
    assert state is not None and state.header.run == run
    restarted, fresh = open_rows(pg_store, "a")  # a new process, a new fencing token
    with pytest.raises(Fenced) as caught:
        rows.append(run, {"v": 1, "type": "print", "seq": 1, "text": "x", "time": T0})
    assert f"run {run}" in caught.value.message
    assert fresh.append(run, {"v": 1, "type": "print", "seq": 1, "text": "x", "time": T0}) == 2
    assert len(fresh.records(run)) == 2
    for closing in (rows, fresh, ledger, restarted):
        closing.close()


def test_a_record_the_journal_reader_would_refuse_is_not_written(pg_store: PgStore) -> None:
    ledger, rows = open_rows(pg_store, "a")
    run = ledger.reserve_call("t", None, 1, (), None).run
    with pytest.raises(RecordError):
        rows.append(run, dict(HEADER, run=run, time=-1))
    assert rows.records(run) == [] and rows.read(run) is None
    rows.close()
    ledger.close()


def test_another_instances_run_cannot_be_journaled_by_this_one(pg_store: PgStore) -> None:
    owner, _ = open_rows(pg_store, "a")
    other, rows = open_rows(pg_store, "b")
    run = owner.reserve_call("t", None, 1, (), None).run
    with pytest.raises(Fenced):
        rows.append(run, dict(HEADER, run=run))
    assert pg_store.rows("SELECT count(*) FROM staal_journal") == [(0,)]
    rows.close()
    owner.close()
    other.close()
