"""`staal-supervisor forget MANIFEST --run RUN` (issue 24 item 9): a `once`
call whose run failed by a program bug answers that stale failure for the
key's whole `keep`, even after the program is fixed, until an operator
forgets the key; then the next identical call runs the fixed program as a
new run. Real servers on both stores; the refusals change nothing."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from psycopg.types.json import Jsonb

from staal.records.appendlog import read_log
from staal.records.ledger_records import LEDGER, OnceHold, Reserve, Settle
from staal.supervisor.recovery.forget import ForgetRefused, forget_in_store
from staal.supervisor.store.errors import StoreError
from staal.supervisor.store.files import RunFiles
from staal.supervisor.store.ledger import read_ledger
from staal.supervisor.store.postgres.connection import connect
from staal.supervisor.store.postgres.schema import SCHEMA_VERSION, ensure_schema
from tests.docs.test_operators import waiting_manifest
from tests.helpers.pg_store import PgStore
from tests.helpers.recorder import WAIT
from tests.helpers.serving import server_env, start, tool, write_manifest
from tests.processes.test_store_serving import STORE, env_for, runs_in, status_of
from tests.supervisor.recovery.test_at_start import interrupted, lookup_manifest

BUGGY = "def main(n: int) -> dict:\n    return {'half': n / 0}\n"
FIXED = "def main(n: int) -> dict:\n    return {'half': n / 2}\n"
ONCE = {"once": {"by": ["n"]}}  # kept for the default keep: 90 days


def forget(manifest: Path, run: str, env: dict[str, str] | None = None
           ) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "staal.supervisor.app.main", "forget", str(manifest),
                           "--run", run], capture_output=True, text=True, timeout=60,
                          env=env or server_env(), check=False)


def buggy_manifest(tmp_path: Path, **server: Any) -> Path:
    (tmp_path / "half.py").write_text(BUGGY)
    return write_manifest(tmp_path, [tool("half", "half.py", **ONCE)], **server)


def fail_and_fix(manifest: Path, env: dict[str, str], pg: PgStore | None = None
                 ) -> tuple[str, dict[str, Any]]:
    """The buggy run fails, and the same call answers that failure again;
    then the program is fixed (the server started with it, as a deploy
    does). The failed run's id and its answer."""
    with start(manifest, env) as served:
        failed = served.call("half", {"n": 4})
        assert failed["isError"] is True and "ZeroDivisionError" in json.dumps(failed), failed
        assert served.call("half", {"n": 4}) == failed
        assert served.close() == 0
    if pg is None:
        (entry,) = read_ledger(manifest.parent / "journals" / "server.ledger").runs()
        run = entry.run
    else:
        ((run,),) = pg.rows("SELECT run FROM staal_runs")
    (manifest.parent / "half.py").write_text(FIXED)
    return run, failed


def ledger_events(tmp_path: Path) -> list[dict[str, Any]]:
    return list(read_log(tmp_path / "journals" / "server.ledger").records)


def test_on_the_file_store_a_run_failed_by_a_bug_runs_again_once_its_key_is_forgotten(
        tmp_path: Path) -> None:
    manifest = buggy_manifest(tmp_path)
    run, failed = fail_and_fix(manifest, server_env())
    with start(manifest) as served:
        assert served.call("half", {"n": 4}) == failed  # the stale failure, the program fixed
        busy = forget(manifest, run)  # the serving server holds the file ledger
        assert busy.returncode == 2 and "server.lock" in busy.stderr, busy.stderr
        assert "stop it, forget the run, then start it again" in busy.stderr
        assert [e["event"] for e in ledger_events(tmp_path)] == ["reserve", "settle"]
        assert served.call("half", {"n": 4}) == failed
        assert served.close() == 0
    done = forget(manifest, run)
    assert done.returncode == 0, done.stderr
    assert f"run {run} (half, ended failed" in done.stdout and "key is forgotten" in done.stdout
    assert [e["event"] for e in ledger_events(tmp_path)] == ["reserve", "settle", "forget"]
    log = RunFiles(tmp_path / "journals", "half", run).log.read_text()
    assert json.loads(log.splitlines()[-1])["event"] == "once_forgotten"
    report = status_of_file(manifest)
    assert [(f["run"], f["tool"], f["outcome"]) for f in report["forgotten"]] == \
        [(run, "half", "failed")]
    with start(manifest) as served:  # the ledger replayed at start: the key stays forgotten
        fixed = served.call("half", {"n": 4})
        assert fixed == {"content": fixed["content"], "isError": False,
                         "structuredContent": {"result": {"half": 2.0}}}
        old = served.call("staal_run_status", {"run": run})["structuredContent"]
        assert old["status"] == "failed"  # the forgotten run is kept, and answers as it ended
        assert served.close() == 0
    runs = read_ledger(tmp_path / "journals" / "server.ledger").runs()
    assert [(e.run == run, e.outcome) for e in runs] == [(True, "failed"), (False, "done")]
    with start(manifest) as served:  # the new run holds the key now
        assert served.call("half", {"n": 4})["structuredContent"] == {"result": {"half": 2.0}}
        assert served.close() == 0
    assert len(read_ledger(tmp_path / "journals" / "server.ledger").runs()) == 2


def status_of_file(manifest: Path) -> dict[str, Any]:
    done = subprocess.run([sys.executable, "-m", "staal.supervisor.app.main", "status", str(manifest),
                           "--json"], capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    human = subprocess.run([sys.executable, "-m", "staal.supervisor.app.main", "status", str(manifest)],
                           capture_output=True, text=True, timeout=60, check=False)
    assert "forgotten once keys: " in human.stdout
    return json.loads(done.stdout)


def test_on_postgresql_a_forget_while_an_instance_serves_is_seen_by_its_next_call(
        tmp_path: Path, pg_store: PgStore) -> None:
    manifest = buggy_manifest(tmp_path, store=STORE)
    env = env_for(pg_store)
    run, failed = fail_and_fix(manifest, env, pg_store)
    with start(manifest, env) as served:
        assert served.call("half", {"n": 4}) == failed  # the stale failure, the program fixed
        done = forget(manifest, run, env)
        assert done.returncode == 0, done.stderr
        assert "every instance sees it at its next call" in done.stdout
        assert pg_store.server_dsn not in done.stdout + done.stderr
        fixed = served.call("half", {"n": 4})  # the serving instance's next call
        assert fixed.get("structuredContent") == {"result": {"half": 2.0}}, fixed
        assert served.call("half", {"n": 4})["structuredContent"] == fixed["structuredContent"]
        # The serving instance logs the forget it was told of by the store.
        assert [(e["run"], e["tool"]) for e in served.events("once_forgotten")] == [(run, "half")]
        report = status_of(manifest, pg_store)
        assert [(f["run"], f["outcome"]) for f in report["forgotten"]] == [(run, "failed")]
        assert served.close() == 0
    assert [(t, e) for t, _, e in runs_in(pg_store)] == [("half", "settle"), ("half", "settle")]
    assert pg_store.rows("SELECT run FROM staal_forgets") == [(run,)]
    assert pg_store.rows("SELECT entry->>'event' FROM staal_logs WHERE run = %s "
                         "ORDER BY line DESC LIMIT 1", (run,)) == [("once_forgotten",)]
    with start(manifest, env) as served:  # a new instance reads the ledger anew
        assert served.call("half", {"n": 4})["structuredContent"] == {"result": {"half": 2.0}}
        assert served.events("once_forgotten") == []  # logged once, by who saw it happen
        assert served.close() == 0
    assert len(runs_in(pg_store)) == 2


@pytest.mark.parametrize("where", ["file", "postgres"])
def test_forget_of_a_waiting_run_is_refused_naming_its_state_and_writes_nothing(
        tmp_path: Path, service: Any, where: str, request: pytest.FixtureRequest) -> None:
    pg = request.getfixturevalue("pg_store") if where == "postgres" else None
    env = env_for(pg) if pg else server_env()
    manifest = waiting_manifest(tmp_path, service, **({"store": STORE} if pg else {}))
    with start(manifest, env) as served:
        run = served.call("ticket", {"order": "o1"})["structuredContent"]["run"]
        assert served.close() == 0
    before = forgets(tmp_path, pg)
    refused = forget(manifest, run, env)
    assert refused.returncode == 2
    assert f"run {run} is waiting for an operator (op 1 in doubt), not ended" in refused.stderr
    unknown = forget(manifest, "f" * 32, env)
    assert unknown.returncode == 2 and f"run {'f' * 32} is not in the ledger" in unknown.stderr
    malformed = forget(manifest, "order-1", env)
    assert malformed.returncode == 2 and "--run: 'order-1' is not a run id" in malformed.stderr
    assert forgets(tmp_path, pg) == before == []
    assert len(service.seen("POST")) == 1


def forgets(tmp_path: Path, pg: PgStore | None) -> list[Any]:
    """Every forget event the store holds."""
    if pg is not None:
        return pg.rows("SELECT run FROM staal_forgets")
    return [e for e in ledger_events(tmp_path) if e["event"] == "forget"]


def test_on_postgresql_forget_of_a_run_in_progress_is_refused_naming_its_state(
        tmp_path: Path, service: Any, pg_store: PgStore) -> None:
    manifest = lookup_manifest(tmp_path, service, store=STORE)
    data = json.loads(manifest.read_text())
    data["tools"][0]["net"]["timeout_ms"] = 120_000  # the GET waits out the forget, however slow
    manifest.write_text(json.dumps(data))
    env = env_for(pg_store)
    hold = service.hold("/v1/orders/o1")
    with start(manifest, env) as served:
        served.send({"jsonrpc": "2.0", "id": 99, "method": "tools/call",
                     "params": {"name": "lookup", "arguments": {"order": "o1"}}})
        assert hold.arrived.wait(WAIT), served.stderr()
        ((run,),) = pg_store.rows("SELECT run FROM staal_runs")
        refused = forget(manifest, run, env)
        assert refused.returncode == 2
        assert f"run {run} is running, not ended" in refused.stderr, refused.stderr
        hold.release.set()
        assert served.answer(99)["result"]["isError"] is False
        assert served.close() == 0
    assert pg_store.rows("SELECT count(*) FROM staal_forgets") == [(0,)]
    assert pg_store.server_dsn not in refused.stdout + refused.stderr


def test_on_the_file_store_forget_of_an_interrupted_run_is_refused_naming_its_state(
        tmp_path: Path, service: Any) -> None:
    manifest, run = interrupted(tmp_path, service)
    before = (tmp_path / "journals" / "server.ledger").read_bytes()
    refused = forget(manifest, run)
    assert refused.returncode == 2
    assert f"run {run} is interrupted (the server resumes it at its next start), not ended" \
        in refused.stderr
    assert (tmp_path / "journals" / "server.ledger").read_bytes() == before


def test_forget_of_a_run_whose_tool_has_no_once_key_says_there_is_no_key(tmp_path: Path) -> None:
    (tmp_path / "half.py").write_text(FIXED)
    manifest = write_manifest(tmp_path, [tool("half", "half.py")])
    with start(manifest) as served:
        served.call("half", {"n": 4})
        assert served.close() == 0
    (entry,) = read_ledger(tmp_path / "journals" / "server.ledger").runs()
    refused = forget(manifest, entry.run)
    assert refused.returncode == 2
    assert f"run {entry.run} has no once key (its tool half has no `once`)" in refused.stderr
    assert [e["event"] for e in ledger_events(tmp_path)] == ["reserve", "settle"]


# The columns of version 1's run rows (version 5 added the caller and whether it ended).
KEPT_COLUMNS = {"staal_runs": "run, tool, reserved_ms, seq, event, owner, fence"}


def test_an_upgrade_from_schema_version_3_keeps_every_row_and_forget_waits_for_it(
        pg_store: PgStore) -> None:
    pg_store.at_version(3)
    run, hold = "a" * 32, OnceHold(key="b" * 64, args="c" * 64, keep_ms=None)
    reserve = Reserve(run=run, tool="half", time=1, calls=1, once=hold)
    pg_store.execute("INSERT INTO staal_instances VALUES ('i', 1, 0, NULL, 'old')")
    pg_store.execute("INSERT INTO staal_runs VALUES (%s, 'half', 1, 1, %s, 'i', 1)",
                     (run, Jsonb(LEDGER.encode(reserve))))
    pg_store.execute("INSERT INTO staal_ends VALUES (%s, 'settle', 2, 2, %s)",
                     (run, Jsonb(LEDGER.encode(Settle(run=run, time=2, outcome="failed")))))
    pg_store.execute("INSERT INTO staal_once VALUES ('half', %s, %s)", (hold.key, run))
    tables = ("staal_runs", "staal_ends", "staal_once", "staal_instances")
    before = {t: pg_store.rows(f"SELECT * FROM {t}") for t in tables}
    with pytest.raises(ForgetRefused,
                       match=f"schema is version 3; forget needs version {SCHEMA_VERSION}"):
        forget_in_store(pg_store.dsn, run)
    assert before == {t: pg_store.rows(f"SELECT * FROM {t}") for t in tables}
    with connect(pg_store.dsn) as conn, conn.transaction(), conn.cursor() as cur:
        assert ensure_schema(cur) == 3
    assert pg_store.rows("SELECT version FROM staal_schema") == [(SCHEMA_VERSION,)] == [(9,)]
    assert before == {t: pg_store.rows(f"SELECT {KEPT_COLUMNS.get(t, '*')} FROM {t}")
                      for t in tables}
    assert pg_store.rows("SELECT caller, ended FROM staal_runs") == [(None, True)]
    assert forget_in_store(pg_store.dsn, run).forgotten_ms is not None
    assert pg_store.rows("SELECT run FROM staal_forgets") == [(run,)]
    assert pg_store.rows("SELECT count(*) FROM staal_once") == [(0,)]
    pg_store.execute("DELETE FROM staal_runs")  # compaction: the forget goes with its run
    assert pg_store.rows("SELECT count(*) FROM staal_forgets") == [(0,)]


def test_on_postgresql_forget_of_a_run_whose_event_is_damaged_is_refused_naming_it_not_a_traceback(
        pg_store: PgStore) -> None:
    with connect(pg_store.dsn) as conn, conn.transaction(), conn.cursor() as cur:
        ensure_schema(cur)
    run = "a" * 32
    pg_store.execute("INSERT INTO staal_instances VALUES ('i', 1, 0, NULL, 'old')")
    pg_store.execute("INSERT INTO staal_runs VALUES (%s, 'half', 1, 7, %s, 'i', 1)",
                     (run, Jsonb({"event": "reserve", "run": run})))
    with pytest.raises(StoreError, match="the PostgreSQL store's event 7 is damaged: "):
        forget_in_store(pg_store.dsn, run)
    assert pg_store.rows("SELECT count(*) FROM staal_forgets") == [(0,)]
