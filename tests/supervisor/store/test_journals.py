"""Run journals as rows of the PostgreSQL store (issue 15): each record a
worker journals is committed, fenced by its instance's token, before the
worker goes on; the instance's journal file is a copy restored from the
rows; a run taken over by another instance has its next record refused,
and nothing after it is performed."""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import httpx
import psutil
import pytest

from staal.errors import RecordError
from staal.journal.records import JOURNAL, End, Header, Intent, OutcomeRecord
from staal.records.appendlog import read_log
from staal.runtime.clock import FixedClock
from staal.supervisor.recovery.lease import LeaseTiming
from staal.supervisor.store.files import RunFiles
from staal.supervisor.store.postgres.journal_rows import JournalRows
from staal.supervisor.store.postgres.ledger import Fenced, PostgresLedger
from tests.docs.test_operators import POST, waiting_manifest
from tests.helpers.http_servers import HttpServer, started_together
from tests.helpers.pg_store import CommitCutter, PgStore
from tests.helpers.recorder import WAIT
from tests.helpers.servers import Site
from tests.helpers.serving import start, tool, write_manifest
from tests.processes.test_store_serving import ENV, STORE, env_for, settled_once_at_next_start, status_of
from tests.supervisor.recovery.test_at_start import interrupt, lookup_manifest
from tests.supervisor.store.test_contract import T0

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


def test_an_append_whose_answer_was_lost_is_found_on_the_retry_and_never_written_twice(
        pg_store: PgStore) -> None:
    ledger, _ = open_rows(pg_store, "a")
    run = ledger.reserve_call("t", None, 1, (), None).run
    with CommitCutter(pg_store) as proxy:
        rows = JournalRows(proxy.dsn, ledger.instance, ledger.fence)
        proxy.cut_next_commit(b"INSERT INTO staal_journal")  # one statement, committed
        assert rows.append(run, dict(HEADER, run=run)) == 1
        assert proxy.cut.is_set()
        assert rows.append(run, {"v": 1, "type": "print", "seq": 1, "text": "x",
                                 "time": T0}) == 2
        rows.close()
    assert [r.TYPE for r in journal_rows(pg_store, run)] == ["header", "print"]
    ledger.close()


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


def test_a_takeover_leaves_a_run_this_process_still_runs_with_its_taker_until_let_go(
        pg_store: PgStore) -> None:
    """The lease model's finding (docs/lease-model.md): `a` paused, `b` took
    its run and died; `a`, awake, must not take the run back while its own
    call still holds it, or that call would append behind `b`'s records and
    perform an op in doubt again. Left with `b`, the call's append is
    fenced; once the call let it go, the run is taken as any other."""
    a, a_rows = open_rows(pg_store, "a")
    b, b_rows = open_rows(pg_store, "b")
    run = a.reserve_call("t", None, 1, (), None).run
    assert a_rows.append(run, dict(HEADER, run=run)) == 1
    pg_store.execute("UPDATE staal_runs SET owner = 'b' WHERE run = %s", (run,))  # b took it
    assert b_rows.append(run, {"v": 1, "type": "print", "seq": 1, "text": "b's", "time": T0}) == 2
    pg_store.execute("UPDATE staal_instances SET lease_until_ms = 0 WHERE instance = 'b'")
    now = T0 + 1
    assert a_rows.take_over(now, held={run}) == []
    assert instance_of(pg_store, run) == "b"
    with pytest.raises(Fenced):  # the call that still holds it writes nothing more
        a_rows.append(run, {"v": 1, "type": "print", "seq": 2, "text": "a's", "time": T0})
    assert a_rows.take_over(now) == [(run, "t", "b")]  # let go: taken
    assert instance_of(pg_store, run) == "a" and len(a_rows.records(run)) == 2
    for closing in (a_rows, b_rows, a, b):
        closing.close()


LOOKUP = """
from staal.caps import HttpGet

def main(order: str, get: HttpGet) -> dict:
    return {"status": get.get(BASE + "/v1/orders/" + order).status_code}
"""
# The takeover tests' instances hold a short lease (`lease_s` 6 instead of
# 15, renewed every 2 s, as tests/deployment/test_fleet_takeover.py's), so a
# dead or paused instance's run is taken over sooner. An instance's lease
# runs out a lease after its last renewal; another notices at its next
# renewal, a third of a lease later at most; then it resumes (a bound on the
# waits, never a timing asserted).
LEASE = LeaseTiming(6000)
LEASED_STORE = {"postgres": {"dsn": {"env": ENV}, "lease_s": LEASE.lease_ms / 1000}}
TAKEOVER_BOUND_S = LEASE.takeover_bound_s + WAIT * 3


def lookup_site(root: Path, program: Path, service: Any) -> Site:
    """An instance's site: its own journal directory, the fleet's one program."""
    root.mkdir()
    site = Site(root)
    grants = {"get": {"cap": "net.http.get", "only": [service.base + "/v1/orders/*"]}}
    site.write([{"name": "lookup", "program": str(program), "grants": grants}], store=LEASED_STORE)
    return site


def family_of(server: HttpServer) -> list[psutil.Process]:
    """The server, its zygote and its workers."""
    return [psutil.Process(server.process.pid),
            *psutil.Process(server.process.pid).children(recursive=True)]


def lookup_program(tmp_path: Path, service: Any) -> Path:
    """The fleet's one lookup program (every instance names the same file),
    its read held by the service until the test lets it go."""
    service.route("GET", "/v1/orders/o1", 200, {"id": "o1"})
    program = tmp_path / "lookup.py"
    program.write_text(f"BASE = {service.base!r}\n" + LOOKUP)
    return program


def kill_family(server: HttpServer) -> None:
    """SIGKILL the server, its zygote and its workers, and wait until they are gone."""
    family = family_of(server)
    for process in family:
        # A worker dies with its zygote (its parent-death signal) and may be
        # gone before its own turn: it needs no signal then.
        with contextlib.suppress(psutil.NoSuchProcess):
            process.kill()
    psutil.wait_procs(family, timeout=WAIT)
    server.process.wait(timeout=WAIT)


def test_a_dead_instances_unfinished_run_is_taken_over_and_resumed_from_its_rows_by_another(
        tmp_path: Path, service: Any, pg_store: PgStore) -> None:
    program = lookup_program(tmp_path, service)
    hold = service.hold("/v1/orders/o1")
    env = {ENV: pg_store.dsn}
    with started_together(HttpServer(lookup_site(tmp_path / "a", program, service), env),
                          HttpServer(lookup_site(tmp_path / "b", program, service), env)) as (a, b):
        def call_a() -> None:
            with contextlib.suppress(httpx.HTTPError):  # a dies before it answers
                a.modern("tools/call", {"name": "lookup", "arguments": {"order": "o1"}})

        calling = threading.Thread(target=call_a, daemon=True)
        calling.start()
        assert hold.arrived.wait(WAIT), a.stderr.text
        run = the_run(pg_store)
        kill_family(a)
        hold.release.set()
        with service.lock:
            del service.holds["/v1/orders/o1"]
        taken = b.stderr.wait_event("taken_over", timeout=TAKEOVER_BOUND_S, run=run)
        b.stderr.wait_event("recovered", timeout=WAIT * 3, run=run, rule="resumed")
        status = b.modern("tools/call", {"name": "staal_run_status", "arguments": {"run": run}})
    assert taken["instance"] != instance_of(pg_store, run)
    assert status.json()["result"]["structuredContent"]["status"] == "done"
    assert pg_store.rows("SELECT kind FROM staal_ends WHERE run = %s", (run,)) == [("settle",)]
    rows = journal_rows(pg_store, run)
    assert isinstance(rows[-1], End) and rows[-1].outcome == "done"
    assert len(service.seen("GET", "/v1/orders/o1")) == 2  # a read is sent again on resume
    assert pg_store.rows("SELECT count(*) FROM staal_inputs") == [(0,)]


def instance_of(pg: PgStore, run: str) -> str:
    ((owner,),) = pg.rows("SELECT owner FROM staal_runs WHERE run = %s", (run,))
    return owner


def pause_family(server: HttpServer) -> None:
    """SIGSTOP the server, its zygote and its workers. The family is listed
    again until a listing finds none not yet stopped: a worker the zygote
    forked after a listing, before the zygote itself was stopped, would
    otherwise run on."""
    stopped: set[int] = set()
    while family := [p for p in family_of(server) if p.pid not in stopped]:
        for process in family:
            with contextlib.suppress(psutil.NoSuchProcess):  # gone: nothing to stop
                process.suspend()
            stopped.add(process.pid)


def wake_family(server: HttpServer) -> None:
    """SIGCONT the workers and the zygote first, the server last. Woken
    first, the server finds every worker silent past its heartbeat timeout
    (they were stopped with it) and kills their process groups, which would
    kill a worker still stopped before it was woken, and this before its
    turn here (seen on a loaded machine as NoSuchProcess from SIGCONT)."""
    for process in reversed(family_of(server)):
        # One the awake server killed meanwhile (a second wake) needs no signal.
        with contextlib.suppress(psutil.NoSuchProcess):
            process.resume()


def test_an_instance_paused_past_its_lease_is_fenced_off_its_taken_run_when_it_wakes(
        tmp_path: Path, service: Any, pg_store: PgStore) -> None:
    program = lookup_program(tmp_path, service)
    hold = service.hold("/v1/orders/o1")
    env = {ENV: pg_store.dsn}
    answers: list[httpx.Response] = []
    with started_together(HttpServer(lookup_site(tmp_path / "a", program, service), env),
                          HttpServer(lookup_site(tmp_path / "b", program, service), env)) as (a, b):
        calling = threading.Thread(target=lambda: answers.append(a.modern(
            "tools/call", {"name": "lookup", "arguments": {"order": "o1"}},
            timeout=TAKEOVER_BOUND_S * 2)), daemon=True)
        calling.start()
        assert hold.arrived.wait(WAIT), a.stderr.text
        run = the_run(pg_store)
        pause_family(a)
        b.stderr.wait_event("taken_over", timeout=TAKEOVER_BOUND_S, run=run)
        # b resumes the run: its read is sent again, and answered at once.
        hold.release.set()
        with service.lock:
            del service.holds["/v1/orders/o1"]
        b.stderr.wait_event("recovered", timeout=WAIT * 3, run=run, rule="resumed")
        wake_family(a)  # a wakes: its worker has the first answer now
        # Its next record is refused (or, if a's supervisor finds the worker
        # silent too long and resumes the run in a new one, that one's is).
        a.stderr.wait_event("internal_error", timeout=TAKEOVER_BOUND_S, run=run)
        calling.join(TAKEOVER_BOUND_S)
    (answer,) = answers
    result = answer.json()["result"]
    assert result["isError"] is True and run in json.dumps(result)
    # One reserve, one settle (b's), and the journal b finished: a wrote nothing after its pause.
    assert pg_store.rows("SELECT owner FROM staal_runs") == [(instance_of(pg_store, run),)]
    assert pg_store.rows("SELECT kind FROM staal_ends WHERE run = %s", (run,)) == [("settle",)]
    rows = journal_rows(pg_store, run)
    assert [type(r) for r in rows].count(End) == 1 and isinstance(rows[-1], End)
    assert [type(r) for r in rows].count(OutcomeRecord) == 1


def ticket_site(root: Path, program: Path, service: Any) -> Site:
    """An instance whose one tool's unkeyed POST is never answered in time:
    its run stops in doubt and waits for an operator."""
    root.mkdir()
    site = Site(root)
    grants = {"post": {"cap": "net.http.post", "only": [service.base + "/v1/tickets"]}}
    site.write([{"name": "ticket", "program": str(program), "grants": grants,
                 "once": {"by": ["order"], "keep": "1h"},
                 "net": {"timeout_ms": 300, "connect_timeout_ms": 1000}}], store=LEASED_STORE)
    return site


def structured(server: HttpServer, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    answer = server.modern("tools/call", {"name": name, "arguments": arguments})
    assert answer.status_code == 200, answer.text
    return answer.json()["result"]


def test_a_waiting_run_is_seen_waiting_from_any_instance_and_still_waits_once_taken_over(
        tmp_path: Path, service: Any, pg_store: PgStore) -> None:
    program = tmp_path / "ticket.py"
    program.write_text(f"BASE = {service.base!r}\n" + POST)
    service.hold("/v1/tickets")
    env = {ENV: pg_store.dsn}
    with started_together(HttpServer(ticket_site(tmp_path / "a", program, service), env),
                          HttpServer(ticket_site(tmp_path / "b", program, service), env)) as (a, b):
        first = structured(a, "ticket", {"order": "o1"})
        run = the_run(pg_store)
        assert run in json.dumps(first) and "may or may not have happened" in json.dumps(first)
        # a's waiting record is a row of the shared store: b answers from it.
        ((writer, record),) = pg_store.rows("SELECT instance, record FROM staal_waiting")
        again = structured(b, "ticket", {"order": "o1"})
        status = structured(b, "staal_run_status", {"run": run})["structuredContent"]
        assert (status["status"], status["op"]) == ("waiting_for_operator", 1)
        kill_family(a)
        b.stderr.wait_event("taken_over", timeout=TAKEOVER_BOUND_S, run=run)
        resumed = b.stderr.wait_event("recovered", timeout=WAIT * 3, run=run, rule="resumed")
        after = structured(b, "staal_run_status", {"run": run})["structuredContent"]
        b_log = b.stderr.text
    assert json.dumps(again) == json.dumps(first)
    assert resumed["outcome"] == "stopped", b_log
    assert after["status"] == "waiting_for_operator"
    assert len(service.seen("POST", "/v1/tickets")) == 1  # never sent again
    assert pg_store.rows("SELECT count(*) FROM staal_ends") == [(0,)]
    assert instance_of(pg_store, run).endswith(str(tmp_path / "b" / "journals"))
    # b's run stopped again: a's record is kept as first written, and b notified no one.
    assert writer.endswith(str(tmp_path / "a" / "journals")) and record["op"] == 1
    assert pg_store.rows("SELECT instance, record FROM staal_waiting") == [(writer, record)]
    assert not RunFiles(tmp_path / "b" / "journals", "ticket", run).waiting.exists()


def supervisor_resolve(manifest: Path, pg: PgStore, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "staal.supervisor.app.main", "resolve", str(manifest),
                           *args], capture_output=True, text=True, timeout=120, check=False,
                          env=env_for(pg))


def test_a_waiting_run_is_resolved_in_the_store_from_another_machine_and_settled_by_its_owner(
        tmp_path: Path, service: Any, pg_store: PgStore) -> None:
    owner = tmp_path / "owner"
    owner.mkdir()
    manifest = waiting_manifest(owner, service, store=STORE)
    with start(manifest, env_for(pg_store)) as served:
        run = served.call("ticket", {"order": "o1"})["structuredContent"]["run"]
        assert served.close() == 0
    # Another machine: a copy of the manifest with its own journal directory,
    # nothing of the owner's disk.
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    other = json.loads(manifest.read_text())
    other["server"]["journals"] = str(elsewhere / "journals")
    other["tools"][0]["program"] = str(owner / other["tools"][0]["program"])
    (elsewhere / "manifest.json").write_text(json.dumps(other))
    # Status from there shows the run waiting, with the owner's record and
    # a resolve command that works from any machine.
    (seen,) = status_of(elsewhere / "manifest.json", pg_store)["runs"]
    assert (seen["state"], seen["op"], seen["owner"]) == ("waiting_for_operator", 1,
                                                          seen["recorded_by"])
    assert seen["resolve"].startswith(f"staal-supervisor resolve MANIFEST --run {run} --op 1 ")
    before = pg_store.rows("SELECT count(*) FROM staal_journal WHERE run = %s", (run,))
    wrong = supervisor_resolve(elsewhere / "manifest.json", pg_store, "--run", run, "--op", "2",
                               "--happened", "no")
    assert wrong.returncode != 0 and "op 2 is not an action of this run" in wrong.stderr
    assert pg_store.rows("SELECT count(*) FROM staal_journal WHERE run = %s", (run,)) == before
    answer = json.dumps({"status": 201, "text": "{}"})
    done = supervisor_resolve(elsewhere / "manifest.json", pg_store, "--run", run, "--op", "1",
                              "--happened", "yes", "--result", answer)
    assert done.returncode == 0, done.stderr
    assert "recorded as happened" in done.stdout and pg_store.server_dsn not in done.stdout
    assert not (elsewhere / "journals").exists()
    assert pg_store.rows("SELECT count(*) FROM staal_waiting") == [(0,)]  # answered
    settled_once_at_next_start(manifest, pg_store, run, service)
    # Its log is rows: how it stopped, then how it ended once resumed.
    logged = [entry for (entry,) in pg_store.rows(
        "SELECT entry FROM staal_logs WHERE run = %s ORDER BY line", (run,))]
    assert [e["outcome"] for e in logged if e["event"] == "ended"] == ["stopped", "done"]
    assert not RunFiles(owner / "journals", "ticket", run).log.exists()
