"""Real servers on the PostgreSQL store (issue 15): `staal-supervisor
serve` over stdio and `serve --http` with `server.store` postgres, its once
keys and quotas answered from the database, an interrupted run resumed at
start from its journal and its rows, a waiting run resolved with `staal
resolve`, two HTTP instances on one store sharing one quota and one once
key, and status reading the shared store. The DSN appears nowhere."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from staal.runtime.clock import SYSTEM_CLOCK, FixedClock
from staal.supervisor.store.files import RunFiles
from staal.supervisor.store.postgres.instances import instance_name
from staal.supervisor.store.postgres.ledger import PostgresLedger
from tests.docs.test_operators import waiting_manifest
from tests.helpers.http_servers import HttpServer, started_together
from tests.helpers.pg_store import PgStore
from tests.helpers.recorder import WAIT
from tests.helpers.servers import Site
from tests.helpers.serving import server_env, start, tool, write_manifest
from tests.supervisor.recovery.test_at_start import interrupt, lookup_manifest

ENV = "STAAL_STORE_DSN"
STORE = {"postgres": {"dsn": {"env": ENV}}}
COUNT = """
def main(n: int) -> dict:
    return {"n": n}
"""
ONCE_AND_QUOTA = {"once": {"by": ["n"], "keep": "1h"}, "quota": {"window": "1h", "calls": 2}}


def env_for(pg: PgStore) -> dict[str, str]:
    return server_env(**{ENV: pg.dsn})


def runs_in(pg: PgStore) -> list[tuple[str, str, str | None]]:
    """Every run in the store: (tool, owner, how it ended), in ledger order."""
    return pg.rows("SELECT r.tool, r.owner, e.kind FROM staal_runs r LEFT JOIN staal_ends e "
                   "USING (run) ORDER BY r.seq")


def status_of(manifest: Path, pg: PgStore) -> dict[str, Any]:
    done = subprocess.run([sys.executable, "-m", "staal.supervisor.app.main", "status", str(manifest),
                           "--json"], capture_output=True, text=True, timeout=60, check=False,
                          env=env_for(pg))
    assert done.returncode == 0, done.stderr
    assert pg.server_dsn not in done.stdout + done.stderr
    return json.loads(done.stdout)


def test_a_server_on_the_postgresql_store_answers_once_keys_and_quotas_from_the_database(
        tmp_path: Path, pg_store: PgStore) -> None:
    (tmp_path / "count.py").write_text(COUNT)
    manifest = write_manifest(tmp_path, [tool("count", "count.py", **ONCE_AND_QUOTA)],
                              store=STORE)
    with start(manifest, env_for(pg_store)) as served:
        first = served.call("count", {"n": 1})["structuredContent"]
        again = served.call("count", {"n": 1})["structuredContent"]
        second = served.call("count", {"n": 2})["structuredContent"]
        refused = served.call("count", {"n": 3})
        stderr = served.stderr()
        assert served.close() == 0
    assert first == again == {"result": {"n": 1}}
    assert second == {"result": {"n": 2}}
    assert refused["isError"] is True and "quota" in json.dumps(refused)
    assert [(t, e) for t, _, e in runs_in(pg_store)] == [("count", "settle"), ("count", "settle")]
    assert not (tmp_path / "journals" / "server.ledger").exists()
    assert pg_store.server_dsn not in stderr and f"${ENV}" in stderr
    report = status_of(manifest, pg_store)
    assert report["server"]["store"] == f"postgres (the DSN in ${ENV})"
    (quota,) = report["quotas"]
    assert (quota["calls"], quota["calls_limit"]) == (2, 2)


def test_a_server_without_the_dsn_in_its_environment_refuses_to_start_naming_the_variable(
        tmp_path: Path, pg_store: PgStore) -> None:
    (tmp_path / "count.py").write_text(COUNT)
    manifest = write_manifest(tmp_path, [tool("count", "count.py")], store=STORE)
    done = subprocess.run([sys.executable, "-m", "staal.supervisor.app.main", "serve", str(manifest)],
                          input=b"", capture_output=True, timeout=120, env=server_env(),
                          cwd=tmp_path, check=False)
    assert done.returncode == 2
    assert f"${ENV}".encode() in done.stderr and b"not set" in done.stderr
    assert pg_store.rows("SELECT count(*) FROM information_schema.tables WHERE table_schema = %s",
                         (pg_store.schema,)) == [(0,)]


def test_an_interrupted_run_is_resumed_at_start_from_its_journal_and_its_rows(
        tmp_path: Path, service: Any, pg_store: PgStore) -> None:
    manifest = lookup_manifest(tmp_path, service, store=STORE)
    interrupt(manifest, service, env_for(pg_store))
    ((run, ended),) = pg_store.rows("SELECT r.run, e.kind FROM staal_runs r LEFT JOIN "
                                    "staal_ends e USING (run)")
    assert ended is None
    with start(manifest, env_for(pg_store)) as again:
        assert [e["rule"] for e in again.events("recovered")] == ["resuming", "resumed"]
        status = again.call("staal_run_status", {"run": run})
        assert status["structuredContent"]["status"] == "done"
        assert again.close() == 0
    assert pg_store.rows("SELECT kind, event->>'outcome' FROM staal_ends WHERE run = %s",
                         (run,)) == [("settle", "done")]
    assert not RunFiles(tmp_path / "journals", "lookup", run).inputs.exists()


def test_a_waiting_run_resolved_with_staal_resolve_is_settled_in_the_store_at_the_next_start(
        tmp_path: Path, service: Any, pg_store: PgStore) -> None:
    manifest = waiting_manifest(tmp_path, service, store=STORE)
    with start(manifest, env_for(pg_store)) as served:
        run = served.call("ticket", {"order": "o1"})["structuredContent"]["run"]
        assert served.close() == 0
    assert status_of(manifest, pg_store)["runs"][0]["state"] == "waiting_for_operator"
    files = RunFiles(tmp_path / "journals", "ticket", run)
    answer = json.dumps({"status": 201, "text": "{}"})
    resolved = subprocess.run([sys.executable, "-m", "staal.worker.commands.cli", "resolve", "--journal",
                               str(files.journal), "--op", "1", "--happened", "yes", "--result",
                               answer], capture_output=True, text=True, timeout=60, check=False)
    assert resolved.returncode == 0, resolved.stderr
    settled_once_at_next_start(manifest, pg_store, run, service)


def settled_once_at_next_start(manifest: Path, pg: PgStore, run: str, service: Any) -> None:
    """The resolved run, resumed at the server's next start, is done and
    settled once, its action (a POST) not sent again."""
    with start(manifest, env_for(pg)) as served:
        status = served.call("staal_run_status", {"run": run})
        assert status["structuredContent"]["status"] == "done"
        assert served.close() == 0
    assert pg.rows("SELECT kind FROM staal_ends WHERE run = %s", (run,)) == [("settle",)]
    assert len(service.seen("POST")) == 1


def http_site(root: Path) -> Site:
    root.mkdir()
    site = Site(root)
    site.program("count.py", COUNT)
    site.write([{"name": "count", "program": "count.py", **ONCE_AND_QUOTA}], store=STORE)
    return site


def call(server: HttpServer, n: int) -> dict[str, Any]:
    answer = server.modern("tools/call", {"name": "count", "arguments": {"n": n}})
    assert answer.status_code == 200, answer.text
    return answer.json()["result"]


def test_two_http_instances_on_one_store_share_one_quota_and_one_once_key(
        tmp_path: Path, pg_store: PgStore) -> None:
    env = {ENV: pg_store.dsn}
    with started_together(HttpServer(http_site(tmp_path / "a"), env),
                          HttpServer(http_site(tmp_path / "b"), env)) as (a, b):
        first = call(a, 1)
        assert first["structuredContent"] == {"result": {"n": 1}}
        # b finds a's run and does not run the call again: it answers from
        # the end record of a's journal, which is rows in the shared store.
        again = call(b, 1)
        assert again == first
        assert len(pg_store.rows("SELECT run FROM staal_runs")) == 1
        assert call(b, 2)["structuredContent"] == {"result": {"n": 2}}
        refused = call(a, 3)
        assert refused["isError"] is True and "quota" in json.dumps(refused)
        text = a.stderr.text + b.stderr.text
    owners = [owner for _, owner, _ in runs_in(pg_store)]
    assert len(owners) == 2 and owners[0] != owners[1]
    assert all(kind == "settle" for _, _, kind in runs_in(pg_store))
    assert pg_store.server_dsn not in text


def test_status_on_a_shared_store_shows_the_instances_and_who_owns_each_unfinished_run(
        tmp_path: Path, pg_store: PgStore) -> None:
    (tmp_path / "count.py").write_text(COUNT)
    manifest = write_manifest(tmp_path, [tool("count", "count.py")], store=STORE)
    here = instance_name(tmp_path / "journals")
    with PostgresLedger.open(pg_store.dsn, here, SYSTEM_CLOCK) as mine, \
            PostgresLedger.open(pg_store.dsn, "other-host:/srv/journals", SYSTEM_CLOCK) as other:
        own = mine.reserve_call("count", None, 1, (), None)
        theirs = other.reserve_call("count", None, 1, (), None)
    report = status_of(manifest, pg_store)
    runs = {run["run"]: run for run in report["runs"]}
    assert runs[theirs.run]["state"] == "owned by another instance"
    assert runs[theirs.run]["owner"] == "other-host:/srv/journals"
    assert runs[own.run]["state"] == "interrupted: resumed at the next start"
    instances = {i["instance"]: i for i in report["instances"]}
    assert instances[here]["this"] is True and instances[here]["unsettled_runs"] == 1
    assert instances["other-host:/srv/journals"]["this"] is False
    human = subprocess.run([sys.executable, "-m", "staal.supervisor.app.main", "status", str(manifest)],
                           capture_output=True, text=True, timeout=60, check=False,
                           env=env_for(pg_store))
    assert human.returncode == 0, human.stderr
    assert "owner:    other-host:/srv/journals" in human.stdout
    assert f"instance {here} (this one)" in human.stdout


def test_status_without_the_dsn_variable_says_which_and_prints_no_report(
        tmp_path: Path, pg_store: PgStore) -> None:
    (tmp_path / "count.py").write_text(COUNT)
    manifest = write_manifest(tmp_path, [tool("count", "count.py")], store=STORE)
    done = subprocess.run([sys.executable, "-m", "staal.supervisor.app.main", "status", str(manifest),
                           "--json"], capture_output=True, text=True, timeout=60, check=False,
                          env=server_env())
    assert done.returncode == 2 and done.stdout == ""
    assert f"${ENV}" in done.stderr and "not set" in done.stderr


def test_status_tells_a_live_lease_from_an_expired_one_and_one_given_up(
        tmp_path: Path, pg_store: PgStore) -> None:
    (tmp_path / "count.py").write_text(COUNT)
    manifest = write_manifest(tmp_path, [tool("count", "count.py")], store=STORE)
    PostgresLedger.open(pg_store.dsn, "stopped:/j", SYSTEM_CLOCK).close()
    dead = PostgresLedger.open(pg_store.dsn, "dead:/j", FixedClock(1_000_000))
    dead._conn.close()  # dies without giving its lease up
    with start(manifest, env_for(pg_store)) as served:
        assert served.call("count", {"n": 1})["structuredContent"] == {"result": {"n": 1}}
        leases = {i["instance"]: i["lease"] for i in status_of(manifest, pg_store)["instances"]}
        assert served.close() == 0
    assert leases == {"stopped:/j": "released", "dead:/j": "expired",
                      instance_name(tmp_path / "journals"): "live"}


def test_a_server_whose_identity_another_process_takes_stops_serving(
        tmp_path: Path, pg_store: PgStore) -> None:
    (tmp_path / "count.py").write_text(COUNT)
    manifest = write_manifest(tmp_path, [tool("count", "count.py")], store=STORE)
    with start(manifest, env_for(pg_store)) as served:
        assert served.call("count", {"n": 1})["structuredContent"] == {"result": {"n": 1}}
        with PostgresLedger.open(pg_store.dsn, instance_name(tmp_path / "journals"),
                                 SYSTEM_CLOCK):
            assert served.process.wait(timeout=WAIT) == 0  # at its next renewal, within 5 s
        (lost,) = served.events("lease_lost")
        assert "stops serving" in lost["message"]
